#!/usr/bin/env bash
# liblb's release artifacts, one command, from this x86-64 Linux machine for four targets:
#
#   scripts/package.sh            # writes dist/ (or $LIBLB_DIST)
#   LIBLB_TARGETS="x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu" scripts/package.sh
#                                 # only those targets (CI; the default is all four)
#
#   targets: x86_64-unknown-linux-gnu   aarch64-unknown-linux-gnu   (glibc >= 2.17)
#            x86_64-unknown-linux-musl  aarch64-unknown-linux-musl  (musl >= 1.2)
#
#   liblb-<version>.tgz                         npm package: one compiled addon per target
#                                               (liblb.linux-{x64,arm64}-{gnu,musl}.node; the
#                                               loader picks by arch and libc) + the Rust sources
#                                               in rust/, built from only where no prebuilt loads
#   liblb-<version>-cp310-abi3-<tag>.whl        Python wheels (abi3: CPython >= 3.10), one per
#                                               target: manylinux2014 (= manylinux_2_17) and
#                                               musllinux_1_2, each tag checked by `auditwheel show`
#   liblb-<version>.tar.gz                      Python sdist (pip builds it where Rust is)
#   liblb-<version>-<arch>-linux-<libc>.tar.gz  C/C++, one per target: lib/liblb.so* (soname
#                                               liblb.so.0), lib/liblb.a, include/lb.h + lb.hpp,
#                                               lib/pkgconfig/liblb.pc (relocatable), README
#   SHA256SUMS
#
# Cross builds link with zig (PyPI's ziglang): maturin --zig for the wheels, cargo-zigbuild for
# the C library and the addons, against glibc 2.17's symbols or musl; the cargo profile is
# `dist` (release without debug info). Every shared object is checked: the glibc symbol
# versions it needs (none newer than 2.17), or, for musl, that it needs only musl's libc.
#
# The version has one source, [workspace.package] in Cargo.toml; node/package.json, lb.h and
# CHANGELOG.md's newest release must agree (scripts/check-version.sh). Needs the toolchains
# (Rust via rustup, which adds the targets; Python >= 3.10 with venv + pip; Node + npm;
# binutils); the release tools come pinned from python/requirements-package.txt into a venv
# under the cargo target dir. Honors CARGO_TARGET_DIR (default <repo>/target);
# scripts/test-packages.sh and scripts/test-platforms.sh install the results.
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

[[ "$(uname -s)" == Linux && "$(uname -m)" == x86_64 ]] ||
    fail "package.sh cross-builds from x86-64 Linux; this is $(uname -s) $(uname -m)"
for tool in cargo rustc rustup node npm python3 readelf tar sha256sum; do
    command -v "$tool" >/dev/null || fail "$tool is not on PATH"
done
all_targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
read -r -a targets <<<"${LIBLB_TARGETS:-${all_targets[*]}}"
for target in "${targets[@]}"; do
    [[ " ${all_targets[*]} " == *" $target "* ]] || fail "LIBLB_TARGETS: $target is not one of ${all_targets[*]}"
done

# --- version: Cargo.toml is the truth; every manifest and the changelog agree ---------------
version="$(scripts/check-version.sh)" || fail "the versions disagree (scripts/check-version.sh)"
echo "liblb $version for ${targets[*]} -> $dist"

rm -rf "$dist"
mkdir -p "$dist"

# The README inside each C tarball. Usage: c_readme ARCH LIBC FLOOR
c_readme() {
    cat <<README
# liblb $version for C and C++ ($1 Linux, $2)

liblb picks a backend node for each request: random, weighted random, round robin, smooth
weighted round robin (nginx's), source hash, consistent-hash rings (seed 001's, ketama, Envoy's
ring_hash and Maglev), jump, rendezvous and the load-aware algorithms, behind one C ABI.

Runs on: $3.

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
}

# --- the release tools, the Rust targets --------------------------------------------------
step "tools: python/requirements-package.txt into $CARGO_TARGET_DIR/package-venv; rustup targets"
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
# maturin and cargo-zigbuild find zig as `python -m ziglang` of the python on PATH.
export PATH="$venv/bin:$PATH"
installed="$(rustup target list --installed)"
for target in "${targets[@]}"; do
    grep -qx "$target" <<<"$installed" || rustup target add "$target" ||
        fail "rustup cannot add $target"
done
# llvm-strip takes the debug info out of every target's liblb.a (binutils' strip reads only
# this machine's objects); the shared objects come stripped from the dist profile.
llvm_strip="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-strip"
[[ -x "$llvm_strip" ]] || rustup component add llvm-tools || fail "rustup cannot add llvm-tools"
[[ -x "$llvm_strip" ]] || fail "no $llvm_strip after rustup component add llvm-tools"

# arch and libc of a target triple, in the names each ecosystem uses.
arch_of() { echo "${1%%-*}"; }       # x86_64, aarch64 (the C tarball, the wheel tag)
libc_of() { echo "${1##*-}"; }       # gnu, musl
musl_soname() { echo "libc.musl-$(arch_of "$1").so.1"; }

