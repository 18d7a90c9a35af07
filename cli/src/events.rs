//! The discrete-event engine under `--scenario failing-node`, `hot-key` and `uneven`: Poisson
//! arrivals, each routed by the real [`Balancer`] through [`Balancer::acquire`] (with its key),
//! queued FIFO at the chosen backend in front of `servers` servers, and finished with its
//! outcome and latency when its service ends. Virtual time only: the balancer reads a
//! [`ManualClock`] set to each event's time, so a run takes the same course on any machine.
//!
//! What a backend does with a request (how long it takes, whether it fails) and what is
//! measured is the scenario's [`Model`]. The workload draws (gap, work, key) come from one
//! SplitMix64 seeded with the workload seed and do not depend on the routing, so every
//! algorithm faces the same arrivals (common random numbers), as in `slow_node`.

use crate::meter::Meters;
use crate::slow_node::exp1;
use liblb_core::{Balancer, Lease, ManualClock, Outcome, SplitMix64};
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// The arrivals: their rate, how many or until when, and which key each carries.
pub(crate) struct Workload<'a> {
    pub seed: u64,
    /// Mean gap between arrivals, nanoseconds.
    pub gap_ns: f64,
    /// At most this many arrivals...
    pub requests: usize,
    /// ...and none at or after this time (nanoseconds).
    pub end_ns: u64,
    /// The key population (bytes passed to `acquire`; unkeyed algorithms ignore them).
    pub keys: &'a [Vec<u8>],
    /// Maps a uniform draw in [0, 1) to a key index.
    pub key_of: &'a dyn Fn(f64) -> usize,
}

/// A scenario's backends and measurements.
pub(crate) trait Model {
    /// Servers per backend.
    fn servers(&self) -> usize;
    /// A request with `work` (an Exp(1) draw) starts service on `backend` at `now`: its
    /// service time in nanoseconds and whether it succeeds.
    fn serve(&self, backend: usize, now: u64, work: f64) -> (u64, bool);
    /// A request for `key` was routed to `backend` at `now`; `at_backend` requests are now
    /// there (waiting or in service, this one included), `total` in the whole system.
    fn routed(&mut self, now: u64, backend: usize, key: usize, at_backend: usize, total: usize);
    /// A request routed to `backend` at `arrived` ended at `now` (its lease already finished);
    /// `balancer` is that of the client that sent it (its new one if it restarted since).
    fn done(&mut self, now: u64, backend: usize, arrived: u64, success: bool, balancer: &Balancer);
    /// How long a probe answer takes to reach the balancer, nanoseconds (see `meter`).
    fn probe_delay_ns(&self) -> u64 {
        0
    }
    /// How long the backends' latency samples count (see `ServerLoad`).
    fn latency_max_age(&self) -> Duration {
        liblb_core::ServerLoad::DEFAULT_LATENCY_MAX_AGE
    }
    /// Every request has ended: the backends' meters as they stand.
    fn ended(&mut self, meters: &Meters) {
        let _ = meters;
    }
}

/// Orders a simulation's queued item by its time field `$at`, then its `seq` (the order it was
/// scheduled in), reversed so a `BinaryHeap` pops the earliest first: the one ordering every
/// scenario's event queue uses.
macro_rules! earliest_first {
    ($ty:ty, $at:ident) => {
        impl PartialEq for $ty {
            fn eq(&self, other: &Self) -> bool {
                self.cmp(other) == std::cmp::Ordering::Equal
            }
        }
        impl Eq for $ty {}
        impl PartialOrd for $ty {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for $ty {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                (other.$at, other.seq).cmp(&(self.$at, self.seq))
            }
        }
    };
}
pub(crate) use earliest_first;

/// A request being served, ordered by completion time then arrival order (see `slow_node`).
struct InService {
    done_ns: u64,
    seq: u64,
    arrived_ns: u64,
    client: usize,
    backend: usize,
    success: bool,
    lease: Lease,
    /// The backend's `ServerLoad` token for it.
    started: liblb_core::Started,
}

crate::events::earliest_first!(InService, done_ns);

struct Waiting {
    seq: u64,
    arrived_ns: u64,
    client: usize,
    work: f64,
    lease: Lease,
    started: liblb_core::Started,
}

/// Mixed into the workload seed for the stream that says which client sends an arrival.
const CLIENT_STREAM: u64 = 0x636c_6965_6e74_7321;

/// A uniform draw in [0, 1) with 53 bits (every simulation's).
pub(crate) fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Starts `w`'s service on backend `b` at `now`.
fn begin(model: &impl Model, w: Waiting, b: usize, now: u64, heap: &mut BinaryHeap<InService>) {
    let (service, success) = model.serve(b, now, w.work);
    heap.push(InService {
        done_ns: now + service,
        seq: w.seq,
        arrived_ns: w.arrived_ns,
        client: w.client,
        backend: b,
        success,
        lease: w.lease,
        started: w.started,
    });
}

