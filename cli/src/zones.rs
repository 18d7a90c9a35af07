//! `lb simulate --scenario zones`: callers and backends spread over zones, without and with
//! zone-aware routing, then failures that shift the traffic between zones and spill it to a
//! priority-1 fallback fleet (issue 24; Envoy's rules, see `liblb_core::route`).
//!
//! **Model.** Callers in `--callers` zones (default `50,30,20`: instances in zones a, b and c,
//! each instance sending the same rate, so zone a sends half of the requests). Priority-0
//! backends in the same zones, `--zone-backends` per zone (default `4,4,2`, locality
//! `east/<zone>`), and a priority-1 fallback fleet of `--fallback-backends` (default 3) in
//! another region (`west/f`). Each backend is a FIFO queue before `--servers` servers
//! (default 1) with exponential service times of mean `--service-ms` (default 10 ms). Requests
//! arrive as one Poisson process at `--utilisation` x priority 0's full capacity (default
//! 60%) for `--duration-s` (default 60 s) per run, each from a caller zone drawn by the
//! callers' shares. Each caller zone routes through a balancer of its own over the same
//! backends (the caller's locality is a balancer's setting), with the same algorithm (default
//! `round_robin`); with zone-aware routing on, each has `set_local_locality` (its zone) and
//! `set_local_localities` (the callers per zone). A request served outside its caller's zone
//! takes `--cross-zone-ms` more (default 1 ms: the round trip between zones, added to its
//! latency; the backend's queue is not affected).
//!
//! **Phases**, each run without and with zone-aware routing, from a fresh fleet and the same
//! arrivals: (1) every backend up; (2) half of zone a's backends down (`mark_down`); (3) more
//! backends down, zone a's first, then b's and so on, until priority 0 keeps as few as
//! zone-aware routing needs (`zone_aware_min_cluster_size`, 6) but no fewer than half (the
//! panic threshold), below 1/1.4 of it (by default 6 of 10: all of zone a down):
//! priority 0's share of the traffic falls to min(100, overprovisioning factor x usable /
//! backends) percent (84%) and the rest spills to the fallback fleet.
//!
//! **Measured** per run and caller zone: where its requests were served (per zone and the
//! fallback fleet), the share served outside its zone (cross-zone) and the p99 latency; per
//! destination, its load (arrival rate over its usable backends' capacity). **Expected**: the
//! same shares as Envoy's rules give them, computed here from the inputs ([`expected`]): the
//! priority load, then zone-aware routing's `calculateLocalityPercentages` (a caller zone
//! keeps its requests local as far as its share of the usable priority-0 backends covers its
//! share of the callers, and sends the rest to the zones whose backend share exceeds their
//! caller share, in proportion to the excess), else uniform over the usable backends.

use crate::Failure;
use crate::chart::{self, BarGroup};
use crate::events::unit;
use crate::slow_node::{balancer_seed, exp1};
use liblb_core::{Algorithm, Balancer, Lease, ManualClock, Options, Outcome, SplitMix64};
use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Most zones (named a to z).
const MAX_ZONES: usize = 26;

/// Most backends per zone and in the fallback fleet.
const MAX_ZONE_BACKENDS: usize = 1_000;

/// Most requests per run.
const MAX_REQUESTS: f64 = 10_000_000.0;

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    /// Caller instances per zone.
    pub callers: Vec<u64>,
    /// Priority-0 backends per zone.
    pub backends: Vec<usize>,
    /// Priority-1 backends, in another region.
    pub fallback: usize,
    pub servers: usize,
    pub service_ms: f64,
    pub cross_zone_ms: f64,
    /// Arrival rate as a share of priority 0's full capacity.
    pub utilisation: f64,
    pub duration_s: f64,
    pub seed: u64,
}

/// Parses a comma list of counts (`50,30,20`) for `flag`.
pub(crate) fn counts(flag: &str, list: &str) -> Result<Vec<u64>, String> {
    list.split(',')
        .map(|c| c.trim().parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| format!("{flag} takes counts per zone, as 50,30,20; got {list:?}"))
}

/// The name of zone `z`: a, b, c, ...
pub(crate) fn zone_name(z: usize) -> String {
    char::from(b'a' + z as u8).to_string()
}

/// The locality of zone `z`, and of the fallback fleet.
fn locality(z: usize) -> String {
    format!("east/{}", zone_name(z))
}
const FALLBACK_LOCALITY: &str = "west/f";

impl Params {
    pub fn zones(&self) -> usize {
        self.backends.len()
    }

    /// Priority-0 backends.
    pub fn p0(&self) -> usize {
        self.backends.iter().sum()
    }

    /// One backend's service rate, requests per second.
    fn backend_rate(&self) -> f64 {
        self.servers as f64 * 1e3 / self.service_ms
    }

