//! `lb simulate --scenario hot-key`: bounded loads for the keyed algorithms, as a
//! discrete-event simulation (the engine is `events`).
//!
//! **Model.** `--backends` N backends (default 10), each a FIFO queue before `--servers` k
//! servers (default 1), exponential service times of mean `--service-ms` (default 10 ms);
//! Poisson arrivals at `--utilisation` x capacity (default 70%) for `--requests` requests
//! (default 50,000: 71 s). Each request carries a key: `key-0`, the hot one, with probability
//! `--hot-share` (default 30%), else one of the other `--keys` − 1 keys uniformly (default
//! 10,000 keys). The hot key's node alone gets 3x its share of capacity, so its queue grows
//! for as long as the key stays hot.
//!
//! **Runs.** Every keyed algorithm twice: with bounded loads off, and with
//! `hash_balance_factor` (the given one, default 125: Envoy's and HAProxy's usual 1.25). With
//! the factor, a key goes to the first node of its retry order whose in-flight count is below
//! `ceil(factor / 100 · (total in-flight + 1) / N)` (equal weights), so no node ever holds more
//! than that bound after a request joins it.
//!
//! **Measured** per run: latency from arrival to completion (p50, p99, nearest rank); the most
//! requests at any backend at once; how many requests made their backend exceed the bound
//! `ceil(factor / 100 · total in-flight / N)` for the factor of the bounded run (zero when the
//! factor is on); the share of requests served away from their key's usual node (the node
//! the same algorithm picks for the key with no load), for the hot key and for the others;
//! and per second, the most requests at any backend.

use crate::events::{self, Model, Workload};
use crate::slow_node::{backend_id, virtual_balancer};
use liblb_core::{Algorithm, Balancer, Node, Options};

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub backends: usize,
    pub servers: usize,
    pub service_ms: f64,
    pub utilisation: f64,
    pub requests: usize,
    pub keys: usize,
    pub hot_share: f64,
    /// The bounded runs' `hash_balance_factor`, percent.
    pub factor: u32,
    pub seed: u64,
}

/// Series interval: one second.
pub(crate) const INTERVAL_NS: u64 = 1_000_000_000;

/// Most requests per run (every latency is kept).
const MAX_REQUESTS: usize = 10_000_000;

impl Params {
    /// Total service rate, requests per second.
    pub fn capacity(&self) -> f64 {
        self.backends as f64 * self.servers as f64 * 1e3 / self.service_ms
    }

    /// Arrival rate, requests per second.
    pub fn rate(&self) -> f64 {
        self.utilisation * self.capacity()
    }

