//! Progress: polls the interfaces (idle ones less often), feeds their events to the worker
//! through [`Sink`], and runs the pending queues, flushes, closes, timers and callbacks.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::wire::am_id;
use crate::wireup::ep::connect_ep;
use crate::worker::req::{ReqKind, COMP_ATOMIC, COMP_FLUSH, COMP_GET, COMP_PUT, COMP_ZCOPY};
use crate::worker::state::State;
use crate::worker::Worker;
use std::time::Duration;
use ucs::{Error, Result};
use uct::Iface as _;
use uct::{CompletionId, EpId, EventSink, TagRecvId};

/// An interface no endpoint uses (it may still receive a peer's first wire-up message or
/// connection, or the failure of a connection whose lane moved to another transport) is polled
/// on one progress call in this many, and at least every [`IDLE_IFACE_WAIT`]: polling an idle
/// tcp interface costs system calls (tcp itself asks epoll on one of its calls in 4 to 16),
/// several times the cost of a whole shared-memory message, and under an emulated CPU a
/// tenth of an rc_verbs round trip.
pub(crate) const IDLE_IFACE_PERIOD: u32 = 256;
/// Time after which a call that finds the clock moved polls every interface however few
/// progress calls there were (the coarse clock moves in steps of 1-4 ms).
pub(crate) const IDLE_IFACE_WAIT: Duration = Duration::from_millis(1);
/// For this many progress calls after an event, an interface without endpoints is polled on
/// every call: long enough for a wire-up exchange's next message, short enough that a new
/// endpoint's first messages do not pay long for polling the wire-up helper beside their own
/// interface (with 4,096, a shared-memory ping-pong's first ~3,800 progress calls each cost
/// ~180 instructions more).
pub(crate) const IDLE_IFACE_RECENT: u32 = 256;
/// The clock is read on one progress call in this many (and after a possible sleep): message
/// timestamps and keepalive deadlines need milliseconds, and a call that reads the coarse clock
/// and polls its interfaces in full costs about 230 instructions, eight idle shared-memory
/// polls. At 16 that call added 15 instructions to each idle call through the C library (119
/// on average; callgrind, `msgcost 8 N idle`), at 64 it adds 4 (111 on average), and 64 idle
/// calls still take well under a microsecond.
pub const CLOCK_PERIOD: u32 = 64;
/// Progress calls that take this long each, on average since the last clock read, read the
/// clock on every call until they are quick again. Counting calls paces the clock, the timers
/// and the idle interfaces' polling only while calls are quick: over Soft-RoCE a call can
/// spend 50-150 ms in one RDMA READ doorbell, and `CLOCK_PERIOD` such calls left the ud_verbs
/// wire-up interface unpolled (its peer's keepalive probes unanswered) for seconds. The test
/// runs only on calls that read the clock anyway, so quick calls pay nothing for it.
pub(crate) const SLOW_CALL: Duration = Duration::from_millis(1);
/// Most interfaces a [`PollList`] names. A worker usually polls one (its shared-memory or
/// network interface: the self transport, to which Open MPI and MPICH open an endpoint, is
/// polled after it rings instead) or two (shared memory and tcp); one with more qualifying
/// asks every interface on every call.
const POLL_LIST_MAX: usize = 4;

/// The interfaces the calls between two clock reads poll: those [`Worker::wants_poll`] names,
/// found on each call that reads the clock. An interface that gains its first endpoint
/// meanwhile waits for that call (at most `CLOCK_PERIOD` calls); one that loses its last is
/// polled until then. Each entry is the interface's index and whether it has no endpoints
/// (polled for a recent event: its events are noted in `last_event`, which keeps it polled;
/// those of an interface with endpoints need not be).
#[derive(Clone, Copy, Default)]
pub(crate) struct PollList {
    /// Entries in `ifaces`; more than [`POLL_LIST_MAX`]: more qualify than it holds.
    len: u8,
    ifaces: [(u16, bool); POLL_LIST_MAX],
}

impl PollList {
    /// The interfaces `w` polls on every call.
    fn of(w: &Worker) -> Self {
        let mut l = PollList::default();
        for i in 0..w.ifaces.len() {
            if w.wants_poll(i, false) {
                let Some(slot) = l.ifaces.get_mut(usize::from(l.len)) else {
                    l.len += 1;
                    return l;
                };
                *slot = (i as u16, w.st.iface_users[i] == 0);
                l.len += 1;
            }
        }
        l
    }
}

