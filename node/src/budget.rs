//! Retry budgets and throttles for JavaScript: `RetryBudget`, `RetryThrottle` and
//! `AdaptiveThrottle`, over the core's lock-free objects (`liblb_core::budget`). Times are
//! milliseconds on liblb's monotonic clock, the one every balancer reads (`Balancer.nowMs()`,
//! one per process); every method that reads the clock also takes an explicit `nowMs`, so
//! tests and the conformance vectors replay exact times. Argument conversion only: every
//! decision is the core's. Like a `Balancer`, an object belongs to the JavaScript thread that
//! made it (each worker makes its own).

use crate::error::{OrThrow, RANGE_ERROR_CODE, Result, range_error, type_error};
use crate::js::{describe, integer, js_number, present, u64_value};
use liblb_core::RetryThrottle as CoreThrottle;
use liblb_core::{AdaptiveThrottle as CoreAdaptive, MonotonicClock, RetryBudget as CoreBudget};
use napi::bindgen_prelude::Object;
use napi::{Env, JsValue, Unknown, ValueType};
use napi_derive::napi;
use std::time::Duration;

/// A number argument (`retryPercent`, `tokenRatio`, `k`): any number, the core checks its
/// range; not a number: a `TypeError`.
pub(crate) fn number(env: &Env, value: &Unknown<'_>, what: &str) -> Result<f64> {
    if value.get_type().or_throw()? != ValueType::Number {
        return Err(type_error(
            env,
            format!("{what} must be a number, got {}", describe(value)),
        ));
    }
    // SAFETY: the value was just checked to be a number.
    unsafe { value.cast::<f64>() }.or_throw()
}

/// A point on liblb's clock in nanoseconds: `nowMs` (a finite number >= 0, fractions allowed,
/// rounded to the nanosecond) if given, else the clock's reading.
fn now_ns(env: &Env, now_ms: Option<Unknown<'_>>) -> Result<u64> {
    let Some(now) = present(now_ms)? else {
        return Ok(MonotonicClock::now());
    };
    let ms = number(env, &now, "nowMs")?;
    let ns = (ms * 1e6).round();
    if ns.is_finite() && ns >= 0.0 && ns < u64::MAX as f64 {
        Ok(ns as u64)
    } else {
        Err(range_error(
            env,
            RANGE_ERROR_CODE,
            format!("nowMs must be a finite number >= 0, got {}", js_number(ms)),
        ))
    }
}

/// The options object of a constructor (absent, `undefined` or `null`: every default).
pub(crate) fn options<'e>(
    env: &Env,
    value: Option<Unknown<'e>>,
    what: &str,
) -> Result<Option<Object<'e>>> {
    let Some(value) = present(value)? else {
        return Ok(None);
    };
    if value.get_type().or_throw()? != ValueType::Object || value.is_array().or_throw()? {
        return Err(type_error(
            env,
            format!("{what} must be an object, got {}", describe(&value)),
        ));
    }
    // SAFETY: the value was just checked to be an object.
    Ok(Some(unsafe { value.cast::<Object>() }.or_throw()?))
}

/// Property `name` of an options object, if given (not `undefined` / `null`).
pub(crate) fn field<'e>(object: &Option<Object<'e>>, name: &str) -> Result<Option<Unknown<'e>>> {
    match object {
        Some(object) => present(object.get::<Unknown>(name).or_throw()?),
        None => Ok(None),
    }
}

/// A whole number of milliseconds up to 2^53 - 1 (`ttlMs`, `windowMs`), or `default`.
pub(crate) fn ms_field(
    env: &Env,
    object: &Option<Object<'_>>,
    name: &str,
    default: Duration,
) -> Result<Duration> {
    match field(object, name)? {
        Some(v) => Ok(Duration::from_millis(
            integer(env, &v, name, 9_007_199_254_740_991.0)? as u64,
        )),
        None => Ok(default),
    }
}

