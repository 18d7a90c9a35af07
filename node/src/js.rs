//! Conversions between JavaScript values and liblb's core types.
//!
//! Arguments arrive as [`Unknown`] so that a value of the wrong type becomes a `TypeError` naming
//! the argument and what it got (napi-rs's own conversions would throw a plain `Error`). Keys are
//! read without allocating on the hot path: a string key is copied into a stack buffer, a
//! `Buffer`/`Uint8Array` key is borrowed in place (unless a `SharedArrayBuffer` backs it).

use crate::error::{
    BATCH_TOO_LARGE_CODE, OrThrow, RANGE_ERROR_CODE, Result, range_error, type_error,
};
use liblb_core::{Failure, FailureKind, MAX_NODES, Node, OptionValue, Options, Outcome};
use napi::bindgen_prelude::{Array, BigInt, FromNapiValue, Object, ToNapiValue};
use napi::{Env, JsValue, Unknown, ValueType, sys};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// `typeof`-style name of a value, for error messages.
pub fn describe(value: &Unknown<'_>) -> &'static str {
    match value.get_type() {
        Ok(ValueType::Undefined) => "undefined",
        Ok(ValueType::Null) => "null",
        Ok(ValueType::Boolean) => "boolean",
        Ok(ValueType::Number) => "number",
        Ok(ValueType::String) => "string",
        Ok(ValueType::Symbol) => "symbol",
        Ok(ValueType::Object) if value.is_array().unwrap_or(false) => "array",
        Ok(ValueType::Object) => "object",
        Ok(ValueType::Function) => "function",
        Ok(ValueType::BigInt) => "bigint",
        _ => "an unknown value",
    }
}

/// Whether the value is `undefined` or `null` (both mean "absent" for optional arguments).
fn is_nullish(value: &Unknown<'_>) -> Result<bool> {
    Ok(matches!(
        value.get_type().or_throw()?,
        ValueType::Undefined | ValueType::Null
    ))
}

/// `Some(value)` unless it is missing, `undefined` or `null`.
pub fn present<'e>(value: Option<Unknown<'e>>) -> Result<Option<Unknown<'e>>> {
    match value {
        Some(v) if !is_nullish(&v)? => Ok(Some(v)),
        _ => Ok(None),
    }
}

/// A JavaScript string, or a `TypeError` naming `what`.
pub fn string(env: &Env, value: &Unknown<'_>, what: &str) -> Result<String> {
    if value.get_type().or_throw()? != ValueType::String {
        return Err(type_error(
            env,
            format!("{what} must be a string, got {}", describe(value)),
        ));
    }
    // SAFETY: the value was just checked to be a string.
    unsafe { value.cast::<String>() }.or_throw()
}

/// A node id: a JavaScript string (else a `TypeError` naming `what`) that is well-formed UTF-16,
/// else the core's `InvalidUtf8` error (`LB_INVALID_UTF8`). A lone surrogate has no UTF-8 form:
/// converting it to U+FFFD, as `string` does, would make `'\uD800'` and `'\uDC00'` the same id.
pub fn id(env: &Env, value: &Unknown<'_>, what: &str) -> Result<String> {
    if value.get_type().or_throw()? != ValueType::String {
        return Err(type_error(
            env,
            format!("{what} must be a string, got {}", describe(value)),
        ));
    }
    let (raw_env, raw) = (env.raw(), value.raw());
    let mut len = 0usize;
    // SAFETY: with a null buffer napi only stores the string's length in UTF-16 units in `len`.
    let status =
        unsafe { sys::napi_get_value_string_utf16(raw_env, raw, ptr::null_mut(), 0, &mut len) };
    napi::check_status!(status).or_throw()?;
    let mut units = vec![0u16; len + 1];
    // SAFETY: `units` is writable for `len + 1` units, room for the string and napi's NUL.
    let status = unsafe {
        sys::napi_get_value_string_utf16(raw_env, raw, units.as_mut_ptr(), len + 1, &mut len)
    };
    napi::check_status!(status).or_throw()?;
    units.truncate(len);
    String::from_utf16(&units)
        .map_err(|_| liblb_core::Error::InvalidUtf8)
        .or_throw()
}

