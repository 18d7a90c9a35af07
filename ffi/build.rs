//! Gives liblb.so its soname, so programs link against the ABI major version.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblb.so.0");
}
