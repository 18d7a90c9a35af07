//! liblb for Python: the private native module `liblb._liblb`, re-exported by the pure-Python
//! package `liblb` (see `liblb/__init__.py`; stubs in `liblb/_liblb.pyi`).
//!
//! [`PyBalancer`] is a frozen class over an `Arc` of the core's `Balancer`, which is `Send +
//! Sync` and whose readers never lock: one object can be shared by any number of threads,
//! including on free-threaded Python (the module declares `gil_used = false`). This file is
//! argument conversion (`convert`) and error mapping (`error`) only; every decision is the
//! core's.
//!
//! The GIL (or, on free-threaded builds, the thread's attachment) is released around work that
//! can take long: `pick_many` batches above [`DETACH_BATCH`] keys and membership changes (which
//! rebuild the selection table: a ring of many nodes is up to a million SHA-256 hashes). Single
//! picks never release it: a pick costs less than releasing and taking it back.

#![forbid(unsafe_code)]

mod bench;
mod budget;
mod convert;
mod error;
mod node;
mod orca;
mod request;
mod server_load;

use convert::{KeyBatch, OutcomeArgs, with_key};
use error::OrRaise;
use liblb_core::{
    Algorithm, Balancer, DEFAULT_VNODES, FailureKind, HashKind, Lease, MAX_VNODES, Node, Options,
    Picked, Picks,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

/// `pick_many` / `pick_n` batches larger than this run with the GIL released. Releasing is
/// cheap when nobody waits (~0.1 µs), but taking the GIL back while other threads run can take
/// up to the interpreter's switch interval (5 ms): worth it only when the work itself is long
/// enough for other threads to gain (1024 keys ≈ 25 µs of picking), never for single picks.
const DETACH_BATCH: usize = 1024;

/// How many nodes `repr()` lists before summarising the rest.
const REPR_NODES: usize = 8;

/// A thread-safe load balancer: an algorithm, its options and a membership.
///
/// `algorithm` is one of `liblb.ALGORITHMS`; `nodes` are ids (weight 1) or `(id, weight)`
/// pairs, or a mapping id -> weight; options are keyword-only. Share one balancer between
/// threads freely: picks never lock. Errors are `liblb.Error` subclasses. The guide is
/// docs/python.md.
#[pyclass(frozen, module = "liblb", name = "Balancer")]
struct PyBalancer {
    inner: Arc<Balancer>,
    /// The Python object of the balancer's default budget (the core holds its `Arc`).
    budget: Mutex<Option<Py<PyAny>>>,
}

#[pymethods]
impl PyBalancer {
    #[new]
    #[pyo3(signature = (algorithm, nodes, **options))]
    fn new(
        py: Python<'_>,
        algorithm: &Bound<'_, PyAny>,
        nodes: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let algorithm = convert::algorithm(algorithm)?;
        // `budget` is the balancer's default budget for its requests, not a core option.
        let budget = match options {
            Some(options) => options.get_item("budget")?,
            None => None,
        };
        let budget = match budget {
            Some(budget) => {
                options.map(|o| o.del_item("budget")).transpose()?;
                (!budget.is_none()).then_some(budget)
            }
            None => None,
        };
        let core_budget = budget.as_ref().map(request::budget).transpose()?;
        let options = convert::options(options)?;
        let nodes = convert::nodes(nodes)?;
        let inner = py
            .detach(|| Balancer::new(algorithm, nodes, options))
            .or_raise()?;
        inner.set_budget(core_budget);
        Ok(PyBalancer {
            inner: Arc::new(inner),
            budget: Mutex::new(budget.map(Bound::unbind)),
        })
    }

    /// A request through this balancer (see `liblb.Request`): attempts on distinct nodes in
    /// the key's retry order, at most `max_attempts` (1 to 100), retrying the failure kinds in
    /// `retry_on` (default all of `FAILURE_KINDS`), within `deadline` (seconds or a timedelta
    /// from the first attempt), limited by `budget` (default: the balancer's) and hedged by
    /// `hedge` (a `Hedging`). `max_attempts` None means 3. Nothing is picked until the first
    /// attempt.
    #[pyo3(signature = (key=None, *, max_attempts=None, deadline=None, budget=None, hedge=None, retry_on=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keywords")]
    fn request(
        &self,
        py: Python<'_>,
        key: Option<&Bound<'_, PyAny>>,
        max_attempts: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
        budget: Option<&Bound<'_, PyAny>>,
        hedge: Option<&Bound<'_, PyAny>>,
        retry_on: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<request::PyRequest> {
        let three = 3u32.into_pyobject(py)?.into_any();
        let max_attempts = max_attempts.unwrap_or(&three);
        request::new(
            &self.inner,
            key,
            max_attempts,
            deadline,
            budget,
            hedge,
            retry_on,
        )
    }

    /// Runs `func(node_id)` through a request (same keywords as `request`), sleeping between
    /// attempts: its first successful return value, or `RequestFailedError` (see liblb._request).
    #[pyo3(signature = (key, func, **kwargs))]
    fn call<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let helper = slf.py().import("liblb._request")?.getattr("call")?;
        helper.call((slf, key, func), kwargs)
    }

    /// `call` on asyncio: `await b.acall(key, coro_fn, ...)`, hedges racing (liblb._request).
    #[pyo3(signature = (key, func, **kwargs))]
    fn acall<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let helper = slf.py().import("liblb._request")?.getattr("acall")?;
        helper.call((slf, key, func), kwargs)
    }

    /// The default budget of this balancer's requests (a `RetryBudget`, `RetryThrottle`,
    /// `AdaptiveThrottle`), or None.
    #[getter]
    fn get_budget(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let slot = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().map(|b| b.clone_ref(py))
    }

    /// Sets (None: removes) the default budget of this balancer's requests.
    #[setter]
    fn set_budget(&self, budget: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let budget = budget.filter(|b| !b.is_none());
        let core = budget.map(request::budget).transpose()?;
        let mut slot = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.set_budget(core);
        *slot = budget.map(|b| b.clone().unbind());
        Ok(())
    }

    /// The algorithm's name.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm().name()
    }

    /// The seed given at construction, or None (seeded from OS entropy).
    #[getter]
    fn seed(&self) -> Option<u64> {
        self.inner.options().seed
    }

    /// Ring points per unit of weight (default 160).
    #[getter]
    fn vnodes(&self) -> u32 {
        self.inner.options().vnodes
    }

    /// The hash given at construction, or None (the algorithm's default).
    #[getter]
    fn hash(&self) -> Option<&'static str> {
        self.inner.options().hash.map(HashKind::name)
    }

    /// The id of the chosen node. Keyed algorithms need `key`; the others ignore it.
    #[pyo3(signature = (key=None))]
    fn pick<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyString>> {
        let picked = match key {
            None => self.inner.pick(None),
            Some(key) => with_key(key, |k| self.inner.pick(Some(k)))?,
        }
        .or_raise()?;
        Ok(id_str(py, &picked))
    }

    /// One pick per key, all from the same membership (at most `MAX_BATCH` keys).
    fn pick_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let batch = KeyBatch::collect(keys)?;
        let picks = if batch.len() > DETACH_BATCH {
            py.detach(|| self.inner.pick_many(batch.iter()))
        } else {
            self.inner.pick_many(batch.iter())
        };
        id_list(py, &picks.or_raise()?)
    }

    /// `count` unkeyed picks from the same membership (`count` <= `MAX_BATCH`).
    fn pick_n<'py>(
        &self,
        py: Python<'py>,
        count: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let count = convert::count("count", count, false)?;
        let picks = if count > DETACH_BATCH {
            py.detach(|| self.inner.pick_n(count))
        } else {
            self.inner.pick_n(count)
        };
        id_list(py, &picks.or_raise()?)
    }

    /// Up to `limit` distinct node ids in retry order (None: every pickable node).
    #[pyo3(signature = (key=None, limit=None))]
    fn attempts<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
        limit: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let limit = match limit {
            Some(limit) => convert::count("limit", limit, true)?,
            None => usize::MAX,
        };
        let picks = match key {
            None => self.inner.attempts(None, limit),
            Some(key) => with_key(key, |k| self.inner.attempts(Some(k), limit))?,
        };
        id_list(py, &picks.or_raise()?)
    }

    /// The node for a caller's 64-bit key hash (an int 0..2**64-1), as `pick` places a key with
    /// that hash. Only for `HASH_ALGORITHMS`; others raise `HashUnsupportedError`.
    fn pick_hash<'py>(
        &self,
        py: Python<'py>,
        hash: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyString>> {
        let picked = self.inner.pick_hash(convert::hash64(hash)?).or_raise()?;
        Ok(id_str(py, &picked))
    }

    /// `attempts` for a caller's 64-bit key hash (see `pick_hash`).
    #[pyo3(signature = (hash, limit=None))]
    fn attempts_hash<'py>(
        &self,
        py: Python<'py>,
        hash: &Bound<'py, PyAny>,
        limit: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let limit = match limit {
            Some(limit) => convert::count("limit", limit, true)?,
            None => usize::MAX,
        };
        let picks = self.inner.attempts_hash(convert::hash64(hash)?, limit);
        id_list(py, &picks.or_raise()?)
    }

    /// Picks a node and starts a request on it (its in-flight count + 1) until the returned
    /// `Lease` ends: `with b.acquire(key) as node:` or `lease.finish(ok=..., latency=...)`.
    #[pyo3(signature = (key=None))]
    fn acquire(&self, py: Python<'_>, key: Option<&Bound<'_, PyAny>>) -> PyResult<PyLease> {
        let lease = match key {
            None => self.inner.acquire(None),
            Some(key) => with_key(key, |k| self.inner.acquire(Some(k)))?,
        }
        .or_raise()?;
        Ok(PyLease::new(py, lease))
    }

    /// Records the outcome of a request routed after `pick` (in-flight is not touched):
    /// `latency` in seconds (float) or a `datetime.timedelta`, required for a success and
    /// optional for a failure (`ok=False`), which may name its `kind` (one of
    /// `FAILURE_KINDS`, default "error") and, for an overloaded node, a `retry_after` (seconds
    /// or a timedelta) that keeps it from picks until then.
    #[pyo3(signature = (id, *, ok, latency=None, kind=None, retry_after=None))]
    fn report(
        &self,
        id: &Bound<'_, PyAny>,
        ok: bool,
        latency: Option<&Bound<'_, PyAny>>,
        kind: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let outcome = OutcomeArgs::read(ok, kind, latency, retry_after)?.outcome(None)?;
        self.inner.report(convert::node_id(id)?, outcome).or_raise()
    }

    /// Takes a node's ORCA load report as received now: a `LoadReport` (`parse_orca`), or
    /// what `parse_orca` takes (the bytes of an `OrcaLoadReport`, or an
    /// `endpoint-load-metrics` header value). `client_side_wrr` weighs nodes by these (gRFC
    /// A58); the other algorithms keep them, so a configuration can switch. Raises
    /// `UnknownNodeError` or `InvalidLoadReportError`; nothing is recorded then.
    fn report_load(&self, id: &Bound<'_, PyAny>, report: &Bound<'_, PyAny>) -> PyResult<()> {
        let report = orca::report_arg(report)?;
        self.inner
            .report_load(convert::node_id(id)?, &report)
            .or_raise()
    }

    /// Up to `count` distinct node ids to probe now, uniformly at random among the nodes with
    /// weight > 0 (from the balancer's generator: seeded balancers replay). For `prequal`:
    /// send each a probe and give its answer to `offer_probe`; `probes_due()` says how many
    /// the picks asked for.
    fn probe_targets<'py>(
        &self,
        py: Python<'py>,
        count: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let count = convert::count("count", count, false)?;
        id_list(py, &self.inner.probe_targets(count).or_raise()?)
    }

    /// A probe answer from node `id`, stamped now: its requests in flight `rif` (an int,
    /// saturating at 2**32 - 1) and its latency estimate (seconds or a `datetime.timedelta`),
    /// as Prequal servers answer (`ServerLoad.probe()`). `prequal` adds it to its pool; other
    /// algorithms ignore it. Raises `UnknownNodeError`; nothing is recorded then.
    fn offer_probe(
        &self,
        id: &Bound<'_, PyAny>,
        rif: &Bound<'_, PyAny>,
        latency: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let rif = convert::count("rif", rif, true)?.min(u32::MAX as usize) as u32;
        let latency = convert::seconds("latency", latency)?;
        (self.inner)
            .offer_probe(convert::node_id(id)?, rif, latency)
            .or_raise()
    }

    /// How many probes the picks since the last call made due (`prequal`'s `probe_rate` per
    /// pick; 0 for other algorithms): ask `probe_targets` for that many.
    fn probes_due(&self) -> usize {
        self.inner.probes_due()
    }

    /// The balancer's clock in seconds: liblb's monotonic clock, one per process (budgets read
    /// it too); the
    /// clock of `stats()`'s `until`, so `until - now()` is the time left.
    fn now(&self) -> f64 {
        secs(self.inner.clock().now_ns())
    }

    /// Each node's load, in insertion order: dicts with `id`, `weight`, `in_flight`,
    /// `requests`, `failures`, `latency` (the peak-EWMA estimate in seconds, or None),
    /// `status`, `until` (when a warm-up, an ejection or an overload pause ends, on the
    /// `now()` clock, or None) and `remaining` (`until` minus the time of the call, at least
    /// 0.0, or None).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let stats = self.inner.stats();
        // Read after the stats: never before the instant their statuses were judged.
        let now = self.inner.clock().now_ns();
        let rows = stats.into_iter().map(|s| {
            let row = PyDict::new(py);
            row.set_item("id", s.id)?;
            row.set_item("weight", s.weight)?;
            row.set_item("locality", s.locality)?;
            row.set_item("priority", s.priority)?;
            row.set_item("in_flight", s.in_flight)?;
            row.set_item("requests", s.requests)?;
            row.set_item("failures", s.failures)?;
            row.set_item("latency", s.latency.map(|l| l.as_secs_f64()))?;
            row.set_item("status", s.status.name())?;
            let until = s.status.until_ns();
            row.set_item("until", until.map(secs))?;
            row.set_item("remaining", until.map(|u| secs(u.saturating_sub(now))))?;
            Ok(row)
        });
        PyList::new(py, rows.collect::<PyResult<Vec<_>>>()?)
    }

    /// Adds a node at the end: an id with its `weight`, `tag` (an int 0..2**64-1, default 0,
    /// handed back by its leases), `locality` and `priority`, or a `liblb.Node`.
    #[pyo3(signature = (id, weight=1, tag=0, *, locality=None, priority=None))]
    fn add(
        &self,
        py: Python<'_>,
        id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::weight_arg)] weight: u32,
        #[pyo3(from_py_with = convert::tag)] tag: u64,
        locality: Option<&Bound<'_, PyAny>>,
        priority: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let node = match id.cast::<node::PyNode>() {
            Ok(node) => node.get().to_core(),
            Err(_) => liblb_core::Node::with_tag(convert::node_id(id)?, weight, tag).located(
                locality
                    .map(node::locality)
                    .transpose()?
                    .unwrap_or_default(),
                priority.map(node::priority).transpose()?.unwrap_or(0),
            ),
        };
        py.detach(|| self.inner.add(node)).or_raise()
    }

    /// Moves a node to `locality` (`"region/zone/sub_zone"`) at `priority` (0 = most
    /// preferred): a membership change, as `set_weight` is.
    #[pyo3(signature = (id, locality, priority=None))]
    fn set_location(
        &self,
        py: Python<'_>,
        id: &Bound<'_, PyAny>,
        locality: &Bound<'_, PyAny>,
        priority: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let id = convert::node_id(id)?;
        let locality = node::locality(locality)?;
        let priority = priority.map(node::priority).transpose()?.unwrap_or(0);
        py.detach(|| self.inner.set_location(id, &locality, priority))
            .or_raise()
    }

    /// Locality-weighted balancing (unkeyed algorithms): `{locality: weight}` or `(locality,
    /// weight)` pairs; each weight is scaled by its locality's availability and localities are
    /// chosen by Envoy's EDF schedule. A locality left out takes no traffic while a listed one
    /// can. Empty turns it off. See docs/localities.md.
    fn set_locality_weights(&self, py: Python<'_>, weights: &Bound<'_, PyAny>) -> PyResult<()> {
        let weights = node::per_locality("weights", weights, node::locality_weight)?;
        py.detach(|| self.inner.set_locality_weights(weights))
            .or_raise()
    }

    /// The caller's own locality (None: unknown), for zone-aware routing with
    /// `set_local_localities`.
    fn set_local_locality(
        &self,
        py: Python<'_>,
        locality: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let locality = locality.map(node::locality).transpose()?;
        py.detach(|| self.inner.set_local_locality(locality.as_deref()))
            .or_raise()
    }

    /// How the caller's own fleet is spread: `{locality: instances}` or pairs. With
    /// `set_local_locality` it turns on zone-aware routing (unkeyed algorithms): requests stay
    /// in the caller's locality as far as its share of the usable priority-0 nodes covers its
    /// share of the callers. Empty turns it off.
    fn set_local_localities(&self, py: Python<'_>, spread: &Bound<'_, PyAny>) -> PyResult<()> {
        let spread = node::per_locality("spread", spread, node::instances)?;
        py.detach(|| self.inner.set_local_localities(spread))
            .or_raise()
    }

    /// Takes a node out of service until `mark_up` (active health checks): no rebuild, its
    /// weight and counters kept; keyed algorithms move only its keys.
    fn mark_down(&self, id: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.mark_down(convert::node_id(id)?).or_raise()
    }

    /// Puts a node marked down back in service (warming up first with slow start).
    fn mark_up(&self, id: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.mark_up(convert::node_id(id)?).or_raise()
    }

    /// Whether picks ignore health because fewer than `panic_threshold` percent of the nodes
    /// are healthy (traffic spreads over every node).
    #[getter]
    fn panic(&self) -> bool {
        self.inner.panic()
    }

    /// Removes a node.
    fn remove(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = convert::node_id(id)?;
        py.detach(|| self.inner.remove(id)).or_raise()
    }

    /// Changes a node's weight (0 drains it).
    fn set_weight(
        &self,
        py: Python<'_>,
        id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::weight_arg)] weight: u32,
    ) -> PyResult<()> {
        let id = convert::node_id(id)?;
        py.detach(|| self.inner.set_weight(id, weight)).or_raise()
    }

    /// Replaces the whole membership atomically.
    fn update(&self, py: Python<'_>, nodes: &Bound<'_, PyAny>) -> PyResult<()> {
        let nodes = convert::nodes(nodes)?;
        py.detach(|| self.inner.update(nodes)).or_raise()
    }

    /// The nodes as `(id, weight)` pairs, in insertion order; with `located=True` as
    /// `liblb.Node`s, with their locality, priority and tag.
    #[pyo3(signature = (*, located=false))]
    fn nodes<'py>(&self, py: Python<'py>, located: bool) -> PyResult<Bound<'py, PyList>> {
        let nodes = self.inner.nodes();
        if located {
            let nodes = nodes.into_iter().map(node::PyNode::from_info);
            let nodes: Vec<Bound<'py, node::PyNode>> =
                nodes.map(|n| Bound::new(py, n)).collect::<PyResult<_>>()?;
            return PyList::new(py, nodes);
        }
        PyList::new(py, nodes.into_iter().map(|n| (n.id, n.weight)))
    }

    /// The ids picks choose from, in node order: with subsetting (option `subset`) this
    /// client's subset of the nodes with weight > 0, else every node with weight > 0.
    fn subset<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        id_list(py, &self.inner.subset())
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// `id in balancer`: whether a node has this id (False for a non-str).
    fn __contains__(&self, id: &Bound<'_, PyAny>) -> bool {
        id.cast::<PyString>()
            .ok()
            .and_then(|s| s.to_str().ok())
            .is_some_and(|s| self.inner.contains(s))
    }

    /// `Balancer('ring', [('a', 1), ('b', 2)], vnodes=160)`: evaluates back to an equivalent
    /// balancer while it lists at most eight nodes.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let nodes = self.inner.nodes();
        let algorithm = PyString::new(py, self.inner.algorithm().name()).repr()?;
        let mut out = format!("Balancer({algorithm}, [");
        for (i, node) in nodes.iter().take(REPR_NODES).enumerate() {
            let id = PyString::new(py, &node.id).repr()?;
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(out, "{sep}({id}, {})", node.weight);
        }
        if nodes.len() > REPR_NODES {
            let _ = write!(out, ", ... {} more", nodes.len() - REPR_NODES);
        }
        out.push(']');
        let options = self.inner.options();
        if let Some(seed) = options.seed {
            let _ = write!(out, ", seed={seed}");
        }
        if options.vnodes != DEFAULT_VNODES {
            let _ = write!(out, ", vnodes={}", options.vnodes);
        }
        if let Some(hash) = options.hash {
            let _ = write!(out, ", hash={}", PyString::new(py, hash.name()).repr()?);
        }
        if let Some(subset) = options.subset {
            let _ = write!(out, ", subset={}", PyString::new(py, subset.name()).repr()?);
        }
        // Also the seed a `random` subset drew from OS entropy: the repr rebuilds its subset.
        if let Some(seed) = options.subset_seed {
            let _ = write!(out, ", subset_seed={seed}");
        }
        // The other options, by their names in `Options::NAMES`, where they differ from the
        // default (the core writes them as `set` reads them).
        for (name, value) in options.changed_numbers() {
            let _ = write!(out, ", {name}={value}");
        }
        out.push(')');
        Ok(out)
    }
}

