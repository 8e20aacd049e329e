//! Fuzzes ucp active-message bodies (first byte: AM id), every ucp header, the listener header and rkey bundles.
//!
//! The checks live in `rucx_fuzz::ucp_msg` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`): no panic, typed errors, round trip where an encoder exists.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run ucp_msg
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::ucp_msg(data);
});
