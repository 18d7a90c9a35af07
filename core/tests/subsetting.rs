//! Subsetting in front of a balancer's algorithm (issue 26): the options, the subset the
//! balancer keeps across membership changes, and picks that never leave it.

use liblb_core::subset::{SubsetAlgorithm, SubsetSpec, subset};
use liblb_core::{Algorithm, Balancer, Error, Node, OptionValue, Options};
use std::collections::BTreeSet;

fn nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node::new(format!("10.0.0.{i}:80"), 1))
        .collect()
}

fn options(pairs: &[(&str, &str)]) -> Options {
    let mut options = Options::default();
    for (name, value) in pairs {
        options.set(name, OptionValue::Str(value)).unwrap();
    }
    options
}

fn ids(balancer: &Balancer) -> Vec<String> {
    balancer.subset().ids().map(str::to_string).collect()
}

/// The balancer's subset is the core function's answer over its nodes, in node order, and
/// every pick (and every retry order) stays inside it, for every unkeyed algorithm.
#[test]
#[cfg_attr(miri, ignore)] // Every unkeyed algorithm's balancer, 200 picks each.
fn picks_stay_in_the_subset_the_core_computes() {
    let nodes = nodes(40);
    let all: Vec<&str> = nodes.iter().map(|n| &*n.id).collect();
    for name in SubsetAlgorithm::NAMES {
        let o = options(&[
            ("subset", name),
            ("subset_size", "6"),
            ("client_index", "3"),
            ("client_count", "10"),
            ("subset_seed", "42"),
            ("seed", "1"),
        ]);
        let spec = SubsetSpec {
            algorithm: SubsetAlgorithm::from_name(name).unwrap(),
            size: 6,
            client_index: 3,
            client_count: 10,
            seed: 42,
        };
        let mut expected: Vec<usize> = subset(&spec, &all).unwrap();
        expected.sort_unstable();
        let expected: Vec<String> = expected.iter().map(|i| all[*i].to_string()).collect();
        for algorithm in Algorithm::ALL.iter().filter(|a| !a.is_keyed()) {
            let b = Balancer::new(*algorithm, nodes.clone(), o).unwrap();
            assert_eq!(ids(&b), expected, "{name} {algorithm:?}");
            let members: BTreeSet<String> = expected.iter().cloned().collect();
            for _ in 0..100 {
                let picked = b.pick(None).unwrap();
                assert!(members.contains(picked.id()), "{name} {algorithm:?}");
                let order = b.attempts(None, 10).unwrap();
                assert!(order.ids().all(|id| members.contains(id)), "{name}");
            }
        }
    }
}

/// A68's rendezvous property through the balancer: removing a member replaces exactly that
/// one; adding a node changes at most one member; draining one (weight 0) is leaving, and
/// restoring its weight brings the same subset back. Marking a member down keeps the subset
/// (health deals with it).
#[test]
fn membership_changes_recompute_the_subset() {
    let o = options(&[
        ("subset", "random"),
        ("subset_size", "5"),
        ("subset_seed", "7"),
    ]);
    let b = Balancer::new(Algorithm::RoundRobin, nodes(30), o).unwrap();
    let before: BTreeSet<String> = ids(&b).into_iter().collect();
    assert_eq!(before.len(), 5);
    let gone = before.iter().next().unwrap().clone();
    b.remove(&gone).unwrap();
    let after: BTreeSet<String> = ids(&b).into_iter().collect();
    assert_eq!(after.len(), 5);
    assert_eq!(before.difference(&after).collect::<Vec<_>>(), [&gone]);
    b.add(Node::new(gone.clone(), 1)).unwrap();
    assert_eq!(ids(&b).into_iter().collect::<BTreeSet<_>>(), before);
    b.add(Node::new("10.0.1.1:80", 1)).unwrap();
    let grown: BTreeSet<String> = ids(&b).into_iter().collect();
    assert!(before.difference(&grown).count() <= 1);
    b.remove("10.0.1.1:80").unwrap();
    b.set_weight(&gone, 0).unwrap();
    assert!(!ids(&b).contains(&gone));
    b.set_weight(&gone, 1).unwrap();
    assert_eq!(ids(&b).into_iter().collect::<BTreeSet<_>>(), before);
    b.mark_down(&gone).unwrap();
    assert_eq!(ids(&b).into_iter().collect::<BTreeSet<_>>(), before);
    for _ in 0..50 {
        assert_ne!(b.pick(None).unwrap().id(), gone);
    }
}

/// A68: without a seed, each client draws its own, so two clients over the same 200 nodes
/// get different subsets (the chance that two random 5-subsets of 200 agree is below 1e-9).
/// With `seed` set, the subset seed derives from it: the same for the same seed.
#[test]
fn random_subsets_differ_per_client_unless_seeded() {
    let o = options(&[("subset", "random"), ("subset_size", "5")]);
    let a = Balancer::new(Algorithm::Random, nodes(200), o).unwrap();
    let b = Balancer::new(Algorithm::Random, nodes(200), o).unwrap();
    assert_ne!(ids(&a), ids(&b));
    assert!(a.options().subset_seed.is_some(), "the drawn seed is kept");
    let seeded = options(&[("subset", "random"), ("subset_size", "5"), ("seed", "9")]);
    let c = Balancer::new(Algorithm::Random, nodes(200), seeded).unwrap();
    let d = Balancer::new(Algorithm::Random, nodes(200), seeded).unwrap();
    assert_eq!(ids(&c), ids(&d));
    assert_eq!(
        c.options().subset_seed,
        None,
        "derived at build, not stored"
    );
}

