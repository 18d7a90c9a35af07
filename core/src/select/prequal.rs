//! `prequal`: Prequal's asynchronous probing and hot-cold lexicographic rule (Wydrowski,
//! Kleinberg, Rumble & Archer, "Load is not what you should balance: Introducing Prequal",
//! NSDI '24, arXiv 2312.10172).
//!
//! The client keeps a pool of recent probe answers, each a replica's requests-in-flight (RIF)
//! and its own estimate of its latency. A probe is *hot* when its RIF exceeds the Q_RIF
//! quantile of the RIF values recently probed, *cold* otherwise; a pick takes the cold probe
//! with the lowest latency, or, when every probe is hot, the one with the lowest RIF (the
//! paper's hot-cold lexicographic rule; exact ties, common among alike replicas, go to one of
//! the tied probes at random). The chosen probe's RIF is raised by one — the client knows it
//! just sent that replica one more request — and it counts one use; after `probe_reuse` uses
//! (the paper's reuse budget b_reuse) it leaves the pool. Probes older than `max_probe_age_ms`
//! leave it too; a new answer for a replica already in the pool replaces that replica's probe,
//! else takes a free slot, else the oldest's; and at `probe_remove_rate` per pick (r_remove)
//! the worst probe is removed: the hottest if any is hot, else the slowest (probes of nodes
//! health says are unusable go first). With no probe to choose from, a pick falls back to a
//! uniformly random node — what a client knows before any answer, and what keeps a node's
//! first answers coming — drawn from the balancer's seeded generator, so seeded runs replay.
//!
//! liblb does no I/O: the caller probes. Each pick makes `probe_rate` probes due (the paper's
//! r_probe, probes per query; fractions accumulate); [`Table::probes_due`](crate::Table::probes_due)
//! hands them out and [`Table::probe_targets`](crate::Table::probe_targets) names uniformly
//! random distinct nodes to send them to; the answers come back through
//! [`Table::offer_probe`](crate::Table::offer_probe). What a probe answers is the server's
//! business: Prequal's servers report their RIF and a latency estimate from their recent
//! requests (the median at about the current RIF). Probes sent on a timer while no query
//! comes are the caller's too.
//!
//! Sources and defaults: the signals (RIF and latency, not CPU load), asynchronous probes
//! reused across queries, the hot-cold rule, pool size 16 and Q_RIF 0.84 are the paper's
//! (its design section; its abstract states the first two). r_probe 3, r_remove 1 and a 1 s
//! maximum age are the paper's testbed settings as the public reimplementations read them
//! (prequal-rs `crates/prequal-core/src/config.rs`: "Defaults follow the paper"); b_reuse is
//! the paper's Eq. (1) at that testbed (16 probes, 100 replicas, δ = 1), which those
//! reimplementations read as `1 + δ / ((1 - m/n)·r_probe - r_remove)` (prequal-rs, randomly
//! rounded) or `(1 + δ) / (...)`, rounded up: 2 either way. liblb keeps b_reuse an option
//! rather than the formula, which fails for fleets smaller than the pool. With these rates a
//! full pool stays full — probes arriving, `r_probe · (1 - pool/n)` a pick once answers that
//! replace their node's probe are discounted, outnumber those leaving, `r_remove + 1/b_reuse`,
//! in fleets of 32 nodes and more. Check them against the fleet before relying on them.
//!
//! The hot/cold threshold is taken over the last [`RIF_HISTORY`] probed RIF values rather than
//! over the pool itself: over the pool, at least a Q_RIF share of the probes would always be
//! cold by definition, and the rule's "all hot" branch could never be taken. Against recent
//! answers, a pool whose probes were all used (their RIF raised) or all come from a fleet
//! that just got busier can be all hot, as in the paper.
//!
//! **The pool is lock-free.** Each probe is one 64-bit word (node position 24 bits, RIF 10
//! bits saturating at 1023, latency 10 bits as a 5-bit-mantissa float of microseconds — 3%
//! steps up to 19 hours —, uses 6 bits, a 13-bit age stamp, and an occupied bit), replaced
//! whole by compare-and-swap. A pick copies the pool onto its stack, chooses, then charges the
//! chosen word (RIF + 1, uses + 1) with a compare-and-swap loop that gives up once the slot
//! holds another node. What a racing pick can see is a word a moment old: two picks may choose
//! the same probe and charge it twice (one use past the budget each time that happens), a pick
//! may choose a probe an offer is just replacing (the decision was right a moment ago), an
//! offer may lose its slot to another offer and drop its answer, and two offers for one node
//! may both land, so that node has two probes for a while. Each only shifts one pick of a
//! heuristic; none loses a request or corrupts a word, since words are only ever swapped whole.
//! On targets without 64-bit atomics (thumbv7em) a slot is a sequence counter and two 32-bit
//! halves: a writer claims the slot by a compare-and-swap of the counter, readers skip a slot
//! being written, and nobody waits.
//!
//! The age stamp counts ticks of a 32nd of `max_probe_age` (expiry within ±1/32 of it) and
//! wraps after 256 ages: every pick and offer sweeps expired probes, and a pool untouched for
//! more than half a wrap is cleared before use, so an old stamp is never read as new. Without
//! a clock (`now_ns` 0) probes never age.
//!
//! The pool lives in the table: a membership change starts an empty one (picks are random
//! until the next answers arrive). Cost per pick: one load per slot, a selection over the last
//! [`RIF_HISTORY`] RIF values (O(64)), two or three compare-and-swaps, no allocation.
//! `attempts`: the pick, then a uniformly random order of the others (lazy Fisher-Yates), as
//! `peak_ewma`. Weights other than 0 are ignored, as in the paper.

