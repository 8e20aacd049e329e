//! Wire headers of emulated one-sided operations: atomics and puts carried in active messages
//! to the target, which applies them to memory it mapped for remote access.

use ucs::codec::{exact, head, u64_at};
use ucs::{Error, Result};

/// An atomic operation emulated over active messages (the target applies it with CPU atomics).
///
/// ```text
/// 0          8      9        10          18          26            34
/// +----------+------+--------+-----------+-----------+-------------+
/// | req u64  | op u8| size u8| addr u64  | value u64 | compare u64 |
/// +----------+------+--------+-----------+-----------+-------------+
/// ```
/// `op`: 0 add, 1 and, 2 or, 3 xor, 4 swap, 5 compare-and-swap; `size`: 4 or 8; `req` is
/// [`NO_REQ`](super::NO_REQ) for a non-fetching operation (its reply, with `req` [`NO_REQ`](super::NO_REQ), only
/// acknowledges it). `compare` is sent only with compare-and-swap: any other operation is 26
/// bytes, so with the sender prefix it fits in the first cache line of a shared-memory FIFO
/// element (one line for the target to fetch, not two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicReqHdr {
    /// Requester's request, or [`NO_REQ`](super::NO_REQ).
    pub req: u64,
    /// Operation code.
    pub op: u8,
    /// Operand size in bytes.
    pub size: u8,
    /// Target address.
    pub addr: u64,
    /// Operand.
    pub value: u64,
    /// Compare value (cswap).
    pub compare: u64,
}

impl AtomicReqHdr {
    /// Encoded length of a compare-and-swap (the longest).
    pub const LEN: usize = 34;
    /// Encoded length of any other operation (no `compare`).
    pub const LEN_NO_COMPARE: usize = 26;
    /// Operation code of compare-and-swap, the one that carries `compare`.
    pub const OP_CSWAP: u8 = 5;

    /// The encoded length of an operation `op`.
    pub fn len_of(op: u8) -> usize {
        if op == Self::OP_CSWAP {
            Self::LEN
        } else {
            Self::LEN_NO_COMPARE
        }
    }

    /// Encodes into a fixed array; the message is its first `len_of(op)` bytes.
    pub fn encode(&self) -> ([u8; Self::LEN], usize) {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.req.to_le_bytes());
        b[8] = self.op;
        b[9] = self.size;
        b[10..18].copy_from_slice(&self.addr.to_le_bytes());
        b[18..26].copy_from_slice(&self.value.to_le_bytes());
        b[26..].copy_from_slice(&self.compare.to_le_bytes());
        (b, Self::len_of(self.op))
    }
    /// Decodes and validates the operation code, the size and the length (`compare` present
    /// exactly for compare-and-swap; absent, it decodes as 0).
    #[inline]
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != Self::LEN && b.len() != Self::LEN_NO_COMPARE {
            return Err(Error::Wire(format!(
                "atomic request must be {} or {} bytes, got {}",
                Self::LEN_NO_COMPARE,
                Self::LEN,
                b.len()
            )));
        }
        let h = head::<{ Self::LEN_NO_COMPARE }>(b, "atomic request")?;
        let compare = match b.first_chunk::<{ Self::LEN }>() {
            Some(c) => u64_at(c, Self::LEN_NO_COMPARE),
            None => 0,
        };
        let h = AtomicReqHdr {
            req: u64_at(h, 0),
            op: h[8],
            size: h[9],
            addr: u64_at(h, 10),
            value: u64_at(h, 18),
            compare,
        };
        if h.op > 5 || !(h.size == 4 || h.size == 8) {
            return Err(Error::Wire(format!(
                "atomic request with op {} size {}",
                h.op, h.size
            )));
        }
        if b.len() != Self::len_of(h.op) {
            return Err(Error::Wire(format!(
                "atomic request with op {} must be {} bytes, got {}",
                h.op,
                Self::len_of(h.op),
                b.len()
            )));
        }
        Ok(h)
    }
}

/// Reply to an emulated atomic (the old value for a fetching one, an acknowledgement for any).
///
/// ```text
/// 0          8          9
/// +----------+----------+-----------+
/// | req u64  | status u8| value u64 |
/// +----------+----------+-----------+
/// ```
/// `status`: 0 done, 1 the address is outside the target's mapped memory or misaligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicRepHdr {
    /// Requester's request.
    pub req: u64,
    /// Status.
    pub status: u8,
    /// Old value.
    pub value: u64,
}

impl AtomicRepHdr {
    /// Encoded length.
    pub const LEN: usize = 17;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.req.to_le_bytes());
        b[8] = self.status;
        b[9..].copy_from_slice(&self.value.to_le_bytes());
        b
    }
    /// Decodes a reply.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let h = exact::<{ Self::LEN }>(b, "atomic reply")?;
        Ok(AtomicRepHdr {
            req: u64_at(h, 0),
            status: h[8],
            value: u64_at(h, 9),
        })
    }
}

/// Header of an emulated put: the target writes the bytes that follow it at `addr`, if they
/// lie inside memory it mapped for remote access, and acknowledges with an
/// [`AtomicRepHdr`] whose request is [`NO_REQ`](super::NO_REQ).
///
/// ```text
/// 0          8
/// +----------+-------------+
/// | addr u64 | data (n ≥ 1)|
/// +----------+-------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutReqHdr {
    /// Target address.
    pub addr: u64,
}

impl PutReqHdr {
    /// Encoded length.
    pub const LEN: usize = 8;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        self.addr.to_le_bytes()
    }
    /// Decodes the header and splits off the data (at least one byte).
    pub fn decode(b: &[u8]) -> Result<(Self, &[u8])> {
        if b.len() <= Self::LEN {
            return Err(Error::Wire(format!(
                "emulated put needs an 8-byte address and data, got {} bytes",
                b.len()
            )));
        }
        let h = head::<{ Self::LEN }>(b, "emulated put")?;
        Ok((PutReqHdr { addr: u64_at(h, 0) }, &b[Self::LEN..]))
    }
}
