//! `client_side_wrr`: gRPC's `weighted_round_robin` (gRFC A58), weights from the load the
//! servers report.
//!
//! Sources: gRFC A58 "weighted_round_robin LB policy" (grpc/proposal `A58-client-side-weighted-round-robin-lb-policy.md`);
//! gRPC C-core `src/core/load_balancing/weighted_round_robin/weighted_round_robin.cc`
//! (`EndpointWeight::MaybeUpdateWeight`, `GetWeight`, `SubchannelCallTracker::Finish`) and
//! `static_stride_scheduler.cc` (the scheduler, ported exactly); Envoy's
//! `client_side_weighted_round_robin` extension follows the same gRFC.
//!
//! **Weights.** Each ORCA report a node sends (`report_load`, or a lease finished with one)
//! sets its weight to `qps / (utilization + eps / qps × error_utilization_penalty)`, where
//! `qps` is the report's `rps_fractional`, `eps` its errors per second and `utilization` its
//! application utilisation, or its CPU utilisation when the application's is not above 0. A
//! report giving weight 0 (no qps or no utilisation) changes nothing. A weight counts once the
//! node has reported for `blackout_period` (10 s; 0 = at once), and is dropped when its last
//! report is older than `weight_expiration_period` (3 min), which also starts the blackout
//! again. Weights live with the node's load, so they survive membership changes, as C-core's
//! per-address `EndpointWeight` does. The nodes' configured weights (other than 0) are ignored,
//! as gRPC's policy ignores EDS weights.
//!
//! **Scheduler.** C-core's static stride scheduler: the weights scaled so the largest is
//! 65535 (u16), the largest capped at 10× the mean, every weight at least 1 % of the mean,
//! and a node without a weight at the mean. Pick number `s` (a u32 sequence) looks at node
//! `s mod n` in generation `s / n` and takes it if `(w × generation + index × 32767) mod 65535
//! ≥ 65535 − w`, else goes on with `s + 1`: node `i` is taken `w_i` times in 65535 generations,
//! spread evenly, and a pick costs at most 10 steps on average. With no weights at all, or one
//! node, picks are plain round robin. The sequence is the balancer's round-robin position,
//! starting at 0 (C-core starts it at a random value; liblb's is reproducible in every
//! language, and the round-robin fallback shares it where C-core keeps a second counter).
//!
//! **Updates, lock-free and lazy.** C-core rebuilds the scheduler on a timer every
//! `weight_update_period` (1 s, at least 100 ms). liblb has no timer: the first pick after the
//! period (the caller's clock) wins a compare-and-swap on the build stamp and rebuilds; the
//! others go on with the current weights. The scheduler's weights are two halves of one atomic
//! array: a rebuild writes the half not in use and then publishes it (release) with the
//! round-robin/stride flag in one word. A pick that lingers across two rebuilds may read a mix
//! of weights, each at least 1, so its loop still ends. The first pick of a table builds at
//! once: reports given before it count without waiting a period.
//!
//! Differences: grpc-go and grpc-java compute the same weights and scheduler (grpc-go
//! `balancer/weightedroundrobin`, grpc-java `WeightedRoundRobinLoadBalancer` with its own
//! `StaticStrideScheduler`), but start their sequence at a random value too; Envoy's extension
//! schedules with its EDF scheduler instead of the stride scheduler, so its pick order differs
//! while its shares agree. gRPC resets a node's blackout when its connection becomes ready
//! again; liblb has no connections, and a node's blackout restarts only after its weight
//! expired.

use super::{Ctx, Select};
use crate::load::{TICK_NS, elapsed, ticks};
use crate::orca::LoadReport;
use crate::sync::{AtomicCounter, AtomicU32, Ordering};
use crate::{Node, Options};
use alloc::vec::Vec;
use core::time::Duration;

/// The largest scaled weight (C-core `kMaxWeight`).
const MAX_WEIGHT: u16 = u16::MAX;
/// The largest weight is capped at this times the mean (C-core `kMaxRatio`).
const MAX_RATIO: f64 = 10.0;
/// Every weight is at least this times the mean (C-core `kMinRatio`).
const MIN_RATIO: f64 = 0.01;
/// The shortest update period (C-core: "weight_update_period ... clamped to 100ms").
pub(crate) const MIN_UPDATE_PERIOD: Duration = Duration::from_millis(100);

/// `live`: the scheduler's weights are in use (else round robin).
const STRIDE: u32 = 2;

