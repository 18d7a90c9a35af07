//! Attachments: what a binding derives from one membership (its ids as Python or JavaScript
//! strings) is made once per membership, shared by every answer from it, and never outlives or
//! crosses into another membership.

use liblb_core::{Algorithm, Balancer, Node, Options};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The members' ids, as a binding would convert them; `made` counts how often one was made.
#[derive(Debug, PartialEq)]
struct Ids(Vec<String>);

fn ids(nodes: &[Node], made: &AtomicUsize) -> Ids {
    made.fetch_add(1, Ordering::Relaxed);
    Ids(nodes.iter().map(|n| n.id.to_string()).collect())
}

fn balancer(algorithm: Algorithm, nodes: &[(&str, u32)]) -> Balancer {
    let options = Options {
        seed: Some(3),
        ..Options::default()
    };
    Balancer::new(algorithm, nodes.iter().copied(), options).unwrap()
}

#[test]
fn index_and_members_name_the_picked_node() {
    for algorithm in Algorithm::ALL {
        let b = balancer(algorithm, &[("a", 1), ("b", 2), ("c", 0), ("d", 5)]);
        for i in 0..50u32 {
            let key = i.to_string();
            let picked = b.pick(Some(key.as_bytes())).unwrap();
            assert_eq!(
                &*picked.members()[picked.index()].id,
                picked.id(),
                "{algorithm:?}"
            );
            let picks = b.pick_many([key.as_bytes()]).unwrap();
            let from_indices: Vec<&str> = picks
                .indices()
                .iter()
                .map(|i| &*picks.members()[*i as usize].id)
                .collect();
            assert_eq!(
                from_indices,
                picks.ids().collect::<Vec<_>>(),
                "{algorithm:?}"
            );
        }
    }
}

#[test]
fn one_attachment_per_membership_shared_by_every_answer() {
    let made = AtomicUsize::new(0);
    let b = balancer(Algorithm::RoundRobin, &[("a", 1), ("b", 1), ("c", 1)]);
    for _ in 0..10 {
        let picked = b.pick(None).unwrap();
        let attached = picked.attachment(|nodes| ids(nodes, &made)).unwrap();
        assert_eq!(attached.0[picked.index()], picked.id());
    }
    let picks = b.pick_n(7).unwrap();
    let attached = picks.attachment(|nodes| ids(nodes, &made)).unwrap();
    for (i, id) in picks.indices().iter().zip(picks.ids()) {
        assert_eq!(attached.0[*i as usize], id);
    }
    assert_eq!(
        made.load(Ordering::Relaxed),
        1,
        "made once for the membership"
    );
}

#[test]
fn every_membership_change_gets_a_fresh_attachment() {
    let made = AtomicUsize::new(0);
    let b = balancer(Algorithm::RoundRobin, &[("a", 1), ("b", 1)]);
    let attached = |b: &Balancer| {
        let picked = b.pick(None).unwrap();
        picked
            .attachment(|nodes| ids(nodes, &made))
            .unwrap()
            .0
            .clone()
    };
    assert_eq!(attached(&b), ["a", "b"]);
    b.add(("c", 1)).unwrap();
    assert_eq!(attached(&b), ["a", "b", "c"]);
    b.remove("a").unwrap();
    assert_eq!(attached(&b), ["b", "c"]);
    b.set_weight("b", 0).unwrap();
    assert_eq!(attached(&b), ["b", "c"]);
    b.update([("x", 1), ("c", 2)]).unwrap();
    assert_eq!(attached(&b), ["x", "c"]);
    assert_eq!(made.load(Ordering::Relaxed), 5);
    // A failed change publishes nothing: the attachment stays.
    assert!(b.add(("x", 1)).is_err());
    assert!(b.remove("nope").is_err());
    assert_eq!(attached(&b), ["x", "c"]);
    assert_eq!(made.load(Ordering::Relaxed), 5);
}

#[test]
fn an_answer_keeps_its_membership_and_attachment_after_a_change() {
    let made = AtomicUsize::new(0);
    let b = balancer(Algorithm::Random, &[("gone", 1)]);
    let picked = b.pick(None).unwrap();
    b.update([("new", 1)]).unwrap();
    let attached = picked.attachment(|nodes| ids(nodes, &made)).unwrap();
    assert_eq!(attached.0, ["gone"]);
    assert_eq!(picked.id(), "gone");
    let now = b.pick(None).unwrap();
    assert_eq!(
        now.attachment(|nodes| ids(nodes, &made)).unwrap().0,
        ["new"]
    );
}

#[test]
fn an_attachment_of_another_type_is_not_handed_out() {
    let b = balancer(Algorithm::Random, &[("a", 1)]);
    let picked = b.pick(None).unwrap();
    assert_eq!(picked.attachment(|nodes| nodes.len()), Some(&1usize));
    assert_eq!(picked.attachment(|_| 7u32), None);
    assert_eq!(b.pick(None).unwrap().attachment(|_| 9usize), Some(&1usize));
}

#[test]
fn threads_racing_on_a_fresh_membership_all_see_one_value() {
    let b = balancer(Algorithm::RoundRobin, &[("a", 1), ("b", 1), ("c", 1)]);
    let made = AtomicUsize::new(0);
    let seen: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let picked = b.pick(None).unwrap();
                    let attached = picked.attachment(|nodes| ids(nodes, &made)).unwrap();
                    assert_eq!(attached.0[picked.index()], picked.id());
                    attached as *const Ids as usize
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "one value kept: {seen:?}"
    );
    assert!(made.load(Ordering::Relaxed) >= 1);
}
