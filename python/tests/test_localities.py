"""Nodes with localities and priority levels (issue 24): liblb.Node, the located add and
set_location, locality weights and zone-aware routing, and their errors. The rules themselves
are the core's (core/tests/localities.rs checks them against Envoy's); here: that Python
reaches them, and bad input gets a specific error and changes nothing."""

from __future__ import annotations

from collections import Counter

import pytest

import liblb


def zones(**options: int | str | None) -> liblb.Balancer:
    nodes = [
        liblb.Node(f"{zone}{i}", locality=f"r/{zone}") for zone in "abc" for i in range(2)
    ]
    return liblb.Balancer("random", nodes, seed=7, **options)  # type: ignore[arg-type]


def test_node_has_defaults_and_a_readable_repr() -> None:
    node = liblb.Node("a")
    assert (node.id, node.weight, node.locality, node.priority, node.tag) == ("a", 1, "", 0, 0)
    assert repr(node) == 'Node("a", weight=1)'
    placed = liblb.Node("b", 3, locality="us-east/us-east-1a", priority=1)
    assert repr(placed) == 'Node("b", weight=3, locality="us-east/us-east-1a", priority=1)'
    assert placed == liblb.Node("b", 3, locality="us-east/us-east-1a", priority=1)
    assert len({placed, liblb.Node("b", 3, locality="us-east/us-east-1a", priority=1)}) == 1


def test_nodes_and_stats_show_where_each_node_is() -> None:
    b = liblb.Balancer(
        "round_robin", [("plain", 2), liblb.Node("placed", locality="eu/eu-west-1b", priority=2)]
    )
    b.add("added", 1, locality="us/us-east-1", priority=1)
    assert b.nodes() == [("plain", 2), ("placed", 1), ("added", 1)]
    assert b.nodes(located=True) == [
        liblb.Node("plain", 2),
        liblb.Node("placed", locality="eu/eu-west-1b", priority=2),
        liblb.Node("added", locality="us/us-east-1", priority=1),
    ]
    stats = {s["id"]: (s["locality"], s["priority"]) for s in b.stats()}
    assert stats == {"plain": ("", 0), "placed": ("eu/eu-west-1b", 2), "added": ("us/us-east-1", 1)}
    b.set_location("plain", "ap/ap-south-1", 3)
    assert b.nodes(located=True)[0] == liblb.Node("plain", 2, locality="ap/ap-south-1", priority=3)


def test_traffic_spills_to_the_next_priority_as_envoy_computes() -> None:
    nodes = [liblb.Node(f"p{i}") for i in range(10)] + [
        liblb.Node(f"s{i}", priority=1) for i in range(10)
    ]
    b = liblb.Balancer("random", nodes, seed=3)
    assert {n[0] for n in b.pick_n(500)} == {"p"}
    for i in range(5):
        b.mark_down(f"p{i}")
    # 5 of 10 healthy x 1.4 = 70% stays on priority 0. 99.9% chi-square bound, 1 dof: 10.83.
    counts = Counter(n[0] for n in b.pick_n(20_000))
    expected = {"p": 14_000, "s": 6_000}
    chi = sum((counts[k] - e) ** 2 / e for k, e in expected.items())
    assert chi < 10.83, counts


def test_zone_aware_routing_and_locality_weights() -> None:
    b = zones()
    b.set_local_locality("r/b")
    b.set_local_localities({"r/a": 1, "r/b": 1, "r/c": 1})
    assert {n[0] for n in b.pick_n(300)} == {"b"}
    b.set_local_localities([])
    assert {n[0] for n in b.pick_n(300)} == {"a", "b", "c"}
    rr = liblb.Balancer("round_robin", [liblb.Node(f"{z}", locality=z) for z in "xyz"])
    rr.set_locality_weights([("x", 1), ("y", 2), ("z", 3)])
    assert Counter(rr.pick_n(600)) == {"x": 100, "y": 200, "z": 300}


def test_zone_options_are_options() -> None:
    for name in (
        "overprovisioning_factor",
        "zone_aware_min_cluster_size",
        "zone_aware_routing_enabled",
        "zone_aware_by_weight",
    ):
        assert name in liblb.OPTIONS
    b = zones(zone_aware_min_cluster_size=7)
    b.set_local_locality("r/b")
    b.set_local_localities({"r/a": 1, "r/b": 1, "r/c": 1})
    assert {n[0] for n in b.pick_n(300)} == {"a", "b", "c"}  # too few nodes: no routing
    with pytest.raises(liblb.InvalidOptionValueError):
        zones(zone_aware_routing_enabled=101)
    with pytest.raises(liblb.InvalidOptionValueError):
        zones(overprovisioning_factor=0)


def test_bad_localities_raise_specific_errors_and_change_nothing() -> None:
    b = zones()
    before = b.nodes(located=True)
    with pytest.raises(liblb.InvalidLocalityError) as info:
        b.add("x", locality="a/b/c/d")
    assert info.value.code == "LB_INVALID_LOCALITY"
    assert "a/b/c/d" in str(info.value)
    with pytest.raises(liblb.InvalidLocalityError):
        b.set_location("a0", "1/2/3/4")
    with pytest.raises(liblb.InvalidLocalityError):
        b.set_locality_weights({"a/b/c/d": 1})
    with pytest.raises(liblb.InvalidLocalityError):
        b.set_local_locality("nul\0")
    with pytest.raises(liblb.InvalidLocalityError):
        liblb.Balancer("random", [liblb.Node("x", locality="1/2/3/4")])
    with pytest.raises(liblb.UnknownNodeError):
        b.set_location("nope", "r/a")
    with pytest.raises(TypeError, match="locality must be str"):
        liblb.Node("x", locality=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be int"):
        liblb.Node("x", priority="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="priority must be an integer from 0"):
        liblb.Node("x", priority=-1)
    with pytest.raises(TypeError, match="pairs"):
        b.set_locality_weights("r/a")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="locality weight must be int"):
        b.set_locality_weights({"r/a": "1"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="instance count"):
        b.set_local_localities({"r/a": -1})
    assert b.nodes(located=True) == before
    b.pick()
