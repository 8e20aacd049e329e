//! The conformance tests, generic over a [`Fixture`]. Each is a plain function; the
//! `uct_conformance_tests!` macro turns them into `#[test]`s for one fixture type.

use super::fixture::{
    local_mem, pattern, progress_until, remote_mem, run_op, Fixture, Recorder, RemoteMem, WATCHDOG,
};
use crate::caps::{AtomicOps, EventFlags, IfaceAttr, IfaceFlags};
use crate::ep::{AtomicOp, Endpoint, AM_ID_MAX};
use crate::iface::Iface;
use crate::md::{Iov, MemHandle, MemoryDomain, RemoteKey};
use crate::{CompletionId, PendingId, TagRecvId};
use std::fmt::Debug;
use std::ptr::NonNull;
use std::time::Instant;
use ucs::{Error, Outcome, Result};

/// Largest buffer a test allocates for one operation; limits above it are tested up to it.
const CAP: usize = 1 << 20;

macro_rules! skip {
    ($($t:tt)*) => {{
        eprintln!("conformance: skipped: {}", format!($($t)*));
        return;
    }};
}

fn open<F: Fixture>() -> Option<F> {
    match F::new() {
        Ok(f) => Some(f),
        Err(e @ (Error::NoDevice(_) | Error::Unsupported(_) | Error::Unreachable(_))) => {
            eprintln!("conformance: skipped, transport not available here: {e}");
            None
        }
        Err(e) => panic!("opening the fixture failed: {e}"),
    }
}

fn attr<F: Fixture>(fx: &mut F) -> IfaceAttr {
    fx.iface(0).attr().clone()
}

/// An advertised operation must succeed; a non-advertised one must say Unsupported.
fn expect_support<T: Debug>(advertised: bool, what: &str, r: Result<T>) {
    if advertised {
        if let Err(e) = r {
            panic!("{what} is advertised but failed: {e}");
        }
    } else {
        match r {
            Err(Error::Unsupported(_)) => {}
            other => panic!("{what} is not advertised but gave {other:?} instead of Unsupported"),
        }
    }
}

fn is_too_long<T: Debug>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::MessageTooLong { .. }))
}

/// Progresses until `n` active messages were received.
fn wait_ams<F: Fixture>(fx: &mut F, rec: &mut Recorder, n: usize) {
    progress_until(fx, rec, &format!("{n} active messages"), |r| {
        r.ams.len() >= n
    });
}

/// A handle over a test-owned buffer that belongs to no domain: only for checking that
/// operations a transport does not advertise are refused before touching memory.
fn foreign_memh(buf: &mut [u64]) -> MemHandle {
    let p = NonNull::new(buf.as_mut_ptr().cast::<u8>()).expect("non-empty buffer");
    // SAFETY: the caller keeps `buf` alive longer than the handle.
    unsafe { MemHandle::new(p, buf.len() * 8, "conformance-foreign", None) }
}

