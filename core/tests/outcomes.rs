//! Outcomes that say why (issue 21, deliverable 1 and the first part of 2): failure kinds, an
//! overloaded node's retry-after, and the failure penalty in the latency estimate.
//!
//! The penalty tests port linkerd2-proxy's `linkerd/load-biaser/src/lib.rs` tests (commit
//! `22d598e93`, "failure-aware P2C balancing"): `test_fast_failure_more_expensive_than_healthy`,
//! `test_small_retry_after_floored_at_base_penalty`, `test_429_with_retry_after_capped_at_max`,
//! `test_retry_after_hint_load_grows_monotonically`, `test_penalty_decays_over_time`, with
//! their numbers (penalty 5000 ms, decay 10 s, max 300 s).

mod common;

use common::{balancer, ms, secs};
use liblb_core::{
    Algorithm, Balancer, Clock, DEFAULT_FAILURE_PENALTY, Error, Failure, FailureKind, Load,
    NodeStats, Outcome, Penalty, Status,
};
use std::collections::HashMap;
use std::time::Duration;

fn stats(b: &Balancer, id: &str) -> NodeStats {
    b.stats().into_iter().find(|s| s.id == id).unwrap()
}

/// How many of `n` picks went to each node.
fn picks(b: &Balancer, n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        *counts
            .entry(b.pick(None).unwrap().id().to_string())
            .or_default() += 1;
    }
    counts
}

fn overloaded(retry_after: Duration) -> Outcome {
    Failure::overloaded().retry_after(retry_after).into()
}

#[test]
fn kinds_have_one_name_in_every_language() {
    for kind in FailureKind::ALL {
        assert_eq!(FailureKind::from_name(kind.name()).unwrap(), kind);
    }
    let err = FailureKind::from_name("busy").unwrap_err();
    assert_eq!(err.code(), "LB_INVALID_OUTCOME");
    assert_eq!(
        err.to_string(),
        "invalid outcome: unknown failure kind \"busy\"; valid kinds: error, timeout, overloaded"
    );
    // A bare failure is an error after its latency, and reads as one.
    let bare = Outcome::Failure(ms(3));
    assert_eq!(bare, Outcome::Failed(Failure::error().after(ms(3))));
    assert_ne!(bare, Outcome::Failed(Failure::timeout().after(ms(3))));
    assert_ne!(bare, Outcome::Success(ms(3)));
    assert_eq!(bare.failure().unwrap().kind, FailureKind::Error);
    assert_eq!(Outcome::Failed(Failure::timeout()).latency(), None);
    // Only an overloaded failure's retry-after pauses a node.
    assert_eq!(Failure::error().retry_after(secs(5)).pause(), None);
    assert_eq!(
        Failure::overloaded().retry_after(secs(5)).pause(),
        Some(secs(5))
    );
}

/// "An overloaded node gets no request until its retry-after passes" (issue 21, done-when),
/// shown in `stats()`, and it is back by itself when the time is up (no event needed).
#[test]
fn an_overloaded_node_gets_no_pick_until_its_retry_after_passes() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 10, &[]);
    let now = clock.now_ns();
    b.report("n3", overloaded(secs(5))).unwrap();
    let until_ns = now + secs(5).as_nanos() as u64;
    assert_eq!(stats(&b, "n3").status, Status::Overloaded { until_ns });
    assert_eq!(stats(&b, "n3").status.name(), "overloaded");
    for step in [0, 1, 4] {
        clock.set(Duration::from_nanos(now) + secs(step));
        let counts = picks(&b, 90);
        assert_eq!(counts.get("n3"), None, "{step} s after the 429");
        assert_eq!(counts.len(), 9);
    }
    clock.set(Duration::from_nanos(until_ns));
    assert_eq!(stats(&b, "n3").status, Status::Healthy);
    assert_eq!(picks(&b, 100).get("n3"), Some(&10));
    // It failed once, and its streak is untouched (see below).
    assert_eq!((stats(&b, "n3").requests, stats(&b, "n3").failures), (1, 1));
}

#[test]
fn retry_after_is_capped_by_max_retry_after_and_zero_turns_pauses_off() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 10, &[("max_retry_after_ms", "2000")]);
    let now = clock.now_ns();
    b.report("n0", overloaded(secs(3600))).unwrap();
    let until_ns = now + secs(2).as_nanos() as u64;
    assert_eq!(stats(&b, "n0").status, Status::Overloaded { until_ns });

    let (b, _) = balancer(Algorithm::RoundRobin, 10, &[("max_retry_after_ms", "0")]);
    b.report("n0", overloaded(secs(5))).unwrap();
    assert_eq!(stats(&b, "n0").status, Status::Healthy);
    // Neither does a retry-after of zero, nor an overloaded answer without one.
    let (b, _) = balancer(Algorithm::RoundRobin, 10, &[]);
    b.report("n0", overloaded(Duration::ZERO)).unwrap();
    b.report("n0", Failure::overloaded().into()).unwrap();
    assert_eq!(stats(&b, "n0").status, Status::Healthy);
}

