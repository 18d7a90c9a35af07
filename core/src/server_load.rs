//! The server side of server-reported load: what a backend keeps about itself so it can answer
//! Prequal probes and write ORCA load reports, clocked by the caller like every policy object
//! of the core (each method that needs time takes `now_ns`, nanoseconds of any monotonic clock
//! that never goes back).
//!
//! A backend calls [`ServerLoad::start`] when a request arrives and [`ServerLoad::finish`]
//! (or [`ServerLoad::cancel`]) when it ends; the application sets its utilisations when it
//! measures them. From that, [`ServerLoad`] answers:
//!
//! - [`ServerLoad::probe`]: a Prequal probe answer, the requests in flight (RIF) and the
//!   latency the server expects for a request arriving now. Prequal (Wydrowski, Kleinberg,
//!   Rumble, Archer: "Load is not what you should balance: Introducing Prequal", NSDI '24,
//!   arXiv 2312.10172; its section on probing) has each server answer a probe with its current
//!   RIF and a latency estimate conditioned on that RIF: the median latency of recent requests
//!   that ran at a similar RIF, so the estimate says what *this* load level costs, not what the
//!   server's average request costs. (The paper's text was not in the reference store when this
//!   was written; the description follows its abstract — "selects servers according to
//!   estimated latency and active requests-in-flight" — and reimplementations that keep
//!   latencies "in buckets by RIF value" and report their median.)
//! - [`ServerLoad::report`] / [`ServerLoad::header`]: an ORCA `OrcaLoadReport` (cncf/xds
//!   `xds/data/orca/v3/orca_load_report.proto`) with `cpu_utilization`, `mem_utilization`,
//!   `application_utilization`, `rps_fractional`, `eps` and the named metric [`RIF_METRIC`], as
//!   gRPC's weighted_round_robin (gRFC A58) and Envoy read it; the header is the
//!   `endpoint-load-metrics` value in `BIN` or `TEXT` form ([`LoadReport::to_header`]).
//!
//! **Utilisations** are validated as gRPC's `ServerMetricRecorder` validates them
//! (grpc/grpc `src/cpp/server/backend_metric_recorder.cc`, commit `05a8d54d`:
//! `IsUtilizationWithSoftLimitsValid` for CPU and application utilisation, `>= 0`, may exceed
//! 1; `IsUtilizationValid` for memory, `0..=1` — the proto's `buf.validate` bounds too), with
//! one difference: infinity is refused as well as NaN (gRPC lets `+inf` through `>= 0`), since
//! the `TEXT` header cannot carry it and A58 would weight such a server 0. gRPC drops an invalid
//! value silently; here the setter returns [`Error::InvalidLoadReport`] and keeps the old value.
//! `-0.0` is stored as `0.0`. Without 64-bit atomics (thumbv7em) a utilisation is kept as an
//! `f32` (7 significant digits), and values beyond `f32::MAX` are refused there.
//!
//! **Rates** (`rps_fractional`, `eps`): completed requests (successes and failures) and failed
//! ones, counted in a sliding window of 10 slots (default 10 s of 1 s slots; tower's
//! `tps_budget.rs` slotted window, as in the `budget` module, but with slots aligned to the
//! clock, `now_ns / slot`, so the time the window covers is known exactly). Slots rotate
//! lazily, under a try-lock flag, on the next call that passes their end; a rate is the count
//! over the covered time: from the start of the oldest slot (or from [`ServerLoad::new`], if
//! later) to `now_ns`, and at least one slot long, so the first milliseconds of a server's life
//! do not report a thousand requests per second for one request. ORCA's `eps` is part of its
//! `rps_fractional` (A58's weight divides one by the other), so failures count in both.
//!
//! **Latency by RIF**: a request's [`Started`] token remembers the RIF it found on arrival
//! (requests already in flight, itself not counted), and its latency is filed under that
//! level. Levels are exact from 0 to 15, then four per power of two (16–19, 20–23, …, 128
//! levels for every `u32`), so the relative width of a level stays under 25%. Each level keeps
//! its 8 most recent latencies (microseconds, a ring written lock-free) with the time each was
//! filed; its estimate is the median (the upper one of an even count) of those filed within
//! the latency max age ([`ServerLoad::DEFAULT_LATENCY_MAX_AGE`], 1 s, unless
//! [`ServerLoad::with_latency_max_age`] sets another). A probe at RIF `r` answers with the
//! level of `r`; if that level has no recent sample, with the nearest level that has one (on a
//! tie, the higher: a guess should err slow); with no recent sample at all, zero — what a
//! server knows before its first request. Only successes are filed: a server that fails fast
//! would otherwise look fast and draw traffic to its errors (Prequal's "sinkholing"); failures
//! still count in `eps`.
//!
//! Samples age because an estimate that never changes can starve a server for good: one that
//! once drew an unlucky median (eight slow requests) answers every probe with it, Prequal's
//! clients pick the faster-looking probes, no request comes to replace the samples, and the
//! server idles for the rest of its life (`lb simulate --scenario uneven` showed a backend of
//! ten kept at 0.0% that way before samples aged). With aging, a server left without traffic
//! for a second says it does not know — zero, as before its first request — and draws the
//! requests that measure it again; the draw is bounded by the clients' hot/cold rule, which
//! stops picking it once its RIF is above their recent quantile. The paper's servers estimate
//! from *recent* queries; the one-second horizon is liblb's, the same as `prequal`'s default
//! `max_probe_age_ms` on the client. It trades a slow server's share against the tail: in
//! `lb simulate --scenario uneven` (backends of speeds 1x to 4x) the slowest is 50% busy and
//! prequal's p99 299 ms at 1 s, against 229 ms at 10 s, where it idles the slowest backends
//! more (its utilisation spread 62 points instead of 30). A sample's time is kept in
//! milliseconds; without 64-bit atomics (thumbv7em) that count wraps after 49 days, so a level
//! left untouched for 25 to 50 days may be read as recent until its next sample.
//!
//! Cost: `start` is one atomic add; `finish` about seven relaxed atomic operations (plus a
//! slot rotation once per slot period); `probe` reads at most one level of 8 samples and their
//! stamps in the common case, and scans the 128 levels only while the current level has no
//! recent sample. Memory: about 13 KiB per [`ServerLoad`] (8.5 KiB without 64-bit atomics).

