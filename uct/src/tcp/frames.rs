//! Received frames: one method per kind of frame, applied to the connection it arrived on.
//!
//! The receive loop checks the connection's set-up state (see `handshake.rs`); [`TcpIface::handle`]
//! hands a frame of a set-up connection to the method of its kind. Methods that need no callback work on [`Inner`] and
//! give the completion to report, if any; the caller reports it after releasing the borrow, so
//! the sink may call endpoint operations. A method's error closes the connection.

use super::conn::{Conn, Req};
use super::inner::{iface_flush_part_done, Inner};
use super::md::RegTable;
use super::posted::TagRx;
use super::txq::{Done, TxItem};
use super::wire::{
    Ack, AtomicMode, AtomicReq, AtomicResp, Chunk, FlushReq, GetReq, Kind, PutHdr, RxEvent, TagHdr,
    TagRndvHdr, WireStatus,
};
use super::TcpIface;
use crate::cpu_atomic::{apply_sized, Apply};
use crate::ep::CompletionId;
use crate::iface::EventSink;
use ucs::{Error, Result};

/// What the dispatch loop does after an event.
pub(super) enum Flow {
    Continue,
    /// The remaining bytes belong to another connection (connect-to-ep attach).
    Redirect(usize),
    Fail(Error),
}

impl TcpIface {
    /// Applies one received frame of connection `key`, which is set up (the caller checked
    /// it with `Inner::setup_frame`).
    #[inline]
    pub(super) fn handle<S: EventSink>(
        &mut self,
        key: usize,
        ev: RxEvent<'_>,
        sink: &mut S,
    ) -> Flow {
        let done = match ev {
            RxEvent::Hello(_) => Err(Error::Wire("unexpected second hello".into())),
            RxEvent::HelloAck(_) => Err(Error::Wire("unexpected hello ack".into())),
            RxEvent::Am { id, data } => {
                sink.am(id, data);
                Ok(None)
            }
            RxEvent::TagEager(t, chunk) => self.on_tag_eager(key, t, chunk, sink),
            RxEvent::TagRndv(h, user_hdr) => self.on_tag_rndv(key, h, user_hdr, sink),
            RxEvent::GetResp(a, chunk) => self.on_get_resp(key, a, chunk, sink),
            RxEvent::TagGet(r) => self.inner.borrow_mut().on_tag_get(key, r),
            RxEvent::Put(h, chunk) => self.inner.borrow_mut().on_put(key, h, chunk),
            RxEvent::PutAck(a) => self.inner.borrow_mut().on_put_ack(key, a),
            RxEvent::GetReq(g) => self.inner.borrow_mut().on_get_req(key, g),
            RxEvent::AtomicReq(r) => self.inner.borrow_mut().on_atomic_req(key, r),
            RxEvent::AtomicResp(a) => self.inner.borrow_mut().on_atomic_resp(key, a),
            RxEvent::FlushReq(f) => self.inner.borrow_mut().on_flush_req(key, f),
            RxEvent::FlushAck(a) => self.inner.borrow_mut().on_flush_ack(key, a),
            RxEvent::Detach => {
                // The connection closes after the dispatch if nothing else uses it (see
                // `rx_settle`).
                self.inner.borrow_mut().conns[key].peer_detached = true;
                Ok(None)
            }
        };
        match done {
            Ok(None) => Flow::Continue,
            Ok(Some((cid, res))) => {
                sink.completion(cid, res);
                Flow::Continue
            }
            Err(e) => Flow::Fail(e),
        }
    }

