//! `ring_hash`: Envoy's `RING_HASH` load balancer (a ketama-style ring of xxHash64 points), so
//! keys land where Envoy — and gRPC's xDS `ring_hash` policy, which ports the same builder —
//! sends them.
//!
//! Source: Envoy `source/extensions/load_balancing_policies/ring_hash/ring_hash_lb.cc`
//! (`RingHashLoadBalancer::Ring::Ring`, `Ring::chooseHost`) and `common/thread_aware_lb_impl.cc`
//! (`normalizeHostWeights`). Envoy ships no binary installable here, so the unit tests quote
//! the expectations of Envoy's `test/extensions/load_balancing_policies/ring_hash/
//! ring_hash_lb_test.cc`.
//!
//! - **Node ids** are the strings Envoy hashes: the address as `asString()` prints it
//!   (`10.0.0.1:80`, `[::1]:80`), or the hostname under `use_hostname_for_hashing`.
//! - **Ring size.** With normalised weights `w_i = weight_i / Σweight` (doubles) and `w_min`
//!   the smallest, `scale = min(ceil(w_min · minimum_ring_size) / w_min, maximum_ring_size)`
//!   (defaults 1024 and 8,388,608, Envoy's): the lightest host gets a whole number of points.
//!   Hosts are walked keeping running sums: `target += scale · w_i`, and host `i` adds points
//!   `xxHash64("<id>_<j>", seed 0)`, j = 0, 1, …, while `current < target`.
//! - **Order.** Envoy walks hosts in its host-set order, and when `scale · w_i` is fractional
//!   the running sums hand the spare points to hosts by that order. liblb walks hosts in id
//!   order, so the ring depends only on the set: identical to Envoy's whenever every `scale · w_i`
//!   is whole (equal weights, and the usual weighted cases) or Envoy lists hosts in id order.
//!   Equal points (Envoy leaves them to `std::sort`) are ordered by id.
//! - **Key.** `xxHash64(key, seed 0)` (Envoy's header and cookie hash); [`RingHash::pick_hash`]
//!   takes Envoy's 64-bit request hash directly. The key goes to the first point `>= h`,
//!   wrapping — what Envoy's ketama-derived binary search returns (checked against a port of
//!   it in the tests).
//! - **Weights**: Envoy's endpoint `load_balancing_weight`; weight 0 drains. As in Envoy, a
//!   host's point count follows from the whole set (the ring-size rule), so a membership
//!   change can also move a few keys between hosts that stay (unlike liblb's own `ring`).
//! - **`attempts`**: the next distinct hosts clockwise. Envoy's retry walk takes the next
//!   *point* (`midp + attempt`), which may repeat a host; liblb skips repeats.
//!
//! Cost: build `ring_size` xxHash64s and a sort; memory 12 bytes per point plus a bucket
//! index; pick one hash and a bucket-index lookup.

use super::HashPlacement;
use super::continuum::Continuum;
use crate::Options;
use crate::node::Node;
use alloc::vec::Vec;
use core::fmt::Write;
use xxhash_rust::xxh64::xxh64;

/// Envoy's `DefaultMinRingSize`.
pub(crate) const DEFAULT_MIN_RING_SIZE: u64 = 1024;
/// Envoy's `DefaultMaxRingSize` (8M), also the largest either option may be (Envoy's `lte`).
pub(crate) const DEFAULT_MAX_RING_SIZE: u64 = 1024 * 1024 * 8;

pub(crate) struct RingHash {
    continuum: Continuum,
}

/// A small `fmt::Write` sink into a reusable byte buffer.
struct Buf(Vec<u8>);

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// `ceil` for a non-negative double (`f64::ceil` needs std).
fn ceil(x: f64) -> f64 {
    let t = x as u64 as f64;
    if t < x { t + 1.0 } else { t }
}

impl RingHash {
    /// Builds Envoy's ring; `1 <= min_ring_size <= max_ring_size <= DEFAULT_MAX_RING_SIZE`
    /// (checked by the caller's options, as Envoy's config validation does).
    pub(crate) fn new(
        nodes: &[Node],
        active: &[u32],
        min_ring_size: u64,
        max_ring_size: u64,
    ) -> RingHash {
        let mut order = active.to_vec();
        order.sort_unstable_by(|a, b| nodes[*a as usize].id.cmp(&nodes[*b as usize].id));
        let sum: u64 = order
            .iter()
            .map(|i| u64::from(nodes[*i as usize].weight))
            .sum();
        // Envoy: `host->weight() * normalized_locality_weight / sum` with locality 1.0.
        let weights: Vec<f64> = order
            .iter()
            .map(|i| f64::from(nodes[*i as usize].weight) * 1.0 / sum as f64)
            .collect();
        let min_weight = weights.iter().copied().fold(1.0, f64::min);
        let scale =
            (ceil(min_weight * min_ring_size as f64) / min_weight).min(max_ring_size as f64);
        let mut entries = Vec::with_capacity(ceil(scale) as usize);
        let mut key = Buf(Vec::new());
        let (mut current, mut target) = (0.0f64, 0.0f64);
        for (node, weight) in order.iter().zip(&weights) {
            let id = &nodes[*node as usize].id;
            target += scale * weight;
            let mut j = 0u64;
            while current < target {
                key.0.clear();
                // Writing into a Vec cannot fail.
                let _ = write!(key, "{id}_{j}");
                entries.push((xxh64(&key.0, 0), *node));
                j += 1;
                current += 1.0;
            }
        }
        RingHash {
            continuum: Continuum::build(nodes, active, entries, false, 64),
        }
    }

