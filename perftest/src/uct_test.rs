//! The uct-level tests: one transport, one device, UCX's test semantics.
//!
//! The measurement loops allocate nothing and take no locks: they busy-poll the interface, and
//! an operation refused with `NoResource` is retried after progress (back-pressure).

use crate::params::{Layout, TestId, TestParams};
use crate::report::Recorder;
use crate::wire::{AddressInfo, Channel};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use uct::{
    AnyEp, AnyIface, AnyMd, AtomicOp, AtomicOps, CompletionId, Endpoint, EpId, Error, EventSink,
    Iface, IfaceAttr, IfaceFlags, Iov, MdFlags, MemHandle, MemoryDomain, Outcome, RemoteKey,
    Result,
};

/// Active-message id of test data.
pub const AM_DATA: u8 = 0;
/// Active-message id of flow-control credits (payload: u64 count, little-endian).
pub const AM_CREDIT: u8 = 1;
const COMP_OP: CompletionId = CompletionId(1);
const COMP_FLUSH: CompletionId = CompletionId(2);

/// Which half of the test this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Measures and prints.
    Client,
    /// Answers the client.
    Server,
    /// Both halves in one process, the endpoint connected to its own interface (`-l`).
    Loopback,
}

mod caps;
mod ops;

pub use caps::check_caps;
use ops::*;

/// Registered memory plus the heap allocation behind it when the domain only registers.
struct Region {
    memh: MemHandle,
    // Declared after `memh`, so it is freed after the registration is dropped.
    _backing: Option<Vec<u64>>,
}

impl Region {
    fn new(md: &AnyMd, len: usize) -> Result<Region> {
        let len = len.max(8).next_multiple_of(64);
        let flags = md.attr().flags;
        if flags.contains(MdFlags::ALLOC) {
            return Ok(Region {
                memh: md.mem_alloc(len)?,
                _backing: None,
            });
        }
        if flags.contains(MdFlags::REG) {
            let mut backing = vec![0u64; len / 8];
            let ptr = NonNull::new(backing.as_mut_ptr().cast::<u8>())
                .ok_or_else(|| Error::NoMemory("empty allocation".into()))?;
            // SAFETY: `backing` owns `len` bytes at `ptr`, is never resized, and is dropped after
            // `memh` (field order), so the memory outlives the registration.
            let memh = unsafe { md.mem_reg(ptr, len)? };
            return Ok(Region {
                memh,
                _backing: Some(backing),
            });
        }
        Err(Error::Unsupported(format!(
            "memory domain {} can neither allocate nor register memory",
            md.name()
        )))
    }
}

/// Reads a word of a region that a peer writes through the transport.
struct Watch {
    ptr: NonNull<u8>,
    len: usize,
    _memh: MemHandle,
}

impl Watch {
    fn new(memh: &MemHandle) -> Result<Watch> {
        let ptr = NonNull::new(memh.addr())
            .ok_or_else(|| Error::InvalidParam("null memory region".into()))?;
        Ok(Watch {
            ptr,
            len: memh.len(),
            _memh: memh.clone(),
        })
    }
    #[inline]
    fn byte(&self, off: usize) -> u8 {
        assert!(off < self.len);
        // SAFETY: `off` is inside the region, which `_memh` keeps mapped; peers write it
        // concurrently (through shared memory or the transport), so read it atomically.
        unsafe { (*self.ptr.as_ptr().add(off).cast::<AtomicU8>()).load(Ordering::Acquire) }
    }
    #[inline]
    fn word64(&self) -> u64 {
        assert!(self.len >= 8 && self.ptr.as_ptr().align_offset(8) == 0);
        // SAFETY: the region is at least 8 bytes, 8-aligned and kept mapped by `_memh`; remote
        // atomics update it concurrently, so read it atomically.
        unsafe { (*self.ptr.as_ptr().cast::<AtomicU64>()).load(Ordering::Acquire) }
    }
    #[inline]
    fn word32(&self) -> u32 {
        assert!(self.len >= 4 && self.ptr.as_ptr().align_offset(4) == 0);
        // SAFETY: as for `word64`, with 4 bytes.
        unsafe { (*self.ptr.as_ptr().cast::<AtomicU32>()).load(Ordering::Acquire) }
    }
}

/// What progress delivered: counters only, so the sink never allocates.
#[derive(Default)]
struct Sink {
    am: u64,
    credits: u64,
    comps: u64,
    loop_credit: bool,
    err: Option<Error>,
}

