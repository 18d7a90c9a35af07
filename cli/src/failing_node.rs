//! `lb simulate --scenario failing-node`: passive outlier ejection, as a discrete-event
//! simulation (the engine is `events`).
//!
//! **Model.** `--backends` N backends (default 10), each a FIFO queue before `--servers` k
//! servers (default 1) with exponential service times of mean `--service-ms` (default 10 ms).
//! From `--fail-from-s` (default 10 s) until `--fail-until-s` (default 60 s) `backend-0` fails
//! every request it starts, fast: `--fail-ms` (default 1 ms) each, as a backend answering 503 at
//! once does. Then it recovers. Requests arrive as a Poisson process at `--utilisation` x
//! capacity (default 70%: 700 req/s) for `--duration-s` (default 110 s); each carries a key
//! drawn uniformly from `--keys` keys (default 10,000), which the keyed algorithms route by
//! and the others ignore. Each request is routed by the real `Balancer` through `acquire` and
//! its lease finished with its outcome (`Failure` on the failing backend) and latency; there
//! are no retries, so every request the failing backend gets is a failed request.
//!
//! **Runs.** Every algorithm twice: with the given options (default: Envoy's
//! `consecutive_5xx` 5, 30 s base ejection time multiplied by the times ejected, at most 10%
//! of the nodes ejected, at least one; the success-rate and failure-percentage detectors are
//! turned off here, they are `flaky-node`'s subject), and with `consecutive_failures=0` (no
//! ejection) as the baseline.
//!
//! **Measured** per run: requests failed; backend-0's share of the requests that arrived while
//! it was failing; each ejection of backend-0 (when, read from `stats()` right after the
//! failure that caused it, and until when); requests routed to it while ejected (zero unless
//! panic or the ejection cap let some through); the time from its recovery to its first
//! successful request; the most requests at any backend at once; and, per second, the share
//! of requests failed and backend-0's share of the arrivals.

use crate::events::{self, Model, Workload};
use crate::slow_node::{backend_id, virtual_balancer};
use liblb_core::{Algorithm, Balancer, Node, Options, Status};

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub backends: usize,
    pub servers: usize,
    pub service_ms: f64,
    pub utilisation: f64,
    pub keys: usize,
    pub fail_ms: f64,
    pub fail_from_s: f64,
    pub fail_until_s: f64,
    pub duration_s: f64,
    pub seed: u64,
}

/// Series interval: one second.
pub(crate) const INTERVAL_NS: u64 = 1_000_000_000;

impl Params {
    /// Total service rate, requests per second.
    pub fn capacity(&self) -> f64 {
        self.backends as f64 * self.servers as f64 * 1e3 / self.service_ms
    }

    /// Arrival rate, requests per second.
    pub fn rate(&self) -> f64 {
        self.utilisation * self.capacity()
    }

    /// When backend-0 starts failing, nanoseconds.
    pub fn fail_start_ns(&self) -> u64 {
        (self.fail_from_s * 1e9).round() as u64
    }

    /// When it recovers.
    pub fn fail_end_ns(&self) -> u64 {
        (self.fail_until_s * 1e9).round() as u64
    }

    /// When arrivals stop.
    pub fn end_ns(&self) -> u64 {
        (self.duration_s * 1e9).round() as u64
    }

    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [("service-ms", self.service_ms), ("fail-ms", self.fail_ms)] {
            if !(v.is_finite() && v > 0.0 && v <= 3_600_000.0) {
                return Err(format!(
                    "--{name} must be a positive number of milliseconds up to an hour, got {}",
                    crate::num(v)
                ));
            }
        }
        if !(self.utilisation > 0.0 && self.utilisation < 1.0) {
            return Err(format!(
                "--utilisation must be above 0 and below 1 (a share of total capacity), got {}",
                crate::num(self.utilisation)
            ));
        }
        if self.backends < 2 || self.servers == 0 || self.keys == 0 {
            return Err(format!(
                "--backends must be at least 2 (one failing, one or more healthy), --servers and --keys at least 1; got {}, {}, {}",
                self.backends, self.servers, self.keys
            ));
        }
        crate::bounded("--backends", self.backends, 2, crate::MAX_BACKENDS)?;
        crate::bounded("--keys", self.keys, 1, crate::MAX_KEYS)?;
        const DAY_S: f64 = 86_400.0;
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= DAY_S) {
            return Err(format!(
                "--duration-s must be above 0 and at most a day (86400), got {}",
                crate::num(self.duration_s)
            ));
        }
        if !(0.0 <= self.fail_from_s
            && self.fail_from_s < self.fail_until_s
            && self.fail_until_s <= self.duration_s)
        {
            return Err(format!(
                "need 0 <= --fail-from-s < --fail-until-s <= --duration-s, got {}, {}, {}",
                crate::num(self.fail_from_s),
                crate::num(self.fail_until_s),
                crate::num(self.duration_s)
            ));
        }
        let requests = self.rate() * self.duration_s;
        if requests > MAX_REQUESTS as f64 {
            return Err(format!(
                "the run would have about {} requests, more than {MAX_REQUESTS}: lower --duration-s or --utilisation",
                crate::num(requests.round())
            ));
        }
        Ok(())
    }

    /// The backends, tagged with their index.
    pub fn nodes(&self) -> Vec<Node> {
        (0..self.backends)
            .map(|i| Node::with_tag(backend_id(i), 1, i as u64))
            .collect()
    }
}

