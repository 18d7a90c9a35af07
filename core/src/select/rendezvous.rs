//! `rendezvous`: weighted rendezvous (highest random weight) hashing as Envoy's
//! `rendezvous_hash` load-balancing extension computes it.
//!
//! Source: Envoy `source/extensions/load_balancing_policies/rendezvous_hash/
//! rendezvous_hash_lb.cc` (`RendezvousHashTable`, `computeScore`, `xorshiftMult64`,
//! `normalizeHash`, `fastLog2`) and `common/thread_aware_lb_impl.cc` (`normalizeHostWeights`);
//! the weighted score is Resch's (SNIA SDC 2015, "New Consistent Hashings"): `-w / ln(x)`.
//!
//! - **Node ids** are the strings Envoy hashes: the address as `asString()` prints it, or the
//!   hostname under `use_hostname_for_hashing`. Each host keeps `xxHash64(id, seed 0)`.
//! - **Score** of host `i` for a 64-bit key hash `h`: `x = xorshift*(h ^ host_hash)` (shifts
//!   12, 25, 27, multiplier 2685821657736338717), `u = (x & (2^53-1)) · 2^-53`, and
//!   `score = -w_i / (fastLog2(u) · ln 2)` with Envoy's rational approximation of `log2` and
//!   `w_i = weight_i / Σweight` (doubles). The host with the highest score wins; on equal
//!   scores Envoy keeps the first in its host order, liblb the smallest id (hosts are scored
//!   in id order with the same strict `>`), so the answer depends only on the set.
//! - **Key.** `xxHash64(key, seed 0)`; [`Rendezvous::pick_hash`] takes Envoy's 64-bit request
//!   hash directly.
//! - **Weights**: Envoy's `load_balancing_weight`; weight 0 drains. Removing a host moves only
//!   its keys; adding one moves keys only to it (the scores of the others do not change).
//! - **`attempts`**: Envoy's retry walk — attempt `a > 0` scores `h XOR (2^64 - a)`
//!   (`hash ^= ~0ULL - attempt + 1`), skipping hosts already listed; after `4·limit + 16`
//!   attempts the rest follow in descending score for `h` (where each key would go if the
//!   hosts before it were removed).
//!
//! Cost: O(n) per pick and 16 bytes per host; nothing to rebuild but the host list. The
//! pick gives exactly Envoy's answer without Envoy's two divisions per host: with equal
//! weights a host whose 53-bit hash is below a threshold derived from the best score so far
//! certainly loses (one integer comparison), and only the ~ln n hosts that might win get the
//! exact score; with unequal weights a division-free pre-test does the same job. Sublinear
//! picks would need a precomputed structure over the scores (e.g. a skeleton tree of
//! virtual groups, Wang & Ravishankar 2009), which Envoy's exact scores do not allow.

use super::HashPlacement;
use crate::Options;
use crate::node::Node;
use alloc::vec;
use alloc::vec::Vec;
use xxhash_rust::xxh64::xxh64;

/// Lower 53 bits: what a double's mantissa holds.
const MASK_53: u64 = (1 << 53) - 1;
/// `2^-53`.
const SCALE_53: f64 = 1.0 / (1u64 << 53) as f64;
/// Mantissa bits of a double.
const MANTISSA_MASK: u64 = (1 << 52) - 1;
/// Exponent bits of a double.
const EXPONENT_MASK: u64 = 0x7FF << 52;
/// Envoy's `LN_2` literal, kept as written; it is the double nearest ln 2 (tested).
#[allow(clippy::approx_constant)]
const LN_2: f64 = 0.693_147_180_559_945_3;
/// Envoy's xorshift* multiplier.
const XORSHIFT_MULT: u64 = 2_685_821_657_736_338_717;

pub(crate) struct Rendezvous {
    /// `xxHash64(id)` per host, in id order.
    hashes: Vec<u64>,
    /// Normalised weights, in id order.
    weights: Vec<f64>,
    /// Node indices, in id order.
    nodes: Vec<u32>,
    /// Whether every host has the same weight (enables the integer pre-test of `best`).
    equal_weights: bool,
    /// Length of the full node list, for the `attempts` seen-set.
    node_count: usize,
}

/// Envoy's `xorshiftMult64`.
#[inline]
fn xorshift_mult64(mut x: u64) -> u64 {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x.wrapping_mul(XORSHIFT_MULT)
}

