//! Fuzzes the tcp frame decoder and stream reassembler: decoding the stream whole and in chunks (size from the first byte) must agree.
//!
//! The checks live in `rucx_fuzz::tcp_frames` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`): no panic, typed errors, round trip where an encoder exists.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run tcp_frames
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::tcp_frames(data);
});
