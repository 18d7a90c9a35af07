//! Finagle's deterministic aperture: each client talks to a fractional slice of a ring of
//! backends, the slices of all clients covering the ring evenly.
//!
//! The backends, sorted, are laid on a ring `[0, 1)`, backend `i` owning `[i/n, (i+1)/n)`
//! ([`Ring`]). The clients are laid on a second ring of the same circumference, client `c` of
//! `m` at offset `c/m` ([`Coord`]). A client's *aperture* starts at its offset and has width
//! `N/m`, where `N = ceil(size · m / n)` is the fewest whole client slices that cover `size`
//! backends ([`d_aperture_width`]): so the apertures of all clients together cover the backend
//! ring exactly `N` times, and every backend receives the same share of the fleet's load. A
//! backend at an edge of the aperture is only partly covered; its *weight* is the covered
//! fraction ([`Ring::weight`]), and Finagle's pick is power-of-two-choices inside the aperture
//! with picks drawn uniformly over its width ([`Ring::pick`], [`Ring::try_pick_second`]), so an
//! edge backend gets that fraction of a full backend's traffic.
//!
//! Source: twitter/finagle, `finagle-core/src/main/scala/com/twitter/finagle/loadbalancer/
//! aperture/` `Ring.scala`, `ProcessCoordinate.scala` (`FromInstanceId`) and
//! `DeterministicAperture.scala` (`dApertureWidth`, `indices`, `physicalAperture`,
//! `MinDeterministicAperture`), as of commit e41975a5c0033cd9e34d8e77815a83a63a4423e3 (2022,
//! the parent of a5004ecc8, which removed this unweighted `Ring` in favour of
//! `WeightedAperture`; `ProcessCoordinate` and `dApertureWidth` are unchanged since). Every
//! arithmetic step is Finagle's, in the same `Double` operations and order (`%` is Java's
//! floating remainder, `libm::fmod` here), so offsets, widths, ranges, indices and weights are
//! bit-for-bit Finagle's. The subset is the one place that departs: it lists the backends
//! Finagle's `pick` reaches, which is Finagle's `indices` except where `offset · n` rounds
//! just below a whole number and `indices` slips by one (see `window` and its test).
//! The tests port `RingTest.scala`, `ProcessCoordinateTest.scala` and the deterministic cases
//! of `ApertureTest.scala`, naming each test.
//!
//! How liblb maps Finagle's inputs:
//!
//! - the backend vector is the ids in byte order (Finagle sorts by address with the client's
//!   `AddressOrdering` in `LoadBalancerFactory`, so all clients agree on the ring);
//! - `size` is the logical aperture, Finagle's `minDeterministicAperture` flag (default 12;
//!   Finagle replaces values below 2 with 12, liblb accepts 1), capped at `n`;
//! - `client_index`/`client_count` are `ProcessCoordinate.setCoordinate(instanceId,
//!   totalInstances)`; Finagle also accepts `instanceId >= totalInstances` (wrapping the offset),
//!   liblb refuses it (see [`crate::subset`]).
//!
//! The subset is the aperture's backends in ring order from the client's offset, each with its
//! weight. The picking functions are here for a selector that runs Finagle's P2C inside it; they
//! take their uniform draws in `[0, 1)` from the caller, so they stay pure.
//!
//! Cost: the window is O(n log n) for the sort plus O(width · n); a pick is O(1).

use crate::{Error, Result};
use alloc::string::ToString;
use alloc::vec::Vec;

/// Finagle's default logical aperture for deterministic aperture (`minDeterministicAperture`):
/// 12 backends, so P2C respects the edge weights and an aperture rarely has no healthy backend.
pub const DEFAULT_APERTURE: usize = 12;

/// A client's coordinate on the peer ring (Finagle's `ProcessCoordinate.FromInstanceId`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coord {
    /// Where this client's slice starts, in `[0, 1)`.
    pub offset: f64,
    /// The width of one client's slice, `1 / client_count`, in `(0, 1]`.
    pub unit_width: f64,
}

impl Coord {
    /// Client `instance_id` of `total_instances`: `unit_width = 1.0 / total`,
    /// `offset = (id · unit_width) % 1.0`. `total` must be at least 1 and `id` below it.
    pub fn from_instance_id(instance_id: u64, total_instances: u64) -> Result<Coord> {
        if total_instances == 0 {
            return Err(invalid("client_count", total_instances, "an integer >= 1"));
        }
        if instance_id >= total_instances {
            return Err(invalid(
                "client_index",
                instance_id,
                "an integer below client_count",
            ));
        }
        let unit_width = 1.0 / total_instances as f64;
        Ok(Coord {
            offset: libm::fmod(instance_id as f64 * unit_width, 1.0),
            unit_width,
        })
    }
}

