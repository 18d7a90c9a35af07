//! Random sequences of membership changes and picks on a `liblb_core::Balancer`, checked
//! against a simple model (a `Vec` of id and weight in insertion order):
//!
//! - every membership call succeeds or fails exactly as the model predicts (duplicate, unknown
//!   or invalid ids), and a failed call leaves `nodes()` unchanged;
//! - every pick returns an active node, or `NoNodes` / `KeyRequired` exactly when the model
//!   says so; batches agree with single picks on which nodes are possible;
//! - `attempts` returns `min(limit, active)` distinct active nodes;
//! - keyed algorithms (but jump, ordered by definition) answer the same as a balancer built
//!   from scratch with the model's nodes in reverse order (answers depend on the set, never on
//!   history or insertion order), and
//!   `attempts(key)[0]` is the pick;
//! - health (issue 19): failures reported or finished, `mark_down` / `mark_up` and steps of a
//!   manual clock, against a model of Envoy's rules as liblb documents them (a streak of
//!   `consecutive_failures` ejects for `base × multiplier`, capped, within
//!   `max_ejection_percent` of the current active nodes, the multiplier decaying by one per base
//!   period spent in; outcomes of a node that is out do not count). With `panic_threshold` 0 a
//!   pick returns a usable node, or `NoUsableNodes` exactly when none is; `stats()` shows each
//!   node's status as the model has it.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run core_model`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use liblb_core::{
    Algorithm, Balancer, Clock, Error, HashKind, ManualClock, Node, Options, Outcome, Status,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Ids from a small alphabet of digit-extended names, so point keys collide on the ring
/// (`s1`/`s11`), plus arbitrary text (empty, NUL).
#[derive(Arbitrary, Debug, Clone)]
enum Id {
    Known(u8),
    Raw(String),
}

