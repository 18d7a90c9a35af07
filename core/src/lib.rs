//! liblb-core: every load-balancing algorithm of liblb, in one `no_std` crate.
//!
//! The question answered here, millions of times a second, is *which backend should this
//! request go to?* The crate has two layers:
//!
//! - [`Table`] + [`State`] (always available, `no_std` + `alloc`): an immutable selection table
//!   built from a node list, and the lock-free per-balancer state (one atomic position counter,
//!   an atomic SplitMix64 generator with one stream per thread). A pick is one atomic add, or
//!   one hash plus one lookup.
//! - [`Balancer`] (feature `std`): a thread-safe balancer that publishes a new `Table` on every
//!   membership change with `arc-swap`, so readers never lock and never see a half-updated set.
//!   A pick reaches the current table through the calling thread's pin of it (a per-thread
//!   cache checked against the balancer's publish generation, with biased reference counts:
//!   see the `pin` module), so the layer adds no locked instruction to a pick.
//!
//! Algorithms (see [`Algorithm`]): `random`, `weighted_random`, `round_robin`,
//! `weighted_round_robin` (nginx's smooth WRR), `source_hash` and `ring` (the SHA-256 consistent
//! hash ring of seed 001); the load-aware `least_request`, `least_connections`, `peak_ewma` and
//! `prequal` (probes the caller runs: [`Balancer::probe_targets`], [`Balancer::offer_probe`]);
//! and the placements of other systems (`ketama`, `nginx_chash`, `ring_hash`, `maglev`,
//! `rendezvous`, `jump`). Each lives in its own module under `select` with its sources cited.
//!
//! ```
//! use liblb_core::{Algorithm, Balancer, Node, Options};
//!
//! let nodes = [Node::new("NodeA", 1), Node::new("NodeB", 1), Node::new("NodeC", 1)];
//! let ring = Balancer::new(Algorithm::Ring, nodes, Options { vnodes: 3, ..Options::default() })?;
//! assert_eq!(ring.pick(Some(b"Key1"))?.id(), "NodeB"); // seed 001's own example
//! # Ok::<(), liblb_core::Error>(())
//! ```
#![no_std]
// Denied, not forbidden: `pin` (per-thread snapshot pins, see there) is the one module allowed
// unsafe code; everything else stays safe.
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod budget;
mod error;
mod hash;
mod health;
mod hedge;
mod load;
pub mod locality;
mod node;
mod options;
mod orca;
#[cfg(all(feature = "std", not(loom), target_has_atomic = "64"))]
mod pin;
pub mod priority;
mod rng;
mod route;
mod select;
mod server_load;
mod state;
pub mod subset;
mod sync;
mod table;

#[cfg(feature = "std")]
mod balancer;
#[cfg(feature = "std")]
mod request;

pub use budget::{AdaptiveThrottle, RetryBudget, RetryThrottle};
pub use error::{Error, Result};
pub use hash::HashKind;
pub use health::Status;
pub use hedge::{HIGHEST_LATENCY_MS, Hedging, LatencyWindow};
pub use load::{Failure, FailureKind, Load, Outcome, Penalty};
pub use node::{Node, id_from_utf8, locality_key, validate_id, validate_locality};
pub use options::{
    Algorithm, DEFAULT_FAILURE_PENALTY, DEFAULT_MAX_RETRY_AFTER, OptionValue, Options,
};
pub use orca::{
    ENDPOINT_LOAD_METRICS, ENDPOINT_LOAD_METRICS_BIN, HeaderForm, LoadReport, MAX_GROUP_DEPTH,
    parse_orca,
};
pub use rng::{SplitMix64, bounded};
pub use route::Routing;
pub use server_load::{LATENCY_METRIC, Probe, RIF_METRIC, ServerLoad, Started};
pub use state::State;
pub use subset::{SubsetAlgorithm, SubsetSpec};
pub use table::Table;

#[cfg(feature = "std")]
pub use balancer::{
    Balancer, Clock, Lease, ManualClock, MonotonicClock, NodeInfo, NodeStats, Picked, Picks,
};
#[cfg(feature = "std")]
pub use request::{Budget, CallError, Decision, MAX_ATTEMPTS, Request, RetryOn, RetryPolicy, Stop};

/// Default number of virtual nodes per unit of weight on the `ring`.
pub const DEFAULT_VNODES: u32 = 160;
/// Largest accepted `vnodes` value.
pub const MAX_VNODES: u32 = 1 << 16;
/// Largest number of points a ring holds (or one per active node, when there are more nodes);
/// heavier rings are scaled down proportionally, each node keeping at least one point.
pub const MAX_RING_POINTS: u64 = 1 << 22;
/// Most answers one batch call (`pick_many`, `pick_n`) returns: 2^24, as many as a balancer
/// holds nodes (64 MiB of `u32` node indices). Larger requests fail with
/// [`Error::BatchTooLarge`] before any pick, instead of growing until the allocator aborts the
/// process; split bigger batches into several calls. The C, Python and Node limits are this one.
pub const MAX_BATCH: usize = 1 << 24;
/// Largest number of nodes in one balancer (indices are stored as `u32`).
pub const MAX_NODES: usize = 1 << 24;

/// The property tests' configuration: `cases` cases natively, `miri_cases` under Miri, and no
/// regression files (Miri's isolation forbids the working-directory look-up they need).
#[cfg(test)]
pub(crate) fn proptest_config(cases: u32, miri_cases: u32) -> proptest::prelude::ProptestConfig {
    proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { miri_cases } else { cases },
        failure_persistence: None,
        ..Default::default()
    }
}