/// Caps consistency: every advertised operation works, every other one is `Unsupported`, and
/// the advertised address lengths and event fd match.
pub fn caps_consistency<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    let f = a.flags;
    let mut rec = Recorder::new();

    assert_eq!(fx.iface(0).device_address().len(), a.device_addr_len);
    assert_eq!(fx.iface(0).iface_address().len(), a.iface_addr_len);
    assert_eq!(
        fx.iface(0).event_fd().is_some(),
        a.event_flags.contains(EventFlags::FD),
        "event_fd() must exist exactly when EventFlags::FD is advertised"
    );
    let has_atomics = a.atomics != Default::default();
    assert_eq!(
        has_atomics,
        f.intersects(IfaceFlags::ATOMIC_CPU | IfaceFlags::ATOMIC_DEVICE),
        "atomic caps and ATOMIC_CPU/ATOMIC_DEVICE flags disagree"
    );
    for (flag, lim, name) in [
        (IfaceFlags::AM_SHORT, a.am.max_short, "am.max_short"),
        (IfaceFlags::AM_BCOPY, a.am.max_bcopy, "am.max_bcopy"),
        (IfaceFlags::AM_ZCOPY, a.am.max_zcopy, "am.max_zcopy"),
        (IfaceFlags::PUT_SHORT, a.put.max_short, "put.max_short"),
        (IfaceFlags::PUT_BCOPY, a.put.max_bcopy, "put.max_bcopy"),
        (IfaceFlags::PUT_ZCOPY, a.put.max_zcopy, "put.max_zcopy"),
        (IfaceFlags::GET_SHORT, a.get.max_short, "get.max_short"),
        (IfaceFlags::GET_BCOPY, a.get.max_bcopy, "get.max_bcopy"),
        (IfaceFlags::GET_ZCOPY, a.get.max_zcopy, "get.max_zcopy"),
    ] {
        assert_eq!(
            f.contains(flag),
            lim > 0,
            "{name} is {lim} but the flag {flag:?} is {}",
            if f.contains(flag) { "set" } else { "clear" }
        );
    }

    // Active messages.
    let mut n_am = 0;
    let r = run_op(&mut fx, &mut rec, CompletionId(1), |fx| {
        fx.ep(0).am_short(0, 1, b"s")
    });
    n_am += r.is_ok() as usize;
    expect_support(f.contains(IfaceFlags::AM_SHORT), "am_short", r);
    let r = run_op(&mut fx, &mut rec, CompletionId(2), |fx| {
        fx.ep(0).am_short_iov(0, &[b"i", b"ov"])
    });
    n_am += r.is_ok() as usize;
    expect_support(f.contains(IfaceFlags::AM_SHORT), "am_short_iov", r);
    let r = run_op(&mut fx, &mut rec, CompletionId(3), |fx| {
        fx.ep(0).am_bcopy(0, |b| {
            b[0] = 7;
            1
        })
    });
    n_am += r.is_ok() as usize;
    expect_support(f.contains(IfaceFlags::AM_BCOPY), "am_bcopy", r);

    let mut fbuf = [0u64; 8];
    let foreign = foreign_memh(&mut fbuf);
    let local = local_mem(&fx, 64);
    let lmemh = local.as_ref().map(|m| &m.memh).unwrap_or(&foreign);
    let iov = [Iov::new(lmemh, 0, 8).expect("iov in range")];
    if f.contains(IfaceFlags::AM_ZCOPY) && local.is_none() {
        eprintln!("conformance: am_zcopy advertised but the md gives no memory: not checked");
    } else {
        let r = run_op(&mut fx, &mut rec, CompletionId(4), |fx| {
            fx.ep(0).am_zcopy(0, b"h", &iov, CompletionId(4))
        });
        n_am += r.is_ok() as usize;
        expect_support(f.contains(IfaceFlags::AM_ZCOPY), "am_zcopy", r);
    }
    wait_ams(&mut fx, &mut rec, n_am);

    // Remote memory access and atomics.
    let rm = remote_mem(&fx, 64);
    let dummy = RemoteKey::unmapped(0x1000, 64, 0);
    let (rkey, base) = match &rm {
        Some(rm) => (rm.rkey.clone(), rm.base()),
        None => (dummy, 0x1000),
    };
    let checkable = |adv: bool, name: &str| {
        if adv && rm.is_none() {
            eprintln!("conformance: {name} advertised but the md gives no memory: not checked");
            false
        } else {
            true
        }
    };
    let rma_zcopy_ok = |adv: bool, name: &str| {
        if adv && local.is_none() {
            eprintln!("conformance: {name} advertised but the md gives no memory: not checked");
            false
        } else {
            true
        }
    };
    let mut buf8 = [0u8; 8];
    if checkable(f.contains(IfaceFlags::PUT_SHORT), "put_short") {
        let r = run_op(&mut fx, &mut rec, CompletionId(10), |fx| {
            fx.ep(0).put_short(b"12345678", base, &rkey)
        });
        expect_support(f.contains(IfaceFlags::PUT_SHORT), "put_short", r);
    }
    if checkable(f.contains(IfaceFlags::PUT_BCOPY), "put_bcopy") {
        let r = run_op(&mut fx, &mut rec, CompletionId(11), |fx| {
            fx.ep(0).put_bcopy(
                |b| {
                    b[..8].copy_from_slice(b"abcdefgh");
                    8
                },
                base,
                &rkey,
            )
        });
        expect_support(f.contains(IfaceFlags::PUT_BCOPY), "put_bcopy", r);
    }
    if checkable(f.contains(IfaceFlags::PUT_ZCOPY), "put_zcopy")
        && rma_zcopy_ok(f.contains(IfaceFlags::PUT_ZCOPY), "put_zcopy")
    {
        let r = run_op(&mut fx, &mut rec, CompletionId(12), |fx| {
            fx.ep(0).put_zcopy(&iov, base, &rkey, CompletionId(12))
        });
        expect_support(f.contains(IfaceFlags::PUT_ZCOPY), "put_zcopy", r);
    }
    if checkable(f.contains(IfaceFlags::GET_SHORT), "get_short") {
        let r = run_op(&mut fx, &mut rec, CompletionId(13), |fx| {
            fx.ep(0).get_short(&mut buf8, base, &rkey)
        });
        expect_support(f.contains(IfaceFlags::GET_SHORT), "get_short", r);
    }
    if checkable(f.contains(IfaceFlags::GET_BCOPY), "get_bcopy") {
        let r = run_op(&mut fx, &mut rec, CompletionId(14), |fx| {
            fx.ep(0)
                .get_bcopy(8, base, &rkey, CompletionId(14), &mut |_| {})
        });
        expect_support(f.contains(IfaceFlags::GET_BCOPY), "get_bcopy", r);
    }
    if checkable(f.contains(IfaceFlags::GET_ZCOPY), "get_zcopy")
        && rma_zcopy_ok(f.contains(IfaceFlags::GET_ZCOPY), "get_zcopy")
    {
        let r = run_op(&mut fx, &mut rec, CompletionId(15), |fx| {
            fx.ep(0).get_zcopy(&iov, base, &rkey, CompletionId(15))
        });
        expect_support(f.contains(IfaceFlags::GET_ZCOPY), "get_zcopy", r);
    }

    let at = a.atomics;
    if checkable(has_atomics, "atomics") {
        let mut comp = 100;
        for op in [AtomicOp::Add, AtomicOp::And, AtomicOp::Or, AtomicOp::Xor] {
            let adv = at.op32.contains(op.flag());
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0).atomic32_post(op, 1, base, &rkey)
            });
            expect_support(adv, &format!("atomic32_post({op:?})"), r);
            let adv = at.op64.contains(op.flag());
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0).atomic64_post(op, 1, base, &rkey)
            });
            expect_support(adv, &format!("atomic64_post({op:?})"), r);
            comp += 1;
        }
        for op in [
            AtomicOp::Add,
            AtomicOp::And,
            AtomicOp::Or,
            AtomicOp::Xor,
            AtomicOp::Swap,
        ] {
            let adv = at.fop32.contains(op.flag());
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .atomic32_fetch(op, 1, base, &rkey, CompletionId(comp))
            });
            expect_support(adv, &format!("atomic32_fetch({op:?})"), r);
            comp += 1;
            let adv = at.fop64.contains(op.flag());
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .atomic64_fetch(op, 1, base, &rkey, CompletionId(comp))
            });
            expect_support(adv, &format!("atomic64_fetch({op:?})"), r);
            comp += 1;
        }
        let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .atomic_cswap32(0, 1, base, &rkey, CompletionId(comp))
        });
        expect_support(at.fop32.contains(AtomicOps::CSWAP), "atomic_cswap32", r);
        comp += 1;
        let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .atomic_cswap64(0, 1, base, &rkey, CompletionId(comp))
        });
        expect_support(at.fop64.contains(AtomicOps::CSWAP), "atomic_cswap64", r);
    }

    // Flush is always there.
    run_op(&mut fx, &mut rec, CompletionId(200), |fx| {
        fx.ep(0).flush(CompletionId(200))
    })
    .expect("ep flush");
    run_op(&mut fx, &mut rec, CompletionId(201), |fx| {
        fx.iface(0).flush(CompletionId(201))
    })
    .expect("iface flush");

    // Pending queue.
    // Without PENDING, Busy is also fine: the transport never runs out of resources.
    match fx.ep(0).pending_add(PendingId(300)) {
        Err(Error::Busy(_)) => {}
        Ok(()) => {
            assert!(
                f.contains(IfaceFlags::PENDING),
                "pending_add works without PENDING"
            );
            let mut got = vec![];
            fx.ep(0).pending_purge(&mut |r| got.push(r));
            assert_eq!(got, vec![PendingId(300)]);
        }
        Err(Error::Unsupported(_)) => assert!(!f.contains(IfaceFlags::PENDING)),
        Err(e) => panic!("pending_add with free resources gave {e}"),
    }

    // Connection establishment.
    let r = fx.connect(0, 1).map(|_| ());
    assert!(r.is_ok(), "the fixture's connect failed: {r:?}");
    let dev = fx.iface(1).device_address().to_vec();
    let addr = fx.iface(1).iface_address().to_vec();
    let r = fx.iface(0).ep_create_connected(&dev, &addr).map(|_| ());
    expect_support(
        f.contains(IfaceFlags::CONNECT_TO_IFACE),
        "ep_create_connected",
        r,
    );
    let r = fx.iface(0).ep_create();
    if let Ok(ep) = &r {
        let addr = ep.ep_address().expect("ep_address with CONNECT_TO_EP");
        assert_eq!(addr.len(), a.ep_addr_len, "ep_addr_len");
    }
    expect_support(
        f.contains(IfaceFlags::CONNECT_TO_EP),
        "ep_create",
        r.map(|_| ()),
    );

    // Tag offload: checked positively by its own suite; here only its absence.
    let tag_flags = IfaceFlags::TAG_EAGER_SHORT
        | IfaceFlags::TAG_EAGER_BCOPY
        | IfaceFlags::TAG_EAGER_ZCOPY
        | IfaceFlags::TAG_RNDV_ZCOPY;
    if !f.contains(IfaceFlags::TAG_EAGER_SHORT) {
        expect_support(false, "tag_eager_short", fx.ep(0).tag_eager_short(1, b"t"));
    }
    if !f.contains(IfaceFlags::TAG_EAGER_BCOPY) {
        let r = fx.ep(0).tag_eager_bcopy(1, 0, |_| 0);
        expect_support(false, "tag_eager_bcopy", r);
    }
    if !f.contains(IfaceFlags::TAG_EAGER_ZCOPY) {
        let r = fx.ep(0).tag_eager_zcopy(1, 0, &iov, CompletionId(0));
        expect_support(false, "tag_eager_zcopy", r);
    }
    if !f.contains(IfaceFlags::TAG_RNDV_ZCOPY) {
        let r = fx.ep(0).tag_rndv_zcopy(1, b"h", &iov, CompletionId(0));
        expect_support(false, "tag_rndv_zcopy", r);
        expect_support(
            false,
            "tag_rndv_request",
            fx.ep(0).tag_rndv_request(1, b"h"),
        );
        expect_support(false, "tag_rndv_cancel", fx.ep(0).tag_rndv_cancel(0));
    }
    if !f.intersects(tag_flags) {
        let r = fx.iface(1).tag_recv_zcopy(1, !0, &iov, TagRecvId(0));
        expect_support(false, "tag_recv_zcopy", r);
        expect_support(
            false,
            "tag_recv_cancel",
            fx.iface(1).tag_recv_cancel(TagRecvId(0), true),
        );
    }
}

