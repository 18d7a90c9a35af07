//! `source_hash`: `hash(key) mod n` — seed 000's "源地址哈希法" (source address hash): the same
//! client address reaches the same backend while the node list is unchanged, which keeps
//! sessions sticky without shared session state.
//!
//! Weighted: the weights are divided by their gcd; if they are then all 1 the answer is exactly
//! `hash(key) mod n`, otherwise `hash(key) mod Σw` is looked up in the cumulative weights (a
//! node with weight 3 owns three consecutive residues). Nodes are ordered by id, not insertion
//! order, so the answer depends only on the set of nodes. Default hash: xxh3 (option `hash`).
//! Unlike `ring`, any membership change moves most keys: that is the price of its simplicity,
//! and why seed 000 goes on to the ring. `attempts`: the pick, then a uniform (or weighted)
//! permutation of the rest drawn from a generator seeded by the key's hash — deterministic,
//! and spreading a failed node's keys over all the others. Cost: one hash and one division.

use super::Ctx;
use super::sample::{self, WeightTree};
use super::{Select, gcd_all};
use crate::HashKind;
use crate::Options;
use crate::node::Node;
use crate::rng::{SplitMix64, bounded};
use alloc::vec::Vec;
use core::cell::RefCell;

pub(crate) struct SourceHash {
    /// Active node indices ordered by id.
    order: Vec<u32>,
    /// Cumulative gcd-reduced weights in `order` and their tree for weighted `attempts`, or
    /// `None` when the reduced weights are all 1 (plain `mod n`).
    weighted: Option<(Vec<u64>, WeightTree)>,
    hash: HashKind,
}

impl SourceHash {
    pub(crate) fn new(nodes: &[Node], mut order: Vec<u32>, hash: HashKind) -> SourceHash {
        order.sort_unstable_by(|a, b| nodes[*a as usize].id.cmp(&nodes[*b as usize].id));
        let g = gcd_all(order.iter().map(|i| nodes[*i as usize].weight));
        let weights: Vec<u32> = order
            .iter()
            .map(|i| nodes[*i as usize].weight / g)
            .collect();
        let weighted = weights.iter().any(|w| *w != 1).then(|| {
            let cumulative = weights
                .iter()
                .scan(0u64, |sum, w| {
                    *sum += u64::from(*w);
                    Some(*sum)
                })
                .collect();
            (cumulative, WeightTree::new(weights))
        });
        SourceHash {
            order,
            weighted,
            hash,
        }
    }

    /// Position in `order` for a 64-bit value.
    #[inline]
    fn position(&self, h: u64) -> usize {
        match &self.weighted {
            None => (h % self.order.len() as u64) as usize,
            Some((cumulative, _)) => {
                let y = h % cumulative.last().expect("active set is not empty");
                cumulative.partition_point(|end| *end <= y)
            }
        }
    }
}

impl Select for SourceHash {
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> SourceHash {
        SourceHash::new(nodes, active, options.hash.unwrap_or(HashKind::Xxh3))
    }

    #[inline]
    fn pick(&self, key: &[u8], _ctx: &Ctx<'_>) -> u32 {
        self.order[self.position(self.hash.hash(key))]
    }

    fn attempts(&self, key: &[u8], _ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let h = self.hash.hash(key);
        let first = self.position(h);
        let g = RefCell::new(SplitMix64::new(h));
        let next = || g.borrow_mut().next();
        match &self.weighted {
            None => sample::shuffle_prefix(self.order.len(), limit, first, next, out),
            Some((cumulative, tree)) => {
                let total = *cumulative.last().expect("active set is not empty");
                let draw = || {
                    let y = bounded(g.borrow_mut().next(), total as usize) as u64;
                    cumulative.partition_point(|end| *end <= y)
                };
                out.push(first as u32);
                sample::weighted_prefix(tree, limit, draw, next, out);
            }
        }
        for slot in out.iter_mut() {
            *slot = self.order[*slot as usize];
        }
    }
}
