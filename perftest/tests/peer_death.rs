//! A side that loses its peer in the middle of a test stops with a one-line error instead of
//! spinning forever.

mod common;
use common::*;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn client_stops_when_the_server_dies() {
    let mut server = Server::start();
    let port = server.port.to_string();
    let client = perftest()
        .args([
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "am_lat",
            "-x",
            "posix",
            "-d",
            "memory",
            "-n",
            "2000000000",
            "-f",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    server.kill();
    let r = wait_with_watchdog(client, Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "stderr: {}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.starts_with("perftest: error: "), "{}", r.stderr);
}