/// Finagle's `DeterministicAperture.dApertureWidth`: the width of a client's aperture on the
/// ring, `min(1, N · local_unit_width)` with `N = ceil(aperture · remote_unit_width /
/// local_unit_width)`, the fewest whole client slices covering `aperture` backends.
pub fn d_aperture_width(local_unit_width: f64, remote_unit_width: f64, aperture: usize) -> f64 {
    let unit_aperture = aperture as f64 * remote_unit_width;
    let n = libm::ceil(unit_aperture / local_unit_width) as i32 as f64;
    (n * local_unit_width).min(1.0)
}

/// Finagle's `Ring`: the indices `0..size` laid uniformly on `[0, 1)`, index `i` owning
/// `[i · unit_width, (i + 1) · unit_width)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ring {
    size: usize,
    unit_width: f64,
}

/// Finagle's `Ring.intersect`: the length of the overlap of `[b0, e0)` and `[b1, e1)`.
fn intersect(b0: f64, e0: f64, b1: f64, e1: f64) -> f64 {
    (e0.min(e1) - b0.max(b1)).max(0.0)
}

impl Ring {
    /// A ring of `size` indices; `size` must be at least 1.
    pub fn new(size: usize) -> Result<Ring> {
        if size == 0 {
            return Err(invalid("size", 0, "an integer >= 1"));
        }
        Ok(Ring {
            size,
            unit_width: 1.0 / size as f64,
        })
    }

    /// How many indices the ring holds.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The width of one index, `1 / size`, in `(0, 1]`.
    pub fn unit_width(&self) -> f64 {
        self.unit_width
    }

    /// The index position `offset` (in `[0, 1)`) falls in: `floor(offset · size) % size`.
    pub fn index(&self, offset: f64) -> Result<usize> {
        if !(0.0..1.0).contains(&offset) {
            return Err(invalid_f64("offset", offset, "a number in [0, 1)"));
        }
        Ok(self.index_unchecked(offset))
    }

    fn index_unchecked(&self, offset: f64) -> usize {
        // Finagle: `math.floor(offset * size).toInt % size`.
        (libm::floor(offset * self.size as f64) as i32 as usize) % self.size
    }

    /// How many indices `[offset, offset + width)` touches with positive weight, the indices
    /// `pick` and `try_pick_second` choose from; a width of 0 counts as one index.
    pub fn range(&self, offset: f64, width: f64) -> Result<usize> {
        check_width(width)?;
        if width < 1.0 {
            let begin = self.index(offset)?;
            let end = self.index(libm::fmod(offset + width, 1.0))?;
            if begin == end && width > self.unit_width {
                // Wrapped around the entire ring.
                Ok(self.size)
            } else if begin == end {
                Ok(1)
            } else {
                let begin_weight = self.weight(begin, offset, width)?;
                let end_weight = self.weight(end, offset, width)?;
                // Project what pick2 does: an edge of weight 0 is never picked.
                let adjusted_begin = if begin_weight > 0.0 { begin } else { begin + 1 };
                let adjusted_end = if end_weight > 0.0 { end + 1 } else { end };
                let diff = adjusted_end as i64 - adjusted_begin as i64;
                Ok(if diff <= 0 {
                    (diff + self.size as i64) as usize
                } else {
                    diff as usize
                })
            }
        } else {
            Ok(self.size)
        }
    }

    /// The fraction of index `index` covered by `[offset, offset + width)`, in `[0, 1]`.
    pub fn weight(&self, index: usize, offset: f64, width: f64) -> Result<f64> {
        if index >= self.size {
            return Err(invalid(
                "index",
                index as u64,
                "an index below the ring size",
            ));
        }
        check_width(width)?;
        let ab = index as f64 * self.unit_width;
        let ae = ab + self.unit_width;
        Ok(if offset + width > 1.0 {
            // The range wraps: subtract the inverse range, one contiguous piece, from 1.
            let start = libm::fmod(offset + width, 1.0);
            let end = offset;
            1.0 - intersect(ab, ae, start, end) / self.unit_width
        } else {
            intersect(ab, ae, offset, offset + width) / self.unit_width
        })
    }

    /// The indices `[offset, offset + width)` touches, in ring order from `index(offset)`
    /// (Finagle's `indices`: `range` of them).
    pub fn indices(&self, offset: f64, width: f64) -> Result<Vec<usize>> {
        let first = self.index(offset)?;
        let range = self.range(offset, width)?;
        Ok((first..first + range).map(|i| i % self.size).collect())
    }

    /// A random index whose span meets `[offset, offset + width)`, chosen in proportion to its
    /// weight: the index of `offset + r · width`, for a uniform draw `r` in `[0, 1)`.
    pub fn pick(&self, offset: f64, width: f64, r: f64) -> Result<usize> {
        check_width(width)?;
        self.index(libm::fmod(offset + r * width, 1.0))
    }

