//! Retry budgets and throttles for Python: `RetryBudget`, `RetryThrottle` and
//! `AdaptiveThrottle`, frozen classes over the core's lock-free objects, so one object can be
//! shared by any number of threads (free-threaded builds included). Times are seconds on liblb's
//! monotonic clock, the one every balancer reads (`Balancer.now()`, one per process); every method
//! that reads the clock also takes an explicit `now`, so tests and the conformance vectors
//! replay exact times. Every decision is the core's (`liblb_core::budget`).

use crate::convert::{seconds, short_repr};
use crate::error::{CoreError, OrRaise};
use liblb_core::{AdaptiveThrottle, Error, MonotonicClock, RetryBudget, RetryThrottle};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt};
use std::time::Duration;

/// A point on liblb's clock in nanoseconds: `now` (seconds, a finite float or int >= 0) if
/// given, else the clock's reading. Never goes back is the caller's part.
fn now_ns(now: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    let Some(now) = now else {
        return Ok(MonotonicClock::now());
    };
    if !(now.is_instance_of::<PyFloat>() || now.is_instance_of::<PyInt>()) {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "now must be float seconds, got {}",
            now.get_type().name()?
        )));
    }
    let s: f64 = now.extract()?;
    // Rounded to the nanosecond: `now=1.1` is 1100000000 ns, as the same time in Node and C.
    let ns = (s * 1e9).round();
    if ns.is_finite() && ns >= 0.0 && ns < u64::MAX as f64 {
        Ok(ns as u64)
    } else {
        Err(PyValueError::new_err(format!(
            "now must be a finite number of seconds >= 0, got {}",
            short_repr(now)
        )))
    }
}

/// A span (`ttl`, `window`): seconds as a float or int, or a `datetime.timedelta`. A value the
/// core cannot take (negative, NaN, infinite) is the core's `InvalidOptionValue` for `option`
/// (its name in milliseconds, as the core checks the range).
pub(crate) fn span(
    option: &'static str,
    value: &Bound<'_, PyAny>,
    expected: &'static str,
) -> PyResult<Duration> {
    seconds(option, value).map_err(|e| {
        if e.is_instance_of::<pyo3::exceptions::PyTypeError>(value.py()) {
            return e;
        }
        CoreError(Error::InvalidOptionValue {
            option,
            value: short_repr(value),
            expected,
        })
        .into()
    })
}

/// A count argument (`min_per_sec`, `max_tokens`): an int; one that no `u32` holds is the
/// core's `InvalidOptionValue` for `option`.
fn count(option: &'static str, value: &Bound<'_, PyAny>, expected: &'static str) -> PyResult<u32> {
    if !value.is_instance_of::<PyInt>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{option} must be int, got {}",
            value.get_type().name()?
        )));
    }
    value.extract::<u32>().map_err(|_| {
        CoreError(Error::InvalidOptionValue {
            option,
            value: short_repr(value),
            expected,
        })
        .into()
    })
}

/// A retry budget (tower's `TpsBudget`, Finagle's `RetryBudget`): every request deposits,
/// every retry withdraws; deposits count for `ttl` seconds, and `min_per_sec` retries per
/// second are always allowed. Thread-safe; share one between the threads (and balancers)
/// whose retries should share a limit.
#[pyclass(frozen, module = "liblb", name = "RetryBudget")]
pub(crate) struct PyRetryBudget {
    pub(crate) inner: std::sync::Arc<RetryBudget>,
}

#[pymethods]
impl PyRetryBudget {
    #[new]
    #[pyo3(signature = (ttl=None, min_per_sec=None, retry_percent=RetryBudget::DEFAULT_RETRY_PERCENT, *, now=None))]
    fn new(
        ttl: Option<&Bound<'_, PyAny>>,
        min_per_sec: Option<&Bound<'_, PyAny>>,
        retry_percent: f64,
        now: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let ttl = match ttl {
            Some(ttl) => span("ttl_ms", ttl, "1000 to 60000 (milliseconds)")?,
            None => RetryBudget::DEFAULT_TTL,
        };
        let min_per_sec = match min_per_sec {
            Some(n) => count("min_per_sec", n, "below 2147483647")?,
            None => RetryBudget::DEFAULT_MIN_PER_SEC,
        };
        let now = now_ns(now)?;
        let inner = RetryBudget::new(ttl, min_per_sec, retry_percent, now).or_raise()?;
        Ok(PyRetryBudget {
            inner: std::sync::Arc::new(inner),
        })
    }

    /// liblb's clock in seconds (the same as `Balancer.now()`): monotonic, one per process.
    fn now(&self) -> f64 {
        MonotonicClock::now() as f64 / 1e9
    }

    /// Records a request (a first attempt).
    #[pyo3(signature = (*, now=None))]
    fn deposit(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.inner.deposit(now_ns(now)?);
        Ok(())
    }

