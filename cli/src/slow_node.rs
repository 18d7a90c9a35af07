//! `lb simulate --scenario slow-node`: why feedback matters, as a discrete-event simulation.
//!
//! **Model.** `--backends` N backends (default 10), each a FIFO queue in front of `--servers` k
//! identical servers (default 1, an M/M/1 queue per backend). Service times are exponential
//! with mean `--service-ms` (default 10 ms), except on `backend-0`, whose mean is `--slowdown`
//! times longer (default 10x: 100 ms). Requests arrive as a Poisson process (exponential gaps)
//! at rate λ = `--utilisation` × capacity, where capacity is the sum of the backends' service
//! rates, k / mean each (default: 9 × 100 + 10 = 910 req/s, so 70% is 637 req/s). A perfect
//! router would keep every backend at that utilisation, sending the slow one only its share
//! of capacity (1.1%); a router that splits evenly sends it 10% of 637 = 63.7 req/s against a
//! capacity of 10 req/s, and its queue grows for the whole run.
//!
//! **Routing.** Each arrival is routed by the real [`Balancer`] through
//! [`Balancer::acquire`]; the request's lease is finished with
//! `Outcome::Success(latency)` when its service completes. The balancer reads a
//! [`ManualClock`] set to the event's time before every acquire and finish, so peak-EWMA's
//! decay runs in virtual time; nothing reads the wall clock, and the run takes the same course
//! whatever the machine's speed.
//!
//! **Randomness.** One SplitMix64 seeded with `--seed` (default 1) draws, per arrival, its
//! gap and its amount of work (an Exp(1) variable, scaled by the chosen backend's mean). The
//! draws do not depend on the routing, so every algorithm faces exactly the same arrivals and
//! the same work (common random numbers): the differences are the routing's. The balancer's
//! own draws (random, P2C) are seeded from a different stream derived from the same seed.
//!
//! **Measured**, per algorithm, over every request of the run (no warm-up is dropped; the
//! transient is short next to the default 200,000 requests): latency from arrival to
//! completion (queueing + service), its p50/p99/p99.9 (nearest rank); each backend's share of
//! requests; the longest queue seen at any backend (requests there, waiting or in service);
//! and the slow backend's offered load, its arrival rate over its capacity (over 100% means
//! its queue grew without bound).
//!
//! **Algorithms compared** (unkeyed ones; keyed ones route by key, not by load, and are
//! skipped): `round_robin`, `weighted_round_robin` (nginx's smooth WRR, `ngx_http_upstream_round_robin.c`),
//! `random`, `weighted_random` (Vose's alias method), all blind to load; `least_request`
//! (Envoy's `LEAST_REQUEST`: power of two choices over in-flight requests, after Mitzenmacher,
//! "The Power of Two Choices in Randomized Load Balancing", 2001); `least_connections` (nginx's
//! `least_conn`, `ngx_http_upstream_least_conn_module.c`); `peak_ewma` (Finagle's `PeakEwma`,
//! as in linkerd and tower's `p2c` over `load::PeakEwma`: two choices over latency estimate ×
//! (in-flight + 1)).

use liblb_core::{Algorithm, Balancer, ManualClock, Node, Options, Outcome, SplitMix64};
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub backends: usize,
    pub servers: usize,
    pub service_ms: f64,
    pub slowdown: f64,
    pub utilisation: f64,
    pub requests: usize,
    pub seed: u64,
}

impl Params {
    /// Mean service time of backend `i`, in nanoseconds (backend 0 is the slow one).
    fn mean_ns(&self, i: usize) -> f64 {
        let slow = if i == 0 { self.slowdown } else { 1.0 };
        self.service_ms * slow * 1e6
    }

    /// Backend `i`'s share of the total capacity: what a router matching load to speed sends it.
    pub fn capacity_share(&self, i: usize) -> f64 {
        self.servers as f64 * 1e9 / self.mean_ns(i) / self.capacity()
    }

    /// Total service rate, requests per second: the slow backend's plus the others'. In closed
    /// form, not summed per backend: the share table calls it once per backend, which made
    /// a million backends quadratic (minutes).
    pub fn capacity(&self) -> f64 {
        let normal =
            self.backends.saturating_sub(1) as f64 * self.servers as f64 * 1e9 / self.mean_ns(1);
        normal + self.slow_capacity()
    }

