#!/usr/bin/env bash
# Builds liblb's C library and installs it under a prefix:
#   PREFIX/lib/liblb.so.X.Y.Z, liblb.so.X -> it (the soname), liblb.so -> liblb.so.X,
#   PREFIX/lib/liblb.a, PREFIX/include/lb.h, PREFIX/include/lb.hpp,
#   PREFIX/lib/pkgconfig/liblb.pc
#
# Usage: scripts/install.sh [--debug] [--relocatable] PREFIX
#   --debug        install the dev-profile build (what scripts/test-c.sh tests) instead of release.
#   --relocatable  write `prefix=${pcfiledir}/../..` in liblb.pc instead of PREFIX, so the tree
#                  works wherever it is moved (scripts/package.sh's C tarball).
# Then: cc app.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs liblb)
#   static: cc app.c $(pkg-config --cflags liblb) "$(pkg-config --variable=libdir liblb)/liblb.a" \
#               $(pkg-config --variable=native_libs liblb)
#   (`-llb` would pick liblb.so over liblb.a; native_libs = the system libraries liblb.a needs.)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
profile=release
relocatable=0
while [[ "${1:-}" == --* ]]; do
    case "$1" in
        --debug) profile=debug ;;
        --relocatable) relocatable=1 ;;
        *) echo "$0: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [[ $# -ne 1 ]]; then
    echo "usage: $0 [--debug] [--relocatable] PREFIX" >&2
    exit 2
fi
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
cargo_profile=()
[[ "$profile" == release ]] && cargo_profile=(--release)

cd "$repo"
# The staticlib build prints the system libraries a static link needs (pkg-config's
# Libs.private); the plain build makes liblb.so with its soname (ffi/build.rs).
native_libs="$(cargo rustc -p liblb-ffi "${cargo_profile[@]}" --crate-type staticlib -- \
    --print native-static-libs 2>&1 | sed -n 's/^note: native-static-libs: //p')"
cargo build -p liblb-ffi "${cargo_profile[@]}"
if [[ -z "$native_libs" ]]; then
    echo "install.sh: could not read native-static-libs from rustc" >&2
    exit 1
fi

version_part() { sed -n "s/^#define LB_VERSION_$1 \([0-9]*\)$/\1/p" include/lb.h; }
version="$(version_part MAJOR).$(version_part MINOR).$(version_part PATCH)"
soname="$(readelf -d "$target_dir/$profile/liblb.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
if [[ "$soname" != "liblb.so.$(version_part MAJOR)" ]]; then
    echo "install.sh: liblb.so has soname '$soname', expected liblb.so.$(version_part MAJOR)" >&2
    exit 1
fi

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target_dir/$profile/liblb.so" "$prefix/lib/liblb.so.$version"
ln -sf "liblb.so.$version" "$prefix/lib/$soname"
ln -sf "$soname" "$prefix/lib/liblb.so"
install -m 0644 "$target_dir/$profile/liblb.a" "$prefix/lib/liblb.a"
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
echo "installed liblb $version ($profile) to $prefix"
