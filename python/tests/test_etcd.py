"""liblb.etcd against a real etcd server (Debian's etcd-server, found as $ETCD_BIN or on PATH).

Each test that needs etcd starts its own on loopback, on free ports, with a temporary data
directory, and kills it at the end; `EtcdServer.restart` stops and starts it on the same ports
and data. A small TCP proxy in front of etcd (`Proxy`) cuts the watcher off while etcd keeps
running, so a test can change and compact etcd behind the watcher's back.

Without an etcd binary these tests skip, loudly; with LB_REQUIRE_ETCD=1 (scripts/test-python.sh
sets it, after scripts/etcd-install.sh) they fail instead.

Expected placements are never written down: they come from a fresh `liblb.Balancer` built with
the membership the test put into etcd.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import queue
import re
import shutil
import socket
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import liblb
from liblb.etcd import (
    MAX_TAG,
    MAX_WEIGHT,
    Change,
    EtcdMembership,
    Member,
    node_id_from_key,
    parse_member,
)

# How long a change may take to reach a watcher: generous, the machine is shared. Nothing
# asserts speed; this only bounds how long a broken watcher makes a test hang.
BOUND = 15.0
KEYS = [f"user-{i}" for i in range(200)]


# -- etcd -------------------------------------------------------------------------------------


def etcd_binary() -> str:
    found = os.environ.get("ETCD_BIN") or shutil.which("etcd")
    if found and Path(found).is_file():
        return found
    reason = (
        "NO ETCD: the liblb.etcd tests need an etcd server binary ($ETCD_BIN or `etcd` on "
        "PATH; scripts/etcd-install.sh installs Debian's etcd-server)"
    )
    if os.environ.get("LB_REQUIRE_ETCD") == "1":
        pytest.fail(reason + " and LB_REQUIRE_ETCD=1")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


AUTHENTICATE = "/v3/auth/authenticate"


class Certs:
    """A CA, etcd's server certificate (subjectAltName IP:127.0.0.1) and a client certificate
    signed by it, and an unrelated CA: made with the openssl command for each test run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for ca in ("ca", "other"):
            self.openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=liblb test {ca}",
            )
        for name, usage, san in (
            ("server", "serverAuth,clientAuth", "subjectAltName=IP:127.0.0.1\n"),
            ("client", "clientAuth", ""),
        ):
            (folder / f"{name}.ext").write_text(f"{san}extendedKeyUsage={usage}\n")
            self.openssl(
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                # No CommonName on the client's: with authentication on, etcd 3.4's gateway
                # refuses a certificate with one ("CommonName of client sending a request
                # against gateway will be ignored and not used as expected").
                "-out", f"{name}.csr", "-subj", "/CN=etcd" if name == "server" else "/O=liblb",
            )
            self.openssl(
                "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
                "-extfile", f"{name}.ext",
            )

    def openssl(self, *args: str) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.fail("the TLS tests need the openssl command")
        subprocess.run(
            [openssl, *args], cwd=self.folder, check=True, capture_output=True, timeout=60
        )

    def __getitem__(self, name: str) -> str:
        return str(self.folder / name)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


