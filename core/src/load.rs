//! Per-node load: what a balancer learns from the requests it routes (in-flight count,
//! completed requests, failures, a peak-EWMA latency), kept apart from choosing, as tower keeps
//! `load::PendingRequests` / `load::PeakEwma` apart from `balance::p2c`.
//!
//! Each node id owns one [`Load`] (an `Arc` of atomics) that every table built while the node
//! stays a member shares, so counters survive membership changes; a removed node's `Load` goes
//! with it, and re-adding the id starts fresh (pingora's `selection/least.rs` keeps its
//! per-backend counters the same way). Picks only read these atomics; leases and `report`
//! update them. Nothing here locks or allocates.
//!
//! Latency estimate: tower's `peak_ewma.rs` (after Finagle's `PeakEwma`): a sample above the
//! estimate replaces it at once (peak); a lower one is blended in with weight
//! `1 - exp(-Δt/decay)`, Δt being the time since the last update. Readers decay it towards 0
//! by the time since the last update, so a node that stopped answering slowly recovers.
//! Stored as `f32` nanoseconds (7 significant digits) in a 32-bit atomic, stamped with the
//! time in nanoseconds — in milliseconds, wrapping after 49.7 days, on targets without 64-bit
//! atomics (thumbv7em), where two samples within one millisecond blend as if simultaneous.

use crate::health::NodeHealth;
use crate::select::client_side_wrr::Reported;
use crate::sync::{AtomicCounter, AtomicU32, AtomicUsize, Ordering};
use core::time::Duration;

/// `ewma` before the first sample.
const NO_SAMPLE: u32 = u32::MAX; // a NaN pattern that `f32::to_bits` of a finite value never gives

/// One node's runtime counters. Shared through an `Arc` by every table holding the node.
#[derive(Debug)]
pub struct Load {
    in_flight: AtomicUsize,
    requests: AtomicCounter,
    failures: AtomicCounter,
    /// Peak-EWMA latency in nanoseconds, `f32` bits, or `NO_SAMPLE`.
    ewma: AtomicU32,
    /// When `ewma` was last set, in ticks of the caller's clock (see [`ticks`]).
    stamp: AtomicCounter,
    /// Failure streak, ejections, manual down, warm-up (see `health`).
    health: NodeHealth,
    /// The weight its load reports give (`client_side_wrr`).
    reported: Reported,
}

impl Default for Load {
    fn default() -> Load {
        Load {
            in_flight: AtomicUsize::new(0),
            requests: AtomicCounter::new(0),
            failures: AtomicCounter::new(0),
            ewma: AtomicU32::new(NO_SAMPLE),
            stamp: AtomicCounter::new(0),
            health: NodeHealth::default(),
            reported: Reported::default(),
        }
    }
}

/// How a request ended.
///
/// `Success` and `Failure` carry the request's latency; [`Outcome::Failed`] says *why* it
/// failed ([`Failure`]: an error, a timeout, or an overloaded node, with an optional
/// retry-after), and its latency is optional. `Failure(latency)` is shorthand for
/// `Failed(Failure::error().after(latency))`, and compares equal to it.
///
/// ```
/// use liblb_core::{Failure, Outcome};
/// use std::time::Duration;
///
/// let busy = Outcome::from(Failure::overloaded().retry_after(Duration::from_secs(5)));
/// assert_eq!(busy.failure().unwrap().retry_after, Some(Duration::from_secs(5)));
/// assert_eq!(
///     Outcome::Failure(Duration::from_millis(3)),
///     Outcome::Failed(Failure::error().after(Duration::from_millis(3))),
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    /// It succeeded after `latency`.
    Success(Duration),
    /// It failed with an error after `latency` (see [`FailureKind::Error`]).
    Failure(Duration),
    /// It failed, and here is how ([`Failure`]).
    Failed(Failure),
}

