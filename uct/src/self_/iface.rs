//! The self interface: a bounded receive ring of pooled buffers, the endpoints' pending queues,
//! and a ucs `Waker` (an eventfd) for sleeping.
//!
//! An interface and the endpoints that send to it share an [`IfaceInner`] through `Rc`; endpoints
//! hold only `Weak` references, so using an endpoint after an interface was dropped gives an
//! error. Interfaces are found by id in a thread-local table, so a self endpoint reaches any self
//! interface of the same thread (its own, or another worker's).
//!
//! Borrow discipline: every `RefCell` borrow is short and is released before user code runs
//! (sink callbacks, pack and unpack closures), so callbacks may call any endpoint operation.

pub(super) mod ep;

use super::wire::{DeviceAddr, EpAddr, IfaceAddr};
use crate::caps::{AtomicCaps, AtomicOps, EventFlags, IfaceAttr, IfaceFlags, OpLimits, PerfModel};
use crate::ep::{CompletionId, EpId, PendingId};
use crate::iface::{EventSink, Iface, IfaceParams, WorkBell};
use ep::SelfEp;
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use ucs::async_ctx::Waker;
use ucs::{Error, Outcome, Result};

/// Device name of the self transport.
pub const DEVICE_NAME: &str = "memory0";
/// Largest active message (am_short header + payload, am_bcopy, am_zcopy payload), bytes.
pub const SEG_SIZE: usize = 8192;
/// Largest user header of am_zcopy.
pub const MAX_AM_HDR: usize = 128;
/// Largest iov count of am_short_iov and the zcopy operations.
pub const MAX_IOV: usize = 16;
/// Number of receive buffers in an interface's ring (a power of two).
pub const RX_RING_LEN: usize = 64;
/// Capacity of one ring buffer: the largest am_zcopy (header + payload).
const SLOT_CAP: usize = MAX_AM_HDR + SEG_SIZE;

static NEXT_IFACE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static IFACES: RefCell<HashMap<u64, Weak<IfaceInner>>> = RefCell::new(HashMap::new());
}

/// Finds a live self interface of this thread by id.
pub(crate) fn lookup_iface(id: u64) -> Result<Rc<IfaceInner>> {
    IFACES
        .try_with(|m| m.borrow().get(&id).and_then(Weak::upgrade))
        .ok()
        .flatten()
        .ok_or_else(|| {
            Error::Unreachable(format!(
                "self interface #{id} is not open in this thread (self reaches only interfaces \
                 of the same process and thread)"
            ))
        })
}

/// State of one ring buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Empty.
    Free,
    /// Reserved by an am_bcopy whose pack closure is running.
    Writing,
    /// Holds a message of this many bytes.
    Ready(usize),
    /// Reserved, but the send failed: skipped by progress.
    Dropped,
}

pub(crate) struct Slot {
    pub(crate) state: SlotState,
    pub(crate) am_id: u8,
    /// The buffer; taken out (left empty) while user code reads or writes it.
    pub(crate) buf: Box<[u8]>,
}

/// The receive ring: `head..tail` are occupied (wrapping counters).
pub(crate) struct Ring {
    pub(crate) slots: Box<[Slot]>,
    pub(crate) head: usize,
    pub(crate) tail: usize,
}

impl Ring {
    fn new() -> Self {
        let slots = (0..RX_RING_LEN)
            .map(|_| Slot {
                state: SlotState::Free,
                am_id: 0,
                buf: vec![0u8; SLOT_CAP].into_boxed_slice(),
            })
            .collect();
        Ring {
            slots,
            head: 0,
            tail: 0,
        }
    }
    pub(crate) fn count(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }
    pub(crate) fn has_space(&self) -> bool {
        self.count() < RX_RING_LEN
    }
    /// Reserves the tail slot, giving its index, or None when full.
    pub(crate) fn reserve(&mut self) -> Option<usize> {
        if !self.has_space() {
            return None;
        }
        let idx = self.tail % RX_RING_LEN;
        self.tail = self.tail.wrapping_add(1);
        Some(idx)
    }
}

/// A ring buffer lent out while user code reads or writes it. Dropping the loan (also while a
/// panic unwinds) returns the buffer and sets the slot's state, so the ring never loses one.
pub(crate) struct SlotLoan<'a> {
    inner: &'a IfaceInner,
    idx: usize,
    /// The buffer.
    pub(crate) buf: Box<[u8]>,
    /// The state the slot gets back.
    pub(crate) state: SlotState,
    /// The active-message id the slot gets back.
    pub(crate) am_id: u8,
    /// Receive side: free the slot by advancing the head.
    consume: bool,
}

