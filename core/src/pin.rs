//! Per-thread pins of a balancer's current snapshot: what lets a [`Balancer`] pick cost about
//! what a [`Table`] pick costs, while the answer still keeps its membership alive and can be
//! sent to, and dropped on, any thread.
//!
//! ## Why
//!
//! A pick must hold the snapshot it chose from: a concurrent `remove` must not free the id it
//! returns. arc-swap's `load` does that with a "debt" slot per thread, which costs two locked
//! read-modify-writes per pick (load and guard drop measured 10.3 ns on this project's machine,
//! against 2.7 ns for one `fetch_add`), and an `Arc` clone costs two more (7.0 ns). None of
//! these share a cache line between threads, but a locked instruction is dear on its own.
//!
//! ## How
//!
//! - **A cache per thread, validated by a generation.** Each thread keeps, for each of the last
//!   [`WAYS`] balancers it picked from, a *pin* of that balancer's snapshot. The balancer bumps
//!   its [`Version`] after every publish; a pick reads it (a plain load) and uses the pin when
//!   the generation matches. This is arc-swap's `Cache` idea, made implicit per thread. The
//!   generation is read *before* the snapshot is loaded, so a pin is never newer-labelled than
//!   its snapshot: a publish racing with a refresh leaves a pin that the next pick replaces.
//!   The cache is plain cells in a thread-local without a destructor, so a hit reads it with
//!   no initialisation check and no borrow flag; a second thread-local, registered on the
//!   first miss, empties it when the thread exits. Its ways are type-erased (one cache for
//!   every `T`); a way's `Version<T>` pointer, unique while the way holds it, fixes its `T`.
//! - **Biased reference counting** (Choi, Shull and Torrellas, "Biased Reference Counting:
//!   Minimizing Atomic Operations in Garbage Collection", PACT 2018; the scheme of Swift's
//!   runtime and of CPython's free-threaded build, PEP 703). The thread that made a pin (its
//!   owner) counts its references in a plain field. Any other thread that drops one subtracts
//!   from an atomic field. When the owner's cache lets go of the pin (a newer snapshot came, or
//!   the thread exits) the owner merges its count into the atomic one, flagged `MERGED`; from
//!   then on every release is atomic and the one that brings the count to zero frees the pin.
//!
//! A pick and the drop of its answer on one thread thus take no locked instruction at all, and
//! an answer sent elsewhere stays valid and is released correctly there.
//!
//! ## The trade
//!
//! A thread that stops picking keeps the snapshots its cache pins alive, one per balancer it
//! picked from (at most [`WAYS`]), until it picks from that balancer again, misses on another,
//! or exits. arc-swap documents the same for its `Cache`. A miss also drops the pins of dropped
//! or since-changed balancers. A thread picking from more than [`WAYS`] balancers in turn gets
//! pins for those cached and arc-swap's guard (the cost before pins) for the others; one such
//! miss in eight evicts a way, so balancers in steady use end up cached without churn. Hazard pointers or epochs (`haphazard`, crossbeam-epoch) avoid
//! the retention but need a fence or `membarrier` per protection, a retire list and deferred
//! frees; here a pick costs a thread-local lookup, one plain load and one plain increment.
//!
//! This is the crate's only `unsafe` code. Miri runs its tests (threads, cross-thread drops,
//! thread exit with answers alive elsewhere) in the test command.
//!
//! [`Balancer`]: crate::Balancer
//! [`Table`]: crate::Table
#![allow(unsafe_code)]

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::cell::Cell;
use core::marker::PhantomData;
use core::ops::Deref;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering, fence};

/// How many balancers one thread caches pins for (a linear scan: small on purpose).
pub(crate) const WAYS: usize = 4;

/// Added to the shared count when the owner merges: the count is then `MERGED + references`,
/// and the release that leaves exactly `MERGED` frees the pin. Before the merge the shared
/// count only goes down from zero, so it never equals `MERGED`. The counts are 64-bit on every
/// target (this module needs 64-bit atomics): 2^62 releases, or `mem::forget`s, cannot happen,
/// where 32-bit counts could wrap within days of remote drops and free a pin in use.
const MERGED: i64 = 1 << 62;