# A shared object built for TARGET must run where the package says it does: for gnu, no glibc
# symbol version newer than 2.17 and no library outside glibc; for musl, no library but libc.
# zig's musl stub names libc `libc.so`, which musl's loader takes as itself (as it does any
# `libc.*`) and which links on Alpine and with Debian's musl-gcc alike. A wheel's extension must
# name it as Alpine does, libc.musl-<arch>.so.1, the only name auditwheel's musllinux policy
# allows: usage check_shared_object TARGET FILE [wheel] renames it there.
needed_of() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u | paste -sd' '; }
check_shared_object() {
    local target="$1" so="$2" needed newest
    needed="$(needed_of "$so")"
    [[ "$(readelf -h "$so" | sed -n 's/^ *Machine: *//p')" == "$(machine_of "$target")" ]] ||
        fail "$so is not built for $target"
    case "$(libc_of "$target")" in
        gnu)
            newest="$(readelf -V "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
            [[ "$(printf '%s\n2.17\n' "$newest" | sort -V | tail -n 1)" == 2.17 ]] ||
                fail "$so needs glibc $newest (> 2.17)"
            for lib in $needed; do
                [[ "$lib" =~ ^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libgcc_s\.so\.1|ld-linux-.*)$ ]] ||
                    fail "$so needs $lib, which is not part of glibc"
            done
            echo "$(basename "$so"): glibc >= ${newest:-any}; needs $needed"
            ;;
        musl)
            [[ "$needed" == libc.so ]] || fail "$so needs '$needed', not only musl's libc"
            if [[ "${3:-}" == wheel ]]; then
                patchelf --replace-needed libc.so "$(musl_soname "$target")" "$so"
                needed="$(needed_of "$so")"
                [[ "$needed" == "$(musl_soname "$target")" ]] || fail "patchelf left $so needing '$needed'"
            fi
            echo "$(basename "$so"): musl; needs $needed"
            ;;
    esac
}
machine_of() {
    case "$(arch_of "$1")" in
        x86_64) echo "Advanced Micro Devices X86-64" ;;
        aarch64) echo AArch64 ;;
        *) fail "no ELF machine known for $1" ;;
    esac
}

