//! In-process tests of the tcp transport over loopback: shared helpers here, the tests by
//! subject in the submodules.

use super::md::{reg_key, TcpMd};
use super::*;
use crate::ep::{AtomicOp, CompletionId, EpId, PendingId};
use crate::iface::{EventSink, Iface};
use crate::md::{Iov, MemHandle, MemoryDomain, RemoteKey};
use crate::{Endpoint, EventFlags};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use ucs::{Error, Outcome};

mod config;
mod connect;
mod data;
mod forged;
mod rx;
mod short;

/// Collects everything progress delivers.
#[derive(Default)]
pub(crate) struct Sink {
    pub ams: Vec<(u8, Vec<u8>)>,
    pub comps: Vec<(CompletionId, ucs::Result<u64>)>,
    pub get_data: Vec<(CompletionId, Vec<u8>)>,
    pub pending: Vec<(EpId, PendingId)>,
    pub errors: Vec<(EpId, Error)>,
    /// Unexpected tagged eager messages: tag and payload.
    pub unexp: Vec<(u64, Vec<u8>)>,
}

impl EventSink for Sink {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.ams.push((id, data.to_vec()));
    }
    fn completion(&mut self, comp: CompletionId, result: ucs::Result<u64>) {
        self.comps.push((comp, result));
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
    fn tag_unexp_eager(&mut self, tag: u64, _imm: u64, data: &[u8]) {
        self.unexp.push((tag, data.to_vec()));
    }
}

impl Sink {
    fn comp(&self, id: CompletionId) -> Option<&ucs::Result<u64>> {
        self.comps.iter().find(|c| c.0 == id).map(|c| &c.1)
    }
}

fn lo() -> NetIf {
    host_interfaces()
        .unwrap()
        .into_iter()
        .find(|i| i.loopback)
        .expect("a loopback interface")
}

pub(crate) fn open_lo() -> TcpIface {
    TcpIface::open(lo()).unwrap()
}

/// Progresses both interfaces until `done` holds; panics after a watchdog of 20 s.
fn run(
    a: &mut TcpIface,
    sa: &mut Sink,
    b: &mut TcpIface,
    sb: &mut Sink,
    mut done: impl FnMut(&Sink, &Sink) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(sa, sb) {
        a.progress(sa);
        b.progress(sb);
        assert!(Instant::now() < deadline, "watchdog: condition not reached");
    }
}

fn pair() -> (TcpIface, TcpIface, TcpEp) {
    let mut a = open_lo();
    let b = open_lo();
    let ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    (a, b, ep)
}

fn rkey_of(md: &TcpMd, m: &MemHandle) -> RemoteKey {
    let mut v = Vec::new();
    md.rkey_pack(m, &mut v).unwrap();
    md.rkey_unpack(&v).unwrap()
}

// The transport conformance suite, over loopback (TlPair picks `lo` for network transports).
crate::uct_conformance_tests!(conformance, crate::testing::TlPair<TcpTransport>);

/// A connection's struct stays small (a hub worker holds one per endpoint): the rarely used
/// parts (a dial's hello, a refused put's error, a matched tagged receive) live outside it.
#[test]
fn connection_struct_stays_small() {
    let n = std::mem::size_of::<super::conn::Conn>();
    assert!(n <= 400, "Conn is {n} bytes");
}
