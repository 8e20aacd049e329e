//! The tcp transport: active messages, put/get and atomics over TCP sockets.
//!
//! - **Devices** are the host's network interfaces that are up and have an IPv4 address (`lo`
//!   included), from `getifaddrs`. `RUCX_NET_DEVICES` restricts the set; a name there that is
//!   not an interface of this host is an error, not a silent fallback (names with a `:`, such as
//!   `mlx5_0:1`, belong to other transports and are ignored here).
//! - **Addresses**: the device address ([`DevAddr`]) is the IPv4 address, prefix length and a
//!   network-namespace identity; the interface address ([`IfaceAddr`]) is ip:port of the
//!   interface's non-blocking listening socket; an endpoint address ([`EpAddr`]) adds the
//!   endpoint's connection id.
//! - **Connections.** `ep_create_connected` (CONNECT_TO_IFACE) dials with a non-blocking
//!   connect; the hello frame names the dialer's interface address and the endpoint's
//!   sequence number (the k-th endpoint of this interface to that peer interface). The dialer
//!   holds its operations (queued, `NoResource` when the queue is full) until the acceptor's
//!   `HelloAck`. An endpoint pairs with the peer's endpoint of the same number: if the peer's
//!   connection for that number already arrived, the endpoint rides it instead of dialing, so
//!   a client and a server share one two-way connection (this matters: two one-way
//!   connections cost a pure ACK per message, about 1.3 µs of a 3.6 µs ping-pong here). If
//!   both sides dialed at the same moment, the connection dialed by the smaller interface
//!   address wins: the other side moves its endpoint and the operations it held onto the
//!   winner and closes its own dial, on which only the hello was sent, so nothing is lost,
//!   duplicated or reordered (details in [`wire::Hello`]). A peer that dies during the
//!   handshake closes the connection the survivor waits on: an endpoint error.
//!   `ep_create` + `connect_to_ep` (CONNECT_TO_EP) always gives exactly one connection per
//!   endpoint pair, even when both sides connect at the same time: the side with the smaller
//!   (ip, port, conn id) dials, the other waits for the dialer's hello naming its endpoint.
//!   Destroying an endpoint of an established connection detaches it: a `Detach` frame tells
//!   the peer (the peer's endpoint on the connection keeps using it), no later endpoint takes
//!   the connection over, and the socket closes as soon as neither side has an endpoint on it
//!   and its queued bytes left: at once when the peer's endpoint went first, else when the
//!   peer's `Detach` arrives. A connection still being set up stays unowned until the peer
//!   closes it or the interface is destroyed.
//! - **Frames** are described in [`wire`]. Partial sends never lose or reorder bytes: what the
//!   socket did not take stays queued per connection and progress finishes it; when that queue
//!   is full, operations return `NoResource` and the pending queue takes over. Zero-copy sends
//!   hold `MemHandle` clones until the kernel took every byte.
//! - **Remote memory**: see [`md`]: the target checks each request against its registration
//!   table. A get is one request/response round trip served by the target's progress; no timer
//!   is involved. Large put and get payloads are received with `recv` straight into their
//!   destination, and so are large tagged messages.
//! - **Tag offload** (see `tag.rs`): receives posted with `tag_recv_zcopy` are
//!   matched (tag under mask, in posting order) as soon as a `TagEager`/`TagRndv` frame's
//!   sub-header is read; a matched eager payload is `recv`d straight into the posted buffer, a
//!   matched rendezvous is pulled with a `TagGet` whose answer lands there too; unmatched ones
//!   go to `tag_unexp_eager`/`tag_unexp_rndv`. [`TagCanceler`] takes posted receives back from
//!   inside callbacks (ucp's matcher stays the source of truth).
//! - **Progress** busy-polls. With up to 4 connections it calls a non-blocking `recv` on each
//!   (measured: lower latency than `epoll_wait` + `recv`) and looks at the listening socket and
//!   connects in flight with `epoll_wait(0)` every 16 calls; with more connections it makes one
//!   `epoll_wait(0)` per call and reads the ready ones. A call that asked epoll reads only the
//!   sockets epoll reported. A connection waits for epoll instead of being polled directly
//!   while its socket refuses bytes (no `sendmsg` retry at every call), in the middle of a
//!   large payload once the socket ran empty, and after 256 empty polls in a row: each `recv`
//!   or `sendmsg` takes the socket lock the peer's incoming segments and ACKs need (that
//!   contention shows in loopback profiles of 1 MiB transfers; this is how UCX waits too,
//!   and it cuts the receiver's `recv` calls tenfold). The sockets are in a ucs
//!   [`EventSet`](ucs::async_ctx::EventSet) (level-triggered), whose descriptor is the event
//!   fd (EventFlags::FD). Keepalive (10 s + 3 × 2 s) bounds the detection of a peer
//!   host that vanishes without a FIN or RST; a killed process is noticed at the next read.
//! - **Peers are not trusted.** A reply names a request by its slot in the table of the
//!   connection it arrives on (put and flush acks, get and atomic responses, the `TagGet` of a
//!   tagged rendezvous), so no other connection can reach it; the slot must hold a request of
//!   the kind the reply answers, or the connection fails. Nothing here panics on peer bytes
//!   (the lint below keeps `unwrap`, `expect`, `unreachable!` and `panic!` out).

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

