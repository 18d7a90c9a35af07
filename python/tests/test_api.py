"""Every method and property of liblb.Balancer, and the module's constants."""

from __future__ import annotations

import collections
import doctest
import gc
import math
import re
from pathlib import Path

import pytest

import liblb

NODES = ["NodeA", "NodeB", "NodeC"]
KEYED = liblb.KEYED_ALGORITHMS
UNKEYED = tuple(a for a in liblb.ALGORITHMS if a not in KEYED)


def test_module_constants() -> None:
    # The lists come from the core's registration list; spot-check their shape.
    assert {"random", "round_robin", "source_hash", "ring"} <= set(liblb.ALGORITHMS)
    assert len(set(liblb.ALGORITHMS)) == len(liblb.ALGORITHMS)
    assert "ring" in liblb.KEYED_ALGORITHMS and "round_robin" not in liblb.KEYED_ALGORITHMS
    assert set(liblb.HASH_ALGORITHMS) <= set(liblb.KEYED_ALGORITHMS) <= set(liblb.ALGORITHMS)
    assert {"seed", "vnodes", "hash"} <= set(liblb.OPTIONS)
    assert liblb.HASHES == ("sha256", "xxh3")
    assert liblb.DEFAULT_VNODES == 160
    assert liblb.MAX_VNODES == 65536
    assert isinstance(liblb.__version__, str) and liblb.__version__.count(".") == 2
    assert set(liblb.__all__) <= set(dir(liblb))


def test_native_module_is_private_and_reexported() -> None:
    from liblb import _liblb

    assert liblb.Balancer is _liblb.Balancer
    assert liblb.Balancer.__module__ == "liblb"
    assert liblb.Balancer.__qualname__ == "Balancer"
    assert callable(_liblb._noop)
    _liblb._noop()
    _liblb._noop("key")


@pytest.mark.parametrize("algorithm", liblb.ALGORITHMS)
def test_pick_returns_a_member(algorithm: str) -> None:
    b = liblb.Balancer(algorithm, NODES)
    assert b.algorithm == algorithm
    for i in range(50):
        assert b.pick(f"key{i}") in NODES
    if algorithm in UNKEYED:
        assert b.pick() in NODES
        assert b.pick(None) in NODES


@pytest.mark.parametrize("algorithm", KEYED)
def test_keyed_pick_is_stable_and_accepts_every_key_type(algorithm: str) -> None:
    b = liblb.Balancer(algorithm, NODES)
    for i in range(100):
        text = f"user-{i}-é"
        raw = text.encode()
        expected = b.pick(text)
        assert b.pick(raw) == expected
        assert b.pick(bytearray(raw)) == expected
        assert b.pick(memoryview(raw)) == expected
        assert b.pick(memoryview(b"xx" + raw)[2:]) == expected
        assert b.pick(key=text) == expected


class StrKey(str):
    pass


def test_str_and_bytes_subclasses_are_keys() -> None:
    b = liblb.Balancer("ring", NODES)
    assert b.pick(StrKey("abc")) == b.pick("abc")
    assert b.pick_many([StrKey("abc")]) == [b.pick("abc")]


def test_seed_001_example() -> None:
    # The worked example of seed 001 (NodeA..C, 3 virtual nodes): Key1 -> NodeB, and removing
    # NodeB moves only its keys.
    ring = liblb.Balancer("ring", NODES, vnodes=3)
    before = {k: ring.pick(k) for k in ("Key1", "Key2", "Key3")}
    assert before["Key1"] == "NodeB"
    ring.remove("NodeB")
    for key, node in before.items():
        if node != "NodeB":
            assert ring.pick(key) == node


def test_round_robin_cycles_in_insertion_order() -> None:
    b = liblb.Balancer("round_robin", NODES)
    picks = [b.pick() for _ in range(9)]
    start = NODES.index(picks[0])
    assert picks == [NODES[(start + i) % 3] for i in range(9)]


def test_weighted_round_robin_follows_weights_exactly() -> None:
    b = liblb.Balancer("weighted_round_robin", [("a", 5), ("b", 1), ("c", 1)])
    counts = collections.Counter(b.pick() for _ in range(7 * 100))
    assert counts == {"a": 500, "b": 100, "c": 100}
    # Smooth: the heavy node is never picked 5 times in a row.
    seq = "".join(b.pick() for _ in range(14))
    assert "aaaaa" not in seq


def test_weighted_random_distribution_chi_square() -> None:
    weights = {"a": 1, "b": 2, "c": 7}
    b = liblb.Balancer("weighted_random", weights, seed=12345)
    n = 20000
    counts = collections.Counter(b.pick_n(n))
    total = sum(weights.values())
    chi2 = sum((counts[k] - n * w / total) ** 2 / (n * w / total) for k, w in weights.items())
    # 2 degrees of freedom: P(chi2 > 13.8) = 0.001.
    assert chi2 < 13.8, (counts, chi2)


