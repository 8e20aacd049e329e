//! Gives the shared library UCX's SONAME, so clients linked against `libucm.so.0` load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucm.so.0");
}
