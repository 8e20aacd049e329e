//! Wire format tests: round trips, truncation, rejection of bad fields, reassembly.

use super::*;
use crate::ep::AtomicOp;
use proptest::prelude::*;

fn frame(kind: Kind, am_id: u8, sub: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = FrameHeader::new(kind, am_id, payload.len())
        .to_bytes()
        .to_vec();
    v.extend_from_slice(sub);
    v.extend_from_slice(payload);
    v
}

#[test]
fn header_round_trip_and_truncation() {
    let h = FrameHeader::new(Kind::Am, 7, 100);
    let b = h.to_bytes();
    assert_eq!(FrameHeader::decode(&b), Ok(h));
    for n in 0..FrameHeader::LEN {
        assert!(matches!(
            FrameHeader::decode(&b[..n]),
            Err(WireError::Truncated { .. })
        ));
    }
}

#[test]
fn am_fast_decode_agrees_with_the_decoder() {
    let ok = FrameHeader::new(Kind::Am, 7, 100).to_bytes();
    assert_eq!(
        FrameHeader::decode_am(&ok),
        Some(FrameHeader::decode(&ok).unwrap())
    );
    assert_eq!(FrameHeader::decode_am(&ok[..7]), None);
    // Everything the fast check declines is left to the decoder, which reads or rejects it.
    let mut cases = Vec::new();
    let mut flags = ok;
    flags[2] = 1;
    cases.push(flags);
    let mut id = ok;
    id[1] = crate::ep::AM_ID_MAX;
    cases.push(id);
    let mut big = ok;
    big[4..].copy_from_slice(&(MAX_AM_BODY as u32 + 1).to_le_bytes());
    cases.push(big);
    for b in &cases {
        assert_eq!(FrameHeader::decode_am(b), None);
        assert!(FrameHeader::decode(b).is_err());
    }
    let put = FrameHeader::new(Kind::Put, 0, 8).to_bytes();
    assert_eq!(FrameHeader::decode_am(&put), None);
    assert!(FrameHeader::decode(&put).is_ok());
    // The reassembler takes an Am frame whole, and waits for a partial one.
    let f = frame(Kind::Am, 3, &[], b"abcdefgh");
    let mut r = Reassembler::new();
    assert_eq!(r.next(&f[..f.len() - 1]), Ok((0, None)));
    assert_eq!(
        r.next(&f),
        Ok((
            f.len(),
            Some(RxEvent::Am {
                id: 3,
                data: b"abcdefgh"
            })
        ))
    );
    assert!(r.at_boundary());
}

#[test]
fn header_rejects_bad_fields() {
    let mut b = FrameHeader::new(Kind::Am, 1, 4).to_bytes();
    b[0] = 99;
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::BadField {
            field: "kind",
            value: 99,
            ..
        })
    ));
    let mut b = FrameHeader::new(Kind::Am, 1, 4).to_bytes();
    b[2] = 1;
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::BadField {
            field: "flags",
            value: 1,
            ..
        })
    ));
    let b = FrameHeader::new(Kind::Am, 32, 4).to_bytes();
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::BadField {
            field: "active message id",
            ..
        })
    ));
    let b = FrameHeader::new(Kind::Put, 3, 4).to_bytes();
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::BadField {
            field: "active message id",
            ..
        })
    ));
    let b = FrameHeader::new(Kind::Am, 0, MAX_AM_BODY + 1).to_bytes();
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::TooLong { .. })
    ));
    let b = FrameHeader::new(Kind::FlushReq, 0, 1).to_bytes();
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::BadLength { .. })
    ));
    let mut b = FrameHeader::new(Kind::Put, 0, 0).to_bytes();
    b[4..8].copy_from_slice(&3u32.to_le_bytes());
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::BadLength { .. })
    ));
}

/// Encodes `v` (`len` bytes), decodes it back, and checks that one byte less is `Truncated`.
fn check<T: PartialEq + std::fmt::Debug>(
    v: T,
    len: usize,
    enc: impl Fn(&T, &mut [u8]),
    dec: impl Fn(&[u8]) -> Result<T, WireError>,
) {
    let mut b = vec![0u8; len];
    enc(&v, &mut b);
    assert_eq!(dec(&b).unwrap(), v);
    assert!(matches!(
        dec(&b[..len - 1]),
        Err(WireError::Truncated { .. })
    ));
}

