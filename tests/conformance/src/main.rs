//! `gen-vectors`: regenerates `tests/vectors/vectors.json` from the core.
//! Run from anywhere: `cargo run -p liblb-conformance --bin gen-vectors`.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join(liblb_conformance::VECTORS_PATH);
    std::fs::write(&path, liblb_conformance::render())?;
    println!("wrote {}", path.display());
    Ok(())
}
