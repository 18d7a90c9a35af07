//! Feedback: leases, per-node load kept across membership changes, `report`, `stats`, and the
//! load-aware algorithms (least_request, least_connections, peak_ewma).

use liblb_core::{
    Algorithm, Balancer, DEFAULT_FAILURE_PENALTY, Error, ManualClock, Node, NodeStats, OptionValue,
    Options, Outcome,
};
use std::sync::Arc;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn seeded(seed: u64) -> Options {
    Options {
        seed: Some(seed),
        ..Options::default()
    }
}

fn stats_of(b: &Balancer, id: &str) -> NodeStats {
    b.stats().into_iter().find(|s| s.id == id).unwrap()
}

fn in_flight(b: &Balancer) -> usize {
    b.stats().iter().map(|s| s.in_flight).sum()
}

#[test]
fn leases_count_in_flight_and_outcomes_for_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let b = Balancer::new(algorithm, [("a", 1), ("b", 2)], seeded(1)).unwrap();
        let key = Some(&b"user-1"[..]);
        let leases: Vec<_> = (0..5).map(|_| b.acquire(key).unwrap()).collect();
        assert_eq!(in_flight(&b), 5, "{algorithm}");
        for (i, lease) in leases.into_iter().enumerate() {
            match i % 3 {
                0 => lease.finish(Outcome::Success(ms(2))),
                1 => lease.finish(Outcome::Failure(ms(4))),
                _ => drop(lease), // cancelled: in-flight released, nothing counted
            }
        }
        assert_eq!(in_flight(&b), 0, "{algorithm}");
        let requests: u64 = b.stats().iter().map(|s| s.requests).sum();
        let failures: u64 = b.stats().iter().map(|s| s.failures).sum();
        assert_eq!((requests, failures), (4, 2), "{algorithm}");
        if algorithm.is_keyed() {
            assert_eq!(
                b.acquire(None).unwrap_err(),
                Error::KeyRequired(algorithm.name())
            );
        }
    }
}

#[test]
fn counters_follow_node_ids_across_membership_changes() {
    let b = Balancer::new(Algorithm::RoundRobin, ["a", "b", "c"], Options::default()).unwrap();
    let held: Vec<_> = (0..3).map(|_| b.acquire(None).unwrap()).collect(); // a, b, c
    b.report("a", Outcome::Failure(ms(9))).unwrap();
    // A node that stays keeps its counters through every kind of change.
    b.add(Node::new("d", 1)).unwrap();
    b.set_weight("b", 5).unwrap();
    b.update([("a", 1), ("b", 5), ("c", 1), ("d", 1)]).unwrap();
    assert_eq!(stats_of(&b, "a").in_flight, 1);
    assert_eq!(stats_of(&b, "a").failures, 1);
    // A failure costs at least the failure penalty (see outcomes.rs).
    assert_eq!(stats_of(&b, "a").latency, Some(DEFAULT_FAILURE_PENALTY));
    // A removed node's counters go with it; its leases still end harmlessly.
    b.remove("c").unwrap();
    assert!(b.stats().iter().all(|s| s.id != "c"));
    for lease in held {
        lease.success();
    }
    assert_eq!(in_flight(&b), 0);
    // Re-adding the id starts fresh.
    b.add(Node::new("c", 1)).unwrap();
    let c = stats_of(&b, "c");
    assert_eq!((c.in_flight, c.requests, c.latency), (0, 0, None));
    assert_eq!(stats_of(&b, "a").requests, 2);
}

#[test]
fn report_needs_a_known_id_and_changes_nothing_else() {
    let b = Balancer::new(Algorithm::Ring, ["a", "b"], Options::default()).unwrap();
    let before = b.nodes();
    assert_eq!(
        b.report("zz", Outcome::Success(ms(1))).unwrap_err(),
        Error::UnknownNode("zz".into())
    );
    assert_eq!(b.nodes(), before);
    b.report("b", Outcome::Success(ms(1))).unwrap();
    assert_eq!(stats_of(&b, "b").requests, 1);
    assert_eq!(stats_of(&b, "b").in_flight, 0);
}

#[test]
fn leases_measure_latency_with_the_balancers_clock() {
    let clock = Arc::new(ManualClock::default());
    let b = Balancer::with_clock(
        Algorithm::RoundRobin,
        ["a"],
        Options::default(),
        clock.clone(),
    )
    .unwrap();
    let lease = b.acquire(None).unwrap();
    clock.advance(ms(25));
    assert_eq!(lease.elapsed(), ms(25));
    lease.success();
    let a = stats_of(&b, "a");
    assert_eq!((a.requests, a.failures, a.latency), (1, 0, Some(ms(25))));
}