/// Like [`id`], but `None` (instead of `LB_INVALID_UTF8`) for a string that is not well-formed
/// UTF-16: no node can have such an id (`has`).
pub fn id_if_valid(env: &Env, value: &Unknown<'_>, what: &str) -> Result<Option<String>> {
    match id(env, value, what) {
        Ok(id) => Ok(Some(id)),
        Err(e) if matches!(e.status, crate::error::Code::Lb("LB_INVALID_UTF8")) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Most answers one batch call gives: 2^24, the most nodes a balancer holds (the same limit as
/// Python's `liblb.MAX_BATCH` and C's `LB_MAX_BATCH`). A longer `keys` array is refused with a
/// `RangeError` (code `LB_BATCH_TOO_LARGE`) before any key is read.
pub const MAX_BATCH: u32 = 1 << 24;
// Written out for the generated typings; it is the core's limit.
const _: () = assert!(MAX_BATCH as usize == liblb_core::MAX_BATCH);

/// Most key bytes one `pickMany` copies (256 MiB, 16 bytes per key of a full batch): every key
/// is copied before the batch is picked, and an array repeating one huge string or buffer must
/// not turn into an unbounded copy. Beyond it: `RangeError`, code `LB_BATCH_TOO_LARGE`.
pub const MAX_BATCH_KEY_BYTES: usize = 1 << 28;

/// The `RangeError` for a `keys` array longer than [`MAX_BATCH`].
pub fn too_many_keys(env: &Env, count: u32) -> crate::error::Error {
    range_error(
        env,
        BATCH_TOO_LARGE_CODE,
        format!(
            "keys has {count} elements; one call answers at most {MAX_BATCH} (MAX_BATCH): split the batch"
        ),
    )
}

/// The `RangeError` for keys of more than [`MAX_BATCH_KEY_BYTES`] bytes in all.
pub fn too_many_key_bytes(env: &Env) -> crate::error::Error {
    range_error(
        env,
        BATCH_TOO_LARGE_CODE,
        format!(
            "keys hold more than {MAX_BATCH_KEY_BYTES} bytes (MAX_BATCH_KEY_BYTES): split the batch or pick such keys one by one"
        ),
    )
}

/// A number as JavaScript prints it (`NaN`, `Infinity`, `-Infinity`, `1.5`, `-1`).
pub fn js_number(n: f64) -> String {
    match n {
        n if n.is_nan() => "NaN".to_string(),
        f64::INFINITY => "Infinity".to_string(),
        f64::NEG_INFINITY => "-Infinity".to_string(),
        // JavaScript's `String(n)` switches to exponent form from 1e21 and below 1e-6; Rust's
        // `Display` never does (1e300 would be 301 digits).
        n if n != 0.0 && (n.abs() >= 1e21 || n.abs() < 1e-6) => {
            let text = format!("{n:e}");
            match text.split_once('e') {
                Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
                _ => text,
            }
        }
        n => n.to_string(),
    }
}

/// A non-negative integer number no larger than `max`: a `TypeError` naming `what` for a value
/// that is not a number, a `RangeError` for one out of range (negative, fractional, NaN,
/// infinite; `-0` is 0).
pub fn integer(env: &Env, value: &Unknown<'_>, what: &str, max: f64) -> Result<f64> {
    let number = if value.get_type().or_throw()? == ValueType::Number {
        // SAFETY: the value was just checked to be a number.
        Some(unsafe { value.cast::<f64>() }.or_throw()?)
    } else {
        None
    };
    match number {
        // `-0.0 >= 0.0` holds, and `as` turns it into 0; NaN fails every comparison.
        Some(n) if n >= 0.0 && n <= max && n.fract() == 0.0 => Ok(n),
        Some(n) => Err(range_error(
            env,
            RANGE_ERROR_CODE,
            format!(
                "{what} must be an integer between 0 and {max}, got {}",
                js_number(n)
            ),
        )),
        None => Err(type_error(
            env,
            format!("{what} must be a number, got {}", describe(value)),
        )),
    }
}

/// A node weight (an integer in 0..=2^32-1); absent means 1.
pub fn weight(env: &Env, value: Option<Unknown<'_>>, what: &str) -> Result<u32> {
    match present(value)? {
        None => Ok(1),
        Some(v) => Ok(integer(env, &v, what, f64::from(u32::MAX))? as u32),
    }
}

/// A weight that must be given (`setWeight`).
pub fn required_weight(env: &Env, value: &Unknown<'_>, what: &str) -> Result<u32> {
    Ok(integer(env, value, what, f64::from(u32::MAX))? as u32)
}

/// The `limit` of `attempts`; absent means "every node".
pub fn limit(env: &Env, value: Option<Unknown<'_>>) -> Result<usize> {
    match present(value)? {
        None => Ok(usize::MAX),
        // 2^53 - 1: every integer up to it is exact in a double.
        Some(v) => Ok(integer(env, &v, "limit", 9_007_199_254_740_991.0)? as usize),
    }
}

/// One node: an id string, or an object `{ id, weight?, tag?, locality?, priority? }`; `what`
/// names it in errors (`nodes[3]`, or `node` for `add`).
fn node(env: &Env, value: &Unknown<'_>, what: &str) -> Result<Node> {
    match value.get_type().or_throw()? {
        ValueType::String => Ok(Node::new(id(env, value, "node id")?, 1)),
        ValueType::Object if !value.is_array().or_throw()? => {
            // SAFETY: the value was just checked to be an object.
            let object = unsafe { value.cast::<Object>() }.or_throw()?;
            let id = object.get::<Unknown>("id").or_throw()?;
            let id = match id {
                Some(id) => self::id(env, &id, &format!("{what}.id"))?,
                None => {
                    return Err(type_error(env, format!("{what} must have an `id` string")));
                }
            };
            let weight = object.get::<Unknown>("weight").or_throw()?;
            let weight = self::weight(env, weight, &format!("{what}.weight"))?;
            let tag = object.get::<Unknown>("tag").or_throw()?;
            let tag = self::tag(env, tag, &format!("{what}.tag"))?;
            let (locality, priority) = place(env, &object, what)?;
            Ok(Node::with_tag(id, weight, tag).located(locality, priority))
        }
        _ => Err(type_error(
            env,
            format!(
                "{what} must be an id string or {{ id, weight }}, got {}",
                describe(value)
            ),
        )),
    }
}

/// A node's `locality` and `priority` properties (absent: `""` and 0).
fn place(env: &Env, object: &Object<'_>, what: &str) -> Result<(String, u32)> {
    let locality = object.get::<Unknown>("locality").or_throw()?;
    let locality = match present(locality)? {
        Some(l) => self::locality(env, &l, &format!("{what}.locality"))?,
        None => String::new(),
    };
    let priority = object.get::<Unknown>("priority").or_throw()?;
    let priority = match present(priority)? {
        Some(p) => self::priority(env, &p, &format!("{what}.priority"))?,
        None => 0,
    };
    Ok((locality, priority))
}

/// A locality: a string (`"region/zone/sub_zone"`; the core checks its parts).
pub fn locality(env: &Env, value: &Unknown<'_>, what: &str) -> Result<String> {
    id(env, value, what)
}

/// A priority level: an integer in 0..=2^32-1.
pub fn priority(env: &Env, value: &Unknown<'_>, what: &str) -> Result<u32> {
    Ok(integer(env, value, what, f64::from(u32::MAX))? as u32)
}

/// `{ locality: number }` or an array of `[locality, number]` pairs, each number an integer up
/// to `max` (`what` names the argument in errors).
pub fn per_locality(
    env: &Env,
    value: &Unknown<'_>,
    what: &str,
    max: f64,
) -> Result<Vec<(String, f64)>> {
    if value.is_array().or_throw()? {
        let pairs = array(env, value, what)?;
        return (0..pairs.len())
            .map(|i| {
                let item = pairs.get::<Unknown>(i).or_throw()?;
                let pair = match item {
                    Some(item) if item.is_array().or_throw()? => array(env, &item, what)?,
                    _ => {
                        return Err(type_error(
                            env,
                            format!("{what}[{i}] must be a [locality, number] pair"),
                        ));
                    }
                };
                let (l, n) = (
                    pair.get::<Unknown>(0).or_throw()?,
                    pair.get::<Unknown>(1).or_throw()?,
                );
                let (Some(l), Some(n)) = (l, n) else {
                    return Err(type_error(
                        env,
                        format!("{what}[{i}] must be a [locality, number] pair"),
                    ));
                };
                let locality = self::locality(env, &l, &format!("{what}[{i}][0]"))?;
                Ok((locality, integer(env, &n, &format!("{what}[{i}][1]"), max)?))
            })
            .collect();
    }
    if value.get_type().or_throw()? != ValueType::Object {
        return Err(type_error(
            env,
            format!(
                "{what} must be an object {{ locality: number }} or an array of [locality, number] pairs, got {}",
                describe(value)
            ),
        ));
    }
    // SAFETY: the value was just checked to be an object.
    let object = unsafe { value.cast::<Object>() }.or_throw()?;
    own_keys(&object)?
        .into_iter()
        .map(|locality| {
            let n = object.get::<Unknown>(&locality).or_throw()?;
            let n = n.ok_or_else(|| type_error(env, format!("{what}[{locality:?}] is missing")))?;
            let n = integer(env, &n, &format!("{what}[{locality:?}]"), max)?;
            Ok((locality, n))
        })
        .collect()
}

/// The node of `add(id, weight?, tag?)`, or of `add({ id, weight?, tag?, locality?,
/// priority? })`.
pub fn new_node(
    env: &Env,
    id: Unknown<'_>,
    weight: Option<Unknown<'_>>,
    tag: Option<Unknown<'_>>,
) -> Result<Node> {
    if id.get_type().or_throw()? == ValueType::Object && !id.is_array().or_throw()? {
        if present(weight)?.is_some() || present(tag)?.is_some() {
            return Err(type_error(
                env,
                "add({ id, ... }) takes the weight and tag in the object".to_string(),
            ));
        }
        return node(env, &id, "node");
    }
    let id = self::id(env, &id, "id")?;
    let weight = self::weight(env, weight, "weight")?;
    let tag = self::tag(env, tag, "tag")?;
    Ok(Node::with_tag(id, weight, tag))
}

/// A JavaScript array, or a `TypeError` naming `what`.
pub fn array<'e>(env: &Env, value: &Unknown<'e>, what: &str) -> Result<Array<'e>> {
    if !value.is_array().or_throw()? {
        return Err(type_error(
            env,
            format!("{what} must be an array, got {}", describe(value)),
        ));
    }
    // SAFETY: the value was just checked to be an array.
    unsafe { value.cast::<Array>() }.or_throw()
}

/// A node list: an array of ids or `{ id, weight?, tag? }` objects.
pub fn nodes(env: &Env, value: &Unknown<'_>) -> Result<Vec<Node>> {
    let array = array(env, value, "nodes")?;
    // The length is the caller's (`a.length = 2 ** 32 - 1` costs nothing, and a prototype can
    // answer every index): refuse what no balancer can hold before reading an element.
    if array.len() as usize > MAX_NODES {
        return Err(liblb_core::Error::TooManyNodes(array.len() as usize)).or_throw();
    }
    (0..array.len())
        .map(|i| {
            let item = array.get::<Unknown>(i).or_throw()?;
            match item {
                Some(item) => node(env, &item, &format!("nodes[{i}]")),
                None => Err(type_error(env, format!("nodes[{i}] is missing"))),
            }
        })
        .collect()
}

/// Balancer options from `{ seed?, vnodes?, hash? }`: the object's own enumerable string-keyed
/// properties (inherited ones, e.g. from a polluted `Object.prototype`, are not options). Every
/// property goes through the core's `Options::set`, so unknown names and bad values get the same
/// errors as in every language.
pub fn options(env: &Env, value: Option<Unknown<'_>>) -> Result<Options> {
    let mut options = Options::default();
    let Some(value) = present(value)? else {
        return Ok(options);
    };
    if value.get_type().or_throw()? != ValueType::Object || value.is_array().or_throw()? {
        return Err(type_error(
            env,
            format!("options must be an object, got {}", describe(&value)),
        ));
    }
    // SAFETY: the value was just checked to be an object.
    let object = unsafe { value.cast::<Object>() }.or_throw()?;
    for name in own_keys(&object)? {
        if name == "budget" {
            continue; // The balancer's default budget (`Balancer::new`), not a core option.
        }
        let Some(item) = object.get::<Unknown>(&name).or_throw()? else {
            continue; // `{ seed: undefined }` means "not given".
        };
        let what = format!("options.{name}");
        let text;
        let option = match item.get_type().or_throw()? {
            ValueType::Null => continue,
            ValueType::String => {
                text = string(env, &item, &what)?;
                OptionValue::Str(&text)
            }
            ValueType::Number if Options::NUMBER_NAMES.contains(&name.as_str()) => {
                // Options that take any number (`slow_start_aggression`): the shortest
                // round-trip text, parsed (and range-checked) by the core.
                // SAFETY: the value's type was just checked to be a number.
                let number: f64 = unsafe { item.cast::<f64>() }.or_throw()?;
                text = number.to_string();
                OptionValue::Str(&text)
            }
            ValueType::Number => {
                OptionValue::Int(integer(env, &item, &what, 9_007_199_254_740_991.0)? as u64)
            }
            ValueType::BigInt => OptionValue::Int(big_u64(env, &item, &what)?),
            _ => {
                return Err(type_error(
                    env,
                    format!(
                        "{what} must be a number, bigint or string, got {}",
                        describe(&item)
                    ),
                ));
            }
        };
        options.set(&name, option).or_throw()?;
    }
    Ok(options)
}

/// The own enumerable string keys of an object (`Object.keys`; napi-rs's `Object::keys` uses
/// `napi_get_property_names`, which includes inherited enumerable properties).
pub(crate) fn own_keys(object: &Object<'_>) -> Result<Vec<String>> {
    let (env, raw) = (object.value().env, object.raw());
    let mut names = ptr::null_mut();
    // SAFETY: a valid env and object from napi-rs; out-pointer to a local.
    let status = unsafe {
        sys::napi_get_all_property_names(
            env,
            raw,
            sys::KeyCollectionMode::own_only,
            sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
            sys::KeyConversion::numbers_to_strings,
            &mut names,
        )
    };
    napi::check_status!(status).or_throw()?;
    // SAFETY: napi returned an array.
    let names = unsafe { Array::from_napi_value(env, names) }.or_throw()?;
    // Property names are strings: `numbers_to_strings` converts index keys, symbols are skipped.
    (0..names.len())
        .filter_map(|i| names.get::<String>(i).or_throw().transpose())
        .collect()
}

/// An unsigned 64-bit integer given as a bigint.
fn big_u64(env: &Env, value: &Unknown<'_>, what: &str) -> Result<u64> {
    // SAFETY: the caller checked that the value is a bigint.
    let big = unsafe { value.cast::<BigInt>() }.or_throw()?;
    match big.get_u64() {
        (false, n, true) => Ok(n),
        (negative, low, _) => {
            let got = match (negative, big.words.len()) {
                (true, 1) => format!("-{low}n"),
                (true, _) => "a negative bigint".to_string(),
                (false, _) => "a bigint of 2n ** 64n or more".to_string(),
            };
            Err(range_error(
                env,
                RANGE_ERROR_CODE,
                format!("{what} must be a bigint between 0n and 2n ** 64n - 1n, got {got}"),
            ))
        }
    }
}

/// A caller's 64-bit key hash (`pickHash`): a bigint, a safe-integer number or decimal text,
/// 0 to 2^64 - 1.
pub fn hash64(env: &Env, value: &Unknown<'_>) -> Result<u64> {
    u64_value(env, value, "hash")
}

/// A node's 64-bit tag (`{ id, weight, tag }`, `add(id, weight, tag)`), read like a hash;
/// absent (`undefined` / `null`) is 0.
pub fn tag(env: &Env, value: Option<Unknown<'_>>, what: &str) -> Result<u64> {
    match present(value)? {
        Some(value) => u64_value(env, &value, what),
        None => Ok(0),
    }
}

/// An integer from 0 to 2^64 - 1 given as a bigint, a safe-integer number or decimal text.
pub fn u64_value(env: &Env, value: &Unknown<'_>, what: &str) -> Result<u64> {
    match value.get_type().or_throw()? {
        ValueType::BigInt => big_u64(env, value, what),
        ValueType::Number => Ok(integer(env, value, what, 9_007_199_254_740_991.0)? as u64),
        ValueType::String => {
            let text = string(env, value, what)?;
            // Plain decimal digits only: `u64::from_str` would also take a leading `+`.
            match text.parse::<u64>() {
                Ok(n) if text.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
                _ => Err(range_error(
                    env,
                    RANGE_ERROR_CODE,
                    format!(
                        "{what} must be decimal digits of an integer between 0 and 2^64 - 1, got {text:?}"
                    ),
                )),
            }
        }
        _ => Err(type_error(
            env,
            format!(
                "{what} must be a bigint, number or decimal string, got {}",
                describe(value)
            ),
        )),
    }
}

/// A request's end as `{ ok, kind, latencyMs, retryAfterMs }` (`Lease.finish`,
/// `Balancer.report`), read and checked whole before anything is recorded.
pub struct OutcomeArgs {
    /// `None` for a success.
    kind: Option<FailureKind>,
    latency: Option<Duration>,
    retry_after: Option<Duration>,
}

impl OutcomeArgs {
    /// The outcome, `measured` standing in for a latency not given (a lease's time since
    /// acquire). A success always has one: `report` requires it, a lease measures it.
    pub fn outcome(self, measured: Option<Duration>) -> Outcome {
        let latency = self.latency.or(measured);
        match self.kind {
            None => Outcome::Success(latency.unwrap_or_default()),
            Some(kind) => Outcome::Failed(Failure {
                kind,
                latency,
                retry_after: self.retry_after,
            }),
        }
    }
}

/// A time in milliseconds (`latencyMs`, `retryAfterMs`): a finite number >= 0 (fractions
/// allowed), else a `RangeError` (`ERR_OUT_OF_RANGE`); not a number: a `TypeError`.
pub(crate) fn millis(env: &Env, value: &Unknown<'_>, what: &str) -> Result<Duration> {
    if value.get_type().or_throw()? != ValueType::Number {
        return Err(type_error(
            env,
            format!("{what} must be a number, got {}", describe(value)),
        ));
    }
    // SAFETY: the value was just checked to be a number.
    let n = unsafe { value.cast::<f64>() }.or_throw()?;
    match Duration::try_from_secs_f64(n / 1000.0) {
        Ok(time) if n >= 0.0 => Ok(time),
        _ => Err(range_error(
            env,
            RANGE_ERROR_CODE,
            format!("{what} must be a finite number >= 0, got {}", js_number(n)),
        )),
    }
}

/// The properties of an outcome object, in the order [`outcome`] reads them.
pub const OUTCOME_FIELDS: [&str; 4] = ["ok", "kind", "latencyMs", "retryAfterMs"];

/// Reads `{ ok, kind, latencyMs, retryAfterMs }`: `ok` a boolean (default true), `kind` one
/// of `failureKinds()` (a failure's; default 'error'), `latencyMs` and `retryAfterMs`
/// milliseconds, or absent. `report` (`required`) needs the object and `ok`, and a success's
/// `latencyMs`. A kind or a retry-after with a success, or an unknown kind, is the core's
/// `LB_INVALID_OUTCOME`.
pub fn outcome(
    env: &Env,
    value: Option<Unknown<'_>>,
    what: &str,
    required: bool,
) -> Result<OutcomeArgs> {
    let Some(value) = present(value)? else {
        if required {
            return Err(type_error(
                env,
                format!("{what} must be an object {{ ok, latencyMs }}, got undefined"),
            ));
        }
        return Ok(OutcomeArgs {
            kind: None,
            latency: None,
            retry_after: None,
        });
    };
    if value.get_type().or_throw()? != ValueType::Object || value.is_array().or_throw()? {
        return Err(type_error(
            env,
            format!(
                "{what} must be an object {{ ok, latencyMs }}, got {}",
                describe(&value)
            ),
        ));
    }
    // SAFETY: the value was just checked to be an object.
    let object = unsafe { value.cast::<Object>() }.or_throw()?;
    outcome_fields(env, what, required, |i| {
        present(object.get::<Unknown>(OUTCOME_FIELDS[i]).or_throw()?)
    })
}

/// [`outcome`] of a plain object (not an array) whose [`OUTCOME_FIELDS`] the caller already
/// read: `read[i]` is field `i`, `None` when it is `undefined` or `null`. The same checks and
/// errors, in the same order.
pub fn outcome_read(
    env: &Env,
    what: &str,
    required: bool,
    read: [Option<Unknown<'_>>; 4],
) -> Result<OutcomeArgs> {
    outcome_fields(env, what, required, |i| Ok(read[i]))
}

/// [`outcome`] after the object check: `field(i)` gives [`OUTCOME_FIELDS`]`[i]` if present.
fn outcome_fields<'v>(
    env: &Env,
    what: &str,
    required: bool,
    field: impl Fn(usize) -> Result<Option<Unknown<'v>>>,
) -> Result<OutcomeArgs> {
    let ok = match field(0)? {
        // `report` records what the caller says happened: no default outcome.
        None if required => {
            return Err(type_error(
                env,
                format!("{what}.ok must be a boolean, got undefined"),
            ));
        }
        None => true,
        Some(ok) if ok.get_type().or_throw()? == ValueType::Boolean => {
            // SAFETY: the value was just checked to be a boolean.
            unsafe { ok.cast::<bool>() }.or_throw()?
        }
        Some(ok) => {
            return Err(type_error(
                env,
                format!("{what}.ok must be a boolean, got {}", describe(&ok)),
            ));
        }
    };
    let kind = match field(1)? {
        None => None,
        Some(kind) => {
            let name = string(env, &kind, &format!("{what}.kind"))?;
            Some(FailureKind::from_name(&name).or_throw()?)
        }
    };
    let latency = match field(2)? {
        // A success reported must say how long it took; a failure may not know.
        None if required && ok => {
            return Err(type_error(
                env,
                format!("{what}.latencyMs must be a number, got undefined"),
            ));
        }
        None => None,
        Some(ms) => Some(millis(env, &ms, &format!("{what}.latencyMs"))?),
    };
    let retry_after = match field(3)? {
        None => None,
        Some(ms) => Some(millis(env, &ms, &format!("{what}.retryAfterMs"))?),
    };
    let invalid = |detail: String| Err(liblb_core::Error::InvalidOutcome(detail)).or_throw();
    match (ok, kind) {
        (true, Some(kind)) => invalid(format!(
            "kind {:?} is a failure kind: pass ok: false with it",
            kind.name()
        )),
        (true, None) if retry_after.is_some() => {
            invalid("retryAfterMs is for failures: pass ok: false with it".into())
        }
        (true, None) => Ok(OutcomeArgs {
            kind: None,
            latency,
            retry_after: None,
        }),
        (false, kind) => Ok(OutcomeArgs {
            kind: Some(kind.unwrap_or(FailureKind::Error)),
            latency,
            retry_after,
        }),
    }
}

/// Scratch space for one key: short string keys never touch the heap. The stack part is left
/// uninitialised (only what napi writes is ever read), saving a 256-byte clear per pick.
pub struct KeyBuf {
    stack: [MaybeUninit<u8>; 256],
    heap: Vec<u8>,
}

impl KeyBuf {
    /// An empty buffer.
    #[inline]
    pub fn new() -> KeyBuf {
        KeyBuf {
            stack: [MaybeUninit::uninit(); 256],
            heap: Vec::new(),
        }
    }
}

/// What a bytes argument is called in its `TypeError`.
#[derive(Clone, Copy)]
enum Named {
    /// `key`.
    Key,
    /// `keys[i]` of a batch.
    Keys(u32),
    /// An argument of another name.
    Arg(&'static str),
}

/// The bytes of a key: a string's UTF-8, or a `Buffer`/`Uint8Array`'s contents (borrowed).
/// `undefined` and `null` give `None` when `optional`. `name` names the value in errors.
#[inline]
fn key_bytes<'a>(
    env: &Env,
    value: &Unknown<'a>,
    buf: &'a mut KeyBuf,
    name: Named,
    optional: bool,
) -> Result<Option<&'a [u8]>> {
    let (raw_env, raw) = (env.raw(), value.raw());
    let mut len = 0usize;
    // Strings first, without asking for the type: one napi call for the common case.
    // SAFETY: `stack` is writable for its whole length; napi writes at most that many bytes
    // (including the NUL it appends) and stores the count written, excluding the NUL, in `len`.
    let status = unsafe {
        sys::napi_get_value_string_utf8(
            raw_env,
            raw,
            buf.stack.as_mut_ptr().cast(),
            buf.stack.len(),
            &mut len,
        )
    };
    if status == sys::Status::napi_ok {
        // napi truncates at a character boundary, so a string whose last character (up to 4
        // bytes) did not fit can come back shorter than the buffer: only a result leaving room
        // for one more character plus the NUL is known to be whole.
        if len + 5 <= buf.stack.len() {
            // SAFETY: napi initialised the first `len` bytes (the string's UTF-8).
            let bytes = unsafe { std::slice::from_raw_parts(buf.stack.as_ptr().cast::<u8>(), len) };
            return Ok(Some(bytes));
        }
        return long_string_key(raw_env, raw, buf).map(Some);
    }
    if optional && is_nullish(value)? {
        return Ok(None);
    }
    // Not a string: a Buffer or Uint8Array.
    match typed_bytes(raw_env, raw, &mut buf.heap) {
        Some(bytes) => Ok(Some(bytes)),
        None => {
            let name = match name {
                Named::Key => "key".to_string(),
                Named::Keys(i) => format!("keys[{i}]"),
                Named::Arg(name) => name.to_string(),
            };
            let got = describe(value);
            let message = format!("{name} must be a string, Buffer or Uint8Array, got {got}");
            Err(type_error(env, message))
        }
    }
}