/// Most requests per run.
const MAX_REQUESTS: usize = 10_000_000;

/// The key population: `key-0` ... `key-{n-1}`.
pub(crate) fn keys(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("key-{i}").into_bytes()).collect()
}

/// One interval's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Bin {
    /// Requests that arrived.
    pub arrivals: u64,
    /// ... of which routed to backend-0.
    pub to_failing: u64,
    /// Requests that ended.
    pub done: u64,
    /// ... of which failed.
    pub failed: u64,
}

/// What one run measured.
pub(crate) struct Run {
    pub algorithm: Algorithm,
    /// Whether ejection was on (`consecutive_failures` > 0).
    pub ejection: bool,
    pub requests: u64,
    pub failed: u64,
    /// Requests that arrived while backend-0 was failing, and of those routed to it.
    pub during: u64,
    pub during_to_failing: u64,
    /// Backend-0's ejections: (when, until), nanoseconds.
    pub ejections: Vec<(u64, u64)>,
    /// Requests routed to backend-0 while it was ejected.
    pub leaked: u64,
    /// From recovery to backend-0's first successful request, nanoseconds.
    pub back_ns: Option<u64>,
    pub max_queue: Vec<usize>,
    pub bins: Vec<Bin>,
}

impl Run {
    /// Backend-0's share of the requests that arrived while it was failing.
    pub fn failing_share(&self) -> f64 {
        self.during_to_failing as f64 / self.during.max(1) as f64
    }
}

struct Failing<'a> {
    params: &'a Params,
    from: u64,
    until: u64,
    run: Run,
}

impl Model for Failing<'_> {
    fn servers(&self) -> usize {
        self.params.servers
    }

    fn serve(&self, backend: usize, now: u64, work: f64) -> (u64, bool) {
        if backend == 0 && (self.from..self.until).contains(&now) {
            ((self.params.fail_ms * 1e6).round() as u64, false)
        } else {
            ((work * self.params.service_ms * 1e6).round() as u64, true)
        }
    }

    fn routed(&mut self, now: u64, backend: usize, _key: usize, at: usize, _total: usize) {
        let run = &mut self.run;
        run.requests += 1;
        let bin = bin(&mut run.bins, now);
        bin.arrivals += 1;
        if backend == 0 {
            bin.to_failing += 1;
            if let Some((_, until)) = run.ejections.last() {
                if now < *until {
                    run.leaked += 1;
                }
            }
        }
        if (self.from..self.until).contains(&now) {
            run.during += 1;
            run.during_to_failing += u64::from(backend == 0);
        }
        run.max_queue[backend] = run.max_queue[backend].max(at);
    }

    fn done(&mut self, now: u64, backend: usize, _arrived: u64, success: bool, b: &Balancer) {
        let run = &mut self.run;
        let bin = bin(&mut run.bins, now);
        bin.done += 1;
        if !success {
            bin.failed += 1;
            run.failed += 1;
            // Only a failure can eject: look right after each one (when ejection is on).
            if !run.ejection {
                return;
            }
            if let Status::Ejected { until_ns } = b.stats()[0].status {
                if run.ejections.last().is_none_or(|(_, u)| *u != until_ns) {
                    run.ejections.push((now, until_ns));
                }
            }
        } else if backend == 0 && now >= self.until && run.back_ns.is_none() {
            run.back_ns = Some(now - self.until);
        }
    }
}

