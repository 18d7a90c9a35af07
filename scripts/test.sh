#!/usr/bin/env bash
# liblb's one test command: installs what the tests need and runs every suite.
#
#   ./scripts/test.sh
#
# Needs only the toolchains (Rust stable via rustup, Python 3.11 + pip, Node 20 + npm, gcc).
# Everything else — rustup targets and components, the Python venv and packages, npm packages,
# cargo-installed tools, Debian packages — is installed by the steps themselves. A step that
# cannot run on this machine prints a loud SKIPPED line; a failing step stops the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

passed=0
started=$SECONDS
step() {
  echo
  echo "=== $* ($((SECONDS - started)) s)"
}
ok() { passed=$((passed + 1)); }

step "format"
cargo fmt --all --check
ok

step "one version: Cargo.toml's, in Cargo.lock, node/package.json and its lock, lb.h, CHANGELOG.md"
scripts/check-version.sh
ok

step "clippy (workspace, all targets, warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
ok

# The membership tests (liblb-etcd, `lb watch`) run against a real etcd server: Debian's
# etcd-server, installed when missing. Each test starts its own on loopback with a temporary
# data directory. LB_REQUIRE_ETCD=1 turns a missing etcd into a failure instead of a skip.
# (Assigned before the export so a failing install stops the run under `set -e`.)
ETCD_BIN=$(scripts/etcd-install.sh)
export ETCD_BIN
export LB_REQUIRE_ETCD=1

step "Rust tests: core, ffi, cli, etcd membership (real etcd), conformance vectors (doctests included)"
cargo test --quiet
ok

step "no_std: liblb-core for thumbv7em-none-eabihf without default features"
if rustup target list --installed 2>/dev/null | grep -qx thumbv7em-none-eabihf \
  || rustup target add thumbv7em-none-eabihf; then
  cargo build --quiet -p liblb-core --no-default-features --target thumbv7em-none-eabihf
  # The check has teeth: with std on, the same build must fail (std does not exist there).
  if cargo build --quiet -p liblb-core --target thumbv7em-none-eabihf 2>/dev/null; then
    echo "no_std check is toothless: the std build for a bare-metal target succeeded" >&2
    exit 1
  fi
  ok
else
  echo "SKIPPED: no_std build (rustup cannot add thumbv7em-none-eabihf here)"
fi

step "loom: model-check the lock-free counters"
RUSTFLAGS="--cfg loom" cargo test --quiet -p liblb-core --test loom --release --target-dir target/loom
ok

step "Miri: liblb-core unit tests"
if scripts/nightly.sh miri; then
  cargo +nightly miri test --quiet -p liblb-core --lib --target-dir target/miri
  ok
else
  echo "SKIPPED: Miri (no nightly toolchain with the miri component on this machine)"
fi

step "Upstream placements: ketama vs libmemcached/uhashring/hashring, nginx_chash vs a live nginx, jump vs Guava"
./scripts/test-upstream.sh
ok

step "C and C++: liblb.so/liblb.a, header fresh, C tests plain + ASan/UBSan + valgrind, static link, C++ wrapper, pkg-config install + example, Miri on ffi, 30 s fuzz"
./scripts/test-c.sh
ok

step "Python: pip install ./python into .venv, pytest (API, errors, vectors, properties, threads, stubs)"
./scripts/test-python.sh
ok

step "Node: npm ci, napi build, generated files fresh, node --test"
./scripts/test-node.sh
ok

step "Packages: scripts/package.sh for x86-64 and aarch64 glibc (npm tarball, wheels, sdist, C tarballs), each x86-64 one installed in a scratch folder (no Rust on PATH for the built ones); npm install of a fresh clone's node/, linked and copied; the aarch64 C library under qemu"
./scripts/test-packages.sh
ok

total=$passed
echo
echo "=== all suites done in $((SECONDS - started)) s"
echo "suites: ${total} passed, 0 failed"
