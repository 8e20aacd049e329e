//! The peer process of the shared-memory multi-process tests (tests/tests/shm_*.rs).
//!
//! `shm_peer <posix|sysv>`: opens an interface of that transport on device `memory`, allocates a
//! 4 KiB shared region filled with `i * 7 + 1`, registers a 4 KiB heap buffer (filled with
//! `i * 3 + 5`) with cma when cma is available, and prints one line:
//! `ADDR <dev> <iface> <rkey> <base> <cma-iface|-> <cma-rkey|-> <cma-base|0>` (hex blobs).
//! It then reads `CONNECT <dev> <iface>` from stdin, connects back, and serves active messages:
//! - id 1: echo the message back on id 2;
//! - id 4: payload `offset u32, len u32`: reply on id 5 with that range of the shared region;
//! - id 6: the same for the cma buffer;
//! - id 3: exit 0.
//!
//! `shm_peer claim-and-die <iface>` instead claims an element in that FIFO and dies without
//! publishing it. A watchdog alarm ends it after 120 s whatever happens.

use std::io::{BufRead, Write};
use ucs::testing::{hex, unhex};
use uct::{CompletionId, Endpoint, EpId, EventSink, Iface, MemoryDomain};

#[derive(Default)]
struct Inbox(Vec<(u8, Vec<u8>)>);

impl EventSink for Inbox {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.0.push((id, data.to_vec()));
    }
    fn completion(&mut self, _comp: CompletionId, _result: uct::Result<u64>) {}
    fn ep_error(&mut self, ep: EpId, err: uct::Error) {
        eprintln!("shm_peer: endpoint {ep:?} failed: {err}");
        std::process::exit(3);
    }
}

/// Sends on `id`, progressing (into `inbox`, so nothing received meanwhile is lost) while the
/// parent's FIFO is full.
fn send_bcopy(
    iface: &mut uct::AnyIface,
    ep: &mut uct::AnyEp,
    inbox: &mut Inbox,
    id: u8,
    data: &[u8],
) {
    loop {
        let r = ep
            .am_bcopy(id, |buf| {
                buf[..data.len()].copy_from_slice(data);
                data.len()
            })
            .expect("am_bcopy");
        if r.is_done() {
            return;
        }
        iface.progress(inbox);
    }
}

fn range(data: &[u8]) -> (usize, usize) {
    let off = u32::from_le_bytes(data[0..4].try_into().expect("4")) as usize;
    let len = u32::from_le_bytes(data[4..8].try_into().expect("4")) as usize;
    (off, len)
}

/// `shm_peer claim-and-die <iface>`: maps the FIFO of the interface address `iface`, claims an
/// element, stamps it and dies without publishing it: a sender killed at the worst moment.
fn claim_and_die(iface_addr: &str) -> ! {
    use uct::mm::{fifo::FifoPtrs, segment::Segment, wire::IfaceAddr};
    let a = IfaceAddr::decode(&unhex(iface_addr)).expect("interface address");
    let seg = Segment::attach_fifo(a.seg).expect("attach the FIFO");
    // SAFETY: attach mapped the whole FIFO segment, which stays mapped until we die.
    let fifo = unsafe { FifoPtrs::new(seg.base().as_ptr()) };
    fifo.validate(a.seg.pid).expect("a rucx FIFO");
    let mut tail = 0;
    let c = fifo.claim(&mut tail).expect("room in the FIFO");
    fifo.stamp(c.pos, std::process::id());
    println!("CLAIMED {}", c.pos);
    std::io::stdout().flush().unwrap();
    // SAFETY: ends the process at once, like a crash, without publishing the claim.
    unsafe { libc::_exit(9) }
}

fn main() {
    // SAFETY: alarm only schedules SIGALRM, whose default action ends this process.
    unsafe { libc::alarm(120) };
    let tl = std::env::args()
        .nth(1)
        .expect("usage: shm_peer <posix|sysv|claim-and-die>");
    if tl == "claim-and-die" {
        claim_and_die(&std::env::args().nth(2).expect("interface address"));
    }
    let (md, mut iface) = uct::open(&tl, "memory").expect("open transport");
    let region = md.mem_alloc(4096).expect("mem_alloc");
    for i in 0..4096 {
        region
            .write(i, &[(i as u8).wrapping_mul(7).wrapping_add(1)])
            .unwrap();
    }
    let mut rkey = Vec::new();
    md.rkey_pack(&region, &mut rkey).expect("rkey_pack");

    let mut cma_buf: Vec<u8> = (0..4096)
        .map(|i| (i as u8).wrapping_mul(3).wrapping_add(5))
        .collect();
    let cma = uct::open("cma", "memory").ok().map(|(cmd, ci)| {
        // SAFETY: cma_buf lives until the end of main, after the handle is dropped.
        let h = unsafe { cmd.mem_reg(std::ptr::NonNull::new(cma_buf.as_mut_ptr()).unwrap(), 4096) }
            .expect("cma mem_reg");
        let mut k = Vec::new();
        cmd.rkey_pack(&h, &mut k).expect("cma rkey_pack");
        (cmd, ci, h, k)
    });
    let (cma_iface, cma_rkey, cma_base) = match &cma {
        Some((_, ci, h, k)) => (hex(ci.iface_address()), hex(k), h.addr() as u64),
        None => ("-".into(), "-".into(), 0),
    };
    println!(
        "ADDR {} {} {} {} {} {} {}",
        hex(iface.device_address()),
        hex(iface.iface_address()),
        hex(&rkey),
        region.addr() as u64,
        cma_iface,
        cma_rkey,
        cma_base
    );
    std::io::stdout().flush().unwrap();

    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("stdin");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words.first(),
        Some(&"CONNECT"),
        "expected CONNECT, got {line:?}"
    );
    let mut ep = iface
        .ep_create_connected(&unhex(words[1]), &unhex(words[2]))
        .expect("connect back");

    let mut inbox = Inbox::default();
    loop {
        iface.progress(&mut inbox);
        while !inbox.0.is_empty() {
            let (id, data) = inbox.0.remove(0);
            match id {
                1 => send_bcopy(&mut iface, &mut ep, &mut inbox, 2, &data),
                3 => {
                    let _ = ep.flush(CompletionId(0));
                    std::process::exit(0);
                }
                4 => {
                    let (off, len) = range(&data);
                    let mut out = vec![0u8; len];
                    region.read(off, &mut out).expect("range inside region");
                    send_bcopy(&mut iface, &mut ep, &mut inbox, 5, &out);
                }
                6 => {
                    let (off, len) = range(&data);
                    let out = match &cma {
                        Some((_, _, h, _)) => {
                            let mut out = vec![0u8; len];
                            h.read(off, &mut out).expect("range inside cma buffer");
                            out
                        }
                        None => Vec::new(),
                    };
                    send_bcopy(&mut iface, &mut ep, &mut inbox, 5, &out);
                }
                other => eprintln!("shm_peer: unexpected AM id {other}"),
            }
        }
        // Sleep on the event fd when idle, with no timeout: a lost wake-up hangs the test (and
        // its watchdog fails it), so this checks cross-process wake-ups.
        if iface.event_arm(uct::EventFlags::RECV).is_ok() {
            let mut p = libc::pollfd {
                fd: iface.event_fd().expect("shared memory has an event fd"),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, -1) };
        }
    }
}
