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
//! Building the schedule: running nginx's loop costs O(n·Σw) (128 ms for 1000 nodes of weights
//! 1..100). The tournament below (`Classes::schedule`) gives the same sequence in
//! O(Σw + (Σ distinct weights + e)·log d), d the number of distinct weights and e the
//! certificate failures (1.4 ms there, 51x less than the loop in the same run; `cargo bench -p
//! liblb-bench --bench build`):
//!
//! 1. *Equal weights take turns.* Before the choice at step t (from 1), nginx's `current` of node
//!    i is `t·w_i − Σw·k_i`, k_i its earlier picks. Two nodes of equal weight differ by
//!    `Σw·(k_j − k_i)`: the one picked fewer times leads, the earlier one on equal counts. So the
//!    nodes of one weight are picked in turn, in index order, and only the one whose turn it is
//!    (the class's leader) can win. A class of m nodes picked P times has value
//!    `t·w − Σw·⌊P/m⌋`.
//! 2. *One key per class.* `key = value·2^s − leader` with `2^s` above every index: keys are
//!    distinct, and the larger key is the larger value, the earlier node on ties — nginx's rule.
//!    Each key is a line in t (slope `w·2^s`) that drops by `Σw·2^s` per round of its class.
//! 3. *Kinetic tournament* (Basch, Guibas and Hershberger, "Data structures for mobile data",
//!    1997): a tournament tree over the classes keeps, at each inner node, the winner at the
//!    current step and a certificate: the first step at which the loser's value (if steeper,
//!    the only way) reaches the winner's, plus the earliest such step in its subtree. Each step
//!    replays the nodes whose time has come (certificate failures), takes the root's winner —
//!    nginx's pick — and passes its class's turn on. Only when that completes the class's
//!    round does its value drop, and only then is the path above it replayed: while the
//!    leader moves within a round the value is unchanged, so the class keeps every match
//!    where it leads by value, and a tie, where the new leader may lose, is a certificate
//!    failure (certificates ignore leaders). So O(Σ distinct weights · log d) replays plus
//!    O(log d) per failure: 0.05 failures per pick for 1000 nodes of weights 1..100, about 0.3
//!    for 1000 distinct weights.
//!
//! Up to 16 distinct weights, nginx's loop over the classes (O(d) per pick) is faster and is
//! used instead. Tests compare both with nginx's loop on random weight sets (ties included), the
//! cases above and, in `scripts/test-upstream.sh`, a live nginx.
//!
//! Memory bound: the schedule holds Σw/gcd `u32`s; it is built when Σw/gcd is at most
//! [`SCHEDULE_MAX_LEN`] (4 MiB) and Σw/gcd · (⌈log2 d⌉ + 1) at most [`SCHEDULE_MAX_WORK`]
//! (0.1-0.2 s at the bound with a thousand distinct weights, as the old loop's bound allowed;
//! every weight set the loop scheduled under that n·Σw/gcd ≤ 2^26 bound still qualifies).
//! Beyond, the fallback is a Weyl sequence over cumulative weights: pick `c` takes the node
//! whose cumulative-weight interval holds `frac(c·φ)·Σw`. It is still lock-free, O(log n),
//! exactly proportional over time and smooth (a node's picks are spread evenly, with low
//! discrepancy), but not nginx's order.

use super::Ctx;
use super::active_weights;
use super::sample::{self, Seen, WeightTree};
use super::{Select, gcd_all};
use crate::rng::{SplitMix64, bounded};
use crate::{Node, Options};
use alloc::vec::Vec;

/// Longest precomputed schedule (entries of 4 bytes).
pub const SCHEDULE_MAX_LEN: u64 = 1 << 20;
/// Most work (schedule length · tournament levels) spent building a schedule.
pub const SCHEDULE_MAX_WORK: u64 = 1 << 23;
/// Up to this many distinct weights the schedule is built by nginx's loop over the classes
/// instead of the tournament: measured 1.2-5x faster up to 16 distinct weights (every pick
/// completes a round there, each a tournament replay), even at 32, slower at 64.
const SCAN_CLASSES: usize = 16;
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
    /// Positions a thread takes at once (`thread_rounds` x the period); 0 = one global order.
    block: u64,
}

/// The position whose cumulative-weight interval holds `u / 2^64 · Σw`.
#[inline]
fn by_cumulative(cumulative: &[u64], u: u64) -> usize {
    let total = *cumulative.last().expect("active set is not empty");
    let y = ((u128::from(u) * u128::from(total)) >> 64) as u64;
    cumulative.partition_point(|end| *end <= y)
}