    /// `TagEager`: the frame's first chunk matches the tag against the posted receives; the
    /// payload goes to the matched receive's buffer, or to the staging buffer of an unexpected
    /// message that arrives in pieces. The last chunk reports the message.
    fn on_tag_eager<S: EventSink>(
        &mut self,
        key: usize,
        t: TagHdr,
        chunk: Chunk<'_>,
        sink: &mut S,
    ) -> Result<Option<Done>> {
        {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            let c = &mut inner.conns[key];
            if matches!(c.tag_rx, TagRx::Idle) {
                // The frame's first event: match before the payload.
                c.tag_rx = inner.tag.match_eager(t, chunk.total as usize);
                if let TagRx::Unexp { .. } = c.tag_rx {
                    if !chunk.last {
                        stage_for(&mut c.tag_stage, chunk.total as usize);
                    }
                }
            }
            match &c.tag_rx {
                TagRx::Posted { slot, .. } => {
                    if let Some(p) = inner.tag.matched(*slot) {
                        p.segs.scatter(chunk.offset as usize, chunk.data)
                    }
                }
                TagRx::Unexp { .. } if !(chunk.offset == 0 && chunk.last) => {
                    let at = chunk.offset as usize;
                    match c.tag_stage.get_mut(at..at + chunk.data.len()) {
                        Some(dst) => dst.copy_from_slice(chunk.data),
                        None => {
                            return Err(Error::Wire(
                                "tagged eager bytes beyond the announced length".into(),
                            ))
                        }
                    }
                }
                TagRx::Unexp { .. } => {}
                TagRx::Idle => {
                    return Err(Error::Wire("tagged eager bytes without a start".into()))
                }
            }
            if !chunk.last {
                return Ok(None);
            }
        }
        let whole = (chunk.offset == 0).then_some(chunk.data);
        self.tag_finish(key, whole, sink);
        Ok(None)
    }

    /// `TagRndv`: a matched rendezvous asks the sender for its data (`TagGet`); an unmatched
    /// one goes to the sink with the sender's address and remote key.
    fn on_tag_rndv<S: EventSink>(
        &mut self,
        key: usize,
        h: TagRndvHdr,
        user_hdr: &[u8],
        sink: &mut S,
    ) -> Result<Option<Done>> {
        if self.inner.borrow_mut().rndv_matched(key, &h) {
            return Ok(None);
        }
        let rkey = super::md::PackedRkey {
            base: h.remote_addr,
            len: h.length,
            key: h.key,
        }
        .to_bytes();
        let rkey: &[u8] = if h.key != 0 { &rkey } else { &[] };
        sink.tag_unexp_rndv(
            h.tag,
            crate::iface::RndvRemote {
                header: user_hdr,
                remote_addr: h.remote_addr,
                length: h.length as usize,
                rkey,
            },
        );
        Ok(None)
    }

    /// `GetResp`: data (or a refusal) for a get or for the `TagGet` of a matched rendezvous.
    fn on_get_resp<S: EventSink>(
        &mut self,
        key: usize,
        a: Ack,
        chunk: Chunk<'_>,
        sink: &mut S,
    ) -> Result<Option<Done>> {
        let answer = self.inner.borrow_mut().on_get_resp(key, a, chunk)?;
        match answer {
            GetAnswer::Done(d) => Ok(d),
            GetAnswer::Bcopy(cid) => {
                sink.get_bcopy_data(cid, chunk.data);
                Ok(Some((cid, Ok(0))))
            }
        }
    }
}

/// What a get response finished.
enum GetAnswer {
    /// A completion to report, if any.
    Done(Option<Done>),
    /// The data of a `get_bcopy`: the sink gets `chunk.data`, then the completion.
    Bcopy(CompletionId),
}

impl Inner {
    /// A `TagRndv` that matches a posted receive: records the receive as a `TagGet` request
    /// and asks the sender for the data. False when nothing matched.
    fn rndv_matched(&mut self, key: usize, h: &TagRndvHdr) -> bool {
        let Some(p) = self.tag.match_rndv(h) else {
            return false;
        };
        let want = (h.length as usize).min(p.segs.total());
        let mut segs = p.segs;
        segs.truncate(want);
        let req_id = self.conns[key].reqs.insert(Req::TagGet {
            segs,
            ctx: p.ctx,
            tag: h.tag,
            want,
            length: h.length as usize,
        }) as u64
            + 1;
        let mut sub = [0u8; GetReq::LEN];
        GetReq {
            req_id,
            remote_addr: 0,
            key: h.op_id,
            length: want as u64,
        }
        .encode(&mut sub);
        self.respond(key, Kind::TagGet, &sub, None);
        true
    }

