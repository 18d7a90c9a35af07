//! The algorithms, each a tiny type that builds from a node list and answers `pick` and
//! `attempts` (first choice, then fallbacks; `attempts(..)[0]` is always what `pick` would
//! have returned from the same state — the retry order is the pick, continued, as in pingora's
//! `BackendSelection::iter`).
//!
//! Selectors see only the *active* nodes (weight > 0) and answer with indices into the full
//! node list, in insertion order.

pub(crate) mod client_side_wrr;
pub(crate) mod continuum;
pub(crate) mod jump;
pub(crate) mod ketama;
pub(crate) mod least_connections;
pub(crate) mod least_request;
pub(crate) mod maglev;
pub(crate) mod nginx_chash;
pub(crate) mod peak_ewma;
pub(crate) mod prequal;
pub(crate) mod random;
pub(crate) mod rendezvous;
pub(crate) mod ring;
pub(crate) mod ring_hash;
pub(crate) mod round_robin;
pub(crate) mod sample;
pub(crate) mod source_hash;
pub(crate) mod weighted_random;
pub(crate) mod weighted_round_robin;

use crate::health::{Gate, Policy, Status, unit};
use crate::load::Load;
use crate::state::State;
use crate::sync::AtomicCounter;
use crate::{Node, Options};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;

/// What a pick may read besides its table: the balancer's state (through `Deref`), the
/// per-node loads (indexed like the node list) and the caller's clock reading.
pub(crate) struct Ctx<'a> {
    pub(crate) state: &'a State,
    pub(crate) loads: &'a [Arc<Load>],
    /// Nanoseconds of the caller's monotonic clock (0 where the caller gives no time).
    pub(crate) now_ns: u64,
    /// How this pick treats health (see `health`).
    pub(crate) gate: Gate,
    pub(crate) policy: &'a Policy,
    /// The round-robin position of the group picked from, when it keeps its own (a locality
    /// or priority group, see `route`); `None`: the balancer's (`State::next_position`).
    pub(crate) position: Option<&'a AtomicCounter>,
}

impl<'a> Ctx<'a> {
    /// A context with no loads and no time, for selectors that read neither.
    #[cfg(test)]
    pub(crate) fn bare(state: &'a State, policy: &'a Policy) -> Ctx<'a> {
        Ctx {
            state,
            loads: &[],
            now_ns: 0,
            gate: Gate::Open,
            policy,
            position: None,
        }
    }

    /// This context for a pick inside a routed group (see `route`): the group's own
    /// round-robin position, and no health check when its level is in panic.
    #[inline]
    pub(crate) fn within<'g>(&self, group: &'g crate::route::Group, panic: bool) -> Ctx<'g>
    where
        'a: 'g,
    {
        Ctx {
            state: self.state,
            loads: self.loads,
            now_ns: self.now_ns,
            gate: if panic { Gate::Open } else { self.gate },
            policy: self.policy,
            position: Some(&group.position),
        }
    }

    /// The next round-robin position: the group's own, or the balancer's (see `position`).
    #[inline]
    pub(crate) fn next_position(&self, block: u64) -> u64 {
        match self.position {
            Some(counter) => crate::sync::next_position(counter),
            None => self.state.next_position(block),
        }
    }

    /// Whether some node may be unusable or warming: picks must check their candidates.
    #[inline]
    pub(crate) fn checking(&self) -> bool {
        matches!(self.gate, Gate::Check { .. })
    }

    /// The health of the node at `index` for this pick (always healthy when not checking).
    #[inline]
    pub(crate) fn status(&self, index: u32) -> Status {
        match self.gate {
            Gate::Open => Status::Healthy,
            Gate::Check { now } => self.loads[index as usize].health().status(now, self.policy),
        }
    }

    /// Whether the node at `index` may be chosen.
    #[inline]
    pub(crate) fn usable(&self, index: u32) -> bool {
        self.status(index).usable()
    }

    /// Whether a candidate drawn at `index` is taken: usable, and if warming with the
    /// probability of its current share (slow start by thinning: a draw proportional to
    /// weight, thinned by share, is proportional to weight x share).
    #[inline]
    pub(crate) fn accept(&self, index: u32, random: impl FnOnce() -> u64) -> bool {
        match self.status(index) {
            Status::Healthy => true,
            Status::Warming { share, .. } => unit(random()) < share,
            Status::Ejected { .. } | Status::Overloaded { .. } | Status::Down => false,
        }
    }
}