class EtcdServer:
    """One single-member etcd on loopback; restartable on the same ports and data dir.

    With `certs`, its client URL is https:// and it requires client certificates
    (--client-cert-auth); `extra` are more etcd flags. `token` (set by `enable_auth`) goes
    with every request the test makes.
    """

    def __init__(
        self, binary: str, data: Path, certs: Certs | None = None, extra: tuple[str, ...] = ()
    ) -> None:
        self.binary = binary
        self.data = data / "etcd-data"
        self.log = data / "etcd.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.certs = certs
        self.extra = extra
        scheme = "https" if certs else "http"
        self.url = f"{scheme}://127.0.0.1:{self.client_port}"
        self.token: str | None = None
        self.password: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.started = False

    def start(self) -> None:
        # The ports were free when picked, but another process (a parallel test, another suite
        # on the machine) may take one before etcd binds it: on its first start, pick new ones.
        for attempt in range(5):
            if self.spawn():
                self.started = True
                return
            conflict = "address already in use" in self.log_tail()
            if self.started or not conflict or attempt == 4:
                break
            self.process = None
            shutil.rmtree(self.data, ignore_errors=True)
            self.client_port, self.peer_port = free_port(), free_port()
            scheme = "https" if self.certs else "http"
            self.url = f"{scheme}://127.0.0.1:{self.client_port}"
        assert self.process is not None
        pytest.fail(f"etcd exited with {self.process.returncode}:\n{self.log_tail()}")

    def spawn(self) -> bool:
        """Starts etcd and waits until it answers: False if it exits first."""
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls: list[str] = []
        if self.certs is not None:
            tls = [
                f"--cert-file={self.certs['server.pem']}",
                f"--key-file={self.certs['server.key']}",
                f"--trusted-ca-file={self.certs['ca.pem']}",
                "--client-cert-auth",
            ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--name=liblb-test",
                    f"--data-dir={self.data}",
                    f"--listen-client-urls={self.url}",
                    f"--advertise-client-urls={self.url}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=liblb-test={peer}",
                    *tls,
                    *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                return False
            try:
                self.call("/v3/maintenance/status", {})
                return True
            except (OSError, http.client.HTTPException, AssertionError):
                if time.monotonic() > deadline:
                    pytest.fail(f"etcd not ready after 30 s:\n{self.log_tail()}")
                time.sleep(0.05)

    def stop(self, hard: bool = False) -> None:
        """SIGTERM (etcd shuts down cleanly), or SIGKILL with `hard`."""
        if self.process is None:
            return
        if hard:
            self.process.kill()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self, hard: bool = False) -> None:
        self.stop(hard)
        self.start()

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        conn: http.client.HTTPConnection
        if self.certs is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=10)
        else:
            context = ssl.create_default_context(cafile=self.certs["ca.pem"])
            context.load_cert_chain(self.certs["client.pem"], self.certs["client.key"])
            conn = http.client.HTTPSConnection(
                "127.0.0.1", self.client_port, timeout=10, context=context
            )
        headers = {"Content-Type": "application/json"}
        if self.token is not None:
            headers["Authorization"] = self.token
        try:
            conn.request("POST", path, json.dumps(body), headers)
            response = conn.getresponse()
            answer: dict[str, Any] = json.loads(response.read())
        finally:
            conn.close()
        refused = "invalid auth token" in str(answer) or "auth store is old" in str(answer)
        if refused and self.password is not None and path != AUTHENTICATE:
            self.token = None  # expired (tests run etcd with short token lives): once more
            self.token = self.call(AUTHENTICATE, {"name": "root", "password": self.password})[
                "token"
            ]
            return self.call(path, body)
        assert response.status == 200, f"{path}: {response.status} {answer}"
        return answer

    def put(self, key: bytes | str, value: bytes | str = b"") -> int:
        """Puts a key; returns the revision of the put."""
        key = key.encode() if isinstance(key, str) else key
        value = value.encode() if isinstance(value, str) else value
        answer = self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})
        return int(answer["header"]["revision"])

    def delete(self, key: bytes | str) -> int:
        key = key.encode() if isinstance(key, str) else key
        answer = self.call("/v3/kv/deleterange", {"key": b64(key)})
        assert answer.get("deleted") == "1", answer
        return int(answer["header"]["revision"])

    def compact(self, revision: int) -> None:
        self.call("/v3/kv/compaction", {"revision": str(revision), "physical": True})

    def enable_auth(self, password: str) -> None:
        """User root with `password` and role root, then authentication on (the gateway's
        /v3/auth calls, as etcdctl user add / user grant-role / auth enable do)."""
        self.call("/v3/auth/user/add", {"name": "root", "password": password})
        self.call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self.call("/v3/auth/enable", {})
        self.password = password
        self.token = self.call(AUTHENTICATE, {"name": "root", "password": password})["token"]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(etcd_binary(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Proxy:
    """A TCP relay to etcd that the test can cut: `block()` drops every connection and
    refuses new ones (etcd itself keeps running), `unblock()` lets them through again."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.blocked = False
        self.closed = False
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                if self.blocked or self.closed:
                    client.close()
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                except OSError:
                    client.close()
                    continue
                self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(source, sink), daemon=True).start()

    def pump(self, source: socket.socket, sink: socket.socket) -> None:
        # Each socket is the source of one pump, which closes it; shutting the sink down
        # ends the other pump.
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        try:
            sink.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        source.close()

    def block(self) -> None:
        with self.lock:
            self.blocked = True
            dropped, self.open = self.open, []
        for s in dropped:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def unblock(self) -> None:
        with self.lock:
            self.blocked = False

    def close(self) -> None:
        with self.lock:
            self.closed = True
        self.block()
        self.listener.close()
        self.thread.join(5)


class Recorder:
    """Collects the Changes a watcher applies (on_change runs on the watcher thread)."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.lock = threading.Lock()

    def __call__(self, change: Change) -> None:
        with self.lock:
            self.changes.append(change)

    def snapshot(self) -> list[Change]:
        with self.lock:
            return list(self.changes)

    def event_revisions(self) -> list[int]:
        return [r for change in self.snapshot() for r in change.event_revisions]


def watcher(
    balancer: liblb.Balancer, url: str, prefix: str, recorder: Recorder | None = None
) -> EtcdMembership[liblb.Balancer]:
    # Short backoffs keep each test to seconds.
    return EtcdMembership(
        balancer, url, prefix, on_change=recorder, backoff=0.05, max_backoff=0.2, timeout=5
    )


def reference_picks(algorithm: str, nodes: dict[str, int], keys: list[str]) -> list[str]:
    """Where `keys` land on a fresh balancer holding `nodes`, in the order liblb.etcd uses."""
    return liblb.Balancer(algorithm, sorted(nodes.items())).pick_many(keys)


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, f"not within {BOUND} s: {what}"
        time.sleep(0.01)


# -- values and keys (no etcd needed) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "member"),
    [
        (b"", Member(1, None)),
        (b"{}", Member(1, None)),
        (b'{"weight": 3}', Member(3, None)),
        (b'{"weight": 0}', Member(0, None)),
        (b' {"weight": 4294967295, "tag": 18446744073709551615} ', Member(MAX_WEIGHT, MAX_TAG)),
        (b'{"tag": 0}', Member(1, 0)),
    ],
)
def test_parse_member_accepts(value: bytes, member: Member) -> None:
    assert parse_member(value) == member


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"{", "not valid JSON"),
        (b"3", "must be a JSON object, not int"),
        (b"null", "must be a JSON object, not NoneType"),
        (b'["weight", 3]', "must be a JSON object, not list"),
        (b'{"weight": 3, "zone": "a"}', "unknown field 'zone'"),
        (b'{"Weight": 3}', "unknown field 'Weight'"),
        (b'{"weight": -1}', '"weight" -1 is out of range 0..=4294967295'),
        (b'{"weight": 4294967296}', '"weight" 4294967296 is out of range'),
        (b'{"weight": true}', '"weight" must be an integer 0..=4294967295, not true'),
        (b'{"weight": 3.0}', '"weight" must be an integer'),
        (b'{"weight": 1e2}', '"weight" must be an integer'),
        (b'{"weight": "3"}', '"weight" must be an integer'),
        (b'{"weight": null}', '"weight" must be an integer'),
        (b'{"weight": NaN}', "NaN is not valid JSON"),
        (b'{"tag": -1}', '"tag" -1 is out of range 0..=18446744073709551615'),
        (b'{"tag": 18446744073709551616}', '"tag" 18446744073709551616 is out of range'),
        (b'{"tag": false}', '"tag" must be an integer'),
        (b'{"weight": 1, "weight": 2}', "duplicate field 'weight'"),
        (b'{"weight": 1} {}', "not valid JSON"),
        (b"\xff", "not UTF-8"),
        (b" ", "not valid JSON"),
    ],
)
def test_parse_member_rejects(value: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_member(value)


VALUES = Path(__file__).resolve().parents[2] / "tests" / "membership" / "values.json"


def value_cases(kind: str) -> list[Any]:
    """The rows of tests/membership/values.json (the table the Rust watcher reads too)."""
    table = json.loads(VALUES.read_text(encoding="utf-8"))
    rows: list[dict[str, Any]] = table[kind]
    assert rows, kind
    return [
        pytest.param(
            bytes.fromhex(row["value_hex"]) if "value_hex" in row else row["value"].encode(),
            row,
            id=row.get("why", row.get("value", "")) + f" [{i}]",
        )
        for i, row in enumerate(rows)
    ]


@pytest.mark.parametrize(("value", "row"), value_cases("accepted"))
def test_shared_table_accepted(value: bytes, row: dict[str, Any]) -> None:
    member = parse_member(value)
    # The table says tag 0 for "no tag"; Member keeps None for a value without one.
    got = (member.weight, member.tag or 0, member.locality, member.priority)
    want = (row["weight"], row["tag"], row.get("locality", ""), row.get("priority", 0))
    assert got == want, value


@pytest.mark.parametrize(("value", "row"), value_cases("rejected"))
def test_shared_table_rejected(value: bytes, row: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        parse_member(value)


@pytest.mark.parametrize("opener", [b"[", b"{\"a\": ", b'{"weight": ['])
def test_parse_member_deep_nesting_is_a_value_error(opener: bytes) -> None:
    # 100,000 levels: json.loads alone raises RecursionError here.
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_member(b'{"weight": ' + opener * 100_000)


def test_parse_member_type() -> None:
    with pytest.raises(TypeError, match="value must be bytes, not str"):
        parse_member("{}")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "result"),
    [
        (b"svc/a", "a"),
        (b"svc/a/b", "a/b"),
        ("svc/n\u00f6de-\u2603".encode(), "n\u00f6de-\u2603"),
        (b"svc/", ValueError("node id is empty")),
        (b"svc/a\0b", ValueError("node id contains a NUL character")),
        (b"svc/\xff", ValueError("node id is not UTF-8")),
        (b"svd/a", ValueError("key is not under the prefix")),
    ],
)
def test_node_id_from_key(key: bytes, result: str | ValueError) -> None:
    if isinstance(result, str):
        assert node_id_from_key(key, b"svc/") == result
    else:
        with pytest.raises(ValueError, match=str(result)):
            node_id_from_key(key, b"svc/")


