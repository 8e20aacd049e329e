//! Fuzzes rc_verbs device address, endpoint address blob, packed rkey and AM header.
//!
//! The checks live in `rucx_fuzz::rc_verbs_wire` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`): no panic, typed errors, round trip where an encoder exists.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run rc_verbs_wire
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::rc_verbs_wire(data);
});
