//! The request loop for C: `lb_request` (the core's `liblb_core::Request`), the hedging
//! policies it can follow (`lb_hedging`), and the budgets a balancer gives every request
//! (`lb_balancer_set_retry_budget` and its two siblings).
//!
//! A request hands out one lease per attempt (`lb_request_attempt`), on distinct nodes in the
//! key's retry order; the caller does the I/O and gives each attempt's outcome back to
//! `lb_request_finish`, which says what comes next (`lb_decision`). Every rule (retry policy,
//! backoff, retry-after, deadline, budgets, hedging) is the core's; this file maps handles,
//! codes and times.

use crate::balancer::{FfiBalancer, lb_balancer, lb_lease};
use crate::budget::{lb_adaptive_throttle, lb_retry_budget, lb_retry_throttle};
use crate::lb_result;
use crate::outcome::{LB_LATENCY_NONE, lb_outcome_info, outcome_of};
use crate::panic::ffi_panic_boundary;
use crate::ptr::{
    Boxed, Castable, Shared, free_handle, free_shared_handle, read_into, share, take_handle,
    to_handle, to_shared_handle, try_key, try_mut, try_out, try_ref,
};
use core::borrow::Borrow;
use core::time::Duration;
use liblb_core::{
    Balancer, Budget, Decision, FailureKind, Hedging, MonotonicClock, Request, RetryOn, Stop,
};
use std::sync::Arc;

/// liblb's monotonic clock in nanoseconds: the clock every balancer reads
/// (`lb_balancer_now_ns`), from one origin per process. Use it for the `now_ns` of budgets
/// and hedging policies that balancers or requests also use, so all of them tell one time.
/// Never fails; thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_now_ns() -> u64 {
    ffi_panic_boundary!(MonotonicClock::now())
}

// ---------------------------------------------------------------------------------------------
// Budgets on a balancer

/// Gives every later request of `balancer` the budget `budget` made (after the handles
/// are checked: a NULL one is `LB_RESULT_NULL_PARAMETER` and changes nothing).
fn set_balancer_budget(
    balancer: *const lb_balancer,
    budget: impl FnOnce() -> Result<Budget, lb_result>,
) -> Result<(), lb_result> {
    // SAFETY: lb.h requires a NULL or live balancer.
    let balancer = unsafe { try_ref(balancer) }?;
    balancer.set_budget(Some(budget()?));
    Ok(())
}

/// Gives every request of `balancer` this retry budget (`lb_request_new` takes the balancer's
/// budget at its creation; a request may choose another). The balancer keeps its own reference:
/// the caller may free the budget whenever it likes. Replaces any budget set before.
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_retry_budget(
    balancer: *const lb_balancer,
    budget: *const lb_retry_budget,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live budget.
    ffi_panic_boundary!(set_balancer_budget(balancer, || Ok(Budget::Retry(
        unsafe { share(budget) }?
    ))))
}

/// `lb_balancer_set_retry_budget` with gRPC's retry throttling (gRFC A6) instead.
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_retry_throttle(
    balancer: *const lb_balancer,
    throttle: *const lb_retry_throttle,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live throttle.
    ffi_panic_boundary!(set_balancer_budget(balancer, || Ok(Budget::Throttle(
        unsafe { share(throttle) }?
    ))))
}

/// `lb_balancer_set_retry_budget` with client-side adaptive throttling (the SRE book) instead:
/// a request it rejects makes no attempt at all (`LB_STOP_THROTTLED`).
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_adaptive_throttle(
    balancer: *const lb_balancer,
    throttle: *const lb_adaptive_throttle,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live throttle.
    ffi_panic_boundary!(set_balancer_budget(balancer, || Ok(Budget::Adaptive(
        unsafe { share(throttle) }?
    ))))
}

/// Takes the balancer's budget away: later requests have none (unless they set one).
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_clear_budget(balancer: *const lb_balancer) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle.
        unsafe { try_ref(balancer) }?.set_budget(None);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Hedging policies

/// When a request sends a hedge: another attempt, on the next untried node, while the first is
/// still out (gRPC's `hedgingPolicy`, Finagle's `BackupRequestFilter`). Create with
/// `lb_hedging_new_after` or `lb_hedging_new_percentile`, give it to requests with
/// `lb_request_set_hedging` (one policy may serve every request: a percentile policy learns
/// from all of them), free with `lb_hedging_free`. Thread-safe.
pub struct lb_hedging {
    _private: [u8; 0],
}

impl Shared for lb_hedging {}

impl Castable for lb_hedging {
    type Rust = Hedging;
}

/// A hedging policy that sends a hedge after `delay_ns` nanoseconds without an answer (gRPC's
/// `hedgingDelay`; 0 sends it at once), in `*hedging_out`. Free it with `lb_hedging_free`.
/// Errors: `LB_RESULT_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_hedging_new_after(
    delay_ns: u64,
    hedging_out: *mut *mut lb_hedging,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `hedging_out` NULL or valid for one write.
        let out = unsafe { try_out(hedging_out) }?;
        out.write(to_shared_handle(Hedging::after(Duration::from_nanos(delay_ns))));
        Ok(())
    }
}

