//! `parseOrca` (issue 25): an ORCA load report, decoded by the core's `orca` module exactly as
//! every other language decodes it, handed to JavaScript as a plain object.

use crate::error::{OrThrow, Result, type_error};
use crate::js::{KeyBuf, bytes_arg, data_property, describe, own_keys};
use liblb_core::LoadReport;
use napi::bindgen_prelude::{FromNapiValue, Object, ToNapiValue};
use napi::{Env, JsValue, Unknown, ValueType, check_status, sys};
use napi_derive::napi;
use std::ptr;

/// A parsed report, made into its JavaScript object when returned.
pub struct Report(pub(crate) liblb_core::LoadReport);

/// Parses an ORCA load report: the bytes of a serialized `OrcaLoadReport` (a `Buffer` or
/// `Uint8Array`), or an `endpoint-load-metrics` header value (`BIN <base64>`, `JSON <json>`,
/// `TEXT name:value, ...`, as a string or its bytes). Throws `LB_INVALID_LOAD_REPORT` saying
/// what is wrong with anything else, a `TypeError` for a value of another type.
#[napi(
    catch_unwind,
    ts_args_type = "data: string | Uint8Array",
    ts_return_type = "LoadReport"
)]
pub fn parse_orca(env: Env, data: Unknown) -> Result<Report> {
    let mut buf = KeyBuf::new();
    let bytes = bytes_arg(&env, &data, &mut buf, "data")?;
    liblb_core::parse_orca(bytes).map(Report).or_throw()
}

/// A load report argument (`reportLoad`, a lease's `finish({ load })`): a `LoadReport` object
/// as `parseOrca` returns it (missing fields are 0), or what `parseOrca` takes. An object is
/// checked as the parser checks bytes: it is encoded and parsed again, so every language
/// accepts the same reports.
pub(crate) fn report_arg(env: &Env, value: &Unknown<'_>, what: &'static str) -> Result<LoadReport> {
    if value.get_type().or_throw()? == ValueType::Object && !is_typed_array(env, value) {
        let report = report_object(env, value, what)?;
        return liblb_core::parse_orca(&report.to_proto()).or_throw();
    }
    let mut buf = KeyBuf::new();
    let bytes = bytes_arg(env, value, &mut buf, what)?;
    liblb_core::parse_orca(bytes).or_throw()
}

fn is_typed_array(env: &Env, value: &Unknown<'_>) -> bool {
    let mut typed = false;
    // SAFETY: a valid env and value; out-pointer to a local.
    let status = unsafe { sys::napi_is_typedarray(env.raw(), value.raw(), &mut typed) };
    status == sys::Status::napi_ok && typed
}

/// The fields of a `LoadReport`-shaped object.
fn report_object(env: &Env, value: &Unknown<'_>, what: &str) -> Result<LoadReport> {
    // SAFETY: the caller checked the value is an object.
    let object = unsafe { value.cast::<Object>() }.or_throw()?;
    let number = |name: &str| -> Result<f64> {
        let Some(v) = crate::js::present(object.get::<Unknown>(name).or_throw()?)? else {
            return Ok(0.0);
        };
        if v.get_type().or_throw()? != ValueType::Number {
            let message = format!("{what}.{name} must be a number, got {}", describe(&v));
            return Err(type_error(env, message));
        }
        // SAFETY: a number value of this env.
        unsafe { f64::from_napi_value(env.raw(), v.raw()) }.or_throw()
    };
    let map = |name: &str| -> Result<Vec<(String, f64)>> {
        let Some(v) = crate::js::present(object.get::<Unknown>(name).or_throw()?)? else {
            return Ok(Vec::new());
        };
        if v.get_type().or_throw()? != ValueType::Object || v.is_array().or_throw()? {
            let message = format!(
                "{what}.{name} must be an object of numbers, got {}",
                describe(&v)
            );
            return Err(type_error(env, message));
        }
        // SAFETY: checked to be an object.
        let entries = unsafe { v.cast::<Object>() }.or_throw()?;
        let mut pairs = Vec::new();
        for key in own_keys(&entries)? {
            let value = match entries.get::<Unknown>(&key).or_throw()? {
                Some(v) if v.get_type().or_throw()? == ValueType::Number => v,
                other => {
                    let got = other.as_ref().map_or("undefined", describe);
                    let message = format!("{what}.{name}[{key:?}] must be a number, got {got}");
                    return Err(type_error(env, message));
                }
            };
            // SAFETY: a number value of this env.
            pairs.push((
                key,
                unsafe { f64::from_napi_value(env.raw(), value.raw()) }.or_throw()?,
            ));
        }
        Ok(pairs)
    };
    let rps = number("rps")?;
    if !(rps >= 0.0 && rps.fract() == 0.0 && rps <= 9_007_199_254_740_991.0) {
        let message = format!("{what}.rps must be a whole number from 0 to 2^53 - 1, got {rps}");
        return Err(type_error(env, message));
    }
    Ok(LoadReport {
        cpu_utilization: number("cpuUtilization")?,
        mem_utilization: number("memUtilization")?,
        application_utilization: number("applicationUtilization")?,
        rps: rps as u64,
        rps_fractional: number("rpsFractional")?,
        eps: number("eps")?,
        request_cost: map("requestCost")?,
        utilization: map("utilization")?,
        named_metrics: map("namedMetrics")?,
    })
}

