//! Whole-stack tag matching against a naive reference model: random sequences of post, send
//! (eager, multi-fragment and rendezvous sizes) and cancel between two workers over the self
//! transport must give the same matches, in the same order, as two plain lists scanned in order.

use proptest::prelude::*;
use ucp::{Context, ContextParams, EpParams, Features, Op, Request, UcpConfig, Worker};

#[derive(Debug, Clone)]
enum Step {
    Post { tag: u64, mask: u64 },
    Send { tag: u64, len: usize },
    Cancel { nth: usize },
}

fn step() -> impl Strategy<Value = Step> {
    let tag = 0u64..4;
    let mask = prop_oneof![Just(u64::MAX), Just(0u64), Just(!1u64)];
    let len = prop_oneof![Just(8usize), Just(20_000), Just(150_000)];
    prop_oneof![
        3 => (tag.clone(), mask).prop_map(|(tag, mask)| Step::Post { tag, mask }),
        3 => (tag, len).prop_map(|(tag, len)| Step::Send { tag, len }),
        1 => (0usize..6).prop_map(|nth| Step::Cancel { nth }),
    ]
}

/// What a posted receive ended with, by message index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Msg(u32),
    Canceled,
}

fn body(idx: u32, len: usize) -> Vec<u8> {
    let mut v = vec![(idx % 251) as u8; len];
    v[..4].copy_from_slice(&idx.to_le_bytes());
    v
}

fn pump(a: &mut Worker, b: &mut Worker) {
    for _ in 0..200 {
        a.progress();
        b.progress();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn ucp_tag_model_matches_reference(steps in proptest::collection::vec(step(), 1..40)) {
        let ctx = Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: vec!["self".into()],
                rndv_thresh: Some(100_000),
                keepalive_interval: None,
                ..Default::default()
            }),
        }).unwrap();
        let mut a = Worker::new(&ctx).unwrap();
        let mut b = Worker::new(&ctx).unwrap();
        let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
        pump(&mut a, &mut b);

        // Model state.
        let mut m_expected: Vec<(u64, u64, usize)> = Vec::new(); // tag, mask, recv index
        let mut m_unexp: Vec<(u64, u32)> = Vec::new(); // tag, message index
        let mut m_result: Vec<Option<Got>> = Vec::new();
        // Real state.
        let mut reqs: Vec<Option<Request>> = Vec::new();
        let mut r_result: Vec<Option<Got>> = Vec::new();
        let mut sends = Vec::new();
        let mut next_msg = 0u32;

        for s in steps {
            match s {
                Step::Post { tag, mask } => {
                    let i = m_result.len();
                    match m_unexp.iter().position(|&(t, _)| (t & mask) == (tag & mask)) {
                        Some(u) => m_result.push(Some(Got::Msg(m_unexp.remove(u).1))),
                        None => { m_expected.push((tag, mask, i)); m_result.push(None); }
                    }
                    match b.tag_recv(vec![0; 200_000], tag, mask).unwrap() {
                        Op::Done(c) => {
                            let buf = c.buf.unwrap();
                            reqs.push(None);
                            r_result.push(Some(Got::Msg(u32::from_le_bytes(buf[..4].try_into().unwrap()))));
                        }
                        Op::Pending(r) => { reqs.push(Some(r)); r_result.push(None); }
                    }
                }
                Step::Send { tag, len } => {
                    let idx = next_msg;
                    next_msg += 1;
                    match m_expected.iter().position(|&(t, m, _)| (t & m) == (tag & m)) {
                        Some(e) => { let (_, _, ri) = m_expected.remove(e); m_result[ri] = Some(Got::Msg(idx)); }
                        None => m_unexp.push((tag, idx)),
                    }
                    sends.push(a.tag_send(ab, tag, &body(idx, len)).unwrap());
                }
                Step::Cancel { nth } => {
                    if m_expected.is_empty() { continue; }
                    let (_, _, ri) = m_expected.remove(nth % m_expected.len());
                    m_result[ri] = Some(Got::Canceled);
                    let r = reqs[ri].take().expect("model says pending");
                    prop_assert!(b.request_cancel(&r).unwrap(), "real receive {ri} could not be canceled");
                    let c = b.request_take(r).unwrap();
                    prop_assert_eq!(c.status, Err(ucp::Error::Canceled));
                    r_result[ri] = Some(Got::Canceled);
                }
            }
            pump(&mut a, &mut b);
            // Collect real completions.
            for (i, slot) in reqs.iter_mut().enumerate() {
                if let Some(r) = slot.take() {
                    match b.request_take(r) {
                        Ok(c) => {
                            prop_assert_eq!(&c.status, &Ok(()));
                            let buf = c.buf.unwrap();
                            let idx = u32::from_le_bytes(buf[..4].try_into().unwrap());
                            prop_assert!(buf[4..c.len].iter().all(|&x| x == (idx % 251) as u8));
                            r_result[i] = Some(Got::Msg(idx));
                        }
                        Err(r) => *slot = Some(r),
                    }
                }
            }
            prop_assert_eq!(&r_result, &m_result);
        }
        // Drain the unexpected queue with wildcards: same order as the model's.
        for &(_, idx) in &m_unexp {
            let op = b.tag_recv(vec![0; 200_000], 0, 0).unwrap();
            let c = match op {
                Op::Done(c) => c,
                Op::Pending(r) => { pump(&mut a, &mut b); b.request_take(r).expect("drained") }
            };
            let buf = c.buf.unwrap();
            prop_assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), idx);
        }
        for s in sends {
            if let Op::Pending(r) = s {
                pump(&mut a, &mut b);
                prop_assert_eq!(a.request_take(r).expect("send done").status, Ok(()));
            }
        }
    }
}
