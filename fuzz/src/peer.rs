//! A hand-rolled ucp peer: a bare uct interface that speaks ucp's wire format
//! ([`ucp::wire`]) to a real [`Worker`], so a test can send any control message with any
//! request id, as a peer that lies would. Used by the attack tests
//! (`tests/tests/ucp_forged_ids.rs`) and the stateful fuzzer (`forged.rs` beside this file).
//!
//! A [`RawPeer`] owns one uct interface (posix or tcp) and an endpoint to the worker's
//! interface of the same transport. Its identity is a worker uuid it makes up; the worker
//! learns it from [`RawPeer::address`] (`Worker::ep_create`), and every message the peer sends
//! starts with it. [`RawPeer::rename`] takes a fresh uuid: a new peer as far as the worker can
//! tell, on the same interface.

use std::time::{Duration, Instant};
use ucp::wire::{am_id, FragHdr, RemoteBuf, RtrHdr, RtrMode, RtsHdr, PREFIX_LEN};
use ucp::{Context, ContextParams, Features, TlAddress, UcpConfig, Worker, WorkerAddress};
use uct::{
    AnyEp, AnyIface, CompletionId, Endpoint as _, EventSink, Iface as _, Outcome, RndvRemote,
};

/// How long a helper waits for something the worker must do before it gives up (a watchdog
/// against hangs, not a timing assertion).
pub const WATCHDOG: Duration = Duration::from_secs(30);

/// The device a transport is tested on: `lo` for tcp, the first device otherwise.
pub fn device(tl: &str) -> String {
    if tl == "tcp" {
        return "lo".into();
    }
    uct::query_resources()
        .into_iter()
        .find(|r| r.tl_name == tl)
        .map(|r| r.device.name)
        .unwrap_or_else(|| panic!("transport {tl} has no device here"))
}

/// A worker on transport `tl` alone (tcp on `lo`), with a low rendezvous threshold
/// (4 KiB), no keepalive (the raw peers send none) and tag offload as configured.
pub fn worker(tl: &str) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::AM | Features::RMA,
        config: Some(UcpConfig {
            tls: vec![tl.into()],
            net_devices: if tl == "tcp" {
                vec!["lo".into()]
            } else {
                vec![]
            },
            rndv_thresh: Some(4096),
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .expect("context");
    Worker::new(&ctx).expect("worker")
}

/// Messages the raw peer received: `(ucp AM id, whole message with the uuid prefix)`.
#[derive(Default)]
struct Inbox(Vec<(u8, Vec<u8>)>);

impl EventSink for Inbox {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.0.push((id, data.to_vec()));
    }
    fn completion(&mut self, _comp: CompletionId, _result: uct::Result<u64>) {}
    fn tag_unexp_rndv(&mut self, _tag: u64, rndv: RndvRemote<'_>) {
        // A rendezvous by tag offload: its header is the sender's whole RTS message.
        self.0.push((am_id::RTS, rndv.header.to_vec()));
    }
    fn tag_unexp_eager(&mut self, tag: u64, imm: u64, data: &[u8]) {
        // A tagged eager frame (imm: the sender's uuid): recorded as the eager message.
        let mut m = imm.to_le_bytes().to_vec();
        m.extend_from_slice(&tag.to_le_bytes());
        m.extend_from_slice(data);
        self.0.push((am_id::EAGER_ONLY, m));
    }
}

/// A bare uct interface speaking ucp to one worker.
pub struct RawPeer {
    /// The worker uuid this peer claims.
    pub uuid: u64,
    iface: AnyIface,
    ep: AnyEp,
    /// The worker's transport address (to reconnect).
    target: TlAddress,
    inbox: Inbox,
}

impl RawPeer {
    /// Opens an interface of `tl` and connects it to `w`'s interface of the same transport.
    pub fn new(tl: &str, w: &Worker) -> RawPeer {
        let (_md, mut iface) = uct::open(tl, &device(tl)).expect("open the raw peer's interface");
        let wa = WorkerAddress::decode(w.address()).expect("worker address");
        let target = wa
            .tls
            .into_iter()
            .find(|t| t.tl_name == tl)
            .expect("the worker has an interface of the transport");
        let ep = iface
            .ep_create_connected(&target.device_addr, &target.iface_addr)
            .expect("connect the raw peer to the worker");
        RawPeer {
            uuid: ucs::random::secret_u64(),
            iface,
            ep,
            target,
            inbox: Inbox::default(),
        }
    }

    /// This peer's packed worker address (for `Worker::ep_create`).
    pub fn address(&self) -> Vec<u8> {
        WorkerAddress {
            uuid: self.uuid,
            tls: vec![TlAddress {
                tl_name: self.iface.tl_name().into(),
                device_addr: self.iface.device_address().to_vec(),
                iface_addr: self.iface.iface_address().to_vec(),
            }],
        }
        .to_bytes()
        .expect("pack the raw peer's address")
    }

