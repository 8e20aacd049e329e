//! Runs the C ABI test (`tests/c/abi_layout.c`, compiled against UCX 1.13's installed headers)
//! on this package's `libucp.so.0`, over shared memory and over tcp on loopback. Fails, naming
//! the package to install, when the headers are missing.

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
    let cdylib = profile_dir.join("librucx_ucp.so");
    assert!(
        cdylib.exists(),
        "{} was not built (cargo builds the cdylib with the package's tests)",
        cdylib.display()
    );
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
}
