//! Issue 23's goals in one group, each liblb operation beside its bare peer in the same run
//! (N = 1000 nodes, keys cycling through 4096 session ids), so the ratios in BENCHMARKS.md
//! come from one run of this file:
//!
//! | family | liblb (`Balancer`, and `Table` + `State`) | peer | goal |
//! |---|---|---|---|
//! | `random` | `pick(None)` | rand `IndexedRandom::choose` (SmallRng) | ≤ 2x |
//! | `weighted_random` (weights 1..=5) | `pick(None)` | rand_distr `WeightedAliasIndex` | ≤ 1.5x |
//! | `round_robin` | `pick(None)` | a bare `AtomicUsize` counter mod n | ≤ 1.5x |
//! | `source_hash` | `pick(key)` | `xxh3(key) % n` | ≤ 1.5x |
//! | `least_request` | `acquire` + `finish` | plain P2C pick; P2C with its in-flight count kept | ≤ 3x the pick |
//! | `bounded_ring` (`ring`, `hash_balance_factor` 125) | `Balancer::pick(key)` | `Table::pick(key)` | ≤ 1.2x |
//!
//! Peers that need `&mut` state (SmallRng) get it for free here, which favours them.
//! Run: `cargo bench -p liblb-bench --bench fast_paths`; `python3 scripts/bench-report.py`.

use criterion::{Criterion, criterion_group, criterion_main};
use liblb_bench::{P2c, keys, nodes};
use liblb_core::{Algorithm, Balancer, Options, Outcome, State, Table};
use rand::SeedableRng;
use rand::distr::Distribution;
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const N: usize = 1000;

fn options(balance_factor: u32) -> Options {
    Options {
        seed: Some(1),
        hash_balance_factor: balance_factor,
        ..Options::default()
    }
}

/// The `Balancer` and the `Table` + `State` under it, over the same nodes.
fn both(algorithm: Algorithm, weighted: bool, balance_factor: u32) -> (Balancer, Table) {
    let options = options(balance_factor);
    let b = Balancer::new(algorithm, nodes(N, weighted), options).unwrap();
    let t = Table::build(algorithm, &options, &nodes(N, weighted)).unwrap();
    (b, t)
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// The `balancer` and `table` rows of a group: `pick` through each, keyed by `keys` in turn
/// when given.
fn liblb_rows(g: &mut Group<'_>, b: &Balancer, t: &Table, keys: Option<&[String]>) {
    let state = State::new(1);
    let mut i = 0;
    let mut key = || {
        i += 1;
        keys.map(|keys| black_box(keys[i & 4095].as_bytes()))
    };
    g.bench_function("balancer", |bench| {
        bench.iter(|| black_box(b.pick(key()).unwrap().index()))
    });
    g.bench_function("table", |bench| {
        bench.iter(|| black_box(t.pick(key(), &state, 0).unwrap()))
    });
}

fn fast_paths(c: &mut Criterion) {
    let keys = keys();
    let mut rng = SmallRng::seed_from_u64(1);

    let mut g = c.benchmark_group("fast_paths/random");
    let (b, t) = both(Algorithm::Random, false, 0);
    liblb_rows(&mut g, &b, &t, None);
    let items: Vec<usize> = (0..N).collect();
    g.bench_function("rand_choose", |bench| {
        bench.iter(|| black_box(items.choose(&mut rng)))
    });
    g.finish();

    let mut g = c.benchmark_group("fast_paths/weighted_random");
    let (b, t) = both(Algorithm::WeightedRandom, true, 0);
    liblb_rows(&mut g, &b, &t, None);
    let weights: Vec<u32> = nodes(N, true).iter().map(|n| n.weight).collect();
    let alias = rand_distr::weighted::WeightedAliasIndex::new(weights).unwrap();
    g.bench_function("rand_distr_alias", |bench| {
        bench.iter(|| black_box(alias.sample(&mut rng)))
    });
    g.finish();

    let mut g = c.benchmark_group("fast_paths/round_robin");
    let (b, t) = both(Algorithm::RoundRobin, false, 0);
    liblb_rows(&mut g, &b, &t, None);
    let counter = AtomicUsize::new(0);
    g.bench_function("atomic_usize", |bench| {
        bench.iter(|| black_box(counter.fetch_add(1, Ordering::Relaxed) % black_box(N)))
    });
    g.finish();

    let mut g = c.benchmark_group("fast_paths/source_hash");
    let (b, t) = both(Algorithm::SourceHash, false, 0);
    liblb_rows(&mut g, &b, &t, Some(&keys));
    let mut i = 0;
    g.bench_function("xxh3_mod_n", |bench| {
        bench.iter(|| {
            i += 1;
            let key = black_box(keys[i & 4095].as_bytes());
            black_box(xxhash_rust::xxh3::xxh3_64(key) % N as u64)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("fast_paths/least_request");
    let (b, t) = both(Algorithm::LeastRequest, false, 0);
    let state = State::new(1);
    let ok = Outcome::Success(Duration::from_millis(3));
    g.bench_function("balancer_acquire_finish", |bench| {
        bench.iter(|| {
            let lease = b.acquire(None).unwrap();
            black_box(lease.index());
            lease.finish(ok);
        })
    });
    g.bench_function("balancer_pick", |bench| {
        bench.iter(|| black_box(b.pick(None).unwrap().index()))
    });
    g.bench_function("table_pick_start_end", |bench| {
        bench.iter(|| {
            let i = t.pick(None, &state, 0).unwrap();
            t.start(i, &state);
            t.end(black_box(i), Some(ok), &state, 0);
        })
    });
    let p2c = P2c::new(N);
    g.bench_function("plain_p2c", |bench| {
        bench.iter(|| black_box(p2c.pick(&mut rng)))
    });
    g.bench_function("plain_p2c_in_flight", |bench| {
        bench.iter(|| p2c.lease(&mut rng, black_box))
    });
    g.finish();

    let mut g = c.benchmark_group("fast_paths/bounded_ring");
    let (b, t) = both(Algorithm::Ring, false, 125);
    liblb_rows(&mut g, &b, &t, Some(&keys));
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(40)
}

criterion_group! {
    name = benches;
    config = config();
    targets = fast_paths
}
criterion_main!(benches);
