//! Retry budgets and throttles: small policy objects that decide whether a retry (or a hedge)
//! may be sent, shared by every request of a client — and by several balancers, when their
//! retries should share one limit. Each is `Send + Sync`, lock-free, and clocked by the caller
//! (`now_ns`, any monotonic nanosecond clock that never goes back), so the no_std core needs no
//! time source and the same sequence of calls gives the same answers in every language.
//!
//! Why: retries without a limit turn a brownout into a retry storm — three attempts per
//! request triple the load on a fleet that is already failing. A budget caps retries at a share
//! of recent requests, so a healthy fleet retries freely and a failing one does not multiply.
//!
//! - [`RetryBudget`]: tower's `TpsBudget` (`tower/src/retry/budget/tps_budget.rs`), itself
//!   Finagle's `RetryBudget` (`finagle-core/.../service/RetryBudget.scala`): every request
//!   deposits, every retry withdraws; deposits count for `ttl` (a window of 10 slots); a
//!   reserve of `min_per_sec × ttl` retries is always there for clients with little traffic.
//!   Defaults (tower's and Finagle's): ttl 10 s, min_per_sec 10, retry_percent 0.2. Exact to
//!   tower in a single thread, including its slot arithmetic (tests below port tower's own).
//! - [`RetryThrottle`]: gRPC's retry throttling (gRFC A6, "Retry Throttling"; grpc-go
//!   `clientconn.go`, `retryThrottler`): a token count starting at `max_tokens`, −1 per failure,
//!   +`token_ratio` per success, capped; retries and hedges are refused while the count is at or
//!   below `max_tokens / 2`. Kept in thousandths of a token (A6 allows three decimal places), so
//!   it is exact.
//! - [`AdaptiveThrottle`]: client-side adaptive throttling from the Google SRE book (chapter 21,
//!   "Handling Overload"): over a sliding window (default 2 minutes) the client counts the
//!   requests it attempted and those the backends accepted, and rejects a new request locally
//!   with probability `max(0, (requests − K·accepts) / (requests + 1))`, K = 2.
//!
//! Concurrency: counters are atomics. The window's slot rotation (budget, adaptive throttle)
//! runs under a try-lock flag instead of tower's mutex: a thread that finds a rotation in
//! progress skips it and uses the slots as they are (a rotation is at most one slot late), so
//! nothing blocks; with one thread the answers are tower's exactly.

use crate::load::{elapsed, ticks};
use crate::sync::{AtomicCounter, AtomicSigned, AtomicU32, Ordering};
use crate::{Error, Result};
use alloc::string::ToString;
use core::sync::atomic::{AtomicBool, AtomicUsize};
use core::time::Duration;

/// Slots of a window (tower's `windows`).
const SLOTS: usize = 10;

/// The signed counts the windows hold (`i64` where 64-bit atomics exist, else `isize`).
type Count = i64;

fn invalid(option: &'static str, value: impl ToString, expected: &'static str) -> Error {
    Error::InvalidOptionValue {
        option,
        value: value.to_string(),
        expected,
    }
}

/// A window of [`SLOTS`] counters of `span / SLOTS` each, rotated lazily by the callers' clock
/// (tower's `TpsBudget` slots: `writer` collects the current slot, committed when it expires).
#[derive(Debug)]
struct Window {
    slot_ticks: u64,
    slots: [AtomicSigned; SLOTS],
    writer: AtomicSigned,
    /// The slot `writer` will be committed to.
    index: AtomicUsize,
    /// When the current generation began (ticks).
    since: AtomicCounter,
    rotating: AtomicBool,
}

impl Window {
    fn new(span: Duration, now_ns: u64) -> Window {
        let slot_ticks = ticks((span / SLOTS as u32).as_nanos() as u64).max(1);
        Window {
            slot_ticks,
            slots: core::array::from_fn(|_| AtomicSigned::new(0)),
            writer: AtomicSigned::new(0),
            index: AtomicUsize::new(0),
            since: AtomicCounter::new(ticks(now_ns) as _),
            rotating: AtomicBool::new(false),
        }
    }

