//! Randomness: SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
//! generators", OOPSLA 2014), shared lock-free through atomic counters, one stream per thread.
//!
//! The k-th draw of a generator seeded with `s` is `mix(s + k·γ)` (γ = 0x9E3779B97F4A7C15,
//! k = 1, 2, ...), exactly `java.util.SplittableRandom`/`splitmix64.c`. Keeping `k` in an atomic
//! counter makes the generator lock-free, `no_std` and `&self`: callers sharing a counter take
//! distinct `k`s. Unseeded balancers take `s` from OS entropy, so seed 002's bug (every process
//! picking the same "random" node) cannot happen.
//!
//! **Streams.** One counter shared by every thread would serialise them on one cache line (a
//! side-by-side benchmark measured 2 threads at 0.54x the throughput of one). So a generator
//! holds [`STREAMS`] counters, each on its own cache line:
//!
//! - stream 0 is the seed's own sequence; the first thread to draw claims it, so a seeded
//!   balancer used from one thread draws the same numbers in every language, whichever thread
//!   that is;
//! - every live thread has a small process-wide index (the lowest free one, handed back when
//!   the thread ends); thread `i` owns stream `1 + i` of every generator while `1 + i` is below
//!   the last stream. Only its owner touches a stream, so a draw there is a plain load and
//!   store of its counter, no read-modify-write, and no other core ever reads that line;
//! - the last stream is nobody's: threads without a stream of their own (more threads than
//!   streams) share it through an atomic add, which still hands out distinct draws.
//!
//! Streams other than 0 are seeded from `s` and their number ([`stream_seed`]). A thread that
//! takes a finished thread's index continues that thread's streams (the index is handed over
//! with release/acquire ordering, so it sees where they stopped). Without `std` there are no
//! thread-locals: every caller shares stream 0 through an atomic add.

use core::cell::Cell;

use crate::sync::{AtomicCounter, next_position};
#[cfg(feature = "std")]
use crate::sync::{AtomicUsize, Ordering};

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function (a strong 64-bit finaliser).
#[inline]
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A plain (single-owner) SplitMix64; used for key-seeded fallback orders and in tests.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first output is `mix(seed + γ)`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }
}

/// Streams per generator: stream 0 (the seed's own sequence), one per thread index below
/// `STREAMS - 2`, and a last one shared by threads without a stream of their own.
/// Without `std` only stream 0 is used.
#[cfg(feature = "std")]
pub(crate) const STREAMS: usize = 8;
#[cfg(not(feature = "std"))]
pub(crate) const STREAMS: usize = 1;
#[cfg(feature = "std")]
const OVERFLOW: usize = STREAMS - 1;

/// The seed of stream `j`: stream 0 is the generator's seed itself; the others start at a
/// SplitMix64 output of it, far apart on the same γ-walk (overlap needs ~2^64 / draws luck).
#[inline]
pub(crate) fn stream_seed(seed: u64, j: usize) -> u64 {
    if j == 0 {
        seed
    } else {
        mix(seed ^ mix((j as u64).wrapping_mul(GAMMA)))
    }
}

/// One stream: its seed and how far it has drawn. Aligned to 128 bytes (two cache lines, as
/// adjacent-line prefetchers pair them) so streams never share a line.
#[derive(Debug)]
#[repr(align(128))]
struct Stream {
    seed: u64,
    draws: AtomicCounter,
}

impl Stream {
    /// Draw `k` of this stream.
    #[inline]
    fn output(&self, k: u64) -> u64 {
        mix(self
            .seed
            .wrapping_add(k.wrapping_add(1).wrapping_mul(GAMMA)))
    }

    /// The next draw of a stream only its owner touches: a plain load and store, no
    /// read-modify-write (the owner is the only writer and the only reader).
    #[cfg(feature = "std")]
    #[inline]
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize on targets without 64-bit atomics"
    )]
    fn next_owned(&self) -> u64 {
        let k = self.draws.load(Ordering::Relaxed);
        self.draws.store(k.wrapping_add(1), Ordering::Relaxed);
        self.output(k as u64)
    }

    /// The next draw of a shared stream: callers get distinct draws (see `next_position`).
    #[inline]
    fn next_shared(&self) -> u64 {
        self.output(next_position(&self.draws))
    }
}

