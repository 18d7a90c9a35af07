//! Python values -> core values: keys, node ids, weights, node lists and options.
//!
//! Wrong Python types raise `TypeError` naming the type received; values of the right type that
//! the core rejects go through the core (so they raise the same specific `liblb.Error` as in
//! every other language); integers outside what the core's types can hold raise `ValueError`
//! (weights, limits) or `InvalidOptionValueError` (options), naming the value.
//!
//! Sizes the caller states are never trusted: a `__len__` is not even called, every buffer grows
//! with what is actually read, and the batch limits ([`MAX_BATCH`], [`MAX_BATCH_KEY_BYTES`])
//! turn a batch that could not fit in memory into `MemoryError` instead of an allocation abort.
//!
//! Strings: a key (or an algorithm or hash name) is encoded as UTF-8 the way JavaScript's
//! `TextEncoder` does, each lone surrogate becoming U+FFFD, so a key hashes the same in Python
//! and Node; a node id must be valid Unicode (an id has to round-trip exactly).

use crate::error::{CoreError, OrRaise};
use liblb_core::{
    Algorithm, Error, Failure, FailureKind, MAX_NODES, Node, OptionValue, Options, Outcome,
};
use pyo3::exceptions::{PyMemoryError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyBytes, PyDelta, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};
use std::borrow::Cow;
use std::time::Duration;

/// Most answers one batch call (`pick_many`, `pick_n`) gives: 2^24, the most nodes a balancer
/// holds. A Python list of that many answers takes 128 MiB of pointers; larger batches raise
/// `MemoryError` before anything is picked (split them). The same limit holds in every binding.
pub(crate) const MAX_BATCH: usize = liblb_core::MAX_BATCH;

/// Most key bytes one `pick_many` copies (256 MiB, 16 bytes per key of a full batch): the keys
/// are copied so the batch can be picked with the GIL released, and a list repeating one huge
/// string must not turn into an unbounded copy. Beyond it: `MemoryError`.
pub(crate) const MAX_BATCH_KEY_BYTES: usize = 1 << 28;

/// Keys reserved for before any is read (only for a real list or tuple, whose length is known).
const PRESIZE_KEYS: usize = 4096;

/// What `TypeError` messages say a key may be.
const KEY_TYPES: &str = "str or a bytes-like object (bytes, bytearray, memoryview)";

/// The name of `obj`'s type, for error messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// A str's UTF-8, borrowed from the str object (CPython caches it; for ASCII it is the str's
/// own data); a str that has none (a lone surrogate) is the core's `InvalidUtf8`. For node ids.
#[inline]
pub(crate) fn utf8<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    s.to_str().map_err(|_| CoreError(Error::InvalidUtf8).into())
}

/// A str's UTF-8 as JavaScript's `TextEncoder` (WHATWG "UTF-8 encode") produces it: borrowed
/// when the str is valid Unicode (the fast path), else each lone surrogate becomes U+FFFD
/// (EF BF BD), one per surrogate code unit, and a high surrogate followed by a low one is the
/// character they pair into — the str read as UTF-16 and decoded with replacement, exactly what
/// a JavaScript string holding the same code units encodes to. For keys and names.
#[inline]
pub(crate) fn utf8_lossy<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, str>> {
    match s.to_str() {
        Ok(text) => Ok(Cow::Borrowed(text)),
        Err(_) => replace_surrogates(s).map(Cow::Owned),
    }
}

/// The slow path of [`utf8_lossy`]: the str's UTF-16 code units (`surrogatepass` keeps lone
/// surrogates as themselves), decoded with replacement.
#[cold]
fn replace_surrogates(s: &Bound<'_, PyString>) -> PyResult<String> {
    let units = s.call_method1(
        pyo3::intern!(s.py(), "encode"),
        ("utf-16-le", "surrogatepass"),
    )?;
    let units = units.cast::<PyBytes>()?.as_bytes();
    let units = units
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]));
    Ok(char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect())
}

/// The `MemoryError` for a batch beyond [`MAX_BATCH`] answers.
fn too_many(what: String) -> PyErr {
    PyMemoryError::new_err(format!(
        "{what}, but one call answers at most {MAX_BATCH} (liblb.MAX_BATCH): split the batch"
    ))
}

