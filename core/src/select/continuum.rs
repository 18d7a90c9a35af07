//! A sorted hash continuum shared by the field-compatible rings (`ketama`, `nginx_chash`,
//! `ring_hash`): points and their owners in two parallel arrays, a bucket index over the top
//! bits so a lookup searches one bucket instead of the whole ring, and the clockwise walk.
//!
//! Each system differs only in how it makes points (the callers do that) and in two choices
//! made here by flag: whether equal points are merged (nginx keeps one; libmemcached and Envoy
//! keep all, and a lookup reaches the first) and the width of the hash space (32 or 64 bits).
//! Equal points are always ordered by node id, so a continuum depends only on the set of nodes.

use super::sample::Seen;
use crate::MAX_RING_POINTS;
use crate::node::Node;
use alloc::vec::Vec;

/// A node's point count `count` out of a ring of `total`, scaled down proportionally (at
/// least 1) when the ring would exceed [`MAX_RING_POINTS`]. Every system here makes a node's
/// points as a sequence, so the scaled ring keeps a prefix of each node's points, and a ring
/// within the limit is exactly the upstream one.
pub(crate) fn scaled(count: u64, total: u64) -> u64 {
    if total <= MAX_RING_POINTS {
        count
    } else {
        ((u128::from(count) * u128::from(MAX_RING_POINTS) / u128::from(total)) as u64).max(1)
    }
}

pub(crate) struct Continuum {
    /// Sorted points (32-bit systems store their points zero-extended).
    points: Vec<u64>,
    /// `owners[i]` is the node index owning `points[i]`.
    owners: Vec<u32>,
    /// `index[b]` is the first position whose point's top bits are `>= b`.
    index: Vec<u32>,
    /// `width - bits`: a hash's bucket is `h >> shift`.
    shift: u32,
    /// Number of distinct owners.
    distinct: usize,
    /// Length of the full node list, for the walk's seen-set.
    node_count: usize,
    /// Active nodes that own no point (a weight share that rounds to zero points, as
    /// libmemcached's and Envoy's arithmetic allow), in id order: never picked, but listed
    /// after the walk so that a retry order still reaches every active node.
    unplaced: Vec<u32>,
}

