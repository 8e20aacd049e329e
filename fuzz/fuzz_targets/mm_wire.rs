//! Fuzzes shared-memory (posix/sysv) device and interface addresses and packed rkeys.
//!
//! The checks live in `rucx_fuzz::mm_wire` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`): no panic, typed errors, round trip where an encoder exists.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run mm_wire
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::mm_wire(data);
});