impl Worker {
    /// Makes progress on every interface, then on queued sends and timers. Gives the number of
    /// events handled. The idle spin (one interface polled, whose quick look finds nothing, and
    /// no other work) is inlined into the callers (the C library's `ucp_worker_progress` among
    /// them) and costs no call; the rest is `Worker::progress_polled`.
    #[inline(always)]
    pub fn progress(&mut self) -> usize {
        self.tick = self.tick.wrapping_add(1);
        // One call in CLOCK_PERIOD (IDLE_IFACE_PERIOD is a multiple of it), and any call after
        // a wake-up or with a stale clock, reads the clock and may poll every interface.
        let timed = self.tick.is_multiple_of(CLOCK_PERIOD) | self.st.clock_stale | self.poll_all;
        if !timed {
            if let Some(i) = self.solo {
                if let Some(f) = self.ifaces.get_mut(i) {
                    if !f.idle_poll() {
                        return self.progress_solo(i);
                    }
                    if !self.st.more_to_do(false) {
                        return 0;
                    }
                    return self.progress_more();
                }
            } else {
                return self.progress_listed();
            }
        }
        self.progress_polled(timed)
    }

    /// [`Worker::progress`] on a call that polls the [`PollList`] (a worker that polls two
    /// interfaces, shared memory and tcp): their quick looks, then the interfaces from the
    /// first that has something, then the queued work. Out of line, so the one-interface
    /// spin inlined into the callers stays small.
    #[inline(never)]
    fn progress_listed(&mut self) -> usize {
        let len = usize::from(self.polled.len);
        let busy = self.listed_first_busy(len);
        if busy < len {
            return self.progress_listed_from(busy);
        }
        if busy > len {
            return self.progress_polled(false);
        }
        if !self.st.more_to_do(false) {
            return 0;
        }
        self.progress_more()
    }

    /// The quick looks of the [`PollList`]'s `len` interfaces, in order, up to the first that
    /// finds something: its position, `len` when every one is idle (each look then counted as
    /// its poll), or more than `len` when more interfaces qualify than the list holds.
    #[inline(always)]
    fn listed_first_busy(&mut self, len: usize) -> usize {
        if len > POLL_LIST_MAX {
            return usize::MAX;
        }
        for k in 0..len {
            let i = usize::from(self.polled.ifaces[k].0);
            let Some(f) = self.ifaces.get_mut(i) else {
                return usize::MAX;
            };
            if !f.idle_poll() {
                return k;
            }
        }
        len
    }

    /// [`Worker::progress`] when the one interface polled has something (its quick look said
    /// so), then the queued work.
    #[inline(never)]
    fn progress_solo(&mut self, i: usize) -> usize {
        let n = self.poll_one(i, self.solo_idle, true);
        if self.st.more_to_do(false) {
            return n + self.progress_more();
        }
        n
    }

    /// [`Worker::progress`] when entry `k` of the [`PollList`] has something (its quick look
    /// said so, those before it were idle): that interface and the ones after it, then the
    /// queued work.
    #[inline(never)]
    fn progress_listed_from(&mut self, k: usize) -> usize {
        let l = self.polled;
        let Some(&(i, idle)) = l.ifaces.get(k) else {
            return 0;
        };
        let mut n = self.poll_one(usize::from(i), idle, true);
        for &(i, idle) in l.ifaces.get(k + 1..usize::from(l.len)).unwrap_or(&[]) {
            n += self.poll_one(usize::from(i), idle, false);
        }
        if self.st.more_to_do(false) {
            return n + self.progress_more();
        }
        n
    }

    /// [`Worker::progress`] past the idle quick look (the tick already counted).
    #[inline(never)]
    fn progress_polled(&mut self, timed: bool) -> usize {
        if timed {
            return self.progress_timed();
        }
        let n = match self.solo {
            Some(i) => self.poll_one(i, self.solo_idle, false),
            None => self.poll_listed(),
        };
        if self.st.more_to_do(false) {
            return n + self.progress_more();
        }
        n
    }

