"""Subsetting from Python (issue 26): the options as keywords and ``Balancer.subset()``.

The algorithms are the core's (its Rust tests port the upstream expectations; the shared
vectors pin their answers in every language); these tests check what the binding adds: the
keywords, the list, the repr, and the error classes, each leaving the balancer as it was."""

from __future__ import annotations

import pytest

import liblb

FLEET = [f"10.0.0.{i}:80" for i in range(30)]
SUBSETS = ("deterministic", "random", "ringsteady", "aperture")
CLIENT = {"subset_size": 5, "client_index": 2, "client_count": 6, "subset_seed": 11}


@pytest.mark.parametrize("subset", SUBSETS)
def test_picks_stay_in_the_listed_subset(subset: str) -> None:
    b = liblb.Balancer("random", FLEET, subset=subset, seed=3, **CLIENT)  # type: ignore[arg-type]
    members = b.subset()
    assert all(isinstance(m, str) for m in members)
    # Aperture's fractional edges may add a backend or two; the others give exactly 5.
    assert 5 <= len(members) <= 7 and len(set(members)) == len(members)
    assert members == [n for n in FLEET if n in members], "node order"
    assert {b.pick() for _ in range(200)} <= set(members)
    assert set(b.attempts(limit=10)) <= set(members)
    # The same client identity, the same subset.
    twin = liblb.Balancer("round_robin", FLEET, subset=subset, **CLIENT)  # type: ignore[arg-type]
    assert twin.subset() == members


def test_without_subsetting_every_node_of_weight_above_zero() -> None:
    b = liblb.Balancer("round_robin", [("a", 1), ("b", 0), ("c", 2)])
    assert b.subset() == ["a", "c"]
    b.update([])
    assert b.subset() == []


def test_membership_changes_recompute_the_subset() -> None:
    b = liblb.Balancer("round_robin", FLEET, subset="random", subset_size=5, subset_seed=7)
    before = b.subset()
    gone = before[0]
    b.remove(gone)
    after = b.subset()
    assert len(after) == 5 and gone not in after
    assert len(set(before) - set(after)) == 1, "A68: one member replaced"
    b.add(gone)
    assert sorted(b.subset()) == sorted(before)
    b.set_weight(gone, 0)
    assert gone not in b.subset()
    b.set_weight(gone, 1)
    assert sorted(b.subset()) == sorted(before)


def test_random_subsets_draw_a_seed_per_client_and_show_it() -> None:
    a = liblb.Balancer("round_robin", FLEET, subset="random", subset_size=5)
    c = liblb.Balancer("round_robin", FLEET, subset="random", subset_size=5)
    assert a.subset() != c.subset()  # two random 5-subsets of 30 agree with chance 7e-6
    # repr evaluates back while it lists every node (at most eight).
    small = liblb.Balancer("round_robin", FLEET[:8], subset="random", subset_size=3)
    text = repr(small)
    assert "subset='random'" in text and "subset_seed=" in text and "subset_size=3" in text
    again = eval(text, {"Balancer": liblb.Balancer})
    assert again.subset() == small.subset(), "the repr keeps the drawn seed"


def test_repr_shows_the_client_identity() -> None:
    b = liblb.Balancer("round_robin", FLEET, subset="aperture", **CLIENT)  # type: ignore[arg-type]
    text = repr(b)
    for part in ("subset='aperture'", "subset_size=5", "client_index=2", "client_count=6",
                 "subset_seed=11"):
        assert part in text, text
    assert "subset" not in repr(liblb.Balancer("round_robin", FLEET))


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"subset": "aperture2", "subset_size": 3}, "subset"),
        ({"subset": 1, "subset_size": 3}, "subset"),
        ({"subset": "random", "subset_size": 0}, "subset_size"),
        ({"subset": "random", "subset_size": -1}, "subset_size"),
        ({"subset": "random"}, "subset_size"),  # required with subset
        ({"subset": "aperture", "subset_size": 3, "client_count": 0}, "client_count"),
        ({"subset": "aperture", "subset_size": 3, "client_index": 4, "client_count": 4},
         "client_index"),
        ({"client_index": 1}, "client_index"),  # client_count defaults to 1
        ({"subset": "random", "subset_size": 3, "subset_seed": "x"}, "subset_seed"),
    ],
)
def test_bad_options_raise_invalid_option_value(options: dict[str, object], option: str) -> None:
    with pytest.raises(liblb.InvalidOptionValueError, match=option) as info:
        liblb.Balancer("round_robin", FLEET, **options)  # type: ignore[arg-type]
    assert info.value.code == "LB_INVALID_OPTION_VALUE"
    assert isinstance(info.value, liblb.InvalidOptionError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("algorithm", liblb.KEYED_ALGORITHMS)
def test_keyed_algorithms_refuse_subsetting(algorithm: str) -> None:
    with pytest.raises(liblb.InvalidOptionValueError, match="subset"):
        liblb.Balancer(algorithm, FLEET, subset="random", subset_size=3, subset_seed=1)
    # The identity alone is accepted (and unread): a configuration may carry it everywhere.
    b = liblb.Balancer(algorithm, FLEET, subset_size=3, client_index=1, client_count=2)
    assert b.subset() == FLEET


def test_wrong_types_are_type_errors() -> None:
    with pytest.raises(TypeError):
        liblb.Balancer("round_robin", FLEET, subset=b"random", subset_size=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        liblb.Balancer("round_robin", FLEET, subset="random", subset_size=2.5)  # type: ignore[arg-type]
    b = liblb.Balancer("round_robin", FLEET)
    with pytest.raises(TypeError):
        b.subset(3)  # type: ignore[call-arg]


def test_failed_changes_leave_the_subset() -> None:
    b = liblb.Balancer("round_robin", FLEET, subset="deterministic", **CLIENT)  # type: ignore[arg-type]
    members = b.subset()
    with pytest.raises(liblb.UnknownNodeError):
        b.remove("10.9.9.9:80")
    with pytest.raises(liblb.DuplicateNodeError):
        b.add(FLEET[0])
    with pytest.raises(liblb.DuplicateNodeError):
        b.update([FLEET[0], FLEET[0]])
    with pytest.raises(liblb.UnknownNodeError):
        b.set_weight("10.9.9.9:80", 0)
    assert b.subset() == members
    assert {b.pick() for _ in range(50)} <= set(members)
