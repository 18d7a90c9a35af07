//! Priority levels, locality weights and zone-aware routing through the `Balancer` (issue 24):
//! the shares Envoy's rules give, measured over seeded picks with chi-square bounds; the EDF
//! sequence of locality-weighted picks against Envoy's plain EDF scheduler; retry orders
//! across levels; keyed algorithms honouring levels; bad input.
//!
//! Expected shares come from Envoy's documentation and sources: the priority table of
//! `docs/root/intro/arch_overview/upstream/load_balancing/priority.rst` (a level with 50% of
//! its hosts healthy takes 70% of the traffic under the 1.4 overprovisioning factor, the rest
//! spills to the next; every level in panic: traffic by host count, health ignored), and
//! zone-aware routing's `calculateLocalityPercentages` / `tryChooseLocalLocalityHosts` in
//! `source/extensions/load_balancing_policies/common/load_balancer_impl.cc`. The unit tests of
//! `priority.rs` and `locality.rs` port Envoy's own test expectations for the formulas.

mod common;

use common::{options, secs};
use liblb_core::locality::Edf;
use liblb_core::{Algorithm, Balancer, Error, ManualClock, Node, Options};
use std::collections::HashMap;
use std::sync::Arc;

fn chi_square(observed: &[usize], expected: &[f64]) -> f64 {
    let n: usize = observed.iter().sum();
    (observed.iter().zip(expected))
        .map(|(o, p)| {
            let e = p * n as f64;
            (*o as f64 - e).powi(2) / e
        })
        .sum()
}

/// 99.9% critical values of chi-square by degrees of freedom (1, 2, 3).
const CRITICAL: [f64; 4] = [0.0, 10.83, 13.82, 16.27];

/// `count` nodes `{prefix}{i}` in `locality` at `priority`.
fn nodes(prefix: &str, count: usize, locality: &str, priority: u32) -> Vec<Node> {
    (0..count)
        .map(|i| Node::new(format!("{prefix}{i}").as_str(), 1).located(locality, priority))
        .collect()
}

fn balancer(algorithm: Algorithm, nodes: Vec<Node>, pairs: &[(&str, &str)]) -> Balancer {
    let clock = Arc::new(ManualClock::new(secs(1000)));
    Balancer::with_clock(algorithm, nodes, options(pairs), clock).unwrap()
}

/// Picks per id prefix (the id up to its digits) over `n` unkeyed picks.
fn by_prefix(b: &Balancer, n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for id in b.pick_n(n).unwrap().ids() {
        let prefix = id.trim_end_matches(|c: char| c.is_ascii_digit());
        *counts.entry(prefix.to_string()).or_insert(0) += 1;
    }
    counts
}

fn shares_of(counts: &HashMap<String, usize>, groups: &[&str]) -> Vec<usize> {
    groups
        .iter()
        .map(|g| counts.get(*g).copied().unwrap_or(0))
        .collect()
}

#[test]
fn a_level_with_every_node_healthy_takes_all_the_traffic() {
    for algorithm in [
        Algorithm::Random,
        Algorithm::RoundRobin,
        Algorithm::LeastRequest,
    ] {
        let mut all = nodes("p", 4, "", 0);
        all.extend(nodes("s", 4, "", 1));
        let b = balancer(algorithm, all, &[]);
        let counts = by_prefix(&b, 1000);
        assert_eq!(counts.get("p"), Some(&1000), "{algorithm}");
    }
}

