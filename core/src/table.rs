//! [`Table`]: the immutable selection structure for one membership. The algorithms' own
//! structures and their dispatch live in `select` (the registration list); the mutable state
//! that outlives tables lives in `state`.

use crate::health::{Counted, Gate, Members, Policy, Status};
use crate::load::{Load, Outcome, Penalty};
use crate::node::{Node, validate_id};
use crate::orca::LoadReport;
use crate::route::{Layout, Routing};
use crate::select::{Ctx, Selector};
use crate::state::State;
use crate::sync::Ordering;
use crate::{Algorithm, Error, MAX_NODES, Options, Result};
use alloc::boxed::Box;
use alloc::string::ToString;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::AtomicUsize;

/// An immutable selection table for one node list. Cheap to share; rebuilt on change.
pub struct Table {
    algorithm: Algorithm,
    /// `None` when no node has weight > 0.
    plan: Option<Plan>,
    /// Each node's load, indexed like the node list (shared with other tables holding the
    /// same node).
    loads: Vec<Arc<Load>>,
    /// Indices of the nodes with weight > 0 (in the client's subset, with subsetting), in
    /// node order.
    active: Vec<u32>,
    /// Every node's weight, and the sum over active nodes (bounded loads' weight shares).
    weights: Vec<u32>,
    total_weight: u64,
    /// Health options.
    policy: Policy,
    /// Latency-estimate decay (leases and reports).
    decay: core::time::Duration,
    /// What a failure costs the latency estimate (`failure_penalty_ms`, `max_retry_after_ms`).
    penalty: Penalty,
    /// How load reports weigh (`error_utilization_penalty`, `weight_expiration_period_ms`).
    error_utilization_penalty: f32,
    weight_expiration: core::time::Duration,
    /// This table's identity, unique in the process (see `health::Summary::adopt`).
    id: usize,
    /// Whether a pick may go straight to the plan's one selector while no node is being
    /// checked (see [`Table::calm_pick`]).
    calm: Calm,
    /// Whether a newer table over the same loads was published (`Balancer`): a request
    /// ending here must also tell that one (see [`Table::tracks_load`]).
    #[cfg(feature = "std")]
    retired: core::sync::atomic::AtomicBool,
}

/// Which picks [`Table::calm_pick`] makes (when no node is being checked).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Calm {
    /// None: the table has no nodes, bounds loads, or weighs latency.
    No,
    /// Every pick (the key is ignored).
    Unkeyed,
    /// Picks with a key (without one, the general path answers `KeyRequired`).
    Keyed,
}

/// Where a table's picks come from.
enum Plan {
    /// One structure over every active node (one priority level, no locality routing).
    Flat(Selector),
    /// Priority levels and localities, each group with its own structure (see `route`).
    Routed(Box<Layout>),
}

/// What a pick places: a key (keyed algorithms; empty for the others) or a caller's 64-bit
/// key hash (`pick_hash`).
#[derive(Clone, Copy)]
enum By<'k> {
    Key(&'k [u8]),
    Hash(u64),
}

impl By<'_> {
    #[inline]
    fn pick(self, selector: &Selector, ctx: &Ctx<'_>) -> u32 {
        match self {
            By::Key(key) => selector.pick(key, ctx),
            // Only algorithms that take hashes are given one (`Table::takes`).
            By::Hash(hash) => selector.by_hash(hash).unwrap_or_default(),
        }
    }

    fn attempts(self, selector: &Selector, ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        match self {
            By::Key(key) => selector.attempts(key, ctx, limit, out),
            By::Hash(hash) => {
                selector.attempts_by_hash(hash, limit, out);
            }
        }
    }
}

/// Hands out table identities (0 is never one: it means "none adopted"). A `usize` wraps
/// only after 2^32 builds on 32-bit targets, and then only an identity still in use could
/// collide with a new one.
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

fn next_id() -> usize {
    // Relaxed: identities only have to differ.
    match NEXT_ID.fetch_add(1, core::sync::atomic::Ordering::Relaxed) {
        0 => NEXT_ID.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
        id => id,
    }
}

/// Redraws of an unusable unkeyed pick before the table falls back to a scan.
const REDRAWS: usize = 32;

/// A bounded-loads bound: `(in-flight + 1) · hash_balance_factor`, shared over `weight`.
#[derive(Clone, Copy)]
struct Bound {
    scaled: u128,
    weight: u64,
}

impl core::fmt::Debug for Table {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Table")
            .field("algorithm", &self.algorithm)
            .field("empty", &self.plan.is_none())
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
    crate::route::validate_localities(nodes)?;
    // Sort 64-bit hashes of the ids rather than the ids themselves (a million string
    // comparisons is most of a large build); only equal hashes compare the ids.
    let mut hashed: Vec<(u64, u32)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (xxhash_rust::xxh3::xxh3_64(n.id.as_bytes()), i as u32))
        .collect();
    hashed.sort_unstable();
    let id = |at: &(u64, u32)| &*nodes[at.1 as usize].id;
    for run in hashed
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|run| run.len() > 1)
    {
        let mut ids: Vec<&str> = run.iter().map(id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::DuplicateNode(w[0].to_string()));
        }
    }
    Ok(())
}

