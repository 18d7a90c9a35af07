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
//! Cost: O(n) per pick (one xorshift*, two divisions per host) and 16 bytes per host; nothing
//! to rebuild but the host list. Sublinear picks would need a precomputed structure over the
//! scores (e.g. a skeleton tree of virtual groups, Wang & Ravishankar 2009), which Envoy's
//! exact scores do not allow.

use super::Select;
use crate::node::Node;
use crate::table::State;
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

impl Rendezvous {
    pub(crate) fn build(nodes: &[Node], active: &[u32]) -> Rendezvous {
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
            nodes: order,
            node_count: nodes.len(),
        }
    }

    /// Position (in id order) of the highest score for `h`; the first wins ties.
    #[inline]
    fn best(&self, h: u64) -> usize {
        let mut best = 0;
        let mut best_score = score(h, self.hashes[0], self.weights[0]);
        for (i, (host, weight)) in self.hashes.iter().zip(&self.weights).enumerate().skip(1) {
            let s = score(h, *host, *weight);
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

impl Select for Rendezvous {
    #[inline]
    fn pick(&self, key: &[u8], _state: &State) -> u32 {
        self.pick_hash(key_hash(key))
    }

    fn attempts(&self, key: &[u8], _state: &State, limit: usize, out: &mut Vec<u32>) {
        self.attempts_hash(key_hash(key), limit, out);
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
    fn envoy_host_weighted_distribution() {
        // HostWeightedDistribution: weights 1, 2, 3, hashes i · (u64::MAX / 6000) for
        // i < 6000; Envoy's bounds 500..1500, 1500..2500, 2500..3500.
        let nodes = hosts(90..93, |p| p - 89);
        let r = Rendezvous::build(&nodes, &all(&nodes));
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
        let before = Rendezvous::build(&nodes, &[0, 1, 2]);
        let after = Rendezvous::build(&nodes, &all(&nodes));
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
    fn weights_are_proportional() {
        // Chi-square over weights 1, 2, 3, 4 with 1,000,000 hashes: 3 degrees of freedom,
        // 16.27 is the 0.1% critical value.
        let nodes = hosts(0..4, |p| p + 1);
        let r = Rendezvous::build(&nodes, &all(&nodes));
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
    fn answers_ignore_insertion_order() {
        let nodes = hosts(90..96, |p| p % 3 + 1);
        let reversed: Vec<Node> = nodes.iter().rev().cloned().collect();
        let (a, b) = (
            Rendezvous::build(&nodes, &all(&nodes)),
            Rendezvous::build(&reversed, &all(&reversed)),
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
    fn attempts_follow_envoys_retry_hash_and_reach_everyone() {
        let nodes = hosts(0..40, |_| 1);
        let r = Rendezvous::build(&nodes, &all(&nodes));
        let mut g = crate::SplitMix64::new(6);
        for _ in 0..20 {
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
