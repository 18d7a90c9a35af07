//! Balancer options, and algorithm names parsed the same way for every language (the
//! [`Algorithm`] list itself is registered in `select`).

pub use crate::select::Algorithm;
use crate::select::{maglev, ring_hash};
use crate::subset::{SubsetAlgorithm, SubsetSpec};
use crate::{DEFAULT_VNODES, Error, HashKind, MAX_RING_POINTS, MAX_VNODES, Result};
use alloc::string::{String, ToString};
use core::fmt;
use core::str::FromStr;
use core::time::Duration;

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    fn from_str(name: &str) -> Result<Algorithm> {
        Self::NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| Error::UnknownAlgorithm(name.to_string()))
    }
}

/// A loosely typed option value, as bindings and the command line receive them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionValue<'a> {
    /// An integer (`seed`, `vnodes`).
    Int(u64),
    /// Text (`hash`); integer options also accept decimal text.
    Str(&'a str),
}

/// Balancer options. Options an algorithm does not use are accepted and ignored, so a
/// deployment can switch algorithm by configuration alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Seed for the random algorithms: the same seed gives the same single-threaded sequence in
    /// every language. `None` seeds from OS entropy, so two processes never march in lockstep.
    pub seed: Option<u64>,
    /// Ring points per unit of weight; default [`DEFAULT_VNODES`].
    pub vnodes: u32,
    /// `ring`'s point budget: a ring that would hold more than this many points
    /// (`vnodes · Σweights`) is scaled down to it proportionally, each node keeping at least
    /// one point. Default and at most [`MAX_RING_POINTS`] (2^22), which keeps seed 001's layout;
    /// a smaller budget shrinks heavily weighted rings (14-16 bytes a point) at the cost of exact
    /// minimal movement once the budget binds. At least 1.
    pub max_ring_points: u64,
    /// Key and point hash; `None` is the algorithm's default (ring: sha256, source_hash: xxh3).
    pub hash: Option<HashKind>,
    /// Candidates `least_request` draws per pick (Envoy's `choice_count`): 2..=16, default 2.
    pub choice_count: u32,
    /// How fast latency estimates forget (peak-EWMA decay period); default 10 s (Finagle,
    /// linkerd). Option name `decay_ms`.
    pub decay: Duration,
    /// The latency `peak_ewma` assumes for a node with no sample yet; default 30 ms
    /// (linkerd's default RTT). Option name `initial_latency_ms`.
    pub initial_latency: Duration,
    /// `maglev`'s lookup table size: a prime up to 5,000,011; default 65537 (Envoy's).
    pub table_size: u64,
    /// `ring_hash`'s smallest ring (Envoy's `minimum_ring_size`): default 1024.
    pub min_ring_size: u64,
    /// `ring_hash`'s largest ring (Envoy's `maximum_ring_size`): default and at most 8M.
    pub max_ring_size: u64,
    /// Consecutive failures (leases finished as failures, or reported) that eject a node, as
    /// Envoy's `consecutive_5xx`; default 5, 0 = never eject.
    pub consecutive_failures: u32,
    /// An ejection lasts this times the number of times the node was ejected (Envoy's
    /// `base_ejection_time`); default 30 s. Option name `base_ejection_time_ms`.
    pub base_ejection_time: Duration,
    /// The longest an ejection lasts (Envoy's `max_ejection_time`); default 300 s, or
    /// `base_ejection_time` if that is longer (Envoy's rule) while
    /// [`Options::max_ejection_time_set`] is false. Option name `max_ejection_time_ms`.
    pub max_ejection_time: Duration,
    /// Whether `max_ejection_time` was given: [`Options::set`] sets this with
    /// `max_ejection_time_ms`; until then it keeps `max_ejection_time` at the larger of 300 s
    /// and `base_ejection_time`, as Envoy's default does. Code writing `max_ejection_time`
    /// directly should set this too. Default false.
    pub max_ejection_time_set: bool,
    /// At most this percentage of the nodes is ejected at once, but always at least one node
    /// may be (Envoy's `max_ejection_percent`); default 10.
    pub max_ejection_percent: u32,
    /// When fewer than this percentage of the nodes is healthy, picks ignore health and use
    /// every node (Envoy's `healthy_panic_threshold`); default 50, 0 = never.
    pub panic_threshold: u32,
    /// A node added to the balancer, back from ejection or marked up ramps its share up over
    /// this window (Envoy's `slow_start_window`); default 0 = no slow start. Option name
    /// `slow_start_window_ms`.
    pub slow_start_window: Duration,
    /// The ramp's shape: share = `max(min_weight_percent, (t / window)^(1 / aggression))`
    /// (Envoy's `aggression`); default 1.0 (linear), must be > 0.
    pub slow_start_aggression: f64,
    /// The share a warming node starts at, in percent of its weight (Envoy's
    /// `min_weight_percent`); default 10.
    pub min_weight_percent: u32,
    /// Bounded loads for the keyed algorithms (Envoy's `hash_balance_factor`, HAProxy's
    /// `hash-balance-factor`; Mirrokni, Thorup & Zadimoghaddam 2018), in percent: a key goes to
    /// the first node in its retry order whose in-flight count is below
    /// `ceil(factor / 100 · (total in-flight + 1) · weight share)`. 0 = off; else at least 100.
    pub hash_balance_factor: u32,
    /// What a failure costs `peak_ewma`'s latency estimate: at least this, or the node's
    /// retry-after when longer (linkerd's failure-aware P2C penalty, default 5 s); 0 = a
    /// failure samples its own latency only. Option name `failure_penalty_ms`.
    pub failure_penalty: Duration,
    /// The longest an overloaded node's retry-after keeps it out of picks (and counts in its
    /// failure penalty); default 60 s, 0 = retry-afters never pause a node. Option name
    /// `max_retry_after_ms`.
    pub max_retry_after: Duration,
    /// How often success-rate and failure-percentage ejection look at the last interval's
    /// outcomes (Envoy's `interval`); default 10 s. The look happens lazily, on the first
    /// outcome reported after an interval ends. Option name `interval_ms`.
    pub interval: Duration,
    /// Success-rate ejection runs only when at least this many nodes had
    /// `success_rate_request_volume` outcomes in the interval (Envoy's
    /// `success_rate_minimum_hosts`); default 5.
    pub success_rate_minimum_hosts: u32,
    /// The outcomes a node needs in an interval to count for success-rate ejection (Envoy's
    /// `success_rate_request_volume`); default 100.
    pub success_rate_request_volume: u32,
    /// A node is ejected when its success rate is below mean − stdev × this / 1000 (Envoy's
    /// `success_rate_stdev_factor`); default 1900 (1.9).
    pub success_rate_stdev_factor: u32,
    /// The chance, in percent, that a node found below the success-rate threshold is ejected
    /// (Envoy's `enforcing_success_rate`); default 100, 0 = success-rate ejection off.
    pub enforcing_success_rate: u32,
    /// A node whose failures are at least this percentage of its outcomes in an interval is
    /// ejected (Envoy's `failure_percentage_threshold`); default 85.
    pub failure_percentage_threshold: u32,
    /// Failure-percentage ejection runs only when at least this many nodes had
    /// `failure_percentage_request_volume` outcomes in the interval; default 5.
    pub failure_percentage_minimum_hosts: u32,
    /// The outcomes a node needs in an interval to count for failure-percentage ejection;
    /// default 50.
    pub failure_percentage_request_volume: u32,
    /// The chance, in percent, that a node over the failure-percentage threshold is ejected
    /// (Envoy's `enforcing_failure_percentage`); default 0 = off, as in Envoy.
    pub enforcing_failure_percentage: u32,
    /// Round robin and smooth WRR: each thread takes this many whole rounds of positions at
    /// once, so threads do not contend pick by pick (shares stay exact per block); 0 (the
    /// default) keeps one exact global order. At most 2^20.
    pub thread_rounds: u32,
    /// Priority levels and localities: a level (or locality) with at least 100 / this share of
    /// its nodes usable takes its full share of traffic; below that, the rest spills to the
    /// next level (Envoy's `overprovisioning_factor`, in percent); default 140, at least 1.
    pub overprovisioning_factor: u32,
    /// Zone-aware routing needs at least this many usable nodes at priority 0 (Envoy's
    /// `min_cluster_size`); default 6.
    pub zone_aware_min_cluster_size: u64,
    /// The percentage of picks that zone-aware routing routes (Envoy's `routing_enabled`);
    /// the others spread over every locality; default 100.
    pub zone_aware_routing_enabled: u32,
    /// Zone-aware routing weighs localities by their usable nodes' weights (1, Envoy's
    /// `HEALTHY_HOSTS_WEIGHT`) instead of counting them (0, the default: `HEALTHY_HOSTS_NUM`).
    pub zone_aware_by_weight: u32,
    /// `client_side_wrr`: a node's reported weight counts only after it has reported for this
    /// long without a gap of `weight_expiration_period` (gRFC A58 `blackout_period`); default
    /// 10 s, 0 = no blackout. Option name `blackout_period_ms`.
    pub blackout_period: Duration,
    /// `client_side_wrr`: a reported weight older than this is dropped and the node weighs the
    /// mean again (A58 `weight_expiration_period`); default 3 min, at least 1 ms. Option name
    /// `weight_expiration_period_ms`.
    pub weight_expiration_period: Duration,
    /// `client_side_wrr`: how often picks rebuild the scheduler from the reported weights (A58
    /// `weight_update_period`); default 1 s, values below 100 ms count as 100 ms (as gRPC
    /// does). Option name `weight_update_period_ms`.
    pub weight_update_period: Duration,
    /// `client_side_wrr`: how much a node's errors per second weigh against it, as utilisation
    /// (weight = qps / (utilisation + eps / qps × this); A58 `error_utilization_penalty`);
    /// default 1.0, at least 0. A number (decimal text accepted).
    pub error_utilization_penalty: f64,
    /// `prequal`'s probe pool: how many recent probe answers a pick chooses among (Prequal's
    /// pool of probe responses, Wydrowski et al., NSDI '24); default 16 as in the paper, 1 to
    /// 64 (a pick copies the pool onto its stack).
    pub probe_pool_size: u32,
    /// `prequal`'s Q_RIF, as a fraction from 0 to 1: a probe whose requests-in-flight exceed
    /// this quantile of the recently probed RIF values is *hot*; default 0.84 (the paper's).
    /// Option `q_rif`: an integer is a percentage (`84`), text with a decimal point or an
    /// exponent the paper's fraction (`"0.84"`).
    pub q_rif: f64,
    /// `prequal`'s r_probe: probes due per pick (fractions accumulate: 0.5 is one probe every
    /// other pick), which [`Balancer::probes_due`](crate::Balancer) hands out; default 3, 0 to
    /// 64. 0: the caller probes on its own schedule.
    pub probe_rate: f64,
    /// `prequal`'s b_reuse: how many picks one probe answer may serve before it leaves the
    /// pool; default 2, 1 to 63 (a 6-bit use count in the pool's words).
    pub probe_reuse: u32,
    /// `prequal`: a probe answer older than this leaves the pool; default 1 s, at least 1 ms.
    /// Option name `max_probe_age_ms`.
    pub max_probe_age: Duration,
    /// `prequal`'s r_remove: the worst probe in the pool (the hottest, or if none is hot the
    /// slowest) is removed at this rate per pick; default 1, 0 to 16.
    pub probe_remove_rate: f64,
    /// Subsetting (see [`crate::subset`]): the algorithm that chooses this client's subset of
    /// the nodes, on which the balancer's algorithm then runs; `None` (the default) uses every
    /// node. Option `subset`: `deterministic`, `random`, `ringsteady` or `aperture`; unkeyed
    /// algorithms only.
    pub subset: Option<SubsetAlgorithm>,
    /// Subsetting: how many nodes the client's subset holds (`subset_size`, A68's
    /// `subset_size`, Finagle's minimum aperture); required with `subset`, 0 (the default)
    /// is unset.
    pub subset_size: u64,
    /// Subsetting: this client's index among the clients sharing the nodes, `0..client_count`
    /// (a StatefulSet's ordinal, a job's task number); default 0. Read by `deterministic`,
    /// `ringsteady` and `aperture`.
    pub client_index: u64,
    /// Subsetting: how many clients share the nodes; default 1. Read by `aperture`.
    pub client_count: u64,
    /// Subsetting: `random`'s per-client hash seed (A68: each client draws its own, once) and
    /// the fleet-wide seed of `deterministic`'s shuffles. `None`: for `random`, derived from
    /// `seed` when that is set, else drawn from OS entropy when a balancer is made (a `Table`
    /// needs one of the two); for the others 0, the same in every client.
    pub subset_seed: Option<u64>,
}

