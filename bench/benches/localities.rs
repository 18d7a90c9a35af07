//! Priority levels and localities (issue 24, item 8): the cost of a pick routed priority →
//! locality → algorithm, against the same algorithm over the same nodes with no routing (the
//! flat balancer). 900 nodes: 3 priority levels × 3 zones × 100 nodes.
//!
//! - `flat/<algorithm>`: the nodes without localities or priorities (every node in one group).
//! - `levels/<algorithm>`: 3 priority levels, every node healthy (all traffic on level 0: the
//!   routing costs one check; keyed algorithms never route by locality).
//! - `zone_aware/<algorithm>`: 3 levels and zone-aware routing from zone a with callers
//!   50 / 30 / 20 over the zones (a residual route: two draws per pick).
//! - `weighted/<algorithm>`: 3 levels and locality weights 1 / 2 / 3 (the EDF rotation).
//! - `spill/<algorithm>`: 3 levels, zone-aware, 60 of level 0's 300 nodes down: health checked,
//!   and level 0 keeps 100% (240 / 300 × 1.4 > 1); the live routing is read per pick.
//!
//! Goal: within 1.5x of `flat`. Run: `cargo bench -p liblb-bench --bench localities`.

use criterion::{Criterion, criterion_group, criterion_main};
use liblb_core::{Algorithm, Balancer, Node, Options};
use std::hint::black_box;
use std::time::Duration;

const ZONES: [&str; 3] = ["r/a", "r/b", "r/c"];

fn nodes(placed: bool) -> Vec<Node> {
    let mut out = Vec::new();
    for priority in 0..3u32 {
        for zone in ZONES {
            for i in 0..100 {
                let node = Node::new(format!("{zone}/{priority}/{i}").as_str(), 1);
                out.push(if placed {
                    node.located(zone, priority)
                } else {
                    node
                });
            }
        }
    }
    out
}

fn balancer(algorithm: Algorithm, placed: bool) -> Balancer {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    Balancer::new(algorithm, nodes(placed), options).unwrap()
}

fn zone_aware(b: &Balancer) {
    b.set_local_locality(Some("r/a")).unwrap();
    b.set_local_localities([("r/a", 50), ("r/b", 30), ("r/c", 20)])
        .unwrap();
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("localities");
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_millis(500));
    for algorithm in [
        Algorithm::Random,
        Algorithm::RoundRobin,
        Algorithm::LeastRequest,
        Algorithm::Maglev,
    ] {
        let name = algorithm.name();
        let key: &[u8] = b"user:42";
        let key = algorithm.is_keyed().then_some(key);
        let mut run = |label: &str, b: Balancer| {
            group.bench_function(format!("{label}/{name}"), |bench| {
                bench.iter(|| black_box(b.pick(black_box(key)).unwrap().index()))
            });
        };
        run("flat", balancer(algorithm, false));
        run("levels", balancer(algorithm, true));
        if !algorithm.is_keyed() {
            let b = balancer(algorithm, true);
            zone_aware(&b);
            run("zone_aware", b);
            let b = balancer(algorithm, true);
            b.set_locality_weights([("r/a", 1), ("r/b", 2), ("r/c", 3)])
                .unwrap();
            run("weighted", b);
        }
        let b = balancer(algorithm, true);
        if !algorithm.is_keyed() {
            zone_aware(&b);
        }
        for zone in ZONES {
            for i in 0..20 {
                b.mark_down(&format!("{zone}/0/{i}")).unwrap();
            }
        }
        run("spill", b);
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
