"""liblb.etcd against a fake etcd serving hostile or broken answers (issue 20).

`FakeEtcd` is a small threaded HTTP server on 127.0.0.1 (an OS-chosen port) whose answers a
test scripts per request: a watch message that never ends, a range body that never ends, a huge
500 body, a trickled answer, a watch behind the range's revision, a compaction loop, revisions
that go down, another cluster_id, malformed ranges. Each test checks what the issue asked for:
memory bounded (counted as the bytes the fake managed to send on one connection before the
watcher gave up: a watcher that buffers without limit lets the fake reach its own bound),
a log line naming the problem, a bounded request rate in the loops, and the last good
membership kept. Every server stops at the end of its test; every send loop has a bound.
"""

from __future__ import annotations

import base64
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import liblb
import liblb.etcd
from liblb.etcd import MAX_ERROR_BYTES, MAX_RESPONSE_BYTES, Change, EtcdMembership

BOUND = 15.0  # how long a test waits for something that must happen (the machine is shared)
MiB = 1024 * 1024
# What a fake sends at most on one connection. A watcher without a cap reads all of it, so
# "the watcher gave up before the fake reached this" is the memory bound under test.
SEND_BOUND = MAX_RESPONSE_BYTES + 96 * MiB
# Socket buffers on loopback hold a few MiB that the fake counts as sent but nobody read.
SLACK = 16 * MiB


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode("ascii")


