"""Stubs for liblb's native module (checked against it by mypy.stubtest in the test suite)."""

import datetime
from collections.abc import Iterable, Mapping
from types import TracebackType
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar, Final, Literal, TypedDict, TypeVar, final, overload

from typing_extensions import TypeAlias

_Key: TypeAlias = str | bytes | bytearray | memoryview
_NodeSpec: TypeAlias = str | tuple[str, int] | tuple[str, int, int] | Node
_Nodes: TypeAlias = Iterable[_NodeSpec] | Mapping[str, int]
_Latency: TypeAlias = float | datetime.timedelta
_FailureKind: TypeAlias = Literal["error", "timeout", "overloaded"]
_StopReason: TypeAlias = Literal[
    "max_attempts", "not_retryable", "budget", "deadline", "no_more_nodes", "throttled"
]
_Budget: TypeAlias = RetryBudget | RetryThrottle | AdaptiveThrottle
_T = TypeVar("_T")

class _NodeStats(TypedDict):
    id: str
    weight: int
    locality: str
    priority: int
    in_flight: int
    requests: int
    failures: int
    latency: float | None
    status: Literal["healthy", "warming", "ejected", "down", "overloaded"]
    until: float | None
    remaining: float | None

__all__ = [
    "Balancer",
    "LoadReport",
    "Node",
    "InvalidLocalityError",
    "InvalidLoadReportError",
    "Lease",
    "Request",
    "Hedging",
    "AttemptOpenError",
    "STOP_REASONS",
    "RetryBudget",
    "RetryThrottle",
    "AdaptiveThrottle",
    "LeaseFinishedError",
    "HashUnsupportedError",
    "InvalidOutcomeError",
    "KEYED_ALGORITHMS",
    "HASH_ALGORITHMS",
    "OPTIONS",
    "Error",
    "NoNodesError",
    "NoUsableNodesError",
    "InvalidNodeIdError",
    "InvalidUtf8Error",
    "DuplicateNodeError",
    "UnknownNodeError",
    "KeyRequiredError",
    "TooManyNodesError",
    "UnknownAlgorithmError",
    "InvalidOptionError",
    "UnknownOptionError",
    "UnknownHashError",
    "InvalidVnodesError",
    "InvalidOptionValueError",
    "ALGORITHMS",
    "HASHES",
    "FAILURE_KINDS",
    "DEFAULT_VNODES",
    "MAX_VNODES",
    "MAX_BATCH",
    "MAX_BATCH_KEY_BYTES",
    "__version__",
    "parse_orca",
    "ServerLoad",
    "ServerRequest",
    "_noop",
    "_noop_many",
    "_core_pick_ns",
    "_core_pick_many_ns",
]

ALGORITHMS: Final[tuple[str, ...]]
HASHES: Final[tuple[str, ...]]
FAILURE_KINDS: Final[tuple[str, ...]]
STOP_REASONS: Final[tuple[str, ...]]
KEYED_ALGORITHMS: Final[tuple[str, ...]]
HASH_ALGORITHMS: Final[tuple[str, ...]]
OPTIONS: Final[tuple[str, ...]]
DEFAULT_VNODES: Final[int]
MAX_VNODES: Final[int]
MAX_BATCH: Final[int]
MAX_BATCH_KEY_BYTES: Final[int]
__version__: Final[str]

