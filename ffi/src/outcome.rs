//! How a request ended, as C says it: an `lb_outcome` code (success, or a failure kind) with a
//! latency (`lb_lease_finish`, `lb_balancer_report`), or an `lb_outcome_info` that adds an
//! overloaded node's retry-after (`lb_lease_finish_info`, `lb_balancer_report_info`).
//!
//! The kinds and what they do to health are the core's (`liblb_core::FailureKind`); this file
//! only maps codes and the `LB_LATENCY_NONE` marker to a core `Outcome`. The rule for a missing
//! latency is the same in every binding: a lease measures it (the time since acquire), a
//! reported failure may have none, a reported success must have one.

use crate::balancer::{lb_balancer, lb_lease};
use crate::lb_result;
use crate::panic::ffi_panic_boundary;
use crate::ptr::{take_handle, try_ref, try_str};
use core::ffi::c_char;
use core::time::Duration;
use liblb_core::{Failure, FailureKind, Outcome};

/// How a request ended, for `lb_lease_finish` and `lb_balancer_report` (and the `outcome` of
/// an `lb_outcome_info`): `LB_OUTCOME_SUCCESS`, or a failure: `LB_OUTCOME_FAILURE` (an error,
/// also spelled `LB_OUTCOME_ERROR`), `LB_OUTCOME_TIMEOUT` or `LB_OUTCOME_OVERLOADED`. (A plain
/// `uint32_t`, so any number C passes is well defined: other values are
/// `LB_RESULT_INVALID_OUTCOME`.)
pub type lb_outcome = u32;
/// The request succeeded.
pub const LB_OUTCOME_SUCCESS: lb_outcome = 0;
/// The request failed with an error (the node answered with one, or the connection failed):
/// counts towards the node's failure streak (`consecutive_failures`).
pub const LB_OUTCOME_FAILURE: lb_outcome = 1;
/// `LB_OUTCOME_FAILURE` under the name the other languages use for this kind (`"error"`).
pub const LB_OUTCOME_ERROR: lb_outcome = 1;
/// The request got no answer in time: counts towards the failure streak, like an error.
pub const LB_OUTCOME_TIMEOUT: lb_outcome = 2;
/// The node is alive but shedding load (HTTP 429, a 503 with `Retry-After`, gRPC
/// `RESOURCE_EXHAUSTED`): neither extends nor breaks the failure streak. With a retry-after
/// (`lb_outcome_info.retry_after_ns`) the node takes no picks until then
/// (`LB_NODE_OVERLOADED`), capped by the option `max_retry_after_ms`.
pub const LB_OUTCOME_OVERLOADED: lb_outcome = 3;

/// "No time given", for latencies and retry-afters, and `lb_node_stats.latency_ns` of a node
/// without any latency sample yet. As a latency: `lb_lease_finish` measures it (the time since
/// acquire, as `lb_lease_elapsed` reads it); `lb_balancer_report` records a failure without
/// a latency, and refuses a success without one (`LB_RESULT_INVALID_OUTCOME`). As a
/// retry-after: none.
pub const LB_LATENCY_NONE: u64 = u64::MAX;

/// A request's outcome in full, for `lb_lease_finish_info` and `lb_balancer_report_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_outcome_info {
    /// `LB_OUTCOME_SUCCESS`, `LB_OUTCOME_FAILURE` (`LB_OUTCOME_ERROR`), `LB_OUTCOME_TIMEOUT`
    /// or `LB_OUTCOME_OVERLOADED`.
    pub outcome: lb_outcome,
    /// How long the request took, in nanoseconds, or `LB_LATENCY_NONE` (see there).
    pub latency_ns: u64,
    /// How long the node asked clients to stay away (HTTP `Retry-After`, gRPC
    /// `grpc-retry-pushback-ms`), in nanoseconds, or `LB_LATENCY_NONE` for none. Only an
    /// `LB_OUTCOME_OVERLOADED` failure pauses the node (other failures ignore it); a success
    /// with one is `LB_RESULT_INVALID_OUTCOME`.
    pub retry_after_ns: u64,
}

/// A time given by C, `None` for [`LB_LATENCY_NONE`].
fn time(ns: u64) -> Option<Duration> {
    (ns != LB_LATENCY_NONE).then(|| Duration::from_nanos(ns))
}

/// The core outcome of `info`; `measured` is the latency to use when none is given (a lease's
/// time since acquire; `None` for reports).
pub(crate) fn outcome_of(
    info: lb_outcome_info,
    measured: impl FnOnce() -> Option<Duration>,
) -> Result<Outcome, lb_result> {
    let kind = match info.outcome {
        LB_OUTCOME_SUCCESS => None,
        LB_OUTCOME_FAILURE => Some(FailureKind::Error),
        LB_OUTCOME_TIMEOUT => Some(FailureKind::Timeout),
        LB_OUTCOME_OVERLOADED => Some(FailureKind::Overloaded),
        _ => return Err(lb_result::InvalidOutcome),
    };
    let latency = time(info.latency_ns).or_else(measured);
    let retry_after = time(info.retry_after_ns);
    match (kind, latency) {
        (None, Some(latency)) if retry_after.is_none() => Ok(Outcome::Success(latency)),
        // A success needs its latency, and has no retry-after.
        (None, _) => Err(lb_result::InvalidOutcome),
        (Some(kind), latency) => Ok(Outcome::Failed(Failure {
            kind,
            latency,
            retry_after,
        })),
    }
}

