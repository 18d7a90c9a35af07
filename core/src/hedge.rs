//! Hedging: sending a second attempt of a slow request to another node, before the first has
//! failed, and taking whichever answers first — the tail-latency cure of "The Tail at Scale"
//! (Dean & Barroso, 2013), as Finagle's `BackupRequestFilter` and gRPC's `hedgingPolicy` do.
//! A [`Hedging`] policy says *when* a request sends its hedge; the request
//! ([`crate::Request::hedge`]) sends it to the next untried node, and the caller keeps the
//! first answer and cancels the other attempts (a cancelled lease counts nothing).
//!
//! - [`Hedging::after`]: a fixed delay, gRPC's `hedgingPolicy.hedgingDelay` (gRFC A6): the
//!   next attempt goes out each `delay` without an answer, up to the request's
//!   `max_attempts`; retry throttling (a [`crate::RetryThrottle`] budget) still applies.
//! - [`Hedging::percentile`]: Finagle's `BackupRequestFilter`
//!   (`finagle-core/.../client/BackupRequestFilter.scala`): with `max_extra_load` (e.g. 1%),
//!   a hedge goes out after the `1 − max_extra_load` percentile (p99) of the latencies of
//!   recent requests (a [`LatencyWindow`]: 3 buckets of 10 s, milliseconds 1 to 2000,
//!   refreshed every 3 s; at least 1 ms; never when it reaches 2000 ms or before the first
//!   refresh), and only while its own retry budget allows (`ttl` 10 s, no reserve,
//!   `max_extra_load` per request: every request deposits, every hedge withdraws) — so
//!   hedges add at most `max_extra_load` to the load, whatever the latencies do.

use crate::budget::RetryBudget;
use crate::load::{elapsed, ticks};
use crate::sync::{AtomicCounter, Ordering};
use crate::{Error, Result};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use core::time::Duration;

/// The highest latency a [`LatencyWindow`] tells apart, in milliseconds (Finagle's
/// `DefaultHighestTrackableValue`); longer ones count as this.
pub const HIGHEST_LATENCY_MS: u64 = 2000;

/// A sliding window of request latencies for percentiles, Finagle's
/// `WindowedPercentileHistogram` (`finagle-core/.../util/WindowedPercentileHistogram.scala`):
/// `buckets` histograms of `bucket` each; recording goes to the current one, and every
/// `bucket` it replaces the oldest of the completed ones; percentiles are read over the
/// completed ones only. Milliseconds, exact from 0 to [`HIGHEST_LATENCY_MS`] (one counter per
/// millisecond, where Finagle's HdrHistogram keeps three significant digits: the same answers
/// in that range). Lock-free: a rotation runs under a try-lock flag, and a record that races it
/// may land in the next bucket.
pub struct LatencyWindow {
    bucket_ticks: u64,
    /// The completed histograms, `buckets` of them.
    done: Vec<Box<[AtomicU32]>>,
    /// The one being recorded.
    current: Box<[AtomicU32]>,
    /// The completed histogram the next rotation replaces.
    position: AtomicUsize,
    /// When the current bucket ends (ticks).
    ends: AtomicCounter,
    rotating: AtomicBool,
}

fn histogram() -> Box<[AtomicU32]> {
    (0..=HIGHEST_LATENCY_MS)
        .map(|_| AtomicU32::new(0))
        .collect()
}

impl LatencyWindow {
    /// Finagle's defaults: 3 buckets of 10 s.
    pub const DEFAULT_BUCKETS: usize = 3;
    /// See [`LatencyWindow::DEFAULT_BUCKETS`].
    pub const DEFAULT_BUCKET: Duration = Duration::from_secs(10);

