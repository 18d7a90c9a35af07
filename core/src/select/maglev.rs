//! `maglev`: Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software
//! Network Load Balancer", NSDI 2016, section 3.4) exactly as Envoy builds it, so keys land
//! where Envoy's `MAGLEV` load balancer sends them.
//!
//! Source: Envoy `source/extensions/load_balancing_policies/maglev/maglev_lb.cc`
//! (`MaglevTable::constructMaglevTableInternal`, `OriginalMaglevTable::
//! constructImplementationInternals`, `chooseHost`) and `common/thread_aware_lb_impl.cc`
//! (`normalizeHostWeights`). Envoy ships no binary installable here, so the unit tests quote
//! the expectations of Envoy's `test/extensions/load_balancing_policies/maglev/
//! maglev_lb_test.cc`.
//!
//! - **Node ids** are the strings Envoy hashes: the host's address as `asString()` prints it
//!   (`10.0.0.1:80`, `[::1]:80`), or its hostname under `use_hostname_for_hashing`.
//! - **Table.** `table_size` slots (a prime, default 65537, the paper's recommendation). Hosts
//!   are sorted by id (Envoy sorts by the hashed string, so this is Envoy's order too); host
//!   `i` has `offset = xxHash64(id, seed 0) mod M` and `skip = 1 + xxHash64(id, seed 1) mod
//!   (M-1)`, and its preference list is `offset + j·skip mod M`. The weighted fill is Envoy's:
//!   with `w_i = weight_i / Σweight` (doubles) and `w_max` their maximum, in each round
//!   `r = 1, 2, …` host `i` claims its next free preferred slot when `r·w_i >= target_i`,
//!   then adds `w_max` to `target_i` (so a host of the largest weight claims a slot every
//!   round). With equal weights this is the paper's round-robin fill.
//! - **Key.** `xxHash64(key, seed 0)`, Envoy's header/cookie hash; [`Maglev::pick_hash`] takes
//!   the 64-bit request hash directly (what Envoy's hash policy computes). The slot is `h mod M`.
//! - **Weights**: Envoy's endpoint `load_balancing_weight` (relative); weight 0 drains.
//! - **`attempts`**: Envoy's own retry walk: attempt `a > 0` looks up `h XOR (2^64 - a)`
//!   (`hash ^= ~0ULL - attempt + 1`), skipping hosts already listed. After `4·limit + 16`
//!   attempts without enough distinct hosts (a walk to many of many hosts), the rest follow
//!   the table forward from the last slot looked at, so every call ends in O(M).
//!
//! Memory: the table is `M` `u32` node indices (256 KiB at the default size); the build keeps
//! `O(n)` state — each host's next preferred slot is one addition modulo `M` away, so no
//! `n × M` permutation matrix is ever allocated. Build cost is O(M log M) probes for equal
//! weights (the paper's bound); with very unequal weights Envoy's fill visits every host in
//! each of up to M rounds, O(M·n), as Envoy's does. A pick is one hash, a multiplicative
//! remainder and one table read.

use super::HashPlacement;
use crate::Options;
use crate::node::Node;
use alloc::vec;
use alloc::vec::Vec;
use xxhash_rust::xxh64::xxh64;

/// Envoy's `MaglevTable::DefaultTableSize` (the paper's section 5.3 recommendation).
pub(crate) const DEFAULT_TABLE_SIZE: u64 = 65537;
/// Largest table size Envoy's config accepts (`table_size`: `lte: 5000011`).
pub(crate) const MAX_TABLE_SIZE: u64 = 5_000_011;

/// Marks a free slot during the build.
const FREE: u32 = u32::MAX;

pub(crate) struct Maglev {
    /// `table[s]` is the node index owning slot `s`.
    table: Vec<u32>,
    /// `h mod table.len()` by multiplication (the pick's only arithmetic).
    modulo: FastMod,
    /// Number of distinct nodes in the table.
    distinct: usize,
    /// Length of the full node list, for the `attempts` seen-set.
    node_count: usize,
}

