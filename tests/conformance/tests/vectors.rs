//! The checked-in vectors are fresh, and replaying them through the Rust API gives exactly the
//! recorded answers and errors, with every failed step leaving the balancer unchanged.

use liblb_conformance::{
    Leases, Time, VECTORS_PATH, build, build_policy, render, run_policy_step, run_request, run_step,
};
use serde_json::Value;
use std::path::Path;

fn checked_in() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(VECTORS_PATH);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn checked_in_vectors_are_up_to_date() {
    assert!(
        checked_in() == render(),
        "{VECTORS_PATH} is stale: run `cargo run -p liblb-conformance --bin gen-vectors` and commit"
    );
}

#[test]
fn vectors_replay_through_the_rust_api() {
    let doc: Value = serde_json::from_str(&checked_in()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    let (mut checked, mut refused) = (0, 0);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let built = build(
            case["algorithm"].as_str().unwrap(),
            &case["options"],
            &case["nodes"],
        );
        let b = match (built, case.get("expect_error")) {
            (Ok(b), None) => b,
            (Err(e), Some(code)) => {
                assert_eq!(e.code(), code.as_str().unwrap(), "{name}");
                refused += 1;
                continue;
            }
            (got, want) => panic!("{name}: built {}, expected error {want:?}", got.is_ok()),
        };
        let mut leases = Leases::new();
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let before = b.nodes();
            match (
                run_step(&b, &mut leases, step, &Time::Real),
                step.get("expect_error"),
            ) {
                (Ok(answer), None) => {
                    assert_eq!(
                        answer,
                        *step.get("expect").unwrap_or(&Value::Null),
                        "{name} step {i}"
                    )
                }
                (Err(e), Some(code)) => {
                    assert_eq!(e.code(), code.as_str().unwrap(), "{name} step {i}");
                    assert_eq!(
                        b.nodes(),
                        before,
                        "{name} step {i}: failed step changed nodes"
                    );
                }
                (got, want) => panic!("{name} step {i}: got {got:?}, expected error {want:?}"),
            }
            checked += 1;
        }
    }
    assert!(checked > 300, "only {checked} steps");
    assert!(refused >= 3, "only {refused} cases refused");
}

#[test]
fn budget_vectors_replay_through_the_rust_api() {
    let doc: Value = serde_json::from_str(&checked_in()).unwrap();
    let cases = doc["budgets"].as_array().unwrap();
    let mut checked = 0;
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let built = build_policy(case["object"].as_str().unwrap(), &case["args"]);
        let policy = match (built, case.get("expect_error")) {
            (Ok(policy), None) => policy,
            (Err(e), Some(code)) => {
                assert_eq!(e.code(), code.as_str().unwrap(), "{name}");
                continue;
            }
            (got, want) => panic!("{name}: built {}, expected error {want:?}", got.is_ok()),
        };
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let answer = run_policy_step(&policy, step);
            assert_eq!(
                answer,
                *step.get("expect").unwrap_or(&Value::Null),
                "{name} step {i}"
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} budget steps");
}

#[test]
fn request_vectors_replay_through_the_rust_api() {
    let doc: Value = serde_json::from_str(&checked_in()).unwrap();
    let cases = doc["requests"].as_array().unwrap();
    assert!(cases.len() >= 5, "only {} request cases", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let b = build(
            case["algorithm"].as_str().unwrap(),
            &case["options"],
            &case["nodes"],
        )
        .unwrap();
        let outcomes = case["outcomes"].as_array().unwrap();
        let got = run_request(&b, &case["request"], outcomes).unwrap();
        assert_eq!(got, case["expect"], "{name}");
    }
}

#[test]
fn orca_vectors_replay_through_the_rust_api() {
    let doc: Value = serde_json::from_str(&checked_in()).unwrap();
    let cases = doc["orca"].as_array().unwrap();
    assert!(cases.len() >= 15, "only {} orca cases", cases.len());
    let (mut parsed, mut refused) = (0, 0);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let input = liblb_conformance::unhex(case["input_hex"].as_str().unwrap());
        match (liblb_core::parse_orca(&input), case.get("expect_error")) {
            (Ok(report), None) => {
                assert_eq!(
                    liblb_conformance::report_json(&report),
                    case["expect"],
                    "{name}"
                );
                parsed += 1;
            }
            (Err(e), Some(code)) => {
                assert_eq!(e.code(), code.as_str().unwrap(), "{name}");
                refused += 1;
            }
            (got, want) => panic!("{name}: got {got:?}, expected error {want:?}"),
        }
    }
    assert!(
        parsed >= 5 && refused >= 5,
        "{parsed} parsed, {refused} refused"
    );
}
