//! The discrete-event engine under the request-loop scenarios (`retry-storm`,
//! `overloaded-node`, `flaky-node`): like `events`, but each arrival is a whole request driven
//! through the real [`Balancer::request`] loop. [`Request::attempt`] gives a lease, the
//! backend answers, [`Request::finish`] decides, and a [`Decision::Retry`]'s delay becomes an
//! event in virtual time. Policies and budgets run as the library runs them: the balancer and
//! the budgets read a [`ManualClock`] set to each event's time.
//!
//! An attempt either joins its backend's FIFO queue before `servers` servers (its outcome is
//! known when its service ends) or is refused at once (an overloaded node's 429: see
//! [`Answer`]). With a per-attempt timeout, the client gives up on an attempt that has not
//! answered in time and finishes its lease with [`Failure::timeout`]; the backend is not told
//! and serves the request anyway, its late answer dropped (no cancellation: an HTTP/1.1 server
//! does not learn that a client stopped waiting until it writes the answer).
//!
//! The arrivals (gaps, keys) come from a SplitMix64 seeded with the workload seed, and each
//! attempt's draws (work, a uniform number for the model) from a second stream, so every run
//! of a scenario faces the same requests.

use crate::events::unit;
use crate::slow_node::exp1;
use liblb_core::{Balancer, Budget, Decision, Failure, Lease, ManualClock, Outcome, SplitMix64};
use liblb_core::{Request, RetryPolicy, Stop};
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// The requests: their rate, until when, their keys, and how each retries.
pub(crate) struct Workload<'a> {
    pub seed: u64,
    /// Mean gap between arrivals, nanoseconds.
    pub gap_ns: f64,
    /// No arrival at or after this time, nanoseconds.
    pub end_ns: u64,
    /// The key population; each request carries one, drawn uniformly (unkeyed algorithms
    /// ignore it).
    pub keys: &'a [Vec<u8>],
    pub policy: RetryPolicy,
    pub budget: Option<Budget>,
    /// How long the client waits for an attempt's answer, nanoseconds (`None`: for ever).
    pub timeout_ns: Option<u64>,
}

/// How a backend answers an attempt that reaches it.
pub(crate) enum Answer {
    /// Queued, then served for `service_ns`; an error instead of a success if `!success`.
    Serve { service_ns: u64, success: bool },
    /// Refused at once, without queueing: `failure` after `latency_ns`.
    Refuse { latency_ns: u64, failure: Failure },
}

/// A scenario's backends and measurements.
pub(crate) trait Model {
    /// Servers per backend.
    fn servers(&self) -> usize;
    /// Attempt number `attempt` (1-based) of a request is sent to `backend` at `now`; `work`
    /// is an Exp(1) draw and `u` a uniform one in [0, 1), both the model's to use.
    fn answer(&mut self, backend: usize, now: u64, attempt: u32, work: f64, u: f64) -> Answer;
    /// An attempt sent to `backend` at `sent` ended at `now` with `outcome` (the balancer
    /// has counted it).
    fn attempt_ended(
        &mut self,
        now: u64,
        backend: usize,
        sent: u64,
        outcome: Outcome,
        b: &Balancer,
    );
    /// A request that arrived at `arrived` ended at `now` after `attempts` attempts: a
    /// success (`stop` is `None`) or given up.
    fn request_ended(&mut self, now: u64, arrived: u64, attempts: u32, stop: Option<Stop>);
}

/// A request in progress.
struct Client<'a> {
    request: Request<&'a Balancer, &'a [u8]>,
    arrived: u64,
    /// The attempt out, its ticket (unique in the run), backend and when it was sent.
    lease: Option<Lease>,
    ticket: u64,
    backend: usize,
    sent: u64,
}

/// An attempt in a backend's queue or service.
struct Job {
    client: usize,
    ticket: u64,
    service_ns: u64,
    success: bool,
}

