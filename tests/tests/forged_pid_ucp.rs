//! The forged-pid rendezvous read (RTS) and write (RTR, put mode) through ucp, over tcp and
//! over posix shared memory: an endpoint made from an address whose cma part names a victim
//! process fails with `RemoteAccess`, nothing of the victim reaches the receive, and the
//! victim's memory is unchanged. Tag offload is off (`RUCX_TM_ENABLE=n`, set before any
//! worker exists; this binary has a single test, so nothing races with it) so the rendezvous
//! goes through the endpoint's cma lane rather than the transport's own.

mod forged;

/// An address whose cma part names a process that is not a rucx process at all: the endpoint
/// is not created, with the reason, and that process is untouched.
fn forged_plain(am_tl: &str) {
    let mut victim = forged::Victim::spawn("plain");
    let ctx = ucp::Context::new(ucp::ContextParams {
        features: ucp::Features::TAG,
        config: Some(ucp::UcpConfig {
            tls: vec![am_tl.into(), "cma".into()],
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .unwrap();
    let a = ucp::Worker::new(&ctx).unwrap();
    let mut s = ucp::Worker::new(&ctx).unwrap();
    let forged = forged::forge_cma_pid(a.address(), victim.pid);
    let e = s
        .ep_create(&forged, ucp::EpParams::default())
        .map(|_| ())
        .expect_err("no endpoint through a forged pid");
    assert!(
        matches!(e, ucp::Error::Unreachable(_)) && e.to_string().contains("not a rucx process"),
        "{e}"
    );
    victim.assert_intact();
}

#[test]
fn ucp_forged_cma_pid_fails_the_endpoint_over_tcp_and_posix() {
    std::env::set_var("RUCX_TM_ENABLE", "n");
    for tl in ["tcp", "posix"] {
        forged::forged_read(tl);
        forged::forged_write(tl);
        forged_plain(tl);
    }
}
