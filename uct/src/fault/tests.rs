//! The fault wrapper over real tcp (loopback) and posix shared memory: the knobs parse; faults
//! that keep the transport contract (stall, partial, delay) pass the whole conformance suite;
//! each fault kind does what its knob says, and the same seed repeats the same faults.

use super::*;
use crate::iface::Iface;
use crate::mm::PosixTransport;
use crate::tcp::TcpTransport;
use crate::testing::{Recorder, TlPair, WATCHDOG};
use crate::Endpoint;
use crate::{CompletionId, PendingId, TlRoles};
use ucs::Outcome;

/// Calls `step` until it says done, failing after the watchdog.
fn until(mut step: impl FnMut() -> bool, what: &str) {
    let start = std::time::Instant::now();
    while !step() {
        assert!(start.elapsed() < WATCHDOG, "watchdog: {what} never came");
    }
}

#[test]
fn knobs_parse_and_bad_values_name_the_knob() {
    let c = FaultConfig::parse("seed=7, stall=0.5,partial=1,drop=0,die=0,delay=0.25,hold=9,dup=0.1,reorder=1,ids=6-9+11,after=3")
        .unwrap();
    assert_eq!(c.seed, 7);
    assert_eq!(c.after, 3);
    assert_eq!((c.stall, c.partial, c.delay, c.hold), (0.5, 1.0, 0.25, 9));
    assert_eq!((c.dup, c.reorder), (0.1, 1.0));
    assert_eq!(c.ids, 0b1011_1100_0000);
    assert_eq!(FaultConfig::parse("").unwrap(), FaultConfig::default());
    for (bad, names) in [
        ("stall=2", "stall"),
        ("dup=x", "dup"),
        ("seed=-1", "seed"),
        ("ids=40", "ids"),
        ("ids=9-6", "ids"),
        ("bogus=1", "bogus"),
        ("stall", "stall"),
    ] {
        let e = FaultConfig::parse(bad).unwrap_err().to_string();
        assert!(e.contains(names) && e.contains("knobs:"), "{bad}: {e}");
    }
}

/// `T` behind the wrapper with faults that keep the transport contract (late sends, held
/// arrivals, back-pressure), for the conformance suite.
struct Lawful<T>(std::marker::PhantomData<T>);

impl<T: Wrappable> Transport for Lawful<T> {
    const NAME: &'static str = T::FAULT_NAME;
    const ROLES: TlRoles = T::ROLES;
    type Md = T::Md;
    type Iface = FaultIface<T::Iface>;
    type Ep = FaultEp<T::Ep>;
    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        T::devices()
    }
    fn open_md(device: &str) -> Result<T::Md> {
        T::open_md(device)
    }
    fn open_iface(md: &T::Md, params: &IfaceParams) -> Result<Self::Iface> {
        let cfg = FaultConfig::parse("seed=3,after=1,stall=0.2,partial=0.2,delay=0.05,hold=5")?;
        Ok(FaultIface::new(
            T::open_iface(md, params)?,
            T::FAULT_NAME,
            cfg,
        ))
    }
}

crate::uct_conformance_tests!(tcp_conformance, TlPair<Lawful<TcpTransport>>);
crate::uct_conformance_tests!(posix_conformance, TlPair<Lawful<PosixTransport>>);

/// A pair of `T` where interface 1 (the receiver) and endpoint 0→1 carry the faults of `spec`.
struct Pair<T: Wrappable> {
    tx: FaultEp<T::Ep>,
    _back: T::Ep,
    tx_iface: FaultIface<T::Iface>,
    rx_iface: FaultIface<T::Iface>,
    _mds: (T::Md, T::Md),
}