impl core::ops::Deref for Ctx<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        self.state
    }
}

/// Draws a health-aware selector makes for one candidate before taking an unusable one (the
/// table then falls back to the first usable node in retry order).
pub(crate) const HEALTH_REDRAWS: usize = 32;

/// One algorithm's immutable selection structure.
pub(crate) trait Select: Sized {
    /// Whether picks read the clock (`Ctx::now_ns`): callers skip reading it otherwise.
    const TIMED: bool = false;

    /// Whether the key reduces to a 64-bit hash that callers may give instead (`by_hash`).
    const HASHED: bool = false;

    /// Whether `pick` itself honours health (`Ctx::usable`, `Ctx::accept`), as the load-aware
    /// algorithms must to compare only usable candidates. For the others the table does it:
    /// unkeyed picks are redrawn until usable, keyed ones walk the key's retry order.
    const HEALTH_AWARE: bool = false;

    /// Builds the structure for `active`: the indices into `nodes` of the nodes with
    /// weight > 0, in insertion order, never empty. `options` are already validated.
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> Self;

    /// [`Select::build`] for selectors that index the nodes' loads (`loads[i]` for `nodes[i]`,
    /// read once: `moved` keeps them current).
    fn build_with_loads(
        nodes: &[Node],
        active: Vec<u32>,
        options: &Options,
        _loads: &[Arc<Load>],
    ) -> Self {
        Self::build(nodes, active, options)
    }

    /// Node `index`'s in-flight count changed (a request started or ended through the table):
    /// for selectors that index counts.
    fn moved(&self, _index: usize, _loads: &[Arc<Load>]) {}

    /// Every count may have changed untold (the table was just published): reread them.
    #[cfg(feature = "std")]
    fn resync(&self, _loads: &[Arc<Load>]) {}

    /// The chosen node's index. `key` is empty for unkeyed algorithms (they ignore it).
    fn pick(&self, key: &[u8], ctx: &Ctx<'_>) -> u32;

    /// Up to `limit` distinct node indices in retry order; `out` starts empty and `limit >= 1`.
    fn attempts(&self, key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>);

    /// The node for a caller's 64-bit key hash, for algorithms whose key reduces to one
    /// (`pick_hash`); `None` for the others.
    fn by_hash(&self, _hash: u64) -> Option<u32> {
        None
    }

    /// `attempts` for a 64-bit key hash; false (and `out` untouched) where `by_hash` is `None`.
    fn attempts_by_hash(&self, _hash: u64, _limit: usize, _out: &mut Vec<u32>) -> bool {
        false
    }

    /// A probe answer from node `index` (its requests in flight and its latency estimate) at
    /// `now_ns`, for selectors that probe (`prequal`); ignored by the others, and for nodes
    /// the selector does not hold.
    fn offer(&self, _index: u32, _rif: u32, _latency: Duration, _now_ns: u64) {}

    /// Takes the whole probes that picks made due (`prequal`'s `probe_rate`); 0 for the others.
    fn take_probes_due(&self) -> usize {
        0
    }
}

/// An algorithm whose key reduces to one 64-bit hash (ring_hash, maglev, rendezvous, jump):
/// it implements the hash-level placement once, and `Select` — the key forms, `by_hash` and
/// `HASHED` — follows from it.
pub(crate) trait HashPlacement: Sized {
    /// As [`Select::build`].
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> Self;

