//! A remote key is valid with the worker that unpacked it only: used on another worker, even
//! with an endpoint of the same number there, every operation gives `InvalidParam` and
//! touches nothing.

use ucp::{
    AmoSize, Context, ContextParams, EpHandle, EpParams, Error, Features, Op, UcpConfig, Worker,
};

fn worker(tls: &str) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::RMA | Features::AMO64 | Features::AMO32,
        config: Some(UcpConfig {
            tls: vec![tls.into()],
            ..Default::default()
        }),
    })
    .expect("context");
    Worker::new(&ctx).expect("worker")
}

/// Progresses `ws` until `op` (of `ws[0]`) finishes (bounded).
fn finish(ws: &mut [&mut Worker], op: Op) -> ucp::Completion {
    let mut req = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    for _ in 0..1_000_000 {
        match ws[0].request_take(req) {
            Ok(c) => return c,
            Err(r) => req = r,
        }
        for w in ws.iter_mut() {
            w.progress();
        }
    }
    panic!("request did not finish");
}

/// An endpoint of `from` to `to`, connected (wire-up finished).
fn connect(from: &mut Worker, to: &mut Worker) -> EpHandle {
    let ep = from
        .ep_create(to.address(), EpParams::default())
        .expect("ep");
    let op = from.ep_flush(ep).expect("flush");
    assert_eq!(finish(&mut [from, to], op).status, Ok(()));
    ep
}

fn other_worker(r: ucp::Result<Op>) {
    match r {
        Err(Error::InvalidParam(m)) => assert!(m.contains("another worker"), "{m}"),
        other => panic!("expected InvalidParam, got {other:?}"),
    }
}

#[test]
fn a_remote_key_used_on_another_worker_is_refused() {
    for tls in ["self", "posix"] {
        let mut target = worker(tls);
        let mut a = worker(tls);
        let mut c = worker(tls);
        let map = target.mem_map(4096).unwrap();
        map.write(0, &[7; 64]).unwrap();
        let base = map.address();
        // Each worker's first endpoint, both to the target.
        let ea = connect(&mut a, &mut target);
        let ec = connect(&mut c, &mut target);
        let rkey = a.rkey_unpack(ea, map.rkey_packed()).unwrap();
        // On its own worker the key works.
        let op = a.put(ea, &[1; 8], base, &rkey).unwrap();
        assert_eq!(finish(&mut [&mut a, &mut target], op).status, Ok(()));
        let op = a.ep_flush(ea).unwrap();
        assert_eq!(finish(&mut [&mut a, &mut target], op).status, Ok(()));
        // On another worker: refused, whatever the operation.
        other_worker(c.put(ec, &[2; 8], base + 8, &rkey));
        other_worker(c.get(ec, vec![0; 8], base, &rkey));
        other_worker(c.atomic_post(ec, uct::AtomicOp::Add, AmoSize::U64, 1, base + 16, &rkey));
        other_worker(c.atomic_fetch(ec, uct::AtomicOp::Add, AmoSize::U64, 1, base + 16, &rkey));
        other_worker(c.atomic_cswap(ec, AmoSize::U32, 7, 1, base + 24, &rkey));
        let mut dst = [0u8; 8];
        // SAFETY: `dst` outlives the call, which refuses the key without using it.
        other_worker(unsafe { c.get_raw(ec, dst.as_mut_ptr(), 8, base, &rkey) });
        assert!(c.mapped_range(ec, &rkey, base, 8).is_none(), "{tls}");
        assert!(
            c.put_mapped(ec, &[3; 8], base + 32, &rkey).is_none(),
            "{tls}"
        );
        assert_eq!(dst, [0; 8]);
        for w in [&mut c, &mut target] {
            for _ in 0..100 {
                w.progress();
            }
        }
        let mut got = [0u8; 64];
        map.read(0, &mut got).unwrap();
        let mut want = [7u8; 64];
        want[..8].copy_from_slice(&[1; 8]);
        assert_eq!(got, want, "{tls}: only the own worker's put landed");
    }
}