fn check_am(got: &(u8, Vec<u8>), id: u8, want: &[u8], what: &str) {
    assert_eq!(got.0, id, "{what}: active message id");
    assert_eq!(got.1.len(), want.len(), "{what}: length");
    assert!(got.1 == want, "{what}: data differs");
}

/// am_short with payloads of 0, 1 and the largest size, then one byte too many.
pub fn am_short_sizes<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.flags.contains(IfaceFlags::AM_SHORT) {
        skip!("no AM_SHORT");
    }
    let max = a.am.max_short;
    assert!(max >= 8, "am.max_short {max} cannot hold the 8-byte header");
    let mut rec = Recorder::new();
    let sizes = [0, 1, max - 8];
    for (i, &n) in sizes.iter().enumerate() {
        let p = pattern(i as u64, n);
        run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).am_short(5, 0xabc0 + i as u64, &p)
        })
        .unwrap_or_else(|e| panic!("am_short of {n}+8 bytes: {e}"));
    }
    let too_long = pattern(9, max - 7);
    let r = fx.ep(0).am_short(5, 1, &too_long);
    assert!(is_too_long(&r), "am_short of max_short+1 bytes gave {r:?}");
    wait_ams(&mut fx, &mut rec, sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let mut want = (0xabc0 + i as u64).to_le_bytes().to_vec();
        want.extend_from_slice(&pattern(i as u64, n));
        check_am(&rec.ams[i], 5, &want, &format!("am_short #{i}"));
    }
    for _ in 0..10 {
        fx.progress_all(&mut rec);
    }
    assert_eq!(
        rec.ams.len(),
        sizes.len(),
        "a refused message was delivered"
    );
}

/// am_short_iov with totals of 0, 1, max_short (split over pieces) and max_short+1.
pub fn am_short_iov_sizes<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.flags.contains(IfaceFlags::AM_SHORT) {
        skip!("no AM_SHORT");
    }
    let max = a.am.max_short;
    let pieces = a.am.max_iov.clamp(1, 3);
    let mut rec = Recorder::new();
    let sizes = [0, 1, max];
    for (i, &n) in sizes.iter().enumerate() {
        let p = pattern(100 + i as u64, n);
        let chunk = n.div_ceil(pieces).max(1);
        let parts: Vec<&[u8]> = p.chunks(chunk).collect();
        run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).am_short_iov(6, &parts)
        })
        .unwrap_or_else(|e| panic!("am_short_iov of {n} bytes: {e}"));
    }
    let big = pattern(1, max + 1);
    let r = fx.ep(0).am_short_iov(6, &[&big]);
    assert!(
        is_too_long(&r),
        "am_short_iov of max_short+1 bytes gave {r:?}"
    );
    wait_ams(&mut fx, &mut rec, sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        check_am(&rec.ams[i], 6, &pattern(100 + i as u64, n), "am_short_iov");
    }
}

/// am_bcopy of 0, 1 and max_bcopy bytes; a pack claiming max_bcopy+1 bytes fails and sends
/// nothing.
pub fn am_bcopy_sizes<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.flags.contains(IfaceFlags::AM_BCOPY) {
        skip!("no AM_BCOPY");
    }
    let max = a.am.max_bcopy;
    let mut rec = Recorder::new();
    let sizes = [0, 1, max];
    for (i, &n) in sizes.iter().enumerate() {
        let p = pattern(200 + i as u64, n);
        let got = run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).am_bcopy(7, |buf| {
                assert!(
                    buf.len() >= max,
                    "bcopy buffer of {} < max_bcopy",
                    buf.len()
                );
                buf[..n].copy_from_slice(&p);
                n
            })
        })
        .unwrap_or_else(|e| panic!("am_bcopy of {n} bytes: {e}"));
        assert_eq!(got, n as u64, "am_bcopy gives the packed length");
    }
    let r = run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
        fx.ep(0).am_bcopy(7, |_| max + 1)
    });
    assert!(r.is_err(), "am_bcopy packing max_bcopy+1 bytes gave {r:?}");
    // The transport still works after the refusal, and nothing of it arrives.
    run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
        fx.ep(0).am_bcopy(7, |buf| {
            buf[0] = 0xee;
            1
        })
    })
    .expect("am_bcopy after a refused one");
    wait_ams(&mut fx, &mut rec, sizes.len() + 1);
    for (i, &n) in sizes.iter().enumerate() {
        check_am(&rec.ams[i], 7, &pattern(200 + i as u64, n), "am_bcopy");
    }
    check_am(&rec.ams[sizes.len()], 7, &[0xee], "am_bcopy after refusal");
}

