//! Multi-process tests of the posix, sysv and cma transports: a child process
//! (`tests/src/bin/shm_peer.rs`) is the peer; addresses go over its stdin/stdout. Every test has
//! a watchdog that kills the child and aborts if something hangs.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ucs::testing::{hex, unhex};
use uct::{
    AtomicOp, CompletionId, Endpoint, EpId, Error, EventSink, Iface, Iov, MemoryDomain, Outcome,
};

/// Kills the child and aborts the test binary if the test is still running after 120 s.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn new(pid: u32) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(120);
            while Instant::now() < until {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!("watchdog: test still running after 120 s, killing peer {pid}");
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

struct Peer {
    child: Child,
    stdin: ChildStdin,
    dev: Vec<u8>,
    iface: Vec<u8>,
    rkey: Vec<u8>,
    base: u64,
    cma_iface: Option<Vec<u8>>,
    cma_rkey: Option<Vec<u8>>,
    cma_base: u64,
    _watchdog: Watchdog,
}

impl Peer {
    fn spawn(tl: &str) -> Peer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shm_peer"))
            .arg(tl)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn shm_peer");
        let watchdog = Watchdog::new(child.id());
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).expect("peer address line");
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.first(), Some(&"ADDR"), "peer said {line:?}");
        let opt = |s: &str| (s != "-").then(|| unhex(s));
        Peer {
            stdin: child.stdin.take().unwrap(),
            dev: unhex(w[1]),
            iface: unhex(w[2]),
            rkey: unhex(w[3]),
            base: w[4].parse().unwrap(),
            cma_iface: opt(w[5]),
            cma_rkey: opt(w[6]),
            cma_base: w[7].parse().unwrap(),
            child,
            _watchdog: watchdog,
        }
    }

    /// Connects both ways: our endpoint to the peer, then the peer's back to us, and waits for
    /// one echo (so the peer's endpoint exists, and with it the peer's grant of access to its
    /// memory).
    fn connect(&mut self, iface: &mut uct::AnyIface) -> uct::AnyEp {
        iface
            .is_reachable(&self.dev, Some(&self.iface))
            .expect("peer reachable");
        let mut ep = iface
            .ep_create_connected(&self.dev, &self.iface)
            .expect("connect to peer");
        writeln!(
            self.stdin,
            "CONNECT {} {}",
            hex(iface.device_address()),
            hex(iface.iface_address())
        )
        .unwrap();
        self.stdin.flush().unwrap();
        let mut inbox = Inbox::default();
        retry(iface, &mut inbox, || ep.am_short(1, 0, &[]));
        wait_msg(iface, &mut inbox, 2);
        ep
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill9(&mut self) {
        self.child.kill().expect("kill -9 peer");
        self.child.wait().expect("reap peer");
    }
}

#[derive(Default)]
struct Inbox {
    msgs: Vec<(u8, Vec<u8>)>,
    errors: Vec<(EpId, Error)>,
}

impl EventSink for Inbox {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.msgs.push((id, data.to_vec()));
    }
    fn completion(&mut self, _comp: CompletionId, _result: uct::Result<u64>) {}
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

/// Progresses until a message with `id` arrives (the watchdog bounds the wait).
fn wait_msg(iface: &mut uct::AnyIface, inbox: &mut Inbox, id: u8) -> Vec<u8> {
    loop {
        if let Some(i) = inbox.msgs.iter().position(|m| m.0 == id) {
            return inbox.msgs.remove(i).1;
        }
        iface.progress(inbox);
        assert!(inbox.errors.is_empty(), "{:?}", inbox.errors);
    }
}

