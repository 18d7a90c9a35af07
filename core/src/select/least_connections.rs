//! `least_connections`: nginx's `least_conn`.
//!
//! Source: nginx `src/http/modules/ngx_http_upstream_least_conn_module.c`,
//! `ngx_http_upstream_get_least_conn_peer`: scan every peer for the smallest
//! `conns / weight` (compared as `a.conns · b.weight < b.conns · a.weight`, in integers); if
//! several peers tie, choose among them — from the first tied peer on, in configuration order
//! — by smooth weighted round robin: each tied peer's `current_weight` grows by its weight, the
//! largest (first on ties) wins and loses the sum of the tied weights. A single thread sees
//! exactly nginx's choices (tested against a transcription of that function, and against the
//! O(n) scan this module was before its index, kept as `reference`).
//!
//! Here `conns` is the node's in-flight count from leases (`Balancer::acquire`); a plain `pick`
//! starts no request. nginx's `effective_weight` (lowered by `max_fails`) is the weight here:
//! failures are the health layer's business. The tie-break's current weights start at 0 with
//! each table (nginx also resets them when its configuration is reloaded).
//!
//! # The index (`std`, up to 16 distinct weights)
//!
//! A pick costs O(log n + d), d the number of distinct weights, instead of O(n). Nodes with
//! the same ratio `in_flight / weight` form a *class*. nginx adds each member's weight to its
//! current weight on every pick that ties in the least class, which is O(ties); instead each
//! class keeps one `offset`, the number of those picks, and each node a `key`, its current
//! weight being `key + weight × offset` of its class. A pick with two or more tied members
//! adds 1 to the offset (every member + its weight at once) and takes the class's total
//! weight from the winner's key alone; a pick without a tie changes nothing, as in nginx.
//!
//! Among nodes of one weight, the ratio orders as the count and the current weight (in one
//! class) as the key, so nginx's winner among them — least loaded, largest current weight,
//! first in configuration order on ties — is the first node in the order *(in-flight
//! ascending, key descending, position ascending)*: the root of a tournament (segment) tree
//! over that weight's nodes, whose leaves hold `(in-flight as the index saw it, key,
//! position)` packed into one `u128`. A pick compares the d roots: the least ratio, then among
//! the roots in that class the largest `key + weight × (offset + 1)`, then the first position
//! — nginx's choice, since each tree's root is already its weight's best in that class. A
//! node whose count changes moves to another class, its current weight carried over
//! (`key' = current - weight × offset(new)`), and its leaf-to-root path is recomputed,
//! O(log n). Offsets matter only within a class, so a class made later may start at 0, and
//! emptied classes are dropped in bulk once they outnumber the nodes; keys are rebased (key =
//! current weight, offsets 0; O(n)) when an offset reaches 2^61 / max weight, so nothing
//! overflows. So the sequence of picks is the scan's, pick for pick, for any sequence of
//! picks, acquires and finishes; the property tests in this file check it against `reference`
//! over random sequences of leases, weights (0 included), health states, warm-ups and
//! rebases.
//!
//! Who tells the index: [`Table::start`](crate::Table::start) and `Table::end` (so leases)
//! after changing the count; a lease ending on an older membership's table also tells the
//! current one (`Balancer`), and a newly published table rereads every count once
//! (`resync`). The index reads the count itself when told, under its lock, so the last one
//! told has read every change made before it: with no request in flight being changed, the
//! index equals the counts. A pick also checks its winner's count and, if it differs (a
//! count changed without telling, through `Load::start` directly or in the window of a
//! membership change), moves the node and picks again (up to four times): a node never wins on a count lower
//! than its own. A node whose count *fell* untold is seen as busier than it is until its
//! count next changes through the table.
//!
//! Concurrency: the index (tree, keys, class offsets) sits behind one mutex, held for
//! O(log n) per pick and per count change; the counts themselves stay lock-free atomics.
//! Under contention picks are serialised in lock order, so smooth WRR stays exact in that
//! order. Memory: per distinct weight, a tree of twice its node count rounded up to a power of
//! two, 16 bytes a slot (4 MiB at 100,000 equal weights). A pick never reads out of bounds (positions come from the tree built for this
//! table) and never chooses an unusable node: the index is used only while no node may be
//! unusable or warming (`Ctx::checking` false).
//!
//! Fallbacks, exact and O(n) per pick: with health to check (a node ejected, down, paused or
//! warming: `Ctx::checking`), the scan below runs with the index's current weights under its
//! lock, then rebuilds the trees (O(n)) if a tie moved current weights; with more than 16
//! distinct weights, or without `std` (no lock), the scan keeps one atomic current weight per
//! node, updated without a lock, so under contention its tie-break is smooth WRR
//! approximately, never a lost update of the weights' sum.
//!
//! `attempts`: the pick, then the other nodes by ascending `in_flight / weight` (insertion
//! order on ties), O(n + limit·log limit).

