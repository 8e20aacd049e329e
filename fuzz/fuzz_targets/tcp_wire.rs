//! Fuzzes tcp frame sub-headers, device/iface/endpoint addresses, packed rkeys and TcpMd::rkey_unpack.
//!
//! The checks live in `rucx_fuzz::tcp_wire` (shared with the stable test
//! `tests/tests/decoder_garbage.rs`): no panic, typed errors, round trip where an encoder exists.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run tcp_wire
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::tcp_wire(data);
});
