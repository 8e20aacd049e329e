//! The one-sided ucp tests, with ucx_perftest's semantics:
//!
//! - `ucp_put_lat`: ping-pong through memory. Each side puts the message into the other's
//!   mapping, its last byte a sequence number; the other side polls that byte in its own
//!   mapping and answers with its own put. The latency is half the round trip.
//! - `ucp_put_bw`: the client puts `-O` messages at a time into the server's mapping, then
//!   flushes the endpoint; the server only progresses.
//! - `ucp_get`: the client reads the server's mapping, `-O` gets in flight.
//! - `ucp_add`, `ucp_fadd`, `ucp_swap`, `ucp_cswap`: the client applies the atomic to the
//!   server's 4- or 8-byte word (`-s 4` or `-s 8`), `-O` in flight.
//!
//! After the clock stopped, the results are checked: the server's mapping holds what the puts
//! wrote, gets read the server's pattern, and the atomics' fetched values and the final value of
//! the word add up (order-independent sums, so `-O` does not matter).

use super::{Engine, GET_FILL};
use crate::params::{TestId, TestParams};
use crate::report::Recorder;
use crate::uct_test::Role;
use std::collections::VecDeque;
use ucp::{AmoSize, Completion, MemMap, Op, Request, Rkey};
use ucs::limits::try_vec;
use ucs::{Error, Result};
use uct::AtomicOp;

/// Byte pattern of what the puts write (the last byte of a `ucp_put_lat` message is its
/// sequence number instead).
const PUT_FILL: u8 = 0xa5;

/// The peer's memory the test accesses, and this side's own mapping.
pub(crate) struct Target<'a> {
    /// This side's mapping (the peer writes and reads it).
    pub map: &'a MemMap,
    /// Start address of the peer's mapping.
    pub addr: u64,
    /// The peer's remote key, unpacked on the test's endpoint.
    pub rkey: &'a Rkey,
}

/// Sequence number of iteration `i`, never 0 (the mapping starts zeroed).
fn sn(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Byte `off` of `map` (in range: checked before the loop).
#[inline]
fn byte_at(map: &MemMap, off: usize) -> u8 {
    let mut b = [0u8; 1];
    match map.read(off, &mut b) {
        Ok(()) => b[0],
        Err(_) => 0,
    }
}

/// Runs one side of a one-sided test.
pub(crate) fn run(
    eng: &mut Engine<'_>,
    p: &TestParams,
    t: &Target<'_>,
    role: Role,
    rec: Option<&mut Recorder>,
) -> Result<()> {
    let size = p.size();
    if !p.test.is_atomic() && size > t.map.len() {
        return Err(Error::InvalidParam(format!(
            "{}: {size}-byte messages do not fit the {}-byte mapping",
            p.test,
            t.map.len()
        )));
    }
    match (p.test, role, rec) {
        (TestId::UcpPutLat, Role::Server, _) => put_lat_answer(eng, p, t),
        (TestId::UcpPutBw, Role::Server, _) => {
            eng.serve_until_peer_done()?;
            verify_put(t.map, size)
        }
        (_, Role::Server, _) => eng.serve_until_peer_done(),
        (TestId::UcpPutLat, _, Some(rec)) => put_lat(eng, p, t, rec),
        (TestId::UcpPutBw, _, Some(rec)) => {
            put_bw(eng, p, t, rec)?;
            if role == Role::Loopback {
                verify_put(t.map, size)?;
            }
            Ok(())
        }
        (TestId::UcpGet, _, Some(rec)) => get(eng, p, t, rec),
        (TestId::UcpAdd | TestId::UcpFadd | TestId::UcpSwap | TestId::UcpCswap, _, Some(rec)) => {
            atomics(eng, p, t, rec)
        }
        (test, _, None) => Err(Error::InvalidParam(format!(
            "{test}: the measuring side needs a recorder"
        ))),
        (test, _, _) => Err(Error::Unsupported(format!(
            "{test} is not a one-sided ucp test"
        ))),
    }
}

/// `ucp_put_lat`, measuring side: put, then wait for the peer's put to land in this side's
/// mapping. In loopback the endpoint's own put is the answer.
fn put_lat(eng: &mut Engine<'_>, p: &TestParams, t: &Target<'_>, rec: &mut Recorder) -> Result<()> {
    let size = p.size();
    let last = size - 1;
    let mut sbuf = try_vec("a message buffer", size, PUT_FILL)?;
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            rec.begin();
        }
        let want = sn(i);
        sbuf[last] = want;
        let op = eng.worker.put(eng.ep, &sbuf, t.addr, t.rkey)?;
        eng.finish(op)?;
        eng.wait_mem(|| byte_at(t.map, last) == want)?;
        if i >= p.warmup {
            rec.record();
        }
    }
    Ok(())
}

