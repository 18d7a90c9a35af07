//! `lb_balancer`: the core's thread-safe `Balancer` behind an opaque handle.
//!
//! Every exported function's body sits inline in its panic boundary (rustls-ffi style): it
//! checks all pointers first, calls the core, and writes outputs only when everything
//! succeeded (`?` inside the boundary returns the error code). Nothing handed to C points
//! into balancer memory: picks return the caller's own tag and/or copy the id into the
//! caller's buffer, so a concurrent `remove` can never leave C holding a dangling pointer.

use crate::lb_result;
use crate::outcome::{LB_LATENCY_NONE, lb_outcome, plain};
use crate::panic::ffi_panic_boundary;
use crate::ptr::{
    Castable, Out, OutSlice, free_handle, free_shared_handle, opt_out, opt_ref, to_handle,
    to_shared_handle, try_bytes, try_key, try_out, try_out_slice, try_ref, try_slice, try_str,
};
use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};
use liblb_core::{Algorithm, Balancer, Lease, MAX_NODES, Node, Status};
use std::ffi::CString;
use std::sync::Mutex;

/// A load balancer: an algorithm, its options and a set of nodes. Create with
/// `lb_balancer_new`, free with `lb_balancer_free`.
///
/// Thread safety: every function taking a `const lb_balancer *` — picks and membership changes
/// alike — may be called concurrently from any number of threads. Picks never lock; changes are
/// serialised internally and published atomically (a concurrent pick sees the old node set or
/// the new one, never a mix). Only `lb_balancer_free` needs exclusive access.
pub struct lb_balancer {
    _private: [u8; 0],
}

impl crate::ptr::Shared for lb_balancer {}

impl Castable for lb_balancer {
    type Rust = FfiBalancer;
}

/// What an `lb_balancer` handle points to: the core balancer plus the C-only id size bound.
pub(crate) struct FfiBalancer {
    core: Balancer,
    /// The buffer size (id bytes + NUL) of the longest id of the current membership, so C can
    /// size id buffers up front (`lb_balancer_id_size_bound`). The rule, kept by [`Self::change`]:
    ///
    /// - a change that adds longer ids raises it *before* it is published, so whoever can see a
    ///   new id (a pick, `lb_balancer_nodes`) and then reads the bound gets one that fits it;
    /// - a change that removes the longest ids lowers it only *after* it is published, so a
    ///   bound read before a pick starts fits every id that pick can return, whichever
    ///   membership it sees (a pick that loaded the old membership was sized from the old,
    ///   larger bound);
    /// - a change that fails leaves it as it was when the call returns (while the failing call
    ///   runs, the bound may cover its rejected ids: they are raised for before the core has
    ///   validated them, and dropped again under the same lock).
    ///
    /// So between changes it is exactly the longest current id + 1 (0 when empty): one rejected
    /// or departed huge id does not make every later caller allocate for it.
    ///
    /// Ordering: stores are `Release` and the reader's load `Acquire`, so a reader that sees a
    /// lowered bound also sees (at least) the membership that lowered it; a raise is ordered
    /// before the core's publication, which readers acquire.
    id_size_bound: AtomicUsize,
    /// Serialises this handle's membership changes with their bound updates (the core has its
    /// own writer lock, but a bound computed for one change must not overwrite another's).
    /// Picks never take it.
    writer: Mutex<()>,
}

// Every function taking a `const lb_balancer *` is documented as callable from any number of
// threads at once, and `lb_balancer_free` may run on another thread than `lb_balancer_new`: the
// value behind the handle must stay `Send + Sync` whatever the core or this struct grow into.
// `lb_balancer_new` may also read one `lb_options` from several threads at once.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<FfiBalancer>();
    assert_send_sync::<liblb_core::Options>();
};

/// Buffer size for the longest of these ids (length + NUL), 0 for none.
pub(crate) fn size_bound<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    ids.map(|id| id.len() + 1).max().unwrap_or(0)
}

impl FfiBalancer {
    pub(crate) fn new(core: Balancer) -> FfiBalancer {
        let bound = size_bound(core.nodes().iter().map(|n| &*n.id));
        FfiBalancer {
            core,
            id_size_bound: AtomicUsize::new(bound),
            writer: Mutex::new(()),
        }
    }

    /// Runs one membership change and keeps the id size bound's rule (see the field): raises it
    /// to `adding` (the [`size_bound`] of the ids the change brings) before the change, and
    /// afterwards sets it to `after(core, raised bound)` on success (the exact bound of the new
    /// membership), or back to the previous value on failure.
    pub(crate) fn change(
        &self,
        adding: usize,
        edit: impl FnOnce(&Balancer) -> liblb_core::Result<()>,
        after: impl FnOnce(&Balancer, usize) -> usize,
    ) -> Result<(), lb_result> {
        // A writer that panicked published nothing half-done (the core publishes whole
        // snapshots); at worst it left the bound raised for ids it did not add, an over-estimate
        // that only costs buffer space. So a poisoned lock is safe to keep using.
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let before = self.id_size_bound.load(Ordering::Relaxed);
        if adding > before {
            self.id_size_bound.store(adding, Ordering::Release);
        }
        let result = edit(&self.core);
        let bound = match result {
            Ok(()) => after(&self.core, before.max(adding)),
            Err(_) => before,
        };
        self.id_size_bound.store(bound, Ordering::Release);
        Ok(result?)
    }
}

impl core::ops::Deref for FfiBalancer {
    type Target = Balancer;

    fn deref(&self) -> &Balancer {
        &self.core
    }
}

/// A node given to `lb_balancer_new` / `lb_balancer_update`, or listed by `lb_balancer_nodes`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_node {
    /// The id: `id_len` bytes of UTF-8, non-empty, no NUL byte; need not be NUL-terminated.
    /// liblb copies it. In `lb_balancer_nodes` output it points into the caller's `ids_buf`
    /// (and is NUL-terminated there).
    pub id: *const c_char,
    /// Length of `id` in bytes, without any terminating NUL.
    pub id_len: usize,
    /// Relative weight; 0 drains the node (never picked while any node has weight > 0).
    pub weight: u32,
    /// A value of the caller's choosing, handed back by picks (e.g. an index or a pointer cast
    /// to `uint64_t`; liblb never interprets it).
    pub tag: u64,
}

/// One key of a `lb_balancer_pick_many` batch: `key_len` bytes at `key` (NULL with length 0 is
/// the empty key).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_key {
    /// The key's bytes (strings are hashed as their bytes, e.g. UTF-8).
    pub key: *const c_void,
    /// Length of `key` in bytes.
    pub key_len: usize,
}

