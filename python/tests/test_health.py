"""Health from Python: ejection by reported failures, panic, mark_down/mark_up, slow start and
bounded-load options, stats' status. The policies themselves are tested in the core
(core/tests/health.rs, on an injected clock); here every call and option reaches it and comes
back in Python form.
"""

from __future__ import annotations

import time

import pytest

import liblb

NODES = ["a", "b", "c", "d"]


def status(b: liblb.Balancer, node: str) -> str:
    return next(s["status"] for s in b.stats() if s["id"] == node)


def test_consecutive_failures_eject_until_the_ejection_time_passes() -> None:
    b = liblb.Balancer("round_robin", NODES, consecutive_failures=3, base_ejection_time_ms=80)
    for _ in range(3):
        b.report("a", ok=False, latency=0.001)
    row = next(s for s in b.stats() if s["id"] == "a")
    assert row["status"] == "ejected" and isinstance(row["until"], float)
    assert "a" not in b.pick_n(100)
    time.sleep(0.1)  # past the 80 ms ejection: back by itself, weight kept
    assert status(b, "a") == "healthy"
    assert "a" in b.pick_n(100)
    assert dict(b.nodes())["a"] == 1


def test_leases_that_fail_eject_too() -> None:
    b = liblb.Balancer("round_robin", NODES, consecutive_failures=2)
    failed = 0
    for _ in range(40):
        lease = b.acquire()
        if lease.id == "b":
            lease.finish(ok=False, latency=0.0)
            failed += 1
        else:
            lease.finish(ok=True, latency=0.0)
    assert failed == 2
    assert status(b, "b") == "ejected"


def test_panic_spreads_traffic_over_every_node() -> None:
    b = liblb.Balancer("round_robin", NODES, consecutive_failures=1, max_ejection_percent=100)
    assert b.panic is False
    for node in ["a", "b", "c"]:
        b.report(node, ok=False, latency=0.0)
    picks = b.pick_n(400)
    assert b.panic is True
    assert sorted(set(picks)) == NODES


@pytest.mark.parametrize("algorithm", liblb.ALGORITHMS)
def test_mark_down_and_up_for_every_algorithm(algorithm: str) -> None:
    b = liblb.Balancer(algorithm, NODES, seed=3)
    keyed = algorithm in liblb.KEYED_ALGORITHMS
    keys = [f"k{i}" for i in range(300)]
    before = b.pick_many(keys) if keyed else None
    b.mark_down("c")
    assert status(b, "c") == "down"
    during = b.pick_many(keys) if keyed else b.pick_n(300)
    assert "c" not in during
    if keyed:
        assert before is not None
        moved = [k for k, x, y in zip(keys, before, during) if x != y]
        assert all(before[keys.index(k)] == "c" for k in moved)
    b.mark_up("c")
    assert status(b, "c") == "healthy"
    if keyed:
        assert b.pick_many(keys) == before


def test_panic_threshold_zero_with_every_node_down_picks_nothing() -> None:
    b = liblb.Balancer("ring", NODES, panic_threshold=0)
    for node in NODES:
        b.mark_down(node)
    assert b.panic is False
    with pytest.raises(liblb.NoUsableNodesError) as raised:
        b.pick("k")
    assert raised.value.code == "LB_NO_USABLE_NODES"
    assert isinstance(raised.value, liblb.NoNodesError)
    with pytest.raises(liblb.NoUsableNodesError):
        b.attempts("k", 3)
    b.mark_up("b")
    assert b.pick("k") == "b"
    assert b.attempts("k", 3) == ["b"]


def test_health_calls_reject_unknown_ids_and_change_nothing() -> None:
    b = liblb.Balancer("random", NODES)
    with pytest.raises(liblb.UnknownNodeError):
        b.mark_down("zz")
    with pytest.raises(liblb.UnknownNodeError):
        b.mark_up("zz")
    with pytest.raises(TypeError):
        b.mark_down(3)  # type: ignore[arg-type]
    assert all(s["status"] == "healthy" for s in b.stats())


def test_slow_start_and_bounded_load_options() -> None:
    b = liblb.Balancer(
        "weighted_random",
        ["a", "b"],
        slow_start_window_ms=60_000,
        slow_start_aggression=1.5,
        min_weight_percent=20,
    )
    b.add("c")
    row = next(s for s in b.stats() if s["id"] == "c")
    assert row["status"] == "warming" and row["until"] is not None
    counts = {n: 0 for n in ["a", "b", "c"]}
    for node in b.pick_n(30_000):
        counts[node] += 1
    # c starts at min_weight_percent: 0.2 / 2.2 of picks (~2,727); 99.9% bounds ~ +-160.
    assert 2_400 < counts["c"] < 3_100, counts
    ring = liblb.Balancer("ring", NODES, hash_balance_factor=150)
    leases = [ring.acquire("hot") for _ in range(40)]
    assert max(s["in_flight"] for s in ring.stats()) <= 15  # ceil(1.5 * 40 / 4)
    for lease in leases:
        lease.cancel()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_ejection_percent", 101),
        ("panic_threshold", 101),
        ("hash_balance_factor", 50),
        ("slow_start_aggression", 0.0),
        ("slow_start_aggression", float("nan")),
        ("max_ejection_time_ms", 1),
    ],
)
def test_bad_health_options(name: str, value: object) -> None:
    with pytest.raises(liblb.InvalidOptionValueError, match=name):
        liblb.Balancer("random", NODES, **{name: value})  # type: ignore[arg-type]


def test_float_only_where_the_option_takes_numbers() -> None:
    with pytest.raises(TypeError, match="float"):
        liblb.Balancer("random", NODES, consecutive_failures=2.5)  # type: ignore[arg-type]