impl Continuum {
    /// Sorts `entries` (point, owner) by point then owner id, drops repeated points when
    /// `merge_equal` (keeping the smallest id), and indexes them. `active` are the nodes the
    /// points were made for; `width` is 32 or 64.
    pub(crate) fn build(
        nodes: &[Node],
        active: &[u32],
        mut entries: Vec<(u64, u32)>,
        merge_equal: bool,
        width: u32,
    ) -> Continuum {
        entries.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| nodes[a.1 as usize].id.cmp(&nodes[b.1 as usize].id))
        });
        if merge_equal {
            entries.dedup_by_key(|e| e.0);
        }
        let (points, owners): (Vec<u64>, Vec<u32>) = entries.into_iter().unzip();
        let mut present = alloc::vec![false; nodes.len()];
        let distinct = owners
            .iter()
            .filter(|o| !core::mem::replace(&mut present[**o as usize], true))
            .count();
        let mut unplaced: Vec<u32> = active
            .iter()
            .copied()
            .filter(|i| !present[*i as usize])
            .collect();
        unplaced.sort_unstable_by(|a, b| nodes[*a as usize].id.cmp(&nodes[*b as usize].id));
        // About one point per bucket, at most 2^21 buckets (8 MiB of index).
        let bits = points
            .len()
            .next_power_of_two()
            .trailing_zeros()
            .clamp(1, 21)
            .min(width);
        let shift = width - bits;
        let mut index = Vec::with_capacity((1 << bits) + 1);
        let mut position = 0;
        for bucket in 0..=(1u64 << bits) {
            while position < points.len() && (points[position] >> shift) < bucket {
                position += 1;
            }
            index.push(position as u32);
        }
        Continuum {
            points,
            owners,
            index,
            shift,
            distinct,
            node_count: nodes.len(),
            unplaced,
        }
    }

    /// Position of the first point `>= h`, wrapping to 0 past the last point. Points in
    /// earlier buckets are all `< h`, so the answer is in `h`'s bucket or the first after it.
    #[inline]
    pub(crate) fn successor(&self, h: u64) -> usize {
        let bucket = (h >> self.shift) as usize;
        let (lo, hi) = (self.index[bucket] as usize, self.index[bucket + 1] as usize);
        let i = lo + self.points[lo..hi].partition_point(|p| *p < h);
        if i == self.points.len() { 0 } else { i }
    }

    /// The owner of the first point `>= h` (wrapping).
    #[inline]
    pub(crate) fn owner(&self, h: u64) -> u32 {
        self.owners[self.successor(h)]
    }

    /// Up to `limit` distinct owners clockwise from the first point `>= h`, then the active
    /// nodes that own no point, in id order.
    pub(crate) fn walk(&self, h: u64, limit: usize, out: &mut Vec<u32>) {
        let start = self.successor(h);
        let placed = limit.min(self.distinct);
        let mut seen = Seen::new(self.node_count, placed);
        let len = self.points.len();
        for step in 0..len {
            if out.len() >= placed {
                break;
            }
            let owner = self.owners[(start + step) % len];
            if seen.insert(owner) {
                out.push(owner);
            }
        }
        let more = limit - out.len();
        out.extend(self.unplaced.iter().take(more));
    }

    /// Whether the continuum has no point at all (every node got zero points).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The points and owners in ring order, for tests.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.points.iter().copied().zip(self.owners.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> [Node; 3] {
        [Node::new("c", 1), Node::new("a", 1), Node::new("b", 1)]
    }

    #[test]
    fn scaled_counts_fit_the_cap() {
        assert_eq!(scaled(480, 640), 480);
        let total = 3 * MAX_RING_POINTS;
        assert_eq!(scaled(MAX_RING_POINTS, total), MAX_RING_POINTS / 3);
        assert_eq!(scaled(1, total), 1);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn successor_agrees_with_a_full_binary_search() {
        let mut g = crate::SplitMix64::new(9);
        for width in [32, 64] {
            let mask = if width == 32 {
                u64::from(u32::MAX)
            } else {
                u64::MAX
            };
            let entries: Vec<(u64, u32)> = (0..500).map(|i| (g.next() & mask, i % 3)).collect();
            let c = Continuum::build(&nodes(), &[0, 1, 2], entries, false, width);
            for h in (0..3000)
                .map(|_| g.next() & mask)
                .chain([0, mask, c.points[0]])
            {
                let full = c.points.partition_point(|p| *p < h) % c.points.len();
                assert_eq!(c.successor(h), full, "width {width}, h = {h:#x}");
            }
        }
    }

    #[test]
    fn equal_points_are_ordered_by_id_whatever_the_insertion_order() {
        // Node 1 is "a", node 2 is "b", node 0 is "c": all three claim point 7.
        for entries in [
            alloc::vec![(7, 0), (7, 1), (7, 2)],
            alloc::vec![(7, 2), (7, 0), (7, 1)],
        ] {
            let kept = Continuum::build(&nodes(), &[0, 1, 2], entries.clone(), false, 32);
            assert_eq!(kept.entries().collect::<Vec<_>>(), [(7, 1), (7, 2), (7, 0)]);
            let merged = Continuum::build(&nodes(), &[0, 1, 2], entries, true, 32);
            assert_eq!(merged.entries().collect::<Vec<_>>(), [(7, 1)]);
            assert_eq!(merged.distinct, 1);
        }
    }

    #[test]
    fn walk_lists_distinct_owners_clockwise_and_wraps() {
        let entries = alloc::vec![(10, 0), (20, 0), (30, 1), (40, 2)];
        let c = Continuum::build(&nodes(), &[0, 1, 2], entries, false, 32);
        let mut out = Vec::new();
        c.walk(15, 3, &mut out);
        assert_eq!(out, [0, 1, 2]);
        out.clear();
        c.walk(35, 5, &mut out);
        assert_eq!(out, [2, 0, 1]);
        out.clear();
        c.walk(41, 2, &mut out);
        assert_eq!(out, [0, 1]);
    }
}