use crate::error::{Error, Result};
use crate::orca::{HeaderForm, LoadReport};
use crate::sync::{AtomicCounter, AtomicU32, AtomicUsize, Ordering};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::AtomicBool;
use core::time::Duration;

/// The named metric of [`ServerLoad::report`] that carries the requests in flight, so a client
/// can read a report as a piggybacked probe.
pub const RIF_METRIC: &str = "rif";

/// The named metric of [`ServerLoad::report`] that carries the latency estimate at the
/// current RIF, in milliseconds, once there is one: with [`RIF_METRIC`] it makes the report a
/// whole Prequal probe answer, which `prequal` balancers take from load reports as if probed.
pub const LATENCY_METRIC: &str = "latency_ms";

/// Slots of the rate window.
const SLOTS: usize = 10;
/// RIF levels kept exactly (one level per value).
const EXACT: u32 = 16;
/// Latency levels: 16 exact ones, then 4 per power of two from 2^4 to 2^31.
const LEVELS: usize = EXACT as usize + 4 * 28;
/// Latencies kept per level.
const SAMPLES: usize = 8;
/// A ring entry that holds no latency yet.
const EMPTY: u32 = u32::MAX;

/// The longest latency max age, an hour (stamps wrap after 49 days without 64-bit atomics).
const MAX_LATENCY_MAX_AGE: Duration = Duration::from_secs(3600);

