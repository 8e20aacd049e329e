//! Operations on memory the worker does not own (for a C API whose callers pass raw buffers):
//! the receive state holds a [`RecvBuf`] and the send state a [`SendBuf`](crate::worker::req::SendBuf), each either a vector
//! the worker owns or the caller's memory. The `unsafe` entry points below post receives and
//! gets straight into caller memory and send from it in place, so no copy through a vector is
//! made (beyond what a transport's own eager path copies).
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
use crate::rma::ops::RmaDir;
use crate::rma::shared_file;
use crate::rma::{MemMap, Rkey};
use crate::wireup::TagSendMode;
use crate::worker::req::RecvBuf;
use crate::worker::req::SendData;
use crate::worker::{EpHandle, Message, Worker};
use std::ptr::NonNull;
use ucs::{Error, Result};

impl Worker {
    /// Sends `len` bytes at `ptr` as a tagged message (`mode`: when it completes, see
    /// [`TagSendMode`]), reading the caller's memory in place: eager fragments are copied out as
    /// they go, a rendezvous registers the memory and the peer reads it there, so no copy of a
    /// large message is made. The completion's `buf` is `None`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, and the caller must not change or free
    /// that memory until the request completes (or the worker is dropped).
    #[inline]
    pub unsafe fn tag_send_raw(
        &mut self,
        ep: EpHandle,
        tag: u64,
        ptr: *const u8,
        len: usize,
        mode: TagSendMode,
    ) -> Result<Op> {
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: forwarded contract.
            unsafe { std::slice::from_raw_parts(ptr, len) }
        };
        let data = SendData::Raw(data);
        // As `Worker::tag_send`: an eager-short send's completion is built here. The short
        // path checks the handle; the others check it here.
        if mode != TagSendMode::Sync && self.st.tag_family().tag_send_short_out(ep, tag, &data)? {
            return Ok(Op::Done(Completion {
                tag,
                ..Completion::ok()
            }));
        }
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send_proto(idx, tag, data, mode)
    }

    /// Posts a receive for `tag` under `mask` straight into `len` bytes at `ptr`: the data
    /// lands there (truncated to `len`, with `Truncated` and the real length as
    /// [`Worker::tag_recv`]); the completion's `buf` is `None`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes, and the caller must neither read, write
    /// nor free that memory until the request completes (including by cancel), or until the
    /// worker is dropped. After a receive failed by a peer's failure during a rendezvous, that
    /// peer may still have written into the memory before it died.
    pub unsafe fn tag_recv_raw(
        &mut self,
        ptr: *mut u8,
        len: usize,
        tag: u64,
        mask: u64,
    ) -> Result<Op> {
        // SAFETY: forwarded contract.
        Ok(self.tag_recv_buf(unsafe { RecvBuf::raw(ptr, len) }, tag, mask))
    }

    /// Receives a message taken by a removing probe straight into `len` bytes at `ptr`.
    ///
    /// # Safety
    /// As [`Worker::tag_recv_raw`].
    pub unsafe fn tag_msg_recv_raw(
        &mut self,
        ptr: *mut u8,
        len: usize,
        msg: Message,
    ) -> Result<Op> {
        let uid = self.msg_uid(msg)?;
        // SAFETY: forwarded contract.
        let key = self
            .st
            .new_recv(unsafe { RecvBuf::raw(ptr, len) }, uid as u64, 0);
        self.st.tag_family().recv_from_unexp(key, uid);
        Ok(self.st.op_of(key))
    }

    /// Reads `len` bytes at `remote_addr` of the peer's mapping straight into `ptr`.
    ///
    /// # Safety
    /// As [`Worker::tag_recv_raw`].
    pub unsafe fn get_raw(
        &mut self,
        ep: EpHandle,
        ptr: *mut u8,
        len: usize,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        // SAFETY: forwarded contract.
        let buf = unsafe { RecvBuf::raw(ptr, len) };
        let made = self.st.rma(idx, RmaDir::Get(buf), remote_addr, rkey);
        self.st.start_made(made)
    }

    /// Maps `len` bytes of caller memory at `ptr` for remote access (`ucp_mem_map` of existing
    /// memory), registered as [`Worker::mem_map_vec`] registers its vector. When the range
    /// lies in one shared mapping of a file, the packed keys also describe that file range, and
    /// peers whose process maps the same file reach the memory directly.
    ///
    /// # Safety
    /// The memory must stay valid (not freed or unmapped) until the returned mapping is
    /// dropped; peers may read and write it at any time meanwhile.
    pub unsafe fn mem_map_raw(&mut self, ptr: *mut u8, len: usize) -> Result<MemMap> {
        let ptr = NonNull::new(ptr)
            .filter(|_| len > 0)
            .ok_or_else(|| Error::InvalidParam("cannot map an empty or null region".into()))?;
        let mut keys = Vec::new();
        // SAFETY: the caller keeps the memory valid while the MemMap lives, and the MemMap
        // drops the registrations first.
        unsafe { self.st.register_all(ptr, len, &mut keys) };
        let mut map = MemMap::new(
            ptr,
            len,
            crate::rma::Backing::Raw,
            self.st.regions().clone(),
            keys,
        )?;
        // Memory in a shared file mapping: peers that map the same file reach it directly.
        if let Some(k) = shared_file::describe(ptr.as_ptr() as u64, len) {
            map.add_key(shared_file::TL_NAME, k.encode())?;
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EpParams;

    /// Two workers over posix shared memory (rendezvous reads the sender's memory in place).
    fn pair() -> (Worker, Worker, EpHandle) {
        let ctx = crate::Context::new(crate::ContextParams {
            features: crate::Features::TAG | crate::Features::RMA,
            config: Some(crate::UcpConfig {
                tls: vec!["posix".into(), "cma".into()],
                ..Default::default()
            }),
        })
        .expect("context");
        let a = Worker::new(&ctx).expect("worker a");
        let mut b = Worker::new(&ctx).expect("worker b");
        let ba = b.ep_create(a.address(), EpParams::default()).expect("ep");
        (a, b, ba)
    }

    /// Sends a short message from `b`, progressing both until the endpoint takes it.
    fn send_short(a: &mut Worker, b: &mut Worker, ba: EpHandle, tag: u64, data: &[u8]) {
        for _ in 0..1_000_000 {
            if b.tag_send_short(ba, tag, data).expect("short send") {
                return;
            }
            a.progress();
            b.progress();
        }
        panic!("the short send never went out");
    }

    /// (token, length, tag, success) of each result a completion hook saw.
    type Seen = std::rc::Rc<std::cell::RefCell<Vec<(u64, usize, u64, bool)>>>;

    /// Sets a completion hook on `w` that logs each result it sees.
    fn hook_log(w: &mut Worker) -> Seen {
        let seen = Seen::default();
        let log = seen.clone();
        w.set_completion_hook(Some(Box::new(move |token, c| {
            log.borrow_mut()
                .push((token, c.len, c.tag, c.status.is_ok()))
        })));
        seen
    }

    #[test]
    fn hooked_raw_receive_goes_to_the_hook_or_finishes_at_once() {
        use crate::HookedOp;
        let (mut a, mut b, ba) = pair();
        let seen = hook_log(&mut a);
        let mut dst = vec![0u8; 16];
        // Posted first: the token is asked for once, the result comes to the hook.
        let mut asked = 0;
        // SAFETY: `dst` outlives the receive, which completes below.
        let op = unsafe {
            a.tag_recv_raw_hooked(dst.as_mut_ptr(), dst.len(), 5, u64::MAX, || {
                asked += 1;
                77
            })
        }
        .expect("post");
        assert!(matches!(op, HookedOp::Pending(_)), "{op:?}");
        assert_eq!(asked, 1);
        send_short(&mut a, &mut b, ba, 5, b"hello");
        for _ in 0..1_000_000 {
            if !seen.borrow().is_empty() {
                break;
            }
            a.progress();
            b.progress();
        }
        assert_eq!(seen.borrow().as_slice(), &[(77, 5, 5, true)]);
        assert_eq!(&dst[..5], b"hello");
        // The message first: finished at once, no token asked for, the hook not called.
        send_short(&mut a, &mut b, ba, 6, b"again!");
        for _ in 0..1_000_000 {
            if a.tag_probe(6, u64::MAX, false).is_some() {
                break;
            }
            a.progress();
            b.progress();
        }
        // SAFETY: as above; the receive finishes within the call.
        let op = unsafe {
            a.tag_recv_raw_hooked(dst.as_mut_ptr(), 4, 6, u64::MAX, || {
                panic!("a token asked for a receive that finished")
            })
        }
        .expect("post");
        match op {
            HookedOp::Done(c) => {
                assert_eq!((c.len, c.tag), (6, 6));
                assert!(c.status.is_err(), "6 bytes into 4 is truncated");
            }
            HookedOp::Pending(_) => panic!("the waiting message was not received at once"),
        }
        assert_eq!(&dst[..4], b"agai");
        assert_eq!(seen.borrow().len(), 1);
        // Too long for one short message: nothing is sent.
        assert!(!b.tag_send_short(ba, 7, &vec![1u8; 1 << 20]).expect("long"));
        for _ in 0..1000 {
            a.progress();
            b.progress();
        }
        assert!(a.tag_probe(7, u64::MAX, false).is_none());
    }

    #[test]
    fn queued_ok_receives_come_in_order_and_the_rest_go_to_the_hook() {
        use crate::{HookedOp, RecvOk};
        let (mut a, mut b, ba) = pair();
        let seen = hook_log(&mut a);
        a.queue_recv_ok(true);
        assert!(!a.has_recv_ok());
        let mut dst = [[0u8; 8]; 3];
        // Three receives: two that fit their messages, one whose message is too long.
        for (k, d) in dst.iter_mut().enumerate() {
            let cap = if k == 1 { 4 } else { 8 };
            // SAFETY: `dst` outlives the receives, which complete below.
            let op = unsafe {
                a.tag_recv_raw_hooked(d.as_mut_ptr(), cap, 10 + k as u64, u64::MAX, || {
                    100 + k as u64
                })
            }
            .expect("post");
            assert!(matches!(op, HookedOp::Pending(_)), "{op:?}");
        }
        for (tag, msg) in [(10, &b"first"[..]), (11, b"too long"), (12, b"third!")] {
            send_short(&mut a, &mut b, ba, tag, msg);
        }
        let mut ok = Vec::new();
        for _ in 0..1_000_000 {
            a.progress();
            b.progress();
            while let Some(e) = a.pop_recv_ok() {
                ok.push(e);
            }
            if ok.len() == 2 && !seen.borrow().is_empty() {
                break;
            }
        }
        let rok = |token, len, tag| RecvOk { token, len, tag };
        assert_eq!(ok, [rok(100, 5, 10), rok(102, 6, 12)]);
        // The truncated one went to the hook, with its error.
        assert_eq!(seen.borrow().as_slice(), &[(101, 8, 11, false)]);
        assert_eq!(
            (&dst[0][..5], &dst[1][..4], &dst[2][..6]),
            (&b"first"[..], &b"too "[..], &b"third!"[..])
        );
        // Off again: an ok receive goes to the hook.
        a.queue_recv_ok(false);
        // SAFETY: as above.
        let op = unsafe { a.tag_recv_raw_hooked(dst[0].as_mut_ptr(), 8, 13, u64::MAX, || 103) }
            .expect("post");
        assert!(matches!(op, HookedOp::Pending(_)), "{op:?}");
        send_short(&mut a, &mut b, ba, 13, b"hook");
        for _ in 0..1_000_000 {
            if seen.borrow().len() == 2 {
                break;
            }
            a.progress();
            b.progress();
        }
        assert_eq!(seen.borrow()[1], (103, 4, 13, true));
        assert!(a.pop_recv_ok().is_none());
    }

    #[test]
    fn raw_send_and_receive_in_place() {
        let (mut a, mut b, ba) = pair();
        let p = b.ep_proto_config(ba).expect("proto");
        assert!(p.tag_rndv_thresh < 70_000, "{p:?}");
        // Each size in each mode (a synchronous send of 5 bytes; 70,000 bytes by rendezvous
        // in both the standard and the fast-completion mode).
        let runs = [
            (0usize, TagSendMode::Standard),
            (5, TagSendMode::Sync),
            (70_000, TagSendMode::Standard),
            (70_000, TagSendMode::FastCompletion),
            (3 << 20, TagSendMode::FastCompletion),
        ];
        for (len, mode) in runs {
            let before = b.stats();
            let src: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
            let mut dst = vec![0u8; len + 16];
            // SAFETY: both buffers outlive the operations, which complete below.
            let (s, r) = unsafe {
                (
                    b.tag_send_raw(ba, 9, src.as_ptr(), len, mode).unwrap(),
                    a.tag_recv_raw(dst.as_mut_ptr(), dst.len(), 9, u64::MAX)
                        .unwrap(),
                )
            };
            let (mut s, mut r) = (Some(s), Some(r));
            let (mut sc, mut rc) = (None, None);
            while sc.is_none() || rc.is_none() {
                for (op, w, out) in [(&mut s, &mut b, &mut sc), (&mut r, &mut a, &mut rc)] {
                    if let Some(o) = op.take() {
                        match o {
                            Op::Done(c) => *out = Some(c),
                            Op::Pending(q) => match w.request_take(q) {
                                Ok(c) => *out = Some(c),
                                Err(q) => *op = Some(Op::Pending(q)),
                            },
                        }
                    }
                }
                a.progress();
                b.progress();
            }
            let (sc, rc) = (sc.unwrap(), rc.unwrap());
            assert_eq!(sc.status, Ok(()));
            assert!(sc.buf.is_none(), "raw sends give no vector back");
            assert_eq!(rc.status, Ok(()));
            assert_eq!(rc.len, len);
            assert!(rc.buf.is_none(), "raw receives give no vector back");
            assert!(dst[..len] == src[..], "{len} bytes landed in place");
            assert!(dst[len..].iter().all(|&x| x == 0));
            let after = b.stats();
            let (rndv, multi) = (
                after.rndv_rts - before.rndv_rts,
                after.eager_multi - before.eager_multi,
            );
            match (len, mode) {
                (70_000, _) | (0x30_0000, _) => {
                    assert_eq!((rndv, multi), (1, 0), "{len} {mode:?} by rendezvous")
                }
                _ => assert_eq!(rndv, 0, "{len} {mode:?}"),
            }
        }
    }

    #[test]
    fn recv_buf_views() {
        let mut mem = [0u8; 8];
        // SAFETY: a local array outliving the view.
        let mut b = unsafe { RecvBuf::raw(mem.as_mut_ptr(), 8) };
        b[2..4].copy_from_slice(&[7, 9]);
        assert_eq!(b.len(), 8);
        assert!(b.into_vec().is_none());
        assert_eq!(mem[2..4], [7, 9]);
        // SAFETY: zero length needs no memory.
        let e = unsafe { RecvBuf::raw(std::ptr::null_mut(), 0) };
        assert_eq!(e.into_vec(), Some(Vec::new()));
    }
}
