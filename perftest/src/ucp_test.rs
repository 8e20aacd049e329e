//! The ucp-level tests: a worker per side, one endpoint; tag matching, active messages, streams,
//! and the one-sided tests (put, get, atomics) on memory each side maps with `mem_map` and
//! exposes to the other through its packed remote key (sent over the side channel).
//!
//! Buffers are allocated once before the loop and cycle through the worker (a posted receive
//! or a `tag_send_vec` takes a vector and its completion gives it back), so the measurement loop
//! allocates nothing itself.
//!
//! `tag_lat`, `tag_bw`, `tag_bibw` and `tag_exchange` send from memory allocated with
//! `mem_map`, as `ucx_perftest` does (`ucp_mem_map`): with a shared-memory transport it is a
//! posix/sysv segment, and `tag_send_mapped` lets a rendezvous be copied by the peer straight
//! from the mapped segment. With `--mem heap`, or when mapping fails, they send from vectors
//! (`tag_send_vec`), as an application sends from its own buffers.

use crate::params::{Layout, SendMem, TestId, TestParams};
use crate::report::Recorder;
use crate::uct_test::Role;
use crate::wire::{AddressInfo, Channel};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Features, MemMap, Op, Request, Rkey,
    Worker,
};
use ucs::limits::try_vec;
use ucs::{Error, Result};

mod am_stream;
mod both_ways;
mod rma;

/// The tag every test message carries.
const TAG: u64 = 0x1337_a880;

/// The user active-message id of the tests.
const AM_ID: u16 = 7;

/// The ucp tests this build runs.
pub const SUPPORTED: &[TestId] = &[
    TestId::TagLat,
    TestId::TagBw,
    TestId::TagBibw,
    TestId::TagExchange,
    TestId::TagSyncLat,
    TestId::TagSyncBw,
    TestId::UcpAmLat,
    TestId::UcpAmBw,
    TestId::StreamLat,
    TestId::StreamBw,
    TestId::UcpPutLat,
    TestId::UcpPutBw,
    TestId::UcpGet,
    TestId::UcpAdd,
    TestId::UcpFadd,
    TestId::UcpSwap,
    TestId::UcpCswap,
];

/// Checks that this build's ucp can run `p`.
pub fn check(p: &TestParams) -> Result<()> {
    if !SUPPORTED.contains(&p.test) {
        let names: Vec<&str> = SUPPORTED.iter().map(|t| t.name()).collect();
        return Err(Error::Unsupported(format!(
            "{} is not a ucp test; the ucp tests are {}",
            p.test,
            names.join(", ")
        )));
    }
    if matches!(
        p.test,
        TestId::UcpPutLat | TestId::UcpPutBw | TestId::UcpGet
    ) && p.size() == 0
    {
        return Err(Error::InvalidParam(format!(
            "{} needs -s of at least 1",
            p.test
        )));
    }
    if p.layout == Layout::Iov || p.sizes.len() > 1 {
        return Err(Error::Unsupported(
            "rucx's ucp has no io-vector datatype yet: use one -s size with -D contig".into(),
        ));
    }
    Ok(())
}

/// How often (in spins) a waiting loop checks that the peer is still there.
const PEER_CHECK_SPINS: u32 = 1 << 14;

/// One side of a ucp test: a worker and an endpoint to the peer.
pub struct UcpTest {
    params: TestParams,
    /// The peer's exposed memory: its address and remote key unpacked on `ep`.
    remote: Option<(u64, Rkey)>,
    /// This side's memory exposed to the peer (one-sided tests). Declared before the worker:
    /// its registrations are dropped first.
    map: Option<MemMap>,
    /// Memory `tag_lat` and `tag_bw` send from (`None`: they send vectors).
    tag_map: Option<MemMap>,
    // Declared before the context: the worker is dropped first.
    worker: Worker,
    _ctx: Context,
    ep: Option<EpHandle>,
}