mod accept;
mod conn;
mod ep;
mod frames;
mod handshake;
mod iface;
mod inner;
mod iov;
pub mod md;
mod posted;
mod progress;
mod rxbuf;
mod rxfast;
mod sockopt;
mod tag;
mod txq;
pub mod wire;

#[cfg(test)]
mod tests;

// Where each job lives: `iface.rs` (the interface: open, endpoint creation, flush, events),
// `ep.rs` (endpoint operations), `conn.rs` (one connection), `txq.rs` (send queue),
// `rxbuf.rs` (receive buffer), `iov.rs` (iovec windows and socket calls), `sockopt.rs`
// (socket options), `inner.rs` (state shared by the interface and its endpoints),
// `accept.rs` (the listening socket), `handshake.rs` (connection set-up), `progress.rs`
// (progress and receiving), `frames.rs` (one method per received frame kind), `tag.rs` (tag
// offload operations), `posted.rs` (posted tag receives and matching state), `md.rs` (memory
// registration), `wire` (frame formats and the reassembler).

pub use ep::TcpEp;
pub use iface::TcpIface;
pub use md::TcpMd;
pub use tag::TagCanceler;

use crate::caps::{DeviceType, TlRoles};
use crate::iface::IfaceParams;
use crate::transport::{DeviceInfo, Transport};
use std::net::Ipv4Addr;
use ucs::config::ConfigVar;
use ucs::{Error, Result};

/// `RUCX_TCP_SNDBUF`: socket send buffer size.
pub const TCP_SNDBUF: ConfigVar = ConfigVar {
    name: "TCP_SNDBUF",
    default: "auto",
    doc:
        "tcp socket send buffer size (SO_SNDBUF), a size like 256k, or auto for the kernel default",
};

/// `RUCX_TCP_RCVBUF`: socket receive buffer size.
pub const TCP_RCVBUF: ConfigVar = ConfigVar {
    name: "TCP_RCVBUF",
    default: "auto",
    doc: "tcp socket receive buffer size (SO_RCVBUF), a size like 256k, or auto for the kernel default",
};

/// `RUCX_TCP_CONGESTION`: TCP congestion control of the transport's sockets.
pub const TCP_CONGESTION: ConfigVar = ConfigVar {
    name: "TCP_CONGESTION",
    default: "auto",
    doc: "tcp congestion control (TCP_CONGESTION) of the sockets: auto (reno on loopback, where \
          the link is memory and a pacing algorithm such as bbr only adds delay; the system \
          default elsewhere), system (never change it), or an algorithm the kernel allows \
          (reno, cubic, bbr...) for every connection",
};

/// `RUCX_NET_DEVICES`: network devices to use.
pub const NET_DEVICES: ConfigVar = ConfigVar {
    name: "NET_DEVICES",
    default: "all",
    doc: "Comma-separated network devices to use (lo, eth0, ...), or all",
};

