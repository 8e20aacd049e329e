//! File-descriptor limits: this process's `RLIMIT_NOFILE` and OS errors that name it. Imports
//! nothing of ucs, so [`crate::status`] can spell out a limit without a cycle through
//! [`crate::limits`], which returns `status`'s errors.

use std::io;

/// The soft `RLIMIT_NOFILE` of this process, if it can be read.
pub fn nofile_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct, which `r` is.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    (rc == 0).then_some(r.rlim_cur)
}

/// The cause of an OS error, spelled out when it is a descriptor limit: `EMFILE` names this
/// process's `RLIMIT_NOFILE`, `ENFILE` the system-wide table. Other errors are the OS text.
pub fn explain_io(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::EMFILE) => {
            let limit = nofile_limit().map_or_else(|| "unknown".to_owned(), |n| n.to_string());
            format!(
                "too many open files (RLIMIT_NOFILE={limit}): this process has no free file \
                 descriptor; raise the limit (ulimit -n) or close connections"
            )
        }
        Some(libc::ENFILE) => "too many open files in the system (the kernel's file table is \
                               full, see /proc/sys/fs/file-max)"
            .to_owned(),
        _ => err.to_string(),
    }
}

/// Whether `err` says a descriptor limit was hit (`EMFILE` or `ENFILE`).
pub fn is_fd_limit(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}
