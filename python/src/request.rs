//! Requests for Python: `Balancer.request(...)` gives a `Request`, an iterator of leases, one
//! per attempt, over the core's `liblb_core::Request` (every decision — the next node, the
//! backoff, when to stop, hedging — is the core's). A lease from a request reports its
//! `finish`/`cancel` to the request (`PyLease::request`). The retry loops `Balancer.call` and
//! `Balancer.acall` are pure Python (`liblb/_request.py`): they only map exceptions to
//! failure kinds and sleep with the caller's runtime.

use crate::budget::{PyAdaptiveThrottle, PyRetryBudget, PyRetryThrottle};
use crate::convert::{self, seconds, short_repr};
use crate::error::OrRaise;
use crate::{PyLease, secs};
use liblb_core::{Balancer, Budget, Decision, Hedging, Outcome, Request, RetryOn, RetryPolicy};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString};
use std::sync::{Arc, Mutex, MutexGuard};

/// The core request a Python `Request` wraps: it holds the balancer and its own key.
type CoreRequest = Request<Arc<Balancer>, Vec<u8>>;

/// When a request sends a hedge (another attempt while one is out): `Hedging.after(seconds)`
/// or `Hedging.percentile(max_extra_load)`. Share one between requests: the percentile rule
/// learns from every request that uses it.
#[pyclass(frozen, module = "liblb", name = "Hedging")]
pub(crate) struct PyHedging {
    inner: Arc<Hedging>,
}

#[pymethods]
impl PyHedging {
    /// Hedge after `delay` (seconds or a timedelta) without an answer (gRPC's `hedgingDelay`).
    #[staticmethod]
    fn after(delay: &Bound<'_, PyAny>) -> PyResult<PyHedging> {
        let delay = seconds("delay", delay)?;
        Ok(PyHedging {
            inner: Arc::new(Hedging::after(delay)),
        })
    }

    /// Hedge after the `1 - max_extra_load` percentile of recent latencies (Finagle's backup
    /// requests), adding at most `max_extra_load` (above 0, below 1) to the load.
    #[staticmethod]
    fn percentile(max_extra_load: f64) -> PyResult<PyHedging> {
        let inner = Hedging::percentile(max_extra_load, 0).or_raise()?;
        Ok(PyHedging {
            inner: Arc::new(inner),
        })
    }
}

/// A budget object (`RetryBudget`, `RetryThrottle`, `AdaptiveThrottle`) as the core's `Budget`.
pub(crate) fn budget(value: &Bound<'_, PyAny>) -> PyResult<Budget> {
    if let Ok(b) = value.cast::<PyRetryBudget>() {
        Ok(Budget::Retry(b.get().inner.clone()))
    } else if let Ok(t) = value.cast::<PyRetryThrottle>() {
        Ok(Budget::Throttle(t.get().inner.clone()))
    } else if let Ok(t) = value.cast::<PyAdaptiveThrottle>() {
        Ok(Budget::Adaptive(t.get().inner.clone()))
    } else {
        Err(PyTypeError::new_err(format!(
            "budget must be RetryBudget, RetryThrottle, AdaptiveThrottle or None, got {}",
            value.get_type().name()?
        )))
    }
}

