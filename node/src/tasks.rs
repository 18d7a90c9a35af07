//! Table builds off the event loop: `Balancer.create()`, `updateAsync()`, `addAsync()`,
//! `removeAsync()` and `setWeightAsync()`.
//!
//! A membership change rebuilds the algorithm's selection table (a ring of many nodes is up to a
//! million SHA-256 hashes and a sort): done by the synchronous methods, that blocks the event
//! loop for as long. The async variants read their arguments on the JavaScript thread (the same
//! conversions and `TypeError`s / `RangeError`s as the synchronous methods), then run the core
//! call as a napi-rs [`Task`] on the libuv thread pool, and settle a promise on the JavaScript
//! thread when it is done:
//!
//! - resolved with `undefined` (a change) or a new `Balancer` (`create`);
//! - rejected with the error the synchronous method would have thrown: the same `Error` class,
//!   `code` and message, built by the same napi-rs path ([`rejection`]). A failed change leaves
//!   the balancer unchanged, as the core guarantees for every change.
//!
//! The task holds an `Arc` of the core balancer (which is `Send + Sync`, its writers serialised
//! inside the core), never the JavaScript object, so nothing JavaScript-owned crosses threads.
//! A panic in the core on the pool thread is caught there and rejects the promise (as
//! `#[napi(catch_unwind)]` does for the synchronous methods), instead of unwinding into libuv.
//!
//! Argument errors are thrown synchronously by these native methods; the JavaScript wrappers of
//! [`ASYNC`] (installed when the module loads) are `async` functions, so to the caller every
//! failure is a rejection.

use crate::error::{Code, Error};
use napi::bindgen_prelude::JsError;
use napi::{Env, Task, Unknown};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Makes the async methods `async` functions, so an argument error thrown by the native method
/// rejects the returned promise instead of escaping synchronously. `Reflect.apply` is read once,
/// when the module loads.
pub const ASYNC: &str = r"(function (exports) {
  const apply = Reflect.apply
  const wrap = (target, name) => {
    const native = target[name]
    const wrapped = {
      async [name](...args) {
        return apply(native, this, args)
      },
    }[name]
    // The same attributes as the native method had (the static one is not enumerable).
    const { writable, enumerable, configurable } = Object.getOwnPropertyDescriptor(target, name)
    Object.defineProperty(target, name, { value: wrapped, writable, enumerable, configurable })
  }
  const proto = exports.Balancer.prototype
  for (const name of ['updateAsync', 'addAsync', 'removeAsync', 'setWeightAsync']) wrap(proto, name)
  wrap(exports.Balancer, 'create')
})";

/// A membership change to run on the thread pool.
pub enum Change {
    Update(Vec<liblb_core::Node>),
    Add(liblb_core::Node),
    Remove(String),
    SetWeight(String, u32),
}

/// `updateAsync` / `addAsync` / `removeAsync` / `setWeightAsync`: one change to one balancer.
pub struct ChangeTask {
    core: Arc<liblb_core::Balancer>,
    /// Taken by `compute`, which runs once.
    change: Option<Change>,
}

impl ChangeTask {
    pub fn new(core: &Arc<liblb_core::Balancer>, change: Change) -> ChangeTask {
        ChangeTask {
            core: Arc::clone(core),
            change: Some(change),
        }
    }
}

impl Task for ChangeTask {
    type Output = liblb_core::Result<()>;
    type JsValue = ();

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let (core, change) = (&self.core, self.change.take());
        guarded(|| match change {
            Some(Change::Update(nodes)) => core.update(nodes),
            Some(Change::Add(node)) => core.add(node),
            Some(Change::Remove(id)) => core.remove(&id),
            Some(Change::SetWeight(id, weight)) => core.set_weight(&id, weight),
            None => Ok(()),
        })
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<()> {
        output.map_err(|e| rejection(&env, e))
    }
}

/// `Balancer.create`: a whole new balancer.
pub struct CreateTask {
    /// Taken by `compute`, which runs once.
    args: Option<(
        liblb_core::Algorithm,
        Vec<liblb_core::Node>,
        liblb_core::Options,
    )>,
}

impl CreateTask {
    pub fn new(
        algorithm: liblb_core::Algorithm,
        nodes: Vec<liblb_core::Node>,
        options: liblb_core::Options,
    ) -> CreateTask {
        CreateTask {
            args: Some((algorithm, nodes, options)),
        }
    }
}

impl Task for CreateTask {
    type Output = liblb_core::Result<liblb_core::Balancer>;
    type JsValue = crate::Balancer;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let args = self.args.take();
        guarded(|| match args {
            Some((algorithm, nodes, options)) => {
                liblb_core::Balancer::new(algorithm, nodes, options)
            }
            None => Err(liblb_core::Error::NoNodes),
        })
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<crate::Balancer> {
        match output {
            Ok(inner) => Ok(crate::Balancer {
                inner: Arc::new(inner),
            }),
            Err(e) => Err(rejection(&env, e)),
        }
    }
}

/// Runs `work` on the pool thread with panics caught (a panic must not unwind into libuv): a
/// panic becomes a napi error, which rejects the promise with the panic's message.
fn guarded<T>(work: impl FnOnce() -> T) -> napi::Result<T> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|panic| {
        let panic = napi::bindgen_prelude::panic_to_error(panic);
        napi::Error::new(panic.status, panic.reason)
    })
}

/// The JavaScript error a synchronous method throws for `error` (an `Error` with the core's
/// `code` and message, made by napi-rs's own `JsError`), as the value a promise is rejected
/// with.
fn rejection(env: &Env, error: liblb_core::Error) -> napi::Error {
    let error = Error::new(Code::Lb(error.code()), error.to_string());
    // SAFETY: a valid env on the JavaScript thread (`resolve` runs there).
    let value = unsafe { JsError::from(error).into_value(env.raw()) };
    if value.is_null() {
        // The environment could not build an error object (it is shutting down): napi-rs then
        // has nothing to reject with either.
        return napi::Error::from_reason("liblb: could not create the rejection");
    }
    // SAFETY: `value` is an Error object just made in `env`, on this thread.
    napi::Error::from(unsafe { Unknown::from_raw_unchecked(env.raw(), value) })
}
