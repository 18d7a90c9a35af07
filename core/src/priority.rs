//! Priority levels: how much of the traffic each priority takes, Envoy's rules exactly.
//!
//! Nodes belong to priority levels (0 = most preferred). A level's *health* is the share of its
//! hosts that can take traffic, scaled up by the overprovisioning factor and capped at 100:
//! with the default factor 140 (1.4), a level with 72% or more of its hosts healthy still takes
//! all the traffic it is offered, and below that it spills the rest to the next level, gradually
//! as hosts fail. Degraded hosts (Envoy's `DEGRADED`: alive but to be used only when healthy
//! ones run out) get the same computation, and the load left after the healthy levels is
//! spread over the degraded ones. Panic is decided per level; when every level is in panic, the
//! load follows the hosts' counts, regardless of health.
//!
//! Source: envoyproxy/envoy `source/extensions/load_balancing_policies/common/
//! load_balancer_impl.cc`, `LoadBalancerBase::recalculatePerPriorityState` (health, degraded
//! availability, `distributeLoad`, the rounding remainder), `recalculatePerPriorityPanic`,
//! `recalculateLoadInTotalPanic`, `isHostSetInPanic` and `choosePriority`; the arithmetic is
//! Envoy's, in the same integer types and order. The tests port the expectations of
//! `test/extensions/load_balancing_policies/common/load_balancer_impl_base_test.cc`
//! (`LoadBalancerBaseTest`: `OverProvisioningFactor`, `WeightedPriorityHealth*`,
//! `GentleFailover`, `GentleFailoverWithExtraLevels`, `PrioritySelection`).
//!
//! One difference, on purpose: Envoy recomputes its loads incrementally, and when no level has
//! any availability and panic is disabled (`panic_threshold` 0) it sets priority 0's load to 100
//! and leaves the other entries as the previous update computed them (its own comment: nothing
//! is routed there anyway). [`Loads::compute`] depends on the current levels only and gives the
//! other levels 0, so the loads always sum to 100.

use alloc::vec::Vec;

/// Envoy's default overprovisioning factor, in percent (1.4).
pub const DEFAULT_OVERPROVISIONING_FACTOR: u32 = 140;

/// One priority level as the load computation sees it: its hosts by state. Weights count only
/// with [`Level::weighted`] (Envoy's `weighted_priority_health`); otherwise each host counts 1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Level {
    /// All hosts of the level, excluded ones included (Envoy's `hosts()`).
    pub hosts: u32,
    /// Hosts that may take traffic (Envoy's `healthyHosts()`).
    pub healthy: u32,
    /// Hosts that are degraded: used once the healthy ones run short (`degradedHosts()`).
    pub degraded: u32,
    /// Hosts left out of every computation but the total-panic one (`excludedHosts()`).
    pub excluded: u32,
    /// With [`Level::weighted`]: the summed weights of all, healthy, degraded and excluded hosts.
    pub weights: Weights,
    /// Health by weight instead of by host count.
    pub weighted: bool,
    /// The overprovisioning factor, in percent ([`DEFAULT_OVERPROVISIONING_FACTOR`]).
    pub overprovisioning_factor: u32,
}

/// A level's summed host weights, by state (see [`Level::weighted`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Weights {
    /// Every host's weight, excluded hosts included.
    pub total: u64,
    /// The healthy hosts' weights.
    pub healthy: u64,
    /// The degraded hosts' weights.
    pub degraded: u64,
    /// The excluded hosts' weights.
    pub excluded: u64,
}

impl Level {
    /// A level of `hosts` hosts, `healthy` of them healthy, the default factor, by count.
    pub fn new(hosts: u32, healthy: u32) -> Level {
        Level {
            hosts,
            healthy,
            overprovisioning_factor: DEFAULT_OVERPROVISIONING_FACTOR,
            ..Level::default()
        }
    }

