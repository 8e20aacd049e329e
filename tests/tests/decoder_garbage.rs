//! Stable-Rust stand-in for the fuzz targets of `fuzz/`: every decoder of bytes from a peer
//! gets thousands of deterministic inputs (valid encodings, each of their truncations, every
//! single-bit flip, random overwrites/splices, and pure noise) and must not panic, must reject
//! bad bytes with a typed error, and must round-trip what it accepts. The checks are the fuzz
//! crate's own (`fuzz/src/lib.rs`), so CI and `cargo fuzz` test the same contract.

#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod checks;

use std::panic::{catch_unwind, AssertUnwindSafe};
use ucs::testing::hex;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Runs `check` on `input`, naming the target and the input if it panics. Returns how many
/// decoders accepted the input.
fn run(name: &str, check: fn(&[u8]) -> usize, input: &[u8]) -> usize {
    match catch_unwind(AssertUnwindSafe(|| check(input))) {
        Ok(n) => n,
        Err(p) => {
            eprintln!(
                "{name}: failing input ({} bytes): {}",
                input.len(),
                hex(input)
            );
            std::panic::resume_unwind(p);
        }
    }
}

/// The deterministic inputs for one target; returns how many were run.
fn garble(t: &checks::Target, seed: u64) -> usize {
    let mut rng = Rng(seed | 1);
    let seeds = (t.seeds)();
    assert!(!seeds.is_empty(), "{}: no seeds", t.name);
    let mut n = 0;
    let mut go = |input: &[u8]| {
        n += 1;
        run(t.name, t.check, input)
    };
    go(&[]);
    for s in &seeds {
        // Every seed is a valid encoding: the mutations below start from accepted input.
        assert!(go(s) > 0, "{}: seed {} rejected", t.name, hex(s));
        // The valid encoding and every truncation of it.
        for cut in 0..=s.len() {
            go(&s[..cut]);
        }
        // Every single-bit flip.
        for bit in 0..s.len() * 8 {
            let mut m = s.clone();
            m[bit / 8] ^= 1 << (bit % 8);
            go(&m);
        }
        // Random multi-byte overwrites, extensions and splices with other seeds.
        for _ in 0..500 {
            let mut m = s.clone();
            match rng.below(4) {
                0 => {
                    for _ in 0..1 + rng.below(4) {
                        let i = rng.below(m.len());
                        if let Some(b) = m.get_mut(i) {
                            *b = rng.next() as u8;
                        }
                    }
                }
                1 => {
                    for _ in 0..1 + rng.below(16) {
                        m.push(rng.next() as u8);
                    }
                }
                2 => {
                    let other = &seeds[rng.below(seeds.len())];
                    let at = rng.below(m.len() + 1);
                    m.truncate(at);
                    m.extend_from_slice(&other[rng.below(other.len() + 1)..]);
                }
                _ => {
                    // Extreme values in a random 8-byte window (lengths, counts, offsets).
                    let i = rng.below(m.len());
                    let v = [0u8, 0xff, 0x7f, 0x80][rng.below(4)];
                    for b in m.iter_mut().skip(i).take(8) {
                        *b = v;
                    }
                }
            }
            // Mutants are accepted or rejected; either way the check ran its asserts.
            go(&m);
        }
    }
    // Pure noise of every small length.
    for _ in 0..1500 {
        let len = rng.below(160);
        let m: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        go(&m);
    }
    n
}

#[test]
fn every_decoder_survives_garbage() {
    let mut total = 0;
    for (i, t) in checks::TARGETS.iter().enumerate() {
        let n = garble(t, 0x9e37_79b9_7f4a_7c15 ^ i as u64);
        assert!(n >= 2000, "{}: only {n} inputs", t.name);
        total += n;
    }
    assert!(total > 9 * 2000);
}

/// Spot checks that the seeds decode to what was encoded (the garbage test already asserts
/// each seed is accepted by some decoder of its family).
#[test]
fn seeds_are_valid_encodings() {
    use uct::tcp::wire::decode_stream;
    let frames = &(checks::TARGETS[0].seeds)()[0];
    let (events, r) = decode_stream([&frames[1..]], 0);
    assert_eq!(r, Ok(()));
    assert_eq!(events.len(), 3, "{events:?}");
    for t in checks::TARGETS {
        assert!(!(t.seeds)().is_empty(), "{}", t.name);
    }
    let addr = &(checks::TARGETS[7].seeds)()[0];
    let a = ucp::WorkerAddress::decode(addr).unwrap();
    assert_eq!(a.tls.len(), 4);
    assert_eq!(a.tls[1].device_addr, a.tls[3].device_addr);
    assert_eq!(addr[9], 2, "posix, sysv and cma share one device address");
    // The rendezvous seeds of mm_tag_wire decode as rendezvous (and, being at least 16
    // bytes, as an eager header too).
    let tag = checks::TARGETS
        .iter()
        .find(|t| t.name == "mm_tag_wire")
        .unwrap();
    for s in &(tag.seeds)()[1..4] {
        assert_eq!((tag.check)(s), 2, "{s:02x?}");
    }
    let p = &(checks::TARGETS[8].seeds)()[2];
    assert_eq!(
        perftest::params::TestParams::decode(p).unwrap().sizes,
        [4096, 8]
    );
}
