"""Property tests (hypothesis): the invariants every algorithm promises, on arbitrary nodes,
weights and keys."""

from __future__ import annotations


from hypothesis import assume, given
from hypothesis import strategies as st

import liblb

ids = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"),
    min_size=1,
    max_size=12,
)
node_lists = st.lists(st.tuples(ids, st.integers(0, 20)), min_size=1, max_size=12, unique_by=lambda n: n[0])
keys = st.one_of(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20), st.binary(max_size=20))


@given(st.sampled_from(liblb.ALGORITHMS), node_lists, keys, st.integers(0, 15), st.integers(0, 2**64 - 1))
def test_attempts_are_distinct_pickable_nodes(
    algorithm: str, nodes: list[tuple[str, int]], key: str | bytes, limit: int, seed: int
) -> None:
    assume(any(w > 0 for _, w in nodes))
    b = liblb.Balancer(algorithm, nodes, seed=seed)
    twin = liblb.Balancer(algorithm, nodes, seed=seed)
    got = b.attempts(key, limit)
    pickable = {i for i, w in nodes if w > 0}
    assert len(got) == len(set(got)), got
    assert set(got) <= pickable
    assert len(got) == min(limit, len(pickable))
    if limit:
        assert got[0] == twin.pick(key)


@given(node_lists, st.lists(keys, min_size=1, max_size=60), st.sampled_from(liblb.HASHES), st.integers(1, 200))
def test_ring_removal_moves_only_the_removed_nodes_keys(
    nodes: list[tuple[str, int]], batch: list[str | bytes], hash: str, vnodes: int
) -> None:
    nodes = [(i, w) for i, w in nodes if w > 0]
    assume(len(nodes) >= 2)
    ring = liblb.Balancer("ring", nodes, hash=hash, vnodes=vnodes)
    before = ring.pick_many(batch)
    gone = nodes[len(batch) % len(nodes)][0]
    ring.remove(gone)
    after = ring.pick_many(batch)
    for key, old, new in zip(batch, before, after):
        if old != gone:
            assert new == old, (key, old, new)
        else:
            assert new != gone


@given(node_lists, ids, st.integers(1, 20), st.lists(keys, min_size=1, max_size=60))
def test_ring_addition_moves_keys_only_to_the_new_node(
    nodes: list[tuple[str, int]], new_id: str, weight: int, batch: list[str | bytes]
) -> None:
    assume(new_id not in {i for i, _ in nodes} and any(w > 0 for _, w in nodes))
    ring = liblb.Balancer("ring", nodes)
    before = ring.pick_many(batch)
    ring.add(new_id, weight)
    after = ring.pick_many(batch)
    for old, new in zip(before, after):
        assert new in (old, new_id)


@given(st.sampled_from(liblb.ALGORITHMS), node_lists, st.lists(keys, max_size=40))
def test_picks_are_pickable_and_batches_match_singles_for_keyed(
    algorithm: str, nodes: list[tuple[str, int]], batch: list[str | bytes]
) -> None:
    assume(any(w > 0 for _, w in nodes))
    b = liblb.Balancer(algorithm, nodes, seed=1)
    pickable = {i for i, w in nodes if w > 0}
    many = b.pick_many(batch)
    assert len(many) == len(batch) and set(many) <= pickable
    if algorithm in ("source_hash", "ring"):
        assert many == [b.pick(k) for k in batch]


@given(node_lists, node_lists)
def test_update_replaces_membership_exactly(first: list[tuple[str, int]], second: list[tuple[str, int]]) -> None:
    b = liblb.Balancer("weighted_round_robin", first)
    assert b.nodes() == first
    b.update(second)
    assert b.nodes() == second
    assert all(n in b for n, _ in second)
    assert len(b) == len(second)


@given(st.sampled_from(liblb.ALGORITHMS), node_lists)
def test_drained_nodes_are_never_picked(algorithm: str, nodes: list[tuple[str, int]]) -> None:
    assume(any(w > 0 for _, w in nodes) and any(w == 0 for _, w in nodes))
    b = liblb.Balancer(algorithm, nodes, seed=9)
    drained = {i for i, w in nodes if w == 0}
    assert not drained & set(b.pick_many([f"k{i}" for i in range(200)]))
