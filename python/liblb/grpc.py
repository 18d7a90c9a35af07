"""liblb for gRPC (grpcio, which has no load-balancing API of its own): ``Channel`` keeps one
``grpc.Channel`` per node of a ``liblb.Balancer`` and routes every call through the balancer's
request loop, so the node choice, retries on distinct nodes, backoff, budgets and health are
liblb's. What this module owns is the mapping of gRPC status codes to outcomes:

- ``RESOURCE_EXHAUSTED`` is *overloaded*, and so is ``UNAVAILABLE`` when the server sent
  ``grpc-retry-pushback-ms`` (gRFC A6); the pushback is the retry-after.
- ``UNAVAILABLE`` otherwise (the node is down or unreachable), ``INTERNAL``, ``UNKNOWN`` and
  ``DATA_LOSS`` are *errors*; ``DEADLINE_EXCEEDED`` is a *timeout*.
- Every other status (``INVALID_ARGUMENT``, ``NOT_FOUND``, ``PERMISSION_DENIED``...) is the
  node answering: a success for its health, never retried, raised to the caller as is.

Every attempt's lease also takes the server's ORCA load report from the call's trailing
metadata, on success and failure alike, for ``client_side_wrr`` (gRFC A58) and ``prequal``:
``endpoint-load-metrics-bin`` (gRFC A51's per-call report, the serialized ``OrcaLoadReport``)
if present, else ``endpoint-load-metrics`` (Envoy's ``BIN``/``JSON``/``TEXT`` header value,
which Envoy also reads from gRPC trailers). grpcio's core keeps ``endpoint-load-metrics-bin``
for its own policies and never shows it to Python (docs/grpc.md): a server answering grpcio
clients must send ``endpoint-load-metrics`` (``ServerLoad.header()``). A report that does not
parse is dropped; the call's answer is unchanged.

Calls are retried on another node only while nothing has reached the caller: a unary or
client-streaming call until it has an answer, a server-streaming or bidirectional call until its
first message; and only when the request can be sent again: a client-streaming or bidirectional
call is retried only when its requests are given as a sequence (a list or tuple), never when
they come from an iterator or generator (the first attempt consumed it). gRPC methods are not
known to be idempotent: give non-idempotent ones ``max_attempts=1``.

    import liblb, liblb.grpc

    b = liblb.Balancer("peak_ewma", ["10.0.0.1:50051", "10.0.0.2:50051"])
    with liblb.grpc.Channel(b) as channel:
        say = channel.unary_unary("/echo.Echo/Say", request_serializer=..., response_deserializer=...)
        reply = say(request, timeout=2.0)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import grpc
import grpc.aio

from . import _http
from ._liblb import Balancer, Lease, Request, RetryBudget, RetryThrottle, AdaptiveThrottle
from ._request import RequestFailedError

__all__ = [
    "AsyncChannel",
    "AsyncStreamStream",
    "AsyncStreamUnary",
    "AsyncUnaryStream",
    "AsyncUnaryUnary",
    "Channel",
    "StreamStream",
    "StreamUnary",
    "UnaryStream",
    "UnaryUnary",
    "outcome_of",
]

Req = TypeVar("Req")
Res = TypeVar("Res")
if TYPE_CHECKING:  # annotations only (stubtest checks runtime aliases against the stubs)
    _Kind = Literal["error", "timeout", "overloaded"]
    _Metadata = Sequence[tuple[str, str | bytes]]
    _KeyFn = Callable[[str, Any, _Metadata | None], str | bytes | None]
    _Budget = RetryBudget | RetryThrottle | AdaptiveThrottle

_ERRORS = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}


_INVALID = -1.0  # a pushback that says "do not retry" (gRFC A6: negative or unparseable)

# The errors that carry a status: grpcio's (a grpc.Call) and grpc.aio's (AioRpcError).
_CALLS: tuple[type, ...] = (grpc.Call, grpc.aio.AioRpcError)


# Where a call's trailing metadata carries the server's load report, in Envoy's order
# (source/common/orca/orca_parser.cc reads trailers as headers): gRFC A51's per-call report,
# the serialized OrcaLoadReport (a `-bin` value arrives decoded, as bytes), then the header
# value (`BIN `/`JSON `/`TEXT `). grpcio's core does not publish the first to applications
# (grpc/grpc src/core/lib/surface/call_utils.h, PublishToAppEncoder drops every trait it does
# not name, EndpointLoadMetricsBinMetadata among them): the second is what Python sees.
_LOAD_KEY_BIN = "endpoint-load-metrics-bin"
_LOAD_KEY = "endpoint-load-metrics"


def _load(trailing: Any) -> bytes | str | None:
    """The load report in a call's trailing metadata (None when the server sent none): one
    pass over it, usually empty or a few entries."""
    found = None
    for name, value in trailing or ():
        if name == _LOAD_KEY_BIN:
            return value  # type: ignore[no-any-return]
        if name == _LOAD_KEY and found is None:
            found = value
    return found


def _error_load(error: grpc.RpcError) -> bytes | str | None:
    """The load report in a failed call's trailing metadata."""
    return _load(error.trailing_metadata() if isinstance(error, _CALLS) else None)