/// Whether `n` is prime (trial division; table sizes are at most a few million).
pub(crate) fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

/// One host's build state (Envoy's `TableBuildEntry`), O(1) per host.
struct Entry {
    node: u32,
    /// Current preferred slot: `offset + next·skip mod M`.
    position: u64,
    skip: u64,
    weight: f64,
    target: f64,
}

impl Maglev {
    /// Builds the table; `table_size` must be a prime > 1 (checked by the caller's options).
    pub(crate) fn new(nodes: &[Node], active: &[u32], table_size: u64) -> Maglev {
        debug_assert!(is_prime(table_size), "table_size {table_size} is not prime");
        let m = table_size;
        let sum: u64 = active
            .iter()
            .map(|i| u64::from(nodes[*i as usize].weight))
            .sum();
        let mut order = active.to_vec();
        order.sort_unstable_by(|a, b| nodes[*a as usize].id.cmp(&nodes[*b as usize].id));
        let mut max_weight = 0.0f64;
        let mut entries: Vec<Entry> = order
            .iter()
            .map(|i| {
                let id = nodes[*i as usize].id.as_bytes();
                // Envoy: `host->weight() * normalized_locality_weight / sum` with locality 1.0.
                let weight = f64::from(nodes[*i as usize].weight) * 1.0 / sum as f64;
                max_weight = max_weight.max(weight);
                Entry {
                    node: *i,
                    position: xxh64(id, 0) % m,
                    skip: xxh64(id, 1) % (m - 1) + 1,
                    weight,
                    target: 0.0,
                }
            })
            .collect();
        let mut table = vec![FREE; m as usize];
        let mut filled = 0u64;
        let mut iteration: u32 = 1;
        while filled < m {
            for entry in entries.iter_mut() {
                if filled == m {
                    break;
                }
                // A host of weight w_max claims a slot every round; one of w_max/3 every third.
                if f64::from(iteration) * entry.weight < entry.target {
                    continue;
                }
                entry.target += max_weight;
                while table[entry.position as usize] != FREE {
                    entry.position = next_position(entry.position, entry.skip, m);
                }
                table[entry.position as usize] = entry.node;
                entry.position = next_position(entry.position, entry.skip, m);
                filled += 1;
            }
            iteration += 1;
        }
        let mut present = vec![false; nodes.len()];
        let distinct = table
            .iter()
            .filter(|n| !core::mem::replace(&mut present[**n as usize], true))
            .count();
        Maglev {
            table,
            modulo: FastMod::new(m),
            distinct,
            node_count: nodes.len(),
        }
    }

    /// The node for a 64-bit request hash (Envoy's `chooseHost(hash, 0)`).
    #[inline]
    pub(crate) fn pick_hash(&self, h: u64) -> u32 {
        self.table[self.modulo.rem(h) as usize]
    }

    /// `attempts` for a 64-bit request hash: Envoy's retry walk, then the table forward.
    pub(crate) fn attempts_hash(&self, h: u64, limit: usize, out: &mut Vec<u32>) {
        let limit = limit.min(self.distinct);
        let m = self.table.len() as u64;
        let mut seen = vec![false; self.node_count];
        let mut slot = 0;
        let envoy_attempts = 4 * limit as u64 + 16;
        for attempt in 0..envoy_attempts {
            if out.len() >= limit {
                return;
            }
            // Envoy: `hash ^= ~0ULL - attempt + 1` for attempt > 0.
            let mutated = if attempt == 0 {
                h
            } else {
                h ^ attempt.wrapping_neg()
            };
            slot = mutated % m;
            let node = self.table[slot as usize];
            if !core::mem::replace(&mut seen[node as usize], true) {
                out.push(node);
            }
        }
        for step in 1..=m {
            if out.len() >= limit {
                return;
            }
            let node = self.table[((slot + step) % m) as usize];
            if !core::mem::replace(&mut seen[node as usize], true) {
                out.push(node);
            }
        }
    }
}

