//! Bad input gives a one-line error on stderr and exit code 1, never a panic or a hang.

mod common;
use common::*;
use std::time::Duration;

fn assert_one_line_error(args: &[&str], needle: &str) {
    let r = run(args, Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "args {args:?}: stderr {}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "args {args:?}: not one line: {:?}",
        r.stderr
    );
    assert!(lines[0].starts_with("perftest: error: "), "{}", lines[0]);
    assert!(
        lines[0].contains(needle),
        "args {args:?}: {:?} lacks {needle:?}",
        lines[0]
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn unknown_test() {
    assert_one_line_error(
        &["--local", "-t", "no_such_test"],
        "unknown test 'no_such_test'",
    );
}

#[test]
fn unknown_option_and_layout() {
    assert_one_line_error(&["--local", "-t", "am_lat", "-Q"], "'-Q'");
    assert_one_line_error(
        &[
            "--local", "-t", "am_lat", "-x", "posix", "-d", "memory", "-D", "weird",
        ],
        "unknown data layout",
    );
    assert_one_line_error(&["--local", "-t", "am_lat", "-n", "many"], "many");
}

#[test]
fn test_without_server_or_transport() {
    assert_one_line_error(&["-t", "am_lat"], "needs a server");
    assert_one_line_error(&["--local", "-t", "am_lat"], "-x posix -d memory");
}

#[test]
fn missing_device_and_transport() {
    assert_one_line_error(
        &[
            "--local",
            "-t",
            "am_lat",
            "-x",
            "posix",
            "-d",
            "no_such_dev",
        ],
        "no device 'no_such_dev'",
    );
    assert_one_line_error(
        &["--local", "-t", "am_lat", "-x", "nosuch", "-d", "memory"],
        "unknown transport 'nosuch'",
    );
}

#[test]
fn size_over_the_transport_limit() {
    assert_one_line_error(
        &[
            "--local", "-t", "am_lat", "-x", "posix", "-d", "memory", "-s", "1000000",
        ],
        "exceeds",
    );
}

#[test]
fn operation_the_transport_lacks() {
    // cma has only zero-copy put/get: a short put is not one of its operations.
    assert_one_line_error(
        &["--local", "-t", "put_lat", "-x", "cma", "-d", "memory"],
        "no put_short",
    );
}

#[test]
fn no_server_there() {
    let (_held, port) = ucs::testing::refusing_port().expect("socket");
    let port = port.to_string();
    assert_one_line_error(
        &[
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "am_lat",
            "-x",
            "posix",
            "-d",
            "memory",
        ],
        "no perftest server at 127.0.0.1",
    );
}

#[test]
fn sizes_beyond_perftest_limits() {
    assert_one_line_error(
        &["--local", "-t", "tag_bw", "-s", "2g"],
        "limit of 1073741824",
    );
    assert_one_line_error(
        &["--local", "-t", "tag_bw", "-s", "512m", "-O", "64"],
        "smaller -O",
    );
    assert_one_line_error(
        &["--local", "-t", "tag_bw", "-s", "18446744073709551615,1"],
        "limit",
    );
}
