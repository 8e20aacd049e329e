//! Test names, data layouts and the parameters both sides of a test agree on.

use std::fmt;
use ucs::{Error, Result};

/// The API a test exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// uct: one transport, one device (`-x`, `-d`).
    Uct,
    /// ucp: the protocol layer picks the transports.
    Ucp,
}

/// How a test moves data: a ping-pong (latency is half the round trip) or a one-way stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Both sides send in turn; the reported latency is half the round trip.
    PingPong,
    /// The client issues operations back to back (or one at a time for fetching operations,
    /// whose latency is then the full round trip of one operation).
    Stream,
}

macro_rules! tests {
    ($( $variant:ident = $id:literal, $name:literal, $api:ident, $shape:ident, $desc:literal; )*) => {
        /// A test, with UCX's names.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum TestId { $( #[doc = $desc] $variant, )* }

        impl TestId {
            /// Every test, in the order `perftest --help` lists them.
            pub const ALL: &'static [TestId] = &[$(TestId::$variant),*];
            /// The test's name (`am_lat`, `tag_bw`…).
            pub fn name(self) -> &'static str { match self { $(TestId::$variant => $name,)* } }
            /// The number that identifies the test on the side channel.
            pub fn wire_id(self) -> u16 { match self { $(TestId::$variant => $id,)* } }
            /// The test with a side-channel number, if any.
            pub fn from_wire(id: u16) -> Option<TestId> {
                match id { $($id => Some(TestId::$variant),)* _ => None }
            }
            /// The API the test exercises.
            pub fn api(self) -> Api { match self { $(TestId::$variant => Api::$api,)* } }
            /// How the test moves data.
            pub fn shape(self) -> Shape { match self { $(TestId::$variant => Shape::$shape,)* } }
            /// One line on what the test measures (as ucx_perftest prints it).
            pub fn description(self) -> &'static str { match self { $(TestId::$variant => $desc,)* } }
        }
    };
}

tests! {
    AmLat = 1, "am_lat", Uct, PingPong, "active message latency";
    AmBw = 2, "am_bw", Uct, Stream, "active message bandwidth / message rate";
    PutLat = 3, "put_lat", Uct, PingPong, "put latency";
    PutBw = 4, "put_bw", Uct, Stream, "put bandwidth / message rate";
    GetLat = 5, "get_lat", Uct, Stream, "get latency";
    GetBw = 6, "get_bw", Uct, Stream, "get bandwidth / message rate";
    AddLat = 7, "add_lat", Uct, PingPong, "atomic add latency";
    AddMr = 8, "add_mr", Uct, Stream, "atomic add message rate";
    FaddLat = 9, "fadd_lat", Uct, Stream, "atomic fetch-and-add latency";
    SwapLat = 10, "swap_lat", Uct, Stream, "atomic swap latency";
    CswapLat = 11, "cswap_lat", Uct, Stream, "atomic compare-and-swap latency";
    TagLat = 32, "tag_lat", Ucp, PingPong, "tag match latency";
    TagBw = 33, "tag_bw", Ucp, Stream, "tag match bandwidth";
    TagSyncLat = 34, "tag_sync_lat", Ucp, PingPong, "tag sync match latency";
    TagSyncBw = 35, "tag_sync_bw", Ucp, Stream, "tag sync match bandwidth";
    UcpPutLat = 36, "ucp_put_lat", Ucp, PingPong, "put latency";
    UcpPutBw = 37, "ucp_put_bw", Ucp, Stream, "put bandwidth";
    UcpGet = 38, "ucp_get", Ucp, Stream, "get latency / bandwidth / message rate";
    UcpAdd = 39, "ucp_add", Ucp, Stream, "atomic add bandwidth / message rate";
    UcpFadd = 40, "ucp_fadd", Ucp, Stream, "atomic fetch-and-add latency / bandwidth / rate";
    UcpSwap = 41, "ucp_swap", Ucp, Stream, "atomic swap latency / bandwidth / rate";
    UcpCswap = 42, "ucp_cswap", Ucp, Stream, "atomic compare-and-swap latency / bandwidth / rate";
    UcpAmLat = 43, "ucp_am_lat", Ucp, PingPong, "am latency";
    UcpAmBw = 44, "ucp_am_bw", Ucp, Stream, "am bandwidth / message rate";
    StreamLat = 45, "stream_lat", Ucp, PingPong, "stream latency";
    StreamBw = 46, "stream_bw", Ucp, Stream, "stream bandwidth";
    TagBibw = 47, "tag_bibw", Ucp, Stream, "tag match bidirectional bandwidth: both sides stream at once (per direction)";
    TagExchange = 48, "tag_exchange", Ucp, Stream, "tag match pairwise exchange: each side sends and receives one message per iteration, as MPI_Sendrecv";
}

