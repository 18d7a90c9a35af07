//! [`Balancer`]: a thread-safe balancer over a [`Table`].
//!
//! Readers never lock: the current membership is an immutable [`Snapshot`] (nodes + table)
//! held in an `ArcSwap` (the pattern of pingora's `LoadBalancer`; see `sync::publish`, which
//! swaps in a loom model under `cfg(loom)` so the writers' protocol is model-checked). A pick
//! takes the calling thread's pin of it (`pin`: a per-thread cache validated by the balancer's
//! publish generation, with biased reference counts, so no locked instruction on the fast
//! path), asks the table, and returns a [`Picked`] that keeps that snapshot alive, so the
//! returned id can never dangle, whatever a concurrent `remove` does.
//! Writers serialise on a mutex, build a complete new snapshot — validating everything first —
//! and publish it with one atomic store: readers see the old set or the new one, never a mix,
//! and a failed change publishes nothing.

use crate::health::Counted;
use crate::load::Outcome;
use crate::orca::LoadReport;
use crate::request::{Budget, Request};
use crate::sync::publish::{Mutex, Published};
use crate::{
    Algorithm, Error, MAX_BATCH, Node, Options, Result, Routing, State, Status, SubsetAlgorithm,
    Table,
};
use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::any::Any;
use core::cell::Cell;
use core::time::Duration;
use std::sync::OnceLock;

/// How a pick, an answer or a lease holds its snapshot: the thread's pin (see `pin`), or
/// arc-swap's guard when the thread's cache does not take it (a thread picking from more than
/// `pin::WAYS` balancers in turn, or exiting) and on targets without 64-bit atomics (which pins
/// need); under loom, which models the publish protocol only, a plain `Arc`.
#[cfg(all(not(loom), target_has_atomic = "64"))]
enum Held {
    Pinned(crate::pin::Pinned<Snapshot>),
    Guarded(crate::sync::publish::Loaded<Snapshot>),
}
#[cfg(all(not(loom), not(target_has_atomic = "64")))]
type Held = crate::sync::publish::Loaded<Snapshot>;
#[cfg(loom)]
type Held = Arc<Snapshot>;

#[cfg(all(not(loom), target_has_atomic = "64"))]
impl core::ops::Deref for Held {
    type Target = Snapshot;

    #[inline]
    fn deref(&self) -> &Snapshot {
        match self {
            Held::Pinned(pinned) => pinned,
            Held::Guarded(guard) => guard,
        }
    }
}

/// Most answers a batch reserves room for up front (it grows past this as it goes).
const RESERVE_CAP: usize = 1 << 16;

/// One published membership: the nodes in insertion order, the table built from them (which
/// holds each node's [`Load`]), and what leases need to end themselves.
struct Snapshot {
    nodes: Vec<Node>,
    table: Table,
    /// `(xxh3 of the id, node index)` sorted, to find a node (and its load) by id in
    /// O(log n) integer comparisons and one id comparison (string comparisons were a third
    /// of a `prequal` probe answer's cost).
    by_id: Vec<(u64, u32)>,
    clock: Arc<dyn Clock>,
    /// The balancer's state (leases end through it: health, bounded loads).
    state: Arc<State>,
    /// The balancer's publication, while the balancer lives: a lease from this membership that
    /// ends after a change decides its node's ejection against the membership current then.
    current: Weak<Published<Snapshot>>,
    /// What a binding derived from this membership (see [`Picked::attachment`]).
    attachment: OnceLock<Box<dyn Any + Send + Sync>>,
}

/// The hash [`Snapshot::find`] looks ids up by (the one `Table` checks duplicates with).
#[inline]
fn id_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

impl Snapshot {
    fn new(
        nodes: Vec<Node>,
        table: Table,
        clock: Arc<dyn Clock>,
        state: Arc<State>,
        current: Weak<Published<Snapshot>>,
    ) -> Snapshot {
        let mut by_id: Vec<(u64, u32)> = (nodes.iter().enumerate())
            .map(|(i, n)| (id_hash(&n.id), i as u32))
            .collect();
        by_id.sort_unstable();
        Snapshot {
            nodes,
            table,
            by_id,
            clock,
            state,
            current,
            attachment: OnceLock::new(),
        }
    }

    /// The value of type `T` attached to this membership, made by `make` if there is none yet.
    /// `make` runs outside any lock: threads racing on a fresh snapshot may each make one, and
    /// the first stored is kept (the others are dropped). `None` if a value of another type was
    /// attached first.
    #[inline]
    fn attachment<T: Any + Send + Sync>(&self, make: impl FnOnce(&[Node]) -> T) -> Option<&T> {
        let value = match self.attachment.get() {
            Some(value) => value,
            None => {
                let made: Box<dyn Any + Send + Sync> = Box::new(make(&self.nodes));
                // `set` fails only if another thread attached first: keep theirs.
                let _ = self.attachment.set(made);
                self.attachment.get()?
            }
        };
        value.downcast_ref()
    }

    /// The index of the node with this id.
    fn find(&self, id: &str) -> Result<usize> {
        let hash = id_hash(id);
        let first = self.by_id.partition_point(|(h, _)| *h < hash);
        (self.by_id[first..].iter())
            .take_while(|(h, _)| *h == hash)
            .map(|(_, i)| *i as usize)
            .find(|i| *self.nodes[*i].id == *id)
            .ok_or_else(|| Error::UnknownNode(id.to_string()))
    }

