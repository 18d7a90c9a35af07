//! Sampling without replacement, shared by every algorithm's `attempts`.
//!
//! - Uniform: a lazy Fisher-Yates shuffle (Durstenfeld 1964; seed 002's "classic fisher-yates")
//!   that materialises only the swapped slots, so a prefix of `k` costs O(k) draws. Seed 002's
//!   pairwise-swap shuffle is biased (first slot 22% vs 14% for 7 nodes); this one is exact.
//! - Weighted: successive draws from the weights of the nodes not yet chosen. While at least
//!   half the weight is left, a draw from the full distribution that lands on an already chosen
//!   node is rejected and redrawn (rejection keeps the conditional distribution exact); after
//!   8 rejections, or once most weight is taken, the slot is settled by a descent of a Fenwick
//!   tree of the weights built with the table, minus the chosen ones — the same answer as a
//!   linear scan over the remaining weights in index order, in O(log n).
//!
//! Cost: a prefix of `k` out of `n` takes O(k · log n) steps whatever the weights. The
//! bookkeeping (swapped slots, chosen nodes, subtracted tree sums) lives in a short list for
//! `k <= 32`, an ordered map while `k` is small next to `n` (each step then O(log k) more), and
//! a plain array once `64·k >= n`, where allocating O(n) is within O(k).

use crate::rng::bounded;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec;
use alloc::vec::Vec;

/// Redraws before a weighted slot falls back to the tree descent (while half the weight is left).
const MAX_REJECTIONS: usize = 8;
/// Prefix length up to which bookkeeping is a short list scanned linearly.
const FEW: usize = 32;
/// Above `n / DENSE_RATIO` picks, bookkeeping is an array of `n` entries.
const DENSE_RATIO: usize = 64;

/// How much bookkeeping a prefix of `limit` out of `n` deserves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Size {
    Few,
    Sparse,
    Dense,
}

impl Size {
    fn of(n: usize, limit: usize) -> Size {
        if limit <= FEW {
            Size::Few
        } else if limit.saturating_mul(DENSE_RATIO) < n {
            Size::Sparse
        } else {
            Size::Dense
        }
    }
}

/// A set of node positions `0..n`, sized for how many will be inserted.
pub(crate) enum Seen {
    Few(Vec<u32>),
    Sparse(BTreeSet<u32>),
    Dense(Vec<bool>),
}

impl Seen {
    /// An empty set for up to `limit` of `n` positions.
    pub(crate) fn new(n: usize, limit: usize) -> Seen {
        match Size::of(n, limit) {
            Size::Few => Seen::Few(Vec::with_capacity(limit)),
            Size::Sparse => Seen::Sparse(BTreeSet::new()),
            Size::Dense => Seen::Dense(vec![false; n]),
        }
    }

    /// Inserts `i`; true if it was not there yet.
    pub(crate) fn insert(&mut self, i: u32) -> bool {
        match self {
            Seen::Few(list) => {
                !list.contains(&i) && {
                    list.push(i);
                    true
                }
            }
            Seen::Sparse(set) => set.insert(i),
            Seen::Dense(flags) => !core::mem::replace(&mut flags[i as usize], true),
        }
    }
}

/// The swapped slots of a lazy Fisher-Yates shuffle: slot `i` holds `i` unless written.
enum Slots {
    /// (slot, value) writes, latest last.
    Few(Vec<(usize, usize)>),
    Sparse(BTreeMap<usize, usize>),
    Dense(Vec<u32>),
}

impl Slots {
    fn new(n: usize, limit: usize) -> Slots {
        match Size::of(n, limit) {
            Size::Few => Slots::Few(Vec::with_capacity(2 * limit)),
            Size::Sparse => Slots::Sparse(BTreeMap::new()),
            Size::Dense => Slots::Dense((0..n as u32).collect()),
        }
    }

    fn get(&self, i: usize) -> usize {
        match self {
            Slots::Few(moved) => moved
                .iter()
                .rev()
                .find(|(slot, _)| *slot == i)
                .map_or(i, |(_, v)| *v),
            Slots::Sparse(moved) => moved.get(&i).copied().unwrap_or(i),
            Slots::Dense(slots) => slots[i] as usize,
        }
    }

    fn set(&mut self, i: usize, value: usize) {
        match self {
            Slots::Few(moved) => moved.push((i, value)),
            Slots::Sparse(moved) => {
                moved.insert(i, value);
            }
            Slots::Dense(slots) => slots[i] = value as u32,
        }
    }
}

/// Pushes a uniformly random ordering prefix of `0..n` onto `out`: `first` (already drawn by
/// the caller as `bounded(r, n)`), then `limit - 1` more from `next`.
pub(crate) fn shuffle_prefix(
    n: usize,
    limit: usize,
    first: usize,
    mut next: impl FnMut() -> u64,
    out: &mut Vec<u32>,
) {
    let limit = limit.min(n);
    let mut slots = Slots::new(n, limit);
    for i in 0..limit {
        let j = if i == 0 {
            first
        } else {
            i + bounded(next(), n - i)
        };
        let (vi, vj) = (slots.get(i), slots.get(j));
        slots.set(j, vi);
        slots.set(i, vj);
        out.push(vj as u32);
    }
}

