"""Outcomes that say why (issue 21): failure kinds, an overloaded node's retry-after, the
failure penalty in the latency estimate, and the outcomes no call may accept.

The policies are tested in the core (core/tests/outcomes.rs, on an injected clock); here every
argument form reaches it, the answers come back in Python form, and every refused call leaves
the balancer as it was and working.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

import liblb

NODES = ["a", "b", "c", "d"]


def row(b: liblb.Balancer, node: str) -> Any:
    return next(s for s in b.stats() if s["id"] == node)


def test_failure_kinds_are_the_cores() -> None:
    assert liblb.FAILURE_KINDS == ("error", "timeout", "overloaded")
    assert issubclass(liblb.InvalidOutcomeError, liblb.Error)
    assert issubclass(liblb.InvalidOutcomeError, ValueError)
    assert liblb.InvalidOutcomeError.code == "LB_INVALID_OUTCOME"


@pytest.mark.parametrize("retry_after", [0.4, datetime.timedelta(milliseconds=400)])
def test_an_overloaded_report_pauses_the_node_until_its_retry_after(retry_after: Any) -> None:
    b = liblb.Balancer("round_robin", NODES)
    before = b.now()
    b.report("a", ok=False, kind="overloaded", retry_after=retry_after)
    a = row(b, "a")
    assert a["status"] == "overloaded"
    assert before + 0.4 <= a["until"] <= b.now() + 0.4
    assert 0 < a["remaining"] <= 0.4
    assert (a["requests"], a["failures"]) == (1, 1)
    # No latency given: the failure penalty (failure_penalty_ms, 5 s by default).
    assert a["latency"] == pytest.approx(5.0)
    assert "a" not in b.pick_n(60)
    time.sleep(0.5)  # past the pause: back by itself
    a = row(b, "a")
    assert (a["status"], a["until"], a["remaining"]) == ("healthy", None, None)
    assert b.pick_n(8).count("a") == 2


def test_a_lease_finishes_with_a_kind_and_a_retry_after() -> None:
    b = liblb.Balancer("round_robin", NODES)
    lease = b.acquire()
    lease.finish(ok=False, kind="overloaded", retry_after=5.0)
    assert lease.done
    a = row(b, lease.id)
    assert a["status"] == "overloaded" and a["in_flight"] == 0
    assert 4.0 < a["remaining"] <= 5.0
    # The retry-after (5 s) is no longer than the penalty (5 s): the sample is 5 s.
    assert a["latency"] == pytest.approx(5.0)
    other = b.acquire()
    other.finish(ok=False, kind="timeout")  # latency measured since acquire
    assert row(b, other.id)["failures"] == 1
    assert row(b, other.id)["status"] == "healthy"


def test_errors_and_timeouts_extend_the_streak_and_overloaded_answers_do_not() -> None:
    b = liblb.Balancer("round_robin", NODES, max_ejection_percent=50)
    for _ in range(4):
        b.report("a", ok=False, kind="error", latency=0.001)
    b.report("a", ok=False, kind="overloaded")
    b.report("a", ok=False, kind="overloaded", latency=0.002)
    assert row(b, "a")["status"] == "healthy"
    b.report("a", ok=False, kind="timeout")
    assert row(b, "a")["status"] == "ejected"
    # A success breaks the streak; ok=False without a kind is an error.
    for _ in range(4):
        b.report("b", ok=False, kind="timeout", latency=1.0)
    b.report("b", ok=True, latency=0.001)
    b.report("b", ok=False)
    assert row(b, "b")["status"] == "healthy"
    assert (row(b, "b")["requests"], row(b, "b")["failures"]) == (6, 5)


def test_the_failure_penalty_and_how_to_turn_it_off() -> None:
    b = liblb.Balancer("peak_ewma", ["fast", "slow"])
    b.report("fast", ok=True, latency=0.1)
    b.report("fast", ok=False, latency=0.001)
    b.report("slow", ok=False, kind="timeout", latency=9.0)
    assert row(b, "fast")["latency"] == pytest.approx(5.0)
    assert row(b, "slow")["latency"] == pytest.approx(9.0)
    off = liblb.Balancer("peak_ewma", ["a", "b"], failure_penalty_ms=0)
    off.report("a", ok=False, latency=0.001)
    off.report("b", ok=False, kind="timeout")
    assert row(off, "a")["latency"] == pytest.approx(0.001)
    assert row(off, "b")["latency"] is None
    capped = liblb.Balancer("round_robin", NODES, max_retry_after_ms=1000)
    capped.report("a", ok=False, kind="overloaded", retry_after=3600)
    assert 0 < row(capped, "a")["remaining"] <= 1.0
    paused_off = liblb.Balancer("round_robin", NODES, max_retry_after_ms=0)
    paused_off.report("a", ok=False, kind="overloaded", retry_after=5)
    assert row(paused_off, "a")["status"] == "healthy"


def snapshot(b: liblb.Balancer) -> list[Any]:
    return [(s["id"], s["requests"], s["failures"], s["latency"], s["status"]) for s in b.stats()]


BAD_OUTCOMES: list[tuple[dict[str, Any], str]] = [
    ({"ok": False, "kind": "busy"}, 'unknown failure kind "busy"; valid kinds: error, timeout, overloaded'),
    ({"ok": True, "kind": "timeout", "latency": 0.001}, "kind=\"timeout\" is a failure kind: pass ok=False"),
    ({"ok": True, "latency": 0.001, "retry_after": 1.0}, "retry_after is for failures"),
    ({"ok": False, "kind": "overloaded", "retry_after": -1.0}, "retry_after must be a finite number of seconds >= 0, got -1.0"),
    ({"ok": False, "kind": "overloaded", "retry_after": float("nan")}, "retry_after must be"),
    ({"ok": False, "kind": "overloaded", "retry_after": float("inf")}, "retry_after must be"),
    ({"ok": False, "retry_after": datetime.timedelta(seconds=-1)}, "retry_after must be"),
    ({"ok": False, "latency": -0.001}, "latency must be a finite number of seconds >= 0"),
    ({"ok": True, "latency": float("nan")}, "latency must be"),
]


@pytest.mark.parametrize("outcome,message", BAD_OUTCOMES)
def test_bad_outcomes_raise_invalid_outcome_and_change_nothing(
    outcome: dict[str, Any], message: str
) -> None:
    b = liblb.Balancer("round_robin", NODES)
    b.report("a", ok=True, latency=0.002)
    before = snapshot(b)
    with pytest.raises(liblb.InvalidOutcomeError, match=message) as info:
        b.report("a", **outcome)
    assert info.value.code == "LB_INVALID_OUTCOME"
    lease = b.acquire()
    with pytest.raises(liblb.InvalidOutcomeError, match=message):
        lease.finish(**outcome)
    assert not lease.done, "a refused finish leaves the lease open"
    assert [s["in_flight"] for s in b.stats()] == [1, 0, 0, 0]
    assert snapshot(b) == before
    lease.finish(ok=True, latency=0.001)
    assert b.pick_n(4) == ["b", "c", "d", "a"]


def test_wrong_types_and_a_success_without_latency_are_type_errors() -> None:
    b = liblb.Balancer("round_robin", NODES)
    with pytest.raises(TypeError, match="kind must be str, got int"):
        b.report("a", ok=False, kind=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retry_after must be float seconds"):
        b.report("a", ok=False, kind="overloaded", retry_after="5s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a success needs its latency"):
        b.report("a", ok=True)
    with pytest.raises(liblb.UnknownNodeError):
        b.report("zz", ok=False, kind="timeout")
    assert all(s["requests"] == 0 for s in b.stats())
    b.report("a", ok=False)  # a failure needs no latency
    assert row(b, "a")["failures"] == 1