impl Id {
    fn text(&self) -> String {
        match self {
            Id::Known(i) => ["s1", "s11", "s111", "s2", "10.0.0.1", "10.0.0.11", "b", "c"]
                [(*i % 8) as usize]
                .to_string(),
            Id::Raw(s) => s.chars().take(12).collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Add(Id, u8),
    Remove(Id),
    SetWeight(Id, u8),
    Update(Vec<(Id, u8)>),
    Pick(Option<Vec<u8>>),
    PickMany(Vec<Vec<u8>>),
    PickN(u8),
    Attempts(Option<Vec<u8>>, u8),
    Acquire(Option<Vec<u8>>),
    Finish(u8, Option<bool>),
    Report(Id, bool),
    MarkDown(Id),
    MarkUp(Id),
    /// Seconds to move the clock on.
    Advance(u8),
}

const FAILURES: u32 = 2;
const PERCENT: usize = 50;
const BASE: u64 = 10_000_000_000;
const MAX: u64 = 40_000_000_000;

/// The model of one node's health.
#[derive(Debug, Clone, Copy, Default)]
struct Health {
    down: bool,
    streak: u32,
    ejections: u64,
    /// When the last ejection ends (ns); meaningful while `ejections > 0`.
    until: u64,
    /// Bumped when the id leaves the membership: leases from before count on the old node.
    generation: u64,
}

impl Health {
    fn ejected(&self, now: u64) -> bool {
        self.ejections > 0 && self.until > now
    }
    fn usable(&self, now: u64) -> bool {
        !self.down && !self.ejected(now)
    }
}

/// The health model: per id, with the clock.
struct Model {
    now: u64,
    health: HashMap<String, Health>,
    generations: u64,
}

impl Model {
    /// A node joined (or re-joined): fresh health.
    fn join(&mut self, id: &str) {
        self.generations += 1;
        let generation = self.generations;
        self.health.insert(
            id.to_string(),
            Health {
                generation,
                ..Health::default()
            },
        );
    }

    fn leave(&mut self, id: &str) {
        self.health.remove(id);
    }

    /// An outcome for `id` (at `generation`, if from a lease) with the model's membership.
    fn outcome(&mut self, nodes: &[(String, u32)], id: &str, generation: Option<u64>, ok: bool) {
        let now = self.now;
        let active: Vec<&str> = nodes
            .iter()
            .filter(|(_, w)| *w > 0)
            .map(|(i, _)| i.as_str())
            .collect();
        // A node that is down reads as down, not ejected: it does not count towards the cap.
        let ejected = (active.iter())
            .filter(|i| !self.health[**i].down && self.health[**i].ejected(now))
            .count();
        let member_active = active.contains(&id);
        let Some(h) = self.health.get_mut(id) else {
            return;
        };
        if generation.is_some_and(|g| g != h.generation) || !h.usable(now) {
            return;
        }
        if ok {
            h.streak = 0;
            return;
        }
        h.streak += 1;
        if h.streak < FAILURES || !member_active {
            return;
        }
        let cap = (active.len() * PERCENT / 100).max(1);
        if ejected >= cap {
            return;
        }
        let mut n = h.ejections;
        if n > 0 {
            n = n.saturating_sub((now - h.until) / BASE);
        }
        let n = n + 1;
        h.until = now + (BASE * n).min(MAX);
        h.ejections = n;
        h.streak = 0;
    }

    fn usable(&self, nodes: &[(String, u32)]) -> HashSet<String> {
        (nodes.iter())
            .filter(|(id, w)| *w > 0 && self.health[id].usable(self.now))
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn all_usable(&self) -> bool {
        self.health.values().all(|h| h.usable(self.now))
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    algorithm: u8,
    vnodes: u8,
    xxh3: bool,
    ops: Vec<Op>,
}

/// What the model says a membership change should do.
fn check_id(id: &str) -> Result<(), Error> {
    liblb_core::validate_id(id)
}

fuzz_target!(|input: Input| {
    let algorithm = Algorithm::ALL[input.algorithm as usize % Algorithm::ALL.len()];
    let mut options = Options {
        seed: Some(7),
        vnodes: u32::from(input.vnodes % 8) + 1,
        hash: Some(if input.xxh3 {
            HashKind::Xxh3
        } else {
            HashKind::Sha256
        }),
        ..Options::default()
    };
    options.consecutive_failures = FAILURES;
    // The model knows consecutive-failure ejection; the interval detectors are tested in
    // core/tests/outliers.rs.
    options.enforcing_success_rate = 0;
    options.max_ejection_percent = PERCENT as u32;
    options.base_ejection_time = Duration::from_nanos(BASE);
    options.max_ejection_time = Duration::from_nanos(MAX);
    options.panic_threshold = 0;
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1000)));
    let b = Balancer::with_clock(algorithm, Vec::<Node>::new(), options, clock.clone()).unwrap();
    let mut model: Vec<(String, u32)> = Vec::new();
    let mut health = Model {
        now: clock.now_ns(),
        health: HashMap::new(),
        generations: 0,
    };
    let mut leases: Vec<(liblb_core::Lease, u64)> = Vec::new();
    for op in input.ops.into_iter().take(64) {
        let before = b.nodes();
        let (expected, result) = match op {
            Op::Add(id, w) => {
                let id = id.text();
                let expected = check_id(&id).and_then(|()| {
                    if model.iter().any(|(m, _)| *m == id) {
                        Err(Error::DuplicateNode(id.clone()))
                    } else {
                        Ok(())
                    }
                });
                if expected.is_ok() {
                    model.push((id.clone(), u32::from(w % 4)));
                    health.join(&id);
                }
                (expected, b.add(Node::new(id, u32::from(w % 4))))
            }
            Op::Remove(id) => {
                let id = id.text();
                let at = model.iter().position(|(m, _)| *m == id);
                let expected = match at {
                    Some(i) => {
                        model.remove(i);
                        health.leave(&id);
                        Ok(())
                    }
                    None => Err(Error::UnknownNode(id.clone())),
                };
                (expected, b.remove(&id))
            }
            Op::SetWeight(id, w) => {
                let id = id.text();
                let expected = match model.iter_mut().find(|(m, _)| *m == id) {
                    Some(entry) => {
                        entry.1 = u32::from(w % 4);
                        Ok(())
                    }
                    None => Err(Error::UnknownNode(id.clone())),
                };
                (expected, b.set_weight(&id, u32::from(w % 4)))
            }
            Op::Update(list) => {
                let list: Vec<(String, u32)> = list
                    .iter()
                    .take(12)
                    .map(|(id, w)| (id.text(), u32::from(w % 4)))
                    .collect();
                let mut seen = HashSet::new();
                let expected = list.iter().try_for_each(|(id, _)| {
                    check_id(id)?;
                    if seen.insert(id.clone()) {
                        Ok(())
                    } else {
                        Err(Error::DuplicateNode(id.clone()))
                    }
                });
                let nodes: Vec<Node> = list
                    .iter()
                    .map(|(id, w)| Node::new(id.as_str(), *w))
                    .collect();
                let result = b.update(nodes);
                // Which duplicate or bad id is named first is the core's choice: compare kinds.
                assert_eq!(
                    expected.is_ok(),
                    result.is_ok(),
                    "{expected:?} vs {result:?}"
                );
                if expected.is_ok() {
                    for (id, _) in &model {
                        if !list.iter().any(|(i, _)| i == id) {
                            health.leave(id);
                        }
                    }
                    for (id, _) in &list {
                        if !health.health.contains_key(id) {
                            health.join(id);
                        }
                    }
                    model = list;
                } else {
                    assert_eq!(b.nodes(), before);
                }
                continue;
            }
            Op::Pick(key) => {
                check_pick(&b, algorithm, &model, &health, key.as_deref(), options);
                continue;
            }
            Op::Report(id, ok) => {
                let id = id.text();
                let known = model.iter().any(|(m, _)| *m == id);
                let outcome = if ok {
                    Outcome::Success(Duration::ZERO)
                } else {
                    Outcome::Failure(Duration::ZERO)
                };
                match b.report(&id, outcome) {
                    Ok(()) => {
                        assert!(known);
                        health.outcome(&model, &id, None, ok);
                    }
                    Err(e) => {
                        assert!(!known, "{e}");
                        assert!(
                            matches!(
                                e,
                                Error::UnknownNode(_) | Error::EmptyId | Error::IdContainsNul(_)
                            ),
                            "{e}"
                        );
                    }
                }
                check_health(&b, &model, &health);
                continue;
            }
            Op::MarkDown(id) => {
                let id = id.text();
                match b.mark_down(&id) {
                    Ok(()) => health.health.get_mut(&id).unwrap().down = true,
                    Err(e) => assert!(!health.health.contains_key(&id), "{e}"),
                }
                check_health(&b, &model, &health);
                continue;
            }
            Op::MarkUp(id) => {
                let id = id.text();
                match b.mark_up(&id) {
                    Ok(()) => health.health.get_mut(&id).unwrap().down = false,
                    Err(e) => assert!(!health.health.contains_key(&id), "{e}"),
                }
                check_health(&b, &model, &health);
                continue;
            }
            Op::Advance(seconds) => {
                let by = Duration::from_secs(u64::from(seconds % 64));
                clock.advance(by);
                health.now += by.as_nanos() as u64;
                check_health(&b, &model, &health);
                continue;
            }
            Op::PickMany(keys) => {
                let keys: Vec<&[u8]> = keys.iter().take(16).map(Vec::as_slice).collect();
                let usable = health.usable(&model);
                match b.pick_many(keys.iter().copied()) {
                    Ok(picks) => {
                        assert_eq!(picks.len(), keys.len());
                        for id in picks.ids() {
                            assert!(usable.contains(id), "picked unusable {id}");
                        }
                    }
                    Err(Error::NoUsableNodes) => {
                        assert!(usable.is_empty() && !active(&model).is_empty())
                    }
                    Err(e) => assert_eq!(e, Error::NoNodes, "{e}"),
                }
                continue;
            }
            Op::PickN(n) => {
                let usable = health.usable(&model);
                match b.pick_n(usize::from(n % 32)) {
                    Ok(picks) => {
                        assert!(!algorithm.is_keyed());
                        assert_eq!(picks.len(), usize::from(n % 32));
                        assert!(picks.ids().all(|id| usable.contains(id)));
                    }
                    Err(Error::KeyRequired(_)) => assert!(algorithm.is_keyed()),
                    Err(Error::NoUsableNodes) => assert!(usable.is_empty() && n % 32 > 0),
                    Err(e) => assert_eq!(e, Error::NoNodes),
                }
                continue;
            }
            Op::Acquire(key) => {
                let usable = health.usable(&model);
                match b.acquire(key.as_deref()) {
                    Ok(lease) => {
                        assert!(
                            usable.contains(lease.id()),
                            "acquired unusable {}",
                            lease.id()
                        );
                        let generation = health.health[lease.id()].generation;
                        leases.push((lease, generation));
                    }
                    Err(Error::KeyRequired(_)) => assert!(algorithm.is_keyed() && key.is_none()),
                    Err(Error::NoUsableNodes) => assert!(usable.is_empty()),
                    Err(e) => assert_eq!(e, Error::NoNodes),
                }
                let in_flight: usize = b.stats().iter().map(|s| s.in_flight).sum();
                assert!(in_flight <= leases.len());
                continue;
            }
            Op::Finish(i, outcome) => {
                if !leases.is_empty() {
                    let (lease, generation) = leases.swap_remove(usize::from(i) % leases.len());
                    let latency = core::time::Duration::from_micros(u64::from(i));
                    let id = lease.id().to_string();
                    match outcome {
                        Some(true) => lease.finish(Outcome::Success(latency)),
                        Some(false) => lease.finish(Outcome::Failure(latency)),
                        None => drop(lease),
                    }
                    if let Some(ok) = outcome {
                        health.outcome(&model, &id, Some(generation), ok);
                    }
                    check_health(&b, &model, &health);
                }
                continue;
            }
            Op::Attempts(key, limit) => {
                let limit = usize::from(limit % 16);
                let usable = health.usable(&model);
                match b.attempts(key.as_deref(), limit) {
                    Ok(order) => {
                        let ids: Vec<&str> = order.ids().collect();
                        let distinct: HashSet<&str> = ids.iter().copied().collect();
                        assert_eq!(distinct.len(), ids.len(), "{ids:?}");
                        // Panic is off: unusable nodes are left out.
                        assert_eq!(ids.len(), limit.min(usable.len()));
                        assert!(ids.iter().all(|id| usable.contains(*id)));
                        if algorithm.is_keyed() && limit > 0 {
                            let picked = b.pick(key.as_deref()).unwrap();
                            assert_eq!(ids[0], picked.id());
                        }
                    }
                    Err(Error::KeyRequired(_)) => assert!(algorithm.is_keyed() && key.is_none()),
                    Err(Error::NoUsableNodes) => {
                        assert!(usable.is_empty() && !active(&model).is_empty() && limit > 0);
                    }
                    Err(e) => {
                        assert_eq!(e, Error::NoNodes);
                        assert!(active(&model).is_empty());
                    }
                }
                continue;
            }
        };
        match (&expected, &result) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err(r)) => {
                assert_eq!(e, r);
                assert_eq!(b.nodes(), before, "a failed change altered the balancer");
            }
            _ => panic!("model says {expected:?}, balancer says {result:?}"),
        }
        let listed: Vec<(String, u32)> = b.nodes().into_iter().map(|n| (n.id, n.weight)).collect();
        assert_eq!(listed, model);
    }
    // Every lease ends (dropped = cancelled), whatever membership changes happened meanwhile.
    drop(leases);
    check_health(&b, &model, &health);
    assert!(b.stats().iter().all(|s| s.in_flight == 0));
});