/// A request the server has started: hand it back to [`ServerLoad::finish`] (or
/// [`ServerLoad::cancel`]) when it ends. It is neither `Copy` nor `Clone`, so a request cannot
/// be finished twice; a token dropped unfinished leaves the request counted in flight forever.
#[must_use = "a started request stays in flight until it is finished or cancelled"]
#[derive(Debug, PartialEq, Eq)]
pub struct Started {
    started_ns: u64,
    rif: u32,
}

impl Started {
    /// When the request started (the `now_ns` given to [`ServerLoad::start`]).
    pub fn started_ns(&self) -> u64 {
        self.started_ns
    }

    /// The requests that were already in flight when it started.
    pub fn rif(&self) -> u32 {
        self.rif
    }

    /// The token [`ServerLoad::start`] made with these parts, for a binding whose callers
    /// hold it as plain data (C's `lb_server_request`, which C can copy, so finish-once is the
    /// caller's part there). Any parts are safe: a forged or repeated token only miscounts
    /// (the in-flight count wraps, the latency is filed under its `rif`); it cannot panic.
    #[doc(hidden)]
    pub fn from_parts(started_ns: u64, rif: u32) -> Started {
        Started { started_ns, rif }
    }
}

/// What a server answers to a Prequal probe ([`ServerLoad::probe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Requests in flight now.
    pub rif: u32,
    /// The latency estimate for a request arriving at this RIF (see the module docs for the
    /// fallbacks); zero before any request has succeeded.
    pub latency: Duration,
}

/// A server's own load: requests in flight, request and error rates, latency by in-flight
/// level and the utilisations the application sets. `Send + Sync`, lock-free; see the module
/// docs.
///
/// ```
/// use liblb_core::{HeaderForm, ServerLoad};
/// use std::time::Duration;
/// const MS: u64 = 1_000_000; // the caller's clock, in nanoseconds
///
/// let load = ServerLoad::new(0);
/// let request = load.start(0);
/// assert_eq!(load.probe(MS).rif, 1);
/// load.finish(request, 4 * MS, true);
/// load.set_cpu_utilization(0.5)?;
/// // A request arriving now finds nothing in flight; the last one that did took 4 ms.
/// assert_eq!(load.probe(5 * MS).latency, Duration::from_millis(4));
/// assert_eq!(
///     load.header(5 * MS, HeaderForm::Text)?,
///     "TEXT cpu_utilization:0.5,rps_fractional:1,named_metrics.latency_ms:4,named_metrics.rif:0"
/// );
/// # Ok::<(), liblb_core::Error>(())
/// ```
#[derive(Debug)]
pub struct ServerLoad {
    /// When the window started counting (the `now_ns` of `new`).
    created_ns: u64,
    in_flight: AtomicU32,
    rates: Rates,
    levels: Box<[Level]>,
    /// How long a latency sample counts, milliseconds (the stamps' unit).
    latency_max_age_ms: usize,
    cpu: Gauge,
    mem: Gauge,
    application: Gauge,
}

impl ServerLoad {
    /// The default window of the rates: 10 s (10 slots of 1 s).
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

    /// How long a latency sample counts toward its level's estimate by default: 1 s (see the
    /// module docs).
    pub const DEFAULT_LATENCY_MAX_AGE: Duration = Duration::from_secs(1);

    /// A server load starting at `now_ns`, with the default 10 s rate window.
    pub fn new(now_ns: u64) -> ServerLoad {
        ServerLoad::with_window(ServerLoad::DEFAULT_WINDOW, now_ns).expect("the default is valid")
    }