/// Retries an operation that may meet back-pressure, progressing in between.
fn retry<T>(
    iface: &mut uct::AnyIface,
    inbox: &mut Inbox,
    mut op: impl FnMut() -> uct::Result<Outcome<T>>,
) -> T {
    loop {
        match op().expect("operation failed") {
            Outcome::Done(v) => return v,
            Outcome::NoResource => {
                iface.progress(inbox);
            }
            Outcome::InProgress => panic!("shared memory completes at once"),
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

fn read_peer(
    iface: &mut uct::AnyIface,
    ep: &mut uct::AnyEp,
    inbox: &mut Inbox,
    cmd: u8,
    off: u32,
    len: u32,
) -> Vec<u8> {
    let mut req = off.to_le_bytes().to_vec();
    req.extend_from_slice(&len.to_le_bytes());
    retry(iface, inbox, || ep.am_short_iov(cmd, &[&req]));
    wait_msg(iface, inbox, 5)
}

fn messages_rma_atomics(tl: &str) {
    let mut peer = Peer::spawn(tl);
    let (md, mut iface) = uct::open(tl, "memory").unwrap();
    let mut ep = peer.connect(&mut iface);
    let attr = iface.attr().clone();
    let mut inbox = Inbox::default();

    // Active messages both ways at the boundary sizes; the peer echoes each one.
    for len in [0, 1, attr.am.max_short - 8] {
        let p = pattern(len, 1);
        retry(&mut iface, &mut inbox, || ep.am_short(1, 0xfeed_f00d, &p));
        let mut want = 0xfeed_f00du64.to_le_bytes().to_vec();
        want.extend_from_slice(&p);
        assert_eq!(wait_msg(&mut iface, &mut inbox, 2), want, "am_short {len}");
    }
    for len in [0, 1, attr.am.max_bcopy] {
        let p = pattern(len, 2);
        let n = retry(&mut iface, &mut inbox, || {
            ep.am_bcopy(1, |buf| {
                buf[..len].copy_from_slice(&p);
                len
            })
        });
        assert_eq!(n, len);
        assert_eq!(wait_msg(&mut iface, &mut inbox, 2), p, "am_bcopy {len}");
    }
    let mem = md.mem_alloc(attr.am.max_zcopy).unwrap();
    mem.write(0, &pattern(attr.am.max_zcopy, 3)).unwrap();
    let hdr = pattern(attr.am.max_hdr, 4);
    retry(&mut iface, &mut inbox, || {
        ep.am_zcopy(1, &hdr, &[Iov::whole(&mem)], CompletionId(9))
    });
    let mut want = hdr.clone();
    want.extend_from_slice(&pattern(attr.am.max_zcopy, 3));
    assert_eq!(wait_msg(&mut iface, &mut inbox, 2), want, "am_zcopy");

    // A stream much longer than the FIFO, both directions at once: order and data kept.
    let total = 3000u64;
    let mut sent = 0u64;
    let mut got = Vec::new();
    while got.len() < total as usize {
        if sent < total {
            match ep.am_short(1, sent, &[]).unwrap() {
                Outcome::Done(()) => sent += 1,
                Outcome::NoResource => {}
                Outcome::InProgress => unreachable!(),
            }
        }
        iface.progress(&mut inbox);
        for (id, d) in inbox.msgs.drain(..) {
            assert_eq!(id, 2);
            got.push(u64::from_le_bytes(d[..8].try_into().unwrap()));
        }
    }
    assert_eq!(got, (0..total).collect::<Vec<_>>());

    // put/get/atomics on the peer's mem_alloc'd region.
    let rkey = md.rkey_unpack(&peer.rkey).unwrap();
    let base = peer.base;
    let mut buf = vec![0u8; 64];
    assert!(ep.get_short(&mut buf, base + 64, &rkey).unwrap().is_done());
    let want: Vec<u8> = (64..128)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(1))
        .collect();
    assert_eq!(buf, want, "get_short sees the peer's initial contents");
    let p = pattern(100, 5);
    assert!(ep.put_short(&p, base + 100, &rkey).unwrap().is_done());
    assert_eq!(read_peer(&mut iface, &mut ep, &mut inbox, 4, 100, 100), p);
    let src = md.mem_alloc(1024).unwrap();
    src.write(0, &pattern(1024, 6)).unwrap();
    assert!(ep
        .put_zcopy(&[Iov::whole(&src)], base + 1024, &rkey, CompletionId(0))
        .unwrap()
        .is_done());
    assert_eq!(
        read_peer(&mut iface, &mut ep, &mut inbox, 4, 1024, 1024),
        pattern(1024, 6)
    );
    let a = base + 2048;
    assert!(ep.put_short(&[0; 8], a, &rkey).unwrap().is_done());
    assert!(ep
        .atomic64_post(AtomicOp::Add, 40, a, &rkey)
        .unwrap()
        .is_done());
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Add, 2, a, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(40)
    );
    assert_eq!(
        ep.atomic_cswap64(42, 0x1_0000_0001, a, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(42)
    );
    assert_eq!(
        ep.atomic32_fetch(AtomicOp::Or, 0x10, a, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(1)
    );
    let v = read_peer(&mut iface, &mut ep, &mut inbox, 4, 2048, 8);
    assert_eq!(u64::from_le_bytes(v.try_into().unwrap()), 0x1_0000_0011);
    assert!(matches!(
        ep.put_short(&[1], base + 4096, &rkey),
        Err(Error::RemoteAccess(_))
    ));

    // cma between the same two processes, when the kernel allows it.
    if let (Some(ci), Some(ck)) = (&peer.cma_iface, &peer.cma_rkey) {
        let (cmd, mut cif) = uct::open("cma", "memory").unwrap();
        let mut cep = cif.ep_create_connected(&peer.dev, ci).unwrap();
        let crkey = cmd.rkey_unpack(ck).unwrap();
        let mut local = vec![0u8; 4096];
        // SAFETY: `local` outlives the handle (dropped at the end of this block).
        let h = unsafe { cmd.mem_reg(std::ptr::NonNull::new(local.as_mut_ptr()).unwrap(), 4096) }
            .unwrap();
        let iov = [
            Iov::new(&h, 0, 1000).unwrap(),
            Iov::new(&h, 1000, 3096).unwrap(),
        ];
        assert!(cep
            .get_zcopy(&iov, peer.cma_base, &crkey, CompletionId(0))
            .unwrap()
            .is_done());
        let mut got = vec![0u8; 4096];
        h.read(0, &mut got).unwrap();
        let want: Vec<u8> = (0..4096)
            .map(|i| (i as u8).wrapping_mul(3).wrapping_add(5))
            .collect();
        assert_eq!(got, want, "cma get_zcopy");
        h.write(0, &pattern(100, 7)).unwrap();
        let piece = [Iov::new(&h, 0, 100).unwrap()];
        assert!(cep
            .put_zcopy(&piece, peer.cma_base + 500, &crkey, CompletionId(0))
            .unwrap()
            .is_done());
        assert_eq!(
            read_peer(&mut iface, &mut ep, &mut inbox, 6, 500, 100),
            pattern(100, 7)
        );
        assert!(matches!(
            cep.put_zcopy(&piece, peer.cma_base + 4000, &crkey, CompletionId(0)),
            Err(Error::RemoteAccess(_))
        ));
        drop(h);
        drop(local);
    }

    retry(&mut iface, &mut inbox, || ep.am_short(3, 0, &[]));
    let status = peer.child.wait().unwrap();
    assert!(status.success(), "peer exited with {status}");
}

#[test]
fn shm_posix_messages_rma_atomics_two_processes() {
    messages_rma_atomics("posix");
}

#[test]
fn shm_sysv_messages_rma_atomics_two_processes() {
    messages_rma_atomics("sysv");
}

fn peer_killed(tl: &str) {
    // Detection by progress: the FIFO has room, the peer watch notices the exit.
    let mut peer = Peer::spawn(tl);
    let (_md, mut iface) = uct::open(tl, "memory").unwrap();
    let mut ep = peer.connect(&mut iface);
    let mut inbox = Inbox::default();
    retry(&mut iface, &mut inbox, || ep.am_short(1, 7, &[]));
    wait_msg(&mut iface, &mut inbox, 2);
    // Sleep on the event fd with no timeout: the peer's death must wake us (the watchdog
    // fails the test otherwise), and progress then reports the endpoint error.
    while iface.event_arm(uct::EventFlags::RECV).is_err() {
        iface.progress(&mut inbox);
    }
    peer.kill9();
    while inbox.errors.is_empty() {
        let mut p = libc::pollfd {
            fd: iface.event_fd().unwrap(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, -1) }, 1);
        iface.progress(&mut inbox);
        if inbox.errors.is_empty() && iface.event_arm(uct::EventFlags::RECV).is_err() {
            iface.progress(&mut inbox);
        }
    }
    assert_eq!(inbox.errors.len(), 1);
    assert_eq!(inbox.errors[0].0, ep.id());
    assert!(matches!(inbox.errors[0].1, Error::PeerFailure(_)));
    assert!(matches!(ep.am_short(1, 0, &[]), Err(Error::PeerFailure(_))));
    assert!(matches!(
        ep.flush(CompletionId(0)),
        Err(Error::PeerFailure(_))
    ));
    for _ in 0..10_000 {
        iface.progress(&mut inbox);
    }
    assert_eq!(inbox.errors.len(), 1, "the error is reported once");

    // cma to a dead process: data operations and progress report the peer failure.
    let mut peer = Peer::spawn(tl);
    let (_md2, mut iface2) = uct::open(tl, "memory").unwrap();
    let _back = peer.connect(&mut iface2);
    if let (Some(ci), Some(ck)) = (peer.cma_iface.clone(), peer.cma_rkey.clone()) {
        let (cmd, mut cif) = uct::open("cma", "memory").unwrap();
        let mut cep = cif.ep_create_connected(&peer.dev, &ci).unwrap();
        let crkey = cmd.rkey_unpack(&ck).unwrap();
        let mut local = vec![0u8; 64];
        // SAFETY: `local` outlives the handle.
        let h = unsafe { cmd.mem_reg(std::ptr::NonNull::new(local.as_mut_ptr()).unwrap(), 64) }
            .unwrap();
        let iov = [Iov::whole(&h)];
        assert!(cep
            .get_zcopy(&iov, peer.cma_base, &crkey, CompletionId(0))
            .unwrap()
            .is_done());
        peer.kill9();
        let mut cinbox = Inbox::default();
        while cinbox.errors.is_empty() {
            cif.progress(&mut cinbox);
        }
        assert_eq!(cinbox.errors[0].0, cep.id());
        assert!(matches!(cinbox.errors[0].1, Error::PeerFailure(_)));
        assert!(matches!(
            cep.get_zcopy(&iov, peer.cma_base, &crkey, CompletionId(0)),
            Err(Error::PeerFailure(_))
        ));
        drop(h);
        drop(local);
    } else {
        peer.kill9();
    }

    // Detection at flush, with no progress call since the death: the message goes into the
    // dead peer's FIFO, and the flush after it fails instead of reporting it delivered.
    let mut peer = Peer::spawn(tl);
    let mut ep = peer.connect(&mut iface);
    let mut inbox = Inbox::default();
    retry(&mut iface, &mut inbox, || ep.am_short(1, 9, &[]));
    wait_msg(&mut iface, &mut inbox, 2);
    assert!(ep.flush(CompletionId(0)).unwrap().is_done(), "live peer");
    peer.kill9();
    assert!(ep.am_short(1, 0, b"lost?").unwrap().is_done());
    assert!(matches!(
        ep.flush(CompletionId(0)),
        Err(Error::PeerFailure(_))
    ));
    assert!(matches!(ep.am_short(1, 0, &[]), Err(Error::PeerFailure(_))));
    // Progress reports the failure to the layer above too, once.
    iface.progress(&mut inbox);
    assert_eq!(inbox.errors.len(), 1);
    assert_eq!(inbox.errors[0].0, ep.id());
    drop(ep);

    // Detection on a full FIFO: the sender gets an error, not endless back-pressure.
    let mut peer = Peer::spawn(tl);
    let mut ep = peer.connect(&mut iface);
    peer.kill9();
    let mut result = None;
    for _ in 0..10 * uct::mm::fifo::NELEMS {
        match ep.am_short(1, 0, &[]) {
            Ok(Outcome::Done(())) => {}
            Ok(other) => panic!("{other:?} from a dead peer with a full FIFO"),
            Err(e) => {
                result = Some(e);
                break;
            }
        }
    }
    assert!(matches!(result, Some(Error::PeerFailure(_))), "{result:?}");
    let mut inbox = Inbox::default();
    iface.progress(&mut inbox);
    assert_eq!(inbox.errors.len(), 1);
    assert_eq!(inbox.errors[0].0, ep.id());
}

#[test]
fn shm_posix_peer_killed_gives_endpoint_error() {
    peer_killed("posix");
}

#[test]
fn shm_sysv_peer_killed_gives_endpoint_error() {
    peer_killed("sysv");
}

/// `/proc/sysvipc/shm` rows as (shmid, perms, cpid): what `ipcs -m` shows.
fn sysv_segments() -> Vec<(u64, u32, u32)> {
    let text = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.get(1)?.parse().ok()?,
                u32::from_str_radix(f.get(2)?, 8).ok()?,
                f.get(4)?.parse().ok()?,
            ))
        })
        .collect()
}

