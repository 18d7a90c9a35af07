//! Locality-weighted balancing: each locality's effective weight, and Envoy's
//! earliest-deadline-first (EDF) scheduler that picks localities in proportion to it.
//!
//! A locality (region / zone / sub-zone) carries a weight. Its *effective* weight scales that
//! weight by the locality's availability, the way a priority level's health is scaled (see
//! [`crate::priority`]): `weight × min(1, overprovisioning_factor / 100 × eligible / hosts)`,
//! where `eligible` are its healthy (or degraded) hosts and `hosts` its hosts but the excluded
//! ones. So a locality keeps its full share while 1/1.4 (71%) of its hosts are up, and gives it
//! up gradually below that. Localities are then picked by an EDF schedule over the effective
//! weights: each entry is due `1 / weight` after its last pick and the earliest deadline goes
//! first (ties: the entry queued first), which is weighted round robin with real-valued weights
//! in O(log n) per pick. A schedule can start as if `picks` picks had already been made, so
//! clients seeded differently start at different points of the rotation instead of all sending
//! their first request to the same locality.
//!
//! Sources: envoyproxy/envoy `source/extensions/load_balancing_policies/common/
//! locality_wrr.cc` (`LocalityWrr::effectiveLocalityWeight`, `rebuildLocalityScheduler`:
//! entries only for localities of positive effective weight, no schedule when none) and
//! `source/common/upstream/edf_scheduler.h` (`EdfScheduler::pickAndAdd`, `add`,
//! `createWithPicks` with its 1e-13 weight epsilon and floor-pick correction), in the same
//! floating-point operations and order. The tests port `test/extensions/load_balancing_policies/
//! common/locality_wrr_test.cc` (`LocalityWrrTest`, `OverProvisioningFactorTest`) and the EDF
//! scheduler's expectations from `test/common/upstream/edf_scheduler_test.cc`.
//!
//! **Zone-aware routing** ([`ZoneRouting`]) keeps a caller's requests in its own locality as far
//! as that locality's share of the upstream hosts covers its share of the callers, and sends the
//! rest to the localities with capacity to spare, in proportion to it. Source: the same
//! `load_balancer_impl.cc`, `ZoneAwareLoadBalancerBase::regenerateLocalityRoutingStructures`,
//! `earlyExitNonLocalityRouting`, `calculateLocalityPercentages` (shares in 1/10000ths, integer
//! division) and `tryChooseLocalLocalityHosts`; its tests port the expectations of
//! `test/extensions/load_balancing_policies/round_robin/round_robin_lb_test.cc`
//! (`ZoneAwareRoutingSmallZone`, `ZoneAwareNoMatchingZones`, `ZoneAwareEmptyLocalities`,
//! `NoZoneAwareNotEnoughLocalZones`, `NoZoneAwareNotEnoughUpstreamZones`), whose mocked random
//! draws become the draws given to [`ZoneRouting::choose`].
//!
//! An [`Edf`] schedule is a single owner's (`&mut self`), as Envoy keeps one per worker thread.

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Ordering;

/// A locality as its effective weight sees it: its configured weight and its hosts by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalityHosts {
    /// The locality's weight (0: never picked).
    pub weight: u32,
    /// All its hosts, excluded ones included.
    pub hosts: u32,
    /// Its hosts that may take this kind of traffic (healthy ones, or degraded ones).
    pub eligible: u32,
    /// Its excluded hosts (left out of the availability ratio).
    pub excluded: u32,
}

impl LocalityHosts {
    /// Envoy's `effectiveLocalityWeight`: `weight × min(1, factor/100 × eligible/counted)`,
    /// with `counted` = hosts − excluded; 0 for a locality with no counted host.
    pub fn effective_weight(&self, overprovisioning_factor: u32) -> f64 {
        let counted = self.hosts.saturating_sub(self.excluded);
        if counted == 0 {
            return 0.0;
        }
        let ratio = 1.0 * f64::from(self.eligible) / f64::from(counted);
        let effective = (f64::from(overprovisioning_factor) / 100.0 * ratio).min(1.0);
        f64::from(self.weight) * effective
    }
}

