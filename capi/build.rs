//! Gives the shared library UCX's SONAME, so clients linked against `libucp.so.0` load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucp.so.0");
}