    /// Takes one retry from the budget: True if it may be sent (and was taken).
    #[pyo3(signature = (*, now=None))]
    fn withdraw(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        Ok(self.inner.withdraw(now_ns(now)?))
    }

    /// Whether a retry could be withdrawn, without taking it.
    #[pyo3(signature = (*, now=None))]
    fn can_withdraw(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        Ok(self.inner.can_withdraw(now_ns(now)?))
    }

    /// The retries available now.
    #[pyo3(signature = (*, now=None))]
    fn available(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        Ok(self.inner.available(now_ns(now)?))
    }
}

/// gRPC's retry throttling (gRFC A6): `max_tokens` tokens, one less per failure, `token_ratio`
/// more per success (capped); retries and hedges are refused while at most half are left.
/// Thread-safe.
#[pyclass(frozen, module = "liblb", name = "RetryThrottle")]
pub(crate) struct PyRetryThrottle {
    pub(crate) inner: std::sync::Arc<RetryThrottle>,
}

#[pymethods]
impl PyRetryThrottle {
    #[new]
    fn new(max_tokens: &Bound<'_, PyAny>, token_ratio: f64) -> PyResult<Self> {
        let max_tokens = count("max_tokens", max_tokens, "1 to 1000")?;
        let inner = RetryThrottle::new(max_tokens, token_ratio).or_raise()?;
        Ok(PyRetryThrottle {
            inner: std::sync::Arc::new(inner),
        })
    }

    /// Records a failed attempt; returns whether retries are still allowed after it.
    fn failure(&self) -> bool {
        self.inner.failure()
    }

    /// Records a successful attempt.
    fn success(&self) {
        self.inner.success()
    }

    /// Whether a retry or a hedge may be sent now.
    #[getter]
    fn allows(&self) -> bool {
        self.inner.allows()
    }

    /// The token count (with its thousandths).
    #[getter]
    fn tokens(&self) -> f64 {
        self.inner.tokens()
    }
}

/// Client-side adaptive throttling (Google SRE book, chapter 21): over a sliding `window` of
/// seconds, requests are rejected locally with probability
/// `max(0, (requests - k * accepts) / (requests + 1))`. Thread-safe.
#[pyclass(frozen, module = "liblb", name = "AdaptiveThrottle")]
pub(crate) struct PyAdaptiveThrottle {
    pub(crate) inner: std::sync::Arc<AdaptiveThrottle>,
}

#[pymethods]
impl PyAdaptiveThrottle {
    #[new]
    #[pyo3(signature = (k=AdaptiveThrottle::DEFAULT_K, window=None, *, now=None))]
    fn new(
        k: f64,
        window: Option<&Bound<'_, PyAny>>,
        now: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let window = match window {
            Some(window) => span("window_ms", window, "1000 to 3600000 (milliseconds)")?,
            None => AdaptiveThrottle::DEFAULT_WINDOW,
        };
        let inner = AdaptiveThrottle::new(k, window, now_ns(now)?).or_raise()?;
        Ok(PyAdaptiveThrottle {
            inner: std::sync::Arc::new(inner),
        })
    }

    /// liblb's clock in seconds (the same as `Balancer.now()`): monotonic, one per process.
    fn now(&self) -> f64 {
        MonotonicClock::now() as f64 / 1e9
    }

    /// The probability that `admit` rejects a request now.
    #[pyo3(signature = (*, now=None))]
    fn rejection(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        Ok(self.inner.rejection(now_ns(now)?))
    }

    /// A request is about to be sent: True to send it, False to reject it locally; counted
    /// either way. `random` (an int 0..2**64-1) replaces the throttle's own random draw.
    #[pyo3(signature = (*, now=None, random=None))]
    fn admit(
        &self,
        now: Option<&Bound<'_, PyAny>>,
        random: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let now = now_ns(now)?;
        let random = match random {
            Some(r) => random_bits(r)?,
            None => entropy(),
        };
        Ok(self.inner.admit(now, random))
    }

    /// A backend accepted a request (any answer but an overload refusal).
    #[pyo3(signature = (*, now=None))]
    fn accepted(&self, now: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.inner.accepted(now_ns(now)?);
        Ok(())
    }
}

/// The caller's 64 random bits for `admit`: an int from 0 to 2**64-1.
fn random_bits(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if !value.is_instance_of::<PyInt>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "random must be int, got {}",
            value.get_type().name()?
        )));
    }
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "random must be an integer from 0 to 2**64-1, got {}",
            short_repr(value)
        ))
    })
}

/// 64 random bits for `admit` when the caller gives none: std's per-process random SipHash
/// keys, fresh for every `RandomState` (no dependency, never the same sequence twice).
fn entropy() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