/// Stream 0's owner (its thread index + 1; 0 while unclaimed), on a line of its own: every
/// draw reads it, only the one claim writes it, so it stays shared in every core's cache.
#[cfg(feature = "std")]
#[derive(Debug)]
#[repr(align(128))]
struct Home(AtomicUsize);

/// A SplitMix64 with a stream per thread: `next` is lock-free and `&self`, and threads neither
/// contend on one counter nor pay a read-modify-write on their own stream.
#[derive(Debug)]
pub(crate) struct AtomicRng {
    #[cfg(feature = "std")]
    home: Home,
    streams: [Stream; STREAMS],
}

impl AtomicRng {
    pub(crate) fn new(seed: u64) -> AtomicRng {
        AtomicRng {
            #[cfg(feature = "std")]
            home: Home(AtomicUsize::new(0)),
            streams: core::array::from_fn(|j| Stream {
                seed: stream_seed(seed, j),
                draws: AtomicCounter::new(0),
            }),
        }
    }

    /// The next 64 random bits from the calling thread's stream.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        match thread_index().and_then(|i| self.owned(i)) {
            Some(stream) => stream.next_owned(),
            None => self.streams[OVERFLOW].next_shared(),
        }
    }

    /// The next 64 random bits: without thread-locals, everyone shares stream 0.
    #[cfg(not(feature = "std"))]
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        self.streams[0].next_shared()
    }

    /// The stream the thread with index `i` owns: stream 0 if it is (or, first to draw,
    /// becomes) its owner, else stream `1 + i` if there is one. The claim is one
    /// compare-exchange; `Relaxed` suffices as it orders nothing else (the loser takes its own
    /// stream, which nobody else touches).
    #[cfg(feature = "std")]
    #[inline]
    fn owned(&self, i: usize) -> Option<&Stream> {
        let token = i + 1;
        let owner = self.home.0.load(Ordering::Relaxed);
        if owner == token
            || (owner == 0
                && (self.home.0)
                    .compare_exchange(0, token, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok())
        {
            return Some(&self.streams[0]);
        }
        self.streams[1..OVERFLOW].get(i)
    }
}

/// The calling thread's index: the lowest not held by a live thread, handed back when it ends
/// (a thread-local's destructor). `None` past the first `usize::BITS` live threads, or while
/// the thread's locals are being destroyed.
#[cfg(all(feature = "std", not(loom)))]
#[inline]
pub(crate) fn thread_index() -> Option<usize> {
    use core::sync::atomic::{AtomicUsize, Ordering};

    /// Bit `i` set: index `i` is held by a live thread.
    static HELD: AtomicUsize = AtomicUsize::new(0);

    struct Index(Option<usize>);

    impl Index {
        fn take() -> Index {
            let mut held = HELD.load(Ordering::Relaxed);
            loop {
                let free = !held;
                if free == 0 {
                    return Index(None);
                }
                let bit = 1 << free.trailing_zeros();
                // Acquire: pairs with the release of the thread that held it before, so this
                // thread sees its streams' counters where that one left them.
                match HELD.compare_exchange_weak(
                    held,
                    held | bit,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Index(Some(free.trailing_zeros() as usize)),
                    Err(now) => held = now,
                }
            }
        }
    }

    impl Drop for Index {
        fn drop(&mut self) {
            if let Some(i) = self.0 {
                HELD.fetch_and(!(1 << i), Ordering::Release);
            }
        }
    }

    std::thread_local!(static INDEX: Index = Index::take());
    INDEX.try_with(|index| index.0).ok().flatten()
}

/// Under loom: indices in the order threads first draw, per model execution.
#[cfg(all(feature = "std", loom))]
pub(crate) fn thread_index() -> Option<usize> {
    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local!(static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    Some(INDEX.with(|i| *i))
}

/// The numbers one pick needs after its first: a plain SplitMix64 seeded by that first draw
/// of the shared generator, `&self` through a `Cell` so several closures can draw from it. A
/// pick then costs one atomic add however many numbers it needs (two candidates, redraws, a
/// retry order), and its first number is still the shared sequence's.
pub(crate) struct Draws(Cell<u64>);

impl Draws {
    /// The numbers that follow `first` (a draw of the shared generator).
    #[inline]
    pub(crate) fn after(first: u64) -> Draws {
        Draws(Cell::new(first))
    }

    /// The next 64 random bits.
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        let state = self.0.get().wrapping_add(GAMMA);
        self.0.set(state);
        mix(state)
    }
}