/// am_zcopy with payloads of 0, 1 and max_zcopy bytes (the largest split over max_iov pieces),
/// headers up to max_hdr; max_zcopy+1, max_hdr+1 and max_iov+1 pieces are refused.
pub fn am_zcopy_sizes<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.flags.contains(IfaceFlags::AM_ZCOPY) {
        skip!("no AM_ZCOPY");
    }
    let max = a.am.max_zcopy.min(CAP);
    let Some(mem) = local_mem(&fx, max + 1) else {
        skip!("the md gives no memory for zcopy")
    };
    let data = pattern(300, max + 1);
    mem.write(0, &data);
    let mut rec = Recorder::new();
    let hdr_max = pattern(301, a.am.max_hdr);
    let cases: Vec<(usize, usize)> = vec![(0, 0), (1, a.am.max_hdr), (max, a.am.max_hdr.min(8))];
    for (i, &(n, h)) in cases.iter().enumerate() {
        let pieces = if n == max {
            a.am.max_iov.clamp(1, 4)
        } else {
            1
        };
        let chunk = n.div_ceil(pieces).max(1);
        let iov: Vec<Iov<'_>> = (0..n)
            .step_by(chunk)
            .map(|off| Iov::new(&mem.memh, off, chunk.min(n - off)).expect("iov"))
            .collect();
        let comp = 10 + i as u64;
        run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .am_zcopy(8, &hdr_max[..h], &iov, CompletionId(comp))
        })
        .unwrap_or_else(|e| panic!("am_zcopy of {h}+{n} bytes: {e}"));
    }
    if a.am.max_zcopy <= CAP {
        let iov = [Iov::new(&mem.memh, 0, max + 1).expect("iov")];
        let r = fx.ep(0).am_zcopy(8, &[], &iov, CompletionId(90));
        assert!(is_too_long(&r), "am_zcopy of max_zcopy+1 bytes gave {r:?}");
    }
    let long_hdr = pattern(302, a.am.max_hdr + 1);
    let iov1 = [Iov::new(&mem.memh, 0, 1).expect("iov")];
    let r = fx.ep(0).am_zcopy(8, &long_hdr, &iov1, CompletionId(91));
    assert!(
        is_too_long(&r),
        "am_zcopy with a max_hdr+1 header gave {r:?}"
    );
    if a.am.max_iov < max {
        let iov: Vec<Iov<'_>> = (0..a.am.max_iov + 1)
            .map(|off| Iov::new(&mem.memh, off, 1).expect("iov"))
            .collect();
        let r = fx.ep(0).am_zcopy(8, &[], &iov, CompletionId(92));
        assert!(r.is_err(), "am_zcopy with max_iov+1 pieces gave {r:?}");
    }
    wait_ams(&mut fx, &mut rec, cases.len());
    for (i, &(n, h)) in cases.iter().enumerate() {
        let mut want = hdr_max[..h].to_vec();
        want.extend_from_slice(&data[..n]);
        check_am(&rec.ams[i], 8, &want, &format!("am_zcopy {h}+{n}"));
    }
}

/// Active-message ids 32 and above are refused by every AM operation, and nothing arrives.
pub fn am_id_out_of_range<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    let f = a.flags;
    if !f.intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY | IfaceFlags::AM_ZCOPY) {
        skip!("no active messages");
    }
    let mem = local_mem(&fx, 8);
    for id in [AM_ID_MAX, AM_ID_MAX + 1, 255] {
        let ep = fx.ep(0);
        if f.contains(IfaceFlags::AM_SHORT) {
            assert!(matches!(
                ep.am_short(id, 0, b"x"),
                Err(Error::InvalidParam(_))
            ));
            assert!(matches!(
                ep.am_short_iov(id, &[b"x"]),
                Err(Error::InvalidParam(_))
            ));
        }
        if f.contains(IfaceFlags::AM_BCOPY) {
            let r = ep.am_bcopy(id, |_| 0);
            assert!(
                matches!(r, Err(Error::InvalidParam(_))),
                "am_bcopy id {id}: {r:?}"
            );
        }
        if let (true, Some(m)) = (f.contains(IfaceFlags::AM_ZCOPY), &mem) {
            let iov = [Iov::whole(&m.memh)];
            let r = ep.am_zcopy(id, &[], &iov, CompletionId(0));
            assert!(
                matches!(r, Err(Error::InvalidParam(_))),
                "am_zcopy id {id}: {r:?}"
            );
        }
    }
    // A valid marker sent after them is the first (and only) message to arrive.
    let mut rec = Recorder::new();
    let marker_id = AM_ID_MAX - 1;
    if f.contains(IfaceFlags::AM_SHORT) {
        run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).am_short(marker_id, 0, &[])
        })
        .expect("marker");
    } else if f.contains(IfaceFlags::AM_BCOPY) {
        run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).am_bcopy(marker_id, |_| 0)
        })
        .expect("marker");
    } else if let Some(m) = &mem {
        let iov = [Iov::whole(&m.memh)];
        run_op(&mut fx, &mut rec, CompletionId(1), |fx| {
            fx.ep(0).am_zcopy(marker_id, &[], &iov, CompletionId(1))
        })
        .expect("marker");
    } else {
        skip!("no way to send a marker");
    }
    wait_ams(&mut fx, &mut rec, 1);
    for _ in 0..10 {
        fx.progress_all(&mut rec);
    }
    assert_eq!(rec.ams.len(), 1, "a message with a bad id was delivered");
    assert_eq!(rec.ams[0].0, marker_id);
}

/// Sends sequence number `seq` as an 8-byte active message with id 9.
fn send_seq<E: Endpoint>(ep: &mut E, attr: &IfaceAttr, seq: u64) -> Result<Outcome> {
    if attr.flags.contains(IfaceFlags::AM_SHORT) {
        ep.am_short(9, seq, &[])
    } else {
        ep.am_bcopy(9, |b| {
            b[..8].copy_from_slice(&seq.to_le_bytes());
            8
        })
        .map(|o| o.unit())
    }
}

fn seq_of(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[..8]);
    u64::from_le_bytes(b)
}

/// Back-pressure: send until `NoResource`, queue a pending request, progress until it is
/// dispatched, resume; every message arrives exactly once, in order.
pub fn back_pressure<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.flags.contains(IfaceFlags::PENDING) {
        skip!("no PENDING");
    }
    if !a
        .flags
        .intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY)
    {
        skip!("no AM_SHORT or AM_BCOPY");
    }
    const LIMIT: u64 = 1 << 20;
    let mut rec = Recorder::new();
    let ep_id = fx.ep(0).id();
    let mut seq = 0u64;
    let start = Instant::now();
    let mut queued = false;
    while seq < LIMIT && !queued {
        match send_seq(fx.ep(0), &a, seq).expect("send") {
            Outcome::Done(()) => seq += 1,
            Outcome::InProgress => panic!("an active message send gave InProgress"),
            Outcome::NoResource => match fx.ep(0).pending_add(PendingId(777)) {
                Ok(()) => queued = true,
                // Resources came back in between (asynchronous transports): keep sending.
                Err(Error::Busy(_)) => {}
                Err(e) => panic!("pending_add after NoResource: {e}"),
            },
        }
        assert!(start.elapsed() < WATCHDOG, "watchdog: filling the queue");
    }
    if !queued {
        eprintln!("conformance: {LIMIT} sends never ran out of resources; pending not tested");
    } else {
        assert!(seq > 0, "the very first send got NoResource");
        progress_until(&mut fx, &mut rec, "the pending request's dispatch", |r| {
            !r.pending.is_empty()
        });
        assert_eq!(
            rec.pending,
            vec![(ep_id, PendingId(777))],
            "exactly our request, once"
        );
    }
    // Resume: 16 more, retrying on NoResource.
    let end = seq + 16;
    while seq < end {
        run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            send_seq(fx.ep(0), &a, seq)
        })
        .expect("resume send");
        seq += 1;
    }
    wait_ams(&mut fx, &mut rec, seq as usize);
    for _ in 0..10 {
        fx.progress_all(&mut rec);
    }
    assert_eq!(rec.ams.len() as u64, seq, "every message exactly once");
    for (i, (id, data)) in rec.ams.iter().enumerate() {
        assert_eq!(*id, 9);
        assert_eq!(seq_of(data), i as u64, "message order");
    }
    assert_eq!(
        rec.pending.len(),
        queued as usize,
        "pending dispatched once"
    );
}

