//! `rucx-info`: version, devices with their capabilities, and configuration, as text.

use uct::registry::TransportStatus;
use uct::{AtomicOps, Iface, IfaceAttr, IfaceFlags, MdAttr, MdFlags, MemoryDomain, OpLimits};

/// Version and build features.
pub fn version_text() -> String {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut s = String::new();
    s.push_str(&format!("# rucx version {}\n", env!("CARGO_PKG_VERSION")));
    s.push_str(&format!(
        "# Build: {profile}, target {}-{}\n",
        std::env::consts::ARCH,
        std::env::consts::OS
    ));
    s.push_str(&format!(
        "# Transports built in: {}\n",
        uct::TRANSPORT_NAMES.join(", ")
    ));
    s.push_str("# Layers: ucs, uct, ucp");
    s.push('\n');
    s
}

fn size_text(n: usize) -> String {
    if n as u64 >= 1 << 62 {
        "unlimited".into()
    } else if n >= 1 << 30 && n & ((1 << 30) - 1) == 0 {
        format!("{}G", n >> 30)
    } else if n >= 1 << 20 && n & ((1 << 20) - 1) == 0 {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n & ((1 << 10) - 1) == 0 {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

fn flags_text<I: Iterator<Item = (&'static str, T)>, T>(it: I) -> String {
    let v: Vec<&str> = it.map(|(n, _)| n).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn md_text(name: &str, a: &MdAttr) -> String {
    let mut s = format!("# Memory domain: {name}\n");
    s.push_str(&format!(
        "#            flags: {}\n",
        flags_text(a.flags.iter_names())
    ));
    if a.flags.contains(MdFlags::ALLOC) {
        s.push_str(&format!(
            "#         allocate: <= {}\n",
            size_text(a.max_alloc)
        ));
    }
    if a.flags.contains(MdFlags::REG) {
        s.push_str(&format!(
            "#         register: <= {}, cost: {:.0} nsec + {:.3} nsec/KB\n",
            size_text(a.max_reg),
            a.reg_cost.0 * 1e9,
            a.reg_cost.1 * 1e9 * 1024.0
        ));
    }
    s.push_str(&format!(
        "#       remote key: {} bytes\n",
        a.rkey_packed_size
    ));
    s
}

fn limits_line(s: &mut String, op: &str, flags: IfaceFlags, bits: [IfaceFlags; 3], l: &OpLimits) {
    if flags.contains(bits[0]) {
        s.push_str(&format!(
            "#      {:>15}: <= {}\n",
            format!("{op}_short"),
            size_text(l.max_short)
        ));
    }
    if flags.contains(bits[1]) {
        s.push_str(&format!(
            "#      {:>15}: <= {}\n",
            format!("{op}_bcopy"),
            size_text(l.max_bcopy)
        ));
    }
    if flags.contains(bits[2]) {
        s.push_str(&format!(
            "#      {:>15}: {}..{}, up to {} iov\n",
            format!("{op}_zcopy"),
            size_text(l.min_zcopy),
            size_text(l.max_zcopy),
            l.max_iov
        ));
    }
}

fn atomic_line(s: &mut String, name: &str, op: AtomicOps, bits32: AtomicOps, bits64: AtomicOps) {
    let w: Vec<&str> = [(bits32, "32"), (bits64, "64")]
        .iter()
        .filter(|(set, _)| set.contains(op))
        .map(|(_, w)| *w)
        .collect();
    if !w.is_empty() {
        s.push_str(&format!("#      {name:>15}: {} bit\n", w.join(", ")));
    }
}

/// The capabilities block of one interface.
pub fn iface_text(a: &IfaceAttr) -> String {
    let mut s = String::from("#\n#      capabilities:\n");
    let p = &a.perf;
    s.push_str(&format!(
        "#      {:>15}: {:.2} MB/sec\n",
        "bandwidth",
        p.bandwidth / (1024.0 * 1024.0)
    ));
    s.push_str(&format!(
        "#      {:>15}: {:.0} nsec\n",
        "latency",
        p.latency * 1e9
    ));
    s.push_str(&format!(
        "#      {:>15}: send {:.0} nsec, receive {:.0} nsec\n",
        "overhead",
        p.send_overhead * 1e9,
        p.recv_overhead * 1e9
    ));
    let f = a.flags;
    limits_line(
        &mut s,
        "am",
        f,
        [
            IfaceFlags::AM_SHORT,
            IfaceFlags::AM_BCOPY,
            IfaceFlags::AM_ZCOPY,
        ],
        &a.am,
    );
    if f.contains(IfaceFlags::AM_ZCOPY) {
        s.push_str(&format!(
            "#      {:>15}: <= {}\n",
            "am header", a.am.max_hdr
        ));
    }
    limits_line(
        &mut s,
        "put",
        f,
        [
            IfaceFlags::PUT_SHORT,
            IfaceFlags::PUT_BCOPY,
            IfaceFlags::PUT_ZCOPY,
        ],
        &a.put,
    );
    limits_line(
        &mut s,
        "get",
        f,
        [
            IfaceFlags::GET_SHORT,
            IfaceFlags::GET_BCOPY,
            IfaceFlags::GET_ZCOPY,
        ],
        &a.get,
    );
    if f.intersects(IfaceFlags::ATOMIC_CPU | IfaceFlags::ATOMIC_DEVICE) {
        let domain = if f.contains(IfaceFlags::ATOMIC_CPU) {
            "cpu"
        } else {
            "device"
        };
        s.push_str(&format!("#      {:>15}: {domain}\n", "domain"));
    }
    let at = &a.atomics;
    for (name, op) in [
        ("atomic_add", AtomicOps::ADD),
        ("atomic_and", AtomicOps::AND),
        ("atomic_or", AtomicOps::OR),
        ("atomic_xor", AtomicOps::XOR),
    ] {
        atomic_line(&mut s, name, op, at.op32, at.op64);
    }
    for (name, op) in [
        ("atomic_fadd", AtomicOps::ADD),
        ("atomic_fand", AtomicOps::AND),
        ("atomic_for", AtomicOps::OR),
        ("atomic_fxor", AtomicOps::XOR),
        ("atomic_swap", AtomicOps::SWAP),
        ("atomic_cswap", AtomicOps::CSWAP),
    ] {
        atomic_line(&mut s, name, op, at.fop32, at.fop64);
    }
    if f.intersects(IfaceFlags::TAG_EAGER_SHORT | IfaceFlags::TAG_EAGER_BCOPY) {
        s.push_str(&format!(
            "#      {:>15}: eager short <= {}, bcopy <= {}, zcopy <= {}; rndv <= {}\n",
            "tag offload",
            size_text(a.tag.eager_max_short),
            size_text(a.tag.eager_max_bcopy),
            size_text(a.tag.eager_max_zcopy),
            size_text(a.tag.rndv_max_zcopy)
        ));
    }
    let mut conn = Vec::new();
    if f.contains(IfaceFlags::CONNECT_TO_EP) {
        conn.push("to ep");
    }
    if f.contains(IfaceFlags::CONNECT_TO_IFACE) {
        conn.push("to iface");
    }
    s.push_str(&format!(
        "#      {:>15}: {}\n",
        "connection",
        conn.join(", ")
    ));
    s.push_str(&format!(
        "#      {:>15}: {}\n",
        "device priority", a.priority
    ));
    s.push_str(&format!(
        "#      {:>15}: {} bytes\n",
        "device address", a.device_addr_len
    ));
    s.push_str(&format!(
        "#      {:>15}: {} bytes\n",
        "iface address", a.iface_addr_len
    ));
    if f.contains(IfaceFlags::CONNECT_TO_EP) {
        s.push_str(&format!(
            "#      {:>15}: {} bytes\n",
            "ep address", a.ep_addr_len
        ));
    }
    let mut eh = Vec::new();
    if f.contains(IfaceFlags::ERRHANDLE_PEER_FAILURE) {
        eh.push("peer failure");
    }
    s.push_str(&format!(
        "#      {:>15}: {}\n",
        "error handling",
        if eh.is_empty() {
            "none".into()
        } else {
            eh.join(", ")
        }
    ));
    s.push_str(&format!(
        "#      {:>15}: {}\n",
        "pending queue",
        if f.contains(IfaceFlags::PENDING) {
            "yes"
        } else {
            "no"
        }
    ));
    s.push_str(&format!(
        "#      {:>15}: {}\n",
        "events",
        flags_text(a.event_flags.iter_names())
    ));
    s.push_str(&format!(
        "#      {:>15}: {}\n",
        "all flags",
        flags_text(f.iter_names())
    ));
    s
}

/// Every transport with its devices, capabilities and performance model, or why it is absent.
pub fn devices_text(transports: &[TransportStatus]) -> String {
    let mut s = String::new();
    for t in transports {
        s.push_str("#\n");
        match &t.devices {
            Err(why) => {
                s.push_str(&format!(
                    "#      Transport: {}\n#    unavailable: {why}\n",
                    t.tl_name
                ));
            }
            Ok(devs) if devs.is_empty() => {
                s.push_str(&format!(
                    "#      Transport: {}\n#    unavailable: no devices found\n",
                    t.tl_name
                ));
            }
            Ok(devs) => {
                for d in devs {
                    match uct::open(t.tl_name, &d.name) {
                        Ok((md, iface)) => {
                            s.push_str(&md_text(md.name(), md.attr()));
                            s.push_str("#\n");
                            s.push_str(&format!("#      Transport: {}\n", t.tl_name));
                            s.push_str(&format!("#         Device: {}\n", d.name));
                            s.push_str(&format!("#           Type: {}\n", d.dev_type));
                            if !d.details.is_empty() {
                                s.push_str(&format!("#        Details: {}\n", d.details));
                            }
                            s.push_str(&iface_text(iface.attr()));
                        }
                        Err(e) => {
                            s.push_str(&format!(
                                "#      Transport: {}\n#         Device: {}\n#    unavailable: {e}\n",
                                t.tl_name, d.name
                            ));
                        }
                    }
                }
            }
        }
    }
    s
}

/// Every registered `RUCX_*` variable with its value, default and meaning.
pub fn config_text() -> String {
    let mut s = String::new();
    for v in ucs::config::all_vars() {
        s.push_str("#\n");
        s.push_str(&format!("# {}\n", v.doc));
        let origin = if v.is_set() {
            "set in the environment"
        } else {
            "default"
        };
        s.push_str(&format!("# default: {} ({origin})\n", v.default));
        s.push_str("#\n");
        s.push_str(&format!("{}={}\n", v.env_name(), v.raw()));
    }
    for (name, hint) in ucs::config::unknown_env() {
        match hint {
            Some(h) => s.push_str(&format!(
                "# warning: {name} is not a rucx variable (did you mean {h}?)\n"
            )),
            None => s.push_str(&format!("# warning: {name} is not a rucx variable\n")),
        }
    }
    s
}

/// Hex encoding of a worker address (what `-p` takes).
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes a hex string; bad digits or an odd length are [`ucs::Error::InvalidParam`].
pub fn from_hex(text: &str) -> ucs::Result<Vec<u8>> {
    let t = text.trim();
    if t.len() & 1 != 0 || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(ucs::Error::InvalidParam(
            "a worker address is an even number of hex digits".into(),
        ));
    }
    (0..t.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&t[i..i + 2], 16)
                .map_err(|_| ucs::Error::InvalidParam("bad hex digit".into()))
        })
        .collect()
}

/// Which lanes ucp would pick to reach `peer`, why every other transport was not picked, and
/// the protocol table of that configuration. With `table_only`, just the table.
pub fn lanes_text(peer: &ucp::WorkerAddress, table_only: bool) -> ucs::Result<String> {
    use ucp::wireup::{select_lanes, LocalTl, ProtoConfig};
    let cfg = ucp::UcpConfig::from_env()?;
    let ctx = ucp::Context::new(ucp::ContextParams {
        features: ucp::Features::TAG,
        config: Some(cfg.clone()),
    })?;
    let mut s = String::new();
    let mut opened = Vec::new();
    for r in ctx.resources() {
        match uct::open(r.tl_name, &r.device.name) {
            Ok((md, iface)) => opened.push((r.tl_name, r.device.name.clone(), md, iface)),
            Err(e) => s.push_str(&format!(
                "#   {}/{}: cannot be opened: {e}\n",
                r.tl_name, r.device.name
            )),
        }
    }
    let locals: Vec<LocalTl<'_>> = opened
        .iter()
        .map(|(tl, dev, md, iface)| LocalTl {
            tl_name: tl,
            dev_name: dev,
            attr: iface.attr(),
            md_reg: md.attr().flags.contains(MdFlags::REG),
        })
        .collect();
    let reach = |li: usize, ri: usize| {
        let r = &peer.tls[ri];
        let ia = (!r.iface_addr.is_empty()).then_some(r.iface_addr.as_slice());
        opened[li].3.is_reachable(&r.device_addr, ia)
    };
    if !table_only {
        s.push_str(&format!(
            "# Peer worker {:#018x} listens on: {}\n",
            peer.uuid,
            peer.tls
                .iter()
                .map(|t| t.tl_name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        s.push_str("# Local transports (RUCX_TLS / RUCX_NET_DEVICES applied):\n");
        for (li, l) in locals.iter().enumerate() {
            let remotes: Vec<usize> = peer
                .tls
                .iter()
                .enumerate()
                .filter(|(_, r)| r.tl_name == l.tl_name)
                .map(|(i, _)| i)
                .collect();
            let verdict = if remotes.is_empty() {
                format!("rejected: the peer has no {} interface", l.tl_name)
            } else {
                let mut v = Vec::new();
                for ri in remotes {
                    match reach(li, ri) {
                        Ok(()) => {
                            let f = l.attr.flags;
                            let mut uses = Vec::new();
                            if f.intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY) {
                                uses.push("am");
                            }
                            if l.md_reg
                                && f.intersects(IfaceFlags::GET_ZCOPY | IfaceFlags::PUT_ZCOPY)
                            {
                                uses.push("rma");
                            }
                            if !(l.attr.atomics.op64.is_empty() && l.attr.atomics.fop64.is_empty())
                            {
                                uses.push("amo");
                            }
                            v.push(format!(
                                "reachable (can serve: {}; 64 B one way ≈ {:.0} ns, 1 MiB ≈ {:.1} µs)",
                                uses.join(", "),
                                l.attr.perf.time_for(64) * 1e9,
                                l.attr.perf.time_for(1 << 20) * 1e6
                            ));
                        }
                        Err(why) => v.push(format!(
                            "rejected: {}",
                            why.strip_prefix("unreachable: ").unwrap_or(&why)
                        )),
                    }
                }
                v.join("; ")
            };
            s.push_str(&format!("#   {}/{}: {verdict}\n", l.tl_name, l.dev_name));
        }
    }
    let sel = select_lanes(&locals, peer, reach)?;
    let name = |i: usize| format!("{}/{}", locals[i].tl_name, locals[i].dev_name);
    if !table_only {
        s.push_str(&format!("# Lanes: am {}", name(sel.am.local)));
        s.push_str(&format!(
            ", rma {}",
            sel.rma
                .map(|p| name(p.local))
                .unwrap_or_else(|| "none".into())
        ));
        s.push_str(&format!(
            ", amo {}\n",
            sel.amo
                .map(|p| name(p.local))
                .unwrap_or_else(|| "none".into())
        ));
    }
    let proto = ProtoConfig::compute(
        locals[sel.am.local].attr,
        locals[sel.am.local].md_reg,
        sel.rma.map(|p| locals[p.local].attr),
        &cfg,
    );
    s.push_str("# Protocols (message size range in bytes, protocol, lanes):\n");
    s.push_str(&proto.table(
        &name(sel.am.local),
        sel.rma.map(|p| name(p.local)).as_deref(),
    ));
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_like_ucx() {
        assert_eq!(size_text(8192), "8K");
        assert_eq!(size_text(100), "100");
        assert_eq!(size_text(usize::MAX), "unlimited");
        assert_eq!(size_text(2 << 20), "2M");
    }

    #[test]
    fn devices_cover_every_transport() {
        let ts = uct::query_transports();
        let text = devices_text(&ts);
        for t in &ts {
            assert!(
                text.contains(&format!("Transport: {}", t.tl_name)),
                "{} missing:\n{text}",
                t.tl_name
            );
        }
        let absent = vec![TransportStatus {
            tl_name: "imaginary",
            devices: Err("needs hardware".into()),
        }];
        assert!(devices_text(&absent).contains("unavailable: needs hardware"));
    }

    #[test]
    fn config_lists_registered_variables() {
        // Other tests of this binary register variables as they run: the ones registered
        // before the text is made must all be in it.
        let vars = ucs::config::all_vars();
        let text = config_text();
        for v in vars {
            assert!(text.contains(&format!("RUCX_{}=", v.name)), "{text}");
        }
    }
}
