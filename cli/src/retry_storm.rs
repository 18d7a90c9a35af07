//! `lb simulate --scenario retry-storm`: retries on a fleet pushed past its capacity, without
//! a budget and with each of liblb's limits, as a discrete-event simulation through the real
//! request loop (the engine is `request_events`).
//!
//! **Model.** `--backends` N backends (default 10), each a FIFO queue before `--servers` k
//! servers (default 1) with exponential service times of mean `--service-ms` (default 10 ms):
//! 1,000 req/s in all. Requests arrive as a Poisson process at `--utilisation` x capacity
//! (default 1.2: 1,200 req/s, 20% more than the fleet can serve) for `--duration-s` (default
//! 30 s), each with one of `--keys` keys (default 10,000). Each request runs the request loop
//! (`Balancer::request`, `attempt`, `finish`) under the default `RetryPolicy` with
//! `--attempts` (default 3, Envoy's and gRPC's default) and its jittered backoff (25 ms base,
//! 250 ms max), as a scheduled event in virtual time. The client waits `--timeout-ms`
//! (default 1,000 ms, 100 mean service times, the order of a typical RPC deadline) for each
//! attempt and then finishes it as `Failure::timeout()`; the backend keeps working on it, and
//! its late answer is dropped (no cancellation, as an HTTP/1.1 server that only learns of the
//! client's going when it writes the answer). Under a sustained overload the queues grow until
//! every attempt waits longer than the timeout; then the fleet works only on requests nobody
//! waits for any more, and goodput collapses: the metastable failure that retries make worse
//! (Bronson et al., "Metastable Failures in Distributed Systems", HotOS 2021).
//!
//! **Runs**, per algorithm (default `least_request`, Envoy's default):
//! - `none`: no budget, every failed attempt retried up to `--attempts`.
//! - `retry`: the default `RetryBudget` (tower's `TpsBudget`, Finagle's `RetryBudget`): retries
//!   at most 20% of the requests of the last 10 s, plus a reserve of 10 per second (100 per
//!   10 s window).
//! - `adaptive`: the SRE book's client-side throttling (`AdaptiveThrottle`, "Handling
//!   Overload", chapter 21), K = 2, over `--window-s` (default 10 s: the book's 2 minutes is
//!   longer than this run, and would carry the first seconds' accepts through all of it).
//!   Requests rejected locally count as failed requests (`throttled`).
//!
//! The balancer runs with its default options otherwise (consecutive-failure and success-rate
//! ejection included: timeouts count as failures; at most 10% of the nodes ejected).
//!
//! **Measured** per run: requests; attempts sent and their ratio to requests (the offered
//! load's amplification); retries as a share of requests; goodput (successful requests per
//! second of the run); p99 latency of the successful requests (arrival to success); the share
//! of requests failed and why they stopped; per second, the attempts sent and the successes.

use crate::Failure;
use crate::chart::{self, Line, Panel};
use crate::request_events::{self, Answer, Fleet, Model, Tally, Workload};
use crate::slow_node::virtual_balancer;
use liblb_core::{AdaptiveThrottle, Algorithm, Balancer, Budget, Options, Outcome};
use liblb_core::{RetryBudget, RetryPolicy, Stop};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub fleet: Fleet,
    pub timeout_ms: f64,
    pub attempts: u32,
    pub window_s: f64,
}

/// The highest `--utilisation` this scenario takes: 3x capacity.
const MAX_UTILISATION: f64 = 3.0;

impl Params {
    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        self.fleet.validate(MAX_UTILISATION, self.attempts)?;
        if !(self.timeout_ms.is_finite()
            && self.timeout_ms >= 1.0
            && self.timeout_ms <= 3_600_000.0)
        {
            return Err(format!(
                "--timeout-ms must be from 1 ms to an hour, got {}",
                crate::num(self.timeout_ms)
            ));
        }
        if !(self.window_s.is_finite() && (1.0..=3600.0).contains(&self.window_s)) {
            return Err(format!(
                "--window-s must be from 1 to 3600 seconds, got {}",
                crate::num(self.window_s)
            ));
        }
        Ok(())
    }
}

/// What limits the retries in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    None,
    Retry,
    Adaptive,
}

impl Limit {
    pub const ALL: [Limit; 3] = [Limit::None, Limit::Retry, Limit::Adaptive];

    pub fn name(self) -> &'static str {
        match self {
            Limit::None => "none",
            Limit::Retry => "retry",
            Limit::Adaptive => "adaptive",
        }
    }
}

/// What one run measured.
pub(crate) struct Run {
    pub algorithm: Algorithm,
    pub limit: Limit,
    pub tally: Tally,
    pub duration_s: f64,
}

impl Run {
    /// Retries (attempts after a request's first) per request.
    pub fn retry_share(&self) -> f64 {
        let first = self.tally.requests - self.tally.stops[Stop::Throttled as usize];
        (self.tally.attempts - first) as f64 / self.tally.requests.max(1) as f64
    }