    /// `TagGet`: the receiver of our rendezvous asks for its data; it goes out zero-copy
    /// (the operation completes when the kernel took it), or a refusal for an unknown or
    /// canceled operation.
    fn on_tag_get(&mut self, key: usize, r: GetReq) -> Result<Option<Done>> {
        let c = &mut self.conns[key];
        let idx = r.key.wrapping_sub(1) as usize;
        let ok = matches!(c.reqs.get(idx), Some(Req::TagRndv { segs, .. })
            if r.length as usize <= segs.total());
        let mut sub = [0u8; Ack::LEN];
        if ok {
            let Some(Req::TagRndv { mut segs, comp }) = c.reqs.try_remove(idx) else {
                return Err(unknown_req("tag get", r.key));
            };
            segs.truncate(r.length as usize);
            Ack {
                req_id: r.req_id,
                status: WireStatus::Ok,
            }
            .encode(&mut sub);
            self.respond(
                key,
                Kind::GetResp,
                &sub,
                Some(TxItem::Zcopy(segs, Some(comp))),
            );
        } else {
            tracing::warn!(
                op = r.key,
                "refused a tag get for an unknown or canceled rendezvous"
            );
            Ack {
                req_id: r.req_id,
                status: WireStatus::RemoteAccess,
            }
            .encode(&mut sub);
            self.respond(key, Kind::GetResp, &sub, None);
        }
        Ok(None)
    }