    /// A window of `buckets` (1 to 60) buckets of `bucket` (at least 1 ms), starting at
    /// `now_ns`.
    pub fn new(buckets: usize, bucket: Duration, now_ns: u64) -> Result<LatencyWindow> {
        if !(1..=60).contains(&buckets) {
            return Err(Error::InvalidOptionValue {
                option: "buckets",
                value: alloc::format!("{buckets}"),
                expected: "1 to 60",
            });
        }
        if bucket < Duration::from_millis(1) {
            return Err(Error::InvalidOptionValue {
                option: "bucket_ms",
                value: alloc::format!("{}", bucket.as_millis()),
                expected: "at least 1 (milliseconds)",
            });
        }
        let bucket_ticks = ticks(bucket.as_nanos() as u64).max(1);
        Ok(LatencyWindow {
            bucket_ticks,
            done: (0..buckets).map(|_| histogram()).collect(),
            current: histogram(),
            position: AtomicUsize::new(0),
            ends: AtomicCounter::new(ticks(now_ns).wrapping_add(bucket_ticks) as _),
            rotating: AtomicBool::new(false),
        })
    }

    /// Records one latency at `now_ns`.
    pub fn record(&self, latency: Duration, now_ns: u64) {
        self.rotate(now_ns);
        let ms = (latency.as_millis() as u64).min(HIGHEST_LATENCY_MS);
        self.current[ms as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The latency at percentile `p` (0 to 1) of the completed buckets at `now_ns`, in
    /// milliseconds: HdrHistogram's `getValueAtPercentile` (the smallest value with at least
    /// `ceil(p · count)` values at or below it, at least one), or 0 when they are empty.
    pub fn percentile(&self, p: f64, now_ns: u64) -> u64 {
        self.rotate(now_ns);
        let count = |ms: usize| -> u64 {
            (self.done.iter())
                .map(|h| u64::from(h[ms].load(Ordering::Relaxed)))
                .sum()
        };
        let total: u64 = (0..=HIGHEST_LATENCY_MS as usize).map(count).sum();
        if total == 0 {
            return 0;
        }
        // HdrHistogram nudges the percentile down by one ulp before the ceiling, so that
        // p · count landing exactly on an integer is not pushed up by rounding.
        let p = next_down(p.clamp(0.0, 1.0)).max(0.0);
        let wanted = (libm::ceil(p * total as f64) as u64).max(1);
        let mut seen = 0;
        for ms in 0..=HIGHEST_LATENCY_MS as usize {
            seen += count(ms);
            if seen >= wanted {
                return ms as u64;
            }
        }
        HIGHEST_LATENCY_MS
    }

    /// Completes the current bucket if its time is up: it replaces the oldest completed one
    /// (and every further bucket period that passed empties one more).
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn rotate(&self, now_ns: u64) {
        let now = ticks(now_ns);
        let ends = self.ends.load(Ordering::Acquire) as u64;
        if elapsed(now, ends) == 0 && now != ends {
            return; // not yet (the common case: one load)
        }
        if (self.rotating)
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let ends = self.ends.load(Ordering::Relaxed) as u64;
        let late = elapsed(now, ends);
        if late > 0 || now == ends {
            let periods = late / self.bucket_ticks + 1;
            let n = self.done.len();
            let mut position = self.position.load(Ordering::Relaxed);
            for period in 0..periods.min(n as u64 + 1) {
                let target = &self.done[position];
                for (slot, counter) in target.iter().zip(self.current.iter()) {
                    // The current bucket's counts the first time, empty ones after.
                    let value = if period == 0 {
                        counter.swap(0, Ordering::Relaxed)
                    } else {
                        0
                    };
                    slot.store(value, Ordering::Relaxed);
                }
                position = (position + 1) % n;
            }
            self.position.store(position, Ordering::Relaxed);
            let next = ends.wrapping_add(periods.saturating_mul(self.bucket_ticks));
            self.ends.store(next as _, Ordering::Release);
        }
        self.rotating.store(false, Ordering::Release);
    }
}

impl core::fmt::Debug for LatencyWindow {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LatencyWindow")
            .field("buckets", &self.done.len())
            .field("bucket_ticks", &self.bucket_ticks)
            .finish()
    }
}

/// The largest `f64` below `x` (for `x` > 0), as Java's `Math.nextAfter(x, -inf)`.
fn next_down(x: f64) -> f64 {
    if x > 0.0 {
        f64::from_bits(x.to_bits() - 1)
    } else {
        x
    }
}

/// When requests send hedges (see the module docs).
#[derive(Debug)]
pub struct Hedging {
    rule: Rule,
}

#[derive(Debug)]
enum Rule {
    Fixed(Duration),
    Percentile(Box<Percentile>),
}

/// Finagle's `BackupRequestFilter` state.
#[derive(Debug)]
struct Percentile {
    /// `1 − max_extra_load`.
    p: f64,
    window: LatencyWindow,
    budget: RetryBudget,
    /// The current delay in milliseconds; `u64::MAX` = do not hedge.
    send_after_ms: AtomicU64,
    /// When the delay is next refreshed (ticks).
    refresh_at: AtomicCounter,
    refreshing: AtomicBool,
}

/// How often Finagle refreshes the percentile (`RefreshPercentileInterval`).
const REFRESH: Duration = Duration::from_secs(3);

impl Hedging {
    /// Hedge after a fixed `delay` without an answer (gRPC's `hedgingDelay`; zero sends the
    /// next attempt at once).
    pub fn after(delay: Duration) -> Hedging {
        Hedging {
            rule: Rule::Fixed(delay),
        }
    }

