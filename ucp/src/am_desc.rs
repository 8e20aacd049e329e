//! User active messages handed to their handler as descriptors (UCX's
//! `ucp_worker_set_am_recv_handler`): an eager message arrives whole, its user header and data
//! lent from the buffer they arrived in for the handler's call; a message sent by rendezvous
//! arrives as its header and an [`AmRndv`] that names the sender's data without fetching it. The receiver then
//! reads the data straight into memory of its choice ([`Worker::am_rndv_recv_raw`]) or declines
//! it ([`Worker::am_rndv_drop`]); either way the sender's request completes.
//!
//! A handler set here replaces a whole-message handler of the same id
//! ([`Worker::am_set_handler`]) and the reverse; eager sends and the wire are the same for both.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

pub(crate) mod msg;
pub use msg::{AmDescHandler, AmMsg, AmRndv};

use crate::am::inbox::{AmArrival, LentAm, SmallAm, SmallTaken};
use crate::am::state::Taken;
use crate::request::Op;
use crate::wire::{am_id, ReqHdr, RtsHdr, UserAmHdr};
use crate::worker::req::RecvBuf;
use crate::worker::req::SendData;
use crate::worker::state::{AmFamily, Core, QUEUED_AM};
use crate::worker::{EpHandle, Worker};
use ucs::{Error, Result};

impl Worker {
    /// Sets the descriptor handler of user active message `id`, replacing any handler of
    /// that id (of either kind).
    pub fn am_set_desc_handler(
        &mut self,
        id: u16,
        handler: impl FnMut(EpHandle, AmMsg<'_>) + 'static,
    ) {
        self.st.am.set_desc(id, Box::new(handler));
    }

    /// Queues the messages of user active message `id` in the worker's inbox, replacing any
    /// handler of that id: as a descriptor handler would get them (eager ones copied: small
    /// ones inline when `inline_ok`, larger ones into a buffer the client may keep), or, with
    /// `whole`, as a whole-message handler would. For a client that runs its handlers after
    /// the progress call (the C library's may call back into it): it takes them in order with
    /// [`Worker::am_pop_small`] first, then [`Worker::am_pop`].
    pub fn am_set_queued(&mut self, id: u16, whole: bool, inline_ok: bool) {
        self.st.am.set_queued(id, whole, inline_ok);
    }

    /// Messages wait in the inbox ([`Worker::am_set_queued`]).
    #[inline(always)]
    pub fn am_has_queued(&self) -> bool {
        self.st.client_queued & QUEUED_AM != 0
    }

    /// The oldest queued small message, with whether more wait (in the ring or the queue);
    /// take these before [`Worker::am_pop`]'s. A lent one ([`SmallTaken::Lent`]) must be read
    /// before the next progress call.
    #[inline(always)]
    pub fn am_pop_small(&mut self) -> Option<(SmallTaken, bool)> {
        let s = self.st.am.inbox.pop_small()?;
        let more = !self.st.am.inbox.is_empty();
        if !more {
            self.st.client_queued &= !QUEUED_AM;
        }
        Some((s, more))
    }

    /// The small message its transport lent ([`LentAm`]: the oldest of all, which
    /// [`Worker::am_pop_small`] also gives first) if one waits, with whether more wait. It must
    /// be read before the next progress call. The common arrival of a small message, apart:
    /// its few words stay out of [`SmallTaken`], which is as large as a ring slot.
    #[inline(always)]
    pub fn am_pop_lent(&mut self) -> Option<(LentAm, bool)> {
        let l = self.st.am.inbox.take_lent()?;
        let more = !self.st.am.inbox.is_empty();
        if !more {
            self.st.client_queued &= !QUEUED_AM;
        }
        Some((l, more))
    }

    /// The oldest small message in the ring, copied into `out` (its bytes only), with its id,
    /// sender endpoint and whether more wait. Take the lent one first
    /// ([`Worker::am_pop_lent`]): this gives only the ring's.
    #[inline(always)]
    pub fn am_pop_copied(&mut self, out: &mut SmallAm) -> Option<(u16, EpHandle, bool)> {
        let (id, ep) = self.st.am.inbox.pop_copied(out)?;
        let more = !self.st.am.inbox.is_empty();
        if !more {
            self.st.client_queued &= !QUEUED_AM;
        }
        Some((id, ep, more))
    }

    /// The oldest queued message past the small ones of [`Worker::am_pop_small`].
    pub fn am_pop(&mut self) -> Option<AmArrival> {
        let a = self.st.am.inbox.pop();
        if self.st.am.inbox.is_empty() {
            self.st.client_queued &= !QUEUED_AM;
        }
        a
    }

    /// Gives back the buffer of a queued eager message once its data is no longer used (kept
    /// for the next ones).
    pub fn am_recycle(&mut self, buf: Vec<u8>) {
        self.st.am.inbox.recycle(buf);
    }

    /// Removes the handler of user active message `id` (of either kind): such messages are
    /// then dropped with a warning.
    pub fn am_remove_handler(&mut self, id: u16) {
        self.st.am.remove(id);
    }

    /// Receives the data of a message sent by rendezvous straight into `len` bytes at `ptr`
    /// (a read of the sender's memory, or the sender's pipeline, as for a tagged rendezvous);
    /// data longer than `len` completes with `Truncated`. The completion's `len` is the data's
    /// length, its `buf` `None`.
    ///
    /// # Safety
    /// As [`Worker::tag_recv_raw`]: `ptr` valid for writes of `len` bytes and left alone until
    /// the request completes.
    pub unsafe fn am_rndv_recv_raw(&mut self, d: AmRndv, ptr: *mut u8, len: usize) -> Result<Op> {
        let idx = self.st.ep_idx(d.ep)?;
        self.st.ep_usable(idx)?;
        // SAFETY: forwarded contract.
        let key = self.st.new_recv(unsafe { RecvBuf::raw(ptr, len) }, 0, 0);
        if let Err(e) = self
            .st
            .rndv_family()
            .rndv_recv_start(key, idx, 0, d.sreq, d.len, d.addr, &d.tl, &d.rkey)
        {
            // The request reports the error through its completion.
            self.st.finish(key, Err(e));
        }
        Ok(self.st.op_of(key))
    }

    /// Sends user active message `id` with a header and `len` bytes at `ptr`, read in place
    /// (a rendezvous registers that memory, as [`Worker::tag_send_raw`]); eager or
    /// rendezvous as [`Worker::am_send`] chooses. The header is copied.
    ///
    /// # Safety
    /// `ptr` valid for reads of `len` bytes, unchanged until the request completes.
    pub unsafe fn am_send_raw(
        &mut self,
        ep: EpHandle,
        id: u16,
        header: &[u8],
        ptr: *const u8,
        len: usize,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: forwarded contract.
            unsafe { std::slice::from_raw_parts(ptr, len) }
        };
        self.st
            .am_family()
            .am_send(idx, id, header, SendData::Raw(data))
    }