@dataclass
class Request:
    """One request the fake received, and what the fake sent back on its connection."""

    path: str
    body: dict[str, Any]
    sock: socket.socket
    stopping: threading.Event
    at: float = field(default_factory=time.monotonic)
    sent: int = 0
    peer_gone: bool = False  # a send failed: the watcher closed the connection
    hit_bound: bool = False  # the fake sent SEND_BOUND bytes and gave up itself
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names

    def send(self, data: bytes) -> bool:
        """Sends; False once the peer is gone or the test is over."""
        if self.stopping.is_set() or self.peer_gone:
            return False
        try:
            self.sock.sendall(data)
        except OSError:
            self.peer_gone = True
            return False
        self.sent += len(data)
        return True

    def json(self, answer: Any, status: str = "200 OK") -> None:
        body = json.dumps(answer).encode()
        self.send(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    def stream_head(self) -> None:
        self.send(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )

    def chunk(self, data: bytes) -> bool:
        return self.send(b"%x\r\n%s\r\n" % (len(data), data))

    def message(self, result: dict[str, Any]) -> bool:
        """One watch message, as etcd's gateway writes it: JSON and a newline, one chunk."""
        return self.chunk(json.dumps({"result": result}).encode() + b"\n")

    def endless(self, piece: bytes, chunked: bool) -> None:
        """Sends `piece` again and again until the peer gives up (or SEND_BOUND)."""
        while self.sent < SEND_BOUND:
            if not (self.chunk(piece) if chunked else self.send(piece)):
                return
        self.hit_bound = True

    def trickle(self, data: bytes, interval: float) -> None:
        for i in range(len(data)):
            if not self.send(data[i : i + 1]) or self.stopping.wait(interval):
                return

    def hold(self) -> None:
        """Keeps the connection open, sending nothing, until the peer closes or the test ends."""
        while not self.stopping.is_set():
            readable, _, _ = select.select([self.sock], [], [], 0.05)
            if readable:
                try:
                    if not self.sock.recv(1024):
                        return
                except OSError:
                    return


class FakeEtcd:
    """A fake etcd JSON gateway: `script(request)` answers each request on its socket."""

    def __init__(self, script: Callable[[Request], None]) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.requests: list[Request] = []
        self.sockets: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self.accept, daemon=True)
        self.acceptor.start()

    def accept(self) -> None:
        self.listener.settimeout(0.05)  # close() does not wake a blocked accept(): poll
        while not self.stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            sock.settimeout(None)
            with self.lock:
                if self.stopping.is_set():
                    sock.close()
                    return
                self.sockets.append(sock)
                thread = threading.Thread(target=self.serve, args=(sock,), daemon=True)
                self.threads.append(thread)
            thread.start()

    def serve(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(BOUND)
            data = b""
            while b"\r\n\r\n" not in data:
                more = sock.recv(65536)
                if not more:
                    return
                data += more
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            length = next(
                int(line.split(":", 1)[1])
                for line in lines
                if line.lower().startswith("content-length:")
            )
            while len(body) < length:
                more = sock.recv(65536)
                if not more:
                    return
                body += more
            sock.settimeout(None)
            request = Request(lines[0].split(" ")[1], json.loads(body), sock, self.stopping)
            for line in lines[1:]:
                name, _, value = line.partition(":")
                request.headers[name.strip().lower()] = value.strip()
            with self.lock:
                self.requests.append(request)
            self.script(request)
        except OSError:
            pass
        finally:
            sock.close()

    def paths(self, path: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        with self.lock:
            self.stopping.set()
            sockets, threads = list(self.sockets), list(self.threads)
        self.acceptor.join(BOUND)
        self.listener.close()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in threads:
            thread.join(BOUND)


Start = Callable[[Callable[[Request], None]], FakeEtcd]


@pytest.fixture
def fake() -> Iterator[Start]:
    servers: list[FakeEtcd] = []

    def start(script: Callable[[Request], None]) -> FakeEtcd:
        servers.append(FakeEtcd(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def header(revision: int, cluster: str = "7") -> dict[str, str]:
    return {"cluster_id": cluster, "member_id": "1", "revision": str(revision), "raft_term": "2"}


def range_answer(revision: int, nodes: dict[str, str], cluster: str = "7") -> dict[str, Any]:
    kvs = [
        {"key": b64(f"svc/{n}"), "value": b64(v), "mod_revision": str(revision)}
        for n, v in sorted(nodes.items())
    ]
    return {"header": header(revision, cluster), "kvs": kvs, "count": str(len(kvs))}


def created(revision: int, cluster: str = "7") -> dict[str, Any]:
    return {"header": header(revision, cluster), "watch_id": "0", "created": True}


def put(node: str, revision: int, value: str = "") -> dict[str, Any]:
    return {
        "header": header(revision),
        "events": [{"kv": {"key": b64(f"svc/{node}"), "value": b64(value),
                           "mod_revision": str(revision)}}],
    }


def watcher(
    balancer: liblb.Balancer, url: str, on_change: Callable[[Change], object] | None = None,
    **options: Any
) -> EtcdMembership[liblb.Balancer]:
    settings: dict[str, Any] = {"backoff": 0.05, "max_backoff": 0.2, "timeout": 5.0}
    settings.update(options)
    return EtcdMembership(balancer, url, "svc", on_change=on_change, **settings)


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, f"not within {BOUND} s: {what}"
        time.sleep(0.01)


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in list(caplog.records) if r.name == "liblb.etcd")


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="liblb.etcd")
    return caplog


def good_range_then(watch: Callable[[Request], None]) -> Callable[[Request], None]:
    """A script: every range answers {a} at revision 5; every watch runs `watch`."""

    def script(request: Request) -> None:
        if request.path == "/v3/kv/range":
            request.json(range_answer(5, {"a": ""}))
        else:
            watch(request)

    return script


# -- finding 3: every read has a cap ----------------------------------------------------------


def test_endless_watch_message_is_capped(fake: Start, logs: pytest.LogCaptureFixture) -> None:
    def watch(request: Request) -> None:
        request.stream_head()
        request.message(created(5))
        request.endless(b"x" * 65536, chunked=True)  # a message that never ends

    server = fake(good_range_then(watch))
    balancer = liblb.Balancer("ring", [])
    with watcher(balancer, server.url) as w:
        assert w.wait_for_revision(5, BOUND)
        eventually(lambda: "a watch message longer than" in log_text(logs), "the cap logged")
        eventually(lambda: server.paths("/v3/watch")[0].peer_gone, "the watcher hung up")
        # Resuming would meet the same message again: it reads the prefix instead.
        eventually(lambda: len(server.paths("/v3/kv/range")) >= 2, "a range instead")
        assert balancer.nodes() == [("a", 1)]
    first = server.paths("/v3/watch")[0]
    assert not first.hit_bound
    assert first.sent < MAX_RESPONSE_BYTES + SLACK, first.sent
    assert f"longer than {MAX_RESPONSE_BYTES} bytes (max_response_bytes)" in log_text(logs)
    assert "reading the prefix instead" in log_text(logs)


@pytest.mark.parametrize("framing", ["chunked", "close", "content-length"])
def test_endless_range_body_is_capped(
    fake: Start, logs: pytest.LogCaptureFixture, framing: str
) -> None:
    def script(request: Request) -> None:
        if framing == "content-length":
            # Announces 1 GiB: refused from the head, before reading any of it.
            request.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n{\"kvs\": [")
            request.endless(b" " * 65536, chunked=False)
            return
        encoding = "Transfer-Encoding: chunked\r\n" if framing == "chunked" else ""
        request.send(f"HTTP/1.1 200 OK\r\n{encoding}\r\n".encode())
        request.endless(b'{"kvs": [' * 7000, chunked=framing == "chunked")

    server = fake(script)
    balancer = liblb.Balancer("ring", [("kept", 1)])
    with watcher(balancer, server.url):
        eventually(lambda: "max_response_bytes" in log_text(logs), "the cap logged")
        eventually(lambda: server.paths("/v3/kv/range")[0].peer_gone, "the watcher hung up")
        assert balancer.nodes() == [("kept", 1)]
    first = server.paths("/v3/kv/range")[0]
    assert not first.hit_bound
    assert first.sent < MAX_RESPONSE_BYTES + SLACK, first.sent
    if framing == "content-length":
        assert "announces 1073741824 bytes" in log_text(logs)
        assert first.sent < SLACK


def test_huge_error_body_is_cut(fake: Start, logs: pytest.LogCaptureFixture) -> None:
    def script(request: Request) -> None:
        request.send(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\n")
        request.endless(b"E" * 65536, chunked=False)

    server = fake(script)
    balancer = liblb.Balancer("ring", [("kept", 1)])
    with watcher(balancer, server.url):
        eventually(lambda: "HTTP 500" in log_text(logs), "the error logged")
        eventually(lambda: server.paths("/v3/kv/range")[0].peer_gone, "the watcher hung up")
        assert balancer.nodes() == [("kept", 1)]
    first = server.paths("/v3/kv/range")[0]
    assert first.sent < SLACK, first.sent
    assert f"[error body cut at {MAX_ERROR_BYTES} bytes]" in log_text(logs)
    # The log shows the start of the body, not all of it.
    assert max(len(r.getMessage()) for r in logs.records) < MAX_ERROR_BYTES + 1000


# -- finding 4: deadlines, and a stalled watch is logged ----------------------------------------


def test_trickled_range_hits_the_request_deadline(
    fake: Start, logs: pytest.LogCaptureFixture
) -> None:
    answer = json.dumps(range_answer(5, {"a": ""})).encode()

    def script(request: Request) -> None:
        # One byte every 50 ms: each socket read succeeds, the whole answer takes ~20 s.
        request.trickle(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer), 0.05
        )

    server = fake(script)
    balancer = liblb.Balancer("ring", [("kept", 1)])
    started = time.monotonic()
    with watcher(balancer, server.url, timeout=1.0) as w:
        eventually(
            lambda: "POST /v3/kv/range: no complete answer within 1s (timeout)" in log_text(logs),
            "the missed deadline logged",
        )
        assert time.monotonic() - started < 1.0 + 5.0  # one deadline, not the trickle's 20 s
        assert w.revision == 0 and balancer.nodes() == [("kept", 1)]


def test_trickled_watch_message_is_a_logged_stall(
    fake: Start, logs: pytest.LogCaptureFixture
) -> None:
    def watch(request: Request) -> None:
        request.stream_head()
        request.message(created(5))
        message = json.dumps({"result": put("b", 6)}).encode() + b"\n"
        request.send(b"%x\r\n" % len(message))
        request.trickle(message, 0.05)

    server = fake(good_range_then(watch))
    balancer = liblb.Balancer("ring", [])
    with watcher(balancer, server.url, timeout=1.0) as w:
        assert w.wait_for_revision(5, BOUND)
        eventually(lambda: "watch stalled" in log_text(logs), "the stall logged")
        eventually(lambda: len(server.paths("/v3/watch")) >= 2, "the watch reopened")
        assert balancer.nodes() == [("a", 1)] and w.revision == 5
    assert "a message begun 1s ago is still incomplete" in log_text(logs)


def test_silent_watch_is_reopened_after_idle_timeout(
    fake: Start, logs: pytest.LogCaptureFixture
) -> None:
    def watch(request: Request) -> None:
        request.stream_head()
        request.message(created(5))
        request.hold()

    server = fake(good_range_then(watch))
    with watcher(liblb.Balancer("ring", []), server.url, idle_timeout=1.0) as w:
        assert w.wait_for_revision(5, BOUND)
        eventually(lambda: "watch silent for 1s (idle_timeout)" in log_text(logs), "idle logged")
        eventually(lambda: len(server.paths("/v3/watch")) >= 2, "the watch reopened")
    # progress notifications asked for: a live etcd is never silent that long.
    assert server.paths("/v3/watch")[0].body["create_request"]["progress_notify"] is True


# -- finding 5 and 1: resync loops back off; another cluster resyncs ----------------------------


def rate_test(fake: Start, watch: Callable[[Request], None]) -> list[Request]:
    """Runs a watcher for 3 s against a fake looping it through range and watch; returns the
    ranges it made."""
    server = fake(good_range_then(watch))
    with watcher(liblb.Balancer("ring", []), server.url, backoff=0.05, max_backoff=1.0):
        time.sleep(3.0)
    return server.paths("/v3/kv/range")


def test_revision_behind_loop_backs_off(fake: Start, logs: pytest.LogCaptureFixture) -> None:
    def watch(request: Request) -> None:
        request.stream_head()
        request.message(created(3))  # behind the range's 5: resync
        request.hold()

    ranges = rate_test(fake, watch)
    # Backoff 0.05 s doubling to 1 s, drawn in [half, all]: at most ~11 pauses fit in 3 s.
    # Without backoff this was hundreds of pairs a second.
    assert 2 <= len(ranges) <= 15, len(ranges)
    assert "etcd's revision 3 is behind ours (5)" in log_text(logs)


def test_compaction_loop_backs_off(fake: Start, logs: pytest.LogCaptureFixture) -> None:
    def watch(request: Request) -> None:
        request.stream_head()
        request.message(created(5))
        request.message(
            {"header": header(9), "compact_revision": "8", "canceled": True,
             "cancel_reason": "mvcc: required revision has been compacted"}
        )
        request.hold()

    ranges = rate_test(fake, watch)
    assert 2 <= len(ranges) <= 15, len(ranges)
    assert "revision compacted (compact revision 8)" in log_text(logs)


def test_other_cluster_behind_the_endpoint_resyncs(
    fake: Start, logs: pytest.LogCaptureFixture
) -> None:
    def script(request: Request) -> None:
        ranges = len(fake_server.paths("/v3/kv/range"))
        if request.path == "/v3/kv/range":
            if ranges == 1:
                request.json(range_answer(10, {"a": ""}, cluster="111"))
            else:
                request.json(range_answer(20, {"z": '{"weight": 4}'}, cluster="222"))
        else:
            request.stream_head()
            request.message(created(20, cluster="222"))  # ahead of 10: only the id tells
            request.hold()

    fake_server = fake(script)
    balancer = liblb.Balancer("ring", [])
    with watcher(balancer, fake_server.url) as w:
        assert w.wait_for_revision(20, BOUND)
        assert balancer.nodes() == [("z", 4)]
    assert "this etcd is cluster 222, the membership was read from cluster 111" in log_text(logs)


# -- finding 7: revisions only go up; robustness ---------------------------------------------


def test_decreasing_and_negative_revisions_are_refused(
    fake: Start, logs: pytest.LogCaptureFixture
) -> None:
    def script(request: Request) -> None:
        watches = len(fake_server.paths("/v3/watch"))
        if request.path == "/v3/kv/range":
            ranges = len(fake_server.paths("/v3/kv/range"))
            request.json(range_answer(5, {"a": ""}) if ranges == 1 else
                         range_answer(10, {"a": "", "b": ""}))
            return
        request.stream_head()
        if watches == 1:
            request.message(created(5))
            for node, revision in (("b", 10), ("c", 3), ("d", -7)):
                request.message(put(node, revision))
        else:
            request.message(created(10))
        request.hold()

    fake_server = fake(script)
    balancer = liblb.Balancer("ring", [])
    revisions: list[int] = []
    with watcher(balancer, fake_server.url, lambda c: revisions.append(c.revision)) as w:
        assert w.wait_for_revision(10, BOUND)
        eventually(lambda: len(fake_server.paths("/v3/watch")) >= 2, "the watch after resync")
        assert balancer.nodes() == [("a", 1), ("b", 1)]
        assert w.revision == 10
    assert revisions == sorted(revisions) and min(revisions) == 5, revisions
    starts = [int(r.body["create_request"]["start_revision"]) for r in fake_server.paths("/v3/watch")]
    assert starts[:2] == [6, 11], starts
    assert "watch event at revision 3 after revision 10" in log_text(logs)


@pytest.mark.parametrize("replayed", [5, 6])
def test_event_at_the_last_applied_revision_is_refused(
    fake: Start, logs: pytest.LogCaptureFixture, replayed: int
) -> None:
    # 5 is the range's revision, 6 the last event's: a message at (not only below) the
    # revision applied last is a replay, refused whole, and the prefix is read again.
    def script(request: Request) -> None:
        if request.path == "/v3/kv/range":
            ranges = len(fake_server.paths("/v3/kv/range"))
            request.json(range_answer(5, {"a": ""}) if ranges == 1 else
                         range_answer(10, {"a": "", "b": ""}))
            return
        request.stream_head()
        if len(fake_server.paths("/v3/watch")) == 1:
            request.message(created(5))
            request.message(put("b", 6))
            request.message(put("c", replayed))
        else:
            request.message(created(10))
        request.hold()

    fake_server = fake(script)
    balancer = liblb.Balancer("ring", [])
    seen: list[list[tuple[str, int]]] = []
    with watcher(balancer, fake_server.url, lambda c: seen.append([liblb.etcd._pair(n) for n in c.nodes])) as w:
        assert w.wait_for_revision(10, BOUND)
        assert balancer.nodes() == [("a", 1), ("b", 1)]
    assert all("c" not in dict(nodes) for nodes in seen), seen
    assert len(fake_server.paths("/v3/kv/range")) == 2
    assert f"watch event at revision {replayed} after revision 6" in log_text(logs)
    assert "resyncing with a range" in log_text(logs)


MALFORMED_RANGES: list[tuple[bytes, str]] = [
    (b"not json", "POST /v3/kv/range: not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"header": []}', "range: header is not an object"),
    (b'{"header": {"revision": "abc"}}', "range revision is not an integer: 'abc'"),
    (b'{"header": {"revision": "-5"}}', "range answered revision -5 (must be > 0)"),
    (b'{"header": {"revision": "99999999999999999999"}}', "is not a 64-bit integer"),
    (b'{"header": {"revision": "9"}, "kvs": {}}', "range kvs is not a list"),
    (b'{"header": {"revision": "9"}, "kvs": [7]}', "range kv is not an object"),
    (b'{"header": {"revision": "9"}, "kvs": [{"key": "%%%"}]}', "range key is not valid base64"),
    (b'{"header": {"revision": "9"}, "kvs": [{"key": "YQ==", "value": 5}]}',
     "range value is not a base64 string"),
    (b'{"header": {"revision": "9"}, "more": true}', "only part of the prefix"),
    (b'{"header": {"revision": "9"}, "kvs": ' + b"[" * 100_000, "nested too deeply"),
]


def test_malformed_ranges_keep_the_last_good_membership(
    fake: Start, logs: pytest.LogCaptureFixture
) -> None:
    def script(request: Request) -> None:
        ranges = len(fake_server.paths("/v3/kv/range"))
        if request.path == "/v3/kv/range":
            if ranges == 1:
                request.json(range_answer(5, {"a": ""}))
            elif ranges - 2 < len(MALFORMED_RANGES):
                body = MALFORMED_RANGES[ranges - 2][0]
                request.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            else:
                request.json(range_answer(30, {"a": "", "b": ""}))
            return
        request.stream_head()
        if len(fake_server.paths("/v3/watch")) == 1:  # the first watch: compacted, resync
            request.message(created(5))
            request.message({"header": header(9), "compact_revision": "9", "canceled": True})
        else:
            request.message(created(30))
        request.hold()

    fake_server = fake(script)
    balancer = liblb.Balancer("ring", [])
    seen: list[list[tuple[str, int]]] = []
    with watcher(balancer, fake_server.url, lambda c: seen.append([liblb.etcd._pair(n) for n in c.nodes]),
                 max_backoff=0.05) as w:
        assert w.wait_for_revision(30, BOUND * 2)
        assert balancer.nodes() == [("a", 1), ("b", 1)]
    # Only the two good ranges were applied; the balancer never lost a.
    assert seen == [[("a", 1)], [("a", 1), ("b", 1)]]
    text = log_text(logs)
    for body, problem in MALFORMED_RANGES:
        assert problem in text, (body[:60], problem)
    assert "unexpected" not in text


def test_unexpected_error_is_logged_with_its_traceback(
    fake: Start, logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(value: bytes) -> liblb.etcd.Member:
        raise RuntimeError("a bug in the parser")

    monkeypatch.setattr(liblb.etcd, "parse_member", broken)
    server = fake(good_range_then(lambda request: request.hold()))
    with watcher(liblb.Balancer("ring", []), server.url):
        eventually(lambda: "unexpected RuntimeError" in log_text(logs), "the bug logged")
    record = next(r for r in logs.records if "unexpected RuntimeError" in r.getMessage())
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert "NoneType: None" not in logs.text
    assert "Traceback" in logs.text and "RuntimeError: a bug in the parser" in logs.text


@pytest.mark.parametrize("exception", [SystemExit, KeyboardInterrupt])
def test_on_change_raising_base_exceptions_is_logged_and_ignored(
    fake: Start, logs: pytest.LogCaptureFixture, exception: type[BaseException]
) -> None:
    def watch(request: Request) -> None:
        request.stream_head()
        request.message(created(5))
        request.message(put("b", 6))
        request.message(put("c", 7))
        request.hold()

    def on_change(change: Change) -> None:
        raise exception(f"from on_change at {change.revision}")

    server = fake(good_range_then(watch))
    balancer = liblb.Balancer("ring", [])
    with watcher(balancer, server.url, on_change) as w:
        assert w.wait_for_revision(7, BOUND), "the watcher thread died"
        assert w.running
        assert balancer.nodes() == [("a", 1), ("b", 1), ("c", 1)]
    for revision in (5, 6, 7):
        assert f"on_change raised at revision {revision}: {exception.__name__}" in log_text(logs)


def test_several_endpoints_skip_the_dead_one(fake: Start, logs: pytest.LogCaptureFixture) -> None:
    def watch(request: Request) -> None:
        request.stream_head()
        request.message(created(5))
        request.message(put("b", 6))
        request.hold()

    with socket.create_server(("127.0.0.1", 0)) as closed:
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    server = fake(good_range_then(watch))
    balancer = liblb.Balancer("ring", [])
    with EtcdMembership(balancer, [dead, server.url], "svc", backoff=0.05) as w:
        assert w.wait_for_revision(6, BOUND)
        assert balancer.nodes() == [("a", 1), ("b", 1)]
    # The dead one was tried once, for the range; the watch went to the one that answered.
    assert f"etcd {dead}: ConnectionRefusedError" in log_text(logs)
    assert "trying the next endpoint" in log_text(logs)
    assert log_text(logs).count(f"etcd {dead}:") == 1


# -- review finding 8: token renewal on a refused watch, without nested failovers ------------


def login(request: Request, token: str) -> None:
    request.json({"header": header(5), "token": token})


INVALID_TOKEN = "etcdserver: invalid auth token"


@pytest.mark.parametrize("form", ["http-401", "error-message", "auth-store-old"])
def test_watch_refusing_the_token_renews_it(
    fake: Start, logs: pytest.LogCaptureFixture, form: str
) -> None:
    def script(request: Request) -> None:
        logins = len(server.paths("/v3/auth/authenticate"))
        if request.path == "/v3/auth/authenticate":
            login(request, f"token-{logins}")
        elif request.path == "/v3/kv/range":
            request.json(range_answer(5, {"a": ""}))
        elif request.headers.get("authorization") == "token-1":  # the first token: refused
            if form == "http-401":
                request.json({"error": INVALID_TOKEN, "code": 16, "message": INVALID_TOKEN},
                             "401 Unauthorized")
            else:
                reason = (INVALID_TOKEN if form == "error-message" else
                          "etcdserver: revision of auth store is old")
                request.stream_head()
                request.chunk(json.dumps({"error": {"grpc_code": 16, "http_code": 401,
                                                    "message": reason}}).encode() + b"\n")
        else:
            request.stream_head()
            request.message(created(5))
            request.message(put("b", 6))
            request.hold()

    server = fake(script)
    balancer = liblb.Balancer("ring", [])
    with watcher(balancer, server.url, user="u", password="p") as w:
        assert w.wait_for_revision(6, BOUND)
        assert balancer.nodes() == [("a", 1), ("b", 1)]
    # One renewal, and the watch retried with the new token at once (no backoff pause).
    assert len(server.paths("/v3/auth/authenticate")) == 2
    tokens = [r.headers.get("authorization") for r in server.paths("/v3/watch")]
    assert tokens == ["token-1", "token-2"], tokens
    assert "authenticating again" in log_text(logs)
    assert "retrying in" not in log_text(logs)


def test_token_renewal_does_not_nest_failovers(
    fake: Start, logs: pytest.LogCaptureFixture
) -> None:
    # Three endpoints; the first cancels the watch for its token and then goes down, the
    # other two are down (they close every connection). The renewal tries each endpoint
    # once: not, for each endpoint, a login that itself tries every endpoint (N x N).
    def first(request: Request) -> None:
        if server.paths("/v3/watch"):
            return  # down from the watch on
        if request.path == "/v3/auth/authenticate":
            login(request, "token-1")
        elif request.path == "/v3/kv/range":
            request.json(range_answer(5, {"a": ""}))

    def watch(request: Request) -> None:
        if request.path != "/v3/watch":
            return first(request)
        request.stream_head()
        request.message({"header": header(5), "watch_id": "0", "created": True,
                         "canceled": True, "cancel_reason": INVALID_TOKEN})
        request.hold()

    server = fake(watch)
    down = [fake(lambda request: None) for _ in range(2)]
    balancer = liblb.Balancer("ring", [])
    urls = [server.url] + [d.url for d in down]
    with EtcdMembership(balancer, urls, "svc", user="u", password="p", backoff=30,
                        max_backoff=30, timeout=5.0) as w:
        assert w.wait_for_revision(5, BOUND)
        eventually(lambda: "retrying in" in log_text(logs), "the failed renewal logged")
        assert [len(d.requests) for d in down] == [1, 1], [
            [r.path for r in d.requests] for d in down
        ]
        assert len(server.paths("/v3/auth/authenticate")) == 2  # the login, the renewal
        assert balancer.nodes() == [("a", 1)]


# -- review finding 4: an HTTP 5xx (no leader, timed out) moves on to the next endpoint -------


@pytest.mark.parametrize(
    ("failing", "status", "message"),
    [
        ("/v3/kv/range", "500 Internal Server Error", "etcdserver: request timed out"),
        ("/v3/watch", "503 Service Unavailable", "etcdserver: no leader"),
    ],
)
def test_server_error_fails_over_to_the_next_endpoint(
    fake: Start, logs: pytest.LogCaptureFixture, failing: str, status: str, message: str
) -> None:
    def sick(request: Request) -> None:
        if request.path == failing:
            request.json({"error": message, "code": 14, "message": message}, status)
        elif request.path == "/v3/kv/range":
            request.json(range_answer(5, {"a": ""}))
        else:
            request.hold()

    def healthy(request: Request) -> None:
        if request.path == "/v3/kv/range":
            request.json(range_answer(5, {"a": ""}))
        else:
            request.stream_head()
            request.message(created(5))
            request.message(put("b", 6))
            request.hold()

    first, second = fake(sick), fake(healthy)
    balancer = liblb.Balancer("ring", [])
    with EtcdMembership(balancer, [first.url, second.url], "svc", backoff=30,
                        max_backoff=30) as w:
        assert w.wait_for_revision(6, BOUND)
        assert balancer.nodes() == [("a", 1), ("b", 1)]
    assert f"etcd {first.url}: POST {failing}: HTTP {status.split()[0]}: {message}" in log_text(logs)
    assert "trying the next endpoint" in log_text(logs)
    assert "retrying in" not in log_text(logs)
