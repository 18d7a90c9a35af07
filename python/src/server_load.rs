//! `liblb.ServerLoad` and `liblb.ServerRequest`: the server side of server-reported load, the
//! core's `liblb_core::ServerLoad`. A backend starts and finishes each request on it, sets its
//! utilisations, and answers Prequal probes and ORCA `endpoint-load-metrics` headers from it.
//! Times are liblb's monotonic clock (`Balancer.now()`), read here, so Python never passes one;
//! every number is the core's.
//!
//! A `ServerRequest` holds the core's move-only token until it ends: finishing it twice raises
//! `LeaseFinishedError` (the binding's "already ended" error, code `LB_LEASE_FINISHED`), and one
//! collected unfinished is cancelled, as a `Lease` is.

use crate::budget::span;
use crate::error::{self, OrRaise};
use crate::orca::PyLoadReport;
use liblb_core::{HeaderForm, MonotonicClock, ServerLoad, Started};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::sync::{Arc, Mutex};

/// A server's own load: requests in flight, request and error rates over the last 10 seconds,
/// latency by in-flight level, and the utilisations the application sets. Thread-safe and
/// lock-free: share one between every thread (or task) that serves requests.
#[pyclass(frozen, module = "liblb", name = "ServerLoad")]
pub(crate) struct PyServerLoad {
    inner: Arc<ServerLoad>,
}

/// A request a `ServerLoad` has started: end it once with `ServerLoad.finish` or `cancel`, or
/// use it as a context manager (`with load.start():` finishes it, a failure if an exception
/// escapes).
#[pyclass(frozen, module = "liblb", name = "ServerRequest")]
pub(crate) struct PyServerRequest {
    load: Arc<ServerLoad>,
    rif: u32,
    started_ns: u64,
    /// The core's token, until the request ends.
    started: Mutex<Option<Started>>,
}

impl PyServerRequest {
    /// Takes the token out if the request has not ended yet.
    fn take(&self) -> Option<Started> {
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Takes the token out for `load`, or raises: another load's request is a `ValueError`,
    /// an ended one `LeaseFinishedError`.
    fn open(&self, load: &Arc<ServerLoad>) -> PyResult<Started> {
        if !Arc::ptr_eq(&self.load, load) {
            return Err(PyValueError::new_err(
                "this request was started by another ServerLoad",
            ));
        }
        self.take().ok_or_else(|| {
            error::finished("the server request has already ended (finished or cancelled)")
        })
    }
}

/// A request collected unfinished is cancelled, so it does not stay in flight forever.
impl Drop for PyServerRequest {
    fn drop(&mut self) {
        if let Some(started) = self.take() {
            self.load.cancel(started);
        }
    }
}

#[pymethods]
impl PyServerLoad {
    /// A server load whose rate window starts now. `window`: the rates' window (float seconds
    /// or a timedelta, 1 s to 1 h; default 10 s); `latency_max_age`: how long a latency sample
    /// counts (1 ms to 1 h; default 1 s). Another value raises `InvalidOptionValueError`.
    #[new]
    #[pyo3(signature = (*, window=None, latency_max_age=None))]
    fn new(
        window: Option<&Bound<'_, PyAny>>,
        latency_max_age: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let window = match window {
            Some(w) => span("window_ms", w, "1000 to 3600000 (milliseconds)")?,
            None => ServerLoad::DEFAULT_WINDOW,
        };
        let latency_max_age = match latency_max_age {
            Some(a) => span("latency_max_age_ms", a, "1 to 3600000 (milliseconds)")?,
            None => ServerLoad::DEFAULT_LATENCY_MAX_AGE,
        };
        let inner = ServerLoad::with_window(window, MonotonicClock::now())
            .and_then(|load| load.with_latency_max_age(latency_max_age))
            .or_raise()?;
        Ok(PyServerLoad {
            inner: Arc::new(inner),
        })
    }

    /// The rates' window, in seconds.
    #[getter]
    fn window(&self) -> f64 {
        self.inner.window().as_secs_f64()
    }

    /// How long a latency sample counts, in seconds.
    #[getter]
    fn latency_max_age(&self) -> f64 {
        self.inner.latency_max_age().as_secs_f64()
    }

    /// A request arrives: in flight + 1. The request remembers when, and how many were in
    /// flight already.
    fn start(&self) -> PyServerRequest {
        let started = self.inner.start(MonotonicClock::now());
        PyServerRequest {
            load: self.inner.clone(),
            rif: started.rif(),
            started_ns: started.started_ns(),
            started: Mutex::new(Some(started)),
        }
    }

