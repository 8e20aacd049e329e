//! Capabilities are promises: flags, limits, address lengths and the event fd agree, and
//! every operation without its flag says `Unsupported`.

use super::*;

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
