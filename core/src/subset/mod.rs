//! Subsetting: which backends one client of a large fleet should talk to at all.
//!
//! At fleet scale every client cannot hold a connection to every backend (10,000 clients ×
//! 1,000 backends is ten million connections). Subsetting gives each client a small subset,
//! chosen so that every backend gets about the same number of clients and a scale event moves
//! few connections. The balancer's algorithm then runs on the subset only (DESIGN.md, "The
//! layers around the pick": `membership --subset (client identity)--> ...`).
//!
//! Four algorithms, each in a module of its own that cites its source:
//!
//! | [`SubsetAlgorithm`] | identity used | source |
//! |---|---|---|
//! | `Deterministic` | `client_index`, `seed` | Google SRE book, ch. 20 (`Subset(backends, client_id, subset_size)`) |
//! | `Random` | `seed` (one per client) | gRPC gRFC A68 `random_subsetting` |
//! | `Ringsteady` | `client_index` | Ward, Wankadia & Guliani, "Reinventing Backend Subsetting at Google", ACM Queue 2022 |
//! | `Aperture` | `client_index`, `client_count` | Finagle's deterministic aperture (`Ring`, `ProcessCoordinate`) |
//!
//! The functions here are pure: `(spec, ids) -> subset`, no state, no allocation beyond the
//! answer and one working vector, O(n log n) in the number of backends (see each module).
//!
//! ## The contract, for every algorithm
//!
//! - `size` 0 is an error ([`Error::InvalidOptionValue`] naming `subset_size`), as in A68
//!   ("must be greater than 0"); `client_count` 0 is an error, and so is
//!   `client_index >= client_count` (naming `client_index`). The algorithms that do not use an
//!   input still validate it, so a configuration is valid or not whatever the algorithm.
//! - An id that is empty ([`Error::EmptyId`]) or appears twice ([`Error::DuplicateNode`]) is an
//!   error: ids are node ids.
//! - No backends: an empty subset. `size >= ids.len()`: the whole fleet, in id order (byte
//!   order of the ids), for every algorithm (A68: "If the number of endpoints is less than
//!   `subset_size` always use all available endpoints"; aperture: every weight 1).
//! - The answer lists indices into `ids`, each once, in the algorithm's own order (named in
//!   each function's docs). `Random`, `Deterministic` and `Aperture` do not depend on the
//!   order of `ids`: they rank backends by id (or by the hash of the id). `Ringsteady` is the
//!   exception, by design: its low-discrepancy positions are a function of each backend's
//!   *task index*, which is its position in `ids` (as jump hash uses insertion order); list
//!   backends in task-index order (a StatefulSet's ordinals, a Borg job's task numbers).
//! - `subset_weighted` adds a weight in (0, 1] per member: Finagle's fraction of an edge
//!   backend covered by the client's aperture, computed in Finagle's own floating-point steps
//!   (so a whole backend may read 0.9999999999999998 or 1.0000000000000004, and a far edge
//!   the aperture only grazes may read 2.2e-16, as in Finagle); 1.0 for every other algorithm.

pub mod aperture;
pub mod deterministic;
pub mod random;
pub mod ringsteady;

use crate::{Error, Result};
use alloc::string::ToString;
use alloc::vec::Vec;

/// A subsetting algorithm (see the module docs for what each one reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubsetAlgorithm {
    /// The SRE book's deterministic subsetting: rounds of shuffled backends, seeded by round.
    Deterministic,
    /// gRPC A68 `random_subsetting`: the `size` backends of lowest XXH64(id, seed).
    Random,
    /// Ringsteady: van der Corput positions for backends and clients on one ring.
    Ringsteady,
    /// Finagle's deterministic aperture: a fractional slice of a ring of backends.
    Aperture,
}