/// `ucp_put_lat`, answering side: wait for each message, answer with a put.
fn put_lat_answer(eng: &mut Engine<'_>, p: &TestParams, t: &Target<'_>) -> Result<()> {
    let size = p.size();
    let last = size - 1;
    let mut sbuf = try_vec("a message buffer", size, PUT_FILL)?;
    for i in 0..p.total_iterations() {
        let want = sn(i);
        eng.wait_mem(|| byte_at(t.map, last) == want)?;
        sbuf[last] = want;
        let op = eng.worker.put(eng.ep, &sbuf, t.addr, t.rkey)?;
        eng.finish(op)?;
    }
    Ok(())
}

/// Checks the target's mapping holds the puts' pattern.
fn verify_put(map: &MemMap, size: usize) -> Result<()> {
    let mut got = try_vec("a message buffer", size, 0)?;
    map.read(0, &mut got)?;
    match got.iter().position(|&b| b != PUT_FILL) {
        None => Ok(()),
        Some(at) => Err(Error::Wire(format!(
            "ucp_put_bw: byte {at} of the target's memory is {:#04x} after the puts, not {PUT_FILL:#04x}",
            got[at]
        ))),
    }
}

/// `ucp_put_bw`: `-O` puts in flight, then a flush of the endpoint (remote completion) stops
/// the clock.
fn put_bw(eng: &mut Engine<'_>, p: &TestParams, t: &Target<'_>, rec: &mut Recorder) -> Result<()> {
    let sbuf = try_vec("a message buffer", p.size(), PUT_FILL)?;
    let window = p.outstanding as usize;
    let mut inflight: VecDeque<Request> = VecDeque::with_capacity(window);
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            rec.begin();
        }
        if inflight.len() >= window {
            if let Some(r) = inflight.pop_front() {
                eng.wait(r)?;
            }
        }
        match eng.worker.put(eng.ep, &sbuf, t.addr, t.rkey)? {
            Op::Done(c) => c.status?,
            Op::Pending(r) => inflight.push_back(r),
        }
        eng.worker.progress();
        if i >= p.warmup {
            rec.record();
        }
    }
    while let Some(r) = inflight.pop_front() {
        eng.wait(r)?;
    }
    let op = eng.worker.ep_flush(eng.ep)?;
    eng.finish(op)?;
    rec.mark_end();
    Ok(())
}

/// Takes the buffer a get completion gives back; the first and last ones are checked against
/// the target's pattern.
fn get_done(c: &mut Completion, size: usize, check: bool) -> Result<Vec<u8>> {
    let b = c
        .buf
        .take()
        .ok_or_else(|| Error::Wire("a get completion gave no buffer back".into()))?;
    if b.len() != size {
        return Err(Error::Wire(format!(
            "a get gave back {} bytes, expected {size}",
            b.len()
        )));
    }
    if check {
        if let Some(at) = b.iter().position(|&x| x != GET_FILL) {
            return Err(Error::Wire(format!(
                "ucp_get: byte {at} read {:#04x}, the target holds {GET_FILL:#04x}",
                b[at]
            )));
        }
    }
    Ok(b)
}

