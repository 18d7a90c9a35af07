//! `ring`: consistent hashing with virtual nodes (Karger et al., STOC 1997).
//!
//! Source: seed 001 `ConsistentHashing` and seed 000 part 3. By default this reproduces seed
//! 001 exactly: node `id` gets the points `sha256(id + i)` for `i` in `0..vnodes` (decimal `i`
//! appended to the UTF-8 id; a point is the digest's first 8 bytes, big-endian), and a key goes to
//! the first point `>= sha256(key)`, wrapping to the first point of the ring.
//!
//! Weights scale points: a node of weight `w` gets `vnodes · w` points, so nodes of the default
//! weight 1 get exactly `vnodes` each (seed 001 has no weights). The count depends on the node's
//! own weight only — never normalised by the gcd, sum or minimum of the set — because any
//! normalisation re-counts every node's points when one node joins or leaves, and keys would
//! move between surviving nodes. Only rings heavier than the point budget are scaled down
//! proportionally (each node keeps at least one point, so a ring holds at most
//! `max(budget, active nodes)` points), and there the guarantee below weakens to
//! "approximately". The budget is option `max_ring_points`: by default (and at most)
//! [`crate::MAX_RING_POINTS`], 2^22, which is seed 001's layout for every ring below it.
//!
//! Footprint: 12 bytes a point (8 for the point, 4 for its owner) and a bucket index of 4 bytes
//! per power-of-two bucket (one per point or two, at most 2^21): 1000 nodes of weights 1..100
//! at the default 160 vnodes want 8.08 M points and get the 4.19 M budget, 56 MiB, where 1000
//! equal weights take 2.9 MiB. Lowering `max_ring_points` (to 2^18: 4.1 MiB) or `vnodes`
//! shrinks such rings. `vnodes` keeps exact minimal movement as long as the ring stays under
//! the budget; a lower budget trades it for a size fixed whatever the weights (removing a node
//! re-scales every count: ~0.1% of keys move between survivors, measured at 2^18 to 2^22).
//! Envoy's `ring_hash` (`min_ring_size` / `max_ring_size`) always normalises; this ring never
//! does below its budget.
//!
//! Point-key collisions. Seed 001's point key `id + decimal i` is ambiguous: `"10.0.0.1" + "10"`
//! and `"10.0.0.11" + "0"` are the same string, hence the same point. When two nodes' point keys
//! are equal, the node first in id order keeps the point and every other one rehashes its copy
//! as `id + "\0" + decimal i` (ids never contain NUL, so these keys cannot be equal to any other
//! point key). Every node of weight `w` thus gets exactly its `vnodes · w` distinct points, and
//! sets without such collisions keep seed 001's layout byte for byte. Two different point keys
//! whose 64-bit hashes are equal (a true hash collision, ~n²/2⁶⁵) are ordered by id and the
//! later one's point is dropped. The ring depends only on the set of nodes, never on insertion
//! order (Java's `TreeMap.put` would let the later one win).
//!
//! Movement: removing a node moves only its keys; adding one moves keys only to it — except
//! that adding or removing a node whose point keys collide with a surviving node's also moves
//! the keys on that survivor's rehashed points (the survivor trades each rehashed point for the
//! original one). This is the price of keeping seed 001's layout where nothing collides; it
//! only concerns ids that extend one another by digits (`s1`/`s11`, `10.0.0.1`/`10.0.0.11`).
//!
//! Layout: points and owners in two parallel arrays (the binary search touches only the 8-byte
//! points). Cost: one key hash plus a binary search over n·vnodes points. Option `hash = "xxh3"`
//! swaps SHA-256 for XXH3-64 on both points and keys (same construction, ~10x faster hashing).
//! `attempts`: the next distinct nodes clockwise.

use super::Ctx;
use super::Select;
use super::sample::Seen;
use crate::Options;
use crate::node::Node;
use crate::{HashKind, MAX_RING_POINTS};
use alloc::vec::Vec;
use core::fmt::Write;

