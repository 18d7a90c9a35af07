#!/usr/bin/env bash
# liblb's release artifacts, one command:
#
#   scripts/package.sh            # writes dist/ (or $LIBLB_DIST)
#
#   liblb-<version>.tgz                         npm package: the compiled addon for this platform
#                                               (liblb.linux-x64-gnu.node) + the Rust sources in
#                                               rust/, built from only where no prebuilt loads
#   liblb-<version>-cp310-abi3-<manylinux>.whl  Python wheel (abi3: CPython >= 3.10), the tag
#                                               checked with `auditwheel show`
#   liblb-<version>.tar.gz                      Python sdist (pip builds it where Rust is)
#   liblb-<version>-x86_64-linux-gnu.tar.gz     C/C++: lib/liblb.so* (soname liblb.so.0),
#                                               lib/liblb.a, include/lb.h + lb.hpp,
#                                               lib/pkgconfig/liblb.pc (relocatable), README
#   SHA256SUMS
#
# The version has one source, [workspace.package] in Cargo.toml; node/package.json and lb.h
# must agree. Linux only (the C tarball and the wheel tag are linux-gnu). Needs the toolchains
# (Rust, Python >= 3.10 with venv + pip, Node + npm, binutils); maturin and auditwheel come
# pinned from python/requirements-package.txt into a venv under the cargo target dir.
# Honors CARGO_TARGET_DIR (default <repo>/target); scripts/test-packages.sh installs the results.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
dist="${LIBLB_DIST:-$repo/dist}"
started=$SECONDS
step() { printf '\n== package [%3ds]: %s\n' "$((SECONDS - started))" "$*"; }
fail() {
    printf '\n== package: FAILED: %s\n' "$*" >&2
    exit 1
}

[[ "$(uname -s)" == Linux ]] || fail "package.sh makes linux-gnu artifacts; this is $(uname -s)"
for tool in cargo rustc node npm python3 strip readelf tar sha256sum; do
    command -v "$tool" >/dev/null || fail "$tool is not on PATH"
done

# --- version: Cargo.toml is the truth --------------------------------------------------------
version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)"
[[ -n "$version" ]] || fail "no version in Cargo.toml's [workspace.package]"
node_version="$(node -p "require('./node/package.json').version")"
[[ "$node_version" == "$version" ]] || fail "node/package.json has version $node_version, Cargo.toml $version"
header_version="$(for p in MAJOR MINOR PATCH; do sed -n "s/^#define LB_VERSION_$p \([0-9]*\)$/\1/p" include/lb.h; done | paste -sd.)"
[[ "$header_version" == "$version" ]] || fail "include/lb.h has version $header_version, Cargo.toml $version"
host="$(rustc -vV | sed -n 's/^host: //p')"
[[ "$host" == *-unknown-linux-gnu ]] || fail "host $host is not *-unknown-linux-gnu"
c_name="liblb-$version-${host%%-*}-linux-gnu"
echo "liblb $version for $host -> $dist"

rm -rf "$dist"
mkdir -p "$dist"

# --- npm tarball -----------------------------------------------------------------------------
step "Node: release addon, npm pack (prepare vendors the Rust sources into node/rust/)"
# The package's own install step, forced to build: the repo's workspace, `--target <host>`
# like `napi build`, so the Node suite's build is reused.
LIBLB_BUILD_FROM_SOURCE=1 node node/scripts/install.js
addon="liblb.$(node -p "require('./node/scripts/install.js').napiPlatform('$host')").node"
[[ -f "node/$addon" ]] || fail "node/$addon was not built"
# The release profile keeps debug info for profiling; the published addon does not need it.
strip --strip-debug "node/$addon"
# prebuilt.json vouches for this addon (name + SHA-256): only then does the installed package's
# install step use it instead of building (node/scripts/install.js). It exists only while npm
# packs, so a checkout copied by `npm install --install-links` never vouches for a stale addon.
trap 'rm -f "$repo/node/prebuilt.json"' EXIT
printf '{\n  "%s": "%s"\n}\n' "$addon" "$(sha256sum "node/$addon" | cut -d' ' -f1)" >node/prebuilt.json
tgz="$(cd node && npm pack --silent --pack-destination "$dist")"
# node/rust/ (written by the prepare step) is in the tarball now; the checkout does not need it.
rm -rf node/prebuilt.json node/rust
[[ "$tgz" == "liblb-$version.tgz" ]] || fail "npm pack wrote '$tgz', expected liblb-$version.tgz"
listing="$(tar -tzf "$dist/$tgz")"
for want in package/package.json package/index.js package/index.mjs package/index.d.ts \
    "package/$addon" package/prebuilt.json package/scripts/install.js package/rust/Cargo.toml package/rust/Cargo.lock \
    package/rust/core/src/lib.rs package/rust/node/src/lib.rs; do
    grep -qx "$want" <<<"$listing" || fail "$tgz lacks $want"