/// Nodes grouped by weight, each group (class) answering with its leader (point 1 of the
/// module docs) under the key `slope·t − offset` (point 2).
struct Classes {
    /// Positions sorted by (weight, position): class c is `members[start[c]..start[c + 1]]`.
    members: Vec<u32>,
    start: Vec<u32>,
    /// Index into `members` of each class's leader.
    turn: Vec<u32>,
    /// `w·2^s` per class.
    slope: Vec<i64>,
    /// `Σw·rounds·2^s + leader` per class.
    offset: Vec<i64>,
    /// `Σw·2^s`: what one round of a class adds to its offset.
    round: i64,
    /// s: the bits below a key's value, where the leader is.
    shift: u32,
}

/// The offset of the padding classes that fill the tournament's leaves up to a power of two:
/// below every real key (real offsets stay under 2^61 + 2^21, see `Classes::new`), never steeper.
const PADDING: i64 = 1 << 62;

impl Classes {
    /// The classes of `weights` (all > 0, summing to `total` ≤ [`SCHEDULE_MAX_LEN`]).
    fn new(weights: &[u32], total: u64) -> Classes {
        // Every weight is ≥ 1, so n ≤ Σw ≤ 2^20 and 2^s ≤ 2^21: slopes ≤ 2^41, keys within
        // ±2^62 through step Σw + 1 (a class completes at most w ≤ 2^20 rounds).
        let shift = usize::BITS - weights.len().leading_zeros();
        let mut members: Vec<u32> = (0..weights.len() as u32).collect();
        members.sort_unstable_by_key(|i| (weights[*i as usize], *i));
        let (mut start, mut slope, mut offset) = (Vec::new(), Vec::new(), Vec::new());
        for (at, i) in members.iter().enumerate() {
            let w = i64::from(weights[*i as usize]) << shift;
            if slope.last() != Some(&w) {
                start.push(at as u32);
                slope.push(w);
                offset.push(i64::from(*i));
            }
        }
        let turn = start.clone();
        start.push(members.len() as u32);
        Classes {
            members,
            start,
            turn,
            slope,
            offset,
            round: (total as i64) << shift,
            shift,
        }
    }

    /// Class c's key before the choice at step t.
    #[inline]
    fn key(&self, c: usize, t: i64) -> i64 {
        self.slope[c] * t - self.offset[c]
    }

    /// nginx picks class c's leader and the turn passes to the next member. Returns the
    /// leader, and whether that completed the class's round: only then does its value drop.
    #[inline]
    fn take(&mut self, c: usize) -> (u32, bool) {
        let at = self.turn[c] as usize;
        let leader = self.members[at];
        let (mut next, mut offset) = (at + 1, self.offset[c] - i64::from(leader));
        let round = next == self.start[c + 1] as usize;
        if round {
            next = self.start[c] as usize;
            offset += self.round;
        }
        self.turn[c] = next as u32;
        self.offset[c] = offset + i64::from(self.members[next]);
        (leader, round)
    }

    /// The certificate of x leading y at step t: the first later step at which y's *value*
    /// reaches x's (`u64::MAX`, never, unless y is steeper), leaders ignored. On a tie the
    /// replay lets the leaders decide and, if x still leads, y passes it the step after: one
    /// replay early at most, and certificates stay valid while leaders move within a round.
    #[inline]
    fn overtakes(&self, x: usize, y: usize, t: u64) -> u64 {
        let slope = (self.slope[y] - self.slope[x]) >> self.shift;
        if slope <= 0 {
            return u64::MAX;
        }
        // Values w·t − drop, drop = offset >> s; Δdrop ≥ slope·t > 0 because x leads at t.
        let drop = (self.offset[y] >> self.shift) - (self.offset[x] >> self.shift);
        (drop as u64).div_ceil(slope as u64).max(t + 1)
    }

    /// Tournament levels above the leaves, plus one: the work per schedule entry, counted
    /// against [`SCHEDULE_MAX_WORK`].
    fn levels(&self) -> u64 {
        u64::from(self.slope.len().next_power_of_two().trailing_zeros()) + 1
    }

    /// nginx's order for one period of `total` picks.
    fn schedule(self, total: u64) -> Vec<u32> {
        if self.slope.len() <= SCAN_CLASSES {
            self.scan(total)
        } else {
            self.tournament(total)
        }
    }

    /// nginx's loop itself, over the classes: O(d) per pick, which beats the tournament's
    /// replays when a handful of distinct weights makes nearly every pick complete a round.
    fn scan(mut self, total: u64) -> Vec<u32> {
        let mut schedule = Vec::with_capacity(total as usize);
        for t in 1..=total as i64 {
            // Keys are distinct (point 2): the largest is nginx's pick, ties included.
            let best = (1..self.slope.len()).fold(0, |best, c| {
                if self.key(c, t) > self.key(best, t) {
                    c
                } else {
                    best
                }
            });
            schedule.push(self.take(best).0);
        }
        schedule
    }

