//! Socket-address helpers (`ucs/sys/sock.h`): printing, ports, parsing, options.

use crate::memunits::copy_out;
use crate::status::{codes::*, Status};
use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, AF_INET, AF_INET6};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The address and port of an IPv4 or IPv6 socket address.
///
/// # Safety
/// `addr` must point to a socket address of its family's size, or be NULL.
pub unsafe fn to_std(addr: *const sockaddr) -> Option<SocketAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: non-null; the family field is first in every sockaddr.
    match unsafe { (*addr).sa_family } as c_int {
        AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let a = unsafe { &*addr.cast::<sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(a.sin_port)))
        }
        AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let a = unsafe { &*addr.cast::<sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

/// Writes `sa` into a `sockaddr_storage`.
fn from_std(sa: SocketAddr, out: &mut sockaddr_storage) {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    *out = unsafe { std::mem::zeroed() };
    match sa {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let a = unsafe { &mut *(out as *mut sockaddr_storage).cast::<sockaddr_in>() };
            a.sin_family = AF_INET as libc::sa_family_t;
            a.sin_port = v4.port().to_be();
            a.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let a = unsafe { &mut *(out as *mut sockaddr_storage).cast::<sockaddr_in6>() };
            a.sin6_family = AF_INET6 as libc::sa_family_t;
            a.sin6_port = v6.port().to_be();
            a.sin6_addr.s6_addr = v6.ip().octets();
            a.sin6_scope_id = v6.scope_id();
        }
    }
}

/// `const char *ucs_sockaddr_str(const struct sockaddr *addr, char *str, size_t max)`:
/// `ip:port`, or `<null>` / `<invalid address family>`.
///
/// # Safety
/// `addr` as for [`to_std`]; `str` must have room for `max` bytes.
#[no_mangle]
pub unsafe extern "C" fn ucs_sockaddr_str(
    addr: *const sockaddr,
    s: *mut c_char,
    max: usize,
) -> *const c_char {
    let text = if addr.is_null() {
        "<null>".to_string()
    } else {
        // SAFETY: forwarded from the caller.
        match unsafe { to_std(addr) } {
            Some(sa) => format!("{}:{}", sa.ip(), sa.port()),
            None => "<invalid address family>".to_string(),
        }
    };
    // SAFETY: forwarded from the caller.
    unsafe { copy_out(&text, s, max) };
    s
}

/// `ucs_status_t ucs_sockaddr_sizeof(const struct sockaddr *addr, size_t *size_p)`.
///
/// # Safety
/// `addr` must be NULL or point to a socket address; `size_p` to a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn ucs_sockaddr_sizeof(addr: *const sockaddr, size_p: *mut usize) -> Status {
    if addr.is_null() || size_p.is_null() {
        return UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: non-null; the family comes first.
    let size = match unsafe { (*addr).sa_family } as c_int {
        AF_INET => std::mem::size_of::<sockaddr_in>(),
        AF_INET6 => std::mem::size_of::<sockaddr_in6>(),
        _ => return UCS_ERR_INVALID_PARAM,
    };
    // SAFETY: checked non-null.
    unsafe { *size_p = size };
    UCS_OK
}

/// `ucs_status_t ucs_sockaddr_get_port(const struct sockaddr *addr, uint16_t *port_p)`.
///
/// # Safety
/// As [`to_std`]; `port_p` must point to a `uint16_t`.
#[no_mangle]
pub unsafe extern "C" fn ucs_sockaddr_get_port(addr: *const sockaddr, port_p: *mut u16) -> Status {
    // SAFETY: forwarded from the caller.
    match (unsafe { to_std(addr) }, port_p.is_null()) {
        (Some(sa), false) => {
            // SAFETY: checked non-null.
            unsafe { *port_p = sa.port() };
            UCS_OK
        }
        _ => UCS_ERR_INVALID_PARAM,
    }
}

