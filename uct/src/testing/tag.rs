//! Conformance tests of the tag-offload operations, generic over a [`Fixture`].
//!
//! Interface 1 posts receives (`tag_recv_zcopy`), endpoint 0→1 sends tagged messages. Every
//! test skips when the transport advertises no tag flag (except [`tag_caps`], which checks that
//! such a transport refuses the operations with `Unsupported`).

use super::fixture::{pattern, Fixture, Recorder, TestMem, WATCHDOG};
use crate::caps::{IfaceAttr, IfaceFlags, TagLimits};
use crate::ep::{CompletionId, Endpoint, EpId, PendingId, TagRecvId};
use crate::iface::{EventSink, Iface, RndvRemote};
use crate::md::{Iov, MemoryDomain};
use std::time::Instant;
use ucs::{Error, Outcome, Result};

const ALL_TAG: IfaceFlags = IfaceFlags::TAG_EAGER_SHORT
    .union(IfaceFlags::TAG_EAGER_BCOPY)
    .union(IfaceFlags::TAG_EAGER_ZCOPY)
    .union(IfaceFlags::TAG_RNDV_ZCOPY);

/// Largest message a test sends.
const CAP: usize = 1 << 20;

macro_rules! skip {
    ($($t:tt)*) => {{
        eprintln!("tag conformance: skipped: {}", format!($($t)*));
        return;
    }};
}

/// An unexpected rendezvous as recorded.
#[derive(Debug, Clone)]
pub struct UnexpRndv {
    /// Tag.
    pub tag: u64,
    /// The sender's header.
    pub header: Vec<u8>,
    /// Data address at the sender.
    pub remote_addr: u64,
    /// Data length.
    pub length: usize,
    /// Packed rkey.
    pub rkey: Vec<u8>,
}

/// Everything progress delivers, tag events included.
#[derive(Debug, Default)]
pub struct TagRecorder {
    /// Non-tag events.
    pub base: Recorder,
    /// Unexpected eager messages: tag, imm, data.
    pub unexp_eager: Vec<(u64, u64, Vec<u8>)>,
    /// Unexpected rendezvous.
    pub unexp_rndv: Vec<UnexpRndv>,
    /// Completed posted receives: ctx, tag, imm, length, result.
    pub recv_done: Vec<(TagRecvId, u64, u64, usize, Result<()>)>,
}

impl EventSink for TagRecorder {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.base.am(id, data);
    }
    fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
        self.base.completion(comp, result);
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.base.pending(ep, req)
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.base.ep_error(ep, err);
    }
    fn tag_unexp_eager(&mut self, tag: u64, imm: u64, data: &[u8]) {
        self.unexp_eager.push((tag, imm, data.to_vec()));
    }
    fn tag_unexp_rndv(&mut self, tag: u64, r: RndvRemote<'_>) {
        self.unexp_rndv.push(UnexpRndv {
            tag,
            header: r.header.to_vec(),
            remote_addr: r.remote_addr,
            length: r.length,
            rkey: r.rkey.to_vec(),
        });
    }
    fn tag_recv_done(&mut self, ctx: TagRecvId, tag: u64, imm: u64, len: usize, r: Result<()>) {
        self.recv_done.push((ctx, tag, imm, len, r));
    }
}

impl TagRecorder {
    fn take_done(&mut self, ctx: TagRecvId) -> Option<(u64, u64, usize, Result<()>)> {
        let i = self.recv_done.iter().position(|d| d.0 == ctx)?;
        let d = self.recv_done.remove(i);
        Some((d.1, d.2, d.3, d.4))
    }
}

fn open<F: Fixture>() -> Option<(F, IfaceAttr)> {
    match F::new() {
        Ok(mut f) => {
            let a = f.iface(0).attr().clone();
            Some((f, a))
        }
        Err(e @ (Error::NoDevice(_) | Error::Unsupported(_) | Error::Unreachable(_))) => {
            eprintln!("tag conformance: skipped, transport not available here: {e}");
            None
        }
        Err(e) => panic!("opening the fixture failed: {e}"),
    }
}

