//! [`Balancer`]: a thread-safe balancer over a [`Table`].
//!
//! Readers never lock: the current membership is an immutable [`Snapshot`] (nodes + table)
//! held in an `ArcSwap` (the pattern of pingora's `LoadBalancer`; see `sync::publish`, which
//! swaps in a loom model under `cfg(loom)` so the writers' protocol is model-checked). A pick
//! loads it (no reference-count traffic on the fast path), asks the table, and returns a
//! [`Picked`] that keeps that snapshot alive, so the returned id can never dangle, whatever a
//! concurrent `remove` does.
//! Writers serialise on a mutex, build a complete new snapshot — validating everything first —
//! and publish it with one atomic store: readers see the old set or the new one, never a mix,
//! and a failed change publishes nothing.

use crate::sync::publish::{Loaded, Mutex, Published};
use crate::{Algorithm, Error, MAX_BATCH, Node, Options, Result, State, Table};
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;

/// Most answers a batch reserves room for up front (it grows past this as it goes).
const RESERVE_CAP: usize = 1 << 16;

/// One published membership: the nodes in insertion order and the table built from them.
struct Snapshot {
    nodes: Vec<Node>,
    table: Table,
}

/// A thread-safe load balancer: an algorithm, its options and a membership.
pub struct Balancer {
    options: Options,
    current: Published<Snapshot>,
    state: State,
    /// Serialises writers only; picks never touch it.
    writer: Mutex<()>,
}

/// A node as listed by [`Balancer::nodes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id.
    pub id: String,
    /// Its weight (0 = drained).
    pub weight: u32,
    /// The caller's tag.
    pub tag: u64,
}

/// The answer to a pick. Holds the snapshot it was chosen from, so `id()` stays valid even if
/// the node is removed meanwhile; drop it promptly (it pins that snapshot's memory).
pub struct Picked {
    snapshot: Loaded<Snapshot>,
    index: usize,
}

impl Picked {
    /// The chosen node's id.
    #[inline]
    pub fn id(&self) -> &str {
        &self.snapshot.nodes[self.index].id
    }

    /// The chosen node's weight.
    pub fn weight(&self) -> u32 {
        self.snapshot.nodes[self.index].weight
    }

    /// The chosen node's caller tag.
    #[inline]
    pub fn tag(&self) -> u64 {
        self.snapshot.nodes[self.index].tag
    }
}

impl core::fmt::Debug for Picked {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Picked").field(&self.id()).finish()
    }
}

/// Several answers from one snapshot (`pick_many`, `attempts`).
pub struct Picks {
    snapshot: Arc<Snapshot>,
    indices: Vec<u32>,
}

impl Picks {
    /// Number of answers.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether there are no answers.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The answers' ids, in order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.indices
            .iter()
            .map(|i| &*self.snapshot.nodes[*i as usize].id)
    }

    /// The answers' tags, in order.
    pub fn tags(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.indices
            .iter()
            .map(|i| self.snapshot.nodes[*i as usize].tag)
    }
}

impl core::fmt::Debug for Picks {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.ids()).finish()
    }
}

impl Balancer {
    /// A balancer over `nodes`. Fails on invalid options or ids, or duplicate ids. An empty
    /// node list is allowed (picks fail with [`Error::NoNodes`] until a node is added).
    pub fn new<N: Into<Node>>(
        algorithm: Algorithm,
        nodes: impl IntoIterator<Item = N>,
        options: Options,
    ) -> Result<Balancer> {
        let nodes: Vec<Node> = nodes.into_iter().map(Into::into).collect();
        let table = Table::build(algorithm, &options, &nodes)?;
        Ok(Balancer {
            options,
            current: Published::new(Snapshot { nodes, table }),
            state: State::for_options(&options),
            writer: Mutex::new(()),
        })
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.current.load().table.algorithm()
    }

    /// The options the balancer was built with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Picks a node. Keyed algorithms need `key`; the others ignore it.
    #[inline]
    pub fn pick(&self, key: Option<&[u8]>) -> Result<Picked> {
        let snapshot = self.current.load();
        let index = snapshot.table.pick(key, &self.state)?;
        Ok(Picked { snapshot, index })
    }

    /// Picks once per key, all from the same snapshot. For unkeyed algorithms the keys only
    /// count the picks.
    pub fn pick_many<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Result<Picks> {
        let snapshot = self.current.load_full();
        snapshot.table.check(Some(&[]))?;
        let keys = keys.into_iter();
        // The hint is the caller's claim: a lower bound over the limit fails before any pick;
        // the up-front reservation is capped and grows as keys actually arrive.
        let hint = keys.size_hint().0;
        if hint > MAX_BATCH {
            return Err(Error::BatchTooLarge(hint as u64));
        }
        let mut indices = Vec::with_capacity(hint.min(RESERVE_CAP));
        for key in keys {
            if indices.len() == MAX_BATCH {
                return Err(Error::BatchTooLarge(MAX_BATCH as u64 + 1));
            }
            indices.push(snapshot.table.pick(Some(key), &self.state)? as u32);
        }
        Ok(Picks { snapshot, indices })
    }

