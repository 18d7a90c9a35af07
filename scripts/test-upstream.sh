#!/usr/bin/env bash
# Key-for-key comparison of liblb's field-compatible placements with the real upstream
# programs, installed from Debian at test time (no upstream code or data is stored here):
#
#   ketama  <- libmemcached (libmemcached-dev): tests/upstream/ketama.c
#   ketama-ports <- PyPI uhashring and npm hashring (same continuum, their own point counts)
#   jump    <- Guava's Hashing.consistentHash (libguava-java + a JDK): tests/upstream/Jump.java
#   nginx   <- nginx `hash $arg_key consistent` and its default smooth weighted round robin
#              (nginx-light) on loopback
#
#   ./scripts/test-upstream.sh [ketama|ketama-ports|nginx|jump]...   (default: all)
#
# A system whose package cannot be installed is skipped with a loud SKIPPED line; a difference
# fails the run. Envoy ships no installable binary: its expectations are quoted in the Rust
# unit tests of core/src/select/{ring_hash,maglev}.rs instead.
set -euo pipefail
cd "$(dirname "$0")/.."

systems=("$@")
[ ${#systems[@]} -gt 0 ] || systems=(ketama ketama-ports nginx jump)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_updated=no
# Installs Debian packages unless `probe` already succeeds; false if they cannot be had.
need() {
  local probe=$1
  shift
  if eval "$probe" >/dev/null 2>&1; then
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    return 1
  fi
  if [ "$apt_updated" = no ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    apt_updated=yes
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    >/dev/null 2>&1 || return 1
  eval "$probe" >/dev/null 2>&1
}

cargo build -q -p liblb-core --example placement
placement="${CARGO_TARGET_DIR:-target}/debug/examples/placement"

run=()
skipped=0
python=python3
for system in "${systems[@]}"; do
  case $system in
    ketama)
      if need "pkg-config --exists libmemcached" libmemcached-dev pkg-config; then
        # shellcheck disable=SC2046 # pkg-config output is meant to be word-split
        gcc -O2 -Wall -Wextra -Werror -o "$work/ketama" tests/upstream/ketama.c \
          $(pkg-config --cflags --libs libmemcached)
        run+=(ketama)
      else
        echo "SKIPPED: ketama vs libmemcached (libmemcached-dev cannot be installed here)"
        skipped=$((skipped + 1))
      fi
      ;;
    ketama-ports)
      if python3 -m venv "$work/venv" >/dev/null 2>&1 \
        && "$work/venv/bin/pip" install -q --disable-pip-version-check uhashring==2.5 \
        && npm install --silent --no-audit --no-fund --prefix "$work" hashring@3.2.0 >/dev/null; then
        python="$work/venv/bin/python"
        run+=(ketama-ports)
      else
        echo "SKIPPED: ketama vs uhashring and npm hashring (PyPI or npm unreachable)"
        skipped=$((skipped + 1))
      fi
      ;;
    nginx)
      if need "command -v nginx" nginx-light; then
        run+=(nginx)
      else
        echo "SKIPPED: nginx_chash, weighted_round_robin vs nginx (nginx-light not installable)"
        skipped=$((skipped + 1))
      fi
      ;;
    jump)
      if need "command -v javac && test -f /usr/share/java/guava.jar" \
        default-jdk-headless libguava-java; then
        javac -d "$work" -cp /usr/share/java/guava.jar tests/upstream/Jump.java
        run+=(jump)
      else
        echo "SKIPPED: jump vs Guava (default-jdk-headless or libguava-java cannot be installed)"
        skipped=$((skipped + 1))
      fi
      ;;
    *)
      echo "unknown system $system (known: ketama ketama-ports nginx jump)" >&2
      exit 2
      ;;
  esac
done

if [ ${#run[@]} -gt 0 ]; then
  "$python" tests/upstream/compare.py "$placement" "$work" "${run[@]}"
fi
echo "upstream comparisons: ${#run[@]} passed, 0 failed, ${skipped} skipped"
