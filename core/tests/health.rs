//! Health (issue 12): passive ejection, its cap and backoff, panic, manual down/up for every
//! algorithm, slow start shares over time and bounded loads, all on an injected clock.

mod common;

use common::{options, secs};
use liblb_core::{Algorithm, Balancer, ManualClock, Node, OptionValue, Options, Outcome, Status};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

fn balancer(
    algorithm: Algorithm,
    ids: &[&str],
    pairs: &[(&str, &str)],
) -> (Balancer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(secs(1000)));
    let nodes: Vec<Node> = ids.iter().map(|id| Node::new(*id, 1)).collect();
    let b = Balancer::with_clock(algorithm, nodes, options(pairs), clock.clone()).unwrap();
    (b, clock)
}

/// Counts picks per id over `n` unkeyed picks.
fn shares(b: &Balancer, n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for id in b.pick_n(n).unwrap().ids() {
        *counts.entry(id.to_string()).or_insert(0) += 1;
    }
    counts
}

/// Routes `n` requests through leases; requests to `failing` fail, the others succeed.
fn route(b: &Balancer, n: usize, failing: &str) -> usize {
    let mut to_failing = 0;
    for _ in 0..n {
        let lease = b.acquire(None).unwrap();
        if lease.id() == failing {
            to_failing += 1;
            lease.finish(Outcome::Failure(Duration::from_millis(1)));
        } else {
            lease.finish(Outcome::Success(Duration::from_millis(1)));
        }
    }
    to_failing
}

fn status(b: &Balancer, id: &str) -> Status {
    b.stats().into_iter().find(|s| s.id == id).unwrap().status
}

#[test]
fn a_failing_node_is_ejected_returns_and_is_ejected_twice_as_long() {
    let (b, clock) = balancer(Algorithm::RoundRobin, &["a", "b", "c"], &[]);
    // Round robin sends "a" every third request: after 5 failures it gets nothing more.
    assert_eq!(route(&b, 15, "a"), 5);
    assert_eq!(
        status(&b, "a"),
        Status::Ejected {
            until_ns: secs(1030).as_nanos() as u64
        }
    );
    assert_eq!(route(&b, 300, "a"), 0);
    assert_eq!(b.stats()[0].failures, 5);
    // Back after base_ejection_time (30 s) — no rebuild, weight kept.
    clock.advance(secs(30));
    assert_eq!(status(&b, "a"), Status::Healthy);
    assert!(route(&b, 30, "a") > 0);
    // Still failing: ejected again, for twice as long.
    route(&b, 30, "a");
    let until = match status(&b, "a") {
        Status::Ejected { until_ns } => until_ns,
        other => panic!("{other:?}"),
    };
    let ejected_at = clock.now_ns_for_test();
    assert_eq!(until - ejected_at, secs(60).as_nanos() as u64);
    clock.advance(secs(59));
    assert_eq!(route(&b, 300, "a"), 0);
    clock.advance(secs(1));
    assert!(route(&b, 30, "a") > 0);
    assert_eq!(b.nodes()[0].weight, 1);
}

/// ManualClock's reading, for the assertions above.
trait NowForTest {
    fn now_ns_for_test(&self) -> u64;
}

impl NowForTest for ManualClock {
    fn now_ns_for_test(&self) -> u64 {
        liblb_core::Clock::now_ns(self)
    }
}

#[test]
fn a_success_resets_the_streak() {
    let (b, _) = balancer(Algorithm::RoundRobin, &["a", "b"], &[]);
    for _ in 0..20 {
        for _ in 0..4 {
            b.report("a", Outcome::Failure(Duration::ZERO)).unwrap();
        }
        b.report("a", Outcome::Success(Duration::ZERO)).unwrap();
    }
    assert_eq!(status(&b, "a"), Status::Healthy);
    b.report("a", Outcome::Failure(Duration::ZERO)).unwrap();
    assert_eq!(status(&b, "a"), Status::Healthy);
    for _ in 0..4 {
        b.report("a", Outcome::Failure(Duration::ZERO)).unwrap();
    }
    assert!(matches!(status(&b, "a"), Status::Ejected { .. }));
}