/// Why a request failed: its kind, its latency if known, and for an overloaded node how long
/// it asked to be left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// The kind of failure.
    pub kind: FailureKind,
    /// How long the request took, if known (a failure report needs none).
    pub latency: Option<Duration>,
    /// For [`FailureKind::Overloaded`]: how long the node asked clients to stay away (an HTTP
    /// `Retry-After`, gRPC's `grpc-retry-pushback-ms`). Ignored for the other kinds.
    pub retry_after: Option<Duration>,
}

/// The kinds of failure, as the request layer and health tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The node answered with an error, or the connection failed (the default kind). Counts
    /// towards its failure streak (`consecutive_failures`).
    Error,
    /// No answer in time. Counts towards the failure streak, as Envoy maps a local timeout to
    /// a 504 (`outlier_detection_impl.cc`, `resultToHttpCode`).
    Timeout,
    /// The node is alive but shedding load (HTTP 429, 503 with `Retry-After`, gRPC
    /// `RESOURCE_EXHAUSTED`). Neither extends nor breaks the failure streak: a busy node is
    /// not a broken one (linkerd's consecutive-failures breaker ignores 429s). With a
    /// retry-after the node takes no picks until then (capped by `max_retry_after_ms`).
    Overloaded,
}

impl FailureKind {
    /// Every kind, in the order of [`FailureKind::NAMES`].
    pub const ALL: [FailureKind; 3] = [
        FailureKind::Error,
        FailureKind::Timeout,
        FailureKind::Overloaded,
    ];
    /// The kinds' names, as every binding spells them.
    pub const NAMES: [&'static str; 3] = ["error", "timeout", "overloaded"];

    /// The kind's name (`"error"`, `"timeout"`, `"overloaded"`).
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The kind with this name, or [`crate::Error::InvalidOutcome`] naming the valid ones.
    pub fn from_name(name: &str) -> crate::Result<FailureKind> {
        (Self::NAMES.iter().position(|n| *n == name))
            .map(|i| Self::ALL[i])
            .ok_or_else(|| {
                crate::Error::InvalidOutcome(alloc::format!(
                    "unknown failure kind {name:?}; valid kinds: error, timeout, overloaded"
                ))
            })
    }
}

impl Failure {
    /// An error, latency unknown.
    pub const fn error() -> Failure {
        Failure::of(FailureKind::Error)
    }

    /// A timeout, latency unknown.
    pub const fn timeout() -> Failure {
        Failure::of(FailureKind::Timeout)
    }

    /// An overloaded node, no retry-after.
    pub const fn overloaded() -> Failure {
        Failure::of(FailureKind::Overloaded)
    }

    /// A failure of `kind`, latency and retry-after unknown.
    pub const fn of(kind: FailureKind) -> Failure {
        Failure {
            kind,
            latency: None,
            retry_after: None,
        }
    }

    /// The same failure, after `latency`.
    pub const fn after(self, latency: Duration) -> Failure {
        Failure {
            latency: Some(latency),
            ..self
        }
    }

    /// The same failure, asking clients to stay away for `retry_after`.
    pub const fn retry_after(self, retry_after: Duration) -> Failure {
        Failure {
            retry_after: Some(retry_after),
            ..self
        }
    }

    /// The retry-after that applies: an overloaded node's, if it gave one.
    pub fn pause(self) -> Option<Duration> {
        match self.kind {
            FailureKind::Overloaded => self.retry_after,
            _ => None,
        }
    }
}

impl From<Failure> for Outcome {
    fn from(failure: Failure) -> Outcome {
        Outcome::Failed(failure)
    }
}

impl PartialEq for Outcome {
    fn eq(&self, other: &Outcome) -> bool {
        match (self.failure(), other.failure()) {
            (None, None) => self.latency() == other.latency(),
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }
}

impl Outcome {
    /// The request's latency, if known (always, but for a [`Failure`] without one).
    pub fn latency(self) -> Option<Duration> {
        match self {
            Outcome::Success(latency) | Outcome::Failure(latency) => Some(latency),
            Outcome::Failed(failure) => failure.latency,
        }
    }

