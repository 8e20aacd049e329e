//! The data objects UCX's clients import from libucs, with UCX 1.13's sizes.
//!
//! An executable that reads one of these (`ucx_perftest`, programs using the logging macros)
//! gets a copy in its own `.bss` made at load time from this library's object (`readelf -r`
//! shows `R_X86_64_COPY`). The loader copies the smaller of the two sizes and warns whenever
//! the library's object is the larger, so each size here is UCX 1.13's, the smallest of the
//! releases whose clients run on rucx (UCX 1.22's `io_demo` imports larger ones and gets
//! 1.13's entries, the rest of its copy zero, without a warning). Mutable ones are written
//! only from C (`cshim.c`), which reaches the client's copy through the GOT.

use std::ffi::c_char;

/// An array of C strings that may be shared between threads (the strings are static).
#[repr(transparent)]
pub struct Names<const N: usize>(pub [*const c_char; N]);

// SAFETY: the pointers are to static, immutable NUL-terminated strings.
unsafe impl<const N: usize> Sync for Names<N> {}

impl<const N: usize> Names<N> {
    /// The name at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&'static std::ffi::CStr> {
        let p = *self.0.get(index)?;
        // SAFETY: every non-null entry points to a static NUL-terminated string.
        (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) })
    }
}

/// `ucs_log_component_config_t`: a level, a 16-byte name, a source-file filter (32 bytes).
#[repr(C)]
pub struct LogComponent {
    /// `ucs_log_level_t`: FATAL 0, ERROR 1, WARN 2, DIAG 3, INFO 4, DEBUG 5, TRACE 6 …
    pub log_level: i32,
    /// The component's name.
    pub name: [c_char; 16],
    /// Glob of source files whose messages are shown.
    pub file_filter: *const c_char,
}

/// `ucs_global_opts_t` (360 bytes) as far as clients read it: the logging fields the
/// `ucs_error`/`ucs_print` macros test; the rest is reserved and zero.
#[repr(C)]
pub struct GlobalOpts {
    /// The default log component.
    pub log_component: LogComponent,
    /// Log file name ("" for stderr).
    pub log_file: *const c_char,
    /// Largest log file.
    pub log_file_size: usize,
    /// Log files kept when rotating.
    pub log_file_rotate: u32,
    /// Largest formatted message.
    pub log_buffer_size: usize,
    /// Packet bytes printed by data tracing.
    pub log_data_size: usize,
    /// Whether `ucs_print` prints.
    pub log_print_enable: i32,
    /// The options rucx does not use.
    pub reserved: [u8; 360 - 76],
}

const fn name16(s: &[u8]) -> [c_char; 16] {
    let mut out = [0 as c_char; 16];
    let mut i = 0;
    while i < s.len() && i < 15 {
        out[i] = s[i] as c_char;
        i += 1;
    }
    out
}

/// `ucs_global_opts`: logging at WARN until the library's constructor ([`crate::log`]) applies
/// `RUCX_LOG_LEVEL` / `UCX_LOG_LEVEL`.
#[no_mangle]
pub static mut ucs_global_opts: GlobalOpts = GlobalOpts {
    log_component: LogComponent {
        log_level: 2,
        name: name16(b"UCX"),
        file_filter: c"*".as_ptr(),
    },
    log_file: c"".as_ptr(),
    log_file_size: 0,
    log_file_rotate: 0,
    log_buffer_size: 1024,
    log_data_size: 0,
    log_print_enable: 0,
    reserved: [0; 360 - 76],
};

/// `ucs_arch_x86_enable_rdtsc` (`ucs_ternary_auto_value_t`: NO 0, YES 1, TRY 2): TRY until
/// `ucs_x86_init_tsc_freq` decides (see [`crate::clock`]).
#[no_mangle]
pub static mut ucs_arch_x86_enable_rdtsc: i32 = 2;

