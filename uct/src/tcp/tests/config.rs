//! Configuration and addressing: devices, reachability, addresses, socket options and
//! congestion control.

use super::*;

#[test]
fn reachability_rules() {
    let a = open_lo();
    let b = open_lo();
    assert_eq!(
        a.is_reachable(b.device_address(), Some(b.iface_address())),
        Ok(())
    );
    // The same loopback address in another network namespace is not reachable.
    let mut other = DevAddr::decode(b.device_address()).unwrap();
    other.netns ^= 1;
    let why = a.is_reachable(&other.encode(), None).unwrap_err();
    assert!(why.contains("namespace"), "{why}");
    // A remote network address is not reachable through lo.
    let remote = DevAddr {
        ip: "10.231.0.2".parse().unwrap(),
        prefix: 24,
        loopback: false,
        netns: 5,
    };
    assert!(a.is_reachable(&remote.encode(), None).is_err());
    // A non-loopback device on another subnet without a route through it.
    let eth = NetIf {
        name: "test0".into(),
        ip: "10.231.0.1".parse().unwrap(),
        prefix: 24,
        loopback: false,
    };
    let same_subnet = DevAddr {
        ip: "10.231.0.77".parse().unwrap(),
        ..remote
    };
    assert_eq!(iface::reachable(&eth, 5, &same_subnet), Ok(()));
    let far = DevAddr {
        ip: "10.232.9.9".parse().unwrap(),
        ..remote
    };
    let why = iface::reachable(&eth, 5, &far).unwrap_err();
    assert!(why.contains("no route from test0"), "{why}");
    assert!(iface::reachable(&eth, 5, &DevAddr::decode(b.device_address()).unwrap()).is_err());
    // Garbage addresses.
    assert!(a.is_reachable(&[1, 2, 3], None).is_err());
    assert!(a.is_reachable(b.device_address(), Some(&[9; 8])).is_err());
}

#[test]
fn net_devices_selection() {
    let ifs = vec![
        NetIf {
            name: "lo".into(),
            ip: "127.0.0.1".parse().unwrap(),
            prefix: 8,
            loopback: true,
        },
        NetIf {
            name: "eth0".into(),
            ip: "10.0.0.1".parse().unwrap(),
            prefix: 24,
            loopback: false,
        },
    ];
    assert_eq!(select_devices(ifs.clone(), &[]).unwrap().len(), 2);
    let only = select_devices(ifs.clone(), &["eth0".into(), "mlx5_0:1".into()]).unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].name, "eth0");
    let err = select_devices(ifs, &["eth7".into()]).unwrap_err();
    assert!(matches!(err, Error::NoDevice(_)));
    let text = err.to_string();
    assert!(text.contains("eth7") && text.contains("lo, eth0"), "{text}");
    // The host has a loopback device and it is listed.
    assert!(TcpTransport::devices()
        .unwrap()
        .iter()
        .any(|d| d.name == "lo"));
}

#[test]
fn socket_buffer_variables() {
    static V: ucs::config::ConfigVar = ucs::config::ConfigVar {
        name: "TEST_TCP_BUFSZ",
        default: "auto",
        doc: "test",
    };
    assert_eq!(sock_buf_size(&V).unwrap(), None);
    std::env::set_var("RUCX_TEST_TCP_BUFSZ", "256k");
    assert_eq!(sock_buf_size(&V).unwrap(), Some(256 * 1024));
    std::env::set_var("RUCX_TEST_TCP_BUFSZ", "lots");
    let e = sock_buf_size(&V).unwrap_err().to_string();
    assert!(e.contains("RUCX_TEST_TCP_BUFSZ"), "{e}");
    std::env::set_var("RUCX_TEST_TCP_BUFSZ", "0");
    assert!(sock_buf_size(&V).is_err());
    std::env::remove_var("RUCX_TEST_TCP_BUFSZ");
    assert_eq!(TCP_SNDBUF.env_name(), "RUCX_TCP_SNDBUF");
    assert_eq!(TCP_RCVBUF.env_name(), "RUCX_TCP_RCVBUF");
    // Known to the configuration registry once the transport was queried.
    let _ = TcpTransport::devices();
    for name in ["RUCX_TCP_SNDBUF", "RUCX_TCP_RCVBUF", "RUCX_NET_DEVICES"] {
        assert!(
            ucs::config::find(name).is_some(),
            "{name} is not registered"
        );
    }
}

