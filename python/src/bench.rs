//! Measurement hooks for `python/bench.py` (private, underscore-named, in the stubs): the
//! floor of a call into this extension, and the core's own cost for the same work, timed in
//! Rust so the benchmark can report what the binding adds.

use crate::PyBalancer;
use crate::convert::KeyBatch;
use crate::error::OrRaise;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use std::hint::black_box;
use std::time::Instant;

/// Does nothing: the floor a call into this extension costs (one optional argument, like
/// `pick(key)`).
#[pyfunction]
#[pyo3(signature = (_arg=None))]
pub(crate) fn _noop(_arg: Option<&Bound<'_, PyAny>>) {}

/// The floor of `pick_many(keys)`: reads every key exactly as `pick_many` does and returns a
/// list of as many str, but picks nothing (the list repeats one str object).
#[pyfunction]
pub(crate) fn _noop_many<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let batch = KeyBatch::collect(keys)?;
    let item = PyString::new(py, "");
    PyList::new(py, std::iter::repeat_n(item, batch.len()))
}

/// Nanoseconds per key of the core's single `pick`, over `rounds` passes over `keys` (the GIL
/// released while timing). Unkeyed algorithms get the keys too and ignore them, as in Python.
#[pyfunction]
pub(crate) fn _core_pick_ns(
    py: Python<'_>,
    balancer: &Bound<'_, PyBalancer>,
    keys: &Bound<'_, PyAny>,
    rounds: u32,
) -> PyResult<f64> {
    let inner = &balancer.get().inner;
    let batch = KeyBatch::collect(keys)?;
    let keys: Vec<&[u8]> = batch.iter().collect();
    let elapsed = py.detach(|| {
        let start = Instant::now();
        for _ in 0..rounds {
            for key in &keys {
                let picked = inner.pick(Some(black_box(key)))?;
                black_box(picked.id());
            }
        }
        Ok(start.elapsed())
    });
    Ok(per_item(elapsed.or_raise()?, rounds, keys.len()))
}

/// Nanoseconds per key of the core's `pick_many` over `keys` (ids left in the core's answer:
/// no Python objects), over `rounds` calls with the GIL released.
#[pyfunction]
pub(crate) fn _core_pick_many_ns(
    py: Python<'_>,
    balancer: &Bound<'_, PyBalancer>,
    keys: &Bound<'_, PyAny>,
    rounds: u32,
) -> PyResult<f64> {
    let inner = &balancer.get().inner;
    let batch = KeyBatch::collect(keys)?;
    let elapsed = py.detach(|| {
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(inner.pick_many(black_box(&batch).iter())?);
        }
        Ok(start.elapsed())
    });
    Ok(per_item(elapsed.or_raise()?, rounds, batch.len()))
}

fn per_item(elapsed: std::time::Duration, rounds: u32, items: usize) -> f64 {
    elapsed.as_nanos() as f64 / (f64::from(rounds.max(1)) * items.max(1) as f64)
}
