//! A keyed `ring` pick on 1000 nodes of weights 1..100 through the `Balancer` and through the
//! `Table` it publishes (issue 23, item 4), in alternating rounds of one process so both see
//! the same machine:
//!
//!     cargo run --release -p liblb-bench --example ring_pick -- \
//!         [vnodes] [hash] [keys] [rounds] [all|table|balancer|index] [option=value ...]
//!
//! `keys` is the size of the key pool cycled through (4096 as in criterion's `ring_weights`;
//! a pool of 2^20 leaves nearly every lookup to miss the caches). Prints the fastest round's
//! ns per pick of each path (interference on a shared machine only adds time): the `Table`,
//! the `Balancer` reading the answer's tag (`Picked::tag`, one more load: the node record) and
//! its index (what the table returns). Under callgrind pass `rounds` 1, one path, and
//! `PICKS=0` / `PICKS=n` to subtract the build.
//!
//! Experiments that located the gap (environment variables): `TABLE_FIRST=1` builds the table
//! before the balancer (allocation order); `BOXED=1` adds the table behind an `Arc`, cloned per
//! pick and not; `PAD=n` adds a table pick with `n` rounds of register-only xorshift, or with
//! `STORES=1` `n` stores to the stack, between lookups.

use liblb_bench::spread_nodes;
use liblb_core::{Algorithm, Balancer, HashKind, Options, Table};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let vnodes: u32 = args.next().map_or(160, |a| a.parse().expect("vnodes"));
    let hash = match args.next().as_deref() {
        None | Some("xxh3") => HashKind::Xxh3,
        Some("sha256") => HashKind::Sha256,
        Some(other) => panic!("unknown hash {other}"),
    };
    let pool: usize = args.next().map_or(4096, |a| a.parse().expect("keys"));
    let rounds: usize = args.next().map_or(9, |a| a.parse().expect("rounds"));
    let only = args.next();
    let extra: Vec<(String, String)> = args
        .map(|a| {
            let (k, v) = a.split_once('=').expect("name=value");
            (k.to_string(), v.to_string())
        })
        .collect();
    let mut options = Options {
        vnodes,
        hash: Some(hash),
        ..Options::default()
    };
    for (k, v) in &extra {
        options
            .set(k, liblb_core::OptionValue::Str(v))
            .expect("option");
    }
    let keys: Vec<String> = (0..pool).map(|i| format!("session-{i:08x}")).collect();
    let picks: usize = std::env::var("PICKS").map_or(300_000, |p| p.parse().expect("PICKS"));
    // TABLE_FIRST=1 builds the table before the balancer (allocation order, placement).
    let table_first = std::env::var_os("TABLE_FIRST").is_some();
    let early =
        table_first.then(|| Table::build(Algorithm::Ring, &options, &spread_nodes(true)).unwrap());
    let balancer = Balancer::new(Algorithm::Ring, spread_nodes(true), options).unwrap();
    let table = early
        .unwrap_or_else(|| Table::build(Algorithm::Ring, &options, &spread_nodes(true)).unwrap());
    let state = liblb_core::State::for_options(&options);
    // BOXED=1: the table and state on the heap behind an `Arc`, as the Balancer holds them.
    let boxed = std::env::var_os("BOXED").is_some();
    let shared = std::sync::Arc::new((
        Table::build(Algorithm::Ring, &options, &spread_nodes(true)).unwrap(),
        liblb_core::State::for_options(&options),
    ));
    let table_arc = || {
        let started = Instant::now();
        let mut sum = 0u64;
        for i in 0..picks {
            let key = keys[i % pool].as_bytes();
            let held = std::sync::Arc::clone(black_box(&shared));
            sum += held.0.pick(Some(key), &held.1, 0).unwrap() as u64;
        }
        black_box(sum);
        started.elapsed().as_nanos() as f64 / picks as f64
    };
    let table_box = || {
        let started = Instant::now();
        let mut sum = 0u64;
        for i in 0..picks {
            let key = keys[i % pool].as_bytes();
            let held = black_box(&*shared);
            sum += held.0.pick(Some(key), &held.1, 0).unwrap() as u64;
        }
        black_box(sum);
        started.elapsed().as_nanos() as f64 / picks as f64
    };
    let through_balancer = || {
        let started = Instant::now();
        let mut sum = 0u64;
        for i in 0..picks {
            let key = keys[i % pool].as_bytes();
            sum += balancer.pick(Some(key)).unwrap().tag();
        }
        black_box(sum);
        started.elapsed().as_nanos() as f64 / picks as f64
    };
    let through_table = || {
        let started = Instant::now();
        let mut sum = 0u64;
        for i in 0..picks {
            let key = keys[i % pool].as_bytes();
            sum += table.pick(Some(key), &state, 0).unwrap() as u64;
        }
        black_box(sum);
        started.elapsed().as_nanos() as f64 / picks as f64
    };
    // The table with ~70 extra register-only instructions per pick (PAD=1): whether more
    // instructions between lookups, not more memory, make the difference.
    let pad: u32 = std::env::var("PAD").map_or(0, |p| p.parse().expect("PAD"));
    let stores = std::env::var_os("STORES").is_some();
    let table_padded = || {
        let started = Instant::now();
        let mut sum = 0u64;
        for i in 0..picks {
            let key = keys[i % pool].as_bytes();
            let mut x = black_box(i as u64) | 1;
            if stores {
                // `pad` stores to the stack instead of register work.
                let mut scratch = [0u64; 64];
                for (j, slot) in scratch.iter_mut().take(pad as usize).enumerate() {
                    *slot = x + j as u64;
                }
                x = black_box(&scratch)[0];
            } else {
                for _ in 0..black_box(pad) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
            }
            sum += table.pick(Some(key), &state, 0).unwrap() as u64 + (x & 1);
        }
        black_box(sum);
        started.elapsed().as_nanos() as f64 / picks as f64
    };
    // The same, reading the answer's index only (no node record).
    let balancer_index = || {
        let started = Instant::now();
        let mut sum = 0u64;
        for i in 0..picks {
            let key = keys[i % pool].as_bytes();
            sum += balancer.pick(Some(key)).unwrap().index() as u64;
        }
        black_box(sum);
        started.elapsed().as_nanos() as f64 / picks as f64
    };
    let (mut b, mut t, mut bi, mut tp) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        if boxed {
            ta.push(table_arc());
            tb.push(table_box());
        }
        if pad > 0 {
            tp.push(table_padded());
        }
        if only.as_deref() != Some("table") && only.as_deref() != Some("index") {
            b.push(through_balancer());
        }
        if only.as_deref() != Some("table") && only.as_deref() != Some("balancer") {
            bi.push(balancer_index());
        }
        if only.as_deref() != Some("balancer") && only.as_deref() != Some("index") {
            t.push(through_table());
        }
    }
    // The fastest round: on a shared machine, interference only ever adds time.
    let fastest = |v: &mut Vec<f64>| v.iter().copied().fold(f64::NAN, f64::min);
    let (b, t, bi) = (fastest(&mut b), fastest(&mut t), fastest(&mut bi));
    if boxed {
        let (ta, tb) = (fastest(&mut ta), fastest(&mut tb));
        println!(
            "heap table, Arc clone per pick {ta:.1} ns = {:+.1} ns; heap table by reference {tb:.1} ns = {:+.1} ns",
            ta - t,
            tb - t
        );
    }
    if pad > 0 {
        let tp = fastest(&mut tp);
        let what = if stores {
            "stores"
        } else {
            "rounds of xorshift"
        };
        println!("table padded ({pad} {what}) {tp:.1} ns = {:+.1} ns", tp - t);
    }
    println!(
        "vnodes {vnodes} {hash} pool {pool} {extra:?}: table {t:.1} ns, balancer (tag) {b:.1} ns = {:+.1} ns ({:.2}x), balancer (index) {bi:.1} ns = {:+.1} ns ({:.2}x)",
        b - t,
        b / t,
        bi - t,
        bi / t
    );
}