impl TestId {
    /// Looks a test up by name; UCX 1.13's short names `get`, `fadd`, `swap` and `cswap` are
    /// accepted for the uct tests `get_lat`, `fadd_lat`, `swap_lat` and `cswap_lat`.
    pub fn from_name(name: &str) -> Option<TestId> {
        let canonical = match name {
            "get" => "get_lat",
            "fadd" => "fadd_lat",
            "swap" => "swap_lat",
            "cswap" => "cswap_lat",
            other => other,
        };
        TestId::ALL.iter().copied().find(|t| t.name() == canonical)
    }

    /// True when the client waits for each operation before the next (latency tests), so the
    /// latency column is one operation's time.
    pub fn one_at_a_time(self) -> bool {
        matches!(
            self,
            TestId::GetLat
                | TestId::FaddLat
                | TestId::SwapLat
                | TestId::CswapLat
                | TestId::UcpFadd
                | TestId::UcpSwap
                | TestId::UcpCswap
        )
    }

    /// True for remote-memory (put/get/atomic) tests, which exchange remote keys.
    pub fn needs_rkey(self) -> bool {
        !matches!(
            self,
            TestId::AmLat
                | TestId::AmBw
                | TestId::TagLat
                | TestId::TagBw
                | TestId::TagBibw
                | TestId::TagExchange
                | TestId::TagSyncLat
                | TestId::TagSyncBw
                | TestId::UcpAmLat
                | TestId::UcpAmBw
                | TestId::StreamLat
                | TestId::StreamBw
        )
    }

    /// True for atomic tests (message size 4 or 8 bytes).
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            TestId::AddLat
                | TestId::AddMr
                | TestId::FaddLat
                | TestId::SwapLat
                | TestId::CswapLat
                | TestId::UcpAdd
                | TestId::UcpFadd
                | TestId::UcpSwap
                | TestId::UcpCswap
        )
    }

    /// The column title above the latency columns (`latency` or `overhead`, as ucx_perftest).
    pub fn latency_title(self) -> &'static str {
        if self.shape() == Shape::PingPong || self.one_at_a_time() {
            "latency (usec)"
        } else {
            "overhead (usec)"
        }
    }
}

impl fmt::Display for TestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Data layout / send mode of the sender (`-D`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Inline (`_short`).
    Short,
    /// Inline, gathered from the iov parts (`am_short_iov`).
    ShortIov,
    /// Copied into the transport's buffer by a pack callback (`_bcopy`).
    Bcopy,
    /// Sent from registered memory (`_zcopy`).
    Zcopy,
    /// ucp: one contiguous buffer.
    Contig,
    /// ucp: an io-vector of the `-s` parts.
    Iov,
}

