//! The active-message tests (`ucp_am_lat`, `ucp_am_bw`) and the stream-API tests
//! (`stream_lat`, `stream_bw`) on the [`Engine`] of the ucp tests.

use super::{retire_oldest, take_buf, Engine, Window, AM_ID};
use crate::params::TestParams;
use crate::report::Recorder;
use crate::uct_test::Role;
use std::collections::VecDeque;
use ucp::{Op, Request};
use ucs::limits::try_vec;
use ucs::{Error, Result};

/// Waits until `n` active messages have arrived, returning their buffers to the worker.
fn wait_am(eng: &mut Engine<'_>, n: u64) -> Result<()> {
    eng.idle = 0;
    while eng.stash.count.get() < n {
        eng.worker.progress();
        eng.stash.release(eng.worker);
        eng.spin()?;
    }
    eng.stash.release(eng.worker);
    Ok(())
}

/// Active-message ping-pong (`ucp_am_lat`).
pub(super) fn am_ping_pong(
    eng: &mut Engine<'_>,
    p: &TestParams,
    mut rec: Option<&mut Recorder>,
    role: Role,
) -> Result<()> {
    let sbuf = try_vec("a message buffer", p.size(), 0xa5)?;
    let sender_first = role != Role::Server;
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.begin();
            }
        }
        if !sender_first {
            wait_am(eng, i + 1)?;
        }
        let op = eng.worker.am_send(eng.ep, AM_ID, &[], &sbuf)?;
        eng.finish(op)?;
        if sender_first {
            wait_am(eng, i + 1)?;
        }
        if i >= p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.record();
            }
        }
    }
    Ok(())
}

/// Active-message stream sender (`ucp_am_bw`), `-O` sends in flight; in loopback the messages
/// come back to this worker and are counted too.
pub(super) fn am_send_stream(
    eng: &mut Engine<'_>,
    p: &TestParams,
    rec: &mut Recorder,
    role: Role,
) -> Result<()> {
    let size = p.size();
    let mut w = Window::new(p.outstanding as usize, size)?;
    let total = p.total_iterations();
    for i in 0..total {
        if i == p.warmup {
            rec.begin();
        }
        if w.free.is_empty() {
            retire_oldest(eng, &mut w, None)?;
        }
        let buf = w
            .free
            .pop()
            .ok_or_else(|| Error::Wire("no free send buffer".into()))?;
        match eng.worker.am_send_vec(eng.ep, AM_ID, &[], buf)? {
            Op::Done(mut c) => {
                c.status.clone()?;
                w.free.push(take_buf(&mut c, "send")?);
            }
            Op::Pending(r) => w.inflight.push_back((r, None)),
        }
        eng.worker.progress();
        eng.stash.release(eng.worker);
        if i >= p.warmup {
            rec.record();
        }
    }
    while !w.inflight.is_empty() {
        retire_oldest(eng, &mut w, None)?;
    }
    if role == Role::Loopback {
        wait_am(eng, total)?;
    }
    rec.mark_end();
    Ok(())
}

/// Active-message stream receiver: counts every message.
pub(super) fn am_receive_stream(eng: &mut Engine<'_>, p: &TestParams) -> Result<()> {
    wait_am(eng, p.total_iterations())
}

/// Stream ping-pong (`stream_lat`).
pub(super) fn stream_ping_pong(
    eng: &mut Engine<'_>,
    p: &TestParams,
    mut rec: Option<&mut Recorder>,
    role: Role,
) -> Result<()> {
    let size = p.size();
    let sbuf = try_vec("a message buffer", size, 0xa5)?;
    let mut rbuf = Some(try_vec("a message buffer", size, 0)?);
    let sender_first = role != Role::Server;
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.begin();
            }
        }
        if sender_first {
            let op = eng.worker.stream_send(eng.ep, &sbuf)?;
            eng.finish(op)?;
        }
        let b = rbuf
            .take()
            .ok_or_else(|| Error::Wire("lost receive buffer".into()))?;
        let op = eng.worker.stream_recv(eng.ep, b)?;
        let mut c = eng.finish(op)?;
        rbuf = Some(take_buf(&mut c, "stream receive")?);
        if !sender_first {
            let op = eng.worker.stream_send(eng.ep, &sbuf)?;
            eng.finish(op)?;
        }
        if i >= p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.record();
            }
        }
    }
    Ok(())
}

/// Stream sender (`stream_bw`): `-O` sends in flight; in loopback the bytes are read back too.
pub(super) fn stream_send(
    eng: &mut Engine<'_>,
    p: &TestParams,
    rec: &mut Recorder,
    role: Role,
) -> Result<()> {
    let size = p.size();
    let sbuf = try_vec("a message buffer", size, 0x5a)?;
    let mut inflight: VecDeque<Request> = VecDeque::with_capacity(p.outstanding as usize);
    let mut rbuf = Some(try_vec("a message buffer", size, 0)?);
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            rec.begin();
        }
        if inflight.len() >= p.outstanding as usize {
            if let Some(r) = inflight.pop_front() {
                eng.wait(r)?;
            }
        }
        match eng.worker.stream_send(eng.ep, &sbuf)? {
            Op::Done(c) => c.status?,
            Op::Pending(r) => inflight.push_back(r),
        }
        if role == Role::Loopback {
            let b = rbuf
                .take()
                .ok_or_else(|| Error::Wire("lost receive buffer".into()))?;
            let op = eng.worker.stream_recv(eng.ep, b)?;
            let mut c = eng.finish(op)?;
            rbuf = Some(take_buf(&mut c, "stream receive")?);
        }
        eng.worker.progress();
        if i >= p.warmup {
            rec.record();
        }
    }
    while let Some(r) = inflight.pop_front() {
        eng.wait(r)?;
    }
    rec.mark_end();
    Ok(())
}

/// Stream receiver: reads every message's bytes in order.
pub(super) fn stream_receive(eng: &mut Engine<'_>, p: &TestParams) -> Result<()> {
    let mut rbuf = Some(try_vec("a message buffer", p.size(), 0)?);
    for _ in 0..p.total_iterations() {
        let b = rbuf
            .take()
            .ok_or_else(|| Error::Wire("lost receive buffer".into()))?;
        let op = eng.worker.stream_recv(eng.ep, b)?;
        let mut c = eng.finish(op)?;
        rbuf = Some(take_buf(&mut c, "stream receive")?);
    }
    Ok(())
}