impl EventSink for Sink {
    #[inline]
    fn am(&mut self, id: u8, data: &[u8]) {
        match id {
            AM_DATA => {
                self.am += 1;
                if self.loop_credit {
                    self.credits += 1;
                }
            }
            AM_CREDIT => {
                if let Some(b) = data.get(..8) {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.credits += u64::from_le_bytes(a);
                } else if self.err.is_none() {
                    self.err = Some(Error::Wire(format!(
                        "credit message of {} bytes, expected 8",
                        data.len()
                    )));
                }
            }
            _ => {
                if self.err.is_none() {
                    self.err = Some(Error::Wire(format!("unexpected active message id {id}")));
                }
            }
        }
    }
    #[inline]
    fn completion(&mut self, _comp: CompletionId, result: Result<u64>) {
        self.comps += 1;
        if let Err(e) = result {
            if self.err.is_none() {
                self.err = Some(e);
            }
        }
    }
    fn ep_error(&mut self, _ep: EpId, err: Error) {
        if self.err.is_none() {
            self.err = Some(err);
        }
    }
}

/// How often (in spins) a waiting loop checks that the peer is still there.
const PEER_CHECK_SPINS: u32 = 1 << 16;

struct Engine<'a> {
    iface: &'a mut AnyIface,
    ep: &'a mut AnyEp,
    sink: Sink,
    chan: Option<&'a Channel>,
    issued: u64,
    spins: u32,
    /// When the peer said it finished (it may do so while this side drains its last completions).
    peer_done: Option<std::time::Instant>,
    /// Spins of the current wait.
    idle: u32,
}

/// Spins of one wait after which each further spin yields the CPU.
pub(crate) const YIELD_AFTER: u32 = 1 << 14;

/// How long a side keeps waiting after its peer finished cleanly.
const AFTER_PEER_DONE: std::time::Duration = std::time::Duration::from_secs(30);

/// Checks that the peer is still running, or finished cleanly not too long ago.
pub(crate) fn check_peer(
    chan: Option<&Channel>,
    peer_done: &mut Option<std::time::Instant>,
) -> Result<()> {
    let Some(c) = chan else { return Ok(()) };
    match peer_done {
        Some(t) if t.elapsed() > AFTER_PEER_DONE => Err(Error::Timeout(format!(
            "{} finished {} s ago and this side is still waiting for the test to complete",
            c.peer(),
            AFTER_PEER_DONE.as_secs()
        ))),
        Some(_) => Ok(()),
        None => {
            if c.peer_finished()? {
                *peer_done = Some(std::time::Instant::now());
            }
            Ok(())
        }
    }
}

impl Engine<'_> {
    #[inline]
    fn progress(&mut self) -> Result<()> {
        self.iface.progress(&mut self.sink);
        match self.sink.err.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Counts a spin; every [`PEER_CHECK_SPINS`] makes sure the peer has not gone away. A wait
    /// longer than [`YIELD_AFTER`] spins yields the CPU on each spin: the peer may be waiting
    /// for this very core (more busy processes than cores).
    #[inline]
    fn spin(&mut self) -> Result<()> {
        self.idle += 1;
        if self.idle > YIELD_AFTER {
            std::thread::yield_now();
        }
        self.spins = self.spins.wrapping_add(1);
        if self.spins & (PEER_CHECK_SPINS - 1) == 0 {
            self.check_peer()?;
        }
        Ok(())
    }

    #[cold]
    fn check_peer(&mut self) -> Result<()> {
        check_peer(self.chan, &mut self.peer_done)
    }

    /// Progresses until `cond` holds.
    #[inline]
    fn wait(&mut self, mut cond: impl FnMut(&Sink) -> bool) -> Result<()> {
        self.idle = 0;
        while !cond(&self.sink) {
            self.progress()?;
            self.spin()?;
        }
        Ok(())
    }

    /// Progresses until `cond` holds; `cond` reads memory the peer writes.
    #[inline]
    fn wait_mem(&mut self, mut cond: impl FnMut() -> bool) -> Result<()> {
        self.idle = 0;
        while !cond() {
            self.progress()?;
            self.spin()?;
        }
        Ok(())
    }

    /// Runs `op` until it is not refused for resources; counts in-flight operations.
    #[inline]
    fn issue<T>(
        &mut self,
        mut op: impl FnMut(&mut AnyEp) -> Result<Outcome<T>>,
    ) -> Result<Option<T>> {
        self.idle = 0;
        loop {
            match op(self.ep)? {
                Outcome::Done(v) => return Ok(Some(v)),
                Outcome::InProgress => {
                    self.issued += 1;
                    return Ok(None);
                }
                Outcome::NoResource => {
                    self.progress()?;
                    self.spin()?;
                }
            }
        }
    }

    /// Waits until fewer than `max` operations are in flight.
    #[inline]
    fn window(&mut self, max: u64) -> Result<()> {
        self.idle = 0;
        while self.issued - self.sink.comps >= max {
            self.progress()?;
            self.spin()?;
        }
        Ok(())
    }

    /// Waits for every operation in flight.
    fn drain(&mut self) -> Result<()> {
        self.window(1)
    }

    /// Flushes the endpoint and waits for it.
    fn flush(&mut self) -> Result<()> {
        self.issue(|ep| ep.flush(COMP_FLUSH))?;
        self.drain()
    }

    /// Progresses until the peer's next side-channel message arrives (one-sided tests: the
    /// server keeps its interface progressing until the client says it is done).
    fn serve_until_peer_done(&mut self) -> Result<()> {
        let Some(c) = self.chan else {
            return Ok(());
        };
        loop {
            let mut events = 0;
            for _ in 0..256 {
                events += self.iface.progress(&mut self.sink);
                if let Some(e) = self.sink.err.take() {
                    return Err(e);
                }
            }
            if c.poll_readable()? {
                return Ok(());
            }
            if events == 0 {
                // Nothing to serve: let the client have the core if it shares ours.
                std::thread::yield_now();
            }
        }
    }
}