    /// `count` unkeyed picks from the same snapshot (keyed algorithms fail with `KeyRequired`).
    pub fn pick_n(&self, count: usize) -> Result<Picks> {
        let snapshot = self.current.load_full();
        // Fail before reserving anything: an impossible pick must not turn a huge `count`
        // into an allocation failure (which aborts) instead of an error.
        snapshot.table.check(None)?;
        if count > MAX_BATCH {
            return Err(Error::BatchTooLarge(count as u64));
        }
        let mut indices = Vec::with_capacity(count.min(RESERVE_CAP));
        for _ in 0..count {
            indices.push(snapshot.table.pick(None, &self.state)? as u32);
        }
        Ok(Picks { snapshot, indices })
    }

    /// Up to `limit` distinct nodes in retry order (seed 002's retry loop); the first is what
    /// `pick` would have returned.
    pub fn attempts(&self, key: Option<&[u8]>, limit: usize) -> Result<Picks> {
        let snapshot = self.current.load_full();
        let mut indices = Vec::new();
        snapshot
            .table
            .attempts(key, &self.state, limit, &mut indices)?;
        Ok(Picks { snapshot, indices })
    }

    /// The nodes, in insertion order.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.current
            .load()
            .nodes
            .iter()
            .map(|n| NodeInfo {
                id: n.id.to_string(),
                weight: n.weight,
                tag: n.tag,
            })
            .collect()
    }

    /// Number of nodes (including drained ones).
    pub fn len(&self) -> usize {
        self.current.load().nodes.len()
    }

    /// Whether the balancer has no nodes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a node with this id exists.
    pub fn contains(&self, id: &str) -> bool {
        self.current.load().nodes.iter().any(|n| &*n.id == id)
    }

    /// Adds a node at the end. Fails on an invalid or duplicate id.
    pub fn add(&self, node: impl Into<Node>) -> Result<()> {
        let node = node.into();
        // `Table::build` (inside `change`) rejects an invalid or duplicate id.
        self.change(|nodes| {
            nodes.push(node);
            Ok(())
        })
    }

    /// Removes a node. Fails on an unknown id.
    pub fn remove(&self, id: &str) -> Result<()> {
        self.change(|nodes| {
            let i = position(nodes, id)?;
            nodes.remove(i);
            Ok(())
        })
    }

    /// Changes a node's weight (0 drains it). Fails on an unknown id.
    pub fn set_weight(&self, id: &str, weight: u32) -> Result<()> {
        self.change(|nodes| {
            let i = position(nodes, id)?;
            nodes[i].weight = weight;
            Ok(())
        })
    }

    /// Replaces the whole membership atomically. Fails (changing nothing) on any invalid or
    /// duplicate id.
    pub fn update<N: Into<Node>>(&self, nodes: impl IntoIterator<Item = N>) -> Result<()> {
        let replacement: Vec<Node> = nodes.into_iter().map(Into::into).collect();
        self.change(move |nodes| {
            *nodes = replacement;
            Ok(())
        })
    }

    /// Applies `edit` to a copy of the node list, builds its table and publishes both. Writers
    /// hold the mutex so no concurrent change is lost; on error nothing is published. Building
    /// the table validates the whole list (ids, duplicates, size): the one place that does.
    fn change(&self, edit: impl FnOnce(&mut Vec<Node>) -> Result<()>) -> Result<()> {
        // A writer that panicked left no partial state behind (it publishes whole snapshots),
        // so a poisoned mutex is safe to keep using.
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.current.load();
        let mut nodes = current.nodes.clone();
        edit(&mut nodes)?;
        let table = Table::build(current.table.algorithm(), &self.options, &nodes)?;
        self.current.store(Arc::new(Snapshot { nodes, table }));
        Ok(())
    }
}

fn position(nodes: &[Node], id: &str) -> Result<usize> {
    nodes
        .iter()
        .position(|n| &*n.id == id)
        .ok_or_else(|| Error::UnknownNode(id.to_string()))
}

impl core::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let snapshot = self.current.load();
        f.debug_struct("Balancer")
            .field("algorithm", &snapshot.table.algorithm())
            .field("nodes", &snapshot.nodes.len())
            .field("options", &self.options)
            .finish()
    }
}

// Compile-time proof that balancers and their answers can cross and be shared across threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Balancer>();
    assert_send_sync::<Picks>();
    assert_send_sync::<Table>();
    assert_send_sync::<State>();
};
