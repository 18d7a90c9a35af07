//! Localities and priority levels from C (issue 24): where each node runs and how the balancer
//! routes between those places. The core's `route` module does the work; these exports only
//! convert arguments, as `balancer.rs` does for the plain membership.
//!
//! The ABI is additive: `lb_node` and every function taking it are unchanged, and a node added
//! through them sits in the unnamed locality `""` at priority 0. The richer form is a second
//! struct, `lb_located_node`, with its own constructor, `add`, `update` and listing
//! (`lb_balancer_new_located`, `lb_balancer_add_located`, `lb_balancer_update_located`,
//! `lb_balancer_located_nodes`); both forms can be mixed on one balancer.
//!
//! Strings follow the rest of the C API: pointer plus length, UTF-8, not NUL-terminated, NULL
//! with length 0 is the empty string. The empty locality is a real locality (the unnamed one),
//! so "no local locality" cannot be spelled as a string: it has its own function,
//! `lb_balancer_clear_local_locality` (as `lb_balancer_clear_budget` undoes a budget).

use crate::balancer::{FfiBalancer, copy_id, ids_size, size_bound};
use crate::lb_result;
use crate::panic::ffi_panic_boundary;
use crate::ptr::{to_shared_handle, try_out, try_out_slice, try_ref, try_slice, try_str};
use crate::{lb_balancer, lb_options};
use core::ffi::c_char;
use liblb_core::{Algorithm, Balancer, MAX_NODES, Node};

/// A node with its place: what `lb_node` says plus a locality and a priority level. Taken by
/// `lb_balancer_new_located` / `lb_balancer_update_located`, listed by
/// `lb_balancer_located_nodes`. A zeroed `locality`/`locality_len`/`priority` is what `lb_node`
/// implies: the unnamed locality at priority 0.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_located_node {
    /// The id: `id_len` bytes of UTF-8, non-empty, no NUL byte; need not be NUL-terminated.
    /// liblb copies it. In `lb_balancer_located_nodes` output it points into the caller's
    /// `strings_buf` (and is NUL-terminated there).
    pub id: *const c_char,
    /// Length of `id` in bytes, without any terminating NUL.
    pub id_len: usize,
    /// Relative weight; 0 drains the node (never picked while any node has weight > 0).
    pub weight: u32,
    /// A value of the caller's choosing, handed back by picks (liblb never interprets it).
    pub tag: u64,
    /// Where the node runs: `locality_len` bytes of UTF-8, `"region/zone/sub_zone"`, any part
    /// may be empty and trailing empty parts may be left out (`"us-east/us-east-1a"`); at most
    /// three parts, no NUL byte. NULL with length 0 (or `""`) is the unnamed locality. liblb
    /// copies it. In `lb_balancer_located_nodes` output it points into the caller's
    /// `strings_buf` (NUL-terminated there), exactly as it was given.
    pub locality: *const c_char,
    /// Length of `locality` in bytes, without any terminating NUL.
    pub locality_len: usize,
    /// The node's priority level: 0 is the most preferred; higher levels take traffic as the
    /// lower ones lose health (Envoy's priority levels; see docs/c.md).
    pub priority: u32,
}

/// One locality's weight for `lb_balancer_set_locality_weights`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_locality_weight {
    /// The locality, `locality_len` bytes of UTF-8 (as in `lb_located_node`).
    pub locality: *const c_char,
    /// Length of `locality` in bytes.
    pub locality_len: usize,
    /// Its weight; 0 takes traffic only when no locality with weight > 0 can.
    pub weight: u32,
}

/// How many of the caller's own instances run in one locality, for
/// `lb_balancer_set_local_localities`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lb_locality_count {
    /// The locality, `locality_len` bytes of UTF-8 (as in `lb_located_node`).
    pub locality: *const c_char,
    /// Length of `locality` in bytes.
    pub locality_len: usize,
    /// The number of the caller's instances there.
    pub count: u64,
}

