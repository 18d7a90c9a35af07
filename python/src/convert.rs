//! Python values -> core values: keys, node ids, weights, node lists and options.
//!
//! Wrong Python types raise `TypeError` naming the type received; values of the right type that
//! the core rejects go through the core (so they raise the same specific `liblb.Error` as in
//! every other language); integers outside what the core's types can hold raise `ValueError`
//! (weights, limits) or `InvalidOptionValueError` (options), naming the value.

use crate::error::{CoreError, OrRaise};
use liblb_core::{Algorithm, Error, Node, OptionValue, Options};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyMemoryView, PyString, PyTuple};

/// What `TypeError` messages say a key may be.
const KEY_TYPES: &str = "str or a bytes-like object (bytes, bytearray, memoryview)";

/// The name of `obj`'s type, for error messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// A str's UTF-8, borrowed from the str object (CPython caches it; for ASCII it is the str's
/// own data); a str that has none (a lone surrogate) is the core's `InvalidUtf8`.
#[inline]
fn utf8<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    s.to_str().map_err(|_| CoreError(Error::InvalidUtf8).into())
}

/// Calls `f` with the bytes of a key: a str (its UTF-8) or a bytes-like object.
///
/// bytearray and memoryview contents are copied first: the caller could resize them from
/// another thread (free-threaded Python) while a borrowed view was in use.
#[inline]
pub(crate) fn with_key<R>(key: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(s) = key.cast::<PyString>() {
        Ok(f(utf8(s)?.as_bytes()))
    } else if let Ok(b) = key.cast::<PyBytes>() {
        Ok(f(b.as_bytes()))
    } else if let Ok(b) = key.cast::<PyByteArray>() {
        Ok(f(&b.to_vec()))
    } else if key.is_instance_of::<PyMemoryView>() {
        let copy = key.call_method0(pyo3::intern!(key.py(), "tobytes"))?;
        Ok(f(copy.cast::<PyBytes>()?.as_bytes()))
    } else {
        Err(PyTypeError::new_err(format!(
            "key must be {KEY_TYPES} or None, got {}",
            type_name(key)
        )))
    }
}

/// Many keys, copied into one buffer so a batch can be picked with the GIL released.
pub(crate) struct KeyBatch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl KeyBatch {
    /// Reads every key of an iterable (a str or bytes object is refused: it is one key, not a
    /// batch, and iterating it would silently pick per character).
    pub(crate) fn collect(keys: &Bound<'_, PyAny>) -> PyResult<KeyBatch> {
        if keys.is_instance_of::<PyString>()
            || keys.is_instance_of::<PyBytes>()
            || keys.is_instance_of::<PyByteArray>()
            || keys.is_instance_of::<PyMemoryView>()
        {
            return Err(PyTypeError::new_err(format!(
                "keys must be an iterable of keys, got a single {} (wrap it in a list)",
                type_name(keys)
            )));
        }
        let iter = keys.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "keys must be an iterable of {KEY_TYPES}, got {}",
                type_name(keys)
            ))
        })?;
        let hint = keys.len().unwrap_or(0);
        let mut batch = KeyBatch {
            bytes: Vec::with_capacity(hint.saturating_mul(16)),
            ends: Vec::with_capacity(hint),
        };
        for key in iter {
            let key = key?;
            with_key(&key, |k| batch.bytes.extend_from_slice(k)).map_err(|e| {
                if e.is_instance_of::<PyTypeError>(key.py()) {
                    PyTypeError::new_err(format!(
                        "keys[{}] must be {KEY_TYPES}, got {}",
                        batch.ends.len(),
                        type_name(&key)
                    ))
                } else {
                    e
                }
            })?;
            batch.ends.push(batch.bytes.len());
        }
        Ok(batch)
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The keys, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(s, e)| &self.bytes[s..*e])
    }
}

/// An algorithm name: a str naming one of `Algorithm::NAMES`.
pub(crate) fn algorithm(name: &Bound<'_, PyAny>) -> PyResult<Algorithm> {
    let s = name.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("algorithm must be str, got {}", type_name(name)))
    })?;
    utf8(s)?.parse().or_raise()
}

/// A node id: a str. Returns the core's `InvalidUtf8` error for a str with a lone surrogate.
pub(crate) fn node_id<'a>(id: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let s = id
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("node id must be str, got {}", type_name(id))))?;
    utf8(s)
}

/// A weight: an int from 0 to 2**32-1. `id` names the node in messages when it is known.
pub(crate) fn weight(value: &Bound<'_, PyAny>, id: Option<&str>) -> PyResult<u32> {
    value.extract::<u32>().map_err(|e| {
        let what = id.map_or_else(
            || "weight".to_owned(),
            |id| format!("weight of node {id:?}"),
        );
        if e.is_instance_of::<PyOverflowError>(value.py()) {
            PyValueError::new_err(format!(
                "{what} must be an integer from 0 to {}, got {}",
                u32::MAX,
                value.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        } else {
            PyTypeError::new_err(format!("{what} must be int, got {}", type_name(value)))
        }
    })
}

/// The `weight` argument of `add` and `set_weight` (pyo3's `from_py_with`).
pub(crate) fn weight_arg(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    weight(value, None)
}

/// A count or retry limit: a non-negative int. An int beyond `usize` means "as many as there
/// are" for a limit; for a count it would never fit in memory, and the core says so by failing
/// to allocate, so it is refused here instead.
pub(crate) fn count(name: &str, value: &Bound<'_, PyAny>, saturate: bool) -> PyResult<usize> {
    match value.extract::<usize>() {
        Ok(n) => Ok(n),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
            if value.lt(0)? {
                Err(PyValueError::new_err(format!(
                    "{name} must be >= 0, got {}",
                    value.repr()?
                )))
            } else if saturate {
                Ok(usize::MAX)
            } else {
                Err(PyOverflowError::new_err(format!(
                    "{name} is too large: {}",
                    value.repr()?
                )))
            }
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "{name} must be int, got {}",
            type_name(value)
        ))),
    }
}

