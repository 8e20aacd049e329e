//! A send whose first step meets a transport error before anything went out fails the call
//! and leaves no request behind (the worker's request table is as it was); one that meets it
//! after part of the message went out finishes its request with the error. The error is real:
//! the fault-injecting `fault_posix` transport (real shared memory behind a wrapper) drops the
//! sender's connection at its first send after `after` sends and arrivals (`drop=1`), so the
//! send that meets it is one of this test's, made while the endpoint still looks healthy.
//! Stream messages of two fragments take the request path (one fragment would go out on a
//! path without a request), and the receiver sends nothing back, so only the sender's interface ever
//! reaches its fault; of two runs whose fault comes one send apart, one meets it at a
//! message's first fragment and the other at its second.

use std::time::{Duration, Instant};
use ucp::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};

/// Two fragments over shared memory (its bcopy fragments are about 8 KiB).
const MSG: usize = 12 * 1024;

/// How a run's faulty send ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// The call failed: the fault came at the first fragment.
    Refused,
    /// The call gave a request that finished with the error.
    FailedMidway,
}

/// Sends stream messages until one meets the fault injected after `after` sends and arrivals;
/// checks that no request is left behind either way.
fn run(after: u32) -> Ended {
    std::env::set_var("RUCX_FAULT_INJECT", format!("seed=5,after={after},drop=1"));
    let ctx = Context::new(ContextParams {
        features: Features::STREAM,
        config: Some(UcpConfig {
            tls: vec!["fault_posix".into()],
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .expect("context over fault_posix");
    let mut a = Worker::new(&ctx).expect("sender");
    let mut b = Worker::new(&ctx).expect("receiver");
    let ab = a
        .ep_create(b.address(), EpParams::default())
        .expect("endpoint");
    let before = a.request_count();
    let end = Instant::now() + Duration::from_secs(60);
    for i in 0..after * 2 {
        let op = match a.stream_send(ab, &vec![i as u8; MSG]) {
            Ok(op) => op,
            Err(e) => {
                println!("after={after}: stream send {i} refused: {e}");
                assert_eq!(
                    a.request_count(),
                    before,
                    "after={after}: the refused send {i} left its request in the table"
                );
                return Ended::Refused;
            }
        };
        let status = match op {
            Op::Done(c) => c.status,
            Op::Pending(r) => {
                while !a.request_test(&r).expect("test") {
                    a.progress();
                    b.progress();
                    assert!(Instant::now() < end, "stream send {i} never finished");
                }
                a.wait(r).status
            }
        };
        b.progress();
        assert_eq!(a.request_count(), before, "send {i} left a request behind");
        if let Err(e) = status {
            println!("after={after}: stream send {i} failed midway: {e}");
            return Ended::FailedMidway;
        }
    }
    panic!("after={after}: no send met the dropped connection")
}

#[test]
fn a_send_that_fails_to_start_leaves_no_request() {
    // This test binary is its own process: the setting reaches no other test.
    let ends = [run(20), run(21)];
    assert!(
        ends.contains(&Ended::Refused),
        "neither run met the fault at a message's first fragment: {ends:?}"
    );
}
