"""Balancing with aiohttp: ``async with Session(balancer) as lb: async with lb.get(url) as r:``.

aiohttp's client middlewares cannot move a request to another host, so this is a thin wrapper
of one ``aiohttp.ClientSession`` (one connection pool, per node) whose requests go through
``Balancer.request`` as liblb.httpx's do: per attempt the URL's host and port (and scheme, for
a node id starting with ``http://`` or ``https://``) become the node's; ``Host`` and the TLS
server name stay the logical host. A request is an ``async with`` block: the success's lease
ends when the block does (a failure if a read in it breaks off). Every attempt's lease takes the
ORCA load report in the answer's ``endpoint-load-metrics`` header (``_http.load_report``);
aiohttp's client exposes no trailers. See docs/python-http.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from types import TracebackType
from typing import Any, NamedTuple

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from . import _http
from ._liblb import AdaptiveThrottle, Balancer, Hedging, Lease, RetryBudget, RetryThrottle

__all__ = ["Call", "FAULTS", "Session"]


class Call(NamedTuple):
    """What a ``key`` function sees of a request."""

    method: str
    url: URL
    headers: CIMultiDict[str]


# aiohttp exceptions and the failure kind they mean, first match wins. None: the request itself
# is wrong (not the node's fault): the attempt is cancelled and the exception raised at once.
FAULTS: tuple[tuple[type[Exception], _http.Kind | None], ...] = (
    (TimeoutError, "timeout"),  # aiohttp.ServerTimeoutError and asyncio's timeouts
    (aiohttp.InvalidURL, None),
    (aiohttp.ClientConnectionError, "error"),  # refused, reset, disconnected, TLS
    (aiohttp.ClientPayloadError, "error"),  # the body broke off
    (aiohttp.ClientResponseError, "error"),  # a malformed answer
)


def fault(exc: Exception) -> _http.Kind | None:
    return next((kind for cls, kind in FAULTS if isinstance(exc, cls)), None)


def classify(response: aiohttp.ClientResponse) -> _http.Failure | None:
    return _http.failure(response.status, response.headers.get("Retry-After"))


def load(response: aiohttp.ClientResponse) -> str | None:
    """The server's load report in the answer's headers, or None."""
    return _http.load_report(response.headers)


def node_url(url: URL, node_id: str) -> URL:
    scheme, host, port = _http.address(node_id)
    return url.with_scheme(scheme or url.scheme).with_host(host).with_port(port)


async def _discard(response: aiohttp.ClientResponse) -> None:
    """Reads and releases a retried answer so its connection goes back to the pool."""
    try:
        await response.read()
    except aiohttp.ClientError:
        pass
    finally:
        response.release()


class Session:
    """Balanced requests over ``session`` (default: a new ``aiohttp.ClientSession``, closed with
    this one; create it inside a coroutine). Options as ``liblb.httpx.AsyncTransport`` (``hedge``
    included); ``key(call)`` gets a ``Call``. Bodies given as ``data=`` bytes or str, or ``json=``, can be retried."""

    def __init__(
        self,
        balancer: Balancer,
        *,
        session: aiohttp.ClientSession | None = None,
        key: Callable[[Call], str | bytes | None] | None = None,
        retries: int = 2,
        budget: RetryBudget | RetryThrottle | AdaptiveThrottle | None = None,
        deadline: float | None = None,
        retry_methods: Collection[str] = _http.IDEMPOTENT_METHODS,
        hedge: Hedging | None = None,
    ) -> None:
        self._policy = _http.Policy(balancer, retries, budget, deadline, retry_methods, hedge)
        self._key = key
        self._owned = session is None
        self.session = session if session is not None else aiohttp.ClientSession()

    def request(
        self, method: str, url: str | URL, **kwargs: Any
    ) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """``async with lb.request("GET", "http://svc.internal/x") as response:``; keyword
        arguments as ``aiohttp.ClientSession.request``'s."""
        return _Balanced(self, method, url, kwargs)

    def get(self, url: str | URL, **kwargs: Any) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        return self.request("GET", url, **kwargs)

    def post(self, url: str | URL, **kwargs: Any) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        return self.request("POST", url, **kwargs)

    def put(self, url: str | URL, **kwargs: Any) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        return self.request("PUT", url, **kwargs)

    def delete(self, url: str | URL, **kwargs: Any) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        return self.request("DELETE", url, **kwargs)

    async def close(self) -> None:
        """Closes the session if this object made it."""
        if self._owned:
            await self.session.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _Balanced(contextlib.AbstractAsyncContextManager["aiohttp.ClientResponse"]):
    """One balanced request, as an ``async with`` block: the attempts run on entry; the
    success's lease ends on exit (a failure of the node if a read in the block broke off).
    A class rather than ``contextlib.asynccontextmanager``, whose generator machinery cost
    about 10 us per request (a sixth of this integration's overhead)."""

    __slots__ = ("_lb", "_method", "_logical", "_headers", "_kwargs", "_key", "_replayable", "_response", "_lease", "_load")

    def __init__(self, lb: Session, method: str, url: str | URL, kwargs: dict[str, Any]) -> None:
        logical = URL(url)
        headers: CIMultiDict[str] = CIMultiDict(kwargs.pop("headers", None) or {})
        headers.setdefault("Host", logical.host_port_subcomponent or "")
        if logical.scheme == "https" and logical.host:
            kwargs.setdefault("server_hostname", logical.host)
        data = kwargs.get("data")
        self._lb = lb
        self._method = method
        self._logical = logical
        self._headers = headers
        self._kwargs = kwargs
        self._replayable = data is None or isinstance(data, (bytes, str))
        self._response: aiohttp.ClientResponse | None = None
        self._lease: Lease | None = None
        self._load: str | None = None

    async def _attempt(self, node_id: str) -> aiohttp.ClientResponse:
        target = node_url(self._logical, node_id)
        return await self._lb.session.request(self._method, target, headers=self._headers, **self._kwargs)

    async def __aenter__(self) -> aiohttp.ClientResponse:
        lb = self._lb
        key = lb._key(Call(self._method, self._logical, self._headers)) if lb._key is not None else None
        request = lb._policy.request(key, self._method, self._replayable)
        response, self._lease = await lb._policy.arun(request, self._attempt, classify, fault, _discard, load)
        self._response = response
        if self._lease is not None:
            self._load = load(response)
        return response

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease, response = self._lease, self._response
        try:
            if lease is None:
                pass
            elif exc is None:
                _http.finish(lease, self._load)
            elif isinstance(exc, Exception):
                # A read that broke off fails the node; the caller's own exceptions do not
                # (the node answered).
                kind = fault(exc)
                _http.finish(lease, self._load, kind is None, kind)
            else:
                lease.cancel()  # cancelled, KeyboardInterrupt: no outcome
        finally:
            if response is not None:
                response.release()
