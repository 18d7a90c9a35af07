"""Leases, report, stats, pick_hash and the generic options: the binding's conversions.

What the numbers mean (which node a load-aware algorithm prefers, how the latency estimate
moves) is the core's and is tested there and by the shared vectors; here: every Python form
reaches the core, in-flight counts come back to zero, and bad input raises the right error.
"""

from __future__ import annotations

import datetime
import gc
import threading

import pytest

import liblb

NODES = ["a", "b", "c"]


def in_flight(b: liblb.Balancer) -> dict[str, int]:
    return {s["id"]: s["in_flight"] for s in b.stats()}


def counts(b: liblb.Balancer, node: str) -> tuple[int, int]:
    row = next(s for s in b.stats() if s["id"] == node)
    return row["requests"], row["failures"]


def test_with_lease_finishes_as_success() -> None:
    b = liblb.Balancer("least_request", NODES, seed=1)
    with b.acquire() as node:
        assert isinstance(node, str) and node in NODES
        assert in_flight(b)[node] == 1
    assert in_flight(b) == dict.fromkeys(NODES, 0)
    assert counts(b, node) == (1, 0)
    row = next(s for s in b.stats() if s["id"] == node)
    assert isinstance(row["latency"], float) and row["latency"] >= 0


def test_exception_in_with_is_a_failure_and_propagates() -> None:
    b = liblb.Balancer("least_connections", NODES)
    node = ""
    with pytest.raises(KeyError):
        with b.acquire() as node:
            raise KeyError("boom")
    assert counts(b, node) == (1, 1)
    assert in_flight(b) == dict.fromkeys(NODES, 0)


def test_finish_with_latency_forms() -> None:
    b = liblb.Balancer("peak_ewma", NODES, seed=3)
    lease = b.acquire()
    assert lease.id in NODES and lease.weight == 1 and not lease.done
    lease.finish(ok=True, latency=0.012)
    assert lease.done
    row = next(s for s in b.stats() if s["id"] == lease.id)
    assert row["requests"] == 1 and row["failures"] == 0
    assert row["latency"] == pytest.approx(0.012, rel=1e-3)
    other = b.acquire()
    other.finish(ok=False, latency=datetime.timedelta(milliseconds=5))
    assert counts(b, other.id)[1] == 1
    b.acquire().finish(ok=True, latency=0)  # an int number of seconds
    assert in_flight(b) == dict.fromkeys(NODES, 0)


def test_finishing_twice_raises() -> None:
    b = liblb.Balancer("round_robin", NODES)
    lease = b.acquire()
    lease.finish()
    with pytest.raises(liblb.LeaseFinishedError) as info:
        lease.finish()
    assert info.value.code == "LB_LEASE_FINISHED" == liblb.LeaseFinishedError.code
    assert isinstance(info.value, liblb.Error)
    with pytest.raises(liblb.LeaseFinishedError):
        lease.cancel()
    assert counts(b, lease.id) == (1, 0)


def test_finish_inside_with_is_kept() -> None:
    b = liblb.Balancer("round_robin", NODES)
    with b.acquire() as node:
        pass
    lease = b.acquire()
    with lease:
        lease.finish(ok=False, latency=0.001)
    assert counts(b, lease.id) == (1, 1)
    assert counts(b, node) == (1, 0)


@pytest.mark.parametrize("latency", [-0.001, float("nan"), float("inf")])
def test_bad_latency_value(latency: float) -> None:
    b = liblb.Balancer("round_robin", NODES)
    lease = b.acquire()
    with pytest.raises(ValueError, match="latency"):
        lease.finish(latency=latency)
    assert not lease.done  # a failed finish leaves the lease open
    lease.finish()


