//! Subsetting from C (issue 26): the subset itself is chosen by the core from the options
//! `subset`, `subset_size`, `client_index`, `client_count` and `subset_seed` (set by name with
//! `lb_options_set_str` / `lb_options_set_int`); this file only lists it.

use crate::balancer::write_listing;
use crate::panic::ffi_panic_boundary;
use crate::ptr::{try_out, try_out_slice, try_ref};
use crate::{lb_balancer, lb_pick, lb_result};
use core::ffi::c_char;

/// Lists the nodes picks choose from, in node (insertion) order: with subsetting (option
/// `subset`), this client's subset of the nodes with weight > 0; without it, every node with
/// weight > 0. Ejected or marked-down members stay listed (health deals with them; the subset
/// does not move). `picks_out` (room for `picks_cap` entries) gets each member's tag and its
/// `id` pointing at a NUL-terminated copy in the caller's `ids_buf` (`ids_buf_len` bytes).
/// `*count_out` gets the number of members and `*ids_size_out` the id bytes used.
///
/// If `picks_cap` or `ids_buf_len` is too small: `LB_RESULT_BUFFER_TOO_SMALL`, with the count
/// and id bytes needed in `*count_out` and `*ids_size_out` (another thread may change the
/// membership before you retry: loop), and `picks_out` untouched. `NULL, 0, NULL, 0` is the way
/// to ask for the sizes (unless the list is empty, which succeeds with both 0).
///
/// `picks_out`, `ids_buf`, `*count_out` and `*ids_size_out` must not overlap each other.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (NULL balancer, `count_out` or `ids_size_out`, or NULL
/// arrays with non-zero sizes), `LB_RESULT_INVALID_LENGTH` (also when the ids' total size would
/// not fit in a `size_t`), `LB_RESULT_BUFFER_TOO_SMALL`. Listing never changes the balancer.
/// Thread-safe: the list is one consistent snapshot.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_subset(
    balancer: *const lb_balancer,
    picks_out: *mut lb_pick,
    picks_cap: usize,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    count_out: *mut usize,
    ids_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `picks_out` writable for `picks_cap`
        // entries, `ids_buf` for `ids_buf_len` bytes, and the size outputs NULL or writable.
        let (balancer, mut picks_out, mut buf, count_out, size_out) = unsafe {
            (
                try_ref(balancer)?,
                try_out_slice(picks_out, picks_cap)?,
                try_out_slice(ids_buf.cast::<u8>(), ids_buf_len)?,
                try_out(count_out)?,
                try_out(ids_size_out)?,
            )
        };
        let members = balancer.subset();
        let entries = || members.ids().zip(members.tags());
        write_listing(entries, &mut picks_out, &mut buf, count_out, size_out, |at, id, tag| {
            lb_pick {
                tag,
                id: at,
                id_len: id.len(),
            }
        })
    }
}
