#!/usr/bin/env python3
"""Turns one `cargo bench -p liblb-bench` run (target/criterion) into BENCHMARKS.md's tables.

Every table printed here comes from the same run, so its ratios are comparable. Sections:
liblb against its peers per algorithm and node count (peer / liblb: > 1 means liblb is
faster); the `Balancer` layer against `Table` + `State`, an arc-swap guard and a bare atomic;
SHA-256's share of a ring pick; leases and P2C; 1 against 2 threads for every algorithm; table
builds; issue 23's goals (`fast_paths`) and least_connections at 1,000 to 100,000 nodes; and the
placement, retry-order and weighted-ring groups as measured.
"""
import json
import os
import sys

root = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "criterion")
peer_groups = ["random", "weighted_random", "round_robin", "weighted_round_robin", "source_hash", "ring"]


def estimate(*parts):
    """Median ns per iteration of the benchmark at target/criterion/<parts...>, or None."""
    path = os.path.join(root, *map(str, parts), "new", "estimates.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


def need(*parts):
    value = estimate(*parts)
    if value is None:
        sys.exit(f"no criterion result for {'/'.join(map(str, parts))}: run `cargo bench -p liblb-bench`")
    return value


def ns(value):
    """A duration in ns, with a unit that keeps three significant digits."""
    if value >= 1e9:
        return f"{value / 1e9:.2f} s"
    if value >= 1e6:
        return f"{value / 1e6:.3g} ms"
    if value >= 1e3:
        return f"{value / 1e3:.3g} µs"
    return f"{value:.1f} ns"


def subdirs(*parts):
    path = os.path.join(root, *parts)
    return sorted(d for d in os.listdir(path) if d != "report" and os.path.isdir(os.path.join(path, d)))


def peers():
    print("**liblb against its peers** (ns per pick; liblb through the `Balancer`):")
    print()
    print("| algorithm | N | liblb (ns/pick) | peer | peer (ns/pick) | peer / liblb |")
    print("|---|---|---:|---|---:|---:|")
    for group in peer_groups:
        benches = subdirs(group)
        ours = [b for b in benches if b.startswith("liblb")]
        others = [b for b in benches if not b.startswith("liblb")]
        sizes = sorted(int(n) for n in subdirs(group, ours[0]) if n.isdigit())
        for n in sizes:
            for mine in ours:
                t = need(group, mine, n)
                label = mine.replace("liblb_", "liblb ")
                for peer in others:
                    p = need(group, peer, n)
                    print(f"| {group} ({label}) | {n} | {t:.1f} | {peer} | {p:.1f} | {p / t:.2f} |")
    print()


def layer():
    print("**The `Balancer` layer** (N = 1000, unkeyed, ns per pick): through the `Balancer` (the")
    print("thread's snapshot pin), `Table` + `State` alone, an arc-swap guard + `Table` (the layer")
    print("before pins), and round robin's floor, a bare `AtomicUsize::fetch_add` and `% n`:")
    print()
    print("| algorithm | `Balancer` | `Table` + `State` | layer (ns) | arc-swap guard + `Table` | bare `AtomicUsize` | `Balancer` / `AtomicUsize` |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    # Criterion turns the "/" of a benchmark's name into "_" in its directory.
    floor = need("layer", "round_robin_AtomicUsize")
    for algorithm in ["round_robin", "random"]:
        full = need("layer", f"{algorithm}_balancer")
        table = need("layer", f"{algorithm}_table_state")
        guard = need("layer", f"{algorithm}_arc_swap_guard_table")
        ratio = f"{full / floor:.2f}" if algorithm == "round_robin" else "—"
        atomic = f"{floor:.1f}" if algorithm == "round_robin" else "—"
        print(f"| {algorithm} | {full:.1f} | {table:.1f} | {full - table:+.1f} | {guard:.1f} | {atomic} | {ratio} |")
    print()
    print("Every algorithm at N = 100 (keyed ones with a key), `Table` + `State` against the `Balancer`:")
    print()
    print("| algorithm | `Table` + `State` (ns/pick) | `Balancer` (ns/pick) | layer (ns) |")
    print("|---|---:|---:|---:|")
    for group in peer_groups:
        table = need("table_only", group, 100)
        full = need(group, "liblb_sha256" if group == "ring" else "liblb", 100)
        print(f"| {group} | {table:.1f} | {full:.1f} | {full - table:+.1f} |")
    print()


def sha256():
    hash_only = estimate("sha256", "key_hash_only")
    pick = estimate("sha256", "ring_pick_1000")
    if hash_only and pick:
        print(f"**SHA-256 ring:** the key hash alone {hash_only:.1f} ns, a whole `ring` pick at N = 1000 "
              f"{pick:.1f} ns: the hash is {100 * hash_only / pick:.0f}% of the pick.")
        print()


def feedback():
    print("**Leases** (N = 100, ns per request, through the `Balancer`):")
    print()
    print("| algorithm | `pick` | `acquire` + `finish` | `acquire` + drop (cancel) |")
    print("|---|---:|---:|---:|")
    for algorithm in subdirs("lease", "pick"):
        cells = [need("lease", kind, algorithm) for kind in ["pick", "acquire_finish", "acquire_cancel"]]
        print(f"| {algorithm} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    print()
    plain = need("p2c", "plain_p2c")
    table = need("p2c", "liblb_table")
    full = need("p2c", "liblb_balancer")
    print(f"**least_request against plain P2C** (N = 100): plain P2C {plain:.1f} ns, `Table` + `State` "
          f"{table:.1f} ns ({table / plain:.2f}x), `Balancer` {full:.1f} ns ({full / plain:.2f}x).")
    print()


def threads():
    print("**Threads** (N = 100): total picks per second from 1 and from 2 threads on one shared")
    print("balancer (keyed algorithms with a different key each pick), and the floors:")
    print()
    print("| what | 1 thread (M picks/s) | 2 threads (M picks/s) | 2 / 1 |")
    print("|---|---:|---:|---:|")
    names = subdirs("threads")
    floors = [n for n in names if n.startswith("floor_")]
    for name in [n for n in names if n not in floors] + floors:
        # iter_custom times `threads` picks per iteration: picks/s = threads / time.
        one = 1 / need("threads", name, 1) * 1e3
        two = 2 / need("threads", name, 2) * 1e3
        print(f"| {name} | {one:.1f} | {two:.1f} | {two / one:.2f} |")
    print()


def builds():
    print("**Table builds** (`Table::build`, default options; `equal`: every weight 1, `1..100`:")
    print("weights cycling 1..100 for the algorithms whose build depends on them):")
    print()
    # Directories are <algorithm>_<weights> (criterion flattens the name's "/").
    runs = [d.rsplit("_", 1) for d in subdirs("build")]
    sizes = sorted({int(n) for d in subdirs("build") for n in subdirs("build", d) if n.isdigit()})
    print("| algorithm | weights | " + " | ".join(f"10^{len(str(n)) - 1}" for n in sizes) + " |")
    print("|---|---|" + "---:|" * len(sizes))
    for label in ["equal", "1..100"]:
        for algorithm in sorted(a for a, w in runs if w == label):
            cells = [estimate("build", f"{algorithm}_{label}", n) for n in sizes]
            print(f"| {algorithm} | {label} | " + " | ".join(ns(c) if c else "—" for c in cells) + " |")
    print()
    loop = estimate("wrr_schedule", "nginx_loop_1000")
    table = estimate("wrr_schedule", "table_build_1000")
    if loop and table:
        print(f"**Smooth WRR, 1000 nodes of weights 1..100:** nginx's loop {ns(loop)}, `Table::build` "
              f"{ns(table)}: {loop / table:.0f}x faster.")
        print()


def pivot(group, title):
    """A group whose benchmarks end in a node count: one row per benchmark, one column per N."""
    rows = {}
    for dirpath, dirnames, _ in os.walk(os.path.join(root, group)):
        if os.path.basename(dirpath) == "new":
            rel = os.path.relpath(os.path.dirname(dirpath), os.path.join(root, group))
            if rel.startswith("report") or "/report" in rel:
                continue
            *name, last = rel.split(os.sep)
            if last.isdigit():
                rows.setdefault("/".join(name), {})[int(last)] = need(group, *name, last)
            else:
                rows.setdefault(rel.replace(os.sep, "/"), {})[None] = need(group, *rel.split(os.sep))
    sizes = sorted({n for r in rows.values() for n in r if n is not None})
    columns = sizes if sizes else [None]
    print(f"**{title}** (`{group}`):")
    print()
    print("| benchmark | " + " | ".join(f"N = {n}" if n else "time" for n in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name in sorted(rows):
        print(f"| {name} | " + " | ".join(ns(rows[name][n]) if n in rows[name] else "—" for n in columns) + " |")
    print()


# Issue 23's goals (bench/benches/fast_paths.rs): family -> (peer benchmark, goal for
# Balancer / peer, or None where the row is reported without one).
FAST_PATHS = {
    "random": [("rand_choose", 2.0)],
    "weighted_random": [("rand_distr_alias", 1.5)],
    "round_robin": [("atomic_usize", 1.5)],
    "source_hash": [("xxh3_mod_n", 1.5)],
    "least_request": [("plain_p2c", 3.0), ("plain_p2c_in_flight", None)],
    "bounded_ring": [("table", 1.2)],
}


def fast_paths():
    print("**Issue 23's goals** (`fast_paths`, N = 1000; least_request: `acquire` + `finish`):")
    print()
    print("| family | liblb `Balancer` | `Table` | peer | peer (ns) | Balancer / peer | goal |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for family, rows in FAST_PATHS.items():
        group = f"fast_paths_{family}"
        ours = need(group, "balancer_acquire_finish" if family == "least_request" else "balancer")
        table = estimate(group, "table_pick_start_end" if family == "least_request" else "table")
        for peer, goal in rows:
            theirs = need(group, peer)
            print(
                f"| {family} | {ns(ours)} | {ns(table) if table else '—'} | {peer} | {ns(theirs)} "
                f"| {ours / theirs:.2f}x | {f'≤ {goal}x' if goal else '—'} |"
            )
    print()


def main():
    if not os.path.isdir(root):
        sys.exit(f"no {root}: run `cargo bench -p liblb-bench` first")
    peers()
    layer()
    sha256()
    feedback()
    threads()
    builds()
    fast_paths()
    pivot("least_connections", "least_connections: pick and lease against a plain P2C")
    pivot("placement", "Placement picks against the upstream crates")
    pivot("placement_build", "Placement table builds")
    pivot("attempts", "Retry orders of 8 nodes (`attempts`)")
    pivot("attempts_all", "Whole retry orders (`attempts` without a limit)")
    pivot("ring_weights", "Ring weights: build and pick, 1000 nodes")


main()
