//! `lb simulate --scenario fleet`: subsetting at fleet scale (issue 26). Thousands of clients,
//! each talking to a small subset of a thousand backends, chosen by each of liblb's subsetting
//! algorithms (`liblb_core::subset`): how evenly the connections and the load spread over the
//! backends, and how many connections move when the fleet changes.
//!
//! **Model.** `--clients` C clients (default 10,000) and `--backends` N backends (default
//! 1,000, ids `backend-0` to `backend-(N−1)`, listed in that order: Ringsteady's task indices).
//! Client i is `client_index` i of `client_count` C; its A68 seed (`random`) is a SplitMix64
//! draw from `--seed` and i (A68: a random number each client picks once), and the fleet's
//! shared seed (`deterministic`'s shuffles) is `--seed` itself. Each client computes its subset
//! with [`liblb_core::subset::Backends::subset_weighted`] (`aperture`'s edge members carry
//! their fraction; the membership is checked and ordered once per event) for each `--subset-sizes` size (default 10, 30, 100). Nothing here is simulated in
//! time: subsets are pure functions of the inputs, so every number is exact for the seed.
//!
//! **Measured** per algorithm and size:
//! - *connections per backend*: how many clients have the backend in their subset, min, mean
//!   and max (the SRE book's ideal is max − min ≤ 1);
//! - *load max/mean*: each client sends the same rate, spread over its subset by the members'
//!   weights (1 each but for aperture's fractional edges); the busiest backend's load over the
//!   mean;
//! - *churn* for three events, each against the fleet before it: the backends grow by
//!   `--grow-backends` (default 5%, 1,000 → 1,050); one backend leaves, the last
//!   (`backend-(N−1)`: a job shrinking by one, as job schedulers shrink, from the highest task
//!   index) or one in the middle (`backend-(N/2)`: a failure or a drain; the others keep their
//!   order, so Ringsteady's task indices after it shift down by one, as a list without it
//!   gives them, and aperture's ring positions after it, in id order, move); the clients
//!   grow by `--grow-clients` (default 5%, 10,000 → 10,500: a scale-up, or the surge of a
//!   rolling restart). Churn is the connections the clients that were already there open plus
//!   those they close, as a share of all connections before the event, and the most members
//!   any one client replaced (A68's rendezvous property: one backend leaving replaces at most
//!   one member of each subset).
//!
//! **The SRE book's cases** are computed beside them (chapter 20, "Load Balancing in the
//! Datacenter"): 300 clients, 300 backends, subsets of 90 chosen at random (the book: the least
//! loaded backend has 63% of the mean connections, the most loaded 121%, varying from run to
//! run), and 300 clients deterministically subsetting 10 of 300 backends (the book: every
//! backend gets exactly the same number of connections).
//!
//! **Cost.** Per event the membership is checked and ordered once (O(N log N),
//! `liblb_core::subset::Backends`), then each client's subset costs O(N) (`random` hashes
//! every backend, `deterministic` shuffles them) or O(log N + size) (`ringsteady`,
//! `aperture`), spread over every core: the default run takes about a second here, 100,000
//! clients about 11 s and 100,000 × 10,000 about 75 s, growing with clients × backends. Two
//! fleets' subsets are held at once (the one before an event and the one after it), so
//! clients × the largest size is bounded (10^8 members).

use crate::{Failure, chart};
use liblb_core::SplitMix64;
use liblb_core::subset::{Backends, SubsetAlgorithm, SubsetSpec};
use std::io::Write;
use std::path::Path;

/// Most clients (`--clients`).
pub(crate) const MAX_CLIENTS: usize = 1_000_000;

/// Most subset members a fleet holds (clients × subset size): 1.6 GB at 16 bytes each, and two
/// fleets are held at once.
const MAX_MEMBERS: f64 = 1e8;

/// The scenario's parameters (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub clients: usize,
    pub backends: usize,
    pub sizes: Vec<usize>,
    pub algorithms: Vec<SubsetAlgorithm>,
    pub grow_backends: usize,
    pub grow_clients: usize,
    pub seed: u64,
}

