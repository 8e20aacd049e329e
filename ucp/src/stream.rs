//! Stream API: an ordered byte stream per endpoint; received bytes fill waiting receives in
//! order.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::Op;
use crate::wire::am_id;
use crate::worker::pending::am_send;
use crate::worker::state::{Pending, ReqKind, SendData, SendStage, State};
use crate::worker::{EpHandle, Worker};
use ucs::{Error, Outcome, Result};

impl Worker {
    /// Appends bytes to the endpoint's ordered stream.
    pub fn stream_send(&mut self, ep: EpHandle, data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.stream_send(idx, SendData::Borrowed(data))
    }

    /// Receives exactly `buf.len()` stream bytes from the endpoint (in order, after earlier
    /// stream receives); the completion gives the buffer back.
    pub fn stream_recv(&mut self, ep: EpHandle, buf: Vec<u8>) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.stream_recv(idx, buf)
    }

    /// Stream bytes received and not yet consumed on the endpoint.
    pub fn stream_available(&self, ep: EpHandle) -> Result<usize> {
        let idx = self.st.ep_idx(ep)?;
        Ok(self.st.eps[idx]
            .extra
            .as_ref()
            .map_or(0, |x| x.stream_rx.len()))
    }
}

impl State {
    pub(crate) fn stream_send(&mut self, idx: usize, data: SendData<'_>) -> Result<Op> {
        self.ep_usable(idx)?;
        let key = self.new_send(idx, 0, data, false);
        self.send_mut(key).stage = SendStage::Stream;
        let ready = self.eps[idx].pending.is_empty() && self.eps[idx].lanes.is_some();
        if !ready || !self.stream_step(key)? {
            self.eps[idx].pending.push_back(Pending::Req(key));
            self.mark_pending(idx);
        }
        Ok(self.op_of(key))
    }

    pub(crate) fn stream_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let uuid = self.uuid.to_le_bytes();
        let now = self.clock.now();
        let State {
            eps, reqs, info, ..
        } = self;
        let ep = &mut eps[idx];
        let frag = ep
            .proto
            .as_ref()
            .ok_or_else(|| Error::Busy("connecting".into()))?
            .bcopy_single_max;
        let l = ep
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let (li, uep) = &mut l.uct[l.am];
        let attr = &info[*li].attr;
        let s = match &mut reqs[key].kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        while s.offset < s.data.len() {
            let n = frag.min(s.data.len() - s.offset);
            let out = am_send(
                uep,
                attr,
                am_id::STREAM,
                &[&uuid, &s.data[s.offset..s.offset + n]],
            )?;
            if out == Outcome::NoResource {
                return Ok(false);
            }
            ep.last_tx = crate::worker::state::Stamp::of(now);
            s.offset += n;
        }
        self.finish(key, Ok(()));
        Ok(true)
    }

    pub(crate) fn stream_recv(&mut self, idx: usize, buf: Vec<u8>) -> Result<Op> {
        // Bytes that arrived before the peer closed can still be read.
        let x = self.eps[idx].extra_mut();
        let have = x.stream_rx.len();
        let queued: usize = x
            .stream_waiters
            .iter()
            .map(|&k| match self.reqs.get(k).map(|r| &r.kind) {
                Some(ReqKind::StreamRecv { buf, filled }) => buf.len() - filled,
                _ => 0,
            })
            .sum();
        if have < queued + buf.len() {
            self.ep_usable(idx)?;
        }
        let key = self.new_req(Some(idx), ReqKind::StreamRecv { buf, filled: 0 });
        self.eps[idx].extra_mut().stream_waiters.push_back(key);
        self.stream_serve(idx);
        Ok(self.op_of(key))
    }

    /// Moves received stream bytes into waiting receives, in posting order.
    pub(crate) fn stream_serve(&mut self, idx: usize) {
        loop {
            let State { eps, reqs, .. } = self;
            let Some(ep) = eps[idx].extra.as_deref_mut() else {
                break;
            };
            let Some(&key) = ep.stream_waiters.front() else {
                break;
            };
            let done = match reqs.get_mut(key).map(|r| &mut r.kind) {
                Some(ReqKind::StreamRecv { buf, filled }) => {
                    let n = (buf.len() - *filled).min(ep.stream_rx.len());
                    for (d, s) in buf[*filled..*filled + n]
                        .iter_mut()
                        .zip(ep.stream_rx.drain(..n))
                    {
                        *d = s;
                    }
                    *filled += n;
                    *filled == buf.len()
                }
                _ => true,
            };
            if !done {
                break;
            }
            self.eps[idx].extra_mut().stream_waiters.pop_front();
            if self.reqs.get(key).is_some_and(|r| r.done.is_none()) {
                self.finish(key, Ok(()));
            }
        }
    }

    /// STREAM: bytes of the peer's stream, appended and handed to waiting receives.
    pub(crate) fn on_stream(&mut self, idx: usize, data: &[u8]) {
        self.eps[idx].extra_mut().stream_rx.extend(data);
        self.stream_serve(idx);
    }
}
