"""liblb: which backend should this request go to?

One Rust core holds every algorithm (random, weighted_random, round_robin,
weighted_round_robin, source_hash, ring); this package is its Python face. A
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
    HASHES,
    MAX_BATCH,
    MAX_BATCH_KEY_BYTES,
    MAX_VNODES,
    Balancer,
    DuplicateNodeError,
    Error,
    InvalidNodeIdError,
    InvalidOptionError,
    InvalidOptionValueError,
    InvalidUtf8Error,
    InvalidVnodesError,
    KeyRequiredError,
    NoNodesError,
    TooManyNodesError,
    UnknownAlgorithmError,
    UnknownHashError,
    UnknownNodeError,
    UnknownOptionError,
    __version__,
)

__all__ = [
    "ALGORITHMS",
    "DEFAULT_VNODES",
    "HASHES",
    "MAX_BATCH",
    "MAX_BATCH_KEY_BYTES",
    "MAX_VNODES",
    "Balancer",
    "DuplicateNodeError",
    "Error",
    "InvalidNodeIdError",
    "InvalidOptionError",
    "InvalidOptionValueError",
    "InvalidUtf8Error",
    "InvalidVnodesError",
    "KeyRequiredError",
    "NoNodesError",
    "TooManyNodesError",
    "UnknownAlgorithmError",
    "UnknownHashError",
    "UnknownNodeError",
    "UnknownOptionError",
    "__version__",
]
