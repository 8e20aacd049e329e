//! Two workers in one process for the unit tests, over the transports they name.

use crate::{Context, ContextParams, EpHandle, EpParams, Features, UcpConfig, Worker};

/// Two workers over `tls` with `features` (no keepalive, no loop-back across workers); the
/// first has an endpoint to the second.
pub(crate) fn pair(tls: &[&str], features: Features) -> (Worker, Worker, EpHandle) {
    let ctx = Context::new(ContextParams {
        features,
        config: Some(UcpConfig {
            tls: tls.iter().map(|t| t.to_string()).collect(),
            keepalive_interval: None,
            self_across_workers: false,
            ..Default::default()
        }),
    })
    .expect("context");
    let mut a = Worker::new(&ctx).expect("worker a");
    let b = Worker::new(&ctx).expect("worker b");
    let ep = a.ep_create(b.address(), EpParams::default()).expect("ep");
    (a, b, ep)
}
