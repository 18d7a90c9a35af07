"""What liblb.httpx, liblb.requests and liblb.aiohttp share: node ids as addresses, HTTP
answers as outcomes, the server's load report an answer carries, and the attempt loop over
``Balancer.request``.

Every decision (which node, whether to retry, how long to back off, the budget) is the core's;
this module maps an HTTP client's answers to outcome kinds (``failure``, ``FAULTS`` in each
integration), hands each answer's ORCA report to its lease (``load_report``, ``finish``) and
sleeps the backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime, timezone
from typing import Literal, NamedTuple, TypeAlias, TypeVar

from ._liblb import (
    AdaptiveThrottle,
    Balancer,
    Hedging,
    InvalidLoadReportError,
    InvalidUtf8Error,
    Lease,
    Request,
    RetryBudget,
    RetryThrottle,
)
from ._request import RequestFailedError, race

# A failure kind (liblb.FAILURE_KINDS), spelled as a union of literals for mypy.stubtest.
Kind: TypeAlias = Literal["error"] | Literal["timeout"] | Literal["overloaded"]
A = TypeVar("A")

# RFC 9110 section 9.2.2: methods whose repetition has the same effect as one request.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})


class Address(NamedTuple):
    """A node id read as an address: ``scheme`` None keeps the request's."""

    scheme: str | None
    host: str
    port: int


_ADDRESSES: dict[str, Address] = {}  # node ids are few: parse each once (up to 4096 of them)


def address(node_id: str) -> Address:
    """``host:port``, ``[v6]:port`` or either after ``http://`` / ``https://``."""
    found = _ADDRESSES.get(node_id)
    if found is None:
        found = _parse(node_id)
        if len(_ADDRESSES) < 4096:
            _ADDRESSES[node_id] = found
    return found


def _parse(node_id: str) -> Address:

    def bad(why: str) -> ValueError:
        return ValueError(
            f"node id {node_id!r} is not an address ({why}); expected host:port, [v6]:port, "
            "or either after http:// or https://"
        )

    scheme: str | None = None
    rest = node_id
    if "://" in node_id:
        scheme, _, rest = node_id.partition("://")
        if scheme not in ("http", "https"):
            raise bad(f"scheme {scheme!r}")
    if rest.startswith("["):
        host, close, port = rest[1:].partition("]")
        if not close or not port.startswith(":"):
            raise bad("an IPv6 host needs ]:port")
        port = port[1:]
    else:
        host, colon, port = rest.rpartition(":")
        if not colon:
            raise bad("no port")
        if ":" in host:
            raise bad("an IPv6 host goes in brackets")
    if not host or any(c in host for c in "/?#@ "):
        raise bad("no host" if not host else "bad character in host")
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise bad(f"port {port!r}")
    return Address(scheme, host, int(port))


class Policy:
    """An integration's options, checked once, and the balancer's request for each call."""

    def __init__(
        self,
        balancer: Balancer,
        retries: int,
        budget: RetryBudget | RetryThrottle | AdaptiveThrottle | None,
        deadline: float | None,
        retry_methods: Collection[str],
        hedge: Hedging | None = None,
    ) -> None:
        if not isinstance(balancer, Balancer):
            raise TypeError(f"balancer must be a liblb.Balancer, not {type(balancer).__name__}")
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 99:
            raise ValueError(f"retries must be an int from 0 to 99, got {retries!r}")
        self.balancer = balancer
        self.max_attempts = retries + 1
        self.budget = budget
        self.deadline = deadline
        self.retry_methods = frozenset(m.upper() for m in retry_methods)
        if hedge is not None and not isinstance(hedge, Hedging):
            raise TypeError(f"hedge must be a liblb.Hedging, not {type(hedge).__name__}")
        self.hedge = hedge

    def request(self, key: str | bytes | None, method: str, replayable: bool) -> Request:
        """One attempt unless the request may be repeated: a retried method, and a body held
        as bytes (a stream would be consumed by the first attempt)."""
        retry = replayable and method.upper() in self.retry_methods
        return self.balancer.request(
            key,
            max_attempts=self.max_attempts if retry else 1,
            budget=self.budget,
            deadline=self.deadline,
            hedge=self.hedge if retry else None,
        )

    def arun(
        self,
        request: Request,
        attempt: Callable[[str], Awaitable[A]],
        classify: Callable[[A], Failure | None],
        fault: Callable[[Exception], Kind | None],
        discard: Callable[[A], Awaitable[None]],
        load: Callable[[A], str | None],
    ) -> Awaitable[tuple[A, Lease | None]]:
        """``arun``, or ``ahedged`` when this policy hedges (tasks cost more than awaiting one
        attempt at a time, so unhedged requests do not pay for them)."""
        run = ahedged if self.hedge is not None else arun
        return run(request, attempt, classify, fault, discard, load)