/// Nanoseconds of the balancer's clock as float seconds (`now`, `until`).
pub(crate) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A request in progress on one node, from `Balancer.acquire` until it ends.
///
/// `with balancer.acquire(key) as node:` yields the node id and finishes the lease when the
/// block ends: a success, or a failure if an exception escapes it, its latency measured by the
/// balancer's monotonic clock. Or finish it yourself with `finish(ok=..., latency=...)`. A lease
/// that is garbage-collected unfinished is cancelled (in-flight released, nothing counted).
#[pyclass(frozen, module = "liblb", name = "Lease")]
pub(crate) struct PyLease {
    /// `None` once ended; the lock is only contended if two threads end the same lease.
    lease: Mutex<Option<Lease>>,
    id: Py<PyString>,
    weight: u32,
    tag: u64,
    /// The request this lease is an attempt of: its finish and cancel go through it.
    request: Option<Py<request::PyRequest>>,
}

impl PyLease {
    fn new(py: Python<'_>, lease: Lease) -> PyLease {
        PyLease {
            id: PyString::new(py, lease.id()).unbind(),
            weight: lease.weight(),
            tag: lease.tag(),
            lease: Mutex::new(Some(lease)),
            request: None,
        }
    }

    /// A lease that is an attempt of `request`.
    pub(crate) fn for_request(
        py: Python<'_>,
        lease: Lease,
        request: Py<request::PyRequest>,
    ) -> PyLease {
        let mut out = PyLease::new(py, lease);
        out.request = Some(request);
        out
    }