#[test]
fn set_up_and_data_sub_headers_round_trip_and_truncation() {
    check(
        Hello {
            mode: HelloMode::Ep,
            src_conn_id: 5,
            dst_conn_id: u64::MAX,
            src_ip: 0x7f00_0001,
            src_port: 4242,
        },
        Hello::LEN,
        Hello::encode,
        Hello::decode,
    );
    check(
        PutHdr {
            req_id: 1,
            remote_addr: 0xdead_beef,
            key: 9,
        },
        PutHdr::LEN,
        PutHdr::encode,
        PutHdr::decode,
    );
    check(
        TagHdr {
            tag: u64::MAX - 1,
            imm: 42,
        },
        TagHdr::LEN,
        TagHdr::encode,
        TagHdr::decode,
    );
    check(
        TagRndvHdr {
            tag: 7,
            op_id: 3,
            remote_addr: 0x1000,
            key: 5,
            length: 1 << 20,
        },
        TagRndvHdr::LEN,
        TagRndvHdr::encode,
        TagRndvHdr::decode,
    );
    // A rendezvous request (op 0) carries no data; lengths above MAX_RMA are refused.
    for (op, len) in [(0u64, 1u64), (1, MAX_RMA as u64 + 1)] {
        let mut b = [0u8; TagRndvHdr::LEN];
        TagRndvHdr {
            tag: 1,
            op_id: op,
            remote_addr: 0,
            key: 0,
            length: len,
        }
        .encode(&mut b);
        assert!(matches!(
            TagRndvHdr::decode(&b),
            Err(WireError::BadField { .. })
        ));
    }
}

#[test]
fn request_and_reply_sub_headers_round_trip_and_truncation() {
    check(
        Ack {
            req_id: 3,
            status: WireStatus::RemoteAccess,
        },
        Ack::LEN,
        Ack::encode,
        Ack::decode,
    );
    check(
        GetReq {
            req_id: 3,
            remote_addr: 4,
            key: 5,
            length: 6,
        },
        GetReq::LEN,
        GetReq::encode,
        GetReq::decode,
    );
    check(
        AtomicReq {
            req_id: 1,
            remote_addr: 2,
            key: 3,
            value: 4,
            compare: 5,
            op: AtomicOp::Xor,
            size: 4,
            mode: AtomicMode::Cswap,
        },
        AtomicReq::LEN,
        AtomicReq::encode,
        AtomicReq::decode,
    );
    check(
        AtomicResp {
            req_id: 1,
            status: WireStatus::Ok,
            value: 77,
        },
        AtomicResp::LEN,
        AtomicResp::encode,
        AtomicResp::decode,
    );
    check(
        FlushReq { req_id: 8 },
        FlushReq::LEN,
        FlushReq::encode,
        FlushReq::decode,
    );
    check(
        HelloAck { seq: u64::MAX - 3 },
        HelloAck::LEN,
        HelloAck::encode,
        HelloAck::decode,
    );
}

#[test]
fn hello_rejects_garbage() {
    let mut b = [0u8; Hello::LEN];
    assert!(matches!(
        Hello::decode(&b),
        Err(WireError::BadField {
            field: "magic",
            value: 0,
            ..
        })
    ));
    Hello {
        mode: HelloMode::Iface,
        src_conn_id: 0,
        dst_conn_id: 0,
        src_ip: 0,
        src_port: 0,
    }
    .encode(&mut b);
    b[4] = 9;
    assert!(matches!(
        Hello::decode(&b),
        Err(WireError::BadField {
            field: "protocol version",
            value: 9,
            ..
        })
    ));
}

