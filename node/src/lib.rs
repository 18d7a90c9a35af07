//! liblb for Node.js: `require('liblb')` gives a [`Balancer`] class backed by the Rust core.
//!
//! This crate is argument conversion and error mapping only (see `js.rs` and `error.rs`); every
//! decision is made by `liblb_core`. Each export is one call into the core, guarded by
//! `#[napi(catch_unwind)]` so a Rust panic becomes a JavaScript `Error` instead of aborting
//! Node. The three hot methods (`pick`, `pickMany`, `attempts`) are direct Node-API callbacks
//! with the same guard, defined on the same class (see `fast.rs` for why); leases and requests
//! are JavaScript objects over native handles (see `leases.rs`). A `Balancer` belongs
//! to the JavaScript thread (main or worker) that created it; each worker makes its own. The core
//! never locks to pick; the binding's receiver check briefly takes one process-wide napi-rs mutex
//! per hot call (see `fast.rs`).

#![deny(clippy::all)]
// napi-derive leaves its module registration out of `cfg(test)` builds, so there the hooks that
// register the hot methods and the batch helpers (fast.rs), and all they reach, look unused.
#![cfg_attr(test, allow(dead_code))]

mod batch;
mod budget;
mod error;
mod fast;
mod ids;
mod js;
mod leases;
mod orca;
mod request;
mod server_load;
mod tasks;

use error::{OrThrow, Result};
use js::{Id, Ids, KeyBuf, OwnArray};
use liblb_core::{Algorithm, FailureKind};
use napi::bindgen_prelude::{AsyncTask, Either, Null};
use napi::{Env, Unknown};
use napi_derive::napi;

/// A node as listed by `Balancer.nodes()`.
#[napi(object)]
pub struct NodeInfo {
    /// The node's id.
    pub id: String,
    /// Its weight (0 = drained: never picked while another node has weight > 0).
    pub weight: u32,
    /// Where it runs: `region/zone/sub_zone`; absent for a node given none.
    pub locality: Option<String>,
    /// Its priority level; absent for priority 0 (the most preferred).
    pub priority: Option<u32>,
}

/// A node's load as listed by `Balancer.stats()`.
#[napi(object)]
pub struct NodeStats {
    /// The node's id.
    pub id: String,
    /// Its weight (0 = drained).
    pub weight: u32,
    /// Where it runs: `region/zone/sub_zone`; absent for a node given none.
    pub locality: Option<String>,
    /// Its priority level; absent for priority 0 (the most preferred).
    pub priority: Option<u32>,
    /// Requests started (leases acquired) and not yet ended.
    pub in_flight: u32,
    /// Requests ended with an outcome (finished leases and reports).
    pub requests: f64,
    /// Of those, failures.
    pub failures: f64,
    /// The peak-EWMA latency estimate in milliseconds, or null before any sample.
    pub latency: Either<f64, Null>,
    /// Its health: 'healthy', 'warming' (slow start), 'ejected', 'down' or 'overloaded'
    /// (paused by a retry-after).
    #[napi(ts_type = "'healthy' | 'warming' | 'ejected' | 'down' | 'overloaded'")]
    pub status: String,
    /// When an ejection, an overload pause or a warm-up ends, in milliseconds of the
    /// balancer's monotonic clock (`nowMs()`); null otherwise.
    pub until_ms: Either<f64, Null>,
    /// `untilMs` minus the time of the call (at least 0): the milliseconds left of the
    /// ejection, pause or warm-up; null otherwise.
    pub remaining_ms: Either<f64, Null>,
}

/// A request in progress on one node, from `Balancer.acquire()` until it ends: `finish()` it
/// once. A lease garbage-collected unfinished is cancelled (in-flight released, nothing counted).
/// (Its members are defined by `leases.rs`; their declarations are in `header.d.ts`.)
#[napi]
pub struct Lease {}

/// Code of the error thrown when a lease is finished twice (the binding's own: the core's
/// `Lease::finish` consumes the lease; Python's `LeaseFinishedError` has the same code).
pub const LEASE_FINISHED: &str = "LB_LEASE_FINISHED";