    /// The clock, for operations that read it at most once (a batch shares one reading).
    fn now(&self) -> Now<'_> {
        Now {
            clock: &*self.clock,
            at: Cell::new(None),
        }
    }

    /// Tells the current membership's table that node `index` of this (older) one changed its
    /// in-flight count, if the node is still a member (the same load, not a re-added id).
    fn tell_current(&self, index: usize) {
        let Some(current) = self.current.upgrade() else {
            return;
        };
        let current = current.load();
        let current: &Snapshot = &current;
        if core::ptr::eq(current, self) {
            return;
        }
        let load = &self.table.loads()[index];
        if let Ok(i) = current.find(&self.nodes[index].id)
            && Arc::ptr_eq(&current.table.loads()[i], load)
        {
            current.table.moved(i);
        }
    }

    /// Ends a request on node `index` of this membership (see [`Lease`]).
    fn end(&self, index: usize, outcome: Option<Outcome>) {
        self.end_at(index, outcome, self.clock.now_ns());
    }

    /// [`Snapshot::end`] at `now`, a reading of this snapshot's clock.
    fn end_at(&self, index: usize, outcome: Option<Outcome>, now: u64) {
        let counted: Counted = (self.table).end_counting(index, outcome, &self.state, now);
        if self.table.tracks_load() && self.table.retired() {
            self.tell_current(index);
        }
        if counted.is_nothing() {
            return;
        }
        // The node is due for ejection or a pause, or an outlier-detection interval ended:
        // decided against the membership current now (issue 19, finding 4: a lease from an
        // older, larger membership ejected past the cap of the current one).
        let load = &self.table.loads()[index];
        match self.current.upgrade() {
            Some(current) => current.load().table.act(load, counted, &self.state, now),
            None => self.table.act(load, counted, &self.state, now), // the balancer is gone
        };
    }
}

/// One clock reading, taken the first time an operation asks for it.
struct Now<'a> {
    clock: &'a dyn Clock,
    at: Cell<Option<u64>>,
}

impl Now<'_> {
    #[inline]
    fn get(&self) -> u64 {
        match self.at.get() {
            Some(at) => at,
            None => {
                let at = self.clock.now_ns();
                self.at.set(Some(at));
                at
            }
        }
    }
}

/// A monotonic time source in nanoseconds. The balancer reads it to stamp latency samples and
/// decay estimates; tests and simulations substitute a [`ManualClock`].
pub trait Clock: Send + Sync + core::fmt::Debug {
    /// Nanoseconds since an arbitrary fixed origin; never decreases.
    fn now_ns(&self) -> u64;
}

/// The default clock: nanoseconds since one origin per process (liblb's first reading of it).
/// Every balancer and budget on this clock tells the same time, so a [`Budget`](crate::Budget)
/// shared by several balancers, or fed by the caller between requests, sees one time line
/// whichever balancer was made first.
///
/// Where the kernel itself keeps time with the CPU's time-stamp counter (Linux's clocksource is
/// `tsc`: the kernel found it invariant and in step across CPUs), the clock reads the counter
/// directly through the `quanta` crate, calibrated once per process against the OS monotonic
/// clock (about a millisecond, on the first reading). That skips `clock_gettime`'s vDSO work: on
/// this project's VM a reading costs about a third of `Instant::now()`'s (issue 23, item 2;
/// BENCHMARKS.md). Elsewhere it reads `std::time::Instant`.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock(());

impl Default for MonotonicClock {
    /// The clock, its source chosen (and the counter calibrated) now if this is the process's
    /// first: balancers take it when they are made, so no request pays for the calibration.
    fn default() -> MonotonicClock {
        SOURCE.get_or_init(TimeSource::new);
        MonotonicClock(())
    }
}

/// The process's time source and origin for [`MonotonicClock`].
static SOURCE: std::sync::OnceLock<TimeSource> = std::sync::OnceLock::new();

#[derive(Debug)]
enum TimeSource {
    /// The calibrated time-stamp counter, and its raw reading at the origin.
    Counter(quanta::Clock, u64),
    /// The OS monotonic clock, and the origin.
    Os(std::time::Instant),
}

impl TimeSource {
    fn new() -> TimeSource {
        if kernel_uses_tsc() {
            let clock = quanta::Clock::new();
            let origin = clock.raw();
            TimeSource::Counter(clock, origin)
        } else {
            TimeSource::Os(std::time::Instant::now())
        }
    }
}

/// Whether the kernel keeps time with the time-stamp counter: it checked the counter's
/// stability and cross-CPU sync before choosing it, and switches away (to `hpet`, `kvm-clock`,
/// ...) when it cannot trust it. quanta only checks that the CPU claims an invariant counter.
/// Miri cannot read the file (isolation) nor interpret the counter: it gets the OS clock.
fn kernel_uses_tsc() -> bool {
    !cfg!(miri)
        && cfg!(target_os = "linux")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

impl MonotonicClock {
    /// Nanoseconds since the process's origin: what every balancer's default clock reads.
    #[inline]
    pub fn now() -> u64 {
        match SOURCE.get_or_init(TimeSource::new) {
            TimeSource::Counter(clock, origin) => clock.delta_as_nanos(*origin, clock.raw()),
            TimeSource::Os(origin) => origin.elapsed().as_nanos() as u64,
        }
    }

    /// Which time source the process's clock reads: `"tsc"` (the calibrated time-stamp
    /// counter) or `"os"` (`std::time::Instant`).
    pub fn source() -> &'static str {
        match SOURCE.get_or_init(TimeSource::new) {
            TimeSource::Counter(..) => "tsc",
            TimeSource::Os(_) => "os",
        }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        MonotonicClock::now()
    }
}