#[test]
fn bad_subsetting_options_are_refused_by_name() {
    let mut o = Options::default();
    let before = o;
    let refuse = |o: &mut Options, name: &str, value: &str, option: &str| {
        let err = o.set(name, OptionValue::Str(value)).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidOptionValue { option: got, .. } if *got == option),
            "{name}={value}: {err:?}"
        );
    };
    refuse(&mut o, "subset", "aperture2", "subset");
    refuse(&mut o, "subset_size", "0", "subset_size");
    refuse(&mut o, "client_count", "0", "client_count");
    assert_eq!(o, before, "a refused value changes nothing");
    assert!(o.set("subset", OptionValue::Int(1)).is_err());

    // Rules between options are checked when a balancer is made.
    let made = |pairs: &[(&str, &str)], algorithm| {
        Balancer::new(algorithm, nodes(10), options(pairs)).map(|_| ())
    };
    let option_of = |r: Result<(), Error>| match r {
        Err(Error::InvalidOptionValue { option, .. }) => option,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        option_of(made(&[("subset", "random")], Algorithm::Random)),
        "subset_size"
    );
    assert_eq!(
        option_of(made(
            &[("client_index", "4"), ("client_count", "4")],
            Algorithm::Random
        )),
        "client_index"
    );
    for keyed in Algorithm::ALL.iter().filter(|a| a.is_keyed()) {
        let r = made(&[("subset", "random"), ("subset_size", "3")], *keyed);
        assert_eq!(option_of(r), "subset", "{keyed:?}");
    }
    // A table (no balancer to draw a seed) needs one for random subsetting.
    let o = options(&[("subset", "random"), ("subset_size", "3")]);
    let err = liblb_core::Table::build(Algorithm::Random, &o, &nodes(10)).err();
    assert!(
        matches!(
            err,
            Some(Error::InvalidOptionValue {
                option: "subset_seed",
                ..
            })
        ),
        "{err:?}"
    );
}

/// Without subsetting, `subset()` lists every node of weight > 0.
#[test]
fn without_subsetting_every_active_node_is_listed() {
    let mut ns = nodes(4);
    ns[1].weight = 0;
    let b = Balancer::new(Algorithm::RoundRobin, ns, Options::default()).unwrap();
    assert_eq!(ids(&b), ["10.0.0.0:80", "10.0.0.2:80", "10.0.0.3:80"]);
}

/// Finagle's aperture draws its window's two edge backends in proportion to the part of them
/// inside the window (`Ring.pick`): through the balancer, `weighted_random` picks every member
/// in proportion to its fraction (a chi-square test, fixed seed), while `round_robin`, which
/// reads no weights, still takes each member once a round.
#[test]
#[cfg_attr(miri, ignore)] // 40,000 picks.
fn aperture_edges_are_drawn_by_the_part_inside_the_window() {
    let nodes = nodes(25);
    let all: Vec<&str> = nodes.iter().map(|n| &*n.id).collect();
    let spec = SubsetSpec {
        algorithm: SubsetAlgorithm::Aperture,
        size: 4,
        client_index: 1,
        client_count: 7,
        seed: 0,
    };
    let window = liblb_core::subset::subset_weighted(&spec, &all).unwrap();
    assert!(window.iter().any(|(_, f)| *f < 0.99), "{window:?}");
    let o = options(&[
        ("subset", "aperture"),
        ("subset_size", "4"),
        ("client_index", "1"),
        ("client_count", "7"),
        ("seed", "3"),
    ]);
    let b = Balancer::new(Algorithm::WeightedRandom, nodes.clone(), o).unwrap();
    let picks = 40_000;
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..picks {
        *counts
            .entry(b.pick(None).unwrap().id().to_string())
            .or_insert(0u32) += 1;
    }
    let total: f64 = window.iter().map(|(_, f)| f).sum();
    let chi2: f64 = (window.iter())
        .map(|(i, f)| {
            let expected = picks as f64 * f / total;
            let seen = f64::from(*counts.get(all[*i]).unwrap_or(&0));
            (seen - expected).powi(2) / expected
        })
        .sum();
    assert_eq!(counts.len(), window.len(), "{counts:?}");
    // Chi-square critical values at p = 0.001 for 1 to 10 degrees of freedom.
    const CRITICAL: [f64; 10] = [
        10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59,
    ];
    let critical = CRITICAL[window.len() - 2];
    assert!(
        chi2 < critical,
        "chi2 {chi2} >= {critical}, {counts:?} {window:?}"
    );
    let rr = Balancer::new(Algorithm::RoundRobin, nodes.clone(), o).unwrap();
    let mut round: Vec<String> = (0..window.len())
        .map(|_| rr.pick(None).unwrap().id().to_string())
        .collect();
    round.sort();
    let mut members: Vec<String> = window.iter().map(|(i, _)| all[*i].to_string()).collect();
    members.sort();
    assert_eq!(round, members);
}
