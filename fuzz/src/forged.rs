//! Stateful fuzzer of the messages that name requests: a real [`Worker`] with two connected
//! raw peers ([`super::peer::RawPeer`]), over posix or tcp. The *owner* `P` is the peer the
//! worker's requests belong to; the *foreigner* `A` owns none of them.
//!
//! Each case sets up four victim requests of the worker, all with `P`: a rendezvous send (P got
//! its RTS), a synchronous eager send (P got its EAGER_SYNC_ONLY), a rendezvous receive (P's
//! RTS matched it, P got the RTR) and a posted receive nothing matched. Then the input drives a
//! sequence of messages, each from `P` or `A`, of every ucp message id but WIREUP (which only
//! creates endpoints), naming a request by a live id (the one `P` got), a stale id (of an
//! earlier case's finished request), a random one, or a guessed one (a small slot and
//! generation); other message kinds get bytes from the input. Checked:
//! - no panic (the worker runs in this process);
//! - every message from `A` that names a request fails `A`'s endpoint and changes nothing else
//!   (`A` then takes a new identity);
//! - a message from `P` naming a request by a random, guessed or stale id, or by a live id of
//!   the wrong kind, fails `P`'s endpoint;
//! - no false completion: a victim finishes `Ok` only if `P` named it by its live id (then the
//!   rest is `P`'s own business: its data), and finishes with an error only if `P`'s endpoint
//!   ended or `P` named it; the posted receive never finishes during the case;
//! - afterwards every victim still pending completes correctly when `P` (or a fresh owner, if
//!   `P`'s endpoint ended) finishes the protocol for real: the send's data arrives intact, the
//!   receives get `P`'s data.
//!
//! [`fuzz_one`] is the cargo-fuzz entry (one case per input, sessions kept per thread);
//! `tests/tests/ucp_forged_fuzz.rs` runs thousands of seeded cases on stable.

use super::peer::{pattern, worker, RawPeer, WATCHDOG};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use ucp::wire::{
    am_id, AtomicRepHdr, EagerSyncHdr, FragHdr, RemoteBuf, ReqHdr, RtrHdr, RtrMode, RtsHdr,
};
use ucp::{CloseMode, Completion, EpHandle, EpParams, Op, Request, Worker, TAG_MASK_EXACT};

/// Length of the rendezvous victims (above the 4 KiB threshold of [`worker`]).
const RNDV_LEN: usize = 10_000;
/// Length of the eager victims.
const EAGER_LEN: usize = 100;
/// Tags of the victims have this bit set; the input's tags never do (so fuzzed eager messages
/// and RTSs never match a victim receive).
const VICTIM_TAG: u64 = 1 << 63;
/// Message ids that name a request.
const NAMING: [u8; 6] = [
    am_id::SYNC_ACK,
    am_id::ATS,
    am_id::RTR,
    am_id::RNDV_DATA,
    am_id::ATP,
    am_id::ATOMIC_REP,
];
/// Message ids the input picks from (every ucp id but WIREUP, plus an unknown one).
const IDS: [u8; 22] = [
    2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 99,
];

/// Reads the fuzz input; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, i| v | (self.u8() as u64) << (8 * i))
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    RndvSend,
    SyncSend,
    RndvRecv,
    Posted,
}

struct Victim {
    kind: Kind,
    req: Option<Request>,
    /// The id `P` got for it (0 for the posted receive: never on the wire).
    id: u64,
    /// `P` named it by its live id: what happens to it next is `P`'s doing.
    released: bool,
    done: Option<Completion>,
    /// What a receive must hold at the end (when not released).
    data: Vec<u8>,
}

/// What the cases exercised (a mirror asserts the interesting paths were taken).
#[derive(Debug, Default, Clone, Copy)]
pub struct Coverage {
    /// Messages naming a request sent by the foreigner (each ended its endpoint).
    pub foreign_naming: u64,
    /// Of those, naming a victim by its live id.
    pub foreign_live: u64,
    /// Messages naming a request by a bad id sent by the owner (each ended its endpoint).
    pub owner_bad: u64,
    /// Victims the owner named by their live id.
    pub released: u64,
    /// Victims completed for real after the case's messages.
    pub real: u64,
    /// Cases whose owner endpoint ended.
    pub owner_ended: u64,
}