/// Envoy's priority table: P0 with 5 of 10 healthy → 70% (5/10 × 1.4), P1 30%; with 8 of 10
/// → 100% (capped); with 3 of 10 → 42%.
#[test]
fn traffic_spills_to_the_next_level_as_envoy_computes() {
    for (down, p0_share) in [(5usize, 0.70), (2, 1.0), (7, 0.42), (10, 0.0)] {
        let mut all = nodes("p", 10, "", 0);
        all.extend(nodes("s", 10, "", 1));
        let b = balancer(Algorithm::Random, all, &[]);
        for i in 0..down {
            b.mark_down(&format!("p{i}")).unwrap();
        }
        let n = 40_000;
        let counts = by_prefix(&b, n);
        let observed = shares_of(&counts, &["p", "s"]);
        if p0_share == 1.0 || p0_share == 0.0 {
            let expected = if p0_share == 1.0 { [n, 0] } else { [0, n] };
            assert_eq!(observed, expected, "{down} down");
            continue;
        }
        let chi = chi_square(&observed, &[p0_share, 1.0 - p0_share]);
        assert!(chi < CRITICAL[1], "{down} down: {observed:?}, chi {chi}");
        // Never a down node.
        assert!(b.pick_n(2000).unwrap().ids().all(|id| {
            let i: usize = id[1..].parse().unwrap();
            !(id.starts_with('p') && i < down)
        }));
    }
}

/// Every level in panic (P0 2 of 10 healthy, P1 3 of 10: each below the 50% threshold and
/// their health summing below 100): Envoy spreads by host count, health ignored.
#[test]
fn when_every_level_panics_traffic_follows_the_host_counts() {
    let mut all = nodes("p", 10, "", 0);
    all.extend(nodes("s", 10, "", 1));
    let b = balancer(Algorithm::Random, all, &[]);
    for i in 0..8 {
        b.mark_down(&format!("p{i}")).unwrap();
    }
    for i in 0..7 {
        b.mark_down(&format!("s{i}")).unwrap();
    }
    assert!(b.panic());
    let counts = by_prefix(&b, 20_000);
    let observed = shares_of(&counts, &["p", "s"]);
    let chi = chi_square(&observed, &[0.5, 0.5]);
    assert!(chi < CRITICAL[1], "{observed:?}");
    // Health ignored: down nodes are picked too.
    assert!(b.pick_n(2000).unwrap().ids().any(|id| id == "p0"));
}

/// A level below the panic threshold does not panic while the levels' health sums to 100
/// (P0 4 of 10 healthy: 56%, P1 the remaining 44%, down nodes never picked); it does when
/// the sum falls short (P0 2 of 10: 28, P1 5 of 10: 70, normalised to 29 / 71 with the
/// rounding leftover on P0), and then only P0 ignores health.
#[test]
fn panic_is_decided_per_level() {
    let mut all = nodes("p", 10, "", 0);
    all.extend(nodes("s", 10, "", 1));
    let b = balancer(Algorithm::Random, all, &[]);
    for i in 0..6 {
        b.mark_down(&format!("p{i}")).unwrap();
    }
    assert!(!b.panic());
    let picks = b.pick_n(20_000).unwrap();
    assert!(
        picks
            .ids()
            .all(|id| !(id.starts_with('p') && id[1..].parse::<usize>().unwrap() < 6))
    );
    let counts = by_prefix(&b, 40_000);
    let chi = chi_square(&shares_of(&counts, &["p", "s"]), &[0.56, 0.44]);
    assert!(chi < CRITICAL[1], "{counts:?}");

    for i in 6..8 {
        b.mark_down(&format!("p{i}")).unwrap();
    }
    for i in 0..5 {
        b.mark_down(&format!("s{i}")).unwrap();
    }
    assert!(!b.panic(), "P1 is not in panic");
    let counts = by_prefix(&b, 40_000);
    let chi = chi_square(&shares_of(&counts, &["p", "s"]), &[0.29, 0.71]);
    assert!(chi < CRITICAL[1], "{counts:?}");
    let picks = b.pick_n(20_000).unwrap();
    let ids: Vec<&str> = picks.ids().collect();
    assert!(ids.contains(&"p0"), "P0 in panic picks its down nodes");
    assert!(!ids.contains(&"s0"), "P1 does not");
}