/// Nanoseconds of the balancer's clock as milliseconds (`nowMs`, `untilMs`).
fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A load balancer: an algorithm, its options and a membership.
///
/// Algorithms: `algorithms()` (docs/algorithms.md); `keyedAlgorithms()` need a key, the others
/// ignore it. Errors thrown by liblb carry a stable `code` (`LB_NO_NODES`,
/// `LB_DUPLICATE_NODE`, ...); arguments of the wrong type throw a `TypeError`.
#[napi]
pub struct Balancer {
    /// Shared with this balancer's fast `pick` functions (see `ids.rs`).
    inner: std::sync::Arc<liblb_core::Balancer>,
}

#[napi]
impl Balancer {
    /// Creates a balancer over `nodes` (ids, or `{ id, weight, tag }` objects; weight defaults
    /// to 1, tag to 0).
    /// `options`: any of `optionNames()`, each passed to the core by name: `seed` (number or
    /// bigint) makes random picks reproducible, `vnodes` sets the ring's points per unit of weight
    /// (default 160), `hash` picks the key hash (`sha256` or `xxh3`), and so on.
    /// An empty node list is allowed: picks fail with `LB_NO_NODES` until a node is added.
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "algorithm: Algorithm, nodes?: Array<NodeInit> | null, options?: BalancerOptions | null"
    )]
    pub fn new(
        env: Env,
        algorithm: Unknown,
        nodes: Option<Unknown>,
        options: Option<Unknown>,
    ) -> Result<Self> {
        let algorithm: Algorithm = js::string(&env, &algorithm, "algorithm")?
            .parse::<Algorithm>()
            .or_throw()?;
        let nodes = match nodes {
            Some(nodes) => js::nodes(&env, &nodes)?,
            None => Vec::new(),
        };
        let budget = match js::present(options)? {
            Some(o) if o.get_type().or_throw()? == napi::ValueType::Object => {
                // SAFETY: just checked to be an object.
                let o = unsafe { o.cast::<napi::bindgen_prelude::Object>() }.or_throw()?;
                let budget = js::present(o.get::<Unknown>("budget").or_throw()?)?;
                budget.map(|b| request::budget(&env, &b)).transpose()?
            }
            _ => None,
        };
        let options = js::options(&env, options)?;
        let inner = liblb_core::Balancer::new(algorithm, nodes, options).or_throw()?;
        inner.set_budget(budget);
        Ok(Balancer {
            inner: std::sync::Arc::new(inner),
        })
    }

    /// Adds a node at the end (weight defaults to 1; `tag`, a 64-bit value of yours that leases
    /// hand back, to 0), or the node an object describes (`{ id, weight?, tag?, locality?,
    /// priority? }`). Throws `LB_DUPLICATE_NODE` if the id exists.
    #[napi(
        catch_unwind,
        ts_args_type = "id: string | NodeObject, weight?: number | null, tag?: bigint | number | string | null"
    )]
    pub fn add(
        &self,
        env: Env,
        id: Unknown,
        weight: Option<Unknown>,
        tag: Option<Unknown>,
    ) -> Result<()> {
        let node = js::new_node(&env, id, weight, tag)?;
        self.inner.add(node).or_throw()
    }

    /// Moves a node to `locality` (`'region/zone/sub_zone'`) at `priority` (0 = most preferred,
    /// the default): a membership change, as `setWeight` is. Throws `LB_UNKNOWN_NODE` or
    /// `LB_INVALID_LOCALITY`, changing nothing.
    #[napi(
        js_name = "setLocation",
        catch_unwind,
        ts_args_type = "id: string, locality: string, priority?: number | null"
    )]
    pub fn set_location(
        &self,
        env: Env,
        id: Unknown,
        locality: Unknown,
        priority: Option<Unknown>,
    ) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        let locality = js::locality(&env, &locality, "locality")?;
        let priority = match js::present(priority)? {
            Some(p) => js::priority(&env, &p, "priority")?,
            None => 0,
        };
        self.inner.set_location(&id, &locality, priority).or_throw()
    }

    /// Locality-weighted balancing (unkeyed algorithms): `{ locality: weight }` or
    /// `[locality, weight]` pairs. Each weight is scaled by its locality's availability and
    /// localities are chosen by Envoy's EDF schedule; a locality left out takes no traffic while
    /// a listed one can. Empty turns it off. See docs/localities.md.
    #[napi(
        js_name = "setLocalityWeights",
        catch_unwind,
        ts_args_type = "weights: Record<string, number> | Array<[string, number]>"
    )]
    pub fn set_locality_weights(&self, env: Env, weights: Unknown) -> Result<()> {
        let max = f64::from(u32::MAX);
        let weights = js::per_locality(&env, &weights, "weights", max)?;
        let weights = weights.into_iter().map(|(l, w)| (l, w as u32));
        self.inner.set_locality_weights(weights).or_throw()
    }

    /// The caller's own locality (null: unknown), for zone-aware routing with
    /// `setLocalLocalities`.
    #[napi(
        js_name = "setLocalLocality",
        catch_unwind,
        ts_args_type = "locality: string | null"
    )]
    pub fn set_local_locality(&self, env: Env, locality: Option<Unknown>) -> Result<()> {
        let locality = match js::present(locality)? {
            Some(l) => Some(js::locality(&env, &l, "locality")?),
            None => None,
        };
        self.inner
            .set_local_locality(locality.as_deref())
            .or_throw()
    }

    /// How the caller's own fleet is spread: `{ locality: instances }` or pairs. With
    /// `setLocalLocality` it turns on zone-aware routing (unkeyed algorithms): requests stay in
    /// the caller's locality as far as its share of the usable priority-0 nodes covers its share
    /// of the callers. Empty turns it off.
    #[napi(
        js_name = "setLocalLocalities",
        catch_unwind,
        ts_args_type = "spread: Record<string, number> | Array<[string, number]>"
    )]
    pub fn set_local_localities(&self, env: Env, spread: Unknown) -> Result<()> {
        // 2^53 - 1: every integer up to it is exact in a double.
        let spread = js::per_locality(&env, &spread, "spread", 9_007_199_254_740_991.0)?;
        let spread = spread.into_iter().map(|(l, n)| (l, n as u64));
        self.inner.set_local_localities(spread).or_throw()
    }

    /// Takes a node out of service until `markUp` (active health checks): no rebuild, its
    /// weight and counters kept; keyed algorithms move only its keys. Throws `LB_UNKNOWN_NODE`
    /// for an unknown id.
    #[napi(js_name = "markDown", catch_unwind, ts_args_type = "id: string")]
    pub fn mark_down(&self, env: Env, id: Unknown) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        self.inner.mark_down(&id).or_throw()
    }

    /// Puts a node marked down back in service (warming up first with slow start). Throws
    /// `LB_UNKNOWN_NODE` for an unknown id.
    #[napi(js_name = "markUp", catch_unwind, ts_args_type = "id: string")]
    pub fn mark_up(&self, env: Env, id: Unknown) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        self.inner.mark_up(&id).or_throw()
    }

    /// Whether picks ignore health because fewer than `panic_threshold` percent of the nodes
    /// are healthy (traffic spreads over every node).
    #[napi(getter, catch_unwind)]
    pub fn panic(&self) -> bool {
        self.inner.panic()
    }

    /// Removes a node. Throws `LB_UNKNOWN_NODE` if there is none with this id.
    #[napi(catch_unwind, ts_args_type = "id: string")]
    pub fn remove(&self, env: Env, id: Unknown) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        self.inner.remove(&id).or_throw()
    }

    /// Changes a node's weight; 0 drains it. Throws `LB_UNKNOWN_NODE` for an unknown id.
    #[napi(
        js_name = "setWeight",
        catch_unwind,
        ts_args_type = "id: string, weight: number"
    )]
    pub fn set_weight(&self, env: Env, id: Unknown, weight: Unknown) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        let weight = js::required_weight(&env, &weight, "weight")?;
        self.inner.set_weight(&id, weight).or_throw()
    }

    /// Replaces the whole membership at once: picks see the old set or the new one, never a mix.
    /// On any error (e.g. `LB_DUPLICATE_NODE`) nothing changes.
    #[napi(catch_unwind, ts_args_type = "nodes: Array<NodeInit>")]
    pub fn update(&self, env: Env, nodes: Unknown) -> Result<()> {
        let nodes = js::nodes(&env, &nodes)?;
        self.inner.update(nodes).or_throw()
    }

    /// `new Balancer(...)` with the table built on the libuv thread pool instead of the calling
    /// thread: resolves with the balancer, or rejects with the error the constructor would
    /// throw. For big tables (a ring of thousands of weighted nodes) that would block the event
    /// loop.
    // Configurable and writable (napi-rs defines statics with neither by default) so that
    // `tasks::ASYNC` can wrap it.
    #[napi(
        catch_unwind,
        writable = true,
        configurable = true,
        ts_args_type = "algorithm: Algorithm, nodes?: Array<NodeInit> | null, options?: BalancerOptions | null",
        ts_return_type = "Promise<Balancer>"
    )]
    pub fn create(
        env: Env,
        algorithm: Unknown,
        nodes: Option<Unknown>,
        options: Option<Unknown>,
    ) -> Result<AsyncTask<tasks::CreateTask>> {
        let algorithm: Algorithm = js::string(&env, &algorithm, "algorithm")?
            .parse::<Algorithm>()
            .or_throw()?;
        let nodes = match nodes {
            Some(nodes) => js::nodes(&env, &nodes)?,
            None => Vec::new(),
        };
        let options = js::options(&env, options)?;
        Ok(AsyncTask::new(tasks::CreateTask::new(
            algorithm, nodes, options,
        )))
    }

    /// `update(nodes)` with the table rebuilt on the libuv thread pool: resolves when the new
    /// membership is published, or rejects with the error `update` would throw (nothing
    /// changed). Async changes to one balancer apply in the order they finish, not the order
    /// they were called: await one before starting the next when the order matters.
    #[napi(
        js_name = "updateAsync",
        catch_unwind,
        ts_args_type = "nodes: Array<NodeInit>",
        ts_return_type = "Promise<void>"
    )]
    pub fn update_async(&self, env: Env, nodes: Unknown) -> Result<AsyncTask<tasks::ChangeTask>> {
        let nodes = js::nodes(&env, &nodes)?;
        Ok(self.change_task(tasks::Change::Update(nodes)))
    }

    /// `add(id, weight, tag)` on the libuv thread pool (see `updateAsync`).
    #[napi(
        js_name = "addAsync",
        catch_unwind,
        ts_args_type = "id: string, weight?: number | null, tag?: bigint | number | string | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn add_async(
        &self,
        env: Env,
        id: Unknown,
        weight: Option<Unknown>,
        tag: Option<Unknown>,
    ) -> Result<AsyncTask<tasks::ChangeTask>> {
        let node = js::new_node(&env, id, weight, tag)?;
        Ok(self.change_task(tasks::Change::Add(node)))
    }

    /// `remove(id)` on the libuv thread pool (see `updateAsync`).
    #[napi(
        js_name = "removeAsync",
        catch_unwind,
        ts_args_type = "id: string",
        ts_return_type = "Promise<void>"
    )]
    pub fn remove_async(&self, env: Env, id: Unknown) -> Result<AsyncTask<tasks::ChangeTask>> {
        let id = js::id(&env, &id, "id")?;
        Ok(self.change_task(tasks::Change::Remove(id)))
    }

    /// `setWeight(id, weight)` on the libuv thread pool (see `updateAsync`).
    #[napi(
        js_name = "setWeightAsync",
        catch_unwind,
        ts_args_type = "id: string, weight: number",
        ts_return_type = "Promise<void>"
    )]
    pub fn set_weight_async(
        &self,
        env: Env,
        id: Unknown,
        weight: Unknown,
    ) -> Result<AsyncTask<tasks::ChangeTask>> {
        let id = js::id(&env, &id, "id")?;
        let weight = js::required_weight(&env, &weight, "weight")?;
        Ok(self.change_task(tasks::Change::SetWeight(id, weight)))
    }

    /// The nodes, in insertion order.
    #[napi(catch_unwind, ts_return_type = "Array<NodeInfo>")]
    pub fn nodes(&self) -> OwnArray<NodeInfo> {
        let nodes = self.inner.nodes().into_iter();
        OwnArray(
            nodes
                .map(|n| NodeInfo {
                    id: n.id,
                    weight: n.weight,
                    locality: (!n.locality.is_empty()).then_some(n.locality),
                    priority: (n.priority != 0).then_some(n.priority),
                })
                .collect(),
        )
    }

    /// Whether a node with this id exists.
    #[napi(catch_unwind, ts_args_type = "id: string")]
    pub fn has(&self, env: Env, id: Unknown) -> Result<bool> {
        // A string that is not well-formed UTF-16 cannot be any node's id.
        let id = js::id_if_valid(&env, &id, "id")?;
        Ok(id.is_some_and(|id| self.inner.contains(&id)))
    }

    /// Number of nodes, drained ones included.
    #[napi(getter, catch_unwind)]
    pub fn size(&self) -> u32 {
        // The core caps membership at 2^24 nodes, so this never truncates.
        self.inner.len() as u32
    }

    /// Sets (null: removes) the default budget of this balancer's requests: a RetryBudget,
    /// RetryThrottle or AdaptiveThrottle. A wrong type throws a TypeError and changes nothing.
    #[napi(
        js_name = "setBudget",
        catch_unwind,
        ts_args_type = "budget: RetryBudget | RetryThrottle | AdaptiveThrottle | null"
    )]
    pub fn set_budget(&self, env: Env, budget: Option<Unknown>) -> Result<()> {
        let budget = js::present(budget)?
            .map(|b| request::budget(&env, &b))
            .transpose()?;
        self.inner.set_budget(budget);
        Ok(())
    }

    /// Records the outcome of a request routed after `pick` (in-flight is not touched):
    /// `{ ok, latencyMs }`, and for a failure (`ok: false`) its `kind` (one of
    /// `failureKinds()`, default 'error') and an overloaded node's `retryAfterMs`. A success
    /// needs `latencyMs`, a failure may leave it out. Throws `LB_UNKNOWN_NODE` for an unknown
    /// id, `LB_INVALID_OUTCOME` for an unknown kind or a kind or retry-after with `ok: true`.
    #[napi(catch_unwind, ts_args_type = "id: string, outcome: ReportOutcome")]
    pub fn report(&self, env: Env, id: Unknown, outcome: Unknown) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        let outcome = js::outcome(&env, Some(outcome), "outcome", true)?.outcome(None);
        self.inner.report(&id, outcome).or_throw()
    }

    /// Takes a node's ORCA load report as received now: a `LoadReport` (`parseOrca`), or what
    /// `parseOrca` takes (the bytes of an `OrcaLoadReport`, or an `endpoint-load-metrics`
    /// header value). `client_side_wrr` weighs nodes by these (gRFC A58); the other
    /// algorithms keep them, so a configuration can switch. Throws `LB_UNKNOWN_NODE` or
    /// `LB_INVALID_LOAD_REPORT`; nothing is recorded then.
    #[napi(
        js_name = "reportLoad",
        catch_unwind,
        ts_args_type = "id: string, report: LoadReport | string | Uint8Array"
    )]
    pub fn report_load(&self, env: Env, id: Unknown, report: Unknown) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        let report = orca::report_arg(&env, &report, "report")?;
        self.inner.report_load(&id, &report).or_throw()
    }

    /// Up to `count` distinct node ids to probe now, uniformly at random among the nodes with
    /// weight > 0 (from the balancer's generator: seeded balancers replay). For `prequal`:
    /// send each a probe and give its answer to `offerProbe`; `probesDue()` says how many the
    /// picks asked for. Throws `LB_NO_NODES` without a node of weight > 0.
    #[napi(
        js_name = "probeTargets",
        catch_unwind,
        ts_args_type = "count: number",
        ts_return_type = "string[]"
    )]
    pub fn probe_targets(&self, env: Env, count: Unknown) -> Result<Ids> {
        let count = js::integer(&env, &count, "count", liblb_core::MAX_BATCH as f64)? as usize;
        self.inner.probe_targets(count).map(Ids).or_throw()
    }

    /// A probe answer from node `id`, stamped now: its requests in flight `rif` (saturating
    /// at 2^32 - 1) and its latency estimate in milliseconds, as Prequal servers answer
    /// (`ServerLoad.probe()`). `prequal` adds it to its pool; other algorithms ignore it.
    /// Throws `LB_UNKNOWN_NODE`; nothing is recorded then.
    #[napi(
        js_name = "offerProbe",
        catch_unwind,
        ts_args_type = "id: string, rif: number, latencyMs: number"
    )]
    pub fn offer_probe(
        &self,
        env: Env,
        id: Unknown,
        rif: Unknown,
        latency_ms: Unknown,
    ) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        let rif = js::integer(&env, &rif, "rif", 9_007_199_254_740_991.0)?.min(f64::from(u32::MAX))
            as u32;
        let latency = js::millis(&env, &latency_ms, "latencyMs")?;
        self.inner.offer_probe(&id, rif, latency).or_throw()
    }

    /// How many probes the picks since the last call made due (`prequal`'s `probe_rate` per
    /// pick; 0 for other algorithms): ask `probeTargets` for that many.
    #[napi(js_name = "probesDue", catch_unwind)]
    pub fn probes_due(&self) -> u32 {
        u32::try_from(self.inner.probes_due()).unwrap_or(u32::MAX)
    }

    /// The ids picks choose from, in node order: with subsetting (option `subset`,
    /// docs/subsetting.md) this client's subset of the nodes with weight > 0, else every node
    /// with weight > 0.
    #[napi(catch_unwind, ts_return_type = "string[]")]
    pub fn subset(&self) -> Ids {
        Ids(self.inner.subset())
    }

    /// The balancer's clock in milliseconds (fractions included): liblb's monotonic clock,
    /// one per process (budgets read it too); the clock of `stats()`'s `untilMs`, so `untilMs - nowMs()` is the
    /// time left.
    #[napi(js_name = "nowMs", catch_unwind)]
    pub fn now_ms(&self) -> f64 {
        ms(self.inner.clock().now_ns())
    }

    /// Each node's load, in insertion order (`latency` in milliseconds, or null; `untilMs` on
    /// the `nowMs()` clock, and `remainingMs`, or null).
    #[napi(catch_unwind, ts_return_type = "Array<NodeStats>")]
    pub fn stats(&self) -> OwnArray<NodeStats> {
        let stats = self.inner.stats().into_iter();
        // Read after the stats: never before the instant their statuses were judged.
        let now = self.inner.clock().now_ns();
        let stats = stats
            .map(|s| NodeStats {
                id: s.id,
                weight: s.weight,
                locality: (!s.locality.is_empty()).then_some(s.locality),
                priority: (s.priority != 0).then_some(s.priority),
                // At most one per lease: bounded by memory long before u32.
                in_flight: s.in_flight as u32,
                requests: s.requests as f64,
                failures: s.failures as f64,
                latency: match s.latency {
                    Some(l) => Either::A(l.as_secs_f64() * 1000.0),
                    None => Either::B(Null),
                },
                status: s.status.name().to_string(),
                until_ms: match s.status.until_ns() {
                    Some(ns) => Either::A(ms(ns)),
                    None => Either::B(Null),
                },
                remaining_ms: match s.status.until_ns() {
                    Some(ns) => Either::A(ms(ns.saturating_sub(now))),
                    None => Either::B(Null),
                },
            })
            .collect();
        OwnArray(stats)
    }

    /// The node for a caller's 64-bit key hash (a bigint, a safe-integer number or a decimal
    /// string), as `pick` places a key with that hash. Only the algorithms of
    /// `hashAlgorithms()`; others throw `LB_HASH_UNSUPPORTED`.
    #[napi(
        js_name = "pickHash",
        catch_unwind,
        ts_args_type = "hash: bigint | number | string"
    )]
    pub fn pick_hash(&self, env: Env, hash: Unknown) -> Result<String> {
        let hash = js::hash64(&env, &hash)?;
        self.inner
            .pick_hash(hash)
            .map(|p| p.id().to_string())
            .or_throw()
    }

    /// `attempts` for a caller's 64-bit key hash (see `pickHash`).
    #[napi(
        js_name = "attemptsHash",
        catch_unwind,
        ts_args_type = "hash: bigint | number | string, limit?: number | null",
        ts_return_type = "string[]"
    )]
    pub fn attempts_hash(&self, env: Env, hash: Unknown, limit: Option<Unknown>) -> Result<Ids> {
        let hash = js::hash64(&env, &hash)?;
        let limit = js::limit(&env, limit)?;
        self.inner.attempts_hash(hash, limit).map(Ids).or_throw()
    }

    /// The algorithm's name.
    #[napi(getter, catch_unwind, ts_return_type = "Algorithm")]
    pub fn algorithm(&self) -> &'static str {
        self.inner.algorithm().name()
    }
}