/// Envoy's `normalizeHash`: [0, 1) from the low 53 bits.
#[inline]
fn normalize_hash(hash: u64) -> f64 {
    (hash & MASK_53) as f64 * SCALE_53
}

/// Envoy's `fastLog2`: exponent plus a rational approximation of `log2(1 + t)`,
/// `t` in [-0.25, 0.5).
#[inline]
fn fast_log2(x: f64) -> f64 {
    let bits = x.to_bits();
    let exponent = (bits & EXPONENT_MASK) >> 52;
    let mantissa = bits & MANTISSA_MASK;
    // Shift the mantissa into [0.75, 1.5): one exponent lower when its top bit is set.
    let new_exponent = 1023 ^ (mantissa >> 51);
    let new_double = f64::from_bits((new_exponent << 52) | mantissa);
    let base_exponent = exponent as f64 - new_exponent as f64;
    let t = new_double - 1.0;
    let approx = t * (0.338953 * t + 2.198599) / (t + 1.523692);
    base_exponent + approx
}

/// Envoy's `fastLog`.
#[inline]
fn fast_log(x: f64) -> f64 {
    fast_log2(x) * LN_2
}

/// Envoy's `computeScore`: `-weight / ln(normalize(xorshift*(key ^ host_hash)))`.
#[inline]
fn score(key: u64, host_hash: u64, weight: f64) -> f64 {
    -weight / fast_log(normalize_hash(xorshift_mult64(key ^ host_hash)))
}

/// A bound on `fastLog2`'s relative error against `log2` over (0, 1) (measured below 0.4%
/// by `fast_log2_relative_error_is_bounded`; Envoy's own test allows 1%).
const FAST_LOG2_RELATIVE_ERROR: f64 = 0.01;

/// The 53-bit hashes `m` (`u = m · 2^-53`) below which a host of normalised weight `weight`
/// certainly scores below `best`.
///
/// Envoy's score is `weight / (ln 2 · -fastLog2(u))`, and `-fastLog2(u) >= (1 - ρ) · -log2(u)`
/// with ρ = [`FAST_LOG2_RELATIVE_ERROR`]; so the score is below `best` whenever
/// `-log2(u) > λ = weight / (ln 2 · best · (1 - ρ))`, i.e. `m < 2^(53 - λ)`. `λ` gets a
/// relative margin of 1e-9 and the power of two is rounded down with another, far above the
/// rounding of any step here or in Envoy's score. 0 (test nothing) when `λ >= 53`.
fn threshold(weight: f64, best: f64) -> u64 {
    let lambda = weight / (LN_2 * best * (1.0 - FAST_LOG2_RELATIVE_ERROR)) * (1.0 + 1e-9);
    let exponent = 53.0 - lambda;
    if exponent.is_nan() || exponent <= 0.0 {
        return 0;
    }
    // 2^exponent = 2^k · e^(f · ln 2), f in [0, 1): 20 terms of the exponential series are
    // exact to ~1e-16 relative for f · ln 2 < 0.7.
    let k = exponent as u32;
    let x = (exponent - f64::from(k)) * LN_2;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for i in 1..20 {
        term *= x / f64::from(i);
        sum += term;
    }
    ((1u64 << k) as f64 * sum * (1.0 - 1e-9)) as u64
}

/// Hosts tested per branch-free pass in [`Rendezvous::best`].
const CHUNK: usize = 16;

/// A division-free test that a host's score is below the best so far.
///
/// Envoy's score is `w / -(ln 2 · (e + n/d))`, with `e` the integer part of `fastLog2`, `n/d`
/// its rational part (`d > 1.27`) and `e + n/d < 0`: so `score < best` exactly when
/// `w · d < best · ln 2 · -(e·d + n)`. Evaluated in doubles, both sides carry a relative
/// error of a few units in the last place (the subtraction `e·d + n` loses at most ~2 bits:
/// `|e + n/d| >= 0.41` whenever `e != 0`), as does Envoy's rounded score itself; a margin of
/// 1e-9 makes a "below" answer certain, so skipping such a host never changes the winner,
/// and every other host gets Envoy's exact score and comparison.
struct Bound {
    /// `best · ln 2 · (1 - 1e-9)`.
    scaled: f64,
}

impl Bound {
    fn new(best: f64) -> Bound {
        Bound {
            scaled: best * LN_2 * (1.0 - 1e-9),
        }
    }

