//! The health stress test (issue 19): pickers, failure reporters, lease holders, a membership
//! writer and a marker calling `mark_down` / `mark_up` race for a bounded number of rounds, each
//! on a fixed clock reading; after every round the test checks what users rely on:
//!
//! - no node marked down was picked after its `mark_down` returned (and before its `mark_up`
//!   began): each picker reads the marker's published state before it picks and again after;
//! - the ejected nodes never exceed `max_ejection_percent` of the current membership;
//! - every ejection lasts `base_ejection_time × multiplier`, the multiplier following Envoy's
//!   rule (one more per ejection, one less per base period the node stayed in), which a
//!   double ejection (two racing failures ejecting one node twice) breaks.
//!
//! The membership writer swaps nodes in and out of four slots, keeping twelve members, so the
//! cap stays the same; the nodes that fail and the nodes that are marked are never swapped out.

use liblb_core::{
    Algorithm, Balancer, Clock, Error, ManualClock, Node, OptionValue, Options, Outcome, Status,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const MEMBERS: usize = 12;
/// n0..n3 fail every request: they are the ones ejected.
const FLAKY: std::ops::Range<usize> = 0..4;
/// n4..n7 are marked down and up.
const MARKED: std::ops::Range<usize> = 4..8;
/// n8..n11 are swapped with spares s0..s7 by the membership writer.
const SWAPPED: std::ops::Range<usize> = 8..12;
const CAP: usize = MEMBERS * 25 / 100;
const BASE: Duration = Duration::from_secs(30);
const MAX: Duration = Duration::from_secs(300);
const OPS: usize = 300;
const ROUNDS: usize = 24;

/// A tiny deterministic generator (SplitMix64) for the threads' choices.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn options() -> Options {
    let mut options = Options {
        seed: Some(11),
        ..Options::default()
    };
    for (name, value) in [
        ("consecutive_failures", "3"),
        ("max_ejection_percent", "25"),
        ("base_ejection_time_ms", "30000"),
        ("max_ejection_time_ms", "300000"),
        ("panic_threshold", "0"),
    ] {
        options.set(name, OptionValue::Str(value)).unwrap();
    }
    options
}

/// The marker's published state per marked node: `generation << 1 | down`. It sets the down
/// bit after `mark_down` returns, and bumps the generation (clearing the bit) before `mark_up`
/// begins, so a pick that saw the bit before and the same word after ran wholly while the node
/// was down.
struct Marks([AtomicU64; MEMBERS]);

impl Marks {
    fn read(&self) -> [u64; MEMBERS] {
        std::array::from_fn(|i| self.0[i].load(Ordering::SeqCst))
    }
}

/// What one round shares.
struct Round {
    b: Balancer,
    marks: Marks,
    violations: AtomicUsize,
    start: Barrier,
}

fn index_of(id: &str) -> Option<usize> {
    id.strip_prefix('n')?.parse().ok()
}

impl Round {
    /// Checks a pick of `id` against the marks read before it.
    fn check(&self, before: &[u64; MEMBERS], id: &str) {
        let Some(i) = index_of(id) else { return };
        if before[i] & 1 == 1 && self.marks.0[i].load(Ordering::SeqCst) == before[i] {
            self.violations.fetch_add(1, Ordering::SeqCst);
            eprintln!("{id} was picked while marked down");
        }
    }

    fn picker(&self, seed: u64, keyed: bool) {
        let mut mix = Mix(seed);
        for _ in 0..OPS {
            let key = mix.next().to_le_bytes();
            let key = keyed.then_some(&key[..]);
            let before = self.marks.read();
            match self.b.pick(key) {
                Ok(picked) => self.check(&before, picked.id()),
                Err(Error::NoUsableNodes) => {}
                Err(e) => panic!("pick: {e}"),
            }
            let before = self.marks.read();
            if let Ok(attempts) = self.b.attempts(key, 3) {
                for id in attempts.ids() {
                    self.check(&before, id);
                }
            }
        }
    }

    fn reporter(&self, seed: u64) {
        let mut mix = Mix(seed);
        for _ in 0..OPS {
            // Mostly the failing nodes, so failures race on them.
            let i = if mix.below(4) == 0 {
                mix.below(MEMBERS)
            } else {
                FLAKY.start + mix.below(FLAKY.len())
            };
            let id = format!("n{i}");
            let outcome = if FLAKY.contains(&i) {
                Outcome::Failure(Duration::ZERO)
            } else {
                Outcome::Success(Duration::ZERO)
            };
            match self.b.report(&id, outcome) {
                Ok(()) => {}
                Err(Error::UnknownNode(_)) => assert!(SWAPPED.contains(&i)),
                Err(e) => panic!("report: {e}"),
            }
        }
    }

    fn lease_holder(&self, seed: u64, keyed: bool) {
        let mut mix = Mix(seed);
        let mut held = Vec::new();
        for _ in 0..OPS {
            let key = mix.next().to_le_bytes();
            let before = self.marks.read();
            match self.b.acquire(keyed.then_some(&key[..])) {
                Ok(lease) => {
                    self.check(&before, lease.id());
                    held.push(lease);
                }
                Err(Error::NoUsableNodes) => {}
                Err(e) => panic!("acquire: {e}"),
            }
            // Finish some, keep others across membership changes.
            if held.len() > 8 || mix.below(3) == 0 {
                let lease = held.swap_remove(mix.below(held.len().max(1)).min(held.len() - 1));
                let failing = index_of(lease.id()).is_some_and(|i| FLAKY.contains(&i));
                if failing {
                    lease.finish(Outcome::Failure(Duration::ZERO));
                } else {
                    lease.finish(Outcome::Success(Duration::ZERO));
                }
            }
        }
        for lease in held {
            lease.finish(Outcome::Success(Duration::ZERO));
        }
    }

