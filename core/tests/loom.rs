//! Model checks of the lock-free parts with loom (every interleaving, every allowed memory
//! order). Run with `RUSTFLAGS="--cfg loom" cargo test -p liblb-core --test loom --release`;
//! under `cfg(loom)` the core's counters are loom's atomics (see `core/src/sync.rs`).
//!
//! A lost update — two picks reading the same position, e.g. if the counter were a load
//! followed by a store — would hand two threads the same node and is caught here.
#![cfg(loom)]

use liblb_core::{Algorithm, Node, Options, State, Table};
use loom::sync::Arc;
use loom::thread;

fn table(algorithm: Algorithm, nodes: &[(&str, u32)]) -> Table {
    let nodes: Vec<Node> = nodes.iter().map(|(id, w)| Node::new(*id, *w)).collect();
    Table::build(algorithm, &Options::default(), &nodes).unwrap()
}

/// Two threads each take one round-robin position from a fresh counter: together they must
/// cover nodes 0 and 1 exactly once, then the main thread gets node 2.
fn no_lost_update(algorithm: Algorithm, nodes: &'static [(&'static str, u32)], expect: [usize; 3]) {
    loom::model(move || {
        let table = Arc::new(table(algorithm, nodes));
        let state = Arc::new(State::new(0));
        let spawn = || {
            let (table, state) = (Arc::clone(&table), Arc::clone(&state));
            thread::spawn(move || table.pick(None, &state, 0).unwrap())
        };
        let (t1, t2) = (spawn(), spawn());
        let mut got = [t1.join().unwrap(), t2.join().unwrap()];
        got.sort_unstable();
        assert_eq!(got, [expect[0], expect[1]]);
        assert_eq!(table.pick(None, &state, 0).unwrap(), expect[2]);
    });
}

#[test]
fn round_robin_counter_loses_no_update() {
    no_lost_update(
        Algorithm::RoundRobin,
        &[("a", 1), ("b", 1), ("c", 1)],
        [0, 1, 2],
    );
}

#[test]
fn smooth_wrr_schedule_loses_no_update() {
    // nginx order for 2,1: a b a — two concurrent picks take positions 0 and 1.
    no_lost_update(
        Algorithm::WeightedRoundRobin,
        &[("a", 2), ("b", 1)],
        [0, 1, 0],
    );
}

/// Two threads draw from one seeded generator at once: both race to claim stream 0 (the seed's
/// own sequence); exactly one wins and draws the seed's first two numbers in order, the other
/// draws from a stream of its own. A claim that let both in (a load then a store instead of a
/// compare-exchange) would interleave their draws on stream 0, and no thread would see both.
#[test]
fn first_thread_claims_the_seed_stream() {
    loom::model(|| {
        let nodes: Vec<Node> = (0..1000).map(|i| Node::new(format!("n{i}"), 1)).collect();
        let table = Arc::new(Table::build(Algorithm::Random, &Options::default(), &nodes).unwrap());
        let state = Arc::new(State::new(7));
        let spawn = || {
            let (table, state) = (Arc::clone(&table), Arc::clone(&state));
            thread::spawn(move || {
                let first = table.pick(None, &state, 0).unwrap();
                [first, table.pick(None, &state, 0).unwrap()]
            })
        };
        let (t1, t2) = (spawn(), spawn());
        let got = [t1.join().unwrap(), t2.join().unwrap()];
        // The seed's first two draws, single-threaded.
        let single = State::new(7);
        let seed = [
            table.pick(None, &single, 0).unwrap(),
            table.pick(None, &single, 0).unwrap(),
        ];
        assert_eq!(
            got.iter().filter(|&&g| g == seed).count(),
            1,
            "{got:?} vs {seed:?}"
        );
    });
}

/// Two writers add different nodes while a reader picks: neither change is lost (the writer
/// mutex serialises load-modify-store) and the reader sees a whole published set.
#[test]
fn concurrent_writers_lose_no_change() {
    use liblb_core::Balancer;
    loom::model(|| {
        let options = Options {
            seed: Some(1),
            ..Options::default()
        };
        let b = Arc::new(Balancer::new(Algorithm::RoundRobin, ["a"], options).unwrap());
        let add = |id: &'static str| {
            let b = Arc::clone(&b);
            thread::spawn(move || b.add(Node::new(id, 1)).unwrap())
        };
        let (t1, t2) = (add("x"), add("y"));
        let seen = b.pick(None).unwrap().id().to_string();
        assert!(["a", "x", "y"].contains(&seen.as_str()));
        t1.join().unwrap();
        t2.join().unwrap();
        let mut ids: Vec<String> = b.nodes().into_iter().map(|n| n.id).collect();
        ids.sort();
        assert_eq!(ids, ["a", "x", "y"]);
    });
}

/// Two requests start and end on one node concurrently, one with an outcome: in-flight returns
/// to 0 and the outcome is counted once (a lost update of the counters would leave a request
/// in flight forever, and least_request would shun the node).
#[test]
fn load_counters_lose_no_update() {
    use core::time::Duration;
    use liblb_core::{Load, Outcome};
    loom::model(|| {
        let load = Arc::new(Load::default());
        let decay = Duration::from_secs(10);
        let request = |outcome: Option<Outcome>| {
            let load = Arc::clone(&load);
            thread::spawn(move || {
                load.start();
                load.end(outcome, 5_000_000, decay);
            })
        };
        let ms = Duration::from_millis;
        let (t1, t2) = (request(None), request(Some(Outcome::Failure(ms(3)))));
        load.record(Outcome::Success(ms(7)), 6_000_000, decay);
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(load.in_flight(), 0);
        assert_eq!((load.requests(), load.failures()), (2, 1));
        // The estimate is the peak (7 ms) or a blend of 7 and 3 ms: never lost, never garbage.
        let latency = load.latency().unwrap();
        assert!(latency >= ms(3) && latency <= ms(7), "{latency:?}");
    });
}