    /// Whether `score(u, weight) < best` for certain (`u` = the normalised hash).
    #[inline]
    fn certainly_below(&self, u: f64, weight: f64) -> bool {
        let bits = u.to_bits();
        let exponent = (bits & EXPONENT_MASK) >> 52;
        let mantissa = bits & MANTISSA_MASK;
        let new_exponent = 1023 ^ (mantissa >> 51);
        let t = f64::from_bits((new_exponent << 52) | mantissa) - 1.0;
        let e = exponent as f64 - new_exponent as f64;
        let (n, d) = (t * (0.338953 * t + 2.198599), t + 1.523692);
        weight * d < self.scaled * -(e * d + n)
    }
}

impl Rendezvous {
    pub(crate) fn new(nodes: &[Node], active: &[u32]) -> Rendezvous {
        let mut order = active.to_vec();
        order.sort_unstable_by(|a, b| nodes[*a as usize].id.cmp(&nodes[*b as usize].id));
        let sum: u64 = order
            .iter()
            .map(|i| u64::from(nodes[*i as usize].weight))
            .sum();
        Rendezvous {
            hashes: order
                .iter()
                .map(|i| xxh64(nodes[*i as usize].id.as_bytes(), 0))
                .collect(),
            // Envoy: `host->weight() * normalized_locality_weight / sum` with locality 1.0.
            weights: order
                .iter()
                .map(|i| f64::from(nodes[*i as usize].weight) * 1.0 / sum as f64)
                .collect(),
            equal_weights: order
                .iter()
                .all(|i| nodes[*i as usize].weight == nodes[order[0] as usize].weight),
            nodes: order,
            node_count: nodes.len(),
        }
    }

    /// Position (in id order) of the highest score for `h`; the first wins ties. Exactly
    /// Envoy's loop (`score > max_score` replaces), with the divisions skipped for hosts
    /// that certainly lose: see [`Bound`].
    #[inline]
    fn best(&self, h: u64) -> usize {
        if self.equal_weights {
            self.best_equal(h)
        } else {
            self.best_weighted(h)
        }
    }

    /// [`Rendezvous::best`] when all weights are equal: a host whose 53-bit hash is below
    /// [`threshold`] certainly scores below the best so far (one integer comparison), the
    /// others get Envoy's exact score, in host order.
    #[inline]
    fn best_equal(&self, h: u64) -> usize {
        let weight = self.weights[0];
        let mut best = 0;
        let mut best_score = score(h, self.hashes[0], weight);
        let mut below = threshold(weight, best_score);
        for (i, host) in self.hashes.iter().enumerate().skip(1) {
            if xorshift_mult64(h ^ *host) & MASK_53 < below {
                continue;
            }
            let s = score(h, *host, weight);
            if s > best_score {
                best_score = s;
                best = i;
                below = threshold(weight, best_score);
            }
        }
        best
    }

    /// [`Rendezvous::best`] with unequal weights: the division-free [`Bound`] pre-test, in
    /// branch-free chunks, then Envoy's exact score for the hosts that pass, in host order.
    #[inline]
    fn best_weighted(&self, h: u64) -> usize {
        let mut best = 0;
        let mut best_score = score(h, self.hashes[0], self.weights[0]);
        let mut bound = Bound::new(best_score);
        // A bound from an earlier best is looser, never wrong, as the best only grows.
        let mut start = 1;
        while start < self.hashes.len() {
            let end = (start + CHUNK).min(self.hashes.len());
            let mut maybe = 0u32;
            for (j, (host, weight)) in self.hashes[start..end]
                .iter()
                .zip(&self.weights[start..end])
                .enumerate()
            {
                let u = normalize_hash(xorshift_mult64(h ^ *host));
                maybe |= u32::from(!bound.certainly_below(u, *weight)) << j;
            }
            while maybe != 0 {
                let i = start + maybe.trailing_zeros() as usize;
                maybe &= maybe - 1;
                let s = score(h, self.hashes[i], self.weights[i]);
                if s > best_score {
                    best_score = s;
                    best = i;
                    bound = Bound::new(best_score);
                }
            }
            start = end;
        }
        best
    }

    /// Envoy's loop as written, for tests.
    #[cfg(test)]
    fn best_reference(&self, h: u64) -> usize {
        let mut best = 0;
        let mut best_score = score(h, self.hashes[0], self.weights[0]);
        for i in 1..self.hashes.len() {
            let s = score(h, self.hashes[i], self.weights[i]);
            if s > best_score {
                best_score = s;
                best = i;
            }
        }
        best
    }