/// `RUCX_TCP_KEEPIDLE`: idle time before the kernel's keepalive probes (UCX's name).
pub const TCP_KEEPIDLE: ConfigVar = ConfigVar {
    name: "TCP_KEEPIDLE",
    default: "10s",
    doc: "Time a connection stays idle before the kernel starts keepalive probes \
          (TCP_KEEPIDLE); inf disables keepalive probes and the unacknowledged-data check",
};

/// `RUCX_TCP_KEEPINTVL`: time between keepalive probes (UCX's name).
pub const TCP_KEEPINTVL: ConfigVar = ConfigVar {
    name: "TCP_KEEPINTVL",
    default: "2s",
    doc: "Time between the kernel's keepalive probes (TCP_KEEPINTVL); inf disables them",
};

/// `RUCX_TCP_KEEPCNT`: keepalive probes before the connection is dropped (UCX's name).
pub const TCP_KEEPCNT: ConfigVar = ConfigVar {
    name: "TCP_KEEPCNT",
    default: "auto",
    doc: "Unanswered keepalive probes after which the kernel drops the connection \
          (TCP_KEEPCNT): a number, auto (3) or inf (no probes). A peer host unreachable for \
          KEEPIDLE + KEEPINTVL x KEEPCNT is declared dead, idle or with data outstanding; a \
          peer whose kernel still acknowledges (a process busy elsewhere) never is",
};

/// Every configuration variable of the tcp transport (registered with `ucs::config` when the
/// transport is first queried, so `rucx-info -c` lists them and they are not "unknown").
pub static TCP_VARS: [ConfigVar; 7] = [
    TCP_SNDBUF,
    TCP_RCVBUF,
    TCP_CONGESTION,
    NET_DEVICES,
    TCP_KEEPIDLE,
    TCP_KEEPINTVL,
    TCP_KEEPCNT,
];

/// Reads a socket buffer size variable: `None` for `auto`.
pub fn sock_buf_size(var: &ConfigVar) -> Result<Option<usize>> {
    if var.raw().trim().eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    let s = var.size()?.bytes();
    if s == 0 || s > i32::MAX as u64 {
        return Err(Error::Config(format!(
            "{}={}: accepted: a size between 1 and 2g, or auto",
            var.env_name(),
            var.raw()
        )));
    }
    Ok(Some(s as usize))
}

/// The congestion control `RUCX_TCP_CONGESTION` asks for on `dev`: `None` to keep the
/// system's. An algorithm name must be a plain word (it is checked against the kernel when the
/// interface opens).
pub fn congestion_for(var: &ConfigVar, dev: &NetIf) -> Result<Option<String>> {
    let raw = var.raw();
    let v = raw.trim();
    if v.eq_ignore_ascii_case("auto") {
        return Ok(dev.loopback.then(|| "reno".to_string()));
    }
    if v.eq_ignore_ascii_case("system") {
        return Ok(None);
    }
    if v.is_empty()
        || v.len() > 15
        || !v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(Error::Config(format!(
            "{}={raw}: accepted: auto, system, or a congestion control name such as reno or cubic",
            var.env_name()
        )));
    }
    Ok(Some(v.to_string()))
}

/// The tcp transport.
pub struct TcpTransport;

/// An interface of this host with its IPv4 address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetIf {
    /// Interface name.
    pub name: String,
    /// IPv4 address.
    pub ip: Ipv4Addr,
    /// Prefix length of its subnet.
    pub prefix: u8,
    /// True for a loopback interface.
    pub loopback: bool,
}

/// Every interface that is up and has an IPv4 address (the first one, per interface).
pub fn host_interfaces() -> Result<Vec<NetIf>> {
    use nix::net::if_::InterfaceFlags;
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| Error::io("listing network interfaces (getifaddrs)", e.into()))?;
    let mut out: Vec<NetIf> = Vec::new();
    for a in addrs {
        if !a.flags.contains(InterfaceFlags::IFF_UP) {
            continue;
        }
        let Some(ip) = a
            .address
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map(|s| s.ip())
        else {
            continue;
        };
        if out.iter().any(|n| n.name == a.interface_name) {
            continue;
        }
        let prefix = a
            .netmask
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map(|m| u32::from(m.ip()).count_ones() as u8)
            .unwrap_or(32);
        out.push(NetIf {
            name: a.interface_name.clone(),
            ip,
            prefix,
            loopback: a.flags.contains(InterfaceFlags::IFF_LOOPBACK) || ip.is_loopback(),
        });
    }
    Ok(out)
}

