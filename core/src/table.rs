//! [`Table`]: the immutable selection structure for one membership, and [`State`]: the
//! lock-free mutable part (position counter, random generator) that outlives tables, so the
//! round robin position and the random sequence carry on across membership changes.

use crate::node::{Node, validate_id};
use crate::rng::AtomicRng;
use crate::select::Select;
use crate::select::random::Random;
use crate::select::ring::Ring;
use crate::select::round_robin::RoundRobin;
use crate::select::source_hash::SourceHash;
use crate::select::weighted_random::WeightedRandom;
use crate::select::weighted_round_robin::WeightedRoundRobin;
use crate::sync::AtomicCounter;
use crate::{Algorithm, Error, HashKind, MAX_NODES, Options, Result};
use alloc::string::ToString;
use alloc::vec::Vec;

/// The per-balancer mutable state: touched by picks with one atomic add, never locked.
#[derive(Debug)]
pub struct State {
    /// Round robin / smooth WRR position.
    pub(crate) position: AtomicCounter,
    /// Shared SplitMix64 for the random algorithms.
    pub(crate) rng: AtomicRng,
}

impl State {
    /// State whose random sequence is fixed by `seed`.
    pub fn new(seed: u64) -> State {
        State {
            position: AtomicCounter::new(0),
            rng: AtomicRng::new(seed),
        }
    }

    /// State seeded from OS entropy: two processes (or two balancers) never share a sequence.
    #[cfg(feature = "std")]
    pub fn from_entropy() -> State {
        let mut bytes = [0u8; 8];
        // getrandom fails only when the OS has no entropy source at all; then fall back to
        // the clock and the address of a local, still distinct per process and per call.
        if getrandom::fill(&mut bytes).is_err() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let here = &bytes as *const _ as u64;
            bytes = (now ^ here.rotate_left(32)).to_le_bytes();
        }
        State::new(u64::from_le_bytes(bytes))
    }

    /// State for `options`: seeded when `options.seed` is set, else from OS entropy.
    #[cfg(feature = "std")]
    pub fn for_options(options: &Options) -> State {
        options.seed.map_or_else(State::from_entropy, State::new)
    }
}

/// Calls the same method on whichever selector is inside (static dispatch: no vtable on the
/// hot path).
macro_rules! dispatch {
    ($selector:expr, $s:ident => $call:expr) => {
        match $selector {
            Selector::Random($s) => $call,
            Selector::WeightedRandom($s) => $call,
            Selector::RoundRobin($s) => $call,
            Selector::WeightedRoundRobin($s) => $call,
            Selector::SourceHash($s) => $call,
            Selector::Ring($s) => $call,
        }
    };
}

enum Selector {
    Random(Random),
    WeightedRandom(WeightedRandom),
    RoundRobin(RoundRobin),
    WeightedRoundRobin(WeightedRoundRobin),
    SourceHash(SourceHash),
    Ring(Ring),
}

/// An immutable selection table for one node list. Cheap to share; rebuilt on change.
pub struct Table {
    algorithm: Algorithm,
    /// `None` when no node has weight > 0.
    selector: Option<Selector>,
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
        options.validate()?;
        validate_nodes(nodes)?;
        let active: Vec<u32> = (0..nodes.len() as u32)
            .filter(|i| nodes[*i as usize].weight > 0)
            .collect();
        let selector = (!active.is_empty()).then(|| {
            let weights = || active.iter().map(|i| nodes[*i as usize].weight).collect();
            match algorithm {
                Algorithm::Random => Selector::Random(Random::build(active.clone())),
                Algorithm::WeightedRandom => {
                    Selector::WeightedRandom(WeightedRandom::build(active.clone(), weights()))
                }
                Algorithm::RoundRobin => Selector::RoundRobin(RoundRobin::build(active.clone())),
                Algorithm::WeightedRoundRobin => Selector::WeightedRoundRobin(
                    WeightedRoundRobin::build(active.clone(), weights()),
                ),
                Algorithm::SourceHash => Selector::SourceHash(SourceHash::build(
                    nodes,
                    active.clone(),
                    options.hash.unwrap_or(HashKind::Xxh3),
                )),
                Algorithm::Ring => Selector::Ring(Ring::build(
                    nodes,
                    &active,
                    options.vnodes,
                    options.hash.unwrap_or(HashKind::Sha256),
                )),
            }
        });
        Ok(Table {
            algorithm,
            selector,
        })
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
    /// `key`; keyed ones fail with [`Error::KeyRequired`] without it.
    #[inline]
    pub fn pick(&self, key: Option<&[u8]>, state: &State) -> Result<usize> {
        let (selector, key) = self.ready(key)?;
        Ok(dispatch!(selector, s => s.pick(key, state)) as usize)
    }

    /// Appends up to `limit` distinct node indices in retry order to `out` (the first is what
    /// `pick` would have chosen). On error `out` is unchanged.
    pub fn attempts(
        &self,
        key: Option<&[u8]>,
        state: &State,
        limit: usize,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let (selector, key) = self.ready(key)?;
        if limit > 0 {
            let mut order = Vec::with_capacity(limit.min(64));
            dispatch!(selector, s => s.attempts(key, state, limit, &mut order));
            out.extend_from_slice(&order);
        }
        Ok(())
    }
}
