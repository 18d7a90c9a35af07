//! `prequal` through the `Balancer`: the probe API (targets, answers, how many are due), its
//! options, health, seeded replay, and a simulated fleet with one slow replica, where Prequal
//! must send the slow one far less than round robin's exact share.

use liblb_core::{Algorithm, Balancer, Error, ManualClock, Node, OptionValue, Options, Outcome};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

const SECOND: u64 = 1_000_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn seeded(pairs: &[(&str, OptionValue<'_>)]) -> Options {
    let mut options = Options {
        seed: Some(11),
        ..Options::default()
    };
    for (name, value) in pairs {
        options.set(name, *value).unwrap();
    }
    options
}

/// A `prequal` balancer of `n` nodes `n0`, `n1`, ... on a manual clock at 1000 s.
fn balancer(algorithm: Algorithm, n: usize, options: Options) -> (Balancer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1000)));
    let nodes: Vec<Node> = (0..n).map(|i| Node::new(format!("n{i}"), 1)).collect();
    let b = Balancer::with_clock(algorithm, nodes, options, clock.clone()).unwrap();
    (b, clock)
}

#[test]
fn probe_targets_are_distinct_nodes_from_the_seeded_generator() {
    let (b, _) = balancer(Algorithm::Prequal, 10, seeded(&[]));
    let (twin, _) = balancer(Algorithm::Prequal, 10, seeded(&[]));
    for count in [0, 1, 3, 10, 50] {
        let targets: Vec<String> = b
            .probe_targets(count)
            .unwrap()
            .ids()
            .map(String::from)
            .collect();
        let again: Vec<String> = twin
            .probe_targets(count)
            .unwrap()
            .ids()
            .map(String::from)
            .collect();
        assert_eq!(targets, again, "seeded runs replay");
        assert_eq!(targets.len(), count.min(10));
        assert_eq!(targets.iter().collect::<HashSet<_>>().len(), targets.len());
    }
    let (empty, _) = balancer(Algorithm::Prequal, 0, seeded(&[]));
    assert_eq!(empty.probe_targets(3).unwrap_err(), Error::NoNodes);
}

#[test]
fn probe_targets_are_uniform() {
    let (b, _) = balancer(Algorithm::Prequal, 5, seeded(&[]));
    let mut counts: HashMap<String, u32> = HashMap::new();
    let rounds = 4000;
    for _ in 0..rounds {
        for id in b.probe_targets(2).unwrap().ids() {
            *counts.entry(id.to_string()).or_default() += 1;
        }
    }
    let expected = f64::from(rounds) * 2.0 / 5.0;
    let chi2: f64 = (counts.values())
        .map(|c| (f64::from(*c) - expected).powi(2) / expected)
        .sum();
    assert!(
        chi2 < 18.47,
        "{counts:?}: chi-square {chi2} (4 dof, p = 0.001)"
    );
}

#[test]
fn answers_for_unknown_nodes_fail_as_reports_do() {
    for algorithm in [Algorithm::Prequal, Algorithm::RoundRobin] {
        let (b, _) = balancer(algorithm, 3, seeded(&[]));
        let err = b.offer_probe("nope", 1, ms(1)).unwrap_err();
        assert_eq!(err, b.report("nope", Outcome::Success(ms(1))).unwrap_err());
        assert_eq!(err, Error::UnknownNode("nope".into()));
    }
}

/// A configuration can switch algorithm: other algorithms take answers and ignore them.
#[test]
fn other_algorithms_accept_and_ignore_answers() {
    let (b, _) = balancer(Algorithm::RoundRobin, 3, seeded(&[]));
    let (twin, _) = balancer(Algorithm::RoundRobin, 3, seeded(&[]));
    for i in 0..30 {
        b.offer_probe("n2", 0, ms(1)).unwrap();
        assert_eq!(
            b.pick(None).unwrap().id(),
            twin.pick(None).unwrap().id(),
            "{i}"
        );
    }
    assert_eq!(b.probes_due(), 0);
}

