"""liblb.httpx against real HTTP servers on loopback (the ``fleet`` fixture in conftest.py).

Expectations come from the balancer itself (a twin's picks, ``attempts(key)``, ``stats()``) and
from what the servers saw (their log of requests, the Host they read, connections accepted).
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import gc
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import liblb
import liblb._http
import liblb.httpx
from liblb.httpx import AsyncTransport, Transport, fault

if TYPE_CHECKING:
    from conftest import Fleet, Tls

URL = "http://svc.internal"


def client(balancer: liblb.Balancer, **options: Any) -> httpx.Client:
    return httpx.Client(transport=Transport(balancer, **options), base_url=URL, timeout=5)


def counted(b: liblb.Balancer) -> dict[str, tuple[int, int, int]]:
    """(requests, failures, in_flight) per node."""
    return {s["id"]: (s["requests"], s["failures"], s["in_flight"]) for s in b.stats()}


def round_robin_retrying(twin: liblb.Balancer, failing: str, requests: int) -> list[list[str]]:
    """The nodes each request reaches when ``failing`` always fails: a round-robin balancer
    retries on the next node in its order (picks and retries share its counter)."""
    reached = []
    for _ in range(requests):
        pick = twin.pick()
        reached.append([pick, twin.pick()] if pick == failing else [pick])
    return reached


def test_each_request_goes_to_the_balancers_pick_and_keeps_its_host(fleet: Fleet) -> None:
    ids = [fleet.start("echo") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, seed=5)
    twin = liblb.Balancer("round_robin", ids, seed=5)
    mounted = {"http://svc.internal:8080": Transport(b)}
    with httpx.Client(mounts=mounted, timeout=5) as c:
        answers = [c.get("http://svc.internal:8080/p", params={"i": i}).json() for i in range(9)]
    expected = [twin.pick() for _ in range(9)]
    assert [a["node"] for a in answers] == expected == fleet.take_log()
    assert {a["host"] for a in answers} == {"svc.internal:8080"}
    assert [a["path"] for a in answers] == [f"/p?i={i}" for i in range(9)]
    assert counted(b) == {i: (3, 0, 0) for i in ids}


def test_retries_reach_distinct_nodes_in_the_keys_retry_order(fleet: Fleet) -> None:
    ids = [fleet.start(r) for r in ("500", "503", "refused", "echo", "echo")]
    # Ejection off: every request sees the same order, the key's.
    b = liblb.Balancer("ring", ids, consecutive_failures=0)
    expected_counts = {i: [0, 0] for i in ids}
    with client(b, key=lambda r: r.headers["x-user"]) as c:
        for user in (f"user-{n}" for n in range(12)):
            order = b.attempts(user, 3)
            reached = order[: next((n + 1 for n, i in enumerate(order) if i in fleet.ids["echo"]), 3)]
            last = reached[-1]
            if last in fleet.ids["refused"]:
                with pytest.raises(httpx.ConnectError):
                    c.get("/", headers={"x-user": user})
            else:
                answer = c.get("/", headers={"x-user": user})
                if last in fleet.ids["echo"]:
                    assert answer.status_code == 200 and answer.json()["node"] == last
                else:
                    assert answer.status_code == (500 if last in fleet.ids["500"] else 503)
            assert fleet.take_log() == [i for i in reached if i not in fleet.ids["refused"]]
            for i in reached:
                expected_counts[i][0] += 1
                expected_counts[i][1] += i not in fleet.ids["echo"]
    assert counted(b) == {i: (r, f, 0) for i, (r, f) in expected_counts.items()}


def test_retried_answers_are_read_so_their_connection_is_reused(fleet: Fleet) -> None:
    ids = [fleet.start("500"), fleet.start("echo")]
    b = liblb.Balancer("round_robin", ids, seed=1, consecutive_failures=0)
    twin = liblb.Balancer("round_robin", ids, seed=1)
    with client(b) as c:
        for _ in range(6):
            assert c.get("/").json()["node"] == ids[1]
    reached = sum(round_robin_retrying(twin, ids[0], 6), [])
    assert fleet.take_log() == reached
    assert counted(b) == {ids[0]: (reached.count(ids[0]),) * 2 + (0,), ids[1]: (6, 0, 0)}
    assert fleet.connections[ids[0]] == 1 and fleet.connections[ids[1]] == 1


def test_an_erroring_node_is_ejected_and_an_overloaded_one_paused(fleet: Fleet) -> None:
    ids = [fleet.start(r) for r in ("echo", "echo", "echo", "503", "429")]
    b = liblb.Balancer("round_robin", ids, seed=3, consecutive_failures=2, max_ejection_percent=50)
    statuses: list[int] = []
    with client(b, retries=0) as c:  # the answers themselves, not the retries, are checked
        while len(statuses) < 20 and [s["status"] for s in b.stats()][3:] != ["ejected", "overloaded"]:
            statuses.append(c.get("/").status_code)
        stats = {s["id"]: s for s in b.stats()}
        assert [stats[i]["status"] for i in ids] == ["healthy"] * 3 + ["ejected", "overloaded"]
        remaining = stats[ids[4]]["remaining"]
        assert remaining is not None and 25 < remaining <= 30  # Retry-After: 30
        # Two 503s in a row eject (consecutive_failures=2); one 429 pauses.
        assert (statuses.count(503), statuses.count(429)) == (2, 1)
        assert counted(b)[ids[3]] == (2, 2, 0) and counted(b)[ids[4]] == (1, 1, 0)
        fleet.take_log()
        for _ in range(9):
            assert c.get("/").status_code == 200
    assert sorted(fleet.take_log()) == sorted(ids[:3] * 3)


def test_a_budget_caps_retries(fleet: Fleet) -> None:
    ids = [fleet.start("500") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, consecutive_failures=0)
    with client(b, budget=liblb.RetryBudget(min_per_sec=0, retry_percent=0)) as c:
        assert [c.get("/").status_code for _ in range(5)] == [500] * 5
    assert len(fleet.take_log()) == 5  # first attempts only
    with client(b) as c:  # the default budget's reserve allows the retries
        assert [c.get("/").status_code for _ in range(5)] == [500] * 5
    assert len(fleet.take_log()) == 15


def test_least_request_sends_less_to_the_slow_node(fleet: Fleet) -> None:
    ids = [fleet.start("slow"), fleet.start("echo"), fleet.start("echo")]
    b = liblb.Balancer("least_request", ids, seed=9)
    with client(b) as c:

        def work() -> None:
            for _ in range(25):
                assert c.get("/").status_code == 200

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    log = fleet.take_log()
    assert len(log) == 150
    # Round robin would send it a third (50); two choices over in-flight counts avoid it.
    assert log.count(ids[0]) < 25, log.count(ids[0])
    assert all(f == 0 and n == 0 for _, f, n in counted(b).values())


def test_a_streamed_body_holds_its_lease_until_closed_or_collected(fleet: Fleet) -> None:
    node = fleet.start("echo")
    b = liblb.Balancer("round_robin", [node])
    with client(b) as c:
        with c.stream("GET", "/") as r:
            assert counted(b)[node] == (0, 0, 1)  # headers are in, the body is not
            r.read()
        assert counted(b)[node] == (1, 0, 0)
        r = c.send(c.build_request("GET", "/"), stream=True)
        assert counted(b)[node] == (1, 0, 1)
        del r  # abandoned unread: cancelled when collected, nothing counted
        gc.collect()
        assert counted(b)[node] == (1, 0, 0)


def test_a_reset_mid_body_is_a_failure_of_the_node(fleet: Fleet) -> None:
    node = fleet.start("reset")
    b = liblb.Balancer("round_robin", [node])
    with client(b) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            c.get("/")
        assert counted(b)[node] == (1, 1, 0)
        with pytest.raises(httpx.RemoteProtocolError), c.stream("GET", "/") as r:
            for _ in r.iter_bytes():
                pass
    assert counted(b)[node] == (2, 2, 0)


def test_a_timeout_is_a_failure_and_is_retried_elsewhere(fleet: Fleet) -> None:
    fleet.slow_seconds = 0.5
    ids = [fleet.start("slow"), fleet.start("echo")]
    b = liblb.Balancer("round_robin", ids, seed=1)
    with httpx.Client(transport=Transport(b), base_url=URL, timeout=0.1) as c:
        assert c.get("/").json()["node"] == ids[1]
    assert counted(b) == {ids[0]: (1, 1, 0), ids[1]: (1, 0, 0)}
    assert fault(httpx.ReadTimeout("slow")) == "timeout"
    assert fault(httpx.ConnectError("refused")) == "error"
    assert fault(httpx.UnsupportedProtocol("ftp")) is None  # the caller's mistake


@pytest.mark.parametrize(
    ("method", "content", "options", "attempts"),
    [
        ("GET", None, {}, 3),
        ("PUT", b"x", {}, 3),
        ("POST", b"x", {}, 1),
        ("POST", b"x", {"retry_methods": {"post"}}, 3),
        ("PUT", "stream", {}, 1),
    ],
)
def test_only_idempotent_requests_with_replayable_bodies_are_retried(
    fleet: Fleet, method: str, content: bytes | str | None, options: dict[str, Any], attempts: int
) -> None:
    ids = [fleet.start("500") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, consecutive_failures=0)

    def stream() -> Iterator[bytes]:
        yield b"x"

    body = stream() if content == "stream" else content
    with client(b, **options) as c:
        assert c.request(method, "/", content=body).status_code == 500
    log = fleet.take_log()
    assert len(log) == len(set(log)) == attempts


def test_a_node_id_that_is_not_an_address_is_a_clear_error() -> None:
    b = liblb.Balancer("round_robin", ["svc-a"])
    with client(b) as c, pytest.raises(ValueError, match="node id 'svc-a' is not an address"):
        c.get("/")
    assert counted(b) == {"svc-a": (0, 0, 0)}  # cancelled: not the node's fault
    with pytest.raises(ValueError, match="retries must be an int from 0 to 99, got 100"):
        Transport(b, retries=100)
    with pytest.raises(TypeError, match="balancer must be a liblb.Balancer"):
        Transport(["127.0.0.1:1"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("node_id", "address"),
    [
        ("10.0.0.1:80", (None, "10.0.0.1", 80)),
        ("[::1]:8080", (None, "::1", 8080)),
        ("https://db-1.internal:443", ("https", "db-1.internal", 443)),
        ("http://[fe80::1]:1", ("http", "fe80::1", 1)),
    ],
)
def test_node_ids_are_addresses(node_id: str, address: tuple[str | None, str, int]) -> None:
    assert liblb._http.address(node_id) == address


@pytest.mark.parametrize(
    ("node_id", "why"),
    [
        ("db-1", "no port"),
        ("::1:80", "an IPv6 host goes in brackets"),
        ("[::1]80", r"an IPv6 host needs \]:port"),
        ("h:0", "port '0'"),
        ("h:http", "port 'http'"),
        (":80", "no host"),
        ("ftp://h:21", "scheme 'ftp'"),
        ("h/x:80", "bad character in host"),
    ],
)
def test_bad_node_ids_name_the_id_and_the_problem(node_id: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"node id {re.escape(repr(node_id))} .*{why}"):
        liblb._http.address(node_id)


@pytest.mark.parametrize(
    "url", ["http://svc/a?b=1", "https://u:p@Svc.Internal:8443/x/%20y?q=%C3%A9#f", "http://svc:80/"]
)
@pytest.mark.parametrize(
    "node_id", ["127.0.0.1:80", "[::1]:443", "https://Node-1.local:8443", "http://10.0.0.1:8080"]
)
def test_node_urls_equal_httpx_own_copy_with(url: str, node_id: str) -> None:
    # node_url swaps parsed fields in (httpx's copy_with re-parses the URL): same result.
    scheme, host, port = liblb._http.address(node_id)
    logical = httpx.URL(url)
    fast = liblb.httpx.node_url(logical, node_id)
    slow = logical.copy_with(scheme=scheme or logical.scheme, host=host, port=port)
    assert (fast, str(fast), fast.port, fast.host) == (slow, str(slow), slow.port, slow.host)


def test_the_node_id_scheme_is_used_and_sni_stays_the_logical_host() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    b = liblb.Balancer("round_robin", ["http://10.0.0.7:8000", "[::1]:9000"], seed=1)
    twin = liblb.Balancer("round_robin", ["http://10.0.0.7:8000", "[::1]:9000"], seed=1)
    with httpx.Client(transport=Transport(b, inner=httpx.MockTransport(handler))) as c:
        for _ in range(2):
            c.get("https://svc.internal/x?y=1")
    urls = {"http://10.0.0.7:8000": "http://10.0.0.7:8000/x?y=1", "[::1]:9000": "https://[::1]:9000/x?y=1"}
    assert [str(r.url) for r in seen] == [urls[twin.pick()] for _ in range(2)]
    assert [r.headers["host"] for r in seen] == ["svc.internal"] * 2
    assert [r.extensions["sni_hostname"] for r in seen] == ["svc.internal"] * 2


def test_answers_map_to_outcomes() -> None:
    f = liblb._http.failure
    assert [f(s, None) for s in (200, 302, 404)] == [None, None, None]
    assert f(500, None) == ("error", None) and f(503, None) == ("error", None)
    assert f(503, "7") == ("overloaded", 7.0) and f(429, None) == ("overloaded", None)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=60)
    after = liblb._http.retry_after(email.utils.format_datetime(later, usegmt=True))
    assert after is not None and 55 < after <= 60
    assert liblb._http.retry_after("Sun, 06 Nov 1994 08:49:37 GMT") == 0.0
    assert liblb._http.retry_after("soon") is None and liblb._http.retry_after("-1") is None


def test_async_transport_picks_retries_and_releases_streams(fleet: Fleet) -> None:
    ids = [fleet.start("echo"), fleet.start("500"), fleet.start("echo")]
    b = liblb.Balancer("round_robin", ids, seed=2, consecutive_failures=0)
    twin = liblb.Balancer("round_robin", ids, seed=2)

    async def main() -> list[str]:
        transport = AsyncTransport(b)
        async with httpx.AsyncClient(transport=transport, base_url=URL, timeout=5) as c:
            answers = [(await c.get("/")).json() for _ in range(6)]
            assert {a["host"] for a in answers} == {"svc.internal"}
            r = await c.send(c.build_request("GET", "/"), stream=True)
            assert sum(n for _, _, n in counted(b).values()) == 1
            await r.aclose()
            r = await c.send(c.build_request("GET", "/"), stream=True)
            del r
            gc.collect()
            return [a["node"] for a in answers]

    nodes = asyncio.run(main())
    # A 500 answer is retried on the next node in round-robin order.
    assert nodes == [reached[-1] for reached in round_robin_retrying(twin, ids[1], 6)]
    hits = fleet.take_log().count(ids[1])
    assert hits >= 2 and counted(b)[ids[1]] == (hits, hits, 0)
    assert all(n == 0 for _, _, n in counted(b).values())


def test_async_hedges_race_a_slow_node_and_the_loser_is_cancelled(fleet: Fleet) -> None:
    fleet.slow_seconds = 0.5
    slow, echo, failing = fleet.start("slow"), fleet.start("echo"), fleet.start("500")
    b = liblb.Balancer("round_robin", [slow, echo], seed=3, consecutive_failures=0)
    twin = liblb.Balancer("round_robin", [slow, echo], seed=3)
    hedge = liblb.Hedging.after(0.05)

    async def main() -> tuple[list[str], int]:
        # Two attempts at most: a second hedge (the fast server slow to answer on a busy machine)
        # is then refused without touching the balancer, so the twin below stays in step.
        transport = AsyncTransport(b, hedge=hedge, retries=1)
        async with httpx.AsyncClient(transport=transport, base_url=URL, timeout=5) as c:
            nodes = [(await c.get("/")).json()["node"] for _ in range(4)]
            # A POST is not retried, so not hedged either: it waits for whichever node it got.
            posted = (await c.post("/", content=b"x")).status_code
        return nodes, posted

    nodes, posted = asyncio.run(main())
    # Every GET that started on the slow node was hedged to the other one, which answered first;
    # the slow attempt was cancelled: nothing counted for it. The twin's request loop, stepped
    # by hand, tells where each request's attempts went.
    expected_log = fleet.hedged_log(twin, hedge, slow, 4)
    post_node = twin.pick()
    assert nodes == [echo] * 4 and posted == 200
    assert fleet.take_log() == expected_log + [post_node]
    assert counted(b) == {slow: (int(post_node == slow), 0, 0), echo: (4 + int(post_node == echo), 0, 0)}

    # A hedge that fails while the first attempt is out: the request waits for the first one.
    b2 = liblb.Balancer("round_robin", [slow, failing], seed=3, consecutive_failures=0)
    twin2 = liblb.Balancer("round_robin", [slow, failing], seed=3)
    if twin2.pick() != slow:  # b2's next pick is twin2's: make the first attempt the slow node's
        b2.pick()

    async def waits() -> Any:
        async with httpx.AsyncClient(transport=AsyncTransport(b2, hedge=hedge), base_url=URL, timeout=5) as c:
            return (await c.get("/")).json()

    assert asyncio.run(waits())["node"] == slow
    assert counted(b2)[failing] == (1, 1, 0) and counted(b2)[slow] == (1, 0, 0)


def test_tls_checks_the_logical_host_name(fleet: Fleet, tls: Tls) -> None:
    ids = [fleet.start("echo", tls=tls.server) for _ in range(2)]
    b = liblb.Balancer("round_robin", ids, seed=4)
    twin = liblb.Balancer("round_robin", ids, seed=4)
    inner = httpx.HTTPTransport(verify=tls.client())
    with httpx.Client(transport=Transport(b, inner=inner), timeout=5) as c:
        answers = [c.get("https://svc.internal/").json() for _ in range(4)]
    assert [a["node"] for a in answers] == [twin.pick() for _ in range(4)]
    assert {a["host"] for a in answers} == {"svc.internal"}
    assert tls.names == ["svc.internal"] * 2  # one handshake per node, named svc.internal
    # Without the logical name the node's certificate does not match its address.
    with httpx.Client(verify=tls.client(), timeout=5) as c, pytest.raises(httpx.ConnectError):
        c.get(f"https://{ids[0]}/")
