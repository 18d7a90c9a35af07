//! ORCA load reports from C (issue 25): the core's `orca` module decodes the bytes (a serialized
//! `OrcaLoadReport`, or an `endpoint-load-metrics` header value starting `BIN `, `JSON ` or
//! `TEXT `); these exports only hand the result to C.
//!
//! A parsed report is an opaque `lb_load_report` the caller owns and frees. Its numbers come
//! out in one struct (`lb_load_report_values`), its named entries (request costs,
//! utilisations, named metrics) as one list whose names point into the report itself
//! (`lb_load_report_entries`), so they stay valid until the report is freed.

use crate::lb_result;
use crate::outcome::lb_outcome_info;
use crate::panic::ffi_panic_boundary;
use crate::ptr::{
    Castable, free_handle, read_into, to_handle, try_bytes, try_out, try_out_slice, try_ref,
    try_str,
};
use crate::{lb_balancer, lb_lease};
use core::ffi::c_char;
use liblb_core::LoadReport;

/// A parsed ORCA load report (`lb_load_report_parse`); free it with `lb_load_report_free`.
pub struct lb_load_report {
    _private: [u8; 0],
}

impl crate::ptr::Boxed for lb_load_report {}

impl Castable for lb_load_report {
    type Rust = CReport;
}

/// What an `lb_load_report` holds: the report as parsed (what `lb_balancer_report_load`
/// gives the balancer), and its entries' names NUL-terminated for C, in listing order.
pub struct CReport {
    report: LoadReport,
    names: Vec<Vec<u8>>,
}

impl CReport {
    /// The report as parsed.
    pub(crate) fn report(&self) -> &LoadReport {
        &self.report
    }
}

/// The numbers of a load report, as `OrcaLoadReport` names them (0 where the report leaves
/// them out). Utilisations are fractions (1.0 is fully used); `rps` is the deprecated integer
/// field, `rps_fractional` the one gRPC reads as queries per second.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct lb_load_values {
    /// `cpu_utilization`.
    pub cpu_utilization: f64,
    /// `mem_utilization`.
    pub mem_utilization: f64,
    /// `application_utilization`.
    pub application_utilization: f64,
    /// `rps` (deprecated in the proto).
    pub rps: u64,
    /// `rps_fractional`: queries per second.
    pub rps_fractional: f64,
    /// `eps`: errors per second.
    pub eps: f64,
}

/// `lb_load_entry.map` of an entry of the report's `request_cost` map.
pub const LB_LOAD_REQUEST_COST: u32 = 0;
/// `lb_load_entry.map` of an entry of the report's `utilization` map.
pub const LB_LOAD_UTILIZATION: u32 = 1;
/// `lb_load_entry.map` of an entry of the report's `named_metrics` map.
pub const LB_LOAD_NAMED_METRICS: u32 = 2;

/// One named value of a report, listed by `lb_load_report_entries`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_load_entry {
    /// Which map it belongs to: `LB_LOAD_REQUEST_COST`, `LB_LOAD_UTILIZATION` or
    /// `LB_LOAD_NAMED_METRICS`.
    pub map: u32,
    /// The name, `name_len` bytes of UTF-8 inside the report, NUL-terminated there; valid
    /// until the report is freed.
    pub name: *const c_char,
    /// Length of `name` in bytes, without the terminating NUL.
    pub name_len: usize,
    /// The value.
    pub value: f64,
}

/// The report's entries in listing order: request costs, utilisations, named metrics, each
/// in the order the report gave them.
fn entries(report: &LoadReport) -> impl Iterator<Item = (u32, &str, f64)> {
    fn map(code: u32, pairs: &[(String, f64)]) -> impl Iterator<Item = (u32, &str, f64)> {
        (pairs.iter()).map(move |(name, value)| (code, name.as_str(), *value))
    }
    (map(LB_LOAD_REQUEST_COST, &report.request_cost))
        .chain(map(LB_LOAD_UTILIZATION, &report.utilization))
        .chain(map(LB_LOAD_NAMED_METRICS, &report.named_metrics))
}

/// What a report keeps for C: the parse, and a copy of every entry's name with a NUL after it
/// (a name may itself hold NULs: C reads it by its length).
pub(crate) fn for_c(report: LoadReport) -> CReport {
    let names = (entries(&report))
        .map(|(_, name, _)| [name.as_bytes(), b"\0"].concat())
        .collect();
    CReport { report, names }
}

