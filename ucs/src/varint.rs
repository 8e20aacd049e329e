//! Compact wire integers and a strict byte reader for the packed addresses.
//!
//! A varint is unsigned LEB128: seven bits per byte, least significant group first, the high
//! bit set on every byte but the last. Decoding accepts only the shortest encoding of a value
//! (so every value has exactly one encoding) and at most 64 bits.

use crate::{Error, Result};

/// Largest encoded length of a `u64`.
pub const MAX_LEN: usize = 10;

/// Appends `v` as a varint.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encoded length of `v`.
pub fn len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads fields from the front of a byte string; every error names the field and the blob
/// (`what`), and [`Reader::finish`] rejects trailing bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of `buf`, a `what` (used in error messages).
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not consumed yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// An [`Error::Wire`] about `field` of this blob.
    pub fn err(&self, field: &str, why: impl std::fmt::Display) -> Error {
        Error::Wire(format!("{} {field}: {why}", self.what))
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(self.err(
                field,
                format_args!("truncated (need {n} bytes, have {})", self.remaining()),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.take(1, field)?[0])
    }

    /// A little-endian `u64` of 8 bytes.
    pub fn u64_le(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A varint; a truncated, overlong (not shortest) or over-64-bit one is an error.
    pub fn var(&mut self, field: &str) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..MAX_LEN {
            let b = self.u8(field)?;
            let bits = (b & 0x7f) as u64;
            if i == MAX_LEN - 1 && bits > 1 {
                return Err(self.err(field, "varint exceeds 64 bits"));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && bits == 0 {
                    return Err(self.err(field, "varint is not in its shortest form"));
                }
                return Ok(v);
            }
        }
        Err(self.err(field, "varint exceeds 64 bits"))
    }

    /// A varint that must fit `max`.
    pub fn var_max(&mut self, field: &str, max: u64) -> Result<u64> {
        let v = self.var(field)?;
        if v > max {
            return Err(self.err(field, format_args!("{v} exceeds {max}")));
        }
        Ok(v)
    }

    /// A varint that must fit a `u32`.
    pub fn var_u32(&mut self, field: &str) -> Result<u32> {
        Ok(self.var_max(field, u32::MAX as u64)? as u32)
    }

    /// A varint length followed by that many bytes.
    pub fn bytes(&mut self, field: &str) -> Result<&'a [u8]> {
        let n = self.var(field)?;
        if n > self.remaining() as u64 {
            return Err(self.err(
                field,
                format_args!("length {n} exceeds the {} bytes left", self.remaining()),
            ));
        }
        self.take(n as usize, field)
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(Error::Wire(format!("{} has {n} trailing bytes", self.what))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_lengths() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(b.len(), len(v), "{v}");
            let mut r = Reader::new(&b, "test");
            assert_eq!(r.var("v").unwrap(), v);
            r.finish().unwrap();
        }
        assert_eq!(len(0), 1);
        assert_eq!(len(u64::MAX), MAX_LEN);
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
        let e = Reader::new(&[0x81, 0x01], "blob")
            .var_max("n", 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("129 exceeds 10"), "{e}");
        let e = Reader::new(&[5, 1, 2], "blob").bytes("x").unwrap_err();
        assert!(
            e.to_string().contains("length 5 exceeds the 2 bytes left"),
            "{e}"
        );
        let mut r = Reader::new(&[1, 2], "blob");
        r.u8("a").unwrap();
        assert!(r.finish().unwrap_err().to_string().contains("1 trailing"));
    }
}
