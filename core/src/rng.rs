//! Randomness: SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
//! generators", OOPSLA 2014), shared lock-free through one atomic counter.
//!
//! The k-th draw of a generator seeded with `s` is `mix(s + k·γ)` (γ = 0x9E3779B97F4A7C15,
//! k = 1, 2, ...), exactly `java.util.SplittableRandom`/`splitmix64.c`. Keeping `k` in an atomic
//! counter makes the generator lock-free, `no_std` and thread-local-free: concurrent callers take
//! distinct `k`s, and a single thread sees the reproducible sequence of its seed — the same in
//! every language, since every binding calls this code. Unseeded balancers take `s` from OS
//! entropy, so seed 002's bug (every process picking the same "random" node) cannot happen.

use crate::sync::{AtomicCounter, next_position};

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function (a strong 64-bit finaliser).
#[inline]
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A plain (single-owner) SplitMix64; used for key-seeded fallback orders and in tests.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first output is `mix(seed + γ)`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }
}

/// A SplitMix64 whose position is an atomic counter: `next` is lock-free and `&self`.
#[derive(Debug)]
pub(crate) struct AtomicRng {
    seed: u64,
    draws: AtomicCounter,
}

impl AtomicRng {
    pub(crate) fn new(seed: u64) -> AtomicRng {
        AtomicRng {
            seed,
            draws: AtomicCounter::new(0),
        }
    }

    /// The next 64 random bits; concurrent callers get distinct draws (see `next_position`).
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        let k = next_position(&self.draws);
        mix(self
            .seed
            .wrapping_add(k.wrapping_add(1).wrapping_mul(GAMMA)))
    }
}

/// Maps 64 random bits to `0..n` by a 128-bit multiply (Lemire 2019, without the rejection
/// step: the bias is below n / 2^64, far under any test's power to see).
#[inline]
pub fn bounded(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_reference() {
        // splitmix64.c (Vigna) seeded with 0: first outputs.
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(g.next(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn atomic_rng_equals_plain_sequence() {
        let a = AtomicRng::new(42);
        let mut p = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next(), p.next());
        }
    }

    #[test]
    fn bounded_stays_in_range() {
        for n in [1usize, 2, 7, 1000] {
            assert_eq!(bounded(0, n), 0);
            assert_eq!(bounded(u64::MAX, n), n - 1);
        }
    }
}
