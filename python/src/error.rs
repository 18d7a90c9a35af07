//! Python exceptions for liblb's core errors, and the one conversion that raises them.
//!
//! Every core [`liblb_core::Error`] becomes an instance of a specific `liblb.Error` subclass
//! (itself a `ValueError`), with the core's message (which names the offending value) and a
//! `code` attribute holding the core's stable [`liblb_core::Error::code`] string. Classes that
//! stand for exactly one code also carry it as a class attribute, e.g. `NoNodesError.code`.
//!
//! The only way a core error reaches Python is `CoreError`'s `From` impl below (the orphan rule
//! forbids `From<liblb_core::Error> for PyErr` directly; tokenizers' `ToPyResult` is the same
//! idea), reached through [`OrRaise::or_raise`].

use liblb_core::Error as E;
use pyo3::create_exception;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;

create_exception!(
    liblb,
    Error,
    PyValueError,
    "Base class of every liblb error; `code` is the core's stable error code (e.g. 'LB_NO_NODES')."
);
create_exception!(
    liblb,
    NoNodesError,
    Error,
    "The balancer has no node with weight > 0 to pick from (LB_NO_NODES)."
);
create_exception!(
    liblb,
    NoUsableNodesError,
    NoNodesError,
    "Every node with weight > 0 is ejected or marked down and panic_threshold is 0, so no node may be chosen (LB_NO_USABLE_NODES)."
);
create_exception!(
    liblb,
    InvalidNodeIdError,
    Error,
    "A node id is empty (LB_EMPTY_ID) or contains a NUL character (LB_ID_CONTAINS_NUL)."
);
create_exception!(
    liblb,
    InvalidUtf8Error,
    Error,
    "A node id str cannot be encoded as UTF-8: it holds a lone surrogate (LB_INVALID_UTF8). Keys never raise it: their lone surrogates hash as U+FFFD."
);
create_exception!(
    liblb,
    DuplicateNodeError,
    Error,
    "A node id appears twice (LB_DUPLICATE_NODE)."
);
create_exception!(
    liblb,
    UnknownNodeError,
    Error,
    "No node has this id (LB_UNKNOWN_NODE)."
);
create_exception!(
    liblb,
    KeyRequiredError,
    Error,
    "A keyed algorithm (liblb.KEYED_ALGORITHMS) was asked to pick without a key (LB_KEY_REQUIRED)."
);
create_exception!(
    liblb,
    TooManyNodesError,
    Error,
    "More nodes than one balancer can hold (LB_TOO_MANY_NODES)."
);
create_exception!(
    liblb,
    HashUnsupportedError,
    Error,
    "pick_hash / attempts_hash on an algorithm that does not place 64-bit hashes; those that do are liblb.HASH_ALGORITHMS (LB_HASH_UNSUPPORTED)."
);
create_exception!(
    liblb,
    LeaseFinishedError,
    Error,
    "A lease or a ServerRequest was ended twice (LB_LEASE_FINISHED): each ends exactly once."
);
create_exception!(
    liblb,
    InvalidOutcomeError,
    Error,
    "An outcome given to finish or report cannot be understood: an unknown failure kind (liblb.FAILURE_KINDS), a kind or retry_after with ok=True, or a negative, NaN or infinite latency or retry_after (LB_INVALID_OUTCOME)."
);
create_exception!(
    liblb,
    InvalidLocalityError,
    Error,
    "A locality has more than three parts (region/zone/sub_zone) or a NUL character (LB_INVALID_LOCALITY)."
);
create_exception!(
    liblb,
    InvalidLoadReportError,
    Error,
    "An ORCA load report could not be parsed: not a valid serialized OrcaLoadReport, nor an endpoint-load-metrics header value starting 'BIN ', 'JSON ' or 'TEXT '; or a ServerLoad utilisation is out of range (LB_INVALID_LOAD_REPORT); the message says what is wrong and where."
);
create_exception!(
    liblb,
    UnknownAlgorithmError,
    Error,
    "The algorithm name is not one of liblb.ALGORITHMS (LB_UNKNOWN_ALGORITHM)."
);
create_exception!(
    liblb,
    InvalidOptionError,
    Error,
    "Base class of the errors about balancer options (liblb.OPTIONS)."
);
create_exception!(
    liblb,
    UnknownOptionError,
    InvalidOptionError,
    "The option name is not known to the core (LB_UNKNOWN_OPTION)."
);
create_exception!(
    liblb,
    UnknownHashError,
    InvalidOptionError,
    "The hash name is not one of liblb.HASHES (LB_UNKNOWN_HASH)."
);
create_exception!(
    liblb,
    InvalidVnodesError,
    InvalidOptionError,
    "vnodes is 0 or above liblb.MAX_VNODES (LB_INVALID_VNODES)."
);
create_exception!(
    liblb,
    InvalidOptionValueError,
    InvalidOptionError,
    "An option value is out of range for its kind, e.g. a negative seed (LB_INVALID_OPTION_VALUE)."
);

