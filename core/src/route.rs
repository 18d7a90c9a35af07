//! Routing across priority levels and localities: the group of nodes a pick draws from, before
//! the balancer's algorithm picks inside it.
//!
//! A pick goes priority → locality → algorithm, as Envoy's `ZoneAwareLoadBalancerBase` does:
//!
//! 1. **Priority level.** Each level's share of the traffic follows its health
//!    ([`crate::priority::Loads`]: `min(100, overprovisioning_factor × usable / nodes)`,
//!    spilled to the next level, panic per level). With every node usable, level 0 takes it all.
//!    An unkeyed pick draws the level at random; a keyed one by the key's hash (xxh3 of the key,
//!    or the caller's hash for `pick_hash`), so a key stays on its level while the loads hold,
//!    as Envoy's `chooseHostSet(context, hash)` does for the hashing balancers.
//! 2. **Locality** (unkeyed algorithms only, as in Envoy, where the hashing balancers build one
//!    structure per priority): with locality weights, Envoy's EDF schedule over each locality's
//!    weight × availability ([`crate::locality`]); else, with the caller's own locality and its
//!    fleet's spread, zone-aware routing at priority 0 ([`ZoneRouting`]); else the whole level.
//! 3. **Node**: the balancer's algorithm over that group's nodes, health checked as everywhere.
//!    A group with no usable node (health changed since the routing was computed) gives way to
//!    its whole level, then to the other levels in priority order.
//!
//! Retry orders (`attempts`, the request loop) walk the same way: the chosen group's order,
//! then the rest of its level, then the other levels, lowest priority number first.
//!
//! The routing depends on health only through counts, so it is computed when health changes,
//! not per pick: with every node healthy it is fixed at build (`calm`); while the health
//! summary is checking, it is recomputed after each of the summary's scans (`live`), which
//! follow every event and every scheduled change. The values are atomics: a pick racing a
//! recomputation may read some old and some new, each of them a valid answer of its own.
//!
//! Round robin and smooth WRR keep one position per group (a group's rotation must not skip
//! with another group's picks). Bounded loads (`hash_balance_factor`) size their caps over the
//! whole balancer, not the level.
//!
//! Sources: envoyproxy/envoy `source/extensions/load_balancing_policies/common/
//! load_balancer_impl.cc` (`LoadBalancerBase::chooseHostSet`,
//! `ZoneAwareLoadBalancerBase::hostSourceToUse`: panic first, then locality weights, then
//! zone-aware routing at priority 0 only, `routing_enabled` as a per-pick percentage).

use crate::load::Load;
use crate::locality::{Edf, LocalityHosts, ZoneInputs, ZoneRouting};
use crate::node::{Node, locality_key, validate_locality};
use crate::priority::{Level, Loads};
use crate::select::{Ctx, Selector};
use crate::sync::AtomicCounter;
use crate::{Algorithm, Options, Result};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// What the caller tells a balancer about localities: their weights, and where it runs itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routing {
    /// Locality-weighted balancing, on when not empty: each locality's weight. A locality left
    /// out has weight 0 and takes traffic only when no listed one can (Envoy's rule for
    /// `locality_weighted_lb_config`).
    pub locality_weights: Vec<(Box<str>, u32)>,
    /// The caller's own locality: with `local_localities`, zone-aware routing.
    pub local_locality: Option<Box<str>>,
    /// The caller's fleet: how many instances run in each locality (Envoy's local cluster).
    pub local_localities: Vec<(Box<str>, u64)>,
}

impl Routing {
    /// Checks every locality named.
    pub fn validate(&self) -> Result<()> {
        let named = (self.locality_weights.iter().map(|(l, _)| l))
            .chain(self.local_localities.iter().map(|(l, _)| l))
            .chain(self.local_locality.iter());
        for locality in named {
            validate_locality(locality)?;
        }
        Ok(())
    }

    fn weighted(&self) -> bool {
        !self.locality_weights.is_empty()
    }

    fn zone_aware(&self) -> bool {
        self.local_locality.is_some() && !self.local_localities.is_empty()
    }

    fn weight(&self, locality: &str) -> u32 {
        (self.locality_weights.iter())
            .filter(|(l, _)| locality_key(l) == locality)
            .map(|(_, w)| *w)
            .next_back()
            .unwrap_or(0)
    }

