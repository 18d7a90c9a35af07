//! `ketama`: libmemcached's weighted ketama continuum, so keys land on the memcached servers
//! where libmemcached (and the clients built on it: php-memcached, pylibmc, Perl's
//! Cache::Memcached::libmemcached) already put them.
//!
//! Source: libmemcached `libmemcached/hosts.cc` (`update_continuum`, `ketama_server_hash`,
//! `continuum_item_cmp`), `libmemcached/hash.cc` (`dispatch_host`) and `libhashkit/md5.cc`
//! (`hashkit_md5`), with `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` set (MD5 key and point hash,
//! weighted continuum). Checked live against Debian's libmemcached-dev by
//! `scripts/test-upstream.sh`.
//!
//! - **Server text.** A node id is `host:port`, `[ipv6]:port`, or a bare host (`port` 11211,
//!   libmemcached's default; port 0 also means 11211). The point text is `host-i` when the
//!   port is 11211 and `host:port-i` otherwise (IPv6 hosts without brackets, as libmemcached
//!   stores them: `::1:11212-0`). An id whose tail is not a valid `:port` (e.g. `a:b:c`, which
//!   is an IPv6 address) is used whole as the host.
//! - **Points per server.** With `n` servers of total weight `W`, a server of weight `w` gets
//!   `4 · floor(w/W · 160/4 · n + 1e-10)` points, computed in IEEE single precision exactly as
//!   libmemcached's C does on x86-64 and every other platform with `FLT_EVAL_METHOD == 0`
//!   (x87 builds that evaluate in extended precision may differ by 4 points on rare weight
//!   sets). A server may get 0 points and then owns no key. Digest `j` of
//!   `MD5("<text>-j")`, j = 0..points/4, gives 4 points: its 4-byte groups read little-endian.
//! - **Key.** `MD5(key)`'s first 4 bytes, little-endian; the key goes to the first point
//!   `>= hash`, wrapping. Equal points keep libmemcached ≥ 1.1's order by server position;
//!   liblb orders them by id instead, so the answer depends only on the set of servers (the
//!   two agree whenever servers are listed in id order, and 32-bit collisions are rare anyway).
//! - **Weights** are libmemcached's: relative, any `u32`; weight 0 drains the node (it is left
//!   out of the continuum, as a server missing from the list would be).
//! - **`attempts`**: the next distinct servers clockwise. libmemcached itself has no retry walk:
//!   an ejected server's points leave the continuum, and with equal weights its keys go
//!   exactly there (with unequal weights the rebuild also recounts everyone's points).
//!
//! - **Size.** Above `MAX_RING_POINTS` (2^22 points, about 26,000 servers; libmemcached
//!   itself stops at 100) each server keeps a proportional prefix of its digests.
//!
//! Cost: build `40·n` MD5s and a sort of `160·n` points; pick one MD5 of the key and a lookup
//! in a bucket index (two cache misses).

use super::Ctx;
use super::Select;
use super::continuum::{Continuum, scaled};
use crate::MAX_RING_POINTS;
use crate::Options;
use crate::node::Node;
use alloc::vec::Vec;
use core::fmt::Write;
use md5::{Digest, Md5};

/// libmemcached's `MEMCACHED_DEFAULT_PORT`.
const DEFAULT_PORT: u16 = 11211;
/// libmemcached's `MEMCACHED_POINTS_PER_SERVER_KETAMA`.
const POINTS_PER_SERVER: f32 = 160.0;

pub(crate) struct Ketama {
    continuum: Continuum,
}

/// Splits a server id into libmemcached's hostname and port.
pub(crate) fn host_port(id: &str) -> (&str, u16) {
    let (host, port) = if let Some(rest) = id.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, tail)) => match tail.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => (id, None),
            },
            None => (id, None),
        }
    } else {
        match id.split_once(':') {
            // Exactly one colon: host and port. More than one: an IPv6 address.
            Some((host, port)) if !port.contains(':') => (host, Some(port)),
            _ => (id, None),
        }
    };
    match port {
        None => (host, DEFAULT_PORT),
        Some(text) => match parse_port(text) {
            Some(0) => (host, DEFAULT_PORT),
            Some(port) => (host, port),
            None => (id, DEFAULT_PORT),
        },
    }
}

/// Decimal digits only (no sign, no spaces), within `u16`.
fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// libmemcached's point count for one server (see the module docs).
pub(crate) fn points_for(weight: u32, total_weight: u64, live_servers: usize) -> u32 {
    let pct = weight as f32 / total_weight as f32;
    let points = pct * POINTS_PER_SERVER / 4.0 * live_servers as f32 + 0.000_000_000_1;
    // `floor` is truncation here (the value is never negative; `f32::floor` needs std).
    (points as u32).saturating_mul(4)
}

