//! Round trips and truncated input for every ucp wire header.

use super::*;

fn roundtrip(id: u8, body: &[u8], expect: Msg<'_>) {
    assert_eq!(Msg::decode(id, body).unwrap(), expect);
}

#[test]
fn fixed_headers_round_trip_and_reject_truncation() {
    let e = EagerHdr { tag: 0xdead_beef };
    let mut b = e.encode().to_vec();
    b.extend_from_slice(b"xy");
    roundtrip(am_id::EAGER_ONLY, &b, Msg::Eager(e, b"xy"));

    let s = EagerSyncHdr { tag: 1, sreq: 2 };
    roundtrip(am_id::EAGER_SYNC_ONLY, &s.encode(), Msg::EagerSync(s, b""));

    let f = EagerFirstHdr {
        tag: 3,
        msg_id: 4,
        total_len: 5,
        sreq: NO_REQ,
    };
    let mut b = f.encode().to_vec();
    b.extend_from_slice(b"abc");
    roundtrip(am_id::EAGER_FIRST, &b, Msg::EagerFirst(f, b"abc"));
    b.extend_from_slice(b"def");
    assert!(
        Msg::decode(am_id::EAGER_FIRST, &b).is_err(),
        "over-long first"
    );

    let m = FragHdr { id: 9, offset: 77 };
    roundtrip(am_id::EAGER_MIDDLE, &m.encode(), Msg::EagerMiddle(m, b""));
    roundtrip(
        am_id::ATS,
        &ReqHdr { req: 11 }.encode(),
        Msg::Ats(ReqHdr { req: 11 }),
    );
    let u = UserAmHdr { id: 7, hdr_len: 2 };
    let mut b = u.encode().to_vec();
    b.extend_from_slice(b"hhdata");
    roundtrip(am_id::USER_AM, &b, Msg::UserAm(u, b"hh", b"data"));

    for (id, full) in [
        (am_id::EAGER_ONLY, e.encode().to_vec()),
        (am_id::EAGER_SYNC_ONLY, s.encode().to_vec()),
        (am_id::EAGER_FIRST, f.encode().to_vec()),
        (am_id::EAGER_MIDDLE, m.encode().to_vec()),
        (am_id::SYNC_ACK, ReqHdr { req: 1 }.encode().to_vec()),
        (am_id::USER_AM, u.encode().to_vec()),
    ] {
        for n in 0..full.len() {
            assert!(
                matches!(Msg::decode(id, &full[..n]), Err(Error::Wire(_))),
                "id {id} prefix {n}"
            );
        }
    }
}

#[test]
fn variable_headers_round_trip_and_reject_truncation() {
    let rts = RtsHdr {
        tag: 42,
        sreq: 7,
        len: 1 << 20,
        buf: RemoteBuf {
            addr: 0x1000,
            tl: "cma",
            rkey: &[1, 2, 3, 4],
        },
    };
    let mut b = Vec::new();
    rts.encode(&mut b);
    roundtrip(am_id::RTS, &b, Msg::Rts(rts));
    for n in 0..b.len() {
        assert!(Msg::decode(am_id::RTS, &b[..n]).is_err(), "rts prefix {n}");
    }
    b.push(0);
    assert!(Msg::decode(am_id::RTS, &b).is_err(), "rts trailing");

    let rtr = RtrHdr {
        sreq: 7,
        rreq: 8,
        mode: RtrMode::Put,
        buf: RemoteBuf {
            addr: 0x2000,
            tl: "self",
            rkey: &[5; 10],
        },
    };
    let mut b = Vec::new();
    rtr.encode(&mut b);
    roundtrip(am_id::RTR, &b, Msg::Rtr(rtr));
    for n in 0..b.len() {
        assert!(Msg::decode(am_id::RTR, &b[..n]).is_err(), "rtr prefix {n}");
    }
    b[16] = 9;
    assert!(Msg::decode(am_id::RTR, &b).is_err(), "bad mode");
}

#[test]
fn ep_addr_round_trip_and_rejects_bad_input() {
    for connected in [false, true] {
        let h = EpAddrHdr {
            connected,
            ep_addr: &[1, 2, 3, 4],
        };
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(v.len(), EpAddrHdr::LEN + 4);
        assert_eq!(EpAddrHdr::decode(&v).unwrap(), h);
        assert_eq!(Msg::decode(am_id::EP_ADDR, &v).unwrap(), Msg::EpAddr(h));
    }
    assert!(matches!(EpAddrHdr::decode(&[]), Err(Error::Wire(_))));
    assert!(matches!(EpAddrHdr::decode(&[1]), Err(Error::Wire(_))));
    assert!(matches!(EpAddrHdr::decode(&[2, 9]), Err(Error::Wire(_))));
}