#[cfg(test)]
mod reference;

use super::{Ctx, Select, active_weights};
use crate::health::Status;
use crate::load::Load;
use crate::sync::{AtomicSigned, Ordering};
use crate::{Node, Options};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cmp::Ordering as Order;

pub(crate) struct LeastConnections {
    /// Active node indices, in insertion order.
    active: Vec<u32>,
    /// Their weights.
    weights: Vec<u32>,
    /// nginx's `current_weight` per active node, for the scan's tie-break (unused with an
    /// index, which keeps its own).
    current: Vec<AtomicSigned>,
    /// The index, when every weight is equal (see the module docs).
    #[cfg(feature = "std")]
    index: Option<Indexed>,
}

/// The O(log n) index and what finds a node in it.
#[cfg(feature = "std")]
struct Indexed {
    /// Each node's position in `active`, by node index (`NONE`: not active).
    position: Vec<u32>,
    tree: std::sync::Mutex<Tree>,
}

#[cfg(feature = "std")]
impl Indexed {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tree> {
        // A panic while holding it leaves a tree whose every step kept it consistent (a path
        // recomputed or not): keep using it.
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// No node (an empty leaf, or a node that is not active).
#[cfg(feature = "std")]
const NONE: u32 = u32::MAX;

/// The largest in-flight count the index tells apart (2^40 - 1: counts above it, never seen
/// in practice, compare as equal).
#[cfg(feature = "std")]
const SEEN_MAX: usize = ((1u64 << 40) - 1) as usize;

/// A leaf or a subtree's winner: the node at position `pos`, its in-flight count as the index
/// saw it (its class) and its key (current weight minus its class's offset, in units of the
/// weight), packed so that the winner of two is the smaller integer — bits 88..128 the
/// count, 24..88 the key order-reversed, 0..24 the position (`MAX_NODES` is 2^24) — which
/// makes a tree step one branch-free 128-bit comparison instead of three mispredicted ones.
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry(u128);

#[cfg(feature = "std")]
impl Entry {
    /// An empty leaf, after every real node in the order.
    const EMPTY: Entry = Entry(u128::MAX);

    #[inline]
    fn new(seen: usize, key: i64, pos: u32) -> Entry {
        debug_assert!(seen <= SEEN_MAX && pos < 1 << 24);
        // `key ^ MIN` maps i64 to u64 in order; `!` reverses it (the larger key first).
        let key = !((key as u64) ^ (1 << 63));
        Entry((seen as u128) << 88 | u128::from(key) << 24 | u128::from(pos))
    }

    #[inline]
    fn seen(self) -> usize {
        (self.0 >> 88) as usize
    }

    #[inline]
    fn key(self) -> i64 {
        (!((self.0 >> 24) as u64) ^ (1 << 63)) as i64
    }

    #[inline]
    fn pos(self) -> u32 {
        (self.0 & 0xff_ffff) as u32
    }
}

/// The nodes with one `in_flight / weight` ratio: how many, their total weight, and the
/// picks that tied among them (`weight × offset` added to each member's key gives its current
/// weight).
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, Default)]
struct Class {
    offset: i64,
    members: usize,
    weight: i64,
}

/// A class's name: its ratio `count / weight` in lowest terms (every idle node is `(0, 1)`).
#[cfg(feature = "std")]
fn reduced(count: usize, weight: u32) -> (u64, u64) {
    let (count, weight) = (count as u64, u64::from(weight));
    let g = gcd64(count, weight);
    (count / g, weight / g)
}