    /// [`Worker::progress`] on a call that reads the clock.
    #[inline(never)]
    fn progress_timed(&mut self) -> usize {
        let clock_read = self.tick.is_multiple_of(CLOCK_PERIOD) || self.st.clock_stale;
        let mut all =
            std::mem::take(&mut self.poll_all) || self.tick.is_multiple_of(IDLE_IFACE_PERIOD);
        if clock_read {
            // The coarse clock may lag the fine reading the worker started with: the cache
            // never goes back (a timer due at the cached time stays due).
            let now = self.st.clock.now_coarse();
            let calls = self.tick.wrapping_sub(self.clock_read_tick).max(1);
            let slow = now.saturating_sub(self.clock_read_at) >= SLOW_CALL * calls;
            self.clock_read_tick = self.tick;
            self.clock_read_at = now;
            if now > self.st.now_cache {
                self.st.now_cache = now;
                self.st.now_stamp = crate::worker::ep::Stamp::of(now);
                // The clock moves in steps of 1-4 ms: this test runs once a step.
                if now >= self.idle_due {
                    self.idle_due = now.saturating_add(IDLE_IFACE_WAIT);
                    all = true;
                }
            }
            // Slow calls: the next one reads the clock too.
            self.st.clock_stale = slow;
        }
        let mut n = self.poll_ifaces(all, true);
        self.solo = self.solo_iface();
        self.solo_idle = self.solo.is_some_and(|i| self.st.iface_users[i] == 0);
        if self.solo.is_none() {
            self.polled = PollList::of(self);
        }
        if self.st.more_to_do(clock_read) {
            n += self.progress_more();
        }
        if self.st.tag.has_dropped_msgs() {
            self.st.tag_family().discard_dropped_msgs();
        }
        n
    }

    /// Whether interface `i` is polled on a call that does not poll them all: it has endpoints
    /// or had an event lately, and it is neither `SYNC_ONLY` nor polled after it rings (those
    /// only on a `timed` call, one that reads the clock).
    #[inline(always)]
    fn wants_poll(&self, i: usize, timed: bool) -> bool {
        let sync_only = self.st.info[i]
            .attr
            .flags
            .contains(uct::IfaceFlags::SYNC_ONLY);
        (timed || !(sync_only || self.rung.contains(&i)))
            && (self.st.iface_users[i] != 0
                || self.tick.wrapping_sub(self.last_event[i]) <= IDLE_IFACE_RECENT)
    }

    /// The interface that alone qualifies for polling on every call ([`Worker::wants_poll`]),
    /// looked for on each call that reads the clock (the common case, cheaper to find than a
    /// whole [`PollList`]).
    fn solo_iface(&self) -> Option<usize> {
        let mut solo = None;
        for i in 0..self.ifaces.len() {
            if self.wants_poll(i, false) {
                if solo.is_some() {
                    return None;
                }
                solo = Some(i);
            }
        }
        solo
    }

    /// Polls interface `i`, noting an event in `last_event` when `note` (an interface with
    /// endpoints needs no note: nothing reads it, and the call returns sooner without).
    /// `looked`: the interface's quick look has just found something, so its poll starts past
    /// it. Gives the number of events handled.
    #[inline(always)]
    fn poll_one(&mut self, i: usize, note: bool, looked: bool) -> usize {
        // A lent active message not taken since the call that lent it: copied out before its
        // transport may release its bytes.
        self.st.am.unlend();
        let matched = self.st.tag.matched();
        let Some(iface) = self.ifaces.get_mut(i) else {
            return 0;
        };
        let mut sink = Sink {
            st: &mut self.st,
            iface: i,
            matched,
        };
        let k = if looked {
            iface.progress_not_idle(&mut sink)
        } else {
            iface.progress(&mut sink)
        };
        if k > 0 && note {
            self.last_event[i] = self.tick;
        }
        k
    }

    /// Polls the interfaces that ring when they get work (after a ring), ringing again for one
    /// that still has work after its poll. Gives the number of events handled.
    #[inline(never)]
    fn poll_rung(&mut self) -> usize {
        let mut n = 0;
        for k in 0..self.rung.len() {
            let Some(&i) = self.rung.get(k) else {
                break;
            };
            n += self.poll_one(i, false, false);
            if self.ifaces.get_mut(i).is_some_and(|f| !f.idle_poll()) {
                uct::WorkBell::ring(&*self.st.req_shared);
            }
        }
        n
    }

    /// Polls every interface (`all`) or those [`Worker::wants_poll`] names. Gives the number
    /// of events handled.
    #[inline(always)]
    pub(super) fn poll_ifaces(&mut self, all: bool, timed: bool) -> usize {
        let mut n = 0;
        for i in 0..self.ifaces.len() {
            if all || self.wants_poll(i, timed) {
                n += self.poll_one(i, true, false);
            }
        }
        n
    }