    /// Successful requests per second of the run.
    pub fn goodput(&self) -> f64 {
        self.tally.succeeded as f64 / self.duration_s
    }
}

struct Storm<'a> {
    fleet: &'a Fleet,
    tally: Tally,
}

impl Model for Storm<'_> {
    fn servers(&self) -> usize {
        self.fleet.servers
    }

    fn answer(&mut self, backend: usize, now: u64, _attempt: u32, work: f64, _u: f64) -> Answer {
        self.tally.sent(now, backend);
        Answer::Serve {
            service_ns: self.fleet.service_ns(work),
            success: true,
        }
    }

    fn attempt_ended(&mut self, _: u64, _: usize, _: u64, outcome: Outcome, _: &Balancer) {
        self.tally.attempt_ended(outcome);
    }

    fn request_ended(&mut self, now: u64, arrived: u64, _attempts: u32, stop: Option<Stop>) {
        self.tally.request_ended(now, arrived, stop);
    }
}

/// Runs the scenario under one algorithm and limit.
pub(crate) fn run(
    algorithm: Algorithm,
    limit: Limit,
    params: &Params,
    options: Options,
    keys: &[Vec<u8>],
) -> Result<Run, liblb_core::Error> {
    let fleet = &params.fleet;
    let (balancer, clock) = virtual_balancer(algorithm, fleet.nodes(), options, fleet.seed)?;
    let budget = match limit {
        Limit::None => None,
        Limit::Retry => Some(Budget::Retry(Arc::new(RetryBudget::new(
            RetryBudget::DEFAULT_TTL,
            RetryBudget::DEFAULT_MIN_PER_SEC,
            RetryBudget::DEFAULT_RETRY_PERCENT,
            0,
        )?))),
        Limit::Adaptive => Some(Budget::Adaptive(Arc::new(AdaptiveThrottle::new(
            AdaptiveThrottle::DEFAULT_K,
            Duration::from_secs_f64(params.window_s),
            0,
        )?))),
    };
    let workload = Workload {
        seed: fleet.seed,
        gap_ns: 1e9 / fleet.rate(),
        end_ns: fleet.end_ns(),
        keys,
        policy: RetryPolicy {
            max_attempts: params.attempts,
            ..RetryPolicy::default()
        },
        budget,
        timeout_ns: Some((params.timeout_ms * 1e6).round() as u64),
    };
    let mut model = Storm {
        fleet,
        tally: Tally::default(),
    };
    request_events::run(&balancer, &clock, fleet.backends, &workload, &mut model)?;
    model.tally.done();
    Ok(Run {
        algorithm,
        limit,
        tally: model.tally,
        duration_s: fleet.duration_s,
    })
}