/// `ucs_status_t ucs_sockaddr_set_port(struct sockaddr *addr, uint16_t port)`.
///
/// # Safety
/// `addr` must be NULL or point to a socket address of its family's size.
#[no_mangle]
pub unsafe extern "C" fn ucs_sockaddr_set_port(addr: *mut sockaddr, port: u16) -> Status {
    if addr.is_null() {
        return UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: non-null; the family tells the layout.
    match unsafe { (*addr).sa_family } as c_int {
        // SAFETY: the family says which struct this is.
        AF_INET => unsafe { (*addr.cast::<sockaddr_in>()).sin_port = port.to_be() },
        // SAFETY: as above.
        AF_INET6 => unsafe { (*addr.cast::<sockaddr_in6>()).sin6_port = port.to_be() },
        _ => return UCS_ERR_INVALID_PARAM,
    }
    UCS_OK
}

/// `ucs_status_t ucs_sockaddr_set_inaddr_any(struct sockaddr *addr, sa_family_t af)`: the
/// wildcard address of `af`, port unchanged.
///
/// # Safety
/// `addr` must be NULL or have room for a socket address of family `af`.
#[no_mangle]
pub unsafe extern "C" fn ucs_sockaddr_set_inaddr_any(
    addr: *mut sockaddr,
    af: libc::sa_family_t,
) -> Status {
    if addr.is_null() {
        return UCS_ERR_INVALID_PARAM;
    }
    match af as c_int {
        AF_INET => {
            // SAFETY: the caller gave room for a sockaddr_in.
            let a = unsafe { &mut *addr.cast::<sockaddr_in>() };
            a.sin_family = af;
            a.sin_addr.s_addr = 0;
        }
        AF_INET6 => {
            // SAFETY: the caller gave room for a sockaddr_in6.
            let a = unsafe { &mut *addr.cast::<sockaddr_in6>() };
            a.sin6_family = af;
            a.sin6_addr.s6_addr = [0; 16];
        }
        _ => return UCS_ERR_INVALID_PARAM,
    }
    UCS_OK
}

fn c_text<'a>(p: *const c_char) -> Option<std::borrow::Cow<'a, str>> {
    // SAFETY: callers pass C strings; NULL gives None.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy())
}

/// `ucs_status_t ucs_sock_ipstr_to_sockaddr(const char *ip, struct sockaddr_storage *out)`:
/// an IPv4 or IPv6 address, port 0.
///
/// # Safety
/// `ip` must be a C string and `out` point to a `sockaddr_storage` (or be NULL: refused).
#[no_mangle]
pub unsafe extern "C" fn ucs_sock_ipstr_to_sockaddr(
    ip: *const c_char,
    out: *mut sockaddr_storage,
) -> Status {
    let (Some(text), false) = (c_text(ip), out.is_null()) else {
        return UCS_ERR_INVALID_PARAM;
    };
    match text.trim().parse::<IpAddr>() {
        Ok(a) => {
            // SAFETY: checked non-null.
            from_std(SocketAddr::new(a, 0), unsafe { &mut *out });
            UCS_OK
        }
        Err(_) => UCS_ERR_INVALID_ADDR,
    }
}

/// `ucs_status_t ucs_sock_port_from_string(const char *port_str, uint16_t *port_p)`.
///
/// # Safety
/// `port_str` must be a C string and `port_p` point to a `uint16_t` (or be NULL: refused).
#[no_mangle]
pub unsafe extern "C" fn ucs_sock_port_from_string(
    port_str: *const c_char,
    port_p: *mut u16,
) -> Status {
    match (
        c_text(port_str).and_then(|t| t.trim().parse::<u16>().ok()),
        port_p.is_null(),
    ) {
        (Some(p), false) => {
            // SAFETY: checked non-null.
            unsafe { *port_p = p };
            UCS_OK
        }
        _ => UCS_ERR_INVALID_PARAM,
    }
}

/// `ucs_sock_ipportstr_to_sockaddr(const char *ip_port, uint16_t default_port,
/// struct sockaddr_storage *out)`: `ip`, `ip:port`, `[ipv6]:port` or a bare IPv6 address.
///
/// # Safety
/// As [`ucs_sock_ipstr_to_sockaddr`].
#[no_mangle]
pub unsafe extern "C" fn ucs_sock_ipportstr_to_sockaddr(
    ip_port: *const c_char,
    default_port: u16,
    out: *mut sockaddr_storage,
) -> Status {
    let (Some(text), false) = (c_text(ip_port), out.is_null()) else {
        return UCS_ERR_INVALID_PARAM;
    };
    let t = text.trim();
    let sa = t.parse::<SocketAddr>().ok().or_else(|| {
        t.parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, default_port))
    });
    match sa {
        Some(sa) => {
            // SAFETY: checked non-null.
            from_std(sa, unsafe { &mut *out });
            UCS_OK
        }
        None => UCS_ERR_INVALID_ADDR,
    }
}

