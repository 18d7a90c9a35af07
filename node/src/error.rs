//! The one place where failures become JavaScript exceptions.
//!
//! - A core [`liblb_core::Error`] becomes an `Error` whose `code` is the core's stable
//!   [`liblb_core::Error::code`] (`LB_NO_NODES`, `LB_DUPLICATE_NODE`, ...) and whose message is
//!   the core's `Display` text, which names the offending value.
//! - A JavaScript value of the wrong type becomes a `TypeError` with code
//!   `ERR_INVALID_ARG_TYPE`, as Node's own APIs throw.
//! - A number of the right type but out of range (negative, fractional, NaN, infinite, too
//!   large) becomes a `RangeError` with code `ERR_OUT_OF_RANGE`, as Node's own APIs throw; a
//!   batch beyond `MAX_BATCH` answers or `MAX_BATCH_KEY_BYTES` key bytes a `RangeError` with
//!   code `LB_BATCH_TOO_LARGE` (the C ABI's name for the same limit).
//! - A failure inside napi itself keeps napi's status as its code.
//!
//! napi-rs throws a returned `Err` as a plain `Error` whose `code` is the error's status string,
//! so the status type here is [`Code`]. A `TypeError` cannot be expressed that way: it is thrown
//! directly on the environment and the returned error carries napi's `PendingException` status,
//! which tells napi-rs to leave the pending exception alone.

use napi::{Env, Status};

/// The `code` property of a thrown error.
#[derive(Debug, Clone, Copy)]
pub enum Code {
    /// A liblb error code (`LB_*`).
    Lb(&'static str),
    /// A napi status: an internal failure, or `PendingException` after a `TypeError` was thrown.
    Napi(Status),
}

impl AsRef<str> for Code {
    fn as_ref(&self) -> &str {
        match self {
            Code::Lb(code) => code,
            Code::Napi(status) => status.as_ref(),
        }
    }
}

/// The error every export returns.
pub type Error = napi::Error<Code>;
/// The result every export returns.
pub type Result<T> = std::result::Result<T, Error>;

/// Code of the `TypeError`s thrown for arguments of the wrong type (Node's own code).
pub const TYPE_ERROR_CODE: &str = "ERR_INVALID_ARG_TYPE";

/// Turns a core or napi result into the exports' [`Result`].
pub trait OrThrow<T> {
    /// Maps the error to the JavaScript error it must become.
    fn or_throw(self) -> Result<T>;
}

impl<T> OrThrow<T> for liblb_core::Result<T> {
    #[inline]
    fn or_throw(self) -> Result<T> {
        self.map_err(|e| Error::new(Code::Lb(e.code()), e.to_string()))
    }
}

impl<T> OrThrow<T> for napi::Result<T> {
    #[inline]
    fn or_throw(self) -> Result<T> {
        self.map_err(|e| Error::new(Code::Napi(e.status), e.reason))
    }
}

/// Back to napi's own error type, for `ToNapiValue` implementations (a liblb code becomes the
/// reason's prefix; a pending exception stays pending).
pub fn to_napi(error: Error) -> napi::Error {
    match error.status {
        Code::Napi(status) => napi::Error::new(status, error.reason),
        Code::Lb(code) => {
            napi::Error::new(Status::GenericFailure, format!("{code}: {}", error.reason))
        }
    }
}

/// Code of the `RangeError`s thrown for numbers out of range (Node's own code).
pub const RANGE_ERROR_CODE: &str = "ERR_OUT_OF_RANGE";

/// Code of the `RangeError` thrown for a batch too large to answer in one call.
pub const BATCH_TOO_LARGE_CODE: &str = "LB_BATCH_TOO_LARGE";

/// Throws a `RangeError` with `code` and returns the error that makes napi-rs keep it as the
/// pending exception.
#[cold]
pub fn range_error(env: &Env, code: &'static str, message: String) -> Error {
    match env.throw_range_error(&message, Some(code)) {
        Ok(()) => Error::new(Code::Napi(Status::PendingException), message),
        // The environment could not throw (it is shutting down): fall back to a plain Error.
        Err(_) => Error::new(Code::Lb(code), message),
    }
}

/// Throws a `TypeError` (code [`TYPE_ERROR_CODE`]) and returns the error that makes napi-rs keep
/// it as the pending exception.
#[cold]
pub fn type_error(env: &Env, message: String) -> Error {
    match env.throw_type_error(&message, Some(TYPE_ERROR_CODE)) {
        Ok(()) => Error::new(Code::Napi(Status::PendingException), message),
        // The environment could not throw (it is shutting down): fall back to a plain Error.
        Err(_) => Error::new(Code::Lb(TYPE_ERROR_CODE), message),
    }
}