/// One answer of `lb_balancer_pick_many`, `lb_balancer_pick_n` or `lb_balancer_attempts`, or
/// one member listed by `lb_balancer_subset`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_pick {
    /// The chosen node's tag (given at `lb_balancer_add` / in its `lb_node`).
    pub tag: u64,
    /// The chosen node's id, NUL-terminated, inside the caller's `ids_buf`; NULL when the
    /// caller asked for tags only (`ids_size_out` NULL).
    pub id: *const c_char,
    /// Length of `id` without its NUL; 0 when `id` is NULL.
    pub id_len: usize,
}

// ---------------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------------

/// Creates a balancer in `*balancer_out`.
///
/// - `algorithm`: `algorithm_len` bytes naming the algorithm (`"random"`, `"round_robin"`,
///   `"ring"`, `"least_request"`, `"maglev"`, ...: `lb_algorithm_name` lists them all), not
///   necessarily NUL-terminated.
/// - `options`: NULL for the defaults, or options from `lb_options_new` (copied; free them
///   whenever you like).
/// - `nodes`, `nodes_len`: the initial nodes in order (ids are copied); NULL with 0 starts
///   empty (picks then fail with `LB_RESULT_NO_NODES` until a node is added).
///
/// The caller owns the result and must call `lb_balancer_free`. If this returns an error,
/// `*balancer_out` is unchanged and nothing needs freeing. Errors: `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`, `LB_RESULT_UNKNOWN_ALGORITHM`,
/// `LB_RESULT_INVALID_VNODES`, `LB_RESULT_INVALID_OPTION_VALUE` (options that are valid one by
/// one but not together: `max_ring_size` below `min_ring_size`, `max_ejection_time_ms` below
/// `base_ejection_time_ms`; the options are checked as a whole here, so the order they were
/// set in never matters), and for the nodes `LB_RESULT_EMPTY_ID`,
/// `LB_RESULT_ID_CONTAINS_NUL`, `LB_RESULT_DUPLICATE_NODE`, `LB_RESULT_TOO_MANY_NODES`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_new(
    algorithm: *const c_char,
    algorithm_len: usize,
    options: *const crate::lb_options,
    nodes: *const lb_node,
    nodes_len: usize,
    balancer_out: *mut *mut lb_balancer,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires each pointer to be NULL or valid for its length (a non-NULL
        // `options` a live handle), and nothing to change them during the call.
        let (out, name, options, nodes) = unsafe {
            (
                try_out(balancer_out)?,
                try_str(algorithm, algorithm_len)?,
                opt_ref(options).copied().unwrap_or_default(),
                nodes_from_c(nodes, nodes_len)?,
            )
        };
        let algorithm: Algorithm = name.parse()?;
        out.write(to_shared_handle(FfiBalancer::new(Balancer::new(
            algorithm, nodes, options,
        )?)));
        Ok(())
    }
}

/// Frees a balancer. Calling with NULL is fine. No other thread may be using it, and it must
/// not be used afterwards. Ids and tags already copied out stay valid (they are the caller's),
/// and so do its leases and requests: a request still open keeps what it needs of the
/// balancer alive until `lb_request_free`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_free(balancer: *mut lb_balancer) {
    // SAFETY: lb.h requires a NULL or live handle from `lb_balancer_new`, freed once, unshared.
    ffi_panic_boundary!(unsafe { free_shared_handle(balancer) })
}

// ---------------------------------------------------------------------------------------------
// Membership
// ---------------------------------------------------------------------------------------------

/// Adds a node at the end: `id_len` bytes of UTF-8 at `id` (copied), its weight, and a `tag` of
/// the caller's choosing that picks hand back.
///
/// Errors (the balancer is then unchanged): `LB_RESULT_NULL_PARAMETER` (NULL balancer, or NULL
/// id with a non-zero length), `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`,
/// `LB_RESULT_EMPTY_ID`, `LB_RESULT_ID_CONTAINS_NUL`, `LB_RESULT_DUPLICATE_NODE`,
/// `LB_RESULT_TOO_MANY_NODES`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_add(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    weight: u32,
    tag: u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `id` valid for `id_len` bytes.
        let (balancer, id) = unsafe { (try_ref(balancer)?, try_str(id, id_len)?) };
        balancer.change(
            size_bound([id].into_iter()),
            |core| core.add(Node::with_tag(id, weight, tag)),
            |_, raised| raised,
        )
    }
}

/// Removes the node with this id (`id_len` bytes of UTF-8).
///
/// Errors (the balancer is then unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`, `LB_RESULT_UNKNOWN_NODE`.
/// Thread-safe: ids and tags other threads already copied out stay valid.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_remove(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `id` valid for `id_len` bytes.
        let (balancer, id) = unsafe { (try_ref(balancer)?, try_str(id, id_len)?) };
        balancer.change(
            0,
            |core| core.remove(id),
            // Only removing a longest id can lower the bound: then measure what is left.
            |core, bound| {
                if id.len() + 1 < bound {
                    bound
                } else {
                    size_bound(core.nodes().iter().map(|n| &*n.id))
                }
            },
        )
    }
}

/// Changes a node's weight; 0 drains it (never picked while any node has weight > 0).
///
/// Errors (the balancer is then unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`, `LB_RESULT_UNKNOWN_NODE`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_weight(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    weight: u32,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `id` valid for `id_len` bytes.
        let (balancer, id) = unsafe { (try_ref(balancer)?, try_str(id, id_len)?) };
        balancer.change(0, |core| core.set_weight(id, weight), |_, bound| bound)
    }
}

/// Replaces the whole membership with `nodes_len` nodes (ids copied), atomically: concurrent
/// picks see the old set or the new one, never a mix. NULL with 0 empties the balancer. The
/// round robin position carries on.
///
/// Errors (the balancer is then unchanged, even if only the last node is bad):
/// `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`,
/// `LB_RESULT_EMPTY_ID`, `LB_RESULT_ID_CONTAINS_NUL`, `LB_RESULT_DUPLICATE_NODE`,
/// `LB_RESULT_TOO_MANY_NODES`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_update(
    balancer: *const lb_balancer,
    nodes: *const lb_node,
    nodes_len: usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `nodes` valid for `nodes_len`.
        let (balancer, nodes) = unsafe { (try_ref(balancer)?, nodes_from_c(nodes, nodes_len)?) };
        // On success the membership is exactly `nodes`: its longest id is the new bound.
        let exact = size_bound(nodes.iter().map(|n| &*n.id));
        balancer.change(exact, |core| core.update(nodes), |_, _| exact)
    }
}

