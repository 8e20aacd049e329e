//! Atomic memory operations: post, fetch and compare-and-swap, by the transport's atomics on
//! the atomic lane when it has them, emulated by the target's worker (ATOMIC_REQ/ATOMIC_REP)
//! otherwise.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

pub(crate) mod state;

use crate::request::{Completion, Op, RequestId};
use crate::rma::Rkey;
use crate::wire::{am_id, AtomicRepHdr, AtomicReqHdr, NO_REQ};
use crate::worker::ep::connecting;
use crate::worker::peer_req::Named;
use crate::worker::pending::OutcomeExt;
use crate::worker::pending::OutcomeU32;
use crate::worker::req::{comp_id, ReqKind, COMP_ATOMIC};
use crate::worker::state::Family;
use crate::worker::{AmoSize, EpHandle, Worker};
use state::AmoState;
use ucs::{Error, Outcome, Result};

use uct::Endpoint as _;
use uct::Iface as _;
use uct::IfaceFlags;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AmoKind {
    Op(uct::AtomicOp),
    Cswap,
}

impl AmoKind {
    pub(crate) fn code(self) -> u8 {
        match self {
            AmoKind::Op(uct::AtomicOp::Add) => 0,
            AmoKind::Op(uct::AtomicOp::And) => 1,
            AmoKind::Op(uct::AtomicOp::Or) => 2,
            AmoKind::Op(uct::AtomicOp::Xor) => 3,
            AmoKind::Op(uct::AtomicOp::Swap) => 4,
            AmoKind::Cswap => 5,
        }
    }
}

/// [`AtomicReqHdr::decode`], with the common request (26 bytes: any operation but
/// compare-and-swap, of a valid size) read straight from its fixed layout; anything else goes
/// through `decode` and its checks (both accept and give exactly the same).
#[inline(always)]
pub(crate) fn decode_req(b: &[u8]) -> Result<AtomicReqHdr> {
    if let Ok(a) = <&[u8; AtomicReqHdr::LEN_NO_COMPARE]>::try_from(b) {
        let word = |o: usize| ucs::codec::u64_at(a, o);
        let (op, size) = (a[8], a[9]);
        if op < AtomicReqHdr::OP_CSWAP && (size == 4 || size == 8) {
            return Ok(AtomicReqHdr {
                req: word(0),
                op,
                size,
                addr: word(10),
                value: word(18),
                compare: 0,
            });
        }
    }
    AtomicReqHdr::decode(b)
}

impl Worker {
    /// Connects the endpoint's deferred atomic lane, if any. When the transport cannot connect,
    /// atomics stay emulated over the AM lane (they were correct either way).
    pub(crate) fn connect_amo_lane(&mut self, idx: usize) {
        let st = &mut self.st;
        let Some(l) = st.ep_mut(idx).lanes_mut() else {
            return;
        };
        let Some(p) = l.take_amo_later() else {
            return;
        };
        let Some(r) = st.ep(idx).peer_addr().and_then(|a| a.tls.get(p.remote)) else {
            return;
        };
        let res = self.ifaces[p.local].ep_create_connected(&r.device_addr, &r.iface_addr);
        st.ep_mut(idx).addr_done();
        match res {
            Ok(uep) => {
                if let Some(lane) = st.add_lane(idx, p.local, uep) {
                    if let Some(l) = st.ep_mut(idx).lanes_mut() {
                        l.set_amo(lane);
                    }
                }
            }
            Err(e) => tracing::debug!(
                "atomic lane {} not connected, atomics are emulated: {e}",
                st.iface(p.local).tl_name
            ),
        }
    }

    /// A non-fetching atomic (`Add`, `And`, `Or`, `Xor`) on a 4- or 8-byte word of the peer's
    /// mapping.
    pub fn atomic_post(
        &mut self,
        ep: EpHandle,
        op: uct::AtomicOp,
        size: AmoSize,
        value: u64,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        if op == uct::AtomicOp::Swap {
            return Err(Error::InvalidParam("swap is fetch-only".into()));
        }
        let idx = self.st.ep_idx(ep)?;
        let s = self.st.amo_family().atomic(
            idx,
            AmoKind::Op(op),
            size,
            value,
            0,
            remote_addr,
            rkey,
            false,
        )?;
        Ok(self.st.amo_family().op_of_started(s))
    }

