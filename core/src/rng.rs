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
//! holds [`STREAMS`] counters, each on its own cache line: the first thread to draw claims
//! stream 0, whose sequence is exactly the seed's — a seeded balancer used from one thread
//! draws the same numbers in every language, whichever thread that is. Other threads claim a
//! free stream of their own (seeded from `s` and the stream's number, see [`stream_seed`]);
//! when all are claimed they share one, still taking distinct draws from its counter. A thread
//! is known by the address of a thread-local (distinct among live threads; a new thread may
//! inherit a finished one's stream, which only continues that sequence). Without `std` there
//! are no thread-locals: every caller uses stream 0, one shared counter, as before.

use core::cell::Cell;

use crate::sync::{AtomicCounter, AtomicUsize, Ordering, next_position};

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

/// Per-thread streams per generator (stream 0 is the seed's own sequence).
pub(crate) const STREAMS: usize = 8;

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

/// One stream: who claimed it and how far it has drawn. Aligned to 128 bytes (two cache lines,
/// as adjacent-line prefetchers pair them) so streams never share a line.
#[derive(Debug)]
#[repr(align(128))]
struct Stream {
    seed: u64,
    /// The claiming thread's token; 0 while free.
    owner: AtomicUsize,
    draws: AtomicCounter,
}

/// A SplitMix64 whose positions are atomic counters, one stream per thread: `next` is
/// lock-free, `&self`, and threads do not contend on one counter.
#[derive(Debug)]
pub(crate) struct AtomicRng {
    streams: [Stream; STREAMS],
}

impl AtomicRng {
    pub(crate) fn new(seed: u64) -> AtomicRng {
        AtomicRng {
            streams: core::array::from_fn(|j| Stream {
                seed: stream_seed(seed, j),
                owner: AtomicUsize::new(0),
                draws: AtomicCounter::new(0),
            }),
        }
    }

    /// The next 64 random bits from the calling thread's stream; callers sharing a stream get
    /// distinct draws (see `next_position`).
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        let stream = self.stream(thread_token());
        let k = next_position(&stream.draws);
        mix(stream
            .seed
            .wrapping_add(k.wrapping_add(1).wrapping_mul(GAMMA)))
    }

    /// The stream of the thread known by `token`: stream 0 if it is (or becomes) its owner,
    /// else the first it owns or can claim probing from a slot picked by the token, else that
    /// slot shared. A claim is one compare-exchange; `Relaxed` suffices because the owner field
    /// orders nothing else (a lost race only moves the caller on to the next slot).
    #[inline]
    fn stream(&self, token: usize) -> &Stream {
        let home = &self.streams[0];
        if claimed(home, token) {
            return home;
        }
        self.other_stream(token)
    }

    #[cold]
    #[inline(never)]
    fn other_stream(&self, token: usize) -> &Stream {
        let others = &self.streams[1..];
        let start = (mix(token as u64) % others.len() as u64) as usize;
        for i in 0..others.len() {
            let stream = &others[(start + i) % others.len()];
            if claimed(stream, token) {
                return stream;
            }
        }
        &others[start]
    }
}

/// Whether `stream` belongs to `token`, claiming it when free.
#[inline]
fn claimed(stream: &Stream, token: usize) -> bool {
    let owner = stream.owner.load(Ordering::Relaxed);
    owner == token
        || (owner == 0
            && stream
                .owner
                .compare_exchange(0, token, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok())
}

/// A nonzero number that tells the calling thread from every other live thread.
#[cfg(all(feature = "std", not(loom)))]
#[inline]
fn thread_token() -> usize {
    std::thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|t| t as *const u8 as usize)
}

#[cfg(all(feature = "std", loom))]
fn thread_token() -> usize {
    loom::thread_local!(static TOKEN: u8 = 0);
    TOKEN.with(|t| t as *const u8 as usize)
}

/// Without `std` there are no thread-locals: one token, so every caller uses stream 0.
#[cfg(not(feature = "std"))]
#[inline]
fn thread_token() -> usize {
    1
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
    fn streams_are_claimed_once_then_shared() {
        let a = AtomicRng::new(1);
        // Tokens 1..=STREAMS claim every stream exactly once.
        let mut seen = std::vec::Vec::new();
        for token in 1..=STREAMS {
            let s = a.stream(token) as *const Stream;
            assert!(!seen.contains(&s), "token {token} took a claimed stream");
            seen.push(s);
            // Asking again returns the same stream.
            assert!(core::ptr::eq(a.stream(token), s));
        }
        // One more thread shares a stream that exists; its draws still come from a counter.
        let extra = a.stream(STREAMS + 1) as *const Stream;
        assert!(seen.contains(&extra));
        // Distinct streams have distinct seeds.
        let mut seeds: std::vec::Vec<u64> = a.streams.iter().map(|s| s.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), STREAMS);
    }

    #[test]
    fn bounded_stays_in_range() {
        for n in [1usize, 2, 7, 1000] {
            assert_eq!(bounded(0, n), 0);
            assert_eq!(bounded(u64::MAX, n), n - 1);
        }
    }
}
