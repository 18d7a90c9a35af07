//! `lb_options`: balancer options built up by name, exactly like the core's `Options::set`, so
//! C rejects unknown names and ill-typed values with the same specific errors as every binding.

use crate::lb_result;
use crate::panic::ffi_panic_boundary;
use crate::ptr::{Castable, free_handle, to_handle, try_mut, try_out, try_str};
use core::ffi::c_char;
use liblb_core::{OptionValue, Options};

/// Options for `lb_balancer_new`, set by name. Create with `lb_options_new`, set with
/// `lb_options_set_int` / `lb_options_set_str`, free with `lb_options_free`. A balancer
/// copies the options it is built with, so they can be freed (or reused) right after
/// `lb_balancer_new`. Setters need exclusive access; `lb_balancer_new` only reads them.
///
/// Every option (defaults in brackets; `docs/c.md`, `docs/health.md` and `docs/algorithms.md`
/// say more):
///
/// - `seed`: any 64-bit integer [none: OS entropy];
/// - `vnodes`: ring points per unit of weight, 1..=65536 [160];
/// - `hash`: text, `"sha256"` or `"xxh3"` [the algorithm's own];
/// - `choice_count`: `least_request` candidates, 2..=16 [2];
/// - `decay_ms`: peak-EWMA decay, >= 1 [10000]; `initial_latency_ms` [30];
/// - `table_size`: `maglev` table, a prime up to 5000011 [65537];
/// - `min_ring_size`, `max_ring_size`: `ring_hash` ring, 1..=8388608, min <= max [1024, 8388608];
/// - `max_ring_points`: `ring`'s point budget, heavier rings scaled down to it, 1..=4194304
///   [4194304];
/// - `consecutive_failures`: failures that eject a node, 0 = never [5];
/// - `base_ejection_time_ms`: >= 1, times the number of ejections [30000];
/// - `max_ejection_time_ms`: >= `base_ejection_time_ms` [300000, or the base if longer];
/// - `max_ejection_percent`, `panic_threshold`, `min_weight_percent`: 0..=100 [10, 50, 10];
/// - `slow_start_window_ms`: 0 = no slow start [0];
/// - `slow_start_aggression`: a number > 0, as text for fractions (`"1.5"`) [1.0];
/// - `hash_balance_factor`: bounded loads, 0 = off or >= 100 [0];
/// - `thread_rounds`: 0..=1048576 [0];
/// - `failure_penalty_ms`: the least a failure counts in the latency estimate, 0 = off [5000];
/// - `max_retry_after_ms`: the longest an overloaded node's retry-after pauses it, 0 = no
///   pauses [60000];
/// - success-rate and failure-percentage ejection: see `docs/health.md`;
/// - priority levels and localities (`docs/localities.md`): `overprovisioning_factor` >= 1
///   [140], `zone_aware_min_cluster_size` [6], `zone_aware_routing_enabled` 0..=100 [100],
///   `zone_aware_by_weight` 0 or 1 [0];
/// - `client_side_wrr` (server-reported load, gRFC A58): `blackout_period_ms`, 0 = none
///   [10000]; `weight_expiration_period_ms` >= 1 [180000]; `weight_update_period_ms`, below
///   100 counts as 100 [1000]; `error_utilization_penalty` >= 0, as text for fractions
///   (`"0.5"`) [1.0];
/// - subsetting (`docs/subsetting.md`; unkeyed algorithms only, `lb_balancer_subset` lists the
///   subset): `subset`, text, `"deterministic"`, `"random"`, `"ringsteady"` or `"aperture"`
///   [none: every node]; `subset_size` >= 1, required with `subset`; `client_index`, below
///   `client_count` [0]; `client_count` >= 1 [1]; `subset_seed`, any 64-bit integer [derived
///   from `seed`, else for `random` drawn from OS entropy when the balancer is made].
///
/// A setter checks only its own option, so options may be set in any order; the rules between
/// options (min/max ring size, base/max ejection time, `subset` with `subset_size`,
/// `client_index` below `client_count`, `subset` with a keyed algorithm) are checked by
/// `lb_balancer_new`.
pub struct lb_options {
    _private: [u8; 0],
}

impl crate::ptr::Boxed for lb_options {}

impl Castable for lb_options {
    type Rust = Options;
}

