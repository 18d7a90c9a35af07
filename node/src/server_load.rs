//! `ServerLoad` and `ServerRequest`: the server side of server-reported load, the core's
//! `liblb_core::ServerLoad`. A backend starts and finishes each request on it, sets its
//! utilisations, and answers Prequal probes and ORCA `endpoint-load-metrics` headers from it.
//! Times are liblb's monotonic clock (`Balancer.nowMs()`), read here, so JavaScript never
//! passes one; latencies come back in milliseconds. Argument conversion only: every number is
//! the core's.
//!
//! A `ServerRequest` holds the core's move-only token until it ends: ending it twice throws
//! `LB_LEASE_FINISHED` (the binding's "already ended" code), and one garbage-collected
//! unfinished is cancelled, as a `Lease` is. Like a `Balancer`, a `ServerLoad` object belongs
//! to the JavaScript thread that made it (each worker makes its own).

use crate::budget::{ms_field, number, options as options_object};
use crate::error::{Code, Error, OrThrow, Result, type_error};
use crate::js::{describe, present, string};
use crate::orca::Report;
use crate::request::with_instance;
use liblb_core::{HeaderForm, MonotonicClock, ServerLoad as Core, Started};
use napi::{Env, Unknown, ValueType};
use napi_derive::napi;
use std::cell::Cell;
use std::sync::Arc;

/// A server's own load: requests in flight, request and error rates over the last 10 seconds,
/// latency by in-flight level, and the utilisations the application sets. It answers Prequal
/// probes (`probe()`) and writes ORCA `endpoint-load-metrics` headers (`header()`).
#[napi]
pub struct ServerLoad {
    inner: Arc<Core>,
}

/// A request a `ServerLoad` started (`start()`): end it once with `finish` or `cancel`. One
/// garbage-collected unfinished is cancelled.
#[napi]
pub struct ServerRequest {
    load: Arc<Core>,
    rif: u32,
    started_ns: u64,
    /// The core's token, until the request ends.
    started: Cell<Option<Started>>,
}

/// A Prequal probe answer (`ServerLoad.probe()`).
#[napi(object)]
pub struct Probe {
    /// Requests in flight now.
    pub rif: u32,
    /// The latency expected for a request arriving at this level, in milliseconds (0 when no
    /// request has succeeded within the latency max age, 1 s by default).
    pub latency_ms: f64,
}

/// A request collected unfinished is cancelled, so it does not stay in flight forever.
impl Drop for ServerRequest {
    fn drop(&mut self) {
        if let Some(started) = self.started.take() {
            self.load.cancel(started);
        }
    }
}

impl ServerLoad {
    /// The token of `request` (a `ServerRequest` of this load that has not ended), or the
    /// error saying why not.
    fn open(&self, env: &Env, request: &Unknown<'_>) -> Result<Started> {
        let taken = with_instance(env, request, |r: &ServerRequest| {
            Arc::ptr_eq(&r.load, &self.inner).then(|| r.started.take())
        })?;
        match taken {
            Some(Some(Some(started))) => Ok(started),
            Some(Some(None)) => Err(Error::new(
                Code::Lb(crate::LEASE_FINISHED),
                "the server request has already ended (finished or cancelled)".to_string(),
            )),
            Some(None) => Err(type_error(
                env,
                "request was started by another ServerLoad".to_string(),
            )),
            None => Err(type_error(
                env,
                format!("request must be a ServerRequest, got {}", describe(request)),
            )),
        }
    }
}