/// Locality-weighted picks follow Envoy's EDF scheduler exactly: the balancer's sequence of
/// localities is `LocalityWrr`'s (`EdfScheduler::createWithPicks` with no pre-picks, then
/// `pickAndAdd` one by one).
#[test]
fn locality_weights_follow_envoys_edf_sequence() {
    let mut all = nodes("a", 1, "r/a", 0);
    all.extend(nodes("b", 1, "r/b", 0));
    all.extend(nodes("c", 1, "r/c", 0));
    let b = balancer(Algorithm::RoundRobin, all, &[]);
    b.set_locality_weights([("r/a", 1), ("r/b", 2), ("r/c", 3)])
        .unwrap();
    let mut edf = Edf::with_picks(&[(0usize, 1.0), (1, 2.0), (2, 3.0)], 0);
    let names = ["a0", "b0", "c0"];
    let mut counts = [0usize; 3];
    for i in 0..600 {
        let expected = names[edf.pick().unwrap()];
        let picked = b.pick(None).unwrap();
        assert_eq!(picked.id(), expected, "pick {i}");
        counts[names.iter().position(|n| *n == expected).unwrap()] += 1;
    }
    assert_eq!(counts, [100, 200, 300]);
}

/// A locality's weight is scaled by its availability: half of "b"'s nodes down → 0.5 × 1.4 =
/// 0.7 of its weight.
#[test]
fn a_localitys_weight_shrinks_with_its_availability() {
    let mut all = nodes("a", 4, "a", 0);
    all.extend(nodes("b", 4, "b", 0));
    let b = balancer(Algorithm::Random, all, &[]);
    b.set_locality_weights([("a", 1), ("b", 1)]).unwrap();
    b.mark_down("b0").unwrap();
    b.mark_down("b1").unwrap();
    // The balancer walks the first 1024 picks of the EDF schedule, then starts over: each
    // rotation gives "b" its share within one pick.
    let rotations = 10;
    let counts = by_prefix(&b, 1024 * rotations);
    let observed = shares_of(&counts, &["a", "b"]);
    let expected_b = (1024 * rotations) as f64 * 0.7 / 1.7;
    assert!(
        (observed[1] as f64 - expected_b).abs() <= rotations as f64,
        "{observed:?}"
    );
}

/// A locality without a weight takes no traffic while a weighted one can.
#[test]
fn an_unweighted_locality_takes_no_traffic() {
    let mut all = nodes("a", 2, "a", 0);
    all.extend(nodes("b", 2, "b", 0));
    let b = balancer(Algorithm::Random, all, &[]);
    b.set_locality_weights([("a", 1)]).unwrap();
    assert_eq!(by_prefix(&b, 500).get("a"), Some(&500));
    b.set_locality_weights(Vec::<(&str, u32)>::new()).unwrap();
    assert_eq!(by_prefix(&b, 4000).len(), 2);
}

fn zoned(pairs: &[(&str, &str)]) -> Balancer {
    let mut all = nodes("a", 2, "r/a", 0);
    all.extend(nodes("b", 2, "r/b", 0));
    all.extend(nodes("c", 2, "r/c", 0));
    balancer(Algorithm::Random, all, pairs)
}

/// Zone-aware routing: the caller's zone "a" has half the callers but a third of the nodes,
/// so it keeps 3333 / 5000 of its requests (66.66%) and sends the rest to "b" and "c" by their
/// spare capacity (833 each of 10000): Envoy's `calculateLocalityPercentages`.
#[test]
fn zone_aware_routing_keeps_what_the_local_zone_can_take() {
    let b = zoned(&[]);
    b.set_local_locality(Some("r/a")).unwrap();
    b.set_local_localities([("r/a", 4), ("r/b", 2), ("r/c", 2)])
        .unwrap();
    let counts = by_prefix(&b, 30_000);
    let observed = shares_of(&counts, &["a", "b", "c"]);
    let local = 0.6666;
    let chi = chi_square(
        &observed,
        &[local, (1.0 - local) / 2.0, (1.0 - local) / 2.0],
    );
    assert!(chi < CRITICAL[2], "{observed:?}, chi {chi}");
}

