//! Readers racing writers: every answer comes from one published snapshot.

use liblb_core::{Algorithm, Balancer, Node, Options};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

const SET_A: [&str; 3] = ["a1", "a2", "a3"];
const SET_B: [&str; 4] = ["b1", "b2", "b3", "b4"];

/// Two threads pick (single picks and batches) while a third swaps the whole membership back
/// and forth between two disjoint sets: every pick names a member of a published set, and a
/// batch never mixes the two.
#[test]
fn pickers_see_whole_snapshots_while_membership_changes() {
    for algorithm in Algorithm::ALL {
        let b = Arc::new(Balancer::new(algorithm, SET_A, Options::default()).unwrap());
        let done = Arc::new(AtomicBool::new(false));
        let pickers: Vec<_> = (0..2)
            .map(|t| {
                let (b, done) = (Arc::clone(&b), Arc::clone(&done));
                thread::spawn(move || {
                    let keys: Vec<String> = (0..16).map(|i| format!("{t}-{i}")).collect();
                    let mut picks = 0u64;
                    while !done.load(Ordering::Relaxed) || picks < 1_000 {
                        let p = b.pick(Some(keys[picks as usize % 16].as_bytes())).unwrap();
                        assert!(SET_A.contains(&p.id()) || SET_B.contains(&p.id()));
                        let batch = b.pick_many(keys.iter().map(|k| k.as_bytes())).unwrap();
                        let ids: Vec<&str> = batch.ids().collect();
                        let all_a = ids.iter().all(|id| SET_A.contains(id));
                        let all_b = ids.iter().all(|id| SET_B.contains(id));
                        assert!(all_a || all_b, "{algorithm}: mixed batch {ids:?}");
                        picks += 1;
                    }
                    picks
                })
            })
            .collect();
        for i in 0..if cfg!(miri) { 4 } else { 400 } {
            let set: Vec<Node> = if i % 2 == 0 {
                SET_B.iter().map(|id| Node::new(*id, 2)).collect()
            } else {
                SET_A.iter().map(|id| Node::new(*id, 1)).collect()
            };
            b.update(set).unwrap();
        }
        done.store(true, Ordering::Relaxed);
        for picker in pickers {
            assert!(picker.join().unwrap() >= 1_000);
        }
    }
}

/// Concurrent round robin over n nodes: k·n picks from several threads land exactly k on each
/// node (no position is lost or taken twice).
#[test]
fn concurrent_round_robin_is_exact() {
    let b = Arc::new(Balancer::new(Algorithm::RoundRobin, SET_B, Options::default()).unwrap());
    let per_thread = if cfg!(miri) { 40 } else { 40_000 };
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let b = Arc::clone(&b);
            thread::spawn(move || {
                let mut counts = [0u64; 4];
                for _ in 0..per_thread {
                    let p = b.pick(None).unwrap();
                    counts[SET_B.iter().position(|id| *id == p.id()).unwrap()] += 1;
                }
                counts
            })
        })
        .collect();
    let mut total = [0u64; 4];
    for h in handles {
        for (t, c) in total.iter_mut().zip(h.join().unwrap()) {
            *t += c;
        }
    }
    assert_eq!(total, [per_thread as u64; 4]);
}

/// `thread_rounds`: each thread serves whole rounds from its own block, so every thread's own
/// picks are exact per block (each node once per round) and so is the total; one thread alone
/// still sees the global order, for round robin and smooth WRR.
#[test]
fn thread_rounds_keep_shares_exact_per_thread() {
    for (algorithm, weights) in [
        (Algorithm::RoundRobin, [1u32, 1, 1, 1]),
        (Algorithm::WeightedRoundRobin, [1, 2, 3, 4]),
    ] {
        let nodes: Vec<Node> = SET_B
            .iter()
            .zip(weights)
            .map(|(id, w)| Node::new(*id, w))
            .collect();
        let period: u64 = if algorithm == Algorithm::RoundRobin {
            4
        } else {
            10
        };
        let blocked = Options {
            thread_rounds: 3,
            ..Options::default()
        };
        // One thread: the same sequence as without blocks.
        let plain = Balancer::new(algorithm, nodes.clone(), Options::default()).unwrap();
        let one = Balancer::new(algorithm, nodes.clone(), blocked).unwrap();
        let a: Vec<String> = plain
            .pick_n(100)
            .unwrap()
            .ids()
            .map(str::to_string)
            .collect();
        let b: Vec<String> = one.pick_n(100).unwrap().ids().map(str::to_string).collect();
        assert_eq!(a, b, "{algorithm}");
        // Four threads, each a whole number of blocks: every thread's own counts are exact.
        let b = Arc::new(Balancer::new(algorithm, nodes, blocked).unwrap());
        let blocks = if cfg!(miri) { 2 } else { 2_000 };
        let per_thread = blocks * 3 * period;
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let b = Arc::clone(&b);
                thread::spawn(move || {
                    let mut counts = [0u64; 4];
                    for _ in 0..per_thread {
                        let p = b.pick(None).unwrap();
                        counts[SET_B.iter().position(|id| *id == p.id()).unwrap()] += 1;
                    }
                    counts
                })
            })
            .collect();
        for h in handles {
            let counts = h.join().unwrap();
            // A period holds each node `weight` times (round robin: once); a block is three.
            let expect = weights.map(|w| u64::from(w) * blocks * 3);
            assert_eq!(counts, expect, "{algorithm}");
        }
    }
}