/// A publisher's generation counter (a balancer's), for values of type `T`.
// repr(C), generation first: a type-erased way reads it through a `*const AtomicU64`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Version<T> {
    generation: AtomicU64,
    _values: PhantomData<fn() -> T>,
}

impl<T> Default for Version<T> {
    fn default() -> Self {
        Version {
            generation: AtomicU64::new(0),
            _values: PhantomData,
        }
    }
}

impl<T> Version<T> {
    /// Marks a publish: cached pins of earlier values are stale from now on. Call after the new
    /// value is stored. Release: a reader that sees the new generation sees the store.
    pub(crate) fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Marks the publisher gone: its cached pins are stale and a later miss drops them.
    pub(crate) fn retire(&self) {
        self.generation.store(u64::MAX, Ordering::Release);
    }
}

/// A value and its reference counts (heap-allocated; freed by whoever releases last).
struct Pin<T> {
    value: Arc<T>,
    /// The thread that made it (`thread_token`); 0 = no thread: every release is atomic.
    owner: u64,
    /// References counted by the owner (its cache's included). Owner-only, until merged.
    biased: Cell<u64>,
    /// Whether the owner merged its count into `shared`. Owner-only.
    merged: Cell<bool>,
    /// Releases by other threads (each -1) until the merge; then `MERGED` + live references.
    shared: AtomicI64,
}

/// One counted reference to a pinned value: `Deref`, `Send` and `Sync` like an `Arc`.
pub(crate) struct Pinned<T> {
    pin: NonNull<Pin<T>>,
}

// SAFETY: a `Pinned` hands out only `&T` (hence `T: Sync`) and may be dropped on any thread,
// which may free the `T` there (hence `T: Send`). Its owner-only fields are read and written
// only on the thread whose token is `owner` (checked in `drop`); other threads touch only the
// immutable fields and the atomic count.
unsafe impl<T: Send + Sync> Send for Pinned<T> {}
// SAFETY: as above; `&Pinned` gives only `&T` and never releases.
unsafe impl<T: Send + Sync> Sync for Pinned<T> {}

impl<T> Pinned<T> {
    /// The pinned `Arc` itself.
    #[inline]
    pub(crate) fn arc(&self) -> &Arc<T> {
        // SAFETY: this reference keeps the pin alive.
        unsafe { &self.pin.as_ref().value }
    }
}

impl<T> Deref for Pinned<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.arc()
    }
}

impl<T> Drop for Pinned<T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this reference keeps the pin alive until it is released below.
        let pin = unsafe { self.pin.as_ref() };
        // `owner` is checked first, so only the owner reads its own fields. Owner 0 is no
        // thread (see `Pin::owner`): a thread without a token also reads 0, and must not take
        // itself for the owner.
        if pin.owner != 0 && pin.owner == thread_token() && !pin.merged.get() {
            // The owner's cache still holds a reference, so this never reaches zero.
            pin.biased.set(pin.biased.get() - 1);
        } else {
            // SAFETY: this is one of the references `shared` counts (merged, or to be merged).
            unsafe { release_shared(self.pin) }
        }
    }
}

/// Releases one reference through the atomic count; frees the pin if it was the last.
///
/// # Safety
/// `pin` is live and the caller gives up one reference to it.
#[cold]
unsafe fn release_shared<T>(pin: NonNull<Pin<T>>) {
    // SAFETY: live per the contract.
    let shared = unsafe { &pin.as_ref().shared };
    // Release: this thread's reads of the value happen before the free (as in `Arc::drop`).
    if shared.fetch_sub(1, Ordering::Release) == MERGED + 1 {
        fence(Ordering::Acquire);
        // SAFETY: merged and no reference is left, so nothing else can reach the pin.
        drop(unsafe { Box::from_raw(pin.as_ptr()) });
    }
}

