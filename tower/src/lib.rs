//! liblb for [tower]: [`Balance`] is a `tower::Service` that routes each request to a node
//! chosen by a liblb [`Balancer`], and [`BalanceLayer`] puts it in front of a client. The node
//! choice, the retries (on distinct nodes, in the key's retry order), backoff, retry-after,
//! budgets, hedging and health all come from the balancer's request loop
//! ([`liblb_core::Request`]); this crate only maps requests and answers to it, through a
//! [`Policy`]:
//!
//! - [`Policy::route`] turns the request into one for a node (for HTTP: the URI's authority
//!   becomes the node's `host:port`, `Host` stays the logical one);
//! - [`Policy::replay`] copies it for a retry or a hedge (`None`: it cannot be sent twice, so
//!   it gets one attempt);
//! - [`Policy::classify`] says how an attempt ended: `None` is a success, a [`Failure`] is
//!   counted against the node and retried if its kind is retried.
//!
//! [`HttpPolicy`] (feature `http`, on by default) is the policy for `http::Request`s: 5xx
//! answers are errors, 429 and a 503 with `Retry-After` overloaded (with it), transport errors errors;
//! only idempotent methods are retried unless told otherwise.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use liblb_core::{Algorithm, Balancer};
//! use liblb_tower::{BalanceLayer, HttpPolicy};
//! use std::sync::Arc;
//! use tower::{Layer, Service, ServiceExt};
//!
//! let balancer = Arc::new(Balancer::new(
//!     Algorithm::PeakEwma,
//!     ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"],
//!     Default::default(),
//! )?);
//! # let client = tower::service_fn(|_req: http::Request<String>| async {
//! #     Ok::<_, std::io::Error>(http::Response::new(String::new()))
//! # });
//! // `client`: any `Service<http::Request<B>>` with `B: Clone`, e.g. a hyper-util client.
//! let mut service = BalanceLayer::new(balancer, HttpPolicy::new()).layer(client);
//! let request = http::Request::get("http://api.internal/users/42").body(String::new())?;
//! let response = service.ready().await?.call(request).await?;
//! # Ok(()) }
//! ```
//!
//! A request's lease ends when the inner service's future resolves (for HTTP clients: when the
//! response head arrives, not when its body has been read). Retries and hedges need a tokio
//! runtime with its timer (`tokio::time::sleep`), as tower's own retry and hedge middleware do.
//!
//! [tower]: https://docs.rs/tower

#![warn(missing_docs)]

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use liblb_core::{
    Balancer, Budget, CallError, Failure, Hedging, LoadReport, Request, RetryOn, RetryPolicy,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tower_layer::Layer;
use tower_service::Service;

#[cfg(feature = "http")]
mod http_policy;
#[cfg(feature = "http")]
pub use http_policy::HttpPolicy;

pub use liblb_core::Stop;

/// How [`Balance`] maps requests and answers of one kind to liblb's request loop.
pub trait Policy<Req, Res, E>: Clone + Send + Sync + 'static {
    /// The request's key for the keyed algorithms (`ring`, `maglev`, ...); `None`: no key.
    fn key(&self, _request: &Req) -> Option<Vec<u8>> {
        None
    }

    /// The request as sent to node `node` (its id); an `Err` (a node id this policy cannot
    /// route to) fails the attempt as an error on that node.
    fn route(&self, request: Req, node: &str) -> Result<Req, String>;

    /// A copy of the request for another attempt; `None`: it cannot be replayed, and gets
    /// exactly one attempt (no retry, no hedge).
    fn replay(&self, request: &Req) -> Option<Req>;

    /// How the attempt ended: `None` a success (the answer is the caller's), `Some` a failure
    /// of that kind, counted against the node and retried if the request retries its kind.
    fn classify(&self, result: &Result<Res, E>) -> Option<Failure>;

    /// The server's load report the answer carried (its ORCA `endpoint-load-metrics`, parsed
    /// with [`liblb_core::parse_orca`]), handed to the attempt's lease before it ends, so
    /// `client_side_wrr` and `prequal` learn from it; `None` (the default): no report, or one
    /// that did not parse (it never fails the request).
    fn load(&self, _result: &Result<Res, E>) -> Option<LoadReport> {
        None
    }
}