/// A hedging policy (Finagle's `BackupRequestFilter`) that sends a hedge after the
/// `1 - max_extra_load` percentile of the latencies its requests saw over the last 30 seconds,
/// adding at most `max_extra_load` (above 0, below 1; e.g. 0.01 = the p99, at most 1% more
/// requests) to the load; its clock starts at `now_ns` (use `lb_now_ns()`). It sends no hedge
/// until it has latencies to go by. Free it with `lb_hedging_free`.
/// Errors: `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_OPTION_VALUE` (out of range, NaN).
#[unsafe(no_mangle)]
pub extern "C" fn lb_hedging_new_percentile(
    max_extra_load: f64,
    now_ns: u64,
    hedging_out: *mut *mut lb_hedging,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `hedging_out` NULL or valid for one write.
        let out = unsafe { try_out(hedging_out) }?;
        out.write(to_shared_handle(Hedging::percentile(max_extra_load, now_ns)?));
        Ok(())
    }
}

/// Frees the caller's reference to a hedging policy (requests using it keep theirs). NULL is
/// fine. Do not use it afterwards.
#[unsafe(no_mangle)]
pub extern "C" fn lb_hedging_free(hedging: *mut lb_hedging) {
    // SAFETY: lb.h requires a NULL or live handle from `lb_hedging_new_*`, freed once.
    ffi_panic_boundary!(unsafe { free_shared_handle(hedging) })
}

// ---------------------------------------------------------------------------------------------
// Requests

/// One request's attempts. Create with `lb_request_new`, free with `lb_request_free`.
///
/// The loop (see docs/retries.md):
///
/// ```c
/// lb_request *r = NULL;
/// lb_request_new(b, key, key_len, &r);
/// lb_lease *lease = NULL;
/// while (lb_request_attempt(r, &lease) == LB_RESULT_OK && lease != NULL) {
///     // send to the lease's node (lb_lease_node), classify the answer into `outcome`
///     lb_decision d;
///     uint64_t delay_ns = 0;
///     lb_request_finish(r, lease, &outcome, &d, &delay_ns);
///     if (d != LB_DECISION_RETRY) break;   // DONE, or STOP: lb_request_state says why
///     sleep_ns(delay_ns);
/// }
/// lb_request_free(r);
/// ```
///
/// Not thread-safe: one thread at a time may use a request (it may move between threads).
/// Its leases are ended through it (`lb_request_finish`, `lb_request_cancel`), never with
/// `lb_lease_finish` or `lb_lease_cancel`, which it would not hear of.
pub struct lb_request {
    _private: [u8; 0],
}

impl Boxed for lb_request {}

impl Castable for lb_request {
    type Rust = FfiRequest;
}

/// The balancer as a request holds it: a reference of the C handle's own, so the request
/// outlives `lb_balancer_free`.
pub(crate) struct HeldBalancer(Arc<FfiBalancer>);

impl Borrow<Balancer> for HeldBalancer {
    fn borrow(&self) -> &Balancer {
        &self.0
    }
}

/// What an `lb_request` handle points to.
pub(crate) type FfiRequest = Request<HeldBalancer, Vec<u8>>;

// A request may be used by one thread and then another (lb.h: one at a time).
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<FfiRequest>();
};

/// What to do after an attempt ended (`lb_request_finish`). A plain `uint32_t`.
pub type lb_decision = u32;
/// The attempt succeeded: the request is done.
pub const LB_DECISION_DONE: lb_decision = 0;
/// Wait the delay given (`*delay_ns_out`), then make the next attempt (`lb_request_attempt`).
pub const LB_DECISION_RETRY: lb_decision = 1;
/// Give up: the last attempt's failure is the request's (`lb_request_state` says why).
pub const LB_DECISION_STOP: lb_decision = 2;
/// Another attempt (a hedge) is still out: wait for its answer.
pub const LB_DECISION_WAIT: lb_decision = 3;

/// Why a request gave up (`lb_request_state`). A plain `uint32_t`; `lb_stop_name` names it.
pub type lb_stop = u32;
/// It has not given up (it is still going, or it succeeded).
pub const LB_STOP_NONE: lb_stop = 0;
/// `max_attempts` attempts were made.
pub const LB_STOP_MAX_ATTEMPTS: lb_stop = 1;
/// The failure's kind is not one the request retries (`lb_request_set_retry_on`).
pub const LB_STOP_NOT_RETRYABLE: lb_stop = 2;
/// The budget refused the retry.
pub const LB_STOP_BUDGET: lb_stop = 3;
/// The retry would start at or after the deadline.
pub const LB_STOP_DEADLINE: lb_stop = 4;
/// Every node was tried.
pub const LB_STOP_NO_MORE_NODES: lb_stop = 5;
/// The adaptive throttle rejected the request before its first attempt.
pub const LB_STOP_THROTTLED: lb_stop = 6;