/// The viewed bytes of a `Uint8Array` (a `Buffer` is one), or `None` for any other value.
///
/// Bytes in an `ArrayBuffer` are borrowed in place: only this thread can touch them, and it runs
/// no JavaScript while the slice is in use. Bytes in a `SharedArrayBuffer` may be written by
/// another worker at any moment, so they are copied into `heap` first, one relaxed atomic load
/// per byte (no `&[u8]` ever points at memory another thread may write). A key being rewritten
/// while it is read hashes as some mix of old and new bytes, as it would in JavaScript.
#[inline]
fn typed_bytes(env: sys::napi_env, raw: sys::napi_value, heap: &mut Vec<u8>) -> Option<&[u8]> {
    let (mut kind, mut len, mut data, mut buffer, mut offset) =
        (0, 0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
    // SAFETY: a valid env and value; out-pointers to locals. Fails (no exception) for a value
    // that is not a TypedArray.
    let status = unsafe {
        sys::napi_get_typedarray_info(
            env,
            raw,
            &mut kind,
            &mut len,
            &mut data,
            &mut buffer,
            &mut offset,
        )
    };
    if status != sys::Status::napi_ok || kind != sys::TypedarrayType::uint8_array {
        return None;
    }
    if len == 0 || data.is_null() {
        return Some(&[]);
    }
    let mut plain = false;
    // SAFETY: `buffer` is the view's buffer, just returned by napi. `napi_is_arraybuffer` is
    // false for a `SharedArrayBuffer`.
    let status = unsafe { sys::napi_is_arraybuffer(env, buffer, &mut plain) };
    if status == sys::Status::napi_ok && plain {
        // SAFETY: napi returned `len` bytes at `data`, in an ArrayBuffer kept alive by the view
        // (an argument of the running call); nothing else can write or move them while this
        // thread runs no JavaScript, which holds as long as the slice is used.
        return Some(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) });
    }
    heap.clear();
    heap.reserve(len);
    let data = data.cast::<u8>();
    for i in 0..len {
        // SAFETY: `data + i` is within the `len` live bytes napi returned (a SharedArrayBuffer
        // never shrinks); atomic loads make concurrent writes from other threads defined.
        heap.push(unsafe { AtomicU8::from_ptr(data.add(i)) }.load(Ordering::Relaxed));
    }
    Some(heap)
}

