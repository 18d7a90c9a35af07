#!/usr/bin/env bash
# Installs what a user installs, each in a scratch folder outside the repository that cannot see
# its build trees, and runs tests/packages/smoke.* there (seed 001's ring, nginx's smooth WRR,
# an error code, the version):
#
#   1. scripts/package.sh writes the artifacts (into the scratch folder, not dist/);
#   2. a fresh venv installs the wheel with no Rust on PATH (then its grpc extra, and runs
#      docs/grpc.md's quickstart);
#   3. a fresh venv installs the sdist (pip builds it with maturin and cargo);
#   4. an empty npm project installs the npm tarball with no Rust on PATH: CommonJS, ESM and
#      TypeScript (tsc --strict) smoke tests, and docs/node-http.md's undici quickstart;
#   5. a fresh `git clone` of HEAD (no target/, node_modules/ or .venv in reach): an empty npm
#      project runs `npm install <clone>/node` (links it; builds from the clone's workspace),
#      another `npm install --install-links <clone>/node` (copies the folder; builds from the
#      vendored rust/), each with the same three smoke tests;
#      and `cargo install --path <clone>/cli` gives an `lb` command that answers the same;
#   6. the C tarball, extracted: smoke.c built with pkg-config against liblb.so (found through
#      the rpath) and against liblb.a, run; lb.hpp compiles as C++17;
#   7. aarch64: Debian's cross gcc builds smoke.c (shared and static) and examples/example.c
#      against the aarch64-linux-gnu tarball, and qemu-user runs them with Debian's arm64 glibc.
#
# package.sh builds two of its four targets here, x86_64- and aarch64-unknown-linux-gnu
# (LIBLB_TARGETS overrides); scripts/test-platforms.sh tests all four in arm64, older-glibc and
# musl systems (docs/install.md).
# Uncommitted changes are not in the clone of step 5: commit first (the script says so).
# Needs the toolchains (Rust, Python >= 3.10 with venv + pip, Node >= 20.17 + npm, gcc,
# pkg-config, git) and the registries (npm: typescript, undici; PyPI: maturin, for the sdist's build).
# Honors CARGO_TARGET_DIR (default <repo>/target): every build shares it, so warm runs are quick.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
started=$SECONDS
checks=0
step() { printf '\n== test-packages [%3ds]: %s\n' "$((SECONDS - started))" "$*"; }
fail() {
    printf '\n== test-packages: FAILED: %s\n' "$*" >&2
    exit 1
}
passed() { checks=$((checks + 1)); }

