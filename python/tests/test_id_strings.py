"""The id strings a pick returns: one `str` per node, made once per membership and handed back
by every pick of that node (see `IdStrs` in python/src/lib.rs), never an id from a membership
that an `add`, `remove`, `set_weight` or `update` has replaced once that call returned."""

from __future__ import annotations

import sys
import threading

import pytest

import liblb

KEYED = liblb.KEYED_ALGORITHMS
KEYS = [f"key-{i}" for i in range(64)]


def picks(b: liblb.Balancer, n: int = 64) -> list[str]:
    """`n` single picks, with keys for keyed algorithms."""
    if b.algorithm in KEYED:
        return [b.pick(KEYS[i % len(KEYS)]) for i in range(n)]
    return [b.pick() for _ in range(n)]


def every_answer(b: liblb.Balancer) -> set[str]:
    """Every id the balancer's single picks, batches and retry orders answer now."""
    keyed = b.algorithm in KEYED
    out = set(picks(b))
    out.update(b.pick_many(KEYS))
    out.update(b.attempts(KEYS[0] if keyed else None))
    if not keyed:
        out.update(b.pick_n(32))
    if b.algorithm in liblb.HASH_ALGORITHMS:
        out.add(b.pick_hash(12345))
    return out


def test_one_str_object_per_node_within_a_membership() -> None:
    b = liblb.Balancer("round_robin", ["a", "b", "c"])
    first = [b.pick() for _ in range(3)]
    again = [b.pick() for _ in range(3)]
    assert first == ["a", "b", "c"]
    assert all(x is y for x, y in zip(first, again)), "the cached str is handed back"
    batch = b.pick_n(6)
    assert all(s is first[i % 3] for i, s in enumerate(batch)), "batches share the same str"
    assert all(type(s) is str for s in first + batch)


@pytest.mark.parametrize("algorithm", liblb.ALGORITHMS)
def test_answers_follow_every_membership_change(algorithm: str) -> None:
    b = liblb.Balancer(algorithm, [("a", 1), ("b", 2), ("c", 1)], seed=5)
    assert every_answer(b) <= {"a", "b", "c"}
    b.add("d", 3)
    b.remove("a")
    assert every_answer(b) <= {"b", "c", "d"}
    b.set_weight("b", 0)
    b.set_weight("c", 0)
    assert every_answer(b) <= {"d"}
    b.set_weight("d", 0)
    b.set_weight("c", 1)
    answers = every_answer(b)
    assert "c" in answers and "a" not in answers
    b.update(["x", ("y", 2), "z"])
    assert every_answer(b) <= {"x", "y", "z"}
    # Ids that leave and come back are answered as themselves (equal strs, made afresh).
    b.update(["a", "b"])
    assert every_answer(b) <= {"a", "b"}


def test_a_drained_node_is_never_answered_after_set_weight_returns() -> None:
    b = liblb.Balancer("round_robin", ["a", "b", "c"])
    assert set(picks(b, 9)) == {"a", "b", "c"}
    b.set_weight("b", 0)
    assert set(picks(b, 9)) == {"a", "c"}
    b.set_weight("b", 2)
    assert set(picks(b, 9)) == {"a", "b", "c"}


def test_a_removed_node_is_never_answered_after_remove_returns() -> None:
    # Round robin visits every node each lap: a stale cache entry would show up at once.
    for n in range(1, 12):
        ids = [f"n{i}" for i in range(n)]
        b = liblb.Balancer("round_robin", ids)
        for gone in list(ids):
            before = picks(b, 2 * len(ids))
            assert set(before) == set(ids)
            b.remove(gone)
            ids.remove(gone)
            if ids:
                assert set(picks(b, 2 * len(ids))) == set(ids)
                assert set(b.pick_n(2 * len(ids))) == set(ids)


def test_unicode_and_str_subclass_ids_come_back_as_plain_equal_str() -> None:
    class Id(str):
        pass

    ids = ["ñodo", "节点", "🙂 node", Id("plain")]
    b = liblb.Balancer("round_robin", ids)
    got = [b.pick() for _ in range(8)]
    assert got == ids + ids
    assert all(type(s) is str for s in got)


def test_picks_do_not_leak_references() -> None:
    b = liblb.Balancer("round_robin", ["only"])
    s = b.pick()
    base = sys.getrefcount(s)
    for _ in range(10_000):
        b.pick()
    b.pick_n(1000)
    b.pick_many(KEYS)
    b.attempts()
    assert sys.getrefcount(s) == base


def test_a_replaced_membership_releases_its_strs() -> None:
    # The strs of a replaced membership are released with it: the count on a str the caller
    # still holds drops back to the caller's own references.
    b = liblb.Balancer("round_robin", ["held"])
    s = b.pick()
    cached = sys.getrefcount(s)
    b.update(["other"])
    assert b.pick() == "other"
    assert sys.getrefcount(s) == cached - 1


def test_picks_during_updates_name_a_published_membership() -> None:
    # A picker races an updater that alternates two disjoint memberships; after each update
    # returns, the updater's own picks name only the new one.
    a, z = [f"a{i}" for i in range(5)], [f"z{i}" for i in range(7)]
    b = liblb.Balancer("round_robin", a)
    stop = threading.Event()
    seen: list[str] = []

    def picker() -> None:
        while not stop.is_set():
            seen.append(b.pick())
            seen.extend(b.pick_n(4))

    t = threading.Thread(target=picker)
    t.start()
    try:
        for i in range(300):
            now = z if i % 2 == 0 else a
            b.update(now)
            assert set(picks(b, 2 * len(now))) == set(now)
    finally:
        stop.set()
        t.join()
    assert set(seen) <= set(a) | set(z)