    /// A second random index in the range, other than `a` when the range has another: the
    /// draw `r` (uniform in `[0, 1)`) is spread over the range with `a`'s span cut out.
    pub fn try_pick_second(&self, a: usize, offset: f64, width: f64, r: f64) -> Result<usize> {
        // `a`'s span, moved up by one turn when the range wraps past it.
        let ab = {
            let ab0 = a as f64 * self.unit_width;
            if ab0 + 1.0 < offset + width {
                ab0 + 1.0
            } else {
                ab0
            }
        };
        let ae = ab + self.unit_width;
        let overlap = intersect(ab, ae, offset, offset + width);
        let rem = width - overlap;
        if rem > 0.0 {
            // Draw over the range less a's overlap, then step over that overlap; every point
            // past it is treated alike so the draw is not biased towards `ae`.
            let mut pos = offset + r * rem;
            if pos >= ae - overlap {
                pos += overlap;
            }
            self.index(libm::fmod(pos, 1.0))
        } else {
            // The range is `a`'s span.
            Ok(a)
        }
    }

    /// Two indices of the range, distinct when it has two: `pick`, then `try_pick_second`.
    pub fn pick2(&self, offset: f64, width: f64, r1: f64, r2: f64) -> Result<(usize, usize)> {
        let a = self.pick(offset, width, r1)?;
        Ok((a, self.try_pick_second(a, offset, width, r2)?))
    }
}

/// The client's aperture over `sorted` (backend indices in id order, `size < sorted.len()`):
/// `(index into ids, weight)` in ring order from the client's offset.
pub(crate) fn window(
    sorted: &[usize],
    size: usize,
    client_index: u64,
    client_count: u64,
) -> Vec<(usize, f64)> {
    let (ring, coord, width) =
        aperture(sorted.len(), size, client_index, client_count).expect("validated spec");
    // `offset` is in [0, 1) and `width` in (0, 1]: none of these can fail.
    let first = ring.index(coord.offset).expect("valid window");
    let range = ring.range(coord.offset, width).expect("valid window");
    // Finagle's `indices` are `range` indices from `index(offset)`. When `offset · n` rounds
    // just below a whole number (client 5 of 6 over 18 backends: 14.999999999999998), that
    // first index has weight 0 and the last one `pick` reaches is left out; so walk one index
    // further and keep what the picks can reach, the indices of positive weight.
    let span = (range + 1).min(ring.size());
    (first..first + span)
        .map(|i| i % ring.size())
        .filter_map(|i| {
            let weight = ring.weight(i, coord.offset, width).expect("valid window");
            (weight > 0.0).then_some((sorted[i], weight))
        })
        .collect()
}

/// The ring of `n` backends, the client's coordinate and its aperture's width (Finagle's
/// `DeterministicAperture` with `logicalAperture = min(size, n)`).
pub fn aperture(
    n: usize,
    size: usize,
    client_index: u64,
    client_count: u64,
) -> Result<(Ring, Coord, f64)> {
    let ring = Ring::new(n)?;
    let coord = Coord::from_instance_id(client_index, client_count)?;
    let logical = size.min(n);
    Ok((
        ring,
        coord,
        d_aperture_width(coord.unit_width, ring.unit_width, logical),
    ))
}

fn check_width(width: f64) -> Result<()> {
    if (0.0..=1.0).contains(&width) {
        Ok(())
    } else {
        Err(invalid_f64("width", width, "a number in [0, 1]"))
    }
}

fn invalid(option: &'static str, value: u64, expected: &'static str) -> Error {
    Error::InvalidOptionValue {
        option,
        value: value.to_string(),
        expected,
    }
}