    /// Arrival rate, requests per second.
    pub fn rate(&self) -> f64 {
        self.utilisation * self.capacity()
    }

    /// The slow backend's capacity, requests per second.
    pub fn slow_capacity(&self) -> f64 {
        self.servers as f64 * 1e9 / self.mean_ns(0)
    }

    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "--{name} must be a positive number, got {}",
                    crate::num(v)
                ))
            }
        };
        positive("service-ms", self.service_ms)?;
        positive("slowdown", self.slowdown)?;
        if !(self.utilisation > 0.0 && self.utilisation < 1.0) {
            return Err(format!(
                "--utilisation must be above 0 and below 1 (a share of total capacity), got {}",
                crate::num(self.utilisation)
            ));
        }
        if self.backends < 2 {
            return Err(format!(
                "--backends must be at least 2 (one slow, one or more normal), got {}",
                self.backends
            ));
        }
        crate::bounded("--backends", self.backends, 2, crate::MAX_BACKENDS)?;
        if self.servers == 0 || self.requests == 0 {
            return Err("--servers and --requests must be at least 1".into());
        }
        // Every latency is kept (8 bytes a request, for each algorithm).
        if self.requests > MAX_REQUESTS {
            return Err(format!(
                "--requests must be at most {MAX_REQUESTS}, got {}",
                self.requests
            ));
        }
        // Virtual time is u64 nanoseconds (584 years): keep runs far from that.
        const HOUR_MS: f64 = 3_600_000.0;
        if self.service_ms * self.slowdown > HOUR_MS {
            return Err(format!(
                "the slow backend's mean service time (--service-ms x --slowdown) must be at most an hour, got {} ms",
                crate::num(self.service_ms * self.slowdown)
            ));
        }
        const TEN_YEARS_S: f64 = 10.0 * 365.25 * 86_400.0;
        if self.requests as f64 / self.rate() > TEN_YEARS_S {
            return Err(format!(
                "the run would last {} s of virtual time, more than ten years: raise --utilisation or lower --service-ms",
                crate::num((self.requests as f64 / self.rate()).round())
            ));
        }
        Ok(())
    }

    /// The backends' ids, tagged with their index.
    pub fn nodes(&self) -> Vec<Node> {
        (0..self.backends)
            .map(|i| Node::with_tag(backend_id(i), 1, i as u64))
            .collect()
    }
}

/// Most requests per algorithm.
const MAX_REQUESTS: usize = 10_000_000;

/// Backend `i`'s id.
pub(crate) fn backend_id(i: usize) -> String {
    format!("backend-{i}")
}

/// What one algorithm's run measured.
pub(crate) struct Run {
    pub algorithm: Algorithm,
    /// Every request's latency in nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// Requests routed to each backend.
    pub routed: Vec<u64>,
    /// Most requests seen at each backend at once (waiting or in service).
    pub max_queue: Vec<usize>,
    /// The balancer's own counters after the run (every lease ended: in-flight 0); the unit
    /// tests check them against the simulation's counts.
    #[cfg(test)]
    pub stats: Vec<liblb_core::NodeStats>,
}

impl Run {
    /// The `q` quantile (nearest rank) in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let n = self.latencies.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.latencies[rank - 1] as f64 / 1e6
    }

    /// Backend `i`'s share of the requests.
    pub fn share(&self, i: usize) -> f64 {
        self.routed[i] as f64 / self.latencies.len() as f64
    }
}

/// A request being served: ordered by completion time, then by arrival order, so the event
/// order never depends on anything but the workload.
struct InService {
    done_ns: u64,
    seq: u64,
    arrived_ns: u64,
    backend: usize,
    lease: liblb_core::Lease,
    /// The backend's `ServerLoad` token for it.
    started: liblb_core::Started,
}

crate::events::earliest_first!(InService, done_ns);

/// A request waiting in a backend's queue.
struct Waiting {
    seq: u64,
    arrived_ns: u64,
    /// Its amount of work, an Exp(1) draw (multiplied by the backend's mean service time).
    work: f64,
    lease: liblb_core::Lease,
    started: liblb_core::Started,
}