    /// Priority 0's full capacity, requests per second.
    pub fn capacity(&self) -> f64 {
        self.p0() as f64 * self.backend_rate()
    }

    /// Arrival rate, requests per second.
    pub fn rate(&self) -> f64 {
        self.utilisation * self.capacity()
    }

    /// The zone of backend `i` (the fallback fleet's is `zones()`).
    pub fn zone_of(&self, i: usize) -> usize {
        let mut end = 0;
        for (z, n) in self.backends.iter().enumerate() {
            end += n;
            if i < end {
                return z;
            }
        }
        self.zones()
    }

    /// Each caller zone's share of the requests.
    pub fn caller_shares(&self) -> Vec<f64> {
        let total: u64 = self.callers.iter().sum();
        (self.callers.iter())
            .map(|c| *c as f64 / total as f64)
            .collect()
    }

    /// The backends: zone by zone at priority 0 (`a0`, `a1`, ..., `b0`, ...), then the
    /// fallback fleet at priority 1 (`f0`, ...), tagged with their index.
    pub fn nodes(&self) -> Vec<liblb_core::Node> {
        let mut nodes = Vec::new();
        for (z, n) in self.backends.iter().enumerate() {
            for j in 0..*n {
                let tag = nodes.len() as u64;
                let id = format!("{}{j}", zone_name(z));
                nodes.push(liblb_core::Node::with_tag(id, 1, tag).located(locality(z), 0));
            }
        }
        for j in 0..self.fallback {
            let tag = nodes.len() as u64;
            let node = liblb_core::Node::with_tag(format!("f{j}"), 1, tag);
            nodes.push(node.located(FALLBACK_LOCALITY, 1));
        }
        nodes
    }

    /// How many priority-0 backends phase 3 leaves usable: as few as keep zone-aware routing
    /// on (`zone_aware_min_cluster_size`) and priority 0 out of panic (half of it, the default
    /// `panic_threshold`), if that is below 1/overprovisioning factor of priority 0 (so it
    /// spills); else half of priority 0 (zone-aware routing is then off: fewer backends than
    /// its minimum).
    pub fn spill_usable(&self, options: &Options) -> usize {
        let n0 = self.p0();
        let half = n0.div_ceil(2);
        let keep = half.max(usize::try_from(options.zone_aware_min_cluster_size).unwrap_or(n0));
        let spills =
            |u: usize| u as u64 * u64::from(options.overprovisioning_factor) < 100 * n0 as u64;
        if spills(keep) { keep } else { half }
    }

    /// The phases: every backend up; half of zone a's down; priority 0 down to
    /// [`Params::spill_usable`] (zone a's first, then b's, ...).
    pub fn phases(&self, options: &Options) -> Vec<Phase> {
        let all = self.p0() + self.fallback;
        let down_first = |count: usize| (0..all).map(|i| i < count).collect::<Vec<bool>>();
        let half_a = self.backends[0] / 2;
        let usable = self.spill_usable(options);
        let down = self.p0() - usable;
        // Which zones that takes down, wholly or partly.
        let mut hit = Vec::new();
        let mut left = down;
        for (z, n) in self.backends.iter().enumerate() {
            if left == 0 {
                break;
            }
            let taken = left.min(*n);
            hit.push(if taken == *n {
                format!("all of {}", zone_name(z))
            } else {
                format!("{taken} of {}", zone_name(z))
            });
            left -= taken;
        }
        vec![
            Phase {
                name: "every backend up".into(),
                down: down_first(0),
            },
            Phase {
                name: format!("half of zone a down ({half_a} of {})", self.backends[0]),
                down: down_first(half_a),
            },
            Phase {
                name: format!("{} down", hit.join(" and ")),
                down: down_first(down),
            },
        ]
    }

    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.callers.len() != self.backends.len() {
            return Err(format!(
                "--callers and --zone-backends must list the same zones, got {} and {}",
                self.callers.len(),
                self.backends.len()
            ));
        }
        crate::bounded("the number of zones", self.zones(), 2, MAX_ZONES)?;
        if self.callers.contains(&0) || self.callers.iter().any(|c| *c > 1_000_000) {
            return Err("--callers must be from 1 to 1000000 per zone".into());
        }
        for n in &self.backends {
            crate::bounded("--zone-backends", *n, 1, MAX_ZONE_BACKENDS)?;
        }
        if self.backends[0] < 2 {
            return Err("--zone-backends: zone a needs at least 2 (half of it fails)".into());
        }
        if self.p0() < 3 {
            return Err("--zone-backends: at least 3 in all (half of them fail)".into());
        }
        crate::bounded("--fallback-backends", self.fallback, 1, MAX_ZONE_BACKENDS)?;
        crate::bounded("--servers", self.servers, 1, 1_000)?;
        if !(self.service_ms.is_finite() && self.service_ms > 0.0 && self.service_ms <= 3_600_000.0)
        {
            return Err(format!(
                "--service-ms must be a positive number of milliseconds up to an hour, got {}",
                crate::num(self.service_ms)
            ));
        }
        if !(self.cross_zone_ms.is_finite()
            && self.cross_zone_ms >= 0.0
            && self.cross_zone_ms <= 3_600_000.0)
        {
            return Err(format!(
                "--cross-zone-ms must be from 0 to an hour in milliseconds, got {}",
                crate::num(self.cross_zone_ms)
            ));
        }
        if !(self.utilisation > 0.0 && self.utilisation < 1.0) {
            return Err(format!(
                "--utilisation must be above 0 and below 1 (a share of priority 0's capacity), got {}",
                crate::num(self.utilisation)
            ));
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= 86_400.0) {
            return Err(format!(
                "--duration-s must be above 0 and at most a day (86400), got {}",
                crate::num(self.duration_s)
            ));
        }
        let requests = self.rate() * self.duration_s;
        if requests > MAX_REQUESTS {
            return Err(format!(
                "a run would have about {} requests, more than {MAX_REQUESTS}: lower --duration-s or --utilisation",
                crate::num(requests.round())
            ));
        }
        Ok(())
    }
}

