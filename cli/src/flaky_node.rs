//! `lb simulate --scenario flaky-node`: a backend failing a share of its requests at random,
//! against consecutive-failure ejection alone and with Envoy's success-rate ejection, as a
//! discrete-event simulation through the real request loop (the engine is `request_events`).
//!
//! **Model.** `--backends` N backends (default 10), each a FIFO queue before `--servers` k
//! servers (default 1) with exponential service times of mean `--service-ms` (default 10 ms).
//! From `--fail-from-s` (default 10 s) to the end of the run `backend-0` fails each request it
//! serves with probability `--fail-rate` (default 0.3), independently (an error after its
//! service time, as a backend with one bad dependency among several). Requests arrive as a
//! Poisson process at `--utilisation` x capacity (default 70%) for `--duration-s` (default
//! 60 s), each with one of `--keys` keys, and run the request loop with `--attempts` (default
//! 3): a failed attempt is retried on another node.
//!
//! Five failures in a row at 30% come at a given request with probability 0.3^5 = 0.24%; at
//! backend-0's 70 requests a second a streak is expected about every 8 s (the mean wait for
//! a run of r successes-of-probability p is (1 − p^r) / ((1 − p) p^r) trials, Feller vol. 1,
//! XIII.7): consecutive-failure ejection does catch this backend, by chance and late, and
//! lets it back after each ejection. Envoy's success-rate detector
//! (`source/extensions/outlier_detection/...`, `outlier_detection_impl.cc`,
//! `successRateEjectionThreshold`) compares each node's success rate over an interval (10 s)
//! with the mean of all nodes' (at least 5 nodes with 100 requests): a node below
//! mean − 1.9 × stdev is ejected. Here that is 70% against a threshold near 80%.
//!
//! **Runs**, per algorithm (default `round_robin`, `least_request`): consecutive-failure
//! ejection alone (`consecutive_failures` 5, `enforcing_success_rate=0`) and with the
//! success-rate detector too (the balancer's defaults: `enforcing_success_rate` 100,
//! `interval_ms` 10000, `success_rate_request_volume` 100, `success_rate_minimum_hosts` 5,
//! `success_rate_stdev_factor` 1900).
//!
//! **Measured** per run: backend-0's failed attempts; its share of the attempts while it was
//! flaky; its ejections (when, read from `stats()` after every attempt, since the interval
//! detectors run at the first outcome after each interval, and for how long); the time from
//! the start of the flakiness to the first ejection; requests failed (their last attempt
//! failed); per second, backend-0's share of the attempts and its failed attempts.

use crate::Failure;
use crate::chart::{self, Line, Panel};
use crate::request_events::{self, Answer, Fleet, Model, Tally, Workload};
use crate::slow_node::virtual_balancer;
use liblb_core::{Algorithm, Balancer, Options, Outcome, RetryPolicy, Status, Stop};
use std::io::Write;
use std::path::Path;

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub fleet: Fleet,
    pub from_s: f64,
    pub fail_rate: f64,
    pub attempts: u32,
}

impl Params {
    fn start_ns(&self) -> u64 {
        (self.from_s * 1e9).round() as u64
    }

    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        self.fleet.validate(1.0, self.attempts)?;
        if !(0.0 <= self.from_s && self.from_s < self.fleet.duration_s) {
            return Err(format!(
                "need 0 <= --fail-from-s < --duration-s, got {}, {}",
                crate::num(self.from_s),
                crate::num(self.fleet.duration_s)
            ));
        }
        if !(0.0..=1.0).contains(&self.fail_rate) {
            return Err(format!(
                "--fail-rate must be from 0 to 1 (a probability), got {}",
                crate::num(self.fail_rate)
            ));
        }
        Ok(())
    }
}

/// Which detectors a run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detectors {
    /// Consecutive failures only.
    Consecutive,
    /// Consecutive failures and success rate.
    SuccessRate,
}

impl Detectors {
    pub fn name(self) -> &'static str {
        match self {
            Detectors::Consecutive => "consec",
            Detectors::SuccessRate => "+success",
        }
    }
}

/// What one run measured.
pub(crate) struct Run {
    pub algorithm: Algorithm,
    pub detectors: Detectors,
    pub tally: Tally,
    /// Attempts sent while backend-0 was flaky, and of those to it.
    pub during: u64,
    pub during_to_first: u64,
    /// Backend-0's failed attempts, in all and per second.
    pub first_failed: u64,
    pub first_failed_bins: Vec<u64>,
    /// Backend-0's ejections: (when, until), nanoseconds.
    pub ejections: Vec<(u64, u64)>,
}

impl Run {
    /// Backend-0's share of the attempts sent while it was flaky.
    pub fn flaky_share(&self) -> f64 {
        self.during_to_first as f64 / self.during.max(1) as f64
    }
}

struct Flaky<'a> {
    params: &'a Params,
    from: u64,
    run: Run,
}