# The response headers that carry the server's ORCA load report, as Envoy reads them
# (envoyproxy/envoy source/common/orca/orca_parser.cc, parseOrcaLoadReportHeaders, commit
# 977c287b): `endpoint-load-metrics-bin` (gRPC's legacy name: the base64 of the serialized
# report, no prefix) wins; else `endpoint-load-metrics` (`BIN `, `JSON ` or `TEXT ` form).
LOAD_METRICS_BIN = "endpoint-load-metrics-bin"
LOAD_METRICS = "endpoint-load-metrics"


def load_report(headers: Mapping[str, str]) -> str | None:
    """The ORCA load report an answer's headers carry, as ``parse_orca`` takes it (not parsed
    here: ``finish`` hands it to the lease, which parses it once), or None. Two lookups in
    the common case of no report: none of the three clients has a cheaper single pass."""
    value = headers.get(LOAD_METRICS_BIN)
    if value is not None:
        return "BIN " + value
    return headers.get(LOAD_METRICS)


# What a report that does not parse raises (a hostile or broken header, or one not valid
# UTF-8 as aiohttp decodes headers): the answer is still the caller's, the report dropped.
_BAD_REPORT = (InvalidLoadReportError, InvalidUtf8Error)


def finish(
    lease: Lease,
    load: str | bytes | None,
    ok: bool = True,
    kind: Kind | None = None,
    retry_after: float | None = None,
) -> None:
    """Ends ``lease`` with its outcome and, when the answer carried one, the server's load
    report (``Lease.finish(load=...)``: success and failure answers alike, so ``eps`` and
    ``client_side_wrr`` see failures too). A report that does not parse never fails the
    request: the lease, left open by the refused ``finish``, ends without it."""
    if load is not None:
        try:
            lease.finish(ok=ok, kind=kind, retry_after=retry_after, load=load)
            return
        except _BAD_REPORT:
            pass
    lease.finish(ok=ok, kind=kind, retry_after=retry_after)


class Failure(NamedTuple):
    kind: Kind
    retry_after: float | None


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delay-seconds or an HTTP date (RFC 9110 10.2.3); None if
    absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 850 / asctime forms carry no zone: they are GMT
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def failure(status: int, retry_after_header: str | None) -> Failure | None:
    """The outcome of an HTTP status (docs/retries.md): 429, and 503 with ``Retry-After``, are
    "overloaded" (the node is alive but shedding load); any other 5xx is an "error"; the rest,
    4xx included (the caller's mistake, not the node's), is a success (None)."""
    if status == 429 or (status == 503 and retry_after_header is not None):
        return Failure("overloaded", retry_after(retry_after_header))
    if status >= 500:
        return Failure("error", None)
    return None


def cancel(lease: Lease) -> None:
    """Ends a lease without an outcome unless it has ended (``weakref.finalize``'s callback)."""
    if not lease.done:
        lease.cancel()


