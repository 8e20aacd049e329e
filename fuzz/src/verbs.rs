//! Checks of the verbs transports' message headers: rc_verbs' software tag offload and
//! ud_verbs' interface address and datagram headers (the rc_verbs addresses and rkey are in
//! [`super::rc_verbs_wire`]).

use super::{decode_only, into_buf, round_trip, wire_err};

/// `uct::rc_verbs::tag::wire`: `EagerHdr`, `RndvHdr` (each with what follows it), `AckHdr`,
/// `PutReqHdr` and `PutDoneHdr`.
pub fn rc_verbs_tag_wire(data: &[u8]) -> usize {
    use uct::rc_verbs::tag::wire::*;
    let mut ok = 0;
    // The id byte is the dispatcher's: decoders read the header after it and the encoders
    // write it, so the round trip compares from the second byte on.
    let id_then = |id: u8, b: &[u8]| {
        let mut v = vec![id];
        v.extend_from_slice(b.get(1..).unwrap_or_default());
        v
    };
    match EagerHdr::decode(data) {
        Ok((h, rest)) => {
            assert_eq!(
                rest.len() + EagerHdr::LEN,
                data.len(),
                "rc_verbs EagerHdr rest"
            );
            let b = h.encode();
            assert_eq!(
                b[1..],
                data[1..EagerHdr::LEN],
                "rc_verbs EagerHdr re-encoding"
            );
            assert_eq!(EagerHdr::decode(&b).map(|x| x.0).ok(), Some(h));
            ok += 1;
        }
        Err(e) => wire_err("rc_verbs EagerHdr", &e),
    }
    match RndvHdr::decode(data) {
        Ok((h, rest)) => {
            assert_eq!(
                rest.len() + RndvHdr::LEN,
                data.len(),
                "rc_verbs RndvHdr rest"
            );
            let b = h.encode();
            assert_eq!(
                b[1..],
                data[1..RndvHdr::LEN],
                "rc_verbs RndvHdr re-encoding"
            );
            assert_eq!(RndvHdr::decode(&b).map(|x| x.0).ok(), Some(h));
            ok += 1;
        }
        Err(e) => wire_err("rc_verbs RndvHdr", &e),
    }
    ok += round_trip(
        "rc_verbs AckHdr",
        &id_then(ID_TAG_ACK, data),
        AckHdr::decode,
        |x| x.encode().to_vec(),
    );
    ok += round_trip(
        "rc_verbs PutReqHdr",
        &id_then(ID_TAG_PUT_REQ, data),
        PutReqHdr::decode,
        |x| x.encode().to_vec(),
    );
    ok += round_trip(
        "rc_verbs PutDoneHdr",
        &id_then(ID_TAG_PUT_DONE, data),
        PutDoneHdr::decode,
        |x| x.encode().to_vec(),
    );
    ok
}

pub(crate) fn rc_verbs_tag_wire_seeds() -> Vec<Vec<u8>> {
    use uct::rc_verbs::tag::wire::*;
    let mut eager = EagerHdr {
        tag: 0x0102_0304_0506_0708,
        imm: 9,
    }
    .encode()
    .to_vec();
    eager.extend_from_slice(b"payload");
    let mut rndv = RndvHdr {
        tag: 0x77,
        op_id: 3,
        addr: 0x7f00_0000_1000,
        length: 65536,
        rkey: 0x1234,
    }
    .encode()
    .to_vec();
    rndv.extend_from_slice(b"user header");
    vec![
        eager,
        rndv,
        AckHdr {
            op_id: 3,
            status: ACK_FAILED,
        }
        .encode()
        .to_vec(),
        PutReqHdr {
            op_id: 3,
            offset: 32768,
            length: 32768,
            addr: 0x7f00_0020_0000,
            rkey: 0x5678,
            slot: 2,
        }
        .encode()
        .to_vec(),
        PutDoneHdr {
            op_id: 3,
            slot: 2,
            status: ACK_OK,
        }
        .encode()
        .to_vec(),
    ]
}

/// `uct::ud_verbs::wire`: `IfaceAddr`, the datagram `Hdr` (with its payload), `Creq` and the
/// connection reply.
pub fn ud_verbs_wire(data: &[u8]) -> usize {
    use uct::ud_verbs::wire::*;
    let mut ok = 0;
    ok += round_trip("ud_verbs IfaceAddr", data, IfaceAddr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip(
        "ud_verbs Hdr",
        data,
        |b| Hdr::decode(b).map(|(h, rest)| (h, rest.to_vec())),
        |(h, rest)| {
            let mut v = into_buf::<{ Hdr::LEN }>(|b| h.encode_into(b));
            v.extend_from_slice(rest);
            v
        },
    );
    ok += round_trip("ud_verbs Creq", data, Creq::decode, |x| {
        into_buf::<{ Creq::LEN }>(|b| x.encode_into(b))
    });
    ok += decode_only("ud_verbs connection reply", decode_crep(data));
    ok
}

pub(crate) fn ud_verbs_wire_seeds() -> Vec<Vec<u8>> {
    use uct::ud_verbs::wire::*;
    let iface = IfaceAddr { qpn: 0x12_3456 };
    let mut data = into_buf::<{ Hdr::LEN }>(|b| {
        Hdr {
            kind: Kind::Data,
            flags: FLAG_ACK_REQ,
            dest: 7,
            psn: 300,
            ack: 299,
        }
        .encode_into(b)
    });
    data.extend_from_slice(b"datagram");
    vec![
        iface.encode().to_vec(),
        data,
        into_buf::<{ Hdr::LEN }>(|b| {
            Hdr {
                kind: Kind::Ack,
                flags: FLAG_NAK,
                dest: NO_EP,
                psn: 0,
                ack: 65535,
            }
            .encode_into(b)
        }),
        into_buf::<{ Creq::LEN }>(|b| {
            Creq {
                src_ep: 1,
                conn_sn: 2,
                dev_addr: uct::rc_verbs::wire::DevAddr {
                    link_layer: uct::rc_verbs::wire::LL_ETHERNET,
                    lid: 0,
                    gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
                }
                .encode(),
                iface,
            }
            .encode_into(b)
        }),
        vec![4, 0, 0, 0],
    ]
}
