//! The field-compatible placements through the public API: `pick_hash` agrees with `pick`,
//! bad requests get specific errors, and answers depend only on the set of nodes (except
//! jump, whose buckets are the nodes in insertion order by definition). Key-for-key agreement
//! with the upstream programs is checked by scripts/test-upstream.sh and each module's tests.

use liblb_core::{Algorithm, Balancer, Error, Node, OptionValue, Options};
use xxhash_rust::{xxh3::xxh3_64, xxh64::xxh64};

const PLACEMENTS: [Algorithm; 6] = [
    Algorithm::Ketama,
    Algorithm::NginxChash,
    Algorithm::RingHash,
    Algorithm::Maglev,
    Algorithm::Rendezvous,
    Algorithm::Jump,
];

fn nodes() -> Vec<Node> {
    (1..=7)
        .map(|i| Node::new(format!("10.0.0.{i}:11211"), i % 3 + 1))
        .collect()
}

#[test]
fn pick_hash_is_pick_of_the_keys_hash() {
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.takes_hash()) {
        let b = Balancer::new(algorithm, nodes(), Options::default()).unwrap();
        for i in 0..500 {
            let key = format!("user-{i}");
            // Envoy hashes keys with xxHash64 seed 0; jump defaults to xxh3.
            let h = match algorithm {
                Algorithm::Jump => xxh3_64(key.as_bytes()),
                _ => xxh64(key.as_bytes(), 0),
            };
            let by_key = b.pick(Some(key.as_bytes())).unwrap();
            assert_eq!(
                b.pick_hash(h).unwrap().id(),
                by_key.id(),
                "{algorithm} {key}"
            );
            let order = b.attempts_hash(h, 3).unwrap();
            let by_key = b.attempts(Some(key.as_bytes()), 3).unwrap();
            assert!(order.ids().eq(by_key.ids()), "{algorithm} {key}");
        }
    }
    assert_eq!(
        Algorithm::ALL.iter().filter(|a| a.takes_hash()).count(),
        4,
        "ring_hash, maglev, rendezvous, jump"
    );
}

#[test]
fn pick_hash_elsewhere_is_a_specific_error() {
    let b = Balancer::new(Algorithm::Ketama, nodes(), Options::default()).unwrap();
    let err = b.pick_hash(7).unwrap_err();
    assert_eq!(err, Error::HashUnsupported("ketama"));
    assert!(
        err.to_string()
            .contains("ring_hash, maglev, rendezvous, jump"),
        "{err}"
    );
    assert_eq!(b.attempts_hash(7, 2).unwrap_err(), err);
    let empty = Balancer::new(Algorithm::Maglev, Vec::<Node>::new(), Options::default()).unwrap();
    assert_eq!(empty.pick_hash(7).unwrap_err(), Error::NoNodes);
}

#[test]
fn placements_depend_on_the_set_except_jump() {
    let forward = nodes();
    let backward: Vec<Node> = forward.iter().rev().cloned().collect();
    for algorithm in PLACEMENTS {
        let a = Balancer::new(algorithm, forward.clone(), Options::default()).unwrap();
        let b = Balancer::new(algorithm, backward.clone(), Options::default()).unwrap();
        let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
        let place = |x: &Balancer| -> Vec<String> {
            let picks = x.pick_many(keys.iter().map(|k| k.as_bytes())).unwrap();
            picks.ids().map(str::to_string).collect()
        };
        assert_eq!(
            place(&a) == place(&b),
            algorithm != Algorithm::Jump,
            "{algorithm}"
        );
    }
}

#[test]
fn placement_options_are_checked() {
    let mut options = Options::default();
    for (name, value) in [
        ("table_size", 65536),   // not prime
        ("table_size", 5000017), // prime, over Envoy's largest
        ("min_ring_size", 0),
        ("max_ring_size", 1 << 24),
        ("max_ring_points", 0),
        ("max_ring_points", (1 << 22) + 1),
    ] {
        let err = options.set(name, OptionValue::Int(value)).unwrap_err();
        assert!(
            matches!(err, Error::InvalidOptionValue { option, .. } if option == name),
            "{name}={value}: {err}"
        );
        assert_eq!(options, Options::default(), "{name}={value}");
    }
    // Below min_ring_size: a rule between options, checked by `validate` (any order).
    options.set("max_ring_size", OptionValue::Int(10)).unwrap();
    let err = Balancer::new(Algorithm::RingHash, nodes(), options).unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidOptionValue {
            option: "max_ring_size",
            ..
        }
    ));
    options.set("table_size", OptionValue::Int(251)).unwrap();
    options.set("min_ring_size", OptionValue::Int(64)).unwrap();
    options.set("max_ring_size", OptionValue::Int(128)).unwrap();
    for algorithm in [Algorithm::Maglev, Algorithm::RingHash] {
        let b = Balancer::new(algorithm, nodes(), options).unwrap();
        assert!(b.pick(Some(b"k")).is_ok());
    }
}

/// `max_ring_points` at or above a ring's size keeps the default layout (every answer the
/// same); below it, the ring shrinks and still answers every key from an active node.
#[test]
#[cfg_attr(miri, ignore)] // Hashing-heavy safe code.
fn max_ring_points_shrinks_only_rings_above_it() {
    let weighted: Vec<Node> = (0..50)
        .map(|i| Node::new(format!("10.0.0.{i}:80"), i % 10 + 1))
        .collect();
    // 275 units of weight at 160 vnodes: 44,000 points.
    let with = |points: u64| {
        let mut options = Options::default();
        options
            .set("max_ring_points", OptionValue::Int(points))
            .unwrap();
        Balancer::new(Algorithm::Ring, weighted.clone(), options).unwrap()
    };
    let default = Balancer::new(Algorithm::Ring, weighted.clone(), Options::default()).unwrap();
    let (same, small) = (with(44_000), with(4096));
    let keys: Vec<String> = (0..2000).map(|i| format!("key-{i}")).collect();
    let ids = |b: &Balancer| -> Vec<String> {
        keys.iter()
            .map(|k| b.pick(Some(k.as_bytes())).unwrap().id().to_string())
            .collect()
    };
    assert_eq!(ids(&same), ids(&default));
    let moved = ids(&small)
        .iter()
        .zip(ids(&default))
        .filter(|(a, b)| **a != *b)
        .count();
    assert!(moved > 0 && moved < keys.len(), "{moved}");
}

#[test]
fn drained_and_missing_keys_as_everywhere() {
    for algorithm in PLACEMENTS {
        let b = Balancer::new(algorithm, [("a:1", 1), ("b:1", 0)], Options::default()).unwrap();
        for i in 0..100 {
            assert_eq!(b.pick(Some(format!("{i}").as_bytes())).unwrap().id(), "a:1");
        }
        assert_eq!(
            b.pick(None).unwrap_err(),
            Error::KeyRequired(algorithm.name())
        );
        b.set_weight("a:1", 0).unwrap();
        assert_eq!(b.pick(Some(b"k")).unwrap_err(), Error::NoNodes);
    }
}