/// Weights with a Fenwick tree of their sums (Fenwick 1994), built once per table so that
/// weighted sampling without replacement never scans all nodes.
pub(crate) struct WeightTree {
    weights: Vec<u32>,
    /// 1-based: `tree[j]` sums the weights of positions `j - lowbit(j) .. j` (0-based).
    tree: Vec<u64>,
    total: u64,
    /// Number of positive weights.
    positive: usize,
}

impl WeightTree {
    pub(crate) fn new(weights: Vec<u32>) -> WeightTree {
        let n = weights.len();
        let mut tree = vec![0u64; n + 1];
        for j in 1..=n {
            tree[j] += u64::from(weights[j - 1]);
            let parent = j + (j & j.wrapping_neg());
            if parent <= n {
                tree[parent] += tree[j];
            }
        }
        WeightTree {
            total: weights.iter().map(|w| u64::from(*w)).sum(),
            positive: weights.iter().filter(|w| **w > 0).count(),
            weights,
            tree,
        }
    }
}

/// What has been subtracted from a [`WeightTree`] for the positions already chosen.
enum Taken<'t> {
    Sparse(&'t [u64], BTreeMap<usize, u64>),
    Dense(Vec<u64>),
}

impl Taken<'_> {
    fn new(tree: &WeightTree, limit: usize) -> Taken<'_> {
        match Size::of(tree.weights.len(), limit) {
            Size::Dense => Taken::Dense(tree.tree.clone()),
            _ => Taken::Sparse(&tree.tree, BTreeMap::new()),
        }
    }

    /// The tree entry `j`, less what was taken.
    fn entry(&self, j: usize) -> u64 {
        match self {
            Taken::Sparse(tree, minus) => tree[j] - minus.get(&j).copied().unwrap_or(0),
            Taken::Dense(tree) => tree[j],
        }
    }

    /// Subtracts weight `w` at 0-based position `i`.
    fn take(&mut self, i: usize, w: u64) {
        let n = match self {
            Taken::Sparse(tree, _) => tree.len() - 1,
            Taken::Dense(tree) => tree.len() - 1,
        };
        let mut j = i + 1;
        while j <= n {
            match self {
                Taken::Sparse(_, minus) => *minus.entry(j).or_insert(0) += w,
                Taken::Dense(tree) => tree[j] -= w,
            }
            j += j & j.wrapping_neg();
        }
    }

    /// The first position whose running sum of remaining weights exceeds `y` (`y` must be
    /// below the remaining total): the answer of a linear scan, by descent in O(log n).
    fn find(&self, n: usize, mut y: u64) -> usize {
        let mut position = 0;
        let mut step = if n == 0 { 0 } else { 1 << n.ilog2() };
        while step > 0 {
            let j = position + step;
            if j <= n {
                let sum = self.entry(j);
                if sum <= y {
                    position = j;
                    y -= sum;
                }
            }
            step >>= 1;
        }
        position
    }
}

/// The positions chosen so far in a weighted sample, and the weight they leave.
struct Chosen<'t> {
    tree: &'t WeightTree,
    seen: Seen,
    sums: Taken<'t>,
    /// Chosen positions not yet subtracted from `sums`: most samples never need the tree
    /// (rejection settles every slot), so its O(log n) updates wait for the first descent.
    unsummed: Vec<usize>,
    remaining: u64,
}

impl Chosen<'_> {
    /// Takes position `i`; false if it was already chosen.
    fn take(&mut self, i: usize) -> bool {
        let fresh = self.seen.insert(i as u32);
        if fresh {
            self.remaining -= u64::from(self.tree.weights[i]);
            self.unsummed.push(i);
        }
        fresh
    }

    /// The first position whose running sum of remaining weights exceeds `y`.
    fn find(&mut self, y: u64) -> usize {
        for i in self.unsummed.drain(..) {
            self.sums.take(i, u64::from(self.tree.weights[i]));
        }
        self.sums.find(self.tree.weights.len(), y)
    }
}

