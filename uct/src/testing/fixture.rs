//! The [`Fixture`] trait, the generic [`TlPair`] fixture, the [`Recorder`] sink and helpers.

use crate::caps::{DeviceType, IfaceFlags, MdFlags};
use crate::ep::{CompletionId, Endpoint, EpId, PendingId};
use crate::iface::{EventSink, Iface, IfaceParams};
use crate::md::{MemHandle, MemoryDomain, RemoteKey};
use crate::transport::Transport;
use std::ptr::NonNull;
use std::time::{Duration, Instant};
use ucs::{Error, Outcome, Result};

/// How long a test waits for something that must happen before it fails (a watchdog, not a
/// timing assertion).
pub const WATCHDOG: Duration = Duration::from_secs(30);

/// Two (or more) interfaces of one transport in this process, with endpoints 0→1 and 1→0.
///
/// Interface 0 is the usual sender and interface 1 the usual receiver. Interface indices are
/// dense: `0..num_ifaces()`.
pub trait Fixture: Sized {
    /// Memory-domain type.
    type Md: MemoryDomain;
    /// Interface type.
    type Iface: Iface<Ep = Self::Ep>;
    /// Endpoint type.
    type Ep: Endpoint;

    /// Opens interfaces 0 and 1 and connects endpoint 0→1 ([`Fixture::ep`]`(0)`) and 1→0
    /// (`ep(1)`). `Err(NoDevice | Unsupported | Unreachable)` means "not available on this
    /// machine": the tests then skip with a note; any other error fails them.
    fn new() -> Result<Self>;
    /// Number of interfaces open (at least 2).
    fn num_ifaces(&self) -> usize;
    /// Opens one more interface, giving its index. Tests that want more (many-to-one) cope
    /// with an error by using fewer.
    fn add_iface(&mut self) -> Result<usize>;
    /// Creates and connects a new endpoint from interface `from` to interface `to`. It may
    /// still be connecting: sends give `NoResource` until progress finishes that.
    fn connect(&mut self, from: usize, to: usize) -> Result<Self::Ep>;
    /// Interface `i`.
    fn iface(&mut self, i: usize) -> &mut Self::Iface;
    /// The memory domain of interface `i`.
    fn md(&self, i: usize) -> &Self::Md;
    /// The fixture's endpoint from interface `from` (0 or 1) to the other one of the pair.
    fn ep(&mut self, from: usize) -> &mut Self::Ep;
    /// Progresses interface `i` once into `sink`; gives the events delivered.
    fn progress<S: EventSink>(&mut self, i: usize, sink: &mut S) -> usize;

    /// The endpoint 0→1.
    fn sender(&mut self) -> &mut Self::Ep {
        self.ep(0)
    }
    /// Progresses every interface once into `sink`.
    fn progress_all<S: EventSink>(&mut self, sink: &mut S) -> usize {
        (0..self.num_ifaces()).map(|i| self.progress(i, sink)).sum()
    }
}

/// The generic fixture: interfaces of transport `T` opened through [`Transport`], on its first
/// non-network device, or on `lo` for network transports (tests never leave the host). Endpoints
/// connect to the interface (CONNECT_TO_IFACE) or, failing that, endpoint to endpoint
/// (CONNECT_TO_EP, keeping the peer's endpoint alive in the fixture).
pub struct TlPair<T: Transport> {
    // Field order is drop order: endpoints before their interfaces.
    eps: Vec<T::Ep>,
    /// Peer endpoints of CONNECT_TO_EP connections, kept alive.
    peers: Vec<T::Ep>,
    sides: Vec<(T::Iface, T::Md)>,
    device: String,
}

impl<T: Transport> TlPair<T> {
    /// The device this fixture runs on.
    pub fn device(&self) -> &str {
        &self.device
    }

    fn pick_device() -> Result<String> {
        let devices = T::devices().map_err(|why| {
            Error::NoDevice(format!("transport {} is unavailable: {why}", T::NAME))
        })?;
        if let Some(d) = devices.iter().find(|d| d.dev_type != DeviceType::Net) {
            return Ok(d.name.clone());
        }
        devices
            .iter()
            .find(|d| d.name == "lo")
            .map(|d| d.name.clone())
            .ok_or_else(|| {
                Error::NoDevice(format!(
                    "transport {} has no loopback device to test on",
                    T::NAME
                ))
            })
    }

    fn open_side(device: &str) -> Result<(T::Iface, T::Md)> {
        let md = T::open_md(device)?;
        let iface = T::open_iface(
            &md,
            &IfaceParams {
                device: device.to_owned(),
                ..Default::default()
            },
        )?;
        Ok((iface, md))
    }
}