    fn writer(&self, seed: u64) {
        let mut mix = Mix(seed);
        for _ in 0..OPS / 10 {
            let nodes = self.b.nodes();
            let slot = SWAPPED.start + mix.below(SWAPPED.len());
            let spare = format!("s{}", mix.below(8));
            if nodes.iter().any(|n| n.id == spare) {
                continue;
            }
            let members: Vec<Node> = nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let id = if i == slot {
                        spare.as_str()
                    } else {
                        n.id.as_str()
                    };
                    Node::new(id, 1)
                })
                .collect();
            self.b.update(members).unwrap();
        }
    }

    fn marker(&self, seed: u64) {
        let mut mix = Mix(seed);
        for _ in 0..OPS / 3 {
            let i = MARKED.start + mix.below(MARKED.len());
            let id = format!("n{i}");
            let word = self.marks.0[i].load(Ordering::SeqCst);
            if word & 1 == 0 {
                self.b.mark_down(&id).unwrap();
                self.marks.0[i].store(word | 1, Ordering::SeqCst);
            } else {
                self.marks.0[i].store(((word >> 1) + 1) << 1, Ordering::SeqCst);
                self.b.mark_up(&id).unwrap();
            }
        }
    }
}

/// The model of one node's ejections: the multiplier and the end of its last ejection.
#[derive(Clone, Copy, Default)]
struct Ejections {
    count: u64,
    until: u64,
}

fn stress(algorithm: Algorithm, salt: u64, deadline: Instant) {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1000)));
    let ids: Vec<String> = (0..MEMBERS).map(|i| format!("n{i}")).collect();
    let nodes: Vec<Node> = ids.iter().map(|id| Node::new(id.as_str(), 1)).collect();
    let b = Balancer::with_clock(algorithm, nodes, options(), clock.clone()).unwrap();
    let round = Arc::new(Round {
        b,
        marks: Marks(std::array::from_fn(|_| AtomicU64::new(0))),
        violations: AtomicUsize::new(0),
        start: Barrier::new(8),
    });
    let keyed = algorithm.is_keyed();
    let mut model = [Ejections::default(); MEMBERS];
    let mut steps = Mix(salt);
    for r in 0..ROUNDS {
        if Instant::now() > deadline {
            break;
        }
        let seed = (salt << 32) | ((r as u64) << 8);
        let now = clock.now_ns();
        let threads: Vec<_> = (0..7)
            .map(|t| {
                let round = round.clone();
                std::thread::spawn(move || {
                    round.start.wait();
                    match t {
                        0 | 1 => round.picker(seed + t, keyed),
                        2 | 3 => round.reporter(seed + t),
                        4 => round.lease_holder(seed + t, keyed),
                        5 => round.writer(seed + t),
                        _ => round.marker(seed + t),
                    }
                })
            })
            .collect();
        round.start.wait();
        for t in threads {
            t.join().unwrap();
        }
        let b = &round.b;
        assert_eq!(round.violations.load(Ordering::SeqCst), 0, "{algorithm:?}");
        let stats = b.stats();
        assert_eq!(stats.len(), MEMBERS);
        assert!(stats.iter().all(|s| s.in_flight == 0), "every lease ended");
        let ejected: Vec<_> = (stats.iter())
            .filter_map(|s| match s.status {
                Status::Ejected { until_ns } => Some((s.id.clone(), until_ns)),
                _ => None,
            })
            .collect();
        assert!(
            ejected.len() <= CAP,
            "{algorithm:?} round {r}: {} ejected, cap {CAP}: {ejected:?}",
            ejected.len()
        );
        for (id, until) in ejected {
            let i = index_of(&id).unwrap();
            let m = &mut model[i];
            if until == m.until {
                continue; // ejected in an earlier round, still out
            }
            // Ejected in this round, at `now`, once: one more than what is left of the
            // multiplier after the base periods it stayed in since its last ejection ended.
            let stayed = if m.count > 0 {
                now.saturating_sub(m.until) / BASE.as_nanos() as u64
            } else {
                0
            };
            let count = m.count.saturating_sub(stayed) + 1;
            let length = (BASE.as_nanos() as u64 * count).min(MAX.as_nanos() as u64);
            assert_eq!(
                until - now,
                length,
                "{algorithm:?} round {r}: {id} ejected for {} s, expected {} s (multiplier {count})",
                (until - now) / 1_000_000_000,
                length / 1_000_000_000
            );
            *m = Ejections { count, until };
        }
        // Time moves only between rounds: sometimes not at all, sometimes past every ejection.
        let step = [0u64, 10, 31, 61, 200, 700][steps.below(6)];
        clock.advance(Duration::from_secs(step));
    }
}

#[test]
fn health_stays_right_under_racing_events() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let algorithms = [
        Algorithm::RoundRobin,
        Algorithm::Random,
        Algorithm::LeastRequest,
        Algorithm::Ring,
        Algorithm::Maglev,
    ];
    for (salt, algorithm) in algorithms.into_iter().enumerate() {
        stress(algorithm, salt as u64 + 1, deadline);
    }
}
