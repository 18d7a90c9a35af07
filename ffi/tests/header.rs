//! `include/lb.h` is generated from this crate by the pinned cbindgen (a dev-dependency) and
//! committed. This test regenerates it in memory and fails when the committed file differs;
//! `LB_BLESS=1 cargo test -p liblb-ffi --test header` rewrites it instead.
//!
//! cbindgen runs `cargo metadata`, which Miri cannot do (it spawns a process), so the test is
//! compiled out under Miri; the plain test run checks the header.

#[cfg(not(miri))]
#[test]
fn header_is_fresh() {
    use std::path::Path;

    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header_path = crate_dir.join("../include/lb.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("ffi/cbindgen.toml is readable and valid");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen can parse the ffi crate")
        .write(&mut generated);

    if std::env::var_os("LB_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&header_path, &generated).expect("include/lb.h is writable");
        return;
    }
    let committed = std::fs::read(&header_path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/lb.h is stale (or missing): regenerate it with \
         `LB_BLESS=1 cargo test -p liblb-ffi --test header` and commit the result"
    );
}