/// Copies C node descriptions into core nodes, checking every pointer and every id's UTF-8.
///
/// # Safety
/// `nodes` is NULL or valid for `len` `lb_node`s whose `id`s are NULL or valid for `id_len`.
unsafe fn nodes_from_c(nodes: *const lb_node, len: usize) -> Result<Vec<Node>, lb_result> {
    // SAFETY: forwarded contract.
    let nodes = unsafe { try_slice(nodes, len) }?;
    // Refused before copying anything: the copy would only be thrown away.
    if nodes.len() > MAX_NODES {
        return Err(liblb_core::Error::TooManyNodes(nodes.len()).into());
    }
    let node = |n: &lb_node| {
        // SAFETY: forwarded contract for each node's id.
        let id = unsafe { try_str(n.id, n.id_len) }?;
        Ok(Node::with_tag(id, n.weight, n.tag))
    };
    nodes.iter().map(node).collect()
}

// ---------------------------------------------------------------------------------------------
// Picks
// ---------------------------------------------------------------------------------------------

/// Picks a node for `key` (`key_len` bytes). NULL with length 0 means *no key* here (an
/// exception to "NULL with length 0 is the empty string"): fine for the unkeyed algorithms,
/// `LB_RESULT_KEY_REQUIRED` for the keyed ones (`source_hash`, `ring`, `ketama`,
/// `nginx_chash`, `ring_hash`, `maglev`, `rendezvous`, `jump`). A non-NULL pointer with length 0 is
/// the empty key.
///
/// Outputs, each optional (NULL = not wanted); they must not overlap each other:
/// - `*tag_out`: the node's tag. Tag-only picks (`id_buf` NULL, `id_buf_len` 0, `id_size_out`
///   NULL) copy nothing and are the fastest.
/// - the id: if `id_size_out` is non-NULL, the id is copied into `id_buf` (`id_buf_len`
///   bytes) followed by a NUL, and `*id_size_out` is set to the bytes written (id length + 1).
///   `id_size_out` NULL with a non-NULL `id_buf` or a non-zero `id_buf_len` is
///   `LB_RESULT_NULL_PARAMETER` (nothing is picked).
///
/// Errors: `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_NO_NODES`,
/// `LB_RESULT_KEY_REQUIRED`, and `LB_RESULT_BUFFER_TOO_SMALL` when the id plus NUL does not fit:
/// then `*id_size_out` is set to the size needed and nothing else is written, but the pick
/// itself happened — round robin has moved on and the random algorithms have drawn, exactly as
/// on success (size `id_buf` with `lb_balancer_id_size_bound` to avoid this). On any other
/// error no output is written and the balancer is unchanged. Thread-safe; never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_pick(
    balancer: *const lb_balancer,
    key: *const c_void,
    key_len: usize,
    tag_out: *mut u64,
    id_buf: *mut c_char,
    id_buf_len: usize,
    id_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `key` valid for `key_len` bytes, each
        // out-pointer NULL or writable, and `id_buf` valid for `id_buf_len` bytes.
        let (balancer, key, tag_out, id_out) = unsafe {
            (
                try_ref(balancer)?,
                try_key(key, key_len)?,
                opt_out(tag_out),
                ids_out(id_buf, id_buf_len, id_size_out)?,
            )
        };
        let picked = balancer.pick(key)?;
        write_id(id_out, picked.id())?;
        if let Some(tag_out) = tag_out {
            tag_out.write(picked.tag());
        }
        Ok(())
    }
}

/// Picks once per key, all from the same membership snapshot: `keys_len` keys in, `keys_len`
/// answers out in `picks_out` (which must have room for `keys_len` entries). Every `lb_key` is a
/// key (NULL with length 0 is the empty key). For unkeyed algorithms the keys only count the
/// picks (see also `lb_balancer_pick_n`). A batch fails exactly like a single pick would, even
/// an empty one: `keys_len` 0 gives `LB_RESULT_NO_NODES` when no node has weight > 0, and
/// `LB_RESULT_OK` with nothing written otherwise.
///
/// Ids: with `ids_buf` NULL, `ids_buf_len` 0 and `ids_size_out` NULL only tags are returned
/// (each `id` NULL). Otherwise `ids_size_out` is required (NULL is `LB_RESULT_NULL_PARAMETER`)
/// and the ids are copied into `ids_buf` (`ids_buf_len` bytes) back to back, each followed by a
/// NUL; each answer's `id` points at its copy there, and `*ids_size_out` gets the bytes used.
/// If they do not fit: `LB_RESULT_BUFFER_TOO_SMALL`, `*ids_size_out` gets the size needed and
/// `picks_out` is untouched, but the picks happened — round robin has moved on by `keys_len`
/// and the random algorithms have drawn, exactly as on success. `picks_out`, `ids_buf` and
/// `*ids_size_out` must not overlap each other or the keys.
///
/// Errors: `LB_RESULT_BATCH_TOO_LARGE` (more than `LB_MAX_BATCH` keys; checked first),
/// `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH` (also when the ids' total size would
/// not fit in a `size_t`), `LB_RESULT_NO_NODES`, `LB_RESULT_BUFFER_TOO_SMALL`. On error
/// `picks_out` is untouched, and except after `LB_RESULT_BUFFER_TOO_SMALL` the balancer is
/// unchanged. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_pick_many(
    balancer: *const lb_balancer,
    keys: *const lb_key,
    keys_len: usize,
    picks_out: *mut lb_pick,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    ids_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // First, before any array is looked at: a batch beyond the limit is refused whatever else.
        check_batch(keys_len)?;
        // SAFETY: lb.h requires a NULL or live handle, `keys` valid for `keys_len` entries whose
        // `key`s are valid for their lengths, `picks_out` writable for `keys_len` entries,
        // `ids_buf` for `ids_buf_len` bytes, and `ids_size_out` NULL or writable.
        let (balancer, keys, picks_out, ids) = unsafe {
            (
                try_ref(balancer)?,
                try_slice(keys, keys_len)?,
                try_out_slice(picks_out, keys_len)?,
                ids_out(ids_buf, ids_buf_len, ids_size_out)?,
            )
        };
        // Every key is checked before anything is picked (a bad one fails the call with the
        // balancer unchanged); the picking pass then reads them again instead of collecting them
        // into a vector as large as the batch.
        for k in keys {
            // SAFETY: as above, each `key` is valid for its `key_len` bytes.
            unsafe { try_bytes(k.key, k.key_len) }?;
        }
        let key_bytes = keys.iter().map(|k| {
            // SAFETY: as above; every key passed this check in the loop before, and lb.h forbids
            // changing the keys during the call, so the fallback never happens.
            unsafe { try_bytes(k.key, k.key_len) }.unwrap_or_default()
        });
        let picks = balancer.pick_many(key_bytes)?;
        write_picks(&picks, picks_out, ids)
    }
}

/// `LB_RESULT_BATCH_TOO_LARGE` for a batch of more than `LB_MAX_BATCH` answers, checked before
/// the core sees the count (the core reserves and fills one entry per answer).
fn check_batch(count: usize) -> Result<(), lb_result> {
    if count > crate::LB_MAX_BATCH {
        return Err(lb_result::BatchTooLarge);
    }
    Ok(())
}

