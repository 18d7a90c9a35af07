//! Health: passive outlier ejection, fail-open (panic), manual up/down and slow start — all
//! without rebuilding tables or touching weights.
//!
//! Sources: Envoy's outlier detection (`consecutive_5xx`, `base_ejection_time` multiplied by the
//! times ejected and capped by `max_ejection_time`, `max_ejection_percent` with at least one
//! host), its healthy panic threshold (below 50% healthy, route to every host) and its slow
//! start (`slow_start_window`, `aggression`, `min_weight_percent`:
//! `weight · max(min_weight_percent, (t / window)^(1 / aggression))`); nginx's `max_fails` and
//! HAProxy's `observe` are the same idea with other knobs.
//!
//! **Per node** ([`NodeHealth`], inside each node's `Load`, so it follows the node id across
//! membership changes like the other counters): the current failure streak, how many times the
//! node was ejected, until when, whether it was marked down, and since when it is warming up.
//! Reports update them with atomics; a node's status at time `now` is read from them alone.
//!
//! **Per balancer** ([`Summary`], inside `State`): whether any node may be unusable or warming
//! at all. While none is, a pick reads one flag and nothing else (no clock, no per-node check).
//! Otherwise picks check their candidates and the summary is recomputed by one scan whenever
//! an event (ejection, mark down/up, membership change) marks it stale or the next scheduled
//! change (an ejection ending, a warm-up ending) is due: a scan per health event, not per pick.
//! The scan also decides panic.
//!
//! Ejections are decided under a try-lock flag: a failure that finds another ejection in
//! progress leaves its node's streak standing and the next failure tries again, so the
//! `max_ejection_percent` cap holds without a lock on the pick path.
//!
//! Times are the caller's clock in stamp ticks (`load::ticks`): nanoseconds where 64-bit
//! atomics exist, milliseconds (wrapping after 49.7 days) elsewhere.

use crate::load::{Load, TICK_NS, elapsed, stamp_mask, ticks};
use crate::options::Options;
use crate::sync::{AtomicCounter, AtomicU32, Ordering};
use alloc::sync::Arc;
use core::sync::atomic::AtomicBool;
use core::time::Duration;

/// A node's health as of some time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// In service at its full weight.
    Healthy,
    /// In service, ramping up: `share` of its weight (slow start), until `until_ns`.
    Warming {
        /// The fraction of its weight it gets now, in `min_weight_percent / 100 ..= 1`.
        share: f32,
        /// When the ramp ends, by the balancer's clock (nanoseconds).
        until_ns: u64,
    },
    /// Ejected after consecutive failures, until `until_ns` (nanoseconds, balancer's clock).
    Ejected {
        /// When the ejection ends.
        until_ns: u64,
    },
    /// Marked down by the caller (`mark_down`) until marked up.
    Down,
}

impl Status {
    /// When a warm-up or an ejection ends (nanoseconds, balancer's clock); `None` otherwise.
    pub fn until_ns(self) -> Option<u64> {
        match self {
            Status::Warming { until_ns, .. } | Status::Ejected { until_ns } => Some(until_ns),
            Status::Healthy | Status::Down => None,
        }
    }

    /// Whether picks may choose the node (ignoring panic).
    pub fn usable(self) -> bool {
        matches!(self, Status::Healthy | Status::Warming { .. })
    }

    /// The status's name: `healthy`, `warming`, `ejected` or `down`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::Warming { .. } => "warming",
            Status::Ejected { .. } => "ejected",
            Status::Down => "down",
        }
    }
}

/// The health options a table keeps (see [`Options`] for each).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    consecutive_failures: u32,
    base_ejection_ticks: u64,
    max_ejection_ticks: u64,
    max_ejection_percent: u32,
    panic_threshold: u32,
    window_ticks: u64,
    aggression: f32,
    min_share: f32,
    /// `hash_balance_factor`, 0 = off.
    pub(crate) balance_factor: u32,
}

impl Policy {
    /// Whether slow start is on.
    pub(crate) fn is_slow_start(&self) -> bool {
        self.window_ticks > 0
    }

    pub(crate) fn new(options: &Options) -> Policy {
        let ticks_of = |d: Duration| (d.as_nanos() as u64) / TICK_NS;
        Policy {
            consecutive_failures: options.consecutive_failures,
            base_ejection_ticks: ticks_of(options.base_ejection_time),
            max_ejection_ticks: ticks_of(options.max_ejection_time),
            max_ejection_percent: options.max_ejection_percent,
            panic_threshold: options.panic_threshold,
            window_ticks: ticks_of(options.slow_start_window),
            aggression: options.slow_start_aggression as f32,
            min_share: options.min_weight_percent as f32 / 100.0,
            balance_factor: options.hash_balance_factor,
        }
    }
}

/// Whether tick `a` is after tick `b` (modulo the stamp width: within half of it).
fn after(a: u64, b: u64) -> bool {
    a != b && elapsed(a, b) != 0
}

