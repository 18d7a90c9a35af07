//! Leases and requests without napi-rs class instances: `acquire()`, `request()`,
//! `attempt()`, `hedge()`, `finish()`, `cancel()` and their getters.
//!
//! A napi-rs `#[napi]` class instance is expensive to make: `napi_new_instance` goes from C++
//! into JavaScript and back, napi-rs wraps the object (a napi reference with a finalizer plus an
//! entry in a thread-local hash map, removed again when it is collected), and every getter is a
//! generated accessor (about 400 ns each: docs/benchmarks-node.md). A lease cost 3-5 µs to make
//! and finish, a request with one attempt about 12 µs, against a pick of about 70 ns. So
//! `Lease` and `Request` stay the classes users see (`exports.Lease`, `instanceof Lease`,
//! `new Lease()` still refused, the members on `Lease.prototype`), but their instances are made
//! by JavaScript ([`LEASES`], installed when the module loads, as `ids.rs` does for `pick`):
//!
//! - A lease is an instance of a class private to that script whose prototype inherits from
//!   `Lease.prototype`; its state is JavaScript private fields (`#cell`, `#id`, `#weight`,
//!   `#tag`, `#request`), which no other code can read or write. The members on
//!   `Lease.prototype` are JavaScript functions that check their receiver with `#cell in this`
//!   (else `TypeError: Illegal invocation`, as napi-rs methods throw) and call private native
//!   functions; the getters read the fields and never cross into Rust. A request is the same,
//!   over `Request.prototype`, and `Balancer.prototype.acquire` / `request` are the script's.
//! - The native state lives in this environment's [`State`]: a lease is an entry of one
//!   [`Slab`] (the core lease and the request it is an attempt of), a request an entry of
//!   another (the core request and its balancer's id strings). JavaScript holds only the
//!   entry's *handle*, a number: slot index + 2^24 x generation. A slot's generation changes
//!   each time it is emptied, so a handle names its own entry or none, never a later one, and no
//!   number JavaScript can pass makes native code read memory it does not own: a bad handle is
//!   "no such entry". The native functions take numbers and plain values, never objects whose
//!   type they trust, so they need no receiver check; only the script can call them.
//! - Native calls return several values through `scratch`, a 32-byte `Float64Array` made here
//!   ([`State::scratch`]) and handed to the script only: a new lease's handle, weight and tag
//!   (two 32-bit words), a decision's delay. The state keeps a reference to it and its address:
//!   nothing else can reach its buffer to detach it, and a fixed-length buffer never moves. No
//!   JavaScript runs between a native function writing it (its last step) and the script
//!   reading it.
//! - The id string comes from `ids.rs`'s per-membership cache (the lease's snapshot carries the
//!   same [`liblb_core::Lease::attachment`] as a pick's): an index into the balancer's array, or
//!   the string itself when it was just added (the script then refreshes the array).
//! - A lease or request that is garbage-collected while open must still end (a lease holds
//!   in-flight + 1 on its node). The script registers it with a `FinalizationRegistry` whose
//!   callback hands the handle to `release`, which empties the entry: the core lease is dropped
//!   (cancelled: in-flight released, nothing counted), through its request if it is an attempt
//!   of one, as napi-rs's finalizer on the old class did. A lease's registry entry holds its
//!   cell, `{ handle }`, whose handle becomes -1 when the lease ends, so `release` only ever
//!   sees a live entry's handle (not unregistering is cheaper: V8 keeps unregister tokens in an
//!   identity-hash table). The cheapest finalizer measured here (2026-12-02, a small C addon,
//!   per object made, finalized and collected, over rounds of 100,000 to 1,000,000 objects):
//!   `FinalizationRegistry.register` 100-280 ns, `napi_add_finalizer` through a native call
//!   taking the object 120-420 ns, `napi_create_external` with a finalizer 220-850 ns,
//!   `napi_wrap` 750-1200 ns (the more objects wait for collection, the dearer each one).
//!   But in this V8 (Node 20) finalization cells are processed by full collections only: a
//!   registered object survives young-generation collections and is promoted, which made
//!   registration (and the full collections it brings) the largest cost of a short lease in
//!   `perf`. A lease is therefore registered late: the script keeps the
//!   leases it made in a list (strong references) until a microtask at the end of the current
//!   synchronous run, or until 1024 are waiting, and then registers those still open. A lease
//!   ended in the same run (an `acquire` ... `finish` without an `await`) is never registered;
//!   one still open is, and is released if it is collected later: the guarantee is unchanged,
//!   only delayed by at most one run. Requests are registered when made (they have no end).
//! - Outcome objects (`finish`) and request options are read by the script (`o.ok`, ...) and
//!   handed over as arguments with a mask of the fields present (not `undefined` / `null`), in
//!   the order the native code checks them (`js.rs`, `OUTCOME_FIELDS`; `request.rs`,
//!   `OPTION_FIELDS`): a property read through napi-rs's `Object::get` makes its name a new
//!   string each time (the four outcome fields cost about 2.5 µs per `finish`), and the mask
//!   spares a `napi_typeof` per absent field. Errors and their order are the same; the one
//!   difference is that when a field is invalid, the getters of the fields after it have run.
//!   Anything but a plain object (an array, a Proxy of one, a primitive) is read natively, as
//!   before.
//!
//! `request.finish(lease, ...)` checks in the script that `lease` is a lease (else a
//! `TypeError`, code `ERR_INVALID_ARG_TYPE`) and an attempt of this request; `end` checks the
//! latter again natively. Finishing twice is `LB_LEASE_FINISHED` from `end`, whose message
//! names the node (the script passes the id: the entry is gone by then). A getter of the
//! outcome that ends the same lease runs before the native call, so the outer call finds the
//! entry gone (`LB_LEASE_FINISHED`, counted once); if that getter acquired a new lease into the
//! same slot, the generation tells them apart.
//!
//! Environments and threads: the slabs, the functions, the scratch and the registries belong to
//! one environment (main thread or worker) and are only used on its thread;
//! `FinalizationRegistry` callbacks and microtasks run there as jobs of their own, never inside
//! a call of this binding, so the slabs are never borrowed when they run (they are borrowed only
//! across code that runs no JavaScript, and every borrow is a `try_borrow`). Leases still open
//! when the environment shuts down are dropped with the [`State`] (cancelled). A request keeps
//! its balancer object alive, so the balancer's handle (`ids.rs`) stays its own while the
//! request can make leases.
//!
//! The script captures what it calls when the module loads (`queueMicrotask`, the registry's
//! `register`, `Array.isArray`, `BigInt`); the exception is `WeakMap.prototype.get`, inside
//! `ids.rs`'s `recordOf`. Code that patched builtins *before* this module loaded could forge a
//! balancer record, with the effect `ids.rs` describes (an error or another balancer's answer,
//! never foreign memory); it cannot reach a lease's or request's handle.