/// The `LB_STOP_*` code of a core reason (`Stop::ALL` order, after `LB_STOP_NONE`).
fn stop_code(stop: Option<Stop>) -> lb_stop {
    stop.map_or(LB_STOP_NONE, |stop| stop as lb_stop + 1)
}

/// The name of an `lb_stop` code, as every language spells it ("max_attempts", "budget",
/// ...; "none" for `LB_STOP_NONE`, "unknown" for other values): a static NUL-terminated
/// string, never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn lb_stop_name(stop: lb_stop) -> *const core::ffi::c_char {
    const NAMES: [&core::ffi::CStr; 8] = [
        c"none",
        c"max_attempts",
        c"not_retryable",
        c"budget",
        c"deadline",
        c"no_more_nodes",
        c"throttled",
        c"unknown",
    ];
    ffi_panic_boundary! {
        let at = usize::try_from(stop).map_or(NAMES.len() - 1, |i| i.min(NAMES.len() - 1));
        NAMES[at].as_ptr()
    }
}

/// `retry_on` bits (`lb_request_set_retry_on`): errors are retried.
pub const LB_RETRY_ON_ERROR: u32 = 1;
/// Timeouts are retried.
pub const LB_RETRY_ON_TIMEOUT: u32 = 2;
/// Overloaded answers are retried (after their retry-after, if any).
pub const LB_RETRY_ON_OVERLOADED: u32 = 4;
// Written out for cbindgen: bit `kind as u32` of each core kind.
const _: () = {
    assert!(LB_RETRY_ON_ERROR == 1 << FailureKind::Error as u32);
    assert!(LB_RETRY_ON_TIMEOUT == 1 << FailureKind::Timeout as u32);
    assert!(LB_RETRY_ON_OVERLOADED == 1 << FailureKind::Overloaded as u32);
    assert!(Stop::ALL.len() == 6 && Stop::Throttled as u32 + 1 == LB_STOP_THROTTLED);
};

/// A request's state (`lb_request_state`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct lb_request_info {
    /// Attempts started so far (hedges included).
    pub attempts: u32,
    /// Which attempt succeeded (1-based, in the order they started), 0 before one has.
    pub winner: u32,
    /// Whether the request is over (succeeded or gave up).
    pub over: bool,
    /// Why it gave up (`LB_STOP_NONE` while going or after a success).
    pub stopped: lb_stop,
    /// The delay the last `LB_DECISION_RETRY` gave, in nanoseconds (0 before any).
    pub backoff_ns: u64,
    /// Nanoseconds left before the deadline, or `LB_LATENCY_NONE` without one.
    pub remaining_ns: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(LB_LATENCY_NONE - 1)
}

/// Starts a request through `balancer` for `key` (`key_len` bytes; NULL and 0: no key, for
/// the algorithms that take none), in `*request_out`: up to 3 attempts, retrying every failure
/// kind, with Envoy's backoff (25 ms base, 250 ms cap), limited by the balancer's budget if it
/// has one (`lb_balancer_set_retry_budget`). The `lb_request_set_*` functions change that
/// before the first attempt. Nothing is picked until `lb_request_attempt`. The request keeps
/// the balancer alive until it is freed, and copies the key.
///
/// The caller owns the request and must free it with `lb_request_free`. Errors (nothing
/// allocated): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_new(
    balancer: *const lb_balancer,
    key: *const core::ffi::c_void,
    key_len: usize,
    request_out: *mut *mut lb_request,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `key` valid for `key_len` bytes and
        // `request_out` NULL or valid for one write.
        let (balancer, key, out) = unsafe {
            (share(balancer)?, try_key(key, key_len)?, try_out(request_out)?)
        };
        let request = Request::new(HeldBalancer(balancer), key.map(<[u8]>::to_vec));
        out.write(to_handle(request));
        Ok(())
    }
}

/// Frees a request. Leases it handed out and that are still open stay valid and yours (end
/// them with `lb_lease_finish` or `lb_lease_cancel` now). NULL is fine.
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_free(request: *mut lb_request) {
    // SAFETY: lb.h requires a NULL or live request from `lb_request_new`, freed once.
    ffi_panic_boundary!(unsafe { free_handle(request) })
}

/// Runs `edit` on a request's policy (checked by the core; on an error it keeps its policy).
fn edit_policy(
    request: *mut lb_request,
    edit: impl FnOnce(&mut liblb_core::RetryPolicy),
) -> Result<(), lb_result> {
    // SAFETY: lb.h requires a NULL or live request, used by one thread at a time.
    let request = unsafe { try_mut(request) }?;
    let mut policy = *request.policy();
    edit(&mut policy);
    Ok(request.set_policy(policy)?)
}

