//! Linux abstract Unix socket addresses: a name in the abstract namespace (no file), as mm's
//! wake-up sockets and [`crate::grant`]'s consent sockets use.

/// The abstract socket address of `name` (leading NUL, then the name's bytes, unterminated),
/// built on the stack, and its length for `bind`/`connect`/`sendto`.
#[inline]
pub(crate) fn abstract_addr(name: &[u8]) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    debug_assert!(name.len() < a.sun_path.len() - 1);
    for (d, s) in a.sun_path[1..].iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len().min(a.sun_path.len() - 1);
    (a, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_follows_a_leading_nul_and_the_length_counts_it() {
        let (a, len) = abstract_addr(b"rucx-x");
        assert_eq!(a.sun_family, libc::AF_UNIX as libc::sa_family_t);
        assert_eq!(a.sun_path[0], 0);
        let name: Vec<u8> = a.sun_path[1..7].iter().map(|&c| c as u8).collect();
        assert_eq!(name, b"rucx-x");
        assert_eq!(len as usize, std::mem::size_of::<libc::sa_family_t>() + 7);
    }
}
