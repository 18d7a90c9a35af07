"""liblb: which backend should this request go to?

One Rust core holds every algorithm (``liblb.ALGORITHMS``); this package is its
Python face. A
``Balancer`` is safe to share between threads, and the same configuration picks
the same node in Python, Rust, C and Node::

    >>> import liblb
    >>> ring = liblb.Balancer("ring", ["NodeA", "NodeB", "NodeC"], vnodes=3)
    >>> ring.pick("Key1")
    'NodeB'

Errors are ``liblb.Error`` subclasses (``ValueError``s) carrying the core's
stable ``code``. See docs/python.md for the whole guide.
"""

from ._liblb import (
    ALGORITHMS,
    DEFAULT_VNODES,
    FAILURE_KINDS,
    HASH_ALGORITHMS,
    HASHES,
    KEYED_ALGORITHMS,
    MAX_BATCH,
    MAX_BATCH_KEY_BYTES,
    MAX_VNODES,
    OPTIONS,
    STOP_REASONS,
    AdaptiveThrottle,
    AttemptOpenError,
    Balancer,
    DuplicateNodeError,
    Error,
    InvalidLoadReportError,
    InvalidLocalityError,
    InvalidNodeIdError,
    InvalidOptionError,
    InvalidOptionValueError,
    InvalidOutcomeError,
    InvalidUtf8Error,
    InvalidVnodesError,
    HashUnsupportedError,
    Hedging,
    KeyRequiredError,
    Lease,
    LeaseFinishedError,
    LoadReport,
    Node,
    NoNodesError,
    NoUsableNodesError,
    Request,
    RetryBudget,
    RetryThrottle,
    ServerLoad,
    ServerRequest,
    TooManyNodesError,
    UnknownAlgorithmError,
    UnknownHashError,
    UnknownNodeError,
    UnknownOptionError,
    __version__,
    parse_orca,
)
from ._request import Overloaded, RequestFailedError

__all__ = [
    "ALGORITHMS",
    "DEFAULT_VNODES",
    "FAILURE_KINDS",
    "HASH_ALGORITHMS",
    "HASHES",
    "KEYED_ALGORITHMS",
    "MAX_BATCH",
    "MAX_BATCH_KEY_BYTES",
    "MAX_VNODES",
    "OPTIONS",
    "STOP_REASONS",
    "AdaptiveThrottle",
    "AttemptOpenError",
    "Balancer",
    "DuplicateNodeError",
    "Error",
    "InvalidLoadReportError",
    "InvalidLocalityError",
    "InvalidNodeIdError",
    "InvalidOptionError",
    "InvalidOptionValueError",
    "InvalidOutcomeError",
    "InvalidUtf8Error",
    "InvalidVnodesError",
    "HashUnsupportedError",
    "Hedging",
    "KeyRequiredError",
    "Lease",
    "LeaseFinishedError",
    "LoadReport",
    "Node",
    "NoNodesError",
    "NoUsableNodesError",
    "Overloaded",
    "Request",
    "RequestFailedError",
    "RetryBudget",
    "RetryThrottle",
    "ServerLoad",
    "ServerRequest",
    "TooManyNodesError",
    "UnknownAlgorithmError",
    "UnknownHashError",
    "UnknownNodeError",
    "UnknownOptionError",
    "__version__",
    "parse_orca",
]