fn wait<F: Fixture>(
    fx: &mut F,
    rec: &mut TagRecorder,
    what: &str,
    cond: impl Fn(&TagRecorder) -> bool,
) {
    let start = Instant::now();
    while !cond(rec) {
        fx.progress_all(rec);
        assert!(
            start.elapsed() < WATCHDOG,
            "watchdog: {what} did not happen within {WATCHDOG:?}"
        );
    }
}

/// Runs a send to its end (retrying `NoResource`, waiting for `comp` on `InProgress`).
fn send<F: Fixture, T>(
    fx: &mut F,
    rec: &mut TagRecorder,
    comp: CompletionId,
    mut op: impl FnMut(&mut F) -> Result<Outcome<T>>,
) -> T
where
    T: Default,
{
    let start = Instant::now();
    loop {
        match op(fx).unwrap_or_else(|e| panic!("tag send {comp}: {e}")) {
            Outcome::Done(v) => return v,
            Outcome::InProgress => {
                wait(fx, rec, &format!("completion {comp}"), |r| {
                    r.base.completions.iter().any(|c| c.0 == comp)
                });
                let r = rec.base.take_completion(comp).expect("completion");
                r.unwrap_or_else(|e| panic!("tag send {comp} completed with {e}"));
                return T::default();
            }
            Outcome::NoResource => {
                fx.progress_all(rec);
                assert!(
                    start.elapsed() < WATCHDOG,
                    "watchdog: NoResource for {comp}"
                );
            }
        }
    }
}

/// Receive memory on interface 1.
fn recv_mem<F: Fixture>(fx: &F, len: usize) -> Option<TestMem> {
    Some(TestMem::local(fx.md(1), len)?.expect("allocating receive memory"))
}

/// Send memory on interface 0.
fn send_mem<F: Fixture>(fx: &F, len: usize) -> Option<TestMem> {
    Some(TestMem::local(fx.md(0), len)?.expect("allocating send memory"))
}

/// Sends `data` with `tag` by the cheapest eager operation that takes it.
#[allow(clippy::too_many_arguments)]
fn send_eager<F: Fixture>(
    fx: &mut F,
    rec: &mut TagRecorder,
    lim: &TagLimits,
    src: &TestMem,
    tag: u64,
    imm: u64,
    data: &[u8],
    comp: CompletionId,
) {
    let n = data.len();
    if n <= lim.eager_max_short && imm == 0 {
        send(fx, rec, comp, |fx| fx.ep(0).tag_eager_short(tag, data));
    } else if n <= lim.eager_max_bcopy {
        let got = send(fx, rec, comp, |fx| {
            fx.ep(0).tag_eager_bcopy(tag, imm, |b| {
                b[..n].copy_from_slice(data);
                n
            })
        });
        assert_eq!(got, n, "tag_eager_bcopy length");
    } else {
        src.write(0, data);
        let iov = [Iov::new(&src.memh, 0, n).expect("iov")];
        send(fx, rec, comp, |fx| {
            fx.ep(0).tag_eager_zcopy(tag, imm, &iov, comp)
        });
    }
}

