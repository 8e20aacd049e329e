//! The common receive: a connection polled with a direct `recv` whose bytes start with whole
//! active messages. They go to the sink straight from the receive buffer, without the general
//! dispatch's reassembler, per-frame set-up check and settling (see `progress.rs`), which take
//! any other bytes (the rest of the buffer after the messages, or everything when the first
//! frame is not a whole active message).

use super::conn::ConnState;
use super::inner::Inner;
use super::rxbuf::RxBuf;
use super::wire::FrameHeader;
use super::TcpIface;
use crate::iface::EventSink;
use std::mem;

/// A connection's received bytes, taken out of it for the dispatch (see [`Inner::rx_take`]).
pub(super) struct Taken {
    pub(super) rxb: RxBuf,
    /// A tagged eager message finished in its destination (the caller reports it).
    pub(super) tag_fin: bool,
    /// The connection is set up (see `Inner::setup_frame`).
    pub(super) established: bool,
}

impl Taken {
    /// Bytes of a set-up connection, no tagged message finished.
    pub(super) fn new(rxb: RxBuf) -> Self {
        Taken {
            rxb,
            tag_fin: false,
            established: true,
        }
    }
}

/// What [`Inner::rx_start`] received.
pub(super) enum RxStart {
    /// Nothing to dispatch.
    Nothing,
    /// Whole active messages lead the bytes `head..tail` of `buf` (the receive buffer, taken
    /// out of the connection so the sink may call endpoint operations meanwhile).
    Am {
        buf: Box<[u8]>,
        head: usize,
        tail: usize,
    },
    /// Anything else, for the general dispatch.
    General(Taken),
}

impl Inner {
    /// Receives what connection `key` (connected, its send queue flushed) has. A set-up
    /// connection at a frame boundary with nothing buffered, due a `recv` (polled directly,
    /// or reported readable by epoll), takes the short way: one `recv` into a lent buffer and
    /// a look at the first frame. Anything else goes through [`Inner::rx_take`].
    #[inline]
    pub(super) fn rx_start(&mut self, key: usize, direct: bool) -> RxStart {
        let c = &mut self.conns[key];
        let short = (c.readable || direct && !c.rx_gated)
            && c.state == ConnState::Connected
            && !c.rx_paused
            && !c.expect_hello
            && !c.rejected
            && !c.rx.has_data()
            && !c.rx.eof
            && !c.rx.drained
            && c.rx.reasm.at_boundary();
        if !short {
            return match self.rx_take(key, direct) {
                Some(t) => RxStart::General(t),
                None => RxStart::Nothing,
            };
        }
        c.readable = false;
        let fd = c.fd();
        self.rx_pool.lend(&mut c.rx);
        if let Err(e) = c.rx.recv(fd) {
            self.fail(key, e, false);
            return RxStart::Nothing;
        }
        if direct {
            self.count_poll(key, false);
        }
        let c = &mut self.conns[key];
        let rx = &mut c.rx;
        if !rx.has_data() {
            if rx.eof {
                return RxStart::General(Taken::new(mem::take(rx)));
            }
            self.rx_pool.take_back(rx);
            return RxStart::Nothing;
        }
        let bytes = &rx.buf[rx.head..rx.tail];
        match FrameHeader::decode_am(bytes) {
            Some(h) if FrameHeader::LEN + h.length as usize <= bytes.len() => {
                // The connection holds nothing while the bytes are out (as after `rx_take`).
                let (head, tail) = (mem::take(&mut rx.head), mem::take(&mut rx.tail));
                RxStart::Am {
                    buf: mem::take(&mut rx.buf),
                    head,
                    tail,
                }
            }
            _ => RxStart::General(Taken::new(mem::take(rx))),
        }
    }
}

impl TcpIface {
    /// Gives the whole active messages at the start of `buf[head..tail]` (connection `key`'s
    /// receive buffer, see [`RxStart::Am`]) to the sink, then puts the buffer back: into the
    /// interface's pool when everything was consumed, else back into the connection for the
    /// general dispatch of the rest. Gives the number of events.
    pub(super) fn rx_am<S: EventSink>(
        &mut self,
        key: usize,
        buf: Box<[u8]>,
        mut head: usize,
        tail: usize,
        sink: &mut S,
    ) -> usize {
        let mut count = 0;
        while let Some(h) = FrameHeader::decode_am(&buf[head..tail]) {
            let end = head + FrameHeader::LEN + h.length as usize;
            if end > tail {
                break;
            }
            sink.am(h.am_id, &buf[head + FrameHeader::LEN..end]);
            count += 1;
            head = end;
        }
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let Some(c) = inner.conns.get_mut(key) else {
            return count;
        };
        c.rx.buf = buf;
        c.rx.head = head;
        c.rx.tail = tail;
        if head < tail {
            // Other frames (or a partial one) follow: the general dispatch takes them now.
            let t = Taken::new(mem::take(&mut c.rx));
            drop(g);
            return count + self.rx(key, t, sink);
        }
        if matches!(c.state, ConnState::Failed(_)) {
            inner.rx_pool.release(&mut c.rx);
        } else {
            inner.rx_pool.take_back(&mut c.rx);
        }
        // What the sink queued goes out now (as after the general dispatch).
        if let Err(e) = inner.flush_tx(key) {
            inner.fail(key, e, false);
        }
        inner.close_if_unused(key);
        count
    }
}