/// The user active-message header is one word: id, two reserved zero bytes, header length;
/// a header with a reserved byte set is malformed, not read past.
#[test]
fn user_am_header_is_one_word_with_reserved_bytes_zero() {
    let u = UserAmHdr {
        id: 0x1234,
        hdr_len: 0x0506_0708,
    };
    assert_eq!(u.encode(), [0x34, 0x12, 0, 0, 0x08, 0x07, 0x06, 0x05]);
    assert_eq!(u.encode(), u.word().to_le_bytes());
    assert_eq!(UserAmHdr::decode(&u.encode()).expect("decode"), u);
    for at in [2, 3] {
        let mut b = u.encode();
        b[at] = 1;
        assert!(
            matches!(UserAmHdr::decode(&b), Err(Error::Wire(_))),
            "reserved byte {at}"
        );
        assert!(matches!(
            Msg::decode(am_id::USER_AM, &b),
            Err(Error::Wire(_))
        ));
    }
}

#[test]
fn am_rts_round_trip_and_truncation() {
    let u = UserAmHdr { id: 3, hdr_len: 4 };
    let rts = RtsHdr {
        tag: 0,
        sreq: 5,
        len: 1 << 20,
        buf: RemoteBuf {
            addr: 0x10,
            tl: "tcp",
            rkey: &[7, 7],
        },
    };
    let mut b = u.encode().to_vec();
    b.extend_from_slice(b"hdr!");
    rts.encode(&mut b);
    roundtrip(am_id::AM_RTS, &b, Msg::AmRts(u, b"hdr!", rts));
    for n in 0..b.len() {
        assert!(Msg::decode(am_id::AM_RTS, &b[..n]).is_err(), "prefix {n}");
    }
}

#[test]
fn atomic_headers_round_trip_and_validate() {
    let q = AtomicReqHdr {
        req: 1,
        op: 5,
        size: 8,
        addr: 0x1000,
        value: 2,
        compare: 3,
    };
    let (e, n) = q.encode();
    assert_eq!(n, AtomicReqHdr::LEN);
    roundtrip(am_id::ATOMIC_REQ, &e[..n], Msg::AtomicReq(q));
    // Any other operation leaves the compare value out (26 bytes).
    let add = AtomicReqHdr {
        op: 0,
        compare: 0,
        ..q
    };
    let (a, an) = add.encode();
    assert_eq!(an, AtomicReqHdr::LEN_NO_COMPARE);
    roundtrip(am_id::ATOMIC_REQ, &a[..an], Msg::AtomicReq(add));
    let r = AtomicRepHdr {
        req: 1,
        status: 0,
        value: 9,
    };
    roundtrip(am_id::ATOMIC_REP, &r.encode(), Msg::AtomicRep(r));
    // Every other length is refused: a cswap without its compare value, an add with one.
    for k in 0..e.len() {
        assert!(
            Msg::decode(am_id::ATOMIC_REQ, &e[..k]).is_err(),
            "cswap, {k} bytes"
        );
    }
    for k in (0..=a.len()).filter(|&k| k != an) {
        assert!(
            Msg::decode(am_id::ATOMIC_REQ, &a[..k]).is_err(),
            "add, {k} bytes"
        );
    }
    let mut bad = e;
    bad[9] = 3;
    assert!(Msg::decode(am_id::ATOMIC_REQ, &bad).is_err());
    let mut bad = e;
    bad[8] = 6;
    assert!(Msg::decode(am_id::ATOMIC_REQ, &bad).is_err());
}

#[test]
fn prefix_and_unknown_ids() {
    let mut b = 5u64.to_le_bytes().to_vec();
    b.push(1);
    assert_eq!(split_prefix(&b).unwrap(), (5, &[1u8][..]));
    assert!(split_prefix(&b[..7]).is_err());
    assert!(Msg::decode(200, &[]).is_err());
    assert!(Msg::decode(am_id::KEEPALIVE, &[1]).is_err());
    assert_eq!(Msg::decode(am_id::KEEPALIVE, &[]).unwrap(), Msg::Keepalive);
}

#[test]
fn am_lane_switch_has_no_body() {
    assert_eq!(
        Msg::decode(am_id::AM_LANE_SWITCH, &[]).unwrap(),
        Msg::AmLaneSwitch
    );
    assert!(matches!(
        Msg::decode(am_id::AM_LANE_SWITCH, &[0]),
        Err(Error::Wire(_))
    ));
}

#[test]
fn emulated_put_carries_its_address_and_at_least_one_byte() {
    let h = PutReqHdr { addr: 0x7f00_1234 };
    let mut b = h.encode().to_vec();
    b.extend_from_slice(b"payload");
    roundtrip(am_id::PUT_REQ, &b, Msg::PutReq(h, b"payload"));
    // An address alone, or less, is refused.
    for k in 0..=PutReqHdr::LEN {
        assert!(Msg::decode(am_id::PUT_REQ, &b[..k]).is_err(), "{k} bytes");
    }
}