/// Calls `f` with the bytes of a key: a str (its UTF-8) or a bytes-like object.
///
/// bytearray and memoryview contents are copied first: the caller could resize them from
/// another thread (free-threaded Python) while a borrowed view was in use.
#[inline]
pub(crate) fn with_key<R>(key: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(s) = key.cast::<PyString>() {
        Ok(f(utf8_lossy(s)?.as_bytes()))
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
        // Only an exact list or tuple states its length truthfully (a subclass's `__len__` is
        // the caller's code, and could claim anything): anything else starts small and grows.
        let known =
            if keys.is_exact_instance_of::<PyList>() || keys.is_exact_instance_of::<PyTuple>() {
                keys.len()?
            } else {
                0
            };
        let reserve = known.min(PRESIZE_KEYS);
        let mut batch = KeyBatch {
            bytes: Vec::with_capacity(reserve * 16),
            ends: Vec::with_capacity(reserve),
        };
        for key in iter {
            let key = key?;
            if batch.ends.len() == MAX_BATCH {
                return Err(too_many(format!("keys holds more than {MAX_BATCH} keys")));
            }
            with_key(&key, |k| batch.push(k)).map_err(|e| {
                if e.is_instance_of::<PyTypeError>(key.py()) {
                    PyTypeError::new_err(format!(
                        "keys[{}] must be {KEY_TYPES}, got {}",
                        batch.ends.len(),
                        type_name(&key)
                    ))
                } else {
                    e
                }
            })??;
        }
        Ok(batch)
    }

    /// Appends one key, within [`MAX_BATCH_KEY_BYTES`]; an allocation that fails is a
    /// `MemoryError`, not an abort.
    fn push(&mut self, key: &[u8]) -> PyResult<()> {
        if key.len() > MAX_BATCH_KEY_BYTES - self.bytes.len() {
            return Err(PyMemoryError::new_err(format!(
                "keys: more than {MAX_BATCH_KEY_BYTES} bytes in one batch \
                 (liblb.MAX_BATCH_KEY_BYTES); split the batch or pick such keys one by one"
            )));
        }
        let no_memory = |_| PyMemoryError::new_err("keys: out of memory copying the batch");
        self.bytes.try_reserve(key.len()).map_err(no_memory)?;
        self.ends.try_reserve(1).map_err(no_memory)?;
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
        Ok(())
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
    utf8_lossy(s)?.parse().or_raise()
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
                short_repr(value)
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

/// A retry limit (`saturate`: an int beyond `usize` means "as many as there are") or a batch
/// count (anything above [`MAX_BATCH`], up to any int, is `MemoryError`: it cannot fit in
/// memory, and must never reach an allocation): a non-negative int.
pub(crate) fn count(name: &str, value: &Bound<'_, PyAny>, saturate: bool) -> PyResult<usize> {
    match value.extract::<usize>() {
        Ok(n) if !saturate && n > MAX_BATCH => Err(too_many(format!("{name} is {n}"))),
        Ok(n) => Ok(n),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
            if value.lt(0)? {
                Err(PyValueError::new_err(format!(
                    "{name} must be >= 0, got {}",
                    short_repr(value)
                )))
            } else if saturate {
                Ok(usize::MAX)
            } else {
                Err(too_many(format!("{name} is {}", short_repr(value))))
            }
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "{name} must be int, got {}",
            type_name(value)
        ))),
    }
}

/// One node: an id (weight 1), an `(id, weight)` pair (a 2-item tuple or list), an
/// `(id, weight, tag)` triple, or a `liblb.Node` (with its locality and priority).
fn node(item: &Bound<'_, PyAny>) -> PyResult<Node> {
    if item.is_instance_of::<PyString>() {
        return Ok(Node::new(node_id(item)?, 1));
    }
    if let Ok(node) = item.cast::<crate::node::PyNode>() {
        return Ok(node.get().to_core());
    }
    // A snapshot of the items: reading a weight or tag can run Python code (`__index__`), which
    // could change a list under us.
    let items = if let Ok(t) = item.cast::<PyTuple>() {
        matches!(t.len(), 2 | 3).then(|| t.iter().collect::<Vec<_>>())
    } else if let Ok(l) = item.cast::<PyList>() {
        matches!(l.len(), 2 | 3).then(|| l.iter().collect::<Vec<_>>())
    } else {
        None
    };
    match items.as_deref() {
        Some([id, w, rest @ ..]) => {
            let id = node_id(id)?;
            let w = weight(w, Some(id))?;
            match rest {
                [t] => Ok(Node::with_tag(id, w, tag(t)?)),
                _ => Ok(Node::new(id, w)),
            }
        }
        _ => Err(PyTypeError::new_err(format!(
            "a node must be an id (str), an (id, weight) pair, an (id, weight, tag) triple or a liblb.Node, got {}",
            node_repr(item)
        ))),
    }
}