/// The policy from `Balancer.request`'s keywords, checked by the core.
fn policy(
    max_attempts: &Bound<'_, PyAny>,
    deadline: Option<&Bound<'_, PyAny>>,
    retry_on: Option<&Bound<'_, PyAny>>,
) -> PyResult<RetryPolicy> {
    if !max_attempts.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "max_attempts must be int, got {}",
            max_attempts.get_type().name()?
        )));
    }
    // An int no u32 holds is out of range like 0 or 101: the core's message says the range.
    let max_attempts = max_attempts.extract::<u32>().unwrap_or(0);
    let retry_on = match retry_on {
        None => RetryOn::ALL,
        Some(names) => {
            if names.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(
                    "retry_on must be an iterable of failure kinds, not a str",
                ));
            }
            let mut kinds = Vec::new();
            for name in names.try_iter()? {
                let name = name?;
                let name = name.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "retry_on items must be str: {}",
                        short_repr(&name)
                    ))
                })?;
                kinds.push(name.to_str()?.to_owned());
            }
            RetryOn::from_names(kinds.iter().map(String::as_str)).or_raise()?
        }
    };
    let deadline = deadline.map(|d| seconds("deadline", d)).transpose()?;
    let policy = RetryPolicy {
        max_attempts,
        retry_on,
        deadline,
        ..RetryPolicy::default()
    };
    Ok(policy)
}

/// `Balancer.request`: a request, not started (nothing is picked until the first attempt).
#[allow(
    clippy::too_many_arguments,
    reason = "the keywords of Balancer.request"
)]
pub(crate) fn new(
    balancer: &Arc<Balancer>,
    key: Option<&Bound<'_, PyAny>>,
    max_attempts: &Bound<'_, PyAny>,
    deadline: Option<&Bound<'_, PyAny>>,
    budget_arg: Option<&Bound<'_, PyAny>>,
    hedge: Option<&Bound<'_, PyAny>>,
    retry_on: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyRequest> {
    let key = key
        .map(|k| convert::with_key(k, <[u8]>::to_vec))
        .transpose()?;
    let policy = policy(max_attempts, deadline, retry_on)?;
    let budget = budget_arg
        .filter(|b| !b.is_none())
        .map(budget)
        .transpose()?;
    let hedging = match hedge.filter(|h| !h.is_none()) {
        None => None,
        Some(h) => Some(
            h.cast::<PyHedging>()
                .map_err(|_| PyTypeError::new_err("hedge must be a liblb.Hedging or None"))?
                .get()
                .inner
                .clone(),
        ),
    };
    let mut request = Request::new(balancer.clone(), key)
        .with_policy(policy)
        .or_raise()?;
    if let Some(budget) = budget {
        request = request.with_budget(budget);
    }
    if let Some(hedging) = hedging {
        request = request.with_hedging(hedging);
    }
    Ok(PyRequest {
        inner: Mutex::new(request),
        last: Mutex::new(None),
        decision: Mutex::new(None),
    })
}

/// One request's attempts: `for lease in balancer.request(key): ...`, each lease finished
/// (`lease.finish(ok=...)`) before the next; the iteration ends when the request is over
/// (a success, or `stopped` names why it gave up). The iterator never sleeps: wait
/// `backoff()` seconds before taking the next lease. Thread-safe, but one request is one
/// logical call: share balancers, not requests.
#[pyclass(frozen, module = "liblb", name = "Request")]
pub(crate) struct PyRequest {
    inner: Mutex<CoreRequest>,
    /// The lease the iterator gave last (`__next__` refuses while it is open).
    last: Mutex<Option<Py<PyLease>>>,
    /// The decision the last finished attempt got.
    decision: Mutex<Option<Decision>>,
}

impl PyRequest {
    pub(crate) fn lock(&self) -> MutexGuard<'_, CoreRequest> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends `lease` (an attempt of this request) with `outcome`; the core decides.
    pub(crate) fn finish(&self, lease: liblb_core::Lease, outcome: Outcome) {
        let mut request = self.lock();
        let decision = request.finish(lease, outcome);
        *self.decision.lock().unwrap_or_else(|e| e.into_inner()) = Some(decision);
    }

    /// Cancels `lease` (an attempt of this request): nothing is counted.
    pub(crate) fn cancel(&self, lease: liblb_core::Lease) {
        self.lock().cancel(lease);
    }

    /// A core lease as a Python lease that reports to this request.
    fn wrap<'py>(
        slf: &Bound<'py, PyRequest>,
        lease: Option<liblb_core::Lease>,
    ) -> PyResult<Option<Bound<'py, PyLease>>> {
        let py = slf.py();
        lease
            .map(|l| Bound::new(py, PyLease::for_request(py, l, slf.clone().unbind())))
            .transpose()
    }
}

