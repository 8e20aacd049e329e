//! Cost of one tagged message through ucp's Rust API, both sides in one thread, so that an
//! instruction counter (callgrind) sees the same count run after run.
//!
//! Usage: `msgcost SIZE ITERS [expected|unexpected|idle|am] [TLS]` (TLS: `posix` by default).
//! Two workers of one context; worker A has an endpoint to worker B. Each iteration posts a
//! receive on B and then sends SIZE bytes from A ("expected"), or sends first and progresses
//! both workers until B's probe sees the message waiting in its unexpected queue before posting
//! the receive ("unexpected"), then progresses both until the receive completes. "idle": one
//! `progress` call on A per iteration. "am": A sends an active message of SIZE bytes (no user
//! header), B's handler takes it, and the data goes back to B's pool.
//! The first and last byte of every message are checked. Prints `ns_per_msg SIZE NS`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use ucp::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker, TAG_MASK_EXACT};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let size: usize = args.get(1).map_or(Ok(8), |s| s.parse())?;
    let iters: usize = args.get(2).map_or(Ok(100_000), |s| s.parse())?;
    let mode = args.get(3).map_or("expected", String::as_str);
    let tls = args.get(4).map_or("posix", String::as_str);
    let cfg = UcpConfig {
        tls: vec![tls.to_string()],
        keepalive_interval: None,
        self_across_workers: false,
        ..Default::default()
    };
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::AM,
        config: Some(cfg),
    })?;
    let mut a = Worker::new(&ctx)?;
    let mut b = Worker::new(&ctx)?;
    let ab = a.ep_create(b.address(), EpParams::default())?;
    let msg: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
    let mut buf = Some(vec![0u8; size]);
    // The active message B's handler took: its header's first byte and its data.
    type AmGot = Rc<RefCell<Option<(u8, Vec<u8>)>>>;
    let am_got: AmGot = Rc::default();
    let got_in = am_got.clone();
    b.am_set_handler(5, move |_, hdr, data| {
        *got_in.borrow_mut() = Some((hdr.first().copied().unwrap_or(0), data));
    });
    // No user header, as capi/bench/msgcost.c sends its active messages.
    let am_hdr: [u8; 0] = [];
    let am_round = |a: &mut Worker, b: &mut Worker| -> Result<(), Box<dyn std::error::Error>> {
        let mut s = match a.am_send(ab, 5, &am_hdr, &msg)? {
            Op::Done(c) => {
                c.status?;
                None
            }
            Op::Pending(p) => Some(p),
        };
        loop {
            a.progress();
            b.progress();
            if let Some(p) = s.take() {
                if let Err(p) = a.request_take(p) {
                    s = Some(p);
                }
            }
            if s.is_none() && am_got.borrow().is_some() {
                break;
            }
        }
        let (h, data) = am_got.borrow_mut().take().ok_or("no message")?;
        if h != 0 || data.len() != size || (size > 0 && data[size - 1] != msg[size - 1]) {
            return Err("wrong active message".into());
        }
        b.am_data_release(data);
        Ok(())
    };
    let mut round = |a: &mut Worker, b: &mut Worker| -> Result<(), Box<dyn std::error::Error>> {
        let mut r = None;
        if mode == "expected" {
            r = Some(b.tag_recv(buf.take().ok_or("no buffer")?, 1, TAG_MASK_EXACT)?);
        }
        // As ucp_tag_send_nbx: nothing (None) for a send that finished at once.
        let mut s = a.tag_send_nb(ab, 1, &msg)?;
        if r.is_none() {
            // Unexpected: the message waits at B before the receive is posted.
            while b.tag_probe(1, TAG_MASK_EXACT, false).is_none() {
                a.progress();
                b.progress();
            }
        }
        let r = match r {
            Some(r) => r,
            None => b.tag_recv(buf.take().ok_or("no buffer")?, 1, TAG_MASK_EXACT)?,
        };
        let (mut r, mut got) = match r {
            Op::Done(c) => (None, Some(c)),
            Op::Pending(p) => (Some(p), None),
        };
        while got.is_none() || s.is_some() {
            a.progress();
            b.progress();
            if let Some(p) = s.take() {
                if let Err(p) = a.request_take(p) {
                    s = Some(p);
                }
            }
            if let Some(p) = r.take() {
                match b.request_take(p) {
                    Ok(c) => got = Some(c),
                    Err(p) => r = Some(p),
                }
            }
        }
        let c = got.ok_or("no completion")?;
        c.status.clone()?;
        let data = c.buf.ok_or("no buffer back")?;
        if c.len != size || (size > 0 && (data[0] != msg[0] || data[size - 1] != msg[size - 1])) {
            return Err("wrong data".into());
        }
        buf = Some(data);
        Ok(())
    };
    if mode == "idle" {
        round(&mut a, &mut b)?;
        let t = Instant::now();
        for _ in 0..iters {
            a.progress();
        }
        println!(
            "ns_per_msg {size} {:.1}",
            t.elapsed().as_nanos() as f64 / iters as f64
        );
        return Ok(());
    }
    if mode == "am" {
        for _ in 0..1000 {
            am_round(&mut a, &mut b)?;
        }
        let t = Instant::now();
        for _ in 0..iters {
            am_round(&mut a, &mut b)?;
        }
        println!(
            "ns_per_msg {size} {:.1}",
            t.elapsed().as_nanos() as f64 / iters as f64
        );
        return Ok(());
    }
    for _ in 0..1000 {
        round(&mut a, &mut b)?;
    }
    let t = Instant::now();
    for _ in 0..iters {
        round(&mut a, &mut b)?;
    }
    println!(
        "ns_per_msg {size} {:.1}",
        t.elapsed().as_nanos() as f64 / iters as f64
    );
    Ok(())
}
