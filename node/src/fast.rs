//! Direct Node-API entry points for the hot methods: `pick`, `pickMany` and `attempts`.
//!
//! A `#[napi]` method with arguments pays napi-rs 3's per-call "native borrow" bookkeeping (a
//! thread-local scope plus a process-wide `Mutex<HashMap>` entry for `&self`): about 240 ns per
//! call on the bench machine, ten times the cost of a zero-argument `#[napi]` function and many
//! times the pick itself. These three methods are instead plain `napi_callback`s, added to the
//! `Balancer` class definition itself (see `register_hot_methods`), so napi-rs defines them
//! with `napi_define_class` together with the generated methods. Each one:
//!
//! 1. is only entered with a `Balancer` receiver: `napi_define_class` gives instance methods a
//!    V8 receiver signature, so V8 itself throws `TypeError: Illegal invocation` for any other
//!    `this` (`{}`, `Object.create(Balancer.prototype)`, an instance of another addon's class)
//!    before the callback runs, exactly as for the generated methods;
//! 2. reads `this` and the arguments with napi-rs's own `CallbackInfo`;
//! 3. recovers `&Balancer` with napi-rs's own `unwrap_raw`, a second check for runtimes that do
//!    not enforce the signature (Bun, emnapi). Under the `napi6` feature that check is a
//!    thread-local map lookup plus a brief lock of napi-rs's process-wide `CLASS_REGISTRY`
//!    mutex, held for one vector read: picks in several workers do touch one shared lock. It
//!    accepts an object wrapped by code other than this copy of napi-rs (another addon), which
//!    is why the signature check above is the one that matters;
//! 4. calls the same `Balancer::*_impl` method, so conversions and errors are shared with
//!    everything else (see `js.rs` and `error.rs`);
//! 5. runs inside `catch_unwind`, like every `#[napi(catch_unwind)]` export.
//!
//! No borrow bookkeeping is needed: these methods take `&Balancer`, the core balancer is `Sync`
//! with interior mutability, and no `&mut Balancer` exists anywhere. JavaScript that runs during
//! a call (`pickMany`'s helpers in `batch.rs`, a getter or Proxy trap on the keys array) can only
//! reach other `&Balancer` methods, and cannot free the instance: `this` is on the caller's stack.
//! Their TypeScript declarations live in `header.d.ts` (an interface merged with the generated
//! class). `pickMany` finds its environment's batch helpers in the addon's instance data.
//!
//! `pick` is then wrapped, when the module loads, by the JavaScript function of `ids.rs`, which
//! calls this native `pick` for an instance's first pick and afterwards a native function that
//! needs no receiver check, given the instance's handle (the fourth method registered here,
//! `__liblbFastPick`, makes the handle and is taken off the prototype by that script).
//!
//! This uses napi-rs internals (`napi::__private::register_class`, `CallbackInfo::unwrap_raw`),
//! which is why `Cargo.toml` pins `napi` and `napi-derive` to exact versions.

use crate::Balancer;
use crate::batch::Helpers;
use crate::error::{Code, Error, OrThrow, Result, type_error};
use crate::js::OwnArray;
use napi::bindgen_prelude::{CallbackInfo, Function, JsError, Object, ToNapiValue, panic_to_error};
use napi::{Env, JsValue, Unknown, sys};
use napi_derive::napi;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

// Adds the hot methods to the `Balancer` class registration, before any environment loads the
// module (a constructor function, like the one napi-derive generates for the class itself:
// napi-rs merges the properties of every registration of the same Rust type). The class name
// must be NUL-terminated, as napi-derive passes it: napi-rs stores the last one given and hands
// it to `napi_define_class` as a C string.
#[cfg(not(test))]
napi::ctor::declarative::ctor! {
    #[ctor(unsafe)]
    fn register_hot_methods() {
        use napi::bindgen_prelude::{Property, PropertyAttributes};
        // Same attributes as the methods napi-rs generates: writable, enumerable, configurable.
        let attributes = PropertyAttributes::Writable
            | PropertyAttributes::Enumerable
            | PropertyAttributes::Configurable;
        type Callback =
            unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;
        // `__liblbFastPick` is taken off the prototype by `ids::PICK` when the module loads.
        let hot: [(&str, Callback); 4] = [
            ("pick", pick),
            ("pickMany", pick_many),
            ("attempts", attempts),
            ("__liblbFastPick", crate::ids::make_handle),
        ];
        let props = hot
            .into_iter()
            .filter_map(|(name, callback)| {
                // `with_utf8_name` only fails for a name containing NUL; these have none.
                let property = Property::new().with_utf8_name(name).ok()?;
                Some(property.with_method(callback).with_property_attributes(attributes))
            })
            .collect();
        napi::__private::register_class(
            std::any::TypeId::of::<Balancer>(),
            None,
            "Balancer\0",
            props,
            false,
        );
    }
}