#[test]
fn ejections_are_capped_by_max_ejection_percent_but_one_always_may_go() {
    let ids: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(|s| &**s).collect();
    // 10% of 10 nodes: one at a time.
    let (b, clock) = balancer(Algorithm::Random, &ids, &[]);
    for id in ["n0", "n1"] {
        for _ in 0..5 {
            b.report(id, Outcome::Failure(Duration::ZERO)).unwrap();
        }
    }
    let ejected: Vec<_> = b
        .stats()
        .into_iter()
        .filter(|s| matches!(s.status, Status::Ejected { .. }))
        .map(|s| s.id)
        .collect();
    assert_eq!(ejected, ["n0"]);
    // When n0 returns, n1's next failure ejects it (its streak stood).
    clock.advance(secs(30));
    b.report("n1", Outcome::Failure(Duration::ZERO)).unwrap();
    assert!(matches!(status(&b, "n1"), Status::Ejected { .. }));
    // 10% of 3 nodes is 0, but one node may always be ejected.
    let (b, _) = balancer(Algorithm::Random, &["a", "b", "c"], &[]);
    for _ in 0..5 {
        b.report("b", Outcome::Failure(Duration::ZERO)).unwrap();
    }
    assert!(matches!(status(&b, "b"), Status::Ejected { .. }));
}

#[test]
fn consecutive_failures_zero_never_ejects() {
    let (b, _) = balancer(
        Algorithm::RoundRobin,
        &["a", "b"],
        &[("consecutive_failures", "0")],
    );
    for _ in 0..100 {
        b.report("a", Outcome::Failure(Duration::ZERO)).unwrap();
    }
    assert_eq!(status(&b, "a"), Status::Healthy);
}

#[test]
fn below_the_panic_threshold_traffic_spreads_over_every_node() {
    let ids = ["a", "b", "c", "d"];
    let (b, _) = balancer(
        Algorithm::RoundRobin,
        &ids,
        &[("max_ejection_percent", "100")],
    );
    for id in ["a", "b"] {
        for _ in 0..5 {
            b.report(id, Outcome::Failure(Duration::ZERO)).unwrap();
        }
    }
    // Half healthy is not below 50%: "a" and "b" get nothing.
    let counts = shares(&b, 400);
    assert_eq!((counts.get("a"), counts.get("b")), (None, None));
    assert!(!b.panic());
    for _ in 0..5 {
        b.report("c", Outcome::Failure(Duration::ZERO)).unwrap();
    }
    // One of four healthy (25% < 50%): panic, round robin over all four again.
    let counts = shares(&b, 400);
    assert!(b.panic());
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [100; 4]);
    // panic_threshold 0 never panics: all traffic to the one healthy node.
    let (b, _) = balancer(
        Algorithm::RoundRobin,
        &ids,
        &[("max_ejection_percent", "100"), ("panic_threshold", "0")],
    );
    for id in ["a", "b", "c"] {
        for _ in 0..5 {
            b.report(id, Outcome::Failure(Duration::ZERO)).unwrap();
        }
    }
    assert_eq!(shares(&b, 100).get("d"), Some(&100));
    assert!(!b.panic());
}

