#!/usr/bin/env bash
# Python binding: build and install liblb into a venv exactly as a user would (`pip install
# ./python`: maturin, from source), then run its pytest suite (API, errors, shared conformance
# vectors, hypothesis properties, threads, stubtest + mypy --strict over the stubs, liblb.etcd
# against a real etcd).
#
# Needs python3 >= 3.11 (the pinned test tools; the package itself needs 3.10) with venv and
# pip, Rust stable, and the package registries (PyPI, crates.io). Creates
# .venv at the repo root if missing; installs the pinned test tools only when
# python/requirements-test.txt changed. Run from anywhere; scripts/test.sh calls it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# maturin builds into the shared workspace target/ unless the caller chose another.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
venv="$root/.venv"
py="$venv/bin/python"

step() { printf '\n== python: %s\n' "$*"; }

# A venv whose pip does not run (missing, or left half-made by a failed creation) is rebuilt.
if ! "$py" -m pip --version >/dev/null 2>&1; then
    step "creating $venv"
    if ! python3 -m venv --clear "$venv"; then
        # Debian's own python3 ships venv/ensurepip separately; we are root on CI and dev machines.
        apt-get update && apt-get install -y python3-venv
        python3 -m venv --clear "$venv"
    fi
    rm -f "$venv/.liblb-requirements-test.txt"
fi

stamp="$venv/.liblb-requirements-test.txt"
if ! cmp -s python/requirements-test.txt "$stamp"; then
    step "installing test tools (python/requirements-test.txt)"
    "$py" -m pip install --quiet -r python/requirements-test.txt
    cp python/requirements-test.txt "$stamp"
fi

step "pip install ./python"
"$py" -m pip install --quiet --force-reinstall --no-deps ./python

step "pytest python/tests"
# The liblb.etcd tests start real etcd servers (Debian's etcd-server, installed on demand by
# etcd-install.sh); LB_REQUIRE_ETCD=1 turns their "no etcd" skip into a failure, so the test
# command can never pass without having run them.
ETCD_BIN="$(scripts/etcd-install.sh)"  # assigned apart from export, so set -e sees a failure
export ETCD_BIN
export LB_REQUIRE_ETCD=1
# One etcd test runs the Rust `lb watch` beside a Python watcher: both must place every key alike.
cargo build --quiet -p liblb-cli --bin lb
export LB_BIN="$CARGO_TARGET_DIR/debug/lb"
# Hypothesis keeps its scratch files in the venv, not in the work tree.
export HYPOTHESIS_STORAGE_DIRECTORY="$venv/.hypothesis"
# importlib import mode (python/pyproject.toml) and the repo root as working directory keep
# the source folder python/liblb (which has no native module) off sys.path: the tests import
# the installed package. Exit code 5 (no tests collected) fails the script like any other
# non-zero code (set -e).
"$py" -m pytest -q python/tests "$@"
