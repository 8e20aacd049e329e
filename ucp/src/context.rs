//! The context: the features an application needs and the transport resources it may use.

use crate::config::UcpConfig;
use bitflags::bitflags;
use ucs::{Error, Result};
use uct::{DeviceType, TlResource, TlRoles};

bitflags! {
    /// Features an application asks for (`UCP_FEATURE_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Features: u32 {
        /// Tag matching.
        const TAG = 1 << 0;
        /// Remote memory access.
        const RMA = 1 << 1;
        /// 32-bit atomics.
        const AMO32 = 1 << 2;
        /// 64-bit atomics.
        const AMO64 = 1 << 3;
        /// Sleeping on an event fd instead of spinning.
        const WAKEUP = 1 << 4;
        /// Ordered byte streams.
        const STREAM = 1 << 5;
        /// Active messages.
        const AM = 1 << 6;
    }
}

/// Parameters of [`Context::new`].
#[derive(Debug, Clone, Default)]
pub struct ContextParams {
    /// Features needed.
    pub features: Features,
    /// Configuration (`None`: read from the environment).
    pub config: Option<UcpConfig>,
}

/// An application's ucp context: features, configuration and the resources workers will open.
#[derive(Debug, Clone)]
pub struct Context {
    features: Features,
    config: UcpConfig,
    resources: Vec<TlResource>,
}

/// The roles of a transport named in `RUCX_TLS` (aliases already expanded; names checked).
fn roles_of(tl: &str) -> TlRoles {
    uct::transport_roles(tl).unwrap_or_default()
}

/// Filters resources by `RUCX_TLS` and `RUCX_NET_DEVICES`. Unknown names give an error listing
/// what exists, so a typo is not silently ignored.
///
/// Transports are chosen for a role by their declared [`TlRoles`], never by name. When
/// `RUCX_TLS` names a transport that needs a wire-up helper (rc_verbs connects endpoint to
/// endpoint only) but no transport that is one, the helpers (tcp) join as auxiliary wire-up
/// transports (UCX adds ud_verbs the same way): on the devices `RUCX_NET_DEVICES` names, or on
/// every device of theirs when it names none of them (`RUCX_NET_DEVICES=rxe0:1` selects the
/// RDMA port, not a netdev). Once an endpoint-to-endpoint lane connects, the worker moves
/// active messages to it, so the helper then carries only the wire-up.
pub fn filter_resources(
    all: Vec<TlResource>,
    tls: &[String],
    net_devices: &[String],
) -> Result<Vec<TlResource>> {
    let tls = crate::config::expand_tls(tls);
    for t in &tls {
        let alias_member = crate::config::SHM_TLS.contains(&t.as_str());
        if !alias_member && !uct::TRANSPORT_NAMES.contains(&t.as_str()) {
            return Err(Error::Config(format!(
                "RUCX_TLS names unknown transport '{t}'; built-in transports are: {}",
                uct::TRANSPORT_NAMES.join(", ")
            )));
        }
    }
    let named = |r: &TlResource| {
        r.device.dev_type != DeviceType::Net
            || net_devices.is_empty()
            || net_devices.contains(&r.device.name)
    };
    let helper = |r: &TlResource| r.roles.contains(TlRoles::WIREUP_HELPER);
    let aux = !tls.is_empty()
        && tls
            .iter()
            .any(|t| roles_of(t).contains(TlRoles::NEEDS_WIREUP_HELPER))
        && !tls
            .iter()
            .any(|t| roles_of(t).contains(TlRoles::WIREUP_HELPER));
    let aux_named = aux && all.iter().any(|r| helper(r) && named(r));
    let mut out = Vec::new();
    for r in all {
        let listed = tls.is_empty() || tls.iter().any(|t| t == r.tl_name);
        if listed && named(&r) {
            out.push(r);
        } else if aux && helper(&r) && (named(&r) || !aux_named) {
            tracing::debug!(
                "{}/{} joins as a wire-up helper of the endpoint-to-endpoint transports",
                r.tl_name,
                r.device.name
            );
            out.push(r);
        }
    }
    Ok(out)
}

