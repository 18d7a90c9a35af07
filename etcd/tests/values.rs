//! `parse_member` against the one table of member values every language follows
//! (`tests/membership/values.json`, issue 20 finding 2): every accepted row with its weight,
//! tag, locality and priority, every rejected row refused.

use liblb_etcd::{Member, parse_member, parse_value};
use serde_json::Value;

fn table() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/membership/values.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("values.json is JSON")
}

/// A row's value: `value` (UTF-8 text) or `value_hex` (bytes).
fn bytes(row: &Value) -> Vec<u8> {
    if let Some(text) = row.get("value").and_then(Value::as_str) {
        return text.as_bytes().to_vec();
    }
    let hex = row["value_hex"].as_str().expect("value or value_hex");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn every_row_of_the_shared_table_agrees() {
    let table = table();
    let accepted = table["accepted"].as_array().unwrap();
    let rejected = table["rejected"].as_array().unwrap();
    assert!(
        accepted.len() >= 10 && rejected.len() >= 30,
        "the table is incomplete"
    );
    let mut wrong = Vec::new();
    for row in accepted {
        let want = Member {
            weight: u32::try_from(row["weight"].as_u64().unwrap()).unwrap(),
            tag: row["tag"].as_u64().unwrap(),
            locality: row
                .get("locality")
                .map_or("", |l| l.as_str().unwrap())
                .into(),
            priority: row
                .get("priority")
                .map_or(0, |p| p.as_u64().unwrap() as u32),
        };
        let got = parse_member(&bytes(row));
        if got.as_ref() != Ok(&want) {
            wrong.push(format!("accepted row {row}: got {got:?}, want {want:?}"));
        }
        // `parse_value` is the same rules without the location.
        if parse_value(&bytes(row)) != Ok((want.weight, want.tag)) {
            wrong.push(format!("accepted row {row}: parse_value disagrees"));
        }
    }
    for row in rejected {
        if let Ok(got) = parse_member(&bytes(row)) {
            wrong.push(format!("rejected row {row}: accepted as {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn duplicates_and_literals_are_named_in_the_error() {
    for (value, why) in [
        (
            r#"{"weight": 1, "weight": 9}"#,
            "duplicate field \"weight\"",
        ),
        (r#"{"tag": 1, "tag": 2}"#, "duplicate field \"tag\""),
        (
            r#"{"weight": 1, "w\u0065ight": 2}"#,
            "duplicate field \"weight\"",
        ),
        (
            r#"{"weight": 1.0}"#,
            "\"weight\" must be an integer in 0..=4294967295, not 1.0",
        ),
        (r#"{"tag": 1e2}"#, "\"tag\" must be an integer"),
        (r#"{"weight": -1}"#, "\"weight\" must be an integer"),
        (r#"{"priority": 1.5}"#, "\"priority\" must be an integer"),
        (r#"{"locality": 3}"#, "\"locality\" must be a string"),
        (r#"{"locality": "a/b/c/d"}"#, "invalid locality \"a/b/c/d\""),
        (r#"{"zone": "a"}"#, "unknown field \"zone\""),
    ] {
        let e = parse_value(value.as_bytes()).unwrap_err();
        assert!(e.contains(why), "{value}: {e}");
    }
}

/// Pathological nesting is a clean, short error, not a stack overflow: run on a small stack so
/// an unbounded recursion would crash the test.
#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let arrays = format!(
        "{{\"weight\": {}1{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let objects = format!("{}1{}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
    let unclosed = "[".repeat(100_000);
    let errors = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || [arrays, objects, unclosed].map(|v| parse_value(v.as_bytes()).unwrap_err()))
        .unwrap()
        .join()
        .expect("no stack overflow");
    // Refused before parsing: more than 32 '{' and '[' (the rule the Python reader needs to
    // bound its parser's recursion, kept here so both refuse the same values).
    for (e, why) in errors.iter().zip(["not a flat JSON object"; 3]) {
        assert!(e.contains(why), "{e}");
        assert!(
            e.len() < 300,
            "the error quotes the whole value: {} bytes",
            e.len()
        );
    }
}