/// Why [`Balance`] returned no answer of the inner service.
#[derive(Debug)]
pub enum BalanceError<E> {
    /// The inner service failed (the last attempt's error, when retries were used up).
    Inner(E),
    /// The balancer could not pick (no nodes, a keyed algorithm without a key, ...).
    Balancer(liblb_core::Error),
    /// The request gave up before any answer: the adaptive throttle rejected it, or a
    /// deadline or budget stopped it with no attempt's answer to return.
    GaveUp(Stop),
    /// [`Policy::route`] refused a node.
    Route(String),
}

impl<E: core::fmt::Display> core::fmt::Display for BalanceError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BalanceError::Inner(error) => error.fmt(f),
            BalanceError::Balancer(error) => error.fmt(f),
            BalanceError::GaveUp(stop) => write!(f, "request gave up ({})", stop.name()),
            BalanceError::Route(detail) => f.write_str(detail),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BalanceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BalanceError::Inner(error) => Some(error),
            BalanceError::Balancer(error) => Some(error),
            _ => None,
        }
    }
}

/// Where the inner services come from: one for every node (a client that takes the node
/// from the request, e.g. an HTTP client with its connection pool per host), or one per node
/// made on first use (dropped once its node has left the balancer and the map holds more
/// services than the balancer has nodes).
enum Nodes<S> {
    Shared(S),
    PerNode(Arc<PerNode<S>>),
}

impl<S: Clone> Clone for Nodes<S> {
    fn clone(&self) -> Self {
        match self {
            Nodes::Shared(service) => Nodes::Shared(service.clone()),
            Nodes::PerNode(made) => Nodes::PerNode(made.clone()),
        }
    }
}

/// The services made per node, by node id.
struct PerNode<S> {
    make: Box<dyn Fn(&str) -> S + Send + Sync>,
    made: Mutex<HashMap<String, S>>,
}

impl<S: Clone> Nodes<S> {
    fn service(&self, node: &str, balancer: &Balancer) -> S {
        match self {
            Nodes::Shared(service) => service.clone(),
            Nodes::PerNode(per_node) => {
                // A panic while holding the lock leaves the map whole: keep using it.
                let mut made = per_node.made.lock().unwrap_or_else(|e| e.into_inner());
                if made.len() > balancer.len() {
                    made.retain(|id, _| balancer.contains(id));
                }
                if let Some(service) = made.get(node) {
                    return service.clone();
                }
                let service = (per_node.make)(node);
                made.insert(node.to_owned(), service.clone());
                service
            }
        }
    }
}

/// A `tower::Service` that sends each request through a liblb [`Balancer`]'s request loop
/// (see the crate docs). Cloning it is cheap: clones share the balancer, the inner services
/// and the budget.
pub struct Balance<S, P> {
    balancer: Arc<Balancer>,
    nodes: Nodes<S>,
    policy: P,
    retry: RetryPolicy,
    /// `Some`: this budget (or none) instead of the balancer's at each request.
    budget: Option<Option<Budget>>,
    hedging: Option<Arc<Hedging>>,
}

impl<S: Clone, P: Clone> Clone for Balance<S, P> {
    fn clone(&self) -> Self {
        Balance {
            balancer: self.balancer.clone(),
            nodes: self.nodes.clone(),
            policy: self.policy.clone(),
            retry: self.retry,
            budget: self.budget.clone(),
            hedging: self.hedging.clone(),
        }
    }
}

impl<S, P> Balance<S, P> {
    /// Balances over `balancer`'s nodes with one inner service for all of them: `policy`
    /// routes each request to its node (for HTTP, by rewriting its URI).
    pub fn new(balancer: Arc<Balancer>, service: S, policy: P) -> Balance<S, P> {
        Balance::with_nodes(balancer, Nodes::Shared(service), policy)
    }