impl<'a> SlotLoan<'a> {
    /// A message being delivered from the head slot `idx`.
    fn consume(inner: &'a IfaceInner, idx: usize, buf: Box<[u8]>) -> Self {
        SlotLoan {
            inner,
            idx,
            buf,
            state: SlotState::Free,
            am_id: 0,
            consume: true,
        }
    }

    /// Reserves the tail slot for a message being packed; `None` when the ring is full. Unless
    /// the caller sets `state`, the slot is skipped by progress.
    pub(crate) fn reserve(inner: &'a IfaceInner) -> Option<Self> {
        let mut ring = inner.ring.borrow_mut();
        let idx = ring.reserve()?;
        inner.mark_work();
        let slot = &mut ring.slots[idx];
        slot.state = SlotState::Writing;
        let buf = std::mem::take(&mut slot.buf);
        Some(SlotLoan {
            inner,
            idx,
            buf,
            state: SlotState::Dropped,
            am_id: 0,
            consume: false,
        })
    }
}

impl Drop for SlotLoan<'_> {
    fn drop(&mut self) {
        // No borrow of the ring is ever held while user code runs, so this cannot fail.
        if let Ok(mut ring) = self.inner.ring.try_borrow_mut() {
            let slot = &mut ring.slots[self.idx];
            slot.buf = std::mem::take(&mut self.buf);
            slot.state = self.state;
            slot.am_id = self.am_id;
            if self.consume {
                ring.head = ring.head.wrapping_add(1);
            }
        }
    }
}

/// The put_bcopy bounce buffer, lent out while the pack closure runs; returned on drop.
pub(crate) struct ScratchLoan<'a> {
    inner: &'a IfaceInner,
    /// The buffer (empty if it was already lent: a put_bcopy from inside a pack closure).
    pub(crate) buf: Box<[u8]>,
}

impl<'a> ScratchLoan<'a> {
    pub(crate) fn take(inner: &'a IfaceInner) -> Self {
        let buf = std::mem::take(&mut *inner.scratch.borrow_mut());
        ScratchLoan { inner, buf }
    }
}

impl Drop for ScratchLoan<'_> {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            if let Ok(mut s) = self.inner.scratch.try_borrow_mut() {
                *s = std::mem::take(&mut self.buf);
            }
        }
    }
}

/// One endpoint's entry in its interface: where it sends and its pending queue.
pub(crate) struct EpSlot {
    pub(crate) target: Option<Weak<IfaceInner>>,
    pub(crate) pending: VecDeque<PendingId>,
    /// The dispatch round in which a retry of this endpoint said "still no resources": it is
    /// not retried again in that round.
    pub(crate) stalled_in: u64,
}

/// State shared by an interface and the endpoints that send to or from it.
pub(crate) struct IfaceInner {
    pub(crate) id: u64,
    pub(crate) attr: IfaceAttr,
    pub(crate) ring: RefCell<Ring>,
    pub(crate) eps: RefCell<slab::Slab<EpSlot>>,
    /// Pending requests queued on this interface's endpoints, in total.
    pub(crate) n_pending: Cell<usize>,
    /// Counts calls to the pending dispatcher (see `EpSlot::stalled_in`).
    dispatch_round: Cell<u64>,
    /// Bounce buffer for put_bcopy (taken out while the pack closure runs).
    pub(crate) scratch: RefCell<Box<[u8]>>,
    /// Events armed with `event_arm`; cleared when the fd is signalled.
    armed: Cell<EventFlags>,
    efd: Waker,
    /// Sender interfaces with pending requests blocked on this ring, woken when it drains.
    blocked: RefCell<Vec<Weak<IfaceInner>>>,
    /// Rung whenever this interface gets work (a slot of its ring taken, a send queued as
    /// pending): see [`Iface::ring_on_work`].
    bell: OnceCell<Rc<dyn WorkBell>>,
}

impl IfaceInner {
    fn signal(&self) {
        // Only a failing eventfd write errs; the sleeper then wakes at its timeout.
        if let Err(e) = self.efd.wake() {
            tracing::warn!("waking the self interface's sleeper: {e}");
        }
    }

    /// Notes that this interface has work (see [`Iface::ring_on_work`]).
    #[inline(always)]
    pub(crate) fn mark_work(&self) {
        if let Some(bell) = self.bell.get() {
            bell.ring();
        }
    }

