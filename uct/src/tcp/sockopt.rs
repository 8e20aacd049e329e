//! Socket options of the transport's connections, from the environment.

use super::{
    congestion_for, sock_buf_size, NetIf, TCP_CONGESTION, TCP_KEEPCNT, TCP_KEEPIDLE, TCP_KEEPINTVL,
    TCP_RCVBUF, TCP_SNDBUF,
};
use socket2::{Domain, Protocol, Socket, TcpKeepalive, Type};
use std::io;
use std::time::Duration;
use ucs::{Error, Result};

/// Socket options from the environment.
#[derive(Debug, Clone)]
pub(crate) struct SockCfg {
    pub(crate) sndbuf: Option<usize>,
    pub(crate) rcvbuf: Option<usize>,
    /// `TCP_CONGESTION` to set (`RUCX_TCP_CONGESTION`), or `None` for the system's.
    pub(crate) congestion: Option<String>,
    /// The kernel's keepalive probes (`RUCX_TCP_KEEPIDLE`, `KEEPINTVL`, `KEEPCNT`), or `None`
    /// when any of them is `inf`.
    pub(crate) keepalive: Option<Keepalive>,
}

/// Keepalive probe timing of the transport's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keepalive {
    /// Idle time before the first probe.
    pub(crate) idle: Duration,
    /// Time between probes.
    pub(crate) interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub(crate) count: u32,
}

impl Keepalive {
    /// How long a peer host may acknowledge nothing before it counts as unreachable: the time
    /// the kernel's probes take to give up on an idle connection, and the limit
    /// [`unacked_silence`] applies to a connection with data outstanding (where the kernel
    /// does not probe and would retransmit for about 15 minutes).
    pub(crate) fn dead_after(&self) -> Duration {
        self.idle + self.interval * self.count
    }

    /// From the environment: `None` when a variable is `inf`.
    fn from_env() -> Result<Option<Self>> {
        let idle = TCP_KEEPIDLE.duration_or_inf()?;
        let interval = TCP_KEEPINTVL.duration_or_inf()?;
        let raw = TCP_KEEPCNT.raw();
        let count = match raw.trim().to_ascii_lowercase().as_str() {
            "inf" => None,
            "auto" => Some(3),
            n => Some(n.parse::<u32>().ok().filter(|&c| c > 0).ok_or_else(|| {
                Error::Config(format!(
                    "{}={raw:?}: accepted: a positive number of probes, auto (3) or inf",
                    TCP_KEEPCNT.env_name()
                ))
            })?),
        };
        let (Some(idle), Some(interval), Some(count)) = (idle, interval, count) else {
            return Ok(None);
        };
        let secs = |d: Duration| d.as_secs() >= 1;
        if !secs(idle) || !secs(interval) {
            return Err(Error::Config(format!(
                "{}={:?}, {}={:?}: the kernel counts keepalive times in whole seconds (at least 1s)",
                TCP_KEEPIDLE.env_name(),
                TCP_KEEPIDLE.raw(),
                TCP_KEEPINTVL.env_name(),
                TCP_KEEPINTVL.raw()
            )));
        }
        Ok(Some(Keepalive {
            idle,
            interval,
            count,
        }))
    }
}

/// How long the peer of connected socket `fd` has acknowledged nothing while data of ours is
/// outstanding (`TCP_INFO`: unacknowledged segments and the time since the last ACK arrived);
/// `None` when nothing is outstanding. A peer process that is busy elsewhere still has its
/// kernel acknowledge (zero-window probes included), so only an unreachable host, or a link
/// cut, makes this grow.
pub(crate) fn unacked_silence(fd: std::os::fd::RawFd) -> Result<Option<Duration>> {
    // SAFETY: an all-zero tcp_info is a valid value of the plain C struct.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for the kernel to write (it writes at most `len`).
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(Error::io("TCP_INFO", io::Error::last_os_error()));
    }
    if info.tcpi_unacked == 0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_millis(u64::from(
        info.tcpi_last_ack_recv,
    ))))
}

/// Sets the socket's congestion control algorithm.
pub(super) fn set_congestion(s: &Socket, name: &str) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the option value is `name`'s bytes with their length; the kernel copies them.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr() as *const libc::c_void,
            name.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(Error::io(
            format!("TCP_CONGESTION {name}"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

impl SockCfg {
    pub(super) fn from_env(dev: &NetIf) -> Result<Self> {
        let mut cfg = SockCfg {
            sndbuf: sock_buf_size(&TCP_SNDBUF)?,
            rcvbuf: sock_buf_size(&TCP_RCVBUF)?,
            congestion: congestion_for(&TCP_CONGESTION, dev)?,
            keepalive: Keepalive::from_env()?,
        };
        if let Some(cc) = cfg.congestion.clone() {
            // Checked once here, on a probe socket: a name the kernel does not allow is an
            // error for an explicit choice and means "keep the system's" for auto.
            let probe = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
                .map_err(|e| Error::io("creating a tcp socket", e))?;
            if let Err(e) = set_congestion(&probe, &cc) {
                if TCP_CONGESTION.raw().trim().eq_ignore_ascii_case("auto") {
                    tracing::debug!(
                        "tcp on {}: keeping the system's congestion control: {e}",
                        dev.name
                    );
                    cfg.congestion = None;
                } else {
                    let allowed = std::fs::read_to_string(
                        "/proc/sys/net/ipv4/tcp_allowed_congestion_control",
                    )
                    .unwrap_or_default();
                    return Err(Error::Config(format!(
                        "{}={cc}: {e}; allowed here: {}, or auto or system",
                        TCP_CONGESTION.env_name(),
                        allowed.trim()
                    )));
                }
            }
        }
        Ok(cfg)
    }
    /// Sets the configured send and receive buffer sizes. A connection's receive window is
    /// negotiated from its buffer at the handshake, so this must happen before `connect`, and
    /// on the listening socket before `listen` (accepted sockets inherit it): set on an
    /// accepted socket only, its window outgrew its 4 KiB buffer and a 300 KB transfer towards
    /// it took over 5 s instead of milliseconds.
    pub(super) fn apply_buffers(&self, s: &Socket) -> Result<()> {
        let ctx = |what: &'static str| move |e: io::Error| Error::io(what, e);
        if let Some(n) = self.sndbuf {
            s.set_send_buffer_size(n).map_err(ctx("SO_SNDBUF"))?;
        }
        if let Some(n) = self.rcvbuf {
            s.set_recv_buffer_size(n).map_err(ctx("SO_RCVBUF"))?;
        }
        Ok(())
    }
    pub(super) fn apply(&self, s: &Socket) -> Result<()> {
        let ctx = |what: &'static str| move |e: io::Error| Error::io(what, e);
        s.set_nonblocking(true).map_err(ctx("O_NONBLOCK"))?;
        s.set_nodelay(true).map_err(ctx("TCP_NODELAY"))?;
        if let Some(cc) = &self.congestion {
            set_congestion(s, cc)?;
        }
        self.apply_buffers(s)?;
        // A peer host that vanishes without a FIN or RST, from an idle connection, is
        // detected after `dead_after` (16 s by default); with data outstanding, by the
        // endpoint's check (`unacked_silence`).
        if let Some(k) = self.keepalive {
            let ka = TcpKeepalive::new()
                .with_time(k.idle)
                .with_interval(k.interval)
                .with_retries(k.count);
            s.set_tcp_keepalive(&ka).map_err(ctx("SO_KEEPALIVE"))?;
        }
        Ok(())
    }
}