use super::{Ctx, Select, sample};
use crate::options::MAX_PROBE_POOL_SIZE;
use crate::rng::{Draws, bounded};
use crate::sync::{AtomicCounter, AtomicU32, Ordering};
use crate::{Node, Options};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::time::Duration;

/// How many recent probe answers the hot/cold threshold is taken over.
pub(crate) const RIF_HISTORY: usize = 64;

/// The largest RIF a pool word holds; larger ones saturate (all equally hot).
const MAX_RIF: u32 = (1 << RIF_BITS) - 1;

const POS_BITS: u32 = 24;
const RIF_BITS: u32 = 10;
const LATENCY_BITS: u32 = 10;
const USES_BITS: u32 = 6;
const STAMP_BITS: u32 = 13;
const STAMP_SHIFT: u32 = 0;
const USES_SHIFT: u32 = STAMP_SHIFT + STAMP_BITS;
const LATENCY_SHIFT: u32 = USES_SHIFT + USES_BITS;
const RIF_SHIFT: u32 = LATENCY_SHIFT + LATENCY_BITS;
const POS_SHIFT: u32 = RIF_SHIFT + RIF_BITS;
const OCCUPIED: u64 = 1 << 63;
const _: () = assert!(POS_SHIFT + POS_BITS == 63, "the fields fill the word");
const _: () = assert!(crate::MAX_NODES <= 1 << POS_BITS, "every position fits");

/// Stamp ticks per `max_probe_age` (the age's resolution).
const TICKS_PER_AGE: u64 = 32;
/// The stamps' period, in ticks.
const STAMP_WRAP: u64 = 1 << STAMP_BITS;

/// Fixed-point unit of the probe and removal credits: one probe.
const UNIT: u32 = 1 << 16;
/// Most probes a pool keeps due (a caller that never asks does not overflow it).
const MAX_DUE: u32 = MAX_PROBE_POOL_SIZE * UNIT;

/// Offers that lose every compare-and-swap this many times drop their answer.
const OFFER_TRIES: usize = 4;

/// One probe answer, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probe {
    /// Position of the node in the selector's active list.
    pos: u32,
    rif: u32,
    /// Latency code (see [`latency_code`]): ordered as the latencies are.
    latency: u32,
    uses: u32,
    stamp: u32,
}

impl Probe {
    fn pack(self) -> u64 {
        let field = |v: u32, bits: u32, shift: u32| (u64::from(v) & ((1 << bits) - 1)) << shift;
        OCCUPIED
            | field(self.pos, POS_BITS, POS_SHIFT)
            | field(self.rif, RIF_BITS, RIF_SHIFT)
            | field(self.latency, LATENCY_BITS, LATENCY_SHIFT)
            | field(self.uses, USES_BITS, USES_SHIFT)
            | field(self.stamp, STAMP_BITS, STAMP_SHIFT)
    }

    /// The probe in a pool word; `None` for an empty slot.
    fn unpack(word: u64) -> Option<Probe> {
        let field = |bits: u32, shift: u32| ((word >> shift) & ((1 << bits) - 1)) as u32;
        (word & OCCUPIED != 0).then(|| Probe {
            pos: field(POS_BITS, POS_SHIFT),
            rif: field(RIF_BITS, RIF_SHIFT),
            latency: field(LATENCY_BITS, LATENCY_SHIFT),
            uses: field(USES_BITS, USES_SHIFT),
            stamp: field(STAMP_BITS, STAMP_SHIFT),
        })
    }
}

/// A latency as a 10-bit code ordered as latencies are: microseconds below 32 as they are,
/// above as a float with a 5-bit mantissa (1/32 steps) and a 5-bit exponent; saturating
/// at about 19 hours.
fn latency_code(latency: Duration) -> u32 {
    let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    if us < 32 {
        return us as u32;
    }
    let top = 63 - us.leading_zeros(); // >= 5
    let shift = top - 5;
    let exponent = shift + 1;
    if exponent >= 1 << 5 {
        return (1 << LATENCY_BITS) - 1;
    }
    let mantissa = ((us >> shift) - 32) as u32;
    (exponent << 5) | mantissa
}

/// The lower bound of the latencies with this code, in microseconds (for tests and `Debug`).
#[cfg(test)]
fn latency_of(code: u32) -> u64 {
    if code < 32 {
        return u64::from(code);
    }
    let shift = (code >> 5) - 1;
    (32 + u64::from(code & 31)) << shift
}

/// One pool slot: a 64-bit atomic where the target has them, else a [`SequencedSlot`].
#[cfg(target_has_atomic = "64")]
type Slot = WordSlot;
#[cfg(not(target_has_atomic = "64"))]
type Slot = SequencedSlot;

/// A pool slot that is one 64-bit atomic: a probe's word, swapped whole.
#[cfg(target_has_atomic = "64")]
struct WordSlot(crate::sync::AtomicU64);

#[cfg(target_has_atomic = "64")]
impl WordSlot {
    fn new() -> WordSlot {
        WordSlot(crate::sync::AtomicU64::new(0))
    }