/// Greatest common divisor (1 for two zeros, which never occur: weights are positive).
#[cfg(feature = "std")]
fn gcd64(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// The nodes of one weight: a tournament tree over their leaves, in configuration order.
/// `nodes[1]` is the root, leaf `l` is `nodes[size + l]`, `nodes[i]` the winner of
/// `nodes[2i]` and `nodes[2i + 1]`. Within one weight, the ratio orders as the count and the
/// current weight as the key, so the root is the group's nginx winner.
#[cfg(feature = "std")]
#[derive(Debug)]
struct Group {
    weight: u32,
    size: usize,
    nodes: Vec<Entry>,
}

#[cfg(feature = "std")]
impl Group {
    /// Recomputes every inner node, O(size).
    fn rebuild(&mut self) {
        for i in (1..self.size).rev() {
            self.nodes[i] = self.nodes[2 * i].min(self.nodes[2 * i + 1]);
        }
    }

    /// Sets leaf `l` and recomputes its path to the root, O(log size), stopping where a
    /// winner is unchanged (the ones above it are then too).
    #[inline]
    fn set(&mut self, l: usize, entry: Entry) {
        let mut i = self.size + l;
        self.nodes[i] = entry;
        while i > 1 {
            let winner = self.nodes[i].min(self.nodes[i ^ 1]);
            i /= 2;
            if self.nodes[i] == winner {
                break;
            }
            self.nodes[i] = winner;
        }
    }

    /// The group's winner (with one leaf, `nodes[1]` is that leaf: size 1).
    #[inline]
    fn root(&self) -> Entry {
        self.nodes[1]
    }
}

/// Most distinct weights the index takes: a pick compares one candidate per weight.
#[cfg(feature = "std")]
const MAX_GROUPS: usize = 16;

/// The index (see the module docs): one tree per distinct weight, and the classes.
#[derive(Debug)]
#[cfg(feature = "std")]
struct Tree {
    groups: Vec<Group>,
    /// Each position's group and leaf.
    slot: Vec<(u32, u32)>,
    /// The classes, by ratio (a handful live at a time: a map, as counts are unbounded).
    classes: alloc::collections::BTreeMap<(u64, u64), Class>,
    /// The class offset at which keys are rebased (so `weight × offset` stays in an i64).
    rebase_at: i64,
}

#[cfg(feature = "std")]
impl Tree {
    /// The index for nodes of these weights and in-flight counts, every current weight 0;
    /// `None` with more than [`MAX_GROUPS`] distinct weights.
    fn new(weights: &[u32], counts: impl ExactSizeIterator<Item = usize>) -> Option<Tree> {
        let mut distinct: Vec<u32> = Vec::new();
        let mut slot = Vec::with_capacity(weights.len());
        let mut sizes: Vec<usize> = Vec::new();
        for w in weights {
            let g = match distinct.iter().position(|d| d == w) {
                Some(g) => g,
                None if distinct.len() == MAX_GROUPS => return None,
                None => {
                    distinct.push(*w);
                    sizes.push(0);
                    distinct.len() - 1
                }
            };
            slot.push((g as u32, sizes[g] as u32));
            sizes[g] += 1;
        }
        let groups = (distinct.iter().zip(&sizes))
            .map(|(w, n)| Group {
                weight: *w,
                size: n.next_power_of_two(),
                nodes: alloc::vec![Entry::EMPTY; 2 * n.next_power_of_two()],
            })
            .collect();
        let max = i64::from(*distinct.iter().max().unwrap_or(&1)).max(1);
        let mut tree = Tree {
            groups,
            slot,
            classes: Default::default(),
            rebase_at: (1 << 61) / max,
        };
        for (p, count) in counts.enumerate() {
            let count = count.min(SEEN_MAX);
            let (g, l) = tree.slot[p];
            let group = &mut tree.groups[g as usize];
            group.nodes[group.size + l as usize] = Entry::new(count, 0, p as u32);
            let weight = group.weight;
            let name = tree.class_of(count, weight);
            let class = tree.classes.entry(name).or_default();
            class.members += 1;
            class.weight += i64::from(weight);
        }
        tree.groups.iter_mut().for_each(Group::rebuild);
        Some(tree)
    }

    /// The class of `count` requests on a node of `weight`: with one weight, the count itself
    /// names it (no gcd on the hot path).
    #[inline]
    fn class_of(&self, count: usize, weight: u32) -> (u64, u64) {
        if self.groups.len() == 1 {
            (count as u64, 1)
        } else {
            reduced(count, weight)
        }
    }

    /// Position `p`'s leaf and weight.
    #[inline]
    fn leaf(&self, p: usize) -> (Entry, u32) {
        let (g, l) = self.slot[p];
        let group = &self.groups[g as usize];
        (group.nodes[group.size + l as usize], group.weight)
    }

    /// Sets position `p`'s leaf and fixes its group's tree.
    #[inline]
    fn set(&mut self, p: usize, entry: Entry) {
        let (g, l) = self.slot[p];
        self.groups[g as usize].set(l as usize, entry);
    }

    /// Recomputes every group's tree, O(n).
    fn rebuild(&mut self) {
        self.groups.iter_mut().for_each(Group::rebuild);
    }

    /// The offset of the class of `count` requests on a node of `weight`.
    #[inline]
    fn offset(&self, count: usize, weight: u32) -> i64 {
        self.classes[&self.class_of(count, weight)].offset
    }

    /// Position `p`'s nginx `current_weight`.
    fn current(&self, p: usize) -> i64 {
        let (leaf, w) = self.leaf(p);
        leaf.key() + i64::from(w) * self.offset(leaf.seen(), w)
    }

    /// Adds `w` to position `p`'s current weight and returns it, leaving the trees to the
    /// caller (`rebuild`). `memo` keeps the last class offset looked up: a scan's tied nodes
    /// are mostly of one class, so most skip the map.
    fn add_current(&mut self, p: usize, w: i64, memo: &mut Option<(usize, u32, i64)>) -> i64 {
        let (leaf, weight) = self.leaf(p);
        let offset = match *memo {
            Some((seen, at, offset)) if seen == leaf.seen() && at == weight => offset,
            _ => {
                let offset = self.offset(leaf.seen(), weight);
                *memo = Some((leaf.seen(), weight, offset));
                offset
            }
        };
        let current = leaf.key() + i64::from(weight) * offset + w;
        self.set_key(p, leaf, current - i64::from(weight) * offset);
        current
    }

    /// Sets position `p`'s current weight, leaving the trees to the caller (`rebuild`).
    fn set_current(&mut self, p: usize, current: i64) {
        let (leaf, w) = self.leaf(p);
        let key = current - i64::from(w) * self.offset(leaf.seen(), w);
        self.set_key(p, leaf, key);
    }

    /// Sets position `p`'s key in its leaf only.
    #[inline]
    fn set_key(&mut self, p: usize, leaf: Entry, key: i64) {
        let (g, l) = self.slot[p];
        let group = &mut self.groups[g as usize];
        group.nodes[group.size + l as usize] = Entry::new(leaf.seen(), key, leaf.pos());
    }

    /// Position `p` now has `count` requests in flight: it changes class, keeping its current
    /// weight. Returns whether it moved.
    fn moved(&mut self, p: usize, count: usize) -> bool {
        let count = count.min(SEEN_MAX);
        let (leaf, w) = self.leaf(p);
        if leaf.seen() == count {
            return false;
        }
        let weight = i64::from(w);
        let old = (self.classes.get_mut(&self.class_of(leaf.seen(), w))).expect("a leaf's class");
        let current = leaf.key() + weight * old.offset;
        old.members -= 1;
        old.weight -= weight;
        // Emptied classes stay (a node moving between two counts would otherwise remove and
        // insert a map entry each time), until they outnumber the nodes.
        if self.classes.len() > 2 * self.slot.len() + 64 {
            self.classes.retain(|_, class| class.members > 0);
        }
        let new = self.classes.entry(self.class_of(count, w)).or_default();
        new.members += 1;
        new.weight += weight;
        let key = current - weight * new.offset;
        self.set(p, Entry::new(count, key, leaf.pos()));
        true
    }

    /// nginx's winner: the group roots of the least ratio, the largest current weight after
    /// this pick's increment (first in order on ties). Returns its group and whether it is
    /// tied (its class has other members).
    #[inline]
    fn winner(&self) -> (usize, bool) {
        let ratio = |g: usize| {
            let group = &self.groups[g];
            (group.root().seen() as u128, u128::from(group.weight))
        };
        // The least ratio (first group on ties: any would do, they are one class).
        let mut least = 0;
        for g in 1..self.groups.len() {
            let ((c, w), (lc, lw)) = (ratio(g), ratio(least));
            if c * lw < lc * w {
                least = g;
            }
        }
        let (root, weight) = (self.groups[least].root(), self.groups[least].weight);
        let class = self.classes[&self.class_of(root.seen(), weight)];
        if class.members < 2 {
            return (least, false);
        }
        if self.groups.len() == 1 {
            return (least, true);
        }
        // Among the roots in that class, by current weight after the increment, then order.
        let k = class.offset + 1;
        let (lc, lw) = ratio(least);
        let score = |g: usize| {
            let group = &self.groups[g];
            let root = group.root();
            (
                root.key() + i64::from(group.weight) * k,
                core::cmp::Reverse(root.pos()),
            )
        };
        let mut best = least;
        for g in 0..self.groups.len() {
            let (c, w) = ratio(g);
            if c * lw == lc * w && score(g) > score(best) {
                best = g;
            }
        }
        (best, true)
    }

    /// nginx's pick: with a tie, every member's current weight + its weight (the class
    /// offset + 1) and the winner's - the class's weight; alone, nothing changes. Returns the
    /// winner's position.
    fn pick(&mut self, (g, tied): (usize, bool)) -> usize {
        let (root, weight) = (self.groups[g].root(), self.groups[g].weight);
        let p = root.pos() as usize;
        if tied {
            let class = (self.classes.get_mut(&self.class_of(root.seen(), weight)))
                .expect("the root's class");
            class.offset += 1;
            let (offset, total) = (class.offset, class.weight);
            self.set(p, Entry::new(root.seen(), root.key() - total, root.pos()));
            if offset >= self.rebase_at {
                self.rebase();
            }
        }
        p
    }

    /// Every key set to its current weight and every offset to 0 (once per 2^61 / max weight
    /// tied picks in one class), O(n).
    #[cold]
    fn rebase(&mut self) {
        for p in 0..self.slot.len() {
            let current = self.current(p);
            let (g, l) = self.slot[p];
            let group = &mut self.groups[g as usize];
            let leaf = group.nodes[group.size + l as usize];
            group.nodes[group.size + l as usize] = Entry::new(leaf.seen(), current, leaf.pos());
        }
        self.classes.values_mut().for_each(|c| c.offset = 0);
        self.rebuild();
    }
}

impl LeastConnections {
    /// Position `p` as the scan compares it: `(in_flight, weight)`, the weight scaled to
    /// 1024ths, or `None` if it may not be chosen. With health to check, warming nodes count
    /// with their share of weight (`in_flight / (weight · share)`); status is read once per
    /// node and comparison.
    #[inline]
    fn view(&self, ctx: &Ctx<'_>, p: usize) -> Option<(u64, u64)> {
        let index = self.active[p];
        let share = if ctx.checking() {
            match ctx.status(index) {
                // Through u32, a hardware conversion (share ≤ 1, so the same value as u128's).
                Status::Warming { share, .. } => u64::from((share * 1024.0) as u32).max(1),
                status if status.usable() => 1024,
                _ => return None,
            }
        } else {
            1024
        };
        let load = ctx.loads[index as usize].in_flight() as u64;
        Some((load, u64::from(self.weights[p]) * share))
    }

    /// nginx's choice, as a position in `active` (peers that may not be chosen are skipped,
    /// as nginx skips down peers).
    #[inline]
    fn choose(&self, ctx: &Ctx<'_>) -> usize {
        #[cfg(feature = "std")]
        if let Some(index) = &self.index {
            return self.choose_indexed(ctx, index);
        }
        // Relaxed: the current weights order nothing else; each update is one atomic
        // read-modify-write, so their sum is conserved whatever the interleaving.
        #[allow(
            clippy::unnecessary_cast,
            reason = "AtomicSigned is isize on 32-bit targets"
        )]
        let add =
            |p: usize, w: i64| self.current[p].fetch_add(w as _, Ordering::Relaxed) as i64 + w;
        let sub = |p: usize, total: i64| {
            self.current[p].fetch_sub(total as _, Ordering::Relaxed);
        };
        self.scan(ctx, add, sub)
    }

    /// The index's choice: its winner, once the winner's count is the one the index holds.
    #[cfg(feature = "std")]
    #[inline]
    fn choose_indexed(&self, ctx: &Ctx<'_>, index: &Indexed) -> usize {
        let mut tree = index.lock();
        if ctx.checking() {
            return self.scan_indexed(ctx, &mut tree);
        }
        // A count changed without telling the index (see the module docs): move the node and
        // look again. Each round settles one node; a bounded number keeps a pick bounded while
        // other threads change counts untold.
        let mut winner = tree.winner();
        for _ in 0..4 {
            let p = tree.groups[winner.0].root().pos() as usize;
            if !tree.moved(p, ctx.loads[self.active[p] as usize].in_flight()) {
                break;
            }
            winner = tree.winner();
        }
        tree.pick(winner)
    }

    /// The exact scan over the index's current weights, with health to check; O(n), and the
    /// tree rebuilt after (O(n)) when a tie moved current weights.
    #[cfg(feature = "std")]
    #[cold]
    fn scan_indexed(&self, ctx: &Ctx<'_>, tree: &mut Tree) -> usize {
        let tree = core::cell::RefCell::new(tree);
        let mut memo = None;
        let add = |p: usize, w: i64| tree.borrow_mut().add_current(p, w, &mut memo);
        let sub = |p: usize, total: i64| {
            let mut tree = tree.borrow_mut();
            let current = tree.current(p) - total;
            tree.set_current(p, current);
            tree.rebuild();
        };
        self.scan(ctx, add, sub)
    }

    /// The scan, nginx's loop: the least loaded of the positions that may be chosen, ties
    /// broken by smooth WRR. `add(p, w)` adds `w` to `p`'s current weight and returns the sum;
    /// `sub(p, total)` takes the tied weights' total from the winner's. With none that may be
    /// chosen, position 0.
    fn scan(
        &self,
        ctx: &Ctx<'_>,
        mut add: impl FnMut(usize, i64) -> i64,
        sub: impl FnOnce(usize, i64),
    ) -> usize {
        // `load_a / weight_a` against `load_b / weight_b`, cross-multiplied (u64 · u64 fits
        // u128 exactly).
        let cmp = |(la, wa): (u64, u64), (lb, wb): (u64, u64)| {
            (u128::from(la) * u128::from(wb)).cmp(&(u128::from(lb) * u128::from(wa)))
        };
        let n = self.active.len();
        let Some((mut best, mut least)) = (0..n).find_map(|p| Some((p, self.view(ctx, p)?))) else {
            return 0;
        };
        let mut many = false;
        for p in best + 1..n {
            let Some(v) = self.view(ctx, p) else { continue };
            match cmp(v, least) {
                Order::Less => (best, least, many) = (p, v, false),
                Order::Equal => many = true,
                Order::Greater => {}
            }
        }
        if !many {
            return best;
        }
        // Smooth WRR among the peers tied with `best`, from `best` on.
        let first = best;
        let mut best_current = i64::MIN;
        let mut total: i64 = 0;
        for p in first..n {
            if (self.view(ctx, p)).is_none_or(|v| cmp(v, least) != Order::Equal) {
                continue;
            }
            let w = i64::from(self.weights[p]);
            let current = add(p, w);
            total += w;
            if current > best_current {
                (best, best_current) = (p, current);
            }
        }
        sub(best, total);
        best
    }
}

