//! Every liblb algorithm at N = 10, 100, 1000 nodes, against the best crates doing the same
//! job, in one run so the ratios are comparable on a noisy machine:
//!
//! | liblb                | peers                                                        |
//! |----------------------|--------------------------------------------------------------|
//! | random               | rand `IndexedRandom::choose` (SmallRng)                      |
//! | weighted_random      | rand `WeightedIndex`, rand_distr `WeightedAliasIndex`        |
//! | round_robin          | a bare `AtomicUsize` counter                                  |
//! | weighted_round_robin | weighted-rs `SmoothWeight` (nginx smooth WRR, `&mut`, O(n))  |
//! | source_hash          | bare `xxh3(key) % n` (the floor)                              |
//! | ring                 | pingora-ketama `Continuum`, hashring `HashRing` (SipHash)    |
//!
//! liblb is measured through the thread-safe `Balancer` (snapshot load + pick), which is what
//! users call; peers that need `&mut` state get it for free here, which favours them.
//! Run: `cargo bench -p liblb-bench`, then `python3 scripts/bench-report.py` for the table.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use liblb_bench::{SIZES, keys, nodes};
use liblb_core::{Algorithm, Balancer, HashKind, Options, State, Table};
use rand::SeedableRng;
use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use sha2::Digest;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn balancer(algorithm: Algorithm, n: usize, weighted: bool, hash: Option<HashKind>) -> Balancer {
    let options = Options {
        seed: Some(1),
        hash,
        ..Options::default()
    };
    Balancer::new(algorithm, nodes(n, weighted), options).unwrap()
}

/// Benchmarks `pick` of a liblb balancer cycling through the keys.
fn bench_liblb(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    n: usize,
    b: &Balancer,
) {
    let keys = keys();
    let mut i = 0;
    c.bench_with_input(BenchmarkId::new(name, n), &n, |bench, _| {
        bench.iter(|| {
            i = (i + 1) & 4095;
            black_box(b.pick(Some(black_box(keys[i].as_bytes()))).unwrap().tag())
        })
    });
}

/// The same algorithms through `Table` + `State` directly: the cost without the `Balancer`'s
/// snapshot load (arc-swap), i.e. what membership changes cost every pick.
fn table_only(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("table_only");
    for algorithm in Algorithm::ALL {
        let n = 100;
        let table = Table::build(algorithm, &Options::default(), &nodes(n, true)).unwrap();
        let state = State::new(1);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new(algorithm.name(), n), &n, |bench, _| {
            bench.iter(|| {
                i = (i + 1) & 4095;
                black_box(
                    table
                        .pick(Some(black_box(keys[i].as_bytes())), &state, 0)
                        .unwrap(),
                )
            })
        });
    }
    g.finish();
}

