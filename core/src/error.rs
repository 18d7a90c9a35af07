//! The one error type of liblb. Every failure named in DESIGN.md "Bad input" has its own
//! variant, so each binding can map it to a specific exception class or result code.

use alloc::string::String;
use core::fmt;

/// Everything that can go wrong in liblb. After any error the balancer is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The balancer has no node with weight > 0 to pick from.
    NoNodes,
    /// Every node with weight > 0 is ejected or marked down and panic is disabled
    /// (`panic_threshold` 0), so no node may be chosen (Envoy's "no healthy upstream").
    NoUsableNodes,
    /// A node id was empty.
    EmptyId,
    /// A node id contained a NUL byte.
    IdContainsNul(String),
    /// A node id or key was not valid UTF-8 where UTF-8 is required.
    InvalidUtf8,
    /// A node id appeared twice.
    DuplicateNode(String),
    /// No node has this id.
    UnknownNode(String),
    /// A keyed algorithm was asked to pick without a key.
    KeyRequired(&'static str),
    /// `vnodes` was 0 or above [`crate::MAX_VNODES`].
    InvalidVnodes(u64),
    /// More than [`crate::MAX_NODES`] nodes.
    TooManyNodes(usize),
    /// `pick_hash` on an algorithm that does not place 64-bit hashes (see
    /// [`crate::Algorithm::takes_hash`]).
    HashUnsupported(&'static str),
    /// A batch asked for more answers than [`crate::MAX_BATCH`].
    BatchTooLarge(u64),
    /// The algorithm name is not one of [`crate::Algorithm::NAMES`].
    UnknownAlgorithm(String),
    /// The option name is not one of [`crate::Options::NAMES`].
    UnknownOption(String),
    /// The hash name is not one of [`crate::HashKind::NAMES`].
    UnknownHash(String),
    /// An option had a value of the wrong kind (e.g. text for `vnodes`).
    InvalidOptionValue {
        /// The option's name.
        option: &'static str,
        /// What was given, as text.
        value: String,
        /// What the option accepts.
        expected: &'static str,
    },
    /// A locality had more than three `/`-separated parts (region, zone, sub-zone), or a NUL.
    InvalidLocality(String),
    /// An outcome could not be understood: an unknown failure kind, a negative or non-finite
    /// latency or retry-after (the text says which).
    InvalidOutcome(String),
    /// An ORCA load report (proto bytes, or an `endpoint-load-metrics` header value) could not
    /// be parsed; the text says what is wrong and where (see [`crate::parse_orca`]).
    InvalidLoadReport(String),
}

/// `Result` with liblb's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// A stable, machine-readable name for the error kind (used as Node's `code` and in tests).
    pub fn code(&self) -> &'static str {
        match self {
            Error::NoNodes => "LB_NO_NODES",
            Error::NoUsableNodes => "LB_NO_USABLE_NODES",
            Error::EmptyId => "LB_EMPTY_ID",
            Error::IdContainsNul(_) => "LB_ID_CONTAINS_NUL",
            Error::InvalidUtf8 => "LB_INVALID_UTF8",
            Error::DuplicateNode(_) => "LB_DUPLICATE_NODE",
            Error::UnknownNode(_) => "LB_UNKNOWN_NODE",
            Error::KeyRequired(_) => "LB_KEY_REQUIRED",
            Error::InvalidVnodes(_) => "LB_INVALID_VNODES",
            Error::TooManyNodes(_) => "LB_TOO_MANY_NODES",
            Error::BatchTooLarge(_) => "LB_BATCH_TOO_LARGE",
            Error::HashUnsupported(_) => "LB_HASH_UNSUPPORTED",
            Error::UnknownAlgorithm(_) => "LB_UNKNOWN_ALGORITHM",
            Error::UnknownOption(_) => "LB_UNKNOWN_OPTION",
            Error::UnknownHash(_) => "LB_UNKNOWN_HASH",
            Error::InvalidOptionValue { .. } => "LB_INVALID_OPTION_VALUE",
            Error::InvalidOutcome(_) => "LB_INVALID_OUTCOME",
            Error::InvalidLocality(_) => "LB_INVALID_LOCALITY",
            Error::InvalidLoadReport(_) => "LB_INVALID_LOAD_REPORT",
        }
    }
}

