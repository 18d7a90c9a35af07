//! The request around the pick: attempts on distinct nodes, a retry policy, a budget, backoff
//! and a deadline — the loop every caller otherwise writes by hand (pick, send, classify,
//! decide, pick a *different* node, back off, give up, feed the outcome back). I/O stays with
//! the caller: a [`Request`] hands out one [`Lease`] per attempt and, given each attempt's
//! outcome, says what to do next ([`Decision`]).
//!
//! ```
//! use liblb_core::{Algorithm, Balancer, Decision, Failure, Outcome};
//! use std::time::Duration;
//!
//! let b = Balancer::new(Algorithm::Ring, ["a", "b", "c"], Default::default())?;
//! let mut request = b.request(Some(b"user-42"));
//! while let Some(lease) = request.attempt()? {
//!     // Send to lease.id(); here the first node answers 503 and the second succeeds.
//!     let outcome = if request.attempts() == 1 {
//!         Failure::error().after(Duration::from_millis(3)).into()
//!     } else {
//!         Outcome::Success(Duration::from_millis(5))
//!     };
//!     match request.finish(lease, outcome) {
//!         Decision::Done => break,
//!         Decision::Retry(delay) => std::thread::sleep(delay),
//!         Decision::Stop(why) => panic!("gave up: {why:?}"),
//!         Decision::Wait => unreachable!("only with hedges out"),
//!     }
//! }
//! assert_eq!(request.attempts(), 2);
//! # Ok::<(), liblb_core::Error>(())
//! ```
//!
//! Sources, each rule as the named system has it:
//! - **Attempts** go to distinct nodes in the key's retry order, [`Balancer::attempts`]
//!   (Envoy's `previous_hosts` retry predicate, Finagle's requeues to another node); the
//!   first is an ordinary [`Balancer::acquire`], so a request of one attempt costs what a lease
//!   costs. At most `max_attempts` (default 3, as Envoy's `num_retries` 2 + 1 and gRPC's
//!   `maxAttempts`).
//! - **What is retried**: the failure kinds in `retry_on` (default all three; Envoy's
//!   `retry_on`, gRPC's `retryableStatusCodes`). A success ends the request.
//! - **Backoff**: Envoy's `JitteredExponentialBackOffStrategy`
//!   (`source/common/common/backoff_strategy.cc`): retry `n` waits `random % min(base ·
//!   2^(n−1), max)` milliseconds, base 25 ms and max 250 ms (Envoy's router defaults). An
//!   overloaded answer's retry-after (capped by the balancer's `max_retry_after_ms`) replaces
//!   it and restarts the sequence, as gRPC's `grpc-retry-pushback-ms` does (gRFC A6).
//! - **Deadline**: an overall limit from the request's start; a retry whose delay would reach
//!   it is not made.
//! - **Budget** ([`Budget`]): a [`RetryBudget`] gets a deposit per request and a withdrawal
//!   per retry (tower's `Policy` over `TpsBudget`); a [`RetryThrottle`] is told of every
//!   retryable failure and every successful request, and refuses retries at or below half its
//!   tokens (gRFC A6, grpc-go's `shouldRetry`: the failure is counted before the attempt
//!   limit is checked); an [`AdaptiveThrottle`] decides whether the request is sent at all
//!   (the SRE book's client-side throttling) and hears of every attempt the backend accepted
//!   (a success or an error: it answered; a timeout or an overloaded answer is not an accept).

use crate::{
    AdaptiveThrottle, Balancer, Error, Failure, FailureKind, Hedging, Lease, Outcome, Result,
};
use crate::{RetryBudget, RetryThrottle};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::time::Duration;

/// The most attempts a request makes, whatever its policy says.
pub const MAX_ATTEMPTS: u32 = 100;

/// How a request retries (see the module docs for the sources of each default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included: 1 to [`MAX_ATTEMPTS`], default 3.
    pub max_attempts: u32,
    /// The failure kinds that are retried; default all.
    pub retry_on: RetryOn,
    /// The first retry's backoff interval; default 25 ms.
    pub backoff_base: Duration,
    /// The longest backoff interval; default 250 ms (ten times the base, as Envoy).
    pub backoff_max: Duration,
    /// The whole request's time limit, from its start; default none.
    pub deadline: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            retry_on: RetryOn::ALL,
            backoff_base: Duration::from_millis(25),
            backoff_max: Duration::from_millis(250),
            deadline: None,
        }
    }
}