/// Attempts in all, the first included (1 to 100; default 3). Errors:
/// `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_OPTION_VALUE` (then unchanged).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_set_max_attempts(
    request: *mut lb_request,
    max_attempts: u32,
) -> lb_result {
    ffi_panic_boundary!(edit_policy(request, |p| p.max_attempts = max_attempts))
}

/// The failure kinds retried: `LB_RETRY_ON_*` bits or-ed together (default all three; 0 retries
/// nothing). Errors: `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_OPTION_VALUE` (other bits).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_set_retry_on(request: *mut lb_request, retry_on: u32) -> lb_result {
    ffi_panic_boundary! {
        let mut set = RetryOn::NONE;
        let mut left = retry_on;
        for kind in FailureKind::ALL {
            let bit = 1 << kind as u32;
            if left & bit != 0 {
                set = set.with(kind);
                left &= !bit;
            }
        }
        if left != 0 {
            return Err(liblb_core::Error::InvalidOptionValue {
                option: "retry_on",
                value: format!("{retry_on:#x}"),
                expected: "LB_RETRY_ON_* bits",
            }
            .into());
        }
        edit_policy(request, |p| p.retry_on = set)
    }
}

/// The whole request's time limit in nanoseconds from its first attempt (`LB_LATENCY_NONE`:
/// none, the default): a retry whose delay would reach it is not made (`LB_STOP_DEADLINE`).
/// Errors: `LB_RESULT_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_set_deadline(request: *mut lb_request, deadline_ns: u64) -> lb_result {
    ffi_panic_boundary! {
        let deadline = (deadline_ns != LB_LATENCY_NONE).then(|| Duration::from_nanos(deadline_ns));
        edit_policy(request, |p| p.deadline = deadline)
    }
}

/// Hedges the request by `hedging` (NULL: no hedges). The request keeps its own reference.
/// Errors (the request unchanged): `LB_RESULT_NULL_PARAMETER` (NULL request),
/// `LB_RESULT_INVALID_OPTION_VALUE` (after the first attempt: a hedged request tracks every
/// attempt's node from its start).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_set_hedging(
    request: *mut lb_request,
    hedging: *const lb_hedging,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live request (one thread at a time) and a NULL or
        // live hedging policy.
        let (request, hedging) = unsafe { (try_mut(request)?, share(hedging).ok()) };
        Ok(request.set_hedging(hedging)?)
    }
}

/// Sets the request's budget (instead of the balancer's) before its first attempt.
fn set_budget(
    request: *mut lb_request,
    budget: Result<Budget, lb_result>,
) -> Result<(), lb_result> {
    // SAFETY: lb.h requires a NULL or live request, used by one thread at a time.
    let request = unsafe { try_mut(request) }?;
    Ok(request.set_budget(Some(budget?))?)
}

/// Limits this request by `budget` instead of the balancer's budget (the request keeps its own
/// reference). Errors (the request unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_OPTION_VALUE` (after the first attempt, whose deposit went to the budget
/// it had).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_set_retry_budget(
    request: *mut lb_request,
    budget: *const lb_retry_budget,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live budget.
    ffi_panic_boundary!(set_budget(
        request,
        unsafe { share(budget) }.map(Budget::Retry)
    ))
}

/// `lb_request_set_retry_budget` with a retry throttle (same errors).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_set_retry_throttle(
    request: *mut lb_request,
    throttle: *const lb_retry_throttle,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live throttle.
    ffi_panic_boundary!(set_budget(
        request,
        unsafe { share(throttle) }.map(Budget::Throttle)
    ))
}

/// `lb_request_set_retry_budget` with an adaptive throttle (same errors).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_set_adaptive_throttle(
    request: *mut lb_request,
    throttle: *const lb_adaptive_throttle,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live throttle.
    ffi_panic_boundary!(set_budget(
        request,
        unsafe { share(throttle) }.map(Budget::Adaptive)
    ))
}

/// Limits this request by no budget at all, whatever the balancer's. Errors:
/// `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_OPTION_VALUE` (after the first attempt).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_clear_budget(request: *mut lb_request) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live request, used by one thread at a time.
        Ok(unsafe { try_mut(request) }?.set_budget(None)?)
    }
}

/// Writes an attempt's lease (or NULL) to `out`.
fn write_lease(out: crate::ptr::Out<'_, *mut lb_lease>, lease: Option<liblb_core::Lease>) {
    out.write(lease.map_or(core::ptr::null_mut(), to_handle::<lb_lease>));
}