missing=()
command -v cc >/dev/null || missing+=(gcc)
command -v c++ >/dev/null || missing+=(g++)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v git >/dev/null || missing+=(git)
if ((${#missing[@]})); then
    step "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
for tool in cargo node npm python3 tar; do
    command -v "$tool" >/dev/null || fail "$tool is not on PATH"
done

version="$(scripts/check-version.sh)"
export LIBLB_EXPECT_VERSION="$version" LIBLB_REPO="$repo"
typescript="$(node -p "require('./node/package.json').devDependencies.typescript")"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
[[ "$scratch/" != "$repo/"* ]] || fail "scratch folder $scratch is inside the repository"
dist="$scratch/dist"
cp tests/packages/smoke.* "$scratch/"

# PATH without Rust: drop every folder holding cargo or rustc. (With rustup they live in
# ~/.cargo/bin; a layout that puts them next to node or python3 cannot be split this way.)
no_rust_path=""
IFS=: read -r -a path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
    if [[ -n "$d" && ! -e "$d/cargo" && ! -e "$d/rustc" ]]; then no_rust_path+="${no_rust_path:+:}$d"; fi
done
without_rust() { env -u RUSTC -u CARGO PATH="$no_rust_path" "$@"; }
without_rust sh -c '! command -v cargo && ! command -v rustc' >/dev/null ||
    fail "cargo is still on PATH after removing its folders"
for tool in node npm python3; do
    without_rust sh -c "command -v $tool" >/dev/null ||
        fail "$tool shares a folder with cargo: cannot test installs without Rust here"
done

new_venv() {
    python3 -m venv "$1" 2>/dev/null || {
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
        python3 -m venv "$1"
    }
}
new_npm_project() {
    mkdir -p "$1"
    (cd "$1" && npm init -y >/dev/null)
    cp "$scratch"/smoke.cjs "$scratch"/smoke.mjs "$scratch"/smoke.ts "$1/"
}
# CommonJS, ESM and TypeScript (compiled with the scratch tools' tsc, against the project's
# installed liblb/index.d.ts) smoke tests in an npm project. Usage: node_smoke DIR [RUNNER...]
node_smoke() {
    local dir="$1"
    shift
    (
        cd "$dir"
        "$@" node smoke.cjs
        "$@" node smoke.mjs
        "$@" node "$scratch/tools/node_modules/typescript/bin/tsc" --strict --target es2022 \
            --module nodenext --moduleResolution nodenext --skipDefaultLibCheck --outDir out smoke.ts
        "$@" node out/smoke.js
    )
}

# --- 1 ---------------------------------------------------------------------------------------
targets="${LIBLB_TARGETS:-x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu}"
step "scripts/package.sh for $targets -> $dist"
LIBLB_TARGETS="$targets" LIBLB_DIST="$dist" scripts/package.sh
wheel="$(cd "$dist" && ls liblb-"$version"-cp310-abi3-manylinux*_x86_64.whl)"
c_tarball="$(cd "$dist" && ls liblb-"$version"-x86_64-linux-gnu.tar.gz)"
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match the artifacts"
passed

# --- 2 ---------------------------------------------------------------------------------------
# The README's command: pip chooses among the wheels (and the sdist, which would need Rust).
step "Python: fresh venv, pip install --no-index --find-links <dist> liblb without Rust on PATH: $wheel"
new_venv "$scratch/py-wheel"
without_rust "$scratch/py-wheel/bin/python" -m pip install --quiet --no-index --find-links "$dist" liblb
grep -q '^Tag: cp310-abi3-manylinux.*_x86_64$' "$scratch"/py-wheel/lib/python3*/site-packages/liblb-"$version".dist-info/WHEEL ||
    fail "pip did not install the manylinux x86_64 wheel"
(cd "$scratch" && without_rust "$scratch/py-wheel/bin/python" smoke.py)
passed

# docs/grpc.md's Python quickstart, as a user runs it: the wheel with its `grpc` extra (grpcio
# pinned to the version the tests use), the example copied out of the repo.
grpcio="$(sed -n 's/^grpcio==//p' python/requirements-test.txt)"
step "Python: the wheel's grpc extra (grpcio $grpcio) and docs/grpc.md's quickstart"
without_rust "$scratch/py-wheel/bin/python" -m pip install --quiet "$dist/$wheel[grpc]" "grpcio==$grpcio"
cp examples/python/grpc_quickstart.py "$scratch/"
(cd "$scratch" && without_rust "$scratch/py-wheel/bin/python" grpc_quickstart.py) | tee "$scratch/grpc.out"
[[ "$(grep -c '^hello from [01]$' "$scratch/grpc.out")" == 10 ]] || fail "the grpc quickstart did not get 10 answers from the healthy servers"
grep -Eq ': ([0-9]+) requests, \1 failures$' "$scratch/grpc.out" || fail "the grpc quickstart counted no failures on the down server"
passed

# --- 3 ---------------------------------------------------------------------------------------
step "Python: fresh venv, pip install liblb-$version.tar.gz (sdist: maturin + cargo build it)"
new_venv "$scratch/py-sdist"
"$scratch/py-sdist/bin/python" -m pip install --quiet "$dist/liblb-$version.tar.gz"
(cd "$scratch" && "$scratch/py-sdist/bin/python" smoke.py)
passed

# --- 4 ---------------------------------------------------------------------------------------
step "Node: typescript $typescript for the TypeScript smoke tests"
mkdir -p "$scratch/tools"
(cd "$scratch/tools" && npm init -y >/dev/null && npm install --silent "typescript@$typescript")

step "Node: empty project, npm install liblb-$version.tgz without Rust on PATH"
new_npm_project "$scratch/npm-tarball"
(cd "$scratch/npm-tarball" && without_rust npm install "$dist/liblb-$version.tgz")
[[ ! -L "$scratch/npm-tarball/node_modules/liblb" ]] || fail "the tarball install is a link"
[[ ! -e "$scratch/npm-tarball/node_modules/liblb/rust/target" ]] || fail "the tarball install built from source"
node_smoke "$scratch/npm-tarball" without_rust
passed

# prebuilt.json vouches for every addon in the tarball: one changed byte in an addon this
# machine does not even load, and the install step must refuse them all and build from source,
# which without Rust is a clear failure (not a silent install of an addon nobody vouched for).
step "Node: a tarball whose other-platform addon was altered is refused"
mkdir -p "$scratch/tampered"
tar -xzf "$dist/liblb-$version.tgz" -C "$scratch/tampered"
other="$(cd "$scratch/tampered/package" && ls liblb.*.node | grep -vx liblb.linux-x64-gnu.node | sed -n 1p)"
[[ -n "$other" ]] || fail "the tarball holds no addon but linux-x64-gnu"
printf '\0' >>"$scratch/tampered/package/$other"
tar -czf "$scratch/tampered/liblb-$version.tgz" -C "$scratch/tampered" package
new_npm_project "$scratch/npm-tampered"
if (cd "$scratch/npm-tampered" && without_rust npm install --foreground-scripts "$scratch/tampered/liblb-$version.tgz") >"$scratch/tampered.log" 2>&1; then
    fail "npm installed a tarball whose $other was altered"
fi
grep -q "are not the ones prebuilt.json names" "$scratch/tampered.log" || { cat "$scratch/tampered.log"; fail "the install step did not refuse the altered addons"; }
grep -q "needs Rust" "$scratch/tampered.log" || { cat "$scratch/tampered.log"; fail "the install step did not say it needs Rust"; }
passed

# liblb/undici as docs/node-http.md shows it: undici (the pinned devDependency) from the
# registry, then the page's quickstart against three local servers (retries, ejection, Host).
undici="$(node -p "require('./node/package.json').devDependencies.undici")"
step "Node: the undici quickstart (undici $undici) in the tarball project"
(cd "$scratch/npm-tarball" && npm install --silent "undici@$undici")
cp tests/packages/undici-quickstart.mjs "$scratch/npm-tarball/"
(cd "$scratch/npm-tarball" && without_rust node undici-quickstart.mjs) | tee "$scratch/undici.out"
grep -q "ejected requests=2 failures=2$" "$scratch/undici.out" || fail "the undici quickstart did not eject the 503 node"
[[ "$(grep -c "^200 { server: [01], host: 'orders.internal' }$" "$scratch/undici.out")" == 6 ]] ||
    fail "the undici quickstart's requests did not all reach a good node with Host preserved"
passed

# --- 5 ---------------------------------------------------------------------------------------
head="$(git rev-parse HEAD)"
step "Node from source: fresh clone of HEAD ($head)"
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
    echo "NOTE: the work tree has uncommitted changes; the clone tests HEAD without them"
fi
git clone --quiet --no-checkout "$repo" "$scratch/clone"
git -C "$scratch/clone" checkout --quiet --detach "$head"
clone_node="$scratch/clone/node"

step "Node from source: empty project, npm install <clone>/node"
new_npm_project "$scratch/npm-link"
(cd "$scratch/npm-link" && npm install --foreground-scripts "$clone_node") 2>&1 | tee "$scratch/npm-link.log"
[[ -L "$scratch/npm-link/node_modules/liblb" ]] || fail "npm install <folder> did not link it"
grep -q "^liblb: built liblb\." "$scratch/npm-link.log" || fail "npm install <folder> did not build the addon"
compgen -G "$clone_node/liblb.*.node" >/dev/null || fail "npm install did not build the addon in the clone"
node_smoke "$scratch/npm-link"
passed

# Now the clone's node/ holds an addon, which --install-links copies along: without
# prebuilt.json (only scripts/package.sh writes one) it is not trusted, and the copy builds
# itself from the rust/ that npm's `prepare` step vendored into it.
step "Node from source: empty project, npm install --install-links <clone>/node"
new_npm_project "$scratch/npm-copy"
(cd "$scratch/npm-copy" && npm install --foreground-scripts --install-links "$clone_node") 2>&1 | tee "$scratch/npm-copy.log"
[[ ! -L "$scratch/npm-copy/node_modules/liblb" ]] || fail "--install-links made a link"
[[ -f "$scratch/npm-copy/node_modules/liblb/rust/Cargo.toml" ]] || fail "the copy has no vendored rust/"
grep -q "^liblb: cargo build .*/npm-copy/node_modules/liblb/rust/Cargo.toml" "$scratch/npm-copy.log" ||
    fail "--install-links did not build from the copy's vendored rust/"
node_smoke "$scratch/npm-copy"
passed

# --debug: the dev profile reuses the dependencies (clap) that the Rust tests already built in
# the shared target dir, where a release build would compile them again (about a minute on two
# cores); the README's `cargo install --path cli` differs only in the profile.
step "lb command: cargo install --debug --locked --path <clone>/cli"
cargo install --quiet --debug --locked --path "$scratch/clone/cli" --root "$scratch/cargo-root"
lb="$scratch/cargo-root/bin/lb"
ring="$("$lb" pick --algorithm ring --node NodeA --node NodeB --node NodeC --vnodes 3 Key1 Key2 Key3 | tr '\t\n' ': ')"
[[ "$ring" == "Key1:NodeB Key2:NodeA Key3:NodeC " ]] || fail "lb pick (ring, seed 001) printed: $ring"
wrr="$("$lb" pick --algorithm weighted_round_robin --node a=5 --node b --node c --count 7 | tr -d '\n')"
[[ "$wrr" == aabacaa ]] || fail "lb pick (smooth WRR) printed: $wrr"
echo "lb: ring $ring; wrr $wrr"
passed

# --- 6 ---------------------------------------------------------------------------------------
step "C: extract $c_tarball, build smoke.c with pkg-config (shared + static), lb.hpp as C++17"
mkdir -p "$scratch/c"
tar -xzf "$dist/$c_tarball" -C "$scratch/c"
prefix="$scratch/c/${c_tarball%.tar.gz}"
(
    cd "$scratch"
    export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    libdir="$(pkg-config --variable=libdir liblb)"
    [[ "$(cd "$libdir" && pwd -P)" == "$(cd "$prefix/lib" && pwd -P)" ]] ||
        fail "liblb.pc is not relocatable: libdir $libdir"
    [[ "$(pkg-config --modversion liblb)" == "$version" ]] || fail "liblb.pc has the wrong version"
    cflags=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
    # shellcheck disable=SC2046 # pkg-config output is meant to be word-split
    cc "${cflags[@]}" smoke.c $(pkg-config --cflags --libs liblb) -Wl,-rpath,"$libdir" -o smoke-shared
    readelf -d smoke-shared | grep -q 'NEEDED.*\[liblb\.so\.0\]' || fail "smoke-shared does not need liblb.so.0"
    ./smoke-shared "$version"
    # shellcheck disable=SC2046
    cc "${cflags[@]}" smoke.c $(pkg-config --cflags liblb) "$libdir/liblb.a" \
        $(pkg-config --variable=native_libs liblb) -o smoke-static
    if readelf -d smoke-static | grep -q liblb; then fail "smoke-static is linked against liblb.so"; fi
    ./smoke-static "$version"
    # shellcheck disable=SC2046
    printf '#include <lb.hpp>\nint main() { return 0; }\n' |
        c++ -std=c++17 -Wall -Wextra -Werror -x c++ - $(pkg-config --cflags --libs liblb) -o hpp-check
)
passed

# --- 7 ---------------------------------------------------------------------------------------
a64_tarball="liblb-$version-aarch64-linux-gnu.tar.gz"
if [[ " $targets " == *" aarch64-unknown-linux-gnu "* ]]; then
    cross=()
    command -v qemu-aarch64-static >/dev/null || cross+=(qemu-user-static)
    command -v aarch64-linux-gnu-gcc >/dev/null || cross+=(gcc-aarch64-linux-gnu)
    if ((${#cross[@]})); then
        step "installing ${cross[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${cross[@]}" >/dev/null
    fi
    step "C on aarch64: $a64_tarball, smoke.c by aarch64-linux-gnu-gcc (shared + static), run by qemu-aarch64"
    mkdir -p "$scratch/c-aarch64"
    tar -xzf "$dist/$a64_tarball" -C "$scratch/c-aarch64"
    prefix="$scratch/c-aarch64/${a64_tarball%.tar.gz}"
    (
        cd "$scratch/c-aarch64"
        export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
        cflags=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
        # Debian's arm64 glibc for the cross compiler; qemu looks there first for the loader and
        # libc (-L), and the rpath (a path of this machine) finds liblb.so.
        run() { qemu-aarch64-static -L /usr/aarch64-linux-gnu "$@"; }
        # shellcheck disable=SC2046 # pkg-config output is meant to be word-split
        aarch64-linux-gnu-gcc "${cflags[@]}" ../smoke.c $(pkg-config --cflags --libs liblb) \
            -Wl,-rpath,"$prefix/lib" -o smoke-shared
        readelf -h smoke-shared | grep -q 'Machine: *AArch64' || fail "smoke-shared is not an aarch64 program"
        run ./smoke-shared "$version"
        # shellcheck disable=SC2046
        aarch64-linux-gnu-gcc "${cflags[@]}" "$repo/examples/example.c" $(pkg-config --cflags --libs liblb) \
            -Wl,-rpath,"$prefix/lib" -o example
        run ./example >/dev/null
        # shellcheck disable=SC2046
        aarch64-linux-gnu-gcc "${cflags[@]}" ../smoke.c $(pkg-config --cflags liblb) "$prefix/lib/liblb.a" \
            $(pkg-config --variable=native_libs liblb) -o smoke-static
        run ./smoke-static "$version"
    )
    passed
else
    echo "NOTE: LIBLB_TARGETS has no aarch64-unknown-linux-gnu: the aarch64 check did not run"
fi

step "all $checks package checks passed"