    /// A message was queued: wake a sleeper armed for receives.
    #[inline]
    pub(crate) fn notify_recv(&self) {
        if self.armed.get().contains(EventFlags::RECV) {
            self.armed.set(EventFlags::empty());
            self.signal();
        }
    }

    /// Send resources returned: wake a sleeper armed for send completions.
    fn notify_send(&self) {
        if self.armed.get().contains(EventFlags::SEND_COMP) {
            self.armed.set(EventFlags::empty());
            self.signal();
        }
    }

    /// Records that `sender` has pending requests waiting for space in this ring.
    pub(crate) fn add_blocked(&self, sender: &Rc<IfaceInner>) {
        let mut b = self.blocked.borrow_mut();
        if !b
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Rc::as_ptr(sender)))
        {
            b.push(Rc::downgrade(sender));
        }
    }

    /// True when some endpoint has pending requests that could be dispatched now.
    fn pending_dispatchable(&self) -> bool {
        if self.n_pending.get() == 0 {
            return false;
        }
        self.eps
            .borrow()
            .iter()
            .any(|(_, s)| !s.pending.is_empty() && target_has_space(&s.target))
    }

    fn drain_fd(&self) {
        self.efd.drain();
    }
}

/// Whether a pending request toward `target` should be retried now: the ring has space, or the
/// target is gone (the retry then reports the error).
fn target_has_space(target: &Option<Weak<IfaceInner>>) -> bool {
    match target.as_ref().and_then(Weak::upgrade) {
        Some(t) => t.ring.borrow().has_space(),
        None => true,
    }
}

fn self_attr() -> IfaceAttr {
    IfaceAttr {
        flags: IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::AM_ZCOPY
            | IfaceFlags::PUT_SHORT
            | IfaceFlags::PUT_BCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::GET_SHORT
            | IfaceFlags::GET_BCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::ATOMIC_CPU
            | IfaceFlags::PENDING
            | IfaceFlags::CONNECT_TO_IFACE
            | IfaceFlags::CONNECT_TO_EP,
        event_flags: EventFlags::FD | EventFlags::RECV | EventFlags::SEND_COMP,
        atomics: AtomicCaps {
            op32: AtomicOps::POST_ALL,
            fop32: AtomicOps::FETCH_ALL,
            op64: AtomicOps::POST_ALL,
            fop64: AtomicOps::FETCH_ALL,
        },
        am: OpLimits {
            max_short: SEG_SIZE,
            max_bcopy: SEG_SIZE,
            min_zcopy: 0,
            max_zcopy: SEG_SIZE,
            max_iov: MAX_IOV,
            max_hdr: MAX_AM_HDR,
        },
        put: OpLimits {
            max_short: SEG_SIZE,
            max_bcopy: SEG_SIZE,
            min_zcopy: 0,
            max_zcopy: usize::MAX,
            max_iov: MAX_IOV,
            max_hdr: 0,
        },
        get: OpLimits {
            max_short: SEG_SIZE,
            max_bcopy: SEG_SIZE,
            min_zcopy: 0,
            max_zcopy: usize::MAX,
            max_iov: MAX_IOV,
            max_hdr: 0,
        },
        tag: Default::default(),
        device_addr_len: DeviceAddr::LEN,
        iface_addr_len: IfaceAddr::LEN,
        ep_addr_len: EpAddr::LEN,
        // Measured with `self_::tests::bench` (release, 2-core VM): 8-byte am_short send +
        // delivery 42 ns, 37 M msg/s in bursts, 1 MiB put_zcopy 16.7 GB/s. Rounded down.
        perf: PerfModel {
            send_overhead: 15e-9,
            recv_overhead: 15e-9,
            bandwidth: 12e9,
            latency: 0.0,
        },
        priority: 0,
    }
}

/// A self interface.
pub struct SelfIface {
    inner: Rc<IfaceInner>,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
}

impl std::fmt::Debug for SelfIface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SelfIface(#{})", self.inner.id)
    }
}

