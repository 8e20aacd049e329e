//! Gives the shared library UCX's SONAME, so clients linked against `libuct.so.0` load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libuct.so.0");
}