    /// The word (always readable here).
    #[inline]
    fn load(&self) -> Option<u64> {
        // Relaxed: the word is the whole message; nothing else is published through it.
        Some(self.0.load(Ordering::Relaxed))
    }

    /// Replaces `old` by `new`; false if the slot no longer holds `old`.
    #[inline]
    fn replace(&self, old: u64, new: u64) -> bool {
        // Relaxed: as `load`; compare-and-swap on one word is atomic whatever the ordering.
        (self.0)
            .compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

/// A pool slot for targets without 64-bit atomics: a sequence counter (odd while a writer
/// holds the slot) and the word's two halves. Writers claim the slot with one compare-and-swap
/// of the counter and never wait; readers skip a slot being written. (Built on every target
/// for its tests.)
#[cfg(any(test, not(target_has_atomic = "64")))]
struct SequencedSlot {
    sequence: AtomicU32,
    low: AtomicU32,
    high: AtomicU32,
}

#[cfg(any(test, not(target_has_atomic = "64")))]
impl SequencedSlot {
    fn new() -> SequencedSlot {
        SequencedSlot {
            sequence: AtomicU32::new(0),
            low: AtomicU32::new(0),
            high: AtomicU32::new(0),
        }
    }

    /// The word and the sequence it was read at, or `None` while a writer holds the slot
    /// (or wrote it during the read).
    fn read(&self) -> Option<(u64, u32)> {
        use core::sync::atomic::fence;
        // Acquire: the halves read next are at least those the last writer released.
        let before = self.sequence.load(Ordering::Acquire);
        if before & 1 == 1 {
            return None;
        }
        let word = u64::from(self.low.load(Ordering::Relaxed))
            | u64::from(self.high.load(Ordering::Relaxed)) << 32;
        // Acquire fence: the halves' loads happen before the second read of the counter, so a
        // writer that started meanwhile is seen there.
        fence(Ordering::Acquire);
        (self.sequence.load(Ordering::Relaxed) == before).then_some((word, before))
    }

    #[inline]
    fn load(&self) -> Option<u64> {
        self.read().map(|(word, _)| word)
    }

    fn replace(&self, old: u64, new: u64) -> bool {
        use core::sync::atomic::fence;
        let Some((word, sequence)) = self.read() else {
            return false;
        };
        if word != old {
            return false;
        }
        // Claim: only one writer moves the counter from this even value to the odd one.
        if (self.sequence)
            .compare_exchange(
                sequence,
                sequence.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        // Release fence: a reader that sees either new half also sees the odd counter.
        fence(Ordering::Release);
        self.low.store(new as u32, Ordering::Relaxed);
        self.high.store((new >> 32) as u32, Ordering::Relaxed);
        // Release: the halves are visible to whoever reads the even counter after them.
        (self.sequence).store(sequence.wrapping_add(2), Ordering::Release);
        true
    }
}

/// The pool of probe answers and its bookkeeping; `&self` throughout, lock-free.
struct Pool {
    slots: Box<[Slot]>,
    /// The last [`RIF_HISTORY`] probed RIF values (saturated), ring-indexed by `answers`.
    history: Box<[AtomicU32]>,
    /// Probe answers offered so far (wrapping).
    answers: AtomicCounter,
    /// The last tick a pick or offer saw (see [`Pool::sweep_if_stale`]).
    touched: AtomicCounter,
    /// Nanoseconds per stamp tick, and ticks in a maximum age.
    tick_ns: u64,
    max_ticks: u64,
    /// Probes due, and worst-probe removals owed, in `UNIT`s.
    due: AtomicU32,
    removals: AtomicU32,
    /// The last threshold computed (`NO_THRESHOLD` for none) and the answer count it was
    /// computed at (see [`Pool::threshold`]).
    threshold: AtomicU32,
    threshold_at: AtomicU32,
}

/// `Pool::threshold` before any answer.
const NO_THRESHOLD: u32 = u32::MAX;

/// A full history's threshold is recomputed after this many new answers, not on every pick: a
/// quantile of 64 values moves little with 8 of them replaced, and the selection over 64 values
/// is most of a pick otherwise.
const THRESHOLD_REFRESH: u64 = 8;

impl Pool {
    fn new(size: usize, max_age: Duration) -> Pool {
        let max_age_ns = u64::try_from(max_age.as_nanos()).unwrap_or(u64::MAX);
        let tick_ns = (max_age_ns / TICKS_PER_AGE).max(1);
        Pool {
            slots: (0..size).map(|_| Slot::new()).collect(),
            history: (0..RIF_HISTORY).map(|_| AtomicU32::new(0)).collect(),
            answers: AtomicCounter::new(0),
            touched: AtomicCounter::new(0),
            tick_ns,
            max_ticks: max_age_ns / tick_ns,
            due: AtomicU32::new(0),
            removals: AtomicU32::new(0),
            threshold: AtomicU32::new(NO_THRESHOLD),
            threshold_at: AtomicU32::new(0),
        }
    }

    /// The clock reading in ticks (full width, wrapping where counters are 32 bits).
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn tick(&self, now_ns: u64) -> u64 {
        (now_ns / self.tick_ns) as usize as u64
    }

    /// Ticks since a probe's stamp; a stamp "in the future" (a racing writer with a later
    /// clock reading) is no time at all.
    fn age(now: u64, stamp: u32) -> u64 {
        let d = now.wrapping_sub(u64::from(stamp)) % STAMP_WRAP;
        if d >= STAMP_WRAP / 2 { 0 } else { d }
    }

    fn expired(&self, now: u64, probe: Probe) -> bool {
        Pool::age(now, probe.stamp) > self.max_ticks
    }

    /// Empties the pool if nobody touched it for half a stamp period (its stamps could read
    /// as new), and notes `now` as touched.
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn sweep_if_stale(&self, now: u64) {
        // Relaxed: a hint about time; a racing sweep only clears probes a moment early.
        let last = self.touched.load(Ordering::Relaxed) as u64;
        if last == now {
            return;
        }
        self.touched.store(now as _, Ordering::Relaxed);
        let gap = now.wrapping_sub(last) & crate::load::stamp_mask();
        if gap >= STAMP_WRAP / 2 && gap <= crate::load::stamp_mask() / 2 {
            for slot in self.slots.iter() {
                if let Some(word) = slot.load().filter(|w| *w != 0) {
                    slot.replace(word, 0);
                }
            }
        }
    }

    /// Records one probed RIF for the hot/cold threshold.
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn remember(&self, rif: u32) {
        // Relaxed: distinct answers take distinct ring entries; readers take what is there.
        let at = self.answers.fetch_add(1, Ordering::Relaxed) as u64;
        self.history[(at % RIF_HISTORY as u64) as usize].store(rif, Ordering::Relaxed);
    }

    /// The RIF above which a probe is hot: the `q`-quantile of the remembered RIF values (the
    /// `ceil(q·k)`-th smallest of `k`), or `None` before any answer. Exact while the history
    /// fills; once full, recomputed every [`THRESHOLD_REFRESH`] answers.
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn threshold(&self, q: f64) -> Option<u32> {
        let answers = self.answers.load(Ordering::Relaxed) as u64;
        // Relaxed: the two words may pair a threshold with a neighbouring count when racing a
        // refresh; either is a quantile of a recent history.
        let cached = self.threshold.load(Ordering::Relaxed);
        let at = u64::from(self.threshold_at.load(Ordering::Relaxed));
        let since = (answers as u32 as u64).wrapping_sub(at) & u64::from(u32::MAX);
        if cached != NO_THRESHOLD
            && (since == 0 || (answers >= RIF_HISTORY as u64 && since < THRESHOLD_REFRESH))
        {
            return Some(cached);
        }
        let threshold = self.quantile(q, answers)?;
        self.threshold.store(threshold, Ordering::Relaxed);
        self.threshold_at.store(answers as u32, Ordering::Relaxed);
        Some(threshold)
    }

    /// The `q`-quantile of the last `min(answers, RIF_HISTORY)` remembered RIF values.
    fn quantile(&self, q: f64, answers: u64) -> Option<u32> {
        let k = answers.min(RIF_HISTORY as u64) as usize;
        if k == 0 {
            return None;
        }
        let mut rifs = [0u16; RIF_HISTORY];
        for (to, from) in rifs.iter_mut().zip(self.history.iter()).take(k) {
            *to = from.load(Ordering::Relaxed) as u16;
        }
        let rank = (libm::ceil(q * k as f64) as usize).clamp(1, k);
        let rifs = &mut rifs[..k];
        Some(u32::from(*rifs.select_nth_unstable(rank - 1).1))
    }

    /// Adds `units` to a credit (capped at `cap`) and takes its whole units out, leaving the
    /// fraction.
    fn credit(counter: &AtomicU32, units: u32, cap: u32) -> u32 {
        // Relaxed: a counter of its own; the compare-and-swap loop loses no update.
        let before = counter
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(c.saturating_add(units).min(cap) % UNIT)
            })
            .unwrap_or(0);
        before.saturating_add(units).min(cap) / UNIT
    }
}

pub(crate) struct Prequal {
    /// Active node indices, in insertion order (ascending).
    active: Vec<u32>,
    pool: Pool,
    q_rif: f64,
    reuse: u32,
    /// `probe_rate` and `probe_remove_rate` in `UNIT`s per pick.
    probe_units: u32,
    remove_units: u32,
}

/// What a pick saw of the pool: each slot's word (0 = empty or skipped).
type Seen = [u64; MAX_PROBE_POOL_SIZE as usize];

impl Prequal {
    /// The usable probes' words at tick `now`, expired ones removed from the pool.
    fn look(&self, now: u64, seen: &mut Seen) {
        for (slot, word) in self.pool.slots.iter().zip(seen.iter_mut()) {
            *word = slot.load().unwrap_or(0);
            if let Some(probe) = Probe::unpack(*word) {
                if self.pool.expired(now, probe) {
                    slot.replace(*word, 0);
                    *word = 0;
                }
            }
        }
    }