@final
class Balancer:
    """A thread-safe load balancer: an algorithm, its options and a membership.

    ``nodes`` are ids (weight 1) or ``(id, weight)`` pairs, or a mapping id -> weight.
    Options are keyword arguments named as in OPTIONS (the core's list; an int or a str each,
    None keeps the default): ``seed``, ``vnodes``, ``hash`` (one of HASHES), ``choice_count``,
    ``decay_ms``, ``initial_latency_ms``, ``table_size``, ``min_ring_size``,
    ``max_ring_size``, ``max_ring_points``; health (every algorithm): ``consecutive_failures``,
    ``base_ejection_time_ms``, ``max_ejection_time_ms``, ``max_ejection_percent``,
    ``panic_threshold``, ``slow_start_window_ms``, ``slow_start_aggression`` (also a float),
    ``min_weight_percent``, ``hash_balance_factor`` (keyed), ``failure_penalty_ms``,
    ``max_retry_after_ms``, success-rate and failure-percentage ejection (``interval_ms``,
    ``success_rate_minimum_hosts``, ``success_rate_request_volume``,
    ``success_rate_stdev_factor``, ``enforcing_success_rate``,
    ``failure_percentage_threshold``, ``failure_percentage_minimum_hosts``,
    ``failure_percentage_request_volume``, ``enforcing_failure_percentage``);
    ``thread_rounds`` (round robin); priority levels and localities
    (``overprovisioning_factor``, ``zone_aware_min_cluster_size``,
    ``zone_aware_routing_enabled``, ``zone_aware_by_weight``); server-reported load for
    ``client_side_wrr`` (``blackout_period_ms``, ``weight_expiration_period_ms``,
    ``weight_update_period_ms``, ``error_utilization_penalty``, also a float) and probes for
    ``prequal`` (``probe_pool_size``, ``q_rif`` as a percentage or a fraction ``"0.84"``,
    ``probe_rate``, ``probe_reuse``, ``max_probe_age_ms``, ``probe_remove_rate``);
    subsetting for unkeyed algorithms (``subset``: ``"deterministic"``, ``"random"``,
    ``"ringsteady"`` or ``"aperture"``; ``subset_size``, ``client_index``, ``client_count``,
    ``subset_seed``; ``subset()`` lists the subset).
    docs/algorithms.md, docs/health.md, docs/localities.md and docs/subsetting.md say which
    algorithm reads which.
    """

    def __new__(
        cls,
        algorithm: str,
        nodes: _Nodes,
        *,
        seed: int | None = None,
        vnodes: int | str | None = None,
        hash: str | None = None,
        choice_count: int | str | None = None,
        decay_ms: int | str | None = None,
        initial_latency_ms: int | str | None = None,
        table_size: int | str | None = None,
        min_ring_size: int | str | None = None,
        max_ring_size: int | str | None = None,
        max_ring_points: int | str | None = None,
        consecutive_failures: int | str | None = None,
        base_ejection_time_ms: int | str | None = None,
        max_ejection_time_ms: int | str | None = None,
        max_ejection_percent: int | str | None = None,
        panic_threshold: int | str | None = None,
        slow_start_window_ms: int | str | None = None,
        slow_start_aggression: float | int | str | None = None,
        min_weight_percent: int | str | None = None,
        hash_balance_factor: int | str | None = None,
        thread_rounds: int | str | None = None,
        failure_penalty_ms: int | str | None = None,
        max_retry_after_ms: int | str | None = None,
        interval_ms: int | str | None = None,
        success_rate_minimum_hosts: int | str | None = None,
        success_rate_request_volume: int | str | None = None,
        success_rate_stdev_factor: int | str | None = None,
        enforcing_success_rate: int | str | None = None,
        failure_percentage_threshold: int | str | None = None,
        failure_percentage_minimum_hosts: int | str | None = None,
        failure_percentage_request_volume: int | str | None = None,
        enforcing_failure_percentage: int | str | None = None,
        overprovisioning_factor: int | str | None = None,
        zone_aware_min_cluster_size: int | str | None = None,
        zone_aware_routing_enabled: int | str | None = None,
        zone_aware_by_weight: int | str | None = None,
        blackout_period_ms: int | str | None = None,
        weight_expiration_period_ms: int | str | None = None,
        weight_update_period_ms: int | str | None = None,
        error_utilization_penalty: float | int | str | None = None,
        probe_pool_size: int | str | None = None,
        q_rif: float | int | str | None = None,
        probe_rate: float | int | str | None = None,
        probe_reuse: int | str | None = None,
        max_probe_age_ms: int | str | None = None,
        probe_remove_rate: float | int | str | None = None,
        subset: Literal["deterministic", "random", "ringsteady", "aperture"] | None = None,
        subset_size: int | str | None = None,
        client_index: int | str | None = None,
        client_count: int | str | None = None,
        subset_seed: int | str | None = None,
        budget: _Budget | None = None,
    ) -> Balancer: ...
    def request(
        self,
        key: _Key | None = None,
        *,
        max_attempts: int | None = None,
        deadline: _Latency | None = None,
        budget: _Budget | None = None,
        hedge: Hedging | None = None,
        retry_on: Iterable[_FailureKind] | None = None,
    ) -> Request:
        """A request: attempts on distinct nodes in the key's retry order, at most
        ``max_attempts`` (1 to 100; None: 3), retrying the kinds in ``retry_on`` (default all),
        within ``deadline``, limited by ``budget`` (default: the balancer's), hedged by
        ``hedge``. Nothing is picked until the first attempt."""
    def call(
        self,
        key: _Key | None,
        func: Callable[[str], _T],
        *,
        max_attempts: int | None = ...,
        deadline: _Latency | None = ...,
        budget: _Budget | None = ...,
        hedge: Hedging | None = ...,
        retry_on: Iterable[_FailureKind] | None = ...,
    ) -> _T:
        """``func(node_id)`` per attempt, sleeping between: its first successful value, or
        ``RequestFailedError``. Exceptions are failures: ``Overloaded`` -> "overloaded",
        ``TimeoutError`` -> "timeout", any other -> "error". Sends no hedges (see ``acall``)."""
    def acall(
        self,
        key: _Key | None,
        func: Callable[[str], Awaitable[_T]],
        *,
        max_attempts: int | None = ...,
        deadline: _Latency | None = ...,
        budget: _Budget | None = ...,
        hedge: Hedging | None = ...,
        retry_on: Iterable[_FailureKind] | None = ...,
    ) -> Awaitable[_T]:
        """``call`` on asyncio: retries after ``asyncio.sleep``; hedges race as tasks, the
        first success wins, the losers' tasks and leases are cancelled (nothing counted)."""
    @property
    def budget(self) -> _Budget | None:
        """The default budget of this balancer's requests, or None."""
    @budget.setter
    def budget(self, budget: _Budget | None) -> None: ...
    @property
    def algorithm(self) -> str:
        """The algorithm's name."""
    @property
    def seed(self) -> int | None:
        """The seed given at construction, or None (seeded from OS entropy)."""
    @property
    def vnodes(self) -> int:
        """Ring points per unit of weight (default 160)."""
    @property
    def hash(self) -> str | None:
        """The hash given at construction, or None (the algorithm's default)."""
    def pick(self, key: _Key | None = None) -> str:
        """The id of the chosen node. Keyed algorithms need ``key``; the others ignore it."""
    def pick_many(self, keys: Iterable[_Key]) -> list[str]:
        """One pick per key, all from the same membership (at most MAX_BATCH keys)."""
    def pick_n(self, count: int) -> list[str]:
        """``count`` unkeyed picks from the same membership (``count`` <= MAX_BATCH)."""
    def attempts(self, key: _Key | None = None, limit: int | None = None) -> list[str]:
        """Up to ``limit`` distinct node ids in retry order (None: every pickable node)."""
    def pick_hash(self, hash: int) -> str:
        """The node for a caller's 64-bit key hash (0..2**64-1); only HASH_ALGORITHMS."""
    def attempts_hash(self, hash: int, limit: int | None = None) -> list[str]:
        """``attempts`` for a caller's 64-bit key hash (see ``pick_hash``)."""
    def acquire(self, key: _Key | None = None) -> Lease:
        """Picks a node and starts a request on it until the returned Lease ends."""
    def report(
        self,
        id: str,
        *,
        ok: bool,
        latency: _Latency | None = None,
        kind: _FailureKind | None = None,
        retry_after: _Latency | None = None,
    ) -> None:
        """Records the outcome of a request routed after ``pick`` (in-flight untouched).

        A success needs its ``latency``; a failure (``ok=False``) may leave it out, name its
        ``kind`` (one of FAILURE_KINDS, default "error") and, when overloaded, a
        ``retry_after`` that keeps the node from picks until then."""
    def probe_targets(self, count: int) -> list[str]:
        """Up to ``count`` distinct node ids to probe now (uniform, from the seeded generator)."""
    def offer_probe(self, id: str, rif: int, latency: _Latency) -> None:
        """A probe answer (requests in flight, latency estimate) for ``prequal``."""
    def probes_due(self) -> int:
        """How many probes the picks since the last call made due (``prequal``)."""
    def report_load(self, id: str, report: LoadReport | bytes | bytearray | str) -> None:
        """Takes a node's ORCA load report as received now (a LoadReport, or what
        ``parse_orca`` takes); ``client_side_wrr`` weighs nodes by them (gRFC A58)."""
    def now(self) -> float:
        """The balancer's clock in seconds: liblb's monotonic clock, one per process (``until``'s clock; budgets read it too)."""
    def stats(self) -> list[_NodeStats]:
        """Each node's load, in insertion order (``latency`` in seconds, or None; ``until`` on
        the ``now()`` clock; ``remaining`` = ``until`` - the time of the call, or None)."""
    def add(
        self,
        id: str | Node,
        weight: int = 1,
        tag: int = 0,
        *,
        locality: str | None = None,
        priority: int | None = None,
    ) -> None:
        """Adds a node at the end (or a ``Node``); its leases hand back ``tag``."""
    def set_location(self, id: str, locality: str, priority: int | None = None) -> None:
        """Moves a node to ``locality`` at ``priority`` (a membership change)."""
    def set_locality_weights(
        self, weights: Mapping[str, int] | Iterable[tuple[str, int]]
    ) -> None:
        """Locality-weighted balancing: each locality's weight (empty turns it off)."""
    def set_local_locality(self, locality: str | None) -> None:
        """The caller's own locality, for zone-aware routing (None: unknown)."""
    def set_local_localities(
        self, spread: Mapping[str, int] | Iterable[tuple[str, int]]
    ) -> None:
        """The caller's fleet per locality: with ``set_local_locality``, zone-aware routing."""
    def mark_down(self, id: str) -> None:
        """Takes a node out of service until ``mark_up``: no rebuild, weight kept."""
    def mark_up(self, id: str) -> None:
        """Puts a node marked down back in service (warming up with slow start)."""
    @property
    def panic(self) -> bool:
        """Whether picks ignore health: fewer than ``panic_threshold`` % of nodes healthy."""
    def remove(self, id: str) -> None:
        """Removes a node."""
    def set_weight(self, id: str, weight: int) -> None:
        """Changes a node's weight (0 drains it)."""
    def update(self, nodes: _Nodes) -> None:
        """Replaces the whole membership atomically."""
    def subset(self) -> list[str]:
        """The ids picks choose from, in node order: with ``subset`` this client's subset of
        the nodes with weight > 0, else every node with weight > 0."""
    @overload
    def nodes(self, *, located: Literal[False] = False) -> list[tuple[str, int]]:
        """The nodes as ``(id, weight)`` pairs, or ``Node``s with ``located=True``."""
    @overload
    def nodes(self, *, located: Literal[True]) -> list[Node]: ...

    def __len__(self) -> int: ...
    def __contains__(self, id: object, /) -> bool:
        """``id in balancer``: whether a node has this id (False for a non-str)."""