/// Runs every algorithm under each limit and prints the table (and draws the SVG).
pub(crate) fn print(
    params: &Params,
    algorithms: &[Algorithm],
    options: Options,
    svg: Option<&Path>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let fleet = &params.fleet;
    writeln!(
        out,
        "== retry-storm: {} backends x {} server(s), FIFO, exponential service times with mean {} ms; Poisson arrivals at {:.0}% of capacity ({:.1} of {:.1} req/s) for {} s ==",
        fleet.backends,
        fleet.servers,
        fleet.service_ms,
        fleet.utilisation * 100.0,
        fleet.rate(),
        fleet.capacity(),
        fleet.duration_s
    )?;
    writeln!(
        out,
        "{} attempts per request (backoff 25-250 ms, jittered); an attempt unanswered after {} ms times out and is retried, the backend still serves it; {} keys; seed {}",
        params.attempts, params.timeout_ms, fleet.keys, fleet.seed
    )?;
    writeln!(
        out,
        "budgets: none; retry = RetryBudget(ttl {} s, min_per_sec {}, retry_percent {}); adaptive = AdaptiveThrottle(K {}, window {} s)",
        RetryBudget::DEFAULT_TTL.as_secs(),
        RetryBudget::DEFAULT_MIN_PER_SEC,
        RetryBudget::DEFAULT_RETRY_PERCENT,
        AdaptiveThrottle::DEFAULT_K,
        params.window_s
    )?;
    let keys = crate::failing_node::keys(fleet.keys);
    let mut runs = Vec::new();
    for algorithm in algorithms {
        for limit in Limit::ALL {
            runs.push(run(*algorithm, limit, params, options, &keys)?);
        }
    }
    writeln!(
        out,
        "\n{:<22} {:>8} {:>8} {:>8} {:>7} {:>8} {:>9} {:>9} {:>7}  stopped",
        "algorithm",
        "budget",
        "requests",
        "attempts",
        "amplif",
        "retries",
        "goodput/s",
        "p99 ms",
        "failed"
    )?;
    for r in &runs {
        let t = &r.tally;
        writeln!(
            out,
            "{:<22} {:>8} {:>8} {:>8} {:>7.2} {:>7.1}% {:>9.1} {:>9.1} {:>6.1}%  {}",
            r.algorithm.name(),
            r.limit.name(),
            t.requests,
            t.attempts,
            t.amplification(),
            r.retry_share() * 100.0,
            r.goodput(),
            t.quantile_ms(0.99),
            t.failed_share() * 100.0,
            t.stops_text()
        )?;
    }
    writeln!(
        out,
        "(amplif: attempts sent per request, the offered load's multiplier; retries: attempts \
         after a request's first, per request; goodput/s: successful requests per second of \
         the run; p99 ms: of the successful requests, arrival to success; failed: requests \
         given up, by reason: max_attempts after the last attempt timed out, budget when the \
         budget refused a retry, throttled when the adaptive throttle rejected it locally)"
    )?;
    if let Some(path) = svg {
        draw(path, params, &runs).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// Left: attempts sent per second over the fleet's capacity; right: successful requests per
/// second; a line per run.
fn draw(path: &Path, params: &Params, runs: &[Run]) -> Result<(), String> {
    let fleet = &params.fleet;
    let title = format!(
        "retry-storm: {} backends, Poisson arrivals at {:.0}% of capacity, {} attempts, {} ms timeout, seed {}",
        fleet.backends,
        fleet.utilisation * 100.0,
        params.attempts,
        params.timeout_ms,
        fleet.seed
    );
    let names: Vec<String> = runs
        .iter()
        .map(|r| format!("{}, {}", r.algorithm.name(), r.limit.name()))
        .collect();
    let series = |f: &dyn Fn(&request_events::Bin) -> f64| -> Vec<Line> {
        runs.iter()
            .enumerate()
            .map(|(colour, r)| Line {
                colour,
                points: r
                    .tally
                    .bins
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (i as f64 + 0.5, f(b)))
                    .take_while(|(t, _)| *t < fleet.duration_s)
                    .collect(),
            })
            .collect()
    };
    let capacity = fleet.capacity();
    chart::draw_panels(
        path,
        &title,
        fleet.duration_s,
        Panel {
            caption: "attempts sent per second",
            y_desc: "% of the fleet's capacity",
            lines: series(&|b| b.attempts as f64 * 100.0 / capacity),
            shade: None,
        },
        Panel {
            caption: "successful requests per second (goodput)",
            y_desc: "requests per second",
            lines: series(&|b| b.succeeded as f64),
            shade: None,
        },
        &names,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(utilisation: f64) -> Params {
        Params {
            fleet: Fleet {
                backends: 5,
                servers: 1,
                service_ms: 10.0,
                utilisation,
                duration_s: 5.0,
                keys: 100,
                seed: 3,
            },
            timeout_ms: 200.0,
            attempts: 3,
            window_s: 5.0,
        }
    }

    /// Every request ends once, every attempt is counted, and under light load nothing
    /// fails, nothing is retried and every limit runs the same.
    #[test]
    fn light_load_needs_no_retries() {
        let p = params(0.3);
        let keys = crate::failing_node::keys(p.fleet.keys);
        for limit in Limit::ALL {
            let r = run(Algorithm::RoundRobin, limit, &p, Options::default(), &keys).unwrap();
            let t = &r.tally;
            assert_eq!(t.bins.iter().map(|b| b.arrivals).sum::<u64>(), t.requests);
            assert_eq!(t.bins.iter().map(|b| b.ended).sum::<u64>(), t.requests);
            assert_eq!(t.bins.iter().map(|b| b.attempts).sum::<u64>(), t.attempts);
            assert_eq!(t.attempts, t.requests, "{limit:?}");
            assert_eq!(t.failed(), 0, "{limit:?}");
        }
    }

    /// Past capacity without a budget every failed attempt is retried: attempts are the
    /// first attempts plus the retries the failures allowed.
    #[test]
    fn overload_retries_up_to_the_limit() {
        let p = params(1.5);
        let keys = crate::failing_node::keys(p.fleet.keys);
        let r = run(
            Algorithm::RoundRobin,
            Limit::None,
            &p,
            Options::default(),
            &keys,
        )
        .unwrap();
        let t = &r.tally;
        assert!(t.timeouts > 0);
        assert_eq!(t.attempts, t.timeouts + t.succeeded);
        assert!(t.attempts <= 3 * t.requests);
        assert_eq!(t.failed(), t.stops.iter().sum::<u64>());
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params(1.2);
        p.timeout_ms = 0.0;
        assert!(p.validate().unwrap_err().contains("--timeout-ms"));
        let mut p = params(1.2);
        p.attempts = 0;
        assert!(p.validate().unwrap_err().contains("--attempts"));
        let mut p = params(1.2);
        p.window_s = 0.5;
        assert!(p.validate().unwrap_err().contains("--window-s"));
        assert!(
            params(3.5)
                .validate()
                .unwrap_err()
                .contains("--utilisation")
        );
        assert!(params(1.2).validate().is_ok());
    }
}