/// `count` unkeyed picks from the same membership snapshot into `picks_out` (room for `count`
/// entries); ids as in `lb_balancer_pick_many` (including `LB_RESULT_NULL_PARAMETER` for a
/// buffer without `ids_size_out`). The batch fails exactly like a single unkeyed pick would,
/// whatever `count` (0 included), before anything is picked or reserved: keyed algorithms with
/// `LB_RESULT_KEY_REQUIRED`, a balancer without a node of weight > 0 with `LB_RESULT_NO_NODES`.
///
/// Errors: `LB_RESULT_BATCH_TOO_LARGE` (`count` above `LB_MAX_BATCH`; checked first),
/// `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH` (`count` entries larger than
/// `PTRDIFF_MAX` bytes, or ids whose total size would not fit in a `size_t`),
/// `LB_RESULT_NO_NODES`, `LB_RESULT_KEY_REQUIRED`, `LB_RESULT_BUFFER_TOO_SMALL`
/// (`*ids_size_out` = size needed; `picks_out` untouched, but the `count` picks happened: round
/// robin has moved on and the random algorithms have drawn, exactly as on success). On error
/// `picks_out` is untouched, and except after `LB_RESULT_BUFFER_TOO_SMALL` the balancer is
/// unchanged. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_pick_n(
    balancer: *const lb_balancer,
    count: usize,
    picks_out: *mut lb_pick,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    ids_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // First, before any array is looked at: a batch beyond the limit is refused whatever else.
        check_batch(count)?;
        // SAFETY: lb.h requires a NULL or live handle, `picks_out` writable for `count` entries,
        // `ids_buf` for `ids_buf_len` bytes, and `ids_size_out` NULL or writable.
        let (balancer, picks_out, ids) = unsafe {
            (
                try_ref(balancer)?,
                try_out_slice(picks_out, count)?,
                ids_out(ids_buf, ids_buf_len, ids_size_out)?,
            )
        };
        let picks = balancer.pick_n(count)?;
        write_picks(&picks, picks_out, ids)
    }
}

/// Up to `limit` distinct nodes in retry order for `key` (NULL with length 0 means *no key*, as
/// in `lb_balancer_pick`; a non-NULL pointer with length 0 is the empty key): the first is what
/// a pick would have returned, and it counts as that pick (round robin moves on, the random
/// algorithms draw); the rest are where to go when it fails. `picks_out` has room for `limit`
/// entries; `*count_out` gets how many were written (fewer than `limit` when the balancer has
/// fewer nodes with weight > 0). Ids as in `lb_balancer_pick_many` (including
/// `LB_RESULT_NULL_PARAMETER` for a buffer without `ids_size_out`). `picks_out`, `ids_buf`,
/// `*ids_size_out` and `*count_out` must not overlap each other or the key.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (including NULL `count_out`), `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_NO_NODES`, `LB_RESULT_KEY_REQUIRED`, `LB_RESULT_BUFFER_TOO_SMALL`
/// (`*ids_size_out` = size needed; `picks_out` and `*count_out` untouched, but the pick
/// happened: round robin has moved on and the random algorithms have drawn, exactly as on
/// success). On any other error no output is written and the balancer is unchanged.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_attempts(
    balancer: *const lb_balancer,
    key: *const c_void,
    key_len: usize,
    picks_out: *mut lb_pick,
    limit: usize,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    ids_size_out: *mut usize,
    count_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `key` valid for `key_len` bytes,
        // `picks_out` writable for `limit` entries, `ids_buf` for `ids_buf_len` bytes, and the
        // size outputs NULL or writable.
        let (balancer, key, picks_out, ids, count_out) = unsafe {
            (
                try_ref(balancer)?,
                try_key(key, key_len)?,
                try_out_slice(picks_out, limit)?,
                ids_out(ids_buf, ids_buf_len, ids_size_out)?,
                try_out(count_out)?,
            )
        };
        let picks = balancer.attempts(key, limit)?;
        write_picks(&picks, picks_out, ids)?;
        count_out.write(picks.len());
        Ok(())
    }
}

/// The caller's id buffer and its size output, present when ids were asked for.
type IdsOut<'a> = Option<(OutSlice<'a, u8>, crate::ptr::Out<'a, usize>)>;

/// Checks an optional `ids_buf` / `ids_buf_len` / `ids_size_out` triple. No ids are wanted
/// only when all three are NULL / 0: a buffer (or a length) without the size output that says
/// what was written is `LB_RESULT_NULL_PARAMETER`, not a buffer silently left unwritten.
///
/// # Safety
/// `ids_buf` is NULL or writable for `ids_buf_len` bytes; `ids_size_out` NULL or writable.
pub(crate) unsafe fn ids_out<'a>(
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    ids_size_out: *mut usize,
) -> Result<IdsOut<'a>, lb_result> {
    // SAFETY: forwarded contract.
    let buf = unsafe { try_out_slice(ids_buf.cast::<u8>(), ids_buf_len) }?;
    // SAFETY: forwarded contract.
    match unsafe { opt_out(ids_size_out) } {
        Some(size_out) => Ok(Some((buf, size_out))),
        None if ids_buf.is_null() && ids_buf_len == 0 => Ok(None),
        None => Err(lb_result::NullParameter),
    }
}

/// Bytes needed to copy ids of these lengths NUL-terminated, back to back;
/// `LB_RESULT_INVALID_LENGTH` if that does not fit in a `size_t` (possible on 32-bit targets,
/// where a batch can repeat one long id more often than the address space has room for).
pub(crate) fn ids_size(mut lengths: impl Iterator<Item = usize>) -> Result<usize, lb_result> {
    lengths.try_fold(0usize, |total, len| {
        len.checked_add(1)
            .and_then(|size| total.checked_add(size))
            .ok_or(lb_result::InvalidLength)
    })
}

/// Copies `id` plus a NUL to `buf` at `*offset`, advancing it; returns where the copy starts.
pub(crate) fn copy_id(buf: &mut OutSlice<'_, u8>, offset: &mut usize, id: &str) -> *const c_char {
    let start = buf.address_of(*offset).cast_const().cast::<c_char>();
    buf.write_bytes(*offset, id.as_bytes());
    buf.write(*offset + id.len(), 0);
    *offset += id.len() + 1;
    start
}