/// `lb_outcome_info` of the plain form (no retry-after).
pub(crate) fn plain(outcome: lb_outcome, latency_ns: u64) -> lb_outcome_info {
    lb_outcome_info {
        outcome,
        latency_ns,
        retry_after_ns: LB_LATENCY_NONE,
    }
}

/// Ends a lease with `info` (see `lb_lease_finish_info`), and the load report its answer
/// carried, if any (`lb_lease_finish_load`).
pub(crate) fn finish_lease(
    lease: *mut lb_lease,
    info: lb_outcome_info,
    load: Option<&liblb_core::LoadReport>,
) -> Result<(), lb_result> {
    // SAFETY: lb.h requires a NULL or live lease, used by one thread at a time.
    let open = unsafe { try_ref(lease.cast_const()) }?;
    // Checked before the lease is taken: on any error it stays the caller's.
    let outcome = outcome_of(info, || Some(open.elapsed()))?;
    // SAFETY: as above; non-NULL and live, and lb.h forbids using it after this call.
    let lease = unsafe { take_handle(lease) };
    match load {
        Some(load) => lease.finish_with_load(outcome, load),
        None => lease.finish(outcome),
    }
    Ok(())
}

/// Records `info` for the node named by `id` (see `lb_balancer_report_info`).
pub(crate) fn report(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    info: lb_outcome_info,
) -> Result<(), lb_result> {
    // SAFETY: lb.h requires a NULL or live handle, and `id` valid for `id_len` bytes.
    let (balancer, id) = unsafe { (try_ref(balancer)?, try_str(id, id_len)?) };
    let outcome = outcome_of(info, || None)?;
    balancer.report(id, outcome)?;
    Ok(())
}

/// `lb_lease_finish` with the outcome in full: `info->outcome` (success or a failure kind),
/// `info->latency_ns` (`LB_LATENCY_NONE`: measured since acquire) and, for an overloaded node,
/// `info->retry_after_ns` (`LB_LATENCY_NONE`: none), which keeps the node from picks until
/// then (capped by the option `max_retry_after_ms`; it counts with ejections under
/// `max_ejection_percent`). Frees the lease on success.
///
/// Errors (the lease is then untouched and still yours; `*info` is only read):
/// `LB_RESULT_NULL_PARAMETER` (NULL lease or `info`), `LB_RESULT_INVALID_OUTCOME` (an unknown
/// `outcome`, or a success with a retry-after). On `LB_RESULT_OK` the lease is gone: do not
/// use it again.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_finish_info(
    lease: *mut lb_lease,
    info: *const lb_outcome_info,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `info` NULL or valid for reading one `lb_outcome_info`.
        let info = *unsafe { info.as_ref() }.ok_or(lb_result::NullParameter)?;
        finish_lease(lease, info, None)
    }
}

/// `lb_balancer_report` with the outcome in full (see `lb_outcome_info`): a failure may come
/// without a latency (`LB_LATENCY_NONE`), an overloaded one with a retry-after that keeps the
/// node from picks until then (capped by `max_retry_after_ms`; counted with ejections under
/// `max_ejection_percent`).
///
/// Errors (nothing is recorded): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_INVALID_UTF8`, `LB_RESULT_INVALID_OUTCOME` (an unknown `outcome`; a success
/// without a latency or with a retry-after), `LB_RESULT_UNKNOWN_NODE`. Thread-safe; never
/// locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_report_info(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    info: *const lb_outcome_info,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `info` NULL or valid for reading one `lb_outcome_info`.
        let info = *unsafe { info.as_ref() }.ok_or(lb_result::NullParameter)?;
        report(balancer, id, id_len, info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(outcome: lb_outcome, latency_ns: u64, retry_after_ns: u64) -> lb_outcome_info {
        lb_outcome_info {
            outcome,
            latency_ns,
            retry_after_ns,
        }
    }

    #[test]
    fn codes_map_to_the_core_kinds() {
        let none = || None;
        let ms = Duration::from_millis;
        assert_eq!(
            outcome_of(plain(LB_OUTCOME_SUCCESS, 3_000_000), none),
            Ok(Outcome::Success(ms(3)))
        );
        assert_eq!(
            outcome_of(plain(LB_OUTCOME_FAILURE, 3_000_000), none),
            Ok(Outcome::Failure(ms(3)))
        );
        assert_eq!(
            outcome_of(plain(LB_OUTCOME_TIMEOUT, LB_LATENCY_NONE), none),
            Ok(Failure::timeout().into())
        );
        assert_eq!(
            outcome_of(info(LB_OUTCOME_OVERLOADED, 1_000_000, 5_000_000_000), none),
            Ok(Failure::overloaded()
                .after(ms(1))
                .retry_after(ms(5000))
                .into())
        );
        // A measured latency fills in only a missing one.
        assert_eq!(
            outcome_of(plain(LB_OUTCOME_SUCCESS, LB_LATENCY_NONE), || Some(ms(7))),
            Ok(Outcome::Success(ms(7)))
        );
        assert_eq!(
            outcome_of(plain(LB_OUTCOME_SUCCESS, 0), || Some(ms(7))),
            Ok(Outcome::Success(ms(0)))
        );
        // Refused: unknown codes, a success without a latency or with a retry-after.
        for bad in [
            plain(4, 0),
            plain(u32::MAX, 0),
            plain(LB_OUTCOME_SUCCESS, LB_LATENCY_NONE),
            info(LB_OUTCOME_SUCCESS, 1, 0),
        ] {
            assert_eq!(outcome_of(bad, none), Err(lb_result::InvalidOutcome));
        }
    }
}