impl Params {
    /// Checks the parameters, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        crate::bounded("--clients", self.clients, 1, MAX_CLIENTS)?;
        crate::bounded("--backends", self.backends, 2, crate::MAX_BACKENDS)?;
        if self.sizes.is_empty() {
            return Err("--subset-sizes needs at least one size".into());
        }
        for size in &self.sizes {
            crate::bounded("--subset-sizes", *size, 1, self.backends)?;
        }
        crate::bounded(
            "--grow-backends",
            self.grow_backends,
            0,
            crate::MAX_BACKENDS,
        )?;
        crate::bounded("--grow-clients", self.grow_clients, 0, MAX_CLIENTS)?;
        // Two fleets' subsets are held at once, 16 bytes a member.
        let largest = self
            .sizes
            .iter()
            .max()
            .copied()
            .unwrap_or(0)
            .min(self.backends);
        let members = (self.clients + self.grow_clients) as f64 * largest as f64;
        if members > MAX_MEMBERS {
            return Err(format!(
                "clients x the largest subset size is {}, more than {}: lower --clients or --subset-sizes",
                crate::num(members),
                crate::num(MAX_MEMBERS)
            ));
        }
        let work = (self.clients + self.grow_clients) as f64
            * (self.backends + self.grow_backends) as f64
            * self.sizes.len() as f64
            * self.algorithms.len() as f64;
        if work > 1e11 {
            return Err(format!(
                "clients x backends x sizes x algorithms is {}, more than 1e11: lower --clients, --backends or --subset-sizes",
                crate::num(work)
            ));
        }
        Ok(())
    }
}

/// The subset sizes a comma-separated `--subset-sizes` names.
pub(crate) fn sizes(text: &str) -> Result<Vec<usize>, String> {
    text.split(',')
        .map(|part| {
            part.trim().parse::<usize>().map_err(|_| {
                format!("--subset-sizes takes sizes separated by commas (10,30,100), got {text:?}")
            })
        })
        .collect()
}

/// The subsetting algorithms a `--subset` list names (all when empty).
pub(crate) fn algorithms(names: &[String]) -> Result<Vec<SubsetAlgorithm>, Failure> {
    if names.is_empty() {
        return Ok(SubsetAlgorithm::ALL.to_vec());
    }
    names
        .iter()
        .map(|name| SubsetAlgorithm::from_name(name).map_err(Failure::from))
        .collect()
}

/// One fleet: who the clients are and what they see.
struct Fleet<'a> {
    ids: &'a [String],
    clients: usize,
    algorithm: SubsetAlgorithm,
    size: usize,
    seed: u64,
}

/// Each client's subset: backend numbers (the `i` of `backend-i`) with their weights, sorted
/// by number.
type Subsets = Vec<Vec<(u32, f64)>>;

impl Fleet<'_> {
    /// Client `i`'s A68 seed: a draw from the run's seed and `i`, fixed for the client.
    fn client_seed(&self, i: usize) -> u64 {
        SplitMix64::new(self.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).next()
    }

    /// Every client's subset, computed on every core (each is a pure function of its inputs,
    /// so the answer does not depend on how the clients are split).
    fn subsets(&self) -> Result<Subsets, Failure> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = self.clients.div_ceil(threads).max(1);
        let parts: Vec<Result<Subsets, Failure>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..self.clients)
                .step_by(chunk)
                .map(|from| {
                    let to = (from + chunk).min(self.clients);
                    scope.spawn(move || self.subsets_of(from..to))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a subset worker does not panic"))
                .collect()
        });
        let mut all = Vec::with_capacity(self.clients);
        for part in parts {
            all.extend(part?);
        }
        Ok(all)
    }

    /// The subsets of the clients in `range`.
    fn subsets_of(&self, range: std::ops::Range<usize>) -> Result<Subsets, Failure> {
        let ids: Vec<&str> = self.ids.iter().map(String::as_str).collect();
        let backends = Backends::new(&ids)?;
        let numbers: Vec<u32> = self.ids.iter().map(|id| number(id)).collect();
        range
            .map(|i| {
                let spec = SubsetSpec {
                    algorithm: self.algorithm,
                    size: self.size,
                    client_index: i as u64,
                    client_count: self.clients as u64,
                    seed: match self.algorithm {
                        SubsetAlgorithm::Random => self.client_seed(i),
                        _ => self.seed,
                    },
                };
                let mut members: Vec<(u32, f64)> = (backends.subset_weighted(&spec)?)
                    .into_iter()
                    .map(|(index, weight)| (numbers[index], weight))
                    .collect();
                members.sort_unstable_by_key(|(n, _)| *n);
                Ok(members)
            })
            .collect()
    }
}