/// Writes the answers of `picks` (and their ids, when asked for) to the caller's arrays, after
/// checking that everything fits: either every output is written, or (on
/// `LB_RESULT_BUFFER_TOO_SMALL`) only the size needed.
pub(crate) fn write_picks(
    picks: &liblb_core::Picks,
    mut picks_out: OutSlice<'_, lb_pick>,
    ids: IdsOut<'_>,
) -> Result<(), lb_result> {
    assert!(
        picks.len() <= picks_out.len(),
        "the core returned more answers than asked for"
    );
    match ids {
        None => {
            for (i, tag) in picks.tags().enumerate() {
                picks_out.write(
                    i,
                    lb_pick {
                        tag,
                        id: core::ptr::null(),
                        id_len: 0,
                    },
                );
            }
        }
        Some((mut buf, size_out)) => {
            let needed = ids_size(picks.ids().map(str::len))?;
            if buf.len() < needed {
                size_out.write(needed);
                return Err(lb_result::BufferTooSmall);
            }
            let mut offset = 0;
            for (i, (id, tag)) in picks.ids().zip(picks.tags()).enumerate() {
                let at = copy_id(&mut buf, &mut offset, id);
                picks_out.write(
                    i,
                    lb_pick {
                        tag,
                        id: at,
                        id_len: id.len(),
                    },
                );
            }
            size_out.write(needed);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Inspection
// ---------------------------------------------------------------------------------------------

/// Lists the nodes in insertion order, drained ones included: `nodes_out` (room for
/// `nodes_cap` entries) gets each node's weight and tag, and its `id` pointing at a
/// NUL-terminated copy in the caller's `ids_buf` (`ids_buf_len` bytes). `*count_out` gets the
/// number of nodes and `*ids_size_out` the id bytes used. The entries can be passed straight
/// back to `lb_balancer_update` while `ids_buf` lives.
///
/// If `nodes_cap` or `ids_buf_len` is too small: `LB_RESULT_BUFFER_TOO_SMALL`, with the count
/// and id bytes needed in `*count_out` and `*ids_size_out` (another thread may change the set
/// before you retry: loop). `NULL, 0, NULL, 0` is the way to ask for the sizes (unless the
/// balancer is empty, which succeeds with both 0).
///
/// `nodes_out`, `ids_buf`, `*count_out` and `*ids_size_out` must not overlap each other.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (NULL balancer, `count_out` or `ids_size_out`, or NULL
/// arrays with non-zero sizes), `LB_RESULT_INVALID_LENGTH` (also when the ids' total size would
/// not fit in a `size_t`), `LB_RESULT_BUFFER_TOO_SMALL`. Listing never changes the balancer.
/// Thread-safe: the list is one consistent snapshot.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_nodes(
    balancer: *const lb_balancer,
    nodes_out: *mut lb_node,
    nodes_cap: usize,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    count_out: *mut usize,
    ids_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `nodes_out` writable for `nodes_cap`
        // entries, `ids_buf` for `ids_buf_len` bytes, and the size outputs NULL or writable.
        let (balancer, mut nodes_out, mut buf, count_out, size_out) = unsafe {
            (
                try_ref(balancer)?,
                try_out_slice(nodes_out, nodes_cap)?,
                try_out_slice(ids_buf.cast::<u8>(), ids_buf_len)?,
                try_out(count_out)?,
                try_out(ids_size_out)?,
            )
        };
        let nodes = balancer.nodes();
        let entries = || nodes.iter().map(|n| (&*n.id, n));
        write_listing(entries, &mut nodes_out, &mut buf, count_out, size_out, |id, _, node| {
            lb_node {
                id,
                id_len: node.id.len(),
                weight: node.weight,
                tag: node.tag,
            }
        })
    }
}

/// Writes a listing (`lb_balancer_nodes`, `lb_balancer_subset`): for each `(id, item)` that
/// `entries()` gives, the id copied NUL-terminated into `buf` and `entry(that copy, id, item)`
/// into `out`; the count and the id bytes needed into `count_out` and `size_out`. When `out`
/// or `buf` is too small, only the two sizes are written: `LB_RESULT_BUFFER_TOO_SMALL`.
pub(crate) fn write_listing<'s, X, T, I: ExactSizeIterator<Item = (&'s str, X)>>(
    entries: impl Fn() -> I,
    out: &mut OutSlice<'_, T>,
    buf: &mut OutSlice<'_, u8>,
    count_out: Out<'_, usize>,
    size_out: Out<'_, usize>,
    entry: impl Fn(*const c_char, &str, X) -> T,
) -> Result<(), lb_result> {
    let count = entries().len();
    let needed = ids_size(entries().map(|(id, _)| id.len()))?;
    count_out.write(count);
    size_out.write(needed);
    if count > out.len() || needed > buf.len() {
        return Err(lb_result::BufferTooSmall);
    }
    let mut offset = 0;
    for (i, (id, item)) in entries().enumerate() {
        let at = copy_id(buf, &mut offset, id);
        out.write(i, entry(at, id, item));
    }
    Ok(())
}

/// A buffer size (id bytes + NUL) that fits every id of the current membership, in
/// `*size_out`: the longest id's length + 1, or 0 for an empty balancer. Use it to size
/// `id_buf` for `lb_balancer_pick` (and `n` times it for batches of `n`, checking that product
/// for overflow) so `LB_RESULT_BUFFER_TOO_SMALL` cannot happen, which matters because a pick
/// that fails that way still happened (round robin moved on, the random algorithms drew).
///
/// The rule: a change that adds a longer id raises the bound before the change is published
/// (whoever sees the new id and then asks gets a bound that fits it); a change that removes the
/// longest ids lowers it only after it is published (a bound read before a pick starts fits
/// every id that pick can return); a change that fails leaves it as it was (while the failing
/// call runs, it may briefly cover the rejected ids). So a buffer sized from a fresh bound only
/// comes up short when another thread adds a longer id at the same time: keep handling
/// `LB_RESULT_BUFFER_TOO_SMALL`, and read the bound again rather than caching it.
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_id_size_bound(
    balancer: *const lb_balancer,
    size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and a NULL or writable `size_out`.
        let (balancer, out) = unsafe { (try_ref(balancer)?, try_out(size_out)?) };
        // Acquire: pairs with the Release stores of `FfiBalancer::change` (see the field's rule).
        out.write(balancer.id_size_bound.load(Ordering::Acquire));
        Ok(())
    }
}

/// The number of nodes, drained ones included, in `*len_out`.
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_len(balancer: *const lb_balancer, len_out: *mut usize) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and a NULL or writable `len_out`.
        let (balancer, out) = unsafe { (try_ref(balancer)?, try_out(len_out)?) };
        out.write(balancer.len());
        Ok(())
    }
}

/// Whether a node with this id (`id_len` bytes of UTF-8) exists, in `*contains_out`.
/// Errors: `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_contains(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    contains_out: *mut bool,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `id` valid for `id_len` bytes and a NULL
        // or writable `contains_out`.
        let (balancer, id, out) = unsafe {
            (
                try_ref(balancer)?,
                try_str(id, id_len)?,
                try_out(contains_out)?,
            )
        };
        out.write(balancer.contains(id));
        Ok(())
    }
}