done
# node/Cargo.toml at the top would make cargo look for the repo's workspace root: only rust/.
for unwanted in package/Cargo.toml package/src/lib.rs package/test/api.test.js; do
    if grep -qx "$unwanted" <<<"$listing"; then fail "$tgz contains $unwanted"; fi
done

# --- Python wheel + sdist --------------------------------------------------------------------
step "Python: maturin build (wheel) + maturin sdist, auditwheel show"
venv="$CARGO_TARGET_DIR/package-venv"
if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    python3 -m venv --clear "$venv" || {
        apt-get update && apt-get install -y python3-venv
        python3 -m venv --clear "$venv"
    }
fi
if ! cmp -s python/requirements-package.txt "$venv/.liblb-requirements-package.txt"; then
    "$venv/bin/python" -m pip install --quiet -r python/requirements-package.txt
    cp python/requirements-package.txt "$venv/.liblb-requirements-package.txt"
fi
"$venv/bin/maturin" build --release --locked -m python/Cargo.toml --out "$dist"
"$venv/bin/maturin" sdist -m python/Cargo.toml --out "$dist"
wheels=("$dist"/liblb-"$version"-*.whl)
[[ ${#wheels[@]} -eq 1 && -f "${wheels[0]}" ]] || fail "expected one wheel, got: ${wheels[*]}"
wheel="$(basename "${wheels[0]}")"
[[ "$wheel" == liblb-"$version"-cp310-abi3-manylinux*_x86_64.whl ]] ||
    fail "wheel $wheel is not cp310-abi3 manylinux x86_64"
show="$("$venv/bin/auditwheel" show "${wheels[0]}")"
echo "$show"
# auditwheel names the most compatible tag the wheel's symbols allow; the file's tag must be it.
tag="$(sed -n 's/.*consistent with the following platform tag:[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$(tr '\n' ' ' <<<"$show")")"
[[ -n "$tag" && "$tag" == manylinux* ]] || fail "auditwheel show found no manylinux tag"
[[ "$wheel" == *"$tag"* ]] || fail "wheel $wheel is not tagged $tag, the tag auditwheel computed"
sdist="$dist/liblb-$version.tar.gz"
[[ -f "$sdist" ]] || fail "maturin sdist did not write $(basename "$sdist")"
# The Python crate depends on liblb-core by workspace path: the sdist must carry it.
sdist_listing="$(tar -tzf "$sdist")"
for want in "liblb-$version/core/src/lib.rs" "liblb-$version/core/Cargo.toml" "liblb-$version/Cargo.lock"; do
    grep -qx "$want" <<<"$sdist_listing" || fail "sdist lacks $want"
done

# --- C tarball -------------------------------------------------------------------------------
step "C: scripts/install.sh --relocatable into $c_name/, strip debug info, tar"
stage="$(mktemp -d)"
trap 'rm -rf "$stage" "$repo/node/prebuilt.json"' EXIT
scripts/install.sh --relocatable "$stage/$c_name"
strip --strip-debug "$stage/$c_name/lib/liblb.so.$version" "$stage/$c_name/lib/liblb.a"
cat >"$stage/$c_name/README.md" <<README
# liblb $version for C and C++ (${host%%-*} Linux, glibc)

liblb picks a backend node for each request: random, weighted random, round robin, smooth
weighted round robin (nginx's), source hash and a SHA-256 consistent-hash ring, behind one C ABI.

    lib/liblb.so.$version   the shared library (soname liblb.so.0; liblb.so.0 and liblb.so link to it)
    lib/liblb.a            the static library
    include/lb.h           the C API (every function documented there); include/lb.hpp: C++17 RAII
    lib/pkgconfig/liblb.pc pkg-config file; its prefix is relative to itself, so this folder can
                           live anywhere (or be copied into /usr/local)

Build against it (DIR = where you extracted this folder):

    export PKG_CONFIG_PATH=DIR/lib/pkgconfig
    cc app.c \$(pkg-config --cflags --libs liblb) -Wl,-rpath,\$(pkg-config --variable=libdir liblb)
    # static (-llb would choose liblb.so):
    cc app.c \$(pkg-config --cflags liblb) "\$(pkg-config --variable=libdir liblb)/liblb.a" \\
        \$(pkg-config --variable=native_libs liblb)

    #include <lb.h>
    lb_node nodes[] = {{"10.0.0.1:80", 11, 1, 0}, {"10.0.0.2:80", 11, 1, 1}}; /* id, len, weight, tag */
    lb_balancer *ring = NULL;
    if (lb_balancer_new("ring", 4, NULL, nodes, 2, &ring) != LB_RESULT_OK) return 1;
    uint64_t tag;
    lb_balancer_pick(ring, "user-42", 7, &tag, NULL, 0, NULL);     /* tag: 0 or 1 */
    lb_balancer_free(ring);

License: MIT OR Apache-2.0.
README
tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$dist/$c_name.tar.gz" "$c_name"

# --- checksums -------------------------------------------------------------------------------
(cd "$dist" && sha256sum -- *.tgz *.whl *.tar.gz >SHA256SUMS)
step "done: $dist"
ls -l "$dist"