impl Context {
    /// Creates a context: reads the configuration (unless given) and discovers every
    /// transport/device pair allowed by `RUCX_TLS` and `RUCX_NET_DEVICES`.
    pub fn new(params: ContextParams) -> Result<Self> {
        let config = match params.config {
            Some(c) => c,
            None => UcpConfig::from_env()?,
        };
        let resources = filter_resources(uct::query_resources(), &config.tls, &config.net_devices)?;
        if resources.is_empty() {
            let avail: Vec<String> = uct::query_transports()
                .into_iter()
                .map(|t| match t.devices {
                    Ok(d) => format!("{} ({} devices)", t.tl_name, d.len()),
                    Err(why) => format!("{} (unavailable: {why})", t.tl_name),
                })
                .collect();
            return Err(Error::NoDevice(format!(
                "no transport resource left after RUCX_TLS={:?} RUCX_NET_DEVICES={:?}; built-in: {}",
                config.tls,
                config.net_devices,
                if avail.is_empty() { "none".to_string() } else { avail.join(", ") }
            )));
        }
        Ok(Context {
            features: params.features,
            config,
            resources,
        })
    }
    /// Features requested.
    pub fn features(&self) -> Features {
        self.features
    }
    /// Configuration in force.
    pub fn config(&self) -> &UcpConfig {
        &self.config
    }
    /// Transport resources workers open.
    pub fn resources(&self) -> &[TlResource] {
        &self.resources
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uct::DeviceInfo;

    fn res(tl: &'static str, dev: &str, t: DeviceType) -> TlResource {
        TlResource {
            tl_name: tl,
            roles: uct::transport_roles(tl).expect("a built-in transport"),
            device: DeviceInfo {
                name: dev.into(),
                dev_type: t,
                details: String::new(),
            },
        }
    }

    #[test]
    fn net_devices_filter_only_network() {
        let all = vec![
            res("posix", "memory", DeviceType::Shm),
            res("tcp", "lo", DeviceType::Net),
            res("tcp", "eth0", DeviceType::Net),
        ];
        let out = filter_resources(all.clone(), &[], &["lo".into()]).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|r| r.device.name != "eth0"));
        let unknown = filter_resources(all, &["nosuchtl".into()], &[]).unwrap_err();
        assert!(unknown.to_string().contains("nosuchtl"), "{unknown}");
    }

    fn names(rs: &[TlResource]) -> Vec<String> {
        rs.iter()
            .map(|r| format!("{}/{}", r.tl_name, r.device.name))
            .collect()
    }

    #[test]
    fn rc_verbs_alone_brings_tcp_for_its_wire_up() {
        let all = vec![
            res("posix", "memory", DeviceType::Shm),
            res("tcp", "lo", DeviceType::Net),
            res("tcp", "veth0", DeviceType::Net),
            res("rc_verbs", "rxe0:1", DeviceType::Net),
        ];
        // RUCX_NET_DEVICES names only the RDMA port: tcp comes on every device.
        let out = filter_resources(all.clone(), &["rc_verbs".into()], &["rxe0:1".into()]).unwrap();
        assert_eq!(names(&out), ["tcp/lo", "tcp/veth0", "rc_verbs/rxe0:1"]);
        // It also names a netdev: tcp comes only there.
        let nd = ["rxe0:1".to_string(), "veth0".to_string()];
        let out = filter_resources(all.clone(), &["rc_verbs".into()], &nd).unwrap();
        assert_eq!(names(&out), ["tcp/veth0", "rc_verbs/rxe0:1"]);
        // tcp named explicitly: the ordinary filter, nothing added.
        let out = filter_resources(all.clone(), &["rc_verbs".into(), "tcp".into()], &nd).unwrap();
        assert_eq!(names(&out), ["tcp/veth0", "rc_verbs/rxe0:1"]);
        // No rc_verbs named: no auxiliary tcp.
        let out = filter_resources(all, &["posix".into()], &[]).unwrap();
        assert_eq!(names(&out), ["posix/memory"]);
    }

    #[test]
    fn wire_up_helpers_are_chosen_by_role_not_name() {
        // The same resources with the roles swapped around: the helper is whatever declares
        // WIREUP_HELPER, whatever its name.
        let mut all = vec![
            res("tcp", "lo", DeviceType::Net),
            res("sysv", "memory", DeviceType::Shm),
            res("rc_verbs", "rxe0:1", DeviceType::Net),
        ];
        all[0].roles = TlRoles::empty();
        all[1].roles = TlRoles::WIREUP_HELPER;
        let out = filter_resources(all.clone(), &["rc_verbs".into()], &[]).unwrap();
        assert_eq!(names(&out), ["sysv/memory", "rc_verbs/rxe0:1"]);
        // No resource declares the role: nothing joins.
        all[1].roles = TlRoles::empty();
        let out = filter_resources(all, &["rc_verbs".into()], &[]).unwrap();
        assert_eq!(names(&out), ["rc_verbs/rxe0:1"]);
    }
}
