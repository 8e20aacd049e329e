//! Stateful fuzzer of the ucp messages that name requests: a real worker with victim requests
//! and two raw peers (the owner and a foreigner) over posix or tcp (first byte), sending every
//! message id with live, stale, foreign, random and guessed request ids.
//!
//! The checks live in `rucx_fuzz::forged` (shared with the stable test
//! `tests/tests/ucp_forged_fuzz.rs`): no panic, no false completion, only the offending
//! endpoint fails, and the victims complete correctly afterwards.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run ucp_peer -- -max_len=64
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rucx_fuzz::forged::fuzz_one(data);
});
