//! [`State`]: the lock-free mutable part of a balancer (position counter, random streams)
//! that outlives tables, so the round robin position and the random sequence carry on across
//! membership changes.

#[cfg(feature = "std")]
use crate::Options;
use crate::health::Summary;
use crate::rng::AtomicRng;
use crate::sync::{AtomicCounter, AtomicUsize};

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
}

impl State {
    /// State whose random sequence is fixed by `seed`.
    pub fn new(seed: u64) -> State {
        State {
            position: AtomicCounter::new(0),
            rng: AtomicRng::new(seed),
            health: Summary::default(),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// State seeded from OS entropy: two processes (or two balancers) never share a sequence.
    #[cfg(feature = "std")]
    pub fn from_entropy() -> State {
        let mut bytes = [0u8; 8];
        // getrandom fails only when the OS has no entropy source at all; then fall back to
        // the clock and the address of a local, still distinct per process and per call.
        if getrandom::fill(&mut bytes).is_err() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let here = &bytes as *const _ as u64;
            bytes = (now ^ here.rotate_left(32)).to_le_bytes();
        }
        State::new(u64::from_le_bytes(bytes))
    }

    /// State for `options`: seeded when `options.seed` is set, else from OS entropy.
    #[cfg(feature = "std")]
    pub fn for_options(options: &Options) -> State {
        options.seed.map_or_else(State::from_entropy, State::new)
    }
}
