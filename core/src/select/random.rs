//! `random`: uniform over the nodes with weight > 0; weights are otherwise ignored.
//!
//! Source: seed 000 "完全随机" (FullRandom, `random.nextInt(list.size())`) and seed 002
//! (`rand.Intn() % n`). The generator is the balancer's shared SplitMix64 (see `rng`), seeded
//! from OS entropy unless a `seed` is given — seed 002's unseeded-`rand` pitfall cannot happen.
//! Retries (`attempts`) are a lazy Fisher-Yates prefix, seed 002's fix for its biased shuffle.
//! Cost: one atomic add, one multiply per pick.

use super::Ctx;
use super::{Select, sample};
use crate::rng::{Draws, bounded};
use crate::{Node, Options};
use alloc::vec::Vec;

pub(crate) struct Random {
    /// Active node indices, in insertion order.
    active: Vec<u32>,
}

impl Random {
    pub(crate) fn new(active: Vec<u32>) -> Random {
        Random { active }
    }
}

impl Select for Random {
    fn build(_nodes: &[Node], active: Vec<u32>, _options: &Options) -> Random {
        Random::new(active)
    }

    #[inline]
    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[bounded(ctx.rng.next(), self.active.len())]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let n = self.active.len();
        let r = ctx.rng.next();
        let rng = Draws::after(r);
        sample::shuffle_prefix(n, limit, bounded(r, n), || rng.next(), out);
        for slot in out.iter_mut() {
            *slot = self.active[*slot as usize];
        }
    }
}