    /// Polls the interfaces of [`Worker::polled`] when it lists none or several (one alone is
    /// `solo`, polled inline), or every interface [`Worker::wants_poll`] names when more
    /// qualify than it holds. Out of line: the common call, which polls one interface, then
    /// keeps a small frame.
    #[inline(never)]
    fn poll_listed(&mut self) -> usize {
        let l = self.polled;
        let Some(listed) = l.ifaces.get(..usize::from(l.len)) else {
            return self.poll_ifaces(false, false);
        };
        let mut n = 0;
        for &(i, idle) in listed {
            n += self.poll_one(usize::from(i), idle, false);
        }
        n
    }

    /// The steps of [`Worker::progress`] after the interfaces: endpoints to connect, pending
    /// queues, flushes, closes, timers, failure notifications, callbacks and dropped request
    /// handles, each only when it has something to do. Gives the number of events handled.
    #[inline(never)]
    pub(super) fn progress_more(&mut self) -> usize {
        let mut n = 0;
        if self.st.req_shared.take_rung() {
            n += self.poll_rung();
        }
        while let Some(idx) = self.st.to_connect.pop() {
            if let Err(e) = connect_ep(&mut self.ifaces, &mut self.st, idx)
                .and_then(|()| self.st.ep_lane_start(idx))
            {
                self.st.fail_ep(idx, e);
            }
            n += 1;
        }
        let st = &mut self.st;
        if !st.pending_eps.is_empty() {
            n += st.progress_pending();
        }
        if !st.flushes.is_empty() {
            st.progress_flushes();
        }
        if !st.closings.is_empty() {
            st.progress_closings();
        }
        if st.now_cache >= st.next_timer {
            st.run_timers();
        }
        if !st.failed_notify.is_empty() {
            n += st.notify_failures();
        }
        if st.rndv.has_reads() {
            n += st.rndv_family().progress_rndv_gets();
        }
        // (After the reads: a read that failed has its endpoint failed in this call.)
        while let Some((idx, gen, e)) = st.to_fail.pop() {
            if st.ep_gen(idx) == Some(gen) {
                st.fail_ep(idx, e);
            }
            n += 1;
        }
        if !st.held_done.is_empty() {
            n += st.settle_held();
        }
        if !st.callbacks_due.is_empty() {
            n += st.run_callbacks();
        }
        if st.req_shared.dropped() {
            n += st.release_dropped();
        }
        st.more_work = st.queued_work();
        n
    }
}

impl State {
    /// True when a step of [`Worker::progress_more`] has something to do: one test of them all
    /// (`more_work` stands for the queues) keeps an idle call short. Timers fall due only when
    /// the clock moves (`clock_read`: it was read on this call) or when one is added already
    /// due (`add_timer` marks the clock stale then): calls that read no clock skip that test.
    #[inline(always)]
    fn more_to_do(&self, clock_read: bool) -> bool {
        debug_assert!(
            self.more_work || !self.queued_work(),
            "queued work not flagged"
        );
        self.more_work | (clock_read && self.now_cache >= self.next_timer) | self.req_shared.any()
    }

    /// Whether any queue [`Worker::progress_more`] steps holds something (what `more_work`
    /// stands for).
    fn queued_work(&self) -> bool {
        !self.to_connect.is_empty()
            || !self.pending_eps.is_empty()
            || !self.flushes.is_empty()
            || !self.closings.is_empty()
            || !self.failed_notify.is_empty()
            || !self.callbacks_due.is_empty()
            || !self.held_done.is_empty()
            || !self.to_fail.is_empty()
            || self.rndv.has_reads()
    }
}

/// Smallest message (with its headers) [`Sink::defer`] leaves for the next progress call.
const DEFER_MIN: usize = 2048;

pub(crate) struct Sink<'a> {
    pub(crate) st: &'a mut State,
    pub(crate) iface: usize,
    /// `st.tag.matched()` when the interface's progress call began.
    pub(crate) matched: u64,
}

