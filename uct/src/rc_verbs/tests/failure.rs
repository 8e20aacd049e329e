//! rc_verbs endpoints whose peer is gone: error completions fail the endpoint, whether or not
//! a signaled request or a flush is waiting.

use super::*;

#[test]
fn dead_peer_becomes_an_endpoint_error() {
    let Some(dev) = device() else { return };
    let md = RcVerbs::open_md(&dev).unwrap();
    let mut i1 = RcVerbsIface::open(&md, &dev, cfg()).unwrap();
    let mut i2 = RcVerbsIface::open(&md, &dev, cfg()).unwrap();
    let mut a = i1.ep_create().unwrap();
    let mut b = i2.ep_create().unwrap();
    let (aa, ba) = (a.ep_address().unwrap(), b.ep_address().unwrap());
    a.connect_to_ep(i2.device_address(), &ba).unwrap();
    b.connect_to_ep(i1.device_address(), &aa).unwrap();
    drop(b);
    drop(i2);
    let mut sink = Sink::default();
    let r = a.am_bcopy(1, |buf| {
        buf[0] = 1;
        1
    });
    assert_eq!(r.unwrap(), Outcome::Done(1));
    assert_eq!(a.flush(CompletionId(5)).unwrap(), Outcome::InProgress);
    wait(&mut i1, &mut sink, "peer failure", |s| !s.errors.is_empty());
    println!("endpoint error: {}", sink.errors[0].1);
    assert!(matches!(
        sink.errors[0].1,
        Error::PeerFailure(_) | Error::ConnectionReset(_)
    ));
    wait(&mut i1, &mut sink, "flush failure", |s| {
        s.comps.iter().any(|c| c.0 == 5)
    });
    assert!(sink.comps.iter().find(|c| c.0 == 5).unwrap().1.is_err());
}

/// The send CQ is looked at only now and then while no signaled request is in flight: the
/// error completion of an unsignaled short message to a dead peer still fails the endpoint,
/// and the send-queue slots of unsignaled messages come back with the next signaled one.
#[test]
fn unsignaled_sends_free_slots_and_report_a_dead_peer() {
    let Some(dev) = device() else { return };
    let md = RcVerbs::open_md(&dev).unwrap();
    let mut i1 = RcVerbsIface::open(&md, &dev, cfg()).unwrap();
    let mut i2 = RcVerbsIface::open(&md, &dev, cfg()).unwrap();
    let mut a = i1.ep_create().unwrap();
    let mut b = i2.ep_create().unwrap();
    let (aa, ba) = (a.ep_address().unwrap(), b.ep_address().unwrap());
    a.connect_to_ep(i2.device_address(), &ba).unwrap();
    b.connect_to_ep(i1.device_address(), &aa).unwrap();
    let mut sink = Sink::default();
    let mut s2 = Sink::default();
    // Three times the send queue, a receive-queue's worth at a time: plain inline messages,
    // one in `moderation` signaled, must never run out of slots for good.
    let depth = cfg().tx_queue_len as usize;
    let burst = cfg().rx_queue_len as usize;
    let mut sent = 0;
    while sent < 3 * depth {
        let mut n = 0;
        while n < burst {
            match a.am_short(1, (sent + n) as u64, b"x").unwrap() {
                Outcome::Done(()) => n += 1,
                _ => {
                    i1.progress(&mut sink);
                }
            }
        }
        sent += n;
        wait(&mut i2, &mut s2, "a burst", |s| s.ams.len() == sent);
        i1.progress(&mut sink);
    }
    assert!(sink.errors.is_empty(), "{:?}", sink.errors);
    let got: Vec<u64> = s2
        .ams
        .iter()
        .map(|(_, d)| u64::from_le_bytes(d[..8].try_into().unwrap()))
        .collect();
    assert_eq!(got, (0..sent as u64).collect::<Vec<_>>());
    drop(b);
    drop(i2);
    // One message, not signaled (moderation 8), and no flush: only its error completion
    // tells.
    loop {
        match a.am_short(1, 0, b"y") {
            Ok(Outcome::Done(())) => break,
            Ok(_) => {
                i1.progress(&mut sink);
            }
            Err(e) => panic!("am_short: {e}"),
        }
    }
    wait(&mut i1, &mut sink, "peer failure", |s| !s.errors.is_empty());
    assert!(matches!(
        sink.errors[0].1,
        Error::PeerFailure(_) | Error::ConnectionReset(_)
    ));
}

/// A peer that received everything and then died is detected by the flush with the default
/// timeout/retry configuration (run by hand with `--ignored`: it takes about 7 s; with
/// `RUCX_RC_RETRY_COUNT=7` rxe retries forever and this fails).
#[test]
#[ignore]
fn dead_peer_with_default_timeouts() {
    let Some(dev) = device() else { return };
    let md = RcVerbs::open_md(&dev).unwrap();
    let cfg = RcConfig::from_env().unwrap();
    println!(
        "timeout exponent {}, retries {}",
        cfg.timeout, cfg.retry_count
    );
    let mut i1 = RcVerbsIface::open(&md, &dev, cfg.clone()).unwrap();
    let mut i2 = RcVerbsIface::open(&md, &dev, cfg).unwrap();
    let mut a = i1.ep_create().unwrap();
    let mut b = i2.ep_create().unwrap();
    let (aa, ba) = (a.ep_address().unwrap(), b.ep_address().unwrap());
    a.connect_to_ep(i2.device_address(), &ba).unwrap();
    b.connect_to_ep(i1.device_address(), &aa).unwrap();
    let mut sink = Sink::default();
    assert_eq!(a.am_short(1, 1, b"x").unwrap(), Outcome::DONE);
    let mut s2 = Sink::default();
    wait(&mut i2, &mut s2, "message", |s| !s.ams.is_empty());
    drop(b);
    drop(i2);
    let start = Instant::now();
    assert_eq!(a.flush(CompletionId(5)).unwrap(), Outcome::InProgress);
    let mut done = false;
    while start.elapsed() < Duration::from_secs(60) && !done {
        i1.progress(&mut sink);
        done = sink.comps.iter().any(|c| c.0 == 5);
    }
    println!(
        "flush completion after {:?}: {:?}; errors {:?}",
        start.elapsed(),
        sink.comps,
        sink.errors
    );
    assert!(
        done,
        "a dead peer must be detected with the default retry count"
    );
    assert!(sink.comps.iter().find(|c| c.0 == 5).unwrap().1.is_err());
}
