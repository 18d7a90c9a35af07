"""Threads: pickers and an updater sharing one Balancer. Every answer must be a node of some
published membership, every batch must come from a single membership (never a mix), nothing
may raise, and the balancer must end in the last state the updater wrote."""

from __future__ import annotations

import sys
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


# A ring this big takes a good fraction of a second to build on the bench machine: 2000 nodes of
# weights 1-5 are about 960,000 points, each a SHA-256 hash, then sorted.
BIG_RING = [(f"10.0.{i // 256}.{i % 256}:80", 1 + i % 5) for i in range(2000)]


def other_thread_ran_inside(call: Callable[[], object]) -> int:
    """How many times another Python thread ran while `call()` was in progress (0 if it never
    did). Not a timing measurement: it shows whether `call` let go of the GIL at all.

    Why a positive count proves the GIL was released inside the call, and why the test is robust
    on a loaded 2-core machine:

    - The switch interval is raised to 1000 s for the duration, so this (main) thread never hands
      the GIL over on its own: the other thread can only run Python code while this one waits
      without the GIL (a blocking call, or a native call that releases it).
    - The other thread reads a phase that this thread sets to "building" right before `call()`
      and to "done" right after it, with only bytecode in between (no blocking). So a count made
      while the phase reads "building" was made while this thread was inside `call()`, during a
      GIL release of `call()` itself. A binding that kept the GIL throughout would make the
      other thread run only after "done" is set: a count of 0, every time, however fast or slow
      the machine is.
    - The other thread sleeps 1 ms between looks (without the GIL), so it never holds the GIL
      when this thread wants it back (no convoy).
    - Load only delays when the OS runs the other thread; the call lasts a good fraction of a
      second, and the caller retries a few times, so a positive count does not depend on the
      machine being idle.
    """
    phase = ["idle"]  # one-item lists: shared with the watcher
    inside = [0]
    go = threading.Event()

    def watcher() -> None:
        go.wait()
        while phase[0] != "done":
            if phase[0] == "building":
                inside[0] += 1
            time.sleep(0.001)

    old = sys.getswitchinterval()
    thread = threading.Thread(target=watcher)
    thread.start()
    sys.setswitchinterval(1000.0)
    try:
        go.set()
        phase[0] = "building"
        call()
        phase[0] = "done"
    finally:
        phase[0] = "done"
        sys.setswitchinterval(old)
        thread.join()
    return inside[0]


def ran_inside_some(call: Callable[[], object], tries: int = 3) -> int:
    """`other_thread_ran_inside`, retried while the count is 0 (the OS may leave the other thread
    unscheduled for one whole call on a busy machine; never for `tries` of them)."""
    for _ in range(tries):
        inside = other_thread_ran_inside(call)
        if inside > 0:
            return inside
    return 0


def test_membership_changes_release_the_gil() -> None:
    ring = liblb.Balancer("ring", BIG_RING[:10])
    # Each of these builds a ring table of about a million points.
    assert ran_inside_some(lambda: liblb.Balancer("ring", BIG_RING)) > 0
    assert ran_inside_some(lambda: ring.update(BIG_RING)) > 0
    assert ran_inside_some(lambda: ring.add("extra", 5)) > 0
    assert ran_inside_some(lambda: ring.set_weight("extra", 1)) > 0
    assert ran_inside_some(lambda: ring.remove("extra")) > 0
    assert ring.nodes() == BIG_RING


def test_the_check_sees_a_call_that_keeps_the_gil() -> None:
    # The same check on a long native call that never releases the GIL (sorting a big list of
    # str): the other thread cannot run inside it. This is what the check would report for a
    # membership change that kept the GIL.
    data = [f"{i * 2654435761 % 1000003:07d}" for i in range(300_000)]
    assert other_thread_ran_inside(lambda: sorted(data)) == 0


def test_failed_builds_raise_the_same_errors() -> None:
    # The errors of calls that run detached are the same classes, codes and messages, and the
    # balancer is unchanged afterwards.
    ring = liblb.Balancer("ring", BIG_RING[:100])
    with pytest.raises(liblb.DuplicateNodeError) as dup:
        ring.update([*BIG_RING[:100], BIG_RING[0]])
    assert dup.value.code == "LB_DUPLICATE_NODE" and BIG_RING[0][0] in str(dup.value)
    with pytest.raises(liblb.DuplicateNodeError):
        ring.add(BIG_RING[1][0])
    with pytest.raises(liblb.UnknownNodeError) as unknown:
        ring.remove("nope")
    assert unknown.value.code == "LB_UNKNOWN_NODE" and "nope" in str(unknown.value)
    with pytest.raises(liblb.UnknownNodeError):
        ring.set_weight("nope", 2)
    with pytest.raises(liblb.DuplicateNodeError):
        liblb.Balancer("ring", [BIG_RING[0], BIG_RING[0]])
    assert ring.nodes() == BIG_RING[:100]
    assert ring.pick("k") in dict(BIG_RING[:100])


def test_big_batches_release_the_gil() -> None:
    ring = liblb.Balancer("ring", BIG_RING[:50])
    # The keys are read with the GIL; the picking (SHA-256 per key) runs without it.
    keys = [f"user-{i}" for i in range(500_000)]
    assert ran_inside_some(lambda: ring.pick_many(keys)) > 0
