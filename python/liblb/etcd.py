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
again (a full resync that replaces the membership) and watches on from there; so it does when
etcd's revision went back (a wiped data directory), another cluster answers, or a watch event
would take the revision down. If ``update()`` fails, the error is logged and the balancer keeps
its last good membership. ``url`` may list several endpoints (a connection failure moves on to
the next); ``https://`` with a CA file and client certificates, and etcd users, are supported.

Why only the standard library: etcd serves its v3 API as JSON over HTTP too (the gRPC gateway,
``POST /v3/kv/range``, ``/v3/watch``, keys and values base64), and a small HTTP/1.1 client on
``socket`` and ``ssl`` (``_Conn``) is enough to speak it, with a cap on every read, a deadline
on every request, and a socket ``stop()`` can shut from another thread (what neither
http.client nor httpx gives; docs/membership.md). The Python etcd clients speak gRPC
(python-etcd3 pins old grpcio and protobuf versions that conflict with what applications
already use, and is unmaintained); a load-balancing library should not impose that on every
user. Tested against etcd 3.4 (Debian's etcd-server).

``python -m liblb.etcd --url U --prefix P [--algorithm A] [--key K]... [--json]`` prints each
applied membership and where the given keys land (docs/membership.md).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import logging
import os
import random
import signal
import socket
import ssl
import sys
import threading
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from ._liblb import ALGORITHMS, KEYED_ALGORITHMS, Balancer, Node
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

MAX_PRIORITY = 2**32 - 1
"""The largest priority level a value may give (an unsigned 32-bit integer)."""

_FIELDS = ("weight", "tag", "locality", "priority")


@dataclass(frozen=True)
class Member:
    """One node's settings from its etcd value: ``weight`` (default 1), ``tag`` (or None),
    and where it runs: ``locality`` (``"region/zone/sub_zone"``, default ``""``) and
    ``priority`` (default 0, the most preferred; see docs/localities.md)."""

    weight: int = 1
    tag: int | None = None
    locality: str = ""
    priority: int = 0

    def node(self, node_id: str) -> tuple[str, int] | Node:
        """What ``Balancer.update`` is given for this member: an ``(id, weight)`` pair, or a
        ``liblb.Node`` when it has a locality or a priority."""
        if not self.locality and not self.priority:
            return (node_id, self.weight)
        return Node(node_id, self.weight, locality=self.locality, priority=self.priority)


@dataclass(frozen=True)
class Change:
    """One applied membership, as handed to ``on_change``.

    ``revision`` is the etcd revision the membership reflects: the range's revision after a
    full sync, else the revision of the last event applied. ``nodes`` are what
    ``Balancer.update`` was given, sorted by id: ``(id, weight)`` pairs, and ``liblb.Node``s
    for members whose value names a locality or a priority. ``added``/``removed`` are ids,
    ``reweighted`` ``(id, old, new)`` triples, all relative to the previous applied membership.
    ``event_revisions`` are the revisions of the watch events applied (one entry per event,
    empty for a full sync), ``resync`` says the membership came from a range (the start, or a
    compacted watch), and ``rejected`` holds the reasons of the changes rejected in this step.
    """

    revision: int
    nodes: tuple[tuple[str, int] | Node, ...]
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


# A member value is one flat object: a valid one holds one "{" and whatever brackets its
# locality string holds. The format allows 32 "{" and "[" in all (the Rust reader applies the
# same rule), and refusing more before json.loads bounds its recursion: a value of 100,000
# "[" is a ValueError here, never a RecursionError (or a C stack overflow under a raised limit).
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

    Empty means weight 1; otherwise a JSON object with only the optional fields ``weight``
    (0..=MAX_WEIGHT, default 1), ``tag`` (0..=MAX_TAG), ``locality`` (a string of at most three
    parts, ``region/zone/sub_zone``) and ``priority`` (0..=MAX_PRIORITY), each at most once,
    numbers written as integer literals (``-0`` is 0; ``1.0`` and ``1e2`` are refused), and at
    most 32 ``{`` and ``[`` in all. The accepted
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
    priority = _integer_field(parsed, "priority", MAX_PRIORITY)
    locality = parsed.get("locality", "")
    if not isinstance(locality, str):
        raise ValueError(
            f'"locality" must be a string like "us-east/us-east-1a", not {_json_type(locality)}'
        )
    try:
        Node("-", locality=locality)  # the core's rule for localities
    except LiblbError as e:
        raise ValueError(str(e)) from None
    return Member(1 if weight is None else weight, tag, locality, priority or 0)


def _pair(node: tuple[str, int] | Node) -> tuple[str, int]:
    """A node given to ``update`` as its ``(id, weight)``."""
    return node if isinstance(node, tuple) else (node.id, node.weight)


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
    with ``(id, weight)`` pairs (and ``liblb.Node``s for members whose value names a locality
    or a priority), raising on failure. ``liblb.Balancer`` is the one to use; a wrapper (that
    also resizes a connection pool, say) works too."""

    def update(self, nodes: list[tuple[str, int] | Node], /) -> None: ...


_B = TypeVar("_B", bound=SupportsUpdate)
_T = TypeVar("_T")


MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""The default cap on one range answer's body and on one watch message (64 MiB): a prefix of
100,000 members is a few MiB, and etcd's own request limit is 1.5 MiB per value."""
MAX_ERROR_BYTES = 4096
"""How much of an error answer's body is read (and shown in the log); the rest is dropped."""
_MAX_HEAD_BYTES = 64 * 1024  # an HTTP head, or the trailers after a chunked body
_MAX_CHUNK_LINE = 1024  # a chunk-size line, extensions included


class _EtcdError(Exception):
    """etcd answered, but not with what the watcher can use (an error, or not its JSON API)."""


class _GatewayError(_EtcdError):
    """etcd answered with an error, or with something that is not its JSON API."""


class _TooLarge(_EtcdError):
    """An answer or a watch message went past its cap."""


class _AuthExpired(_EtcdError):
    """etcd refused the auth token (expired, or etcd restarted): authenticate again."""


class _Timeout(TimeoutError):
    """A request missed its deadline, or a watch stalled: a connection failure."""


class _Resync(Exception):
    """What the watch says cannot be followed from the revision held: range again."""


class _Compacted(_Resync):
    """The watch's start revision has been compacted away: resync with a range."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted (compact revision {compact_revision})")
        self.compact_revision = compact_revision


class _ServerError(_GatewayError):
    """An HTTP 5xx answer (no leader, request timed out, ...): the next endpoint may serve."""


class _Stopping(Exception):
    """stop() was called while a connection was being opened."""


class _Unreachable(ConnectionError):
    """No endpoint took the request; the message names each endpoint and its failure."""


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


# What Rust's str::parse::<i64>() / ::<u16>() take (etcd/src/client.rs int(), http.rs): an
# optional sign and ASCII digits; no spaces, '_' or non-ASCII digits, which int() accepts.
_INT = re.compile(r"[+-]?[0-9]+")
_PORT = re.compile(r"\+?[0-9]+")


def _int64(field: Any, what: str) -> int:
    # The gateway writes int64 fields as JSON strings, and leaves zero values out.
    if field is None:
        return 0
    if isinstance(field, bool) or not isinstance(field, (str, int)):
        raise _GatewayError(f"{what} is not an integer: {field!r}")
    if isinstance(field, str) and not _INT.fullmatch(field):
        raise _GatewayError(f"{what} is not an integer: {field[:40]!r}")
    value = int(field)
    if not -(2**63) <= value < 2**63:
        raise _GatewayError(f"{what} {value} is not a 64-bit integer")
    return value


def _header(answer: dict[str, Any], what: str) -> tuple[int, str]:
    """The (revision, cluster_id) of an answer's header; (0, "") when it has none."""
    header = answer.get("header", {})
    if not isinstance(header, dict):
        raise _GatewayError(f"{what}: header is not an object")
    cluster = header.get("cluster_id", "")
    if not isinstance(cluster, (str, int)) or isinstance(cluster, bool):
        raise _GatewayError(f"{what}: header cluster_id is not an integer")
    return _int64(header.get("revision"), f"{what} revision"), str(cluster)


def _loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except RecursionError:
        raise _GatewayError(f"{what}: JSON nested too deeply") from None
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


def _is_invalid_token(text: str) -> bool:
    # etcd's words for a token it will not take (api/v3rpc/rpctypes/error.go): unknown or
    # expired (simple tokens live 5 minutes unused by default, and die with a restart), or
    # issued before the auth store changed.
    return "invalid auth token" in text or "revision of auth store is old" in text


def _auth_hint(text: str, user: str | None) -> str:
    if "user name is empty" in text and user is None:
        return " (etcd has authentication enabled: give user= and password=)"
    if "authentication failed" in text:
        return f" (check the user name {user!r} and its password)"
    if "permission denied" in text:
        return f" (user {user!r} may not read this prefix: grant it a role that can)"
    return ""


def _describe_error(error: BaseException, tls: bool, client_cert: bool) -> str:
    """A connection failure in words, with a hint for the usual TLS mistakes."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"TLS: {error.verify_message or error} (is ca_file the CA that signed etcd's "
            "certificate, and does the certificate name this host?)"
        )
    if isinstance(error, ssl.SSLError):
        reason = (error.reason or "").upper()
        refusals = ("CERTIFICATE_REQUIRED", "HANDSHAKE_FAILURE", "BAD_CERTIFICATE")
        if not client_cert and any(r in reason for r in refusals):
            return (
                f"TLS: etcd refused the connection ({error.reason}): it requires a client "
                "certificate (give cert_file and key_file)"
            )
        if "WRONG_VERSION_NUMBER" in reason:
            return f"TLS: {error.reason} (is this endpoint plain http://?)"
        return f"TLS: {error.reason or error}"
    if tls and isinstance(error, (ConnectionResetError, BrokenPipeError)) and not client_cert:
        return (
            f"{text} (during TLS: does etcd require a client certificate? give cert_file and "
            "key_file)"
        )
    return text


@dataclass(frozen=True)
class _Endpoint:
    url: str
    tls: bool
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _parse_url(url: str) -> _Endpoint:
    """``http://HOST:PORT`` or ``https://HOST:PORT`` (an optional trailing ``/``; IPv6 as
    ``[::1]:2379``), the forms the Rust watcher takes (etcd/src/http.rs, Endpoint::parse)."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")

    def bad(why: str) -> ValueError:
        return ValueError(f"url {url!r}: {why}")

    for scheme, tls in (("http://", False), ("https://", True)):
        if url.startswith(scheme):
            rest = url[len(scheme) :]
            break
    else:
        raise bad(
            "scheme must be http or https: expected http://HOST:PORT or https://HOST:PORT "
            "(the etcd client URL)"
        )
    authority = rest[:-1] if rest.endswith("/") else rest
    if "@" in authority:
        raise bad("credentials in the URL are not supported (user=)")
    if "?" in authority or "#" in authority:
        raise bad("no query or fragment expected: http(s)://HOST:PORT")
    if "/" in authority:
        raise bad("no path expected: http(s)://HOST:PORT (the API paths are etcd's own)")
    if authority.startswith("["):
        host, found, port = authority[1:].partition("]:")
        if not found:
            raise bad("missing :PORT after [IPV6] (etcd's client port is usually 2379)")
    else:
        host, found, port = authority.rpartition(":")
        if not found or ":" in host:
            raise bad("missing :PORT (etcd's client port is usually 2379)")
    if not host:
        raise bad("has no host")
    # It goes into the Host header: printable ASCII without spaces.
    if not all(33 <= ord(c) < 127 for c in host):
        raise bad("the host must be printable ASCII without spaces")
    # As Rust's str::parse::<u16>(): an optional '+' and ASCII digits; 0 is no port.
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise bad("the port must be a number in 1..=65535")
    return _Endpoint(url, tls, host, int(port))


def _keepalive(sock: socket.socket) -> None:
    """TCP keepalive, so a watch on a dead peer fails in about a minute instead of never."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class _Conn:
    """One HTTP/1.1 exchange on a connection of its own (``Connection: close``).

    Written for hostile answers: the head, every chunk-size line, the trailers, a body and a
    watch message each have a cap, and no read waits past a deadline. For a request the
    deadline is fixed (``deadline``: the whole request, however slowly the bytes trickle).
    On a watch, ``message_timeout`` is set: a message whose first byte has arrived must be
    complete within it, and ``deadline`` is then the idle limit between messages.
    ``abort()`` (from any thread) shuts the socket, which ends a blocked read at once.
    """

    def __init__(
        self, sock: socket.socket, endpoint: _Endpoint, what: str, deadline: float, timeout: float
    ) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self.what = what
        self.deadline: float | None = deadline
        self.timeout = timeout
        self.message_timeout: float | None = None
        self.idle: float | None = None
        self.partial_since: float | None = None  # when the unfinished message began arriving
        self.raw = bytearray()  # received, not yet decoded
        self.pending = bytearray()  # body bytes decoded, not yet consumed (a watch message)
        self.status = 0
        self.framing = "close"  # "length", "chunked" or "close"
        self.left = 0  # bytes left of the body (length) or of the chunk (chunked)
        self.state = "size"  # chunked: "size", "data", "crlf", "trailer", "done"
        self.trailer_bytes = 0

    def abort(self) -> None:
        # shutdown wakes a thread blocked in recv on this socket (close alone does not). The
        # plain socket's shutdown, also for TLS: SSLSocket.shutdown would drop its SSL object
        # under the reading thread.
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def _expired(self) -> _Timeout:
        if self.message_timeout is not None and self.partial_since is not None:
            received = len(self.raw) + len(self.pending)
            return _Timeout(
                f"watch stalled: a message begun {self.message_timeout:g}s "
                f"ago is still incomplete ({received} bytes so far)"
            )
        if self.message_timeout is not None:
            return _Timeout(
                f"watch silent for {self.idle:g}s (idle_timeout), taken "
                "for a dead connection"
            )
        return _Timeout(
            f"{self.what}: no complete answer within {self.timeout:g}s "
            "(timeout)"
        )

    def settimeout(self) -> None:
        """Sets the socket's timeout to what is left until the current deadline."""
        if self.message_timeout is not None and self.partial_since is not None:
            deadline: float | None = self.partial_since + self.message_timeout
        else:
            deadline = self.deadline
        if deadline is None:
            self.sock.settimeout(None)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise self._expired()
        self.sock.settimeout(left)

    def send(self, data: bytes) -> None:
        self.settimeout()
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise self._expired() from None

    def _fill(self) -> bool:
        """Receives more bytes into ``raw``; False at the end of the stream."""
        if not self.raw and not self.pending:
            self.partial_since = None  # nothing unfinished: waiting is idling
        self.settimeout()
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise self._expired() from None
        if not data:
            return False
        if self.partial_since is None:
            self.partial_since = time.monotonic()
        self.raw += data
        return True

    def _closed(self) -> ConnectionError:
        return ConnectionError(f"{self.what}: etcd closed the connection mid-answer")

    def _line(self, limit: int, what: str) -> bytes:
        """One CRLF-terminated line of the framing, without its CRLF."""
        while (end := self.raw.find(b"\r\n")) < 0:
            if len(self.raw) > limit:
                raise _GatewayError(f"{self.what}: {what} longer than {limit} bytes")
            if not self._fill():
                raise self._closed()
        if end > limit:
            raise _GatewayError(f"{self.what}: {what} longer than {limit} bytes")
        line = bytes(self.raw[:end])
        del self.raw[: end + 2]
        return line

    def read_head(self) -> None:
        """Reads the status line and headers (skipping 1xx answers); sets the body framing."""
        while True:
            while (end := self.raw.find(b"\r\n\r\n")) < 0:
                if len(self.raw) > _MAX_HEAD_BYTES:
                    raise _GatewayError(f"{self.what}: HTTP head longer than {_MAX_HEAD_BYTES} "
                                        "bytes")
                if not self._fill():
                    raise ConnectionError(
                        f"{self.what}: etcd closed the connection without an answer"
                    )
            head = bytes(self.raw[:end]).split(b"\r\n")
            del self.raw[: end + 4]
            status = head[0].split(b" ", 2)
            if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not (
                len(status[1]) == 3 and status[1].isdigit()
            ):
                raise _GatewayError(f"{self.what}: not an HTTP/1.1 answer: {head[0][:100]!r}")
            self.status = int(status[1])
            if not 100 <= self.status < 200:
                break
        headers: dict[bytes, bytes] = {}
        for line in head[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise _GatewayError(f"{self.what}: bad HTTP header line {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
        coding = headers.get(b"transfer-encoding")
        length = headers.get(b"content-length")
        if coding is not None:
            if coding.lower().split(b",")[-1].strip() != b"chunked":
                raise _GatewayError(f"{self.what}: unsupported transfer-encoding {coding!r}")
            self.framing = "chunked"
        elif length is not None:
            if not length.isdigit() or len(length) > 18:
                raise _GatewayError(f"{self.what}: bad content-length {length[:40]!r}")
            self.framing, self.left = "length", int(length)

    def _decoded(self) -> bytes:
        """The next piece of the body (at most 64 KiB), b"" at its end."""
        while True:
            if self.framing == "close":
                if not self.raw and not self._fill():
                    return b""
                piece = bytes(self.raw)
                self.raw.clear()
                return piece
            if self.framing == "length" or self.state == "data":
                if self.left == 0:
                    if self.framing == "length":
                        return b""
                    self.state = "crlf"
                    continue
                if not self.raw and not self._fill():
                    raise self._closed()
                piece = bytes(self.raw[: self.left])
                del self.raw[: len(piece)]
                self.left -= len(piece)
                return piece
            if self.state == "size":
                line = self._line(_MAX_CHUNK_LINE, "chunk-size line")
                digits = line.split(b";", 1)[0].strip()
                if not digits or len(digits) > 15 or digits.strip(b"0123456789abcdefABCDEF"):
                    raise _GatewayError(f"{self.what}: bad chunk size {line[:40]!r}")
                self.left = int(digits, 16)
                self.state = "data" if self.left else "trailer"
            elif self.state == "crlf":
                if self._line(2, "end of chunk"):
                    raise _GatewayError(f"{self.what}: chunk not followed by CRLF")
                self.state = "size"
            elif self.state == "trailer":
                line = self._line(_MAX_HEAD_BYTES, "trailer")
                self.trailer_bytes += len(line) + 2
                if self.trailer_bytes > _MAX_HEAD_BYTES:
                    raise _GatewayError(f"{self.what}: trailers longer than {_MAX_HEAD_BYTES} "
                                        "bytes")
                if not line:
                    self.state = "done"
            else:
                return b""

    def read_body(self, limit: int) -> bytes:
        """The whole body; _TooLarge past ``limit`` bytes (checked before reading it all)."""
        if self.framing == "length" and self.left > limit:
            raise self._too_large(limit, f"announces {self.left} bytes")
        body = bytearray()
        while piece := self._decoded():
            body += piece
            if len(body) > limit:
                raise self._too_large(limit, "kept coming")
        return bytes(body)

    def _too_large(self, limit: int, how: str) -> _TooLarge:
        return _TooLarge(
            f"{self.what}: the answer {how}, more than the "
            f"{limit}-byte cap (max_response_bytes); not read"
        )

    def read_error_body(self) -> str:
        """The start of an error answer's body, as text for the log: at most MAX_ERROR_BYTES
        are read, the rest is dropped with the connection."""
        body = bytearray()
        try:
            while len(body) <= MAX_ERROR_BYTES and (piece := self._decoded()):
                body += piece
        except (OSError, _EtcdError) as e:
            body += f" [... then {type(e).__name__}]".encode()
        cut = len(body) > MAX_ERROR_BYTES
        data = bytes(body[:MAX_ERROR_BYTES])
        try:
            text = _error_text(json.loads(data))
        except (ValueError, RecursionError, AttributeError):
            text = data.decode("utf-8", "backslashreplace")
        if cut:
            text += f" [error body cut at {MAX_ERROR_BYTES} bytes]"
        return text

    def read_message(self, limit: int) -> bytes | None:
        """The next newline-terminated watch message (without the newline); None at the end
        of the stream; _TooLarge if ``limit`` bytes pass without a newline."""
        scanned = 0
        while (end := self.pending.find(b"\n", scanned)) < 0:
            if len(self.pending) > limit:
                raise _TooLarge(
                    f"a watch message longer than {limit} bytes "
                    "(max_response_bytes) and still no end: dropped"
                )
            scanned = len(self.pending)
            piece = self._decoded()
            if not piece:
                if self.pending.strip():
                    raise self._closed()
                return None
            self.pending += piece
        message = bytes(self.pending[:end])
        del self.pending[: end + 1]
        return message


class EtcdMembership(Generic[_B]):
    """Keeps ``balancer``'s membership equal to the nodes under ``prefix`` in etcd at ``url``.

    ``balancer`` is a ``liblb.Balancer`` (or anything with its ``update``, see
    ``SupportsUpdate``).
    ``url`` is the etcd client URL (``http://host:port``, or ``https://``), or a list of the
    cluster's client URLs: requests go to the one that answered last, and a connection failure
    moves on to the next. ``prefix`` is the ``P`` of the keys ``P/<node-id>`` (no trailing
    slash). ``on_change(change)`` is called from the watcher thread after each applied
    membership (a ``Change``); an exception it raises (any, SystemExit included) is logged and
    otherwise ignored. ``backoff`` is the first reconnect delay in seconds, doubled per failure
    up to ``max_backoff`` (each delay randomised between half and all of it, so many
    processes do not reconnect in step); ``timeout`` is the deadline of each request to an
    endpoint (connecting, sending and reading the whole answer) and of each watch message once
    its first byte has arrived; a watch silent for ``idle_timeout`` seconds is reopened (None:
    never). ``max_response_bytes`` caps a range answer and a watch message.

    TLS (``https://`` URLs): ``ca_file`` is the CA bundle etcd's certificate is checked
    against (default: the system's), ``cert_file``/``key_file`` the client certificate for
    etcd's ``--client-cert-auth``. Authentication: ``user`` and ``password`` (etcd's
    ``/v3/auth/authenticate``; an expired token is renewed once and the request retried).

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
        url: str | Sequence[str],
        prefix: str,
        *,
        on_change: Callable[[Change], object] | None = None,
        backoff: float = 0.1,
        max_backoff: float = 10.0,
        timeout: float = 10.0,
        idle_timeout: float | None = 900.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        ca_file: str | os.PathLike[str] | None = None,
        cert_file: str | os.PathLike[str] | None = None,
        key_file: str | os.PathLike[str] | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        if not callable(getattr(balancer, "update", None)):
            raise TypeError(
                f"balancer must be a liblb.Balancer (something with update(nodes)), "
                f"not {type(balancer).__name__}"
            )
        if isinstance(url, (bytes, bytearray)) or not isinstance(url, (str, Sequence)):
            raise TypeError(f"url must be a str or a list of str, not {type(url).__name__}")
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("url: no etcd endpoint given")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        if on_change is not None and not callable(on_change):
            raise TypeError(f"on_change must be callable, not {type(on_change).__name__}")
        for name, seconds in (
            ("backoff", backoff),
            ("max_backoff", max_backoff),
            ("timeout", timeout),
            ("idle_timeout", 1.0 if idle_timeout is None else idle_timeout),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise TypeError(f"{name} must be a number of seconds, not {type(seconds).__name__}")
            if not 0 < seconds < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, not {seconds}")
        if max_backoff < backoff:
            raise ValueError(f"max_backoff ({max_backoff}) is less than backoff ({backoff})")
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int):
            raise TypeError(
                f"max_response_bytes must be an int, not {type(max_response_bytes).__name__}"
            )
        if max_response_bytes < 1024:
            raise ValueError(f"max_response_bytes must be at least 1024, not {max_response_bytes}")
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
        self._endpoints = [_parse_url(u) for u in urls]
        self._ssl = _ssl_context(self._endpoints, ca_file, cert_file, key_file)
        self._client_cert = cert_file is not None
        if user is not None or password is not None:
            if not isinstance(user, str) or not user:
                raise ValueError("user must be a non-empty str when a password is given")
            if not isinstance(password, str):
                raise TypeError(f"password must be a str, not {type(password).__name__}")
        self._user = user
        self._password = password
        self._token: str | None = None
        self._current = 0  # the endpoint to try first: the one that answered last
        self._balancer = balancer
        self._prefix = prefix
        self._key_prefix = key_prefix
        # The range end of a prefix: its last byte + 1 ('/' + 1 = '0'), as etcd's own clients do.
        self._range_end = key_prefix[:-1] + b"0"
        self._on_change = on_change
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._timeout = float(timeout)
        self._idle = None if idle_timeout is None else float(idle_timeout)
        self._max_response = max_response_bytes
        self._random = random.Random()  # jitter from OS entropy: processes never in step

        # Written by the watcher thread only; read by others under _cond.
        self._cond = threading.Condition()
        self._revision = 0  # the revision of the membership the balancer holds
        # The revision read up to (the watch goes on from the next one): ahead of _revision
        # while update() fails, since those changes are consumed, as in the Rust watcher.
        self._read = 0
        self._cluster = ""  # the cluster_id the membership was read from
        self._members: dict[str, Member] = {}
        self._applied: list[tuple[str, int] | Node] | None = None
        self._need_range = True
        self._watch_worked = False  # the current attempt's watch delivered something
        self._created_at: float | None = None  # when the current attempt's watch was created

        self._lock = threading.Lock()  # guards _conn (and its sock), _thread and _stopping
        self._stopping = threading.Event()
        self._conn: _Conn | None = None
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
        """The etcd revision of the membership the balancer holds (0 before the first).

        It does not move when ``update()`` fails: it stays at the last good membership."""
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

        Shuts the open connection down from this thread, so it returns promptly even while the
        watcher waits on etcd. Calling it again, before ``start``, or from ``on_change`` is fine.
        """
        with self._lock:
            self._stopping.set()
            conn, thread = self._conn, self._thread
        if conn is not None:
            conn.abort()
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
        urls = [e.url for e in self._endpoints]
        return (
            f"EtcdMembership(url={urls[0] if len(urls) == 1 else urls!r}, "
            f"prefix={self._prefix!r}, revision={self.revision}, nodes={len(self.members)})"
        )

    # -- the watcher thread ------------------------------------------------------------------

    @property
    def _url(self) -> str:
        """The endpoint requests go to first (for the log)."""
        return self._endpoints[self._current].url

    def _run(self) -> None:
        delay = self._backoff
        while not self._stopping.is_set():
            self._watch_worked = False
            self._created_at = None
            error: BaseException | None = None  # an unexpected one: logged with its traceback
            where = f" {self._url}"
            try:
                if self._need_range:
                    self._resync()
                self._watch()
                continue  # _watch returns only when stopping
            except _Stopping:
                break
            except _Resync as e:
                # Not a failure of etcd's, but paused and backed off all the same, so a watch
                # that needs a resync at once again cannot spin.
                self._need_range = True
                failure = f"{e}; resyncing with a range"
            except (OSError, _EtcdError) as e:
                if self._stopping.is_set():
                    break
                if isinstance(e, _AuthExpired):
                    self._token = None  # refused again, or mid-watch: log in afresh next time
                if isinstance(e, _Unreachable):
                    where = ""  # its message names each endpoint
                failure = (
                    str(e)
                    if isinstance(e, (_EtcdError, _Timeout, _Unreachable))
                    else f"{type(e).__name__}: {e}"
                )
            except BaseException as e:  # a bug: say so loudly, keep the balancer, keep trying
                if self._stopping.is_set():
                    break
                failure = f"unexpected {type(e).__name__}: {e}"
                error = e
                self._need_range = True  # whatever state it left, a range starts clean
            # A watch that delivered a message after its creation, or stayed open for
            # max_backoff, worked: start the backoff over.
            if self._watch_worked or (
                self._created_at is not None
                and time.monotonic() - self._created_at >= self._max_backoff
            ):
                delay = self._backoff
            # Randomised, so processes that lost etcd together do not come back in step.
            pause = self._random.uniform(delay / 2, delay)
            log.warning("etcd%s: %s; retrying in %.2fs", where, failure, pause, exc_info=error)
            self._stopping.wait(pause)
            delay = min(delay * 2, self._max_backoff)

    def _register(self, conn: _Conn) -> None:
        with self._lock:
            if self._stopping.is_set():
                conn.sock.close()
                raise _Stopping
            self._conn = conn

    def _close(self, conn: _Conn) -> None:
        with self._lock:
            if self._conn is conn:
                self._conn = None
        conn.sock.close()

    def _connect(self, endpoint: _Endpoint, what: str) -> _Conn:
        """A connection to ``endpoint``, registered for ``stop()``, with its deadline set."""
        deadline = time.monotonic() + self._timeout
        try:
            sock = socket.create_connection((endpoint.host, endpoint.port), timeout=self._timeout)
        except TimeoutError:
            raise _Timeout(f"connecting took more than {self._timeout:g}s (timeout)") from None
        conn = _Conn(sock, endpoint, what, deadline, self._timeout)
        self._register(conn)
        try:
            _keepalive(sock)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if endpoint.tls:
                assert self._ssl is not None
                tls = self._ssl.wrap_socket(
                    sock, server_hostname=endpoint.host, do_handshake_on_connect=False
                )
                # wrap_socket detached `sock` (its descriptor is now tls's; wrap_socket
                # releases the GIL after that, in getpeername). A stop() between the detach
                # and the swap below shut the descriptor-less `sock`, that is nothing: the
                # watch then opened and blocked in its idle read (idle_timeout, 15 minutes
                # in the CLI), and stop() waited for it. So the swap is made under the lock
                # stop() takes, and a stop() that came before it is seen here.
                with self._lock:
                    conn.sock = tls  # stop() shuts this one from now on
                    stopping = self._stopping.is_set()
                if stopping:
                    raise _Stopping
                conn.settimeout()
                try:
                    tls.do_handshake()
                except TimeoutError:
                    raise conn._expired() from None
        except BaseException:
            self._close(conn)
            raise
        return conn

    def _each_endpoint(self, attempt: Callable[[_Endpoint], _T]) -> _T:
        """Runs ``attempt`` on the endpoint that answered last, then on the others in turn
        while the failure is a connection failure (OSError: refused, reset, TLS, a missed
        deadline) or an HTTP 5xx answer (no leader, request timed out: another member may
        serve); remembers the endpoint that answered. Any other error is etcd's answer and
        ends the request."""
        failures: list[str] = []
        first = self._current
        count = len(self._endpoints)
        for i in range(count):
            at = (first + i) % count
            endpoint = self._endpoints[at]
            try:
                answer = attempt(endpoint)
            except (OSError, _ServerError) as e:
                if self._stopping.is_set():
                    raise _Stopping from None
                text = (
                    str(e)
                    if isinstance(e, _ServerError)
                    else _describe_error(e, endpoint.tls, self._client_cert)
                )
                failure = f"{endpoint.url}: {text}"
                if count > 1:
                    log.info("etcd %s; trying the next endpoint", failure)
                failures.append(failure)
                continue
            self._current = at
            return answer
        raise _Unreachable("; ".join(failures))

    def _request(
        self, endpoint: _Endpoint, path: str, body: dict[str, Any], token: str | None
    ) -> _Conn:
        """Connects to ``endpoint`` and sends a POST; returns the exchange after its head."""
        conn = self._connect(endpoint, f"POST {path}")
        try:
            data = json.dumps(body).encode("ascii")
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {endpoint.host_header}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n"
            )
            if token is not None:
                head += f"Authorization: {token}\r\n"
            conn.send(head.encode("ascii") + b"\r\n" + data)
            conn.read_head()
        except BaseException:
            self._close(conn)
            raise
        return conn

    def _refused(self, path: str, status: int, text: str, token: str | None) -> _EtcdError:
        """The error for an answer that is not 200: _AuthExpired when etcd refused the
        token, _ServerError for a 5xx (tried on the next endpoint), else _GatewayError."""
        if token is not None and _is_invalid_token(text):
            return _AuthExpired(text)
        message = f"POST {path}: HTTP {status}: {text}{_auth_hint(text, self._user)}"
        return _ServerError(message) if 500 <= status <= 599 else _GatewayError(message)

    def _unary(
        self, endpoint: _Endpoint, path: str, body: dict[str, Any], token: str | None
    ) -> dict[str, Any]:
        """One request to ``endpoint`` and its JSON answer; an error answer raised."""
        conn = self._request(endpoint, path, body, token)
        try:
            if conn.status != 200:
                raise self._refused(path, conn.status, conn.read_error_body(), token)
            data = conn.read_body(self._max_response)
        finally:
            self._close(conn)
        parsed = _loads(data, f"POST {path}")
        if "error" in parsed:
            text = _error_text(parsed)
            if token is not None and _is_invalid_token(text):
                raise _AuthExpired(text)
            raise _GatewayError(f"POST {path}: {text}")
        return parsed

    def _authenticate(self, endpoint: _Endpoint) -> str | None:
        """The auth token to send (logging in at ``endpoint`` when there is none), or None.

        Only at ``endpoint``: the caller is already going round the endpoints, and a login
        with a failover of its own would make N x N connects with N endpoints down."""
        if self._user is None:
            return None
        if self._token is None:
            answer = self._unary(
                endpoint,
                "/v3/auth/authenticate",
                {"name": self._user, "password": self._password},
                None,
            )
            token = answer.get("token")
            # It goes into a header line: printable ASCII only.
            usable = isinstance(token, str) and token.isascii() and token.isprintable()
            if not usable or not token:
                raise _GatewayError("authenticate: no usable token in the answer")
            self._token = token
            log.info("etcd %s: authenticated as %r", endpoint.url, self._user)
        return self._token

    def _with_token(self, endpoint: _Endpoint, send: Callable[[str | None], _T]) -> _T:
        """``send(token)`` at ``endpoint``; a refused token is renewed there once and the
        request sent again."""
        try:
            return send(self._authenticate(endpoint))
        except _AuthExpired as e:
            log.info("etcd %s: %s; authenticating again", endpoint.url, e)
            self._token = None
            return send(self._authenticate(endpoint))

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A unary request with the auth token, across the endpoints."""
        return self._each_endpoint(
            lambda endpoint: self._with_token(
                endpoint, lambda token: self._unary(endpoint, path, body, token)
            )
        )

    def _resync(self) -> None:
        """Range over the prefix and replace the membership with it."""
        answer = self._call(
            "/v3/kv/range",
            {"key": _b64(self._key_prefix), "range_end": _b64(self._range_end)},
        )
        revision, cluster = _header(answer, "range")
        if revision <= 0:
            raise _GatewayError(f"range answered revision {revision} (must be > 0)")
        if answer.get("more"):
            raise _GatewayError("range answered only part of the prefix (more: true)")
        kvs = answer.get("kvs", [])
        if not isinstance(kvs, list):
            raise _GatewayError("range kvs is not a list")
        if self._cluster and cluster != self._cluster:
            log.warning(
                "etcd %s: now cluster %s, the membership was read from cluster %s",
                self._url, cluster or "(none)", self._cluster,
            )
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
        self._cluster = cluster
        self._commit(members, revision, (), True, rejected)
        self._need_range = False

    def _watch(self) -> None:
        """Watches from the last revision read + 1 until the stream fails or we stop."""
        start = self._read + 1
        request = {
            "create_request": {
                "key": _b64(self._key_prefix),
                "range_end": _b64(self._range_end),
                "start_revision": str(start),
                # etcd then sends a message every 10 minutes on a quiet prefix, which is what
                # tells a quiet watch from a dead connection (idle_timeout).
                "progress_notify": True,
            }
        }

        def open_watch(endpoint: _Endpoint, token: str | None) -> tuple[_Conn, dict[str, Any]]:
            conn = self._request(endpoint, "/v3/watch", request, token)
            try:
                if conn.status != 200:
                    raise self._refused("/v3/watch", conn.status, conn.read_error_body(), token)
                # The created message comes within the request's deadline too.
                line = conn.read_message(self._max_response)
                if line is None:
                    raise ConnectionError("etcd closed the watch stream before answering")
                return conn, self._result(line)
            except BaseException:
                self._close(conn)
                raise

        try:
            # A refused token (an HTTP error, an error message or a cancellation) is renewed
            # at the endpoint that refused it, once, and the watch sent again.
            conn, result = self._each_endpoint(
                lambda endpoint: self._with_token(
                    endpoint, lambda token: open_watch(endpoint, token)
                )
            )
        except _TooLarge as e:
            raise _Resync(f"{e}; reading the prefix instead") from None
        try:
            if not result.get("created"):
                raise _GatewayError("watch: the first message is not 'created'")
            self._check_header(result, "watch created")
            log.info(
                "etcd %s: watching %r from revision %d",
                self._url,
                self._key_prefix.decode("utf-8"),
                start,
            )
            self._created_at = time.monotonic()
            # From here on: no deadline for the next message but idle_timeout (a quiet prefix
            # is normal; progress notifications come every 10 minutes), and a message whose
            # first byte arrived must be complete within timeout.
            conn.message_timeout = self._timeout
            conn.idle = self._idle
            while True:
                self._handle(result)
                conn.deadline = None if self._idle is None else time.monotonic() + self._idle
                line = conn.read_message(self._max_response)
                if self._stopping.is_set():
                    return
                if line is None:
                    raise ConnectionError("etcd closed the watch stream")
                if not line.strip():
                    continue
                result = self._result(line)
                self._check_header(result, "watch")
        except OSError:
            if self._stopping.is_set():
                return
            raise
        except _TooLarge as e:
            # Following the watch past it is impossible, and resuming would meet the same
            # message again: a range reads the state that message led to instead.
            raise _Resync(f"{e}; reading the prefix instead") from None
        finally:
            self._close(conn)

    def _result(self, line: bytes) -> dict[str, Any]:
        """The result of one watch message; errors, compaction and cancellation raised."""
        message = _loads(line, "watch")
        if "error" in message:
            text = _error_text(message)
            if self._user is not None and _is_invalid_token(text):
                raise _AuthExpired(f"watch: {text}")
            raise _GatewayError(f"watch: {text}")
        result = message.get("result")
        if not isinstance(result, dict):
            raise _GatewayError(f"watch: no result in {line[:200]!r}")
        compact = _int64(result.get("compact_revision"), "compact revision")
        if compact:
            raise _Compacted(compact)
        if result.get("canceled"):
            reason = str(result.get("cancel_reason") or "no reason given")
            if self._user is not None and _is_invalid_token(reason):
                raise _AuthExpired(f"watch canceled: {reason}")
            raise _GatewayError(
                f"etcd canceled the watch: {reason}{_auth_hint(reason, self._user)}"
            )
        return result

    def _check_header(self, result: dict[str, Any], what: str) -> None:
        """A watch whose etcd went back in time or is another cluster cannot be followed."""
        current, cluster = _header(result, what)
        if cluster and self._cluster and cluster != self._cluster:
            raise _Resync(
                f"{what}: this etcd is cluster {cluster}, the membership was read from "
                f"cluster {self._cluster} (another cluster behind the same endpoint?)"
            )
        if result.get("created") and current < self._read:
            # etcd's history went back (a wiped or restored data directory): the revisions
            # we hold mean nothing there. Start over from a range.
            raise _Resync(
                f"{what}: etcd's revision {current} is behind ours ({self._read}), data "
                "restored or wiped?"
            )

    def _handle(self, result: dict[str, Any]) -> None:
        events = result.get("events")
        if events:
            self._apply_events(events)
            self._watch_worked = True
        elif not result.get("created"):
            self._watch_worked = True  # a progress notification: the watch is alive

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
        # Every event must come after the revision read last, in order: a watch that
        # answers otherwise (etcd's history went back, or not etcd) is refused whole.
        revisions: list[int] = []
        for event in events:
            kv = event.get("kv") if isinstance(event, dict) else None
            if not isinstance(kv, dict):
                raise _GatewayError("watch event without kv")
            revision = _int64(kv.get("mod_revision"), "event revision")
            floor = revisions[-1] if revisions else self._read + 1
            if revision < floor:
                raise _Resync(
                    f"watch event at revision {revision} after revision "
                    f"{revisions[-1] if revisions else self._read}: etcd's history went "
                    "back?"
                )
            revisions.append(revision)
        members = dict(self._members)
        rejected: list[str] = []
        for event in events:
            kv = event["kv"]
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
        self._commit(members, revisions[-1], tuple(revisions), False, rejected)

    def _commit(
        self,
        members: dict[str, Member],
        revision: int,
        event_revisions: tuple[int, ...],
        resync: bool,
        rejected: list[str],
    ) -> None:
        """Applies a membership: one update() if the node list changed, then on_change.

        The changes up to ``revision`` are consumed either way (the watch goes on after
        them); ``revision`` (what wait_for_revision waits on) moves only when the balancer
        holds the membership, as in the Rust watcher."""
        # Sorted by id: str order is code-point order, which is UTF-8 byte order.
        ordered = dict(sorted(members.items()))
        nodes = [member.node(node_id) for node_id, member in ordered.items()]
        previous = self._applied
        applied = True
        if nodes != previous:
            try:
                self._balancer.update(nodes)
            except BaseException as e:  # a liblb.Error, or whatever a wrapper raises
                log.error(
                    "etcd %s: update() at revision %d failed: %s: %s; keeping the last good "
                    "membership",
                    self._url,
                    revision,
                    type(e).__name__,
                    e,
                    exc_info=None if isinstance(e, LiblbError) else e,
                )
                applied = False
        with self._cond:
            self._members = ordered
            self._read = revision
            if applied:
                self._applied = nodes
        if applied and self._on_change is not None:
            before = dict(_pair(n) for n in previous or [])
            after = dict(_pair(n) for n in nodes)
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
            except BaseException as e:  # SystemExit and KeyboardInterrupt too: logged, ignored
                log.error(
                    "etcd %s: on_change raised at revision %d: %s: %s",
                    self._url,
                    revision,
                    type(e).__name__,
                    e,
                    exc_info=e,
                )
        # The revision moves last, and only when update() worked: once wait_for_revision(R)
        # returns, the balancer holds R's membership and on_change for R has returned.
        if applied:
            with self._cond:
                self._revision = revision
                self._cond.notify_all()


def _ssl_context(
    endpoints: list[_Endpoint],
    ca_file: str | os.PathLike[str] | None,
    cert_file: str | os.PathLike[str] | None,
    key_file: str | os.PathLike[str] | None,
) -> ssl.SSLContext | None:
    """The TLS settings for the https:// endpoints (None without any); a file that cannot be
    used is a ValueError naming it, at construction rather than at each reconnect."""
    for name, path in (("ca_file", ca_file), ("cert_file", cert_file), ("key_file", key_file)):
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"{name} must be a path, not {type(path).__name__}")
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"{name} {os.fspath(path)!r} is not a readable file")
    if key_file is not None and cert_file is None:
        raise ValueError("key_file given without cert_file (the client certificate)")
    if not any(e.tls for e in endpoints):
        if ca_file is not None or cert_file is not None:
            raise ValueError("ca_file/cert_file given, but no endpoint is https://")
        return None
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as e:
        raise ValueError(f"ca_file {os.fspath(ca_file or '')!r}: not a CA bundle ({e})") from None
    if cert_file is not None:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (ssl.SSLError, OSError) as e:
            raise ValueError(
                f"cert_file {os.fspath(cert_file)!r} / key_file "
                f"{os.fspath(key_file) if key_file is not None else '(in cert_file)'!r}: "
                f"not a certificate and its key ({e})"
            ) from None
    return context


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
    parser.add_argument(
        "--url",
        "--etcd",
        required=True,
        action="append",
        dest="urls",
        metavar="URL",
        help="etcd client URL, e.g. http://127.0.0.1:2379; repeat for more members of the cluster",
    )
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
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=900.0,
        help="reopen a watch silent this long, seconds (default 900)",
    )
    parser.add_argument("--cacert", metavar="FILE", help="CA bundle for https:// endpoints")
    parser.add_argument("--cert", metavar="FILE", help="client certificate (mutual TLS)")
    parser.add_argument(
        "--key-file",
        metavar="FILE",
        help="the client certificate's private key (--key places keys; default: in --cert)",
    )
    parser.add_argument(
        "--user",
        metavar="NAME[:PASSWORD]",
        help="etcd user; the password after the colon, else from $LB_ETCD_PASSWORD",
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
    nodes = " ".join(f"{i}={w}" for i, w in map(_pair, change.nodes)) or "(none)"
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

    user: str | None = None
    password: str | None = None
    if args.user is not None:
        user, colon, password = args.user.partition(":")
        if not colon:
            password = os.environ.get("LB_ETCD_PASSWORD")
            if password is None:
                parser.error(
                    f"--user {user}: no password (give --user NAME:PASSWORD or set "
                    "LB_ETCD_PASSWORD)"
                )
    try:
        watcher = EtcdMembership(
            balancer,
            args.urls,
            args.prefix,
            on_change=on_change,
            backoff=args.backoff,
            max_backoff=args.max_backoff,
            timeout=args.timeout,
            idle_timeout=args.idle_timeout,
            ca_file=args.cacert,
            cert_file=args.cert,
            key_file=args.key_file,
            user=user,
            password=password,
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