    /// The bound on one node's in-flight requests when `total` are in flight.
    pub fn bound(&self, total: usize) -> usize {
        (u128::from(self.factor) * total as u128).div_ceil(100 * self.backends as u128) as usize
    }

    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.service_ms.is_finite() && self.service_ms > 0.0 && self.service_ms <= 3.6e6) {
            return Err(format!(
                "--service-ms must be a positive number of milliseconds up to an hour, got {}",
                crate::num(self.service_ms)
            ));
        }
        if !(self.utilisation > 0.0 && self.utilisation < 1.0) {
            return Err(format!(
                "--utilisation must be above 0 and below 1 (a share of total capacity), got {}",
                crate::num(self.utilisation)
            ));
        }
        if !(self.hot_share >= 0.0 && self.hot_share < 1.0) {
            return Err(format!(
                "--hot-share must be at least 0 and below 1 (the hot key's share of requests), got {}",
                crate::num(self.hot_share)
            ));
        }
        if self.backends < 2 || self.servers == 0 || self.keys < 2 || self.requests == 0 {
            return Err(format!(
                "--backends and --keys must be at least 2, --servers and --requests at least 1; got {}, {}, {}, {}",
                self.backends, self.keys, self.servers, self.requests
            ));
        }
        crate::bounded("--backends", self.backends, 2, crate::MAX_BACKENDS)?;
        crate::bounded("--keys", self.keys, 2, crate::MAX_KEYS)?;
        if self.requests > MAX_REQUESTS {
            return Err(format!(
                "--requests must be at most {MAX_REQUESTS}, got {}",
                self.requests
            ));
        }
        // The per-second peak series has one entry per second of virtual time.
        const DAY_S: f64 = 86_400.0;
        if self.requests as f64 / self.rate() > DAY_S {
            return Err(format!(
                "the run would last {} s of virtual time, more than a day (86400): raise --utilisation or lower --service-ms",
                crate::num((self.requests as f64 / self.rate()).round())
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

    /// A uniform draw to a key: the hot key 0 with probability `hot_share`, else one of the
    /// others uniformly.
    pub fn key_of(&self, u: f64) -> usize {
        if u < self.hot_share {
            0
        } else {
            let cold = (u - self.hot_share) / (1.0 - self.hot_share);
            1 + ((cold * (self.keys - 1) as f64) as usize).min(self.keys - 2)
        }
    }
}

/// What one run measured.
pub(crate) struct Run {
    pub algorithm: Algorithm,
    /// `hash_balance_factor` of the run (0 = off).
    pub factor: u32,
    /// Every request's latency in nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// The hot key's usual node.
    pub hot_node: usize,
    /// Requests routed to each backend.
    pub routed: Vec<u64>,
    pub max_queue: Vec<usize>,
    /// Requests that made their backend exceed the bound (for `Params::factor`).
    pub over_bound: u64,
    /// Requests of the hot key, and of those served away from its usual node.
    pub hot: u64,
    pub hot_moved: u64,
    /// The same for the other keys.
    pub cold: u64,
    pub cold_moved: u64,
    /// Per second: the most requests at any backend.
    pub peak: Vec<usize>,
}

impl Run {
    /// The `q` quantile (nearest rank) in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let n = self.latencies.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.latencies[rank - 1] as f64 / 1e6
    }

    /// Share of the hot key's requests served away from its usual node.
    pub fn hot_moved_share(&self) -> f64 {
        self.hot_moved as f64 / self.hot.max(1) as f64
    }

    /// Share of the other keys' requests served away from their usual node.
    pub fn cold_moved_share(&self) -> f64 {
        self.cold_moved as f64 / self.cold.max(1) as f64
    }

    /// The hot key's usual node's share of the requests.
    pub fn hot_node_share(&self) -> f64 {
        self.routed[self.hot_node] as f64 / self.latencies.len().max(1) as f64
    }
}

struct HotKey<'a> {
    params: &'a Params,
    /// Each key's usual node.
    usual: Vec<usize>,
    run: Run,
}

impl Model for HotKey<'_> {
    fn servers(&self) -> usize {
        self.params.servers
    }

    fn serve(&self, _backend: usize, _now: u64, work: f64) -> (u64, bool) {
        ((work * self.params.service_ms * 1e6).round() as u64, true)
    }

    fn routed(&mut self, now: u64, backend: usize, key: usize, at: usize, total: usize) {
        let run = &mut self.run;
        run.routed[backend] += 1;
        run.max_queue[backend] = run.max_queue[backend].max(at);
        if at > self.params.bound(total) {
            run.over_bound += 1;
        }
        let moved = u64::from(self.usual[key] != backend);
        if key == 0 {
            run.hot += 1;
            run.hot_moved += moved;
        } else {
            run.cold += 1;
            run.cold_moved += moved;
        }
        let i = (now / INTERVAL_NS) as usize;
        if run.peak.len() <= i {
            run.peak.resize(i + 1, 0);
        }
        run.peak[i] = run.peak[i].max(at);
    }

    fn done(&mut self, now: u64, _backend: usize, arrived: u64, _ok: bool, _b: &Balancer) {
        self.run.latencies.push(now - arrived);
    }
}