/// Applies a `RUCX_NET_DEVICES`-style selection (`all` or empty keeps everything). A name that
/// is not among `ifs` is an error listing the interfaces there are.
pub fn select_devices(ifs: Vec<NetIf>, wanted: &[String]) -> Result<Vec<NetIf>> {
    let wanted: Vec<&String> = wanted.iter().filter(|w| !w.contains(':')).collect();
    if wanted.is_empty() {
        return Ok(ifs);
    }
    for w in &wanted {
        if !ifs.iter().any(|i| &i.name == *w) {
            let names: Vec<&str> = ifs.iter().map(|i| i.name.as_str()).collect();
            return Err(Error::NoDevice(format!(
                "RUCX_NET_DEVICES names '{w}', which is not an up interface with an IPv4 address \
                 on this host; the interfaces are: {}",
                names.join(", ")
            )));
        }
    }
    Ok(ifs
        .into_iter()
        .filter(|i| wanted.iter().any(|w| **w == i.name))
        .collect())
}

/// The devices tcp may use here, after `RUCX_NET_DEVICES`.
pub fn usable_devices() -> Result<Vec<NetIf>> {
    select_devices(host_interfaces()?, &NET_DEVICES.list())
}

fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// An identity of this host's network namespace: two processes get the same value exactly
/// when they share a kernel boot and a network namespace (and so can reach each other on `lo`).
/// The boot id is read once per process; a failure to read it (for example at the descriptor
/// limit) is an error naming the cause, never a made-up identity.
pub fn netns_id() -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    static BOOT_ID: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let boot = match BOOT_ID.get() {
        Some(b) => b,
        None => {
            let b = std::fs::read("/proc/sys/kernel/random/boot_id")
                .map_err(|e| Error::io("reading /proc/sys/kernel/random/boot_id", e))?;
            BOOT_ID.get_or_init(|| b)
        }
    };
    let ns = std::fs::metadata("/proc/self/ns/net")
        .map(|m| (m.dev(), m.ino()))
        .map_err(|e| Error::io("reading /proc/self/ns/net", e))?;
    let h = fnv1a(boot, 0xcbf2_9ce4_8422_2325);
    let h = fnv1a(&ns.0.to_le_bytes(), h);
    Ok(fnv1a(&ns.1.to_le_bytes(), h))
}

/// The device address: which IPv4 network the device is on, and where the host is.
///
/// ```text
///  0        1        2        3        4                                   8
///  +--------+--------+--------+--------+--------+--------+--------+--------+
///  | ver=1  | fam=4  | prefix | flags  |  IPv4 address (network order)     |
///  +--------+--------+--------+--------+--------+--------+--------+--------+
///  |  netns id (u64 LE): boot id + network namespace of the owner          |  8..16
///  +-----------------------------------------------------------------------+
/// ```
/// `flags` bit 0: the device is a loopback device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevAddr {
    /// Address.
    pub ip: Ipv4Addr,
    /// Prefix length.
    pub prefix: u8,
    /// Loopback device.
    pub loopback: bool,
    /// [`netns_id`] of the owner.
    pub netns: u64,
}

impl DevAddr {
    /// Encoded size.
    pub const LEN: usize = 16;
    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        ucs::codec::Writer::new(&mut v)
            .bytes(&[1, 4, self.prefix, self.loopback as u8])
            .bytes(&self.ip.octets())
            .u64(self.netns);
        v
    }
    /// Decodes, rejecting truncated or foreign input.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = ucs::codec::exact::<{ Self::LEN }>(b, "tcp device address")?;
        if b[0] != 1 || b[1] != 4 || b[2] > 32 || b[3] > 1 {
            return Err(Error::Wire(format!(
                "not a tcp device address (starting {:02x?})",
                &b[..4]
            )));
        }
        Ok(DevAddr {
            ip: Ipv4Addr::from(ucs::codec::array_at(b, 4)),
            prefix: b[2],
            loopback: b[3] == 1,
            netns: ucs::codec::u64_at(b, 8),
        })
    }
}

