//! Table build time (issue 13): what a membership change costs before the new snapshot can be
//! published. Run: `cargo bench -p liblb-bench --bench build`; the bytes the same tables hold:
//! `cargo run --release -p liblb-bench --example build_memory`.
//!
//! - `build/<algorithm>/<weights>/<n>`: `Table::build` of every algorithm with default options
//!   at 10^4, 10^5 and 10^6 nodes, all of weight 1 (`equal`) and, for the algorithms whose
//!   build work depends on the weights ([`WEIGHT_SENSITIVE`]), weights cycling 1..=100. The
//!   time includes what every build does (id validation, a sort of the ids, one load counter
//!   per node): `round_robin`, which adds nothing to it, is that floor. Dropping the table is
//!   not timed.
//! - `wrr_schedule/...`: smooth WRR's schedule for 1000 nodes of weights 1..=100, the build
//!   before issue 13 (nginx's loop, O(n·Σw)) against the table build now (kinetic tournament).

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use liblb_bench::{BUILD_SIZES, WEIGHT_SENSITIVE, many_nodes, nginx_loop_schedule};
use liblb_core::{Algorithm, Options, Table};
use std::hint::black_box;
use std::time::Duration;

fn build(c: &mut Criterion) {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    for n in BUILD_SIZES {
        let mut g = c.benchmark_group("build");
        // Ten samples of one build each at 10^6 nodes keep the whole run to minutes.
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(if n >= 1_000_000 { 4 } else { 2 }))
            .sampling_mode(SamplingMode::Flat);
        for (label, spread) in [("equal", false), ("1..100", true)] {
            let nodes = many_nodes(n, spread);
            for algorithm in Algorithm::ALL {
                if spread && !WEIGHT_SENSITIVE.contains(&algorithm) {
                    continue;
                }
                let id = BenchmarkId::new(format!("{}/{label}", algorithm.name()), n);
                g.bench_with_input(id, &n, |bench, _| {
                    bench.iter_with_large_drop(|| {
                        Table::build(algorithm, &options, black_box(&nodes)).unwrap()
                    })
                });
            }
        }
        g.finish();
    }
}

fn wrr_schedule(c: &mut Criterion) {
    let mut g = c.benchmark_group("wrr_schedule");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    let nodes = many_nodes(1000, true);
    let weights: Vec<u32> = nodes.iter().map(|n| n.weight).collect();
    g.bench_function("nginx_loop/1000", |bench| {
        bench.iter_with_large_drop(|| nginx_loop_schedule(black_box(&weights)))
    });
    let options = Options::default();
    g.bench_function("table_build/1000", |bench| {
        bench.iter_with_large_drop(|| {
            Table::build(Algorithm::WeightedRoundRobin, &options, black_box(&nodes)).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, wrr_schedule, build);
criterion_main!(benches);