/// Bytes each side maps for a one-sided test: the message, or one atomic word.
fn map_len(p: &TestParams) -> usize {
    if p.test.is_atomic() {
        8
    } else {
        p.size().max(1)
    }
}

impl UcpTest {
    /// Creates the context and worker (`RUCX_TLS` and friends apply).
    pub fn open(p: &TestParams) -> Result<UcpTest> {
        p.validate()?;
        check(p)?;
        let mut features = Features::TAG | Features::AM | Features::STREAM;
        if p.test.needs_rkey() {
            features |= Features::RMA | Features::AMO32 | Features::AMO64;
        }
        let ctx = Context::new(ContextParams {
            features,
            config: None,
        })?;
        let mut worker = Worker::new(&ctx)?;
        let map = if p.test.needs_rkey() {
            let m = worker.mem_map(map_len(p))?;
            if p.test == TestId::UcpGet {
                // What the peer's gets must read back.
                m.write(0, &try_vec("a message buffer", m.len(), GET_FILL)?)?;
            }
            Some(m)
        } else {
            None
        };
        let tag_map = if matches!(
            p.test,
            TestId::TagLat | TestId::TagBw | TestId::TagBibw | TestId::TagExchange
        ) && p.size() > 0
            && p.mem == SendMem::Mapped
        {
            match worker.mem_map(p.size()) {
                Ok(m) => {
                    m.write(0, &try_vec("a message buffer", m.len(), 0xa5)?)?;
                    Some(m)
                }
                // No domain could allocate it: the test sends vectors, as before.
                Err(_) => None,
            }
        } else {
            None
        };
        Ok(UcpTest {
            params: p.clone(),
            worker,
            _ctx: ctx,
            ep: None,
            map,
            tag_map,
            remote: None,
        })
    }

    /// This side's worker address, and for one-sided tests its mapped memory and remote key.
    pub fn local_address(&mut self) -> Result<AddressInfo> {
        let mut a = AddressInfo {
            iface_addr: self.worker.address().to_vec(),
            ..AddressInfo::default()
        };
        if let Some(m) = &self.map {
            a.buffer_addr = m.address();
            a.buffer_len = m.len() as u64;
            a.rkey = m.rkey_packed().to_vec();
        }
        Ok(a)
    }

