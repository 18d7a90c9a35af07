#!/usr/bin/env bash
# Builds liblb's C library and installs it under a prefix:
#   PREFIX/lib/liblb.so.X.Y.Z, liblb.so.X -> it (the soname), liblb.so -> liblb.so.X,
#   PREFIX/lib/liblb.a, PREFIX/include/lb.h, PREFIX/include/lb.hpp,
#   PREFIX/lib/pkgconfig/liblb.pc
#
# Usage: scripts/install.sh [--debug | --profile NAME] [--target TRIPLE] [--relocatable] PREFIX
#   --debug          install the dev-profile build (what scripts/test-c.sh tests) instead of release.
#   --profile NAME   install that cargo profile's build (scripts/package.sh: dist, release without
#                    debug info).
#   --target TRIPLE  cross-build for another Linux target with cargo-zigbuild (on PATH; zig as
#                    the linker): x86_64/aarch64-unknown-linux-gnu are linked against glibc 2.17,
#                    *-linux-musl dynamically against musl (liblb.so needs only musl's libc;
#                    liblb.a carries its unwinder, so a static link needs only -lc).
#   --relocatable    write `prefix=${pcfiledir}/../..` in liblb.pc instead of PREFIX, so the tree
#                    works wherever it is moved (scripts/package.sh's C tarballs).
# Then: cc app.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs liblb)
#   static: cc app.c $(pkg-config --cflags liblb) "$(pkg-config --variable=libdir liblb)/liblb.a" \
#               $(pkg-config --variable=native_libs liblb)
#   (`-llb` would pick liblb.so over liblb.a; native_libs = the system libraries liblb.a needs.)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
profile=release
target=""
relocatable=0
usage="usage: $0 [--debug | --profile NAME] [--target TRIPLE] [--relocatable] PREFIX"
while [[ "${1:-}" == --* ]]; do
    case "$1" in
        --debug) profile=dev ;;
        --profile) profile="${2:?$usage}"; shift ;;
        --target) target="${2:?$usage}"; shift ;;
        --relocatable) relocatable=1 ;;
        *) echo "$0: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [[ $# -ne 1 ]]; then
    echo "$usage" >&2
    exit 2
fi
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
cargo_args=(-p liblb-ffi --profile "$profile")
build=(cargo build "${cargo_args[@]}")
# cargo's output folder for a profile: dev builds land in debug/, the others under their name.
out="$profile"
[[ "$profile" == dev ]] && out=debug
if [[ -n "$target" ]]; then
    command -v cargo-zigbuild >/dev/null || {
        echo "install.sh: --target needs cargo-zigbuild on PATH (scripts/package.sh installs it)" >&2
        exit 1
    }
    case "$target" in
        *-unknown-linux-gnu) zig_target="$target.2.17" ;; # glibc 2.17 symbols: manylinux2014's floor
        *-unknown-linux-musl) zig_target="$target" ;;
        *) echo "install.sh: --target $target: only *-unknown-linux-gnu and *-unknown-linux-musl" >&2; exit 2 ;;
    esac
    # A musl cdylib must link musl dynamically (Rust's musl targets default to static).
    if [[ "$target" == *-musl ]]; then
        var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$target")_RUSTFLAGS"
        export "$var"="-C target-feature=-crt-static"
    fi
    cargo_args+=(--target "$target")
    build=(cargo zigbuild -p liblb-ffi --profile "$profile" --target "$zig_target")
    out="$target/$out"
fi

cd "$repo"
# The staticlib build prints the system libraries a static link needs (pkg-config's
# Libs.private; rustc links nothing for it, so no cross linker is needed); the plain build
# makes liblb.so with its soname (ffi/build.rs).
native_libs="$(cargo rustc "${cargo_args[@]}" --crate-type staticlib -- \
    --print native-static-libs 2>&1 | sed -n 's/^note: native-static-libs: //p')"
"${build[@]}"
if [[ -z "$native_libs" ]]; then
    echo "install.sh: could not read native-static-libs from rustc" >&2
    exit 1
fi

version_part() { sed -n "s/^#define LB_VERSION_$1 \([0-9]*\)$/\1/p" include/lb.h; }
version="$(version_part MAJOR).$(version_part MINOR).$(version_part PATCH)"
soname="$(readelf -d "$target_dir/$out/liblb.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
if [[ "$soname" != "liblb.so.$(version_part MAJOR)" ]]; then
    echo "install.sh: liblb.so has soname '$soname', expected liblb.so.$(version_part MAJOR)" >&2
    exit 1
fi

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target_dir/$out/liblb.so" "$prefix/lib/liblb.so.$version"
ln -sf "liblb.so.$version" "$prefix/lib/$soname"
ln -sf "$soname" "$prefix/lib/liblb.so"
install -m 0644 "$target_dir/$out/liblb.a" "$prefix/lib/liblb.a"
if [[ "$target" == *-musl ]]; then
    # liblb.a unwinds (a panic is caught before it reaches C), and rustc asks for libgcc_s's
    # unwinder. musl toolchains do not agree on one (Alpine's gcc has libgcc_s; Debian's
    # musl-gcc only glibc's libgcc_eh, which does not link against musl), so the archive carries
    # the unwinder Rust itself links musl programs with (LLVM's libunwind, from the target's
    # self-contained folder) and needs nothing but libc. zig's ar (llvm-ar) reads every target.
    unwind="$(rustc --print sysroot)/lib/rustlib/$target/lib/self-contained/libunwind.a"
    [[ -f "$unwind" ]] || { echo "install.sh: no $unwind (rustup target add $target)" >&2; exit 1; }
    python3 -m ziglang version >/dev/null 2>&1 || {
        echo "install.sh: --target $target needs zig's ar: python3 -m ziglang (pip install ziglang)" >&2
        exit 1
    }
    objects="$(mktemp -d)"
    (cd "$objects" && python3 -m ziglang ar x "$unwind")
    python3 -m ziglang ar rs "$prefix/lib/liblb.a" "$objects"/*.o
    rm -rf "$objects"
    native_libs="$(tr ' ' '\n' <<<"$native_libs" | grep -vx -e -lgcc_s -e -lunwind | paste -sd' ')"
fi
install -m 0644 include/lb.h include/lb.hpp "$prefix/include/"
# Deduplicate the library list, keeping the last occurrence of each (link order matters).
private="$(echo "$native_libs" | tr ' ' '\n' | tac | awk 'NF && !seen[$0]++' | tac | tr '\n' ' ')"
pc_prefix="$prefix"
# pkg-config (and pkgconf) expand ${pcfiledir} to the folder holding the .pc file.
if [[ "$relocatable" == 1 ]]; then
    # shellcheck disable=SC2016 # a literal ${pcfiledir}: pkg-config expands it, not the shell
    pc_prefix='${pcfiledir}/../..'
fi
cat > "$prefix/lib/pkgconfig/liblb.pc" <<PC
prefix=$pc_prefix
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include
native_libs=${private% }

Name: liblb
Description: Load balancing: pick a backend (C API of liblb; lb.h, C++ lb.hpp)
Version: $version
Libs: -L\${libdir} -llb
Libs.private: \${native_libs}
Cflags: -I\${includedir}
PC
echo "installed liblb $version (${target:-$(rustc -vV | sed -n "s/^host: //p")}, $profile) to $prefix"