/// A node's server-reported weight (C-core `EndpointWeight`), kept with its load. Three atomic
/// words; a stamp is `ticks | 1`, so 0 means "never".
#[derive(Debug, Default)]
pub(crate) struct Reported {
    /// The last weight, `f32` bits (0.0 before any).
    weight: AtomicU32,
    /// When it was set.
    updated: AtomicCounter,
    /// Since when the node has reported without its weight expiring (C-core
    /// `non_empty_since_`).
    since: AtomicCounter,
}

/// The A58 weight of a report: `qps / (utilization + eps / qps × penalty)`, utilisation being
/// the application's, or the CPU's when the application's is not above 0; 0 when qps or
/// utilisation is not above 0 (C-core `MaybeUpdateWeight`, in its `double` arithmetic and its
/// `float` result and penalty).
pub(crate) fn report_weight(report: &LoadReport, penalty: f32) -> f32 {
    let qps = report.rps_fractional;
    let eps = report.eps;
    let utilization = if report.application_utilization > 0.0 {
        report.application_utilization
    } else {
        report.cpu_utilization
    };
    if !(qps > 0.0 && utilization > 0.0) {
        return 0.0;
    }
    let penalty = if eps > 0.0 && penalty > 0.0 {
        eps / qps * f64::from(penalty)
    } else {
        0.0
    };
    (qps / (utilization + penalty)) as f32
}

/// A clock reading as a stamp: never 0 (which means "never").
fn stamp(now_ns: u64) -> u64 {
    ticks(now_ns) | 1
}

/// A stamp's value.
#[allow(
    clippy::unnecessary_cast,
    reason = "AtomicCounter is usize without 64-bit atomics"
)]
fn read(stamp: &AtomicCounter, order: Ordering) -> u64 {
    stamp.load(order) as u64
}

/// A duration in stamp ticks.
fn in_ticks(d: Duration) -> u64 {
    u64::try_from(d.as_nanos() / u128::from(TICK_NS)).unwrap_or(u64::MAX)
}

impl Reported {
    /// Takes a report received at `now_ns`. A report of weight 0 changes nothing (C-core
    /// does not update then); a weight that is not a finite positive `f32` neither.
    pub(crate) fn record(
        &self,
        report: &LoadReport,
        penalty: f32,
        expiration: Duration,
        now_ns: u64,
    ) {
        let weight = report_weight(report, penalty);
        if !(weight.is_finite() && weight > 0.0) {
            return;
        }
        let now = stamp(now_ns);
        let last = read(&self.updated, Ordering::Relaxed);
        // A first report, or one after the weight expired, starts the blackout. C-core resets
        // `non_empty_since_` when its timer reads an expired weight; liblb reads lazily, so
        // the report itself checks.
        if last == 0 || elapsed(now, last) >= in_ticks(expiration) {
            self.since.store(now as _, Ordering::Relaxed);
        }
        self.weight.store(weight.to_bits(), Ordering::Relaxed);
        // Release: a reader that sees this stamp sees the weight and `since` above.
        self.updated.store(now as _, Ordering::Release);
    }

    /// The weight to schedule by at `now_ns`, or 0 (unknown: expired, never reported, or still
    /// in its blackout) — C-core `GetWeight`.
    pub(crate) fn weight(&self, now_ns: u64, expiration: Duration, blackout: Duration) -> f32 {
        let updated = read(&self.updated, Ordering::Acquire);
        let now = stamp(now_ns);
        if updated == 0 || elapsed(now, updated) >= in_ticks(expiration) {
            return 0.0;
        }
        let since = read(&self.since, Ordering::Relaxed);
        if !blackout.is_zero() && elapsed(now, since) < in_ticks(blackout) {
            return 0.0;
        }
        f32::from_bits(self.weight.load(Ordering::Relaxed))
    }
}

/// C-core `StaticStrideScheduler::Make`: the scaled weights for `weights` (0 = unknown), or
/// `None` for round robin (fewer than two nodes, or no weight known).
pub(crate) fn stride_weights(weights: &[f32]) -> Option<Vec<u16>> {
    let n = weights.len();
    if n < 2 {
        return None;
    }
    let mut zeros = 0;
    let mut sum = 0.0f64;
    let mut max = 0.0f32;
    for &w in weights {
        sum += f64::from(w);
        max = max.max(w);
        if w == 0.0 {
            zeros += 1;
        }
    }
    if zeros == n {
        return None;
    }
    let mean = sum / (n - zeros) as f64;
    if f64::from(max) / mean > MAX_RATIO {
        max = (MAX_RATIO * mean) as f32;
    }
    // `kMaxWeight / unscaled_max` divides in `float` in C-core.
    let scaling = f64::from(f32::from(MAX_WEIGHT) / max);
    let scaled_mean = libm::round(scaling * mean) as u16;
    let lower = (libm::round(f64::from(scaled_mean) * MIN_RATIO) as u16).max(1);
    Some(
        weights
            .iter()
            .map(|&w| {
                if w == 0.0 {
                    scaled_mean
                } else {
                    let capped = f64::from(w.min(max));
                    (libm::round(capped * scaling) as u16).max(lower)
                }
            })
            .collect(),
    )
}