@final
class Node:
    """A node: id, weight, and where it runs: ``locality`` ("region/zone/sub_zone") and
    ``priority`` (0 = most preferred)."""

    def __new__(
        cls,
        id: str,
        weight: int | None = None,
        *,
        locality: str | None = None,
        priority: int | None = None,
        tag: int | None = None,
    ) -> Node: ...
    @property
    def id(self) -> str: ...
    @property
    def weight(self) -> int: ...
    @property
    def locality(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def tag(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class LoadReport:
    """An ORCA load report (cncf/xds ``OrcaLoadReport``), from ``parse_orca``: utilisations
    as fractions, ``rps_fractional`` queries and ``eps`` errors per second, and the named
    maps in the order the report gave them."""

    @property
    def cpu_utilization(self) -> float: ...
    @property
    def mem_utilization(self) -> float: ...
    @property
    def application_utilization(self) -> float: ...
    @property
    def rps(self) -> int: ...
    @property
    def rps_fractional(self) -> float: ...
    @property
    def eps(self) -> float: ...
    @property
    def request_cost(self) -> dict[str, float]: ...
    @property
    def utilization(self) -> dict[str, float]: ...
    @property
    def named_metrics(self) -> dict[str, float]: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

def parse_orca(data: bytes | bytearray | str) -> LoadReport:
    """Parses an ORCA load report: serialized ``OrcaLoadReport`` bytes, or an
    ``endpoint-load-metrics`` header value (``BIN <base64>``, ``JSON <json>``, ``TEXT
    name:value, ...``). Raises ``InvalidLoadReportError`` saying what is wrong."""

@final
class ServerLoad:
    """A server's own load: requests in flight, request and error rates over the last 10
    seconds, latency by in-flight level, and the utilisations the application sets. It
    answers Prequal probes (``probe``) and writes ORCA ``endpoint-load-metrics`` headers
    (``header``). Thread-safe; share one between every thread that serves requests."""

    def __new__(
        cls,
        *,
        window: float | datetime.timedelta | None = None,
        latency_max_age: float | datetime.timedelta | None = None,
    ) -> ServerLoad:
        """``window``: the rates' window (seconds, 1 to 3600; default 10); ``latency_max_age``:
        how long a latency sample counts (0.001 to 3600; default 1). Another value raises
        ``InvalidOptionValueError``."""
    @property
    def window(self) -> float:
        """The rates' window, in seconds."""
    @property
    def latency_max_age(self) -> float:
        """How long a latency sample counts, in seconds."""
    def start(self) -> ServerRequest:
        """A request arrives: in flight + 1. ``with load.start():`` finishes it at the end."""
    def finish(self, request: ServerRequest, *, ok: bool = True) -> float:
        """The request ends: returns its latency in seconds. Raises ``LeaseFinishedError``
        if it already ended."""
    def cancel(self, request: ServerRequest) -> None:
        """The request was abandoned: in flight - 1, nothing counted."""
    def probe(self) -> tuple[int, float]:
        """A Prequal probe answer: ``(rif, latency)``, latency in seconds (0.0 when no request succeeded within ``latency_max_age``)."""
    @property
    def in_flight(self) -> int: ...
    @property
    def cpu_utilization(self) -> float: ...
    @property
    def mem_utilization(self) -> float: ...
    @property
    def application_utilization(self) -> float: ...
    def set_cpu_utilization(self, value: float) -> None:
        """Finite, >= 0, may exceed 1; else ``InvalidLoadReportError`` and no change."""
    def set_mem_utilization(self, value: float) -> None:
        """0 to 1; else ``InvalidLoadReportError`` and no change."""
    def set_application_utilization(self, value: float) -> None:
        """Finite, >= 0, may exceed 1; else ``InvalidLoadReportError`` and no change."""
    def report(self) -> LoadReport:
        """The ORCA load report now, with the named metrics ``rif`` and ``latency_ms``."""
    def header(self, form: Literal["text", "bin"] = "text") -> str:
        """``report()`` as an ``endpoint-load-metrics`` header value (``TEXT ...`` or ``BIN ...``)."""

@final
class ServerRequest:
    """A request a ``ServerLoad`` started; end it once (``finish``/``cancel``, or a ``with``
    block). One collected unfinished is cancelled."""

    @property
    def rif(self) -> int:
        """The requests in flight when it started (itself not counted)."""
    @property
    def started(self) -> float:
        """When it started, in seconds of liblb's clock (``Balancer.now()``)."""
    @property
    def done(self) -> bool:
        """Whether it has ended (finished or cancelled)."""
    def __enter__(self) -> ServerRequest: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        _exc: BaseException | None = None,
        _tb: TracebackType | None = None,
    ) -> Literal[False]:
        """Finishes the request unless the block already did: a failure if an exception escaped."""

@final
class Lease:
    """A request in progress on one node, from ``Balancer.acquire`` until it ends.

    ``with balancer.acquire(key) as node:`` finishes it when the block ends (a failure if an
    exception escapes); a lease garbage-collected unfinished is cancelled.
    """

    @property
    def id(self) -> str:
        """The node's id."""
    @property
    def weight(self) -> int:
        """The node's weight when the lease was acquired."""
    @property
    def tag(self) -> int:
        """The node's tag (the int given with it; 0 if none was)."""
    @property
    def done(self) -> bool:
        """Whether the lease has ended (finished or cancelled)."""
    def finish(
        self,
        *,
        ok: bool = True,
        latency: _Latency | None = None,
        kind: _FailureKind | None = None,
        retry_after: _Latency | None = None,
        load: LoadReport | bytes | bytearray | str | None = None,
    ) -> None:
        """Ends the request; ``latency`` None measures it since ``acquire``. A failure
        (``ok=False``) may name its ``kind`` and, when overloaded, a ``retry_after``.
        ``load`` is the ORCA load report the answer carried (see ``Balancer.report_load``)."""
    def cancel(self) -> None:
        """Ends the request without an outcome (in-flight released, nothing counted)."""
    def __enter__(self) -> str: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        _exc: BaseException | None = None,
        _tb: TracebackType | None = None,
    ) -> Literal[False]:
        """Finishes the lease unless the block already did: a failure if an exception escaped."""