/// Copies C located nodes into core nodes, checking every pointer and every string's UTF-8
/// (the core checks the rest: empty ids, NULs, duplicates, localities).
///
/// # Safety
/// `nodes` is NULL or valid for `len` `lb_located_node`s whose `id`s and `locality`s are NULL
/// or valid for their lengths.
unsafe fn located_from_c(
    nodes: *const lb_located_node,
    len: usize,
) -> Result<Vec<Node>, lb_result> {
    // SAFETY: forwarded contract.
    let nodes = unsafe { try_slice(nodes, len) }?;
    // Refused before copying anything: the copy would only be thrown away.
    if nodes.len() > MAX_NODES {
        return Err(liblb_core::Error::TooManyNodes(nodes.len()).into());
    }
    let node = |n: &lb_located_node| {
        // SAFETY: forwarded contract for each node's id and locality.
        let (id, locality) = unsafe {
            (
                try_str(n.id, n.id_len)?,
                try_str(n.locality, n.locality_len)?,
            )
        };
        Ok(Node::with_tag(id, n.weight, n.tag).located(locality, n.priority))
    };
    nodes.iter().map(node).collect()
}

/// Copies a C list of (locality, value) entries, checking every pointer and every locality's
/// UTF-8 (the core checks the localities themselves).
///
/// # Safety
/// `entries` is NULL or valid for `len` entries whose localities are NULL or valid for their
/// lengths.
unsafe fn localities_from_c<'a, T: 'a, V>(
    entries: *const T,
    len: usize,
    fields: impl Fn(&T) -> (*const c_char, usize, V),
) -> Result<Vec<(&'a str, V)>, lb_result> {
    // SAFETY: forwarded contract.
    let entries: &'a [T] = unsafe { try_slice(entries, len) }?;
    let entry = |e: &T| {
        let (locality, locality_len, value) = fields(e);
        // SAFETY: forwarded contract for each entry's locality.
        Ok((unsafe { try_str(locality, locality_len) }?, value))
    };
    entries.iter().map(entry).collect()
}

/// `lb_balancer_new` with located nodes: creates a balancer in `*balancer_out` whose nodes
/// carry their locality and priority. Arguments, ownership and errors as `lb_balancer_new`,
/// plus `LB_RESULT_INVALID_LOCALITY` (a locality with more than three `/`-separated parts or a
/// NUL byte) and `LB_RESULT_INVALID_UTF8` for a locality's bytes. If this returns an error,
/// `*balancer_out` is unchanged and nothing needs freeing. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_new_located(
    algorithm: *const c_char,
    algorithm_len: usize,
    options: *const lb_options,
    nodes: *const lb_located_node,
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
                crate::ptr::opt_ref(options).copied().unwrap_or_default(),
                located_from_c(nodes, nodes_len)?,
            )
        };
        let algorithm: Algorithm = name.parse()?;
        out.write(to_shared_handle(FfiBalancer::new(Balancer::new(
            algorithm, nodes, options,
        )?)));
        Ok(())
    }
}

/// `lb_balancer_add` with a place: adds a node at the end (`id_len` bytes of UTF-8 at `id`,
/// copied), with its weight, tag, locality (`locality_len` bytes, as in `lb_located_node`;
/// NULL with 0 is the unnamed locality) and priority level.
///
/// Errors (the balancer is then unchanged): those of `lb_balancer_add`, plus
/// `LB_RESULT_INVALID_UTF8` for the locality's bytes and `LB_RESULT_INVALID_LOCALITY`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_add_located(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    weight: u32,
    tag: u64,
    locality: *const c_char,
    locality_len: usize,
    priority: u32,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `id` and `locality` valid for
        // their lengths.
        let (balancer, id, locality) = unsafe {
            (
                try_ref(balancer)?,
                try_str(id, id_len)?,
                try_str(locality, locality_len)?,
            )
        };
        balancer.change(
            size_bound([id].into_iter()),
            |core| core.add(Node::with_tag(id, weight, tag).located(locality, priority)),
            |_, raised| raised,
        )
    }
}

