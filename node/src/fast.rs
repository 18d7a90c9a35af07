//! Direct Node-API entry points for the hot methods: `pick`, `pickMany` and `attempts`.
//!
//! A `#[napi]` method with arguments pays napi-rs 3's per-call "native borrow" bookkeeping (a
//! thread-local scope plus a process-wide `Mutex<HashMap>` entry for `&self`): about 240 ns per
//! call on the bench machine, ten times the cost of a zero-argument `#[napi]` function and many
//! times the pick itself. These three methods are instead plain `napi_callback`s, installed on
//! `Balancer.prototype` when the module loads (in every thread that loads it). Each one:
//!
//! 1. reads `this` and the arguments with napi-rs's own `CallbackInfo`;
//! 2. recovers `&Balancer` with napi-rs's own `unwrap_raw`, which rejects a receiver that is not
//!    a `Balancer` (`Balancer.prototype.pick.call({})` throws, it never reads a wrong pointer);
//! 3. calls the same `Balancer::*_impl` method, so conversions and errors are shared with
//!    everything else (see `js.rs` and `error.rs`);
//! 4. runs inside `catch_unwind`, like every `#[napi(catch_unwind)]` export.
//!
//! No borrow bookkeeping is needed: these methods take `&Balancer`, the core balancer is `Sync`
//! with interior mutability, and no `&mut Balancer` exists anywhere. JavaScript that runs during
//! a call (`pickMany`'s helpers in `batch.rs`, a getter or Proxy trap on the keys array) can only
//! reach other `&Balancer` methods, and cannot free the instance: `this` is on the caller's stack.
//! Their TypeScript declarations live in `header.d.ts` (an interface merged with the generated
//! class). `pickMany` also receives its environment's batch helpers as callback data.

use crate::Balancer;
use crate::batch::Helpers;
use crate::error::{Code, Error, OrThrow, Result, type_error};
use napi::bindgen_prelude::{
    CallbackInfo, JsError, JsObjectValue, Object, ToNapiValue, panic_to_error,
};
use napi::{Env, JsValue, Unknown, sys};
use napi_derive::napi;
use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

/// Installs the hot methods on `Balancer.prototype`. Runs once per environment (main thread and
/// each worker), after napi-rs has defined the class on `exports`.
#[napi(module_exports)]
pub fn install_hot_methods(exports: Object, env: Env) -> napi::Result<()> {
    // The class is a function, which `Object`'s conversion refuses: read it as a plain value.
    let class: Unknown = exports.get_named_property("Balancer")?;
    let class = Object::from_raw(env.raw(), class.raw());
    let prototype: Object = class.get_named_property("prototype")?;
    // Same attributes as the methods napi-rs defines: writable, enumerable, configurable.
    let attributes = sys::PropertyAttributes::writable
        | sys::PropertyAttributes::enumerable
        | sys::PropertyAttributes::configurable;
    // `pickMany` gets this environment's batch helpers as its callback data.
    let helpers = Helpers::install(&env)?;
    let hot: [(&'static CStr, sys::napi_callback, *const Helpers); 3] = [
        (c"pick", Some(pick), ptr::null()),
        (c"pickMany", Some(pick_many), helpers),
        (c"attempts", Some(attempts), ptr::null()),
    ];
    for (name, callback, data) in hot {
        let mut function = ptr::null_mut();
        // SAFETY: a valid env from napi-rs; `name` points at `len` bytes of a 'static string that
        // napi copies; `data` lives as long as this environment; `function` is an out-pointer.
        napi::check_status!(unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr(),
                name.to_bytes().len() as isize,
                callback,
                data.cast_mut().cast(),
                &mut function,
            )
        })?;
        let property = sys::napi_property_descriptor {
            utf8name: name.as_ptr(),
            name: ptr::null_mut(),
            method: None,
            getter: None,
            setter: None,
            value: function,
            attributes,
            data: ptr::null_mut(),
        };
        // SAFETY: a valid env and object; one descriptor whose name napi copies.
        napi::check_status!(unsafe {
            sys::napi_define_properties(env.raw(), prototype.raw(), 1, &property)
        })?;
    }
    Ok(())
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
    let call = || -> Result<sys::napi_value> {
        let mut cb = CallbackInfo::<N>::new(env, info, None, false).or_throw()?;
        // SAFETY: `unwrap_raw` checks that `this` wraps a `Balancer` (class identity) before
        // returning napi-rs's pointer to it; the instance stays alive while `this` is on the JS
        // stack, i.e. for this whole call, and it is only ever borrowed shared (see module docs).
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
        let result = body(this, &Env::from_raw(env), args)?;
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
    let mut data = ptr::null_mut();
    // SAFETY: called by napi as a `napi_callback`; only the callback data is read here.
    let status = unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut data,
        )
    };
    if status != sys::Status::napi_ok || data.is_null() {
        return ptr::null_mut(); // Cannot happen: `install_hot_methods` always passes the helpers.
    }
    // SAFETY: `data` is this environment's `Helpers`, alive until its cleanup hook runs, which
    // is after every call in this environment.
    let helpers = unsafe { &*data.cast::<Helpers>() };
    // SAFETY: called by napi as a `napi_callback`.
    unsafe {
        enter(env, info, |b, env, [keys]| {
            b.pick_many_impl(env, keys, helpers)
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