#[test]
fn a_later_retry_after_extends_a_pause_and_an_earlier_one_does_not_shorten_it() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 10, &[]);
    let now = clock.now_ns();
    b.report("n1", overloaded(secs(5))).unwrap();
    b.report("n1", overloaded(secs(8))).unwrap();
    let until_ns = now + secs(8).as_nanos() as u64;
    assert_eq!(stats(&b, "n1").status, Status::Overloaded { until_ns });
    b.report("n1", overloaded(secs(1))).unwrap();
    assert_eq!(stats(&b, "n1").status, Status::Overloaded { until_ns });
}

/// Overloaded answers neither extend nor break the failure streak; timeouts extend it.
#[test]
fn overloaded_answers_leave_the_failure_streak_alone_and_timeouts_count() {
    let (b, _) = balancer(Algorithm::RoundRobin, 20, &[]);
    for _ in 0..4 {
        b.report("n0", Outcome::Failure(ms(1))).unwrap();
    }
    for _ in 0..10 {
        b.report("n0", Failure::overloaded().into()).unwrap();
    }
    assert_eq!(stats(&b, "n0").status, Status::Healthy);
    b.report("n0", Failure::timeout().into()).unwrap();
    assert!(matches!(stats(&b, "n0").status, Status::Ejected { .. }));

    for _ in 0..4 {
        b.report("n1", Failure::timeout().after(secs(1)).into())
            .unwrap();
    }
    b.report("n1", Outcome::Success(ms(1))).unwrap();
    b.report("n1", Failure::error().into()).unwrap();
    assert_eq!(
        stats(&b, "n1").status,
        Status::Healthy,
        "a success breaks it"
    );
}

/// A paused node counts with the ejected ones under `max_ejection_percent` (10% of 10 nodes:
/// one at a time), both ways.
#[test]
fn pauses_and_ejections_share_the_ejection_cap() {
    let (b, _) = balancer(Algorithm::RoundRobin, 10, &[]);
    b.report("n0", overloaded(secs(5))).unwrap();
    for _ in 0..5 {
        b.report("n1", Outcome::Failure(ms(1))).unwrap();
    }
    assert_eq!(
        stats(&b, "n1").status,
        Status::Healthy,
        "over the cap: not ejected"
    );
    b.report("n2", overloaded(secs(5))).unwrap();
    assert_eq!(
        stats(&b, "n2").status,
        Status::Healthy,
        "over the cap: not paused"
    );

    let (b, _) = balancer(Algorithm::RoundRobin, 10, &[]);
    for _ in 0..5 {
        b.report("n1", Outcome::Failure(ms(1))).unwrap();
    }
    assert!(matches!(stats(&b, "n1").status, Status::Ejected { .. }));
    b.report("n0", overloaded(secs(5))).unwrap();
    assert_eq!(stats(&b, "n0").status, Status::Healthy);
}

/// With the cap reached by pauses and panic off, no node is left to pick.
#[test]
fn a_fleet_all_overloaded_with_panic_off_has_no_usable_node() {
    let (b, clock) = balancer(
        Algorithm::RoundRobin,
        2,
        &[("max_ejection_percent", "100"), ("panic_threshold", "0")],
    );
    b.report("n0", overloaded(secs(2))).unwrap();
    b.report("n1", overloaded(secs(3))).unwrap();
    assert_eq!(b.pick(None).unwrap_err(), Error::NoUsableNodes);
    clock.advance(secs(2));
    assert_eq!(b.pick(None).unwrap().id(), "n0");
}

/// Leases finish with a kind too, and an overloaded lease pauses its node.
#[test]
fn leases_finish_with_a_kind() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 10, &[]);
    let lease = b.acquire(None).unwrap();
    let id = lease.id().to_string();
    clock.advance(ms(7));
    lease.finish(overloaded(secs(5)));
    assert!(matches!(stats(&b, &id).status, Status::Overloaded { .. }));
    assert_eq!(stats(&b, &id).in_flight, 0);
}

fn latency_after(pairs: &[(&str, &str)], outcomes: &[Outcome]) -> Option<Duration> {
    let (b, _) = balancer(Algorithm::PeakEwma, 1, pairs);
    for outcome in outcomes {
        b.report("n0", *outcome).unwrap();
    }
    stats(&b, "n0").latency
}

