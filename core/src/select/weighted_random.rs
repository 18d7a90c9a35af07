//! `weighted_random`: P(node) = weight / Σ weights, O(1) per pick with an alias table.
//!
//! Source: seed 000 "加权随机", whose two methods (a list with each ip repeated `weight` times;
//! a walk over the weights) give this same distribution in O(Σw) memory or O(n) time. Here Vose's
//! alias method (Vose, "A linear algorithm for generating random numbers with a given
//! distribution", IEEE TSE 1991) in exact integer arithmetic: each column holds
//! `prob` (in units where Σw = certain) and an alias, so a pick is one random draw, one
//! 128-bit multiply and one comparison. The column comes from the high half of `r · n` and the
//! in-column coin from its low half, so one draw serves both. `attempts` is weighted sampling
//! without replacement (`sample::weighted_prefix`).

use super::Ctx;
use super::Select;
use super::active_weights;
use super::sample::{self, WeightTree};
use crate::rng::Draws;
use crate::{Node, Options};
use alloc::vec::Vec;

/// Vose's alias table over active nodes, exact in integers.
pub(crate) struct Alias {
    /// One column per node: a draw reads one 16-byte entry.
    columns: Vec<Column>,
    /// Σ weights (64-bit: a sum of u32 weights never overflows it below 2^32 nodes).
    total: u64,
}

/// A column of the alias table.
#[derive(Clone, Copy)]
struct Column {
    /// The column keeps itself when the coin `y < prob` (y uniform in `0..total`).
    prob: u64,
    /// Where it goes otherwise.
    alias: u32,
}

impl Alias {
    pub(crate) fn build(weights: &[u32]) -> Alias {
        let n = weights.len();
        let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        // Scaled weights w·n against the threshold Σw; u128 because w·n can exceed 2^64.
        let mut scaled: Vec<u128> = weights.iter().map(|w| u128::from(*w) * n as u128).collect();
        let threshold = u128::from(total);
        let mut prob = alloc::vec![total; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|i| scaled[*i] < threshold);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            prob[s] = scaled[s] as u64;
            alias[s] = l as u32;
            scaled[l] = scaled[l] + scaled[s] - threshold;
            if scaled[l] < threshold {
                large.pop();
                small.push(l);
            }
        }
        // What is left is full (exactly Σw in exact arithmetic): keeps itself, prob = total.
        let columns = (prob.into_iter().zip(alias))
            .map(|(prob, alias)| Column { prob, alias })
            .collect();
        Alias { columns, total }
    }

    /// Draws a column index from 64 random bits.
    #[inline]
    pub(crate) fn draw(&self, r: u64) -> usize {
        let wide = u128::from(r) * self.columns.len() as u128;
        let index = (wide >> 64) as usize;
        let coin = ((u128::from(wide as u64) * u128::from(self.total)) >> 64) as u64;
        let column = self.columns[index];
        if coin < column.prob {
            index
        } else {
            column.alias as usize
        }
    }
}

pub(crate) struct WeightedRandom {
    active: Vec<u32>,
    weights: WeightTree,
    alias: Alias,
}

impl WeightedRandom {
    pub(crate) fn new(active: Vec<u32>, weights: Vec<u32>) -> WeightedRandom {
        let alias = Alias::build(&weights);
        WeightedRandom {
            active,
            weights: WeightTree::new(weights),
            alias,
        }
    }
}

impl Select for WeightedRandom {
    fn build(nodes: &[Node], active: Vec<u32>, _options: &Options) -> WeightedRandom {
        let weights = active_weights(nodes, &active);
        WeightedRandom::new(active, weights)
    }

    #[inline]
    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.alias.draw(ctx.rng.next())]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let r = ctx.rng.next();
        let rng = Draws::after(r);
        let draw = || self.alias.draw(rng.next());
        out.push(self.alias.draw(r) as u32);
        sample::weighted_prefix(&self.weights, limit, draw, || rng.next(), out);
        for slot in out.iter_mut() {
            *slot = self.active[*slot as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact probability of each column's outcome, summed: must equal w_i / Σw.
    #[test]
    fn alias_table_is_exact() {
        for weights in [
            &[2u32, 7, 1][..],
            &[1, 1, 1, 1],
            &[5, 1, 1],
            &[u32::MAX, 1, 3],
        ] {
            let a = Alias::build(weights);
            let n = weights.len() as u128;
            let total = u128::from(a.total);
            // mass[i] in units of 1 / (n·total).
            let mut mass = alloc::vec![0u128; weights.len()];
            for c in 0..weights.len() {
                mass[c] += u128::from(a.columns[c].prob);
                mass[a.columns[c].alias as usize] += total - u128::from(a.columns[c].prob);
            }
            for (i, w) in weights.iter().enumerate() {
                assert_eq!(mass[i], u128::from(*w) * n, "weights {weights:?}");
            }
        }
    }
}