impl EventSink for Sink<'_> {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.st.handle_am_from(Some(self.iface), id, data);
    }
    /// User active messages: a small one for the C library's handlers (an id queued without
    /// `whole`) that finds nothing waiting is lent, and the client reads it in place.
    #[inline(always)]
    fn lends(&self, id: u8) -> bool {
        id == am_id::USER_AM
    }
    /// Out of line: the receive loop that calls it stays as small as without lending.
    #[inline(never)]
    fn am_lend(&mut self, id: u8, data: &[u8]) -> bool {
        self.st.handle_am_lend(Some(self.iface), id, data)
    }
    fn am_keep(&mut self, id: u8, data: &[u8], keep: uct::AmKeep<'_>) {
        self.st.handle_am_keep(Some(self.iface), id, data, keep);
    }
    /// An eager message of at least [`DEFER_MIN`] bytes for which no receive is posted, after
    /// this call already completed a posted receive: left for the next call. A caller that
    /// waits for one receive at a time then gets its completion back and posts the next
    /// receive before that message is taken, so the message is copied straight into it rather
    /// than parked as unexpected (its buffer kept, a spare buffer swapped in) and matched and
    /// copied later. Smaller messages are taken: for them a receive found waiting costs less
    /// than the extra progress call and posted request (tag_bw 1 KiB ran 40% slower deferred).
    #[inline]
    fn defer(&mut self, id: u8, data: &[u8]) -> bool {
        id == am_id::EAGER_ONLY
            && data.len() >= DEFER_MIN
            && self.st.tag.matched() != self.matched
            && crate::wire::split_eager_only(data)
                .is_some_and(|(_, tag, _)| !self.st.tag.may_match(tag))
    }
    fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
        self.st.handle_completion(comp, result);
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        if let Some(idx) = self.st.by_uct.get(&(self.iface, ep.0)) {
            self.st.fail_ep(idx, err);
        }
    }
    fn tag_unexp_eager(&mut self, tag: u64, imm: u64, data: &[u8]) {
        self.st.tag_family().tm_unexp_eager(tag, imm, data);
    }
    fn tag_unexp_rndv(&mut self, _tag: u64, rndv: uct::RndvRemote<'_>) {
        // The header is the sender's whole RTS message: the software rendezvous takes over.
        self.st.handle_am(am_id::RTS, rndv.header);
    }
    fn tag_recv_done(&mut self, ctx: TagRecvId, tag: u64, imm: u64, len: usize, res: Result<()>) {
        self.st.tag_family().tm_recv_done(ctx.0, tag, imm, len, res);
    }
}