/// A node's tag: an int from 0 to 2**64-1, a value of the caller's that leases hand back.
pub(crate) fn tag(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "tag must be int, got {}",
            type_name(value)
        )));
    }
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "tag must be an integer from 0 to 2**64-1, got {}",
            short_repr(value)
        ))
    })
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
        return bounded_nodes(map.items().iter().map(|item| node(&item)));
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
    bounded_nodes(iter.map(|item| node(&item?)))
}

/// Collects nodes, but stops reading after one more than a balancer can hold (the core's
/// `TooManyNodes`): an endless iterable must not grow the list until memory runs out.
fn bounded_nodes(items: impl Iterator<Item = PyResult<Node>>) -> PyResult<Vec<Node>> {
    let mut nodes = Vec::new();
    for item in items {
        if nodes.len() == MAX_NODES {
            return Err(CoreError(Error::TooManyNodes(MAX_NODES + 1)).into());
        }
        nodes.push(item?);
    }
    Ok(nodes)
}

/// Options from keyword arguments, every name the core knows (`Options::NAMES`): an int is
/// passed as an integer, a str as text, None keeps the core's default. Names and values go
/// through `Options::set`, so unknown names, range checks and messages are the core's, and a new
/// core option needs no change here.
pub(crate) fn options(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
    let mut options = Options::default();
    let Some(kwargs) = kwargs else {
        return Ok(options);
    };
    // A snapshot of the items: reading an int can run Python code (`__index__`).
    for item in kwargs.items().iter() {
        let (name, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let name = name.cast::<PyString>()?;
        let name = utf8_lossy(name)?;
        if value.is_none() {
            // Still an unknown name even without a value.
            if !Options::NAMES.contains(&&*name) {
                return Err(CoreError(Error::UnknownOption(name.into_owned())).into());
            }
            continue;
        }
        if let Ok(text) = value.cast::<PyString>() {
            options
                .set(&name, OptionValue::Str(&utf8_lossy(text)?))
                .or_raise()?;
        } else if value.is_instance_of::<PyInt>() && Options::NUMBER_NAMES.contains(&&*name) {
            // Options that take any number (`slow_start_aggression`): any int, negative or huge,
            // goes to the core as text, which says what the option takes ("a number above 0"),
            // not "an unsigned 64-bit integer".
            let text = value.str()?;
            options
                .set(&name, OptionValue::Str(&utf8_lossy(&text)?))
                .or_raise()?;
        } else if value.is_instance_of::<PyInt>() {
            let int = value.extract::<u64>().map_err(|_| -> PyErr {
                match Options::NAMES.iter().find(|n| **n == &*name) {
                    Some(option) => CoreError(Error::InvalidOptionValue {
                        option,
                        value: short_repr(&value),
                        expected: "an unsigned 64-bit integer",
                    }),
                    None => CoreError(Error::UnknownOption(name.to_string())),
                }
                .into()
            })?;
            options.set(&name, OptionValue::Int(int)).or_raise()?;
        } else if value.is_instance_of::<PyFloat>() && Options::NUMBER_NAMES.contains(&&*name) {
            // Options that take any number (`slow_start_aggression`): the float's shortest
            // round-trip text, parsed by the core.
            let float: f64 = value.extract()?;
            options
                .set(&name, OptionValue::Str(&format!("{float:?}")))
                .or_raise()?;
        } else if !Options::NAMES.contains(&&*name) {
            return Err(CoreError(Error::UnknownOption(name.into_owned())).into());
        } else {
            return Err(PyTypeError::new_err(format!(
                "{name} must be int or str, got {}",
                type_name(&value)
            )));
        }
    }
    Ok(options)
}

/// A time argument (`latency`, `retry_after`): seconds as a non-negative finite float (or
/// int), or a `datetime.timedelta`. A value of the wrong type is a `TypeError`; a negative,
/// NaN or infinite one the core's `InvalidOutcome` (`liblb.InvalidOutcomeError`, a
/// `ValueError`), naming the argument.
pub(crate) fn seconds(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let seconds = if value.is_instance_of::<PyDelta>() {
        value
            .call_method0(pyo3::intern!(value.py(), "total_seconds"))?
            .extract::<f64>()?
    } else if value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyInt>() {
        value.extract::<f64>()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{name} must be float seconds or a datetime.timedelta, got {}",
            type_name(value)
        )));
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        CoreError(Error::InvalidOutcome(format!(
            "{name} must be a finite number of seconds >= 0, got {}",
            short_repr(value)
        )))
        .into()
    })
}

