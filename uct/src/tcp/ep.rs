//! tcp endpoints: the endpoint, its life (error, destroy: the connection closes once its
//! queued bytes left) and the data operations of the `Endpoint` trait, which check their
//! arguments, build their frames and hand them to the send path (`ep/send.rs`).

mod send;
pub(super) use send::Sent;

use super::conn::{ConnState, Req, AM_MAX_HDR, MAX_BCOPY, MAX_REQS, MAX_SHORT};
use super::inner::Inner;
use super::iov::{send_once, Segs, MAX_IOV};
use super::wire::{
    self, AtomicMode, FlushReq, FrameHeader, Hello, HelloMode, Kind, PutHdr, TagHdr,
};
use super::{DevAddr, EpAddr};
use crate::cpu_atomic::Word;
use crate::ep::{check_am_id, check_len, AtomicOp, CompletionId, Endpoint, EpId, PendingId};
use crate::md::{Iov, RemoteKey};
use std::cell::RefCell;
use std::rc::Rc;
use ucs::{Error, Outcome, Result};

/// A tcp endpoint: one connection to a peer interface (connect-to-iface) or endpoint
/// (connect-to-ep). Dropping it closes the connection once its queued bytes are sent.
pub struct TcpEp {
    pub(super) inner: Rc<RefCell<Inner>>,
    pub(super) key: usize,
    id: EpId,
}

impl std::fmt::Debug for TcpEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TcpEp({})", self.id.0)
    }
}

impl TcpEp {
    pub(crate) fn new(inner: Rc<RefCell<Inner>>, key: usize, id: EpId) -> Self {
        TcpEp { inner, key, id }
    }

    /// The error that closed this endpoint's connection, if it failed.
    pub fn error(&self) -> Option<Error> {
        match &self.inner.borrow().conns[self.key].state {
            ConnState::Failed(e) => Some(e.as_ref().clone()),
            _ => None,
        }
    }

    /// The request id the next `reqs.insert` will use, or None when the table is full.
    pub(super) fn next_req_id(&self) -> Option<u64> {
        let g = self.inner.borrow();
        let c = &g.conns[self.key];
        (c.reqs.len() < MAX_REQS).then(|| c.reqs.vacant_key() as u64 + 1)
    }
}

impl Drop for TcpEp {
    fn drop(&mut self) {
        let Ok(mut g) = self.inner.try_borrow_mut() else {
            return;
        };
        let inner = &mut *g;
        let Some(c) = inner.conns.get_mut(self.key) else {
            return;
        };
        c.ep_alive = false;
        c.pending.clear();
        if c.is_connected() && !c.tx.is_empty() {
            let fd = c.fd();
            let _ = c.tx.progress(fd, &mut inner.done);
            inner.tx_pool.take_back(&mut c.tx);
        }
        let c = &mut inner.conns[self.key];
        match c.state {
            ConnState::Idle | ConnState::Waiting => inner.fail(self.key, Error::Canceled, true),
            ConnState::Failed(_) => {}
            // A connection being set up stays: it becomes unowned, like an accepted one, and a
            // later endpoint to the same interface reuses it. It closes when the peer closes
            // it or the interface goes.
            ConnState::Connecting | ConnState::Handshake => {
                c.ep = None;
                if c.conn_id != 0 {
                    inner.by_conn_id.remove(&c.conn_id);
                    c.conn_id = 0;
                    c.peer_iface = None;
                }
            }
            // An established connection is detached: the peer hears of it (`Detach`, after
            // the bytes queued before it), no later endpoint of ours takes it, and it closes
            // as soon as the peer detached too and its queued bytes left (right here when the
            // peer's endpoint went first, or when the peer's `Detach` is all the socket holds).
            // If the send queue has no room for the `Detach`, the connection stays as one being
            // set up does.
            ConnState::Connected => {
                c.ep = None;
                if c.conn_id != 0 {
                    inner.by_conn_id.remove(&c.conn_id);
                    c.conn_id = 0;
                    c.peer_iface = None;
                }
                if c.peer_detached || c.take_waiting_detach() {
                    c.detached = true;
                } else if c.tx.fits_response() {
                    c.detached = true;
                    let f = FrameHeader::new(Kind::Detach, 0, 0).to_bytes();
                    if !c.tx.is_empty() {
                        // Progress sends it after the queued bytes.
                        c.tx.push_pieces(&mut inner.tx_pool, &[&f], 0);
                    } else {
                        match send_once(c.fd(), &f) {
                            Ok(n) if n == f.len() => {}
                            Ok(n) => {
                                c.tx.push_pieces(&mut inner.tx_pool, &[&f], n);
                                inner.wait_writable(self.key);
                            }
                            Err(e) => inner.fail(self.key, e, true),
                        }
                    }
                }
                inner.close_if_unused(self.key);
            }
        }
        inner.cleanup = true;
    }
}

