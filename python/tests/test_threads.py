"""Threads: pickers and an updater sharing one Balancer. Every answer must be a node of some
published membership, every batch must come from a single membership (never a mix), nothing
may raise, and the balancer must end in the last state the updater wrote."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import liblb

# Two disjoint memberships the updater switches between (never empty, so picks never fail).
RED = [(f"red{i}", 1 + i % 3) for i in range(8)]
BLUE = [(f"blue{i}", 2) for i in range(5)]
EVERY_ID = {i for i, _ in RED + BLUE} | {"extra"}
# Every published membership is RED or BLUE, each possibly with "extra".
MEMBERSHIPS = ({i for i, _ in RED} | {"extra"}, {i for i, _ in BLUE} | {"extra"})


def one_membership(ids: list[str]) -> bool:
    """A batch comes from one snapshot: never a mix of two memberships."""
    return any(set(ids) <= m for m in MEMBERSHIPS)
SECONDS = 0.5


@pytest.mark.parametrize("algorithm", liblb.ALGORITHMS)
def test_pickers_against_an_updater(algorithm: str) -> None:
    b = liblb.Balancer(algorithm, RED, seed=1)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: set[str] = set()
    counts = {"picks": 0, "updates": 0}
    lock = threading.Lock()
    keys = [f"user{i}" for i in range(2000)]  # above the GIL-release threshold

    def picker(n: int) -> None:
        local: set[str] = set()
        done = 0
        try:
            while not stop.is_set():
                local.add(b.pick(keys[done % len(keys)]))
                for batch in (
                    b.pick_many(keys[: 10 + n]),
                    b.pick_many(keys),  # releases the GIL
                    b.attempts(keys[n], 3),
                    b.attempts(keys[n]),
                ):
                    assert one_membership(batch), batch
                    local.update(batch)
                assert len(b) in (len(RED), len(BLUE), len(RED) + 1, len(BLUE) + 1)
                done += 3
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        with lock:
            seen.update(local)
            counts["picks"] += done

    def updater() -> None:
        try:
            while not stop.is_set():
                b.update(BLUE)
                b.add("extra", 1)
                b.set_weight("extra", 3)
                b.remove("extra")
                b.update(RED)
                counts["updates"] += 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=picker, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=updater))
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()

    assert not errors, errors
    assert seen <= EVERY_ID
    assert counts["picks"] > 0 and counts["updates"] > 0
    assert b.nodes() == RED  # the updater's last write


def test_concurrent_writers_lose_no_change() -> None:
    b = liblb.Balancer("round_robin", [])
    per_thread = 200

    def writer(t: int) -> None:
        for i in range(per_thread):
            b.add(f"t{t}-{i}")

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(b) == 4 * per_thread
    assert sorted(b.pick_n(4 * per_thread)) == sorted(i for i, _ in b.nodes())


def test_round_robin_counter_is_shared_exactly() -> None:
    b = liblb.Balancer("round_robin", [f"n{i}" for i in range(7)])
    results: list[list[str]] = []

    def picker() -> None:
        results.append(b.pick_n(7 * 3000))

    threads = [threading.Thread(target=picker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # However the threads interleave, the shared counter hands every node the same number.
    totals: dict[str, int] = {}
    for r in results:
        for node in r:
            totals[node] = totals.get(node, 0) + 1
    assert set(totals.values()) == {4 * 3000}


def longest_stall_during(action: Callable[[], object]) -> tuple[float, float]:
    """Runs `action` while another thread ticks; returns (action's duration, the longest gap
    between two ticks while it ran). A call that keeps the GIL stalls the ticker throughout."""
    stop = threading.Event()
    ticks: list[float] = []

    def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    thread = threading.Thread(target=ticker)
    thread.start()
    while len(ticks) < 100:  # the ticker is running
        time.sleep(0.001)
    start = time.perf_counter()
    action()
    end = time.perf_counter()
    stop.set()
    thread.join()
    during = [t for t in ticks if start <= t <= end] + [end]
    gaps = [b - a for a, b in zip([start, *during], during)]
    return end - start, max(gaps)


def test_long_calls_release_the_gil() -> None:
    nodes = [(f"10.0.{i // 256}.{i % 256}:80", 1 + i % 5) for i in range(5000)]
    ring = liblb.Balancer("ring", nodes[:10])
    # A membership change rebuilding a big ring (about a million SHA-256 point hashes).
    duration, stall = longest_stall_during(lambda: ring.update(nodes))
    assert duration > 0.02 and stall < duration / 2, (duration, stall)
    # A big batch: the keys are read with the GIL, the picking runs without it.
    keys = [f"user-{i}" for i in range(300_000)]
    duration, stall = longest_stall_during(lambda: ring.pick_many(keys))
    assert duration > 0.02 and stall < duration / 2, (duration, stall)