    /// A server load starting at `now_ns` whose rates cover `window` (1 s to 1 h; 10 slots of
    /// a tenth each). Another window is an [`Error::InvalidOptionValue`].
    pub fn with_window(window: Duration, now_ns: u64) -> Result<ServerLoad> {
        if window < Duration::from_secs(1) || window > Duration::from_secs(3600) {
            return Err(Error::InvalidOptionValue {
                option: "window_ms",
                value: format!("{}", window.as_millis()),
                expected: "1000 to 3600000 (milliseconds)",
            });
        }
        Ok(ServerLoad {
            created_ns: now_ns,
            in_flight: AtomicU32::new(0),
            rates: Rates::new((window / SLOTS as u32).as_nanos() as u64, now_ns),
            levels: (0..LEVELS).map(|_| Level::new()).collect(),
            latency_max_age_ms: ServerLoad::DEFAULT_LATENCY_MAX_AGE.as_millis() as usize,
            cpu: Gauge::new(),
            mem: Gauge::new(),
            application: Gauge::new(),
        })
    }

    /// The same server load with latency samples counting for `max_age` (1 ms to 1 h, kept to
    /// the nearest millisecond) instead of [`ServerLoad::DEFAULT_LATENCY_MAX_AGE`]: longer
    /// keeps a slow server's estimate, and its idleness, longer; shorter tries it again sooner.
    /// Another age is an [`Error::InvalidOptionValue`] for `latency_max_age_ms`.
    pub fn with_latency_max_age(self, max_age: Duration) -> Result<ServerLoad> {
        if max_age < Duration::from_millis(1) || max_age > MAX_LATENCY_MAX_AGE {
            return Err(Error::InvalidOptionValue {
                option: "latency_max_age_ms",
                value: format!("{}", max_age.as_secs_f64() * 1e3),
                expected: "1 to 3600000 (milliseconds)",
            });
        }
        Ok(ServerLoad {
            // To the nearest millisecond; at most an hour, so no overflow.
            latency_max_age_ms: ((max_age.as_nanos() + 500_000) / 1_000_000) as usize,
            ..self
        })
    }

    /// How long a latency sample counts.
    pub fn latency_max_age(&self) -> Duration {
        Duration::from_millis(self.latency_max_age_ms as u64)
    }