/// A worker and its two raw peers on one transport, kept across cases.
pub struct Session {
    /// What the cases so far exercised.
    pub cov: Coverage,
    tl: &'static str,
    w: Worker,
    p: RawPeer,
    a: RawPeer,
    ep_p: EpHandle,
    ep_a: EpHandle,
    stale: Vec<u64>,
    case: u64,
}

fn no_handler() -> EpParams {
    EpParams::default()
}

impl Session {
    /// A session over `tl` (`posix` or `tcp`).
    pub fn new(tl: &'static str) -> Session {
        let mut w = worker(tl);
        let p = RawPeer::new(tl, &w);
        let a = RawPeer::new(tl, &w);
        let ep_p = w.ep_create(&p.address(), no_handler()).expect("ep to P");
        let ep_a = w.ep_create(&a.address(), no_handler()).expect("ep to A");
        Session {
            tl,
            w,
            p,
            a,
            ep_p,
            ep_a,
            stale: Vec::new(),
            case: 0,
            cov: Coverage::default(),
        }
    }

    fn alive(&self, ep: EpHandle) -> bool {
        self.w.ep_status(ep).is_ok()
    }

    fn pump(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.w.progress();
            self.p.poll();
            self.a.poll();
        }
    }

    /// Progresses until `ep` has failed or closed (a watchdog turns a missing failure into
    /// a panic naming `what`).
    fn wait_ended(&mut self, ep: EpHandle, what: &str) {
        let start = Instant::now();
        while self.alive(ep) {
            self.pump(1);
            assert!(
                start.elapsed() < WATCHDOG,
                "{}: {what} did not fail its sender's endpoint",
                self.tl
            );
        }
    }

    /// Gives `P` a new identity and endpoint (after its endpoint ended).
    fn renew_p(&mut self) {
        let _ = self.w.ep_close(self.ep_p, CloseMode::Force);
        self.p.rename();
        self.ep_p = self
            .w
            .ep_create(&self.p.address(), no_handler())
            .expect("ep to P");
    }

    fn renew_a(&mut self) {
        let _ = self.w.ep_close(self.ep_a, CloseMode::Force);
        self.a.rename();
        self.ep_a = self
            .w
            .ep_create(&self.a.address(), no_handler())
            .expect("ep to A");
    }

    /// Starts the four victims; gives them with the ids `P` learned.
    fn victims(&mut self) -> Vec<Victim> {
        let base = VICTIM_TAG | self.case << 4;
        let pend = |op: Op| match op {
            Op::Pending(r) => r,
            Op::Done(c) => panic!("a victim finished at once: {c:?}"),
        };
        let send_data = pattern(RNDV_LEN, self.case);
        self.p.clear();
        self.a.clear();
        let s1 = pend(
            self.w
                .tag_send(self.ep_p, base | 1, &send_data)
                .expect("send"),
        );
        let sreq1 = loop {
            let rts = self.p.wait_for(&mut self.w, am_id::RTS);
            match RtsHdr::decode(&rts) {
                Ok(h) if h.tag == base | 1 => break h.sreq,
                _ => {}
            }
        };
        let s2 = pend(
            self.w
                .tag_send_sync(self.ep_p, base | 2, &pattern(EAGER_LEN, 1))
                .expect("sync send"),
        );
        let sreq2 = loop {
            let m = self.p.wait_for(&mut self.w, am_id::EAGER_SYNC_ONLY);
            match EagerSyncHdr::decode(&m) {
                Ok(h) if h.tag == base | 2 => break h.sreq,
                _ => {}
            }
        };
        let r1 = pend(
            self.w
                .tag_recv(vec![0; RNDV_LEN], base | 3, TAG_MASK_EXACT)
                .expect("recv"),
        );
        let sreq = 0x5151_0000_0000 | self.case;
        assert!(self.p.send_rts(&mut self.w, base | 3, sreq, RNDV_LEN));
        let rreq1 = loop {
            let rtr = self.p.wait_for(&mut self.w, am_id::RTR);
            match RtrHdr::decode(&rtr) {
                Ok(h) if h.sreq == sreq => break h.rreq,
                _ => {}
            }
        };
        let r2 = pend(
            self.w
                .tag_recv(vec![0; EAGER_LEN], base | 4, TAG_MASK_EXACT)
                .expect("recv"),
        );
        let v = |kind, req, id, data| Victim {
            kind,
            req: Some(req),
            id,
            released: false,
            done: None,
            data,
        };
        vec![
            v(Kind::RndvSend, s1, sreq1, send_data),
            v(Kind::SyncSend, s2, sreq2, Vec::new()),
            v(Kind::RndvRecv, r1, rreq1, pattern(RNDV_LEN, 2)),
            v(Kind::Posted, r2, 0, pattern(EAGER_LEN, 3)),
        ]
    }

    /// Takes the results of finished victims.
    fn collect(&mut self, vs: &mut [Victim]) {
        for v in vs.iter_mut() {
            if let Some(r) = v.req.take() {
                match self.w.request_take(r) {
                    Ok(c) => v.done = Some(c),
                    Err(r) => v.req = Some(r),
                }
            }
        }
    }

    /// One case: victims, the input's messages, the checks, then the real completions.
    pub fn case(&mut self, input: &[u8]) {
        self.case += 1;
        let mut inp = Input(input);
        if !self.alive(self.ep_p) {
            self.renew_p();
        }
        let mut vs = self.victims();
        // P sent something that may end its endpoint.
        let mut p_may_end = false;
        // At most 12 messages, while the input lasts.
        for _ in 0..12 {
            if inp.0.is_empty() {
                break;
            }
            let b0 = inp.u8();
            let from_p = b0 & 1 == 1;
            // Half the messages name a request; half of the ids are live ones.
            let b1 = inp.u8() as usize;
            let id = if b1 & 1 == 0 {
                NAMING[(b1 >> 1) % NAMING.len()]
            } else {
                IDS[(b1 >> 1) % IDS.len()]
            };
            let which = (b0 >> 1) as usize % vs.len();
            let src = match (b0 >> 3) & 7 {
                0..=3 => 0,
                4 => 1,
                5 => 2,
                _ => 3,
            };
            let (req, live) = match src {
                0 if vs[which].id != 0 => (vs[which].id, Some(which)),
                1 if !self.stale.is_empty() => {
                    (self.stale[inp.u8() as usize % self.stale.len()], None)
                }
                2 => (inp.u64(), None),
                _ => (
                    ((inp.u8() % 4) as u64 + 1) << 32 | (inp.u8() % 8) as u64,
                    None,
                ),
            };
            let body = self.body(id, req, &mut inp);
            let naming = NAMING.contains(&id);
            if from_p {
                if !self.alive(self.ep_p) {
                    continue;
                }
                // Only the first answer the victim waits for is sure to keep P's endpoint
                // (rendezvous data or ATP may be out of bounds or of the wrong mode).
                let first = live.filter(|&k| !vs[k].released && fits(vs[k].kind, id));
                let safe = naming
                    && first.is_some_and(|k| matches!(vs[k].kind, Kind::RndvSend | Kind::SyncSend));
                if naming {
                    if let Some(k) = live.filter(|&k| fits(vs[k].kind, id)) {
                        self.cov.released += u64::from(!vs[k].released);
                        vs[k].released = true;
                    }
                }
                p_may_end |= !safe;
                self.p.send(&mut self.w, id, &body);
                // A live id of the wrong kind, or any id that is not live: P's endpoint ends.
                let wrong = live.is_some_and(|k| !fits(vs[k].kind, id));
                if naming && (live.is_none() || wrong) {
                    self.cov.owner_bad += 1;
                    self.wait_ended(self.ep_p, "a bad id from the owner");
                }
            } else {
                if !self.alive(self.ep_a) {
                    self.renew_a();
                }
                let p_before = self.alive(self.ep_p);
                self.a.send(&mut self.w, id, &body);
                if naming {
                    self.cov.foreign_naming += 1;
                    self.cov.foreign_live += u64::from(live.is_some());
                    self.wait_ended(self.ep_a, "a foreign id");
                }
                self.pump(2);
                if p_before && !p_may_end {
                    assert!(
                        self.alive(self.ep_p),
                        "{}: message {id} from A ended P's endpoint",
                        self.tl
                    );
                }
            }
            self.collect(&mut vs);
        }
        self.pump(4);
        self.collect(&mut vs);
        let p_alive = self.alive(self.ep_p);
        self.cov.owner_ended += u64::from(!p_alive);
        if !p_may_end {
            assert!(p_alive, "{}: the owner's endpoint ended", self.tl);
        }
        self.check_no_false_completion(&vs, p_alive);
        self.finish_for_real(&mut vs, p_alive);
        for v in &vs {
            if v.id != 0 {
                self.stale.push(v.id);
            }
        }
        if self.stale.len() > 64 {
            self.stale.drain(..32);
        }
    }

    /// The body of message `id` naming `req`, or input bytes for messages that name none.
    fn body(&self, id: u8, req: u64, inp: &mut Input<'_>) -> Vec<u8> {
        match id {
            am_id::SYNC_ACK | am_id::ATS | am_id::ATP => ReqHdr { req }.encode().to_vec(),
            am_id::RTR => {
                let mut b = Vec::new();
                RtrHdr {
                    sreq: req,
                    rreq: inp.u64(),
                    mode: if inp.u8() & 1 == 0 {
                        RtrMode::AmPipeline
                    } else {
                        RtrMode::Put
                    },
                    buf: RemoteBuf {
                        addr: 0,
                        tl: "",
                        rkey: &[],
                    },
                }
                .encode(&mut b);
                b
            }
            am_id::RNDV_DATA => {
                let mut b = FragHdr {
                    id: req,
                    offset: inp.u8() as u64 * 64,
                }
                .encode()
                .to_vec();
                let n = inp.u8() as usize % 64;
                b.extend(inp.bytes(n));
                b
            }
            am_id::ATOMIC_REP => AtomicRepHdr {
                req,
                status: inp.u8() & 1,
                value: inp.u64(),
            }
            .encode()
            .to_vec(),
            _ => {
                let n = inp.u8() as usize % 48;
                let mut b = inp.bytes(n);
                // Tags of the input never match a victim (see VICTIM_TAG).
                if matches!(
                    id,
                    am_id::EAGER_ONLY | am_id::EAGER_SYNC_ONLY | am_id::EAGER_FIRST | am_id::RTS
                ) && b.len() >= 8
                {
                    b[7] &= 0x7f;
                }
                // Keep announced lengths small: the worker buffers what a peer announces.
                if id == am_id::EAGER_FIRST && b.len() >= 24 {
                    b[18..24].fill(0);
                }
                if id == am_id::RTS && b.len() >= 24 {
                    b[19..24].fill(0);
                }
                b.truncate(self.p.max_body());
                b
            }
        }
    }

    fn check_no_false_completion(&self, vs: &[Victim], p_alive: bool) {
        for v in vs {
            let Some(c) = &v.done else { continue };
            assert!(
                v.kind != Kind::Posted,
                "{}: the posted receive finished during the case: {c:?}",
                self.tl
            );
            match &c.status {
                Ok(()) => assert!(
                    v.released,
                    "{}: {:?} finished Ok without its owner naming it: {c:?}",
                    self.tl, v.kind
                ),
                Err(e) => assert!(
                    v.released || !p_alive,
                    "{}: {:?} failed while its owner's endpoint lives: {e}",
                    self.tl,
                    v.kind
                ),
            }
        }
    }

    /// Finishes every victim still pending for real and checks the results.
    fn finish_for_real(&mut self, vs: &mut [Victim], p_alive: bool) {
        if !p_alive {
            // Everything tied to P ended with its endpoint; the posted receive lives on.
            for v in vs.iter_mut().filter(|v| v.kind != Kind::Posted) {
                self.wait_done(v);
                let c = v.done.as_ref().map(|c| &c.status);
                assert!(
                    matches!(c, Some(Err(_))) || v.released,
                    "{}: {:?} of an ended endpoint: {c:?}",
                    self.tl,
                    v.kind
                );
            }
            self.renew_p();
        }
        for i in 0..vs.len() {
            if vs[i].done.is_some() {
                continue;
            }
            let kind = vs[i].kind;
            let (id, released) = (vs[i].id, vs[i].released);
            match kind {
                Kind::RndvSend if !released => {
                    assert!(self.p.send_rtr_pipeline(&mut self.w, id, 0x77));
                    let got = self.p.recv_rndv_data(&mut self.w, 0x77, RNDV_LEN);
                    assert!(got == vs[i].data, "{}: rendezvous data differs", self.tl);
                }
                Kind::SyncSend if !released => {
                    let b = ReqHdr { req: id }.encode();
                    assert!(self.p.send(&mut self.w, am_id::SYNC_ACK, &b));
                }
                Kind::RndvRecv => {
                    let data = vs[i].data.clone();
                    let frag = self.p.max_body() - FragHdr::LEN;
                    let mut off = 0;
                    while off < data.len() && vs[i].done.is_none() {
                        let n = frag.min(data.len() - off);
                        let mut b = FragHdr {
                            id,
                            offset: off as u64,
                        }
                        .encode()
                        .to_vec();
                        b.extend_from_slice(&data[off..off + n]);
                        self.p.send(&mut self.w, am_id::RNDV_DATA, &b);
                        off += n;
                        self.pump(1);
                        self.collect(&mut vs[i..=i]);
                    }
                }
                Kind::Posted => {
                    let mut b = (VICTIM_TAG | self.case << 4 | 4).to_le_bytes().to_vec();
                    b.extend_from_slice(&vs[i].data);
                    assert!(self.p.send(&mut self.w, am_id::EAGER_ONLY, &b));
                }
                _ => {}
            }
            self.wait_done(&mut vs[i]);
            let v = &vs[i];
            let c = v.done.as_ref().expect("waited");
            if v.released {
                continue;
            }
            self.cov.real += 1;
            assert_eq!(c.status, Ok(()), "{}: {:?} for real", self.tl, v.kind);
            if matches!(v.kind, Kind::RndvRecv | Kind::Posted) {
                assert!(
                    c.buf.as_deref() == Some(&v.data[..]) && c.len == v.data.len(),
                    "{}: {:?} got other data",
                    self.tl,
                    v.kind
                );
            }
        }
    }

    fn wait_done(&mut self, v: &mut Victim) {
        let start = Instant::now();
        while v.done.is_none() {
            self.pump(1);
            self.collect(std::slice::from_mut(v));
            assert!(
                start.elapsed() < WATCHDOG,
                "{}: {:?} never finished",
                self.tl,
                v.kind
            );
        }
    }
}

