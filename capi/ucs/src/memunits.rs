//! Memory units as UCX writes them: `8k`, `4MB`, `1g`, `inf`, `auto`.

use crate::status::{codes::*, Status};
use std::ffi::{c_char, c_void, CStr};

/// `UCS_MEMUNITS_INF`: no limit.
pub const MEMUNITS_INF: usize = usize::MAX;
/// `UCS_MEMUNITS_AUTO`: chosen by the library.
pub const MEMUNITS_AUTO: usize = usize::MAX - 1;

/// Parses a memory-unit string: a whole number with an optional suffix `b`, `k`, `m`, `g`,
/// `t` (powers of 1024, any case, optionally followed by `b`), or `inf` / `auto`.
pub fn parse(text: &str) -> Result<usize, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("inf") {
        return Ok(MEMUNITS_INF);
    }
    if t.eq_ignore_ascii_case("auto") {
        return Ok(MEMUNITS_AUTO);
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, suffix) = t.split_at(digits);
    let value: usize = num
        .parse()
        .map_err(|_| format!("'{text}' is not a memory size (like 8k, 4MB, inf, auto)"))?;
    let mut s = suffix.chars().map(|c| c.to_ascii_lowercase());
    let shift = match s.next() {
        None => 0,
        Some('b') => 0,
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some('t') => 40,
        Some(_) => return Err(format!("'{text}': unknown unit (b, k, m, g, t)")),
    };
    match (s.next(), s.next()) {
        (None, _) => {}
        (Some('b'), None) if shift > 0 => {}
        _ => return Err(format!("'{text}': unknown unit (b, k, m, g, t)")),
    }
    value
        .checked_mul(1usize << shift)
        .ok_or_else(|| format!("'{text}' does not fit in 64 bits"))
}

/// Formats a size as UCX does: `inf`, `auto`, or the largest unit dividing it (`8K`, `3M`).
pub fn format(value: usize) -> String {
    match value {
        MEMUNITS_INF => "inf".into(),
        MEMUNITS_AUTO => "auto".into(),
        mut v => {
            let mut units = ["", "K", "M", "G", "T"].iter();
            let mut unit = units.next().expect("units");
            while v >= 1024 && v % 1024 == 0 {
                match units.next() {
                    Some(u) => {
                        unit = u;
                        v /= 1024;
                    }
                    None => break,
                }
            }
            format!("{v}{unit}")
        }
    }
}

/// Copies `text` into a C buffer of `max` bytes, truncated and NUL-terminated.
///
/// # Safety
/// `buf` must have room for `max` bytes.
pub unsafe fn copy_out(text: &str, buf: *mut c_char, max: usize) {
    if buf.is_null() || max == 0 {
        return;
    }
    let n = text.len().min(max - 1);
    // SAFETY: the caller gave `max` bytes; n + 1 <= max.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// `ucs_status_t ucs_str_to_memunits(const char *buf, void *dest)`: parses into a `size_t`.
///
/// # Safety
/// `buf` must be a C string and `dest` point to a `size_t`, or be NULL (refused).
#[no_mangle]
pub unsafe extern "C" fn ucs_str_to_memunits(buf: *const c_char, dest: *mut c_void) -> Status {
    if buf.is_null() || dest.is_null() {
        return UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: checked non-null; the caller passes a C string.
    let text = unsafe { CStr::from_ptr(buf) }.to_string_lossy();
    match parse(&text) {
        Ok(v) => {
            // SAFETY: the caller passes a pointer to a size_t.
            unsafe { dest.cast::<usize>().write_unaligned(v) };
            UCS_OK
        }
        Err(_) => UCS_ERR_INVALID_PARAM,
    }
}

/// `char *ucs_memunits_to_str(size_t value, char *buf, size_t max)`: formats into `buf`.
///
/// # Safety
/// `buf` must have room for `max` bytes.
#[no_mangle]
pub unsafe extern "C" fn ucs_memunits_to_str(
    value: usize,
    buf: *mut c_char,
    max: usize,
) -> *mut c_char {
    // SAFETY: forwarded from the caller.
    unsafe { copy_out(&format(value), buf, max) };
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_and_print_as_ucx_does() {
        assert_eq!(parse("8k"), Ok(8192));
        assert_eq!(parse("8KB"), Ok(8192));
        assert_eq!(parse("4m"), Ok(4 << 20));
        assert_eq!(parse("17"), Ok(17));
        assert_eq!(parse("3b"), Ok(3));
        assert_eq!(parse("inf"), Ok(MEMUNITS_INF));
        assert_eq!(parse("AUTO"), Ok(MEMUNITS_AUTO));
        for bad in [
            "",
            "k",
            "8x",
            "8kx",
            "8bb",
            "-1",
            "99999999999999999999t",
            "1.5k",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(format(8192), "8K");
        assert_eq!(format(3 << 20), "3M");
        assert_eq!(format(1000), "1000");
        assert_eq!(format(MEMUNITS_INF), "inf");
        let mut v = 0usize;
        // SAFETY: valid C string and destination.
        let s = unsafe { ucs_str_to_memunits(c"64k".as_ptr(), (&mut v as *mut usize).cast()) };
        assert_eq!((s, v), (UCS_OK, 65536));
        // SAFETY: NULL is refused.
        let s = unsafe { ucs_str_to_memunits(std::ptr::null(), (&mut v as *mut usize).cast()) };
        assert_eq!(s, UCS_ERR_INVALID_PARAM);
    }
}
