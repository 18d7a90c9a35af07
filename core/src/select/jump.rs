//! `jump`: jump consistent hash (Lamping & Veach, "A Fast, Minimal Memory, Consistent Hash
//! Algorithm", 2014), over the active nodes in insertion order.
//!
//! Source: the paper's reference function `JumpConsistentHash` (figure 1), which go-jump
//! (`dgryski/go-jump`, `jump.go`) and Guava's `Hashing.consistentHash` also implement. A 64-bit
//! value `h` goes to bucket `b`, found by jumping forward with a linear congruential generator:
//! `h = h·2862933555777941757 + 1; j = (b+1) · (2^31 / ((h >> 33) + 1))` until `j >= n`. The
//! bucket is the node's position among the active nodes in insertion order: jump buckets are
//! numbered, so order is the one thing it cannot take from the set alone (growing the list at
//! its end moves only 1/(n+1) of the keys, all to the new node; removing a node other than the
//! last renumbers the ones after it).
//!
//! - **Key.** `xxh3(key)` by default (option `hash`, as `source_hash`); [`Jump::pick_hash`]
//!   takes a 64-bit value directly, so a Guava or go-jump caller passing the same `long`
//!   gets the same bucket.
//! - **Guava.** Guava evaluates `(b+1) / (((int)(h >>> 33) + 1) / 2^31)`: the `int` addition
//!   overflows when `h >>> 33 == 2^31 - 1` (one step in 2^31), so Guava stops where the paper
//!   and go-jump jump on; and it rounds once where the paper rounds twice, which can differ only
//!   for more than about 2^22 buckets, and then only for a key landing within 2^-21 of a bucket
//!   boundary. liblb computes the paper's (and go-jump's) expression exactly; for every other
//!   input, Guava agrees (checked live by `scripts/test-upstream.sh`).
//! - **Weights** are ignored (jump has none); weight 0 still drains (the node leaves the
//!   bucket list).
//! - **`attempts`**: the pick, then a Fisher-Yates permutation of the other nodes drawn from a
//!   SplitMix64 seeded by the hash — jump has no fallback of its own, and the next bucket would
//!   pile every failed node's keys on one neighbour.
//!
//! Cost: no table beyond the node list; a pick is one hash and about `ln n` LCG steps, each a
//! floating-point division.

use super::{HashPlacement, sample};
use crate::HashKind;
use crate::rng::SplitMix64;
use crate::{Node, Options};
use alloc::vec::Vec;

pub(crate) struct Jump {
    /// Active node indices in insertion order: bucket `b` is `order[b]`.
    order: Vec<u32>,
    hash: HashKind,
}

