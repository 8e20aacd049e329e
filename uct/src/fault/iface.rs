//! The fault wrapper's interface: receive-side faults (delay, dup, reorder) on what the wrapped
//! interface's progress delivers, and the reports of the send-side faults (dropped connections,
//! partial sends finishing, retries of held operations).

pub(super) mod ep;

use crate::caps::{EventFlags, IfaceAttr, IfaceFlags};
use crate::ep::{CompletionId, EpId, PendingId, TagRecvId};
use crate::fault::{FaultConfig, FORWARDED};
use crate::iface::{EventSink, Iface, RndvRemote, TagRecvCanceler};
use crate::md::Iov;
use crate::Endpoint;
use ep::{EpState, FaultEp};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use ucs::random::SeededRng;
use ucs::{Error, Outcome, Result};

/// How many faults of each kind were injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Send operations answered `NoResource`.
    pub stalls: u64,
    /// Active messages sent later from the wrapper's buffer.
    pub partials: u64,
    /// Connections closed.
    pub drops: u64,
    /// Holds started on the receive side.
    pub delays: u64,
    /// Active messages delivered twice.
    pub dups: u64,
    /// Active messages delivered after the next one.
    pub reorders: u64,
}

/// Kinds of fault, for counting.
#[derive(Debug, Clone, Copy)]
pub(super) enum Count {
    Stall,
    Partial,
    Drop,
    Delay,
    Dup,
    Reorder,
}

/// Totals over every fault interface of the process, so a test can tell from outside that
/// faults really happened.
static TOTALS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

/// Faults injected by every fault interface of this process so far.
pub fn process_totals() -> FaultStats {
    let t = |c: Count| TOTALS[c as usize].load(Ordering::Relaxed);
    FaultStats {
        stalls: t(Count::Stall),
        partials: t(Count::Partial),
        drops: t(Count::Drop),
        delays: t(Count::Delay),
        dups: t(Count::Dup),
        reorders: t(Count::Reorder),
    }
}

/// State an interface shares with its endpoints.
pub(super) struct Core<E> {
    pub(super) cfg: FaultConfig,
    rng: SeededRng,
    /// Sends and arrivals seen (faults start after `cfg.after`).
    seen: u64,
    /// The wrapped interface's capabilities and limits (operations outside them meet no
    /// fault, so they get the wrapped transport's own error).
    pub(super) attr: IfaceAttr,
    /// Dropped connections whose error progress has not reported yet.
    pub(super) dropped: Vec<(EpId, Error)>,
    /// Pending requests the wrapper owes a retry.
    pub(super) retries: VecDeque<(EpId, PendingId)>,
    /// Endpoints that may hold a partial send.
    pub(super) backlogged: Vec<Weak<RefCell<EpState<E>>>>,
    stats: FaultStats,
}

impl<E> Core<E> {
    /// Counts one send or arrival; true once faults may happen.
    pub(super) fn armed(&mut self) -> bool {
        self.seen += 1;
        self.seen > self.cfg.after
    }
    /// Draws the fault whose probability `pick` selects (never before `after`).
    pub(super) fn roll(&mut self, pick: fn(&FaultConfig) -> f64) -> bool {
        self.seen > self.cfg.after && self.rng.chance(pick(&self.cfg))
    }
    pub(super) fn count(&mut self, c: Count) {
        TOTALS[c as usize].fetch_add(1, Ordering::Relaxed);
        let s = &mut self.stats;
        match c {
            Count::Stall => s.stalls += 1,
            Count::Partial => s.partials += 1,
            Count::Drop => s.drops += 1,
            Count::Delay => s.delays += 1,
            Count::Dup => s.dups += 1,
            Count::Reorder => s.reorders += 1,
        }
    }
}

/// An event kept back by a hold or a reorder, with its data copied.
enum Held {
    Am {
        id: u8,
        data: Vec<u8>,
    },
    UnexpEager {
        tag: u64,
        imm: u64,
        data: Vec<u8>,
    },
    UnexpRndv {
        tag: u64,
        header: Vec<u8>,
        remote_addr: u64,
        length: usize,
        rkey: Vec<u8>,
    },
    RecvDone {
        ctx: TagRecvId,
        tag: u64,
        imm: u64,
        len: usize,
        result: Result<()>,
    },
}

impl Held {
    fn deliver<S: EventSink>(self, sink: &mut S) {
        match self {
            Held::Am { id, data } => sink.am(id, &data),
            Held::UnexpEager { tag, imm, data } => sink.tag_unexp_eager(tag, imm, &data),
            Held::UnexpRndv {
                tag,
                header,
                remote_addr,
                length,
                rkey,
            } => sink.tag_unexp_rndv(
                tag,
                RndvRemote {
                    header: &header,
                    remote_addr,
                    length,
                    rkey: &rkey,
                },
            ),
            Held::RecvDone {
                ctx,
                tag,
                imm,
                len,
                result,
            } => sink.tag_recv_done(ctx, tag, imm, len, result),
        }
    }
}

