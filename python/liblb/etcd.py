"""Membership from etcd: keep a ``liblb.Balancer`` in step with an etcd prefix.

Every process that balances over the same backends keeps its own ``Balancer``; they agree on
placement because placement is a pure function of the membership, and they agree on the
membership because they all read it from the same registry. This module reads it from etcd::

    import liblb
    from liblb.etcd import EtcdMembership

    balancer = liblb.Balancer("ring", [])
    with EtcdMembership(balancer, "http://127.0.0.1:2379", "/services/web") as members:
        members.wait_for_revision(1, timeout=5)   # the first membership is in
        node = balancer.pick("user-42")

Layout (the same contract as the Rust crate liblb-etcd and ``lb watch``): a node is the key
``P/<node-id>`` under the prefix ``P``; its value is empty (weight 1) or a JSON object with only
the optional fields ``"weight"`` (integer 0..=4294967295) and ``"tag"`` (integer 0..=2**64-1,
kept in ``members`` for the caller; the Python ``Balancer`` has no tags). A key whose id is not a
valid liblb node id, or whose value is anything else, is rejected with a warning on the
``liblb.etcd`` logger naming the key and the problem, and keeps its last good value (or stays
absent). ``Balancer.update`` always gets the nodes sorted by id (UTF-8 byte order, which is
Python's code-point order), so every process in every language builds the same table.

How it follows etcd: one range over the prefix, then a watch from that range's revision + 1.
All events of one watch response are applied together, with one ``update()``, so a burst of
changes costs one table rebuild. After a disconnect (etcd restarted, connection reset) it
reconnects with exponential backoff and watches again from the last applied revision + 1, so no
change is lost and none is applied twice. If etcd has compacted that revision away, it ranges
again (a full resync that replaces the membership) and watches on from there. If ``update()``
fails, the error is logged and the balancer keeps its last good membership.

Why only the standard library: etcd serves its v3 API as JSON over HTTP too (the gRPC gateway,
``POST /v3/kv/range``, ``/v3/watch``, keys and values base64), and http.client is enough to speak
it. The Python etcd clients speak gRPC (python-etcd3 pins old grpcio and protobuf versions that
conflict with what applications already use, and is unmaintained); a load-balancing library
should not impose that on every user. Tested against etcd 3.4 (Debian's etcd-server).

``python -m liblb.etcd --url U --prefix P [--algorithm A] [--key K]... [--json]`` prints each
applied membership and where the given keys land (docs/membership.md).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import http.client
import json
import logging
import os
import random
import signal
import socket
import sys
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from ._liblb import ALGORITHMS, KEYED_ALGORITHMS, Balancer
from ._liblb import Error as LiblbError

__all__ = [
    "MAX_TAG",
    "MAX_WEIGHT",
    "Change",
    "EtcdMembership",
    "Member",
    "SupportsUpdate",
    "main",
    "node_id_from_key",
    "parse_member",
]

log = logging.getLogger("liblb.etcd")

MAX_WEIGHT = 2**32 - 1
"""The largest weight a value may give (a node weight is an unsigned 32-bit integer)."""
MAX_TAG = 2**64 - 1
"""The largest tag a value may give (an unsigned 64-bit integer)."""

_FIELDS = ("weight", "tag")


@dataclass(frozen=True)
class Member:
    """One node's settings from its etcd value: ``weight`` (default 1) and ``tag`` (or None)."""

    weight: int = 1
    tag: int | None = None


