//! Descriptors of a shared-memory interface: while nobody sleeps on it, a sysv interface holds
//! one descriptor (its wake-up socket) and a posix one two (with its memfd segment), as in UCX.
//! The first `event_fd` call adds its epoll set (wake-up socket and peers' pidfds), and a
//! receiver armed on that set is woken by a message.
//!
//! One test in its own binary: it counts `/proc/self/fd`, which other tests of the same
//! process would disturb.

use uct::{Endpoint, Error, EventFlags, EventSink, Iface};

/// Interfaces opened of each transport.
const K: usize = 20;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Whether `fd` becomes readable within `ms` milliseconds.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: FFI with one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

#[derive(Default)]
struct Inbox {
    msgs: Vec<(u8, Vec<u8>)>,
}

impl EventSink for Inbox {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.msgs.push((id, data.to_vec()));
    }
    fn completion(&mut self, _: uct::CompletionId, _: uct::Result<u64>) {}
    fn ep_error(&mut self, ep: uct::EpId, err: Error) {
        panic!("endpoint {ep:?} failed: {err}");
    }
}

#[test]
fn an_interface_makes_its_epoll_set_only_when_someone_sleeps_on_it() {
    // The first interface of the process opens its grant socket: count from after it.
    let _first = uct::open("sysv", "memory").expect("open sysv");
    for (tl, per_iface) in [("sysv", 1), ("posix", 2)] {
        let before = open_fds();
        let mut ifaces: Vec<_> = (0..K)
            .map(|_| uct::open(tl, "memory").expect("open a shared-memory interface"))
            .collect();
        let opened = open_fds();
        assert_eq!(
            opened - before,
            K * per_iface,
            "{tl}: {K} interfaces that nobody sleeps on hold {per_iface} descriptor(s) each"
        );

        let fds: Vec<i32> = ifaces
            .iter()
            .map(|(_, i)| i.event_fd().expect("an event fd"))
            .collect();
        assert_eq!(ifaces[0].1.event_fd(), Some(fds[0]), "one set, made once");
        assert_eq!(
            open_fds() - opened,
            K,
            "{tl}: the first event_fd call adds one epoll set per interface"
        );

        // Interface 1 sends to interface 0, which sleeps on its event fd.
        let (head, tail) = ifaces.split_at_mut(1);
        let rx = &mut head[0].1;
        let tx = &mut tail[0].1;
        let mut ep = tx
            .ep_create_connected(rx.device_address(), rx.iface_address())
            .expect("endpoint");
        rx.event_arm(EventFlags::RECV)
            .expect("arm an idle interface");
        assert!(!readable(fds[0], 0), "{tl}: nothing to wake for yet");
        assert_eq!(ep.am_short(3, 42, b"wake").unwrap(), uct::Outcome::DONE);
        assert!(
            readable(fds[0], 30_000),
            "{tl}: a message wakes the armed receiver"
        );
        let mut inbox = Inbox::default();
        while inbox.msgs.is_empty() {
            rx.progress(&mut inbox);
        }
        let mut want = 42u64.to_le_bytes().to_vec();
        want.extend_from_slice(b"wake");
        assert_eq!(inbox.msgs, vec![(3, want)]);
    }
}