    /// Whether it succeeded.
    pub fn is_success(self) -> bool {
        matches!(self, Outcome::Success(_))
    }

    /// How it failed (`Failure(latency)` reads as an error after `latency`); `None` for a
    /// success.
    pub fn failure(self) -> Option<Failure> {
        match self {
            Outcome::Success(_) => None,
            Outcome::Failure(latency) => Some(Failure::error().after(latency)),
            Outcome::Failed(failure) => Some(failure),
        }
    }
}

/// What a failure costs in the latency estimate (options `failure_penalty_ms` and
/// `max_retry_after_ms`; see [`Load::record_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Penalty {
    /// The least a failure samples; zero = no penalty (a failure samples its own latency).
    pub base: Duration,
    /// The longest retry-after that counts.
    pub max_pause: Duration,
}

impl Penalty {
    /// No penalty: failures sample their latency, if any.
    pub const NONE: Penalty = Penalty {
        base: Duration::ZERO,
        max_pause: Duration::ZERO,
    };

    /// The sample `outcome` adds to the estimate, in nanoseconds, if any.
    fn sample(self, outcome: Outcome) -> Option<f32> {
        let Some(failure) = outcome.failure() else {
            return outcome.latency().map(nanos_f32);
        };
        if self.base.is_zero() {
            return failure.latency.map(nanos_f32);
        }
        let hint = failure.pause().unwrap_or_default().min(self.max_pause);
        let sample = (failure.latency.unwrap_or_default())
            .max(self.base)
            .max(hint);
        Some(nanos_f32(sample))
    }
}

/// `d` in nanoseconds as the nearest `f32` — through `u64` (a hardware conversion), not
/// `u128` (a software one, 60 instructions a sample); the same value below 2^64 ns (584 years).
fn nanos_f32(d: Duration) -> f32 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX) as f32
}

/// Nanoseconds per tick of the stored time stamps: 1 where the stamp is 64 bits wide.
pub(crate) const TICK_NS: u64 = if cfg!(target_has_atomic = "64") {
    1
} else {
    1_000_000
};

/// A clock reading in stamp ticks (wrapping where the stamp is 32 bits wide).
#[allow(
    clippy::unnecessary_cast,
    reason = "AtomicCounter is usize without 64-bit atomics"
)]
pub(crate) fn ticks(now_ns: u64) -> u64 {
    ((now_ns / TICK_NS) as usize as u64) & (stamp_mask())
}

/// The values a stamp can hold.
pub(crate) const fn stamp_mask() -> u64 {
    if cfg!(target_has_atomic = "64") {
        u64::MAX
    } else {
        usize::MAX as u64
    }
}

/// Ticks from `then` to `now`, modulo the stamp width; a stamp "in the future" (a racing
/// update) counts as no time at all.
pub(crate) fn elapsed(now: u64, then: u64) -> u64 {
    let d = now.wrapping_sub(then) & stamp_mask();
    if d > stamp_mask() / 2 { 0 } else { d }
}

/// `exp(-elapsed / decay)`, the weight the old estimate keeps after `elapsed` ticks.
fn keep(elapsed: u64, decay: Duration) -> f32 {
    let decay_ns = nanos_f32(decay).max(1.0);
    libm::expf(-((elapsed * TICK_NS) as f32) / decay_ns)
}