/// A retry budget (tower's `TpsBudget`, Finagle's `RetryBudget`): every request `deposit`s,
/// every retry `withdraw`s; deposits count for `ttlMs` (1000 to 60000, default 10000),
/// `minPerSec` retries per second are always allowed (default 10), and each deposit allows
/// `retryPercent` retries (0 to 1000, default 0.2). Bad values throw the core's
/// `LB_INVALID_OPTION_VALUE`.
#[napi]
pub struct RetryBudget {
    pub(crate) inner: std::sync::Arc<CoreBudget>,
}

#[napi]
impl RetryBudget {
    /// `new RetryBudget({ ttlMs?, minPerSec?, retryPercent?, nowMs? })`.
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "options?: { ttlMs?: number | null; minPerSec?: number | null; retryPercent?: number | null; nowMs?: number | null } | null"
    )]
    pub fn new(env: Env, options: Option<Unknown>) -> Result<Self> {
        let o = self::options(&env, options, "options")?;
        let ttl = ms_field(&env, &o, "ttlMs", CoreBudget::DEFAULT_TTL)?;
        let min_per_sec = match field(&o, "minPerSec")? {
            Some(v) => integer(&env, &v, "minPerSec", f64::from(u32::MAX))? as u32,
            None => CoreBudget::DEFAULT_MIN_PER_SEC,
        };
        let percent = match field(&o, "retryPercent")? {
            Some(v) => number(&env, &v, "retryPercent")?,
            None => CoreBudget::DEFAULT_RETRY_PERCENT,
        };
        let now = now_ns(&env, field(&o, "nowMs")?)?;
        let inner = CoreBudget::new(ttl, min_per_sec, percent, now).or_throw()?;
        Ok(RetryBudget {
            inner: inner.into(),
        })
    }

    /// liblb's clock in milliseconds (the same as `Balancer.nowMs()`): monotonic, one per
    /// process.
    #[napi(js_name = "nowMs", catch_unwind)]
    pub fn now_ms(&self) -> f64 {
        MonotonicClock::now() as f64 / 1e6
    }

    /// Records a request (a first attempt).
    #[napi(catch_unwind, ts_args_type = "nowMs?: number | null")]
    pub fn deposit(&self, env: Env, now_ms: Option<Unknown>) -> Result<()> {
        self.inner.deposit(now_ns(&env, now_ms)?);
        Ok(())
    }

    /// Takes one retry from the budget: true if it may be sent (and was taken).
    #[napi(catch_unwind, ts_args_type = "nowMs?: number | null")]
    pub fn withdraw(&self, env: Env, now_ms: Option<Unknown>) -> Result<bool> {
        Ok(self.inner.withdraw(now_ns(&env, now_ms)?))
    }

    /// Whether a retry could be withdrawn, without taking it.
    #[napi(
        js_name = "canWithdraw",
        catch_unwind,
        ts_args_type = "nowMs?: number | null"
    )]
    pub fn can_withdraw(&self, env: Env, now_ms: Option<Unknown>) -> Result<bool> {
        Ok(self.inner.can_withdraw(now_ns(&env, now_ms)?))
    }

    /// The retries available now.
    #[napi(catch_unwind, ts_args_type = "nowMs?: number | null")]
    pub fn available(&self, env: Env, now_ms: Option<Unknown>) -> Result<f64> {
        Ok(self.inner.available(now_ns(&env, now_ms)?) as f64)
    }
}

/// gRPC's retry throttling (gRFC A6): `maxTokens` tokens (1 to 1000), one less per failure,
/// `tokenRatio` more per success (at least 0.001, capped); retries and hedges are refused while
/// at most half are left.
#[napi]
pub struct RetryThrottle {
    pub(crate) inner: std::sync::Arc<CoreThrottle>,
}