def test_bad_arguments() -> None:
    b = liblb.Balancer("ring", [])
    url = "http://127.0.0.1:2379"
    bad: list[tuple[Callable[[], object], type[Exception], str]] = [
        (lambda: EtcdMembership("ring", url, "svc"), TypeError, r"with update\(nodes\)\), not str"),  # type: ignore[type-var]
        (lambda: EtcdMembership(b, b"x", "svc"), TypeError, "url must be a str"),  # type: ignore[arg-type]
        (lambda: EtcdMembership(b, url, 3), TypeError, "prefix must be a str"),  # type: ignore[arg-type]
        (lambda: EtcdMembership(b, url, "svc", on_change=3), TypeError, "on_change must be"),  # type: ignore[arg-type]
        (lambda: EtcdMembership(b, url, "svc", timeout="1"), TypeError, "timeout must be a number"),  # type: ignore[arg-type]
        (lambda: EtcdMembership(b, url, "svc", backoff=0), ValueError, "backoff must be a positive"),
        (lambda: EtcdMembership(b, url, "svc", timeout=float("nan")), ValueError, "timeout must"),
        (lambda: EtcdMembership(b, url, "svc", backoff=2, max_backoff=1), ValueError, "max_backoff"),
        (lambda: EtcdMembership(b, url, ""), ValueError, "prefix is empty"),
        (lambda: EtcdMembership(b, url, "svc/"), ValueError, "ends with '/'"),
        (lambda: EtcdMembership(b, url, "\udc80"), ValueError, "cannot be encoded as UTF-8"),
        (lambda: EtcdMembership(b, "127.0.0.1:2379", "svc"), ValueError, "scheme must be http"),
        (lambda: EtcdMembership(b, "http://:2379", "svc"), ValueError, "has no host"),
        (lambda: EtcdMembership(b, "http://u:p@h:2379", "svc"), ValueError, "credentials"),
        (lambda: EtcdMembership(b, "http://h:2379/?x=1", "svc"), ValueError, "no query"),
        (lambda: EtcdMembership(b, "http://h:99999", "svc"), ValueError, "1..=65535"),
    ]
    for make, error, message in bad:
        with pytest.raises(error, match=message):
            make()
    w = EtcdMembership(b, url, "svc")
    with pytest.raises(TypeError, match="revision must be an int"):
        w.wait_for_revision("1")  # type: ignore[arg-type]
    w.stop()  # before start: nothing to stop
    assert not w.running and w.revision == 0 and w.members == {}
    assert not w.wait_for_revision(1, timeout=0)


# The endpoint forms the Rust watcher takes (etcd/src/http.rs, Endpoint::parse): http(s)://
# HOST:PORT, an optional trailing "/", nothing else.
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://h", "missing :PORT"),
        ("https://etcd.example/", "missing :PORT"),
        ("http://[::1]", "missing :PORT"),
        ("http://h:2379/v3", "no path"),
        ("https://h:2379/proxy/", "no path"),
        ("http://h:0", "1..=65535"),
        ("http://h:65536", "1..=65535"),
        ("http://h:\u0668\u0660", "1..=65535"),  # Arabic-Indic 80: digits, but not ASCII
        ("http://h: 80", "1..=65535"),
        ("http://h:-1", "1..=65535"),
        ("http://h:", "1..=65535"),
    ],
)
def test_endpoint_must_be_scheme_host_port(url: str, problem: str) -> None:
    b = liblb.Balancer("ring", [])
    with pytest.raises(ValueError, match=re.escape(f"url {url!r}: ") + ".*" + re.escape(problem)):
        EtcdMembership(b, ["http://127.0.0.1:2379", url], "svc")


@pytest.mark.parametrize(
    "url", ["http://h:2379", "http://h:2379/", "https://10.0.0.1:1", "http://[::1]:65535/"]
)
def test_endpoint_forms_accepted(url: str) -> None:
    EtcdMembership(liblb.Balancer("ring", []), url, "svc")


# int64 fields as Rust's str::parse::<i64>() reads them (etcd/src/client.rs, int()): an optional
# sign and ASCII digits, in range; JSON numbers must be integers.
@pytest.mark.parametrize(
    ("field", "value"),
    [
        (None, 0), ("5", 5), ("-5", -5), ("+5", 5), ("007", 7), (12, 12),
        ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -(2**63)),
    ],
)
def test_int64_accepts(field: object, value: int) -> None:
    assert liblb.etcd._int64(field, "revision") == value


@pytest.mark.parametrize(
    "field",
    [
        " 5", "5 ", "5\n", "5_0", "\u0665", "\uff15", "", "-", "+", "--5", "+-5", "1e3", "0x10",
        "5.0", "9223372036854775808", "-9223372036854775809", 2**63, 5.0, True, [], {},
    ],
)
def test_int64_refuses(field: object) -> None:
    with pytest.raises(liblb.etcd._GatewayError, match="revision"):
        liblb.etcd._int64(field, "revision")


