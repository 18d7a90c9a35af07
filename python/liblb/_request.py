"""The retry loops of ``Balancer.call`` and ``Balancer.acall``.

Every decision (which node next, how long to back off, when to give up, when to hedge) is the
core's, through ``Balancer.request``; what this module owns is the mapping of exceptions to
failure kinds (``KINDS``, below) and the sleeping: ``time.sleep`` for ``call``,
``asyncio.sleep`` and racing tasks for ``acall``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Literal, TypeVar

from ._liblb import Balancer, Error, Lease, Request

T = TypeVar("T")


class Overloaded(Exception):
    """Raise it from a ``call``/``acall`` function when the node said it is overloaded (an
    HTTP 429/503, gRPC RESOURCE_EXHAUSTED): the attempt fails with kind "overloaded" and its
    ``retry_after`` (seconds, or None) keeps the node from picks and paces the retry."""

    def __init__(self, message: str = "overloaded", *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after

    __module__ = "liblb"


class RequestFailedError(Error):
    """A ``call``/``acall`` gave up: ``stop`` names why (one of ``STOP_REASONS``), ``attempts``
    how many attempts were made; the last attempt's exception is ``__cause__`` (None when the
    adaptive throttle rejected the request before any attempt)."""

    __module__ = "liblb"
    code = "LB_REQUEST_FAILED"

    def __init__(self, stop: str | None, attempts: int):
        super().__init__(f"request gave up ({stop}) after {attempts} attempt(s)")
        self.stop = stop
        self.attempts = attempts


# Exception classes and the failure kind they mean, first match wins; anything else is "error".
# (socket.timeout and, from Python 3.11, asyncio.TimeoutError are TimeoutError.)
KINDS: tuple[tuple[type[BaseException], Literal["error", "timeout", "overloaded"]], ...] = (
    (Overloaded, "overloaded"),
    (TimeoutError, "timeout"),
    (asyncio.TimeoutError, "timeout"),
)


def _fail(lease: Lease, exc: BaseException) -> None:
    """Ends `lease` as a failure of the kind `exc` means."""
    kind: Literal["error", "timeout", "overloaded"] = next((k for cls, k in KINDS if isinstance(exc, cls)), "error")
    retry_after = exc.retry_after if isinstance(exc, Overloaded) else None
    lease.finish(ok=False, kind=kind, retry_after=retry_after)


def call(balancer: Balancer, key: Any, fn: Callable[[str], T], **options: Any) -> T:
    """``Balancer.call``: ``fn(node_id)`` per attempt, sleeping ``backoff()`` between."""
    request = balancer.request(key, **options)
    last: BaseException | None = None
    for lease in request:
        try:
            value = fn(lease.id)
        except Exception as exc:
            _fail(lease, exc)
            last = exc
            if not request.over:
                time.sleep(request.backoff())
            continue
        except BaseException:
            lease.cancel()  # KeyboardInterrupt and the like: nothing to count
            raise
        lease.finish(ok=True)
        return value
    raise RequestFailedError(request.stopped, request.attempts) from last


async def race(
    request: Request,
    fn: Callable[[str], Awaitable[T]],
    discard: Callable[[T], Awaitable[None]] | None = None,
) -> AsyncGenerator[tuple[Lease, asyncio.Task[T]], None]:
    """Runs ``request``'s attempts as tasks (``fn(node_id)``): the first at once, a hedge
    whenever ``hedge_after()`` passes with no answer and the core sends one, a retry after a
    failure when the core decides so (after ``asyncio.sleep(backoff())`` if nothing else is
    out). Yields each finished attempt, its lease still open: the caller ends the lease, then
    returns (done) or goes on (the core's decision says what comes next). Use it in
    ``contextlib.aclosing``: on exit the attempts still out are cancelled, their leases
    cancelled (nothing counted), and an answer that arrived anyway is given to ``discard``."""
    out: dict[asyncio.Task[T], Lease] = {}

    def start(lease: Lease | None) -> None:
        if lease is not None:
            out[asyncio.ensure_future(fn(lease.id))] = lease

    try:
        start(request.attempt())
        hedges = True
        while out:
            wait = request.hedge_after() if hedges else None
            done, _ = await asyncio.wait(out, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                hedge = request.hedge()
                hedges = hedge is not None  # refused: no more hedges for this request
                start(hedge)
                continue
            task = done.pop()
            yield out.pop(task), task
            if request.decision == "retry":
                if not out:
                    await asyncio.sleep(request.backoff())
                start(request.attempt())
            elif request.decision == "stop":
                break
    finally:
        await _drop(out, discard)


async def _drop(out: dict[asyncio.Task[T], Lease], discard: Callable[[T], Awaitable[None]] | None) -> None:
    """Cancels the attempts still out (their tasks and leases: nothing counted)."""
    for task, lease in out.items():
        task.cancel()
        if not lease.done:
            lease.cancel()
    if out:
        await asyncio.gather(*out, return_exceptions=True)
        if discard is not None:
            for task in out:
                if not task.cancelled() and task.exception() is None:
                    await discard(task.result())
    out.clear()


async def acall(
    balancer: Balancer, key: Any, fn: Callable[[str], Awaitable[T]], **options: Any
) -> T:
    """``Balancer.acall``: attempts as tasks, hedges raced, retries after ``asyncio.sleep``."""
    request: Request = balancer.request(key, **options)
    last: BaseException | None = None
    async with contextlib.aclosing(race(request, fn)) as finished:
        async for lease, task in finished:
            exc = task.exception()
            if exc is None:
                lease.finish(ok=True)
                return task.result()
            _fail(lease, exc)
            last = exc
    raise RequestFailedError(request.stopped, request.attempts) from last