fn dev_shm() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// How many of our mappings are of the files with these inodes (`/proc/self/maps` column 5).
fn mappings_of(inodes: &[u64]) -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(4)
                .and_then(|i| i.parse::<u64>().ok())
                .is_some_and(|i| inodes.contains(&i))
        })
        .count()
}

#[test]
fn shm_sysv_no_segment_left_after_kill9() {
    let mut peer = Peer::spawn("sysv");
    let pid = peer.pid();
    let mine: Vec<_> = sysv_segments().into_iter().filter(|s| s.2 == pid).collect();
    assert!(mine.len() >= 2, "FIFO and region segments: {mine:?}");
    for (id, perms, _) in &mine {
        assert_eq!(perms & 0o777, 0o600, "segment {id} mode");
        assert_ne!(perms & 0o1000, 0, "segment {id} is not marked for removal");
    }
    let (md, mut iface) = uct::open("sysv", "memory").unwrap();
    let ep = peer.connect(&mut iface);
    let rkey = md.rkey_unpack(&peer.rkey).unwrap();
    peer.kill9();
    drop(ep);
    drop(rkey);
    let left: Vec<_> = sysv_segments().into_iter().filter(|s| s.2 == pid).collect();
    assert!(
        left.is_empty(),
        "segments of the killed peer remain: {left:?}"
    );
}

