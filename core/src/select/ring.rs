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
//! move between surviving nodes. Only rings heavier than [`crate::MAX_RING_POINTS`] are scaled
//! down proportionally (each node keeps at least one point), and there the guarantee below
//! weakens to "approximately". Two nodes whose points collide are ordered by id, so the ring
//! depends only on the set of nodes, never on insertion order (Java's `TreeMap.put` would let
//! the later one win). Removing a node moves only its keys; adding one moves keys only to it.
//!
//! Layout: points and owners in two parallel arrays (the binary search touches only the 8-byte
//! points). Cost: one key hash plus a binary search over n·vnodes points. Option `hash = "xxh3"`
//! swaps SHA-256 for XXH3-64 on both points and keys (same construction, ~10x faster hashing).
//! `attempts`: the next distinct nodes clockwise.

use super::Select;
use crate::node::Node;
use crate::table::State;
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

/// Points per node: `vnodes · w`, scaled down to fit `MAX_RING_POINTS`.
fn point_counts(nodes: &[Node], active: &[u32], vnodes: u32) -> Vec<u64> {
    let weights: Vec<u64> = active
        .iter()
        .map(|i| u64::from(nodes[*i as usize].weight))
        .collect();
    let sum: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    if sum * u128::from(vnodes) <= u128::from(MAX_RING_POINTS) {
        weights.iter().map(|w| w * u64::from(vnodes)).collect()
    } else {
        weights
            .iter()
            .map(|w| ((u128::from(*w) * u128::from(MAX_RING_POINTS) / sum) as u64).max(1))
            .collect()
    }
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
    pub(crate) fn build(nodes: &[Node], active: &[u32], vnodes: u32, hash: HashKind) -> Ring {
        let counts = point_counts(nodes, active, vnodes);
        let mut entries: Vec<(u64, u32)> = Vec::with_capacity(counts.iter().sum::<u64>() as usize);
        let mut buf = Buf(Vec::new());
        for (node, count) in active.iter().zip(&counts) {
            let id = &nodes[*node as usize].id;
            for i in 0..*count {
                buf.0.clear();
                // Writing into a Vec cannot fail.
                let _ = write!(buf, "{id}{i}");
                entries.push((hash.hash(&buf.0), *node));
            }
        }
        // Order by point, then by id: collisions resolve the same whatever the insertion order.
        entries.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| nodes[a.1 as usize].id.cmp(&nodes[b.1 as usize].id))
        });
        // A collided point is owned by its first (smallest-id) claimant only.
        entries.dedup_by_key(|e| e.0);
        let (points, owners): (Vec<u64>, Vec<u32>) = entries.into_iter().unzip();
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

    /// The ring's points and owners, for tests.
    #[cfg(test)]
    pub(crate) fn points(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.points.iter().copied().zip(self.owners.iter().copied())
    }
}

impl Select for Ring {
    #[inline]
    fn pick(&self, key: &[u8], _state: &State) -> u32 {
        self.owners[self.successor(self.hash.hash(key))]
    }

    fn attempts(&self, key: &[u8], _state: &State, limit: usize, out: &mut Vec<u32>) {
        let start = self.successor(self.hash.hash(key));
        let limit = limit.min(self.distinct);
        let mut seen = alloc::vec![false; self.node_count];
        let len = self.points.len();
        for step in 0..len {
            let owner = self.owners[(start + step) % len];
            if !core::mem::replace(&mut seen[owner as usize], true) {
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
    fn bucket_index_agrees_with_a_full_binary_search() {
        let nodes = [Node::new("a", 1), Node::new("b", 2), Node::new("c", 1)];
        let ring = Ring::build(&nodes, &[0, 1, 2], 50, HashKind::Xxh3);
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
        }
    }

    #[test]
    fn default_weights_give_exactly_vnodes_points() {
        let nodes = [Node::new("a", 1), Node::new("b", 1), Node::new("c", 1)];
        let ring = Ring::build(&nodes, &[0, 1, 2], 10, HashKind::Sha256);
        for owner in 0..3 {
            assert_eq!(ring.points().filter(|(_, o)| *o == owner).count(), 10);
        }
    }

    #[test]
    fn a_nodes_point_count_ignores_the_other_nodes() {
        let with_c = [Node::new("a", 2), Node::new("b", 2), Node::new("c", 1)];
        let without_c = [Node::new("a", 2), Node::new("b", 2)];
        assert_eq!(point_counts(&with_c, &[0, 1, 2], 160), [320, 320, 160]);
        assert_eq!(point_counts(&without_c, &[0, 1], 160), [320, 320]);
    }

    #[test]
    fn weights_scale_points() {
        let nodes = [Node::new("a", 2), Node::new("b", 7), Node::new("c", 1)];
        let counts = point_counts(&nodes, &[0, 1, 2], 160);
        assert_eq!(counts, [320, 1120, 160]);
    }

    #[test]
    fn huge_weights_are_capped() {
        let nodes = [Node::new("a", u32::MAX), Node::new("b", 1)];
        let counts = point_counts(&nodes, &[0, 1], 160);
        assert!(counts.iter().sum::<u64>() <= MAX_RING_POINTS);
        assert_eq!(counts[1], 1);
    }
}
