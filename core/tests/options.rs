//! Options as a whole (issue 19, finding 11): each `set` checks only its own option, so the
//! order options are given in never matters; rules between options are checked once by
//! `validate` (which every constructor calls); `max_ejection_time_ms` left unset follows a
//! longer `base_ejection_time_ms` as Envoy's does; and `changed_numbers` (what bindings' `repr`
//! print) sets back to the same options.

use liblb_core::{Algorithm, Balancer, Error, ManualClock, OptionValue, Options, Outcome, Status};
use std::sync::Arc;
use std::time::Duration;

fn set_all(pairs: &[(&str, u64)]) -> Result<Options, Error> {
    let mut options = Options::default();
    for (name, value) in pairs {
        options.set(name, OptionValue::Int(*value))?;
    }
    options.validate()?;
    Ok(options)
}

/// Every order of `pairs` gives the same answer.
fn any_order(pairs: &[(&str, u64)]) -> Result<Options, Error> {
    let forward = set_all(pairs);
    let mut reversed = pairs.to_vec();
    reversed.reverse();
    assert_eq!(forward, set_all(&reversed), "{pairs:?}");
    forward
}

fn option_error(err: Error) -> &'static str {
    match err {
        Error::InvalidOptionValue { option, .. } => option,
        other => panic!("expected an option error, got {other}"),
    }
}

#[test]
fn options_are_accepted_in_any_order() {
    let o = any_order(&[
        ("max_ejection_time_ms", 1000),
        ("base_ejection_time_ms", 500),
    ])
    .unwrap();
    assert_eq!(o.base_ejection_time, Duration::from_millis(500));
    assert_eq!(o.max_ejection_time, Duration::from_millis(1000));
    let o = any_order(&[("max_ring_size", 512), ("min_ring_size", 256)]).unwrap();
    assert_eq!((o.min_ring_size, o.max_ring_size), (256, 512));
    // A ring_hash balancer builds with them.
    Balancer::new(Algorithm::RingHash, ["a", "b"], o).unwrap();
}

#[test]
fn rules_between_options_fail_whatever_the_order() {
    for pairs in [
        &[
            ("max_ejection_time_ms", 500),
            ("base_ejection_time_ms", 1000),
        ][..],
        &[("max_ring_size", 256), ("min_ring_size", 512)][..],
        // A max that was given does not follow the base, even at its default value (Envoy).
        &[
            ("max_ejection_time_ms", 300_000),
            ("base_ejection_time_ms", 400_000),
        ][..],
    ] {
        let err = any_order(pairs).unwrap_err();
        assert_eq!(option_error(err), pairs[0].0, "{pairs:?}");
        // The constructors check the same rule.
        let mut options = Options::default();
        for (name, value) in pairs {
            options.set(name, OptionValue::Int(*value)).unwrap();
        }
        assert_eq!(
            option_error(Balancer::new(Algorithm::RingHash, ["a"], options).unwrap_err()),
            pairs[0].0
        );
    }
}

#[test]
fn an_unset_max_ejection_time_follows_a_longer_base_as_envoys_does() {
    let o = set_all(&[("base_ejection_time_ms", 400_000)]).unwrap();
    assert_eq!(o.max_ejection_time, Duration::from_secs(400));
    assert!(!o.max_ejection_time_set);
    // Back to the default once the base is short again.
    let o = set_all(&[
        ("base_ejection_time_ms", 400_000),
        ("base_ejection_time_ms", 1000),
    ])
    .unwrap();
    assert_eq!(o.max_ejection_time, Duration::from_secs(300));
    // A max written directly to the field is not overwritten by a later base.
    let mut o = Options {
        max_ejection_time: Duration::from_secs(1000),
        ..Options::default()
    };
    o.set("base_ejection_time_ms", OptionValue::Int(500_000))
        .unwrap();
    assert_eq!(o.max_ejection_time, Duration::from_secs(1000));

    // And the ejection really lasts the base: not cut to 300 s.
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1)));
    let options = set_all(&[
        ("base_ejection_time_ms", 400_000),
        ("consecutive_failures", 1),
    ]);
    let b = Balancer::with_clock(
        Algorithm::RoundRobin,
        ["a", "b"],
        options.unwrap(),
        clock.clone(),
    )
    .unwrap();
    b.report("a", Outcome::Failure(Duration::from_millis(1)))
        .unwrap();
    let until = b.stats()[0].status.until_ns().unwrap();
    assert_eq!(until, Duration::from_secs(401).as_nanos() as u64);
    clock.advance(Duration::from_secs(399));
    assert!(matches!(b.stats()[0].status, Status::Ejected { .. }));
}