#[napi]
impl ServerLoad {
    /// `new ServerLoad({ windowMs?, latencyMaxAgeMs? })`: a server load whose rate window
    /// starts now. `windowMs`: the rates' window (1000 to 3600000, default 10000);
    /// `latencyMaxAgeMs`: how long a latency sample counts (1 to 3600000, default 1000). Other
    /// values throw the core's `LB_INVALID_OPTION_VALUE`.
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "options?: { windowMs?: number | null; latencyMaxAgeMs?: number | null } | null"
    )]
    pub fn new(env: Env, options: Option<Unknown>) -> Result<Self> {
        let o = options_object(&env, options, "options")?;
        let window = ms_field(&env, &o, "windowMs", Core::DEFAULT_WINDOW)?;
        let max_age = ms_field(&env, &o, "latencyMaxAgeMs", Core::DEFAULT_LATENCY_MAX_AGE)?;
        let inner = Core::with_window(window, MonotonicClock::now())
            .and_then(|load| load.with_latency_max_age(max_age))
            .or_throw()?;
        Ok(ServerLoad {
            inner: Arc::new(inner),
        })
    }

    /// The rates' window, in milliseconds.
    #[napi(getter, js_name = "windowMs", catch_unwind)]
    pub fn window_ms(&self) -> f64 {
        self.inner.window().as_secs_f64() * 1e3
    }

    /// How long a latency sample counts, in milliseconds.
    #[napi(getter, js_name = "latencyMaxAgeMs", catch_unwind)]
    pub fn latency_max_age_ms(&self) -> f64 {
        self.inner.latency_max_age().as_secs_f64() * 1e3
    }

    /// A request arrives: in flight + 1. The request remembers when, and how many were in
    /// flight already.
    #[napi(catch_unwind)]
    pub fn start(&self) -> ServerRequest {
        let started = self.inner.start(MonotonicClock::now());
        ServerRequest {
            load: self.inner.clone(),
            rif: started.rif(),
            started_ns: started.started_ns(),
            started: Cell::new(Some(started)),
        }
    }

    /// The request ends, successfully or not (`ok`, default true): in flight - 1, counted in
    /// the rates, and a success's latency filed under the in-flight level it found. Returns its
    /// latency in milliseconds. Throws `LB_LEASE_FINISHED` if it already ended.
    #[napi(catch_unwind, ts_args_type = "request: ServerRequest, ok?: boolean")]
    pub fn finish(&self, env: Env, request: Unknown, ok: Option<Unknown>) -> Result<f64> {
        let ok = match present(ok)? {
            None => true,
            Some(v) if v.get_type().or_throw()? == ValueType::Boolean => {
                // SAFETY: the value was just checked to be a boolean.
                unsafe { v.cast::<bool>() }.or_throw()?
            }
            Some(v) => {
                let message = format!("ok must be a boolean, got {}", describe(&v));
                return Err(type_error(&env, message));
            }
        };
        let started = self.open(&env, &request)?;
        let latency = self.inner.finish(started, MonotonicClock::now(), ok);
        Ok(latency.as_secs_f64() * 1e3)
    }

    /// The request was abandoned: in flight - 1, nothing else counted. Throws
    /// `LB_LEASE_FINISHED` if it already ended.
    #[napi(catch_unwind, ts_args_type = "request: ServerRequest")]
    pub fn cancel(&self, env: Env, request: Unknown) -> Result<()> {
        self.inner.cancel(self.open(&env, &request)?);
        Ok(())
    }

    /// The answer to a Prequal probe now: the requests in flight and the latency in
    /// milliseconds expected at that level.
    #[napi(catch_unwind)]
    pub fn probe(&self) -> Probe {
        let probe = self.inner.probe(MonotonicClock::now());
        Probe {
            rif: probe.rif,
            latency_ms: probe.latency.as_secs_f64() * 1e3,
        }
    }

    /// Requests in flight now.
    #[napi(getter, catch_unwind)]
    pub fn in_flight(&self) -> u32 {
        self.inner.in_flight()
    }

    /// The CPU utilisation last set (0 before any).
    #[napi(getter, catch_unwind)]
    pub fn cpu_utilization(&self) -> f64 {
        self.inner.cpu_utilization()
    }

    /// The memory utilisation last set (0 before any).
    #[napi(getter, catch_unwind)]
    pub fn mem_utilization(&self) -> f64 {
        self.inner.mem_utilization()
    }

    /// The application utilisation last set (0 before any).
    #[napi(getter, catch_unwind)]
    pub fn application_utilization(&self) -> f64 {
        self.inner.application_utilization()
    }

    /// Sets the CPU utilisation (finite, at least 0, may exceed 1); an invalid value throws
    /// `LB_INVALID_LOAD_REPORT` and changes nothing.
    #[napi(catch_unwind, ts_args_type = "value: number")]
    pub fn set_cpu_utilization(&self, env: Env, value: Unknown) -> Result<()> {
        (self.inner)
            .set_cpu_utilization(number(&env, &value, "value")?)
            .or_throw()
    }

    /// Sets the memory utilisation (0 to 1); an invalid value throws `LB_INVALID_LOAD_REPORT`
    /// and changes nothing.
    #[napi(catch_unwind, ts_args_type = "value: number")]
    pub fn set_mem_utilization(&self, env: Env, value: Unknown) -> Result<()> {
        (self.inner)
            .set_mem_utilization(number(&env, &value, "value")?)
            .or_throw()
    }

    /// Sets the application utilisation (finite, at least 0, may exceed 1); an invalid value
    /// throws `LB_INVALID_LOAD_REPORT` and changes nothing.
    #[napi(catch_unwind, ts_args_type = "value: number")]
    pub fn set_application_utilization(&self, env: Env, value: Unknown) -> Result<()> {
        (self.inner)
            .set_application_utilization(number(&env, &value, "value")?)
            .or_throw()
    }

    /// The ORCA load report now, the object `parseOrca` returns: the utilisations,
    /// `rpsFractional` and `eps` over the last 10 seconds, and the named metrics `rif` and
    /// `latency_ms` (when a request has succeeded in the last second).
    #[napi(catch_unwind, ts_return_type = "LoadReport")]
    pub fn report(&self) -> Report {
        Report(self.inner.report(MonotonicClock::now()))
    }

    /// `report()` as an `endpoint-load-metrics` header value: `form` 'text' (default, `TEXT
    /// name:value,...`) or 'bin' (`BIN <base64>`); another form throws
    /// `LB_INVALID_OPTION_VALUE`.
    #[napi(catch_unwind, ts_args_type = "form?: 'text' | 'bin' | null")]
    pub fn header(&self, env: Env, form: Option<Unknown>) -> Result<String> {
        let form = match present(form)? {
            Some(form) => string(&env, &form, "form")?
                .parse::<HeaderForm>()
                .or_throw()?,
            None => HeaderForm::Text,
        };
        self.inner.header(MonotonicClock::now(), form).or_throw()
    }
}

#[napi]
impl ServerRequest {
    /// The requests in flight when it started (itself not counted).
    #[napi(getter, catch_unwind)]
    pub fn rif(&self) -> u32 {
        self.rif
    }

    /// When it started, in milliseconds of liblb's clock (`Balancer.nowMs()`).
    #[napi(getter, catch_unwind)]
    pub fn started_ms(&self) -> f64 {
        self.started_ns as f64 / 1e6
    }

    /// Whether it has ended (finished or cancelled).
    #[napi(getter, catch_unwind)]
    pub fn done(&self) -> bool {
        let started = self.started.take();
        let done = started.is_none();
        self.started.set(started);
        done
    }
}
