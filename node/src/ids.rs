//! The fast path of `pick()` and `attempts()`: node ids as JavaScript strings made once per membership, and no
//! receiver unwrap per call.
//!
//! A plain `pick` callback (see `fast.rs`) spent most of its time outside the pick: reading the
//! receiver's wrapped pointer (`napi_unwrap`, a private-property lookup in V8's runtime, ~30% of
//! the call) and creating the result string (`napi_create_string_utf8`, ~20%). Node-API 9 (Node
//! 20) can neither hold a reference to a string nor read an array element cheaply, so the cache
//! lives on the JavaScript side:
//!
//! - `Balancer.prototype.pick` is a small JavaScript function ([`PICK`]) that keeps, per
//!   balancer, a private record `{ handle, ids }` in a `WeakMap` closed over by the function, with
//!   two native functions no other code can reach (`fastPick`, `fastIds`). The first pick on an
//!   instance goes through the native, receiver-checked `pick`; only after that call succeeded —
//!   so `this` is a `Balancer` — does it make the record, with a handle from the native,
//!   receiver-checked `__liblbFastPick`.
//! - The handle is a small integer naming a slot of the environment's [`Handles`], which holds
//!   the balancer's [`FastPick`] (an `Arc` of the core balancer and the id strings) until a
//!   finalizer on the balancer releases it. So `fastPick(handle, key?)` needs no receiver, and
//!   no value JavaScript passes can make it read memory it does not own. It picks, then answers
//!   the node's *index* (a small integer: no allocation) when the JavaScript array it last handed
//!   out holds that node's string, or else the id string itself, after putting it into its array
//!   (a new, empty one when the membership changed).
//! - On a string answer the JavaScript side refreshes `ids = fastIds(handle)` (that array), so
//!   `ids` is always the array `fastPick` fills; a number `i` is answered only when `ids[i]` is
//!   the string of node `i` of the membership the pick came from.
//! - The script returns `recordOf(balancer)` (the record, made on first use by the
//!   receiver-checked `__liblbFastPick`) to `leases.rs`, whose `acquire` and requests answer
//!   a lease's id from the same array, by the same protocol.
//! - `Balancer.prototype.attempts` works the same way, from the same record: the private
//!   `fastAttempts(handle, scratch, key, limit)` asks the core for the retry order, puts every
//!   answered node's string into the membership's array (defining the missing ones), writes the
//!   answers' indices into `scratch` (a closure-private `Uint32Array` of 1024 slots, or a new
//!   one for longer answers) and returns their count, with a flag telling the JavaScript side to
//!   refresh `ids` when the membership's array was replaced. The JavaScript side then builds the
//!   result as `ids[scratch[i]]`: one native call per `attempts()` and no string made or
//!   element set through Node-API per answer (which cost 300-500 ns per answer).
//!
//! The functions call only `WeakMap` methods and `Function.prototype.call` at pick time (and
//! `Array.isArray`, read when the module loads). Code
//! that replaced those before this module loaded could forge records; the worst it can do is
//! make picks on its own balancers answer wrongly (a forged handle names another balancer of the
//! same environment, or none: an error), never read memory wrongly.
//!
//! Which membership an array belongs to is a [`Membership`] token attached to the core's snapshot
//! ([`liblb_core::Picked::attachment`]): unique in the process and never reused, so an index is
//! only ever answered into the array made for its own membership, and an answer always names the
//! node the core picked.
//!
//! Napi values and references belong to one environment (the main thread or one worker) and may
//! only be used on its thread. A `Balancer` is only reachable from the JavaScript thread that
//! created it, and its handles and the two functions belong to that environment too; the
//! finalizers that release a [`FastPick`] run there, and only then is it dropped (deleting its
//! array's reference in its environment).

