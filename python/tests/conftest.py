"""Shared settings for the liblb test suite."""

from __future__ import annotations

import collections
import http.server
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import liblb

# Deterministic property tests (same examples on every run and machine), no example database
# written into the work tree, and no deadline: the test machine is shared and timing is noise.
settings.register_profile(
    "liblb",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("LIBLB_HYPOTHESIS_EXAMPLES", "100")),
)
settings.load_profile("liblb")


# --- Real HTTP servers on loopback for liblb.httpx and liblb.requests (test_httpx.py,
# test_requests.py). Each server has a role; every request it reads is logged in arrival order,
# so a test sees which nodes each of its attempts reached.

ROLES = ("echo", "503", "429", "slow", "refused", "reset", "500")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as clients use it
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:  # one handler per connection: count them
        super().setup()
        with self.server.fleet.lock:
            self.server.fleet.connections[self.server.node_id] += 1

    def _answer(self, status: int, body: bytes, *headers: tuple[str, str]) -> None:
        # One write for headers and body: two segments cost a ~40 ms Nagle/delayed-ACK stall
        # per request with keep-alive (TOOLCHAIN.md). Latin-1: a test's header may carry any byte.
        head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in (*headers, *self._load_headers())]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

    def _load_headers(self) -> list[tuple[str, str]]:
        """The server's load report (``Fleet.report``), as it is after counting this request."""
        fleet, node_id = self.server.fleet, self.server.node_id
        headers = list(fleet.headers.get(node_id, ()))
        load, form = fleet.loads.get(node_id, (None, "text"))
        if load is not None:
            load.finish(load.start())  # the answer is ready: count it before reporting
            if form == "bin-header":  # Envoy's legacy gRPC name: the base64 alone
                headers.append(("endpoint-load-metrics-bin", load.header("bin").removeprefix("BIN ")))
            else:
                headers.append(("endpoint-load-metrics", load.header(form)))  # type: ignore[arg-type]
        return headers

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fleet, role = self.server.fleet, self.server.role
        with fleet.lock:
            fleet.log.append(self.server.node_id)
        echo = {
            "node": self.server.node_id,
            "host": self.headers.get("Host"),
            "method": self.command,
            "path": self.path,
            "body": body.decode(),
        }
        if role == "slow":
            time.sleep(fleet.slow_seconds)
        if role in ("echo", "slow"):
            self._answer(200, json.dumps(echo).encode(), ("Content-Type", "application/json"))
        elif role == "503":
            self._answer(503, b"unavailable")
        elif role == "500":
            self._answer(500, b"broken")
        elif role == "429":
            self._answer(429, b"slow down", ("Retry-After", str(fleet.retry_after)))
        elif role == "reset":
            # Headers promise 1000 bytes; 10 are sent, then an RST (SO_LINGER 0) ends the body.
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
            self.wfile.flush()
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    fleet: Fleet
    role: str
    node_id: str


_REFUSING: list[socket.socket] = []


def refused_address() -> str:
    """A loopback address that refuses connections: its port stays bound, never listening,
    until the tests end, so no server started later can be given it (a port bound and closed
    again was handed to the next server, which made two nodes one)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _REFUSING.append(s)
    return f"127.0.0.1:{s.getsockname()[1]}"


def pytest_sessionfinish() -> None:
    while _REFUSING:
        _REFUSING.pop().close()


class Fleet:
    """Servers on 127.0.0.1 with OS-picked ports, by role; ``ids[role]`` their node ids
    (``host:port``), ``log`` the node id of every request they read, in order, ``connections``
    how many connections each accepted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[str] = []
        self.connections: collections.Counter[str] = collections.Counter()
        self.slow_seconds = 0.05
        self.retry_after = 30
        self.ids: dict[str, list[str]] = {role: [] for role in ROLES}
        # Per node id: a ServerLoad whose report every answer carries (form "text", "bin", or
        # "bin-header" for endpoint-load-metrics-bin), and extra headers for every answer.
        self.loads: dict[str, tuple[liblb.ServerLoad, str]] = {}
        self.headers: dict[str, list[tuple[str, str]]] = {}
        self._servers: list[_Server] = []

    def start(self, role: str, tls: ssl.SSLContext | None = None) -> str:
        """Starts a server (``tls``: serving HTTPS with that context) and returns its id."""
        assert role in ROLES, role
        if role == "refused":
            node_id = refused_address()
        else:
            server = _Server(("127.0.0.1", 0), _Handler)
            if tls is not None:
                server.socket = tls.wrap_socket(server.socket, server_side=True)
            server.fleet, server.role = self, role
            server.node_id = node_id = f"127.0.0.1:{server.server_address[1]}"
            threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
            self._servers.append(server)
        self.ids[role].append(node_id)
        return node_id

    def report(self, node_id: str, utilization: float, form: str = "text") -> None:
        """Every answer of ``node_id`` carries the ORCA report of a ``ServerLoad`` at this
        application utilisation (its request rate counted by the server)."""
        load = liblb.ServerLoad()
        load.set_application_utilization(utilization)
        self.loads[node_id] = (load, form)

    def take_log(self) -> list[str]:
        with self.lock:
            log, self.log = self.log, []
        return log

    def hedged_log(self, twin: liblb.Balancer, hedge: liblb.Hedging, slow: str, requests: int) -> list[str]:
        """The log ``requests`` requests of at most two attempts leave when every one that
        starts on ``slow`` is hedged to the next node, which answers first: ``twin``'s request
        loop, stepped by hand (the hedged attempt is cancelled, the hedge succeeds)."""
        log: list[str] = []
        for _ in range(requests):
            mirror = twin.request(None, max_attempts=2, hedge=hedge)
            first = mirror.attempt()
            assert first is not None
            log.append(first.id)
            if first.id == slow:
                second = mirror.hedge()
                assert second is not None
                first.cancel()
                second.finish(ok=True)
                log.append(second.id)
            else:
                first.finish(ok=True)
        return log

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()


class Tls:
    """A self-signed certificate for the logical host ``svc.internal`` (made with the openssl
    command): ``server`` serves it and records the server name (SNI) of each handshake in
    ``names``; ``ca_file`` is what clients verify against. The nodes' addresses (127.0.0.1) are
    not in it, so a client that checks the node's address instead of svc.internal fails."""

    def __init__(self, folder: Path) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.fail("the TLS tests need the openssl command")
        self.ca_file = str(folder / "svc.pem")
        key = str(folder / "svc.key")
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", key, "-out", self.ca_file, "-subj", "/CN=svc.internal",
             "-addext", "subjectAltName=DNS:svc.internal"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.names: list[str | None] = []
        self.server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server.load_cert_chain(self.ca_file, key)
        self.server.sni_callback = lambda _sock, name, _ctx: self.names.append(name)

    def client(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


@pytest.fixture(scope="session")
def tls_made(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return Tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls(tls_made: Tls) -> Tls:
    tls_made.names.clear()  # each test sees its own handshakes
    return tls_made


@pytest.fixture
def refused() -> Callable[[], str]:
    """:func:`refused_address`, for tests that need an address nothing answers on."""
    return refused_address


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    servers = Fleet()
    try:
        yield servers
    finally:
        servers.stop()