/// C-core `StaticStrideScheduler::Pick`: the index taken for sequence numbers from `next`,
/// with `weight(i)` the scaled weight of node `i` of `n`.
#[inline]
pub(crate) fn stride_pick(
    n: usize,
    weight: impl Fn(usize) -> u16,
    mut next: impl FnMut() -> u32,
) -> usize {
    const OFFSET: u64 = (MAX_WEIGHT / 2) as u64;
    loop {
        let sequence = u64::from(next());
        let index = (sequence % n as u64) as usize;
        let generation = sequence / n as u64;
        let w = u64::from(weight(index));
        let spread = (w * generation + index as u64 * OFFSET) % u64::from(MAX_WEIGHT);
        if spread >= u64::from(MAX_WEIGHT) - w {
            return index;
        }
    }
}

pub(crate) struct ClientSideWrr {
    /// Active node indices, in insertion order.
    active: Vec<u32>,
    blackout: Duration,
    expiration: Duration,
    /// The update period in stamp ticks (at least 100 ms).
    period: u64,
    /// When the scheduler was last built (a stamp), 0 = not yet.
    built: AtomicCounter,
    /// The scheduler's weights: two halves of `active.len()` (each a u16 in a u32).
    halves: Vec<AtomicU32>,
    /// Which half is in use (bit 0) and whether it is (`STRIDE`; else round robin).
    live: AtomicU32,
}

impl ClientSideWrr {
    /// The position in `active` for this pick.
    #[inline]
    fn position(&self, ctx: &Ctx<'_>) -> usize {
        self.refresh(ctx);
        let n = self.active.len();
        let live = self.live.load(Ordering::Acquire);
        // Sequence numbers are u32 in C-core; the balancer's position wraps to one.
        let next = || ctx.next_position(0) as u32;
        if live & STRIDE == 0 {
            return next() as usize % n;
        }
        let half = &self.halves[(live & 1) as usize * n..][..n];
        stride_pick(n, |i| half[i].load(Ordering::Relaxed) as u16, next)
    }

    /// Rebuilds the scheduler if the update period has passed since the last build (or
    /// none was made): one caller wins the stamp and rebuilds.
    #[inline]
    fn refresh(&self, ctx: &Ctx<'_>) {
        let now = stamp(ctx.now_ns);
        let built = read(&self.built, Ordering::Relaxed);
        if built != 0 && elapsed(now, built) < self.period {
            return;
        }
        if self
            .built
            .compare_exchange(built as _, now as _, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.rebuild(ctx);
        }
    }

    #[cold]
    fn rebuild(&self, ctx: &Ctx<'_>) {
        let weights: Vec<f32> = (self.active.iter())
            .map(|&i| {
                let load = &ctx.loads[i as usize];
                load.reported()
                    .weight(ctx.now_ns, self.expiration, self.blackout)
            })
            .collect();
        let live = self.live.load(Ordering::Relaxed);
        let Some(scaled) = stride_weights(&weights) else {
            self.live.store(live & 1, Ordering::Release);
            return;
        };
        let half = (live & 1) ^ 1;
        let n = self.active.len();
        for (slot, w) in self.halves[half as usize * n..][..n].iter().zip(scaled) {
            slot.store(u32::from(w), Ordering::Relaxed);
        }
        // Release: a pick that sees the new half sees its weights.
        self.live.store(STRIDE | half, Ordering::Release);
    }
}

impl Select for ClientSideWrr {
    const TIMED: bool = true;

    fn build(_nodes: &[Node], active: Vec<u32>, options: &Options) -> ClientSideWrr {
        let n = active.len();
        ClientSideWrr {
            blackout: options.blackout_period,
            expiration: options.weight_expiration_period,
            period: in_ticks(options.weight_update_period.max(MIN_UPDATE_PERIOD)),
            built: AtomicCounter::new(0),
            // Weights of 1, never 0: whatever a racing pick reads, its loop ends.
            halves: (0..2 * n).map(|_| AtomicU32::new(1)).collect(),
            live: AtomicU32::new(0),
            active,
        }
    }

