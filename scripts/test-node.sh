#!/usr/bin/env bash
# Node binding (node/): installs the npm packages, builds the addon with the napi CLI, checks that
# the committed generated files (node/index.js, node/index.d.ts) are what the build produces,
# runs the `node --test` suite. Installing the package the way a user does (the npm tarball, and
# `npm install <fresh clone>/node` with and without --install-links) is scripts/test-packages.sh.
#
# Needs only Node >= 20.17 + npm and Rust (cargo); everything else comes from the npm registry
# and crates.io. Run from anywhere; scripts/test.sh runs it from the repo root. Honors
# CARGO_TARGET_DIR (default: <repo>/target).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_dir="$repo/node"
say() { printf '\n== test-node: %s\n' "$*"; }
fail() {
    printf '\n== test-node: FAILED: %s\n' "$*" >&2
    exit 1
}

for tool in node npm cargo; do
    command -v "$tool" >/dev/null || fail "$tool is not on PATH"
done
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 17) ? 0 : 1)' ||
    fail "Node $(node --version) is too old: @napi-rs/cli needs Node >= 20.17"

# Snapshot the generated files before anything can rebuild them, to compare after the build.
snapshot="$(mktemp -d)"
trap 'rm -rf "$snapshot"' EXIT
for f in index.js index.d.ts; do
    [[ -f "$node_dir/$f" ]] || fail "node/$f is missing: run \`npm run build\` in node/ and commit it"
    cp "$node_dir/$f" "$snapshot/$f"
done

# 1. npm packages, from the lock file, only when node_modules is missing or older than the lock.
stamp="$node_dir/node_modules/.liblb-installed"
want="$(cat "$node_dir/package.json" "$node_dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "npm ci (node_modules missing or stale)"
    # --ignore-scripts: the package's own install and prepare scripts (scripts/install.js,
    # scripts/vendor.js) are for users; the build below is napi's, which also regenerates
    # index.js / index.d.ts. No dependency has an install script (see "hasInstallScript" in
    # package-lock.json).
    (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund)
    echo "$want" >"$stamp"
else
    say "node_modules is up to date"
fi

# 2. Build the addon (release) and regenerate index.js / index.d.ts.
say "napi build --platform --release"
(cd "$node_dir" && ./node_modules/.bin/napi build --platform --release)

# 3. The generated files must not change when rebuilt (oxc's "must commit everything").
say "generated files are fresh"
for f in index.js index.d.ts; do
    if ! cmp -s "$snapshot/$f" "$node_dir/$f"; then
        diff -u "$snapshot/$f" "$node_dir/$f" | sed -n 1,60p || true
        fail "node/$f changed when rebuilt: commit the regenerated file (run again to confirm)"
    fi
done
if git -C "$repo" ls-files --error-unmatch node/index.js node/index.d.ts >/dev/null 2>&1; then
    git -C "$repo" diff --exit-code -- node/index.js node/index.d.ts ||
        fail "node/index.js or node/index.d.ts differs from the committed version"
else
    echo "(node/index.js and node/index.d.ts are not committed yet: compared with the pre-build files only)"
fi

# 4. The test suite.
say "node --test"
(cd "$node_dir" && node --test test/*.test.js test/*.test.mjs)

say "all Node checks passed"