impl Balancer {
    fn change_task(&self, change: tasks::Change) -> AsyncTask<tasks::ChangeTask> {
        AsyncTask::new(tasks::ChangeTask::new(&self.inner, change))
    }
}

/// The hot methods' bodies. `fast.rs` calls them from the direct Node-API callbacks it adds to
/// the class; their TypeScript declarations are in `header.d.ts`.
impl Balancer {
    /// `pick(key?)`: one node id. `source_hash` and `ring` need a key.
    #[inline]
    fn pick_impl(&self, env: &Env, key: Unknown) -> Result<Id> {
        let mut buf = KeyBuf::new();
        let key = js::key_or_none(env, &key, &mut buf)?;
        self.inner.pick(key).map(Id).or_throw()
    }

    /// `pickMany(keys)`: one id per key, all from the same membership.
    fn pick_many_impl<'h>(
        &self,
        env: &Env,
        keys: Unknown,
        helpers: &'h batch::Helpers,
    ) -> Result<batch::Answers<'h>> {
        let keyed = self.inner.algorithm().is_keyed();
        let picks = match batch::keys(env, &keys, helpers, keyed)? {
            batch::BatchKeys::Keys(keys) => self.inner.pick_many(keys.iter()),
            // Unkeyed algorithms ignore keys: `count` keyless picks are the same picks.
            batch::BatchKeys::Count(count) => self.inner.pick_n(count),
        };
        Ok(batch::Answers::new(picks.or_throw()?, helpers))
    }

    /// `attempts(key?, limit?)`: distinct ids in retry order.
    fn attempts_impl(&self, env: &Env, key: Unknown, limit: Unknown) -> Result<Ids> {
        let mut buf = KeyBuf::new();
        let key = js::key_or_none(env, &key, &mut buf)?;
        let limit = js::limit(env, Some(limit))?;
        self.inner.attempts(key, limit).map(Ids).or_throw()
    }
}

