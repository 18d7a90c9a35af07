"""Hostile arguments to every method: lying lengths, endless or failing iterators, iterables that
change while they are read, side-effecting conversions, NaN and infinities, enormous strings and
wrong types. Each case checks the specific exception and that the balancer is unchanged and
keeps working afterwards (same nodes, picks work, the round robin position where it was)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, cast

import pytest

import liblb

NODES = ["a", "b", "c"]
RING = [f"node-{i}" for i in range(200)]


class Probe:
    """A round robin balancer and what it must look like after any failed call."""

    def __init__(self) -> None:
        self.b = liblb.Balancer("round_robin", NODES)
        self.last = self.b.pick()

    def check(self) -> None:
        """Unchanged: same nodes, and the next pick follows the last one (no hidden picks)."""
        assert self.b.nodes() == [(n, 1) for n in NODES]
        following = NODES[(NODES.index(self.last) + 1) % len(NODES)]
        assert self.b.pick() == following
        self.last = following
        assert self.b.pick_many(["x", "y"]) == [
            NODES[(NODES.index(following) + i) % len(NODES)] for i in (1, 2)
        ]
        self.last = NODES[(NODES.index(following) + 2) % len(NODES)]


def fails(
    probe: Probe, call: Callable[[liblb.Balancer], object], exc: type[BaseException], match: str
) -> None:
    with pytest.raises(exc, match=match):
        call(probe.b)
    probe.check()


# --- sizes: lying lengths and counts that cannot fit in memory ------------------------------


def test_limits_are_exported() -> None:
    assert liblb.MAX_BATCH == 2**24
    assert liblb.MAX_BATCH_KEY_BYTES == 2**28


class LyingLen:
    """Claims an absurd length but yields three keys (the length must only be a hint)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[str]:
        return iter(["k1", "k2", "k3"])


@pytest.mark.parametrize("length", [10**12, 2**60, 2**63 - 1])
def test_pick_many_huge_len_is_only_a_hint(length: int) -> None:
    probe = Probe()
    answers = probe.b.pick_many(LyingLen(length))
    assert len(answers) == 3
    probe.last = answers[-1]
    probe.check()


def test_pick_many_of_a_huge_range_fails_on_the_first_key() -> None:
    # Sizing the buffers from len(range(10**12)) aborted the interpreter before any key was read.
    keys: Any = range(10**12)
    fails(Probe(), lambda b: b.pick_many(keys), TypeError, r"keys\[0\] must be str")


def test_pick_many_endless_iterator_stops_at_max_batch() -> None:
    fails(Probe(), lambda b: b.pick_many(itertools.repeat("k")), MemoryError, "16777216")


def test_pick_many_keys_over_the_byte_budget() -> None:
    big = "k" * 2**26  # 64 MiB, one object: the fifth copy would pass 256 MiB
    fails(Probe(), lambda b: b.pick_many([big] * 5), MemoryError, "268435456")
    ring = liblb.Balancer("ring", RING)
    assert ring.pick_many([big] * 3) == [ring.pick(big)] * 3


@pytest.mark.parametrize("count", [2**24 + 1, 2**40, 2**63 - 1, 2**64, 2**200])
def test_pick_n_beyond_max_batch_is_a_memory_error(count: int) -> None:
    fails(Probe(), lambda b: b.pick_n(count), MemoryError, str(count))


def test_pick_n_at_max_batch_works() -> None:
    probe = Probe()
    answers = probe.b.pick_n(liblb.MAX_BATCH)
    assert len(answers) == liblb.MAX_BATCH
    probe.last = answers[-1]
    probe.check()


@pytest.mark.parametrize("limit", [2**24 + 1, 2**63, 2**200])
def test_attempts_huge_limit_means_every_node(limit: int) -> None:
    b = liblb.Balancer("ring", RING)
    assert sorted(b.attempts("k", limit)) == sorted(RING)


# --- iterators that fail or change what they read ---------------------------------------------


class Boom(Exception):
    pass


def failing_keys() -> Iterator[str]:
    yield "k1"
    yield "k2"
    raise Boom("midway")


def test_iterator_raising_midway_propagates_and_picks_nothing() -> None:
    fails(Probe(), lambda b: b.pick_many(failing_keys()), Boom, "midway")


def failing_nodes() -> Iterator[str]:
    yield "x"
    raise Boom("nodes midway")