/// Ids of the model's active nodes.
fn active(model: &[(String, u32)]) -> HashSet<&str> {
    model
        .iter()
        .filter(|(_, w)| *w > 0)
        .map(|(id, _)| id.as_str())
        .collect()
}

/// `stats()` shows every node's status as the model has it.
fn check_health(b: &Balancer, model: &[(String, u32)], health: &Model) {
    let stats = b.stats();
    assert_eq!(stats.len(), model.len());
    for s in stats {
        let h = health.health[&s.id];
        let expected = if h.down {
            Status::Down
        } else if h.ejected(health.now) {
            Status::Ejected { until_ns: h.until }
        } else {
            Status::Healthy
        };
        assert_eq!(s.status, expected, "{}: {h:?} at {}", s.id, health.now);
    }
}

fn check_pick(
    b: &Balancer,
    algorithm: Algorithm,
    model: &[(String, u32)],
    health: &Model,
    key: Option<&[u8]>,
    options: Options,
) {
    let live = active(model);
    let usable = health.usable(model);
    match b.pick(key) {
        Ok(picked) => {
            assert!(
                usable.contains(picked.id()),
                "picked unusable {}",
                picked.id()
            );
            // Jump's buckets are the nodes in insertion order, by definition. (With a node
            // out, its keys go elsewhere: compared only while every node is usable.)
            if algorithm.is_keyed() && algorithm != Algorithm::Jump && health.all_usable() {
                // The same set built from scratch, in reverse order, answers the same.
                let fresh: Vec<Node> = model
                    .iter()
                    .rev()
                    .map(|(id, w)| Node::new(id.as_str(), *w))
                    .collect();
                let fresh = Balancer::new(algorithm, fresh, options).unwrap();
                assert_eq!(fresh.pick(key).unwrap().id(), picked.id());
            }
        }
        Err(Error::KeyRequired(_)) => assert!(algorithm.is_keyed() && key.is_none()),
        Err(Error::NoUsableNodes) => assert!(usable.is_empty() && !live.is_empty()),
        Err(e) => {
            assert_eq!(e, Error::NoNodes);
            assert!(live.is_empty());
        }
    }
}