/// One side of a uct test: the transport opened, memory registered, endpoint connected.
pub struct UctTest {
    params: TestParams,
    md: AnyMd,
    iface: AnyIface,
    ep: Option<AnyEp>,
    /// Exposed to the peer: put target, atomic counter, get source.
    recv: Option<Region>,
    /// Local zero-copy source / get destination.
    send: Option<Region>,
    /// Plain source of short and bcopy sends, and get destination.
    buf: Vec<u8>,
    rkey: Option<RemoteKey>,
    peer_buffer: u64,
}

impl UctTest {
    /// Opens the transport and device of `p`, checks it can run the test, and registers memory.
    pub fn open(p: &TestParams) -> Result<UctTest> {
        p.validate()?;
        let (md, iface) = uct::open(&p.transport, &p.device)?;
        check_caps(p, iface.tl_name(), iface.attr(), md.attr().flags)?;
        let size = p.size();
        let needs_mem = p.test.needs_rkey() || p.layout == Layout::Zcopy;
        let (recv, send) = if needs_mem {
            (Some(Region::new(&md, size)?), Some(Region::new(&md, size)?))
        } else {
            (None, None)
        };
        let mut buf = vec![0u8; size.max(8)];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        Ok(UctTest {
            params: p.clone(),
            md,
            iface,
            ep: None,
            recv,
            send,
            buf,
            rkey: None,
            peer_buffer: 0,
        })
    }

    /// The interface's attributes.
    pub fn attr(&self) -> &IfaceAttr {
        self.iface.attr()
    }

    /// This side's addresses (creating the endpoint first on connect-to-endpoint transports).
    pub fn local_address(&mut self) -> Result<AddressInfo> {
        let flags = self.iface.attr().flags;
        let mut a = AddressInfo {
            device_addr: self.iface.device_address().to_vec(),
            iface_addr: self.iface.iface_address().to_vec(),
            ..AddressInfo::default()
        };
        if !flags.contains(IfaceFlags::CONNECT_TO_IFACE) {
            if !flags.contains(IfaceFlags::CONNECT_TO_EP) {
                return Err(Error::Unsupported(format!(
                    "{} connects neither to an interface nor to an endpoint",
                    self.iface.tl_name()
                )));
            }
            if self.ep.is_none() {
                self.ep = Some(self.iface.ep_create()?);
            }
            if let Some(ep) = &self.ep {
                a.ep_addr = ep.ep_address()?;
            }
        }
        if let Some(r) = &self.recv {
            a.buffer_addr = r.memh.addr() as u64;
            a.buffer_len = r.memh.len() as u64;
            if self.params.test.needs_rkey() {
                self.md.rkey_pack(&r.memh, &mut a.rkey)?;
            }
        }
        Ok(a)
    }

