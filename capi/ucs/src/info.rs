//! What `ucx_info` asks libucs about the machine and the configuration: CPU vendor and
//! model, system-device topology, memcpy limits, and the list of configuration variables.

use crate::status::{codes::*, Status};
use std::ffi::{c_char, c_void, CString};

/// `ucs_cpu_vendor_t` values.
const VENDOR_UNKNOWN: i32 = 0;
const VENDOR_INTEL: i32 = 1;
const VENDOR_AMD: i32 = 2;
const VENDOR_ZHAOXIN: i32 = 6;

/// `ucs_cpu_vendor_t ucs_arch_get_cpu_vendor(void)`: from the CPUID vendor string.
#[no_mangle]
pub extern "C" fn ucs_arch_get_cpu_vendor() -> i32 {
    #[cfg(target_arch = "x86_64")]
    {
        let r = core::arch::x86_64::__cpuid(0);
        let mut v = [0u8; 12];
        v[..4].copy_from_slice(&r.ebx.to_le_bytes());
        v[4..8].copy_from_slice(&r.edx.to_le_bytes());
        v[8..].copy_from_slice(&r.ecx.to_le_bytes());
        match &v {
            b"GenuineIntel" => VENDOR_INTEL,
            b"AuthenticAMD" => VENDOR_AMD,
            b"CentaurHauls" | b"  Shanghai  " => VENDOR_ZHAOXIN,
            _ => VENDOR_UNKNOWN,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    VENDOR_UNKNOWN
}

/// `ucs_cpu_model_t ucs_arch_get_cpu_model(void)`: `UCS_CPU_MODEL_UNKNOWN` (0); rucx tunes
/// nothing per CPU model.
#[no_mangle]
pub extern "C" fn ucs_arch_get_cpu_model() -> i32 {
    0
}

/// `void ucs_arch_print_memcpy_limits(ucs_arch_global_opts_t *config)`: rucx copies with the
/// C library's `memcpy` at every size (no built-in `rep movsb` window), which it prints.
#[no_mangle]
pub extern "C" fn ucs_arch_print_memcpy_limits(_config: *mut c_void) {
    println!("# Memcpy: rucx copies with the C library's memcpy at every size");
}

/// `unsigned ucs_topo_num_devices(void)`: 0, rucx registers no system devices.
#[no_mangle]
pub extern "C" fn ucs_topo_num_devices() -> u32 {
    0
}

/// `const char *ucs_topo_sys_device_get_name(ucs_sys_device_t)`: `<unknown>` (no device is
/// registered).
#[no_mangle]
pub extern "C" fn ucs_topo_sys_device_get_name(_sys_dev: u8) -> *const c_char {
    c"<unknown>".as_ptr()
}

/// `ucs_sys_dev_distance_t`.
#[repr(C)]
pub struct Distance {
    /// Seconds.
    pub latency: f64,
    /// Bytes per second.
    pub bandwidth: f64,
}

/// `ucs_status_t ucs_topo_get_distance(dev1, dev2, ucs_sys_dev_distance_t *distance)`: no
/// added latency and unlimited bandwidth (UCX's answer for unknown devices).
///
/// # Safety
/// `distance` must point to a `ucs_sys_dev_distance_t` (NULL is refused).
#[no_mangle]
pub unsafe extern "C" fn ucs_topo_get_distance(
    _dev1: u8,
    _dev2: u8,
    distance: *mut Distance,
) -> Status {
    if distance.is_null() {
        return UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: checked non-null.
    unsafe {
        distance.write(Distance {
            latency: 0.0,
            bandwidth: f64::MAX,
        })
    };
    UCS_OK
}

/// `UCS_CONFIG_PRINT_DOC`.
const PRINT_DOC: u32 = 1 << 2;

/// The text `ucs_config_parser_print_all_opts` writes: every configuration variable rucx's
/// registry knows in this process, as `NAME=value` (with `# doc` lines when asked).
pub fn all_opts_text(flags: u32) -> String {
    let mut out = String::new();
    for v in ucs::config::all_vars() {
        if flags & PRINT_DOC != 0 {
            out += &format!("#\n# {}\n#\n", v.doc);
        }
        out += &format!("{}={}\n", v.env_name(), v.raw());
    }
    out += "# (rucx-info -c lists the variables of every layer)\n";
    out
}

/// `void ucs_config_parser_print_all_opts(FILE *stream, const char *prefix,
/// ucs_config_print_flags_t flags, ucs_list_link_t *config_list)`: see [`all_opts_text`]
/// (rucx's variables are `RUCX_*`; `prefix` is ignored).
///
/// # Safety
/// `stream` must be an open `FILE *` (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn ucs_config_parser_print_all_opts(
    stream: *mut libc::FILE,
    _prefix: *const c_char,
    flags: u32,
    _config_list: *mut c_void,
) {
    crate::guarded("ucs_config_parser_print_all_opts", (), || {
        if stream.is_null() {
            return;
        }
        let text = CString::new(all_opts_text(flags).replace('\0', " ")).unwrap_or_default();
        // SAFETY: an open stream and a NUL-terminated string.
        unsafe { libc::fputs(text.as_ptr(), stream) };
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn machine_and_configuration_answers() {
        assert!((0..=7).contains(&ucs_arch_get_cpu_vendor()));
        assert_eq!(ucs_topo_num_devices(), 0);
        // SAFETY: a static string.
        let name = unsafe { CStr::from_ptr(ucs_topo_sys_device_get_name(0)) };
        assert_eq!(name.to_str().unwrap(), "<unknown>");
        let mut d = Distance {
            latency: 1.0,
            bandwidth: 0.0,
        };
        // SAFETY: a valid distance.
        assert_eq!(unsafe { ucs_topo_get_distance(0, 1, &mut d) }, UCS_OK);
        assert_eq!((d.latency, d.bandwidth), (0.0, f64::MAX));
        let text = all_opts_text(PRINT_DOC);
        assert!(text.contains("RUCX_LOG_LEVEL="), "{text}");
    }
}