/// Receive-side state of an interface.
#[derive(Default)]
struct Rx {
    /// Events of the current hold, in arrival order.
    held: VecDeque<Held>,
    /// Progress call at which the hold ends.
    release_at: u64,
    /// A message being reordered behind the next one.
    stash: Option<Held>,
    /// Progress calls so far.
    polls: u64,
}

/// An interface of a fault-injecting transport (see the [module documentation](super)).
pub struct FaultIface<I: Iface> {
    inner: I,
    name: &'static str,
    attr: IfaceAttr,
    core: Rc<RefCell<Core<I::Ep>>>,
    rx: Rx,
}

impl<I: Iface> FaultIface<I> {
    /// Wraps `inner`, injecting the faults of `cfg`; `name` is the wrapped transport's name.
    pub fn new(inner: I, name: &'static str, cfg: FaultConfig) -> Self {
        let mut attr = inner.attr().clone();
        attr.flags = (attr.flags & FORWARDED) | IfaceFlags::ERRHANDLE_PEER_FAILURE;
        let core = Core {
            rng: SeededRng::new(cfg.seed),
            cfg,
            seen: 0,
            attr: inner.attr().clone(),
            dropped: Vec::new(),
            retries: VecDeque::new(),
            backlogged: Vec::new(),
            stats: FaultStats::default(),
        };
        FaultIface {
            inner,
            name,
            attr,
            core: Rc::new(RefCell::new(core)),
            rx: Rx::default(),
        }
    }

    /// Faults this interface injected so far.
    pub fn stats(&self) -> FaultStats {
        self.core.borrow().stats
    }

    /// True when no arrival is held back.
    #[cfg(test)]
    pub(super) fn rx_idle(&self) -> bool {
        self.rx.held.is_empty() && self.rx.stash.is_none()
    }

    /// The wrapped interface.
    pub fn inner(&self) -> &I {
        &self.inner
    }

    /// Passes partial sends on to their endpoints; a send that fails closes its endpoint.
    /// True when none is left.
    fn drain_backlogs(&mut self) -> bool {
        let list = std::mem::take(&mut self.core.borrow_mut().backlogged);
        let mut keep = Vec::new();
        for w in list {
            let Some(st) = w.upgrade() else { continue };
            let mut s = st.borrow_mut();
            let id = s.inner.as_ref().map(|e| e.id());
            match s.drain() {
                Ok(true) => {}
                Ok(false) => keep.push(w.clone()),
                Err(e) => {
                    s.inner = None;
                    s.backlog = None;
                    if let Some(id) = id {
                        self.core.borrow_mut().dropped.push((id, e));
                    }
                }
            }
        }
        let mut c = self.core.borrow_mut();
        let empty = keep.is_empty() && c.backlogged.is_empty();
        c.backlogged.extend(keep);
        empty
    }
}

/// The sink the wrapped interface delivers into: applies delay, dup and reorder.
struct Filter<'a, S, E> {
    sink: &'a mut S,
    core: &'a RefCell<Core<E>>,
    rx: &'a mut Rx,
}

impl<S: EventSink, E> Filter<'_, S, E> {
    /// Delivers `ev` now, or keeps it when a hold is on.
    fn pass(&mut self, ev: Held) {
        if self.rx.held.is_empty() {
            ev.deliver(self.sink);
        } else {
            self.rx.held.push_back(ev);
        }
    }
}

