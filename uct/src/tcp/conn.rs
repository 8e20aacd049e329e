//! One tcp connection: its socket, send queue, receive buffer, outstanding requests and
//! state.

use super::iov::Segs;
use super::posted::TagRx;
use super::rxbuf::RxBuf;
use super::txq::TxQueue;
use super::wire::{AtomicReq, FrameHeader, Hello, Kind};
use super::IfaceAddr;
use crate::ep::{CompletionId, EpId, PendingId, TagRecvId};
use slab::Slab;
use socket2::Socket;
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, RawFd};
use ucs::async_ctx::Interest;
use ucs::{Error, Result};

/// Outstanding requests (get, fetching atomic, put_zcopy, flush) per connection.
pub(crate) const MAX_REQS: usize = 256;
/// `am.max_short` and `put.max_short`.
pub(crate) const MAX_SHORT: usize = 1024;
/// `max_bcopy` of AM, put and get.
pub(crate) const MAX_BCOPY: usize = 8192;
/// Largest user header of `am_zcopy`.
pub(crate) const AM_MAX_HDR: usize = 128;
/// Largest frame the send path copies: header, largest sub-header, bcopy payload.
pub(crate) const MAX_COPY_FRAME: usize = FrameHeader::LEN + AtomicReq::LEN + MAX_BCOPY;

/// A control frame sent before anything else on a connection, and how much of it has left.
pub(crate) struct Ctl {
    pub(crate) frame: [u8; FrameHeader::LEN + Hello::LEN],
    pub(crate) sent: usize,
}

/// An outstanding request waiting for the peer's response.
pub(crate) enum Req {
    /// put_zcopy waiting for its ack.
    PutZcopy { comp: CompletionId },
    /// get_zcopy: the destination.
    GetZcopy { segs: Segs, comp: CompletionId },
    /// get_bcopy.
    GetBcopy { len: usize, comp: CompletionId },
    /// Fetching atomic or cswap.
    Atomic { comp: CompletionId },
    /// Sender of `tag_rndv_zcopy`: the data, until the receiver's `TagGet` (or a cancel).
    TagRndv { segs: Segs, comp: CompletionId },
    /// Receiver of a matched tagged rendezvous: the posted buffer the `TagGet` fills.
    TagGet {
        segs: Segs,
        ctx: TagRecvId,
        tag: u64,
        /// Bytes asked for (the posted capacity, or less).
        want: usize,
        /// The message's real length.
        length: usize,
    },
    /// Flush of an endpoint (`comp`) or part of an interface flush.
    Flush {
        comp: Option<CompletionId>,
        iface_flush: Option<usize>,
        put_seq: u64,
    },
}

/// Connection states.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ConnState {
    /// `ep_create`d, `connect_to_ep` not called yet, peer not arrived.
    Idle,
    /// Passive side of connect-to-ep: waiting for the peer's connection.
    Waiting,
    /// Non-blocking connect in flight.
    Connecting,
    /// Connect-to-iface dial: connected, the hello is (being) sent, and operations queue
    /// until the acceptor's `HelloAck` (see `wire::Hello` for simultaneous connects).
    Handshake,
    /// Up.
    Connected,
    /// Closed, with the reason.
    /// (Boxed: the connection struct stays small.)
    Failed(Box<Error>),
}

/// One TCP connection (or a connect-to-ep endpoint waiting for one).
pub(crate) struct Conn {
    pub(crate) sock: Option<Socket>,
    pub(crate) state: ConnState,
    /// The endpoint owning it (None for accepted connections).
    pub(crate) ep: Option<EpId>,
    pub(crate) ep_alive: bool,
    pub(crate) conn_id: u64,
    pub(crate) peer_conn_id: u64,
    pub(crate) expect_hello: bool,
    pub(crate) peer: Option<SocketAddrV4>,
    pub(crate) tx: TxQueue,
    pub(crate) rx: RxBuf,
    pub(crate) reqs: Slab<Req>,
    pub(crate) pending: VecDeque<PendingId>,
    pub(crate) dispatching: bool,
    pub(crate) put_seq: u64,
    pub(crate) acked_seq: u64,
    /// A refused put or atomic, reported by the next flush (boxed: rare, and the connection
    /// struct stays small).
    pub(crate) deferred_err: Option<Box<Error>>,
    pub(crate) epoll_mask: Interest,
    pub(crate) rx_paused: bool,
    /// epoll reported the socket readable (or closed) since the last `recv`.
    pub(crate) readable: bool,
    /// The peer's interface address (from its hello, or the address we dialed): an endpoint
    /// to that interface reuses this connection when no endpoint owns it.
    pub(crate) peer_iface: Option<IfaceAddr>,
    /// Tag offload: where the tagged eager message being received goes.
    pub(crate) tag_rx: TagRx,
    /// Tag offload: staging for a large unexpected tagged eager message (kept for reuse).
    pub(crate) tag_stage: Vec<u8>,
    /// Connect-to-iface: the connection sequence number (ours if `dialed`, else the
    /// connector's from its hello).
    pub(crate) seq: u64,
    /// A connect-to-iface connection this side dialed.
    pub(crate) dialed: bool,
    /// An accepted connection that lost a simultaneous connect: never acknowledged, never
    /// used, closed when the peer closes it.
    pub(crate) rejected: bool,
    /// The hello of a connect-to-iface dial, sent before anything else; dropped once it has
    /// left (boxed: the connection struct stays small).
    pub(crate) ctl: Option<Box<Ctl>>,
    /// The socket refused bytes: the send queue waits for epoll to report it writable
    /// instead of retrying `sendmsg` at every call (each retry takes the socket lock the
    /// peer's incoming data and ACKs need; on loopback that halves large-message bandwidth).
    pub(crate) wait_out: bool,
    /// The next `recv` waits for epoll's "readable" instead of polling the socket at every
    /// call (a `recv` takes the socket lock the sender's incoming segments need;
    /// `epoll_wait` does not). Set in the middle of a large payload when the socket had no
    /// more bytes, and after [`GATE_AFTER`] empty polls in a row between frames; a burst
    /// of small messages (a ping-pong) is polled directly, which is what its latency wants.
    pub(crate) rx_gated: bool,
    /// `rx_gated` after empty polls (not in a payload): epoll is asked for it on one progress
    /// call in a few, not at every call.
    pub(crate) gate_idle: bool,
    /// Direct polls in a row that found nothing.
    pub(crate) empty_polls: u32,
    /// Our endpoint on this connection was destroyed and we sent `Detach` (or queued it): no
    /// later endpoint of ours takes the connection over.
    pub(crate) detached: bool,
    /// The peer's `Detach` arrived: no endpoint of the peer uses the connection any more.
    pub(crate) peer_detached: bool,
}

