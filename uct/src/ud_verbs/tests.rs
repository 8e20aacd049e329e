//! ud_verbs tests. Those needing a device print a note and return when none exists (as on a
//! host without RDMA); `tests/rdma-vm/ci.sh` runs them for real on Soft-RoCE inside a VM.

use super::*;
use crate::caps::IfaceFlags;
use crate::ep::{CompletionId, Endpoint, PendingId};
use crate::iface::{EventSink, Iface};
use crate::rc_verbs::tests::kit::{self, Sides, Sink};
use std::rc::Rc;
use std::time::Instant;
use ucs::time::ManualClock;
use ucs::Outcome;

fn device() -> Option<String> {
    kit::device::<UdVerbs>()
}

fn cfg() -> UdConfig {
    UdConfig {
        tx_queue_len: 128,
        rx_queue_len: 256,
        tx_bufs: 256,
        rto: Duration::from_millis(5),
        retry_count: 4,
        peer_timeout: Duration::ZERO,
        drop: None,
    }
}

fn open(dev: &str, cfg: UdConfig) -> (RcVerbsMd, UdVerbsIface) {
    let md = UdVerbs::open_md(dev).unwrap();
    let iface = UdVerbsIface::open(&md, dev, cfg).unwrap();
    (md, iface)
}

/// Progresses both interfaces until `done` holds; a watchdog instead of a hang.
fn spin(
    a: &mut UdVerbsIface,
    b: &mut UdVerbsIface,
    sa: &mut Sink,
    sb: &mut Sink,
    what: &str,
    mut done: impl FnMut(&Sink, &Sink) -> bool,
) {
    let start = Instant::now();
    while !done(sa, sb) {
        a.progress(sa);
        b.progress(sb);
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
    }
}

/// Sends `n` numbered bcopy messages from `ep`, retrying NoResource with progress.
fn send_numbered(
    ep: &mut UdVerbsEp,
    a: &mut UdVerbsIface,
    b: &mut UdVerbsIface,
    sa: &mut Sink,
    sb: &mut Sink,
    n: u32,
    len: usize,
) {
    let start = Instant::now();
    for i in 0..n {
        loop {
            let r = ep
                .am_bcopy(3, |buf| {
                    buf[..4].copy_from_slice(&i.to_le_bytes());
                    buf[4..len].fill(i as u8);
                    len
                })
                .unwrap();
            if r != Outcome::NoResource {
                break;
            }
            a.progress(sa);
            b.progress(sb);
            assert!(start.elapsed() < Duration::from_secs(120), "stuck at {i}");
        }
    }
}

/// Every message once and in order, intact.
fn check_numbered(sink: &Sink, n: u32, len: usize) {
    assert_eq!(sink.ams.len(), n as usize, "message count");
    for (i, (id, m)) in sink.ams.iter().enumerate() {
        assert_eq!(*id, 3);
        assert_eq!(m.len(), len);
        assert_eq!(u32::from_le_bytes(m[..4].try_into().unwrap()), i as u32);
        assert!(m[4..].iter().all(|&b| b == i as u8), "message {i} corrupt");
    }
}

#[test]
fn config_vars_are_registered_and_checked() {
    let _ = UdVerbs::devices();
    for v in UD_VERBS_VARS.iter() {
        assert!(ucs::config::find(v.name).is_some(), "{}", v.name);
    }
    assert_eq!(parse_drop("0").unwrap(), None);
    assert_eq!(parse_drop("0.05,seed=9").unwrap(), Some((0.05, 9)));
    assert!(parse_drop("1.5").is_err());
    assert!(parse_drop("0.1,color=red").is_err());
    assert!(parse_drop("x").is_err());
}