@final
class Hedging:
    """When a request sends a hedge (another attempt while one is out)."""

    @staticmethod
    def after(delay: _Latency) -> Hedging:
        """Hedge after ``delay`` without an answer (gRPC's ``hedgingDelay``)."""
    @staticmethod
    def percentile(max_extra_load: float) -> Hedging:
        """Hedge after the ``1 - max_extra_load`` latency percentile (0 < max_extra_load < 1)."""

@final
class Request:
    """One request's attempts: ``for lease in balancer.request(key):``, each lease finished
    before the next; the iterator never sleeps (wait ``backoff()`` seconds between)."""

    def attempt(self) -> Lease | None:
        """The next attempt's lease (another one at once if one is out), or None when over."""
    def __iter__(self) -> Iterator[Lease]: ...
    def __next__(self) -> Lease:
        """The next attempt; raises AttemptOpenError while the previous lease is open."""
    def hedge(self) -> Lease | None:
        """Sends a hedge now if the hedging policy and the budget allow, else None."""
    def hedge_after(self) -> float | None:
        """Seconds from the last attempt's start before ``hedge()``; None: no hedge."""
    def backoff(self) -> float:
        """Seconds to wait before the next attempt (0.0 before any retry)."""
    @property
    def stopped(self) -> _StopReason | None:
        """Why the request gave up, or None."""
    @property
    def decision(self) -> Literal["done", "retry", "stop", "wait"] | None:
        """What the last finished attempt decided, or None before any."""
    @property
    def over(self) -> bool:
        """Whether the request is over (succeeded or gave up)."""
    @property
    def attempts(self) -> int:
        """Attempts started so far."""
    @property
    def winner(self) -> int | None:
        """Which attempt succeeded (1-based, in start order), once one has."""
    @property
    def remaining(self) -> float | None:
        """Seconds left before the deadline, or None without one."""

