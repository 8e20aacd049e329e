//! The forged-pid rendezvous read (RTS) and write (RTR, put mode) through ucp, over tcp and
//! over posix shared memory: an endpoint made from an address whose cma part names a victim
//! process fails with `RemoteAccess`, nothing of the victim reaches the receive, and the
//! victim's memory is unchanged. Tag offload is off (`RUCX_TM_ENABLE=n`, set before any
//! worker exists; this binary has a single test, so nothing races with it) so the rendezvous
//! goes through the endpoint's cma lane rather than the transport's own.

mod forged;

#[test]
fn ucp_forged_cma_pid_fails_the_endpoint_over_tcp_and_posix() {
    std::env::set_var("RUCX_TM_ENABLE", "n");
    for tl in ["tcp", "posix"] {
        forged::forged_read(tl);
        forged::forged_write(tl);
    }
}