/// Ticks to nanoseconds (the width-limited tick count back to the caller's scale).
fn to_ns(t: u64) -> u64 {
    t.saturating_mul(TICK_NS)
}

/// One node's health counters. Part of its `Load`.
#[derive(Debug, Default)]
pub struct NodeHealth {
    /// Consecutive failures since the last success or ejection.
    streak: AtomicU32,
    /// Ejections so far (the multiplier), as of the last ejection.
    ejections: AtomicU32,
    /// When the last ejection ends, in ticks; meaningful when `ejections > 0`.
    until: AtomicCounter,
    /// Marked down by the caller.
    down: AtomicBool,
    /// Whether a warm-up started at `since` (slow start).
    warm: AtomicBool,
    /// When the node's current warm-up started, in ticks.
    since: AtomicCounter,
}

impl NodeHealth {
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn load(counter: &AtomicCounter) -> u64 {
        counter.load(Ordering::Relaxed) as u64
    }

    /// The status at tick `now` under `policy`.
    pub(crate) fn status(&self, now: u64, policy: &Policy) -> Status {
        if self.down.load(Ordering::Relaxed) {
            return Status::Down;
        }
        if self.ejections.load(Ordering::Relaxed) > 0 {
            let until = Self::load(&self.until);
            if after(until, now) {
                return Status::Ejected {
                    until_ns: to_ns(until),
                };
            }
        }
        if policy.window_ticks > 0 && self.warm.load(Ordering::Relaxed) {
            let since = Self::load(&self.since);
            let t = elapsed(now, since);
            if t < policy.window_ticks && !after(since, now) {
                let time = (t.max(1) as f32) / policy.window_ticks as f32;
                let share = libm::powf(time, 1.0 / policy.aggression).max(policy.min_share);
                let until_ns = to_ns(since.wrapping_add(policy.window_ticks) & stamp_mask());
                return Status::Warming { share, until_ns };
            }
        }
        Status::Healthy
    }

    /// Starts a warm-up at tick `now` (a node added, or marked up).
    pub(crate) fn warm_from(&self, now: u64) {
        self.since.store(now as _, Ordering::Relaxed);
        self.warm.store(true, Ordering::Relaxed);
    }

    /// Marks the node down (`true`) or up; up starts a warm-up at `now`.
    pub(crate) fn set_down(&self, down: bool, now: u64) {
        if !down && self.down.load(Ordering::Relaxed) {
            self.warm_from(now);
        }
        self.down.store(down, Ordering::Relaxed);
    }

    /// Counts an outcome into the streak; true when a failure brings it to the threshold.
    fn count(&self, success: bool, policy: &Policy) -> bool {
        if success {
            // Only write when there is a streak: successes are the common case, and a store
            // would dirty the line for every reader.
            if self.streak.load(Ordering::Relaxed) != 0 {
                self.streak.store(0, Ordering::Relaxed);
            }
            return false;
        }
        let streak = self
            .streak
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        policy.consecutive_failures > 0 && streak >= policy.consecutive_failures
    }

    /// Ejects the node at tick `now`: for `base · n`, capped, where `n` is the ejection
    /// count, less one for every base period the node has stayed in since its last ejection
    /// (Envoy decrements the multiplier while a host stays healthy), plus one.
    fn eject(&self, now: u64, policy: &Policy) -> u64 {
        let mut n = self.ejections.load(Ordering::Relaxed);
        if n > 0 {
            let returned = Self::load(&self.until);
            let stayed = elapsed(now, returned) / policy.base_ejection_ticks.max(1);
            n = n.saturating_sub(u32::try_from(stayed).unwrap_or(u32::MAX));
        }
        let n = n.saturating_add(1);
        let length = policy
            .base_ejection_ticks
            .saturating_mul(u64::from(n))
            .min(policy.max_ejection_ticks)
            .max(1);
        let until = now.wrapping_add(length) & stamp_mask();
        self.until.store(until as _, Ordering::Relaxed);
        self.ejections.store(n, Ordering::Relaxed);
        self.streak.store(0, Ordering::Relaxed);
        // Back from ejection, the node warms up (if slow start is on).
        self.since.store(until as _, Ordering::Relaxed);
        self.warm.store(true, Ordering::Relaxed);
        until
    }
}

/// What a balancer knows about its nodes' health as a whole. Part of `State`.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    /// Some node may be unusable or warming: picks must check. Cleared by a scan that finds
    /// every node healthy with nothing scheduled.
    check: AtomicBool,
    /// An event happened since the last scan.
    stale: AtomicBool,
    /// The next scheduled change (an ejection or a warm-up ending), in ticks, while `check`.
    next: AtomicCounter,
    /// Whether `next` holds a time (else nothing is scheduled).
    scheduled: AtomicBool,
    /// Too few nodes are healthy: picks ignore health.
    panic: AtomicBool,
    /// A scan is running.
    scanning: AtomicBool,
    /// An ejection is being decided.
    ejecting: AtomicBool,
}

/// How a pick treats health, decided once per pick.
#[derive(Clone, Copy)]
pub(crate) enum Gate {
    /// Every node is usable at full weight (or panic): nothing to check.
    Open,
    /// Check candidates at tick `now`.
    Check { now: u64 },
}