/// `max_ejection_time`'s default (Envoy's `DEFAULT_MAX_EJECTION_TIME_MS`), raised to
/// `base_ejection_time` when that is longer.
pub const DEFAULT_MAX_EJECTION_TIME: Duration = Duration::from_secs(300);

/// `failure_penalty`'s default: linkerd's `penalty` (`PenaltyPeakEwma`, client-policy).
pub const DEFAULT_FAILURE_PENALTY: Duration = Duration::from_secs(5);

/// `max_retry_after`'s default.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// What `subset` accepts.
const SUBSET_NAMES: &str = "one of deterministic, random, ringsteady, aperture";

/// Mixed into `seed` for the subset seed derived from it ("subset" in ASCII).
const SUBSET_SALT: u64 = 0x7375_6273_6574;

/// Most candidates `least_request` draws per pick.
pub const MAX_CHOICE_COUNT: u32 = 16;

/// Largest `probe_pool_size`: a pick copies the pool (one 64-bit word a probe) onto its stack.
pub const MAX_PROBE_POOL_SIZE: u32 = 64;

/// Largest `probe_reuse`: a probe's use count is 6 bits of its pool word.
pub const MAX_PROBE_REUSE: u32 = 63;

/// Largest `probe_rate` (probes per pick).
const MAX_PROBE_RATE: f64 = 64.0;