impl Endpoint for TcpEp {
    fn id(&self) -> EpId {
        self.id
    }

    #[inline]
    fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
        check_am_id(id)?;
        check_len(8 + payload.len(), MAX_SHORT)?;
        let hdr = FrameHeader::new(Kind::Am, id, 8 + payload.len()).to_bytes();
        let hb = header.to_le_bytes();
        Ok(match self.send(&[&hdr, &hb, payload], None, None)? {
            None => Outcome::NoResource,
            Some(_) => Outcome::DONE,
        })
    }

    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        check_am_id(id)?;
        if iov.len() > MAX_IOV {
            return Err(Error::InvalidParam(format!(
                "{} iov entries exceed the tcp limit of {MAX_IOV}",
                iov.len()
            )));
        }
        let total: usize = iov.iter().map(|p| p.len()).sum();
        check_len(total, MAX_SHORT)?;
        let hdr = FrameHeader::new(Kind::Am, id, total).to_bytes();
        if let Some(r) = self.send_small(&hdr, iov, FrameHeader::LEN + total) {
            return Ok(match r? {
                None => Outcome::NoResource,
                Some(_) => Outcome::DONE,
            });
        }
        let mut pieces: [&[u8]; MAX_IOV + 1] = [&[]; MAX_IOV + 1];
        pieces[0] = &hdr;
        pieces[1..=iov.len()].copy_from_slice(iov);
        Ok(match self.send_any(&pieces[..=iov.len()], None, None)? {
            None => Outcome::NoResource,
            Some(_) => Outcome::DONE,
        })
    }

    #[inline]
    fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        id: u8,
        pack: F,
    ) -> Result<Outcome<usize>> {
        check_am_id(id)?;
        self.bcopy(Kind::Am, id, &[], pack, |_| Ok(()))
    }

    fn am_zcopy(
        &mut self,
        id: u8,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        check_am_id(id)?;
        check_len(header.len(), AM_MAX_HDR)?;
        let total = Iov::total_len(iov);
        check_len(total, wire::MAX_AM_BODY - AM_MAX_HDR)?;
        let segs = Segs::new(iov)?;
        let hdr = FrameHeader::new(Kind::Am, id, header.len() + total).to_bytes();
        Ok(
            match self.send(&[&hdr, header], Some((segs, Some(comp))), None)? {
                None => Outcome::NoResource,
                Some(Sent::All) => Outcome::DONE,
                Some(Sent::Queued) => Outcome::InProgress,
            },
        )
    }

    fn put_short(&mut self, data: &[u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        check_len(data.len(), MAX_SHORT)?;
        rkey.check(remote_addr, data.len())?;
        let hdr = FrameHeader::new(Kind::Put, 0, data.len()).to_bytes();
        let mut sub = [0u8; PutHdr::LEN];
        PutHdr {
            req_id: 0,
            remote_addr,
            key: rkey.tl_value,
        }
        .encode(&mut sub);
        Ok(match self.send(&[&hdr, &sub, data], None, None)? {
            None => Outcome::NoResource,
            Some(_) => {
                self.note_put();
                Outcome::DONE
            }
        })
    }

    fn put_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        pack: F,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome<usize>> {
        let mut sub = [0u8; PutHdr::LEN];
        PutHdr {
            req_id: 0,
            remote_addr,
            key: rkey.tl_value,
        }
        .encode(&mut sub);
        let r = self.bcopy(Kind::Put, 0, &sub, pack, |len| {
            rkey.check(remote_addr, len).map(|_| ())
        })?;
        if r.is_done() {
            self.note_put();
        }
        Ok(r)
    }

    fn put_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        let total = Iov::total_len(iov);
        check_len(total, wire::MAX_RMA)?;
        rkey.check(remote_addr, total)?;
        let segs = Segs::new(iov)?;
        let Some(req_id) = self.next_req_id() else {
            return Ok(Outcome::NoResource);
        };
        let hdr = FrameHeader::new(Kind::Put, 0, total).to_bytes();
        let mut sub = [0u8; PutHdr::LEN];
        PutHdr {
            req_id,
            remote_addr,
            key: rkey.tl_value,
        }
        .encode(&mut sub);
        Ok(
            match self.send(
                &[&hdr, &sub],
                Some((segs, None)),
                Some(Req::PutZcopy { comp }),
            )? {
                None => Outcome::NoResource,
                Some(_) => Outcome::InProgress,
            },
        )
    }

    fn get_bcopy(
        &mut self,
        len: usize,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
        unpack: &mut dyn FnMut(&[u8]),
    ) -> Result<Outcome> {
        // A get over tcp is a round trip: the data always arrive later, through the sink.
        let _ = unpack;
        check_len(len, MAX_BCOPY)?;
        self.get(len, remote_addr, rkey, || Ok(Req::GetBcopy { len, comp }))
    }

    fn get_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        let total = Iov::total_len(iov);
        check_len(total, wire::MAX_RMA)?;
        self.get(total, remote_addr, rkey, || {
            Ok(Req::GetZcopy {
                segs: Segs::new(iov)?,
                comp,
            })
        })
    }

    fn atomic32_post(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        self.atomic_post(op, value, remote_addr, rkey)
    }
    fn atomic64_post(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        self.atomic_post(op, value, remote_addr, rkey)
    }
    fn atomic32_fetch(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        self.atomic_fetch(op, AtomicMode::Fetch, value, 0, remote_addr, rkey, comp)
    }
    fn atomic64_fetch(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        self.atomic_fetch(op, AtomicMode::Fetch, value, 0, remote_addr, rkey, comp)
    }
    fn atomic_cswap32(
        &mut self,
        compare: u32,
        swap: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        let mode = AtomicMode::Cswap;
        self.atomic_fetch(AtomicOp::Swap, mode, swap, compare, remote_addr, rkey, comp)
    }
    fn atomic_cswap64(
        &mut self,
        compare: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let mode = AtomicMode::Cswap;
        self.atomic_fetch(AtomicOp::Swap, mode, swap, compare, remote_addr, rkey, comp)
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        let (req_id, put_seq) = {
            let mut g = self.inner.borrow_mut();
            let c = &mut g.conns[self.key];
            c.check_usable()?;
            if c.tx.is_empty() && c.reqs.is_empty() && c.put_seq == c.acked_seq {
                return match c.deferred_err.take() {
                    Some(e) => Err(*e),
                    None => Ok(Outcome::DONE),
                };
            }
            if c.reqs.len() >= MAX_REQS {
                return Ok(Outcome::NoResource);
            }
            (c.reqs.vacant_key() as u64 + 1, c.put_seq)
        };
        let mut f = [0u8; FrameHeader::LEN + FlushReq::LEN];
        FrameHeader::new(Kind::FlushReq, 0, 0).encode(&mut f);
        FlushReq { req_id }.encode(&mut f[FrameHeader::LEN..]);
        let req = Req::Flush {
            comp: Some(comp),
            iface_flush: None,
            put_seq,
        };
        Ok(match self.send(&[&f], None, Some(req))? {
            None => Outcome::NoResource,
            Some(_) => Outcome::InProgress,
        })
    }

    fn fence(&mut self) -> Result<()> {
        // One ordered stream per endpoint, applied in order by the target: already fenced.
        Ok(())
    }

    /// The kernel probes an idle connection itself (keepalive); a connection with data
    /// outstanding fails here when the peer's host has acknowledged nothing for the keepalive
    /// time (`super::sockopt::unacked_silence`): a link cut for good, not a busy peer.
    fn check(&mut self) -> Result<()> {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let c = &inner.conns[self.key];
        c.check_usable()?;
        let (true, Some(k)) = (c.is_connected(), inner.sock_cfg.keepalive) else {
            return Ok(());
        };
        let limit = k.dead_after();
        match super::sockopt::unacked_silence(c.fd()) {
            Ok(Some(silent)) if silent > limit => {
                let peer = c.peer.map(|p| p.to_string()).unwrap_or_default();
                let e = Error::PeerFailure(format!(
                    "tcp peer {peer} acknowledged nothing for {silent:?} with data outstanding \
                     (limit {limit:?}: RUCX_TCP_KEEPIDLE + RUCX_TCP_KEEPINTVL x RUCX_TCP_KEEPCNT)"
                ));
                inner.fail(self.key, e.clone(), false);
                Err(e)
            }
            Ok(_) => Ok(()),
            Err(e) => {
                inner.fail(self.key, e.clone(), false);
                Err(e)
            }
        }
    }

    fn pending_add(&mut self, req: PendingId) -> Result<()> {
        let mut g = self.inner.borrow_mut();
        let bp = g.connect_backpressure;
        let c = &mut g.conns[self.key];
        c.check_usable()?;
        if c.pending.is_empty() && c.has_room(bp) {
            return Err(Error::Busy(
                "the endpoint has send resources now: retry the operation".into(),
            ));
        }
        c.pending.push_back(req);
        Ok(())
    }

    fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId)) {
        let reqs: Vec<PendingId> = {
            let mut g = self.inner.borrow_mut();
            g.conns[self.key].pending.drain(..).collect()
        };
        for r in reqs {
            f(r);
        }
    }

    fn ep_address(&self) -> Result<Vec<u8>> {
        let g = self.inner.borrow();
        let c = &g.conns[self.key];
        if c.conn_id == 0 {
            return Err(Error::Unsupported(
                "this tcp endpoint was created connected to an interface; only endpoints from \
                 ep_create have an address"
                    .into(),
            ));
        }
        Ok(EpAddr {
            iface: g.local,
            conn_id: c.conn_id,
        }
        .encode())
    }

    fn connect_to_ep(&mut self, dev_addr: &[u8], ep_addr: &[u8]) -> Result<()> {
        let _ = DevAddr::decode(dev_addr)?;
        let peer = EpAddr::decode(ep_addr)?;
        let mut g = self.inner.borrow_mut();
        let local = g.local;
        let c = &mut g.conns[self.key];
        if c.conn_id == 0 {
            return Err(Error::InvalidParam(
                "connect_to_ep on an endpoint created connected to an interface".into(),
            ));
        }
        match &c.state {
            ConnState::Idle => {}
            ConnState::Connected if c.peer_conn_id == peer.conn_id => return Ok(()),
            ConnState::Failed(e) => return Err(e.as_ref().clone()),
            _ => {
                return Err(Error::InvalidParam(
                    "the tcp endpoint is already connected".into(),
                ))
            }
        }
        let me = (u32::from(local.ip), local.port, c.conn_id);
        let them = (u32::from(peer.iface.ip), peer.iface.port, peer.conn_id);
        if me == them {
            return Err(Error::InvalidParam(
                "connect_to_ep with the endpoint's own address".into(),
            ));
        }
        c.peer_conn_id = peer.conn_id;
        if me < them {
            // We dial; the peer's endpoint waits for our hello.
            let hello = Hello {
                mode: HelloMode::Ep,
                src_conn_id: c.conn_id,
                dst_conn_id: peer.conn_id,
                src_ip: u32::from(local.ip),
                src_port: local.port,
            };
            g.dial(self.key, peer.iface.socket_addr(), hello)
        } else {
            c.state = ConnState::Waiting;
            Ok(())
        }
    }

    fn tag_eager_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
        check_len(data.len(), MAX_SHORT)?;
        let mut f = [0u8; FrameHeader::LEN + TagHdr::LEN];
        FrameHeader::new(Kind::TagEager, 0, data.len()).encode(&mut f);
        TagHdr { tag, imm: 0 }.encode(&mut f[FrameHeader::LEN..]);
        Ok(match self.send(&[&f, data], None, None)? {
            None => Outcome::NoResource,
            Some(_) => Outcome::DONE,
        })
    }

    fn tag_eager_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        let mut sub = [0u8; TagHdr::LEN];
        TagHdr { tag, imm }.encode(&mut sub);
        self.bcopy(Kind::TagEager, 0, &sub, pack, |_| Ok(()))
    }

    fn tag_eager_zcopy(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        self.eager_zcopy(tag, imm, iov, comp)
    }

    /// Announces the data; the receiver pulls it when a posted receive matches. On success
    /// gives `Done(op)`: the operation has *started* (its completion with `comp` follows once
    /// the receiver took the data, or with an error) and `op` names it for `tag_rndv_cancel`.
    fn tag_rndv_zcopy(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        self.rndv_zcopy(tag, header, iov, comp)
    }

    fn tag_rndv_cancel(&mut self, op: u64) -> Result<()> {
        self.rndv_cancel(op)
    }

    fn tag_rndv_request(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
        self.rndv_request(tag, header)
    }
}