    /// Whether the lease has ended.
    pub(crate) fn is_done(&self) -> bool {
        self.lease
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Ends the lease with `outcome`, through its request if it has one.
    fn end(&self, lease: Lease, outcome: liblb_core::Outcome) {
        match &self.request {
            Some(request) => {
                request.get().finish(lease, outcome);
            }
            None => lease.finish(outcome),
        }
    }

    /// Ends the lease without an outcome, through its request if it has one.
    fn drop_lease(&self, lease: Lease) {
        match &self.request {
            Some(request) => request.get().cancel(lease),
            None => drop(lease),
        }
    }

    /// Takes the lease out if it has not ended yet.
    fn take(&self) -> Option<Lease> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Takes the lease out, or raises `LeaseFinishedError`.
    fn open(&self, py: Python<'_>) -> PyResult<Lease> {
        self.take()
            .ok_or_else(|| error::lease_finished(self.id.bind(py).to_str().unwrap_or("?")))
    }
}

/// A request's lease collected unfinished is cancelled through its request, so the request
/// does not count it as still out (a plain lease cancels itself when the core lease drops).
impl Drop for PyLease {
    fn drop(&mut self) {
        if let (Some(lease), Some(request)) = (self.take(), &self.request) {
            request.get().cancel(lease);
        }
    }
}

#[pymethods]
impl PyLease {
    /// The node's id.
    #[getter]
    fn id(&self, py: Python<'_>) -> Py<PyString> {
        self.id.clone_ref(py)
    }