/// `Balancer.prototype.run(key, fn, options)`: the request loop over `Balancer.request` for
/// callers whose `fn(nodeId, signal)` returns a promise. Every decision (the next node, the
/// delay, giving up, when to hedge) is the core's, through `Request`; this JavaScript owns what
/// only JavaScript can: awaiting the promises, racing hedges (`Promise.race`), timers, aborting
/// the losers' `AbortSignal`s, and the mapping of a rejection to a failure kind (`KIND`).
/// Without `options` it makes one attempt and rethrows `fn`'s error, as before requests
/// existed; with them, giving up rejects with an `LB_REQUEST_FAILED` error whose `cause` is
/// the last attempt's error.
const RUN: &str = r"(function (exports) {
  const KINDS = ['error', 'timeout', 'overloaded']
  // A rejection's failure kind: its own `kind` if it is one of ours, a timeout for the names
  // and codes Node and undici give timeouts, else 'error'; `retryAfterMs` if a number >= 0.
  const TIMEOUTS = new Set(['TimeoutError', 'ETIMEDOUT', 'ESOCKETTIMEDOUT', 'UND_ERR_CONNECT_TIMEOUT',
    'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ABORT_ERR_TIMEOUT'])
  function failure(error) {
    const e = error !== null && typeof error === 'object' ? error : {}
    const kind = KINDS.includes(e.kind) ? e.kind
      : (TIMEOUTS.has(e.name) || TIMEOUTS.has(e.code)) ? 'timeout' : 'error'
    const after = kind === 'overloaded' && typeof e.retryAfterMs === 'number' &&
      Number.isFinite(e.retryAfterMs) && e.retryAfterMs >= 0 ? e.retryAfterMs : null
    return { ok: false, kind, retryAfterMs: after }
  }
  Object.defineProperty(exports.Balancer.prototype, 'run', {
    value: async function run(key, fn, options) {
      if (typeof fn !== 'function') {
        const error = new TypeError(`fn must be a function, got ${fn === null ? 'null' : typeof fn}`)
        error.code = 'ERR_INVALID_ARG_TYPE'
        throw error
      }
      const single = options === undefined || options === null
      const request = this.request(key, single ? { maxAttempts: 1 } : options)
      const out = new Map() // lease -> { controller, answer }
      let last
      let hedges = true
      const start = (lease) => {
        if (lease === null) return
        const controller = new AbortController()
        let answer
        try {
          answer = Promise.resolve(fn(lease.id, controller.signal))
        } catch (error) {
          answer = Promise.reject(error)
        }
        out.set(lease, {
          controller,
          answer: answer.then((value) => ({ lease, ok: true, value }), (error) => ({ lease, ok: false, error })),
        })
      }
      try {
        start(request.attempt())
        while (out.size > 0) {
          const wait = hedges ? request.hedgeAfterMs() : null
          const racers = [...out.values()].map((a) => a.answer)
          let timer
          if (wait !== null) racers.push(new Promise((resolve) => { timer = setTimeout(resolve, wait, null) }))
          const event = await Promise.race(racers)
          clearTimeout(timer)
          if (event === null) {
            const hedge = request.hedge()
            hedges = hedge !== null // refused: no more hedges for this request
            start(hedge)
            continue
          }
          out.delete(event.lease)
          if (event.ok) {
            request.finish(event.lease, { ok: true })
            return event.value
          }
          last = event.error
          const next = request.finish(event.lease, failure(event.error))
          if (next.decision === 'retry') {
            if (next.delayMs > 0 && out.size === 0) await new Promise((resolve) => setTimeout(resolve, next.delayMs))
            start(request.attempt())
          } else if (next.decision === 'stop') {
            break
          }
        }
      } finally {
        // The attempts still out lost (or the loop threw): abort them, nothing counted.
        for (const [lease, a] of out) {
          a.controller.abort()
          if (!lease.done) request.cancel(lease)
        }
      }
      if (single && request.attempts > 0) throw last
      const error = new Error(`request gave up (${request.stopped}) after ${request.attempts} attempt(s)`, { cause: last })
      error.code = 'LB_REQUEST_FAILED'
      error.stop = request.stopped
      error.attempts = request.attempts
      throw error
    },
    writable: true,
    enumerable: true,
    configurable: true,
  })
})";