impl Layout {
    /// Every layout.
    pub const ALL: &'static [Layout] = &[
        Layout::Short,
        Layout::ShortIov,
        Layout::Bcopy,
        Layout::Zcopy,
        Layout::Contig,
        Layout::Iov,
    ];
    /// The name used with `-D`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Short => "short",
            Layout::ShortIov => "shortiov",
            Layout::Bcopy => "bcopy",
            Layout::Zcopy => "zcopy",
            Layout::Contig => "contig",
            Layout::Iov => "iov",
        }
    }
    /// Parses a `-D` value.
    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.iter().copied().find(|l| l.name() == name)
    }
    fn wire(self) -> u8 {
        match self {
            Layout::Short => 0,
            Layout::ShortIov => 1,
            Layout::Bcopy => 2,
            Layout::Zcopy => 3,
            Layout::Contig => 4,
            Layout::Iov => 5,
        }
    }
    fn from_wire(v: u8) -> Option<Layout> {
        Layout::ALL.iter().copied().find(|l| l.wire() == v)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Most iov parts in `-s`.
pub const MAX_IOV: usize = 32;
/// Largest message perftest sends (the sum of the `-s` parts).
pub const MAX_MSG: u64 = 1 << 30;
/// Largest amount of buffer memory a test may allocate for its window (`-O` × size).
pub const MAX_WINDOW_BYTES: u64 = 4 << 30;
/// Most operations in flight (`-O`) and largest flow-control window (`-W`).
pub const MAX_COUNT: u32 = 1 << 20;
/// Memory one operation in flight costs besides its buffer (request, queue slot, vector
/// header), for the memory check in [`TestParams::validate`].
const PER_OP_BYTES: u64 = 256;
/// Longest transport or device name carried on the side channel.
pub const MAX_NAME: usize = 64;

/// The parameters of one test, which the client sends to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestParams {
    /// The test.
    pub test: TestId,
    /// Sender data layout.
    pub layout: Layout,
    /// Message size as iov parts (one part for a contiguous message).
    pub sizes: Vec<u64>,
    /// Measured iterations.
    pub iterations: u64,
    /// Warm-up iterations, run before the measured ones.
    pub warmup: u64,
    /// Most operations in flight (bandwidth tests).
    pub outstanding: u32,
    /// Flow-control window of active-message bandwidth tests.
    pub window: u32,
    /// Transport (uct tests).
    pub transport: String,
    /// Device (uct tests).
    pub device: String,
    /// Memory the tag tests send from (`--mem`).
    pub mem: SendMem,
}

/// Memory the ucp tag tests send from (`--mem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendMem {
    /// Memory from `mem_map` (a posix/sysv segment over shared memory, as ucx_perftest maps
    /// its buffers with `ucp_mem_map`): a rendezvous receiver reads it in place.
    #[default]
    Mapped,
    /// Ordinary heap vectors, as an application's buffers (a rendezvous over shared memory
    /// then goes by cma or the AM pipeline).
    Heap,
}