impl RetryPolicy {
    /// Checks the policy: `max_attempts` 1 to [`MAX_ATTEMPTS`]; backoff base at least 1 ms and
    /// at most the max (Envoy asserts `base > 0`, `base <= max`).
    pub fn validate(&self) -> Result<()> {
        let invalid = |option, value: String, expected| Error::InvalidOptionValue {
            option,
            value,
            expected,
        };
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            let value = alloc::format!("{}", self.max_attempts);
            return Err(invalid("max_attempts", value, "1 to 100"));
        }
        if self.backoff_base < Duration::from_millis(1) {
            let value = alloc::format!("{}", self.backoff_base.as_millis());
            return Err(invalid(
                "backoff_base_ms",
                value,
                "at least 1 (milliseconds)",
            ));
        }
        if self.backoff_max < self.backoff_base {
            let value = alloc::format!("{}", self.backoff_max.as_millis());
            return Err(invalid("backoff_max_ms", value, "at least backoff_base_ms"));
        }
        Ok(())
    }
}

/// A set of failure kinds (`retry_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryOn(u8);

impl RetryOn {
    /// Every kind.
    pub const ALL: RetryOn = RetryOn(0b111);
    /// No kind: failures are never retried.
    pub const NONE: RetryOn = RetryOn(0);

    /// This set with `kind` in it.
    pub const fn with(self, kind: FailureKind) -> RetryOn {
        RetryOn(self.0 | 1 << kind as u8)
    }

    /// Whether `kind` is in the set.
    pub const fn contains(self, kind: FailureKind) -> bool {
        self.0 & 1 << kind as u8 != 0
    }

    /// The set of the kinds named (`"error"`, `"timeout"`, `"overloaded"`).
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<RetryOn> {
        names.into_iter().try_fold(RetryOn::NONE, |set, name| {
            Ok(set.with(FailureKind::from_name(name)?))
        })
    }
}

/// What limits a request's retries (or, for [`Budget::Adaptive`], its first attempt), shared
/// by every request given it — and by several balancers, if their retries should share one
/// limit.
#[derive(Debug, Clone)]
pub enum Budget {
    /// Retries at most a share of recent requests plus a reserve (tower, Finagle).
    Retry(Arc<RetryBudget>),
    /// gRPC's retry throttling: no retries while failures outweigh successes.
    Throttle(Arc<RetryThrottle>),
    /// Client-side adaptive throttling: requests rejected locally while the backends reject.
    Adaptive(Arc<AdaptiveThrottle>),
}

/// What to do after an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It succeeded: the request is done.
    Done,
    /// Wait this long, then make the next attempt ([`Request::attempt`]).
    Retry(Duration),
    /// Give up: the last attempt's failure is the request's.
    Stop(Stop),
    /// Another attempt (a hedge) is still out: wait for its answer.
    Wait,
}

/// Why a request gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stop {
    /// `max_attempts` attempts were made.
    MaxAttempts,
    /// The failure's kind is not in `retry_on`.
    NotRetryable,
    /// The budget refused the retry.
    Budget,
    /// The retry would start at or after the deadline.
    Deadline,
    /// Every node was tried.
    NoMoreNodes,
    /// The adaptive throttle rejected the request before its first attempt.
    Throttled,
}

impl Stop {
    /// Every reason, in the order of [`Stop::NAMES`].
    pub const ALL: [Stop; 6] = [
        Stop::MaxAttempts,
        Stop::NotRetryable,
        Stop::Budget,
        Stop::Deadline,
        Stop::NoMoreNodes,
        Stop::Throttled,
    ];
    /// The reasons' names, as every binding spells them.
    pub const NAMES: [&'static str; 6] = [
        "max_attempts",
        "not_retryable",
        "budget",
        "deadline",
        "no_more_nodes",
        "throttled",
    ];

    /// The reason's name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No attempt yet.
    New,
    /// An attempt is out (its lease is the caller's).
    Out,
    /// The last attempt failed and a retry was decided.
    Between,
    /// Over: succeeded (`None`) or gave up.
    Over(Option<Stop>),
}

