//! A message announced but not yet received when its sender goes away: a rendezvous whose data
//! sits with the sender. The receive posted after the sender's endpoint failed must fail with
//! the endpoint's error (length and tag of the announced message), not wait for a later
//! message as if this one had never been sent. Two workers over tcp in this process; the
//! sender is dropped, which closes its connection.

use std::time::{Duration, Instant};
use ucp::{EpParams, Features, Op, Worker, TAG_MASK_EXACT};

const WATCHDOG: Duration = Duration::from_secs(60);

fn worker() -> Worker {
    rucx_tests::tcp_lo_worker(Features::TAG)
}

#[test]
fn a_rendezvous_whose_sender_went_fails_its_receive() {
    let mut a = worker();
    let mut b = worker();
    let ab = a.ep_create(b.address(), EpParams::default()).expect("ep");
    let big = vec![7u8; 4 << 20];
    let thresh = a.ep_proto_config(ab).expect("proto").tag_rndv_thresh;
    assert!(big.len() > thresh, "{} is not above {thresh}", big.len());
    // The announcement (RTS) reaches b, which has no receive posted.
    let send = a.tag_send(ab, 9, &big).expect("send");
    let end = Instant::now() + WATCHDOG;
    while b.tag_probe(9, TAG_MASK_EXACT, false).is_none() {
        assert!(
            Instant::now() < end,
            "watchdog: the announcement never arrived"
        );
        a.progress();
        b.progress();
    }
    assert_eq!(
        b.tag_probe(9, TAG_MASK_EXACT, false).expect("probe").len,
        big.len()
    );
    // The sender goes, its data with it.
    drop(send);
    drop(a);
    while b.stats().ep_failures == 0 && b.stats().unexp_lost == 0 {
        assert!(Instant::now() < end, "watchdog: b never saw its peer go");
        b.progress();
    }
    assert_eq!(b.stats().unexp_lost, 1);
    // Still announced (a probe sees it), and the receive that takes it fails at once.
    assert_eq!(
        b.tag_probe(9, TAG_MASK_EXACT, false).expect("probe").len,
        big.len()
    );
    let c = match b
        .tag_recv(vec![0; big.len()], 9, TAG_MASK_EXACT)
        .expect("recv")
    {
        Op::Done(c) => c,
        Op::Pending(mut r) => loop {
            assert!(Instant::now() < end, "watchdog: the receive never finished");
            b.progress();
            match b.request_take(r) {
                Ok(c) => break c,
                Err(again) => r = again,
            }
        },
    };
    assert!(c.status.is_err(), "{:?}", c.status);
    assert_eq!((c.len, c.tag), (big.len(), 9));
    assert!(b.tag_probe(9, TAG_MASK_EXACT, false).is_none());
    assert_eq!(b.unexpected_count(), 0);
}
