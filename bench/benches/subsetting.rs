//! Subsetting (issue 26, item 5): what computing a client's subset costs, at 1,000 and 100,000
//! backends, for each algorithm; and what a pick costs with a subset against the same
//! algorithm over the same number of nodes without one (the subset is the algorithm's node
//! list, so the goal is no difference).
//!
//! - `compute/<algorithm>/<n>`: `subset(spec, ids)` over `n` backends, subsets of 30, client 7
//!   of 10,000 (what a balancer does on every membership change: check and sort the ids, then
//!   the algorithm); `prepared/<algorithm>/<n>`: the algorithm alone, on a `Backends` checked
//!   and sorted once (a fleet simulation's or a controller's many clients).
//! - `pick/<algorithm>/plain`: a pick over 30 nodes; `pick/<algorithm>/subset`: over the
//!   subset of 30 that `random` subsetting keeps of 1,000 nodes.
//!
//! Run: `cargo bench -p liblb-bench --bench subsetting`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use liblb_core::subset::{Backends, SubsetAlgorithm, SubsetSpec, subset};
use liblb_core::{Algorithm, Balancer, Node, OptionValue, Options};
use std::hint::black_box;
use std::time::Duration;

fn ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.{}.{}.{}:8080", i >> 16, (i >> 8) & 255, i & 255))
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("subsetting");
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_millis(500));
    for n in [1_000, 100_000] {
        let owned = ids(n);
        let ids: Vec<&str> = owned.iter().map(String::as_str).collect();
        for algorithm in SubsetAlgorithm::ALL.iter().copied() {
            let spec = SubsetSpec {
                algorithm,
                size: 30,
                client_index: 7,
                client_count: 10_000,
                seed: 42,
            };
            let id = BenchmarkId::new(format!("compute/{}", algorithm.name()), n);
            group.bench_function(id, |b| {
                b.iter(|| black_box(subset(black_box(&spec), black_box(&ids)).unwrap()))
            });
            let prepared = Backends::new(&ids).unwrap();
            let id = BenchmarkId::new(format!("prepared/{}", algorithm.name()), n);
            group.bench_function(id, |b| {
                b.iter(|| black_box(prepared.subset(black_box(&spec)).unwrap()))
            });
        }
    }
    for algorithm in [
        Algorithm::RoundRobin,
        Algorithm::Random,
        Algorithm::LeastRequest,
    ] {
        let seeded = Options {
            seed: Some(1),
            ..Options::default()
        };
        let plain: Vec<Node> = ids(30).into_iter().map(|id| Node::new(id, 1)).collect();
        let plain = Balancer::new(algorithm, plain, seeded).unwrap();
        let mut options = seeded;
        for (name, value) in [
            ("subset", "random"),
            ("subset_size", "30"),
            ("subset_seed", "42"),
        ] {
            options.set(name, OptionValue::Str(value)).unwrap();
        }
        let fleet: Vec<Node> = ids(1_000).into_iter().map(|id| Node::new(id, 1)).collect();
        let subsetted = Balancer::new(algorithm, fleet, options).unwrap();
        assert_eq!(subsetted.subset().ids().count(), 30);
        for (label, b) in [("plain", plain), ("subset", subsetted)] {
            group.bench_function(format!("pick/{}/{label}", algorithm.name()), |bench| {
                bench.iter(|| black_box(b.pick(None).unwrap().index()))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