/// The interface address: ip:port of the listening socket.
///
/// ```text
///  0        1        2                 4                                   8
///  +--------+--------+--------+--------+--------+--------+--------+--------+
///  | ver=1  |   0    | port (u16 LE)   |  IPv4 address (network order)     |
///  +--------+--------+--------+--------+--------+--------+--------+--------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfaceAddr {
    /// Listening address.
    pub ip: Ipv4Addr,
    /// Listening port.
    pub port: u16,
}

impl IfaceAddr {
    /// Encoded size.
    pub const LEN: usize = 8;
    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        ucs::codec::Writer::new(&mut v)
            .bytes(&[1, 0])
            .u16(self.port)
            .bytes(&self.ip.octets());
        v
    }
    /// Decodes, rejecting truncated or foreign input.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = ucs::codec::head::<{ Self::LEN }>(b, "tcp interface address")?;
        if b[0] != 1 || b[1] != 0 {
            return Err(Error::Wire("not a tcp interface address".into()));
        }
        let port = ucs::codec::u16_at(b, 2);
        if port == 0 {
            return Err(Error::Wire("tcp interface address with port 0".into()));
        }
        Ok(IfaceAddr {
            ip: Ipv4Addr::from(ucs::codec::array_at(b, 4)),
            port,
        })
    }
    /// As a socket address.
    pub fn socket_addr(&self) -> std::net::SocketAddrV4 {
        std::net::SocketAddrV4::new(self.ip, self.port)
    }
}

/// An endpoint address: the interface address plus the endpoint's connection id.
///
/// ```text
///  0                                   8                                  16
///  +-----------------------------------+-----------------------------------+
///  |  IfaceAddr (8 bytes, see above)   |  conn id (u64 LE)                 |
///  +-----------------------------------+-----------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpAddr {
    /// The owner's interface.
    pub iface: IfaceAddr,
    /// The endpoint's connection id.
    pub conn_id: u64,
}

impl EpAddr {
    /// Encoded size.
    pub const LEN: usize = 16;
    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.iface.encode();
        ucs::codec::Writer::new(&mut v).u64(self.conn_id);
        v
    }
    /// Decodes, rejecting truncated or foreign input.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = ucs::codec::exact::<{ Self::LEN }>(b, "tcp endpoint address")?;
        Ok(EpAddr {
            iface: IfaceAddr::decode(b)?,
            conn_id: ucs::codec::u64_at(b, 8),
        })
    }
}

impl Transport for TcpTransport {
    const NAME: &'static str = "tcp";
    const ROLES: TlRoles = TlRoles::WIREUP_HELPER;
    type Md = TcpMd;
    type Iface = TcpIface;
    type Ep = TcpEp;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        ucs::config::register(&TCP_VARS);
        let ifs = usable_devices().map_err(|e| e.to_string())?;
        Ok(ifs
            .into_iter()
            .map(|i| DeviceInfo {
                details: format!(
                    "{}/{}{}",
                    i.ip,
                    i.prefix,
                    if i.loopback { " loopback" } else { "" }
                ),
                name: i.name,
                dev_type: DeviceType::Net,
            })
            .collect())
    }

    fn open_md(device: &str) -> Result<TcpMd> {
        let _ = device;
        Ok(TcpMd::new())
    }

    fn open_iface(md: &TcpMd, params: &IfaceParams) -> Result<TcpIface> {
        let _ = md;
        ucs::config::register(&TCP_VARS);
        let ifs = usable_devices()?;
        let dev = ifs
            .into_iter()
            .find(|i| i.name == params.device)
            .ok_or_else(|| {
                Error::NoDevice(format!(
                    "tcp has no device '{}' (not an up interface with an IPv4 address, or \
                     excluded by RUCX_NET_DEVICES)",
                    params.device
                ))
            })?;
        let iface = TcpIface::open(dev)?;
        iface.inner.borrow_mut().connect_backpressure = params.connect_backpressure;
        Ok(iface)
    }
}
