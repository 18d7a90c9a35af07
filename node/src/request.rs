//! Requests for JavaScript: `Balancer.request(key, options)` gives a `Request` over the core's
//! `liblb_core::Request` — attempts on distinct nodes, the retry policy, a budget, hedging —
//! whose every decision is the core's. `attempt()` and `hedge()` hand out `Lease`s that report
//! to the request: `request.finish(lease, outcome)` (or `lease.finish(outcome)`) ends one and
//! returns the decision. The objects and their methods are made by `leases.rs` (JavaScript over
//! handles, for speed); this file reads a request's options and encodes a decision. The async
//! loop `Balancer.prototype.run(key, fn, options)` is JavaScript (`fast.rs`): it awaits
//! promises, races hedges and sleeps with timers.

use crate::budget::{AdaptiveThrottle, RetryBudget, RetryThrottle, field, number, options};
use crate::error::{OrThrow, Result, type_error};
use crate::js::{self, describe, millis};
use liblb_core::{
    Balancer, Budget, Decision, Hedging as CoreHedging, MAX_ATTEMPTS, Outcome, RetryOn,
    RetryPolicy, Stop,
};
use napi::bindgen_prelude::JavaScriptClassExt;
use napi::{Env, JsValue, Unknown};
use napi_derive::napi;
use std::cell::RefCell;
use std::sync::Arc;

/// The core request a JavaScript `Request` stands for.
pub(crate) type Core = liblb_core::Request<Arc<Balancer>, Vec<u8>>;

/// When a request sends a hedge: `Hedging.after(delayMs)` or `Hedging.percentile(maxExtraLoad)`.
/// Share one between requests: the percentile rule learns from every request using it.
#[napi]
pub struct Hedging {
    inner: Arc<CoreHedging>,
}

#[napi]
impl Hedging {
    /// Hedge after `delayMs` without an answer (gRPC's `hedgingDelay`).
    #[napi(factory, catch_unwind, ts_args_type = "delayMs: number")]
    pub fn after(env: Env, delay_ms: Unknown) -> Result<Hedging> {
        let delay = millis(&env, &delay_ms, "delayMs")?;
        Ok(Hedging {
            inner: Arc::new(CoreHedging::after(delay)),
        })
    }

    /// Hedge after the `1 - maxExtraLoad` percentile of recent latencies (Finagle's backup
    /// requests): `maxExtraLoad` above 0 and below 1, else `LB_INVALID_OPTION_VALUE`.
    #[napi(factory, catch_unwind, ts_args_type = "maxExtraLoad: number")]
    pub fn percentile(env: Env, max_extra_load: Unknown) -> Result<Hedging> {
        let load = number(&env, &max_extra_load, "maxExtraLoad")?;
        Ok(Hedging {
            inner: Arc::new(CoreHedging::percentile(load, 0).or_throw()?),
        })
    }
}

/// `f` of the `T` behind `value` if it is an instance of class `T`, else `None`.
pub(crate) fn with_instance<T: JavaScriptClassExt, R>(
    env: &Env,
    value: &Unknown<'_>,
    f: impl FnOnce(&T) -> R,
) -> Result<Option<R>> {
    if !T::instance_of(env, value).or_throw()? {
        return Ok(None);
    }
    let mut raw = std::ptr::null_mut();
    // SAFETY: a valid env and value; `raw` is an out-pointer. An object that only has the
    // class's prototype (`Object.create(RetryBudget.prototype)`) wraps nothing: an error here.
    napi::check_status!(unsafe { napi::sys::napi_unwrap(env.raw(), value.raw(), &mut raw) })
        .or_throw()?;
    // SAFETY: `value` is an instance of `T`'s class and wraps a native object, which napi-rs
    // made from a `T` (the same check napi-rs's generated `&T` arguments make without the
    // napi8 type tags, see Cargo.toml); it lives as long as `value`, which outlives this call,
    // and `f` only clones an `Arc` out of it.
    Ok(Some(f(unsafe { &*raw.cast::<T>() })))
}

/// A budget object as the core's `Budget`; anything else is a `TypeError`.
pub(crate) fn budget(env: &Env, value: &Unknown<'_>) -> Result<Budget> {
    if let Some(b) = with_instance(env, value, |b: &RetryBudget| Budget::Retry(b.inner.clone()))? {
        return Ok(b);
    }
    if let Some(t) = with_instance(env, value, |t: &RetryThrottle| {
        Budget::Throttle(t.inner.clone())
    })? {
        return Ok(t);
    }
    if let Some(t) = with_instance(env, value, |t: &AdaptiveThrottle| {
        Budget::Adaptive(t.inner.clone())
    })? {
        return Ok(t);
    }
    Err(type_error(
        env,
        format!(
            "budget must be a RetryBudget, RetryThrottle or AdaptiveThrottle, got {}",
            describe(value)
        ),
    ))
}