impl SubsetAlgorithm {
    /// Every algorithm, in the order of [`SubsetAlgorithm::NAMES`].
    pub const ALL: &'static [SubsetAlgorithm] = &[
        SubsetAlgorithm::Deterministic,
        SubsetAlgorithm::Random,
        SubsetAlgorithm::Ringsteady,
        SubsetAlgorithm::Aperture,
    ];

    /// The option values naming the algorithms (the `subset` option).
    pub const NAMES: &'static [&'static str] =
        &["deterministic", "random", "ringsteady", "aperture"];

    /// The algorithm's option value.
    pub fn name(self) -> &'static str {
        match self {
            SubsetAlgorithm::Deterministic => "deterministic",
            SubsetAlgorithm::Random => "random",
            SubsetAlgorithm::Ringsteady => "ringsteady",
            SubsetAlgorithm::Aperture => "aperture",
        }
    }

    /// The algorithm an option value names; anything else is an
    /// [`Error::InvalidOptionValue`] for `subset` listing the valid names.
    pub fn from_name(name: &str) -> Result<SubsetAlgorithm> {
        SubsetAlgorithm::ALL
            .iter()
            .copied()
            .find(|a| a.name() == name)
            .ok_or_else(|| Error::InvalidOptionValue {
                option: "subset",
                value: name.to_string(),
                expected: "one of deterministic, random, ringsteady, aperture",
            })
    }
}

/// Who the client is and how big its subset should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubsetSpec {
    /// Which algorithm.
    pub algorithm: SubsetAlgorithm,
    /// Backends per client (`subset_size`; Finagle's minimum aperture, 12 by default there).
    /// At least 1.
    pub size: usize,
    /// This client's index among its peers, `0..client_count` (`Deterministic`'s `client_id`,
    /// `Ringsteady`'s frontend index, `Aperture`'s instance id).
    pub client_index: u64,
    /// How many clients share the backends (`Aperture`'s `totalInstances`). At least 1.
    pub client_count: u64,
    /// `Random`: this client's hash seed (A68: a random integer chosen once per client);
    /// `Deterministic`: mixed into every round's shuffle seed (the same for the whole fleet).
    pub seed: u64,
}

impl SubsetSpec {
    /// A spec for `algorithm` with `size`, client 0 of 1, seed 0.
    pub fn new(algorithm: SubsetAlgorithm, size: usize) -> SubsetSpec {
        SubsetSpec {
            algorithm,
            size,
            client_index: 0,
            client_count: 1,
            seed: 0,
        }
    }

    /// Checks `size`, `client_count` and `client_index` (see the module docs).
    pub fn validate(&self) -> Result<()> {
        if self.size == 0 {
            return Err(Error::InvalidOptionValue {
                option: "subset_size",
                value: "0".to_string(),
                expected: "an integer >= 1",
            });
        }
        if self.client_count == 0 {
            return Err(Error::InvalidOptionValue {
                option: "client_count",
                value: "0".to_string(),
                expected: "an integer >= 1",
            });
        }
        if self.client_index >= self.client_count {
            return Err(Error::InvalidOptionValue {
                option: "client_index",
                value: self.client_index.to_string(),
                expected: "an integer below client_count",
            });
        }
        Ok(())
    }
}

/// The client's subset: indices into `ids`, each once, in the algorithm's order (see the
/// module docs for the contract and each module for the order).
pub fn subset(spec: &SubsetSpec, ids: &[&str]) -> Result<Vec<usize>> {
    Ok(subset_weighted(spec, ids)?
        .into_iter()
        .map(|(index, _)| index)
        .collect())
}

/// [`subset`] with each member's weight in (0, 1] (up to rounding, see the module docs): the
/// fraction of the backend inside the client's aperture for `Aperture` (Finagle's
/// `Ring.weight`), 1.0 for the other algorithms.
pub fn subset_weighted(spec: &SubsetSpec, ids: &[&str]) -> Result<Vec<(usize, f64)>> {
    spec.validate()?;
    Backends::new(ids)?.subset_weighted(spec)
}

/// A membership checked and ordered once, for many clients' subsets of it (a fleet simulation,
/// a controller assigning subsets): [`subset`] sorts the ids and builds Ringsteady's ring on
/// every call, O(n log n); each call here does only its algorithm's own work.
#[derive(Debug, Clone)]
pub struct Backends<'a> {
    ids: &'a [&'a str],
    /// The indices of `ids` in byte order of the ids.
    sorted: Vec<usize>,
    /// Ringsteady's ring: the task indices by van der Corput position.
    ring: Vec<usize>,
}

