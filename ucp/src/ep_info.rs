//! What an endpoint can tell about itself beyond its protocol table: the transports its lanes
//! use and the estimated time of a message (UCX's `ucp_ep_query` transports and
//! `ucp_ep_evaluate_perf`).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::worker::ep::connecting;
use crate::worker::{EpHandle, Worker};
use ucs::{Error, Result};

impl Worker {
    /// The (transport, device) of each of the endpoint's lanes, AM lane first; `Busy` while
    /// it is connecting.
    pub fn ep_transports(&self, ep: EpHandle) -> Result<Vec<(String, String)>> {
        let idx = self.st.ep_idx(ep)?;
        let l = self.st.ep(idx).lanes().ok_or_else(connecting)?;
        let mut out: Vec<(String, String)> = Vec::new();
        let order = std::iter::once(l.am()).chain((0..l.count()).filter(|&i| i != l.am()));
        for lane in order {
            let i = self.st.iface(l.iface_of(lane));
            let pair = (i.tl_name.to_string(), i.dev_name.to_string());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
        Ok(out)
    }

    /// Replaces the endpoint's error handler (UCX's `ucp_ep_modify_nb`); `None` in
    /// `params.err_handler` removes it.
    pub fn ep_set_err_handler(&mut self, ep: EpHandle, params: crate::EpParams) -> Result<()> {
        let idx = self.st.ep_idx(ep)?;
        self.st.ep_mut(idx).set_err_handler(params.err_handler);
        Ok(())
    }

    /// Estimated seconds to move a message of `size` bytes over the endpoint: the fastest of
    /// its lanes' performance models (overheads, latency, bandwidth), as UCX estimates it.
    pub fn ep_estimate_time(&self, ep: EpHandle, size: usize) -> Result<f64> {
        let idx = self.st.ep_idx(ep)?;
        let l = self.st.ep(idx).lanes().ok_or_else(connecting)?;
        l.ifaces()
            .map(|li| self.st.iface(li).attr.perf.time_for(size))
            .min_by(|a, b| a.total_cmp(b))
            .ok_or_else(|| Error::Busy("endpoint has no lanes".into()))
    }
}

#[cfg(test)]
mod tests {
    use crate::Features;

    /// An endpoint names the transport of its lanes, and estimates a larger message to take
    /// longer; a stale handle is refused.
    #[test]
    fn transports_and_time_estimates() {
        let (mut a, _b, ep) = crate::test_pair::pair(&["posix"], Features::TAG);
        let tls = a.ep_transports(ep).expect("transports");
        assert_eq!(tls.first().map(|t| t.0.as_str()), Some("posix"), "{tls:?}");
        let small = a.ep_estimate_time(ep, 8).expect("estimate");
        let big = a.ep_estimate_time(ep, 1 << 20).expect("estimate");
        assert!(small > 0.0 && big > small, "{small} {big}");
        a.ep_close(ep, crate::CloseMode::Force).expect("close");
        assert!(a.ep_transports(ep).is_err());
    }
}