#[test]
fn marked_down_nodes_get_no_picks_from_any_algorithm_and_come_back() {
    let ids: Vec<String> = (0..8).map(|i| format!("10.0.0.{i}")).collect();
    let keys: Vec<String> = (0..2000).map(|i| format!("key-{i}")).collect();
    for algorithm in Algorithm::ALL {
        let nodes: Vec<Node> = ids.iter().map(|id| Node::new(id.as_str(), 1)).collect();
        let b = Balancer::new(algorithm, nodes, options(&[])).unwrap();
        let down = "10.0.0.3";
        let place = |b: &Balancer| -> Vec<String> {
            keys.iter()
                .map(|k| b.pick(Some(k.as_bytes())).unwrap().id().to_string())
                .collect()
        };
        let before = place(&b);
        let orders: Vec<Vec<String>> = if algorithm.is_keyed() {
            keys.iter()
                .map(|k| {
                    let order = b.attempts(Some(k.as_bytes()), ids.len()).unwrap();
                    order.ids().map(str::to_string).collect()
                })
                .collect()
        } else {
            Vec::new()
        };
        b.mark_down(down).unwrap();
        assert_eq!(status(&b, down), Status::Down);
        let during = place(&b);
        assert!(
            during.iter().all(|id| id != down),
            "{algorithm}: picked a down node"
        );
        if algorithm.is_keyed() {
            for (i, key) in keys.iter().enumerate() {
                if before[i] == down {
                    // Its keys go to the next usable node in their own retry order.
                    let next = orders[i].iter().find(|id| *id != down).unwrap();
                    assert_eq!(&during[i], next, "{algorithm}: {key}");
                } else {
                    assert_eq!(during[i], before[i], "{algorithm}: {key} moved");
                }
            }
            // Retry orders list usable nodes first.
            let order = b.attempts(Some(b"key-1"), ids.len()).unwrap();
            assert_eq!(order.ids().last(), Some(down), "{algorithm}");
        } else {
            let order = b.attempts(None, ids.len()).unwrap();
            assert_eq!(order.ids().last(), Some(down), "{algorithm}");
        }
        b.mark_up(down).unwrap();
        assert_eq!(status(&b, down), Status::Healthy);
        if algorithm.is_keyed() {
            assert_eq!(place(&b), before, "{algorithm}: keys did not come back");
        } else {
            assert!(shares(&b, 2000).contains_key(down), "{algorithm}");
        }
    }
}

