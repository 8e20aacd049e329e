//! Runs `tests/c/ucs_api.c` (compiled against UCX 1.13's installed headers) on this package's
//! `libucs.so.0`: the logging macros through the client's copy of `ucs_global_opts`, the
//! handler stack, the data objects, string buffers, memory units, socket addresses, async
//! contexts and the clock. Fails, naming the package to install, when the headers are missing.

use std::path::PathBuf;
use std::process::Command;

/// The newest of the cdylib's two places (cargo leaves it in `deps/` for some invocations).
fn cdylib(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    [profile_dir.join("deps").join(name), profile_dir.join(name)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "{name} is in neither {0}/deps nor {0}",
                profile_dir.display()
            )
        })
}

#[test]
fn c_program_against_the_ucx_headers() {
    assert!(
        std::path::Path::new("/usr/include/ucs/debug/log_def.h").exists(),
        "UCX 1.13's headers are missing: install libucx-dev (apt-get install libucx-dev)"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ucs_c_api");
    std::fs::create_dir_all(&dir).expect("lib dir");
    let lib = dir.join("libucs.so.0");
    let _ = std::fs::remove_file(&lib);
    std::fs::copy(cdylib("librucx_ucs.so"), &lib).expect("copy libucs.so.0");
    let _ = std::fs::remove_file(dir.join("libucs.so"));
    std::os::unix::fs::symlink("libucs.so.0", dir.join("libucs.so")).expect("symlink");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/ucs_api.c");
    let exe = dir.join("ucs_api");
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", dir.display()))
        .arg("-lucs")
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("UCX_LOG_LEVEL", "info")
        .env_remove("RUCX_LOG_LEVEL")
        .output()
        .expect("run ucs_api");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ucs_api: all checks passed"),
        "ucs_api failed:\n{stdout}\n{stderr}"
    );
}
