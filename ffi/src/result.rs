//! `lb_result`: one code per failure, stable numbers, static text.
//!
//! Codes 1..=13 are the core's `Error` variants in declaration order (the same failures every
//! binding reports, see `Error::code`); codes from 100 up can only happen at the C boundary.

use core::ffi::c_char;
use liblb_core::Error;

use crate::panic::ffi_panic_boundary;

/// The result of every fallible liblb function. `LB_RESULT_OK` (0) is success; everything else
/// names one specific failure. After a failure the balancer is unchanged and every output
/// parameter is untouched, with one exception: `LB_RESULT_BUFFER_TOO_SMALL` writes the size
/// needed, and when it comes from a pick (`lb_balancer_pick`, `lb_balancer_pick_many`,
/// `lb_balancer_pick_n`, `lb_balancer_attempts`) the picks themselves happened — round robin
/// has moved on and the random algorithms have drawn, exactly as on success; only the answers
/// are lost. (The membership is never changed by a failed call.) The numbers are stable: new
/// codes are only ever appended.
#[allow(non_camel_case_types)] // C naming: the type is `lb_result` in lb.h.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum lb_result {
    /// Success.
    Ok = 0,
    /// The balancer has no node with weight > 0 to pick from (empty, or all drained).
    NoNodes = 1,
    /// A node id was empty.
    EmptyId = 2,
    /// A node id contained a NUL byte.
    IdContainsNul = 3,
    /// An id, algorithm name, option name or option value was not valid UTF-8.
    InvalidUtf8 = 4,
    /// A node id appeared twice (in one `update`, or `add` of an existing id).
    DuplicateNode = 5,
    /// No node has this id.
    UnknownNode = 6,
    /// A keyed algorithm (`source_hash`, `ring`) was asked to pick without a key.
    KeyRequired = 7,
    /// The `vnodes` option was 0 or above 65536.
    InvalidVnodes = 8,
    /// More nodes than one balancer holds (2^24).
    TooManyNodes = 9,
    /// The algorithm name is not one liblb knows (see `lb_algorithm_name`).
    UnknownAlgorithm = 10,
    /// The option name is not one of `seed`, `vnodes`, `hash`.
    UnknownOption = 11,
    /// The `hash` option is not one of `sha256`, `xxh3`.
    UnknownHash = 12,
    /// An option value had the wrong kind (e.g. text that is not a number for `vnodes`).
    InvalidOptionValue = 13,
    /// A required pointer was NULL (or a byte pointer was NULL with a non-zero length).
    NullParameter = 100,
    /// The caller's buffer is too small; the size needed was written to the size output.
    BufferTooSmall = 101,
    /// A length was so large no real buffer can have it (more than `PTRDIFF_MAX` bytes).
    InvalidLength = 102,
    /// liblb panicked (a bug in liblb) and the call was abandoned part way: no membership change
    /// was published (the nodes are as before), but a pick may already have counted and
    /// outputs may be partly written, so do not read them.
    Panic = 103,
    /// The core reported an error this version of the C ABI has no code for (a bug in liblb).
    OtherError = 104,
    /// A batch asked for more than `LB_MAX_BATCH` answers (`lb_balancer_pick_many` keys,
    /// `lb_balancer_pick_n` count): nothing was picked; split the batch.
    BatchTooLarge = 105,
}

/// Every code, for `lb_result_str` and the tests.
pub(crate) const ALL_RESULTS: [lb_result; 20] = [
    lb_result::Ok,
    lb_result::NoNodes,
    lb_result::EmptyId,
    lb_result::IdContainsNul,
    lb_result::InvalidUtf8,
    lb_result::DuplicateNode,
    lb_result::UnknownNode,
    lb_result::KeyRequired,
    lb_result::InvalidVnodes,
    lb_result::TooManyNodes,
    lb_result::UnknownAlgorithm,
    lb_result::UnknownOption,
    lb_result::UnknownHash,
    lb_result::InvalidOptionValue,
    lb_result::NullParameter,
    lb_result::BufferTooSmall,
    lb_result::InvalidLength,
    lb_result::Panic,
    lb_result::OtherError,
    lb_result::BatchTooLarge,
];

impl From<Error> for lb_result {
    fn from(error: Error) -> lb_result {
        match error {
            Error::NoNodes => lb_result::NoNodes,
            Error::EmptyId => lb_result::EmptyId,
            Error::IdContainsNul(_) => lb_result::IdContainsNul,
            Error::InvalidUtf8 => lb_result::InvalidUtf8,
            Error::DuplicateNode(_) => lb_result::DuplicateNode,
            Error::UnknownNode(_) => lb_result::UnknownNode,
            Error::KeyRequired(_) => lb_result::KeyRequired,
            Error::InvalidVnodes(_) => lb_result::InvalidVnodes,
            Error::TooManyNodes(_) => lb_result::TooManyNodes,
            Error::UnknownAlgorithm(_) => lb_result::UnknownAlgorithm,
            Error::UnknownOption(_) => lb_result::UnknownOption,
            Error::UnknownHash(_) => lb_result::UnknownHash,
            Error::InvalidOptionValue { .. } => lb_result::InvalidOptionValue,
            Error::BatchTooLarge(_) => lb_result::BatchTooLarge,
            // `Error` is non_exhaustive; a variant added to the core later lands here until
            // it gets its own code (the unit tests check each known code round-trips).
            _ => lb_result::OtherError,
        }
    }
}

