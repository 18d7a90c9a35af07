//! Deterministic subsetting, from Google's SRE book.
//!
//! Clients are grouped into *rounds* of `subset_count = n / size` consecutive client indices
//! (integer division, `n` backends). Every client of round `r = client_index / subset_count`
//! shuffles the backends with the same generator, seeded by `r`, and cuts the shuffled list into
//! `subset_count` slices; client `client_index % subset_count` takes its slice. So within a round
//! every backend goes to exactly one client, and with `client_count` a multiple of
//! `subset_count` every backend has exactly `client_count / subset_count` clients; otherwise the
//! last, partial round gives some backends one client more than others (±1). Rounds use
//! different shuffles, so a client's subset is spread over the fleet rather than a fixed block.
//! The cost of that balance is churn: a change of `n` changes `subset_count` and every round's
//! shuffle, so most clients get new subsets (the reason for Ringsteady, see `ringsteady`).
//!
//! Source: Beyer, Jones, Petoff & Murphy (eds.), *Site Reliability Engineering* (O'Reilly 2016),
//! chapter 20, "Load Balancing in the Datacenter", section "A Subset Selection Algorithm:
//! Deterministic Subsetting" — its `Subset(backends, client_id, subset_size)` pseudocode:
//!
//! ```text
//! subset_count = len(backends) / subset_size
//! round = client_id / subset_count
//! random.seed(round); random.shuffle(backends)
//! subset_id = client_id % subset_count
//! start = subset_id * subset_size
//! return backends[start:start + subset_size]
//! ```
//!
//! What liblb fixes that the book leaves open:
//!
//! - **The shuffle.** The book calls a generic `random.shuffle`; any exact answer needs an
//!   exact permutation, and this one is liblb's own: a Fisher-Yates (Durstenfeld) shuffle of the
//!   backends in id byte order, `for i in (1..n).rev() { swap(i, j) }` with
//!   `j = bounded(next(), i + 1)` (Lemire's multiply-shift, [`crate::bounded`]), drawing from
//!   [`SplitMix64`] seeded with `mix(seed) ^ round` (`mix` is SplitMix64's finaliser, `seed` the
//!   spec's fleet-wide seed, 0 by default). The permutation is part of liblb's stable output
//!   (pinned by a value-stability test below); it matches no other implementation.
//! - **`n` not a multiple of `size`.** The pseudocode's fixed-size slices leave the last
//!   `n mod size` shuffled backends of every round unused, which breaks the book's own claims
//!   ("within each round, each backend is assigned to exactly one client"; "we allow a few
//!   subsets to be slightly larger than others ... the number of clients assigned to a backend
//!   will differ by at most 1"). liblb follows the text: the shuffled list is cut into
//!   `subset_count` contiguous slices whose lengths differ by at most one (the first
//!   `n mod subset_count` slices one longer). When `size` divides `n` this is exactly the
//!   pseudocode.
//!
//! Cost: O(n) per client per membership change (one shuffle), after the id sort.

use crate::rng::{SplitMix64, bounded, mix};
use alloc::vec::Vec;

/// Client `client_index`'s slice of its round's shuffle of `sorted` (the backend indices in id
/// order), `size < sorted.len()`; in shuffled order.
pub(crate) fn subset(sorted: &[usize], size: usize, client_index: u64, seed: u64) -> Vec<usize> {
    let n = sorted.len();
    let subset_count = n / size; // >= 1: size < n
    let round = client_index / subset_count as u64;
    let subset_id = (client_index % subset_count as u64) as usize;
    let mut shuffled = sorted.to_vec();
    shuffle(&mut shuffled, round_seed(seed, round));
    let (start, len) = slice(n, subset_count, subset_id);
    shuffled[start..start + len].to_vec()
}

/// The seed of round `round`'s shuffle.
fn round_seed(seed: u64, round: u64) -> u64 {
    mix(seed) ^ round
}

/// Fisher-Yates (Durstenfeld): every permutation of `items` equally likely, up to `bounded`'s
/// bias of at most n / 2^64.
fn shuffle(items: &mut [usize], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        let j = bounded(rng.next(), i + 1);
        items.swap(i, j);
    }
}

