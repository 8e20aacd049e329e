//! Endpoint wire-up: connecting an endpoint's lanes from the peer's address, the reverse
//! endpoint a WIREUP message creates, the endpoint address exchange of connect-to-endpoint lanes
//! (rc_verbs), and the AM lane switch that follows it.
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
use crate::wire::{am_id, EpAddrHdr};
use crate::wireup::{select_lanes, LaneSelection, LocalTl, ProtoConfig};
use crate::worker::ep::{Lanes, WaitLane};
use crate::worker::pending::am_send;
use crate::worker::state::Core;
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;
use uct::Iface as _;
use uct::{AnyEp, AnyIface};

/// Creates the transport endpoints of ucp endpoint `idx` from its peer address, which it
/// forgets afterwards unless a lane still needs it (see `Ep::addr_done`).
pub(crate) fn connect_ep(ifaces: &mut [AnyIface], st: &mut Core, idx: usize) -> Result<()> {
    let Some(addr) = st.ep_mut(idx).extra_get_mut().and_then(|x| x.addr.take()) else {
        return Err(Error::InvalidParam(
            "endpoint has no peer address to connect to".into(),
        ));
    };
    let r = connect_lanes(ifaces, st, idx, &addr);
    let ep = st.ep_mut(idx);
    ep.extra_mut().addr = Some(addr);
    ep.addr_done();
    r
}

/// [`connect_ep`] with the peer's address `addr`.
fn connect_lanes(
    ifaces: &mut [AnyIface],
    st: &mut Core,
    idx: usize,
    addr: &WorkerAddress,
) -> Result<()> {
    let infos = st.ifaces();
    let locals: Vec<LocalTl<'_>> = infos
        .iter()
        .map(|i| LocalTl {
            tl_name: i.tl_name,
            dev_name: &i.dev_name,
            attr: &i.attr,
            md_reg: i.md_reg,
        })
        .collect();
    let self_across = st.config().self_across_workers;
    let sel: LaneSelection = select_lanes(&locals, addr, |li, ri| {
        let r = &addr.tls[ri];
        if !self_across && infos[li].tl_name == "self" && ifaces[li].iface_address() != r.iface_addr
        {
            return Err("self reaches only its own worker".into());
        }
        ifaces[li].is_reachable(&r.device_addr, Some(&r.iface_addr))
    })?;
    // A connect-to-endpoint RMA lane gets an unconnected endpoint now and is connected by the
    // address exchange over the AM lane (`Core::ep_lane_start`).
    let mut rma_wait = None;
    if let Some(p) = sel
        .rma
        .filter(|p| crate::wireup::connect_to_ep_only(&infos[p.local].attr))
    {
        rma_wait = Some(Box::new(WaitLane {
            li: p.local,
            remote: p.remote,
            ep: ifaces[p.local].ep_create()?,
            connected: false,
        }));
    }
    let mut uct_eps: Vec<(usize, AnyEp)> = Vec::new();
    let mut lane_of =
        |pick: crate::wireup::LanePick, uct_eps: &mut Vec<(usize, AnyEp)>| -> Result<usize> {
            if let Some(p) = uct_eps.iter().position(|(l, _)| *l == pick.local) {
                return Ok(p);
            }
            let r = &addr.tls[pick.remote];
            let ep = ifaces[pick.local].ep_create_connected(&r.device_addr, &r.iface_addr)?;
            uct_eps.push((pick.local, ep));
            Ok(uct_eps.len() - 1)
        };
    let am = lane_of(sel.am, &mut uct_eps)?;
    let rma = match sel.rma {
        Some(_) if rma_wait.is_some() => None,
        Some(p) => Some(lane_of(p, &mut uct_eps)?),
        None => None,
    };
    let (amo, amo_later) = match sel.amo {
        Some(p) if uct_eps.iter().any(|(l, _)| *l == p.local) => {
            (Some(lane_of(p, &mut uct_eps)?), None)
        }
        Some(p) => (None, Some(Box::new(p))),
        None => (None, None),
    };
    for (li, e) in uct_eps
        .iter()
        .map(|(l, e)| (l, e))
        .chain(rma_wait.iter().map(|w| (&w.li, &w.ep)))
    {
        st.register_lane(idx, *li, e.id().0);
    }
    let infos = st.ifaces();
    let am_attr = &infos[uct_eps[am].0].attr;
    let rma_attr = rma.map(|r| &infos[uct_eps[r].0].attr);
    let am_md_reg = infos[uct_eps[am].0].md_reg;
    let mut proto = ProtoConfig::compute(am_attr, am_md_reg, rma_attr, st.config());
    st.tm_adjust_proto(uct_eps[am].0, &mut proto);
    let proto = st.intern_proto(proto);
    // Exactly the lanes' size (one or two, not the four a first push reserves): a worker holds
    // one such list per endpoint.
    uct_eps.shrink_to_fit();
    let ep = st.ep_mut(idx);
    let mut lanes = Lanes::new(uct_eps, am, rma, amo);
    lanes.set_waiting(amo_later, rma_wait);
    ep.connected(lanes, proto);
    if st.config().proto_info {
        if let Ok(t) = st.proto_table(idx) {
            eprintln!("[rucx] endpoint to {:#018x}:\n{t}", st.ep(idx).peer_uuid());
        }
    }
    if !st.ep(idx).queue_empty() {
        st.mark_pending(idx);
    }
    Ok(())
}

