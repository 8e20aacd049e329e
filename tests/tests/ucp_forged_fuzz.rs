//! Stable-Rust mirror of the `ucp_peer` fuzz target (`fuzz/src/forged.rs`): thousands of
//! seeded random cases per transport, each a real worker with victim requests and two raw
//! peers sending every ucp message id with live, stale, foreign, random and guessed request
//! ids. No panic, no false completion, only the offending endpoint fails (the checks are the
//! fuzz crate's own, so CI and `cargo fuzz` test the same contract).

#[allow(dead_code)]
#[path = "../../fuzz/src/peer.rs"]
mod peer;

#[allow(dead_code)]
#[path = "../../fuzz/src/forged.rs"]
mod forged;

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Cases per transport.
const CASES: usize = 3000;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn run(tl: &'static str, seed: u64) {
    let mut s = forged::Session::new(tl);
    let mut rng = Rng(seed);
    for case in 0..CASES {
        let n = (rng.next() >> 58) as usize;
        let input: Vec<u8> = (0..n).map(|_| (rng.next() >> 56) as u8).collect();
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| s.case(&input))) {
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            eprintln!("{tl}: case {case} failed; input {hex}");
            std::panic::resume_unwind(p);
        }
    }
    let c = s.cov;
    eprintln!("{tl}: {CASES} cases: {c:?}");
    // The paths that matter were taken, many times.
    assert!(c.foreign_naming > 1500 && c.foreign_live > 500, "{c:?}");
    assert!(c.owner_bad > 800 && c.owner_ended > 800, "{c:?}");
    assert!(c.released > 80 && c.real > 3000, "{c:?}");
}

#[test]
fn posix_forged_ids_fuzz() {
    run("posix", 0x9e37_79b9_7f4a_7c15);
}

#[test]
fn tcp_forged_ids_fuzz() {
    run("tcp", 0xd1b5_4a32_d192_ed03);
}
