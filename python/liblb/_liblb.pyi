"""Stubs for liblb's native module (checked against it by mypy.stubtest in the test suite)."""

from collections.abc import Iterable, Mapping
from typing import Final, final

from typing_extensions import TypeAlias

_Key: TypeAlias = str | bytes | bytearray | memoryview
_NodeSpec: TypeAlias = str | tuple[str, int]
_Nodes: TypeAlias = Iterable[_NodeSpec] | Mapping[str, int]

__all__ = [
    "Balancer",
    "Error",
    "NoNodesError",
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
    "DEFAULT_VNODES",
    "MAX_VNODES",
    "MAX_BATCH",
    "MAX_BATCH_KEY_BYTES",
    "__version__",
    "_noop",
    "_noop_many",
    "_core_pick_ns",
    "_core_pick_many_ns",
]

ALGORITHMS: Final[tuple[str, ...]]
HASHES: Final[tuple[str, ...]]
DEFAULT_VNODES: Final[int]
MAX_VNODES: Final[int]
MAX_BATCH: Final[int]
MAX_BATCH_KEY_BYTES: Final[int]
__version__: Final[str]

@final
class Balancer:
    """A thread-safe load balancer: an algorithm, its options and a membership.

    ``nodes`` are ids (weight 1) or ``(id, weight)`` pairs, or a mapping id -> weight.
    Options: ``seed`` (random algorithms: a fixed sequence), ``vnodes`` (ring points per unit
    of weight, 1..MAX_VNODES) and ``hash`` (one of HASHES).
    """

    def __new__(
        cls,
        algorithm: str,
        nodes: _Nodes,
        *,
        seed: int | None = None,
        vnodes: int | None = None,
        hash: str | None = None,
    ) -> Balancer: ...
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
    def add(self, id: str, weight: int = 1) -> None:
        """Adds a node at the end."""
    def remove(self, id: str) -> None:
        """Removes a node."""
    def set_weight(self, id: str, weight: int) -> None:
        """Changes a node's weight (0 drains it)."""
    def update(self, nodes: _Nodes) -> None:
        """Replaces the whole membership atomically."""
    def nodes(self) -> list[tuple[str, int]]:
        """The nodes as ``(id, weight)`` pairs, in insertion order."""
    def __len__(self) -> int: ...
    def __contains__(self, id: object, /) -> bool:
        """``id in balancer``: whether a node has this id (False for a non-str)."""

class Error(ValueError):
    """Base class of every liblb error; ``code`` is the core's stable error code."""

    code: str

class NoNodesError(Error):
    """The balancer has no node with weight > 0 to pick from (LB_NO_NODES)."""

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

class UnknownAlgorithmError(Error):
    """The algorithm name is not one of ALGORITHMS (LB_UNKNOWN_ALGORITHM)."""

class InvalidOptionError(Error):
    """Base class of the errors about balancer options (seed, vnodes, hash)."""

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