/// `ucp_get`: `-O` gets in flight, each into its own buffer.
fn get(eng: &mut Engine<'_>, p: &TestParams, t: &Target<'_>, rec: &mut Recorder) -> Result<()> {
    let size = p.size();
    let window = p.outstanding as usize;
    let total = p.total_iterations();
    let mut free: Vec<Vec<u8>> = (0..window)
        .map(|_| try_vec("a get buffer", size, 0))
        .collect::<Result<_>>()?;
    let mut inflight: VecDeque<Request> = VecDeque::with_capacity(window);
    let mut completed = 0u64;
    let check = |n: u64| n == 0 || n + 1 == total;
    for i in 0..total {
        if i == p.warmup {
            rec.begin();
        }
        if free.is_empty() {
            if let Some(r) = inflight.pop_front() {
                let mut c = eng.wait(r)?;
                free.push(get_done(&mut c, size, check(completed))?);
                completed += 1;
            }
        }
        let mut buf = free
            .pop()
            .ok_or_else(|| Error::Wire("no free get buffer".into()))?;
        if check(i) {
            buf.fill(0);
        }
        match eng.worker.get(eng.ep, buf, t.addr, t.rkey)? {
            Op::Done(mut c) => {
                c.status.clone()?;
                free.push(get_done(&mut c, size, check(completed))?);
                completed += 1;
            }
            Op::Pending(r) => inflight.push_back(r),
        }
        if i >= p.warmup {
            rec.record();
        }
    }
    while let Some(r) = inflight.pop_front() {
        let mut c = eng.wait(r)?;
        free.push(get_done(&mut c, size, check(completed))?);
        completed += 1;
    }
    rec.mark_end();
    Ok(())
}

/// What the fetched values of an atomic test add up to.
#[derive(Default)]
struct AmoTally {
    /// Sum of the fetched (old) values, wrapping.
    sum_old: u64,
    /// Compare-and-swaps that found their compare value.
    swapped: u64,
}

impl AmoTally {
    #[inline]
    fn add(&mut self, old: u64, compare: u64, mask: u64) {
        let old = old & mask;
        self.sum_old = self.sum_old.wrapping_add(old);
        if old == compare & mask {
            self.swapped += 1;
        }
    }
}

/// Issues iteration `i`'s atomic: add 1, fetch-and-add 1, swap in `i + 1`, or
/// compare-and-swap `i` to `i + 1`.
#[inline]
fn atomic_op(eng: &mut Engine<'_>, p: &TestParams, t: &Target<'_>, i: u64) -> Result<Op> {
    let size = if p.size() == 8 {
        AmoSize::U64
    } else {
        AmoSize::U32
    };
    let (w, ep) = (&mut *eng.worker, eng.ep);
    match p.test {
        TestId::UcpAdd => w.atomic_post(ep, AtomicOp::Add, size, 1, t.addr, t.rkey),
        TestId::UcpFadd => w.atomic_fetch(ep, AtomicOp::Add, size, 1, t.addr, t.rkey),
        TestId::UcpSwap => w.atomic_fetch(ep, AtomicOp::Swap, size, i + 1, t.addr, t.rkey),
        _ => w.atomic_cswap(ep, size, i, i + 1, t.addr, t.rkey),
    }
}

/// The atomic tests: `-O` operations in flight on the target's word.
fn atomics(eng: &mut Engine<'_>, p: &TestParams, t: &Target<'_>, rec: &mut Recorder) -> Result<()> {
    let wide = p.size() == 8;
    let mask = if wide { u64::MAX } else { u32::MAX as u64 };
    let window = p.outstanding as usize;
    let total = p.total_iterations();
    let mut inflight: VecDeque<(Request, u64)> = VecDeque::with_capacity(window);
    let mut tally = AmoTally::default();
    for i in 0..total {
        if i == p.warmup {
            rec.begin();
        }
        if inflight.len() >= window {
            if let Some((r, cmp)) = inflight.pop_front() {
                let c = eng.wait(r)?;
                tally.add(c.value, cmp, mask);
            }
        }
        match atomic_op(eng, p, t, i)? {
            Op::Done(c) => {
                c.status.clone()?;
                tally.add(c.value, i, mask);
            }
            Op::Pending(r) => inflight.push_back((r, i)),
        }
        if i >= p.warmup {
            rec.record();
        }
    }
    while let Some((r, cmp)) = inflight.pop_front() {
        let c = eng.wait(r)?;
        tally.add(c.value, cmp, mask);
    }
    if p.test == TestId::UcpAdd {
        // Non-fetching atomics complete locally; the flush completes them at the target.
        let op = eng.worker.ep_flush(eng.ep)?;
        eng.finish(op)?;
    }
    rec.mark_end();
    // The clock has stopped: read the word back and check the operations added up.
    let size = if wide { AmoSize::U64 } else { AmoSize::U32 };
    let op = eng
        .worker
        .atomic_fetch(eng.ep, AtomicOp::Add, size, 0, t.addr, t.rkey)?;
    let last = eng.finish(op)?.value & mask;
    check_atomics(p.test, total, p.outstanding, &tally, last, mask)
}