    /// Commits the current slot and clears the expired ones, if a slot's time has passed
    /// (tower's `expire`, with its loop over skipped slots done in O(1)).
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize without 64-bit atomics"
    )]
    fn rotate(&self, now_ns: u64) {
        // Acquire/Release: the slots written by the last rotation are seen by the next one.
        if (self.rotating)
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let now = ticks(now_ns);
        let diff = elapsed(now, self.since.load(Ordering::Relaxed) as u64);
        if diff >= self.slot_ticks {
            let index = self.index.load(Ordering::Relaxed);
            let committed = self.writer.swap(0, Ordering::AcqRel);
            self.slots[index].store(committed, Ordering::Relaxed);
            // tower: `while diff > window { clear the next slot; diff -= window }` — that is
            // `ceil(diff / window) - 1` slots skipped (all of them cleared past SLOTS).
            let skipped = ((diff - 1) / self.slot_ticks) as usize;
            for k in 0..skipped.min(SLOTS) {
                self.slots[(index + 1 + k) % SLOTS].store(0, Ordering::Relaxed);
            }
            self.index
                .store((index + 1 + skipped % SLOTS) % SLOTS, Ordering::Relaxed);
            self.since.store(now as _, Ordering::Relaxed);
        }
        self.rotating.store(false, Ordering::Release);
    }

    /// The current slot's count plus every committed slot's (saturating).
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicSigned is isize without 64-bit atomics"
    )]
    fn sum(&self) -> Count {
        (self.slots.iter())
            .map(|slot| slot.load(Ordering::Relaxed) as Count)
            .fold(
                self.writer.load(Ordering::Relaxed) as Count,
                Count::saturating_add,
            )
    }

    fn add(&self, amount: Count) {
        self.writer.fetch_add(amount as _, Ordering::AcqRel);
    }
}

/// A retry budget with tower's `TpsBudget` semantics (see the module docs): a share of recent
/// requests, plus a reserve, may be retried.
#[derive(Debug)]
pub struct RetryBudget {
    window: Window,
    reserve: Count,
    deposit_amount: Count,
    withdraw_amount: Count,
}

impl RetryBudget {
    /// Defaults, as tower's and Finagle's: `ttl` 10 s, `min_per_sec` 10, `retry_percent` 0.2.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
    /// See [`RetryBudget::DEFAULT_TTL`].
    pub const DEFAULT_MIN_PER_SEC: u32 = 10;
    /// See [`RetryBudget::DEFAULT_TTL`].
    pub const DEFAULT_RETRY_PERCENT: f64 = 0.2;

    /// A budget created at `now_ns`: deposits count for `ttl` (1 to 60 s, whole milliseconds
    /// and above); `min_per_sec` retries per second are always allowed (below 2^31 - 1);
    /// `retry_percent` retries per deposit (0 to 1000: 0.2 = one retry per five requests; 0 =
    /// only the reserve). Out of range values are an [`Error::InvalidOptionValue`].
    pub fn new(
        ttl: Duration,
        min_per_sec: u32,
        retry_percent: f64,
        now_ns: u64,
    ) -> Result<RetryBudget> {
        if ttl < Duration::from_secs(1) || ttl > Duration::from_secs(60) {
            return Err(invalid(
                "ttl_ms",
                ttl.as_millis(),
                "1000 to 60000 (milliseconds)",
            ));
        }
        if min_per_sec >= i32::MAX as u32 {
            return Err(invalid("min_per_sec", min_per_sec, "below 2147483647"));
        }
        if !(0.0..=1000.0).contains(&retry_percent) {
            return Err(invalid(
                "retry_percent",
                retry_percent,
                "a number from 0 to 1000",
            ));
        }
        // tower computes in f32: kept so the amounts are its amounts.
        let percent = retry_percent as f32;
        let (deposit_amount, withdraw_amount) = if percent == 0.0 {
            (0, 1)
        } else if percent <= 1.0 {
            (1, (1.0 / percent) as Count)
        } else {
            (1000, (1000.0 / percent) as Count)
        };
        let reserve = Count::from(min_per_sec)
            .saturating_mul(ttl.as_secs() as Count)
            .saturating_mul(withdraw_amount);
        Ok(RetryBudget {
            window: Window::new(ttl, now_ns),
            reserve,
            deposit_amount,
            withdraw_amount,
        })
    }

    /// Records a request (a first attempt) at `now_ns`.
    pub fn deposit(&self, now_ns: u64) {
        self.window.rotate(now_ns);
        self.window.add(self.deposit_amount);
    }

    /// Takes one retry from the budget at `now_ns`: true if it may be sent.
    pub fn withdraw(&self, now_ns: u64) -> bool {
        self.window.rotate(now_ns);
        // Two threads may both see enough and both withdraw, overdrawing by one (tower too).
        if self.balance_now() >= self.withdraw_amount {
            self.window.add(-self.withdraw_amount);
            true
        } else {
            false
        }
    }

