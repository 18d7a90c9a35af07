"""Balancing inside httpx: ``httpx.Client(transport=Transport(balancer))``.

Each request goes through ``Balancer.request``: per attempt the URL's host and port (and scheme,
when the node id starts with ``http://`` or ``https://``) become the node's, while the ``Host``
header and the TLS server name stay the logical host. One inner transport (default
``httpx.HTTPTransport()``) pools connections per node. The answer is mapped to an outcome
(``liblb._http.failure`` for statuses, ``FAULTS`` for exceptions); a success's lease ends when
its body is closed, so in-flight counts cover the whole body. Every attempt's lease also takes
the ORCA load report in the answer's ``endpoint-load-metrics`` header (``_http.load_report``);
httpx exposes no trailers. Retries go to distinct nodes, only for ``retry_methods`` (idempotent
ones by default) and bodies given as bytes. See docs/python-http.md.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from typing import Any

import httpx

from . import _http
from ._liblb import AdaptiveThrottle, Balancer, Hedging, Lease, Request, RetryBudget, RetryThrottle

__all__ = ["AsyncTransport", "FAULTS", "Transport"]

KeyFunc = Callable[[httpx.Request], str | bytes | None]

# httpx exceptions and the failure kind they mean, first match wins. None: the request itself is
# wrong (not the node's fault), so the attempt is cancelled and the exception raised at once.
FAULTS: tuple[tuple[type[Exception], _http.Kind | None], ...] = (
    (httpx.TimeoutException, "timeout"),
    (httpx.UnsupportedProtocol, None),
    (httpx.LocalProtocolError, None),
    (httpx.TransportError, "error"),
)


def fault(exc: Exception) -> _http.Kind | None:
    """The failure kind of an exception raised by an attempt (``FAULTS``; others: None)."""
    return next((kind for cls, kind in FAULTS if isinstance(exc, cls)), None)


def classify(response: httpx.Response) -> _http.Failure | None:
    return _http.failure(response.status_code, response.headers.get("retry-after"))


def load(response: httpx.Response) -> str | None:
    """The server's load report in the answer's headers, or None."""
    headers = response.headers
    # httpx 0.18 to 0.28 keep (raw name, lower-case name, value) triples, and each `get` walks
    # them all and decodes the matches: one pass that finds no report name (the common case)
    # costs a third of the two `get`s load_report makes (~0.4 us of ~1.4).
    triples: Any = getattr(headers, "_list", None)
    if isinstance(triples, list) and not any(t[1].startswith(b"endpoint-load-metrics") for t in triples):
        return None
    return _http.load_report(headers)


def to_node(request: httpx.Request, node_id: str) -> httpx.Request:
    """The attempt of ``request`` sent to ``node_id``: Host and TLS server name unchanged."""
    extensions = dict(request.extensions)
    extensions.setdefault("sni_hostname", request.url.host)
    # request.headers already holds the logical Host (httpx sets it when the request is built).
    return httpx.Request(
        request.method,
        node_url(request.url, node_id),
        headers=request.headers,
        stream=request.stream,
        extensions=extensions,
    )


_ORIGINS: dict[tuple[str, str], httpx.URL] = {}  # (scheme, node id) -> httpx's parse of it


def node_url(url: httpx.URL, node_id: str) -> httpx.URL:
    """``url`` with the node's scheme (if its id has one), host and port."""
    scheme, host, port = _http.address(node_id)
    scheme = scheme or url.scheme
    origin = _ORIGINS.get((scheme, node_id))
    if origin is None:
        origin = httpx.URL(scheme=scheme, host=host, port=port)
        if len(_ORIGINS) < 4096:
            _ORIGINS[(scheme, node_id)] = origin
    parsed: Any = getattr(url, "_uri_reference", None)
    node: Any = getattr(origin, "_uri_reference", None)
    if not (hasattr(parsed, "_replace") and hasattr(node, "_replace")):
        return url.copy_with(scheme=scheme, host=host, port=port)
    # httpx 0.24 to 0.28 keep a URL parsed as a named tuple, and copy_with parses the whole URL
    # again (~40 us, most of this transport's cost): swap the node's parsed origin in instead.
    fast = httpx.URL.__new__(httpx.URL)
    fast._uri_reference = parsed._replace(scheme=node.scheme, host=node.host, port=node.port)
    return fast


class _LeasedStream(httpx.SyncByteStream):
    """A response body whose lease ends when it is closed (a success, or the read error's kind,
    with the answer's load report), or is cancelled if the body is garbage-collected unclosed."""

    def __init__(self, stream: httpx.SyncByteStream, lease: Lease, load: str | None) -> None:
        self._stream = stream
        self._lease = lease
        self._load = load
        self._abandoned = weakref.finalize(self, _http.cancel, lease)

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._stream
        except Exception as exc:
            self._end(fault(exc))
            raise

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._end(None)

    def _end(self, kind: _http.Kind | None) -> None:
        self._abandoned.detach()
        if not self._lease.done:
            _http.finish(self._lease, self._load, kind is None, kind)