/// `ucs_memory_type_names`: host, cuda, cuda-managed, rocm, rocm-managed, unknown (=
/// `UCS_MEMORY_TYPE_LAST`), then NULL: 7 pointers.
#[no_mangle]
pub static ucs_memory_type_names: Names<7> = Names([
    c"host".as_ptr(),
    c"cuda".as_ptr(),
    c"cuda-managed".as_ptr(),
    c"rocm".as_ptr(),
    c"rocm-managed".as_ptr(),
    c"unknown".as_ptr(),
    std::ptr::null(),
]);

/// `ucs_memory_type_descs`: one description per memory type and LAST: 6 pointers.
#[no_mangle]
pub static ucs_memory_type_descs: Names<6> = Names([
    c"System memory".as_ptr(),
    c"NVIDIA GPU memory".as_ptr(),
    c"NVIDIA GPU managed/unified memory".as_ptr(),
    c"AMD/ROCm GPU memory".as_ptr(),
    c"AMD/ROCm GPU managed memory".as_ptr(),
    c"unknown".as_ptr(),
]);

/// `ucs_thread_mode_names`: single, serialized, multi.
#[no_mangle]
pub static ucs_thread_mode_names: Names<3> = Names([
    c"single".as_ptr(),
    c"serialized".as_ptr(),
    c"multi".as_ptr(),
]);

/// `ucs_async_mode_names`: signal, thread_spinlock, thread_mutex, poll.
#[no_mangle]
pub static ucs_async_mode_names: Names<4> = Names([
    c"signal".as_ptr(),
    c"thread_spinlock".as_ptr(),
    c"thread_mutex".as_ptr(),
    c"poll".as_ptr(),
]);

/// `ucs_log_level_names`, indexed by `ucs_log_level_t` (PRINT is 13, after LAST).
#[no_mangle]
pub static ucs_log_level_names: Names<14> = Names([
    c"FATAL".as_ptr(),
    c"ERROR".as_ptr(),
    c"WARN".as_ptr(),
    c"DIAG".as_ptr(),
    c"INFO".as_ptr(),
    c"DEBUG".as_ptr(),
    c"TRACE".as_ptr(),
    c"REQ".as_ptr(),
    c"DATA".as_ptr(),
    c"ASYNC".as_ptr(),
    c"FUNC".as_ptr(),
    c"POLL".as_ptr(),
    c"".as_ptr(),
    c"PRINT".as_ptr(),
]);

/// `ucs_config_global_list` (`ucs_list_link_t`, 16 bytes): the list of configuration
/// tables, empty (pointing to itself once the library's constructor ran: see
/// [`init_config_list`]); rucx keeps its tables in its own registry.
#[no_mangle]
pub static mut ucs_config_global_list: [*mut std::ffi::c_void; 2] = [std::ptr::null_mut(); 2];

extern "C" {
    fn rucx_c_init_config_list();
    fn rucx_c_set_log_level(level: i32);
    fn rucx_c_get_log_level() -> i32;
    fn rucx_c_set_rdtsc(mode: i32);
    fn rucx_c_get_rdtsc() -> i32;
}

/// Makes `ucs_config_global_list` an empty list (pointing to itself, in the client's copy
/// when it made one).
pub fn init_config_list() {
    // SAFETY: two pointer stores through the C accessor.
    unsafe { rucx_c_init_config_list() }
}

/// Sets the global log level (in the client's copy of `ucs_global_opts` when it has one).
pub fn set_log_level(level: i32) {
    // SAFETY: a plain store through the C accessor.
    unsafe { rucx_c_set_log_level(level) }
}

/// The global log level.
pub fn log_level() -> i32 {
    // SAFETY: a plain load through the C accessor.
    unsafe { rucx_c_get_log_level() }
}

/// Sets `ucs_arch_x86_enable_rdtsc` (in the client's copy when it has one).
pub fn set_rdtsc(mode: i32) {
    // SAFETY: a plain store through the C accessor.
    unsafe { rucx_c_set_rdtsc(mode) }
}

/// `ucs_arch_x86_enable_rdtsc`.
pub fn rdtsc() -> i32 {
    // SAFETY: a plain load through the C accessor.
    unsafe { rucx_c_get_rdtsc() }
}