/// One request's attempts (see the module docs). From [`Balancer::request`]; `B` is how it
/// holds the balancer (`&Balancer`, `Arc<Balancer>`) and `K` its key.
pub struct Request<B: Borrow<Balancer>, K: AsRef<[u8]>> {
    balancer: B,
    key: Option<K>,
    policy: RetryPolicy,
    budget: Option<Budget>,
    phase: Phase,
    started_ns: u64,
    attempts: u32,
    /// Retries since the start or the last retry-after (the backoff exponent).
    backoffs: u32,
    delay: Duration,
    /// The ids of the nodes tried: with hedging, every attempt's as it starts; without, a
    /// failed one's once a retry is decided (so one successful attempt allocates nothing).
    tried: Vec<String>,
    hedging: Option<Arc<Hedging>>,
    /// Attempts out (started, not finished or cancelled).
    outstanding: u32,
    /// Which attempt (1-based, in the order they started) succeeded.
    winner: Option<u32>,
}

impl<B: Borrow<Balancer>, K: AsRef<[u8]>> Request<B, K> {
    /// A request to route through `balancer` with `key` (keyed algorithms need one), under
    /// the default [`RetryPolicy`] and the balancer's budget, if it has one
    /// ([`Balancer::set_budget`]). Nothing is picked until [`Request::attempt`].
    pub fn new(balancer: B, key: Option<K>) -> Request<B, K> {
        let budget = balancer.borrow().budget();
        Request {
            balancer,
            key,
            policy: RetryPolicy::default(),
            budget,
            phase: Phase::New,
            started_ns: 0,
            attempts: 0,
            backoffs: 0,
            delay: Duration::ZERO,
            tried: Vec::new(),
            hedging: None,
            outstanding: 0,
            winner: None,
        }
    }

    /// The same request, hedged by `hedging` (see [`Request::hedge`]).
    pub fn with_hedging(mut self, hedging: Arc<Hedging>) -> Request<B, K> {
        self.hedging = Some(hedging);
        self
    }

    /// Which attempt succeeded (1-based, in the order the attempts started), once one has.
    pub fn winner(&self) -> Option<u32> {
        self.winner
    }

    /// How long to wait for an answer, from when the last attempt started, before sending a
    /// hedge ([`Request::hedge`]); `None`: no hedge (no hedging policy, no attempt out, the
    /// attempts used up, or the policy says not now).
    pub fn hedge_after(&self) -> Option<Duration> {
        let hedging = self.hedging.as_ref()?;
        if self.phase != Phase::Out || self.attempts >= self.policy.max_attempts {
            return None;
        }
        hedging.delay(self.balancer.borrow().clock().now_ns())
    }

    /// Sends a hedge now: another attempt, on the next untried node, while the others are
    /// still out — if the hedging policy's budget and the request's budget allow it (a retry
    /// budget pays a withdrawal; a retry throttle must be above its threshold, gRFC A6) and
    /// attempts remain. `None` when not sent. The caller keeps the first answer that ends the
    /// request and drops (cancels) the other attempts' leases: a cancelled lease counts
    /// nothing, so the loser's work is never mistaken for the node's health.
    pub fn hedge(&mut self) -> Result<Option<Lease>> {
        let Some(hedging) = self.hedging.clone() else {
            return Ok(None);
        };
        if self.phase != Phase::Out || self.attempts >= self.policy.max_attempts {
            return Ok(None);
        }
        let now = self.balancer.borrow().clock().now_ns();
        let allowed = match &self.budget {
            Some(Budget::Throttle(throttle)) => throttle.allows(),
            _ => true,
        };
        if !allowed || !hedging.withdraw(now) {
            return Ok(None);
        }
        if let Some(Budget::Retry(budget)) = &self.budget {
            if !budget.withdraw(now) {
                return Ok(None);
            }
        }
        self.next()
    }