    /// Server side, before [`UcpTest::connect`]: progresses until the client's wire-up has
    /// created this worker's endpoint to it (at most 2 s; after that `connect` creates its own).
    /// The two sides then share the client's connections instead of each dialing the other at
    /// the same moment (tcp: one two-way connection, no pure ACK per message).
    pub fn await_peer(&mut self, peer: &AddressInfo) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !self.worker.has_ep_to(&peer.iface_addr)? {
            if std::time::Instant::now() >= deadline {
                break;
            }
            self.worker.progress();
        }
        Ok(())
    }

    /// Creates the endpoint to the peer's worker and progresses until it is connected.
    pub fn connect(&mut self, peer: &AddressInfo) -> Result<()> {
        let ep = self
            .worker
            .ep_create(&peer.iface_addr, EpParams::default())?;
        self.ep = Some(ep);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            self.worker.progress();
            self.worker.ep_status(ep)?;
            match self.worker.ep_proto_config(ep) {
                Ok(_) => {
                    self.await_wireup(ep, deadline)?;
                    return self.unpack_peer_memory(ep, peer);
                }
                Err(Error::Busy(_)) if std::time::Instant::now() < deadline => {}
                Err(Error::Busy(_)) => {
                    return Err(Error::Timeout(
                        "the ucp endpoint did not connect within 30 s".into(),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Progresses until the endpoint's wire-up is complete: over rc_verbs the lane connects
    /// after the tcp wire-up and then carries the active messages and RMA, so the test (and
    /// the remote key unpacked for it) must not start before. If the peer never completes it
    /// (its rc_verbs lane failed to connect) the test runs on the wire-up lane, as the
    /// protocol table printed with `RUCX_PROTO_INFO=y` shows.
    fn await_wireup(&mut self, ep: EpHandle, deadline: std::time::Instant) -> Result<()> {
        while !self.worker.ep_wired_up(ep)? {
            if std::time::Instant::now() >= deadline {
                eprintln!(
                    "perftest: endpoint wire-up incomplete after 30 s, using the wire-up lane"
                );
                break;
            }
            self.worker.progress();
        }
        Ok(())
    }

    /// Unpacks the peer's remote key on `ep` (one-sided tests).
    fn unpack_peer_memory(&mut self, ep: EpHandle, peer: &AddressInfo) -> Result<()> {
        if !self.params.test.needs_rkey() {
            return Ok(());
        }
        let need = map_len(&self.params) as u64;
        if peer.buffer_addr == 0 || peer.buffer_len < need || peer.rkey.is_empty() {
            return Err(Error::Wire(format!(
                "{}: the peer exposed {} bytes with a {}-byte remote key; the test needs {need} bytes",
                self.params.test,
                peer.buffer_len,
                peer.rkey.len()
            )));
        }
        let rkey = self.worker.rkey_unpack(ep, &peer.rkey)?;
        // An empty put or get goes through every check of a real one (a lane that can reach
        // the peer's memory, the range, the operation): a test that cannot run fails here,
        // before the table header, and not in the middle of the run.
        let test = self.params.test;
        let probe = match test {
            TestId::UcpPutLat | TestId::UcpPutBw => {
                Some(self.worker.put(ep, &[], peer.buffer_addr, &rkey))
            }
            TestId::UcpGet => Some(self.worker.get(ep, Vec::new(), peer.buffer_addr, &rkey)),
            _ => None,
        };
        if let Some(op) = probe {
            op.and_then(|op| self.worker.complete(op).status)
                .map_err(|e| match e {
                    Error::Unsupported(m) => Error::Unsupported(format!(
                        "{test} needs a transport with zero-copy put/get (cma or tcp in RUCX_TLS): {m}"
                    )),
                    other => other,
                })?;
        }
        self.remote = Some((peer.buffer_addr, rkey));
        Ok(())
    }

    /// The protocol table of the endpoint, once it is connected.
    pub fn proto_info(&self) -> Option<String> {
        self.ep.and_then(|ep| self.worker.ep_proto_info(ep).ok())
    }

    /// Progresses the worker outside a test loop.
    pub fn idle_progress(&mut self) {
        self.worker.progress();
    }

    /// Runs warm-up and measured iterations.
    pub fn run(
        &mut self,
        role: Role,
        rec: Option<&mut Recorder>,
        chan: Option<&Channel>,
    ) -> Result<()> {
        let ep = self
            .ep
            .ok_or_else(|| Error::InvalidParam("connect() first".into()))?;
        let p = &self.params;
        if p.test.needs_rkey() {
            let map = self
                .map
                .as_ref()
                .ok_or_else(|| Error::InvalidParam("no mapped memory".into()))?;
            let (addr, rkey) = self
                .remote
                .as_ref()
                .ok_or_else(|| Error::InvalidParam("connect() first".into()))?;
            let mut eng = Engine {
                worker: &mut self.worker,
                ep,
                chan,
                spins: 0,
                stash: AmStash::default(),
                peer_done: None,
                idle: 0,
                send_map: None,
            };
            let target = rma::Target {
                map,
                addr: *addr,
                rkey,
            };
            return rma::run(&mut eng, p, &target, role, rec);
        }
        let stash = AmStash::default();
        if matches!(p.test, TestId::UcpAmLat | TestId::UcpAmBw) {
            stash.install(&mut self.worker, p.outstanding as usize);
        }
        let mut eng = Engine {
            worker: &mut self.worker,
            ep,
            chan,
            spins: 0,
            stash,
            peer_done: None,
            idle: 0,
            send_map: self.tag_map.as_ref(),
        };
        match (p.test, role, rec) {
            (TestId::UcpAmLat, _, rec) => am_stream::am_ping_pong(&mut eng, p, rec, role),
            (TestId::UcpAmBw, Role::Server, _) => am_stream::am_receive_stream(&mut eng, p),
            (TestId::UcpAmBw, _, Some(rec)) => am_stream::am_send_stream(&mut eng, p, rec, role),
            (TestId::StreamLat, _, rec) => am_stream::stream_ping_pong(&mut eng, p, rec, role),
            (TestId::StreamBw, Role::Server, _) => am_stream::stream_receive(&mut eng, p),
            (TestId::StreamBw, _, Some(rec)) => am_stream::stream_send(&mut eng, p, rec, role),
            (TestId::TagLat | TestId::TagSyncLat, Role::Server, _) => {
                ping_pong(&mut eng, p, None, false)
            }
            (TestId::TagLat | TestId::TagSyncLat, _, Some(rec)) => {
                ping_pong(&mut eng, p, Some(rec), role == Role::Loopback)
            }
            (TestId::TagBibw, _, rec) => both_ways::stream(&mut eng, p, rec),
            (TestId::TagExchange, _, rec) => both_ways::exchange(&mut eng, p, rec),
            (TestId::TagBw | TestId::TagSyncBw, Role::Server, _) => receive_stream(&mut eng, p),
            (TestId::TagBw | TestId::TagSyncBw, Role::Loopback, Some(rec)) => {
                loopback_stream(&mut eng, p, rec)
            }
            (TestId::TagBw | TestId::TagSyncBw, _, Some(rec)) => send_stream(&mut eng, p, rec),
            (t, _, None) => Err(Error::InvalidParam(format!(
                "{t}: the measuring side needs a recorder"
            ))),
            (t, _, _) => Err(Error::Unsupported(format!("{t} is not a ucp tag test"))),
        }
        // No worker flush here: in every test the receiving side waits for all of the data
        // itself, and the sender's clock stops when its last operation completed.
    }
}

/// Byte pattern of the memory `ucp_get` reads.
pub(crate) const GET_FILL: u8 = 0x3c;

/// The state of a running ucp test loop.
pub(crate) struct Engine<'a> {
    pub(crate) worker: &'a mut Worker,
    pub(crate) ep: EpHandle,
    pub(crate) chan: Option<&'a Channel>,
    spins: u32,
    stash: AmStash,
    peer_done: Option<std::time::Instant>,
    idle: u32,
    /// Mapped memory the tag tests send from (`tag_send_mapped`), when it could be mapped.
    send_map: Option<&'a MemMap>,
}

/// What the active-message handler hands to the loop: a count of messages and the data
/// buffers to give back to the worker (the handler cannot reach the worker itself).
#[derive(Default, Clone)]
struct AmStash {
    count: Rc<Cell<u64>>,
    data: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl AmStash {
    fn install(&self, worker: &mut Worker, capacity: usize) {
        self.data.borrow_mut().reserve(capacity.max(64));
        let me = self.clone();
        worker.am_set_handler(AM_ID, move |_ep, _hdr, data| {
            me.count.set(me.count.get() + 1);
            let mut d = me.data.borrow_mut();
            if d.len() < d.capacity() {
                d.push(data);
            } else {
                // Never grow the stash on the data path; a dropped buffer is just freed.
                drop(data);
            }
        });
    }

    /// Gives the kept buffers back to the worker's pool.
    fn release(&self, worker: &mut Worker) {
        let mut d = self.data.borrow_mut();
        while let Some(b) = d.pop() {
            worker.am_data_release(b);
        }
    }
}

impl Engine<'_> {
    /// Counts one idle spin; now and then checks the peer is still there.
    #[inline]
    pub(crate) fn spin(&mut self) -> Result<()> {
        self.idle += 1;
        if self.idle > crate::uct_test::YIELD_AFTER {
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
        self.worker.ep_status(self.ep)?;
        crate::uct_test::check_peer(self.chan, &mut self.peer_done)
    }

    /// Progresses until `cond` holds; `cond` reads memory the peer writes.
    #[inline]
    pub(crate) fn wait_mem(&mut self, mut cond: impl FnMut() -> bool) -> Result<()> {
        self.idle = 0;
        while !cond() {
            self.worker.progress();
            self.spin()?;
        }
        Ok(())
    }

    /// Progresses until the peer's next side-channel message arrives (one-sided tests: the
    /// target keeps its worker progressing, which serves emulated atomics and transports that
    /// need the target's progress, until the initiator says it is done). Without a side
    /// channel (loopback) there is nothing to wait for.
    pub(crate) fn serve_until_peer_done(&mut self) -> Result<()> {
        let Some(c) = self.chan else {
            return Ok(());
        };
        loop {
            let mut events = 0;
            for _ in 0..256 {
                events += self.worker.progress();
            }
            self.worker.ep_status(self.ep)?;
            if c.poll_readable()? {
                return Ok(());
            }
            if events == 0 {
                // Nothing to serve: let the initiator have the core if it shares ours.
                std::thread::yield_now();
            }
        }
    }

    /// Progresses until `req` finishes and gives what `then` makes of its completion. Each
    /// poll tests the request in place; it is taken once, when finished.
    #[inline(always)]
    fn wait_then<R>(
        &mut self,
        mut req: Request,
        then: impl FnOnce(Completion) -> Result<R>,
    ) -> Result<R> {
        self.idle = 0;
        loop {
            if self.worker.request_test(&req)? {
                match self.worker.request_take(req) {
                    Ok(c) => return then(c),
                    Err(r) => req = r,
                }
            }
            self.worker.progress();
            self.spin()?;
        }
    }

    /// Progresses until `req` finishes; an operation that failed gives its error.
    #[inline]
    pub(crate) fn wait(&mut self, req: Request) -> Result<Completion> {
        self.wait_then(req, |c| c.status.clone().map(|_| c))
    }

    /// The completion of `op`, waiting if it is pending.
    #[inline]
    pub(crate) fn finish(&mut self, op: Op) -> Result<Completion> {
        match op {
            Op::Done(c) => c.status.clone().map(|_| c),
            Op::Pending(r) => self.wait(r),
        }
    }

    /// Sends the buffer in `slot` or, for the sync tests, a synchronous send of its bytes; gives
    /// the request of a send still running, `None` for one that finished at once. Sends that
    /// only read the buffer (from the mapping, or synchronous) leave it in `slot`; a
    /// `tag_send_vec` takes it, and its completion gives it back (into `slot` here when the
    /// send finished at once).
    #[inline(always)]
    fn send(&mut self, slot: &mut Option<Vec<u8>>, sync: bool) -> Result<Option<Request>> {
        let buf = slot
            .as_ref()
            .ok_or_else(|| Error::Wire("lost send buffer".into()))?;
        if let (Some(m), false) = (self.send_map, sync) {
            // The message's bytes come from the mapping; the buffer only gives its length.
            return self
                .worker
                .tag_send_mapped_nb(self.ep, TAG, m, 0, buf.len());
        }
        let made = if sync {
            self.worker.tag_send_sync(self.ep, TAG, buf)
        } else {
            let buf = slot
                .take()
                .ok_or_else(|| Error::Wire("lost send buffer".into()))?;
            self.worker.tag_send_vec(self.ep, TAG, buf)
        };
        Self::send_done(made, slot)
    }

    /// Takes the send [`Engine::send`] made (`made`) if it finished at once (a buffer its
    /// completion gives back goes into `slot`); gives the request of a send still running.
    /// The completion is read in place, where the send left it.
    #[inline(always)]
    fn send_done(made: Result<Op>, slot: &mut Option<Vec<u8>>) -> Result<Option<Request>> {
        let mut made = made?;
        match made {
            Op::Pending(r) => Ok(Some(r)),
            Op::Done(ref mut c) => {
                if let Err(e) = &c.status {
                    return Err(e.clone());
                }
                put_back(slot, c.buf.take())?;
                Ok(None)
            }
        }
    }

    /// Waits for send `req` of [`Engine::send`], putting a buffer its completion gives back
    /// into `slot`.
    #[inline(never)]
    fn wait_send(&mut self, req: Request, slot: &mut Option<Vec<u8>>) -> Result<()> {
        let b = self.wait_then(req, |c| completion_buf(c, None))?;
        put_back(slot, b)
    }

    /// [`Engine::send`] from `slot`, waiting until the send finishes (its buffer back in
    /// `slot`).
    #[inline(always)]
    fn send_finished(&mut self, slot: &mut Option<Vec<u8>>, sync: bool) -> Result<()> {
        match self.send(slot, sync)? {
            Some(r) => self.wait_send(r, slot),
            None => Ok(()),
        }
    }

    /// Posts a receive of `buf` for the test's tag. A receive that finished at once gives its
    /// buffer (checked as [`completion_buf`] with `size`) straight away: what the caller keeps
    /// until it waits is a buffer or a request, not a whole [`Op`].
    #[inline(always)]
    fn post_recv(&mut self, buf: Vec<u8>, size: usize) -> Result<Posted> {
        Ok(match self.worker.tag_recv(buf, TAG, ucp::TAG_MASK_EXACT)? {
            Op::Done(c) => Posted::Done(completion_buf(c, Some(size))?),
            Op::Pending(r) => Posted::Running(r),
        })
    }

    /// Finishes receive `p` of [`Engine::post_recv`] and gives back its buffer, checking the
    /// received length.
    #[inline(always)]
    fn finish_recv(&mut self, p: Posted, size: usize) -> Result<Option<Vec<u8>>> {
        match p {
            Posted::Done(b) => Ok(b),
            Posted::Running(r) => self.wait_recv(r, size),
        }
    }

    /// Progresses until receive `req` finishes and gives back its buffer, checking the
    /// received length (as [`completion_buf`]). Each poll progresses the worker, then tries to
    /// take the receive (it was posted unfinished, so there is nothing to take before the
    /// first progress call); only its buffer, length and tag come back. The idle count runs
    /// only on polls that took nothing, so the path from a message's arrival to the return
    /// is the progress call and the take.
    #[inline(always)]
    fn wait_recv(&mut self, mut req: Request, size: usize) -> Result<Option<Vec<u8>>> {
        self.idle = 0;
        loop {
            self.worker.progress();
            // One match of the nested result: the received buffer is moved once, to the
            // caller.
            match self.worker.request_take_recv(req) {
                Ok(Ok(r)) if r.len == size => return Ok(Some(r.buf)),
                Ok(Ok(r)) => {
                    return Err(Error::Wire(format!(
                        "received {} bytes, expected {size}",
                        r.len
                    )))
                }
                Ok(Err(e)) => return Err(e),
                Err(q) => req = q,
            }
            self.spin()?;
        }
    }
}

/// A receive as [`Engine::post_recv`] left it.
enum Posted {
    /// Finished at once: its buffer.
    Done(Option<Vec<u8>>),
    /// Still running.
    Running(Request),
}

/// Puts a send buffer its completion gave back into `slot`; the slot must then hold one.
#[inline(always)]
fn put_back(slot: &mut Option<Vec<u8>>, b: Option<Vec<u8>>) -> Result<()> {
    if let Some(b) = b {
        *slot = Some(b);
    }
    if slot.is_none() {
        return Err(Error::Wire(
            "the send completion gave no buffer back".into(),
        ));
    }
    Ok(())
}

/// The buffer a completion holds; an operation that failed gives its error, and with `size` a
/// received length other than `size` is an error too.
#[inline(always)]
fn completion_buf(c: Completion, size: Option<usize>) -> Result<Option<Vec<u8>>> {
    if let Err(e) = &c.status {
        return Err(e.clone());
    }
    if let Some(size) = size {
        check_len(&c, size)?;
    }
    Ok(c.buf)
}

fn take_buf(c: &mut Completion, what: &str) -> Result<Vec<u8>> {
    c.buf
        .take()
        .ok_or_else(|| Error::Wire(format!("the {what} completion gave no buffer back")))
}

fn check_len(c: &Completion, size: usize) -> Result<()> {
    if c.len != size {
        return Err(Error::Wire(format!(
            "received {} bytes, expected {size}",
            c.len
        )));
    }
    Ok(())
}

fn is_sync(t: TestId) -> bool {
    matches!(t, TestId::TagSyncLat | TestId::TagSyncBw)
}

/// Ping-pong: the client sends and waits for the reply; the server replies to each message.
/// In loopback the endpoint's messages come back to this worker.
fn ping_pong(
    eng: &mut Engine<'_>,
    p: &TestParams,
    mut rec: Option<&mut Recorder>,
    loopback: bool,
) -> Result<()> {
    let size = p.size();
    let sync = is_sync(p.test);
    let total = p.total_iterations();
    let mut sbuf = Some(try_vec("a message buffer", size, 0xa5)?);
    let mut rbuf = Some(try_vec("a message buffer", size, 0)?);
    let client = rec.is_some();
    for i in 0..total {
        if i == p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.begin();
            }
        }
        let recv_buf = rbuf
            .take()
            .ok_or_else(|| Error::Wire("lost receive buffer".into()))?;
        if client || loopback {
            // The client of tag_lat, as ucx_perftest's, sends first and posts the receive for
            // the reply while the reply is on its way: the posting is off the round trip's
            // path. In loopback the receive goes first, for its own message to find it; the
            // sync test keeps that order too (it measured faster so).
            if loopback || sync {
                let rop = eng.post_recv(recv_buf, size)?;
                eng.send_finished(&mut sbuf, sync)?;
                rbuf = eng.finish_recv(rop, size)?;
            } else {
                let running = eng.send(&mut sbuf, sync)?;
                let rop = eng.post_recv(recv_buf, size)?;
                if let Some(r) = running {
                    eng.wait_send(r, &mut sbuf)?;
                }
                rbuf = eng.finish_recv(rop, size)?;
            }
        } else {
            let rop = eng.post_recv(recv_buf, size)?;
            rbuf = eng.finish_recv(rop, size)?;
            eng.send_finished(&mut sbuf, sync)?;
        }
        if i >= p.warmup {
            if let Some(r) = rec.as_deref_mut() {
                r.record();
            }
        }
    }
    Ok(())
}

/// A window of `outstanding` buffers for sends or receives in flight.
struct Window {
    free: Vec<Vec<u8>>,
    inflight: VecDeque<(Request, Option<Vec<u8>>)>,
}

impl Window {
    fn new(count: usize, size: usize) -> Result<Window> {
        Ok(Window {
            free: (0..count)
                .map(|_| try_vec("a window buffer", size, 0x5a))
                .collect::<Result<_>>()?,
            inflight: VecDeque::with_capacity(count),
        })
    }
}

/// Completes the oldest operation of the window, recycling its buffer.
fn retire_oldest(eng: &mut Engine<'_>, w: &mut Window, size: Option<usize>) -> Result<()> {
    if let Some((req, kept)) = w.inflight.pop_front() {
        let mut c = eng.wait(req)?;
        if let Some(s) = size {
            check_len(&c, s)?;
        }
        let b = match kept {
            Some(b) => b,
            None => take_buf(&mut c, "operation")?,
        };
        w.free.push(b);
    }
    Ok(())
}

/// Stream sender: up to `-O` sends in flight. As ucx_perftest's sender, it progresses the
/// worker only while it waits for the window (all `-O` sends still running): a send that
/// completed at once is followed straight by the next one.
fn send_stream(eng: &mut Engine<'_>, p: &TestParams, rec: &mut Recorder) -> Result<()> {
    let size = p.size();
    let sync = is_sync(p.test);
    let mut w = Window::new(p.outstanding as usize, size)?;
    // The buffer the next send goes from; a send that finishes at once leaves it (or gives it
    // back) here for the next one.
    let mut slot = w.free.pop();
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            rec.begin();
        }
        if slot.is_none() {
            retire_oldest(eng, &mut w, None)?;
            slot = w.free.pop();
        }
        if let Some(r) = eng.send(&mut slot, sync)? {
            w.inflight.push_back((r, slot.take()));
            slot = w.free.pop();
        }
        if i >= p.warmup {
            rec.record();
        }
    }
    while !w.inflight.is_empty() {
        retire_oldest(eng, &mut w, None)?;
    }
    // The sends still in flight are part of the run: the clock stops when they completed.
    rec.mark_end();
    Ok(())
}