def _pushback(error: grpc.RpcError) -> float | None:
    """The server's ``grpc-retry-pushback-ms`` in seconds, ``_INVALID`` when it sent one that is
    negative or unparseable, None when it sent none."""
    trailing: Any = error.trailing_metadata() if isinstance(error, _CALLS) else None
    for name, value in trailing or ():
        if name == "grpc-retry-pushback-ms":
            text = str(value.decode() if isinstance(value, bytes) else value)
            return int(text) / 1000 if text.isdigit() else _INVALID
    return None


def outcome_of(error: grpc.RpcError) -> tuple[_Kind, float | None] | None:
    """The failure kind and retry-after (seconds) a gRPC error means for its node, or None when
    the node answered (a status the caller must handle; not retried)."""
    code = error.code() if isinstance(error, _CALLS) else grpc.StatusCode.UNKNOWN
    pushback = _pushback(error)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED or (code == grpc.StatusCode.UNAVAILABLE and pushback is not None):
        return "overloaded", None if pushback == _INVALID else pushback
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout", None
    if code in _ERRORS:
        return "error", None
    return None


def _may_retry(error: grpc.RpcError) -> bool:
    """False when the server's pushback says not to retry (gRFC A6)."""
    return _pushback(error) != _INVALID


def _tuple(metadata: _Metadata | None) -> tuple[tuple[str, str | bytes], ...] | None:
    return None if metadata is None else tuple(metadata)


class _Pool:
    """What ``Channel`` and ``AsyncChannel`` share: one channel per node, made on a node's first
    call and closed once it has left the balancer and no call uses it; the balancer's request
    for each call."""

    _kind = "liblb.grpc.Channel"

    def __init__(
        self,
        balancer: Balancer,
        *,
        key: _KeyFn | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        max_attempts: int | None = None,
        budget: _Budget | None = None,
        retry_on: Sequence[_Kind] | None = None,
    ) -> None:
        self.balancer = balancer
        self._key = key
        self._credentials = credentials
        self._options = list(options)
        self._policy: dict[str, Any] = {"max_attempts": max_attempts, "budget": budget, "retry_on": retry_on}
        self._channels: dict[str, Any] = {}
        self._users: dict[str, int] = {}  # calls of this pool using each node's channel now
        self._lock = threading.Lock()
        self._closed = False
        balancer.request(None if key is None else b"", **self._policy)  # checks the policy now

    def _open(self, node: str) -> Any:
        raise NotImplementedError

    def _retire(self, channel: Any) -> None:
        raise NotImplementedError

    def _get(self, node: str) -> Any:
        """The node's channel, under the lock; closes departed nodes' channels that no call
        uses."""
        if self._closed:
            raise ValueError(f"the {self._kind} is closed")
        channel = self._channels.get(node)
        # Departed nodes are looked for when there are more channels than nodes, or a new node
        # shows up (a membership change that kept the count).
        if channel is None or len(self._channels) > len(self.balancer):
            for gone in [n for n in self._channels if n not in self.balancer and not self._users.get(n)]:
                self._retire(self._channels.pop(gone))
        if channel is None:
            channel = self._open(node)
            self._channels[node] = channel
        return channel

    @contextmanager
    def _use(self, node: str) -> Iterator[Any]:
        """The node's channel for one attempt: not closed under it by a membership change."""
        with self._lock:
            channel = self._get(node)
            self._users[node] = self._users.get(node, 0) + 1
        try:
            yield channel
        finally:
            with self._lock:
                self._users[node] -= 1
                if not self._users[node]:
                    del self._users[node]
                    if node not in self.balancer and self._channels.get(node) is channel:
                        self._retire(self._channels.pop(node))

    def _take_all(self) -> list[Any]:
        """Marks the pool closed and hands over every channel (to close)."""
        with self._lock:
            self._closed = True
            channels, self._channels = list(self._channels.values()), {}
        return channels

    def request(self, method: str, request: Any, metadata: _Metadata | None, timeout: float | None, **policy: Any) -> Request:
        """The balancer's request for one call (the channel's policy, overridden by ``policy``;
        ``timeout`` is its deadline)."""
        if "deadline" in policy:
            raise TypeError("pass the call's deadline as timeout=, not deadline=")
        key = self._key(method, request, metadata) if self._key is not None else None
        return self.balancer.request(key, deadline=timeout, **{**self._policy, **policy})