/// An optional key: `undefined`/`null` mean "no key".
#[inline]
pub fn key_or_none<'a>(
    env: &Env,
    value: &Unknown<'a>,
    buf: &'a mut KeyBuf,
) -> Result<Option<&'a [u8]>> {
    key_bytes(env, value, buf, Named::Key, true)
}

/// A required bytes argument called `name`: a string's UTF-8 or a `Buffer`/`Uint8Array`'s
/// contents, as keys are read.
pub fn bytes_arg<'a>(
    env: &Env,
    value: &Unknown<'a>,
    buf: &'a mut KeyBuf,
    name: &'static str,
) -> Result<&'a [u8]> {
    Ok(key_bytes(env, value, buf, Named::Arg(name), false)?.unwrap_or_default())
}

/// A string key that may not fit the stack buffer: copied to the heap.
#[cold]
fn long_string_key(env: sys::napi_env, raw: sys::napi_value, buf: &mut KeyBuf) -> Result<&[u8]> {
    utf8_into(env, raw, &mut buf.heap)?;
    Ok(&buf.heap)
}

/// Replaces `out` with the UTF-8 bytes of `raw`, a string of any length: measure, then copy.
fn utf8_into(env: sys::napi_env, raw: sys::napi_value, out: &mut Vec<u8>) -> Result<()> {
    let mut len = 0usize;
    // SAFETY: with a null buffer napi only stores the string's UTF-8 length in `len`.
    let status = unsafe { sys::napi_get_value_string_utf8(env, raw, ptr::null_mut(), 0, &mut len) };
    napi::check_status!(status).or_throw()?;
    out.clear();
    out.resize(len + 1, 0);
    // SAFETY: `out` is writable for `len + 1` bytes, room for the string and napi's NUL.
    let status = unsafe {
        sys::napi_get_value_string_utf8(env, raw, out.as_mut_ptr().cast(), len + 1, &mut len)
    };
    napi::check_status!(status).or_throw()?;
    out.truncate(len);
    Ok(())
}