#[napi]
impl RetryThrottle {
    /// `new RetryThrottle(maxTokens, tokenRatio)`.
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "maxTokens: number, tokenRatio: number"
    )]
    pub fn new(env: Env, max_tokens: Unknown, token_ratio: Unknown) -> Result<Self> {
        let max = integer(&env, &max_tokens, "maxTokens", f64::from(u32::MAX))? as u32;
        let ratio = number(&env, &token_ratio, "tokenRatio")?;
        Ok(RetryThrottle {
            inner: CoreThrottle::new(max, ratio).or_throw()?.into(),
        })
    }

    /// Records a failed attempt; returns whether retries are still allowed after it.
    #[napi(catch_unwind)]
    pub fn failure(&self) -> bool {
        self.inner.failure()
    }

    /// Records a successful attempt.
    #[napi(catch_unwind)]
    pub fn success(&self) {
        self.inner.success()
    }

    /// Whether a retry or a hedge may be sent now.
    #[napi(getter, catch_unwind)]
    pub fn allows(&self) -> bool {
        self.inner.allows()
    }

    /// The token count (with its thousandths).
    #[napi(getter, catch_unwind)]
    pub fn tokens(&self) -> f64 {
        self.inner.tokens()
    }
}

/// Client-side adaptive throttling (Google SRE book, chapter 21): over a sliding window of
/// `windowMs` (1000 to 3600000, default 120000) requests are rejected locally with probability
/// `max(0, (requests - k * accepts) / (requests + 1))` (`k` 1 to 100, default 2).
#[napi]
pub struct AdaptiveThrottle {
    pub(crate) inner: std::sync::Arc<CoreAdaptive>,
}

#[napi]
impl AdaptiveThrottle {
    /// `new AdaptiveThrottle({ k?, windowMs?, nowMs? })`.
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "options?: { k?: number | null; windowMs?: number | null; nowMs?: number | null } | null"
    )]
    pub fn new(env: Env, options: Option<Unknown>) -> Result<Self> {
        let o = self::options(&env, options, "options")?;
        let k = match field(&o, "k")? {
            Some(v) => number(&env, &v, "k")?,
            None => CoreAdaptive::DEFAULT_K,
        };
        let window = ms_field(&env, &o, "windowMs", CoreAdaptive::DEFAULT_WINDOW)?;
        let now = now_ns(&env, field(&o, "nowMs")?)?;
        let inner = CoreAdaptive::new(k, window, now).or_throw()?;
        Ok(AdaptiveThrottle {
            inner: inner.into(),
        })
    }

    /// liblb's clock in milliseconds (the same as `Balancer.nowMs()`): monotonic, one per
    /// process.
    #[napi(js_name = "nowMs", catch_unwind)]
    pub fn now_ms(&self) -> f64 {
        MonotonicClock::now() as f64 / 1e6
    }

    /// The probability that `admit` rejects a request now.
    #[napi(catch_unwind, ts_args_type = "nowMs?: number | null")]
    pub fn rejection(&self, env: Env, now_ms: Option<Unknown>) -> Result<f64> {
        Ok(self.inner.rejection(now_ns(&env, now_ms)?))
    }

    /// A request is about to be sent: true to send it, false to reject it locally; counted
    /// either way. `random` (64 bits: a bigint, a safe-integer number or decimal text)
    /// replaces the throttle's own draw.
    #[napi(
        catch_unwind,
        ts_args_type = "nowMs?: number | null, random?: bigint | number | string | null"
    )]
    pub fn admit(
        &self,
        env: Env,
        now_ms: Option<Unknown>,
        random: Option<Unknown>,
    ) -> Result<bool> {
        let now = now_ns(&env, now_ms)?;
        let random = match present(random)? {
            Some(r) => u64_value(&env, &r, "random")?,
            None => entropy(),
        };
        Ok(self.inner.admit(now, random))
    }

    /// A backend accepted a request (any answer but an overload refusal).
    #[napi(catch_unwind, ts_args_type = "nowMs?: number | null")]
    pub fn accepted(&self, env: Env, now_ms: Option<Unknown>) -> Result<()> {
        self.inner.accepted(now_ns(&env, now_ms)?);
        Ok(())
    }
}

/// 64 random bits for `admit` when the caller gives none: std's per-process random SipHash
/// keys, fresh for every `RandomState` (no dependency, never the same sequence twice).
fn entropy() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
