//! [`Table`]: the immutable selection structure for one membership. The algorithms' own
//! structures and their dispatch live in `select` (the registration list); the mutable state
//! that outlives tables lives in `state`.

use crate::load::Load;
use crate::node::{Node, validate_id};
use crate::select::{Ctx, Selector};
use crate::state::State;
use crate::{Algorithm, Error, MAX_NODES, Options, Result};
use alloc::string::ToString;
use alloc::sync::Arc;
use alloc::vec::Vec;

/// An immutable selection table for one node list. Cheap to share; rebuilt on change.
pub struct Table {
    algorithm: Algorithm,
    /// `None` when no node has weight > 0.
    selector: Option<Selector>,
    /// Each node's load, indexed like the node list (shared with other tables holding the
    /// same node).
    loads: Vec<Arc<Load>>,
}

impl core::fmt::Debug for Table {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Table")
            .field("algorithm", &self.algorithm)
            .field("empty", &self.selector.is_none())
            .finish()
    }
}

/// Checks a whole node list: valid ids, no duplicates, not too many.
fn validate_nodes(nodes: &[Node]) -> Result<()> {
    if nodes.len() > MAX_NODES {
        return Err(Error::TooManyNodes(nodes.len()));
    }
    for node in nodes {
        validate_id(&node.id)?;
    }
    let mut ids: Vec<&str> = nodes.iter().map(|n| &*n.id).collect();
    ids.sort_unstable();
    match ids.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(Error::DuplicateNode(w[0].to_string())),
        None => Ok(()),
    }
}

impl Table {
    /// Builds the table for `nodes` (insertion order matters only for round robin and smooth
    /// WRR). Fails on invalid options, invalid or duplicate ids; an empty or fully drained list
    /// builds fine and fails at pick time with [`Error::NoNodes`].
    pub fn build(algorithm: Algorithm, options: &Options, nodes: &[Node]) -> Result<Table> {
        let loads = nodes.iter().map(|_| Arc::default()).collect();
        Table::build_with_loads(algorithm, options, nodes, loads)
    }

    /// [`Table::build`] with the nodes' loads given (`loads[i]` for `nodes[i]`), so that a node
    /// that stays a member keeps its counters across rebuilds.
    ///
    /// # Panics
    /// If `loads` and `nodes` differ in length.
    pub fn build_with_loads(
        algorithm: Algorithm,
        options: &Options,
        nodes: &[Node],
        loads: Vec<Arc<Load>>,
    ) -> Result<Table> {
        assert_eq!(loads.len(), nodes.len(), "one load per node");
        options.validate()?;
        validate_nodes(nodes)?;
        let active: Vec<u32> = (0..nodes.len() as u32)
            .filter(|i| nodes[*i as usize].weight > 0)
            .collect();
        let selector =
            (!active.is_empty()).then(|| Selector::build(algorithm, nodes, active, options));
        Ok(Table {
            algorithm,
            selector,
            loads,
        })
    }

    /// The loads of the nodes, indexed like the node list the table was built from.
    pub fn loads(&self) -> &[Arc<Load>] {
        &self.loads
    }

    /// The table's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The selector and the key bytes, or why the table cannot pick.
    #[inline]
    fn ready<'k>(&self, key: Option<&'k [u8]>) -> Result<(&Selector, &'k [u8])> {
        let selector = self.selector.as_ref().ok_or(Error::NoNodes)?;
        match key {
            Some(key) => Ok((selector, key)),
            None if self.algorithm.is_keyed() => Err(Error::KeyRequired(self.algorithm.name())),
            None => Ok((selector, &[])),
        }
    }

    /// Whether a pick with this key can succeed: `Err(NoNodes)` or `Err(KeyRequired)` exactly
    /// when [`Table::pick`] would fail. Batch operations check it first, so an empty batch
    /// answers the same as a non-empty one.
    pub fn check(&self, key: Option<&[u8]>) -> Result<()> {
        self.ready(key).map(|_| ())
    }

    /// The chosen node's index in the list the table was built from. Unkeyed algorithms ignore
    /// `key`; keyed ones fail with [`Error::KeyRequired`] without it. `now_ns` is the caller's
    /// monotonic clock in nanoseconds, read only by algorithms that weigh latency (pass 0 if
    /// you have no clock: estimates then never decay).
    #[inline]
    pub fn pick(&self, key: Option<&[u8]>, state: &State, now_ns: u64) -> Result<usize> {
        let (selector, key) = self.ready(key)?;
        Ok(selector.pick(key, &self.ctx(state, now_ns)) as usize)
    }

    #[inline]
    fn ctx<'a>(&'a self, state: &'a State, now_ns: u64) -> Ctx<'a> {
        Ctx {
            state,
            loads: &self.loads,
            now_ns,
        }
    }

    /// The node for a caller's 64-bit key hash — what `pick` answers for a key with that hash —
    /// for algorithms where [`Algorithm::takes_hash`]; [`Error::HashUnsupported`] otherwise.
    pub fn pick_hash(&self, hash: u64) -> Result<usize> {
        let selector = self.selector.as_ref().ok_or(Error::NoNodes)?;
        let index = selector.by_hash(hash);
        index
            .map(|i| i as usize)
            .ok_or(Error::HashUnsupported(self.algorithm.name()))
    }

    /// [`Table::attempts`] for a 64-bit key hash (see [`Table::pick_hash`]).
    pub fn attempts_hash(&self, hash: u64, limit: usize, out: &mut Vec<u32>) -> Result<()> {
        let selector = self.selector.as_ref().ok_or(Error::NoNodes)?;
        if !self.algorithm.takes_hash() {
            return Err(Error::HashUnsupported(self.algorithm.name()));
        }
        if limit > 0 {
            let mut order = Vec::with_capacity(limit.min(64));
            selector.attempts_by_hash(hash, limit, &mut order);
            out.extend_from_slice(&order);
        }
        Ok(())
    }

    /// Appends up to `limit` distinct node indices in retry order to `out` (the first is what
    /// `pick` would have chosen). On error `out` is unchanged.
    pub fn attempts(
        &self,
        key: Option<&[u8]>,
        state: &State,
        now_ns: u64,
        limit: usize,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let (selector, key) = self.ready(key)?;
        if limit > 0 {
            let mut order = Vec::with_capacity(limit.min(64));
            selector.attempts(key, &self.ctx(state, now_ns), limit, &mut order);
            out.extend_from_slice(&order);
        }
        Ok(())
    }
}
