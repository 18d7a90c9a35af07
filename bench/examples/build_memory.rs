//! The bytes every algorithm's table holds at 10^4, 10^5 and 10^6 nodes, and its build peak
//! (issue 13), for BENCHMARKS.md:
//!
//!     cargo run --release -p liblb-bench --example build_memory
//!
//! Counted by a global allocator wrapper around `Table::build` with default options: "kept" is
//! what the table still holds after the build (the caller's node list excluded), "peak" the
//! most the build had allocated at once. One build per row, timed once too (the criterion
//! bench `--bench build` gives the careful times). Equal weights for every algorithm, weights
//! 1..=100 for those whose build depends on them.

use liblb_bench::{BUILD_SIZES, WEIGHT_SENSITIVE, many_nodes};
use liblb_core::{Algorithm, Options, Table};
use std::alloc::{GlobalAlloc, Layout, System};
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

fn mb(bytes: usize) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

fn main() {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    println!(
        "| algorithm | weights | n | build ms (once) | kept MB | kept bytes/node | build peak MB |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for n in BUILD_SIZES {
        for (label, spread) in [("equal", false), ("1..100", true)] {
            let nodes = many_nodes(n, spread);
            for algorithm in Algorithm::ALL {
                if spread && !WEIGHT_SENSITIVE.contains(&algorithm) {
                    continue;
                }
                let before = LIVE.load(Relaxed);
                PEAK.store(before, Relaxed);
                let started = Instant::now();
                let table = Table::build(algorithm, &options, &nodes).unwrap();
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let kept = LIVE.load(Relaxed) - before;
                let peak = PEAK.load(Relaxed) - before;
                drop(table);
                println!(
                    "| {} | {label} | {n} | {ms:.1} | {} | {:.0} | {} |",
                    algorithm.name(),
                    mb(kept),
                    kept as f64 / n as f64,
                    mb(peak)
                );
            }
        }
    }
}
