//! liblb's C ABI: `liblb.so` / `liblb.a`, described by the generated `include/lb.h`.
//!
//! A thin layer over `liblb-core` in the style of rustls-ffi: `lb_<object>_<verb>` functions,
//! opaque handles (`lb_balancer`, `lb_options`, `lb_lease`, `lb_load_report`, `lb_server_load`) with `_new`/`_free` pairs (a lease
//! ends with `lb_lease_finish` / `lb_lease_cancel`), an [`lb_result`] code from every fallible
//! function, outputs through trailing out-pointers written only on success. Every exported
//! body runs inside a panic boundary (`panic.rs`) and every pointer is checked for NULL before
//! use (`ptr.rs`). Picks never hand C a pointer into balancer memory: they return the caller's
//! 64-bit tag and/or copy the id into a caller buffer.
//!
//! `include/lb.h` is generated from these sources by cbindgen 0.29.4 (`cbindgen.toml`); the
//! `header` test fails when it is stale and `LB_BLESS=1 cargo test -p liblb-ffi --test header`
//! rewrites it. Doc comments on exported items are the C documentation.
#![allow(non_camel_case_types)] // C type names: lb_balancer, lb_node, ...
#![warn(clippy::undocumented_unsafe_blocks)]
// The exported functions are safe `extern "C"` functions taking raw pointers from C by design
// (as in rustls-ffi): each checks its pointers through `ptr.rs`, and their contract — NULL or
// valid for the given length — is documented in lb.h. Rust code calling them through the rlib
// (tests, fuzzing) must honour the same contract.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![warn(missing_docs)]

mod balancer;
mod budget;
mod locality;
mod options;
mod orca;
mod outcome;
mod panic;
mod probe;
mod ptr;
mod request;
mod result;
mod server_load;
mod subset;
#[cfg(test)]
mod tests;

pub use balancer::{
    LB_NODE_DOWN, LB_NODE_EJECTED, LB_NODE_HEALTHY, LB_NODE_OVERLOADED, LB_NODE_WARMING,
    lb_algorithm_name, lb_balancer, lb_balancer_acquire, lb_balancer_add, lb_balancer_algorithm,
    lb_balancer_attempts, lb_balancer_attempts_hash, lb_balancer_contains, lb_balancer_free,
    lb_balancer_id_size_bound, lb_balancer_len, lb_balancer_mark_down, lb_balancer_mark_up,
    lb_balancer_new, lb_balancer_nodes, lb_balancer_now_ns, lb_balancer_panic, lb_balancer_pick,
    lb_balancer_pick_hash, lb_balancer_pick_many, lb_balancer_pick_n, lb_balancer_remove,
    lb_balancer_report, lb_balancer_set_weight, lb_balancer_stats, lb_balancer_update, lb_key,
    lb_lease, lb_lease_cancel, lb_lease_elapsed, lb_lease_finish, lb_lease_node, lb_node,
    lb_node_stats, lb_node_status, lb_pick,
};
pub use budget::{
    lb_adaptive_throttle, lb_adaptive_throttle_accepted, lb_adaptive_throttle_admit,
    lb_adaptive_throttle_free, lb_adaptive_throttle_new, lb_adaptive_throttle_rejection,
    lb_retry_budget, lb_retry_budget_available, lb_retry_budget_can_withdraw,
    lb_retry_budget_deposit, lb_retry_budget_free, lb_retry_budget_new, lb_retry_budget_withdraw,
    lb_retry_throttle, lb_retry_throttle_allows, lb_retry_throttle_failure, lb_retry_throttle_free,
    lb_retry_throttle_new, lb_retry_throttle_success, lb_retry_throttle_tokens,
};
pub use locality::{
    lb_balancer_add_located, lb_balancer_clear_local_locality, lb_balancer_located_nodes,
    lb_balancer_new_located, lb_balancer_set_local_localities, lb_balancer_set_local_locality,
    lb_balancer_set_locality_weights, lb_balancer_set_location, lb_balancer_update_located,
    lb_locality_count, lb_locality_weight, lb_located_node,
};
pub use options::{
    lb_options, lb_options_free, lb_options_new, lb_options_set_int, lb_options_set_str,
};
pub use orca::{
    LB_LOAD_NAMED_METRICS, LB_LOAD_REQUEST_COST, LB_LOAD_UTILIZATION, lb_balancer_report_load,
    lb_lease_finish_load, lb_load_entry, lb_load_report, lb_load_report_entries,
    lb_load_report_free, lb_load_report_parse, lb_load_report_values, lb_load_values,
};
pub use outcome::{
    LB_LATENCY_NONE, LB_OUTCOME_ERROR, LB_OUTCOME_FAILURE, LB_OUTCOME_OVERLOADED,
    LB_OUTCOME_SUCCESS, LB_OUTCOME_TIMEOUT, lb_balancer_report_info, lb_lease_finish_info,
    lb_outcome, lb_outcome_info,
};
pub use probe::{lb_balancer_offer_probe, lb_balancer_probe_targets, lb_balancer_probes_due};
pub use request::{
    LB_DECISION_DONE, LB_DECISION_RETRY, LB_DECISION_STOP, LB_DECISION_WAIT, LB_RETRY_ON_ERROR,
    LB_RETRY_ON_OVERLOADED, LB_RETRY_ON_TIMEOUT, LB_STOP_BUDGET, LB_STOP_DEADLINE,
    LB_STOP_MAX_ATTEMPTS, LB_STOP_NO_MORE_NODES, LB_STOP_NONE, LB_STOP_NOT_RETRYABLE,
    LB_STOP_THROTTLED, lb_balancer_clear_budget, lb_balancer_set_adaptive_throttle,
    lb_balancer_set_retry_budget, lb_balancer_set_retry_throttle, lb_decision, lb_hedging,
    lb_hedging_free, lb_hedging_new_after, lb_hedging_new_percentile, lb_now_ns, lb_request,
    lb_request_attempt, lb_request_cancel, lb_request_clear_budget, lb_request_finish,
    lb_request_free, lb_request_hedge, lb_request_hedge_after, lb_request_info, lb_request_new,
    lb_request_set_adaptive_throttle, lb_request_set_deadline, lb_request_set_hedging,
    lb_request_set_max_attempts, lb_request_set_retry_budget, lb_request_set_retry_on,
    lb_request_set_retry_throttle, lb_request_state, lb_stop, lb_stop_name,
};
pub use result::{lb_result, lb_result_name, lb_result_str};
pub use server_load::{
    LB_HEADER_BIN, LB_HEADER_TEXT, lb_server_load, lb_server_load_cancel, lb_server_load_finish,
    lb_server_load_free, lb_server_load_header, lb_server_load_in_flight, lb_server_load_new,
    lb_server_load_new_with, lb_server_load_probe, lb_server_load_report,
    lb_server_load_set_application_utilization, lb_server_load_set_cpu_utilization,
    lb_server_load_set_mem_utilization, lb_server_load_start, lb_server_request,
};
pub use subset::lb_balancer_subset;