    /// The rates' window.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.rates.slot_ns * SLOTS as u64)
    }

    /// A request arrives at `now_ns`: RIF + 1. The token remembers the time and the RIF it
    /// found (not counting itself).
    pub fn start(&self, now_ns: u64) -> Started {
        // Relaxed: the count publishes no other memory; each start/finish is one RMW on it.
        let rif = self.in_flight.fetch_add(1, Ordering::Relaxed);
        Started {
            started_ns: now_ns,
            rif,
        }
    }

    /// The request ends at `now_ns`, successfully or not (`ok`): RIF − 1, one more completion
    /// in the rates (and one more error unless `ok`), and, for a success, its latency
    /// (`now_ns` − its start, 0 if the clock went back) filed under the RIF it found. Returns
    /// that latency.
    pub fn finish(&self, started: Started, now_ns: u64, ok: bool) -> Duration {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.rates.add(now_ns, ok);
        let latency = Duration::from_nanos(now_ns.saturating_sub(started.started_ns));
        if ok {
            self.levels[level(started.rif)].record(latency, now_ns);
        }
        latency
    }

    /// The request was abandoned (the client went away, the server shut down): RIF − 1 and
    /// nothing else counted.
    pub fn cancel(&self, started: Started) {
        let _ = started;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The answer to a Prequal probe at `now_ns`: the RIF and the latency estimate at that RIF
    /// (the module docs give the fallbacks).
    pub fn probe(&self, now_ns: u64) -> Probe {
        let rif = self.in_flight();
        Probe {
            rif,
            latency: self.latency_at(rif, now_ns),
        }
    }

    /// The latency estimate at `now_ns` for a request arriving at RIF `rif`: the median of its
    /// level's samples of the last [`ServerLoad::latency_max_age`], else of the nearest level
    /// with such samples (the higher one on a tie), else zero.
    pub fn latency_at(&self, rif: u32, now_ns: u64) -> Duration {
        let home = level(rif);
        let now = stamp(now_ns);
        let median = |i: usize| self.levels[i].median(now, self.latency_max_age_ms);
        let found = median(home).or_else(|| {
            (1..LEVELS).find_map(|d| {
                let up = (home + d < LEVELS).then(|| median(home + d)).flatten();
                up.or_else(|| home.checked_sub(d).and_then(median))
            })
        });
        found.map_or(Duration::ZERO, |us| Duration::from_micros(u64::from(us)))
    }

    /// Completed requests per second over the window ending at `now_ns`.
    pub fn rps(&self, now_ns: u64) -> f64 {
        self.rates.rate(now_ns, self.created_ns).0
    }

    /// Failed requests per second over the window ending at `now_ns`.
    pub fn eps(&self, now_ns: u64) -> f64 {
        self.rates.rate(now_ns, self.created_ns).1
    }

    /// Sets the CPU utilisation (a fraction of the available CPU; finite, at least 0, may
    /// exceed 1). An invalid value is an [`Error::InvalidLoadReport`] and changes nothing.
    pub fn set_cpu_utilization(&self, value: f64) -> Result<()> {
        self.cpu.set("cpu_utilization", value, f64::INFINITY)
    }

    /// Sets the memory utilisation (a fraction of the available memory, 0 to 1). An invalid
    /// value is an [`Error::InvalidLoadReport`] and changes nothing.
    pub fn set_mem_utilization(&self, value: f64) -> Result<()> {
        self.mem.set("mem_utilization", value, 1.0)
    }

    /// Sets the application utilisation (finite, at least 0, may exceed 1; gRFC A58 prefers
    /// it to CPU). An invalid value is an [`Error::InvalidLoadReport`] and changes nothing.
    pub fn set_application_utilization(&self, value: f64) -> Result<()> {
        self.application
            .set("application_utilization", value, f64::INFINITY)
    }

    /// The CPU utilisation last set (0 before any).
    pub fn cpu_utilization(&self) -> f64 {
        self.cpu.get()
    }

    /// The memory utilisation last set (0 before any).
    pub fn mem_utilization(&self) -> f64 {
        self.mem.get()
    }

    /// The application utilisation last set (0 before any).
    pub fn application_utilization(&self) -> f64 {
        self.application.get()
    }

    /// The ORCA load report at `now_ns`: the three utilisations, `rps_fractional` and `eps`
    /// over the window, and the named metric [`RIF_METRIC`] (always present, so the report is
    /// never the all-zero one). Add the application's own named metrics to it before writing
    /// it, if any.
    pub fn report(&self, now_ns: u64) -> LoadReport {
        let (rps, eps) = self.rates.rate(now_ns, self.created_ns);
        LoadReport {
            cpu_utilization: self.cpu_utilization(),
            mem_utilization: self.mem_utilization(),
            application_utilization: self.application_utilization(),
            rps_fractional: rps,
            eps,
            named_metrics: self.probe_metrics(now_ns),
            ..LoadReport::default()
        }
    }

    /// [`LATENCY_METRIC`] (once a latency is known) and [`RIF_METRIC`]: the probe answer.
    fn probe_metrics(&self, now_ns: u64) -> Vec<(String, f64)> {
        let probe = self.probe(now_ns);
        let mut metrics = Vec::with_capacity(2);
        if !probe.latency.is_zero() {
            let ms = probe.latency.as_secs_f64() * 1e3;
            metrics.push((String::from(LATENCY_METRIC), ms));
        }
        metrics.push((String::from(RIF_METRIC), f64::from(probe.rif)));
        metrics
    }

    /// [`ServerLoad::report`] as an `endpoint-load-metrics` header value in `form`. Both forms
    /// carry every field `report` fills with every value the setters accept, so this does not
    /// fail today; it returns [`LoadReport::to_header`]'s `Result` for the day it might.
    pub fn header(&self, now_ns: u64, form: HeaderForm) -> Result<String> {
        self.report(now_ns).to_header(form)
    }
}

// A server shares one `ServerLoad` between all its request handlers.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ServerLoad>();
};

