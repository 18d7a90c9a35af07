//! Success-rate and failure-percentage ejection (issue 21, deliverable 2), ported from Envoy's
//! `test/common/upstream/outlier_detection_impl_test.cc` (`OutlierUtility.SRThreshold`,
//! `BasicFlowSuccessRateExternalOrigin`, `BasicFlowFailurePercentageExternalOrigin`,
//! `EmptySuccessRate`) with their numbers, and from grpc-go's
//! `internal/xds/balancer/outlierdetection/balancer_test.go` (`TestEjectUnejectSuccessRate`,
//! three upstreams). Envoy runs the detectors on a timer; here the look at an interval runs at
//! the first outcome reported after it ends, so each test reports one success to trigger it.
//! Consecutive-failure ejection is turned off where the Envoy test turns it off.

mod common;

use common::{ejected, options, secs, status};
use liblb_core::{Algorithm, Balancer, Failure, ManualClock, Node, Outcome, Status};
use std::sync::Arc;
use std::time::Duration;

const OK: Outcome = Outcome::Success(Duration::from_millis(1));
const ERR: Outcome = Outcome::Failure(Duration::from_millis(1));

fn balancer(n: usize, pairs: &[(&str, &str)]) -> (Balancer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(secs(1000)));
    let nodes: Vec<Node> = (0..n)
        .map(|i| Node::new(format!("h{i}").as_str(), 1))
        .collect();
    let b = Balancer::with_clock(Algorithm::RoundRobin, nodes, options(pairs), clock.clone());
    (b.unwrap(), clock)
}

fn report(b: &Balancer, id: &str, outcome: Outcome, times: usize) {
    for _ in 0..times {
        b.report(id, outcome).unwrap();
    }
}

/// Ends the interval: advances the clock to `to` seconds after the start (1000 s) and reports
/// one success on `h0`, which runs the look.
fn tick(b: &Balancer, clock: &ManualClock, to: u64) {
    clock.set(secs(1000 + to));
    b.report("h0", OK).unwrap();
}

const NO_CONSECUTIVE: (&str, &str) = ("consecutive_failures", "0");

/// BasicFlowSuccessRateExternalOrigin (and OutlierUtility.SRThreshold's data: rates 50, 100,
/// 100, 100, 100 give mean 90, threshold 52): host 4 at 50% is ejected at the interval's end
/// for the base ejection time, back after it; in the next round 25 + 25 outcomes are below the
/// volume of 100 and nobody is ejected.
#[test]
fn envoy_basic_flow_success_rate() {
    let (b, clock) = balancer(5, &[NO_CONSECUTIVE]);
    for h in 0..5 {
        report(&b, &format!("h{h}"), OK, 200);
    }
    report(&b, "h4", ERR, 200);
    assert_eq!(ejected(&b), Vec::<String>::new());
    tick(&b, &clock, 10);
    let until_ns = secs(1000 + 10 + 30).as_nanos() as u64;
    assert_eq!(status(&b, "h4"), Status::Ejected { until_ns });
    assert_eq!(ejected(&b), ["h4"]);
    clock.set(secs(1000 + 19));
    assert_eq!(ejected(&b), ["h4"]);
    clock.set(secs(1000 + 40));
    assert_eq!(ejected(&b), Vec::<String>::new());
    // The next interval: 25 successes each, 25 failures on h4 (rate 50 at volume 50).
    tick(&b, &clock, 50);
    for h in 0..5 {
        report(&b, &format!("h{h}"), OK, 25);
    }
    report(&b, "h4", ERR, 25);
    tick(&b, &clock, 60);
    assert_eq!(ejected(&b), Vec::<String>::new());
}