    /// The key's 64-bit hash, exactly as the upstream system computes it.
    fn key_hash(&self, key: &[u8]) -> u64;

    /// The node for a hash.
    fn place(&self, hash: u64) -> u32;

    /// Up to `limit` distinct nodes in retry order for a hash, starting with `place(hash)`.
    fn place_attempts(&self, hash: u64, limit: usize, out: &mut Vec<u32>);
}

impl<T: HashPlacement> Select for T {
    const HASHED: bool = true;

    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> T {
        <T as HashPlacement>::build(nodes, active, options)
    }

    #[inline]
    fn pick(&self, key: &[u8], _ctx: &Ctx<'_>) -> u32 {
        self.place(self.key_hash(key))
    }

    fn attempts(&self, key: &[u8], _ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        self.place_attempts(self.key_hash(key), limit, out);
    }

    fn by_hash(&self, hash: u64) -> Option<u32> {
        Some(self.place(hash))
    }

    fn attempts_by_hash(&self, hash: u64, limit: usize, out: &mut Vec<u32>) -> bool {
        self.place_attempts(hash, limit, out);
        true
    }
}

/// The registration list: from each line come the [`crate::Algorithm`] variant, its name, whether
/// it needs a key, the options it reads, and the [`Selector`] variant that builds and dispatches
/// to its module. Adding an algorithm is one module plus one line here (pydantic-core's
/// `validator_match!` is the model); the C, Python and Node name lists, the CLI help and the
/// tests read [`crate::Algorithm::NAMES`] or are checked against it.
macro_rules! algorithms {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $name:literal, $module:ident::$ty:ident,
            keyed: $keyed:literal, options: [$($option:literal),*];
    )*) => {
        /// The selection algorithms, one per module under `select` (see each variant's source).
        /// Names are the snake_case strings in [`Algorithm::NAMES`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Algorithm {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Algorithm {
            /// Every algorithm's name, in documentation order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// Every algorithm, in the order of [`Algorithm::NAMES`].
            pub const ALL: [Algorithm; Algorithm::NAMES.len()] = [$(Algorithm::$variant),*];

            /// The algorithm's name.
            pub fn name(self) -> &'static str {
                Self::NAMES[self as usize]
            }

            /// Whether the algorithm needs a key to pick (keyless picks fail with
            /// `KeyRequired`).
            pub fn is_keyed(self) -> bool {
                match self {
                    $(Algorithm::$variant => $keyed,)*
                }
            }

            /// Whether the algorithm's picks depend on the time (latency estimates decay), so
            /// callers must pass a clock reading.
            pub fn is_timed(self) -> bool {
                match self {
                    $(Algorithm::$variant => <$module::$ty as Select>::TIMED,)*
                }
            }

            /// Whether the algorithm's own picks honour health (see `Select::HEALTH_AWARE`).
            pub(crate) fn health_aware(self) -> bool {
                match self {
                    $(Algorithm::$variant => <$module::$ty as Select>::HEALTH_AWARE,)*
                }
            }

            /// Whether the algorithm places a caller's 64-bit key hash (`pick_hash`): those
            /// whose key hash is 64 bits wide (ring_hash, maglev, rendezvous, jump).
            pub fn takes_hash(self) -> bool {
                match self {
                    $(Algorithm::$variant => <$module::$ty as Select>::HASHED,)*
                }
            }

            /// The options the algorithm reads (every algorithm accepts every option of
            /// [`crate::Options::NAMES`], so configurations can switch algorithm; the others
            /// are ignored).
            pub fn options(self) -> &'static [&'static str] {
                match self {
                    $(Algorithm::$variant => &[$($option),*],)*
                }
            }
        }

        /// Whichever algorithm's structure a table holds (static dispatch: no vtable on the
        /// hot path).
        pub(crate) enum Selector {
            $($variant($module::$ty),)*
        }

        impl Selector {
            pub(crate) fn build(
                algorithm: Algorithm,
                nodes: &[Node],
                active: Vec<u32>,
                options: &Options,
                loads: &[Arc<Load>],
            ) -> Selector {
                match algorithm {
                    $(Algorithm::$variant => Selector::$variant(Select::build_with_loads(nodes, active, options, loads)),)*
                }
            }

            #[inline]
            pub(crate) fn moved(&self, index: usize, loads: &[Arc<Load>]) {
                match self {
                    $(Selector::$variant(s) => s.moved(index, loads),)*
                }
            }

            #[cfg(feature = "std")]
            pub(crate) fn resync(&self, loads: &[Arc<Load>]) {
                match self {
                    $(Selector::$variant(s) => s.resync(loads),)*
                }
            }

            #[inline]
            pub(crate) fn pick(&self, key: &[u8], ctx: &Ctx<'_>) -> u32 {
                match self {
                    $(Selector::$variant(s) => dispatch_pick(s, key, ctx),)*
                }
            }

            pub(crate) fn attempts(&self, key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
                match self {
                    $(Selector::$variant(s) => s.attempts(key, ctx, limit, out),)*
                }
            }

            pub(crate) fn by_hash(&self, hash: u64) -> Option<u32> {
                match self {
                    $(Selector::$variant(s) => s.by_hash(hash),)*
                }
            }

            pub(crate) fn attempts_by_hash(&self, hash: u64, limit: usize, out: &mut Vec<u32>) -> bool {
                match self {
                    $(Selector::$variant(s) => s.attempts_by_hash(hash, limit, out),)*
                }
            }

            pub(crate) fn offer(&self, index: u32, rif: u32, latency: Duration, now_ns: u64) {
                match self {
                    $(Selector::$variant(s) => s.offer(index, rif, latency, now_ns),)*
                }
            }

            pub(crate) fn take_probes_due(&self) -> usize {
                match self {
                    $(Selector::$variant(s) => s.take_probes_due(),)*
                }
            }
        }
    };
}

