//! Small frames sent straight from the stack (`am_short_iov`'s fast path), including one the
//! socket takes only part of.

use super::*;

/// Frames of 200 bytes while the receiver does not progress: the socket fills, one frame is
/// taken only in part (its rest is queued from the stack-built copy), later ones queue behind
/// it until back-pressure; then every frame arrives whole and in order.
#[test]
fn short_iov_frames_survive_a_partial_send() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    // Connection up first.
    run(&mut a, &mut sa, &mut b, &mut sb, |_, _| {
        ep.am_short(0, 0, b"x").unwrap().is_done()
    });
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    sb.ams.clear();
    let mut sent = 0u32;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tag = sent.to_le_bytes();
        let body = [sent as u8; 190];
        match ep.am_short_iov(4, &[&tag, b"", &body]).unwrap() {
            Outcome::Done(()) => sent += 1,
            Outcome::NoResource => break,
            Outcome::InProgress => unreachable!("am_short_iov is never in progress"),
        }
        assert!(Instant::now() < deadline, "watchdog: never saw NoResource");
    }
    assert!(sent > 10);
    // A partial send left bytes queued: the connection waits for "writable".
    assert_eq!(a.inner.borrow().waiting_out, 1);
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| {
        sb.ams.len() == sent as usize
    });
    for (i, (id, d)) in sb.ams.iter().enumerate() {
        assert_eq!(*id, 4);
        assert_eq!(d.len(), 194, "frame {i}");
        assert_eq!(d[..4], (i as u32).to_le_bytes(), "frame {i} out of order");
        assert!(d[4..].iter().all(|&x| x == i as u8), "frame {i} corrupted");
    }
}
