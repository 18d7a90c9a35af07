//! `lb simulate --scenario overloaded-node`: a backend that sheds load with `429 Too Many
//! Requests` and `Retry-After`, as a discrete-event simulation through the real request loop
//! (the engine is `request_events`).
//!
//! **Model.** `--backends` N backends (default 10), each a FIFO queue before `--servers` k
//! servers (default 1) with exponential service times of mean `--service-ms` (default 10 ms).
//! From `--overload-from-s` (default 20 s) until `--overload-until-s` (default 80 s: a
//! minute) `backend-0` answers every request at once (`--fail-ms`, default 1 ms) with 429 and
//! `Retry-After: --retry-after-s` (default 5 s), reported to the balancer as
//! `Failure::overloaded().retry_after(..)`: the balancer pauses it (`Status::Overloaded`,
//! the retry-after capped by `max_retry_after_ms`, default 60 s) and picks around it until
//! then (HTTP's `Retry-After`, RFC 9110 section 10.2.3; gRPC's `grpc-retry-pushback-ms`,
//! gRFC A6). Then it serves again. Requests arrive as a Poisson process at `--utilisation` x
//! capacity (default 70%) for `--duration-s` (default 100 s), each with one of `--keys` keys.
//!
//! **Runs**, per algorithm (default `round_robin`, `least_request`, `peak_ewma`): without
//! retries (1 attempt: every 429 is a failed request) and with `--attempts` (default 3; the
//! request loop waits out the retry-after, as gRPC's pushback, then tries another node).
//!
//! **Measured** per run: requests; attempts backend-0 refused; requests failed; backend-0's
//! share of the attempts sent while it was overloaded; attempts sent to it while it was paused
//! (the scenario keeps its own record of each pause, from each 429's arrival plus its
//! retry-after: zero unless the balancer ignored a pause); the times the balancer's
//! `Status::Overloaded` disagreed with that record; the time from the overload's end to
//! backend-0's first success; the successful requests' p99 latency; per second, backend-0's
//! share of the attempts and the share of requests failed.

use crate::Failure;
use crate::chart::{self, Line, Panel};
use crate::request_events::{self, Answer, Fleet, Model, Tally, Workload};
use crate::slow_node::virtual_balancer;
use liblb_core::{Algorithm, Balancer, Options, Outcome, RetryPolicy, Status, Stop};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub fleet: Fleet,
    pub from_s: f64,
    pub until_s: f64,
    pub retry_after_s: f64,
    pub fail_ms: f64,
    pub attempts: u32,
}

impl Params {
    fn start_ns(&self) -> u64 {
        (self.from_s * 1e9).round() as u64
    }

    fn end_ns(&self) -> u64 {
        (self.until_s * 1e9).round() as u64
    }

    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        self.fleet.validate(1.0, self.attempts)?;
        if !(0.0 <= self.from_s
            && self.from_s < self.until_s
            && self.until_s <= self.fleet.duration_s)
        {
            return Err(format!(
                "need 0 <= --overload-from-s < --overload-until-s <= --duration-s, got {}, {}, {}",
                crate::num(self.from_s),
                crate::num(self.until_s),
                crate::num(self.fleet.duration_s)
            ));
        }
        if !(self.retry_after_s.is_finite()
            && self.retry_after_s > 0.0
            && self.retry_after_s <= 3600.0)
        {
            return Err(format!(
                "--retry-after-s must be above 0 and at most an hour, got {}",
                crate::num(self.retry_after_s)
            ));
        }
        if !(self.fail_ms.is_finite() && self.fail_ms > 0.0 && self.fail_ms <= 3_600_000.0) {
            return Err(format!(
                "--fail-ms must be a positive number of milliseconds up to an hour, got {}",
                crate::num(self.fail_ms)
            ));
        }
        Ok(())
    }
}

/// What one run measured.
pub(crate) struct Run {
    pub algorithm: Algorithm,
    pub attempts: u32,
    pub tally: Tally,
    /// Attempts sent while backend-0 was overloaded, and of those to it.
    pub during: u64,
    pub during_to_first: u64,
    /// Attempts sent to backend-0 while it was paused.
    pub leaked: u64,
    /// 429s after which the balancer's status was not `Overloaded` until the pause's end.
    pub disagreed: u64,
    /// From the overload's end to backend-0's first success, nanoseconds.
    pub back_ns: Option<u64>,
}

impl Run {
    /// Backend-0's share of the attempts sent while it was overloaded.
    pub fn overloaded_share(&self) -> f64 {
        self.during_to_first as f64 / self.during.max(1) as f64
    }
}

struct Overload<'a> {
    params: &'a Params,
    from: u64,
    until: u64,
    retry_after: Duration,
    /// Backend-0 is paused until then (the latest 429's arrival plus its retry-after).
    paused_until: u64,
    run: Run,
}

