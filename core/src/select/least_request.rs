//! `least_request`: power of two choices over in-flight requests (Mitzenmacher 2001), with
//! Envoy's `LEAST_REQUEST` semantics.
//!
//! Source: Envoy `source/extensions/load_balancing_policies/least_request/` (and gRPC's
//! `least_request_experimental`): draw `choice_count` candidates (default 2) and send the
//! request to the one with the fewest active requests; ties keep the first drawn. Candidates
//! here are distinct, so two choices really compare two nodes: with equal weights and two
//! choices (the default) the second is drawn from the other `n - 1` nodes; otherwise a
//! duplicate draw is redrawn a few times.
//!
//! Weights: candidates are drawn in proportion to weight (Vose alias table, as
//! `weighted_random`), and compared by in-flight *relative to weight* — `a.in_flight · b.weight <
//! b.in_flight · a.weight`, in integers. Under equal load the first draw wins every tie, so
//! shares follow weights exactly; comparing unweighted draws by load/weight instead would hand
//! the heaviest node nearly everything at low load (tower#696 is that bug). Equal weights
//! draw uniformly (one multiply, no table).
//!
//! In-flight counts come from leases (`Balancer::acquire`): a plain `pick` starts no request,
//! so without leases this is weighted random. Cost: one draw from the balancer's generator (the
//! first draw seeds the others, see `rng::Draws`), `choice_count` candidates and as many atomic
//! loads. `attempts`: the pick, then a sample without replacement by weight.

use super::sample::{self, WeightTree};
use super::weighted_random::Alias;
use super::{Ctx, Select, active_weights};
use crate::options::MAX_CHOICE_COUNT;
use crate::rng::{Draws, bounded};
use crate::{Node, Options};
use alloc::vec::Vec;

pub(crate) struct LeastRequest {
    /// Active node indices, in insertion order.
    active: Vec<u32>,
    /// Their weights.
    weights: Vec<u32>,
    /// Weighted draws; `None` when all weights are equal (uniform draws).
    alias: Option<Alias>,
    /// For `attempts`.
    tree: WeightTree,
    choices: usize,
}

/// Redraws of a candidate that was already drawn before giving up on distinctness.
const REDRAWS: usize = 8;

impl LeastRequest {
    /// A candidate position, by weight.
    #[inline]
    fn draw(&self, r: u64) -> usize {
        match &self.alias {
            None => bounded(r, self.active.len()),
            Some(alias) => alias.draw(r),
        }
    }

    /// Whether position `a` is less loaded than `b` relative to their weights.
    #[inline]
    fn lighter(&self, ctx: &Ctx<'_>, a: usize, b: usize) -> bool {
        let load = |p: usize| ctx.loads[self.active[p] as usize].in_flight() as u128;
        load(a) * u128::from(self.weights[b]) < load(b) * u128::from(self.weights[a])
    }
}

impl Select for LeastRequest {
    const HEALTH_AWARE: bool = true;
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> LeastRequest {
        let weights = active_weights(nodes, &active);
        let equal = weights.windows(2).all(|w| w[0] == w[1]);
        LeastRequest {
            alias: (!equal).then(|| Alias::build(&weights)),
            tree: WeightTree::new(weights.clone()),
            choices: (options.choice_count as usize).min(active.len()),
            active,
            weights,
        }
    }

    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.choose(ctx).0]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let (first, rng) = self.choose(ctx);
        out.push(first as u32);
        let draw = || self.draw(rng.next());
        sample::weighted_prefix(&self.tree, limit, draw, || rng.next(), out);
        for slot in out.iter_mut() {
            *slot = self.active[*slot as usize];
        }
    }
}

impl LeastRequest {
    /// The position of the lightest of `choices` distinct weighted draws, and the generator
    /// those came from (one shared draw, see `Draws`) for a retry order to go on with.
    #[inline]
    fn choose(&self, ctx: &Ctx<'_>) -> (usize, Draws) {
        if self.choices == 2 && self.alias.is_none() && !ctx.checking() {
            return self.choose_two_uniform(ctx);
        }
        self.choose_any(ctx)
    }

    /// Two distinct uniform candidates, the default: the second is drawn from the other
    /// `n - 1` positions directly, so there is nothing to redraw or remember.
    #[inline]
    fn choose_two_uniform(&self, ctx: &Ctx<'_>) -> (usize, Draws) {
        let n = self.active.len();
        let first = ctx.rng.next();
        let rng = Draws::after(first);
        let a = bounded(first, n);
        let b = bounded(rng.next(), n - 1);
        let b = if b >= a { b + 1 } else { b };
        let load = |p: usize| ctx.loads[self.active[p] as usize].in_flight();
        (if load(b) < load(a) { b } else { a }, rng)
    }

    /// `choices` distinct weighted draws (a duplicate is redrawn up to `REDRAWS` times).
    /// With health to check, each candidate is drawn until one is taken (`Ctx::accept`:
    /// usable, and warming nodes thinned by their share).
    fn choose_any(&self, ctx: &Ctx<'_>) -> (usize, Draws) {
        let mut drawn = [0usize; MAX_CHOICE_COUNT as usize];
        let first = ctx.rng.next();
        let rng = Draws::after(first);
        let candidate = |r: u64| {
            let mut c = self.draw(r);
            if ctx.checking() {
                for _ in 0..super::HEALTH_REDRAWS {
                    if ctx.accept(self.active[c], || rng.next()) {
                        break;
                    }
                    c = self.draw(rng.next());
                }
            }
            c
        };
        drawn[0] = candidate(first);
        let mut best = drawn[0];
        for k in 1..self.choices {
            let mut candidate_k = candidate(rng.next());
            for _ in 0..REDRAWS {
                if !drawn[..k].contains(&candidate_k) {
                    break;
                }
                candidate_k = candidate(rng.next());
            }
            let candidate = candidate_k;
            drawn[k] = candidate;
            if self.lighter(ctx, candidate, best) {
                best = candidate;
            }
        }
        (best, rng)
    }
}