    /// A fetching atomic; the old value is the completion's `value`.
    pub fn atomic_fetch(
        &mut self,
        ep: EpHandle,
        op: uct::AtomicOp,
        size: AmoSize,
        value: u64,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let s = self.st.amo_family().atomic(
            idx,
            AmoKind::Op(op),
            size,
            value,
            0,
            remote_addr,
            rkey,
            true,
        )?;
        Ok(self.st.amo_family().op_of_started(s))
    }

    /// Compare-and-swap; the old value is the completion's `value`.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_cswap(
        &mut self,
        ep: EpHandle,
        size: AmoSize,
        compare: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let s = self.st.amo_family().atomic(
            idx,
            AmoKind::Cswap,
            size,
            swap,
            compare,
            remote_addr,
            rkey,
            true,
        )?;
        Ok(self.st.amo_family().op_of_started(s))
    }

    /// An atomic as [`Worker::atomic_post`] (`fetch` false), [`Worker::atomic_fetch`] or
    /// [`Worker::atomic_cswap`] (`op` `None`, with `compare`) do it, whose result, if it does
    /// not come at once, goes to the completion hook ([`Worker::set_completion_hook`]) with
    /// `token` when it arrives: no request handle is made. Gives the old value (0 for a
    /// non-fetching one) of an atomic done at once, or the id of its request.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_hooked(
        &mut self,
        ep: EpHandle,
        op: Option<uct::AtomicOp>,
        fetch: bool,
        size: AmoSize,
        value: u64,
        compare: u64,
        remote_addr: u64,
        rkey: &Rkey,
        token: u64,
    ) -> Result<AmoStart> {
        let kind = match op {
            Some(uct::AtomicOp::Swap) if !fetch => {
                return Err(Error::InvalidParam("swap is fetch-only".into()))
            }
            Some(op) => AmoKind::Op(op),
            None => AmoKind::Cswap,
        };
        let idx = self.st.ep_idx(ep)?;
        let fetch = fetch || op.is_none();
        match self.st.amo_family().atomic(
            idx,
            kind,
            size,
            value,
            compare,
            remote_addr,
            rkey,
            fetch,
        )? {
            Started::Done(v) => Ok(AmoStart::Done(v)),
            Started::Req(key) => {
                // Finished already (a loopback transport may answer within the send).
                if let Some(c) = self.st.take_finished(key) {
                    return c.status.map(|()| AmoStart::Done(c.value));
                }
                let wid = self.st.worker_id();
                let r = self.st.req_mut(key);
                r.notify_hook(token);
                Ok(AmoStart::Hooked(RequestId {
                    wid,
                    key: key as u32,
                    gen: r.gen(),
                }))
            }
        }
    }

    /// Atomics since creation: (through the transport, emulated over active messages).
    pub fn atomic_counts(&self) -> (u64, u64) {
        self.st.amo.counts()
    }
}

/// How [`Worker::atomic_hooked`] started an atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmoStart {
    /// Done at once: the old value (0 for a non-fetching atomic).
    Done(u64),
    /// Running: its result goes to the completion hook with the token given.
    Hooked(RequestId),
}

/// How [`Family::atomic`] started an atomic: done at once with the old value, or request `key`
/// (of kind `Atomic`) finishes it.
pub(crate) enum Started {
    Done(u64),
    Req(usize),
}