    /// Whether a retry could be withdrawn at `now_ns`, without taking it.
    pub fn can_withdraw(&self, now_ns: u64) -> bool {
        self.window.rotate(now_ns);
        self.balance_now() >= self.withdraw_amount
    }

    /// Retries available now (the balance in withdrawals, rounded down).
    pub fn available(&self, now_ns: u64) -> u64 {
        self.window.rotate(now_ns);
        u64::try_from(self.balance_now() / self.withdraw_amount).unwrap_or(0)
    }

    fn balance_now(&self) -> Count {
        self.window.sum().saturating_add(self.reserve)
    }
}

impl Default for RetryBudget {
    /// The default budget, created at time 0.
    fn default() -> RetryBudget {
        RetryBudget::new(
            RetryBudget::DEFAULT_TTL,
            RetryBudget::DEFAULT_MIN_PER_SEC,
            RetryBudget::DEFAULT_RETRY_PERCENT,
            0,
        )
        .expect("the defaults are valid")
    }
}

/// gRPC's retry throttling (gRFC A6): see the module docs.
#[derive(Debug)]
pub struct RetryThrottle {
    /// Thousandths of a token.
    tokens: AtomicU32,
    max: u32,
    ratio: u32,
}

impl RetryThrottle {
    /// A throttle with `max_tokens` (1 to 1000) tokens, regaining `token_ratio` per success
    /// (at least 0.001; digits past the third decimal are dropped, as A6 says: 0.5466 is 0.546,
    /// computed as grpc-java does, `(int) (ratio * 1000)`). It starts full.
    pub fn new(max_tokens: u32, token_ratio: f64) -> Result<RetryThrottle> {
        if !(1..=1000).contains(&max_tokens) {
            return Err(invalid("max_tokens", max_tokens, "1 to 1000"));
        }
        // `as` truncates towards zero and saturates, as Java's `(int)` does.
        let ratio = (token_ratio * 1000.0) as u32;
        if !token_ratio.is_finite() || ratio == 0 {
            return Err(invalid(
                "token_ratio",
                token_ratio,
                "a number of at least 0.001",
            ));
        }
        let max = max_tokens * 1000;
        Ok(RetryThrottle {
            tokens: AtomicU32::new(max),
            max,
            ratio,
        })
    }

    /// Records a failed attempt (one token less, not below 0). Returns whether retries are
    /// still allowed after it (grpc-go's `throttle()`, negated).
    pub fn failure(&self) -> bool {
        // Relaxed: the count orders nothing else; the update is one read-modify-write.
        let before = self.update(|t| t.saturating_sub(1000));
        self.open(before.saturating_sub(1000))
    }

    /// Records a successful attempt (`token_ratio` more, capped at `max_tokens`).
    pub fn success(&self) {
        self.update(|t| t.saturating_add(self.ratio).min(self.max));
    }

    /// Whether a retry or a hedge may be sent now (the count is above `max_tokens / 2`).
    pub fn allows(&self) -> bool {
        self.open(self.tokens.load(Ordering::Relaxed))
    }

    /// The token count (in tokens, with its thousandths).
    pub fn tokens(&self) -> f64 {
        f64::from(self.tokens.load(Ordering::Relaxed)) / 1000.0
    }

    fn open(&self, tokens: u32) -> bool {
        2 * u64::from(tokens) > u64::from(self.max)
    }

    fn update(&self, f: impl Fn(u32) -> u32) -> u32 {
        let mut now = self.tokens.load(Ordering::Relaxed);
        loop {
            match (self.tokens).compare_exchange_weak(
                now,
                f(now),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(before) => return before,
                Err(seen) => now = seen,
            }
        }
    }
}

/// Client-side adaptive throttling (SRE book, chapter 21): see the module docs.
#[derive(Debug)]
pub struct AdaptiveThrottle {
    requests: Window,
    accepts: Window,
    /// K in thousandths (2.0 = 2000).
    k: u32,
    /// No local rejection while the window holds fewer requests.
    min_requests: u32,
}