/// `n mod d` for a fixed `d` by Lemire, Kaser & Kurz's direct remainder ("Faster Remainder by
/// Direct Computation", 2019): two multiplications instead of a 64-bit division, which costs
/// 20-90 cycles on common x86-64 cores.
#[derive(Clone, Copy)]
struct FastMod {
    d: u64,
    /// `ceil(2^128 / d)` (wraps to 0 for d = 1, where every remainder is 0).
    c: u128,
}

impl FastMod {
    fn new(d: u64) -> FastMod {
        FastMod {
            d,
            c: (u128::MAX / u128::from(d)).wrapping_add(1),
        }
    }

    /// The high 128 bits of `(c·n mod 2^128) · d`.
    #[inline]
    fn rem(self, n: u64) -> u64 {
        let low = self.c.wrapping_mul(u128::from(n));
        let d = u128::from(self.d);
        let lo = u128::from(low as u64) * d;
        let hi = (low >> 64) * d;
        ((hi + (lo >> 64)) >> 64) as u64
    }
}

/// `p + skip mod m` without overflow (`p < m`, `skip < m`).
#[inline]
fn next_position(p: u64, skip: u64, m: u64) -> u64 {
    let q = p + skip;
    if q >= m { q - m } else { q }
}

/// The key's 64-bit hash as Envoy's hash policies compute it.
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxh64(key, 0)
}