/// An Exp(1) draw from 64 random bits: −ln(1 − U), U uniform on [0, 1) with 53 bits.
pub(crate) fn exp1(rng: &mut SplitMix64) -> f64 {
    let u = (rng.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    -(1.0 - u).ln()
}

/// The balancer's seed for a workload seed: a SplitMix64 output, so its stream and the
/// workload's (which starts at `seed`) do not overlap in any run of practical length.
pub(crate) fn balancer_seed(seed: u64) -> u64 {
    SplitMix64::new(seed ^ 0x6c62_2d62_616c_616e).next()
}

/// The balancer of one simulation run: `options` on a [`ManualClock`] at 0 (every scenario runs
/// in virtual time), its generator seeded from the run's `seed` by [`balancer_seed`]. The
/// balancer's draws must not be the workload's: SplitMix64 with the same seed would give the
/// same stream, and a draw choosing the backend would also be the request's work (a first run
/// of slow-node showed peak_ewma's shares falling with the backend's position).
pub(crate) fn virtual_balancer(
    algorithm: Algorithm,
    nodes: Vec<Node>,
    options: Options,
    seed: u64,
) -> Result<(Balancer, Arc<ManualClock>), liblb_core::Error> {
    let clock = Arc::new(ManualClock::new(Duration::ZERO));
    let options = Options {
        seed: Some(balancer_seed(seed)),
        ..options
    };
    let balancer = Balancer::with_clock(algorithm, nodes, options, clock.clone())?;
    Ok((balancer, clock))
}

/// Runs the scenario under one algorithm.
pub(crate) fn run(
    algorithm: Algorithm,
    params: &Params,
    options: Options,
) -> Result<Run, liblb_core::Error> {
    let (balancer, clock) = virtual_balancer(algorithm, params.nodes(), options, params.seed)?;
    let mut rng = SplitMix64::new(params.seed);
    let gap_ns = 1e9 / params.rate();
    let n = params.backends;

    let mut busy = vec![0usize; n];
    let mut queues: Vec<VecDeque<Waiting>> = (0..n).map(|_| VecDeque::new()).collect();
    let mut routed = vec![0u64; n];
    let mut max_queue = vec![0usize; n];
    let mut in_service = BinaryHeap::new();
    let mut latencies = Vec::with_capacity(params.requests);
    let max_age = liblb_core::ServerLoad::DEFAULT_LATENCY_MAX_AGE;
    let mut meters = crate::meter::Meters::new(n, params.servers, max_age)?;

    // Starts `w`'s service on backend `b` at `now`.
    let start = |w: Waiting, b: usize, now: u64, in_service: &mut BinaryHeap<InService>| {
        let service = (w.work * params.mean_ns(b)).round() as u64;
        in_service.push(InService {
            done_ns: now + service,
            seq: w.seq,
            arrived_ns: w.arrived_ns,
            backend: b,
            lease: w.lease,
            started: w.started,
        });
    };

    let mut next_arrival = (exp1(&mut rng) * gap_ns).round() as u64;
    let mut issued = 0u64;
    loop {
        let next_done = in_service.peek().map(|s: &InService| s.done_ns);
        let arrival_first = issued < params.requests as u64
            // A completion at the same instant goes first (it frees a server).
            && next_done.is_none_or(|done| next_arrival < done);
        if arrival_first {
            let now = next_arrival;
            clock.set(Duration::from_nanos(now));
            let lease = balancer.acquire(None)?;
            meters.probe(0, &balancer, now)?;
            let b = lease.tag() as usize;
            let waiting = Waiting {
                seq: issued,
                arrived_ns: now,
                work: exp1(&mut rng),
                lease,
                started: meters.arrived(b, now),
            };
            routed[b] += 1;
            if busy[b] < params.servers {
                busy[b] += 1;
                meters.busy(b, now, busy[b]);
                start(waiting, b, now, &mut in_service);
            } else {
                queues[b].push_back(waiting);
            }
            max_queue[b] = max_queue[b].max(busy[b] + queues[b].len());
            issued += 1;
            next_arrival = now + (exp1(&mut rng) * gap_ns).round() as u64;
        } else if let Some(done) = in_service.pop() {
            let now = done.done_ns;
            clock.set(Duration::from_nanos(now));
            let latency = now - done.arrived_ns;
            let b = done.backend;
            let outcome = Outcome::Success(Duration::from_nanos(latency));
            // The answer carries the backend's load report, as a liblb backend's would.
            let load = meters.completed(b, done.started, now, true);
            done.lease.finish_with_load(outcome, &load);
            latencies.push(latency);
            match queues[b].pop_front() {
                Some(next) => start(next, b, now, &mut in_service),
                None => {
                    busy[b] -= 1;
                    meters.busy(b, now, busy[b]);
                }
            }
        } else {
            break;
        }
    }
    latencies.sort_unstable();
    Ok(Run {
        algorithm,
        latencies,
        routed,
        max_queue,
        #[cfg(test)]
        stats: balancer.stats(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_in_closed_form_is_the_sum_of_the_backends_rates() {
        for (backends, servers, service_ms, slowdown) in
            [(2, 1, 10.0, 10.0), (10, 3, 7.5, 2.5), (1000, 2, 0.1, 1.0)]
        {
            let p = Params {
                backends,
                servers,
                service_ms,
                slowdown,
                ..params()
            };
            let sum: f64 = (0..backends)
                .map(|i| servers as f64 * 1e9 / p.mean_ns(i))
                .sum();
            assert!((p.capacity() - sum).abs() <= sum * 1e-12, "{p:?}");
            let shares: f64 = (0..backends).map(|i| p.capacity_share(i)).sum();
            assert!((shares - 1.0).abs() < 1e-9);
        }
        // Too many backends are refused before anything is summed or allocated.
        let huge = Params {
            backends: 100_000_000_000,
            ..params()
        };
        assert!(
            huge.validate()
                .unwrap_err()
                .contains("--backends must be from 2 to 1000000")
        );
    }

    fn params() -> Params {
        Params {
            backends: 4,
            servers: 1,
            service_ms: 10.0,
            slowdown: 10.0,
            utilisation: 0.5,
            requests: 5_000,
            seed: 7,
        }
    }

    /// Every request completes, and the balancer agrees: each backend's finished leases are
    /// the requests routed to it, and nothing is left in flight.
    #[test]
    fn every_request_completes_and_leases_end() {
        let p = params();
        for algorithm in Algorithm::ALL.into_iter().filter(|a| !a.is_keyed()) {
            let r = run(algorithm, &p, Options::default()).unwrap();
            assert_eq!(r.latencies.len(), p.requests);
            assert_eq!(r.routed.iter().sum::<u64>(), p.requests as u64);
            for (b, stats) in r.stats.iter().enumerate() {
                assert_eq!(stats.id, backend_id(b));
                assert_eq!(stats.in_flight, 0, "{algorithm} {b}");
                assert_eq!(stats.requests, r.routed[b], "{algorithm} {b}");
                assert_eq!(stats.failures, 0);
            }
        }
    }

    #[test]
    fn capacity_and_rate_follow_the_parameters() {
        let p = params();
        // 3 backends at 100 req/s and one at 10 req/s.
        assert!((p.capacity() - 310.0).abs() < 1e-9);
        assert!((p.rate() - 155.0).abs() < 1e-9);
        assert!((p.slow_capacity() - 10.0).abs() < 1e-9);
    }

    /// The mean of the Exp(1) draws is 1 within 4 standard errors (σ = 1 / √n).
    #[test]
    fn exponential_draws_have_mean_one() {
        let mut rng = SplitMix64::new(3);
        let n = 100_000;
        let mean = (0..n).map(|_| exp1(&mut rng)).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 4.0 / (n as f64).sqrt(), "{mean}");
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let r = Run {
            algorithm: Algorithm::Random,
            latencies: (1..=100).map(|ms| ms * 1_000_000).collect(),
            routed: vec![100],
            max_queue: vec![1],
            stats: Vec::new(),
        };
        assert_eq!(r.quantile_ms(0.5), 50.0);
        assert_eq!(r.quantile_ms(0.99), 99.0);
        assert_eq!(r.quantile_ms(0.999), 100.0);
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params();
        p.utilisation = 1.2;
        assert!(p.validate().unwrap_err().contains("--utilisation"));
        let mut p = params();
        p.backends = 1;
        assert!(p.validate().unwrap_err().contains("--backends"));
        let mut p = params();
        p.service_ms = f64::NAN;
        assert!(p.validate().unwrap_err().contains("--service-ms"));
        let mut p = params();
        p.requests = MAX_REQUESTS + 1;
        assert!(p.validate().unwrap_err().contains("--requests"));
        let mut p = params();
        p.utilisation = 1e-12;
        assert!(p.validate().unwrap_err().contains("ten years"));
        let mut p = params();
        p.slowdown = 1e9;
        assert!(p.validate().unwrap_err().contains("at most an hour"));
        assert!(params().validate().is_ok());
    }
}