@final
class RetryBudget:
    """A retry budget (tower's TpsBudget, Finagle's RetryBudget): every request deposits, every
    retry withdraws; deposits count for ``ttl`` seconds (1 to 60, default 10), ``min_per_sec``
    retries per second are always allowed (default 10), each deposit allows ``retry_percent``
    retries (0 to 1000, default 0.2). Times are seconds on liblb's monotonic clock
    (``Balancer.now()``'s, one per process), or an explicit ``now`` that never goes back. Thread-safe."""

    def __new__(
        cls,
        ttl: _Latency | None = None,
        min_per_sec: int | None = None,
        retry_percent: float = ...,
        *,
        now: float | None = None,
    ) -> RetryBudget: ...
    def now(self) -> float:
        """liblb's clock in seconds (the same as ``Balancer.now()``): monotonic, one per process."""
    def deposit(self, *, now: float | None = None) -> None:
        """Records a request (a first attempt)."""
    def withdraw(self, *, now: float | None = None) -> bool:
        """Takes one retry from the budget: True if it may be sent (and was taken)."""
    def can_withdraw(self, *, now: float | None = None) -> bool:
        """Whether a retry could be withdrawn, without taking it."""
    def available(self, *, now: float | None = None) -> int:
        """The retries available now."""

@final
class RetryThrottle:
    """gRPC's retry throttling (gRFC A6): ``max_tokens`` tokens (1 to 1000), one less per
    failure, ``token_ratio`` more per success (at least 0.001, capped); retries and hedges are
    refused while at most half are left. Thread-safe."""

    def __new__(cls, max_tokens: int, token_ratio: float) -> RetryThrottle: ...
    def failure(self) -> bool:
        """Records a failed attempt; returns whether retries are still allowed after it."""
    def success(self) -> None:
        """Records a successful attempt."""
    @property
    def allows(self) -> bool:
        """Whether a retry or a hedge may be sent now."""
    @property
    def tokens(self) -> float:
        """The token count (with its thousandths)."""

