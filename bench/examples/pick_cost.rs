//! Instructions per unkeyed or keyed pick (issue 23, item 1), liblb's `Balancer` and `Table`
//! against the bare peers, counted by callgrind so the answer does not depend on what else
//! the machine runs:
//!
//!     cargo build --release -p liblb-bench --example pick_cost
//!     for op in balancer_random table_random smallrng_choose balancer_round_robin table_round_robin \
//!               atomic_round_robin balancer_source_hash table_source_hash xxh3_mod \
//!               balancer_weighted_random table_weighted_random alias lease_least_request \
//!               lease_round_robin; do
//!       for n in 0 1000000; do
//!         valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!           target/release/examples/pick_cost $op $n 2>&1 | grep 'Collected'
//!       done
//!     done
//!
//! Also `routed_*` (issue 24: levels, locality weights, zone-aware routing) and
//! `prequal_pick_answers` / `prequal_offer_probe_only` (issue 25: a prequal pick with the three
//! probe answers it makes due, and the answers alone).
//!
//! Instructions per pick = (collected at 1,000,000 − collected at 0) / 1,000,000; 100 nodes,
//! weights 1..=5 for the weighted ones; `lease_*` is `acquire` + `finish`. Instructions are not nanoseconds (a locked
//! read-modify-write or a cache miss costs many cycles in one instruction), but they show
//! where a fast path has work to remove.

use liblb_bench::{keys, nodes};
use liblb_core::{Algorithm, Balancer, Options, State, Table};
use rand::SeedableRng;
use rand::distr::Distribution;
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand_distr::weighted::WeightedAliasIndex;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