impl Family<'_, AmoState> {
    /// The [`Op`] of a started atomic.
    fn op_of_started(&mut self, s: Started) -> Op {
        match s {
            Started::Done(v) => Op::Done(Completion {
                value: v,
                ..Completion::ok()
            }),
            Started::Req(key) => self.op_of(key),
        }
    }

    /// Starts an atomic on the peer word `addr` of endpoint `idx`: a CPU atomic on a peer
    /// segment mapped here, the transport's atomic, or emulated by the peer's worker.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn atomic(
        &mut self,
        idx: usize,
        kind: AmoKind,
        size: AmoSize,
        value: u64,
        compare: u64,
        addr: u64,
        rkey: &Rkey,
        fetch: bool,
    ) -> Result<Started> {
        self.ep_usable(idx)?;
        self.check_rkey(idx, rkey)?;
        let bytes = match size {
            AmoSize::U32 => 4,
            AmoSize::U64 => 8,
        };
        if !addr.is_multiple_of(bytes) {
            return Err(Error::InvalidParam(format!(
                "atomic address {addr:#x} is not {bytes}-byte aligned"
            )));
        }
        // Through the transport when the lane has it and nothing is queued ahead.
        // A peer segment mapped here takes CPU atomics on the shared-memory lane.
        let cpu = |lane: usize| {
            self.ep(idx).lanes().is_some_and(|l| {
                let a = &self.iface(l.iface_of(lane)).attr;
                a.flags.contains(IfaceFlags::ATOMIC_CPU)
                    && match size {
                        AmoSize::U32 => !a.atomics.fop32.is_empty(),
                        AmoSize::U64 => !a.atomics.fop64.is_empty(),
                    }
            })
        };
        let (amo, amo_key) = match &rkey.mapped {
            Some((lane, k)) if cpu(*lane) => (Some(*lane), Some(k)),
            _ => (
                self.ep(idx).lanes().and_then(|l| l.amo()),
                rkey.amo.as_ref(),
            ),
        };
        if let (Some(lane), Some(rk), true) = (amo, amo_key, self.ep_queue_empty(idx)) {
            // The request is created only if the transport answers later; its wire id is known
            // before (the slab's next key and the next generation), so an atomic that completes
            // at once costs no request.
            let wire = self.next_wire_id();
            let l = self.ep_mut(idx).lanes_mut().ok_or_else(connecting)?;
            let uep = l.lane_mut(lane).1;
            let comp = comp_id(COMP_ATOMIC, wire);
            let out: Outcome<u64> = match (kind, size, fetch) {
                (AmoKind::Op(op), AmoSize::U64, false) => {
                    uep.atomic64_post(op, value, addr, rk)?.unit().map_done(0)
                }
                (AmoKind::Op(op), AmoSize::U32, false) => uep
                    .atomic32_post(op, value as u32, addr, rk)?
                    .unit()
                    .map_done(0),
                (AmoKind::Op(op), AmoSize::U64, true) => {
                    uep.atomic64_fetch(op, value, addr, rk, comp)?
                }
                (AmoKind::Op(op), AmoSize::U32, true) => uep
                    .atomic32_fetch(op, value as u32, addr, rk, comp)?
                    .map_done_u32(),
                (AmoKind::Cswap, AmoSize::U64, _) => {
                    uep.atomic_cswap64(compare, value, addr, rk, comp)?
                }
                (AmoKind::Cswap, AmoSize::U32, _) => uep
                    .atomic_cswap32(compare as u32, value as u32, addr, rk, comp)?
                    .map_done_u32(),
            };
            match out {
                Outcome::Done(v) => {
                    self.own().started_hw();
                    return Ok(Started::Done(v));
                }
                Outcome::InProgress => {
                    self.own().started_hw();
                    let key = self.new_req(Some(idx), ReqKind::Atomic { value: 0 });
                    debug_assert_eq!(self.wire_id(key), wire);
                    return Ok(Started::Req(key));
                }
                Outcome::NoResource => {} // CPU-coherent atomics: emulation is equivalent
            }
        }
        // Emulated: the target applies it. A key that knows the region's bounds refuses an
        // access outside it here, at once, as the transports do.
        if let Some(k) = rkey.rma.as_ref().or(rkey.amo.as_ref()) {
            k.check(addr, bytes as usize)?;
        }
        self.own().started_emulated();
        let key = fetch.then(|| self.new_req(Some(idx), ReqKind::Atomic { value: 0 }));
        let req = match key {
            Some(k) => self.peer_id(idx, k),
            None => NO_REQ,
        };
        let (body, len) = AtomicReqHdr {
            req,
            op: kind.code(),
            size: bytes as u8,
            addr,
            value,
            compare,
        }
        .encode();
        if let Err(e) = self.send_amo(idx, am_id::ATOMIC_REQ, req, &body[8..len]) {
            if let Some(k) = key {
                self.drop_req(k);
            }
            return Err(e);
        }
        // The target acknowledges every emulated atomic; flushes and fences wait for that.
        let ep = self.ep_mut(idx);
        ep.note_amo_sent();
        Ok(match key {
            Some(k) => Started::Req(k),
            None => Started::Done(0),
        })
    }

    /// Applies an emulated atomic to this worker's mapped memory; gives the old value.
    pub(crate) fn apply_atomic(&self, h: &AtomicReqHdr) -> Result<u64> {
        use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
        let size = h.size as usize;
        let inside = self.mapped_range(h.addr, size);
        let addr = inside.unwrap_or(0);
        if inside.is_none() || !addr.is_multiple_of(size) {
            return Err(Error::RemoteAccess(format!(
                "{size} bytes at {:#x} are not an aligned word of a mapped region",
                h.addr
            )));
        }
        let op = match h.op {
            0 => Some(uct::AtomicOp::Add),
            1 => Some(uct::AtomicOp::And),
            2 => Some(uct::AtomicOp::Or),
            3 => Some(uct::AtomicOp::Xor),
            4 => Some(uct::AtomicOp::Swap),
            _ => None, // compare-and-swap
        };
        if size == 8 {
            // SAFETY: the word lies inside a live mapping of this worker and is 8-byte aligned;
            // peers access it only through atomics.
            let a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
            let v = h.value;
            Ok(match op {
                Some(uct::AtomicOp::Add) => a.fetch_add(v, SeqCst),
                Some(uct::AtomicOp::And) => a.fetch_and(v, SeqCst),
                Some(uct::AtomicOp::Or) => a.fetch_or(v, SeqCst),
                Some(uct::AtomicOp::Xor) => a.fetch_xor(v, SeqCst),
                Some(uct::AtomicOp::Swap) => a.swap(v, SeqCst),
                None => a
                    .compare_exchange(h.compare, v, SeqCst, SeqCst)
                    .unwrap_or_else(|old| old),
            })
        } else {
            // SAFETY: as above, 4-byte aligned.
            let a = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
            let v = h.value as u32;
            Ok(u64::from(match op {
                Some(uct::AtomicOp::Add) => a.fetch_add(v, SeqCst),
                Some(uct::AtomicOp::And) => a.fetch_and(v, SeqCst),
                Some(uct::AtomicOp::Or) => a.fetch_or(v, SeqCst),
                Some(uct::AtomicOp::Xor) => a.fetch_xor(v, SeqCst),
                Some(uct::AtomicOp::Swap) => a.swap(v, SeqCst),
                None => a
                    .compare_exchange(h.compare as u32, v, SeqCst, SeqCst)
                    .unwrap_or_else(|old| old),
            }))
        }
    }

    /// ATOMIC_REQ: an emulated atomic on our memory; the reply carries the old value (and
    /// acknowledges a non-fetching one).
    pub(crate) fn on_atomic_req(&mut self, idx: usize, h: AtomicReqHdr) -> Result<()> {
        let (status, old) = match self.apply_atomic(&h) {
            Ok(v) => (0, v),
            Err(e) => {
                tracing::debug!("emulated atomic refused: {e}");
                (1, 0)
            }
        };
        // A non-fetching atomic gets a reply too (req NO_REQ): the initiator's flush waits
        // for it.
        let rep = AtomicRepHdr {
            req: h.req,
            status,
            value: old,
        }
        .encode();
        self.send_amo(idx, am_id::ATOMIC_REP, h.req, &rep[8..])
    }

    /// Sends an atomic request or reply whose encoded body is `req` (its first 8 bytes) then
    /// `rest`: inline on the AM lane, in one transport call, when nothing is queued on the
    /// endpoint and it fits the lane's short messages; otherwise as any control message (queued
    /// behind earlier sends, or copied into a larger buffer).
    #[inline(always)]
    fn send_amo(&mut self, idx: usize, id: u8, req: u64, rest: &[u8]) -> Result<()> {
        if self.am_short_now(idx, id, req, rest)? {
            return Ok(());
        }
        self.send_ctl2(idx, id, &req.to_le_bytes(), rest)
    }

    /// Transport atomic `key` completed, fetching `value`: it finishes with it.
    pub(crate) fn amo_fetched(&mut self, key: usize, value: u64) {
        if let ReqKind::Atomic { value: v } = &mut self.req_mut(key).kind {
            *v = value;
        }
        self.finish(key, Ok(()));
    }

    /// ATOMIC_REP: the target's reply to one of our emulated atomics.
    pub(crate) fn on_atomic_rep(&mut self, idx: usize, h: AtomicRepHdr) -> Result<()> {
        let ep = self.ep_mut(idx);
        ep.note_amo_acked();
        if h.req == NO_REQ {
            if h.status != 0 {
                tracing::warn!(
                    "the target refused an emulated put or non-fetching atomic: address \
                     outside its mapped memory or misaligned"
                );
            }
            return Ok(());
        }
        let key = self.peer_req(idx, h.req, Named::AtomicRep)?;
        let st = if h.status == 0 {
            Ok(())
        } else {
            Err(Error::RemoteAccess(
                "the target refused the atomic: address outside its mapped memory or misaligned"
                    .into(),
            ))
        };
        // A request whose result goes to a token or the completion hook (the C API's) is done
        // here: its slot is freed and its result queued for `take_done_tokens` or given to the
        // hook at once, as the end of the progress call would do after `finish`.
        let c = || Completion {
            status: st.clone(),
            value: h.value,
            ..Completion::ok()
        };
        // The kind (a value) and the notification (a token) own nothing: freed plainly.
        if self.deliver_detached(key, c) {
            return Ok(());
        }
        if let ReqKind::Atomic { value } = &mut self.req_mut(key).kind {
            *value = h.value;
        }
        self.finish(key, st);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, ContextParams, EpParams, Features, UcpConfig};
    use std::cell::RefCell;
    use std::rc::Rc;

    type Seen = Rc<RefCell<Vec<(u64, Result<u64>)>>>;

    /// The fast decode of atomic requests accepts and gives exactly what the general one does,
    /// for every operation code, size and length around the valid ones.
    #[test]
    fn fast_request_decode_matches_the_general_one() {
        for op in 0..8u8 {
            for size in 0..10u8 {
                let h = AtomicReqHdr {
                    req: 0x0102_0304_0506_0708,
                    op,
                    size,
                    addr: 0x1122_3344_5566_7788,
                    value: 0x99aa_bbcc_ddee_ff00,
                    compare: 0x1357_9bdf_0246_8ace,
                };
                let mut b = [0u8; AtomicReqHdr::LEN];
                b[..8].copy_from_slice(&h.req.to_le_bytes());
                b[8] = op;
                b[9] = size;
                b[10..18].copy_from_slice(&h.addr.to_le_bytes());
                b[18..26].copy_from_slice(&h.value.to_le_bytes());
                b[26..].copy_from_slice(&h.compare.to_le_bytes());
                for len in [0, 25, 26, 27, 33, 34] {
                    let (fast, slow) = (decode_req(&b[..len]), AtomicReqHdr::decode(&b[..len]));
                    assert_eq!(fast.ok(), slow.ok(), "op {op} size {size} len {len}");
                }
            }
        }
    }

    /// Progresses both workers until the hook has seen `n` results.
    fn until(w: &mut [Worker], seen: &Seen, n: usize) {
        let mut spins = 0u64;
        while seen.borrow().len() < n {
            for x in w.iter_mut() {
                x.progress();
            }
            spins += 1;
            assert!(spins < 50_000_000, "the hook never ran (watchdog)");
        }
    }

    /// Atomics on user memory over shared memory are emulated by the target's worker; started
    /// with `atomic_hooked`, a fetching one gives its old value to the completion hook with its
    /// token, a non-fetching one is done at once, and a word outside the target's mapped memory
    /// gives the hook the target's refusal and changes nothing.
    #[test]
    fn hooked_emulated_atomics_reach_the_hook() {
        let ctx = Context::new(ContextParams {
            features: Features::RMA | Features::AMO32 | Features::AMO64,
            config: Some(UcpConfig {
                tls: vec!["posix".into()],
                ..Default::default()
            }),
        })
        .expect("context");
        let mut w: Vec<Worker> = (0..2).map(|_| Worker::new(&ctx).expect("worker")).collect();
        let mem = w[0].mem_map_vec(vec![0u8; 64]).expect("map");
        let base = mem.address();
        let addr = w[0].address().to_vec();
        let ep = w[1].ep_create(&addr, EpParams::default()).expect("ep");
        let packed = mem.rkey_packed().to_vec();
        let rkey = loop {
            match w[1].rkey_unpack(ep, &packed) {
                Ok(k) => break k,
                Err(_) => {
                    w[0].progress();
                    w[1].progress();
                }
            }
        };
        assert!(!rkey.is_mapped(), "user memory is not mapped by the peer");
        let seen: Seen = Rc::default();
        let s = seen.clone();
        w[1].set_completion_hook(Some(Box::new(move |token, c| {
            s.borrow_mut()
                .push((token, c.status.clone().map(|()| c.value)));
        })));
        let add = Some(uct::AtomicOp::Add);
        let (a64, a32) = (base + 8, base + 16);
        let r = w[1].atomic_hooked(ep, add, true, AmoSize::U64, 5, 0, a64, &rkey, 7);
        assert!(matches!(r, Ok(AmoStart::Hooked(_))), "{r:?}");
        until(&mut w, &seen, 1);
        let r = w[1].atomic_hooked(ep, None, true, AmoSize::U64, 9, 5, a64, &rkey, 8);
        assert!(matches!(r, Ok(AmoStart::Hooked(_))), "{r:?}");
        until(&mut w, &seen, 2);
        let or = Some(uct::AtomicOp::Or);
        let r = w[1].atomic_hooked(ep, or, false, AmoSize::U32, 0x30, 0, a32, &rkey, 9);
        assert_eq!(r.ok(), Some(AmoStart::Done(0)), "a post needs no request");
        let r = w[1].atomic_hooked(ep, add, true, AmoSize::U32, 1, 0, a32, &rkey, 10);
        assert!(matches!(r, Ok(AmoStart::Hooked(_))), "{r:?}");
        until(&mut w, &seen, 3);
        let swap = Some(uct::AtomicOp::Swap);
        let r = w[1].atomic_hooked(ep, swap, false, AmoSize::U64, 1, 0, a64, &rkey, 11);
        assert!(r.is_err(), "a swap must fetch");
        let r = w[1].atomic_hooked(ep, add, true, AmoSize::U64, 1, 0, base + 4096, &rkey, 12);
        // The posix key of user memory knows no bounds: the target refuses.
        assert!(matches!(r, Ok(AmoStart::Hooked(_))), "{r:?}");
        until(&mut w, &seen, 4);
        let got = seen.borrow();
        assert_eq!(got[0], (7, Ok(0)));
        assert_eq!(got[1], (8, Ok(5)));
        assert_eq!(got[2], (10, Ok(0x30)));
        assert_eq!(got[3].0, 12);
        assert!(
            matches!(got[3].1, Err(Error::RemoteAccess(_))),
            "{:?}",
            got[3]
        );
        let mut word = [0u8; 8];
        mem.read(8, &mut word).expect("read");
        assert_eq!(u64::from_le_bytes(word), 9);
        mem.read(16, &mut word[..4]).expect("read");
        assert_eq!(u32::from_le_bytes(word[..4].try_into().expect("4")), 0x31);
        assert_eq!(w[1].atomic_counts(), (0, 5), "every atomic was emulated");
    }
}