#[test]
fn load_aware_options_are_checked() {
    let mut options = Options::default();
    for (name, value) in [("choice_count", 1), ("choice_count", 17), ("decay_ms", 0)] {
        let err = options.set(name, OptionValue::Int(value)).unwrap_err();
        assert!(
            matches!(err, Error::InvalidOptionValue { option, .. } if option == name),
            "{err}"
        );
    }
    assert_eq!(options, Options::default());
    options.set("choice_count", OptionValue::Str("3")).unwrap();
    options.set("decay_ms", OptionValue::Int(500)).unwrap();
    options
        .set("initial_latency_ms", OptionValue::Int(5))
        .unwrap();
    assert_eq!(
        (options.choice_count, options.decay, options.initial_latency),
        (3, ms(500), ms(5))
    );
    let bad = Options {
        choice_count: 0,
        ..Options::default()
    };
    assert!(Balancer::new(Algorithm::LeastRequest, ["a"], bad).is_err());
}

/// Upper 0.1% point of chi-square with 2 degrees of freedom.
const CHI2_2_999: f64 = 13.816;

fn chi_square(observed: &[u64], weights: &[f64]) -> f64 {
    let total: u64 = observed.iter().sum();
    let sum: f64 = weights.iter().sum();
    observed
        .iter()
        .zip(weights)
        .map(|(o, w)| {
            let e = w / sum * total as f64;
            (*o as f64 - e).powi(2) / e
        })
        .sum()
}

fn shares(b: &Balancer, ids: &[&str], picks: usize) -> Vec<u64> {
    let mut counts = vec![0u64; ids.len()];
    for id in b.pick_n(picks).unwrap().ids() {
        counts[ids.iter().position(|x| *x == id).unwrap()] += 1;
    }
    counts
}

/// tower#696: comparing load/weight over unweighted draws hands the heaviest node nearly
/// everything at low load. Drawing by weight and keeping the first on ties follows weights.
#[test]
fn least_request_follows_weights_under_equal_load() {
    let ids = ["a", "b", "c"];
    let b = Balancer::new(
        Algorithm::LeastRequest,
        [("a", 1), ("b", 3), ("c", 6)],
        seeded(7),
    )
    .unwrap();
    let counts = shares(&b, &ids, 100_000);
    let chi2 = chi_square(&counts, &[1.0, 3.0, 6.0]);
    assert!(chi2 < CHI2_2_999, "{counts:?}: chi2 {chi2}");
}

#[test]
fn least_request_avoids_the_loaded_node() {
    // Five requests on "a" while it is alone, then "b" and "c" join (counters follow ids).
    let b = Balancer::new(Algorithm::LeastRequest, ["a"], seeded(3)).unwrap();
    let held: Vec<_> = (0..5).map(|_| b.acquire(None).unwrap()).collect();
    b.add(Node::new("b", 1)).unwrap();
    b.add(Node::new("c", 1)).unwrap();
    assert_eq!(b.stats()[0].in_flight, 5);
    // Two distinct candidates: "a" always meets a lighter one.
    assert!(b.pick_n(10_000).unwrap().ids().all(|id| id != "a"));
    drop(held);
    assert!(b.pick_n(1000).unwrap().ids().any(|id| id == "a"));
}

/// nginx's `ngx_http_upstream_get_least_conn_peer`, transcribed: the model the algorithm must
/// match pick for pick, single-threaded.
struct NginxLeastConn {
    weights: Vec<i64>,
    conns: Vec<i64>,
    current: Vec<i64>,
}

impl NginxLeastConn {
    fn get(&mut self) -> usize {
        let n = self.weights.len();
        let (mut best, mut many) = (0usize, false);
        for i in 1..n {
            let (l, r) = (
                self.conns[i] * self.weights[best],
                self.conns[best] * self.weights[i],
            );
            if l < r {
                (best, many) = (i, false);
            } else if l == r {
                many = true;
            }
        }
        if many {
            let first = best;
            let mut total = 0;
            for i in first..n {
                if self.conns[i] * self.weights[first] != self.conns[first] * self.weights[i] {
                    continue;
                }
                self.current[i] += self.weights[i];
                total += self.weights[i];
                if self.current[i] > self.current[best] {
                    best = i;
                }
            }
            self.current[best] -= total;
        }
        self.conns[best] += 1;
        best
    }
}