    /// Connects to the peer (or, in loopback, to this side's own address).
    pub fn connect(&mut self, peer: &AddressInfo) -> Result<()> {
        let tl = self.iface.tl_name();
        let iface_addr = if peer.iface_addr.is_empty() {
            None
        } else {
            Some(peer.iface_addr.as_slice())
        };
        self.iface
            .is_reachable(&peer.device_addr, iface_addr)
            .map_err(|why| Error::Unreachable(format!("{tl} cannot reach the peer: {why}")))?;
        if self
            .iface
            .attr()
            .flags
            .contains(IfaceFlags::CONNECT_TO_IFACE)
        {
            self.ep = Some(
                self.iface
                    .ep_create_connected(&peer.device_addr, &peer.iface_addr)?,
            );
        } else {
            let ep = self
                .ep
                .as_mut()
                .ok_or_else(|| Error::InvalidParam("local_address() first".into()))?;
            ep.connect_to_ep(&peer.device_addr, &peer.ep_addr)?;
        }
        if self.params.test.needs_rkey() {
            if (peer.buffer_len as usize) < self.params.size() {
                return Err(Error::Wire(format!(
                    "the peer exposed {} bytes, the test needs {}",
                    peer.buffer_len,
                    self.params.size()
                )));
            }
            self.rkey = Some(self.md.rkey_unpack(&peer.rkey)?);
            self.peer_buffer = peer.buffer_addr;
        }
        Ok(())
    }

    /// Progresses the interface outside a test loop; what arrives is dropped.
    pub fn idle_progress(&mut self) {
        let mut sink = Sink::default();
        self.iface.progress(&mut sink);
    }

    /// Runs warm-up and measured iterations. `rec` measures (client and loopback); `chan` lets
    /// waiting loops notice a peer that went away.
    pub fn run(
        &mut self,
        role: Role,
        rec: Option<&mut Recorder>,
        chan: Option<&Channel>,
    ) -> Result<()> {
        let ep = self
            .ep
            .as_mut()
            .ok_or_else(|| Error::InvalidParam("connect() first".into()))?;
        let mut eng = Engine {
            iface: &mut self.iface,
            ep,
            sink: Sink {
                loop_credit: role == Role::Loopback,
                ..Sink::default()
            },
            chan,
            issued: 0,
            spins: 0,
            peer_done: None,
            idle: 0,
        };
        let ctx = Ctx {
            p: &self.params,
            size: self.params.size(),
            recv: self.recv.as_ref(),
            send: self.send.as_ref(),
            rkey: self.rkey.as_ref(),
            peer: self.peer_buffer,
        };
        match (role, rec) {
            (Role::Server, _) => run_server(&mut eng, &ctx, &mut self.buf),
            (_, Some(rec)) => run_measuring(&mut eng, &ctx, &mut self.buf, rec, role),
            (_, None) => Err(Error::InvalidParam(
                "the measuring side needs a recorder".into(),
            )),
        }
    }
}

/// The measuring side (client or loopback).
fn run_measuring(
    eng: &mut Engine<'_>,
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    rec: &mut Recorder,
    role: Role,
) -> Result<()> {
    let p = ctx.p;
    let total = p.total_iterations();
    let warm = p.warmup;
    let loopback = role == Role::Loopback;
    let am_skip = if matches!(p.test, TestId::AmLat | TestId::AmBw) {
        8
    } else {
        0
    };
    let zc_store = if p.layout == Layout::Zcopy {
        Some(ctx.iovs(am_skip)?)
    } else {
        None
    };
    let zc: &[Iov<'_>] = match &zc_store {
        Some((a, n)) => &a[..*n],
        None => &[],
    };
    match p.test {
        TestId::AmLat => {
            let buf: &[u8] = buf;
            let parts = short_parts(p, buf);
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                send_am(eng, ctx, buf, zc, &parts, i)?;
                eng.wait(|s| s.am > i)?;
                if i >= warm {
                    rec.record();
                }
            }
        }
        TestId::AmBw => {
            let buf: &[u8] = buf;
            let parts = short_parts(p, buf);
            eng.sink.credits = p.window as u64;
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                eng.wait(|s| s.credits > 0)?;
                send_am(eng, ctx, buf, zc, &parts, i)?;
                eng.sink.credits -= 1;
                eng.progress()?;
                if i >= warm {
                    rec.record();
                }
            }
            if loopback {
                eng.wait(|s| s.am >= total)?;
            }
        }
        TestId::PutLat => {
            let w = Watch::new(&ctx.recv()?.memh)?;
            let last = p.size() - 1;
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                set_sn(ctx, buf, i)?;
                put(eng, ctx, buf, zc)?;
                let want = sn(i);
                eng.wait_mem(|| w.byte(last) == want)?;
                if i >= warm {
                    rec.record();
                }
            }
        }
        TestId::PutBw => {
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                put(eng, ctx, buf, zc)?;
                if i >= warm {
                    rec.record();
                }
            }
        }
        TestId::GetLat | TestId::GetBw => {
            let one = p.test == TestId::GetLat;
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                get(eng, ctx, buf, zc)?;
                if one {
                    eng.drain()?;
                }
                if i >= warm {
                    rec.record();
                }
            }
        }
        TestId::AddLat => {
            let w = Watch::new(&ctx.recv()?.memh)?;
            let wide = p.size() == 8;
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                atomic_post_add(eng, ctx)?;
                eng.wait_mem(|| counter_reached(&w, wide, i + 1))?;
                if i >= warm {
                    rec.record();
                }
            }
        }
        TestId::AddMr => {
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                atomic_post_add(eng, ctx)?;
                if i >= warm {
                    rec.record();
                }
            }
        }
        TestId::FaddLat | TestId::SwapLat | TestId::CswapLat => {
            for i in 0..total {
                if i == warm {
                    rec.begin();
                }
                atomic_fetch(eng, ctx, i)?;
                if i >= warm {
                    rec.record();
                }
            }
        }
        other => {
            return Err(Error::Unsupported(format!("{other} is not a uct test")));
        }
    }
    // Operations still in flight are part of the run: the clock stops when they completed.
    eng.flush()?;
    rec.mark_end();
    Ok(())
}