/// The local zone's share covers its callers': every request stays local.
#[test]
fn zone_aware_routing_stays_local_when_the_zone_has_capacity() {
    let b = zoned(&[]);
    b.set_local_locality(Some("r/b")).unwrap();
    b.set_local_localities([("r/a", 1), ("r/b", 1), ("r/c", 1)])
        .unwrap();
    assert_eq!(by_prefix(&b, 1000).get("b"), Some(&1000));
    // Round robin inside the zone keeps its own rotation: b0, b1, b0, b1, ...
    let rr = {
        let mut all = nodes("a", 2, "r/a", 0);
        all.extend(nodes("b", 2, "r/b", 0));
        all.extend(nodes("c", 2, "r/c", 0));
        balancer(Algorithm::RoundRobin, all, &[])
    };
    rr.set_local_locality(Some("r/b")).unwrap();
    rr.set_local_localities([("r/a", 1), ("r/b", 1), ("r/c", 1)])
        .unwrap();
    let ids: Vec<String> = rr.pick_n(6).unwrap().ids().map(String::from).collect();
    assert_eq!(ids, ["b0", "b1", "b0", "b1", "b0", "b1"]);
}

/// Envoy skips zone-aware routing below `min_cluster_size` usable nodes, and routes only
/// `routing_enabled` percent of the picks.
#[test]
fn zone_aware_routing_is_skipped_as_envoy_skips_it() {
    let spread = [("r/a", 1u64), ("r/b", 1), ("r/c", 1)];
    // 6 nodes, minimum 7: no routing, uniform over the three zones.
    let b = zoned(&[("zone_aware_min_cluster_size", "7")]);
    b.set_local_locality(Some("r/a")).unwrap();
    b.set_local_localities(spread).unwrap();
    let observed = shares_of(&by_prefix(&b, 30_000), &["a", "b", "c"]);
    let third = 1.0 / 3.0;
    assert!(
        chi_square(&observed, &[third; 3]) < CRITICAL[2],
        "{observed:?}"
    );
    // Half of the picks routed (all local), half spread.
    let b = zoned(&[("zone_aware_routing_enabled", "50")]);
    b.set_local_locality(Some("r/a")).unwrap();
    b.set_local_localities(spread).unwrap();
    let observed = shares_of(&by_prefix(&b, 30_000), &["a", "b", "c"]);
    let expected = [0.5 + 0.5 * third, 0.5 * third, 0.5 * third];
    assert!(
        chi_square(&observed, &expected) < CRITICAL[2],
        "{observed:?}"
    );
    // A node down in "a" (1 of 2 usable, 5 in all): below the minimum of 6, no routing.
    let b = zoned(&[]);
    b.set_local_locality(Some("r/a")).unwrap();
    b.set_local_localities(spread).unwrap();
    b.mark_down("a0").unwrap();
    let observed = shares_of(&by_prefix(&b, 30_000), &["a", "b", "c"]);
    assert!(
        chi_square(&observed, &[0.2, 0.4, 0.4]) < CRITICAL[2],
        "{observed:?}"
    );
}

/// Retry orders walk the chosen group, the rest of its level, then the next level.
#[test]
fn attempts_walk_the_zone_then_the_level_then_the_next_level() {
    let mut all = nodes("a", 2, "a", 0);
    all.extend(nodes("b", 2, "b", 0));
    all.extend(nodes("c", 1, "c", 0));
    all.push(Node::new("x0", 1).located("a", 1));
    let b = balancer(
        Algorithm::RoundRobin,
        all,
        &[("zone_aware_min_cluster_size", "1")],
    );
    b.set_local_locality(Some("a")).unwrap();
    b.set_local_localities([("a", 1), ("b", 1), ("c", 1)])
        .unwrap();
    for _ in 0..4 {
        let order: Vec<String> = b
            .attempts(None, 6)
            .unwrap()
            .ids()
            .map(String::from)
            .collect();
        assert_eq!(order.len(), 6, "{order:?}");
        assert!(order[..2].iter().all(|id| id.starts_with('a')), "{order:?}");
        assert!(
            order[2..5]
                .iter()
                .all(|id| !id.starts_with('a') && !id.starts_with('x'))
        );
        assert_eq!(order[5], "x0");
    }
    // A down node moves behind the usable ones.
    b.mark_down("a0").unwrap();
    for _ in 0..4 {
        let order: Vec<String> = b
            .attempts(None, 6)
            .unwrap()
            .ids()
            .map(String::from)
            .collect();
        assert_eq!(order.len(), 6, "{order:?}");
        assert_eq!(order.last().map(String::as_str), Some("a0"), "{order:?}");
    }
}

