//! The fast path of `pick()`: node ids as JavaScript strings made once per membership, and no
//! receiver unwrap per call.
//!
//! A plain `pick` callback (see `fast.rs`) spent most of its time outside the pick: reading the
//! receiver's wrapped pointer (`napi_unwrap`, a private-property lookup in V8's runtime, ~30% of
//! the call) and creating the result string (`napi_create_string_utf8`, ~20%). Node-API 9 (Node
//! 20) can neither hold a reference to a string nor read an array element cheaply, so the cache
//! lives on the JavaScript side:
//!
//! - `Balancer.prototype.pick` is a small JavaScript function ([`PICK`]) that keeps, per
//!   balancer, a private record `{ f, g, ids }` in a `WeakMap` closed over by the function (no
//!   other code can reach it). The first pick on an instance goes through the native,
//!   receiver-checked `pick`; only after that call succeeded — so `this` is a `Balancer` — does it
//!   make the record with the native `__liblbFastPick` (receiver-checked too).
//! - `f(key?)` is a native function made for that one balancer: its data ([`FastPick`]) holds an
//!   `Arc` of the core balancer, so it needs no receiver at all. It picks, then answers the
//!   node's *index* (a small integer: no allocation) when the JavaScript array `ids` it last
//!   handed out holds that node's string, or else the id string itself, after putting it into
//!   its array (a new, empty one when the membership changed).
//! - On a string answer the JavaScript side refreshes `ids = g()` (`g` returns `f`'s current
//!   array), so `ids` is always the array `f` fills; a number `i` is answered only when `ids[i]`
//!   is the string of node `i` of the membership the pick came from.
//!
//! Which membership an array belongs to is a [`Membership`] token attached to the core's snapshot
//! ([`liblb_core::Picked::attachment`]): unique in the process and never reused, so an index is
//! only ever answered into the array made for its own membership, and an answer always names the
//! node the core picked.
//!
//! Napi values and references belong to one environment (the main thread or one worker) and may
//! only be used on its thread. A `Balancer` is only reachable from the JavaScript thread that
//! created it, and `f` and `g` only from the closure on that thread; they are finalized there,
//! and only then is a [`FastPick`] dropped (deleting its array's reference in its environment).

use crate::Balancer;
use crate::error::{Code, Error, OrThrow, Result};
use crate::js::{self, KeyBuf};
use liblb_core::Picked;
use napi::bindgen_prelude::{JsError, ToNapiValue, panic_to_error};
use napi::{Env, Unknown, sys};
use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `Balancer.prototype.pick`, installed over the native one when the module loads (see the
/// module docs). `nativePick` and `makeFast` are the native, receiver-checked methods.
pub const PICK: &str = r"(function (exports) {
  const proto = exports.Balancer.prototype
  const nativePick = proto.pick
  const makeFast = proto.__liblbFastPick
  delete proto.__liblbFastPick
  const fastOf = new WeakMap()
  const firstPick = (self, key) => {
    const answer = nativePick.call(self, key)
    fastOf.set(self, makeFast.call(self))
    return answer
  }
  Object.defineProperty(proto, 'pick', {
    value: function pick(key) {
      const fast = fastOf.get(this)
      if (fast === undefined) return firstPick(this, key)
      const answer = key === undefined ? fast.f() : fast.f(key)
      if (typeof answer === 'number') return fast.ids[answer]
      fast.ids = fast.g()
      return answer
    },
    writable: true,
    enumerable: true,
    configurable: true,
  })
})";

/// Identifies one published membership (core snapshot) across the process.
struct Membership(u64);