pub(crate) struct Ring {
    /// Sorted ring points.
    points: Vec<u64>,
    /// `owners[i]` is the node index owning `points[i]`.
    owners: Vec<u32>,
    /// Lookup accelerator: `index[b]` is the first position whose point has top bits `>= b`
    /// (`2^bits + 1` entries, about one point per bucket), so a lookup searches one bucket
    /// instead of the whole ring: two cache misses instead of ~log2(n·vnodes).
    index: Vec<u32>,
    /// `64 - bits`: a hash's bucket is `h >> shift`.
    shift: u32,
    /// Number of distinct owners (active nodes).
    distinct: usize,
    /// Length of the full node list, for the `attempts` seen-set.
    node_count: usize,
    hash: HashKind,
}

/// A small `fmt::Write` sink into a reusable byte buffer (formats `id + i` without allocating).
struct Buf(Vec<u8>);

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Points per node: `vnodes · w`, scaled down to fit `budget` (at most `MAX_RING_POINTS`) when
/// heavier: then every node gets one point and the rest of the budget is shared by weight
/// (rounded down), so the ring never holds more than `max(budget, active.len())` points.
fn point_counts(nodes: &[Node], active: &[u32], vnodes: u32, budget: u64) -> Vec<u64> {
    let budget = budget.min(MAX_RING_POINTS);
    let weights: Vec<u64> = active
        .iter()
        .map(|i| u64::from(nodes[*i as usize].weight))
        .collect();
    let sum: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    if sum * u128::from(vnodes) <= u128::from(budget) {
        return weights.iter().map(|w| w * u64::from(vnodes)).collect();
    }
    let spare = u128::from(budget.saturating_sub(weights.len() as u64));
    weights
        .iter()
        .map(|w| 1 + (u128::from(*w) * spare / sum) as u64)
        .collect()
}

/// Writes node `id`'s `i`-th point key into `buf`: seed 001's `id + decimal i`, or, for a
/// point that collided with a node earlier in id order, the unambiguous `id + "\0" + decimal i`.
fn point_key<'b>(buf: &'b mut Buf, id: &str, i: u32, rehashed: bool) -> &'b [u8] {
    buf.0.clear();
    // Writing into a Vec cannot fail.
    let _ = if rehashed {
        write!(buf, "{id}\0{i}")
    } else {
        write!(buf, "{id}{i}")
    };
    &buf.0
}

/// One point while the ring is built: its hash, owner, and the index `i` it was made from.
#[derive(Clone, Copy)]
struct Entry {
    point: u64,
    owner: u32,
    i: u32,
}

/// Builds the bucket index over sorted `points`: `2^bits >= points.len()` buckets (1..=2^21).
fn bucket_index(points: &[u64]) -> (Vec<u32>, u32) {
    let bits = points
        .len()
        .next_power_of_two()
        .trailing_zeros()
        .clamp(1, 21);
    let shift = 64 - bits;
    let mut index = Vec::with_capacity((1 << bits) + 1);
    let mut position = 0;
    for bucket in 0..=(1u64 << bits) {
        while position < points.len() && (points[position] >> shift) < bucket {
            position += 1;
        }
        index.push(position as u32);
    }
    (index, shift)
}

