//! Requests for JavaScript: `Balancer.request(key, options)` gives a `Request` over the core's
//! `liblb_core::Request` — attempts on distinct nodes, the retry policy, a budget, hedging —
//! whose every decision is the core's. `attempt()` and `hedge()` hand out `Lease`s that report
//! to the request: `request.finish(lease, outcome)` (or `lease.finish(outcome)`) ends one and
//! returns the decision. The async loop `Balancer.prototype.run(key, fn, options)` is
//! JavaScript (`fast.rs`): it awaits promises, races hedges and sleeps with timers.

use crate::Lease;
use crate::budget::{AdaptiveThrottle, RetryBudget, RetryThrottle, field, number, options};
use crate::error::{OrThrow, Result, type_error};
use crate::js::{self, describe, millis};
use liblb_core::{
    Balancer, Budget, Decision, Hedging as CoreHedging, MAX_ATTEMPTS, Outcome, RetryOn, RetryPolicy,
};
use napi::bindgen_prelude::{Either, JavaScriptClassExt, Null};
use napi::{Env, JsValue, Unknown};
use napi_derive::napi;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// The core request a JavaScript `Request` wraps, shared with the leases it hands out.
pub(crate) type Shared = Rc<RefCell<liblb_core::Request<Arc<Balancer>, Vec<u8>>>>;

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
fn with_instance<T: JavaScriptClassExt, R>(
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

/// `Balancer.request(key, options)`: the policy, budget and hedging from `options`.
pub(crate) fn new(
    env: &Env,
    balancer: &Arc<Balancer>,
    key: Option<Vec<u8>>,
    opts: Option<Unknown<'_>>,
) -> Result<Request> {
    let o = options(env, opts, "options")?;
    let mut policy = RetryPolicy::default();
    if let Some(n) = field(&o, "maxAttempts")? {
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
    if let Some(d) = field(&o, "deadlineMs")? {
        policy.deadline = Some(millis(env, &d, "deadlineMs")?);
    }
    if let Some(kinds) = field(&o, "retryOn")? {
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
    let budget = field(&o, "budget")?.map(|b| budget(env, &b)).transpose()?;
    let hedging = match field(&o, "hedge")? {
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
    Ok(Request {
        inner: Rc::new(RefCell::new(request)),
    })
}

/// What an attempt's outcome decided.
#[napi(object)]
pub struct RequestDecision {
    /// 'done' (a success), 'retry' (wait `delayMs`, then `attempt()`), 'stop' (gave up:
    /// `stop` says why) or 'wait' (a hedge is still out: wait for its answer).
    pub decision: String,
    /// For 'retry': milliseconds to wait before the next attempt (else 0).
    pub delay_ms: f64,
    /// For 'stop': one of `stopReasons()`; else null.
    pub stop: Either<String, Null>,
}

/// Ends `lease` (an attempt of `request`) with `outcome`: the core's decision.
pub(crate) fn finish(
    request: &Shared,
    lease: liblb_core::Lease,
    outcome: Outcome,
) -> RequestDecision {
    let decision = request.borrow_mut().finish(lease, outcome);
    let (name, delay, stop) = match decision {
        Decision::Done => ("done", 0.0, None),
        Decision::Retry(d) => ("retry", d.as_secs_f64() * 1000.0, None),
        Decision::Stop(s) => ("stop", 0.0, Some(s.name())),
        Decision::Wait => ("wait", 0.0, None),
    };
    RequestDecision {
        decision: name.into(),
        delay_ms: delay,
        stop: stop.map_or(Either::B(Null), |s| Either::A(s.into())),
    }
}

/// One request's attempts: `attempt()` a lease, send, `finish(lease, outcome)`, and do what
/// the decision says. Every decision is the core's; this object never waits.
#[napi]
pub struct Request {
    inner: Shared,
}

impl Request {
    fn lease(&self, lease: Option<liblb_core::Lease>) -> Option<Lease> {
        lease.map(|l| Lease::for_request(l, self.inner.clone()))
    }
}

#[napi]
impl Request {
    /// The next attempt's lease on an untried node, or null when the request is over (see
    /// `stopped`). Balancer errors (`LB_NO_NODES`, `LB_KEY_REQUIRED`) leave it as it was.
    #[napi(catch_unwind)]
    pub fn attempt(&self) -> Result<Option<Lease>> {
        let lease = self.inner.borrow_mut().attempt().or_throw()?;
        Ok(self.lease(lease))
    }

    /// Ends `lease`, an attempt of this request, with `outcome` (as `Lease.finish` takes it)
    /// and returns the decision. Throws `LB_LEASE_FINISHED` if it already ended.
    #[napi(catch_unwind, ts_args_type = "lease: Lease, outcome?: Outcome | null")]
    pub fn finish(
        &self,
        env: Env,
        lease: &Lease,
        outcome: Option<Unknown>,
    ) -> Result<RequestDecision> {
        lease.finish_for_request(&env, outcome, &self.inner)
    }

    /// Cancels `lease` (a hedge's loser): in-flight released, nothing counted.
    #[napi(catch_unwind)]
    pub fn cancel(&self, lease: &Lease) -> Result<()> {
        lease.cancel()
    }

    /// Sends a hedge now if the hedging policy and the budget allow: a lease, or null.
    #[napi(catch_unwind)]
    pub fn hedge(&self) -> Result<Option<Lease>> {
        let lease = self.inner.borrow_mut().hedge().or_throw()?;
        Ok(self.lease(lease))
    }

    /// Milliseconds from the last attempt's start before `hedge()`; null: no hedge.
    #[napi(js_name = "hedgeAfterMs", catch_unwind)]
    pub fn hedge_after_ms(&self) -> Option<f64> {
        let after = self.inner.borrow().hedge_after();
        after.map(|d| d.as_secs_f64() * 1000.0)
    }

    /// Milliseconds the last 'retry' decision said to wait (0 before any).
    #[napi(js_name = "backoffMs", catch_unwind)]
    pub fn backoff_ms(&self) -> f64 {
        self.inner.borrow().backoff().as_secs_f64() * 1000.0
    }

    /// Why the request gave up (one of `stopReasons()`), or null.
    #[napi(getter, catch_unwind)]
    pub fn stopped(&self) -> Option<&'static str> {
        self.inner.borrow().stopped().map(|s| s.name())
    }

    /// Whether the request is over (succeeded or gave up).
    #[napi(getter, catch_unwind)]
    pub fn over(&self) -> bool {
        self.inner.borrow().is_over()
    }

    /// Attempts started so far.
    #[napi(getter, catch_unwind)]
    pub fn attempts(&self) -> u32 {
        self.inner.borrow().attempts()
    }

    /// Which attempt succeeded (1-based, in start order), once one has; else null.
    #[napi(getter, catch_unwind)]
    pub fn winner(&self) -> Option<u32> {
        self.inner.borrow().winner()
    }

    /// Milliseconds left before the deadline, or null without one.
    #[napi(getter, js_name = "remainingMs", catch_unwind)]
    pub fn remaining_ms(&self) -> Option<f64> {
        let left = self.inner.borrow().remaining();
        left.map(|d| d.as_secs_f64() * 1000.0)
    }
}
