//! Remote memory access: put and get at the limits, out-of-range and corrupt remote keys, and
//! 32- and 64-bit atomics.

use super::*;

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
/// `RemoteAccess` (at once or in the completion) and change nothing, with one allowance: a
/// `put_bcopy` that starts inside the region and whose pack reports more bytes than the rest of
/// the region holds may have left the bytes it packed inside the region written (a transport
/// may pack in place, as an RDMA write past a region's end may leave its first packets
/// written); nothing before its start or outside the region changes.
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
            if t > base && t < base + 64 {
                let off = (t - base) as usize;
                let v = rm.mem.read(0, 64);
                assert!(
                    v[..off].iter().all(|&b| b == 0) && v[off..].iter().all(|&b| b == 0 || b == 9),
                    "a refused put_bcopy changed the region outside what it packed: {v:?}"
                );
                rm.mem.write(off, &vec![0; 64 - off]);
            }
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