/// The threshold is strict and the deviation the population's: rates 50 and four of 100 give
/// mean 90 and stdev 20, so with `success_rate_stdev_factor` 1900 the bar is 52 (50 is out),
/// with 2000 it is 50 (50 is not below it: stays), with 2001 below 50.
#[test]
fn the_success_rate_bar_is_mean_minus_factor_stdevs_strictly() {
    for (factor, out) in [(1900, true), (2000, false), (2001, false), (1000, true)] {
        let factor = factor.to_string();
        let (b, clock) = balancer(5, &[NO_CONSECUTIVE, ("success_rate_stdev_factor", &factor)]);
        for h in 0..5 {
            report(&b, &format!("h{h}"), OK, 100);
        }
        report(&b, "h4", ERR, 100);
        tick(&b, &clock, 10);
        assert_eq!(ejected(&b) == ["h4"], out, "factor {factor}");
    }
}

/// BasicFlowFailurePercentageExternalOrigin: success rate off, failure percentage on (85%,
/// 5 hosts, volume 50). h3 fails 250 of 300 (83.3%: stays), h4 300 of 350 (85.7%: out).
#[test]
fn envoy_basic_flow_failure_percentage() {
    let (b, clock) = balancer(
        5,
        &[
            NO_CONSECUTIVE,
            ("enforcing_success_rate", "0"),
            ("enforcing_failure_percentage", "100"),
            ("max_ejection_percent", "100"),
        ],
    );
    for h in 0..5 {
        report(&b, &format!("h{h}"), OK, 50);
    }
    report(&b, "h3", ERR, 250);
    report(&b, "h4", ERR, 300);
    tick(&b, &clock, 10);
    assert_eq!(ejected(&b), ["h4"]);
}

/// Failure percentage is `>=` its threshold, as Envoy (gRFC A50 says `>`): exactly 85% is
/// out, 84% stays.
#[test]
fn failure_percentage_at_the_threshold_ejects() {
    for (failures, want) in [(85, vec!["h2"]), (84, vec![])] {
        let (b, clock) = balancer(
            5,
            &[
                NO_CONSECUTIVE,
                ("enforcing_success_rate", "0"),
                ("enforcing_failure_percentage", "100"),
            ],
        );
        for h in [0, 1, 3, 4] {
            report(&b, &format!("h{h}"), OK, 100);
        }
        report(&b, "h2", OK, 100 - failures);
        report(&b, "h2", ERR, failures);
        tick(&b, &clock, 10);
        assert_eq!(ejected(&b), want, "{failures} of 100");
    }
}

/// grpc-go TestEjectUnejectSuccessRate (three upstreams, failure percentage threshold 50,
/// minimum hosts 3, volume 3, 5 calls each): one upstream failing every call is ejected; none
/// failing, none ejected; enforcement 0, none ejected.
#[test]
fn grpc_three_upstreams() {
    let fp = |enforcing: &'static str| {
        [
            NO_CONSECUTIVE,
            ("enforcing_success_rate", "0"),
            ("enforcing_failure_percentage", enforcing),
            ("failure_percentage_threshold", "50"),
            ("failure_percentage_minimum_hosts", "3"),
            ("failure_percentage_request_volume", "3"),
        ]
    };
    for (enforcing, failing, want) in [
        ("100", true, vec!["h2"]),
        ("100", false, vec![]),
        ("0", true, vec![]),
    ] {
        let (b, clock) = balancer(3, &fp(enforcing));
        for h in 0..3 {
            let outcome = if failing && h == 2 { ERR } else { OK };
            report(&b, &format!("h{h}"), outcome, 5);
        }
        tick(&b, &clock, 10);
        assert_eq!(
            ejected(&b),
            want,
            "enforcing {enforcing}, failing {failing}"
        );
    }
}