    /// The node's weight when the lease was acquired.
    #[getter]
    fn weight(&self) -> u32 {
        self.weight
    }

    /// The node's tag: the int given with it (`(id, weight, tag)` or `add(id, weight, tag)`),
    /// 0 if none was.
    #[getter]
    fn tag(&self) -> u64 {
        self.tag
    }

    /// Whether the lease has ended (finished or cancelled).
    #[getter]
    fn done(&self) -> bool {
        self.is_done()
    }

    /// Ends the request: `ok` is its outcome, `latency` its duration in seconds (float) or a
    /// `datetime.timedelta`; None measures it since `acquire` with the balancer's clock. A
    /// failure (`ok=False`) may name its `kind` (one of `FAILURE_KINDS`, default "error") and,
    /// for an overloaded node, a `retry_after` that keeps it from picks until then. Raises
    /// `LeaseFinishedError` if the lease already ended; on any error the lease stays open.
    /// `load` is the ORCA load report the answer carried, if any (as `report_load` takes it).
    #[pyo3(signature = (*, ok=true, latency=None, kind=None, retry_after=None, load=None))]
    fn finish(
        &self,
        py: Python<'_>,
        ok: bool,
        latency: Option<&Bound<'_, PyAny>>,
        kind: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
        load: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let args = OutcomeArgs::read(ok, kind, latency, retry_after)?;
        let load = load.map(orca::report_arg).transpose()?;
        let lease = self.open(py)?;
        if let Some(load) = &load {
            lease.report_load(load);
        }
        // With the lease measuring, `outcome` cannot fail: a lease always has a latency.
        let outcome = args.outcome(Some(lease.elapsed()))?;
        self.end(lease, outcome);
        Ok(())
    }