impl Ring {
    pub(crate) fn new(
        nodes: &[Node],
        active: &[u32],
        vnodes: u32,
        budget: u64,
        hash: HashKind,
    ) -> Ring {
        let counts = point_counts(nodes, active, vnodes, budget);
        let id = |e: &Entry| &*nodes[e.owner as usize].id;
        let mut entries: Vec<Entry> = Vec::with_capacity(counts.iter().sum::<u64>() as usize);
        let mut buf = Buf(Vec::new());
        for (&owner, &count) in active.iter().zip(&counts) {
            let node_id = &nodes[owner as usize].id;
            // Counts fit in u32: at most max(MAX_RING_POINTS, MAX_NODES) points.
            for i in 0..count as u32 {
                let point = hash.hash(point_key(&mut buf, node_id, i, false));
                entries.push(Entry { point, owner, i });
            }
        }
        // Order by point, then by id: collisions resolve the same whatever the insertion order.
        let order = |a: &Entry, b: &Entry| a.point.cmp(&b.point).then_with(|| id(a).cmp(id(b)));
        entries.sort_unstable_by(order);
        // In a run of equal points the first (smallest-id) entry keeps the point. A later one
        // whose point key is the same string is rehashed unambiguously; one whose key differs
        // (a true 64-bit hash collision) is dropped.
        let mut rehashed = Vec::new();
        let mut other = Buf(Vec::new());
        let mut run = 0;
        for k in 1..entries.len() {
            if entries[k].point != entries[run].point {
                run = k;
                continue;
            }
            let (first, e) = (entries[run], entries[k]);
            if point_key(&mut buf, id(&first), first.i, false)
                == point_key(&mut other, id(&e), e.i, false)
            {
                let point = hash.hash(point_key(&mut buf, id(&e), e.i, true));
                rehashed.push(Entry { point, ..e });
            }
        }
        entries.dedup_by_key(|e| e.point);
        if !rehashed.is_empty() {
            entries.extend(rehashed);
            entries.sort_unstable_by(order);
            entries.dedup_by_key(|e| e.point);
        }
        let points: Vec<u64> = entries.iter().map(|e| e.point).collect();
        let owners: Vec<u32> = entries.iter().map(|e| e.owner).collect();
        drop(entries);
        let (index, shift) = bucket_index(&points);
        Ring {
            points,
            owners,
            index,
            shift,
            distinct: active.len(),
            node_count: nodes.len(),
            hash,
        }
    }

    /// Index of the first point `>= h`, wrapping to 0. Points in earlier buckets are all
    /// `< h`, so the answer is inside `h`'s bucket or the first point after it.
    #[inline]
    fn successor(&self, h: u64) -> usize {
        let bucket = (h >> self.shift) as usize;
        let (lo, hi) = (self.index[bucket] as usize, self.index[bucket + 1] as usize);
        let i = lo + self.points[lo..hi].partition_point(|p| *p < h);
        if i == self.points.len() { 0 } else { i }
    }

    /// The owner of the first point `>= h` (wrapping): [`Ring::successor`]'s owner, with the
    /// owner of the bucket's first point read before the search. That load goes out with the
    /// points' instead of after them, and the answer is that owner or one a few slots on, in
    /// the same cache line: on a ring larger than the caches a lookup waits for two memory
    /// round trips (index, then points and owners) instead of three.
    #[inline]
    fn owner(&self, h: u64) -> u32 {
        let bucket = (h >> self.shift) as usize;
        let (lo, hi) = (self.index[bucket] as usize, self.index[bucket + 1] as usize);
        // `lo == len` only for the last bucket(s) past the last point.
        let first = self.owners.get(lo).copied();
        let i = lo + self.points[lo..hi].partition_point(|p| *p < h);
        match first {
            Some(owner) if i == lo => owner,
            _ => self.owners[if i == self.points.len() { 0 } else { i }],
        }
    }

    /// The ring's points and owners, for tests.
    #[cfg(test)]
    pub(crate) fn points(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.points.iter().copied().zip(self.owners.iter().copied())
    }
}

impl Select for Ring {
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> Ring {
        Ring::new(
            nodes,
            &active,
            options.vnodes,
            options.max_ring_points,
            options.hash.unwrap_or(HashKind::Sha256),
        )
    }

    #[inline]
    fn pick(&self, key: &[u8], _ctx: &Ctx<'_>) -> u32 {
        self.owner(self.hash.hash(key))
    }