impl Select for LeastConnections {
    const HEALTH_AWARE: bool = true;
    fn build(nodes: &[Node], active: Vec<u32>, _options: &Options) -> LeastConnections {
        let weights = active_weights(nodes, &active);
        LeastConnections {
            current: active.iter().map(|_| AtomicSigned::new(0)).collect(),
            #[cfg(feature = "std")]
            index: None,
            weights,
            active,
        }
    }

    fn build_with_loads(
        nodes: &[Node],
        active: Vec<u32>,
        options: &Options,
        loads: &[Arc<Load>],
    ) -> LeastConnections {
        #[allow(unused_mut, reason = "the index needs std")]
        let mut built = <LeastConnections as Select>::build(nodes, active, options);
        #[cfg(feature = "std")]
        {
            let counts = built.active.iter().map(|i| loads[*i as usize].in_flight());
            if let Some(tree) = Tree::new(&built.weights, counts) {
                let mut position = alloc::vec![NONE; nodes.len()];
                for (p, i) in built.active.iter().enumerate() {
                    position[*i as usize] = p as u32;
                }
                built.index = Some(Indexed {
                    position,
                    tree: std::sync::Mutex::new(tree),
                });
            }
        }
        let _ = loads;
        built
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

    /// Tells the index that node `index`'s in-flight count changed (it reads the count).
    fn moved(&self, index: usize, loads: &[Arc<Load>]) {
        #[cfg(feature = "std")]
        if let Some(indexed) = &self.index {
            let p = indexed.position.get(index).copied().unwrap_or(NONE);
            if p != NONE {
                indexed.lock().moved(p as usize, loads[index].in_flight());
            }
        }
        let _ = (index, loads);
    }

    /// Rereads every count (a table just published: counts may have changed since its build).
    #[cfg(feature = "std")]
    fn resync(&self, loads: &[Arc<Load>]) {
        #[cfg(feature = "std")]
        if let Some(indexed) = &self.index {
            let mut tree = indexed.lock();
            for (p, i) in self.active.iter().enumerate() {
                tree.moved(p, loads[*i as usize].in_flight());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reference;
    use super::*;
    use crate::State;
    use crate::health::{Gate, Policy};
    use core::time::Duration;
    use proptest::prelude::*;

    /// Now, in ticks (nanoseconds), for the health checks.
    const NOW: u64 = 1_000_000_000;
    /// Most steps of a property-test run (Miri interprets slowly: 15 minutes did not finish
    /// the property tests at 300).
    const OPS: usize = if cfg!(miri) { 30 } else { 300 };
    /// The slow-start window of the tests, in nanoseconds.
    const WINDOW: u64 = 1_000_000;

    /// One step of a single-threaded run.
    #[derive(Clone, Debug)]
    enum Op {
        /// Pick (and compare); `attempts` with this limit when `Some`.
        Pick(Option<usize>),
        /// A request starts on the node at this index.
        Start(usize),
        /// A request on it ends (if one is in flight).
        End(usize),
        /// Mark it down or up.
        Down(usize, bool),
        /// Start its warm-up this long before now.
        Warm(usize, u64),
        /// Check health (`true`) or not (the gate open, as with every node healthy or panic).
        Check(bool),
    }

    fn op(n: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => proptest::option::weighted(0.2, 1..=n + 1).prop_map(Op::Pick),
            4 => (0..n).prop_map(Op::Start),
            3 => (0..n).prop_map(Op::End),
            1 => (0..n, any::<bool>()).prop_map(|(i, d)| Op::Down(i, d)),
            1 => (0..n, 0..WINDOW + WINDOW / 4).prop_map(|(i, t)| Op::Warm(i, t)),
            1 => any::<bool>().prop_map(Op::Check),
        ]
    }

    /// Runs `ops` on the index (or the scan, for unequal weights) and on the reference over
    /// the same loads, comparing every answer. Weight-0 nodes are not active (as in a table).
    fn agree(weights: &[u32], ops: &[Op]) -> Result<(), TestCaseError> {
        agree_rebasing(weights, ops, None)
    }

    /// [`agree`], the index rebasing its keys once a class offset reaches `rebase_at`.
    fn agree_rebasing(
        weights: &[u32],
        ops: &[Op],
        rebase_at: Option<i64>,
    ) -> Result<(), TestCaseError> {
        let nodes: Vec<Node> = (weights.iter().enumerate())
            .map(|(i, w)| Node::new(alloc::format!("n{i}"), *w))
            .collect();
        let active: Vec<u32> = (0..nodes.len() as u32)
            .filter(|i| nodes[*i as usize].weight > 0)
            .collect();
        prop_assume!(!active.is_empty());
        let options = Options {
            slow_start_window: Duration::from_nanos(WINDOW),
            ..Options::default()
        };
        let loads: Vec<Arc<Load>> = nodes.iter().map(|_| Arc::default()).collect();
        let new = LeastConnections::build_with_loads(&nodes, active.clone(), &options, &loads);
        let distinct = weights
            .iter()
            .filter(|w| **w > 0)
            .collect::<alloc::collections::BTreeSet<_>>();
        prop_assert_eq!(new.index.is_some(), distinct.len() <= MAX_GROUPS);
        if let (Some(at), Some(index)) = (rebase_at, &new.index) {
            index.lock().rebase_at = at;
        }
        let old = <reference::LeastConnections as Select>::build(&nodes, active, &options);
        let (state, policy) = (State::new(1), Policy::new(&options));
        let mut gate = Gate::Open;
        for (step, op) in ops.iter().enumerate() {
            let ctx = Ctx {
                state: &state,
                loads: &loads,
                now_ns: NOW,
                gate,
                policy: &policy,
                position: None,
            };
            match *op {
                Op::Pick(None) => {
                    let (a, b) = (new.pick(&[], &ctx), old.pick(&[], &ctx));
                    prop_assert_eq!(a, b, "step {}: {:?}", step, ops);
                }
                Op::Pick(Some(limit)) => {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    new.attempts(&[], &ctx, limit, &mut a);
                    old.attempts(&[], &ctx, limit, &mut b);
                    prop_assert_eq!(a, b, "step {}: {:?}", step, ops);
                }
                Op::Start(i) => {
                    loads[i].start();
                    new.moved(i, &loads);
                }
                Op::End(i) => {
                    if loads[i].in_flight() > 0 {
                        loads[i].end(None, 0, Duration::ZERO);
                        new.moved(i, &loads);
                    }
                }
                Op::Down(i, down) => loads[i].health().set_down(down, NOW),
                Op::Warm(i, ago) => loads[i].health().warm_from(NOW - ago),
                Op::Check(check) => {
                    gate = if check {
                        Gate::Check { now: NOW }
                    } else {
                        Gate::Open
                    }
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::proptest_config(512, 2))]

        /// Equal weights (the index): every pick and retry order is the scan's, whatever the
        /// leases, health and warm-ups did, including weight-0 nodes left out.
        #[test]
        fn the_index_answers_as_the_scan(
            (weights, ops) in (1usize..12, 1u32..=4).prop_flat_map(|(n, w)| (
                proptest::collection::vec(prop_oneof![8 => Just(w), 1 => Just(0)], n),
                proptest::collection::vec(op(n), 0..OPS),
            ))
        ) {
            agree(&weights, &ops)?;
        }

        /// Unequal weights (one tree per weight), keys rebased often or never.
        #[test]
        fn unequal_weights_answer_as_the_scan(
            (weights, ops) in (1usize..12).prop_flat_map(|n| (
                proptest::collection::vec(0u32..=4, n),
                proptest::collection::vec(op(n), 0..OPS),
            )),
            rebase_at in proptest::option::of(1i64..4),
        ) {
            agree_rebasing(&weights, &ops, rebase_at)?;
        }

        /// More distinct weights than the index takes: the scan, unchanged.
        #[test]
        fn many_weights_keep_the_scan(
            (weights, ops) in (MAX_GROUPS + 1..MAX_GROUPS + 8).prop_flat_map(|n| (
                Just((1..=n as u32).collect::<Vec<u32>>()),
                proptest::collection::vec(op(n), 0..OPS),
            ))
        ) {
            agree(&weights, &ops)?;
        }
    }

    /// The packed entry reads back what went in, and orders as (count, key descending,
    /// position).
    #[test]
    fn entries_pack_in_order() {
        let values = [
            (0, i64::MIN, 0),
            (0, -1, 5),
            (0, 0, 0),
            (0, 0, 1),
            (0, i64::MAX, (1 << 24) - 1),
            (1, 7, 3),
            (SEEN_MAX, i64::MIN, 0),
        ];
        for (seen, key, pos) in values {
            let e = Entry::new(seen, key, pos);
            assert_eq!((e.seen(), e.key(), e.pos()), (seen, key, pos));
        }
        for a in values {
            for b in values {
                let order =
                    (a.0, core::cmp::Reverse(a.1), a.2).cmp(&(b.0, core::cmp::Reverse(b.1), b.2));
                assert_eq!(
                    Entry::new(a.0, a.1, a.2).cmp(&Entry::new(b.0, b.1, b.2)),
                    order
                );
            }
        }
        assert!(Entry::new(SEEN_MAX, i64::MIN, (1 << 24) - 2) < Entry::EMPTY);
    }

    /// Many idle nodes of equal weight: nginx's tie-break is a rotation in insertion order,
    /// and a node that takes a request leaves the rotation until it ends.
    #[test]
    fn idle_nodes_rotate() {
        let n = if cfg!(miri) { 20 } else { 1000 };
        let ops: Vec<Op> = (0..3 * n)
            .map(|_| Op::Pick(None))
            .chain([Op::Start(3), Op::Start(7)])
            .chain((0..2 * n).map(|_| Op::Pick(None)))
            .chain([Op::End(3)])
            .chain((0..n).map(|_| Op::Pick(None)))
            .collect();
        agree(&alloc::vec![2; n], &ops).unwrap();
    }
}