impl SendMem {
    /// The name used with `--mem`.
    pub fn name(self) -> &'static str {
        match self {
            SendMem::Mapped => "map",
            SendMem::Heap => "heap",
        }
    }
    /// Parses a `--mem` value.
    pub fn from_name(name: &str) -> Option<SendMem> {
        [SendMem::Mapped, SendMem::Heap]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// Bit of the encoded flags word: the tag tests send from heap vectors ([`SendMem::Heap`]).
const FLAG_HEAP: u32 = 1;

impl TestParams {
    /// Total message size: the sum of the iov parts.
    pub fn size(&self) -> usize {
        self.sizes
            .iter()
            .fold(0usize, |a, &s| a.saturating_add(s as usize))
    }
    /// Warm-up plus measured iterations.
    pub fn total_iterations(&self) -> u64 {
        self.warmup.saturating_add(self.iterations)
    }

    /// Checks what does not depend on a transport: sizes, counts, layout for the test.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidParam(m));
        if self.sizes.is_empty() || self.sizes.len() > MAX_IOV {
            return bad(format!("-s takes 1 to {MAX_IOV} sizes"));
        }
        if self.iterations == 0 {
            return bad("-n must be at least 1".into());
        }
        if self.outstanding == 0 {
            return bad("-O must be at least 1".into());
        }
        if self.window == 0 {
            return bad("-W must be at least 1".into());
        }
        if self.outstanding > MAX_COUNT {
            return bad(format!(
                "-O {} exceeds perftest's limit of {MAX_COUNT} operations in flight",
                self.outstanding
            ));
        }
        if self.window > MAX_COUNT {
            return bad(format!(
                "-W {} exceeds perftest's limit of {MAX_COUNT}",
                self.window
            ));
        }
        if self.transport.len() > MAX_NAME || self.device.len() > MAX_NAME {
            return bad(format!(
                "transport and device names are at most {MAX_NAME} bytes"
            ));
        }
        let total = self
            .sizes
            .iter()
            .try_fold(0u64, |a, &s| a.checked_add(s))
            .unwrap_or(u64::MAX);
        if total > MAX_MSG {
            return bad(format!(
                "message size {total} exceeds perftest's limit of {MAX_MSG} bytes (1 GiB)"
            ));
        }
        if (self.outstanding as u64).saturating_mul(total) > MAX_WINDOW_BYTES {
            return bad(format!(
                "-O {} messages of {total} bytes in flight need more than 4 GiB of buffers; use a smaller -O",
                self.outstanding
            ));
        }
        // Send and receive buffers for each operation in flight (and one of each besides), plus
        // the bookkeeping of the operations and the window: all of it must fit in memory.
        let ops = u64::from(self.outstanding) + 2;
        let bytes = ops
            .saturating_mul(total.saturating_mul(2).saturating_add(PER_OP_BYTES))
            .saturating_add(u64::from(self.window).saturating_mul(PER_OP_BYTES));
        ucs::limits::check_alloc(
            &format!(
                "-s {total} with -O {} and -W {}",
                self.outstanding, self.window
            ),
            bytes,
        )?;
        let size = self.size();
        let t = self.test;
        if t.is_atomic() {
            if size != 4 && size != 8 {
                return bad(format!(
                    "{t} works on 4- or 8-byte values; use -s 8 (or -s 4), not {size}"
                ));
            }
            if t.api() == Api::Uct && self.layout != Layout::Short {
                return bad(format!(
                    "-D {} cannot be used for atomics; omit -D",
                    self.layout
                ));
            }
        }
        match t.api() {
            Api::Uct => {
                if matches!(self.layout, Layout::Contig | Layout::Iov) {
                    return bad(format!(
                        "-D {} is for ucp tests; uct tests take short, shortiov, bcopy or zcopy",
                        self.layout
                    ));
                }
                if self.transport.is_empty() || self.device.is_empty() {
                    return bad(format!(
                        "{t} is a uct test: name the transport and device, e.g. -x posix -d memory"
                    ));
                }
                if matches!(t, TestId::AmLat | TestId::AmBw) && size < 8 {
                    return bad(format!(
                        "{t} messages carry an 8-byte header: -s must be at least 8, not {size}"
                    ));
                }
                if self.layout == Layout::ShortIov && !matches!(t, TestId::AmLat | TestId::AmBw) {
                    return bad("-D shortiov is only for active messages".into());
                }
                if matches!(t, TestId::PutLat | TestId::PutBw) && size == 0 {
                    return bad(format!("{t} needs -s of at least 1"));
                }
            }
            Api::Ucp => {
                if !matches!(self.layout, Layout::Contig | Layout::Iov) {
                    return bad(format!(
                        "-D {} is for uct tests; ucp tests take contig or iov",
                        self.layout
                    ));
                }
            }
        }
        Ok(())
    }

    /// Fixed part of the encoded parameters, bytes.
    pub const LEN: usize = 36;

    /// Encodes the parameters, little-endian:
    ///
    /// ```text
    ///  0      2      3      4            8            12           16
    ///  +------+------+------+------------+------------+------------+
    ///  | test | lay- | iov  | outstanding| window     | flags      |
    ///  | u16  | out  | count| u32        | u32        | u32        |
    ///  +------+------+------+------------+------------+------------+
    ///  16                       24                       32     33     34     36
    ///  +------------------------+------------------------+------+------+------+
    ///  | iterations u64         | warmup u64             |tl len|dev   | rsvd |
    ///  |                        |                        | u8   |len u8| u16  |
    ///  +------------------------+------------------------+------+------+------+
    ///  36: iov count x u64 sizes, then the transport name, then the device name (UTF-8)
    /// ```
    /// Flags: bit 0, the tag tests send from heap vectors (`--mem heap`); the other bits are 0.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.test.wire_id().to_le_bytes());
        out.push(self.layout.wire());
        out.push(self.sizes.len() as u8);
        out.extend_from_slice(&self.outstanding.to_le_bytes());
        out.extend_from_slice(&self.window.to_le_bytes());
        let flags = if self.mem == SendMem::Heap {
            FLAG_HEAP
        } else {
            0
        };
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.iterations.to_le_bytes());
        out.extend_from_slice(&self.warmup.to_le_bytes());
        out.push(self.transport.len() as u8);
        out.push(self.device.len() as u8);
        out.extend_from_slice(&0u16.to_le_bytes());
        for s in &self.sizes {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(self.transport.as_bytes());
        out.extend_from_slice(self.device.as_bytes());
    }

    /// Decodes parameters; truncated input, an unknown test or layout, or a bad name is
    /// [`Error::Wire`].
    pub fn decode(buf: &[u8]) -> Result<TestParams> {
        let mut r = Reader::new(buf, "test parameters");
        let test_id = r.u16()?;
        let layout = r.u8()?;
        let count = r.u8()? as usize;
        let outstanding = r.u32()?;
        let window = r.u32()?;
        let flags = r.u32()?;
        let iterations = r.u64()?;
        let warmup = r.u64()?;
        let tl_len = r.u8()? as usize;
        let dev_len = r.u8()? as usize;
        let _reserved2 = r.u16()?;
        let test = TestId::from_wire(test_id)
            .ok_or_else(|| Error::Wire(format!("unknown test number {test_id}")))?;
        if flags & !FLAG_HEAP != 0 {
            return Err(Error::Wire(format!("unknown parameter flags {flags:#x}")));
        }
        let layout = Layout::from_wire(layout)
            .ok_or_else(|| Error::Wire(format!("unknown data layout number {layout}")))?;
        if count == 0 || count > MAX_IOV {
            return Err(Error::Wire(format!(
                "iov count {count} is outside 1..={MAX_IOV}"
            )));
        }
        let mut sizes = Vec::with_capacity(count);
        for _ in 0..count {
            sizes.push(r.u64()?);
        }
        let transport = r.string(tl_len)?;
        let device = r.string(dev_len)?;
        r.finish()?;
        Ok(TestParams {
            test,
            layout,
            sizes,
            iterations,
            warmup,
            outstanding,
            window,
            transport,
            device,
            mem: if flags & FLAG_HEAP != 0 {
                SendMem::Heap
            } else {
                SendMem::Mapped
            },
        })
    }
}

