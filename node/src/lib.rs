//! liblb for Node.js: `require('liblb')` gives a [`Balancer`] class backed by the Rust core.
//!
//! This crate is argument conversion and error mapping only (see `js.rs` and `error.rs`); every
//! decision is made by `liblb_core`. Each export is one call into the core, guarded by
//! `#[napi(catch_unwind)]` so a Rust panic becomes a JavaScript `Error` instead of aborting
//! Node. The three hot methods (`pick`, `pickMany`, `attempts`) are direct Node-API callbacks
//! with the same guard, defined on the same class (see `fast.rs` for why). A `Balancer` belongs
//! to the JavaScript thread (main or worker) that created it; each worker makes its own. The core
//! never locks to pick; the binding's receiver check briefly takes one process-wide napi-rs mutex
//! per hot call (see `fast.rs`).

#![deny(clippy::all)]
// napi-derive leaves its module registration out of `cfg(test)` builds, so there the hooks that
// register the hot methods and the batch helpers (fast.rs), and all they reach, look unused.
#![cfg_attr(test, allow(dead_code))]

mod batch;
mod error;
mod fast;
mod js;

use error::{OrThrow, Result};
use js::{Id, Ids, KeyBuf};
use liblb_core::Algorithm;
use napi::{Env, Unknown};
use napi_derive::napi;

/// A node as listed by `Balancer.nodes()`.
#[napi(object)]
pub struct NodeInfo {
    /// The node's id.
    pub id: String,
    /// Its weight (0 = drained: never picked while another node has weight > 0).
    pub weight: u32,
}

/// A load balancer: an algorithm, its options and a membership.
///
/// Algorithms: `random`, `weighted_random`, `round_robin`, `weighted_round_robin` (nginx's smooth
/// WRR), `source_hash` and `ring` (SHA-256 consistent hashing). `source_hash` and `ring` need a
/// key; the others ignore it. Errors thrown by liblb carry a stable `code` (`LB_NO_NODES`,
/// `LB_DUPLICATE_NODE`, ...); arguments of the wrong type throw a `TypeError`.
#[napi]
pub struct Balancer {
    inner: liblb_core::Balancer,
}

#[napi]
impl Balancer {
    /// Creates a balancer over `nodes` (ids, or `{ id, weight }` objects; weight defaults to 1).
    /// `options`: `seed` (number or bigint) makes random picks reproducible, `vnodes` sets the ring's
    /// points per unit of weight (default 160), `hash` picks the key hash (`sha256` or `xxh3`).
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
        let options = js::options(&env, options)?;
        let inner = liblb_core::Balancer::new(algorithm, nodes, options).or_throw()?;
        Ok(Balancer { inner })
    }

    /// Adds a node at the end (weight defaults to 1). Throws `LB_DUPLICATE_NODE` if the id exists.
    #[napi(catch_unwind, ts_args_type = "id: string, weight?: number | null")]
    pub fn add(&self, env: Env, id: Unknown, weight: Option<Unknown>) -> Result<()> {
        let id = js::id(&env, &id, "id")?;
        let weight = js::weight(&env, weight, "weight")?;
        self.inner.add((id.as_str(), weight)).or_throw()
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

    /// The nodes, in insertion order.
    #[napi(catch_unwind)]
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.inner
            .nodes()
            .into_iter()
            .map(|n| NodeInfo {
                id: n.id,
                weight: n.weight,
            })
            .collect()
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

    /// The algorithm's name.
    #[napi(getter, catch_unwind, ts_return_type = "Algorithm")]
    pub fn algorithm(&self) -> &'static str {
        self.inner.algorithm().name()
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

/// The algorithm names `new Balancer` accepts.
#[napi(catch_unwind, ts_return_type = "Algorithm[]")]
pub fn algorithms() -> Vec<&'static str> {
    Algorithm::NAMES.to_vec()
}
