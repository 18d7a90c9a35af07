//! Sampling without replacement, shared by every algorithm's `attempts`.
//!
//! - Uniform: a lazy Fisher-Yates shuffle (Durstenfeld 1964; seed 002's "classic fisher-yates")
//!   that materialises only the swapped slots, so a prefix of `k` costs O(k) draws. Seed 002's
//!   pairwise-swap shuffle is biased (first slot 22% vs 14% for 7 nodes); this one is exact.
//! - Weighted: successive draws from the weights of the nodes not yet chosen. A draw from the
//!   full distribution that lands on an already chosen node is rejected and redrawn (rejection
//!   keeps the conditional distribution exact); after a few rejections a linear scan over the
//!   remaining weights finishes the slot, so the worst case is O(k·n), the usual case O(k).

use crate::rng::bounded;
use alloc::vec;
use alloc::vec::Vec;

/// Redraws before a weighted slot falls back to a linear scan.
const MAX_REJECTIONS: usize = 8;
/// Prefix length up to which the lazy shuffle keeps swaps in a small list instead of an array.
const SPARSE_LIMIT: usize = 32;

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
    if limit <= SPARSE_LIMIT {
        // Slot values that differ from identity, as (slot, value) pairs.
        let mut moved: Vec<(usize, usize)> = Vec::with_capacity(2 * limit);
        let get = |moved: &[(usize, usize)], i: usize| {
            moved
                .iter()
                .rev()
                .find(|(slot, _)| *slot == i)
                .map_or(i, |(_, v)| *v)
        };
        for i in 0..limit {
            let j = if i == 0 {
                first
            } else {
                i + bounded(next(), n - i)
            };
            let (vi, vj) = (get(&moved, i), get(&moved, j));
            moved.push((j, vi));
            moved.push((i, vj));
            out.push(vj as u32);
        }
    } else {
        let mut slots: Vec<u32> = (0..n as u32).collect();
        for i in 0..limit {
            let j = if i == 0 {
                first
            } else {
                i + bounded(next(), n - i)
            };
            slots.swap(i, j);
            out.push(slots[i]);
        }
    }
}

/// Pushes a weighted sample without replacement of indices into `weights` onto `out`: `first`
/// (already drawn), then more until `limit` or every index with weight > 0 is taken. `draw`
/// draws one index from the full weighted distribution; `next` gives raw random bits.
pub(crate) fn weighted_prefix(
    weights: &[u32],
    limit: usize,
    first: usize,
    mut draw: impl FnMut() -> usize,
    mut next: impl FnMut() -> u64,
    out: &mut Vec<u32>,
) {
    let positive = weights.iter().filter(|w| **w > 0).count();
    let limit = limit.min(positive);
    let mut taken = vec![false; weights.len()];
    taken[first] = true;
    out.push(first as u32);
    'slots: while out.len() < limit {
        for _ in 0..MAX_REJECTIONS {
            let i = draw();
            if !taken[i] {
                taken[i] = true;
                out.push(i as u32);
                continue 'slots;
            }
        }
        // Linear scan over what is left: y uniform in 0..(weight not yet taken).
        let untaken = || (0..weights.len()).filter(|i| !taken[*i]);
        let remaining: u64 = untaken().map(|i| u64::from(weights[i])).sum();
        let mut y = ((u128::from(next()) * u128::from(remaining)) >> 64) as u64;
        let i = untaken()
            .find(|i| {
                let w = u64::from(weights[*i]);
                y.checked_sub(w).map(|rest| y = rest).is_none()
            })
            .expect("remaining weight is positive while slots are left");
        taken[i] = true;
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
        weighted_prefix(&weights, 10, 3, || 3, || g.next(), &mut out);
        let mut sorted = out.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 2, 3, 5]);
        assert_eq!(out[0], 3);
    }
}