#[test]
fn addresses_round_trip_and_reject_garbage() {
    let d = DevAddr {
        ip: "1.2.3.4".parse().unwrap(),
        prefix: 16,
        loopback: false,
        netns: 99,
    };
    assert_eq!(DevAddr::decode(&d.encode()).unwrap(), d);
    assert!(DevAddr::decode(&d.encode()[..15]).is_err());
    let i = IfaceAddr {
        ip: "1.2.3.4".parse().unwrap(),
        port: 4242,
    };
    assert_eq!(IfaceAddr::decode(&i.encode()).unwrap(), i);
    assert!(IfaceAddr::decode(&i.encode()[..7]).is_err());
    let e = EpAddr {
        iface: i,
        conn_id: 77,
    };
    assert_eq!(EpAddr::decode(&e.encode()).unwrap(), e);
    assert!(EpAddr::decode(&e.encode()[..15]).is_err());
    let mut a = open_lo();
    assert!(matches!(
        a.ep_create_connected(&[0; 3], &i.encode()),
        Err(Error::Wire(_))
    ));
}

#[test]
fn registry_opens_tcp_on_lo() {
    let (_md, iface) = crate::open("tcp", "lo").unwrap();
    assert_eq!(iface.tl_name(), "tcp");
    let err = crate::open("tcp", "no-such-dev0")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no-such-dev0"), "{err}");
}

