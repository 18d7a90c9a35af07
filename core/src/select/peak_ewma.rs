//! `peak_ewma`: power of two choices over a latency cost, as Finagle's `PeakEwma`, linkerd and
//! tower's `p2c` over `load::PeakEwma` do.
//!
//! Source: tower `tower/src/load/peak_ewma.rs` and `tower/src/balance/p2c/service.rs`
//! (after Finagle's `com.twitter.finagle.loadbalancer.PeakEwma`). A node's cost is its latency
//! estimate times its in-flight requests plus one; a pick draws two distinct nodes uniformly
//! and takes the cheaper (the first drawn on ties). The estimate (see `load`) takes a higher
//! sample at once — a node that slows down is avoided immediately — and blends lower ones in
//! with weight `1 - exp(-Δt/decay)`; it decays towards 0 as it ages, so an avoided node is
//! eventually probed again. A node with no sample yet costs `initial_latency` (option, default
//! 30 ms as linkerd's default RTT) per request. Weights other than 0 are ignored, as in tower
//! and Finagle.
//!
//! Options: `decay_ms` (default 10 s), `initial_latency_ms` (default 30). Picks read the clock
//! (`is_timed`). Cost: one draw from the balancer's generator (the second follows from it, see
//! `rng::Draws`), two estimates (an `exp` each). `attempts`: the pick, then a
//! uniformly random order of the others (lazy Fisher-Yates).

use super::{Ctx, Select, sample};
use crate::rng::{Draws, bounded};
use crate::{Node, Options};
use alloc::vec::Vec;
use core::time::Duration;

pub(crate) struct PeakEwma {
    /// Active node indices, in insertion order.
    active: Vec<u32>,
    decay: Duration,
    initial_ns: f32,
}

impl PeakEwma {
    /// Position `p`'s cost at the context's time.
    #[inline]
    fn cost(&self, ctx: &Ctx<'_>, p: usize) -> f32 {
        let load = &ctx.loads[self.active[p] as usize];
        let latency = load
            .decayed_latency_ns(ctx.now_ns, self.decay)
            .unwrap_or(self.initial_ns);
        latency * (load.in_flight() as f32 + 1.0)
    }

    /// The cheaper of two distinct uniform draws, as a position, and the generator they came
    /// from (one shared draw, see `Draws`) for a retry order to go on with.
    #[inline]
    fn choose(&self, ctx: &Ctx<'_>) -> (usize, Draws) {
        let n = self.active.len();
        let first = ctx.rng.next();
        let rng = Draws::after(first);
        if ctx.checking() {
            return (self.choose_checked(ctx, first, &rng), rng);
        }
        let a = bounded(first, n);
        if n == 1 {
            return (a, rng);
        }
        let b = bounded(rng.next(), n - 1);
        let b = if b >= a { b + 1 } else { b };
        if self.cost(ctx, b) < self.cost(ctx, a) {
            (b, rng)
        } else {
            (a, rng)
        }
    }
}

impl PeakEwma {
    /// `choose` with health to check: two distinct candidates, each drawn until taken
    /// (`Ctx::accept`); one if no second is found.
    fn choose_checked(&self, ctx: &Ctx<'_>, first: u64, rng: &Draws) -> usize {
        let n = self.active.len();
        let take = |r: u64, not: Option<usize>| {
            let mut c = bounded(r, n);
            for _ in 0..super::HEALTH_REDRAWS {
                if Some(c) != not && ctx.accept(self.active[c], || rng.next()) {
                    return Some(c);
                }
                c = bounded(rng.next(), n);
            }
            None
        };
        let Some(a) = take(first, None) else {
            return bounded(first, n);
        };
        match take(rng.next(), Some(a)) {
            Some(b) if self.cost(ctx, b) < self.cost(ctx, a) => b,
            _ => a,
        }
    }
}

impl Select for PeakEwma {
    const TIMED: bool = true;
    const HEALTH_AWARE: bool = true;

    fn build(_nodes: &[Node], active: Vec<u32>, options: &Options) -> PeakEwma {
        PeakEwma {
            active,
            decay: options.decay,
            initial_ns: options.initial_latency.as_nanos() as f32,
        }
    }

    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.choose(ctx).0]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let (first, rng) = self.choose(ctx);
        sample::shuffle_prefix(self.active.len(), limit, first, || rng.next(), out);
        for slot in out.iter_mut() {
            *slot = self.active[*slot as usize];
        }
    }
}
