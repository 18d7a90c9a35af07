//! `weighted_round_robin`: nginx's smooth weighted round robin, lock-free.
//!
//! Source: nginx `src/http/ngx_http_upstream_round_robin.c`, `ngx_http_upstream_get_peer`
//! (Dounin, 2012): every pick adds each peer's weight to its `current_weight`, takes the peer
//! with the largest (first in order on ties) and subtracts the total from it. For weights 5,1,1
//! that is `a a b a c a a`: proportional, and smooth where seed 000's WeightRound (`index %
//! Σw` over cumulative weights) sends bursts (`a a a a a b c`).
//!
//! nginx mutates shared state under a lock on every pick. The sequence is periodic with period
//! Σw (after dividing the weights by their gcd, which leaves the order unchanged), so it is
//! precomputed once per membership change and a pick is one atomic add and one table read: a
//! single thread sees exactly nginx's order, concurrent threads share it without a lock.
//!
//! Memory bound: the schedule holds Σw/gcd `u32`s, built in O(n·Σw/gcd). When Σw/gcd exceeds
//! [`SCHEDULE_MAX_LEN`] (4 MiB) or n·Σw/gcd exceeds [`SCHEDULE_MAX_WORK`], the fallback is a
//! Weyl sequence over cumulative weights: pick `c` takes the node whose cumulative-weight
//! interval holds `frac(c·φ)·Σw`. It is still lock-free, O(log n), exactly proportional over
//! time and smooth (a node's picks are spread evenly, with low discrepancy), but not nginx's order.

use super::Ctx;
use super::active_weights;
use super::sample::{self, Seen, WeightTree};
use super::{Select, gcd_all};
use crate::rng::{SplitMix64, bounded};
use crate::sync::next_position;
use crate::{Node, Options};
use alloc::vec::Vec;

/// Longest precomputed schedule (entries of 4 bytes).
pub const SCHEDULE_MAX_LEN: u64 = 1 << 20;
/// Most work (n · schedule length) spent building a schedule.
pub const SCHEDULE_MAX_WORK: u64 = 1 << 26;
/// Schedule entries `attempts` walks per node it wants before drawing the rest by weight.
const WALK_PER_ATTEMPT: u64 = 16;
/// 2^64 / φ: the Weyl increment of the fallback (also SplitMix64's γ).
const WEYL: u64 = 0x9E37_79B9_7F4A_7C15;

enum Plan {
    /// Active-node positions in nginx's order, one period long.
    Schedule(Vec<u32>),
    /// Cumulative weights (exclusive upper bounds) for the Weyl fallback.
    Weyl { cumulative: Vec<u64> },
}

pub(crate) struct WeightedRoundRobin {
    active: Vec<u32>,
    /// gcd-reduced weights, for the weighted part of `attempts`.
    weights: WeightTree,
    plan: Plan,
}

/// The position whose cumulative-weight interval holds `u / 2^64 · Σw`.
#[inline]
fn by_cumulative(cumulative: &[u64], u: u64) -> usize {
    let total = *cumulative.last().expect("active set is not empty");
    let y = ((u128::from(u) * u128::from(total)) >> 64) as u64;
    cumulative.partition_point(|end| *end <= y)
}

/// nginx's smooth weighted round robin, one period, as positions into `weights`.
pub(crate) fn nginx_schedule(weights: &[u32]) -> Vec<u32> {
    let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
    let mut current = alloc::vec![0i64; weights.len()];
    let mut schedule = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, w) in weights.iter().enumerate() {
            current[i] += i64::from(*w);
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        schedule.push(best as u32);
    }
    schedule
}

impl WeightedRoundRobin {
    pub(crate) fn new(active: Vec<u32>, weights: Vec<u32>) -> WeightedRoundRobin {
        let g = gcd_all(weights.iter().copied());
        let reduced: Vec<u32> = weights.iter().map(|w| w / g).collect();
        let period: u64 = reduced.iter().map(|w| u64::from(*w)).sum();
        let plan = if period <= SCHEDULE_MAX_LEN
            && period.saturating_mul(reduced.len() as u64) <= SCHEDULE_MAX_WORK
        {
            Plan::Schedule(nginx_schedule(&reduced))
        } else {
            let cumulative = reduced
                .iter()
                .scan(0u64, |sum, w| {
                    *sum += u64::from(*w);
                    Some(*sum)
                })
                .collect();
            Plan::Weyl { cumulative }
        };
        WeightedRoundRobin {
            active,
            weights: WeightTree::new(reduced),
            plan,
        }
    }