def test_seeded_sequences_repeat_and_differ() -> None:
    for algorithm in ("random", "weighted_random"):
        one = liblb.Balancer(algorithm, [("a", 1), ("b", 2), ("c", 3)], seed=7)
        two = liblb.Balancer(algorithm, [("a", 1), ("b", 2), ("c", 3)], seed=7)
        other = liblb.Balancer(algorithm, [("a", 1), ("b", 2), ("c", 3)], seed=8)
        a, b, c = one.pick_n(200), two.pick_n(200), other.pick_n(200)
        assert a == b
        assert a != c
        assert one.seed == 7


def test_unseeded_balancers_differ() -> None:
    one = liblb.Balancer("random", [str(i) for i in range(100)])
    two = liblb.Balancer("random", [str(i) for i in range(100)])
    assert one.pick_n(50) != two.pick_n(50)
    assert one.seed is None


@pytest.mark.parametrize("algorithm", liblb.ALGORITHMS)
def test_pick_many_matches_single_picks(algorithm: str) -> None:
    keys = [f"k{i}" for i in range(3000)]  # above the GIL-release threshold
    small = keys[:10]
    if algorithm in KEYED:
        b = liblb.Balancer(algorithm, NODES)
        assert b.pick_many(keys) == [b.pick(k) for k in keys]
        assert b.pick_many(small) == [b.pick(k) for k in small]
        assert b.pick_many(k.encode() for k in small) == [b.pick(k) for k in small]
    else:
        one = liblb.Balancer(algorithm, NODES, seed=3)
        two = liblb.Balancer(algorithm, NODES, seed=3)
        assert one.pick_many(keys) == [two.pick() for _ in keys]
        assert one.pick_many(small) == [two.pick() for _ in small]
        assert one.pick_n(len(keys)) == [two.pick() for _ in keys]
        assert one.pick_n(0) == []


@pytest.mark.parametrize("algorithm", liblb.ALGORITHMS)
def test_empty_batches(algorithm: str) -> None:
    b = liblb.Balancer(algorithm, NODES)
    assert b.pick_many([]) == []
    assert b.pick_many(iter(())) == []


def test_pick_many_accepts_any_iterable_of_mixed_keys() -> None:
    b = liblb.Balancer("source_hash", NODES)
    keys: list[str | bytes | bytearray | memoryview] = ["a", b"b", bytearray(b"c"), memoryview(b"d")]
    assert b.pick_many(keys) == [b.pick(k) for k in keys]
    assert b.pick_many(tuple(keys)) == b.pick_many(iter(keys))
    assert b.pick_many({"x": 1}) == [b.pick("x")]


def test_pick_many_returns_new_lists_of_str() -> None:
    b = liblb.Balancer("round_robin", NODES)
    out = b.pick_many(["k"] * 6)
    assert type(out) is list and all(type(x) is str for x in out)
    out.append("mutable")  # the caller owns it


@pytest.mark.parametrize("algorithm", liblb.ALGORITHMS)
def test_attempts_are_distinct_and_start_with_the_pick(algorithm: str) -> None:
    nodes = [f"n{i}" for i in range(6)]
    for i in range(30):
        key = f"key{i}"
        # Twins in the same state: the first attempt is what pick would have answered.
        b = liblb.Balancer(algorithm, nodes, seed=i)
        twin = liblb.Balancer(algorithm, nodes, seed=i)
        every = b.attempts(key)
        assert every[0] == twin.pick(key)
        assert sorted(every) == sorted(nodes)
        assert len(b.attempts(key, 2)) == 2
        assert len(set(b.attempts(key, 4))) == 4
        assert b.attempts(key, 0) == []
        assert len(b.attempts(key, limit=100)) == 6
        assert len(b.attempts(key, 2**80)) == 6


def test_attempts_on_ring_walk_the_ring_like_pick() -> None:
    b = liblb.Balancer("ring", NODES)
    for key in ("Key1", "Key2", b"raw"):
        first = b.attempts(key, 1)
        assert first == [b.pick(key)]
        assert b.attempts(key) == b.attempts(key)


def test_attempts_skip_drained_nodes() -> None:
    b = liblb.Balancer("round_robin", [("a", 1), ("b", 0), ("c", 1)])
    assert sorted(b.attempts()) == ["a", "c"]


def test_add_remove_set_weight_update_nodes() -> None:
    b = liblb.Balancer("weighted_round_robin", ["a"])
    b.add("b")
    b.add("c", 3)
    b.add(id="d", weight=0)
    assert b.nodes() == [("a", 1), ("b", 1), ("c", 3), ("d", 0)]
    assert len(b) == 4
    b.set_weight("a", 2)
    b.set_weight(id="b", weight=0)
    assert b.nodes() == [("a", 2), ("b", 0), ("c", 3), ("d", 0)]
    counts = collections.Counter(b.pick_n(500))
    assert counts == {"a": 200, "c": 300}
    b.remove("c")
    assert "c" not in b and "a" in b
    assert b.nodes() == [("a", 2), ("b", 0), ("d", 0)]
    b.update(["x", ("y", 2), ["z", 3]])  # type: ignore[list-item]  # JSON-style pairs work too
    assert b.nodes() == [("x", 1), ("y", 2), ("z", 3)]
    b.update({"p": 4, "q": 5})
    assert b.nodes() == [("p", 4), ("q", 5)]
    b.update(iter([("r", 1)]))
    assert b.nodes() == [("r", 1)]
    b.update([])
    assert len(b) == 0 and not b and b.nodes() == []