/// Pearson's chi-square statistic of `observed` against `expected` probabilities.
fn chi_square(observed: &[usize], expected: &[f64]) -> f64 {
    let n: usize = observed.iter().sum();
    observed
        .iter()
        .zip(expected)
        .map(|(o, p)| {
            let e = p * n as f64;
            (*o as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn weighted_picks_stay_proportional_over_the_usable_nodes() {
    // 99.9% critical values: 2 degrees of freedom 13.82.
    for algorithm in [
        Algorithm::WeightedRandom,
        Algorithm::WeightedRoundRobin,
        Algorithm::LeastRequest,
    ] {
        let clock = Arc::new(ManualClock::new(secs(1)));
        let nodes = [
            Node::new("w1", 1),
            Node::new("w2", 2),
            Node::new("w3", 3),
            Node::new("w4", 4),
        ];
        let b = Balancer::with_clock(algorithm, nodes, options(&[]), clock).unwrap();
        b.mark_down("w2").unwrap();
        let counts = shares(&b, 80_000);
        assert!(!counts.contains_key("w2"));
        let observed = ["w1", "w3", "w4"].map(|id| counts[id]);
        let stat = chi_square(&observed, &[1.0 / 8.0, 3.0 / 8.0, 4.0 / 8.0]);
        assert!(stat < 13.82, "{algorithm}: {observed:?}, chi-square {stat}");
    }
}

#[test]
fn round_robin_skips_a_down_node_in_order() {
    let (b, _) = balancer(Algorithm::RoundRobin, &["a", "b", "c"], &[]);
    b.mark_down("b").unwrap();
    let picks: Vec<String> = b.pick_n(6).unwrap().ids().map(str::to_string).collect();
    assert!(picks.windows(2).all(|w| w[0] != w[1]), "{picks:?}");
    assert!(picks.iter().all(|id| id != "b"));
}

#[test]
fn slow_start_ramps_a_new_node_from_min_weight_to_its_weight() {
    let clock = Arc::new(ManualClock::new(secs(100)));
    let opts = options(&[
        ("slow_start_window_ms", "10000"),
        ("min_weight_percent", "10"),
    ]);
    for algorithm in [
        Algorithm::Random,
        Algorithm::WeightedRandom,
        Algorithm::RoundRobin,
    ] {
        clock.set(secs(100));
        let b = Balancer::with_clock(algorithm, ["a", "b"], opts, clock.clone()).unwrap();
        // Initial members do not warm up.
        assert_eq!(status(&b, "a"), Status::Healthy);
        b.add(Node::new("c", 1)).unwrap();
        // Share of "c" = max(10%, t / 10 s): its pick probability is share / (2 + share).
        // 99.9% critical value, 1 degree of freedom: 10.83.
        for (t, share) in [(0u64, 0.1f64), (5, 0.5), (8, 0.8), (10, 1.0)] {
            clock.set(secs(100 + t));
            let counts = shares(&b, 60_000);
            let c = counts.get("c").copied().unwrap_or(0);
            let p = share / (2.0 + share);
            let stat = chi_square(&[c, 60_000 - c], &[p, 1.0 - p]);
            assert!(
                stat < 10.83,
                "{algorithm} t={t}s: c got {c}, expected p {p}, chi {stat}"
            );
            match status(&b, "c") {
                Status::Warming { share: s, .. } => assert!((f64::from(s) - share).abs() < 1e-3),
                Status::Healthy => assert_eq!(t, 10),
                other => panic!("{other:?}"),
            }
        }
    }
}

#[test]
fn a_node_back_from_ejection_warms_up() {
    let (b, clock) = balancer(
        Algorithm::Random,
        &["a", "b"],
        &[("slow_start_window_ms", "10000"), ("aggression", "1")].map(|(k, v)| {
            if k == "aggression" {
                ("slow_start_aggression", v)
            } else {
                (k, v)
            }
        }),
    );
    for _ in 0..5 {
        b.report("a", Outcome::Failure(Duration::ZERO)).unwrap();
    }
    clock.advance(secs(30) + Duration::from_secs(2));
    match status(&b, "a") {
        Status::Warming { share, .. } => assert!((share - 0.2).abs() < 1e-3, "{share}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bounded_loads_cap_every_node_and_leave_other_keys_alone() {
    let ids: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
    let keys: Vec<String> = (0..500).map(|i| format!("user-{i}")).collect();
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.is_keyed()) {
        let nodes: Vec<Node> = ids.iter().map(|id| Node::new(id.as_str(), 1)).collect();
        let plain = Balancer::new(algorithm, nodes.clone(), options(&[])).unwrap();
        let b =
            Balancer::new(algorithm, nodes, options(&[("hash_balance_factor", "125")])).unwrap();
        // No load: every key stays on its usual node.
        for key in &keys {
            let k = Some(key.as_bytes());
            assert_eq!(
                b.pick(k).unwrap().id(),
                plain.pick(k).unwrap().id(),
                "{algorithm}"
            );
        }
        // A hot key: 200 concurrent requests. No node ever exceeds its bound.
        let mut leases = Vec::new();
        for i in 0..400 {
            let key = if i % 2 == 0 {
                "hot"
            } else {
                keys[i % keys.len()].as_str()
            };
            let total: usize = b.stats().iter().map(|s| s.in_flight).sum();
            let bound = (125 * (total + 1)).div_ceil(100 * ids.len());
            let lease = b.acquire(Some(key.as_bytes())).unwrap();
            let on = b.stats().into_iter().find(|s| s.id == lease.id()).unwrap();
            assert!(
                on.in_flight <= bound,
                "{algorithm}: {} has {} > {bound}",
                on.id,
                on.in_flight
            );
            leases.push(lease);
        }
        let max = b.stats().iter().map(|s| s.in_flight).max().unwrap();
        assert!(max <= (125 * 401usize).div_ceil(1000), "{algorithm}: {max}");
        drop(leases);
        for key in &keys {
            let k = Some(key.as_bytes());
            assert_eq!(
                b.pick(k).unwrap().id(),
                plain.pick(k).unwrap().id(),
                "{algorithm}"
            );
        }
    }
}

#[test]
fn health_options_are_checked() {
    let mut o = Options::default();
    for (name, value) in [
        ("max_ejection_percent", "101"),
        ("panic_threshold", "200"),
        ("min_weight_percent", "101"),
        ("slow_start_aggression", "0"),
        ("slow_start_aggression", "nan"),
        ("hash_balance_factor", "99"),
        ("max_ejection_time_ms", "0"),
        ("base_ejection_time_ms", "0"),
        ("consecutive_failures", "4294967296"),
    ] {
        let before = o;
        assert!(
            o.set(name, OptionValue::Str(value)).is_err(),
            "{name}={value}"
        );
        assert_eq!(o, before);
    }
    o.set("slow_start_aggression", OptionValue::Str("1.5"))
        .unwrap();
    assert_eq!(o.slow_start_aggression, 1.5);
}

#[test]
fn an_ejected_nodes_keys_move_to_their_next_node_and_come_back() {
    let ids: Vec<String> = (0..8).map(|i| format!("10.0.0.{i}")).collect();
    let keys: Vec<String> = (0..1000).map(|i| format!("key-{i}")).collect();
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.is_keyed()) {
        let clock = Arc::new(ManualClock::new(secs(5)));
        let nodes: Vec<Node> = ids.iter().map(|id| Node::new(id.as_str(), 1)).collect();
        let b = Balancer::with_clock(algorithm, nodes, options(&[]), clock.clone()).unwrap();
        let place = |b: &Balancer| -> Vec<String> {
            keys.iter()
                .map(|k| b.pick(Some(k.as_bytes())).unwrap().id().to_string())
                .collect()
        };
        let before = place(&b);
        let failing = "10.0.0.5";
        for _ in 0..5 {
            b.report(failing, Outcome::Failure(Duration::ZERO)).unwrap();
        }
        let during = place(&b);
        for (i, key) in keys.iter().enumerate() {
            if before[i] == failing {
                let order = b.attempts(Some(key.as_bytes()), 2).unwrap();
                assert_eq!(order.ids().next(), Some(during[i].as_str()), "{algorithm}");
                assert_ne!(during[i], failing, "{algorithm}");
            } else {
                assert_eq!(during[i], before[i], "{algorithm}: {key} moved");
            }
        }
        clock.advance(secs(30));
        assert_eq!(place(&b), before, "{algorithm}: keys did not come back");
    }
}

#[test]
fn hashes_of_a_down_node_go_to_their_next_node() {
    let ids: Vec<String> = (0..6).map(|i| format!("h{i}")).collect();
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.takes_hash()) {
        let nodes: Vec<Node> = ids.iter().map(|id| Node::new(id.as_str(), 1)).collect();
        let b = Balancer::new(algorithm, nodes, options(&[])).unwrap();
        let hashes: Vec<u64> = (0..500u64)
            .map(|h| h.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let before: Vec<String> = hashes
            .iter()
            .map(|h| b.pick_hash(*h).unwrap().id().to_string())
            .collect();
        let orders: Vec<Vec<String>> = hashes
            .iter()
            .map(|h| {
                b.attempts_hash(*h, 6)
                    .unwrap()
                    .ids()
                    .map(str::to_string)
                    .collect()
            })
            .collect();
        b.mark_down("h2").unwrap();
        for (i, h) in hashes.iter().enumerate() {
            let now = b.pick_hash(*h).unwrap().id().to_string();
            let expected = orders[i].iter().find(|id| *id != "h2").unwrap();
            assert_eq!(
                &now,
                if before[i] == "h2" {
                    expected
                } else {
                    &before[i]
                },
                "{algorithm}"
            );
            let order = b.attempts_hash(*h, 6).unwrap();
            assert_eq!(order.ids().last(), Some("h2"), "{algorithm}");
        }
        b.mark_up("h2").unwrap();
        for (i, h) in hashes.iter().enumerate() {
            assert_eq!(b.pick_hash(*h).unwrap().id(), before[i], "{algorithm}");
        }
    }
}

#[test]
fn failures_finishing_while_ejected_do_not_count_towards_the_next_streak() {
    let (b, clock) = balancer(Algorithm::RoundRobin, &["a", "b", "c"], &[]);
    // Ten requests in flight on "a" when it starts failing.
    let mut on_a = Vec::new();
    while on_a.len() < 10 {
        let lease = b.acquire(None).unwrap();
        if lease.id() == "a" {
            on_a.push(lease);
        }
    }
    let mut leases = on_a.into_iter();
    for lease in leases.by_ref().take(5) {
        lease.finish(Outcome::Failure(Duration::ZERO));
    }
    assert!(matches!(status(&b, "a"), Status::Ejected { .. }));
    // The other five fail while it is out.
    for lease in leases {
        lease.finish(Outcome::Failure(Duration::ZERO));
    }
    assert_eq!(b.stats()[0].failures, 10);
    clock.advance(secs(30));
    // Back: one failure is not a streak of five.
    b.report("a", Outcome::Failure(Duration::ZERO)).unwrap();
    assert_eq!(status(&b, "a"), Status::Healthy);
}
