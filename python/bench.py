"""How much does a pick cost from Python? liblb against its floor and pure-Python references.

    .venv/bin/python python/bench.py            # after scripts/test-python.sh (or pip install ./python)
    .venv/bin/python python/bench.py --quick    # fewer rounds (noisier)

For each algorithm: ns per single pick through the binding, the core's own cost for the same
picks (timed in Rust, `_liblb._core_pick_ns`), and the floor: a call of a no-op function of the
same extension with the same arguments (`_liblb._noop()` for an unkeyed `pick()`,
`_liblb._noop(key)` for a keyed `pick(key)`), the price of crossing into the extension at all.
"over floor" is pick - floor, what the binding and the core add to that crossing (issue 13's
target: at most 15 ns for the unkeyed algorithms). Algorithms with a pure-Python equivalent are
compared with it: `uhashring` in ketama mode (consistent hashing), `random.choice`,
`random.choices` with weights, `itertools.cycle`, and `zlib.crc32(key) % n` (source hash).
Then the batches, per answer: `pick_many(keys)` against the core's own `pick_many` plus the
batch floor (reading the keys and building a list as long), and `pick_n(count)` for the unkeyed
algorithms against the core's batch.

`attempts(key, 3)` and `attempts(key)` (every node: 10 answers) are reported per answer, against
a single pick. Leases on `round_robin` and `least_request`: `acquire()` and its end (`finish`
with a latency, `finish()` measuring it, `cancel()`) against two no-op calls (a lease crosses
into the extension twice) and against a `pick()` plus a no-op. Last, big table builds (a 2000-node ring of weights 1-5, ~960,000 points): how
long `Balancer(...)` and `update` take, and how much a pure-Python counter thread gets done
meanwhile, as a fraction of what it does alone in the same time (a build holding the GIL gives
~0), next to the same figure for `hashlib.sha256` of a big buffer (CPython's own GIL-releasing,
CPU-bound call: the best a build can do when the machine is loaded) and `sorted` (holds it).

Every timing is a loop over 1000 distinct keys (the loop's own overhead is in every figure
alike, the floors included), measured once per round over all cells, for 15 rounds; the best
round is the figure, and `best..median` shows the machine's noise.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import platform
import random
import statistics
import sys
import threading
import time
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
# issue 13: an unkeyed pick() may cost at most this much over the floor.
TARGET_OVER_FLOOR = 15.0


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


def per_call0(fn: Callable[[], object], keys: list[Any], number: int) -> float:
    """ns per call of fn(), in the same loop over the keys as `per_call` (so the loop costs
    the same), one run of `number` passes."""

    def loop() -> None:
        for _k in keys:
            fn()

    return timeit.timeit(loop, number=number) / (number * len(keys)) * 1e9


def per_item_batch(fn: Callable[[Any], object], arg: Any, items: int, number: int) -> float:
    return timeit.timeit(lambda: fn(arg), number=number) / (number * items) * 1e9


def retry_order(b: liblb.Balancer, limit: int) -> Callable[[Any], object]:
    """`b.attempts(key, limit)` as a one-argument function."""
    return lambda key: b.attempts(key, limit)


BIG_RING = [(f"10.0.{i // 256}.{i % 256}:80", 1 + i % 5) for i in range(2000)]


def counter_share_during(call: Callable[[], object]) -> tuple[float, float]:
    """Runs `call` while a pure-Python thread counts; returns (call's seconds, the counter's
    progress during the call as a fraction of its progress alone over as long)."""
    count = [0]
    stop = threading.Event()

    def counter() -> None:
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=counter)
    thread.start()
    try:
        time.sleep(0.05)  # the counter is running
        c0, t0 = count[0], time.perf_counter()
        time.sleep(0.2)  # alone (this thread sleeps without the GIL)
        alone = (count[0] - c0) / (time.perf_counter() - t0)
        c0, t0 = count[0], time.perf_counter()
        call()
        elapsed = time.perf_counter() - t0
        during = (count[0] - c0) / elapsed
    finally:
        stop.set()
        thread.join()
    return elapsed, during / alone


# The algorithms whose leases are measured, and the ways a lease ends.
LEASED = ("round_robin", "least_request")
LEASE_FORMS: dict[str, Callable[[liblb.Balancer], object]] = {
    "acquire().finish(latency=0.003)": lambda b: b.acquire().finish(latency=0.003),
    "acquire().finish() (measured)": lambda b: b.acquire().finish(),
    "acquire().cancel()": lambda b: b.acquire().cancel(),
}


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
    keyed = {name for name, b in balancers.items() if b.algorithm in liblb.KEYED_ALGORITHMS}
    batched = list(liblb.ALGORITHMS)
    unkeyed = [a for a in batched if a not in keyed]

    floor0, floor1, batch_floor = Best(), Best(), Best()
    pick = {a: Best() for a in balancers}
    core = {a: Best() for a in balancers}
    ref = {a: Best() for a in references}
    many = {a: Best() for a in batched}
    core_many = {a: Best() for a in batched}
    pick_n = {a: Best() for a in unkeyed}
    attempts3 = {a: Best() for a in batched}
    attempts_all = {a: Best() for a in batched}
    # Rounds over every cell, so a burst of load on the (shared) machine spoils one sample of
    # each cell rather than every sample of one cell; the best sample of each cell is reported.
    for _ in range(rounds):
        floor0.add(per_call0(_liblb._noop, keys, number))
        floor1.add(per_call(_liblb._noop, keys, number))
        batch_floor.add(per_item_batch(_liblb._noop_many, batch, BATCH, batch_number))
        for name, b in balancers.items():
            if name in keyed:
                pick[name].add(per_call(b.pick, keys, number))
            else:
                pick[name].add(per_call0(b.pick, keys, number))
            core[name].add(_liblb._core_pick_ns(b, keys, number))
            if name in references:
                ref[name].add(per_call(references[name][1], keys, max(1, number // 10)))
        for name in batched:
            b = balancers[name]
            many[name].add(per_item_batch(b.pick_many, batch, BATCH, batch_number))
            core_many[name].add(_liblb._core_pick_many_ns(b, batch, batch_number))
            if name in pick_n:
                pick_n[name].add(per_item_batch(b.pick_n, BATCH, BATCH, batch_number))
            attempts3[name].add(per_call(retry_order(b, 3), keys, number // 5) / 3)
            attempts_all[name].add(per_call(b.attempts, keys, number // 5) / NODE_COUNT)

    print(f"liblb {liblb.__version__}, Python {platform.python_version()} ({platform.machine()}),")
    print(f"{NODE_COUNT} nodes (weights 1-4), {KEY_COUNT} distinct str keys; ns per call, best..median of {rounds} rounds\n")
    print(f"floor, unkeyed: _liblb._noop()    {floor0} ns")
    print(f"floor, keyed:   _liblb._noop(key) {floor1} ns\n")

    head = (
        f"{'algorithm':<22}{'call':<10}{'pick':>17}{'over floor':>12}{'x floor':>9}{'core':>8}"
        f"   {'reference':<24}{'ref ns':>9}{'ref/liblb':>10}"
    )
    print(head)
    print("-" * len(head))
    met = []
    for name in balancers:
        p = pick[name].best
        f = floor1.best if name in keyed else floor0.best
        if name not in keyed:
            met.append((name, p - f))
        reference = (
            f"{references[name][0]:<24}{ref[name].best:>9.1f}{ref[name].best / p:>9.1f}x"
            if name in references
            else ""
        )
        print(
            f"{name:<22}{'pick(key)' if name in keyed else 'pick()':<10}{pick[name]!s:>17}"
            f"{p - f:>12.1f}{p / f:>8.2f}x{core[name].best:>8.1f}   {reference}"
        )
    worst = max(met, key=lambda m: m[1])
    within = sum(1 for _, over in met if over <= TARGET_OVER_FLOOR)
    print(
        f"\nunkeyed pick(): {within} of {len(met)} within floor + {TARGET_OVER_FLOOR:.0f} ns;"
        f" the most over the floor: {worst[0]} {worst[1]:.1f} ns"
    )

    print(f"\npick_many: {BATCH} str keys per call; pick_n({BATCH}) for the unkeyed; ns per answer")
    print(f"batch floor: _liblb._noop_many(keys) {batch_floor} ns per key (reads the keys, builds the list)")
    head = (
        f"{'algorithm':<22}{'pick_many':>17}{'core':>8}{'core+floor':>12}{'x (core+floor)':>16}"
        f"{'vs pick loop':>14}{'pick_n':>17}{'x core':>8}"
    )
    print(head)
    print("-" * len(head))
    for name in batched:
        m, c = many[name].best, core_many[name].best
        bound = c + batch_floor.best
        n = f"{pick_n[name]!s:>17}{pick_n[name].best / c:>7.1f}x" if name in pick_n else ""
        print(
            f"{name:<22}{many[name]!s:>17}{c:>8.1f}{bound:>12.1f}{m / bound:>15.2f}x"
            f"{pick[name].best / m:>13.1f}x{n}"
        )


    print(f"\nattempts, ns per answer (against one pick; 1000 distinct str keys, {NODE_COUNT} nodes)")
    head = f"{'algorithm':<22}{'attempts(k, 3)':>17}{'x pick':>8}{'attempts(k)':>17}{'x pick':>8}"
    print(head)
    print("-" * len(head))
    for name in batched:
        p = pick[name].best
        print(
            f"{name:<22}{attempts3[name]!s:>17}{attempts3[name].best / p:>7.2f}x"
            f"{attempts_all[name]!s:>17}{attempts_all[name].best / p:>7.2f}x"
        )

    print(f"\nleases: acquire() + finish(), ns per lease ({NODE_COUNT} nodes; best..median of {rounds} rounds)")
    print("floor: two _liblb._noop() calls (the binding is crossed twice); pick: one pick() and a no-op")
    lease_floor, lease_pick = Best(), {a: Best() for a in LEASED}
    leases = {(a, form): Best() for a in LEASED for form in LEASE_FORMS}
    def two_noops() -> None:
        _liblb._noop()
        _liblb._noop()

    def pick_and_noop(b: liblb.Balancer) -> Callable[[], None]:
        def call() -> None:
            b.pick()
            _liblb._noop()

        return call

    def lease(b: liblb.Balancer, end: Callable[[liblb.Balancer], object]) -> Callable[[], object]:
        return lambda: end(b)

    for _ in range(rounds):
        lease_floor.add(per_call0(two_noops, keys, number))
        for name in LEASED:
            b = balancers[name]
            lease_pick[name].add(per_call0(pick_and_noop(b), keys, number))
            for form, end in LEASE_FORMS.items():
                leases[(name, form)].add(per_call0(lease(b, end), keys, number))
    head = f"{'algorithm':<22}{'call':<36}{'ns':>17}{'over floor':>12}{'x pick':>8}"
    print(head)
    print("-" * len(head))
    print(f"{'':<22}{'floor':<36}{lease_floor!s:>17}")
    for name in LEASED:
        print(f"{name:<22}{'pick() + no-op':<36}{lease_pick[name]!s:>17}{lease_pick[name].best - lease_floor.best:>12.1f}")
        for form in LEASE_FORMS:
            t = leases[(name, form)].best
            print(f"{'':<22}{form:<36}{leases[(name, form)]!s:>17}{t - lease_floor.best:>12.1f}{t / lease_pick[name].best:>7.2f}x")

    print(f"\nbig builds without the GIL: a ring of {len(BIG_RING)} nodes (weights 1-5), best..median of 3")
    print("counter share: a pure-Python thread's progress during the call / its progress alone")
    ring = liblb.Balancer("ring", BIG_RING[:10])
    # References in the same conditions: a CPU-bound stdlib call that releases the GIL (what a
    # build without the GIL can at best give the counter on a loaded machine) and one that holds it.
    blob = b"x" * 64_000_000
    unsorted = [f"{i * 2654435761 % 1000003:07d}" for i in range(300_000)]
    builds: dict[str, Callable[[], object]] = {
        "Balancer('ring', nodes)": lambda: liblb.Balancer("ring", BIG_RING),
        "update(nodes)": lambda: ring.update(BIG_RING),
        "add(id, 5)": lambda: ring.add("extra", 5),
        "remove(id)": lambda: ring.remove("extra"),
        "ref: hashlib.sha256(64 MB)": lambda: hashlib.sha256(blob).digest(),
        "ref: sorted(300k str)": lambda: sorted(unsorted),
    }
    seconds = {n: Best() for n in builds}
    share = {n: Best() for n in builds}
    for _ in range(3):
        for name, call in builds.items():
            elapsed, fraction = counter_share_during(call)
            seconds[name].add(elapsed * 1e3)
            share[name].add(-fraction)  # Best keeps the lowest: the best share is the highest
    head = f"{'call':<28}{'ms':>17}{'counter share':>15}"
    print(head)
    print("-" * len(head))
    for name in builds:
        shares = sorted(-x for x in share[name].samples)
        print(f"{name:<28}{seconds[name]!s:>17}{shares[-1]:>8.2f}..{statistics.median(shares):<5.2f}")


if __name__ == "__main__":
    main()
