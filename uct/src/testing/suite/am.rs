//! Active messages: sizes at the limits, ids, back-pressure with pending requests, flush, and
//! many senders to one receiver.

use super::*;

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

/// am_short2 with payloads of 0, 1, 8 and the largest size after the two header words, then
/// one byte too many: the receiver sees both words (little-endian) and then the payload.
pub fn am_short2_sizes<F: Fixture>() {
    let Some(mut fx) = open::<F>() else { return };
    let a = attr(&mut fx);
    if !a.flags.contains(IfaceFlags::AM_SHORT) {
        skip!("no AM_SHORT");
    }
    let max = a.am.max_short;
    if max < 16 {
        skip!("am.max_short below the two header words");
    }
    let mut rec = Recorder::new();
    let sizes = [0, 1, 8, max - 16];
    let words = |i: usize| {
        (
            0x1122_3344_5566_7700 + i as u64,
            0x8899_aabb_ccdd_ee00 + i as u64,
        )
    };
    for (i, &n) in sizes.iter().enumerate() {
        let p = pattern(200 + i as u64, n);
        let (h0, h1) = words(i);
        run_op(&mut fx, &mut rec, CompletionId(0), |fx| {
            fx.ep(0).am_short2(7, h0, h1, &p)
        })
        .unwrap_or_else(|e| panic!("am_short2 of 16+{n} bytes: {e}"));
    }
    let too_long = pattern(9, max - 15);
    let r = fx.ep(0).am_short2(7, 1, 2, &too_long);
    assert!(is_too_long(&r), "am_short2 of max_short+1 bytes gave {r:?}");
    wait_ams(&mut fx, &mut rec, sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let (h0, h1) = words(i);
        let mut want = h0.to_le_bytes().to_vec();
        want.extend_from_slice(&h1.to_le_bytes());
        want.extend_from_slice(&pattern(200 + i as u64, n));
        check_am(&rec.ams[i], 7, &want, &format!("am_short2 #{i}"));
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
pub(super) fn send_seq<E: Endpoint>(ep: &mut E, attr: &IfaceAttr, seq: u64) -> Result<Outcome> {
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

pub(super) fn seq_of(data: &[u8]) -> u64 {
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