enum Kind {
    Arrival,
    /// A server of `backend` finished `job`.
    Served {
        backend: usize,
        job: Job,
    },
    /// A refusal reaches the client.
    Refused {
        client: usize,
        ticket: u64,
        failure: Failure,
    },
    /// The client stops waiting for the attempt with `ticket`.
    Timeout {
        client: usize,
        ticket: u64,
    },
    /// The client's backoff is over: its next attempt.
    Retry {
        client: usize,
    },
}

struct Event {
    at: u64,
    seq: u64,
    kind: Kind,
}

crate::events::earliest_first!(Event, at);

/// The simulation's state between events.
struct Engine<'a, M: Model> {
    balancer: &'a Balancer,
    workload: &'a Workload<'a>,
    model: &'a mut M,
    servers: usize,
    heap: BinaryHeap<Event>,
    seq: u64,
    /// The requests in progress by slot; a slot is free (`None`, listed in `free`) once its
    /// request is over and may be reused: answers find their attempt by its ticket.
    clients: Vec<Option<Client<'a>>>,
    free: Vec<usize>,
    busy: Vec<usize>,
    queues: Vec<VecDeque<Job>>,
    draws: SplitMix64,
    attempts: u64,
}

impl<'a, M: Model> Engine<'a, M> {
    fn schedule(&mut self, at: u64, kind: Kind) {
        self.heap.push(Event {
            at,
            seq: self.seq,
            kind,
        });
        self.seq += 1;
    }

    /// Starts `job` on a server of `backend` at `now`.
    fn begin(&mut self, backend: usize, job: Job, now: u64) {
        self.schedule(now + job.service_ns, Kind::Served { backend, job });
    }

    /// The client's next attempt at `now`, or its end if the request loop says it is over.
    fn attempt(&mut self, c: usize, now: u64) -> Result<(), liblb_core::Error> {
        let client = self.clients[c].as_mut().expect("a live request attempts");
        let Some(lease) = client.request.attempt()? else {
            let (arrived, attempts, stop) = (
                client.arrived,
                client.request.attempts(),
                client.request.stopped(),
            );
            self.clients[c] = None;
            self.free.push(c);
            self.model.request_ended(now, arrived, attempts, stop);
            return Ok(());
        };
        let backend = lease.tag() as usize;
        let attempt = client.request.attempts();
        let ticket = self.attempts;
        client.lease = Some(lease);
        client.ticket = ticket;
        client.backend = backend;
        client.sent = now;
        self.attempts += 1;
        let (work, u) = (exp1(&mut self.draws), unit(&mut self.draws));
        match self.model.answer(backend, now, attempt, work, u) {
            Answer::Serve {
                service_ns,
                success,
            } => {
                let job = Job {
                    client: c,
                    ticket,
                    service_ns,
                    success,
                };
                if self.busy[backend] < self.servers {
                    self.busy[backend] += 1;
                    self.begin(backend, job, now);
                } else {
                    self.queues[backend].push_back(job);
                }
            }
            Answer::Refuse {
                latency_ns,
                failure,
            } => self.schedule(
                now + latency_ns,
                Kind::Refused {
                    client: c,
                    ticket,
                    failure,
                },
            ),
        }
        if let Some(timeout) = self.workload.timeout_ns {
            self.schedule(now + timeout, Kind::Timeout { client: c, ticket });
        }
        Ok(())
    }