fn pair<T: Wrappable>(spec: &str) -> Pair<T> {
    let cfg = FaultConfig::parse(spec).unwrap();
    let dev = match T::NAME {
        "tcp" => "lo".to_string(),
        _ => T::devices().unwrap()[0].name.clone(),
    };
    let p = IfaceParams {
        device: dev.clone(),
        ..Default::default()
    };
    let (m0, m1) = (T::open_md(&dev).unwrap(), T::open_md(&dev).unwrap());
    let mut tx_iface = FaultIface::new(T::open_iface(&m0, &p).unwrap(), "fault", cfg.clone());
    let mut rx_iface = FaultIface::new(T::open_iface(&m1, &p).unwrap(), "fault", cfg);
    let (d1, a1) = (
        rx_iface.device_address().to_vec(),
        rx_iface.iface_address().to_vec(),
    );
    let (d0, a0) = (
        tx_iface.device_address().to_vec(),
        tx_iface.iface_address().to_vec(),
    );
    let tx = tx_iface.ep_create_connected(&d1, &a1).unwrap();
    let back = rx_iface.ep_create_connected(&d0, &a0).unwrap().st_take();
    Pair {
        tx,
        _back: back,
        tx_iface,
        rx_iface,
        _mds: (m0, m1),
    }
}

impl<E: Endpoint> FaultEp<E> {
    /// The wrapped endpoint (tests keep a reverse endpoint without faults).
    fn st_take(self) -> E {
        self.take_inner().unwrap()
    }
}

impl<T: Wrappable> Pair<T> {
    /// Sends `n` active messages `id`, `[i; 1 + i % 7]` as header+payload, retrying on
    /// `NoResource`; gives the results of the calls that did not retry.
    fn send(&mut self, id: u8, n: u8, rec: &mut Recorder) -> Vec<Result<Outcome>> {
        let mut out = Vec::new();
        for i in 0..n {
            let payload = vec![i; 1 + i as usize % 7];
            loop {
                let r = self.tx.am_short(id, i as u64, &payload);
                if matches!(r, Ok(Outcome::NoResource)) {
                    self.tx_iface.progress(rec);
                    self.rx_iface.progress(rec);
                    continue;
                }
                out.push(r);
                break;
            }
        }
        out
    }
    /// Progresses both sides until `rec` holds `n` active messages.
    fn recv(&mut self, rec: &mut Recorder, n: usize) {
        let (tx, rx) = (&mut self.tx_iface, &mut self.rx_iface);
        until(
            || {
                tx.progress(rec);
                rx.progress(rec);
                rec.ams.len() >= n
            },
            "active messages",
        );
    }
}

fn header_of(am: &(u8, Vec<u8>)) -> u64 {
    u64::from_le_bytes(am.1[..8].try_into().unwrap())
}

fn dup_only_touches_named_ids<T: Wrappable>() {
    let mut p = pair::<T>("seed=5,dup=1,ids=5");
    let mut rec = Recorder::new();
    p.send(5, 4, &mut rec);
    p.send(6, 4, &mut rec);
    p.recv(&mut rec, 12);
    let got: Vec<(u8, u64)> = rec.ams.iter().map(|a| (a.0, header_of(a))).collect();
    assert_eq!(
        got,
        [
            (5, 0),
            (5, 0),
            (5, 1),
            (5, 1),
            (5, 2),
            (5, 2),
            (5, 3),
            (5, 3),
            (6, 0),
            (6, 1),
            (6, 2),
            (6, 3)
        ]
    );
    assert_eq!(p.rx_iface.stats().dups, 4);
}

#[test]
fn tcp_dup_only_touches_named_ids() {
    dup_only_touches_named_ids::<TcpTransport>();
}

#[test]
fn posix_dup_only_touches_named_ids() {
    dup_only_touches_named_ids::<PosixTransport>();
}