/// Stream receiver: up to `-O` receives posted ahead, as ucx_perftest's receiver keeps its
/// window (its `wait_recv_window(1)` before each post lets `max_outstanding` receives be
/// posted), so a rendezvous can be matched, and its data read, while earlier ones still
/// move. ucx_perftest posts them all into one buffer; here each receive owns a buffer of its
/// own (recycled in posting order). Messages of a sender running further ahead wait in the
/// transport or in the unexpected queue, where the next receive finds them at once.
fn receive_stream(eng: &mut Engine<'_>, p: &TestParams) -> Result<()> {
    let size = p.size();
    let window = p.outstanding as usize;
    let mut free = (0..window)
        .map(|_| try_vec("a message buffer", size, 0x5a))
        .collect::<Result<Vec<_>>>()?;
    let mut posted: VecDeque<Request> = VecDeque::with_capacity(window);
    let lost = || Error::Wire("lost receive buffer".into());
    for _ in 0..p.total_iterations() {
        if free.is_empty() {
            let r = posted.pop_front().ok_or_else(lost)?;
            free.extend(eng.wait_recv(r, size)?);
        }
        let b = free.pop().ok_or_else(lost)?;
        match eng.post_recv(b, size)? {
            Posted::Done(b) => free.extend(b),
            Posted::Running(r) => posted.push_back(r),
        }
    }
    while let Some(r) = posted.pop_front() {
        eng.wait_recv(r, size)?;
    }
    Ok(())
}