/// The number of `backend-n`.
fn number(id: &str) -> u32 {
    id.strip_prefix("backend-")
        .and_then(|n| n.parse().ok())
        .expect("fleet ids are backend-<n>")
}

/// `backend-0` to `backend-(n-1)`.
fn backend_ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("backend-{i}")).collect()
}

/// How the connections and the load spread over `backends` backends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spread {
    /// Each backend's connections (clients that have it in their subset).
    pub connections: Vec<u64>,
    pub min: u64,
    pub mean: f64,
    pub max: u64,
    /// The busiest backend's load over the mean load.
    pub load_peak: f64,
}

fn spread(subsets: &Subsets, backends: usize) -> Spread {
    let mut connections = vec![0u64; backends];
    let mut load = vec![0f64; backends];
    for members in subsets {
        let total: f64 = members.iter().map(|(_, w)| w).sum();
        for (n, w) in members {
            connections[*n as usize] += 1;
            load[*n as usize] += w / total;
        }
    }
    let mean_load = subsets.len() as f64 / backends as f64;
    Spread {
        min: connections.iter().copied().min().unwrap_or(0),
        mean: connections.iter().sum::<u64>() as f64 / backends as f64,
        max: connections.iter().copied().max().unwrap_or(0),
        load_peak: load.iter().copied().fold(0.0, f64::max) / mean_load,
        connections,
    }
}

/// What one event changed for the clients that were there before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Churn {
    /// Connections opened plus closed, over the connections before.
    pub share: f64,
    /// The most members one client closed (replaced).
    pub most_replaced: usize,
}

fn churn(before: &[Vec<(u32, f64)>], after: &[Vec<(u32, f64)>]) -> Churn {
    let (mut changed, mut most) = (0usize, 0usize);
    for (old, new) in before.iter().zip(after) {
        let (mut i, mut j, mut closed, mut opened) = (0, 0, 0, 0);
        while i < old.len() || j < new.len() {
            match (old.get(i), new.get(j)) {
                (Some(a), Some(b)) if a.0 == b.0 => (i, j) = (i + 1, j + 1),
                (Some(a), Some(b)) if a.0 < b.0 => (i, closed) = (i + 1, closed + 1),
                (Some(_), None) => (i, closed) = (i + 1, closed + 1),
                _ => (j, opened) = (j + 1, opened + 1),
            }
        }
        changed += closed + opened;
        most = most.max(closed);
    }
    let connections: usize = before.iter().map(Vec::len).sum();
    Churn {
        share: changed as f64 / connections.max(1) as f64,
        most_replaced: most,
    }
}

/// One algorithm and size's numbers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub algorithm: SubsetAlgorithm,
    pub size: usize,
    pub spread: Spread,
    pub grow_backends: Churn,
    pub lose_last: Churn,
    pub lose_middle: Churn,
    pub grow_clients: Churn,
}

/// Runs one algorithm at one size: the fleet, then each event.
pub(crate) fn run(
    params: &Params,
    algorithm: SubsetAlgorithm,
    size: usize,
) -> Result<Row, Failure> {
    let ids = backend_ids(params.backends);
    let fleet = Fleet {
        ids: &ids,
        clients: params.clients,
        algorithm,
        size,
        seed: params.seed,
    };
    let before = fleet.subsets()?;
    // Each event's subsets are compared with the fleet's and dropped: two fleets in memory.
    let grown_ids = backend_ids(params.backends + params.grow_backends);
    let grow_backends = churn(
        &before,
        &Fleet {
            ids: &grown_ids,
            ..fleet
        }
        .subsets()?,
    );
    let without = |lost: usize| {
        let fewer: Vec<String> = (ids.iter())
            .filter(|id| number(id) as usize != lost)
            .cloned()
            .collect();
        let after = Fleet {
            ids: &fewer,
            ..fleet
        }
        .subsets()?;
        Ok::<_, Failure>(churn(&before, &after))
    };
    let lose_last = without(params.backends - 1)?;
    let lose_middle = without(params.backends / 2)?;
    let more = Fleet {
        clients: params.clients + params.grow_clients,
        ..fleet
    }
    .subsets()?;
    let grow_clients = churn(&before, &more[..params.clients]);
    drop(more);
    Ok(Row {
        algorithm,
        size,
        spread: spread(&before, params.backends),
        grow_backends,
        lose_last,
        lose_middle,
        grow_clients,
    })
}