/// The balancer's algorithm name in `*name_out`: a static NUL-terminated string (never freed,
/// valid forever, not balancer memory). Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_algorithm(
    balancer: *const lb_balancer,
    name_out: *mut *const c_char,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and a NULL or writable `name_out`.
        let (balancer, out) = unsafe { (try_ref(balancer)?, try_out(name_out)?) };
        out.write(algorithm_names()[balancer.algorithm() as usize].as_ptr());
        Ok(())
    }
}

/// `Algorithm::NAMES` as C strings, made once from the core's registration list. They live in
/// a static, so the pointers handed to C stay valid for the life of the process.
pub(crate) fn algorithm_names() -> &'static [CString] {
    static NAMES: std::sync::LazyLock<Vec<CString>> = std::sync::LazyLock::new(|| {
        let name = |n: &&str| CString::new(*n).expect("algorithm names contain no NUL");
        Algorithm::NAMES.iter().map(name).collect()
    });
    &NAMES
}

/// The name of algorithm number `index` (0, 1, ... in documentation order) as a static
/// NUL-terminated string, or NULL when `index` is past the last one: loop until NULL to list
/// every algorithm `lb_balancer_new` accepts. (Should liblb ever panic here, the answer is NULL
/// too, so such a loop always ends.) Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_algorithm_name(index: usize) -> *const c_char {
    ffi_panic_boundary!(on_panic: core::ptr::null(); algorithm_name(index))
}

/// `lb_algorithm_name`'s body.
fn algorithm_name(index: usize) -> *const c_char {
    algorithm_names()
        .get(index)
        .map_or(core::ptr::null(), |n| n.as_ptr())
}

// ---------------------------------------------------------------------------------------------
// Feedback: leases, reports, stats
// ---------------------------------------------------------------------------------------------

/// A request in progress on one node, from `lb_balancer_acquire`: the node's in-flight count
/// is one higher until the lease ends. End it exactly once, with `lb_lease_finish` (success or
/// failure and the latency you measured) or `lb_lease_cancel` (nothing counted); either frees
/// it. A lease stays valid after its node is removed, or even after its balancer is freed
/// (ending it then counts nowhere). A lease may be used and ended on any thread, but by one
/// thread at a time.
pub struct lb_lease {
    _private: [u8; 0],
}

impl crate::ptr::Boxed for lb_lease {}

impl Castable for lb_lease {
    type Rust = Lease;
}

// A lease may be ended on another thread than the one that acquired it.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Lease>();
};

/// Writes `id` and its NUL to an optional id buffer (see `lb_balancer_pick`):
/// `LB_RESULT_BUFFER_TOO_SMALL` with the size needed when it does not fit.
fn write_id(out: IdsOut<'_>, id: &str) -> Result<(), lb_result> {
    if let Some((mut buf, size_out)) = out {
        let needed = id.len() + 1;
        if buf.len() < needed {
            size_out.write(needed);
            return Err(lb_result::BufferTooSmall);
        }
        buf.write_bytes(0, id.as_bytes());
        buf.write(id.len(), 0);
        size_out.write(needed);
    }
    Ok(())
}

/// Picks a node for `key` exactly like `lb_balancer_pick` (same key rule, same tag and id
/// outputs) and starts a request on it: its in-flight count + 1 until the lease in
/// `*lease_out` ends. The load-aware algorithms (`least_request`, `peak_ewma`, ...) choose by
/// these counts; every algorithm keeps them for `lb_balancer_stats`.
///
/// The caller owns the lease and must end it with `lb_lease_finish` or `lb_lease_cancel`
/// (which free it). On any error no lease exists and nothing is counted; after
/// `LB_RESULT_BUFFER_TOO_SMALL` (`*id_size_out` = size needed) the pick happened (round robin
/// moved on, the random algorithms drew) but its lease was cancelled at once.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (including NULL `lease_out`), `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_NO_NODES`, `LB_RESULT_KEY_REQUIRED`, `LB_RESULT_BUFFER_TOO_SMALL`. Thread-safe;
/// never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_acquire(
    balancer: *const lb_balancer,
    key: *const c_void,
    key_len: usize,
    lease_out: *mut *mut lb_lease,
    tag_out: *mut u64,
    id_buf: *mut c_char,
    id_buf_len: usize,
    id_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `key` valid for `key_len` bytes, each
        // out-pointer NULL or writable, and `id_buf` valid for `id_buf_len` bytes.
        let (balancer, key, lease_out, tag_out, id_out) = unsafe {
            (
                try_ref(balancer)?,
                try_key(key, key_len)?,
                try_out(lease_out)?,
                opt_out(tag_out),
                ids_out(id_buf, id_buf_len, id_size_out)?,
            )
        };
        let lease = balancer.acquire(key)?;
        // On BUFFER_TOO_SMALL the lease drops here: cancelled.
        write_id(id_out, lease.id())?;
        if let Some(tag_out) = tag_out {
            tag_out.write(lease.tag());
        }
        lease_out.write(to_handle(lease));
        Ok(())
    }
}

/// Ends the request with an outcome and frees the lease: `outcome` is `LB_OUTCOME_SUCCESS`
/// or a failure kind (`LB_OUTCOME_FAILURE` = `LB_OUTCOME_ERROR`, `LB_OUTCOME_TIMEOUT`,
/// `LB_OUTCOME_OVERLOADED`), after `latency_ns` nanoseconds as you measured them, or
/// `LB_LATENCY_NONE` to have liblb measure the time since acquire (see `lb_lease_elapsed`).
/// In-flight - 1, requests + 1, failures + 1 on failure, the latency into the node's estimate
/// (a failure counts at least the option `failure_penalty_ms` there). For an overloaded node's
/// retry-after use `lb_lease_finish_info`.
///
/// Errors (the lease is then untouched and still yours): `LB_RESULT_NULL_PARAMETER` (NULL
/// lease), `LB_RESULT_INVALID_OUTCOME` (an unknown `outcome`). On `LB_RESULT_OK` the lease is
/// gone: do not use it again.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_finish(
    lease: *mut lb_lease,
    outcome: lb_outcome,
    latency_ns: u64,
) -> lb_result {
    ffi_panic_boundary!(crate::outcome::finish_lease(
        lease,
        plain(outcome, latency_ns),
        None
    ))
}

/// Ends the request as cancelled — in-flight - 1, nothing else counted (neither a request nor
/// a failure nor a latency) — and frees the lease. Calling with NULL is fine. Do not use the
/// lease again.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_cancel(lease: *mut lb_lease) {
    // SAFETY: lb.h requires a NULL or live lease, ended once; dropping it cancels it.
    ffi_panic_boundary!(unsafe { free_handle(lease) })
}

