//! Retry budgets and throttles behind opaque handles: `lb_retry_budget` (tower's `TpsBudget`),
//! `lb_retry_throttle` (gRPC A6) and `lb_adaptive_throttle` (the SRE book's client-side
//! throttling), the core's `liblb_core::{RetryBudget, RetryThrottle, AdaptiveThrottle}`.
//!
//! Each is clocked by the caller: every call that reads time takes `now_ns`, the same clock for
//! one object's whole life, never going back. So the same calls give the same answers in every
//! language (the conformance vectors replay them). Give one to balancers
//! (`lb_balancer_set_retry_budget` and its siblings) or requests (`lb_request_set_retry_budget`)
//! and they feed it liblb's clock, `lb_now_ns()`: use that clock for such an object's own
//! calls too (and for its `_new`). One used only around your own retry loop may take any
//! monotonic clock (`clock_gettime(CLOCK_MONOTONIC)`). Every function taking a `const` handle
//! is thread-safe and never blocks: one object may be shared by every thread and every balancer
//! whose retries should share one limit. The handles are shared: `_free` gives up the caller's
//! reference, and balancers and requests holding the object keep theirs.

use crate::lb_result;
use crate::panic::ffi_panic_boundary;
use crate::ptr::{
    Castable, Shared, free_shared_handle, read_into, to_shared_handle, try_out, try_ref,
};
use core::time::Duration;
use liblb_core::{AdaptiveThrottle, RetryBudget, RetryThrottle};

/// A retry budget (tower's `TpsBudget`, Finagle's `RetryBudget`): every request deposits,
/// every retry withdraws; deposits count for `ttl`, and `min_per_sec` retries per second are
/// always allowed. Create with `lb_retry_budget_new`, free with `lb_retry_budget_free`.
/// Thread-safe: any number of threads may use one budget at once.
pub struct lb_retry_budget {
    _private: [u8; 0],
}

impl Shared for lb_retry_budget {}

impl Castable for lb_retry_budget {
    type Rust = RetryBudget;
}

/// gRPC's retry throttling (gRFC A6): a token count starting at `max_tokens`, one less per
/// failure, `token_ratio` more per success (capped); retries and hedges are refused while it is
/// at or below `max_tokens / 2`. Create with `lb_retry_throttle_new`, free with
/// `lb_retry_throttle_free`. Thread-safe.
pub struct lb_retry_throttle {
    _private: [u8; 0],
}

impl Shared for lb_retry_throttle {}

impl Castable for lb_retry_throttle {
    type Rust = RetryThrottle;
}

/// Client-side adaptive throttling (Google SRE book, chapter 21): over a sliding window the
/// client counts the requests it attempted and those the backends accepted, and rejects a new
/// request locally with probability `max(0, (requests - k * accepts) / (requests + 1))`.
/// Create with `lb_adaptive_throttle_new`, free with `lb_adaptive_throttle_free`. Thread-safe.
pub struct lb_adaptive_throttle {
    _private: [u8; 0],
}

impl Shared for lb_adaptive_throttle {}

impl Castable for lb_adaptive_throttle {
    type Rust = AdaptiveThrottle;
}

// Shared by threads and freed on any thread: the values behind the handles must stay so.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RetryBudget>();
    assert_send_sync::<RetryThrottle>();
    assert_send_sync::<AdaptiveThrottle>();
};

/// Creates a retry budget in `*budget_out`, its clock starting at `now_ns` (`lb_now_ns()` if it
/// will be given to balancers or requests, which feed it that clock): deposits count for
/// `ttl_ms` milliseconds (1000 to 60000; tower's default 10000), `min_per_sec` retries per
/// second are always allowed (below 2147483647; default 10), and each deposit allows
/// `retry_percent` retries (0 to 1000; default 0.2 = one retry per five requests; 0 = only the
/// reserve).
///
/// The caller owns the result and must free it with `lb_retry_budget_free`. Errors (nothing
/// allocated, `*budget_out` unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_OPTION_VALUE` (a value out of range; NaN is). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_budget_new(
    ttl_ms: u64,
    min_per_sec: u32,
    retry_percent: f64,
    now_ns: u64,
    budget_out: *mut *mut lb_retry_budget,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `budget_out` NULL or valid for one write.
        let out = unsafe { try_out(budget_out) }?;
        let ttl = Duration::from_millis(ttl_ms);
        out.write(to_shared_handle(RetryBudget::new(ttl, min_per_sec, retry_percent, now_ns)?));
        Ok(())
    }
}

