//! The atomics the lock-free parts use, switched to loom's model-checked ones under `cfg(loom)`.
//!
//! Counters are 64-bit where the target has 64-bit atomics, else pointer-sized (thumbv7em):
//! a 32-bit counter wraps after 2^32 picks, which shifts round robin once by `2^32 mod n`.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::Ordering;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::Ordering;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU32, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicUsize};

/// 64-bit words packed and swapped whole (`prequal`'s probe pool), where the target has them.
#[cfg(all(not(loom), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::AtomicU64;
#[cfg(all(loom, target_has_atomic = "64"))]
pub(crate) use loom::sync::atomic::AtomicU64;

/// A signed atomic for smooth-WRR current weights: 64-bit where possible, else pointer-sized.
#[cfg(all(not(loom), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::AtomicI64 as AtomicSigned;
#[cfg(all(not(loom), not(target_has_atomic = "64")))]
pub(crate) use core::sync::atomic::AtomicIsize as AtomicSigned;
#[cfg(all(loom, target_has_atomic = "64"))]
pub(crate) use loom::sync::atomic::AtomicI64 as AtomicSigned;
#[cfg(all(loom, not(target_has_atomic = "64")))]
pub(crate) use loom::sync::atomic::AtomicIsize as AtomicSigned;

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

/// Publication of immutable snapshots: readers load the current one without locking, writers
/// replace it whole. `arc-swap` in real builds; under `cfg(loom)` a loom `RwLock` stands in so
/// the model checker can explore the writers' protocol (the mutex, load, build, store) that
/// `Balancer` builds on it.
#[cfg(all(feature = "std", not(loom)))]
pub(crate) mod publish {
    use alloc::sync::Arc;

    pub(crate) use std::sync::Mutex;
    /// What a load returns: arc-swap's guard (no reference-count traffic on the fast path).
    pub(crate) type Loaded<T> = arc_swap::Guard<Arc<T>>;

    pub(crate) struct Published<T>(arc_swap::ArcSwap<T>);

    impl<T> Published<T> {
        pub(crate) fn new(value: T) -> Self {
            Published(arc_swap::ArcSwap::from_pointee(value))
        }
        #[inline]
        pub(crate) fn load(&self) -> Loaded<T> {
            self.0.load()
        }
        pub(crate) fn load_full(&self) -> Arc<T> {
            self.0.load_full()
        }
        pub(crate) fn store(&self, value: Arc<T>) {
            self.0.store(value)
        }
    }
}

#[cfg(all(feature = "std", loom))]
pub(crate) mod publish {
    use alloc::sync::Arc;

    pub(crate) use loom::sync::Mutex;
    pub(crate) type Loaded<T> = Arc<T>;

    pub(crate) struct Published<T>(loom::sync::RwLock<Arc<T>>);

    impl<T> Published<T> {
        pub(crate) fn new(value: T) -> Self {
            Published(loom::sync::RwLock::new(Arc::new(value)))
        }
        pub(crate) fn load(&self) -> Loaded<T> {
            Arc::clone(&self.0.read().unwrap())
        }
        pub(crate) fn load_full(&self) -> Arc<T> {
            self.load()
        }
        pub(crate) fn store(&self, value: Arc<T>) {
            *self.0.write().unwrap() = value;
        }
    }
}
