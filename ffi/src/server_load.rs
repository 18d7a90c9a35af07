//! The server side of server-reported load from C: `lb_server_load`, the core's
//! `liblb_core::ServerLoad`. A backend starts and finishes each request on it, sets its
//! utilisations, and answers Prequal probes (`lb_server_load_probe`) and ORCA
//! `endpoint-load-metrics` headers (`lb_server_load_header`, `lb_server_load_report`) from it.
//! Every function reads liblb's clock (`lb_now_ns()`) itself, so C never passes a time.
//!
//! A started request is a plain `lb_server_request` struct, not a handle: starting one costs
//! one atomic add in the core and should not cost a `malloc` here, and nothing C does with the
//! struct can make liblb misbehave in memory (a forged or copied one only miscounts). The
//! core's token is move-only, which C cannot express; its `open` field catches the common
//! mistake instead — finishing or cancelling the same struct twice is
//! `LB_RESULT_LEASE_FINISHED` — while a *copy* finished as well is the caller's bug (the
//! in-flight count then drifts, as it would after a lost finish).

use crate::lb_result;
use crate::orca::{for_c, lb_load_report};
use crate::panic::ffi_panic_boundary;
use crate::ptr::{
    Castable, free_handle, opt_out, read_into, to_handle, try_out, try_out_slice, try_ref,
};
use core::ffi::c_char;
use core::time::Duration;
use liblb_core::{HeaderForm, MonotonicClock, ServerLoad, Started};

/// A server's own load (`liblb_core::ServerLoad`): requests in flight, request and error rates
/// over the last 10 seconds, latency by in-flight level, and the utilisations the application
/// sets. Create with `lb_server_load_new` (or `lb_server_load_new_with` for another window or
/// latency max age), free with `lb_server_load_free`. Every function
/// taking a `const lb_server_load *` is thread-safe and lock-free: share one between all the
/// threads that serve requests.
pub struct lb_server_load {
    _private: [u8; 0],
}

impl crate::ptr::Boxed for lb_server_load {}

impl Castable for lb_server_load {
    type Rust = ServerLoad;
}

// Shared by every serving thread and freed on any of them.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ServerLoad>();
};

/// A request a server has started (`lb_server_load_start`): hand it to `lb_server_load_finish`
/// or `lb_server_load_cancel` exactly once when it ends. Plain data, so C can keep it anywhere
/// (on the stack, in a connection struct); do not finish a copy of one that was finished:
/// liblb cannot tell the copy apart and would count the request twice.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct lb_server_request {
    /// When the request started, in nanoseconds of liblb's clock (`lb_now_ns()`).
    pub started_ns: u64,
    /// The requests already in flight when it started (itself not counted): its latency is
    /// filed under this level.
    pub rif: u32,
    /// 1 from `lb_server_load_start` until the request is finished or cancelled through this
    /// struct, then 0. Any other value is refused like 0.
    pub open: u32,
}

/// `lb_server_load_header`'s form: `TEXT name:value,...` (Envoy's native form).
pub const LB_HEADER_TEXT: u32 = 0;
/// `lb_server_load_header`'s form: `BIN <base64 of the serialized OrcaLoadReport>`.
pub const LB_HEADER_BIN: u32 = 1;

/// Creates a server load in `*load_out`, its rate window starting now (liblb's clock). The
/// caller owns the result and must free it with `lb_server_load_free`.
///
/// Errors (nothing allocated, `*load_out` unchanged): `LB_RESULT_NULL_PARAMETER`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_new(load_out: *mut *mut lb_server_load) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `load_out` NULL or valid for one write.
        let out = unsafe { try_out(load_out) }?;
        out.write(to_handle(ServerLoad::new(MonotonicClock::now())));
        Ok(())
    }
}