/// The clients that send the workload, each with its own balancer (all on one clock), and when
/// they restart.
pub(crate) struct Clients<'a> {
    pub balancers: Vec<Balancer>,
    /// (time in nanoseconds, client), in time order: the client restarts then, its balancer
    /// replaced by `fresh(client)` (requests it already sent finish on the old one).
    pub restarts: Vec<(u64, usize)>,
    pub fresh: &'a dyn Fn(usize) -> Result<Balancer, liblb_core::Error>,
}

impl Clients<'_> {
    /// One client that never restarts.
    pub(crate) fn one(balancer: Balancer) -> Clients<'static> {
        Clients {
            balancers: vec![balancer],
            restarts: Vec::new(),
            fresh: &|_| unreachable!("a client that never restarts"),
        }
    }
}

/// Runs the workload through `clients` on `backends` backends until every request has ended.
/// With more than one client, each arrival is sent by a client drawn uniformly from a stream
/// of its own (so one client's runs face the same arrivals as before there were clients), and
/// probe answers go back to the client that sent the probe (none to a client that restarted
/// since). Returns the number of requests.
pub(crate) fn run(
    clients: &mut Clients<'_>,
    clock: &ManualClock,
    backends: usize,
    workload: &Workload<'_>,
    model: &mut impl Model,
) -> Result<u64, liblb_core::Error> {
    let servers = model.servers();
    let mut rng = SplitMix64::new(workload.seed);
    let mut senders = SplitMix64::new(workload.seed ^ CLIENT_STREAM);
    let mut busy = vec![0usize; backends];
    let mut queues: Vec<VecDeque<Waiting>> = (0..backends).map(|_| VecDeque::new()).collect();
    let mut in_service = BinaryHeap::new();
    let mut total = 0usize;
    let mut meters = Meters::new(backends, servers, model.latency_max_age())?
        .with_probe_delay(model.probe_delay_ns());

    let gap = |rng: &mut SplitMix64| (exp1(rng) * workload.gap_ns).round() as u64;
    let mut next_arrival = gap(&mut rng);
    let mut issued = 0u64;
    let mut restarts = clients.restarts.iter().peekable();
    loop {
        let next_done = in_service.peek().map(|s: &InService| s.done_ns);
        let more = issued < workload.requests as u64 && next_arrival < workload.end_ns;
        // A completion at the same instant goes first (it frees a server).
        if more && next_done.is_none_or(|done| next_arrival < done) {
            let now = next_arrival;
            clock.set(Duration::from_nanos(now));
            let key = (workload.key_of)(unit(&mut rng)).min(workload.keys.len() - 1);
            let work = exp1(&mut rng);
            while let Some((_, c)) = restarts.next_if(|(at, _)| *at <= now) {
                clients.balancers[*c] = (clients.fresh)(*c)?;
                meters.forget(*c);
            }
            let client = match clients.balancers.len() {
                1 => 0,
                n => (unit(&mut senders) * n as f64) as usize,
            };
            let balancer = &clients.balancers[client];
            // Answers that have come back by now reach their clients before this one picks.
            meters.deliver(&clients.balancers, now)?;
            let lease = balancer.acquire(Some(&workload.keys[key]))?;
            meters.probe(client, balancer, now)?;
            let b = lease.tag() as usize;
            let waiting = Waiting {
                seq: issued,
                arrived_ns: now,
                client,
                work,
                lease,
                started: meters.arrived(b, now),
            };
            total += 1;
            if busy[b] < servers {
                busy[b] += 1;
                meters.busy(b, now, busy[b]);
                begin(model, waiting, b, now, &mut in_service);
            } else {
                queues[b].push_back(waiting);
            }
            model.routed(now, b, key, busy[b] + queues[b].len(), total);
            issued += 1;
            next_arrival = now + gap(&mut rng);
        } else if let Some(done) = in_service.pop() {
            let now = done.done_ns;
            clock.set(Duration::from_nanos(now));
            let latency = Duration::from_nanos(now - done.arrived_ns);
            let b = done.backend;
            let outcome = if done.success {
                Outcome::Success(latency)
            } else {
                Outcome::Failure(latency)
            };
            // The answer carries the backend's load report, as a liblb backend's would.
            let load = meters.completed(b, done.started, now, done.success);
            done.lease.finish_with_load(outcome, &load);
            total -= 1;
            model.done(
                now,
                b,
                done.arrived_ns,
                done.success,
                &clients.balancers[done.client],
            );
            match queues[b].pop_front() {
                Some(next) => begin(model, next, b, now, &mut in_service),
                None => {
                    busy[b] -= 1;
                    meters.busy(b, now, busy[b]);
                }
            }
        } else {
            break;
        }
    }
    model.ended(&meters);
    Ok(issued)
}
