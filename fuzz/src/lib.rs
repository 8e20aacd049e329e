//! Checks shared by the cargo-fuzz targets (`fuzz_targets/*.rs`) and the stable-Rust garbage
//! test of the workspace (`tests/tests/decoder_garbage.rs`, which includes this file by path).
//!
//! One check per decoder family: every decoder of the family gets the whole input. A check
//! panics only when a decoder breaks its contract:
//! - decoding arbitrary bytes must not panic;
//! - a rejected input gives a typed error ([`ucs::Error::Wire`] for a decoder; an rkey unpack
//!   may also answer `RemoteAccess` or `Unreachable`), with a message;
//! - an accepted input, where an encoder exists, must round-trip: decode → encode → decode
//!   gives the same value, and encoding that value again gives the same bytes.
//!
//! Each family also has `seeds`: valid encodings the garbage test truncates and bit-flips.
//!
//! [`forged`] is the stateful target (`ucp_peer`): a real worker and raw peers ([`peer`])
//! exchanging ucp messages with forged request ids; its stable mirror is
//! `tests/tests/ucp_forged_fuzz.rs`.

pub mod codec;
pub mod forged;
pub mod peer;
pub mod verbs;

pub use codec::codec_reader;
pub use verbs::{rc_verbs_tag_wire, ud_verbs_wire};

use std::fmt::Debug;
use std::net::Ipv4Addr;
use ucs::Error;

