//! String sets (`ucs/datastruct/string_set.h`): a set of strings printed sorted, as UCX's
//! tools collect transport and device names.
//!
//! The client's `ucs_string_set_t` is UCX's khash set (40 bytes): `n_buckets`, `size`,
//! `n_occupied`, `upper_bound` (u32 each), then three pointers. The header-inline
//! `ucs_string_set_is_empty` reads `size`, which is kept current; the strings live in a Rust
//! set whose pointer takes the first pointer slot, and `n_buckets` stays 0, so the khash
//! iteration macros see no buckets.

use crate::status::{codes::*, Status};
use std::collections::BTreeSet;
use std::ffi::{c_char, c_void, CStr, CString};

/// The client's `ucs_string_set_t`, as rucx uses it.
#[repr(C)]
pub struct StringSet {
    n_buckets: u32,
    size: u32,
    n_occupied: u32,
    upper_bound: u32,
    set: *mut BTreeSet<CString>,
    _keys: *mut c_void,
    _vals: *mut c_void,
}

/// `ucs_string_buffer_appendf` (written in C), callable with its variadic arguments.
type Appendf = unsafe extern "C" fn(strb: *mut c_void, fmt: *const c_char, ...);

fn appendf() -> Appendf {
    let jump: extern "C" fn() = crate::cvararg::ucs_string_buffer_appendf;
    // SAFETY: the exported name is a jump to the C function, whose signature is Appendf's;
    // the jump passes every argument register and the stack through unchanged.
    unsafe { std::mem::transmute::<extern "C" fn(), Appendf>(jump) }
}

/// The Rust set of an initialized string set.
///
/// # Safety
/// `sset` must be NULL or point to a client's `ucs_string_set_t`.
unsafe fn set_of<'a>(sset: *const StringSet) -> Option<&'a mut BTreeSet<CString>> {
    // SAFETY: forwarded from the caller; `set` is NULL or from Box::into_raw in init.
    unsafe { sset.as_ref().and_then(|s| s.set.as_mut()) }
}

/// `void ucs_string_set_init(ucs_string_set_t *sset)`: an empty set.
///
/// # Safety
/// `sset` must point to a client's `ucs_string_set_t` (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn ucs_string_set_init(sset: *mut StringSet) {
    if sset.is_null() {
        return;
    }
    // SAFETY: checked non-null; the client's 40-byte struct.
    unsafe {
        sset.write(StringSet {
            n_buckets: 0,
            size: 0,
            n_occupied: 0,
            upper_bound: 0,
            set: Box::into_raw(Box::default()),
            _keys: std::ptr::null_mut(),
            _vals: std::ptr::null_mut(),
        })
    };
}

/// `void ucs_string_set_cleanup(ucs_string_set_t *sset)`: frees its strings.
///
/// # Safety
/// `sset` must be initialized (or NULL).
#[no_mangle]
pub unsafe extern "C" fn ucs_string_set_cleanup(sset: *mut StringSet) {
    // SAFETY: forwarded from the caller.
    let Some(s) = (unsafe { sset.as_mut() }) else {
        return;
    };
    if !s.set.is_null() {
        // SAFETY: made by Box::into_raw in init.
        drop(unsafe { Box::from_raw(s.set) });
    }
    s.set = std::ptr::null_mut();
    s.size = 0;
}

/// `ucs_status_t ucs_string_set_add(ucs_string_set_t *sset, const char *str)`: adds a copy.
///
/// # Safety
/// `sset` initialized; `str` a C string.
#[no_mangle]
pub unsafe extern "C" fn ucs_string_set_add(sset: *mut StringSet, s: *const c_char) -> Status {
    crate::guarded("ucs_string_set_add", UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded from the caller.
        let (Some(set), false) = (unsafe { set_of(sset) }, s.is_null()) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: checked non-null; a C string.
        set.insert(unsafe { CStr::from_ptr(s) }.to_owned());
        // SAFETY: the client's struct (set_of checked it).
        unsafe { (*sset).size = set.len() as u32 };
        UCS_OK
    })
}

/// `int ucs_string_set_contains(const ucs_string_set_t *sset, const char *str)`.
///
/// # Safety
/// `sset` initialized; `str` a C string.
#[no_mangle]
pub unsafe extern "C" fn ucs_string_set_contains(sset: *const StringSet, s: *const c_char) -> i32 {
    // SAFETY: forwarded from the caller.
    match (unsafe { set_of(sset) }, s.is_null()) {
        // SAFETY: checked non-null; a C string.
        (Some(set), false) => set.contains(unsafe { CStr::from_ptr(s) }) as i32,
        _ => 0,
    }
}

/// `ucs_status_t ucs_string_set_print_sorted(const ucs_string_set_t *sset,
/// ucs_string_buffer_t *strb, const char *sep)`: appends the strings in byte order with
/// `sep` between them.
///
/// # Safety
/// `sset` initialized; `strb` a client's string buffer; `sep` a C string or NULL.
#[no_mangle]
pub unsafe extern "C" fn ucs_string_set_print_sorted(
    sset: *const StringSet,
    strb: *mut c_void,
    sep: *const c_char,
) -> Status {
    // SAFETY: forwarded from the caller.
    let (Some(set), false) = (unsafe { set_of(sset) }, strb.is_null()) else {
        return UCS_ERR_INVALID_PARAM;
    };
    let append = appendf();
    for (i, s) in set.iter().enumerate() {
        if i > 0 && !sep.is_null() {
            // SAFETY: a live string buffer and a C string, formatted by "%s".
            unsafe { append(strb, c"%s".as_ptr(), sep) };
        }
        // SAFETY: as above.
        unsafe { append(strb, c"%s".as_ptr(), s.as_ptr()) };
    }
    UCS_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_keeps_one_copy_of_each_string_and_prints_them_sorted() {
        // SAFETY: all-zero is a valid (uninitialized) struct; init fills it.
        let mut s: StringSet = unsafe { std::mem::zeroed() };
        let mut buf = [0u8; 64];
        // The string buffer's C layout: buffer, length, capacity | fixed flag.
        let mut strb: [usize; 3] = [buf.as_mut_ptr() as usize, 0, buf.len() | 1];
        // SAFETY: valid set, strings and buffer throughout.
        unsafe {
            ucs_string_set_init(&mut s);
            assert_eq!(ucs_string_set_add(&mut s, c"tcp".as_ptr()), UCS_OK);
            assert_eq!(ucs_string_set_add(&mut s, c"posix".as_ptr()), UCS_OK);
            assert_eq!(ucs_string_set_add(&mut s, c"tcp".as_ptr()), UCS_OK);
            assert_eq!(s.size, 2, "the size field the inline is_empty reads");
            assert_eq!(ucs_string_set_contains(&s, c"posix".as_ptr()), 1);
            assert_eq!(ucs_string_set_contains(&s, c"self".as_ptr()), 0);
            let st = ucs_string_set_print_sorted(&s, strb.as_mut_ptr().cast(), c",".as_ptr());
            assert_eq!(st, UCS_OK);
            assert_eq!(
                CStr::from_ptr(buf.as_ptr().cast()).to_str().unwrap(),
                "posix,tcp"
            );
            ucs_string_set_cleanup(&mut s);
            assert_eq!(s.size, 0);
            assert_eq!(
                ucs_string_set_add(&mut s, c"x".as_ptr()),
                UCS_ERR_INVALID_PARAM
            );
        }
    }
}