    fn local(&self, locality: &str) -> u64 {
        (self.local_localities.iter())
            .filter(|(l, _)| locality_key(l) == locality)
            .map(|(_, n)| *n)
            .sum()
    }
}

/// Some nodes of a table, with the algorithm's structure over them.
pub(crate) struct Group {
    pub(crate) selector: Selector,
    /// The group's active nodes (indices into the node list), in insertion order.
    pub(crate) members: Vec<u32>,
    /// The group's own round-robin position.
    pub(crate) position: AtomicCounter,
}

impl Group {
    fn build(
        algorithm: Algorithm,
        nodes: &[Node],
        members: Vec<u32>,
        options: &Options,
        loads: &[Arc<Load>],
    ) -> Group {
        Group {
            selector: Selector::build(algorithm, nodes, members.clone(), options, loads),
            members,
            position: AtomicCounter::new(0),
        }
    }
}

/// One locality of a level.
struct Place {
    weight: u32,
    /// Its active nodes.
    members: Vec<u32>,
    /// Built when localities route (unkeyed algorithms with weights or zone-aware routing).
    group: Option<Group>,
}

/// One priority level.
struct Tier {
    priority: u32,
    all: Group,
    /// Its localities, in order of first appearance; with zone-aware routing at priority 0,
    /// the caller's own first.
    places: Vec<Place>,
}

/// How localities are chosen within a level.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Flat,
    Weighted,
    ZoneAware,
}

/// One level's nodes while a layout is built: all of them, and by locality in order of first
/// appearance (with each locality's place in that list).
#[derive(Default)]
struct Sorting<'a> {
    members: Vec<u32>,
    places: Vec<(&'a str, Vec<u32>)>,
    index: BTreeMap<&'a str, usize>,
}

/// Zone-aware routing's fixed inputs: the caller's fleet aligned with priority 0's places.
struct Zone {
    local: Vec<u64>,
    local_total: u64,
    local_localities: usize,
    local_own: u64,
    upstream_has_local: bool,
    min_cluster_size: u64,
    enabled: u32,
    by_weight: bool,
}

/// The routing decisions that depend on health (see the module docs).
struct Routes {
    /// Per level: its share of the traffic in percent, and `PANIC` when in panic.
    tiers: Vec<AtomicU32>,
    /// Per level and locality: its usable nodes.
    eligible: Vec<Vec<AtomicU32>>,
    /// Zone-aware routing at priority 0: `NO_ZONE`, `DIRECT` or `RESIDUAL`.
    zone: AtomicU32,
    /// In 1/10000ths (so 32 bits suffice, on targets without 64-bit atomics too).
    local_percent: AtomicU32,
    residual: Vec<AtomicU32>,
    /// Locality-weighted balancing: per level, the locality of each of the first `SCHEDULE`
    /// picks of Envoy's EDF schedule (`NONE`: no locality has weight; empty in other modes).
    schedule: Vec<Vec<AtomicU32>>,
}

/// Picks of a level's EDF schedule computed ahead; the rotation starts over after them.
const SCHEDULE: usize = 1024;
const NONE: u32 = u32::MAX;

const PANIC: u32 = 1 << 8;
const NO_ZONE: u32 = 0;
const DIRECT: u32 = 1;
const RESIDUAL: u32 = 2;

/// Which group a pick draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Choice {
    pub(crate) tier: usize,
    pub(crate) place: Option<usize>,
    /// The level is in panic: pick among all its nodes regardless of health.
    pub(crate) panic: bool,
}

/// A table's nodes by priority level and locality (see the module docs).
pub(crate) struct Layout {
    tiers: Vec<Tier>,
    mode: Mode,
    factor: u32,
    threshold: u32,
    zone: Option<Zone>,
    /// The routing with every node usable.
    calm: Routes,
    /// The routing as of the health summary's scan `stamp`.
    live: Routes,
    stamp: AtomicUsize,
    refreshing: AtomicBool,
    /// Locality-weighted picks made: the EDF schedule's position.
    rotation: AtomicCounter,
    /// The choice of every pick while every node is usable, when it is always the same (one
    /// level's whole group, or zone-aware routing that sends everything to the own zone).
    calm_choice: Option<Choice>,
}