    /// The request ends, successfully or not: in flight - 1, counted in the rates, and a
    /// success's latency filed under the in-flight level it found. Returns its latency in
    /// seconds. Raises `LeaseFinishedError` if it already ended.
    #[pyo3(signature = (request, *, ok=true))]
    fn finish(&self, request: &Bound<'_, PyServerRequest>, ok: bool) -> PyResult<f64> {
        let started = request.get().open(&self.inner)?;
        Ok((self.inner.finish(started, MonotonicClock::now(), ok)).as_secs_f64())
    }

    /// The request was abandoned: in flight - 1, nothing else counted. Raises
    /// `LeaseFinishedError` if it already ended.
    fn cancel(&self, request: &Bound<'_, PyServerRequest>) -> PyResult<()> {
        self.inner.cancel(request.get().open(&self.inner)?);
        Ok(())
    }

    /// The answer to a Prequal probe now: `(rif, latency)`, the requests in flight and the
    /// latency in seconds expected at that level (0.0 when no request succeeded within the
    /// latency max age, 1 s by default).
    fn probe(&self) -> (u32, f64) {
        let probe = self.inner.probe(MonotonicClock::now());
        (probe.rif, probe.latency.as_secs_f64())
    }

    /// Requests in flight now.
    #[getter]
    fn in_flight(&self) -> u32 {
        self.inner.in_flight()
    }

    /// The CPU utilisation last set (0.0 before any).
    #[getter]
    fn cpu_utilization(&self) -> f64 {
        self.inner.cpu_utilization()
    }

    /// The memory utilisation last set (0.0 before any).
    #[getter]
    fn mem_utilization(&self) -> f64 {
        self.inner.mem_utilization()
    }

    /// The application utilisation last set (0.0 before any).
    #[getter]
    fn application_utilization(&self) -> f64 {
        self.inner.application_utilization()
    }

    /// Sets the CPU utilisation (finite, at least 0, may exceed 1); an invalid value raises
    /// `InvalidLoadReportError` and changes nothing.
    fn set_cpu_utilization(&self, value: f64) -> PyResult<()> {
        self.inner.set_cpu_utilization(value).or_raise()
    }

    /// Sets the memory utilisation (0 to 1); an invalid value raises `InvalidLoadReportError`
    /// and changes nothing.
    fn set_mem_utilization(&self, value: f64) -> PyResult<()> {
        self.inner.set_mem_utilization(value).or_raise()
    }

    /// Sets the application utilisation (finite, at least 0, may exceed 1); an invalid value
    /// raises `InvalidLoadReportError` and changes nothing.
    fn set_application_utilization(&self, value: f64) -> PyResult<()> {
        self.inner.set_application_utilization(value).or_raise()
    }

    /// The ORCA load report now: the utilisations, `rps_fractional` and `eps` over the last 10
    /// seconds, and the named metrics `rif` and (when a request succeeded in the last second)
    /// `latency_ms`.
    fn report(&self) -> PyLoadReport {
        PyLoadReport::from(self.inner.report(MonotonicClock::now()))
    }

    /// `report()` as an `endpoint-load-metrics` header value: `form` "text" (`TEXT
    /// name:value,...`) or "bin" (`BIN <base64>`); another form raises
    /// `InvalidOptionValueError`.
    #[pyo3(signature = (form="text"))]
    fn header(&self, form: &str) -> PyResult<String> {
        let form = form.parse::<HeaderForm>().or_raise()?;
        self.inner.header(MonotonicClock::now(), form).or_raise()
    }

    fn __repr__(&self) -> String {
        format!("<liblb.ServerLoad in_flight={}>", self.inner.in_flight())
    }
}

#[pymethods]
impl PyServerRequest {
    /// The requests that were in flight when it started (itself not counted).
    #[getter]
    fn rif(&self) -> u32 {
        self.rif
    }

    /// When it started, in seconds of liblb's clock (`Balancer.now()`).
    #[getter]
    fn started(&self) -> f64 {
        self.started_ns as f64 / 1e9
    }

    /// Whether it has ended (finished or cancelled).
    #[getter]
    fn done(&self) -> bool {
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Finishes the request unless the block already ended it: a failure if an exception
    /// escaped.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        if let Some(started) = self.take() {
            let ok = exc_type.is_none();
            self.load.finish(started, MonotonicClock::now(), ok);
        }
        false
    }

    fn __repr__(&self) -> String {
        let state = if self.done() { "ended" } else { "open" };
        format!("<liblb.ServerRequest rif={} {state}>", self.rif)
    }
}