def test_module_type_checks_strict(tmp_path: Path) -> None:
    # The installed liblb.etcd (pure Python, no stubs of its own) under mypy --strict; the
    # suite's other mypy run (test_stubs.py) checks only this test code against it.
    cache = Path(sys.prefix) / ".liblb-mypy-cache"
    cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "-p", "liblb.etcd"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, check=False, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "liblb.etcd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_rejects_keys_for_unkeyed_algorithm() -> None:
    done = run_cli("--url", "http://127.0.0.1:1", "--prefix", "svc", "-a", "round_robin", "--key", "k")
    assert done.returncode == 2
    assert "--key needs a keyed algorithm" in done.stderr and "round_robin ignores keys" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefix", "svc/"], "ends with '/'"),
        (["--prefix", "svc", "-a", "nope"], "invalid choice: 'nope'"),
        (["--prefix", "svc", "--vnodes", "0"], "vnodes"),
        (["--prefix", "svc", "-o", "colour=red"], "colour"),
    ],
)
def test_cli_bad_arguments(args: list[str], message: str) -> None:
    done = run_cli("--url", "http://127.0.0.1:1", *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


# -- against etcd ----------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["ring", "jump"])
def test_add_remove_reweight_picks_follow(etcd: EtcdServer, algorithm: str) -> None:
    etcd.put("svc/a", '{"weight": 2}')
    etcd.put("other/x")  # outside the prefix
    etcd.put("svc-not/y")  # shares the prefix's bytes but not its '/'
    balancer = liblb.Balancer(algorithm, [])
    recorder = Recorder()
    with watcher(balancer, etcd.url, "svc", recorder) as w:
        assert w.wait_for_revision(1, BOUND)
        # The initial range: only svc/a.
        assert balancer.nodes() == [("a", 2)]
        assert recorder.snapshot()[0].resync

        expected = {"a": 2}
        steps: list[tuple[str, Callable[[], int]]] = [
            ("add c", lambda: etcd.put("svc/c", "")),
            ("add b", lambda: etcd.put("svc/b", '{"weight": 1, "tag": 7}')),
            ("reweight a to 5", lambda: etcd.put("svc/a", '{"weight": 5}')),
            ("drain c", lambda: etcd.put("svc/c", '{"weight": 0}')),
            ("remove b", lambda: etcd.delete("svc/b")),
            ("add d", lambda: etcd.put("svc/d", "{}")),
        ]
        models: list[dict[str, int]] = [
            {"a": 2, "c": 1},
            {"a": 2, "b": 1, "c": 1},
            {"a": 5, "b": 1, "c": 1},
            {"a": 5, "b": 1, "c": 0},
            {"a": 5, "c": 0},
            {"a": 5, "c": 0, "d": 1},
        ]
        for (what, step), model in zip(steps, models, strict=True):
            before = balancer.pick_many(KEYS)
            revision = step()
            want = reference_picks(algorithm, model, KEYS)
            # Picks follow within the bound (polled; nothing about how fast).
            eventually(lambda: balancer.pick_many(KEYS) == want, f"picks after {what}")
            # The revision moves after on_change, a moment after the picks changed.
            assert w.wait_for_revision(revision, BOUND)
            assert balancer.nodes() == sorted(model.items())
            assert {i: m.weight for i, m in w.members.items()} == model
            change = recorder.snapshot()[-1]
            assert change.revision == revision and change.event_revisions == (revision,)
            assert change.nodes == tuple(sorted(model.items()))
            assert set(change.added) == model.keys() - expected.keys()
            assert set(change.removed) == expected.keys() - model.keys()
            assert {(i, o, n) for i, o, n in change.reweighted} == {
                (i, expected[i], model[i]) for i in model.keys() & expected.keys()
                if expected[i] != model[i]
            }
            if algorithm == "ring":
                # Consistent hashing: only keys of the removed or drained node move, or keys
                # moving to an added or heavier node.
                moved = [(k, o, n) for k, o, n in zip(KEYS, before, want, strict=True) if o != n]
                touched = change.added + change.removed + tuple(i for i, _, _ in change.reweighted)
                assert all(o in touched or n in touched for _, o, n in moved), moved
            expected = model
        assert w.members["a"] == Member(5, None)
        assert w.members["d"] == Member(1, None)
    assert not w.running


def test_burst_is_one_update(etcd: EtcdServer) -> None:
    """Events of one watch response are applied together: a transaction of 20 puts is one
    revision, one watch response, one update()."""
    balancer = liblb.Balancer("ring", [])
    recorder = Recorder()
    with watcher(balancer, etcd.url, "svc", recorder) as w:
        assert w.wait_for_revision(1, BOUND)
        names = [f"n{i:02}" for i in range(20)]
        answer = etcd.call(
            "/v3/kv/txn",
            {"success": [{"request_put": {"key": b64(f"svc/{n}".encode())}} for n in names]},
        )
        revision = int(answer["header"]["revision"])
        assert w.wait_for_revision(revision, BOUND)
        change = recorder.snapshot()[-1]
        assert change.event_revisions == (revision,) * 20
        assert change.added == tuple(names)
        assert len(recorder.snapshot()) == 2  # the initial range, then the burst
        assert balancer.nodes() == [(n, 1) for n in names]


def test_restart_mid_watch_no_change_lost_or_replayed(etcd: EtcdServer) -> None:
    balancer = liblb.Balancer("maglev", [])
    recorder = Recorder()
    puts: list[int] = []
    model: dict[str, int] = {}

    def put(node: str, weight: int) -> None:
        puts.append(etcd.put(f"svc/{node}", json.dumps({"weight": weight})))
        model[node] = weight

    with watcher(balancer, etcd.url, "svc", recorder) as w:
        assert w.wait_for_revision(1, BOUND)
        for i in range(5):
            put(f"n{i}", i + 1)
        assert w.wait_for_revision(puts[-1], BOUND)
        for round_ in range(3):
            etcd.restart(hard=round_ == 1)  # the middle one a SIGKILL
            # Changes right after the restart, most likely before the watcher is back: it
            # must pick them up from its last revision + 1.
            for i in range(4):
                put(f"n{i}", 10 * (round_ + 1) + i)
            put(f"r{round_}", 1)
            assert w.wait_for_revision(puts[-1], BOUND), f"round {round_}: {etcd.log_tail()}"
        # Every change applied exactly once, in order: nothing lost, nothing replayed.
        assert recorder.event_revisions() == puts
        assert not any(c.resync for c in recorder.snapshot()[1:])
        assert balancer.nodes() == sorted(model.items())
        assert balancer.pick_many(KEYS) == reference_picks("maglev", model, KEYS)


def test_compacted_while_disconnected_resyncs(
    etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = Proxy(etcd.client_port)
    balancer = liblb.Balancer("ring", [])
    recorder = Recorder()
    try:
        with watcher(balancer, proxy.url, "svc", recorder) as w:
            for node in "abc":
                etcd.put(f"svc/{node}")
            last = etcd.put("svc/d", '{"weight": 4}')
            assert w.wait_for_revision(last, BOUND)
            proxy.block()
            # Behind the watcher's back: remove, add, reweight, a bad value, then compact
            # away every revision it has not seen.
            etcd.delete("svc/a")
            etcd.put("svc/e", '{"weight": 2}')
            etcd.put("svc/b", '{"weight": 3}')
            etcd.put("svc/c", '{"weight": "x"}')  # rejected: c keeps weight 1
            now = etcd.put("svc/f")
            etcd.compact(now)
            seen = len(recorder.snapshot())
            assert w.revision == last
            with caplog.at_level(logging.WARNING, logger="liblb.etcd"):
                proxy.unblock()
                assert w.wait_for_revision(now, BOUND)
            model = {"b": 3, "c": 1, "d": 4, "e": 2, "f": 1}
            assert balancer.nodes() == sorted(model.items())
            assert balancer.pick_many(KEYS) == reference_picks("ring", model, KEYS)
            resync = recorder.snapshot()[seen:]
            assert len(resync) == 1 and resync[0].resync and resync[0].revision == now
            assert resync[0].removed == ("a",) and set(resync[0].added) == {"e", "f"}
            assert "revision compacted" in caplog.text
            assert "etcd key 'svc/c': \"weight\" must be an integer" in caplog.text
            assert "keeping its last good value (weight 1)" in caplog.text
            # And it watches on from the range's revision.
            more = etcd.put("svc/g")
            assert w.wait_for_revision(more, BOUND)
            assert recorder.snapshot()[-1].event_revisions == (more,)
    finally:
        proxy.close()


BAD_VALUES = [
    ("bad JSON", b'{"weight": 3', "not valid JSON"),
    ("unknown field", b'{"weight": 3, "zone": "eu"}', "unknown field 'zone'"),
    ("negative weight", b'{"weight": -3}', "out of range"),
    ("bool weight", b'{"weight": true}', "must be an integer"),
    ("float weight", b'{"weight": 2.5}', "must be an integer"),
    ("weight too big", b'{"weight": 4294967296}', "out of range"),
    ("tag too big", b'{"tag": 18446744073709551616}', "out of range"),
    ("not an object", b"[3]", "must be a JSON object"),
    ("not UTF-8", b"\xff\xfe", "not UTF-8"),
]
BAD_KEYS = [
    ("empty id", b"svc/", "node id is empty"),
    ("NUL in id", b"svc/x\0y", "node id contains a NUL character"),
    ("id not UTF-8", b"svc/\xc3", "node id is not UTF-8"),
]


def test_malformed_values_keep_last_good(etcd: EtcdServer, caplog: pytest.LogCaptureFixture) -> None:
    balancer = liblb.Balancer("ring", [])
    recorder = Recorder()
    caplog.set_level(logging.WARNING, logger="liblb.etcd")
    with watcher(balancer, etcd.url, "svc", recorder) as w:
        etcd.put("svc/a", '{"weight": 2, "tag": 9}')
        revision = etcd.put("svc/b")
        assert w.wait_for_revision(revision, BOUND)
        good = balancer.nodes()
        picks = balancer.pick_many(KEYS)
        assert good == [("a", 2), ("b", 1)]
        for what, value, problem in BAD_VALUES:
            caplog.clear()
            # One bad value for a known node (keeps its last good value) and one for a new
            # node (stays absent).
            etcd.put("svc/a", value)
            revision = etcd.put("svc/new", value)
            assert w.wait_for_revision(revision, BOUND), what
            assert balancer.nodes() == good, what
            assert balancer.pick_many(KEYS) == picks, what
            assert w.members["a"] == Member(2, 9), what
            messages = [r.getMessage() for r in caplog.records if r.name == "liblb.etcd"]
            assert any(
                m.startswith("etcd key 'svc/a': ") and problem in m and "weight 2" in m
                for m in messages
            ), (what, messages)
            assert any(
                m.startswith("etcd key 'svc/new': ") and problem in m and "stays absent" in m
                for m in messages
            ), (what, messages)
            assert all(r.levelno == logging.WARNING for r in caplog.records), what
        for what, key, problem in BAD_KEYS:
            caplog.clear()
            revision = etcd.put(key, "")
            assert w.wait_for_revision(revision, BOUND), what
            assert balancer.nodes() == good, what
            assert any(problem in r.getMessage() for r in caplog.records), (what, caplog.text)
            assert recorder.snapshot()[-1].rejected, what
            # Deleting a key that was never a member changes nothing either.
            revision = etcd.delete(key)
            assert w.wait_for_revision(revision, BOUND), what
            assert balancer.nodes() == good, what
        # A good value after all that applies as usual.
        revision = etcd.put("svc/a", '{"weight": 7}')
        assert w.wait_for_revision(revision, BOUND)
        assert balancer.nodes() == [("a", 7), ("b", 1)]
        # A bad value seen in the initial range of a second watcher: absent from the start.
        other = liblb.Balancer("ring", [])
        caplog.clear()
        with watcher(other, etcd.url, "svc") as w2:
            assert w2.wait_for_revision(revision, BOUND)
            assert other.nodes() == [("a", 7), ("b", 1)]
        assert "etcd key 'svc/new'" in caplog.text and "stays absent" in caplog.text


class PoisonedBalancer:
    """A liblb.Balancer whose update() fails while a node named "poison" is in the set, as a
    real update() fails on a membership the core refuses."""

    def __init__(self) -> None:
        self.inner = liblb.Balancer("ring", [])

    def update(self, nodes: list[tuple[str, int] | liblb.Node]) -> None:
        if any(liblb.etcd._pair(node)[0] == "poison" for node in nodes):
            raise liblb.TooManyNodesError("refused: poison")
        self.inner.update(nodes)


def test_failed_update_keeps_last_good(etcd: EtcdServer, caplog: pytest.LogCaptureFixture) -> None:
    balancer = PoisonedBalancer()
    recorder = Recorder()
    caplog.set_level(logging.WARNING, logger="liblb.etcd")

    def logged(text: str) -> bool:
        deadline = time.monotonic() + BOUND
        while text not in caplog.text:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    with EtcdMembership(balancer, etcd.url, "svc", on_change=recorder, backoff=0.05) as w:
        assert w.balancer is balancer
        good = etcd.put("svc/a")
        assert w.wait_for_revision(good, BOUND)
        poisoned = etcd.put("svc/poison")
        assert logged(f"update() at revision {poisoned} failed: TooManyNodesError")
        # The balancer does not hold poisoned's membership: the revision stays where the
        # balancer is, and a wait for poisoned does not return True.
        assert w.revision == good
        assert not w.wait_for_revision(poisoned, 0.2)
        assert balancer.inner.nodes() == [("a", 1)]
        assert [c.revision for c in recorder.snapshot()][-1] == good  # no on_change
        # etcd's membership is tracked all the same: b joins while poison blocks updates...
        blocked = etcd.put("svc/b")
        assert logged(f"update() at revision {blocked} failed: TooManyNodesError")
        assert w.revision == good and not w.wait_for_revision(blocked, 0.2)
        assert balancer.inner.nodes() == [("a", 1)]
        assert list(w.members) == ["a", "b", "poison"]
        # ...and once poison goes, the whole membership applies, relative to the last applied.
        cured = etcd.delete("svc/poison")
        assert w.wait_for_revision(cured, BOUND)
        assert w.revision == cured
        assert balancer.inner.nodes() == [("a", 1), ("b", 1)]
        last = recorder.snapshot()[-1]
        assert (last.revision, last.added, last.removed) == (cured, ("b",), ())


def test_failed_update_is_not_replayed_after_a_reconnect(
    etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The changes consumed by a failed update are not watched again after a reconnect (the
    # watch resumes after the last revision read, not the last applied one), and the revision
    # still says what the balancer holds.
    balancer = PoisonedBalancer()
    caplog.set_level(logging.INFO, logger="liblb.etcd")
    with EtcdMembership(balancer, etcd.url, "svc", backoff=0.05, max_backoff=0.2) as w:
        good = etcd.put("svc/a")
        assert w.wait_for_revision(good, BOUND)
        poisoned = etcd.put("svc/poison")
        deadline = time.monotonic() + BOUND
        while f"update() at revision {poisoned} failed" not in caplog.text:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        etcd.restart()
        cured = etcd.delete("svc/poison")
        assert w.wait_for_revision(cured, BOUND)
        assert balancer.inner.nodes() == [("a", 1)]
    assert f"watching 'svc/' from revision {poisoned + 1}" in caplog.text
    assert f"watching 'svc/' from revision {good + 1}" not in caplog.text.split(
        f"update() at revision {poisoned} failed"
    )[1]


def test_stop_while_etcd_is_down(etcd: EtcdServer) -> None:
    balancer = liblb.Balancer("ring", [])
    w = EtcdMembership(balancer, etcd.url, "svc", backoff=5, max_backoff=30, timeout=5)
    w.start()
    with pytest.raises(RuntimeError, match="already started"):
        w.start()
    revision = etcd.put("svc/a")
    assert w.wait_for_revision(revision, BOUND)
    assert w.running
    etcd.stop()
    # The watcher is now waiting out a 2.5-5 s backoff; stop() must not wait for it (the
    # bound is far beyond any backoff: it only catches a stop() that waits forever).
    w.stop(timeout=BOUND * 2)
    assert not w.running
    assert balancer.nodes() == [("a", 1)]  # the last membership stays
    w.stop()  # twice is fine


def test_stop_while_watching_idle(etcd: EtcdServer) -> None:
    balancer = liblb.Balancer("ring", [])
    w = EtcdMembership(balancer, etcd.url, "svc", timeout=30)
    w.start()
    assert w.wait_for_revision(1, BOUND)
    time.sleep(0.2)  # let it sit in the watch's blocking read
    w.stop(timeout=BOUND)
    assert not w.running


def test_on_change_error_is_logged(etcd: EtcdServer, caplog: pytest.LogCaptureFixture) -> None:
    def broken(change: Change) -> None:
        raise RuntimeError(f"callback broke at {change.revision}")

    balancer = liblb.Balancer("ring", [])
    with caplog.at_level(logging.ERROR, logger="liblb.etcd"):
        with EtcdMembership(balancer, etcd.url, "svc", on_change=broken, backoff=0.05) as w:
            first = etcd.put("svc/a")
            assert w.wait_for_revision(first, BOUND)
            second = etcd.put("svc/b")
            assert w.wait_for_revision(second, BOUND)
    assert f"on_change raised at revision {first}" in caplog.text
    assert f"RuntimeError: callback broke at {second}" in caplog.text
    assert balancer.nodes() == [("a", 1), ("b", 1)]


def test_etcd_wiped_resyncs(etcd: EtcdServer) -> None:
    """etcd comes back with its data gone (revisions restart at 1): the watcher cannot resume
    from its own revision there, so it ranges again."""
    balancer = liblb.Balancer("ring", [])
    recorder = Recorder()
    with watcher(balancer, etcd.url, "svc", recorder) as w:
        for i in range(10):
            revision = etcd.put(f"svc/n{i}")
        assert w.wait_for_revision(revision, BOUND)
        seen = len(recorder.snapshot())
        etcd.stop()
        shutil.rmtree(etcd.data)
        etcd.start()
        etcd.put("svc/fresh")
        eventually(lambda: balancer.nodes() == [("fresh", 1)], "membership of the new etcd")
        # on_change runs just after update(): wait for its record too.
        eventually(
            lambda: any(c.nodes == (("fresh", 1),) for c in recorder.snapshot()[seen:]),
            "on_change for the new etcd's membership",
        )
        # The range may come before or after the put (it races the watcher's reconnection).
        after = recorder.snapshot()[seen:]
        assert after[0].resync and set(after[0].removed) == {f"n{i}" for i in range(10)}


# -- TLS, users, several endpoints (issue 20) --------------------------------------------------


@pytest.fixture
def tls_etcd(tmp_path: Path, certs: Certs) -> Iterator[EtcdServer]:
    """etcd on https://127.0.0.1 requiring client certificates (--client-cert-auth)."""
    server = EtcdServer(etcd_binary(), tmp_path, certs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def auth_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """etcd with authentication on (user root), tokens living 1 s unused."""
    server = EtcdServer(etcd_binary(), tmp_path, extra=("--auth-token-ttl=1",))
    server.start()
    try:
        server.enable_auth("s3cret")
        yield server
    finally:
        server.stop()


def test_mutual_tls(tls_etcd: EtcdServer, certs: Certs) -> None:
    etcd = tls_etcd
    etcd.put("svc/a", '{"weight": 2}')
    balancer = liblb.Balancer("ring", [])
    with EtcdMembership(
        balancer,
        etcd.url,
        "svc",
        ca_file=certs["ca.pem"],
        cert_file=certs["client.pem"],
        key_file=certs["client.key"],
        backoff=0.05,
    ) as w:
        revision = etcd.put("svc/b")
        assert w.wait_for_revision(revision, BOUND)
        assert balancer.nodes() == [("a", 2), ("b", 1)]
        revision = etcd.delete("svc/a")
        assert w.wait_for_revision(revision, BOUND)
        assert balancer.nodes() == [("b", 1)]


def test_stop_while_tls_watch_idle(tls_etcd: EtcdServer, certs: Certs) -> None:
    """stop() shuts a TLS watch blocked in its idle read (an SSL read) at once."""
    etcd = tls_etcd
    revision = etcd.put("svc/a")
    w = EtcdMembership(
        liblb.Balancer("ring", []), etcd.url, "svc", ca_file=certs["ca.pem"],
        cert_file=certs["client.pem"], key_file=certs["client.key"], idle_timeout=60,
    )
    w.start()
    assert w.wait_for_revision(revision, BOUND)
    time.sleep(0.2)  # let it sit in the watch's blocking read
    began = time.monotonic()
    w.stop(timeout=BOUND)
    assert not w.running
    assert time.monotonic() - began < 5, "stop() waited for the TLS read"


def test_stop_while_tls_watch_connects(
    tls_etcd: EtcdServer, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop() that lands while the watch's connection is being wrapped in TLS (what
    test_cli_tls_and_user's SIGTERM hit under load: the CLI prints the range's membership,
    the test reads it and terminates the CLI at once, while the watch connects).

    wrap_socket detaches the plain socket, so a stop() in that moment shut a socket without a
    descriptor; the watch then opened and sat in its idle read, and stop() waited for it
    (up to idle_timeout: 15 minutes in the CLI)."""
    etcd = tls_etcd
    etcd.put("svc/a")
    w = EtcdMembership(
        liblb.Balancer("ring", []), etcd.url, "svc", ca_file=certs["ca.pem"],
        cert_file=certs["client.pem"], key_file=certs["client.key"], idle_timeout=30,
    )
    aborted = threading.Event()
    abort = liblb.etcd._Conn.abort

    def abort_and_tell(conn: Any) -> None:
        abort(conn)
        aborted.set()

    monkeypatch.setattr(liblb.etcd._Conn, "abort", abort_and_tell)
    assert w._ssl is not None
    context: ssl.SSLContext = w._ssl
    wraps: list[threading.Thread] = []

    class StopOnSecondWrap:
        """The watcher's SSLContext, calling stop() just after the second wrap (the range
        is the first connection, the watch the second), before the watcher has the TLS
        socket in hand."""

        def wrap_socket(self, sock: socket.socket, **options: Any) -> ssl.SSLSocket:
            tls = context.wrap_socket(sock, **options)
            if len(wraps) == 1:
                stopper = threading.Thread(target=w.stop)
                stopper.start()
                wraps.append(stopper)
                assert aborted.wait(BOUND)  # stop() has shut the connection it saw
            else:
                wraps.append(threading.current_thread())
            return tls

    w._ssl = StopOnSecondWrap()  # type: ignore[assignment]
    w.start()
    eventually(lambda: len(wraps) == 2, "the watch's connection")
    wraps[1].join(5)
    assert not wraps[1].is_alive(), "stop() waits for a watch it did not shut"
    assert not w.running


@pytest.mark.parametrize(
    ("case", "problem"),
    [
        ("wrong CA", "TLS: unable to get local issuer certificate (is ca_file the CA that signed"),
        ("no client certificate", "it requires a client certificate (give cert_file and key_file)"),
    ],
)
def test_tls_mistakes_are_clear_and_keep_the_membership(
    tls_etcd: EtcdServer, certs: Certs, caplog: pytest.LogCaptureFixture, case: str, problem: str
) -> None:
    etcd = tls_etcd
    etcd.put("svc/a")
    options: dict[str, Any] = {
        "wrong CA": {"ca_file": certs["other.pem"], "cert_file": certs["client.pem"],
                     "key_file": certs["client.key"]},
        "no client certificate": {"ca_file": certs["ca.pem"]},
    }[case]
    balancer = liblb.Balancer("ring", [("kept", 1)])
    caplog.set_level(logging.WARNING, logger="liblb.etcd")
    with EtcdMembership(balancer, etcd.url, "svc", backoff=0.05, max_backoff=0.2, **options) as w:
        eventually(lambda: problem in caplog.text, f"{case}: {problem!r} logged")
        assert w.revision == 0
        assert balancer.nodes() == [("kept", 1)]


def test_tls_settings_are_checked_at_construction(certs: Certs, tmp_path: Path) -> None:
    b = liblb.Balancer("ring", [])
    https = "https://127.0.0.1:2379"
    bad: list[tuple[dict[str, Any], str, type[Exception], str]] = [
        ({"ca_file": str(tmp_path / "missing.pem")}, https, ValueError, "ca_file .* is not a readable file"),
        ({"ca_file": certs["client.key"]}, https, ValueError, "not a CA bundle"),
        ({"cert_file": certs["client.pem"], "key_file": certs["other.key"]}, https, ValueError,
         "not a certificate and its key"),
        ({"key_file": certs["client.key"]}, https, ValueError, "key_file given without cert_file"),
        ({"ca_file": certs["ca.pem"]}, "http://127.0.0.1:2379", ValueError, "no endpoint is https"),
        ({"ca_file": 3}, https, TypeError, "ca_file must be a path"),
        ({"password": "x"}, https, ValueError, "user must be a non-empty str"),
        ({"user": "root", "password": 3}, https, TypeError, "password must be a str"),
    ]
    for options, url, error, message in bad:
        with pytest.raises(error, match=message):
            EtcdMembership(b, url, "svc", **options)
    with pytest.raises(ValueError, match="no etcd endpoint given"):
        EtcdMembership(b, [], "svc")
    with pytest.raises(TypeError, match="url must be a str"):
        EtcdMembership(b, [https, 3], "svc")  # type: ignore[list-item]


def test_user_password_and_token_renewal(
    auth_etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    etcd = auth_etcd
    etcd.put("svc/a")
    proxy = Proxy(etcd.client_port)
    balancer = liblb.Balancer("ring", [])
    caplog.set_level(logging.INFO, logger="liblb.etcd")
    try:
        with EtcdMembership(
            balancer, proxy.url, "svc", user="root", password="s3cret", backoff=0.05,
            max_backoff=0.2,
        ) as w:
            revision = etcd.put("svc/b")
            assert w.wait_for_revision(revision, BOUND)
            assert balancer.nodes() == [("a", 1), ("b", 1)]
            assert "authenticated as 'root'" in caplog.text
            # Cut off for longer than the token lives (1 s): the next watch is refused, the
            # watcher authenticates again once and goes on.
            proxy.block()
            time.sleep(2.5)
            revision = etcd.put("svc/c")
            proxy.unblock()
            assert w.wait_for_revision(revision, BOUND)
            assert balancer.nodes() == [("a", 1), ("b", 1), ("c", 1)]
            assert "invalid auth token; authenticating again" in caplog.text
            # The password changes under the watcher: its next login fails, that is logged,
            # and the balancer keeps the last good membership.
            etcd.call("/v3/auth/user/changepw", {"name": "root", "password": "n3w"})
            etcd.password = "n3w"
            caplog.clear()
            proxy.block()
            time.sleep(2.5)
            etcd.put("svc/d")
            proxy.unblock()
            eventually(
                lambda: "authentication failed, invalid user ID or password (check the user "
                "name 'root' and its password)" in caplog.text,
                "the failed login logged",
            )
            assert balancer.nodes() == [("a", 1), ("b", 1), ("c", 1)]
            assert w.revision == revision
    finally:
        proxy.close()


@pytest.mark.parametrize(
    ("credentials", "problem"),
    [
        ({"user": "root", "password": "wrong"},
         "authentication failed, invalid user ID or password (check the user name 'root'"),
        ({}, "user name is empty (etcd has authentication enabled: give user= and password=)"),
    ],
)
def test_wrong_password_is_clear_and_keeps_the_membership(
    auth_etcd: EtcdServer, caplog: pytest.LogCaptureFixture, credentials: dict[str, Any],
    problem: str,
) -> None:
    auth_etcd.put("svc/a")
    balancer = liblb.Balancer("ring", [("kept", 1)])
    caplog.set_level(logging.WARNING, logger="liblb.etcd")
    with EtcdMembership(balancer, auth_etcd.url, "svc", backoff=0.05, max_backoff=0.2,
                        **credentials) as w:
        eventually(lambda: problem in caplog.text, f"{problem!r} logged")
        assert w.revision == 0 and balancer.nodes() == [("kept", 1)]


def first_line(process: subprocess.Popen[str], limit: float) -> str:
    """The first line `process` prints, waited for at most `limit` seconds: a watcher that
    never prints fails the test instead of hanging it (readline alone waits forever)."""
    assert process.stdout is not None
    stdout = process.stdout
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=limit)
    except queue.Empty:
        pytest.fail(f"no line from the CLI within {limit:g} s")


def stop_cli(process: subprocess.Popen[str], limit: float) -> None:
    """SIGTERM, which the CLI must obey within `limit` seconds (stop() is prompt); else it is
    killed and the test fails. Without the kill, leaving `with Popen(...)` would wait for the
    process with no limit at all (Popen.__exit__ calls wait())."""
    process.terminate()
    try:
        process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"the CLI did not exit within {limit:g} s of SIGTERM; stderr:\n{stderr}")


def test_cli_tls_and_user(tmp_path: Path, certs: Certs) -> None:
    etcd = EtcdServer(etcd_binary(), tmp_path, certs)
    etcd.start()
    try:
        etcd.enable_auth("pw:with:colons")
        start = etcd.put("svc/a")
        args = [
            sys.executable, "-m", "liblb.etcd", "--url", etcd.url, "--prefix", "svc", "--json",
            "--cacert", certs["ca.pem"], "--cert", certs["client.pem"],
            "--key-file", certs["client.key"],
        ]
        for user, env in (("root:pw:with:colons", {}), ("root", {"LB_ETCD_PASSWORD": "pw:with:colons"})):
            with subprocess.Popen(
                [*args, "--user", user], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env={**os.environ, **env},
            ) as process:
                try:
                    line = first_line(process, BOUND * 4)
                finally:
                    stop_cli(process, BOUND)
            assert json.loads(line) == {"revision": start, "nodes": [["a", 1]], "keys": {}}, user
    finally:
        etcd.stop()
    env = {k: v for k, v in os.environ.items() if k != "LB_ETCD_PASSWORD"}
    done = subprocess.run(
        [sys.executable, "-m", "liblb.etcd", "--url", "http://127.0.0.1:1", "--prefix", "svc",
         "--user", "root"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )
    assert done.returncode == 2 and "--user root: no password" in done.stderr, done.stderr


def test_several_endpoints_fail_over(etcd: EtcdServer, caplog: pytest.LogCaptureFixture) -> None:
    """Two ways to the same etcd: the one in use is cut, the watch goes on through the other."""
    proxies = [Proxy(etcd.client_port), Proxy(etcd.client_port)]
    balancer = liblb.Balancer("ring", [])
    recorder = Recorder()
    caplog.set_level(logging.INFO, logger="liblb.etcd")
    try:
        with EtcdMembership(
            balancer, [p.url for p in proxies], "svc", on_change=recorder, backoff=0.05,
            max_backoff=0.2,
        ) as w:
            revisions = [etcd.put("svc/a")]
            assert w.wait_for_revision(revisions[-1], BOUND)
            for cut in (0, 1, 0):
                caplog.clear()
                proxies[cut].block()
                proxies[1 - cut].unblock()
                revisions.append(etcd.put(f"svc/n{len(revisions)}"))
                assert w.wait_for_revision(revisions[-1], BOUND), f"cut {cut}"
                # The cut one was tried first (it answered last), then the other.
                assert f"etcd {proxies[cut].url}: " in caplog.text, caplog.text
            # Each change applied once, in order, across the switches.
            applied = recorder.event_revisions()
            assert applied[-3:] == revisions[1:] and len(set(applied)) == len(applied), applied
            assert balancer.nodes() == [("a", 1), ("n1", 1), ("n2", 1), ("n3", 1)]
            assert "trying the next endpoint" in caplog.text
    finally:
        for p in proxies:
            p.close()


# -- two watcher processes --------------------------------------------------------------------


def python_watcher(url: str, algorithm: str, keys: list[str]) -> list[str]:
    """The command line of a Python watcher process printing JSON lines."""
    args = [sys.executable, "-m", "liblb.etcd", "--url", url, "--prefix", "svc", "--json"]
    args += ["--algorithm", algorithm, "--backoff", "0.05", "--max-backoff", "0.2"]
    for key in keys:
        args += ["--key", key]
    return args


class CliWatcher:
    """A watcher process printing one JSON line per applied membership (`python -m liblb.etcd
    --json`, or any command printing the same lines); its output read on threads."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.latest: dict[str, Any] = {"revision": 0}
        self.stderr: list[str] = []
        assert self.process.stdout is not None and self.process.stderr is not None
        self.threads = [
            threading.Thread(target=self.read, args=(self.process.stdout, self.lines.put)),
            threading.Thread(target=self.read, args=(self.process.stderr, self.stderr.append)),
        ]
        for t in self.threads:
            t.start()

    @staticmethod
    def read(stream: IO[str], sink: Callable[[str], None]) -> None:
        for line in stream:
            sink(line)

    def until(self, revision: int) -> dict[str, Any]:
        """The line for `revision`, the next line the process prints at or past it."""
        self.lines_until(lambda line: line["revision"] >= revision, f"revision {revision}")
        return self.latest

    def lines_until(self, done: Callable[[dict[str, Any]], bool], what: str) -> list[dict[str, Any]]:
        """The lines the process prints until one satisfies `done` (included); fails after
        BOUND seconds without it."""
        deadline = time.monotonic() + BOUND
        seen: list[dict[str, Any]] = []
        while not (seen and done(seen[-1])) and not (not seen and done(self.latest)):
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no line for {what}; stderr:\n{''.join(self.stderr)}")
            # Exactly the documented format: compact JSON, one object per line (Python escapes
            # non-ASCII, serde_json in `lb watch` writes it as UTF-8: both are that JSON).
            parsed: dict[str, Any] = json.loads(line)
            compact = [json.dumps(parsed, separators=(",", ":"), ensure_ascii=a) for a in (True, False)]
            assert line.removesuffix("\n") in compact
            assert list(parsed) == ["revision", "nodes", "keys"]
            self.latest = parsed
            seen.append(parsed)
        return seen

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        for t in self.threads:
            t.join(10)
        for stream in (self.process.stdout, self.process.stderr):
            assert stream is not None
            stream.close()


def lb_watcher(url: str, algorithm: str, keys: list[str]) -> list[str]:
    """The command line of the Rust `lb watch --json` (LB_BIN, set by scripts/test-python.sh)."""
    lb = os.environ.get("LB_BIN") or shutil.which("lb")
    if not lb:
        pytest.fail("no `lb` binary: set LB_BIN (scripts/test-python.sh builds it)")
    args = [lb, "watch", "--etcd", url, "--prefix", "svc", "--json", "--algorithm", algorithm]
    for key in keys:
        args += ["--key", key]
    return args


@pytest.mark.parametrize("algorithm", ["ring", "jump", "maglev"])
@pytest.mark.parametrize("pair", ["python+python", "python+rust"])
def test_two_processes_agree(etcd: EtcdServer, algorithm: str, pair: str) -> None:
    """Two watcher processes (two Python ones, or Python and the Rust `lb watch`) print the same
    membership and the same node for every key after every change."""
    keys = [f"k{i}" for i in range(30)] + ["user-\u00e9", "z"]
    etcd.put("svc/seed", '{"weight": 2}')
    second = lb_watcher if pair == "python+rust" else python_watcher
    commands = [python_watcher(etcd.url, algorithm, keys), second(etcd.url, algorithm, keys)]
    watchers = [CliWatcher(command) for command in commands]
    model = {"seed": 2}
    try:
        first = [w.until(1) for w in watchers]
        assert first[0] == first[1]
        assert first[0]["nodes"] == [["seed", 2]]
        steps: list[tuple[str, bytes | None]] = [
            ("b", b""),
            ("a", b'{"weight": 3}'),
            ("\u00e9t\u00e9", b""),  # non-ASCII: sorted by UTF-8 bytes, after "z"
            ("z", b'{"weight": 2, "tag": 1}'),
            ("a", b'{"weight": 1}'),
            ("b", None),
            ("a", b'{"weight": "heavy"}'),  # rejected in both: a keeps weight 1
            # The shared value table's disagreements (issue 20, finding 2): rejected in both,
            # and -0 is 0 in both.
            ("a", b'{"weight": 1, "weight": 9}'),
            ("z", b'{"weight": -0, "tag": -0}'),
            ("a", b'{"weight": 1.0}'),
            ("c", b'{"weight": 0}'),
            ("seed", None),
            ("B", b""),
        ]
        for node, value in steps:
            if value is None:
                revision = etcd.delete(f"svc/{node}")
                model.pop(node)
            else:
                revision = etcd.put(f"svc/{node}", value)
                try:
                    model[node] = parse_member(value).weight
                except ValueError:
                    pass
            lines = [w.until(revision) for w in watchers]
            assert lines[0] == lines[1], (node, value)
            assert lines[0]["revision"] == revision
            nodes = sorted(model.items(), key=lambda n: n[0].encode())
            assert lines[0]["nodes"] == [list(n) for n in nodes]
            want = reference_picks(algorithm, model, keys)
            assert lines[0]["keys"] == dict(zip(keys, want, strict=True))
            assert list(lines[0]["keys"]) == sorted(keys)  # in a fixed order, as in Rust
    finally:
        for w in watchers:
            w.close()
    for w in watchers:
        assert w.process.returncode in (0, -signal.SIGTERM), "".join(w.stderr)
        assert "svc/a" in "".join(w.stderr), "the rejected value is reported"
    python_stderr = "".join(watchers[0].stderr)
    assert "etcd key 'svc/a': \"weight\" must be an integer" in python_stderr


@pytest.mark.parametrize("pair", ["python+python", "python+rust"])
def test_wiped_etcd_two_processes_agree(etcd: EtcdServer, pair: str) -> None:
    """Issue 20's wipe: both watchers hold a and b at revision 63; etcd comes back on the same
    port with an empty data directory (revisions start over); c is added, d with weight 5, a
    deleted (a no-op there: the new etcd never had a). Both must drop what the old etcd held
    and agree with each other and with the new etcd at every revision they print."""
    keys = [f"k{i}" for i in range(20)]
    while etcd.put("other/filler") < 61:  # outside the prefix: only moves the revision
        pass
    etcd.put("svc/a")
    assert etcd.put("svc/b") == 63
    second = lb_watcher if pair == "python+rust" else python_watcher
    commands = [python_watcher(etcd.url, "maglev", keys), second(etcd.url, "maglev", keys)]
    watchers = [CliWatcher(command) for command in commands]
    try:
        before = [w.until(63) for w in watchers]
        assert before[0] == before[1] and before[0]["nodes"] == [["a", 1], ["b", 1]]
        etcd.stop(hard=True)
        shutil.rmtree(etcd.data)
        etcd.start()
        # The new etcd's membership at each of its revisions.
        models: dict[int, dict[str, int]] = {1: {}}
        models[etcd.put("svc/c")] = {"c": 1}
        models[etcd.put("svc/d", '{"weight": 5}')] = {"c": 1, "d": 5}
        deleted = etcd.call("/v3/kv/deleterange", {"key": b64(b"svc/a")})
        assert deleted.get("deleted") in (None, "0")  # a is not in the new etcd
        last = max(models)
        assert last == 3 and int(deleted["header"]["revision"]) == last
        final = {"c": 1, "d": 5}
        lines = [
            w.lines_until(lambda line: line["nodes"] == [["c", 1], ["d", 5]], "c and d")
            for w in watchers
        ]
        for w, printed in zip(watchers, lines, strict=True):
            for line in printed:
                assert line["revision"] in models, (w.process.args, line)
                model = models[line["revision"]]
                assert line["nodes"] == [[n, m] for n, m in sorted(model.items())], line
                want = reference_picks("maglev", model, keys) if model else [None] * len(keys)
                assert line["keys"] == dict(zip(keys, want, strict=True)), line
            assert printed[-1]["revision"] == last
        assert lines[0][-1] == lines[1][-1]
        by_revision = [{line["revision"]: line for line in printed} for printed in lines]
        for revision in by_revision[0].keys() & by_revision[1].keys():
            assert by_revision[0][revision] == by_revision[1][revision], revision
        # And both follow the new etcd from there.
        revision = etcd.put("svc/e", '{"weight": 2}')
        after = [w.until(revision) for w in watchers]
        assert after[0] == after[1] and after[0]["revision"] == revision
        final["e"] = 2
        assert after[0]["nodes"] == [[n, m] for n, m in sorted(final.items())]
    finally:
        for w in watchers:
            w.close()


def test_cli_readable_output(etcd: EtcdServer) -> None:
    start = etcd.put("svc/a")
    with subprocess.Popen(
        [sys.executable, "-m", "liblb.etcd", "--url", etcd.url, "--prefix", "svc", "-k", "user-1"],
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            first = first_line(process, 60)
            revision = etcd.put("svc/b", '{"weight": 1000}')
            second = first_line(process, 60)
        finally:
            stop_cli(process, 15)
    assert first == f"revision {start} (full sync); +a; nodes a=1; user-1 -> a\n"
    moved = liblb.Balancer("maglev", [("a", 1), ("b", 1000)]).pick("user-1")
    where = "user-1 MOVED a -> b" if moved == "b" else "user-1 -> a"
    assert second == f"revision {revision}; +b; nodes a=1 b=1000; {where}\n"


def test_a_located_member_reaches_the_balancer_as_a_node() -> None:
    assert Member(2).node("a") == ("a", 2)
    located = Member(2, None, "us-east/us-east-1a", 1)
    assert located.node("a") == liblb.Node("a", 2, locality="us-east/us-east-1a", priority=1)
    b = liblb.Balancer("round_robin", [Member(1).node("x"), located.node("a")])
    assert b.nodes(located=True)[1].locality == "us-east/us-east-1a"
    with pytest.raises(ValueError, match="invalid locality"):
        parse_member(b'{"locality": "a/b/c/d"}')