/// Each key's usual node under `algorithm`: its pick with no load and no bound.
pub(crate) fn usual_nodes(
    algorithm: Algorithm,
    params: &Params,
    options: Options,
    keys: &[Vec<u8>],
) -> Result<Vec<usize>, liblb_core::Error> {
    let options = Options {
        hash_balance_factor: 0,
        ..options
    };
    let b = Balancer::new(algorithm, params.nodes(), options)?;
    Ok(b.pick_many(keys.iter().map(|k| k.as_slice()))?
        .tags()
        .map(|t| t as usize)
        .collect())
}

/// Runs the scenario under one keyed algorithm with `factor` (0 = bounded loads off).
pub(crate) fn run(
    algorithm: Algorithm,
    params: &Params,
    options: Options,
    factor: u32,
    keys: &[Vec<u8>],
    usual: &[usize],
) -> Result<Run, liblb_core::Error> {
    let options = Options {
        hash_balance_factor: factor,
        ..options
    };
    let (balancer, clock) = virtual_balancer(algorithm, params.nodes(), options, params.seed)?;
    let key_of = |u: f64| params.key_of(u);
    let workload = Workload {
        seed: params.seed,
        gap_ns: 1e9 / params.rate(),
        requests: params.requests,
        end_ns: u64::MAX,
        keys,
        key_of: &key_of,
    };
    let n = params.backends;
    let mut model = HotKey {
        params,
        usual: usual.to_vec(),
        run: Run {
            algorithm,
            factor,
            latencies: Vec::with_capacity(params.requests),
            hot_node: usual[0],
            routed: vec![0; n],
            max_queue: vec![0; n],
            over_bound: 0,
            hot: 0,
            hot_moved: 0,
            cold: 0,
            cold_moved: 0,
            peak: Vec::new(),
        },
    };
    events::run(
        &mut events::Clients::one(balancer),
        &clock,
        n,
        &workload,
        &mut model,
    )?;
    model.run.latencies.sort_unstable();
    Ok(model.run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failing_node::keys;

    fn params() -> Params {
        Params {
            backends: 5,
            servers: 1,
            service_ms: 10.0,
            utilisation: 0.6,
            requests: 5_000,
            keys: 200,
            hot_share: 0.3,
            factor: 125,
            seed: 5,
        }
    }

    /// With the factor no request takes a node over its bound and every run ends every
    /// request; with no factor nothing moves.
    #[test]
    fn bounds_hold_and_unbounded_runs_move_nothing() {
        let p = params();
        let keys = keys(p.keys);
        for algorithm in Algorithm::ALL.into_iter().filter(|a| a.is_keyed()) {
            let usual = usual_nodes(algorithm, &p, Options::default(), &keys).unwrap();
            let off = run(algorithm, &p, Options::default(), 0, &keys, &usual).unwrap();
            assert_eq!(off.latencies.len(), p.requests);
            assert_eq!(off.hot_moved + off.cold_moved, 0, "{algorithm}");
            assert!(off.over_bound > 0, "{algorithm}");
            let on = run(algorithm, &p, Options::default(), 125, &keys, &usual).unwrap();
            assert_eq!(on.latencies.len(), p.requests);
            assert_eq!(on.over_bound, 0, "{algorithm}");
            assert!(on.hot_moved > 0, "{algorithm}");
        }
    }

    #[test]
    fn keys_follow_the_hot_share() {
        let p = params();
        assert_eq!(p.key_of(0.0), 0);
        assert_eq!(p.key_of(0.299), 0);
        assert_eq!(p.key_of(0.3), 1);
        assert_eq!(p.key_of(0.999_999_9), p.keys - 1);
        assert_eq!(p.bound(0), 0);
        assert_eq!(p.bound(8), 2); // ceil(1.25 * 8 / 5)
        assert_eq!(p.bound(9), 3); // ceil(2.25)
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut p = params();
        p.hot_share = 1.0;
        assert!(p.validate().unwrap_err().contains("--hot-share"));
        let mut p = params();
        p.keys = 1;
        assert!(p.validate().unwrap_err().contains("--keys"));
        let mut p = params();
        p.requests = MAX_REQUESTS + 1;
        assert!(p.validate().unwrap_err().contains("--requests"));
        assert!(params().validate().is_ok());
    }
}
