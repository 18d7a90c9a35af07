//! `lb simulate --scenario long-tail`: what hedging does to a heavy latency tail, as a
//! discrete-event simulation driving the real request loop (`Balancer::request` with
//! `Hedging`).
//!
//! **Model.** `--backends` N backends (default 10), each a FIFO queue in front of `--servers`
//! k servers (default 4). Each *attempt* draws its own service time: exponential with mean
//! `--service-ms` (default 10 ms), except that with probability `--slow-share` (default 1%) it
//! is `--slowdown` times longer (default 20x) — a server-side hiccup (a GC pause, a cold cache,
//! a noisy neighbour) that a second attempt on another server most likely escapes, the tail of
//! "The Tail at Scale" (Dean & Barroso, CACM 2013). Requests arrive as a Poisson process at
//! `--utilisation` (default 50%) of the fleet's capacity for `--duration-s` (default 60 s) of
//! virtual time, and are routed by the real `Balancer` (default `round_robin`; `-a` to choose).
//!
//! **Runs.** The same arrivals and the same draws (common random numbers: each attempt's
//! service time comes from a stream keyed by its request and attempt number) three times:
//! without hedging; with Finagle's rule at p95 (`Hedging::percentile(0.05)`: a hedge after the
//! 95th percentile of recent latencies, at most 5% extra load through its budget); and at p99
//! (`0.01`). A request has at most 2 attempts (one hedge); the first answer wins and the
//! request's other attempt is cancelled: dropped from its queue if still waiting, and if
//! already in service its server finishes the work anyway (nothing tells it to stop; the work
//! is wasted), its lease cancelled so nothing is counted.
//!
//! **Measured** over the requests arriving after `--warmup-s` (default 15 s: the percentile
//! rule hedges only once its 10 s bucket is complete and refreshed): latency from arrival to
//! the first answer, p50/p99/p99.9 (nearest rank) and the worst; hedges sent as a share of
//! those requests (the extra load), and how many of them won.

use crate::Failure;
use crate::slow_node::{backend_id, exp1, virtual_balancer};
use liblb_core::{
    Algorithm, Balancer, Decision, Hedging, Lease, Node, Options, Outcome, Request, SplitMix64,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub backends: usize,
    pub servers: usize,
    pub service_ms: f64,
    pub slow_share: f64,
    pub slowdown: f64,
    pub utilisation: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
}

/// The longest run, in virtual seconds.
const MAX_DURATION_S: f64 = 3600.0;

impl Params {
    /// The mean service time of one attempt, in milliseconds.
    pub fn mean_ms(&self) -> f64 {
        self.service_ms * (1.0 - self.slow_share + self.slow_share * self.slowdown)
    }

    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.utilisation * (self.backends * self.servers) as f64 * 1000.0 / self.mean_ms()
    }

    /// Checks the parameters, naming the flag at fault.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |flag: &str, rule: &str| Err(format!("{flag}: {rule}"));
        if !(2..=1000).contains(&self.backends) {
            return bad("--backends", "2 to 1000 (a hedge needs another backend)");
        }
        if !(1..=64).contains(&self.servers) {
            return bad("--servers", "1 to 64");
        }
        if !(self.service_ms > 0.0 && self.service_ms <= 60_000.0) {
            return bad("--service-ms", "above 0 and at most 60000");
        }
        if !(0.0..=1.0).contains(&self.slow_share) {
            return bad("--slow-share", "0 to 1");
        }
        if !(1.0..=1000.0).contains(&self.slowdown) {
            return bad("--slowdown", "1 to 1000");
        }
        if !(self.utilisation > 0.0 && self.utilisation < 1.0) {
            return bad("--utilisation", "above 0 and below 1");
        }
        if !(self.duration_s > 0.0 && self.duration_s <= MAX_DURATION_S) {
            return bad("--duration-s", "above 0 and at most 3600");
        }
        if !(self.warmup_s >= 0.0 && self.warmup_s < self.duration_s) {
            return bad("--warmup-s", "0 or more, and below --duration-s");
        }
        if self.rate() * self.duration_s > 20_000_000.0 {
            return bad("--duration-s", "at most 20 million requests per run");
        }
        Ok(())
    }
}

