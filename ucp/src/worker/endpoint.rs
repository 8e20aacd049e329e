//! Endpoints: creation from a peer address or a connection, their status and protocol table, and
//! the lookups every operation starts with (handle to index, usable or failed).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::address::WorkerAddress;
use crate::wire::am_id;
use crate::wireup::ep::connect_ep;
use crate::wireup::ProtoConfig;
use crate::worker::peer_req::PEER_ID_MASK;
use crate::worker::state::{Ep, EpExtra, EpState, State};
use crate::worker::{EpHandle, EpParams, ErrHandler, Worker};
use std::collections::VecDeque;
use ucs::{Error, Result};

impl Worker {
    /// Creates an endpoint to the worker whose packed address is `peer_address`: picks lanes,
    /// connects, and sends this worker's address so the peer can reply.
    pub fn ep_create(&mut self, peer_address: &[u8], params: EpParams) -> Result<EpHandle> {
        let addr = WorkerAddress::decode(peer_address)?;
        if let Some(&idx) = self.st.by_uuid.get(&addr.uuid) {
            let ep = &mut self.st.eps[idx];
            if matches!(ep.state, EpState::Ready | EpState::Connecting) {
                if params.err_handler.is_some() {
                    ep.err_handler = params.err_handler;
                }
                let gen = ep.gen;
                return Ok(self.st.ep_handle(idx, gen));
            }
        }
        let idx = self.st.new_ep(addr, params.err_handler);
        if let Err(e) = connect_ep(&mut self.ifaces, &mut self.st, idx) {
            let ep = self.st.eps.remove(idx);
            self.st.by_uuid.remove(&ep.uuid);
            return Err(e);
        }
        let body = self.st.address.clone();
        self.st.send_ctl(idx, am_id::WIREUP, &body)?;
        self.st.ep_lane_start(idx)?;
        Ok(self.st.ep_handle(idx, self.st.eps[idx].gen))
    }

    /// Client side of client/server: connects to a [`crate::Listener`] on `server`, exchanges
    /// worker addresses, and creates the endpoint. A rejected request gives `ConnectionReset`.
    pub fn connect(&mut self, server: std::net::SocketAddr, params: EpParams) -> Result<EpHandle> {
        let addr = crate::listener::client_exchange(server, &self.st.address)?;
        self.ep_create(&addr, params)
    }

    /// Server side: accepts a connection request and creates the endpoint to the client.
    pub fn accept(&mut self, req: crate::ConnRequest, params: EpParams) -> Result<EpHandle> {
        let mut req = req;
        let ep = match self.ep_create(&req.client_address, params) {
            Ok(ep) => ep,
            Err(e) => {
                let _ = crate::listener::write_reject(&mut req.stream, &e.to_string());
                return Err(e);
            }
        };
        let addr = self.st.address.clone();
        crate::listener::write_msg(&mut req.stream, crate::listener::CmKind::Accept, &addr)?;
        Ok(ep)
    }

    /// True when this worker has a usable endpoint to the worker whose packed address is
    /// `peer_address`: one created here, or one created when that worker's wire-up arrived.
    /// A side that knows its peer is creating an endpoint to it can wait for this before its
    /// own `ep_create`, which then returns that endpoint and rides the peer's connections
    /// (tcp: one two-way connection instead of one per direction).
    pub fn has_ep_to(&self, peer_address: &[u8]) -> Result<bool> {
        let addr = WorkerAddress::decode(peer_address)?;
        Ok(self.st.by_uuid.get(&addr.uuid).is_some_and(|&idx| {
            matches!(self.st.eps[idx].state, EpState::Ready | EpState::Connecting)
        }))
    }

    /// The endpoint's state: `Ok` while usable, or the error that failed it.
    pub fn ep_status(&self, ep: EpHandle) -> Result<()> {
        let idx = self.st.ep_idx(ep)?;
        match &self.st.eps[idx].state {
            EpState::Failed(e) => Err((**e).clone()),
            EpState::Closed => Err(Error::ConnectionReset("endpoint is closed".into())),
            _ => Ok(()),
        }
    }

    /// The endpoint's AM lane as `transport/device` (for example `rc_verbs/rxe0:1` once the
    /// lane moved there after wire-up); `Busy` while the endpoint is connecting.
    pub fn ep_am_lane(&self, ep: EpHandle) -> Result<String> {
        let idx = self.st.ep_idx(ep)?;
        let l = self.st.eps[idx]
            .lanes
            .as_ref()
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
        let i = &self.st.info[l.uct[l.am].0];
        Ok(format!("{}/{}", i.tl_name, i.dev_name))
    }