    /// The node for a 64-bit request hash (Envoy's `chooseHost(hash, 0)`).
    #[inline]
    pub(crate) fn pick_hash(&self, h: u64) -> u32 {
        self.continuum.owner(h)
    }

    /// `attempts` for a 64-bit request hash.
    pub(crate) fn attempts_hash(&self, h: u64, limit: usize, out: &mut Vec<u32>) {
        self.continuum.walk(h, limit, out);
    }
}

/// The key's 64-bit hash as Envoy's hash policies compute it.
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxh64(key, 0)
}

impl HashPlacement for RingHash {
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> RingHash {
        RingHash::new(nodes, &active, options.min_ring_size, options.max_ring_size)
    }

    #[inline]
    fn key_hash(&self, key: &[u8]) -> u64 {
        key_hash(key)
    }

    #[inline]
    fn place(&self, hash: u64) -> u32 {
        self.pick_hash(hash)
    }

    fn place_attempts(&self, hash: u64, limit: usize, out: &mut Vec<u32>) {
        self.attempts_hash(hash, limit, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;

    fn hosts(ports: impl Iterator<Item = u32>, weight: impl Fn(u32) -> u32) -> Vec<Node> {
        ports
            .map(|p| Node::new(format!("127.0.0.1:{p}"), weight(p)))
            .collect()
    }

    fn all(nodes: &[Node]) -> Vec<u32> {
        (0..nodes.len() as u32).collect()
    }

    /// The ring as (position, owner id).
    fn ring<'a>(r: &RingHash, nodes: &'a [Node]) -> Vec<(u64, &'a str)> {
        r.continuum
            .entries()
            .map(|(p, o)| (p, &*nodes[o as usize].id))
            .collect()
    }

    #[test]
    fn envoy_basic() {
        // ring_hash_lb_test.cc, TEST_P(RingHashLoadBalancerTest, Basic): hosts :90 … :95,
        // minimum_ring_size 12; the "hash ring" table in the test's comment, and its picks.
        let nodes = hosts(90..96, |_| 1);
        let r = RingHash::new(&nodes, &all(&nodes), 12, DEFAULT_MAX_RING_SIZE);
        let want: [(u64, u32); 12] = [
            (833437586790550860, 94),
            (928266305478181108, 92),
            (1033482794131418490, 90),
            (3551244743356806947, 95),
            (3851675632748031481, 93),
            (5583722120771150861, 91),
            (6311230543546372928, 91),
            (7700377290971790572, 93),
            (13144177310400110813, 95),
            (13444792449719432967, 92),
            (15516499411664133160, 94),
            (16117243373044804889, 90),
        ];
        let want: Vec<(u64, String)> = want
            .iter()
            .map(|(p, port)| (*p, format!("127.0.0.1:{port}")))
            .collect();
        let got: Vec<(u64, String)> = ring(&r, &nodes)
            .into_iter()
            .map(|(p, id)| (p, id.into()))
            .collect();
        assert_eq!(got, want);
        // chooseHost: 0 -> hosts_[4], u64::MAX -> hosts_[4], 3551244743356806947 ->
        // hosts_[5], 3551244743356806948 -> hosts_[3], 16117243373044804880 -> hosts_[0].
        for (h, host) in [
            (0, 4),
            (u64::MAX, 4),
            (3551244743356806947, 5),
            (3551244743356806948, 3),
            (16117243373044804880, 0),
        ] {
            assert_eq!(r.pick_hash(h), host, "hash {h}");
        }
    }

    #[test]
    fn envoy_retry_walk() {
        // ring_hash_lb_test.cc, BasicWithRetryHostPredicate: from hash 0, hosts_[4], then the
        // next host in the ring hosts_[2], then hosts_[0].
        let nodes = hosts(90..96, |_| 1);
        let r = RingHash::new(&nodes, &all(&nodes), 12, DEFAULT_MAX_RING_SIZE);
        let mut out = Vec::new();
        r.attempts_hash(0, 3, &mut out);
        assert_eq!(out, [4, 2, 0]);
    }

    #[test]
    fn envoy_basic_with_hostname() {
        // ring_hash_lb_test.cc, BasicWithHostname: hostnames "90" … "95", minimum 12.
        let nodes: Vec<Node> = (90..96).map(|p| Node::new(format!("{p}"), 1)).collect();
        let r = RingHash::new(&nodes, &all(&nodes), 12, DEFAULT_MAX_RING_SIZE);
        let want = [
            (1975508444536362413, "95"),
            (2376063919839173711, "95"),
            (2386806903309390596, "93"),
            (6749904478991551885, "94"),
            (6803900775736438537, "93"),
            (7225015537174310577, "92"),
            (8787465352164086522, "90"),
            (11282020843382717940, "92"),
            (13723418369486627818, "91"),
            (13776502110861797421, "90"),
            (14338313586354474791, "91"),
            (15364271037087512980, "94"),
        ];
        assert_eq!(ring(&r, &nodes), want);
        for (h, host) in [
            (0, 5),
            (u64::MAX, 5),
            (7225015537174310577, 2),
            (6803900775736438537, 3),
        ] {
            assert_eq!(r.pick_hash(h), host, "hash {h}");
        }
    }

    #[test]
    fn envoy_uneven_hosts() {
        // ring_hash_lb_test.cc, UnevenHosts: two hosts, minimum_ring_size 3 -> ring size 4.
        let nodes = hosts(80..82, |_| 1);
        let r = RingHash::new(&nodes, &all(&nodes), 3, DEFAULT_MAX_RING_SIZE);
        let want = [
            (5454692015285649509, "127.0.0.1:80"),
            (7859399908942313493, "127.0.0.1:81"),
            (13838424394637650569, "127.0.0.1:80"),
            (16064866803292627174, "127.0.0.1:81"),
        ];
        assert_eq!(ring(&r, &nodes), want);
        let nodes = hosts(81..83, |_| 1);
        let r = RingHash::new(&nodes, &all(&nodes), 3, DEFAULT_MAX_RING_SIZE);
        let want = [
            (7859399908942313493, "127.0.0.1:81"),
            (8241336090459785962, "127.0.0.1:82"),
            (12882406409176325258, "127.0.0.1:82"),
            (16064866803292627174, "127.0.0.1:81"),
        ];
        assert_eq!(ring(&r, &nodes), want);
    }

    #[test]
    fn envoy_host_weighted_tiny_ring() {
        // ring_hash_lb_test.cc, HostWeightedTinyRing: weights 1, 2, 3, ring size exactly 6.
        let nodes = hosts(90..93, |p| p - 89);
        let r = RingHash::new(&nodes, &all(&nodes), 6, 6);
        for (h, host) in [
            (928266305478181108, 2),
            (4443673547860492590, 2),
            (5583722120771150861, 1),
            (6311230543546372928, 1),
            (13444792449719432967, 2),
            (16117243373044804889, 0),
        ] {
            assert_eq!(r.pick_hash(h), host, "hash {h}");
        }
        let owned = |o| r.continuum.entries().filter(|e| e.1 == o).count();
        assert_eq!((owned(0), owned(1), owned(2)), (1, 2, 3));
    }

    /// Envoy's `Ring::chooseHost` binary search (ported from libketama's `ketama_get_server`),
    /// with its signed indices, returning the point index.
    fn envoy_search(points: &[u64], h: u64) -> usize {
        let (mut lowp, mut highp) = (0i64, points.len() as i64);
        loop {
            let midp = (lowp + highp) / 2;
            if midp == points.len() as i64 {
                return 0;
            }
            let midval = points[midp as usize];
            let midval1 = if midp == 0 {
                0
            } else {
                points[midp as usize - 1]
            };
            if h <= midval && h > midval1 {
                return midp as usize;
            }
            if midval < h {
                lowp = midp + 1;
            } else {
                highp = midp - 1;
            }
            if lowp > highp {
                return 0;
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn lookup_agrees_with_envoys_binary_search() {
        let nodes = hosts(0..37, |p| p % 5 + 1);
        let r = RingHash::new(&nodes, &all(&nodes), 200, DEFAULT_MAX_RING_SIZE);
        let points: Vec<u64> = r.continuum.entries().map(|(p, _)| p).collect();
        let mut g = crate::SplitMix64::new(2);
        let probes = points.iter().flat_map(|p| [*p, p + 1, p - 1]);
        for h in (0..5000)
            .map(|_| g.next())
            .chain(probes)
            .chain([0, u64::MAX])
        {
            assert_eq!(
                r.continuum.successor(h),
                envoy_search(&points, h),
                "hash {h}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn default_ring_gives_equal_hosts_equal_points() {
        let nodes = hosts(0..10, |_| 1);
        let r = RingHash::new(
            &nodes,
            &all(&nodes),
            DEFAULT_MIN_RING_SIZE,
            DEFAULT_MAX_RING_SIZE,
        );
        let owned = |o| r.continuum.entries().filter(|e| e.1 == o).count();
        // w_min = 0.1: ceil(102.4) / 0.1 = 1030 points, 103 each.
        assert!((0..10).all(|o| owned(o) == 103));
    }
}