/// How a run hedges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Hedge {
    /// Never.
    Off,
    /// Finagle's rule with this `max_extra_load` (0.05: p95).
    Percentile(f64),
}

impl Hedge {
    /// The runs: off, p95, p99.
    pub const RUNS: [Hedge; 3] = [Hedge::Off, Hedge::Percentile(0.05), Hedge::Percentile(0.01)];

    /// How the table names it.
    pub fn name(self) -> String {
        match self {
            Hedge::Off => "none".into(),
            Hedge::Percentile(load) => format!("p{:.0}", 100.0 * (1.0 - load)),
        }
    }
}

/// What one run measured.
pub(crate) struct Run {
    pub hedge: Hedge,
    /// Latencies of the measured requests, nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// Hedges sent for the measured requests.
    pub hedges: u64,
    /// Of those, hedges whose answer came first.
    pub won: u64,
    /// Leases still out at the end (must be 0).
    pub leaked: usize,
}

impl Run {
    /// The `q` quantile (nearest rank) in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let n = self.latencies.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.latencies[rank - 1] as f64 / 1e6
    }

    /// Hedges sent per measured request.
    pub fn extra_load(&self) -> f64 {
        self.hedges as f64 / self.latencies.len().max(1) as f64
    }
}

/// One attempt of a request.
struct Attempt {
    request: usize,
    backend: usize,
    /// Its lease until it ends (finished or cancelled).
    lease: Option<Lease>,
    sent_ns: u64,
    work_ns: u64,
    /// The request ended: the attempt's answer no longer matters.
    cancelled: bool,
}

/// One request in flight.
struct InFlight<'b> {
    request: Request<&'b Balancer, Vec<u8>>,
    arrived_ns: u64,
    attempts: Vec<usize>,
    done: bool,
}

/// Events, ordered by time then by a sequence number (so ties break the same way always).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Attempt `i` leaves its server.
    Done(usize),
    /// Request `i`'s hedge timer fires.
    Hedge(usize),
    /// The next arrival.
    Arrival,
}

