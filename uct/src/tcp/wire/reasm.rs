//! The stream reassembler: bytes split anywhere in, [`RxEvent`]s out (pure, no I/O).

use super::*;

/// A piece of a streamed payload (`Put` or `GetResp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Offset of `data` inside the frame's payload.
    pub offset: u64,
    /// Total payload length of the frame.
    pub total: u64,
    /// The bytes.
    pub data: &'a [u8],
    /// True on the frame's last chunk (also for an empty payload).
    pub last: bool,
}

/// What the reassembler produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxEvent<'a> {
    /// A hello frame.
    Hello(Hello),
    /// A hello acknowledgement.
    HelloAck(HelloAck),
    /// A whole active message.
    Am {
        /// AM id.
        id: u8,
        /// AM bytes.
        data: &'a [u8],
    },
    /// Put payload bytes.
    Put(PutHdr, Chunk<'a>),
    /// A put acknowledgement.
    PutAck(Ack),
    /// A get request.
    GetReq(GetReq),
    /// Get response bytes.
    GetResp(Ack, Chunk<'a>),
    /// Tagged eager bytes; a streamed frame starts with an empty chunk at offset 0.
    TagEager(TagHdr, Chunk<'a>),
    /// A tagged rendezvous with its user header.
    TagRndv(TagRndvHdr, &'a [u8]),
    /// A request for the data of a tagged rendezvous (`key` is the op id).
    TagGet(GetReq),
    /// An atomic request.
    AtomicReq(AtomicReq),
    /// An atomic response.
    AtomicResp(AtomicResp),
    /// A flush request.
    FlushReq(FlushReq),
    /// A flush acknowledgement.
    FlushAck(Ack),
    /// The peer's endpoint on the connection is gone (see [`Kind::Detach`]).
    Detach,
}

/// The frame whose payload is being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSub {
    /// A large put.
    Put(PutHdr),
    /// A large get response.
    GetResp(Ack),
    /// A large tagged eager message.
    TagEager(TagHdr),
}

/// Where a streamed payload stands (see [`Reassembler::streaming`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPos {
    /// The frame.
    pub sub: StreamSub,
    /// Payload bytes consumed so far.
    pub done: u64,
    /// Payload length.
    pub total: u64,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Header,
    Stream {
        sub: StreamSub,
        total: u64,
        done: u64,
    },
}

/// Turns a byte stream into [`RxEvent`]s. Pure: the caller owns the bytes and does the I/O.
#[derive(Debug, Clone)]
pub struct Reassembler {
    state: State,
}

impl Default for Reassembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Reassembler {
    /// At a frame boundary.
    pub fn new() -> Self {
        Reassembler {
            state: State::Header,
        }
    }

    /// True between frames (an EOF here is clean; elsewhere it cuts a frame).
    pub fn at_boundary(&self) -> bool {
        matches!(self.state, State::Header)
    }

    /// The large payload being streamed, if any. A caller that knows the payload's
    /// destination may read the next bytes straight into it (no intermediate buffer) and
    /// report them with [`Reassembler::advance_stream`] instead of passing them to `next`.
    pub fn streaming(&self) -> Option<StreamPos> {
        match self.state {
            State::Stream { sub, total, done } => Some(StreamPos { sub, done, total }),
            State::Header => None,
        }
    }

    /// Consumes `n` payload bytes the caller placed itself (at most the remaining ones).
    /// Gives true when that finished the frame.
    pub fn advance_stream(&mut self, n: u64) -> bool {
        if let State::Stream { sub, total, done } = self.state {
            let done = (done + n).min(total);
            if done == total {
                self.state = State::Header;
                return true;
            }
            self.state = State::Stream { sub, total, done };
        }
        false
    }

    /// Decodes from the start of `input` (the bytes not consumed so far). Gives the number of
    /// bytes consumed and maybe an event borrowing from `input`. `(0, None)` means more bytes
    /// are needed (at most [`MIN_RX_BUFFER`] in total for any frame); `(n > 0, None)` means
    /// bytes were consumed without an event yet: call again.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<RxEvent<'a>>), WireError> {
        match self.state {
            State::Stream { sub, total, done } => {
                if input.is_empty() {
                    return Ok((0, None));
                }
                let n = ((total - done) as usize).min(input.len());
                let chunk = Chunk {
                    offset: done,
                    total,
                    data: &input[..n],
                    last: done + n as u64 == total,
                };
                self.state = if chunk.last {
                    State::Header
                } else {
                    State::Stream {
                        sub,
                        total,
                        done: done + n as u64,
                    }
                };
                Ok((n, Some(stream_event(sub, chunk))))
            }
            State::Header => {
                if let Some(h) = FrameHeader::decode_am(input) {
                    let want = FrameHeader::LEN + h.length as usize;
                    let Some(data) = input.get(FrameHeader::LEN..want) else {
                        return Ok((0, None));
                    };
                    return Ok((want, Some(RxEvent::Am { id: h.am_id, data })));
                }
                if input.len() < FrameHeader::LEN {
                    return Ok((0, None));
                }
                let h = FrameHeader::decode(input)?;
                let body_len = h.length as usize;
                let sub_len = h.kind.sub_len();
                let payload = body_len - sub_len;
                let streamed = (matches!(h.kind, Kind::Put | Kind::GetResp) && payload > MAX_WHOLE)
                    || (h.kind == Kind::TagEager && payload > TAG_WHOLE);
                let want = if streamed {
                    FrameHeader::LEN + sub_len
                } else {
                    FrameHeader::LEN + body_len
                };
                if input.len() < want {
                    return Ok((0, None));
                }
                let body = &input[FrameHeader::LEN..want];
                let sub = &body[..sub_len];
                let data = &body[sub_len..];
                let whole = |offset| Chunk {
                    offset,
                    total: payload as u64,
                    data,
                    last: true,
                };
                let ev = match h.kind {
                    Kind::Hello => RxEvent::Hello(Hello::decode(sub)?),
                    Kind::HelloAck => RxEvent::HelloAck(HelloAck::decode(sub)?),
                    Kind::Am => RxEvent::Am {
                        id: h.am_id,
                        data: body,
                    },
                    Kind::Put | Kind::GetResp => {
                        let s = if h.kind == Kind::Put {
                            StreamSub::Put(PutHdr::decode(sub)?)
                        } else {
                            StreamSub::GetResp(Ack::decode(sub)?)
                        };
                        if streamed {
                            self.state = State::Stream {
                                sub: s,
                                total: payload as u64,
                                done: 0,
                            };
                            return Ok((want, None));
                        }
                        stream_event(s, whole(0))
                    }
                    Kind::TagEager => {
                        let t = TagHdr::decode(sub)?;
                        if streamed {
                            self.state = State::Stream {
                                sub: StreamSub::TagEager(t),
                                total: payload as u64,
                                done: 0,
                            };
                            // The start, so the receiver can match before the payload.
                            let start = Chunk {
                                offset: 0,
                                total: payload as u64,
                                data: &[],
                                last: false,
                            };
                            return Ok((want, Some(RxEvent::TagEager(t, start))));
                        }
                        RxEvent::TagEager(t, whole(0))
                    }
                    Kind::TagRndv => RxEvent::TagRndv(TagRndvHdr::decode(sub)?, data),
                    Kind::TagGet => RxEvent::TagGet(GetReq::decode(sub)?),
                    Kind::PutAck => RxEvent::PutAck(Ack::decode(sub)?),
                    Kind::GetReq => RxEvent::GetReq(GetReq::decode(sub)?),
                    Kind::AtomicReq => RxEvent::AtomicReq(AtomicReq::decode(sub)?),
                    Kind::AtomicResp => RxEvent::AtomicResp(AtomicResp::decode(sub)?),
                    Kind::FlushReq => RxEvent::FlushReq(FlushReq::decode(sub)?),
                    Kind::FlushAck => RxEvent::FlushAck(Ack::decode(sub)?),
                    Kind::Detach => RxEvent::Detach,
                };
                Ok((want, Some(ev)))
            }
        }
    }
}

