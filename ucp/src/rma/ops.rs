//! RMA operations of the worker: mapping memory, unpacking remote keys, and put/get, zero-copy on
//! the RMA lane when the memory is registered, emulated over active messages otherwise.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::{Completion, Op};
use crate::rma::shared_file;
use crate::rma::{MemMap, Rkey, RkeyBundle};
use crate::rndv::stages::{RndvRecv, RndvSend};
use crate::wire::{am_id, AtomicRepHdr, PutReqHdr, NO_REQ};
use crate::worker::ep::connecting;
use crate::worker::pending::SendMade;
use crate::worker::req::RecvBuf;
use crate::worker::req::{comp_id, RecvStage, SendData, SendStage, COMP_GET};
use crate::worker::state::Core;
use crate::worker::{EpHandle, Worker};
use std::ptr::NonNull;
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;
use uct::MemoryDomain as _;
use uct::{DeviceType, IfaceFlags, MdFlags, MemHandle, RemoteKey};

/// Largest put sent as a message for the target to apply when the RMA lane would be cma.
pub(crate) const EMULATED_PUT_MAX: usize = 256;

pub(crate) enum RmaDir<'a> {
    Put(&'a [u8]),
    Get(RecvBuf),
}

impl Worker {
    /// Allocates `len` zeroed bytes peers can access remotely (`ucp_mem_map` allocate mode).
    ///
    /// With a shared-memory transport (posix, sysv) the memory is a shared segment from its
    /// memory domain, so peers on this host map it and put/get/atomics on it are plain memory
    /// accesses; it is also registered with every transport that registers memory (cma, tcp),
    /// and the packed remote key carries every one of those keys.
    pub fn mem_map(&mut self, len: usize) -> Result<MemMap> {
        if len == 0 {
            return Err(Error::InvalidParam("cannot map 0 bytes".into()));
        }
        let st = &self.st;
        let mut shared = None;
        // Domains whose allocations peers map; `self` (reachable only from this worker) last.
        let mut order: Vec<usize> = (0..st.ifaces().len()).collect();
        order.sort_by_key(|&i| st.iface(i).dev_type == DeviceType::SelfLoop);
        for i in order {
            let info = &st.iface(i);
            let f = st.md(i).attr().flags;
            if !f.contains(MdFlags::ALLOC | MdFlags::RKEY_PTR) || len > st.md(i).attr().max_alloc {
                continue;
            }
            match st.md(i).mem_alloc(len) {
                Ok(m) => {
                    let mut packed = Vec::new();
                    match st.md(i).rkey_pack(&m, &mut packed) {
                        Ok(()) => {
                            shared = Some((info.tl_name, m, packed));
                            break;
                        }
                        Err(e) => tracing::debug!("{} cannot pack its key: {e}", info.tl_name),
                    }
                }
                Err(e) => tracing::debug!("{} cannot allocate {len} bytes: {e}", info.tl_name),
            }
        }
        let (ptr, backing) = match &shared {
            Some((_, m, _)) => {
                let ptr = NonNull::new(m.addr())
                    .ok_or_else(|| Error::NoMemory("shared segment at null".into()))?;
                // Segments are fresh mappings (zero-filled by the kernel).
                (
                    ptr,
                    crate::rma::Backing::Shared {
                        _segment: m.clone(),
                    },
                )
            }
            None => MemMap::heap(len)?,
        };
        let mut keys: Vec<_> = shared.into_iter().collect();
        // SAFETY: the MemMap owns the memory and drops these handles before releasing it.
        unsafe { self.st.register_all(ptr, len, &mut keys) };
        MemMap::new(ptr, len, backing, self.st.regions().clone(), keys)
    }