/// `lb_balancer_update` with located nodes: replaces the whole membership with `nodes_len`
/// nodes (ids and localities copied), atomically; NULL with 0 empties the balancer. A node
/// that stays keeps its counters and health whatever its new place.
///
/// Errors (the balancer is then unchanged, even if only the last node is bad): those of
/// `lb_balancer_update`, plus `LB_RESULT_INVALID_UTF8` for a locality's bytes and
/// `LB_RESULT_INVALID_LOCALITY`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_update_located(
    balancer: *const lb_balancer,
    nodes: *const lb_located_node,
    nodes_len: usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `nodes` valid for `nodes_len`.
        let (balancer, nodes) =
            unsafe { (try_ref(balancer)?, located_from_c(nodes, nodes_len)?) };
        // On success the membership is exactly `nodes`: its longest id is the new bound.
        let exact = size_bound(nodes.iter().map(|n| &*n.id));
        balancer.change(exact, |core| core.update(nodes), |_, _| exact)
    }
}

/// Moves the node with this id (`id_len` bytes) to `locality` (`locality_len` bytes, as in
/// `lb_located_node`) at priority level `priority`. Its weight, tag, counters and health stay.
///
/// Errors (the balancer is then unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8` (id or locality),
/// `LB_RESULT_INVALID_LOCALITY`, `LB_RESULT_UNKNOWN_NODE`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_location(
    balancer: *const lb_balancer,
    id: *const c_char,
    id_len: usize,
    locality: *const c_char,
    locality_len: usize,
    priority: u32,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `id` and `locality` valid for
        // their lengths.
        let (balancer, id, locality) = unsafe {
            (
                try_ref(balancer)?,
                try_str(id, id_len)?,
                try_str(locality, locality_len)?,
            )
        };
        // The ids stay the same, so does their size bound.
        balancer.change(
            0,
            |core| core.set_location(id, locality, priority),
            |_, bound| bound,
        )
    }
}

/// Turns on locality-weighted balancing (for the unkeyed algorithms; keyed ones ignore it):
/// `weights_len` localities with their weights, each scaled by its share of usable nodes as
/// Envoy does, localities chosen by Envoy's EDF schedule. A locality left out has weight 0.
/// NULL with 0 (an empty list) turns it off. Replaces any weights set before.
///
/// Errors (the balancer is then unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`, `LB_RESULT_INVALID_LOCALITY`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_locality_weights(
    balancer: *const lb_balancer,
    weights: *const lb_locality_weight,
    weights_len: usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `weights` valid for `weights_len`
        // entries whose localities are valid for their lengths.
        let (balancer, weights) = unsafe {
            (
                try_ref(balancer)?,
                localities_from_c(weights, weights_len, |w| (w.locality, w.locality_len, w.weight))?,
            )
        };
        balancer.set_locality_weights(weights)?;
        Ok(())
    }
}

/// Sets the caller's own locality (`locality_len` bytes, as in `lb_located_node`: NULL with 0
/// is the unnamed locality `""`, not "none"; use `lb_balancer_clear_local_locality` for none).
/// With `lb_balancer_set_local_localities` it turns on zone-aware routing for the unkeyed
/// algorithms: requests stay in this locality as far as its share of the usable nodes at
/// priority 0 covers its share of the callers.
///
/// Errors (the balancer is then unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`, `LB_RESULT_INVALID_LOCALITY`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_local_locality(
    balancer: *const lb_balancer,
    locality: *const c_char,
    locality_len: usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `locality` valid for its length.
        let (balancer, locality) =
            unsafe { (try_ref(balancer)?, try_str(locality, locality_len)?) };
        balancer.set_local_locality(Some(locality))?;
        Ok(())
    }
}

/// Forgets the caller's own locality (the default): zone-aware routing is off until
/// `lb_balancer_set_local_locality`. Errors: `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_clear_local_locality(balancer: *const lb_balancer) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle.
        let balancer = unsafe { try_ref(balancer) }?;
        balancer.set_local_locality(None)?;
        Ok(())
    }
}

