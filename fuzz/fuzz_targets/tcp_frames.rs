//! Fuzzes the tcp frame decoder and stream reassembler.
//!
//! The first input byte picks a chunk size; the rest is the byte stream. The stream is decoded
//! once in one piece and once split into chunks, the way a socket delivers it. Both must
//! agree exactly (same messages, same error), and neither may panic.
//!
//! ```text
//! cargo install cargo-fuzz
//! cd fuzz && cargo +nightly fuzz run tcp_frames
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::tcp::wire::decode_stream;

fuzz_target!(|data: &[u8]| {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let chunk = (first as usize % 97) + 1;
    let (whole, r1) = decode_stream([stream], 0);
    let (split, r2) = decode_stream(stream.chunks(chunk), 0);
    assert_eq!(whole, split, "chunking changed the decoded messages");
    assert_eq!(r1, r2, "chunking changed the decode result");
});
