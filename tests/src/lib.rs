//! End-to-end tests live in tests/tests/; this library holds what several of them share.
#![warn(missing_docs)]

/// A ucp worker of its own context with `features` over tcp on the loopback device only
/// (`lo`), as the in-process tcp tests use.
pub fn tcp_lo_worker(features: ucp::Features) -> ucp::Worker {
    let ctx = ucp::Context::new(ucp::ContextParams {
        features,
        config: Some(ucp::UcpConfig {
            tls: vec!["tcp".into()],
            net_devices: vec!["lo".into()],
            ..Default::default()
        }),
    })
    .expect("context");
    ucp::Worker::new(&ctx).expect("worker")
}