/// `ucs_status_t ucs_socket_setopt(int fd, int level, int optname, const void *optval,
/// socklen_t optlen)`: `setsockopt`, an error logged and returned as `UCS_ERR_IO_ERROR`.
///
/// # Safety
/// `optval` must point to `optlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ucs_socket_setopt(
    fd: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: libc::socklen_t,
) -> Status {
    // SAFETY: forwarded from the caller; the kernel checks the rest.
    if unsafe { libc::setsockopt(fd, level, optname, optval, optlen) } < 0 {
        tracing::warn!(
            target: "ucx",
            "setsockopt(fd={fd}, level={level}, optname={optname}) failed: {}",
            std::io::Error::last_os_error()
        );
        return UCS_ERR_IO_ERROR;
    }
    UCS_OK
}

/// `void ucs_close_fd(int *fd_p)`: closes `*fd_p` unless it is -1, then sets it to -1.
///
/// # Safety
/// `fd_p` must point to an `int` (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn ucs_close_fd(fd_p: *mut c_int) {
    if fd_p.is_null() {
        return;
    }
    // SAFETY: checked non-null.
    let fd = unsafe { *fd_p };
    if fd == -1 {
        return;
    }
    // SAFETY: closing a descriptor the caller owns.
    if unsafe { libc::close(fd) } < 0 {
        tracing::warn!(target: "ucx", "close(fd={fd}) failed: {}", std::io::Error::last_os_error());
    }
    // SAFETY: checked non-null.
    unsafe { *fd_p = -1 };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_print_parse_and_carry_ports() {
        // SAFETY: all-zero storage is valid.
        let mut ss: sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: valid strings and storage below.
        unsafe {
            assert_eq!(
                ucs_sock_ipstr_to_sockaddr(c"127.0.0.1".as_ptr(), &mut ss),
                UCS_OK
            );
            let sa = (&mut ss as *mut sockaddr_storage).cast::<sockaddr>();
            assert_eq!(ucs_sockaddr_set_port(sa, 4242), UCS_OK);
            let mut buf = [0 as c_char; 64];
            ucs_sockaddr_str(sa, buf.as_mut_ptr(), buf.len());
            assert_eq!(
                CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
                "127.0.0.1:4242"
            );
            let mut small = [0 as c_char; 5];
            ucs_sockaddr_str(sa, small.as_mut_ptr(), small.len());
            assert_eq!(CStr::from_ptr(small.as_ptr()).to_str().unwrap(), "127.");
            ucs_sockaddr_str(std::ptr::null(), buf.as_mut_ptr(), buf.len());
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "<null>");
            let mut port = 0u16;
            assert_eq!(ucs_sockaddr_get_port(sa, &mut port), UCS_OK);
            assert_eq!(port, 4242);
            let mut size = 0usize;
            assert_eq!(ucs_sockaddr_sizeof(sa, &mut size), UCS_OK);
            assert_eq!(size, std::mem::size_of::<sockaddr_in>());
            assert_eq!(
                ucs_sock_ipportstr_to_sockaddr(c"[::1]:77".as_ptr(), 9, &mut ss),
                UCS_OK
            );
            ucs_sockaddr_str(sa, buf.as_mut_ptr(), buf.len());
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "::1:77");
            assert_eq!(
                ucs_sock_ipstr_to_sockaddr(c"not-an-ip".as_ptr(), &mut ss),
                UCS_ERR_INVALID_ADDR
            );
            let mut fd = -1;
            ucs_close_fd(&mut fd);
            assert_eq!(fd, -1);
        }
    }
}