/// Compiles this environment's batch helpers for `pickMany` and stores them as the addon's
/// instance data (napi-rs leaves that slot to addon authors). Runs once per environment (main
/// thread and each worker) when the module loads.
///
/// It also defines `Balancer.prototype.run` (see [`RUN`]), wraps the async methods (see
/// `tasks::ASYNC`), installs `pick`'s JavaScript half (`ids.rs`) and the lease and request
/// objects (`leases.rs`).
#[napi(module_exports)]
pub fn install_batch_helpers(exports: Object, env: Env) -> napi::Result<()> {
    let install: Function<Object, ()> = env.run_script(RUN)?;
    install.call(exports)?;
    // The async methods become `async` functions (see `tasks.rs`).
    let install: Function<Object, ()> = env.run_script(crate::tasks::ASYNC)?;
    install.call(exports)?;
    let helpers = Helpers::install(&env)?;
    // SAFETY: a valid env from napi-rs. No finalizer: the helpers are freed by their own
    // environment cleanup hook (see `Helpers::install`), after the last call in this environment.
    napi::check_status!(unsafe {
        sys::napi_set_instance_data(env.raw(), helpers.cast_mut().cast(), None, ptr::null_mut())
    })?;
    // `Balancer.prototype.pick`'s JavaScript half, given its two private native functions.
    let install: Unknown = env.run_script(crate::ids::PICK)?;
    // SAFETY: `helpers` was just made and lives until the environment's cleanup hook.
    let handles = unsafe { &(*helpers).fast };
    let [fast_pick, fast_ids, fast_attempts] = crate::ids::functions(&env, handles)?;
    let record_of = call(
        &env,
        install.raw(),
        &[exports.raw(), fast_pick, fast_ids, fast_attempts],
    )?;
    // Leases and requests (`leases.rs`), given `recordOf` (the record of a balancer), `fastIds`
    // and their private native functions.
    let install: Unknown = env.run_script(crate::leases::LEASES)?;
    // SAFETY: as above.
    let state = unsafe { &(*helpers).leases };
    let natives = crate::leases::functions(&env, state)?;
    // SAFETY: a valid env for this thread (the arrays are made of new strings).
    let (decisions, stops) = unsafe {
        (
            OwnArray::to_napi_value(env.raw(), OwnArray(crate::request::DECISIONS.to_vec()))?,
            OwnArray::to_napi_value(env.raw(), OwnArray(liblb_core::Stop::NAMES.to_vec()))?,
        )
    };
    let scratch = state.scratch(&env)?;
    let mut args = vec![exports.raw(), record_of, fast_ids, scratch];
    args.extend(natives);
    args.extend([decisions, stops]);
    call(&env, install.raw(), &args)?;
    Ok(())
}

/// Calls `function` with `args` and `undefined` as `this`; returns its result.
fn call(
    env: &Env,
    function: sys::napi_value,
    args: &[sys::napi_value],
) -> napi::Result<sys::napi_value> {
    let (mut receiver, mut result) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: a valid env; `function` is a function made in it; `args` outlives the call;
    // out-pointers to locals.
    unsafe {
        napi::check_status!(sys::napi_get_undefined(env.raw(), &mut receiver))?;
        napi::check_status!(sys::napi_call_function(
            env.raw(),
            receiver,
            function,
            args.len(),
            args.as_ptr(),
            &mut result
        ))?;
    }
    Ok(result)
}

/// Reads `this` and up to `N` arguments (missing ones read as `undefined`) and calls `body` with
/// the `Balancer` behind `this`. Throws on any error or panic, as generated napi-rs code does.
///
/// # Safety
/// `env` and `info` must be the arguments napi passed to the calling `napi_callback`.
#[inline]
unsafe fn enter<const N: usize, R: ToNapiValue>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&Balancer, &Env, [Unknown<'_>; N]) -> Result<R>,
) -> sys::napi_value {
    // SAFETY: forwarded from the caller.
    unsafe { enter_this(env, info, |b, env, _this, args| body(b, env, args)) }
}

