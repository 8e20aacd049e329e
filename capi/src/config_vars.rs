//! UCX's configuration variables as `ucp_config_read`, `ucp_config_modify` and
//! `ucp_config_print` know them: the `ucp` table of UCX 1.13 and the global `ucs` options a
//! client may set through `ucp_config_modify`, each with its value syntax and default.
//!
//! Six of them change what rucx does ([`crate::config::MAPPED`]); `LOG_LEVEL` sets rucx's log
//! level when logging starts; the others are checked (a bad value is refused as UCX refuses
//! it), kept and printed, and have no effect: they tune mechanisms rucx does not have
//! (hardware tag matching, multi-rail lanes, malloc hooks, signal handlers). A name in neither
//! table is kept as a transport setting, as UCX keeps it for its transports.

/// How a variable's value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `y`/`n` (and `yes`, `no`, `on`, `off`, `1`, `0`).
    Bool,
    /// `y`, `n`, `try` or `auto`.
    Ternary,
    /// A size (`8k`, `1m`, `inf`) or `auto`.
    Size,
    /// A time (`10ms`, `20s`, `inf`) or `auto`.
    Time,
    /// A count, `inf` or `auto`.
    Uint,
    /// A decimal number.
    Double,
    /// One of the words.
    Enum(&'static [&'static str]),
    /// A comma-separated list or free text.
    Text,
}

/// One variable: name (without the `UCX_` prefix), syntax, default, meaning.
pub struct Var {
    /// The name without the `UCX_` prefix (`TLS`, `RNDV_THRESH` …).
    pub name: &'static str,
    /// The syntax of its value.
    pub kind: Kind,
    /// The value it has when the environment does not set it.
    pub default: &'static str,
    /// What it means, as `ucp_config_print` shows it.
    pub doc: &'static str,
}

const fn v(name: &'static str, kind: Kind, default: &'static str, doc: &'static str) -> Var {
    Var {
        name,
        kind,
        default,
        doc,
    }
}

use Kind::*;

/// Log levels (`UCX_LOG_LEVEL`).
pub const LOG_LEVELS: &[&str] = &[
    "fatal", "error", "warn", "diag", "info", "debug", "trace", "req", "data", "async", "func",
    "poll",
];

