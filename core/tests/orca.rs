//! ORCA load reports (issue 25): `parse_orca` on proto bytes and on Envoy's `BIN `/`JSON `/`TEXT `
//! header values.
//!
//! - Round trips of every field through proto bytes written by a tiny encoder below (protobuf's
//!   own layout: fields in number order, map entries as `{1: key, 2: value}` messages), and a
//!   hand-encoded report with its derivation written out.
//! - Envoy's expectations, ported from `test/common/orca/orca_parser_test.cc` (envoyproxy/envoy
//!   commit `b2087b3d`): each test names its upstream `TEST(OrcaParserUtilTest, ...)`. Envoy's
//!   tests run on a header map; here each header value is given to `parse_orca` directly.
//!   Not ported, because they are about choosing among headers, which is the caller's job:
//!   `NoHeaders`, `MissingOrcaHeaders`, `BinHeaderPrecedence`.
//! - Hostile input: truncation at every byte, giant lengths, long varints, wrong wire types,
//!   groups, bad UTF-8; proptest: arbitrary bytes never panic and parse deterministically.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use liblb_core::{Error, HeaderForm, LoadReport, MAX_GROUP_DEPTH, parse_orca};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// A test-only encoder
// ---------------------------------------------------------------------------------------------

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn double(out: &mut Vec<u8>, field: u32, v: f64) {
    tag(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn delimited(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn entry(out: &mut Vec<u8>, field: u32, key: &str, value: f64) {
    let mut e = Vec::new();
    if !key.is_empty() {
        delimited(&mut e, 1, key.as_bytes());
    }
    if value.to_bits() != 0 {
        double(&mut e, 2, value);
    }
    delimited(out, field, &e);
}

/// The report as protobuf writes it, one chunk per field (so truncation tests know where the
/// fields end): defaults (bit pattern 0) omitted, fields in number order, maps in their order.
fn encode_fields(r: &LoadReport) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut scalar = |field: u32, v: f64| {
        if v.to_bits() != 0 {
            let mut c = Vec::new();
            double(&mut c, field, v);
            chunks.push(c);
        }
    };
    scalar(1, r.cpu_utilization);
    scalar(2, r.mem_utilization);
    let mut after = Vec::new();
    if r.rps != 0 {
        let mut c = Vec::new();
        tag(&mut c, 3, 0);
        varint(&mut c, r.rps);
        after.push(c);
    }
    for (field, map) in [(4, &r.request_cost), (5, &r.utilization)] {
        for (k, v) in map {
            let mut c = Vec::new();
            entry(&mut c, field, k, *v);
            after.push(c);
        }
    }
    let mut tail = Vec::new();
    let mut scalar = |field: u32, v: f64| {
        if v.to_bits() != 0 {
            let mut c = Vec::new();
            double(&mut c, field, v);
            tail.push(c);
        }
    };
    scalar(6, r.rps_fractional);
    scalar(7, r.eps);
    for (k, v) in &r.named_metrics {
        let mut c = Vec::new();
        entry(&mut c, 8, k, *v);
        tail.push(c);
    }
    if r.application_utilization.to_bits() != 0 {
        let mut c = Vec::new();
        double(&mut c, 9, r.application_utilization);
        tail.push(c);
    }
    chunks.extend(after);
    chunks.extend(tail);
    chunks
}

fn encode(r: &LoadReport) -> Vec<u8> {
    encode_fields(r).concat()
}

fn pairs(list: &[(&str, f64)]) -> Vec<(String, f64)> {
    list.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

/// Envoy's `exampleOrcaLoadReport()` (orca_parser_test.cc).
fn envoy_example() -> LoadReport {
    LoadReport {
        cpu_utilization: 0.7,
        application_utilization: 0.8,
        mem_utilization: 0.9,
        eps: 2.0,
        rps_fractional: 1000.0,
        named_metrics: pairs(&[("foo", 123.0), ("bar", 0.2)]),
        ..LoadReport::default()
    }
}

/// Every field set, every map with two keys.
fn full_report() -> LoadReport {
    LoadReport {
        cpu_utilization: 0.25,
        mem_utilization: 0.5,
        application_utilization: 1.5,
        rps: 300,
        rps_fractional: 299.75,
        eps: 1.25,
        request_cost: pairs(&[("bytes", 3487.0), ("cpu_ms", 12.5)]),
        utilization: pairs(&[("gpu", 0.875), ("disk", 0.125)]),
        named_metrics: pairs(&[("rif", 7.0), ("queue", 3.0)]),
    }
}

/// The reason of an `InvalidLoadReport`, or a failure naming what came instead.
fn reason(input: &[u8]) -> String {
    match parse_orca(input) {
        Err(Error::InvalidLoadReport(reason)) => reason,
        other => panic!(
            "{:?}: expected InvalidLoadReport, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn ok(input: &[u8]) -> LoadReport {
    match parse_orca(input) {
        Ok(report) => report,
        Err(e) => panic!("{:?}: {e}", String::from_utf8_lossy(input)),
    }
}

fn header(prefix: &str, body: &str) -> Vec<u8> {
    format!("{prefix}{body}").into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Proto bytes: round trips and a hand-encoded example
// ---------------------------------------------------------------------------------------------

#[test]
fn every_field_round_trips_through_proto_bytes() {
    let report = full_report();
    assert_eq!(ok(&encode(&report)), report);
}

#[test]
fn each_field_alone_round_trips() {
    let full = full_report();
    let alone: Vec<LoadReport> = vec![
        LoadReport {
            cpu_utilization: full.cpu_utilization,
            ..LoadReport::default()
        },
        LoadReport {
            mem_utilization: full.mem_utilization,
            ..LoadReport::default()
        },
        LoadReport {
            application_utilization: 2.5,
            ..LoadReport::default()
        },
        LoadReport {
            rps: u64::MAX,
            ..LoadReport::default()
        },
        LoadReport {
            rps_fractional: 1e300,
            ..LoadReport::default()
        },
        LoadReport {
            eps: 5e-324,
            ..LoadReport::default()
        },
        LoadReport {
            request_cost: full.request_cost.clone(),
            ..LoadReport::default()
        },
        LoadReport {
            utilization: full.utilization.clone(),
            ..LoadReport::default()
        },
        LoadReport {
            named_metrics: full.named_metrics.clone(),
            ..LoadReport::default()
        },
    ];
    for report in alone {
        assert_eq!(ok(&encode(&report)), report, "{report:?}");
    }
}

#[test]
fn empty_input_is_the_empty_report() {
    // Protobuf parses zero bytes as the message with every field at its default. Envoy's
    // `EmptyOrcaHeader` refuses an empty *header value* ("unsupported ORCA header format: "), but
    // parse_orca cannot tell an empty header from an empty proto: it follows protobuf. A58
    // ignores the all-zero report anyway (utilisation 0).
    assert_eq!(ok(b""), LoadReport::default());
}

/// Envoy's example report, written out by hand as protobuf serializes it (field order; the
/// map's order is whatever the writer's map gives, here foo then bar):
///
/// ```text
/// 09 <0.7 LE>     field 1 cpu_utilization, wire type 1: tag (1<<3)|1 = 0x09; 0.7 = 0x3FE6666666666666
/// 11 <0.9 LE>     field 2 mem_utilization: tag 0x11; 0.9 = 0x3FECCCCCCCCCCCCD
/// 31 <1000 LE>    field 6 rps_fractional: tag 0x31; 1000.0 = 0x408F400000000000
/// 39 <2 LE>       field 7 eps: tag 0x39; 2.0 = 0x4000000000000000
/// 42 0E           field 8 named_metrics, wire type 2: tag (8<<3)|2 = 0x42, entry of 14 bytes:
///   0A 03 "foo"     entry field 1 key, wire type 2, 3 bytes
///   11 <123 LE>     entry field 2 value, wire type 1; 123.0 = 0x405EC00000000000
/// 42 0E 0A 03 "bar" 11 <0.2 LE>   0.2 = 0x3FC999999999999A
/// 49 <0.8 LE>     field 9 application_utilization: tag (9<<3)|1 = 0x49; 0.8 = 0x3FE999999999999A
/// ```
const ENVOY_EXAMPLE_BYTES: [u8; 77] = [
    0x09, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0xE6, 0x3F, //
    0x11, 0xCD, 0xCC, 0xCC, 0xCC, 0xCC, 0xCC, 0xEC, 0x3F, //
    0x31, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x8F, 0x40, //
    0x39, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, //
    0x42, 0x0E, 0x0A, 0x03, b'f', b'o', b'o', //
    0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xC0, 0x5E, 0x40, //
    0x42, 0x0E, 0x0A, 0x03, b'b', b'a', b'r', //
    0x11, 0x9A, 0x99, 0x99, 0x99, 0x99, 0x99, 0xC9, 0x3F, //
    0x49, 0x9A, 0x99, 0x99, 0x99, 0x99, 0x99, 0xE9, 0x3F, //
];

#[test]
fn hand_encoded_example_parses_and_matches_the_encoder() {
    assert_eq!(ok(&ENVOY_EXAMPLE_BYTES), envoy_example());
    assert_eq!(encode(&envoy_example()), ENVOY_EXAMPLE_BYTES);
}

/// The maps sorted by key, for comparing with writers that order map entries their own way.
fn sorted(mut r: LoadReport) -> LoadReport {
    for map in [
        &mut r.request_cost,
        &mut r.utilization,
        &mut r.named_metrics,
    ] {
        map.sort_by(|a, b| a.0.cmp(&b.0));
    }
    r
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Bytes and JSON written by Google's `protobuf` Python package (7.36.2, upb backend), with
/// `OrcaLoadReport` built at run time from a `FileDescriptorProto` carrying the .proto's field
/// names, numbers and types (no protoc needed):
///
/// ```text
/// r = Report(cpu_utilization=0.7, application_utilization=0.8, mem_utilization=0.9, eps=2,
///            rps_fractional=1000); r.named_metrics["foo"] = 123; r.named_metrics["bar"] = 0.2
/// r.SerializeToString(deterministic=True).hex()        # -> ENVOY below (map keys sorted)
/// f = full_report() in Python; f.SerializeToString(deterministic=True).hex()  # -> FULL
/// json_format.MessageToJson(f, indent=None)             # -> FULL_JSON
/// ```
///
/// The same package parses `10 01` (field 2 as a varint) without complaint, filing it among the
/// unknown fields: the leniency liblb declines (see the module docs).
#[test]
fn reports_written_by_the_protobuf_python_package() {
    const ENVOY: &str = "09666666666666e63f11cdccccccccccec3f310000000000408f40390000000000000040420e0a03626172119a9999999999c93f420e0a03666f6f110000000000c05e40499a9999999999e93f";
    const FULL: &str = "09000000000000d03f11000000000000e03f18ac0222100a0562797465731100000000003eab4022110a066370755f6d731100000000000029402a0f0a046469736b11000000000000c03f2a0e0a0367707511000000000000ec3f310000000000bc724039000000000000f43f42100a057175657565110000000000000840420e0a03726966110000000000001c4049000000000000f83f";
    const FULL_JSON: &str = r#"{"cpuUtilization": 0.25, "memUtilization": 0.5, "rps": "300", "requestCost": {"cpu_ms": 12.5, "bytes": 3487.0}, "utilization": {"gpu": 0.875, "disk": 0.125}, "rpsFractional": 299.75, "eps": 1.25, "namedMetrics": {"queue": 3.0, "rif": 7.0}, "applicationUtilization": 1.5}"#;
    let envoy = ok(&unhex(ENVOY));
    assert_eq!(
        envoy.named_metrics,
        pairs(&[("bar", 0.2), ("foo", 123.0)]),
        "wire order"
    );
    assert_eq!(sorted(envoy), sorted(envoy_example()));
    assert_eq!(sorted(ok(&unhex(FULL))), sorted(full_report()));
    assert_eq!(
        sorted(ok(&header("JSON ", FULL_JSON))),
        sorted(full_report())
    );
    let bin = format!("BIN {}", STANDARD.encode(unhex(FULL)));
    assert_eq!(sorted(ok(bin.as_bytes())), sorted(full_report()));
}

#[test]
fn a_deprecated_rps_and_a_utilization_map_by_hand() {
    // 18 AC 02: field 3 (rps), wire type 0: tag 0x18, 300 = 0b10_0101100 -> AC 02.
    // 2A 0C 0A 03 "gpu" 11 <0.5>: field 5 (utilization) entry {key "gpu", value 0.5 = 0x3FE0...}.
    let bytes = [
        0x18, 0xAC, 0x02, 0x2A, 0x0E, 0x0A, 0x03, b'g', b'p', b'u', 0x11, 0, 0, 0, 0, 0, 0, 0xE0,
        0x3F,
    ];
    let report = ok(&bytes);
    assert_eq!(report.rps, 300);
    assert_eq!(report.utilization_of("gpu"), Some(0.5));
}

#[test]
fn negative_nan_and_infinite_values_in_proto_are_kept() {
    // Protobuf, Envoy and gRPC keep them; judging a report is the consumer's job (A58).
    let report = LoadReport {
        cpu_utilization: -1.0,
        mem_utilization: f64::INFINITY,
        eps: f64::NAN,
        ..LoadReport::default()
    };
    let parsed = ok(&encode(&report));
    assert_eq!(parsed.cpu_utilization, -1.0);
    assert_eq!(parsed.mem_utilization, f64::INFINITY);
    assert!(parsed.eps.is_nan());
}

#[test]
fn repeated_scalars_last_wins_and_repeated_map_keys_last_value_first_position() {
    let mut bytes = Vec::new();
    double(&mut bytes, 1, 0.1);
    entry(&mut bytes, 8, "a", 1.0);
    entry(&mut bytes, 8, "b", 2.0);
    double(&mut bytes, 1, 0.2);
    entry(&mut bytes, 8, "a", 3.0);
    entry(&mut bytes, 4, "a", 9.0);
    tag(&mut bytes, 3, 0);
    varint(&mut bytes, 5);
    tag(&mut bytes, 3, 0);
    varint(&mut bytes, 6);
    let report = ok(&bytes);
    assert_eq!(report.cpu_utilization, 0.2);
    assert_eq!(report.rps, 6);
    assert_eq!(report.named_metrics, pairs(&[("a", 3.0), ("b", 2.0)]));
    assert_eq!(report.request_cost, pairs(&[("a", 9.0)]));
}

#[test]
fn map_entries_missing_key_or_value_take_defaults_and_skip_unknown_fields() {
    let mut bytes = Vec::new();
    // An empty entry: key "" and value 0.
    delimited(&mut bytes, 8, &[]);
    // An entry with its value first, an unknown varint field 3, and the key given twice.
    let mut e = Vec::new();
    double(&mut e, 2, 4.5);
    tag(&mut e, 3, 0);
    varint(&mut e, 99);
    delimited(&mut e, 1, b"first");
    delimited(&mut e, 1, b"last");
    delimited(&mut bytes, 8, &e);
    let report = ok(&bytes);
    assert_eq!(report.named_metrics, pairs(&[("", 0.0), ("last", 4.5)]));
    assert_eq!(report.named_metric("last"), Some(4.5));
    assert_eq!(report.named_metric("first"), None);
}

#[test]
fn unknown_fields_of_every_wire_type_are_skipped() {
    let mut bytes = Vec::new();
    double(&mut bytes, 1, 0.5);
    tag(&mut bytes, 10, 0); // varint
    varint(&mut bytes, u64::MAX);
    tag(&mut bytes, 11, 1); // 64-bit
    bytes.extend_from_slice(&[1; 8]);
    delimited(&mut bytes, 12, b"opaque bytes"); // length-delimited
    tag(&mut bytes, 13, 5); // 32-bit
    bytes.extend_from_slice(&[2; 4]);
    // A group holding a varint, a nested group and a 64-bit value.
    tag(&mut bytes, 14, 3);
    tag(&mut bytes, 1, 0);
    varint(&mut bytes, 7);
    tag(&mut bytes, 2, 3);
    delimited(&mut bytes, 3, b"x");
    tag(&mut bytes, 2, 4);
    double(&mut bytes, 4, 1.0);
    tag(&mut bytes, 14, 4);
    // The largest field number.
    tag(&mut bytes, (1 << 29) - 1, 0);
    varint(&mut bytes, 1);
    double(&mut bytes, 2, 0.25);
    let report = ok(&bytes);
    assert_eq!(report.cpu_utilization, 0.5);
    assert_eq!(report.mem_utilization, 0.25);
}

// ---------------------------------------------------------------------------------------------
// Proto bytes: hostile input
// ---------------------------------------------------------------------------------------------

#[test]
fn truncation_at_every_byte_errors_or_parses_the_fields_before_it() {
    // Protobuf has no end marker: a cut between two fields is a valid shorter report, a cut
    // inside a field is an error.
    for report in [full_report(), envoy_example()] {
        let chunks = encode_fields(&report);
        let bytes = chunks.concat();
        let mut boundaries = vec![0];
        for c in &chunks {
            boundaries.push(boundaries.last().unwrap() + c.len());
        }
        for cut in 0..=bytes.len() {
            let result = parse_orca(&bytes[..cut]);
            match boundaries.iter().position(|&b| b == cut) {
                Some(i) => {
                    let expected = chunks[..i].concat();
                    let got = result.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
                    assert_eq!(encode(&got), expected, "cut at {cut}");
                }
                None => {
                    let e = result.expect_err("a cut inside a field");
                    assert!(
                        matches!(e, Error::InvalidLoadReport(_)),
                        "cut at {cut}: {e:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn truncation_messages_name_the_byte() {
    assert_eq!(
        reason(&ENVOY_EXAMPLE_BYTES[..5]),
        "truncated 64-bit value of field 1 (cpu_utilization) at byte 0: 8 bytes needed, 4 left"
    );
    assert_eq!(reason(&[0x18, 0x80]), "truncated varint at byte 1");
    assert_eq!(
        reason(&ENVOY_EXAMPLE_BYTES[..40]),
        "field 8 (named_metrics) at byte 36: length 14 runs past the end (2 bytes left)"
    );
}

#[test]
fn giant_length_prefixes_are_refused_before_allocating() {
    for len in [u64::from(u32::MAX), u64::MAX, 1 << 40] {
        let mut bytes = Vec::new();
        tag(&mut bytes, 8, 2);
        varint(&mut bytes, len);
        bytes.extend_from_slice(b"abc");
        let r = reason(&bytes);
        assert!(
            r.contains(&format!("length {len} runs past the end (3 bytes left)")),
            "{r}"
        );
        // The same inside a map entry (the key's length) and for an unknown field.
        let mut inner = Vec::new();
        tag(&mut inner, 1, 2);
        varint(&mut inner, len);
        let mut bytes = Vec::new();
        delimited(&mut bytes, 4, &inner);
        let r = reason(&bytes);
        assert!(
            r.contains("field 1 (key) of a request_cost entry at byte 2: length"),
            "{r}"
        );
        let mut bytes = Vec::new();
        tag(&mut bytes, 99, 2);
        varint(&mut bytes, len);
        assert!(reason(&bytes).contains("unknown field 99 at byte 0: length"));
    }
}

#[test]
fn varints_longer_than_ten_bytes_or_above_64_bits_are_refused() {
    let mut eleven = vec![0x18];
    eleven.extend_from_slice(&[0x80; 10]);
    eleven.push(0x01);
    assert_eq!(reason(&eleven), "varint at byte 1 is longer than 10 bytes");
    let mut overflow = vec![0x18];
    overflow.extend_from_slice(&[0xFF; 9]);
    overflow.push(0x02);
    assert_eq!(reason(&overflow), "varint at byte 1 overflows 64 bits");
    // Ten bytes holding u64::MAX are fine.
    let mut max = vec![0x18];
    varint(&mut max, u64::MAX);
    assert_eq!(max.len(), 11);
    assert_eq!(ok(&max).rps, u64::MAX);
    // A non-minimal (padded) varint is valid protobuf.
    assert_eq!(ok(&[0x18, 0x85, 0x80, 0x80, 0x00]).rps, 5);
}

#[test]
fn known_fields_with_the_wrong_wire_type_are_refused() {
    assert_eq!(
        reason(&[0x10, 0x01]),
        "field 2 (mem_utilization) at byte 0 has wire type 0 (varint), expected 1 (64-bit)"
    );
    assert_eq!(
        reason(&[0x19, 0, 0, 0, 0, 0, 0, 0, 0]),
        "field 3 (rps) at byte 0 has wire type 1 (64-bit), expected 0 (varint)"
    );
    assert_eq!(
        reason(&[0x45, 0, 0, 0, 0]),
        "field 8 (named_metrics) at byte 0 has wire type 5 (32-bit), expected 2 (length-delimited)"
    );
    assert_eq!(
        reason(&[0x4B, 0x4C]),
        "field 9 (application_utilization) at byte 0 has wire type 3 (start-group), expected 1 (64-bit)"
    );
    // Inside a map entry.
    assert_eq!(
        reason(&[0x42, 0x02, 0x10, 0x01]),
        "field 2 (value) of a named_metrics entry at byte 2 has wire type 0 (varint), expected 1 \
         (64-bit)"
    );
    // Every known field, every other wire type: an error, never a panic.
    for field in 1..=9u32 {
        for wire in [0u8, 1, 2, 3, 5] {
            let mut bytes = Vec::new();
            tag(&mut bytes, field, wire);
            bytes.extend_from_slice(&[0; 8]);
            if let Err(e) = parse_orca(&bytes) {
                assert!(matches!(e, Error::InvalidLoadReport(_)));
            }
        }
    }
}

#[test]
fn invalid_tags_are_refused() {
    assert_eq!(reason(&[0x00]), "field number 0 at byte 0");
    assert_eq!(reason(&[0x0E]), "invalid wire type 6 at byte 0 (field 1)");
    assert_eq!(reason(&[0x0F]), "invalid wire type 7 at byte 0 (field 1)");
    let mut big = Vec::new();
    varint(&mut big, 1 << 32);
    assert_eq!(
        reason(&big),
        "field number 536870912 at byte 0 is above 536870911 (2^29 - 1)"
    );
}

#[test]
fn groups_must_be_closed_matched_and_shallow() {
    // An end-group with no start, at the top and inside an entry.
    assert_eq!(
        reason(&[0x54]),
        "end-group tag of field 10 at byte 0 without a start-group"
    );
    assert_eq!(
        reason(&[0x0C]),
        "end-group tag of field 1 at byte 0 without a start-group"
    );
    assert_eq!(
        reason(&[0x42, 0x01, 0x1C]),
        "end-group tag of field 3 at byte 2 without a start-group"
    );
    // Unterminated, and closed by the wrong field.
    assert_eq!(
        reason(&[0x5B, 0x08, 0x01]),
        "group of field 11 started at byte 0 has no end-group tag"
    );
    assert_eq!(
        reason(&[0x5B, 0x64]),
        "end-group tag of field 12 at byte 1 closes the group of field 11"
    );
    // Nesting: MAX_GROUP_DEPTH groups are fine, one more is refused.
    let nest = |depth: usize| {
        let mut bytes = Vec::new();
        for _ in 0..depth {
            tag(&mut bytes, 20, 3);
        }
        for _ in 0..depth {
            tag(&mut bytes, 20, 4);
        }
        bytes
    };
    assert_eq!(ok(&nest(MAX_GROUP_DEPTH)), LoadReport::default());
    assert!(reason(&nest(MAX_GROUP_DEPTH + 1)).starts_with("groups nested deeper than 100"));
    // A million open groups: refused at the limit, quickly, without recursion.
    let deep = [0xA3, 0x01].repeat(1_000_000);
    assert!(reason(&deep).starts_with("groups nested deeper than 100"));
}

#[test]
fn map_keys_must_be_utf8() {
    let mut e = Vec::new();
    delimited(&mut e, 1, b"ok\xFFno");
    let mut bytes = Vec::new();
    double(&mut bytes, 1, 0.5);
    delimited(&mut bytes, 5, &e);
    assert_eq!(
        reason(&bytes),
        "the key of a utilization entry at byte 13 is not valid UTF-8 (at byte 15)"
    );
}

#[test]
fn no_valid_report_starts_like_a_header_value() {
    // The documented rule: a header value starts with one of the prefixes; these bytes as
    // proto would be invalid anyway (see the module docs), so nothing valid is shadowed.
    for prefix in [&b"BIN "[..], b"JSON ", b"TEXT "] {
        let mut bytes = prefix.to_vec();
        bytes.extend_from_slice(&[0u8; 80]);
        assert!(parse_orca(&bytes).is_err());
    }
    // Lower case is not a prefix: read as proto (and found to be text).
    let r = reason(b"text cpu_utilization:0.5");
    assert!(
        r.starts_with("unsupported ORCA header format: text (a header value starts with"),
        "{r}"
    );
}

#[test]
fn the_error_is_one_kind_with_a_stable_code() {
    let e = parse_orca(&[0x0E]).unwrap_err();
    assert_eq!(e.code(), "LB_INVALID_LOAD_REPORT");
    assert_eq!(
        e.to_string(),
        "invalid ORCA load report: invalid wire type 6 at byte 0 (field 1)"
    );
    assert!(e.summary().starts_with("invalid ORCA load report"));
}

// ---------------------------------------------------------------------------------------------
// Envoy's tests (test/common/orca/orca_parser_test.cc)
// ---------------------------------------------------------------------------------------------

/// Envoy `InvalidOrcaHeaderPrefix`: "BAD random-value" -> "unsupported ORCA header format: BAD".
#[test]
fn envoy_invalid_orca_header_prefix() {
    let r = reason(b"BAD random-value");
    assert!(
        r.starts_with("unsupported ORCA header format: BAD ("),
        "{r}"
    );
}

/// Envoy `InvalidOrcaHeaderPrefixWithLargePrefix`: at most five characters are quoted.
#[test]
fn envoy_invalid_orca_header_prefix_with_large_prefix() {
    let r = reason(b"BADBAD random-value");
    assert!(
        r.starts_with("unsupported ORCA header format: BADBA ("),
        "{r}"
    );
}

/// Envoy `EmptyOrcaHeader`: refused there; an empty proto here (see
/// `empty_input_is_the_empty_report`). An empty `TEXT ` body is the empty report in both.
#[test]
fn envoy_empty_orca_header() {
    assert_eq!(ok(b""), LoadReport::default());
    assert_eq!(ok(b"TEXT "), LoadReport::default());
}

/// Envoy `NativeHttpEncodedHeader`.
#[test]
fn envoy_native_http_encoded_header() {
    let value = header(
        "TEXT ",
        "cpu_utilization:0.7,application_utilization:0.8,mem_utilization:0.9,\
         rps_fractional:1000,eps:2,named_metrics.foo:123,named_metrics.bar:0.2",
    );
    assert_eq!(ok(&value), envoy_example());
}

/// Envoy `NativeHttpEncodedHeaderIncorrectFieldType`: a quoted number is not a number.
#[test]
fn envoy_native_http_encoded_header_incorrect_field_type() {
    assert_eq!(
        reason(br#"TEXT cpu_utilization:"0.7""#),
        r#"TEXT: the value of `cpu_utilization` is not a number: `"0.7"`"#
    );
}

/// Envoy `NativeHttpEncodedHeaderNanMetricValue` (`absl::StrCat` writes NaN as `nan`).
#[test]
fn envoy_native_http_encoded_header_nan_metric_value() {
    for nan in ["nan", "NaN", "-nan"] {
        assert_eq!(
            reason(format!("TEXT cpu_utilization:{nan}").as_bytes()),
            "TEXT: the value of `cpu_utilization` is NaN"
        );
    }
}

/// Envoy `NativeHttpEncodedHeaderInfinityMetricValue` (`absl::StrCat` writes `inf`), and a
/// number too large for a double, which `absl::SimpleAtod` also reads as infinity.
#[test]
fn envoy_native_http_encoded_header_infinity_metric_value() {
    for inf in ["inf", "-inf", "Infinity", "1e400"] {
        assert_eq!(
            reason(format!("TEXT cpu_utilization:{inf}").as_bytes()),
            "TEXT: the value of `cpu_utilization` is infinite"
        );
    }
}

/// Envoy `NativeHttpEncodedHeaderContainsDuplicateMetric`.
#[test]
fn envoy_native_http_encoded_header_contains_duplicate_metric() {
    assert_eq!(
        reason(b"TEXT cpu_utilization:0.7,cpu_utilization:0.8"),
        "TEXT: duplicate metric `cpu_utilization`"
    );
}

/// Envoy `NativeHttpEncodedHeaderUnsupportedMetric`.
#[test]
fn envoy_native_http_encoded_header_unsupported_metric() {
    let r = reason(b"TEXT cpu_utilization:0.7,unsupported_metric:0.8");
    assert!(
        r.starts_with("TEXT: unsupported metric `unsupported_metric` (supported: "),
        "{r}"
    );
    // Neither the deprecated rps nor the other two maps have a TEXT name in Envoy.
    for name in ["rps", "request_cost.a", "utilization.a", "named_metrics"] {
        let r = reason(format!("TEXT {name}:1").as_bytes());
        assert!(
            r.starts_with(&format!("TEXT: unsupported metric `{name}`")),
            "{r}"
        );
    }
}

/// Envoy `NativeHttpEncodedHeaderContainsDuplicateNamedMetric`.
#[test]
fn envoy_native_http_encoded_header_contains_duplicate_named_metric() {
    assert_eq!(
        reason(
            b"TEXT named_metrics.foo:123,named_metrics.duplicate:123,named_metrics.duplicate:0.2"
        ),
        "TEXT: duplicate metric `named_metrics.duplicate`"
    );
}

/// Envoy `NativeHttpEncodedHeaderContainsEmptyNamedMetricKey`.
#[test]
fn envoy_native_http_encoded_header_contains_empty_named_metric_key() {
    assert_eq!(
        reason(b"TEXT named_metrics.:123"),
        "TEXT: `named_metrics.` has an empty metric key"
    );
}

/// Envoy `InvalidNativeHttpEncodedHeader`: an item without a value.
#[test]
fn envoy_invalid_native_http_encoded_header() {
    assert_eq!(
        reason(b"TEXT not-a-list-of-key-value-pairs"),
        "TEXT: `not-a-list-of-key-value-pairs` has no value (expected `name:value`)"
    );
}

const ENVOY_JSON: &str = r#"{"cpu_utilization": 0.7, "application_utilization": 0.8, "mem_utilization": 0.9, "rps_fractional": 1000, "eps": 2, "named_metrics": {"foo": 123,"bar": 0.2}}"#;

/// Envoy `JsonHeader`.
#[test]
fn envoy_json_header() {
    assert_eq!(ok(&header("JSON ", ENVOY_JSON)), envoy_example());
}

/// Envoy `InvalidJsonHeader` (the upstream value repeats the prefix: "JSON JSON not-a-...").
#[test]
fn envoy_invalid_json_header() {
    let r = reason(b"JSON JSON not-a-valid-json-string");
    assert!(
        r.starts_with(
            "JSON: invalid JSON for an OrcaLoadReport: expected value at line 1 column 1"
        ),
        "{r}"
    );
}

/// Envoy `JsonHeaderUnknownField`.
#[test]
fn envoy_json_header_unknown_field() {
    let json = r#"{"cpu_utilization": 0.7, "application_utilization": 0.8, "mem_utilization": 0.9, "rps_fractional": 1000, "eps": 2,  "unknown_field": 2,"named_metrics": {"foo": 123,"bar": 0.2}}"#;
    let r = reason(&header("JSON ", json));
    assert!(
        r.starts_with("JSON: invalid JSON for an OrcaLoadReport: unknown field `unknown_field`"),
        "{r}"
    );
}

/// Envoy `JsonHeaderIncorrectFieldType`. The upstream value, `{"cpu_utilization": "0.7"`, also
/// lacks its closing brace, which is what makes it invalid: with the brace, a numeric string is
/// a valid double in the proto3 JSON mapping (protobuf's parser, which Envoy uses, accepts it).
#[test]
fn envoy_json_header_incorrect_field_type() {
    let r = reason(br#"JSON {"cpu_utilization": "0.7""#);
    assert!(r.contains("EOF while parsing an object"), "{r}");
    assert_eq!(
        ok(br#"JSON {"cpu_utilization": "0.7"}"#).cpu_utilization,
        0.7
    );
    let r = reason(br#"JSON {"cpu_utilization": "zero"}"#);
    assert!(r.contains("invalid value: string \"zero\""), "{r}");
    let r = reason(br#"JSON {"cpu_utilization": true}"#);
    assert!(r.contains("invalid type: boolean `true`"), "{r}");
}

/// Envoy `LegacyBinaryHeader`: the `endpoint-load-metrics-bin` value, base64 on the wire,
/// reaches parse_orca decoded (as gRPC hands it over).
#[test]
fn envoy_legacy_binary_header() {
    let wire = STANDARD.encode(encode(&envoy_example()));
    let decoded = STANDARD.decode(wire).unwrap();
    assert_eq!(ok(&decoded), envoy_example());
}

/// Envoy `BinaryHeader`.
#[test]
fn envoy_binary_header() {
    let value = format!("BIN {}", STANDARD.encode(encode(&envoy_example())));
    assert_eq!(ok(value.as_bytes()), envoy_example());
}

/// Envoy `InvalidBinaryHeader`: valid base64 of half a report.
#[test]
fn envoy_invalid_binary_header() {
    let bytes = encode(&envoy_example());
    let value = format!("BIN {}", STANDARD.encode(&bytes[..bytes.len() / 2]));
    assert_eq!(
        reason(value.as_bytes()),
        "BIN: field 8 (named_metrics) at byte 36: length 14 runs past the end (0 bytes left) (of \
         the decoded payload)"
    );
}

/// Envoy `BinaryHeaderPopulatedWithReadableString` (there in the `-bin` header; here after
/// `BIN `): not base64.
#[test]
fn envoy_binary_header_populated_with_readable_string() {
    let r = reason(b"BIN not-a-valid-binary-proto");
    assert!(
        r.starts_with("BIN: the payload is not padded standard base64: "),
        "{r}"
    );
}

/// Envoy `EmptyBinaryHeader`.
#[test]
fn envoy_empty_binary_header() {
    assert_eq!(reason(b"BIN "), "BIN: the base64 payload is empty");
}

// ---------------------------------------------------------------------------------------------
// Header forms beyond Envoy's tests
// ---------------------------------------------------------------------------------------------

#[test]
fn bin_round_trips_every_field_and_wants_padding() {
    let report = full_report();
    let b64 = STANDARD.encode(encode(&report));
    assert_eq!(ok(format!("BIN {b64}").as_bytes()), report);
    // Envoy's Base64::decode refuses a length that is not a multiple of 4.
    let unpadded = STANDARD.encode([0x18, 0x05]); // "GAU="
    assert_eq!(ok(format!("BIN {unpadded}").as_bytes()).rps, 5);
    assert!(
        reason(format!("BIN {}", unpadded.trim_end_matches('=')).as_bytes())
            .starts_with("BIN: the payload")
    );
    // Two spaces: the payload starts with a space, which is not base64.
    assert!(reason(format!("BIN  {unpadded}").as_bytes()).starts_with("BIN: the payload"));
}

#[test]
fn text_whitespace_empty_items_signs_and_vllm_equals() {
    let report = ok(
        b"TEXT  cpu_utilization: 0.5 ,, eps:+2 ,mem_utilization:-0.25,\tnamed_metrics.x y:1e-3 ,",
    );
    assert_eq!(report.cpu_utilization, 0.5);
    assert_eq!(report.eps, 2.0);
    assert_eq!(report.mem_utilization, -0.25); // Envoy keeps negatives
    assert_eq!(report.named_metric("x y"), Some(0.001));
    // Envoy does not trim a name's right side: `cpu_utilization ` is not a known name.
    let r = reason(b"TEXT cpu_utilization : 0.5");
    assert!(
        r.starts_with("TEXT: unsupported metric `cpu_utilization `"),
        "{r}"
    );
    // The rest of the item after the first `:` is the value.
    assert_eq!(
        reason(b"TEXT named_metrics.a:1:2"),
        "TEXT: the value of `named_metrics.a` is not a number: `1:2`"
    );
    // Blank name: Envoy's SkipWhitespace drops it, leaving the value as the name.
    assert_eq!(
        reason(b"TEXT :0.5"),
        "TEXT: `0.5` has no value (expected `name:value`)"
    );
    assert_eq!(
        reason(b"TEXT eps:++1"),
        "TEXT: the value of `eps` is not a number: `++1`"
    );
    // vLLM's form (`create_orca_header`): `=` when the item has no `:`.
    let vllm =
        ok(b"TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=2.0");
    assert_eq!(
        vllm.named_metrics,
        pairs(&[("kv_cache_usage_perc", 0.4), ("num_requests_waiting", 2.0)])
    );
    // With a `:` in the item, `:` separates (Envoy reads `a=b` as the name).
    assert_eq!(
        ok(b"TEXT named_metrics.a=b:1").named_metric("a=b"),
        Some(1.0)
    );
    assert!(reason(b"TEXT \xFF").starts_with("TEXT: not valid UTF-8 (at byte 5)"));
}

#[test]
fn json_every_field_names_strings_and_nulls() {
    let json = r#"{
        "cpuUtilization": 0.25, "memUtilization": "0.5", "applicationUtilization": 1.5,
        "rps": "300", "rpsFractional": 299.75, "eps": 1.25,
        "requestCost": {"bytes": 3487, "cpu_ms": 12.5},
        "utilization": {"gpu": 0.875, "disk": "0.125"},
        "namedMetrics": {"rif": 7, "queue": 3e0}
    }"#;
    assert_eq!(ok(&header("JSON ", json)), full_report());
    let specials = ok(br#"JSON {"cpu_utilization": "NaN", "eps": "-Infinity", "rps": 1e3, "mem_utilization": null, "utilization": null}"#);
    assert!(specials.cpu_utilization.is_nan());
    assert_eq!(specials.eps, f64::NEG_INFINITY);
    assert_eq!(specials.rps, 1000);
    assert_eq!(ok(b"JSON {}"), LoadReport::default());
    // Doubles parse to the nearest value (float_roundtrip), as protobuf's JSON parser does.
    assert_eq!(ok(br#"JSON {"eps": 0.30000000000000004}"#).eps, 0.1 + 0.2);
}

#[test]
fn json_refusals() {
    let refused = [
        (r#"{"eps": 1, "eps": 2}"#, "field `eps` given twice"),
        (
            r#"{"cpu_utilization": 1, "cpuUtilization": 2}"#,
            "field `cpuUtilization` given twice",
        ),
        (
            r#"{"named_metrics": {"a": 1, "a": 2}}"#,
            "key `a` given twice in `named_metrics`",
        ),
        (r#"{"named_metrics": {"a": null}}"#, "invalid type: null"),
        (r#"{"named_metrics": [1]}"#, "invalid type: sequence"),
        (r#"{"rps": -1}"#, "invalid value: integer `-1`"),
        (r#"{"rps": 1.5}"#, "invalid value: floating point `1.5`"),
        (r#"{"rps": "+1"}"#, "invalid value: string \"+1\""),
        (r#"{"eps": "inf"}"#, "invalid value: string \"inf\""),
        (r#"{"eps": "1e999"}"#, "invalid value: string \"1e999\""),
        (r#"{"eps": 1e999}"#, "number out of range"),
        (r#"{"eps": 1} x"#, "trailing characters"),
        (
            r#"[]"#,
            "invalid type: sequence, expected an OrcaLoadReport object",
        ),
        (
            r#"null"#,
            "invalid type: null, expected an OrcaLoadReport object",
        ),
    ];
    for (json, expected) in refused {
        let r = reason(&header("JSON ", json));
        assert!(
            r.starts_with("JSON: invalid JSON for an OrcaLoadReport: "),
            "{r}"
        );
        assert!(r.contains(expected), "{json}: {r}");
    }
    // Deep nesting stops at the first wrong type, without recursing into it.
    let deep = format!("JSON {{\"eps\": {}}}", "[".repeat(100_000));
    assert!(reason(deep.as_bytes()).contains("invalid type: sequence"));
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// Same outcome twice, comparing doubles by their bits (NaN included).
fn same(a: &Result<LoadReport, Error>, b: &Result<LoadReport, Error>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => format!("{a:?}") == format!("{b:?}") && encode(a) == encode(b),
        (Err(a), Err(b)) => a == b,
        _ => false,
    }
}

fn key_strategy() -> impl Strategy<Value = String> {
    "[a-z_]{0,6}"
}

fn report_strategy() -> impl Strategy<Value = LoadReport> {
    let map = || proptest::collection::btree_map(key_strategy(), any::<f64>(), 0..4);
    (
        (any::<f64>(), any::<f64>(), any::<f64>(), any::<u64>()),
        (any::<f64>(), any::<f64>()),
        (map(), map(), map()),
    )
        .prop_map(
            |((cpu, mem, app, rps), (rpsf, eps), (cost, util, named))| LoadReport {
                cpu_utilization: cpu,
                mem_utilization: mem,
                application_utilization: app,
                rps,
                rps_fractional: rpsf,
                eps,
                request_cost: cost.into_iter().collect(),
                utilization: util.into_iter().collect(),
                named_metrics: named.into_iter().collect(),
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 512 }, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_parse_deterministically(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let first = parse_orca(&bytes);
        prop_assert!(same(&first, &parse_orca(&bytes)));
        if let Err(e) = &first {
            prop_assert!(matches!(e, Error::InvalidLoadReport(_)));
        }
    }

    #[test]
    fn arbitrary_header_bodies_never_panic(
        prefix in prop::sample::select(vec!["BIN ", "JSON ", "TEXT "]),
        body in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let mut value = prefix.as_bytes().to_vec();
        value.extend_from_slice(&body);
        let first = parse_orca(&value);
        prop_assert!(same(&first, &parse_orca(&value)));
    }

    #[test]
    fn arbitrary_text_from_header_alphabet_never_panics(body in "[a-z_.:=,+\\-0-9eE \t]{0,64}") {
        let value = format!("TEXT {body}");
        let _ = parse_orca(value.as_bytes());
    }

    #[test]
    fn arbitrary_reports_round_trip_through_proto_and_bin(report in report_strategy()) {
        let bytes = encode(&report);
        let parsed = parse_orca(&bytes).expect("valid encoding");
        prop_assert_eq!(encode(&parsed), bytes.clone());
        let bin = format!("BIN {}", STANDARD.encode(&bytes));
        prop_assert_eq!(encode(&parse_orca(bin.as_bytes()).expect("valid BIN")), bytes);
    }

    #[test]
    fn to_proto_writes_what_the_reference_encoder_writes(report in report_strategy()) {
        // The test's own encoder (built from the .proto by hand, above) is the oracle.
        prop_assert_eq!(report.to_proto(), encode(&report));
        match report.to_header(HeaderForm::Bin) {
            Ok(bin) => prop_assert_eq!(encode(&parse_orca(bin.as_bytes()).expect("valid BIN")), encode(&report)),
            Err(_) => prop_assert!(encode(&report).is_empty()),
        }
    }

    #[test]
    fn to_header_text_round_trips_what_it_can_carry(report in report_strategy()) {
        let carried = LoadReport {
            rps: 0,
            request_cost: Vec::new(),
            utilization: Vec::new(),
            named_metrics: (report.named_metrics.iter())
                .filter(|(k, v)| !k.is_empty() && v.is_finite())
                .cloned()
                .collect(),
            ..report
        };
        let finite = [
            carried.cpu_utilization,
            carried.mem_utilization,
            carried.application_utilization,
            carried.rps_fractional,
            carried.eps,
        ]
        .iter()
        .all(|v| v.is_finite());
        match carried.to_header(HeaderForm::Text) {
            Ok(text) => {
                prop_assert!(finite);
                let parsed = parse_orca(text.as_bytes()).expect("valid TEXT");
                prop_assert_eq!(encode(&parsed), encode(&carried), "{}", text);
            }
            Err(e) => {
                prop_assert!(!finite, "refused a report TEXT can carry: {}", e);
                prop_assert!(matches!(e, Error::InvalidLoadReport(_)));
            }
        }
    }

    #[test]
    fn mutated_reports_never_panic(report in report_strategy(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = encode(&report);
        if !bytes.is_empty() {
            let i = at % bytes.len();
            bytes[i] = byte;
        }
        let first = parse_orca(&bytes);
        prop_assert!(same(&first, &parse_orca(&bytes)));
    }
}

#[test]
fn to_header_text_refuses_what_text_cannot_carry() {
    let ok = LoadReport {
        cpu_utilization: 0.5,
        named_metrics: pairs(&[("rif", 3.0)]),
        ..LoadReport::default()
    };
    assert_eq!(
        ok.to_header(HeaderForm::Text).unwrap(),
        "TEXT cpu_utilization:0.5,named_metrics.rif:3"
    );
    let refused = [
        LoadReport {
            rps: 1,
            ..ok.clone()
        },
        LoadReport {
            request_cost: pairs(&[("db", 1.0)]),
            ..ok.clone()
        },
        LoadReport {
            utilization: pairs(&[("gpu", 1.0)]),
            ..ok.clone()
        },
        LoadReport {
            eps: f64::NAN,
            ..ok.clone()
        },
        LoadReport {
            cpu_utilization: f64::INFINITY,
            ..ok.clone()
        },
        LoadReport {
            named_metrics: pairs(&[("a,b", 1.0)]),
            ..ok.clone()
        },
        LoadReport {
            named_metrics: pairs(&[("a b", 1.0)]),
            ..ok.clone()
        },
        LoadReport {
            named_metrics: pairs(&[("", 1.0)]),
            ..ok.clone()
        },
        LoadReport {
            named_metrics: pairs(&[("x", f64::NAN)]),
            ..ok.clone()
        },
    ];
    for report in refused {
        let e = report.to_header(HeaderForm::Text).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidLoadReport(r) if r.contains("BIN")),
            "{e}"
        );
        // BIN carries all of it.
        let bin = report.to_header(HeaderForm::Bin).unwrap();
        assert_eq!(
            encode(&parse_orca(bin.as_bytes()).unwrap()),
            encode(&report)
        );
    }
}

#[test]
fn the_empty_report_is_empty_proto_and_text_and_has_no_bin_form() {
    let empty = LoadReport::default();
    assert!(empty.to_proto().is_empty());
    let text = empty.to_header(HeaderForm::Text).unwrap();
    assert_eq!(parse_orca(text.as_bytes()).unwrap(), empty, "{text}");
    // `BIN ` with an empty payload is refused (Envoy's EmptyBinaryHeader), so it is not written.
    let e = empty.to_header(HeaderForm::Bin).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidLoadReport(r) if r.contains("no BIN form")),
        "{e}"
    );
}