impl<'a> Backends<'a> {
    /// Checks `ids` (none empty, none twice) and orders them.
    pub fn new(ids: &'a [&'a str]) -> Result<Backends<'a>> {
        Ok(Backends {
            ids,
            sorted: sorted_ids(ids)?,
            ring: ringsteady::van_der_corput_order(ids.len()),
        })
    }

    /// [`subset`] of these backends.
    pub fn subset(&self, spec: &SubsetSpec) -> Result<Vec<usize>> {
        Ok(self
            .subset_weighted(spec)?
            .into_iter()
            .map(|(index, _)| index)
            .collect())
    }

    /// [`subset_weighted`] of these backends.
    pub fn subset_weighted(&self, spec: &SubsetSpec) -> Result<Vec<(usize, f64)>> {
        spec.validate()?;
        let (ids, sorted) = (self.ids, &self.sorted);
        if spec.size >= ids.len() {
            return Ok(sorted.iter().map(|i| (*i, 1.0)).collect());
        }
        let unit = |members: Vec<usize>| members.into_iter().map(|i| (i, 1.0)).collect();
        Ok(match spec.algorithm {
            SubsetAlgorithm::Random => unit(random::subset(ids, spec.size, spec.seed)),
            SubsetAlgorithm::Deterministic => unit(deterministic::subset(
                sorted,
                spec.size,
                spec.client_index,
                spec.seed,
            )),
            SubsetAlgorithm::Ringsteady => unit(ringsteady::subset_of(
                &self.ring,
                spec.size,
                spec.client_index,
            )),
            SubsetAlgorithm::Aperture => {
                aperture::window(sorted, spec.size, spec.client_index, spec.client_count)
            }
        })
    }
}