#[test]
fn picks_follow_the_answers() {
    // No worst-probe removal: nothing refills this pool (see the next test for removal).
    let removal = ("probe_remove_rate", OptionValue::Int(0));
    let (b, _) = balancer(Algorithm::Prequal, 4, seeded(&[removal]));
    b.offer_probe("n0", 2, ms(30)).unwrap();
    b.offer_probe("n1", 1, ms(5)).unwrap();
    b.offer_probe("n2", 3, ms(20)).unwrap();
    // n1: cold (the 84th percentile of 2, 1, 3 is 3) and the fastest, for its two uses.
    assert_eq!(b.pick(None).unwrap().id(), "n1");
    let attempts: Vec<String> = b
        .attempts(None, 4)
        .unwrap()
        .ids()
        .map(String::from)
        .collect();
    assert_eq!(attempts[0], "n1");
    assert_eq!(attempts.iter().collect::<HashSet<_>>().len(), 4);
    // Its budget spent, the next fastest.
    assert_eq!(b.pick(None).unwrap().id(), "n2");
}

#[test]
fn the_worst_probes_leave_at_the_removal_rate() {
    let (b, _) = balancer(Algorithm::Prequal, 4, seeded(&[]));
    b.offer_probe("n0", 2, ms(30)).unwrap();
    b.offer_probe("n1", 1, ms(5)).unwrap();
    b.offer_probe("n2", 3, ms(20)).unwrap();
    // One removal a pick (the default): n1 is picked and n0, the slowest, leaves; then n1
    // again (its last use), and n2 leaves: the pool is empty.
    assert_eq!(b.pick(None).unwrap().id(), "n1");
    assert_eq!(b.pick(None).unwrap().id(), "n1");
    b.offer_probe("n3", 9, ms(90)).unwrap();
    assert_eq!(
        b.pick(None).unwrap().id(),
        "n3",
        "the only probe left is the new one"
    );
    // Three picks at the default rate of 3 made nine probes due; taking them resets the count.
    assert_eq!(b.probes_due(), 9);
    assert_eq!(b.probes_due(), 0);
}

#[test]
fn probes_age_out_on_the_balancer_clock() {
    let (b, clock) = balancer(Algorithm::Prequal, 50, seeded(&[]));
    b.offer_probe("n7", 0, ms(1)).unwrap();
    clock.advance(ms(500));
    assert_eq!(b.pick(None).unwrap().id(), "n7");
    b.offer_probe("n7", 0, ms(1)).unwrap();
    clock.advance(ms(1100));
    // Past the 1 s maximum age: a random pick, and n7 is only 1 in 50 of those.
    let picks: Vec<String> = b.pick_n(5).unwrap().ids().map(String::from).collect();
    assert!(
        picks.iter().filter(|id| *id == "n7").count() < 5,
        "{picks:?}"
    );
}

/// A node that is down or ejected is never picked, however good its answers.
#[test]
fn unusable_nodes_are_never_picked() {
    let (b, _) = balancer(Algorithm::Prequal, 4, seeded(&[]));
    b.mark_down("n0").unwrap();
    for _ in 0..5 {
        b.report("n1", Outcome::Failure(ms(1))).unwrap(); // 5 in a row: ejected
    }
    for i in 0..300 {
        b.offer_probe("n0", 0, ms(1)).unwrap();
        b.offer_probe("n1", 0, ms(1)).unwrap();
        if i % 3 == 0 {
            b.offer_probe("n2", 5, ms(50)).unwrap();
        }
        let picked = b.pick(None).unwrap();
        assert!(
            picked.id() == "n2" || picked.id() == "n3",
            "{i}: {}",
            picked.id()
        );
    }
}

#[test]
fn seeded_runs_replay() {
    let run = || {
        let (b, clock) = balancer(Algorithm::Prequal, 8, seeded(&[]));
        let mut picks = Vec::new();
        for step in 0..400u32 {
            let due = b.probes_due();
            let targets: Vec<String> = b
                .probe_targets(due)
                .unwrap()
                .ids()
                .map(String::from)
                .collect();
            for (k, id) in targets.iter().enumerate() {
                let rif = (step + k as u32 * 7) % 13;
                b.offer_probe(id, rif, ms(u64::from(rif) * 3 + 1)).unwrap();
            }
            picks.push(b.pick(None).unwrap().id().to_string());
            clock.advance(ms(3));
        }
        picks
    };
    assert_eq!(run(), run());
}