/// The estimate is an `f32` of nanoseconds: 7 significant digits.
fn near(got: Option<Duration>, want: Duration) {
    let got = got.expect("a latency estimate").as_secs_f64();
    let want = want.as_secs_f64();
    assert!((got - want).abs() <= want * 1e-6, "{got} s, not {want} s");
}

#[test]
fn a_failure_costs_at_least_the_penalty_or_its_retry_after() {
    // test_fast_failure_more_expensive_than_healthy: a fast 503 reads as 5 s.
    let fast = [Outcome::Success(ms(100)), Outcome::Failure(ms(1))];
    near(latency_after(&[], &fast), secs(5));
    // test_small_retry_after_floored_at_base_penalty: Retry-After: 1 → 5 s.
    let small = Failure::overloaded()
        .retry_after(secs(1))
        .after(ms(1))
        .into();
    near(latency_after(&[], &[small]), secs(5));
    // test_429_with_retry_after_capped_at_max: Retry-After: 600 with a 300 s cap → 300 s.
    let long = Failure::overloaded().retry_after(secs(600)).into();
    let capped = [("max_retry_after_ms", "300000")];
    near(latency_after(&capped, &[long]), secs(300));
    // test_retry_after_hint_load_grows_monotonically: 0, 1, 5, 30, 120, 300 s.
    let mut last = Duration::ZERO;
    for hint in [0, 1, 5, 30, 120, 300] {
        let outcome = Failure::overloaded().retry_after(secs(hint)).into();
        let latency = latency_after(&capped, &[outcome]).unwrap();
        assert!(latency >= last, "{hint} s: {latency:?} < {last:?}");
        last = latency;
    }
    // A failure slower than the penalty counts its own latency; one never lowers the estimate.
    near(latency_after(&[], &[Outcome::Failure(secs(9))]), secs(9));
    let after_slow = [Outcome::Success(secs(20)), Failure::error().into()];
    near(latency_after(&[], &after_slow), secs(20));
    // Penalty off: a failure samples its latency, and one without a latency nothing.
    let off = [("failure_penalty_ms", "0")];
    near(latency_after(&off, &[Outcome::Failure(ms(1))]), ms(1));
    assert_eq!(latency_after(&off, &[Failure::timeout().into()]), None);
    // A timeout without a latency, penalty on: the penalty.
    near(latency_after(&[], &[Failure::timeout().into()]), secs(5));
}

/// test_penalty_decays_over_time: a 429 reads as 5 s, and 10 s (one decay period) later as
/// 5·e⁻¹ ≈ 1.839 s (linkerd asserts 1.0 < load < 2.5).
#[test]
fn the_penalty_decays_like_any_sample() {
    let load = Load::default();
    let penalty = Penalty {
        base: DEFAULT_FAILURE_PENALTY,
        max_pause: secs(300),
    };
    let start = secs(1000).as_nanos() as u64;
    load.record_with(Failure::overloaded().into(), start, secs(10), penalty);
    assert_eq!(load.latency(), Some(secs(5)));
    let later = start + secs(10).as_nanos() as u64;
    let decayed = load.decayed_latency_ns(later, secs(10)).unwrap() / 1e9;
    assert!((decayed - 5.0 * (-1f32).exp()).abs() < 1e-3, "{decayed}");
}

/// What the penalty is for: under `peak_ewma` a node that fails fast no longer looks like
/// the fastest node. Two nodes, n0 answering errors in 1 ms and n1 successes in 20 ms; over
/// 2,000 requests (one every 10 ms of virtual time) n0 gets the larger share without the
/// penalty and under 10% with it (ejection off, to see the balancer's choice alone).
#[test]
fn peak_ewma_stops_favouring_a_node_that_fails_fast() {
    let share_of_failing = |pairs: &[(&str, &str)]| {
        let (b, clock) = balancer(Algorithm::PeakEwma, 2, pairs);
        let mut to_n0 = 0;
        for _ in 0..2000 {
            let lease = b.acquire(None).unwrap();
            if lease.id() == "n0" {
                to_n0 += 1;
                clock.advance(ms(1));
                lease.finish(Outcome::Failure(ms(1)));
                clock.advance(ms(9));
            } else {
                clock.advance(ms(20));
                lease.success();
            }
        }
        f64::from(to_n0) / 2000.0
    };
    // Ejection off, to see the balancer's choice alone.
    let without = share_of_failing(&[("failure_penalty_ms", "0"), ("consecutive_failures", "0")]);
    let with = share_of_failing(&[("consecutive_failures", "0")]);
    assert!(without > 0.5, "without the penalty n0 got {without}");
    assert!(with < 0.1, "with the penalty n0 got {with}");
}
