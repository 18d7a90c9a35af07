//! The atomics the lock-free parts use, switched to loom's model-checked ones under `cfg(loom)`.
//!
//! Counters are 64-bit where the target has 64-bit atomics, else pointer-sized (thumbv7em):
//! a 32-bit counter wraps after 2^32 picks, which shifts round robin once by `2^32 mod n`.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::Ordering;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::Ordering;

#[cfg(all(not(loom), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::AtomicU64 as AtomicCounter;
#[cfg(all(not(loom), not(target_has_atomic = "64")))]
pub(crate) use core::sync::atomic::AtomicUsize as AtomicCounter;
#[cfg(all(loom, target_has_atomic = "64"))]
pub(crate) use loom::sync::atomic::AtomicU64 as AtomicCounter;
#[cfg(all(loom, not(target_has_atomic = "64")))]
pub(crate) use loom::sync::atomic::AtomicUsize as AtomicCounter;

/// Takes the next position from a shared counter. `Relaxed` is enough: the counter orders
/// nothing but itself, and every read-modify-write on one atomic sees a single total order, so
/// no two callers get the same position (no lost update; checked by the loom test).
#[inline]
#[allow(
    clippy::unnecessary_cast,
    reason = "AtomicCounter is usize on targets without 64-bit atomics"
)]
pub(crate) fn next_position(counter: &AtomicCounter) -> u64 {
    counter.fetch_add(1, Ordering::Relaxed) as u64
}
