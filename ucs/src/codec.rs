//! The wire codec every decoder of peer bytes uses: little-endian readers and writers, length
//! checks, and one error type, [`WireError`].
//!
//! Two ways to read, both bounds-checked, neither able to panic on peer bytes:
//! - a fixed-layout header: [`head`] (or [`exact`]) checks the length once and gives a
//!   `&[u8; N]`; [`u16_at`], [`u32_at`], [`u64_at`] then read constant offsets of it, which the
//!   compiler proves in bounds (no further checks on the fast path);
//! - a variable layout: [`Reader`] walks the bytes front to back (integers, byte strings,
//!   varints), each read checked, and [`Reader::finish`] rejects trailing bytes.
//!
//! Encoders write fixed headers with [`put_u16_at`], [`put_u32_at`], [`put_u64_at`] into arrays
//! they own, and variable ones with a [`Writer`] appending to a `Vec<u8>`.
//!
//! A [`WireError`] is small and `Copy` (a decoder on the data path returns it without
//! allocating); it names the structure being decoded (`what`) and, where known, the field. It
//! converts into [`Error::Wire`] with that text.

use crate::varint;
use crate::Error;
use std::fmt;

/// Bytes from a peer that did not decode. Every variant names the structure (`what`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the structure (or its `field`, when not empty) needs.
    Truncated {
        /// The structure.
        what: &'static str,
        /// The field being read ("" for the structure as a whole).
        field: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes there were.
        have: usize,
    },
    /// Bytes left over after the last field.
    Trailing {
        /// The structure.
        what: &'static str,
        /// Bytes left over.
        extra: usize,
    },
    /// A length that does not fit the structure's layout.
    BadLength {
        /// The structure.
        what: &'static str,
        /// Length given.
        len: u64,
        /// Length (or minimum length) expected.
        expected: u64,
    },
    /// A length over the structure's limit.
    TooLong {
        /// The structure.
        what: &'static str,
        /// Length given.
        len: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A field holding a value outside its domain.
    BadField {
        /// The structure.
        what: &'static str,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A number over its field's largest value.
    OutOfRange {
        /// The structure.
        what: &'static str,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A field that is malformed in a way a value does not show (a varint, text).
    Invalid {
        /// The structure.
        what: &'static str,
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: &'static str,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::Truncated {
                what,
                field: "",
                need,
                have,
            } => write!(f, "{what} truncated: {have} of {need} bytes"),
            WireError::Truncated {
                what,
                field,
                need,
                have,
            } => write!(
                f,
                "{what} {field} truncated: need {need} bytes, have {have}"
            ),
            WireError::Trailing { what, extra } => write!(f, "{what} has {extra} trailing bytes"),
            WireError::BadLength {
                what,
                len,
                expected,
            } => write!(f, "{what} of {len} bytes, expected {expected}"),
            WireError::TooLong { what, len, max } => {
                write!(f, "{what} of {len} bytes exceeds the limit of {max}")
            }
            WireError::BadField { what, field, value } => {
                write!(f, "{what}: bad {field} {value} ({value:#x})")
            }
            WireError::OutOfRange {
                what,
                field,
                value,
                max,
            } => write!(f, "{what} {field}: {value} exceeds {max}"),
            WireError::Invalid { what, field, why } => write!(f, "{what} {field}: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<WireError> for Error {
    #[cold]
    fn from(e: WireError) -> Self {
        Error::Wire(e.to_string())
    }
}

/// Fails unless `buf` holds at least `n` bytes.
#[inline]
pub fn need(buf: &[u8], n: usize, what: &'static str) -> std::result::Result<(), WireError> {
    if buf.len() < n {
        return Err(WireError::Truncated {
            what,
            field: "",
            need: n,
            have: buf.len(),
        });
    }
    Ok(())
}

/// The first `N` bytes of `buf` (a fixed header); fewer is [`WireError::Truncated`].
#[inline]
pub fn head<'a, const N: usize>(
    buf: &'a [u8],
    what: &'static str,
) -> std::result::Result<&'a [u8; N], WireError> {
    match buf.first_chunk::<N>() {
        Some(h) => Ok(h),
        None => Err(WireError::Truncated {
            what,
            field: "",
            need: N,
            have: buf.len(),
        }),
    }
}

/// All of `buf`, which must be exactly `N` bytes long ([`WireError::BadLength`] otherwise).
#[inline]
pub fn exact<'a, const N: usize>(
    buf: &'a [u8],
    what: &'static str,
) -> std::result::Result<&'a [u8; N], WireError> {
    match <&[u8; N]>::try_from(buf) {
        Ok(h) => Ok(h),
        Err(_) => Err(WireError::BadLength {
            what,
            len: buf.len() as u64,
            expected: N as u64,
        }),
    }
}