#[test]
fn least_connections_matches_nginx_pick_for_pick() {
    for weights in [
        vec![1u32, 1, 1],
        vec![5, 1, 1],
        vec![3, 2, 4, 1],
        vec![2, 7, 1],
        // Equal weights: least_connections' index (issue 23), with many ties.
        vec![2; 7],
        vec![1; 40],
    ] {
        let nodes: Vec<Node> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| Node::new(format!("n{i}"), *w))
            .collect();
        let b = Balancer::new(Algorithm::LeastConnections, nodes, Options::default()).unwrap();
        let mut nginx = NginxLeastConn {
            weights: weights.iter().map(|w| i64::from(*w)).collect(),
            conns: vec![0; weights.len()],
            current: vec![0; weights.len()],
        };
        let mut open: Vec<(usize, liblb_core::Lease)> = Vec::new();
        let mut g = liblb_core::SplitMix64::new(weights.len() as u64);
        for step in 0..400 {
            // Open a connection, or (a third of the time) close a random open one.
            if !open.is_empty() && g.next() % 3 == 0 {
                let (i, lease) = open.swap_remove((g.next() % open.len() as u64) as usize);
                nginx.conns[i] -= 1;
                lease.success();
                continue;
            }
            let expected = nginx.get();
            let lease = b.acquire(None).unwrap();
            assert_eq!(
                lease.id(),
                format!("n{expected}"),
                "{weights:?} step {step}"
            );
            open.push((expected, lease));
        }
    }
}

/// Leases that outlive a membership change end on the old table: the new one must learn of
/// them (least_connections indexes the counts, issue 23). nginx resets current weights on a
/// reload, as a new table does.
#[test]
fn least_connections_follows_leases_across_membership_changes() {
    let ids = |n: usize| {
        (0..n)
            .map(|i| Node::new(format!("n{i}"), 1))
            .collect::<Vec<_>>()
    };
    let b = Balancer::new(Algorithm::LeastConnections, ids(6), Options::default()).unwrap();
    let mut nginx = NginxLeastConn {
        weights: vec![1; 6],
        conns: vec![0; 6],
        current: vec![0; 6],
    };
    let mut open: Vec<(usize, liblb_core::Lease)> = Vec::new();
    let mut g = liblb_core::SplitMix64::new(11);
    for step in 0..600 {
        if step % 150 == 149 {
            // A node joins: a new table, tie-break state reset, old leases still open.
            let n = nginx.weights.len();
            b.add(Node::new(format!("n{n}"), 1)).unwrap();
            nginx.weights.push(1);
            nginx.conns.push(0);
            nginx.current = vec![0; n + 1];
            continue;
        }
        if !open.is_empty() && g.next() % 3 == 0 {
            let (i, lease) = open.swap_remove((g.next() % open.len() as u64) as usize);
            nginx.conns[i] -= 1;
            lease.success();
            continue;
        }
        let expected = nginx.get();
        let lease = b.acquire(None).unwrap();
        assert_eq!(lease.id(), format!("n{expected}"), "step {step}");
        open.push((expected, lease));
    }
}

#[test]
fn peak_ewma_prefers_the_fast_node_and_probes_new_ones() {
    let clock = Arc::new(ManualClock::default());
    let options = seeded(5);
    let b = Balancer::with_clock(
        Algorithm::PeakEwma,
        ["fast", "slow"],
        options,
        clock.clone(),
    )
    .unwrap();
    b.report("fast", Outcome::Success(ms(1))).unwrap();
    b.report("slow", Outcome::Success(ms(100))).unwrap();
    clock.advance(ms(10));
    // Two nodes: every pick compares both, and the slow one costs 100x more.
    assert!(b.pick_n(1000).unwrap().ids().all(|id| id == "fast"));
    // Load counts: cost = latency x (in-flight + 1), so "fast" takes the first 99 requests
    // (1 ms x 100 < 100 ms x 1 fails only at the 100th), then both share.
    let held: Vec<_> = (0..200).map(|_| b.acquire(None).unwrap()).collect();
    assert!(held[..99].iter().all(|l| l.id() == "fast"));
    assert!(held[99..].iter().any(|l| l.id() == "slow"));
    assert!(b.pick_n(100).unwrap().ids().any(|id| id == "slow"));
    drop(held);
    // A node with no sample costs initial_latency (30 ms): cheaper than "slow", dearer than
    // "fast".
    b.add(Node::new("new", 1)).unwrap();
    b.remove("fast").unwrap();
    assert!(b.pick_n(1000).unwrap().ids().all(|id| id == "new"));
}
