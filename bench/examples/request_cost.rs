//! Instructions per request-layer operation (issue 21), for BENCHMARKS.md, counted by
//! callgrind so the answer does not depend on what else the machine runs:
//!
//!     cargo build --release -p liblb-bench --example request_cost
//!     for op in acquire_finish request request_budget deposit_withdraw tower_deposit_withdraw; do
//!       for n in 0 100000; do
//!         valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!           target/release/examples/request_cost $op $n 2>&1 | grep 'Collected'
//!       done
//!     done
//!
//! Instructions per operation = (collected at 100,000 − collected at 0) / 100,000. Operations:
//! a lease (`acquire` + `finish`) against a request of one attempt (`request` + `attempt` +
//! `finish`), without and with a shared default `RetryBudget`, `round_robin` over 100 nodes;
//! and a budget's deposit + withdraw, liblb's `RetryBudget` against tower's `TpsBudget`.

use liblb_bench::nodes;
use liblb_core::{Algorithm, Balancer, Budget, Decision, Options, Outcome, RetryBudget};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::retry::budget::{Budget as _, TpsBudget};

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().expect("an operation");
    let n: u64 = args.next().expect("a count").parse().expect("a count");
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    let b = Balancer::new(Algorithm::RoundRobin, nodes(100, false), options).unwrap();
    let ok = Outcome::Success(Duration::from_millis(3));
    let budget = Arc::new(RetryBudget::default());
    let tower = TpsBudget::default();
    let start = Instant::now();
    // Warm every path once, so both counts include the same one-time costs.
    let warm = b.acquire(None).unwrap();
    warm.finish(ok);
    for _ in 0..n {
        match op.as_str() {
            "acquire_finish" => {
                let lease = b.acquire(None).unwrap();
                black_box(lease.tag());
                lease.finish(ok);
            }
            "request" | "request_budget" => {
                let mut request = b.request(None::<&[u8]>);
                if op == "request_budget" {
                    request = request.with_budget(Budget::Retry(budget.clone()));
                }
                let lease = request.attempt().unwrap().unwrap();
                black_box(lease.tag());
                assert_eq!(request.finish(lease, ok), Decision::Done);
            }
            "deposit_withdraw" => {
                let now = start.elapsed().as_nanos() as u64;
                budget.deposit(now);
                black_box(budget.withdraw(now));
            }
            "tower_deposit_withdraw" => {
                tower.deposit();
                black_box(tower.withdraw());
            }
            other => panic!("unknown operation {other}"),
        }
    }
}
