//! Arbitrary bytes as an ORCA load report, through `parse_orca`: raw proto bytes, and (when the
//! input starts so) `BIN `/`JSON `/`TEXT ` header values. Every input must end in a report or
//! `Error::InvalidLoadReport`: no panic, no hang, no allocation beyond a small multiple of the
//! input (libFuzzer's `-rss_limit_mb` catches one). The parse must be deterministic (same
//! answer twice, doubles compared by their bits, NaN included), and a report's maps must hold
//! each key once (repeated keys: the last value wins). The same bytes behind each prefix are
//! tried too, so every form is reached from every input.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run orca -- -max_total_time=300`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liblb_core::{Error, LoadReport, parse_orca};

/// Every double of the report by its bits, and the rest as is.
fn key(r: &LoadReport) -> impl PartialEq + std::fmt::Debug {
    let map = |m: &[(String, f64)]| -> Vec<(String, u64)> {
        m.iter().map(|(k, v)| (k.clone(), v.to_bits())).collect()
    };
    (
        [
            r.cpu_utilization.to_bits(),
            r.mem_utilization.to_bits(),
            r.application_utilization.to_bits(),
            r.rps_fractional.to_bits(),
            r.eps.to_bits(),
        ],
        r.rps,
        map(&r.request_cost),
        map(&r.utilization),
        map(&r.named_metrics),
    )
}

fn check(data: &[u8]) {
    let first = parse_orca(data);
    let second = parse_orca(data);
    match (&first, &second) {
        (Ok(a), Ok(b)) => {
            assert_eq!(key(a), key(b), "parse is deterministic");
            for map in [&a.request_cost, &a.utilization, &a.named_metrics] {
                let mut keys: Vec<&str> = map.iter().map(|(k, _)| k.as_str()).collect();
                keys.sort_unstable();
                let before = keys.len();
                keys.dedup();
                assert_eq!(keys.len(), before, "map keys are unique");
            }
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "errors are deterministic");
            assert!(matches!(a, Error::InvalidLoadReport(_)), "{a:?}");
        }
        _ => panic!("parse_orca answered differently twice: {first:?} / {second:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    for prefix in [&b"BIN "[..], b"JSON ", b"TEXT "] {
        let mut value = prefix.to_vec();
        value.extend_from_slice(data);
        check(&value);
    }
});