    /// The slot the hot-cold lexicographic rule chooses among the probes in `seen` that may
    /// be picked (`ctx.accept`: usable, warming ones thinned by their share). Exact ties (equal
    /// latency codes and RIFs, common when replicas are alike) go to one of the tied probes
    /// uniformly at random (reservoir sampling; draws are taken only on a tie): by slot order
    /// instead, whichever node's answer sat in the lowest slot would take them all.
    fn hcl(&self, seen: &Seen, ctx: &Ctx<'_>, threshold: Option<u32>) -> Option<usize> {
        // Per class: the best key, its slot, and how many probes tied with it so far.
        let mut cold: Option<((u32, u32), usize, u32)> = None; // key (latency, rif)
        let mut hot: Option<((u32, u32), usize, u32)> = None; // key (rif, latency)
        let mut draws: Option<Draws> = None;
        let mut random = || (draws.get_or_insert_with(|| Draws::after(ctx.rng.next()))).next();
        for (i, word) in seen.iter().enumerate().take(self.pool.slots.len()) {
            let Some(p) = Probe::unpack(*word) else {
                continue;
            };
            if ctx.checking() && !ctx.accept(self.active[p.pos as usize], || ctx.rng.next()) {
                continue;
            }
            let (best, key) = if threshold.is_some_and(|t| p.rif > t) {
                (&mut hot, (p.rif, p.latency))
            } else {
                (&mut cold, (p.latency, p.rif))
            };
            *best = match *best {
                None => Some((key, i, 1)),
                Some((b, _, _)) if key < b => Some((key, i, 1)),
                // The k-th tied probe replaces the kept one with probability 1/k.
                Some((b, slot, ties)) if key == b => {
                    let ties = ties + 1;
                    let take = bounded(random(), ties as usize) == 0;
                    Some((b, if take { i } else { slot }, ties))
                }
                kept => kept,
            };
        }
        cold.or(hot).map(|(_, slot, _)| slot)
    }