    /// `Put`: writes the chunk into the registered region it names; the last chunk is
    /// acknowledged when the initiator asked (`req_id` != 0) or the put was refused.
    fn on_put(&mut self, key: usize, h: PutHdr, chunk: Chunk<'_>) -> Result<Option<Done>> {
        let r = RegTable::global().lookup(h.key, h.remote_addr, chunk.total);
        if let Ok(p) = r {
            // SAFETY: lookup checked that remote_addr..+total lies in a live
            // registration of this process; offset + len <= total.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    chunk.data.as_ptr(),
                    p.add(chunk.offset as usize),
                    chunk.data.len(),
                )
            };
        }
        if chunk.last {
            let status = match &r {
                Ok(_) => WireStatus::Ok,
                Err(e) => {
                    tracing::warn!("refused a put from the peer: {e}");
                    WireStatus::RemoteAccess
                }
            };
            if h.req_id != 0 || status != WireStatus::Ok {
                let mut sub = [0u8; Ack::LEN];
                Ack {
                    req_id: h.req_id,
                    status,
                }
                .encode(&mut sub);
                self.respond(key, Kind::PutAck, &sub, None);
            }
        }
        Ok(None)
    }

    /// `PutAck`: completes a `put_zcopy`; an unsolicited refusal (`req_id` 0) fails the
    /// endpoint's next flush.
    fn on_put_ack(&mut self, key: usize, a: Ack) -> Result<Option<Done>> {
        let c = &mut self.conns[key];
        if unsolicited(c, a.req_id, a.status) {
            return Ok(None);
        }
        let idx = (a.req_id - 1) as usize;
        match c.reqs.get(idx) {
            Some(Req::PutZcopy { .. }) => {
                let Some(Req::PutZcopy { comp: cid }) = c.reqs.try_remove(idx) else {
                    return Err(unknown_req("put ack", a.req_id));
                };
                Ok(Some((cid, status_result(a.status, "put", 0))))
            }
            _ => Err(unknown_req("put ack", a.req_id)),
        }
    }

    /// `GetReq`: answers with the registered bytes asked for (sent straight from that memory),
    /// or a refusal.
    fn on_get_req(&mut self, key: usize, g: GetReq) -> Result<Option<Done>> {
        let r = RegTable::global().lookup(g.key, g.remote_addr, g.length);
        let status = match &r {
            Ok(_) => WireStatus::Ok,
            Err(e) => {
                tracing::warn!("refused a get from the peer: {e}");
                WireStatus::RemoteAccess
            }
        };
        let mut sub = [0u8; Ack::LEN];
        Ack {
            req_id: g.req_id,
            status,
        }
        .encode(&mut sub);
        let local = (r.is_ok() && g.length > 0).then_some(TxItem::Local {
            key: g.key,
            addr: g.remote_addr,
            len: g.length as usize,
            sent: 0,
        });
        self.respond(key, Kind::GetResp, &sub, local);
        Ok(None)
    }

    /// `GetResp`: scatters the chunk into the request's destination and finishes the request
    /// on its last chunk (or at once on a refusal). The response must have the length asked
    /// for, and name a get or tag-get request of this connection.
    fn on_get_resp(&mut self, key: usize, a: Ack, chunk: Chunk<'_>) -> Result<GetAnswer> {
        let c = &mut self.conns[key];
        let idx = a.req_id.wrapping_sub(1) as usize;
        let bad_len = |want: usize| {
            Err(Error::Wire(format!(
                "get response of {} bytes for a request of {want}",
                chunk.total
            )))
        };
        match c.reqs.get(idx) {
            Some(Req::GetZcopy { segs, comp: cid }) => {
                if a.status != WireStatus::Ok {
                    if chunk.total != 0 {
                        return bad_len(0);
                    }
                    let done = (*cid, status_result(a.status, "get", 0));
                    c.reqs.remove(idx);
                    return Ok(GetAnswer::Done(Some(done)));
                }
                if chunk.total as usize != segs.total() {
                    return bad_len(segs.total());
                }
                segs.scatter(chunk.offset as usize, chunk.data);
                if chunk.last {
                    let done = (*cid, Ok(0));
                    c.reqs.remove(idx);
                    return Ok(GetAnswer::Done(Some(done)));
                }
                Ok(GetAnswer::Done(None))
            }
            Some(Req::TagGet { segs, want, .. }) => {
                let want = *want;
                if a.status == WireStatus::Ok && chunk.total as usize != want {
                    return bad_len(want);
                }
                if a.status == WireStatus::Ok {
                    segs.scatter(chunk.offset as usize, chunk.data);
                }
                if a.status != WireStatus::Ok || chunk.last {
                    let Some(Req::TagGet {
                        ctx, tag, length, ..
                    }) = c.reqs.try_remove(idx)
                    else {
                        return Err(unknown_req("get response", a.req_id));
                    };
                    let res = super::posted::rndv_result(a.status, want, length);
                    self.tag.done.push_back((ctx, tag, 0, length, res));
                }
                Ok(GetAnswer::Done(None))
            }
            Some(Req::GetBcopy { len, comp: cid }) => {
                let (len, cid) = (*len, *cid);
                c.reqs.remove(idx);
                if a.status != WireStatus::Ok {
                    return Ok(GetAnswer::Done(Some((
                        cid,
                        status_result(a.status, "get", 0),
                    ))));
                }
                if chunk.total as usize != len || !chunk.last || chunk.offset != 0 {
                    return bad_len(len);
                }
                Ok(GetAnswer::Bcopy(cid))
            }
            _ => Err(unknown_req("get response", a.req_id)),
        }
    }

    /// `AtomicReq`: applies the atomic to registered memory; answers a fetching one, and a
    /// refused posted one (with `req_id` 0).
    fn on_atomic_req(&mut self, key: usize, r: AtomicReq) -> Result<Option<Done>> {
        let res = do_atomic(&r);
        if let Err(e) = &res {
            tracing::warn!("refused an atomic from the peer: {e}");
        }
        if r.mode != AtomicMode::Post || res.is_err() {
            let mut sub = [0u8; AtomicResp::LEN];
            AtomicResp {
                req_id: if r.mode == AtomicMode::Post {
                    0
                } else {
                    r.req_id
                },
                status: if res.is_ok() {
                    WireStatus::Ok
                } else {
                    WireStatus::RemoteAccess
                },
                value: res.unwrap_or(0),
            }
            .encode(&mut sub);
            self.respond(key, Kind::AtomicResp, &sub, None);
        }
        Ok(None)
    }

    /// `AtomicResp`: completes a fetching atomic with the old value; an unsolicited refusal
    /// (`req_id` 0) fails the endpoint's next flush.
    fn on_atomic_resp(&mut self, key: usize, a: AtomicResp) -> Result<Option<Done>> {
        let c = &mut self.conns[key];
        if unsolicited(c, a.req_id, a.status) {
            return Ok(None);
        }
        let idx = (a.req_id - 1) as usize;
        match c.reqs.get(idx) {
            Some(Req::Atomic { comp: cid }) => {
                let done = (*cid, status_result(a.status, "atomic", a.value));
                c.reqs.remove(idx);
                Ok(Some(done))
            }
            _ => Err(unknown_req("atomic response", a.req_id)),
        }
    }

    /// `FlushReq`: everything before it was applied (frames are handled in order): ack.
    fn on_flush_req(&mut self, key: usize, f: FlushReq) -> Result<Option<Done>> {
        let mut sub = [0u8; Ack::LEN];
        Ack {
            req_id: f.req_id,
            status: WireStatus::Ok,
        }
        .encode(&mut sub);
        self.respond(key, Kind::FlushAck, &sub, None);
        Ok(None)
    }

    /// `FlushAck`: completes an endpoint flush (with a refusal the peer reported meanwhile)
    /// or its part of an interface flush.
    fn on_flush_ack(&mut self, key: usize, a: Ack) -> Result<Option<Done>> {
        let c = &mut self.conns[key];
        let idx = a.req_id.wrapping_sub(1) as usize;
        if !matches!(c.reqs.get(idx), Some(Req::Flush { .. })) {
            return Err(unknown_req("flush ack", a.req_id));
        }
        let Some(Req::Flush {
            comp: cid,
            iface_flush,
            put_seq,
        }) = c.reqs.try_remove(idx)
        else {
            return Err(unknown_req("flush ack", a.req_id));
        };
        c.acked_seq = c.acked_seq.max(put_seq);
        let err = c.deferred_err.take().map(|e| *e);
        let done = cid.map(|cid| (cid, err.clone().map_or(Ok(0), Err)));
        if let Some(i) = iface_flush {
            iface_flush_part_done(&mut self.iface_flushes, &mut self.done, i, err);
        }
        Ok(done)
    }
}

