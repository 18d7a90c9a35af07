//! The panic boundary. A Rust panic must never unwind into C (that is undefined behaviour) and
//! must not abort the host process either: every exported body runs inside [`ffi_panic_boundary!`],
//! which catches the panic and returns the function's "on panic" value — `LB_RESULT_PANIC` for
//! fallible functions. This only works because the crate keeps `panic = "unwind"`: under
//! `panic = "abort"`, `catch_unwind` catches nothing. (Model: rustls-ffi `librustls/src/panic.rs`.)

use crate::lb_result;
use core::ffi::c_char;

/// What an exported function returns when its body panicked.
pub(crate) trait OnPanic {
    /// The value handed to C instead of unwinding.
    fn on_panic() -> Self;
}

impl OnPanic for lb_result {
    fn on_panic() -> Self {
        lb_result::Panic
    }
}

/// Readers that cannot fail (`lb_now_ns`) return 0.
impl OnPanic for u64 {
    fn on_panic() -> Self {
        0
    }
}

/// Functions without a result (`lb_balancer_free`) just return.
impl OnPanic for () {
    fn on_panic() -> Self {}
}

/// Functions returning static text return a static message. (`lb_algorithm_name`, whose NULL
/// means "no more names", overrides this with `on_panic: NULL`.)
impl OnPanic for *const c_char {
    fn on_panic() -> Self {
        c"panic inside liblb".as_ptr()
    }
}

/// How a body's value becomes the exported function's return value: `Result<(), lb_result>`
/// (what a body using `?` returns) becomes a plain `lb_result`.
pub(crate) trait Finish<T> {
    /// Converts to the C return value.
    fn finish(self) -> T;
}

impl Finish<lb_result> for Result<(), lb_result> {
    fn finish(self) -> lb_result {
        self.err().unwrap_or(lb_result::Ok)
    }
}

impl<T: OnPanic> Finish<T> for T {
    fn finish(self) -> T {
        self
    }
}

/// Runs a body, turning a panic into `OnPanic::on_panic()` and the body's value into the C
/// return value with [`Finish`]. The body is a closure: `return` inside it leaves the closure.
///
/// `ffi_panic_boundary!(on_panic: value; body)` returns `value` instead, for the rare function
/// whose type's usual panic value would mislead C (e.g. a list ended by NULL).
///
/// `AssertUnwindSafe` is sound here: after a panic the only state C can observe is a balancer,
/// and the core publishes whole snapshots only (a panicking writer publishes nothing), so no
/// half-updated membership is ever visible.
macro_rules! ffi_panic_boundary {
    (on_panic: $on_panic:expr; $($body:tt)*) => {{
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| { $($body)* })) {
            Ok(value) => $crate::panic::Finish::finish(value),
            Err(_) => $on_panic,
        }
    }};
    ($($body:tt)*) => {{
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| { $($body)* })) {
            Ok(value) => $crate::panic::Finish::finish(value),
            Err(_) => $crate::panic::OnPanic::on_panic(),
        }
    }};
}
pub(crate) use ffi_panic_boundary;