    /// Declines the data of a message sent by rendezvous: the sender's request completes and
    /// nothing is moved.
    pub fn am_rndv_drop(&mut self, d: AmRndv) -> Result<()> {
        let idx = self.st.ep_idx(d.ep)?;
        self.st
            .send_ctl(idx, am_id::ATS, &ReqHdr { req: d.sreq }.encode())
    }
}

impl Core {
    /// Marks the AM inbox in [`Core::client_queued`](crate::worker::state::Core::client_queued) when a message went into it.
    #[inline(always)]
    pub(crate) fn note_taken(&mut self, taken: Taken) {
        if matches!(taken, Taken::Queued | Taken::Lent) {
            self.client_queued |= QUEUED_AM;
        }
    }
}

impl AmFamily<'_> {
    /// AM_RTS for an id with a descriptor handler: the handler gets the header and a
    /// descriptor of the sender's data. Gives false when the id has none.
    pub(crate) fn am_desc_rts(
        &mut self,
        idx: usize,
        h: UserAmHdr,
        uh: &[u8],
        rts: &RtsHdr<'_>,
    ) -> Result<bool> {
        if !self.own().has_desc(h.id) {
            return Ok(false);
        }
        let len = usize::try_from(rts.len)
            .map_err(|_| Error::Wire("rendezvous length overflows".into()))?;
        let gen = self.ep(idx).gen();
        let d = AmRndv {
            ep: self.ep_handle(idx, gen),
            sreq: rts.sreq,
            len,
            addr: rts.buf.addr,
            tl: rts.buf.tl.to_owned(),
            rkey: rts.buf.rkey.to_vec(),
        };
        let taken = self.own().take_rndv(h.id, d.ep, uh, d);
        self.note_taken(taken);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::{AmMsg, AmRndv, EpHandle, EpParams, Features, Op, Worker};
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::{Duration, Instant};

    fn pair(tls: &str) -> (Worker, Worker, EpHandle) {
        crate::test_pair::pair(&[tls], Features::AM)
    }

    fn until(a: &mut Worker, b: &mut Worker, mut done: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(60);
        while !done() {
            a.progress();
            b.progress();
            assert!(Instant::now() < end, "watchdog");
        }
    }

    /// Eager messages come whole (header then data); one sent by rendezvous comes as its
    /// header and a descriptor, whose data lands in the receiver's memory, truncated when
    /// it is too small, or is declined; the sender's request completes in every case.
    #[test]
    fn eager_whole_and_rendezvous_by_descriptor() {
        for tls in ["posix", "tcp"] {
            let (mut a, mut b, ep) = pair(tls);
            // What the handler got, copied: sender, header, then the data or its descriptor.
            type Got = (EpHandle, Vec<u8>, Result<Vec<u8>, AmRndv>);
            let got: Rc<RefCell<Vec<Got>>> = Rc::default();
            let g = got.clone();
            b.am_set_desc_handler(9, move |ep, m| {
                g.borrow_mut().push(match m {
                    AmMsg::Eager { header, data } => (ep, header.to_vec(), Ok(data.to_vec())),
                    AmMsg::Rndv { header, data } => (ep, header.to_vec(), Err(data)),
                })
            });
            let s = a.am_send(ep, 9, b"hdr", b"small").expect("send");
            until(&mut a, &mut b, || !got.borrow().is_empty());
            let (_, header, data) = got.borrow_mut().pop().expect("message");
            assert_eq!(&header[..], b"hdr", "{tls}");
            assert_eq!(&data.expect("eager data")[..], b"small", "{tls}");
            both(&mut a, &mut b, s).status.expect("eager send");

            let big: Vec<u8> = (0..(4 << 20)).map(|i| (i % 251) as u8).collect();
            for (cap, decline) in [(big.len(), false), (100, false), (0, true)] {
                let s = a.am_send(ep, 9, b"H", &big).expect("send big");
                until(&mut a, &mut b, || !got.borrow().is_empty());
                let (from, header, data) = got.borrow_mut().pop().expect("message");
                assert_eq!(&header[..], b"H");
                let Err(d) = data else {
                    panic!("{tls}: 4 MiB came eager, not as a descriptor")
                };
                assert_eq!((d.len(), d.ep), (big.len(), from));
                if decline {
                    b.am_rndv_drop(d).expect("drop");
                    both(&mut a, &mut b, s)
                        .status
                        .expect("a declined send completes");
                    continue;
                }
                let mut dst = vec![0u8; cap];
                // SAFETY: `dst` outlives the request, which is waited for below.
                let op = unsafe { b.am_rndv_recv_raw(d, dst.as_mut_ptr(), cap) }.expect("recv");
                let c = both(&mut b, &mut a, op);
                if cap < big.len() {
                    assert!(
                        matches!(c.status, Err(ucs::Error::Truncated { .. })),
                        "{tls}"
                    );
                } else {
                    c.status.expect("rendezvous receive");
                    assert_eq!(c.len, big.len());
                    assert!(dst == big, "{tls}: data differs");
                }
                both(&mut a, &mut b, s).status.expect("sender completes");
            }
        }
    }

    /// A small message taken from the inbox: (id, header, data), read in place when lent.
    fn small_parts(t: crate::SmallTaken) -> (u16, Vec<u8>, Vec<u8>) {
        match t {
            crate::SmallTaken::Lent(l) => {
                // SAFETY: taken right after the progress call that lent it.
                let (h, d) = unsafe { l.parts() };
                (l.id, h.to_vec(), d.to_vec())
            }
            crate::SmallTaken::Copied(mut s) => (s.id, s.m.header().to_vec(), s.m.data().to_vec()),
        }
    }

    /// Queued ids ([`Worker::am_set_queued`]): messages wait in the inbox in arrival order,
    /// small eager ones inline, larger eager ones in a buffer, rendezvous ones as a descriptor
    /// (declined here: the sender completes), a whole-queued id's messages whole; nothing is
    /// queued for an id without a handler.
    #[test]
    fn queued_messages_come_in_order_by_kind() {
        use crate::AmArrival;
        let (mut a, mut b, ep) = pair("posix");
        b.am_set_queued(3, false, true);
        b.am_set_queued(4, true, false);
        let big: Vec<u8> = (0..(4 << 20)).map(|i| (i % 251) as u8).collect();
        let mid = vec![7u8; 1000];
        let msgs: [(u16, &[u8], &[u8]); 7] = [
            (3, b"h1", b"one"),
            (3, b"h2", b"two"),
            (3, b"h3", &mid),
            (3, b"h4", b"four"),
            (3, b"h5", &big),
            (5, b"", b"nobody's"),
            (4, b"", b"whole"),
        ];
        let sends: Vec<_> = msgs
            .iter()
            .map(|&(id, hdr, data)| a.am_send(ep, id, hdr, data).expect("send"))
            .collect();
        // (id, header, data or its length) in the order taken.
        let mut got: Vec<(u16, Vec<u8>, Vec<u8>)> = Vec::new();
        let end = Instant::now() + Duration::from_secs(60);
        while got.len() < 6 {
            a.progress();
            b.progress();
            assert!(Instant::now() < end, "watchdog");
            while let Some((t, _)) = b.am_pop_small() {
                got.push(small_parts(t));
            }
            while let Some(x) = b.am_pop() {
                got.push(match x {
                    AmArrival::Small(id, mut m, _) => (id, m.header().to_vec(), m.data().to_vec()),
                    AmArrival::Eager(id, buf, hl, _) => {
                        let e = (id, buf[..hl].to_vec(), buf[hl..].to_vec());
                        b.am_recycle(buf);
                        e
                    }
                    AmArrival::Rndv(id, m, _) => {
                        let (hdr, d) = *m;
                        let len = d.len().to_le_bytes().to_vec();
                        b.am_rndv_drop(d).expect("decline");
                        (id, hdr, len)
                    }
                    AmArrival::Whole(id, data, _) => (id, Vec::new(), data),
                });
            }
        }
        let want: Vec<(u16, Vec<u8>, Vec<u8>)> = vec![
            (3, b"h1".to_vec(), b"one".to_vec()),
            (3, b"h2".to_vec(), b"two".to_vec()),
            (3, b"h3".to_vec(), mid.clone()),
            (3, b"h4".to_vec(), b"four".to_vec()),
            (3, b"h5".to_vec(), big.len().to_le_bytes().to_vec()),
            (4, Vec::new(), b"whole".to_vec()),
        ];
        assert!(got == want, "taken out of order or changed: {:?}", {
            got.iter()
                .map(|g| (g.0, g.1.clone(), g.2.len()))
                .collect::<Vec<_>>()
        });
        for s in sends {
            both(&mut a, &mut b, s).status.expect("send");
        }
        assert!(
            !b.am_has_queued(),
            "a message of an id without handler was queued"
        );
    }

    /// Progresses `a` and `b` until `b` lent a message.
    fn lend_one(a: &mut Worker, b: &mut Worker) {
        let end = Instant::now() + Duration::from_secs(60);
        while !b.st.am.inbox.has_lent() {
            a.progress();
            b.progress();
            assert!(Instant::now() < end, "watchdog");
        }
    }

    /// `am_pop_lent` takes the lent message alone, with whether more wait, and gives nothing
    /// once the next progress call copied it to the ring.
    #[test]
    fn am_pop_lent_takes_only_a_message_still_lent() {
        let (mut a, mut b, ep) = pair("posix");
        b.am_set_queued(4, false, true);
        let s = a.am_send(ep, 4, b"h", b"one").expect("send");
        both(&mut a, &mut b, s).status.expect("send");
        lend_one(&mut a, &mut b);
        let Some((l, false)) = b.am_pop_lent() else {
            panic!("no lent message, or more wait");
        };
        // SAFETY: b has not progressed since it lent the message.
        let (h, d) = unsafe { l.parts() };
        assert_eq!((l.id, h, d), (4, &b"h"[..], &b"one"[..]));
        assert!(!b.am_has_queued() && b.am_pop_lent().is_none());

        let s = a.am_send(ep, 4, b"", b"two").expect("send");
        both(&mut a, &mut b, s).status.expect("send");
        lend_one(&mut a, &mut b);
        b.progress();
        assert!(
            b.am_pop_lent().is_none(),
            "a copied message came out as lent"
        );
        let got: Vec<_> = std::iter::from_fn(|| b.am_pop_small())
            .map(|(t, _)| small_parts(t))
            .collect();
        assert_eq!(got, vec![(4, Vec::new(), b"two".to_vec())]);
    }

    /// Over shared memory a small message that finds nothing waiting is lent: the progress
    /// call ends on it and it is read in place. One not taken before the next progress call
    /// is copied first: it comes out whole and first, although the sender then sends enough
    /// to reuse its FIFO element several times over.
    #[test]
    fn lent_messages_are_read_in_place_or_copied_before_the_next_progress() {
        let (mut a, mut b, ep) = pair("posix");
        b.am_set_queued(3, false, true);
        let s = a.am_send(ep, 3, b"h0", b"lent").expect("send");
        both(&mut a, &mut b, s).status.expect("send");
        lend_one(&mut a, &mut b);
        let Some((crate::SmallTaken::Lent(l), false)) = b.am_pop_small() else {
            panic!("the first message was not lent, or more wait");
        };
        // SAFETY: b has not progressed since it lent the message.
        let (h, d) = unsafe { l.parts() };
        assert_eq!((l.id, h, d), (3, &b"h0"[..], &b"lent"[..]));
        assert!(!b.am_has_queued());

        let s = a.am_send(ep, 3, b"h1", b"left").expect("send");
        both(&mut a, &mut b, s).status.expect("send");
        lend_one(&mut a, &mut b);
        // Not taken: 1000 more messages through the same 256-element FIFO, all received
        // before any is taken.
        let mut last = None;
        for k in 0..1000u32 {
            // A request left waiting is released with its handle (but the last one's).
            last = Some(a.am_send(ep, 3, b"", &k.to_le_bytes()).expect("send"));
            a.progress();
            b.progress();
        }
        both(&mut a, &mut b, last.expect("sent"))
            .status
            .expect("send");
        for _ in 0..1000 {
            a.progress();
            b.progress();
        }
        let mut got = Vec::new();
        while let Some((t, _)) = b.am_pop_small() {
            got.push(small_parts(t));
        }
        assert_eq!(got.len(), 1001);
        assert_eq!(got[0], (3, b"h1".to_vec(), b"left".to_vec()));
        for (k, m) in got[1..].iter().enumerate() {
            assert_eq!(*m, (3, Vec::new(), (k as u32).to_le_bytes().to_vec()));
        }
    }

    /// Two workers over posix, `a`'s endpoint to `b` wired up by an empty stream message, and
    /// `b`'s endpoint back to `a` (whose stream the tests receive on); with a watchdog
    /// deadline.
    fn stream_pair() -> (Worker, Worker, EpHandle, EpHandle, Instant) {
        let (mut a, mut b, ep) = pair("posix");
        let s0 = a.stream_send(ep, b"").expect("empty send");
        let end = Instant::now() + Duration::from_secs(60);
        let back = ep_back(&mut a, &mut b, end);
        both(&mut a, &mut b, s0).status.expect("empty send");
        (a, b, ep, back, end)
    }

    /// `b`'s endpoint back to `a`, once `a`'s wire-up reached `b` (both progressed until then,
    /// at most until `end`).
    fn ep_back(a: &mut Worker, b: &mut Worker, end: Instant) -> EpHandle {
        while !b.has_ep_to(a.address()).expect("address") {
            a.progress();
            b.progress();
            assert!(Instant::now() < end, "watchdog");
        }
        b.ep_create(a.address(), EpParams::default())
            .expect("ep back")
    }

    /// Progresses both workers until `op` of `x` finishes; gives its completion.
    fn both(x: &mut Worker, y: &mut Worker, op: crate::Op) -> crate::Completion {
        let r = match op {
            crate::Op::Done(c) => return c,
            crate::Op::Pending(r) => r,
        };
        let end = Instant::now() + Duration::from_secs(60);
        while !x.request_test(&r).expect("request") {
            x.progress();
            y.progress();
            assert!(Instant::now() < end, "watchdog");
        }
        x.complete(crate::Op::Pending(r))
    }

    /// A receive without `waitall` completes with the first bytes; one with it waits for
    /// all; `stream_take` hands out what no receive waits for.
    #[test]
    fn stream_partial_and_waitall_receives() {
        let (mut a, mut b, ep) = pair("posix");
        let s0 = a.stream_send(ep, b"abc").expect("send");
        let end = Instant::now() + Duration::from_secs(60);
        let back = ep_back(&mut a, &mut b, end);
        while b.stream_available(back).unwrap_or(0) < 3 {
            a.progress();
            b.progress();
            assert!(Instant::now() < end, "watchdog");
        }
        let mut dst = [0u8; 8];
        // SAFETY: `dst` outlives the requests, completed below.
        let op = unsafe { b.stream_recv_raw(back, dst.as_mut_ptr(), 8, false) }.expect("recv");
        let c = b.complete(op);
        assert_eq!((c.len, &dst[..3]), (3, &b"abc"[..]));
        // SAFETY: as above.
        let op = unsafe { b.stream_recv_raw(back, dst.as_mut_ptr(), 4, true) }.expect("recv");
        let s1 = a.stream_send(ep, b"12").expect("send");
        let s2 = a.stream_send(ep, b"345").expect("send");
        let c = both(&mut b, &mut a, op);
        both(&mut a, &mut b, s1).status.expect("send");
        both(&mut a, &mut b, s2).status.expect("send");
        both(&mut a, &mut b, s0).status.expect("send");
        assert_eq!((c.len, &dst[..4]), (4, &b"1234"[..]));
        let left = b.stream_take(back, 100).expect("take");
        assert_eq!(left, b"5");
    }

    /// Bytes that arrive while receives wait go straight into them, in posting order (a
    /// partial receive with the first bytes, a `waitall` one with all it asks for); what they
    /// leave is buffered ahead of later bytes, as its own message.
    #[test]
    fn stream_bytes_go_straight_into_waiting_receives() {
        let (mut a, mut b, ep, back, end) = stream_pair();
        let mut d1 = [0u8; 2];
        let mut d2 = [0u8; 3];
        // SAFETY: both buffers outlive the requests, completed below.
        let r1 = unsafe { b.stream_recv_raw(back, d1.as_mut_ptr(), 2, false) }.expect("recv");
        // SAFETY: as above.
        let r2 = unsafe { b.stream_recv_raw(back, d2.as_mut_ptr(), 3, true) }.expect("recv");
        let s1 = a.stream_send(ep, b"abcdef").expect("send");
        let c1 = both(&mut b, &mut a, r1);
        let c2 = both(&mut b, &mut a, r2);
        assert_eq!((c1.len, &d1), (2, b"ab"));
        assert_eq!((c2.len, &d2), (3, b"cde"));
        both(&mut a, &mut b, s1).status.expect("send");
        let s2 = a.stream_send(ep, b"gh").expect("send");
        while b.stream_available(back).unwrap_or(0) < 3 {
            a.progress();
            b.progress();
            assert!(Instant::now() < end, "watchdog");
        }
        both(&mut a, &mut b, s2).status.expect("send");
        assert_eq!(b.stream_take_message(back).expect("take"), b"f");
        assert_eq!(b.stream_take_message(back).expect("take"), b"gh");
    }

    /// A message that fits the oldest waiting receive goes straight into it (the arrival's
    /// fast path): a `waitall` receive filled by two messages completes with the second, and
    /// an empty receive queued behind it completes with it.
    #[test]
    fn stream_fast_fill_completes_the_empty_receive_behind() {
        let (mut a, mut b, ep, back, _) = stream_pair();
        let mut d1 = [0u8; 4];
        // SAFETY: the buffer outlives the request, completed below.
        let r1 = unsafe { b.stream_recv_raw(back, d1.as_mut_ptr(), 4, true) }.expect("recv");
        // SAFETY: an empty receive writes nothing.
        let r2 = unsafe { b.stream_recv_raw(back, d1.as_mut_ptr(), 0, true) }.expect("recv");
        let (Op::Pending(p1), Op::Pending(p2)) = (r1, r2) else {
            panic!("both receives must wait");
        };
        let s1 = a.stream_send(ep, b"ab").expect("send");
        both(&mut a, &mut b, s1).status.expect("send");
        // Shared memory delivers within a few calls; the bytes must not be left buffered.
        for _ in 0..100 {
            b.progress();
        }
        assert_eq!(b.stream_available(back).expect("ep"), 0, "in the receive");
        assert!(
            !b.request_test(&p1).expect("test"),
            "half a waitall receive"
        );
        assert!(!b.request_test(&p2).expect("test"), "behind it");
        let s2 = a.stream_send(ep, b"cd").expect("send");
        let c1 = both(&mut b, &mut a, Op::Pending(p1));
        assert!(
            b.request_test(&p2).expect("test"),
            "the empty receive completed with the one before"
        );
        let c2 = both(&mut b, &mut a, Op::Pending(p2));
        assert_eq!((c1.len, &d1), (4, b"abcd"));
        assert_eq!(c2.len, 0);
        both(&mut a, &mut b, s2).status.expect("send");
    }

    /// Sends `msgs` on `ep` (a to b) as stream messages, waits until all their bytes arrived
    /// at b and the sends completed, and gives b's endpoint back to a.
    fn stream_arrived(a: &mut Worker, b: &mut Worker, ep: EpHandle, msgs: &[&[u8]]) -> EpHandle {
        let end = Instant::now() + Duration::from_secs(60);
        let sends: Vec<_> = msgs
            .iter()
            .map(|m| a.stream_send(ep, m).expect("send"))
            .collect();
        let back = ep_back(a, b, end);
        let total: usize = msgs.iter().map(|m| m.len()).sum();
        while b.stream_available(back).unwrap_or(0) < total {
            a.progress();
            b.progress();
            assert!(Instant::now() < end, "watchdog");
        }
        for s in sends {
            both(a, b, s).status.expect("send");
        }
        back
    }

    /// `stream_take_message` hands out one message at a time, the rest of one a receive
    /// took the start of first.
    #[test]
    fn stream_take_message_gives_one_message_at_a_time() {
        let (mut a, mut b, ep) = pair("posix");
        let back = stream_arrived(&mut a, &mut b, ep, &[&b"abc"[..], b"defg", b"hi"]);
        assert_eq!(b.stream_take_message(back).expect("take"), b"abc");
        // A receive takes the start of the second message; the rest is still one message.
        let mut dst = [0u8; 2];
        // SAFETY: `dst` outlives the request, completed below.
        let op = unsafe { b.stream_recv_raw(back, dst.as_mut_ptr(), 2, true) }.expect("recv");
        assert_eq!((b.complete(op).len, &dst), (2, b"de"));
        assert_eq!(b.stream_take_message(back).expect("take"), b"fg");
        assert_eq!(b.stream_take_message(back).expect("take"), b"hi");
        assert!(b.stream_take_message(back).expect("take").is_empty());
    }

    /// Stream messages that arrive in shared-memory buffers with no receive waiting stay in
    /// those buffers (the receive copies them once); their bytes come out whole and in order,
    /// across receives that start and end inside messages, and the buffers go back.
    #[test]
    fn stream_bytes_wait_in_the_transport_buffers() {
        let (mut a, mut b, ep) = pair("posix");
        let msgs: Vec<Vec<u8>> = (0..6u8)
            .map(|k| {
                (0..3000 + 7 * usize::from(k))
                    .map(|i| (i as u8) ^ k)
                    .collect()
            })
            .collect();
        let parts: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let back = stream_arrived(&mut a, &mut b, ep, &parts);
        let total: usize = msgs.iter().map(Vec::len).sum();
        let held = |w: &Worker| {
            let idx = w.st.ep_idx(back).expect("ep");
            w.st.ep(idx).extra().map_or(0, |x| x.stream.held())
        };
        assert_eq!(held(&b), msgs.len(), "every message waits in its buffer");
        let want: Vec<u8> = msgs.concat();
        let mut got = vec![0u8; total];
        for chunk in got.chunks_mut(4001) {
            let len = chunk.len();
            // SAFETY: `chunk` outlives the request, completed below.
            let op =
                unsafe { b.stream_recv_raw(back, chunk.as_mut_ptr(), len, true) }.expect("recv");
            assert_eq!(b.complete(op).len, len);
        }
        assert!(got == want, "the bytes came out in order");
        assert_eq!(held(&b), 0, "the buffers went back");
    }
}