def run(
    request: Request,
    attempt: Callable[[str], A],
    classify: Callable[[A], Failure | None],
    fault: Callable[[Exception], Kind | None],
    discard: Callable[[A], None],
    load: Callable[[A], str | None],
) -> tuple[A, Lease | None]:
    """Attempts ``attempt(node_id)`` as the request says. Returns the answer for the caller with
    its lease still open when it is a success (the caller ends it), or the last failed answer
    with None (its lease finished). An exception is the attempt's failure of kind ``fault(exc)``
    and is raised when the request gives up; kind None means not the node's fault: the lease is
    cancelled and the exception raised at once. ``discard`` releases a retried answer."""
    last: Exception | None = None
    for lease in request:
        try:
            answer = attempt(lease.id)
        except Exception as exc:
            kind = fault(exc)
            if kind is None:
                lease.cancel()
                raise
            lease.finish(ok=False, kind=kind)
            if request.over:
                raise
            last = exc
            time.sleep(request.backoff())
            continue
        except BaseException:
            lease.cancel()
            raise
        answer_failure = classify(answer)
        if answer_failure is None:
            return answer, lease
        finish(lease, load(answer), False, answer_failure.kind, answer_failure.retry_after)
        if request.over:
            return answer, None
        discard(answer)
        time.sleep(request.backoff())
    raise RequestFailedError(request.stopped, request.attempts) from last


async def arun(
    request: Request,
    attempt: Callable[[str], Awaitable[A]],
    classify: Callable[[A], Failure | None],
    fault: Callable[[Exception], Kind | None],
    discard: Callable[[A], Awaitable[None]],
    load: Callable[[A], str | None],
) -> tuple[A, Lease | None]:
    """``run`` on asyncio (``asyncio.sleep`` between attempts; a cancelled task cancels the
    attempt's lease)."""
    last: Exception | None = None
    for lease in request:
        try:
            answer = await attempt(lease.id)
        except Exception as exc:
            kind = fault(exc)
            if kind is None:
                lease.cancel()
                raise
            lease.finish(ok=False, kind=kind)
            if request.over:
                raise
            last = exc
            await asyncio.sleep(request.backoff())
            continue
        except BaseException:
            lease.cancel()
            raise
        answer_failure = classify(answer)
        if answer_failure is None:
            return answer, lease
        finish(lease, load(answer), False, answer_failure.kind, answer_failure.retry_after)
        if request.over:
            return answer, None
        await discard(answer)
        await asyncio.sleep(request.backoff())
    raise RequestFailedError(request.stopped, request.attempts) from last


async def ahedged(
    request: Request,
    attempt: Callable[[str], Awaitable[A]],
    classify: Callable[[A], Failure | None],
    fault: Callable[[Exception], Kind | None],
    discard: Callable[[A], Awaitable[None]],
    load: Callable[[A], str | None],
) -> tuple[A, Lease | None]:
    """``arun`` with hedges: attempts run as tasks (``_request.race``), and when
    ``hedge_after()`` passes with no answer the core may send another (``hedge()``). The first
    success wins; the attempts still out are cancelled (their leases cancelled, nothing
    counted; an answer that arrived anyway is discarded). A failure is handled as in ``arun``
    (finished, then the core's decision: retry, wait for the hedges out, or stop); giving up
    returns the last failed answer or raises the last exception."""
    last: Exception | None = None
    async with contextlib.aclosing(race(request, attempt, discard)) as finished:
        async for lease, task in finished:
            exc = task.exception()
            if exc is not None:
                if not isinstance(exc, Exception) or (kind := fault(exc)) is None:
                    lease.cancel()  # not the node's fault (or not an Exception): raised at once
                    raise exc
                lease.finish(ok=False, kind=kind)
                if request.over:
                    raise exc
                last = exc
                continue
            answer = task.result()
            answer_failure = classify(answer)
            if answer_failure is None:
                return answer, lease
            finish(lease, load(answer), False, answer_failure.kind, answer_failure.retry_after)
            if request.over:
                return answer, None
            await discard(answer)
    raise RequestFailedError(request.stopped, request.attempts) from last