#[test]
fn hello_ack_frame_decodes_and_rejects_bad_lengths() {
    let mut sub = [0u8; HelloAck::LEN];
    HelloAck {
        seq: 0x0102_0304_0506_0708,
    }
    .encode(&mut sub);
    assert_eq!(sub, [8, 7, 6, 5, 4, 3, 2, 1]);
    let f = frame(Kind::HelloAck, 0, &sub, &[]);
    assert_eq!(f[0], 11);
    let mut r = Reassembler::new();
    assert_eq!(r.next(&f[..f.len() - 1]).unwrap(), (0, None));
    assert_eq!(
        r.next(&f).unwrap(),
        (
            f.len(),
            Some(RxEvent::HelloAck(HelloAck {
                seq: 0x0102_0304_0506_0708
            }))
        )
    );
    // The body is exactly the 8-byte sub-header; an AM id is refused.
    for len in [0usize, 7, 9, 16] {
        let mut b = FrameHeader::new(Kind::HelloAck, 0, 0).to_bytes();
        b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(WireError::BadLength { .. })
        ));
    }
    let b = FrameHeader::new(Kind::HelloAck, 1, 0).to_bytes();
    assert!(matches!(
        FrameHeader::decode(&b),
        Err(WireError::BadField {
            field: "active message id",
            ..
        })
    ));
}

#[test]
fn large_put_is_streamed() {
    let payload: Vec<u8> = (0..MAX_WHOLE + 1000).map(|i| i as u8).collect();
    let mut sub = [0u8; PutHdr::LEN];
    let ph = PutHdr {
        req_id: 1,
        remote_addr: 2,
        key: 3,
    };
    ph.encode(&mut sub);
    let f = frame(Kind::Put, 0, &sub, &payload);
    let mut r = Reassembler::new();
    let (n, ev) = r.next(&f).unwrap();
    assert_eq!((n, ev), (FrameHeader::LEN + PutHdr::LEN, None));
    assert!(!r.at_boundary());
    let (n2, ev) = r.next(&f[n..n + 10]).unwrap();
    assert_eq!(n2, 10);
    let Some(RxEvent::Put(h, c)) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(h, ph);
    assert_eq!((c.offset, c.last, c.data), (0, false, &payload[..10]));
    let (n3, ev) = r.next(&f[n + 10..]).unwrap();
    assert_eq!(n3, payload.len() - 10);
    let Some(RxEvent::Put(_, c)) = ev else {
        panic!()
    };
    assert!(c.last);
    assert!(r.at_boundary());
}

#[test]
fn tag_eager_reports_its_start_before_the_payload() {
    let mut sub = [0u8; TagHdr::LEN];
    TagHdr { tag: 5, imm: 6 }.encode(&mut sub);
    // Small: one whole chunk.
    let f = frame(Kind::TagEager, 0, &sub, &[1, 2, 3]);
    let mut r = Reassembler::new();
    let (n, ev) = r.next(&f).unwrap();
    assert_eq!(n, f.len());
    let Some(RxEvent::TagEager(t, c)) = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (t.tag, t.imm, c.data, c.last),
        (5, 6, &[1u8, 2, 3][..], true)
    );
    // Large: the start (no bytes, not last) as soon as the sub-header is in, even with no
    // payload byte buffered; then the payload is streamed.
    let payload = vec![9u8; TAG_WHOLE + 1];
    let f = frame(Kind::TagEager, 0, &sub, &payload);
    let hl = FrameHeader::LEN + TagHdr::LEN;
    let mut r = Reassembler::new();
    let (n, ev) = r.next(&f[..hl]).unwrap();
    assert_eq!(n, hl);
    let Some(RxEvent::TagEager(_, c)) = ev else {
        panic!("{ev:?}")
    };
    assert!(c.data.is_empty() && !c.last && c.total == payload.len() as u64);
    let pos = r.streaming().expect("streaming");
    assert_eq!((pos.done, pos.total), (0, payload.len() as u64));
    assert!(r.advance_stream(payload.len() as u64));
    assert!(r.at_boundary());
}

fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u8..32, proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(id, p)| frame(
            Kind::Am,
            id,
            &[],
            &p
        )),
        (any::<u64>(), 0usize..(MAX_WHOLE + 3000)).prop_map(|(k, len)| {
            let mut sub = [0u8; PutHdr::LEN];
            PutHdr {
                req_id: k,
                remote_addr: k ^ 1,
                key: k.rotate_left(7),
            }
            .encode(&mut sub);
            let p: Vec<u8> = (0..len).map(|i| (i as u64 ^ k) as u8).collect();
            frame(Kind::Put, 0, &sub, &p)
        }),
        (any::<u64>(), 0usize..2000).prop_map(|(k, len)| {
            let mut sub = [0u8; Ack::LEN];
            Ack {
                req_id: k,
                status: WireStatus::Ok,
            }
            .encode(&mut sub);
            frame(Kind::GetResp, 0, &sub, &vec![k as u8; len])
        }),
        (any::<u64>(), any::<u64>(), 0usize..(3 * TAG_WHOLE)).prop_map(|(tag, imm, len)| {
            let mut sub = [0u8; TagHdr::LEN];
            TagHdr { tag, imm }.encode(&mut sub);
            let p: Vec<u8> = (0..len).map(|i| (i as u64 ^ tag) as u8).collect();
            frame(Kind::TagEager, 0, &sub, &p)
        }),
        (any::<u64>(), 0u64..5, 0usize..MAX_TAG_RNDV_HDR).prop_map(|(tag, op, hl)| {
            let mut sub = [0u8; TagRndvHdr::LEN];
            TagRndvHdr {
                tag,
                op_id: op,
                remote_addr: tag ^ 3,
                key: 9,
                length: if op == 0 { 0 } else { tag % 100_000 },
            }
            .encode(&mut sub);
            frame(Kind::TagRndv, 0, &sub, &vec![tag as u8; hl])
        }),
        any::<u64>().prop_map(|k| {
            let mut sub = [0u8; FlushReq::LEN];
            FlushReq { req_id: k }.encode(&mut sub);
            frame(Kind::FlushReq, 0, &sub, &[])
        }),
        any::<u64>().prop_map(|k| {
            let mut sub = [0u8; HelloAck::LEN];
            HelloAck { seq: k }.encode(&mut sub);
            frame(Kind::HelloAck, 0, &sub, &[])
        }),
        any::<u64>().prop_map(|k| {
            let mut sub = [0u8; GetReq::LEN];
            GetReq {
                req_id: k,
                remote_addr: 1,
                key: 2,
                length: k % 1000,
            }
            .encode(&mut sub);
            frame(Kind::GetReq, 0, &sub, &[])
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A valid frame sequence split into arbitrary chunks yields exactly the messages that
    /// decoding it in one piece yields, and those are the frames that were encoded.
    #[test]
    fn split_stream_yields_same_messages(
        frames in proptest::collection::vec(arb_frame(), 1..12),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
    ) {
        let stream: Vec<u8> = frames.concat();
        let (whole, res) = decode_stream([stream.as_slice()], stream.len());
        prop_assert_eq!(res, Ok(()));
        prop_assert_eq!(whole.len(), frames.len());
        for (f, ev) in frames.iter().zip(&whole) {
            if let OwnedEvent::Am(id, data) = ev {
                prop_assert_eq!(*id, f[1]);
                prop_assert_eq!(&data[..], &f[8..]);
            }
            if let OwnedEvent::Put(_, data) = ev {
                prop_assert_eq!(&data[..], &f[8 + PutHdr::LEN..]);
            }
            if let OwnedEvent::TagEager(t, data) = ev {
                prop_assert_eq!(t.tag, u64::from_le_bytes(f[8..16].try_into().unwrap()));
                prop_assert_eq!(&data[..], &f[8 + TagHdr::LEN..]);
            }
            if let OwnedEvent::TagRndv(_, data) = ev {
                prop_assert_eq!(&data[..], &f[8 + TagRndvHdr::LEN..]);
            }
        }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces = Vec::new();
        let mut prev = 0;
        for p in points {
            pieces.push(&stream[prev..p]);
            prev = p;
        }
        pieces.push(&stream[prev..]);
        let (split, res) = decode_stream(pieces, 0);
        prop_assert_eq!(res, Ok(()));
        prop_assert_eq!(split, whole);
    }

    /// Random bytes never panic the decoder.
    #[test]
    fn random_bytes_do_not_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..2000),
        chunk in 1usize..64,
    ) {
        // The fuzz target's property: chunking never changes the result, even for garbage.
        let whole = decode_stream([bytes.as_slice()], 0);
        let split = decode_stream(bytes.chunks(chunk), 0);
        prop_assert_eq!(whole, split);
    }
}