#[test]
fn shm_posix_no_segment_left_after_kill9() {
    let before = dev_shm();
    let (md, mut iface) = uct::open("posix", "memory").unwrap();
    let mut peer = Peer::spawn("posix");
    let pid = peer.pid();
    // The FIFO is a memfd with mode 0600 and no name in any file system. (The segment id
    // carries the descriptor number in its low 32 bits, a serial in the high ones.)
    let fd = uct::mm::wire::IfaceAddr::decode(&peer.iface)
        .unwrap()
        .seg
        .id as u32;
    let link = format!("/proc/{pid}/fd/{fd}");
    let target = std::fs::read_link(&link).unwrap();
    assert!(
        target.to_string_lossy().starts_with("/memfd:rucx-mm"),
        "{target:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&link).unwrap().permissions().mode() & 0o777,
        0o600
    );
    use std::os::unix::fs::MetadataExt;
    let region_fd = u64::from_le_bytes(peer.rkey[8..16].try_into().unwrap()) as u32;
    let inodes = [
        std::fs::metadata(&link).unwrap().ino(),
        std::fs::metadata(format!("/proc/{pid}/fd/{region_fd}"))
            .unwrap()
            .ino(),
    ];
    assert_eq!(mappings_of(&inodes), 0);
    let ep = peer.connect(&mut iface);
    let rkey = md.rkey_unpack(&peer.rkey).unwrap();
    assert_eq!(mappings_of(&inodes), 2, "FIFO and region mapped");
    peer.kill9();
    drop(ep);
    drop(rkey);
    assert_eq!(mappings_of(&inodes), 0, "a peer segment stays mapped");
    assert!(!std::path::Path::new(&link).exists());
    let after = dev_shm();
    let new: Vec<_> = after.iter().filter(|n| !before.contains(n)).collect();
    assert!(
        new.iter().all(|n| !n.contains("rucx")),
        "files left in /dev/shm: {new:?}"
    );
}