impl Error {
    /// A static one-line description of the error *kind*, without the details the
    /// [`fmt::Display`] text names (which id, which value): for bindings that need a fixed text
    /// per kind, such as the C ABI's `lb_result_str`.
    pub fn summary(&self) -> &'static str {
        match self {
            Error::NoNodes => "no nodes: the balancer has no node with weight > 0",
            Error::NoUsableNodes => {
                "no usable nodes: every node is ejected or down and panic_threshold is 0"
            }
            Error::EmptyId => "node id is empty",
            Error::IdContainsNul(_) => "node id contains a NUL byte",
            Error::InvalidUtf8 => "id, name or value is not valid UTF-8",
            Error::DuplicateNode(_) => "duplicate node id",
            Error::UnknownNode(_) => "unknown node id",
            Error::KeyRequired(_) => "this algorithm needs a key to pick",
            Error::InvalidVnodes(_) => "vnodes must be between 1 and 65536",
            Error::TooManyNodes(_) => "too many nodes (at most 16777216)",
            Error::BatchTooLarge(_) => "batch too large: one call answers at most 16777216 picks",
            Error::HashUnsupported(_) => "this algorithm does not place 64-bit key hashes",
            Error::UnknownAlgorithm(_) => "unknown algorithm",
            Error::UnknownOption(_) => "unknown option",
            Error::UnknownHash(_) => "unknown hash (valid: sha256, xxh3)",
            Error::InvalidOptionValue { .. } => "invalid option value",
            Error::InvalidLocality(_) => {
                "invalid locality: at most region/zone/sub_zone, without NUL"
            }
            Error::InvalidOutcome(_) => {
                "invalid outcome: not a known outcome or failure kind, or a negative time"
            }
            Error::InvalidLoadReport(_) => {
                "invalid ORCA load report: not a valid OrcaLoadReport proto or BIN/JSON/TEXT header value"
            }
        }
    }
}

/// Joins a list of names as `a, b, c` for error messages.
struct List(&'static [&'static str]);

impl fmt::Display for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoNodes => f.write_str("no nodes: the balancer has no node with weight > 0"),
            Error::NoUsableNodes => f.write_str(
                "no usable nodes: every node with weight > 0 is ejected or marked down, and \
                 panic_threshold is 0 (panic disabled)",
            ),
            Error::EmptyId => f.write_str("node id is empty"),
            Error::IdContainsNul(id) => write!(f, "node id {id:?} contains a NUL byte"),
            Error::InvalidUtf8 => f.write_str("node id or key is not valid UTF-8"),
            Error::DuplicateNode(id) => write!(f, "duplicate node id {id:?}"),
            Error::UnknownNode(id) => write!(f, "unknown node id {id:?}"),
            Error::KeyRequired(alg) => write!(f, "algorithm {alg:?} needs a key to pick"),
            Error::InvalidVnodes(v) => write!(
                f,
                "vnodes must be between 1 and {} (got {v})",
                crate::MAX_VNODES
            ),
            Error::TooManyNodes(n) => {
                write!(f, "too many nodes: {n} (at most {})", crate::MAX_NODES)
            }
            Error::HashUnsupported(alg) => {
                write!(
                    f,
                    "algorithm {alg:?} does not place 64-bit hashes; those that do:"
                )?;
                let mut first = true;
                for a in crate::Algorithm::ALL.iter().filter(|a| a.takes_hash()) {
                    f.write_str(if first { " " } else { ", " })?;
                    f.write_str(a.name())?;
                    first = false;
                }
                Ok(())
            }
            Error::BatchTooLarge(n) => write!(
                f,
                "batch too large: {n} answers requested (at most {} per call)",
                crate::MAX_BATCH
            ),
            Error::UnknownAlgorithm(name) => write!(
                f,
                "unknown algorithm {name:?}; valid algorithms: {}",
                List(crate::Algorithm::NAMES)
            ),
            Error::UnknownOption(name) => write!(
                f,
                "unknown option {name:?}; valid options: {}",
                List(crate::Options::NAMES)
            ),
            Error::UnknownHash(name) => write!(
                f,
                "unknown hash {name:?}; valid hashes: {}",
                List(crate::HashKind::NAMES)
            ),
            Error::InvalidOptionValue {
                option,
                value,
                expected,
            } => write!(f, "option {option:?} expects {expected}, got {value:?}"),
            Error::InvalidOutcome(detail) => write!(f, "invalid outcome: {detail}"),
            Error::InvalidLocality(locality) => write!(
                f,
                "invalid locality {locality:?}: at most three parts, region/zone/sub_zone, \
                 without NUL"
            ),
            Error::InvalidLoadReport(reason) => write!(f, "invalid ORCA load report: {reason}"),
        }
    }
}

impl core::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    /// The static summaries quote the limits as literals: keep them equal to the constants.
    #[test]
    fn summaries_quote_the_current_limits() {
        let vnodes = format!("and {}", crate::MAX_VNODES);
        assert!(Error::InvalidVnodes(0).summary().contains(&vnodes));
        let nodes = format!("at most {}", crate::MAX_NODES);
        assert!(Error::TooManyNodes(0).summary().contains(&nodes));
        let batch = format!("at most {} picks", crate::MAX_BATCH);
        assert!(Error::BatchTooLarge(0).summary().contains(&batch));
        let hashes = format!("valid: {}", List(crate::HashKind::NAMES));
        assert!(
            Error::UnknownHash(String::new())
                .summary()
                .contains(&hashes)
        );
    }
}
