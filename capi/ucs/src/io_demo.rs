//! The libucs functions and data UCX 1.22's `io_demo` imports beyond `ucs_status_string`:
//! `ucs_sockaddr_str`, `ucs_str_to_memunits`, `ucs_memtrack_allocated` /
//! `ucs_memtrack_releasing`, and the `ucs_memory_type_names` table.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

/// A table of C string pointers that may live in a `static` (the strings are static).
#[repr(transparent)]
pub struct NameTable<const N: usize>(pub [*const c_char; N]);
// SAFETY: the pointers are to static, immutable C strings.
unsafe impl<const N: usize> Sync for NameTable<N> {}

/// `const char *ucs_memory_type_names[]`: the names of `ucs_memory_type_t` in UCX 1.13's order,
/// then `"unknown"` (`UCS_MEMORY_TYPE_LAST`) and NULL, 56 bytes as Debian's clients (built
/// against 1.13) copy it. A client built against a later header copies these 7 entries (the
/// loader warns that the sizes differ): host names match, which is all rucx moves.
#[no_mangle]
pub static ucs_memory_type_names: NameTable<7> = NameTable([
    c"host".as_ptr(),
    c"cuda".as_ptr(),
    c"cuda-managed".as_ptr(),
    c"rocm".as_ptr(),
    c"rocm-managed".as_ptr(),
    c"unknown".as_ptr(),
    std::ptr::null(),
]);

/// `UCS_MEMUNITS_INF`.
const MEMUNITS_INF: usize = usize::MAX;
/// `UCS_MEMUNITS_AUTO`.
const MEMUNITS_AUTO: usize = usize::MAX - 1;

/// Parses UCX's memory units: a number with an optional `b`, `k`, `m`, `g`, `t` suffix (powers
/// of 1024, optionally followed by `b`), `inf` or `auto`.
pub fn parse_memunits(s: &str) -> Option<usize> {
    let t = s.trim().to_ascii_lowercase();
    match t.as_str() {
        "inf" => return Some(MEMUNITS_INF),
        "auto" => return Some(MEMUNITS_AUTO),
        _ => {}
    }
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = t[digits.len()..].trim_end_matches('b');
    let shift = match suffix {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    let n: usize = digits.parse().ok()?;
    n.checked_mul(1usize << shift)
}

/// `ucs_status_t ucs_str_to_memunits(const char *buf, void *dest)`: `UCS_OK` and the value in
/// `*(size_t *)dest`, or `UCS_ERR_INVALID_PARAM` for text that is not memory units.
///
/// # Safety
/// `buf` a C string, `dest` a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn ucs_str_to_memunits(buf: *const c_char, dest: *mut c_void) -> i8 {
    if buf.is_null() || dest.is_null() {
        return super::codes::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's C string.
    let s = unsafe { CStr::from_ptr(buf) }.to_string_lossy();
    match parse_memunits(&s) {
        Some(v) => {
            // SAFETY: the caller's size_t.
            unsafe { (dest as *mut usize).write_unaligned(v) };
            super::codes::UCS_OK
        }
        None => super::codes::UCS_ERR_INVALID_PARAM,
    }
}

/// The text of a socket address (`a.b.c.d:port`, `[v6]:port`), from the bytes of a
/// `struct sockaddr` (family first, in host order).
///
/// # Safety
/// `sa` valid for a `sockaddr_in` or `sockaddr_in6` as its family says.
unsafe fn sockaddr_text(sa: *const u8) -> String {
    // SAFETY: the family is the first two bytes of every sockaddr.
    let family = unsafe { (sa as *const u16).read_unaligned() };
    // SAFETY: as the family says, per the contract.
    unsafe {
        let port = u16::from_be_bytes([*sa.add(2), *sa.add(3)]);
        match family {
            2 => {
                let ip = std::net::Ipv4Addr::new(*sa.add(4), *sa.add(5), *sa.add(6), *sa.add(7));
                format!("{ip}:{port}")
            }
            10 => {
                let mut b = [0u8; 16];
                std::ptr::copy_nonoverlapping(sa.add(8), b.as_mut_ptr(), 16);
                format!("[{}]:{port}", std::net::Ipv6Addr::from(b))
            }
            f => format!("<address family {f}>"),
        }
    }
}

/// `const char *ucs_sockaddr_str(const struct sockaddr *sock_addr, char *str, size_t
/// max_size)`: writes the address as text into `str` (cut to `max_size` with its NUL) and
/// gives `str`.
///
/// # Safety
/// `sock_addr` NULL or a valid IPv4/IPv6 socket address; `str` holds `max_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ucs_sockaddr_str(
    sock_addr: *const c_void,
    str: *mut c_char,
    max_size: usize,
) -> *const c_char {
    if str.is_null() || max_size == 0 {
        return str;
    }
    let text = if sock_addr.is_null() {
        "<null>".to_string()
    } else {
        // SAFETY: forwarded contract.
        unsafe { sockaddr_text(sock_addr as *const u8) }
    };
    let n = text.len().min(max_size - 1);
    // SAFETY: the caller's buffer of `max_size` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), str as *mut u8, n);
        *str.add(n) = 0;
    }
    str
}

