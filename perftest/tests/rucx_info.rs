//! rucx-info prints the version, every transport, and every configuration variable.

mod common;
use std::process::{Command, Stdio};
use std::time::Duration;

fn info(args: &[&str]) -> common::Run {
    let child = Command::new(env!("CARGO_BIN_EXE_rucx-info"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_with_watchdog(child, Duration::from_secs(60))
}

#[test]
fn version_devices_and_config() {
    let r = info(&["-v"]);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("# rucx version"), "{}", r.stdout);

    let r = info(&["-d"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    for t in uct::query_transports() {
        assert!(
            r.stdout.contains(&format!("Transport: {}", t.tl_name)),
            "{} missing:\n{}",
            t.tl_name,
            r.stdout
        );
    }
    assert!(r.stdout.contains("capabilities:"), "{}", r.stdout);

    let r = info(&["-c"]);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("RUCX_LOG_LEVEL="), "{}", r.stdout);
}

#[test]
fn bad_flag_is_one_line_exit_1() {
    let r = info(&["-Z"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}
