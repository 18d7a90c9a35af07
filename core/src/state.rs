//! [`State`]: the lock-free mutable part of a balancer (position counter, random streams)
//! that outlives tables, so the round robin position and the random sequence carry on across
//! membership changes.

#[cfg(feature = "std")]
use crate::Options;
use crate::health::Summary;
use crate::rng::AtomicRng;
use crate::sync::{AtomicCounter, AtomicUsize, next_position};

/// A thread's block of round-robin positions (`thread_rounds`): it serves `next..end`, then
/// claims the next block from the shared counter. Only its owner (one live thread index)
/// touches it, on a line of its own.
#[cfg(feature = "std")]
#[derive(Debug)]
#[repr(align(128))]
struct Block {
    next: AtomicCounter,
    end: AtomicCounter,
}

/// Thread indices with a block of their own; others take positions one by one.
#[cfg(feature = "std")]
const BLOCKS: usize = 7;

/// The per-balancer mutable state: touched by picks with one atomic add, never locked.
#[derive(Debug)]
pub struct State {
    /// Round robin / smooth WRR position.
    pub(crate) position: AtomicCounter,
    /// SplitMix64 for the random algorithms: the seed's sequence for the first thread to draw,
    /// a stream of its own for each other thread (see `rng`).
    pub(crate) rng: AtomicRng,
    /// Health as a whole: whether picks must check nodes, panic (see `health`).
    pub(crate) health: Summary,
    /// Requests in flight on all nodes, kept only with bounded loads (`hash_balance_factor`).
    pub(crate) in_flight: AtomicUsize,
    /// Per-thread blocks of round-robin positions (`thread_rounds`).
    #[cfg(feature = "std")]
    blocks: [Block; BLOCKS],
}

impl State {
    /// State whose random sequence is fixed by `seed`.
    pub fn new(seed: u64) -> State {
        State {
            position: AtomicCounter::new(0),
            rng: AtomicRng::new(seed),
            health: Summary::default(),
            in_flight: AtomicUsize::new(0),
            #[cfg(feature = "std")]
            blocks: core::array::from_fn(|_| Block {
                next: AtomicCounter::new(0),
                end: AtomicCounter::new(0),
            }),
        }
    }

    /// The next round-robin position. `block` 0: from the shared counter, one exact global
    /// order. Otherwise from the calling thread's block of `block` consecutive positions,
    /// claimed from the shared counter with one atomic add when used up: threads do not
    /// contend pick by pick, and each block (a whole number of rounds) gives every node its
    /// exact share. A single thread still sees the global order. Without `std`, or for a
    /// thread without a block, positions come one by one.
    #[inline]
    #[allow(
        clippy::unnecessary_cast,
        reason = "AtomicCounter is usize on targets without 64-bit atomics"
    )]
    pub(crate) fn next_position(&self, block: u64) -> u64 {
        #[cfg(feature = "std")]
        if block > 0 {
            let index = crate::rng::thread_index();
            if let Some(b) = index.and_then(|i| self.blocks.get(i)) {
                use crate::sync::Ordering::Relaxed;
                let (next, end) = (b.next.load(Relaxed), b.end.load(Relaxed));
                if next != end {
                    b.next.store(next.wrapping_add(1), Relaxed);
                    return next as u64;
                }
                let start = self.position.fetch_add(block as _, Relaxed);
                b.next.store(start.wrapping_add(1), Relaxed);
                b.end.store(start.wrapping_add(block as _), Relaxed);
                return start as u64;
            }
        }
        let _ = block;
        next_position(&self.position)
    }

    /// State seeded from OS entropy: two processes (or two balancers) never share a sequence.
    #[cfg(feature = "std")]
    pub fn from_entropy() -> State {
        State::new(entropy())
    }

    /// State for `options`: seeded when `options.seed` is set, else from OS entropy.
    #[cfg(feature = "std")]
    pub fn for_options(options: &Options) -> State {
        options.seed.map_or_else(State::from_entropy, State::new)
    }
}

/// 64 bits from OS entropy.
#[cfg(feature = "std")]
pub(crate) fn entropy() -> u64 {
    let mut bytes = [0u8; 8];
    // getrandom fails only when the OS has no entropy source at all; then fall back to the
    // clock and the address of a local, still distinct per process and per call.
    if getrandom::fill(&mut bytes).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let here = &bytes as *const _ as u64;
        bytes = (now ^ here.rotate_left(32)).to_le_bytes();
    }
    u64::from_le_bytes(bytes)
}
