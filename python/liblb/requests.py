"""Balancing inside requests: ``session.mount("http://svc.internal", Adapter(balancer))``.

The adapter is an ``HTTPAdapter`` (one urllib3 pool per node) whose ``send`` goes through
``Balancer.request``, as liblb.httpx does: per attempt the URL's host and port (and scheme, for a
node id starting with ``http://`` or ``https://``) become the node's; ``Host`` stays the logical
one (set here: requests would send the node's) and so does the TLS server name. Without
``stream=True`` the body is read inside the attempt, so a connection reset mid-body is retried
like any error; with it, the lease ends when the body is read to its end or the response closed
(cancelled if the response is collected unclosed). Every attempt's lease takes the ORCA load
report in the answer's ``endpoint-load-metrics`` header (``_http.load_report``); requests exposes
no trailers. See docs/python-http.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import requests
import requests.adapters
import urllib3.exceptions
import urllib3.util
from requests import PreparedRequest, Response
from requests import exceptions as rex

from . import _http
from ._liblb import AdaptiveThrottle, Balancer, Lease, RetryBudget, RetryThrottle

__all__ = ["Adapter", "FAULTS"]

KeyFunc = Callable[[PreparedRequest], str | bytes | None]

# Exceptions and the failure kind they mean, first match wins (requests' own from ``send``,
# urllib3's from reading a streamed body). None: the request itself is wrong, not the node: the
# attempt is cancelled and the exception raised at once.
FAULTS: tuple[tuple[type[Exception], _http.Kind | None], ...] = (
    (rex.Timeout, "timeout"),  # ConnectTimeout and ReadTimeout
    (urllib3.exceptions.TimeoutError, "timeout"),
    (rex.InvalidURL, None),
    (rex.InvalidHeader, None),
    (rex.InvalidSchema, None),
    (rex.MissingSchema, None),
    (rex.ConnectionError, "error"),  # refused, reset, SSL, proxy
    (rex.ChunkedEncodingError, "error"),  # the body broke off
    (rex.ContentDecodingError, "error"),
    (urllib3.exceptions.HTTPError, "error"),
)


def fault(exc: Exception) -> _http.Kind | None:
    """The failure kind of an exception raised by an attempt (``FAULTS``; others: None)."""
    return next((kind for cls, kind in FAULTS if isinstance(exc, cls)), None)


def classify(response: Response) -> _http.Failure | None:
    return _http.failure(response.status_code, response.headers.get("retry-after"))


def load(response: Response) -> str | None:
    """The server's load report in the answer's headers, or None."""
    return _http.load_report(response.headers)


def to_node(request: PreparedRequest, node_id: str) -> PreparedRequest:
    """The attempt of ``request`` sent to ``node_id``, with the logical ``Host``."""
    scheme, host, port = _http.address(node_id)
    url = request.url or ""
    logical_scheme, sep, rest = url.partition("://")
    end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    netloc = rest[:end]
    node_host = f"[{host}]" if ":" in host else host
    if sep and netloc and "@" not in netloc:
        node_url = f"{scheme or logical_scheme}://{node_host}:{port}{rest[end:]}"
    else:
        # Not the plain scheme://host[:port]/... that requests prepares: let urllib3 read it.
        parsed = urllib3.util.parse_url(url)
        netloc = parsed.netloc or ""
        node_url = parsed._replace(scheme=scheme or parsed.scheme, host=node_host, port=port).url
    # PreparedRequest.copy() also deep-copies the cookie jar (a third of this function's cost
    # before): the attempt shares it, as nothing between here and urllib3 reads or changes it
    # (Session.send extracts cookies into the caller's request, which the answer is given).
    attempt = PreparedRequest()
    attempt.method = request.method
    attempt.url = node_url
    attempt.headers = request.headers.copy()
    attempt.headers.setdefault("Host", netloc)
    attempt._cookies = request._cookies  # type: ignore[attr-defined]
    attempt.body = request.body
    attempt.hooks = request.hooks
    attempt._body_position = request._body_position  # type: ignore[attr-defined]
    return attempt


def _discard(response: Response) -> None:
    """Reads and closes a retried answer so its connection goes back to the pool."""
    try:
        response.content
    except rex.RequestException:
        pass  # its attempt already failed; the connection is dropped
    finally:
        response.close()


class _LeasedBody:
    """A streamed response's ``raw`` (urllib3's response, every attribute passed through) that
    ends the lease when the body is read to its end or closed: a success, or the kind of the
    read's error, with the answer's load report. Collected unfinished, the lease is cancelled."""

    def __init__(self, raw: Any, lease: Lease, load: str | None) -> None:
        self._raw = raw
        self._lease = lease
        self._load = load
        self._abandoned = weakref.finalize(self, _http.cancel, lease)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        try:
            yield from self._raw.stream(*args, **kwargs)
        except Exception as exc:
            self._end(fault(exc))
            raise
        self._end(None)

    def read(self, *args: Any, **kwargs: Any) -> bytes:
        try:
            data: bytes = self._raw.read(*args, **kwargs)
        except Exception as exc:
            self._end(fault(exc))
            raise
        if not data:
            self._end(None)  # the end of the body
        return data

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            self._end(None)

    def release_conn(self) -> None:  # what requests' Response.close() calls last
        try:
            self._raw.release_conn()
        finally:
            self._end(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _end(self, kind: _http.Kind | None) -> None:
        self._abandoned.detach()
        if not self._lease.done:
            _http.finish(self._lease, self._load, kind is None, kind)


class Adapter(requests.adapters.HTTPAdapter):
    """A requests adapter that sends each request to a node of ``balancer``.

    Options as ``liblb.httpx.Transport``: ``key(prepared_request)`` for keyed algorithms,
    ``retries`` (0 to 99, default 2), ``budget``, ``deadline`` (seconds), ``retry_methods``
    (idempotent ones by default); retried only with a body given as bytes or str. The rest
    (``pool_connections``, ``pool_maxsize``, ``pool_block``) goes to ``HTTPAdapter``; its own
    ``max_retries`` stays 0: liblb retries, on another node.
    """

    def __init__(
        self,
        balancer: Balancer,
        *,
        key: KeyFunc | None = None,
        retries: int = 2,
        budget: RetryBudget | RetryThrottle | AdaptiveThrottle | None = None,
        deadline: float | None = None,
        retry_methods: Collection[str] = _http.IDEMPOTENT_METHODS,
        **pool: Any,
    ) -> None:
        self._policy = _http.Policy(balancer, retries, budget, deadline, retry_methods)
        self._key = key
        super().__init__(max_retries=0, **pool)

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> Response:
        def attempt(node_id: str) -> Response:
            attempt = to_node(request, node_id)
            response = super(Adapter, self).send(attempt, True, timeout, verify, cert, proxies)
            if not stream:
                response.content  # read here: a body that breaks off is this attempt's failure
            return response

        key = self._key(request) if self._key is not None else None
        replayable = request.body is None or isinstance(request.body, (bytes, str))
        policy = self._policy.request(key, request.method or "GET", replayable)
        response, lease = _http.run(policy, attempt, classify, fault, _discard, load)
        if lease is not None:
            if stream:
                response.raw = _LeasedBody(response.raw, lease, load(response))
            else:
                _http.finish(lease, load(response))
        # The caller's request and URL (the logical ones): redirects resolve against them.
        response.request, response.url = request, request.url or response.url
        return response

    def build_connection_pool_key_attributes(
        self,
        request: PreparedRequest,
        verify: bool | str,
        cert: str | tuple[str, str] | None = None,
    ) -> tuple[Any, Any]:
        """urllib3's pool key for an attempt: TLS checks the logical host's name (from the
        ``Host`` header), not the node's address."""
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        if host_params["scheme"] != "https":
            return host_params, pool_kwargs
        logical = urllib3.util.parse_url(f"//{request.headers['Host']}").host
        name = (logical or "").strip("[]")
        return host_params, {**pool_kwargs, "server_hostname": name, "assert_hostname": name}