impl Model for Overload<'_> {
    fn servers(&self) -> usize {
        self.params.fleet.servers
    }

    fn answer(&mut self, backend: usize, now: u64, _attempt: u32, work: f64, _u: f64) -> Answer {
        let run = &mut self.run;
        run.tally.sent(now, backend);
        let overloaded = (self.from..self.until).contains(&now);
        if overloaded {
            run.during += 1;
            run.during_to_first += u64::from(backend == 0);
        }
        if backend == 0 && now < self.paused_until {
            run.leaked += 1;
        }
        if backend == 0 && overloaded {
            Answer::Refuse {
                latency_ns: (self.params.fail_ms * 1e6).round() as u64,
                failure: liblb_core::Failure::overloaded().retry_after(self.retry_after),
            }
        } else {
            Answer::Serve {
                service_ns: self.params.fleet.service_ns(work),
                success: true,
            }
        }
    }

    fn attempt_ended(&mut self, now: u64, backend: usize, _: u64, outcome: Outcome, b: &Balancer) {
        let run = &mut self.run;
        run.tally.attempt_ended(outcome);
        if backend != 0 {
            return;
        }
        if let Some(pause) = outcome.failure().and_then(|f| f.pause()) {
            let until = now + pause.as_nanos() as u64;
            self.paused_until = self.paused_until.max(until);
            let status = b.stats()[0].status;
            if status
                != (Status::Overloaded {
                    until_ns: self.paused_until,
                })
            {
                run.disagreed += 1;
            }
        } else if outcome.is_success() && now >= self.until && run.back_ns.is_none() {
            run.back_ns = Some(now - self.until);
        }
    }

    fn request_ended(&mut self, now: u64, arrived: u64, _attempts: u32, stop: Option<Stop>) {
        self.run.tally.request_ended(now, arrived, stop);
    }
}

/// Runs the scenario under one algorithm with `attempts` attempts per request.
pub(crate) fn run(
    algorithm: Algorithm,
    attempts: u32,
    params: &Params,
    options: Options,
    keys: &[Vec<u8>],
) -> Result<Run, liblb_core::Error> {
    let fleet = &params.fleet;
    let (balancer, clock) = virtual_balancer(algorithm, fleet.nodes(), options, fleet.seed)?;
    let workload = Workload {
        seed: fleet.seed,
        gap_ns: 1e9 / fleet.rate(),
        end_ns: fleet.end_ns(),
        keys,
        policy: RetryPolicy {
            max_attempts: attempts,
            ..RetryPolicy::default()
        },
        budget: None,
        timeout_ns: None,
    };
    let mut model = Overload {
        params,
        from: params.start_ns(),
        until: params.end_ns(),
        retry_after: Duration::from_secs_f64(params.retry_after_s),
        paused_until: 0,
        run: Run {
            algorithm,
            attempts,
            tally: Tally::default(),
            during: 0,
            during_to_first: 0,
            leaked: 0,
            disagreed: 0,
            back_ns: None,
        },
    };
    request_events::run(&balancer, &clock, fleet.backends, &workload, &mut model)?;
    model.run.tally.done();
    Ok(model.run)
}

