//! cma where the kernel restricts ptrace. The restriction is made without changing global
//! state: the peer makes itself non-dumpable and the test's thread drops `CAP_SYS_PTRACE` from
//! its own capability sets (capabilities are per thread), which is what a container without
//! `CAP_SYS_PTRACE` or Yama `ptrace_scope` 1 look like to `process_vm_readv`. cma must detect
//! it up front (`is_reachable` gives the reason, and ucp then picks another path: a
//! rendezvous both ways arrives intact, with no error mid-transfer), and an operation tried
//! anyway is an error, not a crash, leaving the peer untouched.

mod forged;

use forged::{Victim, LEN};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::ptr::NonNull;
use std::time::{Duration, Instant};
use ucs::testing::{hex, unhex};
use uct::{CompletionId, Endpoint, Error, Iface, Iov, MemoryDomain};

/// Removes `CAP_SYS_PTRACE` from the calling thread's effective and permitted sets.
fn drop_cap_sys_ptrace() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_PTRACE: u32 = 19;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: FFI with a valid header and two data structs (version 3).
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
    assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
    d[0].effective &= !(1 << CAP_SYS_PTRACE);
    d[0].permitted &= !(1 << CAP_SYS_PTRACE);
    // SAFETY: as above; pid 0 is the calling thread.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
}

#[test]
fn cma_detects_a_peer_the_kernel_forbids_and_fails_only_the_operation() {
    let mut victim = Victim::spawn("rucx-nodump");
    std::thread::spawn(move || {
        drop_cap_sys_ptrace();
        let (md, mut iface) = uct::open("cma", "memory").unwrap();
        let dev = iface.device_address().to_vec();
        // The victim grants us access, so only the kernel's rule is in the way.
        victim.grant(&dev, iface.iface_address());
        let mut addr = Vec::new();
        uct::cma::CmaIfaceAddr { pid: victim.pid }.encode(&mut addr);
        let why = iface.is_reachable(&dev, Some(&addr)).unwrap_err();
        assert!(why.contains("forbids tracing"), "{why}");
        let mut ep = iface.ep_create_connected(&dev, &addr).unwrap();
        let mut key = Vec::new();
        uct::cma::CmaRkey {
            pid: victim.pid,
            base: victim.addr,
            len: LEN as u64,
        }
        .encode(&mut key);
        let rkey = md.rkey_unpack(&key).unwrap();
        let mut junk = vec![0xeeu8; LEN];
        // SAFETY: `junk` outlives the handle.
        let h = unsafe { md.mem_reg(NonNull::new(junk.as_mut_ptr()).unwrap(), LEN) }.unwrap();
        let r = ep.put_zcopy(&[Iov::whole(&h)], victim.addr, &rkey, CompletionId(0));
        let e = r.expect_err("the kernel forbids it");
        assert!(matches!(e, Error::RemoteAccess(_)), "{e}");
        assert!(e.to_string().contains("ptrace"), "{e}");
        victim.assert_intact();
    })
    .join()
    .expect("the capability-less thread's checks");
}

#[test]
fn ucp_falls_back_from_cma_to_a_peer_the_kernel_forbids() {
    std::thread::spawn(|| {
        drop_cap_sys_ptrace();
        // sysv: posix segments are reached through /proc/PID/fd, which a non-dumpable peer closes too.
        let tls = "sysv,cma";
        let mut child = Command::new(env!("CARGO_BIN_EXE_nodump_echo"))
            .args([tls, "8192"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn nodump_echo");
        let mut stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let peer = unhex(line.trim().strip_prefix("ADDR ").expect("ADDR line"));
        let ctx = ucp::Context::new(ucp::ContextParams {
            features: ucp::Features::TAG,
            config: Some(ucp::UcpConfig {
                tls: tls.split(',').map(String::from).collect(),
                rndv_thresh: Some(8192),
                keepalive_interval: None,
                ..Default::default()
            }),
        })
        .unwrap();
        let mut w = ucp::Worker::new(&ctx).unwrap();
        writeln!(stdin, "PEER {}", hex(w.address())).unwrap();
        stdin.flush().unwrap();
        let ep = w.ep_create(&peer, ucp::EpParams::default()).unwrap();
        let info = w.ep_proto_info(ep).unwrap();
        assert!(!info.contains("cma"), "cma must not be used:\n{info}");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let send = w.tag_send(ep, 1, &data).unwrap();
        let recv = w.tag_recv(vec![0u8; data.len()], 2, u64::MAX).unwrap();
        let start = Instant::now();
        let mut pending = vec![send, recv];
        let mut got = None;
        while !pending.is_empty() {
            w.progress();
            let mut still = Vec::new();
            for op in pending.drain(..) {
                let r = match op {
                    ucp::Op::Done(c) => Ok(c),
                    ucp::Op::Pending(r) => w.request_take(r),
                };
                match r {
                    Ok(c) => {
                        c.status.as_ref().expect("no error mid-transfer");
                        if let Some(b) = c.buf {
                            got = Some(b[..c.len].to_vec());
                        }
                    }
                    Err(r) => still.push(ucp::Op::Pending(r)),
                }
            }
            pending = still;
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "watchdog: the echo never completed"
            );
        }
        assert_eq!(got.expect("the echo"), data, "the echo arrives intact");
        drop(stdin);
        let st = child.wait().unwrap();
        assert!(st.success(), "{st}");
    })
    .join()
    .expect("the capability-less thread's checks");
}