    fn attempts(&self, key: &[u8], _ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let start = self.successor(self.hash.hash(key));
        let limit = limit.min(self.distinct);
        let mut seen = Seen::new(self.node_count, limit);
        let len = self.points.len();
        for step in 0..len {
            let owner = self.owners[(start + step) % len];
            if seen.insert(owner) {
                out.push(owner);
                if out.len() == limit {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (tens of seconds interpreted).
    fn bucket_index_agrees_with_a_full_binary_search() {
        let nodes = [Node::new("a", 1), Node::new("b", 2), Node::new("c", 1)];
        let ring = Ring::new(&nodes, &[0, 1, 2], 50, MAX_RING_POINTS, HashKind::Xxh3);
        let mut g = crate::SplitMix64::new(3);
        let probes = [
            0,
            1,
            u64::MAX,
            ring.points[0],
            ring.points[ring.points.len() - 1],
        ];
        for h in probes.into_iter().chain((0..2000).map(|_| g.next())) {
            let full = ring.points.partition_point(|p| *p < h) % ring.points.len();
            assert_eq!(ring.successor(h), full, "h = {h:#x}");
            assert_eq!(ring.owner(h), ring.owners[full], "h = {h:#x}");
        }
    }

    #[test]
    fn default_weights_give_exactly_vnodes_points() {
        let nodes = [Node::new("a", 1), Node::new("b", 1), Node::new("c", 1)];
        let ring = Ring::new(&nodes, &[0, 1, 2], 10, MAX_RING_POINTS, HashKind::Sha256);
        for owner in 0..3 {
            assert_eq!(ring.points().filter(|(_, o)| *o == owner).count(), 10);
        }
    }

    #[test]
    fn a_nodes_point_count_ignores_the_other_nodes() {
        let with_c = [Node::new("a", 2), Node::new("b", 2), Node::new("c", 1)];
        let without_c = [Node::new("a", 2), Node::new("b", 2)];
        assert_eq!(
            point_counts(&with_c, &[0, 1, 2], 160, MAX_RING_POINTS),
            [320, 320, 160]
        );
        assert_eq!(
            point_counts(&without_c, &[0, 1], 160, MAX_RING_POINTS),
            [320, 320]
        );
    }

    #[test]
    fn weights_scale_points() {
        let nodes = [Node::new("a", 2), Node::new("b", 7), Node::new("c", 1)];
        let counts = point_counts(&nodes, &[0, 1, 2], 160, MAX_RING_POINTS);
        assert_eq!(counts, [320, 1120, 160]);
    }

    fn owned(ring: &Ring, owner: u32) -> usize {
        ring.points().filter(|(_, o)| *o == owner).count()
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Hashing-heavy; the unsafe code Miri checks is in dependencies.
    fn colliding_point_keys_are_rehashed_not_lost() {
        // "10.0.0.1" + "10" == "10.0.0.11" + "0": before the fix 10.0.0.11 kept none of its
        // 160 points next to a node of weight 8.
        let nodes = [Node::new("10.0.0.1", 8), Node::new("10.0.0.11", 1)];
        let ring = Ring::new(&nodes, &[0, 1], 160, MAX_RING_POINTS, HashKind::Sha256);
        assert_eq!(owned(&ring, 0), 8 * 160);
        assert_eq!(owned(&ring, 1), 160);
        // The node first in id order keeps seed 001's points; the other's are rehashed.
        let mut buf = Buf(Vec::new());
        let seed_point = HashKind::Sha256.hash(point_key(&mut buf, "10.0.0.1", 10, false));
        assert!(ring.points().any(|p| p == (seed_point, 0)));
        let moved = HashKind::Sha256.hash(point_key(&mut buf, "10.0.0.11", 0, true));
        assert!(ring.points().any(|p| p == (moved, 1)));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Hashing-heavy; the unsafe code Miri checks is in dependencies.
    fn collisions_resolve_the_same_in_any_insertion_order() {
        let ids = ["s1", "s11", "s111", "s2", "s21"];
        let forward: Vec<Node> = ids.iter().map(|id| Node::new(*id, 1)).collect();
        let backward: Vec<Node> = ids.iter().rev().map(|id| Node::new(*id, 1)).collect();
        let a = Ring::new(
            &forward,
            &[0, 1, 2, 3, 4],
            160,
            MAX_RING_POINTS,
            HashKind::Xxh3,
        );
        let b = Ring::new(
            &backward,
            &[0, 1, 2, 3, 4],
            160,
            MAX_RING_POINTS,
            HashKind::Xxh3,
        );
        let named = |ring: &Ring, nodes: &[Node]| -> Vec<(u64, alloc::boxed::Box<str>)> {
            ring.points()
                .map(|(p, o)| (p, nodes[o as usize].id.clone()))
                .collect()
        };
        assert_eq!(named(&a, &forward), named(&b, &backward));
        for owner in 0..5 {
            assert_eq!(owned(&a, owner), 160, "{}", ids[owner as usize]);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (tens of seconds interpreted).
    fn huge_weights_are_capped_exactly() {
        let nodes = [Node::new("a", u32::MAX), Node::new("b", 1)];
        let counts = point_counts(&nodes, &[0, 1], 160, MAX_RING_POINTS);
        assert!(counts.iter().sum::<u64>() <= MAX_RING_POINTS);
        assert_eq!(counts[1], 1);
        // Many nodes of a heavy weight: one point each at least, never more than the cap.
        let many: Vec<Node> = (0..5000)
            .map(|i| Node::new(alloc::format!("n{i}"), 1000))
            .collect();
        let active: Vec<u32> = (0..5000).collect();
        let counts = point_counts(&many, &active, 65536, MAX_RING_POINTS);
        assert!(counts.iter().sum::<u64>() <= MAX_RING_POINTS);
        assert!(counts.iter().all(|c| *c >= 1));
    }

    #[test]
    fn a_smaller_budget_scales_heavy_rings_and_leaves_light_ones() {
        let nodes: Vec<Node> = (1..=100)
            .map(|w| Node::new(alloc::format!("n{w}"), w))
            .collect();
        let active: Vec<u32> = (0..100).collect();
        // 5050 units of weight at 160 vnodes: 808,000 points wanted.
        let full = point_counts(&nodes, &active, 160, MAX_RING_POINTS);
        assert_eq!(full.iter().sum::<u64>(), 808_000);
        // A budget above the ring changes nothing: the default layout.
        assert_eq!(point_counts(&nodes, &active, 160, 808_000), full);
        let small = point_counts(&nodes, &active, 160, 1 << 16);
        assert!(small.iter().sum::<u64>() <= 1 << 16);
        assert!(small.iter().all(|c| *c >= 1));
        // Shares stay proportional to weight (within the rounding of one point).
        assert_eq!(small[0], 1 + (65536 - 100) / 5050);
        assert_eq!(small[99], 1 + 100 * (65536 - 100) / 5050);
        // Budgets above MAX_RING_POINTS are clamped to it.
        assert_eq!(point_counts(&nodes, &active, 160, u64::MAX), full);
    }

    proptest::proptest! {
        #![proptest_config(crate::proptest_config(48, 1))]

        /// Ids drawn to collide (`s1`/`s11`/`s111`, IPv4 text): every node of weight w owns
        /// exactly `vnodes · w` distinct points, whatever the insertion order.
        #[test]
        #[cfg_attr(miri, ignore)]
        fn colliding_ids_keep_exact_point_counts(
            ids in proptest::collection::btree_set("(s|10\\.0\\.0\\.)[1-9][0-9]{0,2}", 1..8),
            weights in proptest::collection::vec(1u32..4, 8),
        ) {
            let nodes: Vec<Node> = ids.iter().zip(&weights).map(|(id, w)| Node::new(id.as_str(), *w)).collect();
            let active: Vec<u32> = (0..nodes.len() as u32).collect();
            let ring = Ring::new(&nodes, &active, 40, MAX_RING_POINTS, HashKind::Xxh3);
            for (owner, node) in nodes.iter().enumerate() {
                proptest::prop_assert_eq!(owned(&ring, owner as u32), 40 * node.weight as usize);
            }
        }
    }
}