/// Keyed algorithms honour priority levels: a key stays on its node while its level holds,
/// and when P0 loses health, the keys whose `xxh3(key) % 100 + 1` exceeds P0's load move to
/// P1 (Envoy's `choosePriority` with the request hash).
#[test]
fn keyed_algorithms_route_keys_by_level() {
    for algorithm in [Algorithm::RingHash, Algorithm::Maglev, Algorithm::Ring] {
        let mut all = nodes("p", 3, "x", 0);
        all.extend(nodes("s", 3, "y", 1));
        let b = balancer(algorithm, all, &[]);
        let keys: Vec<String> = (0..500).map(|i| format!("key-{i}")).collect();
        let before: Vec<String> = keys
            .iter()
            .map(|k| b.pick(Some(k.as_bytes())).unwrap().id().to_string())
            .collect();
        assert!(before.iter().all(|id| id.starts_with('p')), "{algorithm}");
        // 1 of 3 healthy: health 46, P1 54.
        b.mark_down("p0").unwrap();
        b.mark_down("p1").unwrap();
        for key in &keys {
            let point = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % 100 + 1;
            let id = b.pick(Some(key.as_bytes())).unwrap().id().to_string();
            if point <= 46 {
                assert!(id.starts_with('p'), "{algorithm} {key}: {id}");
                assert_eq!(id, "p2", "{algorithm} {key}");
            } else {
                assert!(id.starts_with('s'), "{algorithm} {key}: {id}");
            }
            // The same key, the same answer.
            assert_eq!(b.pick(Some(key.as_bytes())).unwrap().id(), id);
        }
    }
}

/// `pick_hash` routes a caller's hash by its own `% 100`, as Envoy's `chooseHostSet(hash)`.
#[test]
fn pick_hash_routes_by_the_callers_hash() {
    let mut all = nodes("p", 3, "", 0);
    all.extend(nodes("s", 3, "", 1));
    let b = balancer(Algorithm::Maglev, all, &[]);
    b.mark_down("p0").unwrap();
    b.mark_down("p1").unwrap();
    for hash in 0..300u64 {
        let id = b.pick_hash(hash).unwrap().id().to_string();
        assert_eq!(id.starts_with('p'), hash % 100 < 46, "{hash}: {id}");
        let attempts = b.attempts_hash(hash, 6).unwrap();
        assert_eq!(attempts.ids().next(), Some(id.as_str()));
    }
}

/// One level and no locality routing: the nodes' localities change nothing.
#[test]
fn localities_alone_change_no_answer() {
    for algorithm in Algorithm::ALL {
        let plain: Vec<Node> = (0..8)
            .map(|i| Node::new(format!("n{i}").as_str(), 1 + i % 3))
            .collect();
        let placed: Vec<Node> = (plain.iter().cloned().enumerate())
            .map(|(i, n)| n.located(["r/a", "r/b", "r/c"][i % 3], 0))
            .collect();
        let a = balancer(algorithm, plain, &[]);
        let b = balancer(algorithm, placed, &[]);
        for i in 0..200 {
            let key = format!("k{i}");
            let key = Some(key.as_bytes());
            assert_eq!(
                a.pick(key).unwrap().id(),
                b.pick(key).unwrap().id(),
                "{algorithm}"
            );
        }
    }
}

