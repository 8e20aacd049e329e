//! The event fd wakes a sleeping receiver.

use super::*;

fn poll_readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return n == 1 && p.revents & libc::POLLIN != 0;
    }
}

/// Event fd: after arming interface 1 for receives, a message sent to it makes its fd readable.
pub fn event_fd_wakes_receiver<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.event_flags.contains(EventFlags::FD | EventFlags::RECV) {
        skip!("no event fd for receives");
    }
    if !a
        .flags
        .intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY)
    {
        skip!("no AM_SHORT or AM_BCOPY");
    }
    let mut rec = Recorder::new();
    // Warm up: make sure the connection is established and idle.
    run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
        send_seq(fx.ep(0), &a, 0)
    })
    .expect("warm-up send");
    wait_ams(&mut fx, &mut rec, 1);
    let fd = fx.iface(1).event_fd().expect("event fd");
    let start = Instant::now();
    loop {
        match fx.iface(1).event_arm(EventFlags::RECV) {
            Ok(()) => break,
            Err(Error::Busy(_)) => {
                fx.progress_all(&mut rec);
            }
            Err(e) => panic!("event_arm(RECV): {e}"),
        }
        assert!(start.elapsed() < WATCHDOG, "watchdog: event_arm stays Busy");
    }
    // Send, progressing only the sender if it needs resources.
    let mut tx = Recorder::new();
    loop {
        match send_seq(fx.ep(0), &a, 1).expect("send") {
            Outcome::Done(()) => break,
            Outcome::InProgress => panic!("an active message send gave InProgress"),
            Outcome::NoResource => {
                fx.progress(0, &mut tx);
            }
        }
        assert!(start.elapsed() < WATCHDOG, "watchdog: send after arm");
    }
    // Wait for the fd, progressing only the sender (a transport may need that to push data
    // out); the receiver is not progressed, so its armed state is left alone.
    while !poll_readable(fd, 10) {
        fx.progress(0, &mut tx);
        assert!(
            start.elapsed() < WATCHDOG,
            "watchdog: the receiver's event fd did not become readable"
        );
    }
    wait_ams(&mut fx, &mut rec, 2);
    assert_eq!(seq_of(&rec.ams[1].1), 1);
}