use crate::error::{Code, Error, OrThrow, Result};
use crate::js::{self, KeyBuf};
use napi::bindgen_prelude::{JsError, ToNapiValue, panic_to_error};
use napi::{Env, JsValue, Unknown, sys};
use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `Balancer.prototype.pick`, installed over the native one when the module loads (see the
/// module docs). `nativePick` and `makeFast` are the native, receiver-checked methods.
pub const PICK: &str = r"(function (exports, fastPick, fastIds, fastAttempts) {
  const proto = exports.Balancer.prototype
  const nativePick = proto.pick
  const nativeAttempts = proto.attempts
  const makeFast = proto.__liblbFastPick
  delete proto.__liblbFastPick
  const isArray = Array.isArray
  const fastOf = new WeakMap()
  // Where fastAttempts writes the indices of up to 1024 answers (one per environment: no
  // JavaScript runs between the native call writing it and the loop below reading it).
  const scratch = new Uint32Array(1024)
  const record = (self) => {
    const fast = { handle: makeFast.call(self), ids: [] }
    fastOf.set(self, fast)
    return fast
  }
  const define = (name, value) =>
    Object.defineProperty(proto, name, { value, writable: true, enumerable: true, configurable: true })
  define('pick', function pick(key) {
    const fast = fastOf.get(this)
    if (fast === undefined) {
      const answer = nativePick.call(this, key)
      record(this)
      return answer
    }
    const answer = key === undefined ? fastPick(fast.handle) : fastPick(fast.handle, key)
    if (typeof answer === 'number') return fast.ids[answer]
    fast.ids = fastIds(fast.handle)
    return answer
  })
  define('attempts', function attempts(key, limit) {
    const fast = fastOf.get(this)
    if (fast === undefined) {
      const answer = nativeAttempts.call(this, key, limit)
      record(this)
      return answer
    }
    const answer = fastAttempts(fast.handle, scratch, key, limit)
    let indices = scratch
    let count
    if (typeof answer === 'number') {
      count = answer >>> 1
      if (answer & 1) fast.ids = fastIds(fast.handle)
    } else if (isArray(answer)) {
      return answer
    } else {
      indices = answer
      count = answer.length
      fast.ids = fastIds(fast.handle)
    }
    const ids = fast.ids
    const out = new Array(count)
    for (let i = 0; i < count; i++) out[i] = ids[indices[i]]
    return out
  })
  // For leases.rs: the record of a balancer, made on first use by the receiver-checked
  // `makeFast` (a TypeError for anything but a Balancer).
  return (self) => fastOf.get(self) ?? record(self)
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

/// What one balancer's handle names: the core balancer and its id strings.
pub struct FastPick {
    core: Arc<liblb_core::Balancer>,
    strings: RefCell<Option<Strings>>,
}

impl FastPick {
    /// `fastPick(handle, key?)`: the picked node's index into the array `fastIds` returns when that array holds its
    /// string, else the id string itself (now also in that array).
    fn pick(&self, env: &Env, key: Option<Unknown>) -> Result<sys::napi_value> {
        let mut buf = KeyBuf::new();
        let key = match &key {
            Some(key) => js::key_or_none(env, key, &mut buf)?,
            None => None,
        };
        let picked = self.core.pick(key).or_throw()?;
        // Only this binding attaches to snapshots, so the type always matches; were it not, the
        // id string itself is a right answer.
        let membership = picked.attachment(|_| Membership::next()).map(|m| m.0);
        let count = picked.members().len();
        self.answer(env.raw(), membership, picked.index(), picked.id(), count)
    }

    /// The answer for node `index` (id `id`) of `membership` (`count` nodes), as `fastPick`
    /// gives it: the index when the array `fastIds` returns holds the node's string, else the
    /// string itself, put into that array (a new one when the membership changed). `None` for
    /// `membership` (a snapshot this binding did not attach to): the string.
    pub(crate) fn answer(
        &self,
        raw: sys::napi_env,
        membership: Option<u64>,
        index: usize,
        id: &str,
        count: usize,
    ) -> Result<sys::napi_value> {
        let Some(membership) = membership else {
            return id_string(raw, id);
        };
        // No JavaScript runs while the strings are borrowed, so this cannot fail; if it somehow
        // did, the id string itself is a right answer.
        let Ok(mut strings) = self.strings.try_borrow_mut() else {
            return id_string(raw, id);
        };
        if let Some(s) = strings.as_ref()
            && s.membership == membership
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
        let (s, _) = Strings::current(&mut strings, raw, membership, count)?;
        s.fill(raw, index, id)
    }

    /// The core balancer.
    pub(crate) fn core(&self) -> &Arc<liblb_core::Balancer> {
        &self.core
    }

    /// `fastAttempts(handle, scratch, key, limit)`: the answers' indices into the array
    /// `fastIds` returns, after putting every answer's string into it. Up to `scratch.length`
    /// indices are written into `scratch` (a `Uint32Array`) and the answer is `2 * count + 1` if
    /// the array was replaced by a new one (a new membership: call `fastIds` again), else
    /// `2 * count`. More answers come back as a new `Uint32Array` (call `fastIds` again). An
    /// array of id strings is the answer only if the snapshot is not this binding's (never).
    fn attempts(
        &self,
        env: &Env,
        scratch: Unknown,
        key: Option<Unknown>,
        limit: Option<Unknown>,
    ) -> Result<sys::napi_value> {
        let mut buf = KeyBuf::new();
        let key = match &key {
            Some(key) => js::key_or_none(env, key, &mut buf)?,
            None => None,
        };
        let limit = js::limit(env, limit)?;
        let picks = self.core.attempts(key, limit).or_throw()?;
        let raw = env.raw();
        let (Some(membership), Ok(mut strings)) = (
            picks.attachment(|_| Membership::next()),
            self.strings.try_borrow_mut(),
        ) else {
            // SAFETY: a valid env for this thread.
            return unsafe { js::Ids::to_napi_value(raw, js::Ids(picks)) }.or_throw();
        };
        let members = picks.members();
        let (s, replaced) = Strings::current(&mut strings, raw, membership.0, members.len())?;
        for &index in picks.indices() {
            let index = index as usize;
            if !s.filled[index] {
                s.fill(raw, index, &members[index].id)?;
            }
        }
        let indices = picks.indices();
        let (mut kind, mut room, mut data, mut buffer, mut offset) =
            (0, 0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
        // SAFETY: a valid env and value; out-pointers to locals. Fails for a non-TypedArray.
        napi::check_status!(unsafe {
            sys::napi_get_typedarray_info(
                raw,
                scratch.raw(),
                &mut kind,
                &mut room,
                &mut data,
                &mut buffer,
                &mut offset,
            )
        })
        .or_throw()?;
        if kind != sys::TypedarrayType::uint32_array {
            return Err(internal("scratch is not a Uint32Array"));
        }
        let mut out = ptr::null_mut();
        if indices.len() <= room {
            // SAFETY: `scratch` is a live Uint32Array (an argument of this call) with room for
            // `room` >= `indices.len()` u32 at `data`; bytes are copied, so alignment does not
            // matter. It is [`PICK`]'s private array (a plain ArrayBuffer), which no other thread
            // can touch and no JavaScript runs while it is written.
            unsafe {
                ptr::copy_nonoverlapping(
                    indices.as_ptr().cast::<u8>(),
                    data.cast::<u8>(),
                    indices.len() * 4,
                );
            }
            // Answers are distinct nodes: fewer than `MAX_NODES` (2^24), so this fits a u32.
            let code = indices.len() as u32 * 2 + u32::from(replaced);
            // SAFETY: a valid env; out-pointer to a local.
            napi::check_status!(unsafe { sys::napi_create_uint32(raw, code, &mut out) })
                .or_throw()?;
        } else {
            let (mut buffer, mut data) = (ptr::null_mut(), ptr::null_mut());
            // SAFETY: a valid env; out-pointers to locals; the new ArrayBuffer is writable for
            // `4 * indices.len()` bytes at `data`, and nothing else can see it yet.
            unsafe {
                napi::check_status!(sys::napi_create_arraybuffer(
                    raw,
                    indices.len() * 4,
                    &mut data,
                    &mut buffer
                ))
                .or_throw()?;
                ptr::copy_nonoverlapping(
                    indices.as_ptr().cast::<u8>(),
                    data.cast::<u8>(),
                    indices.len() * 4,
                );
                napi::check_status!(sys::napi_create_typedarray(
                    raw,
                    sys::TypedarrayType::uint32_array,
                    indices.len(),
                    buffer,
                    0,
                    &mut out
                ))
                .or_throw()?;
            }
        }
        Ok(out)
    }

    /// `fastIds(handle)`: the array `fastPick` fills (an empty one before the first pick).
    fn ids(&self, env: &Env) -> Result<sys::napi_value> {
        let raw = env.raw();
        let mut array = ptr::null_mut();
        // Never borrowed mutably while JavaScript can run (see `pick`), so this cannot fail.
        let strings = self
            .strings
            .try_borrow()
            .map_err(|_| internal("strings busy"))?;
        match &*strings {
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
    /// The strings of `membership` in `env`: the current ones, or a new, empty array when the
    /// membership changed (or on first use), and whether it was replaced. Replacing the old
    /// `Strings` deletes its reference (same thread, same environment).
    fn current(
        strings: &mut Option<Strings>,
        env: sys::napi_env,
        membership: u64,
        count: usize,
    ) -> Result<(&mut Strings, bool)> {
        let fresh = strings
            .as_ref()
            .is_some_and(|s| s.membership == membership && s.env == env);
        if fresh && let Some(s) = strings {
            return Ok((s, false));
        }
        Ok((strings.insert(Strings::new(env, membership, count)?), true))
    }

    /// Puts node `index`'s id string into the array and returns it.
    fn fill(&mut self, env: sys::napi_env, index: usize, id: &str) -> Result<sys::napi_value> {
        // SAFETY: a valid env for this thread, from the caller.
        let string = unsafe { <&str>::to_napi_value(env, id) }.or_throw()?;
        let (mut array, mut name) = (ptr::null_mut(), ptr::null_mut());
        let digits = index.to_string();
        // Defined as an own property rather than assigned (`napi_set_element`): assigning to a
        // hole consults the prototype chain, where JavaScript could have put a setter for that
        // index on `Array.prototype` and run in the middle of this call.
        let element = sys::napi_property_descriptor {
            utf8name: ptr::null(),
            name: ptr::null_mut(),
            method: None,
            getter: None,
            setter: None,
            value: string,
            attributes: sys::PropertyAttributes::writable
                | sys::PropertyAttributes::enumerable
                | sys::PropertyAttributes::configurable,
            data: ptr::null_mut(),
        };
        // SAFETY: a valid env for this thread; `self.array` is a live reference made in it;
        // out-pointers to locals; `digits` outlives the call that copies it.
        unsafe {
            napi::check_status!(sys::napi_get_reference_value(env, self.array, &mut array))
                .or_throw()?;
            napi::check_status!(sys::napi_create_string_utf8(
                env,
                digits.as_ptr().cast(),
                digits.len() as isize,
                &mut name
            ))
            .or_throw()?;
            let element = sys::napi_property_descriptor { name, ..element };
            napi::check_status!(sys::napi_define_properties(env, array, 1, &element)).or_throw()?;
        }
        self.filled[index] = true;
        Ok(string)
    }

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

/// A node's id as a new JavaScript string.
#[inline]
fn id_string(env: sys::napi_env, id: &str) -> Result<sys::napi_value> {
    // SAFETY: a valid env for this thread, from the caller.
    unsafe { <&str>::to_napi_value(env, id) }.or_throw()
}

/// The membership token of a lease's snapshot, as [`FastPick::answer`] takes it (`None`: not
/// this binding's attachment).
pub(crate) fn lease_membership(lease: &liblb_core::Lease) -> Option<u64> {
    lease.attachment(|_| Membership::next()).map(|m| m.0)
}

/// One environment's fast-pick handles: a handle is an index into this list, which holds the
/// balancer's [`FastPick`] until the balancer is garbage-collected. JavaScript only ever passes
/// the native side a small integer, so no JavaScript value (not even one forged through a
/// patched `WeakMap`) can make it read memory it does not own: a wrong number names another live
/// balancer of this environment or none (an error).
#[derive(Default)]
pub struct Handles(RefCell<Slots>);

#[derive(Default)]
struct Slots {
    live: Vec<Option<Rc<FastPick>>>,
    free: Vec<u32>,
}

impl Handles {
    /// The `FastPick` of `handle`, if it is live.
    pub(crate) fn get(&self, handle: u32) -> Option<Rc<FastPick>> {
        let slots = self.0.try_borrow().ok()?;
        slots.live.get(handle as usize)?.clone()
    }

    /// Stores `fast` and returns its handle.
    fn insert(&self, fast: FastPick) -> Result<u32> {
        let mut slots = self
            .0
            .try_borrow_mut()
            .map_err(|_| internal("handles busy"))?;
        let fast = Some(Rc::new(fast));
        match slots.free.pop() {
            Some(handle) => {
                slots.live[handle as usize] = fast;
                Ok(handle)
            }
            None => {
                let handle = u32::try_from(slots.live.len()).map_err(|_| internal("too many"))?;
                slots.live.push(fast);
                Ok(handle)
            }
        }
    }

    /// Releases `handle` (its balancer was collected).
    fn remove(&self, handle: u32) {
        // Finalizers never run inside a call of this binding, so the list is never borrowed
        // here; if it were, keeping the slot is harmless (a leak, never a wrong answer).
        if let Ok(mut slots) = self.0.try_borrow_mut()
            && let Some(slot) = slots.live.get_mut(handle as usize)
            && slot.take().is_some()
        {
            slots.free.push(handle);
        }
    }
}

fn internal(what: &str) -> Error {
    Error::new(
        Code::Napi(napi::Status::GenericFailure),
        format!("liblb: fast pick: {what}"),
    )
}

/// `Balancer.prototype.__liblbFastPick()`: a handle for `this` balancer (see the module docs),
/// released by a finalizer on `this` when it is collected. Receiver-checked like every method.
pub unsafe extern "C" fn make_handle(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as a `napi_callback`, so `enter` may be used.
    unsafe {
        crate::fast::enter_with_this(env, info, |b, env, this, helpers| {
            let handle = helpers.fast.insert(FastPick {
                core: Arc::clone(&b.inner),
                strings: RefCell::new(None),
            })?;
            let data = Box::into_raw(Box::new((Rc::clone(&helpers.fast), handle)));
            // SAFETY: a valid env; `this` is the receiver of this call; `data` stays valid until
            // `release` runs, which napi calls once, when `this` is collected (or at teardown).
            let status = sys::napi_add_finalizer(
                env.raw(),
                this,
                data.cast(),
                Some(release),
                ptr::null_mut(),
                ptr::null_mut(),
            );
            if status != sys::Status::napi_ok {
                // SAFETY: napi did not take `data`.
                drop(Box::from_raw(data));
                helpers.fast.remove(handle);
                return Err(internal("could not attach the finalizer"));
            }
            let mut number = ptr::null_mut();
            napi::check_status!(sys::napi_create_uint32(env.raw(), handle, &mut number))
                .or_throw()?;
            Ok(number)
        })
    }
}

/// Finalizer of a balancer that made a handle: releases the handle's slot.
unsafe extern "C" fn release(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the box `make_handle` leaked, released only here, once, on the
    // environment's thread.
    let data = unsafe { Box::from_raw(data.cast::<(Rc<Handles>, u32)>()) };
    data.0.remove(data.1);
}

/// Makes `fastPick(handle, key?)`, `fastIds(handle)` and `fastAttempts(handle, scratch, key,
/// limit)` for one environment, to be handed to
/// [`PICK`] only (never exported). Each holds an `Rc` of the environment's handles, released
/// when the function is collected.
pub fn functions(env: &Env, handles: &Rc<Handles>) -> napi::Result<[sys::napi_value; 3]> {
    let mut out = [ptr::null_mut(); 3];
    type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;
    let made: [(&std::ffi::CStr, Callback); 3] = [
        (c"fastPick", fast_pick),
        (c"fastIds", fast_ids),
        (c"fastAttempts", fast_attempts),
    ];
    for ((name, callback), slot) in made.into_iter().zip(&mut out) {
        let data = Rc::into_raw(Rc::clone(handles)).cast_mut().cast::<c_void>();
        // SAFETY: a valid env for this thread; `name` is NUL-terminated; `data` stays valid
        // until `release_handles` runs when the function is collected. If either step fails the
        // Rc is released here and the error returned (the function, if made, is never used).
        unsafe {
            let made = sys::napi_create_function(
                env.raw(),
                name.as_ptr(),
                name.count_bytes() as isize,
                Some(callback),
                data,
                slot,
            );
            if made != sys::Status::napi_ok
                || sys::napi_add_finalizer(
                    env.raw(),
                    *slot,
                    data,
                    Some(release_handles),
                    ptr::null_mut(),
                    ptr::null_mut(),
                ) != sys::Status::napi_ok
            {
                drop(Rc::from_raw(data.cast::<Handles>()));
                return Err(napi::Error::from_reason("liblb: could not make fastPick"));
            }
        }
    }
    Ok(out)
}

/// Finalizer of `fastPick` / `fastIds` / `fastAttempts`: releases the function's `Rc` of the handles.
unsafe extern "C" fn release_handles(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Rc::into_raw` of `functions`, released only here, once, on the
    // environment's thread (where every other `Rc` of it lives).
    drop(unsafe { Rc::from_raw(data.cast::<Handles>()) });
}

/// Reads the handle and up to [`MAX_ARGS`] more arguments (`None` past the ones given), and runs
/// `body` with the handle's `FastPick` inside a panic boundary; throws on error, as
/// `fast::enter` does.
///
/// # Safety
/// `env` and `info` are the arguments napi passed to `fast_pick`, `fast_ids` or
/// `fast_attempts`.
#[inline]
unsafe fn enter_fast(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&FastPick, &Env, [Option<Unknown<'_>>; MAX_ARGS]) -> Result<sys::napi_value>,
) -> sys::napi_value {
    let call = || -> Result<sys::napi_value> {
        let mut argc = 1 + MAX_ARGS;
        let (mut args, mut data) = ([ptr::null_mut(); 1 + MAX_ARGS], ptr::null_mut());
        // SAFETY: valid arguments from napi; out-pointers to locals (room for `argc` arguments).
        napi::check_status!(unsafe {
            sys::napi_get_cb_info(
                env,
                info,
                &mut argc,
                args.as_mut_ptr(),
                ptr::null_mut(),
                &mut data,
            )
        })
        .or_throw()?;
        // SAFETY: `data` is the `Handles` this function holds an `Rc` of (see `functions`),
        // alive at least until the function is collected, which cannot happen during its call.
        let handles = unsafe { &*data.cast::<Handles>() };
        let mut handle = 0u32;
        // SAFETY: valid env; napi checks the value is a number (else an error, nothing read).
        napi::check_status!(unsafe { sys::napi_get_value_uint32(env, args[0], &mut handle) })
            .or_throw()?;
        let fast = handles
            .get(handle)
            .ok_or_else(|| internal("no such handle"))?;
        // SAFETY: napi filled `args[i]` for every `i` < `argc` (and `undefined` up to the room).
        let rest = std::array::from_fn(|i| {
            (i + 1 < argc).then(|| unsafe { Unknown::from_raw_unchecked(env, args[i + 1]) })
        });
        body(&fast, &Env::from_raw(env), rest)
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

/// Most arguments after the handle (`fastAttempts`' scratch, key and limit).
const MAX_ARGS: usize = 3;

/// `fastPick(handle, key?)`.
unsafe extern "C" fn fast_pick(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as a `napi_callback`.
    unsafe { enter_fast(env, info, |fast, env, [key, ..]| fast.pick(env, key)) }
}

/// `fastIds(handle)`.
unsafe extern "C" fn fast_ids(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as a `napi_callback`.
    unsafe { enter_fast(env, info, |fast, env, _| fast.ids(env)) }
}

/// `fastAttempts(handle, scratch, key, limit)`.
unsafe extern "C" fn fast_attempts(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as a `napi_callback`.
    unsafe {
        enter_fast(env, info, |fast, env, [scratch, key, limit]| {
            let scratch =
                scratch.ok_or_else(|| internal("fastAttempts needs its scratch array"))?;
            fast.attempts(env, scratch, key, limit)
        })
    }
}
