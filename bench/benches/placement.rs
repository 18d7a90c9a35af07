//! The field-compatible placements against the best Rust crates for each family, in one run
//! (issue 11). Run: `cargo bench -p liblb-bench --bench placement`.
//!
//! | liblb                 | peers                                                           |
//! |-----------------------|-----------------------------------------------------------------|
//! | maglev (Envoy's)      | `maglev` 0.2 (SipHash key hash, table 65537)                     |
//! | jump                  | `jump-consistent-hash` 0.1 (`hash(u64, n)`), on the same hashes  |
//! | rendezvous (Envoy's)  | a plain loop of xxh3(key ‖ node) over N nodes (the floor), and   |
//! |                       | `rendezvous_hash` 0.3 (SipHash, sorts every candidate)           |
//! | ketama, nginx_chash   | `pingora-ketama` (nginx-compatible continuum)                    |
//! | ring_hash (Envoy's)   | `hashring` 0.3                                                   |
//!
//! liblb runs through the thread-safe `Balancer` with string keys (hash included), and through
//! `pick_hash` where a placement takes a 64-bit hash, so the lookup alone compares with the
//! crates' hash-in lookups. Build times are measured too (`build/...`).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use liblb_bench::keys;
use liblb_core::{Algorithm, Balancer, Node, Options};
use std::hint::black_box;
use std::time::Duration;

const SIZES: [usize; 3] = [10, 100, 1000];

fn node_ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.0.{}.{}:11211", i / 256, i % 256))
        .collect()
}

fn liblb(algorithm: Algorithm, n: usize) -> Balancer {
    let nodes = node_ids(n).into_iter().map(|id| Node::new(id, 1));
    Balancer::new(algorithm, nodes, Options::default()).unwrap()
}

fn lookups(c: &mut Criterion) {
    let keys = keys();
    let hashes: Vec<u64> = keys
        .iter()
        .map(|k| xxhash_rust::xxh3::xxh3_64(k.as_bytes()))
        .collect();
    let mut g = c.benchmark_group("placement");
    g.sample_size(30).measurement_time(Duration::from_secs(2));
    for n in SIZES {
        for algorithm in [
            Algorithm::Maglev,
            Algorithm::Jump,
            Algorithm::Rendezvous,
            Algorithm::Ketama,
            Algorithm::NginxChash,
            Algorithm::RingHash,
        ] {
            let b = liblb(algorithm, n);
            let mut i = 0;
            g.bench_with_input(BenchmarkId::new(algorithm.name(), n), &n, |bench, _| {
                bench.iter(|| {
                    i = (i + 1) & 4095;
                    black_box(b.pick(Some(black_box(keys[i].as_bytes()))).unwrap().tag())
                })
            });
            if algorithm.takes_hash() {
                let mut i = 0;
                let name = format!("{}/pick_hash", algorithm.name());
                g.bench_with_input(BenchmarkId::new(name, n), &n, |bench, _| {
                    bench.iter(|| {
                        i = (i + 1) & 4095;
                        black_box(b.pick_hash(black_box(hashes[i])).unwrap().tag())
                    })
                });
            }
        }
        // jump's lookup alone (Table, no Balancer snapshot load): the same loop as the crate.
        let table = liblb_core::Table::build(
            Algorithm::Jump,
            &Options::default(),
            &node_ids(n)
                .into_iter()
                .map(|id| Node::new(id, 1))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let mut i = 0;
        g.bench_with_input(
            BenchmarkId::new("jump/table_pick_hash", n),
            &n,
            |bench, _| {
                bench.iter(|| {
                    i = (i + 1) & 4095;
                    black_box(table.pick_hash(black_box(hashes[i])).unwrap())
                })
            },
        );
        // Peers.
        let maglev = maglev::Maglev::new(node_ids(n));
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("maglev-crate", n), &n, |bench, _| {
            use maglev::ConsistentHasher;
            bench.iter(|| {
                i = (i + 1) & 4095;
                black_box(maglev.get(black_box(&keys[i])).map(String::len))
            })
        });
        let mut i = 0;
        g.bench_with_input(
            BenchmarkId::new("jump-consistent-hash", n),
            &n,
            |bench, _| {
                bench.iter(|| {
                    i = (i + 1) & 4095;
                    black_box(jump_consistent_hash::hash(black_box(hashes[i]), n))
                })
            },
        );
        let ids = node_ids(n);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("xxh3-loop-floor", n), &n, |bench, _| {
            bench.iter(|| {
                i = (i + 1) & 4095;
                let key = keys[i].as_bytes();
                let best = ids.iter().enumerate().max_by_key(|(_, id)| {
                    xxhash_rust::xxh3::xxh3_64_with_seed(
                        id.as_bytes(),
                        xxhash_rust::xxh3::xxh3_64(key),
                    )
                });
                black_box(best.map(|(j, _)| j))
            })
        });
        let mut hrw = rendezvous_hash::RendezvousNodes::default();
        for id in &ids {
            hrw.insert(id.as_str());
        }
        let mut i = 0;
        g.bench_with_input(
            BenchmarkId::new("rendezvous_hash-crate", n),
            &n,
            |bench, _| {
                bench.iter(|| {
                    i = (i + 1) & 4095;
                    black_box(
                        hrw.calc_candidates(black_box(&keys[i]))
                            .next()
                            .map(|id| id.len()),
                    )
                })
            },
        );
    }
    g.finish();
}

fn builds(c: &mut Criterion) {
    let mut g = c.benchmark_group("placement_build");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    let n = 1000;
    for algorithm in [
        Algorithm::Maglev,
        Algorithm::Ketama,
        Algorithm::NginxChash,
        Algorithm::RingHash,
        Algorithm::Rendezvous,
        Algorithm::Jump,
    ] {
        g.bench_with_input(BenchmarkId::new(algorithm.name(), n), &n, |bench, _| {
            bench.iter(|| liblb(algorithm, n))
        });
    }
    g.bench_with_input(BenchmarkId::new("maglev-crate", n), &n, |bench, _| {
        bench.iter(|| maglev::Maglev::new(node_ids(n)))
    });
    g.finish();
}

criterion_group!(benches, lookups, builds);
criterion_main!(benches);