/// The next attempt: `*lease_out` = a lease on a node this request has not tried (read its
/// node with `lb_lease_node`), or NULL when the request is over (`lb_request_state` says
/// how). The first attempt is an ordinary `lb_balancer_acquire`. End each lease with
/// `lb_request_finish` (or `lb_request_cancel`).
///
/// Errors (the request is as it was; `*lease_out` unchanged): `LB_RESULT_NULL_PARAMETER`, and
/// the balancer's: `LB_RESULT_NO_NODES`, `LB_RESULT_KEY_REQUIRED`, ...
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_attempt(
    request: *mut lb_request,
    lease_out: *mut *mut lb_lease,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live request (one thread at a time) and `lease_out`
        // NULL or valid for one write.
        let (request, out) = unsafe { (try_mut(request)?, try_out(lease_out)?) };
        write_lease(out, request.attempt()?);
        Ok(())
    }
}

/// Sends a hedge now, if the request's hedging policy, its budget and its attempts allow:
/// `*lease_out` = the hedge's lease (on the next untried node) or NULL when none was sent.
/// Keep the first answer that ends the request and cancel the other attempts' leases with
/// `lb_request_cancel` (nothing counted). Errors: as `lb_request_attempt`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_hedge(
    request: *mut lb_request,
    lease_out: *mut *mut lb_lease,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: as `lb_request_attempt`.
        let (request, out) = unsafe { (try_mut(request)?, try_out(lease_out)?) };
        write_lease(out, request.hedge()?);
        Ok(())
    }
}

/// How long to wait for an answer, from when the last attempt started, before calling
/// `lb_request_hedge`, in `*delay_ns_out`; `LB_LATENCY_NONE`: send no hedge (no hedging
/// policy, no attempt out, the attempts used up, or the policy says not now).
/// Errors: `LB_RESULT_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_hedge_after(
    request: *const lb_request,
    delay_ns_out: *mut u64,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live request and a NULL or writable output.
    ffi_panic_boundary!(unsafe {
        read_into(request, delay_ns_out, |request| {
            request.hedge_after().map_or(LB_LATENCY_NONE, nanos)
        })
    })
}

/// Ends `lease`, an attempt of this request, with `*outcome` (as `lb_lease_finish_info`:
/// counted by the balancer like any lease's outcome; `LB_LATENCY_NONE` is measured) and frees
/// it; `*decision_out` says what comes next, and `*delay_ns_out` (NULL: not wanted) how long to
/// wait before the next attempt for `LB_DECISION_RETRY` (0 otherwise). An overloaded answer's
/// retry-after becomes the delay (capped by `max_retry_after_ms`).
///
/// Errors (the lease is then untouched and still yours, the request unchanged):
/// `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_OUTCOME`. After `LB_RESULT_PANIC` (a bug in
/// liblb) the lease may be gone: do not use it, and free the request.
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_finish(
    request: *mut lb_request,
    lease: *mut lb_lease,
    outcome: *const lb_outcome_info,
    decision_out: *mut lb_decision,
    delay_ns_out: *mut u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live request (one thread at a time), a NULL or live
        // lease of it, `outcome` NULL or readable and the outputs NULL or writable.
        let (request, open, info, decision_out, delay_out) = unsafe {
            (
                try_mut(request)?,
                try_ref(lease.cast_const())?,
                *outcome.as_ref().ok_or(lb_result::NullParameter)?,
                try_out(decision_out)?,
                crate::ptr::opt_out(delay_ns_out),
            )
        };
        // Checked before the lease is taken: on any error it stays the caller's.
        let outcome = outcome_of(info, || Some(open.elapsed()))?;
        // SAFETY: non-NULL and live (read above); lb.h forbids using it after this call.
        let lease = unsafe { take_handle(lease) };
        let (decision, delay) = match request.finish(lease, outcome) {
            Decision::Done => (LB_DECISION_DONE, 0),
            Decision::Retry(delay) => (LB_DECISION_RETRY, nanos(delay)),
            Decision::Stop(_) => (LB_DECISION_STOP, 0),
            Decision::Wait => (LB_DECISION_WAIT, 0),
        };
        decision_out.write(decision);
        if let Some(out) = delay_out {
            out.write(delay);
        }
        Ok(())
    }
}

/// Cancels `lease`, an attempt of this request (a hedge that lost the race, or an attempt you
/// abandon): nothing is counted, and the lease is freed. A NULL lease is fine.
/// Errors: `LB_RESULT_NULL_PARAMETER` (NULL request; the lease is then untouched).
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_cancel(request: *mut lb_request, lease: *mut lb_lease) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live request (one thread at a time) and a NULL or
        // live lease of it, not used after this call.
        let request = unsafe { try_mut(request) }?;
        if !lease.is_null() {
            // SAFETY: as above.
            request.cancel(unsafe { take_handle(lease) });
        }
        Ok(())
    }
}

