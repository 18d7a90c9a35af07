//! Helpers shared by the health and request tests (`health.rs`, `health_races.rs`,
//! `outcomes.rs`, `outliers.rs`, `request.rs`); not every file uses every helper.

use liblb_core::{Algorithm, Balancer, ManualClock, Node, OptionValue, Options, Status};
use std::sync::Arc;
use std::time::Duration;

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Options seeded with 7, with `pairs` set by name, in order.
pub fn options(pairs: &[(&str, &str)]) -> Options {
    let mut options = Options {
        seed: Some(7),
        ..Options::default()
    };
    for (name, value) in pairs {
        options.set(name, OptionValue::Str(value)).unwrap();
    }
    options
}

#[allow(dead_code)]
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A balancer of `n` nodes `n0`, `n1`, ... (weight 1) on a manual clock at 1000 s, with
/// [`options`]`(pairs)`.
#[allow(dead_code)]
pub fn balancer(
    algorithm: Algorithm,
    n: usize,
    pairs: &[(&str, &str)],
) -> (Balancer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(secs(1000)));
    let nodes: Vec<Node> = (0..n)
        .map(|i| Node::new(format!("n{i}").as_str(), 1))
        .collect();
    let b = Balancer::with_clock(algorithm, nodes, options(pairs), clock.clone()).unwrap();
    (b, clock)
}

/// Node `id`'s status now.
#[allow(dead_code)]
pub fn status(b: &Balancer, id: &str) -> Status {
    b.stats().into_iter().find(|s| s.id == id).unwrap().status
}

/// The ids of the ejected nodes, in insertion order.
#[allow(dead_code)]
pub fn ejected(b: &Balancer) -> Vec<String> {
    (b.stats().into_iter())
        .filter(|s| matches!(s.status, Status::Ejected { .. }))
        .map(|s| s.id)
        .collect()
}
