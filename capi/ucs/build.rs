//! Gives the shared library UCX's SONAME, so clients linked against `libucs.so.0` load it, and
//! compiles the C part (`src/cshim.c`: variadic functions and the data objects clients import).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucs.so.0");
    println!("cargo:rerun-if-changed=src/cshim.c");
    cc::Build::new()
        .file("src/cshim.c")
        .flag_if_supported("-fvisibility=default")
        .warnings(true)
        .extra_warnings(true)
        .compile("rucx_ucs_cshim");
}