impl SelfIface {
    /// [`Iface::progress`] with something to do: delivers the messages queued now, then runs
    /// the pending sends.
    #[inline(never)]
    fn progress_busy<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let inner = Rc::clone(&self.inner);
        let mut n = 0;
        // Deliver the messages queued now (not those queued by callbacks meanwhile).
        let avail = inner.ring.borrow().count();
        for _ in 0..avail {
            let (loan, am_id, len) = {
                let mut ring = inner.ring.borrow_mut();
                let idx = ring.head % RX_RING_LEN;
                let slot = &mut ring.slots[idx];
                match slot.state {
                    SlotState::Ready(len) => {
                        let buf = std::mem::take(&mut slot.buf);
                        let am_id = slot.am_id;
                        drop(ring);
                        (SlotLoan::consume(&inner, idx, buf), am_id, len)
                    }
                    SlotState::Dropped => {
                        slot.state = SlotState::Free;
                        ring.head = ring.head.wrapping_add(1);
                        continue;
                    }
                    // A pack closure is still writing it (a send from inside a callback).
                    SlotState::Writing | SlotState::Free => break,
                }
            };
            sink.am(am_id, &loan.buf[..len]);
            n += 1;
            drop(loan); // returns the buffer and frees the slot
        }
        if n > 0 {
            let blocked = inner.blocked.borrow();
            if !blocked.is_empty() {
                for sender in blocked.iter().filter_map(Weak::upgrade) {
                    sender.notify_send();
                }
                drop(blocked);
                inner.blocked.borrow_mut().clear();
            }
        }
        if inner.n_pending.get() > 0 {
            n += self.dispatch_pending(sink);
        }
        n
    }

    /// Opens a self interface on `params.device` (which must be `memory0`).
    pub fn open(params: &IfaceParams) -> Result<Self> {
        if params.device != DEVICE_NAME {
            return Err(Error::NoDevice(format!(
                "self has no device '{}'; its only device is '{DEVICE_NAME}'",
                params.device
            )));
        }
        let efd = Waker::new()?;
        let id = NEXT_IFACE.fetch_add(1, Ordering::Relaxed);
        let dev_addr = DeviceAddr::local().encode();
        let iface_addr = IfaceAddr { iface_id: id }.encode();
        let inner = Rc::new(IfaceInner {
            id,
            attr: IfaceAttr {
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
                ..self_attr()
            },
            ring: RefCell::new(Ring::new()),
            eps: RefCell::new(slab::Slab::with_capacity(4)),
            n_pending: Cell::new(0),
            dispatch_round: Cell::new(0),
            scratch: RefCell::new(vec![0u8; SEG_SIZE].into_boxed_slice()),
            armed: Cell::new(EventFlags::empty()),
            efd,
            blocked: RefCell::new(Vec::with_capacity(4)),
            bell: OnceCell::new(),
        });
        IFACES.with(|m| m.borrow_mut().insert(id, Rc::downgrade(&inner)));
        Ok(SelfIface {
            inner,
            dev_addr,
            iface_addr,
        })
    }

    /// The interface's process-unique id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Number of received messages waiting for progress.
    pub fn rx_queued(&self) -> usize {
        self.inner.ring.borrow().count()
    }

    fn check_reachable(&self, dev_addr: &[u8], iface_id: Option<u64>) -> Result<()> {
        let dev = DeviceAddr::decode(dev_addr)?;
        dev.check_this_process()?;
        if let Some(id) = iface_id {
            lookup_iface(id)?;
        }
        Ok(())
    }

    fn new_ep(&mut self, target: Option<Weak<IfaceInner>>) -> SelfEp {
        let key = self.inner.eps.borrow_mut().insert(EpSlot {
            target: target.clone(),
            pending: VecDeque::with_capacity(4),
            stalled_in: 0,
        });
        SelfEp::new(EpId(key as u32), Rc::downgrade(&self.inner), target)
    }

    /// Retries pending requests of endpoints whose target has space, one request per endpoint
    /// per round (round-robin), at most as many as were queued on entry. Gives the number
    /// retried.
    fn dispatch_pending<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let inner = &self.inner;
        let round = inner.dispatch_round.get() + 1;
        inner.dispatch_round.set(round);
        let mut budget = inner.n_pending.get();
        let mut n = 0;
        while budget > 0 {
            let mut progressed = false;
            let mut key = 0;
            while budget > 0 && key < inner.eps.borrow().capacity() {
                let req = {
                    let mut eps = inner.eps.borrow_mut();
                    match eps.get_mut(key) {
                        Some(slot)
                            if slot.stalled_in != round && target_has_space(&slot.target) =>
                        {
                            slot.pending.pop_front()
                        }
                        _ => None,
                    }
                };
                if let Some(req) = req {
                    inner.n_pending.set(inner.n_pending.get() - 1);
                    budget -= 1;
                    n += 1;
                    progressed = true;
                    if !sink.pending(EpId(key as u32), req) {
                        let mut eps = inner.eps.borrow_mut();
                        if let Some(slot) = eps.get_mut(key) {
                            slot.pending.push_front(req);
                            slot.stalled_in = round;
                            inner.n_pending.set(inner.n_pending.get() + 1);
                            inner.mark_work();
                        }
                    }
                }
                key += 1;
            }
            if !progressed {
                break;
            }
        }
        n
    }
}