/// The bin for time `now`, growing the series as needed.
fn bin(bins: &mut Vec<Bin>, now: u64) -> &mut Bin {
    let i = (now / INTERVAL_NS) as usize;
    if bins.len() <= i {
        bins.resize(i + 1, Bin::default());
    }
    &mut bins[i]
}

/// Runs the scenario under one algorithm with `options`.
pub(crate) fn run(
    algorithm: Algorithm,
    params: &Params,
    options: Options,
    keys: &[Vec<u8>],
) -> Result<Run, liblb_core::Error> {
    let (balancer, clock) = virtual_balancer(algorithm, params.nodes(), options, params.seed)?;
    let n = keys.len();
    let key_of = move |u: f64| (u * n as f64) as usize;
    let workload = Workload {
        seed: params.seed,
        gap_ns: 1e9 / params.rate(),
        requests: usize::MAX,
        end_ns: params.end_ns(),
        keys,
        key_of: &key_of,
    };
    let mut model = Failing {
        params,
        from: params.fail_start_ns(),
        until: params.fail_end_ns(),
        run: Run {
            algorithm,
            ejection: options.consecutive_failures > 0,
            requests: 0,
            failed: 0,
            during: 0,
            during_to_failing: 0,
            ejections: Vec::new(),
            leaked: 0,
            back_ns: None,
            max_queue: vec![0; params.backends],
            bins: Vec::new(),
        },
    };
    events::run(
        &mut events::Clients::one(balancer),
        &clock,
        params.backends,
        &workload,
        &mut model,
    )?;
    Ok(model.run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn params() -> Params {
        Params {
            backends: 5,
            servers: 1,
            service_ms: 10.0,
            utilisation: 0.5,
            keys: 100,
            fail_ms: 1.0,
            fail_from_s: 1.0,
            fail_until_s: 5.0,
            duration_s: 8.0,
            seed: 3,
        }
    }

    fn short_ejection() -> Options {
        Options {
            base_ejection_time: Duration::from_secs(1),
            ..Options::default()
        }
    }

    /// Every request ends; the balancer counted the same requests and failures; a failing
    /// node is ejected after exactly `consecutive_failures` failures (it is the only one
    /// failing, and it fails every request it gets).
    #[test]
    fn counts_agree_with_the_balancer() {
        let p = params();
        let keys = keys(p.keys);
        for algorithm in Algorithm::ALL {
            let r = run(algorithm, &p, short_ejection(), &keys).unwrap();
            assert_eq!(r.bins.iter().map(|b| b.arrivals).sum::<u64>(), r.requests);
            assert_eq!(r.bins.iter().map(|b| b.done).sum::<u64>(), r.requests);
            assert_eq!(r.bins.iter().map(|b| b.failed).sum::<u64>(), r.failed);
            assert_eq!(r.leaked, 0, "{algorithm}");
            if algorithm == Algorithm::PeakEwma {
                // Failure-aware: each failure costs the node the failure penalty (5 s) in
                // its latency estimate, so it is avoided before a streak can eject it, and
                // probed again only once the penalty has decayed (tens of seconds).
                let share = r.during_to_failing as f64 / r.during as f64;
                assert!(share < 0.01, "{share}");
                continue;
            }
            assert!(!r.ejections.is_empty(), "{algorithm}");
            // 1 s, then 2 s if it still fails when it returns.
            let (at, until) = r.ejections[0];
            assert_eq!(until - at, 1_000_000_000, "{algorithm}");
            assert!(r.back_ns.is_some(), "{algorithm}");
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params();
        p.fail_until_s = 9.0;
        assert!(p.validate().unwrap_err().contains("--fail-until-s"));
        let mut p = params();
        p.fail_ms = 0.0;
        assert!(p.validate().unwrap_err().contains("--fail-ms"));
        let mut p = params();
        p.backends = 1;
        assert!(p.validate().unwrap_err().contains("--backends"));
        let mut p = params();
        p.duration_s = 1e9;
        assert!(p.validate().unwrap_err().contains("--duration-s"));
        assert!(params().validate().is_ok());
    }
}