    /// Hedge after the `1 − max_extra_load` percentile of recent latencies, adding at most
    /// `max_extra_load` (above 0, below 1; Finagle's range is `[0, 1)`, where 0 turns hedging
    /// off) to the load, starting at `now_ns`.
    pub fn percentile(max_extra_load: f64, now_ns: u64) -> Result<Hedging> {
        if !(max_extra_load > 0.0 && max_extra_load < 1.0) {
            return Err(Error::InvalidOptionValue {
                option: "max_extra_load",
                value: alloc::format!("{max_extra_load}"),
                expected: "a number above 0 and below 1",
            });
        }
        let window = LatencyWindow::new(
            LatencyWindow::DEFAULT_BUCKETS,
            LatencyWindow::DEFAULT_BUCKET,
            now_ns,
        )?;
        let budget = RetryBudget::new(Duration::from_secs(10), 0, max_extra_load, now_ns)?;
        let refresh = ticks(REFRESH.as_nanos() as u64);
        Ok(Hedging {
            rule: Rule::Percentile(Box::new(Percentile {
                p: 1.0 - max_extra_load,
                window,
                budget,
                send_after_ms: AtomicU64::new(u64::MAX),
                refresh_at: AtomicCounter::new(ticks(now_ns).wrapping_add(refresh) as _),
                refreshing: AtomicBool::new(false),
            })),
        })
    }

    /// How long a request waits for an answer before it sends a hedge, at `now_ns`; `None`:
    /// it sends none (a percentile rule before its first refresh, or at its 2 s ceiling).
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    pub fn delay(&self, now_ns: u64) -> Option<Duration> {
        let rule = match &self.rule {
            Rule::Fixed(delay) => return Some(*delay),
            Rule::Percentile(rule) => rule,
        };
        let now = ticks(now_ns);
        let at = rule.refresh_at.load(Ordering::Acquire) as u64;
        let due = elapsed(now, at) > 0 || now == at;
        if due
            && (rule.refreshing)
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            let at = rule.refresh_at.load(Ordering::Relaxed) as u64;
            if elapsed(now, at) > 0 || now == at {
                let ms = rule.window.percentile(rule.p, now_ns).max(1);
                let ms = if ms >= HIGHEST_LATENCY_MS {
                    u64::MAX
                } else {
                    ms
                };
                rule.send_after_ms.store(ms, Ordering::Relaxed);
                let refresh = ticks(REFRESH.as_nanos() as u64);
                rule.refresh_at
                    .store(now.wrapping_add(refresh) as _, Ordering::Release);
            }
            rule.refreshing.store(false, Ordering::Release);
        }
        match rule.send_after_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// A request starts (the percentile rule's budget gets its deposit).
    pub(crate) fn deposit(&self, now_ns: u64) {
        if let Rule::Percentile(rule) = &self.rule {
            rule.budget.deposit(now_ns);
        }
    }