impl AdaptiveThrottle {
    /// Defaults, as the SRE book's: K = 2 over a 2-minute window.
    pub const DEFAULT_K: f64 = 2.0;
    /// See [`AdaptiveThrottle::DEFAULT_K`].
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(120);
    /// The requests the window must hold before anything is rejected locally: Kratos' `sre`
    /// breaker's `request` minimum (`go-kratos/aegis`, `circuitbreaker/sre/sre.go`). The
    /// book's formula alone rejects a new client's second request half the time while its
    /// first is still out (1 request, 0 accepts: p = 1/2).
    pub const DEFAULT_MIN_REQUESTS: u32 = 100;

    /// A throttle created at `now_ns`, with multiplier `k` (1 to 100: lower throttles sooner)
    /// over `window` (1 s to 1 hour; 10 slots).
    pub fn new(k: f64, window: Duration, now_ns: u64) -> Result<AdaptiveThrottle> {
        if !(1.0..=100.0).contains(&k) {
            return Err(invalid("k", k, "a number from 1 to 100"));
        }
        if window < Duration::from_secs(1) || window > Duration::from_secs(3600) {
            return Err(invalid(
                "window_ms",
                window.as_millis(),
                "1000 to 3600000 (milliseconds)",
            ));
        }
        Ok(AdaptiveThrottle {
            requests: Window::new(window, now_ns),
            accepts: Window::new(window, now_ns),
            k: libm::round(k * 1000.0) as u32,
            min_requests: Self::DEFAULT_MIN_REQUESTS,
        })
    }

    /// The same throttle, rejecting nothing until its window holds `min_requests` requests
    /// (default [`AdaptiveThrottle::DEFAULT_MIN_REQUESTS`]; 0 = the book's formula alone).
    pub fn with_min_requests(mut self, min_requests: u32) -> AdaptiveThrottle {
        self.min_requests = min_requests;
        self
    }

    /// The probability that [`AdaptiveThrottle::admit`] rejects a request now:
    /// `max(0, (requests − K·accepts) / (requests + 1))` over the window, and 0 while the
    /// window holds fewer than `min_requests` requests.
    pub fn rejection(&self, now_ns: u64) -> f64 {
        self.requests.rotate(now_ns);
        self.accepts.rotate(now_ns);
        let requests = self.requests.sum().max(0);
        if requests < Count::from(self.min_requests) {
            return 0.0;
        }
        let requests = requests as f64;
        let accepts = self.accepts.sum().max(0) as f64;
        let k = f64::from(self.k) / 1000.0;
        ((requests - k * accepts) / (requests + 1.0)).max(0.0)
    }

    /// A request is about to be sent at `now_ns`: decides with `random` (64 uniformly random
    /// bits) whether to send it (true) or reject it locally (false), with the probability the
    /// window gives before this request, then counts it. The SRE book counts locally rejected
    /// requests too: they keep the rejection going while the backends keep refusing. (Counting
    /// the request before deciding would reject half of a new client's first request.)
    pub fn admit(&self, now_ns: u64, random: u64) -> bool {
        let p = self.rejection(now_ns);
        self.requests.add(1);
        // The top 53 bits as a uniform number in [0, 1).
        let u = (random >> 11) as f64 / (1u64 << 53) as f64;
        u >= p
    }

    /// A backend accepted a request at `now_ns` (any answer but an overload refusal).
    pub fn accepted(&self, now_ns: u64) {
        self.accepts.rotate(now_ns);
        self.accepts.add(1);
    }
}

impl Default for AdaptiveThrottle {
    /// The SRE book's throttle, created at time 0.
    fn default() -> AdaptiveThrottle {
        AdaptiveThrottle::new(
            AdaptiveThrottle::DEFAULT_K,
            AdaptiveThrottle::DEFAULT_WINDOW,
            0,
        )
        .expect("the defaults are valid")
    }
}

