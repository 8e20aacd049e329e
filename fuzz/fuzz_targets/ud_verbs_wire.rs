//! Fuzzes ud_verbs interface address, datagram header, connection request and reply.
//!
//! The checks live in `rucx_fuzz::ud_verbs_wire` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run ud_verbs_wire
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::ud_verbs_wire(data);
});