impl TcpEp {
    /// The non-fetching atomic on a `W` word (both widths of `atomic*_post`).
    fn atomic_post<W: Word>(
        &mut self,
        op: AtomicOp,
        value: W,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        let size = W::SIZE as u8;
        let value = value.into();
        self.atomic(
            op,
            size,
            AtomicMode::Post,
            value,
            0,
            remote_addr,
            rkey,
            None,
        )
    }

    /// A fetching atomic or compare-and-swap (`mode`) on a `W` word (both widths of
    /// `atomic*_fetch` and `atomic_cswap*`); the old value arrives with the completion.
    #[allow(clippy::too_many_arguments)]
    fn atomic_fetch<W: Word>(
        &mut self,
        op: AtomicOp,
        mode: AtomicMode,
        value: W,
        compare: W,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<W>> {
        let (size, value, compare) = (W::SIZE as u8, value.into(), compare.into());
        Ok(self
            .atomic(
                op,
                size,
                mode,
                value,
                compare,
                remote_addr,
                rkey,
                Some(comp),
            )?
            .map_never())
    }
}

/// `Outcome<()>` of an operation that never finishes inline, as another value type.
trait MapNever {
    fn map_never<T>(self) -> Outcome<T>;
}

impl MapNever for Outcome<()> {
    fn map_never<T>(self) -> Outcome<T> {
        match self {
            Outcome::NoResource => Outcome::NoResource,
            _ => Outcome::InProgress,
        }
    }
}