/// Largest `probe_remove_rate` (worst probes removed per pick).
const MAX_PROBE_REMOVE_RATE: f64 = 16.0;

impl Default for Options {
    fn default() -> Options {
        Options {
            seed: None,
            vnodes: DEFAULT_VNODES,
            max_ring_points: MAX_RING_POINTS,
            hash: None,
            choice_count: 2,
            decay: Duration::from_secs(10),
            initial_latency: Duration::from_millis(30),
            table_size: maglev::DEFAULT_TABLE_SIZE,
            min_ring_size: ring_hash::DEFAULT_MIN_RING_SIZE,
            max_ring_size: ring_hash::DEFAULT_MAX_RING_SIZE,
            consecutive_failures: 5,
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: DEFAULT_MAX_EJECTION_TIME,
            max_ejection_time_set: false,
            max_ejection_percent: 10,
            panic_threshold: 50,
            slow_start_window: Duration::ZERO,
            slow_start_aggression: 1.0,
            min_weight_percent: 10,
            hash_balance_factor: 0,
            interval: Duration::from_secs(10),
            success_rate_minimum_hosts: 5,
            success_rate_request_volume: 100,
            success_rate_stdev_factor: 1900,
            enforcing_success_rate: 100,
            failure_percentage_threshold: 85,
            failure_percentage_minimum_hosts: 5,
            failure_percentage_request_volume: 50,
            enforcing_failure_percentage: 0,
            failure_penalty: DEFAULT_FAILURE_PENALTY,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            thread_rounds: 0,
            overprovisioning_factor: crate::priority::DEFAULT_OVERPROVISIONING_FACTOR,
            zone_aware_min_cluster_size: 6,
            zone_aware_routing_enabled: 100,
            zone_aware_by_weight: 0,
            blackout_period: Duration::from_secs(10),
            weight_expiration_period: Duration::from_secs(180),
            weight_update_period: Duration::from_secs(1),
            error_utilization_penalty: 1.0,
            probe_pool_size: 16,
            q_rif: 0.84,
            probe_rate: 3.0,
            probe_reuse: 2,
            max_probe_age: Duration::from_secs(1),
            probe_remove_rate: 1.0,
            subset: None,
            subset_size: 0,
            client_index: 0,
            client_count: 1,
            subset_seed: None,
        }
    }
}