impl Model for Flaky<'_> {
    fn servers(&self) -> usize {
        self.params.fleet.servers
    }

    fn answer(&mut self, backend: usize, now: u64, _attempt: u32, work: f64, u: f64) -> Answer {
        let run = &mut self.run;
        run.tally.sent(now, backend);
        let flaky = now >= self.from;
        if flaky {
            run.during += 1;
            run.during_to_first += u64::from(backend == 0);
        }
        // Decided as the attempt arrives, from its own draw: independent per request.
        Answer::Serve {
            service_ns: self.params.fleet.service_ns(work),
            success: !(backend == 0 && flaky && u < self.params.fail_rate),
        }
    }

    fn attempt_ended(&mut self, now: u64, backend: usize, _: u64, outcome: Outcome, b: &Balancer) {
        let run = &mut self.run;
        run.tally.attempt_ended(outcome);
        if backend == 0 && !outcome.is_success() {
            run.first_failed += 1;
            let i = (now / request_events::INTERVAL_NS) as usize;
            if run.first_failed_bins.len() <= i {
                run.first_failed_bins.resize(i + 1, 0);
            }
            run.first_failed_bins[i] += 1;
        }
        // Any outcome may run the interval detectors: look after each one.
        if let Status::Ejected { until_ns } = b.stats()[0].status {
            if run.ejections.last().is_none_or(|(_, u)| *u != until_ns) {
                run.ejections.push((now, until_ns));
            }
        }
    }

    fn request_ended(&mut self, now: u64, arrived: u64, _attempts: u32, stop: Option<Stop>) {
        self.run.tally.request_ended(now, arrived, stop);
    }
}

/// Runs the scenario under one algorithm with `detectors`.
pub(crate) fn run(
    algorithm: Algorithm,
    detectors: Detectors,
    params: &Params,
    options: Options,
    keys: &[Vec<u8>],
) -> Result<Run, liblb_core::Error> {
    let fleet = &params.fleet;
    let options = Options {
        enforcing_success_rate: match detectors {
            Detectors::Consecutive => 0,
            Detectors::SuccessRate => options.enforcing_success_rate,
        },
        ..options
    };
    let (balancer, clock) = virtual_balancer(algorithm, fleet.nodes(), options, fleet.seed)?;
    let workload = Workload {
        seed: fleet.seed,
        gap_ns: 1e9 / fleet.rate(),
        end_ns: fleet.end_ns(),
        keys,
        policy: RetryPolicy {
            max_attempts: params.attempts,
            ..RetryPolicy::default()
        },
        budget: None,
        timeout_ns: None,
    };
    let mut model = Flaky {
        params,
        from: params.start_ns(),
        run: Run {
            algorithm,
            detectors,
            tally: Tally::default(),
            during: 0,
            during_to_first: 0,
            first_failed: 0,
            first_failed_bins: Vec::new(),
            ejections: Vec::new(),
        },
    };
    request_events::run(&balancer, &clock, fleet.backends, &workload, &mut model)?;
    model.run.tally.done();
    Ok(model.run)
}

/// Seconds, printed short: `30`, `40.125`.
fn secs(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if (s - s.round()).abs() < 5e-4 {
        format!("{s:.0}")
    } else {
        format!("{s:.3}")
    }
}

