//! Runs `tests/c/uct_api.c` and `tests/c/peer_death.c` (compiled against UCX 1.13's installed
//! headers) on this package's `libuct.so.0` with `libucs.so.0` beside it: every uct call, the
//! header-inline ones through the operations table and progress queue the library lays out,
//! over self, posix, sysv, cma and tcp; and a peer killed under an endpoint reaching the
//! interface's error handler over posix, sysv and tcp. Fails, naming the package to install,
//! when the headers are missing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The newest of a cdylib's two places (cargo leaves it in `deps/` for some invocations).
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

/// Puts a cdylib into `dir` as `lib<name>.so.0`, with the `lib<name>.so` link `-l` needs.
fn install(dir: &Path, cdylib_name: &str, name: &str) {
    let so0 = dir.join(format!("lib{name}.so.0"));
    let _ = std::fs::remove_file(&so0);
    std::fs::copy(cdylib(cdylib_name), &so0).expect("copy the library");
    let link = dir.join(format!("lib{name}.so"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("lib{name}.so.0"), link).expect("symlink");
}

#[test]
fn c_program_against_the_ucx_headers() {
    assert!(
        Path::new("/usr/include/uct/api/uct.h").exists(),
        "UCX 1.13's headers are missing: install libucx-dev (apt-get install libucx-dev)"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("uct_c_api");
    std::fs::create_dir_all(&dir).expect("lib dir");
    install(&dir, "librucx_uct.so", "uct");
    install(&dir, "librucx_ucs.so", "ucs");
    for (name, args, expect) in [
        (
            "uct_api",
            &[
                "self/memory0",
                "posix/memory",
                "sysv/memory",
                "cma/memory",
                "tcp/lo",
            ][..],
            5,
        ),
        (
            "peer_death",
            &["posix/memory", "sysv/memory", "tcp/lo"][..],
            3,
        ),
    ] {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
        let exe = dir.join(name);
        let cc = Command::new("cc")
            .args(["-O1", "-Wall", "-o"])
            .arg(&exe)
            .arg(&src)
            .arg(format!("-L{}", dir.display()))
            .args(["-luct", "-lucs"])
            .output()
            .expect("run cc");
        assert!(
            cc.status.success(),
            "cc {name}: {}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = Command::new(&exe)
            .args(args)
            .env("LD_LIBRARY_PATH", &dir)
            .env("RUCX_LOG_LEVEL", "error")
            .output()
            .expect("run the test program");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.matches(" passed").count() == expect,
            "{name} failed:\n{stdout}\n{stderr}"
        );
    }
}