impl Options {
    /// Every option's name.
    pub const NAMES: &'static [&'static str] = &[
        "seed",
        "vnodes",
        "hash",
        "choice_count",
        "decay_ms",
        "initial_latency_ms",
        "table_size",
        "min_ring_size",
        "max_ring_size",
        "max_ring_points",
        "consecutive_failures",
        "base_ejection_time_ms",
        "max_ejection_time_ms",
        "max_ejection_percent",
        "panic_threshold",
        "slow_start_window_ms",
        "slow_start_aggression",
        "min_weight_percent",
        "hash_balance_factor",
        "thread_rounds",
        "failure_penalty_ms",
        "max_retry_after_ms",
        "interval_ms",
        "success_rate_minimum_hosts",
        "success_rate_request_volume",
        "success_rate_stdev_factor",
        "enforcing_success_rate",
        "failure_percentage_threshold",
        "failure_percentage_minimum_hosts",
        "failure_percentage_request_volume",
        "enforcing_failure_percentage",
        "overprovisioning_factor",
        "zone_aware_min_cluster_size",
        "zone_aware_routing_enabled",
        "zone_aware_by_weight",
        "blackout_period_ms",
        "weight_expiration_period_ms",
        "weight_update_period_ms",
        "error_utilization_penalty",
        "probe_pool_size",
        "q_rif",
        "probe_rate",
        "probe_reuse",
        "max_probe_age_ms",
        "probe_remove_rate",
        "subset",
        "subset_size",
        "client_index",
        "client_count",
        "subset_seed",
    ];

    /// The options that take any number, not only integers (decimal text such as `"1.5"`).
    /// `q_rif` reads an integer as a percentage and decimal text as a fraction (see
    /// [`Options::q_rif`]).
    pub const NUMBER_NAMES: &'static [&'static str] = &[
        "slow_start_aggression",
        "error_utilization_penalty",
        "q_rif",
        "probe_rate",
        "probe_remove_rate",
    ];

    /// Sets an option by name. Only that option's own rule is checked here (its type and
    /// range), so options can be given in any order; rules between options (`min_ring_size` <=
    /// `max_ring_size`, `base_ejection_time_ms` <= `max_ejection_time_ms`) are checked once, by
    /// [`Options::validate`], which every balancer constructor calls. Unknown names and
    /// ill-typed or out-of-range values get specific errors and leave `self` unchanged.
    ///
    /// `max_ejection_time_ms` left unset follows `base_ejection_time_ms` as Envoy's default
    /// does: it is the larger of 300 s and the base ([`Options::max_ejection_time_set`]).
    pub fn set(&mut self, name: &str, value: OptionValue<'_>) -> Result<()> {
        let option = Self::NAMES
            .iter()
            .find(|n| **n == name)
            .copied()
            .ok_or_else(|| Error::UnknownOption(name.to_string()))?;
        let mut changed = *self;
        match option {
            "seed" => changed.seed = Some(int_value(option, value)?),
            "vnodes" => {
                let v = int_value(option, value)?;
                // Checked before narrowing: 2^32 + 1 must not wrap to a valid count.
                if v == 0 || v > u64::from(MAX_VNODES) {
                    return Err(Error::InvalidVnodes(v));
                }
                changed.vnodes = v as u32;
            }
            "hash" => match value {
                OptionValue::Str(s) => changed.hash = Some(s.parse()?),
                OptionValue::Int(i) => return Err(invalid(option, i.to_string(), "a hash name")),
            },
            "slow_start_aggression" => {
                let v = float_value(option, value, "a number above 0")?;
                if !(v.is_finite() && v > 0.0) {
                    // The value as given (`-1`, not `-1.0`).
                    let given = match value {
                        OptionValue::Int(i) => i.to_string(),
                        OptionValue::Str(s) => s.to_string(),
                    };
                    return Err(invalid(option, given, "a number above 0"));
                }
                changed.slow_start_aggression = v;
            }
            "error_utilization_penalty" => {
                let v = float_value(option, value, PENALTY_RANGE)?;
                if !(v.is_finite() && v >= 0.0) {
                    let given = match value {
                        OptionValue::Int(i) => i.to_string(),
                        OptionValue::Str(s) => s.to_string(),
                    };
                    return Err(invalid(option, given, PENALTY_RANGE));
                }
                changed.error_utilization_penalty = v;
            }
            "q_rif" => changed.q_rif = q_rif_value(value)?,
            "subset" => match value {
                OptionValue::Str(s) => changed.subset = Some(SubsetAlgorithm::from_name(s)?),
                OptionValue::Int(i) => {
                    return Err(invalid(option, i.to_string(), SUBSET_NAMES));
                }
            },
            "subset_seed" => changed.subset_seed = Some(int_value(option, value)?),
            "probe_rate" | "probe_remove_rate" => {
                let v = float_value(option, value, "a number, 0 or more")?;
                match option {
                    "probe_rate" => changed.probe_rate = v,
                    _ => changed.probe_remove_rate = v,
                }
            }
            _ => {
                let v = int_value(option, value)?;
                let millis = Duration::from_millis(v);
                let small = u32::try_from(v)
                    .map_err(|_| invalid(option, v.to_string(), "an integer below 2^32"));
                match option {
                    // Out of range is out of range, however large: not "below 2^32".
                    "choice_count" => {
                        changed.choice_count = u32::try_from(v)
                            .ok()
                            .filter(|c| (2..=MAX_CHOICE_COUNT).contains(c))
                            .ok_or_else(|| invalid(option, v.to_string(), CHOICE_COUNT_RANGE))?;
                    }
                    "decay_ms" => changed.decay = millis,
                    "initial_latency_ms" => changed.initial_latency = millis,
                    "table_size" => changed.table_size = v,
                    "min_ring_size" => changed.min_ring_size = v,
                    "max_ring_size" => changed.max_ring_size = v,
                    "max_ring_points" => changed.max_ring_points = v,
                    "consecutive_failures" => changed.consecutive_failures = small?,
                    "base_ejection_time_ms" => changed.base_ejection_time = millis,
                    "max_ejection_time_ms" => {
                        changed.max_ejection_time = millis;
                        changed.max_ejection_time_set = true;
                    }
                    "max_ejection_percent" => changed.max_ejection_percent = small?,
                    "panic_threshold" => changed.panic_threshold = small?,
                    "slow_start_window_ms" => changed.slow_start_window = millis,
                    "min_weight_percent" => changed.min_weight_percent = small?,
                    "hash_balance_factor" => changed.hash_balance_factor = small?,
                    "failure_penalty_ms" => changed.failure_penalty = millis,
                    "max_retry_after_ms" => changed.max_retry_after = millis,
                    "interval_ms" => changed.interval = millis,
                    "blackout_period_ms" => changed.blackout_period = millis,
                    "weight_expiration_period_ms" => changed.weight_expiration_period = millis,
                    "weight_update_period_ms" => changed.weight_update_period = millis,
                    "success_rate_minimum_hosts" => changed.success_rate_minimum_hosts = small?,
                    "success_rate_request_volume" => {
                        changed.success_rate_request_volume = small?;
                    }
                    "success_rate_stdev_factor" => changed.success_rate_stdev_factor = small?,
                    "enforcing_success_rate" => changed.enforcing_success_rate = small?,
                    "failure_percentage_threshold" => {
                        changed.failure_percentage_threshold = small?;
                    }
                    "failure_percentage_minimum_hosts" => {
                        changed.failure_percentage_minimum_hosts = small?;
                    }
                    "failure_percentage_request_volume" => {
                        changed.failure_percentage_request_volume = small?;
                    }
                    "enforcing_failure_percentage" => {
                        changed.enforcing_failure_percentage = small?;
                    }
                    "overprovisioning_factor" => changed.overprovisioning_factor = small?,
                    "zone_aware_min_cluster_size" => changed.zone_aware_min_cluster_size = v,
                    "zone_aware_routing_enabled" => changed.zone_aware_routing_enabled = small?,
                    "zone_aware_by_weight" => changed.zone_aware_by_weight = small?,
                    "probe_pool_size" => changed.probe_pool_size = small?,
                    "probe_reuse" => changed.probe_reuse = small?,
                    "max_probe_age_ms" => changed.max_probe_age = millis,
                    "subset_size" if v == 0 => {
                        return Err(invalid(option, v.to_string(), "an integer of at least 1"));
                    }
                    "subset_size" => changed.subset_size = v,
                    "client_index" => changed.client_index = v,
                    "client_count" => changed.client_count = v,
                    _ => changed.thread_rounds = small?,
                }
            }
        }
        changed.check(option)?;
        // A max nobody gave (not by name, nor by writing the field) follows the base.
        let following = DEFAULT_MAX_EJECTION_TIME.max(self.base_ejection_time);
        if option == "base_ejection_time_ms"
            && !changed.max_ejection_time_set
            && self.max_ejection_time == following
        {
            // Envoy: "If max_ejection_time was not specified in the config, apply the default or
            // base_ejection_time whatever is larger" (outlier_detection_impl.cc, DetectorConfig).
            changed.max_ejection_time = DEFAULT_MAX_EJECTION_TIME.max(changed.base_ejection_time);
        }
        *self = changed;
        Ok(())
    }

    /// The numeric options (all but `seed`, `vnodes`, `hash`, `subset` and `subset_seed`)
    /// whose value differs from the default, as `(name, value)` with the value written as
    /// [`Options::set`] reads it — for bindings' `repr` and configuration dumps, so a new
    /// numeric option needs no change there.
    pub fn changed_numbers(&self) -> alloc::vec::Vec<(&'static str, String)> {
        let default = Options::default();
        let ms = |d: Duration| d.as_millis().to_string();
        let all = [
            (
                "choice_count",
                self.choice_count.to_string(),
                default.choice_count.to_string(),
            ),
            ("decay_ms", ms(self.decay), ms(default.decay)),
            (
                "initial_latency_ms",
                ms(self.initial_latency),
                ms(default.initial_latency),
            ),
            (
                "table_size",
                self.table_size.to_string(),
                default.table_size.to_string(),
            ),
            (
                "min_ring_size",
                self.min_ring_size.to_string(),
                default.min_ring_size.to_string(),
            ),
            (
                "max_ring_size",
                self.max_ring_size.to_string(),
                default.max_ring_size.to_string(),
            ),
            (
                "max_ring_points",
                self.max_ring_points.to_string(),
                default.max_ring_points.to_string(),
            ),
            (
                "consecutive_failures",
                self.consecutive_failures.to_string(),
                default.consecutive_failures.to_string(),
            ),
            (
                "base_ejection_time_ms",
                ms(self.base_ejection_time),
                ms(default.base_ejection_time),
            ),
            (
                "max_ejection_time_ms",
                ms(self.max_ejection_time),
                ms(default.max_ejection_time),
            ),
            (
                "max_ejection_percent",
                self.max_ejection_percent.to_string(),
                default.max_ejection_percent.to_string(),
            ),
            (
                "panic_threshold",
                self.panic_threshold.to_string(),
                default.panic_threshold.to_string(),
            ),
            (
                "slow_start_window_ms",
                ms(self.slow_start_window),
                ms(default.slow_start_window),
            ),
            (
                "slow_start_aggression",
                alloc::format!("{:?}", self.slow_start_aggression),
                alloc::format!("{:?}", default.slow_start_aggression),
            ),
            (
                "min_weight_percent",
                self.min_weight_percent.to_string(),
                default.min_weight_percent.to_string(),
            ),
            (
                "hash_balance_factor",
                self.hash_balance_factor.to_string(),
                default.hash_balance_factor.to_string(),
            ),
            (
                "thread_rounds",
                self.thread_rounds.to_string(),
                default.thread_rounds.to_string(),
            ),
            (
                "failure_penalty_ms",
                ms(self.failure_penalty),
                ms(default.failure_penalty),
            ),
            (
                "max_retry_after_ms",
                ms(self.max_retry_after),
                ms(default.max_retry_after),
            ),
            ("interval_ms", ms(self.interval), ms(default.interval)),
            (
                "success_rate_minimum_hosts",
                self.success_rate_minimum_hosts.to_string(),
                default.success_rate_minimum_hosts.to_string(),
            ),
            (
                "success_rate_request_volume",
                self.success_rate_request_volume.to_string(),
                default.success_rate_request_volume.to_string(),
            ),
            (
                "success_rate_stdev_factor",
                self.success_rate_stdev_factor.to_string(),
                default.success_rate_stdev_factor.to_string(),
            ),
            (
                "enforcing_success_rate",
                self.enforcing_success_rate.to_string(),
                default.enforcing_success_rate.to_string(),
            ),
            (
                "failure_percentage_threshold",
                self.failure_percentage_threshold.to_string(),
                default.failure_percentage_threshold.to_string(),
            ),
            (
                "failure_percentage_minimum_hosts",
                self.failure_percentage_minimum_hosts.to_string(),
                default.failure_percentage_minimum_hosts.to_string(),
            ),
            (
                "failure_percentage_request_volume",
                self.failure_percentage_request_volume.to_string(),
                default.failure_percentage_request_volume.to_string(),
            ),
            (
                "enforcing_failure_percentage",
                self.enforcing_failure_percentage.to_string(),
                default.enforcing_failure_percentage.to_string(),
            ),
            (
                "overprovisioning_factor",
                self.overprovisioning_factor.to_string(),
                default.overprovisioning_factor.to_string(),
            ),
            (
                "zone_aware_min_cluster_size",
                self.zone_aware_min_cluster_size.to_string(),
                default.zone_aware_min_cluster_size.to_string(),
            ),
            (
                "zone_aware_routing_enabled",
                self.zone_aware_routing_enabled.to_string(),
                default.zone_aware_routing_enabled.to_string(),
            ),
            (
                "zone_aware_by_weight",
                self.zone_aware_by_weight.to_string(),
                default.zone_aware_by_weight.to_string(),
            ),
            (
                "blackout_period_ms",
                ms(self.blackout_period),
                ms(default.blackout_period),
            ),
            (
                "weight_expiration_period_ms",
                ms(self.weight_expiration_period),
                ms(default.weight_expiration_period),
            ),
            (
                "weight_update_period_ms",
                ms(self.weight_update_period),
                ms(default.weight_update_period),
            ),
            (
                "error_utilization_penalty",
                alloc::format!("{:?}", self.error_utilization_penalty),
                alloc::format!("{:?}", default.error_utilization_penalty),
            ),
            (
                "probe_pool_size",
                self.probe_pool_size.to_string(),
                default.probe_pool_size.to_string(),
            ),
            // The fraction, as `{:?}` writes it ("0.84", "1.0", "1e-5"): always text that
            // `set` reads as a fraction, never as a percentage.
            (
                "q_rif",
                alloc::format!("{:?}", self.q_rif),
                alloc::format!("{:?}", default.q_rif),
            ),
            (
                "probe_rate",
                alloc::format!("{:?}", self.probe_rate),
                alloc::format!("{:?}", default.probe_rate),
            ),
            (
                "probe_reuse",
                self.probe_reuse.to_string(),
                default.probe_reuse.to_string(),
            ),
            (
                "max_probe_age_ms",
                ms(self.max_probe_age),
                ms(default.max_probe_age),
            ),
            (
                "probe_remove_rate",
                alloc::format!("{:?}", self.probe_remove_rate),
                alloc::format!("{:?}", default.probe_remove_rate),
            ),
            (
                "subset_size",
                self.subset_size.to_string(),
                default.subset_size.to_string(),
            ),
            (
                "client_index",
                self.client_index.to_string(),
                default.client_index.to_string(),
            ),
            (
                "client_count",
                self.client_count.to_string(),
                default.client_count.to_string(),
            ),
        ];
        // A max that follows the base is not listed (setting the base brings it back); one
        // that was given is, even at 300000, so it still holds if the base grows.
        all.into_iter()
            .filter(|(name, value, default)| match *name {
                "max_ejection_time_ms" => self.max_ejection_time_set,
                _ => value != default,
            })
            .map(|(name, value, _)| (name, value))
            .collect()
    }

    /// Checks every option, then the rules between options: the whole configuration, as every
    /// balancer constructor does before building. Also catches values written directly to the
    /// public fields.
    pub fn validate(&self) -> Result<()> {
        for option in Self::NAMES {
            self.check(option)?;
        }
        if self.max_ring_size < self.min_ring_size {
            let value = self.max_ring_size.to_string();
            return Err(invalid(
                "max_ring_size",
                value,
                "at least min_ring_size (Envoy's minimum_ring_size <= maximum_ring_size)",
            ));
        }
        if self.subset.is_some() && self.subset_size == 0 {
            return Err(invalid(
                "subset_size",
                "0".to_string(),
                "an integer of at least 1, required with subset",
            ));
        }
        if self.client_index >= self.client_count {
            let value = self.client_index.to_string();
            return Err(invalid(
                "client_index",
                value,
                "an integer below client_count",
            ));
        }
        // Envoy rejects the same (DetectorImpl::create: "max_ejection_time cannot be smaller
        // than base_ejection_time"); an unset max already follows the base (`set`).
        if self.max_ejection_time < self.base_ejection_time {
            let value = self.max_ejection_time.as_millis().to_string();
            return Err(invalid(
                "max_ejection_time_ms",
                value,
                "at least base_ejection_time_ms",
            ));
        }
        Ok(())
    }

    /// The subsetting spec these options describe, `None` without `subset`. The seed:
    /// `subset_seed` if given; for `random` (A68: one seed per client) else one derived from
    /// `seed` (not `seed` itself, so the subset does not follow the picks' own sequence), and
    /// without either an error (a balancer draws one from OS entropy when it is made); for
    /// the others else 0, the same for the whole fleet as `deterministic` needs.
    pub(crate) fn subset_spec(&self) -> Result<Option<SubsetSpec>> {
        let Some(algorithm) = self.subset else {
            return Ok(None);
        };
        let seed = match (algorithm, self.subset_seed, self.seed) {
            (_, Some(seed), _) => seed,
            (SubsetAlgorithm::Random, None, Some(seed)) => {
                crate::SplitMix64::new(seed ^ SUBSET_SALT).next()
            }
            (SubsetAlgorithm::Random, None, None) => {
                return Err(invalid(
                    "subset_seed",
                    "unset".to_string(),
                    "a seed of this client's own for random subsetting (or seed)",
                ));
            }
            (_, None, _) => 0,
        };
        Ok(Some(SubsetSpec {
            algorithm,
            size: usize::try_from(self.subset_size).unwrap_or(usize::MAX),
            client_index: self.client_index,
            client_count: self.client_count,
            seed,
        }))
    }

    /// One option's own rule, whatever the other options hold.
    fn check(&self, option: &'static str) -> Result<()> {
        // Durations beyond ~146 years do not fit the nanosecond clock.
        let duration = |value: Duration, least: u128| -> Result<()> {
            if value.as_millis() < least {
                return Err(invalid(
                    option,
                    value.as_millis().to_string(),
                    "at least 1 (milliseconds)",
                ));
            }
            if value.as_nanos() > u128::from(MAX_DURATION_NS) {
                let value = value.as_millis().to_string();
                return Err(invalid(
                    option,
                    value,
                    "at most 2^62 nanoseconds (~146 years)",
                ));
            }
            Ok(())
        };
        let percent = |value: u32| -> Result<()> {
            if value > 100 {
                return Err(invalid(option, value.to_string(), "a percentage, 0 to 100"));
            }
            Ok(())
        };
        match option {
            "vnodes" if self.vnodes == 0 || self.vnodes > MAX_VNODES => {
                Err(Error::InvalidVnodes(u64::from(self.vnodes)))
            }
            "choice_count" if !(2..=MAX_CHOICE_COUNT).contains(&self.choice_count) => {
                let value = self.choice_count.to_string();
                Err(invalid(option, value, CHOICE_COUNT_RANGE))
            }
            "decay_ms" if self.decay.is_zero() => Err(invalid(
                option,
                "0".to_string(),
                "at least 1 (milliseconds)",
            )),
            "table_size"
                if self.table_size > maglev::MAX_TABLE_SIZE
                    || !maglev::is_prime(self.table_size) =>
            {
                let value = self.table_size.to_string();
                Err(invalid(option, value, "a prime up to 5000011"))
            }
            "min_ring_size" | "max_ring_size" => {
                let value = match option {
                    "min_ring_size" => self.min_ring_size,
                    _ => self.max_ring_size,
                };
                if value == 0 || value > ring_hash::DEFAULT_MAX_RING_SIZE {
                    return Err(invalid(option, value.to_string(), "1 to 8388608"));
                }
                Ok(())
            }
            "max_ring_points"
                if self.max_ring_points == 0 || self.max_ring_points > MAX_RING_POINTS =>
            {
                let value = self.max_ring_points.to_string();
                Err(invalid(option, value, "1 to 4194304"))
            }
            // Envoy requires both durations > 0 (outlier_detection.proto: `gt {}`); a zero base
            // would make every ejection end the moment it starts.
            "base_ejection_time_ms" => duration(self.base_ejection_time, 1),
            "max_ejection_time_ms" => duration(self.max_ejection_time, 1),
            "slow_start_window_ms" => duration(self.slow_start_window, 0),
            "failure_penalty_ms" => duration(self.failure_penalty, 0),
            "max_retry_after_ms" => duration(self.max_retry_after, 0),
            // Envoy: `interval` is a Duration `gt {}`.
            "interval_ms" => duration(self.interval, 1),
            "blackout_period_ms" => duration(self.blackout_period, 0),
            "weight_expiration_period_ms" => duration(self.weight_expiration_period, 1),
            "weight_update_period_ms" => duration(self.weight_update_period, 0),
            "error_utilization_penalty" => {
                let penalty = self.error_utilization_penalty;
                if penalty.is_finite() && penalty >= 0.0 {
                    return Ok(());
                }
                let value = alloc::format!("{penalty:?}");
                Err(invalid(option, value, PENALTY_RANGE))
            }
            "enforcing_success_rate" => percent(self.enforcing_success_rate),
            "enforcing_failure_percentage" => percent(self.enforcing_failure_percentage),
            "failure_percentage_threshold" => percent(self.failure_percentage_threshold),
            "max_ejection_percent" => percent(self.max_ejection_percent),
            "panic_threshold" => percent(self.panic_threshold),
            "min_weight_percent" => percent(self.min_weight_percent),
            "zone_aware_routing_enabled" => percent(self.zone_aware_routing_enabled),
            "overprovisioning_factor" if self.overprovisioning_factor == 0 => {
                Err(invalid(option, "0".to_string(), "at least 1 (percent)"))
            }
            "zone_aware_by_weight" if self.zone_aware_by_weight > 1 => {
                let value = self.zone_aware_by_weight.to_string();
                Err(invalid(
                    option,
                    value,
                    "0 (healthy host counts) or 1 (healthy weights)",
                ))
            }
            "slow_start_aggression" => {
                let aggression = self.slow_start_aggression;
                if aggression.is_finite() && aggression > 0.0 {
                    return Ok(());
                }
                // `{:?}` writes 1e300 as such, not as 301 digits.
                let value = alloc::format!("{aggression:?}");
                Err(invalid(option, value, "a number above 0"))
            }
            "probe_pool_size" if !(1..=MAX_PROBE_POOL_SIZE).contains(&self.probe_pool_size) => {
                let value = self.probe_pool_size.to_string();
                Err(invalid(option, value, "an integer from 1 to 64"))
            }
            "probe_reuse" if !(1..=MAX_PROBE_REUSE).contains(&self.probe_reuse) => {
                let value = self.probe_reuse.to_string();
                Err(invalid(option, value, "an integer from 1 to 63"))
            }
            "max_probe_age_ms" => duration(self.max_probe_age, 1),
            "q_rif" if !(0.0..=1.0).contains(&self.q_rif) => {
                let value = alloc::format!("{:?}", self.q_rif);
                Err(invalid(option, value, Q_RIF_RANGE))
            }
            "probe_rate" if !(0.0..=MAX_PROBE_RATE).contains(&self.probe_rate) => {
                let value = alloc::format!("{:?}", self.probe_rate);
                Err(invalid(
                    option,
                    value,
                    "a number from 0 to 64 (probes per pick)",
                ))
            }
            "probe_remove_rate"
                if !(0.0..=MAX_PROBE_REMOVE_RATE).contains(&self.probe_remove_rate) =>
            {
                let value = alloc::format!("{:?}", self.probe_remove_rate);
                Err(invalid(
                    option,
                    value,
                    "a number from 0 to 16 (removals per pick)",
                ))
            }
            "client_count" if self.client_count == 0 => {
                Err(invalid(option, "0".to_string(), "an integer of at least 1"))
            }
            "thread_rounds" if self.thread_rounds > 1 << 20 => {
                let value = self.thread_rounds.to_string();
                Err(invalid(option, value, "0 (off) to 1048576"))
            }
            "hash_balance_factor"
                if self.hash_balance_factor != 0 && self.hash_balance_factor < 100 =>
            {
                let value = self.hash_balance_factor.to_string();
                Err(invalid(option, value, "0 (off) or at least 100"))
            }
            _ => Ok(()),
        }
    }
}