    /// Charges the probe in slot `i` (seen as `word`) with the request just sent: RIF + 1,
    /// one use, out of the pool once its budget is spent. Stops if the slot no longer holds a
    /// probe of that node. Returns the word left in the slot, if this pick wrote it.
    fn charge(&self, i: usize, mut word: u64) -> Option<u64> {
        let slot = &self.pool.slots[i];
        let pos = Probe::unpack(word)?.pos;
        loop {
            let probe = Probe::unpack(word).filter(|p| p.pos == pos)?;
            let uses = probe.uses + 1;
            let new = if uses >= self.reuse {
                0
            } else {
                Probe {
                    rif: (probe.rif + 1).min(MAX_RIF),
                    uses,
                    ..probe
                }
                .pack()
            };
            if slot.replace(word, new) {
                return Some(new);
            }
            word = slot.load()?;
        }
    }

    /// Removes the worst probe seen: one of a node that may not be picked, else the hottest
    /// (highest RIF, then latency) if any is hot, else the slowest (then highest RIF).
    fn remove_worst(&self, seen: &mut Seen, ctx: &Ctx<'_>, threshold: Option<u32>) {
        let mut worst: Option<((u8, u32, u32), usize)> = None;
        for (i, word) in seen.iter().enumerate().take(self.pool.slots.len()) {
            let Some(p) = Probe::unpack(*word) else {
                continue;
            };
            let key = if ctx.checking() && !ctx.usable(self.active[p.pos as usize]) {
                (3, 0, 0)
            } else if threshold.is_some_and(|t| p.rif > t) {
                (2, p.rif, p.latency)
            } else {
                (1, p.latency, p.rif)
            };
            if worst.is_none_or(|(k, _)| key > k) {
                worst = Some((key, i));
            }
        }
        if let Some((_, i)) = worst {
            self.pool.slots[i].replace(seen[i], 0);
            seen[i] = 0;
        }
    }

    /// A uniformly random node position that may be picked (the fallback with no probe to
    /// choose from), drawn from the balancer's generator; `first` is the draw it started from.
    fn random(&self, ctx: &Ctx<'_>, first: u64, rng: &Draws) -> usize {
        let n = self.active.len();
        let mut c = bounded(first, n);
        if !ctx.checking() {
            return c;
        }
        for _ in 0..super::HEALTH_REDRAWS {
            if ctx.accept(self.active[c], || rng.next()) {
                return c;
            }
            c = bounded(rng.next(), n);
        }
        bounded(first, n) // none found: the table falls back to its scan
    }

    /// The pick, as a position in `active`, and the draws a retry order goes on with.
    fn choose(&self, ctx: &Ctx<'_>) -> (usize, Option<Draws>) {
        let now = self.pool.tick(ctx.now_ns);
        self.pool.sweep_if_stale(now);
        if self.probe_units > 0 {
            // Relaxed: a counter of its own (as `credit`); capped, so it cannot overflow.
            let add = |c: u32| Some(c.saturating_add(self.probe_units).min(MAX_DUE));
            let _ = (self.pool.due).fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
        }
        let mut seen: Seen = [0; MAX_PROBE_POOL_SIZE as usize];
        self.look(now, &mut seen);
        let threshold = self.pool.threshold(self.q_rif);
        let chosen = self.hcl(&seen, ctx, threshold).map(|i| {
            let pos = Probe::unpack(seen[i]).map_or(0, |p| p.pos as usize);
            seen[i] = self.charge(i, seen[i]).unwrap_or(0);
            pos
        });
        let removals = match self.remove_units {
            0 => 0,
            units => Pool::credit(&self.pool.removals, units, u32::MAX),
        };
        for _ in 0..removals {
            self.remove_worst(&mut seen, ctx, threshold);
        }
        match chosen {
            Some(pos) => (pos, None),
            None => {
                let first = ctx.rng.next();
                let rng = Draws::after(first);
                (self.random(ctx, first, &rng), Some(rng))
            }
        }
    }

