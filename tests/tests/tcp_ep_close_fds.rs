//! Destroying tcp endpoints releases their sockets promptly, counted in `/proc/self/fd` (one
//! test in this binary, so no other test opens descriptors meanwhile): a hub interface with an
//! endpoint to each of `N` peer interfaces, each peer with an endpoint back (both directions
//! ride one connection per pair).
//!
//! - Peers' endpoints destroyed first, then the hub's: each hub endpoint's socket closes in
//!   its drop, with no progress call in between (the peer detached first).
//! - Peers' endpoints destroyed, then the hub's with no hub progress call at all in between
//!   (each peer's `Detach` still unread in the hub's socket): each hub socket still closes in
//!   its endpoint's drop.
//! - Hub's endpoints destroyed first: the connections stay while the peers' endpoints use
//!   them; once those are destroyed too, every socket closes during progress, while the peer
//!   interfaces still exist (nobody waits for a peer process to exit).

use std::time::{Duration, Instant};
use uct::tcp::{TcpEp, TcpIface, TcpMd, TcpTransport};
use uct::{CompletionId, Endpoint, EpId, Error, EventSink, Iface, IfaceParams, Transport};

const N: usize = 20;
const WATCHDOG: Duration = Duration::from_secs(30);

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[derive(Default)]
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

fn open(md: &TcpMd) -> TcpIface {
    TcpTransport::open_iface(
        md,
        &IfaceParams {
            device: "lo".into(),
            ..Default::default()
        },
    )
    .expect("tcp interface on lo")
}

struct World {
    hub: TcpIface,
    hub_sink: Sink,
    peers: Vec<(TcpIface, Sink)>,
}

impl World {
    fn progress(&mut self) {
        self.hub.progress(&mut self.hub_sink);
        for (p, s) in &mut self.peers {
            p.progress(s);
        }
    }
    /// Progresses everything until `done`, with a watchdog.
    fn until(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + WATCHDOG;
        while !done(self) {
            self.progress();
            assert!(Instant::now() < deadline, "watchdog: {what}");
        }
    }
}

/// The hub with an endpoint to each peer, each peer with one back, and one message each way
/// on every pair (so every connection is established and carries both endpoints).
fn build(md: &TcpMd) -> (World, Vec<TcpEp>, Vec<TcpEp>) {
    let mut w = World {
        hub: open(md),
        hub_sink: Sink::default(),
        peers: (0..N).map(|_| (open(md), Sink::default())).collect(),
    };
    let mut hub_eps = Vec::new();
    for (p, _) in &w.peers {
        let ep = w
            .hub
            .ep_create_connected(p.device_address(), p.iface_address())
            .expect("hub endpoint");
        hub_eps.push(ep);
    }
    let mut left = N;
    let deadline = Instant::now() + WATCHDOG;
    let mut done = [false; N];
    while left > 0 {
        for (i, ep) in hub_eps.iter_mut().enumerate() {
            if !done[i]
                && ep
                    .am_short(1, i as u64, b"hub")
                    .expect("am_short")
                    .is_done()
            {
                done[i] = true;
                left -= 1;
            }
        }
        w.progress();
        assert!(Instant::now() < deadline, "watchdog: hub sends");
    }
    w.until("messages at the peers", |w| {
        w.peers.iter().all(|(_, s)| s.ams == 1)
    });
    let hub_addr = (w.hub.device_address(), w.hub.iface_address());
    let mut peer_eps = Vec::new();
    for (p, _) in &mut w.peers {
        let mut ep = p
            .ep_create_connected(hub_addr.0, hub_addr.1)
            .expect("peer endpoint");
        assert!(ep.am_short(1, 0, b"peer").expect("am_short").is_done());
        peer_eps.push(ep);
    }
    w.until("messages at the hub", |w| w.hub_sink.ams == N);
    assert_eq!(
        w.hub.connection_count(),
        N,
        "one connection per pair at the hub"
    );
    for (p, _) in &w.peers {
        assert_eq!(
            p.connection_count(),
            1,
            "the reply endpoint rides the hub's connection"
        );
    }
    (w, hub_eps, peer_eps)
}

/// After the hub's endpoints closed their sockets: the peers' ends close too, only the
/// interfaces' descriptors are left, and none once the interfaces are destroyed (`base`: the
/// count before [`build`]).
fn hub_closed_then_peers(mut w: World, base: usize) {
    assert_eq!(w.hub.connection_count(), 0);
    w.until("the peers' ends closed", |w| {
        w.peers.iter().all(|(p, _)| p.connection_count() == 0)
    });
    assert_eq!(
        open_fds() - base,
        2 * (N + 1),
        "only the interfaces' descriptors are left"
    );
    drop(w);
    assert_eq!(
        open_fds(),
        base,
        "descriptors left after destroying the interfaces"
    );
}

#[test]
fn destroyed_endpoints_release_their_sockets() {
    let md = TcpTransport::open_md("lo").expect("tcp md");
    let base = open_fds();

    // Peers' endpoints first.
    let (mut w, hub_eps, peer_eps) = build(&md);
    let full = open_fds();
    assert_eq!(
        full - base,
        2 * (N + 1) + 2 * N,
        "interfaces and both ends of N connections"
    );
    drop(peer_eps);
    w.until("the peers' detach at the hub", |w| {
        w.peers.iter().all(|(p, _)| p.connection_count() == 1) && w.hub_sink.ams == N
    });
    // Let the hub read every peer's detach.
    for _ in 0..100 {
        w.progress();
    }
    let before_drop = open_fds();
    assert_eq!(
        before_drop, full,
        "the hub's endpoints still hold their connections"
    );
    for (k, ep) in hub_eps.into_iter().enumerate() {
        drop(ep);
        // No progress call: the socket closed in the drop.
        assert_eq!(
            open_fds(),
            before_drop - (k + 1),
            "the hub's socket of endpoint {k} closed when the endpoint was destroyed"
        );
    }
    hub_closed_then_peers(w, base);

    // Peers' endpoints first, the hub not progressed in between.
    let (w, hub_eps, peer_eps) = build(&md);
    let full = open_fds();
    drop(peer_eps);
    for (k, ep) in hub_eps.into_iter().enumerate() {
        drop(ep);
        assert_eq!(
            open_fds(),
            full - (k + 1),
            "the hub's socket of endpoint {k} closed in the drop, its peer's detach unread before"
        );
    }
    hub_closed_then_peers(w, base);

    // Hub's endpoints first.
    let (mut w, hub_eps, peer_eps) = build(&md);
    drop(hub_eps);
    for _ in 0..100 {
        w.progress();
    }
    assert_eq!(
        open_fds() - base,
        2 * (N + 1) + 2 * N,
        "the peers' endpoints still use the connections"
    );
    drop(peer_eps);
    w.until("every connection closed", |w| {
        w.hub.connection_count() == 0 && w.peers.iter().all(|(p, _)| p.connection_count() == 0)
    });
    assert_eq!(
        open_fds() - base,
        2 * (N + 1),
        "only the interfaces' descriptors are left, before any peer interface is destroyed"
    );
    drop(w);
    assert_eq!(
        open_fds(),
        base,
        "descriptors left after destroying the interfaces"
    );
}