fn stream_event(sub: StreamSub, chunk: Chunk<'_>) -> RxEvent<'_> {
    match sub {
        StreamSub::Put(h) => RxEvent::Put(h, chunk),
        StreamSub::GetResp(a) => RxEvent::GetResp(a, chunk),
        StreamSub::TagEager(t) => RxEvent::TagEager(t, chunk),
    }
}

/// An owned copy of an event, for tests and fuzzing: streamed chunks are merged per frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedEvent {
    /// A control frame (hello, acks, requests) as its borrowed-free event.
    Control(String),
    /// An active message.
    Am(u8, Vec<u8>),
    /// A whole put payload.
    Put(PutHdr, Vec<u8>),
    /// A whole get response payload.
    GetResp(Ack, Vec<u8>),
    /// A whole tagged eager payload.
    TagEager(TagHdr, Vec<u8>),
    /// A tagged rendezvous and its user header.
    TagRndv(TagRndvHdr, Vec<u8>),
}

/// Decodes `chunks` (the stream, split anywhere) with a buffer of at most `buf_cap` bytes the
/// way a connection does, merging streamed chunks. Stops at the first error. Pure; used by
/// the property test and the fuzz target.
pub fn decode_stream<'c>(
    chunks: impl IntoIterator<Item = &'c [u8]>,
    buf_cap: usize,
) -> (Vec<OwnedEvent>, Result<(), WireError>) {
    let buf_cap = buf_cap.max(MIN_RX_BUFFER);
    let mut out = Vec::new();
    let mut r = Reassembler::new();
    let mut buf: Vec<u8> = Vec::with_capacity(buf_cap);
    let mut partial: Option<OwnedEvent> = None;
    for c in chunks {
        let mut c = c;
        while !c.is_empty() {
            let room = buf_cap - buf.len();
            let take = room.min(c.len());
            buf.extend_from_slice(&c[..take]);
            c = &c[take..];
            let mut pos = 0;
            loop {
                match r.next(&buf[pos..]) {
                    Err(e) => return (out, Err(e)),
                    Ok((0, None)) => break,
                    Ok((n, ev)) => {
                        pos += n;
                        if let Some(ev) = ev {
                            collect(ev, &mut partial, &mut out);
                        }
                    }
                }
            }
            buf.drain(..pos);
        }
    }
    (out, Ok(()))
}

fn collect(ev: RxEvent<'_>, partial: &mut Option<OwnedEvent>, out: &mut Vec<OwnedEvent>) {
    let (chunk, fresh) = match ev {
        RxEvent::Am { id, data } => {
            out.push(OwnedEvent::Am(id, data.to_vec()));
            return;
        }
        RxEvent::Put(h, c) => (c, OwnedEvent::Put(h, Vec::new())),
        RxEvent::GetResp(a, c) => (c, OwnedEvent::GetResp(a, Vec::new())),
        RxEvent::TagEager(t, c) => (c, OwnedEvent::TagEager(t, Vec::new())),
        RxEvent::TagRndv(h, d) => {
            out.push(OwnedEvent::TagRndv(h, d.to_vec()));
            return;
        }
        other => {
            out.push(OwnedEvent::Control(format!("{other:?}")));
            return;
        }
    };
    let p = partial.get_or_insert(fresh);
    if let OwnedEvent::Put(_, v) | OwnedEvent::GetResp(_, v) | OwnedEvent::TagEager(_, v) = p {
        v.extend_from_slice(chunk.data);
    }
    if chunk.last {
        out.extend(partial.take());
    }
}
