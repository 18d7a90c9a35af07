#!/usr/bin/env bash
# liblb's C / C++ test command (called by scripts/test.sh from the repo root):
#   1. the ffi crate's Rust tests, including the include/lb.h freshness check (golden test),
#   2. liblb.so / liblb.a (dev profile: debug assertions and overflow checks stay on), exported
#      symbols all lb_*,
#   3. the C tests (tests/c/*.c, -std=c11 -Wall -Wextra -Wpedantic -Werror) and the C++ test of
#      lb.hpp (-std=c++17): plain against liblb.so, under AddressSanitizer + UBSan, under
#      valgrind (0 errors, 0 definite leaks), and test_api/test_vectors linked against liblb.a,
#   4. install to a temporary prefix, then build examples/example.c with pkg-config and run it,
#   5. the ffi unit tests under Miri (nightly),
#   6. rustfmt + clippy of the fuzz crate (a separate workspace), then a ~30 s cargo-fuzz smoke
#      run of fuzz/ (nightly): 20 s of the C ABI target, 10 s of the ORCA parser's.
# Steps 5-6 need nightly: installed with rustup if missing; a loud SKIPPED line if impossible.
# Environment: CARGO_TARGET_DIR (default <repo>/target), LB_FUZZ_SECONDS (default 30; 0 skips).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
build="$target_dir/c-tests"
fuzz_seconds="${LB_FUZZ_SECONDS:-30}"
started=$SECONDS

step() { printf '\n==> [%3ds] %s\n' "$((SECONDS - started))" "$*"; }
skipped() { printf '\n*** SKIPPED: %s ***\n\n' "$*"; }