    /// Maps the user's buffer for remote access (`ucp_mem_map` of existing memory): it is
    /// registered with every transport that registers memory, so peers reach it through cma
    /// on this host or the network. The mapping owns the vector; `MemMap::into_vec` gives it
    /// back.
    pub fn mem_map_vec(&mut self, mut buf: Vec<u8>) -> Result<MemMap> {
        let len = buf.len();
        let ptr = NonNull::new(buf.as_mut_ptr())
            .filter(|_| len > 0)
            .ok_or_else(|| Error::InvalidParam("cannot map an empty buffer".into()))?;
        let mut keys = Vec::new();
        // SAFETY: the vector's heap block does not move while the MemMap owns it, and the
        // MemMap drops the registrations before the vector.
        unsafe { self.st.register_all(ptr, len, &mut keys) };
        MemMap::new(
            ptr,
            len,
            crate::rma::Backing::User(buf),
            self.st.regions().clone(),
            keys,
        )
    }

    /// Unpacks a peer's packed remote keys (from its `MemMap::rkey_packed`) for use on `ep`.
    ///
    /// When a lane of the endpoint is a shared-memory transport whose key is in the bundle,
    /// the peer's segment is mapped here and put/get/atomics go through it. So is a peer's
    /// range of a shared file mapping when this process maps that range of the same file
    /// (see `rma::shared_file`), through the endpoint's shared-memory lane.
    pub fn rkey_unpack(&mut self, ep: EpHandle, packed: &[u8]) -> Result<Rkey> {
        let idx = self.st.ep_idx(ep)?;
        let bundle = RkeyBundle::decode(packed)?;
        self.connect_amo_lane(idx);
        let lanes = self.st.ep(idx).lanes().ok_or_else(connecting)?;
        let key_for = |li: usize| -> Option<uct::RemoteKey> {
            let tl = self.st.iface(li).tl_name;
            let (_, k) = bundle.entries.iter().find(|(t, _)| t == tl)?;
            self.st.md(li).rkey_unpack(k).ok()
        };
        let unpack = |lane: Option<usize>| key_for(lanes.iface_of(lane?));
        let copies = |li: usize| {
            let f = self.st.iface(li).attr.flags;
            f.contains(IfaceFlags::PUT_SHORT | IfaceFlags::PUT_BCOPY)
                && f.contains(IfaceFlags::GET_SHORT | IfaceFlags::GET_BCOPY)
        };
        let mapped = lanes.ifaces().enumerate().find_map(|(pos, li)| {
            if !copies(li) {
                return None;
            }
            key_for(li).filter(|k| k.is_mapped()).map(|k| (pos, k))
        });
        // Memory in a file this process maps too: accessed through a shared-memory lane,
        // whose operations copy through any mapped key.
        let mapped = mapped.or_else(|| {
            let (_, k) = bundle
                .entries
                .iter()
                .find(|(t, _)| t == shared_file::TL_NAME)?;
            let pos = lanes
                .ifaces()
                .position(|li| copies(li) && self.st.iface(li).dev_type == DeviceType::Shm)?;
            let fk = shared_file::FileKey::decode(k).ok()?;
            shared_file::map_peer_range(&fk).map(|k| (pos, k))
        });
        let mapped_amo = match &mapped {
            Some((pos, _)) => {
                let a = &self.st.iface(lanes.iface_of(*pos)).attr;
                let cpu = a.flags.contains(IfaceFlags::ATOMIC_CPU);
                [
                    cpu && !a.atomics.fop32.is_empty(),
                    cpu && !a.atomics.fop64.is_empty(),
                ]
            }
            None => [false; 2],
        };
        let direct = mapped.as_ref().and_then(|(_, k)| crate::rma::Direct::of(k));
        Ok(Rkey {
            direct,
            mapped_amo,
            ep,
            rma: unpack(lanes.rma()),
            amo: unpack(lanes.amo()),
            mapped,
        })
    }