    /// Ends the attempt with `ticket` of the request in slot `c` at `now` with `outcome`, if
    /// it is still the one out (a timed-out attempt's late answer is dropped), and acts on the
    /// decision.
    fn end(&mut self, c: usize, ticket: u64, now: u64, outcome: Outcome) {
        let Some(client) = self.clients[c].as_mut() else {
            return;
        };
        if client.ticket != ticket {
            return;
        }
        let Some(lease) = client.lease.take() else {
            return;
        };
        let (backend, sent) = (client.backend, client.sent);
        let decision = client.request.finish(lease, outcome);
        self.model
            .attempt_ended(now, backend, sent, outcome, self.balancer);
        match decision {
            Decision::Retry(delay) => {
                let at = now + delay.as_nanos() as u64;
                self.schedule(at, Kind::Retry { client: c });
            }
            // Only while another attempt (a hedge) is out; this engine sends one at a time.
            Decision::Wait => unreachable!("a hedge answer, and no hedge was sent"),
            Decision::Done | Decision::Stop(_) => {
                let stop = match decision {
                    Decision::Stop(why) => Some(why),
                    _ => None,
                };
                let client = self.clients[c].take().expect("checked above");
                self.free.push(c);
                let attempts = client.request.attempts();
                self.model
                    .request_ended(now, client.arrived, attempts, stop);
            }
        }
    }
}

/// Runs the workload through `balancer` (whose clock is `clock`) on `backends` backends until
/// every request has ended. Returns the number of attempts sent.
pub(crate) fn run(
    balancer: &Balancer,
    clock: &ManualClock,
    backends: usize,
    workload: &Workload<'_>,
    model: &mut impl Model,
) -> Result<u64, liblb_core::Error> {
    let mut arrivals = SplitMix64::new(workload.seed);
    let servers = model.servers();
    let mut engine = Engine {
        balancer,
        workload,
        model,
        servers,
        heap: BinaryHeap::new(),
        seq: 0,
        clients: Vec::new(),
        free: Vec::new(),
        busy: vec![0; backends],
        queues: (0..backends).map(|_| VecDeque::new()).collect(),
        draws: SplitMix64::new(workload.seed ^ 0x5265_7472_6965_7321),
        attempts: 0,
    };
    let gap = |rng: &mut SplitMix64| (exp1(rng) * workload.gap_ns).round() as u64;
    let first = gap(&mut arrivals);
    if first < workload.end_ns {
        engine.schedule(first, Kind::Arrival);
    }
    while let Some(event) = engine.heap.pop() {
        let now = event.at;
        clock.set(Duration::from_nanos(now));
        match event.kind {
            Kind::Arrival => {
                let k = ((unit(&mut arrivals) * workload.keys.len() as f64) as usize)
                    .min(workload.keys.len() - 1);
                let key: &[u8] = &workload.keys[k];
                let mut request = balancer.request(Some(key)).with_policy(workload.policy)?;
                if let Some(budget) = &workload.budget {
                    request = request.with_budget(budget.clone());
                }
                let client = Some(Client {
                    request,
                    arrived: now,
                    lease: None,
                    ticket: u64::MAX,
                    backend: 0,
                    sent: now,
                });
                let c = match engine.free.pop() {
                    Some(c) => {
                        engine.clients[c] = client;
                        c
                    }
                    None => {
                        engine.clients.push(client);
                        engine.clients.len() - 1
                    }
                };
                engine.attempt(c, now)?;
                let next = now + gap(&mut arrivals);
                if next < workload.end_ns {
                    engine.schedule(next, Kind::Arrival);
                }
            }
            Kind::Served { backend, job } => {
                let latency = Duration::from_nanos(
                    now - engine.clients[job.client].as_ref().map_or(now, |c| c.sent),
                );
                let outcome = if job.success {
                    Outcome::Success(latency)
                } else {
                    Outcome::Failure(latency)
                };
                engine.end(job.client, job.ticket, now, outcome);
                match engine.queues[backend].pop_front() {
                    Some(next) => engine.begin(backend, next, now),
                    None => engine.busy[backend] -= 1,
                }
            }
            Kind::Refused {
                client,
                ticket,
                failure,
            } => {
                let sent = engine.clients[client].as_ref().map_or(now, |c| c.sent);
                let outcome = failure.after(Duration::from_nanos(now - sent)).into();
                engine.end(client, ticket, now, outcome);
            }
            Kind::Timeout { client, ticket } => {
                let timeout = Duration::from_nanos(workload.timeout_ns.unwrap_or(0));
                engine.end(
                    client,
                    ticket,
                    now,
                    Failure::timeout().after(timeout).into(),
                );
            }
            Kind::Retry { client } => engine.attempt(client, now)?,
        }
    }
    Ok(engine.attempts)
}