use crate::error::{Code, Error, OrThrow, Result, type_error};
use crate::ids::{FastPick, Handles, lease_membership};
use crate::js::{self, KeyBuf};
use crate::request::{self, Core};
use napi::bindgen_prelude::{JsError, ToNapiValue, panic_to_error};
use napi::{Env, JsValue, Unknown, sys};
use std::cell::{Cell, RefCell};
use std::ffi::{CStr, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;

/// Installs `acquire` and `request` on `Balancer.prototype` and the members of
/// `Lease.prototype` and `Request.prototype` (see the module docs). Its arguments: the exports,
/// `ids.rs`'s `recordOf` and `fastIds`, the native functions of [`functions`] in their order,
/// and the names of decisions and stop reasons, indexed as `end` encodes them.
pub const LEASES: &str = r"(function (exports, recordOf, fastIds, scratch, nativeAcquire,
    nativeRequest, nativeAttempt, nativeEnd, nativeCancel, nativeInfo, nativeRelease, decisions,
    stops) {
  const { Balancer, Lease, Request } = exports
  const isArray = Array.isArray
  const BigIntOf = BigInt
  const TypeErrorOf = TypeError
  const defineProperty = Object.defineProperty
  const setPrototypeOf = Object.setPrototypeOf
  // `scratch` (a Float64Array of 4, made natively): a new lease's handle, weight and tag
  // (words 4 and 5), or a decision's delay, written by the native functions as their last step
  // and read right after (nothing runs in between).
  const words = new Uint32Array(scratch.buffer)
  // Leases and requests collected while open are ended natively (in-flight released). A lease's
  // registry entry holds its cell, `{ handle }`, whose handle is -1 once it ended: cheaper than
  // unregistering (an identity-hash table in V8), and never a handle that ended.
  const leases = new FinalizationRegistry((cell) => {
    if (cell.handle >= 0) nativeRelease(0, cell.handle)
  })
  const requests = new FinalizationRegistry((handle) => nativeRelease(1, handle))
  const { register } = FinalizationRegistry.prototype
  const registerLease = register.bind(leases)
  const registerRequest = register.bind(requests)
  const enqueue = queueMicrotask
  // Leases made since the last flush, held here until then. A registered object survives
  // young-generation collections (V8 clears finalization cells only in full collections), so
  // registering every lease would promote every one; a lease that ended before the flush (the
  // same synchronous run) is never registered, one still open is (and so still released if it
  // is collected later).
  let pending = []
  let flushing = false
  let flushLeases
  const illegal = () => new TypeErrorOf('Illegal invocation')
  const typeError = (message) => {
    const error = new TypeErrorOf(message)
    error.code = 'ERR_INVALID_ARG_TYPE'
    return error
  }
  const describe = (value) => value === null ? 'null' : isArray(value) ? 'array' : typeof value
  const method = (proto, name, value) =>
    defineProperty(proto, name, { value, writable: true, enumerable: true, configurable: true })
  const getter = (proto, name, get) => defineProperty(proto, name, { get, enumerable: true, configurable: true })
  // Plain objects are read here, in the order the native side checks them, and handed over
  // with a bit mask of the fields given (not undefined or null); anything else is handed over
  // as it is, with mask -1, and read natively.
  const plain = (value) => typeof value === 'object' && value !== null && !isArray(value)

  let makeLease, isLease, requestOf, endLease, cancelLease, makeRequest
  class OpenLease {
    // `{ handle }`, handle -1 once the lease ended (finished or cancelled).
    #cell
    #id
    #weight
    #tag
    #request
    constructor(cell, id, weight, tag, request) {
      this.#cell = cell
      this.#id = id
      this.#weight = weight
      this.#tag = tag
      this.#request = request
    }

    static {
      isLease = (value) => typeof value === 'object' && value !== null && #cell in value
      const check = (self) => {
        if (!isLease(self)) throw illegal()
      }
      makeLease = (id, request) => {
        const cell = { handle: scratch[0] }
        const hi = words[5]
        const tag = hi === 0 ? words[4] : (BigIntOf(hi) << 32n) | BigIntOf(words[4])
        const lease = new OpenLease(cell, id, scratch[1], tag, request)
        if (pending.push(lease) >= 1024) {
          drain()
        } else if (!flushing) {
          flushing = true
          enqueue(flushLeases)
        }
        return lease
      }
      requestOf = (lease) => lease.#request
      // Registers the pending leases still open.
      const drain = () => {
        const list = pending
        pending = []
        for (let i = 0; i < list.length; i++) {
          const lease = list[i]
          const cell = lease.#cell
          if (cell.handle >= 0) registerLease(lease, cell)
        }
      }
      flushLeases = () => {
        flushing = false
        drain()
      }
      // Ends `lease` with `outcome`; `request` is the handle of the request it must be an
      // attempt of, or -1. Returns the encoded decision (0 for a lease of its own).
      endLease = (lease, request, outcome) => {
        const cell = lease.#cell
        let code
        if (plain(outcome) && outcome.load == null) {
          const { ok, kind, latencyMs, retryAfterMs } = outcome
          const given = (ok != null) | (kind != null) << 1 | (latencyMs != null) << 2 | (retryAfterMs != null) << 3
          code = nativeEnd(cell.handle, request, lease.#id, given, ok, kind, latencyMs, retryAfterMs)
        } else {
          code = nativeEnd(cell.handle, request, lease.#id, -1, outcome)
        }
        cell.handle = -1
        return code
      }
      cancelLease = (lease) => {
        const cell = lease.#cell
        nativeCancel(cell.handle, lease.#id)
        cell.handle = -1
      }
      const proto = Lease.prototype
      method(proto, 'cancel', function cancel() {
        check(this)
        cancelLease(this)
      })
      getter(proto, 'done', function done() {
        check(this)
        return this.#cell.handle < 0
      })
      method(proto, 'finish', function finish(outcome) {
        check(this)
        endLease(this, -1, outcome)
      })
      getter(proto, 'id', function id() {
        check(this)
        return this.#id
      })
      getter(proto, 'tag', function tag() {
        check(this)
        const tag = this.#tag
        return typeof tag === 'bigint' ? tag : BigIntOf(tag)
      })
      getter(proto, 'weight', function weight() {
        check(this)
        return this.#weight
      })
    }
  }
  setPrototypeOf(OpenLease.prototype, Lease.prototype)
  delete OpenLease.prototype.constructor

  class OpenRequest {
    #handle
    #fast
    // Keeps the balancer, and so its record's handle, alive while this request is.
    #balancer
    constructor(handle, fast, balancer) {
      this.#handle = handle
      this.#fast = fast
      this.#balancer = balancer
    }

    static {
      const check = (self) => {
        if (typeof self !== 'object' || self === null || !(#handle in self)) throw illegal()
      }
      const leaseArg = (lease) => {
        if (!isLease(lease)) throw typeError(`lease must be a Lease, got ${describe(lease)}`)
      }
      // The lease an `attempt` / `hedge` answer describes, or null.
      const lease = (self, answer) => {
        if (answer === null) return null
        const fast = self.#fast
        if (typeof answer === 'number') return makeLease(fast.ids[answer], self)
        fast.ids = fastIds(fast.handle)
        return makeLease(answer, self)
      }
      const info = (what) => function () {
        check(this)
        return nativeInfo(this.#handle, what)
      }
      const proto = Request.prototype
      method(proto, 'attempt', function attempt() {
        check(this)
        return lease(this, nativeAttempt(this.#handle, false))
      })
      getter(proto, 'attempts', info(0))
      method(proto, 'backoffMs', info(1))
      method(proto, 'cancel', function cancel(lease) {
        check(this)
        leaseArg(lease)
        cancelLease(lease)
      })
      method(proto, 'finish', function finish(lease, outcome) {
        check(this)
        leaseArg(lease)
        if (requestOf(lease) !== this) throw typeError('lease is not an attempt of this request')
        const code = endLease(lease, this.#handle, outcome)
        const decision = code & 3
        const stop = code >>> 2
        return {
          decision: decisions[decision],
          delayMs: decision === 1 ? scratch[0] : 0,
          stop: stop === 0 ? null : stops[stop - 1],
        }
      })
      method(proto, 'hedge', function hedge() {
        check(this)
        return lease(this, nativeAttempt(this.#handle, true))
      })
      method(proto, 'hedgeAfterMs', info(2))
      getter(proto, 'over', info(3))
      getter(proto, 'remainingMs', info(4))
      getter(proto, 'stopped', info(5))
      getter(proto, 'winner', info(6))
      makeRequest = (handle, fast, balancer) => {
        const request = new OpenRequest(handle, fast, balancer)
        registerRequest(request, handle)
        return request
      }
    }
  }
  setPrototypeOf(OpenRequest.prototype, Request.prototype)
  delete OpenRequest.prototype.constructor

  const balancer = Balancer.prototype
  method(balancer, 'acquire', function acquire(key) {
    const fast = recordOf(this)
    const answer = nativeAcquire(fast.handle, key)
    if (typeof answer === 'number') return makeLease(fast.ids[answer], null)
    fast.ids = fastIds(fast.handle)
    return makeLease(answer, null)
  })
  method(balancer, 'request', function request(key, options) {
    const fast = recordOf(this)
    let handle
    if (plain(options)) {
      const { maxAttempts, deadlineMs, retryOn, budget, hedge } = options
      const given = (maxAttempts != null) | (deadlineMs != null) << 1 | (retryOn != null) << 2 |
        (budget != null) << 3 | (hedge != null) << 4
      handle = nativeRequest(fast.handle, key, given, maxAttempts, deadlineMs, retryOn, budget, hedge)
    } else {
      handle = nativeRequest(fast.handle, key, -1, options)
    }
    return makeRequest(handle, fast, this)
  })
})";

/// One open lease: the core lease (`None` once ended) and the request it is an attempt of.
struct OpenLease {
    lease: Option<liblb_core::Lease>,
    request: Option<Rc<OpenRequest>>,
}

/// A lease dropped open (collected, or its environment shut down) is cancelled: through its
/// request, so the request does not count it as still out. Nothing of this binding is borrowed
/// when it drops (entries are dropped after the slab's borrow ends); if the request were, the
/// core lease simply drops, cancelled all the same.
impl Drop for OpenLease {
    fn drop(&mut self) {
        if let (Some(lease), Some(request)) = (self.lease.take(), &self.request)
            && let Ok(mut core) = request.core.try_borrow_mut()
        {
            core.cancel(lease);
        }
    }
}

/// One open request: the core request and its balancer's id strings (`ids.rs`).
struct OpenRequest {
    core: RefCell<Core>,
    fast: Rc<FastPick>,
}

/// Entries named by handles: slot index + 2^24 x generation, exact in a JavaScript number (at
/// most 2^53). A slot's generation changes when it is emptied, so a stale handle names nothing.
struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

/// Slots per slab: 2^24 open leases (or requests) per environment.
const SLOT_BITS: u32 = 24;
/// Generations wrap after 2^29 uses of one slot (24 + 29 = 53 bits).
const GENERATIONS: u32 = 1 << 29;

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Stores `value` and returns its handle.
    fn insert(&mut self, value: T) -> Result<f64> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.slots.len() < 1 << SLOT_BITS => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
            None => return Err(internal("too many open leases or requests")),
        };
        let slot = &mut self.slots[index as usize];
        slot.1 = Some(value);
        Ok(f64::from(slot.0) * f64::from(1u32 << SLOT_BITS) + f64::from(index))
    }

    /// The slot `handle` names, if it is a handle this slab made (live or not).
    fn slot(&mut self, handle: f64) -> Option<&mut (u32, Option<T>)> {
        // Any other number (negative, fractional, NaN, too large) is no handle at all.
        if !((0.0..9_007_199_254_740_992.0).contains(&handle) && handle.fract() == 0.0) {
            return None;
        }
        let handle = handle as u64;
        let (index, generation) = (handle & ((1 << SLOT_BITS) - 1), handle >> SLOT_BITS);
        let slot = self.slots.get_mut(index as usize)?;
        (u64::from(slot.0) == generation).then_some(slot)
    }

    /// The live entry of `handle`.
    fn get(&mut self, handle: f64) -> Option<&T> {
        self.slot(handle)?.1.as_ref()
    }

    /// Empties `handle`'s slot and returns its entry; the handle then names nothing.
    fn take(&mut self, handle: f64) -> Option<T> {
        let index = (handle as u64 & ((1 << SLOT_BITS) - 1)) as u32;
        let slot = self.slot(handle)?;
        let value = slot.1.take()?;
        slot.0 = (slot.0 + 1) % GENERATIONS;
        self.free.push(index);
        Some(value)
    }
}

/// One environment's open leases and requests, and its balancers' handles (`ids.rs`).
pub struct State {
    fast: Rc<Handles>,
    leases: RefCell<Slab<OpenLease>>,
    requests: RefCell<Slab<Rc<OpenRequest>>>,
    /// The script's `scratch`: its environment, a strong reference to the `Float64Array` and
    /// the address of its [`SCRATCH_BYTES`] bytes (null until [`State::scratch`] made it).
    scratch: Cell<(sys::napi_env, sys::napi_ref, *mut u8)>,
}

/// Bytes of the script's `scratch` (a `Float64Array` of 4).
const SCRATCH_BYTES: usize = 32;

impl State {
    /// The state of an environment whose balancer handles are `fast`.
    pub fn new(fast: Rc<Handles>) -> State {
        State {
            fast,
            leases: RefCell::default(),
            requests: RefCell::default(),
            scratch: Cell::new((ptr::null_mut(), ptr::null_mut(), ptr::null_mut())),
        }
    }

    /// Makes the `Float64Array` the native functions write their extra results into, keeps it
    /// (a strong reference, deleted when the state drops) and returns it, for [`LEASES`] only.
    pub fn scratch(&self, env: &Env) -> napi::Result<sys::napi_value> {
        let raw = env.raw();
        let (mut buffer, mut data, mut array, mut reference) = (
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        );
        // SAFETY: a valid env for this thread; out-pointers to locals. The new ArrayBuffer is
        // writable for SCRATCH_BYTES bytes at `data`, zeroed by napi.
        unsafe {
            napi::check_status!(sys::napi_create_arraybuffer(
                raw,
                SCRATCH_BYTES,
                &mut data,
                &mut buffer
            ))?;
            napi::check_status!(sys::napi_create_typedarray(
                raw,
                sys::TypedarrayType::float64_array,
                SCRATCH_BYTES / 8,
                buffer,
                0,
                &mut array
            ))?;
            napi::check_status!(sys::napi_create_reference(raw, array, 1, &mut reference))?;
        }
        self.scratch.set((raw, reference, data.cast()));
        Ok(array)
    }

    /// Copies `bytes` to the start of the script's `scratch`.
    fn write(&self, bytes: &[u8]) -> Result<()> {
        let (_, _, data) = self.scratch.get();
        if data.is_null() || bytes.len() > SCRATCH_BYTES {
            return Err(internal("no scratch array"));
        }
        // SAFETY: `data` is the start of the scratch ArrayBuffer's SCRATCH_BYTES bytes. The
        // buffer lives while the state holds its reference (until the state drops), cannot be
        // detached or transferred (only [`LEASES`]'s closure can reach it) and never moves (a
        // fixed-length ArrayBuffer's backing store stays put). Only this environment's thread
        // runs the native functions, and no JavaScript runs while it is written; bytes are
        // copied, so alignment does not matter.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len()) };
        Ok(())
    }

    /// The balancer of handle `handle`.
    fn balancer(&self, handle: f64) -> Result<Rc<FastPick>> {
        // A number that is not a u32 names no balancer (`get` of u32::MAX finds none).
        let handle = if (0.0..4_294_967_295.0).contains(&handle) {
            handle as u32
        } else {
            u32::MAX
        };
        self.fast
            .get(handle)
            .ok_or_else(|| internal("no such balancer handle"))
    }

    /// The request of handle `handle`.
    fn request(&self, handle: f64) -> Result<Rc<OpenRequest>> {
        let mut requests = self.requests.try_borrow_mut().map_err(|_| busy())?;
        let request = requests
            .get(handle)
            .ok_or_else(|| internal("no such request"))?;
        Ok(Rc::clone(request))
    }

    /// Stores an open `lease` (an attempt of `request`, if any) and writes its handle, weight
    /// and tag into `scratch`; returns its id as `ids.rs` answers it (`fast`'s strings).
    fn open(
        &self,
        env: &Env,
        fast: &FastPick,
        lease: liblb_core::Lease,
        request: Option<Rc<OpenRequest>>,
    ) -> Result<sys::napi_value> {
        let raw = env.raw();
        let membership = lease_membership(&lease);
        let (index, count) = (lease.index(), lease.members().len());
        let (weight, tag) = (lease.weight(), lease.tag());
        let id = fast.answer(raw, membership, index, lease.id(), count)?;
        let open = OpenLease {
            lease: Some(lease),
            request,
        };
        let handle = {
            let mut leases = self.leases.try_borrow_mut().map_err(|_| busy())?;
            leases.insert(open)?
        };
        // The tag's two 32-bit words go into bytes 16..24, read as `Uint32Array` elements 4
        // and 5 (native byte order on both sides).
        let words = [tag as u32, (tag >> 32) as u32];
        let mut bytes = [0u8; 24];
        bytes[..8].copy_from_slice(&handle.to_ne_bytes());
        bytes[8..16].copy_from_slice(&f64::from(weight).to_ne_bytes());
        bytes[16..20].copy_from_slice(&words[0].to_ne_bytes());
        bytes[20..].copy_from_slice(&words[1].to_ne_bytes());
        if let Err(error) = self.write(&bytes) {
            // The script never sees this handle: end the lease now (cancelled).
            self.release_lease(handle);
            return Err(error);
        }
        Ok(id)
    }

    /// Empties lease `handle`'s entry (dropping it: cancelled) if it is live.
    fn release_lease(&self, handle: f64) {
        // Never borrowed when this runs (module docs); if it were, the entry stays: a leak,
        // never a wrong answer.
        let open = match self.leases.try_borrow_mut() {
            Ok(mut leases) => leases.take(handle),
            Err(_) => None,
        };
        drop(open);
    }

    /// Takes lease `handle` out, or the `LB_LEASE_FINISHED` error naming node `id`.
    fn take_lease(&self, env: &Env, handle: f64, id: Option<Unknown>) -> Result<OpenLease> {
        let taken = {
            let mut leases = self.leases.try_borrow_mut().map_err(|_| busy())?;
            leases.take(handle)
        };
        match taken {
            Some(open) if open.lease.is_some() => Ok(open),
            _ => Err(finished(env, id)),
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let (env, reference, _) = self.scratch.get();
        if !reference.is_null() {
            // SAFETY: made in `env`, on this thread (the state is only used there), deleted
            // once, here. A failure (environment torn down, where Node frees references itself)
            // leaks nothing more.
            unsafe { sys::napi_delete_reference(env, reference) };
        }
    }
}

/// The error of a lease that already ended, naming its node.
#[cold]
fn finished(env: &Env, id: Option<Unknown>) -> Error {
    let id = match id {
        Some(id) => js::string(env, &id, "id").unwrap_or_default(),
        None => String::new(),
    };
    Error::new(
        Code::Lb(crate::LEASE_FINISHED),
        format!("the lease on node {id:?} has already ended (finished or cancelled)"),
    )
}

fn internal(what: &str) -> Error {
    Error::new(
        Code::Napi(napi::Status::GenericFailure),
        format!("liblb: leases: {what}"),
    )
}

fn busy() -> Error {
    internal("state busy")
}

/// A handle argument: a number (anything else names no entry: NaN).
fn number(raw: sys::napi_env, value: Option<Unknown>) -> f64 {
    let mut out = f64::NAN;
    if let Some(value) = value {
        // SAFETY: a valid env; napi checks the value is a number (else an error, `out` kept).
        let _ = unsafe { sys::napi_get_value_double(raw, value.raw(), &mut out) };
    }
    out
}

/// The fields the script read from a plain object: `args[at]` is their mask (bit `i`: field
/// `i` is neither `undefined` nor `null`), `args[at + 1 + i]` field `i`. `None` when the mask
/// is -1 (not a plain object: read it natively).
fn fields<'a, const N: usize>(
    raw: sys::napi_env,
    args: &[Option<Unknown<'a>>; 9],
    at: usize,
) -> Option<[Option<Unknown<'a>>; N]> {
    let given = number(raw, args[at]);
    if !(0.0..f64::from(1u32 << N)).contains(&given) {
        return None;
    }
    let given = given as u32;
    Some(std::array::from_fn(|i| {
        if given & (1 << i) == 0 {
            None
        } else {
            args.get(at + 1 + i).copied().flatten()
        }
    }))
}

/// `undefined` as a napi value.
fn undefined(raw: sys::napi_env) -> Result<sys::napi_value> {
    let mut out = ptr::null_mut();
    // SAFETY: a valid env; out-pointer to a local.
    napi::check_status!(unsafe { sys::napi_get_undefined(raw, &mut out) }).or_throw()?;
    Ok(out)
}

/// `nativeAcquire(balancer, key)`: a new lease on the balancer's pick.
fn acquire(state: &State, env: &Env, args: &[Option<Unknown>; 9]) -> Result<sys::napi_value> {
    let fast = state.balancer(number(env.raw(), args[0]))?;
    let mut buf = KeyBuf::new();
    let key = match &args[1] {
        Some(key) => js::key_or_none(env, key, &mut buf)?,
        None => None,
    };
    let lease = fast.core().acquire(key).or_throw()?;
    state.open(env, &fast, lease, None)
}

/// `nativeRequest(balancer, key, -1, options)` or `nativeRequest(balancer, key, given,
/// maxAttempts, deadlineMs, retryOn, budget, hedge)` (a plain object's fields, `given` the mask
/// of those not `undefined` / `null`): a new request's handle.
fn new_request(state: &State, env: &Env, args: &[Option<Unknown>; 9]) -> Result<sys::napi_value> {
    let raw = env.raw();
    let fast = state.balancer(number(raw, args[0]))?;
    let mut buf = KeyBuf::new();
    let key = match &args[1] {
        Some(key) => js::key_or_none(env, key, &mut buf)?.map(<[u8]>::to_vec),
        None => None,
    };
    let (read, options) = match fields::<5>(raw, args, 2) {
        Some(read) => (Some(read), None),
        None => (None, args[3]),
    };
    let core = request::new(env, fast.core(), key, options, read)?;
    let open = Rc::new(OpenRequest {
        core: RefCell::new(core),
        fast,
    });
    let handle = {
        let mut requests = state.requests.try_borrow_mut().map_err(|_| busy())?;
        requests.insert(open)?
    };
    // SAFETY: a valid env for this thread.
    unsafe { f64::to_napi_value(env.raw(), handle) }.or_throw()
}

/// `nativeAttempt(request, hedge)`: the request's next attempt (or hedge) as a lease, or null.
fn attempt(state: &State, env: &Env, args: &[Option<Unknown>; 9]) -> Result<sys::napi_value> {
    let request = state.request(number(env.raw(), args[0]))?;
    let mut hedge = false;
    if let Some(flag) = args[1] {
        // SAFETY: a valid env; napi checks the value is a boolean (else `hedge` stays false).
        let _ = unsafe { sys::napi_get_value_bool(env.raw(), flag.raw(), &mut hedge) };
    }
    let lease = {
        // Borrowed only for the core call, which runs no JavaScript.
        let mut core = request.core.try_borrow_mut().map_err(|_| busy())?;
        if hedge { core.hedge() } else { core.attempt() }.or_throw()?
    };
    let Some(lease) = lease else {
        let mut null = ptr::null_mut();
        // SAFETY: a valid env; out-pointer to a local.
        napi::check_status!(unsafe { sys::napi_get_null(env.raw(), &mut null) }).or_throw()?;
        return Ok(null);
    };
    let fast = Rc::clone(&request.fast);
    state.open(env, &fast, lease, Some(request))
}

/// `nativeEnd(lease, request, id, -1, outcome)` or `nativeEnd(lease, request, id, given, ok,
/// kind, latencyMs, retryAfterMs)` (a plain outcome object's fields, `given` the mask of those
/// not `undefined` / `null`): ends the lease with the outcome. `request` is -1 or the handle of
/// the request the lease must be an attempt of. Returns 0 for a lease of its own, else the
/// request's decision: its index in `DECISIONS`, plus 4 x (1 + the stop reason's index) for a
/// stop; a retry's delay goes into `scratch`.
fn end(state: &State, env: &Env, args: &[Option<Unknown>; 9]) -> Result<sys::napi_value> {
    let raw = env.raw();
    let (handle, must) = (number(raw, args[0]), number(raw, args[1]));
    // Checked before anything of the lease is touched (JavaScript may run: the native read).
    let (outcome, load) = match fields::<4>(raw, args, 3) {
        Some(read) => (js::outcome_read(env, "outcome", false, read)?, None),
        None => (
            js::outcome(env, args[4], "outcome", false)?,
            load_of(env, args[4])?,
        ),
    };
    if must >= 0.0 {
        // The script checked this already. A lease that is gone is `LB_LEASE_FINISHED` below.
        let expected = state.request(must).ok();
        let mut leases = state.leases.try_borrow_mut().map_err(|_| busy())?;
        if let Some(open) = leases.get(handle) {
            let same = match (&open.request, &expected) {
                (Some(a), Some(b)) => Rc::ptr_eq(a, b),
                _ => false,
            };
            if !same {
                drop(leases);
                return Err(type_error(
                    env,
                    "lease is not an attempt of this request".into(),
                ));
            }
        }
    }
    let mut open = state.take_lease(env, handle, args[2])?;
    let lease = open.lease.take().expect("take_lease checked it is open");
    let outcome = outcome.outcome(Some(lease.elapsed()));
    if let Some(load) = &load {
        lease.report_load(load);
    }
    let code = match &open.request {
        None => {
            lease.finish(outcome);
            0
        }
        Some(request) => {
            let (code, delay) = request::finish(&request.core, lease, outcome)?;
            state.write(&delay.to_ne_bytes())?;
            code
        }
    };
    drop(open);
    // SAFETY: a valid env for this thread.
    unsafe { u32::to_napi_value(raw, code) }.or_throw()
}

/// The `load` of an outcome object (the server's load report), if it has one.
fn load_of(env: &Env, outcome: Option<Unknown<'_>>) -> Result<Option<liblb_core::LoadReport>> {
    let Some(outcome) = js::present(outcome)? else {
        return Ok(None);
    };
    // `js::outcome` checked it is an object.
    // SAFETY: an object value of this env.
    let object = unsafe { outcome.cast::<napi::bindgen_prelude::Object>() }.or_throw()?;
    match js::present(object.get::<Unknown>("load").or_throw()?)? {
        Some(load) => crate::orca::report_arg(env, &load, "outcome.load").map(Some),
        None => Ok(None),
    }
}

/// `nativeCancel(lease, id)`: ends the lease without an outcome.
fn cancel(state: &State, env: &Env, args: &[Option<Unknown>; 9]) -> Result<sys::napi_value> {
    let open = state.take_lease(env, number(env.raw(), args[0]), args[1])?;
    // Dropping an open entry cancels it (through its request, if any).
    drop(open);
    undefined(env.raw())
}

/// `nativeInfo(request, what)`: one of the request's getters, by number (see [`LEASES`]).
fn info(state: &State, env: &Env, args: &[Option<Unknown>; 9]) -> Result<sys::napi_value> {
    let raw = env.raw();
    let request = state.request(number(raw, args[0]))?;
    let core = request.core.try_borrow().map_err(|_| busy())?;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    // SAFETY (every arm): a valid env for this thread.
    unsafe {
        match number(raw, args[1]) as u32 {
            0 => u32::to_napi_value(raw, core.attempts()),
            1 => f64::to_napi_value(raw, ms(core.backoff())),
            2 => Option::<f64>::to_napi_value(raw, core.hedge_after().map(ms)),
            3 => bool::to_napi_value(raw, core.is_over()),
            4 => Option::<f64>::to_napi_value(raw, core.remaining().map(ms)),
            5 => Option::<&str>::to_napi_value(raw, core.stopped().map(|s| s.name())),
            _ => Option::<u32>::to_napi_value(raw, core.winner()),
        }
    }
    .or_throw()
}

/// `nativeRelease(kind, handle)`: a lease (kind 0) or request (1) was collected: empties its
/// entry if it is still live (a lease is cancelled).
fn release(state: &State, env: &Env, args: &[Option<Unknown>; 9]) -> Result<sys::napi_value> {
    let raw = env.raw();
    let handle = number(raw, args[1]);
    if number(raw, args[0]) == 0.0 {
        state.release_lease(handle);
    } else {
        let open = match state.requests.try_borrow_mut() {
            Ok(mut requests) => requests.take(handle),
            Err(_) => None,
        };
        drop(open);
    }
    undefined(raw)
}

type Native = fn(&State, &Env, &[Option<Unknown>; 9]) -> Result<sys::napi_value>;

/// Reads up to 9 arguments (`None` past the ones given) and runs `body` with the environment's
/// [`State`] inside a panic boundary; throws on error, as `fast::enter` does.
///
/// # Safety
/// `env` and `info` are the arguments napi passed to one of this module's callbacks.
#[inline]
unsafe fn enter(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&State, &Env, &[Option<Unknown<'_>>; 9]) -> Result<sys::napi_value>,
) -> sys::napi_value {
    let call = || -> Result<sys::napi_value> {
        let mut argc = 9;
        let (mut args, mut data) = ([ptr::null_mut(); 9], ptr::null_mut());
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
        // SAFETY: `data` is the `State` this function holds an `Rc` of (see `functions`), alive
        // at least until the function is collected, which cannot happen during its call.
        let state = unsafe { &*data.cast::<State>() };
        // SAFETY: napi filled `args[i]` for every `i` < `argc`.
        let args = std::array::from_fn(|i| {
            (i < argc).then(|| unsafe { Unknown::from_raw_unchecked(env, args[i]) })
        });
        body(state, &Env::from_raw(env), &args)
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

macro_rules! callback {
    ($name:ident, $body:expr) => {
        unsafe extern "C" fn $name(
            env: sys::napi_env,
            info: sys::napi_callback_info,
        ) -> sys::napi_value {
            let body: Native = $body;
            // SAFETY: called by napi as a `napi_callback`.
            unsafe { enter(env, info, |s, e, a| body(s, e, a)) }
        }
    };
}

callback!(native_acquire, acquire);
callback!(native_request, new_request);
callback!(native_attempt, attempt);
callback!(native_end, end);
callback!(native_cancel, cancel);
callback!(native_info, info);
callback!(native_release, release);

/// Makes the native functions [`LEASES`] takes, in its order, for one environment. Each holds an
/// `Rc` of `state`, released when the function is collected.
pub fn functions(env: &Env, state: &Rc<State>) -> napi::Result<[sys::napi_value; 7]> {
    type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;
    let made: [(&CStr, Callback); 7] = [
        (c"acquire", native_acquire),
        (c"request", native_request),
        (c"attempt", native_attempt),
        (c"end", native_end),
        (c"cancel", native_cancel),
        (c"info", native_info),
        (c"release", native_release),
    ];
    let mut out = [ptr::null_mut(); 7];
    for ((name, callback), slot) in made.into_iter().zip(&mut out) {
        let data = Rc::into_raw(Rc::clone(state)).cast_mut().cast::<c_void>();
        // SAFETY: a valid env for this thread; `name` is NUL-terminated; `data` stays valid
        // until `release_state` runs when the function is collected. If either step fails the
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
                    Some(release_state),
                    ptr::null_mut(),
                    ptr::null_mut(),
                ) != sys::Status::napi_ok
            {
                drop(Rc::from_raw(data.cast::<State>()));
                return Err(napi::Error::from_reason(
                    "liblb: could not make the lease functions",
                ));
            }
        }
    }
    Ok(out)
}

/// Finalizer of the lease functions: releases the function's `Rc` of the state.
unsafe extern "C" fn release_state(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Rc::into_raw` of `functions`, released only here, once, on the
    // environment's thread (where every other `Rc` of it lives).
    drop(unsafe { Rc::from_raw(data.cast::<State>()) });
}
