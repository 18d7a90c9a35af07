//! `client_side_wrr` through the balancer: the A58 rules that need time, membership and
//! leases, ported from grpc/grpc `test/core/load_balancing/weighted_round_robin_test.cc`.
//!
//! The upstream tests configure a 1 s blackout (their `ConfigBuilder`), report through call
//! trackers and compare pick counts per pass of `sum(weights)` picks; here reports go through
//! `report_load` or a lease's `finish_with_load`, time through a `ManualClock`.

use liblb_core::{Algorithm, Balancer, LoadReport, ManualClock, Options, Outcome};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const IDS: [&str; 3] = ["a", "b", "c"];

fn options() -> Options {
    Options {
        blackout_period: Duration::from_secs(1),
        ..Options::default()
    }
}

fn balancer(options: Options) -> (Balancer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(100)));
    let nodes = IDS.map(|id| (id, 1));
    let b = Balancer::with_clock(Algorithm::ClientSideWrr, nodes, options, clock.clone());
    (b.unwrap(), clock)
}

fn load(app: f64, qps: f64, eps: f64) -> LoadReport {
    LoadReport {
        application_utilization: app,
        rps_fractional: qps,
        eps,
        ..LoadReport::default()
    }
}

/// Picks per node over `count` picks.
fn counts(b: &Balancer, count: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..count {
        *counts
            .entry(b.pick(None).unwrap().id().to_string())
            .or_default() += 1;
    }
    counts
}

fn expect(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(id, n)| (id.to_string(), *n)).collect()
}

/// Every node in `reports` reports its load, as upstream's `ReportBackendMetrics` does after
/// each pass.
fn report(b: &Balancer, reports: &[(&str, LoadReport)]) {
    for (id, r) in reports {
        b.report_load(id, r).unwrap();
    }
}

#[test]
fn basic_weights_and_the_mean_for_a_silent_node() {
    // Basic: 0.9 and 0.3 utilisation at 100 qps weigh 1:3; c, silent, weighs the mean (2).
    let (b, clock) = balancer(options());
    // Before any report, or within the blackout: round robin.
    assert_eq!(counts(&b, 3), expect(&[("a", 1), ("b", 1), ("c", 1)]));
    let reports = [("a", load(0.9, 100.0, 0.0)), ("b", load(0.3, 100.0, 0.0))];
    report(&b, &reports);
    clock.advance(Duration::from_secs(1));
    report(&b, &reports);
    assert_eq!(counts(&b, 6), expect(&[("a", 1), ("b", 3), ("c", 2)]));
    // Now c reports as b does; its weight counts after its own blackout and an update.
    let all = [
        ("a", load(0.9, 100.0, 0.0)),
        ("b", load(0.3, 100.0, 0.0)),
        ("c", load(0.3, 100.0, 0.0)),
    ];
    report(&b, &all);
    clock.advance(Duration::from_secs(1));
    report(&b, &all);
    assert_eq!(counts(&b, 7), expect(&[("a", 1), ("b", 3), ("c", 3)]));
}