/// Our mappings of the peer's region (the segment its remote key names): memfd inode (posix)
/// or shmid (sysv) in the inode column, and the mapped file's name of that kind.
fn region_mappings(tl: &str, region: u64) -> usize {
    let name = if tl == "sysv" {
        "/SYSV"
    } else {
        "/memfd:rucx-mm"
    };
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(4).and_then(|i| i.parse::<u64>().ok()) == Some(region)
                && f.get(5).is_some_and(|p| p.starts_with(name))
        })
        .count()
}

/// Keys unpacked by the endpoint (`peer_rkey_unpack`) share one mapping of the peer's region,
/// kept by the endpoint after the keys drop; a key naming another process is refused; after
/// the peer died, unpacking fails and unmaps it although the endpoint itself is still held.
fn ep_keys_unmapped_when_peer_dies(tl: &str) {
    let (_md, mut iface) = uct::open(tl, "memory").unwrap();
    let mut peer = Peer::spawn(tl);
    let id = u64::from_le_bytes(peer.rkey[8..16].try_into().unwrap());
    let region = if tl == "sysv" {
        id
    } else {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{}/fd/{}", peer.pid(), id as u32))
            .unwrap()
            .ino()
    };
    let mut ep = peer.connect(&mut iface);
    assert_eq!(region_mappings(tl, region), 0);
    let k1 = ep
        .peer_rkey_unpack(&peer.rkey)
        .unwrap()
        .expect("mm maps keys");
    let k2 = ep
        .peer_rkey_unpack(&peer.rkey)
        .unwrap()
        .expect("mm maps keys");
    assert!(k1.is_mapped() && k2.is_mapped());
    assert_eq!(region_mappings(tl, region), 1, "one mapping for both keys");
    let p = k2.local_ptr(peer.base, 2).unwrap();
    // SAFETY: bounds-checked inside the mapping, which `k2` keeps; the peer filled its region
    // with `i * 7 + 1`.
    assert_eq!(unsafe { [p.read(), p.add(1).read()] }, [1, 8]);
    assert!(
        k2.local_ptr(peer.base + k2.len, 1).is_err(),
        "outside the key"
    );
    drop((k1, k2));
    assert_eq!(region_mappings(tl, region), 1, "kept by the endpoint");
    let mut forged = peer.rkey.clone();
    forged[4..8].copy_from_slice(&std::process::id().to_le_bytes());
    assert!(matches!(
        ep.peer_rkey_unpack(&forged),
        Err(Error::RemoteAccess(_))
    ));
    peer.kill9();
    let mut inbox = Inbox::default();
    while inbox.errors.is_empty() {
        iface.progress(&mut inbox);
    }
    assert!(matches!(
        ep.peer_rkey_unpack(&peer.rkey),
        Err(Error::PeerFailure(_))
    ));
    assert_eq!(
        region_mappings(tl, region),
        0,
        "the failed endpoint keeps the dead peer's segment mapped"
    );
    drop(ep);
}