impl Conn {
    pub(super) fn new(state: ConnState, ep: Option<EpId>) -> Self {
        Conn {
            sock: None,
            state,
            ep,
            ep_alive: ep.is_some(),
            conn_id: 0,
            peer_conn_id: 0,
            expect_hello: false,
            peer: None,
            tx: TxQueue::new(),
            rx: RxBuf::new(),
            reqs: Slab::new(),
            pending: VecDeque::new(),
            dispatching: false,
            put_seq: 0,
            acked_seq: 0,
            deferred_err: None,
            epoll_mask: Interest::empty(),
            rx_paused: false,
            readable: false,
            peer_iface: None,
            tag_rx: TagRx::Idle,
            tag_stage: Vec::new(),
            seq: 0,
            dialed: false,
            rejected: false,
            ctl: None,
            wait_out: false,
            rx_gated: false,
            gate_idle: false,
            empty_polls: 0,
            detached: false,
            peer_detached: false,
        }
    }
    pub(crate) fn fd(&self) -> RawFd {
        self.sock.as_ref().map_or(-1, |s| s.as_raw_fd())
    }
    #[inline]
    pub(crate) fn is_connected(&self) -> bool {
        matches!(self.state, ConnState::Connected)
    }
    /// Nothing queued or outstanding.
    pub(crate) fn is_idle(&self) -> bool {
        self.tx.is_empty()
            && self.reqs.is_empty()
            && self.put_seq == self.acked_seq
            && self.deferred_err.is_none()
    }
    /// True when a progress call has nothing to do on this connection: it is up, nothing is
    /// queued to send or waiting to be dispatched, no pending request waits, and no `recv`
    /// is due (epoll did not report it readable, and this call does not poll it directly).
    #[inline]
    pub(crate) fn nothing_to_do(&self, direct: bool) -> bool {
        matches!(self.state, ConnState::Connected)
            && self.tx.is_empty()
            && self.pending.is_empty()
            && !self.readable
            && (!direct || self.rx_gated)
            && !self.rx_paused
            && !self.rx.has_data()
            && !self.rx.eof
    }
    /// True when neither side has an endpoint on this connection any more (ours was
    /// destroyed or never existed, and the peer detached) and nothing is left to send,
    /// receive or wait for: it can close.
    pub(crate) fn unused(&self) -> bool {
        self.peer_detached
            && self.ep.is_none()
            && self.is_connected()
            && self.tx.is_empty()
            && self.reqs.is_empty()
            && self.pending.is_empty()
            && !self.rx.has_data()
    }
    /// Reads the peer's `Detach` when it is the only thing the socket holds (a peek while no
    /// frame is half received; the frame is then consumed) and gives true. Used when our
    /// endpoint is destroyed after the peer's: the connection closes right then, instead of
    /// waiting for a progress call to read the `Detach` (a hub that stops progressing after
    /// closing its endpoints keeps no sockets of peers that left).
    pub(crate) fn take_waiting_detach(&mut self) -> bool {
        if self.peer_detached || self.rx.has_data() || self.rx.eof || !self.rx.reasm.at_boundary() {
            return false;
        }
        let want = FrameHeader::new(Kind::Detach, 0, 0).to_bytes();
        let mut b = [0u8; FrameHeader::LEN + 1];
        let fd = self.fd();
        // SAFETY: `b` is a writable buffer of `b.len()` bytes.
        let n = unsafe {
            libc::recv(
                fd,
                b.as_mut_ptr() as *mut libc::c_void,
                b.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n != FrameHeader::LEN as isize || b[..FrameHeader::LEN] != want {
            return false;
        }
        // SAFETY: as above; the peek showed these bytes are there.
        let n = unsafe {
            libc::recv(
                fd,
                b.as_mut_ptr() as *mut libc::c_void,
                FrameHeader::LEN,
                libc::MSG_DONTWAIT,
            )
        };
        if n != FrameHeader::LEN as isize {
            return false;
        }
        self.peer_detached = true;
        true
    }
    /// Err if the connection failed.
    pub(crate) fn check_usable(&self) -> Result<()> {
        match &self.state {
            ConnState::Failed(e) => Err(e.as_ref().clone()),
            ConnState::Idle => Err(Error::InvalidParam(
                "tcp endpoint is not connected: call connect_to_ep first".into(),
            )),
            _ => Ok(()),
        }
    }
    /// True when any operation would find room right now: its queues have space (and, with
    /// `connect_backpressure`, the connection is up: until then operations wait as pending
    /// requests).
    pub(crate) fn has_room(&self, connect_backpressure: bool) -> bool {
        (self.is_connected() || !connect_backpressure)
            && self.tx.fits(MAX_COPY_FRAME, 2)
            && self.reqs.len() < MAX_REQS
    }
}
