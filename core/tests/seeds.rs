//! The seed articles' own examples and claims, reproduced exactly.

use liblb_core::{Algorithm, Balancer, Error, Node, Options, SplitMix64, bounded};

fn seeded(seed: u64) -> Options {
    Options {
        seed: Some(seed),
        ..Options::default()
    }
}

fn pick(b: &Balancer, key: &str) -> String {
    b.pick(Some(key.as_bytes())).unwrap().id().to_string()
}

/// Seed 001: NodeA..C with 3 replicas; Key1 -> NodeB, Key2 -> NodeA, Key3 -> NodeC; after
/// removing NodeB: Key1 -> NodeA, Key2 -> NodeA, Key3 -> NodeC.
#[test]
fn seed_001_example() {
    let options = Options {
        vnodes: 3,
        ..Options::default()
    };
    let ring = Balancer::new(Algorithm::Ring, ["NodeA", "NodeB", "NodeC"], options).unwrap();
    assert_eq!(pick(&ring, "Key1"), "NodeB");
    assert_eq!(pick(&ring, "Key2"), "NodeA");
    assert_eq!(pick(&ring, "Key3"), "NodeC");
    ring.remove("NodeB").unwrap();
    assert_eq!(pick(&ring, "Key1"), "NodeA");
    assert_eq!(pick(&ring, "Key2"), "NodeA");
    assert_eq!(pick(&ring, "Key3"), "NodeC");
}