/// Gives up the caller's reference to a retry budget (balancers and requests using it keep
/// theirs; it is freed with the last). Calling with NULL is fine. Do not use the handle again.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_budget_free(budget: *mut lb_retry_budget) {
    // SAFETY: lb.h requires a NULL or live handle from `lb_retry_budget_new`, freed once.
    ffi_panic_boundary!(unsafe { free_shared_handle(budget) })
}

/// Records a request (a first attempt) at `now_ns`. Errors: `LB_RESULT_NULL_PARAMETER`.
/// Thread-safe; never blocks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_budget_deposit(
    budget: *const lb_retry_budget,
    now_ns: u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle.
        unsafe { try_ref(budget) }?.deposit(now_ns);
        Ok(())
    }
}

/// Takes one retry from the budget at `now_ns`: `*allowed_out` = whether it may be sent (if
/// so, it was taken). Errors: `LB_RESULT_NULL_PARAMETER` (then nothing was taken).
/// Thread-safe; never blocks (two threads racing for the last retry may both get it, as in
/// tower).
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_budget_withdraw(
    budget: *const lb_retry_budget,
    now_ns: u64,
    allowed_out: *mut bool,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe { read_into(budget, allowed_out, |budget| budget.withdraw(now_ns)) })
}

/// Whether a retry could be withdrawn at `now_ns`, without taking it, in `*allowed_out`.
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_budget_can_withdraw(
    budget: *const lb_retry_budget,
    now_ns: u64,
    allowed_out: *mut bool,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe {
        read_into(budget, allowed_out, |budget| budget.can_withdraw(now_ns))
    })
}

/// The retries available at `now_ns` in `*available_out`. Errors: `LB_RESULT_NULL_PARAMETER`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_budget_available(
    budget: *const lb_retry_budget,
    now_ns: u64,
    available_out: *mut u64,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe {
        read_into(budget, available_out, |budget| budget.available(now_ns))
    })
}

/// Creates a retry throttle in `*throttle_out` with `max_tokens` tokens (1 to 1000) that
/// regains `token_ratio` per success (at least 0.001; digits past the third decimal are
/// dropped, as gRFC A6 says). It starts full.
///
/// The caller owns the result and must free it with `lb_retry_throttle_free`. Errors (nothing
/// allocated): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_OPTION_VALUE`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_throttle_new(
    max_tokens: u32,
    token_ratio: f64,
    throttle_out: *mut *mut lb_retry_throttle,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `throttle_out` NULL or valid for one write.
        let out = unsafe { try_out(throttle_out) }?;
        out.write(to_shared_handle(RetryThrottle::new(max_tokens, token_ratio)?));
        Ok(())
    }
}

/// Gives up the caller's reference to a retry throttle (balancers and requests using it keep
/// theirs). Calling with NULL is fine. Do not use the handle again.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_throttle_free(throttle: *mut lb_retry_throttle) {
    // SAFETY: lb.h requires a NULL or live handle from `lb_retry_throttle_new`, freed once.
    ffi_panic_boundary!(unsafe { free_shared_handle(throttle) })
}

/// Records a failed attempt (one token less, not below 0); `*allowed_out` (NULL: not wanted)
/// = whether retries are still allowed after it. Errors: `LB_RESULT_NULL_PARAMETER` (NULL
/// throttle; nothing recorded). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_throttle_failure(
    throttle: *const lb_retry_throttle,
    allowed_out: *mut bool,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
        let (throttle, out) = unsafe { (try_ref(throttle)?, crate::ptr::opt_out(allowed_out)) };
        let allowed = throttle.failure();
        if let Some(out) = out {
            out.write(allowed);
        }
        Ok(())
    }
}