/// Posts a receive on interface 1; it must be accepted.
fn post<F: Fixture>(fx: &mut F, tag: u64, mask: u64, iov: &[Iov<'_>], ctx: TagRecvId) {
    let r = fx.iface(1).tag_recv_zcopy(tag, mask, iov, ctx);
    assert!(
        matches!(r, Ok(Outcome::InProgress)),
        "posting receive {ctx}: {r:?}"
    );
}

fn eager_sizes(lim: &TagLimits) -> Vec<usize> {
    let mut v = vec![
        0,
        1,
        lim.eager_max_short,
        lim.eager_max_short + 1,
        lim.eager_max_bcopy,
    ];
    let z = lim.eager_max_zcopy.min(CAP);
    v.extend([lim.eager_max_bcopy + 1, 4096 + 7, 65536 + 3, z]);
    v.retain(|&n| n <= lim.eager_max_zcopy.max(lim.eager_max_bcopy));
    v.sort_unstable();
    v.dedup();
    v
}

/// Limits are non-zero exactly with their flags; without tag flags every tag operation gives
/// `Unsupported`.
pub fn tag_caps<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    let f = a.flags;
    let t = a.tag;
    assert_eq!(
        f.contains(IfaceFlags::TAG_EAGER_SHORT),
        t.eager_max_short > 0
    );
    assert_eq!(
        f.contains(IfaceFlags::TAG_EAGER_BCOPY),
        t.eager_max_bcopy > 0
    );
    assert_eq!(
        f.contains(IfaceFlags::TAG_EAGER_ZCOPY),
        t.eager_max_zcopy > 0
    );
    assert_eq!(f.contains(IfaceFlags::TAG_RNDV_ZCOPY), t.rndv_max_zcopy > 0);
    assert_eq!(f.intersects(ALL_TAG), t.recv_max_outstanding > 0);
    assert_eq!(f.intersects(ALL_TAG), t.recv_max_iov > 0);
    if f.intersects(ALL_TAG) {
        return;
    }
    let unsup = |r: Result<()>, what: &str| {
        assert!(
            matches!(r, Err(Error::Unsupported(_))),
            "{what} without tag flags gave {r:?}"
        )
    };
    unsup(
        fx.ep(0).tag_eager_short(1, b"x").map(|_| ()),
        "tag_eager_short",
    );
    unsup(
        fx.ep(0).tag_eager_bcopy(1, 0, |_| 0).map(|_| ()),
        "tag_eager_bcopy",
    );
    unsup(
        fx.ep(0).tag_rndv_request(1, b"h").map(|_| ()),
        "tag_rndv_request",
    );
    if let Some(m) = recv_mem(&fx, 64) {
        let iov = [Iov::whole(&m.memh)];
        unsup(
            fx.iface(1)
                .tag_recv_zcopy(1, u64::MAX, &iov, TagRecvId(1))
                .map(|_| ()),
            "tag_recv_zcopy",
        );
    }
    unsup(
        fx.iface(1).tag_recv_cancel(TagRecvId(1), true),
        "tag_recv_cancel",
    );
}

/// Expected eager messages at every size boundary land in their posted buffers with tag, imm
/// and length; an unmatched one of each size arrives unexpected, intact and in order.
pub fn tag_eager_sizes<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    if !a.flags.contains(IfaceFlags::TAG_EAGER_BCOPY) {
        skip!("no TAG_EAGER_BCOPY");
    }
    let lim = a.tag;
    let sizes = eager_sizes(&lim);
    let max = *sizes.last().expect("sizes");
    let (Some(src), Some(dst)) = (send_mem(&fx, max + 1), recv_mem(&fx, max + 64)) else {
        skip!("no memory for zero-copy tag operations")
    };
    let mut rec = TagRecorder::default();
    for (i, &n) in sizes.iter().enumerate() {
        let tag = 0x1000 + i as u64;
        let imm = if n > lim.eager_max_short {
            77 + i as u64
        } else {
            0
        };
        let data = pattern(tag, n);
        dst.write(0, &vec![0xee; n + 8]);
        let iov = [Iov::new(&dst.memh, 0, n + 8).expect("iov")];
        let ctx = 500 + i as u64;
        assert!(matches!(
            fx.iface(1)
                .tag_recv_zcopy(tag, u64::MAX, &iov, TagRecvId(ctx)),
            Ok(Outcome::InProgress)
        ));
        send_eager(
            &mut fx,
            &mut rec,
            &lim,
            &src,
            tag,
            imm,
            &data,
            CompletionId(900 + i as u64),
        );
        wait(&mut fx, &mut rec, &format!("receive of {n} bytes"), |r| {
            r.recv_done.iter().any(|d| d.0 == TagRecvId(ctx))
        });
        let (t, im, len, res) = rec.take_done(TagRecvId(ctx)).expect("done");
        assert!(res.is_ok(), "receive of {n} bytes: {res:?}");
        assert_eq!((t, im, len), (tag, imm, n), "tag, imm, length of {n} bytes");
        assert!(dst.read(0, n) == data, "{n} bytes: data differs");
        assert_eq!(
            dst.read(n, 8),
            vec![0xee; 8],
            "{n} bytes: wrote past the message"
        );
    }
    assert!(
        rec.unexp_eager.is_empty(),
        "expected messages went unexpected"
    );
    // The same sizes, unexpected, back to back: arrival order and bytes are kept.
    for (i, &n) in sizes.iter().enumerate() {
        let data = pattern(0x2000 + i as u64, n);
        send_eager(
            &mut fx,
            &mut rec,
            &lim,
            &src,
            0x2000 + i as u64,
            0,
            &data,
            CompletionId(950 + i as u64),
        );
    }
    wait(&mut fx, &mut rec, "unexpected messages", |r| {
        r.unexp_eager.len() >= sizes.len()
    });
    for (i, &n) in sizes.iter().enumerate() {
        let (tag, _, data) = &rec.unexp_eager[i];
        assert_eq!(
            *tag,
            0x2000 + i as u64,
            "unexpected message {i} out of order"
        );
        assert!(
            *data == pattern(*tag, n),
            "unexpected message of {n} bytes differs"
        );
    }
    assert!(rec.recv_done.is_empty());
    // Above the limit: refused.
    let r = fx
        .ep(0)
        .tag_eager_short(1, &vec![0u8; lim.eager_max_short + 1]);
    assert!(
        matches!(r, Err(Error::MessageTooLong { .. })),
        "short max+1: {r:?}"
    );
    if lim.eager_max_zcopy < usize::MAX / 2 && a.flags.contains(IfaceFlags::TAG_EAGER_ZCOPY) {
        if let Some(big) = send_mem(&fx, lim.eager_max_zcopy + 1) {
            let iov = [Iov::whole(&big.memh)];
            let r = fx.ep(0).tag_eager_zcopy(1, 0, &iov, CompletionId(1));
            assert!(
                matches!(r, Err(Error::MessageTooLong { .. })),
                "zcopy max+1: {r:?}"
            );
        }
    }
}