    /// Writes `data` to `remote_addr` in the peer's mapping (completes locally; `ep_flush` for
    /// remote completion).
    pub fn put(&mut self, ep: EpHandle, data: &[u8], remote_addr: u64, rkey: &Rkey) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let made = self.st.rma(idx, RmaDir::Put(data), remote_addr, rkey);
        self.st.start_made(made)
    }

    /// Reads `buf.len()` bytes at `remote_addr` of the peer's mapping into `buf` (given back in
    /// the completion).
    pub fn get(&mut self, ep: EpHandle, buf: Vec<u8>, remote_addr: u64, rkey: &Rkey) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let made = self.st.rma(idx, RmaDir::Get(buf.into()), remote_addr, rkey);
        self.st.start_made(made)
    }
}

impl Core {
    /// The address of `len` bytes at `addr` when they lie inside one region this worker mapped
    /// for remote access.
    pub(crate) fn mapped_range(&self, addr: u64, len: usize) -> Option<usize> {
        let addr = usize::try_from(addr).ok()?;
        self.regions()
            .borrow()
            .iter()
            .any(|&(s, l)| addr >= s && addr.checked_add(len).is_some_and(|e| e <= s + l))
            .then_some(addr)
    }

    /// Registers `ptr..ptr+len` with every memory domain that registers memory and packs its
    /// key, appending `(tl name, handle, packed key)` to `keys` (one per transport name).
    ///
    /// # Safety
    /// The memory must stay valid until the returned handles are dropped.
    pub(crate) unsafe fn register_all(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        keys: &mut Vec<(&'static str, MemHandle, Vec<u8>)>,
    ) {
        for (i, info) in self.ifaces().iter().enumerate() {
            if !info.md_reg || keys.iter().any(|(t, _, _)| *t == info.tl_name) {
                continue;
            }
            // SAFETY: the caller keeps the memory valid while the handle lives.
            let m = match unsafe { self.md(i).mem_reg(ptr, len) } {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!("{} cannot register the mapping: {e}", info.tl_name);
                    continue;
                }
            };
            let mut packed = Vec::new();
            if self.md(i).rkey_pack(&m, &mut packed).is_ok() {
                keys.push((info.tl_name, m, packed));
            }
        }
    }