fn reorder_swaps_with_the_next<T: Wrappable>() {
    let mut p = pair::<T>("seed=5,reorder=1,ids=5");
    let mut rec = Recorder::new();
    // 5:0 waits behind the next message, 6:0; then 5:1 is held until the end of the progress
    // call that brought it (no message follows it).
    p.send(5, 1, &mut rec);
    p.send(6, 1, &mut rec);
    p.recv(&mut rec, 2);
    p.send(5, 2, &mut rec);
    p.recv(&mut rec, 4);
    let got: Vec<(u8, u64)> = rec.ams.iter().map(|a| (a.0, header_of(a))).collect();
    assert_eq!(got[..2], [(6, 0), (5, 0)]);
    let mut tail = got[2..].to_vec();
    tail.sort_unstable();
    assert_eq!(tail, [(5, 0), (5, 1)]);
    assert!(p.rx_iface.stats().reorders >= 2);
}

#[test]
fn tcp_reorder_swaps_with_the_next() {
    reorder_swaps_with_the_next::<TcpTransport>();
}

#[test]
fn posix_reorder_swaps_with_the_next() {
    reorder_swaps_with_the_next::<PosixTransport>();
}

fn delay_holds_in_order<T: Wrappable>() {
    let mut p = pair::<T>("seed=5,delay=1,hold=40");
    let mut rec = Recorder::new();
    p.send(9, 20, &mut rec);
    p.recv(&mut rec, 20);
    let got: Vec<u64> = rec.ams.iter().map(header_of).collect();
    assert_eq!(got, (0..20).collect::<Vec<u64>>());
    assert!(p.rx_iface.stats().delays >= 1);
    // A hold keeps the receiver awake: arming the event fd says there is work.
    let mut rec2 = Recorder::new();
    p.send(9, 1, &mut rec2);
    until(
        || {
            p.rx_iface.progress(&mut rec2);
            !p.rx_iface.rx_idle()
        },
        "a held arrival",
    );
    if p.rx_iface.event_fd().is_some() {
        assert!(matches!(
            p.rx_iface.event_arm(crate::EventFlags::RECV),
            Err(Error::Busy(_))
        ));
    }
}

#[test]
fn tcp_delay_holds_in_order() {
    delay_holds_in_order::<TcpTransport>();
}

#[test]
fn posix_delay_holds_in_order() {
    delay_holds_in_order::<PosixTransport>();
}

fn stall_gives_no_resource_then_pending<T: Wrappable>() {
    let mut p = pair::<T>("seed=5,stall=1");
    let mut rec = Recorder::new();
    assert_eq!(p.tx.am_short(3, 1, b"x").unwrap(), Outcome::NoResource);
    p.tx.pending_add(PendingId(77)).unwrap();
    p.tx_iface.progress(&mut rec);
    assert_eq!(rec.pending, [(p.tx.id(), PendingId(77))]);
    // Purged requests are handed back and never retried.
    p.tx.pending_add(PendingId(78)).unwrap();
    let mut purged = Vec::new();
    p.tx.pending_purge(&mut |r| purged.push(r));
    assert_eq!(purged, [PendingId(78)]);
    p.tx_iface.progress(&mut rec);
    assert_eq!(rec.pending.len(), 1);
    assert!(p.tx_iface.stats().stalls >= 1);
}

#[test]
fn tcp_stall_gives_no_resource_then_pending() {
    stall_gives_no_resource_then_pending::<TcpTransport>();
}

#[test]
fn posix_stall_gives_no_resource_then_pending() {
    stall_gives_no_resource_then_pending::<PosixTransport>();
}