    /// Balances over `balancer`'s nodes with an inner service per node, `make(node_id)` on
    /// the node's first request. Services of departed nodes are dropped when there are more
    /// services than nodes (a node that leaves and comes back before that keeps its service).
    pub fn per_node(
        balancer: Arc<Balancer>,
        make: impl Fn(&str) -> S + Send + Sync + 'static,
        policy: P,
    ) -> Balance<S, P> {
        let nodes = Nodes::PerNode(Arc::new(PerNode {
            make: Box::new(make),
            made: Mutex::new(HashMap::new()),
        }));
        Balance::with_nodes(balancer, nodes, policy)
    }

    fn with_nodes(balancer: Arc<Balancer>, nodes: Nodes<S>, policy: P) -> Balance<S, P> {
        Balance {
            budget: None,
            balancer,
            nodes,
            policy,
            retry: RetryPolicy::default(),
            hedging: None,
        }
    }

    /// Puts requests under `retry` (attempts, kinds retried, backoff, deadline; checked).
    pub fn retry_policy(mut self, retry: RetryPolicy) -> liblb_core::Result<Balance<S, P>> {
        retry.validate()?;
        self.retry = retry;
        Ok(self)
    }

    /// At most `max_attempts` attempts per request (1 to 100; default 3).
    pub fn max_attempts(self, max_attempts: u32) -> liblb_core::Result<Balance<S, P>> {
        let retry = RetryPolicy {
            max_attempts,
            ..self.retry
        };
        self.retry_policy(retry)
    }

    /// Retries only the failure kinds in `retry_on` (default all).
    pub fn retry_on(mut self, retry_on: RetryOn) -> Balance<S, P> {
        self.retry.retry_on = retry_on;
        self
    }

    /// Gives every request at most `deadline` from its first attempt.
    pub fn deadline(mut self, deadline: Duration) -> Balance<S, P> {
        self.retry.deadline = Some(deadline);
        self
    }

    /// Limits retries (and hedges) by `budget` instead of the balancer's
    /// ([`Balancer::set_budget`], the default); `None`: no budget.
    pub fn budget(mut self, budget: Option<Budget>) -> Balance<S, P> {
        self.budget = Some(budget);
        self
    }

    /// Sends hedges as `hedging` says (one policy for all the clones: a percentile policy
    /// learns from every request).
    pub fn hedging(mut self, hedging: Hedging) -> Balance<S, P> {
        self.hedging = Some(Arc::new(hedging));
        self
    }