/// What the request-loop scenarios share: the fleet, the arrivals and the run's length.
#[derive(Debug, Clone)]
pub(crate) struct Fleet {
    pub backends: usize,
    pub servers: usize,
    /// Mean service time, ms (exponentially distributed).
    pub service_ms: f64,
    /// Arrival rate as a share of the fleet's capacity (above 1: overload).
    pub utilisation: f64,
    pub duration_s: f64,
    pub keys: usize,
    pub seed: u64,
}

/// Most requests per run.
const MAX_REQUESTS: f64 = 10_000_000.0;

/// Most attempts a run may send (requests x `--attempts`): each is a few events.
const MAX_ATTEMPTS_PER_RUN: f64 = 30_000_000.0;

impl Fleet {
    /// Total service rate, requests per second.
    pub fn capacity(&self) -> f64 {
        self.backends as f64 * self.servers as f64 * 1e3 / self.service_ms
    }

    /// Arrival rate, requests per second.
    pub fn rate(&self) -> f64 {
        self.utilisation * self.capacity()
    }

    /// When arrivals stop, nanoseconds.
    pub fn end_ns(&self) -> u64 {
        (self.duration_s * 1e9).round() as u64
    }

    /// A service time for an Exp(1) draw, nanoseconds.
    pub fn service_ns(&self, work: f64) -> u64 {
        (work * self.service_ms * 1e6).round() as u64
    }

    /// The backends, tagged with their index.
    pub fn nodes(&self) -> Vec<liblb_core::Node> {
        (0..self.backends)
            .map(|i| liblb_core::Node::with_tag(crate::slow_node::backend_id(i), 1, i as u64))
            .collect()
    }

    /// Checks the parameters, naming the first bad one; `max_utilisation` is the scenario's
    /// (1 for the stable ones, more for an overload), `attempts` its requests' most attempts.
    pub fn validate(&self, max_utilisation: f64, attempts: u32) -> Result<(), String> {
        if !(self.service_ms.is_finite() && self.service_ms > 0.0 && self.service_ms <= 3_600_000.0)
        {
            return Err(format!(
                "--service-ms must be a positive number of milliseconds up to an hour, got {}",
                crate::num(self.service_ms)
            ));
        }
        if !(self.utilisation > 0.0 && self.utilisation < max_utilisation) {
            return Err(format!(
                "--utilisation must be above 0 and below {} (a share of total capacity), got {}",
                max_utilisation,
                crate::num(self.utilisation)
            ));
        }
        crate::bounded("--backends", self.backends, 2, crate::MAX_BACKENDS)?;
        crate::bounded("--servers", self.servers, 1, 1_000)?;
        crate::bounded("--keys", self.keys, 1, crate::MAX_KEYS)?;
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= 86_400.0) {
            return Err(format!(
                "--duration-s must be above 0 and at most a day (86400), got {}",
                crate::num(self.duration_s)
            ));
        }
        let requests = self.rate() * self.duration_s;
        if requests > MAX_REQUESTS {
            return Err(format!(
                "the run would have about {} requests, more than {MAX_REQUESTS}: lower --duration-s or --utilisation",
                crate::num(requests.round())
            ));
        }
        if !(1..=liblb_core::MAX_ATTEMPTS).contains(&attempts) {
            return Err(format!(
                "--attempts must be from 1 to {}, got {attempts}",
                liblb_core::MAX_ATTEMPTS
            ));
        }
        if requests * f64::from(attempts) > MAX_ATTEMPTS_PER_RUN {
            return Err(format!(
                "the run could send about {} attempts, more than {MAX_ATTEMPTS_PER_RUN}: lower --attempts, --duration-s or --utilisation",
                crate::num((requests * f64::from(attempts)).round())
            ));
        }
        Ok(())
    }
}

