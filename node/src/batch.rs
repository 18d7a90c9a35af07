//! `pickMany` for large batches: keys and answers cross the boundary in bulk.
//!
//! Node-API has no bulk array access: reading each key (`napi_get_element`, then its UTF-8) and
//! writing each answer (`napi_set_element`) costs three calls into V8's generic property code,
//! ~130 ns per key, against 7-90 ns for the pick itself. Two small JavaScript helpers, compiled
//! once per environment, do the per-element work in JIT-compiled code instead:
//!
//! - `pack(keys, count, join, max)`: reads each of the `count` keys exactly once and checks that
//!   it is a string. For a keyed algorithm it returns the keys joined by NUL, built by the helper
//!   itself, read back as one UTF-8 string and split on NUL; a key containing NUL itself shows
//!   up as one piece too many. Lone surrogates cannot pair up across keys (a NUL separates
//!   them), so every key's bytes are exactly what `pick(key)` reads. Unkeyed algorithms ignore
//!   keys (they only count the picks), so for them the check is all: the batch becomes `count`
//!   keyless picks.
//! - `unpack(ids, slots, count)`: the distinct answers as an array of strings plus a
//!   `Uint32Array` of indices into it, expanded into the result array. It gives up (returns
//!   `undefined`) when an assignment did not make an element (a setter on `Array.prototype[i]`
//!   ran instead); the native side then defines every element itself (`js::own_array`).
//!
//! The helpers call no built-in method and read no property that JavaScript code can replace
//! (only `typeof`, string `+`, string and array `length`, and indexing): an Array subclass with
//! its own `join`, a patched `Array.prototype.join` or `push`, or an index getter cannot change
//! what they compute. `pack` gives up (returns `undefined`) when a key is not a string, when the
//! array's length is not the `count` the caller read before (a getter grew or shrank it), when
//! the joined string would exceed `max` UTF-16 units (V8 caps strings at about 2^29), or when
//! anything throws (a getter). The batch then takes the per-element path of `js::Keys`, which
//! also produces the exact `TypeError`s, so a batch's answers are always the per-key `pick`
//! answers for the keys as read.
//!
//! Batches shorter than [`SMALL_BATCH`] take the per-element path, where the helpers' fixed cost
//! would not pay off.

use crate::error::{self, OrThrow, Result};
use crate::js::{self, Ids, Keys};
use liblb_core::Picks;
use napi::bindgen_prelude::ToNapiValue;
use napi::{Env, JsValue, Unknown, ValueType, sys};
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;

/// Batches shorter than this use the per-element path: the helpers cost ~1.3 µs per call, and
/// the measured crossover is 12-16 keys.
const SMALL_BATCH: u32 = 12;

/// Longest joined string (in UTF-16 units) `pack` builds; longer batches take the per-element
/// path. Below V8's string length limit (2^29 - 24 on 64-bit), with room to spare.
const MAX_JOINED: u32 = 1 << 28;

/// The helpers' source: an expression evaluating to `{ pack, unpack }`. See the module docs.
const HELPERS: &str = r"({
  pack(keys, count, join, max) {
    try {
      if (keys.length !== count) return undefined
      if (!join) {
        for (let i = 0; i < count; i++) if (typeof keys[i] !== 'string') return undefined
        return keys.length === count ? true : undefined
      }
      let joined = ''
      for (let i = 0; i < count; i++) {
        const key = keys[i]
        if (typeof key !== 'string' || joined.length + key.length >= max) return undefined
        joined = i === 0 ? key : joined + '\0' + key
      }
      return keys.length === count ? joined : undefined
    } catch {
      return undefined
    }
  },
  unpack(ids, slots, count) {
    const out = []
    for (let i = 0; i < count; i++) {
      out[i] = ids[slots[i]]
      // A setter on Array.prototype[i] ran instead of making an element: give up.
      if (out.length !== i + 1) return undefined
    }
    return out
  },
})";

/// The helpers of one environment (main thread or worker), kept alive by references.
pub struct Helpers {
    pack: sys::napi_ref,
    unpack: sys::napi_ref,
    env: sys::napi_env,
    /// This environment's fast-pick handles (see `ids.rs`).
    pub fast: std::rc::Rc<crate::ids::Handles>,
    /// This environment's open leases and requests (see `leases.rs`).
    pub leases: std::rc::Rc<crate::leases::State>,
}