/// A number unique to the calling thread for the life of the process (never reused, so a
/// pin's owner cannot be mistaken for a later thread). Constant-initialised and without a
/// destructor: readable at any time, even while the thread's other locals are torn down.
#[inline]
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    std::thread_local!(static TOKEN: Cell<u64> = const { Cell::new(0) });
    // `try_with`: where thread-locals are not native, one may be gone while others are torn
    // down. 0 then means "not the owner", which only sends a release down the atomic path:
    // sound for the owner too (its `biased` still counts the reference; the merge adds both).
    TOKEN
        .try_with(|token| match token.get() {
            0 => {
                // Relaxed: the counter only has to hand out distinct numbers.
                let fresh = NEXT.fetch_add(1, Ordering::Relaxed);
                token.set(fresh);
                fresh
            }
            known => known,
        })
        .unwrap_or(0)
}

/// One cached pin, type-erased: the publisher's `Version<T>` (from `Arc::into_raw`, so its
/// address is unique while the way holds it), the generation read before the value was loaded,
/// and the `Pin<T>`, whose `biased` count includes the way's own reference.
struct Way {
    version: Cell<*const AtomicU64>,
    generation: Cell<u64>,
    pin: Cell<*mut ()>,
    /// Lets go of `version` and `pin` for their `T` (see `release_way`).
    release: Cell<unsafe fn(*const AtomicU64, *mut ())>,
}

/// What an empty way's `release` points at (never called: empty ways are skipped).
unsafe fn release_nothing(_: *const AtomicU64, _: *mut ()) {}

impl Way {
    const fn empty() -> Way {
        Way {
            version: Cell::new(ptr::null()),
            generation: Cell::new(0),
            pin: Cell::new(ptr::null_mut()),
            release: Cell::new(release_nothing),
        }
    }

    /// Whether the way holds a pin whose publisher has published since (or is gone).
    fn stale(&self) -> bool {
        let version = self.version.get();
        // SAFETY: a non-null `version` is kept alive by the way's own `Arc`.
        !version.is_null() && unsafe { &*version }.load(Ordering::Relaxed) != self.generation.get()
    }

    /// Empties the way without letting go of what it held (another way holding the same
    /// references lets go of them).
    fn forget(&self) {
        self.version.set(ptr::null());
        self.pin.set(ptr::null_mut());
    }

    /// Makes this way hold what `other` holds (a copy of the same references, not new ones).
    fn mirror(&self, other: &Way) {
        self.generation.set(other.generation.get());
        self.pin.set(other.pin.get());
        self.release.set(other.release.get());
        self.version.set(other.version.get());
    }

    /// Empties the way and lets go of what it held. The cells are cleared first, so whatever
    /// the release runs (a snapshot's destructors) finds a consistent cache.
    fn clear(&self) {
        let version = self.version.replace(ptr::null());
        if !version.is_null() {
            let pin = self.pin.replace(ptr::null_mut());
            // SAFETY: `release` was set with this way's `T`, and the way's references to
            // `version` and `pin` are handed over (the cells no longer hold them).
            unsafe { (self.release.get())(version, pin) }
        }
    }
}

/// The owner lets go of a way's pin: its count (less the way's own reference) is merged into
/// `shared`, and the way's `Arc<Version<T>>` is dropped.
///
/// # Safety
/// `version` came from `Arc::<Version<T>>::into_raw` and `pin` from a `Box<Pin<T>>` leaked by
/// this thread, each owned by the way being cleared; called on the owner thread.
unsafe fn release_way<T>(version: *const AtomicU64, pin: *mut ()) {
    // SAFETY: per the contract (repr(C): the generation is the `Version`'s first field).
    drop(unsafe { Arc::from_raw(version.cast::<Version<T>>()) });
    let pin = pin.cast::<Pin<T>>();
    // SAFETY: the way's own reference keeps the pin alive until the merge below.
    let shared = {
        let pin = unsafe { &*pin };
        let live = (pin.biased.replace(0) - 1) as i64;
        pin.merged.set(true);
        pin.shared.fetch_add(MERGED + live, Ordering::AcqRel) + live
    };
    if shared == 0 {
        // SAFETY: no reference is left anywhere (AcqRel saw every other release).
        drop(unsafe { Box::from_raw(pin) });
    }
}