/// Endpoint and interface flush complete, and after them puts are visible.
pub fn flush_completes<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    let mut rec = Recorder::new();
    let mut sent = 0;
    if a.flags
        .intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY)
    {
        for s in 0..8 {
            run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                send_seq(fx.ep(0), &a, s)
            })
            .expect("send");
            sent += 1;
        }
    }
    let rm = remote_mem(&fx, 64);
    let can_put = a.flags.contains(IfaceFlags::PUT_SHORT) && rm.is_some();
    if let (true, Some(rm)) = (can_put, &rm) {
        run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).put_short(b"flushed!", rm.base() + 8, &rm.rkey)
        })
        .expect("put_short");
    }
    run_op(&mut fx, &mut rec, CompletionId(50), |fx| {
        fx.ep(0).flush(CompletionId(50))
    })
    .expect("ep flush");
    if let (true, Some(rm)) = (can_put, &rm) {
        assert_eq!(rm.mem.read(8, 8), b"flushed!", "put visible after ep flush");
    }
    run_op(&mut fx, &mut rec, CompletionId(51), |fx| {
        fx.iface(0).flush(CompletionId(51))
    })
    .expect("iface flush");
    run_op(&mut fx, &mut rec, CompletionId(52), |fx| {
        fx.ep(1).flush(CompletionId(52))
    })
    .expect("idle ep flush");
    run_op(&mut fx, &mut rec, CompletionId(53), |fx| {
        fx.iface(1).flush(CompletionId(53))
    })
    .expect("idle iface flush");
    fx.ep(0).fence().expect("ep fence");
    fx.iface(0).fence().expect("iface fence");
    wait_ams(&mut fx, &mut rec, sent);
}

/// Many to one: endpoints of several interfaces (and several endpoints of one interface) send
/// interleaved to interface 1; each sender's messages arrive there exactly once, in order.
pub fn many_to_one<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a
        .flags
        .intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY)
    {
        skip!("no AM_SHORT or AM_BCOPY");
    }
    let mut eps = vec![fx.connect(0, 1).expect("second endpoint 0->1")];
    for _ in 0..2 {
        match fx.add_iface() {
            Ok(i) => eps.push(fx.connect(i, 1).expect("endpoint from an added interface")),
            Err(e) => eprintln!("conformance: many_to_one with fewer interfaces: {e}"),
        }
    }
    if let Ok(ep) = fx.connect(1, 1) {
        eps.push(ep); // loopback into the receiver, where the transport allows it
    }
    const PER: u64 = 40;
    let senders = eps.len() as u64 + 1;
    let mut rec = Recorder::new();
    for seq in 0..PER {
        for s in 0..senders {
            let v = (s << 32) | seq;
            run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                if s == 0 {
                    send_seq(fx.ep(0), &a, v)
                } else {
                    send_seq(&mut eps[s as usize - 1], &a, v)
                }
            })
            .expect("send");
        }
    }
    let total = (senders * PER) as usize;
    // Receive on interface 1 only: nothing may arrive anywhere else.
    let mut other = Recorder::new();
    let start = Instant::now();
    while rec.ams.len() < total {
        fx.progress(1, &mut rec);
        for i in (0..fx.num_ifaces()).filter(|&i| i != 1) {
            fx.progress(i, &mut other);
        }
        assert!(start.elapsed() < WATCHDOG, "watchdog: many_to_one receive");
    }
    assert!(
        other.ams.is_empty(),
        "messages arrived at the wrong interface"
    );
    assert_eq!(rec.ams.len(), total);
    let mut next = vec![0u64; senders as usize];
    for (_, data) in &rec.ams {
        let v = seq_of(data);
        let (s, seq) = ((v >> 32) as usize, v & 0xffff_ffff);
        assert!(s < senders as usize, "unknown sender {s}");
        assert_eq!(seq, next[s], "sender {s}: order");
        next[s] += 1;
    }
    assert!(next.iter().all(|&n| n == PER));
}

fn rma_setup<F: Fixture>(fx: &mut F, len: usize) -> Option<RemoteMem> {
    let rm = remote_mem(fx, len);
    if rm.is_none() {
        eprintln!("conformance: skipped: the md can neither allocate nor register memory");
    }
    rm
}

/// Sizes to test for a limit: 0, 1 and the limit (capped), and whether limit+1 is testable.
fn rma_sizes(max: usize) -> ([usize; 3], bool) {
    ([0, 1, max.min(CAP)], max < CAP)
}

/// put_short and get_short of 0, 1 and the largest size, data verified; one more is refused.
pub fn put_get_short<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    let (put, get) = (
        a.flags.contains(IfaceFlags::PUT_SHORT),
        a.flags.contains(IfaceFlags::GET_SHORT),
    );
    if !put && !get {
        skip!("no PUT_SHORT or GET_SHORT");
    }
    let len = a.put.max_short.max(a.get.max_short).min(CAP) + 16;
    let Some(rm) = rma_setup(&mut fx, len) else {
        return;
    };
    let mut rec = Recorder::new();
    if put {
        let (sizes, plus1) = rma_sizes(a.put.max_short);
        for (i, &n) in sizes.iter().enumerate() {
            let p = pattern(400 + i as u64, n);
            run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).put_short(&p, rm.base() + 8, &rm.rkey)
            })
            .unwrap_or_else(|e| panic!("put_short of {n} bytes: {e}"));
            run_op(&mut fx, &mut rec, CompletionId(1), |fx| {
                fx.ep(0).flush(CompletionId(1))
            })
            .expect("flush");
            assert!(
                rm.mem.read(8, n) == p,
                "put_short of {n} bytes: data differs"
            );
        }
        if plus1 {
            let p = vec![1u8; a.put.max_short + 1];
            let r = fx.ep(0).put_short(&p, rm.base(), &rm.rkey);
            assert!(is_too_long(&r), "put_short of max+1 bytes gave {r:?}");
        }
    }
    if get {
        let (sizes, plus1) = rma_sizes(a.get.max_short);
        for (i, &n) in sizes.iter().enumerate() {
            let p = pattern(410 + i as u64, n);
            rm.mem.write(4, &p);
            let mut buf = vec![0u8; n];
            run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).get_short(&mut buf, rm.base() + 4, &rm.rkey)
            })
            .unwrap_or_else(|e| panic!("get_short of {n} bytes: {e}"));
            assert!(buf == p, "get_short of {n} bytes: data differs");
        }
        if plus1 {
            let mut buf = vec![0u8; a.get.max_short + 1];
            let r = fx.ep(0).get_short(&mut buf, rm.base(), &rm.rkey);
            assert!(is_too_long(&r), "get_short of max+1 bytes gave {r:?}");
        }
    }
}