/// The variables of UCX 1.13's `ucp` configuration table.
pub const UCP_VARS: &[Var] = &[
    v(
        "NET_DEVICES",
        Text,
        "all",
        "Network devices to use (rucx: RUCX_NET_DEVICES)",
    ),
    v("SHM_DEVICES", Text, "all", "Shared-memory devices to use"),
    v("ACC_DEVICES", Text, "all", "Acceleration devices to use"),
    v("SELF_DEVICES", Text, "all", "Loopback devices to use"),
    v(
        "TLS",
        Text,
        "all",
        "Transports to use (rucx: RUCX_TLS; shm, self, tcp, posix, sysv, cma, rc_verbs)",
    ),
    v("PROTOS", Text, "all", "Protocols to use"),
    v(
        "ALLOC_PRIO",
        Text,
        "md:sysv,md:posix,huge,thp,md:*,mmap,heap",
        "Memory allocation methods, by priority",
    ),
    v(
        "SOCKADDR_TLS_PRIORITY",
        Text,
        "rdmacm,tcp,sockcm",
        "Connection managers for client/server endpoints (rucx: its own over tcp)",
    ),
    v(
        "SOCKADDR_AUX_TLS",
        Text,
        "",
        "Auxiliary transports of client/server connections",
    ),
    v(
        "SELECT_DISTANCE_MD",
        Text,
        "cuda_cpy",
        "Memory domain that selects the device distance",
    ),
    v(
        "MEMTYPE_REG_WHOLE_ALLOC_TYPES",
        Text,
        "cuda",
        "Memory types registered as whole allocations",
    ),
    v(
        "RNDV_MEMTYPE_DIRECT_SIZE",
        Size,
        "inf",
        "Largest GPU message sent directly by rendezvous",
    ),
    v(
        "WARN_INVALID_CONFIG",
        Bool,
        "y",
        "Warn about configuration that does not apply",
    ),
    v(
        "BCOPY_THRESH",
        Size,
        "auto",
        "Size from which messages are copied to the transport",
    ),
    v(
        "RNDV_THRESH",
        Size,
        "auto",
        "Size from which messages go by rendezvous (rucx: RUCX_RNDV_THRESH)",
    ),
    v(
        "RNDV_SEND_NBR_THRESH",
        Size,
        "256k",
        "Rendezvous threshold of the blocking-send path",
    ),
    v(
        "RNDV_THRESH_FALLBACK",
        Size,
        "inf",
        "Rendezvous threshold without a zero-copy lane",
    ),
    v(
        "RNDV_PERF_DIFF",
        Double,
        "1",
        "Performance difference (percent) that selects rendezvous",
    ),
    v(
        "MULTI_LANE_MAX_RATIO",
        Double,
        "4",
        "Largest bandwidth ratio of lanes used together",
    ),
    v(
        "MAX_EAGER_LANES",
        Uint,
        "1",
        "Most lanes of an eager message",
    ),
    v(
        "MAX_EAGER_RAILS",
        Uint,
        "1",
        "Most rails of an eager message",
    ),
    v("MAX_RNDV_LANES", Uint, "2", "Most lanes of a rendezvous"),
    v("MAX_RNDV_RAILS", Uint, "2", "Most rails of a rendezvous"),
    v(
        "RNDV_SCHEME",
        Enum(&["get_zcopy", "put_zcopy", "am", "auto"]),
        "auto",
        "Rendezvous scheme (rucx: RUCX_RNDV_SCHEME)",
    ),
    v(
        "RKEY_PTR_SEG_SIZE",
        Size,
        "512k",
        "Segment size of rendezvous through a mapped key",
    ),
    v(
        "ZCOPY_THRESH",
        Size,
        "auto",
        "Size from which messages are sent zero-copy (rucx: RUCX_ZCOPY_THRESH)",
    ),
    v(
        "BCOPY_BW",
        Size,
        "auto",
        "Bandwidth of copies, for protocol selection",
    ),
    v(
        "ATOMIC_MODE",
        Enum(&["cpu", "device", "guess"]),
        "guess",
        "How atomics are performed",
    ),
    v(
        "ADDRESS_DEBUG_INFO",
        Bool,
        "n",
        "Put debug information into worker addresses",
    ),
    v(
        "MAX_WORKER_NAME",
        Uint,
        "32",
        "Longest worker name in an address",
    ),
    v(
        "MAX_WORKER_ADDRESS_NAME",
        Uint,
        "32",
        "Longest worker name in an address",
    ),
    v(
        "USE_MT_MUTEX",
        Bool,
        "n",
        "Use a mutex for multi-thread workers",
    ),
    v(
        "ADAPTIVE_PROGRESS",
        Bool,
        "y",
        "Progress only interfaces that have endpoints",
    ),
    v(
        "SEG_SIZE",
        Size,
        "8192",
        "Segment size of the bounce buffers",
    ),
    v(
        "TM_THRESH",
        Size,
        "1024",
        "Size from which tag offload is used",
    ),
    v(
        "TM_MAX_BB_SIZE",
        Size,
        "1024",
        "Largest message tag offload receives into a bounce buffer",
    ),
    v(
        "TM_FORCE_THRESH",
        Size,
        "8192",
        "Size from which tag offload is forced",
    ),
    v(
        "TM_SW_RNDV",
        Bool,
        "n",
        "Rendezvous in software with tag offload",
    ),
    v("NUM_EPS", Uint, "auto", "Expected number of endpoints"),
    v(
        "NUM_PPN",
        Uint,
        "auto",
        "Expected number of processes per node",
    ),
    v(
        "RNDV_FRAG_SIZE",
        Text,
        "host:512K,cuda:4M",
        "Fragment size of the rendezvous pipeline",
    ),
    v(
        "RNDV_FRAG_ALLOC_COUNT",
        Text,
        "host:128,cuda:128",
        "Fragments allocated at once",
    ),
    v(
        "RNDV_FRAG_MEM_TYPE",
        Text,
        "host",
        "Memory type of the pipeline's fragments",
    ),
    v(
        "RNDV_PIPELINE_SEND_THRESH",
        Size,
        "inf",
        "Size from which a rendezvous send is pipelined",
    ),
    v(
        "RNDV_PIPELINE_SHM_ENABLE",
        Bool,
        "y",
        "Pipeline rendezvous over shared memory",
    ),
    v(
        "FLUSH_WORKER_EPS",
        Bool,
        "y",
        "Flush each endpoint in a worker flush",
    ),
    v(
        "UNIFIED_MODE",
        Bool,
        "n",
        "Assume one kind of device on every host",
    ),
    v(
        "CM_USE_ALL_DEVICES",
        Bool,
        "y",
        "Use every device for client/server endpoints",
    ),
    v(
        "LISTENER_BACKLOG",
        Uint,
        "auto",
        "Backlog of listening sockets",
    ),
    v(
        "PROTO_ENABLE",
        Bool,
        "n",
        "Use the second protocol selection",
    ),
    v(
        "KEEPALIVE_INTERVAL",
        Time,
        "20s",
        "Time between keepalive checks (rucx: RUCX_KEEPALIVE_INTERVAL)",
    ),
    v(
        "KEEPALIVE_NUM_EPS",
        Uint,
        "128",
        "Endpoints checked per keepalive round",
    ),
    v(
        "RESOLVE_REMOTE_EP_ID",
        Ternary,
        "n",
        "Resolve the peer's endpoint id at connection",
    ),
    v(
        "PROTO_INDIRECT_ID",
        Ternary,
        "auto",
        "Send an indirect id with protocols",
    ),
    v(
        "RNDV_PUT_FORCE_FLUSH",
        Bool,
        "n",
        "Flush after rendezvous put",
    ),
    v(
        "SA_DATA_VERSION",
        Enum(&["v1", "v2"]),
        "v1",
        "Version of the client/server data",
    ),
    v(
        "RKEY_MPOOL_MAX_MD",
        Uint,
        "2",
        "Memory domains of remote keys in the pool",
    ),
    v(
        "RX_MPOOL_SIZES",
        Text,
        "64,1kb",
        "Receive buffer pool sizes",
    ),
    v(
        "ADDRESS_VERSION",
        Enum(&["v1", "v2"]),
        "v1",
        "Worker address format",
    ),
    v(
        "RCACHE_ENABLE",
        Ternary,
        "try",
        "Registration cache (rucx: RUCX_RCACHE_ENABLE)",
    ),
    v(
        "PROTO_INFO",
        Bool,
        "n",
        "Print the protocol selection (rucx: RUCX_PROTO_INFO)",
    ),
];