#[test]
fn zero_ejection_times_are_refused() {
    for name in ["base_ejection_time_ms", "max_ejection_time_ms"] {
        let mut options = Options::default();
        let err = options.set(name, OptionValue::Int(0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("option \"{name}\" expects at least 1 (milliseconds), got \"0\"")
        );
        assert_eq!(options, Options::default());
    }
    let options = Options {
        base_ejection_time: Duration::ZERO,
        ..Options::default()
    };
    assert_eq!(
        option_error(options.validate().unwrap_err()),
        "base_ejection_time_ms"
    );
}

#[test]
fn a_failed_set_leaves_the_options_as_they_were() {
    let mut options = set_all(&[("base_ejection_time_ms", 400_000)]).unwrap();
    let before = options;
    for (name, value) in [
        ("base_ejection_time_ms", OptionValue::Int(0)),
        ("base_ejection_time_ms", OptionValue::Str("x")),
        ("max_ejection_time_ms", OptionValue::Int(0)),
        ("slow_start_aggression", OptionValue::Str("-1")),
        ("max_ring_size", OptionValue::Int(0)),
    ] {
        assert!(options.set(name, value).is_err(), "{name}");
        assert_eq!(options, before, "{name}");
    }
}

#[test]
fn changed_numbers_set_back_to_the_same_options() {
    for pairs in [
        &[("base_ejection_time_ms", 400_000)][..],
        &[
            ("base_ejection_time_ms", 400_000),
            ("max_ejection_time_ms", 400_000),
        ][..],
        &[("max_ejection_time_ms", 300_000)][..],
        &[
            ("max_ejection_time_ms", 1000),
            ("base_ejection_time_ms", 500),
        ][..],
        &[
            ("max_ring_size", 512),
            ("min_ring_size", 256),
            ("slow_start_window_ms", 9),
        ][..],
    ] {
        let options = any_order(pairs).unwrap();
        let mut back = Options::default();
        for (name, value) in options.changed_numbers() {
            back.set(name, OptionValue::Str(&value)).unwrap();
        }
        back.validate().unwrap();
        assert_eq!(back, options, "{pairs:?}");
    }
}

#[test]
fn long_values_are_shortened_in_errors() {
    let mut options = Options::default();
    let digits = "9".repeat(400);
    for name in [
        "slow_start_aggression",
        "vnodes",
        "seed",
        "base_ejection_time_ms",
    ] {
        let err = options.set(name, OptionValue::Str(&digits)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.len() < 160 && text.contains("(400 characters)"),
            "{text}"
        );
    }
    let err = options
        .set("slow_start_aggression", OptionValue::Str("-1"))
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("expects a number above 0, got \"-1\""),
        "{err}"
    );
}

#[test]
fn huge_numbers_are_written_short_in_errors() {
    let mut options = Options::default();
    let err = options
        .set("slow_start_aggression", OptionValue::Str("-1e300"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "option \"slow_start_aggression\" expects a number above 0, got \"-1e300\""
    );
}

#[test]
fn each_option_says_its_own_range() {
    let mut options = Options::default();
    for value in [1, 17, 5_000_000_000] {
        let err = options
            .set("choice_count", OptionValue::Int(value))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("option \"choice_count\" expects an integer from 2 to 16, got \"{value}\"")
        );
    }
    assert_eq!(options, Options::default());
}
