//! The tag tests with traffic both ways at once, which ucx_perftest lacks: `tag_bibw` (both
//! sides stream: each keeps `-O` sends and `-O` receives in flight) and `tag_exchange` (each
//! iteration both sides post a receive, send one message and wait for both, as
//! `MPI_Sendrecv`). Both sides run the same loop and the client records, so the bandwidth
//! columns are per direction and the latency columns the time per iteration. In loopback the
//! one worker talks to itself through the same loops.

use super::{retire_oldest, take_buf, Engine, Window};
use crate::params::TestParams;
use crate::report::Recorder;
use ucp::Op;
use ucs::limits::try_vec;
use ucs::{Error, Result};

/// `tag_bibw`: sends and receives interleaved, `-O` of each in flight, the worker progressed
/// once per iteration. With `rec` (the client, or a loopback run) it records each iteration.
pub(super) fn stream(
    eng: &mut Engine<'_>,
    p: &TestParams,
    mut rec: Option<&mut Recorder>,
) -> Result<()> {
    let size = p.size();
    let mut sends = Window::new(p.outstanding as usize, size)?;
    let mut recvs = Window::new(p.outstanding as usize, size)?;
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.begin();
            }
        }
        if recvs.free.is_empty() {
            retire_oldest(eng, &mut recvs, Some(size))?;
        }
        let rb = recvs
            .free
            .pop()
            .ok_or_else(|| Error::Wire("no free receive buffer".into()))?;
        match eng.worker.tag_recv(rb, super::TAG, ucp::TAG_MASK_EXACT)? {
            Op::Done(mut c) => {
                c.status.clone()?;
                super::check_len(&c, size)?;
                recvs.free.push(take_buf(&mut c, "receive")?);
            }
            Op::Pending(r) => recvs.inflight.push_back((r, None)),
        }
        if sends.free.is_empty() {
            retire_oldest(eng, &mut sends, None)?;
        }
        let sb = sends
            .free
            .pop()
            .ok_or_else(|| Error::Wire("no free send buffer".into()))?;
        let mut kept = Some(sb);
        match eng.send(&mut kept, false)? {
            Some(r) => sends.inflight.push_back((r, kept)),
            // A send that finished at once left the buffer in `kept` (or failed).
            None => sends.free.extend(kept),
        }
        eng.worker.progress();
        if i >= p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.record();
            }
        }
    }
    while !sends.inflight.is_empty() {
        retire_oldest(eng, &mut sends, None)?;
    }
    while !recvs.inflight.is_empty() {
        retire_oldest(eng, &mut recvs, Some(size))?;
    }
    if let Some(r) = rec {
        // The operations still in flight are part of the run.
        r.mark_end();
    }
    Ok(())
}

/// `tag_exchange`: each iteration posts a receive, sends one message and waits for both.
pub(super) fn exchange(
    eng: &mut Engine<'_>,
    p: &TestParams,
    mut rec: Option<&mut Recorder>,
) -> Result<()> {
    let size = p.size();
    let mut sbuf = Some(try_vec("a message buffer", size, 0xa5)?);
    let mut rbuf = Some(try_vec("a message buffer", size, 0)?);
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.begin();
            }
        }
        let recv_buf = rbuf
            .take()
            .ok_or_else(|| Error::Wire("lost receive buffer".into()))?;
        let rop = eng.post_recv(recv_buf, size)?;
        eng.send_finished(&mut sbuf, false)?;
        rbuf = eng.finish_recv(rop, size)?;
        if i >= p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.record();
            }
        }
    }
    Ok(())
}