/// The client's subset of `active` (indices of `nodes`), in node order: what the table's
/// algorithm then runs on. Nodes that are drained (weight 0) are not candidates, as if they
/// had left; nodes ejected or down stay, health deals with them, so a failure does not
/// reshuffle subsets. Keyed algorithms are refused: a key must land on the same node in every
/// client, which subsets that differ per client cannot give.
///
/// `aperture`'s window covers its two edge backends only in part; as Finagle's pick draws
/// them in proportion to the part inside (`Ring.pick`), the nodes come back with their weights
/// scaled by it (every member's weight × [`APERTURE_SCALE`] × its fraction, at least 1), so the
/// algorithms that read weights draw edges less; the others treat the members alike.
fn subset(
    algorithm: Algorithm,
    spec: &crate::subset::SubsetSpec,
    nodes: &[Node],
    active: &[u32],
) -> Result<(Vec<u32>, Option<Vec<Node>>)> {
    if algorithm.is_keyed() {
        return Err(Error::InvalidOptionValue {
            option: "subset",
            value: spec.algorithm.name().into(),
            expected: "unset with a keyed algorithm (each client's subset differs, so a key would land on different nodes)",
        });
    }
    let ids: Vec<&str> = active.iter().map(|i| &*nodes[*i as usize].id).collect();
    let members: Vec<(u32, f64)> = (crate::subset::subset_weighted(spec, &ids)?.into_iter())
        .map(|(k, fraction)| (active[k], fraction))
        .collect();
    let scaled = members.iter().any(|(_, f)| *f < 1.0).then(|| {
        let mut scaled = nodes.to_vec();
        for (i, fraction) in &members {
            let node = &mut scaled[*i as usize];
            let weight = f64::from(node.weight) * f64::from(APERTURE_SCALE) * fraction;
            node.weight = (libm::round(weight) as u64).clamp(1, u64::from(u32::MAX)) as u32;
        }
        scaled
    });
    let mut chosen: Vec<u32> = members.into_iter().map(|(i, _)| i).collect();
    chosen.sort_unstable();
    Ok((chosen, scaled))
}