    /// Cancels `lease`, an attempt of this request (a hedge's loser, or an attempt the caller
    /// abandons): nothing is counted, and a later attempt still goes to another node.
    pub fn cancel(&mut self, lease: Lease) {
        // With hedging every attempt's node is already in `tried`; without, it is kept here
        // (as a failure's is), so an abandoned attempt's node is not tried again.
        if self.hedging.is_none() && !self.tried.iter().any(|t| t == lease.id()) {
            self.tried.push(String::from(lease.id()));
        }
        drop(lease);
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    /// The same request under `policy` (checked: see [`RetryPolicy::validate`]).
    pub fn with_policy(mut self, policy: RetryPolicy) -> Result<Request<B, K>> {
        self.set_policy(policy)?;
        Ok(self)
    }

    /// Puts the request under `policy` from its next decision on (checked: see
    /// [`RetryPolicy::validate`]; on an error the request keeps its policy).
    pub fn set_policy(&mut self, policy: RetryPolicy) -> Result<()> {
        policy.validate()?;
        self.policy = policy;
        Ok(())
    }

    /// The same request limited by `budget` (instead of the balancer's).
    pub fn with_budget(mut self, budget: Budget) -> Request<B, K> {
        self.budget = Some(budget);
        self
    }

    /// Limits the request by `budget` instead of the balancer's (`None`: by no budget at all).
    /// Only before the first attempt (a retry budget's deposit is made then): afterwards it is
    /// `InvalidOptionValue` and the request keeps its budget.
    pub fn set_budget(&mut self, budget: Option<Budget>) -> Result<()> {
        self.unstarted("budget")?;
        self.budget = budget;
        Ok(())
    }

    /// Hedges the request by `hedging` (`None`: no hedges). Only before the first attempt (a
    /// hedged request tracks every attempt's node from the start): afterwards it is
    /// `InvalidOptionValue` and the request keeps its hedging.
    pub fn set_hedging(&mut self, hedging: Option<Arc<Hedging>>) -> Result<()> {
        self.unstarted("hedging")?;
        self.hedging = hedging;
        Ok(())
    }

    /// `InvalidOptionValue` for `option` once an attempt has started.
    fn unstarted(&self, option: &'static str) -> Result<()> {
        if self.phase == Phase::New {
            return Ok(());
        }
        Err(Error::InvalidOptionValue {
            option,
            value: String::from("set after the first attempt"),
            expected: "set before the first attempt",
        })
    }

    /// Its policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The delay [`Decision::Retry`] gave before the next attempt (zero before any).
    pub fn backoff(&self) -> Duration {
        self.delay
    }

    /// Why the request gave up, once it has.
    pub fn stopped(&self) -> Option<Stop> {
        match self.phase {
            Phase::Over(stop) => stop,
            _ => None,
        }
    }

    /// Whether the request is over (succeeded or gave up).
    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over(_))
    }

    /// Time left before the deadline (from the first attempt), if there is one.
    pub fn remaining(&self) -> Option<Duration> {
        let deadline = self.policy.deadline?;
        let now = self.balancer.borrow().clock().now_ns();
        let spent = Duration::from_nanos(now.saturating_sub(self.started_ns));
        Some(deadline.saturating_sub(spent))
    }

    /// The next attempt: a lease on a node this request has not tried, or `None` when the
    /// request is over (see [`Request::stopped`]). The first attempt is an ordinary
    /// [`Balancer::acquire`] (after the adaptive throttle, if that is the budget, admits the
    /// request; a retry budget gets its deposit); later ones take the first untried node in
    /// the key's [`Balancer::attempts`] order. A second call while an attempt is out starts
    /// another attempt too (a hedge is the caller's to send). Balancer errors (`NoNodes`,
    /// `KeyRequired`, ...) are returned as they are and leave the request as it was.
    pub fn attempt(&mut self) -> Result<Option<Lease>> {
        let balancer = self.balancer.borrow();
        let key = self.key.as_ref().map(|k| k.as_ref());
        match self.phase {
            Phase::Over(_) => return Ok(None),
            Phase::New => {
                if let Some(Budget::Adaptive(throttle)) = &self.budget {
                    let now = balancer.clock().now_ns();
                    if !throttle.admit(now, balancer.random()) {
                        self.phase = Phase::Over(Some(Stop::Throttled));
                        return Ok(None);
                    }
                }
                let lease = balancer.acquire(key)?;
                // The lease's own start: no second clock reading.
                let now = lease.started_ns();
                if let Some(Budget::Retry(budget)) = &self.budget {
                    budget.deposit(now);
                }
                if let Some(hedging) = &self.hedging {
                    hedging.deposit(now);
                    self.tried.push(String::from(lease.id()));
                }
                self.started_ns = now;
                self.attempts = 1;
                self.outstanding = 1;
                self.phase = Phase::Out;
                return Ok(Some(lease));
            }
            Phase::Out | Phase::Between => {}
        }
        if self.attempts >= self.policy.max_attempts {
            if self.outstanding == 0 {
                self.phase = Phase::Over(Some(Stop::MaxAttempts));
            }
            return Ok(None);
        }
        self.next()
    }

    /// Starts an attempt on the first untried node of the key's retry order.
    fn next(&mut self) -> Result<Option<Lease>> {
        let balancer = self.balancer.borrow();
        let key = self.key.as_ref().map(|k| k.as_ref());
        let limit = self.tried.len() + 1;
        let order = balancer.attempts(key, limit)?;
        let Some(position) = order
            .ids()
            .position(|id| !self.tried.iter().any(|t| t == id))
        else {
            if self.outstanding == 0 {
                self.phase = Phase::Over(Some(Stop::NoMoreNodes));
            }
            return Ok(None);
        };
        let lease = balancer.lease_from(order, position);
        if self.hedging.is_some() {
            self.tried.push(String::from(lease.id()));
        }
        self.attempts += 1;
        self.outstanding += 1;
        self.phase = Phase::Out;
        Ok(Some(lease))
    }

    /// Ends `lease` (an attempt of this request) with `outcome` — counted by the balancer as
    /// any lease's outcome — and decides what comes next.
    ///
    /// With hedging, a failure while another attempt is out gives [`Decision::Wait`], or
    /// [`Decision::Retry`] with no delay when it may be retried (gRFC A6: a hedge's retryable
    /// failure sends the next hedge at once); a success ends the request, and the caller
    /// cancels the attempts still out. A request that is already over only ends the lease.
    pub fn finish(&mut self, lease: Lease, outcome: Outcome) -> Decision {
        let balancer = self.balancer.borrow();
        // The id is kept only where it is needed: a failure (the next attempt avoids its node)
        // or a hedged request (which attempt won); a plain success allocates nothing.
        let id = (outcome.failure().is_some() || self.hedging.is_some())
            .then(|| String::from(lease.id()));
        let latency = outcome.latency().unwrap_or_else(|| lease.elapsed());
        lease.finish(outcome);
        self.outstanding = self.outstanding.saturating_sub(1);
        // Read only where something needs the time (budgets, hedging, a retry decision): a
        // plain success reads no clock here.
        let now = std::cell::OnceCell::new();
        let now = || *now.get_or_init(|| balancer.clock().now_ns());
        if let Phase::Over(stop) = self.phase {
            return stop.map_or(Decision::Done, Decision::Stop);
        }
        let failure = outcome.failure();
        if let Some(hedging) = &self.hedging {
            if failure.is_none_or(|f| f.kind == FailureKind::Timeout) {
                hedging.record(latency, now());
            }
        }
        let Some(failure) = failure else {
            match &self.budget {
                Some(Budget::Throttle(throttle)) => throttle.success(),
                Some(Budget::Adaptive(throttle)) => throttle.accepted(now()),
                _ => {}
            }
            let position = id.and_then(|id| self.tried.iter().position(|t| *t == id));
            self.winner = Some(match position {
                Some(at) if self.hedging.is_some() => at as u32 + 1,
                _ => self.attempts,
            });
            self.phase = Phase::Over(None);
            return Decision::Done;
        };
        let retryable = self.policy.retry_on.contains(failure.kind);
        let stop = |request: &mut Self, stop| {
            request.phase = Phase::Over(Some(stop));
            Decision::Stop(stop)
        };
        let mut throttled = false;
        match &self.budget {
            Some(Budget::Adaptive(throttle)) if failure.kind == FailureKind::Error => {
                throttle.accepted(now());
            }
            // gRFC A6: only retryable failures count, before the attempt limit is checked.
            Some(Budget::Throttle(throttle)) if retryable => throttled = !throttle.failure(),
            _ => {}
        }
        if self.outstanding > 0 {
            // A hedge is still out: its answer may yet end the request (gRFC A6: a throttled
            // client sends no more attempts, but waits for those out).
            let more = retryable && !throttled && self.attempts < self.policy.max_attempts;
            return if more {
                Decision::Retry(Duration::ZERO)
            } else {
                Decision::Wait
            };
        }
        if throttled {
            return stop(self, Stop::Budget);
        }
        if !retryable {
            return stop(self, Stop::NotRetryable);
        }
        if self.attempts >= self.policy.max_attempts {
            return stop(self, Stop::MaxAttempts);
        }
        let id = id.expect("a failure keeps its id");
        if !self.tried.contains(&id) {
            self.tried.push(id);
        }
        if self.tried.len() >= balancer.len() {
            return stop(self, Stop::NoMoreNodes);
        }
        let max_pause = balancer.options().max_retry_after;
        let delay = match failure.pause() {
            Some(after) if !max_pause.is_zero() => {
                self.backoffs = 0;
                after.min(max_pause)
            }
            _ => {
                self.backoffs += 1;
                self.jittered(balancer.random())
            }
        };
        if let Some(deadline) = self.policy.deadline {
            let at = Duration::from_nanos(now().saturating_sub(self.started_ns)) + delay;
            if at >= deadline {
                return stop(self, Stop::Deadline);
            }
        }
        if let Some(Budget::Retry(budget)) = &self.budget {
            if !budget.withdraw(now()) {
                return stop(self, Stop::Budget);
            }
        }
        self.delay = delay;
        self.phase = Phase::Between;
        Decision::Retry(delay)
    }

    /// Envoy's jittered exponential backoff for retry `self.backoffs` (1-based).
    fn jittered(&self, random: u64) -> Duration {
        let base = self.policy.backoff_base.as_millis() as u64;
        let max = self.policy.backoff_max.as_millis() as u64;
        Duration::from_millis(backoff_ms(base, max, self.backoffs, random))
    }
}

