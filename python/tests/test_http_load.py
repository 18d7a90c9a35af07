"""Server-reported load through the HTTP integrations (liblb.httpx, liblb.requests,
liblb.aiohttp) against real servers on loopback (conftest.py's ``fleet``).

The servers put a ``liblb.ServerLoad``'s report in every answer (``Fleet.report``:
``endpoint-load-metrics`` in the TEXT or BIN form, or Envoy's legacy
``endpoint-load-metrics-bin``). A ``client_side_wrr`` balancer (no blackout, weights updated
every 100 ms) must then send most requests to the node that reports the lower utilisation:
the picks, counted by the servers, show that the integration handed each answer's report to
its lease, on success and on failure answers. A report that does not parse must change
nothing for the caller.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import requests

import liblb
import liblb.aiohttp
import liblb.httpx
import liblb.requests

if TYPE_CHECKING:
    from conftest import Fleet

URL = "http://svc.internal"

# Every way the integrations send a request: each finishes its leases in its own place (httpx's
# body close, sync and async, and the hedging loop; requests' read inside the attempt or its
# streamed body; aiohttp's block exit).
MODES = ["httpx", "httpx-async", "httpx-hedged", "requests", "requests-stream", "aiohttp"]


def send(mode: str, b: liblb.Balancer, count: int, **options: Any) -> list[int]:
    """``count`` GETs through ``mode``'s integration, bodies read; their statuses."""
    if mode == "httpx":
        with httpx.Client(transport=liblb.httpx.Transport(b, **options), base_url=URL, timeout=5) as c:
            return [c.get("/").status_code for _ in range(count)]
    if mode.startswith("requests"):
        with requests.Session() as s:
            s.mount(URL, liblb.requests.Adapter(b, **options))
            statuses = []
            for _ in range(count):
                with s.get(f"{URL}/", timeout=5, stream=mode == "requests-stream") as r:
                    assert r.content is not None
                    statuses.append(r.status_code)
            return statuses
    if mode == "httpx-hedged":
        # The hedging loop (``_http.ahedged``) runs for every request of a hedging transport;
        # the delay is long enough that no hedge is sent.
        options["hedge"] = liblb.Hedging.after(10.0)

    async def main() -> list[int]:
        if mode.startswith("httpx"):
            transport = liblb.httpx.AsyncTransport(b, **options)
            async with httpx.AsyncClient(transport=transport, base_url=URL, timeout=5) as c:
                return [(await c.get("/")).status_code for _ in range(count)]
        async with liblb.aiohttp.Session(b, **options) as lb:
            statuses = []
            for _ in range(count):
                async with lb.get(f"{URL}/") as r:
                    await r.read()
                    statuses.append(r.status)
            return statuses

    return asyncio.run(main())


def wrr(ids: list[str], **options: Any) -> liblb.Balancer:
    """client_side_wrr that weighs by reports at once: no blackout, updates every 100 ms."""
    return liblb.Balancer("client_side_wrr", ids, blackout_period_ms=0, weight_update_period_ms=100, **options)


def weighed(fleet: Fleet, mode: str, b: liblb.Balancer, **options: Any) -> tuple[list[str], list[int]]:
    """20 requests to let every node report (equal weights: they alternate), a pause past the
    weight update, then 40 more: the nodes those reached, and their statuses."""
    send(mode, b, 20, **options)
    time.sleep(0.25)
    fleet.take_log()
    statuses = send(mode, b, 40, **options)
    return fleet.take_log(), statuses


@pytest.mark.parametrize("mode", MODES)
def test_reports_in_answers_weigh_client_side_wrr(fleet: Fleet, mode: str) -> None:
    hot, cool = fleet.start("echo"), fleet.start("echo")
    fleet.report(hot, 0.9)  # endpoint-load-metrics: TEXT ...
    fleet.report(cool, 0.1, "bin-header")  # endpoint-load-metrics-bin: <base64>
    b = wrr([hot, cool])
    log, statuses = weighed(fleet, mode, b)
    assert statuses == [200] * 40
    # Equal request rates, utilisations 0.9 and 0.1: weights 1 to 9 (gRFC A58, qps / utilisation).
    # A node without reports would get the mean weight: the two would alternate.
    assert log.count(cool) >= 3 * log.count(hot), log
    assert all(s["in_flight"] == 0 for s in b.stats())


@pytest.mark.parametrize("mode", MODES)
def test_failure_answers_carry_their_report_too(fleet: Fleet, mode: str) -> None:
    answering, failing = fleet.start("echo"), fleet.start("500")
    fleet.report(answering, 0.9, "bin")  # endpoint-load-metrics: BIN <base64>
    fleet.report(failing, 0.1)
    # No retries (each 500 is the caller's answer) and no ejection: only the reports weigh.
    b = wrr([answering, failing], consecutive_failures=0)
    log, statuses = weighed(fleet, mode, b, retry_methods=())
    assert log.count(failing) >= 3 * log.count(answering), log
    assert statuses.count(500) == log.count(failing)
    assert sum(s["failures"] for s in b.stats()) == 20 // 2 + log.count(failing)


# Headers that are not a load report: bytes that are not UTF-8 (aiohttp decodes them with
# surrogates), bad base64, broken JSON, an unknown form, a bad legacy -bin value.
HOSTILE = [
    ("endpoint-load-metrics", "TEXT cpu_utilization:\xff\xfe"),
    ("endpoint-load-metrics", "BIN !!!!"),
    ("endpoint-load-metrics", 'JSON {"cpu_utilization": [1]'),
    ("endpoint-load-metrics", "XML <load cpu='1'/>"),
    ("endpoint-load-metrics-bin", "%%%%"),
]


@pytest.mark.parametrize("mode", MODES)
def test_a_report_that_does_not_parse_changes_nothing_for_the_caller(fleet: Fleet, mode: str) -> None:
    ids = []
    for header in HOSTILE:
        for role in ("echo", "500"):
            ids.append(fleet.start(role))
            fleet.headers[ids[-1]] = [header]
    b = liblb.Balancer("round_robin", ids, consecutive_failures=0)
    statuses = send(mode, b, len(ids), retry_methods=())
    assert statuses == [200, 500] * len(HOSTILE)
    # Every attempt counted once, with its outcome, and ended.
    assert [(s["requests"], s["failures"], s["in_flight"]) for s in b.stats()] == [(1, 0, 0), (1, 1, 0)] * len(HOSTILE)