fn refused(what: &str) -> Error {
    Error::RemoteAccess(format!(
        "the target refused a {what}: its key is not a live registration there or the range is \
         outside it"
    ))
}

pub(super) fn unknown_req(what: &str, id: u64) -> Error {
    Error::Wire(format!("{what} for unknown request {id}"))
}

fn status_result(s: WireStatus, what: &str, v: u64) -> Result<u64> {
    match s {
        WireStatus::Ok => Ok(v),
        WireStatus::RemoteAccess => Err(refused(what)),
    }
}

/// A reply without a request (`req_id` 0): the target's unsolicited refusal of a put or
/// atomic, which fails the endpoint's next flush. True when `req_id` is 0.
fn unsolicited(c: &mut Conn, req_id: u64, status: WireStatus) -> bool {
    if req_id != 0 {
        return false;
    }
    if status != WireStatus::Ok {
        c.deferred_err = Some(Box::new(refused("put or atomic")));
    }
    true
}

/// True for the kinds of frame the receiver answers (put may need an ack or a refusal).
pub(super) fn is_request(kind: u8) -> bool {
    kind == Kind::TagRndv as u8
        || kind == Kind::TagGet as u8
        || kind == Kind::Put as u8
        || kind == Kind::GetReq as u8
        || kind == Kind::AtomicReq as u8
        || kind == Kind::FlushReq as u8
}

/// Applies a peer's atomic to this process's registered memory; gives the old value.
fn do_atomic(r: &AtomicReq) -> Result<u64> {
    let p = RegTable::global().lookup(r.key, r.remote_addr, r.size as u64)?;
    if !(p as usize).is_multiple_of(r.size as usize) {
        return Err(Error::RemoteAccess(format!(
            "atomic at {:#x} is not {}-byte aligned",
            r.remote_addr, r.size
        )));
    }
    let what = match r.mode {
        AtomicMode::Cswap => Apply::Cswap { compare: r.compare },
        _ => Apply::Op(r.op),
    };
    // SAFETY: lookup checked the `size` bytes lie in a live registration; aligned above. Peers
    // and this process access the location only through atomics or transport copies.
    unsafe { apply_sized(p, r.size as usize, what, r.value) }
}

/// Sizes the staging buffer of an unexpected message that arrives in pieces to its `total`
/// bytes. The buffer comes back from the previous such message with its length, so only bytes
/// beyond that are zeroed: the frame's chunks then write every byte of `0..total` (they cover
/// the payload in order) before the message is reported. Zeroing the whole buffer for each
/// message cost a pass over it: 4 KiB unexpected over tcp, 9948 -> 5784 instructions per
/// message (callgrind of ucp/examples/msgcost, where glibc's `rep stosb` counts per byte).
#[inline]
fn stage_for(stage: &mut Vec<u8>, total: usize) {
    if stage.len() >= total {
        stage.truncate(total);
    } else {
        stage.resize(total, 0);
    }
}