    #[inline]
    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.position(ctx)]
    }

    /// The pick, then the other nodes in insertion order after it.
    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let n = self.active.len();
        let first = self.position(ctx);
        out.extend((0..limit.min(n)).map(|i| self.active[(first + i) % n]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C-core's scheduler with its test's sequence: a counter from 0.
    fn picks(weights: &[f32], count: usize) -> Vec<usize> {
        let scaled = stride_weights(weights).expect("a scheduler");
        let mut sequence = 0u32;
        (0..count)
            .map(|_| {
                stride_pick(
                    scaled.len(),
                    |i| scaled[i],
                    || {
                        sequence = sequence.wrapping_add(1);
                        sequence - 1
                    },
                )
            })
            .collect()
    }

    fn counts(weights: &[f32], count: usize) -> Vec<usize> {
        let mut counts = alloc::vec![0; weights.len()];
        for i in picks(weights, count) {
            counts[i] += 1;
        }
        counts
    }

    // Ported from grpc/grpc `test/core/load_balancing/static_stride_scheduler_test.cc`.

    #[test]
    fn empty_one_or_all_zero_weights_give_round_robin() {
        // EmptyWeightsIsNullopt, OneZeroWeightIsNullopt, AllZeroWeightsIsNullopt,
        // OneWeightsIsNullopt.
        assert_eq!(stride_weights(&[]), None);
        assert_eq!(stride_weights(&[0.0]), None);
        assert_eq!(stride_weights(&[0.0, 0.0, 0.0, 0.0]), None);
        assert_eq!(stride_weights(&[1.0]), None);
    }

    #[test]
    fn picks_are_weighted_exactly() {
        // PicksAreWeightedExactly.
        assert_eq!(counts(&[1.0, 2.0, 3.0], 6), [1, 2, 3]);
    }

    #[test]
    fn a_zero_weight_uses_the_mean() {
        // ZeroWeightUsesMean.
        assert_eq!(counts(&[3.0, 0.0, 1.0], 6), [3, 2, 1]);
    }

    #[test]
    fn equal_weights_are_round_robin() {
        // AllWeightsEqualIsRoundRobin.
        let order = picks(&[300.0, 300.0, 0.0], 1003);
        let mut first: Vec<usize> = order[..3].to_vec();
        first.sort_unstable();
        assert_eq!(first, [0, 1, 2]);
        for (i, pick) in order.iter().enumerate() {
            assert_eq!(*pick, order[i % 3]);
        }
    }

    #[test]
    fn picks_are_deterministic_and_survive_a_rebuild() {
        // PicksAreDeterministic, RebuildGiveSamePicks: a scheduler is its weights and the
        // sequence, nothing else.
        let once = picks(&[1.0, 2.0, 3.0], 100);
        assert_eq!(picks(&[1.0, 2.0, 3.0], 100), once);
        let scaled = stride_weights(&[1.0, 2.0, 3.0]).unwrap();
        let mut sequence = 0u32;
        for expected in once {
            let rebuilt = stride_weights(&[1.0, 2.0, 3.0]).unwrap();
            assert_eq!(rebuilt, scaled);
            let pick = stride_pick(
                3,
                |i| rebuilt[i],
                || {
                    sequence += 1;
                    sequence - 1
                },
            );
            assert_eq!(pick, expected);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // 131,070 picks.
    fn the_largest_is_picked_every_generation() {
        // LargestIsPickedEveryGeneration: mean 2, so 2 × 65535 picks cover every generation.
        let largest = picks(&[1.0, 2.0, 3.0], 2 * usize::from(MAX_WEIGHT))
            .into_iter()
            .filter(|i| *i == 2)
            .count();
        assert_eq!(largest, usize::from(MAX_WEIGHT));
    }

    #[test]
    fn the_max_is_clamped_for_a_high_ratio() {
        // MaxIsClampedForHighRatio: max clamped to mean × 10 = 50.
        let mut weights = alloc::vec![1.0f32; 20];
        weights[0] = 81.0;
        let mut expected = alloc::vec![1; 20];
        expected[0] = 50;
        assert_eq!(counts(&weights, 69), expected);
    }

    #[test]
    fn the_min_is_clamped_for_a_high_ratio() {
        // MinIsClampedForHighRatio: 1e-10 is raised to 1 % of the mean.
        assert_eq!(counts(&[100.0, 1e-10], 201), [200, 1]);
    }

    // The A58 weight rules, ported from grpc/grpc
    // `test/core/load_balancing/weighted_round_robin_test.cc` (the tests' expected pick
    // ratios are the weights' ratios; see also tests in `table` for blackout and expiry).

    fn report(app: f64, qps: f64, eps: f64, cpu: f64) -> LoadReport {
        LoadReport {
            application_utilization: app,
            rps_fractional: qps,
            eps,
            cpu_utilization: cpu,
            ..LoadReport::default()
        }
    }

    #[test]
    fn weights_follow_qps_over_utilization() {
        // Basic: app utilisation 0.9 and 0.3 at 100 qps weigh 1:3.
        let a = report_weight(&report(0.9, 100.0, 0.0, 0.0), 1.0);
        let b = report_weight(&report(0.3, 100.0, 0.0, 0.0), 1.0);
        assert!((b / a - 3.0).abs() < 1e-5, "{a} {b}");
        // CpuUtilWithNoAppUtil: CPU utilisation stands in for a missing application one.
        let cpu = report_weight(&report(0.0, 100.0, 0.0, 0.9), 1.0);
        assert_eq!(cpu, a);
        // AppUtilOverCpuUtil: the application's wins when both are given.
        assert_eq!(report_weight(&report(0.9, 100.0, 0.0, 0.3), 1.0), a);
        // No qps or no utilisation: no weight.
        assert_eq!(report_weight(&report(0.0, 100.0, 0.0, 0.0), 1.0), 0.0);
        assert_eq!(report_weight(&report(0.5, 0.0, 0.0, 0.0), 1.0), 0.0);
    }

    #[test]
    fn errors_count_as_utilization() {
        // Eps: 1/(0.1+0.5) : 1/(0.1+0.2) : 1/(0.1+0.1) = 1:2:3 with penalty 1.
        let w = |eps| report_weight(&report(0.1, 100.0, eps, 0.0), 1.0);
        let weights = [w(50.0), w(20.0), w(10.0)];
        assert_eq!(counts(&weights, 6), [1, 2, 3]);
        // ZeroErrorUtilPenalty: with penalty 0 the errors do not count (1:1:1).
        let w0 = |eps| report_weight(&report(0.1, 100.0, eps, 0.0), 0.0);
        assert_eq!(w0(50.0), w0(10.0));
    }

    #[test]
    fn basic_weights_pick_one_three_two() {
        // Basic: node 2 without a report weighs the mean, 2 (picks 1:3:2).
        let a = report_weight(&report(0.9, 100.0, 0.0, 0.0), 1.0);
        let b = report_weight(&report(0.3, 100.0, 0.0, 0.0), 1.0);
        assert_eq!(counts(&[a, b, 0.0], 6), [1, 3, 2]);
        assert_eq!(counts(&[a, b, b], 7), [1, 3, 3]);
    }

    #[test]
    fn a_weight_waits_out_its_blackout_and_expires() {
        const S: u64 = 1_000_000_000;
        let (expiration, blackout) = (Duration::from_secs(2), Duration::from_secs(1));
        let node = Reported::default();
        assert_eq!(node.weight(0, expiration, blackout), 0.0);
        let r = report(0.5, 100.0, 0.0, 0.0);
        node.record(&r, 1.0, expiration, 10 * S);
        // In its blackout (reported for less than 1 s) it is unknown.
        assert_eq!(node.weight(10 * S, expiration, blackout), 0.0);
        assert_eq!(node.weight(10 * S, expiration, Duration::ZERO), 200.0);
        node.record(&r, 1.0, expiration, 11 * S);
        assert_eq!(node.weight(11 * S, expiration, blackout), 200.0);
        // WeightExpirationPeriod: 2 s without a report drops it.
        assert_eq!(node.weight(13 * S, expiration, blackout), 0.0);
        // BlackoutPeriodAfterWeightExpiration: reports again, blackout again.
        node.record(&r, 1.0, expiration, 13 * S);
        assert_eq!(node.weight(13 * S + S / 2, expiration, blackout), 0.0);
        assert_eq!(node.weight(14 * S, expiration, blackout), 200.0);
        // A report of weight 0 changes nothing.
        node.record(&report(0.0, 0.0, 0.0, 0.0), 1.0, expiration, 14 * S);
        assert_eq!(node.weight(14 * S, expiration, blackout), 200.0);
    }
}