/// The paper's `JumpConsistentHash(key, buckets)`; `buckets >= 1`.
#[inline]
pub(crate) fn jump(mut key: u64, buckets: u32) -> u32 {
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // Float to integer `as` saturates, as the C++ cast does for the values reachable
        // here (the quotient is at most (b+1)·2^31 < 2^55).
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

impl Jump {
    pub(crate) fn new(order: Vec<u32>, hash: HashKind) -> Jump {
        Jump { order, hash }
    }

    /// The node for a 64-bit hash (Guava's `consistentHash(h, n)`, go-jump's `Hash(h, n)`).
    #[inline]
    pub(crate) fn pick_hash(&self, h: u64) -> u32 {
        self.order[jump(h, self.order.len() as u32) as usize]
    }

    /// `attempts` for a 64-bit hash.
    pub(crate) fn attempts_hash(&self, h: u64, limit: usize, out: &mut Vec<u32>) {
        let first = jump(h, self.order.len() as u32) as usize;
        let mut g = SplitMix64::new(h);
        sample::shuffle_prefix(self.order.len(), limit, first, || g.next(), out);
        for slot in out.iter_mut() {
            *slot = self.order[*slot as usize];
        }
    }
}

impl HashPlacement for Jump {
    fn build(_nodes: &[Node], active: Vec<u32>, options: &Options) -> Jump {
        Jump::new(active, options.hash.unwrap_or(HashKind::Xxh3))
    }

    #[inline]
    fn key_hash(&self, key: &[u8]) -> u64 {
        self.hash.hash(key)
    }

    #[inline]
    fn place(&self, hash: u64) -> u32 {
        self.pick_hash(hash)
    }

    fn place_attempts(&self, hash: u64, limit: usize, out: &mut Vec<u32>) {
        self.attempts_hash(hash, limit, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::{Ctx, Select};
    use crate::state::State;

    /// go-jump's `jump_test.go` `TestHash` table ("Generated from the reference C++ code"):
    /// key, then the bucket for 1, 2, 3, ... buckets.
    const GO_JUMP: [(u64, &[u32]); 4] = [
        (0, &[0; 20]),
        (
            1,
            &[0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 17, 17],
        ),
        (
            0xdeadbeef,
            &[0, 1, 2, 3, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 16, 16, 16],
        ),
        (
            0x0ddc0ffeebadf00d,
            &[0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 15, 15, 15, 15],
        ),
    ];

    #[test]
    fn matches_go_jumps_table() {
        for (key, buckets) in GO_JUMP {
            for (i, want) in buckets.iter().enumerate() {
                assert_eq!(
                    jump(key, i as u32 + 1),
                    *want,
                    "key {key:#x}, {} buckets",
                    i + 1
                );
            }
        }
    }

    /// The input whose first LCG step gives `state` (the multiplier is odd, so invertible).
    fn input_for_first_state(state: u64) -> u64 {
        let a: u64 = 2_862_933_555_777_941_757;
        // Newton's iteration for the inverse of an odd number modulo 2^64.
        let mut inv = a;
        for _ in 0..5 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(inv)));
        }
        assert_eq!(a.wrapping_mul(inv), 1);
        state.wrapping_sub(1).wrapping_mul(inv)
    }

    #[test]
    fn follows_the_paper_where_guavas_int_addition_overflows() {
        // First step with h >> 33 == 2^31 - 1: the paper computes j = 1 · 2^31 / 2^31 = 1 and
        // jumps on, where Guava's `(int)(h >>> 33) + 1` overflows to -2^31 and stops at 0.
        let input = input_for_first_state(u64::MAX);
        assert_eq!(jump(input, 1), 0);
        assert_eq!(jump(input, 2), 1);
    }

    #[test]
    fn growing_the_list_moves_keys_only_to_the_new_bucket() {
        let mut g = SplitMix64::new(5);
        for _ in 0..if cfg!(miri) { 200 } else { 20_000 } {
            let h = g.next();
            let n = (g.next() % 1000) as u32 + 1;
            let (before, after) = (jump(h, n), jump(h, n + 1));
            assert!(
                after == before || after == n,
                "h {h:#x}: {before} -> {after}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn buckets_are_uniform() {
        // Chi-square over 10 buckets with 100,000 draws: 9 degrees of freedom, 27.88 is the
        // 0.1% critical value.
        let mut g = SplitMix64::new(7);
        let draws = if cfg!(miri) { 1_000 } else { 100_000 };
        let mut counts = [0u32; 10];
        for _ in 0..draws {
            counts[jump(g.next(), 10) as usize] += 1;
        }
        let expected = f64::from(draws) / 10.0;
        let chi2: f64 = counts
            .iter()
            .map(|c| (f64::from(*c) - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 27.88, "chi-square {chi2}: {counts:?}");
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn attempts_start_with_the_pick_and_are_distinct() {
        let jump = Jump::new((0..7).collect(), HashKind::Xxh3);
        let state = State::new(0);
        let policy = crate::health::Policy::new(&crate::Options::default());
        let state = Ctx::bare(&state, &policy);
        for k in 0..200u32 {
            let key = k.to_le_bytes();
            let mut out = Vec::new();
            jump.attempts(&key, &state, 7, &mut out);
            assert_eq!(out[0], jump.pick(&key, &state));
            let mut sorted = out.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..7).collect::<Vec<u32>>());
        }
    }
}
