//! Fuzzes cma interface address, packed rkeys.
//!
//! The checks live in `rucx_fuzz::cma_wire` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`): no panic, typed errors, round trip where an encoder exists.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run cma_wire
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::cma_wire(data);
});