impl Membership {
    /// A token no other membership has had or will have.
    fn next() -> Membership {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        // Relaxed: only uniqueness matters, which every read-modify-write on one atomic gives.
        Membership(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// The id strings of one membership, in one environment.
struct Strings {
    env: sys::napi_env,
    membership: u64,
    /// A JavaScript array indexed like the membership's node list, kept alive by this strong
    /// reference (arrays are objects: Node-API 9 can reference them, unlike strings).
    array: sys::napi_ref,
    /// Which elements hold their node's string (kept here: reading a hole back costs more).
    filled: Vec<bool>,
}

impl Drop for Strings {
    fn drop(&mut self) {
        // SAFETY: made in `env`, on this thread (module docs), deleted once, here. A failure
        // (environment torn down, where Node frees references itself) leaks nothing more.
        unsafe { sys::napi_delete_reference(self.env, self.array) };
    }
}

/// What one balancer's `f` and `g` share: the core balancer and its id strings.
pub struct FastPick {
    core: Arc<liblb_core::Balancer>,
    strings: RefCell<Option<Strings>>,
}

impl FastPick {
    /// `f(key?)`: the picked node's index into the array `g` returns when that array holds its
    /// string, else the id string itself (now also in that array).
    fn pick(&self, env: &Env, key: Option<Unknown>) -> Result<sys::napi_value> {
        let mut buf = KeyBuf::new();
        let key = match &key {
            Some(key) => js::key_or_none(env, key, &mut buf)?,
            None => None,
        };
        let picked = self.core.pick(key).or_throw()?;
        let raw = env.raw();
        // Only this binding attaches to snapshots, so the type always matches; were it not, the
        // id string itself is a right answer.
        let Some(membership) = picked.attachment(|_| Membership::next()) else {
            return id_string(raw, &picked);
        };
        // No JavaScript runs while the strings are borrowed, so this cannot fail; if it somehow
        // did, the id string itself is a right answer.
        let Ok(mut strings) = self.strings.try_borrow_mut() else {
            return id_string(raw, &picked);
        };
        let index = picked.index();
        if let Some(s) = strings.as_ref()
            && s.membership == membership.0
            && s.env == raw
            && s.filled[index]
        {
            let mut number = ptr::null_mut();
            // SAFETY: a valid env for this thread; out-pointer to a local. Indices are below
            // `MAX_NODES` (2^24), so they fit a u32.
            napi::check_status!(unsafe { sys::napi_create_uint32(raw, index as u32, &mut number) })
                .or_throw()?;
            return Ok(number);
        }
        let s = match &mut *strings {
            Some(s) if s.membership == membership.0 && s.env == raw => s,
            // A new membership (or the first pick): a new, empty array. Replacing the old
            // `Strings` deletes its reference (same thread, same environment).
            _ => strings.insert(Strings::new(raw, membership.0, picked.members().len())?),
        };
        let string = id_string(raw, &picked)?;
        let mut array = ptr::null_mut();
        // SAFETY: a valid env for this thread; `s.array` is a live reference made in it.
        unsafe {
            napi::check_status!(sys::napi_get_reference_value(raw, s.array, &mut array))
                .or_throw()?;
            napi::check_status!(sys::napi_set_element(raw, array, index as u32, string))
                .or_throw()?;
        }
        s.filled[index] = true;
        Ok(string)
    }

    /// `g()`: the array `f` fills (an empty one before the first pick).
    fn ids(&self, env: &Env) -> Result<sys::napi_value> {
        let raw = env.raw();
        let mut array = ptr::null_mut();
        match &*self.strings.borrow() {
            // SAFETY: a valid env for this thread; a live reference made in it.
            Some(s) if s.env == raw => unsafe {
                napi::check_status!(sys::napi_get_reference_value(raw, s.array, &mut array))
                    .or_throw()?;
            },
            // SAFETY: a valid env for this thread; out-pointer to a local.
            _ => unsafe {
                napi::check_status!(sys::napi_create_array(raw, &mut array)).or_throw()?;
            },
        }
        Ok(array)
    }
}

impl Strings {
    /// An empty array for a membership of `count` nodes.
    fn new(env: sys::napi_env, membership: u64, count: usize) -> Result<Strings> {
        let (mut array, mut reference) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: a valid env for this thread; out-pointers to locals.
        unsafe {
            napi::check_status!(sys::napi_create_array(env, &mut array)).or_throw()?;
            napi::check_status!(sys::napi_create_reference(env, array, 1, &mut reference))
                .or_throw()?;
        }
        Ok(Strings {
            env,
            membership,
            array: reference,
            filled: vec![false; count],
        })
    }
}

/// The picked node's id as a new JavaScript string.
#[inline]
fn id_string(env: sys::napi_env, picked: &Picked) -> Result<sys::napi_value> {
    // SAFETY: a valid env for this thread, from the caller.
    unsafe { <&str>::to_napi_value(env, picked.id()) }.or_throw()
}

impl Balancer {
    /// `__liblbFastPick()`: this balancer's `{ f, g, ids }` record (see the module docs).
    pub(crate) fn fast_pick_impl(&self, env: &Env) -> Result<sys::napi_value> {
        let shared = Rc::new(FastPick {
            core: Arc::clone(&self.inner),
            strings: RefCell::new(None),
        });
        let raw = env.raw();
        let mut record = ptr::null_mut();
        // SAFETY: a valid env for this thread; out-pointers to locals.
        napi::check_status!(unsafe { sys::napi_create_object(raw, &mut record) }).or_throw()?;
        let f = function(raw, c"f", fast_pick, &shared)?;
        let g = function(raw, c"g", fast_ids, &shared)?;
        let mut ids = ptr::null_mut();
        // SAFETY: a valid env for this thread; `record` is the object made above.
        unsafe {
            napi::check_status!(sys::napi_create_array(raw, &mut ids)).or_throw()?;
            for (name, value) in [(c"f", f), (c"g", g), (c"ids", ids)] {
                napi::check_status!(sys::napi_set_named_property(
                    raw,
                    record,
                    name.as_ptr(),
                    value
                ))
                .or_throw()?;
            }
        }
        Ok(record)
    }
}

type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// A native function whose data is its own `Rc` of `shared` (single-threaded: see the module docs), released when the function is
/// garbage-collected.
fn function(
    env: sys::napi_env,
    name: &std::ffi::CStr,
    callback: Callback,
    shared: &Rc<FastPick>,
) -> Result<sys::napi_value> {
    let data = Rc::into_raw(Rc::clone(shared)).cast_mut().cast::<c_void>();
    let mut function = ptr::null_mut();
    // SAFETY: a valid env for this thread; `name` is NUL-terminated; `data` stays valid until
    // `release` runs, which napi calls once, when the function is collected (or at environment
    // teardown). If attaching the finalizer fails, the Rc is released here instead, and the
    // function — which would then outlive its data — is never handed out.
    unsafe {
        let made = sys::napi_create_function(
            env,
            name.as_ptr(),
            name.count_bytes() as isize,
            Some(callback),
            data,
            &mut function,
        );
        let attached = made == sys::Status::napi_ok
            && sys::napi_add_finalizer(
                env,
                function,
                data,
                Some(release),
                ptr::null_mut(),
                ptr::null_mut(),
            ) == sys::Status::napi_ok;
        if !attached {
            drop(Rc::from_raw(data.cast::<FastPick>()));
            let message = "liblb: could not make the fast pick function".to_string();
            return Err(Error::new(
                Code::Napi(napi::Status::GenericFailure),
                message,
            ));
        }
    }
    Ok(function)
}

/// Finalizer of `f` and `g`: releases the function's `Rc` (on the environment's thread).
unsafe extern "C" fn release(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Rc::into_raw` of `function`, released only here, once, on the
    // environment's thread (where every other `Rc` of it lives).
    drop(unsafe { Rc::from_raw(data.cast::<FastPick>()) });
}

/// Reads up to one argument and the function's data, and runs `body` inside a panic boundary;
/// throws on error, as `fast::enter` does.
///
/// # Safety
/// `env` and `info` are the arguments napi passed to a callback made by `function`.
#[inline]
unsafe fn enter_fast(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&FastPick, &Env, Option<Unknown<'_>>) -> Result<sys::napi_value>,
) -> sys::napi_value {
    let call = || -> Result<sys::napi_value> {
        let (mut argc, mut arg, mut data) = (1usize, ptr::null_mut(), ptr::null_mut());
        // SAFETY: valid arguments from napi; out-pointers to locals (room for one argument).
        napi::check_status!(unsafe {
            sys::napi_get_cb_info(env, info, &mut argc, &mut arg, ptr::null_mut(), &mut data)
        })
        .or_throw()?;
        // SAFETY: `data` is the `FastPick` this function holds an `Rc` of (see `function`),
        // alive at least until the function is collected, which cannot happen during its call.
        let shared = unsafe { &*data.cast::<FastPick>() };
        // SAFETY: napi filled `arg` when `argc` >= 1.
        let key = (argc >= 1).then(|| unsafe { Unknown::from_raw_unchecked(env, arg) });
        body(shared, &Env::from_raw(env), key)
    };
    let error: Error = match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => return value,
        Ok(Err(error)) => error,
        Err(panic) => {
            let panic = panic_to_error(panic);
            Error::new(Code::Napi(panic.status), panic.reason)
        }
    };
    // SAFETY: a valid env for this thread; keeps an exception already pending.
    unsafe { JsError::from(error).throw_into(env) };
    ptr::null_mut()
}

/// `f(key?)` of one balancer's record.
unsafe extern "C" fn fast_pick(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as the callback `function` made.
    unsafe { enter_fast(env, info, |fast, env, key| fast.pick(env, key)) }
}

/// `g()` of one balancer's record.
unsafe extern "C" fn fast_ids(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as the callback `function` made.
    unsafe { enter_fast(env, info, |fast, env, _| fast.ids(env)) }
}
