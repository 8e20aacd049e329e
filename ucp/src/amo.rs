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

use crate::request::{Completion, Op};
use crate::rma::Rkey;
use crate::wire::{am_id, AtomicRepHdr, AtomicReqHdr, NO_REQ};
use crate::worker::peer_req::Named;
use crate::worker::pending::OutcomeExt;
use crate::worker::pending::OutcomeU32;
use crate::worker::state::{comp_id, Notify, ReqKind, State, COMP_ATOMIC};
use crate::worker::{EpHandle, Worker};
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;
use uct::Iface as _;
use uct::IfaceFlags;

/// Operand size of an atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmoSize {
    /// 32 bits.
    U32,
    /// 64 bits.
    U64,
}

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

impl Worker {
    /// Connects the endpoint's deferred atomic lane, if any. When the transport cannot connect,
    /// atomics stay emulated over the AM lane (they were correct either way).
    pub(crate) fn connect_amo_lane(&mut self, idx: usize) {
        let st = &mut self.st;
        let Some(l) = st.eps[idx].lanes.as_mut() else {
            return;
        };
        let Some(p) = l.amo_later.take() else {
            return;
        };
        let Some(r) = st.eps[idx].peer_addr().and_then(|a| a.tls.get(p.remote)) else {
            return;
        };
        let res = self.ifaces[p.local].ep_create_connected(&r.device_addr, &r.iface_addr);
        st.eps[idx].addr_done();
        match res {
            Ok(uep) => {
                let Some(l) = st.eps[idx].lanes.as_mut() else {
                    return;
                };
                l.uct.push((p.local, uep));
                l.set_amo(l.uct.len() - 1);
                st.by_uct
                    .insert((p.local, l.uct[l.uct.len() - 1].1.id().0), idx);
                st.iface_users[p.local] += 1;
            }
            Err(e) => tracing::debug!(
                "atomic lane {} not connected, atomics are emulated: {e}",
                st.info[p.local].tl_name
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
        self.st.atomic(
            idx,
            AmoKind::Op(op),
            size,
            value,
            0,
            remote_addr,
            rkey,
            false,
        )
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
        self.st.atomic(
            idx,
            AmoKind::Op(op),
            size,
            value,
            0,
            remote_addr,
            rkey,
            true,
        )
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
        self.st.atomic(
            idx,
            AmoKind::Cswap,
            size,
            swap,
            compare,
            remote_addr,
            rkey,
            true,
        )
    }

    /// Atomics since creation: (through the transport, emulated over active messages).
    pub fn atomic_counts(&self) -> (u64, u64) {
        (self.st.amo_hw, self.st.amo_emulated)
    }
}

impl State {
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
    ) -> Result<Op> {
        self.ep_usable(idx)?;
        if rkey.ep != (idx as u32, self.eps[idx].gen) {
            return Err(Error::InvalidParam(
                "remote key was unpacked for another endpoint".into(),
            ));
        }
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
            self.eps[idx].lanes.as_ref().is_some_and(|l| {
                let a = &self.info[l.uct[lane].0].attr;
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
                self.eps[idx].lanes.as_ref().and_then(|l| l.amo()),
                rkey.amo.as_ref(),
            ),
        };
        if let (Some(lane), Some(rk), true) = (amo, amo_key, self.eps[idx].pending.is_empty()) {
            // The request is created only if the transport answers later; its wire id is known
            // before (the slab's next key and the next generation), so an atomic that completes
            // at once costs no request.
            let gen = self.req_gen.wrapping_add(1) & 0x0FFF_FFFF;
            let wire = u64::from(gen) << 32 | self.reqs.vacant_key() as u64;
            let l = self.eps[idx]
                .lanes
                .as_mut()
                .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
            let uep = &mut l.uct[lane].1;
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
                    self.amo_hw += 1;
                    return Ok(Op::Done(Completion {
                        value: v,
                        ..Completion::ok()
                    }));
                }
                Outcome::InProgress => {
                    self.amo_hw += 1;
                    let key = self.new_req(Some(idx), ReqKind::Atomic { value: 0 });
                    debug_assert_eq!(self.wire_id(key), wire);
                    return Ok(self.op_of(key));
                }
                Outcome::NoResource => {} // CPU-coherent atomics: emulation is equivalent
            }
        }
        // Emulated: the target applies it. A key that knows the region's bounds refuses an
        // access outside it here, at once, as the transports do.
        if let Some(k) = rkey.rma.as_ref().or(rkey.amo.as_ref()) {
            k.check(addr, bytes as usize)?;
        }
        self.amo_emulated += 1;
        let key = fetch.then(|| self.new_req(Some(idx), ReqKind::Atomic { value: 0 }));
        let h = AtomicReqHdr {
            req: match key {
                Some(k) => self.peer_id(idx, k),
                None => NO_REQ,
            },
            op: kind.code(),
            size: bytes as u8,
            addr,
            value,
            compare,
        };
        let (body, len) = h.encode();
        if let Err(e) = self.send_ctl(idx, am_id::ATOMIC_REQ, &body[..len]) {
            if let Some(k) = key {
                self.reqs.remove(k);
            }
            return Err(e);
        }
        // The target acknowledges every emulated atomic; flushes and fences wait for that.
        let ep = &mut self.eps[idx];
        ep.amo_sent = ep.amo_sent.wrapping_add(1);
        Ok(match key {
            Some(k) => self.op_of(k),
            None => Op::Done(Completion::ok()),
        })
    }

    /// The address of `len` bytes at `addr` when they lie inside one region this worker mapped
    /// for remote access.
    pub(crate) fn mapped_range(&self, addr: u64, len: usize) -> Option<usize> {
        let addr = usize::try_from(addr).ok()?;
        self.regions
            .borrow()
            .iter()
            .any(|&(s, l)| addr >= s && addr.checked_add(len).is_some_and(|e| e <= s + l))
            .then_some(addr)
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
        };
        self.send_ctl(idx, am_id::ATOMIC_REP, &rep.encode())
    }

    /// ATOMIC_REP: the target's reply to one of our emulated atomics.
    pub(crate) fn on_atomic_rep(&mut self, idx: usize, h: AtomicRepHdr) -> Result<()> {
        let ep = &mut self.eps[idx];
        ep.amo_acked = ep.amo_acked.wrapping_add(1);
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
        // A request whose result goes to a token (the C API's) is done here: its result is
        // queued for `take_done_tokens` at once and its slot freed, as the end of the progress
        // call would do after `finish`.
        if let Notify::Token(t) = self.reqs[key].notify {
            self.reqs.free(key);
            self.tokens_done.push((
                t,
                Completion {
                    status: st,
                    value: h.value,
                    ..Completion::ok()
                },
            ));
            return Ok(());
        }
        if let ReqKind::Atomic { value } = &mut self.reqs[key].kind {
            *value = h.value;
        }
        self.finish(key, st);
        Ok(())
    }
}