/// The lease's node: its tag in `*tag_out` and, as in `lb_balancer_pick`, its id copied into
/// `id_buf` with a NUL and the bytes written in `*id_size_out` (`id_size_out` NULL: no id;
/// then `id_buf` must be NULL and `id_buf_len` 0). The id stays readable even after the node
/// was removed.
///
/// Errors: `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_BUFFER_TOO_SMALL` (`*id_size_out` = size needed, `*tag_out` untouched).
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_node(
    lease: *const lb_lease,
    tag_out: *mut u64,
    id_buf: *mut c_char,
    id_buf_len: usize,
    id_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live lease, each out-pointer NULL or writable and
        // `id_buf` valid for `id_buf_len` bytes.
        let (lease, tag_out, id_out) = unsafe {
            (
                try_ref(lease)?,
                opt_out(tag_out),
                ids_out(id_buf, id_buf_len, id_size_out)?,
            )
        };
        write_id(id_out, lease.id())?;
        if let Some(tag_out) = tag_out {
            tag_out.write(lease.tag());
        }
        Ok(())
    }
}

/// Nanoseconds since the lease was acquired, by liblb's monotonic clock, in `*elapsed_ns_out`
/// (saturating at `UINT64_MAX`): a latency to pass to `lb_lease_finish` when you do not
/// measure your own. Errors: `LB_RESULT_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_elapsed(lease: *const lb_lease, elapsed_ns_out: *mut u64) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live lease and a NULL or writable output.
        let (lease, out) = unsafe { (try_ref(lease)?, try_out(elapsed_ns_out)?) };
        out.write(u64::try_from(lease.elapsed().as_nanos()).unwrap_or(u64::MAX));
        Ok(())
    }
}

/// Records the outcome of a request you routed yourself after a pick (`id_len` bytes of
/// UTF-8 naming the node): requests + 1, failures + 1 on failure, `latency_ns` into the
/// latency estimate (a failure counts at least the option `failure_penalty_ms` there).
/// `outcome` is `LB_OUTCOME_SUCCESS` or a failure kind (`LB_OUTCOME_FAILURE` =
/// `LB_OUTCOME_ERROR`, `LB_OUTCOME_TIMEOUT`, `LB_OUTCOME_OVERLOADED`); a failure's latency may
/// be `LB_LATENCY_NONE` (unknown), a success's may not. In-flight is not touched (use leases
/// for that). For an overloaded node's retry-after use `lb_balancer_report_info`.
///
/// Errors (nothing is recorded): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_INVALID_UTF8`, `LB_RESULT_INVALID_OUTCOME` (an unknown `outcome`, or a success
/// with `LB_LATENCY_NONE`), `LB_RESULT_UNKNOWN_NODE`. Thread-safe; never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_report(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    outcome: lb_outcome,
    latency_ns: u64,
) -> lb_result {
    ffi_panic_boundary!(crate::outcome::report(
        balancer,
        id,
        id_len,
        plain(outcome, latency_ns)
    ))
}

/// Takes the node with this id out of service until `lb_balancer_mark_up` (for callers with
/// active health checks): no rebuild, its weight and counters are kept, keyed algorithms move
/// only its keys.
///
/// Errors (nothing changes): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_INVALID_UTF8`, `LB_RESULT_UNKNOWN_NODE`. Thread-safe; never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_mark_down(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
) -> lb_result {
    set_down(balancer, id, id_len, true)
}

/// Puts a node marked down back in service (warming up first if slow start is on). Errors as
/// `lb_balancer_mark_down`. Thread-safe; never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_mark_up(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
) -> lb_result {
    set_down(balancer, id, id_len, false)
}

/// `lb_balancer_mark_down` (`down`) or `lb_balancer_mark_up`.
fn set_down(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    down: bool,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `id` valid for `id_len` bytes.
        let (balancer, id) = unsafe { (try_ref(balancer)?, try_str(id, id_len)?) };
        if down {
            balancer.mark_down(id)?;
        } else {
            balancer.mark_up(id)?;
        }
        Ok(())
    }
}

/// Writes to `*panic_out` whether picks ignore health because fewer than `panic_threshold`
/// percent of the nodes are healthy (traffic then spreads over every node).
///
/// Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_panic(
    balancer: *const lb_balancer,
    panic_out: *mut bool,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
        let (balancer, out) = unsafe { (try_ref(balancer)?, try_out(panic_out)?) };
        out.write(balancer.panic());
        Ok(())
    }
}

/// A node's health in `lb_node_stats.status`. (A plain `uint32_t`.)
pub type lb_node_status = u32;
/// In service at its full weight.
pub const LB_NODE_HEALTHY: lb_node_status = 0;
/// In service, ramping up to its weight (slow start) until `until_ns`.
pub const LB_NODE_WARMING: lb_node_status = 1;
/// Ejected after consecutive failures until `until_ns`.
pub const LB_NODE_EJECTED: lb_node_status = 2;
/// Marked down with `lb_balancer_mark_down`.
pub const LB_NODE_DOWN: lb_node_status = 3;
/// Reported overloaded with a retry-after: no picks until `until_ns`.
pub const LB_NODE_OVERLOADED: lb_node_status = 4;

/// One node's load, listed by `lb_balancer_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_node_stats {
    /// The node's id, NUL-terminated, inside the caller's `ids_buf`.
    pub id: *const c_char,
    /// Length of `id` without its NUL.
    pub id_len: usize,
    /// Its weight (0 = drained).
    pub weight: u32,
    /// The caller's tag.
    pub tag: u64,
    /// Requests started (leases acquired) and not yet ended.
    pub in_flight: usize,
    /// Requests ended with an outcome (finished leases and reports).
    pub requests: u64,
    /// Of those, failures.
    pub failures: u64,
    /// The peak-EWMA latency estimate as of its last sample, in nanoseconds, or
    /// `LB_LATENCY_NONE` before any sample.
    pub latency_ns: u64,
    /// Its health: `LB_NODE_HEALTHY`, `LB_NODE_WARMING`, `LB_NODE_EJECTED`, `LB_NODE_DOWN` or
    /// `LB_NODE_OVERLOADED`.
    pub status: lb_node_status,
    /// When a warm-up, an ejection or an overload pause ends, in nanoseconds of the balancer's
    /// monotonic clock (liblb's, one per process; read it with `lb_balancer_now_ns`, so `until_ns - now` is the time left); 0 for the other states.
    pub until_ns: u64,
}

