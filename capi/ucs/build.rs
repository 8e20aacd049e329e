//! Gives the shared library UCX's SONAME, so clients linked against `libucs.so.0` load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucs.so.0");
}
