//! `nginx_chash`: nginx's `hash $key consistent` (ketama-style ring of CRC32 points), so keys
//! reach the upstream servers nginx already sends them to.
//!
//! Source: nginx `src/http/modules/ngx_http_upstream_hash_module.c`
//! (`ngx_http_upstream_init_chash`, `ngx_http_upstream_find_chash_point`,
//! `ngx_http_upstream_get_chash_peer`); the stream module's copy is the same. Checked live
//! against Debian's nginx by `scripts/test-upstream.sh`.
//!
//! - **Server text.** A node id is the `server` text as written in nginx's `upstream` block
//!   (`backend:8080`, `10.0.0.1:80`, `[::1]:8080`, `unix:/run/app.sock`, or a bare name). As
//!   nginx does, the host is everything before the *last* `:` and the port everything after it
//!   (brackets stay: host `[::1]`, port `8080`); no `:` means an empty port; `unix:` (any
//!   case) means the rest is the host and the port is empty.
//! - **Points.** `160 · weight` points per server: point j is `CRC32(host ‖ 0x00 ‖ port ‖
//!   prev)`, where `prev` is point j-1 as 4 little-endian bytes (0 for j = 0) — the
//!   Cache::Memcached::Fast scheme. Points are sorted and repeated values merged: nginx keeps
//!   the first after `qsort`, whose order on equal points is glibc's; liblb keeps the smallest
//!   id, so the answer depends only on the set (the same as nginx whenever servers are
//!   listed in id order; 32-bit collisions are rare).
//! - **Key.** `CRC32(key)` (IEEE, as zlib); the key goes to the first point `>= hash`,
//!   wrapping.
//! - **Weights** are nginx's `weight=` (default 1); weight 0 drains the node: it is left out,
//!   as if its `server` line were removed. (nginx's `down` keeps the points and walks past
//!   them; liblb's health state plays that part.)
//! - **`attempts`**: nginx's own fallback walk: the next point's server, skipping servers
//!   already tried — the next distinct servers clockwise.
//!
//! - **Size.** Rings above `MAX_RING_POINTS` (2^22 points: Σw > 26214) are scaled down
//!   proportionally, each server keeping a prefix of its chain (at least one point); nginx
//!   would allocate them all. Below that the ring is exactly nginx's.
//!
//! Cost: build `160·Σw` CRC32s of a few bytes and a sort; pick one CRC32 and a bucket-index
//! lookup.

use super::Ctx;
use super::Select;
use super::continuum::{Continuum, scaled};
use crate::MAX_RING_POINTS;
use crate::Options;
use crate::node::Node;
use alloc::vec::Vec;

/// nginx's points per unit of weight.
const POINTS_PER_WEIGHT: u64 = 160;

pub(crate) struct NginxChash {
    continuum: Continuum,
}

/// Splits `server` text into nginx's host and port.
pub(crate) fn host_port(server: &str) -> (&[u8], &[u8]) {
    let bytes = server.as_bytes();
    if bytes.len() >= 5 && bytes[..5].eq_ignore_ascii_case(b"unix:") {
        return (&bytes[5..], b"");
    }
    match bytes.iter().rposition(|b| *b == b':') {
        Some(colon) => (&bytes[..colon], &bytes[colon + 1..]),
        None => (bytes, b""),
    }
}

/// `ngx_crc32_long`: CRC-32/ISO-HDLC, as zlib's `crc32`.
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u32 {
    crc32fast::hash(key)
}

impl NginxChash {
    pub(crate) fn new(nodes: &[Node], active: &[u32]) -> NginxChash {
        let total: u64 = active
            .iter()
            .map(|i| u64::from(nodes[*i as usize].weight) * POINTS_PER_WEIGHT)
            .sum();
        let mut entries = Vec::with_capacity(total.min(MAX_RING_POINTS) as usize);
        for node in active {
            let (host, port) = host_port(&nodes[*node as usize].id);
            let count = scaled(
                u64::from(nodes[*node as usize].weight) * POINTS_PER_WEIGHT,
                total,
            );
            let mut base = crc32fast::Hasher::new();
            base.update(host);
            base.update(&[0]);
            base.update(port);
            let mut prev = 0u32;
            for _ in 0..count {
                let mut hasher = base.clone();
                hasher.update(&prev.to_le_bytes());
                prev = hasher.finalize();
                entries.push((u64::from(prev), *node));
            }
        }
        NginxChash {
            continuum: Continuum::build(nodes, active, entries, true, 32),
        }
    }
}

impl Select for NginxChash {
    fn build(nodes: &[Node], active: Vec<u32>, _options: &Options) -> NginxChash {
        NginxChash::new(nodes, &active)
    }

    #[inline]
    fn pick(&self, key: &[u8], _ctx: &Ctx<'_>) -> u32 {
        self.continuum.owner(u64::from(key_hash(key)))
    }

    fn attempts(&self, key: &[u8], _ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        self.continuum.walk(u64::from(key_hash(key)), limit, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_splits_at_the_last_colon_as_nginx() {
        let split = |s| {
            let (h, p) = host_port(s);
            (
                core::str::from_utf8(h).unwrap(),
                core::str::from_utf8(p).unwrap(),
            )
        };
        assert_eq!(split("backend:8080"), ("backend", "8080"));
        assert_eq!(split("[::1]:8080"), ("[::1]", "8080"));
        assert_eq!(split("backend"), ("backend", ""));
        assert_eq!(split("UNIX:/run/app.sock"), ("/run/app.sock", ""));
        assert_eq!(split("a:b:c"), ("a:b", "c"));
    }

    #[test]
    fn key_hash_is_crc32() {
        // The CRC-32 check value: CRC32("123456789") = 0xCBF43926.
        assert_eq!(key_hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn first_point_chains_from_zero() {
        // Point 0 of "a:1" is CRC32("a\0" "1" "\0\0\0\0"); point 1 chains point 0's bytes.
        let nodes = [Node::new("a:1", 1)];
        let ring = NginxChash::new(&nodes, &[0]);
        let p0 = crc32fast::hash(b"a\x001\0\0\0\0");
        let mut second = b"a\x001".to_vec();
        second.extend_from_slice(&p0.to_le_bytes());
        let p1 = crc32fast::hash(&second);
        let points: Vec<u64> = ring.continuum.entries().map(|(p, _)| p).collect();
        assert_eq!(points.len(), 160);
        assert!(points.contains(&u64::from(p0)) && points.contains(&u64::from(p1)));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn weights_multiply_points() {
        let nodes = [Node::new("a:1", 3), Node::new("b:1", 1)];
        let ring = NginxChash::new(&nodes, &[0, 1]);
        let owned = |o| ring.continuum.entries().filter(|e| e.1 == o).count();
        assert_eq!((owned(0), owned(1)), (480, 160));
    }

    #[test]
    fn huge_weights_are_scaled_to_the_point_cap() {
        // 160 · 30001 points would exceed the cap: each server keeps its share of 2^22.
        let total = 30_001 * POINTS_PER_WEIGHT;
        assert_eq!(scaled(POINTS_PER_WEIGHT, total), 139);
        assert_eq!(scaled(30_000 * POINTS_PER_WEIGHT, total), 4_194_164);
    }
}