impl Load {
    /// Requests started and not yet ended.
    pub fn in_flight(&self) -> usize {
        // Relaxed: a pick reads a heuristic; no other memory is published through it.
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Requests that ended with an outcome (success or failure).
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed) as u64
    }

    /// Requests that ended in failure.
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed) as u64
    }

    /// The latency estimate as of its last sample, or `None` before any sample.
    pub fn latency(&self) -> Option<Duration> {
        let bits = self.ewma.load(Ordering::Relaxed);
        (bits != NO_SAMPLE).then(|| Duration::from_nanos(f32::from_bits(bits) as u64))
    }

    /// The latency estimate in nanoseconds at `now_ns`, decayed towards 0 since its last
    /// sample (tower's `RttEstimate::decay`), or `None` before any sample.
    pub fn decayed_latency_ns(&self, now_ns: u64, decay: Duration) -> Option<f32> {
        let bits = self.ewma.load(Ordering::Relaxed);
        if bits == NO_SAMPLE {
            return None;
        }
        let since = elapsed(ticks(now_ns), self.stamp());
        Some(f32::from_bits(bits) * keep(since, decay))
    }

    /// The node's health counters.
    pub(crate) fn health(&self) -> &NodeHealth {
        &self.health
    }

    /// The weight its load reports give (`client_side_wrr`).
    pub(crate) fn reported(&self) -> &Reported {
        &self.reported
    }

    /// A request to this node starts (in-flight + 1).
    pub fn start(&self) {
        // Relaxed: counts only (see `in_flight`); the matching `end` is on the same Load.
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request started with [`Load::start`] ends: in-flight - 1, and the outcome, if any
    /// (`None` = cancelled: nothing counted), is recorded at `now_ns`.
    pub fn end(&self, outcome: Option<Outcome>, now_ns: u64, decay: Duration) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(outcome) = outcome {
            self.record(outcome, now_ns, decay);
        }
    }

    /// Records a finished request's outcome (requests + 1, failures + 1 on failure, latency
    /// into the estimate) without touching in-flight: `report` for callers that track
    /// requests themselves. A failure's latency counts as is, and one without a latency adds
    /// no sample; balancers also apply their `failure_penalty_ms` (see [`Load::record_with`]).
    pub fn record(&self, outcome: Outcome, now_ns: u64, decay: Duration) {
        self.record_with(outcome, now_ns, decay, Penalty::NONE);
    }

    /// [`Load::record`] with a failure penalty (linkerd's failure-aware peak-EWMA): a failure
    /// samples at least `penalty.base`, or its retry-after (capped at `penalty.max_pause`)
    /// when longer, and never less than the current estimate — so a node that fails fast
    /// looks slow instead of fast (`linkerd/load-biaser/src/lib.rs`: `effective_rtt` =
    /// `max(hint, penalty)`, recorded as `add_peak(max(effective, rtt.get_at(now)))`).
    pub fn record_with(&self, outcome: Outcome, now_ns: u64, decay: Duration, penalty: Penalty) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let failure = outcome.failure();
        if failure.is_some() {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        let now = ticks(now_ns);
        let Some(sample) = penalty.sample(outcome) else {
            return; // a failure of unknown latency, without a penalty: nothing learned
        };
        let floor = failure.is_some() && !penalty.base.is_zero();
        // The estimate is one atomic word updated by compare-and-swap, so concurrent samples
        // are never lost; the stamp is written after it (a racing reader may decay by a
        // slightly wrong interval, which only nudges a heuristic).
        let _ = self
            .ewma
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                if bits == NO_SAMPLE {
                    return Some(sample.to_bits());
                }
                let w = keep(elapsed(now, self.stamp()), decay);
                let current = f32::from_bits(bits);
                // A penalised failure never lowers the estimate: at least its decayed value.
                let sample = if floor {
                    sample.max(current * w)
                } else {
                    sample
                };
                if current < sample {
                    return Some(sample.to_bits());
                }
                // Between the two, whatever f32 rounding does (here `sample <= current`).
                let mean = current * w + sample * (1.0 - w);
                Some(mean.min(current).max(sample).to_bits())
            });
        self.stamp.store(now as _, Ordering::Relaxed);
    }

    /// The stamp of the last update, in ticks.
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::Relaxed) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECAY: Duration = Duration::from_secs(10);
    const MS: u64 = 1_000_000;

    #[test]
    fn the_estimate_never_leaves_the_range_of_its_samples() {
        // A weighted mean of equal samples is that sample; in f32 `c * w + s * (1 - w)` can
        // round one ulp above it (seen as 5,000,000,512 ns after two 5 s penalties, 1.1 s
        // apart). Every interval up to 20 s, in 1 ms steps, for equal and unequal samples.
        let penalty = Penalty {
            base: Duration::from_secs(5),
            max_pause: Duration::from_secs(60),
        };
        let timeout = Outcome::from(Failure::timeout());
        // (Miri interprets libm's expf slowly: every 97th interval there.)
        let step = if cfg!(miri) { 97 } else { 1 };
        for elapsed_ms in (1..20_000).step_by(step) {
            let load = Load::default();
            load.record_with(timeout, 0, DECAY, penalty);
            load.record_with(timeout, elapsed_ms * MS, DECAY, penalty);
            assert_eq!(
                load.latency(),
                Some(Duration::from_secs(5)),
                "{elapsed_ms} ms"
            );
            load.record(
                Outcome::Success(Duration::from_millis(3)),
                2 * elapsed_ms * MS,
                DECAY,
            );
            let after = load.latency().unwrap();
            assert!(after <= Duration::from_secs(5) && after >= Duration::from_millis(3));
        }
    }

    #[test]
    fn peaks_at_once_and_decays_towards_lower_samples() {
        let load = Load::default();
        assert_eq!(load.latency(), None);
        load.record(Outcome::Success(Duration::from_millis(10)), 0, DECAY);
        assert_eq!(load.latency(), Some(Duration::from_millis(10)));
        // A peak replaces the estimate at once.
        load.record(
            Outcome::Failure(Duration::from_millis(100)),
            1000 * MS,
            DECAY,
        );
        assert_eq!(load.latency(), Some(Duration::from_millis(100)));
        // A lower sample one decay period later keeps exp(-1) of the old estimate.
        load.record(
            Outcome::Success(Duration::from_millis(10)),
            11_000 * MS,
            DECAY,
        );
        let expected = 100.0 * libm::expf(-1.0) + 10.0 * (1.0 - libm::expf(-1.0));
        let got = load.latency().unwrap().as_secs_f64() * 1e3;
        assert!(
            (got - f64::from(expected)).abs() < 1e-3,
            "{got} vs {expected}"
        );
        assert_eq!((load.requests(), load.failures()), (3, 1));
        // Readers decay it towards 0.
        let later = load.decayed_latency_ns(21_000 * MS, DECAY).unwrap();
        assert!((later / (expected * 1e6) - libm::expf(-1.0)).abs() < 1e-4);
    }

    /// Samples closer together than a millisecond still blend by their true distance (the
    /// stamp is in nanoseconds where 64-bit atomics exist).
    #[test]
    #[cfg(target_has_atomic = "64")]
    fn samples_within_a_millisecond_blend() {
        let load = Load::default();
        let decay = Duration::from_millis(1);
        load.record(Outcome::Success(Duration::from_millis(100)), 0, decay);
        load.record(Outcome::Success(Duration::from_millis(10)), MS / 2, decay);
        let keep = libm::expf(-0.5);
        let expected = 100.0 * keep + 10.0 * (1.0 - keep);
        let got = load.latency().unwrap().as_secs_f32() * 1e3;
        assert!((got - expected).abs() < 1e-3, "{got} vs {expected}");
    }

    #[test]
    fn in_flight_counts_starts_and_ends() {
        let load = Load::default();
        load.start();
        load.start();
        assert_eq!(load.in_flight(), 2);
        load.end(None, 0, DECAY);
        assert_eq!((load.in_flight(), load.requests()), (1, 0));
        load.end(Some(Outcome::Success(Duration::ZERO)), 0, DECAY);
        assert_eq!((load.in_flight(), load.requests()), (0, 1));
    }
}