std::thread_local! {
    /// The thread's pins: plain cells, no destructor, so a hit costs no initialisation check.
    static WAYS_OF_THREAD: [Way; WAYS] = const { [Way::empty(), Way::empty(), Way::empty(), Way::empty()] };
    /// Misses that found every way holding another live publisher's current value.
    static MISSES: Cell<u32> = const { Cell::new(0) };
    /// Empties the ways when the thread exits (registered by the first miss). It keeps a copy
    /// of every way, so it can let go of the pins even when the ways themselves are gone.
    static CLEAR_AT_EXIT: ClearAtExit = const { ClearAtExit([Way::empty(), Way::empty(), Way::empty(), Way::empty()]) };
}

/// Lets go of the thread's pins when the thread exits.
///
/// Where thread-locals are native (`#[thread_local]`), `WAYS_OF_THREAD` has no destructor and
/// its storage outlives every destructor of the thread, so this empties the ways themselves.
/// Where they are emulated with pthread keys (Android, OpenBSD, ...), each thread-local is a
/// heap value freed by its key's destructor, and destructors run in an order POSIX leaves
/// open: `WAYS_OF_THREAD` may be freed first, its pins never released (issue 19, finding 6).
/// So this thread-local holds its own copy of every way (each way and its copy change together,
/// in `refresh`; a copy holds the same references, not counted twice), and lets go of the pins
/// through the copy when the ways are gone. Either way each pin is let go of exactly once: the
/// copy is forgotten before a way is cleared, and a way is never cleared after its copy was.
struct ClearAtExit([Way; WAYS]);

impl Drop for ClearAtExit {
    fn drop(&mut self) {
        let ways = WAYS_OF_THREAD.try_with(|ways| {
            clear_at_exit(Some(ways), &self.0);
        });
        if ways.is_err() {
            clear_at_exit(None, &self.0);
        }
    }
}

/// Lets go of every pin at thread exit: through `ways` while they exist, else through their
/// copies in `copies`.
fn clear_at_exit(ways: Option<&[Way; WAYS]>, copies: &[Way; WAYS]) {
    match ways {
        Some(ways) => {
            for (way, copy) in ways.iter().zip(copies) {
                copy.forget();
                way.clear();
            }
        }
        None => copies.iter().for_each(Way::clear),
    }
}

/// A reference to the value currently published under `version`, from the thread's cache;
/// `load` fetches the current value when the cached one is stale or missing. `None` when the
/// value is not cached and is not to be (see `refresh`): the caller then holds the value its
/// own way (`Balancer`: arc-swap's guard, the cost before pins).
#[inline]
pub(crate) fn pinned<T: Send + Sync + 'static>(
    version: &Arc<Version<T>>,
    load: impl FnOnce() -> Arc<T>,
) -> Option<Pinned<T>> {
    // Before any load (see the module docs): a pin is never labelled newer than its value.
    let generation = version.generation.load(Ordering::Acquire);
    let key = ptr::from_ref(&version.generation);
    let hit = WAYS_OF_THREAD
        .try_with(|ways| {
            ways.iter()
                .find(|way| way.version.get() == key && way.generation.get() == generation)
                .map(|way| way.pin.get().cast::<Pin<T>>())
        })
        .ok()
        .flatten();
    match hit {
        Some(pin) => {
            // SAFETY: a way whose version is `version` holds a live `Pin<T>` made by this
            // thread (only the owner's cache holds it), so the owner-only count is ours.
            let biased = unsafe { &(*pin).biased };
            biased.set(biased.get() + 1);
            // SAFETY: non-null: the way holds a pin.
            Some(Pinned {
                pin: unsafe { NonNull::new_unchecked(pin) },
            })
        }
        None => refresh(version, generation, load),
    }
}

/// One capacity miss in this many evicts a cached way (see `refresh`).
const EVICT_EVERY: u32 = 8;