/// The fields of a request's options, in the order [`new`] reads and checks them.
pub const OPTION_FIELDS: [&str; 5] = ["maxAttempts", "deadlineMs", "retryOn", "budget", "hedge"];

/// `Balancer.request(key, options)`: the policy, budget and hedging from `options`, or from
/// its [`OPTION_FIELDS`] as the caller already read them from a plain object (`read[i]` is
/// field `i`, `None` when `undefined` or `null`).
pub(crate) fn new(
    env: &Env,
    balancer: &Arc<Balancer>,
    key: Option<Vec<u8>>,
    opts: Option<Unknown<'_>>,
    read: Option<[Option<Unknown<'_>>; 5]>,
) -> Result<Core> {
    let o = match read {
        Some(_) => None,
        None => options(env, opts, "options")?,
    };
    let field = |i: usize| -> Result<Option<Unknown<'_>>> {
        match read {
            Some(read) => Ok(read[i]),
            None => field(&o, OPTION_FIELDS[i]),
        }
    };
    let mut policy = RetryPolicy::default();
    if let Some(n) = field(0)? {
        // Any number that is not a whole 1 to 100 is the core's range error, naming the value.
        let n = number(env, &n, "maxAttempts")?;
        if n.fract() != 0.0 || !(1.0..=f64::from(MAX_ATTEMPTS)).contains(&n) {
            let error = liblb_core::Error::InvalidOptionValue {
                option: "max_attempts",
                value: js::js_number(n),
                expected: "1 to 100",
            };
            return Err(error).or_throw();
        }
        policy.max_attempts = n as u32;
    }
    if let Some(d) = field(1)? {
        policy.deadline = Some(millis(env, &d, "deadlineMs")?);
    }
    if let Some(kinds) = field(2)? {
        let list = js::array(env, &kinds, "retryOn")?;
        let mut names = Vec::new();
        for i in 0..list.len() {
            let item: Unknown = list
                .get(i)
                .or_throw()?
                .ok_or_else(|| type_error(env, format!("retryOn[{i}] must be a failure kind")))?;
            names.push(js::string(env, &item, "retryOn item")?);
        }
        policy.retry_on = RetryOn::from_names(names.iter().map(String::as_str)).or_throw()?;
    }
    let budget = field(3)?.map(|b| budget(env, &b)).transpose()?;
    let hedging = match field(4)? {
        None => None,
        Some(h) => Some(
            with_instance(env, &h, |h: &Hedging| h.inner.clone())?.ok_or_else(|| {
                type_error(
                    env,
                    format!("hedge must be a Hedging, got {}", describe(&h)),
                )
            })?,
        ),
    };
    let mut request = liblb_core::Request::new(balancer.clone(), key)
        .with_policy(policy)
        .or_throw()?;
    if let Some(budget) = budget {
        request = request.with_budget(budget);
    }
    if let Some(hedging) = hedging {
        request = request.with_hedging(hedging);
    }
    Ok(request)
}

/// The decisions' names, indexed by the low two bits of [`finish`]'s code.
pub const DECISIONS: [&str; 4] = ["done", "retry", "stop", "wait"];

/// Ends `lease` (an attempt of `request`) with `outcome`: the core's decision as a code (its
/// index in [`DECISIONS`], plus 4 x (1 + the stop reason's index in `Stop::NAMES`) for a stop)
/// and a retry's delay in milliseconds (else 0).
pub(crate) fn finish(
    request: &RefCell<Core>,
    lease: liblb_core::Lease,
    outcome: Outcome,
) -> Result<(u32, f64)> {
    let decision = request
        .try_borrow_mut()
        .map_err(|_| {
            crate::error::Error::new(
                crate::error::Code::Napi(napi::Status::GenericFailure),
                "liblb: request busy".to_string(),
            )
        })?
        .finish(lease, outcome);
    Ok(match decision {
        Decision::Done => (0, 0.0),
        Decision::Retry(d) => (1, d.as_secs_f64() * 1000.0),
        Decision::Stop(s) => {
            let index = Stop::NAMES.iter().position(|n| *n == s.name()).unwrap_or(0);
            (2 + 4 * (1 + index as u32), 0.0)
        }
        Decision::Wait => (3, 0.0),
    })
}

/// One request's attempts: `attempt()` a lease, send, `finish(lease, outcome)`, and do what
/// the decision says. Every decision is the core's; this object never waits. (Its members are
/// defined by `leases.rs`; their declarations are in `header.d.ts`.)
#[napi]
pub struct Request {}
