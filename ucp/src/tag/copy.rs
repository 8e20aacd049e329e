//! The copy of a message payload between a caller's memory and a transport's buffer (eager
//! send packing, eager receive unpacking).
//!
//! glibc's `memcpy` moves blocks above its `rep movsb` threshold (2112 bytes on CPUs with FSRM)
//! with `rep movsb`. On a shared-memory lane those bytes live in lines the peer's core just
//! wrote (a receive reads the FIFO buffer the sender filled) or just read (a send fills the
//! buffer the receiver read last), and on AMD Zen a `rep movsb` over such lines is several times
//! slower than a loop of vector loads and stores: a 4 KiB ping-pong over posix spent about
//! 2 us more per round trip. [`copy_payload`] copies blocks between [`LOOP_MIN`] and
//! [`LOOP_MAX`] bytes with a 64-byte SSE2 loop instead; smaller and larger blocks go to
//! `memcpy` (below the threshold glibc uses vector moves itself; far above it the copy is
//! bandwidth-bound and `rep movsb` is as good).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

/// Smallest block [`copy_payload`] copies with its own loop.
pub(crate) const LOOP_MIN: usize = 2048;
/// Largest block [`copy_payload`] copies with its own loop.
pub(crate) const LOOP_MAX: usize = 256 * 1024;

/// Copies `src` to the front of `dst`, as much as fits (callers pass equal lengths).
#[inline]
pub(crate) fn copy_payload(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    #[cfg(target_arch = "x86_64")]
    if (LOOP_MIN..=LOOP_MAX).contains(&n) {
        // SAFETY: both ranges hold `n` bytes, and a `&mut` and a `&` slice never overlap.
        unsafe { copy_loop(dst.as_mut_ptr(), src.as_ptr(), n) };
        return;
    }
    dst[..n].copy_from_slice(&src[..n]);
}

/// Appends `src` to `v` (as `extend_from_slice` does, with [`copy_payload`]'s copy).
#[inline]
pub(crate) fn extend_payload(v: &mut Vec<u8>, src: &[u8]) {
    let n = src.len();
    #[cfg(target_arch = "x86_64")]
    if (LOOP_MIN..=LOOP_MAX).contains(&n) {
        v.reserve(n);
        let len = v.len();
        // SAFETY: `reserve` made room for `n` more bytes after `len`, `src` (borrowed apart from
        // `v`) cannot overlap them, and all `n` are written before the length covers them.
        unsafe {
            copy_loop(v.as_mut_ptr().add(len), src.as_ptr(), n);
            v.set_len(len + n);
        }
        return;
    }
    v.extend_from_slice(src);
}

/// Copies `n >= 64` bytes from `src` to `dst` in 64-byte blocks of unaligned SSE2 loads and
/// stores; the last block ends at `n` (it may overlap the one before).
///
/// # Safety
/// `src` must be readable and `dst` writable for `n` bytes, the ranges must not overlap, and
/// `n` must be at least 64.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
unsafe fn copy_loop(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
    prefetch_crossing(dst, src, n);
    // SAFETY: every access is 16 bytes at an offset `o` with `o + 64 <= n`, inside both
    // ranges the caller vouches for.
    unsafe {
        let block = |o: usize| {
            let s = src.add(o) as *const __m128i;
            let d = dst.add(o) as *mut __m128i;
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_storeu_si128(d, a);
            _mm_storeu_si128(d.add(1), b);
            _mm_storeu_si128(d.add(2), c);
            _mm_storeu_si128(d.add(3), e);
        };
        let mut o = 0;
        while o + 64 <= n {
            block(o);
            o += 64;
            // Keeps the compiler from turning the loop back into a `memcpy` call.
            std::arch::asm!("", options(nomem, nostack, preserves_flags));
        }
        if o < n {
            block(n - 64);
        }
    }
}

/// Starts fetching the line just past the first page boundary inside `src..src + n` (to read)
/// and inside `dst..dst + n` (to write), if there is one. The hardware prefetchers stop at
/// page boundaries, so without the hint the copy meets the next page's first line as a demand
/// miss: a 4 KiB payload behind its header in a transport buffer ends 64 bytes into the next
/// page, and on a shared-memory lane that line sits in the other core's cache. Hints only.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_crossing(dst: *mut u8, src: *const u8, n: usize) {
    let crossing = |p: usize| {
        let next = (p | 4095).wrapping_add(1);
        (next > p && next < p.wrapping_add(n)).then_some(next as *const u8)
    };
    if let Some(p) = crossing(src as usize) {
        uct::prefetch_read(p);
    }
    if let (Some(p), Some(cpu)) = (crossing(dst as usize), uct::PrefetchW::detect()) {
        cpu.prefetch(p);
    }
}

/// Copies `data` to the front of `buf`, as much as fits. 8 to 16 bytes (the common small
/// message) go as two overlapping 8-byte moves rather than a call of `memcpy`.
#[inline(always)]
pub(crate) fn copy_in(buf: &mut [u8], data: &[u8]) {
    let n = buf.len().min(data.len());
    if (8..=16).contains(&n) {
        // SAFETY: both 8-byte windows (at 0 and at n - 8) lie inside the first n >= 8 bytes
        // of `data` and of `buf`, which do not overlap (`buf` is borrowed mutably); the moves
        // are unaligned. (Slice copies here compiled to a `memcpy` call for the second word.)
        unsafe {
            let (s, d) = (data.as_ptr(), buf.as_mut_ptr());
            let head = (s as *const u64).read_unaligned();
            let tail = (s.add(n - 8) as *const u64).read_unaligned();
            (d as *mut u64).write_unaligned(head);
            (d.add(n - 8) as *mut u64).write_unaligned(tail);
        }
        return;
    }
    copy_payload(buf, data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment() {
        let src: Vec<u8> = (0..LOOP_MIN + 300).map(|i| (i * 7 + 3) as u8).collect();
        for len in [
            0,
            1,
            63,
            64,
            65,
            LOOP_MIN - 1,
            LOOP_MIN,
            LOOP_MIN + 1,
            LOOP_MIN + 127,
        ] {
            for s_off in [0, 1, 15, 16, 33] {
                for d_off in [0, 3, 16, 64] {
                    let mut dst = vec![0xeeu8; len + d_off + 8];
                    copy_payload(&mut dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    assert_eq!(&dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    assert!(dst[..d_off].iter().all(|&b| b == 0xee), "wrote before");
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xee), "wrote after");
                }
            }
        }
    }

    #[test]
    fn extends() {
        let src: Vec<u8> = (0..LOOP_MIN + 100).map(|i| i as u8 ^ 0x5a).collect();
        for len in [0, 5, LOOP_MIN, LOOP_MIN + 100] {
            let mut v = vec![1u8, 2, 3];
            extend_payload(&mut v, &src[..len]);
            assert_eq!(v.len(), 3 + len);
            assert_eq!(&v[..3], &[1, 2, 3]);
            assert_eq!(&v[3..], &src[..len]);
        }
    }

    #[test]
    fn copies_what_fits() {
        let src = vec![9u8; LOOP_MIN + 10];
        let mut dst = vec![0u8; LOOP_MIN + 4];
        copy_payload(&mut dst, &src);
        assert!(dst.iter().all(|&b| b == 9));
        let mut big = vec![0u8; LOOP_MIN + 20];
        copy_payload(&mut big, &src);
        assert!(big[..LOOP_MIN + 10].iter().all(|&b| b == 9));
        assert!(big[LOOP_MIN + 10..].iter().all(|&b| b == 0));
    }
}