// The policy objects are shared between threads and balancers.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RetryBudget>();
    assert_send_sync::<RetryThrottle>();
    assert_send_sync::<AdaptiveThrottle>();
};

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;

    fn budget(ttl_s: u64, min_per_sec: u32, percent: f64) -> RetryBudget {
        RetryBudget::new(Duration::from_secs(ttl_s), min_per_sec, percent, 0).unwrap()
    }

    // Ported from tower's tests in `tower/src/retry/budget/tps_budget.rs` (tower-rs/tower):
    // `tps_empty`, `tps_leaky`, `tps_slots`, `tps_reserve`, with tokio's paused clock replaced
    // by explicit times.

    #[test]
    fn tower_tps_empty() {
        assert!(!budget(1, 0, 1.0).withdraw(0));
    }

    #[test]
    fn tower_tps_leaky() {
        let b = budget(1, 0, 1.0);
        b.deposit(0);
        assert!(!b.withdraw(3 * S));
    }

    #[test]
    fn tower_tps_slots() {
        let b = budget(1, 0, 0.5);
        let mut now = 0;
        b.deposit(now);
        b.deposit(now);
        now += 901 * MS;
        // 900 ms later, the deposit should still be valid.
        assert!(b.withdraw(now));
        // blank slate
        now += 2001 * MS;
        b.deposit(now);
        now += 301 * MS;
        b.deposit(now);
        now += 801 * MS;
        b.deposit(now);
        // The first deposit is expired, but the second is still valid, with the third.
        assert!(b.withdraw(now));
    }

    #[test]
    fn tower_tps_reserve() {
        let b = budget(1, 5, 1.0);
        for _ in 0..5 {
            assert!(b.withdraw(0));
        }
        assert!(!b.withdraw(0));
    }

    #[test]
    fn the_default_budget_allows_a_fifth_of_requests_plus_the_reserve() {
        let b = RetryBudget::default();
        // The reserve: 10 per second for 10 s.
        assert_eq!(b.available(0), 100);
        for _ in 0..100 {
            assert!(b.withdraw(0));
        }
        assert!(!b.withdraw(0));
        // 50 requests allow 10 retries.
        for _ in 0..50 {
            b.deposit(MS);
        }
        assert_eq!(b.available(MS), 10);
        // Deposits count for 10 s: by 11 s they are gone (and so are the withdrawals).
        assert_eq!(b.available(11 * S), 100);
    }

    #[test]
    fn a_long_silence_clears_every_slot_in_constant_time() {
        let b = budget(10, 0, 1.0);
        for t in 0..100 {
            b.deposit(t * 100 * MS);
        }
        assert!(b.available(9_999 * MS) > 0);
        assert_eq!(b.available(u64::MAX / 2), 0);
        b.deposit(u64::MAX / 2);
        assert_eq!(b.available(u64::MAX / 2), 1);
    }

    #[test]
    fn budget_arguments_are_checked() {
        let bad = |ttl_ms: u64, min: u32, pct: f64| {
            RetryBudget::new(Duration::from_millis(ttl_ms), min, pct, 0).unwrap_err()
        };
        assert!(matches!(
            bad(999, 1, 0.2),
            Error::InvalidOptionValue {
                option: "ttl_ms",
                ..
            }
        ));
        assert!(matches!(
            bad(60_001, 1, 0.2),
            Error::InvalidOptionValue {
                option: "ttl_ms",
                ..
            }
        ));
        assert!(matches!(
            bad(1000, u32::MAX, 0.2),
            Error::InvalidOptionValue {
                option: "min_per_sec",
                ..
            }
        ));
        for pct in [-0.1, 1000.5, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                bad(1000, 1, pct),
                Error::InvalidOptionValue {
                    option: "retry_percent",
                    ..
                }
            ));
        }
        // Above 1: several retries per deposit.
        let b = budget(1, 0, 2.0);
        b.deposit(0);
        assert_eq!(b.available(0), 2);
    }

    /// gRFC A6's rule with its example numbers (max_tokens 10, token_ratio 0.1): retries stop
    /// once the count is at or below 5, and each success gives back a tenth of a token.
    #[test]
    fn grpc_a6_throttle() {
        let t = RetryThrottle::new(10, 0.1).unwrap();
        assert!(t.allows());
        for _ in 0..4 {
            assert!(t.failure());
        }
        assert_eq!(t.tokens(), 6.0);
        assert!(!t.failure(), "5 tokens is at the threshold: throttled");
        assert!(!t.allows());
        t.success();
        assert!(t.allows(), "5.1 tokens: above the threshold again");
        assert!(!t.failure(), "4.1 tokens");
        for _ in 0..9 {
            t.success();
        }
        assert!(!t.allows(), "5.0 tokens: at the threshold");
        t.success();
        assert!(t.allows(), "5.1 tokens");
        for _ in 0..20 {
            t.failure();
        }
        assert_eq!(t.tokens(), 0.0, "never below 0");
        for _ in 0..1000 {
            t.success();
        }
        assert_eq!(t.tokens(), 10.0, "never above max_tokens");
        assert!(RetryThrottle::new(0, 0.1).is_err());
        assert!(RetryThrottle::new(1001, 0.1).is_err());
        assert!(RetryThrottle::new(10, 0.0).is_err());
        assert!(RetryThrottle::new(10, 0.0004).is_err());
        assert!(RetryThrottle::new(10, f64::NAN).is_err());
        assert!(RetryThrottle::new(10, 10.0).is_ok());
        // Digits past the third decimal are dropped (A6: 0.5466 is 0.546).
        let t = RetryThrottle::new(10, 0.5466).unwrap();
        for _ in 0..10 {
            t.failure();
        }
        t.success();
        assert_eq!(t.tokens(), 0.546);
    }

    /// Ported from grpc-java `RetriableStreamTest.throttle()` (grpc/grpc-java,
    /// `core/src/test/java/io/grpc/internal/RetriableStreamTest.java`): `Throttle(4, 0.8)`,
    /// threshold 2; `failure()` is `onQualifiedFailureThenCheckIsAboveThreshold`.
    #[test]
    fn grpc_java_throttle() {
        let t = RetryThrottle::new(4, 0.8).unwrap();
        assert!(t.allows());
        assert!(t.failure()); // 3
        assert!(t.allows());
        assert!(!t.failure()); // 2
        assert!(!t.allows());
        for expected in [1.0, 0.0, 0.0, 0.0] {
            assert!(!t.failure());
            assert_eq!(t.tokens(), expected);
        }
        for (expected, above) in [(0.8, false), (1.6, false), (2.4, true), (3.2, true)] {
            t.success();
            assert_eq!((t.tokens(), t.allows()), (expected, above));
        }
        t.success();
        t.success();
        assert_eq!(t.tokens(), 4.0); // capped
        assert!(t.failure()); // 3
        assert!(!t.failure()); // 2
    }

    #[test]
    fn adaptive_throttle_rejects_as_the_sre_book_says() {
        let t = AdaptiveThrottle::default();
        // Every request accepted: never throttled (requests - 2 accepts < 0).
        for i in 0..100 {
            assert!(t.admit(i * MS, u64::MAX >> 1));
            t.accepted(i * MS);
        }
        assert_eq!(t.rejection(S), 0.0);
        // The backends now refuse everything: 100 requests, 100 accepts, then refusals.
        let mut admitted = 0u32;
        let mut random = crate::SplitMix64::new(5);
        for i in 0..1000 {
            if t.admit(S + i * MS, random.next()) {
                admitted += 1;
            }
        }
        // requests 1100, accepts 100: p = (1100 - 200) / 1101 ≈ 0.82 at the end.
        let p = t.rejection(2 * S);
        assert!((p - 900.0 / 1101.0).abs() < 1e-12, "{p}");
        // Each refused request i (0-based) is admitted with probability 1 - p_i, p_i from the
        // window before it: the count is a sum of Bernoulli draws, within 5 standard deviations
        // of its mean.
        let p_of = |i: f64| ((100.0 + i - 200.0) / (100.0 + i + 1.0)).max(0.0);
        let mean: f64 = (0..1000).map(|i| 1.0 - p_of(f64::from(i))).sum();
        let var: f64 = (0..1000)
            .map(|i| p_of(f64::from(i)) * (1.0 - p_of(f64::from(i))))
            .sum();
        // |admitted - mean| < 5 sd, squared (no square root: Miri runs this too, and libm's
        // x86 sqrt is inline assembly).
        let off = f64::from(admitted) - mean;
        assert!(
            off * off < 25.0 * var,
            "{admitted} vs {mean}, variance {var}"
        );
        // The window forgets: 2 minutes later, nothing is counted.
        assert_eq!(t.rejection(200 * S), 0.0);
        // A new client with requests out and no answer yet: the book's formula rejects half
        // of its second request; below the minimum nothing is rejected.
        let book = AdaptiveThrottle::default().with_min_requests(0);
        assert!(book.admit(0, 0));
        assert_eq!(book.rejection(MS), 0.5);
        let t = AdaptiveThrottle::default();
        for i in 0..100 {
            assert!(t.admit(i * MS, 0), "request {i}");
        }
        assert!(t.rejection(S) > 0.98, "100 requests, no accepts");
        assert!(AdaptiveThrottle::new(0.5, AdaptiveThrottle::DEFAULT_WINDOW, 0).is_err());
        assert!(AdaptiveThrottle::new(2.0, Duration::from_millis(10), 0).is_err());
    }
}
