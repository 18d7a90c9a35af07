"""What liblb.httpx, liblb.requests, liblb.aiohttp and liblb.grpc add per request (issue 22, item 8).

Each client sends small keep-alive GETs to one loopback server (in a child process, so the two
do not share a GIL) twice: directly, and through liblb (a one-node round-robin balancer: a pick,
a lease and the outcome per request). Rounds alternate between the two so drift hits both alike;
the best round (the least disturbed by other work on the machine) is reported as microseconds
per request and the ratio liblb / direct, in wall time and in the client's CPU time. gRPC: unary
calls to a grpcio server (also in a child process) through one ``grpc.Channel`` and through
``liblb.grpc.Channel``. A last line measures liblb's own share without any I/O: httpx over a
MockTransport that answers at once, directly and through liblb.

    .venv/bin/python python/bench_integrations.py [--requests N] [--rounds R]   # after
    scripts/test-python.sh (or pip install ./python)
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import httpx
import requests

# `python python/bench_integrations.py` puts python/ first on sys.path, where the source folder
# liblb/ (no native module) would shadow the installed package: measure the installed one.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import liblb  # noqa: E402
import liblb.aiohttp  # noqa: E402
import liblb.grpc  # noqa: E402
import liblb.httpx  # noqa: E402
import liblb.requests  # noqa: E402

BODY = b'{"ok":true}'


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        # Headers and body in one write: two cost a ~40 ms delayed-ACK stall (TOOLCHAIN.md).
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
        self.wfile.write(head + BODY)

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def serve_grpc() -> None:
    from concurrent import futures

    def say(request: bytes, context: grpc.ServicerContext) -> bytes:
        return BODY

    handler = grpc.method_handlers_generic_handler("bench.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    server.start()
    server.wait_for_termination()


Times = tuple[float, float]  # per request, in microseconds: (wall clock, this process's CPU)


def since(start: Times, n: int) -> Times:
    return ((time.perf_counter() - start[0]) / n * 1e6, (time.process_time() - start[1]) / n * 1e6)


def per_request_us(send: Callable[[], object], n: int) -> Times:
    start = (time.perf_counter(), time.process_time())
    for _ in range(n):
        send()
    return since(start, n)


def report(name: str, direct: list[Times], balanced: list[Times]) -> None:
    """The best round of each, as wall time and as the client's CPU time (the server runs in
    another process, so CPU time is the client's own work: the steadier figure on a busy
    machine, where wall time also waits for the server to be scheduled)."""
    for n, what in enumerate(("wall", "cpu")):
        d, b = min(t[n] for t in direct), min(t[n] for t in balanced)
        label = f"{name} ({what})"
        print(f"{label:<25} direct {d:7.1f} us   liblb {b:7.1f} us   {b - d:+6.1f} us   ratio {b / d:.3f}")


def compare(name: str, direct: Callable[[], object], balanced: Callable[[], object], n: int, rounds: int) -> None:
    per_request_us(direct, n // 10)  # warm up: connections, caches
    per_request_us(balanced, n // 10)
    a, b = [], []
    for _ in range(rounds):
        a.append(per_request_us(direct, n))
        b.append(per_request_us(balanced, n))
    report(name, a, b)


async def acompare(node: str, balancer: liblb.Balancer, n: int, rounds: int) -> None:
    async def per_request(client: httpx.AsyncClient, url: str, count: int) -> Times:
        start = (time.perf_counter(), time.process_time())
        for _ in range(count):
            await client.get(url)
        return since(start, count)

    transport = liblb.httpx.AsyncTransport(balancer)
    async with httpx.AsyncClient() as plain, httpx.AsyncClient(transport=transport) as lb:
        await per_request(plain, f"http://{node}/", n // 10)
        await per_request(lb, "http://svc/", n // 10)
        a, b = [], []
        for _ in range(rounds):
            a.append(await per_request(plain, f"http://{node}/", n))
            b.append(await per_request(lb, "http://svc/", n))
    report("httpx.AsyncClient", a, b)


async def acompare_aiohttp(node: str, balancer: liblb.Balancer, n: int, rounds: int) -> None:
    async def per_request(get: Callable[[str], Any], url: str, count: int) -> Times:
        start = (time.perf_counter(), time.process_time())
        for _ in range(count):
            async with get(url) as response:
                await response.read()
        return since(start, count)

    async with aiohttp.ClientSession() as plain, liblb.aiohttp.Session(balancer) as lb:
        await per_request(plain.get, f"http://{node}/", n // 10)
        await per_request(lb.get, "http://svc/", n // 10)
        a, b = [], []
        for _ in range(rounds):
            a.append(await per_request(plain.get, f"http://{node}/", n))
            b.append(await per_request(lb.get, "http://svc/", n))
    report("aiohttp", a, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-grpc", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    if args.serve_grpc:
        serve_grpc()
        return
    child = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    grpc_child = subprocess.Popen([sys.executable, __file__, "--serve-grpc"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        node = f"127.0.0.1:{child.stdout.readline().strip()}"
        balancer = liblb.Balancer("round_robin", [node])
        n, rounds = args.requests, args.rounds

        with httpx.Client() as plain, httpx.Client(transport=liblb.httpx.Transport(balancer)) as lb:
            compare("httpx.Client", lambda: plain.get(f"http://{node}/"), lambda: lb.get("http://svc/"), n, rounds)

        with requests.Session() as plain_s, requests.Session() as lb_s:
            lb_s.mount("http://svc", liblb.requests.Adapter(balancer))
            compare("requests.Session", lambda: plain_s.get(f"http://{node}/"), lambda: lb_s.get("http://svc/"), n, rounds)

        asyncio.run(acompare(node, balancer, n, rounds))
        asyncio.run(acompare_aiohttp(node, balancer, n, rounds))

        assert grpc_child.stdout is not None
        grpc_node = f"127.0.0.1:{grpc_child.stdout.readline().strip()}"
        grpc_balancer = liblb.Balancer("round_robin", [grpc_node])
        with grpc.insecure_channel(grpc_node) as plain_c, liblb.grpc.Channel(grpc_balancer) as lb_c:
            plain_say: Any = plain_c.unary_unary("/bench.Echo/Say")
            lb_say = lb_c.unary_unary("/bench.Echo/Say")
            compare("grpc unary", lambda: plain_say(b"hi", timeout=5), lambda: lb_say(b"hi", timeout=5), n, rounds)

        mock = httpx.MockTransport(lambda request: httpx.Response(200, content=BODY))
        lb_mock = liblb.httpx.Transport(balancer, inner=mock)
        with httpx.Client(transport=mock) as plain, httpx.Client(transport=lb_mock) as lb:
            compare("httpx, no I/O", lambda: plain.get(f"http://{node}/"), lambda: lb.get("http://svc/"), n, rounds)
    finally:
        for process in (child, grpc_child):
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