/// Posted receives match in posting order under their masks; a message no receive fits is
/// unexpected.
pub fn tag_match_order_and_mask<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    if !a.flags.contains(IfaceFlags::TAG_EAGER_SHORT) {
        skip!("no TAG_EAGER_SHORT");
    }
    let Some(dst) = recv_mem(&fx, 4 * 64) else {
        skip!("no receive memory")
    };
    let mut rec = TagRecorder::default();
    // r1: exactly 0x55; r2: anything with low byte 0x07; r3: wildcard; r4: exactly 0x55.
    let posts = [(0x55u64, u64::MAX), (0x07, 0xff), (0, 0), (0x55, u64::MAX)];
    for (i, &(tag, mask)) in posts.iter().enumerate() {
        let iov = [Iov::new(&dst.memh, i * 64, 64).expect("iov")];
        post(&mut fx, tag, mask, &iov, TagRecvId(i as u64 + 1));
    }
    // 0x55 → r1 (first in order, though r3 also fits); 0x1207 → r2; 0x99 → r3 (wildcard);
    // 0x55 → r4; 0x55 → unexpected.
    let sends = [0x55u64, 0x1207, 0x99, 0x55, 0x55];
    for (i, &tag) in sends.iter().enumerate() {
        let msg = [i as u8; 10];
        send(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).tag_eager_short(tag, &msg)
        });
    }
    wait(&mut fx, &mut rec, "4 receives and 1 unexpected", |r| {
        r.recv_done.len() == 4 && r.unexp_eager.len() == 1
    });
    let want = [
        (1u64, 0x55u64, 0u8),
        (2, 0x1207, 1),
        (3, 0x99, 2),
        (4, 0x55, 3),
    ];
    for (ctx, tag, byte) in want {
        let (t, _, len, res) = rec.take_done(TagRecvId(ctx)).expect("done");
        assert!(res.is_ok());
        assert_eq!((t, len), (tag, 10), "receive {ctx}");
        assert_eq!(
            dst.read((ctx as usize - 1) * 64, 10),
            vec![byte; 10],
            "receive {ctx} got the wrong message"
        );
    }
    assert_eq!(rec.unexp_eager[0].0, 0x55);
    assert_eq!(rec.unexp_eager[0].2, vec![4u8; 10]);
}

