//! Test support shared by the workspace: a global allocator that counts the
//! allocations this thread makes while counting is switched on, a port where nothing listens,
//! and the hex text in which multi-process tests pass worker addresses to their children.
//!
//! In a test binary: `#[global_allocator] static GLOBAL: CountingAlloc = CountingAlloc;`, then
//! `COUNTING.with(|c| c.set(true))`, run the loop, switch it off and read [`ALLOCS`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations counted so far (all threads that had counting on).
pub static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether allocations by this thread are counted now.
    pub static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The system allocator, counting allocations made while [`COUNTING`] is on.
pub struct CountingAlloc;

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// A socket bound to a kernel-picked port on 127.0.0.1 that never listens, and that port: a
/// connection to it is refused, and no other process can take the port while the socket lives
/// (tests that need "nothing listens there" keep it until they end, instead of picking a port
/// that was free a moment ago).
pub fn refusing_port() -> std::io::Result<(std::os::fd::OwnedFd, u16)> {
    use std::os::fd::FromRawFd;
    let err = std::io::Error::last_os_error;
    // SAFETY: plain socket calls on a descriptor this function owns; the address structures
    // are valid for the lengths given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err());
        }
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len) != 0 {
            return Err(err());
        }
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut glen = len;
        if libc::getsockname(fd, &mut got as *mut _ as *mut libc::sockaddr, &mut glen) != 0 {
            return Err(err());
        }
        Ok((owned, u16::from_be(got.sin_port)))
    }
}

#[cfg(test)]
mod refusing_port_tests {
    /// Nothing accepts on the port while the socket is held: a connection is refused.
    #[test]
    fn connections_to_the_port_are_refused() {
        let (_held, port) = super::refusing_port().expect("socket");
        assert_ne!(port, 0);
        let e = std::net::TcpStream::connect(("127.0.0.1", port)).expect_err("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    }
}

/// `b` as lowercase hex text (two digits a byte): how multi-process tests pass a worker
/// address to a child on its command line or in its environment.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of hex text made by [`hex`].
///
/// # Panics
/// On text that is not pairs of hex digits (a test's own corrupted input).
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd-length hex text");
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex digits"))
        .collect()
}

#[cfg(test)]
mod hex_tests {
    use super::*;

    #[test]
    fn hex_text_round_trips() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(hex(&[0x00, 0x7f, 0xff]), "007fff");
        assert_eq!(unhex(&hex(&b)), b);
        assert!(std::panic::catch_unwind(|| unhex("0g")).is_err());
        assert!(std::panic::catch_unwind(|| unhex("abc")).is_err());
    }
}
