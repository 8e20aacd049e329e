//! Compact wire integers for the packed addresses (the codec's `Reader::var` reads them).
//!
//! A varint is unsigned LEB128: seven bits per byte, least significant group first, the high
//! bit set on every byte but the last. Decoding accepts only the shortest encoding of a value
//! (so every value has exactly one encoding) and at most 64 bits.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_and_lengths() {
        let cases: [(u64, &[u8]); 6] = [
            (0, &[0]),
            (1, &[1]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (16_384, &[0x80, 0x80, 0x01]),
        ];
        for (v, want) in cases {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(b, want, "{v}");
            assert_eq!(len(v), want.len(), "{v}");
        }
        for v in [16_383, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(b.len(), len(v), "{v}");
        }
        assert_eq!(len(u64::MAX), MAX_LEN);
    }
}