fn invalid_f64(option: &'static str, value: f64, expected: &'static str) -> Error {
    Error::InvalidOptionValue {
        option,
        value: alloc::format!("{value}"),
        expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use crate::subset::{SubsetAlgorithm, SubsetSpec, subset_weighted};
    use alloc::collections::BTreeMap;
    use alloc::collections::BTreeSet;
    use alloc::format;
    use alloc::string::String;
    use alloc::vec;
    use proptest::prelude::*;

    /// Finagle's `RingTest.numRuns`.
    const NUM_RUNS: usize = 100_000;

    /// A uniform draw in [0, 1) from 53 random bits (as `java.util.Random.nextDouble`).
    fn draw(rng: &mut SplitMix64) -> f64 {
        (rng.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn ring(size: usize) -> Ring {
        Ring::new(size).unwrap()
    }

    /// `RingTest.assertApproxEqual` (epsilon 1e-4).
    fn approx(a: f64, b: f64) {
        assert!(
            (a - b).abs() < 1e-4,
            "{a} was not approximately equal to {b}"
        );
    }

    /// `RingTest.run { pick2 }`: a histogram of both picks over `NUM_RUNS` pick2s.
    fn histo(ring: &Ring, offset: f64, width: f64, seed: u64) -> BTreeMap<usize, u32> {
        let mut rng = SplitMix64::new(seed);
        let mut h = BTreeMap::new();
        for _ in 0..NUM_RUNS {
            let (a, b) = ring
                .pick2(offset, width, draw(&mut rng), draw(&mut rng))
                .unwrap();
            *h.entry(a).or_insert(0) += 1;
            *h.entry(b).or_insert(0) += 1;
        }
        h
    }

    /// `RingTest.assertBalanced`: neighbouring keys within 10% of each other.
    fn assert_balanced(h: &BTreeMap<usize, u32>) {
        let v: Vec<f64> = h.values().map(|&c| f64::from(c)).collect();
        for w in v.windows(2) {
            assert!(
                (w[0] - w[1]).abs() / w[0].max(w[1]) < 0.1,
                "unbalanced: {h:?}"
            );
        }
    }

    // ---- RingTest.scala ----

    /// `RingTest`, "Ring.range has a valid size": every client of 65 (ids 0 to 65 inclusive,
    /// as `Gen.choose(0, numClients)`), every remote size 1 to 20, min aperture 12 — checked
    /// exhaustively where the Scala test samples.
    #[test]
    fn ring_range_has_a_valid_size() {
        let num_clients = 65;
        let local_unit_width = 1.0 / num_clients as f64;
        let min_aperture = 12;
        for remote_size in 1..=if cfg!(miri) { 6 } else { 20 } {
            for client_id in 0..=num_clients {
                let remote_unit_width = 1.0 / remote_size as f64;
                let offset = libm::fmod(client_id as f64 * local_unit_width, 1.0);
                let ring = ring(remote_size);
                let width = d_aperture_width(local_unit_width, remote_unit_width, min_aperture);
                let range = ring.range(offset, width).unwrap();
                assert_eq!(ring.indices(offset, width).unwrap().len(), range);
                assert!(
                    range >= remote_size.min(min_aperture),
                    "{client_id}/{remote_size}"
                );
                assert!(range <= remote_size);
            }
        }
    }

    /// `RingTest`, "Ring.range has a valid size with tricky values" (CSL-9607).
    #[test]
    fn ring_range_has_a_valid_size_with_tricky_values() {
        let offset = 0.09230769230769231; // clientId = 6 of 65
        let width = 0.9230769230769231;
        let ring = ring(13);
        let range = ring.range(offset, width).unwrap();
        assert_eq!(ring.indices(offset, width).unwrap().len(), range);
        assert!(range >= 12);
        assert!(range <= 13);
    }

    /// `RingTest`, "pick2": pick2 never returns the same index twice, and its pairs follow the
    /// distribution of "pick, then pick again until different". The Scala test compares two
    /// sampled histograms within 1e-3; here the pairs of 100,000 pick2s are tested against
    /// the exact rejection-sampling probabilities, P(a, b) = w_a/W · w_b/(W − w_a) (weights
    /// in ring units), by a chi-square test (every expected count is above 1,000).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn pick2() {
        let ring = ring(10);
        let (offset, width) = (0.75, 0.5);
        let indices = ring.indices(offset, width).unwrap();
        let w: Vec<f64> = indices
            .iter()
            .map(|&i| ring.weight(i, offset, width).unwrap())
            .collect();
        let total: f64 = w.iter().sum();
        let mut rng = SplitMix64::new(12345);
        let mut pairs = BTreeMap::new();
        for _ in 0..NUM_RUNS {
            let (a, b) = ring
                .pick2(offset, width, draw(&mut rng), draw(&mut rng))
                .unwrap();
            assert_ne!(a, b, "pick2: (a={a}, b={b})");
            *pairs.entry((a, b)).or_insert(0u32) += 1;
        }
        let mut chi2 = 0.0;
        let mut cells = 0;
        for (x, &a) in indices.iter().enumerate() {
            for (y, &b) in indices.iter().enumerate() {
                if a == b {
                    continue;
                }
                let p = w[x] / total * w[y] / (total - w[x]);
                let expected = p * NUM_RUNS as f64;
                let got = f64::from(pairs.get(&(a, b)).copied().unwrap_or(0));
                chi2 += (got - expected) * (got - expected) / expected;
                cells += 1;
            }
        }
        assert_eq!(cells, 30);
        // 29 degrees of freedom: the 0.1% upper tail is 58.3.
        assert!(chi2 < 58.3, "chi-square {chi2}: {pairs:?}");
    }

    /// `RingTest`, "pick2: no range".
    #[test]
    fn pick2_no_range() {
        let ring = ring(10);
        let mut rng = SplitMix64::new(1);
        let (a, b) = ring
            .pick2(0.75, 0.0, draw(&mut rng), draw(&mut rng))
            .unwrap();
        assert_eq!(a, 7);
        assert_eq!(a, b);
        for _ in 0..=100 {
            let offset = draw(&mut rng);
            let (a, b) = ring
                .pick2(offset, 0.0, draw(&mut rng), draw(&mut rng))
                .unwrap();
            assert_eq!(a, b);
        }
    }

    /// `RingTest`, "pick2: full range": over 100,000 pick2s on the whole ring, every index
    /// comes up.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn pick2_full_range() {
        for size in [10, 1250, 2000, 4422, 7200, 10000] {
            assert_eq!(histo(&ring(size), 0.0, 1.0, size as u64).len(), size);
        }
    }

    /// `RingTest`, "range boundary cases" (the Scala test's random offsets and sizes are
    /// drawn here from SplitMix64; its `forAll(posNum, posNum)` becomes a sweep).
    #[test]
    fn range_boundary_cases() {
        let mut rng = SplitMix64::new(12345);
        let r0 = ring(1);
        assert_eq!(r0.range(draw(&mut rng), 0.0), Ok(1));
        assert_eq!(r0.range(draw(&mut rng), 0.5), Ok(1));
        assert_eq!(r0.range(draw(&mut rng), 1.0), Ok(1));

        for _ in 0..20 {
            let size = 2 + (draw(&mut rng) * 10000.0) as usize;
            let r1 = ring(size);
            assert_eq!(r1.range(draw(&mut rng), 0.0), Ok(1));
            assert_eq!(r1.range(draw(&mut rng), f64::from_bits(1)), Ok(1)); // MinPositiveValue
            assert_eq!(r1.range(draw(&mut rng), 0.000001), Ok(1), "{size}");
            assert_eq!(r1.range(draw(&mut rng), 0.999999), Ok(size));
            assert_eq!(r1.range(draw(&mut rng), 1.0 - f64::from_bits(1)), Ok(size));
            assert_eq!(r1.range(draw(&mut rng), 1.0), Ok(size));
        }

        let (sizes, ids) = if cfg!(miri) { (20, 40) } else { (200, 400) };
        for size in 1..sizes {
            for id in 1..ids {
                let r = ring(size);
                // A full-width range ignores the offset, even one past the ring (id > size).
                assert_eq!(r.range(id as f64 / size as f64, 1.0), Ok(size));
            }
        }
    }

    /// `RingTest`, "range projects pick2": the indices pick2 reaches are exactly `range` many.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn range_projects_pick2() {
        let ring = ring(10);
        let cases: [(f64, f64, &[usize]); 4] = [
            (0.1, 0.3, &[1, 2, 3]),     // aligned with ring units
            (0.1, 0.35, &[1, 2, 3, 4]), // misaligned at end
            (0.35, 0.15, &[3, 4]),      // misaligned at start
            (0.25, 0.2, &[2, 3, 4]),    // misaligned at both
        ];
        for (k, (offset, width, want)) in cases.into_iter().enumerate() {
            let h = histo(&ring, offset, width, k as u64);
            let keys: Vec<usize> = h.keys().copied().collect();
            assert_eq!(keys, want);
            assert_eq!(ring.range(offset, width), Ok(h.len()));
        }
    }

    /// `RingTest`, "pick2: wraps around and respects weights". The Scala test's last check,
    /// `b / a - 0.5 < 1e-1`, is one-sided; here it is `|b / a - 0.5| < 0.1`.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn pick2_wraps_around_and_respects_weights() {
        let ring = ring(10);
        let h = histo(&ring, 0.75, 0.5, 12345);
        assert_eq!(ring.range(0.75, 0.5), Ok(h.len()));
        assert_eq!(
            h.keys().copied().collect::<BTreeSet<_>>(),
            BTreeSet::from([7, 8, 9, 0, 1, 2])
        );
        // 7 and 2 get a fraction of the traffic.
        let (edges, inner): (BTreeMap<_, _>, BTreeMap<_, _>) =
            h.iter().partition(|&(&k, _)| k == 2 || k == 7);
        assert_balanced(&edges);
        assert_balanced(&inner);
        // Index 2 and 7 should get ~50% of picks relative to the other indices.
        let (a, b) = (f64::from(h[&1]), f64::from(h[&2]));
        assert!((b / a - 0.5).abs() < 0.1, "{b} / {a}");
    }

    /// `RingTest`, "Handles full-width windows when offset + width results in an overlap"
    /// (reported at nvartolomei.com/weighted-deterministic-aperture).
    #[test]
    fn handles_full_width_windows_when_offset_plus_width_overlaps() {
        approx(ring(4).weight(0, 1.0 / 8.0, 1.0).unwrap(), 1.0);
    }

    /// `RingTest`, "weight".
    #[test]
    fn weight() {
        let ring = ring(10);
        assert_eq!(ring.range(0.25, 0.25), Ok(3));
        assert_eq!(ring.indices(0.25, 0.25), Ok(vec![2, 3, 4]));
        // wrap around
        assert_eq!(ring.range(0.75, 0.5), Ok(6));
        assert_eq!(ring.indices(0.75, 0.5), Ok(vec![7, 8, 9, 0, 1, 2]));
        // walk the indices
        for i in 0..=9 {
            assert_eq!(
                ring.range(i as f64 / 10.0, 1.0 / 10.0),
                Ok(1),
                "offset={}",
                i as f64 / 10.0
            );
            assert_eq!(ring.indices(i as f64 / 10.0, 1.0 / 10.0), Ok(vec![i % 10]));
        }
        approx(1.0, ring.weight(5, 0.5, 0.1).unwrap());
        approx(1.0, ring.weight(5, 0.5, 1.0).unwrap());
        // Wrap-around: intersection between [0.0, 0.1) and [0.75, 1.25)
        approx(1.0, ring.weight(0, 0.75, 0.5).unwrap());
        approx(ring.weight(0, 0.0, 1.0).unwrap(), 1.0);
        // Wrap-around with full width, zero offset, and nonzero index
        approx(ring.weight(9, 0.0, 1.0).unwrap(), 1.0);
        // Wrap-around with full width, non-zero offset, and nonzero index
        approx(ring.weight(9, 0.5, 1.0).unwrap(), 1.0);
        // Wrap-around with full width, zero offset, and zero index
        approx(ring.weight(0, 0.0, 1.0).unwrap(), 1.0);
        // Full overlap without offset
        approx(ring.weight(0, 0.0, 0.1).unwrap(), 1.0);
        // Full overlap with offset
        approx(ring.weight(1, 0.1, 0.1).unwrap(), 1.0);
    }

    /// `RingTest`, "Weight should be 0 if offset > unitWidth and we don't overlap the ring
    /// boundary": every offset 0.10 to 0.89 (the Scala generator's whole domain).
    #[test]
    fn weight_is_0_past_the_index_without_wrapping() {
        let ring = ring(10);
        for n in 10..=89 {
            approx(ring.weight(0, n as f64 * 0.01, 0.1).unwrap(), 0.0);
        }
    }

    /// `RingTest`, "Partial weights without overlapping the ring boundary": offsets 0.000 to
    /// 0.099.
    #[test]
    fn partial_weights_without_overlapping_the_ring_boundary() {
        let ring = ring(10);
        for n in 0..=99 {
            let offset = n as f64 * 0.001;
            let unit_width = 0.1;
            assert!(offset < unit_width);
            approx(
                ring.weight(0, offset, 0.1).unwrap(),
                (unit_width - offset) / unit_width,
            );
        }
    }

    /// `RingTest`, "Weight should be 0 if width is 0": every offset 0.00 to 1.00, every index.
    #[test]
    fn weight_is_0_if_width_is_0() {
        let ring = ring(10);
        for n in 0..=100 {
            for index in 0..=9 {
                approx(ring.weight(index, n as f64 * 0.01, 0.0).unwrap(), 0.0);
            }
        }
    }

    /// `RingTest`, "weight throws exceptions when appropriate".
    #[test]
    fn weight_refuses_bad_arguments() {
        let ring = ring(10);
        assert!(ring.weight(10, 0.0, 0.5).is_err());
        assert!(ring.weight(0, 0.0, 1.5).is_err());
        assert!(ring.weight(0, 0.0, -0.5).is_err());
        assert!(ring.index(1.0).is_err());
        assert!(ring.index(-0.1).is_err());
        assert!(Ring::new(0).is_err());
    }

    // ---- ProcessCoordinateTest.scala ----

    /// `ProcessCoordinateTest`, "setCoordinate": (0, 0) is refused; instances 1 and 2 of 10
    /// have different coordinates.
    #[test]
    fn set_coordinate() {
        assert!(Coord::from_instance_id(0, 0).is_err());
        let c0 = Coord::from_instance_id(1, 10).unwrap();
        let c1 = Coord::from_instance_id(2, 10).unwrap();
        assert_ne!(c0, c1);
    }

    /// `ProcessCoordinateTest`, "setCoordinate range": instance 0 of 1 has unit width 1.
    #[test]
    fn set_coordinate_range_single_instance() {
        let c = Coord::from_instance_id(0, 1).unwrap();
        assert!(1.0 - c.unit_width <= 1e-6);
        assert_eq!(c.offset, 0.0);
    }

    proptest! {
        #![proptest_config(crate::proptest_config(1000, 2))]

        /// `ProcessCoordinateTest`, "setCoordinate range": for any count in 1..=Int.MaxValue
        /// and id below it, offset in [0, 1) and unit width in (0, 1]. (liblb's ids are u64;
        /// the property is checked over Finagle's Int range and the whole u64 range.)
        #[test]
        fn set_coordinate_range(count in 1u64..=i32::MAX as u64, id_frac in 0.0f64..1.0, wide in 1u64..=u64::MAX) {
            for count in [count, wide] {
                let id = ((count as f64 * id_frac) as u64).min(count - 1);
                let c = Coord::from_instance_id(id, count).unwrap();
                prop_assert!(c.offset >= 0.0 && c.offset < 1.0);
                prop_assert!(c.unit_width > 0.0 && c.unit_width <= 1.0);
            }
        }

        /// `RingTest`'s invariants for any ring and window: `indices` has `range` members,
        /// all distinct, each of positive weight except where Finagle's projection keeps a
        /// zero-width window's one index; the weights sum to the width in ring units.
        #[test]
        fn windows_are_consistent(size in 1usize..300, offset in 0.0f64..1.0, width in 0.0f64..=1.0) {
            let ring = ring(size);
            let indices = ring.indices(offset, width).unwrap();
            prop_assert_eq!(indices.len(), ring.range(offset, width).unwrap());
            let distinct: BTreeSet<usize> = indices.iter().copied().collect();
            prop_assert_eq!(distinct.len(), indices.len());
            let total: f64 = indices.iter().map(|&i| ring.weight(i, offset, width).unwrap()).sum();
            if width > 0.0 {
                prop_assert!((total - width * size as f64).abs() < 1e-6 * size as f64,
                    "weights {} vs width {}", total, width * size as f64);
            }
        }
    }

    // ---- ApertureTest.scala (deterministic cases; minDeterministicAperture = 12) ----

    fn spec(client_index: u64, client_count: u64, size: usize) -> SubsetSpec {
        SubsetSpec {
            client_index,
            client_count,
            ..SubsetSpec::new(SubsetAlgorithm::Aperture, size)
        }
    }

    /// Zero-padded ids so that id order is Finagle's vector order 0..n.
    fn servers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("server-{i:03}")).collect()
    }

    fn window_of(client_index: u64, client_count: u64, n: usize, size: usize) -> Vec<(usize, f64)> {
        let owned = servers(n);
        let ids: Vec<&str> = owned.iter().map(String::as_str).collect();
        subset_weighted(&spec(client_index, client_count, size), &ids).unwrap()
    }

    /// Asserts a window's members and (within float rounding, as Finagle's own `Double`s
    /// give, e.g. 1.0000000000000004) their weights.
    fn assert_window(got: &[(usize, f64)], want: &[(usize, f64)]) {
        let indices: Vec<usize> = got.iter().map(|&(i, _)| i).collect();
        let wanted: Vec<usize> = want.iter().map(|&(i, _)| i).collect();
        assert_eq!(indices, wanted);
        for (&(i, g), &(_, w)) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-9, "index {i}: weight {g}, want {w}");
        }
    }

    /// `ApertureTest`, "useDeterministicOrdering, clients evenly divide servers" (and "status,
    /// unavailable endpoints in the aperture"): instance 0 of 12 over 24 servers uses servers
    /// 0 to 11, each whole.
    #[test]
    fn clients_evenly_divide_servers() {
        let w = window_of(0, 12, 24, DEFAULT_APERTURE);
        assert_window(&w, &(0..12).map(|i| (i, 1.0)).collect::<Vec<_>>());
    }

    /// `ApertureTest`, "useDeterministicOrdering, clients unevenly divide servers": instance 1
    /// of 4 over 18 servers: N = 3 turns, offset 0.25, width 0.75, so servers 4 to 17, server 4
    /// at half weight ("4 should get ~1/2 the load of the rest").
    #[test]
    fn clients_unevenly_divide_servers() {
        let w = window_of(1, 4, 18, DEFAULT_APERTURE);
        let indices: Vec<usize> = w.iter().map(|&(i, _)| i).collect();
        assert_eq!(indices, (4..=17).collect::<Vec<_>>());
        approx(w[0].1, 0.5);
        assert!(
            w[1..]
                .iter()
                .all(|&(_, weight)| (weight - 1.0).abs() < 1e-9)
        );
        // And the picks agree: over 100,000 pick2s server 4 gets about half of server 5's
        // (the Scala test allows ±0.1 on the ratio after 2,000 requests). Too many draws for
        // Miri, which checks the window above.
        if cfg!(miri) {
            return;
        }
        let (ring, coord, width) = aperture(18, 12, 1, 4).unwrap();
        let mut rng = SplitMix64::new(4);
        let mut counts = [0u32; 18];
        for _ in 0..NUM_RUNS {
            let (a, b) = ring
                .pick2(coord.offset, width, draw(&mut rng), draw(&mut rng))
                .unwrap();
            counts[a] += 1;
            counts[b] += 1;
        }
        assert!(counts[..4].iter().all(|&c| c == 0));
        let ratio = f64::from(counts[4]) / f64::from(counts[5]);
        assert!((ratio - 0.5).abs() <= 0.1, "{ratio}");
        let ratio = f64::from(counts[17]) / f64::from(counts[12]);
        assert!((ratio - 1.0).abs() <= 0.1, "{ratio}");
    }

    /// `ApertureTest`, "daperture toggle": instance 0 of 150 over 150 servers with the default
    /// aperture uses 12 servers (Finagle ignores a larger `minAperture` there).
    #[test]
    fn daperture_toggle_uses_twelve() {
        let w = window_of(0, 150, 150, DEFAULT_APERTURE);
        assert_window(&w, &(0..12).map(|i| (i, 1.0)).collect::<Vec<_>>());
    }

    /// `ApertureTest`, "d-aperture with equally loaded nodes doesn't unduly bias due to
    /// rounding errors": instance 0 of 1 over 3 servers uses all three (`minUnits` 3), and
    /// 3,000 picks spread within 5% of the mean.
    #[test]
    fn d_aperture_does_not_bias_through_rounding() {
        let w = window_of(0, 1, 3, DEFAULT_APERTURE);
        assert_window(&w, &[(0, 1.0), (1, 1.0), (2, 1.0)]);
        let (ring, coord, width) = aperture(3, 12, 0, 1).unwrap();
        assert_eq!(width, 1.0);
        if cfg!(miri) {
            return; // the sampled half below needs more draws than Miri runs quickly
        }
        let mut rng = SplitMix64::new(3000);
        let mut counts = [0f64; 3];
        for _ in 0..30_000 {
            counts[ring.pick(coord.offset, width, draw(&mut rng)).unwrap()] += 1.0;
        }
        let avg = counts.iter().sum::<f64>() / 3.0;
        assert!(
            counts.iter().all(|c| (avg - c).abs() / avg < 0.05),
            "{counts:?}"
        );
    }

    /// Finagle's `indices` at a floating-point edge: client 5 of 6 over 18 backends with an
    /// aperture of 1 covers [5/6, 1), backends 15, 16 and 17, but `5/6 · 18` is
    /// 14.999999999999998, so `index(offset)` is 14 (of weight 0) and `indices` lists 14, 15,
    /// 16. The port keeps that; the subset lists what `pick` reaches, 15, 16, 17.
    #[test]
    fn the_window_is_what_picks_reach_where_finagles_indices_slip() {
        let (ring, coord, width) = aperture(18, 1, 5, 6).unwrap();
        assert_eq!(ring.indices(coord.offset, width), Ok(vec![14, 15, 16]));
        assert_eq!(ring.weight(14, coord.offset, width), Ok(0.0));
        assert!(ring.weight(17, coord.offset, width).unwrap() > 0.99);
        let w = window_of(5, 6, 18, 1);
        assert_window(&w, &[(15, 1.0), (16, 1.0), (17, 1.0)]);
    }

    /// Over many fleet shapes, the window holds every backend `pick` reaches (checked on the
    /// midpoints of 64 equal slices of the draws: the extreme draws can reach an index of
    /// weight 0 through rounding, with a probability below 1e-14 — r < 6e-15 for client 5 of
    /// 6 over 18 backends, r within 2^-53 of 1 for client 1 of 2 over 2), is contiguous on the ring, has
    /// weights in (0, 1] up to rounding, and those weights add up to the aperture's width.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn windows_hold_what_picks_reach() {
        let draws: Vec<f64> = (0..64).map(|j| (j as f64 + 0.5) / 64.0).collect();
        for m in 1..30u64 {
            for n in 2..30usize {
                let owned = servers(n);
                let ids: Vec<&str> = owned.iter().map(String::as_str).collect();
                for size in 1..n.min(14) {
                    for c in 0..m {
                        let (ring, coord, width) = aperture(n, size, c, m).unwrap();
                        let w = subset_weighted(&spec(c, m, size), &ids).unwrap();
                        let got: BTreeSet<usize> = w.iter().map(|&(i, _)| i).collect();
                        for &r in &draws {
                            let i = ring.pick(coord.offset, width, r).unwrap();
                            assert!(
                                got.contains(&i),
                                "{c}/{m} over {n}, size {size}: {i} not in {got:?}"
                            );
                        }
                        assert!(w.windows(2).all(|p| p[1].0 == (p[0].0 + 1) % n));
                        assert!(w.iter().all(|&(_, x)| x > 0.0 && x < 1.0 + 1e-9));
                        let total: f64 = w.iter().map(|&(_, x)| x).sum();
                        assert!((total - width * n as f64).abs() < 1e-9, "{c}/{m} over {n}");
                    }
                }
            }
        }
    }

    /// The aperture's promise across the fleet: summing every client's weights, each backend
    /// is covered exactly N times (N = ceil(size · m / n)), so with equal traffic per client
    /// every backend gets the same load.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn every_backend_gets_the_same_share_of_the_fleet() {
        for (clients, n, size) in [
            (4u64, 18usize, 12usize),
            (65, 13, 12),
            (100, 1000, 10),
            (7, 30, 5),
            (1000, 7, 3),
        ] {
            let mut load = vec![0f64; n];
            for c in 0..clients {
                for (i, w) in window_of(c, clients, n, size) {
                    load[i] += w;
                }
            }
            let turns = libm::ceil(size.min(n) as f64 * clients as f64 / n as f64);
            let want = turns.min(clients as f64);
            for (i, l) in load.iter().enumerate() {
                assert!(
                    (l - want).abs() < 1e-6,
                    "{clients}x{n} size {size}: backend {i} {l} vs {want}"
                );
            }
        }
    }
}