/// put_bcopy and get_bcopy of 0, 1 and the largest size, data verified; one more is refused.
pub fn put_get_bcopy<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    let (put, get) = (
        a.flags.contains(IfaceFlags::PUT_BCOPY),
        a.flags.contains(IfaceFlags::GET_BCOPY),
    );
    if !put && !get {
        skip!("no PUT_BCOPY or GET_BCOPY");
    }
    let len = a.put.max_bcopy.max(a.get.max_bcopy).min(CAP) + 16;
    let Some(rm) = rma_setup(&mut fx, len) else {
        return;
    };
    let mut rec = Recorder::new();
    if put {
        let max = a.put.max_bcopy;
        let (sizes, plus1) = rma_sizes(max);
        for (i, &n) in sizes.iter().enumerate() {
            let p = pattern(500 + i as u64, n);
            let got = run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).put_bcopy(
                    |b| {
                        assert!(b.len() >= n.min(max), "put_bcopy buffer too small");
                        b[..n].copy_from_slice(&p);
                        n
                    },
                    rm.base() + 8,
                    &rm.rkey,
                )
            })
            .unwrap_or_else(|e| panic!("put_bcopy of {n} bytes: {e}"));
            assert_eq!(got, n as u64);
            run_op(&mut fx, &mut rec, CompletionId(1), |fx| {
                fx.ep(0).flush(CompletionId(1))
            })
            .expect("flush");
            assert!(
                rm.mem.read(8, n) == p,
                "put_bcopy of {n} bytes: data differs"
            );
        }
        if plus1 {
            let r = run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).put_bcopy(|_| max + 1, rm.base(), &rm.rkey)
            });
            assert!(r.is_err(), "put_bcopy packing max+1 bytes gave {r:?}");
        }
    }
    if get {
        let max = a.get.max_bcopy;
        let (sizes, plus1) = rma_sizes(max);
        for (i, &n) in sizes.iter().enumerate() {
            let p = pattern(510 + i as u64, n);
            rm.mem.write(4, &p);
            let mut got: Option<Vec<u8>> = None;
            let comp = 600 + i as u64;
            run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .get_bcopy(n, rm.base() + 4, &rm.rkey, CompletionId(comp), &mut |d| {
                        got = Some(d.to_vec())
                    })
            })
            .unwrap_or_else(|e| panic!("get_bcopy of {n} bytes: {e}"));
            let data = got.or_else(|| {
                let i = rec
                    .get_data
                    .iter()
                    .position(|(c, _)| *c == CompletionId(comp))?;
                Some(rec.get_data.remove(i).1)
            });
            let data = data.expect("get_bcopy delivered no data");
            assert!(data == p, "get_bcopy of {n} bytes: data differs");
        }
        if plus1 {
            let r = fx
                .ep(0)
                .get_bcopy(max + 1, rm.base(), &rm.rkey, CompletionId(0), &mut |_| {});
            assert!(is_too_long(&r), "get_bcopy of max+1 bytes gave {r:?}");
        }
    }
}

/// put_zcopy and get_zcopy of 0, 1 and the largest size (split over pieces), data verified;
/// one more is refused.
pub fn put_get_zcopy<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    let (put, get) = (
        a.flags.contains(IfaceFlags::PUT_ZCOPY),
        a.flags.contains(IfaceFlags::GET_ZCOPY),
    );
    if !put && !get {
        skip!("no PUT_ZCOPY or GET_ZCOPY");
    }
    let len = a.put.max_zcopy.max(a.get.max_zcopy).min(CAP) + 16;
    let Some(rm) = rma_setup(&mut fx, len) else {
        return;
    };
    let Some(local) = local_mem(&fx, len) else {
        skip!("the md gives no local memory for zcopy")
    };
    let mut rec = Recorder::new();
    let iovs = |n: usize, max_iov: usize| -> Vec<Iov<'_>> {
        let pieces = max_iov.clamp(1, 3);
        let chunk = n.div_ceil(pieces).max(1);
        (0..n)
            .step_by(chunk)
            .map(|off| Iov::new(&local.memh, off, chunk.min(n - off)).expect("iov"))
            .collect()
    };
    if put {
        let (sizes, plus1) = rma_sizes(a.put.max_zcopy);
        for (i, &n) in sizes.iter().enumerate() {
            let p = pattern(700 + i as u64, n);
            local.write(0, &p);
            let iov = iovs(n, a.put.max_iov);
            let comp = 700 + i as u64;
            run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .put_zcopy(&iov, rm.base() + 8, &rm.rkey, CompletionId(comp))
            })
            .unwrap_or_else(|e| panic!("put_zcopy of {n} bytes: {e}"));
            run_op(&mut fx, &mut rec, CompletionId(1), |fx| {
                fx.ep(0).flush(CompletionId(1))
            })
            .expect("flush");
            assert!(
                rm.mem.read(8, n) == p,
                "put_zcopy of {n} bytes: data differs"
            );
        }
        if plus1 {
            let iov = [Iov::new(&local.memh, 0, a.put.max_zcopy + 1).expect("iov")];
            let r = fx
                .ep(0)
                .put_zcopy(&iov, rm.base(), &rm.rkey, CompletionId(0));
            assert!(is_too_long(&r), "put_zcopy of max+1 bytes gave {r:?}");
        }
    }
    if get {
        let (sizes, plus1) = rma_sizes(a.get.max_zcopy);
        for (i, &n) in sizes.iter().enumerate() {
            let p = pattern(710 + i as u64, n);
            rm.mem.write(4, &p);
            local.write(0, &vec![0u8; n]);
            let iov = iovs(n, a.get.max_iov);
            let comp = 710 + i as u64;
            run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .get_zcopy(&iov, rm.base() + 4, &rm.rkey, CompletionId(comp))
            })
            .unwrap_or_else(|e| panic!("get_zcopy of {n} bytes: {e}"));
            assert!(
                local.read(0, n) == p,
                "get_zcopy of {n} bytes: data differs"
            );
        }
        if plus1 {
            let iov = [Iov::new(&local.memh, 0, a.get.max_zcopy + 1).expect("iov")];
            let r = fx
                .ep(0)
                .get_zcopy(&iov, rm.base(), &rm.rkey, CompletionId(0));
            assert!(is_too_long(&r), "get_zcopy of max+1 bytes gave {r:?}");
        }
    }
}