/// Envoy's `JitteredExponentialBackOffStrategy::nextBackOffMs` at its `n`th call (1-based)
/// since the last reset: the interval starts at `base` and doubles while it is below `max / 2`,
/// else becomes `max`; the wait is `random % interval` milliseconds.
fn backoff_ms(base: u64, max: u64, n: u32, random: u64) -> u64 {
    let mut interval = base.max(1);
    for _ in 1..n {
        if interval == max {
            break;
        }
        interval = if interval < max / 2 {
            interval * 2
        } else {
            max
        };
    }
    random % interval
}

/// Why [`Request::call`] or [`Request::call_async`] returned no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The balancer could not pick (no nodes, a key required, ...).
    Balancer(Error),
    /// The request gave up (`stop`); `last` is its last attempt's failure (none when the
    /// adaptive throttle rejected it before any attempt).
    GaveUp {
        /// Why it gave up.
        stop: Stop,
        /// The last attempt's failure.
        last: Option<Failure>,
    },
}

impl core::fmt::Display for CallError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CallError::Balancer(error) => error.fmt(f),
            CallError::GaveUp {
                stop,
                last: Some(last),
            } => write!(
                f,
                "request gave up ({}) after a failure ({})",
                stop.name(),
                last.kind.name()
            ),
            CallError::GaveUp { stop, last: None } => {
                write!(f, "request gave up ({}) before any attempt", stop.name())
            }
        }
    }
}