    /// Hosts that count for health: all but the excluded ones.
    fn counted(&self) -> u32 {
        self.hosts.saturating_sub(self.excluded)
    }

    /// The level's (health, degraded availability), each 0 to 100.
    fn availability(&self) -> (u32, u32) {
        if self.counted() == 0 {
            return (0, 0);
        }
        let (healthy, degraded, total) = if self.weighted {
            let w = &self.weights;
            (w.healthy, w.degraded, w.total.saturating_sub(w.excluded))
        } else {
            (
                u64::from(self.healthy),
                u64::from(self.degraded),
                u64::from(self.counted()),
            )
        };
        if total == 0 {
            return (0, 0);
        }
        let factor = u64::from(self.overprovisioning_factor);
        let scaled = |part: u64| (factor * part / total).min(100) as u32;
        (scaled(healthy), scaled(degraded))
    }

    /// Envoy's `isHostSetInPanic`: the healthy and degraded shares of the counted hosts, in
    /// percent (by count, even for weighted levels), sum to less than `threshold`.
    fn in_panic(&self, threshold: u32) -> bool {
        let counted = self.counted();
        let percent = |n: u32| {
            if counted == 0 {
                0.0
            } else {
                100.0 * f64::from(n) / f64::from(counted)
            }
        };
        percent(self.healthy) + percent(self.degraded) < f64::from(threshold.min(100))
    }
}

/// Whether a priority was chosen for its healthy or its degraded hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Pick among the level's healthy hosts.
    Healthy,
    /// Pick among the level's degraded hosts.
    Degraded,
}

/// The share of traffic (percent) each priority level takes, for its healthy and its degraded
/// hosts, and which levels are in panic (pick among all their hosts, regardless of health).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loads {
    /// Percent of the traffic for each level's healthy hosts.
    pub healthy: Vec<u32>,
    /// Percent of the traffic for each level's degraded hosts.
    pub degraded: Vec<u32>,
    /// Whether each level is in panic.
    pub panic: Vec<bool>,
}

impl Loads {
    /// The loads of `levels` (priority 0 first) with Envoy's `healthy_panic_threshold`
    /// (percent; Envoy's default 50): the healthy and degraded loads sum to 100 whenever there
    /// is at least one level.
    pub fn compute(levels: &[Level], panic_threshold: u32) -> Loads {
        let n = levels.len();
        let mut loads = Loads {
            healthy: alloc::vec![0; n],
            degraded: alloc::vec![0; n],
            panic: alloc::vec![false; n],
        };
        if n == 0 {
            return loads;
        }
        let (health, degraded): (Vec<u32>, Vec<u32>) =
            levels.iter().map(Level::availability).unzip();
        let total = normalized_total_availability(&health, &degraded);
        if total > 0 {
            let (first_healthy, left) = distribute(&mut loads.healthy, &health, 100, total);
            let (first_degraded, left) = distribute(&mut loads.degraded, &degraded, left, total);
            // Rounding leftovers go to the first level with healthy availability, else the
            // first with degraded availability.
            if left != 0 {
                match (first_healthy, first_degraded) {
                    (Some(i), _) => loads.healthy[i] += left,
                    (None, Some(i)) => loads.degraded[i] += left,
                    (None, None) => unreachable!("a positive total availability has a level"),
                }
            }
        }
        let threshold = panic_threshold.min(100);
        if threshold == 0 && total == 0 {
            // No availability and panic disabled: nothing can be routed; priority 0 holds the
            // load so it sums to 100 (Envoy keeps stale loads elsewhere; see the module docs).
            loads.healthy[0] = 100;
            return loads;
        }
        for (panic, level) in loads.panic.iter_mut().zip(levels) {
            *panic = total != 100 && level.in_panic(threshold);
        }
        if loads.panic.iter().all(|p| *p) {
            loads.in_total_panic(levels);
        }
        loads
    }

