//! `lb_result`: one code per failure, stable numbers, static text.
//!
//! Codes 1..=13 are core `Error` kinds (the same failures every binding reports, see
//! `Error::code`); from 100 up, codes of the C boundary and core kinds added later (105, 106,
//! 109, 110, 111).
//! Names and texts of the core's kinds come from the core (`Error::code`, `Error::summary`).

use core::ffi::{CStr, c_char};
use liblb_core::Error;
use std::ffi::CString;
use std::sync::LazyLock;

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
    /// A keyed algorithm (`source_hash`, `ring`, `ketama`, `nginx_chash`, `ring_hash`,
    /// `maglev`, `rendezvous`, `jump`) was asked to pick without a key.
    KeyRequired = 7,
    /// The `vnodes` option was 0 or above 65536.
    InvalidVnodes = 8,
    /// More nodes than one balancer holds (2^24).
    TooManyNodes = 9,
    /// The algorithm name is not one liblb knows (see `lb_algorithm_name`).
    UnknownAlgorithm = 10,
    /// The option name is not one liblb knows (`seed`, `vnodes`, `hash`, `choice_count`,
    /// `decay_ms`, `initial_latency_ms`, `table_size`, `min_ring_size`, `max_ring_size`,
    /// `max_ring_points`, `consecutive_failures`, `base_ejection_time_ms`, `max_ejection_time_ms`,
    /// `max_ejection_percent`, `panic_threshold`, `slow_start_window_ms`,
    /// `slow_start_aggression`, `min_weight_percent`, `hash_balance_factor`, `thread_rounds`,
    /// `failure_penalty_ms`, `max_retry_after_ms`, the outlier-detection options of
    /// `docs/health.md`, `overprovisioning_factor`, `zone_aware_min_cluster_size`,
    /// `zone_aware_routing_enabled`, `zone_aware_by_weight`).
    UnknownOption = 11,
    /// The `hash` option is not one of `sha256`, `xxh3`.
    UnknownHash = 12,
    /// An option value had the wrong kind or is out of range (e.g. text that is not a number
    /// for `vnodes`, `choice_count` outside 2..=16, a `table_size` that is not prime), or
    /// options disagree (`lb_balancer_new`: `max_ring_size` < `min_ring_size`,
    /// `max_ejection_time_ms` < `base_ejection_time_ms`).
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
    /// `lb_balancer_pick_hash` / `lb_balancer_attempts_hash` on an algorithm that does not
    /// place 64-bit key hashes (only `ring_hash`, `maglev`, `rendezvous` and `jump` do).
    HashUnsupported = 106,
    /// An outcome could not be understood: an `lb_outcome` that is not one of the
    /// `LB_OUTCOME_*` codes, or a success without a latency (`lb_balancer_report` with
    /// `LB_LATENCY_NONE`) or with a retry-after. Nothing was recorded (and a lease given to
    /// `lb_lease_finish` is still the caller's).
    InvalidOutcome = 107,
    /// The lease has already ended (finished or cancelled). An ended `lb_lease *` is freed, so
    /// C passes NULL and gets `LB_RESULT_NULL_PARAMETER`; the C++ wrapper throws this code for
    /// an empty `lb::lease`, with the name Python and Node use. `lb_server_load_finish` and
    /// `lb_server_load_cancel` return it for an `lb_server_request` already ended.
    LeaseFinished = 108,
    /// Every node with weight > 0 is ejected or marked down and `panic_threshold` is 0 (panic
    /// disabled): nothing may be chosen until a node is back (Envoy's "no healthy upstream").
    NoUsableNodes = 109,
    /// A locality had more than three `/`-separated parts (region/zone/sub_zone) or a NUL.
    InvalidLocality = 110,
    /// An ORCA load report (the serialized proto, or an `endpoint-load-metrics` header value
    /// starting `BIN `, `JSON ` or `TEXT `) could not be parsed, or a utilisation given to
    /// `lb_server_load_set_cpu_utilization` (or `_mem_`, `_application_`) is out of range.
    InvalidLoadReport = 111,
}

/// The one list of codes: each variant once, with where its name and text come from —
/// `core(error)`, a representative core [`Error`] whose `code()` is the name and whose static
/// `summary()` is the text (so the core's errors are described in one place, for every
/// language), or `ffi(name, text)` for the codes only the C boundary has. The generated
/// `match` is exhaustive, so a variant added to the enum above without a line here does not
/// compile, and `ALL_RESULTS`, the names, the texts and `From<Error>` all come from this list.
/// (rustls-ffi generates its enum with `u32_enum_builder!` too; cbindgen does not expand
/// macros, so here the enum stays declared by hand and the list is tied to it by the match.)
macro_rules! lb_result_table {
    ($($variant:ident => $kind:ident($($source:tt)*)),* $(,)?) => {
        /// Every code, in the order of the list.
        pub(crate) const ALL_RESULTS: &[lb_result] = &[$(lb_result::$variant),*];

        impl lb_result {
            /// Where this code's name and text come from.
            fn source(self) -> Source {
                match self {
                    $(lb_result::$variant => lb_result_table!(@source $kind($($source)*)),)*
                }
            }
        }
    };
    (@source core($error:expr)) => { Source::Core($error) };
    (@source ffi($name:literal, $text:literal)) => { Source::Ffi($name, $text) };
}