@final
class AdaptiveThrottle:
    """Client-side adaptive throttling (Google SRE book, chapter 21): over a sliding ``window``
    (1 s to 1 hour, default 120 s) requests are rejected locally with probability
    ``max(0, (requests - k * accepts) / (requests + 1))`` (``k`` 1 to 100, default 2). Times
    as for RetryBudget. Thread-safe."""

    def __new__(
        cls, k: float = ..., window: _Latency | None = None, *, now: float | None = None
    ) -> AdaptiveThrottle: ...
    def now(self) -> float:
        """liblb's clock in seconds (the same as ``Balancer.now()``): monotonic, one per process."""
    def rejection(self, *, now: float | None = None) -> float:
        """The probability that ``admit`` rejects a request now."""
    def admit(self, *, now: float | None = None, random: int | None = None) -> bool:
        """A request is about to be sent: True to send it, False to reject it locally;
        counted either way. ``random`` (0..2**64-1) replaces the throttle's own draw."""
    def accepted(self, *, now: float | None = None) -> None:
        """A backend accepted a request (any answer but an overload refusal)."""

class Error(ValueError):
    """Base class of every liblb error; ``code`` is the core's stable error code."""

    code: str

class NoNodesError(Error):
    """The balancer has no node with weight > 0 to pick from (LB_NO_NODES)."""