/// The UTF-8 bytes of a value already known to be a string (of any length).
pub fn utf8(env: &Env, value: &Unknown<'_>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    utf8_into(env.raw(), value.raw(), &mut out)?;
    Ok(out)
}

/// At most this many keys are reserved for before any is read.
const PRESIZE_KEYS: usize = 4096;

/// Many keys packed into one buffer: `pickMany` converts the whole batch before picking.
pub struct Keys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Keys {
    /// The keys of a JavaScript array, read with its length as it is now (a getter may have
    /// changed it since the caller's bulk attempt: the answers are for the keys as read), which
    /// is checked against [`MAX_BATCH`] again for that reason.
    pub fn from_array(env: &Env, value: &Unknown<'_>) -> Result<Keys> {
        let array = array(env, value, "keys")?;
        if array.len() > MAX_BATCH {
            return Err(too_many_keys(env, array.len()));
        }
        // Reserve for a bounded number of keys up front and let the vectors grow with real ones.
        let reserve = (array.len() as usize).min(PRESIZE_KEYS);
        let mut keys = Keys {
            bytes: Vec::with_capacity(reserve * 16),
            ends: Vec::with_capacity(reserve),
        };
        let mut buf = KeyBuf::new();
        for i in 0..array.len() {
            let item = array.get::<Unknown>(i).or_throw()?;
            let item = match item {
                Some(item) => item,
                None => return Err(type_error(env, format!("keys[{i}] is missing"))),
            };
            let bytes = key_bytes(env, &item, &mut buf, Named::Keys(i), false)?.unwrap_or_default();
            if bytes.len() > MAX_BATCH_KEY_BYTES - keys.bytes.len()
                || keys.bytes.try_reserve(bytes.len()).is_err()
                || keys.ends.try_reserve(1).is_err()
            {
                return Err(too_many_key_bytes(env));
            }
            keys.bytes.extend_from_slice(bytes);
            keys.ends.push(keys.bytes.len());
        }
        Ok(keys)
    }

