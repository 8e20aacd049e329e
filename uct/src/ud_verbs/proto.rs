//! ud_verbs reliability, without I/O: the send window of an endpoint (sequence numbers,
//! cumulative acknowledgements, retransmission timer with back-off, peer failure after a
//! bounded number of timeouts) and its receive state (in-order delivery, duplicate and gap
//! detection). Time is passed in (`now`), so the tests run a lossy link on a hand-moved clock.
//!
//! Go-back-N, as UCX's ud: the receiver takes only the next expected datagram; a duplicate is
//! dropped and answered with an acknowledgement, a datagram after a gap is dropped and
//! answered with a NAK (once per gap). A NAK or a timeout starts a recovery: the sender sends
//! the unacknowledged datagrams again, at most [`RESEND_BURST`] beyond the last acknowledged
//! one at a time, the next ones as acknowledgements come back, and sends nothing new until all
//! are out again (a whole window resent at once would overrun the receiver's buffers and lose
//! more). Both sides' state has a fixed size: the window holds at most
//! [`TxWindow::capacity`] entries and never grows.

use std::collections::VecDeque;
use std::time::Duration;

/// A 16-bit sequence number, compared modulo 2^16 (windows are far smaller than 2^15).
pub type Psn = u16;

/// Datagrams resent ahead of the last acknowledged one during a recovery.
pub const RESEND_BURST: u16 = 16;

/// `a` comes after `b`.
#[inline]
pub fn psn_after(a: Psn, b: Psn) -> bool {
    (a.wrapping_sub(b) as i16) > 0
}

/// A datagram sent and not acknowledged: where its bytes are kept for a resend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxEntry {
    /// Its sequence number.
    pub psn: Psn,
    /// The send buffer holding it.
    pub buf: u32,
    /// Its length in that buffer.
    pub len: u32,
}

/// What a timeout of the send window means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// Send everything unacknowledged again (with an acknowledgement request).
    Resend,
    /// The peer answered none of the resends, for at least the window's silence limit: it is
    /// gone.
    PeerFailed,
}

/// The send side of an endpoint.
#[derive(Debug)]
pub struct TxWindow {
    ring: VecDeque<TxEntry>,
    cap: usize,
    next: Psn,
    rto_base: Duration,
    rto_max: Duration,
    rto: Duration,
    max_retries: u32,
    retries: u32,
    /// Shortest time without an acknowledgement before the peer may be declared failed.
    max_silence: Duration,
    /// Since when the oldest unacknowledged datagram has waited without an acknowledgement
    /// (the window's last progress; `None`: nothing in flight).
    waiting_since: Option<Duration>,
    deadline: Option<Duration>,
    /// During a recovery: the last sequence number sent again so far, and the last one that
    /// was in flight when it began (`None`: no recovery).
    recovery: Option<(Psn, Psn)>,
}