class _LeasedAsyncStream(httpx.AsyncByteStream):
    """``_LeasedStream`` for AsyncTransport."""

    def __init__(self, stream: httpx.AsyncByteStream, lease: Lease, load: str | None) -> None:
        self._stream = stream
        self._lease = lease
        self._load = load
        self._abandoned = weakref.finalize(self, _http.cancel, lease)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except Exception as exc:
            self._end(fault(exc))
            raise

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._end(None)

    def _end(self, kind: _http.Kind | None) -> None:
        self._abandoned.detach()
        if not self._lease.done:
            _http.finish(self._lease, self._load, kind is None, kind)


def _discard(response: httpx.Response) -> None:
    """Reads and closes a retried answer so its connection goes back to the pool."""
    try:
        response.read()
    except httpx.HTTPError:
        pass  # its attempt already failed; the connection is dropped
    finally:
        response.close()


async def _adiscard(response: httpx.Response) -> None:
    try:
        await response.aread()
    except httpx.HTTPError:
        pass
    finally:
        await response.aclose()


class _Balanced:
    """What Transport and AsyncTransport share: the balancer's request for an httpx request."""

    _policy: _http.Policy
    _key: KeyFunc | None

    def _request(self, request: httpx.Request) -> Request:
        key = self._key(request) if self._key is not None else None
        # httpx holds bytes bodies (content=, data=, json=) as a ByteStream: replayable.
        return self._policy.request(key, request.method, isinstance(request.stream, httpx.ByteStream))


class Transport(_Balanced, httpx.BaseTransport):
    """An httpx transport that sends each request to a node of ``balancer``.

    ``key(request)`` gives the key of keyed algorithms (e.g. a header); ``retries`` is the most
    retries per request (``max_attempts`` - 1, 0 to 99; default 2), limited by ``budget``
    (default: the balancer's) and ``deadline`` (seconds); ``retry_methods`` are the methods that
    may be retried (``POST`` only if you add it: e.g. with an idempotency key). Answers: 429, and
    503 with ``Retry-After``, are "overloaded"; other 5xx "error"; timeouts "timeout", other
    transport errors "error". Each attempt's lease takes the server's ORCA load report from
    the answer's ``endpoint-load-metrics`` header (or ``endpoint-load-metrics-bin``), for
    ``client_side_wrr`` and ``prequal``; one that does not parse is dropped, never failing
    the request. When the request gives up, the last answer is returned or the last exception
    raised.
    """

    def __init__(
        self,
        balancer: Balancer,
        *,
        key: KeyFunc | None = None,
        inner: httpx.BaseTransport | None = None,
        retries: int = 2,
        budget: RetryBudget | RetryThrottle | AdaptiveThrottle | None = None,
        deadline: float | None = None,
        retry_methods: Collection[str] = _http.IDEMPOTENT_METHODS,
    ) -> None:
        self._policy = _http.Policy(balancer, retries, budget, deadline, retry_methods)
        self._key = key
        self._inner = inner if inner is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        def attempt(node_id: str) -> httpx.Response:
            return self._inner.handle_request(to_node(request, node_id))

        response, lease = _http.run(self._request(request), attempt, classify, fault, _discard, load)
        if lease is not None:
            assert isinstance(response.stream, httpx.SyncByteStream)
            response.stream = _LeasedStream(response.stream, lease, load(response))
        return response

    def close(self) -> None:
        self._inner.close()


class AsyncTransport(_Balanced, httpx.AsyncBaseTransport):
    """``Transport`` for ``httpx.AsyncClient`` (inner default ``httpx.AsyncHTTPTransport()``;
    backoffs are ``asyncio.sleep``). ``hedge`` (a ``liblb.Hedging``) races a second attempt on
    another node when the first is slow, for the requests that may be retried; the first
    success wins and the others are cancelled (see docs/python-http.md)."""

    def __init__(
        self,
        balancer: Balancer,
        *,
        key: KeyFunc | None = None,
        inner: httpx.AsyncBaseTransport | None = None,
        retries: int = 2,
        budget: RetryBudget | RetryThrottle | AdaptiveThrottle | None = None,
        deadline: float | None = None,
        retry_methods: Collection[str] = _http.IDEMPOTENT_METHODS,
        hedge: Hedging | None = None,
    ) -> None:
        self._policy = _http.Policy(balancer, retries, budget, deadline, retry_methods, hedge)
        self._key = key
        self._inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async def attempt(node_id: str) -> httpx.Response:
            return await self._inner.handle_async_request(to_node(request, node_id))

        response, lease = await self._policy.arun(self._request(request), attempt, classify, fault, _adiscard, load)
        if lease is not None:
            assert isinstance(response.stream, httpx.AsyncByteStream)
            response.stream = _LeasedAsyncStream(response.stream, lease, load(response))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