use core::ffi::{CStr, c_char};
use panic::ffi_panic_boundary;

/// Most answers one batch call gives: `lb_balancer_pick_many` takes at most this many keys and
/// `lb_balancer_pick_n` at most this count (2^24, the most nodes a balancer holds; the same
/// limit as `liblb.MAX_BATCH` in Python and `MAX_BATCH` in Node). Larger batches fail with
/// `LB_RESULT_BATCH_TOO_LARGE` before anything is picked or allocated: split them.
pub const LB_MAX_BATCH: usize = 1 << 24;
// Written out for cbindgen; it is the core's limit.
const _: () = assert!(LB_MAX_BATCH == liblb_core::MAX_BATCH);

/// liblb's major version (the `N` of `liblb.so.N`).
pub const LB_VERSION_MAJOR: u32 = 0;
/// liblb's minor version.
pub const LB_VERSION_MINOR: u32 = 1;
/// liblb's patch version.
pub const LB_VERSION_PATCH: u32 = 0;

/// Parses a decimal version component at compile time.
const fn parse_u32(text: &str) -> u32 {
    let bytes = text.as_bytes();
    let mut value = 0;
    let mut i = 0;
    while i < bytes.len() {
        assert!(
            bytes[i].is_ascii_digit(),
            "version component is not a number"
        );
        value = value * 10 + (bytes[i] - b'0') as u32;
        i += 1;
    }
    value
}

// The header's version macros are literals (cbindgen cannot evaluate `env!`), so pin them to
// Cargo.toml here: bumping the version without updating them fails the build.
const _: () = {
    assert!(LB_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")));
    assert!(LB_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")));
    assert!(LB_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")));
};

/// The version as a NUL-terminated string.
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the version contains a NUL byte"),
    };

/// liblb's version, e.g. "0.1.0": a static NUL-terminated string (never freed). Compare with
/// `LB_VERSION_MAJOR` etc. to check that the library matches the header. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_version() -> *const c_char {
    ffi_panic_boundary!(VERSION.as_ptr())
}