/// Stream in loopback: sends and receives interleaved in one worker, `-O` of each in flight.
fn loopback_stream(eng: &mut Engine<'_>, p: &TestParams, rec: &mut Recorder) -> Result<()> {
    let size = p.size();
    let sync = is_sync(p.test);
    let mut sends = Window::new(p.outstanding as usize, size)?;
    let mut recvs = Window::new(p.outstanding as usize, size)?;
    for i in 0..p.total_iterations() {
        if i == p.warmup {
            rec.begin();
        }
        if recvs.free.is_empty() {
            retire_oldest(eng, &mut recvs, Some(size))?;
        }
        let rb = recvs
            .free
            .pop()
            .ok_or_else(|| Error::Wire("no free receive buffer".into()))?;
        match eng.worker.tag_recv(rb, TAG, ucp::TAG_MASK_EXACT)? {
            Op::Done(mut c) => {
                c.status.clone()?;
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
        match eng.send(&mut kept, sync)? {
            Some(r) => sends.inflight.push_back((r, kept)),
            // A send that finished at once left the buffer in `kept` (or failed).
            None => sends.free.extend(kept),
        }
        eng.worker.progress();
        if i >= p.warmup {
            rec.record();
        }
    }
    while !sends.inflight.is_empty() {
        retire_oldest(eng, &mut sends, None)?;
    }
    while !recvs.inflight.is_empty() {
        retire_oldest(eng, &mut recvs, Some(size))?;
    }
    rec.mark_end();
    Ok(())
}
