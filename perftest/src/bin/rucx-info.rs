//! `rucx-info`: what rucx sees on this machine (placeholder filled in step 3).
fn main() {}
