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
//!   `attempts(key)[0]` is the pick.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run core_model`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use liblb_core::{Algorithm, Balancer, Error, HashKind, Node, Options};
use std::collections::HashSet;

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
    let options = Options {
        seed: Some(7),
        vnodes: u32::from(input.vnodes % 8) + 1,
        hash: Some(if input.xxh3 {
            HashKind::Xxh3
        } else {
            HashKind::Sha256
        }),
        ..Options::default()
    };
    let b = Balancer::new(algorithm, Vec::<Node>::new(), options).unwrap();
    let mut model: Vec<(String, u32)> = Vec::new();
    let mut leases: Vec<liblb_core::Lease> = Vec::new();
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
                }
                (expected, b.add(Node::new(id, u32::from(w % 4))))
            }
            Op::Remove(id) => {
                let id = id.text();
                let at = model.iter().position(|(m, _)| *m == id);
                let expected = match at {
                    Some(i) => {
                        model.remove(i);
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
                    model = list;
                } else {
                    assert_eq!(b.nodes(), before);
                }
                continue;
            }
            Op::Pick(key) => {
                check_pick(&b, algorithm, &model, key.as_deref(), options);
                continue;
            }
            Op::PickMany(keys) => {
                let keys: Vec<&[u8]> = keys.iter().take(16).map(Vec::as_slice).collect();
                match b.pick_many(keys.iter().copied()) {
                    Ok(picks) => {
                        assert_eq!(picks.len(), keys.len());
                        for id in picks.ids() {
                            assert!(active(&model).contains(id), "picked inactive {id}");
                        }
                    }
                    Err(e) => assert_eq!(e, Error::NoNodes, "{e}"),
                }
                continue;
            }
            Op::PickN(n) => {
                match b.pick_n(usize::from(n % 32)) {
                    Ok(picks) => {
                        assert!(!algorithm.is_keyed());
                        assert_eq!(picks.len(), usize::from(n % 32));
                        assert!(picks.ids().all(|id| active(&model).contains(id)));
                    }
                    Err(Error::KeyRequired(_)) => assert!(algorithm.is_keyed()),
                    Err(e) => assert_eq!(e, Error::NoNodes),
                }
                continue;
            }
            Op::Acquire(key) => {
                match b.acquire(key.as_deref()) {
                    Ok(lease) => {
                        assert!(active(&model).contains(lease.id()));
                        leases.push(lease);
                    }
                    Err(Error::KeyRequired(_)) => assert!(algorithm.is_keyed() && key.is_none()),
                    Err(e) => assert_eq!(e, Error::NoNodes),
                }
                let in_flight: usize = b.stats().iter().map(|s| s.in_flight).sum();
                assert!(in_flight <= leases.len());
                continue;
            }
            Op::Finish(i, outcome) => {
                if !leases.is_empty() {
                    let lease = leases.swap_remove(usize::from(i) % leases.len());
                    let latency = core::time::Duration::from_micros(u64::from(i));
                    match outcome {
                        Some(true) => lease.finish(liblb_core::Outcome::Success(latency)),
                        Some(false) => lease.finish(liblb_core::Outcome::Failure(latency)),
                        None => drop(lease),
                    }
                }
                continue;
            }
            Op::Attempts(key, limit) => {
                let limit = usize::from(limit % 16);
                match b.attempts(key.as_deref(), limit) {
                    Ok(order) => {
                        let ids: Vec<&str> = order.ids().collect();
                        let distinct: HashSet<&str> = ids.iter().copied().collect();
                        let live = active(&model);
                        assert_eq!(distinct.len(), ids.len(), "{ids:?}");
                        assert_eq!(ids.len(), limit.min(live.len()));
                        assert!(ids.iter().all(|id| live.contains(id)));
                        if algorithm.is_keyed() && limit > 0 {
                            let picked = b.pick(key.as_deref()).unwrap();
                            assert_eq!(ids[0], picked.id());
                        }
                    }
                    Err(Error::KeyRequired(_)) => assert!(algorithm.is_keyed() && key.is_none()),
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

fn check_pick(
    b: &Balancer,
    algorithm: Algorithm,
    model: &[(String, u32)],
    key: Option<&[u8]>,
    options: Options,
) {
    let live = active(model);
    match b.pick(key) {
        Ok(picked) => {
            assert!(
                live.contains(picked.id()),
                "picked inactive {}",
                picked.id()
            );
            // Jump's buckets are the nodes in insertion order, by definition.
            if algorithm.is_keyed() && algorithm != Algorithm::Jump {
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
        Err(e) => {
            assert_eq!(e, Error::NoNodes);
            assert!(live.is_empty());
        }
    }
}