impl Core {
    pub(crate) fn handle_wireup(&mut self, src: u64, addr: &[u8]) {
        match WorkerAddress::check(addr) {
            Ok(uuid) if uuid == src => {}
            Ok(_) => {
                self.note_unknown_sender();
                tracing::warn!("wire-up address uuid does not match its sender {src:#018x}");
                return;
            }
            Err(e) => {
                self.note_unknown_sender();
                tracing::warn!("bad wire-up address from {src:#018x}: {e}");
                return;
            }
        }
        if let Some(idx) = self.ep_of_peer(src) {
            if !self.ep(idx).is_down() {
                self.ep_note_rx(idx);
                return;
            }
        }
        // Checked above: only a new endpoint needs the address decoded.
        let Ok(peer) = WorkerAddress::decode(addr) else {
            return;
        };
        let idx = self.new_ep(peer, None);
        self.queue_connect(idx);
    }

    /// Fails every request tied to the endpoint and drops its transport endpoints.
    /// Starts the address exchange of a connect-to-endpoint lane once the endpoint's lanes
    /// exist (after the wire-up message on the creator's side): answers an address that
    /// arrived early, or sends ours.
    pub(crate) fn ep_lane_start(&mut self, idx: usize) -> Result<()> {
        if self.ep(idx).lanes().is_none_or(|l| l.rma_wait().is_none()) {
            return Ok(());
        }
        if let Some((connected, addr)) = self
            .ep_mut(idx)
            .extra_get_mut()
            .and_then(|x| x.peer_ep_addr.take())
        {
            return self.on_ep_addr(idx, connected, &addr);
        }
        let ep_addr = match self.ep(idx).lanes().and_then(|l| l.rma_wait()) {
            Some(w) => w.ep.ep_address()?,
            None => return Ok(()),
        };
        let mut body = Vec::new();
        EpAddrHdr {
            connected: false,
            ep_addr: &ep_addr,
        }
        .encode(&mut body);
        self.send_ctl(idx, am_id::EP_ADDR, &body)
    }

