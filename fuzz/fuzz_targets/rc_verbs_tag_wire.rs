//! Fuzzes rc_verbs software tag offload headers (eager, rendezvous, ack).
//!
//! The checks live in `rucx_fuzz::rc_verbs_tag_wire` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run rc_verbs_tag_wire
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::rc_verbs_tag_wire(data);
});
