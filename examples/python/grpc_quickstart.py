"""The quickstart of docs/grpc.md, runnable: three gRPC servers on loopback (one answering
UNAVAILABLE), a liblb.grpc.Channel over them, ten unary calls. Every call succeeds: each
UNAVAILABLE is counted against its node and retried on another one.

    pip install 'liblb[grpc]'   # or: pip install ./python grpcio
    python examples/python/grpc_quickstart.py
"""

from concurrent import futures

import grpc

import liblb
import liblb.grpc


def serve(index: int, healthy: bool) -> str:
    def say(request: bytes, context: grpc.ServicerContext) -> bytes:
        if not healthy:
            context.abort(grpc.StatusCode.UNAVAILABLE, "down for maintenance")
        return b"hello from %d" % index

    handler = grpc.method_handlers_generic_handler("echo.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servers.append(server)
    return f"127.0.0.1:{port}"


servers: list[grpc.Server] = []
nodes = [serve(0, True), serve(1, True), serve(2, False)]

# The quickstart: a balancer over "host:port" targets, a channel pool, a method.
balancer = liblb.Balancer("round_robin", nodes)
with liblb.grpc.Channel(balancer) as channel:
    say = channel.unary_unary("/echo.Echo/Say")  # bytes in, bytes out (add serializers)
    for _ in range(10):
        print(say(b"hi", timeout=2.0).decode())

for node in balancer.stats():
    print(f"{node['id']}: {node['requests']} requests, {node['failures']} failures")
for server in servers:
    server.stop(grace=None)