    /// The peer's connect-to-endpoint lane address: connect ours to it (replying with our
    /// address, marked connected), and once the peer says it is connected too, start using the
    /// lane for RMA and (when it can carry them) active messages, behind the lane-switch marker
    /// (see the `wireup` module docs). If our endpoint cannot connect, the lane is dropped and
    /// we never say "connected": both sides stay on the wire-up lane.
    pub(crate) fn on_ep_addr(
        &mut self,
        idx: usize,
        peer_connected: bool,
        addr: &[u8],
    ) -> Result<()> {
        let ep = self.ep_mut(idx);
        let peer = ep.peer_uuid();
        if ep.lanes().is_none() {
            ep.extra_mut().peer_ep_addr = Some((peer_connected, addr.to_vec()));
            return Ok(());
        }
        let (Some(l), extra) = ep.lanes_mut_with_extra() else {
            return Ok(());
        };
        let Some(w) = l.rma_wait_mut() else {
            // We do not use that transport to this peer (or already do): nothing to connect.
            return Ok(());
        };
        let mut reply = None;
        if !w.connected {
            let dev = extra
                .and_then(|x| x.addr.as_ref())
                .and_then(|a| a.tls.get(w.remote))
                .map(|t| t.device_addr.as_slice())
                .unwrap_or_default();
            match w
                .ep
                .connect_to_ep(dev, addr)
                .and_then(|()| w.ep.ep_address())
            {
                Ok(a) => {
                    w.connected = true;
                    reply = Some(a);
                }
                Err(e) => {
                    let Some(w) = l.take_rma_wait() else {
                        return Ok(());
                    };
                    let name = self.iface(w.li).tl_name;
                    tracing::warn!(
                        "{name} lane to {peer:#018x} did not connect, staying on the wire-up lane: {e}"
                    );
                    self.unregister_lane(w.li, w.ep.id().0);
                    self.ep_mut(idx).addr_done();
                    return Ok(());
                }
            }
        }
        if let Some(a) = reply {
            let mut body = Vec::new();
            EpAddrHdr {
                connected: true,
                ep_addr: &a,
            }
            .encode(&mut body);
            self.send_ctl(idx, am_id::EP_ADDR, &body)?;
        }
        if peer_connected {
            let Some(w_li) = self
                .ep(idx)
                .lanes()
                .and_then(|l| l.rma_wait())
                .map(|w| w.li)
            else {
                return Ok(());
            };
            let carries_am = crate::wireup::carries_am(&self.iface(w_li).attr, self.config());
            let Some(l) = self.ep_mut(idx).lanes_mut() else {
                return Ok(());
            };
            let Some(w) = l.take_rma_wait() else {
                return Ok(());
            };
            let lane = l.add_rma_lane(w.li, w.ep);
            if carries_am {
                l.set_am_next(lane);
            }
            let am_li = l.am_iface();
            let mut proto = ProtoConfig::compute(
                &self.iface(am_li).attr,
                self.iface(am_li).md_reg,
                Some(&self.iface(w_li).attr),
                self.config(),
            );
            self.tm_adjust_proto(am_li, &mut proto);
            let proto = self.intern_proto(proto);
            let ep = self.ep_mut(idx);
            ep.set_proto(proto);
            ep.addr_done();
            if self.config().proto_info
                && self.ep(idx).lanes().is_some_and(|l| l.am_next().is_none())
            {
                if let Ok(t) = self.proto_table(idx) {
                    eprintln!(
                        "[rucx] endpoint to {:#018x} (RMA lane connected):\n{t}",
                        self.ep(idx).peer_uuid()
                    );
                }
            }
            if self.ep(idx).queue_empty() && !self.am_switch_try(idx)? {
                self.mark_pending(idx);
            } else if !self.ep(idx).queue_empty() {
                // `progress_pending` switches once the queue drained.
                self.mark_pending(idx);
            }
        }
        Ok(())
    }

    /// Moves the endpoint's AM lane to `am_next` if one is due: sends the lane-switch marker as
    /// the last message on the old lane, then makes the new lane the AM lane and recomputes
    /// the thresholds from its limits. Call only with an empty pending queue. Gives false when
    /// the marker met back-pressure (retry from progress); true when switched or nothing due.
    pub(crate) fn am_switch_try(&mut self, idx: usize) -> Result<bool> {
        let uuid = self.worker_uuid().to_le_bytes();
        let Some(l) = self.ep(idx).lanes() else {
            return Ok(true);
        };
        let Some(new) = l.am_next() else {
            return Ok(true);
        };
        let old = l.am();
        {
            let (uep, info) = self.lane_mut(idx, old)?;
            if am_send(uep, &info.attr, am_id::AM_LANE_SWITCH, &[&uuid])? == Outcome::NoResource {
                return Ok(false);
            }
        }
        self.ep_note_tx(idx);
        let ep = self.ep_mut(idx);
        let Some(l) = ep.lanes_mut() else {
            return Ok(true);
        };
        // The old lane stays connected; unless it is the RMA lane, its interface no longer
        // counts this endpoint as a user (it is then polled like an idle interface). An
        // atomics lane does not keep it busy: polling tcp costs a system call per progress
        // call, and atomics, rare, wake it (an interface that had an event is polled on every
        // call for a while).
        let released = l.switch_am();
        let new_li = l.iface_of(new);
        let rma_li = l.rma_iface();
        if let Some(li) = released {
            self.release_iface(li);
        }
        let mut proto = ProtoConfig::compute(
            &self.iface(new_li).attr,
            self.iface(new_li).md_reg,
            rma_li.map(|r| &self.iface(r).attr),
            self.config(),
        );
        self.tm_adjust_proto(new_li, &mut proto);
        let proto = self.intern_proto(proto);
        self.ep_mut(idx).set_proto(proto);
        self.stats_mut().am_lane_switches += 1;
        if self.config().proto_info {
            if let Ok(t) = self.proto_table(idx) {
                eprintln!(
                    "[rucx] endpoint to {:#018x} (AM and RMA lanes moved to {}):\n{t}",
                    self.ep(idx).peer_uuid(),
                    self.iface(new_li).tl_name
                );
            }
        }
        Ok(true)
    }
}