#[test]
fn shm_posix_ep_keys_unmapped_when_peer_dies() {
    ep_keys_unmapped_when_peer_dies("posix");
}

#[test]
fn shm_sysv_ep_keys_unmapped_when_peer_dies() {
    ep_keys_unmapped_when_peer_dies("sysv");
}

fn sender_dies_mid_claim(tl: &str) {
    let (_md, mut iface) = uct::open(tl, "memory").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_shm_peer"))
        .args(["claim-and-die", &hex(iface.iface_address())])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn shm_peer");
    let _watchdog = Watchdog::new(child.id());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(9), "the peer claims and dies");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "CLAIMED 0");
    // Another sender (here: this process) queues behind the dead one's hole.
    let (dev, addr) = (
        iface.device_address().to_vec(),
        iface.iface_address().to_vec(),
    );
    let mut ep = iface.ep_create_connected(&dev, &addr).unwrap();
    let mut inbox = Inbox::default();
    for i in 0..10u64 {
        assert!(ep.am_short(7, i, &[]).unwrap().is_done());
    }
    // Progress steps over the dead sender's element and delivers everything after it.
    while inbox.msgs.len() < 10 {
        iface.progress(&mut inbox);
    }
    let got: Vec<u64> = inbox
        .msgs
        .iter()
        .map(|(id, d)| {
            assert_eq!(*id, 7);
            u64::from_le_bytes(d[..8].try_into().unwrap())
        })
        .collect();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    // The FIFO keeps working across many laps.
    let total = 5 * uct::mm::fifo::NELEMS;
    let (mut sent, mut seen) = (0, 0);
    while seen < total {
        if sent < total && ep.am_short(8, sent, &[]).unwrap().is_done() {
            sent += 1;
        }
        inbox.msgs.clear();
        iface.progress(&mut inbox);
        seen += inbox.msgs.len() as u64;
    }
}

#[test]
fn shm_posix_sender_killed_mid_claim_does_not_stall_the_fifo() {
    sender_dies_mid_claim("posix");
}

#[test]
fn shm_sysv_sender_killed_mid_claim_does_not_stall_the_fifo() {
    sender_dies_mid_claim("sysv");
}