class Channel(_Pool):
    """A pool of ``grpc.Channel``s, one per node of ``balancer`` (made on a node's first call,
    closed once it has left the balancer or when this channel closes), whose calls go through
    the balancer's request loop. ``key(method, request, metadata)`` keys calls for the keyed
    algorithms; ``credentials`` makes secure channels; ``options`` are grpc channel options;
    ``max_attempts``, ``budget`` and ``retry_on`` are the request loop's (``Balancer.request``).
    Thread-safe."""

    def channel(self, node: str) -> grpc.Channel:
        """The ``grpc.Channel`` to ``node`` (a target such as ``host:port``), made on first use
        (for calls of your own). Once the node has left the balancer its channel is closed, as
        soon as no call of this pool uses it."""
        with self._lock:
            channel: grpc.Channel = self._get(node)
            return channel

    def _open(self, node: str) -> grpc.Channel:
        if self._credentials is None:
            return grpc.insecure_channel(node, self._options)
        return grpc.secure_channel(node, self._credentials, self._options)

    def _retire(self, channel: grpc.Channel) -> None:
        channel.close()

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> UnaryUnary[Any, Any]:
        """A callable for a unary method, as ``grpc.Channel.unary_unary``."""
        return UnaryUnary(self, method, request_serializer, response_deserializer)

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> UnaryStream[Any, Any]:
        """A callable for a server-streaming method, as ``grpc.Channel.unary_stream``."""
        return UnaryStream(self, method, request_serializer, response_deserializer)

    def stream_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> StreamUnary[Any, Any]:
        """A callable for a client-streaming method, as ``grpc.Channel.stream_unary``."""
        return StreamUnary(self, method, request_serializer, response_deserializer)

    def stream_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> StreamStream[Any, Any]:
        """A callable for a bidirectional-streaming method, as ``grpc.Channel.stream_stream``."""
        return StreamStream(self, method, request_serializer, response_deserializer)

    def close(self) -> None:
        """Closes every node's channel; later calls raise ValueError."""
        for channel in self._take_all():
            channel.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Method(Generic[Req, Res]):
    def __init__(
        self,
        channel: _Pool,
        method: str,
        serializer: Callable[[Req], bytes] | None,
        deserializer: Callable[[bytes], Res] | None,
    ) -> None:
        self._channel = channel
        self._method = method
        self._serializer = serializer
        self._deserializer = deserializer

    def _payload(self, request: Req) -> Any:
        """The request serialized once, here: a serializer that fails is the caller's error,
        never a node's (grpcio would report it as the node's INTERNAL)."""
        return self._serializer(request) if self._serializer is not None else request

    def _reply(self, raw: Any) -> Res:
        """A reply deserialized after its lease ended (a deserializer that fails is the
        caller's error, not the node's)."""
        reply: Res = self._deserializer(raw) if self._deserializer is not None else raw
        return reply

    @staticmethod
    def _failed(lease: Lease, request: Request, error: grpc.RpcError) -> float:
        """Ends `lease` with what `error` means; raises it when the node answered, when the
        request is over or when the server's pushback forbids a retry; else returns the
        backoff (seconds) before the next attempt."""
        outcome = outcome_of(error)
        load = _error_load(error)
        if outcome is None:
            _http.finish(lease, load)
            raise error
        kind, retry_after = outcome
        _http.finish(lease, load, False, kind, retry_after)
        if request.over or not _may_retry(error):
            raise error
        return request.backoff()

    @staticmethod
    def _ended(lease: Lease, error: grpc.RpcError) -> None:
        """Ends the lease of a stream that failed after its first reply (no retry)."""
        outcome = outcome_of(error)
        if outcome is None:
            _http.finish(lease, _error_load(error))
        else:
            _http.finish(lease, _error_load(error), False, outcome[0], outcome[1])

    def _requests(self, requests: Iterable[Req] | AsyncIterable[Req]) -> _Requests[Req]:
        return _Requests(requests, self._serializer)

    def _unary(self, req: Request, invoke: Callable[[grpc.Channel, float | None], Any], requests: _Requests[Req] | None = None) -> Res:
        """The attempts of a call with one reply: ``invoke(channel, timeout)`` makes one
        (``with_call``: the reply and the call, whose trailing metadata has the load report)."""
        last: grpc.RpcError | None = None
        for lease in req:
            try:
                with self._channel._use(lease.id) as channel:
                    raw, call = invoke(channel, req.remaining)
            except grpc.RpcError as error:
                last = error
                if requests is not None:
                    requests.raise_own(lease, error)
                time.sleep(self._failed(lease, req, error))
                continue
            except BaseException:
                lease.cancel()
                raise
            _http.finish(lease, _load(call.trailing_metadata()))
            return self._reply(raw)
        raise RequestFailedError(req.stopped, req.attempts) from last

    def _replies(self, req: Request, invoke: Callable[[grpc.Channel, float | None], Any], requests: _Requests[Req] | None = None) -> Generator[Res, None, None]:
        """The attempts of a call with a stream of replies: ``invoke(channel, timeout)`` makes
        one; retried only until its first reply."""
        last: grpc.RpcError | None = None
        for lease in req:
            started = False
            try:
                with self._channel._use(lease.id) as channel:
                    replies = invoke(channel, req.remaining)
                    try:
                        for raw in replies:
                            started = True
                            yield self._reply(raw)
                    except BaseException:
                        replies.cancel()
                        raise
            except grpc.RpcError as error:
                last = error
                if requests is not None:
                    requests.raise_own(lease, error)
                if started:  # the caller has messages: no retry, the node's outcome counts
                    self._ended(lease, error)
                    raise
                time.sleep(self._failed(lease, req, error))
                continue
            except BaseException:  # GeneratorExit (closed or collected), a deserializer's error
                lease.cancel()
                raise
            _http.finish(lease, _load(replies.trailing_metadata()))
            return
        raise RequestFailedError(req.stopped, req.attempts) from last