    /// nginx's order for one period of `total` picks, by the kinetic tournament.
    fn tournament(mut self, total: u64) -> Vec<u32> {
        let size = self.slope.len().next_power_of_two();
        self.slope.resize(size, 0);
        self.offset.resize(size, PADDING);
        let mut tour = Tournament {
            size,
            winner: alloc::vec![0; 2 * size],
            due: alloc::vec![u64::MAX; 2 * size],
        };
        for c in 0..size {
            tour.winner[size + c] = c as u32;
        }
        for u in (1..size).rev() {
            tour.play(&self, u, 1);
        }
        let mut schedule = Vec::with_capacity(total as usize);
        for t in 1..=total {
            if tour.due[1] <= t {
                tour.refresh(&self, 1, t);
            }
            let c = tour.winner[1] as usize;
            let (leader, round) = self.take(c);
            schedule.push(leader);
            // Within a round c's value is unchanged: it still leads every match on its path
            // unless a value ties there, which that match's certificate catches. After a
            // round its value dropped: replay the path for the next step.
            if round {
                let mut u = (size + c) / 2;
                while u >= 1 {
                    tour.play(&self, u, t + 1);
                    u /= 2;
                }
            }
        }
        schedule
    }
}

/// The kinetic tournament over the classes (point 3 of the module docs), in heap order: node u
/// has children 2u and 2u + 1, the leaves `size..2·size` are the classes.
struct Tournament {
    size: usize,
    /// The class leading at each node.
    winner: Vec<u32>,
    /// The first step at which some node of the subtree needs replaying.
    due: Vec<u64>,
}

impl Tournament {
    /// Decides inner node u at step t from its children's winners.
    #[inline]
    fn play(&mut self, classes: &Classes, u: usize, t: u64) {
        let (a, b) = (self.winner[2 * u] as usize, self.winner[2 * u + 1] as usize);
        let (x, y) = if classes.key(a, t as i64) > classes.key(b, t as i64) {
            (a, b)
        } else {
            (b, a)
        };
        self.winner[u] = x as u32;
        self.due[u] = classes
            .overtakes(x, y, t)
            .min(self.due[2 * u])
            .min(self.due[2 * u + 1]);
    }

    /// Replays, bottom-up, every node of u's subtree that is due at step t.
    fn refresh(&mut self, classes: &Classes, u: usize, t: u64) {
        if u >= self.size || self.due[u] > t {
            return;
        }
        self.refresh(classes, 2 * u, t);
        self.refresh(classes, 2 * u + 1, t);
        self.play(classes, u, t);
    }
}

/// nginx's smooth weighted round robin, one period, as positions into `weights` (all > 0,
/// Σ ≤ [`SCHEDULE_MAX_LEN`]).
#[cfg(test)]
pub(crate) fn nginx_schedule(weights: &[u32]) -> Vec<u32> {
    let total = weights.iter().map(|w| u64::from(*w)).sum();
    Classes::new(weights, total).schedule(total)
}

