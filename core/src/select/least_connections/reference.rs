//! The scan `least_connections` was before its index (issue 23), kept unchanged as the test
//! oracle: nginx's `ngx_http_upstream_get_least_conn_peer`, O(n) per pick, with one atomic
//! `current_weight` per node. The index in the parent module must answer exactly as this does,
//! single-threaded, for every sequence of picks, leases, weights and health states.

use crate::health::Status;
use crate::select::{Ctx, Select, active_weights};
use crate::sync::{AtomicSigned, Ordering};
use crate::{Node, Options};
use alloc::vec::Vec;
use core::cmp::Ordering as Order;

pub(crate) struct LeastConnections {
    /// Active node indices, in insertion order.
    active: Vec<u32>,
    /// Their weights.
    weights: Vec<u32>,
    /// nginx's `current_weight` per active node, for the tie-break.
    current: Vec<AtomicSigned>,
}

impl LeastConnections {
    /// `in_flight / weight` of position `a` against `b`.
    #[inline]
    fn compare(&self, ctx: &Ctx<'_>, a: usize, b: usize) -> Order {
        let load = |p: usize| ctx.loads[self.active[p] as usize].in_flight() as u128;
        let wa = u128::from(self.weights[a]);
        let wb = u128::from(self.weights[b]);
        (load(a) * wb).cmp(&(load(b) * wa))
    }

    /// `in_flight / (weight · share)` of position `a` against `b`, with health to check:
    /// warming nodes count with their share of weight (in 1/1024ths).
    fn compare_warm(&self, ctx: &Ctx<'_>, a: usize, b: usize) -> Order {
        let load = |p: usize| ctx.loads[self.active[p] as usize].in_flight() as u128;
        let weight = |p: usize| {
            let share = match ctx.status(self.active[p]) {
                Status::Warming { share, .. } => (share * 1024.0) as u128,
                _ => 1024,
            };
            u128::from(self.weights[p]) * share.max(1)
        };
        (load(a) * weight(b)).cmp(&(load(b) * weight(a)))
    }

    /// nginx's choice, as a position in `active` (peers that may not be chosen are skipped,
    /// as nginx skips down peers).
    #[inline]
    fn choose(&self, ctx: &Ctx<'_>) -> usize {
        if !ctx.checking() {
            return self.choose_among(0, |_| true, |a, b| self.compare(ctx, a, b));
        }
        let usable = |p: usize| ctx.usable(self.active[p]);
        match (0..self.active.len()).find(|p| usable(*p)) {
            Some(start) => self.choose_among(start, usable, |a, b| self.compare_warm(ctx, a, b)),
            None => 0,
        }
    }

    /// The least loaded of the positions from `start` on that `usable` lets through, by
    /// `compare`; ties broken by smooth WRR.
    fn choose_among(
        &self,
        start: usize,
        usable: impl Fn(usize) -> bool,
        compare: impl Fn(usize, usize) -> Order,
    ) -> usize {
        let n = self.active.len();
        let mut best = start;
        let mut many = false;
        for p in start + 1..n {
            if !usable(p) {
                continue;
            }
            match compare(p, best) {
                Order::Less => (best, many) = (p, false),
                Order::Equal => many = true,
                Order::Greater => {}
            }
        }
        if !many {
            return best;
        }
        // Smooth WRR among the peers tied with `best`, from `best` on. Relaxed: the current
        // weights order nothing else; each update is one atomic read-modify-write, so their
        // sum is conserved whatever the interleaving.
        let first = best;
        let mut best_current = i64::MIN;
        let mut total: i64 = 0;
        for p in first..n {
            if !usable(p) || compare(p, first) != Order::Equal {
                continue;
            }
            let w = i64::from(self.weights[p]);
            #[allow(
                clippy::unnecessary_cast,
                reason = "AtomicSigned is isize on 32-bit targets"
            )]
            let current = self.current[p].fetch_add(w as _, Ordering::Relaxed) as i64 + w;
            total += w;
            if current > best_current {
                (best, best_current) = (p, current);
            }
        }
        self.current[best].fetch_sub(total as _, Ordering::Relaxed);
        best
    }
}

impl Select for LeastConnections {
    const HEALTH_AWARE: bool = true;
    fn build(nodes: &[Node], active: Vec<u32>, _options: &Options) -> LeastConnections {
        LeastConnections {
            weights: active_weights(nodes, &active),
            current: active.iter().map(|_| AtomicSigned::new(0)).collect(),
            active,
        }
    }

    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.choose(ctx)]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let first = self.choose(ctx);
        // Read every count once: counts move under concurrent leases, and a sort needs a
        // comparison that stays consistent.
        let mut rest: Vec<(u128, u128, usize)> = (0..self.active.len())
            .filter(|p| *p != first)
            .map(|p| {
                let load = ctx.loads[self.active[p] as usize].in_flight() as u128;
                (load, u128::from(self.weights[p]), p)
            })
            .collect();
        let by_load = |a: &(u128, u128, usize), b: &(u128, u128, usize)| {
            (a.0 * b.1).cmp(&(b.0 * a.1)).then(a.2.cmp(&b.2))
        };
        let wanted = (limit - 1).min(rest.len());
        if wanted > 0 && wanted < rest.len() {
            rest.select_nth_unstable_by(wanted - 1, by_load);
        }
        rest.truncate(wanted);
        rest.sort_unstable_by(by_load);
        out.push(self.active[first]);
        out.extend(rest.iter().map(|(_, _, p)| self.active[*p]));
    }
}