/// The global `ucs` options UCX lets `ucp_config_modify` (and the environment) set.
pub const UCS_VARS: &[Var] = &[
    v(
        "LOG_LEVEL",
        Enum(LOG_LEVELS),
        "warn",
        "Log level (rucx's, when logging starts)",
    ),
    v("LOG_FILE", Text, "", "Log file"),
    v("LOG_BUFFER", Size, "1024", "Log buffer size"),
    v("LOG_DATA_SIZE", Size, "0", "Bytes of packet data logged"),
    v("LOG_PRINT_ENABLE", Bool, "n", "Enable ucs_print()"),
    v(
        "LOG_LEVEL_TRIGGER",
        Enum(LOG_LEVELS),
        "fatal",
        "Log level that triggers error handling",
    ),
    v(
        "HANDLE_ERRORS",
        Text,
        "bt",
        "Error handling: bt, freeze, debug, none (rucx installs no signal handlers)",
    ),
    v(
        "ERROR_SIGNALS",
        Text,
        "ILL,SEGV,BUS,FPE",
        "Signals that trigger error handling",
    ),
    v("ERROR_MAIL_TO", Text, "", "Mail on error"),
    v("ERROR_MAIL_FOOTER", Text, "", "Footer of that mail"),
    v("GDB_COMMAND", Text, "gdb -quiet", "Debugger command"),
    v(
        "DEBUG_SIGNO",
        Text,
        "SIGHUP",
        "Signal that prints debug information",
    ),
    v(
        "MEMTRACK_DEST",
        Text,
        "",
        "Destination of memory tracking reports",
    ),
    v("STATS_DEST", Text, "", "Destination of statistics"),
    v(
        "STATS_TRIGGER",
        Text,
        "exit",
        "When statistics are reported",
    ),
    v("PROFILE_MODE", Text, "", "Profiling mode"),
    v(
        "PROFILE_FILE",
        Text,
        "ucx_%h_%p.prof",
        "Profile output file",
    ),
    v(
        "BUILTIN_MEMCPY_MIN",
        Size,
        "auto",
        "Smallest copy done by the built-in memcpy",
    ),
    v(
        "BUILTIN_MEMCPY_MAX",
        Size,
        "auto",
        "Largest copy done by the built-in memcpy",
    ),
    v(
        "ASYNC_MAX_EVENTS",
        Uint,
        "1024",
        "Most events of the async thread",
    ),
    v(
        "VFS_ENABLE",
        Bool,
        "y",
        "Export state through a virtual file system",
    ),
];