/// Envoy's `LocalityWrr` for one kind of host (healthy or degraded): a schedule over the
/// localities of positive effective weight, or none (`None`) when every locality's effective
/// weight is 0 (then no locality can be chosen for this kind).
pub fn locality_schedule(
    localities: &[LocalityHosts],
    overprovisioning_factor: u32,
    picks: u32,
) -> Option<Edf> {
    let entries: Vec<(usize, f64)> = localities
        .iter()
        .enumerate()
        .map(|(i, l)| (i, l.effective_weight(overprovisioning_factor)))
        .filter(|(_, w)| *w > 0.0)
        .collect();
    (!entries.is_empty()).then(|| Edf::with_picks(&entries, picks))
}

/// One queued entry: the item, its weight, when it is due, and its place in the insertion order
/// (ties on the deadline go to the earlier one).
#[derive(Debug, Clone, Copy)]
struct Entry {
    deadline: f64,
    order: u64,
    item: usize,
    weight: f64,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so the max-heap pops the earliest deadline, then the lowest order.
    fn cmp(&self, other: &Entry) -> Ordering {
        other
            .deadline
            .total_cmp(&self.deadline)
            .then(other.order.cmp(&self.order))
    }
}

/// Envoy's `EdfScheduler` over items (indices) with fixed positive weights.
#[derive(Debug, Clone)]
pub struct Edf {
    now: f64,
    order: u64,
    queue: BinaryHeap<Entry>,
}

/// `createWithPicks` limits its pre-picks to `u32::MAX / 10`.
const MOST_PICKS: u32 = 429_496_729;

impl Edf {
    /// An empty schedule.
    pub fn new() -> Edf {
        Edf {
            now: 0.0,
            order: 0,
            queue: BinaryHeap::new(),
        }
    }

    /// Queues `item` with `weight` (> 0): due `1 / weight` from now (Envoy's `add`).
    pub fn add(&mut self, item: usize, weight: f64) {
        debug_assert!(weight > 0.0, "EDF weights are positive");
        let deadline = self.now + 1.0 / weight;
        self.queue.push(Entry {
            deadline,
            order: self.order,
            item,
            weight,
        });
        self.order += 1;
    }

    /// The next item, queued again with its weight (Envoy's `pickAndAdd`); `None` when empty.
    pub fn pick(&mut self) -> Option<usize> {
        let entry = self.queue.pop()?;
        self.now = entry.deadline;
        self.add(entry.item, entry.weight);
        Some(entry.item)
    }

    /// Envoy's `createWithPicks`: the schedule of `entries` (item, weight > 0), in that order,
    /// as it stands after `picks` picks (taken modulo `u32::MAX / 10`). Most picks are emulated
    /// at once (each entry's share, rounded down), the few left are made one by one.
    pub fn with_picks(entries: &[(usize, f64)], picks: u32) -> Edf {
        let picks = picks % MOST_PICKS;
        if entries.is_empty() {
            return Edf::new();
        }
        // A tiny epsilon keeps weights that are multiples of each other from landing exactly
        // on each other's deadlines (Envoy's comment: 25 and 75 with 23 picks).
        let weighted = |w: f64| w + 1e-13;
        let sum = entries.iter().fold(0.0, |sum, (_, w)| sum + weighted(*w));
        let mut queue = Vec::with_capacity(entries.len());
        let mut picked: u32 = 0;
        let mut now: f64 = 0.0;
        for (i, (item, w)) in entries.iter().enumerate() {
            let weight = weighted(*w);
            let mut floor = (weight * f64::from(picks) / sum) as u32;
            // Floating point can make floor(A·B) exceed A·B: one pick fewer then.
            if floor > 0 && f64::from(floor) / weight >= f64::from(picks) / sum {
                floor -= 1;
            }
            now = now.max(f64::from(floor) / weight);
            queue.push(Entry {
                deadline: f64::from(floor + 1) / weight,
                order: i as u64,
                item: *item,
                weight: *w,
            });
            picked += floor;
        }
        let mut edf = Edf {
            now,
            order: entries.len() as u64,
            queue: BinaryHeap::from(queue),
        };
        while picked < picks {
            edf.pick();
            picked += 1;
        }
        edf
    }
}

impl Default for Edf {
    fn default() -> Edf {
        Edf::new()
    }
}