class NoUsableNodesError(NoNodesError):
    """Every node with weight > 0 is ejected or marked down and panic_threshold is 0, so no
    node may be chosen (LB_NO_USABLE_NODES)."""

class InvalidLocalityError(Error):
    """A locality has more than three parts (region/zone/sub_zone) or a NUL character (LB_INVALID_LOCALITY)."""

class InvalidNodeIdError(Error):
    """A node id is empty (LB_EMPTY_ID) or contains a NUL character (LB_ID_CONTAINS_NUL)."""

class InvalidUtf8Error(Error):
    """A node id str cannot be encoded as UTF-8: it holds a lone surrogate (LB_INVALID_UTF8). Keys never raise it: their lone surrogates hash as U+FFFD."""

class DuplicateNodeError(Error):
    """A node id appears twice (LB_DUPLICATE_NODE)."""

class UnknownNodeError(Error):
    """No node has this id (LB_UNKNOWN_NODE)."""

class KeyRequiredError(Error):
    """A keyed algorithm was asked to pick without a key (LB_KEY_REQUIRED)."""

class TooManyNodesError(Error):
    """More nodes than one balancer can hold (LB_TOO_MANY_NODES)."""

class HashUnsupportedError(Error):
    """pick_hash / attempts_hash on an algorithm not in HASH_ALGORITHMS (LB_HASH_UNSUPPORTED)."""

class AttemptOpenError(Error):
    """next(request) while the previous attempt's lease is open (LB_ATTEMPT_OPEN)."""

class LeaseFinishedError(Error):
    """A lease or a ServerRequest was ended twice (LB_LEASE_FINISHED): each ends exactly once."""

class InvalidLoadReportError(Error):
    """An ORCA load report could not be parsed: not a valid serialized OrcaLoadReport, nor an
    endpoint-load-metrics header value starting 'BIN ', 'JSON ' or 'TEXT '; or a ServerLoad
    utilisation is out of range (LB_INVALID_LOAD_REPORT); the message says what is wrong and where."""

class InvalidOutcomeError(Error):
    """An outcome given to finish or report cannot be understood: an unknown failure kind
    (FAILURE_KINDS), a kind or retry_after with ok=True, or a negative, NaN or infinite latency
    or retry_after (LB_INVALID_OUTCOME)."""

class UnknownAlgorithmError(Error):
    """The algorithm name is not one of ALGORITHMS (LB_UNKNOWN_ALGORITHM)."""

class InvalidOptionError(Error):
    """Base class of the errors about balancer options (liblb.OPTIONS)."""

class UnknownOptionError(InvalidOptionError):
    """The option name is not known to the core (LB_UNKNOWN_OPTION)."""

class UnknownHashError(InvalidOptionError):
    """The hash name is not one of HASHES (LB_UNKNOWN_HASH)."""

class InvalidVnodesError(InvalidOptionError):
    """vnodes is 0 or above MAX_VNODES (LB_INVALID_VNODES)."""

class InvalidOptionValueError(InvalidOptionError):
    """An option value is out of range for its kind (LB_INVALID_OPTION_VALUE)."""

def _noop(_arg: object = None) -> None:
    """Does nothing: the floor a call into this extension costs (see python/bench.py)."""

def _noop_many(keys: Iterable[_Key]) -> list[str]:
    """The floor of pick_many: reads the keys, builds the list, picks nothing (bench.py only)."""

def _core_pick_ns(balancer: Balancer, keys: Iterable[_Key], rounds: int) -> float:
    """Nanoseconds per key of the core's own single pick (bench.py only)."""

def _core_pick_many_ns(balancer: Balancer, keys: Iterable[_Key], rounds: int) -> float:
    """Nanoseconds per key of the core's own pick_many, no Python objects (bench.py only)."""
