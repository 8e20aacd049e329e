//! Descriptors of the tcp transport, counted in `/proc/self/fd` (one test in this binary, so
//! no other test opens descriptors meanwhile): an interface holds two (its epoll set and its
//! listening socket, as UCX's tcp interface does), and a connected endpoint pair adds one
//! socket on each side.

use std::time::{Duration, Instant};
use uct::tcp::{TcpIface, TcpTransport};
use uct::{CompletionId, EpId, Error, EventSink, Iface, IfaceParams, Transport};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

struct Sink {
    ams: usize,
}

impl EventSink for Sink {
    fn am(&mut self, _id: u8, _data: &[u8]) {
        self.ams += 1;
    }
    fn completion(&mut self, _: CompletionId, _: uct::Result<u64>) {}
    fn ep_error(&mut self, ep: EpId, err: Error) {
        panic!("endpoint {ep:?} failed: {err}");
    }
}

fn open(md: &uct::tcp::TcpMd) -> TcpIface {
    TcpTransport::open_iface(
        md,
        &IfaceParams {
            device: "lo".into(),
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn an_interface_holds_two_descriptors_and_a_connection_one_per_side() {
    let md = TcpTransport::open_md("lo").unwrap();
    let before = open_fds();
    let mut a = open(&md);
    assert_eq!(open_fds() - before, 2, "descriptors of one tcp interface");
    let mut b = open(&md);
    assert_eq!(open_fds() - before, 4, "descriptors of two tcp interfaces");
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let (mut sa, mut sb) = (Sink { ams: 0 }, Sink { ams: 0 });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent = false;
    while sb.ams == 0 {
        if !sent {
            sent = uct::Endpoint::am_short(&mut ep, 1, 7, b"hello")
                .unwrap()
                .is_done();
        }
        a.progress(&mut sa);
        b.progress(&mut sb);
        assert!(Instant::now() < deadline, "watchdog: message not received");
    }
    assert_eq!(
        open_fds() - before,
        6,
        "two interfaces and one connection (a socket on each side)"
    );
    drop(ep);
    drop(a);
    drop(b);
    assert_eq!(open_fds(), before, "descriptors left after closing");
}
