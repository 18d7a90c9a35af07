//! least_connections (nginx's `least_conn`) at scale (issue 23, item 3): a pick and an
//! acquire + finish through the `Balancer` at N = 1,000, 10,000 and 100,000 equal-weight
//! nodes, against a plain power-of-two-choices pick over the same N (two distinct uniform draws
//! from a thread-owned `SmallRng`, the smaller of two `AtomicUsize` in-flight counts wins).
//!
//! - `pick/<n>`: every node idle, so all `n` tie and nginx's smooth-WRR tie-break runs over
//!   all of them (the worst case for a scan: 1,140x a P2C pick at N = 1000 before the index).
//! - `pick_busy/<n>`: every node holds one to four leases (a seeded spread), so the least
//!   loaded are a small tie set.
//! - `acquire_finish/<n>`: a lease taken and finished (in-flight up and down, the outcome
//!   counted) on idle nodes; `acquire_finish_busy/<n>`: the same on the busy nodes.
//! - `weighted_pick/<n>`: weights 1..=5, all idle (five trees, one per weight).
//! - `pick_checking/<n>`: equal weights, all idle, one node marked down: health must be
//!   checked, so the pick falls back to the exact O(n) scan (under the index's lock).
//! - `plain_p2c/<n>`: the baseline.
//!
//! Run: `cargo bench -p liblb-bench --bench least_connections`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use liblb_bench::{P2c, nodes};
use liblb_core::{Algorithm, Balancer, Lease, Options, Outcome};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::time::Duration;

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

fn balancer(n: usize, weighted: bool) -> Balancer {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    Balancer::new(Algorithm::LeastConnections, nodes(n, weighted), options).unwrap()
}

/// One to four leases held on every node (seeded), so ties are few.
fn busy(b: &Balancer, n: usize) -> Vec<Lease> {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(b.acquire(None).unwrap()); // least_conn fills every node once
    }
    for _ in 0..n * 3 / 2 {
        held.push(b.acquire(None).unwrap());
        if rng.random_range(0..4) == 0 {
            held.swap_remove(rng.random_range(0..held.len()));
        }
    }
    held
}

fn least_connections(c: &mut Criterion) {
    let latency = Outcome::Success(Duration::from_millis(3));
    let mut g = c.benchmark_group("least_connections");
    g.sample_size(30).measurement_time(Duration::from_secs(2));
    for n in SIZES {
        let plain = P2c::new(n);
        let mut rng = SmallRng::seed_from_u64(1);
        g.bench_with_input(BenchmarkId::new("plain_p2c", n), &n, |bench, _| {
            bench.iter(|| black_box(plain.pick(&mut rng)))
        });
        let b = balancer(n, false);
        g.bench_with_input(BenchmarkId::new("pick", n), &n, |bench, _| {
            bench.iter(|| black_box(b.pick(None).unwrap().tag()))
        });
        g.bench_with_input(BenchmarkId::new("acquire_finish", n), &n, |bench, _| {
            bench.iter(|| {
                let lease = b.acquire(None).unwrap();
                black_box(lease.tag());
                lease.finish(latency);
            })
        });
        let held = busy(&b, n);
        g.bench_with_input(BenchmarkId::new("pick_busy", n), &n, |bench, _| {
            bench.iter(|| black_box(b.pick(None).unwrap().tag()))
        });
        g.bench_with_input(
            BenchmarkId::new("acquire_finish_busy", n),
            &n,
            |bench, _| {
                bench.iter(|| {
                    let lease = b.acquire(None).unwrap();
                    black_box(lease.tag());
                    lease.finish(latency);
                })
            },
        );
        drop(held);
        let w = balancer(n, true);
        g.bench_with_input(BenchmarkId::new("weighted_pick", n), &n, |bench, _| {
            bench.iter(|| black_box(w.pick(None).unwrap().tag()))
        });
        b.mark_down("10.0.0.1:80").unwrap();
        g.bench_with_input(BenchmarkId::new("pick_checking", n), &n, |bench, _| {
            bench.iter(|| black_box(b.pick(None).unwrap().tag()))
        });
    }
    g.finish();
}

criterion_group!(benches, least_connections);
criterion_main!(benches);