/// How the caller's own fleet is spread: `spread_len` localities with how many instances run
/// in each (Envoy's local cluster). With `lb_balancer_set_local_locality` it turns on
/// zone-aware routing (options `zone_aware_routing_enabled`, `zone_aware_min_cluster_size`,
/// `zone_aware_by_weight` tune it). NULL with 0 (an empty spread) turns it off. Replaces any
/// spread set before.
///
/// Errors (the balancer is then unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_UTF8`, `LB_RESULT_INVALID_LOCALITY`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_set_local_localities(
    balancer: *const lb_balancer,
    spread: *const lb_locality_count,
    spread_len: usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, and `spread` valid for `spread_len`
        // entries whose localities are valid for their lengths.
        let (balancer, spread) = unsafe {
            (
                try_ref(balancer)?,
                localities_from_c(spread, spread_len, |c| (c.locality, c.locality_len, c.count))?,
            )
        };
        balancer.set_local_localities(spread)?;
        Ok(())
    }
}

/// `lb_balancer_nodes` with places: lists the nodes in insertion order, drained ones
/// included, each with its weight, tag, locality and priority. `nodes_out` (room for
/// `nodes_cap` entries) gets one entry per node; its `id` and `locality` point at
/// NUL-terminated copies in the caller's `strings_buf` (`strings_buf_len` bytes), id then
/// locality, node after node. `*count_out` gets the number of nodes and `*strings_size_out`
/// the bytes used. The entries can be passed straight back to `lb_balancer_update_located`
/// while `strings_buf` lives.
///
/// If `nodes_cap` or `strings_buf_len` is too small: `LB_RESULT_BUFFER_TOO_SMALL`, with the
/// count and bytes needed in `*count_out` and `*strings_size_out` (another thread may change
/// the set before you retry: loop). `NULL, 0, NULL, 0` asks for the sizes (an empty balancer
/// succeeds with both 0). `nodes_out`, `strings_buf`, `*count_out` and `*strings_size_out`
/// must not overlap each other.
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (NULL balancer, `count_out` or `strings_size_out`, or
/// NULL arrays with non-zero sizes), `LB_RESULT_INVALID_LENGTH` (also when the strings' total
/// size would not fit in a `size_t`), `LB_RESULT_BUFFER_TOO_SMALL`. Listing never changes the
/// balancer. Thread-safe: the list is one consistent snapshot.
#[unsafe(no_mangle)]
pub extern "C" fn lb_balancer_located_nodes(
    balancer: *const lb_balancer,
    nodes_out: *mut lb_located_node,
    nodes_cap: usize,
    strings_buf: *mut c_char,
    strings_buf_len: usize,
    count_out: *mut usize,
    strings_size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `nodes_out` writable for `nodes_cap`
        // entries, `strings_buf` for `strings_buf_len` bytes, and the size outputs NULL or
        // writable.
        let (balancer, mut nodes_out, mut buf, count_out, size_out) = unsafe {
            (
                try_ref(balancer)?,
                try_out_slice(nodes_out, nodes_cap)?,
                try_out_slice(strings_buf.cast::<u8>(), strings_buf_len)?,
                try_out(count_out)?,
                try_out(strings_size_out)?,
            )
        };
        let nodes = balancer.nodes();
        let strings = nodes.iter().flat_map(|n| [n.id.len(), n.locality.len()]);
        let needed = ids_size(strings)?;
        if nodes.len() > nodes_out.len() || needed > buf.len() {
            count_out.write(nodes.len());
            size_out.write(needed);
            return Err(lb_result::BufferTooSmall);
        }
        let mut offset = 0;
        for (i, node) in nodes.iter().enumerate() {
            let id = copy_id(&mut buf, &mut offset, &node.id);
            let locality = copy_id(&mut buf, &mut offset, &node.locality);
            nodes_out.write(
                i,
                lb_located_node {
                    id,
                    id_len: node.id.len(),
                    weight: node.weight,
                    tag: node.tag,
                    locality,
                    locality_len: node.locality.len(),
                    priority: node.priority,
                },
            );
        }
        count_out.write(nodes.len());
        size_out.write(needed);
        Ok(())
    }
}