impl Helpers {
    /// Compiles the helpers for `env` and returns them leaked; an environment cleanup hook
    /// releases them when the environment shuts down.
    pub fn install(env: &Env) -> napi::Result<*const Helpers> {
        let object: Unknown = env.run_script(HELPERS)?;
        let fast = std::rc::Rc::<crate::ids::Handles>::default();
        let leases = std::rc::Rc::new(crate::leases::State::new(std::rc::Rc::clone(&fast)));
        let mut helpers = Box::new(Helpers {
            pack: ptr::null_mut(),
            unpack: ptr::null_mut(),
            env: env.raw(),
            fast,
            leases,
        });
        for (name, slot) in [
            (c"pack", &mut helpers.pack),
            (c"unpack", &mut helpers.unpack),
        ] {
            let mut function = ptr::null_mut();
            // SAFETY: a valid env; `object` is the object the script returned; out-pointers to
            // locals. The reference keeps the function alive until `release` deletes it.
            unsafe {
                napi::check_status!(sys::napi_get_named_property(
                    env.raw(),
                    object.raw(),
                    name.as_ptr(),
                    &mut function
                ))?;
                napi::check_status!(sys::napi_create_reference(env.raw(), function, 1, slot))?;
            }
        }
        let helpers = Box::into_raw(helpers);
        // SAFETY: `release` frees exactly this box, once, when the environment shuts down.
        napi::check_status!(unsafe {
            sys::napi_add_env_cleanup_hook(env.raw(), Some(release), helpers.cast())
        })?;
        Ok(helpers)
    }