/// `hashkit_md5`: MD5's first 4 bytes, little-endian.
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u32 {
    let digest = Md5::digest(key);
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// A small `fmt::Write` sink into a reusable byte buffer.
struct Buf(Vec<u8>);

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl Ketama {
    pub(crate) fn new(nodes: &[Node], active: &[u32]) -> Ketama {
        let total: u64 = active
            .iter()
            .map(|i| u64::from(nodes[*i as usize].weight))
            .sum();
        let digests: Vec<u64> = active
            .iter()
            .map(|i| u64::from(points_for(nodes[*i as usize].weight, total, active.len()) / 4))
            .collect();
        let all: u64 = digests.iter().sum();
        let mut entries = Vec::with_capacity((4 * all).min(MAX_RING_POINTS) as usize);
        let mut text = Buf(Vec::new());
        for (node, digests) in active.iter().zip(&digests) {
            let (host, port) = host_port(&nodes[*node as usize].id);
            // Four points per digest: cap the digests at a quarter of the point limit.
            for j in 0..scaled(*digests, all.saturating_mul(4)) {
                text.0.clear();
                // Writing into a Vec cannot fail.
                let _ = if port == DEFAULT_PORT {
                    write!(text, "{host}-{j}")
                } else {
                    write!(text, "{host}:{port}-{j}")
                };
                let digest = Md5::digest(&text.0);
                for group in digest.chunks_exact(4) {
                    let point = u32::from_le_bytes([group[0], group[1], group[2], group[3]]);
                    entries.push((u64::from(point), *node));
                }
            }
        }
        Ketama {
            continuum: Continuum::build(nodes, active, entries, false, 32),
        }
    }

    /// The owner for a 32-bit key hash (what `hashkit_md5` gives).
    #[inline]
    fn owner(&self, h: u32) -> u32 {
        self.continuum.owner(u64::from(h))
    }
}

impl Select for Ketama {
    fn build(nodes: &[Node], active: Vec<u32>, _options: &Options) -> Ketama {
        Ketama::new(nodes, &active)
    }

    #[inline]
    fn pick(&self, key: &[u8], _ctx: &Ctx<'_>) -> u32 {
        self.owner(key_hash(key))
    }

    fn attempts(&self, key: &[u8], _ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        self.continuum.walk(u64::from(key_hash(key)), limit, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    #[test]
    fn host_port_follows_libmemcached() {
        assert_eq!(host_port("10.0.0.1:11211"), ("10.0.0.1", 11211));
        assert_eq!(host_port("10.0.0.1:11212"), ("10.0.0.1", 11212));
        assert_eq!(host_port("cache1"), ("cache1", 11211));
        assert_eq!(host_port("cache1:0"), ("cache1", 11211));
        assert_eq!(host_port("cache1:080"), ("cache1", 80));
        assert_eq!(host_port("[::1]:11212"), ("::1", 11212));
        assert_eq!(host_port("[::1]"), ("::1", 11211));
        assert_eq!(host_port("fe80::1"), ("fe80::1", 11211));
        // Not a port: the whole id is the host.
        assert_eq!(host_port("cache1:http"), ("cache1:http", 11211));
        assert_eq!(host_port("cache1:70000"), ("cache1:70000", 11211));
        assert_eq!(host_port("cache1:"), ("cache1:", 11211));
        assert_eq!(host_port("[::1]x"), ("[::1]x", 11211));
    }

    #[test]
    fn equal_weights_give_160_points_each_except_where_single_precision_rounds_down() {
        for n in 1..=100 {
            let points = points_for(1, n as u64, n);
            assert_eq!(points_for(7, 7 * n as u64, n), points, "n = {n}");
            assert!(points == 160 || points == 156, "n = {n}: {points}");
        }
        // 25 servers: 1/25 is 0.03999999910593 in single precision, and 40 · 25 times that
        // is 39.999996 < 40, so libmemcached gives each server 39 digests (156 points).
        assert_eq!(points_for(1, 25, 25), 156);
        assert_eq!(points_for(1, 4, 4), 160);
    }

    #[test]
    fn single_precision_is_what_libmemcached_computes() {
        // Weights 1 and 2: 1/3 · 40 · 2 = 26.67 and 53.33 -> 26 and 53 digests.
        assert_eq!(points_for(1, 3, 2), 104);
        assert_eq!(points_for(2, 3, 2), 212);
        // A tiny share floors to no points at all.
        assert_eq!(points_for(1, 1000, 2), 0);
    }

    #[test]
    fn key_hash_is_md5_prefix_little_endian() {
        // MD5("") = d41d8cd9 8f00b204 e9800998 ecf8427e (RFC 1321, appendix A.5).
        assert_eq!(key_hash(b""), 0xd98c_1dd4);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn default_port_spelled_or_not_is_the_same_server() {
        let a = [
            Node::new("10.0.0.1:11211", 1),
            Node::new("10.0.0.2:11211", 1),
        ];
        let b = [Node::new("10.0.0.1", 1), Node::new("10.0.0.2", 1)];
        let ka = Ketama::new(&a, &[0, 1]);
        let kb = Ketama::new(&b, &[0, 1]);
        assert!(ka.continuum.entries().eq(kb.continuum.entries()));
        assert!(!ka.continuum.is_empty());
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn removing_a_server_moves_only_its_keys_with_equal_weights() {
        let nodes: Vec<Node> = (1..=5)
            .map(|i| Node::new(alloc::format!("10.0.0.{i}:11211"), 1))
            .collect();
        let all = Ketama::new(&nodes, &[0, 1, 2, 3, 4]);
        let without = Ketama::new(&nodes, &[0, 1, 3, 4]);
        let state = State::new(0);
        let policy = crate::health::Policy::new(&crate::Options::default());
        let state = Ctx::bare(&state, &policy);
        for k in 0..if cfg!(miri) { 100u32 } else { 2000 } {
            let key = k.to_le_bytes();
            let before = all.pick(&key, &state);
            let after = without.pick(&key, &state);
            if before != 2 {
                assert_eq!(before, after);
            } else {
                // The key's second attempt is where it goes when its server leaves.
                let mut out = Vec::new();
                all.attempts(&key, &state, 2, &mut out);
                assert_eq!(out[1], after);
            }
        }
    }
}
