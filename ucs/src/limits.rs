//! What this process may use: file descriptors and memory, for bounds checks and for error
//! messages that name the limit that was hit.
//!
//! [`explain_io`] turns `EMFILE`/`ENFILE` into "too many open files (RLIMIT_NOFILE=N)" style
//! text; [`check_alloc`] refuses a size or count from the command line or a peer before it
//! reaches an allocator; [`try_vec`] allocates a filled buffer without aborting on failure;
//! [`RateLimit`] lets a loop log an error at most once per period.

pub(crate) mod fd;

pub use fd::{explain_io, is_fd_limit, nofile_limit};

use crate::{Error, Result};
use std::time::{Duration, Instant};

/// Bytes this process can expect to allocate: physical memory, lowered by `RLIMIT_AS` and
/// `RLIMIT_DATA` when they are set.
pub fn memory_limit() -> u64 {
    // SAFETY: sysconf takes a name constant and returns a number (-1 when unknown).
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let mut limit = if pages > 0 && page > 0 {
        (pages as u64).saturating_mul(page as u64)
    } else {
        u64::MAX
    };
    for res in [libc::RLIMIT_AS, libc::RLIMIT_DATA] {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit struct, which `r` is.
        if unsafe { libc::getrlimit(res, &mut r) } == 0 && r.rlim_cur != libc::RLIM_INFINITY {
            limit = limit.min(r.rlim_cur);
        }
    }
    limit
}

fn limit_text(limit: u64) -> String {
    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;
    if limit >= G {
        format!("{:.1} GiB", limit as f64 / G as f64)
    } else {
        format!("{:.1} MiB", limit as f64 / M as f64)
    }
}

/// Checks that `bytes` (what `what` would make this process allocate) fits in the memory this
/// process can use ([`memory_limit`]); the error names `what` and the limit.
pub fn check_alloc(what: &str, bytes: u64) -> Result<()> {
    check_alloc_within(what, bytes, memory_limit())
}

/// [`check_alloc`] against a given limit.
pub fn check_alloc_within(what: &str, bytes: u64, limit: u64) -> Result<()> {
    if bytes <= limit {
        return Ok(());
    }
    Err(Error::InvalidParam(format!(
        "{what} needs {bytes} bytes of memory, more than this machine lets the process use ({} \
         from physical memory, RLIMIT_AS and RLIMIT_DATA)",
        limit_text(limit)
    )))
}

/// A `len`-byte buffer filled with `fill`; a failed allocation is [`Error::NoMemory`] naming
/// `what`, not an abort.
pub fn try_vec(what: &str, len: usize, fill: u8) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        Error::NoMemory(format!(
            "{what}: cannot allocate {len} bytes ({} usable by this process)",
            limit_text(memory_limit())
        ))
    })?;
    v.resize(len, fill);
    Ok(v)
}

/// Lets a repeating event through at most once per period, counting the ones held back, so a
/// loop that keeps failing the same way logs one line per period instead of one per attempt.
#[derive(Debug)]
pub struct RateLimit {
    period: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    /// At most one event per `period`.
    pub const fn new(period: Duration) -> Self {
        RateLimit {
            period,
            last: None,
            suppressed: 0,
        }
    }
    /// `Some(n)` when this event should be reported (`n` earlier ones were held back since the
    /// last report), `None` when it falls inside the period.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.period => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn fd_limit_errors_name_the_limit() {
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        let t = explain_io(&e);
        assert!(t.contains("RLIMIT_NOFILE="), "{t}");
        assert!(is_fd_limit(&e));
        let e = io::Error::from_raw_os_error(libc::ENFILE);
        assert!(explain_io(&e).contains("file-max"));
        let e = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert!(!is_fd_limit(&e));
        assert_eq!(explain_io(&e), e.to_string());
        assert!(nofile_limit().unwrap_or(0) > 0);
    }

    #[test]
    fn alloc_checks_name_the_flag_and_limit() {
        assert!(check_alloc_within("-s", 10, 10).is_ok());
        let e = check_alloc_within("-s 99999999999999", 99_999_999_999_999, 8 << 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("-s 99999999999999") && e.contains("8.0 GiB"),
            "{e}"
        );
        assert!(memory_limit() > 1 << 20);
        assert!(check_alloc("huge", u64::MAX).is_err());
    }

    #[test]
    fn try_vec_fails_cleanly() {
        assert_eq!(try_vec("small", 3, 7).unwrap(), vec![7, 7, 7]);
        let e = try_vec("enormous", usize::MAX / 2, 0).unwrap_err();
        assert!(
            matches!(e, Error::NoMemory(ref m) if m.contains("enormous")),
            "{e}"
        );
    }

    #[test]
    fn rate_limit_lets_one_through_per_period() {
        let mut r = RateLimit::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(r.allow(t0), Some(0));
        for i in 1..100 {
            assert_eq!(r.allow(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(r.allow(t0 + Duration::from_millis(1000)), Some(99));
        assert_eq!(r.allow(t0 + Duration::from_millis(1001)), None);
    }
}