create_exception!(
    liblb,
    AttemptOpenError,
    Error,
    "A request's iterator was asked for the next attempt while the previous attempt's lease is still open: finish or cancel it first (LB_ATTEMPT_OPEN)."
);

/// The code of [`AttemptOpenError`] (the binding's own: the core starts a parallel attempt).
pub(crate) const ATTEMPT_OPEN: &str = "LB_ATTEMPT_OPEN";

/// The error for `next(request)` with the last attempt's lease still open.
pub(crate) fn attempt_open() -> PyErr {
    Python::attach(|py| {
        let message = "the previous attempt's lease is still open: finish or cancel it before the next attempt";
        match py.get_type::<AttemptOpenError>().call1((message,)) {
            Ok(instance) => {
                let _ = instance.setattr(pyo3::intern!(py, "code"), ATTEMPT_OPEN);
                PyErr::from_value(instance)
            }
            Err(e) => e,
        }
    })
}

/// The exception class for a core error.
fn class_of<'py>(py: Python<'py>, error: &E) -> Bound<'py, PyType> {
    match error {
        E::NoNodes => py.get_type::<NoNodesError>(),
        E::NoUsableNodes => py.get_type::<NoUsableNodesError>(),
        E::EmptyId | E::IdContainsNul(_) => py.get_type::<InvalidNodeIdError>(),
        E::InvalidUtf8 => py.get_type::<InvalidUtf8Error>(),
        E::DuplicateNode(_) => py.get_type::<DuplicateNodeError>(),
        E::UnknownNode(_) => py.get_type::<UnknownNodeError>(),
        E::KeyRequired(_) => py.get_type::<KeyRequiredError>(),
        E::TooManyNodes(_) => py.get_type::<TooManyNodesError>(),
        E::HashUnsupported(_) => py.get_type::<HashUnsupportedError>(),
        E::InvalidOutcome(_) => py.get_type::<InvalidOutcomeError>(),
        E::InvalidLocality(_) => py.get_type::<InvalidLocalityError>(),
        E::InvalidLoadReport(_) => py.get_type::<InvalidLoadReportError>(),
        // The same MemoryError the binding raises for its own batch limits (convert.rs).
        E::BatchTooLarge(_) => py.get_type::<PyMemoryError>(),
        E::UnknownAlgorithm(_) => py.get_type::<UnknownAlgorithmError>(),
        E::UnknownOption(_) => py.get_type::<UnknownOptionError>(),
        E::UnknownHash(_) => py.get_type::<UnknownHashError>(),
        E::InvalidVnodes(_) => py.get_type::<InvalidVnodesError>(),
        E::InvalidOptionValue { .. } => py.get_type::<InvalidOptionValueError>(),
        // The core's enum is non_exhaustive: a variant added later still raises a liblb.Error
        // carrying its code, until it gets its own class here.
        _ => py.get_type::<Error>(),
    }
}

/// The code of [`LeaseFinishedError`]: the binding's own (the core's `Lease::finish` consumes
/// the lease, so finishing twice cannot happen there); Node uses the same code.
pub(crate) const LEASE_FINISHED: &str = "LB_LEASE_FINISHED";

/// The error for finishing a lease that already ended.
pub(crate) fn lease_finished(id: &str) -> PyErr {
    finished(&format!(
        "the lease on node {id:?} has already ended (finished or cancelled)"
    ))
}