/// The request's state in `*info_out`: attempts, winner, whether it is over and why it gave
/// up, the last backoff and the time left. Errors: `LB_RESULT_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_request_state(
    request: *const lb_request,
    info_out: *mut lb_request_info,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live request and a NULL or writable output.
    ffi_panic_boundary!(unsafe {
        read_into(request, info_out, |request| lb_request_info {
            attempts: request.attempts(),
            winner: request.winner().unwrap_or(0),
            over: request.is_over(),
            stopped: stop_code(request.stopped()),
            backoff_ns: nanos(request.backoff()),
            remaining_ns: request.remaining().map_or(LB_LATENCY_NONE, nanos),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::{lb_balancer_free, lb_balancer_new, lb_balancer_stats, lb_lease_node};
    use crate::budget::{lb_retry_budget_free, lb_retry_budget_new};
    use crate::outcome::{
        LB_OUTCOME_ERROR, LB_OUTCOME_OVERLOADED, LB_OUTCOME_SUCCESS, LB_OUTCOME_TIMEOUT,
    };
    use crate::{lb_node, lb_node_stats};
    use core::ffi::CStr;
    use core::ptr::{null, null_mut};

    const MS: u64 = 1_000_000;

    fn balancer(algorithm: &str, ids: &[&str]) -> *mut lb_balancer {
        let nodes: Vec<lb_node> = ids
            .iter()
            .map(|id| lb_node {
                id: id.as_ptr().cast(),
                id_len: id.len(),
                weight: 1,
                tag: 0,
            })
            .collect();
        let mut b = null_mut();
        let r = lb_balancer_new(
            algorithm.as_ptr().cast(),
            algorithm.len(),
            null(),
            nodes.as_ptr(),
            nodes.len(),
            &mut b,
        );
        assert_eq!(r, lb_result::Ok);
        b
    }

    fn request(b: *const lb_balancer, key: Option<&str>) -> *mut lb_request {
        let (key, len) = key.map_or((null(), 0), |k| (k.as_ptr().cast(), k.len()));
        let mut r = null_mut();
        assert_eq!(lb_request_new(b, key, len, &mut r), lb_result::Ok);
        r
    }

    fn attempt(r: *mut lb_request) -> Option<(*mut lb_lease, String)> {
        let mut lease = null_mut();
        assert_eq!(lb_request_attempt(r, &mut lease), lb_result::Ok);
        (!lease.is_null()).then(|| (lease, id(lease)))
    }

    fn id(lease: *mut lb_lease) -> String {
        let mut buf = [0 as core::ffi::c_char; 16];
        let mut size = 0;
        let r = lb_lease_node(lease, null_mut(), buf.as_mut_ptr(), buf.len(), &mut size);
        assert_eq!(r, lb_result::Ok);
        // SAFETY: lb_lease_node wrote a NUL-terminated id.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_str()
            .unwrap()
            .into()
    }

    fn outcome(outcome: u32, latency_ns: u64, retry_after_ns: u64) -> lb_outcome_info {
        lb_outcome_info {
            outcome,
            latency_ns,
            retry_after_ns,
        }
    }

    fn finish(r: *mut lb_request, lease: *mut lb_lease, info: lb_outcome_info) -> (u32, u64) {
        let (mut decision, mut delay) = (u32::MAX, u64::MAX);
        let result = lb_request_finish(r, lease, &info, &mut decision, &mut delay);
        assert_eq!(result, lb_result::Ok);
        (decision, delay)
    }

    fn state(r: *const lb_request) -> lb_request_info {
        let mut info = lb_request_info::default();
        assert_eq!(lb_request_state(r, &mut info), lb_result::Ok);
        info
    }

    fn in_flight(b: *const lb_balancer) -> usize {
        let mut stats: [core::mem::MaybeUninit<lb_node_stats>; 8] =
            [const { core::mem::MaybeUninit::uninit() }; 8];
        let mut ids = [0 as core::ffi::c_char; 64];
        let (mut count, mut size) = (0, 0);
        let r = lb_balancer_stats(
            b,
            stats.as_mut_ptr().cast(),
            stats.len(),
            ids.as_mut_ptr(),
            ids.len(),
            &mut count,
            &mut size,
        );
        assert_eq!(r, lb_result::Ok);
        // SAFETY: lb_balancer_stats wrote the first `count` entries.
        (0..count)
            .map(|i| unsafe { stats[i].assume_init_ref() }.in_flight)
            .sum()
    }

    fn err() -> lb_outcome_info {
        outcome(LB_OUTCOME_ERROR, MS, LB_LATENCY_NONE)
    }

    #[test]
    fn a_failed_attempt_is_retried_on_another_node_after_a_backoff() {
        let b = balancer("source_hash", &["a", "b", "c"]);
        let r = request(b, Some("user-42"));
        let (first, a) = attempt(r).unwrap();
        let (decision, delay) = finish(r, first, err());
        assert_eq!(decision, LB_DECISION_RETRY);
        assert!(
            delay < 25 * MS,
            "Envoy's first backoff is below its 25 ms base: {delay}"
        );
        let (second, b_id) = attempt(r).unwrap();
        assert_ne!(a, b_id);
        assert_eq!(in_flight(b), 1);
        let ok = outcome(LB_OUTCOME_SUCCESS, LB_LATENCY_NONE, LB_LATENCY_NONE);
        assert_eq!(finish(r, second, ok), (LB_DECISION_DONE, 0));
        let info = state(r);
        assert_eq!((info.attempts, info.winner, info.over), (2, 2, true));
        assert_eq!(
            (info.stopped, info.backoff_ns, info.remaining_ns),
            (LB_STOP_NONE, delay, LB_LATENCY_NONE)
        );
        assert!(attempt(r).is_none(), "over: no more attempts");
        assert_eq!(in_flight(b), 0);
        lb_request_free(r);
        lb_balancer_free(b);
    }

    #[test]
    fn the_request_outlives_its_balancer_handle() {
        let b = balancer("round_robin", &["a", "b"]);
        let r = request(b, None);
        lb_balancer_free(b);
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_RETRY);
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_STOP);
        assert_eq!(state(r).stopped, LB_STOP_NO_MORE_NODES);
        lb_request_free(r);
    }

    #[test]
    fn a_budget_set_on_the_balancer_limits_its_requests_and_outlives_the_callers_handle() {
        let b = balancer("round_robin", &["a", "b", "c"]);
        let mut budget = null_mut();
        // No reserve and no share of requests: no retry is ever allowed.
        assert_eq!(
            lb_retry_budget_new(1000, 0, 0.0, lb_now_ns(), &mut budget),
            lb_result::Ok
        );
        assert_eq!(lb_balancer_set_retry_budget(b, budget), lb_result::Ok);
        lb_retry_budget_free(budget);
        let r = request(b, None);
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()), (LB_DECISION_STOP, 0));
        assert_eq!(state(r).stopped, LB_STOP_BUDGET);
        lb_request_free(r);
        // Without a budget for this request, it retries.
        let r = request(b, None);
        assert_eq!(lb_request_clear_budget(r), lb_result::Ok);
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_RETRY);
        lb_request_free(r);
        // Nor for later ones once the balancer's is cleared.
        assert_eq!(lb_balancer_clear_budget(b), lb_result::Ok);
        let r = request(b, None);
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_RETRY);
        lb_request_free(r);
        assert_eq!(
            lb_balancer_set_retry_budget(b, null()),
            lb_result::NullParameter
        );
        assert_eq!(
            lb_balancer_set_retry_budget(null(), null()),
            lb_result::NullParameter
        );
        lb_balancer_free(b);
    }

    #[test]
    fn policy_setters_check_their_values_and_leave_the_request_unchanged_on_error() {
        let b = balancer("round_robin", &["a", "b", "c", "d"]);
        let r = request(b, None);
        assert_eq!(
            lb_request_set_max_attempts(r, 0),
            lb_result::InvalidOptionValue
        );
        assert_eq!(
            lb_request_set_max_attempts(r, 101),
            lb_result::InvalidOptionValue
        );
        assert_eq!(lb_request_set_retry_on(r, 8), lb_result::InvalidOptionValue);
        assert_eq!(
            lb_request_set_max_attempts(null_mut(), 2),
            lb_result::NullParameter
        );
        // Still 3 attempts, every kind retried.
        for kind in [LB_OUTCOME_ERROR, LB_OUTCOME_TIMEOUT] {
            let (lease, _) = attempt(r).unwrap();
            let (decision, _) = finish(r, lease, outcome(kind, MS, LB_LATENCY_NONE));
            assert_eq!(decision, LB_DECISION_RETRY);
        }
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_STOP);
        assert_eq!(state(r).stopped, LB_STOP_MAX_ATTEMPTS);
        lb_request_free(r);

        let r = request(b, None);
        assert_eq!(
            lb_request_set_retry_on(r, LB_RETRY_ON_TIMEOUT),
            lb_result::Ok
        );
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_STOP);
        assert_eq!(state(r).stopped, LB_STOP_NOT_RETRYABLE);
        lb_request_free(r);

        let r = request(b, None);
        assert_eq!(lb_request_set_deadline(r, 0), lb_result::Ok);
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_STOP);
        let info = state(r);
        assert_eq!((info.stopped, info.remaining_ns), (LB_STOP_DEADLINE, 0));
        lb_request_free(r);

        let r = request(b, None);
        assert_eq!(lb_request_set_max_attempts(r, 1), lb_result::Ok);
        let (lease, _) = attempt(r).unwrap();
        assert_eq!(finish(r, lease, err()).0, LB_DECISION_STOP);
        lb_request_free(r);
        lb_balancer_free(b);
    }

    #[test]
    fn an_overloaded_answer_waits_its_retry_after_and_bad_outcomes_leave_the_lease() {
        let b = balancer("round_robin", &["a", "b"]);
        let r = request(b, None);
        let (lease, _) = attempt(r).unwrap();
        let (mut decision, mut delay) = (u32::MAX, u64::MAX);
        let bad = outcome(LB_OUTCOME_SUCCESS, MS, 5 * MS);
        let result = lb_request_finish(r, lease, &bad, &mut decision, &mut delay);
        assert_eq!(result, lb_result::InvalidOutcome);
        assert_eq!((decision, delay), (u32::MAX, u64::MAX), "nothing written");
        let result = lb_request_finish(r, lease, null(), &mut decision, null_mut());
        assert_eq!(result, lb_result::NullParameter);
        let busy = outcome(LB_OUTCOME_OVERLOADED, MS, 700 * MS);
        // The lease is still open and still the request's.
        assert_eq!(in_flight(b), 1);
        assert_eq!(finish(r, lease, busy), (LB_DECISION_RETRY, 700 * MS));
        lb_request_free(r);
        lb_balancer_free(b);
    }

    #[test]
    fn errors_of_the_balancer_leave_the_request_as_it_was() {
        let b = balancer("source_hash", &["a", "b"]);
        let r = request(b, None);
        let mut lease = null_mut();
        assert_eq!(lb_request_attempt(r, &mut lease), lb_result::KeyRequired);
        assert!(lease.is_null());
        assert_eq!(state(r).attempts, 0);
        assert_eq!(lb_request_attempt(r, null_mut()), lb_result::NullParameter);
        assert_eq!(
            lb_request_attempt(null_mut(), &mut lease),
            lb_result::NullParameter
        );
        lb_request_free(r);
        lb_request_free(null_mut());
        assert_eq!(
            lb_request_new(null(), null(), 0, &mut null_mut()),
            lb_result::NullParameter
        );
        lb_balancer_free(b);
    }

    #[test]
    fn a_hedge_goes_to_another_node_and_the_loser_is_cancelled_uncounted() {
        let b = balancer("round_robin", &["a", "b", "c"]);
        let mut hedging = null_mut();
        assert_eq!(lb_hedging_new_after(0, &mut hedging), lb_result::Ok);
        let r = request(b, None);
        assert_eq!(lb_request_set_hedging(r, hedging), lb_result::Ok);
        lb_hedging_free(hedging);
        let mut after = u64::MAX;
        assert_eq!(lb_request_hedge_after(r, &mut after), lb_result::Ok);
        assert_eq!(after, LB_LATENCY_NONE, "no attempt out yet");
        let (first, a) = attempt(r).unwrap();
        // Hedging and budgets are set before the first attempt only.
        assert_eq!(
            lb_request_set_hedging(r, null()),
            lb_result::InvalidOptionValue
        );
        assert_eq!(lb_request_clear_budget(r), lb_result::InvalidOptionValue);
        assert_eq!(lb_request_hedge_after(r, &mut after), lb_result::Ok);
        assert_eq!(after, 0);
        let mut hedge = null_mut();
        assert_eq!(lb_request_hedge(r, &mut hedge), lb_result::Ok);
        assert!(!hedge.is_null());
        assert_ne!(id(hedge), a);
        assert_eq!(in_flight(b), 2);
        let ok = outcome(LB_OUTCOME_SUCCESS, MS, LB_LATENCY_NONE);
        assert_eq!(finish(r, hedge, ok), (LB_DECISION_DONE, 0));
        assert_eq!(lb_request_cancel(r, first), lb_result::Ok);
        assert_eq!(lb_request_cancel(r, null_mut()), lb_result::Ok);
        assert_eq!((state(r).winner, in_flight(b)), (2, 0));
        lb_request_free(r);
        let mut bad = null_mut();
        let result = lb_hedging_new_percentile(1.0, 0, &mut bad);
        assert_eq!(
            (result, bad.is_null()),
            (lb_result::InvalidOptionValue, true)
        );
        assert_eq!(
            lb_hedging_new_percentile(0.01, lb_now_ns(), &mut bad),
            lb_result::Ok
        );
        lb_hedging_free(bad);
        lb_balancer_free(b);
    }

    #[test]
    fn stop_names_match_the_core_and_the_clock_is_the_balancers() {
        for (i, name) in Stop::NAMES.iter().enumerate() {
            // SAFETY: lb_stop_name returns static NUL-terminated strings.
            let got = unsafe { CStr::from_ptr(lb_stop_name(i as u32 + 1)) };
            assert_eq!(got.to_str().unwrap(), *name);
            assert_eq!(stop_code(Some(Stop::ALL[i])), i as u32 + 1);
        }
        let name = |code| {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(lb_stop_name(code)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(
            (name(0), name(7), name(u32::MAX)),
            ("none", "unknown", "unknown")
        );
        let b = balancer("round_robin", &["a"]);
        let before = lb_now_ns();
        let mut now = 0;
        assert_eq!(crate::lb_balancer_now_ns(b, &mut now), lb_result::Ok);
        assert!(before <= now && now <= lb_now_ns());
        lb_balancer_free(b);
    }
}