/// The latency level of a request that found `rif` requests in flight: `rif` itself below 16,
/// then 4 levels per power of two (the two bits after the leading one).
fn level(rif: u32) -> usize {
    if rif < EXACT {
        return rif as usize;
    }
    let log = 31 - rif.leading_zeros(); // 4 to 31
    let sub = (rif >> (log - 2)) & 3;
    (EXACT + 4 * (log - 4) + sub) as usize
}

/// A sample's time stamp: `now_ns` in milliseconds (wrapping in the counter's width).
fn stamp(now_ns: u64) -> usize {
    (now_ns / 1_000_000) as usize
}

/// One RIF level's recent latencies: a ring of [`SAMPLES`] microsecond values and when each
/// was filed.
#[derive(Debug)]
struct Level {
    samples: [AtomicU32; SAMPLES],
    /// Each sample's [`stamp`].
    stamps: [AtomicCounter; SAMPLES],
    /// The next ring position to write (wrapping; taken modulo `SAMPLES`).
    next: AtomicU32,
}

impl Level {
    fn new() -> Level {
        Level {
            samples: core::array::from_fn(|_| AtomicU32::new(EMPTY)),
            stamps: core::array::from_fn(|_| AtomicCounter::new(0)),
            next: AtomicU32::new(0),
        }
    }

    fn record(&self, latency: Duration, now_ns: u64) {
        // Saturates at 71 minutes, one below EMPTY.
        let us = u32::try_from(latency.as_micros())
            .unwrap_or(EMPTY - 1)
            .min(EMPTY - 1);
        // Relaxed: two writers get distinct positions (one RMW), and a reader racing a write
        // sees the old or the new sample with the old or the new stamp, either a latency of
        // this level: at worst one sample is counted or left out by the other's age.
        let at = self.next.fetch_add(1, Ordering::Relaxed) as usize % SAMPLES;
        self.stamps[at].store(stamp(now_ns) as _, Ordering::Relaxed);
        self.samples[at].store(us, Ordering::Relaxed);
    }

    /// The median of the samples stamped within `max_age_ms` of `now` (the upper one of an
    /// even count), `None` when there are none.
    fn median(&self, now: usize, max_age_ms: usize) -> Option<u32> {
        let mut values = [0u32; SAMPLES];
        let mut n = 0;
        for (sample, stamp) in self.samples.iter().zip(&self.stamps) {
            let v = sample.load(Ordering::Relaxed);
            // A stamp a little ahead of `now` (another thread's later clock reading) wraps
            // to a huge age; it is recent, so ages past half the range count as 0.
            let age = now.wrapping_sub(stamp.load(Ordering::Relaxed) as usize);
            let recent = age <= max_age_ms || age > usize::MAX / 2;
            if v != EMPTY && recent {
                values[n] = v;
                n += 1;
            }
        }
        if n == 0 {
            return None;
        }
        let values = &mut values[..n];
        values.sort_unstable();
        Some(values[n / 2])
    }
}

/// The rate window: [`SLOTS`] slots of `slot_ns`, aligned to the clock (slot `e` covers
/// `[e·slot_ns, (e+1)·slot_ns)`), each counting completions and failures.
#[derive(Debug)]
struct Rates {
    slot_ns: u64,
    done: [AtomicU32; SLOTS],
    failed: [AtomicU32; SLOTS],
    /// The slot of the newest epoch.
    index: AtomicUsize,
    /// The newest epoch (`now_ns / slot_ns`), wrapping at 2^32 (13 years of 100 ms slots).
    epoch: AtomicU32,
    rotating: AtomicBool,
}

impl Rates {
    fn new(slot_ns: u64, now_ns: u64) -> Rates {
        Rates {
            slot_ns,
            done: core::array::from_fn(|_| AtomicU32::new(0)),
            failed: core::array::from_fn(|_| AtomicU32::new(0)),
            index: AtomicUsize::new(0),
            epoch: AtomicU32::new((now_ns / slot_ns) as u32),
            rotating: AtomicBool::new(false),
        }
    }