impl State {
    pub(crate) fn handle_completion(&mut self, comp: CompletionId, result: Result<u64>) {
        let comp = comp.get();
        let kind = comp >> 60;
        let wire = comp & ((1 << 60) - 1);
        let Some(key) = self.req_by_wire(wire) else {
            return;
        };
        // A completion of the wrong kind for its request is dropped (the transport mixed up
        // its operations; the request is left as it is).
        let fits = match (kind, &self.reqs[key].kind) {
            (COMP_GET, ReqKind::Recv(_)) | (COMP_PUT | COMP_ZCOPY, ReqKind::Send(_)) => true,
            (COMP_GET | COMP_PUT | COMP_ZCOPY, _) => false,
            _ => true,
        };
        if !fits {
            tracing::warn!(
                "completion of kind {kind} for request {wire:#x} of another kind dropped"
            );
            return;
        }
        let ep = self.reqs[key].ep;
        if let Err(e) = result {
            self.finish(key, Err(e.clone()));
            self.fail_req_ep(ep, e);
            return;
        }
        let r = match kind {
            COMP_GET => self.rndv_family().get_completed(key),
            COMP_PUT => self.rndv_family().put_completed(key),
            COMP_ZCOPY => {
                self.zcopy_completed(key);
                Ok(())
            }
            crate::tag::offload::COMP_TM => {
                self.tag_family().tm_send_done(key, Ok(()));
                Ok(())
            }
            COMP_ATOMIC => {
                // (An error returned above.)
                if let Ok(v) = result {
                    self.amo_family().amo_fetched(key, v);
                }
                Ok(())
            }
            COMP_FLUSH => {
                if let ReqKind::Flush {
                    eps_left, retry, ..
                } = &mut self.reqs[key].kind
                {
                    *eps_left = eps_left.saturating_sub(1);
                    if *eps_left == 0 && retry.is_empty() {
                        self.finish(key, Ok(()));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = r {
            self.fail_req_ep(ep, e);
        }
    }

    /// A completion of a request bound to endpoint `ep` failed: the endpoint fails. A request
    /// bound to none has nothing to fail beyond itself.
    fn fail_req_ep(&mut self, ep: Option<usize>, e: Error) {
        match ep {
            Some(idx) => self.fail_ep(idx, e),
            None => tracing::debug!("completion of a request without an endpoint failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{IDLE_IFACE_PERIOD, IDLE_IFACE_RECENT};
    use crate::{Context, ContextParams, EpHandle, EpParams, Features, Op, UcpConfig, Worker};
    use std::time::{Duration, Instant};
    use ucs::time::ManualClock;

    const WATCHDOG: Duration = Duration::from_secs(60);

    fn tcp_ctx() -> Context {
        Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: vec!["tcp".into()],
                net_devices: vec!["lo".into()],
                ..Default::default()
            }),
        })
        .expect("context")
    }

    /// Sends `msg` with `tag` from `from` over `ep` to `to`, progressing both until `to` has
    /// received it; gives what `to` received.
    fn exchange(from: &mut Worker, ep: EpHandle, to: &mut Worker, tag: u64, msg: &[u8]) -> Vec<u8> {
        let mut recv = match to.tag_recv(vec![0u8; 64], tag, u64::MAX).expect("recv") {
            Op::Pending(r) => r,
            Op::Done(c) => panic!("nothing was sent yet: {:?}", c.status),
        };
        let mut send = match from.tag_send(ep, tag, msg).expect("send") {
            Op::Pending(r) => Some(r),
            Op::Done(c) => {
                c.status.expect("send");
                None
            }
        };
        let deadline = Instant::now() + WATCHDOG;
        loop {
            from.progress();
            to.progress();
            if let Some(r) = send.take() {
                match from.request_take(r) {
                    Ok(c) => c.status.expect("send"),
                    Err(r) => send = Some(r),
                }
            }
            match to.request_take(recv) {
                Ok(c) => {
                    c.status.expect("receive");
                    let mut buf = c.buf.expect("receive buffer");
                    buf.truncate(c.len);
                    return buf;
                }
                Err(r) => recv = r,
            }
            assert!(
                Instant::now() < deadline,
                "watchdog: the message never arrived"
            );
        }
    }

    /// A tag context over transports `tls`, without keepalive.
    fn tag_ctx(tls: &[&str]) -> Context {
        Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: tls.iter().map(|t| t.to_string()).collect(),
                keepalive_interval: None,
                ..Default::default()
            }),
        })
        .expect("context")
    }

    /// With posix and cma, the calls between two clock reads poll the posix interface alone:
    /// cma is `SYNC_ONLY` (nothing arrives on it, its progress only watches peers), so only
    /// the calls that read the clock poll it. Messages keep arriving all along.
    #[test]
    fn calls_between_clock_reads_poll_the_one_busy_interface() {
        let ctx = tag_ctx(&["posix", "cma"]);
        let mut a = Worker::new(&ctx).expect("worker a");
        let mut b = Worker::new(&ctx).expect("worker b");
        let ab = a
            .ep_create(b.address(), EpParams::default())
            .expect("ep a->b");
        for tag in 0..64u64 {
            let msg = tag.to_le_bytes();
            assert_eq!(exchange(&mut a, ab, &mut b, tag, &msg), msg);
        }
        let pos = |w: &Worker, tl: &str| {
            w.st.info
                .iter()
                .position(|i| i.tl_name == tl)
                .unwrap_or_else(|| panic!("no {tl} interface"))
        };
        for w in [&a, &b] {
            let (posix, cma) = (pos(w, "posix"), pos(w, "cma"));
            let sync_only = |i: usize| w.st.info[i].attr.flags.contains(uct::IfaceFlags::SYNC_ONLY);
            assert!(sync_only(cma) && !sync_only(posix));
            assert_eq!(
                w.solo,
                Some(posix),
                "posix alone is polled between clock reads"
            );
        }
    }

    /// A worker with an endpoint to itself (as Open MPI's and MPICH's are) polls its
    /// shared-memory interface inline between clock reads (`solo`) and its self interface only
    /// after that interface rings: a message to itself arrives on the next call all the same.
    #[test]
    fn calls_between_clock_reads_poll_self_after_it_rings() {
        // The peer is reached over posix, as one in another process is.
        let ctx = Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: ["posix", "cma", "self"].map(String::from).to_vec(),
                keepalive_interval: None,
                self_across_workers: false,
                ..Default::default()
            }),
        })
        .expect("context");
        let mut a = Worker::new(&ctx).expect("worker a");
        let mut b = Worker::new(&ctx).expect("worker b");
        let ab = a
            .ep_create(b.address(), EpParams::default())
            .expect("ep a->b");
        let own = a.address().to_vec();
        let aa = a.ep_create(&own, EpParams::default()).expect("ep a->a");
        let mut most_calls = 0;
        for tag in 0..200u64 {
            let msg = tag.to_le_bytes();
            assert_eq!(exchange(&mut a, ab, &mut b, tag, &msg), msg);
            let mut recv = match a.tag_recv(vec![0u8; 8], tag, u64::MAX).expect("recv") {
                Op::Pending(r) => r,
                Op::Done(c) => panic!("nothing was sent yet: {:?}", c.status),
            };
            if let Op::Pending(mut s) = a.tag_send(aa, tag, &msg).expect("self send") {
                let deadline = Instant::now() + WATCHDOG;
                loop {
                    a.progress();
                    match a.request_take(s) {
                        Ok(c) => break c.status.expect("self send"),
                        Err(r) => s = r,
                    }
                    assert!(Instant::now() < deadline, "watchdog: self send");
                }
            }
            let deadline = Instant::now() + WATCHDOG;
            let mut calls = 0;
            let got = loop {
                a.progress();
                calls += 1;
                match a.request_take(recv) {
                    Ok(c) => break c.buf.expect("buffer"),
                    Err(r) => recv = r,
                }
                assert!(Instant::now() < deadline, "watchdog: self message");
            };
            assert_eq!(got[..], msg);
            most_calls = most_calls.max(calls);
        }
        assert_eq!(
            most_calls, 1,
            "each message to itself arrives on the next call"
        );
        let pos = |tl: &str| a.st.info.iter().position(|i| i.tl_name == tl).expect(tl);
        assert_eq!(a.solo, Some(pos("posix")), "posix is polled inline");
        assert_eq!(a.rung, vec![pos("self")], "self is polled after it rings");
    }

    /// A new worker of `ctx` (the late peer) sends `msg` with `tag` to `a`, which has a receive
    /// posted for it; `step` progresses `a` (once per call), the peer is progressed between.
    /// Gives what `a` received and the number of `step` calls it took.
    fn late_peer_message(
        ctx: &Context,
        a: &mut Worker,
        tag: u64,
        msg: &[u8],
        mut step: impl FnMut(&mut Worker),
    ) -> (crate::Completion, u32) {
        let mut b = Worker::new(ctx).expect("worker b");
        let a_addr = a.address().to_vec();
        let ba = b.ep_create(&a_addr, EpParams::default()).expect("ep b->a");
        let mut recv = match a.tag_recv(vec![0u8; 64], tag, u64::MAX).expect("recv") {
            Op::Pending(r) => r,
            Op::Done(c) => panic!("nothing was sent yet: {:?}", c.status),
        };
        let mut send = match b.tag_send(ba, tag, msg).expect("send") {
            Op::Pending(r) => Some(r),
            Op::Done(_) => None,
        };
        let deadline = Instant::now() + WATCHDOG;
        let mut calls = 0;
        loop {
            step(a);
            calls += 1;
            b.progress();
            if let Some(r) = send.take() {
                send = b.request_take(r).err();
            }
            match a.request_take(recv) {
                Ok(c) => return (c, calls),
                Err(r) => recv = r,
            }
            assert!(
                Instant::now() < deadline,
                "watchdog: a never got b's message"
            );
        }
    }

    /// The same late peer reaches a worker whose idle interfaces get no count-paced poll at
    /// all (its call count skips every multiple of `IDLE_IFACE_PERIOD`): the clock moving by
    /// `IDLE_IFACE_WAIT` between calls is enough.
    #[test]
    fn idle_interface_is_polled_when_the_clock_moves() {
        let ctx = tcp_ctx();
        let clock = ManualClock::new();
        let mut a = Worker::with_clock(&ctx, clock.clone()).expect("worker a");
        for _ in 0..4 * IDLE_IFACE_RECENT {
            a.progress();
        }
        assert!(a
            .last_event
            .iter()
            .all(|&last| a.tick.wrapping_sub(last) > IDLE_IFACE_RECENT + IDLE_IFACE_PERIOD));
        let (got, _) = late_peer_message(&ctx, &mut a, 9, b"by the clock", |a| {
            if a.tick.wrapping_add(1).is_multiple_of(IDLE_IFACE_PERIOD) {
                a.tick = a.tick.wrapping_add(1);
            }
            if a.tick.wrapping_add(1).is_multiple_of(super::CLOCK_PERIOD) {
                clock.advance(super::IDLE_IFACE_WAIT * 2);
            }
            a.progress();
        });
        got.status.expect("receive");
        assert_eq!(&got.buf.expect("buffer")[..got.len], b"by the clock");
    }

    /// Progress calls that each take 100 ms (as one that rings an RDMA READ doorbell over
    /// Soft-RoCE): once a clock read has seen it, every call reads the clock and polls the idle
    /// interfaces, so a late peer's connection is taken at once, not on the next count-paced
    /// call (up to `CLOCK_PERIOD` calls, seconds of them, later).
    #[test]
    fn slow_calls_read_the_clock_and_poll_idle_interfaces_on_every_call() {
        let ctx = tcp_ctx();
        let clock = ManualClock::new();
        let mut a = Worker::with_clock(&ctx, clock.clone()).expect("worker a");
        let slow = |a: &mut Worker| {
            clock.advance(Duration::from_millis(100));
            a.progress()
        };
        for _ in 0..4 * IDLE_IFACE_RECENT {
            slow(&mut a);
        }
        assert!(
            a.st.clock_stale,
            "slow calls: the next call reads the clock"
        );
        assert!(
            a.tick.is_multiple_of(IDLE_IFACE_PERIOD),
            "the count-paced poll is a whole period away"
        );
        let (got, calls) = late_peer_message(&ctx, &mut a, 5, b"slow receiver", |a| {
            slow(a);
        });
        got.status.expect("receive");
        assert_eq!(&got.buf.expect("buffer")[..got.len], b"slow receiver");
        assert!(
            calls < super::CLOCK_PERIOD / 2,
            "the slow receiver took {calls} calls to take a late peer's message"
        );
    }

    /// A worker whose tcp interface has had no endpoint and no event for many progress calls,
    /// on a clock that never moves (so only the call count paces its idle polling), still
    /// accepts a late peer's connection, completes the wire-up and receives the peer's
    /// message; the reply goes back over the endpoint the wire-up made.
    #[test]
    fn idle_interface_is_polled_and_a_late_peer_connects() {
        let ctx = tcp_ctx();
        let mut a = Worker::with_clock(&ctx, ManualClock::new()).expect("worker a");
        let mut b = Worker::new(&ctx).expect("worker b");
        for _ in 0..4 * IDLE_IFACE_RECENT {
            a.progress();
        }
        assert!(
            a.st.iface_users.iter().all(|&u| u == 0),
            "a has no endpoint"
        );
        for (i, &last) in a.last_event.iter().enumerate() {
            assert!(
                a.tick.wrapping_sub(last) > IDLE_IFACE_RECENT + IDLE_IFACE_PERIOD,
                "interface {i} of a had a recent event"
            );
        }
        let (a_addr, b_addr) = (a.address().to_vec(), b.address().to_vec());
        let ba = b.ep_create(&a_addr, EpParams::default()).expect("ep b->a");
        assert_eq!(exchange(&mut b, ba, &mut a, 7, b"late peer"), b"late peer");
        let ab = a.ep_create(&b_addr, EpParams::default()).expect("ep a->b");
        assert_eq!(exchange(&mut a, ab, &mut b, 8, b"reply"), b"reply");
    }

    /// Waits for `op` on `w`, progressing it.
    fn wait(w: &mut Worker, op: Op) -> crate::Completion {
        let mut q = match op {
            Op::Done(c) => return c,
            Op::Pending(q) => q,
        };
        loop {
            w.progress();
            match w.request_take(q) {
                Ok(c) => return c,
                Err(r) => q = r,
            }
        }
    }

    /// A receiver that posts one receive at a time: once a progress call completed the posted
    /// receive, the eager messages behind it wait in the shared-memory FIFO (`Sink::defer`),
    /// not in the unexpected queue, and each later receive is posted before its message is
    /// taken. The data arrives whole and in order.
    #[test]
    fn eager_messages_behind_a_completed_receive_wait_in_the_transport() {
        let ctx = Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: vec!["posix".into()],
                ..Default::default()
            }),
        })
        .expect("context");
        let mut a = Worker::new(&ctx).expect("worker a");
        let mut b = Worker::new(&ctx).expect("worker b");
        let ba = b.ep_create(a.address(), EpParams::default()).expect("ep");
        let msgs: Vec<Vec<u8>> = (0..4u8)
            .map(|k| (0..4096).map(|i| (i as u8).wrapping_mul(7) ^ k).collect())
            .collect();
        for m in &msgs {
            let op = b.tag_send(ba, 5, m).expect("send");
            let c = wait(&mut b, op);
            assert_eq!(c.status, Ok(()));
        }
        for (k, m) in msgs.iter().enumerate() {
            let op = a.tag_recv(vec![0; 4096], 5, u64::MAX).expect("recv");
            assert!(
                matches!(op, Op::Pending(_)),
                "message {k} waited in the unexpected queue"
            );
            let mut c = wait(&mut a, op);
            assert_eq!(c.status, Ok(()));
            assert_eq!(c.len, 4096);
            assert_eq!(c.buf.take().expect("buffer back"), *m, "message {k}");
            assert_eq!(a.st.tag.unexpected_len(), 0, "after message {k}");
        }
    }
}