/// One decoder family.
pub struct Target {
    /// Name of the cargo-fuzz target.
    pub name: &'static str,
    /// Runs every decoder of the family on the input, panicking on a contract violation;
    /// returns how many decoders accepted it
    /// (for `tcp_frames`: how many messages a clean stream held).
    pub check: fn(&[u8]) -> usize,
    /// Valid encodings to start mutations from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every family, in the order of `fuzz/README.md` (new families go at the end: the stable test
/// picks some seeds by index).
pub const TARGETS: &[Target] = &[
    Target {
        name: "tcp_frames",
        check: tcp_frames,
        seeds: tcp_frames_seeds,
    },
    Target {
        name: "tcp_wire",
        check: tcp_wire,
        seeds: tcp_wire_seeds,
    },
    Target {
        name: "mm_wire",
        check: mm_wire,
        seeds: mm_wire_seeds,
    },
    Target {
        name: "self_wire",
        check: self_wire,
        seeds: self_wire_seeds,
    },
    Target {
        name: "cma_wire",
        check: cma_wire,
        seeds: cma_wire_seeds,
    },
    Target {
        name: "rc_verbs_wire",
        check: rc_verbs_wire,
        seeds: rc_verbs_wire_seeds,
    },
    Target {
        name: "ucp_msg",
        check: ucp_msg,
        seeds: ucp_msg_seeds,
    },
    Target {
        name: "ucp_address",
        check: ucp_address,
        seeds: ucp_address_seeds,
    },
    Target {
        name: "perftest_wire",
        check: perftest_wire,
        seeds: perftest_wire_seeds,
    },
    Target {
        name: "mm_tag_wire",
        check: mm_tag_wire,
        seeds: mm_tag_wire_seeds,
    },
    Target {
        name: "rc_verbs_tag_wire",
        check: rc_verbs_tag_wire,
        seeds: verbs::rc_verbs_tag_wire_seeds,
    },
    Target {
        name: "ud_verbs_wire",
        check: ud_verbs_wire,
        seeds: verbs::ud_verbs_wire_seeds,
    },
    Target {
        name: "codec_reader",
        check: codec_reader,
        seeds: codec::codec_reader_seeds,
    },
];

/// Asserts `e` is the error a decoder must give for bad bytes.
fn wire_err(what: &str, e: &Error) {
    match e {
        Error::Wire(m) if !m.is_empty() => {}
        other => panic!("{what}: bad input must give Error::Wire with a message, got {other:?}"),
    }
}

/// Asserts `e` is an error an rkey unpack may give for a peer's bad key.
fn rkey_err(what: &str, e: &Error) {
    match e {
        Error::Wire(m) | Error::RemoteAccess(m) | Error::Unreachable(m) if !m.is_empty() => {}
        other => panic!("{what}: a bad remote key must give a typed error, got {other:?}"),
    }
}

/// Decodes `data`; on success checks decode → encode → decode → encode is stable. Returns 1
/// if `data` was accepted.
fn round_trip<T: PartialEq + Debug>(
    what: &str,
    data: &[u8],
    decode: impl Fn(&[u8]) -> ucs::Result<T>,
    encode: impl Fn(&T) -> Vec<u8>,
) -> usize {
    match decode(data) {
        Err(e) => {
            wire_err(what, &e);
            0
        }
        Ok(x) => {
            let bytes = encode(&x);
            let y = decode(&bytes)
                .unwrap_or_else(|e| panic!("{what}: own encoding of {x:?} rejected: {e}"));
            assert_eq!(x, y, "{what}: decode(encode(x)) != x");
            assert_eq!(encode(&y), bytes, "{what}: encoding is not stable");
            1
        }
    }
}

/// Checks a decode result of a decoder without an encoder: only the error. Returns 1 if
/// accepted.
fn decode_only<T>(what: &str, r: ucs::Result<T>) -> usize {
    match r {
        Ok(_) => 1,
        Err(e) => {
            wire_err(what, &e);
            0
        }
    }
}

/// Fixed-size encoders writing into `&mut [u8]`.
fn into_buf<const N: usize>(f: impl Fn(&mut [u8])) -> Vec<u8> {
    let mut b = [0u8; N];
    f(&mut b);
    b.to_vec()
}

/// Appending encoders.
fn appended(f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = Vec::new();
    f(&mut v);
    v
}

// ---------------------------------------------------------------------------------------------
// uct tcp

/// tcp stream reassembly: the first byte picks a chunk size, the rest is the stream. Decoding
/// it whole and in chunks must agree (same messages, same error), without panicking.
pub fn tcp_frames(data: &[u8]) -> usize {
    use uct::tcp::wire::decode_stream;
    let Some((&first, stream)) = data.split_first() else {
        return 0;
    };
    let chunk = (first as usize % 97) + 1;
    let (whole, r1) = decode_stream([stream], 0);
    let (split, r2) = decode_stream(stream.chunks(chunk), 0);
    assert_eq!(whole, split, "chunking changed the decoded messages");
    assert_eq!(r1, r2, "chunking changed the decode result");
    match r1 {
        Ok(()) => whole.len(),
        Err(e) => {
            wire_err("tcp stream", &e.into());
            0
        }
    }
}

fn tcp_frames_seeds() -> Vec<Vec<u8>> {
    use uct::tcp::wire::*;
    let mut s = vec![7u8];
    let hello = Hello {
        mode: HelloMode::Ep,
        src_conn_id: 3,
        dst_conn_id: 9,
        src_ip: 0x7f00_0001,
        src_port: 4000,
    };
    s.extend_from_slice(&FrameHeader::new(Kind::Hello, 0, 0).to_bytes());
    s.extend_from_slice(&into_buf::<{ Hello::LEN }>(|b| hello.encode(b)));
    s.extend_from_slice(&FrameHeader::new(Kind::Am, 5, 6).to_bytes());
    s.extend_from_slice(b"abcdef");
    let put = PutHdr {
        req_id: 1,
        remote_addr: 0x1000,
        key: 2,
    };
    s.extend_from_slice(&FrameHeader::new(Kind::Put, 0, 300).to_bytes());
    s.extend_from_slice(&into_buf::<{ PutHdr::LEN }>(|b| put.encode(b)));
    s.extend_from_slice(&[0x5a; 300]);
    // A connect-to-iface set-up: the connector's hello, the acceptor's ack, then an AM.
    let mut t = vec![13u8];
    let hello = Hello {
        mode: HelloMode::Iface,
        src_conn_id: 2,
        dst_conn_id: 0,
        src_ip: 0x7f00_0001,
        src_port: 4001,
    };
    t.extend_from_slice(&FrameHeader::new(Kind::Hello, 0, 0).to_bytes());
    t.extend_from_slice(&into_buf::<{ Hello::LEN }>(|b| hello.encode(b)));
    t.extend_from_slice(&FrameHeader::new(Kind::HelloAck, 0, 0).to_bytes());
    t.extend_from_slice(&into_buf::<{ HelloAck::LEN }>(|b| {
        HelloAck { seq: 2 }.encode(b)
    }));
    t.extend_from_slice(&FrameHeader::new(Kind::Am, 1, 3).to_bytes());
    t.extend_from_slice(b"xyz");
    vec![s, t]
}

/// tcp frame sub-headers, device/iface/endpoint addresses and packed rkeys.
pub fn tcp_wire(data: &[u8]) -> usize {
    let mut ok = 0;
    use uct::tcp::wire::*;
    fn w<T>(r: Result<T, WireError>) -> ucs::Result<T> {
        r.map_err(Into::into)
    }
    ok += round_trip(
        "tcp FrameHeader",
        data,
        |b| w(FrameHeader::decode(b)),
        |x| x.to_bytes().to_vec(),
    );
    ok += round_trip(
        "tcp Hello",
        data,
        |b| w(Hello::decode(b)),
        |x| into_buf::<{ Hello::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip(
        "tcp PutHdr",
        data,
        |b| w(PutHdr::decode(b)),
        |x| into_buf::<{ PutHdr::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip(
        "tcp Ack",
        data,
        |b| w(Ack::decode(b)),
        |x| into_buf::<{ Ack::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip(
        "tcp GetReq",
        data,
        |b| w(GetReq::decode(b)),
        |x| into_buf::<{ GetReq::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip(
        "tcp AtomicReq",
        data,
        |b| w(AtomicReq::decode(b)),
        |x| into_buf::<{ AtomicReq::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip(
        "tcp AtomicResp",
        data,
        |b| w(AtomicResp::decode(b)),
        |x| into_buf::<{ AtomicResp::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip(
        "tcp FlushReq",
        data,
        |b| w(FlushReq::decode(b)),
        |x| into_buf::<{ FlushReq::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip(
        "tcp HelloAck",
        data,
        |b| w(HelloAck::decode(b)),
        |x| into_buf::<{ HelloAck::LEN }>(|b| x.encode(b)),
    );
    ok += round_trip("tcp DevAddr", data, uct::tcp::DevAddr::decode, |x| {
        x.encode()
    });
    ok += round_trip("tcp IfaceAddr", data, uct::tcp::IfaceAddr::decode, |x| {
        x.encode()
    });
    ok += round_trip("tcp EpAddr", data, uct::tcp::EpAddr::decode, |x| x.encode());
    ok += round_trip(
        "tcp PackedRkey",
        data,
        uct::tcp::md::PackedRkey::decode,
        |x| appended(|v| x.encode(v)),
    );
    let md = uct::tcp::TcpMd::new();
    match uct::md::MemoryDomain::rkey_unpack(&md, data) {
        Ok(_) => ok += 1,
        Err(e) => rkey_err("tcp rkey_unpack", &e),
    }
    ok
}

fn tcp_wire_seeds() -> Vec<Vec<u8>> {
    use uct::tcp::wire::*;
    let iface = uct::tcp::IfaceAddr {
        ip: Ipv4Addr::new(127, 0, 0, 1),
        port: 4242,
    };
    vec![
        FrameHeader::new(Kind::Am, 3, 100).to_bytes().to_vec(),
        into_buf::<{ Hello::LEN }>(|b| {
            Hello {
                mode: HelloMode::Iface,
                src_conn_id: 1,
                dst_conn_id: 0,
                src_ip: 0x0a00_0001,
                src_port: 999,
            }
            .encode(b)
        }),
        into_buf::<{ HelloAck::LEN }>(|b| HelloAck { seq: 5 }.encode(b)),
        into_buf::<{ Ack::LEN }>(|b| {
            Ack {
                req_id: 77,
                status: WireStatus::RemoteAccess,
            }
            .encode(b)
        }),
        into_buf::<{ GetReq::LEN }>(|b| {
            GetReq {
                req_id: 5,
                remote_addr: 0x7000,
                key: 8,
                length: 4096,
            }
            .encode(b)
        }),
        into_buf::<{ AtomicReq::LEN }>(|b| {
            AtomicReq {
                req_id: 6,
                remote_addr: 0x8000,
                key: 9,
                value: 1,
                compare: 0,
                op: uct::ep::AtomicOp::Add,
                size: 8,
                mode: AtomicMode::Fetch,
            }
            .encode(b)
        }),
        into_buf::<{ AtomicResp::LEN }>(|b| {
            AtomicResp {
                req_id: 6,
                status: WireStatus::Ok,
                value: 41,
            }
            .encode(b)
        }),
        uct::tcp::DevAddr {
            ip: Ipv4Addr::new(10, 1, 2, 3),
            prefix: 24,
            loopback: false,
            netns: 0x1234,
        }
        .encode(),
        iface.encode(),
        uct::tcp::EpAddr { iface, conn_id: 12 }.encode(),
        appended(|v| {
            uct::tcp::md::PackedRkey {
                base: 0x10000,
                len: 64,
                key: 3,
            }
            .encode(v)
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// uct mm

/// Shared-memory device and interface addresses and remote keys. (`MmMd::rkey_unpack` is not
/// called: it maps the segment a key names, which a fuzzer must not do.)
pub fn mm_wire(data: &[u8]) -> usize {
    let mut ok = 0;
    use uct::mm::wire::*;
    ok += round_trip("mm DeviceAddr", data, DeviceAddr::decode, |x| {
        appended(|v| x.encode(v))
    });
    ok += round_trip("mm IfaceAddr", data, IfaceAddr::decode, |x| {
        appended(|v| x.encode(v))
    });
    ok += round_trip("mm RkeyWire", data, RkeyWire::decode, |x| {
        appended(|v| x.encode(v))
    });
    ok
}

fn mm_wire_seeds() -> Vec<Vec<u8>> {
    use uct::mm::wire::*;
    let seg = SegRef {
        kind: SegKind::Posix,
        pid: 1234,
        id: 7,
        len: 1 << 20,
    };
    vec![
        appended(|v| {
            DeviceAddr {
                host: 0xabab_abab_abab_abab,
                ns: 0x0102_0304_0506_0708,
            }
            .encode(v)
        }),
        appended(|v| IfaceAddr { seg, nonce: 99 }.encode(v)),
        appended(|v| {
            RkeyWire {
                seg: SegRef {
                    kind: SegKind::Sysv,
                    ..seg
                },
                base: 0x7f00_0000,
                len: 4096,
                offset: 8192,
            }
            .encode(v)
        }),
    ]
}

/// Shared-memory tag offload headers (`uct::mm::wire_tag`): a tagged eager message (header and
/// payload), a rendezvous announcement (the first [`RndvHdr::LEN`] bytes are the inline fixed
/// header, the rest its buffer part: segment key and user header), and a rendezvous
/// acknowledgement.
///
/// [`RndvHdr::LEN`]: uct::mm::wire_tag::RndvHdr::LEN
pub fn mm_tag_wire(data: &[u8]) -> usize {
    let mut ok = 0;
    use uct::mm::wire_tag::*;
    ok += round_trip(
        "mm EagerHdr",
        data,
        |b| EagerHdr::decode(b).map(|(h, p)| (h, p.to_vec())),
        |(h, p)| {
            let mut f = [0u8; EagerHdr::LEN];
            h.encode(&mut f);
            let mut v = f.to_vec();
            v.extend_from_slice(p);
            v
        },
    );
    ok += round_trip(
        "mm RndvHdr",
        data,
        |b| {
            let (fixed, body) = b.split_at(b.len().min(RndvHdr::LEN));
            RndvHdr::decode(fixed, body).map(|(h, key, user)| (h, key.to_vec(), user.to_vec()))
        },
        |(h, _, user)| encode_rndv(h, user),
    );
    ok += round_trip("mm tag Ack", data, Ack::decode, |x| x.encode().to_vec());
    ok
}

/// A rendezvous announcement as the FIFO carries it: fixed header, then the buffer part.
fn encode_rndv(h: &uct::mm::wire_tag::RndvHdr, user: &[u8]) -> Vec<u8> {
    use uct::mm::wire_tag::RndvHdr;
    let mut fixed = [0u8; RndvHdr::LEN];
    h.encode(user.len() as u16, &mut fixed);
    let mut body = vec![0u8; h.key_len() + user.len()];
    h.encode_body(user, &mut body);
    let mut v = fixed.to_vec();
    v.extend_from_slice(&body);
    v
}

fn mm_tag_wire_seeds() -> Vec<Vec<u8>> {
    use uct::mm::wire::{IfaceAddr, RkeyWire, SegKind, SegRef};
    use uct::mm::wire_tag::*;
    let seg = SegRef {
        kind: SegKind::Posix,
        pid: 4242,
        id: 7,
        len: 1 << 20,
    };
    let reply = IfaceAddr { seg, nonce: 0x1234 };
    let rndv = |src, op_id, length, addr| RndvHdr {
        tag: 0xdead_beef,
        op_id,
        length,
        addr,
        pid: 4242,
        src,
        reply,
    };
    let key = RkeyWire {
        seg: SegRef {
            kind: SegKind::Sysv,
            ..seg
        },
        base: 0x7f00_0000,
        len: 1 << 16,
        offset: 4096,
    };
    let mut eager = [0u8; EagerHdr::LEN];
    EagerHdr { tag: 7, imm: 9 }.encode(&mut eager);
    let mut eager = eager.to_vec();
    eager.extend_from_slice(b"payload");
    vec![
        eager,
        encode_rndv(&rndv(RndvSrc::Request, 0, 0, 0), b"request header"),
        encode_rndv(&rndv(RndvSrc::Cma, 3, 1 << 20, 0x5000), b""),
        encode_rndv(&rndv(RndvSrc::Seg(key), 4, 4096, 0x7f00_0000), b"user"),
        Ack {
            op_id: 0x1_0001,
            status: 1,
        }
        .encode()
        .to_vec(),
    ]
}

// ---------------------------------------------------------------------------------------------
// uct self

/// Self-transport addresses and remote keys, and `SelfMd::rkey_unpack` (which must refuse a
/// key of another process or of no live region).
pub fn self_wire(data: &[u8]) -> usize {
    let mut ok = 0;
    use uct::self_::wire::*;
    ok += round_trip("self DeviceAddr", data, DeviceAddr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("self IfaceAddr", data, IfaceAddr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("self EpAddr", data, EpAddr::decode, |x| x.encode().to_vec());
    ok += round_trip("self PackedRkey", data, PackedRkey::decode, |x| {
        x.encode().to_vec()
    });
    let md = uct::self_::SelfMd::new();
    match uct::md::MemoryDomain::rkey_unpack(&md, data) {
        Ok(_) => ok += 1,
        Err(e) => rkey_err("self rkey_unpack", &e),
    }
    ok
}

fn self_wire_seeds() -> Vec<Vec<u8>> {
    use uct::md::MemoryDomain;
    use uct::self_::wire::*;
    let mut seeds = vec![
        DeviceAddr { pid: 42, nonce: 7 }.encode().to_vec(),
        IfaceAddr { iface_id: 3 }.encode().to_vec(),
        EpAddr {
            iface_id: 3,
            ep_id: 1,
        }
        .encode()
        .to_vec(),
        PackedRkey {
            pid: std::process::id(),
            region_id: 1,
            base: 0x1000,
            len: 64,
        }
        .encode()
        .to_vec(),
    ];
    // A key of a live region of this process: its mutations exercise the region lookup. The
    // region is leaked on purpose so the key stays valid for the whole run.
    let md = uct::self_::SelfMd::new();
    if let Ok(h) = md.mem_alloc(256) {
        let mut k = Vec::new();
        if md.rkey_pack(&h, &mut k).is_ok() {
            seeds.push(k);
        }
        std::mem::forget(h);
    }
    seeds
}

// ---------------------------------------------------------------------------------------------
// uct cma

/// CMA interface address and remote key, and `CmaMd::rkey_unpack`.
pub fn cma_wire(data: &[u8]) -> usize {
    let mut ok = 0;
    use uct::cma::*;
    ok += round_trip("cma CmaRkey", data, CmaRkey::decode, |x| {
        appended(|v| x.encode(v))
    });
    ok += round_trip("cma CmaIfaceAddr", data, CmaIfaceAddr::decode, |x| {
        appended(|v| x.encode(v))
    });
    ok
}

fn cma_wire_seeds() -> Vec<Vec<u8>> {
    use uct::cma::*;
    vec![
        appended(|v| {
            CmaRkey {
                pid: 4321,
                base: 0x5555_0000,
                len: 1 << 16,
            }
            .encode(v)
        }),
        appended(|v| CmaIfaceAddr { pid: 4321 }.encode(v)),
    ]
}

// ---------------------------------------------------------------------------------------------
// uct rc_verbs

/// rc_verbs device address, endpoint address blob, packed rkey and the AM header.
pub fn rc_verbs_wire(data: &[u8]) -> usize {
    let mut ok = 0;
    use uct::rc_verbs::wire::*;
    ok += round_trip("rc_verbs DevAddr", data, DevAddr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("rc_verbs EpAddr", data, EpAddr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("rc_verbs PackedRkey", data, PackedRkey::decode, |x| {
        x.encode().to_vec()
    });
    match AmHdr::decode(data) {
        Ok((_, rest)) => {
            assert_eq!(rest.len() + AmHdr::LEN, data.len(), "rc_verbs AmHdr");
            ok += 1;
        }
        Err(e) => wire_err("rc_verbs AmHdr", &e),
    }
    ok
}

fn rc_verbs_wire_seeds() -> Vec<Vec<u8>> {
    use uct::rc_verbs::wire::*;
    vec![
        DevAddr {
            link_layer: LL_ETHERNET,
            lid: 0,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        }
        .encode()
        .to_vec(),
        EpAddr {
            qpn: 0x12_3456,
            psn: 0x00_0042,
            credit_addr: 0x7fff_0000,
            credit_rkey: 0x99,
            rx_credits: 64,
            mtu: 5,
        }
        .encode()
        .to_vec(),
        PackedRkey {
            rkey: 0x1234,
            base: 0x10_0000,
            len: 8192,
        }
        .encode()
        .to_vec(),
        vec![3, 1, 2, 3],
    ]
}

// ---------------------------------------------------------------------------------------------
// ucp messages

/// ucp active-message bodies: the first byte is the uct AM id, the rest the body for
/// `Msg::decode`; every header type also decodes the whole input and must round-trip.
pub fn ucp_msg(data: &[u8]) -> usize {
    let mut ok = 0;
    use ucp::wire::*;
    if let Some((&id, body)) = data.split_first() {
        ok += decode_only("ucp Msg", Msg::decode(id, body));
    }
    ok += decode_only("ucp prefix", split_prefix(data));
    ok += round_trip("ucp EagerHdr", data, EagerHdr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("ucp EagerSyncHdr", data, EagerSyncHdr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("ucp EagerFirstHdr", data, EagerFirstHdr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("ucp FragHdr", data, FragHdr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("ucp ReqHdr", data, ReqHdr::decode, |x| x.encode().to_vec());
    ok += round_trip("ucp UserAmHdr", data, UserAmHdr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("ucp AtomicReqHdr", data, AtomicReqHdr::decode, |x| {
        let (b, n) = x.encode();
        b[..n].to_vec()
    });
    ok += round_trip("ucp AtomicRepHdr", data, AtomicRepHdr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("ucp CmHdr", data, ucp::listener::CmHdr::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("ucp RkeyBundle", data, ucp::rma::RkeyBundle::decode, |x| {
        x.encode().expect("a decoded bundle re-encodes")
    });
    // Borrowing headers: round-trip by hand.
    match RemoteBuf::decode(data) {
        Err(e) => wire_err("ucp RemoteBuf", &e),
        Ok((x, rest)) => {
            let bytes = appended(|v| x.encode(v));
            assert_eq!(bytes.len() + rest.len(), data.len(), "ucp RemoteBuf length");
            let (y, tail) = RemoteBuf::decode(&bytes).expect("ucp RemoteBuf re-decode");
            assert_eq!((x, tail.len()), (y, 0), "ucp RemoteBuf round trip");
            ok += 1;
        }
    }
    match RtsHdr::decode(data) {
        Err(e) => wire_err("ucp RtsHdr", &e),
        Ok(x) => {
            let bytes = appended(|v| x.encode(v));
            let y = RtsHdr::decode(&bytes).expect("ucp RtsHdr re-decode");
            assert_eq!(x, y, "ucp RtsHdr round trip");
            assert_eq!(appended(|v| y.encode(v)), bytes, "ucp RtsHdr encoding");
            ok += 1;
        }
    }
    match RtrHdr::decode(data) {
        Err(e) => wire_err("ucp RtrHdr", &e),
        Ok(x) => {
            let bytes = appended(|v| x.encode(v));
            let y = RtrHdr::decode(&bytes).expect("ucp RtrHdr re-decode");
            assert_eq!(x, y, "ucp RtrHdr round trip");
            assert_eq!(appended(|v| y.encode(v)), bytes, "ucp RtrHdr encoding");
            ok += 1;
        }
    }
    ok
}

fn ucp_msg_seeds() -> Vec<Vec<u8>> {
    use ucp::wire::*;
    let buf = RemoteBuf {
        addr: 0x4000,
        tl: "tcp",
        rkey: &[1, 2, 3, 4, 5, 6, 7, 8],
    };
    let with_id = |id: u8, body: &[u8]| {
        let mut v = vec![id];
        v.extend_from_slice(body);
        v
    };
    let rts = appended(|v| {
        RtsHdr {
            tag: 0xfeed,
            sreq: 4,
            len: 1 << 20,
            buf,
        }
        .encode(v)
    });
    let user = UserAmHdr { id: 9, hdr_len: 3 }.encode();
    let mut am_rts = user.to_vec();
    am_rts.extend_from_slice(b"hdr");
    am_rts.extend_from_slice(&rts);
    vec![
        with_id(am_id::EAGER_ONLY, &EagerHdr { tag: 5 }.encode()),
        with_id(
            am_id::EAGER_SYNC_ONLY,
            &EagerSyncHdr { tag: 5, sreq: 6 }.encode(),
        ),
        with_id(
            am_id::EAGER_FIRST,
            &EagerFirstHdr {
                tag: 1,
                msg_id: 2,
                total_len: 100,
                sreq: NO_REQ,
            }
            .encode(),
        ),
        with_id(am_id::EAGER_MIDDLE, &FragHdr { id: 2, offset: 50 }.encode()),
        with_id(am_id::SYNC_ACK, &ReqHdr { req: 8 }.encode()),
        with_id(am_id::RTS, &rts),
        with_id(
            am_id::RTR,
            &appended(|v| {
                RtrHdr {
                    sreq: 4,
                    rreq: 5,
                    mode: RtrMode::Put,
                    buf,
                }
                .encode(v)
            }),
        ),
        with_id(am_id::AM_RTS, &am_rts),
        with_id(am_id::USER_AM, &[&user[..], b"hdrdata"].concat()),
        with_id(
            am_id::ATOMIC_REQ,
            &AtomicReqHdr {
                req: 1,
                op: 0,
                size: 8,
                addr: 0x9000,
                value: 3,
                compare: 0,
            }
            .encode()
            .0[..AtomicReqHdr::LEN_NO_COMPARE],
        ),
        with_id(
            am_id::ATOMIC_REP,
            &AtomicRepHdr {
                req: 1,
                status: 0,
                value: 7,
            }
            .encode(),
        ),
        with_id(
            am_id::PUT_REQ,
            &appended(|v| {
                v.extend_from_slice(&PutReqHdr { addr: 0x9000 }.encode());
                v.extend_from_slice(b"put");
            }),
        ),
        ucp::listener::CmHdr {
            kind: ucp::listener::CmKind::Accept,
            addr_len: 77,
        }
        .encode()
        .to_vec(),
        ucp::rma::RkeyBundle {
            entries: vec![("tcp".into(), vec![9; 32]), ("posix".into(), vec![1; 48])],
        }
        .encode()
        .expect("bundle encodes"),
    ]
}

// ---------------------------------------------------------------------------------------------
// ucp worker address

/// The packed worker address (what `ucp_worker_get_address` gives and peers exchange).
pub fn ucp_address(data: &[u8]) -> usize {
    let mut ok = 0;
    ok += round_trip("ucp WorkerAddress", data, ucp::WorkerAddress::decode, |x| {
        x.to_bytes().expect("a decoded address re-encodes")
    });
    ok
}

fn ucp_address_seeds() -> Vec<Vec<u8>> {
    let tl = |name: &str, dev: &[u8], iface: &[u8]| ucp::TlAddress {
        tl_name: name.into(),
        device_addr: dev.to_vec(),
        iface_addr: iface.to_vec(),
    };
    let host = [0x5a; 31];
    let shm = ucp::WorkerAddress {
        uuid: 0x0123_4567_89ab_cdef,
        tls: vec![
            tl("self", &[0x92, 0x21], &[3]),
            tl("posix", &host, &[1; 21]),
            tl("sysv", &host, &[2; 19]),
            tl("cma", &host, &[0x92, 0x21]),
        ],
    };
    let net = ucp::WorkerAddress {
        uuid: 7,
        tls: vec![
            tl("tcp", &[10; 16], &[11; 8]),
            tl("fault_tcp", &[10; 16], &[12; 8]),
            tl("rc_verbs", &[13; 20], &[]),
        ],
    };
    vec![
        shm.to_bytes().expect("address encodes"),
        net.to_bytes().expect("address encodes"),
    ]
}

// ---------------------------------------------------------------------------------------------
// perftest side channel

/// perftest side-channel frame header and message payloads.
pub fn perftest_wire(data: &[u8]) -> usize {
    let mut ok = 0;
    use perftest::wire::*;
    ok += round_trip("perftest FrameHeader", data, FrameHeader::decode, |x| {
        x.encode().to_vec()
    });
    ok += round_trip("perftest AddressInfo", data, AddressInfo::decode, |x| {
        let mut v = Vec::new();
        x.encode(&mut v).expect("a decoded address re-encodes");
        v
    });
    ok += round_trip(
        "perftest TestParams",
        data,
        perftest::params::TestParams::decode,
        |x| appended(|v| x.encode(v)),
    );
    ok += round_trip("perftest reason", data, decode_reason, |x| {
        appended(|v| encode_reason(x, v))
    });
    ok += round_trip("perftest status", data, decode_status, |x| {
        encode_status(*x).to_vec()
    });
    ok
}

fn perftest_wire_seeds() -> Vec<Vec<u8>> {
    use perftest::params::{Layout, TestId, TestParams};
    use perftest::wire::*;
    vec![
        FrameHeader {
            kind: Kind::Address,
            len: 100,
        }
        .encode()
        .to_vec(),
        {
            let mut v = Vec::new();
            AddressInfo {
                buffer_addr: 0x1000,
                buffer_len: 4096,
                device_addr: vec![1; 16],
                iface_addr: vec![2; 8],
                ep_addr: vec![],
                rkey: vec![3; 32],
            }
            .encode(&mut v)
            .expect("encodes");
            v
        },
        appended(|v| {
            TestParams {
                test: TestId::PutBw,
                layout: Layout::Zcopy,
                sizes: vec![4096, 8],
                iterations: 1000,
                warmup: 10,
                outstanding: 16,
                window: 32,
                transport: "tcp".into(),
                device: "lo".into(),
                mem: Default::default(),
            }
            .encode(v)
        }),
        appended(|v| encode_reason("unknown transport xyz", v)),
        encode_status(0).to_vec(),
    ]
}