/// A message larger than its posted buffer fills it and completes with `Truncated`; the
/// connection stays in step for the next message.
pub fn tag_truncated<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    if !a.flags.contains(IfaceFlags::TAG_EAGER_BCOPY) {
        skip!("no TAG_EAGER_BCOPY");
    }
    let lim = a.tag;
    let n = lim.eager_max_zcopy.max(lim.eager_max_bcopy).min(200_000);
    let (Some(src), Some(dst)) = (send_mem(&fx, n), recv_mem(&fx, n)) else {
        skip!("no memory")
    };
    let mut rec = TagRecorder::default();
    let data = pattern(3, n);
    let iov = [Iov::new(&dst.memh, 0, 100).expect("iov")];
    post(&mut fx, 9, u64::MAX, &iov, TagRecvId(1));
    send_eager(&mut fx, &mut rec, &lim, &src, 9, 5, &data, CompletionId(1));
    let iov2 = [Iov::new(&dst.memh, 200, 16).expect("iov")];
    post(&mut fx, 10, u64::MAX, &iov2, TagRecvId(2));
    send(&mut fx, &mut rec, CompletionId(0), |fx| {
        fx.ep(0).tag_eager_short(10, b"after")
    });
    wait(&mut fx, &mut rec, "two receives", |r| {
        r.recv_done.len() == 2
    });
    let (_, _, len, res) = rec.take_done(TagRecvId(1)).expect("done");
    assert_eq!(len, n);
    assert!(
        matches!(res, Err(Error::Truncated { len, capacity: 100 }) if len == n),
        "truncated receive gave {res:?}"
    );
    assert!(dst.read(0, 100) == data[..100], "truncated prefix differs");
    let (_, _, len, res) = rec.take_done(TagRecvId(2)).expect("done");
    assert!(res.is_ok());
    assert_eq!(dst.read(200, len), b"after");
}

/// Cancel: without force the receive completes with `Canceled`; with force it just goes; the
/// message then arrives unexpected; canceling an unknown receive is an error.
pub fn tag_cancel<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    if !a.flags.contains(IfaceFlags::TAG_EAGER_SHORT) {
        skip!("no TAG_EAGER_SHORT");
    }
    let Some(dst) = recv_mem(&fx, 128) else {
        skip!("no receive memory")
    };
    let mut rec = TagRecorder::default();
    let iov = [Iov::new(&dst.memh, 0, 64).expect("iov")];
    post(&mut fx, 1, u64::MAX, &iov, TagRecvId(11));
    post(&mut fx, 2, u64::MAX, &iov, TagRecvId(12));
    fx.iface(1)
        .tag_recv_cancel(TagRecvId(11), false)
        .expect("cancel");
    fx.iface(1)
        .tag_recv_cancel(TagRecvId(12), true)
        .expect("force cancel");
    assert!(
        fx.iface(1).tag_recv_cancel(TagRecvId(12), true).is_err(),
        "second cancel"
    );
    assert!(
        fx.iface(1).tag_recv_cancel(TagRecvId(999), false).is_err(),
        "unknown cancel"
    );
    wait(&mut fx, &mut rec, "canceled completion", |r| {
        !r.recv_done.is_empty()
    });
    let (_, _, _, res) = rec
        .take_done(TagRecvId(11))
        .expect("canceled one completes");
    assert!(matches!(res, Err(Error::Canceled)), "{res:?}");
    for tag in [1u64, 2] {
        send(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).tag_eager_short(tag, b"late")
        });
    }
    wait(&mut fx, &mut rec, "two unexpected", |r| {
        r.unexp_eager.len() == 2
    });
    assert!(
        rec.recv_done.is_empty(),
        "a canceled receive matched: {:?}",
        rec.recv_done
    );
    assert_eq!(
        dst.read(0, 4),
        vec![0u8; 4],
        "a canceled buffer was written"
    );
}

