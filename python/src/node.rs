//! `liblb.Node`: a node with a locality and a priority (issue 24), and the locality lists
//! that `Balancer.set_locality_weights` and `set_local_localities` take.

use crate::convert::{node_id, short_repr, type_name, weight};
use crate::error::OrRaise;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// A node: `id`, `weight` (default 1), and where it runs: `locality` (`"region/zone/sub_zone"`,
/// any part may be empty; default `""`) and `priority` (0, the default, is the most preferred;
/// higher levels take traffic as the lower ones lose health). `tag` is an int the C ABI hands
/// back; Python callers rarely need it. Anywhere a node list is taken, a `Node` may stand for
/// an id or an `(id, weight)` pair.
#[pyclass(frozen, eq, hash, module = "liblb", name = "Node")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyNode {
    #[pyo3(get)]
    id: String,
    #[pyo3(get)]
    weight: u32,
    #[pyo3(get)]
    locality: String,
    #[pyo3(get)]
    priority: u32,
    #[pyo3(get)]
    tag: u64,
}

#[pymethods]
impl PyNode {
    #[new]
    #[pyo3(signature = (id, weight=None, *, locality=None, priority=None, tag=None))]
    fn new(
        id: &Bound<'_, PyAny>,
        weight: Option<&Bound<'_, PyAny>>,
        locality: Option<&Bound<'_, PyAny>>,
        priority: Option<&Bound<'_, PyAny>>,
        tag: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyNode> {
        let id = node_id(id)?.to_owned();
        let weight = weight.map_or(Ok(1), |w| self::weight(w, Some(&id)))?;
        let locality = locality.map_or(Ok(String::new()), |l| self::locality(l))?;
        // Refused here, where it was written, rather than when a balancer first sees it.
        liblb_core::validate_locality(&locality).or_raise()?;
        let priority = priority.map_or(Ok(0), self::priority)?;
        let tag = tag.map_or(Ok(0), crate::convert::tag)?;
        Ok(PyNode {
            id,
            weight,
            locality,
            priority,
            tag,
        })
    }

    fn __repr__(&self) -> String {
        let mut out = format!("Node({:?}, weight={}", self.id, self.weight);
        if !self.locality.is_empty() {
            out.push_str(&format!(", locality={:?}", self.locality));
        }
        if self.priority != 0 {
            out.push_str(&format!(", priority={}", self.priority));
        }
        if self.tag != 0 {
            out.push_str(&format!(", tag={}", self.tag));
        }
        out.push(')');
        out
    }
}

impl PyNode {
    /// The core's node.
    pub(crate) fn to_core(&self) -> liblb_core::Node {
        liblb_core::Node::with_tag(&*self.id, self.weight, self.tag)
            .located(&*self.locality, self.priority)
    }

    /// A `Node` for the core's description of one.
    pub(crate) fn from_info(info: liblb_core::NodeInfo) -> PyNode {
        PyNode {
            id: info.id,
            weight: info.weight,
            locality: info.locality,
            priority: info.priority,
            tag: info.tag,
        }
    }
}

/// A locality: a str (checked by the core: at most three parts, no NUL).
pub(crate) fn locality(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let s = value.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("locality must be str, got {}", type_name(value)))
    })?;
    Ok(crate::convert::utf8(s)?.to_owned())
}

/// A priority level: an int from 0 to 2**32-1.
pub(crate) fn priority(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    count_of("priority", value).map(|p| p as u32)
}

/// An int from 0 to `u32::MAX` (`what` names it in messages).
fn count_of(what: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_instance_of::<pyo3::types::PyBool>()
        || !value.is_instance_of::<pyo3::types::PyInt>()
    {
        return Err(PyTypeError::new_err(format!(
            "{what} must be int, got {}",
            type_name(value)
        )));
    }
    value.extract::<u32>().map(u64::from).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be an integer from 0 to {}, got {}",
            u32::MAX,
            short_repr(value)
        ))
    })
}

/// `{locality: number}` or an iterable of `(locality, number)` pairs, numbers read by `number`.
pub(crate) fn per_locality<T>(
    what: &str,
    value: &Bound<'_, PyAny>,
    number: impl Fn(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<(String, T)>> {
    let items: Vec<Bound<'_, PyAny>> = if let Ok(map) = value.cast::<PyDict>() {
        map.items().iter().collect()
    } else if value.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a mapping locality -> int or (locality, int) pairs, got str"
        )));
    } else {
        let iter = value.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be a mapping locality -> int or (locality, int) pairs, got {}",
                type_name(value)
            ))
        })?;
        iter.collect::<PyResult<_>>()?
    };
    items
        .iter()
        .map(|item| {
            let (l, n): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what} items must be (locality, int) pairs, got {}",
                    type_name(item)
                ))
            })?;
            Ok((locality(&l)?, number(&n)?))
        })
        .collect()
}

/// A locality's weight: an int from 0 to 2**32-1.
pub(crate) fn locality_weight(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    count_of("locality weight", value).map(|w| w as u32)
}

/// A count of the caller's instances in a locality: an int from 0 to 2**64-1.
pub(crate) fn instances(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_instance_of::<pyo3::types::PyBool>()
        || !value.is_instance_of::<pyo3::types::PyInt>()
    {
        return Err(PyTypeError::new_err(format!(
            "instance count must be int, got {}",
            type_name(value)
        )));
    }
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "instance count must be an integer from 0 to 2**64-1, got {}",
            short_repr(value)
        ))
    })
}