# --- per target: the Node addon, the wheel, the C tarball -----------------------------------
napi_platform() { node -p "require('./node/scripts/install.js').napiPlatform('$1')"; }
# The checkout's own addons (the Node suite's build) are set aside while the package's are in
# node/, and put back afterwards; prebuilt.json exists only while npm packs (see below).
saved="$(mktemp -d)"
stage="$(mktemp -d)"
restore_node() {
    rm -f "$repo"/node/liblb.*.node "$repo/node/prebuilt.json"
    rm -rf "$repo/node/rust"
    if compgen -G "$saved/*.node" >/dev/null; then mv "$saved"/*.node "$repo/node/"; fi
    rm -rf "$saved" "$stage"
}
trap restore_node EXIT
if compgen -G "node/liblb.*.node" >/dev/null; then mv node/liblb.*.node "$saved/"; fi

addons=()
for target in "${targets[@]}"; do
    arch="$(arch_of "$target")"
    libc="$(libc_of "$target")"
    zig_target="$target"
    [[ "$libc" == gnu ]] && zig_target="$target.2.17"
    if [[ "$libc" == musl ]]; then
        # A musl cdylib links musl dynamically (Rust's musl targets default to static).
        export "CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$target")_RUSTFLAGS=-C target-feature=-crt-static"
    fi

    step "$target: Node addon (cargo zigbuild --target $zig_target)"
    cargo zigbuild --quiet --locked --profile dist -p liblb-node --target "$zig_target"
    addon="liblb.$(napi_platform "$target").node"
    cp "$CARGO_TARGET_DIR/$target/dist/libliblb_node.so" "node/$addon"
    check_shared_object "$target" "node/$addon"
    addons+=("$addon")

    step "$target: Python wheel (maturin build --zig), auditwheel show"
    if [[ "$libc" == gnu ]]; then compat=manylinux2014; else compat=musllinux_1_2; fi
    rm -rf "$stage/wheel"
    maturin build --quiet --profile dist --locked --zig --target "$target" --compatibility "$compat" \
        -m python/Cargo.toml --out "$stage/wheel"
    built=("$stage"/wheel/liblb-"$version"-cp310-abi3-*.whl)
    [[ ${#built[@]} -eq 1 && -f "${built[0]}" ]] || fail "expected one wheel for $target, got: ${built[*]}"
    # Unpacked, its extension module checked (and for musl given Alpine's libc soname), and
    # packed again: `wheel pack` writes RECORD anew with the changed file's hash.
    wheel unpack --dest "$stage/wheel/unpacked" "${built[0]}" >/dev/null
    check_shared_object "$target" "$stage/wheel/unpacked/liblb-$version/liblb/_liblb.abi3.so" wheel
    wheel pack --dest-dir "$dist" "$stage/wheel/unpacked/liblb-$version" >/dev/null
    wheel="$(basename "${built[0]}")"
    [[ -f "$dist/$wheel" ]] || fail "wheel pack did not write $wheel"
    [[ "$wheel" == *"_$arch.whl" ]] || fail "wheel $wheel is not for $arch"
    # auditwheel names the most compatible tag the wheel's symbols allow; the file must claim
    # it. (For musl it must not look up `libc.*` in this glibc machine's folders.)
    ldpaths=()
    [[ "$libc" == musl ]] && ldpaths=(--ldpaths "$stage/no-such-folder")
    show="$(auditwheel show "${ldpaths[@]}" "$dist/$wheel" 2>&1)"
    echo "$show"
    tag="$(sed -n 's/.*consistent with the following platform tag:[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$(tr '\n' ' ' <<<"$show")")"
    case "$libc" in
        gnu) [[ "$tag" == "manylinux_2_17_$arch" ]] || fail "auditwheel says $wheel is '$tag', not manylinux_2_17_$arch" ;;
        musl) [[ "$tag" == "musllinux_1_2_$arch" ]] || fail "auditwheel says $wheel is '$tag', not musllinux_1_2_$arch" ;;
    esac
    [[ "$wheel" == *"$tag"* ]] || fail "wheel $wheel is not tagged $tag, the tag auditwheel computed"
    if grep -q "external shared libraries are required" <<<"$show"; then fail "auditwheel: $wheel needs external libraries"; fi

    c_name="liblb-$version-$arch-linux-$libc"
    step "$target: C tarball $c_name (scripts/install.sh --target $target --relocatable)"
    scripts/install.sh --profile dist --target "$target" --relocatable "$stage/$c_name" >/dev/null
    check_shared_object "$target" "$stage/$c_name/lib/liblb.so.$version"
    "$llvm_strip" --strip-debug "$stage/$c_name/lib/liblb.a"
    if [[ "$libc" == gnu ]]; then
        floor="glibc 2.17 or newer (RHEL/CentOS 7+, Debian 8+, Ubuntu 14.04+, Amazon Linux 2)"
    else
        floor="musl 1.2 or newer (Alpine 3.13+); liblb.so needs only musl's libc"
    fi
    c_readme "$arch" "$libc" "$floor" >"$stage/$c_name/README.md"
    tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$dist/$c_name.tar.gz" "$c_name"
done

# --- npm tarball -----------------------------------------------------------------------------
step "Node: npm pack with ${addons[*]} (prepare vendors the Rust sources into node/rust/)"
# prebuilt.json vouches for these addons (name + SHA-256): only then does the installed
# package's install step use one instead of building (node/scripts/install.js). It exists only
# while npm packs, so a checkout copied by `npm install --install-links` never vouches for a
# stale addon.
{
    echo "{"
    for i in "${!addons[@]}"; do
        sep=","
        ((i == ${#addons[@]} - 1)) && sep=""
        printf '  "%s": "%s"%s\n' "${addons[$i]}" "$(sha256sum "node/${addons[$i]}" | cut -d' ' -f1)" "$sep"
    done
    echo "}"
} >node/prebuilt.json
tgz="$(cd node && npm pack --silent --pack-destination "$dist")"
[[ "$tgz" == "liblb-$version.tgz" ]] || fail "npm pack wrote '$tgz', expected liblb-$version.tgz"
listing="$(tar -tzf "$dist/$tgz")"
for want in package/package.json package/index.js package/index.mjs package/index.d.ts \
    package/prebuilt.json package/scripts/install.js package/rust/Cargo.toml package/rust/Cargo.lock \
    package/rust/core/src/lib.rs package/rust/node/src/lib.rs "${addons[@]/#/package/}"; do
    grep -qx "$want" <<<"$listing" || fail "$tgz lacks $want"
done
# node/Cargo.toml at the top would make cargo look for the repo's workspace root: only rust/.
for unwanted in package/Cargo.toml package/src/lib.rs package/test/api.test.js; do
    if grep -qx "$unwanted" <<<"$listing"; then fail "$tgz contains $unwanted"; fi
done
[[ "$(grep -c '^package/liblb\..*\.node$' <<<"$listing")" == "${#addons[@]}" ]] ||
    fail "$tgz holds addons other than ${addons[*]}"

# --- Python sdist ----------------------------------------------------------------------------
step "Python: maturin sdist"
maturin sdist -m python/Cargo.toml --out "$dist"
sdist="$dist/liblb-$version.tar.gz"
[[ -f "$sdist" ]] || fail "maturin sdist did not write $(basename "$sdist")"
# The Python crate depends on liblb-core by workspace path: the sdist must carry it.
sdist_listing="$(tar -tzf "$sdist")"
for want in "liblb-$version/core/src/lib.rs" "liblb-$version/core/Cargo.toml" "liblb-$version/Cargo.lock"; do
    grep -qx "$want" <<<"$sdist_listing" || fail "sdist lacks $want"
done

# --- checksums -------------------------------------------------------------------------------
(cd "$dist" && sha256sum -- *.tgz *.whl *.tar.gz >SHA256SUMS)
step "done: $dist"
ls -l "$dist"
