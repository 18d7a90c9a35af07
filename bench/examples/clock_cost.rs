//! What one reading of liblb's default clock costs, against the `std::time::Instant` reading it
//! replaced (issue 23, item 2), and what that does to a lease (`acquire` + `finish`, which read
//! the clock once each) of `least_request`, 100 nodes. Rounds alternate between the cases so
//! drift hits all alike; the median round is reported:
//!
//!     cargo run --release -p liblb-bench --example clock_cost
//!
//! Nanoseconds depend on the machine (a virtual one traps or slows the counter); the ratio is
//! the figure to compare.

use liblb_bench::nodes;
use liblb_core::{Algorithm, Balancer, Clock, MonotonicClock, Options, Outcome};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The clock liblb used before: `Instant` since an origin.
#[derive(Debug)]
struct InstantClock(Instant);

impl Clock for InstantClock {
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

const CALLS: u32 = 2_000_000;
const ROUNDS: usize = 9;

fn per_call(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..CALLS {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let origin = Instant::now();
    let b = Balancer::new(
        Algorithm::LeastRequest,
        nodes(100, false),
        Options::default(),
    )
    .unwrap();
    let before = Balancer::with_clock(
        Algorithm::LeastRequest,
        nodes(100, false),
        Options::default(),
        Arc::new(InstantClock(origin)),
    )
    .unwrap();
    let ok = Outcome::Success(Duration::from_millis(1));
    println!("liblb clock source: {}", MonotonicClock::source());
    let (mut std_read, mut liblb_read, mut lease, mut lease_before) =
        (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        std_read.push(per_call(|| {
            black_box(origin.elapsed().as_nanos() as u64);
        }));
        liblb_read.push(per_call(|| {
            black_box(MonotonicClock::now());
        }));
        lease.push(per_call(|| b.acquire(None).unwrap().finish(ok)));
        lease_before.push(per_call(|| before.acquire(None).unwrap().finish(ok)));
    }
    let (s, l) = (median(std_read), median(liblb_read));
    println!("Instant since origin   {s:6.1} ns/reading");
    println!("MonotonicClock::now()  {l:6.1} ns/reading  ({:.2}x)", l / s);
    let (now, then) = (median(lease), median(lease_before));
    println!(
        "least_request acquire + finish: {now:6.1} ns; on the Instant clock {then:6.1} ns ({:.2}x)",
        now / then
    );
}
