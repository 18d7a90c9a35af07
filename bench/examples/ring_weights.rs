//! Memory, build time and key movement of weighted rings (issue 9), for BENCHMARKS.md:
//!
//!     cargo run --release -p liblb-bench --example ring_weights
//!
//! For 1000 nodes with equal weights and with weights 1..100, at the default 160 vnodes, at
//! 3 vnodes per unit of weight and with `max_ring_points` 2^20 and 2^18: the bytes the balancer
//! keeps (counted by a global allocator wrapper), the build's peak, the build time, a pick over
//! the 200,000 keys through the `Table` and through the `Balancer` (the fastest of 5
//! alternating rounds, ns), the share error (worst node's observed share of 200,000 keys over
//! its weight share) and, after removing one node, how many keys moved between surviving
//! nodes (0 means minimal movement).

use liblb_bench::spread_nodes;
use liblb_core::{Algorithm, Balancer, HashKind, MAX_RING_POINTS, Options, State, Table};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

/// Counts live and peak heap bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(live, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let keys: Vec<String> = (0..200_000).map(|i| format!("session-{i:08x}")).collect();
    println!(
        "| weights | vnodes | max_ring_points | hash | kept MB | build peak MB | build ms | Table pick ns | Balancer pick ns | Balancer / Table | worst share / expected | keys moved between survivors on removal |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (label, spread, vnodes, budget) in [
        ("equal (1)", false, 160, MAX_RING_POINTS),
        ("1..100", true, 160, MAX_RING_POINTS),
        ("1..100", true, 3, MAX_RING_POINTS),
        ("1..100", true, 160, 1 << 20),
        ("1..100", true, 160, 1 << 18),
    ] {
        for hash in [HashKind::Sha256, HashKind::Xxh3] {
            let options = Options {
                vnodes,
                max_ring_points: budget,
                hash: Some(hash),
                ..Options::default()
            };
            let nodes = spread_nodes(spread);
            let total: f64 = nodes.iter().map(|n| f64::from(n.weight)).sum();
            let weight: HashMap<String, f64> = nodes
                .iter()
                .map(|n| (n.id.to_string(), f64::from(n.weight)))
                .collect();
            let before = LIVE.load(Relaxed);
            PEAK.store(before, Relaxed);
            let started = Instant::now();
            let b = Balancer::new(Algorithm::Ring, nodes, options).unwrap();
            let ms = started.elapsed().as_secs_f64() * 1e3;
            let kept = LIVE.load(Relaxed) - before;
            let peak = PEAK.load(Relaxed) - before;
            let owner = |b: &Balancer| -> Vec<String> {
                let picks = b.pick_many(keys.iter().map(|k| k.as_bytes())).unwrap();
                picks.ids().map(str::to_string).collect()
            };
            let (table_ns, balancer_ns) = pick_times(&b, &options, spread, &keys);
            let old = owner(&b);
            let mut counts: HashMap<&str, f64> = HashMap::new();
            for id in &old {
                *counts.entry(id).or_default() += 1.0;
            }
            let worst = weight
                .iter()
                .map(|(id, w)| {
                    let expected = w / total * keys.len() as f64;
                    counts.get(id.as_str()).copied().unwrap_or(0.0) / expected
                })
                .fold(0.0f64, |a, r| a.max((r - 1.0).abs()));
            let victim = "10.0.0.49:80"; // weight 50 in the spread set
            b.remove(victim).unwrap();
            let new = owner(&b);
            let between = old
                .iter()
                .zip(&new)
                .filter(|(o, n)| o != n && o.as_str() != victim)
                .count();
            println!(
                "| {label} | {vnodes} | {budget} | {hash} | {:.1} | {:.1} | {ms:.0} | {table_ns:.0} | {balancer_ns:.0} | {:.2} | {:.2} | {between} of {} |",
                kept as f64 / 1e6,
                peak as f64 / 1e6,
                balancer_ns / table_ns,
                1.0 + worst,
                keys.len(),
            );
        }
    }
}

/// ns per keyed pick over `keys`, through a `Table` built from the same nodes and options and
/// through `b` (its answer's index, as the table gives): the fastest of 5 alternating rounds
/// (interference on a shared machine only adds time).
fn pick_times(b: &Balancer, options: &Options, spread: bool, keys: &[String]) -> (f64, f64) {
    let table = Table::build(Algorithm::Ring, options, &spread_nodes(spread)).unwrap();
    let state = State::for_options(options);
    let time = |pick: &dyn Fn(&[u8]) -> usize| {
        let started = Instant::now();
        let mut sum = 0;
        for key in keys {
            sum += pick(key.as_bytes());
        }
        black_box(sum);
        started.elapsed().as_nanos() as f64 / keys.len() as f64
    };
    let (mut through_table, mut through_balancer) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        through_table = through_table.min(time(&|k| table.pick(Some(k), &state, 0).unwrap()));
        through_balancer = through_balancer.min(time(&|k| b.pick(Some(k)).unwrap().index()));
    }
    (through_table, through_balancer)
}