    /// Records a probe answer for node `index` at `now_ns` (ignored if the node is not one of
    /// this selector's).
    fn offer_at(&self, index: u32, rif: u32, latency: Duration, now_ns: u64) {
        let Ok(pos) = self.active.binary_search(&index) else {
            return;
        };
        let rif = rif.min(MAX_RIF);
        self.pool.remember(rif);
        let now = self.pool.tick(now_ns);
        self.pool.sweep_if_stale(now);
        let new = Probe {
            pos: pos as u32,
            rif,
            latency: latency_code(latency),
            uses: 0,
            stamp: (now % STAMP_WRAP) as u32,
        }
        .pack();
        for _ in 0..OFFER_TRIES {
            // This node's probe, else a free slot, else the oldest (expired ones are oldest).
            let (mut same, mut free, mut oldest) = (None, None, None::<(u64, usize)>);
            for (i, slot) in self.pool.slots.iter().enumerate() {
                let Some(word) = slot.load() else {
                    continue; // being written
                };
                match Probe::unpack(word) {
                    None => free = free.or(Some((i, word))),
                    Some(p) if p.pos == pos as u32 => same = same.or(Some((i, word))),
                    Some(p) => {
                        let age = Pool::age(now, p.stamp);
                        if oldest.is_none_or(|(a, _)| age > a) {
                            oldest = Some((age, i));
                        }
                    }
                }
            }
            let oldest = oldest.and_then(|(_, i)| Some((i, self.pool.slots[i].load()?)));
            let Some((i, old)) = same.or(free).or(oldest) else {
                return; // every slot is being written: drop the answer
            };
            if self.pool.slots[i].replace(old, new) {
                return;
            }
        }
    }

    /// The probes in the pool, for tests.
    #[cfg(test)]
    fn probes(&self) -> Vec<Probe> {
        (self.pool.slots.iter())
            .filter_map(|s| s.load().and_then(Probe::unpack))
            .collect()
    }
}

impl Select for Prequal {
    const TIMED: bool = true;
    const HEALTH_AWARE: bool = true;

    fn build(_nodes: &[Node], active: Vec<u32>, options: &Options) -> Prequal {
        debug_assert!(active.windows(2).all(|w| w[0] < w[1]), "ascending");
        let units = |rate: f64| libm::round(rate * f64::from(UNIT)) as u32;
        Prequal {
            pool: Pool::new(options.probe_pool_size as usize, options.max_probe_age),
            active,
            q_rif: options.q_rif,
            reuse: options.probe_reuse,
            probe_units: units(options.probe_rate),
            remove_units: units(options.probe_remove_rate),
        }
    }

    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        self.active[self.choose(ctx).0]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let (first, rng) = self.choose(ctx);
        let rng = rng.unwrap_or_else(|| Draws::after(ctx.rng.next()));
        sample::shuffle_prefix(self.active.len(), limit, first, || rng.next(), out);
        for slot in out.iter_mut() {
            *slot = self.active[*slot as usize];
        }
    }

    fn offer(&self, index: u32, rif: u32, latency: Duration, now_ns: u64) {
        self.offer_at(index, rif, latency, now_ns);
    }

