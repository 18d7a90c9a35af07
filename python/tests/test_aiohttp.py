"""liblb.aiohttp against real HTTP servers on loopback (the ``fleet`` fixture in conftest.py).

As test_httpx.py: expectations come from the balancer (a twin's picks, ``attempts(key)``,
``stats()``) and from what the servers saw. Each test runs its coroutine with asyncio.run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

import liblb
from liblb.aiohttp import Session

if TYPE_CHECKING:
    from conftest import Fleet, Tls

URL = "http://svc.internal"


def counted(b: liblb.Balancer) -> dict[str, tuple[int, int, int]]:
    """(requests, failures, in_flight) per node."""
    return {s["id"]: (s["requests"], s["failures"], s["in_flight"]) for s in b.stats()}


def run(b: liblb.Balancer, body: Callable[[Session], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        async with Session(b, **options) as lb:
            return await body(lb)

    return asyncio.run(main())


def test_each_request_goes_to_the_balancers_pick_and_keeps_its_host(fleet: Fleet) -> None:
    ids = [fleet.start("echo") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, seed=5)
    twin = liblb.Balancer("round_robin", ids, seed=5)

    async def body(lb: Session) -> list[Any]:
        answers = []
        for i in range(9):
            async with lb.get(f"{URL}:8080/p", params={"i": i}) as r:
                answers.append(await r.json())
        return answers

    answers = run(b, body)
    assert [a["node"] for a in answers] == [twin.pick() for _ in range(9)] == fleet.take_log()
    assert {a["host"] for a in answers} == {"svc.internal:8080"}
    assert counted(b) == {i: (3, 0, 0) for i in ids}


def test_retries_reach_distinct_nodes_in_the_keys_retry_order(fleet: Fleet) -> None:
    ids = [fleet.start(r) for r in ("500", "refused", "503", "echo")]
    b = liblb.Balancer("ring", ids, consecutive_failures=0)
    users = [f"user-{n}" for n in range(8)]

    async def body(lb: Session) -> None:
        for user in users:
            order = b.attempts(user, 4)
            reached = order[: order.index(fleet.ids["echo"][0]) + 1]
            async with lb.get(URL, headers={"x-user": user}) as r:
                assert (await r.json())["node"] == reached[-1]
            assert fleet.take_log() == [i for i in reached if i not in fleet.ids["refused"]]

    run(b, body, key=lambda call: call.headers["x-user"], retries=3)
    assert all(n == 0 for _, _, n in counted(b).values())
    assert counted(b)[fleet.ids["echo"][0]] == (8, 0, 0)
    # Retried answers were read and released: one connection per server for all of them.
    assert all(fleet.connections[i] == 1 for i in ids if i not in fleet.ids["refused"])


def test_an_erroring_node_is_ejected_and_an_overloaded_one_paused(fleet: Fleet) -> None:
    ids = [fleet.start(r) for r in ("echo", "echo", "echo", "503", "429")]
    b = liblb.Balancer("round_robin", ids, seed=3, consecutive_failures=2, max_ejection_percent=50)

    async def body(lb: Session) -> list[int]:
        statuses: list[int] = []
        while len(statuses) < 20 and [x["status"] for x in b.stats()][3:] != ["ejected", "overloaded"]:
            async with lb.get(URL) as r:
                statuses.append(r.status)
        return statuses

    statuses = run(b, body, retries=0)
    assert (statuses.count(503), statuses.count(429)) == (2, 1)
    remaining = b.stats()[4]["remaining"]
    assert remaining is not None and 25 < remaining <= 30  # Retry-After: 30


def test_the_lease_ends_with_the_block(fleet: Fleet) -> None:
    ids = [fleet.start("echo"), fleet.start("reset")]
    b = liblb.Balancer("round_robin", ids, seed=1)
    echo, reset = ids

    async def body(lb: Session) -> None:
        async with lb.get(URL) as r:
            assert counted(b)[f"{r.url.host}:{r.url.port}"] == (0, 0, 1)  # r.url: the node's
        with pytest.raises(aiohttp.ClientPayloadError):
            async with lb.get(URL) as r:  # the reset node: its body breaks off
                await r.read()
        with pytest.raises(KeyError):
            async with lb.get(URL) as r:  # the caller's own error: the node answered
                raise KeyError("mine")

    run(b, body)
    assert counted(b) == {echo: (2, 0, 0), reset: (1, 1, 0)}


@pytest.mark.parametrize(
    ("method", "options", "attempts"),
    [("GET", {}, 3), ("POST", {}, 1), ("POST", {"retry_methods": {"POST"}}, 3)],
)
def test_only_idempotent_requests_are_retried(
    fleet: Fleet, method: str, options: dict[str, Any], attempts: int
) -> None:
    ids = [fleet.start("500") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, consecutive_failures=0)

    async def body(lb: Session) -> None:
        async with lb.request(method, URL, data=b"x") as r:
            assert r.status == 500

    run(b, body, **options)
    log = fleet.take_log()
    assert len(log) == len(set(log)) == attempts


def test_a_node_id_that_is_not_an_address_is_a_clear_error() -> None:
    b = liblb.Balancer("round_robin", ["svc-a"])

    async def body(lb: Session) -> None:
        with pytest.raises(ValueError, match="node id 'svc-a' is not an address"):
            async with lb.get(URL):
                pass

    run(b, body)
    assert counted(b) == {"svc-a": (0, 0, 0)}


def test_tls_checks_the_logical_host_name(fleet: Fleet, tls: Tls) -> None:
    ids = [fleet.start("echo", tls=tls.server) for _ in range(2)]
    b = liblb.Balancer("round_robin", ids, seed=4)

    client_tls = tls.client()  # one context: aiohttp keys its pools by it

    async def body(lb: Session) -> list[Any]:
        answers = []
        for _ in range(4):
            async with lb.get("https://svc.internal/", ssl=client_tls) as r:
                answers.append(await r.json())
        return answers

    answers = run(b, body)
    assert sorted(a["node"] for a in answers) == sorted(ids * 2)
    assert {a["host"] for a in answers} == {"svc.internal"}
    assert tls.names == ["svc.internal"] * 2


def test_hedges_race_a_slow_node_and_the_loser_is_cancelled(fleet: Fleet) -> None:
    fleet.slow_seconds = 0.5
    slow, echo = fleet.start("slow"), fleet.start("echo")
    b = liblb.Balancer("round_robin", [slow, echo], seed=3, consecutive_failures=0)
    twin = liblb.Balancer("round_robin", [slow, echo], seed=3)

    async def body(lb: Session) -> list[str]:
        nodes = []
        for _ in range(4):
            async with lb.get(f"{URL}/") as r:
                nodes.append((await r.json())["node"])
        return nodes

    hedge = liblb.Hedging.after(0.05)
    nodes = run(b, body, hedge=hedge, retries=1)  # at most one hedge: the twin stays in step
    expected_log = fleet.hedged_log(twin, hedge, slow, 4)
    assert nodes == [echo] * 4 and fleet.take_log() == expected_log
    assert counted(b) == {slow: (0, 0, 0), echo: (4, 0, 0)}
    with pytest.raises(TypeError, match="liblb.Hedging"):
        Session(b, hedge=0.05)  # type: ignore[arg-type]