    /// `count` keys joined by NUL bytes; `None` if the pieces do not number `count` (a key
    /// contained a NUL itself). The caller checks the total size.
    pub fn from_joined(joined: &[u8], count: usize) -> Option<Keys> {
        let mut keys = Keys {
            bytes: Vec::with_capacity(joined.len()),
            ends: Vec::with_capacity(count),
        };
        for piece in joined.split(|b| *b == 0) {
            if keys.ends.len() == count {
                return None;
            }
            keys.bytes.extend_from_slice(piece);
            keys.ends.push(keys.bytes.len());
        }
        (keys.ends.len() == count).then_some(keys)
    }

    /// Each key's bytes, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter())
            .map(|(s, e)| &self.bytes[s..*e])
    }
}

/// A picked node id, turned into a JavaScript string when returned.
pub struct Id(pub liblb_core::Picked);

impl ToNapiValue for Id {
    #[inline]
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        // SAFETY: forwarded from the caller (a valid env on this thread).
        unsafe { <&str>::to_napi_value(env, val.0.id()) }
    }
}

/// A JavaScript array whose elements are its own data properties, defined (not assigned): an
/// assignment to a missing index consults the prototype chain, so a setter JavaScript put on
/// `Array.prototype[i]` would run instead and leave a hole at `i`.
pub struct OwnArray<T>(pub Vec<T>);