/// Records a successful attempt (`token_ratio` tokens more, capped at `max_tokens`). Errors:
/// `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_throttle_success(throttle: *const lb_retry_throttle) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle.
        unsafe { try_ref(throttle) }?.success();
        Ok(())
    }
}

/// Whether a retry or a hedge may be sent now (more than `max_tokens / 2` tokens), in
/// `*allowed_out`. Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_throttle_allows(
    throttle: *const lb_retry_throttle,
    allowed_out: *mut bool,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe { read_into(throttle, allowed_out, |throttle| throttle.allows()) })
}

/// The token count (with its thousandths) in `*tokens_out`. Errors: `LB_RESULT_NULL_PARAMETER`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_throttle_tokens(
    throttle: *const lb_retry_throttle,
    tokens_out: *mut f64,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe { read_into(throttle, tokens_out, |throttle| throttle.tokens()) })
}

/// Creates an adaptive throttle in `*throttle_out`, its clock starting at `now_ns`
/// (`lb_now_ns()` if it will be given to balancers or requests), with multiplier `k` (1 to 100,
/// the SRE book's 2: lower throttles sooner) over a window of `window_ms` milliseconds (1000 to
/// 3600000; the book's 120000).
///
/// The caller owns the result and must free it with `lb_adaptive_throttle_free`. Errors
/// (nothing allocated): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_OPTION_VALUE`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_adaptive_throttle_new(
    k: f64,
    window_ms: u64,
    now_ns: u64,
    throttle_out: *mut *mut lb_adaptive_throttle,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `throttle_out` NULL or valid for one write.
        let out = unsafe { try_out(throttle_out) }?;
        let window = Duration::from_millis(window_ms);
        out.write(to_shared_handle(AdaptiveThrottle::new(k, window, now_ns)?));
        Ok(())
    }
}

/// Gives up the caller's reference to an adaptive throttle (balancers and requests using it
/// keep theirs). Calling with NULL is fine. Do not use the handle again.
#[unsafe(no_mangle)]
pub extern "C" fn lb_adaptive_throttle_free(throttle: *mut lb_adaptive_throttle) {
    // SAFETY: lb.h requires a NULL or live handle from `lb_adaptive_throttle_new`, freed once.
    ffi_panic_boundary!(unsafe { free_shared_handle(throttle) })
}

/// The probability that `lb_adaptive_throttle_admit` rejects a request at `now_ns`, in
/// `*rejection_out`. Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_adaptive_throttle_rejection(
    throttle: *const lb_adaptive_throttle,
    now_ns: u64,
    rejection_out: *mut f64,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe {
        read_into(throttle, rejection_out, |throttle| {
            throttle.rejection(now_ns)
        })
    })
}

/// A request is about to be sent at `now_ns`: decides with `random` (64 uniformly random bits
/// of yours) whether to send it (`*admitted_out` true) or reject it locally (false), then
/// counts it. Errors: `LB_RESULT_NULL_PARAMETER` (nothing counted). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_adaptive_throttle_admit(
    throttle: *const lb_adaptive_throttle,
    now_ns: u64,
    random: u64,
    admitted_out: *mut bool,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe {
        read_into(throttle, admitted_out, |throttle| {
            throttle.admit(now_ns, random)
        })
    })
}

