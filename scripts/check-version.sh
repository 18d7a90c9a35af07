#!/usr/bin/env bash
# liblb's version lives in one place, [workspace.package] in Cargo.toml; every manifest that
# repeats it must agree. Prints the version, or says which file disagrees and exits 1.
#
#   scripts/check-version.sh
#
# Checked: every workspace crate in Cargo.lock (they inherit it: version.workspace = true),
# node/package.json and node/package-lock.json, LB_VERSION_MAJOR/MINOR/PATCH in include/lb.h,
# and CHANGELOG.md's newest release heading (`## [X.Y.Z] - date`). The Python package takes its
# version from Cargo.toml through maturin (pyproject.toml: dynamic = ["version"]): it is checked
# to stay dynamic. Run by scripts/package.sh (every release) and scripts/test.sh (every test run).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
disagree() {
    echo "check-version: $1 says $2, Cargo.toml's [workspace.package] says $version" >&2
    bad=1
}

version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || {
    echo "check-version: no X.Y.Z version in Cargo.toml's [workspace.package] (found '$version')" >&2
    exit 1
}

# Every crate of the workspace inherits it.
for manifest in */Cargo.toml; do
    # fuzz/ is its own workspace, never released.
    [[ "$manifest" != fuzz/* ]] && grep -q '^\[package\]' "$manifest" || continue
    grep -q '^version\.workspace = true$' "$manifest" || {
        echo "check-version: $manifest does not take version.workspace = true" >&2
        bad=1
    }
done
while read -r name locked; do
    [[ "$locked" == "$version" ]] || disagree "Cargo.lock ($name)" "$locked"
done < <(awk '/^name = "liblb/ { gsub(/"/, "", $3); name = $3; getline; gsub(/"/, "", $3); print name, $3 }' Cargo.lock)

node_version="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' node/package.json)"
[[ "$node_version" == "$version" ]] || disagree node/package.json "$node_version"
lock_versions="$(node -e '
  const lock = require("./node/package-lock.json")
  console.log(lock.version, lock.packages[""].version)' 2>/dev/null || echo "unreadable unreadable")"
for v in $lock_versions; do
    [[ "$v" == "$version" ]] || disagree node/package-lock.json "$v"
done

header="$(for p in MAJOR MINOR PATCH; do sed -n "s/^#define LB_VERSION_$p \([0-9]*\)$/\1/p" include/lb.h; done | paste -sd.)"
[[ "$header" == "$version" ]] || disagree include/lb.h "$header"

grep -q '^dynamic = \["version"\]$' python/pyproject.toml || {
    echo "check-version: python/pyproject.toml must keep dynamic = [\"version\"] (maturin reads Cargo.toml)" >&2
    bad=1
}

changelog=""
[[ -f CHANGELOG.md ]] && changelog="$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | sed -n 1p)"
[[ "$changelog" == "$version" ]] || disagree "CHANGELOG.md's newest release" "${changelog:-nothing}"

((bad == 0)) || exit 1
echo "$version"