/// Posted receives beyond `recv_max_outstanding` give `NoResource`.
pub fn tag_recv_limit<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    if !a.flags.intersects(ALL_TAG) {
        skip!("no tag offload");
    }
    let max = a.tag.recv_max_outstanding;
    if max > 4096 {
        skip!("recv_max_outstanding {max} too large to fill");
    }
    let Some(dst) = recv_mem(&fx, 8) else {
        skip!("no receive memory")
    };
    let iov = [Iov::whole(&dst.memh)];
    for i in 0..max as u64 {
        let r = fx.iface(1).tag_recv_zcopy(i, u64::MAX, &iov, TagRecvId(i));
        assert!(matches!(r, Ok(Outcome::InProgress)), "post {i}: {r:?}");
    }
    let r = fx.iface(1).tag_recv_zcopy(0, 0, &iov, TagRecvId(1 << 40));
    assert!(
        matches!(r, Ok(Outcome::NoResource)),
        "post beyond the limit: {r:?}"
    );
    fx.iface(1)
        .tag_recv_cancel(TagRecvId(0), true)
        .expect("cancel");
    let r = fx.iface(1).tag_recv_zcopy(0, 0, &iov, TagRecvId(1 << 40));
    assert!(
        matches!(r, Ok(Outcome::InProgress)),
        "post after a cancel: {r:?}"
    );
}

/// A matched rendezvous lands in the posted buffer and completes both sides.
pub fn tag_rndv_expected<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    if !a.flags.contains(IfaceFlags::TAG_RNDV_ZCOPY) {
        skip!("no TAG_RNDV_ZCOPY");
    }
    let mut rec = TagRecorder::default();
    for (i, n) in [0usize, 1, 70_000, CAP.min(a.tag.rndv_max_zcopy)]
        .into_iter()
        .enumerate()
    {
        let (Some(src), Some(dst)) = (send_mem(&fx, n.max(1)), recv_mem(&fx, n + 8)) else {
            skip!("no memory")
        };
        let data = pattern(40 + i as u64, n);
        src.write(0, &data);
        let tag = 0xabc0 + i as u64;
        let iov_r = [Iov::new(&dst.memh, 0, n + 8).expect("iov")];
        post(&mut fx, tag, u64::MAX, &iov_r, TagRecvId(70 + i as u64));
        let iov_s = [Iov::new(&src.memh, 0, n).expect("iov")];
        let comp = 80 + i as u64;
        let op = send(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .tag_rndv_zcopy(tag, b"hdr", &iov_s, CompletionId(comp))
        });
        assert!(op != 0, "rendezvous op id");
        wait(&mut fx, &mut rec, "rendezvous completions", |r| {
            r.recv_done.iter().any(|d| d.0 == TagRecvId(70 + i as u64))
                && r.base.completions.iter().any(|c| c.0 == CompletionId(comp))
        });
        let (t, _, len, res) = rec.take_done(TagRecvId(70 + i as u64)).expect("done");
        assert!(res.is_ok(), "rendezvous of {n} bytes: {res:?}");
        assert_eq!((t, len), (tag, n));
        assert!(
            dst.read(0, n) == data,
            "rendezvous of {n} bytes: data differs"
        );
        assert!(rec
            .base
            .take_completion(CompletionId(comp))
            .expect("sender")
            .is_ok());
        assert!(rec.unexp_rndv.is_empty());
    }
    // Truncated: a 5000-byte rendezvous into 100 bytes.
    let (Some(src), Some(dst)) = (send_mem(&fx, 5000), recv_mem(&fx, 100)) else {
        return;
    };
    let data = pattern(9, 5000);
    src.write(0, &data);
    let iov_r = [Iov::whole(&dst.memh)];
    post(&mut fx, 5, u64::MAX, &iov_r, TagRecvId(1));
    let iov_s = [Iov::whole(&src.memh)];
    send(&mut fx, &mut rec, CompletionId(2), |fx| {
        fx.ep(0).tag_rndv_zcopy(5, &[], &iov_s, CompletionId(2))
    });
    wait(&mut fx, &mut rec, "truncated rendezvous", |r| {
        !r.recv_done.is_empty()
    });
    let (_, _, len, res) = rec.take_done(TagRecvId(1)).expect("done");
    assert_eq!(len, 5000);
    assert!(
        matches!(
            res,
            Err(Error::Truncated {
                len: 5000,
                capacity: 100
            })
        ),
        "{res:?}"
    );
    assert!(dst.read(0, 100) == data[..100]);
}