fn partial_sends_go_out_later_in_order<T: Wrappable>() {
    let mut p = pair::<T>("seed=5,partial=1");
    let mut rec = Recorder::new();
    // A partial send is reported done but has not reached the transport: the receiver sees
    // nothing until the sender progresses or sends again.
    let r = p.tx.am_bcopy(4, |b: &mut [u8]| {
        b[..3].copy_from_slice(&[0, 0, 0]);
        3
    });
    assert_eq!(r.unwrap(), Outcome::Done(3));
    for _ in 0..200 {
        p.rx_iface.progress(&mut rec);
    }
    assert!(
        rec.ams.is_empty(),
        "a partial send arrived without progress"
    );
    let mut sent = 1u8;
    while sent < 10 {
        let r =
            p.tx.am_bcopy(4, |b: &mut [u8]| {
                b[..3].copy_from_slice(&[sent, sent, sent]);
                3
            })
            .unwrap();
        match r {
            Outcome::Done(3) => sent += 1,
            Outcome::NoResource => {
                p.tx_iface.progress(&mut rec);
            }
            o => panic!("{o:?}"),
        }
    }
    // Flush waits for the last one to go out.
    let mut flushed = false;
    until(
        || {
            if !flushed {
                flushed = p.tx.flush(CompletionId(1)).unwrap() != Outcome::NoResource;
            }
            p.tx_iface.progress(&mut rec);
            p.rx_iface.progress(&mut rec);
            flushed && rec.ams.len() >= 10
        },
        "partial sends",
    );
    let got: Vec<u8> = rec.ams.iter().map(|a| a.1[0]).collect();
    assert_eq!(got, (0..10).collect::<Vec<u8>>());
    assert!(rec.ams.iter().all(|a| a.1.len() == 3));
    assert_eq!(p.tx_iface.stats().partials, 10);
}

#[test]
fn tcp_partial_sends_go_out_later_in_order() {
    partial_sends_go_out_later_in_order::<TcpTransport>();
}

#[test]
fn posix_partial_sends_go_out_later_in_order() {
    partial_sends_go_out_later_in_order::<PosixTransport>();
}

fn drop_fails_the_endpoint_once<T: Wrappable>() {
    let mut p = pair::<T>("seed=5,drop=1,after=3");
    let mut rec = Recorder::new();
    let r = p.send(2, 5, &mut rec);
    // `after=3`: three messages go through, then the connection is gone for good.
    assert!(r[..3].iter().all(|r| r.is_ok()), "{r:?}");
    assert!(r[3..]
        .iter()
        .all(|r| matches!(r, Err(Error::ConnectionReset(_)))));
    assert!(matches!(
        p.tx.flush(CompletionId(1)),
        Err(Error::ConnectionReset(_))
    ));
    p.recv(&mut rec, 3);
    for _ in 0..50 {
        p.tx_iface.progress(&mut rec);
        p.rx_iface.progress(&mut rec);
    }
    assert_eq!(rec.ams.len(), 3);
    assert_eq!(rec.errors.len(), 1, "{:?}", rec.errors);
    assert_eq!(rec.errors[0].0, p.tx.id());
    assert_eq!(p.tx_iface.stats().drops, 1);
}

#[test]
fn tcp_drop_fails_the_endpoint_once() {
    drop_fails_the_endpoint_once::<TcpTransport>();
}

#[test]
fn posix_drop_fails_the_endpoint_once() {
    drop_fails_the_endpoint_once::<PosixTransport>();
}

#[test]
fn same_seed_same_faults() {
    let run = |seed: u64| {
        let mut p = pair::<TcpTransport>(&format!("seed={seed},stall=0.5"));
        (0..64)
            .map(|i| p.tx.am_short(1, i, &[]).unwrap() == Outcome::NoResource)
            .collect::<Vec<bool>>()
    };
    let a = run(11);
    assert_eq!(a, run(11));
    assert_ne!(a, run(12));
    assert!(a.iter().any(|&x| x) && a.iter().any(|&x| !x));
}

#[test]
fn unset_variable_leaves_the_fault_transports_off() {
    if FAULT_INJECT.is_set() {
        eprintln!("RUCX_FAULT_INJECT is set in this environment: nothing to check");
        return;
    }
    let e = Fault::<TcpTransport>::devices().unwrap_err();
    assert!(e.contains("RUCX_FAULT_INJECT"), "{e}");
    assert!(crate::query_resources()
        .iter()
        .all(|r| !r.tl_name.starts_with("fault_")));
}