impl std::error::Error for CallError {}

impl From<Error> for CallError {
    fn from(error: Error) -> CallError {
        CallError::Balancer(error)
    }
}

/// What one step of a call loop learnt.
enum Event<T> {
    /// Attempt `i`'s answer, and the load report it carried.
    Answer(
        usize,
        (core::result::Result<T, Failure>, Option<crate::LoadReport>),
    ),
    Timer,
}

impl<B: Borrow<Balancer>, K: AsRef<[u8]>> Request<B, K> {
    /// Runs the whole request on this thread: `send(lease)` for each attempt (the node is
    /// `lease.id()`), sleeping between attempts as decided. `Ok` is the first success's
    /// value, its latency measured by the balancer's clock; `Err(failure)` from `send` ends
    /// that attempt with it (its latency measured too, if `failure.latency` is `None`).
    /// Hedging needs attempts in parallel: use [`Request::call_async`].
    pub fn call<T>(
        mut self,
        mut send: impl FnMut(&Lease) -> core::result::Result<T, Failure>,
    ) -> core::result::Result<T, CallError> {
        let mut last = None;
        loop {
            let Some(lease) = self.attempt()? else {
                let stop = self.stopped().unwrap_or(Stop::MaxAttempts);
                return Err(CallError::GaveUp { stop, last });
            };
            let (value, outcome) = match send(&lease) {
                Ok(value) => (Some(value), Outcome::Success(lease.elapsed())),
                Err(failure) => (None, measured(failure, &lease)),
            };
            last = outcome.failure();
            match self.finish(lease, outcome) {
                Decision::Done => return Ok(value.expect("a success carries its value")),
                Decision::Retry(delay) => std::thread::sleep(delay),
                Decision::Stop(stop) => return Err(CallError::GaveUp { stop, last }),
                Decision::Wait => {} // only with hedges out, which `call` never sends
            }
        }
    }