/// A request's outcome as `finish` and `report` take it: `ok`, and for a failure its `kind`
/// (a name of `liblb.FAILURE_KINDS`, default "error") and an overloaded node's
/// `retry_after`; `latency` when given. Checked whole before anything is recorded.
pub(crate) struct OutcomeArgs {
    kind: Option<FailureKind>,
    latency: Option<Duration>,
    retry_after: Option<Duration>,
}

impl OutcomeArgs {
    /// Reads and checks the arguments: a success takes neither a kind nor a retry-after
    /// (`InvalidOutcomeError`), an unknown kind is the core's `InvalidOutcomeError`.
    pub(crate) fn read(
        ok: bool,
        kind: Option<&Bound<'_, PyAny>>,
        latency: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<OutcomeArgs> {
        let kind = match kind {
            None => None,
            Some(kind) => {
                let name = kind.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!("kind must be str, got {}", type_name(kind)))
                })?;
                Some(FailureKind::from_name(&utf8_lossy(name)?).or_raise()?)
            }
        };
        let latency = latency.map(|l| seconds("latency", l)).transpose()?;
        let retry_after = retry_after.map(|r| seconds("retry_after", r)).transpose()?;
        let invalid = |detail: String| Err(CoreError(Error::InvalidOutcome(detail)).into());
        match (ok, kind) {
            (true, Some(kind)) => invalid(format!(
                "kind={:?} is a failure kind: pass ok=False with it",
                kind.name()
            )),
            (true, None) if retry_after.is_some() => {
                invalid("retry_after is for failures: pass ok=False with it".into())
            }
            (true, None) => Ok(OutcomeArgs {
                kind: None,
                latency,
                retry_after: None,
            }),
            (false, kind) => Ok(OutcomeArgs {
                kind: Some(kind.unwrap_or(FailureKind::Error)),
                latency,
                retry_after,
            }),
        }
    }

    /// The outcome, `measured` standing in for a latency not given (a lease's time since
    /// acquire); a success without either is a `TypeError` naming the missing `latency`.
    pub(crate) fn outcome(self, measured: Option<Duration>) -> PyResult<Outcome> {
        let latency = self.latency.or(measured);
        match (self.kind, latency) {
            (None, Some(latency)) => Ok(Outcome::Success(latency)),
            (None, None) => Err(PyTypeError::new_err(
                "a success needs its latency: report(id, ok=True, latency=...)",
            )),
            (Some(kind), latency) => Ok(Outcome::Failed(Failure {
                kind,
                latency,
                retry_after: self.retry_after,
            })),
        }
    }
}

/// `repr(value)` for an error message, shortened when long: `10**300` is not worth 301 digits.
pub(crate) fn short_repr(value: &Bound<'_, PyAny>) -> String {
    const MOST: usize = 80;
    let repr = value.repr().map(|r| r.to_string()).unwrap_or_default();
    let chars = repr.chars().count();
    if chars <= MOST {
        return repr;
    }
    let head: String = repr.chars().take(MOST / 2).collect();
    format!("{head}... ({chars} characters)")
}

/// A caller's 64-bit key hash: an int from 0 to 2**64-1.
pub(crate) fn hash64(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "hash must be int, got {}",
            type_name(value)
        )));
    }
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "hash must be an integer from 0 to 2**64-1, got {}",
            short_repr(value)
        ))
    })
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