#[test]
fn caps_and_addresses() {
    let Some(dev) = device() else { return };
    let (_md, iface) = open(&dev, cfg());
    let a = iface.attr();
    assert!(a.flags.contains(
        IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::CONNECT_TO_IFACE
            | IfaceFlags::PENDING
            | IfaceFlags::ERRHANDLE_PEER_FAILURE
    ));
    assert!(!a.flags.intersects(
        IfaceFlags::AM_ZCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::CONNECT_TO_EP
    ));
    assert_eq!(iface.iface_address().len(), wire::IfaceAddr::LEN);
    assert!(a.am.max_bcopy >= 256 - 10);
    assert!(iface
        .is_reachable(iface.device_address(), Some(iface.iface_address()))
        .is_ok());
    assert!(iface.is_reachable(&[1, 2, 3], None).is_err());
}

#[test]
fn connection_pairs_endpoints_and_acks_ride_on_replies() {
    let Some(dev) = device() else { return };
    let (_m1, mut a) = open(&dev, cfg());
    let (_m2, mut b) = open(&dev, cfg());
    let mut ab = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    // Not connected yet: back-pressure, then the pending request resumes.
    assert_eq!(ab.am_short(1, 7, b"x").unwrap(), Outcome::NoResource);
    ab.pending_add(PendingId(5)).unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    spin(&mut a, &mut b, &mut sa, &mut sb, "connection", |sa, _| {
        !sa.pend.is_empty()
    });
    assert_eq!(sa.pend[0].1, 5);
    // b's first endpoint towards a adopts the one a's request made: no request of its own.
    let mut ba = b
        .ep_create_connected(a.device_address(), a.iface_address())
        .unwrap();
    assert_eq!(ba.am_short(2, 1, b"pong?").unwrap(), Outcome::DONE);
    for i in 0..200u64 {
        loop {
            if ab.am_short(1, i, b"ping").unwrap() == Outcome::DONE {
                break;
            }
            a.progress(&mut sa);
            b.progress(&mut sb);
        }
        spin(&mut a, &mut b, &mut sa, &mut sb, "ping", |_, sb| {
            sb.ams.len() as u64 > i
        });
        loop {
            if ba.am_short(2, i, b"pong").unwrap() == Outcome::DONE {
                break;
            }
            a.progress(&mut sa);
            b.progress(&mut sb);
        }
        spin(&mut a, &mut b, &mut sa, &mut sb, "pong", |sa, _| {
            sa.ams.len() as u64 > i + 1
        });
    }
    assert_eq!(&sa.ams[0].1[8..], b"pong?");
    for (i, (_, m)) in sb.ams.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(m[..8].try_into().unwrap()), i as u64);
    }
    // Both windows drain with the acknowledgements the replies carried.
    assert_eq!(ab.flush(CompletionId(1)).unwrap(), Outcome::DONE);
    let r = ba.flush(CompletionId(2)).unwrap();
    if r == Outcome::InProgress {
        spin(&mut a, &mut b, &mut sa, &mut sb, "flush", |_, sb| {
            sb.comps.iter().any(|c| c.0 == 2)
        });
    }
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
}

#[test]
fn a_stream_fills_the_window_and_arrives_in_order() {
    let Some(dev) = device() else { return };
    let (_m1, mut a) = open(&dev, cfg());
    let (_m2, mut b) = open(&dev, cfg());
    let mut ab = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let len = a.attr().am.max_bcopy;
    send_numbered(&mut ab, &mut a, &mut b, &mut sa, &mut sb, 2000, len);
    spin(
        &mut a,
        &mut b,
        &mut sa,
        &mut sb,
        "2000 messages",
        |_, sb| sb.ams.len() >= 2000,
    );
    check_numbered(&sb, 2000, len);
    let too_long = ab.am_bcopy(3, |_| len + 1);
    assert!(matches!(too_long, Err(Error::MessageTooLong { .. })));
    assert!(ab.am_short(3, 0, &[0; state::MAX_SHORT]).is_err());
}