    /// Runs the whole request asynchronously, on any runtime: `send(id)` starts an attempt on
    /// node `id` (a future of its answer), `sleep(d)` is the runtime's timer (tokio's
    /// `tokio::time::sleep`, for one). Retries wait as decided; with hedging
    /// ([`Request::with_hedging`]) a hedge is sent each [`Request::hedge_after`] without an
    /// answer, the first success wins and the attempts still out are dropped (their futures
    /// and leases: cancelled, nothing counted).
    pub async fn call_async<T, F, Fut, S, SFut>(
        self,
        mut send: F,
        sleep: S,
    ) -> core::result::Result<T, CallError>
    where
        F: FnMut(String) -> Fut,
        Fut: core::future::Future<Output = core::result::Result<T, Failure>>,
        S: FnMut(Duration) -> SFut,
        SFut: core::future::Future<Output = ()>,
    {
        let send = move |id| {
            let answer = send(id);
            async move { (answer.await, None) }
        };
        self.call_async_reporting(send, sleep).await
    }

    /// [`Request::call_async`] whose attempts also give the load report their answer carried
    /// (the server's ORCA `endpoint-load-metrics`, parsed by [`crate::parse_orca`]): each is
    /// handed to its lease before the lease ends ([`Lease::report_load`]), successes and
    /// failures alike, so `client_side_wrr` and `prequal` learn from every answer.
    pub async fn call_async_reporting<T, F, Fut, S, SFut>(
        mut self,
        mut send: F,
        mut sleep: S,
    ) -> core::result::Result<T, CallError>
    where
        F: FnMut(String) -> Fut,
        Fut: core::future::Future<
                Output = (core::result::Result<T, Failure>, Option<crate::LoadReport>),
            >,
        S: FnMut(Duration) -> SFut,
        SFut: core::future::Future<Output = ()>,
    {
        use core::pin::Pin;
        use core::task::Poll;
        let mut out: Vec<(Lease, Pin<alloc::boxed::Box<Fut>>)> = Vec::new();
        let mut timer: Option<Pin<alloc::boxed::Box<SFut>>> = None;
        let mut last = None;
        let mut hedges = true;
        let gave_up = |request: &Self, last| CallError::GaveUp {
            stop: request.stopped().unwrap_or(Stop::MaxAttempts),
            last,
        };
        match self.attempt()? {
            Some(lease) => {
                let answer = alloc::boxed::Box::pin(send(String::from(lease.id())));
                out.push((lease, answer));
            }
            None => return Err(gave_up(&self, None)),
        }
        loop {
            if timer.is_none() && hedges {
                timer = self.hedge_after().map(|d| alloc::boxed::Box::pin(sleep(d)));
            }
            let event = core::future::poll_fn(|cx| {
                for (i, (_, answer)) in out.iter_mut().enumerate() {
                    if let Poll::Ready(result) = answer.as_mut().poll(cx) {
                        return Poll::Ready(Event::Answer(i, result));
                    }
                }
                match timer.as_mut().map(|t| t.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Event::Timer),
                    _ => Poll::Pending,
                }
            })
            .await;
            let (i, result) = match event {
                Event::Timer => {
                    timer = None;
                    match self.hedge()? {
                        Some(lease) => {
                            let answer = alloc::boxed::Box::pin(send(String::from(lease.id())));
                            out.push((lease, answer));
                        }
                        None => hedges = false, // refused: no more hedges for this request
                    }
                    continue;
                }
                Event::Answer(i, result) => (i, result),
            };
            let (lease, _) = out.swap_remove(i);
            timer = None;
            let (result, load) = result;
            if let Some(load) = &load {
                lease.report_load(load);
            }
            let (value, outcome) = match result {
                Ok(value) => (Some(value), Outcome::Success(lease.elapsed())),
                Err(failure) => (None, measured(failure, &lease)),
            };
            last = outcome.failure().or(last);
            let decision = self.finish(lease, outcome);
            let next = match decision {
                Decision::Done | Decision::Stop(_) => {
                    for (lease, _) in out.drain(..) {
                        self.cancel(lease);
                    }
                    return match decision {
                        Decision::Done => Ok(value.expect("a success carries its value")),
                        _ => Err(gave_up(&self, last)),
                    };
                }
                Decision::Wait => continue,
                Decision::Retry(delay) => {
                    if !delay.is_zero() {
                        sleep(delay).await;
                    }
                    self.attempt()?
                }
            };
            match next {
                Some(lease) => {
                    let answer = alloc::boxed::Box::pin(send(String::from(lease.id())));
                    out.push((lease, answer));
                }
                None if out.is_empty() => return Err(gave_up(&self, last)),
                None => {}
            }
        }
    }
}