/// A phase: which backends are down (by index; the fallback fleet never is).
#[derive(Debug, Clone)]
pub(crate) struct Phase {
    pub name: String,
    pub down: Vec<bool>,
}

impl Phase {
    /// Usable backends per zone (the fallback fleet last).
    pub fn usable(&self, params: &Params) -> Vec<u64> {
        let mut usable = vec![0u64; params.zones() + 1];
        for (i, down) in self.down.iter().enumerate() {
            usable[params.zone_of(i)] += u64::from(!down);
        }
        usable
    }
}

/// What Envoy's rules route where: priority 0's share of the traffic in percent, whether
/// zone-aware routing applies, and per caller zone the share of its requests each
/// destination gets (the zones, then the fallback fleet).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expected {
    pub p0_percent: u64,
    pub routed: bool,
    pub shares: Vec<Vec<f64>>,
}

/// Envoy's rules applied to the scenario's inputs, independently of the balancer's code:
/// `LoadBalancerBase::recalculatePerPriorityState` for the priority load (min(100, factor x
/// usable / hosts), integer percent; the fallback fleet is all up and takes the rest) and
/// `ZoneAwareLoadBalancerBase::calculateLocalityPercentages` / `tryChooseLocalLocalityHosts`
/// for priority 0 (here in real numbers: Envoy's 1/10000ths move a share by at most 0.0001).
/// Panic is not modelled: the phases keep half of priority 0 or more, at or above the default
/// panic threshold of 50%.
pub(crate) fn expected(
    params: &Params,
    options: &Options,
    phase: &Phase,
    zone_aware: bool,
) -> Expected {
    let zones = params.zones();
    let usable = phase.usable(params);
    let u0: u64 = usable[..zones].iter().sum();
    let n0 = params.p0() as u64;
    let p0_percent = (u64::from(options.overprovisioning_factor) * u0 / n0).min(100);
    let p0 = p0_percent as f64 / 100.0;
    let callers = params.caller_shares();
    // Envoy routes by zone only with two upstream localities or more (every zone has
    // backends here), callers in two or more, and `min_cluster_size` usable hosts.
    let routed = zone_aware && u0 >= options.zone_aware_min_cluster_size && u0 > 0;
    let enabled = f64::from(options.zone_aware_routing_enabled.min(100)) / 100.0;
    // Each zone's share of the usable priority-0 backends, and of the callers (0 where the
    // zone has no usable backend, as Envoy's percentages have it).
    let up: Vec<f64> = (usable[..zones].iter())
        .map(|u| *u as f64 / u0.max(1) as f64)
        .collect();
    let local: Vec<f64> = (0..zones)
        .map(|w| if usable[w] == 0 { 0.0 } else { callers[w] })
        .collect();
    let shares = (0..zones)
        .map(|z| {
            let mut row = vec![0.0; zones + 1];
            row[zones] = 1.0 - p0;
            // Uniform over the usable priority-0 backends (round robin's spread).
            for w in 0..zones {
                row[w] += p0 * up[w] * if routed { 1.0 - enabled } else { 1.0 };
            }
            if !routed {
                return row;
            }
            let mut to = vec![0.0; zones];
            if up[z] > 0.0 && up[z] >= local[z] {
                to[z] = 1.0;
            } else {
                let kept = if local[z] > 0.0 {
                    up[z] / local[z]
                } else {
                    0.0
                };
                to[z] = kept;
                let spare: Vec<f64> = (0..zones)
                    .map(|w| {
                        if w == z {
                            0.0
                        } else {
                            (up[w] - local[w]).max(0.0)
                        }
                    })
                    .collect();
                let total: f64 = spare.iter().sum();
                for w in 0..zones {
                    // No spare anywhere: Envoy picks a locality at random.
                    to[w] += (1.0 - kept)
                        * if total > 0.0 {
                            spare[w] / total
                        } else {
                            1.0 / zones as f64
                        };
                }
            }
            for w in 0..zones {
                row[w] += p0 * enabled * to[w];
            }
            row
        })
        .collect();
    Expected {
        p0_percent,
        routed,
        shares,
    }
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Run {
    pub zone_aware: bool,
    /// Requests per caller zone and destination (the zones, then the fallback fleet).
    pub counts: Vec<Vec<u64>>,
    /// Latencies per caller zone, sorted, nanoseconds (the cross-zone time included).
    pub latencies: Vec<Vec<u64>>,
    /// Usable backends per destination.
    pub usable: Vec<u64>,
    pub expected: Expected,
}

impl Run {
    /// Requests from caller zone `z`.
    pub fn requests(&self, z: usize) -> u64 {
        self.counts[z].iter().sum()
    }

    /// The share of caller zone `z`'s requests served at destination `d`.
    pub fn share(&self, z: usize, d: usize) -> f64 {
        self.counts[z][d] as f64 / self.requests(z).max(1) as f64
    }

    /// The share of caller zone `z`'s requests served outside it.
    pub fn cross(&self, z: usize) -> f64 {
        1.0 - self.share(z, z)
    }

    /// The share of all requests served outside their caller's zone, measured and expected
    /// (the latter weighted by the callers' measured counts).
    pub fn cross_all(&self) -> (f64, f64) {
        let total: u64 = (0..self.counts.len()).map(|z| self.requests(z)).sum();
        let (mut crossed, mut expected) = (0.0, 0.0);
        for z in 0..self.counts.len() {
            let n = self.requests(z) as f64;
            crossed += n * self.cross(z);
            expected += n * (1.0 - self.expected.shares[z][z]);
        }
        let total = total.max(1) as f64;
        (crossed / total, expected / total)
    }

    /// The share of all requests served by the fallback fleet.
    pub fn fallback_share(&self) -> f64 {
        let d = self.counts.len();
        let total: u64 = (0..d).map(|z| self.requests(z)).sum();
        let spilled: u64 = self.counts.iter().map(|row| row[d]).sum();
        spilled as f64 / total.max(1) as f64
    }

    /// Destination `d`'s arrival rate over its usable backends' capacity (`None`: none usable).
    pub fn load(&self, params: &Params, d: usize) -> Option<f64> {
        let arrivals: u64 = self.counts.iter().map(|row| row[d]).sum();
        let capacity = self.usable[d] as f64 * params.backend_rate() * params.duration_s;
        (self.usable[d] > 0).then(|| arrivals as f64 / capacity)
    }

    /// Caller zone `z`'s `q` latency quantile, ms.
    pub fn quantile_ms(&self, z: usize, q: f64) -> f64 {
        crate::request_events::quantile_ms(&self.latencies[z], q)
    }

    /// All callers' `q` latency quantile, ms.
    pub fn quantile_all_ms(&self, q: f64) -> f64 {
        let mut all: Vec<u64> = self.latencies.concat();
        all.sort_unstable();
        crate::request_events::quantile_ms(&all, q)
    }
}

/// A request being served, ordered by completion time then arrival order (see `events`).
struct InService {
    done_ns: u64,
    seq: u64,
    arrived_ns: u64,
    caller: usize,
    backend: usize,
    lease: Lease,
}

crate::events::earliest_first!(InService, done_ns);

struct Waiting {
    seq: u64,
    arrived_ns: u64,
    caller: usize,
    work: f64,
    lease: Lease,
}

/// The balancers, one per caller zone, over the same backends, `phase`'s down ones marked
/// down; with `zone_aware`, each knows its zone and the callers' spread.
fn balancers(
    params: &Params,
    algorithm: Algorithm,
    options: Options,
    phase: &Phase,
    zone_aware: bool,
    clock: &Arc<ManualClock>,
) -> Result<Vec<Balancer>, liblb_core::Error> {
    let nodes = params.nodes();
    let spread: Vec<(String, u64)> = (params.callers.iter().enumerate())
        .map(|(z, n)| (locality(z), *n))
        .collect();
    (0..params.zones())
        .map(|z| {
            let options = Options {
                // A stream per caller zone.
                seed: Some(balancer_seed(params.seed ^ ((z as u64) << 40))),
                ..options
            };
            let b = Balancer::with_clock(algorithm, nodes.clone(), options, clock.clone())?;
            if zone_aware {
                b.set_local_locality(Some(&locality(z)))?;
                b.set_local_localities(spread.iter().map(|(l, n)| (l.as_str(), *n)))?;
            }
            for (node, down) in nodes.iter().zip(&phase.down) {
                if *down {
                    b.mark_down(&node.id)?;
                }
            }
            Ok(b)
        })
        .collect()
}

/// Runs one phase without or with zone-aware routing.
pub(crate) fn run(
    params: &Params,
    algorithm: Algorithm,
    options: Options,
    phase: &Phase,
    zone_aware: bool,
) -> Result<Run, liblb_core::Error> {
    let zones = params.zones();
    let clock = Arc::new(ManualClock::new(Duration::ZERO));
    let balancers = balancers(params, algorithm, options, phase, zone_aware, &clock)?;
    let backends = params.p0() + params.fallback;
    let zone_of: Vec<usize> = (0..backends).map(|i| params.zone_of(i)).collect();
    let cumulative: Vec<f64> = (params.caller_shares().iter())
        .scan(0.0, |sum, s| {
            *sum += s;
            Some(*sum)
        })
        .collect();
    let mut run = Run {
        zone_aware,
        counts: vec![vec![0; zones + 1]; zones],
        latencies: vec![Vec::new(); zones],
        usable: phase.usable(params),
        expected: expected(params, &options, phase, zone_aware),
    };

    let penalty = (params.cross_zone_ms * 1e6).round() as u64;
    let service = |work: f64| (work * params.service_ms * 1e6).round() as u64;
    let gap_ns = 1e9 / params.rate();
    let end_ns = (params.duration_s * 1e9).round() as u64;
    let mut rng = SplitMix64::new(params.seed);
    let mut busy = vec![0usize; backends];
    let mut queues: Vec<VecDeque<Waiting>> = (0..backends).map(|_| VecDeque::new()).collect();
    let mut heap: BinaryHeap<InService> = BinaryHeap::new();
    let begin = |w: Waiting, b: usize, now: u64, heap: &mut BinaryHeap<InService>| {
        heap.push(InService {
            done_ns: now + service(w.work),
            seq: w.seq,
            arrived_ns: w.arrived_ns,
            caller: w.caller,
            backend: b,
            lease: w.lease,
        });
    };
    let gap = |rng: &mut SplitMix64| (exp1(rng) * gap_ns).round() as u64;
    let mut next_arrival = gap(&mut rng);
    let mut seq = 0u64;
    loop {
        let next_done = heap.peek().map(|s| s.done_ns);
        let more = next_arrival < end_ns;
        // A completion at the same instant goes first (it frees a server).
        if more && next_done.is_none_or(|done| next_arrival < done) {
            let now = next_arrival;
            clock.set(Duration::from_nanos(now));
            let u = unit(&mut rng);
            let caller = cumulative.iter().position(|c| u < *c).unwrap_or(zones - 1);
            let work = exp1(&mut rng);
            let lease = balancers[caller].acquire(None)?;
            let b = lease.tag() as usize;
            run.counts[caller][zone_of[b]] += 1;
            let waiting = Waiting {
                seq,
                arrived_ns: now,
                caller,
                work,
                lease,
            };
            if busy[b] < params.servers {
                busy[b] += 1;
                begin(waiting, b, now, &mut heap);
            } else {
                queues[b].push_back(waiting);
            }
            seq += 1;
            next_arrival = now + gap(&mut rng);
        } else if let Some(done) = heap.pop() {
            let now = done.done_ns;
            clock.set(Duration::from_nanos(now));
            let b = done.backend;
            let cross = if zone_of[b] == done.caller {
                0
            } else {
                penalty
            };
            let latency = now - done.arrived_ns + cross;
            done.lease
                .finish(Outcome::Success(Duration::from_nanos(latency)));
            run.latencies[done.caller].push(latency);
            match queues[b].pop_front() {
                Some(next) => begin(next, b, now, &mut heap),
                None => busy[b] -= 1,
            }
        } else {
            break;
        }
    }
    for l in &mut run.latencies {
        l.sort_unstable();
    }
    Ok(run)
}

/// Every phase without and with zone-aware routing, in that order.
pub(crate) fn runs(
    params: &Params,
    algorithm: Algorithm,
    options: Options,
) -> Result<Vec<(Phase, Run)>, liblb_core::Error> {
    let mut runs = Vec::new();
    for phase in params.phases(&options) {
        for zone_aware in [false, true] {
            let run = run(params, algorithm, options, &phase, zone_aware)?;
            runs.push((phase.clone(), run));
        }
    }
    Ok(runs)
}

/// A percentage cell.
fn pct(v: f64) -> String {
    format!("{:.1}", v * 100.0)
}

/// Runs the scenario, prints the table (and draws the SVG).
pub(crate) fn print(
    params: &Params,
    algorithm: Algorithm,
    options: Options,
    svg: Option<&Path>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let zones = params.zones();
    let shares = params.caller_shares();
    let spread = |values: &[String]| {
        (values.iter().enumerate())
            .map(|(z, v)| format!("{} {v}", zone_name(z)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let callers: Vec<String> = shares
        .iter()
        .map(|s| format!("{:.0}%", s * 100.0))
        .collect();
    let backends: Vec<String> = params.backends.iter().map(|n| n.to_string()).collect();
    writeln!(
        out,
        "== zones: callers in {zones} zones ({} of the requests); priority-0 backends {} (east/<zone>), a priority-1 fallback fleet of {} (west/f); {} server(s) each, exponential service times with mean {} ms; a cross-zone request takes {} ms more ==",
        spread(&callers),
        spread(&backends),
        params.fallback,
        params.servers,
        params.service_ms,
        params.cross_zone_ms
    )?;
    writeln!(
        out,
        "Poisson arrivals at {:.0}% of priority 0's capacity ({:.1} of {:.1} req/s) for {} s per run; {algorithm} in each group, one balancer per caller zone; overprovisioning_factor {}, zone_aware_min_cluster_size {}; seed {}",
        params.utilisation * 100.0,
        params.rate(),
        params.capacity(),
        params.duration_s,
        options.overprovisioning_factor,
        options.zone_aware_min_cluster_size,
        params.seed
    )?;
    // What keeping every request local would do to each zone.
    let all_local: Vec<String> = (0..zones)
        .map(|z| {
            let load =
                params.rate() * shares[z] / (params.backends[z] as f64 * params.backend_rate());
            format!("{:.0}%", load * 100.0)
        })
        .collect();
    writeln!(
        out,
        "(every request kept in its caller's zone would load the zones' backends at {})",
        spread(&all_local)
    )?;
    let runs = runs(params, algorithm, options)?;
    for (i, pair) in runs.chunks(2).enumerate() {
        let phase = &pair[0].0;
        let usable = phase.usable(params);
        let u0: u64 = usable[..zones].iter().sum();
        let expected = &pair[0].1.expected;
        writeln!(
            out,
            "\nphase {}, {}: P0 {u0} of {} usable, takes min(100, {} x {u0}/{}) = {}%",
            i + 1,
            phase.name,
            params.p0(),
            options.overprovisioning_factor,
            params.p0(),
            expected.p0_percent
        )?;
        write!(out, "{:<7} {:<6}", "routing", "from")?;
        for z in 0..zones {
            write!(out, " {:>6}", format!("to {}", zone_name(z)))?;
        }
        writeln!(
            out,
            " {:>6} {:>6} {:>6} {:>7}",
            "to P1", "cross", "expect", "p99 ms"
        )?;
        for (_, run) in pair {
            let routing = if run.zone_aware { "zone" } else { "off" };
            for (z, share) in shares.iter().enumerate() {
                write!(
                    out,
                    "{:<7} {:<6}",
                    if z == 0 { routing } else { "" },
                    format!("{} {:.0}%", zone_name(z), share * 100.0)
                )?;
                for d in 0..=zones {
                    write!(out, " {:>6}", pct(run.share(z, d)))?;
                }
                writeln!(
                    out,
                    " {:>6} {:>6} {:>7.1}",
                    pct(run.cross(z)),
                    pct(1.0 - run.expected.shares[z][z]),
                    run.quantile_ms(z, 0.99)
                )?;
            }
            let (cross, expect) = run.cross_all();
            write!(out, "{:<7} {:<6}", "", "all")?;
            for _ in 0..=zones {
                write!(out, " {:>6}", "")?;
            }
            writeln!(
                out,
                " {:>6} {:>6} {:>7.1}",
                pct(cross),
                pct(expect),
                run.quantile_all_ms(0.99)
            )?;
            write!(out, "{:<7} {:<6}", "", "load")?;
            for d in 0..=zones {
                let load = run.load(params, d).map_or("-".to_string(), pct);
                write!(out, " {load:>6}")?;
            }
            writeln!(out)?;
            if run.zone_aware && !run.expected.routed {
                writeln!(
                    out,
                    "        (zone-aware routing does not apply: {u0} usable P0 backends, fewer than zone_aware_min_cluster_size {})",
                    options.zone_aware_min_cluster_size
                )?;
            }
        }
        if expected.p0_percent < 100 {
            for (_, run) in pair {
                writeln!(
                    out,
                    "spilled to P1 ({}): {} of all requests, expected {}",
                    if run.zone_aware { "zone" } else { "off" },
                    format_args!("{:.1}%", run.fallback_share() * 100.0),
                    format_args!("{}%", 100 - expected.p0_percent)
                )?;
            }
        }
    }
    writeln!(
        out,
        "\n(routing: off = uniform over the usable P0 backends, zone = zone-aware routing; to X: \
         % of the caller zone's requests served in zone X or by the P1 fallback fleet; cross: \
         % served outside the caller's zone, measured, and expect: as Envoy's rules compute it \
         from the same inputs; p99 ms: arrival to completion, cross-zone time included; load: \
         % of the destination's usable capacity, over 100 = its queues grow)"
    )?;
    if let Some(path) = svg {
        draw(path, params, algorithm, &runs).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// Stacked bars: per phase and routing, where each caller zone's requests were served.
fn draw(
    path: &Path,
    params: &Params,
    algorithm: Algorithm,
    runs: &[(Phase, Run)],
) -> Result<(), String> {
    let zones = params.zones();
    let shares: Vec<String> = (params.caller_shares().iter().enumerate())
        .map(|(z, s)| format!("{} {:.0}%", zone_name(z), s * 100.0))
        .collect();
    let backends: Vec<String> = (params.backends.iter().enumerate())
        .map(|(z, n)| format!("{} {n}", zone_name(z)))
        .collect();
    let title = format!(
        "zones: callers {}, P0 backends {}, P1 fallback {}; {algorithm}, arrivals at {:.0}% of P0's capacity, seed {}",
        shares.join(" / "),
        backends.join(" / "),
        params.fallback,
        params.utilisation * 100.0,
        params.seed
    );
    let phases: Vec<String> = (runs.iter().step_by(2).enumerate())
        .map(|(i, (phase, _))| format!("{} {}", i + 1, phase.name))
        .collect();
    let groups: Vec<BarGroup> = (runs.iter().enumerate())
        .map(|(i, (_, run))| {
            let (cross, expect) = run.cross_all();
            BarGroup {
                label: format!(
                    "{} {}",
                    i / 2 + 1,
                    if run.zone_aware { "zone-aware" } else { "off" }
                ),
                note: format!("cross {:.0}% (Envoy {:.0}%)", cross * 100.0, expect * 100.0),
                bars: (0..zones)
                    .map(|z| {
                        let segments = (0..=zones).map(|d| run.share(z, d) * 100.0).collect();
                        (zone_name(z), segments)
                    })
                    .collect(),
            }
        })
        .collect();
    let mut names: Vec<String> = (0..zones)
        .map(|d| format!("served in {}", zone_name(d)))
        .collect();
    names.push("served by P1".into());
    let caption = format!(
        "where each caller zone's requests were served; phases: {}",
        phases.join("; ")
    );
    chart::draw_stacked(path, &title, &caption, &groups, &names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            callers: vec![50, 30, 20],
            backends: vec![4, 4, 2],
            fallback: 3,
            servers: 1,
            service_ms: 10.0,
            cross_zone_ms: 1.0,
            utilisation: 0.6,
            duration_s: 20.0,
            seed: 3,
        }
    }

    /// The expectation for the default inputs, worked by hand. No routing: 64% across zones,
    /// that is 1 - (0.5 x 0.4 + 0.3 x 0.4 + 0.2 x 0.2). Zone-aware routing keeps 0.4 / 0.5 =
    /// 80% of zone a's requests and sends the rest to b (the only zone with spare: 40% of the
    /// backends for 30% of the callers); b and c stay local: 10% across zones. With half of a
    /// down, a keeps 0.25 / 0.5 = 50% and sends the rest 20 : 5 to b and c. With all of a down
    /// (6 of 10 up) P0 takes 84%.
    #[test]
    fn the_expectation_is_envoys_arithmetic() {
        let p = params();
        let o = Options::default();
        let phases = p.phases(&o);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let cross = |e: &Expected| -> f64 {
            let s = p.caller_shares();
            (0..3).map(|z| s[z] * (1.0 - e.shares[z][z])).sum()
        };
        let off = expected(&p, &o, &phases[0], false);
        assert!(close(cross(&off), 0.64), "{off:?}");
        let on = expected(&p, &o, &phases[0], true);
        assert!(close(cross(&on), 0.10), "{on:?}");
        assert!(close(on.shares[0][0], 0.8) && close(on.shares[0][1], 0.2));
        let half = expected(&p, &o, &phases[1], true);
        assert!(close(half.shares[0][0], 0.5));
        assert!(close(half.shares[0][1], 0.4) && close(half.shares[0][2], 0.1));
        assert!(close(half.shares[1][1], 1.0) && close(half.shares[2][2], 1.0));
        // All of a down, 6 of 10 left: P0 takes 84%; a's callers go to b and c by their
        // spare (4/6 - 0.3 and 2/6 - 0.2), b and c stay local.
        let spill = expected(&p, &o, &phases[2], true);
        assert_eq!((spill.p0_percent, spill.routed), (84, true));
        assert!(close(spill.shares[0][3], 0.16) && close(spill.shares[0][0], 0.0));
        let (b, c) = (4.0 / 6.0 - 0.3, 2.0 / 6.0 - 0.2);
        assert!(close(spill.shares[0][1], 0.84 * b / (b + c)));
        assert!(close(spill.shares[1][1], 0.84) && close(spill.shares[2][2], 0.84));
        // A minimum of 8 would not spill (8 x 1.4 > 10): half of P0 is kept, 5 of 10, below
        // the minimum, so no routing: uniform over the usable P0 backends, 70% of the traffic.
        let o8 = Options {
            zone_aware_min_cluster_size: 8,
            ..o
        };
        assert_eq!(p.spill_usable(&o8), 5);
        let spill = expected(&p, &o8, &p.phases(&o8)[2], true);
        assert_eq!((spill.p0_percent, spill.routed), (70, false));
        assert!(close(spill.shares[1][1], 0.7 * 3.0 / 5.0));
    }

    /// The measured shares: every caller zone's share at every destination within 4.5
    /// binomial standard deviations of Envoy's (plus 0.001 for Envoy's 1/10000ths), in
    /// every phase, with and without zone-aware routing; with zone-aware routing and every
    /// backend up, cross-zone traffic falls to Envoy's residual and no zone runs over
    /// capacity; the spill to P1 is the overprovisioning rule's.
    #[test]
    fn traffic_goes_where_envoys_rules_send_it() {
        let p = params();
        let o = Options::default();
        for algorithm in [Algorithm::RoundRobin, Algorithm::LeastRequest] {
            let runs = runs(&p, algorithm, o).unwrap();
            assert_eq!(runs.len(), 6);
            for (phase, run) in &runs {
                for z in 0..3 {
                    let n = run.requests(z) as f64;
                    assert!(n > 1000.0, "{n}");
                    for d in 0..4 {
                        let e = run.expected.shares[z][d];
                        let m = run.share(z, d);
                        let bound = 4.5 * (e * (1.0 - e) / n).sqrt() + 1e-3;
                        assert!(
                            (m - e).abs() <= bound,
                            "{algorithm}, {}, zone-aware {}: {z} -> {d}: {m} vs {e}",
                            phase.name,
                            run.zone_aware
                        );
                    }
                }
            }
            let (off, on) = (&runs[0].1, &runs[1].1);
            let ((cross_off, _), (cross_on, expect_on)) = (off.cross_all(), on.cross_all());
            assert!(cross_off > 0.6 && cross_on < 0.12, "{cross_off} {cross_on}");
            assert!((cross_on - expect_on).abs() < 0.01);
            for d in 0..3 {
                let load = on.load(&p, d).unwrap();
                assert!(load < 0.7, "{algorithm}: zone {d} at {load}");
            }
            // The spill: 100 - min(100, 140 x 6 / 10) = 16%, computed from the rule here.
            let usable = p.spill_usable(&o) as f64;
            let spill = 1.0 - (1.4 * usable / 10.0).min(1.0);
            assert!(spill > 0.1, "{spill}");
            for run in [&runs[4].1, &runs[5].1] {
                let n: f64 = (0..3).map(|z| run.requests(z) as f64).sum();
                let bound = 4.5 * (spill * (1.0 - spill) / n).sqrt();
                let spilled = run.fallback_share();
                assert!((spilled - spill).abs() <= bound, "{algorithm}: {spilled}");
            }
        }
    }

    /// A seed gives one course of events; another seed another.
    #[test]
    fn runs_are_deterministic_for_a_seed() {
        let mut p = params();
        p.duration_s = 5.0;
        let o = Options::default();
        let phase = &p.phases(&o)[1];
        let first = run(&p, Algorithm::LeastRequest, o, phase, true).unwrap();
        assert_eq!(
            first,
            run(&p, Algorithm::LeastRequest, o, phase, true).unwrap()
        );
        p.seed = 4;
        assert_ne!(
            first,
            run(&p, Algorithm::LeastRequest, o, phase, true).unwrap()
        );
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params();
        p.callers = vec![1, 1];
        assert!(p.validate().unwrap_err().contains("same zones"));
        let mut p = params();
        p.backends = vec![1, 4, 4];
        assert!(p.validate().unwrap_err().contains("zone a"));
        let mut p = params();
        p.callers = vec![0, 1, 1];
        assert!(p.validate().unwrap_err().contains("--callers"));
        let mut p = params();
        p.cross_zone_ms = -1.0;
        assert!(p.validate().unwrap_err().contains("--cross-zone-ms"));
        let mut p = params();
        p.utilisation = 1.0;
        assert!(p.validate().unwrap_err().contains("--utilisation"));
        assert!(
            counts("--callers", "5,x")
                .unwrap_err()
                .contains("--callers")
        );
        assert!(params().validate().is_ok());
    }
}