#[test]
fn lost_datagrams_are_resent_once_in_order() {
    let Some(dev) = device() else { return };
    let mut lossy = cfg();
    lossy.drop = Some((0.05, 42));
    lossy.retry_count = 50;
    let (_m1, mut a) = open(&dev, lossy.clone());
    let (_m2, mut b) = open(&dev, lossy);
    let mut ab = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let mut ba = b
        .ep_create_connected(a.device_address(), a.iface_address())
        .unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let start = Instant::now();
    send_numbered(&mut ab, &mut a, &mut b, &mut sa, &mut sb, 1000, 200);
    send_numbered(&mut ba, &mut b, &mut a, &mut sb, &mut sa, 300, 64);
    spin(
        &mut a,
        &mut b,
        &mut sa,
        &mut sb,
        "1300 messages",
        |sa, sb| sb.ams.len() >= 1000 && sa.ams.len() >= 300,
    );
    check_numbered(&sb, 1000, 200);
    check_numbered(&sa, 300, 64);
    let dropped = a.fault_dropped() + b.fault_dropped();
    println!(
        "dropped on purpose: {dropped}, all delivered in {:?}",
        start.elapsed()
    );
    assert!(dropped > 20, "the fault injector dropped only {dropped}");
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
    // Nothing more arrives later (no duplicate delivered).
    for _ in 0..2000 {
        a.progress(&mut sa);
        b.progress(&mut sb);
    }
    assert_eq!((sa.ams.len(), sb.ams.len()), (300, 1000));
}

#[test]
fn a_silent_peer_fails_the_endpoint_after_bounded_retries() {
    let Some(dev) = device() else { return };
    let (_m1, mut a) = open(&dev, cfg());
    let clock = ManualClock::new();
    a.set_clock(Rc::new(clock.clone()));
    let (_m2, mut b) = open(&dev, cfg());
    let mut ab = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    spin(&mut a, &mut b, &mut sa, &mut sb, "connection", |_, _| {
        ab.am_short(1, 0, b"first").unwrap() == Outcome::DONE
    });
    spin(&mut a, &mut b, &mut sa, &mut sb, "first", |_, sb| {
        !sb.ams.is_empty()
    });
    let id = ab.id();
    drop(b); // the peer disappears
    assert_eq!(ab.am_short(1, 1, b"lost").unwrap(), Outcome::DONE);
    assert_eq!(ab.flush(CompletionId(9)).unwrap(), Outcome::InProgress);
    // No real time passes: only the hand-moved clock drives the retries.
    for _ in 0..100 {
        clock.advance(Duration::from_millis(300));
        a.progress(&mut sa);
        if !sa.errors.is_empty() {
            break;
        }
    }
    assert_eq!(sa.errors.len(), 1, "one endpoint error");
    assert_eq!(sa.errors[0].0, id);
    assert!(matches!(sa.errors[0].1, Error::PeerFailure(_)));
    assert!(matches!(sa.comps[0], (9, Err(Error::PeerFailure(_)))));
    assert!(ab.am_short(1, 2, b"after").is_err());
}

#[test]
fn check_probes_an_idle_peer() {
    let Some(dev) = device() else { return };
    let (_m1, mut a) = open(&dev, cfg());
    let clock = ManualClock::new();
    a.set_clock(Rc::new(clock.clone()));
    let (_m2, mut b) = open(&dev, cfg());
    let mut ab = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    spin(&mut a, &mut b, &mut sa, &mut sb, "connection", |_, _| {
        ab.is_connected()
    });
    // A live peer acknowledges the probe; nothing reaches its application.
    ab.check().unwrap();
    assert_eq!(ab.flush(CompletionId(1)).unwrap(), Outcome::InProgress);
    spin(
        &mut a,
        &mut b,
        &mut sa,
        &mut sb,
        "probe acknowledged",
        |sa, _| !sa.comps.is_empty(),
    );
    assert_eq!(sa.comps[0], (1, Ok(0)));
    assert!(sb.ams.is_empty(), "a probe was delivered: {:?}", sb.ams);
    // A peer that is gone: the probe's retries fail the idle endpoint.
    drop(b);
    ab.check().unwrap();
    for _ in 0..100 {
        clock.advance(Duration::from_millis(300));
        a.progress(&mut sa);
        if !sa.errors.is_empty() {
            break;
        }
    }
    assert_eq!(sa.errors.len(), 1);
    assert!(matches!(sa.errors[0].1, Error::PeerFailure(_)));
    assert!(ab.check().is_err());
}