/// `failure` with its latency measured on `lease` when the caller gave none.
fn measured(failure: Failure, lease: &Lease) -> Outcome {
    match failure.latency {
        Some(_) => failure.into(),
        None => failure.after(lease.elapsed()).into(),
    }
}

impl<B: Borrow<Balancer>, K: AsRef<[u8]>> core::fmt::Debug for Request<B, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Request")
            .field("attempts", &self.attempts)
            .field("phase", &self.phase)
            .field("policy", &self.policy)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Envoy's `test/common/common/backoff_strategy_test.cc`, with its fixed random values.
    #[test]
    fn envoy_backoff_sequences() {
        // JitteredBackOffBasicFlow: base 25, max 30, random 27.
        let waits: Vec<u64> = (1..=2).map(|n| backoff_ms(25, 30, n, 27)).collect();
        assert_eq!(waits, [2, 27]);
        // JitteredBackOffWithMaxInterval: base 5, max 100, random 9999.
        let waits: Vec<u64> = (1..=7).map(|n| backoff_ms(5, 100, n, 9999)).collect();
        assert_eq!(waits, [4, 9, 19, 39, 79, 99, 99]);
        // JitteredBackOffDoesntOverflow: base 1, max u64::MAX, random u64::MAX - 1.
        // The interval doubles from 1 without overflowing (a panic here in debug builds),
        // and is the max from the 65th call on.
        for n in 1..=64 {
            let interval = 1u64 << (n - 1);
            assert_eq!(
                backoff_ms(1, u64::MAX, n, u64::MAX - 1),
                (u64::MAX - 1) % interval
            );
        }
        assert_eq!(backoff_ms(1, u64::MAX, 101, u64::MAX - 1), u64::MAX - 1);
        // Envoy's rule, not min(base·2^(n-1), max): an odd max is reached from below half.
        assert_eq!(backoff_ms(50, 101, 2, 1000), 1000 % 101);
        // The router defaults, 25 and 250: intervals 25, 50, 100, 200, 250, 250.
        let top: Vec<u64> = (1..=6).map(|n| backoff_ms(25, 250, n, u64::MAX)).collect();
        let intervals: Vec<u64> = [25, 50, 100, 200, 250, 250].to_vec();
        assert_eq!(
            top,
            intervals.iter().map(|i| u64::MAX % i).collect::<Vec<_>>()
        );
    }

    #[test]
    fn policies_are_checked() {
        let bad = [
            RetryPolicy {
                max_attempts: 0,
                ..RetryPolicy::default()
            },
            RetryPolicy {
                max_attempts: 101,
                ..RetryPolicy::default()
            },
            RetryPolicy {
                backoff_base: Duration::ZERO,
                ..RetryPolicy::default()
            },
            RetryPolicy {
                backoff_max: Duration::from_millis(24),
                ..RetryPolicy::default()
            },
        ];
        for policy in bad {
            assert_eq!(
                policy.validate().unwrap_err().code(),
                "LB_INVALID_OPTION_VALUE"
            );
        }
        assert!(RetryPolicy::default().validate().is_ok());
        let set = RetryOn::from_names(["timeout", "overloaded"]).unwrap();
        assert!(set.contains(FailureKind::Timeout) && !set.contains(FailureKind::Error));
        assert_eq!(
            RetryOn::from_names(["5xx"]).unwrap_err().code(),
            "LB_INVALID_OUTCOME"
        );
    }
}