    /// Checks that `rkey` was unpacked on this worker for endpoint `idx` (as it is now).
    pub(crate) fn check_rkey(&self, idx: usize, rkey: &Rkey) -> Result<()> {
        if rkey.ep.wid != self.worker_id() {
            return Err(Error::InvalidParam(
                "remote key was unpacked on another worker".into(),
            ));
        }
        if (rkey.ep.idx, rkey.ep.gen) != (idx as u32, self.ep(idx).gen()) {
            return Err(Error::InvalidParam(
                "remote key was unpacked for another endpoint".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn rma(
        &mut self,
        idx: usize,
        dir: RmaDir<'_>,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<SendMade> {
        self.ep_usable(idx)?;
        self.check_rkey(idx, rkey)?;
        if let Some((lane, mk)) = &rkey.mapped {
            if self.ep(idx).queue_empty() {
                return self.rma_mapped(idx, *lane, mk, dir, remote_addr, rkey);
            }
        }
        if let RmaDir::Put(d) = &dir {
            if self.put_emulation_fits(idx, d.len()) {
                if let Some(rk) = rkey.rma.as_ref() {
                    rk.check(remote_addr, d.len())?;
                    return self.put_emulated(idx, d, remote_addr).map(SendMade::Done);
                }
            }
        }
        // Through the RMA lane, after the target has applied the emulated puts before it.
        self.queue_after_acks(idx);
        self.rma_registered(idx, dir, remote_addr, rkey)
    }

    /// True when a put of `len` bytes goes cheaper as a message through the endpoint's
    /// shared-memory AM lane than through the RMA lane: a small put (at most
    /// [`EMULATED_PUT_MAX`]) with nothing queued ahead of it. The RMA lane to memory that is
    /// not in a shared segment is cma, one system call per put.
    #[inline]
    fn put_emulation_fits(&self, idx: usize, len: usize) -> bool {
        let ep = self.ep(idx);
        len != 0
            && len <= EMULATED_PUT_MAX
            && ep.queue_empty()
            && ep
                .lanes()
                .is_some_and(|l| self.iface(l.am_iface()).dev_type == DeviceType::Shm)
    }

    /// A put the target applies (PUT_REQ): done locally once sent or queued; the target's
    /// acknowledgement counts with the emulated atomics', which flushes and fences wait for.
    fn put_emulated(&mut self, idx: usize, d: &[u8], remote_addr: u64) -> Result<Op> {
        let h = PutReqHdr { addr: remote_addr }.encode();
        self.send_ctl2(idx, am_id::PUT_REQ, &h, d)?;
        let ep = self.ep_mut(idx);
        ep.note_amo_sent();
        Ok(Op::Done(Completion::ok()))
    }

    /// PUT_REQ: writes a peer's emulated put into memory this worker mapped for remote access,
    /// or refuses it (with a log line) when the bytes do not lie inside one mapped region.
    pub(crate) fn on_put_req(&mut self, idx: usize, h: PutReqHdr, data: &[u8]) -> Result<()> {
        let status = match self.mapped_range(h.addr, data.len()) {
            Some(addr) => {
                // SAFETY: the range lies inside a live region this worker mapped for remote
                // access, which peers may write at any time (as cma and the transports do).
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len())
                };
                0
            }
            None => {
                tracing::debug!(
                    "emulated put refused: {} bytes at {:#x} are not inside a mapped region",
                    data.len(),
                    h.addr
                );
                1
            }
        };
        let rep = AtomicRepHdr {
            req: NO_REQ,
            status,
            value: 0,
        };
        self.send_ctl(idx, am_id::ATOMIC_REP, &rep.encode())
    }

    /// Put/get on a peer segment mapped in this process: the lane's short and bcopy
    /// operations, which copy straight between the user's buffer and the segment. Nothing is
    /// registered, allocated or queued; a lane that pushes back hands the rest of the
    /// operation to the registered (cma) path.
    pub(crate) fn rma_mapped(
        &mut self,
        idx: usize,
        lane: usize,
        mk: &RemoteKey,
        dir: RmaDir<'_>,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<SendMade> {
        let len = match &dir {
            RmaDir::Put(d) => d.len(),
            RmaDir::Get(b) => b.len(),
        };
        mk.check(remote_addr, len)?;
        let (uep, info) = self.lane_mut(idx, lane)?;
        let attr = &info.attr;
        let mut off = 0;
        match dir {
            RmaDir::Put(d) => {
                if len <= attr.put.max_short {
                    if let Outcome::Done(()) = uep.put_short(d, remote_addr, mk)? {
                        off = len;
                    }
                } else {
                    let chunk = attr.put.max_bcopy.max(1);
                    while off < len {
                        let piece = &d[off..len.min(off + chunk)];
                        let at = remote_addr + off as u64;
                        let pack = |dst: &mut [u8]| {
                            dst[..piece.len()].copy_from_slice(piece);
                            piece.len()
                        };
                        match uep.put_bcopy(pack, at, mk)? {
                            Outcome::Done(n) if n == piece.len() => off += n,
                            _ => break,
                        }
                    }
                }
                if off == len {
                    return Ok(SendMade::Done(Op::Done(Completion::ok())));
                }
                let at = remote_addr + off as u64;
                self.rma_registered(idx, RmaDir::Put(&d[off..]), at, rkey)
            }
            RmaDir::Get(mut buf) => {
                if len <= attr.get.max_short {
                    if let Outcome::Done(()) = uep.get_short(&mut buf, remote_addr, mk)? {
                        off = len;
                    }
                } else {
                    let chunk = attr.get.max_bcopy.max(1);
                    while off < len {
                        let n = chunk.min(len - off);
                        let at = remote_addr + off as u64;
                        let dst = &mut buf[off..off + n];
                        let mut unpack = |src: &[u8]| dst.copy_from_slice(&src[..n]);
                        // Only Done or NoResource: the copy happens during the call.
                        match uep.get_bcopy(n, at, mk, comp_id(COMP_GET, 0), &mut unpack)? {
                            Outcome::Done(()) => off += n,
                            _ => break,
                        }
                    }
                }
                if off == len {
                    return Ok(SendMade::Done(Op::Done(Completion {
                        len,
                        buf: buf.into_vec(),
                        ..Completion::ok()
                    })));
                }
                // Rare: the lane pushed back. Read the whole buffer through the registered path.
                self.rma_registered(idx, RmaDir::Get(buf), remote_addr, rkey)
            }
        }
    }

    /// Put/get through the RMA lane's zero-copy operations on registered memory (cma on this
    /// host, the network otherwise).
    pub(crate) fn rma_registered(
        &mut self,
        idx: usize,
        dir: RmaDir<'_>,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<SendMade> {
        let rk = rkey.rma.clone().ok_or_else(|| {
            Error::Unsupported(
                "no zero-copy RMA lane to this peer for this mapping (no common transport that registers memory)"
                    .into(),
            )
        })?;
        let li = self
            .ep(idx)
            .lanes()
            .and_then(|l| l.rma_iface())
            .ok_or_else(|| Error::Unsupported("no RMA lane".into()))?;
        let len = match &dir {
            RmaDir::Put(d) => d.len(),
            RmaDir::Get(b) => b.len(),
        };
        rk.check(remote_addr, len)?;
        let wants = match dir {
            RmaDir::Put(_) => IfaceFlags::PUT_ZCOPY,
            RmaDir::Get(_) => IfaceFlags::GET_ZCOPY,
        };
        if !self.iface(li).attr.flags.contains(wants) {
            return Err(Error::Unsupported(format!(
                "{} has no {wants:?}",
                self.iface(li).tl_name
            )));
        }
        match dir {
            RmaDir::Put(d) => {
                let key = self.new_send(idx, 0, SendData::Borrowed(d), false);
                if len == 0 {
                    self.finish(key, Ok(()));
                    return Ok(SendMade::Done(self.op_of(key)));
                }
                let s = self.send_mut(key);
                let ptr = NonNull::new(s.data.as_mut_ptr())
                    .ok_or_else(|| Error::InvalidParam("empty put buffer".into()));
                // SAFETY: the vector is owned by the request and outlives the handle.
                let m = ptr.and_then(|ptr| unsafe { self.md(li).mem_reg(ptr, len) });
                let m = self.unless_failed(key, m)?;
                let x = self.send_rndv(key);
                x.memh = Some(m);
                x.rkey = Some(rk);
                x.remote_addr = remote_addr;
                let s = self.send_mut(key);
                s.user_rma = true;
                s.stage = SendStage::Rndv(RndvSend::Put);
                let behind = !self.ep(idx).queue_empty();
                Ok(SendMade::Req { idx, key, behind })
            }
            RmaDir::Get(mut buf) => {
                let ptr = NonNull::new(buf.as_mut_ptr());
                let key = self.new_recv(buf, 0, 0);
                self.req_mut(key).set_ep(idx);
                if len == 0 {
                    self.finish(key, Ok(()));
                    return Ok(SendMade::Done(self.op_of(key)));
                }
                let ptr = ptr.ok_or_else(|| Error::InvalidParam("empty get buffer".into()));
                // SAFETY: the buffer is owned by the request and outlives the handle.
                let m = ptr.and_then(|ptr| unsafe { self.md(li).mem_reg(ptr, len) });
                let m = self.unless_failed(key, m)?;
                let x = self.recv_rndv(key);
                x.memh = Some(m);
                x.rkey = Some(rk);
                x.remote_addr = remote_addr;
                let r = self.recv_mut(key);
                r.total = len;
                r.user_rma = true;
                r.stage = RecvStage::Rndv(RndvRecv::Get);
                // Behind a queued operation (or fence) it waits its turn.
                let behind = !self.ep(idx).queue_empty();
                Ok(SendMade::Req { idx, key, behind })
            }
        }
    }
}