algorithms! {
    /// Uniform over nodes with weight > 0 (seed 000 FullRandom).
    Random = "random", random::Random, keyed: false, options: ["seed"];
    /// P(node) = weight / sum, O(1) alias table (seed 000 WeightRandom).
    WeightedRandom = "weighted_random", weighted_random::WeightedRandom, keyed: false, options: ["seed"];
    /// Next node in insertion order, one atomic counter (seed 000 FullRound, seed 002).
    RoundRobin = "round_robin", round_robin::RoundRobin, keyed: false, options: [];
    /// nginx's smooth weighted round robin, lock-free from a precomputed schedule.
    WeightedRoundRobin = "weighted_round_robin", weighted_round_robin::WeightedRoundRobin, keyed: false, options: [];
    /// hash(key) mod n, weighted over cumulative weights (seed 000 source hash).
    SourceHash = "source_hash", source_hash::SourceHash, keyed: true, options: ["hash"];
    /// Consistent-hash ring with virtual nodes; default reproduces seed 001 exactly.
    Ring = "ring", ring::Ring, keyed: true, options: ["vnodes", "hash"];
    /// Envoy's LEAST_REQUEST: the least loaded of `choice_count` weighted draws.
    LeastRequest = "least_request", least_request::LeastRequest, keyed: false, options: ["seed", "choice_count"];
    /// nginx's `least_conn`: fewest in-flight per weight, smooth WRR among ties.
    LeastConnections = "least_connections", least_connections::LeastConnections, keyed: false, options: [];
    /// Finagle/linkerd/tower peak-EWMA latency × load, power of two choices.
    PeakEwma = "peak_ewma", peak_ewma::PeakEwma, keyed: false, options: ["seed", "decay_ms", "initial_latency_ms"];
    /// libmemcached's weighted ketama continuum (MD5), key for key.
    Ketama = "ketama", ketama::Ketama, keyed: true, options: [];
    /// nginx `hash $key consistent` (CRC32 points), key for key.
    NginxChash = "nginx_chash", nginx_chash::NginxChash, keyed: true, options: [];
    /// Envoy's (and gRPC xDS') RING_HASH: xxHash64 points, ring size by Envoy's rule.
    RingHash = "ring_hash", ring_hash::RingHash, keyed: true, options: ["min_ring_size", "max_ring_size"];
    /// Envoy's Maglev lookup table (Eisenbud et al. 2016).
    Maglev = "maglev", maglev::Maglev, keyed: true, options: ["table_size"];
    /// Envoy's weighted rendezvous (highest random weight) hashing.
    Rendezvous = "rendezvous", rendezvous::Rendezvous, keyed: true, options: [];
    /// Lamping & Veach jump consistent hash over nodes in insertion order.
    Jump = "jump", jump::Jump, keyed: true, options: ["hash"];
    /// gRPC's weighted_round_robin (gRFC A58): weights from servers' ORCA load reports.
    ClientSideWrr = "client_side_wrr", client_side_wrr::ClientSideWrr, keyed: false,
        options: ["blackout_period_ms", "weight_expiration_period_ms", "weight_update_period_ms", "error_utilization_penalty"];
    /// Prequal (Wydrowski et al., NSDI '24): probed RIF and latency, hot-cold lexicographic.
    Prequal = "prequal", prequal::Prequal, keyed: false, options: ["seed", "probe_pool_size", "q_rif", "probe_rate", "probe_reuse", "max_probe_age_ms", "probe_remove_rate"];
}