    /// Whether the nginx schedule (rather than the Weyl fallback) is in use.
    #[cfg(test)]
    pub(crate) fn is_scheduled(&self) -> bool {
        matches!(self.plan, Plan::Schedule(_))
    }

    /// The active position chosen at counter value `c`.
    #[inline]
    fn at(&self, c: u64) -> usize {
        match &self.plan {
            Plan::Schedule(s) => s[(c % s.len() as u64) as usize] as usize,
            Plan::Weyl { cumulative } => by_cumulative(cumulative, c.wrapping_mul(WEYL)),
        }
    }
}

impl Select for WeightedRoundRobin {
    fn build(nodes: &[Node], active: Vec<u32>, _options: &Options) -> WeightedRoundRobin {
        let weights = active_weights(nodes, &active);
        WeightedRoundRobin::new(active, weights)
    }

    #[inline]
    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.at(next_position(&ctx.position))]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let c = next_position(&ctx.position);
        out.push(self.at(c) as u32);
        let g = core::cell::RefCell::new(SplitMix64::new(c));
        let next = || g.borrow_mut().next();
        match &self.plan {
            Plan::Schedule(s) => {
                // The next distinct nodes in nginx's order, walking at most WALK_PER_ATTEMPT
                // schedule entries per wanted node: with skewed weights a light node may be a
                // whole period away, so what the walk leaves is drawn by weight instead.
                let limit = limit.min(self.active.len());
                let mut seen = Seen::new(self.active.len(), limit);
                seen.insert(out[0]);
                let walk = (s.len() as u64).min(WALK_PER_ATTEMPT.saturating_mul(limit as u64));
                for step in 1..walk {
                    if out.len() == limit {
                        break;
                    }
                    let i = self.at(c.wrapping_add(step)) as u32;
                    if seen.insert(i) {
                        out.push(i);
                    }
                }
                let draw = || s[bounded(g.borrow_mut().next(), s.len())] as usize;
                sample::weighted_prefix(&self.weights, limit, draw, next, out);
            }
            Plan::Weyl { cumulative } => {
                // No nginx order to follow: the pick, then a weighted sample without
                // replacement seeded by the position.
                let draw = || by_cumulative(cumulative, g.borrow_mut().next());
                sample::weighted_prefix(&self.weights, limit, draw, next, out);
            }
        }
        for slot in out.iter_mut() {
            *slot = self.active[*slot as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_five_one_one() {
        let s = nginx_schedule(&[5, 1, 1]);
        assert_eq!(s, [0, 0, 1, 0, 2, 0, 0]); // a a b a c a a
    }

    #[test]
    fn huge_weights_fall_back_to_weyl() {
        let w = WeightedRoundRobin::new((0..3).collect(), alloc::vec![u32::MAX, 1, 2]);
        assert!(!w.is_scheduled());
        let w = WeightedRoundRobin::new((0..3).collect(), alloc::vec![5, 1, 1]);
        assert!(w.is_scheduled());
    }

    /// The Weyl fallback is proportional with low discrepancy: after every prefix of the
    /// sequence each node's count is within a few picks of its exact share (a random choice
    /// would drift by ~sqrt(n) = hundreds).
    #[test]
    fn weyl_fallback_is_proportional_and_smooth() {
        let weights = alloc::vec![3_000_001u32, 1_000_000, 999_999]; // gcd 1: no reduction
        let w = WeightedRoundRobin::new((0..3).collect(), weights.clone());
        assert!(!w.is_scheduled());
        let total: f64 = weights.iter().map(|w| f64::from(*w)).sum();
        let mut counts = [0f64; 3];
        let picks = if cfg!(miri) { 2_000 } else { 200_000 };
        for c in 0..picks {
            counts[w.at(c)] += 1.0;
            for (i, weight) in weights.iter().enumerate() {
                let exact = (c + 1) as f64 * f64::from(*weight) / total;
                assert!(
                    (counts[i] - exact).abs() < 4.0,
                    "pick {c}: node {i} at {}",
                    counts[i]
                );
            }
        }
    }
}