/// The indices of `ids` in byte order of the ids, after checking that none is empty and none
/// repeats (a repeat sorts next to its twin).
fn sorted_ids(ids: &[&str]) -> Result<Vec<usize>> {
    if ids.iter().any(|id| id.is_empty()) {
        return Err(Error::EmptyId);
    }
    let mut sorted: Vec<usize> = (0..ids.len()).collect();
    sorted.sort_unstable_by(|&a, &b| ids[a].as_bytes().cmp(ids[b].as_bytes()));
    if let Some(w) = sorted.windows(2).find(|w| ids[w[0]] == ids[w[1]]) {
        return Err(Error::DuplicateNode(ids[w[0]].to_string()));
    }
    Ok(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("backend-{i}")).collect()
    }

    /// A prepared membership answers as the one-call function does, for every algorithm,
    /// size and client, and refuses the same bad ids.
    #[test]
    #[cfg_attr(miri, ignore)] // 4 algorithms x 5 sizes x 10 clients over 60 backends.
    fn prepared_backends_answer_as_the_one_call_function() {
        let owned = names(60);
        let ids: Vec<&str> = owned.iter().map(String::as_str).collect();
        let backends = Backends::new(&ids).unwrap();
        for algorithm in SubsetAlgorithm::ALL.iter().copied() {
            for size in [1, 7, 30, 59, 60] {
                for client_index in 0..10 {
                    let spec = SubsetSpec {
                        algorithm,
                        size,
                        client_index,
                        client_count: 10,
                        seed: 5 + client_index,
                    };
                    assert_eq!(
                        backends.subset_weighted(&spec),
                        subset_weighted(&spec, &ids),
                        "{algorithm:?} {size} {client_index}"
                    );
                }
            }
        }
        assert_eq!(Backends::new(&["a", ""]).err(), Some(Error::EmptyId));
        assert_eq!(
            Backends::new(&["a", "b", "a"]).err(),
            Some(Error::DuplicateNode("a".to_string()))
        );
        let bad = SubsetSpec::new(SubsetAlgorithm::Random, 0);
        assert!(backends.subset(&bad).is_err());
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for (a, name) in SubsetAlgorithm::ALL.iter().zip(SubsetAlgorithm::NAMES) {
            assert_eq!(a.name(), *name);
            assert_eq!(SubsetAlgorithm::from_name(name), Ok(*a));
        }
        let err = SubsetAlgorithm::from_name("aperture2").unwrap_err();
        assert!(format!("{err}").contains("deterministic, random, ringsteady, aperture"));
    }

    #[test]
    fn bad_specs_are_refused_naming_the_option() {
        let ids = ["a", "b", "c"];
        for algorithm in SubsetAlgorithm::ALL.iter().copied() {
            let ok = SubsetSpec::new(algorithm, 2);
            assert!(subset(&ok, &ids).is_ok());
            let zero = SubsetSpec { size: 0, ..ok };
            assert!(matches!(
                subset(&zero, &ids),
                Err(Error::InvalidOptionValue {
                    option: "subset_size",
                    ..
                })
            ));
            let nobody = SubsetSpec {
                client_count: 0,
                ..ok
            };
            assert!(matches!(
                subset(&nobody, &ids),
                Err(Error::InvalidOptionValue {
                    option: "client_count",
                    ..
                })
            ));
            let outside = SubsetSpec {
                client_index: 5,
                client_count: 5,
                ..ok
            };
            assert!(matches!(
                subset(&outside, &ids),
                Err(Error::InvalidOptionValue {
                    option: "client_index",
                    ..
                })
            ));
            assert_eq!(subset(&ok, &["a", "", "c"]), Err(Error::EmptyId));
            assert_eq!(
                subset(&ok, &["a", "b", "a"]),
                Err(Error::DuplicateNode("a".to_string()))
            );
        }
    }

    #[test]
    fn no_backends_give_an_empty_subset_and_a_small_fleet_all_of_it_in_id_order() {
        let ids = ["c", "a", "b"];
        for algorithm in SubsetAlgorithm::ALL.iter().copied() {
            let spec = SubsetSpec::new(algorithm, 3);
            assert_eq!(subset(&spec, &[]), Ok(Vec::new()));
            assert_eq!(subset(&spec, &ids), Ok(alloc::vec![1, 2, 0]));
            let big = SubsetSpec { size: 10, ..spec };
            assert_eq!(
                subset_weighted(&big, &ids),
                Ok(alloc::vec![(1, 1.0), (2, 1.0), (0, 1.0)])
            );
        }
    }

    #[test]
    fn members_are_distinct_in_range_and_as_many_as_asked() {
        let owned = names(37);
        let ids: Vec<&str> = owned.iter().map(String::as_str).collect();
        for algorithm in SubsetAlgorithm::ALL.iter().copied() {
            for client_index in 0..if cfg!(miri) { 3 } else { 20 } {
                let spec = SubsetSpec {
                    client_index,
                    client_count: 20,
                    seed: client_index,
                    ..SubsetSpec::new(algorithm, 5)
                };
                let got = subset(&spec, &ids).unwrap();
                let mut seen = got.clone();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), got.len(), "{algorithm:?} repeats a member");
                assert!(got.iter().all(|&i| i < ids.len()));
                // Aperture covers at least `size` (its window may reach past it); the
                // deterministic split may make a subset one larger (37 = 7 × 5 + 2).
                match algorithm {
                    SubsetAlgorithm::Aperture => assert!(got.len() >= 5),
                    SubsetAlgorithm::Deterministic => assert!((5..=6).contains(&got.len())),
                    _ => assert_eq!(got.len(), 5, "{algorithm:?}"),
                }
            }
        }
    }

    #[test]
    fn order_independent_algorithms_ignore_the_order_of_ids() {
        let owned = names(50);
        let ids: Vec<&str> = owned.iter().map(String::as_str).collect();
        let mut reversed = ids.clone();
        reversed.reverse();
        for algorithm in [
            SubsetAlgorithm::Random,
            SubsetAlgorithm::Deterministic,
            SubsetAlgorithm::Aperture,
        ] {
            for client_index in 0..if cfg!(miri) { 2 } else { 10 } {
                let spec = SubsetSpec {
                    client_index,
                    client_count: 10,
                    seed: 7,
                    ..SubsetSpec::new(algorithm, 6)
                };
                let a: Vec<&str> = subset(&spec, &ids)
                    .unwrap()
                    .iter()
                    .map(|&i| ids[i])
                    .collect();
                let b: Vec<&str> = subset(&spec, &reversed)
                    .unwrap()
                    .iter()
                    .map(|&i| reversed[i])
                    .collect();
                assert_eq!(a, b, "{algorithm:?}");
            }
        }
    }
}