/// Start and length of slice `id` when `n` items are cut into `count` contiguous slices whose
/// lengths differ by at most one, the longer ones first.
fn slice(n: usize, count: usize, id: usize) -> (usize, usize) {
    let (base, extra) = (n / count, n % count);
    (id * base + id.min(extra), base + usize::from(id < extra))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subset::{SubsetAlgorithm, SubsetSpec, subset as subset_of};
    use alloc::format;
    use alloc::string::String;
    use alloc::vec;
    use proptest::prelude::*;

    fn ids(n: usize) -> Vec<String> {
        // Zero-padded, so id order is numeric order and index i is backend i.
        (0..n).map(|i| format!("backend-{i:04}")).collect()
    }

    fn spec(size: usize, client_index: u64, client_count: u64) -> SubsetSpec {
        SubsetSpec {
            client_index,
            client_count,
            ..SubsetSpec::new(SubsetAlgorithm::Deterministic, size)
        }
    }

    /// Connections per backend when clients `0..clients` each take their subset.
    fn connections(n: usize, size: usize, clients: u64) -> Vec<u32> {
        let owned = ids(n);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        let mut count = vec![0u32; n];
        for c in 0..clients {
            for i in subset_of(&spec(size, c, clients), &refs).unwrap() {
                count[i] += 1;
            }
        }
        count
    }

    /// The SRE book's example (ch. 20): 12 backends, subsets of 3, so 4 subsets per round;
    /// "client[0], client[4], client[8] will use subset[0]" and so on: clients 0..3 of round 0
    /// split the round's shuffle among themselves, each backend exactly once.
    #[test]
    fn sre_book_twelve_backends_subsets_of_three() {
        let owned = ids(12);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        for round in 0..3u64 {
            let mut all: Vec<usize> = (0..4)
                .flat_map(|s| subset_of(&spec(3, round * 4 + s, 12), &refs).unwrap())
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..12).collect::<Vec<_>>(), "round {round}");
        }
        // Rounds shuffle differently: client 0 and client 4 hold different subsets.
        assert_ne!(
            subset_of(&spec(3, 0, 12), &refs).unwrap(),
            subset_of(&spec(3, 4, 12), &refs).unwrap()
        );
    }

    /// The SRE book's Figure 20-5: 300 clients, each connecting to 10 of 300 backends, "each
    /// backend receives exactly the same number of connections" (10).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn sre_book_figure_20_5_three_hundred_clients() {
        assert!(connections(300, 10, 300).iter().all(|&c| c == 10));
    }

    /// Value stability: the exact permutation is liblb's (see the module docs); pin it.
    #[test]
    fn shuffle_value_stability() {
        let mut items: Vec<usize> = (0..10).collect();
        shuffle(&mut items, round_seed(0, 0));
        let mut again: Vec<usize> = (0..10).collect();
        shuffle(&mut again, round_seed(0, 0));
        assert_eq!(items, again);
        assert_eq!(items, PINNED_ROUND_0);
    }
    const PINNED_ROUND_0: [usize; 10] = [4, 9, 2, 5, 1, 7, 6, 0, 3, 8];

    /// Fisher-Yates is uniform (seed 002's pairwise-swap shuffle is not): over 5! = 120
    /// permutations of 5 items, 120,000 shuffles with consecutive round seeds pass a
    /// chi-square test against 1,000 each (119 degrees of freedom, 0.1% tail at 173.6).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn the_shuffle_is_uniform() {
        let mut counts = vec![0f64; 120];
        for round in 0..120_000u64 {
            let mut items: Vec<usize> = (0..5).collect();
            shuffle(&mut items, round_seed(1, round));
            // Lehmer code of the permutation, 0..120.
            let mut code = 0;
            for i in 0..5 {
                let smaller = items[i + 1..].iter().filter(|&&x| x < items[i]).count();
                code = code * (5 - i) + smaller;
            }
            counts[code] += 1.0;
        }
        let chi2: f64 = counts
            .iter()
            .map(|c| (c - 1000.0) * (c - 1000.0) / 1000.0)
            .sum();
        assert!(chi2 < 173.6, "chi-square {chi2}");
    }

    #[test]
    fn slices_cover_the_list_once_longer_first() {
        for n in 1..if cfg!(miri) { 12 } else { 40 } {
            for count in 1..=n {
                let mut next = 0;
                for id in 0..count {
                    let (start, len) = slice(n, count, id);
                    assert_eq!(start, next);
                    assert!(len == n / count || len == n / count + 1);
                    next = start + len;
                }
                assert_eq!(next, n);
            }
        }
    }

    proptest! {
        #![proptest_config(crate::proptest_config(64, 1))]

        /// The SRE property: with `client_count` a multiple of `subset_count`, every backend
        /// has exactly the same number of clients; with any other client count, the counts
        /// differ by at most one.
        #[test]
        fn every_backend_gets_the_same_number_of_clients_plus_or_minus_one(
            n in 2usize..80,
            size in 1usize..20,
            rounds in 1u64..6,
            extra in any::<prop::sample::Index>(),
        ) {
            prop_assume!(size < n);
            let subset_count = (n / size) as u64;
            let full = connections(n, size, rounds * subset_count);
            prop_assert!(full.iter().all(|&c| u64::from(c) == rounds), "{:?}", full);
            let partial = rounds * subset_count + extra.index(subset_count as usize) as u64;
            let counts = connections(n, size, partial);
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "{:?}", counts);
        }
    }
}
