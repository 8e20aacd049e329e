//! Memory tracking (`ucs/debug/memtrack.h`): clients report their allocations by name, and at
//! exit the totals per name are written to `RUCX_MEMTRACK_DEST`, else `UCX_MEMTRACK_DEST`
//! (`stdout`, `stderr` or a file path). Without either variable tracking is off and the calls
//! cost a relaxed load.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// Counters of one allocation name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Bytes allocated now.
    pub size: usize,
    /// Most bytes allocated at once.
    pub peak_size: usize,
    /// Allocations now.
    pub count: usize,
    /// Most allocations at once.
    pub peak_count: usize,
}

#[derive(Default)]
struct Tracker {
    /// Live allocations: address -> (size, name).
    live: HashMap<usize, (usize, String)>,
    by_name: HashMap<String, Entry>,
}

static TRACKER: Mutex<Option<Tracker>> = Mutex::new(None);
/// 0 = not decided, 1 = off, 2 = on.
static STATE: AtomicU8 = AtomicU8::new(0);

fn destination() -> Option<String> {
    ["RUCX_MEMTRACK_DEST", "UCX_MEMTRACK_DEST"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .filter(|d| !d.is_empty() && d != "none")
}

extern "C" fn dump_at_exit() {
    if let Some(dest) = destination() {
        let text = report();
        let written = match dest.as_str() {
            "stdout" => std::io::stdout().write_all(text.as_bytes()),
            "stderr" => std::io::stderr().write_all(text.as_bytes()),
            path => std::fs::write(path, text.as_bytes()),
        };
        if let Err(e) = written {
            eprintln!("ucs memtrack: cannot write the report to {dest}: {e}");
        }
    }
}

/// Whether tracking is on (decided once, from the environment).
pub fn is_enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = destination().is_some();
            if STATE
                .compare_exchange(
                    0,
                    if on { 2 } else { 1 },
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
                && on
            {
                // SAFETY: registering a plain extern "C" function with atexit.
                unsafe { libc::atexit(dump_at_exit) };
            }
            STATE.load(Ordering::Relaxed) == 2
        }
    }
}

fn with_tracker<R>(f: impl FnOnce(&mut Tracker) -> R) -> R {
    let mut t = TRACKER.lock().unwrap_or_else(|p| p.into_inner());
    f(t.get_or_insert_with(Tracker::default))
}

/// Records an allocation.
pub fn allocated(ptr: usize, size: usize, name: &str) {
    with_tracker(|t| {
        if let Some((old_size, old_name)) = t.live.insert(ptr, (size, name.to_owned())) {
            tracing::warn!(target: "ucx", "memtrack: {ptr:#x} ({old_name}, {old_size} bytes) reported allocated twice");
        }
        let e = t.by_name.entry(name.to_owned()).or_default();
        e.size += size;
        e.count += 1;
        e.peak_size = e.peak_size.max(e.size);
        e.peak_count = e.peak_count.max(e.count);
    });
}

/// Records a release; an address never reported is logged at debug level and ignored.
pub fn releasing(ptr: usize) {
    with_tracker(|t| match t.live.remove(&ptr) {
        Some((size, name)) => {
            if let Some(e) = t.by_name.get_mut(&name) {
                e.size -= size;
                e.count -= 1;
            }
        }
        None => tracing::debug!(target: "ucx", "memtrack: release of untracked {ptr:#x}"),
    })
}

/// The counters of `name`.
pub fn entry(name: &str) -> Option<Entry> {
    with_tracker(|t| t.by_name.get(name).cloned())
}

/// The report written at exit: one line per name, sorted.
pub fn report() -> String {
    with_tracker(|t| {
        let mut names: Vec<_> = t.by_name.iter().collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        let mut out =
            String::from("# memtrack: name  current_bytes peak_bytes current_count peak_count\n");
        for (name, e) in names {
            out += &format!(
                "{name:32} {:>12} {:>12} {:>8} {:>8}\n",
                e.size, e.peak_size, e.count, e.peak_count
            );
        }
        out
    })
}

