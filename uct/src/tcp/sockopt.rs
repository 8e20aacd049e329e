//! Socket options of the transport's connections, from the environment.

use super::{congestion_for, sock_buf_size, NetIf, TCP_CONGESTION, TCP_RCVBUF, TCP_SNDBUF};
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
        // A peer host that vanishes without a FIN or RST is detected in about 16 s.
        let ka = TcpKeepalive::new()
            .with_time(Duration::from_secs(10))
            .with_interval(Duration::from_secs(2))
            .with_retries(3);
        s.set_tcp_keepalive(&ka).map_err(ctx("SO_KEEPALIVE"))?;
        Ok(())
    }
}