const N: usize = 100;

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().expect("an operation");
    let count: usize = args.next().expect("a count").parse().expect("a count");
    let keys = keys();
    let key = |i: usize| keys[i & 4095].as_bytes();
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    let balancer = |algorithm: Algorithm, weighted: bool| {
        Balancer::new(algorithm, nodes(N, weighted), options).unwrap()
    };
    let table = |algorithm: Algorithm, weighted: bool| {
        Table::build(algorithm, &options, &nodes(N, weighted)).unwrap()
    };
    let state = State::new(1);
    let mut sum = 0u64;
    match op.as_str() {
        "balancer_random"
        | "balancer_weighted_random"
        | "balancer_round_robin"
        | "balancer_source_hash" => {
            let algorithm = match op.as_str() {
                "balancer_random" => Algorithm::Random,
                "balancer_weighted_random" => Algorithm::WeightedRandom,
                "balancer_round_robin" => Algorithm::RoundRobin,
                _ => Algorithm::SourceHash,
            };
            let b = balancer(algorithm, algorithm == Algorithm::WeightedRandom);
            let keyed = algorithm == Algorithm::SourceHash;
            sum += b.pick(keyed.then(|| key(0))).unwrap().tag(); // warm: the thread's pin
            for i in 0..count {
                sum += b.pick(keyed.then(|| key(i))).unwrap().tag();
            }
        }
        "table_random" | "table_weighted_random" | "table_round_robin" | "table_source_hash" => {
            let algorithm = match op.as_str() {
                "table_random" => Algorithm::Random,
                "table_weighted_random" => Algorithm::WeightedRandom,
                "table_round_robin" => Algorithm::RoundRobin,
                _ => Algorithm::SourceHash,
            };
            let t = table(algorithm, algorithm == Algorithm::WeightedRandom);
            let keyed = algorithm == Algorithm::SourceHash;
            sum += t.pick(keyed.then(|| key(0)), &state, 0).unwrap() as u64;
            for i in 0..count {
                sum += t.pick(keyed.then(|| key(i)), &state, 0).unwrap() as u64;
            }
        }
        "lease_least_request" | "lease_round_robin" => {
            let algorithm = if op == "lease_least_request" {
                Algorithm::LeastRequest
            } else {
                Algorithm::RoundRobin
            };
            let b = balancer(algorithm, false);
            let ok = liblb_core::Outcome::Success(std::time::Duration::from_millis(1));
            b.acquire(None).unwrap().finish(ok);
            for _ in 0..count {
                let lease = b.acquire(None).unwrap();
                sum += lease.tag();
                lease.finish(ok);
            }
        }
        // Issue 24: the same 100 nodes over 3 priority levels x 3 zones (levels: all healthy, so
        // every pick stays on level 0; zone_aware: callers 50/30/20 from zone a, a residual
        // route; weighted: locality weights 1/2/3).
        "routed_round_robin_levels"
        | "routed_round_robin_zone_aware"
        | "routed_round_robin_weighted"
        | "routed_random_levels"
        | "routed_random_zone_aware" => {
            let algorithm = if op.starts_with("routed_round_robin") {
                Algorithm::RoundRobin
            } else {
                Algorithm::Random
            };
            let zones = ["r/a", "r/b", "r/c"];
            let placed = (nodes(N, false).into_iter().enumerate())
                .map(|(i, n)| n.located(zones[i % 3], (i / 34) as u32));
            let b = Balancer::new(algorithm, placed, options).unwrap();
            if op.ends_with("zone_aware") {
                b.set_local_locality(Some("r/a")).unwrap();
                b.set_local_localities([("r/a", 50), ("r/b", 30), ("r/c", 20)])
                    .unwrap();
            } else if op.ends_with("weighted") {
                b.set_locality_weights([("r/a", 1), ("r/b", 2), ("r/c", 3)])
                    .unwrap();
            }
            sum += b.pick(None).unwrap().tag();
            for _ in 0..count {
                sum += b.pick(None).unwrap().tag();
            }
        }
        // Issue 25: prequal's steady state, a pick and the 3 probe answers it made due (the
        // `prequal/pick_with_3_answers` benchmark), against `offer_probe_only` (the answers).
        "prequal_pick_answers" | "prequal_offer_probe_only" => {
            let options = Options {
                max_probe_age: std::time::Duration::from_secs(3600),
                ..options
            };
            let b = Balancer::new(Algorithm::Prequal, nodes(N, false), options).unwrap();
            let ids: Vec<String> = b.nodes().into_iter().map(|n| n.id).collect();
            let mut next = 0;
            let mut answer = |b: &Balancer| {
                next = (next + 7) % N;
                let latency = std::time::Duration::from_micros(500 + 97 * next as u64);
                b.offer_probe(&ids[next], (next % 13) as u32, latency)
                    .unwrap();
            };
            for _ in 0..64 {
                answer(&b);
            }
            let pick = op == "prequal_pick_answers";
            for _ in 0..count {
                if pick {
                    sum += b.pick(None).unwrap().tag();
                }
                for _ in 0..3 {
                    answer(&b);
                }
            }
        }
        "smallrng_choose" => {
            let items: Vec<u64> = (0..N as u64).collect();
            let mut rng = SmallRng::seed_from_u64(1);
            for _ in 0..count {
                sum += *items.choose(&mut rng).unwrap();
            }
        }
        "alias" => {
            let weights: Vec<u32> = (0..N).map(|i| (i % 5) as u32 + 1).collect();
            let alias = WeightedAliasIndex::new(weights).unwrap();
            let mut rng = SmallRng::seed_from_u64(1);
            for _ in 0..count {
                sum += alias.sample(&mut rng) as u64;
            }
        }
        "atomic_round_robin" => {
            let next = AtomicUsize::new(0);
            for _ in 0..count {
                sum += (next.fetch_add(1, Ordering::Relaxed) % N) as u64;
            }
        }
        "xxh3_mod" => {
            for i in 0..count {
                sum += xxhash_rust::xxh3::xxh3_64(key(i)) % N as u64;
            }
        }
        other => panic!("unknown operation {other}"),
    }
    black_box(sum);
}
