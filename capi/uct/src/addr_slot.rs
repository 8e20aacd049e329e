//! Device and interface addresses as C clients hold them: a slot of fixed size per address.
//!
//! UCX's clients (`ucx_perftest`, `uct_hello_world`) size an address from the *local*
//! `uct_iface_attr_t::device_addr_len`/`iface_addr_len` and read the peer's with that same
//! length, so the length must be equal in every process. rucx's transports encode some fields
//! as varints (a shared-memory address's pid and sysv segment id), whose length differs from
//! process to process; a peer's address read with the local length was cut short or carried
//! stray bytes, and both sides refused each other as unreachable (seen as an intermittent
//! `Destination is unreachable` in `ucx_perftest am_bw` over sysv). Each non-empty address is
//! therefore handed to C as a slot:
//!
//! ```text
//! +-------------+---------------------------+-------------------------+
//! | length (u8) | the transport's encoding  | zeros up to ADDR_SLOT   |
//! +-------------+---------------------------+-------------------------+
//! ```

/// The size of every non-empty device or interface address given to C.
pub const ADDR_SLOT: usize = 64;

/// The length C sees for an address whose encoding is `len` bytes: 0 stays 0 (the transport
/// has no such address), anything else takes a slot. `None` when the encoding does not fit.
pub fn slot_len(len: usize) -> Option<usize> {
    match len {
        0 => Some(0),
        n if n < ADDR_SLOT => Some(ADDR_SLOT),
        _ => None,
    }
}

/// Writes `addr` as a slot into `out`, which holds [`slot_len`]`(addr.len())` bytes.
///
/// # Safety
/// `out` must be valid for writes of that many bytes.
pub unsafe fn write(addr: &[u8], out: *mut u8) {
    if addr.is_empty() {
        return;
    }
    let mut slot = [0u8; ADDR_SLOT];
    slot[0] = addr.len() as u8;
    slot[1..=addr.len()].copy_from_slice(addr);
    // SAFETY: the caller's buffer holds ADDR_SLOT bytes.
    unsafe { std::ptr::copy_nonoverlapping(slot.as_ptr(), out, ADDR_SLOT) };
}

/// The transport's encoding inside a peer's slot (`slot` as long as the local length says).
pub fn read(slot: &[u8]) -> Result<&[u8], String> {
    let Some((&len, rest)) = slot.split_first() else {
        return Ok(&[]);
    };
    rest.get(..usize::from(len)).ok_or_else(|| {
        format!(
            "address slot says {len} bytes, holds {} (the peer's library is not rucx's?)",
            rest.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_round_trips_whatever_the_encoding_length() {
        for len in [1usize, 7, 34, ADDR_SLOT - 1] {
            let addr: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(31) | 1).collect();
            let n = slot_len(len).unwrap();
            assert_eq!(n, ADDR_SLOT);
            let mut buf = vec![0xEEu8; n];
            // SAFETY: buf holds n bytes.
            unsafe { write(&addr, buf.as_mut_ptr()) };
            assert_eq!(read(&buf).unwrap(), &addr[..]);
            assert!(buf[1 + len..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn empty_and_oversized_addresses() {
        assert_eq!(slot_len(0), Some(0));
        assert_eq!(slot_len(ADDR_SLOT), None);
        assert_eq!(read(&[]).unwrap(), &[] as &[u8]);
        let mut bad = [0u8; 8];
        bad[0] = 20;
        assert!(read(&bad).unwrap_err().contains("20 bytes"));
    }
}
