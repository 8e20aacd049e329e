//! Runs the ucp example programs as their users would: server and client processes over shared
//! memory and over tcp, with a watchdog on every process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WATCHDOG: Duration = Duration::from_secs(180);

fn bin(name: &str) -> PathBuf {
    // Build the examples once (cargo serialises concurrent builds), then run them from the target
    // directory this test binary lives in.
    let st = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "rucx-examples", "--bin", name])
        .status()
        .expect("cargo build");
    assert!(st.success(), "building {name}");
    let mut p = std::env::current_exe().expect("exe");
    p.pop();
    if p.ends_with("deps") {
        p.pop();
    }
    p.join(name)
}

/// The port a server started with `-p 0` names in its log at `path`, on the first line that
/// contains `marker` (the digits at the end of that line), waited for under the watchdog.
fn port_from_log(path: &std::path::Path, marker: &str, server: &mut Proc) -> u16 {
    let end = Instant::now() + WATCHDOG;
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        // Only a whole line (ending in a newline): the server may be midway through writing it.
        let whole = log.split_inclusive('\n').filter(|l| l.ends_with('\n'));
        if let Some(line) = whole.map(str::trim_end).find(|l| l.contains(marker)) {
            let digits: String = line
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_digit())
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return digits.parse().expect("port in the server's line");
        }
        if let Some(st) = server.0.try_wait().expect("wait") {
            panic!("server exited ({st}) before listening: {log}");
        }
        assert!(
            Instant::now() < end,
            "watchdog: server never listened: {log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_to_end(mut c: Command, what: &str) -> (bool, String) {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut p = Proc(child);
    let end = Instant::now() + WATCHDOG;
    loop {
        if let Some(st) = p.0.try_wait().expect("wait") {
            let mut out = String::new();
            let mut err = String::new();
            use std::io::Read;
            if let Some(mut o) = p.0.stdout.take() {
                let _ = o.read_to_string(&mut out);
            }
            if let Some(mut e) = p.0.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (st.success(), format!("{out}{err}"));
        }
        assert!(Instant::now() < end, "watchdog: {what} did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cmd(path: &PathBuf, tls: &str) -> Command {
    let mut c = Command::new(path);
    c.env("RUCX_TLS", tls).env("RUCX_NET_DEVICES", "lo");
    c
}

#[test]
fn ucp_examples_hello_world_shm_and_tcp() {
    let hw = bin("ucp_hello_world");
    for tls in ["posix,cma", "tcp"] {
        let log_path = std::env::temp_dir().join(format!(
            "ucp_hw_server_{}_{}.log",
            std::process::id(),
            tls.replace(',', "_")
        ));
        let log = std::fs::File::create(&log_path).expect("server log");
        let mut s = cmd(&hw, tls);
        s.args(["-p", "0", "-s", "100"])
            .stdout(Stdio::null())
            .stderr(log);
        let mut server = Proc(s.spawn().expect("hello server"));
        let port = port_from_log(&log_path, "waiting for a client on port", &mut server);
        let end = Instant::now() + WATCHDOG;
        let (ok, out) = loop {
            let mut c = cmd(&hw, tls);
            c.args(["-n", "127.0.0.1", "-p", &port.to_string(), "-s", "100"])
                .env("RUCX_PROTO_INFO", "y");
            let (ok, out) = run_to_end(c, "hello client");
            if ok || !out.contains("cannot connect") || Instant::now() > end {
                break (ok, out);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(ok, "{tls} client: {out}");
        assert!(out.contains("UCP TEST SUCCESS"), "{out}");
        // RUCX_PROTO_INFO=y printed the endpoint's protocol table.
        assert!(out.contains("[rucx] endpoint to"), "{out}");
        assert!(
            out.contains("eager short") && out.contains("rendezvous"),
            "{out}"
        );
        let st = loop {
            if let Some(st) = server.0.try_wait().expect("wait") {
                break st;
            }
            assert!(
                Instant::now() < end,
                "watchdog: hello server did not finish"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let sout = std::fs::read_to_string(&log_path).unwrap_or_default();
        let _ = std::fs::remove_file(&log_path);
        assert!(st.success(), "{tls} server: {sout}");
    }
}

#[test]
fn ucp_examples_client_server_64mib_all_apis_shm_and_tcp() {
    let cs = bin("ucp_client_server");
    for tls in ["posix,cma", "tcp"] {
        for comm in ["tag", "stream", "am"] {
            // The server's log goes to a file: it names the port the kernel picked, and it is
            // quoted when a client fails.
            let log_path = std::env::temp_dir().join(format!(
                "ucp_cs_server_{}_{}_{comm}.log",
                std::process::id(),
                tls.replace(',', "_")
            ));
            let log = std::fs::File::create(&log_path).expect("server log");
            let mut s = cmd(&cs, tls);
            s.args(["-p", "0", "-c", comm, "-i", "1", "-s", "64m"])
                .stdout(Stdio::null())
                .stderr(log);
            let mut server = Proc(s.spawn().expect("server"));
            let port = port_from_log(&log_path, "server: listening on", &mut server).to_string();
            // Two clients one after the other: the server keeps serving.
            for k in 0..2 {
                let mut c = cmd(&cs, tls);
                c.args([
                    "-a",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-c",
                    comm,
                    "-i",
                    "1",
                    "-s",
                    "64m",
                ]);
                let (ok, out) = run_to_end(c, "client");
                let server_log = std::fs::read_to_string(&log_path).unwrap_or_default();
                assert!(
                    ok,
                    "{tls} {comm} client {k}: {out}\nserver log:\n{server_log}"
                );
                assert!(out.contains("verified"), "{out}");
            }
            let _ = std::fs::remove_file(&log_path);
        }
    }
}

#[test]
fn ucp_examples_client_without_server_fails_with_reason() {
    let cs = bin("ucp_client_server");
    let (_held, port) = ucs::testing::refusing_port().expect("socket");
    let port = port.to_string();
    let mut c = cmd(&cs, "tcp");
    c.args(["-a", "127.0.0.1", "-p", &port]);
    let (ok, out) = run_to_end(c, "client");
    assert!(!ok);
    assert!(out.contains("ucp_client_server: unreachable"), "{out}");
    assert_eq!(out.trim().lines().count(), 1, "one-line reason: {out}");
}

/// The tokio example between two processes, over shared memory and over tcp: the server binds
/// port 0 and prints the port; the client sends every message at once as futures (eager and
/// rendezvous sizes), and both check the data.
#[test]
fn ucp_examples_tokio_futures_shm_and_tcp() {
    use std::io::{BufRead, BufReader};
    let tk = bin("ucp_tokio");
    for tls in ["posix,cma", "tcp"] {
        let mut s = cmd(&tk, tls);
        s.args(["-n", "24", "-s", "1m"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut server = Proc(s.spawn().expect("server"));
        let mut out = BufReader::new(server.0.stdout.take().expect("server stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("server's first line");
        let port = line
            .trim()
            .strip_prefix("listening on port ")
            .unwrap_or_else(|| panic!("{tls}: unexpected first line {line:?}"))
            .to_string();
        let mut c = cmd(&tk, tls);
        c.args(["-a", "127.0.0.1", "-p", &port, "-n", "24", "-s", "1m"]);
        let (ok, cout) = run_to_end(c, "tokio client");
        assert!(ok, "{tls} client: {cout}");
        assert!(
            cout.contains("client: 24 messages (up to 1048576 bytes) echoed and verified"),
            "{cout}"
        );
        // The server ends by itself after its one client.
        let end = Instant::now() + WATCHDOG;
        let st = loop {
            if let Some(st) = server.0.try_wait().expect("wait") {
                break st;
            }
            assert!(
                Instant::now() < end,
                "watchdog: {tls} tokio server did not end"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        use std::io::Read;
        let _ = out.read_to_string(&mut rest);
        if let Some(mut e) = server.0.stderr.take() {
            let _ = e.read_to_string(&mut rest);
        }
        assert!(st.success(), "{tls} server: {rest}");
        assert!(
            rest.contains("server: 24 messages verified and echoed"),
            "{rest}"
        );
    }
}