/// A clock that moves only when told: for tests and discrete-event simulations.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicU64);

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Duration) -> ManualClock {
        ManualClock(std::sync::atomic::AtomicU64::new(start.as_nanos() as u64))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        // Relaxed: the reading orders nothing else.
        self.0
            .fetch_add(by.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the clock to `to` (callers keep it monotonic).
    pub fn set(&self, to: Duration) {
        self.0
            .store(to.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A thread-safe load balancer: an algorithm, its options and a membership.
///
/// Memory: each thread that picks keeps a pin of the membership it last picked from (one per
/// balancer, for its last four balancers), so picks take no lock and no locked instruction. A
/// pin outlives a membership change, or the balancer itself, until that thread misses in its
/// cache (a pick from a balancer whose membership changed, or one it holds no pin for) or
/// exits: a thread that keeps picking from one unchanged balancer holds a dropped balancer's
/// last table until then, and the miss that releases it pays for freeing it.
pub struct Balancer {
    options: Options,
    clock: Arc<dyn Clock>,
    current: Arc<Published<Snapshot>>,
    /// Bumped after every publish: validates the threads' pins of `current`.
    #[cfg(all(not(loom), target_has_atomic = "64"))]
    version: Arc<crate::pin::Version<Snapshot>>,
    state: Arc<State>,
    /// Serialises writers only (picks never touch it), and holds what the caller said of
    /// localities, which every rebuild reads.
    writer: Mutex<Routing>,
    /// The budget every [`Balancer::request`] gets (see [`Balancer::set_budget`]).
    budget: std::sync::RwLock<Option<Budget>>,
    /// Whether `budget` is set: a request reads one flag when it is not.
    budgeted: core::sync::atomic::AtomicBool,
}

/// A node as listed by [`Balancer::nodes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id.
    pub id: String,
    /// Its weight (0 = drained).
    pub weight: u32,
    /// The caller's tag.
    pub tag: u64,
    /// Its locality (`region/zone/sub_zone`, as given).
    pub locality: String,
    /// Its priority level (0 = most preferred).
    pub priority: u32,
}

/// A node's load as listed by [`Balancer::stats`].
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStats {
    /// The node's id.
    pub id: String,
    /// Its weight (0 = drained).
    pub weight: u32,
    /// The caller's tag.
    pub tag: u64,
    /// Its locality (`region/zone/sub_zone`, as given).
    pub locality: String,
    /// Its priority level (0 = most preferred).
    pub priority: u32,
    /// Requests started (leases acquired) and not yet ended.
    pub in_flight: usize,
    /// Requests ended with an outcome (finished leases and reports).
    pub requests: u64,
    /// Of those, failures.
    pub failures: u64,
    /// Peak-EWMA latency as of its last sample; `None` before any.
    pub latency: Option<Duration>,
    /// Its health now: healthy, warming (slow start), ejected (until when) or down.
    pub status: Status,
}

/// A request in progress on one node: in-flight + 1 from [`Balancer::acquire`] until it ends.
/// End it with [`Lease::finish`] (or [`Lease::success`] / [`Lease::failure`], which measure the
/// latency with the balancer's clock); a lease dropped unfinished ends as *cancelled*
/// (in-flight released, nothing counted). A lease keeps its snapshot alive, so its id stays
/// valid and ending it is harmless even after its node was removed (the removed node's
/// counters are simply no longer listed). The price: a lease that lives across membership
/// changes holds its membership's table until it ends (2.9 MiB for a 1,000-node `ring`; see
/// `docs/health.md`, "Memory held by leases"). If its failure ejects the node, the cap
/// (`max_ejection_percent`) is that of the membership current when it ends.
pub struct Lease {
    snapshot: Held,
    index: usize,
    started_ns: u64,
    ended: bool,
}

impl Lease {
    /// The node's id.
    pub fn id(&self) -> &str {
        &self.snapshot.nodes[self.index].id
    }

    /// The node's caller tag.
    pub fn tag(&self) -> u64 {
        self.snapshot.nodes[self.index].tag
    }

    /// The node's weight when the lease was acquired.
    pub fn weight(&self) -> u32 {
        self.snapshot.nodes[self.index].weight
    }

    /// The node's position in [`Lease::members`].
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The membership the lease's node was chosen from: every node, in insertion order.
    pub fn members(&self) -> &[Node] {
        &self.snapshot.nodes
    }

    /// [`Picked::attachment`] for the lease's membership (the same value a [`Picked`] from
    /// that membership sees): bindings find the node's id string there by [`Lease::index`].
    #[inline]
    pub fn attachment<T: Any + Send + Sync>(&self, make: impl FnOnce(&[Node]) -> T) -> Option<&T> {
        self.snapshot.attachment(make)
    }

    /// When the lease was acquired, by the balancer's clock (nanoseconds).
    pub(crate) fn started_ns(&self) -> u64 {
        self.started_ns
    }

    /// Time since the lease was acquired, by the balancer's clock.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.snapshot.clock.now_ns().saturating_sub(self.started_ns))
    }

    /// Ends the request with `outcome` (its latency as the caller measured it).
    pub fn finish(mut self, outcome: Outcome) {
        self.end(Some(outcome));
    }

    /// Ends the request with `outcome` and the load report its answer carried (an ORCA
    /// `endpoint-load-metrics` header or trailer: see [`Balancer::report_load`]).
    pub fn finish_with_load(self, outcome: Outcome, load: &LoadReport) {
        self.report_load(load);
        self.finish(outcome);
    }

    /// Takes the load report the answer carried, as received now, without ending the request
    /// ([`Balancer::report_load`] for the lease's node, which stays valid even after its node
    /// was removed). A report with the named metric `rif` is also a probe answer for
    /// `prequal`, its latency the metric `latency_ms` or else this request's so far.
    pub fn report_load(&self, load: &LoadReport) {
        let now = self.snapshot.clock.now_ns();
        let elapsed = Duration::from_nanos(now.saturating_sub(self.started_ns));
        (self.snapshot.table).record_load(self.index, load, Some(elapsed), now);
    }

    /// Ends the request as a success, its latency measured since `acquire`.
    pub fn success(self) {
        self.finish_measured(Outcome::Success);
    }

    /// Ends the request as a failure, its latency measured since `acquire`.
    pub fn failure(self) {
        self.finish_measured(Outcome::Failure);
    }

    /// Ends the request with `outcome(latency since acquire)`: one clock reading serves both
    /// the latency and the end.
    fn finish_measured(mut self, outcome: impl FnOnce(Duration) -> Outcome) {
        if !core::mem::replace(&mut self.ended, true) {
            let now = self.snapshot.clock.now_ns();
            let latency = Duration::from_nanos(now.saturating_sub(self.started_ns));
            self.snapshot
                .end_at(self.index, Some(outcome(latency)), now);
        }
    }

    fn end(&mut self, outcome: Option<Outcome>) {
        if !core::mem::replace(&mut self.ended, true) {
            self.snapshot.end(self.index, outcome);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.end(None);
    }
}

impl core::fmt::Debug for Lease {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Lease").field(&self.id()).finish()
    }
}

/// The answer to a pick. Holds the snapshot it was chosen from, so `id()` stays valid even if
/// the node is removed meanwhile; drop it promptly (it pins that snapshot's memory).
pub struct Picked {
    snapshot: Held,
    index: usize,
}

impl Picked {
    /// The chosen node's id.
    #[inline]
    pub fn id(&self) -> &str {
        &self.snapshot.nodes[self.index].id
    }

    /// The chosen node's weight.
    pub fn weight(&self) -> u32 {
        self.snapshot.nodes[self.index].weight
    }

    /// The chosen node's caller tag.
    #[inline]
    pub fn tag(&self) -> u64 {
        self.snapshot.nodes[self.index].tag
    }

    /// The chosen node's position in [`Picked::members`].
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The membership this answer was chosen from: every node, in insertion order.
    pub fn members(&self) -> &[Node] {
        &self.snapshot.nodes
    }

    /// A value derived from this answer's membership, shared by every answer from it: made by
    /// `make` (given [`Picked::members`]) the first time an answer from this membership asks,
    /// dropped with the membership. Bindings keep the ids as their own language's strings here
    /// (made once per membership, not once per pick); the [`Picked::index`] of an answer indexes
    /// a per-node list. `None` if a value of another type was attached to this membership first.
    #[inline]
    pub fn attachment<T: Any + Send + Sync>(&self, make: impl FnOnce(&[Node]) -> T) -> Option<&T> {
        self.snapshot.attachment(make)
    }
}

impl core::fmt::Debug for Picked {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Picked").field(&self.id()).finish()
    }
}

/// Several answers from one snapshot (`pick_many`, `attempts`).
pub struct Picks {
    snapshot: Held,
    indices: Vec<u32>,
}

impl Picks {
    /// Number of answers.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether there are no answers.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The answers' ids, in order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.indices
            .iter()
            .map(|i| &*self.snapshot.nodes[*i as usize].id)
    }

    /// The answers' tags, in order.
    pub fn tags(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.indices
            .iter()
            .map(|i| self.snapshot.nodes[*i as usize].tag)
    }

    /// The answers' positions in [`Picks::members`], in order.
    pub fn indices(&self) -> &[u32] {
        &self.indices
    }

    /// The membership these answers were chosen from: every node, in insertion order.
    pub fn members(&self) -> &[Node] {
        &self.snapshot.nodes
    }

    /// [`Picked::attachment`] for these answers' membership (the same value a [`Picked`] from
    /// that membership sees).
    pub fn attachment<T: Any + Send + Sync>(&self, make: impl FnOnce(&[Node]) -> T) -> Option<&T> {
        self.snapshot.attachment(make)
    }
}