/// An unmatched rendezvous arrives unexpected with its header, length and a key the receiver
/// can fetch the data with; the sender cancels its operation (no completion follows). A
/// rendezvous request is unexpected even when a posted receive fits.
pub fn tag_rndv_unexpected<F: Fixture>() {
    let Some((mut fx, a)) = open::<F>() else {
        return;
    };
    if !a.flags.contains(IfaceFlags::TAG_RNDV_ZCOPY) {
        skip!("no TAG_RNDV_ZCOPY");
    }
    let n = 50_000;
    let (Some(src), Some(dst)) = (send_mem(&fx, n), recv_mem(&fx, n)) else {
        skip!("no memory")
    };
    let data = pattern(11, n);
    src.write(0, &data);
    let mut rec = TagRecorder::default();
    let iov_s = [Iov::whole(&src.memh)];
    let op = send(&mut fx, &mut rec, CompletionId(3), |fx| {
        fx.ep(0)
            .tag_rndv_zcopy(77, b"rts-header", &iov_s, CompletionId(3))
    });
    wait(&mut fx, &mut rec, "unexpected rendezvous", |r| {
        r.unexp_rndv.len() == 1
    });
    let u = rec.unexp_rndv.remove(0);
    assert_eq!((u.tag, u.length), (77, n));
    assert_eq!(u.header, b"rts-header");
    if a.flags.contains(IfaceFlags::GET_ZCOPY) && !u.rkey.is_empty() {
        let rkey = fx
            .md(1)
            .rkey_unpack(&u.rkey)
            .expect("rkey of an unexpected rendezvous");
        let iov = [Iov::whole(&dst.memh)];
        let start = Instant::now();
        loop {
            match fx
                .ep(1)
                .get_zcopy(&iov, u.remote_addr, &rkey, CompletionId(44))
                .expect("get")
            {
                Outcome::Done(()) => break,
                Outcome::InProgress => {
                    wait(&mut fx, &mut rec, "software get", |r| {
                        r.base.completions.iter().any(|c| c.0 == CompletionId(44))
                    });
                    assert!(rec
                        .base
                        .take_completion(CompletionId(44))
                        .expect("get")
                        .is_ok());
                    break;
                }
                Outcome::NoResource => {
                    fx.progress_all(&mut rec);
                    assert!(start.elapsed() < WATCHDOG);
                }
            }
        }
        assert!(
            dst.read(0, n) == data,
            "software get of an unexpected rendezvous differs"
        );
    }
    fx.ep(0).tag_rndv_cancel(op).expect("cancel the rendezvous");
    assert!(fx.ep(0).tag_rndv_cancel(op).is_err(), "second cancel");
    // A request: unexpected even though a receive for its tag is posted.
    let iov_r = [Iov::whole(&dst.memh)];
    post(&mut fx, 78, u64::MAX, &iov_r, TagRecvId(1));
    send(&mut fx, &mut rec, CompletionId(0), |fx| {
        fx.ep(0).tag_rndv_request(78, b"sw-rts")
    });
    wait(&mut fx, &mut rec, "rendezvous request", |r| {
        r.unexp_rndv.len() == 1
    });
    let u = rec.unexp_rndv.remove(0);
    assert_eq!(
        (u.tag, u.length, u.header.as_slice()),
        (78, 0, &b"sw-rts"[..])
    );
    assert!(
        rec.recv_done.is_empty(),
        "a rendezvous request matched a posted receive"
    );
    // The canceled operation never completes; the posted receive still works.
    send(&mut fx, &mut rec, CompletionId(0), |fx| {
        fx.ep(0).tag_eager_short(78, b"ok")
    });
    wait(&mut fx, &mut rec, "receive", |r| !r.recv_done.is_empty());
    assert!(
        rec.base.completions.iter().all(|c| c.0 != CompletionId(3)),
        "canceled rendezvous completed"
    );
}