impl<T: ToNapiValue> ToNapiValue for OwnArray<T> {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let values = val
            .0
            .into_iter()
            // SAFETY: forwarded from the caller (a valid env on this thread).
            .map(|v| unsafe { T::to_napi_value(env, v) })
            .collect::<napi::Result<Vec<_>>>()?;
        // SAFETY: as above; every value was just made in `env`.
        unsafe { own_array(env, &values) }
    }
}

/// The descriptor of an own data property (writable, enumerable, configurable: what an
/// assignment makes, but defined, so no setter such as `__proto__`'s runs), named by the
/// NUL-terminated `utf8name` or, when that is NULL, by the string value `name`.
pub fn data_property(
    utf8name: *const std::ffi::c_char,
    name: sys::napi_value,
    value: sys::napi_value,
) -> sys::napi_property_descriptor {
    sys::napi_property_descriptor {
        utf8name,
        name,
        method: None,
        getter: None,
        setter: None,
        value,
        attributes: sys::PropertyAttributes::writable
            | sys::PropertyAttributes::enumerable
            | sys::PropertyAttributes::configurable,
        data: ptr::null_mut(),
    }
}

/// A new array of `values`, each defined as an own element (see [`OwnArray`]), in one
/// `napi_define_properties` call.
///
/// # Safety
/// `env` is a valid env on this thread and `values` were made in it.
pub unsafe fn own_array(
    env: sys::napi_env,
    values: &[sys::napi_value],
) -> napi::Result<sys::napi_value> {
    let mut array = ptr::null_mut();
    // SAFETY: a valid env (the caller's promise) and an out-pointer to a local.
    napi::check_status!(unsafe { sys::napi_create_array(env, &mut array) })?;
    if values.is_empty() {
        return Ok(array);
    }
    // The index names "0\0", "1\0", ... in one buffer, which outlives the call that reads them.
    let mut names = Vec::with_capacity(values.len() * 8);
    let mut starts = Vec::with_capacity(values.len());
    for i in 0..values.len() {
        starts.push(names.len());
        names.extend_from_slice(i.to_string().as_bytes());
        names.push(0);
    }
    let descriptors: Vec<sys::napi_property_descriptor> = values
        .iter()
        .zip(&starts)
        .map(|(&value, &start)| {
            data_property(names[start..].as_ptr().cast(), ptr::null_mut(), value)
        })
        .collect();
    // SAFETY: a valid env; `array` made in it; `descriptors` valid for its length, each name
    // NUL-terminated inside `names`, which lives until after the call.
    napi::check_status!(unsafe {
        sys::napi_define_properties(env, array, descriptors.len(), descriptors.as_ptr())
    })?;
    Ok(array)
}

/// Several picked ids, turned into a JavaScript array of strings when returned. Each distinct
/// node becomes one JavaScript string, shared by every slot that names it.
pub struct Ids(pub liblb_core::Picks);

impl ToNapiValue for Ids {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let picks = val.0;
        let mut strings = Vec::with_capacity(picks.len());
        // Ids of one `Picks` point into one snapshot, so equal pointers mean the same node. A
        // short linear cache catches the common case of few nodes and many keys.
        let mut made: Vec<(*const u8, sys::napi_value)> = Vec::new();
        for id in picks.ids() {
            let string = match made.iter().find(|(p, _)| *p == id.as_ptr()) {
                Some(&(_, s)) => s,
                None => {
                    // SAFETY: forwarded from the caller (a valid env on this thread).
                    let s = unsafe { <&str>::to_napi_value(env, id) }?;
                    if made.len() < 64 {
                        made.push((id.as_ptr(), s));
                    }
                    s
                }
            };
            strings.push(string);
        }
        // SAFETY: forwarded from the caller; the strings were made in `env`.
        unsafe { own_array(env, &strings) }
    }
}