impl Drop for SelfIface {
    fn drop(&mut self) {
        let id = self.inner.id;
        let _ = IFACES.try_with(|m| m.borrow_mut().remove(&id));
        // Senders blocked on this ring retry now (and learn that it is gone).
        for sender in self.inner.blocked.borrow().iter().filter_map(Weak::upgrade) {
            sender.notify_send();
        }
    }
}

impl Iface for SelfIface {
    type Ep = SelfEp;

    fn attr(&self) -> &IfaceAttr {
        &self.inner.attr
    }

    fn tl_name(&self) -> &'static str {
        super::TL_NAME
    }

    fn device_name(&self) -> &str {
        DEVICE_NAME
    }

    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }

    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }

    fn is_reachable(
        &self,
        dev_addr: &[u8],
        iface_addr: Option<&[u8]>,
    ) -> std::result::Result<(), String> {
        let id = match iface_addr {
            Some(a) => Some(IfaceAddr::decode(a).map_err(|e| e.to_string())?.iface_id),
            None => None,
        };
        self.check_reachable(dev_addr, id)
            .map_err(|e| e.to_string())
    }

    fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<SelfEp> {
        let id = IfaceAddr::decode(iface_addr)?.iface_id;
        self.check_reachable(dev_addr, None)?;
        let target = lookup_iface(id)?;
        Ok(self.new_ep(Some(Rc::downgrade(&target))))
    }

    fn ep_create(&mut self) -> Result<SelfEp> {
        Ok(self.new_ep(None))
    }

    /// Nothing queued and no send pending: two loads (a caller that asked it to ring, see
    /// [`Iface::ring_on_work`], polls it only after a ring). Otherwise
    /// `SelfIface::progress_busy` delivers.
    #[inline(always)]
    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        if self.idle_poll() {
            return 0;
        }
        self.progress_busy(sink)
    }

    #[inline(always)]
    fn idle_poll(&mut self) -> bool {
        self.inner.n_pending.get() == 0 && self.inner.ring.borrow().count() == 0
    }

    #[inline(always)]
    fn progress_not_idle<S: EventSink>(&mut self, sink: &mut S) -> usize {
        self.progress_busy(sink)
    }

    /// Its work comes only from endpoints of this thread (the ring's slots and the pending
    /// queue), each of which rings. One bell: a second call keeps the first (and says false).
    fn ring_on_work(&mut self, bell: Rc<dyn WorkBell>) -> bool {
        self.inner.bell.set(bell).is_ok()
    }

    fn flush(&mut self, _comp: CompletionId) -> Result<Outcome> {
        if self.inner.n_pending.get() > 0 {
            Ok(Outcome::NoResource)
        } else {
            Ok(Outcome::DONE)
        }
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.inner.efd.fd())
    }

    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        let supported = EventFlags::RECV | EventFlags::SEND_COMP;
        let events = events - EventFlags::FD;
        if !supported.contains(events) {
            return Err(Error::Unsupported(format!(
                "self can arm only RECV and SEND_COMP events, not {events:?}"
            )));
        }
        self.inner.drain_fd();
        if events.contains(EventFlags::RECV) && self.inner.ring.borrow().count() > 0 {
            return Err(Error::Busy("received messages are waiting".into()));
        }
        if events.contains(EventFlags::SEND_COMP) && self.inner.pending_dispatchable() {
            return Err(Error::Busy("pending requests can be retried".into()));
        }
        self.inner.armed.set(events);
        Ok(())
    }
}

/// Resolves an endpoint address to the interface that owns it.
pub(crate) fn resolve_ep_addr(ep_addr: &EpAddr) -> Result<Rc<IfaceInner>> {
    let target = lookup_iface(ep_addr.iface_id)?;
    if !target.eps.borrow().contains(ep_addr.ep_id as usize) {
        return Err(Error::Unreachable(format!(
            "self interface #{} has no endpoint #{}",
            ep_addr.iface_id, ep_addr.ep_id
        )));
    }
    Ok(target)
}
