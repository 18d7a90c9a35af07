//! Arbitrary bytes as an etcd gateway's answer, through liblb-etcd's own HTTP/1.1 response
//! parser (status line and headers, chunked, sized or unsized bodies), the watch stream's
//! message framing, each message's parsing, and the body as a range answer; and the same
//! bytes as a member value (`parse_value`). Every input must end in an answer or a specific
//! error: no panic, no hang, no allocation beyond the documented caps (libFuzzer's
//! `-rss_limit_mb` catches one).
//!
//! Run: `cd fuzz && cargo +nightly fuzz run etcd_response --features etcd -- -max_total_time=300`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    liblb_etcd::fuzz_response(data);
    drop(liblb_etcd::parse_value(data));
});