/// Creates default options (no seed: random algorithms seed from OS entropy; vnodes 160; each
/// algorithm's default hash) in `*options_out`. The caller owns the result and must free it
/// with `lb_options_free`. Errors: `LB_RESULT_NULL_PARAMETER` if `options_out` is NULL (then
/// nothing is allocated). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_options_new(options_out: *mut *mut lb_options) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: C promises `options_out` is NULL or valid for one write (lb.h).
        let out = unsafe { try_out(options_out) }?;
        out.write(to_handle(Options::default()));
        Ok(())
    }
}

/// Frees options made by `lb_options_new`. Calling with NULL is fine. No other thread may be
/// using the options, and they must not be used afterwards; balancers built from them are not
/// affected (each keeps its own copy).
#[unsafe(no_mangle)]
pub extern "C" fn lb_options_free(options: *mut lb_options) {
    // SAFETY: C promises `options` is NULL or a live handle from `lb_options_new`, freed once.
    ffi_panic_boundary!(unsafe { free_handle(options) })
}

/// Sets an integer option: any option of `lb_options` but `hash` and `subset` (`seed` and
/// `subset_seed` take any value, the others their ranges listed there). `name` is `name_len`
/// bytes of UTF-8, not necessarily NUL-terminated. Only this option's own range is checked here; rules between options are
/// checked by `lb_balancer_new`.
///
/// Errors (the options are then unchanged): `LB_RESULT_NULL_PARAMETER` (NULL `options`, or
/// NULL `name` with a non-zero length), `LB_RESULT_INVALID_LENGTH` (`name_len` above
/// `PTRDIFF_MAX`), `LB_RESULT_INVALID_UTF8`, `LB_RESULT_UNKNOWN_OPTION` (a name not listed at
/// `lb_options`), `LB_RESULT_INVALID_VNODES`, `LB_RESULT_INVALID_OPTION_VALUE` (an integer for
/// `hash` or `subset`, or a value out of the option's range). Not thread-safe for the same
/// `options`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_options_set_int(
    options: *mut lb_options,
    name: *const c_char,
    name_len: usize,
    value: u64,
) -> lb_result {
    ffi_panic_boundary!(options_set(options, name, name_len, || Ok(
        OptionValue::Int(value)
    )))
}

/// Sets an option from text: `hash` (`"sha256"` or `"xxh3"`), `subset` (`"random"`, ...),
/// `slow_start_aggression` as a
/// decimal number (`"1.5"`), or any integer option as decimal text. `name` and `value` are UTF-8 of the given lengths, not necessarily NUL-terminated.
///
/// Errors (the options are then unchanged): `LB_RESULT_NULL_PARAMETER` (NULL `options`, or
/// NULL `name` or `value` with a non-zero length), `LB_RESULT_INVALID_LENGTH` (`name_len` or
/// `value_len` above `PTRDIFF_MAX`), `LB_RESULT_INVALID_UTF8`, `LB_RESULT_UNKNOWN_OPTION`,
/// `LB_RESULT_UNKNOWN_HASH`,
/// `LB_RESULT_INVALID_VNODES`, `LB_RESULT_INVALID_OPTION_VALUE` (text that is not a number, or
/// a value out of the option's range). Not thread-safe for the same `options`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_options_set_str(
    options: *mut lb_options,
    name: *const c_char,
    name_len: usize,
    value: *const c_char,
    value_len: usize,
) -> lb_result {
    ffi_panic_boundary! {
        options_set(options, name, name_len, || {
            // SAFETY: lb.h requires `value` to be NULL or valid for `value_len` bytes.
            Ok(OptionValue::Str(unsafe { try_str(value, value_len) }?))
        })
    }
}

/// Checks every pointer, then applies `Options::set`, which leaves the options unchanged on
/// error. `value` runs after the handle and name checks, so NULL handles win over bad values.
fn options_set<'v>(
    options: *mut lb_options,
    name: *const c_char,
    name_len: usize,
    value: impl FnOnce() -> Result<OptionValue<'v>, lb_result>,
) -> Result<(), lb_result> {
    // SAFETY: lb.h requires `options` to be NULL or a live handle nobody else uses during the
    // call, and `name` NULL or valid for `name_len` bytes.
    let (options, name) = unsafe { (try_mut(options)?, try_str(name, name_len)?) };
    let value = value()?;
    Ok(options.set(name, value)?)
}
