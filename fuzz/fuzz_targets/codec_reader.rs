//! Fuzzes `ucs::codec::Reader` on layouts the input describes (no panic, errors name the
//! structure, what it reads a `Writer` writes back byte for byte).
//!
//! The checks live in `rucx_fuzz::codec_reader` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run codec_reader
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::codec_reader(data);
});