const CHOICE_COUNT_RANGE: &str = "an integer from 2 to 16";

/// What `error_utilization_penalty` takes (gRPC rejects negative penalties: A58, "must be
/// non-negative").
const PENALTY_RANGE: &str = "a number of at least 0";

const Q_RIF_RANGE: &str = "a fraction from 0 to 1 (\"0.84\") or a percentage from 0 to 100 (84)";

/// `q_rif`: an integer (or integer text) is a percentage, text with a decimal point or an
/// exponent a fraction — so the paper's `0.84` and a percentage option's `84` both read as
/// 0.84, and what [`Options::changed_numbers`] writes (`{:?}` of the fraction, which always has
/// one of them) reads back the same. Range is checked by `check`, except that a percentage
/// above 100 fails here, before it is divided.
fn q_rif_value(value: OptionValue<'_>) -> Result<f64> {
    let percent = |p: u64| -> Result<f64> {
        if p > 100 {
            return Err(invalid("q_rif", p.to_string(), Q_RIF_RANGE));
        }
        Ok(p as f64 / 100.0)
    };
    match value {
        OptionValue::Int(i) => percent(i),
        OptionValue::Str(s) => {
            let text = s.trim();
            let fraction = text.contains(['.', 'e', 'E']);
            let bad = || invalid("q_rif", s.to_string(), Q_RIF_RANGE);
            if fraction {
                // NaN and infinities are not fractions ("NaN" and "inf" have no '.', but
                // "inf.0" style text must not slip through either).
                let v: f64 = text.parse().map_err(|_| bad())?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(bad());
                }
                Ok(v)
            } else {
                percent(text.parse().map_err(|_| bad())?)
            }
        }
    }
}