/// A bounds-checked little-endian reader for the side-channel codecs.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.buf.len() => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            _ => Err(Error::Wire(format!(
                "{} truncated: needed {} bytes at offset {}, have {}",
                self.what,
                n,
                self.pos,
                self.buf.len()
            ))),
        }
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub(crate) fn string(&mut self, n: usize) -> Result<String> {
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| Error::Wire(format!("{}: a name is not UTF-8", self.what)))
    }
    pub(crate) fn finish(&self) -> Result<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(Error::Wire(format!(
                "{}: {} unexpected trailing bytes",
                self.what,
                self.buf.len() - self.pos
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TestParams {
        TestParams {
            test: TestId::PutBw,
            layout: Layout::Zcopy,
            sizes: vec![16, 48, 8192],
            iterations: 1_000_000,
            warmup: 10_000,
            outstanding: 16,
            window: 127,
            transport: "posix".into(),
            device: "memory".into(),
            mem: SendMem::Mapped,
        }
    }

    #[test]
    fn names_round_trip_and_aliases() {
        for &t in TestId::ALL {
            assert_eq!(TestId::from_name(t.name()), Some(t));
            assert_eq!(TestId::from_wire(t.wire_id()), Some(t));
        }
        assert_eq!(TestId::from_name("get"), Some(TestId::GetLat));
        assert_eq!(TestId::from_name("cswap"), Some(TestId::CswapLat));
        assert_eq!(TestId::from_name("bogus"), None);
        assert_eq!(TestId::ALL.len(), 28);
    }

    #[test]
    fn params_round_trip() {
        let p = sample();
        let mut buf = Vec::new();
        p.encode(&mut buf);
        assert_eq!(buf.len(), TestParams::LEN + 3 * 8 + 5 + 6);
        assert_eq!(TestParams::decode(&buf).unwrap(), p);
        let heap = TestParams {
            mem: SendMem::Heap,
            ..sample()
        };
        buf.clear();
        heap.encode(&mut buf);
        assert_eq!(TestParams::decode(&buf).unwrap(), heap);
        // A flag this build does not know is refused, not ignored.
        buf[12] |= 2;
        let e = TestParams::decode(&buf).unwrap_err().to_string();
        assert!(e.contains("flags"), "{e}");
    }

    #[test]
    fn params_truncated_and_trailing() {
        let mut buf = Vec::new();
        sample().encode(&mut buf);
        for cut in 0..buf.len() {
            let e = TestParams::decode(&buf[..cut]).unwrap_err();
            assert!(matches!(e, Error::Wire(_)), "cut {cut}: {e}");
        }
        buf.push(0);
        assert!(matches!(TestParams::decode(&buf), Err(Error::Wire(_))));
    }

    #[test]
    fn params_unknown_test_is_an_error() {
        let mut buf = Vec::new();
        sample().encode(&mut buf);
        buf[0..2].copy_from_slice(&999u16.to_le_bytes());
        let e = TestParams::decode(&buf).unwrap_err().to_string();
        assert!(e.contains("unknown test number 999"), "{e}");
    }

    #[test]
    fn validate_rejects_bad_combinations() {
        let mut p = sample();
        assert!(p.validate().is_ok());
        p.test = TestId::FaddLat;
        p.sizes = vec![16];
        assert!(p.validate().is_err());
        p.sizes = vec![8];
        assert!(p.validate().is_err(), "zcopy atomics");
        p.layout = Layout::Short;
        assert!(p.validate().is_ok());
        p.test = TestId::AmLat;
        p.sizes = vec![4];
        assert!(p.validate().is_err(), "am smaller than its header");
        p.sizes = vec![8];
        p.iterations = 0;
        assert!(p.validate().is_err());
    }

    #[test]
    fn validate_bounds_sizes_and_counts() {
        let mut p = sample();
        p.sizes = vec![99_999_999_999_999];
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("exceeds") && e.contains("1 GiB"), "{e}");
        let mut p = sample();
        p.outstanding = u32::MAX;
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("-O 4294967295"), "{e}");
        let mut p = sample();
        p.window = u32::MAX;
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("-W 4294967295"), "{e}");
        // Within the caps but beyond memory: 1 GiB messages, 4 in flight, on a small limit.
        let e = ucs::limits::check_alloc_within("-s 1073741824 with -O 4", 10 << 30, 1 << 30)
            .unwrap_err()
            .to_string();
        assert!(e.contains("-O 4") && e.contains("1.0 GiB"), "{e}");
    }
}