/// EmptySuccessRate and the minimum hosts: with fewer than `success_rate_minimum_hosts` nodes
/// over the volume (or none at all) nothing is judged.
#[test]
fn too_few_hosts_or_too_little_volume_judge_nothing() {
    let (b, clock) = balancer(5, &[NO_CONSECUTIVE]);
    for h in 0..4 {
        report(&b, &format!("h{h}"), OK, 100);
    }
    report(&b, "h4", OK, 99);
    report(&b, "h3", ERR, 100);
    tick(&b, &clock, 10);
    assert_eq!(
        ejected(&b),
        Vec::<String>::new(),
        "h4 under the volume: 4 hosts"
    );
    let (b, clock) = balancer(5, &[NO_CONSECUTIVE, ("success_rate_minimum_hosts", "0")]);
    tick(&b, &clock, 10);
    tick(&b, &clock, 20);
    assert_eq!(ejected(&b), Vec::<String>::new());
}

/// Overloaded answers are neither successes nor failures for the detectors (a node shedding
/// load is not broken, and its retry-after handles it).
#[test]
fn overloaded_answers_are_not_tallied() {
    let (b, clock) = balancer(5, &[NO_CONSECUTIVE, ("max_retry_after_ms", "0")]);
    for h in 0..5 {
        report(&b, &format!("h{h}"), OK, 100);
    }
    report(&b, "h4", Failure::overloaded().into(), 300);
    tick(&b, &clock, 10);
    assert_eq!(ejected(&b), Vec::<String>::new());
}

/// The flaky node of issue 21: one of ten nodes fails 30% of its requests, never five in a
/// row, so consecutive-failure ejection never fires; success-rate ejection takes it out at the
/// end of the first interval with enough volume.
#[test]
fn a_node_failing_a_third_of_its_requests_is_ejected_by_success_rate_alone() {
    // 3 failures in every 10, spread out: never 5 in a row.
    let pattern = [OK, ERR, OK, OK, ERR, OK, OK, ERR, OK, OK];
    for (success_rate, want) in [("100", vec!["h9"]), ("0", vec![])] {
        let (b, clock) = balancer(10, &[("enforcing_success_rate", success_rate)]);
        for _ in 0..15 {
            for h in 0..9 {
                report(&b, &format!("h{h}"), OK, 10);
            }
            for outcome in pattern {
                b.report("h9", outcome).unwrap();
            }
        }
        assert_eq!(ejected(&b), Vec::<String>::new(), "no streak of 5");
        tick(&b, &clock, 10);
        assert_eq!(ejected(&b), want, "enforcing_success_rate {success_rate}");
    }
}

/// A late look (no outcome for a long time after the interval ended) judges that interval as
/// of its end: the ejection dates from then, so one that would be over by now is over.
#[test]
fn a_late_look_ejects_as_of_the_intervals_end() {
    let (b, clock) = balancer(5, &[NO_CONSECUTIVE]);
    for h in 0..5 {
        report(&b, &format!("h{h}"), OK, 200);
    }
    report(&b, "h4", ERR, 200);
    tick(&b, &clock, 25);
    let until_ns = secs(1000 + 10 + 30).as_nanos() as u64;
    assert_eq!(status(&b, "h4"), Status::Ejected { until_ns });
    let (b, clock) = balancer(5, &[NO_CONSECUTIVE]);
    for h in 0..5 {
        report(&b, &format!("h{h}"), OK, 200);
    }
    report(&b, "h4", ERR, 200);
    tick(&b, &clock, 100);
    assert_eq!(status(&b, "h4"), Status::Healthy);
}

/// Options are checked: percentages at most 100, the interval at least 1 ms.
#[test]
fn detector_options_are_checked() {
    let mut o = liblb_core::Options::default();
    for (name, value) in [
        ("enforcing_success_rate", "101"),
        ("enforcing_failure_percentage", "101"),
        ("failure_percentage_threshold", "101"),
        ("interval_ms", "0"),
        ("success_rate_request_volume", "4294967296"),
    ] {
        let err = o
            .set(name, liblb_core::OptionValue::Str(value))
            .unwrap_err();
        assert_eq!(err.code(), "LB_INVALID_OPTION_VALUE", "{name}={value}");
        assert!(err.to_string().contains(name), "{err}");
    }
    assert_eq!(o, liblb_core::Options::default());
}