impl Layout {
    /// The layout of `active` (indices of `nodes` with weight > 0, not empty), or `None` when
    /// nothing routes: one priority level and no locality routing (every pick is the
    /// algorithm's over all nodes, the nodes' localities and priorities unused).
    pub(crate) fn build(
        algorithm: Algorithm,
        options: &Options,
        routing: &Routing,
        nodes: &[Node],
        active: &[u32],
        loads: &[Arc<Load>],
    ) -> Option<Layout> {
        let mode = match () {
            _ if algorithm.is_keyed() => Mode::Flat,
            _ if routing.weighted() => Mode::Weighted,
            _ if routing.zone_aware() => Mode::ZoneAware,
            _ => Mode::Flat,
        };
        // The active nodes by priority, then by locality in order of first appearance: one
        // pass, O(n log) however many levels and localities there are.
        let mut levels: BTreeMap<u32, Sorting<'_>> = BTreeMap::new();
        for &i in active {
            let node = &nodes[i as usize];
            let level = levels.entry(node.priority).or_default();
            level.members.push(i);
            let name = locality_key(&node.locality);
            let places = &mut level.places;
            let at = *level.index.entry(name).or_insert_with(|| {
                places.push((name, Vec::new()));
                places.len() - 1
            });
            places[at].1.push(i);
        }
        if levels.len() < 2 && mode == Mode::Flat {
            return None;
        }
        let local = routing.local_locality.as_deref().map(locality_key);
        let tiers: Vec<Tier> = (levels.into_iter())
            .map(|(priority, level)| {
                let Sorting {
                    members,
                    mut places,
                    ..
                } = level;
                if mode == Mode::ZoneAware && priority == 0 {
                    if let Some(at) = places.iter().position(|(n, _)| Some(*n) == local) {
                        let own = places.remove(at);
                        places.insert(0, own);
                    }
                }
                let places = (places.into_iter())
                    .map(|(name, members)| Place {
                        weight: routing.weight(name),
                        group: (mode != Mode::Flat).then(|| {
                            Group::build(algorithm, nodes, members.clone(), options, loads)
                        }),
                        members,
                    })
                    .collect();
                Tier {
                    priority,
                    all: Group::build(algorithm, nodes, members, options, loads),
                    places,
                }
            })
            .collect();
        let zone = (mode == Mode::ZoneAware && tiers[0].priority == 0).then(|| {
            let own = local.unwrap_or_default();
            let upstream_has_local = (tiers[0].places.first())
                .is_some_and(|p| locality_key(&nodes[p.members[0] as usize].locality) == own);
            let local = (tiers[0].places.iter())
                .map(|p| routing.local(locality_key(&nodes[p.members[0] as usize].locality)))
                .collect();
            let mut spread: Vec<&str> = Vec::new();
            for (l, n) in &routing.local_localities {
                if *n > 0 && !spread.contains(&locality_key(l)) {
                    spread.push(locality_key(l));
                }
            }
            Zone {
                local,
                local_total: routing.local_localities.iter().map(|(_, n)| *n).sum(),
                local_localities: spread.len(),
                local_own: routing.local(own),
                upstream_has_local,
                min_cluster_size: options.zone_aware_min_cluster_size,
                enabled: options.zone_aware_routing_enabled,
                by_weight: options.zone_aware_by_weight == 1,
            }
        });
        let layout = Layout {
            calm: Routes::new(&tiers, mode),
            live: Routes::new(&tiers, mode),
            tiers,
            mode,
            factor: options.overprovisioning_factor,
            threshold: options.panic_threshold,
            zone,
            stamp: AtomicUsize::new(usize::MAX),
            refreshing: AtomicBool::new(false),
            rotation: AtomicCounter::new(0),
            calm_choice: None,
        };
        let mut layout = layout;
        layout.fill(&layout.calm, nodes_weights(nodes), |_| true);
        layout.calm_choice = layout.fixed_choice();
        Some(layout)
    }

    /// The choice every pick makes while every node is usable, if it needs no draw.
    fn fixed_choice(&self) -> Option<Choice> {
        let calm = &self.calm;
        let load0 = calm.tiers[0].load(Ordering::Relaxed);
        if load0 & PANIC != 0 || load0 < 100 {
            return None;
        }
        let place = match self.mode {
            Mode::Flat => None,
            Mode::Weighted => return None,
            Mode::ZoneAware => match (calm.zone.load(Ordering::Relaxed), &self.zone) {
                (NO_ZONE, _) => None,
                (DIRECT, Some(zone)) if zone.enabled >= 100 && self.tiers[0].priority == 0 => {
                    Some(0)
                }
                _ => return None,
            },
        };
        Some(Choice {
            tier: 0,
            place,
            panic: false,
        })
    }