#[test]
fn q_rif_reads_percentages_and_fractions() {
    let mut options = Options::default();
    for value in [
        OptionValue::Int(84),
        OptionValue::Str("84"),
        OptionValue::Str("0.84"),
        OptionValue::Str(" 0.84 "),
        OptionValue::Str("8.4e-1"),
    ] {
        options.set("q_rif", OptionValue::Int(10)).unwrap();
        options.set("q_rif", value).unwrap();
        assert_eq!(options.q_rif, 0.84, "{value:?}");
    }
    options.set("q_rif", OptionValue::Str("1.0")).unwrap();
    assert_eq!(options.q_rif, 1.0);
    options.set("q_rif", OptionValue::Str("1")).unwrap();
    assert_eq!(options.q_rif, 0.01, "an integer is a percentage");
    let before = options;
    for bad in [
        OptionValue::Int(101),
        OptionValue::Str("1.5"),
        OptionValue::Str("-0.1"),
        OptionValue::Str("NaN"),
        OptionValue::Str("inf"),
        OptionValue::Str("0.8.4"),
        OptionValue::Str("high"),
    ] {
        assert!(options.set("q_rif", bad).is_err(), "{bad:?}");
        assert_eq!(options, before);
    }
}

#[test]
fn prequal_options_are_checked() {
    let mut options = Options::default();
    for (name, bad) in [
        ("probe_pool_size", "0"),
        ("probe_pool_size", "65"),
        ("probe_reuse", "0"),
        ("probe_reuse", "64"),
        ("max_probe_age_ms", "0"),
        ("probe_rate", "-1"),
        ("probe_rate", "65"),
        ("probe_rate", "fast"),
        ("probe_remove_rate", "17"),
    ] {
        assert!(
            options.set(name, OptionValue::Str(bad)).is_err(),
            "{name} = {bad}"
        );
    }
    assert_eq!(options, Options::default());
    options.set("probe_rate", OptionValue::Str("0.5")).unwrap();
    options
        .set("probe_remove_rate", OptionValue::Int(0))
        .unwrap();
    assert_eq!((options.probe_rate, options.probe_remove_rate), (0.5, 0.0));
    let direct = Options {
        q_rif: 2.0,
        ..Options::default()
    };
    assert!(
        direct.validate().is_err(),
        "a field written directly is checked too"
    );
}

#[test]
fn changed_prequal_options_set_back_the_same() {
    let options = seeded(&[
        ("probe_pool_size", OptionValue::Int(32)),
        ("q_rif", OptionValue::Str("0.9")),
        ("probe_rate", OptionValue::Str("2.5")),
        ("probe_reuse", OptionValue::Int(4)),
        ("max_probe_age_ms", OptionValue::Int(250)),
        ("probe_remove_rate", OptionValue::Str("0.25")),
    ]);
    let changed = options.changed_numbers();
    assert_eq!(changed.len(), 6, "{changed:?}");
    let mut back = Options {
        seed: Some(11),
        ..Options::default()
    };
    for (name, value) in changed {
        back.set(name, OptionValue::Str(&value)).unwrap();
    }
    assert_eq!(back, options);
}

/// One simulated request stream over a fleet of `n` replicas where replica 0 takes ten times
/// as long. A request arrives every millisecond; a replica's requests in flight are those it
/// has started and not finished; it answers a probe with that count and its service time (a
/// server's latency estimate). Returns the requests each replica got and the mean latency.
fn simulate(algorithm: Algorithm, n: usize, requests: u64) -> (Vec<u64>, f64) {
    let (b, clock) = balancer(algorithm, n, seeded(&[]));
    let service = |i: usize| if i == 0 { 40u64 } else { 4 };
    let mut in_flight = vec![0u32; n];
    let mut ends: Vec<(u64, usize)> = Vec::new();
    let mut counts = vec![0u64; n];
    let mut total_latency = 0;
    for t in 0..requests {
        ends.retain(|(end, i)| {
            let done = *end <= t;
            if done {
                in_flight[*i] -= 1;
            }
            !done
        });
        let due = b.probes_due();
        for target in b.probe_targets(due).unwrap().indices() {
            let i = *target as usize;
            b.offer_probe(&format!("n{i}"), in_flight[i], ms(service(i)))
                .unwrap();
        }
        let i = b.pick(None).unwrap().index();
        counts[i] += 1;
        in_flight[i] += 1;
        ends.push((t + service(i), i));
        total_latency += service(i);
        clock.advance(ms(1));
    }
    (counts, total_latency as f64 / requests as f64)
}