/// True when message `id` is what a victim of `kind` may wait for (right after the setup, or
/// later in its rendezvous); false: it never is, so the sender's endpoint must end.
fn fits(kind: Kind, id: u8) -> bool {
    matches!(
        (kind, id),
        (Kind::RndvSend, am_id::ATS | am_id::RTR)
            | (Kind::SyncSend, am_id::SYNC_ACK)
            | (Kind::RndvRecv, am_id::RNDV_DATA | am_id::ATP)
    )
}

thread_local! {
    static SESSIONS: RefCell<Vec<Rc<RefCell<Session>>>> = const { RefCell::new(Vec::new()) };
}

/// The cargo-fuzz entry: the first byte picks the transport (even: posix, odd: tcp), the rest
/// is one case on a session kept for the thread.
pub fn fuzz_one(data: &[u8]) {
    let Some((&t, rest)) = data.split_first() else {
        return;
    };
    let tl = if t & 1 == 0 { "posix" } else { "tcp" };
    let s = SESSIONS.with(|ss| {
        let mut ss = ss.borrow_mut();
        if let Some(s) = ss.iter().find(|s| s.borrow().tl == tl) {
            return s.clone();
        }
        let s = Rc::new(RefCell::new(Session::new(tl)));
        ss.push(s.clone());
        s
    });
    s.borrow_mut().case(rest);
}