impl TxWindow {
    /// A window of `cap` datagrams; the first timeout after `rto_base`, doubling up to
    /// `rto_max`; the peer fails after `max_retries` timeouts in a row once nothing has been
    /// acknowledged for `max_silence` (until then the resends go on every `rto_max`).
    pub fn new(
        cap: usize,
        rto_base: Duration,
        rto_max: Duration,
        max_retries: u32,
        max_silence: Duration,
    ) -> Self {
        TxWindow {
            ring: VecDeque::with_capacity(cap),
            cap,
            next: 1,
            rto_base,
            rto_max: rto_max.max(rto_base),
            rto: rto_base,
            max_retries,
            retries: 0,
            max_silence,
            waiting_since: None,
            deadline: None,
            recovery: None,
        }
    }
    /// Largest number of unacknowledged datagrams.
    pub fn capacity(&self) -> usize {
        self.cap
    }
    /// No room for another datagram.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.ring.len() >= self.cap
    }
    /// Nothing unacknowledged.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
    /// Unacknowledged datagrams.
    pub fn in_flight(&self) -> usize {
        self.ring.len()
    }
    /// Whether the sender should ask for an acknowledgement with the next datagram: the
    /// window is half full.
    #[inline]
    pub fn wants_ack(&self) -> bool {
        self.ring.len() + 1 >= self.cap / 2
    }
    /// The sequence number the next datagram gets.
    #[inline]
    pub fn next_psn(&self) -> Psn {
        self.next
    }
    /// Records a datagram sent now (the caller checked [`TxWindow::is_full`]); gives its
    /// sequence number.
    #[inline]
    pub fn push(&mut self, buf: u32, len: u32, now: Duration) -> Psn {
        let psn = self.next;
        self.next = self.next.wrapping_add(1);
        self.ring.push_back(TxEntry { psn, buf, len });
        if self.deadline.is_none() {
            self.deadline = Some(now + self.rto);
        }
        self.waiting_since.get_or_insert(now);
        psn
    }
    /// A cumulative acknowledgement of every datagram up to `ack`: gives each acknowledged
    /// buffer to `free`; returns whether anything was acknowledged (the timer and back-off
    /// then restart).
    pub fn ack(&mut self, ack: Psn, now: Duration, mut free: impl FnMut(u32)) -> bool {
        let mut advanced = false;
        while let Some(e) = self.ring.front() {
            if psn_after(e.psn, ack) {
                break;
            }
            free(e.buf);
            self.ring.pop_front();
            advanced = true;
        }
        if advanced {
            self.retries = 0;
            self.rto = self.rto_base;
            (self.deadline, self.waiting_since) = if self.ring.is_empty() {
                (None, None)
            } else {
                (Some(now + self.rto), Some(now))
            };
        }
        advanced
    }
    /// When the oldest unacknowledged datagram times out (`None`: nothing in flight).
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }
    /// The timer fired at `now` (the caller checked the deadline): one more retry, with the
    /// timeout doubled, or the peer's failure after too many that also span the silence limit.
    pub fn on_timeout(&mut self, now: Duration) -> Timeout {
        self.retries = self.retries.saturating_add(1);
        let silent = self
            .waiting_since
            .is_none_or(|t| now.saturating_sub(t) >= self.max_silence);
        if self.retries > self.max_retries && silent {
            self.deadline = None;
            return Timeout::PeerFailed;
        }
        self.rto = (self.rto * 2).min(self.rto_max);
        self.deadline = Some(now + self.rto);
        Timeout::Resend
    }
    /// The unacknowledged datagrams, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &TxEntry> + '_ {
        self.ring.iter()
    }
    /// Starts (or restarts, after a new loss) a recovery: everything unacknowledged is to be
    /// sent again, from the oldest.
    pub fn begin_recovery(&mut self) {
        if let Some(front) = self.ring.front() {
            self.recovery = Some((front.psn.wrapping_sub(1), self.next.wrapping_sub(1)));
        }
    }
    /// A recovery is under way: nothing new may be sent.
    #[inline]
    pub fn recovering(&self) -> bool {
        self.recovery.is_some()
    }
    /// The datagrams of the recovery to send (again) now: those not resent yet, up to
    /// [`RESEND_BURST`] past the last acknowledged one; the recovery ends with the last.
    pub fn resend_due(&mut self, mut send: impl FnMut(&TxEntry)) {
        let Some((mut done, last)) = self.recovery else {
            return;
        };
        let Some(front) = self.ring.front() else {
            self.recovery = None;
            return;
        };
        let limit = front.psn.wrapping_add(RESEND_BURST - 1);
        for e in self.ring.iter() {
            if !psn_after(e.psn, done) {
                continue;
            }
            if psn_after(e.psn, limit) || psn_after(e.psn, last) {
                break;
            }
            send(e);
            done = e.psn;
        }
        self.recovery = if psn_after(last, done) {
            Some((done, last))
        } else {
            None
        };
    }
    /// Empties the window (the endpoint failed or closes), giving each buffer to `free`.
    pub fn clear(&mut self, mut free: impl FnMut(u32)) {
        for e in self.ring.drain(..) {
            free(e.buf);
        }
        self.deadline = None;
        self.waiting_since = None;
        self.recovery = None;
    }
}

/// What the receiver does with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The next one: deliver it.
    Deliver,
    /// Seen before: drop it, acknowledge again.
    Duplicate,
    /// After a gap: drop it; `true` when a NAK for this gap is due (the first datagram after
    /// it), `false` when one went already.
    Gap(bool),
}

/// The receive side of an endpoint.
#[derive(Debug, Clone, Copy)]
pub struct RxState {
    expected: Psn,
    nak_for: Option<Psn>,
    /// Delivered datagrams not acknowledged yet.
    pub unacked: u32,
}

impl Default for RxState {
    fn default() -> Self {
        RxState {
            expected: 1,
            nak_for: None,
            unacked: 0,
        }
    }
}