/// Put, get and atomics outside the remote region (past its end, before its start) give
/// `RemoteAccess` (at once or in the completion) and change nothing.
pub fn rma_out_of_range<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    let f = a.flags;
    let Some(rm) = rma_setup(&mut fx, 64) else {
        return;
    };
    let local = local_mem(&fx, 16);
    let mut rec = Recorder::new();
    let (rk, base) = (&rm.rkey, rm.base());
    let targets = [base + 60, base + 64, base.wrapping_sub(8), base + (1 << 40)];
    let expect_ra = |r: Result<u64>, what: &str| {
        assert!(
            matches!(r, Err(Error::RemoteAccess(_))),
            "{what} out of range gave {r:?} instead of RemoteAccess"
        );
    };
    let mut comp = 1000;
    for &t in &targets {
        if f.contains(IfaceFlags::PUT_SHORT) {
            expect_ra(
                run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                    fx.ep(0).put_short(&[9; 8], t, rk)
                }),
                "put_short",
            );
        }
        if f.contains(IfaceFlags::PUT_BCOPY) {
            let r = run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).put_bcopy(
                    |b| {
                        // Write what fits: the buffer's size is the transport's business.
                        let n = b.len().min(8);
                        b[..n].fill(9);
                        8
                    },
                    t,
                    rk,
                )
            });
            expect_ra(r, "put_bcopy");
        }
        if f.contains(IfaceFlags::GET_SHORT) {
            let mut b = [0u8; 8];
            expect_ra(
                run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                    fx.ep(0).get_short(&mut b, t, rk)
                }),
                "get_short",
            );
        }
        if f.contains(IfaceFlags::GET_BCOPY) {
            comp += 1;
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .get_bcopy(8, t, rk, CompletionId(comp), &mut |_| {})
            });
            expect_ra(r, "get_bcopy");
        }
        if let Some(l) = &local {
            let iov = [Iov::new(&l.memh, 0, 8).expect("iov")];
            if f.contains(IfaceFlags::PUT_ZCOPY) {
                comp += 1;
                let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                    fx.ep(0).put_zcopy(&iov, t, rk, CompletionId(comp))
                });
                expect_ra(r, "put_zcopy");
            }
            if f.contains(IfaceFlags::GET_ZCOPY) {
                comp += 1;
                let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                    fx.ep(0).get_zcopy(&iov, t, rk, CompletionId(comp))
                });
                expect_ra(r, "get_zcopy");
            }
        }
        // Atomics on an aligned address outside the region.
        let t8 = t & !7;
        if t8 >= base && t8 + 8 <= base + 64 {
            continue;
        }
        let at = a.atomics;
        if at.op64.contains(AtomicOps::ADD) {
            let r = run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).atomic64_post(AtomicOp::Add, 1, t8, rk)
            });
            expect_ra(r, "atomic64_post");
        }
        if at.op32.contains(AtomicOps::ADD) {
            let r = run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).atomic32_post(AtomicOp::Add, 1, t8, rk)
            });
            expect_ra(r, "atomic32_post");
        }
        if at.fop64.contains(AtomicOps::ADD) {
            comp += 1;
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .atomic64_fetch(AtomicOp::Add, 1, t8, rk, CompletionId(comp))
            });
            expect_ra(r, "atomic64_fetch");
        }
        if at.fop32.contains(AtomicOps::SWAP) {
            comp += 1;
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .atomic32_fetch(AtomicOp::Swap, 1, t8, rk, CompletionId(comp))
            });
            expect_ra(r, "atomic32_fetch");
        }
        if at.fop64.contains(AtomicOps::CSWAP) {
            comp += 1;
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0).atomic_cswap64(0, 1, t8, rk, CompletionId(comp))
            });
            expect_ra(r, "atomic_cswap64");
        }
        if at.fop32.contains(AtomicOps::CSWAP) {
            comp += 1;
            let r = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0).atomic_cswap32(0, 1, t8, rk, CompletionId(comp))
            });
            expect_ra(r, "atomic_cswap32");
        }
    }
    let _ = run_op(&mut fx, &mut rec, CompletionId(2), |fx| {
        fx.ep(0).flush(CompletionId(2))
    });
    assert!(
        rm.mem.read(0, 64).iter().all(|&b| b == 0),
        "a refused access changed the region"
    );
}

/// Truncated and corrupt packed remote keys give an error (never a panic); the intact key
/// still unpacks.
pub fn rkey_corrupt<F: Fixture>() {
    let Some(fx) = open::<F>() else { return };
    let Some(rm) = remote_mem(&fx, 64) else {
        skip!("the md can neither allocate nor register memory")
    };
    let packed = &rm.packed;
    let md = fx.md(0);
    for n in 0..packed.len() {
        assert!(
            md.rkey_unpack(&packed[..n]).is_err(),
            "a key truncated to {n} of {} bytes was accepted",
            packed.len()
        );
    }
    let inverted: Vec<u8> = packed.iter().map(|b| !b).collect();
    assert!(
        md.rkey_unpack(&inverted).is_err(),
        "an inverted key was accepted"
    );
    let zeros = vec![0u8; packed.len()];
    assert!(
        md.rkey_unpack(&zeros).is_err(),
        "an all-zero key was accepted"
    );
    let rk = md.rkey_unpack(packed).expect("the intact key");
    assert_eq!(rk.remote_base, rm.base());
    assert_eq!(rk.len, 64);
}

/// Every advertised 32-bit atomic, results and memory checked against a reference model.
pub fn atomics_32<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let at = attr(&mut fx).atomics;
    if at.op32.is_empty() && at.fop32.is_empty() {
        skip!("no 32-bit atomics");
    }
    let Some(rm) = rma_setup(&mut fx, 64) else {
        return;
    };
    let mut rec = Recorder::new();
    let (off, base) = (8usize, rm.base());
    let addr = base + off as u64;
    rm.mem.write(off - 4, &0xdead_beef_u32.to_le_bytes());
    rm.mem.write(off + 4, &0xfeed_face_u32.to_le_bytes());
    let read = |rm: &RemoteMem| -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&rm.mem.read(off, 4));
        u32::from_le_bytes(b)
    };
    let init = 0xffff_fff0u32;
    let ops = [
        (AtomicOp::Add, 0x20u32),
        (AtomicOp::And, 0x0f0f_0f0f),
        (AtomicOp::Or, 0x1234_0001),
        (AtomicOp::Xor, 0xa5a5_a5a5),
        (AtomicOp::Swap, 0x0bad_cafe),
    ];
    let mut comp = 2000;
    for (op, v) in ops {
        if at.op32.contains(op.flag()) && op != AtomicOp::Swap {
            rm.mem.write(off, &init.to_le_bytes());
            run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).atomic32_post(op, v, addr, &rm.rkey)
            })
            .unwrap_or_else(|e| panic!("atomic32_post {op:?}: {e}"));
            run_op(&mut fx, &mut rec, CompletionId(1), |fx| {
                fx.ep(0).flush(CompletionId(1))
            })
            .expect("flush");
            assert_eq!(read(&rm), op.apply32(init, v), "atomic32_post {op:?}");
        }
        if at.fop32.contains(op.flag()) {
            rm.mem.write(off, &init.to_le_bytes());
            comp += 1;
            let old = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .atomic32_fetch(op, v, addr, &rm.rkey, CompletionId(comp))
            })
            .unwrap_or_else(|e| panic!("atomic32_fetch {op:?}: {e}"));
            assert_eq!(old, init as u64, "atomic32_fetch {op:?} result");
            assert_eq!(read(&rm), op.apply32(init, v), "atomic32_fetch {op:?}");
        }
    }
    if at.fop32.contains(AtomicOps::CSWAP) {
        rm.mem.write(off, &7u32.to_le_bytes());
        comp += 1;
        let old = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .atomic_cswap32(7, 0x8000_0001, addr, &rm.rkey, CompletionId(comp))
        })
        .expect("cswap32");
        assert_eq!(old, 7);
        assert_eq!(
            read(&rm),
            0x8000_0001,
            "cswap32 with a matching compare swaps"
        );
        comp += 1;
        let old = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .atomic_cswap32(7, 3, addr, &rm.rkey, CompletionId(comp))
        })
        .expect("cswap32");
        assert_eq!(old, 0x8000_0001);
        assert_eq!(
            read(&rm),
            0x8000_0001,
            "cswap32 with a wrong compare changes nothing"
        );
    }
    assert_eq!(rm.mem.read(off - 4, 4), 0xdead_beef_u32.to_le_bytes());
    assert_eq!(rm.mem.read(off + 4, 4), 0xfeed_face_u32.to_le_bytes());
}