    /// The group a choice picks from first.
    #[inline]
    pub(crate) fn group(&self, choice: Choice) -> &Group {
        let tier = &self.tiers[choice.tier];
        match choice.place.and_then(|p| tier.places[p].group.as_ref()) {
            Some(group) => group,
            None => &tier.all,
        }
    }

    /// The whole level a caller's hash goes to while every node is usable.
    pub(crate) fn calm_level(&self, hash: u64) -> &Group {
        let load = |t: usize| self.calm.tiers[t].load(Ordering::Relaxed) & !PANIC;
        let point = (hash % 100 + 1) as u32;
        let mut sum = 0;
        for (t, tier) in self.tiers.iter().enumerate() {
            sum += load(t);
            if point <= sum {
                return &tier.all;
            }
        }
        &self.tiers[0].all
    }

    /// Whether panic is decided per level here rather than by the health summary.
    pub(crate) fn levels(&self) -> bool {
        self.tiers.len() > 1
    }

    /// Every group's structure, for `moved` and `resync`.
    pub(crate) fn groups(&self) -> impl Iterator<Item = &Group> {
        self.tiers.iter().flat_map(|t| {
            core::iter::once(&t.all).chain(t.places.iter().filter_map(|p| p.group.as_ref()))
        })
    }

    /// Computes `routes` with `usable` telling which nodes count, `weights` each node's weight.
    fn fill(&self, routes: &Routes, weights: impl Fn(u32) -> u32, usable: impl Fn(u32) -> bool) {
        let levels: Vec<Level> = (self.tiers.iter())
            .map(|t| Level {
                overprovisioning_factor: self.factor,
                ..Level::new(
                    t.all.members.len() as u32,
                    t.all.members.iter().filter(|i| usable(**i)).count() as u32,
                )
            })
            .collect();
        let loads = Loads::compute(&levels, self.threshold);
        for (t, tier) in self.tiers.iter().enumerate() {
            let panic = if loads.panic[t] { PANIC } else { 0 };
            routes.tiers[t].store(loads.healthy[t] | panic, Ordering::Relaxed);
            for (p, place) in tier.places.iter().enumerate() {
                let n = place.members.iter().filter(|i| usable(**i)).count();
                routes.eligible[t][p].store(n as u32, Ordering::Relaxed);
            }
            if let Some(schedule) = routes.schedule.get(t).filter(|s| !s.is_empty()) {
                self.schedule(routes, t, schedule);
            }
        }
        let Some(zone) = &self.zone else { return };
        let upstream: Vec<u64> = (self.tiers[0].places.iter())
            .map(|p| {
                let usable = p.members.iter().filter(|i| usable(**i));
                if zone.by_weight {
                    usable.map(|i| u64::from(weights(*i))).sum()
                } else {
                    usable.count() as u64
                }
            })
            .collect();
        let routing = ZoneRouting::new(&ZoneInputs {
            upstream: &upstream,
            upstream_has_local: zone.upstream_has_local,
            local: &zone.local,
            local_total: zone.local_total,
            local_localities: zone.local_localities,
            local_own: zone.local_own,
            min_cluster_size: zone.min_cluster_size,
            force_direct: false,
        });
        match routing {
            None => routes.zone.store(NO_ZONE, Ordering::Relaxed),
            Some(ZoneRouting::Direct) => routes.zone.store(DIRECT, Ordering::Relaxed),
            Some(ZoneRouting::Residual {
                local_percent,
                residual,
            }) => {
                // Shares of 10000: they fit 32 bits.
                let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                routes
                    .local_percent
                    .store(narrow(local_percent), Ordering::Relaxed);
                for (out, sum) in routes.residual.iter().zip(residual) {
                    out.store(narrow(sum), Ordering::Relaxed);
                }
                routes.zone.store(RESIDUAL, Ordering::Relaxed);
            }
        }
    }

