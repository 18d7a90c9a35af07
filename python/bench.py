"""How much does a pick cost from Python? liblb against pure-Python references, in one run.

    .venv/bin/python python/bench.py            # after scripts/test-python.sh (or pip install ./python)
    .venv/bin/python python/bench.py --quick    # fewer repetitions

For each algorithm: ns per single pick through the binding, the core's own cost for the same
picks (timed in Rust, `_liblb._core_pick_ns`), and the floor, i.e. a call of a no-op function
of the same extension with the same argument (`_liblb._noop(key)`): the price of crossing
into the extension at all. Each is compared with a pure-Python reference doing the same job:
`uhashring` in ketama mode (consistent hashing), `random.choice`, `random.choices` with
weights, `itertools.cycle`, and `zlib.crc32(key) % n` (source hash). Then `pick_many` per key
against the core's `pick_many` per key.

Every timing is a loop over 1000 distinct keys (the loop's own overhead is in every figure
alike, the floor included), measured once per round over all cells, for 15 rounds; the best
round is the figure, and `best..median` shows the machine's noise.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import random
import statistics
import sys
import timeit
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

# `python python/bench.py` puts python/ first on sys.path, where the source folder liblb/ (no
# native module) would shadow the installed package: measure the installed one.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import liblb  # noqa: E402
from liblb import _liblb  # noqa: E402

try:
    from uhashring import HashRing  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - the test tools include it
    sys.exit("bench.py needs uhashring: pip install -r python/requirements-test.txt")

NODE_COUNT = 10
KEY_COUNT = 1000
BATCH = 10_000


class Best:
    """The best (lowest) and median of the samples given to one cell across rounds."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def add(self, ns: float) -> None:
        self.samples.append(ns)

    @property
    def best(self) -> float:
        return min(self.samples)

    def __str__(self) -> str:
        return f"{self.best:7.1f}..{statistics.median(self.samples):<7.1f}"


def per_call(fn: Callable[[Any], object], keys: list[Any], number: int) -> float:
    """ns per call of fn(key), one run of `number` passes over the keys."""

    def loop() -> None:
        for k in keys:
            fn(k)

    return timeit.timeit(loop, number=number) / (number * len(keys)) * 1e9


def per_key_batch(fn: Callable[[list[Any]], object], keys: list[Any], number: int) -> float:
    return timeit.timeit(lambda: fn(keys), number=number) / (number * len(keys)) * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    ap.add_argument("--rounds", type=int, default=15, help="rounds over every cell (default 15)")
    args = ap.parse_args()
    rounds = 3 if args.quick else args.rounds
    # Passes over the keys per sample: each sample then lasts tens of milliseconds, longer
    # than the scheduler's time slice, so one preemption cannot dominate it.
    number, batch_number = 500, 100

    nodes = [f"10.0.0.{i}:80" for i in range(NODE_COUNT)]
    weights = [1 + i % 4 for i in range(NODE_COUNT)]
    weighted = list(zip(nodes, weights))
    keys = [f"user-{i:06d}" for i in range(KEY_COUNT)]
    batch = [f"user-{i:06d}" for i in range(BATCH)]
    rng = random.Random(1)
    cycle = itertools.cycle(nodes)

    def crc_pick(key: str) -> str:
        return nodes[zlib.crc32(key.encode()) % len(nodes)]

    ketama = HashRing(nodes=nodes, hash_fn="ketama")
    references: dict[str, tuple[str, Callable[[Any], object]]] = {
        "random": ("random.choice", lambda _k: rng.choice(nodes)),
        "weighted_random": ("random.choices(weights)", lambda _k: rng.choices(nodes, weights)[0]),
        "round_robin": ("next(itertools.cycle)", lambda _k: next(cycle)),
        "weighted_round_robin": ("next(itertools.cycle)", lambda _k: next(cycle)),
        "source_hash": ("crc32(key) % n", crc_pick),
        "ring": ("uhashring ketama", ketama.get_node),
        "ring (hash=xxh3)": ("uhashring ketama", ketama.get_node),
    }
    balancers = {a: liblb.Balancer(a, weighted, seed=7) for a in liblb.ALGORITHMS}
    balancers["ring (hash=xxh3)"] = liblb.Balancer("ring", weighted, hash="xxh3")
    batched = list(liblb.ALGORITHMS)

    floor, batch_floor = Best(), Best()
    pick = {a: Best() for a in balancers}
    core = {a: Best() for a in balancers}
    ref = {a: Best() for a in balancers}
    many = {a: Best() for a in batched}
    core_many = {a: Best() for a in batched}
    # Rounds over every cell, so a burst of load on the (shared) machine spoils one sample of
    # each cell rather than every sample of one cell; the best sample of each cell is reported.
    for _ in range(rounds):
        floor.add(per_call(_liblb._noop, keys, number))
        batch_floor.add(per_key_batch(_liblb._noop_many, batch, batch_number))
        for name, b in balancers.items():
            pick[name].add(per_call(b.pick, keys, number))
            core[name].add(_liblb._core_pick_ns(b, keys, number))
            ref[name].add(per_call(references[name][1], keys, max(1, number // 10)))
        for name in batched:
            b = balancers[name]
            many[name].add(per_key_batch(b.pick_many, batch, batch_number))
            core_many[name].add(_liblb._core_pick_many_ns(b, batch, batch_number))

    print(f"liblb {liblb.__version__}, Python {platform.python_version()} ({platform.machine()}),")
    print(f"{NODE_COUNT} nodes (weights 1-4), {KEY_COUNT} distinct str keys; ns per call, best..median of {rounds} rounds\n")
    print(f"floor: _liblb._noop(key) {floor} ns\n")

    head = (
        f"{'algorithm':<22}{'pick(key)':>17}{'x floor':>9}{'core':>8}{'binding adds':>14}"
        f"   {'reference':<24}{'ref ns':>9}{'ref/liblb':>10}"
    )
    print(head)
    print("-" * len(head))
    for name in balancers:
        p = pick[name].best
        print(
            f"{name:<22}{pick[name]!s:>17}{p / floor.best:>8.2f}x{core[name].best:>8.1f}"
            f"{p - core[name].best:>14.1f}   {references[name][0]:<24}{ref[name].best:>9.1f}"
            f"{ref[name].best / p:>9.1f}x"
        )

    print(f"\npick_many: {BATCH} str keys per call, ns per key")
    print(f"batch floor: _liblb._noop_many(keys) {batch_floor} ns per key (reads the keys, builds the list)")
    head = (
        f"{'algorithm':<22}{'pick_many':>17}{'core':>8}{'x core':>8}"
        f"{'core+floor':>12}{'x (core+floor)':>16}{'vs pick loop':>14}"
    )
    print(head)
    print("-" * len(head))
    for name in batched:
        m, c = many[name].best, core_many[name].best
        bound = c + batch_floor.best
        print(
            f"{name:<22}{many[name]!s:>17}{c:>8.1f}{m / c:>7.1f}x"
            f"{bound:>12.1f}{m / bound:>15.2f}x{pick[name].best / m:>13.1f}x"
        )


if __name__ == "__main__":
    main()