fn unkeyed(c: &mut Criterion) {
    let mut g = c.benchmark_group("random");
    for n in SIZES {
        bench_liblb(
            &mut g,
            "liblb",
            n,
            &balancer(Algorithm::Random, n, false, None),
        );
        let ids: Vec<usize> = (0..n).collect();
        let mut rng = SmallRng::seed_from_u64(1);
        g.bench_with_input(BenchmarkId::new("rand_choose", n), &n, |bench, _| {
            bench.iter(|| black_box(ids.choose(&mut rng)))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("weighted_random");
    for n in SIZES {
        bench_liblb(
            &mut g,
            "liblb",
            n,
            &balancer(Algorithm::WeightedRandom, n, true, None),
        );
        let weights: Vec<u32> = nodes(n, true).iter().map(|n| n.weight).collect();
        let index = WeightedIndex::new(&weights).unwrap();
        let alias = rand_distr::weighted::WeightedAliasIndex::new(weights.clone()).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        g.bench_with_input(BenchmarkId::new("rand_WeightedIndex", n), &n, |bench, _| {
            bench.iter(|| black_box(index.sample(&mut rng)))
        });
        g.bench_with_input(
            BenchmarkId::new("rand_distr_WeightedAliasIndex", n),
            &n,
            |bench, _| bench.iter(|| black_box(alias.sample(&mut rng))),
        );
    }
    g.finish();

    let mut g = c.benchmark_group("round_robin");
    for n in SIZES {
        bench_liblb(
            &mut g,
            "liblb",
            n,
            &balancer(Algorithm::RoundRobin, n, false, None),
        );
        let counter = AtomicUsize::new(0);
        g.bench_with_input(BenchmarkId::new("AtomicUsize", n), &n, |bench, _| {
            bench.iter(|| black_box(counter.fetch_add(1, Ordering::Relaxed) % black_box(n)))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("weighted_round_robin");
    for n in SIZES {
        bench_liblb(
            &mut g,
            "liblb",
            n,
            &balancer(Algorithm::WeightedRoundRobin, n, true, None),
        );
        let mut smooth = weighted_rs::SmoothWeight::<usize>::new();
        for (i, node) in nodes(n, true).iter().enumerate() {
            weighted_rs::Weight::add(&mut smooth, i, node.weight as isize);
        }
        g.bench_with_input(
            BenchmarkId::new("weighted-rs_SmoothWeight", n),
            &n,
            |bench, _| bench.iter(|| black_box(weighted_rs::Weight::next(&mut smooth))),
        );
    }
    g.finish();
}

fn keyed(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("source_hash");
    for n in SIZES {
        bench_liblb(
            &mut g,
            "liblb",
            n,
            &balancer(Algorithm::SourceHash, n, false, None),
        );
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("xxh3_mod_n", n), &n, |bench, _| {
            bench.iter(|| {
                i = (i + 1) & 4095;
                black_box(xxhash_rust::xxh3::xxh3_64(black_box(keys[i].as_bytes())) % n as u64)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("ring");
    for n in SIZES {
        bench_liblb(
            &mut g,
            "liblb_sha256",
            n,
            &balancer(Algorithm::Ring, n, false, None),
        );
        bench_liblb(
            &mut g,
            "liblb_xxh3",
            n,
            &balancer(Algorithm::Ring, n, false, Some(HashKind::Xxh3)),
        );
        let buckets: Vec<pingora_ketama::Bucket> = (0..n)
            .map(|i| {
                let addr = format!("10.0.{}.{}:80", i / 256, i % 256).parse().unwrap();
                pingora_ketama::Bucket::new(addr, 1)
            })
            .collect();
        let continuum = pingora_ketama::Continuum::new(&buckets);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("pingora-ketama", n), &n, |bench, _| {
            bench.iter(|| {
                i = (i + 1) & 4095;
                black_box(continuum.node(black_box(keys[i].as_bytes())))
            })
        });
        let mut ring: hashring::HashRing<String> = hashring::HashRing::new();
        for node in nodes(n, false) {
            for v in 0..160 {
                ring.add(format!("{}-{v}", node.id));
            }
        }
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("hashring", n), &n, |bench, _| {
            bench.iter(|| {
                i = (i + 1) & 4095;
                black_box(ring.get(&black_box(&keys[i])).map(String::len))
            })
        });
    }
    g.finish();
}

/// The SHA-256 ring's key hash alone against the whole pick: how much of a `ring` pick is the
/// hash. sha2 uses the CPU's SHA extensions when it detects them at run time (x86 `sha` +
/// `sse4.1`, aarch64 `sha2`); `sha_in_use` is printed with the results.
fn sha256(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    let sha_in_use =
        std::arch::is_x86_feature_detected!("sha") && std::arch::is_x86_feature_detected!("sse4.1");
    #[cfg(not(target_arch = "x86_64"))]
    let sha_in_use = false;
    println!("sha256: CPU SHA extensions detected (so used by sha2): {sha_in_use}");
    let keys = keys();
    let mut g = c.benchmark_group("sha256");
    let mut i = 0;
    g.bench_function("key_hash_only", |bench| {
        bench.iter(|| {
            i = (i + 1) & 4095;
            black_box(sha2::Sha256::digest(black_box(keys[i].as_bytes())))
        })
    });
    let b = balancer(Algorithm::Ring, 1000, false, None);
    let mut i = 0;
    g.bench_function("ring_pick_1000", |bench| {
        bench.iter(|| {
            i = (i + 1) & 4095;
            black_box(b.pick(Some(black_box(keys[i].as_bytes()))).unwrap().tag())
        })
    });
    g.finish();
}

/// What the `Balancer` layer costs on top of `Table` + `State` (issue 13's 2 ns budget), in one
/// group: unkeyed picks at N = 1000 through the `Balancer` (the thread's snapshot pin), through
/// `Table` + `State` directly, and through an `ArcSwap` guard + `Table` (the layer before pins);
/// round robin's floor is a bare `AtomicUsize` counter.
fn layer(c: &mut Criterion) {
    let n = 1000;
    let mut g = c.benchmark_group("layer");
    for algorithm in [Algorithm::RoundRobin, Algorithm::Random] {
        let name = algorithm.name();
        let b = balancer(algorithm, n, false, None);
        g.bench_function(format!("{name}/balancer"), |bench| {
            bench.iter(|| black_box(b.pick(None).unwrap().index()))
        });
        let table = Table::build(algorithm, &Options::default(), &nodes(n, false)).unwrap();
        let state = State::new(1);
        g.bench_function(format!("{name}/table_state"), |bench| {
            bench.iter(|| black_box(table.pick(None, &state, 0).unwrap()))
        });
        let swapped = arc_swap::ArcSwap::from_pointee(table);
        g.bench_function(format!("{name}/arc_swap_guard_table"), |bench| {
            bench.iter(|| black_box(swapped.load().pick(None, &state, 0).unwrap()))
        });
    }
    let counter = AtomicUsize::new(0);
    g.bench_function("round_robin/AtomicUsize", |bench| {
        bench.iter(|| black_box(counter.fetch_add(1, Ordering::Relaxed) % black_box(n)))
    });
    g.finish();
}

fn config() -> Criterion {
    // Short runs: ~60 benchmarks; ratios matter, not the last digit.
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = unkeyed, keyed, table_only, layer, sha256
}
criterion_main!(benches);