/// Runs every algorithm with both sets of detectors, prints the table (and draws the SVG).
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
        "== flaky-node: {} backends x {} server(s), FIFO, exponential service times with mean {} ms; backend-0 fails {:.0}% of its requests at random from {} s on ==",
        fleet.backends,
        fleet.servers,
        fleet.service_ms,
        params.fail_rate * 100.0,
        params.from_s
    )?;
    writeln!(
        out,
        "Poisson arrivals at {:.0}% of capacity ({:.1} of {:.1} req/s) for {} s; {} keys; {} attempts per request; seed {}",
        fleet.utilisation * 100.0,
        fleet.rate(),
        fleet.capacity(),
        fleet.duration_s,
        fleet.keys,
        params.attempts,
        fleet.seed
    )?;
    writeln!(
        out,
        "consec: consecutive_failures {}, enforcing_success_rate=0; +success: and success-rate ejection (enforcing {}, interval {} ms, request volume {}, minimum hosts {}, stdev factor {}); base_ejection_time {} ms x times ejected, max_ejection_percent {}",
        options.consecutive_failures,
        options.enforcing_success_rate,
        options.interval.as_millis(),
        options.success_rate_request_volume,
        options.success_rate_minimum_hosts,
        options.success_rate_stdev_factor,
        options.base_ejection_time.as_millis(),
        options.max_ejection_percent
    )?;
    let keys = crate::failing_node::keys(fleet.keys);
    let mut runs = Vec::new();
    for algorithm in algorithms {
        for detectors in [Detectors::Consecutive, Detectors::SuccessRate] {
            runs.push(run(*algorithm, detectors, params, options, &keys)?);
        }
    }
    writeln!(
        out,
        "\n{:<22} {:>9} {:>9} {:>9} {:>8} {:>8}  ejections of backend-0 (at s+for s)",
        "algorithm", "detectors", "b0 failed", "b0 share", "eject s", "failed"
    )?;
    let start = params.start_ns();
    for r in &runs {
        let eject = r
            .ejections
            .iter()
            .find(|(at, _)| *at >= start)
            .map_or("-".to_string(), |(at, _)| {
                format!("{:.3}", (at - start) as f64 / 1e9)
            });
        let ejections = if r.ejections.is_empty() {
            "-".to_string()
        } else {
            r.ejections
                .iter()
                .map(|(at, until)| format!("{}+{}", secs(*at), secs(until - at)))
                .collect::<Vec<_>>()
                .join(",")
        };
        writeln!(
            out,
            "{:<22} {:>9} {:>9} {:>8.2}% {:>8} {:>8}  {ejections}",
            r.algorithm.name(),
            r.detectors.name(),
            r.first_failed,
            r.flaky_share() * 100.0,
            eject,
            r.tally.failed(),
        )?;
    }
    writeln!(
        out,
        "(b0 failed: backend-0's failed attempts; b0 share: its share of the attempts sent \
         while it was flaky (1/{} = {:.2}% without ejection); eject s: from the start of the \
         flakiness to its first ejection; failed: requests given up (their last attempt \
         failed); ejections: when the balancer's status was first seen ejected, after an \
         outcome, and for how long (the interval detectors date an ejection from the \
         interval's end, a few ms earlier))",
        fleet.backends,
        100.0 / fleet.backends as f64
    )?;
    if let Some(path) = svg {
        draw(path, params, &runs).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// Left: backend-0's share of the attempts per second; right: its failed attempts per second;
/// a line per run. Grey: the flakiness.
fn draw(path: &Path, params: &Params, runs: &[Run]) -> Result<(), String> {
    let fleet = &params.fleet;
    let title = format!(
        "flaky-node: {} backends, backend-0 fails {:.0}% of its requests at random from {} s, arrivals at {:.0}% of capacity, seed {}",
        fleet.backends,
        params.fail_rate * 100.0,
        params.from_s,
        fleet.utilisation * 100.0,
        fleet.seed
    );
    let names: Vec<String> = runs
        .iter()
        .map(|r| format!("{}, {}", r.algorithm.name(), r.detectors.name()))
        .collect();
    let seconds = |values: Vec<f64>| -> Vec<(f64, f64)> {
        values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i as f64 + 0.5, v))
            .take_while(|(t, _)| *t < fleet.duration_s)
            .collect()
    };
    let share = runs
        .iter()
        .enumerate()
        .map(|(colour, r)| Line {
            colour,
            points: seconds(
                (r.tally.bins.iter())
                    .map(|b| b.to_first as f64 * 100.0 / b.attempts.max(1) as f64)
                    .collect(),
            ),
        })
        .collect();
    let failed = runs
        .iter()
        .enumerate()
        .map(|(colour, r)| Line {
            colour,
            // Zero in the seconds after its last failure (the series stops there).
            points: seconds(
                (0..r.tally.bins.len())
                    .map(|i| r.first_failed_bins.get(i).copied().unwrap_or(0) as f64)
                    .collect(),
            ),
        })
        .collect();
    let shade = Some((params.from_s, fleet.duration_s));
    chart::draw_panels(
        path,
        &title,
        fleet.duration_s,
        Panel {
            caption: "backend-0's share of the attempts per second",
            y_desc: "% of attempts sent",
            lines: share,
            shade,
        },
        Panel {
            caption: "backend-0's failed attempts per second",
            y_desc: "attempts",
            lines: failed,
            shade,
        },
        &names,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(fail_rate: f64) -> Params {
        Params {
            fleet: Fleet {
                backends: 5,
                servers: 1,
                service_ms: 10.0,
                utilisation: 0.5,
                duration_s: 25.0,
                keys: 100,
                seed: 3,
            },
            from_s: 2.0,
            fail_rate,
            attempts: 1,
        }
    }

    /// A backend that fails every request is ejected by both; one that never fails by neither;
    /// without retries each failed attempt is a failed request.
    #[test]
    fn certain_failures_eject_and_none_do_not() {
        let keys = crate::failing_node::keys(100);
        for detectors in [Detectors::Consecutive, Detectors::SuccessRate] {
            let p = params(1.0);
            let r = run(
                Algorithm::RoundRobin,
                detectors,
                &p,
                Options::default(),
                &keys,
            )
            .unwrap();
            assert!(!r.ejections.is_empty(), "{detectors:?}");
            assert_eq!(r.tally.failed(), r.first_failed);
            let p = params(0.0);
            let r = run(
                Algorithm::RoundRobin,
                detectors,
                &p,
                Options::default(),
                &keys,
            )
            .unwrap();
            assert!(r.ejections.is_empty(), "{detectors:?}");
            assert_eq!(r.first_failed, 0);
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params(1.5);
        assert!(p.validate().unwrap_err().contains("--fail-rate"));
        p.fail_rate = 0.3;
        p.from_s = 30.0;
        assert!(p.validate().unwrap_err().contains("--fail-from-s"));
        assert!(params(0.3).validate().is_ok());
    }
}