/// A [`LeaseFinishedError`] saying `message`: the binding's error for ending anything that
/// already ended (a lease, a `ServerRequest`).
pub(crate) fn finished(message: &str) -> PyErr {
    Python::attach(
        |py| match py.get_type::<LeaseFinishedError>().call1((message,)) {
            Ok(instance) => {
                let _ = instance.setattr(pyo3::intern!(py, "code"), LEASE_FINISHED);
                PyErr::from_value(instance)
            }
            Err(e) => e,
        },
    )
}

/// A core error on its way to Python.
pub(crate) struct CoreError(pub(crate) E);

impl From<CoreError> for PyErr {
    fn from(CoreError(error): CoreError) -> PyErr {
        Python::attach(|py| {
            let class = class_of(py, &error);
            match class.call1((error.to_string(),)) {
                Ok(instance) => {
                    // Exception instances have a __dict__, so this cannot fail short of memory
                    // exhaustion; then the exception without `.code` is still the right class.
                    let _ = instance.setattr(pyo3::intern!(py, "code"), error.code());
                    PyErr::from_value(instance)
                }
                Err(e) => e,
            }
        })
    }
}

/// `result.or_raise()?` turns a core `Result` into a `PyResult` through [`CoreError`].
pub(crate) trait OrRaise<T> {
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for liblb_core::Result<T> {
    #[inline]
    fn or_raise(self) -> PyResult<T> {
        self.map_err(|e| CoreError(e).into())
    }
}

/// Adds every exception class to the module; classes that stand for exactly one core code get
/// it as the class attribute `code`, taken from the core itself (never retyped here).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let with_code: [(Bound<'_, PyType>, Option<E>); 19] = [
        (py.get_type::<Error>(), None),
        (py.get_type::<NoNodesError>(), Some(E::NoNodes)),
        (py.get_type::<NoUsableNodesError>(), Some(E::NoUsableNodes)),
        (py.get_type::<InvalidNodeIdError>(), None),
        (py.get_type::<InvalidUtf8Error>(), Some(E::InvalidUtf8)),
        (
            py.get_type::<DuplicateNodeError>(),
            Some(E::DuplicateNode(String::new())),
        ),
        (
            py.get_type::<UnknownNodeError>(),
            Some(E::UnknownNode(String::new())),
        ),
        (py.get_type::<KeyRequiredError>(), Some(E::KeyRequired(""))),
        (py.get_type::<TooManyNodesError>(), Some(E::TooManyNodes(0))),
        (
            py.get_type::<HashUnsupportedError>(),
            Some(E::HashUnsupported("")),
        ),
        (
            py.get_type::<InvalidOutcomeError>(),
            Some(E::InvalidOutcome(String::new())),
        ),
        (
            py.get_type::<InvalidLocalityError>(),
            Some(E::InvalidLocality(String::new())),
        ),
        (
            py.get_type::<InvalidLoadReportError>(),
            Some(E::InvalidLoadReport(String::new())),
        ),
        (
            py.get_type::<UnknownAlgorithmError>(),
            Some(E::UnknownAlgorithm(String::new())),
        ),
        (py.get_type::<InvalidOptionError>(), None),
        (
            py.get_type::<UnknownOptionError>(),
            Some(E::UnknownOption(String::new())),
        ),
        (
            py.get_type::<UnknownHashError>(),
            Some(E::UnknownHash(String::new())),
        ),
        (
            py.get_type::<InvalidVnodesError>(),
            Some(E::InvalidVnodes(0)),
        ),
        (
            py.get_type::<InvalidOptionValueError>(),
            Some(E::InvalidOptionValue {
                option: "",
                value: String::new(),
                expected: "",
            }),
        ),
    ];
    for (class, sample) in with_code {
        if let Some(sample) = sample {
            // Keep the class table and `class_of` in step: the sample must map to its class.
            debug_assert!(class_of(py, &sample).is(&class));
            class.setattr("code", sample.code())?;
        }
        m.add(class.name()?, class)?;
    }
    let finished = py.get_type::<LeaseFinishedError>();
    finished.setattr("code", LEASE_FINISHED)?;
    m.add(finished.name()?, finished)?;
    let open = py.get_type::<AttemptOpenError>();
    open.setattr("code", ATTEMPT_OPEN)?;
    m.add(open.name()?, open)?;
    Ok(())
}
