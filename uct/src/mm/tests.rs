//! In-process tests of the shared-memory transports: two interfaces of one process talk through
//! real segments (the multi-process tests live in tests/tests/shm_*.rs).

use super::*;
use crate::caps::EventFlags;
use crate::ep::{AtomicOp, Endpoint};
use crate::iface::{EventSink, Iface, IfaceParams};
use crate::md::{Iov, MemHandle, MemoryDomain, RemoteKey};
use crate::transport::Transport;
use crate::EpId;
use crate::{CompletionId, PendingId};
use ucs::{Error, Outcome};

trait UnwrapDone<T> {
    fn unwrap_done(self) -> T;
}

impl<T> UnwrapDone<T> for Outcome<T> {
    #[track_caller]
    fn unwrap_done(self) -> T {
        match self {
            Outcome::Done(v) => v,
            _ => panic!("operation did not complete at once"),
        }
    }
}

#[derive(Default)]
struct Sink {
    msgs: Vec<(u8, Vec<u8>)>,
    retries: Vec<(EpId, u64)>,
    errors: Vec<(EpId, Error)>,
}

impl EventSink for Sink {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.msgs.push((id, data.to_vec()));
    }
    fn completion(&mut self, _comp: CompletionId, _result: ucs::Result<u64>) {
        panic!("shared memory never completes later");
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.retries.push((ep, req.0));
        true
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

fn params() -> IfaceParams {
    IfaceParams {
        device: DEVICE.into(),
        ..Default::default()
    }
}

fn pair<T: Transport<Md = MmMd, Iface = MmIface, Ep = MmEp>>() -> (MmMd, MmIface, MmIface, MmEp) {
    let md = T::open_md(DEVICE).unwrap();
    let mut a = T::open_iface(&md, &params()).unwrap();
    let b = T::open_iface(&md, &params()).unwrap();
    a.is_reachable(b.device_address(), Some(b.iface_address()))
        .unwrap();
    let ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    (md, a, b, ep)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn messages_at_boundaries<T: Transport<Md = MmMd, Iface = MmIface, Ep = MmEp>>() {
    let (md, _a, mut b, mut ep) = pair::<T>();
    let attr = b.attr().clone();
    let mut sink = Sink::default();
    let mut expect = Vec::new();
    for len in [0, 1, attr.am.max_short - 8] {
        let p = pattern(len, 1);
        assert_eq!(
            ep.am_short(3, 0x1122334455667788, &p).unwrap(),
            Outcome::DONE
        );
        let mut e = 0x1122334455667788u64.to_le_bytes().to_vec();
        e.extend_from_slice(&p);
        expect.push((3, e));
    }
    assert!(matches!(
        ep.am_short(3, 0, &pattern(attr.am.max_short - 7, 0)),
        Err(Error::MessageTooLong { .. })
    ));
    let iov_msg = [&b"ab"[..], &b""[..], &b"cdef"[..]];
    assert_eq!(ep.am_short_iov(4, &iov_msg).unwrap(), Outcome::DONE);
    expect.push((4, b"abcdef".to_vec()));
    for len in [0, 1, attr.am.max_short + 1, attr.am.max_bcopy] {
        let p = pattern(len, 2);
        let r = ep
            .am_bcopy(5, |buf| {
                buf[..len].copy_from_slice(&p);
                len
            })
            .unwrap();
        assert_eq!(r, Outcome::Done(len));
        expect.push((5, p));
    }
    assert!(ep.am_bcopy(5, |buf| buf.len() + 1).is_err());
    let mem = md.mem_alloc(attr.am.max_zcopy).unwrap();
    let data = pattern(attr.am.max_zcopy, 3);
    mem.write(0, &data).unwrap();
    let hdr = pattern(attr.am.max_hdr, 4);
    let iov = [
        Iov::new(&mem, 0, 10).unwrap(),
        Iov::new(&mem, 10, attr.am.max_zcopy - 10).unwrap(),
    ];
    assert_eq!(
        ep.am_zcopy(6, &hdr, &iov, CompletionId(1)).unwrap(),
        Outcome::DONE
    );
    let mut e = hdr.clone();
    e.extend_from_slice(&data);
    expect.push((6, e));
    assert!(matches!(
        ep.am_short(32, 0, &[]),
        Err(Error::InvalidParam(_))
    ));
    while b.progress(&mut sink) > 0 {}
    assert_eq!(sink.msgs.len(), expect.len());
    for (got, want) in sink.msgs.iter().zip(&expect) {
        assert_eq!(got.0, want.0);
        assert_eq!(got.1, want.1, "message of id {} differs", want.0);
    }
}

#[test]
fn posix_messages_at_boundaries() {
    messages_at_boundaries::<PosixTransport>();
}
#[test]
fn sysv_messages_at_boundaries() {
    messages_at_boundaries::<SysvTransport>();
}

fn backpressure_and_pending<T: Transport<Md = MmMd, Iface = MmIface, Ep = MmEp>>() {
    let (_md, mut a, mut b, mut ep) = pair::<T>();
    let mut sent = 0u64;
    loop {
        match ep.am_short(1, sent, &[]).unwrap() {
            Outcome::Done(()) => sent += 1,
            Outcome::NoResource => break,
            Outcome::InProgress => unreachable!(),
        }
    }
    assert_eq!(sent, fifo::NELEMS);
    ep.pending_add(PendingId(77)).unwrap();
    assert_eq!(a.flush(CompletionId(0)).unwrap(), Outcome::NoResource);
    assert_eq!(ep.flush(CompletionId(0)).unwrap(), Outcome::NoResource);
    let mut sa = Sink::default();
    a.progress(&mut sa);
    assert!(sa.retries.is_empty(), "FIFO still full");
    let mut sb = Sink::default();
    while b.progress(&mut sb) > 0 {}
    let got: Vec<u64> = sb
        .msgs
        .iter()
        .map(|(_, d)| u64::from_le_bytes(d[..8].try_into().unwrap()))
        .collect();
    assert_eq!(got, (0..sent).collect::<Vec<_>>());
    a.progress(&mut sa);
    assert_eq!(sa.retries, vec![(ep.id(), 77)]);
    assert_eq!(a.flush(CompletionId(0)).unwrap(), Outcome::DONE);
    assert!(matches!(ep.pending_add(PendingId(78)), Err(Error::Busy(_))));
    let mut purged = Vec::new();
    ep.pending_purge(&mut |r| purged.push(r));
    assert!(purged.is_empty());
}

/// A receiver that consumes one message on every progress call, each call finding its FIFO
/// empty after it, still runs its pending sends: a call that returns right after its messages
/// leaves the periodic work to the next call, and the next call that consumes any does it.
#[test]
fn pending_sends_run_while_every_call_consumes_a_message() {
    let (_md, mut a, mut b, mut ab) = pair::<PosixTransport>();
    let mut ba = b
        .ep_create_connected(a.device_address(), a.iface_address())
        .unwrap();
    while ab.am_short(1, 0, &[]).unwrap() == Outcome::DONE {}
    ab.pending_add(PendingId(77)).unwrap();
    let mut sb = Sink::default();
    while b.progress(&mut sb) > 0 {}
    assert_eq!(sb.msgs.len() as u64, fifo::NELEMS);
    let mut sa = Sink::default();
    for round in 0..4u64 {
        assert_eq!(ba.am_short(2, round, &[]).unwrap(), Outcome::DONE);
        let n = a.progress(&mut sa);
        assert_eq!(sa.msgs.len() as u64, round + 1);
        assert_eq!(
            n,
            1 + usize::from(round == 1),
            "round {round}: the retry in the second"
        );
    }
    assert_eq!(sa.retries, vec![(ab.id(), 77)]);
}

#[test]
fn posix_backpressure_and_pending() {
    backpressure_and_pending::<PosixTransport>();
}
#[test]
fn sysv_backpressure_and_pending() {
    backpressure_and_pending::<SysvTransport>();
}

/// A region a peer reaches: `len` bytes allocated from `md`, their packed key, the key as a
/// peer unpacks it, and their address.
fn remote_region(md: &MmMd, len: usize) -> (MemHandle, Vec<u8>, RemoteKey, u64) {
    let target = md.mem_alloc(len).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let base = target.addr() as u64;
    (target, packed, rkey, base)
}

/// A put_bcopy into a region that ends with its segment packs straight into the peer's
/// memory, wherever it starts (what runs past the region lands in the mapping's scratch
/// tail, and the put fails); one that fits is whole. The pack may write all `max_bcopy`
/// bytes from a start 96 bytes before the region's end: 8 KiB past it, which without the
/// scratch tail would run off the mapping (a fault) or into whatever is mapped after it.
fn put_bcopy_packs_in_place<T: Transport<Md = MmMd, Iface = MmIface, Ep = MmEp>>() {
    let (md, _a, _b, mut ep) = pair::<T>();
    let (target, _, rkey, base) = remote_region(&md, 4096);
    let at = |off: u64| rkey.local_ptr(base + off, 1).unwrap() as usize;

    // A whole-region put, packed where it goes.
    let mut dst_at = 0;
    let n = ep
        .put_bcopy(
            |buf| {
                dst_at = buf.as_ptr() as usize;
                buf[..4096].copy_from_slice(&pattern(4096, 3));
                4096
            },
            base,
            &rkey,
        )
        .unwrap()
        .unwrap_done();
    assert_eq!((n, dst_at), (4096, at(0)), "packed in place");
    let mut v = vec![0u8; 4096];
    target.read(0, &mut v).unwrap();
    assert_eq!(v, pattern(4096, 3));

    // Near the end: still in place, the callback may write max_bcopy bytes.
    let n = ep
        .put_bcopy(
            |buf| {
                dst_at = buf.as_ptr() as usize;
                let len = buf.len();
                buf.fill(0xee);
                assert_eq!(len, crate::mm::iface::RMA_MAX_BCOPY);
                96
            },
            base + 4000,
            &rkey,
        )
        .unwrap()
        .unwrap_done();
    assert_eq!((n, dst_at), (96, at(4000)));
    target.read(0, &mut v).unwrap();
    assert_eq!(
        &v[..4000],
        &pattern(4096, 3)[..4000],
        "bytes before the put kept"
    );
    assert!(v[4000..].iter().all(|b| *b == 0xee));

    // A pack that writes all it was given and says it wrote past the region fails the put;
    // nothing before its start changes, and another allocation of the peer's stays as it was.
    let (other, _, _, _) = remote_region(&md, 4096);
    other.write(0, &pattern(4096, 5)).unwrap();
    let e = ep
        .put_bcopy(
            |buf| {
                buf.fill(0xab);
                200
            },
            base + 4000,
            &rkey,
        )
        .unwrap_err();
    assert!(matches!(e, Error::RemoteAccess(_)), "{e:?}");
    target.read(0, &mut v).unwrap();
    assert_eq!(
        &v[..4000],
        &pattern(4096, 3)[..4000],
        "bytes before the put kept"
    );
    let mut o = vec![0u8; 4096];
    other.read(0, &mut o).unwrap();
    assert_eq!(o, pattern(4096, 5), "another segment changed");
}

#[test]
fn posix_put_bcopy_packs_in_place() {
    put_bcopy_packs_in_place::<PosixTransport>();
}
#[test]
fn sysv_put_bcopy_packs_in_place() {
    put_bcopy_packs_in_place::<SysvTransport>();
}

fn rma_and_atomics<T: Transport<Md = MmMd, Iface = MmIface, Ep = MmEp>>() {
    let (md, _a, _b, mut ep) = pair::<T>();
    let (target, packed, rkey, base) = remote_region(&md, 4096);

    ep.put_short(b"hello", base + 100, &rkey)
        .unwrap()
        .unwrap_done();
    let mut out = [0u8; 5];
    target.read(100, &mut out).unwrap();
    assert_eq!(&out, b"hello");
    ep.put_bcopy(
        |buf| {
            buf[..3].copy_from_slice(b"xyz");
            3
        },
        base + 200,
        &rkey,
    )
    .unwrap()
    .unwrap_done();
    let mut got = [0u8; 3];
    ep.get_short(&mut got, base + 200, &rkey)
        .unwrap()
        .unwrap_done();
    assert_eq!(&got, b"xyz");
    let mut seen = Vec::new();
    ep.get_bcopy(5, base + 100, &rkey, CompletionId(0), &mut |d| {
        seen.extend_from_slice(d)
    })
    .unwrap()
    .unwrap_done();
    assert_eq!(seen, b"hello");
    let local = md.mem_alloc(64).unwrap();
    local.write(0, &pattern(64, 9)).unwrap();
    ep.put_zcopy(&[Iov::whole(&local)], base + 1024, &rkey, CompletionId(0))
        .unwrap()
        .unwrap_done();
    let back = md.mem_alloc(64).unwrap();
    ep.get_zcopy(&[Iov::whole(&back)], base + 1024, &rkey, CompletionId(0))
        .unwrap()
        .unwrap_done();
    let mut v = vec![0u8; 64];
    back.read(0, &mut v).unwrap();
    assert_eq!(v, pattern(64, 9));

    // Atomics, 64 and 32 bit, post and fetch.
    let a64 = base + 2048;
    ep.atomic64_post(AtomicOp::Add, 5, a64, &rkey)
        .unwrap()
        .unwrap_done();
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Add, 10, a64, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(5)
    );
    ep.atomic64_post(AtomicOp::Or, 0x100, a64, &rkey)
        .unwrap()
        .unwrap_done();
    ep.atomic64_post(AtomicOp::Xor, 0x1, a64, &rkey)
        .unwrap()
        .unwrap_done();
    ep.atomic64_post(AtomicOp::And, 0xffff, a64, &rkey)
        .unwrap()
        .unwrap_done();
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Swap, 7, a64, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done((15 | 0x100) ^ 1)
    );
    assert_eq!(
        ep.atomic_cswap64(7, 9, a64, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(7)
    );
    assert_eq!(
        ep.atomic_cswap64(7, 11, a64, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(9)
    );
    let a32 = base + 3000;
    ep.atomic32_post(AtomicOp::Add, 3, a32, &rkey)
        .unwrap()
        .unwrap_done();
    assert_eq!(
        ep.atomic32_fetch(AtomicOp::Xor, 1, a32, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(3)
    );
    assert_eq!(
        ep.atomic_cswap32(2, 40, a32, &rkey, CompletionId(0))
            .unwrap(),
        Outcome::Done(2)
    );
    let mut w = [0u8; 4];
    target.read(3000, &mut w).unwrap();
    assert_eq!(u32::from_le_bytes(w), 40);
    assert!(matches!(
        ep.atomic64_post(AtomicOp::Swap, 1, a64, &rkey),
        Err(Error::Unsupported(_))
    ));

    // Out of range and misaligned accesses are refused.
    for (addr, len) in [(base + 4090, 8usize), (base - 1, 1), (u64::MAX, 1)] {
        assert!(
            matches!(
                ep.put_short(&vec![0; len], addr, &rkey),
                Err(Error::RemoteAccess(_))
            ),
            "{addr:#x}+{len}"
        );
    }
    assert!(matches!(
        ep.atomic64_fetch(AtomicOp::Add, 1, base + 4092, &rkey, CompletionId(0)),
        Err(Error::RemoteAccess(_))
    ));
    assert!(matches!(
        ep.atomic64_post(AtomicOp::Add, 1, base + 3, &rkey),
        Err(Error::RemoteAccess(_))
    ));
    assert!(matches!(
        ep.put_short(&vec![0; crate::mm::iface::RMA_MAX_SHORT + 1], base, &rkey),
        Err(Error::MessageTooLong { .. })
    ));
    // Corrupt and truncated rkeys.
    assert!(matches!(md.rkey_unpack(&packed[..10]), Err(Error::Wire(_))));
    let mut bad = packed.clone();
    bad[1] = 9;
    assert!(matches!(md.rkey_unpack(&bad), Err(Error::Wire(_))));
}

#[test]
fn posix_rma_and_atomics() {
    rma_and_atomics::<PosixTransport>();
}
#[test]
fn sysv_rma_and_atomics() {
    rma_and_atomics::<SysvTransport>();
}

fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

fn event_fd_wakes_an_armed_receiver<T: Transport<Md = MmMd, Iface = MmIface, Ep = MmEp>>() {
    let (_md, _a, mut b, mut ep) = pair::<T>();
    let fd = b.event_fd().unwrap();
    // Sends complete at once: arming for send completions as well is accepted.
    b.event_arm(EventFlags::RECV | EventFlags::SEND_COMP)
        .unwrap();
    assert!(!readable(fd));
    ep.am_short(2, 1, &[]).unwrap().unwrap_done();
    assert!(readable(fd), "armed receiver was not woken");
    // A message is waiting: arming refuses.
    assert!(matches!(b.event_arm(EventFlags::RECV), Err(Error::Busy(_))));
    let mut s = Sink::default();
    b.progress(&mut s);
    assert_eq!(s.msgs.len(), 1);
    b.event_arm(EventFlags::RECV).unwrap();
    assert!(!readable(fd), "arming drains old wake-ups");
    // Not armed: the sender does not signal (no syscall on the fast path).
    b.progress(&mut s);
    ep.am_short(2, 2, &[]).unwrap().unwrap_done(); // consumes the armed flag
    b.progress(&mut s);
    let _ = b.event_arm(EventFlags::RECV);
    b.progress(&mut s);
    assert_eq!(s.msgs.len(), 2);
}

#[test]
fn posix_event_fd_wakes_an_armed_receiver() {
    event_fd_wakes_an_armed_receiver::<PosixTransport>();
}
#[test]
fn sysv_event_fd_wakes_an_armed_receiver() {
    event_fd_wakes_an_armed_receiver::<SysvTransport>();
}

#[test]
fn bad_addresses_are_typed_errors() {
    let md = PosixTransport::open_md(DEVICE).unwrap();
    let mut a = PosixTransport::open_iface(&md, &params()).unwrap();
    let smd = SysvTransport::open_md(DEVICE).unwrap();
    let s = SysvTransport::open_iface(&smd, &params()).unwrap();
    let dev = a.device_address().to_vec();
    let ia = a.iface_address().to_vec();
    assert!(matches!(
        a.ep_create_connected(&dev[..5], &ia),
        Err(Error::Wire(_))
    ));
    assert!(matches!(
        a.ep_create_connected(&dev, &ia[..ia.len() - 1]),
        Err(Error::Wire(_))
    ));
    // A sysv address given to a posix interface.
    assert!(matches!(
        a.ep_create_connected(&dev, s.iface_address()),
        Err(Error::Unreachable(_))
    ));
    assert!(a.is_reachable(&dev, Some(s.iface_address())).is_err());
    // Another host.
    let mut other = dev.clone();
    other[1] ^= 0xff;
    assert!(a
        .is_reachable(&other, None)
        .unwrap_err()
        .contains("same host"));
    assert!(matches!(
        a.ep_create_connected(&other, &ia),
        Err(Error::Unreachable(_))
    ));
    // A pid/fd pair that is not a FIFO.
    let mut bogus = wire::IfaceAddr::decode(&ia).unwrap();
    bogus.seg.id = 0;
    let mut b = Vec::new();
    bogus.encode(&mut b);
    assert!(a.ep_create_connected(&dev, &b).is_err());
    // Wrong device name.
    assert!(matches!(
        PosixTransport::open_md("eth0"),
        Err(Error::NoDevice(_))
    ));
    // mem_reg is local only: it works for zero-copy sources and tag receives, but has no
    // remote key, and REG (peers' put/get/atomics) is not advertised.
    let mut x = [0u8; 8];
    // SAFETY: the buffer outlives the registration.
    let h = unsafe { md.mem_reg(std::ptr::NonNull::new(x.as_mut_ptr()).unwrap(), 8) }.unwrap();
    assert_eq!(h.addr(), x.as_mut_ptr());
    assert!(matches!(
        md.rkey_pack(&h, &mut Vec::new()),
        Err(Error::InvalidParam(_))
    ));
    assert!(!md.attr().flags.contains(crate::caps::MdFlags::REG));
}

#[test]
fn registry_lists_posix_sysv_and_cma() {
    let res = crate::query_resources();
    for tl in ["posix", "sysv"] {
        assert!(
            res.iter()
                .any(|r| r.tl_name == tl && r.device.name == "memory"),
            "{tl} missing: {res:?}"
        );
    }
    let (md, iface) = crate::open("posix", "memory").unwrap();
    assert_eq!(md.name(), "posix");
    assert_eq!(iface.tl_name(), "posix");
}

#[test]
fn wake_addr_is_the_address_the_peer_bound() {
    for (pid, nonce) in [
        (1, 0),
        (4_000_000_000, u64::MAX),
        (12345, 0x0123_4567_89ab_cdef),
    ] {
        let a = wire::IfaceAddr {
            seg: wire::SegRef {
                kind: SegKind::Posix,
                pid,
                id: 7,
                len: fifo::SEG_LEN as u64,
            },
            nonce,
        };
        let (built, blen) = iface::wake_addr(&a);
        let (bound, len) =
            crate::unix_addr::abstract_addr(wire::IfaceAddr::socket_name(pid, nonce).as_bytes());
        assert_eq!(blen, len);
        assert_eq!(built.sun_family, bound.sun_family);
        assert_eq!(built.sun_path[..], bound.sun_path[..]);
    }
}

/// The resident size (kB) of this process's mapping that starts at `base`.
fn mapping_rss_kb(base: *const u8) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let start = format!("{:x}-", base as usize);
    let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
    assert!(lines.next().is_some(), "no mapping at {base:p}");
    let rss = lines
        .find_map(|l| l.strip_prefix("Rss:"))
        .expect("an Rss line");
    rss.trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// A sender's first messages (one the size of a worker address, one short) touch one page of
/// the receiver's FIFO in the sender's mapping: control block and first elements share it.
/// Attaching touches only that page even when the receiver has used many more (no
/// fault-around into pages the sender never writes); a bcopy message adds its buffer's page.
fn first_messages_touch_one_page<T: Transport<Md = MmMd, Iface = MmIface, Ep = MmEp>>() {
    let (md, _a, mut b, mut ep) = pair::<T>();
    let base = ep.shared._seg.base().as_ptr() as *const u8;
    assert_eq!(ep.am_short(1, 7, &[0x5a; 192]).unwrap(), Outcome::DONE);
    assert_eq!(ep.am_short(2, 8, &[]).unwrap(), Outcome::DONE);
    assert_eq!(mapping_rss_kb(base), 4, "first messages touch one page");

    // The receiver goes through a few pages of elements.
    let mut sink = Sink::default();
    for i in 0..4 * fifo::ELEMS_PER_PAGE {
        assert_eq!(ep.am_short(3, i as u64, &[1; 64]).unwrap(), Outcome::DONE);
        b.progress(&mut sink);
    }
    while b.progress(&mut sink) > 0 {}
    assert_eq!(sink.msgs.len(), 2 + 4 * fifo::ELEMS_PER_PAGE);
    let mut c = T::open_iface(&md, &params()).unwrap();
    let ep2 = c
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let base2 = ep2.shared._seg.base().as_ptr() as *const u8;
    assert_eq!(
        mapping_rss_kb(base2),
        4,
        "attaching maps the first page only"
    );

    let mut ep = ep;
    let r = ep.am_bcopy(4, |buf| {
        buf[..300].fill(1);
        300
    });
    assert_eq!(r.unwrap(), Outcome::Done(300));
    assert!(
        mapping_rss_kb(base) >= 8,
        "a bcopy message adds its buffer's page"
    );
}

#[test]
fn posix_first_messages_touch_one_page() {
    first_messages_touch_one_page::<PosixTransport>();
}
#[test]
fn sysv_first_messages_touch_one_page() {
    first_messages_touch_one_page::<SysvTransport>();
}

/// Takes every message; asks to defer the buffer messages that start with 0xdd.
#[derive(Default)]
struct Deferring {
    got: Vec<(u8, Vec<u8>)>,
    asked: usize,
}

impl EventSink for Deferring {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.got.push((id, data.to_vec()));
    }
    fn defer(&mut self, _id: u8, data: &[u8]) -> bool {
        self.asked += 1;
        data.first() == Some(&0xdd)
    }
    fn completion(&mut self, _comp: CompletionId, _result: ucs::Result<u64>) {
        panic!("shared memory never completes later");
    }
}

/// A deferred buffer message stays in the FIFO for the next progress call, in order; each
/// call takes at least one message (the first is never asked about), and inline messages are
/// never deferred.
#[test]
fn deferred_messages_wait_for_the_next_call() {
    let (_md, _a, mut b, mut ep) = pair::<PosixTransport>();
    let big = |first: u8| {
        let mut p = pattern(600, first);
        p[0] = first;
        p
    };
    let msgs = [big(1), big(0xdd), big(0xdd), big(2)];
    for m in &msgs {
        let r = ep.am_bcopy(7, |buf| {
            buf[..m.len()].copy_from_slice(m);
            m.len()
        });
        assert_eq!(r.unwrap(), Outcome::Done(m.len()));
    }
    assert_eq!(ep.am_short(8, 0xdd, b"inline").unwrap(), Outcome::DONE);
    let mut sink = Deferring::default();
    // Takes msgs[0], leaves msgs[1].
    assert_eq!(b.progress(&mut sink), 1);
    assert_eq!(sink.got, vec![(7, msgs[0].clone())]);
    // msgs[1] comes first now and is taken without asking; msgs[2] waits.
    assert_eq!(b.progress(&mut sink), 1);
    assert_eq!(sink.got.len(), 2);
    assert_eq!(sink.got[1], (7, msgs[1].clone()));
    // msgs[2], then msgs[3] (not deferred) and the inline message in the same call.
    assert_eq!(b.progress(&mut sink), 3);
    assert_eq!(sink.got.len(), 5);
    assert_eq!(sink.got[2], (7, msgs[2].clone()));
    assert_eq!(sink.got[3], (7, msgs[3].clone()));
    assert_eq!(sink.got[4].0, 8);
    assert_eq!(sink.asked, 3);
    assert_eq!(b.progress(&mut sink), 0);
}

/// Lends a message of id 7 when `lend_next` is set (and clears it: one a call, as ucp's inbox
/// holds one), takes every other as `am`; notes where the lent bytes are.
#[derive(Default)]
struct Lending {
    lend_next: bool,
    copied: Vec<Vec<u8>>,
    lent: Vec<(*const u8, usize)>,
}

impl EventSink for Lending {
    fn am(&mut self, _id: u8, data: &[u8]) {
        self.copied.push(data.to_vec());
    }
    fn lends(&self, id: u8) -> bool {
        id == 7
    }
    fn am_lend(&mut self, id: u8, data: &[u8]) -> bool {
        if !std::mem::take(&mut self.lend_next) {
            self.am(id, data);
            return false;
        }
        self.lent.push((data.as_ptr(), data.len()));
        true
    }
    fn completion(&mut self, _comp: CompletionId, _result: ucs::Result<u64>) {
        panic!("shared memory never completes later");
    }
}

impl Lending {
    /// The bytes of lent message `i`, read where they were lent.
    fn lent_bytes(&self, i: usize) -> Vec<u8> {
        let (p, len) = self.lent[i];
        // SAFETY: the transport keeps a lent message's bytes until its next progress call,
        // and the test reads them before it.
        unsafe { std::slice::from_raw_parts(p, len) }.to_vec()
    }
}

/// A lent message stays where it is until the next progress call, and the call goes on past
/// it: the messages behind it are taken in the same call (here as `am`), so a burst is
/// drained by one call.
#[test]
fn a_call_goes_on_past_a_lent_message() {
    let (_md, _a, mut b, mut ep) = pair::<PosixTransport>();
    for i in 0..3u64 {
        assert_eq!(ep.am_short(7, i, b"burst").unwrap(), Outcome::DONE);
    }
    let mut sink = Lending {
        lend_next: true,
        ..Default::default()
    };
    assert_eq!(b.progress(&mut sink), 3);
    assert_eq!(sink.lent.len(), 1);
    let lent = sink.lent_bytes(0);
    assert_eq!(
        (&lent[..8], &lent[8..]),
        (&0u64.to_le_bytes()[..], &b"burst"[..])
    );
    assert_eq!(sink.copied.len(), 2);
    assert_eq!(sink.copied[0][..8], 1u64.to_le_bytes());
    assert_eq!(sink.copied[1][..8], 2u64.to_le_bytes());
    // A lone message is lent too; the next call finds nothing.
    assert_eq!(ep.am_short(7, 3, b"lone").unwrap(), Outcome::DONE);
    sink.lend_next = true;
    assert_eq!(b.progress(&mut sink), 1);
    assert_eq!(&sink.lent_bytes(1)[8..], b"lone");
    assert_eq!(sink.copied.len(), 2);
    assert_eq!(b.progress(&mut sink), 0);
}

/// The messages from a lent one on are not released in its call, even when the call takes
/// enough to release a batch: the sender cannot reuse the lent element before the next call.
#[test]
fn a_lent_message_is_not_released_in_its_call() {
    let (_md, _a, mut b, mut ep) = pair::<PosixTransport>();
    let mut sent = 0u64;
    while ep.am_short(7, sent, b"fill").unwrap() == Outcome::DONE {
        sent += 1;
    }
    assert_eq!(sent, fifo::NELEMS);
    let mut sink = Lending::default();
    // Three calls without lending: the first RELEASE_BATCH positions are released on the way.
    let batch = fifo::RELEASE_BATCH;
    let mut taken = 0;
    while taken < batch + batch / 2 {
        taken += b.progress(&mut sink) as u64;
    }
    assert_eq!(taken, batch + batch / 2);
    // This call lends its first message and takes enough behind it for a batch.
    sink.lend_next = true;
    let n = b.progress(&mut sink) as u64;
    assert!(taken + n >= 2 * batch, "the call took {n} messages");
    // Room only for what was released before the lent message.
    let mut more = 0;
    while ep.am_short(7, 1000 + more, b"more").unwrap() == Outcome::DONE {
        more += 1;
    }
    assert_eq!(more, batch);
    let lent = sink.lent_bytes(0);
    assert_eq!(lent[..8], taken.to_le_bytes());
    assert_eq!(&lent[8..], b"fill");
}
