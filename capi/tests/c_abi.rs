//! Runs the C ABI tests (`tests/c/abi_layout.c`, `tests/c/onesided.c`, `tests/c/full_api.c` and
//! `tests/c/unhandled_failure.c`, compiled against UCX 1.13's installed headers) on this
//! package's `libucp.so.0`, over shared memory and over tcp on loopback. Fails, naming the package to install, when the headers are
//! missing.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_against_the_ucx_headers() {
    assert!(
        std::path::Path::new("/usr/include/ucp/api/ucp.h").exists(),
        "UCX 1.13's headers are missing: install libucx-dev (apt-get install libucx-dev)"
    );
    // The test binary lives in target/<profile>/deps; the cdylib in target/<profile>.
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    // Cargo writes the cdylib to deps/ and copies it up to the profile folder only for some
    // invocations (`cargo test --workspace` leaves it in deps/): take the newer of the two.
    let newest = [
        profile_dir.join("deps/librucx_ucp.so"),
        profile_dir.join("librucx_ucp.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max();
    let cdylib = match newest {
        Some((_, p)) => p,
        None => panic!(
            "librucx_ucp.so is in neither {0}/deps nor {0} (cargo builds the cdylib with the \
             package's tests)",
            profile_dir.display()
        ),
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_abi_lib");
    std::fs::create_dir_all(&dir).expect("lib dir");
    let lib = dir.join("libucp.so.0");
    let _ = std::fs::remove_file(&lib);
    std::fs::copy(&cdylib, &lib).expect("copy libucp.so.0");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/run.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .env("RUCX_LOG_LEVEL", "error")
        .output()
        .expect("run tests/c/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "C ABI test failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout.matches("abi_layout: all checks passed").count(),
        2,
        "both transports must pass:\n{stdout}"
    );
    assert_eq!(
        stdout
            .matches("unhandled_failure: the receiver ended by SIGABRT")
            .count(),
        2,
        "a receive failed on a worker without error handling must end the process (posix, \
         tcp):\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout
            .matches("unhandled_failure: the sender ended by SIGABRT")
            .count(),
        2,
        "a send refused at once on a worker without error handling must end the process \
         (posix, tcp):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("of UCX 1.13's headers checked, 0 wrong"),
        "every constant of UCX 1.13's headers must match rucx's:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout.matches("full_api: all checks passed").count(),
        4,
        "listener, stream, active messages, wake-up and peer death must pass over shm, tcp, \
         posix and sysv:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout.matches("onesided: all checks passed").count(),
        4,
        "the one-sided checks must pass on both transports, with multi- and single-thread \
         workers:\n{stdout}\n{stderr}"
    );
}
