//! What the request layer costs (issue 21, deliverable 7):
//!
//! - `request`: one attempt through `Balancer::request` (`attempt` + `finish`) against a
//!   plain `acquire` + `finish`, with and without a default `RetryBudget` (a deposit per
//!   request), for `round_robin` and the keyed `ring_hash`.
//! - `budget`: `RetryBudget::deposit` and `withdraw`, `RetryThrottle::success` and
//!   `failure`, `AdaptiveThrottle::admit` + `accepted`, each against tower's `TpsBudget`
//!   (`tower::retry::budget`, the semantics `RetryBudget` ports) doing the same.
//! - `budget_threads`: deposits + withdrawals per second from 1 and from 2 threads sharing one
//!   budget, liblb's lock-free window against tower's (which rotates under a mutex).
//!
//! Run: `cargo bench -p liblb-bench --bench request`; `python3 scripts/bench-report.py`
//! prints the tables.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use liblb_bench::nodes;
use liblb_core::{
    AdaptiveThrottle, Algorithm, Balancer, Budget, Decision, Options, Outcome, RetryBudget,
    RetryThrottle,
};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tower::retry::budget::{Budget as _, TpsBudget};

const N: usize = 100;
const OK: Outcome = Outcome::Success(Duration::from_millis(3));

fn balancer(algorithm: Algorithm) -> Balancer {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    Balancer::new(algorithm, nodes(N, false), options).unwrap()
}

fn default_budget() -> Arc<RetryBudget> {
    Arc::new(RetryBudget::default())
}

fn request(c: &mut Criterion) {
    let mut g = c.benchmark_group("request");
    for algorithm in [Algorithm::RoundRobin, Algorithm::RingHash] {
        let b = balancer(algorithm);
        let key: Option<&[u8]> = algorithm.is_keyed().then_some(b"user-42");
        let name = algorithm.name();
        g.bench_function(BenchmarkId::new("acquire_finish", name), |bench| {
            bench.iter(|| {
                let lease = b.acquire(key).unwrap();
                black_box(lease.tag());
                lease.finish(OK);
            })
        });
        g.bench_function(BenchmarkId::new("request_one_attempt", name), |bench| {
            bench.iter(|| {
                let mut request = b.request(key);
                let lease = request.attempt().unwrap().unwrap();
                black_box(lease.tag());
                assert_eq!(request.finish(lease, OK), Decision::Done);
            })
        });
        let budget = default_budget();
        g.bench_function(
            BenchmarkId::new("request_one_attempt_budget", name),
            |bench| {
                bench.iter(|| {
                    let mut request = b.request(key).with_budget(Budget::Retry(budget.clone()));
                    let lease = request.attempt().unwrap().unwrap();
                    black_box(lease.tag());
                    assert_eq!(request.finish(lease, OK), Decision::Done);
                })
            },
        );
    }
    g.finish();
}

/// Nanoseconds since the bench started (the budgets take the caller's clock).
fn now(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

fn budget(c: &mut Criterion) {
    let mut g = c.benchmark_group("budget");
    let start = Instant::now();
    let ours = default_budget();
    let tower = TpsBudget::default();
    g.bench_function("liblb_deposit", |bench| {
        bench.iter(|| ours.deposit(now(start)))
    });
    g.bench_function("tower_deposit", |bench| bench.iter(|| tower.deposit()));
    g.bench_function("liblb_deposit_withdraw", |bench| {
        bench.iter(|| {
            ours.deposit(now(start));
            black_box(ours.withdraw(now(start)))
        })
    });
    g.bench_function("tower_deposit_withdraw", |bench| {
        bench.iter(|| {
            tower.deposit();
            black_box(tower.withdraw())
        })
    });
    let throttle = RetryThrottle::new(10, 0.5).unwrap();
    g.bench_function("liblb_throttle_success_failure", |bench| {
        bench.iter(|| {
            throttle.success();
            black_box(throttle.failure())
        })
    });
    let adaptive = AdaptiveThrottle::default();
    let mut random = 0u64;
    g.bench_function("liblb_adaptive_admit_accepted", |bench| {
        bench.iter(|| {
            random = random.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let t = now(start);
            if black_box(adaptive.admit(t, random)) {
                adaptive.accepted(t);
            }
        })
    });
    g.finish();
}

/// Deposits + withdrawals per second from `threads` threads sharing one budget.
fn budget_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("budget_threads");
    const PER_THREAD: u64 = 100_000;
    for threads in [1usize, 2] {
        g.throughput(Throughput::Elements(PER_THREAD * threads as u64));
        g.bench_function(BenchmarkId::new("liblb", threads), |bench| {
            bench.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let budget = default_budget();
                    let start = Instant::now();
                    total += run_threads(threads, move || {
                        for _ in 0..PER_THREAD {
                            budget.deposit(now(start));
                            black_box(budget.withdraw(now(start)));
                        }
                    });
                }
                total
            })
        });
        g.bench_function(BenchmarkId::new("tower", threads), |bench| {
            bench.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let budget = Arc::new(TpsBudget::default());
                    total += run_threads(threads, move || {
                        for _ in 0..PER_THREAD {
                            budget.deposit();
                            black_box(budget.withdraw());
                        }
                    });
                }
                total
            })
        });
    }
    g.finish();
}

/// Runs `work` on `threads` threads started together; the wall time until all are done.
fn run_threads(threads: usize, work: impl Fn() + Send + Sync + Clone + 'static) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (barrier, work) = (barrier.clone(), work.clone());
            std::thread::spawn(move || {
                barrier.wait();
                work();
            })
        })
        .collect();
    let start = Instant::now();
    barrier.wait();
    for h in handles {
        h.join().unwrap();
    }
    start.elapsed()
}

criterion_group!(benches, request, budget, budget_threads);
criterion_main!(benches);
