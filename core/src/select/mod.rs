//! The algorithms, each a tiny type that builds from a node list and answers `pick` and
//! `attempts` (first choice, then fallbacks; `attempts(..)[0]` is always what `pick` would
//! have returned from the same state — the retry order is the pick, continued, as in pingora's
//! `BackendSelection::iter`).
//!
//! Selectors see only the *active* nodes (weight > 0) and answer with indices into the full
//! node list, in insertion order.

// Field-compatible placements (issue 11), built and tested here; registering them as
// algorithms (options, table, bindings) comes next, so until then only tests and the
// `testing` feature reach them.
#[allow(dead_code)]
pub(crate) mod continuum;
#[allow(dead_code)]
pub(crate) mod jump;
#[allow(dead_code)]
pub(crate) mod ketama;
#[allow(dead_code)]
pub(crate) mod maglev;
#[allow(dead_code)]
pub(crate) mod nginx_chash;
pub(crate) mod random;
#[allow(dead_code)]
pub(crate) mod rendezvous;
pub(crate) mod ring;
#[allow(dead_code)]
pub(crate) mod ring_hash;
pub(crate) mod round_robin;
pub(crate) mod sample;
pub(crate) mod source_hash;
pub(crate) mod weighted_random;
pub(crate) mod weighted_round_robin;

use crate::table::State;
use alloc::vec::Vec;

/// One algorithm's immutable selection structure.
pub(crate) trait Select {
    /// The chosen node's index. `key` is empty for unkeyed algorithms (they ignore it).
    fn pick(&self, key: &[u8], state: &State) -> u32;

    /// Up to `limit` distinct node indices in retry order; `out` starts empty and `limit >= 1`.
    fn attempts(&self, key: &[u8], state: &State, limit: usize, out: &mut Vec<u32>);
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