#[test]
fn sockets_have_nodelay_and_configured_buffers() {
    let mut a = open_lo();
    let mut b = open_lo();
    // What RUCX_TCP_SNDBUF=192k / RUCX_TCP_RCVBUF=160k give (set here without touching the
    // environment other tests read).
    for i in [&a, &b] {
        let mut g = i.inner.borrow_mut();
        g.sock_cfg.sndbuf = Some(192 * 1024);
        g.sock_cfg.rcvbuf = Some(160 * 1024);
    }
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    assert!(ep.am_short(0, 0, b"x").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    for i in [&a, &b] {
        let g = i.inner.borrow();
        let socks: Vec<_> = g
            .conns
            .iter()
            .filter_map(|(_, c)| c.sock.as_ref())
            .collect();
        assert_eq!(socks.len(), 1);
        for s in socks {
            assert!(s.nodelay().unwrap(), "TCP_NODELAY is off");
            // The kernel doubles the value it was given.
            assert!(s.send_buffer_size().unwrap() >= 192 * 1024);
            assert!(s.recv_buffer_size().unwrap() >= 160 * 1024);
            assert!(s.keepalive().unwrap());
        }
    }
}

/// The congestion control a socket uses (`TCP_CONGESTION`).
fn congestion_of(s: &socket2::Socket) -> String {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes and the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(r, 0, "getsockopt: {}", std::io::Error::last_os_error());
    let end = buf[..len as usize]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(len as usize);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `RUCX_TCP_CONGESTION=auto` (the default) gives loopback connections reno on both sides
/// (unless the kernel refuses it);
/// `system` (here: the configuration with no algorithm) keeps the kernel's default.
#[test]
fn loopback_connections_use_reno_and_system_keeps_the_default() {
    let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .unwrap()
        .trim()
        .to_string();
    for keep_system in [false, true] {
        let mut a = open_lo();
        let mut b = open_lo();
        if keep_system {
            for i in [&a, &b] {
                i.inner.borrow_mut().sock_cfg.congestion = None;
            }
        }
        let (mut sa, mut sb) = (Sink::default(), Sink::default());
        let mut ep = a
            .ep_create_connected(b.device_address(), b.iface_address())
            .unwrap();
        assert!(ep.am_short(0, 0, b"x").unwrap().is_done());
        run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
        // Auto falls back to the system's only where the kernel refuses reno (it does not here).
        let refused = a.inner.borrow().sock_cfg.congestion.is_none();
        let want = if keep_system || refused {
            system.as_str()
        } else {
            "reno"
        };
        for i in [&a, &b] {
            let g = i.inner.borrow();
            for (_, c) in g.conns.iter() {
                if let Some(s) = c.sock.as_ref() {
                    assert_eq!(congestion_of(s), want, "keep_system {keep_system}");
                }
            }
        }
    }
}

/// `RUCX_TCP_CONGESTION` values: auto depends on the device, system keeps the kernel's, a
/// name is taken as given, anything else is an error that names the variable.
#[test]
fn congestion_setting_parses() {
    use ucs::config::ConfigVar;
    let lo = NetIf {
        name: "lo".into(),
        ip: "127.0.0.1".parse().unwrap(),
        prefix: 8,
        loopback: true,
    };
    let eth = NetIf {
        name: "eth9".into(),
        ip: "10.0.0.1".parse().unwrap(),
        prefix: 24,
        loopback: false,
    };
    // Variables no one sets, given values through their defaults.
    let var = |v: &'static str| ConfigVar {
        name: "TCP_CONGESTION_TEST_UNSET",
        default: v,
        doc: "",
    };
    assert_eq!(
        congestion_for(&var("auto"), &lo).unwrap().as_deref(),
        Some("reno")
    );
    assert_eq!(congestion_for(&var("auto"), &eth).unwrap(), None);
    assert_eq!(congestion_for(&var("system"), &lo).unwrap(), None);
    assert_eq!(
        congestion_for(&var("cubic"), &eth).unwrap().as_deref(),
        Some("cubic")
    );
    for bad in ["", "re no", "bbr;rm", "averyveryverylongname"] {
        match congestion_for(&var(bad), &lo) {
            Err(Error::Config(m)) => assert!(m.contains("TCP_CONGESTION_TEST_UNSET"), "{m}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

/// The keepalive defaults give UCX's 16 s to declare an unreachable host dead, and a connect
/// gives up after the SYN backoff that first covers it (1+2+4+8+16 = 31 s, four retries).
#[test]
fn keepalive_limits() {
    use super::super::sockopt::Keepalive;
    let k = Keepalive {
        idle: Duration::from_secs(10),
        interval: Duration::from_secs(2),
        count: 3,
    };
    assert_eq!(k.dead_after(), Duration::from_secs(16));
    assert_eq!(k.syn_retries(), 4);
    let short = Keepalive {
        idle: Duration::from_secs(1),
        interval: Duration::from_secs(1),
        count: 1,
    };
    assert_eq!(short.syn_retries(), 1);
}

/// `unacked_silence`: nothing waiting on an idle connection; with the peer not reading (its
/// window shut, our bytes queued) data waits, and the last acknowledgement is recent (the
/// peer's kernel answers even though its application does not read).
#[test]
fn unacked_silence_tells_waiting_data_and_a_live_peer_kernel() {
    use super::super::sockopt::unacked_silence;
    use std::os::fd::AsRawFd;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_rx, _) = l.accept().unwrap();
    assert_eq!(unacked_silence(tx.as_raw_fd()).unwrap(), None, "idle");
    tx.set_nonblocking(true).unwrap();
    let chunk = vec![7u8; 1 << 16];
    let mut sent = 0usize;
    while let Ok(n) = tx.write(&chunk) {
        sent += n;
        assert!(sent < 1 << 30, "the peer's window never shut");
    }
    std::thread::sleep(Duration::from_millis(300));
    let silent = unacked_silence(tx.as_raw_fd()).unwrap();
    let silent = silent.expect("data waits for the peer");
    assert!(silent < Duration::from_secs(10), "{silent:?}");
}