/// One interval's counts, for the pictures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Bin {
    /// Requests that arrived.
    pub arrivals: u64,
    /// Attempts sent, and of those to backend-0.
    pub attempts: u64,
    pub to_first: u64,
    /// Requests that ended, and of those successfully.
    pub ended: u64,
    pub succeeded: u64,
}

/// Series interval: one second.
pub(crate) const INTERVAL_NS: u64 = 1_000_000_000;

/// The bin for time `now`, growing the series as needed.
pub(crate) fn bin(bins: &mut Vec<Bin>, now: u64) -> &mut Bin {
    let i = (now / INTERVAL_NS) as usize;
    if bins.len() <= i {
        bins.resize(i + 1, Bin::default());
    }
    &mut bins[i]
}

/// The `q` quantile of sorted latencies, ms (0 for none).
pub(crate) fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1e6
}

/// What every request-loop scenario counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub requests: u64,
    pub attempts: u64,
    /// Attempts that timed out, were refused as overloaded, or answered with an error.
    pub timeouts: u64,
    pub refused: u64,
    pub errors: u64,
    pub succeeded: u64,
    /// Requests given up, by [`Stop`] (in the order of `Stop::ALL`).
    pub stops: [u64; 6],
    /// Latencies of the successful requests (arrival to success), sorted by [`Tally::done`].
    pub latencies: Vec<u64>,
    pub bins: Vec<Bin>,
}

impl Tally {
    /// Counts an attempt sent to `backend` at `now`.
    pub fn sent(&mut self, now: u64, backend: usize) {
        self.attempts += 1;
        let bin = bin(&mut self.bins, now);
        bin.attempts += 1;
        bin.to_first += u64::from(backend == 0);
    }

    /// Counts an attempt's outcome.
    pub fn attempt_ended(&mut self, outcome: Outcome) {
        match outcome.failure().map(|f| f.kind) {
            None => {}
            Some(liblb_core::FailureKind::Timeout) => self.timeouts += 1,
            Some(liblb_core::FailureKind::Overloaded) => self.refused += 1,
            Some(liblb_core::FailureKind::Error) => self.errors += 1,
        }
    }

    /// Counts a request's end.
    pub fn request_ended(&mut self, now: u64, arrived: u64, stop: Option<Stop>) {
        self.requests += 1;
        bin(&mut self.bins, arrived).arrivals += 1;
        let bin = bin(&mut self.bins, now);
        bin.ended += 1;
        match stop {
            None => {
                self.succeeded += 1;
                bin.succeeded += 1;
                self.latencies.push(now - arrived);
            }
            Some(why) => self.stops[why as usize] += 1,
        }
    }

    /// Sorts the latencies (call once, at the end).
    pub fn done(&mut self) {
        self.latencies.sort_unstable();
    }

    /// Requests given up.
    pub fn failed(&self) -> u64 {
        self.requests - self.succeeded
    }

    /// Attempts per request.
    pub fn amplification(&self) -> f64 {
        self.attempts as f64 / self.requests.max(1) as f64
    }

    /// The share of requests given up.
    pub fn failed_share(&self) -> f64 {
        self.failed() as f64 / self.requests.max(1) as f64
    }

    /// The `q` quantile of the successful requests' latency, ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        quantile_ms(&self.latencies, q)
    }

    /// The reasons requests were given up, as `name count` pairs (`-` if none).
    pub fn stops_text(&self) -> String {
        let parts: Vec<String> = Stop::ALL
            .iter()
            .filter(|s| self.stops[**s as usize] > 0)
            .map(|s| format!("{}:{}", s.name(), self.stops[*s as usize]))
            .collect();
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(",")
        }
    }
}