/// One selector's pick from [`Selector::pick`], out of line: the dispatch is then a jump
/// to it, with no frame of its own. Inlined, every pick shared the frame (registers saved,
/// stack reserved) that the largest of them needs, which cost the O(1) picks a sixth.
#[inline(never)]
fn dispatch_pick<S: Select>(s: &S, key: &[u8], ctx: &Ctx<'_>) -> u32 {
    s.pick(key, ctx)
}

/// The weights of the `active` nodes, in the same order.
pub(crate) fn active_weights(nodes: &[Node], active: &[u32]) -> Vec<u32> {
    active.iter().map(|i| nodes[*i as usize].weight).collect()
}

/// Greatest common divisor of all weights (0 for an empty list).
pub(crate) fn gcd_all(weights: impl IntoIterator<Item = u32>) -> u32 {
    fn gcd(mut a: u32, mut b: u32) -> u32 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    weights.into_iter().fold(0, gcd)
}

#[cfg(test)]
mod tests {
    use crate::{Algorithm, Error, Node, Options, State, Table};

    /// The registration list is self-consistent: unique names that parse back, options that
    /// exist, and `is_keyed` that matches what a keyless pick does.
    #[test]
    #[cfg_attr(miri, ignore)] // Hashing-heavy; the unsafe code Miri checks is in dependencies.
    fn the_registration_list_is_consistent() {
        for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
            assert_eq!(algorithm as usize, i);
            assert_eq!(algorithm.name().parse::<Algorithm>(), Ok(algorithm));
            assert_eq!(
                Algorithm::NAMES
                    .iter()
                    .filter(|n| **n == algorithm.name())
                    .count(),
                1
            );
            for option in algorithm.options() {
                assert!(Options::NAMES.contains(option), "{algorithm}: {option}");
            }
            let nodes = [Node::new("a", 1), Node::new("b", 2)];
            let table = Table::build(algorithm, &Options::default(), &nodes).unwrap();
            let keyless = table.pick(None, &State::new(1), 0);
            assert_eq!(
                keyless.is_err_and(|e| e == Error::KeyRequired(algorithm.name())),
                algorithm.is_keyed(),
                "{algorithm}"
            );
        }
    }
}