    fn take_probes_due(&self) -> usize {
        Pool::credit(&self.pool.due, 0, MAX_DUE) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Policy;
    use crate::state::State;

    const MS: u64 = 1_000_000;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The defaults, without worst-probe removal (tests of it turn it on).
    fn options() -> Options {
        Options {
            probe_remove_rate: 0.0,
            ..Options::default()
        }
    }

    fn prequal(n: u32, options: &Options) -> Prequal {
        Prequal::build(&[], (0..n).collect(), options)
    }

    fn pick_at(p: &Prequal, state: &State, now_ns: u64) -> u32 {
        let policy = Policy::new(&Options::default());
        let ctx = Ctx {
            now_ns,
            ..Ctx::bare(state, &policy)
        };
        p.pick(&[], &ctx)
    }

    /// The nodes with a probe in the pool, sorted.
    fn pooled(p: &Prequal) -> Vec<u32> {
        let mut nodes: Vec<u32> = p
            .probes()
            .iter()
            .map(|q| p.active[q.pos as usize])
            .collect();
        nodes.sort_unstable();
        nodes
    }

    #[test]
    fn latency_codes_keep_order_within_a_32nd() {
        let mut last = 0;
        let mut us = 0u64;
        while us < 1 << 37 {
            let code = latency_code(Duration::from_micros(us));
            assert!(code >= last, "{us} µs");
            last = code;
            if code < (1 << LATENCY_BITS) - 1 {
                let low = latency_of(code);
                assert!(low <= us && us < low + low / 32 + 1, "{us} µs as {low}");
            }
            us = us * 9 / 8 + 1;
        }
        assert_eq!(latency_code(Duration::MAX), (1 << LATENCY_BITS) - 1);
    }

    #[test]
    fn words_hold_every_field() {
        let probe = Probe {
            pos: (1 << POS_BITS) - 1,
            rif: MAX_RIF,
            latency: (1 << LATENCY_BITS) - 1,
            uses: (1 << USES_BITS) - 1,
            stamp: (1 << STAMP_BITS) - 1,
        };
        assert_eq!(Probe::unpack(probe.pack()), Some(probe));
        let small = Probe {
            pos: 3,
            rif: 0,
            latency: 7,
            uses: 1,
            stamp: 0,
        };
        assert_eq!(Probe::unpack(small.pack()), Some(small));
        assert_eq!(Probe::unpack(0), None);
    }

    #[test]
    fn with_every_probe_cold_the_fastest_is_picked() {
        let p = prequal(
            4,
            &Options {
                q_rif: 1.0,
                ..options()
            },
        );
        for (node, rif, latency) in [(0, 5, 40), (1, 1, 30), (2, 9, 10), (3, 3, 20)] {
            p.offer(node, rif, ms(latency), 0);
        }
        assert_eq!(pick_at(&p, &State::new(1), 0), 2);
    }

    #[test]
    fn with_every_probe_hot_the_least_loaded_is_picked() {
        let p = prequal(3, &options());
        for (node, rif, latency) in [(0, 4, 1), (1, 2, 50), (2, 7, 2)] {
            p.offer(node, rif, ms(latency), 0);
        }
        // The fleet was idle a moment ago: every probe now is above the 84th percentile.
        for _ in 0..RIF_HISTORY {
            p.pool.remember(0);
        }
        assert_eq!(p.pool.threshold(0.84), Some(0));
        assert_eq!(pick_at(&p, &State::new(1), 0), 1);
    }

    #[test]
    fn a_cold_probe_beats_a_faster_hot_one() {
        let p = prequal(16, &options());
        // RIFs 1..=16: the 84th percentile of 16 is the 14th smallest, so 15 and 16 are hot.
        for node in 0..16 {
            let latency = match node + 1 {
                16 => 1,
                15 => 2,
                7 => 5,
                _ => 10 + u64::from(node),
            };
            p.offer(node, node + 1, ms(latency), 0);
        }
        assert_eq!(p.pool.threshold(0.84), Some(14));
        assert_eq!(pick_at(&p, &State::new(1), 0), 6);
    }

    #[test]
    fn the_threshold_is_the_quantile_of_the_last_answers() {
        let p = prequal(2, &options());
        assert_eq!(p.pool.threshold(0.84), None);
        for rif in 1..=50 {
            p.pool.remember(rif);
        }
        // ceil(q · 50)-th smallest of 1..=50.
        assert_eq!(p.pool.threshold(0.84), Some(42));
        assert_eq!(p.pool.quantile(0.0, 50), Some(1));
        assert_eq!(p.pool.quantile(1.0, 50), Some(50));
        for rif in 51..=100 {
            p.pool.remember(rif);
        }
        // Only the last 64 (37..=100) count: the 32nd smallest is 68.
        assert_eq!(p.pool.quantile(0.5, 100), Some(68));
        assert_eq!(p.pool.threshold(0.5), Some(68));
        // Once the history is full the threshold is kept for THRESHOLD_REFRESH answers.
        for rif in 0..THRESHOLD_REFRESH as u32 - 1 {
            p.pool.remember(rif);
        }
        assert_eq!(p.pool.threshold(0.5), Some(68));
        p.pool.remember(0);
        assert_eq!(p.pool.threshold(0.5), p.pool.quantile(0.5, 108));
    }

    #[test]
    fn a_pick_raises_the_rif_and_spends_the_reuse_budget() {
        let p = prequal(
            3,
            &Options {
                probe_reuse: 3,
                ..options()
            },
        );
        p.offer(1, 5, ms(3), 0);
        let state = State::new(1);
        assert_eq!(pick_at(&p, &state, 0), 1);
        assert_eq!((p.probes()[0].rif, p.probes()[0].uses), (6, 1));
        assert_eq!(pick_at(&p, &state, 0), 1);
        assert_eq!((p.probes()[0].rif, p.probes()[0].uses), (7, 2));
        assert_eq!(pick_at(&p, &state, 0), 1);
        assert!(p.probes().is_empty(), "the third use spends the budget");
    }

    #[test]
    fn old_probes_leave_the_pool() {
        let p = prequal(
            3,
            &Options {
                max_probe_age: ms(100),
                probe_reuse: 10,
                ..options()
            },
        );
        let state = State::new(1);
        p.offer(2, 0, ms(1), 0);
        assert_eq!(pick_at(&p, &state, 90 * MS), 2);
        assert_eq!(pooled(&p), [2]);
        // Past its age (within the 1/32 resolution), the next pick drops it.
        pick_at(&p, &state, 110 * MS);
        assert!(p.probes().is_empty());
    }

    #[test]
    fn a_pool_untouched_for_long_is_cleared() {
        let p = prequal(
            3,
            &Options {
                max_probe_age: ms(100),
                probe_reuse: 10,
                ..options()
            },
        );
        p.offer(2, 0, ms(1), 0);
        // 256 ages later the stamp has wrapped and would read as new.
        let later = 256 * 100 * MS;
        assert!(!p.pool.expired(p.pool.tick(later), p.probes()[0]));
        pick_at(&p, &State::new(1), later);
        assert!(p.probes().is_empty());
    }

    #[test]
    fn an_answer_replaces_its_node_then_a_free_slot_then_the_oldest() {
        let p = prequal(
            4,
            &Options {
                probe_pool_size: 2,
                ..options()
            },
        );
        p.offer(0, 1, ms(1), 0);
        p.offer(1, 1, ms(1), 10 * MS);
        p.offer(2, 1, ms(1), 20 * MS);
        assert_eq!(pooled(&p), [1, 2], "node 0's probe was the oldest");
        p.offer(1, 9, ms(1), 30 * MS);
        assert_eq!(pooled(&p), [1, 2], "node 1's answer replaced its own");
        let one = p.probes().into_iter().find(|q| q.pos == 1).unwrap();
        assert_eq!(one.rif, 9);
        p.offer(3, 1, ms(1), 40 * MS);
        assert_eq!(pooled(&p), [1, 3], "node 2's probe is now the oldest");
    }

    #[test]
    fn the_slowest_probe_is_removed_at_the_removal_rate_when_none_is_hot() {
        let p = prequal(
            4,
            &Options {
                q_rif: 1.0,
                probe_reuse: 10,
                probe_remove_rate: 0.5,
                ..options()
            },
        );
        for (node, latency) in [(0, 10), (1, 20), (2, 30), (3, 40)] {
            p.offer(node, 1, ms(latency), 0);
        }
        // The fleet has been busier: nothing in the pool is hot, whatever picks add.
        for _ in 0..RIF_HISTORY {
            p.pool.remember(100);
        }
        let state = State::new(1);
        assert_eq!(pick_at(&p, &state, 0), 0);
        assert_eq!(pooled(&p), [0, 1, 2, 3], "half a removal owed");
        assert_eq!(pick_at(&p, &state, 0), 0);
        assert_eq!(pooled(&p), [0, 1, 2], "the slowest went");
    }

    #[test]
    fn the_hottest_probe_is_removed_first() {
        let p = prequal(
            4,
            &Options {
                probe_reuse: 10,
                probe_remove_rate: 1.0,
                ..options()
            },
        );
        for (node, latency) in [(0, 10), (1, 20), (2, 30)] {
            p.offer(node, 1, ms(latency), 0);
        }
        for _ in 0..RIF_HISTORY {
            p.pool.remember(1);
        }
        // Above the 84th percentile of mostly 1s: hot, and the fastest.
        p.offer(3, 50, ms(1), 0);
        assert_eq!(pick_at(&p, &State::new(1), 0), 0, "the fastest cold probe");
        assert_eq!(pooled(&p), [0, 1, 2], "the hottest went, not the slowest");
    }

    #[test]
    fn probes_fall_due_at_the_probe_rate() {
        let p = prequal(
            4,
            &Options {
                probe_rate: 1.5,
                ..options()
            },
        );
        let state = State::new(1);
        assert_eq!(p.take_probes_due(), 0);
        pick_at(&p, &state, 0);
        assert_eq!(p.take_probes_due(), 1);
        pick_at(&p, &state, 0);
        pick_at(&p, &state, 0);
        assert_eq!(
            p.take_probes_due(),
            3,
            "1.5 · 3 = 4.5, one taken, the half kept"
        );
        pick_at(&p, &state, 0);
        assert_eq!(p.take_probes_due(), 2);
        for _ in 0..1000 {
            pick_at(&p, &state, 0);
        }
        assert_eq!(p.take_probes_due(), MAX_PROBE_POOL_SIZE as usize, "capped");
    }

    #[test]
    fn an_empty_pool_picks_uniformly_at_random() {
        let p = prequal(4, &options());
        let state = State::new(7);
        let mut counts = [0u32; 4];
        let picks = 4000;
        for _ in 0..picks {
            counts[pick_at(&p, &state, 0) as usize] += 1;
        }
        let expected = f64::from(picks) / 4.0;
        let chi2: f64 = counts
            .iter()
            .map(|c| (f64::from(*c) - expected).powi(2) / expected)
            .sum();
        assert!(
            chi2 < 16.27,
            "{counts:?}: chi-square {chi2} (3 dof, p = 0.001)"
        );
    }

    #[test]
    fn answers_for_other_nodes_are_ignored() {
        // A routed group's selector holds some nodes only.
        let p = Prequal::build(&[], alloc::vec![1, 3, 5], &options());
        p.offer(2, 0, ms(1), 0);
        assert!(p.probes().is_empty());
        p.offer(3, 0, ms(1), 0);
        assert_eq!(pooled(&p), [3]);
        assert_eq!(pick_at(&p, &State::new(1), 0), 3);
    }

    #[test]
    fn the_sequenced_slot_swaps_whole_words() {
        let slot = SequencedSlot::new();
        assert_eq!(slot.load(), Some(0));
        assert!(slot.replace(0, u64::MAX - 1));
        assert!(!slot.replace(0, 5));
        assert_eq!(slot.load(), Some(u64::MAX - 1));
        assert!(slot.replace(u64::MAX - 1, 1 << 40 | 3));
        assert_eq!(slot.load(), Some(1 << 40 | 3));
    }

    /// Concurrent compare-and-swap increments lose nothing, and no reader sees a torn word
    /// (the two halves always agree).
    #[test]
    #[cfg_attr(miri, ignore)] // Threads spinning on one slot: slow interpreted.
    fn the_sequenced_slot_loses_no_update() {
        extern crate std;
        const THREADS: u64 = 4;
        const EACH: u64 = 5_000;
        let slot = SequencedSlot::new();
        let both = |n: u64| n << 32 | n;
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    let mut done = 0;
                    while done < EACH {
                        if let Some(w) = slot.load() {
                            assert_eq!(w >> 32, w & 0xFFFF_FFFF, "torn: {w:#x}");
                            if slot.replace(w, both((w >> 32) + 1)) {
                                done += 1;
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(slot.load(), Some(both(THREADS * EACH)));
    }
}