/// Most answers one call gives: `pickMany` takes at most this many keys (2^24, the most nodes a
/// balancer holds; the same limit in every language). Longer arrays throw a `RangeError` with
/// code `LB_BATCH_TOO_LARGE` before any key is read.
#[napi]
pub const MAX_BATCH: u32 = js::MAX_BATCH;

/// Most key bytes one `pickMany` call copies (256 MiB); beyond it a `RangeError` with code
/// `LB_BATCH_TOO_LARGE`.
#[napi]
pub const MAX_BATCH_KEY_BYTES: u32 = js::MAX_BATCH_KEY_BYTES as u32;

/// Does nothing: the cost of one call into this addon, the floor `bench.js` measures picks
/// against.
#[napi(catch_unwind)]
pub fn noop() {}

/// The keyed algorithms (they need a key to pick), from the core's registration list.
#[napi(catch_unwind, ts_return_type = "Algorithm[]")]
pub fn keyed_algorithms() -> Vec<&'static str> {
    let all = Algorithm::ALL.into_iter();
    all.filter(|a| a.is_keyed()).map(Algorithm::name).collect()
}

/// The algorithms `pickHash` / `attemptsHash` work with, from the core's registration list.
#[napi(catch_unwind, ts_return_type = "Algorithm[]")]
pub fn hash_algorithms() -> Vec<&'static str> {
    let all = Algorithm::ALL.into_iter();
    all.filter(|a| a.takes_hash())
        .map(Algorithm::name)
        .collect()
}

/// The option names `new Balancer` accepts (the core's list; keys of `BalancerOptions`).
#[napi(catch_unwind, ts_return_type = "Array<keyof BalancerOptions>")]
pub fn option_names() -> Vec<&'static str> {
    liblb_core::Options::NAMES.to_vec()
}

/// The failure kinds `finish` and `report` take as `kind` (the core's list).
#[napi(catch_unwind, ts_return_type = "FailureKind[]")]
pub fn failure_kinds() -> Vec<&'static str> {
    FailureKind::NAMES.to_vec()
}

/// Why a request gives up (`Request.stopped`, `LB_REQUEST_FAILED`'s `stop`): the core's list.
#[napi(js_name = "stopReasons", catch_unwind, ts_return_type = "StopReason[]")]
pub fn stop_reasons() -> Vec<&'static str> {
    liblb_core::Stop::NAMES.to_vec()
}

/// The algorithm names `new Balancer` accepts.
#[napi(catch_unwind, ts_return_type = "Algorithm[]")]
pub fn algorithms() -> Vec<&'static str> {
    Algorithm::NAMES.to_vec()
}