impl RxState {
    /// Judges datagram `psn` (and counts a delivered one as unacknowledged).
    #[inline]
    pub fn on_data(&mut self, psn: Psn) -> Verdict {
        if psn == self.expected {
            self.expected = self.expected.wrapping_add(1);
            self.nak_for = None;
            self.unacked += 1;
            return Verdict::Deliver;
        }
        if psn_after(psn, self.expected) {
            let first = self.nak_for != Some(self.expected);
            self.nak_for = Some(self.expected);
            return Verdict::Gap(first);
        }
        Verdict::Duplicate
    }
    /// The cumulative acknowledgement to send: the last datagram delivered in order.
    #[inline]
    pub fn ack_psn(&self) -> Psn {
        self.expected.wrapping_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn sequence_comparison_wraps() {
        assert!(psn_after(1, 0));
        assert!(psn_after(0, 0xffff));
        assert!(!psn_after(0xffff, 0));
        assert!(!psn_after(5, 5));
    }

    #[test]
    fn cumulative_ack_frees_in_order_and_restarts_the_timer() {
        let mut w = TxWindow::new(4, 10 * MS, 80 * MS, 3, Duration::ZERO);
        for b in 0..4 {
            assert_eq!(w.push(b, 8, Duration::ZERO), b as u16 + 1);
        }
        assert!(w.is_full());
        assert_eq!(w.deadline(), Some(10 * MS));
        let mut freed = Vec::new();
        assert!(w.ack(2, 5 * MS, |b| freed.push(b)));
        assert_eq!(freed, [0, 1]);
        assert_eq!(w.deadline(), Some(15 * MS));
        assert!(!w.ack(2, 6 * MS, |_| panic!("nothing more")));
        assert!(w.ack(4, 7 * MS, |b| freed.push(b)));
        assert!(w.is_empty() && w.deadline().is_none());
    }

    #[test]
    fn timeouts_back_off_and_then_fail_the_peer() {
        let mut w = TxWindow::new(4, 10 * MS, 25 * MS, 2, Duration::ZERO);
        w.push(0, 1, Duration::ZERO);
        assert_eq!(w.on_timeout(10 * MS), Timeout::Resend);
        assert_eq!(w.deadline(), Some(30 * MS), "doubled to 20 ms");
        assert_eq!(w.on_timeout(30 * MS), Timeout::Resend);
        assert_eq!(w.deadline(), Some(55 * MS), "capped at 25 ms");
        assert_eq!(w.on_timeout(55 * MS), Timeout::PeerFailed);
        // An acknowledgement in between resets the count.
        let mut w = TxWindow::new(4, 10 * MS, 25 * MS, 1, Duration::ZERO);
        w.push(0, 1, Duration::ZERO);
        w.push(1, 1, Duration::ZERO);
        assert_eq!(w.on_timeout(10 * MS), Timeout::Resend);
        assert!(w.ack(1, 12 * MS, |_| {}));
        assert_eq!(w.on_timeout(22 * MS), Timeout::Resend);
    }

    #[test]
    fn the_peer_fails_only_after_the_silence_limit_too() {
        // A receiver that polls its ud interface only now and then (a wire-up helper beside a
        // busy lane) acknowledges late: the retries run out before the silence limit, and
        // the resends go on every `rto_max` until it has passed.
        let mut w = TxWindow::new(4, 10 * MS, 25 * MS, 2, 100 * MS);
        w.push(0, 1, 5 * MS);
        assert_eq!(w.on_timeout(15 * MS), Timeout::Resend);
        assert_eq!(w.on_timeout(35 * MS), Timeout::Resend);
        assert_eq!(
            w.on_timeout(60 * MS),
            Timeout::Resend,
            "retries out, 55 ms silent"
        );
        assert_eq!(w.deadline(), Some(85 * MS));
        assert_eq!(w.on_timeout(85 * MS), Timeout::Resend);
        assert_eq!(w.on_timeout(110 * MS), Timeout::PeerFailed, "105 ms silent");
        // An acknowledgement restarts the silence from its time, not from the first send.
        let mut w = TxWindow::new(4, 10 * MS, 25 * MS, 0, 100 * MS);
        w.push(0, 1, Duration::ZERO);
        w.push(1, 1, Duration::ZERO);
        assert!(w.ack(1, 90 * MS, |_| {}));
        assert_eq!(
            w.on_timeout(150 * MS),
            Timeout::Resend,
            "60 ms since the ack"
        );
        assert_eq!(w.on_timeout(190 * MS), Timeout::PeerFailed);
        // Emptied and refilled: the wait starts with the new datagram.
        let mut w = TxWindow::new(4, 10 * MS, 25 * MS, 0, 100 * MS);
        w.push(0, 1, Duration::ZERO);
        assert!(w.ack(1, MS, |_| {}));
        w.push(1, 1, 500 * MS);
        assert_eq!(w.on_timeout(510 * MS), Timeout::Resend);
        assert_eq!(w.on_timeout(600 * MS), Timeout::PeerFailed);
    }

    #[test]
    fn recovery_resends_in_bursts_as_acknowledgements_return() {
        let mut w = TxWindow::new(64, 10 * MS, 80 * MS, 3, Duration::ZERO);
        for b in 0..40 {
            w.push(b, 1, Duration::ZERO);
        }
        w.begin_recovery();
        assert!(w.recovering());
        let mut sent = Vec::new();
        w.resend_due(|e| sent.push(e.psn));
        assert_eq!(sent, (1..=RESEND_BURST).collect::<Vec<_>>());
        // Ten acknowledged: ten more go out.
        assert!(w.ack(10, MS, |_| {}));
        sent.clear();
        w.resend_due(|e| sent.push(e.psn));
        assert_eq!(sent, (17..=26).collect::<Vec<_>>());
        // Thirty acknowledged (27..=30 among them, not to be sent again): the rest goes out.
        assert!(w.ack(30, MS, |_| {}));
        sent.clear();
        w.resend_due(|e| sent.push(e.psn));
        assert_eq!(sent, (31..=40).collect::<Vec<_>>());
        assert!(!w.recovering(), "every datagram went out again");
        // An acknowledgement of everything ends a recovery.
        w.push(40, 1, MS);
        w.begin_recovery();
        w.ack(41, 2 * MS, |_| {});
        sent.clear();
        w.resend_due(|e| sent.push(e.psn));
        assert!(sent.is_empty() && !w.recovering());
    }

    #[test]
    fn receiver_delivers_in_order_and_naks_a_gap_once() {
        let mut r = RxState::default();
        assert_eq!(r.on_data(1), Verdict::Deliver);
        assert_eq!(r.on_data(1), Verdict::Duplicate);
        assert_eq!(r.on_data(3), Verdict::Gap(true));
        assert_eq!(r.on_data(4), Verdict::Gap(false));
        assert_eq!(r.ack_psn(), 1);
        assert_eq!(r.on_data(2), Verdict::Deliver);
        assert_eq!(r.on_data(4), Verdict::Gap(true), "a new gap");
        assert_eq!(r.unacked, 2);
    }

    /// A sender and a receiver over a link that loses, duplicates and delays datagrams in
    /// both directions (seeded), on a hand-moved clock: every message is delivered exactly
    /// once and in order, and the window drains.
    fn lossy_link(seed: u64, loss_pct: u64, n: u32) {
        let mut rng = ucs::random::SeededRng::new(seed);
        let mut roll = |pct: u64| rng.next_u64() % 100 < pct;
        let mut tx = TxWindow::new(16, 4 * MS, 64 * MS, 1000, Duration::ZERO);
        let mut rx = RxState::default();
        let mut now = Duration::ZERO;
        let mut to_rx: VecDeque<(Psn, u32)> = VecDeque::new();
        let mut to_tx: VecDeque<(Psn, bool)> = VecDeque::new();
        let (mut next_msg, mut delivered) = (0u32, Vec::new());
        let mut bufs: Vec<u32> = vec![0; 16];
        let mut free: Vec<u32> = (0..16).collect();
        while delivered.len() < n as usize || !tx.is_empty() {
            now += MS / 4;
            assert!(
                now < Duration::from_secs(600),
                "stuck at {}",
                delivered.len()
            );
            // Send while the window has room (nothing new during a recovery).
            while next_msg < n && !tx.is_full() && !tx.recovering() {
                let b = free.pop().expect("a buffer per window slot");
                bufs[b as usize] = next_msg;
                let psn = tx.push(b, 4, now);
                if !roll(loss_pct) {
                    to_rx.push_back((psn, next_msg));
                }
                next_msg += 1;
            }
            // The link: some arrive, some twice, the rest next round.
            let mut resend = false;
            for _ in 0..to_rx.len().min(3) {
                let Some((psn, msg)) = to_rx.pop_front() else {
                    break;
                };
                if roll(5) {
                    to_rx.push_back((psn, msg));
                }
                match rx.on_data(psn) {
                    Verdict::Deliver => delivered.push(msg),
                    Verdict::Duplicate => {}
                    Verdict::Gap(nak) => {
                        if nak && !roll(loss_pct) {
                            to_tx.push_back((rx.ack_psn(), true));
                        }
                    }
                }
                if !roll(loss_pct) {
                    to_tx.push_back((rx.ack_psn(), false));
                }
            }
            let mut more = false;
            while let Some((ack, nak)) = to_tx.pop_front() {
                more |= tx.ack(ack, now, |b| free.push(b));
                resend |= nak;
            }
            if tx.deadline().is_some_and(|d| now >= d) {
                assert_eq!(tx.on_timeout(now), Timeout::Resend);
                resend = true;
            }
            if resend {
                tx.begin_recovery();
            }
            if resend || more {
                tx.resend_due(|e| {
                    if !roll(loss_pct) {
                        to_rx.push_back((e.psn, bufs[e.buf as usize]));
                    }
                });
            }
        }
        assert_eq!(delivered, (0..n).collect::<Vec<_>>());
        assert_eq!(free.len(), 16, "every buffer came back");
    }

    #[test]
    fn lossless_and_lossy_links_deliver_everything_once_in_order() {
        lossy_link(1, 0, 500);
        lossy_link(2, 10, 2000);
        lossy_link(3, 30, 500);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn any_seed_and_loss_rate_delivers_once_in_order(seed in any::<u64>(), loss in 0u64..40) {
            lossy_link(seed, loss, 300);
        }
    }
}
