//! End-to-end runs: `--local` spawns a server process and runs the client against it; the
//! output must parse and report the iterations asked for.

mod common;
use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// Parses the CSV output of one run: header and one row of 8 numbers.
fn parse_csv(stdout: &str) -> Vec<f64> {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(
        lines[0],
        "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr"
    );
    let v: Vec<f64> = lines[1]
        .split(',')
        .map(|x| x.parse().expect("number"))
        .collect();
    assert_eq!(v.len(), 8, "{stdout}");
    v
}

#[test]
fn local_am_lat_over_posix_prints_csv() {
    let r = run(
        &[
            "--local", "-t", "am_lat", "-x", "posix", "-d", "memory", "-n", "3000", "-w", "100",
            "-v",
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v = parse_csv(&r.stdout);
    assert_eq!(v[0], 3000.0);
    assert!(v[1] > 0.0 && v[2] > 0.0 && v[3] > 0.0, "latencies {v:?}");
    // Message rate is the inverse of the (half round trip) latency, as in ucx_perftest.
    let expect_mr = 1e6 / v[3];
    assert!((v[7] - expect_mr).abs() / expect_mr < 0.01, "{v:?}");
    // Bandwidth is size × rate in MB (2^20 bytes).
    let expect_bw = 8.0 * v[7] / 1048576.0;
    assert!((v[5] - expect_bw).abs() <= 0.01 + expect_bw * 0.01, "{v:?}");
}

#[test]
fn local_am_lat_table_has_final_line() {
    let r = run(
        &[
            "--local", "-t", "am_lat", "-x", "posix", "-d", "memory", "-n", "2000", "-w", "10",
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[3].contains("|    Stage     | # iterations | 50.0%ile |"),
        "{}",
        r.stdout
    );
    let last = lines.last().unwrap();
    assert!(last.starts_with("Final:"), "{last}");
    assert_eq!(last.len(), 106, "ucx_perftest's line width: {last:?}");
    let fields: Vec<&str> = last.split_whitespace().collect();
    assert_eq!(fields.len(), 9, "{last}");
    assert_eq!(fields[1], "2000");
}

#[test]
fn local_am_bw_bcopy_json() {
    let r = run(
        &[
            "--local", "-t", "am_bw", "-x", "posix", "-d", "memory", "-D", "bcopy", "-s", "1024",
            "-n", "5000", "-w", "10", "--json",
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let line = r.stdout.trim();
    assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
    assert!(line.contains("\"test\":\"am_bw\""), "{line}");
    assert!(line.contains("\"size\":1024"), "{line}");
    assert!(line.contains("\"iterations\":5000"), "{line}");
}

#[test]
fn self_transport_runs_in_loopback() {
    let r = run(
        &[
            "--local", "-t", "put_lat", "-x", "self", "-d", "memory0", "-n", "2000", "-v",
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(parse_csv(&r.stdout)[0], 2000.0);
}

#[test]
fn one_sided_and_atomic_tests_complete() {
    for args in [
        [
            "-t", "put_bw", "-x", "posix", "-d", "memory", "-D", "bcopy", "-s", "4096",
        ],
        [
            "-t", "get_bw", "-x", "cma", "-d", "memory", "-D", "zcopy", "-s", "65536",
        ],
        [
            "-t", "fadd_lat", "-x", "posix", "-d", "memory", "-s", "8", "-D", "short",
        ],
        [
            "-t", "add_lat", "-x", "sysv", "-d", "memory", "-s", "8", "-D", "short",
        ],
    ] {
        let mut a = vec!["--local", "-n", "2000", "-w", "10", "-v"];
        a.extend_from_slice(&args);
        let r = run(&a, LIMIT);
        assert_eq!(r.code, Some(0), "{args:?}: {}", r.stderr);
        assert_eq!(parse_csv(&r.stdout)[0], 2000.0, "{args:?}");
    }
}

#[test]
fn local_ucp_tests_run() {
    for (test, size) in [
        ("tag_lat", "8"),
        ("tag_bw", "8"),
        ("tag_lat", "100000"),
        ("tag_sync_bw", "64"),
    ] {
        let r = run(
            &[
                "--local", "-t", test, "-s", size, "-n", "2000", "-w", "10", "-v",
            ],
            LIMIT,
        );
        assert_eq!(r.code, Some(0), "{test} {size}: {}", r.stderr);
        let v = parse_csv(&r.stdout);
        assert_eq!(v[0], 2000.0, "{test}");
        assert!(v[7] > 0.0, "{test}: message rate {v:?}");
    }
}

/// The tests with traffic both ways: each side's every iteration completes, from mapped
/// memory and from heap vectors, eager and rendezvous sizes, over shared memory and tcp.
#[test]
fn local_both_ways_tests_run() {
    for (tls, test, size, mem) in [
        (None, "tag_bibw", "8", "map"),
        (None, "tag_bibw", "300000", "map"),
        (None, "tag_bibw", "300000", "heap"),
        (None, "tag_exchange", "65536", "heap"),
        (None, "tag_exchange", "1000000", "map"),
        (Some("tcp"), "tag_bibw", "100000", "heap"),
        (Some("tcp"), "tag_exchange", "100000", "heap"),
    ] {
        let r = run_ucp(
            tls,
            &[
                "--local", "-t", test, "-s", size, "--mem", mem, "-n", "300", "-w", "10", "-v",
            ],
        );
        assert_eq!(r.code, Some(0), "{tls:?} {test} {size} {mem}: {}", r.stderr);
        let v = parse_csv(&r.stdout);
        assert_eq!(v[0], 300.0, "{test}");
        assert!(v[7] > 0.0, "{test}: message rate {v:?}");
    }
}

/// Runs a ucp test with `RUCX_TLS` set (None: the default, shared memory) under a watchdog.
fn run_ucp(tls: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = perftest();
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    match tls {
        Some(t) => cmd.env("RUCX_TLS", t),
        None => cmd.env_remove("RUCX_TLS"),
    };
    wait_with_watchdog(cmd.spawn().expect("spawn perftest"), LIMIT)
}

/// The one-sided ucp tests: each runs to the end (the client checks the fetched values and the
/// final word of the atomics, the server the memory the puts wrote, the client what gets read)
/// and reports every iteration.
fn one_sided_ucp_tests(tls: Option<&str>, cases: &[(&str, &str, &str)]) {
    for &(test, size, outstanding) in cases {
        let r = run_ucp(
            tls,
            &[
                "--local",
                "-t",
                test,
                "-s",
                size,
                "-O",
                outstanding,
                "-n",
                "1500",
                "-w",
                "10",
                "-v",
            ],
        );
        assert_eq!(r.code, Some(0), "{tls:?} {test} -s {size}: {}", r.stderr);
        let v = parse_csv(&r.stdout);
        assert_eq!(v[0], 1500.0, "{tls:?} {test} -s {size}");
        assert!(v[7] > 0.0, "{tls:?} {test}: message rate {v:?}");
        if size.parse::<f64>().unwrap() >= 4096.0 {
            assert!(v[5] > 0.0, "{tls:?} {test}: bandwidth {v:?}");
        }
    }
}

#[test]
fn local_ucp_put_lat_over_shm() {
    one_sided_ucp_tests(
        None,
        &[("ucp_put_lat", "8", "1"), ("ucp_put_lat", "65536", "1")],
    );
}

#[test]
fn local_ucp_put_bw_over_shm() {
    one_sided_ucp_tests(
        None,
        &[("ucp_put_bw", "8", "16"), ("ucp_put_bw", "100000", "4")],
    );
}

#[test]
fn local_ucp_get_over_shm() {
    one_sided_ucp_tests(None, &[("ucp_get", "8", "1"), ("ucp_get", "65536", "8")]);
}

#[test]
fn local_ucp_add_over_shm() {
    one_sided_ucp_tests(None, &[("ucp_add", "8", "16"), ("ucp_add", "4", "1")]);
}

#[test]
fn local_ucp_fadd_over_shm() {
    one_sided_ucp_tests(None, &[("ucp_fadd", "8", "1"), ("ucp_fadd", "4", "16")]);
}

#[test]
fn local_ucp_swap_over_shm() {
    one_sided_ucp_tests(None, &[("ucp_swap", "8", "16"), ("ucp_swap", "4", "1")]);
}

#[test]
fn local_ucp_cswap_over_shm() {
    // -O 1: every compare-and-swap must match (the client checks).
    one_sided_ucp_tests(None, &[("ucp_cswap", "8", "1"), ("ucp_cswap", "4", "1")]);
}

#[test]
fn local_ucp_one_sided_over_tcp() {
    one_sided_ucp_tests(
        Some("tcp"),
        &[
            ("ucp_put_lat", "64", "1"),
            ("ucp_put_bw", "65536", "4"),
            ("ucp_get", "4096", "4"),
            ("ucp_add", "8", "16"),
            ("ucp_fadd", "8", "4"),
            ("ucp_swap", "4", "4"),
            ("ucp_cswap", "8", "1"),
        ],
    );
}

#[test]
fn ucp_one_sided_bad_size_is_a_one_line_error() {
    for args in [
        ["-t", "ucp_put_lat", "-s", "0"],
        ["-t", "ucp_fadd", "-s", "16"],
    ] {
        let mut a = vec!["--local"];
        a.extend_from_slice(&args);
        let r = run(&a, LIMIT);
        assert_eq!(r.code, Some(1), "{args:?}");
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(r.stderr.contains(args[1]), "{}", r.stderr);
    }
}

#[test]
fn ucp_put_and_get_over_posix_alone_use_mapped_shared_memory() {
    // ucp's mem_map allocates from the posix domain, so posix alone (no cma, no tcp) carries
    // put and get as loads and stores on the peer's mapped segment.
    for test in ["ucp_put_lat", "ucp_get"] {
        let r = run_ucp(Some("posix,self"), &["--local", "-t", test, "-n", "100"]);
        assert_eq!(r.code, Some(0), "{test}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("Final"), "{}", r.stdout);
    }
}