class _Requests(Generic[Req]):
    """A streaming call's requests for its attempts, serialized as grpcio reads them. An
    exception from the caller's iterator or serializer is the caller's, never the node's
    (grpcio cancels the call and reports UNKNOWN): ``raise_own`` cancels the lease and raises
    it. Only a sequence (list, tuple) is ``replayable``: an iterator is consumed by one attempt."""

    def __init__(self, requests: Iterable[Req] | AsyncIterable[Req], serializer: Callable[[Req], bytes] | None) -> None:
        self._requests = requests
        self._serializer = serializer
        self.replayable = isinstance(requests, Sequence) and not isinstance(requests, (str, bytes))
        self.is_async = isinstance(requests, AsyncIterable)
        self._error: BaseException | None = None

    def attempt(self) -> Iterator[Any]:
        """The requests for one attempt."""
        self._error = None
        assert not isinstance(self._requests, AsyncIterable)  # refused by sync_only()
        try:
            for message in self._requests:
                yield self._serializer(message) if self._serializer is not None else message
        except Exception as exc:
            self._error = exc
            raise

    def for_aio(self) -> Iterator[Any] | AsyncIterator[Any]:
        """The requests for one attempt of a grpc.aio call (which takes either kind)."""
        return self._aattempt() if isinstance(self._requests, AsyncIterable) else self.attempt()

    async def _aattempt(self) -> AsyncIterator[Any]:
        self._error = None
        assert isinstance(self._requests, AsyncIterable)
        try:
            async for message in self._requests:
                yield self._serializer(message) if self._serializer is not None else message
        except Exception as exc:
            self._error = exc
            raise

    def sync_only(self) -> _Requests[Req]:
        """These requests, checked for a grpcio (sync) call: an async iterable is refused with
        a TypeError before anything is picked (grpcio would fail it as the node's UNKNOWN)."""
        if self.is_async:
            raise TypeError("an async iterable of requests needs liblb.grpc.AsyncChannel, not Channel")
        return self

    def raise_own(self, lease: Lease, error: grpc.RpcError) -> None:
        """Raises the caller's exception that ended this attempt, if one did."""
        if self._error is not None:
            own, self._error = self._error, None
            lease.cancel()
            raise own from error