def test_bad_latency_type() -> None:
    b = liblb.Balancer("round_robin", NODES)
    with pytest.raises(TypeError, match="str"):
        b.acquire().finish(latency="1s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        b.report("a", ok=True, latency="1s")  # type: ignore[arg-type]


def test_cancel_and_gc_release_in_flight() -> None:
    b = liblb.Balancer("least_connections", NODES)
    lease = b.acquire()
    lease.cancel()
    assert in_flight(b) == dict.fromkeys(NODES, 0)
    assert counts(b, lease.id) == (0, 0)
    held = b.acquire()
    assert sum(in_flight(b).values()) == 1
    del held
    gc.collect()
    assert in_flight(b) == dict.fromkeys(NODES, 0)
    assert all(s["requests"] == 0 for s in b.stats())


def test_node_removed_mid_lease() -> None:
    b = liblb.Balancer("least_request", NODES, seed=5)
    lease = b.acquire()
    b.remove(lease.id)
    lease.finish(ok=True, latency=0.002)  # harmless: the removed node is just not listed
    assert [s["id"] for s in b.stats()] == [n for n in NODES if n != lease.id]
    assert all(s["in_flight"] == 0 for s in b.stats())


def test_acquire_errors() -> None:
    with pytest.raises(liblb.KeyRequiredError):
        liblb.Balancer("ring", NODES).acquire()
    with pytest.raises(liblb.NoNodesError):
        liblb.Balancer("least_request", []).acquire()
    with pytest.raises(TypeError):
        liblb.Balancer("ring", NODES).acquire(1)  # type: ignore[arg-type]
    ring = liblb.Balancer("ring", NODES)
    with ring.acquire(b"user-1") as node:
        assert node == ring.pick(b"user-1")


def test_report_and_stats() -> None:
    b = liblb.Balancer("peak_ewma", [("a", 2), "b"], seed=1)
    assert b.stats() == [
        {"id": "a", "weight": 2, "locality": "", "priority": 0, "in_flight": 0, "requests": 0, "failures": 0, "latency": None,
         "status": "healthy", "until": None, "remaining": None},
        {"id": "b", "weight": 1, "locality": "", "priority": 0, "in_flight": 0, "requests": 0, "failures": 0, "latency": None,
         "status": "healthy", "until": None, "remaining": None},
    ]
    b.report("a", ok=True, latency=0.02)
    b.report("a", ok=False, latency=datetime.timedelta(milliseconds=20))
    assert counts(b, "a") == (2, 1)
    assert counts(b, "b") == (0, 0)
    with pytest.raises(liblb.UnknownNodeError):
        b.report("zz", ok=True, latency=0.01)
    with pytest.raises(TypeError, match="a success needs its latency"):
        b.report("a", ok=True)


def test_pick_hash_matches_vectors_algorithms() -> None:
    assert set(liblb.HASH_ALGORITHMS) <= set(liblb.KEYED_ALGORITHMS)
    for algorithm in liblb.HASH_ALGORITHMS:
        b = liblb.Balancer(algorithm, NODES)
        for h in (0, 1, 2**63, 2**64 - 1):
            node = b.pick_hash(h)
            order = b.attempts_hash(h)
            assert order[0] == node and sorted(order) == sorted(NODES)
            assert b.attempts_hash(h, 2) == order[:2]
    for algorithm in set(liblb.ALGORITHMS) - set(liblb.HASH_ALGORITHMS):
        b = liblb.Balancer(algorithm, NODES)
        with pytest.raises(liblb.HashUnsupportedError) as info:
            b.pick_hash(7)
        assert info.value.code == "LB_HASH_UNSUPPORTED" == liblb.HashUnsupportedError.code
        with pytest.raises(liblb.HashUnsupportedError):
            b.attempts_hash(7)


@pytest.mark.parametrize("h", [-1, 2**64])
def test_pick_hash_out_of_range(h: int) -> None:
    b = liblb.Balancer("jump", NODES)
    with pytest.raises(ValueError, match="2\\*\\*64") as info:
        b.pick_hash(h)
    assert not isinstance(info.value, liblb.Error)
    with pytest.raises(TypeError):
        b.pick_hash("7")  # type: ignore[arg-type]


def test_every_core_option_is_accepted() -> None:
    values = {
        "seed": 1, "vnodes": 10, "hash": "xxh3", "choice_count": 3, "decay_ms": 500,
        "initial_latency_ms": 5, "table_size": 251, "min_ring_size": 64, "max_ring_size": 128,
        "max_ring_points": 65536,
        "consecutive_failures": 3, "base_ejection_time_ms": 100, "max_ejection_time_ms": 1000,
        "max_ejection_percent": 50, "panic_threshold": 30, "slow_start_window_ms": 2000,
        "slow_start_aggression": 1.5, "min_weight_percent": 20, "hash_balance_factor": 150,
        "thread_rounds": 2, "failure_penalty_ms": 250, "max_retry_after_ms": 30000,
        "interval_ms": 5000, "enforcing_success_rate": 90, "success_rate_minimum_hosts": 3,
        "success_rate_request_volume": 50, "success_rate_stdev_factor": 1500,
        "enforcing_failure_percentage": 10, "failure_percentage_threshold": 80,
        "failure_percentage_minimum_hosts": 4, "failure_percentage_request_volume": 40,
        "overprovisioning_factor": 120, "zone_aware_min_cluster_size": 3,
        "zone_aware_routing_enabled": 80, "zone_aware_by_weight": 1,
        "blackout_period_ms": 5000, "weight_expiration_period_ms": 60000,
        "weight_update_period_ms": 500, "error_utilization_penalty": 0.25,
        "probe_pool_size": 8, "q_rif": 0.9, "probe_rate": 2.5, "probe_reuse": 3,
        "max_probe_age_ms": 2000, "probe_remove_rate": 0.5,
        "subset": "aperture", "subset_size": 2, "client_index": 1, "client_count": 4,
        "subset_seed": 5,
    }
    assert set(values) == set(liblb.OPTIONS), "a core option this test does not set"
    unsubset = {k: v for k, v in values.items() if k != "subset"}
    for algorithm in liblb.ALGORITHMS:
        if algorithm in liblb.KEYED_ALGORITHMS:
            # Subsetting is for unkeyed algorithms: a keyed one refuses `subset`, nothing else.
            with pytest.raises(liblb.InvalidOptionValueError, match="subset"):
                liblb.Balancer(algorithm, NODES, **values)  # type: ignore[arg-type]
            b = liblb.Balancer(algorithm, NODES, **unsubset)  # type: ignore[arg-type]
        else:
            b = liblb.Balancer(algorithm, NODES, **values)  # type: ignore[arg-type]
        assert len(b) == 3
    # Integer options also take decimal text, as in Node and the core.
    a = liblb.Balancer("maglev", NODES, table_size="251")
    c = liblb.Balancer("maglev", NODES, table_size=251)
    assert [a.pick(str(i)) for i in range(50)] == [c.pick(str(i)) for i in range(50)]


def test_option_errors_come_from_the_core() -> None:
    with pytest.raises(liblb.UnknownOptionError) as info:
        liblb.Balancer("ring", NODES, colour=1)  # type: ignore[call-arg]
    assert "colour" in str(info.value) and "max_ring_size" in str(info.value)
    with pytest.raises(liblb.UnknownOptionError):
        liblb.Balancer("ring", NODES, colour=None)  # type: ignore[call-arg]
    with pytest.raises(liblb.InvalidOptionValueError, match="choice_count"):
        liblb.Balancer("least_request", NODES, choice_count=1)
    with pytest.raises(liblb.InvalidOptionValueError, match="table_size"):
        liblb.Balancer("maglev", NODES, table_size=100)
    with pytest.raises(liblb.InvalidOptionValueError, match="decay_ms"):
        liblb.Balancer("peak_ewma", NODES, decay_ms=2**64)
    with pytest.raises(TypeError, match="float"):
        liblb.Balancer("peak_ewma", NODES, decay_ms=1.5)  # type: ignore[arg-type]


def test_leases_from_many_threads() -> None:
    b = liblb.Balancer("least_request", [f"n{i}" for i in range(8)], seed=9)
    rounds, workers = 500, 4
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(rounds):
                if i % 3 == 0:
                    b.acquire().cancel()
                else:
                    with b.acquire():
                        pass
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = b.stats()
    assert all(s["in_flight"] == 0 for s in stats)
    finished = sum(1 for i in range(rounds) if i % 3 != 0) * workers
    assert sum(s["requests"] for s in stats) == finished


def test_repr_evaluates_back_with_every_option() -> None:
    values = {
        "seed": 1, "vnodes": 10, "hash": "xxh3", "choice_count": 3, "decay_ms": 500,
        "initial_latency_ms": 5, "table_size": 251, "min_ring_size": 64, "max_ring_size": 128,
        "max_ring_points": 65536,
        "consecutive_failures": 3, "base_ejection_time_ms": 100, "max_ejection_time_ms": 1000,
        "max_ejection_percent": 50, "panic_threshold": 30, "slow_start_window_ms": 2000,
        "slow_start_aggression": 1.5, "min_weight_percent": 20, "hash_balance_factor": 150,
        "thread_rounds": 2, "failure_penalty_ms": 250, "max_retry_after_ms": 30000,
        "interval_ms": 5000, "enforcing_success_rate": 90, "success_rate_minimum_hosts": 3,
        "success_rate_request_volume": 50, "success_rate_stdev_factor": 1500,
        "enforcing_failure_percentage": 10, "failure_percentage_threshold": 80,
        "failure_percentage_minimum_hosts": 4, "failure_percentage_request_volume": 40,
        "overprovisioning_factor": 120, "zone_aware_min_cluster_size": 3,
        "zone_aware_routing_enabled": 80, "zone_aware_by_weight": 1,
        "blackout_period_ms": 5000, "weight_expiration_period_ms": 60000,
        "weight_update_period_ms": 500, "error_utilization_penalty": 0.25,
        "probe_pool_size": 8, "q_rif": 0.9, "probe_rate": 2.5, "probe_reuse": 3,
        "max_probe_age_ms": 2000, "probe_remove_rate": 0.5,
        "subset": "random", "subset_size": 2, "client_index": 1, "client_count": 4,
        "subset_seed": 5,
    }
    assert set(values) == set(liblb.OPTIONS), "a core option this test does not set"
    # maglev (keyed) takes every option but `subset`; round_robin takes them all.
    keyed = {k: v for k, v in values.items() if k != "subset"}
    b = liblb.Balancer("maglev", NODES, **keyed)  # type: ignore[arg-type]
    text = repr(b)
    for name, value in keyed.items():
        assert f"{name}={value!r}" in text, text
    again = eval(text, {"Balancer": liblb.Balancer})
    assert repr(again) == text
    assert [again.pick(str(i)) for i in range(50)] == [b.pick(str(i)) for i in range(50)]
    b = liblb.Balancer("round_robin", NODES, **values)  # type: ignore[arg-type]
    text = repr(b)
    for name, value in values.items():
        assert f"{name}={value!r}" in text, text
    again = eval(text, {"Balancer": liblb.Balancer})
    assert repr(again) == text
    assert again.subset() == b.subset() and len(b.subset()) == 2


def test_lease_tag_is_the_nodes_tag() -> None:
    top = 2**64 - 1
    b = liblb.Balancer("ring", [("a", 1, 7), ("b", 2, top), ("c", 1), "d"], vnodes=40)
    tags = {"a": 7, "b": top, "c": 0, "d": 0}
    seen = set()
    for i in range(400):
        lease = b.acquire(f"k{i}")
        assert lease.tag == tags[lease.id], lease.id
        seen.add(lease.id)
        lease.finish()
        assert lease.tag == tags[lease.id]  # still readable once ended
    assert seen == set(tags)
    # add takes a tag (positional or by name); update and set_weight keep each node's own.
    rr = liblb.Balancer("round_robin", [])
    rr.add("x", 1, 42)
    with rr.acquire() as node:
        assert node == "x"
    assert rr.acquire().tag == 42
    rr.update([("y", 3, 9)])
    rr.set_weight("y", 1)
    assert rr.acquire().tag == 9
    rr.add("z", tag=5)
    assert {rr.acquire().tag for _ in range(4)} == {9, 5}
    # A 3-item list works like the tuple.
    listed = liblb.Balancer("round_robin", [["l", 1, 3]])  # type: ignore[list-item]
    assert listed.acquire().tag == 3
    # A mapping gives no tags.
    assert liblb.Balancer("round_robin", {"m": 2}).acquire().tag == 0


@pytest.mark.parametrize("tag", [-1, 2**64])
def test_tag_out_of_range(tag: int) -> None:
    b = liblb.Balancer("round_robin", ["a"])
    with pytest.raises(ValueError, match="tag must be an integer from 0 to 2\\*\\*64-1"):
        b.add("x", 1, tag)
    with pytest.raises(ValueError, match="tag"):
        b.update([("x", 1, tag)])
    with pytest.raises(ValueError, match="tag"):
        liblb.Balancer("round_robin", [("x", 1, tag)])
    assert b.nodes() == [("a", 1)]