/// One node: an id (weight 1) or an `(id, weight)` pair (a 2-item tuple or list).
fn node(item: &Bound<'_, PyAny>) -> PyResult<Node> {
    if item.is_instance_of::<PyString>() {
        return Ok(Node::new(node_id(item)?, 1));
    }
    let pair = if let Ok(t) = item.cast::<PyTuple>() {
        (t.len() == 2).then(|| (t.get_item(0), t.get_item(1)))
    } else if let Ok(l) = item.cast::<PyList>() {
        (l.len() == 2).then(|| (l.get_item(0), l.get_item(1)))
    } else {
        None
    };
    match pair {
        Some((id, w)) => {
            let (id, w) = (id?, w?);
            let id = node_id(&id)?;
            let w = weight(&w, Some(id))?;
            Ok(Node::new(id, w))
        }
        None => Err(PyTypeError::new_err(format!(
            "a node must be an id (str) or an (id, weight) pair, got {}",
            node_repr(item)
        ))),
    }
}

fn node_repr(item: &Bound<'_, PyAny>) -> String {
    let repr = item.repr().map(|r| r.to_string()).unwrap_or_default();
    if repr.chars().count() > 60 {
        type_name(item)
    } else {
        format!("{} {repr}", type_name(item))
    }
}

/// A node list: an iterable of ids or `(id, weight)` pairs, or a mapping id -> weight.
pub(crate) fn nodes(nodes: &Bound<'_, PyAny>) -> PyResult<Vec<Node>> {
    if let Ok(map) = nodes.cast::<PyDict>() {
        // A snapshot of the items: reading a weight can run Python code (`__index__`), which
        // could change the dict under a live iterator.
        return map.items().iter().map(|item| node(&item)).collect();
    }
    if nodes.is_instance_of::<PyString>() || nodes.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "nodes must be an iterable of ids or (id, weight) pairs, got a single {}",
            type_name(nodes)
        )));
    }
    let iter = nodes.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "nodes must be an iterable of ids or (id, weight) pairs, got {}",
            type_name(nodes)
        ))
    })?;
    iter.map(|item| node(&item?)).collect()
}

/// What `vnodes` accepts, for values beyond `u64` (smaller ones get the core's own message).
const VNODES_RANGE: &str = "an integer from 1 to 65536";
const _: () = assert!(liblb_core::MAX_VNODES == 65536, "update VNODES_RANGE");

/// Options from keyword arguments; `None` keeps the core's default. Values go through
/// `Options::set`, so range checks and messages are the core's.
pub(crate) fn options(
    seed: Option<&Bound<'_, PyAny>>,
    vnodes: Option<&Bound<'_, PyAny>>,
    hash: Option<&Bound<'_, PyAny>>,
) -> PyResult<Options> {
    let mut options = Options::default();
    for (name, value) in [("seed", seed), ("vnodes", vnodes)] {
        if let Some(value) = value.filter(|v| !v.is_none()) {
            let int = value.extract::<u64>().map_err(|e| {
                if e.is_instance_of::<PyOverflowError>(value.py()) {
                    let expected = if name == "seed" {
                        "an unsigned 64-bit integer"
                    } else {
                        VNODES_RANGE
                    };
                    CoreError(Error::InvalidOptionValue {
                        option: name,
                        value: value.repr().map(|r| r.to_string()).unwrap_or_default(),
                        expected,
                    })
                    .into()
                } else {
                    PyTypeError::new_err(format!("{name} must be int, got {}", type_name(value)))
                }
            })?;
            options.set(name, OptionValue::Int(int)).or_raise()?;
        }
    }
    if let Some(value) = hash.filter(|v| !v.is_none()) {
        let name = value.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!("hash must be str, got {}", type_name(value)))
        })?;
        options
            .set("hash", OptionValue::Str(utf8(name)?))
            .or_raise()?;
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::KeyBatch;

    #[test]
    fn key_batch_splits_at_every_end_including_empty_keys() {
        let keys: [&[u8]; 5] = [b"", b"ab", b"", b"c", b""];
        let mut batch = KeyBatch {
            bytes: Vec::new(),
            ends: Vec::new(),
        };
        for key in keys {
            batch.bytes.extend_from_slice(key);
            batch.ends.push(batch.bytes.len());
        }
        assert_eq!(batch.len(), 5);
        assert_eq!(batch.iter().collect::<Vec<_>>(), keys);
        let empty = KeyBatch {
            bytes: Vec::new(),
            ends: Vec::new(),
        };
        assert_eq!(empty.iter().count(), 0);
    }
}
