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
    // Transport variables too, registered when the transports are queried.
    for v in [
        "RUCX_TCP_SNDBUF=",
        "RUCX_TCP_CONGESTION=auto",
        "RUCX_NET_DEVICES=",
    ] {
        assert!(r.stdout.contains(v), "{v} missing: {}", r.stdout);
    }
}

#[test]
fn bad_flag_is_one_line_exit_1() {
    let r = info(&["-Z"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn lanes_and_protocols_to_a_local_peer() {
    let r = info(&["-p", "local"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("# Lanes: am "), "{}", r.stdout);
    // The self transport reaches only its own process: it must be listed as rejected, with why.
    if uct::TRANSPORT_NAMES.contains(&"self") {
        assert!(r.stdout.contains("self/memory0: rejected"), "{}", r.stdout);
    }
    let r = info(&["-e"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("# Protocols"), "{}", r.stdout);
    assert!(r.stdout.contains(".. inf"), "{}", r.stdout);
}

#[test]
fn bad_peer_address_is_one_line_exit_1() {
    for bad in ["xyz", "0102"] {
        let r = info(&["-p", bad]);
        assert_eq!(r.code, Some(1), "{bad}");
        assert_eq!(r.stderr.lines().count(), 1, "{bad}: {}", r.stderr);
    }
}

/// A warning written to a pipe carries no terminal colour codes (a log file or a test harness
/// that compares output sees plain text), and names the unknown variable.
#[test]
fn warnings_into_a_pipe_are_plain_text() {
    let child = Command::new(env!("CARGO_BIN_EXE_rucx-info"))
        .arg("-v")
        .env("RUCX_TLSS", "tcp")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = common::wait_with_watchdog(child, Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("RUCX_TLSS"), "{}", r.stderr);
    assert!(r.stderr.contains("WARN"), "{}", r.stderr);
    assert!(!r.stderr.contains('\x1b'), "escape codes in {:?}", r.stderr);
}