#[pymethods]
impl PyRequest {
    /// The next attempt's lease, or None when the request is over. A second call while an
    /// attempt is out starts another attempt at once (a hedge without its timing: see
    /// `hedge()`). Balancer errors (NoNodesError, KeyRequiredError, ...) leave the request as
    /// it was.
    fn attempt<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyLease>>> {
        let lease = slf.get().lock().attempt().or_raise()?;
        Self::wrap(slf, lease)
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// The next attempt, after the previous one's lease has ended; raises `AttemptOpenError`
    /// if it has not (finish or cancel it first).
    fn __next__<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyLease>>> {
        let this = slf.get();
        let open = {
            let last = this.last.lock().unwrap_or_else(|e| e.into_inner());
            last.as_ref().is_some_and(|l| !l.get().is_done())
        };
        if open {
            return Err(crate::error::attempt_open());
        }
        let lease = Self::attempt(slf)?;
        *this.last.lock().unwrap_or_else(|e| e.into_inner()) =
            lease.as_ref().map(|l| l.clone().unbind());
        Ok(lease)
    }

    /// Sends a hedge now if the hedging policy and the budget allow: another attempt's lease
    /// on an untried node while one is out, or None.
    fn hedge<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyLease>>> {
        let lease = slf.get().lock().hedge().or_raise()?;
        Self::wrap(slf, lease)
    }

    /// Seconds to wait, from the last attempt's start, before `hedge()`; None: no hedge.
    fn hedge_after(&self) -> Option<f64> {
        self.lock().hedge_after().map(|d| d.as_secs_f64())
    }

    /// Seconds to wait before the next attempt, as the last failure's decision said (0.0
    /// before any). The iterator does not sleep: the caller does.
    fn backoff(&self) -> f64 {
        self.lock().backoff().as_secs_f64()
    }

    /// Why the request gave up (one of `STOP_REASONS`), or None (not over, or it succeeded).
    #[getter]
    fn stopped(&self) -> Option<&'static str> {
        self.lock().stopped().map(|s| s.name())
    }

    /// What the last finished attempt's outcome decided: "done", "retry" (wait `backoff()`,
    /// then the next attempt), "stop" (see `stopped`), "wait" (a hedge is still out: wait
    /// for its answer), or None before any attempt ended.
    #[getter]
    fn decision(&self) -> Option<&'static str> {
        let decision = *self.decision.lock().unwrap_or_else(|e| e.into_inner());
        decision.map(|d| match d {
            Decision::Done => "done",
            Decision::Retry(_) => "retry",
            Decision::Stop(_) => "stop",
            Decision::Wait => "wait",
        })
    }

    /// Whether the request is over (succeeded or gave up).
    #[getter]
    fn over(&self) -> bool {
        self.lock().is_over()
    }

    /// Attempts started so far.
    #[getter]
    fn attempts(&self) -> u32 {
        self.lock().attempts()
    }

    /// Which attempt succeeded (1-based, in the order they started), once one has.
    #[getter]
    fn winner(&self) -> Option<u32> {
        self.lock().winner()
    }

    /// Seconds left before the deadline (from the first attempt), or None without one.
    #[getter]
    fn remaining(&self) -> Option<f64> {
        self.lock().remaining().map(|d| secs(d.as_nanos() as u64))
    }

    fn __repr__(&self) -> String {
        let r = self.lock();
        let state = match (r.is_over(), r.stopped()) {
            (false, _) => "open".to_owned(),
            (true, None) => "done".to_owned(),
            (true, Some(stop)) => format!("stopped={}", stop.name()),
        };
        format!("<liblb.Request attempts={} {state}>", r.attempts())
    }
}