/// Reads the balancer's clock into `*now_ns_out`: liblb's monotonic clock (never goes back),
/// nanoseconds since an origin shared by every balancer of the process (`lb_now_ns`), the clock of `lb_node_stats.until_ns`. So the time left of an
/// ejection or warm-up is `until_ns - now` (0 or less: it has ended; the next pick or stats
/// call sees it). Errors: `LB_RESULT_NULL_PARAMETER` (NULL `balancer` or `now_ns_out`; then
/// `*now_ns_out` is unchanged). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_now_ns(
    balancer: *const lb_balancer,
    now_ns_out: *mut u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and `now_ns_out` NULL or writable.
        let (balancer, out) = unsafe { (try_ref(balancer)?, try_out(now_ns_out)?) };
        out.write(balancer.clock().now_ns());
        Ok(())
    }
}

/// Lists each node's load in insertion order, drained nodes included, with the same
/// buffer protocol as `lb_balancer_nodes`: `stats_out` (room for `stats_cap` entries) gets one
/// record per node, its `id` pointing at a NUL-terminated copy in `ids_buf` (`ids_buf_len`
/// bytes); `*count_out` gets the number of nodes and `*ids_size_out` the id bytes used. If
/// either is too small: `LB_RESULT_BUFFER_TOO_SMALL` with the count and bytes needed written
/// (the set may change before you retry: loop). `NULL, 0, NULL, 0` asks for the sizes.
///
/// Counters belong to the node id and survive membership changes for nodes that stay; a
/// removed node's go with it. Each counter is read atomically, the set of nodes is one
/// snapshot, but counters of different nodes are not read at one instant.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (NULL balancer, `count_out` or `ids_size_out`, or NULL
/// arrays with non-zero sizes), `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_BUFFER_TOO_SMALL`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_stats(
    balancer: *const lb_balancer,
    stats_out: *mut lb_node_stats,
    stats_cap: usize,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    count_out: *mut usize,
    ids_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `stats_out` writable for `stats_cap`
        // entries, `ids_buf` for `ids_buf_len` bytes, and the size outputs NULL or writable.
        let (balancer, mut stats_out, mut buf, count_out, size_out) = unsafe {
            (
                try_ref(balancer)?,
                try_out_slice(stats_out, stats_cap)?,
                try_out_slice(ids_buf.cast::<u8>(), ids_buf_len)?,
                try_out(count_out)?,
                try_out(ids_size_out)?,
            )
        };
        let stats = balancer.stats();
        let needed = ids_size(stats.iter().map(|s| s.id.len()))?;
        if stats.len() > stats_out.len() || needed > buf.len() {
            count_out.write(stats.len());
            size_out.write(needed);
            return Err(lb_result::BufferTooSmall);
        }
        let mut offset = 0;
        for (i, s) in stats.iter().enumerate() {
            let id = copy_id(&mut buf, &mut offset, &s.id);
            // A real estimate never reads as "none": it saturates one below the marker.
            let most = LB_LATENCY_NONE - 1;
            let latency_ns = s.latency.map_or(LB_LATENCY_NONE, |l| {
                u64::try_from(l.as_nanos()).map_or(most, |ns| ns.min(most))
            });
            let status = match s.status {
                Status::Healthy => LB_NODE_HEALTHY,
                Status::Warming { .. } => LB_NODE_WARMING,
                Status::Ejected { .. } => LB_NODE_EJECTED,
                Status::Down => LB_NODE_DOWN,
                Status::Overloaded { .. } => LB_NODE_OVERLOADED,
            };
            let until_ns = s.status.until_ns().unwrap_or(0);
            stats_out.write(
                i,
                lb_node_stats {
                    id,
                    id_len: s.id.len(),
                    weight: s.weight,
                    tag: s.tag,
                    in_flight: s.in_flight,
                    requests: s.requests,
                    failures: s.failures,
                    latency_ns,
                    status,
                    until_ns,
                },
            );
        }
        count_out.write(stats.len());
        size_out.write(needed);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Picks by 64-bit key hash
// ---------------------------------------------------------------------------------------------

/// The node for a 64-bit key hash you computed yourself (gRPC's request hash, a Guava user's
/// hash): the answer `lb_balancer_pick` gives a key with that hash. Only the algorithms that
/// place hashes (`ring_hash`, `maglev`, `rendezvous`, `jump`) take one; the others fail with
/// `LB_RESULT_HASH_UNSUPPORTED`. Tag and id outputs as in `lb_balancer_pick`.
///
/// Errors (no output written, the balancer unchanged; except `LB_RESULT_BUFFER_TOO_SMALL`,
/// which writes `*id_size_out`): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_NO_NODES`, `LB_RESULT_HASH_UNSUPPORTED`, `LB_RESULT_BUFFER_TOO_SMALL`.
/// Thread-safe; never locks.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_pick_hash(
    balancer: *const lb_balancer,
    hash: u64,
    tag_out: *mut u64,
    id_buf: *mut c_char,
    id_buf_len: usize,
    id_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, each out-pointer NULL or writable, and
        // `id_buf` valid for `id_buf_len` bytes.
        let (balancer, tag_out, id_out) = unsafe {
            (
                try_ref(balancer)?,
                opt_out(tag_out),
                ids_out(id_buf, id_buf_len, id_size_out)?,
            )
        };
        let picked = balancer.pick_hash(hash)?;
        write_id(id_out, picked.id())?;
        if let Some(tag_out) = tag_out {
            tag_out.write(picked.tag());
        }
        Ok(())
    }
}

/// `lb_balancer_attempts` for a 64-bit key hash (see `lb_balancer_pick_hash`): up to `limit`
/// distinct nodes in retry order into `picks_out` (room for `limit` entries), `*count_out` =
/// how many. Ids as in `lb_balancer_pick_many`.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (including NULL `count_out`), `LB_RESULT_INVALID_LENGTH`,
/// `LB_RESULT_NO_NODES`, `LB_RESULT_HASH_UNSUPPORTED`, `LB_RESULT_BUFFER_TOO_SMALL`
/// (`*ids_size_out` = size needed, nothing else written). The balancer is never changed.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_attempts_hash(
    balancer: *const lb_balancer,
    hash: u64,
    picks_out: *mut lb_pick,
    limit: usize,
    ids_buf: *mut c_char,
    ids_buf_len: usize,
    ids_size_out: *mut usize,
    count_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `picks_out` writable for `limit`
        // entries, `ids_buf` for `ids_buf_len` bytes, and the size outputs NULL or writable.
        let (balancer, picks_out, ids, count_out) = unsafe {
            (
                try_ref(balancer)?,
                try_out_slice(picks_out, limit)?,
                ids_out(ids_buf, ids_buf_len, ids_size_out)?,
                try_out(count_out)?,
            )
        };
        let picks = balancer.attempts_hash(hash, limit)?;
        write_picks(&picks, picks_out, ids)?;
        count_out.write(picks.len());
        Ok(())
    }
}
