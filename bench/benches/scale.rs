//! How liblb scales: retry orders (`attempts`) at 10^5 and 10^6 nodes, and the cost of ring
//! weights (issue 9). Run: `cargo bench -p liblb-bench --bench scale`; memory and key movement
//! of the same rings: `cargo run --release -p liblb-bench --example ring_weights`.
//!
//! - `attempts/<algorithm>/<n>`: a retry order of 8 nodes from a balancer of `n` nodes with
//!   weights 1..=5. Every algorithm is O(limit · log n): the times must not grow with `n` beyond
//!   cache effects (weighted_random took 1.9 s per call at 10^5 nodes before the Fenwick tree).
//! - `attempts_all/<algorithm>/100000`: the whole retry order (what Python and Node give
//!   by default): O(n log n); rendezvous is left out (O(n^2) by Envoy's retry semantics).
//! - `ring_weights`: build and pick for 1000 nodes, equal weights vs weights 1..100, at the
//!   default 160 vnodes and at the vnodes the docs recommend for such weights (3 per unit).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use liblb_bench::{keys, nodes, spread_nodes};
use liblb_core::{Algorithm, Balancer, HashKind, Node, Options};
use std::hint::black_box;
use std::time::Duration;

fn balancer(algorithm: Algorithm, nodes: Vec<Node>, vnodes: u32) -> Balancer {
    let options = Options {
        seed: Some(1),
        vnodes,
        hash: (algorithm == Algorithm::Ring).then_some(HashKind::Xxh3),
        ..Options::default()
    };
    Balancer::new(algorithm, nodes, options).unwrap()
}

fn attempts(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("attempts");
    g.sample_size(20).measurement_time(Duration::from_secs(2));
    for n in [100_000, 1_000_000] {
        for algorithm in Algorithm::ALL {
            // Ring at 10^6 nodes: 4 points per node fit the 2^22-point budget.
            let vnodes = if algorithm == Algorithm::Ring { 4 } else { 160 };
            let b = balancer(algorithm, nodes(n, true), vnodes);
            let mut i = 0;
            g.bench_with_input(BenchmarkId::new(algorithm.name(), n), &n, |bench, _| {
                bench.iter(|| {
                    i = (i + 1) & 4095;
                    black_box(b.attempts(Some(keys[i].as_bytes()), 8).unwrap().len())
                })
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("attempts_all");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    let n = 100_000;
    // Not rendezvous: Envoy's retry re-scores every host per attempt, so its whole order is
    // O(n^2) by design (10^10 scores here, minutes per call); `attempts` above measures it.
    for algorithm in Algorithm::ALL
        .into_iter()
        .filter(|a| *a != Algorithm::Rendezvous)
    {
        let vnodes = if algorithm == Algorithm::Ring { 4 } else { 160 };
        let b = balancer(algorithm, nodes(n, true), vnodes);
        g.bench_with_input(BenchmarkId::new(algorithm.name(), n), &n, |bench, _| {
            bench.iter(|| black_box(b.attempts(Some(b"session-1"), n).unwrap().len()))
        });
    }
    g.finish();
}

fn ring_weights(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("ring_weights");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    let cases = [
        ("equal/vnodes=160", false, 160),
        ("1..100/vnodes=160", true, 160),
        ("1..100/vnodes=3", true, 3),
    ];
    for (name, spread, vnodes) in cases {
        for hash in [HashKind::Sha256, HashKind::Xxh3] {
            let options = Options {
                vnodes,
                hash: Some(hash),
                ..Options::default()
            };
            let id = format!("build/{hash}/{name}");
            g.bench_function(&id, |bench| {
                bench.iter(|| Balancer::new(Algorithm::Ring, spread_nodes(spread), options))
            });
            let b = Balancer::new(Algorithm::Ring, spread_nodes(spread), options).unwrap();
            let mut i = 0;
            g.bench_function(format!("pick/{hash}/{name}"), |bench| {
                bench.iter(|| {
                    i = (i + 1) & 4095;
                    black_box(b.pick(Some(keys[i].as_bytes())).unwrap().tag())
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, attempts, ring_weights);
criterion_main!(benches);
