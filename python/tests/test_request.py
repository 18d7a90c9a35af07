"""Requests (issue 21): `Balancer.request` as an iterator of leases, `call` and `acall`.

Every expectation here is either the core's own answer through another entry point
(`attempts` for the retry order, `stats` for what was counted) or a property of the policy
(the stop reason a given sequence of outcomes must give).
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from typing import Any

import pytest

import liblb


def ring(seed: int = 7, **options: Any) -> liblb.Balancer:
    return liblb.Balancer("ring", ["a", "b", "c", "d", "e"], seed=seed, **options)


def counted(b: liblb.Balancer) -> dict[str, tuple[int, int, int]]:
    """(requests, failures, in_flight) per node."""
    return {s["id"]: (s["requests"], s["failures"], s["in_flight"]) for s in b.stats()}


def test_a_success_ends_the_request_after_one_attempt() -> None:
    b = ring()
    req = b.request("user-1")
    ids = []
    for lease in req:
        ids.append(lease.id)
        lease.finish(ok=True)
    assert ids == [b.pick("user-1")]
    assert (req.attempts, req.stopped, req.winner, req.over, req.decision) == (
        1,
        None,
        1,
        True,
        "done",
    )
    assert counted(b)[ids[0]] == (1, 0, 0)


def test_retries_go_to_distinct_nodes_in_the_keys_retry_order() -> None:
    b = ring()
    req = b.request("user-2", max_attempts=4)
    ids = []
    backoffs = []
    for lease in req:
        ids.append(lease.id)
        lease.finish(ok=False)
        backoffs.append(req.backoff())
    assert ids == b.attempts("user-2", 4)
    assert req.stopped == "max_attempts" and req.winner is None and req.decision == "stop"
    # Envoy's jittered backoff with the defaults: retry n waits under min(25 ms * 2^(n-1), 250 ms).
    for n, delay in enumerate(backoffs[:-1], start=1):
        assert 0 <= delay < min(0.025 * 2 ** (n - 1), 0.25)
    assert all(counted(b)[i] == (1, 1, 0) for i in ids)


def test_the_second_attempt_succeeds() -> None:
    b = ring()
    req = b.request("k")
    for lease in req:
        lease.finish(ok=req.attempts == 2)
    assert req.winner == 2 and req.stopped is None and req.attempts == 2


@pytest.mark.parametrize(
    ("options", "kind", "stop"),
    [
        ({"retry_on": ["timeout"]}, "error", "not_retryable"),
        ({"retry_on": []}, "timeout", "not_retryable"),
        ({"max_attempts": 1}, "error", "max_attempts"),
        ({"max_attempts": 100}, "error", "no_more_nodes"),
        ({"deadline": 1e-9}, "error", "deadline"),
        ({"deadline": datetime.timedelta(microseconds=0)}, "timeout", "deadline"),
        ({"budget": liblb.RetryBudget(min_per_sec=0, retry_percent=0)}, "error", "budget"),
        ({"budget": liblb.RetryThrottle(max_tokens=1, token_ratio=0.1)}, "error", "budget"),
    ],
)
def test_stop_reasons(options: dict[str, Any], kind: Any, stop: str) -> None:
    b = ring()
    req = b.request("k", **options)
    for lease in req:
        lease.finish(ok=False, kind=kind)
    assert req.stopped == stop
    assert stop in liblb.STOP_REASONS
    assert req.attempts == (5 if stop == "no_more_nodes" else 1)


def test_an_adaptive_throttle_rejects_before_any_attempt() -> None:
    throttle = liblb.AdaptiveThrottle()
    for _ in range(400):  # requests the backends never accepted
        throttle.admit(now=0.0, random=0)
    b = ring(budget=throttle)
    stops = []
    for _ in range(20):
        req = b.request("k")
        for lease in req:
            lease.finish(ok=True)
        stops.append(req.stopped)
    assert "throttled" in stops
    assert sum(r for r, _, _ in counted(b).values()) == stops.count(None)


def test_an_overloaded_answer_paces_the_retry_by_its_retry_after() -> None:
    b = ring()
    req = b.request("k")
    first = next(req)
    first.finish(ok=False, kind="overloaded", retry_after=0.5)
    assert req.decision == "retry" and req.backoff() == 0.5
    second = next(req)
    assert second.id != first.id
    second.finish(ok=True)


def test_a_hedge_wins_and_the_cancelled_loser_counts_nothing() -> None:
    b = ring()
    req = b.request("k", hedge=liblb.Hedging.after(0.0))
    first = req.attempt()
    assert first is not None and req.hedge_after() == 0.0
    hedge = req.hedge()
    assert hedge is not None and hedge.id == b.attempts("k", 2)[1]
    hedge.finish(ok=True)
    first.cancel()
    assert req.winner == 2 and req.stopped is None and req.over
    stats = counted(b)
    assert stats[first.id] == (0, 0, 0)
    assert stats[hedge.id] == (1, 0, 0)


def test_next_refuses_while_the_previous_attempt_is_open() -> None:
    b = ring()
    req = b.request("k")
    lease = next(req)
    with pytest.raises(liblb.AttemptOpenError) as err:
        next(req)
    assert err.value.code == "LB_ATTEMPT_OPEN"
    assert req.attempts == 1
    lease.finish(ok=True)
    assert list(req) == []


def test_a_lease_as_a_context_manager_reports_to_its_request() -> None:
    b = ring()
    req = b.request("k", max_attempts=2)
    ids = []
    for lease in req:
        with pytest.raises(ConnectionError), lease as node:
            ids.append(node)
            raise ConnectionError
    assert req.stopped == "max_attempts" and ids == b.attempts("k", 2)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_attempts": 0}, liblb.InvalidOptionValueError),
        ({"max_attempts": 101}, liblb.InvalidOptionValueError),
        ({"max_attempts": -1}, liblb.InvalidOptionValueError),
        ({"max_attempts": 2**70}, liblb.InvalidOptionValueError),
        ({"max_attempts": "3"}, TypeError),
        ({"max_attempts": 3.0}, TypeError),
        ({"retry_on": ["5xx"]}, liblb.InvalidOutcomeError),
        ({"retry_on": "error"}, TypeError),
        ({"retry_on": [1]}, TypeError),
        ({"retry_on": 5}, TypeError),
        ({"deadline": -1.0}, liblb.InvalidOutcomeError),
        ({"deadline": float("nan")}, liblb.InvalidOutcomeError),
        ({"deadline": "1s"}, TypeError),
        ({"budget": 5}, TypeError),
        ({"hedge": 0.1}, TypeError),
    ],
)
def test_bad_request_options_raise_and_leave_the_balancer_unchanged(
    options: dict[str, Any], error: type[Exception]
) -> None:
    b = ring()
    before = (b.nodes(), counted(b), b.attempts("k"))
    with pytest.raises(error):
        b.request("k", **options)
    with pytest.raises(TypeError):
        b.request(5)  # type: ignore[arg-type]
    assert (b.nodes(), counted(b), b.attempts("k")) == before
    assert b.call("k", lambda node: node) == b.pick("k")


def test_bad_hedging_and_budget_arguments() -> None:
    with pytest.raises(liblb.InvalidOptionValueError):
        liblb.Hedging.percentile(1.0)
    with pytest.raises(liblb.InvalidOptionValueError):
        liblb.Hedging.percentile(0.0)
    with pytest.raises(TypeError):
        liblb.Hedging.after("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        liblb.Balancer("ring", ["a"], budget="x")  # type: ignore[arg-type]
    budget = liblb.RetryBudget()
    b = liblb.Balancer("ring", ["a", "b"], budget=budget)
    assert b.budget is budget
    with pytest.raises(TypeError):
        b.budget = 3  # type: ignore[assignment]
    assert b.budget is budget
    b.budget = None
    assert b.budget is None
    b.budget = liblb.RetryBudget(min_per_sec=0, retry_percent=0)
    req = b.request("k")
    for lease in req:
        lease.finish(ok=False)
    assert req.stopped == "budget"


def test_a_keyed_request_without_key_raises_at_its_attempt_and_stays_usable() -> None:
    b = ring()
    req = b.request()
    with pytest.raises(liblb.KeyRequiredError):
        next(req)
    assert req.attempts == 0 and not req.over
    with pytest.raises(liblb.KeyRequiredError):
        req.attempt()
    assert sum(r for r, _, _ in counted(b).values()) == 0


def test_call_retries_failures_and_returns_the_first_success() -> None:
    b = ring()
    tried: list[str] = []

    def send(node: str) -> str:
        tried.append(node)
        if len(tried) < 3:
            raise ConnectionError(node)
        return "answer from " + node

    assert b.call("k", send) == "answer from " + b.attempts("k", 3)[2]
    assert tried == b.attempts("k", 3)


def test_call_maps_exceptions_to_failure_kinds() -> None:
    b = ring()

    def timeout(node: str) -> None:
        raise TimeoutError(node)

    with pytest.raises(liblb.RequestFailedError) as err:
        b.call("k", timeout, retry_on=["error"])
    assert err.value.stop == "not_retryable" and err.value.attempts == 1
    assert isinstance(err.value.__cause__, TimeoutError)
    assert isinstance(err.value, liblb.Error)

    def refuse(node: str) -> None:
        raise liblb.Overloaded(retry_after=30.0)

    first = b.attempts("k", 1)[0]
    with pytest.raises(liblb.RequestFailedError) as err:
        b.call("k", refuse, max_attempts=1)
    assert err.value.stop == "max_attempts"
    (stats,) = [s for s in b.stats() if s["id"] == first]
    assert stats["status"] == "overloaded"

    def boom(node: str) -> None:
        raise KeyError(node)

    with pytest.raises(liblb.RequestFailedError) as err:
        b.call("other", boom, retry_on=["timeout", "overloaded"])
    assert err.value.stop == "not_retryable" and isinstance(err.value.__cause__, KeyError)


def test_call_sleeps_the_backoff_between_attempts() -> None:
    b = ring()
    clock: list[float] = []

    def send(node: str) -> str:
        clock.append(b.now())
        if len(clock) == 1:
            raise liblb.Overloaded(retry_after=0.05)
        return node

    b.call("k", send)
    assert clock[1] - clock[0] >= 0.05


def test_acall_retries_and_hedges_with_the_loser_cancelled() -> None:
    b = ring()
    order = b.attempts("k", 3)
    cancelled: list[str] = []

    async def send(node: str) -> str:
        if node == order[0]:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(node)
                raise
        return node

    async def main() -> str:
        return await b.acall("k", send, hedge=liblb.Hedging.after(0.01))

    assert asyncio.run(main()) == order[1]
    assert cancelled == [order[0]]
    stats = counted(b)
    assert stats[order[0]] == (0, 0, 0)
    assert stats[order[1]] == (1, 0, 0)

    async def failing(node: str) -> str:
        raise ConnectionError(node)

    async def gives_up() -> str:
        return await b.acall("j", failing, max_attempts=2)

    with pytest.raises(liblb.RequestFailedError) as err:
        asyncio.run(gives_up())
    assert err.value.stop == "max_attempts" and err.value.attempts == 2


def test_requests_from_many_threads_count_every_attempt() -> None:
    b = liblb.Balancer("random", ["a", "b", "c"], seed=1)
    calls = 200

    def work() -> None:
        for i in range(calls):
            req = b.request(str(i), max_attempts=2)
            for lease in req:
                lease.finish(ok=req.attempts == 2)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = counted(b)
    assert sum(r for r, _, _ in stats.values()) == 4 * calls * 2
    assert sum(f for _, f, _ in stats.values()) == 4 * calls
    assert all(i == 0 for _, _, i in stats.values())


def test_a_request_lease_collected_unfinished_is_cancelled_through_its_request() -> None:
    import gc

    b = ring()
    req = b.request("k", max_attempts=2)
    lease = req.attempt()  # not next(req): the iterator keeps its last lease
    assert lease is not None
    first = lease.id
    del lease
    gc.collect()
    # The request no longer counts the collected attempt as out: a finished next attempt
    # decides as the only one (a stop at max_attempts, not a "wait" for the lost one).
    second = req.attempt()
    assert second is not None
    second.finish(ok=False)
    assert req.decision == "stop" and req.stopped == "max_attempts"
    # The cancelled attempt counted nothing and released its in-flight slot; only the
    # finished one counts, on another node (a request's attempts go to distinct nodes, an
    # abandoned one's included).
    stats = counted(b)
    assert stats[second.id] == (1, 1, 0) and second.id != first
    assert stats[first] == (0, 0, 0)
    assert sum(r for r, _, _ in stats.values()) == 1