impl lb_result {
    /// The code from a raw number, if it is one.
    fn from_raw(raw: u32) -> Option<lb_result> {
        ALL_RESULTS.iter().copied().find(|r| *r as u32 == raw)
    }

    /// Stable machine-readable name; for core errors the same string as `Error::code()` (and
    /// as Python's and Node's error codes and the vectors' `expect_error`).
    fn code(self) -> &'static core::ffi::CStr {
        match self {
            lb_result::Ok => c"LB_OK",
            lb_result::NoNodes => c"LB_NO_NODES",
            lb_result::EmptyId => c"LB_EMPTY_ID",
            lb_result::IdContainsNul => c"LB_ID_CONTAINS_NUL",
            lb_result::InvalidUtf8 => c"LB_INVALID_UTF8",
            lb_result::DuplicateNode => c"LB_DUPLICATE_NODE",
            lb_result::UnknownNode => c"LB_UNKNOWN_NODE",
            lb_result::KeyRequired => c"LB_KEY_REQUIRED",
            lb_result::InvalidVnodes => c"LB_INVALID_VNODES",
            lb_result::TooManyNodes => c"LB_TOO_MANY_NODES",
            lb_result::UnknownAlgorithm => c"LB_UNKNOWN_ALGORITHM",
            lb_result::UnknownOption => c"LB_UNKNOWN_OPTION",
            lb_result::UnknownHash => c"LB_UNKNOWN_HASH",
            lb_result::InvalidOptionValue => c"LB_INVALID_OPTION_VALUE",
            lb_result::NullParameter => c"LB_NULL_PARAMETER",
            lb_result::BufferTooSmall => c"LB_BUFFER_TOO_SMALL",
            lb_result::InvalidLength => c"LB_INVALID_LENGTH",
            lb_result::Panic => c"LB_PANIC",
            lb_result::OtherError => c"LB_OTHER_ERROR",
            lb_result::BatchTooLarge => c"LB_BATCH_TOO_LARGE",
        }
    }

    /// Human-readable description.
    fn text(self) -> &'static core::ffi::CStr {
        match self {
            lb_result::Ok => c"success",
            lb_result::NoNodes => c"no nodes: the balancer has no node with weight > 0",
            lb_result::EmptyId => c"node id is empty",
            lb_result::IdContainsNul => c"node id contains a NUL byte",
            lb_result::InvalidUtf8 => c"id, name or value is not valid UTF-8",
            lb_result::DuplicateNode => c"duplicate node id",
            lb_result::UnknownNode => c"unknown node id",
            lb_result::KeyRequired => c"this algorithm needs a key to pick",
            lb_result::InvalidVnodes => c"vnodes must be between 1 and 65536",
            lb_result::TooManyNodes => c"too many nodes (at most 16777216)",
            lb_result::UnknownAlgorithm => c"unknown algorithm (lb_algorithm_name lists them)",
            lb_result::UnknownOption => c"unknown option (valid: seed, vnodes, hash)",
            lb_result::UnknownHash => c"unknown hash (valid: sha256, xxh3)",
            lb_result::InvalidOptionValue => {
                c"invalid option value: seed and vnodes take an unsigned integer, hash a hash name"
            }
            lb_result::NullParameter => c"a required pointer was NULL",
            lb_result::BufferTooSmall => c"buffer too small: the size needed was written",
            lb_result::InvalidLength => c"a length is larger than any buffer can be",
            lb_result::Panic => c"liblb panicked (a bug in liblb); the call was abandoned part way",
            lb_result::OtherError => c"an error this version of the C ABI has no code for",
            lb_result::BatchTooLarge => {
                c"batch too large: one call answers at most LB_MAX_BATCH (16777216) picks"
            }
        }
    }
}

/// A static, NUL-terminated description of `result`, e.g. "unknown node id". Never NULL; an
/// unknown number gives "unknown lb_result code". The text must not be freed. Thread-safe.
///
/// `result` is a `uint32_t` (not the enum) so that any number C passes is well defined.
#[unsafe(no_mangle)]
pub extern "C" fn lb_result_str(result: u32) -> *const c_char {
    ffi_panic_boundary! {
        lb_result::from_raw(result).map_or(c"unknown lb_result code", lb_result::text).as_ptr()
    }
}

/// The static, NUL-terminated stable name of `result`, e.g. "LB_UNKNOWN_NODE". For the core's
/// errors it is the same string Python, Node and the conformance vectors use. Never NULL; an
/// unknown number gives "LB_UNKNOWN_RESULT". The text must not be freed. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_result_name(result: u32) -> *const c_char {
    ffi_panic_boundary! {
        lb_result::from_raw(result).map_or(c"LB_UNKNOWN_RESULT", lb_result::code).as_ptr()
    }
}