#[test]
fn the_default_blackout_is_ten_seconds() {
    let (b, clock) = balancer(Options::default());
    let reports = [("a", load(0.9, 100.0, 0.0)), ("b", load(0.3, 100.0, 0.0))];
    for _ in 0..9 {
        report(&b, &reports);
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(counts(&b, 3), expect(&[("a", 1), ("b", 1), ("c", 1)]));
    report(&b, &reports);
    clock.advance(Duration::from_secs(1));
    assert_eq!(counts(&b, 6), expect(&[("a", 1), ("b", 3), ("c", 2)]));
}

#[test]
fn weights_expire_and_then_wait_out_a_new_blackout() {
    // WeightExpirationPeriod and BlackoutPeriodAfterWeightExpiration (expiration 2 s).
    let (b, clock) = balancer(Options {
        weight_expiration_period: Duration::from_secs(2),
        weight_update_period: Duration::from_millis(100),
        ..options()
    });
    let all = [
        ("a", load(0.9, 100.0, 0.0)),
        ("b", load(0.3, 100.0, 0.0)),
        ("c", load(0.3, 100.0, 0.0)),
    ];
    report(&b, &all);
    clock.advance(Duration::from_secs(1));
    report(&b, &all);
    assert_eq!(counts(&b, 7), expect(&[("a", 1), ("b", 3), ("c", 3)]));
    clock.advance(Duration::from_secs(2));
    // Stale: round robin.
    assert_eq!(counts(&b, 9), expect(&[("a", 3), ("b", 3), ("c", 3)]));
    // Reporting again (c now the busy one): still in the new blackout half a second later
    // (the scheduler rebuilt every 100 ms here), used from a second on.
    let swapped = [
        ("a", load(0.3, 100.0, 0.0)),
        ("b", load(0.3, 100.0, 0.0)),
        ("c", load(0.9, 100.0, 0.0)),
    ];
    report(&b, &swapped);
    clock.advance(Duration::from_millis(500));
    assert_eq!(counts(&b, 9), expect(&[("a", 3), ("b", 3), ("c", 3)]));
    clock.advance(Duration::from_millis(500));
    assert_eq!(counts(&b, 7), expect(&[("a", 3), ("b", 3), ("c", 1)]));
}

#[test]
fn the_scheduler_changes_only_once_a_period() {
    // HonorsWeightUpdatePeriod (2 s) and WeightUpdatePeriodLowerBound (10 ms counts as 100).
    let (b, clock) = balancer(Options {
        blackout_period: Duration::ZERO,
        weight_update_period: Duration::from_secs(2),
        ..options()
    });
    // The first pick builds the scheduler: no weights yet, round robin.
    assert_eq!(counts(&b, 3), expect(&[("a", 1), ("b", 1), ("c", 1)]));
    report(
        &b,
        &[("a", load(0.9, 100.0, 0.0)), ("b", load(0.3, 100.0, 0.0))],
    );
    clock.advance(Duration::from_millis(1999));
    assert_eq!(counts(&b, 3), expect(&[("a", 1), ("b", 1), ("c", 1)]));
    clock.advance(Duration::from_millis(1));
    assert_eq!(counts(&b, 6), expect(&[("a", 1), ("b", 3), ("c", 2)]));

    let (b, clock) = balancer(Options {
        blackout_period: Duration::ZERO,
        weight_update_period: Duration::from_millis(10),
        ..options()
    });
    assert_eq!(counts(&b, 3), expect(&[("a", 1), ("b", 1), ("c", 1)]));
    report(
        &b,
        &[("a", load(0.9, 100.0, 0.0)), ("b", load(0.3, 100.0, 0.0))],
    );
    clock.advance(Duration::from_millis(99));
    assert_eq!(counts(&b, 3), expect(&[("a", 1), ("b", 1), ("c", 1)]));
    clock.advance(Duration::from_millis(1));
    assert_eq!(counts(&b, 6), expect(&[("a", 1), ("b", 3), ("c", 2)]));
}

#[test]
fn errors_weigh_by_the_penalty() {
    // Eps (penalty 1: 1:2:3) and ZeroErrorUtilPenalty (penalty 0: 1:1:1).
    let reports = [
        ("a", load(0.1, 100.0, 50.0)),
        ("b", load(0.1, 100.0, 20.0)),
        ("c", load(0.1, 100.0, 10.0)),
    ];
    for (penalty, expected) in [(1.0, [1, 2, 3]), (0.0, [1, 1, 1])] {
        let (b, _clock) = balancer(Options {
            blackout_period: Duration::ZERO,
            error_utilization_penalty: penalty,
            ..options()
        });
        report(&b, &reports);
        let total = expected.iter().sum();
        let want: Vec<(&str, usize)> = IDS.into_iter().zip(expected).collect();
        assert_eq!(counts(&b, total), expect(&want), "penalty {penalty}");
    }
}

#[test]
fn weights_survive_membership_changes() {
    // BlackoutPeriodDoesNotGetResetAfterUpdate: an update keeping the nodes keeps their
    // weights and blackout.
    let (b, clock) = balancer(options());
    let reports = [("a", load(0.9, 100.0, 0.0)), ("b", load(0.3, 100.0, 0.0))];
    report(&b, &reports);
    clock.advance(Duration::from_secs(1));
    b.update(IDS.map(|id| (id, 1))).unwrap();
    assert_eq!(counts(&b, 6), expect(&[("a", 1), ("b", 3), ("c", 2)]));
    // A new node weighs the mean; a removed one takes its weight with it.
    b.add(("d", 1)).unwrap();
    b.remove("c").unwrap();
    assert_eq!(counts(&b, 6), expect(&[("a", 1), ("b", 3), ("d", 2)]));
}

#[test]
fn leases_carry_load_reports() {
    let (b, clock) = balancer(Options {
        blackout_period: Duration::ZERO,
        weight_update_period: Duration::from_millis(100),
        ..options()
    });
    let loads = BTreeMap::from([("a", load(0.9, 100.0, 0.0)), ("b", load(0.3, 100.0, 0.0))]);
    for _ in 0..3 {
        let lease = b.acquire(None).unwrap();
        match loads.get(lease.id()) {
            Some(report) => {
                lease.finish_with_load(Outcome::Success(Duration::from_millis(1)), report)
            }
            None => lease.success(),
        }
    }
    clock.advance(Duration::from_millis(100));
    assert_eq!(counts(&b, 6), expect(&[("a", 1), ("b", 3), ("c", 2)]));
    let stats = b.stats();
    assert!(stats.iter().all(|s| s.in_flight == 0 && s.requests == 1));
}

#[test]
fn unknown_ids_are_refused_and_change_nothing() {
    let (b, _clock) = balancer(options());
    let err = b.report_load("zz", &load(0.5, 10.0, 0.0)).unwrap_err();
    assert_eq!(err, liblb_core::Error::UnknownNode("zz".into()));
    assert_eq!(counts(&b, 3), expect(&[("a", 1), ("b", 1), ("c", 1)]));
}

#[test]
fn options_are_checked() {
    let mut o = Options::default();
    o.set(
        "error_utilization_penalty",
        liblb_core::OptionValue::Str("0.5"),
    )
    .unwrap();
    assert_eq!(o.error_utilization_penalty, 0.5);
    for bad in ["-1", "nan", "inf", "x"] {
        let e = o
            .set(
                "error_utilization_penalty",
                liblb_core::OptionValue::Str(bad),
            )
            .unwrap_err();
        assert!(e.to_string().contains("at least 0"), "{bad}: {e}");
    }
    assert_eq!(o.error_utilization_penalty, 0.5);
    assert!(
        o.set(
            "weight_expiration_period_ms",
            liblb_core::OptionValue::Int(0)
        )
        .is_err()
    );
    o.set("blackout_period_ms", liblb_core::OptionValue::Int(0))
        .unwrap();
    o.set("weight_update_period_ms", liblb_core::OptionValue::Int(0))
        .unwrap();
    assert_eq!(
        o.changed_numbers(),
        [
            ("blackout_period_ms", "0".to_string()),
            ("weight_update_period_ms", "0".to_string()),
            ("error_utilization_penalty", "0.5".to_string()),
        ]
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn picks_race_rebuilds_without_hanging() {
    // Threads pick while others report and the clock runs: every pick answers (the stride
    // loop always ends), and the shares follow the weights.
    let (b, clock) = balancer(Options {
        blackout_period: Duration::ZERO,
        weight_update_period: Duration::from_millis(100),
        ..options()
    });
    let b = Arc::new(b);
    std::thread::scope(|s| {
        for t in 0..2 {
            let b = b.clone();
            s.spawn(move || {
                for i in 0..20_000 {
                    b.pick(None).unwrap();
                    if i % 100 == t {
                        b.report_load("a", &load(0.9, 100.0, 0.0)).unwrap();
                        b.report_load("b", &load(0.3, 100.0, 0.0)).unwrap();
                    }
                }
            });
        }
        s.spawn(|| {
            for _ in 0..200 {
                clock.advance(Duration::from_millis(10));
                std::thread::yield_now();
            }
        });
    });
    clock.advance(Duration::from_secs(1));
    // The stride scheduler is exact over whole generations; from wherever the racing picks
    // left the sequence, 6000 picks land within a few picks of 1:3:2.
    let c = counts(&b, 6000);
    for (id, want) in [("a", 1000), ("b", 3000), ("c", 2000)] {
        assert!(c[id].abs_diff(want) <= 6, "{c:?}");
    }
}