/// Creates a server load in `*load_out` as `lb_server_load_new` does, with its rates over a
/// window of `window_ms` milliseconds (1000 to 3600000; the default is 10000) and latency
/// samples counting for `latency_max_age_ms` (1 to 3600000; the default is 1000: longer keeps
/// a slow server's estimate, and the traffic it loses by it, longer; shorter tries it again
/// sooner). The caller owns the result and must free it with `lb_server_load_free`.
///
/// Errors (nothing allocated, `*load_out` unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_OPTION_VALUE` (either value out of range). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_new_with(
    window_ms: u64,
    latency_max_age_ms: u64,
    load_out: *mut *mut lb_server_load,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires `load_out` NULL or valid for one write.
        let out = unsafe { try_out(load_out) }?;
        let window = Duration::from_millis(window_ms);
        let load = ServerLoad::with_window(window, MonotonicClock::now())?
            .with_latency_max_age(Duration::from_millis(latency_max_age_ms))?;
        out.write(to_handle(load));
        Ok(())
    }
}

/// Frees a server load. Calling with NULL is fine. No other thread may be using it, and its
/// started requests must not be finished afterwards.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_free(load: *mut lb_server_load) {
    // SAFETY: lb.h requires a NULL or live handle from `lb_server_load_new`, freed once.
    ffi_panic_boundary!(unsafe { free_handle(load) })
}

/// A request arrives: in-flight + 1, and `*request_out` remembers the time and the requests
/// it found in flight (`open` = 1). End it once with `lb_server_load_finish` or
/// `lb_server_load_cancel` on the same `load`.
///
/// Errors (nothing counted, `*request_out` unchanged): `LB_RESULT_NULL_PARAMETER`.
/// Thread-safe; one atomic add.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_start(
    load: *const lb_server_load,
    request_out: *mut lb_server_request,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and `request_out` NULL or writable.
    ffi_panic_boundary!(unsafe {
        read_into(load, request_out, |load| {
            let started = load.start(MonotonicClock::now());
            lb_server_request {
                started_ns: started.started_ns(),
                rif: started.rif(),
                open: 1,
            }
        })
    })
}

/// Takes the core's token out of an open request, closing it (`open` = 0), or
/// `LB_RESULT_LEASE_FINISHED` if it was already ended through this struct.
fn take(request: &mut lb_server_request) -> Result<Started, lb_result> {
    if request.open != 1 {
        return Err(lb_result::LeaseFinished);
    }
    request.open = 0;
    Ok(Started::from_parts(request.started_ns, request.rif))
}

/// The request ends now, successfully or not (`ok`): in-flight − 1, one more completion in the
/// rates (and one more error unless `ok`), and for a success its latency filed under the
/// in-flight level it found. `*latency_ns_out` (NULL: not wanted) gets its latency in
/// nanoseconds. `*request` is closed (`open` = 0).
///
/// Errors (nothing counted, `*request` unchanged): `LB_RESULT_NULL_PARAMETER` (NULL `load` or
/// `request`), `LB_RESULT_LEASE_FINISHED` (`request->open` is not 1: it was already finished
/// or cancelled). Thread-safe for the load; one request belongs to one thread at a time.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_finish(
    load: *const lb_server_load,
    request: *mut lb_server_request,
    ok: bool,
    latency_ns_out: *mut u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `request` NULL or valid for reading and
        // writing one `lb_server_request` that no other thread uses during the call, and
        // `latency_ns_out` NULL or writable.
        let (load, request, latency_out) =
            unsafe { (try_ref(load)?, request.as_mut(), opt_out(latency_ns_out)) };
        let started = take(request.ok_or(lb_result::NullParameter)?)?;
        let latency = load.finish(started, MonotonicClock::now(), ok);
        if let Some(out) = latency_out {
            out.write(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
        }
        Ok(())
    }
}

/// The request was abandoned (the client went away, the server is shutting down):
/// in-flight − 1 and nothing else counted. `*request` is closed (`open` = 0).
///
/// Errors (nothing changed): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_LEASE_FINISHED` (already
/// ended). Thread-safe for the load; one request belongs to one thread at a time.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_cancel(
    load: *const lb_server_load,
    request: *mut lb_server_request,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: as `lb_server_load_finish`.
        let (load, request) = unsafe { (try_ref(load)?, request.as_mut()) };
        load.cancel(take(request.ok_or(lb_result::NullParameter)?)?);
        Ok(())
    }
}