impl WeightedRoundRobin {
    pub(crate) fn new(active: Vec<u32>, weights: Vec<u32>) -> WeightedRoundRobin {
        let g = gcd_all(weights.iter().copied());
        let reduced: Vec<u32> = weights.iter().map(|w| w / g).collect();
        let period: u64 = reduced.iter().map(|w| u64::from(*w)).sum();
        let classes = (period <= SCHEDULE_MAX_LEN).then(|| Classes::new(&reduced, period));
        let plan =
            if let Some(classes) = classes.filter(|c| period * c.levels() <= SCHEDULE_MAX_WORK) {
                Plan::Schedule(classes.schedule(period))
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
            block: 0,
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
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> WeightedRoundRobin {
        let weights = active_weights(nodes, &active);
        let mut wrr = WeightedRoundRobin::new(active, weights);
        // A block is whole periods of the schedule (the Weyl fallback has no period: n).
        let period = match &wrr.plan {
            Plan::Schedule(s) => s.len() as u64,
            Plan::Weyl { .. } => wrr.active.len() as u64,
        };
        wrr.block = u64::from(options.thread_rounds) * period;
        wrr
    }

    #[inline]
    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.at(ctx.next_position(self.block))]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let c = ctx.next_position(self.block);
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

    /// nginx's loop as written in `ngx_http_upstream_get_peer` (static weights): the reference
    /// the tournament must reproduce, O(n) per pick.
    fn nginx_loop(weights: &[u32], picks: u64) -> Vec<u32> {
        let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
        let mut current = alloc::vec![0i64; weights.len()];
        let mut order = Vec::with_capacity(picks as usize);
        for _ in 0..picks {
            let mut best = 0;
            for (i, w) in weights.iter().enumerate() {
                current[i] += i64::from(*w);
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            order.push(best as u32);
        }
        order
    }

    fn period(weights: &[u32]) -> u64 {
        weights.iter().map(|w| u64::from(*w)).sum()
    }

    #[test]
    fn nginx_five_one_one() {
        let s = nginx_schedule(&[5, 1, 1]);
        assert_eq!(s, [0, 0, 1, 0, 2, 0, 0]); // a a b a c a a
        assert_eq!(s, nginx_loop(&[5, 1, 1], 7));
    }

    /// Issue 13's case: 1000 nodes of weights 1..100 (100 classes of 10 equal weights), and
    /// 200 distinct weights, where the tournament's certificates fail most often.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn tournament_is_nginx_at_scale() {
        let issue: Vec<u32> = (0..1000).map(|i| i % 100 + 1).collect();
        let distinct: Vec<u32> = (1..=200).rev().collect();
        for weights in [issue, distinct] {
            let p = period(&weights);
            assert_eq!(nginx_schedule(&weights), nginx_loop(&weights, p));
        }
    }

    /// At the edge of the integer bounds (Σw = 2^20, 2^19 + 1 nodes, so indices need 20 bits
    /// and one class completes 2^19 rounds), the build runs without overflow (tests check
    /// arithmetic) and keeps nginx's invariants: each node picked exactly w times per period,
    /// nodes of equal weight in turn, and the heavy node never more than one pick away from
    /// its exact share.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn schedule_at_the_integer_bounds() {
        let n = (1 << 19) + 1;
        let mut weights = alloc::vec![1u32; n];
        weights[n / 2] = 1 << 19;
        assert_eq!(period(&weights), SCHEDULE_MAX_LEN);
        let w = WeightedRoundRobin::new((0..n as u32).collect(), weights.clone());
        assert!(w.is_scheduled());
        let Plan::Schedule(s) = &w.plan else {
            unreachable!()
        };
        let (mut heavy, mut next_light) = (0u64, 0u32);
        for (t, i) in s.iter().enumerate() {
            if *i as usize == n / 2 {
                heavy += 1;
            } else {
                assert_eq!(*i, next_light, "light nodes take turns in index order");
                next_light += 1 + u32::from(next_light + 1 == n as u32 / 2);
            }
            let exact = (t as u64 + 1) as f64 / 2.0;
            assert!(
                (heavy as f64 - exact).abs() <= 1.0,
                "step {t}: {heavy} heavy picks"
            );
        }
        assert_eq!(heavy, 1 << 19);
    }

    /// The old build (nginx's loop) ran while n·Σw ≤ 2^26; the tournament's bound
    /// Σw·(⌈log2 d⌉ + 1) ≤ [`SCHEDULE_MAX_WORK`] admits every such set (d ≤ n ≤ Σw), so no
    /// weight set that had nginx's order lost it.
    #[test]
    fn work_bound_keeps_every_set_the_loop_scheduled() {
        for n in 1u64..=1 << 13 {
            let longest = SCHEDULE_MAX_LEN.min((1 << 26) / n);
            if longest < n {
                break; // Σw ≥ n: no weight set of n nodes fitted the old bound
            }
            let levels = u64::from((n as usize).next_power_of_two().trailing_zeros()) + 1;
            assert!(longest * levels <= SCHEDULE_MAX_WORK, "n = {n}");
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::proptest_config(64, 2))]

        /// The tournament gives nginx's loop's order on random weight sets: few distinct
        /// weights (ties everywhere, nginx's first-in-order rule decides), many, or a mix; and
        /// dividing the weights by their gcd leaves the order unchanged (each period of the
        /// scaled weights is the reduced schedule again).
        #[test]
        fn tournament_matches_nginx_loop(
            weights in {
                let n = 1..if cfg!(miri) { 6 } else { 40 };
                proptest::prop_oneof![
                    proptest::collection::vec(1u32..=3, n.clone()),
                    proptest::collection::vec(1u32..=40, n.clone()),
                    proptest::collection::vec(proptest::prop_oneof![1u32..=3, 1u32..=600], n),
                ]
            },
            scale in 1u32..=2,
        ) {
            let s = nginx_schedule(&weights);
            let p = period(&weights);
            proptest::prop_assert_eq!(&s, &nginx_loop(&weights, p));
            // Both builders, whichever the number of distinct weights would choose.
            proptest::prop_assert_eq!(&s, &Classes::new(&weights, p).tournament(p));
            proptest::prop_assert_eq!(&s, &Classes::new(&weights, p).scan(p));
            let scaled: Vec<u32> = weights.iter().map(|w| w * scale).collect();
            let expected = nginx_loop(&scaled, p * u64::from(scale));
            for chunk in expected.chunks(s.len()) {
                proptest::prop_assert_eq!(chunk, &s[..]);
            }
        }
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
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (tens of seconds interpreted).
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
