//! Memory, build time and key movement of weighted rings (issue 9), for BENCHMARKS.md:
//!
//!     cargo run --release -p liblb-bench --example ring_weights
//!
//! For 1000 nodes with equal weights and with weights 1..100, at the default 160 vnodes and at
//! 3 vnodes per unit of weight: the bytes the balancer keeps (counted by a global allocator
//! wrapper), the build's peak, the build time, the share error (worst node's observed share of
//! 200,000 keys over its weight share) and, after removing one node, how many keys moved
//! between surviving nodes (0 means minimal movement).

use liblb_bench::spread_nodes;
use liblb_core::{Algorithm, Balancer, HashKind, Options};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
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
        "| weights | vnodes | hash | kept MB | build peak MB | build ms | worst share / expected | keys moved between survivors on removal |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (label, spread, vnodes) in [
        ("equal (1)", false, 160),
        ("1..100", true, 160),
        ("1..100", true, 3),
    ] {
        for hash in [HashKind::Sha256, HashKind::Xxh3] {
            let options = Options {
                vnodes,
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
                "| {label} | {vnodes} | {hash} | {:.1} | {:.1} | {ms:.0} | {:.2} | {between} of {} |",
                kept as f64 / 1e6,
                peak as f64 / 1e6,
                1.0 + worst,
                keys.len(),
            );
        }
    }
}