/// Runs every algorithm without and with retries, prints the table (and draws the SVG).
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
        "== overloaded-node: {} backends x {} server(s), FIFO, exponential service times with mean {} ms; backend-0 answers 429 with Retry-After {} s ({} ms each) from {} s to {} s ==",
        fleet.backends,
        fleet.servers,
        fleet.service_ms,
        params.retry_after_s,
        params.fail_ms,
        params.from_s,
        params.until_s
    )?;
    writeln!(
        out,
        "Poisson arrivals at {:.0}% of capacity ({:.1} of {:.1} req/s) for {} s; {} keys; reported as Failure::overloaded().retry_after({} s), max_retry_after_ms {}; seed {}",
        fleet.utilisation * 100.0,
        fleet.rate(),
        fleet.capacity(),
        fleet.duration_s,
        fleet.keys,
        params.retry_after_s,
        options.max_retry_after.as_millis(),
        fleet.seed
    )?;
    let keys = crate::failing_node::keys(fleet.keys);
    let mut tries = vec![1];
    if params.attempts != 1 {
        tries.push(params.attempts);
    }
    let mut runs = Vec::new();
    for algorithm in algorithms {
        for attempts in &tries {
            runs.push(run(*algorithm, *attempts, params, options, &keys)?);
        }
    }
    writeln!(
        out,
        "\n{:<22} {:>8} {:>8} {:>7} {:>7} {:>8} {:>7} {:>8} {:>7} {:>9}",
        "algorithm",
        "attempts",
        "requests",
        "refused",
        "failed",
        "b0 share",
        "leaked",
        "disagree",
        "back s",
        "p99 ms"
    )?;
    for r in &runs {
        let back = r
            .back_ns
            .map_or("-".to_string(), |ns| format!("{:.3}", ns as f64 / 1e9));
        writeln!(
            out,
            "{:<22} {:>8} {:>8} {:>7} {:>7} {:>7.2}% {:>7} {:>8} {:>7} {:>9.1}",
            r.algorithm.name(),
            r.attempts,
            r.tally.requests,
            r.tally.refused,
            r.tally.failed(),
            r.overloaded_share() * 100.0,
            r.leaked,
            r.disagreed,
            back,
            r.tally.quantile_ms(0.99),
        )?;
    }
    writeln!(
        out,
        "(attempts: per request, at most; refused: attempts backend-0 answered 429; failed: \
         requests given up; b0 share: backend-0's share of the attempts sent while it was \
         overloaded (1/{} = {:.2}% without pauses); leaked: attempts sent to it while paused; \
         disagree: 429s after which the balancer's status was not Overloaded until the \
         retry-after's end; back s: from the overload's end to its first success; p99 ms: of \
         the successful requests, arrival to success, the retry-after included)",
        fleet.backends,
        100.0 / fleet.backends as f64
    )?;
    if let Some(path) = svg {
        draw(path, params, &runs).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// Left: backend-0's share of the attempts per second, with retries; right: the share of
/// requests failed per second, without retries. Grey: the overload.
fn draw(path: &Path, params: &Params, runs: &[Run]) -> Result<(), String> {
    let fleet = &params.fleet;
    let title = format!(
        "overloaded-node: {} backends, backend-0 answers 429 + Retry-After {} s from {} s to {} s, arrivals at {:.0}% of capacity, seed {}",
        fleet.backends,
        params.retry_after_s,
        params.from_s,
        params.until_s,
        fleet.utilisation * 100.0,
        fleet.seed
    );
    let mut names: Vec<String> = Vec::new();
    let (mut share, mut failed) = (Vec::new(), Vec::new());
    for r in runs {
        let colour = match names.iter().position(|n| n == r.algorithm.name()) {
            Some(i) => i,
            None => {
                names.push(r.algorithm.name().to_string());
                names.len() - 1
            }
        };
        let line = |f: &dyn Fn(&request_events::Bin) -> f64| Line {
            colour,
            points: r
                .tally
                .bins
                .iter()
                .enumerate()
                .map(|(i, b)| (i as f64 + 0.5, f(b)))
                .take_while(|(t, _)| *t < fleet.duration_s)
                .collect(),
        };
        if r.attempts == 1 {
            failed.push(line(&|b| {
                (b.ended - b.succeeded) as f64 * 100.0 / b.ended.max(1) as f64
            }));
        }
        if r.attempts == params.attempts {
            share.push(line(&|b| {
                b.to_first as f64 * 100.0 / b.attempts.max(1) as f64
            }));
        }
    }
    let shade = Some((params.from_s, params.until_s));
    chart::draw_panels(
        path,
        &title,
        fleet.duration_s,
        Panel {
            caption: &format!("backend-0's share per second, {} attempts", params.attempts),
            y_desc: "% of attempts sent",
            lines: share,
            shade,
        },
        Panel {
            caption: "requests failed per second, no retries",
            y_desc: "% of requests ended",
            lines: failed,
            shade,
        },
        &names,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            fleet: Fleet {
                backends: 5,
                servers: 1,
                service_ms: 10.0,
                utilisation: 0.5,
                duration_s: 12.0,
                keys: 100,
                seed: 3,
            },
            from_s: 1.0,
            until_s: 7.0,
            retry_after_s: 2.0,
            fail_ms: 1.0,
            attempts: 3,
        }
    }

    /// Every algorithm honours every pause (nothing sent to the paused node, the balancer's
    /// status matches), takes it back within a retry-after of the overload's end (but
    /// peak_ewma, see below), and with
    /// retries no request fails (the other nodes serve them after the retry-after).
    #[test]
    fn pauses_are_honoured() {
        let p = params();
        let keys = crate::failing_node::keys(p.fleet.keys);
        for algorithm in Algorithm::ALL {
            for attempts in [1, 3] {
                let r = run(algorithm, attempts, &p, Options::default(), &keys).unwrap();
                assert_eq!((r.leaked, r.disagreed), (0, 0), "{algorithm}");
                assert!(r.tally.refused > 0, "{algorithm}");
                // peak_ewma prices the 429 in (the failure penalty, the retry-after's 2 s
                // here): it returns as that decays, later than the pause ends.
                if algorithm != Algorithm::PeakEwma {
                    let back = r.back_ns.unwrap_or_else(|| panic!("{algorithm} not back"));
                    let back = back as f64 / 1e9;
                    assert!(back < p.retry_after_s + 1.0, "{algorithm}: {back}");
                }
                if attempts == 1 {
                    assert_eq!(r.tally.failed(), r.tally.refused, "{algorithm}");
                } else {
                    assert_eq!(r.tally.failed(), 0, "{algorithm}");
                }
            }
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params();
        p.until_s = 20.0;
        assert!(p.validate().unwrap_err().contains("--overload-until-s"));
        let mut p = params();
        p.retry_after_s = 0.0;
        assert!(p.validate().unwrap_err().contains("--retry-after-s"));
        let mut p = params();
        p.fleet.utilisation = 1.2;
        assert!(p.validate().unwrap_err().contains("--utilisation"));
        assert!(params().validate().is_ok());
    }
}