/// Every advertised 64-bit atomic, results and memory checked against a reference model.
pub fn atomics_64<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let at = attr(&mut fx).atomics;
    if at.op64.is_empty() && at.fop64.is_empty() {
        skip!("no 64-bit atomics");
    }
    let Some(rm) = rma_setup(&mut fx, 64) else {
        return;
    };
    let mut rec = Recorder::new();
    let (off, base) = (16usize, rm.base());
    let addr = base + off as u64;
    rm.mem
        .write(off - 8, &0xdead_beef_dead_beef_u64.to_le_bytes());
    rm.mem
        .write(off + 8, &0xfeed_face_feed_face_u64.to_le_bytes());
    let read = |rm: &RemoteMem| -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&rm.mem.read(off, 8));
        u64::from_le_bytes(b)
    };
    let init = 0xffff_ffff_ffff_fff0u64;
    let ops = [
        (AtomicOp::Add, 0x20u64),
        (AtomicOp::And, 0x0f0f_0f0f_f0f0_f0f0),
        (AtomicOp::Or, 0x1234_0000_0000_0001),
        (AtomicOp::Xor, 0xa5a5_a5a5_5a5a_5a5a),
        (AtomicOp::Swap, 0x0bad_cafe_0bad_f00d),
    ];
    let mut comp = 3000;
    for (op, v) in ops {
        if at.op64.contains(op.flag()) && op != AtomicOp::Swap {
            rm.mem.write(off, &init.to_le_bytes());
            run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
                fx.ep(0).atomic64_post(op, v, addr, &rm.rkey)
            })
            .unwrap_or_else(|e| panic!("atomic64_post {op:?}: {e}"));
            run_op(&mut fx, &mut rec, CompletionId(1), |fx| {
                fx.ep(0).flush(CompletionId(1))
            })
            .expect("flush");
            assert_eq!(read(&rm), op.apply64(init, v), "atomic64_post {op:?}");
        }
        if at.fop64.contains(op.flag()) {
            rm.mem.write(off, &init.to_le_bytes());
            comp += 1;
            let old = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
                fx.ep(0)
                    .atomic64_fetch(op, v, addr, &rm.rkey, CompletionId(comp))
            })
            .unwrap_or_else(|e| panic!("atomic64_fetch {op:?}: {e}"));
            assert_eq!(old, init, "atomic64_fetch {op:?} result");
            assert_eq!(read(&rm), op.apply64(init, v), "atomic64_fetch {op:?}");
        }
    }
    if at.fop64.contains(AtomicOps::CSWAP) {
        rm.mem.write(off, &7u64.to_le_bytes());
        comp += 1;
        let old = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .atomic_cswap64(7, 1 << 63, addr, &rm.rkey, CompletionId(comp))
        })
        .expect("cswap64");
        assert_eq!(old, 7);
        assert_eq!(read(&rm), 1 << 63, "cswap64 with a matching compare swaps");
        comp += 1;
        let old = run_op(&mut fx, &mut rec, CompletionId(comp), |fx| {
            fx.ep(0)
                .atomic_cswap64(8, 3, addr, &rm.rkey, CompletionId(comp))
        })
        .expect("cswap64");
        assert_eq!(old, 1 << 63);
        assert_eq!(
            read(&rm),
            1 << 63,
            "cswap64 with a wrong compare changes nothing"
        );
    }
    assert_eq!(
        rm.mem.read(off - 8, 8),
        0xdead_beef_dead_beef_u64.to_le_bytes()
    );
    assert_eq!(
        rm.mem.read(off + 8, 8),
        0xfeed_face_feed_face_u64.to_le_bytes()
    );
}

fn poll_readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return n == 1 && p.revents & libc::POLLIN != 0;
    }
}

/// Event fd: after arming interface 1 for receives, a message sent to it makes its fd readable.
pub fn event_fd_wakes_receiver<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.event_flags.contains(EventFlags::FD | EventFlags::RECV) {
        skip!("no event fd for receives");
    }
    if !a
        .flags
        .intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY)
    {
        skip!("no AM_SHORT or AM_BCOPY");
    }
    let mut rec = Recorder::new();
    // Warm up: make sure the connection is established and idle.
    run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
        send_seq(fx.ep(0), &a, 0)
    })
    .expect("warm-up send");
    wait_ams(&mut fx, &mut rec, 1);
    let fd = fx.iface(1).event_fd().expect("event fd");
    let start = Instant::now();
    loop {
        match fx.iface(1).event_arm(EventFlags::RECV) {
            Ok(()) => break,
            Err(Error::Busy(_)) => {
                fx.progress_all(&mut rec);
            }
            Err(e) => panic!("event_arm(RECV): {e}"),
        }
        assert!(start.elapsed() < WATCHDOG, "watchdog: event_arm stays Busy");
    }
    // Send, progressing only the sender if it needs resources.
    let mut tx = Recorder::new();
    loop {
        match send_seq(fx.ep(0), &a, 1).expect("send") {
            Outcome::Done(()) => break,
            Outcome::InProgress => panic!("an active message send gave InProgress"),
            Outcome::NoResource => {
                fx.progress(0, &mut tx);
            }
        }
        assert!(start.elapsed() < WATCHDOG, "watchdog: send after arm");
    }
    // Wait for the fd, progressing only the sender (a transport may need that to push data
    // out); the receiver is not progressed, so its armed state is left alone.
    while !poll_readable(fd, 10) {
        fx.progress(0, &mut tx);
        assert!(
            start.elapsed() < WATCHDOG,
            "watchdog: the receiver's event fd did not become readable"
        );
    }
    wait_ams(&mut fx, &mut rec, 2);
    assert_eq!(seq_of(&rec.ams[1].1), 1);
}