impl HashPlacement for Maglev {
    fn build(nodes: &[Node], active: Vec<u32>, options: &Options) -> Maglev {
        Maglev::new(nodes, &active, options.table_size)
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

    /// Envoy's test hosts `tcp://127.0.0.1:90` … `:95` (ids as `address()->asString()`).
    fn hosts(ports: core::ops::Range<u32>, weight: impl Fn(u32) -> u32) -> Vec<Node> {
        ports
            .map(|p| Node::new(format!("127.0.0.1:{p}"), weight(p)))
            .collect()
    }

    fn all(nodes: &[Node]) -> Vec<u32> {
        (0..nodes.len() as u32).collect()
    }

    /// `table[h]` for h in 0..M as host indices, as Envoy's tests list `expected_assignments`.
    fn assignments(maglev: &Maglev) -> Vec<u32> {
        (0..maglev.table.len() as u64)
            .map(|h| maglev.pick_hash(h))
            .collect()
    }

    #[test]
    fn envoy_basic() {
        // maglev_lb_test.cc, TEST_F(MaglevLoadBalancerTest, Basic): six hosts, table size 7,
        // expected_assignments{2, 4, 0, 1, 5, 0, 3}; min/max entries per host 1 and 2.
        let nodes = hosts(90..96, |_| 1);
        let maglev = Maglev::new(&nodes, &all(&nodes), 7);
        assert_eq!(assignments(&maglev), [2, 4, 0, 1, 5, 0, 3]);
        // BasicStability: the same table whatever order the hosts come in.
        let reversed: Vec<Node> = nodes.iter().rev().cloned().collect();
        let maglev = Maglev::new(&reversed, &all(&reversed), 7);
        let ids: Vec<&str> = assignments(&maglev)
            .iter()
            .map(|i| &*reversed[*i as usize].id)
            .collect();
        let want = [92, 94, 90, 91, 95, 90, 93].map(|p| format!("127.0.0.1:{p}"));
        assert_eq!(ids, want);
    }

    #[test]
    fn envoy_basic_with_host_name() {
        // maglev_lb_test.cc, TEST_F(MaglevLoadBalancerTest, BasicWithHostName): hostnames
        // "90" … "95" with use_hostname_for_hashing, table size 7,
        // expected_assignments{2, 5, 0, 3, 4, 1, 0}.
        let nodes: Vec<Node> = (90..96).map(|p| Node::new(format!("{p}"), 1)).collect();
        let maglev = Maglev::new(&nodes, &all(&nodes), 7);
        assert_eq!(assignments(&maglev), [2, 5, 0, 3, 4, 1, 0]);
    }

    #[test]
    fn envoy_weighted() {
        // maglev_lb_test.cc, TEST_F(MaglevLoadBalancerTest, Weighted): :90 weight 1, :91
        // weight 2, table size 17; min/max entries per host 6 and 11.
        let nodes = hosts(90..92, |p| if p == 90 { 1 } else { 2 });
        let maglev = Maglev::new(&nodes, &all(&nodes), 17);
        assert_eq!(
            assignments(&maglev),
            [1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1]
        );
        let count = |n| maglev.table.iter().filter(|o| **o == n).count();
        assert_eq!((count(0), count(1)), (6, 11));
    }

    #[test]
    fn envoy_weighted_single_host() {
        // maglev_lb_test.cc, TEST_F(MaglevLoadBalancerTest, WeightedSingleHost).
        let nodes = hosts(90..91, |_| 7);
        let maglev = Maglev::new(&nodes, &all(&nodes), 17);
        assert!(assignments(&maglev).iter().all(|n| *n == 0));
    }

    #[test]
    fn envoy_retry_walk() {
        // maglev_lb_test.cc, TEST_F(MaglevLoadBalancerTest, BasicWithRetryHostPredicate):
        // hash 10 picks hosts_[1]; rejecting it, attempt 1 gives hosts_[0]; rejecting every
        // host, the last of 3 attempts gives hosts_[5].
        let nodes = hosts(90..96, |_| 1);
        let maglev = Maglev::new(&nodes, &all(&nodes), 7);
        let mut out = Vec::new();
        maglev.attempts_hash(10, 3, &mut out);
        assert_eq!(out, [1, 0, 5]);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn attempts_reach_every_host_and_start_with_the_pick() {
        let nodes: Vec<Node> = (0..50).map(|i| Node::new(format!("n{i}"), 1)).collect();
        let maglev = Maglev::new(&nodes, &all(&nodes), 251);
        let mut g = crate::SplitMix64::new(1);
        for _ in 0..50 {
            let h = g.next();
            let mut out = Vec::new();
            maglev.attempts_hash(h, 50, &mut out);
            assert_eq!(out[0], maglev.pick_hash(h));
            let mut sorted = out.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, all(&nodes));
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn equal_weights_fill_evenly_and_removal_moves_few_keys() {
        let m = if cfg!(miri) { 1009 } else { DEFAULT_TABLE_SIZE };
        let nodes: Vec<Node> = (0..10)
            .map(|i| Node::new(format!("10.0.0.{i}:80"), 1))
            .collect();
        let maglev = Maglev::new(&nodes, &all(&nodes), m);
        for n in 0..10 {
            let count = maglev.table.iter().filter(|o| **o == n).count() as u64;
            // The paper's fill gives each host floor(M/n) or ceil(M/n) slots.
            assert!((m / 10..=m / 10 + 1).contains(&count), "node {n}: {count}");
        }
        // Removing one host moves its slots and, as the paper measures, few others.
        let without = Maglev::new(&nodes, &[0, 1, 2, 4, 5, 6, 7, 8, 9], m);
        let moved = maglev
            .table
            .iter()
            .zip(&without.table)
            .filter(|(a, b)| **a != 3 && a != b)
            .count() as u64;
        assert!(moved < m / 50, "{moved} slots of surviving hosts moved");
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Compute-heavy; the unsafe code Miri checks is in dependencies.
    fn fast_modulo_is_the_remainder() {
        let mut g = crate::SplitMix64::new(4);
        for d in [
            1,
            2,
            3,
            7,
            17,
            65537,
            MAX_TABLE_SIZE,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let f = FastMod::new(d);
            for n in (0..2000)
                .map(|_| g.next())
                .chain([0, 1, d - 1, d, u64::MAX])
            {
                assert_eq!(f.rem(n), n % d, "{n} mod {d}");
            }
        }
    }

    #[test]
    fn primes() {
        let small: Vec<u64> = (0..30).filter(|n| is_prime(*n)).collect();
        assert_eq!(small, [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]);
        assert!(is_prime(DEFAULT_TABLE_SIZE) && is_prime(MAX_TABLE_SIZE));
        assert!(!is_prime(65536));
    }
}