    /// The node for a 64-bit request hash (Envoy's `chooseHost(hash, 0)`).
    #[inline]
    pub(crate) fn pick_hash(&self, h: u64) -> u32 {
        self.nodes[self.best(h)]
    }

    /// `attempts` for a 64-bit request hash: Envoy's retry walk, then descending score.
    pub(crate) fn attempts_hash(&self, h: u64, limit: usize, out: &mut Vec<u32>) {
        let limit = limit.min(self.nodes.len());
        let mut seen = vec![false; self.node_count];
        for attempt in 0..4 * limit as u64 + 16 {
            if out.len() >= limit {
                return;
            }
            // Envoy: `hash ^= ~0ULL - attempt + 1` for attempt > 0.
            let mutated = if attempt == 0 {
                h
            } else {
                h ^ attempt.wrapping_neg()
            };
            let node = self.nodes[self.best(mutated)];
            if !core::mem::replace(&mut seen[node as usize], true) {
                out.push(node);
            }
        }
        if out.len() < limit {
            let mut ranked: Vec<(f64, usize)> = (0..self.nodes.len())
                .map(|i| (score(h, self.hashes[i], self.weights[i]), i))
                .collect();
            // Highest score first; equal scores in id order, as `best` breaks ties.
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for (_, i) in ranked {
                if out.len() >= limit {
                    break;
                }
                let node = self.nodes[i];
                if !core::mem::replace(&mut seen[node as usize], true) {
                    out.push(node);
                }
            }
        }
    }
}

/// The key's 64-bit hash as Envoy's hash policies compute it.
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxh64(key, 0)
}

impl HashPlacement for Rendezvous {
    fn build(nodes: &[Node], active: Vec<u32>, _options: &Options) -> Rendezvous {
        Rendezvous::new(nodes, &active)
    }