# --- tools --------------------------------------------------------------------------------
missing=()
command -v cc >/dev/null || missing+=(gcc)
command -v c++ >/dev/null || missing+=(g++)
command -v valgrind >/dev/null || missing+=(valgrind)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v readelf >/dev/null || missing+=(binutils)
if ((${#missing[@]})); then
    step "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# --- 1. Rust tests + header freshness -----------------------------------------------------
step "cargo test -p liblb-ffi (unit tests, include/lb.h freshness)"
cargo test -p liblb-ffi

# --- 2. the libraries ---------------------------------------------------------------------
step "building liblb.so and liblb.a (dev profile)"
native_libs="$(cargo rustc -p liblb-ffi --crate-type staticlib -- --print native-static-libs 2>&1 |
    sed -n 's/^note: native-static-libs: //p')"
[[ -n "$native_libs" ]] || { echo "could not read native-static-libs" >&2; exit 1; }
cargo build -p liblb-ffi
so="$target_dir/debug/liblb.so"
archive="$target_dir/debug/liblb.a"
soname="$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
[[ "$soname" == liblb.so.0 ]] || { echo "liblb.so soname is '$soname'" >&2; exit 1; }
# Only lb_* functions are exported: no Rust symbol leaks into the C namespace.
stray="$(nm -D --defined-only "$so" | awk '$2 == "T" && $3 !~ /^lb_/ {print $3}')"
[[ -z "$stray" ]] || { echo "liblb.so exports non-lb_ symbols: $stray" >&2; exit 1; }
echo "liblb.so: soname $soname, $(nm -D --defined-only "$so" | awk '$2 == "T"' | wc -l) lb_* functions"

rm -rf "$build"
mkdir -p "$build/lib"
cp "$so" "$build/lib/$soname"
ln -s "$soname" "$build/lib/liblb.so"

# --- 3. C and C++ tests -------------------------------------------------------------------
step "compiling the C and C++ tests (plain, ASan+UBSan, static)"
cflags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -Iinclude -Itests/c)
cxxflags=(-std=c++17 -Wall -Wextra -Wpedantic -Werror -g -Iinclude)
shared=(-L"$build/lib" -llb -Wl,-rpath,"$build/lib")
asan=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
read -r -a static_libs <<<"$native_libs"
c_tests=(test_api test_vectors test_threads)
for t in "${c_tests[@]}"; do
    cc "${cflags[@]}" -pthread "tests/c/$t.c" "${shared[@]}" -o "$build/$t"
    cc "${cflags[@]}" "${asan[@]}" -pthread "tests/c/$t.c" "${shared[@]}" -o "$build/$t.asan"
done
c++ "${cxxflags[@]}" -pthread tests/c/test_cpp.cpp "${shared[@]}" -o "$build/test_cpp"
c++ "${cxxflags[@]}" "${asan[@]}" -pthread tests/c/test_cpp.cpp "${shared[@]}" -o "$build/test_cpp.asan"
for t in test_api test_vectors; do
    cc "${cflags[@]}" "tests/c/$t.c" "$archive" "${static_libs[@]}" -o "$build/$t.static"
done
# The C benchmark is not run here (timings belong in docs/benchmarks-c.md), only kept building.
cc "${cflags[@]}" -O2 tests/c/bench_pick.c "${shared[@]}" -o "$build/bench_pick"
if ldd "$build/test_api.static" | grep -q liblb; then
    echo "test_api.static is linked against liblb.so, not liblb.a" >&2
    exit 1
fi

vectors=tests/vectors/vectors.json
[[ -f "$vectors" ]] || { echo "missing $vectors" >&2; exit 1; }
run_all() { # $1: suffix ("" / .asan / .static), then a runner prefix
    local suffix="$1"
    shift
    "$@" "$build/test_api$suffix"
    "$@" "$build/test_vectors$suffix" "$vectors"
    if [[ "$suffix" != .static ]]; then
        "$@" "$build/test_threads$suffix" ${threads_arg:-}
        "$@" "$build/test_cpp$suffix"
    fi
}

step "C/C++ tests, plain (liblb.so)"
run_all ""
step "C/C++ tests, AddressSanitizer + UndefinedBehaviorSanitizer"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 run_all .asan
step "C/C++ tests, valgrind"
# valgrind serialises threads and runs ~50x slower: fewer picks for the threads test.
threads_arg=1000 run_all "" valgrind -q --error-exitcode=1 --leak-check=full \
    --errors-for-leak-kinds=definite
step "C tests linked statically against liblb.a"
run_all .static

# --- 4. install + example via pkg-config ----------------------------------------------------
step "install to a temporary prefix; build examples/example.c with pkg-config"
prefix="$build/prefix"
scripts/install.sh --debug "$prefix"
for f in lib/liblb.so lib/liblb.so.0 lib/liblb.a include/lb.h include/lb.hpp lib/pkgconfig/liblb.pc; do
    [[ -e "$prefix/$f" ]] || { echo "install is missing $f" >&2; exit 1; }
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config output is meant to be word-split
cc -std=c11 -Wall -Wextra -Wpedantic -Werror examples/example.c $(pkg-config --cflags --libs liblb) \
    -o "$build/example"
unset PKG_CONFIG_PATH
LD_LIBRARY_PATH="$prefix/lib" "$build/example"

# --- 5-6. nightly: Miri and fuzzing --------------------------------------------------------
have_nightly() {
    rustup run nightly rustc --version >/dev/null 2>&1 ||
        rustup toolchain install nightly --profile minimal >/dev/null 2>&1
}

step "ffi unit tests under Miri"
if have_nightly &&
    { rustup +nightly component list --installed 2>/dev/null | grep -q '^miri' ||
        rustup +nightly component add miri rust-src >/dev/null 2>&1; }; then
    cargo +nightly miri test -p liblb-ffi
else
    skipped "Miri: no nightly toolchain with the miri component could be installed"
fi

step "fuzz crate: rustfmt and clippy (its own workspace, not covered by --workspace)"
cargo fmt --manifest-path fuzz/Cargo.toml --check
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets --all-features --target-dir "$target_dir" -- -D warnings

step "cargo-fuzz smoke run (${fuzz_seconds}s)"
if [[ "$fuzz_seconds" == 0 ]]; then
    skipped "fuzzing: LB_FUZZ_SECONDS=0"
elif ! have_nightly; then
    skipped "fuzzing: no nightly toolchain could be installed"
elif ! { command -v cargo-fuzz >/dev/null ||
    cargo install cargo-fuzz --version 0.13.2 --locked; }; then
    skipped "fuzzing: cargo-fuzz 0.13.2 could not be installed"
else
    # Two thirds of the time to the C ABI, a third to the ORCA report parser.
    (cd fuzz && cargo +nightly fuzz run c_api --target-dir "$target_dir/fuzz" -- \
        -max_total_time="$((fuzz_seconds * 2 / 3))" -print_final_stats=1)
    (cd fuzz && cargo +nightly fuzz run orca --target-dir "$target_dir/fuzz" -- \
        -max_total_time="$((fuzz_seconds - fuzz_seconds * 2 / 3))" -print_final_stats=1)
fi

step "all C/C++ checks passed"
