//! Balancer options, and algorithm names parsed the same way for every language (the
//! [`Algorithm`] list itself is registered in `select`).

pub use crate::select::Algorithm;
use crate::select::{maglev, ring_hash};
use crate::{DEFAULT_VNODES, Error, HashKind, MAX_VNODES, Result};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Seed for the random algorithms: the same seed gives the same single-threaded sequence in
    /// every language. `None` seeds from OS entropy, so two processes never march in lockstep.
    pub seed: Option<u64>,
    /// Ring points per unit of weight; default [`DEFAULT_VNODES`].
    pub vnodes: u32,
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
}

/// Most candidates `least_request` draws per pick.
pub const MAX_CHOICE_COUNT: u32 = 16;

impl Default for Options {
    fn default() -> Options {
        Options {
            seed: None,
            vnodes: DEFAULT_VNODES,
            hash: None,
            choice_count: 2,
            decay: Duration::from_secs(10),
            initial_latency: Duration::from_millis(30),
            table_size: maglev::DEFAULT_TABLE_SIZE,
            min_ring_size: ring_hash::DEFAULT_MIN_RING_SIZE,
            max_ring_size: ring_hash::DEFAULT_MAX_RING_SIZE,
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
    ];

    /// Sets an option by name; unknown names and ill-typed values get specific errors and leave
    /// `self` unchanged.
    pub fn set(&mut self, name: &str, value: OptionValue<'_>) -> Result<()> {
        match name {
            "seed" => self.seed = Some(int_value("seed", value)?),
            "vnodes" => {
                let v = int_value("vnodes", value)?;
                if v == 0 || v > u64::from(MAX_VNODES) {
                    return Err(Error::InvalidVnodes(v));
                }
                self.vnodes = v as u32;
            }
            "hash" => match value {
                OptionValue::Str(s) => self.hash = Some(s.parse()?),
                OptionValue::Int(i) => return Err(invalid("hash", i.to_string(), "a hash name")),
            },
            "choice_count" => {
                let v = int_value("choice_count", value)?;
                if !(2..=u64::from(MAX_CHOICE_COUNT)).contains(&v) {
                    return Err(invalid("choice_count", v.to_string(), CHOICE_COUNT_RANGE));
                }
                self.choice_count = v as u32;
            }
            "decay_ms" => {
                let v = int_value("decay_ms", value)?;
                if v == 0 {
                    return Err(invalid(
                        "decay_ms",
                        v.to_string(),
                        "at least 1 (milliseconds)",
                    ));
                }
                self.decay = Duration::from_millis(v);
            }
            "initial_latency_ms" => {
                let v = int_value("initial_latency_ms", value)?;
                self.initial_latency = Duration::from_millis(v);
            }
            "table_size" | "min_ring_size" | "max_ring_size" => {
                let v = int_value(option_name(name), value)?;
                let mut changed = *self;
                match name {
                    "table_size" => changed.table_size = v,
                    "min_ring_size" => changed.min_ring_size = v,
                    _ => changed.max_ring_size = v,
                }
                changed.validate()?;
                *self = changed;
            }
            _ => return Err(Error::UnknownOption(name.to_string())),
        }
        Ok(())
    }

    /// Checks values set directly through the public fields.
    pub fn validate(&self) -> Result<()> {
        if self.vnodes == 0 || self.vnodes > MAX_VNODES {
            return Err(Error::InvalidVnodes(u64::from(self.vnodes)));
        }
        if !(2..=MAX_CHOICE_COUNT).contains(&self.choice_count) {
            let value = self.choice_count.to_string();
            return Err(invalid("choice_count", value, CHOICE_COUNT_RANGE));
        }
        if self.decay.is_zero() {
            return Err(invalid(
                "decay_ms",
                "0".to_string(),
                "at least 1 (milliseconds)",
            ));
        }
        if self.table_size > maglev::MAX_TABLE_SIZE || !maglev::is_prime(self.table_size) {
            let value = self.table_size.to_string();
            return Err(invalid("table_size", value, "a prime up to 5000011"));
        }
        let (min, max) = (self.min_ring_size, self.max_ring_size);
        if min == 0 || min > ring_hash::DEFAULT_MAX_RING_SIZE {
            let value = min.to_string();
            return Err(invalid("min_ring_size", value, "1 to 8388608"));
        }
        if max < min || max > ring_hash::DEFAULT_MAX_RING_SIZE {
            let value = max.to_string();
            return Err(invalid("max_ring_size", value, "min_ring_size to 8388608"));
        }
        Ok(())
    }
}

/// The static name of an option, for error messages.
fn option_name(name: &str) -> &'static str {
    Options::NAMES
        .iter()
        .find(|n| **n == name)
        .copied()
        .unwrap_or("option")
}

const CHOICE_COUNT_RANGE: &str = "an integer from 2 to 16";

fn int_value(option: &'static str, value: OptionValue<'_>) -> Result<u64> {
    match value {
        OptionValue::Int(i) => Ok(i),
        OptionValue::Str(s) => s
            .parse()
            .map_err(|_| invalid(option, s.to_string(), "an unsigned 64-bit integer")),
    }
}

fn invalid(option: &'static str, value: String, expected: &'static str) -> Error {
    Error::InvalidOptionValue {
        option,
        value,
        expected,
    }
}