/// Defines `object[name] = value` as an own, enumerable data property: defined, not assigned,
/// so a named metric called `__proto__` is a metric like any other.
///
/// # Safety
/// `env` is the current environment, `object` an object of it, `value` a value of it.
unsafe fn define(
    env: sys::napi_env,
    object: sys::napi_value,
    name: &str,
    value: sys::napi_value,
) -> napi::Result<()> {
    let mut key = ptr::null_mut();
    // SAFETY: `name` is valid UTF-8 for `name.len()` bytes (which fits `isize`: it is a
    // Rust string); the out-pointer is a local.
    check_status!(unsafe {
        sys::napi_create_string_utf8(env, name.as_ptr().cast(), name.len() as isize, &mut key)
    })?;
    let descriptor = data_property(ptr::null(), key, value);
    // SAFETY: one descriptor, alive for the call; `object` and `value` belong to `env`.
    check_status!(unsafe { sys::napi_define_properties(env, object, 1, &descriptor) })
}

/// A new object of `pairs`, in order.
///
/// # Safety
/// `env` is the current environment.
unsafe fn numbers(env: sys::napi_env, pairs: &[(String, f64)]) -> napi::Result<sys::napi_value> {
    let mut object = ptr::null_mut();
    // SAFETY: a valid env; the out-pointer is a local.
    check_status!(unsafe { sys::napi_create_object(env, &mut object) })?;
    for (name, value) in pairs {
        // SAFETY: forwarded contract; `object` was just made in `env`.
        unsafe { define(env, object, name, f64::to_napi_value(env, *value)?) }?;
    }
    Ok(object)
}

impl ToNapiValue for Report {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let r = val.0;
        let mut object = ptr::null_mut();
        // SAFETY: napi calls this with the current environment; every value is
        // made in it just before it is defined on `object`, which was too.
        unsafe {
            check_status!(sys::napi_create_object(env, &mut object))?;
            let scalars = [
                ("cpuUtilization", r.cpu_utilization),
                ("memUtilization", r.mem_utilization),
                ("applicationUtilization", r.application_utilization),
                ("rpsFractional", r.rps_fractional),
                ("eps", r.eps),
            ];
            for (name, value) in scalars {
                define(env, object, name, f64::to_napi_value(env, value)?)?;
            }
            // A u64: exact as a number up to 2^53, as every count the binding returns.
            define(env, object, "rps", f64::to_napi_value(env, r.rps as f64)?)?;
            define(env, object, "requestCost", numbers(env, &r.request_cost)?)?;
            define(env, object, "utilization", numbers(env, &r.utilization)?)?;
            define(env, object, "namedMetrics", numbers(env, &r.named_metrics)?)?;
        }
        Ok(object)
    }
}