/// What zone-aware routing knows of the upstream localities and of the caller's own fleet (the
/// local cluster), for priority 0. Localities are in the upstream's order; with
/// `upstream_has_local`, the first is the caller's own.
#[derive(Debug, Clone, Copy)]
pub struct ZoneInputs<'a> {
    /// Healthy upstream hosts per upstream locality (or their weights, for a weight basis).
    pub upstream: &'a [u64],
    /// Whether `upstream[0]` is the caller's own locality.
    pub upstream_has_local: bool,
    /// The caller's fleet per upstream locality, aligned with `upstream` (0 where it has none).
    pub local: &'a [u64],
    /// The caller's whole fleet, localities without upstream hosts included.
    pub local_total: u64,
    /// How many localities the caller's fleet spans.
    pub local_localities: usize,
    /// The caller's fleet in the caller's own locality.
    pub local_own: u64,
    /// No routing below this many healthy upstream hosts (Envoy's `min_cluster_size`, 6).
    pub min_cluster_size: u64,
    /// Route directly to the own locality whenever it has a healthy host
    /// (`force_locality_direct_routing`).
    pub force_direct: bool,
}

/// The routing state of zone-aware routing: all requests to the caller's own locality, or a
/// share of them there and the rest to the others by their residual capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneRouting {
    /// Every request to the own locality (index 0): its upstream share covers its callers'.
    Direct,
    /// `local_percent` (in 1/10000ths) of the requests to the own locality, the others to
    /// locality `i` with probability proportional to its spare capacity (`residual` holds the
    /// running sums, in 1/10000ths).
    Residual {
        /// Requests routed locally, in 1/10000ths.
        local_percent: u64,
        /// Running sums of the localities' spare capacity, in 1/10000ths.
        residual: Vec<u64>,
    },
}

impl ZoneRouting {
    /// The routing for `inputs`, or `None` where Envoy does no locality routing: fewer than two
    /// upstream localities, the caller's fleet in fewer than two (unless forced direct) or none
    /// in its own locality, or fewer healthy upstream hosts than `min_cluster_size`.
    pub fn new(inputs: &ZoneInputs<'_>) -> Option<ZoneRouting> {
        let upstream_total: u64 = inputs.upstream.iter().sum();
        if inputs.upstream.len() < 2
            || (inputs.local_localities < 2 && !inputs.force_direct)
            || inputs.local_own == 0
            || upstream_total < inputs.min_cluster_size
        {
            return None;
        }
        // Each locality's share of the caller's fleet and of the upstream hosts, 1/10000ths.
        let share = |part: u64, total: u64| (10_000 * part).checked_div(total).unwrap_or(0);
        let percentages: Vec<(u64, u64)> = (inputs.upstream.iter().enumerate())
            .map(|(i, up)| match *up {
                0 => (0, 0),
                up => (
                    share(
                        inputs.local.get(i).copied().unwrap_or(0),
                        inputs.local_total,
                    ),
                    share(up, upstream_total),
                ),
            })
            .collect();
        let (local0, upstream0) = percentages[0];
        if inputs.upstream_has_local
            && ((upstream0 > 0 && upstream0 >= local0) || inputs.force_direct)
        {
            return Some(ZoneRouting::Direct);
        }
        let local_percent = if inputs.upstream_has_local && local0 > 0 {
            upstream0 * 10_000 / local0
        } else {
            0
        };
        let mut sum = 0;
        let residual = (percentages.iter().enumerate())
            .map(|(i, (local, upstream))| {
                if !(i == 0 && inputs.upstream_has_local) && upstream > local {
                    sum += upstream - local;
                }
                sum
            })
            .collect();
        Some(ZoneRouting::Residual {
            local_percent,
            residual,
        })
    }

