//! Test access to the field-compatible placements (`ketama`, `nginx_chash`, `ring_hash`,
//! `maglev`, `rendezvous`, `jump`) before they are registered as algorithms: the upstream
//! comparison scripts drive them through `examples/placement.rs`. Feature `testing` only;
//! not part of the public API.

use crate::HashKind;
use crate::node::Node;
use crate::select::Select;
use crate::select::jump::Jump;
use crate::select::ketama::Ketama;
use crate::select::maglev::{self, Maglev};
use crate::select::nginx_chash::NginxChash;
use crate::select::rendezvous::Rendezvous;
use crate::select::ring_hash::{self, RingHash};
use crate::table::State;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

enum Inner {
    Jump(Jump),
    Ketama(Ketama),
    Maglev(Maglev),
    NginxChash(NginxChash),
    Rendezvous(Rendezvous),
    RingHash(RingHash),
}

/// One placement built over a node list (weight 0 = drained, as everywhere in liblb).
pub struct Placement {
    nodes: Vec<Node>,
    /// `None` when no node is active.
    inner: Option<Inner>,
    state: State,
}

macro_rules! each {
    ($inner:expr, $s:ident => $call:expr) => {
        match $inner {
            Inner::Jump($s) => $call,
            Inner::Ketama($s) => $call,
            Inner::Maglev($s) => $call,
            Inner::NginxChash($s) => $call,
            Inner::Rendezvous($s) => $call,
            Inner::RingHash($s) => $call,
        }
    };
}

impl Placement {
    /// The placement names this module knows.
    pub const NAMES: &'static [&'static str] = &[
        "ketama",
        "nginx_chash",
        "jump",
        "maglev",
        "ring_hash",
        "rendezvous",
    ];

    /// Builds `algorithm` over `nodes` with integer `options` (name, value).
    pub fn new(algorithm: &str, options: &[(&str, u64)], nodes: Vec<Node>) -> Result<Self, String> {
        let option = |name: &str, default: u64| {
            options
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(default, |(_, v)| *v)
        };
        let known: &[&str] = match algorithm {
            "maglev" => &["table_size"],
            "ring_hash" => &["min_ring_size", "max_ring_size"],
            _ => &[],
        };
        if let Some((name, _)) = options.iter().find(|(n, _)| !known.contains(n)) {
            return Err(format!("{algorithm} takes no option {name}"));
        }
        let min_ring = option("min_ring_size", ring_hash::DEFAULT_MIN_RING_SIZE);
        let max_ring = option("max_ring_size", ring_hash::DEFAULT_MAX_RING_SIZE);
        if min_ring == 0 || min_ring > max_ring || max_ring > ring_hash::DEFAULT_MAX_RING_SIZE {
            return Err(format!(
                "need 1 <= min_ring_size ({min_ring}) <= max_ring_size ({max_ring}) <= 8388608"
            ));
        }
        let table_size = option("table_size", maglev::DEFAULT_TABLE_SIZE);
        if !maglev::is_prime(table_size) || table_size > maglev::MAX_TABLE_SIZE {
            return Err(format!("table_size {table_size} is not a prime <= 5000011"));
        }
        let active: Vec<u32> = (0..nodes.len() as u32)
            .filter(|i| nodes[*i as usize].weight > 0)
            .collect();
        let inner = if active.is_empty() {
            None
        } else {
            Some(match algorithm {
                "ketama" => Inner::Ketama(Ketama::build(&nodes, &active)),
                "maglev" => Inner::Maglev(Maglev::build(&nodes, &active, table_size)),
                "ring_hash" => {
                    Inner::RingHash(RingHash::build(&nodes, &active, min_ring, max_ring))
                }
                "rendezvous" => Inner::Rendezvous(Rendezvous::build(&nodes, &active)),
                "jump" => Inner::Jump(Jump::build(active.clone(), HashKind::Xxh3)),
                "nginx_chash" => Inner::NginxChash(NginxChash::build(&nodes, &active)),
                _ => {
                    return Err(format!(
                        "unknown placement {algorithm}; known: {:?}",
                        Self::NAMES
                    ));
                }
            })
        };
        Ok(Placement {
            nodes,
            inner,
            state: State::new(0),
        })
    }

    /// The id `key` goes to, or `None` without active nodes.
    pub fn pick(&self, key: &[u8]) -> Option<&str> {
        let inner = self.inner.as_ref()?;
        let i = each!(inner, s => s.pick(key, &self.state));
        Some(&self.nodes[i as usize].id)
    }

    /// The id for a 64-bit request hash, or `None` without active nodes or for placements
    /// whose key does not reduce to a 64-bit hash (`ketama`, `nginx_chash`: 32-bit hashes).
    pub fn pick_hash(&self, h: u64) -> Option<&str> {
        let i: u32 = match self.inner.as_ref()? {
            Inner::Jump(s) => Some(s.pick_hash(h)),
            Inner::Maglev(s) => Some(s.pick_hash(h)),
            Inner::RingHash(s) => Some(s.pick_hash(h)),
            Inner::Rendezvous(s) => Some(s.pick_hash(h)),
            Inner::Ketama(_) | Inner::NginxChash(_) => None,
        }?;
        Some(&self.nodes[i as usize].id)
    }

    /// Up to `limit` distinct ids in retry order.
    pub fn attempts(&self, key: &[u8], limit: usize) -> Vec<&str> {
        let mut out = Vec::new();
        if let Some(inner) = &self.inner {
            each!(inner, s => s.attempts(key, &self.state, limit, &mut out));
        }
        out.iter().map(|i| &*self.nodes[*i as usize].id).collect()
    }
}