/// The answering side.
fn run_server(eng: &mut Engine<'_>, ctx: &Ctx<'_>, buf: &mut [u8]) -> Result<()> {
    let p = ctx.p;
    let total = p.total_iterations();
    match p.test {
        TestId::AmLat => {
            let zc_store = if p.layout == Layout::Zcopy {
                Some(ctx.iovs(8)?)
            } else {
                None
            };
            let zc: &[Iov<'_>] = match &zc_store {
                Some((a, n)) => &a[..*n],
                None => &[],
            };
            let parts_owned: Vec<&[u8]> = short_parts(p, buf);
            // The server's copy of the parts borrows `buf` immutably for the whole loop.
            let buf: &[u8] = buf;
            for i in 0..total {
                eng.wait(|s| s.am > i)?;
                send_am(eng, ctx, buf, zc, &parts_owned, i)?;
            }
        }
        TestId::AmBw => {
            let half = (p.window as u64 / 2).max(1);
            let short = eng.iface.attr().flags.contains(IfaceFlags::AM_SHORT);
            let mut granted = 0u64;
            loop {
                eng.progress()?;
                let got = eng.sink.am - granted;
                if got >= half || (eng.sink.am >= total && got > 0) {
                    send_credit(eng, got, short)?;
                    granted += got;
                }
                if eng.sink.am >= total {
                    break;
                }
                eng.spin()?;
            }
        }
        TestId::PutLat => {
            let zc_store = if p.layout == Layout::Zcopy {
                Some(ctx.iovs(0)?)
            } else {
                None
            };
            let zc: &[Iov<'_>] = match &zc_store {
                Some((a, n)) => &a[..*n],
                None => &[],
            };
            let w = Watch::new(&ctx.recv()?.memh)?;
            let last = p.size() - 1;
            for i in 0..total {
                let want = sn(i);
                eng.wait_mem(|| w.byte(last) == want)?;
                set_sn(ctx, buf, i)?;
                put(eng, ctx, buf, zc)?;
            }
        }
        TestId::AddLat => {
            let w = Watch::new(&ctx.recv()?.memh)?;
            let wide = p.size() == 8;
            for i in 0..total {
                eng.wait_mem(|| counter_reached(&w, wide, i + 1))?;
                atomic_post_add(eng, ctx)?;
            }
        }
        TestId::PutBw
        | TestId::GetLat
        | TestId::GetBw
        | TestId::AddMr
        | TestId::FaddLat
        | TestId::SwapLat
        | TestId::CswapLat => {
            // One-sided: keep progressing (some transports serve remote memory access in
            // progress) until the client says it is done.
            eng.serve_until_peer_done()?;
            return Ok(());
        }
        other => {
            return Err(Error::Unsupported(format!("{other} is not a uct test")));
        }
    }
    eng.flush()
}

fn short_parts<'b>(p: &TestParams, buf: &'b [u8]) -> Vec<&'b [u8]> {
    let mut parts = Vec::with_capacity(p.sizes.len());
    let mut off = 0;
    for &s in &p.sizes {
        parts.push(&buf[off..off + s as usize]);
        off += s as usize;
    }
    parts
}