/// The requests in flight now, in `*in_flight_out`. Errors: `LB_RESULT_NULL_PARAMETER`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_in_flight(
    load: *const lb_server_load,
    in_flight_out: *mut u32,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and a NULL or writable output.
    ffi_panic_boundary!(unsafe { read_into(load, in_flight_out, ServerLoad::in_flight) })
}

/// The answer to a Prequal probe now: `*rif_out` the requests in flight, `*latency_ns_out` the
/// latency expected for a request arriving at that level (the median of the last 8 successes
/// that found about as many in flight, of those within the latency max age — 1 s unless
/// `lb_server_load_new_with` set another —, else of the nearest level with some; 0 when no
/// request has succeeded that recently).
///
/// Errors (nothing written): `LB_RESULT_NULL_PARAMETER` (NULL `load` or either output).
/// Thread-safe; reads a few atomics.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_probe(
    load: *const lb_server_load,
    rif_out: *mut u32,
    latency_ns_out: *mut u64,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle and the outputs NULL or writable.
        let (load, rif_out, latency_out) =
            unsafe { (try_ref(load)?, try_out(rif_out)?, try_out(latency_ns_out)?) };
        let probe = load.probe(MonotonicClock::now());
        rif_out.write(probe.rif);
        latency_out.write(u64::try_from(probe.latency.as_nanos()).unwrap_or(u64::MAX));
        Ok(())
    }
}

/// Sets the CPU utilisation (a fraction of the available CPU: finite, at least 0, may exceed
/// 1). Errors (the value unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LOAD_REPORT` (NaN, negative, infinite). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_set_cpu_utilization(
    load: *const lb_server_load,
    value: f64,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle.
    ffi_panic_boundary!(Ok(unsafe { try_ref(load) }?.set_cpu_utilization(value)?))
}

/// Sets the memory utilisation (a fraction of the available memory, 0 to 1). Errors (the value
/// unchanged): `LB_RESULT_NULL_PARAMETER`, `LB_RESULT_INVALID_LOAD_REPORT`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_set_mem_utilization(
    load: *const lb_server_load,
    value: f64,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle.
    ffi_panic_boundary!(Ok(unsafe { try_ref(load) }?.set_mem_utilization(value)?))
}

/// Sets the application utilisation (finite, at least 0, may exceed 1; gRFC A58 prefers it to
/// CPU). Errors (the value unchanged): `LB_RESULT_NULL_PARAMETER`,
/// `LB_RESULT_INVALID_LOAD_REPORT`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_set_application_utilization(
    load: *const lb_server_load,
    value: f64,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle.
    ffi_panic_boundary!(Ok(
        unsafe { try_ref(load) }?.set_application_utilization(value)?
    ))
}

/// The ORCA load report now, as a new `lb_load_report` (read it with `lb_load_report_values`
/// and `lb_load_report_entries`; free it with `lb_load_report_free`): the three utilisations,
/// `rps_fractional` and `eps` over the last 10 seconds, and the named metrics `rif` (always)
/// and `latency_ms` (when a request has succeeded in the last second) — a Prequal probe answer
/// riding along.
///
/// Errors (nothing allocated, `*report_out` unchanged): `LB_RESULT_NULL_PARAMETER`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_report(
    load: *const lb_server_load,
    report_out: *mut *mut lb_load_report,
) -> lb_result {
    // SAFETY: lb.h requires a NULL or live handle and `report_out` NULL or writable.
    ffi_panic_boundary!(unsafe {
        read_into(load, report_out, |load| {
            to_handle(for_c(load.report(MonotonicClock::now())))
        })
    })
}