/// The `M` bytes at byte `at` of a fixed header (a key, an address inside it).
#[inline(always)]
pub fn array_at<const M: usize, const N: usize>(b: &[u8; N], at: usize) -> [u8; M] {
    bytes_at(b, at)
}

/// The `M` bytes of `b` at `at`. Used with constant offsets inside a fixed header, where the
/// compiler proves the range in bounds.
#[inline(always)]
fn bytes_at<const M: usize>(b: &[u8], at: usize) -> [u8; M] {
    let mut a = [0u8; M];
    a.copy_from_slice(&b[at..at + M]);
    a
}

/// The little-endian `u16` at byte `at` of a fixed header.
#[inline(always)]
pub fn u16_at<const N: usize>(b: &[u8; N], at: usize) -> u16 {
    u16::from_le_bytes(bytes_at(b, at))
}

/// The little-endian `u32` at byte `at` of a fixed header.
#[inline(always)]
pub fn u32_at<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes(bytes_at(b, at))
}

/// The little-endian `u64` at byte `at` of a fixed header.
#[inline(always)]
pub fn u64_at<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    u64::from_le_bytes(bytes_at(b, at))
}

/// Writes `v` little-endian at byte `at` of `b` (an encoder's own buffer).
#[inline(always)]
pub fn put_u16_at(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at byte `at` of `b` (an encoder's own buffer).
#[inline(always)]
pub fn put_u32_at(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at byte `at` of `b` (an encoder's own buffer).
#[inline(always)]
pub fn put_u64_at(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Reads fields from the front of peer bytes. Every read is bounds-checked; every error names
/// the structure (`what`) and the field.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of `buf`, a `what` (named in error messages).
    #[inline]
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    /// The structure being read.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// Bytes consumed so far.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not consumed yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless at least `n` bytes are left.
    #[inline]
    pub fn need(&self, n: usize) -> std::result::Result<(), WireError> {
        if self.remaining() < n {
            return Err(self.short("", n));
        }
        Ok(())
    }

    #[cold]
    fn short(&self, field: &'static str, n: usize) -> WireError {
        WireError::Truncated {
            what: self.what,
            field,
            need: n,
            have: self.remaining(),
        }
    }

    /// A [`WireError::BadField`] about `field` of this structure.
    #[cold]
    pub fn bad(&self, field: &'static str, value: u64) -> WireError {
        WireError::BadField {
            what: self.what,
            field,
            value,
        }
    }

    /// A [`WireError::Invalid`] about `field` of this structure.
    #[cold]
    pub fn invalid(&self, field: &'static str, why: &'static str) -> WireError {
        WireError::Invalid {
            what: self.what,
            field,
            why,
        }
    }

    /// An [`Error::Wire`] about `field` with a free-form reason (for reasons a
    /// [`WireError`] cannot hold, such as an index into a table).
    #[cold]
    pub fn err(&self, field: &str, why: impl fmt::Display) -> Error {
        Error::Wire(format!("{} {field}: {why}", self.what))
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(
        &mut self,
        n: usize,
        field: &'static str,
    ) -> std::result::Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(self.short(field, n));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes as an array reference (a fixed header to read with [`u64_at`] & co).
    #[inline]
    pub fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> std::result::Result<&'a [u8; N], WireError> {
        match self.buf[self.pos..].first_chunk::<N>() {
            Some(a) => {
                self.pos += N;
                Ok(a)
            }
            None => Err(self.short(field, N)),
        }
    }

    /// Everything not consumed yet (consumes it).
    #[inline]
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self, field: &'static str) -> std::result::Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// A little-endian `u16`.
    #[inline]
    pub fn u16(&mut self, field: &'static str) -> std::result::Result<u16, WireError> {
        Ok(u16::from_le_bytes(*self.array(field)?))
    }

    /// A little-endian `u32`.
    #[inline]
    pub fn u32(&mut self, field: &'static str) -> std::result::Result<u32, WireError> {
        Ok(u32::from_le_bytes(*self.array(field)?))
    }

    /// A little-endian `u64`.
    #[inline]
    pub fn u64(&mut self, field: &'static str) -> std::result::Result<u64, WireError> {
        Ok(u64::from_le_bytes(*self.array(field)?))
    }

    /// A varint (see [`crate::varint`]); a truncated, overlong (not shortest) or over-64-bit
    /// one is an error.
    pub fn var(&mut self, field: &'static str) -> std::result::Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..varint::MAX_LEN {
            let b = self.u8(field)?;
            let bits = (b & 0x7f) as u64;
            if i == varint::MAX_LEN - 1 && bits > 1 {
                break;
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && bits == 0 {
                    return Err(self.invalid(field, "varint is not in its shortest form"));
                }
                return Ok(v);
            }
        }
        Err(self.invalid(field, "varint exceeds 64 bits"))
    }

    /// A varint that must not exceed `max`.
    pub fn var_max(
        &mut self,
        field: &'static str,
        max: u64,
    ) -> std::result::Result<u64, WireError> {
        let v = self.var(field)?;
        if v > max {
            return Err(WireError::OutOfRange {
                what: self.what,
                field,
                value: v,
                max,
            });
        }
        Ok(v)
    }

    /// A varint that must fit a `u32`.
    pub fn var_u32(&mut self, field: &'static str) -> std::result::Result<u32, WireError> {
        Ok(self.var_max(field, u32::MAX as u64)? as u32)
    }

    /// A varint length followed by that many bytes.
    pub fn var_bytes(&mut self, field: &'static str) -> std::result::Result<&'a [u8], WireError> {
        let n = self.var(field)?;
        if n > self.remaining() as u64 {
            return Err(WireError::Truncated {
                what: self.what,
                field,
                need: n.min(usize::MAX as u64) as usize,
                have: self.remaining(),
            });
        }
        self.bytes(n as usize, field)
    }

    /// Fails unless every byte was consumed.
    #[inline]
    pub fn finish(&self) -> std::result::Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(WireError::Trailing {
                what: self.what,
                extra,
            }),
        }
    }
}

/// Appends little-endian fields to a `Vec<u8>` (the encoders of variable layouts).
#[derive(Debug)]
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A writer appending to `out`.
    #[inline]
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Writer { out }
    }

    /// Appends one byte.
    #[inline]
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }

    /// Appends a little-endian `u16`.
    #[inline]
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u32`.
    #[inline]
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u64`.
    #[inline]
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends bytes as they are.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }

    /// Appends a varint.
    #[inline]
    pub fn var(&mut self, v: u64) -> &mut Self {
        varint::put(self.out, v);
        self
    }

    /// Appends a varint length, then the bytes ([`Reader::var_bytes`] reads it).
    #[inline]
    pub fn var_bytes(&mut self, b: &[u8]) -> &mut Self {
        self.var(b.len() as u64).bytes(b)
    }
}