def test_node_iterator_raising_midway() -> None:
    probe = Probe()
    fails(probe, lambda b: b.update(failing_nodes()), Boom, "nodes midway")
    with pytest.raises(Boom):
        liblb.Balancer("random", failing_nodes())


class GrowingList(list[str]):
    """A list that appends to itself while it is iterated, up to 100 keys."""

    def __iter__(self) -> Iterator[str]:
        i = 0
        while i < len(self):
            if len(self) < 100:
                self.append(f"k{len(self)}")
            yield self[i]
            i += 1


def test_list_growing_while_read() -> None:
    # The answers are for the keys actually read (100), not the length the list had at first;
    # an endless version is test_pick_many_endless_iterator_stops_at_max_batch.
    probe = Probe()
    answers = probe.b.pick_many(GrowingList(["k"]))
    assert len(answers) == 100
    probe.last = answers[-1]
    probe.check()


class ClearingList(list[str]):
    """A list that empties itself after yielding its first key."""

    def __iter__(self) -> Iterator[str]:
        first = self[0]
        self.clear()
        yield first
        yield from list.__iter__(self)


def test_list_clearing_while_read() -> None:
    probe = Probe()
    answers = probe.b.pick_many(ClearingList(["k1", "k2", "k3"]))
    assert len(answers) == 1
    probe.last = answers[0]
    probe.check()


def test_keys_changing_the_balancer_while_read() -> None:
    b = liblb.Balancer("ring", RING)

    def keys() -> Iterator[str]:
        yield "k1"
        b.update(["late-1", "late-2"])  # a membership change in the middle of reading the keys
        yield "k2"

    # Every answer comes from the one membership current when picking starts (after reading).
    assert set(b.pick_many(keys())) <= {"late-1", "late-2"}
    assert b.nodes() == [("late-1", 1), ("late-2", 1)]


def test_nodes_changing_the_balancer_while_read() -> None:
    b = liblb.Balancer("round_robin", NODES)

    def nodes() -> Iterator[str]:
        yield "n1"
        b.add("side-effect")  # no deadlock: nodes are read before the change takes the lock
        yield "n2"

    b.update(nodes())
    assert b.nodes() == [("n1", 1), ("n2", 1)]


class SideEffectWeight:
    """An int-like weight whose conversion removes a node."""

    def __init__(self, b: liblb.Balancer) -> None:
        self.b = b

    def __index__(self) -> int:
        self.b.remove("a")
        return 5


def test_weight_conversion_with_side_effects() -> None:
    b = liblb.Balancer("weighted_round_robin", NODES)
    # The weight is read first (removing "a"), then the change fails on the missing node.
    with pytest.raises(liblb.UnknownNodeError):
        b.set_weight("a", cast(Any, SideEffectWeight(b)))
    assert b.nodes() == [("b", 1), ("c", 1)]
    assert b.pick() in {"b", "c"}


# --- numbers ----------------------------------------------------------------------------------

FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, 1.5]


@pytest.mark.parametrize("value", FLOATS, ids=repr)
def test_floats_are_not_integers(value: Any) -> None:
    probe = Probe()
    fails(probe, lambda b: b.add("d", value), TypeError, "weight must be int, got float")
    fails(probe, lambda b: b.set_weight("a", value), TypeError, "must be int, got float")
    fails(probe, lambda b: b.update([("a", value)]), TypeError, "must be int, got float")
    fails(probe, lambda b: b.pick_n(value), TypeError, "count must be int, got float")
    fails(probe, lambda b: b.attempts(limit=value), TypeError, "limit must be int, got float")
    with pytest.raises(TypeError, match="seed must be int or str, got float"):
        liblb.Balancer("random", NODES, seed=value)
    with pytest.raises(TypeError, match="vnodes must be int or str, got float"):
        liblb.Balancer("ring", NODES, vnodes=value)


@pytest.mark.parametrize("value", [-1, -(2**64), 2**32, 2**64, 2**200])
def test_weights_out_of_range(value: int) -> None:
    fails(Probe(), lambda b: b.add("d", value), ValueError, str(value))


@pytest.mark.parametrize("value", [-1, 2**64, -(2**200)])
def test_seeds_out_of_range(value: int) -> None:
    with pytest.raises(liblb.InvalidOptionValueError, match=str(value)):
        liblb.Balancer("random", NODES, seed=value)


def test_negative_zero_is_zero_for_ints() -> None:
    b = liblb.Balancer("random", NODES, seed=-0)
    assert b.seed == 0
    assert b.pick_n(-0) == []
    assert b.attempts(limit=-0) == []


