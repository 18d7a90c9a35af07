"""liblb.grpc against real grpcio servers on 127.0.0.1 (OS-picked ports): the calls follow the
balancer's picks, failures are retried on distinct nodes and counted with their kind, a node's
own answers are not retried, pushback pauses a node, streams retry only before their first
message, and every attempt's lease ends exactly once (in-flight back to 0)."""

from __future__ import annotations

import asyncio
import gc
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import grpc.aio
import pytest

import liblb
import liblb.grpc

SERVICE = "test.Echo"


def counted(b: liblb.Balancer) -> dict[str, tuple[int, int, int]]:
    """(requests, failures, in_flight) per node."""
    return {s["id"]: (s["requests"], s["failures"], s["in_flight"]) for s in b.stats()}


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, pushback_ms: int | None = None) -> None:
    if pushback_ms is not None:
        context.set_trailing_metadata((("grpc-retry-pushback-ms", str(pushback_ms)),))
    context.abort(code, code.name)


class Server:
    """One grpcio server answering Say (unary), Count (server streaming), Join (client
    streaming: the requests joined by commas) and Echo (bidirectional: each request back, with
    the server's index) as `behaviour` says:
    "ok", "unavailable", "exhausted" (RESOURCE_EXHAUSTED with a 30 s pushback), "invalid"
    (INVALID_ARGUMENT), "slow" (2 s), "break" (one message, then INTERNAL). With `load` set,
    every call's trailing metadata carries its ORCA report (`endpoint-load-metrics`, in the
    `form` given), or `orca` as given."""

    def __init__(self, index: int, behaviour: str) -> None:
        self.index, self.behaviour, self.calls = index, behaviour, 0
        self.load: liblb.ServerLoad | None = None
        self.form: Any = "text"
        self.orca: str | None = None
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Say": grpc.unary_unary_rpc_method_handler(self.say),
                "Count": grpc.unary_stream_rpc_method_handler(self.count),
                "Join": grpc.stream_unary_rpc_method_handler(self.join),
                "Echo": grpc.stream_stream_rpc_method_handler(self.echo),
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.server.start()

    def report(self, utilization: float, form: str = "text") -> None:
        """Every call's trailing metadata carries a ServerLoad's report at this utilisation."""
        self.load = liblb.ServerLoad()
        self.load.set_application_utilization(utilization)
        self.form = form

    def fail(self, context: grpc.ServicerContext) -> None:
        orca = self.orca
        if self.load is not None:
            self.load.finish(self.load.start())  # this call, counted before it is reported
            orca = self.load.header(self.form)
        if orca is not None:
            context.set_trailing_metadata((("endpoint-load-metrics", orca),))
        if self.behaviour == "unavailable":
            abort(context, grpc.StatusCode.UNAVAILABLE)
        elif self.behaviour == "exhausted":
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, 30_000)
        elif self.behaviour == "refuse-retries":  # a pushback that forbids retries (gRFC A6)
            context.set_trailing_metadata((("grpc-retry-pushback-ms", "-1"),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "go away")
        elif self.behaviour == "invalid":
            abort(context, grpc.StatusCode.INVALID_ARGUMENT)
        elif self.behaviour == "slow":
            time.sleep(2)

    def say(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        self.fail(context)
        user = dict(context.invocation_metadata()).get("x-user", "-")
        return b"%d %s %s" % (self.index, str(user).encode(), request)

    def count(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        self.calls += 1
        self.fail(context)
        for i in range(int(request)):
            yield b"%d:%d" % (self.index, i)
            if self.behaviour == "break":
                abort(context, grpc.StatusCode.INTERNAL)

    def join(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        self.fail(context)
        return b"%d " % self.index + b",".join(requests)

    def echo(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        self.calls += 1
        self.fail(context)
        for request in requests:
            yield b"%d:%s" % (self.index, request)
            if self.behaviour == "break":
                abort(context, grpc.StatusCode.INTERNAL)


@pytest.fixture
def servers() -> Iterator[Callable[..., list[Server]]]:
    started: list[Server] = []

    def start(*behaviours: str) -> list[Server]:
        made = [Server(len(started) + i, b) for i, b in enumerate(behaviours)]
        started.extend(made)
        return made

    yield start
    for s in started:
        s.server.stop(grace=None)


def say(channel: liblb.grpc.Channel) -> liblb.grpc.UnaryUnary[Any, Any]:
    return channel.unary_unary(f"/{SERVICE}/Say")


def test_calls_follow_the_balancers_own_picks(servers: Callable[..., list[Server]]) -> None:
    nodes = servers("ok", "ok", "ok")
    ids = [s.address for s in nodes]
    b = liblb.Balancer("round_robin", ids, seed=4)
    twin = liblb.Balancer("round_robin", ids, seed=4)
    with liblb.grpc.Channel(b) as channel:
        for _ in range(6):
            expected = ids.index(twin.pick())
            assert say(channel)(b"hi", timeout=5) == b"%d - hi" % expected
    assert counted(b) == {i: (2, 0, 0) for i in ids}


def test_failures_are_retried_on_distinct_nodes_with_their_kind(
    servers: Callable[..., list[Server]], refused: Callable[[], str]
) -> None:
    down, ok = servers("unavailable", "ok")
    closed = refused()
    ids = [down.address, closed, ok.address]
    b = liblb.Balancer("ring", ids, seed=1)
    # A key whose retry order ends at the working node.
    key = next(k for k in map(str, range(1000)) if b.attempts(k, 3)[-1] == ok.address)
    with liblb.grpc.Channel(b, key=lambda method, request, metadata: key) as channel:
        assert say(channel)(b"x", timeout=5) == b"1 - x"
    assert counted(b) == {down.address: (1, 1, 0), closed: (1, 1, 0), ok.address: (1, 0, 0)}
    assert (down.calls, ok.calls) == (1, 1)


def test_a_nodes_own_answer_is_raised_not_retried_and_not_a_failure(servers: Callable[..., list[Server]]) -> None:
    (bad,) = servers("invalid")
    (ok,) = servers("ok")
    b = liblb.Balancer("round_robin", [bad.address, ok.address], seed=2)
    with liblb.grpc.Channel(b) as channel:
        codes = []
        for _ in range(2):
            try:
                say(channel)(b"x", timeout=5)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                assert isinstance(error, grpc.Call)
                codes.append(error.code())
    assert sorted(c.name for c in codes) == ["INVALID_ARGUMENT", "OK"]
    assert counted(b) == {bad.address: (1, 0, 0), ok.address: (1, 0, 0)}
    assert bad.calls == 1


def test_pushback_pauses_the_node_and_deadlines_are_timeouts(servers: Callable[..., list[Server]]) -> None:
    busy, ok, slow = servers("exhausted", "ok", "slow")
    b = liblb.Balancer("round_robin", [busy.address, ok.address], seed=3)
    # Overloaded answers not retried here (the retry would wait out the 30 s pushback).
    with liblb.grpc.Channel(b, retry_on=["error", "timeout"]) as channel:
        outcomes = []
        for _ in range(6):
            try:
                outcomes.append(say(channel)(b"x", timeout=5))
            except grpc.RpcError as error:
                assert isinstance(error, grpc.Call)
                outcomes.append(error.code().name.encode())
    assert outcomes.count(b"RESOURCE_EXHAUSTED") == 1 and busy.calls == 1
    stats = {s["id"]: s for s in b.stats()}
    assert stats[busy.address]["status"] == "overloaded"
    until = stats[busy.address]["until"]
    assert until is not None and 29 < until - b.now() <= 30
    slow_b = liblb.Balancer("round_robin", [slow.address])
    with liblb.grpc.Channel(slow_b) as channel, pytest.raises(grpc.RpcError) as raised:
        say(channel)(b"x", timeout=0.3)
    assert isinstance(raised.value, grpc.Call)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert counted(slow_b) == {slow.address: (1, 1, 0)}


def test_a_budget_caps_retries(servers: Callable[..., list[Server]]) -> None:
    down, down2 = servers("unavailable", "unavailable")
    b = liblb.Balancer("round_robin", [down.address, down2.address], consecutive_failures=0)
    never = liblb.RetryBudget(ttl=1.0, min_per_sec=0, retry_percent=0.0)
    with liblb.grpc.Channel(b, budget=never) as channel:
        with pytest.raises(grpc.RpcError):
            say(channel)(b"x", timeout=5)
        assert down.calls + down2.calls == 1
        with pytest.raises(grpc.RpcError):
            say(channel)(b"x", timeout=5, budget=liblb.RetryBudget())  # per call: retried
        assert down.calls + down2.calls == 3


def test_streams_retry_only_before_their_first_message(servers: Callable[..., list[Server]]) -> None:
    down, ok, breaking = servers("unavailable", "ok", "break")
    b = liblb.Balancer("round_robin", [down.address, ok.address], seed=5)
    with liblb.grpc.Channel(b) as channel:
        count = channel.unary_stream(f"/{SERVICE}/Count")
        for _ in range(2):
            assert list(count(b"3", timeout=5)) == [b"1:0", b"1:1", b"1:2"]
        # Abandoned after one message: the answering attempt is cancelled, nothing counted
        # for its node (the down node's failure before it counts).
        before = counted(b)[ok.address]
        replies = count(b"3", timeout=5)
        assert next(replies) == b"1:0"
        del replies
        gc.collect()
        assert counted(b)[ok.address] == before
    assert counted(b)[ok.address] == (2, 0, 0) and counted(b)[down.address][2] == 0
    # A stream that fails after its first message: raised to the caller, no retry.
    b2 = liblb.Balancer("round_robin", [breaking.address, ok.address], seed=5)
    with liblb.grpc.Channel(b2) as channel:
        count = channel.unary_stream(f"/{SERVICE}/Count")
        got: list[bytes] = []
        with pytest.raises(grpc.RpcError):
            for _ in range(2):
                got.extend(count(b"3", timeout=5))
    assert got.count(b"2:0") == 1 and ok.calls >= 2
    assert counted(b2)[breaking.address] == (1, 1, 0)


def test_client_streams_retry_only_with_a_sequence_of_requests(servers: Callable[..., list[Server]]) -> None:
    down, ok = servers("unavailable", "ok")
    ids = [down.address, ok.address]
    b = liblb.Balancer("round_robin", ids, seed=5)
    with liblb.grpc.Channel(b) as channel:
        join = channel.stream_unary(f"/{SERVICE}/Join")
        # A list can be sent again: a call that met the down node first is retried on the other.
        for _ in range(4):
            assert join([b"a", b"b", b"c"], timeout=5) == b"1 a,b,c"
    assert counted(b)[ok.address] == (4, 0, 0) and counted(b)[down.address][2] == 0
    # A generator is sent once: a call that lands on the down node fails there. Round robin over
    # the two nodes: of two calls, one lands on each.
    b2 = liblb.Balancer("round_robin", ids, seed=5)
    calls_before = (down.calls, ok.calls)
    with liblb.grpc.Channel(b2) as channel:
        join = channel.stream_unary(f"/{SERVICE}/Join")
        answers: list[bytes] = []
        for _ in range(2):
            try:
                answers.append(join((m for m in (b"x", b"y")), timeout=5))
            except grpc.RpcError as error:
                assert isinstance(error, grpc.Call)
                answers.append(error.code().name.encode())
    assert sorted(answers) == [b"1 x,y", b"UNAVAILABLE"]
    assert (down.calls, ok.calls) == (calls_before[0] + 1, calls_before[1] + 1)
    assert counted(b2) == {down.address: (1, 1, 0), ok.address: (1, 0, 0)}


def test_a_callers_failing_request_iterator_is_not_the_nodes_fault(servers: Callable[..., list[Server]]) -> None:
    (ok,) = servers("ok")
    b = liblb.Balancer("round_robin", [ok.address])

    def requests() -> Iterator[bytes]:
        yield b"a"
        raise KeyError("the caller's own bug")

    def broken(_: Any) -> bytes:
        raise RuntimeError("cannot serialize")

    with liblb.grpc.Channel(b) as channel:
        with pytest.raises(KeyError, match="own bug"):
            channel.stream_unary(f"/{SERVICE}/Join")(requests(), timeout=5)
        with pytest.raises(KeyError, match="own bug"):
            list(channel.stream_stream(f"/{SERVICE}/Echo")(requests(), timeout=5))
        with pytest.raises(RuntimeError, match="serialize"):
            channel.stream_unary(f"/{SERVICE}/Join", request_serializer=broken)([b"a"], timeout=5)
        # An async iterable is grpc.aio's: refused before anything is picked.
        async def later() -> AsyncIterator[bytes]:
            yield b"a"

        with pytest.raises(TypeError, match="AsyncChannel"):
            channel.stream_unary(f"/{SERVICE}/Join")(later(), timeout=5)  # type: ignore[arg-type]
        # Cancelled, nothing counted: the node did nothing wrong; the next call goes through.
        assert counted(b) == {ok.address: (0, 0, 0)}
        assert channel.stream_unary(f"/{SERVICE}/Join")([b"a"], timeout=5) == b"0 a"
    assert counted(b) == {ok.address: (1, 0, 0)}


def test_bidirectional_streams_follow_the_picks_and_retry_before_their_first_reply(
    servers: Callable[..., list[Server]],
) -> None:
    down, ok, breaking = servers("unavailable", "ok", "break")
    b = liblb.Balancer("round_robin", [down.address, ok.address], seed=5)
    with liblb.grpc.Channel(b) as channel:
        echo = channel.stream_stream(f"/{SERVICE}/Echo")
        for _ in range(2):
            assert list(echo([b"p", b"q"], timeout=5)) == [b"1:p", b"1:q"]
        # Abandoned after one reply: cancelled, nothing counted for the answering node.
        before = counted(b)[ok.address]
        replies = echo([b"p", b"q"], timeout=5)
        assert next(replies) in (b"1:p",)
        replies.close()
        assert counted(b)[ok.address] == before
    assert counted(b)[down.address][1:] == (counted(b)[down.address][0], 0)
    assert counted(b)[ok.address] == (2, 0, 0)
    # A stream that fails after its first reply: raised to the caller, no retry, one failure.
    b2 = liblb.Balancer("round_robin", [breaking.address], seed=5)
    with liblb.grpc.Channel(b2) as channel:
        got: list[bytes] = []
        with pytest.raises(grpc.RpcError):
            got.extend(channel.stream_stream(f"/{SERVICE}/Echo")([b"p", b"q"], timeout=5))
    assert got == [b"2:p"] and counted(b2)[breaking.address] == (1, 1, 0)


def test_keys_route_calls_and_departed_nodes_lose_their_channel(servers: Callable[..., list[Server]]) -> None:
    nodes = servers("ok", "ok", "ok")
    ids = [s.address for s in nodes]
    b = liblb.Balancer("maglev", ids)

    def user(method: str, request: Any, metadata: Any) -> str | None:
        return dict(metadata or ()).get("x-user")

    with liblb.grpc.Channel(b, key=user) as channel:
        for name in ["alice", "bob", "carol", "dave"]:
            index = ids.index(b.pick(name))
            for _ in range(2):
                reply = say(channel)(b"x", timeout=5, metadata=(("x-user", name),))
                assert reply == b"%d %s x" % (index, name.encode())
        with pytest.raises(liblb.KeyRequiredError):
            say(channel)(b"x", timeout=5)
        gone = channel.channel(ids[0])
        assert channel.channel(ids[0]) is gone
        for i in ids:
            channel.channel(i)
        b.remove(ids[0])
        channel.channel(ids[1])  # 3 channels for 2 nodes: the departed one's is closed
        with pytest.raises(ValueError, match="closed channel"):
            closed_say: Any = gone.unary_unary(f"/{SERVICE}/Say")
            closed_say(b"x", timeout=5)
        with pytest.raises(ValueError, match="closed"):
            channel.close()
            channel.channel(ids[1])
    assert sum(i for _, _, i in counted(b).values()) == 0


def test_the_quickstart_runs() -> None:
    """docs/grpc.md's quickstart, as examples/python/grpc_quickstart.py runs it."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "python" / "grpc_quickstart.py"
    run = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60, check=True)
    lines = run.stdout.splitlines()
    assert sum(line.startswith("hello from ") for line in lines) == 10
    assert not any("hello from 2" in line for line in lines)
    import re

    broken = [m for m in (re.search(r": (\d+) requests, (\d+) failures", line) for line in lines) if m and m[2] != "0"]
    assert len(broken) == 1 and broken[0][1] == broken[0][2] and int(broken[0][1]) >= 3, run.stdout


def test_the_callers_serializers_and_a_no_retry_pushback(servers: Callable[..., list[Server]]) -> None:
    ok, no_retry, other = servers("ok", "refuse-retries", "ok")

    def broken(_: Any) -> bytes:
        raise RuntimeError("cannot serialize")

    def undecodable(_: bytes) -> Any:
        raise RuntimeError("cannot decode")

    b = liblb.Balancer("round_robin", [ok.address])
    with liblb.grpc.Channel(b) as channel:
        # A serializer or deserializer that fails is the caller's error, never the node's.
        with pytest.raises(RuntimeError, match="serialize"):
            channel.unary_unary(f"/{SERVICE}/Say", request_serializer=broken)(b"x", timeout=5)
        with pytest.raises(RuntimeError, match="decode"):
            channel.unary_unary(f"/{SERVICE}/Say", response_deserializer=undecodable)(b"x", timeout=5)
    assert counted(b) == {ok.address: (1, 0, 0)}
    # A negative pushback: the node is counted overloaded and the call is not retried.
    b2 = liblb.Balancer("round_robin", [no_retry.address, other.address], seed=1)
    with liblb.grpc.Channel(b2) as channel:
        results = []
        for _ in range(2):
            try:
                results.append(say(channel)(b"x", timeout=5))
            except grpc.RpcError as error:
                assert isinstance(error, grpc.Call)
                results.append(error.code().name.encode())
    assert results.count(b"UNAVAILABLE") == 1 and no_retry.calls == 1
    assert counted(b2)[no_retry.address] == (1, 1, 0)


# ---- liblb.grpc.AsyncChannel (grpc.aio) against the same grpcio servers ----------------------


def test_async_calls_follow_the_picks_and_retry_on_distinct_nodes(servers: Callable[..., list[Server]]) -> None:
    down, ok, ok2 = servers("unavailable", "ok", "ok")
    ids = [down.address, ok.address, ok2.address]
    b = liblb.Balancer("round_robin", ids, seed=4, consecutive_failures=0)

    async def main() -> list[bytes]:
        async with liblb.grpc.AsyncChannel(b) as channel:
            say_ = channel.unary_unary(f"/{SERVICE}/Say")
            return [await say_(b"hi", timeout=5) for _ in range(6)]

    replies = asyncio.run(main())
    # Every call was answered by a node that is up; the down node's attempts were retried.
    assert all(r in (b"1 - hi", b"2 - hi") for r in replies)
    requests, failures, in_flight = counted(b)[down.address]
    assert requests == failures == down.calls >= 1 and in_flight == 0
    assert counted(b)[ok.address][0] + counted(b)[ok2.address][0] == 6
    assert sum(i for _, _, i in counted(b).values()) == 0


def test_async_streams_retry_before_their_first_reply_and_abandoning_cancels(
    servers: Callable[..., list[Server]],
) -> None:
    down, ok, breaking = servers("unavailable", "ok", "break")
    b = liblb.Balancer("round_robin", [down.address, ok.address], seed=5)

    async def requests() -> AsyncIterator[bytes]:
        for m in (b"p", b"q"):
            yield m

    async def main() -> None:
        async with liblb.grpc.AsyncChannel(b) as channel:
            count = channel.unary_stream(f"/{SERVICE}/Count")
            for _ in range(2):
                assert [r async for r in count(b"3", timeout=5)] == [b"1:0", b"1:1", b"1:2"]
            # Abandoned after one reply: cancelled, nothing counted for the answering node.
            before = counted(b)[ok.address]
            replies = count(b"3", timeout=5)
            assert await replies.__anext__() == b"1:0"
            await replies.aclose()
            assert counted(b)[ok.address] == before
            # Client and bidirectional streams: a list is retried past the down node; an async
            # generator is sent once (here to whichever node the call gets).
            join = channel.stream_unary(f"/{SERVICE}/Join")
            echo = channel.stream_stream(f"/{SERVICE}/Echo")
            for _ in range(2):
                assert await join([b"a", b"b"], timeout=5) == b"1 a,b"
                assert [r async for r in echo([b"p", b"q"], timeout=5)] == [b"1:p", b"1:q"]
            attempts_before = down.calls + ok.calls
            try:
                answer = await join(requests(), timeout=5)
                assert answer == b"1 p,q"
            except grpc.RpcError as error:
                assert isinstance(error, grpc.aio.AioRpcError) and error.code() == grpc.StatusCode.UNAVAILABLE
            assert down.calls + ok.calls == attempts_before + 1

    asyncio.run(main())
    assert counted(b)[ok.address][1:] == (0, 0) and counted(b)[down.address][2] == 0

    # A stream that fails after its first reply: raised, not retried, one failure.
    b2 = liblb.Balancer("round_robin", [breaking.address])

    async def broken() -> list[bytes]:
        got: list[bytes] = []
        async with liblb.grpc.AsyncChannel(b2) as channel:
            with pytest.raises(grpc.RpcError):
                async for r in channel.unary_stream(f"/{SERVICE}/Count")(b"3", timeout=5):
                    got.append(r)
        return got

    assert asyncio.run(broken()) == [b"2:0"]
    assert counted(b2)[breaking.address] == (1, 1, 0)


def test_async_a_cancelled_call_cancels_its_lease_and_departed_nodes_close(servers: Callable[..., list[Server]]) -> None:
    slow, ok = servers("slow", "ok")
    b = liblb.Balancer("round_robin", [slow.address, ok.address], seed=1)
    twin = liblb.Balancer("round_robin", [slow.address, ok.address], seed=1)
    if twin.pick() != slow.address:
        b.pick()  # the first call goes to the slow node

    async def main() -> None:
        async with liblb.grpc.AsyncChannel(b) as channel:
            say_ = channel.unary_unary(f"/{SERVICE}/Say")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(say_(b"x", timeout=5), 0.2)
            # The cancelled attempt counted nothing and holds no in-flight slot.
            assert counted(b)[slow.address] == (0, 0, 0)
            assert await say_(b"x", timeout=5) == b"1 - x"
            gone = channel.channel(slow.address)
            b.remove(slow.address)
            channel.channel(ok.address)  # 2 channels for 1 node: the departed one's is closed
            await asyncio.sleep(0)
            await asyncio.gather(*channel._closing)
            assert gone.get_state() == grpc.ChannelConnectivity.SHUTDOWN
        with pytest.raises(ValueError, match="AsyncChannel is closed"):
            channel.channel(ok.address)

    asyncio.run(main())


# ---- Server-reported load: the report in each call's trailing metadata -----------------------
# (`endpoint-load-metrics`: grpcio never shows a Python client gRFC A51's
# `endpoint-load-metrics-bin`, see liblb/grpc.py)

CALLS = ["unary", "server-stream", "client-stream", "bidi", "async-unary", "async-server-stream"]


def calls(kind: str, b: liblb.Balancer, count: int) -> list[str]:
    """``count`` calls of ``kind`` (one attempt each); each one's result or status name."""
    method = f"/{SERVICE}/" + {"unary": "Say", "server-stream": "Count", "client-stream": "Join", "bidi": "Echo"}[kind.removeprefix("async-")]

    def outcome(run: Callable[[], Any]) -> Any:
        try:
            return run()
        except grpc.RpcError as error:
            return error.code().name

    if not kind.startswith("async"):
        with liblb.grpc.Channel(b, max_attempts=1) as channel:
            one: Callable[[], Any] = {
                "unary": lambda: channel.unary_unary(method)(b"x", timeout=5),
                "server-stream": lambda: list(channel.unary_stream(method)(b"2", timeout=5)),
                "client-stream": lambda: channel.stream_unary(method)([b"a", b"b"], timeout=5),
                "bidi": lambda: list(channel.stream_stream(method)([b"a"], timeout=5)),
            }[kind]
            return [outcome(one) for _ in range(count)]

    async def main() -> list[str]:
        async with liblb.grpc.AsyncChannel(b, max_attempts=1) as channel:
            results = []
            for _ in range(count):
                try:
                    if kind == "async-unary":
                        results.append(await channel.unary_unary(method)(b"x", timeout=5))
                    else:
                        results.append([r async for r in channel.unary_stream(method)(b"2", timeout=5)])
                except grpc.RpcError as error:
                    results.append(error.code().name)
            return results

    return asyncio.run(main())


def weighed_calls(kind: str, b: liblb.Balancer, nodes: list[Server]) -> list[int]:
    """20 calls to let the nodes report, a pause past the 100 ms weight update, 40 more: how
    many of those each node served."""
    calls(kind, b, 20)
    time.sleep(0.25)
    before = [n.calls for n in nodes]
    calls(kind, b, 40)
    return [n.calls - c for n, c in zip(nodes, before)]


def wrr(ids: list[str], **options: Any) -> liblb.Balancer:
    return liblb.Balancer("client_side_wrr", ids, blackout_period_ms=0, weight_update_period_ms=100, **options)


@pytest.mark.parametrize("kind", CALLS)
def test_trailing_load_reports_weigh_client_side_wrr(servers: Callable[..., list[Server]], kind: str) -> None:
    hot, cool = servers("ok", "ok")
    hot.report(0.9)
    cool.report(0.1, "bin")
    b = wrr([hot.address, cool.address])
    served = weighed_calls(kind, b, [hot, cool])
    # Equal call rates, utilisations 0.9 and 0.1: weights 1 to 9 (gRFC A58). Without the
    # reports both nodes would get the mean weight and alternate.
    assert served[1] >= 3 * served[0], served
    assert [s["in_flight"] for s in b.stats()] == [0, 0]


@pytest.mark.parametrize("kind", ["unary", "server-stream", "async-unary", "async-server-stream"])
@pytest.mark.parametrize("behaviour", ["unavailable", "invalid", "break"])
def test_failed_calls_carry_their_report_too(servers: Callable[..., list[Server]], kind: str, behaviour: str) -> None:
    # UNAVAILABLE is the node's failure, INVALID_ARGUMENT its own answer, "break" a stream that
    # fails after its first reply (no retry then): all carry a report.
    answering, failing = servers("ok", behaviour)
    answering.report(0.9)
    failing.report(0.1)
    b = wrr([answering.address, failing.address], consecutive_failures=0)
    served = weighed_calls(kind, b, [answering, failing])
    assert served[1] >= 3 * served[0], served


@pytest.mark.parametrize("kind", CALLS)
def test_a_trailing_report_that_does_not_parse_changes_nothing(servers: Callable[..., list[Server]], kind: str) -> None:
    nodes = servers("ok", "unavailable", "ok")
    for node, orca in zip(nodes, ["TEXT cpu_utilization:x", 'JSON {"eps": [1]}', "BIN !"]):
        node.orca = orca  # not a number, not a double, not base64
    b = liblb.Balancer("round_robin", [n.address for n in nodes], consecutive_failures=0)
    results = calls(kind, b, 3)
    assert results[1] == "UNAVAILABLE" and "UNAVAILABLE" not in (results[0], results[2])
    assert [(s["requests"], s["failures"], s["in_flight"]) for s in b.stats()] == [(1, 0, 0), (1, 1, 0), (1, 0, 0)]


def test_the_grpc_load_key_wins_over_the_header_form() -> None:
    # Envoy's order; grpcio hides endpoint-load-metrics-bin today, so this is checked here.
    report = liblb.parse_orca("TEXT cpu_utilization:0.5")
    proto = bytes([0x09]) + struct.pack("<d", 0.5)  # field 1 (cpu_utilization), a double
    assert liblb.parse_orca(proto) == report
    trailing = (("endpoint-load-metrics", "TEXT cpu_utilization:0.9"), ("endpoint-load-metrics-bin", proto))
    assert liblb.grpc._load(trailing) == proto
    assert liblb.grpc._load(trailing[:1]) == "TEXT cpu_utilization:0.9"
    assert liblb.grpc._load(()) is None and liblb.grpc._load(None) is None