    /// Takes a fresh identity (a new uuid) and a fresh connection to the worker.
    pub fn rename(&mut self) {
        self.uuid = ucs::random::secret_u64();
        if let Ok(ep) = self
            .iface
            .ep_create_connected(&self.target.device_addr, &self.target.iface_addr)
        {
            self.ep = ep;
        }
        self.inbox.0.clear();
    }

    /// Drops what was received and not taken.
    pub fn clear(&mut self) {
        self.poll();
        self.inbox.0.clear();
    }

    /// Largest message body (after the uuid prefix) one active message carries.
    pub fn max_body(&self) -> usize {
        self.iface.attr().am.max_bcopy - PREFIX_LEN
    }

    /// Sends ucp message `id` with `body` (the uuid prefix is added), progressing the worker
    /// while the transport pushes back. False when the transport refused it (endpoint failed).
    pub fn send(&mut self, w: &mut Worker, id: u8, body: &[u8]) -> bool {
        let uuid = self.uuid.to_le_bytes();
        let start = Instant::now();
        loop {
            let r = self.ep.am_bcopy(id, |b: &mut [u8]| {
                let n = (PREFIX_LEN + body.len()).min(b.len());
                b[..PREFIX_LEN].copy_from_slice(&uuid);
                b[PREFIX_LEN..n].copy_from_slice(&body[..n - PREFIX_LEN]);
                n
            });
            match r {
                Ok(Outcome::NoResource) => {
                    assert!(start.elapsed() < WATCHDOG, "raw peer send stuck");
                    w.progress();
                    self.poll();
                }
                Ok(_) => return true,
                Err(_) => return false,
            }
        }
    }

    /// Progresses this peer's interface, keeping what arrives.
    pub fn poll(&mut self) {
        self.iface.progress(&mut self.inbox);
    }

    /// Takes the received messages of `id` addressed by the worker: their bodies (after the
    /// uuid prefix).
    pub fn take(&mut self, id: u8) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.inbox.0.retain(|(i, m)| {
            if *i == id && m.len() >= PREFIX_LEN {
                out.push(m[PREFIX_LEN..].to_vec());
                false
            } else {
                true
            }
        });
        out
    }

    /// Progresses `w` and this peer until a message `id` arrives; gives its body.
    pub fn wait_for(&mut self, w: &mut Worker, id: u8) -> Vec<u8> {
        let start = Instant::now();
        loop {
            w.progress();
            self.poll();
            if let Some(m) = self.take(id).into_iter().next() {
                return m;
            }
            assert!(
                start.elapsed() < WATCHDOG,
                "no message {id} from the worker within the watchdog"
            );
        }
    }

    /// Sends a rendezvous request (RTS) without a remote key: the worker answers by RTR.
    pub fn send_rts(&mut self, w: &mut Worker, tag: u64, sreq: u64, len: usize) -> bool {
        let mut body = Vec::new();
        RtsHdr {
            tag,
            sreq,
            len: len as u64,
            buf: RemoteBuf {
                addr: 0,
                tl: "",
                rkey: &[],
            },
        }
        .encode(&mut body);
        self.send(w, am_id::RTS, &body)
    }

    /// Answers an RTS of the worker (send request `sreq`) with a pipelined RTR naming our
    /// receive `rreq`: the worker then sends RNDV_DATA fragments.
    pub fn send_rtr_pipeline(&mut self, w: &mut Worker, sreq: u64, rreq: u64) -> bool {
        let mut body = Vec::new();
        RtrHdr {
            sreq,
            rreq,
            mode: RtrMode::AmPipeline,
            buf: RemoteBuf {
                addr: 0,
                tl: "",
                rkey: &[],
            },
        }
        .encode(&mut body);
        self.send(w, am_id::RTR, &body)
    }

    /// Sends `data` to the worker's receive `rreq` as RNDV_DATA fragments.
    pub fn send_rndv_data(&mut self, w: &mut Worker, rreq: u64, data: &[u8]) -> bool {
        let frag = self.max_body() - FragHdr::LEN;
        let mut off = 0;
        while off < data.len() {
            let n = frag.min(data.len() - off);
            let mut body = FragHdr {
                id: rreq,
                offset: off as u64,
            }
            .encode()
            .to_vec();
            body.extend_from_slice(&data[off..off + n]);
            if !self.send(w, am_id::RNDV_DATA, &body) {
                return false;
            }
            off += n;
        }
        true
    }

    /// Collects the worker's RNDV_DATA fragments for our receive `rreq` until `len` bytes
    /// arrived; gives the reassembled message.
    pub fn recv_rndv_data(&mut self, w: &mut Worker, rreq: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut got = 0;
        let start = Instant::now();
        while got < len {
            w.progress();
            self.poll();
            for m in self.take(am_id::RNDV_DATA) {
                let h = FragHdr::decode(&m).expect("fragment header");
                assert_eq!(h.id, rreq, "fragment for another receive");
                let d = &m[FragHdr::LEN..];
                let off = h.offset as usize;
                out[off..off + d.len()].copy_from_slice(d);
                got += d.len();
            }
            assert!(start.elapsed() < WATCHDOG, "rendezvous data stuck at {got}");
        }
        out
    }
}

/// A message body of `len` bytes with a recognisable pattern.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}
