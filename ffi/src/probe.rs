//! Prequal's probes from C (issue 25): the balancer names the nodes to probe and takes their
//! answers; the caller sends the probes (liblb does no I/O). `prequal` reads the answers; every
//! other algorithm accepts and ignores them, so a configuration can switch algorithm without
//! changing its callers.

use crate::balancer::{ids_out, write_picks};
use crate::panic::ffi_panic_boundary;
use crate::ptr::{try_out, try_out_slice, try_ref, try_str};
use crate::{lb_balancer, lb_pick, lb_result};
use core::ffi::c_char;
use core::time::Duration;

/// Up to `count` distinct nodes to probe now, uniformly at random among the nodes with a
/// positive weight (from the balancer's generator: a seeded balancer replays), into `picks_out` (room for
/// `count` entries); `*count_out` gets how many were written (fewer when the balancer has
/// fewer nodes). Ids as in `lb_balancer_pick_many`. Send each a probe and give its answer to
/// `lb_balancer_offer_probe`; `lb_balancer_probes_due` says how many the picks asked for.
///
/// Errors: `LB_RESULT_BATCH_TOO_LARGE` (`count` above `LB_MAX_BATCH`), `LB_RESULT_NULL_PARAMETER`
/// (including NULL `count_out`), `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_NO_NODES`,
/// `LB_RESULT_BUFFER_TOO_SMALL` (`*ids_size_out` = size needed; `picks_out` and `*count_out`
/// untouched, the draw made). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_probe_targets(
    balancer: *const lb_balancer,
    count: usize,
    picks_out: *mut lb_pick,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    ids_size_out: *mut usize,
    count_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        if count > crate::LB_MAX_BATCH {
            return Err(lb_result::BatchTooLarge);
        }
        // SAFETY: lb.h requires a NULL or live handle, `picks_out` writable for `count`
        // entries, `ids_buf` for `ids_buf_len` bytes, and the size outputs NULL or writable.
        let (balancer, picks_out, ids, count_out) = unsafe {
            (
                try_ref(balancer)?,
                try_out_slice(picks_out, count)?,
                ids_out(ids_buf, ids_buf_len, ids_size_out)?,
                try_out(count_out)?,
            )
        };
        let targets = balancer.probe_targets(count)?;
        write_picks(&targets, picks_out, ids)?;
        count_out.write(targets.len());
        Ok(())
    }
}

/// A probe answer from the node with this id, stamped with the balancer's clock: its requests
/// in flight (`rif`) and its latency estimate in nanoseconds, as Prequal's servers answer
/// (`lb_server_load_probe` on a liblb backend). A load report with the named metrics `rif` and
/// `latency_ms` given to `lb_balancer_report_load` or `lb_lease_finish_load` counts as one too.
///
/// Errors (nothing is recorded): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_INVALID_UTF8`, `LB_RESULT_UNKNOWN_NODE`. Thread-safe; never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_offer_probe(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    rif: u32,
    latency_ns: u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `id` valid for `id_len` bytes.
        let (balancer, id) = unsafe { (try_ref(balancer)?, try_str(id, id_len)?) };
        balancer.offer_probe(id, rif, Duration::from_nanos(latency_ns))?;
        Ok(())
    }
}

/// How many probes the picks since the last call made due (`prequal`'s `probe_rate` per pick;
/// always 0 for other algorithms), written to `*due_out`: ask `lb_balancer_probe_targets` for
/// that many. Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_probes_due(
    balancer: *const lb_balancer,
    due_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and `due_out` NULL or writable.
        let (balancer, due) = unsafe { (try_ref(balancer)?, try_out(due_out)?) };
        due.write(balancer.probes_due());
        Ok(())
    }
}