    /// The routes for this pick: the calm ones when nothing is checked, else the live ones,
    /// recomputed first if the health summary scanned since (one pick recomputes; the others
    /// go on with what is there).
    fn routes<'a>(&'a self, ctx: &Ctx<'_>, weights: &[u32]) -> &'a Routes {
        if !ctx.checking() {
            return &self.calm;
        }
        let scans = ctx.state.health.scans();
        if self.stamp.load(Ordering::Acquire) != scans
            && self
                .refreshing
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            self.fill(&self.live, |i| weights[i as usize], |i| ctx.usable(i));
            self.stamp.store(scans, Ordering::Release);
            self.refreshing.store(false, Ordering::Release);
        }
        if self.stamp.load(Ordering::Acquire) == usize::MAX {
            return &self.calm; // another pick is computing the first live routes
        }
        &self.live
    }

    /// The group a pick draws from. `hash` places keyed picks (and any pick, when given);
    /// without it the level is drawn at random.
    #[inline]
    pub(crate) fn choose(
        &self,
        ctx: &Ctx<'_>,
        weights: &[u32],
        hash: impl FnOnce() -> Option<u64>,
    ) -> Choice {
        if let (false, Some(choice)) = (ctx.checking(), self.calm_choice) {
            return choice;
        }
        self.choose_in(self.routes(ctx, weights), ctx, hash)
    }

    /// [`Layout::choose`] when no node is being checked (`ctx.checking()` is false): the
    /// same choice, without asking again.
    #[inline]
    pub(crate) fn choose_calm(&self, ctx: &Ctx<'_>, hash: impl FnOnce() -> Option<u64>) -> Choice {
        match self.calm_choice {
            Some(choice) => choice,
            None => self.choose_in(&self.calm, ctx, hash),
        }
    }

    /// The choice `routes` give.
    #[inline(always)]
    fn choose_in(
        &self,
        routes: &Routes,
        ctx: &Ctx<'_>,
        hash: impl FnOnce() -> Option<u64>,
    ) -> Choice {
        let tier = self.choose_tier(routes, ctx, hash);
        let panic = routes.tiers[tier].load(Ordering::Relaxed) & PANIC != 0;
        let place = match self.mode {
            _ if panic => None,
            Mode::Flat => None,
            Mode::Weighted => self.weighted_place(routes, tier),
            Mode::ZoneAware => self.zone_place(routes, tier, ctx),
        };
        Choice { tier, place, panic }
    }

    #[inline(always)]
    fn choose_tier(
        &self,
        routes: &Routes,
        ctx: &Ctx<'_>,
        hash: impl FnOnce() -> Option<u64>,
    ) -> usize {
        let load = |t: usize| routes.tiers[t].load(Ordering::Relaxed) & !PANIC;
        if self.tiers.len() == 1 || load(0) >= 100 {
            return 0;
        }
        // Envoy's `choosePriority`: `hash % 100 + 1` against the loads' running sum.
        let point = (hash().unwrap_or_else(|| ctx.rng.next()) % 100 + 1) as u32;
        let mut sum = 0;
        for t in 0..self.tiers.len() {
            sum += load(t);
            if point <= sum {
                return t;
            }
        }
        0
    }

    /// Writes level `t`'s EDF schedule over its localities' effective weights (Envoy's
    /// `LocalityWrr::rebuildLocalityScheduler`: `createWithPicks` over the localities of
    /// positive effective weight, then `pickAndAdd` pick by pick).
    fn schedule(&self, routes: &Routes, t: usize, schedule: &[AtomicU32]) {
        let places = &self.tiers[t].places;
        let entries: Vec<(usize, f64)> = (places.iter().enumerate())
            .map(|(p, place)| {
                let hosts = LocalityHosts {
                    weight: place.weight,
                    hosts: place.members.len() as u32,
                    eligible: routes.eligible[t][p].load(Ordering::Relaxed),
                    excluded: 0,
                };
                (p, hosts.effective_weight(self.factor))
            })
            .filter(|(_, w)| *w > 0.0)
            .collect();
        let mut edf = (!entries.is_empty()).then(|| Edf::with_picks(&entries, 0));
        for slot in schedule {
            let place = edf.as_mut().and_then(Edf::pick).map_or(NONE, |p| p as u32);
            slot.store(place, Ordering::Relaxed);
        }
    }

    /// Envoy's `chooseHealthyLocality`: the level's EDF schedule at this pick's place in the
    /// rotation; `None` when no locality has any effective weight (then the whole level).
    #[inline(always)]
    fn weighted_place(&self, routes: &Routes, tier: usize) -> Option<usize> {
        let at = crate::sync::next_position(&self.rotation) as usize % SCHEDULE;
        match routes.schedule[tier][at].load(Ordering::Relaxed) {
            NONE => None,
            place => Some(place as usize),
        }
    }

    /// Envoy's `tryChooseLocalLocalityHosts` at priority 0, for `routing_enabled` percent of
    /// the picks.
    #[inline(always)]
    fn zone_place(&self, routes: &Routes, tier: usize, ctx: &Ctx<'_>) -> Option<usize> {
        let zone = self.zone.as_ref()?;
        if self.tiers[tier].priority != 0 {
            return None;
        }
        if zone.enabled < 100 && ctx.rng.next() % 100 >= u64::from(zone.enabled) {
            return None;
        }
        match routes.zone.load(Ordering::Relaxed) {
            DIRECT => Some(0),
            RESIDUAL => {
                // One draw for both of Envoy's: its low half decides local or not, its high
                // half which other locality (two independent 32-bit draws).
                let draw = ctx.rng.next();
                let (low, high) = (draw & u64::from(u32::MAX), draw >> 32);
                if low % 10_000 < u64::from(routes.local_percent.load(Ordering::Relaxed)) {
                    return Some(0);
                }
                let last = u64::from(routes.residual.last()?.load(Ordering::Relaxed));
                if last == 0 {
                    return Some((high % routes.residual.len() as u64) as usize);
                }
                let threshold = high % last;
                (routes.residual.iter())
                    .position(|sum| threshold < u64::from(sum.load(Ordering::Relaxed)))
            }
            _ => None,
        }
    }

    /// The groups a pick tries in turn, each with whether its level is in panic: the chosen
    /// one, the rest of its level, the other levels in priority order.
    pub(crate) fn order<'a>(
        &'a self,
        ctx: &Ctx<'_>,
        weights: &[u32],
        choice: Choice,
    ) -> impl Iterator<Item = (&'a Group, bool)> + 'a {
        let routes = self.routes(ctx, weights);
        let tier = &self.tiers[choice.tier];
        let chosen = (choice.place)
            .and_then(|p| tier.places[p].group.as_ref())
            .into_iter()
            .chain(core::iter::once(&tier.all))
            .map(move |g| (g, choice.panic));
        let rest = (self.tiers.iter().enumerate())
            .filter(move |(t, _)| *t != choice.tier)
            .map(move |(t, tier)| {
                (
                    &tier.all,
                    routes.tiers[t].load(Ordering::Relaxed) & PANIC != 0,
                )
            });
        chosen.chain(rest)
    }

    /// Whether picks ignore health in every level that takes traffic.
    pub(crate) fn panic(&self, ctx: &Ctx<'_>, weights: &[u32]) -> bool {
        let routes = self.routes(ctx, weights);
        let mut loaded = (routes.tiers.iter())
            .map(|t| t.load(Ordering::Relaxed))
            .filter(|t| t & !PANIC > 0)
            .peekable();
        loaded.peek().is_some() && loaded.all(|t| t & PANIC != 0)
    }
}

/// Each node's weight, by index.
fn nodes_weights(nodes: &[Node]) -> impl Fn(u32) -> u32 + '_ {
    |i| nodes[i as usize].weight
}

impl Routes {
    fn new(tiers: &[Tier], mode: Mode) -> Routes {
        Routes {
            tiers: tiers.iter().map(|_| AtomicU32::new(0)).collect(),
            eligible: (tiers.iter())
                .map(|t| t.places.iter().map(|_| AtomicU32::new(0)).collect())
                .collect(),
            zone: AtomicU32::new(NO_ZONE),
            local_percent: AtomicU32::new(0),
            residual: (tiers.first().into_iter())
                .flat_map(|t| t.places.iter().map(|_| AtomicU32::new(0)))
                .collect(),
            schedule: (tiers.iter())
                .map(|_| match mode {
                    Mode::Weighted => (0..SCHEDULE).map(|_| AtomicU32::new(NONE)).collect(),
                    _ => Vec::new(),
                })
                .collect(),
        }
    }
}

/// Checks the nodes' localities.
pub(crate) fn validate_localities(nodes: &[Node]) -> Result<()> {
    nodes
        .iter()
        .filter(|n| !n.locality.is_empty())
        .try_for_each(|n| validate_locality(&n.locality))
}