/// The miss path: pins the current value in this publisher's way, else a free one, else a
/// stale one (its publisher changed or is gone); the ways of changed or gone publishers are
/// emptied too. When every way holds another live publisher's current value (a thread picking
/// from more than [`WAYS`] balancers in turn), one such miss in [`EVICT_EVERY`] evicts a way in
/// turn and the others return `None`: no allocation churn, and balancers in steady use end up
/// cached. `None` too for a thread whose cache is torn down (exiting).
#[cold]
#[inline(never)]
fn refresh<T: Send + Sync + 'static>(
    version: &Arc<Version<T>>,
    generation: u64,
    load: impl FnOnce() -> Arc<T>,
) -> Option<Pinned<T>> {
    CLEAR_AT_EXIT
        .try_with(|copies| refill(version, generation, load, &copies.0))
        .ok()
        .flatten()
}

/// `refresh` with the thread's copies of its ways (see [`ClearAtExit`]).
fn refill<T: Send + Sync + 'static>(
    version: &Arc<Version<T>>,
    generation: u64,
    load: impl FnOnce() -> Arc<T>,
    copies: &[Way; WAYS],
) -> Option<Pinned<T>> {
    let key = ptr::from_ref(&version.generation);
    let slot = WAYS_OF_THREAD
        .try_with(|ways| {
            (ways.iter().position(|way| way.version.get() == key))
                .or_else(|| ways.iter().position(|way| way.version.get().is_null()))
                .or_else(|| ways.iter().position(Way::stale))
        })
        .ok()?;
    let slot = match slot {
        Some(slot) => slot,
        None => MISSES
            .try_with(|misses| {
                let count = misses.get().wrapping_add(1);
                misses.set(count);
                (count % EVICT_EVERY == 0).then_some((count / EVICT_EVERY) as usize % WAYS)
            })
            .ok()??,
    };
    WAYS_OF_THREAD
        .try_with(|ways| {
            // Empty the chosen way and every stale one first; releasing may run destructors
            // that pick again, which then find only consistent (empty or valid) ways.
            for (i, way) in ways.iter().enumerate() {
                if i == slot || way.stale() {
                    copies[i].forget();
                    way.clear();
                }
            }
            let value = load();
            let way = &ways[slot];
            if !way.version.get().is_null() || ways.iter().any(|way| way.version.get() == key) {
                // A destructor run by `clear` picked meanwhile: it refilled the slot, or cached
                // this very publisher in another way. Keep one way per publisher and let the
                // caller hold the value its own way.
                return None;
            }
            let pin = Box::leak(Box::new(Pin {
                value,
                owner: thread_token(),
                biased: Cell::new(2), // the way's reference and the one returned
                merged: Cell::new(false),
                shared: AtomicI64::new(0),
            }));
            // One raw pointer for the way and the answer alike (no `&mut` is made of it again).
            let pin = NonNull::from(pin);
            way.generation.set(generation);
            way.pin.set(pin.as_ptr().cast());
            way.release.set(release_way::<T>);
            way.version
                .set(Arc::into_raw(Arc::clone(version)).cast::<AtomicU64>());
            copies[slot].mirror(way);
            Some(Pinned { pin })
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::sync::atomic::AtomicUsize;

    /// Counts live values, to check that every pin is freed exactly once.
    struct Counted<'a>(&'a AtomicUsize, u32);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// What a caller of `pinned` holds: the pin, or the value its own way when not cached.
    enum Got<T> {
        Pinned(Pinned<T>),
        Plain(Arc<T>),
    }

    impl<T> Deref for Got<T> {
        type Target = T;
        fn deref(&self) -> &T {
            match self {
                Got::Pinned(pinned) => pinned,
                Got::Plain(value) => value,
            }
        }
    }

    /// A published value: what a balancer holds.
    struct Published {
        live: &'static AtomicUsize,
        version: Arc<Version<Counted<'static>>>,
        current: std::sync::Mutex<Arc<Counted<'static>>>,
    }

    impl Published {
        /// A value counted in `live` (one counter per test: tests run in parallel).
        fn new(live: &'static AtomicUsize, value: u32) -> Published {
            live.fetch_add(1, Ordering::Relaxed);
            Published {
                live,
                version: Arc::default(),
                current: std::sync::Mutex::new(Arc::new(Counted(live, value))),
            }
        }
        fn publish(&self, value: u32) {
            self.live.fetch_add(1, Ordering::Relaxed);
            *self.current.lock().unwrap() = Arc::new(Counted(self.live, value));
            self.version.bump();
        }
        /// The current value: the thread's pin, else (not cached) a plain `Arc`.
        fn get(&self) -> Got<Counted<'static>> {
            let load = || Arc::clone(&self.current.lock().unwrap());
            pinned(&self.version, load).map_or_else(|| Got::Plain(load()), Got::Pinned)
        }
        /// The current value, which must come from the thread's cache.
        fn pin(&self) -> Pinned<Counted<'static>> {
            pinned(&self.version, || Arc::clone(&self.current.lock().unwrap())).unwrap()
        }
    }

    impl Drop for Published {
        fn drop(&mut self) {
            self.version.retire();
        }
    }

    /// Runs `f` on a fresh thread, so its cache starts empty and is torn down at the end
    /// (merging its pins): afterwards only what `f` returned can keep values alive.
    fn on_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn a_pick_sees_every_publish_and_old_answers_stay_valid() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        let live = on_thread(|| {
            let p = Published::new(&LIVE, 1);
            let first = p.pin();
            assert_eq!(first.1, 1);
            p.publish(2);
            let second = p.pin();
            assert_eq!(
                LIVE.load(Ordering::Relaxed),
                2,
                "the first value is still held"
            );
            assert_eq!((first.1, second.1), (1, 2), "an old answer keeps its value");
            drop(first);
            p.publish(3);
            assert_eq!(p.get().1, 3);
            drop(second);
            drop(p);
            LIVE.load(Ordering::Relaxed)
        });
        assert_eq!(live, 1, "only the last value, pinned by the thread's cache");
        // The cache's last pin was merged at thread exit and freed there.
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn answers_dropped_on_other_threads_free_exactly_once() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let p = Arc::new(Published::new(&LIVE, 10));
            // Half are dropped elsewhere while the owner's cache still holds the pin, the rest
            // after it moved on to a newer value (the merge happens between the two halves).
            let mut answers: Vec<_> = (0..8).map(|_| p.pin()).collect();
            let late: Vec<_> = answers.drain(4..).collect();
            let early = answers;
            let t = std::thread::spawn(move || {
                assert!(early.iter().all(|a| a.1 == 10));
                drop(early);
            });
            t.join().unwrap();
            p.publish(11);
            assert_eq!(p.get().1, 11);
            let t = std::thread::spawn(move || {
                assert!(late.iter().all(|a| a.1 == 10));
                drop(late);
            });
            t.join().unwrap();
        });
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_answer_outlives_the_thread_that_picked_it() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        let p = Arc::new(Published::new(&LIVE, 20));
        let q = Arc::clone(&p);
        let answer = on_thread(move || q.pin());
        assert_eq!(answer.1, 20);
        drop(answer);
        drop(p);
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn concurrent_picks_publishes_and_drops() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let p = Arc::new(Published::new(&LIVE, 0));
            let pickers: Vec<_> = (0..2)
                .map(|_| {
                    let p = Arc::clone(&p);
                    std::thread::spawn(move || {
                        let mut kept = Vec::new();
                        for i in 0..50 {
                            let answer = p.pin();
                            if i % 3 == 0 {
                                kept.push(answer);
                            }
                        }
                        kept // dropped on the joining thread
                    })
                })
                .collect();
            for v in 1..20 {
                p.publish(v);
            }
            for picker in pickers {
                let kept = picker.join().unwrap();
                assert!(
                    kept.windows(2).all(|w| w[0].1 <= w[1].1),
                    "values never go back"
                );
            }
        });
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn more_balancers_than_ways_and_dropped_balancers() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let all: Vec<_> = (0..WAYS as u32 + 2)
                .map(|v| Published::new(&LIVE, v))
                .collect();
            for _ in 0..3 {
                for (i, p) in all.iter().enumerate() {
                    assert_eq!(p.get().1, i as u32);
                }
            }
            drop(all);
            // A miss on a new balancer drops the pins of the dropped ones.
            let other = Published::new(&LIVE, 99);
            assert_eq!(other.get().1, 99);
            assert_eq!(LIVE.load(Ordering::Relaxed), 1);
        });
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn capacity_misses_are_not_cached_but_one_in_eight_evicts() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let all: Vec<_> = (0..=WAYS as u32)
                .map(|v| Published::new(&LIVE, v))
                .collect();
            // Fill every way with a live publisher's current value.
            all[..WAYS].iter().for_each(|p| drop(p.pin()));
            let extra = &all[WAYS];
            let load = || Arc::clone(&extra.current.lock().unwrap());
            let got: Vec<bool> = (0..EVICT_EVERY)
                .map(|_| pinned(&extra.version, load).is_some())
                .collect();
            let mut expected = alloc::vec![false; EVICT_EVERY as usize];
            expected[EVICT_EVERY as usize - 1] = true;
            assert_eq!(got, expected, "only the 8th capacity miss evicts a way");
            // Now cached: a hit.
            assert!(pinned(&extra.version, load).is_some());
        });
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    /// A value whose destructor picks from another publisher.
    struct PicksOnDrop {
        value: u32,
        other: Option<Arc<Published>>,
    }

    impl Drop for PicksOnDrop {
        fn drop(&mut self) {
            if let Some(other) = &self.other {
                assert_eq!(other.get().1, 7);
            }
        }
    }

    #[test]
    fn a_destructor_that_picks_while_a_way_is_refreshed() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let other = Arc::new(Published::new(&LIVE, 7));
            let version: Arc<Version<PicksOnDrop>> = Arc::default();
            let current = std::sync::Mutex::new(Arc::new(PicksOnDrop {
                value: 1,
                other: Some(Arc::clone(&other)),
            }));
            let get = || pinned(&version, || Arc::clone(&current.lock().unwrap()));
            assert_eq!(get().unwrap().value, 1);
            // Publish: the old value is now held by this thread's way only.
            *current.lock().unwrap() = Arc::new(PicksOnDrop {
                value: 2,
                other: None,
            });
            version.bump();
            // The refresh empties the way, which frees the old value, whose destructor picks
            // from `other` and takes the emptied way: this pick is then not cached.
            assert!(
                get().is_none(),
                "the way was taken by the destructor's pick"
            );
            // The next miss goes to a free way.
            assert_eq!(get().unwrap().value, 2);
            assert_eq!(other.get().1, 7);
        });
        assert_eq!(
            LIVE.load(Ordering::Relaxed),
            0,
            "every pin freed once the thread is gone"
        );
    }

    #[test]
    fn remote_drops_race_with_owner_picks_and_merges() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let p = Published::new(&LIVE, 0);
            let (answers, received) = std::sync::mpsc::channel::<Pinned<Counted<'static>>>();
            // Drops each answer while the owner keeps picking (biased increments) and, after
            // each publish, merges the previous pin: the atomic releases race with both.
            let dropper = std::thread::spawn(move || {
                for answer in received {
                    drop(answer);
                }
            });
            for v in 1..12 {
                for _ in 0..3 {
                    answers.send(p.pin()).unwrap();
                }
                p.publish(v);
            }
            drop(answers);
            dropper.join().unwrap();
            // The current value, and the previous one, still pinned by this thread's way.
            assert_eq!(LIVE.load(Ordering::Relaxed), 2);
        });
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    /// Counts how often a membership's attachment is dropped: when its snapshot is freed.
    struct Freed(&'static AtomicUsize);

    impl Drop for Freed {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn two_nodes() -> crate::Balancer {
        let options = crate::Options::default();
        crate::Balancer::new(crate::Algorithm::RoundRobin, ["a", "b"], options).unwrap()
    }

    #[test]
    fn an_answer_outlives_its_balancer_and_its_thread() {
        static FREED: AtomicUsize = AtomicUsize::new(0);
        let picked = on_thread(|| {
            let b = two_nodes();
            let picked = b.pick(None).unwrap();
            assert!(picked.attachment(|_| Freed(&FREED)).is_some());
            drop(b);
            picked
        });
        assert_eq!(
            FREED.load(Ordering::Relaxed),
            0,
            "the answer keeps its membership"
        );
        assert_eq!(picked.id(), "a");
        std::thread::spawn(move || drop(picked)).join().unwrap();
        assert_eq!(
            FREED.load(Ordering::Relaxed),
            1,
            "freed with the last answer, once"
        );
    }

    #[test]
    fn a_lease_shares_its_memberships_attachment_with_picks() {
        let b = two_nodes();
        let picked = b.pick(None).unwrap();
        let made = *picked.attachment(|nodes| nodes.len()).unwrap();
        let lease = b.acquire(None).unwrap();
        // Made once per membership: the lease finds the pick's value, not a new one.
        assert_eq!(lease.attachment(|_| usize::MAX), Some(&made));
        assert_eq!(&*lease.members()[lease.index()].id, lease.id());
        b.update(["c"]).unwrap();
        let moved = b.acquire(None).unwrap();
        assert_eq!(moved.attachment(|nodes| nodes.len() + 10), Some(&11));
        assert_eq!((moved.index(), moved.id()), (0, "c"));
    }

    #[test]
    fn a_dropped_balancers_pin_lives_until_the_threads_next_miss() {
        static FREED: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let hot = two_nodes();
            drop(hot.pick(None).unwrap());
            let cold = two_nodes();
            assert!(
                cold.pick(None)
                    .unwrap()
                    .attachment(|_| Freed(&FREED))
                    .is_some()
            );
            drop(cold);
            // Hits on another balancer free nothing: the documented retention.
            drop(hot.pick(None).unwrap());
            assert_eq!(FREED.load(Ordering::Relaxed), 0);
            // A miss sweeps the ways of changed or dropped balancers.
            drop(two_nodes().pick(None).unwrap());
            assert_eq!(FREED.load(Ordering::Relaxed), 1);
        });
        assert_eq!(FREED.load(Ordering::Relaxed), 1);
    }

    /// Issue 19, finding 6: where thread-locals are pthread keys, the ways may be freed before
    /// `ClearAtExit` runs. Its copies of the ways then let go of the pins: simulated here by
    /// forgetting the ways (what freeing their storage does) before the exit path runs.
    #[test]
    fn the_exit_path_lets_go_of_the_pins_when_the_ways_are_gone() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let first = Published::new(&LIVE, 1);
            let second = Published::new(&LIVE, 2);
            drop(first.pin());
            drop(second.pin());
            first.publish(3); // the way keeps pinning value 1 until a miss
            drop(first);
            drop(second);
            assert_eq!(LIVE.load(Ordering::Relaxed), 2, "values 1 and 2 are pinned");
            WAYS_OF_THREAD.with(|ways| ways.iter().for_each(Way::forget));
            CLEAR_AT_EXIT.with(|copies| clear_at_exit(None, &copies.0));
            assert_eq!(LIVE.load(Ordering::Relaxed), 0, "the copies let go of both");
        });
        // The real exit ran after: it found empty ways and empty copies (nothing freed twice).
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }

    /// With the ways there (native thread-locals), the exit path lets go through them, once.
    #[test]
    fn the_exit_path_lets_go_of_each_pin_once() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        on_thread(|| {
            let p = Published::new(&LIVE, 1);
            drop(p.pin());
            drop(p);
            assert_eq!(LIVE.load(Ordering::Relaxed), 1);
            WAYS_OF_THREAD.with(|ways| CLEAR_AT_EXIT.with(|c| clear_at_exit(Some(ways), &c.0)));
            assert_eq!(LIVE.load(Ordering::Relaxed), 0);
        });
        assert_eq!(LIVE.load(Ordering::Relaxed), 0);
    }
}
