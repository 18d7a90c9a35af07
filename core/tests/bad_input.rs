//! Every bad input of DESIGN.md gets its specific error, and leaves the balancer unchanged
//! and working.

use liblb_core::{
    Algorithm, Balancer, Error, HashKind, MAX_BATCH, MAX_VNODES, Node, NodeInfo, OptionValue,
    Options, id_from_utf8,
};

fn ring() -> Balancer {
    Balancer::new(Algorithm::Ring, [("a", 1), ("b", 2)], Options::default()).unwrap()
}

/// Runs a failing operation and checks the error, the unchanged membership and that picks
/// still work with the same answers.
fn rejects(b: &Balancer, expected: Error, op: impl FnOnce(&Balancer) -> Result<(), Error>) {
    let nodes: Vec<NodeInfo> = b.nodes();
    let before: Vec<String> = (0..50)
        .map(|i| {
            b.pick(Some(format!("k{i}").as_bytes()))
                .unwrap()
                .id()
                .to_string()
        })
        .collect();
    assert_eq!(op(b).unwrap_err(), expected);
    assert_eq!(b.nodes(), nodes);
    let after: Vec<String> = (0..50)
        .map(|i| {
            b.pick(Some(format!("k{i}").as_bytes()))
                .unwrap()
                .id()
                .to_string()
        })
        .collect();
    assert_eq!(before, after);
}

#[test]
fn membership_errors_leave_the_balancer_unchanged() {
    let b = ring();
    rejects(&b, Error::EmptyId, |b| b.add(Node::new("", 1)));
    rejects(&b, Error::IdContainsNul("x\0y".into()), |b| {
        b.add(Node::new("x\0y", 1))
    });
    rejects(&b, Error::DuplicateNode("a".into()), |b| {
        b.add(Node::new("a", 5))
    });
    rejects(&b, Error::UnknownNode("zz".into()), |b| b.remove("zz"));
    rejects(&b, Error::UnknownNode("zz".into()), |b| {
        b.set_weight("zz", 3)
    });
    rejects(&b, Error::DuplicateNode("q".into()), |b| {
        b.update([("q", 1), ("r", 1), ("q", 2)])
    });
    rejects(&b, Error::EmptyId, |b| b.update([("q", 1), ("", 1)]));
}

#[test]
fn weight_sums_beyond_32_bits_work() {
    for algorithm in Algorithm::ALL {
        let nodes = [("a", u32::MAX), ("b", u32::MAX), ("c", 1)];
        // xxh3: the ring is capped at MAX_RING_POINTS here, and debug-build SHA-256 is slow;
        // ring_hash would fill Envoy's largest ring (8M points) for such weights: cap it lower.
        let options = Options {
            hash: Some(HashKind::Xxh3),
            max_ring_size: 1 << 16,
            ..Options::default()
        };
        let b = Balancer::new(algorithm, nodes, options).unwrap();
        for i in 0..100 {
            b.pick(Some(format!("{i}").as_bytes())).unwrap();
        }
        assert_eq!(b.attempts(Some(b"k"), 5).unwrap().len(), 3);
    }
}

#[test]
fn empty_and_drained_balancers_say_no_nodes() {
    for algorithm in Algorithm::ALL {
        let b = Balancer::new(algorithm, Vec::<Node>::new(), Options::default()).unwrap();
        assert_eq!(b.pick(Some(b"k")).unwrap_err(), Error::NoNodes);
        assert_eq!(b.attempts(Some(b"k"), 3).unwrap_err(), Error::NoNodes);
        b.add(Node::new("x", 0)).unwrap();
        assert_eq!(b.pick(Some(b"k")).unwrap_err(), Error::NoNodes);
        b.set_weight("x", 1).unwrap();
        assert_eq!(b.pick(Some(b"k")).unwrap().id(), "x");
    }
}