    /// Ends the request without an outcome (in-flight released, nothing counted). Raises
    /// `LeaseFinishedError` if the lease already ended.
    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        let lease = self.open(py)?;
        self.drop_lease(lease);
        Ok(())
    }

    fn __enter__(&self, py: Python<'_>) -> Py<PyString> {
        self.id.clone_ref(py)
    }

    /// Finishes the lease unless the block already did: a failure if an exception escaped.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        if let Some(lease) = self.take() {
            let elapsed = lease.elapsed();
            let outcome = if exc_type.is_none_or(|t| t.is_none()) {
                liblb_core::Outcome::Success(elapsed)
            } else {
                liblb_core::Outcome::Failure(elapsed)
            };
            self.end(lease, outcome);
        }
        false
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let state = if self.done() { "ended" } else { "open" };
        Ok(format!(
            "<liblb.Lease {} {state}>",
            self.id.bind(py).repr()?
        ))
    }
}

/// The node ids of one membership as Python `str` objects, attached to the core's snapshot of
/// that membership (`Picked::attachment`): a pick hands back the node's `str` with a reference
/// count increment instead of building a new one. Each slot is filled the first time its node is
/// picked (a membership of a million nodes costs no million strings up front); the whole cache
/// goes with the snapshot, so a `str` can only ever name a node of the membership its answer
/// came from. Threads racing to fill one slot (free-threaded builds) may each build a `str`;
/// one is kept, and both are equal.
///
/// The `str` objects are released when the snapshot is: with the thread attached, or else through
/// pyo3's deferred reference pool (a membership change runs detached and drops the old snapshot
/// there; pyo3 releases its strings as soon as the call re-attaches).
struct IdStrs(Box<[OnceLock<Py<PyString>>]>);