# --- enormous strings -------------------------------------------------------------------------


def test_enormous_id_round_trips_and_leaves() -> None:
    probe = Probe()
    huge = "i" * (64 << 20)
    probe.b.add(huge)
    assert probe.b.nodes()[-1] == (huge, 1)
    probe.b.remove(huge)
    probe.check()
    fails(probe, lambda b: b.add(huge + "\0"), liblb.InvalidNodeIdError, "NUL")


def test_enormous_key() -> None:
    ring = liblb.Balancer("ring", RING)
    huge = "k" * (64 << 20)
    assert ring.pick(huge) == ring.pick(huge.encode())
    assert ring.attempts(huge, 1) == [ring.pick(huge)]


# --- wrong types everywhere ---------------------------------------------------------------------

WRONG: list[Any] = [None, 1, 1.5, object(), [], {}, b"x"]


@pytest.mark.parametrize("value", WRONG, ids=lambda v: type(v).__name__)
def test_wrong_types(value: Any) -> None:
    probe = Probe()
    if value is not None:
        fails(probe, lambda b: b.add(value), TypeError, "node id must be str")
        fails(probe, lambda b: b.remove(value), TypeError, "node id must be str")
        fails(probe, lambda b: b.set_weight(value, 1), TypeError, "node id must be str")
    if not isinstance(value, int):
        fails(probe, lambda b: b.pick_n(value), TypeError, "count must be int")
    fails(probe, lambda b: b.update([value]), TypeError, "a node must be")
    if not isinstance(value, bytes):
        fails(probe, lambda b: b.pick_many([value, "k"]), TypeError, r"keys\[0\] must be")
    if value is not None and not isinstance(value, bytes):
        fails(probe, lambda b: b.pick(value), TypeError, "key must be")
        fails(probe, lambda b: b.attempts(value), TypeError, "key must be")
    assert value not in probe.b
    probe.check()


def test_str_and_bytes_are_not_batches() -> None:
    probe = Probe()
    singles: list[Any] = ["abc", b"abc", bytearray(b"abc"), memoryview(b"abc")]
    for single in singles:
        fails(probe, partial(lambda s, b: b.pick_many(s), single), TypeError, "wrap it in a list")


# --- lone surrogates: one rule in every language -----------------------------------------------


def test_lone_surrogate_keys_hash_as_u_fffd() -> None:
    # Keys are encoded as UTF-8 the way JavaScript's TextEncoder does: each lone surrogate code
    # unit becomes U+FFFD (EF BF BD); a high + low pair is one character. Node gives the same.
    ring = liblb.Balancer("ring", RING)
    cases = {
        "\ud800x": "\ufffdx",
        "x\udfff": "x\ufffd",
        "\udc00\ud800": "\ufffd\ufffd",
        "a\ud83d\ude00b": "a\U0001f600b",  # a pair of surrogate code points is one character
        "\ud83d": "\ufffd",
    }
    for key, same in cases.items():
        expected = same.encode()
        assert ring.pick(key) == ring.pick(same) == ring.pick(expected), key
        assert ring.attempts(key, 3) == ring.attempts(expected, 3)
    keys = list(cases)
    assert ring.pick_many(keys) == [ring.pick(cases[k]) for k in keys]
    # The replacement is the only change: distinct well-formed keys still differ somewhere.
    assert len({ring.pick(f"\ud800{i}") for i in range(50)}) > 10


def test_lone_surrogate_ids_are_refused() -> None:
    probe = Probe()
    for bad in ["\ud800", "a\udfff", "\ud83d\ude00"]:
        fails(probe, partial(lambda s, b: b.add(s), bad), liblb.InvalidUtf8Error, "UTF-8")
        fails(probe, partial(lambda s, b: b.update([s]), bad), liblb.InvalidUtf8Error, "UTF-8")
        fails(probe, partial(lambda s, b: b.remove(s), bad), liblb.InvalidUtf8Error, "UTF-8")
        assert bad not in probe.b


def test_lone_surrogate_names_are_unknown_names() -> None:
    with pytest.raises(liblb.UnknownAlgorithmError, match="valid algorithms"):
        liblb.Balancer("ring\ud800", NODES)
    with pytest.raises(liblb.UnknownHashError, match="valid hashes"):
        liblb.Balancer("ring", NODES, hash="\ud800")