@dataclass(frozen=True)
class Change:
    """One applied membership, as handed to ``on_change``.

    ``revision`` is the etcd revision the membership reflects: the range's revision after a
    full sync, else the revision of the last event applied. ``nodes`` are the ``(id, weight)``
    pairs given to ``Balancer.update``, sorted by id. ``added``/``removed`` are ids,
    ``reweighted`` ``(id, old, new)`` triples, all relative to the previous applied membership.
    ``event_revisions`` are the revisions of the watch events applied (one entry per event,
    empty for a full sync), ``resync`` says the membership came from a range (the start, or a
    compacted watch), and ``rejected`` holds the reasons of the changes rejected in this step.
    """

    revision: int
    nodes: tuple[tuple[str, int], ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    reweighted: tuple[tuple[str, int, int], ...]
    event_revisions: tuple[int, ...]
    resync: bool
    rejected: tuple[str, ...]


def _json_constant(name: str) -> NoReturn:
    # json accepts NaN and Infinity by default; they are not JSON.
    raise ValueError(f"{name} is not valid JSON")


class _NotInteger(str):
    """A JSON number written with a fraction or an exponent (``1.0``, ``1e2``): the format
    takes integer literals only, even integral ones (tests/membership/values.json)."""


class _HugeInteger(str):
    """An integer literal too long to be in range, kept as text (int() of thousands of digits
    is slow, and refused beyond sys.get_int_max_str_digits())."""


def _parse_int(text: str) -> int | _HugeInteger:
    # 2**64 - 1 has 20 digits; anything longer than 21 characters ("-" and 20 digits) is out
    # of every range this format has.
    return int(text) if len(text) <= 21 else _HugeInteger(text)


def _unique_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal names silently; a duplicate field is an error here, as
    # it is for the Rust reader (names compared after unescaping: "w\u0065ight" is "weight").
    fields: dict[str, Any] = {}
    for name, value in pairs:
        if name in fields:
            raise ValueError(f"duplicate field {name!r}")
        fields[name] = value
    return fields


# A member value is one flat object: a valid one holds exactly one "{" and no "[" (its only
# strings are the names "weight" and "tag"). More brackets than this cannot be valid, and
# refusing them before json.loads bounds its recursion: a value of 100,000 "[" is a
# ValueError here, never a RecursionError (or a C stack overflow under a raised limit).
_MAX_BRACKETS = 32


def _integer_field(fields: dict[str, Any], name: str, maximum: int) -> int | None:
    if name not in fields:
        return None
    value = fields[name]
    if isinstance(value, _HugeInteger):
        raise ValueError(
            f'"{name}" {value[:24]}... ({len(value)} characters) is out of range 0..={maximum}'
        )
    if isinstance(value, _NotInteger):
        raise ValueError(
            f'"{name}" must be an integer 0..={maximum} written without fraction or '
            f"exponent, not {value}"
        )
    # bool is an int subclass in Python; true/false are not numbers in JSON.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f'"{name}" must be an integer 0..={maximum}, not {json.dumps(value)}')
    if not 0 <= value <= maximum:
        raise ValueError(f'"{name}" {value} is out of range 0..={maximum}')
    return value


def parse_member(value: bytes) -> Member:
    """A node's settings from its etcd value, or ValueError saying what is wrong with it.

    Empty means weight 1; otherwise a JSON object with only the optional integer fields
    ``weight`` (0..=MAX_WEIGHT, default 1) and ``tag`` (0..=MAX_TAG), each at most once,
    written as integer literals (``-0`` is 0; ``1.0`` and ``1e2`` are refused). The accepted
    and rejected values are the table tests/membership/values.json, shared with the Rust
    watcher.
    """
    if not isinstance(value, bytes):
        raise TypeError(f"value must be bytes, not {type(value).__name__}")
    if not value:
        return Member()
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"value is not UTF-8 ({e.reason} at byte {e.start})") from None
    brackets = text.count("{") + text.count("[")
    if brackets > _MAX_BRACKETS:
        raise ValueError(
            f"value is not a flat JSON object: {brackets} '{{' or '[' (nested too deeply)"
        )
    try:
        parsed = json.loads(
            text,
            object_pairs_hook=_unique_fields,
            parse_constant=_json_constant,
            parse_float=_NotInteger,
            parse_int=_parse_int,
        )
    except ValueError as e:  # json.JSONDecodeError (a BOM too), and the hooks' errors
        raise ValueError(f"value is not valid JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"value must be a JSON object, not {_json_type(parsed)}")
    unknown = sorted(set(parsed) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"unknown field {', '.join(map(repr, unknown))} (known: {', '.join(_FIELDS)})"
        )
    weight = _integer_field(parsed, "weight", MAX_WEIGHT)
    tag = _integer_field(parsed, "tag", MAX_TAG)
    return Member(1 if weight is None else weight, tag)


def _json_type(value: object) -> str:
    if isinstance(value, (_NotInteger, _HugeInteger)):
        return "number"
    if isinstance(value, bool):
        return "bool"
    return type(value).__name__


def node_id_from_key(key: bytes, prefix: bytes) -> str:
    """The node id in an etcd key ``prefix + id``, or ValueError if it is not a valid id.

    A valid id is non-empty UTF-8 without a NUL character (liblb's rule for node ids).
    """
    if not key.startswith(prefix):
        raise ValueError(f"key is not under the prefix {prefix!r}")
    raw = key[len(prefix) :]
    if not raw:
        raise ValueError("node id is empty")
    try:
        node_id = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("node id is not UTF-8") from None
    if "\0" in node_id:
        raise ValueError("node id contains a NUL character")
    return node_id


class SupportsUpdate(Protocol):
    """What ``EtcdMembership`` needs of a balancer: ``update(nodes)`` replacing the membership
    with ``(id, weight)`` pairs, raising on failure. ``liblb.Balancer`` is the one to use; a
    wrapper (that also resizes a connection pool, say) works too."""

    def update(self, nodes: list[tuple[str, int]], /) -> None: ...


_B = TypeVar("_B", bound=SupportsUpdate)


class _GatewayError(Exception):
    """etcd answered with an error (or with something that is not its JSON API)."""


class _Compacted(Exception):
    """The watch's start revision has been compacted away: resync with a range."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted (compact revision {compact_revision})")
        self.compact_revision = compact_revision


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(field: Any, what: str) -> bytes:
    # etcd leaves empty byte fields (an empty value) out of the JSON.
    if field is None:
        return b""
    if not isinstance(field, str):
        raise _GatewayError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(field, validate=True)
    except binascii.Error:
        raise _GatewayError(f"{what} is not valid base64") from None


def _int64(field: Any, what: str) -> int:
    # The gateway writes int64 fields as JSON strings, and leaves zero values out.
    if field is None:
        return 0
    try:
        return int(field)
    except (TypeError, ValueError):
        raise _GatewayError(f"{what} is not an integer: {field!r}") from None


def _loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except ValueError:
        raise _GatewayError(f"{what}: not JSON: {data[:200]!r}") from None
    if not isinstance(parsed, dict):
        raise _GatewayError(f"{what}: not a JSON object: {data[:200]!r}")
    return parsed


def _error_text(body: dict[str, Any]) -> str:
    error = body.get("error")
    if isinstance(error, dict):  # the watch stream's form: {"error": {"message": ...}}
        error = error.get("message", error)
    return str(body.get("message") or error)


class _Stream:
    """One open HTTP exchange whose socket another thread may shut down."""

    def __init__(self, conn: http.client.HTTPConnection, sock: socket.socket) -> None:
        self.conn = conn
        self.sock = sock

    def abort(self) -> None:
        # shutdown wakes a thread blocked in recv on this socket (close alone does not).
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class EtcdMembership(Generic[_B]):
    """Keeps ``balancer``'s membership equal to the nodes under ``prefix`` in etcd at ``url``.

    ``balancer`` is a ``liblb.Balancer`` (or anything with its ``update``, see
    ``SupportsUpdate``).
    ``url`` is the etcd client URL (``http://host:port``, or ``https://``), ``prefix`` the
    ``P`` of the keys ``P/<node-id>`` (no trailing slash). ``on_change(change)`` is called from
    the watcher thread after each applied membership (a ``Change``); an exception it raises is
    logged and otherwise ignored. ``backoff`` is the first reconnect delay in seconds, doubled
    per failure up to ``max_backoff`` (each delay randomised between half and all of it, so
    many processes do not reconnect in step); ``timeout`` bounds connecting and each request.

    ``on_change`` runs before ``revision`` moves on, so once ``wait_for_revision(R)``
    returns, the balancer holds R's membership and ``on_change`` for R has returned.

    ``start()`` starts the watcher thread and returns at once; ``stop()`` ends it and returns
    promptly. As a context manager it starts on entry and stops on exit. ``revision`` is the
    revision of the membership applied last (0 before the first); ``wait_for_revision`` waits
    for a given one.
    """

    def __init__(
        self,
        balancer: _B,
        url: str,
        prefix: str,
        *,
        on_change: Callable[[Change], object] | None = None,
        backoff: float = 0.1,
        max_backoff: float = 10.0,
        timeout: float = 10.0,
    ) -> None:
        if not callable(getattr(balancer, "update", None)):
            raise TypeError(
                f"balancer must be a liblb.Balancer (something with update(nodes)), "
                f"not {type(balancer).__name__}"
            )
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        if on_change is not None and not callable(on_change):
            raise TypeError(f"on_change must be callable, not {type(on_change).__name__}")
        for name, seconds in (
            ("backoff", backoff),
            ("max_backoff", max_backoff),
            ("timeout", timeout),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise TypeError(f"{name} must be a number of seconds, not {type(seconds).__name__}")
            if not 0 < seconds < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, not {seconds}")
        if max_backoff < backoff:
            raise ValueError(f"max_backoff ({max_backoff}) is less than backoff ({backoff})")
        if not prefix:
            raise ValueError("prefix is empty: nodes are the keys <prefix>/<node-id>")
        if prefix.endswith("/"):
            raise ValueError(
                f"prefix {prefix!r} ends with '/': give it without, nodes are <prefix>/<node-id>"
            )
        try:
            key_prefix = (prefix + "/").encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"prefix {prefix!r} cannot be encoded as UTF-8") from None
        self._scheme, self._host, self._port, self._path = _parse_url(url)
        self._url = url
        self._balancer = balancer
        self._prefix = prefix
        self._key_prefix = key_prefix
        # The range end of a prefix: its last byte + 1 ('/' + 1 = '0'), as etcd's own clients do.
        self._range_end = key_prefix[:-1] + b"0"
        self._on_change = on_change
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._timeout = float(timeout)

        # Written by the watcher thread only; read by others under _cond.
        self._cond = threading.Condition()
        self._revision = 0
        self._members: dict[str, Member] = {}
        self._applied: list[tuple[str, int]] | None = None
        self._need_range = True
        self._watch_created = False  # whether the current attempt's watch got going

        self._lock = threading.Lock()  # guards _stream, _thread and _stopping
        self._stopping = threading.Event()
        self._stream: _Stream | None = None
        self._thread: threading.Thread | None = None

    # -- public API --------------------------------------------------------------------------

    @property
    def balancer(self) -> _B:
        """The balancer this watcher updates."""
        return self._balancer

    @property
    def prefix(self) -> str:
        """The prefix ``P`` of the node keys ``P/<node-id>``."""
        return self._prefix

    @property
    def revision(self) -> int:
        """The etcd revision of the membership applied last (0 before the first)."""
        with self._cond:
            return self._revision

    @property
    def members(self) -> dict[str, Member]:
        """The nodes etcd holds (valid values only), id -> ``Member``, sorted by id."""
        with self._cond:
            return dict(self._members)

    @property
    def running(self) -> bool:
        """Whether the watcher thread is running."""
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    def start(self) -> EtcdMembership[_B]:
        """Starts watching in a daemon thread; returns at once. Starting twice is an error."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("EtcdMembership already started (a watcher starts once)")
            self._thread = threading.Thread(
                target=self._run, name=f"liblb.etcd {self._prefix}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stops the watcher and waits for its thread (at most ``timeout`` seconds if given).

        Closes the open connection from this thread, so it returns promptly even while the
        watcher waits on etcd. Calling it again, before ``start``, or from ``on_change`` is fine.
        """
        with self._lock:
            self._stopping.set()
            stream, thread = self._stream, self._thread
        if stream is not None:
            stream.abort()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            self._cond.notify_all()

    def wait_for_revision(self, revision: int, timeout: float | None = None) -> bool:
        """Waits until a membership at ``revision`` or later is applied; False on timeout.

        ``revision`` should be one at which something under the prefix changed (a put or
        delete's header revision): the watcher only learns of revisions through those. Returns
        False at once if the watcher is stopped and has not reached it.
        """
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise TypeError(f"revision must be an int, not {type(revision).__name__}")
        with self._cond:
            return self._cond.wait_for(
                lambda: self._revision >= revision or self._stopping.is_set(), timeout
            ) and self._revision >= revision

    def __enter__(self) -> EtcdMembership[_B]:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"EtcdMembership(url={self._url!r}, prefix={self._prefix!r}, "
            f"revision={self.revision}, nodes={len(self.members)})"
        )

    # -- the watcher thread ------------------------------------------------------------------

    def _run(self) -> None:
        delay = self._backoff
        while not self._stopping.is_set():
            self._watch_created = False
            failure: str
            try:
                if self._need_range:
                    self._resync()
                self._watch()
                # _watch returns when stopping, or to resync (etcd went back in time).
                continue
            except _Stopping:
                break
            except _Compacted as e:
                # Not a failure of etcd's: range again after the shortest pause (a pause all
                # the same, so a watch compacted again at once cannot spin).
                log.warning(
                    "etcd %s: watch from revision %d failed: %s; resyncing with a range",
                    self._url,
                    self._revision + 1,
                    e,
                )
                self._need_range = True
                self._stopping.wait(self._backoff)
                delay = self._backoff
                continue
            except (OSError, http.client.HTTPException, _GatewayError) as e:
                if self._stopping.is_set():
                    break
                failure = f"{type(e).__name__}: {e}"
                bug = False
            except Exception as e:  # a bug: say so loudly, keep the balancer, keep trying
                failure = f"unexpected {type(e).__name__}: {e}"
                bug = True
            if self._watch_created:
                delay = self._backoff  # it worked for a while: start the backoff over
            # Randomised, so processes that lost etcd together do not come back in step.
            pause = random.uniform(delay / 2, delay)
            log.warning(
                "etcd %s: %s; retrying in %.2fs", self._url, failure, pause, exc_info=bug
            )
            self._stopping.wait(pause)
            delay = min(delay * 2, self._max_backoff)

    def _open(self, path: str, body: dict[str, Any]) -> tuple[_Stream, http.client.HTTPResponse]:
        """Sends a POST and returns its response, its socket registered for ``stop()``."""
        conn: http.client.HTTPConnection
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        conn.connect()  # on failure nothing is open yet
        sock = conn.sock
        assert isinstance(sock, socket.socket)
        stream = _Stream(conn, sock)
        with self._lock:
            if self._stopping.is_set():
                conn.close()
                raise _Stopping
            self._stream = stream
        try:
            _keepalive(sock)
            conn.request(
                "POST",
                self._path + path,
                body=json.dumps(body).encode("ascii"),
                headers={"Content-Type": "application/json"},
            )
            return stream, conn.getresponse()
        except BaseException:
            self._close(stream)
            raise

    def _close(self, stream: _Stream) -> None:
        with self._lock:
            if self._stream is stream:
                self._stream = None
        stream.conn.close()

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A unary request to the gateway: its JSON answer, or _GatewayError."""
        stream, response = self._open(path, body)
        try:
            data = response.read()
        finally:
            self._close(stream)
        parsed = _loads(data, f"POST {path}")
        if response.status != 200 or "error" in parsed:
            raise _GatewayError(f"POST {path}: HTTP {response.status}: {_error_text(parsed)}")
        return parsed

    def _resync(self) -> None:
        """Range over the prefix and replace the membership with it."""
        answer = self._call(
            "/v3/kv/range",
            {"key": _b64(self._key_prefix), "range_end": _b64(self._range_end)},
        )
        revision = _int64(answer.get("header", {}).get("revision"), "range revision")
        if answer.get("more"):
            raise _GatewayError("range answered only part of the prefix (more: true)")
        kvs = answer.get("kvs", [])
        if not isinstance(kvs, list):
            raise _GatewayError("range kvs is not a list")
        members: dict[str, Member] = {}
        rejected: list[str] = []
        for kv in kvs:
            if not isinstance(kv, dict):
                raise _GatewayError("range kv is not an object")
            key = _unb64(kv.get("key"), "range key")
            value = _unb64(kv.get("value"), "range value")
            node = self._accept(key, value, self._members, rejected)
            if node is None:
                continue
            node_id, member = node
            if member is None:  # rejected: keep the last good value, if any
                if node_id in self._members:
                    members[node_id] = self._members[node_id]
            else:
                members[node_id] = member
        self._commit(members, revision, (), True, rejected)
        self._need_range = False

    def _watch(self) -> None:
        """Watches from the last applied revision + 1 until the stream ends or we stop."""
        start = self._revision + 1
        request = {
            "create_request": {
                "key": _b64(self._key_prefix),
                "range_end": _b64(self._range_end),
                "start_revision": str(start),
            }
        }
        stream, response = self._open("/v3/watch", request)
        try:
            if response.status != 200:
                raise _GatewayError(
                    f"POST /v3/watch: HTTP {response.status}: "
                    f"{_error_text(_loads(response.read(), 'POST /v3/watch'))}"
                )
            while True:
                line = response.readline()
                if self._stopping.is_set():
                    return
                if not line:
                    raise ConnectionError("etcd closed the watch stream")
                if not line.strip():
                    continue
                message = _loads(line, "watch")
                if "error" in message:
                    raise _GatewayError(f"watch: {_error_text(message)}")
                result = message.get("result")
                if not isinstance(result, dict):
                    raise _GatewayError(f"watch: no result in {line[:200]!r}")
                compact = _int64(result.get("compact_revision"), "compact revision")
                if compact:
                    raise _Compacted(compact)
                if result.get("canceled"):
                    reason = result.get("cancel_reason") or "no reason given"
                    raise _GatewayError(f"etcd canceled the watch: {reason}")
                if result.get("created"):
                    current = _int64(result.get("header", {}).get("revision"), "revision")
                    if current < self._revision:
                        # etcd's history went back (a wiped or restored data directory): the
                        # revisions we hold mean nothing there. Start over from a range.
                        log.warning(
                            "etcd %s: its revision %d is behind ours (%d), data restored or "
                            "wiped? resyncing with a range",
                            self._url,
                            current,
                            self._revision,
                        )
                        self._need_range = True
                        return
                    log.info(
                        "etcd %s: watching %r from revision %d",
                        self._url,
                        self._key_prefix.decode("utf-8"),
                        start,
                    )
                    self._watch_created = True
                    # Idle watches are normal: no read timeout from here on (TCP keepalive
                    # notices a dead peer; stop() shuts the socket down).
                    stream.sock.settimeout(None)
                events = result.get("events")
                if events:
                    self._apply_events(events)
        finally:
            self._close(stream)

    def _accept(
        self, key: bytes, value: bytes, current: dict[str, Member], rejected: list[str]
    ) -> tuple[str, Member | None] | None:
        """Parses one put: (id, member), (id, None) if the value is bad, None if the id is.

        ``current`` is the membership the put applies to (for the rejection message).
        """
        try:
            node_id = node_id_from_key(key, self._key_prefix)
        except ValueError as e:
            self._reject(key, str(e), "ignored", rejected)
            return None
        try:
            return node_id, parse_member(value)
        except ValueError as e:
            last = current.get(node_id)
            keeping = (
                f"keeping its last good value (weight {last.weight})"
                if last is not None
                else "the node stays absent"
            )
            self._reject(key, str(e), keeping, rejected)
            return node_id, None

    def _reject(self, key: bytes, problem: str, outcome: str, rejected: list[str]) -> None:
        shown = key.decode("utf-8", "backslashreplace")
        reason = f"etcd key {shown!r}: {problem}"
        log.warning("%s; change rejected, %s", reason, outcome)
        rejected.append(reason)

    def _apply_events(self, events: Any) -> None:
        if not isinstance(events, list):
            raise _GatewayError("watch events is not a list")
        members = dict(self._members)
        revisions: list[int] = []
        rejected: list[str] = []
        for event in events:
            kv = event.get("kv") if isinstance(event, dict) else None
            if not isinstance(kv, dict):
                raise _GatewayError("watch event without kv")
            assert isinstance(event, dict)
            revisions.append(_int64(kv.get("mod_revision"), "event revision"))
            key = _unb64(kv.get("key"), "event key")
            kind = event.get("type", "PUT")  # PUT is the zero value, left out
            if kind == "DELETE":
                try:
                    members.pop(node_id_from_key(key, self._key_prefix), None)
                except ValueError:
                    pass  # an invalid key was never a member: nothing to remove
            elif kind == "PUT":
                node = self._accept(key, _unb64(kv.get("value"), "event value"), members, rejected)
                if node is not None and node[1] is not None:
                    members[node[0]] = node[1]
            else:
                raise _GatewayError(f"watch event of unknown type {kind!r}")
        self._commit(members, max(revisions), tuple(revisions), False, rejected)

    def _commit(
        self,
        members: dict[str, Member],
        revision: int,
        event_revisions: tuple[int, ...],
        resync: bool,
        rejected: list[str],
    ) -> None:
        """Applies a membership: one update() if the node list changed, then on_change."""
        # Sorted by id: str order is code-point order, which is UTF-8 byte order.
        ordered = dict(sorted(members.items()))
        nodes = [(node_id, member.weight) for node_id, member in ordered.items()]
        previous = self._applied
        applied = True
        if nodes != previous:
            try:
                self._balancer.update(nodes)
            except Exception as e:  # a liblb.Error, or whatever a wrapper raises
                log.error(
                    "etcd %s: update() at revision %d failed: %s: %s; keeping the last good "
                    "membership",
                    self._url,
                    revision,
                    type(e).__name__,
                    e,
                    exc_info=not isinstance(e, LiblbError),
                )
                applied = False
        with self._cond:
            self._members = ordered
            if applied:
                self._applied = nodes
        if applied and self._on_change is not None:
            before = dict(previous or [])
            after = dict(nodes)
            change = Change(
                revision=revision,
                nodes=tuple(nodes),
                added=tuple(i for i in after if i not in before),
                removed=tuple(i for i in before if i not in after),
                reweighted=tuple(
                    (i, before[i], w) for i, w in after.items() if i in before and before[i] != w
                ),
                event_revisions=event_revisions,
                resync=resync,
                rejected=tuple(rejected),
            )
            try:
                self._on_change(change)
            except Exception:
                log.exception("etcd %s: on_change raised at revision %d", self._url, revision)
        # The revision moves last: once wait_for_revision(R) returns, the balancer holds R's
        # membership and on_change for R has returned.
        with self._cond:
            self._revision = revision
            self._cond.notify_all()


class _Stopping(Exception):
    """stop() was called while a connection was being opened."""


def _parse_url(url: str) -> tuple[str, str, int | None, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"url {url!r}: scheme must be http or https (the etcd client URL)")
    if not parts.hostname:
        raise ValueError(f"url {url!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"url {url!r}: credentials in the URL are not supported")
    if parts.query or parts.fragment:
        raise ValueError(f"url {url!r}: no query or fragment expected")
    try:
        port = parts.port
    except ValueError as e:
        raise ValueError(f"url {url!r}: {e}") from None
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


def _keepalive(sock: socket.socket) -> None:
    """TCP keepalive, so a watch on a dead peer fails in about a minute instead of never."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


# -- the command line ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m liblb.etcd",
        description=(
            "Watch a membership in etcd (keys <prefix>/<node-id>, values empty or "
            '{"weight": W, "tag": T}) and print each applied membership and where the given '
            "keys land."
        ),
    )
    parser.add_argument("--url", required=True, help="etcd client URL, e.g. http://127.0.0.1:2379")
    parser.add_argument("--prefix", required=True, help="P of the node keys P/<node-id>")
    parser.add_argument(
        "--algorithm",
        "-a",
        default="maglev",
        choices=ALGORITHMS,
        metavar="ALGORITHM",
        help=f"balancing algorithm (default maglev, as `lb watch`; one of {', '.join(ALGORITHMS)})",
    )
    parser.add_argument(
        "--key",
        "-k",
        action="append",
        default=[],
        dest="keys",
        metavar="KEY",
        help="a key to place (repeat)",
    )
    parser.add_argument("--seed", type=int, help="balancer seed (random algorithms)")
    parser.add_argument("--vnodes", type=int, help="ring points per unit of weight")
    parser.add_argument("--hash", help="key hash (one of liblb.HASHES)")
    parser.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other balancer option (repeatable)",
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per applied membership"
    )
    parser.add_argument(
        "--backoff", type=float, default=0.1, help="first reconnect delay, seconds (default 0.1)"
    )
    parser.add_argument(
        "--max-backoff", type=float, default=10.0, help="longest reconnect delay (default 10)"
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="connect/request timeout (default 10)"
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="log connections too")
    return parser


def _picks(balancer: Balancer, keys: Sequence[str]) -> dict[str, str | None]:
    picks: dict[str, str | None] = {}
    for key in keys:
        try:
            picks[key] = balancer.pick(key)
        except LiblbError:
            picks[key] = None  # no pickable node
    return picks


def _describe(change: Change, picks: dict[str, str | None], before: dict[str, str | None]) -> str:
    parts = [f"revision {change.revision}" + (" (full sync)" if change.resync else "")]
    changes = [f"+{i}" for i in change.added]
    changes += [f"-{i}" for i in change.removed]
    changes += [f"~{i} {old}->{new}" for i, old, new in change.reweighted]
    if changes:
        parts.append(" ".join(changes))
    elif not change.resync:
        parts.append("no change")
    if change.rejected:
        parts.append(f"{len(change.rejected)} rejected")
    nodes = " ".join(f"{i}={w}" for i, w in change.nodes) or "(none)"
    parts.append(f"nodes {nodes}")
    for key, node in picks.items():
        shown = node if node is not None else "(no node)"
        if change.resync or before.get(key, node) == node:
            parts.append(f"{key} -> {shown}")
        else:
            old = before.get(key)
            parts.append(f"{key} MOVED {old if old is not None else '(no node)'} -> {shown}")
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m liblb.etcd``: watch a prefix and print memberships (see ``--help``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if args.keys and args.algorithm not in KEYED_ALGORITHMS:
        parser.error(
            f"--key needs a keyed algorithm ({', '.join(KEYED_ALGORITHMS)}); "
            f"{args.algorithm} ignores keys"
        )
    options: dict[str, Any] = {}
    for setting in args.option:
        name, _, value = setting.partition("=")
        options[name] = value
    for name in ("seed", "vnodes", "hash"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    try:
        balancer = Balancer(args.algorithm, [], **options)
    except TypeError as e:
        parser.error(f"balancer options: {e}")
    except LiblbError as e:
        parser.error(f"balancer options: {e}")
    keys: list[str] = args.keys
    last: dict[str, str | None] = {}

    def on_change(change: Change) -> None:
        picks = _picks(balancer, keys)
        if args.json:
            line = json.dumps(
                # Keys sorted (bytewise, as a Rust BTreeMap would) so every watcher's line
                # for one membership is the same bytes.
                {
                    "revision": change.revision,
                    "nodes": change.nodes,
                    "keys": dict(sorted(picks.items())),
                },
                separators=(",", ":"),
            )
        else:
            line = _describe(change, picks, last)
        last.clear()
        last.update(picks)
        try:
            print(line, flush=True)
        except BrokenPipeError:
            # Whoever read our output is gone: stop quietly (and keep the interpreter's final
            # flush from complaining about the same pipe).
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            stop.set()

    try:
        watcher = EtcdMembership(
            balancer,
            args.url,
            args.prefix,
            on_change=on_change,
            backoff=args.backoff,
            max_backoff=args.max_backoff,
            timeout=args.timeout,
        )
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    with watcher:
        try:
            while not stop.wait(3600):
                pass
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
