//! Memory types as the client's header numbers them.
//!
//! `ucs_memory_type_t` grew between UCX releases: 1.13 has host, cuda, cuda-managed, rocm,
//! rocm-managed and `UNKNOWN` = 5; 1.14 and later insert rdma (5) and Intel ZE host, device and
//! managed memory (6-8), and later Gaudi (9), so `UNKNOWN` is 9 or 10 there. The header a
//! client was built with shows in the API version it passes to `ucp_init_version`, which
//! [`set_client_minor`] records. rucx moves memory the CPU can read and write: the kinds the
//! header's `UCS_MEMORY_TYPES_CPU_ACCESSIBLE` names (host, ROCm managed, ZE host and managed),
//! and memory of unknown type (which rucx treats as host memory, as Mercury passes it for its
//! buffers).

use std::ffi::c_uint;
use std::sync::atomic::{AtomicU32, Ordering};

/// API minor of the client's header (13 until a context says otherwise).
static CLIENT_MINOR: AtomicU32 = AtomicU32::new(13);

/// Records the API minor a client passed to `ucp_init_version`.
pub fn set_client_minor(minor: c_uint) {
    CLIENT_MINOR.store(minor, Ordering::Relaxed);
}

/// The API minor recorded by [`set_client_minor`].
pub fn client_minor() -> u32 {
    CLIENT_MINOR.load(Ordering::Relaxed)
}

/// `UCS_MEMORY_TYPE_UNKNOWN` in the header of API minor `minor`.
pub fn unknown_for(minor: u32) -> c_uint {
    if minor <= 13 {
        5
    } else {
        10
    }
}

/// True when a `ucs_memory_type_t` value of the client's header names memory the CPU can
/// access, which rucx moves as host memory.
pub fn cpu_accessible(value: c_uint) -> bool {
    cpu_accessible_in(client_minor(), value)
}

/// [`cpu_accessible`] for a header of API minor `minor`.
pub fn cpu_accessible_in(minor: u32, value: c_uint) -> bool {
    if minor <= 13 {
        // host, rocm-managed (UCS_MEMORY_TYPES_CPU_ACCESSIBLE of this header), unknown
        matches!(value, 0 | 4 | 5)
    } else {
        // host, rocm-managed, ze-host, ze-managed (UCS_MEMORY_TYPES_CPU_ACCESSIBLE of these
        // headers); unknown is 9 before Gaudi memory was added and 10 after (no Gaudi device
        // is reachable from rucx either way)
        matches!(value, 0 | 4 | 6 | 8 | 9 | 10)
    }
}

/// The value of a memory-type constant in the header of API minor `minor` (`None` for other
/// names): the names and order of `ucs_memory_type_t` there, and `UCS_MEMORY_TYPES_CPU_ACCESSIBLE`.
pub fn constant(name: &str, minor: u32) -> Option<i64> {
    const V13: &[&str] = &["HOST", "CUDA", "CUDA_MANAGED", "ROCM", "ROCM_MANAGED"];
    const V22: &[&str] = &[
        "HOST",
        "CUDA",
        "CUDA_MANAGED",
        "ROCM",
        "ROCM_MANAGED",
        "RDMA",
        "ZE_HOST",
        "ZE_DEVICE",
        "ZE_MANAGED",
        "GAUDI",
    ];
    let list = if minor <= 13 { V13 } else { V22 };
    let bit = |n: &str| 1i64 << list.iter().position(|x| *x == n).unwrap_or(63);
    match name {
        "UCS_MEMORY_TYPES_CPU_ACCESSIBLE" if minor <= 13 => Some(bit("HOST") | bit("ROCM_MANAGED")),
        "UCS_MEMORY_TYPES_CPU_ACCESSIBLE" => {
            Some(bit("HOST") | bit("ROCM_MANAGED") | bit("ZE_HOST") | bit("ZE_MANAGED"))
        }
        "UCS_MEMORY_TYPE_LAST" | "UCS_MEMORY_TYPE_UNKNOWN" => Some(unknown_for(minor) as i64),
        _ => {
            let t = name.strip_prefix("UCS_MEMORY_TYPE_")?;
            list.iter().position(|x| *x == t).map(|i| i as i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_device_memory_per_header() {
        assert!(cpu_accessible_in(13, 0) && cpu_accessible_in(13, 5));
        assert!(
            !cpu_accessible_in(13, 1) && !cpu_accessible_in(13, 3) && !cpu_accessible_in(13, 6)
        );
        // In later headers 5 is RDMA device memory.
        assert!(
            !cpu_accessible_in(22, 5) && cpu_accessible_in(22, 10) && !cpu_accessible_in(22, 7)
        );
        assert_eq!(unknown_for(13), 5);
        assert_eq!(unknown_for(22), 10);
    }
}