    /// True once the endpoint's wire-up is complete: its lanes exist, a connect-to-endpoint
    /// lane (rc_verbs) is connected or given up, and a due AM lane switch happened. Until then
    /// messages go over the wire-up lane (tcp); remote keys unpacked before an RMA lane joins
    /// cannot use it, so one-sided users wait for this first.
    pub fn ep_wired_up(&self, ep: EpHandle) -> Result<bool> {
        let idx = self.st.ep_idx(ep)?;
        self.st.ep_usable(idx)?;
        Ok(self.st.eps[idx]
            .lanes
            .as_ref()
            .is_some_and(|l| l.rma_wait.is_none() && l.am_next.is_none()))
    }

    /// The protocol table of the endpoint (what `RUCX_PROTO_INFO=y` prints).
    pub fn ep_proto_info(&self, ep: EpHandle) -> Result<String> {
        let idx = self.st.ep_idx(ep)?;
        self.st.proto_table(idx)
    }

    /// The endpoint's protocol thresholds.
    pub fn ep_proto_config(&self, ep: EpHandle) -> Result<ProtoConfig> {
        let idx = self.st.ep_idx(ep)?;
        self.st.eps[idx]
            .proto
            .as_deref()
            .copied()
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))
    }
}

impl EpHandle {
    /// The endpoint's slot in its worker: small and dense (a closed endpoint's slot is reused
    /// by a later one), so a user can keep per-endpoint data in a vector indexed by it. Two
    /// endpoints of one worker alive at once never share a slot; a handle kept after its
    /// endpoint closed may name a slot a newer endpoint has, so compare whole handles too.
    pub fn slot(&self) -> usize {
        self.idx as usize
    }
}

#[cold]
fn bad_handle(foreign: bool) -> Error {
    Error::InvalidParam(if foreign {
        "endpoint handle belongs to another worker".into()
    } else {
        "endpoint handle is stale (closed)".into()
    })
}

impl State {
    pub(crate) fn new_ep(&mut self, addr: WorkerAddress, err_handler: Option<ErrHandler>) -> usize {
        self.ep_gen = self.ep_gen.wrapping_add(1);
        let now = self.now();
        let uuid = addr.uuid;
        let idx = self.eps.insert(Ep {
            gen: self.ep_gen,
            secret: ucs::random::secret_u64() & PEER_ID_MASK,
            uuid,
            lanes: None,
            proto: None,
            state: EpState::Connecting,
            pending: VecDeque::new(),
            in_pending_list: false,
            err_handler,
            close_acked: false,
            last_tx: now,
            last_rx: now,
            amo_sent: 0,
            amo_acked: 0,
            extra: Some(Box::new(EpExtra {
                addr: Some(addr),
                ..EpExtra::default()
            })),
        });
        self.by_uuid.insert(uuid, idx);
        idx
    }

    /// The handle of endpoint `idx` of generation `gen`.
    pub(crate) fn ep_handle(&self, idx: usize, gen: u32) -> EpHandle {
        EpHandle {
            wid: self.id,
            idx: idx as u32,
            gen,
        }
    }

    /// The index of the endpoint `h` names, or `InvalidParam` for a handle of another worker or
    /// a stale (closed) one.
    #[inline]
    pub(crate) fn ep_idx(&self, h: EpHandle) -> Result<usize> {
        match self.eps.get(h.idx as usize) {
            Some(e) if e.gen == h.gen && h.wid == self.id => Ok(h.idx as usize),
            _ => Err(bad_handle(h.wid != self.id)),
        }
    }

    pub(crate) fn ep_usable(&self, idx: usize) -> Result<()> {
        match &self.eps[idx].state {
            EpState::Failed(e) => Err((**e).clone()),
            EpState::Closed => Err(Error::ConnectionReset("endpoint is closed".into())),
            _ => Ok(()),
        }
    }

    pub(crate) fn proto_table(&self, idx: usize) -> Result<String> {
        let ep = &self.eps[idx];
        let (lanes, proto) = match (&ep.lanes, &ep.proto) {
            (Some(l), Some(p)) => (l, p),
            _ => return Err(Error::Busy("endpoint is still connecting".into())),
        };
        let name = |lane: usize| {
            let i = &self.info[lanes.uct[lane].0];
            format!("{}/{}", i.tl_name, i.dev_name)
        };
        let mut t = proto.table(&name(lanes.am), lanes.rma().map(name).as_deref());
        let li = lanes.uct[lanes.am].0;
        t.push_str(&self.tm_proto_row(li, proto, &name(lanes.am)));
        Ok(t)
    }
}