/// Extends `out` (which holds the positions already chosen, at least one) with a weighted
/// sample without replacement from `tree`, until `limit` or every position with weight > 0 is
/// taken. `draw` draws one position from the full weighted distribution; `next` gives raw
/// random bits for the slots that rejection does not settle.
pub(crate) fn weighted_prefix(
    tree: &WeightTree,
    limit: usize,
    mut draw: impl FnMut() -> usize,
    mut next: impl FnMut() -> u64,
    out: &mut Vec<u32>,
) {
    let n = tree.weights.len();
    let limit = limit.min(tree.positive);
    let mut chosen = Chosen {
        tree,
        seen: Seen::new(n, limit),
        sums: Taken::new(tree, limit),
        unsummed: Vec::new(),
        remaining: tree.total,
    };
    for i in out.iter() {
        chosen.take(*i as usize);
    }
    'slots: while out.len() < limit {
        // Rejection pays while at least half the weight is left (≤ 2 draws expected); past
        // that every slot goes straight to the descent. Both are exact conditional draws.
        let rejections = if chosen.remaining >= tree.total - chosen.remaining {
            MAX_REJECTIONS
        } else {
            0
        };
        for _ in 0..rejections {
            let i = draw();
            if chosen.take(i) {
                out.push(i as u32);
                continue 'slots;
            }
        }
        // y uniform in 0..(weight not yet taken), mapped as a scan in index order would.
        let y = ((u128::from(next()) * u128::from(chosen.remaining)) >> 64) as u64;
        let i = chosen.find(y);
        chosen.take(i);
        out.push(i as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;

    fn shuffled(n: usize, limit: usize, seed: u64) -> Vec<u32> {
        let mut g = SplitMix64::new(seed);
        let first = bounded(g.next(), n);
        let mut out = Vec::new();
        shuffle_prefix(n, limit, first, || g.next(), &mut out);
        out
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (tens of seconds interpreted).
    fn sparse_and_dense_shuffles_agree() {
        // The sparse path (limit <= 32) and the array path must give the same permutation.
        for seed in 0..50 {
            let dense = shuffled(100, 100, seed);
            let sparse = shuffled(100, 20, seed);
            assert_eq!(&dense[..20], &sparse[..]);
            let mut sorted = dense.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..100).collect::<Vec<u32>>());
        }
    }

    #[test]
    fn weighted_prefix_skips_zero_weights_and_is_distinct() {
        let weights = [3, 0, 1, 5, 0, 2];
        let mut g = SplitMix64::new(9);
        let mut out = Vec::new();
        // A draw that always lands on the taken node forces the linear-scan path.
        let tree = WeightTree::new(weights.to_vec());
        out.push(3);
        weighted_prefix(&tree, 10, || 3, || g.next(), &mut out);
        let mut sorted = out.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 2, 3, 5]);
        assert_eq!(out[0], 3);
    }

    /// The straightforward O(k·n) weighted sample the tree replaces: rejection, then a linear
    /// scan over the weights not yet taken.
    fn scan_prefix(weights: &[u32], limit: usize, draws: &mut SplitMix64, out: &mut Vec<u32>) {
        let positive = weights.iter().filter(|w| **w > 0).count();
        let mut taken = vec![false; weights.len()];
        for i in out.iter() {
            taken[*i as usize] = true;
        }
        while out.len() < limit.min(positive) {
            // Same draws as `weighted_prefix` with a `draw` that only ever hits taken nodes.
            let remaining: u64 = (0..weights.len())
                .filter(|i| !taken[*i])
                .map(|i| u64::from(weights[i]))
                .sum();
            let mut y = ((u128::from(draws.next()) * u128::from(remaining)) >> 64) as u64;
            let i = (0..weights.len())
                .filter(|i| !taken[*i])
                .find(|i| {
                    let w = u64::from(weights[*i]);
                    y.checked_sub(w).map(|rest| y = rest).is_none()
                })
                .unwrap();
            taken[i] = true;
            out.push(i as u32);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (tens of seconds interpreted).
    fn the_tree_descent_equals_a_linear_scan_in_every_bookkeeping_size() {
        let n = if cfg!(miri) { 300 } else { 5000 };
        let mut g = SplitMix64::new(11);
        // Zero weights sprinkled in, and one heavy node.
        let mut weights: Vec<u32> = (0..n).map(|_| (g.next() % 7) as u32).collect();
        weights[17] = 1_000_000;
        let tree = WeightTree::new(weights.clone());
        // Few, sparse (64·limit < n) and dense bookkeeping.
        for limit in [10, n / 100, n] {
            let (mut a, mut b) = (SplitMix64::new(limit as u64), SplitMix64::new(limit as u64));
            let mut fast = alloc::vec![17];
            // Every draw lands on node 17, taken first: each slot goes to the descent.
            weighted_prefix(&tree, limit, || 17, || a.next(), &mut fast);
            let mut slow = alloc::vec![17];
            scan_prefix(&weights, limit, &mut b, &mut slow);
            assert_eq!(fast, slow, "limit {limit}");
        }
    }

    #[test]
    fn shuffle_bookkeeping_sizes_agree() {
        let n = if cfg!(miri) { 300 } else { 10_000 };
        for seed in 0..5 {
            let dense = shuffled(n, n, seed);
            let sparse = shuffled(n, n / 100, seed);
            let few = shuffled(n, 20, seed);
            assert_eq!(&dense[..n / 100], &sparse[..]);
            assert_eq!(&dense[..20], &few[..]);
        }
    }
}