/// The variable `name` of either table.
pub fn find(name: &str) -> Option<&'static Var> {
    UCP_VARS.iter().chain(UCS_VARS).find(|v| v.name == name)
}

fn is_bool(s: &str) -> bool {
    matches!(
        s.to_ascii_lowercase().as_str(),
        "y" | "n" | "yes" | "no" | "on" | "off" | "1" | "0" | "true" | "false"
    )
}

/// Checks a value against a variable's syntax (`Err` says what is accepted).
pub fn check(var: &Var, value: &str) -> Result<(), String> {
    let s = value.trim();
    let auto = s.eq_ignore_ascii_case("auto");
    let ok = match var.kind {
        Bool => is_bool(s),
        Ternary => is_bool(s) || auto || s.eq_ignore_ascii_case("try"),
        Size => auto || ucs::config::parse_size(s).is_ok(),
        Time => auto || s.eq_ignore_ascii_case("inf") || ucs::config::parse_duration(s).is_ok(),
        Uint => auto || s.eq_ignore_ascii_case("inf") || s.parse::<u64>().is_ok(),
        Double => s.parse::<f64>().is_ok_and(|d| d.is_finite()),
        Enum(words) => words.iter().any(|w| w.eq_ignore_ascii_case(s)),
        Text => true,
    };
    if ok {
        return Ok(());
    }
    Err(match var.kind {
        Bool => "accepted: y or n".into(),
        Ternary => "accepted: y, n, try or auto".into(),
        Size => "accepted: a size such as 8k, 1m, inf, or auto".into(),
        Time => "accepted: a time such as 10ms, 20s, inf, or auto".into(),
        Uint => "accepted: a count, inf or auto".into(),
        Double => "accepted: a number".into(),
        Enum(words) => format!("accepted: {}", words.join(", ")),
        Text => String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_by_kind() {
        let f = |n| find(n).expect(n);
        assert!(check(f("CM_USE_ALL_DEVICES"), "y").is_ok());
        assert!(check(f("CM_USE_ALL_DEVICES"), "maybe").is_err());
        assert!(check(f("RNDV_THRESH"), "8k").is_ok());
        assert!(check(f("RNDV_THRESH"), "auto").is_ok());
        assert!(check(f("RNDV_THRESH"), "lots").is_err());
        assert!(check(f("KEEPALIVE_INTERVAL"), "100ms").is_ok());
        assert!(check(f("LOG_LEVEL"), "debug").is_ok());
        assert!(check(f("LOG_LEVEL"), "chatty")
            .unwrap_err()
            .contains("warn"));
        assert!(find("HANDLE_ERRORS").is_some() && find("NOT_A_UCX_NAME").is_none());
    }
}