#[test]
fn option_errors_are_specific() {
    let mut o = Options::default();
    assert_eq!(
        o.set("vnodes", OptionValue::Int(0)),
        Err(Error::InvalidVnodes(0))
    );
    assert_eq!(
        o.set("vnodes", OptionValue::Int(u64::from(MAX_VNODES) + 1)),
        Err(Error::InvalidVnodes(u64::from(MAX_VNODES) + 1))
    );
    assert_eq!(
        o.set("vnodes", OptionValue::Str("many"))
            .unwrap_err()
            .code(),
        "LB_INVALID_OPTION_VALUE"
    );
    assert_eq!(
        o.set("hash", OptionValue::Str("md4")),
        Err(Error::UnknownHash("md4".into()))
    );
    assert_eq!(
        o.set("replicas", OptionValue::Int(3)),
        Err(Error::UnknownOption("replicas".into()))
    );
    assert_eq!(o, Options::default(), "failed sets changed the options");
    o.set("vnodes", OptionValue::Str("40")).unwrap();
    o.set("hash", OptionValue::Str("xxh3")).unwrap();
    o.set("seed", OptionValue::Int(u64::MAX)).unwrap();
    assert_eq!((o.vnodes, o.seed), (40, Some(u64::MAX)));

    let bad = Options {
        vnodes: 0,
        ..Options::default()
    };
    assert_eq!(
        Balancer::new(Algorithm::Ring, ["a"], bad).unwrap_err(),
        Error::InvalidVnodes(0)
    );
}

#[test]
fn messages_name_the_problem_and_list_valid_choices() {
    let e = "roundrobin".parse::<Algorithm>().unwrap_err();
    assert_eq!(e, Error::UnknownAlgorithm("roundrobin".into()));
    let text = e.to_string();
    assert!(text.contains("\"roundrobin\"") && text.contains("round_robin, weighted_round_robin"));
    let text = Options::default()
        .set("replicas", OptionValue::Int(1))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("replicas") && text.contains("seed, vnodes, hash"),
        "{text}"
    );
    assert!(
        Error::DuplicateNode("10.0.0.1".into())
            .to_string()
            .contains("10.0.0.1")
    );
    assert_eq!(id_from_utf8(b"\xff\xfe"), Err(Error::InvalidUtf8));
    assert_eq!(id_from_utf8("ok".as_bytes()), Ok("ok"));
}

#[test]
fn construction_errors() {
    assert_eq!(
        Balancer::new(Algorithm::Random, ["a", "b", "a"], Options::default()).unwrap_err(),
        Error::DuplicateNode("a".into())
    );
    assert_eq!(
        Balancer::new(Algorithm::Random, [""], Options::default()).unwrap_err(),
        Error::EmptyId
    );
}

#[test]
fn empty_batches_fail_like_single_picks() {
    let empty = Balancer::new(
        Algorithm::RoundRobin,
        Vec::<Node>::new(),
        Options::default(),
    )
    .unwrap();
    assert_eq!(empty.pick_n(0).unwrap_err(), Error::NoNodes);
    assert_eq!(empty.pick_many([]).unwrap_err(), Error::NoNodes);
    // A huge count on an impossible pick is an error, not an allocation failure.
    assert_eq!(empty.pick_n(usize::MAX).unwrap_err(), Error::NoNodes);
    let ring = ring();
    assert_eq!(ring.pick_n(0).unwrap_err(), Error::KeyRequired("ring"));
    assert_eq!(
        ring.pick_n(usize::MAX).unwrap_err(),
        Error::KeyRequired("ring")
    );
    assert!(ring.pick_many([]).unwrap().is_empty());
}

/// Batches larger than `MAX_BATCH` fail before any pick instead of growing until the allocator
/// aborts the process (`pick_n(2^40)` used to); the round robin position is untouched.
#[test]
fn oversized_batches_fail_before_picking() {
    let rr = Balancer::new(Algorithm::RoundRobin, ["a", "b", "c"], Options::default()).unwrap();
    assert_eq!(rr.pick(None).unwrap().id(), "a");
    for count in [MAX_BATCH + 1, 1 << 40, usize::MAX] {
        assert_eq!(
            rr.pick_n(count).unwrap_err(),
            Error::BatchTooLarge(count as u64)
        );
    }
    // An iterator that claims more keys than the limit is refused up front.
    let endless = std::iter::repeat_n(&b"k"[..], MAX_BATCH + 1);
    assert_eq!(
        rr.pick_many(endless).unwrap_err(),
        Error::BatchTooLarge(MAX_BATCH as u64 + 1)
    );
    assert_eq!(rr.pick(None).unwrap().id(), "b");
    assert!(
        Error::BatchTooLarge(7)
            .to_string()
            .contains(&MAX_BATCH.to_string())
    );
    // The limit itself is a valid request size (not run: 1 GiB); small batches still work.
    assert_eq!(rr.pick_n(2).unwrap().ids().collect::<Vec<_>>(), ["c", "a"]);
}