    /// Envoy's `tryChooseLocalLocalityHosts`: the locality a request goes to, `draw()` giving
    /// 64 random bits when needed (one to decide local or not, one for the locality).
    pub fn choose(&self, mut draw: impl FnMut() -> u64) -> usize {
        let (local_percent, residual) = match self {
            ZoneRouting::Direct => return 0,
            ZoneRouting::Residual {
                local_percent,
                residual,
            } => (*local_percent, residual),
        };
        if draw() % 10_000 < local_percent {
            return 0;
        }
        let total = residual.last().copied().unwrap_or(0);
        if total == 0 {
            // Rounding left no spare capacity anywhere: any locality.
            return (draw() % residual.len().max(1) as u64) as usize;
        }
        let threshold = draw() % total;
        residual
            .iter()
            .position(|sum| threshold < *sum)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::DEFAULT_OVERPROVISIONING_FACTOR as OPF;
    use alloc::vec;

    fn healthy(weight: u32, hosts: u32, eligible: u32) -> LocalityHosts {
        LocalityHosts {
            weight,
            hosts,
            eligible,
            excluded: 0,
        }
    }

    fn picks(edf: &mut Option<Edf>, n: usize) -> Vec<usize> {
        let edf = edf.as_mut().expect("a schedule");
        (0..n).map(|_| edf.pick().unwrap()).collect()
    }

    // locality_wrr_test.cc: LocalityWrrTest.HostSetEmpty, AllHostsUnhealthy, AllZeroWeights
    #[test]
    fn no_schedule_without_eligible_hosts_or_weight() {
        assert!(locality_schedule(&[], OPF, 0).is_none());
        let unhealthy = [healthy(1, 1, 0), healthy(1, 1, 0), healthy(1, 1, 0)];
        assert!(locality_schedule(&unhealthy, OPF, 0).is_none());
        assert!(locality_schedule(&[healthy(0, 1, 1), healthy(0, 1, 1)], OPF, 0).is_none());
    }

    // LocalityWrrTest.UnweightedLocalities, WeightedLocalities, MissingWeight
    #[test]
    fn weighted_round_robin_over_localities() {
        let mut equal = locality_schedule(&[healthy(1, 1, 1); 3], OPF, 0);
        assert_eq!(picks(&mut equal, 6), [0, 1, 2, 0, 1, 2]);
        let mut weighted = locality_schedule(&[healthy(1, 1, 1), healthy(2, 1, 1)], OPF, 0);
        assert_eq!(picks(&mut weighted, 6), [1, 0, 1, 1, 0, 1]);
        let missing = [healthy(1, 1, 1), healthy(0, 1, 1), healthy(1, 1, 1)];
        assert_eq!(
            picks(&mut locality_schedule(&missing, OPF, 0), 6),
            [0, 2, 0, 2, 0, 2]
        );
    }

    // LocalityWrrTest.NotWarmedHostsLocality: excluded hosts leave the ratio.
    #[test]
    fn excluded_hosts_do_not_lower_a_localitys_weight() {
        let a = LocalityHosts {
            weight: 1,
            hosts: 3,
            eligible: 1,
            excluded: 2,
        };
        let mut edf = locality_schedule(&[a, healthy(1, 2, 2)], OPF, 0);
        assert_eq!(picks(&mut edf, 4), [0, 1, 0, 1]);
    }

    // LocalityWrrTest.WeightedAllChosen: one pick from each of the schedules seeded 0 to 9
    // lands on the localities in proportion to their weights.
    #[test]
    fn seeded_schedules_start_in_proportion_to_the_weights() {
        let localities = [healthy(1, 1, 1), healthy(6, 1, 1), healthy(3, 1, 1)];
        let mut count = [0; 3];
        for seed in 0..10 {
            count[picks(&mut locality_schedule(&localities, OPF, seed), 1)[0]] += 1;
        }
        assert_eq!(count, [1, 6, 3]);
    }

    fn counts(localities: &[LocalityHosts], factor: u32, n: usize) -> Vec<usize> {
        let mut count = vec![0; localities.len()];
        if let Some(mut edf) = locality_schedule(localities, factor, 0) {
            for _ in 0..n {
                count[edf.pick().unwrap()] += 1;
            }
        }
        count
    }

    // LocalityWrrTest.UnhealthyFailover: locality A (weight 1, 5 hosts) fails host by host
    // beside B (weight 2, 1 healthy host); picks of 100.
    #[test]
    fn unhealthy_failover() {
        let expected = [
            (5, [33, 67]),
            (4, [33, 67]),
            (3, [29, 71]),
            (2, [22, 78]),
            (1, [12, 88]),
        ];
        for (up, picks) in expected {
            assert_eq!(
                counts(&[healthy(1, 5, up), healthy(2, 1, 1)], OPF, 100),
                picks,
                "{up} up"
            );
        }
        assert_eq!(
            counts(&[healthy(1, 5, 0), healthy(2, 1, 1)], OPF, 100),
            [0, 100]
        );
    }

    // OverProvisioningFactorTest.LocalityPickChanges: healthy ratios (1/2, 1), weights 1 and 1.
    #[test]
    fn overprovisioning_factor_changes_locality_picks() {
        let localities = [healthy(1, 2, 1), healthy(1, 1, 1)];
        assert_eq!(counts(&localities, 100, 100), [33, 67]);
        assert_eq!(counts(&localities, 200, 100), [50, 50]);
    }

    /// The queue's entries, earliest first, as (item, deadline): what Envoy's
    /// `compareEdfSchedulers` reads.
    fn drained(edf: &Edf) -> Vec<(usize, f64)> {
        let mut queue = edf.queue.clone();
        core::iter::from_fn(|| queue.pop().map(|e| (e.item, e.deadline))).collect()
    }

    fn assert_same_queue(a: &Edf, b: &Edf) {
        let (a, b) = (drained(a), drained(b));
        assert_eq!(a.len(), b.len());
        for (i, ((ia, da), (ib, db))) in a.iter().zip(&b).enumerate() {
            assert_eq!(ia, ib, "entry {i}");
            assert!((da - db).abs() < 1e-5, "deadline {i}: {da} and {db}");
        }
    }

    // edf_scheduler_test.cc: EdfSchedulerTest.Empty, Unweighted, Weighted
    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (24,000 heap picks: minutes interpreted).
    fn edf_round_robin_and_weighted() {
        assert_eq!(Edf::new().pick(), None);
        let mut rr = Edf::new();
        for i in 0..128 {
            rr.add(i, 1.0);
        }
        for _ in 0..128 {
            for i in 0..128 {
                assert_eq!(rr.pick(), Some(i));
            }
        }
        let mut weighted = Edf::new();
        for i in 0..128 {
            weighted.add(i, (i + 1) as f64);
        }
        let mut count = [0; 128];
        for _ in 0..128 * 129 / 2 {
            count[weighted.pick().unwrap()] += 1;
        }
        assert!(
            count.iter().enumerate().all(|(i, c)| *c == i + 1),
            "{count:?}"
        );
    }

    // EdfSchedulerTest.SchedulerWithZeroPicksEqualToEmptyWithAddedEntries and
    // SchedulerWithSomePicksEqualToEmptyWithAddedEntries
    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (a million picks: hours interpreted).
    fn with_picks_equals_a_schedule_that_made_the_picks() {
        let ones: Vec<(usize, f64)> = (0..128).map(|i| (i, (i + 1) as f64)).collect();
        let mut added = Edf::new();
        for (item, w) in &ones {
            added.add(*item, *w);
        }
        assert_same_queue(&added, &Edf::with_picks(&ones, 0));
        let spread: Vec<(usize, f64)> = (0..128)
            .map(|i| (i, (100.5 - 0.01) / 128.0 * i as f64 + 0.01))
            .collect();
        for picks in [5u32, 140, 501, 123_456, 894_571] {
            let mut picked = Edf::new();
            for (item, w) in &spread {
                picked.add(*item, *w);
            }
            for _ in 0..picks {
                picked.pick();
            }
            assert_same_queue(&picked, &Edf::with_picks(&spread, picks));
        }
        assert_eq!(Edf::with_picks(&[], 123).pick(), None);
    }

    // EdfSchedulerTest.SchedulerWithRandomPicksFirstPickDistribution: the first pick of
    // schedules made with random pre-picks follows the weights (within 1 point; 100,000
    // schedules each, fixed seed, where Envoy draws 400,000).
    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy safe code (400,000 schedules: hours interpreted).
    fn first_picks_of_randomly_pre_picked_schedules_follow_the_weights() {
        let sets: [&[f64]; 4] = [
            &[25.0, 75.0],
            &[1.0, 99.0],
            &[50.0, 50.0],
            &[1.0, 20.0, 79.0],
        ];
        let mut rng = crate::SplitMix64::new(7);
        for weights in sets {
            let entries: Vec<(usize, f64)> = weights.iter().copied().enumerate().collect();
            let mut count = vec![0u32; weights.len()];
            const ROUNDS: u32 = 100_000;
            for _ in 0..ROUNDS {
                let picks = rng.next() as u32;
                count[Edf::with_picks(&entries, picks).pick().unwrap()] += 1;
            }
            for (w, c) in weights.iter().zip(&count) {
                let observed = 100.0 * f64::from(*c) / f64::from(ROUNDS);
                assert!((observed - w).abs() < 1.0, "{weights:?}: {count:?}");
            }
        }
    }

    fn zones<'a>(
        upstream: &'a [u64],
        local: &'a [u64],
        has_local: bool,
        min: u64,
    ) -> ZoneInputs<'a> {
        ZoneInputs {
            upstream,
            upstream_has_local: has_local,
            local,
            local_total: local.iter().sum(),
            local_localities: local.iter().filter(|n| **n > 0).count(),
            local_own: local.first().copied().unwrap_or(0),
            min_cluster_size: min,
            force_direct: false,
        }
    }

    /// The localities `routing` chooses for each list of draws (Envoy's mocked `random()`
    /// calls after the first, which chose the priority).
    fn chosen(routing: &ZoneRouting, draws: &[&[u64]]) -> Vec<usize> {
        draws
            .iter()
            .map(|d| {
                let mut d = d.iter();
                routing.choose(|| *d.next().expect("a draw"))
            })
            .collect()
    }

    // round_robin_lb_test.cc: RoundRobinLoadBalancerTest.ZoneAwareRoutingSmallZone. Upstream
    // A 1, B 2, C 2 hosts; the caller's fleet 1 in each: A routes 6000/10000 locally.
    #[test]
    fn zone_aware_routing_small_zone() {
        let routing = ZoneRouting::new(&zones(&[1, 2, 2], &[1, 1, 1], true, 5)).unwrap();
        let expected = ZoneRouting::Residual {
            local_percent: 6000,
            residual: vec![0, 667, 1334],
        };
        assert_eq!(routing, expected);
        assert_eq!(chosen(&routing, &[&[100], &[9999, 2]]), [0, 1]);
    }

    // ZoneAwareNoMatchingZones: upstream D, E, F; the caller's fleet in A, B, C (no local
    // upstream locality): everything cross-zone, a third each (3333 x 3: rounding).
    #[test]
    fn zone_aware_no_matching_zones() {
        let inputs = ZoneInputs {
            local_total: 3,
            local_localities: 3,
            local_own: 1,
            ..zones(&[1, 1, 1], &[0, 0, 0], false, 3)
        };
        let routing = ZoneRouting::new(&inputs).unwrap();
        let draws: [&[u64]; 5] = [&[0, 3332], &[0, 3333], &[0, 6665], &[0, 6666], &[0, 9998]];
        assert_eq!(chosen(&routing, &draws), [0, 1, 1, 2, 2]);
    }

    // ZoneAwareEmptyLocalities: upstream localities A..I with 0,0,2,1,2,0,1,0 hosts (the
    // caller's own, A, has none); the caller's fleet 1 in A, C, D, F.
    #[test]
    fn zone_aware_empty_localities() {
        let upstream = [0, 0, 2, 1, 2, 0, 1, 0];
        let local = [1, 0, 1, 0, 1, 0, 0, 0];
        let inputs = ZoneInputs {
            local_total: 4,
            local_localities: 4,
            local_own: 1,
            ..zones(&upstream, &local, true, 3)
        };
        let routing = ZoneRouting::new(&inputs).unwrap();
        let expected = ZoneRouting::Residual {
            local_percent: 0,
            residual: vec![0, 0, 833, 2499, 3332, 3332, 4998, 4998],
        };
        assert_eq!(routing, expected);
        let draws: [&[u64]; 4] = [&[0, 0], &[0, 832], &[0, 833], &[0, 2498]];
        assert_eq!(chosen(&routing, &draws), [2, 2, 3, 3]);
    }

    // NoZoneAwareNotEnoughLocalZones, NoZoneAwareNotEnoughUpstreamZones, and a cluster under
    // min_cluster_size: no locality routing.
    #[test]
    fn no_zone_aware_routing_when_envoy_skips_it() {
        assert_eq!(ZoneRouting::new(&zones(&[1, 1], &[1, 0], true, 2)), None);
        assert_eq!(ZoneRouting::new(&zones(&[1], &[1, 1], true, 1)), None);
        assert_eq!(
            ZoneRouting::new(&zones(&[2, 2, 1], &[1, 1, 1], true, 6)),
            None
        );
        // Forced direct routing needs only a healthy own locality.
        let forced = ZoneInputs {
            force_direct: true,
            ..zones(&[1, 1], &[1, 0], true, 2)
        };
        assert_eq!(ZoneRouting::new(&forced), Some(ZoneRouting::Direct));
        // The own locality's upstream share covers its callers': everything stays local.
        let direct = ZoneRouting::new(&zones(&[2, 1, 1], &[1, 1, 1], true, 3)).unwrap();
        assert_eq!(
            (direct.clone(), chosen(&direct, &[&[]])),
            (ZoneRouting::Direct, vec![0])
        );
    }
}
