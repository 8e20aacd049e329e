//! Fuzzes the shared-memory tag offload headers: tagged eager header, rendezvous announcement
//! (fixed header and buffer part), rendezvous acknowledgement.
//!
//! The checks live in `rucx_fuzz::mm_tag_wire` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`): no panic, typed errors, round trip.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run mm_tag_wire
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::mm_tag_wire(data);
});