    #[inline]
    fn key_hash(&self, key: &[u8]) -> u64 {
        key_hash(key)
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
    use alloc::format;

    fn hosts(ports: core::ops::Range<u32>, weight: impl Fn(u32) -> u32) -> Vec<Node> {
        ports
            .map(|p| Node::new(format!("127.0.0.1:{p}"), weight(p)))
            .collect()
    }

    fn all(nodes: &[Node]) -> Vec<u32> {
        (0..nodes.len() as u32).collect()
    }

    #[test]
    fn envoys_ln_2_is_the_nearest_double() {
        assert_eq!(LN_2.to_bits(), core::f64::consts::LN_2.to_bits());
    }

    #[test]
    #[allow(clippy::approx_constant)] // Envoy's test values include 2.718.
    fn envoy_fast_log_accuracy() {
        // rendezvous_hash_lb_test.cc, FastLogBasicValues / FastLog2BasicValues: relative error
        // below 1% at these points, absolute below 0.01 at 1.0.
        let values = [
            0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.5, 2.0, 2.718, 3.0, 4.0, 5.0,
            8.0, 10.0, 16.0, 100.0, 1000.0, 1e6, 1e10, 1e-6, 1e-10,
        ];
        for x in values {
            let (ln, log2) = (f64::ln(x), f64::log2(x));
            assert!(((fast_log(x) - ln) / ln).abs() < 0.01, "fastLog({x})");
            assert!(((fast_log2(x) - log2) / log2).abs() < 0.01, "fastLog2({x})");
        }
        assert!(fast_log(1.0).abs() < 0.01 && fast_log2(1.0).abs() < 0.01);
        // FastLog2PowersOfTwo: within 0.01 of the exponent for 2^-10 … 2^10.
        for e in -10..=10 {
            assert!(
                (fast_log2(f64::powi(2.0, e)) - f64::from(e)).abs() < 0.01,
                "2^{e}"
            );
        }
    }

    #[test]
    fn envoy_normalize_and_xorshift() {
        // NormalizeHashRange and XorshiftMult64NonZero.
        for h in [
            0,
            1,
            1000,
            u64::MAX / 2,
            u64::MAX - 1,
            u64::MAX,
            0x1234_5678_9ABC_DEF0,
        ] {
            let u = normalize_hash(h);
            assert!((0.0..1.0).contains(&u), "{h}");
        }
        for x in [1, 12345, u64::MAX, 0xDEAD_BEEF_CAFE_BABE] {
            let y = xorshift_mult64(x);
            assert!(y != 0 && y != x, "{x}");
        }
        // ComputeScoreValidOutputs: finite and positive, also for hash 0 (ln(0) -> -709.09).
        for key in [0, 1, 12345, u64::MAX] {
            for host in [1, 12345, 0xDEAD_BEEF] {
                for w in [0.5, 1.0, 2.0, 10.0] {
                    let s = score(key, host, w);
                    assert!(s.is_finite() && s > 0.0, "{key} {host} {w}");
                }
            }
        }
        assert!(score(0, 0, 1.0) > 0.0);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn envoy_host_weighted_distribution() {
        // HostWeightedDistribution: weights 1, 2, 3, hashes i · (u64::MAX / 6000) for
        // i < 6000; Envoy's bounds 500..1500, 1500..2500, 2500..3500.
        let nodes = hosts(90..93, |p| p - 89);
        let r = Rendezvous::new(&nodes, &all(&nodes));
        let mut counts = [0u32; 3];
        for i in 0..6000u64 {
            counts[r.pick_hash(i * (u64::MAX / 6000)) as usize] += 1;
        }
        assert!((500..1500).contains(&counts[0]), "{counts:?}");
        assert!((1500..2500).contains(&counts[1]), "{counts:?}");
        assert!((2500..3500).contains(&counts[2]), "{counts:?}");
    }

    #[test]
    fn envoy_consistency_on_host_change() {
        // ConsistencyOnHostChange: keys i · 10^6 for i < 100 over :90..:92, then :93 joins;
        // fewer than 50 change, and (exact for rendezvous) every change goes to :93.
        let nodes = hosts(90..94, |_| 1);
        let before = Rendezvous::new(&nodes, &[0, 1, 2]);
        let after = Rendezvous::new(&nodes, &all(&nodes));
        let mut changed = 0;
        for i in 0..100u64 {
            let (a, b) = (
                before.pick_hash(i * 1_000_000),
                after.pick_hash(i * 1_000_000),
            );
            if a != b {
                assert_eq!(b, 3);
                changed += 1;
            }
        }
        assert!(changed < 50, "{changed}");
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn weights_are_proportional() {
        // Chi-square over weights 1, 2, 3, 4 with 1,000,000 hashes: 3 degrees of freedom,
        // 16.27 is the 0.1% critical value.
        let nodes = hosts(0..4, |p| p + 1);
        let r = Rendezvous::new(&nodes, &all(&nodes));
        let mut g = crate::SplitMix64::new(8);
        let draws = if cfg!(miri) { 1_000 } else { 1_000_000 };
        let mut counts = [0u32; 4];
        for _ in 0..draws {
            counts[r.pick_hash(g.next()) as usize] += 1;
        }
        let chi2: f64 = counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let expected = f64::from(draws) * (i + 1) as f64 / 10.0;
                (f64::from(*c) - expected).powi(2) / expected
            })
            .sum();
        assert!(chi2 < 16.27, "chi-square {chi2}: {counts:?}");
    }

    #[test]
    fn fast_log2_relative_error_is_bounded() {
        // Dense over each binade of (0, 1) that 53-bit hashes reach, with both ends of every
        // segment of the approximation (mantissa top bit clear / set).
        let mut worst = 0.0f64;
        let mut g = crate::SplitMix64::new(21);
        let samples = if cfg!(miri) { 10 } else { 4000 };
        for binade in 0..53u32 {
            let low = 1u64 << binade;
            let edges = [
                low,
                low + 1,
                3 * (low / 2).max(1),
                (2 * low - 1).min(MASK_53),
            ];
            let random = (0..samples).map(|_| low + g.next() % low);
            for m in edges.into_iter().chain(random).filter(|m| *m <= MASK_53) {
                let u = normalize_hash(m);
                let relative = ((fast_log2(u) - u.log2()) / u.log2()).abs();
                worst = worst.max(relative);
            }
        }
        assert!(
            worst < FAST_LOG2_RELATIVE_ERROR / 2.0,
            "worst relative error {worst}"
        );
    }

    #[test]
    fn threshold_is_a_power_of_two_rounded_down() {
        // 2^(53 - λ), λ as `threshold` documents it, against std's powf.
        for (weight, best) in [
            (1.0, 1.0),
            (0.001, 1.0),
            (0.5, 0.01),
            (1.0, 100.0),
            (1e-6, 3.0),
        ] {
            let lambda = weight / (LN_2 * best * (1.0 - FAST_LOG2_RELATIVE_ERROR)) * (1.0 + 1e-9);
            let exact = f64::powf(2.0, 53.0 - lambda);
            let t = threshold(weight, best) as f64;
            let floor = (exact * (1.0 - 1e-8)) as u64 as f64;
            assert!(t <= exact && t >= floor, "{weight} {best}: {t} vs {exact}");
        }
        assert_eq!(threshold(1.0, 1e-6), 0);
    }

    #[test]
    fn threshold_never_skips_a_host_that_ties_or_wins() {
        // A host skipped by the threshold for its own exact score would be a wrong skip.
        let mut g = crate::SplitMix64::new(22);
        for k in 0..if cfg!(miri) { 100 } else { 100_000 } {
            let m = g.next() & MASK_53;
            let weight = [1.0, 0.001, 0.25, 1e-7][k % 4];
            let s = -weight / fast_log(normalize_hash(m));
            assert!(m >= threshold(weight, s), "m {m}, weight {weight}");
        }
    }

    #[test]
    fn bound_never_calls_an_equal_score_below() {
        let mut g = crate::SplitMix64::new(13);
        let edges = [
            0,
            1,
            2,
            MASK_53,
            MASK_53 - 1,
            1 << 52,
            (1 << 52) - 1,
            3 << 51,
            (3 << 51) - 1,
        ];
        let hashes = edges
            .into_iter()
            .chain((0..if cfg!(miri) { 200 } else { 20_000 }).map(|_| g.next() & MASK_53));
        for (k, x) in hashes.enumerate() {
            let u = normalize_hash(x);
            let w = [1.0, 0.5, 1e-9, 0.3333333333333333][k % 4];
            let s = -w / fast_log(u);
            assert!(!Bound::new(s).certainly_below(u, w), "u {u}, w {w}");
            // And it does its job: a best a millionth higher is certainly above.
            assert!(
                Bound::new(s * (1.0 + 1e-6)).certainly_below(u, w),
                "u {u}, w {w}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn skipping_divisions_never_changes_the_winner() {
        let mut g = crate::SplitMix64::new(12);
        let draws = if cfg!(miri) { 20 } else { 20_000 };
        for (n, weights) in [
            (1000, &[1u32][..]),
            (3, &[5]),
            (64, &[2]),
            (7, &[1, 2, 3]),
            (50, &[1, 1000, 7, 65535]),
            (200, &[3]),
        ] {
            let nodes: Vec<Node> = (0..n)
                .map(|i| {
                    Node::new(
                        format!("10.0.{}.{}:80", i / 256, i % 256),
                        weights[i % weights.len()],
                    )
                })
                .collect();
            let r = Rendezvous::new(&nodes, &all(&nodes));
            for _ in 0..draws / n {
                let h = g.next();
                assert_eq!(r.best(h), r.best_reference(h), "hash {h}");
            }
        }
        // Equal scores: two hosts with the same hash and weight tie exactly; the first wins.
        let r = Rendezvous {
            hashes: alloc::vec![5, 9, 9, 1],
            weights: alloc::vec![0.25; 4],
            nodes: alloc::vec![0, 1, 2, 3],
            equal_weights: true,
            node_count: 4,
        };
        for h in 0..if cfg!(miri) { 50 } else { 5000 } {
            assert_eq!(r.best(h), r.best_reference(h), "hash {h}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn answers_ignore_insertion_order() {
        let nodes = hosts(90..96, |p| p % 3 + 1);
        let reversed: Vec<Node> = nodes.iter().rev().cloned().collect();
        let (a, b) = (
            Rendezvous::new(&nodes, &all(&nodes)),
            Rendezvous::new(&reversed, &all(&reversed)),
        );
        let mut g = crate::SplitMix64::new(3);
        for _ in 0..1000 {
            let h = g.next();
            assert_eq!(
                nodes[a.pick_hash(h) as usize].id,
                reversed[b.pick_hash(h) as usize].id
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn attempts_follow_envoys_retry_hash_and_reach_everyone() {
        let nodes = hosts(0..40, |_| 1);
        let r = Rendezvous::new(&nodes, &all(&nodes));
        let mut g = crate::SplitMix64::new(6);
        for _ in 0..if cfg!(miri) { 2 } else { 20 } {
            let h = g.next();
            let mut out = Vec::new();
            r.attempts_hash(h, 40, &mut out);
            assert_eq!(out[0], r.pick_hash(h));
            // The second distinct host comes from the first retry hash that changes the pick.
            let retry = (1..)
                .map(|a: u64| r.pick_hash(h ^ a.wrapping_neg()))
                .find(|n| *n != out[0])
                .unwrap();
            assert_eq!(out[1], retry);
            let mut sorted = out.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, all(&nodes));
        }
    }
}