/// A code's name and text: the core's error kind, or the C boundary's own words.
enum Source {
    /// A representative of the core error kind.
    Core(Error),
    /// Name and text of a code only the C boundary has.
    Ffi(&'static str, &'static str),
}

lb_result_table! {
    Ok => ffi("LB_OK", "success"),
    NoNodes => core(Error::NoNodes),
    EmptyId => core(Error::EmptyId),
    IdContainsNul => core(Error::IdContainsNul(String::new())),
    InvalidUtf8 => core(Error::InvalidUtf8),
    DuplicateNode => core(Error::DuplicateNode(String::new())),
    UnknownNode => core(Error::UnknownNode(String::new())),
    KeyRequired => core(Error::KeyRequired("")),
    InvalidVnodes => core(Error::InvalidVnodes(0)),
    TooManyNodes => core(Error::TooManyNodes(0)),
    UnknownAlgorithm => core(Error::UnknownAlgorithm(String::new())),
    UnknownOption => core(Error::UnknownOption(String::new())),
    UnknownHash => core(Error::UnknownHash(String::new())),
    InvalidOptionValue => core(Error::InvalidOptionValue {
        option: "",
        value: String::new(),
        expected: "",
    }),
    NullParameter => ffi("LB_NULL_PARAMETER", "a required pointer was NULL"),
    BufferTooSmall => ffi(
        "LB_BUFFER_TOO_SMALL",
        "buffer too small: the size needed was written"
    ),
    InvalidLength => ffi("LB_INVALID_LENGTH", "a length is larger than any buffer can be"),
    Panic => ffi(
        "LB_PANIC",
        "liblb panicked (a bug in liblb); the call was abandoned part way"
    ),
    OtherError => ffi(
        "LB_OTHER_ERROR",
        "an error this version of the C ABI has no code for"
    ),
    BatchTooLarge => core(Error::BatchTooLarge(0)),
    HashUnsupported => core(Error::HashUnsupported("")),
    InvalidOutcome => core(Error::InvalidOutcome(String::new())),
    LeaseFinished => ffi(
        "LB_LEASE_FINISHED",
        "the lease or server request has already ended (finished or cancelled)"
    ),
    NoUsableNodes => core(Error::NoUsableNodes),
    InvalidLocality => core(Error::InvalidLocality(String::new())),
    InvalidLoadReport => core(Error::InvalidLoadReport(String::new())),
}

impl From<Error> for lb_result {
    /// The code whose representative has the same kind; `OtherError` for a core variant added
    /// later and not yet in the list (`Error` is non_exhaustive; the unit tests check that
    /// every known kind has its own code).
    fn from(error: Error) -> lb_result {
        let kind = core::mem::discriminant(&error);
        ALL_RESULTS
            .iter()
            .copied()
            .find(|r| matches!(r.source(), Source::Core(e) if core::mem::discriminant(&e) == kind))
            .unwrap_or(lb_result::OtherError)
    }
}

/// Names and texts as C strings, made once from the list, in `ALL_RESULTS` order. They live
/// in a static, so the pointers handed to C stay valid for the life of the process.
fn c_strings() -> &'static [(CString, CString)] {
    static STRINGS: LazyLock<Vec<(CString, CString)>> = LazyLock::new(|| {
        let c = |s: &str| CString::new(s).expect("result names and texts contain no NUL");
        ALL_RESULTS
            .iter()
            .map(|r| match r.source() {
                Source::Core(e) => (c(e.code()), c(e.summary())),
                Source::Ffi(name, text) => (c(name), c(text)),
            })
            .collect()
    });
    &STRINGS
}

impl lb_result {
    /// The code from a raw number, if it is one.
    fn from_raw(raw: u32) -> Option<lb_result> {
        ALL_RESULTS.iter().copied().find(|r| *r as u32 == raw)
    }

    /// The (name, text) pair of this code.
    fn strings(self) -> &'static (CString, CString) {
        let at = ALL_RESULTS.iter().position(|r| *r == self);
        &c_strings()[at.expect("every code is in the list")]
    }

    /// Stable machine-readable name; for core errors the core's `Error::code()` (the same
    /// string as Python's and Node's error codes and the vectors' `expect_error`).
    pub(crate) fn code(self) -> &'static CStr {
        &self.strings().0
    }

    /// Human-readable description; for core errors the core's static `Error::summary()`.
    pub(crate) fn text(self) -> &'static CStr {
        &self.strings().1
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