impl IdStrs {
    /// Empty slots, one per node.
    fn new(nodes: &[Node]) -> IdStrs {
        IdStrs(nodes.iter().map(|_| OnceLock::new()).collect())
    }

    /// The `str` of node `index`, whose id is `id`.
    #[inline]
    fn get<'py>(&self, py: Python<'py>, index: usize, id: &str) -> Bound<'py, PyString> {
        let slot = &self.0[index];
        if let Some(s) = slot.get() {
            return s.bind(py).clone();
        }
        let s = PyString::new(py, id);
        // Losing a race to another thread leaves its equal `str` in the slot.
        let _ = slot.set(s.clone().unbind());
        s
    }
}

/// The id of a picked node as a `str`, from its membership's [`IdStrs`].
#[inline]
fn id_str<'py>(py: Python<'py>, picked: &Picked) -> Bound<'py, PyString> {
    match picked.attachment(IdStrs::new) {
        Some(ids) => ids.get(py, picked.index(), picked.id()),
        // Only this module attaches to a balancer's snapshots: unreachable, but a new `str`
        // is a right answer too.
        None => PyString::new(py, picked.id()),
    }
}

/// The ids of a batch as a list of str, from the membership's [`IdStrs`].
fn id_list<'py>(py: Python<'py>, picks: &Picks) -> PyResult<Bound<'py, PyList>> {
    let members = picks.members();
    match picks.attachment(IdStrs::new) {
        Some(ids) => {
            let items = picks.indices().iter().map(|i| {
                let i = *i as usize;
                ids.get(py, i, &members[i].id)
            });
            PyList::new(py, items)
        }
        None => PyList::new(py, picks.ids().map(|id| PyString::new(py, id))),
    }
}