impl<T: Transport> Fixture for TlPair<T> {
    type Md = T::Md;
    type Iface = T::Iface;
    type Ep = T::Ep;

    fn new() -> Result<Self> {
        let device = Self::pick_device()?;
        let sides = vec![Self::open_side(&device)?, Self::open_side(&device)?];
        let mut fx = TlPair {
            eps: Vec::new(),
            peers: Vec::new(),
            sides,
            device,
        };
        let e01 = fx.connect(0, 1)?;
        let e10 = fx.connect(1, 0)?;
        fx.eps = vec![e01, e10];
        Ok(fx)
    }

    fn num_ifaces(&self) -> usize {
        self.sides.len()
    }

    fn add_iface(&mut self) -> Result<usize> {
        let side = Self::open_side(&self.device)?;
        self.sides.push(side);
        Ok(self.sides.len() - 1)
    }

    fn connect(&mut self, from: usize, to: usize) -> Result<T::Ep> {
        let flags = self.sides[from].0.attr().flags;
        let dev_to = self.sides[to].0.device_address().to_vec();
        if flags.contains(IfaceFlags::CONNECT_TO_IFACE) {
            let addr = self.sides[to].0.iface_address().to_vec();
            return self.sides[from].0.ep_create_connected(&dev_to, &addr);
        }
        if flags.contains(IfaceFlags::CONNECT_TO_EP) {
            let dev_from = self.sides[from].0.device_address().to_vec();
            let mut a = self.sides[from].0.ep_create()?;
            let mut b = self.sides[to].0.ep_create()?;
            a.connect_to_ep(&dev_to, &b.ep_address()?)?;
            b.connect_to_ep(&dev_from, &a.ep_address()?)?;
            self.peers.push(b);
            return Ok(a);
        }
        Err(Error::Unsupported(format!(
            "{} connects neither to interfaces nor to endpoints",
            T::NAME
        )))
    }

    fn iface(&mut self, i: usize) -> &mut T::Iface {
        &mut self.sides[i].0
    }

    fn md(&self, i: usize) -> &T::Md {
        &self.sides[i].1
    }

    fn ep(&mut self, from: usize) -> &mut T::Ep {
        &mut self.eps[from]
    }

    fn progress<S: EventSink>(&mut self, i: usize, sink: &mut S) -> usize {
        self.sides[i].0.progress(sink)
    }
}

/// A sink that records everything, for tests.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Active messages: id and bytes.
    pub ams: Vec<(u8, Vec<u8>)>,
    /// Completions.
    pub completions: Vec<(CompletionId, Result<u64>)>,
    /// `get_bcopy` data delivered in progress.
    pub get_data: Vec<(CompletionId, Vec<u8>)>,
    /// Pending-request retries.
    pub pending: Vec<(EpId, PendingId)>,
    /// Endpoint errors.
    pub errors: Vec<(EpId, Error)>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }
    /// Removes and gives the completion of `comp`, if it arrived.
    pub fn take_completion(&mut self, comp: CompletionId) -> Option<Result<u64>> {
        let i = self.completions.iter().position(|(c, _)| *c == comp)?;
        Some(self.completions.remove(i).1)
    }
}