/// The resolution of `aperture`'s edge fractions in scaled weights (see [`subset`]).
const APERTURE_SCALE: u32 = 1000;

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
        Table::build_routed(algorithm, options, &Routing::default(), nodes, loads)
    }

    /// [`Table::build_with_loads`] with what the caller says of localities (their weights,
    /// its own place): picks go priority level → locality → algorithm (see [`Routing`]).
    /// Nodes in one priority level with no locality routing pick exactly as without it.
    ///
    /// # Panics
    /// If `loads` and `nodes` differ in length.
    pub fn build_routed(
        algorithm: Algorithm,
        options: &Options,
        routing: &Routing,
        nodes: &[Node],
        loads: Vec<Arc<Load>>,
    ) -> Result<Table> {
        assert_eq!(loads.len(), nodes.len(), "one load per node");
        options.validate()?;
        routing.validate()?;
        validate_nodes(nodes)?;
        let mut active: Vec<u32> = (0..nodes.len() as u32)
            .filter(|i| nodes[*i as usize].weight > 0)
            .collect();
        let mut scaled = None;
        if let Some(spec) = options.subset_spec()? {
            (active, scaled) = subset(algorithm, &spec, nodes, &active)?;
        }
        let nodes = scaled.as_deref().unwrap_or(nodes);
        let mut policy = Policy::new(options);
        let plan = (!active.is_empty()).then(|| {
            match Layout::build(algorithm, options, routing, nodes, &active, &loads) {
                Some(layout) => {
                    policy.levels = layout.levels();
                    Plan::Routed(Box::new(layout))
                }
                None => Plan::Flat(Selector::build(
                    algorithm,
                    nodes,
                    active.clone(),
                    options,
                    &loads,
                )),
            }
        });
        let weights: Vec<u32> = nodes.iter().map(|n| n.weight).collect();
        let calm = if plan.is_none() || policy.balance_factor > 0 || algorithm.is_timed() {
            Calm::No
        } else if algorithm.is_keyed() {
            Calm::Keyed
        } else {
            Calm::Unkeyed
        };
        Ok(Table {
            algorithm,
            plan,
            loads,
            total_weight: active.iter().map(|i| u64::from(weights[*i as usize])).sum(),
            weights,
            active,
            policy,
            decay: options.decay,
            penalty: Penalty {
                base: options.failure_penalty,
                max_pause: options.max_retry_after,
            },
            error_utilization_penalty: options.error_utilization_penalty as f32,
            weight_expiration: options.weight_expiration_period,
            id: next_id(),
            calm,
            #[cfg(feature = "std")]
            retired: core::sync::atomic::AtomicBool::new(false),
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

    /// The plan and the key bytes, or why the table cannot pick.
    #[inline]
    fn ready<'k>(&self, key: Option<&'k [u8]>) -> Result<(&Plan, &'k [u8])> {
        let plan = self.plan.as_ref().ok_or(Error::NoNodes)?;
        match key {
            Some(key) => Ok((plan, key)),
            None if self.algorithm.is_keyed() => Err(Error::KeyRequired(self.algorithm.name())),
            None => Ok((plan, &[])),
        }
    }

    /// The plan, for a pick by a caller's hash: [`Error::NoNodes`] or
    /// [`Error::HashUnsupported`] when it cannot be made.
    fn takes(&self) -> Result<&Plan> {
        let plan = self.plan.as_ref().ok_or(Error::NoNodes)?;
        if !self.algorithm.takes_hash() {
            return Err(Error::HashUnsupported(self.algorithm.name()));
        }
        Ok(plan)
    }

    /// Whether a pick with this key can succeed: `Err(NoNodes)` or `Err(KeyRequired)` exactly
    /// when [`Table::pick`] would fail. Batch operations check it first, so an empty batch
    /// answers the same as a non-empty one.
    pub fn check(&self, key: Option<&[u8]>) -> Result<()> {
        self.ready(key).map(|_| ())
    }

    /// The indices of the nodes picks choose from (weight > 0, and in the client's subset
    /// with subsetting), in node order.
    pub fn active(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.active.iter().map(|i| *i as usize)
    }

    /// The chosen node's index in the list the table was built from. Unkeyed algorithms ignore
    /// `key`; keyed ones fail with [`Error::KeyRequired`] without it. `now_ns` is the caller's
    /// monotonic clock in nanoseconds, read only by algorithms that weigh latency (pass 0 if
    /// you have no clock: estimates then never decay).
    #[inline]
    pub fn pick(&self, key: Option<&[u8]>, state: &State, now_ns: u64) -> Result<usize> {
        self.pick_with(key, state, || now_ns)
    }

    /// [`Table::pick`] reading the caller's clock (`now_ns`) only when the pick needs it: the
    /// algorithm weighs latency, or some node may be ejected, down or warming. Whether health
    /// must be checked is read once, and that one reading decides both the clock and the
    /// check (reading it twice could see an event in between and check at time 0).
    #[inline]
    pub fn pick_with(
        &self,
        key: Option<&[u8]>,
        state: &State,
        now_ns: impl FnOnce() -> u64,
    ) -> Result<usize> {
        match self.calm_pick(key, state) {
            Some(index) => Ok(index as usize),
            None => self.pick_general(key, state, now_ns),
        }
    }

    /// The pick most balancers make most of the time, inlined into the caller: a flat
    /// plan's selector (or a routed plan's group, see [`Table::calm_routed`]) with no health
    /// to check, no bound, no clock and nothing to fail.
    /// `None` when the pick needs more (or fails): [`Table::pick_general`] makes it. Both
    /// give the same answer from the same state; this one only skips what would do nothing.
    #[inline(always)]
    fn calm_pick(&self, key: Option<&[u8]>, state: &State) -> Option<u32> {
        let key = match (self.calm, key) {
            (Calm::No, _) | (Calm::Keyed, None) => return None,
            (Calm::Keyed, Some(key)) => key,
            (Calm::Unkeyed, _) => &[],
        };
        if state.health.checking() {
            return None;
        }
        let ctx = self.bare_ctx(state);
        match self.plan.as_ref()? {
            Plan::Flat(selector) => Some(selector.pick(key, &ctx)),
            Plan::Routed(layout) => Some(self.calm_routed(layout, key, &ctx)),
        }
    }

    /// [`Table::calm_pick`] through a layout: the group [`Layout::choose`] gives with every
    /// node usable, then its algorithm's pick (what [`Table::pick_routed`] does when nothing
    /// is checked), out of line so that flat picks do not carry it.
    #[inline(never)]
    fn calm_routed(&self, layout: &Layout, key: &[u8], ctx: &Ctx<'_>) -> u32 {
        let choice = layout.choose_calm(ctx, self.level_hash(By::Key(key)));
        let group = layout.group(choice);
        group.selector.pick(key, &ctx.within(group, choice.panic))
    }

    /// [`Table::pick_with`] past [`Table::calm_pick`]: every case, out of line.
    #[inline(never)]
    fn pick_general(
        &self,
        key: Option<&[u8]>,
        state: &State,
        now_ns: impl FnOnce() -> u64,
    ) -> Result<usize> {
        let (plan, key) = self.ready(key)?;
        let ctx = self.ctx(state, now_ns);
        self.pick_by(plan, By::Key(key), &ctx).map(|i| i as usize)
    }

    /// A pick from `plan` in `ctx`.
    #[inline]
    fn pick_by(&self, plan: &Plan, by: By<'_>, ctx: &Ctx<'_>) -> Result<u32> {
        match plan {
            Plan::Flat(selector) => {
                if !ctx.checking() && self.policy.balance_factor == 0 {
                    return Ok(by.pick(selector, ctx));
                }
                let n = self.active.len();
                (self.pick_checked(selector, n, by, ctx)).or_else(|drawn| self.none_usable(drawn))
            }
            Plan::Routed(layout) => self.pick_routed(layout, by, ctx),
        }
    }

    /// A pick routed by priority level and locality: the chosen group's pick, or, when it has
    /// no usable node, the next group's in [`Layout::order`].
    #[inline]
    fn pick_routed(&self, layout: &Layout, by: By<'_>, ctx: &Ctx<'_>) -> Result<u32> {
        let choice = layout.choose(ctx, &self.weights, self.level_hash(by));
        let group = layout.group(choice);
        let within = ctx.within(group, choice.panic);
        if !within.checking() && self.policy.balance_factor == 0 {
            return Ok(by.pick(&group.selector, &within));
        }
        self.pick_in_order(layout, by, ctx, choice)
    }

    /// [`Table::pick_routed`] with health or bounds to check: group by group in
    /// [`Layout::order`] until one has a node to give.
    fn pick_in_order(
        &self,
        layout: &Layout,
        by: By<'_>,
        ctx: &Ctx<'_>,
        choice: crate::route::Choice,
    ) -> Result<u32> {
        let mut drawn = None;
        for (group, panic) in layout.order(ctx, &self.weights, choice) {
            let ctx = ctx.within(group, panic);
            if !ctx.checking() && self.policy.balance_factor == 0 {
                return Ok(by.pick(&group.selector, &ctx));
            }
            match self.pick_checked(&group.selector, group.members.len(), by, &ctx) {
                Ok(index) => return Ok(index),
                Err(fallback) => drawn = drawn.or(Some(fallback)),
            }
        }
        self.none_usable(drawn.unwrap_or_default())
    }

    /// What places a keyed pick on a priority level: the caller's hash, or the key's xxh3;
    /// `None` for unkeyed picks (drawn at random).
    fn level_hash<'k>(&self, by: By<'k>) -> impl FnOnce() -> Option<u64> + 'k {
        let keyed = self.algorithm.is_keyed();
        move || match by {
            By::Hash(hash) => Some(hash),
            By::Key(key) if keyed => Some(xxhash_rust::xxh3::xxh3_64(key)),
            By::Key(_) => None,
        }
    }

    /// This table's membership, as health reads it.
    #[inline]
    fn members(&self) -> Members<'_> {
        Members {
            loads: &self.loads,
            active: &self.active,
            weights: &self.weights,
            table: self.id,
        }
    }

    /// The context of one pick: reads [`Summary::checking`](crate::health) once, and the clock
    /// only when that or the algorithm needs it.
    #[inline]
    fn ctx<'a>(&'a self, state: &'a State, now_ns: impl FnOnce() -> u64) -> Ctx<'a> {
        let checking = state.health.checking();
        let now_ns = if checking || self.algorithm.is_timed() {
            now_ns()
        } else {
            0
        };
        let gate = if checking {
            (state.health).gate(now_ns, &self.members(), &self.policy)
        } else {
            Gate::Open
        };
        Ctx {
            state,
            loads: &self.loads,
            now_ns,
            gate,
            policy: &self.policy,
            position: None,
        }
    }

    /// Whether a pick needs the caller's clock: the algorithm weighs latency, or some node may
    /// be ejected, down or warming. Only a hint (an event can happen right after it answers):
    /// callers with a costly clock give [`Table::pick_with`] the clock instead, which reads it
    /// exactly when the pick uses it.
    #[inline]
    pub fn needs_clock(&self, state: &State) -> bool {
        self.algorithm.is_timed() || state.health.checking()
    }

    /// A pick among `selector`'s `n` nodes that honours health and bounded loads (see
    /// `health`): for the load-aware algorithms the selector checks its candidates; other
    /// unkeyed picks are redrawn until one is taken (a uniform or weighted draw conditioned on
    /// being usable stays uniform or weighted over the usable nodes; round robin skips); keyed
    /// picks walk the key's retry order, so only an unusable node's keys move, and they return
    /// with it. `Err` holds the node to fall back to when none may be chosen.
    fn pick_checked(
        &self,
        selector: &Selector,
        n: usize,
        by: By<'_>,
        ctx: &Ctx<'_>,
    ) -> Result<u32, u32> {
        if self.algorithm.is_keyed() || matches!(by, By::Hash(_)) {
            let first = by.pick(selector, ctx);
            return self.first_fitting(first, n, ctx, |limit, order| {
                by.attempts(selector, ctx, limit, order)
            });
        }
        if self.algorithm.health_aware() {
            let index = by.pick(selector, ctx);
            return if ctx.usable(index) {
                Ok(index)
            } else {
                Self::first_usable(selector, n, by, ctx, index)
            };
        }
        let mut index = 0;
        for _ in 0..REDRAWS {
            index = by.pick(selector, ctx);
            // Only a warming candidate takes a draw (so skipping an unusable node leaves the
            // seeded sequence of the others as it was).
            if ctx.accept(index, || ctx.rng.next()) {
                return Ok(index);
            }
        }
        Self::first_usable(selector, n, by, ctx, index)
    }

    /// The first node of the full retry order that may be chosen, or `Err(drawn)` when none
    /// may (see [`Table::none_usable`]).
    #[cold]
    fn first_usable(
        selector: &Selector,
        n: usize,
        by: By<'_>,
        ctx: &Ctx<'_>,
        drawn: u32,
    ) -> Result<u32, u32> {
        let mut order = Vec::new();
        by.attempts(selector, ctx, n, &mut order);
        order.into_iter().find(|i| ctx.usable(*i)).ok_or(drawn)
    }

    /// What a pick answers when no node may be chosen (possible only while panic is off for
    /// this pick): with `panic_threshold` 0 the pick fails with [`Error::NoUsableNodes`], as
    /// Envoy chooses no host; otherwise (a summary not yet rescanned into panic) it falls back
    /// to `fallback`, failing open.
    fn none_usable(&self, fallback: u32) -> Result<u32> {
        if self.policy.strict() {
            Err(Error::NoUsableNodes)
        } else {
            Ok(fallback)
        }
    }

    /// `first` if it is usable and under its bound (bounded loads), else the first such node
    /// of the retry order `attempts` writes (asked for a growing prefix of the `n` nodes, so a
    /// far node costs more only when the near ones do not fit); if none is under its bound,
    /// the first usable; if none is usable, `Err(first)`.
    fn first_fitting(
        &self,
        first: u32,
        n: usize,
        ctx: &Ctx<'_>,
        mut attempts: impl FnMut(usize, &mut Vec<u32>),
    ) -> Result<u32, u32> {
        let bound = self.load_bound(ctx);
        let fits = |i: u32| ctx.usable(i) && bound.is_none_or(|b| self.under(i, b, ctx));
        if fits(first) {
            return Ok(first);
        }
        let mut order = Vec::new();
        let mut limit = 4.min(n);
        loop {
            order.clear();
            attempts(limit, &mut order);
            if let Some(i) = order.iter().copied().find(|i| fits(*i)) {
                return Ok(i);
            }
            if limit >= n || order.len() < limit {
                break;
            }
            limit = (limit * 8).min(n);
        }
        order.into_iter().find(|i| ctx.usable(*i)).ok_or(first)
    }

    /// [`Table::pick_hash`] honouring health and bounded loads as keyed picks do: a hash whose
    /// node is unusable goes to the next usable node of its retry order (`attempts_hash`).
    pub fn pick_hash_at(&self, hash: u64, state: &State, now_ns: u64) -> Result<usize> {
        self.pick_hash_with(hash, state, || now_ns)
    }

    /// [`Table::pick_hash_at`] reading the clock only when needed (see [`Table::pick_with`]).
    pub fn pick_hash_with(
        &self,
        hash: u64,
        state: &State,
        now_ns: impl FnOnce() -> u64,
    ) -> Result<usize> {
        let plan = self.takes()?;
        let ctx = self.ctx(state, now_ns);
        self.pick_by(plan, By::Hash(hash), &ctx).map(|i| i as usize)
    }

    /// [`Table::attempts_hash`] with usable nodes first (each group in retry order); the first
    /// is what [`Table::pick_hash_at`] answers, bounded loads included.
    pub fn attempts_hash_at(
        &self,
        hash: u64,
        state: &State,
        now_ns: u64,
        limit: usize,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        self.attempts_hash_with(hash, state, || now_ns, limit, out)
    }

    /// [`Table::attempts_hash_at`] reading the clock only when needed.
    pub fn attempts_hash_with(
        &self,
        hash: u64,
        state: &State,
        now_ns: impl FnOnce() -> u64,
        limit: usize,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let plan = self.takes()?;
        if limit == 0 {
            return Ok(());
        }
        let ctx = self.ctx(state, now_ns);
        self.attempts_by(plan, By::Hash(hash), &ctx, limit, out)
    }

    /// Writes `first`, then the rest of `order`'s usable nodes, then (unless panic is off:
    /// `panic_threshold` 0) its unusable ones, each group in retry order, up to `limit`.
    fn usable_first(
        &self,
        first: u32,
        order: Vec<u32>,
        ctx: &Ctx<'_>,
        limit: usize,
        out: &mut Vec<u32>,
    ) {
        let rest = order.into_iter().filter(|i| *i != first);
        let (usable, unusable): (Vec<u32>, Vec<u32>) = rest.partition(|i| ctx.usable(*i));
        let unusable = if self.policy.strict() && ctx.checking() {
            Vec::new()
        } else {
            unusable
        };
        let all = core::iter::once(first).chain(usable).chain(unusable);
        out.extend(all.take(limit));
    }

    /// Bounded loads: total in-flight requests + 1 times the factor, or `None` when off.
    fn load_bound(&self, ctx: &Ctx<'_>) -> Option<Bound> {
        let factor = self.policy.balance_factor;
        (factor > 0).then(|| {
            let total = ctx.state.in_flight.load(Ordering::Relaxed) as u128;
            Bound {
                scaled: (total + 1) * u128::from(factor),
                weight: self.bound_weight(ctx),
            }
        })
    }

    /// The weight the bound is shared over: the usable nodes' (their caps must add up to the
    /// bound, or the overflow lands on one node: issue 19, finding 8), or every active node's
    /// while nothing is checked (all healthy, or panic: every node takes traffic).
    fn bound_weight(&self, ctx: &Ctx<'_>) -> u64 {
        if !ctx.checking() {
            return self.total_weight;
        }
        let members = self.members();
        if let Some(weight) = ctx.state.health.usable_weight(&members) {
            return weight;
        }
        // The summary describes another table (this is an older one) or was never computed
        // for this one: sum it here.
        (self.active.iter())
            .filter(|i| ctx.usable(**i))
            .map(|i| u64::from(self.weights[*i as usize]))
            .sum()
    }

    /// Whether node `i` is below `ceil(bound / 100 · weight share)`, i.e.
    /// `in_flight < ceil(bound · w / (100 · W))`, W being the weight the bound is shared over.
    /// For an integer `x`, `x < ceil(a / b)` exactly when `x · b < a`: compared so, without
    /// a 128-bit division (a software routine, most of a bounded pick's cost).
    fn under(&self, i: u32, bound: Bound, ctx: &Ctx<'_>) -> bool {
        let w = u128::from(self.weights[i as usize]);
        let total = 100 * u128::from(bound.weight.max(1));
        let in_flight = ctx.loads[i as usize].in_flight() as u128;
        in_flight.saturating_mul(total) < bound.scaled.saturating_mul(w)
    }

    /// A request starts on node `index` (in-flight + 1, and the balancer's total with bounded
    /// loads). Pair with [`Table::end`].
    pub fn start(&self, index: usize, state: &State) {
        self.loads[index].start();
        if self.policy.balance_factor > 0 {
            state.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        self.moved(index);
    }

    /// Whether the selector indexes in-flight counts (`least_connections`): it must be told
    /// of every change ([`Table::start`] and [`Table::end`] do).
    #[inline]
    pub(crate) fn tracks_load(&self) -> bool {
        self.algorithm == Algorithm::LeastConnections
    }

    /// Tells the selector that node `index`'s in-flight count changed.
    #[inline]
    pub(crate) fn moved(&self, index: usize) {
        if self.tracks_load() {
            self.selectors(|selector| selector.moved(index, &self.loads));
        }
    }

    /// Calls `f` on every structure of the table (one, or one per routed group).
    fn selectors(&self, mut f: impl FnMut(&Selector)) {
        match &self.plan {
            None => {}
            Some(Plan::Flat(selector)) => f(selector),
            Some(Plan::Routed(layout)) => layout.groups().for_each(|g| f(&g.selector)),
        }
    }

    /// Tells the selector that any count may have changed (this table was just published).
    #[cfg(feature = "std")]
    pub(crate) fn resync(&self) {
        if self.tracks_load() {
            self.selectors(|selector| selector.resync(&self.loads));
        }
    }

    /// Marks this table replaced by a newer one over the same loads.
    #[cfg(feature = "std")]
    pub(crate) fn retire(&self) {
        // SeqCst, paired with the load in `retired`: a request ending while the tables change
        // may still miss both this flag and the new table's `resync`; least_connections
        // tolerates that (see its module docs).
        self.retired
            .store(true, core::sync::atomic::Ordering::SeqCst);
    }

    /// Whether [`Table::retire`] was called.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn retired(&self) -> bool {
        self.retired.load(core::sync::atomic::Ordering::SeqCst)
    }

    /// A request started with [`Table::start`] ends at `now_ns`: `None` = cancelled (nothing
    /// counted), else its outcome is recorded and may eject the node (see [`Table::record`]).
    pub fn end(&self, index: usize, outcome: Option<Outcome>, state: &State, now_ns: u64) {
        let counted = self.end_counting(index, outcome, state, now_ns);
        self.act(&self.loads[index], counted, state, now_ns);
    }

    /// [`Table::end`] up to the health decision: what the outcome made the node due for
    /// (ejection, an overload pause, or nothing), which the caller decides against the
    /// membership current now ([`Table::act`] on the newest table), not the one the request
    /// began in.
    pub(crate) fn end_counting(
        &self,
        index: usize,
        outcome: Option<Outcome>,
        state: &State,
        now_ns: u64,
    ) -> Counted {
        self.loads[index].end(None, now_ns, self.decay);
        if self.policy.balance_factor > 0 {
            state.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        self.moved(index);
        match outcome {
            Some(outcome) => self.record_counting(index, outcome, state, now_ns),
            None => Counted::NOTHING,
        }
    }

    /// Records an outcome for node `index` at `now_ns` (requests, failures, latency) without
    /// touching in-flight. Enough consecutive errors or timeouts eject the node
    /// (`consecutive_failures`), an overloaded answer with a retry-after pauses it until then
    /// (`max_retry_after_ms`), both within `max_ejection_percent` of this table's nodes.
    /// Returns whether this outcome ejected or paused it.
    pub fn record(&self, index: usize, outcome: Outcome, state: &State, now_ns: u64) -> bool {
        let counted = self.record_counting(index, outcome, state, now_ns);
        self.act(&self.loads[index], counted, state, now_ns)
    }

    /// Takes node `index`'s load report received at `now_ns`: its A58 weight for
    /// `client_side_wrr` (kept with the node's load, so every algorithm accepts reports and a
    /// configuration can switch to one that reads them).
    ///
    /// A report that carries the named metric `rif` (requests in flight, [`crate::RIF_METRIC`])
    /// is also a Prequal probe answer, piggybacked: `prequal` takes it as one, with the latency
    /// of the metric `latency_ms` ([`crate::LATENCY_METRIC`]) or else `latency` (a lease's
    /// measured latency), and without either no probe.
    pub fn record_load(
        &self,
        index: usize,
        report: &LoadReport,
        latency: Option<core::time::Duration>,
        now_ns: u64,
    ) {
        let penalty = self.error_utilization_penalty;
        (self.loads[index].reported()).record(report, penalty, self.weight_expiration, now_ns);
        if let Some(rif) = report.named_metric(crate::RIF_METRIC) {
            let reported = (report.named_metric(crate::LATENCY_METRIC))
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map(|ms| core::time::Duration::from_secs_f64((ms / 1e3).min(1e9)));
            if let Some(latency) = reported.or(latency) {
                // A count, however it came: negative and NaN read as 0, huge ones saturate.
                let rif = rif.clamp(0.0, f64::from(u32::MAX)) as u32;
                self.offer_probe(index, rif, latency, now_ns);
            }
        }
    }

    /// [`Table::record`] up to the health decision (see [`Table::end_counting`]).
    pub(crate) fn record_counting(
        &self,
        index: usize,
        outcome: Outcome,
        state: &State,
        now_ns: u64,
    ) -> Counted {
        let load = &self.loads[index];
        load.record_with(outcome, now_ns, self.decay, self.penalty);
        (state.health).count(load, outcome, now_ns, &self.policy)
    }

    /// Carries out what an outcome made the node whose load is `load` due for, at `now_ns`,
    /// if it is one of this table's active nodes and this table's `max_ejection_percent`
    /// allows. Returns whether the node was ejected or paused.
    pub(crate) fn act(
        &self,
        load: &Arc<Load>,
        counted: Counted,
        state: &State,
        now_ns: u64,
    ) -> bool {
        let mut random = || state.rng.next();
        let members = self.members();
        (state.health).act(load, counted, now_ns, &members, &self.policy, &mut random)
    }

    /// Up to `count` distinct nodes to probe now (indices into the node list), drawn uniformly
    /// from the active nodes with `state`'s generator (a lazy Fisher-Yates prefix, so seeded
    /// runs replay); Prequal samples its probe targets so (`prequal`). Health is not consulted:
    /// probing a node that is out is harmless, and picks never choose it. Appends to `out`;
    /// [`Error::NoNodes`] (and `out` unchanged) when no node has weight > 0.
    pub fn probe_targets(&self, state: &State, count: usize, out: &mut Vec<u32>) -> Result<()> {
        if self.active.is_empty() {
            return Err(Error::NoNodes);
        }
        let n = self.active.len();
        let limit = count.min(n);
        if limit == 0 {
            return Ok(());
        }
        let first = state.rng.next();
        let rng = crate::rng::Draws::after(first);
        let start = out.len();
        let first = crate::rng::bounded(first, n);
        crate::select::sample::shuffle_prefix(n, limit, first, || rng.next(), out);
        for slot in &mut out[start..] {
            *slot = self.active[*slot as usize];
        }
        Ok(())
    }

    /// A probe answer from node `index` at `now_ns`: its requests in flight and its latency
    /// estimate, for `prequal`'s pool (every structure of the table holding the node takes
    /// it). Other algorithms ignore answers, so a configuration can switch algorithm; an
    /// index that is not an active node is ignored too.
    pub fn offer_probe(&self, index: usize, rif: u32, latency: core::time::Duration, now_ns: u64) {
        let Ok(index) = u32::try_from(index) else {
            return;
        };
        self.selectors(|selector| selector.offer(index, rif, latency, now_ns));
    }

    /// Takes the probes that picks made due since the last call (`prequal`: `probe_rate` per
    /// pick, fractions carried over, at most 64 kept due); always 0 for the other algorithms.
    /// Ask [`Table::probe_targets`] where to send them.
    pub fn probes_due(&self) -> usize {
        let mut due = 0;
        self.selectors(|selector| due += selector.take_probes_due());
        due
    }

    /// Marks node `index` down (`true`: no picks until marked up) or up (a warm-up starts
    /// at `now_ns` when slow start is on). No rebuild; weights are kept.
    pub fn set_down(&self, index: usize, down: bool, state: &State, now_ns: u64) {
        let now = crate::load::ticks(now_ns);
        self.loads[index].health().set_down(down, now);
        state.health.touch();
    }

    /// Starts node `index`'s warm-up at `now_ns` (slow start for a node that just joined);
    /// nothing when slow start is off.
    pub fn warm_up(&self, index: usize, state: &State, now_ns: u64) {
        if !self.policy.is_slow_start() {
            return;
        }
        self.loads[index]
            .health()
            .warm_from(crate::load::ticks(now_ns));
        state.health.touch();
    }

    /// Node `index`'s health at `now_ns`.
    pub fn status(&self, index: usize, now_ns: u64) -> Status {
        let now = crate::load::ticks(now_ns);
        self.loads[index].health().status(now, &self.policy)
    }

    /// Whether picks at `now_ns` ignore health because too few nodes are healthy (the
    /// summary is rescanned first if it is due).
    pub fn panic(&self, state: &State, now_ns: u64) -> bool {
        let ctx = self.ctx(state, || now_ns);
        if let Some(Plan::Routed(layout)) = &self.plan {
            if layout.levels() {
                return layout.panic(&ctx, &self.weights);
            }
        }
        state.health.checking() && state.health.panic()
    }

    /// Makes this table the one `state`'s health summary describes (call it when this table
    /// replaces another over the same state: a membership change) and marks the summary stale,
    /// so the next pick rescans. From then on picks through older tables check their
    /// candidates but no longer rescan, so they cannot overwrite what this membership's
    /// events set.
    pub fn touch_health(&self, state: &State) {
        state.health.adopt(self.id);
    }

    /// The node for a caller's 64-bit key hash — what `pick` answers for a key with that hash
    /// while every node is usable — for algorithms where [`Algorithm::takes_hash`];
    /// [`Error::HashUnsupported`] otherwise.
    pub fn pick_hash(&self, hash: u64) -> Result<usize> {
        let plan = self.takes()?;
        let selector = match plan {
            Plan::Flat(selector) => selector,
            Plan::Routed(layout) => &layout.calm_level(hash).selector,
        };
        Ok(selector.by_hash(hash).unwrap_or_default() as usize)
    }

    /// [`Table::attempts`] for a 64-bit key hash (see [`Table::pick_hash`]).
    pub fn attempts_hash(&self, hash: u64, limit: usize, out: &mut Vec<u32>) -> Result<()> {
        let plan = self.takes()?;
        if limit > 0 {
            let mut order = Vec::with_capacity(limit.min(64));
            match plan {
                Plan::Flat(selector) => {
                    selector.attempts_by_hash(hash, limit, &mut order);
                }
                Plan::Routed(layout) => {
                    let state = State::new(0);
                    let ctx = self.bare_ctx(&state);
                    self.routed_order(layout, By::Hash(hash), &ctx, limit, &mut order);
                }
            }
            out.extend_from_slice(&order);
        }
        Ok(())
    }

    /// A context with no health and no time, for the answers that ignore both.
    #[inline(always)]
    fn bare_ctx<'a>(&'a self, state: &'a State) -> Ctx<'a> {
        Ctx {
            state,
            loads: &self.loads,
            now_ns: 0,
            gate: Gate::Open,
            policy: &self.policy,
            position: None,
        }
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
        self.attempts_with(key, state, || now_ns, limit, out)
    }

    /// [`Table::attempts`] reading the clock only when needed (see [`Table::pick_with`]).
    /// With health to check, usable nodes come first (each group in retry order; with
    /// `panic_threshold` 0 unusable ones are left out, and none usable fails with
    /// [`Error::NoUsableNodes`] as a pick does); with bounded loads (keyed algorithms) the first
    /// is the node a pick would choose. With priority levels and localities the order walks
    /// the chosen group, the rest of its level, then the other levels (see `route`).
    pub fn attempts_with(
        &self,
        key: Option<&[u8]>,
        state: &State,
        now_ns: impl FnOnce() -> u64,
        limit: usize,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let (plan, key) = self.ready(key)?;
        if limit == 0 {
            return Ok(());
        }
        let ctx = self.ctx(state, now_ns);
        self.attempts_by(plan, By::Key(key), &ctx, limit, out)
    }

    /// The retry order of `by` from `plan`, usable nodes first (see [`Table::attempts_with`]).
    fn attempts_by(
        &self,
        plan: &Plan,
        by: By<'_>,
        ctx: &Ctx<'_>,
        limit: usize,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut order = Vec::with_capacity(limit.min(64));
        let keyed = self.algorithm.is_keyed() || matches!(by, By::Hash(_));
        let bounded = self.policy.balance_factor > 0 && keyed;
        let plain = !ctx.checking() && !bounded;
        match plan {
            Plan::Routed(layout) => self.routed_order(layout, by, ctx, limit, &mut order),
            Plan::Flat(selector) if plain => by.attempts(selector, ctx, limit, &mut order),
            // Widen the order until it holds `limit` usable nodes or every node.
            Plan::Flat(selector) => {
                self.widened(selector, self.active.len(), by, ctx, limit, &mut order);
            }
        }
        if plain {
            out.extend(order.into_iter().take(limit));
            return Ok(());
        }
        let first = match (bounded, plan) {
            (true, Plan::Routed(layout)) => self.pick_routed(layout, by, ctx)?,
            (true, Plan::Flat(selector)) => {
                (self.pick_checked(selector, self.active.len(), by, ctx))
                    .or_else(|first| self.none_usable(first))?
            }
            (false, _) => match order.iter().copied().find(|i| ctx.usable(*i)) {
                Some(i) => i,
                None => self.none_usable(order[0])?,
            },
        };
        self.usable_first(first, order, ctx, limit, out);
        Ok(())
    }

    /// `selector`'s retry order of `by` over its `n` nodes, asked for a growing prefix until
    /// it holds `limit` usable nodes or all `n`.
    fn widened(
        &self,
        selector: &Selector,
        n: usize,
        by: By<'_>,
        ctx: &Ctx<'_>,
        limit: usize,
        order: &mut Vec<u32>,
    ) {
        let mut want = limit.min(n);
        loop {
            order.clear();
            by.attempts(selector, ctx, want, order);
            let usable = order.iter().filter(|i| ctx.usable(**i)).count();
            if usable >= limit || order.len() < want || want >= n {
                break;
            }
            want = want.saturating_mul(4).min(n);
        }
    }

    /// The retry order across a layout's groups (see [`Layout::order`]): each group's order,
    /// without the nodes already listed, until `limit` usable nodes are listed.
    fn routed_order(
        &self,
        layout: &Layout,
        by: By<'_>,
        ctx: &Ctx<'_>,
        limit: usize,
        order: &mut Vec<u32>,
    ) {
        let choice = layout.choose(ctx, &self.weights, self.level_hash(by));
        // One bit per node: the nodes already listed.
        let mut listed = alloc::vec![0u64; self.loads.len().div_ceil(64)];
        let (mut usable, mut part) = (0, Vec::new());
        for (group, panic) in layout.order(ctx, &self.weights, choice) {
            let ctx = ctx.within(group, panic);
            // Enough for the usable nodes still wanted, however many of these are listed.
            let wanted = (limit - usable).saturating_add(order.len());
            self.widened(
                &group.selector,
                group.members.len(),
                by,
                &ctx,
                wanted,
                &mut part,
            );
            for i in part.drain(..) {
                let (word, bit) = (i as usize / 64, 1u64 << (i % 64));
                if listed[word] & bit == 0 {
                    listed[word] |= bit;
                    usable += usize::from(ctx.usable(i));
                    order.push(i);
                }
            }
            if usable >= limit {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::{format, vec};

    /// The calm path skips work, never changes an answer: for every algorithm, weighted and
    /// not, a table picking through `pick_with` (calm whenever it may be) and its twin
    /// forced through `pick_general` give the same sequence from the same seed, and fail
    /// alike without a key (two tables: least_connections keeps its rotation in its own).
    #[test]
    #[cfg_attr(miri, ignore)] // Builds every algorithm's table four times: hours interpreted.
    fn the_calm_path_answers_as_the_general_one() {
        for algorithm in Algorithm::ALL {
            for weighted in [false, true] {
                let nodes: Vec<Node> = (0..37)
                    .map(|i| {
                        Node::new(
                            format!("10.0.0.{i}:80"),
                            if weighted { i % 4 + 1 } else { 1 },
                        )
                    })
                    .collect();
                let table = Table::build(algorithm, &Options::default(), &nodes).unwrap();
                let twin = Table::build(algorithm, &Options::default(), &nodes).unwrap();
                same_picks(&table, &twin, &format!("{algorithm:?} weighted {weighted}"));
            }
        }
    }

    /// The same through a layout (issue 24): three priority levels over three zones, plain,
    /// with locality weights, and with zone-aware routing on a residual route (callers
    /// 50/30/20, the own zone short of its share), for every algorithm.
    #[test]
    #[cfg_attr(miri, ignore)] // Builds every algorithm's table six times per routing.
    fn the_calm_path_answers_as_the_general_one_through_a_layout() {
        let zones = ["r/a", "r/b", "r/c"];
        let nodes: Vec<Node> = (0..37)
            .map(|i: u32| {
                Node::new(format!("10.0.0.{i}:80"), i % 4 + 1)
                    .located(zones[i as usize % 3], i / 13)
            })
            .collect();
        let weighted = Routing {
            locality_weights: vec![("r/a".into(), 1), ("r/b".into(), 2), ("r/c".into(), 3)],
            ..Routing::default()
        };
        let zone_aware = Routing {
            local_locality: Some("r/a".into()),
            local_localities: vec![("r/a".into(), 50), ("r/b".into(), 30), ("r/c".into(), 20)],
            ..Routing::default()
        };
        for (name, routing) in [
            ("levels", Routing::default()),
            ("locality weights", weighted),
            ("zone-aware", zone_aware),
        ] {
            for algorithm in Algorithm::ALL {
                let build = || {
                    let loads = nodes.iter().map(|_| Arc::default()).collect();
                    Table::build_routed(algorithm, &Options::default(), &routing, &nodes, loads)
                        .unwrap()
                };
                let (table, twin) = (build(), build());
                assert!(matches!(table.plan, Some(Plan::Routed(_))), "{name}");
                same_picks(&table, &twin, &format!("{algorithm:?} {name}"));
            }
        }
    }

    /// 500 keyed and 500 unkeyed picks of `table` through `pick_with` equal its twin's
    /// through `pick_general`, from states of the same seed.
    fn same_picks(table: &Table, twin: &Table, what: &str) {
        let (calm, general) = (State::new(7), State::new(7));
        for i in 0..500u32 {
            let key = format!("key-{i}");
            let key = Some(key.as_bytes());
            let a = table.pick_with(key, &calm, || 0);
            let b = twin.pick_general(key, &general, || 0);
            assert_eq!(a, b, "{what}, pick {i}");
            let a = table.pick_with(None, &calm, || 0);
            let b = twin.pick_general(None, &general, || 0);
            assert_eq!(a, b, "{what}, unkeyed pick {i}");
        }
    }
}
