"""Every error: its class, its code, its message naming the offending value, and that the
balancer is unchanged afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import liblb

NODES = ["NodeA", "NodeB", "NodeC"]

# Every exception class, its base, and the core code it stands for (None: several codes).
CLASSES: list[tuple[type[liblb.Error], type[Exception], str | None]] = [
    (liblb.Error, ValueError, None),
    (liblb.NoNodesError, liblb.Error, "LB_NO_NODES"),
    (liblb.NoUsableNodesError, liblb.NoNodesError, "LB_NO_USABLE_NODES"),
    (liblb.InvalidNodeIdError, liblb.Error, None),
    (liblb.InvalidUtf8Error, liblb.Error, "LB_INVALID_UTF8"),
    (liblb.DuplicateNodeError, liblb.Error, "LB_DUPLICATE_NODE"),
    (liblb.UnknownNodeError, liblb.Error, "LB_UNKNOWN_NODE"),
    (liblb.KeyRequiredError, liblb.Error, "LB_KEY_REQUIRED"),
    (liblb.TooManyNodesError, liblb.Error, "LB_TOO_MANY_NODES"),
    (liblb.UnknownAlgorithmError, liblb.Error, "LB_UNKNOWN_ALGORITHM"),
    (liblb.HashUnsupportedError, liblb.Error, "LB_HASH_UNSUPPORTED"),
    (liblb.InvalidOutcomeError, liblb.Error, "LB_INVALID_OUTCOME"),
    (liblb.InvalidLocalityError, liblb.Error, "LB_INVALID_LOCALITY"),
    (liblb.InvalidLoadReportError, liblb.Error, "LB_INVALID_LOAD_REPORT"),
    (liblb.LeaseFinishedError, liblb.Error, "LB_LEASE_FINISHED"),
    (liblb.AttemptOpenError, liblb.Error, "LB_ATTEMPT_OPEN"),
    (liblb.RequestFailedError, liblb.Error, "LB_REQUEST_FAILED"),
    (liblb.InvalidOptionError, liblb.Error, None),
    (liblb.UnknownOptionError, liblb.InvalidOptionError, "LB_UNKNOWN_OPTION"),
    (liblb.UnknownHashError, liblb.InvalidOptionError, "LB_UNKNOWN_HASH"),
    (liblb.InvalidVnodesError, liblb.InvalidOptionError, "LB_INVALID_VNODES"),
    (liblb.InvalidOptionValueError, liblb.InvalidOptionError, "LB_INVALID_OPTION_VALUE"),
]


@pytest.mark.parametrize(("cls", "base", "code"), CLASSES, ids=[c.__name__ for c, _, _ in CLASSES])
def test_hierarchy(cls: type[liblb.Error], base: type[Exception], code: str | None) -> None:
    assert issubclass(cls, base) and issubclass(cls, ValueError)
    assert cls.__module__ == "liblb"
    assert cls.__doc__
    if code is None:
        assert "code" not in vars(cls)
    else:
        assert cls.code == code


def test_every_exported_error_is_listed() -> None:
    exported = {getattr(liblb, n) for n in liblb.__all__}
    errors = {e for e in exported if isinstance(e, type) and issubclass(e, Exception)}
    # Overloaded is the caller's to raise (a node's answer for `call`), not a liblb error.
    assert errors - {liblb.Overloaded} == {c for c, _, _ in CLASSES}


def raises(cls: type[liblb.Error], code: str, *names: str) -> Any:
    """Checks class, code and that the message names each of `names`."""

    class Check:
        def __enter__(self) -> None:
            self.ctx = pytest.raises(cls)
            self.info = self.ctx.__enter__()

        def __exit__(self, *exc: Any) -> bool:
            handled = self.ctx.__exit__(*exc)
            err = self.info.value
            assert err.code == code
            for name in names:
                assert name in str(err), (str(err), name)
            return bool(handled)

    return Check()


def unchanged(b: liblb.Balancer, action: Callable[[], object], cls: type[Exception]) -> None:
    before = (b.nodes(), len(b))
    with pytest.raises(cls):
        action()
    assert (b.nodes(), len(b)) == before


# --- core errors, each through the one conversion ---------------------------------------


def test_no_nodes() -> None:
    for algorithm in liblb.ALGORITHMS:
        empty = liblb.Balancer(algorithm, [])
        with raises(liblb.NoNodesError, "LB_NO_NODES"):
            empty.pick("k")
        with raises(liblb.NoNodesError, "LB_NO_NODES"):
            empty.pick_many(["k"])
        with raises(liblb.NoNodesError, "LB_NO_NODES"):
            empty.attempts("k")
        drained = liblb.Balancer(algorithm, [("a", 0), ("b", 0)])
        with raises(liblb.NoNodesError, "LB_NO_NODES"):
            drained.pick("k")
    with raises(liblb.NoNodesError, "LB_NO_NODES"):
        liblb.Balancer("random", []).pick_n(3)


def test_invalid_node_ids() -> None:
    with raises(liblb.InvalidNodeIdError, "LB_EMPTY_ID"):
        liblb.Balancer("random", [""])
    with raises(liblb.InvalidNodeIdError, "LB_ID_CONTAINS_NUL", "a\\0b"):
        liblb.Balancer("random", ["a\0b"])
    b = liblb.Balancer("random", NODES)
    with raises(liblb.InvalidNodeIdError, "LB_EMPTY_ID"):
        b.add("")
    with raises(liblb.InvalidNodeIdError, "LB_ID_CONTAINS_NUL"):
        b.update(["ok", "x\0"])
    unchanged(b, lambda: b.add("\0"), liblb.InvalidNodeIdError)
    unchanged(b, lambda: b.update(["fine", ""]), liblb.InvalidNodeIdError)


def test_invalid_utf8() -> None:
    # Only node ids must be valid Unicode (an id must round-trip); keys and names are encoded the
    # TextEncoder way, lone surrogates as U+FFFD (test_adversarial.py checks the hashing).
    b = liblb.Balancer("ring", NODES)
    unchanged(b, lambda: b.add("\ud800"), liblb.InvalidUtf8Error)
    with raises(liblb.InvalidUtf8Error, "LB_INVALID_UTF8"):
        liblb.Balancer("ring", ["\ud800"])
    with raises(liblb.InvalidUtf8Error, "LB_INVALID_UTF8"):
        b.remove("\udfff")
    with raises(liblb.InvalidUtf8Error, "LB_INVALID_UTF8"):
        b.set_weight("\udfff", 2)
    assert b.pick("\ud800") == b.pick("\ufffd")
    assert b.pick_many(["ok", "\udfff"]) == [b.pick("ok"), b.pick("\ufffd")]
    assert b.attempts("\ud800") == b.attempts("\ufffd")
    with raises(liblb.UnknownHashError, "LB_UNKNOWN_HASH"):
        liblb.Balancer("ring", NODES, hash="\ud800")
    with raises(liblb.UnknownAlgorithmError, "LB_UNKNOWN_ALGORITHM"):
        liblb.Balancer("\ud800", NODES)
    # Raw bytes are keys whatever they hold.
    assert b.pick(b"\xff\xfe") in NODES


def test_duplicate_node() -> None:
    with raises(liblb.DuplicateNodeError, "LB_DUPLICATE_NODE", "NodeA"):
        liblb.Balancer("ring", ["NodeA", ("NodeA", 2)])
    b = liblb.Balancer("ring", NODES)
    with raises(liblb.DuplicateNodeError, "LB_DUPLICATE_NODE", "NodeB"):
        b.add("NodeB")
    unchanged(b, lambda: b.add("NodeC", 9), liblb.DuplicateNodeError)
    unchanged(b, lambda: b.update(["x", "y", "x"]), liblb.DuplicateNodeError)


def test_unknown_node() -> None:
    b = liblb.Balancer("ring", NODES)
    with raises(liblb.UnknownNodeError, "LB_UNKNOWN_NODE", "NodeZ"):
        b.remove("NodeZ")
    with raises(liblb.UnknownNodeError, "LB_UNKNOWN_NODE", "NodeY"):
        b.set_weight("NodeY", 3)
    unchanged(b, lambda: b.remove("nodea"), liblb.UnknownNodeError)


def test_key_required() -> None:
    for algorithm in ("source_hash", "ring"):
        b = liblb.Balancer(algorithm, NODES)
        with raises(liblb.KeyRequiredError, "LB_KEY_REQUIRED", algorithm):
            b.pick()
        with raises(liblb.KeyRequiredError, "LB_KEY_REQUIRED"):
            b.pick(None)
        with raises(liblb.KeyRequiredError, "LB_KEY_REQUIRED"):
            b.attempts()
        with raises(liblb.KeyRequiredError, "LB_KEY_REQUIRED"):
            b.pick_n(2)


def test_unknown_algorithm() -> None:
    with raises(liblb.UnknownAlgorithmError, "LB_UNKNOWN_ALGORITHM", "consistent", "round_robin"):
        liblb.Balancer("consistent", NODES)
    with raises(liblb.UnknownAlgorithmError, "LB_UNKNOWN_ALGORITHM", "Ring"):
        liblb.Balancer("Ring", NODES)


def test_option_errors() -> None:
    with raises(liblb.InvalidVnodesError, "LB_INVALID_VNODES", "0"):
        liblb.Balancer("ring", NODES, vnodes=0)
    with raises(liblb.InvalidVnodesError, "LB_INVALID_VNODES", "65537"):
        liblb.Balancer("ring", NODES, vnodes=liblb.MAX_VNODES + 1)
    with raises(liblb.InvalidOptionValueError, "LB_INVALID_OPTION_VALUE", "vnodes", "-1"):
        liblb.Balancer("ring", NODES, vnodes=-1)
    with raises(liblb.InvalidOptionValueError, "LB_INVALID_OPTION_VALUE", "vnodes"):
        liblb.Balancer("ring", NODES, vnodes=2**70)
    with raises(liblb.InvalidOptionValueError, "LB_INVALID_OPTION_VALUE", "seed", "-5"):
        liblb.Balancer("random", NODES, seed=-5)
    with raises(liblb.InvalidOptionValueError, "LB_INVALID_OPTION_VALUE", "seed", str(2**64)):
        liblb.Balancer("random", NODES, seed=2**64)
    with raises(liblb.UnknownHashError, "LB_UNKNOWN_HASH", "md5", "xxh3"):
        liblb.Balancer("ring", NODES, hash="md5")
    # Every one of them is also an InvalidOptionError.
    with pytest.raises(liblb.InvalidOptionError):
        liblb.Balancer("ring", NODES, vnodes=0)


def test_unknown_option_is_the_cores_error() -> None:
    # Options are passed to the core by name (so a new core option needs no binding change):
    # an unknown name is the core's UnknownOption, listing the valid ones.
    with raises(liblb.UnknownOptionError, "LB_UNKNOWN_OPTION", "colour", "vnodes"):
        liblb.Balancer("ring", NODES, colour="red")  # type: ignore[call-arg]


def test_errors_can_be_caught_as_value_error() -> None:
    b = liblb.Balancer("ring", NODES)
    with pytest.raises(ValueError, match="needs a key"):
        b.pick()


def test_user_constructed_errors() -> None:
    err = liblb.NoNodesError("custom")
    assert err.code == "LB_NO_NODES" and str(err) == "custom"


# --- wrong Python types: TypeError, naming the type ---------------------------------------

BAD_TYPES: list[tuple[str, Callable[[liblb.Balancer], object], str]] = [
    ("key int", lambda b: b.pick(1), "int"),  # type: ignore[arg-type]
    ("key float", lambda b: b.pick(1.5), "float"),  # type: ignore[arg-type]
    ("key list", lambda b: b.pick(["a"]), "list"),  # type: ignore[arg-type]
    ("attempts key", lambda b: b.attempts(object()), "object"),  # type: ignore[arg-type]
    ("keys not iterable", lambda b: b.pick_many(3), "int"),  # type: ignore[arg-type]
    ("keys single str", lambda b: b.pick_many("abc"), "str"),
    ("keys single bytes", lambda b: b.pick_many(b"abc"), "bytes"),  # type: ignore[arg-type]
    ("keys item", lambda b: b.pick_many(["a", 2]), "keys[1]"),  # type: ignore[list-item]
    ("count str", lambda b: b.pick_n("3"), "str"),  # type: ignore[arg-type]
    ("limit float", lambda b: b.attempts("k", 1.0), "float"),  # type: ignore[arg-type]
    ("limit str", lambda b: b.attempts("k", "2"), "str"),  # type: ignore[arg-type]
    ("add id bytes", lambda b: b.add(b"x"), "bytes"),  # type: ignore[arg-type]
    ("add id int", lambda b: b.add(5), "int"),  # type: ignore[arg-type]
    ("add weight float", lambda b: b.add("x", 1.5), "float"),  # type: ignore[arg-type]
    ("add weight str", lambda b: b.add("x", "2"), "str"),  # type: ignore[arg-type]
    ("remove id", lambda b: b.remove(None), "NoneType"),  # type: ignore[arg-type]
    ("set_weight id", lambda b: b.set_weight(1, 1), "int"),  # type: ignore[arg-type]
    ("set_weight weight", lambda b: b.set_weight("NodeA", None), "NoneType"),  # type: ignore[arg-type]
    ("update str", lambda b: b.update("abc"), "str"),  # a str is an Iterable[str]: runtime check
    ("update int", lambda b: b.update(3), "int"),  # type: ignore[arg-type]
    ("update item", lambda b: b.update([3]), "int"),  # type: ignore[list-item]
    ("update quadruple", lambda b: b.update([("a", 1, 2, 3)]), "tuple"),  # type: ignore[list-item]
    ("update tag str", lambda b: b.update([("a", 1, "2")]), "str"),  # type: ignore[list-item]
    ("add tag float", lambda b: b.add("x", 1, 1.0), "float"),  # type: ignore[arg-type]
    ("update pair id", lambda b: b.update([(1, 1)]), "int"),  # type: ignore[list-item]
    ("update pair weight", lambda b: b.update([("a", "1")]), "str"),  # type: ignore[list-item]
    ("update mapping weight", lambda b: b.update({"a": 1.0}), "float"),
]


@pytest.mark.parametrize(("name", "call", "named"), BAD_TYPES, ids=[n for n, _, _ in BAD_TYPES])
def test_wrong_types_raise_type_error(name: str, call: Callable[[liblb.Balancer], object], named: str) -> None:
    b = liblb.Balancer("ring", NODES)
    before = b.nodes()
    with pytest.raises(TypeError) as info:
        call(b)
    assert named in str(info.value)
    assert not isinstance(info.value, liblb.Error)
    assert b.nodes() == before


CONSTRUCTOR_TYPES: list[tuple[str, Callable[[], object], str]] = [
    ("algorithm", lambda: liblb.Balancer(1, NODES), "int"),  # type: ignore[arg-type]
    ("nodes None", lambda: liblb.Balancer("ring", None), "NoneType"),  # type: ignore[arg-type]
    ("nodes str", lambda: liblb.Balancer("ring", "NodeA"), "str"),
    ("seed float", lambda: liblb.Balancer("random", NODES, seed=1.0), "float"),  # type: ignore[arg-type]
    ("vnodes list", lambda: liblb.Balancer("ring", NODES, vnodes=[160]), "list"),  # type: ignore[arg-type]
    ("hash bytes", lambda: liblb.Balancer("ring", NODES, hash=b"xxh3"), "bytes"),  # type: ignore[arg-type]
    ("positional option", lambda: liblb.Balancer("ring", NODES, 7), "positional"),  # type: ignore[call-arg]
]


@pytest.mark.parametrize(("name", "call", "named"), CONSTRUCTOR_TYPES, ids=[n for n, _, _ in CONSTRUCTOR_TYPES])
def test_constructor_wrong_types(name: str, call: Callable[[], object], named: str) -> None:
    with pytest.raises(TypeError) as info:
        call()
    assert named in str(info.value)


# --- integers out of range: ValueError naming the value -----------------------------------


@pytest.mark.parametrize("weight", [-1, 2**32, 2**100, -(2**70)])
def test_weights_out_of_range(weight: int) -> None:
    b = liblb.Balancer("weighted_random", NODES)
    for call in (
        lambda: b.add("x", weight),
        lambda: b.set_weight("NodeA", weight),
        lambda: b.update([("x", weight)]),
        lambda: liblb.Balancer("ring", [("x", weight)]),
        lambda: liblb.Balancer("ring", {"x": weight}),
    ):
        before = b.nodes()
        with pytest.raises(ValueError) as info:
            call()
        assert not isinstance(info.value, liblb.Error)
        assert str(weight) in str(info.value) and "4294967295" in str(info.value)
        assert b.nodes() == before


def test_extreme_weights_are_accepted() -> None:
    b = liblb.Balancer("weighted_random", [("big", 2**32 - 1), ("small", 0), ("one", 1)])
    assert b.nodes() == [("big", 2**32 - 1), ("small", 0), ("one", 1)]
    ring = liblb.Balancer("ring", [(f"n{i}", 2**32 - 1) for i in range(50)])
    assert ring.pick("k").startswith("n")


def test_negative_limit_and_count() -> None:
    b = liblb.Balancer("random", NODES)
    with pytest.raises(ValueError, match="-1"):
        b.attempts(limit=-1)
    with pytest.raises(ValueError, match="count must be >= 0, got -3"):
        b.pick_n(-3)
    with pytest.raises(MemoryError, match=str(2**70)):
        b.pick_n(2**70)


def test_balancer_keeps_working_after_errors() -> None:
    b = liblb.Balancer("ring", NODES)
    keys = [f"k{i}" for i in range(100)]
    before = b.pick_many(keys)
    for call in (
        lambda: b.add("NodeA"),
        lambda: b.remove("x"),
        lambda: b.pick(),
        lambda: b.update([("a", -1)]),
        lambda: b.update(["a", "a"]),
        lambda: b.pick_many(["k", None]),  # type: ignore[list-item]
    ):
        with pytest.raises((liblb.Error, TypeError, ValueError)):
            call()
    assert b.pick_many(keys) == before