def test_nodes_roundtrip_and_copies() -> None:
    src = liblb.Balancer("ring", [("a", 1), ("b", 7)])
    copy = liblb.Balancer("ring", src.nodes())
    assert copy.nodes() == src.nodes()
    assert [copy.pick(f"k{i}") for i in range(200)] == [src.pick(f"k{i}") for i in range(200)]
    listed = src.nodes()
    listed.clear()
    assert len(src) == 2


def test_contains() -> None:
    b = liblb.Balancer("random", NODES)
    assert "NodeA" in b
    assert "nodea" not in b
    assert 1 not in b
    assert b"NodeA" not in b
    assert None not in b


def test_options_properties() -> None:
    b = liblb.Balancer("ring", NODES, seed=1, vnodes=40, hash="xxh3")
    assert (b.seed, b.vnodes, b.hash) == (1, 40, "xxh3")
    d = liblb.Balancer("ring", NODES)
    assert (d.seed, d.vnodes, d.hash) == (None, liblb.DEFAULT_VNODES, None)
    explicit = liblb.Balancer("ring", NODES, seed=None, vnodes=None, hash=None)
    assert explicit.vnodes == liblb.DEFAULT_VNODES
    assert liblb.Balancer("ring", NODES, seed=2**64 - 1).seed == 2**64 - 1
    assert liblb.Balancer("ring", NODES, vnodes=liblb.MAX_VNODES).vnodes == liblb.MAX_VNODES


def test_hash_option_changes_the_ring() -> None:
    keys = [f"k{i}" for i in range(200)]
    sha = liblb.Balancer("ring", NODES, hash="sha256")
    assert sha.pick_many(keys) == liblb.Balancer("ring", NODES).pick_many(keys)
    assert sha.pick_many(keys) != liblb.Balancer("ring", NODES, hash="xxh3").pick_many(keys)


def test_repr_evaluates_back() -> None:
    b = liblb.Balancer("ring", [("a", 1), ("b'\"", 2)], seed=3, vnodes=40, hash="xxh3")
    text = repr(b)
    assert text.startswith("Balancer('ring', ")
    again = eval(text, {"Balancer": liblb.Balancer})
    assert again.nodes() == b.nodes()
    assert (again.seed, again.vnodes, again.hash) == (3, 40, "xxh3")
    assert repr(liblb.Balancer("random", [])) == "Balancer('random', [])"


def test_repr_summarises_many_nodes() -> None:
    b = liblb.Balancer("random", [f"n{i}" for i in range(100)])
    text = repr(b)
    assert "('n7', 1)" in text and "('n8', 1)" not in text
    assert "92 more" in text


def test_balancer_is_frozen_and_final() -> None:
    b = liblb.Balancer("random", NODES)
    with pytest.raises(AttributeError):
        b.algorithm = "ring"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        b.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        type("Sub", (liblb.Balancer,), {})


def test_answers_outlive_the_balancer() -> None:
    b = liblb.Balancer("ring", NODES)
    picks = b.pick_many(["a", "b"])
    one = b.pick("a")
    del b
    gc.collect()
    assert picks[0] == one and one in NODES


def test_large_ring_and_vnodes() -> None:
    nodes = [(f"n{i}", 1 + i % 5) for i in range(2000)]
    b = liblb.Balancer("ring", nodes)
    picks = collections.Counter(b.pick_many(f"k{i}" for i in range(20000)))
    assert len(picks) > 1500
    weights = dict(nodes)
    light = sum(v for k, v in picks.items() if weights[k] == 1) / max(1, sum(1 for w in weights.values() if w == 1))
    heavy = sum(v for k, v in picks.items() if weights[k] == 5) / max(1, sum(1 for w in weights.values() if w == 5))
    assert math.isclose(heavy / light, 5, rel_tol=0.35), (heavy, light)


def test_package_docstring_example() -> None:
    failures, tried = doctest.testmod(liblb, raise_on_error=False, verbose=False)
    assert tried > 0 and failures == 0


def test_guide_quickstart_runs() -> None:
    guide = Path(__file__).resolve().parents[2] / "docs" / "python.md"
    text = guide.read_text(encoding="utf-8")
    section = text[text.index("## Quickstart") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python block in the quickstart"
    exec(compile(match.group(1), f"{guide}:quickstart", "exec"), {})


def test_bench_hooks() -> None:
    from liblb import _liblb

    b = liblb.Balancer("ring", NODES)
    keys = [f"k{i}" for i in range(50)]
    assert _liblb._core_pick_ns(b, keys, 3) > 0
    assert _liblb._core_pick_many_ns(b, keys, 3) > 0
    assert _liblb._noop_many(keys) == [""] * 50
    with pytest.raises(liblb.NoNodesError):
        _liblb._core_pick_ns(liblb.Balancer("ring", []), keys, 1)
    with pytest.raises(liblb.NoNodesError):
        _liblb._core_pick_many_ns(liblb.Balancer("ring", []), keys, 1)