/// Writes the report of `lb_server_load_report` as an `endpoint-load-metrics` header value in
/// `form` (`LB_HEADER_TEXT` or `LB_HEADER_BIN`) to `buf` (`buf_len` bytes), followed by a NUL,
/// and sets `*size_out` to the bytes written (value length + 1).
///
/// Errors: `LB_RESULT_NULL_PARAMETER` (NULL `load` or `size_out`, or NULL `buf` with a
/// non-zero length), `LB_RESULT_INVALID_LENGTH`, `LB_RESULT_INVALID_OPTION_VALUE` (another
/// form), `LB_RESULT_BUFFER_TOO_SMALL` (then `*size_out` is the size this value needed and
/// nothing else is written; a length of 0 asks for it). The value is made anew at each call
/// from the clock, so a retry may need a few bytes more: give it room. Most values are under
/// 200 bytes; 1024 fits every realistic one. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lb_server_load_header(
    load: *const lb_server_load,
    form: u32,
    buf: *mut c_char,
    buf_len: usize,
    size_out: *mut usize,
) -> lb_result {
    ffi_panic_boundary! {
        // SAFETY: lb.h requires a NULL or live handle, `buf` NULL or writable for `buf_len`
        // bytes, and `size_out` NULL or writable.
        let (load, mut buf, size_out) = unsafe {
            (
                try_ref(load)?,
                try_out_slice(buf.cast::<u8>(), buf_len)?,
                try_out(size_out)?,
            )
        };
        let form = match form {
            LB_HEADER_TEXT => HeaderForm::Text,
            LB_HEADER_BIN => HeaderForm::Bin,
            _ => return Err(lb_result::InvalidOptionValue),
        };
        let value = load.header(MonotonicClock::now(), form)?;
        let needed = value.len() + 1;
        if buf.len() < needed {
            size_out.write(needed);
            return Err(lb_result::BufferTooSmall);
        }
        buf.write_bytes(0, value.as_bytes());
        buf.write(value.len(), 0);
        size_out.write(needed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orca::{lb_load_report_free, lb_load_report_values, lb_load_values};
    use core::ptr::{null, null_mut};

    /// Every export through raw pointers as C calls them (also under Miri): outputs written
    /// only on success, NULLs refused, a request ended once.
    /// `lb_server_load_new_with` checks both values and writes nothing on an error.
    #[test]
    fn a_server_load_with_its_window_and_latency_max_age() {
        let mut load = null_mut();
        let new_with = lb_server_load_new_with;
        assert_eq!(new_with(10_000, 1000, null_mut()), lb_result::NullParameter);
        for (window, age) in [
            (999, 1000),
            (3_600_001, 1000),
            (10_000, 0),
            (10_000, 3_600_001),
        ] {
            let r = new_with(window, age, &mut load);
            assert_eq!(r, lb_result::InvalidOptionValue, "{window} {age}");
            assert!(load.is_null(), "untouched on error");
        }
        assert_eq!(new_with(60_000, 250, &mut load), lb_result::Ok);
        // SAFETY: a live handle just made.
        let core = unsafe { try_ref(load) }.unwrap();
        assert_eq!(core.window(), Duration::from_secs(60));
        assert_eq!(core.latency_max_age(), Duration::from_millis(250));
        lb_server_load_free(load);
    }

    #[test]
    fn a_server_load_through_its_handle() {
        assert_eq!(lb_server_load_new(null_mut()), lb_result::NullParameter);
        let mut load = null_mut();
        assert_eq!(lb_server_load_new(&mut load), lb_result::Ok);
        let mut request = lb_server_request {
            started_ns: 7,
            rif: 7,
            open: 7,
        };
        assert_eq!(
            lb_server_load_start(null(), &mut request),
            lb_result::NullParameter
        );
        assert_eq!(request.open, 7, "untouched on error");
        assert_eq!(lb_server_load_start(load, &mut request), lb_result::Ok);
        assert_eq!((request.rif, request.open), (0, 1));
        let mut second = request;
        assert_eq!(lb_server_load_start(load, &mut second), lb_result::Ok);
        assert_eq!(second.rif, 1);
        let mut n = 0;
        assert_eq!(lb_server_load_in_flight(load, &mut n), lb_result::Ok);
        assert_eq!(n, 2);
        let (mut rif, mut latency) = (u32::MAX, u64::MAX);
        assert_eq!(
            lb_server_load_probe(load, &mut rif, &mut latency),
            lb_result::Ok
        );
        assert_eq!((rif, latency), (2, 0));
        assert_eq!(
            lb_server_load_probe(load, &mut rif, null_mut()),
            lb_result::NullParameter
        );

        let mut took = u64::MAX;
        assert_eq!(
            lb_server_load_finish(load, &mut request, true, &mut took),
            lb_result::Ok
        );
        assert!(took < u64::MAX && request.open == 0);
        // The same struct again: refused, nothing counted.
        let r = lb_server_load_finish(load, &mut request, true, &mut took);
        assert_eq!(r, lb_result::LeaseFinished);
        assert_eq!(
            lb_server_load_cancel(load, &mut request),
            lb_result::LeaseFinished
        );
        assert_eq!(
            lb_server_load_finish(load, null_mut(), true, null_mut()),
            lb_result::NullParameter
        );
        assert_eq!(
            lb_server_load_cancel(null(), &mut second),
            lb_result::NullParameter
        );
        assert_eq!(second.open, 1, "a refused call leaves the request open");
        assert_eq!(lb_server_load_cancel(load, &mut second), lb_result::Ok);
        assert_eq!(lb_server_load_in_flight(load, &mut n), lb_result::Ok);
        assert_eq!(n, 0);

        // Utilisations: an invalid value changes nothing.
        assert_eq!(lb_server_load_set_cpu_utilization(load, 0.5), lb_result::Ok);
        assert_eq!(
            lb_server_load_set_mem_utilization(load, 1.5),
            lb_result::InvalidLoadReport
        );
        assert_eq!(
            lb_server_load_set_application_utilization(load, f64::NAN),
            lb_result::InvalidLoadReport
        );
        assert_eq!(
            lb_server_load_set_cpu_utilization(null(), 0.5),
            lb_result::NullParameter
        );
        let mut report = null_mut();
        assert_eq!(lb_server_load_report(load, &mut report), lb_result::Ok);
        let mut values = lb_load_values::default();
        assert_eq!(lb_load_report_values(report, &mut values), lb_result::Ok);
        assert_eq!(
            (
                values.cpu_utilization,
                values.mem_utilization,
                values.application_utilization
            ),
            (0.5, 0.0, 0.0)
        );
        // One completion over the time since the load was made, at least one slot (1 s): 1.0
        // if the report comes within a second, less on a machine slow enough (Miri on a busy
        // one) to take longer.
        assert!(
            values.rps_fractional > 0.0 && values.rps_fractional <= 1.0,
            "one completion: {}",
            values.rps_fractional
        );
        lb_load_report_free(report);

        // The header: size first, then the value, NUL-terminated.
        let mut size = 0;
        let r = lb_server_load_header(load, LB_HEADER_TEXT, null_mut(), 0, &mut size);
        assert_eq!(r, lb_result::BufferTooSmall);
        let mut buf = vec![0 as c_char; size + 64];
        let r = lb_server_load_header(load, LB_HEADER_TEXT, buf.as_mut_ptr(), buf.len(), &mut size);
        assert_eq!(r, lb_result::Ok);
        let text = core::ffi::CStr::from_bytes_until_nul(bytemuck(&buf)).unwrap();
        assert_eq!(text.to_bytes().len() + 1, size);
        assert!(
            text.to_str()
                .unwrap()
                .starts_with("TEXT cpu_utilization:0.5,"),
            "{text:?}"
        );
        let r = lb_server_load_header(load, 2, buf.as_mut_ptr(), buf.len(), &mut size);
        assert_eq!(r, lb_result::InvalidOptionValue);
        let r = lb_server_load_header(load, LB_HEADER_BIN, buf.as_mut_ptr(), buf.len(), null_mut());
        assert_eq!(r, lb_result::NullParameter);
        lb_server_load_free(load);
        lb_server_load_free(null_mut());
    }

    /// C chars as bytes.
    fn bytemuck(chars: &[c_char]) -> &[u8] {
        // SAFETY: `c_char` and `u8` have the same size and alignment, every bit pattern valid.
        unsafe { core::slice::from_raw_parts(chars.as_ptr().cast(), chars.len()) }
    }
}