/// A service time for attempt `attempt` of request `request`: its own stream, so every run
/// draws the same work for the same attempt whatever the routing did (common random numbers).
fn work_ns(params: &Params, request: usize, attempt: usize) -> u64 {
    let mut rng = SplitMix64::new(
        params.seed ^ ((request as u64) << 8 | attempt as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    let unit = (rng.next() >> 11) as f64 / ((1u64 << 53) as f64);
    let slow = unit < params.slow_share;
    let mean = params.service_ms * if slow { params.slowdown } else { 1.0 };
    (exp1(&mut rng) * mean * 1e6).round() as u64
}

/// Runs the scenario once under `algorithm` with `hedge`.
pub(crate) fn run(
    algorithm: Algorithm,
    params: &Params,
    options: Options,
    hedge: Hedge,
) -> Result<Run, liblb_core::Error> {
    let nodes: Vec<Node> = (0..params.backends)
        .map(|i| Node::new(backend_id(i).as_str(), 1))
        .collect();
    let (balancer, clock) = virtual_balancer(algorithm, nodes, options, params.seed)?;
    let hedging = match hedge {
        Hedge::Off => None,
        Hedge::Percentile(load) => Some(Arc::new(Hedging::percentile(load, 0)?)),
    };
    let policy = liblb_core::RetryPolicy {
        max_attempts: 2,
        ..Default::default()
    };
    let end_ns = (params.duration_s * 1e9) as u64;
    let warmup_ns = (params.warmup_s * 1e9) as u64;
    let gap_ns = 1e9 / params.rate();
    let mut arrivals = SplitMix64::new(params.seed);
    let mut events: BinaryHeap<Reverse<(u64, u64, Kind)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, at: u64, kind: Kind| {
        seq += 1;
        events.push(Reverse((at, seq, kind)));
    };
    push(
        &mut events,
        (exp1(&mut arrivals) * gap_ns) as u64,
        Kind::Arrival,
    );
    let mut requests: Vec<InFlight<'_>> = Vec::new();
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); params.backends];
    let mut busy = vec![0usize; params.backends];
    let mut run = Run {
        hedge,
        latencies: Vec::new(),
        hedges: 0,
        won: 0,
        leaked: 0,
    };
    let backend_of = |lease: &Lease| -> usize {
        lease.id()["backend-".len()..]
            .parse()
            .expect("backend ids are backend-N")
    };
    while let Some(Reverse((now, _, kind))) = events.pop() {
        clock.set(Duration::from_nanos(now));
        // Attempts to start: (attempt) queued at a backend, started if a server is free.
        let mut sent: Vec<usize> = Vec::new();
        match kind {
            Kind::Arrival => {
                let next = now + (exp1(&mut arrivals) * gap_ns) as u64;
                if next < end_ns {
                    push(&mut events, next, Kind::Arrival);
                }
                let r = requests.len();
                let mut request = balancer.request(None::<Vec<u8>>).with_policy(policy)?;
                if let Some(h) = &hedging {
                    request = request.with_hedging(h.clone());
                }
                let lease = request.attempt()?.expect("a first attempt");
                requests.push(InFlight {
                    request,
                    arrived_ns: now,
                    attempts: Vec::new(),
                    done: false,
                });
                sent.push(start(
                    &mut attempts,
                    &mut requests[r],
                    r,
                    lease,
                    now,
                    params,
                    backend_of,
                ));
                if let Some(after) = requests[r].request.hedge_after() {
                    push(&mut events, now + after.as_nanos() as u64, Kind::Hedge(r));
                }
            }
            Kind::Hedge(r) => {
                if !requests[r].done {
                    if let Some(lease) = requests[r].request.hedge()? {
                        if requests[r].arrived_ns >= warmup_ns {
                            run.hedges += 1;
                        }
                        sent.push(start(
                            &mut attempts,
                            &mut requests[r],
                            r,
                            lease,
                            now,
                            params,
                            backend_of,
                        ));
                    }
                }
            }
            Kind::Done(a) => {
                let backend = attempts[a].backend;
                busy[backend] -= 1;
                if !attempts[a].cancelled {
                    let r = attempts[a].request;
                    let lease = attempts[a]
                        .lease
                        .take()
                        .expect("an attempt in service holds its lease");
                    let latency = Duration::from_nanos(now - attempts[a].sent_ns);
                    let decision = requests[r].request.finish(lease, Outcome::Success(latency));
                    debug_assert_eq!(decision, Decision::Done);
                    requests[r].done = true;
                    let arrived = requests[r].arrived_ns;
                    if arrived >= warmup_ns {
                        run.latencies.push(now - arrived);
                        if requests[r].attempts.first() != Some(&a) {
                            run.won += 1;
                        }
                    }
                    // The other attempt: dropped from its queue, or its work wasted.
                    for &other in &requests[r].attempts.clone() {
                        if other != a && !attempts[other].cancelled {
                            attempts[other].cancelled = true;
                            if let Some(lease) = attempts[other].lease.take() {
                                requests[r].request.cancel(lease);
                            }
                        }
                    }
                }
                // The next waiting attempt, if any, takes the server.
                while let Some(next) = queues[backend].pop_front() {
                    if attempts[next].cancelled {
                        continue; // dropped while waiting
                    }
                    busy[backend] += 1;
                    push(&mut events, now + attempts[next].work_ns, Kind::Done(next));
                    break;
                }
            }
        }
        for a in sent {
            let backend = attempts[a].backend;
            if busy[backend] < params.servers {
                busy[backend] += 1;
                push(&mut events, now + attempts[a].work_ns, Kind::Done(a));
            } else {
                queues[backend].push_back(a);
            }
        }
    }
    run.leaked = balancer.stats().iter().map(|s| s.in_flight).sum();
    run.latencies.sort_unstable();
    Ok(run)
}