#[test]
#[cfg_attr(miri, ignore)] // Tens of thousands of balancer calls: minutes interpreted.
fn a_slow_replica_gets_far_less_than_round_robin_gives_it() {
    let (n, requests) = (10, 20_000);
    let (round_robin, rr_latency) = simulate(Algorithm::RoundRobin, n, requests);
    let (prequal, latency) = simulate(Algorithm::Prequal, n, requests);
    assert_eq!(
        round_robin[0],
        requests / n as u64,
        "round robin's exact share"
    );
    // Against a binomial share of 1/10 (sd = sqrt(20000 · 0.1 · 0.9) ≈ 42), ten sd below
    // round robin's count, a bound no fair share meets by chance.
    let bound = 2000 - 10 * 42;
    assert!(
        prequal[0] < bound,
        "slow replica: {} of {requests} ({prequal:?})",
        prequal[0]
    );
    assert!(
        latency < rr_latency,
        "mean latency {latency} vs round robin's {rr_latency}"
    );
    // And the fast replicas share the rest evenly, without herding onto one.
    let fast = &prequal[1..];
    let mean = fast.iter().sum::<u64>() as f64 / fast.len() as f64;
    let even = |c: &u64| (*c as f64 - mean).abs() < mean / 10.0;
    assert!(fast.iter().all(even), "{prequal:?}");
}

/// A load report with `rif` (and `latency_ms`) is a piggybacked probe answer: what a
/// `ServerLoad` backend sends with every answer feeds `prequal` without a probe.
#[test]
fn load_reports_with_rif_are_probe_answers() {
    use liblb_core::{LoadReport, ServerLoad, parse_orca};
    let (b, _clock) = balancer(Algorithm::Prequal, 3, seeded(&[]));
    let report = |rif: f64, latency_ms: f64| LoadReport {
        named_metrics: vec![("latency_ms".into(), latency_ms), ("rif".into(), rif)],
        ..LoadReport::default()
    };
    b.report_load("n0", &report(9.0, 80.0)).unwrap();
    b.report_load("n1", &report(0.0, 2.0)).unwrap();
    b.report_load("n2", &report(1.0, 40.0)).unwrap();
    // Cold and fastest first; each pick charges the probe one request and one use.
    assert_eq!(b.pick(None).unwrap().id(), "n1");
    // A lease's report counts with the request's latency when it has no `latency_ms`; a
    // report without either is no probe. Here only the lease's node has a probe.
    let (b, clock) = balancer(Algorithm::Prequal, 3, seeded(&[]));
    let server = ServerLoad::new(1000 * SECOND);
    let lease = b.acquire(None).unwrap();
    let leased = lease.id().to_string();
    let other = ["n0", "n1", "n2"]
        .into_iter()
        .find(|id| *id != leased)
        .unwrap();
    let rif_only = LoadReport {
        named_metrics: vec![("rif".into(), 0.0)],
        ..LoadReport::default()
    };
    b.report_load(other, &rif_only).unwrap();
    clock.advance(ms(3));
    // An idle ServerLoad's header: `rif` only (no latency filed yet).
    let header = server
        .header(1000 * SECOND, liblb_core::HeaderForm::Text)
        .unwrap();
    assert_eq!(header, "TEXT named_metrics.rif:0");
    lease.finish_with_load(
        Outcome::Success(ms(3)),
        &parse_orca(header.as_bytes()).unwrap(),
    );
    assert_eq!(b.pick(None).unwrap().id(), leased);
}
