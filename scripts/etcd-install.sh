#!/usr/bin/env bash
# Makes sure an etcd server binary is on this machine for the membership tests (Debian's
# etcd-server, 3.4 on bookworm) and prints its path, and the `openssl` command the TLS tests
# make their certificates with. Installs them with apt-get when missing (CI and dev machines
# run as root). Tests start their own servers on loopback with a
# temporary data directory; nothing here starts one.
#   ETCD_BIN=$(scripts/etcd-install.sh)
set -euo pipefail
if ! command -v etcd >/dev/null 2>&1; then
    echo "installing Debian's etcd-server" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >&2
    # The package's service is not wanted: tests run their own servers.
    if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd >/dev/null 2>&1 || true; fi
    pkill -x etcd >/dev/null 2>&1 || true
fi
if ! command -v openssl >/dev/null 2>&1; then
    echo "installing Debian's openssl (the TLS tests make certificates with it)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >&2
fi
command -v etcd