/// The native half of `liblb`.
#[pymodule(gil_used = false)]
fn _liblb(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyBalancer>()?;
    m.add_class::<node::PyNode>()?;
    m.add_class::<orca::PyLoadReport>()?;
    m.add_function(wrap_pyfunction!(orca::parse_orca, m)?)?;
    m.add_class::<server_load::PyServerLoad>()?;
    m.add_class::<server_load::PyServerRequest>()?;
    m.add_class::<PyLease>()?;
    m.add_class::<request::PyRequest>()?;
    m.add_class::<request::PyHedging>()?;
    m.add("STOP_REASONS", PyTuple::new(py, liblb_core::Stop::NAMES)?)?;
    m.add_class::<budget::PyRetryBudget>()?;
    m.add_class::<budget::PyRetryThrottle>()?;
    m.add_class::<budget::PyAdaptiveThrottle>()?;
    error::register(m)?;
    m.add("ALGORITHMS", PyTuple::new(py, Algorithm::NAMES)?)?;
    let names = |keep: fn(&Algorithm) -> bool| {
        let all = Algorithm::ALL.into_iter().filter(keep);
        PyTuple::new(py, all.map(Algorithm::name).collect::<Vec<_>>())
    };
    m.add("KEYED_ALGORITHMS", names(|a| a.is_keyed())?)?;
    m.add("HASH_ALGORITHMS", names(|a| a.takes_hash())?)?;
    m.add("OPTIONS", PyTuple::new(py, Options::NAMES)?)?;
    m.add("HASHES", PyTuple::new(py, HashKind::NAMES)?)?;
    m.add("FAILURE_KINDS", PyTuple::new(py, FailureKind::NAMES)?)?;
    m.add("DEFAULT_VNODES", DEFAULT_VNODES)?;
    m.add("MAX_VNODES", MAX_VNODES)?;
    m.add("MAX_BATCH", convert::MAX_BATCH)?;
    m.add("MAX_BATCH_KEY_BYTES", convert::MAX_BATCH_KEY_BYTES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(bench::_noop, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_noop_many, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_core_pick_ns, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_core_pick_many_ns, m)?)?;
    Ok(())
}
