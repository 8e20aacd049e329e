//! Copies of small pieces (headers, short payloads) into a stack buffer, without a `memcpy`
//! call: the gather step of the transports that build a small message in one buffer.

use std::mem::MaybeUninit;

/// Copies `p` into `b` at `at`: pieces of 4 to 16 bytes with two fixed-size moves each
/// instead of a `memcpy` call. Panics when `p` does not fit (callers check first).
#[inline(always)]
pub(crate) fn put_small<const N: usize>(b: &mut [MaybeUninit<u8>; N], at: usize, p: &[u8]) {
    let n = p.len();
    assert!(at + n <= N);
    let src = p.as_ptr();
    let dst = b[at..].as_mut_ptr().cast::<u8>();
    // SAFETY: `dst` has room for `n` bytes (checked above) and `src` holds `n` bytes; the
    // fixed-size moves stay inside both (two overlapping ones cover 4..16 bytes).
    unsafe {
        if (8..=16).contains(&n) {
            std::ptr::copy_nonoverlapping(src, dst, 8);
            std::ptr::copy_nonoverlapping(src.add(n - 8), dst.add(n - 8), 8);
        } else if (4..8).contains(&n) {
            std::ptr::copy_nonoverlapping(src, dst, 4);
            std::ptr::copy_nonoverlapping(src.add(n - 4), dst.add(n - 4), 4);
        } else {
            std::ptr::copy_nonoverlapping(src, dst, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_lands_whole_at_its_offset() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=20 {
            for at in [0, 3, 8] {
                let mut b = [MaybeUninit::new(0u8); 32];
                put_small(&mut b, at, &src[..n]);
                // SAFETY: every byte was initialised above.
                let got: Vec<u8> = b.iter().map(|x| unsafe { x.assume_init() }).collect();
                assert_eq!(&got[at..at + n], &src[..n], "n {n} at {at}");
                assert!(got[..at].iter().chain(&got[at + n..]).all(|&x| x == 0));
            }
        }
    }
}
