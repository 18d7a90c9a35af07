#!/usr/bin/env python3
"""Key-for-key comparison of liblb's field-compatible placements with the real upstream.

    compare.py PLACEMENT_BINARY WORKDIR SYSTEM...

SYSTEM is one of: ketama (libmemcached, via tests/upstream/ketama.c built in WORKDIR),
nginx (a live nginx on loopback), jump (Guava's Hashing.consistentHash via
tests/upstream/Jump.java). Each generates node sets and keys from a fixed seed, asks the
upstream and liblb (core/examples/placement.rs) for every key, and fails on the first
difference. Expectations are never stored: they come from the upstream program at test time.
"""

import os
import random
import subprocess
import sys

PLACEMENT = None
WORKDIR = None


def liblb(algorithm, nodes, queries, options=()):
    """Runs liblb's placement example; nodes are (id, weight); queries are command lines."""
    lines = [f"algorithm {algorithm}"]
    lines += [f"option {name} {value}" for name, value in options]
    lines += [f"node {node_id} {weight}" for node_id, weight in nodes]
    lines += queries
    result = subprocess.run(
        [PLACEMENT],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def random_key(rng):
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:/."
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))


def check(system, case, expected, actual, keys):
    if len(expected) != len(actual):
        sys.exit(f"{system} {case}: {len(expected)} upstream answers, {len(actual)} from liblb")
    for key, want, got in zip(keys, expected, actual):
        if want != got:
            sys.exit(f"{system} {case}: key {key!r}: upstream {want}, liblb {got}")


# --- ketama: libmemcached -------------------------------------------------------------------


def ketama_servers(rng, n, weights):
    """(liblb id, host, port, weight) for n servers: IPv4, names and IPv6, default port or not,
    the default port spelled out or left implicit."""
    servers = []
    seen = set()
    while len(servers) < n:
        kind = rng.random()
        if kind < 0.5:
            host = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        elif kind < 0.8:
            host = f"cache-{rng.randint(0, 999)}.example"
        else:
            host = f"2001:db8::{rng.randint(1, 0xFFFF):x}"
        port = 11211 if rng.random() < 0.6 else rng.randint(1024, 65535)
        if (host, port) in seen:
            continue
        seen.add((host, port))
        v6 = ":" in host
        if port == 11211 and rng.random() < 0.5:
            node_id = f"[{host}]" if v6 and rng.random() < 0.5 else host
        else:
            node_id = f"[{host}]:{port}" if v6 else f"{host}:{port}"
        servers.append((node_id, host, port, weights(len(servers))))
    return servers


def compare_ketama():
    binary = os.path.join(WORKDIR, "ketama")
    rng = random.Random(11)
    cases = []
    # Equal weights at every size libmemcached supports, including those (25, ...) where
    # single-precision arithmetic gives each server 156 points instead of 160.
    for n in range(1, 101):
        cases.append((f"{n} equal", ketama_servers(rng, n, lambda i: 1)))
    for n in [2, 3, 5, 8, 13, 25, 40, 64, 99]:
        cases.append((f"{n} weights 1..10", ketama_servers(rng, n, lambda i: rng.randint(1, 10))))
        cases.append(
            (f"{n} weights 1..1000", ketama_servers(rng, n, lambda i: rng.randint(1, 1000)))
        )
    cases.append(("one heavy", ketama_servers(rng, 10, lambda i: 1000 if i == 0 else 1)))
    total = 0
    for name, servers in cases:
        keys = [random_key(rng) for _ in range(1000)]
        spec = os.path.join(WORKDIR, "ketama-servers.txt")
        with open(spec, "w") as f:
            for _, host, port, weight in servers:
                f.write(f"{host} {port} {weight}\n")
        upstream = subprocess.run(
            [binary, spec], input="\n".join(keys) + "\n", capture_output=True, text=True, check=True
        ).stdout.split()
        expected = [servers[int(i)][0] for i in upstream]
        actual = liblb("ketama", [(s[0], s[3]) for s in servers], [f"key {k}" for k in keys])
        check("ketama", name, expected, actual, keys)
        total += len(keys)
    print(f"ketama: {total} keys over {len(cases)} server sets agree with libmemcached")


def main():
    global PLACEMENT, WORKDIR
    PLACEMENT, WORKDIR = sys.argv[1], sys.argv[2]
    systems = {"ketama": compare_ketama}
    for system in sys.argv[3:]:
        systems[system]()


if __name__ == "__main__":
    main()