    /// Whether a hedge may go out now (the percentile rule's budget pays for it).
    pub(crate) fn withdraw(&self, now_ns: u64) -> bool {
        match &self.rule {
            Rule::Fixed(_) => true,
            Rule::Percentile(rule) => rule.budget.withdraw(now_ns),
        }
    }

    /// An attempt answered (or timed out) after `latency`: into the window.
    pub(crate) fn record(&self, latency: Duration, now_ns: u64) {
        if let Rule::Percentile(rule) = &self.rule {
            rule.window.record(latency, now_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: Duration = Duration::from_millis(1);

    /// Finagle's `WindowedPercentileHistogramTest`, with its numbers.
    #[test]
    #[cfg_attr(miri, ignore)] // Safe code scanning 2001-counter histograms: minutes interpreted.
    fn finagle_windowed_percentiles() {
        // "Percentile is initially 0".
        let w = LatencyWindow::new(3, Duration::from_secs(10), 0).unwrap();
        assert_eq!(w.percentile(0.5, 0), 0);
        // "Buckets are flushed each bucketSize": 100 counts only after 10 s.
        w.record(MS * 100, 0);
        assert_eq!(w.percentile(0.0, 9 * S), 0);
        for p in [0.0, 0.5, 1.0] {
            assert_eq!(w.percentile(p, 10 * S), 100);
        }
        // "Sliding window" (3 buckets).
        let w = LatencyWindow::new(3, Duration::from_secs(10), 0).unwrap();
        for v in [1, 2, 3] {
            w.record(MS * v, 0);
        }
        assert_eq!(w.percentile(0.5, 10 * S), 2);
        for v in 4..=7 {
            w.record(MS * v, 10 * S);
        }
        assert_eq!(w.percentile(0.5, 20 * S), 4);
        for v in [8, 9, 10] {
            w.record(MS * v, 20 * S);
        }
        // Flush, flush: the first bucket (1, 2, 3) slides out.
        let now = 40 * S;
        assert_eq!(w.percentile(0.0, now), 4);
        assert_eq!(w.percentile(0.5, now), 7);
        assert_eq!(w.percentile(1.0, now), 10);
        // "Caps values at DefaultHighestTrackableValue".
        let w = LatencyWindow::new(3, Duration::from_secs(10), 0).unwrap();
        w.record(Duration::from_secs(60), 0);
        assert_eq!(w.percentile(1.0, 10 * S), HIGHEST_LATENCY_MS);
        // A long silence empties every bucket.
        assert_eq!(w.percentile(1.0, 1000 * S), 0);
    }

    /// Finagle's percentile budget: 1% extra load withdraws a hedge per 100 deposits.
    #[test]
    #[cfg_attr(miri, ignore)] // Safe code scanning 2001-counter histograms: minutes interpreted.
    fn the_percentile_rule_hedges_after_p99_within_its_budget() {
        let h = Hedging::percentile(0.01, 0).unwrap();
        assert_eq!(h.delay(0), None, "no hedge before the first refresh");
        for i in 0..1000u32 {
            h.deposit(0);
            h.record(MS * (i % 100 + 1), 0);
        }
        // Before 3 s the delay is not refreshed; at 10 s the bucket is complete too.
        assert_eq!(h.delay(2 * S), None);
        assert_eq!(h.delay(10 * S), Some(MS * 99));
        let hedges = (0..100).filter(|_| h.withdraw(10 * S)).count();
        assert_eq!(hedges, 10, "1% of 1,000 requests");
        assert!(Hedging::percentile(0.0, 0).is_err());
        assert!(Hedging::percentile(1.0, 0).is_err());
        assert_eq!(Hedging::after(MS * 5).delay(0), Some(MS * 5));
    }
}