/// [`enter`] for the methods of `ids.rs` that also need `this` and the environment's
/// [`Helpers`] (which exist before any call: see `install_batch_helpers`).
///
/// # Safety
/// As for [`enter`].
pub(crate) unsafe fn enter_with_this(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&Balancer, &Env, sys::napi_value, &Helpers) -> Result<sys::napi_value>,
) -> sys::napi_value {
    // SAFETY: forwarded from the caller.
    unsafe {
        enter_this::<0, sys::napi_value>(env, info, |b, env, this, []| {
            body(b, env, this, helpers(env.raw())?)
        })
    }
}

/// This environment's helpers (the addon's instance data).
fn helpers<'a>(env: sys::napi_env) -> Result<&'a Helpers> {
    let mut data = ptr::null_mut();
    // SAFETY: a valid env; `data` is an out-pointer.
    let status = unsafe { sys::napi_get_instance_data(env, &mut data) };
    if status != sys::Status::napi_ok || data.is_null() {
        // Cannot happen: `install_batch_helpers` runs before the module's exports are visible.
        let message = "liblb: this environment's batch helpers are missing".to_string();
        return Err(Error::new(
            Code::Napi(napi::Status::GenericFailure),
            message,
        ));
    }
    // SAFETY: the instance data is this environment's `Helpers`, alive until its cleanup hook
    // runs, which is after every call in this environment.
    Ok(unsafe { &*data.cast::<Helpers>() })
}

/// [`enter`], with `this` given to `body` as well.
///
/// # Safety
/// As for [`enter`].
#[inline]
unsafe fn enter_this<const N: usize, R: ToNapiValue>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&Balancer, &Env, sys::napi_value, [Unknown<'_>; N]) -> Result<R>,
) -> sys::napi_value {
    let call = || -> Result<sys::napi_value> {
        let mut cb = CallbackInfo::<N>::new(env, info, None, false).or_throw()?;
        // SAFETY: `this` is a `Balancer` instance: V8's receiver signature (module docs, point 1)
        // admits no other receiver, so `napi_unwrap` returns the pointer napi-rs wrapped it
        // with. `unwrap_raw` re-checks where it can (runtimes without the signature check), but
        // alone it would accept an object wrapped by another addon. The instance stays alive
        // while `this` is on the JS stack, i.e. for this whole call, and it is only ever borrowed
        // shared (see module docs).
        let this = match unsafe { cb.unwrap_raw::<Balancer>() } {
            Ok(this) => unsafe { &*this },
            Err(_) => {
                let message = "Balancer method called on an object that is not a Balancer";
                return Err(type_error(&Env::from_raw(env), message.to_string()));
            }
        };
        // SAFETY: napi fills every slot up to N, with `undefined` past the actual arguments.
        let args = cb
            .args
            .map(|arg| unsafe { Unknown::from_raw_unchecked(env, arg) });
        let result = body(this, &Env::from_raw(env), cb.this, args)?;
        // SAFETY: a valid env for this thread, from napi.
        unsafe { R::to_napi_value(env, result) }.or_throw()
    };
    let error: Error = match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => return value,
        Ok(Err(error)) => error,
        Err(panic) => {
            let panic = panic_to_error(panic);
            Error::new(Code::Napi(panic.status), panic.reason)
        }
    };
    // SAFETY: a valid env for this thread; `throw_into` keeps an exception already pending
    // (a TypeError thrown by a conversion) instead of throwing a second one.
    unsafe { JsError::from(error).throw_into(env) };
    ptr::null_mut()
}

/// `Balancer.prototype.pick(key?)`.
unsafe extern "C" fn pick(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: called by napi as a `napi_callback`.
    unsafe { enter(env, info, |b, env, [key]| b.pick_impl(env, key)) }
}

/// `Balancer.prototype.pickMany(keys)`.
unsafe extern "C" fn pick_many(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as a `napi_callback`.
    unsafe {
        enter(env, info, |b, env, [keys]| {
            b.pick_many_impl(env, keys, helpers(env.raw())?)
        })
    }
}

/// `Balancer.prototype.attempts(key?, limit?)`.
unsafe extern "C" fn attempts(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by napi as a `napi_callback`.
    unsafe {
        enter(env, info, |b, env, [key, limit]| {
            b.attempts_impl(env, key, limit)
        })
    }
}