fn int_value(option: &'static str, value: OptionValue<'_>) -> Result<u64> {
    match value {
        OptionValue::Int(i) => Ok(i),
        OptionValue::Str(s) => s
            .parse()
            .map_err(|_| invalid(option, s.to_string(), "an unsigned 64-bit integer")),
    }
}

/// A number option: an integer, or decimal text such as `"1.5"`.
fn float_value(
    option: &'static str,
    value: OptionValue<'_>,
    expected: &'static str,
) -> Result<f64> {
    match value {
        OptionValue::Int(i) => Ok(i as f64),
        OptionValue::Str(s) => s
            .trim()
            .parse()
            .map_err(|_| invalid(option, s.to_string(), expected)),
    }
}

/// The longest duration an option takes, in nanoseconds.
pub(crate) const MAX_DURATION_NS: u64 = 1 << 62;

/// Values longer than this are shortened in errors: a 400-digit number is not worth echoing.
const SHOWN_VALUE_CHARS: usize = 80;

fn invalid(option: &'static str, value: String, expected: &'static str) -> Error {
    let chars = value.chars().count();
    let value = if chars > SHOWN_VALUE_CHARS {
        let head: String = value.chars().take(SHOWN_VALUE_CHARS / 2).collect();
        alloc::format!("{head}... ({chars} characters)")
    } else {
        value
    };
    Error::InvalidOptionValue {
        option,
        value,
        expected,
    }
}