class UnaryUnary(_Method[Req, Res]):
    """A unary method of a ``Channel``: ``call(request, timeout=None, metadata=None)``."""

    def __call__(self, request: Req, timeout: float | None = None, metadata: _Metadata | None = None, **policy: Any) -> Res:
        """Calls the method on the balancer's nodes until one answers (the reply); a status
        that is the node's answer is raised as is, and so is the last attempt's error when the
        request gives up (``RequestFailedError``, chained from the last error, when it stops
        between attempts: no node left, the adaptive throttle). ``timeout`` bounds the whole
        call; ``policy`` overrides the channel's (``max_attempts=``, ``budget=``,
        ``retry_on=``)."""
        req = self._channel.request(self._method, request, metadata, timeout, **policy)
        payload = self._payload(request)

        def invoke(channel: grpc.Channel, remaining: float | None) -> Any:
            call: Any = channel.unary_unary(self._method)
            return call.with_call(payload, timeout=remaining, metadata=_tuple(metadata))

        return self._unary(req, invoke)


class UnaryStream(_Method[Req, Res]):
    """A server-streaming method of a ``Channel``: ``call(request, ...)`` is an iterator of
    the replies. The attempt's lease ends when the stream ends (or fails, or the iterator is
    closed or collected: then it is cancelled, nothing counted)."""

    def __call__(
        self, request: Req, timeout: float | None = None, metadata: _Metadata | None = None, **policy: Any
    ) -> Generator[Res, None, None]:
        req = self._channel.request(self._method, request, metadata, timeout, **policy)
        payload = self._payload(request)

        def invoke(channel: grpc.Channel, remaining: float | None) -> Any:
            call: Any = channel.unary_stream(self._method)
            return call(payload, timeout=remaining, metadata=_tuple(metadata))

        return self._replies(req, invoke)


class StreamUnary(_Method[Req, Res]):
    """A client-streaming method of a ``Channel``: ``call(requests, ...)`` sends the requests
    (an iterable) and returns the reply. Retried on another node only when ``requests`` is a
    sequence; an iterator is sent to one node only. The ``key`` function gets ``requests`` as
    given (it must not consume an iterator)."""

    def __call__(
        self, requests: Iterable[Req], timeout: float | None = None, metadata: _Metadata | None = None, **policy: Any
    ) -> Res:
        messages = self._requests(requests).sync_only()
        if not messages.replayable:
            policy["max_attempts"] = 1
        req = self._channel.request(self._method, requests, metadata, timeout, **policy)

        def invoke(channel: grpc.Channel, remaining: float | None) -> Any:
            call: Any = channel.stream_unary(self._method)
            return call.with_call(messages.attempt(), timeout=remaining, metadata=_tuple(metadata))

        return self._unary(req, invoke, messages)


class StreamStream(_Method[Req, Res]):
    """A bidirectional-streaming method of a ``Channel``: ``call(requests, ...)`` is an
    iterator of the replies, as ``UnaryStream``'s; retried only before the first reply and only
    when ``requests`` is a sequence (see ``StreamUnary``)."""

    def __call__(
        self, requests: Iterable[Req], timeout: float | None = None, metadata: _Metadata | None = None, **policy: Any
    ) -> Generator[Res, None, None]:
        messages = self._requests(requests).sync_only()
        if not messages.replayable:
            policy["max_attempts"] = 1
        req = self._channel.request(self._method, requests, metadata, timeout, **policy)

        def invoke(channel: grpc.Channel, remaining: float | None) -> Any:
            call: Any = channel.stream_stream(self._method)
            return call(messages.attempt(), timeout=remaining, metadata=_tuple(metadata))

        return self._replies(req, invoke, messages)