#[test]
fn an_unreachable_interface_fails_the_connection() {
    let Some(dev) = device() else { return };
    let (_m1, mut a) = open(&dev, cfg());
    let clock = ManualClock::new();
    a.set_clock(Rc::new(clock.clone()));
    let nobody = wire::IfaceAddr { qpn: 0xfffff0 }.encode();
    let me = a.device_address().to_vec();
    let ab = a.ep_create_connected(&me, &nobody).unwrap();
    let mut sa = Sink::default();
    for _ in 0..100 {
        clock.advance(Duration::from_millis(300));
        a.progress(&mut sa);
        if !sa.errors.is_empty() {
            break;
        }
    }
    assert_eq!(sa.errors.len(), 1);
    assert_eq!(sa.errors[0].0, ab.id());
}

#[test]
fn endpoint_memory_does_not_grow_with_traffic_or_peers() {
    let Some(dev) = device() else { return };
    let (_m, mut a) = open(&dev, cfg());
    let mut peers = Vec::new();
    let mut eps = Vec::new();
    for _ in 0..8 {
        let (m, p) = open(&dev, cfg());
        eps.push(
            a.ep_create_connected(p.device_address(), p.iface_address())
                .unwrap(),
        );
        peers.push((p, m));
    }
    let inner = a.inner.borrow();
    let caps: Vec<usize> = inner.eps.iter().map(|(_, e)| e.tx.capacity()).collect();
    assert!(caps.iter().all(|&c| c == state::TX_WINDOW), "{caps:?}");
    assert_eq!(inner.eps.len(), 8);
}

/// The conformance-suite fixture for ud_verbs: two interfaces on the first device, endpoints
/// connected to the interfaces.
pub(crate) struct UdFixture {
    // Field order is drop order: endpoints before their interfaces.
    eps: Vec<UdVerbsEp>,
    sides: Sides<UdVerbs>,
}

impl crate::testing::Fixture for UdFixture {
    type Md = RcVerbsMd;
    type Iface = UdVerbsIface;
    type Ep = UdVerbsEp;

    fn new() -> Result<Self> {
        let mut fx = UdFixture {
            eps: Vec::new(),
            sides: Sides::open()?,
        };
        let e01 = fx.connect(0, 1)?;
        let e10 = fx.connect(1, 0)?;
        fx.eps = vec![e01, e10];
        // The suite expects connected endpoints: finish the exchange of connection requests.
        let start = Instant::now();
        let mut sink = Sink::default();
        while !(fx.eps[0].is_connected() && fx.eps[1].is_connected()) {
            fx.sides.iface(0).progress(&mut sink);
            fx.sides.iface(1).progress(&mut sink);
            if start.elapsed() > crate::testing::WATCHDOG {
                return Err(Error::Timeout("ud_verbs endpoints did not connect".into()));
            }
        }
        Ok(fx)
    }
    fn num_ifaces(&self) -> usize {
        self.sides.len()
    }
    fn add_iface(&mut self) -> Result<usize> {
        self.sides.add()
    }
    fn connect(&mut self, from: usize, to: usize) -> Result<UdVerbsEp> {
        let dev = self.sides.iface_ref(to).device_address().to_vec();
        let ia = self.sides.iface_ref(to).iface_address().to_vec();
        self.sides.iface(from).ep_create_connected(&dev, &ia)
    }
    fn iface(&mut self, i: usize) -> &mut UdVerbsIface {
        self.sides.iface(i)
    }
    fn md(&self, i: usize) -> &RcVerbsMd {
        self.sides.md(i)
    }
    fn ep(&mut self, from: usize) -> &mut UdVerbsEp {
        &mut self.eps[from]
    }
    fn progress<S: EventSink>(&mut self, i: usize, sink: &mut S) -> usize {
        self.sides.iface(i).progress(sink)
    }
}

mod conformance {
    crate::uct_conformance_tests!(suite, crate::ud_verbs::tests::UdFixture);
}