    /// The balancer.
    pub fn balancer(&self) -> &Arc<Balancer> {
        &self.balancer
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The last attempt's answer when it was a failure, kept for the caller.
type Last<Res, E> = Arc<Mutex<Option<Result<Res, BalanceError<E>>>>>;

/// One attempt's answer to the request loop: the inner service's result when it counts as a
/// success, else the failure it was classified as.
type Attempt<Res, E> = BoxFuture<(Result<Result<Res, E>, Failure>, Option<LoadReport>)>;

/// Waits until `service` is ready, then calls it.
async fn ready_call<S: Service<Req>, Req>(
    mut service: S,
    request: Req,
) -> Result<S::Response, S::Error> {
    core::future::poll_fn(|cx| service.poll_ready(cx)).await?;
    service.call(request).await
}

impl<S, P, Req> Service<Req> for Balance<S, P>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    P: Policy<Req, S::Response, S::Error>,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = BalanceError<S::Error>;
    type Future = BoxFuture<Result<S::Response, BalanceError<S::Error>>>;

    /// Always ready: each attempt waits for its node's service to be ready.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let key = self.policy.key(&request);
        // A request that cannot be replayed gets one attempt: no retry, no hedge. (Nor is it
        // copied when the policy allows one attempt and no hedge.)
        let single = self.retry.max_attempts == 1 && self.hedging.is_none();
        let mut template = if single {
            None
        } else {
            self.policy.replay(&request)
        };
        let mut retry = self.retry;
        if template.is_none() {
            retry.max_attempts = 1;
        }
        let mut request_loop = Request::new(self.balancer.clone(), key);
        // Checked when set (`retry_policy`); lowering max_attempts to 1 keeps it valid.
        if let Err(error) = request_loop.set_policy(retry) {
            return Box::pin(core::future::ready(Err(BalanceError::Balancer(error))));
        }
        // A new request: its budget and hedging can be set (the errors are for later).
        let mut set = self
            .budget
            .clone()
            .map_or(Ok(()), |budget| request_loop.set_budget(budget));
        if set.is_ok() {
            set = request_loop.set_hedging(self.hedging.clone().filter(|_| template.is_some()));
        }
        if let Err(error) = set {
            return Box::pin(core::future::ready(Err(BalanceError::Balancer(error))));
        }
        // The last attempt's answer, when it was a failure: what the caller gets if the
        // request gives up (as Envoy returns the last upstream response).
        let last: Last<S::Response, S::Error> = Arc::new(Mutex::new(None));
        let mut first = Some(request);
        let (balancer, nodes, policy, kept) = (
            self.balancer.clone(),
            self.nodes.clone(),
            self.policy.clone(),
            last.clone(),
        );
        let send = move |node: String| -> Attempt<S::Response, S::Error> {
            // The original first, then copies of it; a policy that stops copying sends its
            // last copy itself.
            let request = first.take().or_else(|| {
                let copy = template.as_ref().and_then(|t| policy.replay(t));
                copy.or_else(|| template.take())
            });
            let service = nodes.service(&node, &balancer);
            let (policy, last) = (policy.clone(), kept.clone());
            Box::pin(async move {
                let keep = |answer| *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
                let Some(request) = request else {
                    let detail = "the policy gave no copy of the request for another attempt";
                    keep(Err(BalanceError::Route(detail.into())));
                    return (Err(Failure::error()), None);
                };
                let request = match policy.route(request, &node) {
                    Ok(request) => request,
                    Err(detail) => {
                        keep(Err(BalanceError::Route(detail)));
                        return (Err(Failure::error()), None);
                    }
                };
                let result = ready_call(service, request).await;
                let load = policy.load(&result);
                let answer = match policy.classify(&result) {
                    None => Ok(result),
                    Some(failure) => {
                        keep(result.map_err(BalanceError::Inner));
                        Err(failure)
                    }
                };
                (answer, load)
            })
        };
        Box::pin(async move {
            match request_loop
                .call_async_reporting(send, tokio::time::sleep)
                .await
            {
                Ok(answer) => answer.map_err(BalanceError::Inner),
                Err(error) => {
                    // The last answer, if an attempt got one; else why there is none.
                    let answer = last.lock().unwrap_or_else(|e| e.into_inner()).take();
                    answer.unwrap_or(Err(match error {
                        CallError::Balancer(error) => BalanceError::Balancer(error),
                        CallError::GaveUp { stop, .. } => BalanceError::GaveUp(stop),
                    }))
                }
            }
        })
    }
}

/// A `tower::Layer` that puts a [`Balance`] in front of a service (the one inner service for
/// every node: see [`Balance::new`]).
#[derive(Clone)]
pub struct BalanceLayer<P> {
    balancer: Arc<Balancer>,
    policy: P,
    retry: RetryPolicy,
    hedging: Option<Arc<Hedging>>,
}

impl<P> BalanceLayer<P> {
    /// Balances over `balancer`'s nodes under `policy`, with the default retry policy and the
    /// balancer's budget.
    pub fn new(balancer: Arc<Balancer>, policy: P) -> BalanceLayer<P> {
        BalanceLayer {
            balancer,
            policy,
            retry: RetryPolicy::default(),
            hedging: None,
        }
    }

    /// The layer's services retry under `retry` (checked).
    pub fn retry_policy(mut self, retry: RetryPolicy) -> liblb_core::Result<BalanceLayer<P>> {
        retry.validate()?;
        self.retry = retry;
        Ok(self)
    }

    /// The layer's services send hedges as `hedging` says (shared by all of them).
    pub fn hedging(mut self, hedging: Hedging) -> BalanceLayer<P> {
        self.hedging = Some(Arc::new(hedging));
        self
    }
}

impl<S, P: Clone> Layer<S> for BalanceLayer<P> {
    type Service = Balance<S, P>;

    fn layer(&self, service: S) -> Balance<S, P> {
        let mut balance = Balance::new(self.balancer.clone(), service, self.policy.clone());
        balance.retry = self.retry;
        balance.hedging = self.hedging.clone();
        balance
    }
}