fn name_of(name: *const c_char) -> String {
    if name.is_null() {
        return "<unnamed>".into();
    }
    // SAFETY: the caller passes a C string.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// `void ucs_memtrack_allocated(void *ptr, size_t size, const char *name)`.
#[no_mangle]
pub extern "C" fn ucs_memtrack_allocated(ptr: *mut c_void, size: usize, name: *const c_char) {
    crate::guarded("ucs_memtrack_allocated", (), || {
        if !ptr.is_null() && is_enabled() {
            allocated(ptr as usize, size, &name_of(name));
        }
    })
}

/// `void ucs_memtrack_releasing(void *ptr)`.
#[no_mangle]
pub extern "C" fn ucs_memtrack_releasing(ptr: *mut c_void) {
    crate::guarded("ucs_memtrack_releasing", (), || {
        if !ptr.is_null() && is_enabled() {
            releasing(ptr as usize);
        }
    })
}

/// `int ucs_memtrack_is_enabled(void)`.
#[no_mangle]
pub extern "C" fn ucs_memtrack_is_enabled() -> i32 {
    is_enabled() as i32
}

/// `void *ucs_malloc(size_t size, const char *name)`: `malloc`, tracked.
#[no_mangle]
pub extern "C" fn ucs_malloc(size: usize, name: *const c_char) -> *mut c_void {
    // SAFETY: plain malloc.
    let p = unsafe { libc::malloc(size) };
    ucs_memtrack_allocated(p, size, name);
    p
}

/// `void *ucs_calloc(size_t nmemb, size_t size, const char *name)`: `calloc`, tracked.
#[no_mangle]
pub extern "C" fn ucs_calloc(nmemb: usize, size: usize, name: *const c_char) -> *mut c_void {
    // SAFETY: plain calloc (it checks the product for overflow).
    let p = unsafe { libc::calloc(nmemb, size) };
    ucs_memtrack_allocated(p, nmemb.saturating_mul(size), name);
    p
}

/// `void *ucs_realloc(void *ptr, size_t size, const char *name)`: `realloc`, tracked.
///
/// # Safety
/// `ptr` must be NULL or from the malloc family.
#[no_mangle]
pub unsafe extern "C" fn ucs_realloc(
    ptr: *mut c_void,
    size: usize,
    name: *const c_char,
) -> *mut c_void {
    ucs_memtrack_releasing(ptr);
    // SAFETY: forwarded from the caller.
    let p = unsafe { libc::realloc(ptr, size) };
    ucs_memtrack_allocated(p, size, name);
    p
}

/// `char *ucs_strdup(const char *s, const char *name)`: `strdup`, tracked.
///
/// # Safety
/// `s` must be a C string (NULL gives NULL).
#[no_mangle]
pub unsafe extern "C" fn ucs_strdup(s: *const c_char, name: *const c_char) -> *mut c_char {
    if s.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: forwarded from the caller.
    let p = unsafe { libc::strdup(s) };
    let len = if p.is_null() {
        0
    } else {
        // SAFETY: p is the NUL-terminated copy of s.
        (unsafe { libc::strlen(p) }) + 1
    };
    ucs_memtrack_allocated(p.cast(), len, name);
    p
}

/// `void ucs_free(void *ptr)`: `free`, tracked.
///
/// # Safety
/// `ptr` must be NULL or from the malloc family.
#[no_mangle]
pub unsafe extern "C" fn ucs_free(ptr: *mut c_void) {
    ucs_memtrack_releasing(ptr);
    // SAFETY: forwarded from the caller.
    unsafe { libc::free(ptr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_follow_allocations_and_releases() {
        allocated(0x1000, 100, "test-a");
        allocated(0x2000, 50, "test-a");
        releasing(0x1000);
        releasing(0x9999); // unknown: ignored
        let e = entry("test-a").unwrap();
        assert_eq!(
            e,
            Entry {
                size: 50,
                peak_size: 150,
                count: 1,
                peak_count: 2
            }
        );
        releasing(0x2000);
        assert_eq!(entry("test-a").unwrap().size, 0);
        assert!(report().contains("test-a"));
    }
}
