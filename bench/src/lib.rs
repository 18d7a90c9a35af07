//! Shared inputs for liblb's benchmarks: node lists and pre-generated keys.

use liblb_core::Node;
use rand::RngExt;
use rand::rngs::SmallRng;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Node counts every algorithm is measured at.
pub const SIZES: [usize; 3] = [10, 100, 1000];

/// `n` nodes named like addresses, with weights cycling 1..=5 (1 for the unweighted runs).
pub fn nodes(n: usize, weighted: bool) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let weight = if weighted { (i % 5) as u32 + 1 } else { 1 };
            Node::new(format!("10.0.{}.{}:80", i / 256, i % 256), weight)
        })
        .collect()
}

/// 4096 distinct keys shaped like session ids.
pub fn keys() -> Vec<String> {
    (0..4096).map(|i| format!("session-{i:08x}")).collect()
}

/// 1000 nodes named like addresses with weights 1..=100 when `spread` (Dubbo's default weight
/// is 100: weights in the hundreds are normal), else all of weight 1.
pub fn spread_nodes(spread: bool) -> Vec<Node> {
    many_nodes(1000, spread)
}

/// `n` nodes named like addresses with weights cycling 1..=100 when `spread`, else all of
/// weight 1 (the build benchmarks' inputs, up to 10^6 nodes).
pub fn many_nodes(n: usize, spread: bool) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let weight = if spread { (i % 100) as u32 + 1 } else { 1 };
            Node::new(
                format!("10.{}.{}.{}:80", i >> 16, (i >> 8) & 255, i & 255),
                weight,
            )
        })
        .collect()
}

/// Node counts of the build benchmarks (issue 13).
pub const BUILD_SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

/// Algorithms whose build work depends on the weights (points, schedule or table fill per
/// unit of weight); the others build the same structures for any weights, so the build
/// benchmarks run these with weights 1..=100 as well.
pub const WEIGHT_SENSITIVE: [liblb_core::Algorithm; 5] = [
    liblb_core::Algorithm::WeightedRoundRobin,
    liblb_core::Algorithm::Ring,
    liblb_core::Algorithm::NginxChash,
    liblb_core::Algorithm::RingHash,
    liblb_core::Algorithm::Maglev,
];

/// nginx's smooth WRR loop (`ngx_http_upstream_get_peer` with static weights) run for one
/// period: how liblb built the weighted_round_robin schedule before issue 13, O(n·Σw).
pub fn nginx_loop_schedule(weights: &[u32]) -> Vec<u32> {
    let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut schedule = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, w) in weights.iter().enumerate() {
            current[i] += i64::from(*w);
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        schedule.push(best as u32);
    }
    schedule
}

/// Plain power of two choices, the reference a least-request pick is measured against: two
/// distinct uniform draws from a caller-owned `SmallRng` (no atomics) over a
/// `Vec<AtomicUsize>` of in-flight counts; the fewest wins.
pub struct P2c {
    in_flight: Vec<AtomicUsize>,
}

impl P2c {
    /// `n` nodes (at least 2), none in flight.
    pub fn new(n: usize) -> P2c {
        P2c {
            in_flight: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// The less loaded of two distinct uniform draws.
    pub fn pick(&self, rng: &mut SmallRng) -> usize {
        let n = self.in_flight.len();
        let a = rng.random_range(0..n);
        let mut b = rng.random_range(0..n - 1);
        if b >= a {
            b += 1;
        }
        let load = |i: usize| self.in_flight[i].load(Ordering::Relaxed);
        if load(b) < load(a) { b } else { a }
    }

    /// A pick whose request is counted in flight while `work` runs: the least a lease can be.
    pub fn lease<R>(&self, rng: &mut SmallRng, work: impl FnOnce(usize) -> R) -> R {
        let i = self.pick(rng);
        self.in_flight[i].fetch_add(1, Ordering::Relaxed);
        let r = work(i);
        self.in_flight[i].fetch_sub(1, Ordering::Relaxed);
        r
    }
}