/// Allocations reported to memtrack while `UCX_MEMTRACK_DEST` is set: address → (bytes, name).
static TRACKED: Mutex<Option<HashMap<usize, (usize, String)>>> = Mutex::new(None);

fn memtrack_on() -> bool {
    std::env::var_os("UCX_MEMTRACK_DEST").is_some_and(|v| !v.is_empty())
}

/// `void ucs_memtrack_allocated(void *ptr, size_t size, const char *name)`: records an
/// allocation when memory tracking is on (`UCX_MEMTRACK_DEST` set); nothing otherwise.
///
/// # Safety
/// `name` NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn ucs_memtrack_allocated(
    ptr: *mut c_void,
    size: usize,
    name: *const c_char,
) {
    if ptr.is_null() || !memtrack_on() {
        return;
    }
    let name = if name.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's C string.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    let mut t = TRACKED.lock().unwrap_or_else(|p| p.into_inner());
    t.get_or_insert_with(HashMap::new)
        .insert(ptr as usize, (size, name));
}

/// `void ucs_memtrack_releasing(void *ptr)`: forgets a tracked allocation.
#[no_mangle]
pub extern "C" fn ucs_memtrack_releasing(ptr: *mut c_void) {
    let mut t = TRACKED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = t.as_mut() {
        m.remove(&(ptr as usize));
    }
}

/// Allocations tracked and not released: (count, bytes).
pub fn memtrack_outstanding() -> (usize, usize) {
    let t = TRACKED.lock().unwrap_or_else(|p| p.into_inner());
    t.as_ref()
        .map_or((0, 0), |m| (m.len(), m.values().map(|v| v.0).sum()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memunits_and_addresses() {
        assert_eq!(parse_memunits("64k"), Some(65536));
        assert_eq!(parse_memunits("1MB"), Some(1 << 20));
        assert_eq!(parse_memunits("100"), Some(100));
        assert_eq!(parse_memunits("inf"), Some(usize::MAX));
        assert_eq!(parse_memunits("lots"), None);
        let mut sa = [0u8; 16];
        sa[..2].copy_from_slice(&2u16.to_ne_bytes());
        sa[2..4].copy_from_slice(&8080u16.to_be_bytes());
        sa[4..8].copy_from_slice(&[127, 0, 0, 1]);
        let mut out = [0 as c_char; 32];
        // SAFETY: local buffers.
        let s =
            unsafe { CStr::from_ptr(ucs_sockaddr_str(sa.as_ptr().cast(), out.as_mut_ptr(), 32)) };
        assert_eq!(s.to_str().unwrap(), "127.0.0.1:8080");
    }
}