/// Checks the atomics' results (see [`atomics`]): `last` is the word's final value.
fn check_atomics(
    test: TestId,
    total: u64,
    outstanding: u32,
    tally: &AmoTally,
    last: u64,
    mask: u64,
) -> Result<()> {
    // Sum of 0..n, modulo the word size.
    let tri = |n: u64| ((n as u128 * (n as u128 + 1) / 2) as u64) & mask;
    let ok = match test {
        TestId::UcpAdd => last == total & mask,
        TestId::UcpFadd => last == total & mask && tally.sum_old & mask == tri(total - 1),
        // Every value 0, 1..=total is read exactly once: as an old value or as the last one.
        TestId::UcpSwap => tally.sum_old.wrapping_add(last) & mask == tri(total),
        // Each successful compare-and-swap moves the word up by one; one at a time, all succeed.
        TestId::UcpCswap => {
            last == tally.swapped & mask && (outstanding > 1 || tally.swapped == total)
        }
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Wire(format!(
            "{test}: after {total} operations the word holds {last}, the fetched values sum to {} \
             and {} compare-and-swaps matched: the atomics did not all apply once",
            tally.sum_old & mask,
            tally.swapped
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(test: TestId, olds: &[(u64, u64)], mask: u64) -> AmoTally {
        let _ = test;
        let mut t = AmoTally::default();
        for &(old, cmp) in olds {
            t.add(old, cmp, mask);
        }
        t
    }

    #[test]
    fn sequence_numbers_are_never_zero() {
        assert!((0..1000).all(|i| sn(i) != 0));
        assert_ne!(sn(0), sn(1));
    }

    #[test]
    fn atomic_checks_accept_a_correct_run_and_reject_a_lost_operation() {
        let m = u64::MAX;
        // fadd of 1, three times, in any order of completion: olds 0, 1, 2; final 3.
        let t = tally(TestId::UcpFadd, &[(2, 2), (0, 0), (1, 1)], m);
        assert!(check_atomics(TestId::UcpFadd, 3, 4, &t, 3, m).is_ok());
        assert!(check_atomics(TestId::UcpFadd, 3, 4, &t, 2, m).is_err());
        let lost = tally(TestId::UcpFadd, &[(0, 0), (1, 1), (1, 2)], m);
        assert!(check_atomics(TestId::UcpFadd, 3, 4, &lost, 3, m).is_err());
        // swap in 1, 2, 3: olds 0, 1, 2 and final 3; reordered: olds 0, 2, 1... still sums.
        let t = tally(TestId::UcpSwap, &[(0, 0), (1, 1), (2, 2)], m);
        assert!(check_atomics(TestId::UcpSwap, 3, 1, &t, 3, m).is_ok());
        assert!(check_atomics(TestId::UcpSwap, 3, 1, &t, 2, m).is_err());
        // cswap i -> i+1: all match one at a time.
        let t = tally(TestId::UcpCswap, &[(0, 0), (1, 1), (2, 2)], m);
        assert!(check_atomics(TestId::UcpCswap, 3, 1, &t, 3, m).is_ok());
        let t = tally(TestId::UcpCswap, &[(0, 0), (1, 1), (1, 2)], m);
        assert!(check_atomics(TestId::UcpCswap, 3, 1, &t, 2, m).is_err());
        assert!(check_atomics(TestId::UcpCswap, 3, 8, &t, 2, m).is_ok());
        assert!(check_atomics(TestId::UcpAdd, 5, 1, &AmoTally::default(), 5, m).is_ok());
        assert!(check_atomics(TestId::UcpAdd, 5, 1, &AmoTally::default(), 4, m).is_err());
    }

    #[test]
    fn atomic_checks_wrap_at_32_bits() {
        let m = u32::MAX as u64;
        let n = (1u64 << 32) + 2;
        assert!(check_atomics(TestId::UcpAdd, n, 1, &AmoTally::default(), 2, m).is_ok());
        // Old values are compared at the word's width.
        let mut t = AmoTally::default();
        t.add((1 << 32) + 5, 5, m);
        assert_eq!(t.swapped, 1);
        assert_eq!(t.sum_old, 5);
    }
}
