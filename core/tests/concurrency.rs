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

/// least_connections keeps an index of the in-flight counts (issue 23): threads acquiring and
/// finishing leases, with membership changes in between (leases ending on older tables), must
/// leave it equal to the counts once quiet. Then `n` acquires take one lease per node, and `n`
/// more another each: least_conn never puts a second request on a node while one has none.
#[test]
fn least_connections_index_settles_to_the_counts() {
    let ids: Vec<Node> = (0..12).map(|i| Node::new(format!("n{i}"), 1)).collect();
    let b = Arc::new(Balancer::new(Algorithm::LeastConnections, ids, Options::default()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let (b, stop) = (Arc::clone(&b), Arc::clone(&stop));
            thread::spawn(move || {
                let mut held = Vec::new();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) || i < 100 {
                    held.push(b.acquire(None).unwrap());
                    if (i + t) % 3 == 0 {
                        held.swap_remove(i % held.len());
                    }
                    if held.len() > 8 {
                        held.clear();
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for i in 0..if cfg!(miri) { 4 } else { 400 } {
        let id = format!("extra{}", i % 3);
        let _ = if i % 2 == 0 {
            b.add(Node::new(id, 1))
        } else {
            b.remove(&id)
        };
        thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(b.stats().iter().all(|s| s.in_flight == 0));
    let n = b.nodes().len();
    for round in 1..=2 {
        let held: Vec<_> = (0..n * round).map(|_| b.acquire(None).unwrap()).collect();
        let stats = b.stats();
        assert!(stats.iter().all(|s| s.in_flight == round), "{stats:?}");
        drop(held);
    }
}
