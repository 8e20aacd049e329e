//! A rendezvous whose remote key does not cover the data it announces is refused: a
//! hand-rolled ucp peer (a bare posix interface, beside a cma interface of this process) sends
//! RTS messages whose cma key names a 4 KiB region while the message is longer, or starts
//! inside the region and runs past its end. The worker reads nothing outside the key: the
//! receive completes with an error, its buffer untouched, and the forging endpoint fails.

#[allow(dead_code)]
#[path = "../../fuzz/src/peer.rs"]
mod peer;

use peer::{RawPeer, WATCHDOG};
use std::time::Instant;
use ucp::wire::{am_id, RemoteBuf, RtsHdr};
use ucp::{
    Context, ContextParams, EpParams, Features, Op, TlAddress, UcpConfig, Worker, WorkerAddress,
    TAG_MASK_EXACT,
};
use uct::cma::CmaRkey;
use uct::Iface as _;

fn worker() -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: vec!["posix".into(), "cma".into()],
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .expect("context");
    Worker::new(&ctx).expect("worker")
}

#[test]
fn ucp_rndv_key_that_does_not_cover_the_data_is_refused() {
    // The region the forged keys name: 4 KiB of this process, between two guard regions whose
    // bytes must never reach the receive.
    let region = vec![0x11u8; 3 * 4096];
    let base = region.as_ptr() as u64 + 4096;
    for (at, len) in [(base, 100_000usize), (base + 4000, 200), (base - 8, 64)] {
        let mut w = worker();
        let mut p = RawPeer::new("posix", &w);
        // The peer's address: its posix interface, and this process's cma interface (the
        // key's pid is ours, which cma always trusts, so only the range check stands between
        // the forged key and memory it does not cover).
        let (_cma_md, cma) = uct::open("cma", uct::cma::DEVICE).expect("cma");
        let mut addr = WorkerAddress::decode(&p.address()).expect("address");
        addr.tls.push(TlAddress {
            tl_name: "cma".into(),
            device_addr: cma.device_address().to_vec(),
            iface_addr: cma.iface_address().to_vec(),
        });
        let ep = w
            .ep_create(&addr.to_bytes().expect("pack"), EpParams::default())
            .expect("ep to the forging peer");
        let deadline = Instant::now() + WATCHDOG;
        while w.ep_proto_config(ep).is_err() {
            w.progress();
            assert!(Instant::now() < deadline, "endpoint did not connect");
        }
        let thresh = w.ep_proto_config(ep).unwrap().rndv_thresh;
        let len = len.max(thresh);
        let mut buf = vec![0u8; len];
        // SAFETY: `buf` outlives the receive (it is read only after the receive finished).
        let op = unsafe { w.tag_recv_raw(buf.as_mut_ptr(), len, 5, TAG_MASK_EXACT) }
            .expect("tag_recv_raw");
        let Op::Pending(req) = op else {
            panic!("the receive finished before any message")
        };
        let mut rkey = Vec::new();
        CmaRkey {
            pid: std::process::id(),
            base,
            len: 4096,
        }
        .encode(&mut rkey);
        let mut body = Vec::new();
        RtsHdr {
            tag: 5,
            sreq: 77,
            len: len as u64,
            buf: RemoteBuf {
                addr: at,
                tl: "cma",
                rkey: &rkey,
            },
        }
        .encode(&mut body);
        assert!(p.send(&mut w, am_id::RTS, &body));
        let c = loop {
            w.progress();
            p.poll();
            if w.request_test(&req).unwrap() {
                match w.request_take(req) {
                    Ok(c) => break c,
                    Err(_) => panic!("a finished request could not be taken"),
                }
            }
            assert!(
                Instant::now() < deadline,
                "{len} bytes at {:#x}: the receive neither finished nor failed",
                at - base
            );
        };
        let e = c
            .status
            .expect_err("a key that does not cover the data was read");
        assert!(matches!(e, ucp::Error::RemoteAccess(_)), "{e}");
        assert!(
            buf.iter().all(|&b| b == 0),
            "{len} bytes at offset {}: bytes outside the key reached the receive ({e})",
            at as i64 - base as i64
        );
        assert!(
            w.ep_status(ep).is_err(),
            "the forging endpoint still stands"
        );
        drop(p);
    }
    drop(region);
}