    /// Envoy's `recalculateLoadInTotalPanic`: every level in panic, so the load follows the
    /// levels' host counts (excluded hosts included), rounding leftovers to the first level
    /// with hosts; none at all: everything to priority 0.
    fn in_total_panic(&mut self, levels: &[Level]) {
        let total: u64 = levels.iter().map(|l| u64::from(l.hosts)).sum();
        self.degraded.iter_mut().for_each(|d| *d = 0);
        if total == 0 {
            self.healthy.iter_mut().for_each(|h| *h = 0);
            self.healthy[0] = 100;
            return;
        }
        let mut left = 100u32;
        for (load, level) in self.healthy.iter_mut().zip(levels) {
            *load = (100 * u64::from(level.hosts) / total) as u32;
            left -= *load;
        }
        let first = levels.iter().position(|l| l.hosts > 0).unwrap_or(0);
        self.healthy[first] += left;
    }

    /// Envoy's `choosePriority`: the level (and whether for its healthy or degraded hosts)
    /// that takes the request with this `hash` (any 64 bits: a random draw or a key's hash),
    /// by `hash % 100 + 1` against the running sum of the healthy loads, then the degraded ones.
    pub fn choose(&self, hash: u64) -> (usize, Availability) {
        let point = (hash % 100 + 1) as u32;
        let mut sum = 0;
        let healthy = self.healthy.iter().map(|l| (*l, Availability::Healthy));
        let degraded = self.degraded.iter().map(|l| (*l, Availability::Degraded));
        for (i, (load, availability)) in healthy.chain(degraded).enumerate() {
            sum += load;
            if point <= sum {
                return (i % self.healthy.len().max(1), availability);
            }
        }
        (0, Availability::Healthy) // loads that sum to less than 100: Envoy's fallback
    }
}

/// Envoy's `calculateNormalizedTotalAvailability`: the levels' health and degraded
/// availability summed, capped at 100.
fn normalized_total_availability(health: &[u32], degraded: &[u32]) -> u32 {
    let sum: u64 = health.iter().chain(degraded).map(|v| u64::from(*v)).sum();
    sum.min(100) as u32
}