/// The SRE book's two cases (see the module docs): (random 90 of 300, deterministic 10 of
/// 300), each over 300 clients.
pub(crate) fn book(seed: u64) -> Result<(Spread, Spread), Failure> {
    let ids = backend_ids(300);
    let case = |algorithm, size| {
        let fleet = Fleet {
            ids: &ids,
            clients: 300,
            algorithm,
            size,
            seed,
        };
        Ok::<_, Failure>(spread(&fleet.subsets()?, 300))
    };
    Ok((
        case(SubsetAlgorithm::Random, 90)?,
        case(SubsetAlgorithm::Deterministic, 10)?,
    ))
}

fn percent(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Runs every algorithm at every size and prints the tables; with `svg`, draws the middle
/// size's runs there (see `chart::draw_fleet`).
pub(crate) fn print(
    params: &Params,
    svg: Option<&Path>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    writeln!(
        out,
        "fleet: {} clients x {} backends, seed {}; churn: connections opened + closed by the clients already there, over all connections before (most any one client replaced)",
        params.clients, params.backends, params.seed
    )?;
    let events = [
        format!("+{} backends", params.grow_backends),
        format!("-backend-{}", params.backends - 1),
        format!("-backend-{}", params.backends / 2),
        format!("+{} clients", params.grow_clients),
    ];
    let pictured = params.sizes[params.sizes.len() / 2];
    let mut drawn = Vec::new();
    for size in &params.sizes {
        writeln!(out)?;
        writeln!(out, "subset size {size}")?;
        writeln!(
            out,
            "{:<14} {:>21} {:>10} {:>15} {:>15} {:>15} {:>15}",
            "algorithm",
            "connections/backend",
            "load peak",
            events[0],
            events[1],
            events[2],
            events[3]
        )?;
        writeln!(
            out,
            "{:<14} {:>6} {:>7} {:>6} {:>10}",
            "", "min", "mean", "max", "max/mean"
        )?;
        for algorithm in &params.algorithms {
            let row = run(params, *algorithm, *size)?;
            let c = |churn: Churn| format!("{} ({})", percent(churn.share), churn.most_replaced);
            writeln!(
                out,
                "{:<14} {:>6} {:>7.1} {:>6} {:>10.3} {:>15} {:>15} {:>15} {:>15}",
                algorithm.name(),
                row.spread.min,
                row.spread.mean,
                row.spread.max,
                row.spread.load_peak,
                c(row.grow_backends),
                c(row.lose_last),
                c(row.lose_middle),
                c(row.grow_clients),
            )?;
            if *size == pictured {
                drawn.push(row);
            }
        }
    }
    let (random, deterministic) = book(params.seed)?;
    writeln!(out)?;
    writeln!(
        out,
        "the SRE book's cases (300 clients, 300 backends; chapter 20, figures 20-3 and 20-5):"
    )?;
    writeln!(
        out,
        "  random 90 of 300:        connections {}..{} (mean {:.0}): {:.0}%..{:.0}% of the mean; the book: 57..109 (63%..121%), varying by run",
        random.min,
        random.max,
        random.mean,
        random.min as f64 / random.mean * 100.0,
        random.max as f64 / random.mean * 100.0,
    )?;
    writeln!(
        out,
        "  deterministic 10 of 300: connections {}..{} (mean {:.0}); the book: every backend the same",
        deterministic.min, deterministic.max, deterministic.mean,
    )?;
    if let Some(path) = svg {
        let title = format!(
            "fleet: {} clients x {} backends, subsets of {pictured}, seed {}",
            params.clients, params.backends, params.seed
        );
        let connections: Vec<(&str, Vec<u64>)> = (drawn.iter())
            .map(|r| (r.algorithm.name(), r.spread.connections.clone()))
            .collect();
        let churn: Vec<(&str, Vec<f64>)> = (drawn.iter())
            .map(|r| {
                let events = [r.grow_backends, r.lose_last, r.lose_middle, r.grow_clients];
                (
                    r.algorithm.name(),
                    events.iter().map(|c| c.share * 100.0).collect(),
                )
            })
            .collect();
        chart::draw_fleet(path, &title, &connections, &events, &churn).map_err(Failure::Usage)?;
    }
    Ok(())
}
