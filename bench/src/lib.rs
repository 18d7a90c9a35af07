//! Shared inputs for liblb's benchmarks: node lists and pre-generated keys.

use liblb_core::Node;

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
    (0..1000)
        .map(|i| {
            let weight = if spread { i % 100 + 1 } else { 1 };
            Node::new(format!("10.0.{}.{}:80", i / 256, i % 256), weight)
        })
        .collect()
}