/// Envoy's `distributeLoad`: each level in turn takes `availability · 100 / total`, at most
/// what is left of `load`. Returns the first level with availability and what is left.
fn distribute(
    loads: &mut [u32],
    availability: &[u32],
    mut load: u32,
    total: u32,
) -> (Option<usize>, u32) {
    let mut first = None;
    for (i, (out, available)) in loads.iter_mut().zip(availability).enumerate() {
        if first.is_none() && *available > 0 {
            first = Some(i);
        }
        *out = load.min(available * 100 / total);
        load -= *out;
    }
    (first, load)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// Envoy's test helper `updateHostSet(num_hosts, num_healthy, num_degraded, num_excluded)`.
    fn level(hosts: u32, healthy: u32, degraded: u32, excluded: u32) -> Level {
        Level {
            degraded,
            excluded,
            ..Level::new(hosts, healthy)
        }
    }

    /// `LoadBalancerBaseTest`'s panic threshold (its `CommonLbConfig` default, 50).
    const PANIC: u32 = 50;

    fn loads(levels: &[Level]) -> (Vec<u32>, Vec<u32>, Vec<bool>) {
        let l = Loads::compute(levels, PANIC);
        (l.healthy, l.degraded, l.panic)
    }

    // load_balancer_impl_base_test.cc, LoadBalancerBaseTest.OverProvisioningFactor
    #[test]
    fn overprovisioning_factor() {
        let (healthy, _, _) = loads(&[level(4, 2, 0, 0), level(4, 2, 0, 0)]);
        assert_eq!(healthy, [70, 30]);
        let flat = Level {
            overprovisioning_factor: 100,
            ..level(4, 2, 0, 0)
        };
        assert_eq!(loads(&[flat.clone(), flat]).0, [50, 50]);
    }

    fn weighted(hosts: u32, healthy: u32, degraded: u32, excluded: u32, weights: Weights) -> Level {
        Level {
            weights,
            weighted: true,
            overprovisioning_factor: 100,
            ..level(hosts, healthy, degraded, excluded)
        }
    }

    // LoadBalancerBaseTest.WeightedPriorityHealth: healthy weights 3 + 3 of 10.
    #[test]
    fn weighted_priority_health() {
        let p0 = weighted(
            4,
            2,
            0,
            0,
            Weights {
                total: 10,
                healthy: 6,
                ..Weights::default()
            },
        );
        let p1 = weighted(
            1,
            1,
            0,
            0,
            Weights {
                total: 1,
                healthy: 1,
                ..Weights::default()
            },
        );
        assert_eq!(loads(&[p0, p1]).0, [60, 40]);
    }

    // LoadBalancerBaseTest.WeightedPriorityHealthExcluded: healthy 4, excluded 10, unhealthy 6.
    #[test]
    fn weighted_priority_health_excluded() {
        let p0 = weighted(
            3,
            1,
            0,
            1,
            Weights {
                total: 20,
                healthy: 4,
                excluded: 10,
                degraded: 0,
            },
        );
        let p1 = weighted(
            1,
            1,
            0,
            0,
            Weights {
                total: 1,
                healthy: 1,
                ..Weights::default()
            },
        );
        assert_eq!(loads(&[p0, p1]).0, [40, 60]);
    }

    // LoadBalancerBaseTest.WeightedPriorityHealthDegraded
    #[test]
    fn weighted_priority_health_degraded() {
        let p0 = weighted(
            4,
            1,
            1,
            0,
            Weights {
                total: 10,
                healthy: 4,
                degraded: 3,
                excluded: 0,
            },
        );
        let p1 = weighted(
            2,
            1,
            1,
            0,
            Weights {
                total: 10,
                healthy: 1,
                degraded: 9,
                excluded: 0,
            },
        );
        let (healthy, degraded, _) = loads(&[p0, p1]);
        assert_eq!((healthy, degraded), (vec![40, 10], vec![30, 20]));
    }

    // LoadBalancerBaseTest.GentleFailover, step by step.
    #[test]
    fn gentle_failover() {
        let cases: [([Level; 2], [u32; 2], [bool; 2]); 7] = [
            (
                [level(1, 1, 0, 0), level(1, 1, 0, 0)],
                [100, 0],
                [false, false],
            ),
            (
                [level(2, 1, 0, 0), level(2, 1, 0, 0)],
                [70, 30],
                [false, false],
            ),
            (
                [level(4, 1, 0, 0), level(2, 2, 0, 0)],
                [35, 65],
                [false, false],
            ),
            (
                [level(4, 1, 0, 0), level(4, 1, 0, 0)],
                [50, 50],
                [true, true],
            ),
            (
                [level(4, 1, 0, 3), level(5, 1, 0, 0)],
                [100, 0],
                [false, false],
            ),
            (
                [level(4, 0, 0, 4), level(4, 1, 0, 0)],
                [50, 50],
                [true, true],
            ),
            (
                [level(4, 0, 0, 1), level(6, 1, 0, 2)],
                [40, 60],
                [true, true],
            ),
        ];
        for (levels, healthy, panic) in cases {
            let (h, _, p) = loads(&levels);
            assert_eq!(
                (h.as_slice(), p.as_slice()),
                (&healthy[..], &panic[..]),
                "{levels:?}"
            );
        }
    }

    // LoadBalancerBaseTest.GentleFailoverWithExtraLevels, step by step (the step with the panic
    // threshold at 0 passes 0).
    #[test]
    fn gentle_failover_with_extra_levels() {
        type Case = ([Level; 3], u32, [u32; 3], [u32; 3], Option<[bool; 3]>);
        let l = level;
        let cases: [Case; 15] = [
            (
                [l(1, 1, 0, 0), l(1, 1, 0, 0), l(1, 1, 0, 0)],
                PANIC,
                [100, 0, 0],
                [0, 0, 0],
                Some([false; 3]),
            ),
            (
                [l(2, 1, 0, 0), l(2, 1, 0, 0), l(2, 1, 0, 0)],
                PANIC,
                [70, 30, 0],
                [0, 0, 0],
                None,
            ),
            (
                [l(4, 1, 0, 0), l(2, 2, 0, 0), l(2, 1, 0, 0)],
                PANIC,
                [35, 65, 0],
                [0, 0, 0],
                None,
            ),
            (
                [l(4, 1, 0, 0), l(4, 1, 0, 0), l(4, 1, 0, 0)],
                PANIC,
                [35, 35, 30],
                [0, 0, 0],
                None,
            ),
            (
                [l(5, 1, 0, 0), l(5, 1, 0, 0), l(5, 1, 0, 0)],
                PANIC,
                [34, 33, 33],
                [0, 0, 0],
                Some([true; 3]),
            ),
            (
                [l(5, 0, 0, 0), l(5, 0, 0, 0), l(5, 5, 0, 0)],
                PANIC,
                [0, 0, 100],
                [0, 0, 0],
                Some([false; 3]),
            ),
            (
                [l(5, 0, 0, 0), l(5, 0, 0, 0), l(5, 4, 0, 0)],
                PANIC,
                [0, 0, 100],
                [0, 0, 0],
                Some([false; 3]),
            ),
            (
                [l(5, 0, 0, 0), l(5, 0, 0, 0), l(5, 2, 0, 0)],
                PANIC,
                [34, 33, 33],
                [0, 0, 0],
                Some([true; 3]),
            ),
            (
                [l(5, 0, 5, 0), l(5, 2, 2, 0), l(5, 2, 0, 0)],
                PANIC,
                [0, 56, 44],
                [0, 0, 0],
                Some([false; 3]),
            ),
            (
                [l(5, 0, 0, 0), l(3, 0, 0, 0), l(2, 0, 0, 0)],
                PANIC,
                [50, 30, 20],
                [0, 0, 0],
                Some([true; 3]),
            ),
            (
                [l(5, 0, 0, 0), l(6, 2, 0, 0), l(3, 1, 0, 0)],
                PANIC,
                [37, 42, 21],
                [0, 0, 0],
                Some([true; 3]),
            ),
            (
                [l(5, 0, 1, 0), l(5, 0, 5, 0), l(5, 1, 0, 0)],
                PANIC,
                [0, 0, 28],
                [28, 44, 0],
                None,
            ),
            (
                [l(5, 0, 0, 0), l(5, 0, 2, 0), l(5, 0, 1, 0)],
                0,
                [0, 0, 0],
                [0, 67, 33],
                None,
            ),
            (
                [l(5, 0, 0, 0), l(5, 0, 2, 0), l(5, 0, 1, 0)],
                PANIC,
                [34, 33, 33],
                [0, 0, 0],
                None,
            ),
            (
                [l(0, 0, 0, 0), l(6, 0, 0, 0), l(3, 0, 0, 0)],
                PANIC,
                [0, 67, 33],
                [0, 0, 0],
                Some([true; 3]),
            ),
        ];
        for (levels, threshold, healthy, degraded, panic) in cases {
            let got = Loads::compute(&levels, threshold);
            assert_eq!(got.healthy, healthy, "healthy loads of {levels:?}");
            assert_eq!(got.degraded, degraded, "degraded loads of {levels:?}");
            if let Some(panic) = panic {
                assert_eq!(got.panic, panic, "panic of {levels:?}");
            }
        }
    }

    // LoadBalancerBaseTest.PrioritySelection: the loads and the priority chosen for hash 0.
    #[test]
    fn priority_selection() {
        let (h, _, _) = loads(&[level(1, 0, 0, 0), level(1, 0, 0, 0)]);
        assert_eq!(h, [50, 50]); // both in panic: by host count
        let two = Loads::compute(&[level(1, 0, 0, 0), level(2, 0, 0, 0)], PANIC);
        assert_eq!(two.healthy, [34, 66]);
        assert_eq!(two.choose(0), (0, Availability::Healthy));
        let three = [level(1, 0, 0, 0), level(2, 0, 0, 0), level(1, 1, 0, 0)];
        let tertiary = Loads::compute(&three, PANIC);
        assert_eq!(tertiary.healthy, [0, 0, 100]);
        assert_eq!(tertiary.choose(0), (2, Availability::Healthy));
        let back = Loads::compute(
            &[level(1, 1, 0, 0), level(2, 0, 0, 0), level(1, 1, 0, 0)],
            PANIC,
        );
        assert_eq!((back.healthy[0], back.healthy[2]), (100, 0));
        assert_eq!(back.choose(0), (0, Availability::Healthy));
    }

    /// The difference on purpose (module docs): nothing available and panic disabled. Envoy
    /// sets priority 0's load to 100 and leaves the others as its previous update left them
    /// (`recalculatePerPriorityState`: "we still need to have the loads add up to 100, but it
    /// doesn't matter which priority"); liblb gives them 0, whatever came before.
    #[test]
    fn nothing_available_with_panic_disabled_puts_the_load_on_priority_0() {
        let before = Loads::compute(&[level(2, 1, 0, 0), level(2, 2, 0, 0)], 0);
        assert_eq!(before.healthy, [70, 30]);
        let after = Loads::compute(&[level(2, 0, 0, 0), level(2, 0, 0, 0)], 0);
        assert_eq!(after.healthy, [100, 0]); // Envoy: [100, 30], the 30 stale
        assert_eq!(after.degraded, [0, 0]);
        assert_eq!(after.panic, [false, false]);
    }

    #[test]
    fn choose_walks_healthy_then_degraded_loads() {
        let loads = Loads {
            healthy: vec![0, 0, 28],
            degraded: vec![28, 44, 0],
            panic: vec![false; 3],
        };
        let chosen = |hash| loads.choose(hash);
        assert_eq!(chosen(0), (2, Availability::Healthy)); // point 1
        assert_eq!(chosen(27), (2, Availability::Healthy)); // point 28
        assert_eq!(chosen(28), (0, Availability::Degraded)); // point 29
        assert_eq!(chosen(55), (0, Availability::Degraded)); // point 56
        assert_eq!(chosen(56), (1, Availability::Degraded)); // point 57
        assert_eq!(chosen(99), (1, Availability::Degraded)); // point 100
        assert_eq!(chosen(u64::MAX), chosen(u64::MAX % 100));
    }

    // LoadBalancerBaseTest.BoundaryConditions, made exhaustive over small levels: the loads
    // always sum to 100 and each level's load stays within 0..=100.
    #[test]
    fn loads_always_sum_to_100() {
        let mut levels = Vec::new();
        for threshold in [0, 1, 50, 100, 200] {
            for a in 0..4u32 {
                for b in 0..4u32 {
                    for (ha, hb, da, db) in [
                        (0, 0, 0, 0),
                        (a, 0, 0, b),
                        (a / 2, b, a - a / 2, 0),
                        (0, b / 2, a, 0),
                    ] {
                        levels.clear();
                        levels.push(level(a, ha.min(a), da.min(a - ha.min(a)), 0));
                        levels.push(level(b, hb.min(b), db.min(b - hb.min(b)), 0));
                        levels.push(level(a + b, (a + b) / 3, 0, 1.min(a + b)));
                        let got = Loads::compute(&levels, threshold);
                        let sum: u32 = got.healthy.iter().chain(&got.degraded).sum();
                        assert_eq!(sum, 100, "{levels:?} at {threshold}");
                    }
                }
            }
        }
        assert_eq!(Loads::compute(&[], PANIC).healthy, Vec::<u32>::new());
    }
}
