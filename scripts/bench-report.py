#!/usr/bin/env python3
"""Turns criterion's results (target/criterion) into BENCHMARKS.md's Rust table.

Run `cargo bench -p liblb-bench` first. For every group (algorithm) and node count it prints
liblb's median time per pick and each peer's, with the ratio peer / liblb (> 1: liblb faster).
"""
import json
import os
import sys

root = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "criterion")
groups = ["random", "weighted_random", "round_robin", "weighted_round_robin", "source_hash", "ring"]


def median_ns(group, bench, n):
    path = os.path.join(root, group, bench, str(n), "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


def main():
    if not os.path.isdir(root):
        sys.exit(f"no {root}: run `cargo bench -p liblb-bench` first")
    print("| algorithm | N | liblb (ns/pick) | peer | peer (ns/pick) | peer / liblb |")
    print("|---|---|---|---|---|---|")
    for group in groups:
        benches = sorted(os.listdir(os.path.join(root, group)))
        ours = [b for b in benches if b.startswith("liblb")]
        peers = [b for b in benches if not b.startswith("liblb") and b != "report"]
        sizes = sorted(
            int(n) for n in os.listdir(os.path.join(root, group, ours[0])) if n.isdigit()
        )
        for n in sizes:
            for mine in ours:
                t = median_ns(group, mine, n)
                label = mine.replace("liblb_", "liblb ").replace("liblb", "liblb", 1)
                for peer in peers:
                    p = median_ns(group, peer, n)
                    print(f"| {group} ({label}) | {n} | {t:.1f} | {peer} | {p:.1f} | {p / t:.2f} |")

    print()
    print("| algorithm (N = 100) | Table + State (ns/pick) | Balancer (ns/pick) | snapshot overhead (ns) |")
    print("|---|---|---|---|")
    for group in groups:
        table = median_ns("table_only", group, 100)
        mine = "liblb_sha256" if group == "ring" else "liblb"
        full = median_ns(group, mine, 100)
        print(f"| {group} | {table:.1f} | {full:.1f} | {full - table:.1f} |")


main()