/// A backend accepted a request at `now_ns` (any answer but an overload refusal). Errors:
/// `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_adaptive_throttle_accepted(
    throttle: *const lb_adaptive_throttle,
    now_ns: u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle.
        unsafe { try_ref(throttle) }?.accepted(now_ns);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ptr::{null, null_mut};

    /// Every export through raw pointers as C calls them (also under Miri): outputs written
    /// only on success, NULLs refused, handles freed once.
    #[test]
    fn budgets_and_throttles_through_their_handles() {
        let mut budget = null_mut();
        let r = lb_retry_budget_new(999, 10, 0.2, 0, &mut budget);
        assert_eq!((r, budget.is_null()), (lb_result::InvalidOptionValue, true));
        assert_eq!(
            lb_retry_budget_new(1000, 1, 1.0, 0, null_mut()),
            lb_result::NullParameter
        );
        assert_eq!(
            lb_retry_budget_new(1000, 1, 1.0, 0, &mut budget),
            lb_result::Ok
        );
        let (mut allowed, mut available) = (false, u64::MAX);
        assert_eq!(
            lb_retry_budget_available(budget, 0, &mut available),
            lb_result::Ok
        );
        assert_eq!(available, 1);
        assert_eq!(
            lb_retry_budget_withdraw(budget, 0, &mut allowed),
            lb_result::Ok
        );
        assert!(allowed);
        assert_eq!(
            lb_retry_budget_can_withdraw(budget, 0, &mut allowed),
            lb_result::Ok
        );
        assert!(!allowed);
        assert_eq!(lb_retry_budget_deposit(budget, 1), lb_result::Ok);
        assert_eq!(
            lb_retry_budget_withdraw(budget, 2, &mut allowed),
            lb_result::Ok
        );
        assert!(allowed);
        assert_eq!(lb_retry_budget_deposit(null(), 0), lb_result::NullParameter);
        let r = lb_retry_budget_withdraw(budget, 0, null_mut());
        assert_eq!(r, lb_result::NullParameter);
        lb_retry_budget_free(budget);
        lb_retry_budget_free(null_mut());

        let mut throttle = null_mut();
        let r = lb_retry_throttle_new(0, 0.5, &mut throttle);
        assert_eq!(
            (r, throttle.is_null()),
            (lb_result::InvalidOptionValue, true)
        );
        assert_eq!(lb_retry_throttle_new(2, 0.5, &mut throttle), lb_result::Ok);
        assert_eq!(
            lb_retry_throttle_failure(throttle, &mut allowed),
            lb_result::Ok
        );
        assert!(!allowed, "1 of 2 tokens left: at half, refused");
        assert_eq!(lb_retry_throttle_success(throttle), lb_result::Ok);
        let mut tokens = 0.0;
        assert_eq!(
            lb_retry_throttle_tokens(throttle, &mut tokens),
            lb_result::Ok
        );
        assert_eq!(tokens, 1.5);
        assert_eq!(
            lb_retry_throttle_allows(throttle, &mut allowed),
            lb_result::Ok
        );
        assert!(allowed);
        assert_eq!(
            lb_retry_throttle_failure(throttle, null_mut()),
            lb_result::Ok
        );
        assert_eq!(lb_retry_throttle_success(null()), lb_result::NullParameter);
        lb_retry_throttle_free(throttle);

        let mut adaptive = null_mut();
        let r = lb_adaptive_throttle_new(2.0, 999, 0, &mut adaptive);
        assert_eq!(
            (r, adaptive.is_null()),
            (lb_result::InvalidOptionValue, true)
        );
        assert_eq!(
            lb_adaptive_throttle_new(2.0, 1000, 0, &mut adaptive),
            lb_result::Ok
        );
        // Nothing is rejected below the 100-request minimum; then the SRE book's formula.
        let mut admitted = false;
        for _ in 0..100 {
            let r = lb_adaptive_throttle_admit(adaptive, 0, u64::MAX, &mut admitted);
            assert_eq!((r, admitted), (lb_result::Ok, true));
        }
        let mut p = -1.0;
        assert_eq!(
            lb_adaptive_throttle_rejection(adaptive, 0, &mut p),
            lb_result::Ok
        );
        assert_eq!(p, 100.0 / 101.0);
        for _ in 0..51 {
            assert_eq!(lb_adaptive_throttle_accepted(adaptive, 0), lb_result::Ok);
        }
        assert_eq!(
            lb_adaptive_throttle_rejection(adaptive, 0, &mut p),
            lb_result::Ok
        );
        assert_eq!(p, 0.0);
        let r = lb_adaptive_throttle_admit(null(), 0, 0, &mut admitted);
        assert_eq!(r, lb_result::NullParameter);
        lb_adaptive_throttle_free(adaptive);
    }
}