impl core::fmt::Debug for Picks {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.ids()).finish()
    }
}

impl Balancer {
    /// A balancer over `nodes`. Fails on invalid options or ids, or duplicate ids. An empty
    /// node list is allowed (picks fail with [`Error::NoNodes`] until a node is added).
    pub fn new<N: Into<Node>>(
        algorithm: Algorithm,
        nodes: impl IntoIterator<Item = N>,
        options: Options,
    ) -> Result<Balancer> {
        Balancer::with_clock(
            algorithm,
            nodes,
            options,
            Arc::new(MonotonicClock::default()),
        )
    }

    /// [`Balancer::new`] with its time source given: latency samples and the decay of
    /// estimates follow `clock` (a [`ManualClock`] in tests and simulations).
    pub fn with_clock<N: Into<Node>>(
        algorithm: Algorithm,
        nodes: impl IntoIterator<Item = N>,
        options: Options,
        clock: Arc<dyn Clock>,
    ) -> Result<Balancer> {
        let nodes: Vec<Node> = nodes.into_iter().map(Into::into).collect();
        let mut options = options;
        if options.subset == Some(SubsetAlgorithm::Random)
            && options.subset_seed.is_none()
            && options.seed.is_none()
        {
            // A68: each client draws its own seed, once; kept for every membership change.
            options.subset_seed = Some(crate::state::entropy());
        }
        let table = Table::build(algorithm, &options, &nodes)?;
        let state = Arc::new(State::for_options(&options));
        let current = Arc::new_cyclic(|current| {
            Published::new(Snapshot::new(
                nodes,
                table,
                clock.clone(),
                state.clone(),
                current.clone(),
            ))
        });
        Ok(Balancer {
            options,
            clock,
            current,
            #[cfg(all(not(loom), target_has_atomic = "64"))]
            version: Arc::default(),
            state,
            writer: Mutex::new(Routing::default()),
            budget: std::sync::RwLock::new(None),
            budgeted: core::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The current snapshot, as the calling thread's pin.
    #[inline]
    fn held(&self) -> Held {
        #[cfg(all(not(loom), target_has_atomic = "64"))]
        return match crate::pin::pinned(&self.version, || self.current.load_full()) {
            Some(pinned) => Held::Pinned(pinned),
            None => Held::Guarded(self.current.load()),
        };
        #[cfg(all(not(loom), not(target_has_atomic = "64")))]
        return self.current.load();
        #[cfg(loom)]
        return self.current.load_full();
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.held().table.algorithm()
    }

    /// The options the balancer was built with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Picks a node. Keyed algorithms need `key`; the others ignore it.
    #[inline(always)]
    pub fn pick(&self, key: Option<&[u8]>) -> Result<Picked> {
        let snapshot = self.held();
        let clock = &snapshot.clock;
        let index = (snapshot.table).pick_with(key, &self.state, || clock.now_ns())?;
        Ok(Picked { snapshot, index })
    }

    /// The node for a caller's 64-bit key hash (gRPC's request hash, a Guava user's hash):
    /// the same answer as `pick` gives a key with that hash. For `ring_hash`, `maglev`,
    /// `rendezvous` and `jump` ([`Algorithm::takes_hash`]); others fail with
    /// [`Error::HashUnsupported`].
    pub fn pick_hash(&self, hash: u64) -> Result<Picked> {
        let snapshot = self.held();
        let clock = &snapshot.clock;
        let index = (snapshot.table).pick_hash_with(hash, &self.state, || clock.now_ns())?;
        Ok(Picked { snapshot, index })
    }

    /// [`Balancer::attempts`] for a 64-bit key hash (see [`Balancer::pick_hash`]).
    pub fn attempts_hash(&self, hash: u64, limit: usize) -> Result<Picks> {
        let snapshot = self.held();
        let mut indices = Vec::new();
        let now = || snapshot.clock.now_ns();
        (snapshot.table).attempts_hash_with(hash, &self.state, now, limit, &mut indices)?;
        Ok(Picks { snapshot, indices })
    }

    /// Picks a node and starts a request on it (its in-flight count + 1) until the returned
    /// [`Lease`] ends. The load-aware algorithms read these counts; every algorithm keeps them
    /// for [`Balancer::stats`].
    pub fn acquire(&self, key: Option<&[u8]>) -> Result<Lease> {
        let snapshot = self.held();
        let now = snapshot.clock.now_ns();
        let index = snapshot.table.pick(key, &self.state, now)?;
        snapshot.table.start(index, &self.state);
        Ok(Lease {
            snapshot,
            index,
            started_ns: now,
            ended: false,
        })
    }

    /// A request routed through this balancer, with `key` (keyed algorithms need one): one
    /// lease per attempt on distinct nodes, retries under a policy and a budget (see
    /// [`Request`]).
    pub fn request<K: AsRef<[u8]>>(&self, key: Option<K>) -> Request<&Balancer, K> {
        Request::new(self, key)
    }

    /// Sets the budget every request made after this gets (a request may still be given its
    /// own with [`Request::with_budget`]); `None` removes it. Share one budget between
    /// balancers whose retries should share one limit.
    pub fn set_budget(&self, budget: Option<Budget>) {
        let mut slot = self.budget.write().unwrap_or_else(|e| e.into_inner());
        self.budgeted
            .store(budget.is_some(), core::sync::atomic::Ordering::Release);
        *slot = budget;
    }

    /// The budget requests get by default (see [`Balancer::set_budget`]).
    pub fn budget(&self) -> Option<Budget> {
        if !self.budgeted.load(core::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.budget
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A lease on the node at `position` of `picks` (the membership they were chosen from).
    pub(crate) fn lease_from(&self, picks: Picks, position: usize) -> Lease {
        let index = picks.indices[position] as usize;
        let snapshot = picks.snapshot;
        let now = snapshot.clock.now_ns();
        snapshot.table.start(index, &self.state);
        Lease {
            snapshot,
            index,
            started_ns: now,
            ended: false,
        }
    }

    /// 64 random bits from the balancer's generator (its seed's sequence, shared with picks).
    pub(crate) fn random(&self) -> u64 {
        self.state.rng.next()
    }

    /// Records the outcome of a request the caller routed itself (after `pick`): one more
    /// request, one more failure if it failed, its latency into the estimate; in-flight is not
    /// touched. Fails on an unknown id.
    pub fn report(&self, id: &str, outcome: Outcome) -> Result<()> {
        let snapshot = self.held();
        let index = snapshot.find(id)?;
        let now = snapshot.clock.now_ns();
        snapshot.table.record(index, outcome, &self.state, now);
        Ok(())
    }

    /// Takes a node's ORCA load report (see [`crate::parse_orca`]), as received now: for
    /// `client_side_wrr`, its weight (gRFC A58); for `prequal`, a probe answer when it carries
    /// the named metrics `rif` and `latency_ms` (as [`crate::ServerLoad`] reports do). Other
    /// algorithms keep it too, so a configuration can switch. Fails on an unknown id.
    pub fn report_load(&self, id: &str, report: &LoadReport) -> Result<()> {
        let snapshot = self.held();
        let index = snapshot.find(id)?;
        let now = snapshot.clock.now_ns();
        snapshot.table.record_load(index, report, None, now);
        Ok(())
    }

    /// The nodes picks choose from: with subsetting (option `subset`), this client's subset
    /// of the nodes with weight > 0, else every node with weight > 0; in node order.
    pub fn subset(&self) -> Picks {
        let snapshot = self.held();
        let indices = snapshot.table.active().map(|i| i as u32).collect();
        Picks { snapshot, indices }
    }

    /// Up to `count` distinct nodes to probe now, uniformly at random from the nodes with
    /// weight > 0 (drawn from the balancer's generator: seeded balancers replay). For
    /// `prequal`, whose caller runs the probes: send each a probe, and hand its answer to
    /// [`Balancer::offer_probe`]; [`Balancer::probes_due`] says how many picks asked for.
    /// Fails with [`Error::NoNodes`] when no node has weight > 0.
    pub fn probe_targets(&self, count: usize) -> Result<Picks> {
        let snapshot = self.held();
        let mut indices = Vec::new();
        (snapshot.table).probe_targets(&self.state, count, &mut indices)?;
        Ok(Picks { snapshot, indices })
    }

    /// A probe answer from node `id`, stamped with the balancer's clock: its requests in
    /// flight (`rif`) and its latency estimate, as Prequal's servers report them. `prequal`
    /// adds it to its pool; other algorithms accept and ignore it, so a configuration can
    /// switch algorithm without changing its callers. Fails on an unknown id, as
    /// [`Balancer::report`] does.
    pub fn offer_probe(&self, id: &str, rif: u32, latency: Duration) -> Result<()> {
        let snapshot = self.held();
        let index = snapshot.find(id)?;
        let now = snapshot.clock.now_ns();
        snapshot.table.offer_probe(index, rif, latency, now);
        Ok(())
    }

    /// How many probes the picks since the last call made due (`prequal`'s `probe_rate` per
    /// pick; 0 for other algorithms): ask [`Balancer::probe_targets`] for that many. Picks
    /// count towards the membership they were made in: a change starts the count afresh.
    pub fn probes_due(&self) -> usize {
        self.held().table.probes_due()
    }

    /// Takes a node out of service until [`Balancer::mark_up`] (for callers running active
    /// health checks): no rebuild, its weight and counters are kept, keyed algorithms move
    /// only its keys. Fails on an unknown id.
    pub fn mark_down(&self, id: &str) -> Result<()> {
        self.set_down(id, true)
    }

    /// Puts a node marked down back in service (warming up first if slow start is on).
    /// Fails on an unknown id.
    pub fn mark_up(&self, id: &str) -> Result<()> {
        self.set_down(id, false)
    }

    fn set_down(&self, id: &str, down: bool) -> Result<()> {
        let snapshot = self.held();
        let index = snapshot.find(id)?;
        let now = snapshot.clock.now_ns();
        snapshot.table.set_down(index, down, &self.state, now);
        Ok(())
    }

    /// Whether picks currently ignore health because fewer than `panic_threshold` percent of
    /// the nodes are healthy (Envoy's panic mode: traffic spreads over every node).
    pub fn panic(&self) -> bool {
        let snapshot = self.held();
        snapshot.table.panic(&self.state, snapshot.clock.now_ns())
    }

    /// Each node's load, in insertion order.
    pub fn stats(&self) -> Vec<NodeStats> {
        let snapshot = self.held();
        let loads = snapshot.table.loads();
        let now = snapshot.clock.now_ns();
        snapshot
            .nodes
            .iter()
            .zip(loads)
            .enumerate()
            .map(|(index, (node, load))| NodeStats {
                id: node.id.to_string(),
                weight: node.weight,
                tag: node.tag,
                locality: node.locality.to_string(),
                priority: node.priority,
                in_flight: load.in_flight(),
                requests: load.requests(),
                failures: load.failures(),
                latency: load.latency(),
                status: snapshot.table.status(index, now),
            })
            .collect()
    }

    /// The balancer's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Picks once per key, all from the same snapshot. For unkeyed algorithms the keys only
    /// count the picks.
    pub fn pick_many<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Result<Picks> {
        let snapshot = self.held();
        snapshot.table.check(Some(&[]))?;
        let now = snapshot.now();
        let keys = keys.into_iter();
        // The hint is the caller's claim: a lower bound over the limit fails before any pick;
        // the up-front reservation is capped and grows as keys actually arrive.
        let hint = keys.size_hint().0;
        if hint > MAX_BATCH {
            return Err(Error::BatchTooLarge(hint as u64));
        }
        let mut indices = Vec::with_capacity(hint.min(RESERVE_CAP));
        for key in keys {
            if indices.len() == MAX_BATCH {
                return Err(Error::BatchTooLarge(MAX_BATCH as u64 + 1));
            }
            indices.push((snapshot.table).pick_with(Some(key), &self.state, || now.get())? as u32);
        }
        Ok(Picks { snapshot, indices })
    }

    /// `count` unkeyed picks from the same snapshot (keyed algorithms fail with `KeyRequired`).
    pub fn pick_n(&self, count: usize) -> Result<Picks> {
        let snapshot = self.held();
        // Fail before reserving anything: an impossible pick must not turn a huge `count`
        // into an allocation failure (which aborts) instead of an error.
        snapshot.table.check(None)?;
        let now = snapshot.now();
        if count > MAX_BATCH {
            return Err(Error::BatchTooLarge(count as u64));
        }
        let mut indices = Vec::with_capacity(count.min(RESERVE_CAP));
        for _ in 0..count {
            indices.push((snapshot.table).pick_with(None, &self.state, || now.get())? as u32);
        }
        Ok(Picks { snapshot, indices })
    }

    /// Up to `limit` distinct nodes in retry order (seed 002's retry loop); the first is what
    /// `pick` would have returned.
    pub fn attempts(&self, key: Option<&[u8]>, limit: usize) -> Result<Picks> {
        let snapshot = self.held();
        let mut indices = Vec::new();
        let now = || snapshot.clock.now_ns();
        (snapshot.table).attempts_with(key, &self.state, now, limit, &mut indices)?;
        Ok(Picks { snapshot, indices })
    }

    /// The nodes, in insertion order.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.held()
            .nodes
            .iter()
            .map(|n| NodeInfo {
                id: n.id.to_string(),
                weight: n.weight,
                tag: n.tag,
                locality: n.locality.to_string(),
                priority: n.priority,
            })
            .collect()
    }

    /// Number of nodes (including drained ones).
    pub fn len(&self) -> usize {
        self.held().nodes.len()
    }

    /// Whether the balancer has no nodes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a node with this id exists.
    pub fn contains(&self, id: &str) -> bool {
        self.held().find(id).is_ok()
    }

    /// Adds a node at the end. Fails on an invalid or duplicate id.
    pub fn add(&self, node: impl Into<Node>) -> Result<()> {
        let node = node.into();
        // `Table::build` (inside `change`) rejects an invalid or duplicate id.
        self.change(|nodes| {
            nodes.push(node);
            Ok(())
        })
    }

    /// Removes a node. Fails on an unknown id.
    pub fn remove(&self, id: &str) -> Result<()> {
        self.change(|nodes| {
            let i = position(nodes, id)?;
            nodes.remove(i);
            Ok(())
        })
    }

    /// Changes a node's weight (0 drains it). Fails on an unknown id.
    pub fn set_weight(&self, id: &str, weight: u32) -> Result<()> {
        self.change(|nodes| {
            let i = position(nodes, id)?;
            nodes[i].weight = weight;
            Ok(())
        })
    }

    /// Moves a node to `locality` at `priority` (a membership change, as a weight change is).
    /// Fails on an unknown id or an invalid locality, changing nothing.
    pub fn set_location(&self, id: &str, locality: &str, priority: u32) -> Result<()> {
        self.change(|nodes| {
            let i = position(nodes, id)?;
            nodes[i].locality = Box::from(locality);
            nodes[i].priority = priority;
            Ok(())
        })
    }

    /// Replaces the whole membership atomically. Fails (changing nothing) on any invalid or
    /// duplicate id.
    pub fn update<N: Into<Node>>(&self, nodes: impl IntoIterator<Item = N>) -> Result<()> {
        let replacement: Vec<Node> = nodes.into_iter().map(Into::into).collect();
        self.change(move |nodes| {
            *nodes = replacement;
            Ok(())
        })
    }

    /// Turns on locality-weighted balancing (for the unkeyed algorithms): each locality's
    /// weight, scaled by its availability as Envoy does (`weight × min(1,
    /// overprovisioning_factor / 100 × usable / nodes)`), and localities chosen by Envoy's EDF
    /// schedule; a locality left out has weight 0. An empty list turns it off. Fails (changing
    /// nothing) on an invalid locality. See `docs/localities.md`.
    pub fn set_locality_weights<L: AsRef<str>>(
        &self,
        weights: impl IntoIterator<Item = (L, u32)>,
    ) -> Result<()> {
        let weights: Vec<(Box<str>, u32)> = (weights.into_iter())
            .map(|(l, w)| (Box::from(l.as_ref()), w))
            .collect();
        self.change_routed(|_, routing| {
            routing.locality_weights = weights;
            Ok(())
        })
    }

    /// The caller's own locality (`None`: unknown), for zone-aware routing together with
    /// [`Balancer::set_local_localities`]. Fails (changing nothing) on an invalid locality.
    pub fn set_local_locality(&self, locality: Option<&str>) -> Result<()> {
        self.change_routed(|_, routing| {
            routing.local_locality = locality.map(Box::from);
            Ok(())
        })
    }

    /// How the caller's own fleet is spread: instances per locality (Envoy's local cluster).
    /// With [`Balancer::set_local_locality`] it turns on zone-aware routing for the unkeyed
    /// algorithms: requests stay in the caller's locality as far as that locality's share of
    /// the usable nodes at priority 0 covers its share of the callers, the rest go to the
    /// localities with capacity to spare. An empty spread turns it off.
    pub fn set_local_localities<L: AsRef<str>>(
        &self,
        spread: impl IntoIterator<Item = (L, u64)>,
    ) -> Result<()> {
        let spread: Vec<(Box<str>, u64)> = (spread.into_iter())
            .map(|(l, n)| (Box::from(l.as_ref()), n))
            .collect();
        self.change_routed(|_, routing| {
            routing.local_localities = spread;
            Ok(())
        })
    }

    /// What the caller said of localities (see [`Routing`]).
    pub fn routing(&self) -> Routing {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Applies `edit` to a copy of the node list, builds its table and publishes both. Writers
    /// hold the mutex so no concurrent change is lost; on error nothing is published. Building
    /// the table validates the whole list (ids, duplicates, size): the one place that does.
    fn change(&self, edit: impl FnOnce(&mut Vec<Node>) -> Result<()>) -> Result<()> {
        self.change_routed(|nodes, _| edit(nodes))
    }

    /// [`Balancer::change`] that may also change the routing (locality weights, the caller's
    /// own locality and fleet): kept only if the new table builds.
    fn change_routed(
        &self,
        edit: impl FnOnce(&mut Vec<Node>, &mut Routing) -> Result<()>,
    ) -> Result<()> {
        // A writer that panicked left no partial state behind (it publishes whole snapshots),
        // so a poisoned mutex is safe to keep using.
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.current.load();
        let mut nodes = current.nodes.clone();
        let mut routing = writer.clone();
        edit(&mut nodes, &mut routing)?;
        // A node that stays keeps its load; a new one (or one re-added after removal)
        // starts fresh, and warms up if slow start is on.
        let mut joined = Vec::new();
        let loads = nodes
            .iter()
            .enumerate()
            .map(|(at, n)| match current.find(&n.id) {
                Ok(i) => current.table.loads()[i].clone(),
                Err(_) => {
                    joined.push(at);
                    Arc::default()
                }
            })
            .collect();
        let algorithm = current.table.algorithm();
        let table = Table::build_routed(algorithm, &self.options, &routing, &nodes, loads)?;
        *writer = routing;
        let now = self.clock.now_ns();
        for at in joined {
            table.warm_up(at, &self.state, now);
        }
        let snapshot = Snapshot::new(
            nodes,
            table,
            self.clock.clone(),
            self.state.clone(),
            Arc::downgrade(&self.current),
        );
        let snapshot = Arc::new(snapshot);
        self.current.store(snapshot.clone());
        // Requests ending on the old table from now on also tell the new one; those that
        // ended since it was built are read here.
        current.table.retire();
        snapshot.table.resync();
        #[cfg(all(not(loom), target_has_atomic = "64"))]
        self.version.bump();
        // Nodes came or went: the health summary (panic, what is pending) now describes the
        // new table, rescanned by its next pick; picks still holding older tables no longer
        // rescan it.
        snapshot.table.touch_health(&self.state);
        Ok(())
    }
}

fn position(nodes: &[Node], id: &str) -> Result<usize> {
    nodes
        .iter()
        .position(|n| &*n.id == id)
        .ok_or_else(|| Error::UnknownNode(id.to_string()))
}

#[cfg(all(not(loom), target_has_atomic = "64"))]
impl Drop for Balancer {
    /// Threads' pins of this balancer's snapshot become stale: each is freed at its thread's
    /// next cache miss or exit (see [`Balancer`]'s memory note).
    fn drop(&mut self) {
        self.version.retire();
    }
}

impl core::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let snapshot = self.current.load();
        f.debug_struct("Balancer")
            .field("algorithm", &snapshot.table.algorithm())
            .field("nodes", &snapshot.nodes.len())
            .field("options", &self.options)
            .finish()
    }
}

// Compile-time proof that balancers and their answers can cross and be shared across threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Balancer>();
    assert_send_sync::<Picked>();
    assert_send_sync::<Picks>();
    assert_send_sync::<Lease>();
    assert_send_sync::<Table>();
    assert_send_sync::<State>();
};
