//! `liblb.parse_orca` and `liblb.LoadReport` (issue 25): an ORCA load report, decoded by the
//! core's `orca` module exactly as every other language decodes it.

use crate::convert::type_name;
use crate::error::OrRaise;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyFloat, PyString};

/// An ORCA load report (cncf/xds `OrcaLoadReport`): what a backend says about its own load.
/// Utilisations are fractions (1.0 is fully used); `rps_fractional` is queries per second
/// (gRPC's `qps`), `eps` errors per second, `rps` the deprecated integer rate. The maps are
/// dicts from name to number, in the order the report gave them.
#[pyclass(frozen, eq, module = "liblb", name = "LoadReport")]
#[derive(Clone, PartialEq)]
pub(crate) struct PyLoadReport {
    report: liblb_core::LoadReport,
}

#[pymethods]
impl PyLoadReport {
    #[getter]
    fn cpu_utilization(&self) -> f64 {
        self.report.cpu_utilization
    }

    #[getter]
    fn mem_utilization(&self) -> f64 {
        self.report.mem_utilization
    }

    #[getter]
    fn application_utilization(&self) -> f64 {
        self.report.application_utilization
    }

    #[getter]
    fn rps(&self) -> u64 {
        self.report.rps
    }

    #[getter]
    fn rps_fractional(&self) -> f64 {
        self.report.rps_fractional
    }

    #[getter]
    fn eps(&self) -> f64 {
        self.report.eps
    }

    #[getter]
    fn request_cost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        dict(py, &self.report.request_cost)
    }

    #[getter]
    fn utilization<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        dict(py, &self.report.utilization)
    }

    #[getter]
    fn named_metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        dict(py, &self.report.named_metrics)
    }

    /// `LoadReport(name=value, ...)` of the non-zero fields, each written by Python's own
    /// `repr` (floats, and the maps as dicts).
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let r = &self.report;
        let mut fields = Vec::new();
        let numbers = [
            ("cpu_utilization", r.cpu_utilization),
            ("mem_utilization", r.mem_utilization),
            ("application_utilization", r.application_utilization),
            ("rps_fractional", r.rps_fractional),
            ("eps", r.eps),
        ];
        for (name, value) in numbers.into_iter().filter(|(_, v)| v.to_bits() != 0) {
            fields.push(format!("{name}={}", PyFloat::new(py, value).repr()?));
        }
        if r.rps != 0 {
            fields.push(format!("rps={}", r.rps));
        }
        let maps = [
            ("request_cost", &r.request_cost),
            ("utilization", &r.utilization),
            ("named_metrics", &r.named_metrics),
        ];
        for (name, pairs) in maps.into_iter().filter(|(_, p)| !p.is_empty()) {
            fields.push(format!("{name}={}", dict(py, pairs)?.repr()?));
        }
        Ok(format!("LoadReport({})", fields.join(", ")))
    }
}

impl From<liblb_core::LoadReport> for PyLoadReport {
    fn from(report: liblb_core::LoadReport) -> PyLoadReport {
        PyLoadReport { report }
    }
}

fn dict<'py>(py: Python<'py>, pairs: &[(String, f64)]) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, value) in pairs {
        dict.set_item(name, value)?;
    }
    Ok(dict)
}

/// A load report argument (`report_load`, a lease's `finish(load=...)`): a `LoadReport`, or
/// what `parse_orca` takes, parsed.
pub(crate) fn report_arg(data: &Bound<'_, PyAny>) -> PyResult<liblb_core::LoadReport> {
    match data.cast::<PyLoadReport>() {
        Ok(report) => Ok(report.get().report.clone()),
        Err(_) => parse(data, "a LoadReport, bytes, bytearray or str"),
    }
}

/// Parses an ORCA load report: the bytes of a serialized `OrcaLoadReport`, or the value of
/// an `endpoint-load-metrics` header (`BIN <base64>`, `JSON <json>`, `TEXT name:value, ...`),
/// as `bytes`, `bytearray` or `str` (a header value as text). Raises
/// `InvalidLoadReportError` saying what is wrong with anything else.
#[pyfunction]
pub(crate) fn parse_orca(data: &Bound<'_, PyAny>) -> PyResult<PyLoadReport> {
    Ok(PyLoadReport {
        report: parse(data, "bytes, bytearray or str")?,
    })
}

/// `data` parsed as a report; `expected` names the accepted types in the TypeError.
fn parse(data: &Bound<'_, PyAny>, expected: &str) -> PyResult<liblb_core::LoadReport> {
    let report = if let Ok(bytes) = data.cast::<PyBytes>() {
        liblb_core::parse_orca(bytes.as_bytes())
    } else if let Ok(text) = data.cast::<PyString>() {
        liblb_core::parse_orca(crate::convert::utf8(text)?.as_bytes())
    } else if let Ok(array) = data.cast::<PyByteArray>() {
        liblb_core::parse_orca(&array.to_vec())
    } else {
        return Err(PyTypeError::new_err(format!(
            "an ORCA load report must be {expected}, got {}",
            type_name(data)
        )));
    };
    report.or_raise()
}