    /// Calls one helper with `args`; a JavaScript exception stays pending and becomes the error.
    fn call(
        &self,
        env: &Env,
        helper: sys::napi_ref,
        args: &[sys::napi_value],
    ) -> Result<Unknown<'_>> {
        let (mut function, mut receiver, mut result) =
            (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: a valid env for this thread (the helpers' own: one `Helpers` per environment);
        // `helper` is alive until the cleanup hook; `args` outlives the call.
        unsafe {
            napi::check_status!(sys::napi_get_reference_value(
                env.raw(),
                helper,
                &mut function
            ))
            .or_throw()?;
            napi::check_status!(sys::napi_get_undefined(env.raw(), &mut receiver)).or_throw()?;
            napi::check_status!(sys::napi_call_function(
                env.raw(),
                receiver,
                function,
                args.len(),
                args.as_ptr(),
                &mut result
            ))
            .or_throw()?;
            Ok(Unknown::from_raw_unchecked(env.raw(), result))
        }
    }
}

/// Environment cleanup hook: deletes the helpers' references and frees them.
unsafe extern "C" fn release(arg: *mut c_void) {
    // SAFETY: `arg` is the box leaked by `Helpers::install`, released only here.
    let helpers = unsafe { Box::from_raw(arg.cast::<Helpers>()) };
    for reference in [helpers.pack, helpers.unpack] {
        // SAFETY: the references were created in this environment, which is still alive while
        // its cleanup hooks run. A failure (environment already torn down) leaks nothing more.
        unsafe { sys::napi_delete_reference(helpers.env, reference) };
    }
}

/// The keys of a `pickMany` call.
pub enum BatchKeys {
    /// Every key's bytes.
    Keys(Keys),
    /// Only how many keys there are (all strings, for an algorithm that ignores them).
    Count(usize),
}

/// The keys of a `pickMany` call, read in bulk when possible. `keyed`: whether the algorithm
/// uses them.
pub fn keys(env: &Env, value: &Unknown<'_>, helpers: &Helpers, keyed: bool) -> Result<BatchKeys> {
    let count = js::array(env, value, "keys")?.len();
    // Before any key is read: the length is the caller's, and reading 2^32 - 1 elements (a
    // prototype can answer every index) would hang the event loop before failing.
    if count > js::MAX_BATCH {
        return Err(js::too_many_keys(env, count));
    }
    if count >= SMALL_BATCH {
        let (mut count_arg, mut join, mut max) =
            (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: a valid env; out-pointers to locals.
        unsafe {
            napi::check_status!(sys::napi_create_uint32(env.raw(), count, &mut count_arg))
                .or_throw()?;
            napi::check_status!(sys::napi_get_boolean(env.raw(), keyed, &mut join)).or_throw()?;
            napi::check_status!(sys::napi_create_uint32(env.raw(), MAX_JOINED, &mut max))
                .or_throw()?;
        }
        let packed = helpers.call(env, helpers.pack, &[value.raw(), count_arg, join, max])?;
        match packed.get_type().or_throw()? {
            ValueType::Boolean => return Ok(BatchKeys::Count(count as usize)),
            ValueType::String => {
                let joined = js::utf8(env, &packed)?;
                // The joined string holds the keys' bytes plus `count - 1` separators.
                if joined.len().saturating_sub(count as usize - 1) > js::MAX_BATCH_KEY_BYTES {
                    return Err(js::too_many_key_bytes(env));
                }
                if let Some(keys) = Keys::from_joined(&joined, count as usize) {
                    return Ok(BatchKeys::Keys(keys));
                }
            }
            _ => {}
        }
    }
    Keys::from_array(env, value).map(BatchKeys::Keys)
}

/// The answers of a `pickMany` call, turned into a JavaScript array when returned.
pub struct Answers<'h> {
    picks: Picks,
    helpers: &'h Helpers,
}

impl<'h> Answers<'h> {
    /// Wraps the picks; small batches are converted element by element.
    pub fn new(picks: Picks, helpers: &'h Helpers) -> Answers<'h> {
        Answers { picks, helpers }
    }
}

impl ToNapiValue for Answers<'_> {
    unsafe fn to_napi_value(raw_env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let Answers { picks, helpers } = val;
        if picks.len() < SMALL_BATCH as usize {
            // SAFETY: forwarded from the caller.
            return unsafe { Ids::to_napi_value(raw_env, Ids(picks)) };
        }
        // Distinct answers, and each answer's index among them. Ids of one `Picks` point into
        // one snapshot, so equal pointers mean the same node.
        let mut distinct: Vec<&str> = Vec::new();
        // Beyond a few distinct nodes a linear search per answer costs more than a hash lookup.
        let mut index: HashMap<*const u8, u32> = HashMap::new();
        let mut slots: Vec<u32> = Vec::with_capacity(picks.len());
        for id in picks.ids() {
            let slot = if index.is_empty() {
                match distinct.iter().position(|d| d.as_ptr() == id.as_ptr()) {
                    Some(i) => i as u32,
                    None => {
                        distinct.push(id);
                        if distinct.len() > 16 {
                            index = (0..).zip(&distinct).map(|(i, d)| (d.as_ptr(), i)).collect();
                        }
                        distinct.len() as u32 - 1
                    }
                }
            } else {
                *index.entry(id.as_ptr()).or_insert_with(|| {
                    distinct.push(id);
                    distinct.len() as u32 - 1
                })
            };
            slots.push(slot);
        }
        let env = Env::from_raw(raw_env);
        let strings = distinct
            .iter()
            // SAFETY: forwarded from the caller (a valid env on this thread).
            .map(|id| unsafe { <&str>::to_napi_value(raw_env, id) })
            .collect::<napi::Result<Vec<_>>>()?;
        // Own elements, so the helper reads the strings and nothing a prototype holds.
        // SAFETY: as above; the strings were made in `raw_env`.
        let ids = unsafe { js::own_array(raw_env, &strings) }?;
        let (mut buffer, mut data, mut typed) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        let mut count = ptr::null_mut();
        // SAFETY: a valid env (from the caller); out-pointers to locals; the ArrayBuffer napi
        // creates is writable for `4 * slots.len()` bytes at `data`, aligned for u32 (V8 backing
        // stores are at least 8-aligned), and nothing else can see it yet.
        unsafe {
            napi::check_status!(sys::napi_create_arraybuffer(
                raw_env,
                slots.len() * 4,
                &mut data,
                &mut buffer
            ))?;
            ptr::copy_nonoverlapping(slots.as_ptr(), data.cast::<u32>(), slots.len());
            napi::check_status!(sys::napi_create_typedarray(
                raw_env,
                sys::TypedarrayType::uint32_array,
                slots.len(),
                buffer,
                0,
                &mut typed
            ))?;
            // The batch came from a JavaScript array, so it has fewer than 2^32 answers.
            napi::check_status!(sys::napi_create_uint32(
                raw_env,
                slots.len() as u32,
                &mut count
            ))?;
        }
        match helpers.call(&env, helpers.unpack, &[ids, typed, count]) {
            Ok(array) if array.get_type()? != ValueType::Undefined => Ok(array.raw()),
            // The helper met an indexed setter on the prototype chain: define every element
            // here instead (slower, but an array without holes).
            Ok(_) => {
                let all: Vec<sys::napi_value> =
                    slots.iter().map(|&slot| strings[slot as usize]).collect();
                // SAFETY: forwarded from the caller; the strings were made in `raw_env`.
                unsafe { js::own_array(raw_env, &all) }
            }
            Err(error) => Err(error::to_napi(error)),
        }
    }
}