/// Maps 64 random bits to `0..n` by a 128-bit multiply (Lemire 2019, without the rejection
/// step: the bias is below n / 2^64, far under any test's power to see).
#[inline]
pub fn bounded(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_reference() {
        // splitmix64.c (Vigna) seeded with 0: first outputs.
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(g.next(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn atomic_rng_equals_plain_sequence() {
        let a = AtomicRng::new(42);
        let mut p = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next(), p.next());
        }
    }

    #[test]
    #[cfg(feature = "std")]
    fn first_thread_draws_the_seed_sequence_others_their_own() {
        use std::sync::{Arc, Barrier};
        // Whichever thread draws first owns stream 0, the seed's sequence; a second thread
        // draws another stream's, and the first thread's sequence goes on undisturbed.
        let rng = Arc::new(AtomicRng::new(42));
        let barrier = Arc::new(Barrier::new(2));
        let first = {
            let (rng, barrier) = (Arc::clone(&rng), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let mut draws: std::vec::Vec<u64> = (0..3).map(|_| rng.next()).collect();
                barrier.wait(); // the main thread draws now, while this thread is alive
                barrier.wait();
                draws.extend((0..3).map(|_| rng.next()));
                draws
            })
        };
        barrier.wait();
        let second: std::vec::Vec<u64> = (0..3).map(|_| rng.next()).collect();
        barrier.wait();
        let first = first.join().unwrap();
        let mut plain = SplitMix64::new(42);
        assert_eq!(
            first,
            (0..6).map(|_| plain.next()).collect::<std::vec::Vec<_>>()
        );
        let stream = (1..STREAMS)
            .find(|&j| SplitMix64::new(stream_seed(42, j)).next() == second[0])
            .expect("the second thread draws from a stream of its own");
        let mut plain = SplitMix64::new(stream_seed(42, stream));
        assert_eq!(
            second,
            (0..3).map(|_| plain.next()).collect::<std::vec::Vec<_>>()
        );
    }

    #[test]
    #[cfg(feature = "std")]
    fn streams_are_owned_by_index_home_by_the_first() {
        let a = AtomicRng::new(1);
        // Index 3 draws first: it owns stream 0, for good.
        assert!(core::ptr::eq(a.owned(3).unwrap(), &a.streams[0]));
        assert!(core::ptr::eq(a.owned(3).unwrap(), &a.streams[0]));
        // Every other index below OVERFLOW - 1 owns stream 1 + i.
        for i in (0..OVERFLOW - 1).filter(|&i| i != 3) {
            assert!(
                core::ptr::eq(a.owned(i).unwrap(), &a.streams[1 + i]),
                "index {i}"
            );
        }
        // Past them, no stream of its own: such threads share the last stream's counter.
        assert!(a.owned(OVERFLOW - 1).is_none());
        let before = a.streams[OVERFLOW].draws.load(Ordering::Relaxed);
        let _ = a.streams[OVERFLOW].next_shared();
        assert_eq!(
            a.streams[OVERFLOW].draws.load(Ordering::Relaxed),
            before + 1
        );
        // Distinct streams have distinct seeds.
        let mut seeds: std::vec::Vec<u64> = a.streams.iter().map(|s| s.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), STREAMS);
    }

    #[test]
    #[cfg(feature = "std")]
    fn live_threads_hold_distinct_indices_handed_back_at_exit() {
        use std::sync::{Arc, Barrier};
        // Other tests run on other threads meanwhile, so only distinctness among threads
        // alive together, and the hand-back, can be asserted.
        let barrier = Arc::new(Barrier::new(4));
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    let index = thread_index();
                    barrier.wait(); // all four alive at once
                    index
                })
            })
            .collect();
        let mut held: std::vec::Vec<usize> = threads
            .into_iter()
            .map(|t| t.join().unwrap().unwrap())
            .collect();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), 4, "indices of live threads collide: {held:?}");
        // Their indices went back: a hundred short-lived threads in a row never run out.
        for _ in 0..if cfg!(miri) { 8 } else { 100 } {
            assert!(std::thread::spawn(thread_index).join().unwrap().is_some());
        }
    }

    #[test]
    fn bounded_stays_in_range() {
        for n in [1usize, 2, 7, 1000] {
            assert_eq!(bounded(0, n), 0);
            assert_eq!(bounded(u64::MAX, n), n - 1);
        }
    }
}