    /// Epochs from the newest slot to `now_ns`'s, or 0 if `now_ns` is not past it (the same
    /// slot, or a clock reading older than a racing caller's).
    fn behind(&self, now_epoch: u32, order: Ordering) -> u32 {
        let d = now_epoch.wrapping_sub(self.epoch.load(order));
        if d > u32::MAX / 2 { 0 } else { d }
    }

    /// Moves the newest slot to `now_ns`'s epoch, emptying the slots it passes (all of them
    /// after a silence of a whole window).
    fn rotate(&self, now_ns: u64) {
        let now_epoch = (now_ns / self.slot_ns) as u32;
        if self.behind(now_epoch, Ordering::Acquire) == 0 {
            return; // the common case: one load
        }
        // Acquire/Release: the slots a rotation empties are seen by the next rotation. A
        // caller that finds a rotation under way skips it and counts in the slot it finds:
        // at most one slot early or late, never outside the window but after a whole
        // window of silence.
        if (self.rotating)
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let passed = self.behind(now_epoch, Ordering::Relaxed);
        if passed > 0 {
            let index = self.index.load(Ordering::Relaxed);
            for k in 1..=(passed as usize).min(SLOTS) {
                let slot = (index + k) % SLOTS;
                self.done[slot].store(0, Ordering::Relaxed);
                self.failed[slot].store(0, Ordering::Relaxed);
            }
            let index = (index + passed as usize % SLOTS) % SLOTS;
            // Release, paired with `add`'s Acquire: whoever counts in the new slot does so
            // after it was emptied, so the emptying never erases a count.
            self.index.store(index, Ordering::Release);
            self.epoch.store(now_epoch, Ordering::Release);
        }
        self.rotating.store(false, Ordering::Release);
    }

    fn add(&self, now_ns: u64, ok: bool) {
        self.rotate(now_ns);
        // Acquire: see `rotate`. The counts themselves are Relaxed, one RMW each.
        let slot = self.index.load(Ordering::Acquire);
        self.done[slot].fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failed[slot].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (completions, failures) per second over the window ending at `now_ns`.
    fn rate(&self, now_ns: u64, created_ns: u64) -> (f64, f64) {
        self.rotate(now_ns);
        let sum = |slots: &[AtomicU32; SLOTS]| -> f64 {
            (slots.iter())
                .map(|s| f64::from(s.load(Ordering::Relaxed)))
                .sum()
        };
        // The window: the 9 older slots and the current one up to `now_ns`, or less since
        // `created_ns`; at least one slot.
        let span = (SLOTS as u64 - 1) * self.slot_ns + now_ns % self.slot_ns;
        let covered = span
            .min(now_ns.saturating_sub(created_ns))
            .max(self.slot_ns);
        let seconds = covered as f64 / 1e9;
        (sum(&self.done) / seconds, sum(&self.failed) / seconds)
    }
}

/// A utilisation: `f64` bits where the target has 64-bit atomics, else `f32` bits.
#[derive(Debug)]
struct Gauge(AtomicCounter);

impl Gauge {
    fn new() -> Gauge {
        Gauge(AtomicCounter::new(0)) // the bits of 0.0 in both widths
    }

    /// Stores `value` if it is finite, at least 0 and at most `max` (and fits the stored
    /// width); else an error naming `field`, and nothing changes.
    fn set(&self, field: &str, value: f64, max: f64) -> Result<()> {
        let bits = to_bits(value + 0.0); // -0.0 + 0.0 = +0.0
        if !(value.is_finite() && value >= 0.0 && value <= max && from_bits(bits).is_finite()) {
            let range = if max == 1.0 {
                "from 0 to 1"
            } else {
                "finite and at least 0"
            };
            return Err(Error::InvalidLoadReport(format!(
                "{field} must be {range} (as gRPC's ServerMetricRecorder accepts it), got {value}"
            )));
        }
        // Relaxed: one value, read on its own; no other memory is published with it.
        self.0.store(bits, Ordering::Relaxed);
        Ok(())
    }

