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
use crate::worker::ep::{connecting, Ep, EpExtra, EpState};
use crate::worker::peer_req::PEER_ID_MASK;
use crate::worker::state::Core;
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
        let body = self.st.wireup_address(idx)?;
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
        match self.st.eps[idx].state {
            EpState::Failed => Err(self.st.eps[idx].failure()),
            EpState::Closed => Err(Error::ConnectionReset("endpoint is closed".into())),
            _ => Ok(()),
        }
    }

    /// The endpoint's AM lane as `transport/device` (for example `rc_verbs/rxe0:1` once the
    /// lane moved there after wire-up); `Busy` while the endpoint is connecting.
    pub fn ep_am_lane(&self, ep: EpHandle) -> Result<String> {
        let idx = self.st.ep_idx(ep)?;
        let l = self.st.eps[idx].lanes.as_ref().ok_or_else(connecting)?;
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
            .ok_or_else(connecting)
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

/// The error of a handle that names no live endpoint of this worker.
#[cold]
pub(crate) fn bad_handle(foreign: bool) -> Error {
    Error::InvalidParam(if foreign {
        "endpoint handle belongs to another worker".into()
    } else {
        "endpoint handle is stale (closed)".into()
    })
}

impl Core {
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
            last_tx: crate::worker::ep::Stamp::of(now),
            last_rx: crate::worker::ep::Stamp::of(now),
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

    /// This worker's address as endpoint `idx`'s wire-up message carries it: only the
    /// transports its lanes use (connected, switched to, or chosen for later), which is all the
    /// peer's reverse endpoint can connect to. UCX packs its wire-up address the same way; over
    /// shared memory the whole address (self, posix, sysv, cma) would not fit a FIFO element
    /// and would take a buffer page in each peer's segment.
    pub(crate) fn wireup_address(&self, idx: usize) -> Result<Vec<u8>> {
        let Some(lanes) = self.eps[idx].lanes.as_ref() else {
            return Ok(self.address.clone());
        };
        let used = |i: usize| {
            lanes.uct.iter().any(|&(li, _)| li == i)
                || lanes.amo_later.as_ref().is_some_and(|p| p.local == i)
                || lanes.rma_wait.as_ref().is_some_and(|w| w.li == i)
        };
        if (0..self.info.len()).all(used) {
            return Ok(self.address.clone());
        }
        WorkerAddress::subset(&self.address, used)
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

    /// Ok unless endpoint `idx` failed or was closed (a state test inline in every send; the
    /// error is built out of line: an inline `Result` of it cost the stream send 48
    /// instructions per message).
    #[inline]
    pub(crate) fn ep_usable(&self, idx: usize) -> Result<()> {
        match self.eps[idx].state {
            EpState::Failed | EpState::Closed => Err(self.ep_unusable(idx)),
            _ => Ok(()),
        }
    }

    /// Why endpoint `idx` (failed or closed) takes no operation.
    #[cold]
    #[inline(never)]
    fn ep_unusable(&self, idx: usize) -> Error {
        match self.eps[idx].state {
            EpState::Failed => self.eps[idx].failure(),
            _ => Error::ConnectionReset("endpoint is closed".into()),
        }
    }
}

impl Core {
    /// The protocol table `RUCX_PROTO_INFO` prints for endpoint `idx` (tag offload's rows
    /// included).
    pub(crate) fn proto_table(&self, idx: usize) -> Result<String> {
        let ep = &self.eps[idx];
        let (lanes, proto) = match (&ep.lanes, &ep.proto) {
            (Some(l), Some(p)) => (l, p),
            _ => return Err(connecting()),
        };
        let name = |lane: usize| {
            let i = &self.info[lanes.uct[lane].0];
            format!("{}/{}", i.tl_name, i.dev_name)
        };
        let mut t = proto.table(&name(lanes.am), lanes.rma().map(name).as_deref());
        let li = lanes.uct[lanes.am].0;
        t.push_str(&self.tm_proto_row(&self.info[li].attr, proto, &name(lanes.am)));
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use crate::address::WorkerAddress;
    use crate::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};

    /// Over shared memory (posix, sysv, cma) an endpoint's wire-up address names only the
    /// transports of its lanes, and the peer's reverse endpoint still connects from it: a tagged
    /// message crosses in each direction.
    #[test]
    fn wireup_address_names_only_the_lanes_transports() {
        let ctx = Context::new(ContextParams {
            features: Features::TAG | Features::RMA,
            config: Some(UcpConfig {
                tls: vec!["posix".into(), "sysv".into(), "cma".into()],
                ..Default::default()
            }),
        })
        .expect("context");
        let mut a = Worker::new(&ctx).expect("worker a");
        let mut b = Worker::new(&ctx).expect("worker b");
        let full = WorkerAddress::decode(a.address()).expect("a's address");
        assert_eq!(full.tls.len(), 3, "{:?}", full.tls);
        let ab = a
            .ep_create(b.address(), EpParams::default())
            .expect("ep a->b");
        let idx = a.st.ep_idx(ab).expect("index");
        let sent = WorkerAddress::decode(&a.st.wireup_address(idx).expect("wire-up address"))
            .expect("decodes");
        let lanes = a.st.eps[idx].lanes.as_ref().expect("lanes");
        let mut lane_tls: Vec<&str> = lanes
            .uct
            .iter()
            .map(|&(li, _)| a.st.info[li].tl_name)
            .collect();
        lane_tls.sort_unstable();
        lane_tls.dedup();
        let mut sent_tls: Vec<&str> = sent.tls.iter().map(|t| t.tl_name.as_str()).collect();
        sent_tls.sort_unstable();
        assert_eq!(sent_tls, lane_tls);
        assert!(sent.tls.len() < full.tls.len(), "{sent_tls:?}");
        assert_eq!(sent.uuid, full.uuid);

        // The reverse endpoint b creates from the trimmed address carries traffic both ways.
        let mut spins = 0u64;
        while !b.has_ep_to(a.address()).expect("decodes") {
            a.progress();
            b.progress();
            spins += 1;
            assert!(spins < 10_000_000, "no wire-up reached b (watchdog)");
        }
        let ba = b
            .ep_create(a.address(), EpParams::default())
            .expect("reverse ep");
        exchange(&mut b, &mut a, ba, 7);
        exchange(&mut a, &mut b, ab, 8);
    }

    /// Sends `tag` from `tx` over `ep` to a receive posted on `rx`, and checks the data.
    fn exchange(tx: &mut Worker, rx: &mut Worker, ep: crate::EpHandle, tag: u64) {
        let data = [tag as u8; 40];
        let mut recv = rx.tag_recv(vec![0u8; 64], tag, u64::MAX).expect("recv");
        let mut send = tx.tag_send(ep, tag, &data).expect("send");
        let mut spins = 0u64;
        let done = loop {
            tx.progress();
            rx.progress();
            if let Op::Pending(r) = send {
                send = match tx.request_take(r) {
                    Ok(c) => Op::Done(c),
                    Err(r) => Op::Pending(r),
                };
            }
            if let Op::Pending(r) = recv {
                recv = match rx.request_take(r) {
                    Ok(c) => Op::Done(c),
                    Err(r) => Op::Pending(r),
                };
            }
            if let (Op::Done(_), Op::Done(c)) = (&send, &recv) {
                break c.clone();
            }
            spins += 1;
            assert!(spins < 10_000_000, "tag {tag} never arrived (watchdog)");
        };
        assert!(done.status.is_ok(), "{:?}", done.status);
        assert_eq!(done.len, data.len());
        assert_eq!(&done.buf.expect("buffer")[..data.len()], &data[..]);
    }
}