impl EventSink for Recorder {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.ams.push((id, data.to_vec()));
    }
    fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
        self.completions.push((comp, result));
    }
    fn get_bcopy_data(&mut self, comp: CompletionId, data: &[u8]) {
        self.get_data.push((comp, data.to_vec()));
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.pending.push((ep, req));
        true
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

/// Progresses every interface into `rec` until `cond` holds; panics after [`WATCHDOG`].
pub fn progress_until<F: Fixture>(
    fx: &mut F,
    rec: &mut Recorder,
    what: &str,
    mut cond: impl FnMut(&Recorder) -> bool,
) {
    let start = Instant::now();
    while !cond(rec) {
        fx.progress_all(rec);
        assert!(
            start.elapsed() < WATCHDOG,
            "watchdog: {what} did not happen within {WATCHDOG:?}"
        );
    }
}

/// A value an operation can give on `Done`, widened to what completions carry.
pub trait OpValue {
    /// The value as a completion result carries it.
    fn widen(self) -> u64;
}
impl OpValue for () {
    fn widen(self) -> u64 {
        0
    }
}
impl OpValue for usize {
    fn widen(self) -> u64 {
        self as u64
    }
}
impl OpValue for u32 {
    fn widen(self) -> u64 {
        self as u64
    }
}
impl OpValue for u64 {
    fn widen(self) -> u64 {
        self
    }
}

/// Runs an operation to its end: retries `NoResource` after progress, waits for the completion
/// `comp` of `InProgress`. Gives the value (`Done`'s or the completion's) or the error (the
/// call's or the completion's). Panics after [`WATCHDOG`].
pub fn run_op<F: Fixture, T: OpValue>(
    fx: &mut F,
    rec: &mut Recorder,
    comp: CompletionId,
    mut op: impl FnMut(&mut F) -> Result<Outcome<T>>,
) -> Result<u64> {
    let start = Instant::now();
    loop {
        match op(fx)? {
            Outcome::Done(v) => return Ok(v.widen()),
            Outcome::InProgress => loop {
                if let Some(r) = rec.take_completion(comp) {
                    return r;
                }
                fx.progress_all(rec);
                assert!(
                    start.elapsed() < WATCHDOG,
                    "watchdog: completion {comp} did not arrive within {WATCHDOG:?}"
                );
            },
            Outcome::NoResource => {
                fx.progress_all(rec);
                assert!(
                    start.elapsed() < WATCHDOG,
                    "watchdog: operation {comp} got NoResource for {WATCHDOG:?}"
                );
            }
        }
    }
}

/// Memory for tests on one memory domain, allocated by it or registered (the backing buffer
/// then lives here).
pub struct TestMem {
    /// The handle.
    pub memh: MemHandle,
    // After `memh`: the registration is dropped before its memory.
    _backing: Option<Box<[u64]>>,
}

impl TestMem {
    fn alloc<M: MemoryDomain>(md: &M, len: usize) -> Result<Self> {
        Ok(TestMem {
            memh: md.mem_alloc(len)?,
            _backing: None,
        })
    }

    fn reg<M: MemoryDomain>(md: &M, len: usize) -> Result<Self> {
        let mut backing = vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice();
        let addr = NonNull::new(backing.as_mut_ptr().cast::<u8>())
            .ok_or_else(|| Error::NoMemory("empty backing".into()))?;
        // SAFETY: `backing` is owned by the returned TestMem and outlives `memh`, which is
        // declared (and so dropped) first; moving the Box does not move its heap buffer.
        let memh = unsafe { md.mem_reg(addr, len) }?;
        Ok(TestMem {
            memh,
            _backing: Some(backing),
        })
    }

    /// Memory peers access remotely: allocated when the domain can (shared memory), else
    /// registered. `None` when the domain can do neither.
    pub fn remote<M: MemoryDomain>(md: &M, len: usize) -> Option<Result<Self>> {
        let f = md.attr().flags;
        if f.contains(MdFlags::ALLOC) {
            Some(Self::alloc(md, len))
        } else if f.contains(MdFlags::REG) {
            Some(Self::reg(md, len))
        } else {
            None
        }
    }

    /// Local memory for zero-copy sources and destinations: registered when the domain can,
    /// else allocated. `None` when the domain can do neither.
    pub fn local<M: MemoryDomain>(md: &M, len: usize) -> Option<Result<Self>> {
        let f = md.attr().flags;
        if f.contains(MdFlags::REG) {
            Some(Self::reg(md, len))
        } else if f.contains(MdFlags::ALLOC) {
            Some(Self::alloc(md, len))
        } else {
            None
        }
    }

    /// Writes bytes at an offset.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.memh
            .write(off, data)
            .expect("test memory write in range");
    }

    /// Reads `len` bytes at an offset.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.memh
            .read(off, &mut v)
            .expect("test memory read in range");
        v
    }
}

/// Remote memory on interface 1's domain and its key unpacked by interface 0's domain.
pub struct RemoteMem {
    /// The memory (in this process, so tests can check it directly).
    pub mem: TestMem,
    /// The key, as interface 0 uses it.
    pub rkey: RemoteKey,
    /// The packed key.
    pub packed: Vec<u8>,
}

impl RemoteMem {
    /// Start address as the remote side names it.
    pub fn base(&self) -> u64 {
        self.mem.memh.addr() as u64
    }
}

/// Allocates or registers `len` bytes on interface 1's domain and unpacks its key on interface
/// 0's. `None` when the domain can neither allocate nor register.
pub fn remote_mem<F: Fixture>(fx: &F, len: usize) -> Option<RemoteMem> {
    let mem = TestMem::remote(fx.md(1), len)?.expect("allocating remote test memory");
    let mut packed = Vec::new();
    fx.md(1)
        .rkey_pack(&mem.memh, &mut packed)
        .expect("packing the remote key");
    let rkey = fx
        .md(0)
        .rkey_unpack(&packed)
        .expect("unpacking the remote key");
    Some(RemoteMem { mem, rkey, packed })
}

/// Local memory on interface 0's domain. `None` when the domain can neither allocate nor
/// register.
pub fn local_mem<F: Fixture>(fx: &F, len: usize) -> Option<TestMem> {
    Some(TestMem::local(fx.md(0), len)?.expect("allocating local test memory"))
}

/// A recognisable byte pattern.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