impl Summary {
    /// Something changed (an ejection, a node marked down or up, new members): picks check
    /// and the next one rescans.
    pub(crate) fn touch(&self) {
        // SeqCst with the scan's re-check of `stale` below: either the scan sees this event's
        // `stale`, or this `check` store comes after the scan's and stands.
        self.stale.store(true, Ordering::SeqCst);
        self.check.store(true, Ordering::SeqCst);
    }

    /// Whether a pick must read the clock: only when some node may be unusable or warming.
    #[inline]
    pub(crate) fn checking(&self) -> bool {
        self.check.load(Ordering::Acquire)
    }

    /// Whether the last scan found the balancer in panic.
    pub(crate) fn panic(&self) -> bool {
        self.panic.load(Ordering::Relaxed)
    }

    /// The gate for a pick at `now_ns` over `loads` (the table's nodes; `active` are those
    /// with weight > 0).
    pub(crate) fn gate(
        &self,
        now_ns: u64,
        loads: &[Arc<Load>],
        active: &mut dyn Iterator<Item = usize>,
        policy: &Policy,
    ) -> Gate {
        if !self.checking() {
            return Gate::Open;
        }
        let now = ticks(now_ns);
        let due = self.stale.load(Ordering::SeqCst)
            || (self.scheduled.load(Ordering::Relaxed)
                && !after(NodeHealth::load(&self.next), now));
        if due {
            self.scan(now, loads, active, policy);
            if !self.checking() {
                return Gate::Open; // nothing unusable or warming after all
            }
        }
        if self.panic.load(Ordering::Relaxed) {
            Gate::Open
        } else {
            Gate::Check { now }
        }
    }

    /// Recomputes the summary by one pass over the active nodes (one scan at a time; a pick
    /// that finds one running goes on with the current summary).
    fn scan(
        &self,
        now: u64,
        loads: &[Arc<Load>],
        active: &mut dyn Iterator<Item = usize>,
        policy: &Policy,
    ) {
        if self
            .scanning
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.stale.store(false, Ordering::SeqCst);
        let (mut total, mut healthy, mut pending) = (0usize, 0usize, false);
        let mut next: Option<u64> = None;
        let mut sooner = |t: u64| {
            let t = t / TICK_NS;
            next = Some(match next {
                Some(n) if !after(n, t) => n,
                _ => t,
            });
        };
        for i in active {
            total += 1;
            match loads[i].health().status(now, policy) {
                Status::Healthy => healthy += 1,
                Status::Warming { until_ns, .. } => {
                    healthy += 1;
                    pending = true;
                    sooner(until_ns);
                }
                Status::Ejected { until_ns } => {
                    pending = true;
                    sooner(until_ns);
                }
                Status::Down => pending = true,
            }
        }
        let panic = policy.panic_threshold > 0
            && (healthy as u64) * 100 < u64::from(policy.panic_threshold) * total as u64;
        self.panic.store(panic, Ordering::Relaxed);
        if let Some(next) = next {
            self.next.store(next as _, Ordering::Relaxed);
        }
        self.scheduled.store(next.is_some(), Ordering::Relaxed);
        self.check.store(pending, Ordering::SeqCst);
        // An event during the scan: keep checking so the next pick rescans.
        if self.stale.load(Ordering::SeqCst) {
            self.check.store(true, Ordering::SeqCst);
        }
        self.scanning.store(false, Ordering::Release);
    }

    /// Counts an outcome for the node with `index`; ejects it when its streak reaches the
    /// threshold and the cap allows. Returns whether it was ejected.
    pub(crate) fn record(
        &self,
        index: usize,
        success: bool,
        now_ns: u64,
        loads: &[Arc<Load>],
        active: &mut dyn Iterator<Item = usize>,
        policy: &Policy,
    ) -> bool {
        let health = loads[index].health();
        let now = ticks(now_ns);
        // Outcomes of requests that were in flight when the node was ejected or marked down do
        // not count towards its next streak: it starts clean when it returns.
        if !health.status(now, policy).usable() {
            return false;
        }
        if !health.count(success, policy) {
            return false;
        }
        if self
            .ejecting
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false; // another ejection is being decided; the next failure retries
        }
        let (mut total, mut ejected) = (0usize, 0usize);
        for i in active {
            total += 1;
            if matches!(
                loads[i].health().status(now, policy),
                Status::Ejected { .. }
            ) {
                ejected += 1;
            }
        }
        let cap = (total * policy.max_ejection_percent as usize / 100).max(1);
        let eject = ejected < cap;
        if eject {
            health.eject(now, policy);
            self.touch();
        }
        self.ejecting.store(false, Ordering::Release);
        eject
    }
}

/// A uniform number in `[0, 1)` from 64 random bits (the top 24, exact in an `f32`).
#[inline]
pub(crate) fn unit(r: u64) -> f32 {
    (r >> 40) as f32 / (1u64 << 24) as f32
}