/// Runs the scenario once per hedging rule and prints the table (and draws the SVG).
pub(crate) fn print(
    params: &Params,
    algorithm: Algorithm,
    options: Options,
    svg: Option<&Path>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    writeln!(
        out,
        "== long-tail: {} backends x {} server(s), FIFO; each attempt's service time exponential with mean {} ms, {}% of attempts {}x slower ==",
        params.backends,
        params.servers,
        params.service_ms,
        params.slow_share * 100.0,
        params.slowdown
    )?;
    writeln!(
        out,
        "Poisson arrivals at {:.0}% of capacity ({:.1} req/s) for {} s, measured from {} s; {algorithm}; at most 2 attempts (one hedge), the first answer wins, the other is cancelled (dropped if queued, its work wasted if in service); seed {}",
        params.utilisation * 100.0,
        params.rate(),
        params.duration_s,
        params.warmup_s,
        params.seed
    )?;
    writeln!(
        out,
        "hedging: none; p95 = Hedging::percentile(0.05) (a hedge after the p95 of the last 30 s, at most 5% extra); p99 = Hedging::percentile(0.01)"
    )?;
    let runs = (Hedge::RUNS.iter())
        .map(|h| run(algorithm, params, options, *h))
        .collect::<Result<Vec<_>, _>>()?;
    writeln!(
        out,
        "\n{:<8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8} {:>7}",
        "hedging", "requests", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "hedges", "extra", "won"
    )?;
    for r in &runs {
        writeln!(
            out,
            "{:<8} {:>9} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>8} {:>7.2}% {:>7}",
            r.hedge.name(),
            r.latencies.len(),
            r.quantile_ms(0.5),
            r.quantile_ms(0.99),
            r.quantile_ms(0.999),
            r.quantile_ms(1.0),
            r.hedges,
            r.extra_load() * 100.0,
            r.won
        )?;
    }
    writeln!(
        out,
        "(latency: arrival to the first answer, nearest rank, of the requests arriving after the warm-up; hedges: hedges sent for them; extra: hedges per request, the added load; won: hedges that answered first)"
    )?;
    if let Some(path) = svg {
        let names: Vec<String> = runs
            .iter()
            .map(|r| format!("hedging {}", r.hedge.name()))
            .collect();
        let series: Vec<(&str, &[u64])> = (names.iter().zip(&runs))
            .map(|(n, r)| (n.as_str(), &r.latencies[..]))
            .collect();
        let title = format!(
            "long-tail: {} backends, {}% of attempts {}x slower, {:.0}% of capacity, seed {}",
            params.backends,
            params.slow_share * 100.0,
            params.slowdown,
            params.utilisation * 100.0,
            params.seed
        );
        crate::chart::draw_tail(path, &title, &series).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// Records attempt number `requests[r].attempts.len()` of request `r` on `lease`'s backend.
fn start(
    attempts: &mut Vec<Attempt>,
    request: &mut InFlight<'_>,
    r: usize,
    lease: Lease,
    now: u64,
    params: &Params,
    backend_of: impl Fn(&Lease) -> usize,
) -> usize {
    let a = attempts.len();
    attempts.push(Attempt {
        request: r,
        backend: backend_of(&lease),
        lease: Some(lease),
        sent_ns: now,
        work_ns: work_ns(params, r, request.attempts.len()),
        cancelled: false,
    });
    request.attempts.push(a);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            backends: 5,
            servers: 2,
            service_ms: 10.0,
            slow_share: 0.01,
            slowdown: 20.0,
            utilisation: 0.5,
            duration_s: 30.0,
            warmup_s: 15.0,
            seed: 5,
        }
    }

    /// Every lease ends; without hedging no hedge is sent; with it, at most its budget.
    #[test]
    fn hedges_stay_within_their_budget_and_nothing_leaks() {
        let p = params();
        let off = run(Algorithm::RoundRobin, &p, Options::default(), Hedge::Off).unwrap();
        assert_eq!((off.hedges, off.won, off.leaked), (0, 0, 0));
        for load in [0.05, 0.01] {
            let on = run(
                Algorithm::RoundRobin,
                &p,
                Options::default(),
                Hedge::Percentile(load),
            )
            .unwrap();
            assert_eq!(on.leaked, 0);
            assert_eq!(on.latencies.len(), off.latencies.len(), "the same arrivals");
            assert!(on.hedges > 0 && on.won <= on.hedges);
            // The budget is per request over 10 s windows: within a few of the share.
            assert!(
                on.extra_load() <= load * 1.2 + 0.002,
                "{load}: {}",
                on.extra_load()
            );
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params();
        p.backends = 1;
        assert!(p.validate().unwrap_err().contains("--backends"));
        let mut p = params();
        p.warmup_s = 30.0;
        assert!(p.validate().unwrap_err().contains("--warmup-s"));
        let mut p = params();
        p.utilisation = 1.0;
        assert!(p.validate().unwrap_err().contains("--utilisation"));
        assert!(params().validate().is_ok());
    }
}
