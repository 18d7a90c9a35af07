#!/usr/bin/env bash
# Makes sure a nightly toolchain with the given components (e.g. `miri rust-src`) is present;
# exits non-zero (after saying why) when it cannot be had, so callers can skip loudly.
set -uo pipefail
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal || { echo "no nightly toolchain" >&2; exit 1; }
fi
for component in "$@"; do
  case "$component" in
    miri) needed="miri rust-src" ;;
    *) needed="$component" ;;
  esac
  for c in $needed; do
    if ! rustup +nightly component list --installed 2>/dev/null | grep -q "^$c"; then
      rustup +nightly component add "$c" || { echo "cannot add nightly component $c" >&2; exit 1; }
    fi
  done
done
if [[ " $* " == *" miri "* ]]; then
  cargo +nightly miri setup >/dev/null 2>&1 || { echo "cargo miri setup failed" >&2; exit 1; }
fi
exit 0