impl<S: EventSink, E> EventSink for Filter<'_, S, E> {
    fn am(&mut self, id: u8, data: &[u8]) {
        if !self.rx.held.is_empty() {
            self.rx.held.push_back(Held::Am {
                id,
                data: data.to_vec(),
            });
            return;
        }
        let mut c = self.core.borrow_mut();
        c.armed();
        if c.roll(|k| k.delay) {
            c.count(Count::Delay);
            self.rx.release_at = self.rx.polls + c.cfg.hold as u64;
            self.rx.held.push_back(Held::Am {
                id,
                data: data.to_vec(),
            });
            return;
        }
        let touchable = c.cfg.ids & (1u32 << (id as u32 & 31)) != 0;
        let dup = touchable && c.roll(|k| k.dup);
        let reorder = touchable && self.rx.stash.is_none() && c.roll(|k| k.reorder);
        if dup {
            c.count(Count::Dup);
        }
        if reorder {
            c.count(Count::Reorder);
        }
        drop(c);
        if reorder {
            self.rx.stash = Some(Held::Am {
                id,
                data: data.to_vec(),
            });
            return;
        }
        self.sink.am(id, data);
        if dup {
            self.sink.am(id, data);
        }
        if let Some(s) = self.rx.stash.take() {
            self.pass(s);
        }
    }
    fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
        self.sink.completion(comp, result);
    }
    fn get_bcopy_data(&mut self, comp: CompletionId, data: &[u8]) {
        self.sink.get_bcopy_data(comp, data);
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.sink.pending(ep, req)
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.sink.ep_error(ep, err);
    }
    fn tag_unexp_eager(&mut self, tag: u64, imm: u64, data: &[u8]) {
        if self.rx.held.is_empty() {
            self.sink.tag_unexp_eager(tag, imm, data);
        } else {
            self.rx.held.push_back(Held::UnexpEager {
                tag,
                imm,
                data: data.to_vec(),
            });
        }
    }
    fn tag_unexp_rndv(&mut self, tag: u64, rndv: RndvRemote<'_>) {
        if self.rx.held.is_empty() {
            self.sink.tag_unexp_rndv(tag, rndv);
        } else {
            self.rx.held.push_back(Held::UnexpRndv {
                tag,
                header: rndv.header.to_vec(),
                remote_addr: rndv.remote_addr,
                length: rndv.length,
                rkey: rndv.rkey.to_vec(),
            });
        }
    }
    fn tag_recv_done(
        &mut self,
        ctx: TagRecvId,
        tag: u64,
        imm: u64,
        len: usize,
        result: Result<()>,
    ) {
        self.pass(Held::RecvDone {
            ctx,
            tag,
            imm,
            len,
            result,
        });
    }
}

impl<I: Iface> Iface for FaultIface<I> {
    type Ep = FaultEp<I::Ep>;

    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn tl_name(&self) -> &'static str {
        self.name
    }
    fn device_name(&self) -> &str {
        self.inner.device_name()
    }
    fn device_address(&self) -> &[u8] {
        self.inner.device_address()
    }
    fn iface_address(&self) -> &[u8] {
        self.inner.iface_address()
    }
    fn is_reachable(
        &self,
        dev_addr: &[u8],
        iface_addr: Option<&[u8]>,
    ) -> std::result::Result<(), String> {
        self.inner.is_reachable(dev_addr, iface_addr)
    }
    fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<Self::Ep> {
        let e = self.inner.ep_create_connected(dev_addr, iface_addr)?;
        Ok(FaultEp::new(e, self.core.clone()))
    }
    fn ep_create(&mut self) -> Result<Self::Ep> {
        let e = self.inner.ep_create()?;
        Ok(FaultEp::new(e, self.core.clone()))
    }

    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        self.rx.polls += 1;
        let mut n = 0;
        self.drain_backlogs();
        let dropped = std::mem::take(&mut self.core.borrow_mut().dropped);
        for (ep, err) in dropped {
            sink.ep_error(ep, err);
            n += 1;
        }
        let mut retries = std::mem::take(&mut self.core.borrow_mut().retries);
        while let Some((ep, req)) = retries.pop_front() {
            n += 1;
            if !sink.pending(ep, req) {
                // Still no room: it stays first, before any added meanwhile.
                retries.push_front((ep, req));
                let mut c = self.core.borrow_mut();
                retries.append(&mut c.retries);
                c.retries = retries;
                break;
            }
        }
        if !self.rx.held.is_empty() && self.rx.polls >= self.rx.release_at {
            while let Some(ev) = self.rx.held.pop_front() {
                ev.deliver(sink);
                n += 1;
            }
        }
        let mut f = Filter {
            sink,
            core: &self.core,
            rx: &mut self.rx,
        };
        n += self.inner.progress(&mut f);
        if let Some(s) = f.rx.stash.take() {
            f.pass(s);
        }
        n
    }
    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        if !self.drain_backlogs() {
            return Ok(Outcome::NoResource);
        }
        self.inner.flush(comp)
    }
    fn fence(&mut self) -> Result<()> {
        self.inner.fence()
    }
    fn event_fd(&self) -> Option<RawFd> {
        self.inner.event_fd()
    }
    fn wake_within(&self) -> Option<std::time::Duration> {
        self.inner.wake_within()
    }
    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        let c = self.core.borrow();
        if !self.rx.held.is_empty()
            || self.rx.stash.is_some()
            || !c.dropped.is_empty()
            || !c.retries.is_empty()
            || !c.backlogged.is_empty()
        {
            return Err(Error::Busy("fault injection holds events".into()));
        }
        drop(c);
        self.inner.event_arm(events)
    }
    fn tag_recv_zcopy(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        self.inner.tag_recv_zcopy(tag, mask, iov, ctx)
    }
    fn tag_recv_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        self.inner.tag_recv_cancel(ctx, force)
    }
    fn tag_recv_canceler(&self) -> Option<TagRecvCanceler> {
        self.inner.tag_recv_canceler()
    }
}