class AsyncChannel(_Pool):
    """``Channel`` on asyncio (``grpc.aio``): a pool of ``grpc.aio.Channel``s, one per node,
    whose calls go through the balancer's request loop. Unary replies are awaited
    (``await say(request)``), streamed ones iterated (``async for reply in count(request)``);
    backoffs are ``asyncio.sleep``; a cancelled task cancels its attempt's lease (nothing
    counted). Requests to stream may be an iterable or an async iterable (retried only when a
    sequence). Options as ``Channel``'s. Use it from one event loop; ``await channel.close()``
    (or ``async with``) closes every node's channel."""

    _kind = "liblb.grpc.AsyncChannel"

    def __init__(
        self,
        balancer: Balancer,
        *,
        key: _KeyFn | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        max_attempts: int | None = None,
        budget: _Budget | None = None,
        retry_on: Sequence[_Kind] | None = None,
    ) -> None:
        super().__init__(
            balancer,
            key=key,
            credentials=credentials,
            options=options,
            max_attempts=max_attempts,
            budget=budget,
            retry_on=retry_on,
        )
        self._closing: set[asyncio.Future[None]] = set()  # closes of departed nodes' channels

    def channel(self, node: str) -> grpc.aio.Channel:
        """The ``grpc.aio.Channel`` to ``node``, made on first use (for calls of your own); closed
        once the node has left the balancer and no call of this pool uses it."""
        with self._lock:
            channel: grpc.aio.Channel = self._get(node)
            return channel

    def _open(self, node: str) -> grpc.aio.Channel:
        if self._credentials is None:
            return grpc.aio.insecure_channel(node, self._options)
        return grpc.aio.secure_channel(node, self._credentials, self._options)

    def _retire(self, channel: grpc.aio.Channel) -> None:
        # Closing a grpc.aio channel is a coroutine: run it on the loop, keep it till done.
        closing = asyncio.ensure_future(channel.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> AsyncUnaryUnary[Any, Any]:
        """An awaitable callable for a unary method, as ``grpc.aio.Channel.unary_unary``."""
        return AsyncUnaryUnary(self, method, request_serializer, response_deserializer)

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> AsyncUnaryStream[Any, Any]:
        """A callable for a server-streaming method: ``async for reply in call(request)``."""
        return AsyncUnaryStream(self, method, request_serializer, response_deserializer)

    def stream_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> AsyncStreamUnary[Any, Any]:
        """An awaitable callable for a client-streaming method."""
        return AsyncStreamUnary(self, method, request_serializer, response_deserializer)

    def stream_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> AsyncStreamStream[Any, Any]:
        """A callable for a bidirectional-streaming method: ``async for reply in call(requests)``."""
        return AsyncStreamStream(self, method, request_serializer, response_deserializer)

    async def close(self) -> None:
        """Closes every node's channel; later calls raise ValueError."""
        channels = self._take_all()
        await asyncio.gather(*(channel.close() for channel in channels), *self._closing)

    async def __aenter__(self) -> AsyncChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _AsyncMethod(_Method[Req, Res]):
    """The attempt loops of ``_Method`` on asyncio."""

    async def _aunary(
        self, req: Request, invoke: Callable[[grpc.aio.Channel, float | None], Awaitable[Any]], requests: _Requests[Req] | None = None
    ) -> Res:
        last: grpc.RpcError | None = None
        for lease in req:
            try:
                with self._channel._use(lease.id) as channel:
                    call: Any = invoke(channel, req.remaining)
                    raw = await call
                    trailing = await call.trailing_metadata()
            except grpc.RpcError as error:
                last = error
                if requests is not None:
                    requests.raise_own(lease, error)
                await asyncio.sleep(self._failed(lease, req, error))
                continue
            except BaseException:  # a cancelled task, the caller's own exception
                lease.cancel()
                raise
            _http.finish(lease, _load(trailing))
            return self._reply(raw)
        raise RequestFailedError(req.stopped, req.attempts) from last

    async def _areplies(
        self, req: Request, invoke: Callable[[grpc.aio.Channel, float | None], Any], requests: _Requests[Req] | None = None
    ) -> AsyncGenerator[Res, None]:
        last: grpc.RpcError | None = None
        for lease in req:
            started = False
            try:
                with self._channel._use(lease.id) as channel:
                    call = invoke(channel, req.remaining)
                    try:
                        async for raw in call:
                            started = True
                            yield self._reply(raw)
                        trailing = await call.trailing_metadata()
                    except BaseException:
                        call.cancel()
                        raise
            except grpc.RpcError as error:
                last = error
                if requests is not None:
                    requests.raise_own(lease, error)
                if started:  # the caller has messages: no retry, the node's outcome counts
                    self._ended(lease, error)
                    raise
                await asyncio.sleep(self._failed(lease, req, error))
                continue
            except BaseException:  # closed (GeneratorExit), cancelled, a deserializer's error
                lease.cancel()
                raise
            _http.finish(lease, _load(trailing))
            return
        raise RequestFailedError(req.stopped, req.attempts) from last


class AsyncUnaryUnary(_AsyncMethod[Req, Res]):
    """A unary method of an ``AsyncChannel``: ``await call(request, timeout=None, metadata=None)``
    (retries and errors as ``UnaryUnary``)."""

    async def __call__(self, request: Req, timeout: float | None = None, metadata: _Metadata | None = None, **policy: Any) -> Res:
        req = self._channel.request(self._method, request, metadata, timeout, **policy)
        payload = self._payload(request)

        def invoke(channel: grpc.aio.Channel, remaining: float | None) -> Awaitable[Any]:
            call: Any = channel.unary_unary(self._method)
            return call(payload, timeout=remaining, metadata=_tuple(metadata))  # type: ignore[no-any-return]

        return await self._aunary(req, invoke)


class AsyncUnaryStream(_AsyncMethod[Req, Res]):
    """A server-streaming method of an ``AsyncChannel``: ``async for reply in call(request)``
    (retried only before the first reply; the lease ends with the stream, or is cancelled if
    the iterator is closed early)."""

    def __call__(
        self, request: Req, timeout: float | None = None, metadata: _Metadata | None = None, **policy: Any
    ) -> AsyncGenerator[Res, None]:
        req = self._channel.request(self._method, request, metadata, timeout, **policy)
        payload = self._payload(request)

        def invoke(channel: grpc.aio.Channel, remaining: float | None) -> Any:
            call: Any = channel.unary_stream(self._method)
            return call(payload, timeout=remaining, metadata=_tuple(metadata))

        return self._areplies(req, invoke)


class AsyncStreamUnary(_AsyncMethod[Req, Res]):
    """A client-streaming method of an ``AsyncChannel``: ``await call(requests)``, ``requests``
    an iterable or an async iterable (retried only when a sequence)."""

    async def __call__(
        self,
        requests: Iterable[Req] | AsyncIterable[Req],
        timeout: float | None = None,
        metadata: _Metadata | None = None,
        **policy: Any,
    ) -> Res:
        messages = self._requests(requests)
        if not messages.replayable:
            policy["max_attempts"] = 1
        req = self._channel.request(self._method, requests, metadata, timeout, **policy)

        def invoke(channel: grpc.aio.Channel, remaining: float | None) -> Awaitable[Any]:
            call: Any = channel.stream_unary(self._method)
            return call(messages.for_aio(), timeout=remaining, metadata=_tuple(metadata))  # type: ignore[no-any-return]

        return await self._aunary(req, invoke, messages)


class AsyncStreamStream(_AsyncMethod[Req, Res]):
    """A bidirectional-streaming method of an ``AsyncChannel``: ``async for reply in
    call(requests)`` (retried only before the first reply and only when ``requests`` is a
    sequence)."""

    def __call__(
        self,
        requests: Iterable[Req] | AsyncIterable[Req],
        timeout: float | None = None,
        metadata: _Metadata | None = None,
        **policy: Any,
    ) -> AsyncGenerator[Res, None]:
        messages = self._requests(requests)
        if not messages.replayable:
            policy["max_attempts"] = 1
        req = self._channel.request(self._method, requests, metadata, timeout, **policy)

        def invoke(channel: grpc.aio.Channel, remaining: float | None) -> Any:
            call: Any = channel.stream_stream(self._method)
            return call(messages.for_aio(), timeout=remaining, metadata=_tuple(metadata))

        return self._areplies(req, invoke, messages)