/// Parses `len` bytes at `data` as an ORCA load report: a serialized `OrcaLoadReport`, or an
/// `endpoint-load-metrics` header value (`BIN <base64>`, `JSON <json>`, `TEXT name:value,
/// ...`), and writes a new report to `*report_out`, which the caller frees with
/// `lb_load_report_free`. NULL with length 0 is the empty (all-zero) report.
///
/// Errors (nothing is allocated and `*report_out` is unchanged): `LB_RESULT_NULL_PARAMETER`
/// (NULL `report_out`, or NULL `data` with a non-zero length), `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_INVALID_LOAD_REPORT` (bytes that are neither). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_load_report_parse(
    data: *const u8,
    len: usize,
    report_out: *mut *mut lb_load_report,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `report_out` NULL or valid for one write, `data` NULL or
        // valid for `len` bytes.
        let (out, data) = unsafe { (try_out(report_out)?, try_bytes(data, len)?) };
        let report = liblb_core::parse_orca(data)?;
        out.write(to_handle(for_c(report)));
        Ok(())
    }
}

/// Gives the balancer the load report of the node with this id, as received now (from an
/// `endpoint-load-metrics` header or trailer, or an out-of-band ORCA stream). The
/// `client_side_wrr` algorithm weighs nodes by these (gRFC A58: queries per second over
/// utilisation); the others keep them, so a configuration can switch. The report stays yours.
///
/// Errors (nothing is recorded): `LB_RESULT_NULL_PARAMETER` (NULL balancer, report, or `id`
/// with a non-zero length), `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`,
/// `LB_RESULT_UNKNOWN_NODE`. Thread-safe; never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_report_load(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    report: *const lb_load_report,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires NULL or live handles, and `id` valid for `id_len` bytes.
        let (balancer, id, report) =
            unsafe { (try_ref(balancer)?, try_str(id, id_len)?, try_ref(report)?) };
        balancer.report_load(id, report.report())?;
        Ok(())
    }
}

/// `lb_lease_finish_info` with the load report the answer carried (see
/// `lb_balancer_report_load`): the report is taken first, then the lease ends and is freed.
/// The report stays yours.
///
/// Errors (the lease is then untouched and still yours, nothing is recorded):
/// `LB_RESULT_NULL_PARAMETER` (NULL lease, `info` or report), `LB_RESULT_INVALID_OUTCOME`.
/// On `LB_RESULT_OK` the lease is gone: do not use it again.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_finish_load(
    lease: *mut lb_lease,
    info: *const lb_outcome_info,
    report: *const lb_load_report,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `info` NULL or valid for reading one `lb_outcome_info`, and
        // a NULL or live report.
        let (info, report) = unsafe { (info.as_ref(), try_ref(report)?) };
        let info = *info.ok_or(lb_result::NullParameter)?;
        crate::outcome::finish_lease(lease, info, Some(report.report()))
    }
}

/// Frees a report from `lb_load_report_parse`; the names its entries point at go with it.
/// NULL is fine and does nothing.
#[unsafe(no_mangle)]
pub extern "C" fn lb_load_report_free(report: *mut lb_load_report) {
    // SAFETY: lb.h requires NULL or a live report, freed once.
    ffi_panic_boundary!(unsafe { free_handle(report) })
}

/// Writes the report's numbers to `*values_out`. Errors: `LB_RESULT_NULL_PARAMETER` (NULL
/// `report` or `values_out`). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_load_report_values(
    report: *const lb_load_report,
    values_out: *mut lb_load_values,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live report and `values_out` NULL or valid for one
        // write.
        unsafe {
            read_into(report, values_out, |CReport { report: r, .. }: &CReport| lb_load_values {
                cpu_utilization: r.cpu_utilization,
                mem_utilization: r.mem_utilization,
                application_utilization: r.application_utilization,
                rps: r.rps,
                rps_fractional: r.rps_fractional,
                eps: r.eps,
            })
        }
    }
}

/// Lists the report's named values (request costs, utilisations, named metrics, in that order
/// and each map in the report's order) into `entries_out`, an array of `entries_cap`, and
/// writes how many there are to `*len_out`. Names point into the report.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (NULL `report` or `len_out`, or NULL `entries_out`
/// with a non-zero cap), `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_BUFFER_TOO_SMALL` (fewer than
/// `*len_out` slots: the count needed is written to `*len_out`, nothing to `entries_out`; a
/// cap of 0 asks for the count). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_load_report_entries(
    report: *const lb_load_report,
    entries_out: *mut lb_load_entry,
    entries_cap: usize,
    len_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live report, `entries_out` NULL or valid for
        // `entries_cap` writes, `len_out` NULL or valid for one write.
        let (report, mut out, len) = unsafe {
            (
                try_ref(report)?,
                try_out_slice(entries_out, entries_cap)?,
                try_out(len_out)?,
            )
        };
        let count = report.names.len();
        if count > out.len() {
            len.write(count);
            return Err(lb_result::BufferTooSmall);
        }
        for (i, ((map, _, value), name)) in entries(&report.report).zip(&report.names).enumerate() {
            let name_len = name.len() - 1;
            out.write(i, lb_load_entry { map, name: name.as_ptr().cast(), name_len, value });
        }
        len.write(count);
        Ok(())
    }
}