    fn get(&self) -> f64 {
        from_bits(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(target_has_atomic = "64")]
fn to_bits(value: f64) -> u64 {
    value.to_bits()
}

#[cfg(target_has_atomic = "64")]
fn from_bits(bits: u64) -> f64 {
    f64::from_bits(bits)
}

#[cfg(not(target_has_atomic = "64"))]
fn to_bits(value: f64) -> usize {
    (value as f32).to_bits() as usize
}

#[cfg(not(target_has_atomic = "64"))]
fn from_bits(bits: usize) -> f64 {
    f64::from(f32::from_bits(bits as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_exact_then_four_per_power_of_two() {
        for rif in 0..16 {
            assert_eq!(level(rif), rif as usize);
        }
        assert_eq!(
            [level(16), level(19), level(20), level(31)],
            [16, 16, 17, 19]
        );
        assert_eq!(
            [level(32), level(39), level(40), level(63)],
            [20, 20, 21, 23]
        );
        assert_eq!(level(u32::MAX), LEVELS - 1);
        // Monotone, no level skipped: near 0 and around every power of two.
        let around =
            (4..32).flat_map(|s| (1u32 << s).saturating_sub(40)..=(1u32 << s).saturating_add(40));
        for rif in (0..5000).chain(around).chain(u32::MAX - 40..u32::MAX) {
            let step = level(rif + 1) - level(rif);
            assert!(step <= 1, "{rif}");
        }
    }

    const AGE: usize = 1000;

    #[test]
    fn a_level_answers_the_median_of_its_last_eight() {
        let l = Level::new();
        let record = |us: u64| l.record(Duration::from_micros(us), 0);
        assert_eq!(l.median(0, AGE), None);
        record(30);
        assert_eq!(l.median(0, AGE), Some(30));
        record(10);
        assert_eq!(l.median(0, AGE), Some(30), "the upper median of two");
        for us in [20, 50, 40] {
            record(us);
        }
        assert_eq!(l.median(0, AGE), Some(30));
        // Eight more push the first five out.
        for _ in 0..8 {
            record(7);
        }
        assert_eq!(l.median(0, AGE), Some(7));
        l.record(Duration::from_secs(1 << 40), 0);
        assert_eq!(l.samples[5].load(Ordering::Relaxed), EMPTY - 1);
    }

    #[test]
    fn samples_count_for_the_max_age_and_a_stamp_ahead_counts() {
        let l = Level::new();
        l.record(Duration::from_micros(5), 3_000 * 1_000_000);
        assert_eq!(l.median(3_000 + AGE, AGE), Some(5));
        assert_eq!(l.median(3_001 + AGE, AGE), None);
        assert_eq!(l.median(3_001 + AGE, AGE + 1), Some(5));
        assert_eq!(
            l.median(2_000, AGE),
            Some(5),
            "stamped after now: another clock reading"
        );
        // Stamps wrap in the counter's width: ages are taken modulo it.
        let wrapped = Level::new();
        wrapped.stamps[0].store(usize::MAX as _, Ordering::Relaxed);
        wrapped.samples[0].store(9, Ordering::Relaxed);
        assert_eq!(wrapped.median(AGE - 1, AGE), Some(9));
        assert_eq!(wrapped.median(AGE + 1, AGE), None);
    }

    #[test]
    fn gauges_keep_their_value_after_an_error() {
        let g = Gauge::new();
        g.set("x", 0.25, 1.0).unwrap();
        assert!(g.set("x", f64::NAN, 1.0).is_err());
        assert!(g.set("x", 1.5, 1.0).is_err());
        assert_eq!(g.get(), 0.25);
        g.set("x", -0.0, 1.0).unwrap();
        assert_eq!(g.get().to_bits(), 0);
    }
}