/// A locality is at most region/zone/sub_zone: more parts is a specific error, and the
/// balancer keeps working unchanged.
#[test]
fn bad_localities_are_specific_errors_and_change_nothing() {
    let b = balancer(Algorithm::Random, nodes("a", 2, "r/z", 0), &[]);
    let bad = Node::new("x", 1).located("r/z/s/extra", 0);
    assert_eq!(
        b.add(bad.clone()),
        Err(Error::InvalidLocality("r/z/s/extra".into()))
    );
    assert_eq!(
        Balancer::new(Algorithm::Random, [bad], Options::default()).unwrap_err(),
        Error::InvalidLocality("r/z/s/extra".into())
    );
    assert_eq!(
        b.set_locality_weights([("a/b/c/d", 1)]),
        Err(Error::InvalidLocality("a/b/c/d".into()))
    );
    assert_eq!(
        b.set_local_locality(Some("nul\0")),
        Err(Error::InvalidLocality("nul\0".into()))
    );
    assert_eq!(
        b.set_location("a0", "1/2/3/4", 0),
        Err(Error::InvalidLocality("1/2/3/4".into()))
    );
    assert_eq!(
        b.set_location("zz", "r", 0),
        Err(Error::UnknownNode("zz".into()))
    );
    assert_eq!(b.len(), 2);
    assert_eq!(b.nodes()[0].locality, "r/z");
    assert_eq!(b.routing(), Default::default());
    b.pick(None).unwrap();
    // Trailing empty parts name the same locality.
    b.set_locality_weights([("r/z/", 1)]).unwrap();
    assert_eq!(by_prefix(&b, 10).get("a"), Some(&10));
}

/// `nodes()` and `stats()` show where each node is.
#[test]
fn nodes_and_stats_show_locality_and_priority() {
    let b = balancer(
        Algorithm::Random,
        vec![Node::new("a", 1).located("us-east/us-east-1a", 2)],
        &[],
    );
    let info = &b.nodes()[0];
    assert_eq!(
        (info.locality.as_str(), info.priority),
        ("us-east/us-east-1a", 2)
    );
    let stats = &b.stats()[0];
    assert_eq!(
        (stats.locality.as_str(), stats.priority),
        ("us-east/us-east-1a", 2)
    );
}

/// least_connections keeps its index per group: leases held in the local zone steer picks to
/// that zone's least loaded node.
#[test]
fn least_connections_counts_within_the_zone() {
    let mut all = nodes("a", 3, "a", 0);
    all.extend(nodes("b", 3, "b", 0));
    let b = balancer(Algorithm::LeastConnections, all, &[]);
    b.set_local_locality(Some("a")).unwrap();
    b.set_local_localities([("a", 1), ("b", 1)]).unwrap();
    let held: Vec<_> = (0..6).map(|_| b.acquire(None).unwrap()).collect();
    let mut counts = HashMap::new();
    for lease in &held {
        *counts.entry(lease.id().to_string()).or_insert(0) += 1;
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|c| *c == 2), "{counts:?}");
    drop(held);
    assert!(b.stats().iter().all(|s| s.in_flight == 0));
}

/// With panic disabled (`panic_threshold` 0) a level never panics: its down nodes are never
/// picked, the next level takes the spill, and with nothing usable anywhere the pick fails
/// with `NoUsableNodes` (Envoy chooses no host), leaving the balancer working.
#[test]
fn with_panic_disabled_picks_fail_when_no_level_has_a_usable_node() {
    let mut all = nodes("p", 2, "", 0);
    all.extend(nodes("s", 2, "", 1));
    let b = balancer(Algorithm::RoundRobin, all, &[("panic_threshold", "0")]);
    b.mark_down("p0").unwrap();
    b.mark_down("p1").unwrap();
    assert!(b.pick_n(50).unwrap().ids().all(|id| id.starts_with('s')));
    b.mark_down("s0").unwrap();
    b.mark_down("s1").unwrap();
    assert_eq!(b.pick(None).unwrap_err(), Error::NoUsableNodes);
    assert_eq!(b.attempts(None, 4).unwrap_err(), Error::NoUsableNodes);
    b.mark_up("s1").unwrap();
    assert_eq!(b.pick(None).unwrap().id(), "s1");
}