/// Writes little-endian fields front to back into a buffer the encoder sized for them (a
/// fixed header, a shared-memory slot). Writing past its end is a bug of the encoder and panics.
#[derive(Debug)]
pub struct SliceWriter<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl<'a> SliceWriter<'a> {
    /// A writer filling `buf` from its start.
    #[inline]
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceWriter { buf, at: 0 }
    }

    /// Bytes written so far.
    #[inline]
    pub fn pos(&self) -> usize {
        self.at
    }

    /// Writes bytes as they are.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
        self
    }

    /// Writes one byte.
    #[inline]
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }

    /// Writes a little-endian `u16`.
    #[inline]
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Writes a little-endian `u32`.
    #[inline]
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Writes a little-endian `u64`.
    #[inline]
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fixed_headers_read_and_write_little_endian() {
        let mut b = [0u8; 14];
        put_u16_at(&mut b, 0, 0x0102);
        put_u32_at(&mut b, 2, 0x0304_0506);
        put_u64_at(&mut b, 6, 0x0708_090a_0b0c_0d0e);
        assert_eq!(b[..3], [0x02, 0x01, 0x06]);
        let h: &[u8; 14] = head(&b, "hdr").unwrap();
        assert_eq!(u16_at(h, 0), 0x0102);
        assert_eq!(u32_at(h, 2), 0x0304_0506);
        assert_eq!(u64_at(h, 6), 0x0708_090a_0b0c_0d0e);
        assert!(head::<14>(&[0u8; 20], "hdr").is_ok());
        assert_eq!(
            head::<14>(&b[..13], "hdr"),
            Err(WireError::Truncated {
                what: "hdr",
                field: "",
                need: 14,
                have: 13
            })
        );
        assert!(exact::<14>(&b, "hdr").is_ok());
        let e = exact::<14>(&[0u8; 15], "request header").unwrap_err();
        assert_eq!(e.to_string(), "request header of 15 bytes, expected 14");
        assert_eq!(
            need(&b, 15, "hdr").unwrap_err().to_string(),
            "hdr truncated: 14 of 15 bytes"
        );
        need(&b, 14, "hdr").unwrap();
    }

    #[test]
    fn slice_writer_fills_front_to_back() {
        let mut b = [0xffu8; 16];
        let mut w = SliceWriter::new(&mut b);
        w.u8(1)
            .u16(0x0302)
            .u32(0x0706_0504)
            .u64(0x0f0e_0d0c_0b0a_0908);
        assert_eq!(w.pos(), 15);
        assert_eq!(b[..15], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(b[15], 0xff);
    }

    #[test]
    fn errors_name_the_structure_and_field_and_become_wire_errors() {
        let mut r = Reader::new(&[1, 2, 3], "tcp hello");
        assert_eq!(r.u16("flags").unwrap(), 0x0201);
        let e = r.u32("magic").unwrap_err();
        assert_eq!(
            e.to_string(),
            "tcp hello magic truncated: need 4 bytes, have 1"
        );
        assert_eq!(r.pos(), 2, "a failed read consumes nothing");
        let e: Error = r.finish().unwrap_err().into();
        assert!(
            matches!(&e, Error::Wire(m) if m == "tcp hello has 1 trailing bytes"),
            "{e}"
        );
        assert_eq!(
            r.bad("kind", 99).to_string(),
            "tcp hello: bad kind 99 (0x63)"
        );
        assert_eq!(r.rest(), &[3]);
        r.finish().unwrap();
        let e = Reader::new(&[], "blob").err("entry", format_args!("{} is listed twice", 3));
        assert_eq!(
            e.to_string(),
            "malformed wire data: blob entry: 3 is listed twice"
        );
    }

    #[test]
    fn malformed_varints_are_rejected_with_a_reason() {
        let bad: [(&[u8], &str); 5] = [
            (&[0x80], "truncated"),
            (&[], "truncated"),
            (&[0x80, 0x00], "shortest"),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
                "64 bits",
            ),
            (&[0xff; 11], "64 bits"),
        ];
        for (b, why) in bad {
            let e = Reader::new(b, "blob").var("field").unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("blob field"), "{b:?}: {e}");
        }
        let mut r = Reader::new(
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            "b",
        );
        assert_eq!(r.var("v").unwrap(), u64::MAX);
        let e = Reader::new(&[0x81, 0x01], "blob")
            .var_max("n", 10)
            .unwrap_err();
        assert_eq!(e.to_string(), "blob n: 129 exceeds 10");
        let e = Reader::new(&[5, 1, 2], "blob").var_bytes("x").unwrap_err();
        assert_eq!(e.to_string(), "blob x truncated: need 5 bytes, have 2");
    }

    /// One field of a random layout.
    #[derive(Debug, Clone, PartialEq)]
    enum Field {
        U8(u8),
        U16(u16),
        U32(u32),
        U64(u64),
        Var(u64),
        Bytes(Vec<u8>),
    }

    fn field() -> impl Strategy<Value = Field> {
        prop_oneof![
            any::<u8>().prop_map(Field::U8),
            any::<u16>().prop_map(Field::U16),
            any::<u32>().prop_map(Field::U32),
            any::<u64>().prop_map(Field::U64),
            prop_oneof![0..300u64, any::<u64>()].prop_map(Field::Var),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Field::Bytes),
        ]
    }

    fn encode(fields: &[Field]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out);
        for f in fields {
            match f {
                Field::U8(v) => w.u8(*v),
                Field::U16(v) => w.u16(*v),
                Field::U32(v) => w.u32(*v),
                Field::U64(v) => w.u64(*v),
                Field::Var(v) => w.var(*v),
                Field::Bytes(b) => w.var_bytes(b),
            };
        }
        out
    }

    fn decode(b: &[u8], like: &[Field]) -> std::result::Result<Vec<Field>, WireError> {
        let mut r = Reader::new(b, "layout");
        let mut got = Vec::new();
        for f in like {
            got.push(match f {
                Field::U8(_) => Field::U8(r.u8("u8")?),
                Field::U16(_) => Field::U16(r.u16("u16")?),
                Field::U32(_) => Field::U32(r.u32("u32")?),
                Field::U64(_) => Field::U64(r.u64("u64")?),
                Field::Var(_) => Field::Var(r.var("var")?),
                Field::Bytes(_) => Field::Bytes(r.var_bytes("bytes")?.to_vec()),
            });
        }
        r.finish()?;
        Ok(got)
    }

    proptest! {
        /// What a Writer wrote, a Reader reads back; every strict prefix fails as truncated
        /// and one extra byte as trailing, without panicking.
        #[test]
        fn writer_reader_round_trip(fields in proptest::collection::vec(field(), 0..12)) {
            let b = encode(&fields);
            prop_assert_eq!(decode(&b, &fields), Ok(fields.clone()));
            for cut in 0..b.len() {
                let e = decode(&b[..cut], &fields).unwrap_err();
                prop_assert!(matches!(e, WireError::Truncated { .. }), "{cut}: {e}");
            }
            let mut longer = b.clone();
            longer.push(0);
            prop_assert_eq!(
                decode(&longer, &fields),
                Err(WireError::Trailing { what: "layout", extra: 1 })
            );
        }

        /// Arbitrary bytes never panic a reader, and what it reads is what is there.
        #[test]
        fn reader_on_noise(b in proptest::collection::vec(any::<u8>(), 0..64), n in 0usize..80) {
            let mut r = Reader::new(&b, "noise");
            match r.bytes(n, "n") {
                Ok(s) => prop_assert_eq!(s, &b[..n]),
                Err(e) => prop_assert!(n > b.len(), "{e}"),
            }
            let _ = r.var("v");
            let _ = r.u64("x");
            prop_assert!(r.pos() <= b.len());
        }
    }
}
