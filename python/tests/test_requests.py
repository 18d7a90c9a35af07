"""liblb.requests against real HTTP servers on loopback (the ``fleet`` fixture in conftest.py).

As test_httpx.py: expectations come from the balancer (a twin's picks, ``attempts(key)``,
``stats()``) and from what the servers saw.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import requests

import liblb
from liblb.requests import Adapter, fault, to_node

if TYPE_CHECKING:
    from conftest import Fleet, Tls

URL = "http://svc.internal"


def session(balancer: liblb.Balancer, **options: Any) -> requests.Session:
    s = requests.Session()
    s.mount(URL, Adapter(balancer, **options))
    return s


def counted(b: liblb.Balancer) -> dict[str, tuple[int, int, int]]:
    """(requests, failures, in_flight) per node."""
    return {s["id"]: (s["requests"], s["failures"], s["in_flight"]) for s in b.stats()}


def test_each_request_goes_to_the_balancers_pick_and_keeps_its_host(fleet: Fleet) -> None:
    ids = [fleet.start("echo") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, seed=5)
    twin = liblb.Balancer("round_robin", ids, seed=5)
    with requests.Session() as s:
        s.mount("http://svc.internal:8080", Adapter(b))
        answers = [s.get(f"{URL}:8080/p", params={"i": i}, timeout=5) for i in range(9)]
    expected = [twin.pick() for _ in range(9)]
    assert [a.json()["node"] for a in answers] == expected == fleet.take_log()
    assert {a.json()["host"] for a in answers} == {"svc.internal:8080"}
    assert [a.url for a in answers] == [f"{URL}:8080/p?i={i}" for i in range(9)]
    assert counted(b) == {i: (3, 0, 0) for i in ids}


def test_retries_reach_distinct_nodes_in_the_keys_retry_order(fleet: Fleet) -> None:
    ids = [fleet.start(r) for r in ("500", "refused", "reset", "echo")]
    b = liblb.Balancer("ring", ids, consecutive_failures=0)
    expected_counts = {i: [0, 0] for i in ids}
    with session(b, key=lambda r: r.headers["x-user"], retries=3) as s:
        for user in (f"user-{n}" for n in range(8)):
            order = b.attempts(user, 4)
            reached = order[: order.index(fleet.ids["echo"][0]) + 1]
            answer = s.get(URL, headers={"x-user": user}, timeout=5)
            # A reset mid-body is retried too: without stream=True the attempt reads the body.
            assert answer.json()["node"] == reached[-1]
            assert fleet.take_log() == [i for i in reached if i not in fleet.ids["refused"]]
            for i in reached:
                expected_counts[i][0] += 1
                expected_counts[i][1] += i not in fleet.ids["echo"]
    assert counted(b) == {i: (r, f, 0) for i, (r, f) in expected_counts.items()}


def test_retried_answers_are_read_so_their_connection_is_reused(fleet: Fleet) -> None:
    ids = [fleet.start("500"), fleet.start("echo")]
    b = liblb.Balancer("round_robin", ids, seed=1, consecutive_failures=0)
    with session(b) as s:
        for _ in range(6):
            assert s.get(URL, timeout=5).json()["node"] == ids[1]
        for _ in range(3):  # streamed: the retried answer is read all the same
            with s.get(URL, timeout=5, stream=True) as r:
                assert r.json()["node"] == ids[1]
    assert counted(b)[ids[1]] == (9, 0, 0) and counted(b)[ids[0]][1:] == (counted(b)[ids[0]][0], 0)
    assert fleet.connections[ids[0]] == 1 and fleet.connections[ids[1]] == 1


def test_an_erroring_node_is_ejected_and_an_overloaded_one_paused(fleet: Fleet) -> None:
    ids = [fleet.start(r) for r in ("echo", "echo", "echo", "503", "429")]
    b = liblb.Balancer("round_robin", ids, seed=3, consecutive_failures=2, max_ejection_percent=50)
    statuses: list[int] = []
    with session(b, retries=0) as s:
        while len(statuses) < 20 and [x["status"] for x in b.stats()][3:] != ["ejected", "overloaded"]:
            statuses.append(s.get(URL, timeout=5).status_code)
        stats = {x["id"]: x for x in b.stats()}
        assert [stats[i]["status"] for i in ids] == ["healthy"] * 3 + ["ejected", "overloaded"]
        remaining = stats[ids[4]]["remaining"]
        assert remaining is not None and 25 < remaining <= 30  # Retry-After: 30
        assert (statuses.count(503), statuses.count(429)) == (2, 1)
        fleet.take_log()
        for _ in range(9):
            assert s.get(URL, timeout=5).status_code == 200
    assert sorted(fleet.take_log()) == sorted(ids[:3] * 3)


def test_a_budget_caps_retries(fleet: Fleet) -> None:
    ids = [fleet.start("500") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, consecutive_failures=0)
    with session(b, budget=liblb.RetryBudget(min_per_sec=0, retry_percent=0)) as s:
        assert [s.get(URL, timeout=5).status_code for _ in range(5)] == [500] * 5
    assert len(fleet.take_log()) == 5
    with session(b) as s:
        assert [s.get(URL, timeout=5).status_code for _ in range(5)] == [500] * 5
    assert len(fleet.take_log()) == 15


def test_least_request_sends_less_to_the_slow_node(fleet: Fleet) -> None:
    ids = [fleet.start("slow"), fleet.start("echo"), fleet.start("echo")]
    b = liblb.Balancer("least_request", ids, seed=9)
    adapter = Adapter(b)

    def work() -> None:
        with requests.Session() as s:  # a session per thread, one adapter (and pool) for all
            s.mount(URL, adapter)
            for _ in range(25):
                assert s.get(URL, timeout=5).status_code == 200

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = fleet.take_log()
    assert len(log) == 150
    assert log.count(ids[0]) < 25, log.count(ids[0])  # round robin would send it 50
    assert all(f == 0 and n == 0 for _, f, n in counted(b).values())


def test_a_streamed_body_holds_its_lease_until_read_closed_or_collected(fleet: Fleet) -> None:
    node = fleet.start("echo")
    b = liblb.Balancer("round_robin", [node])
    with session(b) as s:
        r = s.get(URL, stream=True, timeout=5)
        assert counted(b)[node] == (0, 0, 1)
        r.close()  # closed unread
        assert counted(b)[node] == (1, 0, 0)
        r = s.get(URL, stream=True, timeout=5)
        assert r.json()["host"] == "svc.internal"  # read to the end
        assert counted(b)[node] == (2, 0, 0)
        r = s.get(URL, stream=True, timeout=5)
        assert counted(b)[node] == (2, 0, 1)
        del r  # abandoned: cancelled when collected, nothing counted
        gc.collect()
        assert counted(b)[node] == (2, 0, 0)


def test_a_streamed_body_that_breaks_off_is_a_failure_of_the_node(fleet: Fleet) -> None:
    node = fleet.start("reset")
    b = liblb.Balancer("round_robin", [node])
    with session(b) as s:
        r = s.get(URL, stream=True, timeout=5)
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            r.content
        assert counted(b)[node] == (1, 1, 0)
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            s.get(URL, timeout=5)  # not streamed: retried, but there is no other node
    assert counted(b)[node] == (2, 2, 0)


def test_a_timeout_is_a_failure_and_is_retried_elsewhere(fleet: Fleet) -> None:
    fleet.slow_seconds = 0.5
    ids = [fleet.start("slow"), fleet.start("echo")]
    b = liblb.Balancer("round_robin", ids, seed=1)
    with session(b) as s:
        assert s.get(URL, timeout=0.1).json()["node"] == ids[1]
    assert counted(b) == {ids[0]: (1, 1, 0), ids[1]: (1, 0, 0)}
    assert fault(requests.exceptions.ReadTimeout()) == "timeout"
    assert fault(requests.exceptions.ConnectTimeout()) == "timeout"
    assert fault(requests.exceptions.ConnectionError()) == "error"
    assert fault(requests.exceptions.InvalidHeader()) is None


@pytest.mark.parametrize(
    ("method", "body", "options", "attempts"),
    [
        ("GET", None, {}, 3),
        ("DELETE", "x", {}, 3),
        ("POST", b"x", {}, 1),
        ("POST", b"x", {"retry_methods": {"POST"}}, 3),
        ("PUT", "stream", {}, 1),
    ],
)
def test_only_idempotent_requests_with_replayable_bodies_are_retried(
    fleet: Fleet, method: str, body: bytes | str | None, options: dict[str, Any], attempts: int
) -> None:
    ids = [fleet.start("500") for _ in range(3)]
    b = liblb.Balancer("round_robin", ids, consecutive_failures=0)

    def stream() -> Iterator[bytes]:
        yield b"x"

    data = stream() if body == "stream" else body
    with session(b, **options) as s:
        assert s.request(method, URL, data=data, timeout=5).status_code == 500
    log = fleet.take_log()
    assert len(log) == len(set(log)) == attempts


def test_a_node_id_that_is_not_an_address_is_a_clear_error() -> None:
    b = liblb.Balancer("round_robin", ["svc-a"])
    with session(b) as s, pytest.raises(ValueError, match="node id 'svc-a' is not an address"):
        s.get(URL)
    assert counted(b) == {"svc-a": (0, 0, 0)}
    with pytest.raises(ValueError, match="retries must be an int from 0 to 99, got -1"):
        Adapter(b, retries=-1)


def test_attempts_keep_the_logical_host_for_http_and_tls() -> None:
    prepared = requests.Request("GET", "https://svc.internal:8443/a?b=1").prepare()
    attempt = to_node(prepared, "[::1]:9000")
    assert attempt.url == "https://[::1]:9000/a?b=1"
    assert attempt.headers["Host"] == "svc.internal:8443" and "Host" not in prepared.headers
    assert to_node(prepared, "http://10.0.0.7:80").url == "http://10.0.0.7:80/a?b=1"
    host, tls = Adapter(liblb.Balancer("random", ["a:1"])).build_connection_pool_key_attributes(
        attempt, True
    )
    assert (host["host"], host["port"], host["scheme"]) == ("::1", 9000, "https")
    assert tls["server_hostname"] == tls["assert_hostname"] == "svc.internal"


def test_tls_checks_the_logical_host_name(fleet: Fleet, tls: Tls) -> None:
    ids = [fleet.start("echo", tls=tls.server) for _ in range(2)]
    b = liblb.Balancer("round_robin", ids, seed=4)
    with requests.Session() as s:
        s.mount("https://svc.internal", Adapter(b))
        answers = [s.get("https://svc.internal/", verify=tls.ca_file, timeout=5).json() for _ in range(4)]
    assert sorted(a["node"] for a in answers) == sorted(ids * 2)
    assert {a["host"] for a in answers} == {"svc.internal"}
    assert tls.names == ["svc.internal"] * 2
