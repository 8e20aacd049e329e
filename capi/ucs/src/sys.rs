//! System queries and small helpers clients import: page size, CPUs and affinity, string
//! copies, the module loader and statistics root, and UCX's empty functions.

use crate::status::{codes::*, Status};
use std::ffi::{c_char, c_int, c_void};

/// `size_t ucs_get_page_size(void)`.
#[no_mangle]
pub extern "C" fn ucs_get_page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// `long ucs_sys_get_num_cpus(void)`: CPUs configured on the machine.
#[no_mangle]
pub extern "C" fn ucs_sys_get_num_cpus() -> libc::c_long {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }
}

/// `int ucs_sys_getaffinity(ucs_sys_cpuset_t *cpuset)`: the calling thread's CPUs; 0 on
/// success, -1 on error.
///
/// # Safety
/// `cpuset` must point to a `cpu_set_t`.
#[no_mangle]
pub unsafe extern "C" fn ucs_sys_getaffinity(cpuset: *mut libc::cpu_set_t) -> c_int {
    if cpuset.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a cpu_set_t of the size given.
    unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpuset) }
}

/// `int ucs_sys_setaffinity(ucs_sys_cpuset_t *cpuset)`: binds the calling thread; 0 on
/// success, -1 on error (logged).
///
/// # Safety
/// `cpuset` must point to a `cpu_set_t`.
#[no_mangle]
pub unsafe extern "C" fn ucs_sys_setaffinity(cpuset: *mut libc::cpu_set_t) -> c_int {
    if cpuset.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a cpu_set_t of the size given.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpuset) };
    if r < 0 {
        tracing::warn!(target: "ucx", "sched_setaffinity failed: {}", std::io::Error::last_os_error());
    }
    r
}

/// `void ucs_strncpy_zero(char *dest, const char *src, size_t max)`: copies at most `max - 1`
/// characters and always terminates.
///
/// # Safety
/// `dest` must have room for `max` bytes; `src` must be a C string.
#[no_mangle]
pub unsafe extern "C" fn ucs_strncpy_zero(dest: *mut c_char, src: *const c_char, max: usize) {
    if dest.is_null() || max == 0 {
        return;
    }
    if src.is_null() {
        // SAFETY: max >= 1.
        unsafe { *dest = 0 };
        return;
    }
    // SAFETY: forwarded from the caller; strncpy writes max - 1 bytes and we terminate.
    unsafe {
        libc::strncpy(dest, src, max - 1);
        *dest.add(max - 1) = 0;
    }
}

/// `void ucs_strncpy_safe(char *dest, const char *src, size_t len)`: as [`ucs_strncpy_zero`].
///
/// # Safety
/// As [`ucs_strncpy_zero`].
#[no_mangle]
pub unsafe extern "C" fn ucs_strncpy_safe(dest: *mut c_char, src: *const c_char, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { ucs_strncpy_zero(dest, src, len) }
}

/// `void ucs_load_modules(const char *framework, const char *modules, ucs_init_once_t *once,
/// unsigned flags)`: loads a framework's plug-in modules. rucx has none (its transports are
/// built in and it runs no GPU memory), so there is nothing to load; the call is logged at
/// debug level.
///
/// # Safety
/// `framework` must be NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn ucs_load_modules(
    framework: *const c_char,
    _modules: *const c_char,
    _init_once: *mut c_void,
    _flags: u32,
) {
    if !framework.is_null() {
        // SAFETY: the caller passes a C string.
        let name = unsafe { std::ffi::CStr::from_ptr(framework) }.to_string_lossy();
        tracing::debug!(target: "ucx", "ucs_load_modules({name}): rucx has no loadable modules");
    }
}

/// `ucs_stats_node_t *ucs_stats_get_root(void)`: NULL, statistics are not collected (as in a
/// UCX built without `--enable-stats`, Debian's).
#[no_mangle]
pub extern "C" fn ucs_stats_get_root() -> *mut c_void {
    std::ptr::null_mut()
}

/// `void ucs_empty_function(void)`.
#[no_mangle]
pub extern "C" fn ucs_empty_function() {}

/// `ucs_status_t ucs_empty_function_return_success(void)`.
#[no_mangle]
pub extern "C" fn ucs_empty_function_return_success() -> Status {
    UCS_OK
}

/// `ucs_status_t ucs_empty_function_return_unsupported(void)`.
#[no_mangle]
pub extern "C" fn ucs_empty_function_return_unsupported() -> Status {
    UCS_ERR_UNSUPPORTED
}

/// `int ucs_empty_function_return_zero(void)`.
#[no_mangle]
pub extern "C" fn ucs_empty_function_return_zero() -> c_int {
    0
}

/// `void ucs_empty_function_do_assert(void)`: reached only through a function pointer that
/// must never be called; logs an error (UCX asserts in debug builds).
#[no_mangle]
pub extern "C" fn ucs_empty_function_do_assert() {
    tracing::error!(target: "ucx", "ucs_empty_function_do_assert: a function that must not be called was called");
}

/// `uint64_t ucs_generate_uuid(uint64_t seed)`: a random 64-bit identifier mixed with `seed`.
#[no_mangle]
pub extern "C" fn ucs_generate_uuid(seed: u64) -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes into the 8-byte buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), 8, 0) };
    let random = if n == 8 {
        u64::from_ne_bytes(bytes)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ (u64::from(std::process::id()) << 32)
    };
    random ^ seed.rotate_left(17)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn system_queries_and_string_copies() {
        assert!(ucs_get_page_size() >= 4096);
        assert!(ucs_sys_get_num_cpus() >= 1);
        // SAFETY: a zeroed cpu_set_t.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid set.
        unsafe {
            assert_eq!(ucs_sys_getaffinity(&mut set), 0);
            assert_eq!(ucs_sys_setaffinity(&mut set), 0);
        }
        let mut buf = [1 as c_char; 4];
        // SAFETY: 4-byte buffer, C string source.
        unsafe {
            ucs_strncpy_zero(buf.as_mut_ptr(), c"abcdef".as_ptr(), buf.len());
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "abc");
        }
        assert_ne!(ucs_generate_uuid(1), ucs_generate_uuid(1));
        assert!(ucs_stats_get_root().is_null());
    }
}
