//! What feedback costs, and how the random draws scale across threads (issue 10):
//!
//! - `lease`: a plain `pick` against `acquire` + `finish` (in-flight up and down, the outcome
//!   counted, the latency sample folded in) and `acquire` + drop (cancelled) at N = 100.
//! - `p2c`: `least_request` through the `Balancer` and through `Table` + `State` against a
//!   plain power-of-two-choices baseline: two distinct uniform draws from a thread-owned
//!   `SmallRng` (no atomics) over a `Vec<AtomicUsize>` of in-flight counts, the fewest wins.
//! - `threads`: total picks per second from 1 and from 2 threads picking on one shared
//!   balancer, for every algorithm (keyed ones with a different key each pick; round robin
//!   keeps one shared position by definition) and two floors: one SplitMix64 shared through a single atomic counter (how
//!   liblb drew before per-thread streams) and a thread-owned `SmallRng` (no sharing at all).
//!   `table_random` is random through `Table` + `State`, without the snapshot load;
//!   `round_robin_thread_rounds` is round robin with `thread_rounds = 64`.
//!   Criterion reports elements/s; 2 threads / 1 thread is the scaling ratio.
//!
//! Run: `cargo bench -p liblb-bench --bench feedback`; `python3 scripts/bench-report.py` prints
//! the tables.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use liblb_bench::{P2c, keys, nodes};
use liblb_core::{Algorithm, Balancer, Options, Outcome, State, Table};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const N: usize = 100;

fn balancer(algorithm: Algorithm) -> Balancer {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    Balancer::new(algorithm, nodes(N, false), options).unwrap()
}

fn lease(c: &mut Criterion) {
    let mut g = c.benchmark_group("lease");
    let latency = Outcome::Success(Duration::from_millis(3));
    for algorithm in [
        Algorithm::RoundRobin,
        Algorithm::LeastRequest,
        Algorithm::PeakEwma,
    ] {
        let b = balancer(algorithm);
        let name = algorithm.name();
        g.bench_function(BenchmarkId::new("pick", name), |bench| {
            bench.iter(|| black_box(b.pick(None).unwrap().tag()))
        });
        g.bench_function(BenchmarkId::new("acquire_finish", name), |bench| {
            bench.iter(|| {
                let lease = b.acquire(None).unwrap();
                black_box(lease.tag());
                lease.finish(latency);
            })
        });
        g.bench_function(BenchmarkId::new("acquire_cancel", name), |bench| {
            bench.iter(|| black_box(b.acquire(None).unwrap().tag()))
        });
    }
    g.finish();
}

fn p2c(c: &mut Criterion) {
    let mut g = c.benchmark_group("p2c");
    let b = balancer(Algorithm::LeastRequest);
    g.bench_function("liblb_balancer", |bench| {
        bench.iter(|| black_box(b.pick(None).unwrap().tag()))
    });
    let table = Table::build(
        Algorithm::LeastRequest,
        &Options::default(),
        &nodes(N, false),
    );
    let (table, state) = (table.unwrap(), State::new(1));
    g.bench_function("liblb_table", |bench| {
        bench.iter(|| black_box(table.pick(None, &state, 0).unwrap()))
    });
    let plain = P2c::new(N);
    let mut rng = SmallRng::seed_from_u64(1);
    g.bench_function("plain_p2c", |bench| {
        bench.iter(|| black_box(plain.pick(&mut rng)))
    });
    g.finish();
}

/// Times `threads` threads each doing `iters` calls of `work` at once (started together by a
/// barrier): the wall time for `threads x iters` picks.
fn together<F: Fn(u64) + Sync>(threads: usize, iters: u64, work: F) -> Duration {
    let barrier = Barrier::new(threads);
    let (work, barrier) = (&work, &barrier);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..iters {
                        work(i ^ t as u64);
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

/// SplitMix64 through one shared atomic counter: liblb's draws before per-thread streams.
fn shared_splitmix(counter: &AtomicU64) -> u64 {
    let k = counter.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    let mut z = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn threads(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("threads");
    for threads in [1usize, 2] {
        g.throughput(Throughput::Elements(threads as u64));
        for algorithm in Algorithm::ALL {
            let b = balancer(algorithm);
            // Keyed algorithms get a different key each call (the keys of `keys()`, cycled):
            // each thread walks them from its own offset.
            let keyed = algorithm.is_keyed();
            g.bench_function(BenchmarkId::new(algorithm.name(), threads), |bench| {
                bench.iter_custom(|iters| {
                    together(threads, iters, |i| {
                        let key = keyed.then(|| keys[(i & 4095) as usize].as_bytes());
                        black_box(b.pick(key).unwrap().tag());
                    })
                })
            });
        }
        // Round robin with per-thread blocks of 64 rounds (`thread_rounds`).
        let blocked = Balancer::new(
            Algorithm::RoundRobin,
            nodes(N, false),
            Options {
                thread_rounds: 64,
                ..Options::default()
            },
        )
        .unwrap();
        g.bench_function(
            BenchmarkId::new("round_robin_thread_rounds", threads),
            |bench| {
                bench.iter_custom(|iters| {
                    together(threads, iters, |_| {
                        black_box(blocked.pick(None).unwrap().tag());
                    })
                })
            },
        );
        // Random without the Balancer's snapshot load: the draws alone.
        let table = Table::build(Algorithm::Random, &Options::default(), &nodes(N, false));
        let (table, state) = (table.unwrap(), State::new(1));
        g.bench_function(BenchmarkId::new("table_random", threads), |bench| {
            bench.iter_custom(|iters| {
                together(threads, iters, |_| {
                    black_box(table.pick(None, &state, 0).unwrap());
                })
            })
        });
        let counter = AtomicU64::new(0);
        g.bench_function(BenchmarkId::new("floor_shared_atomic", threads), |bench| {
            bench.iter_custom(|iters| {
                together(threads, iters, |_| {
                    black_box(shared_splitmix(&counter) % N as u64);
                })
            })
        });
        g.bench_function(BenchmarkId::new("floor_thread_rng", threads), |bench| {
            bench.iter_custom(|iters| {
                let barrier = Barrier::new(threads);
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            let barrier = &barrier;
                            s.spawn(move || {
                                let mut rng = SmallRng::seed_from_u64(t as u64);
                                barrier.wait();
                                let start = Instant::now();
                                for _ in 0..iters {
                                    black_box(rng.random_range(0..N));
                                }
                                start.elapsed()
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap())
                        .max()
                        .unwrap()
                })
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = lease, p2c, threads
}
criterion_main!(benches);
