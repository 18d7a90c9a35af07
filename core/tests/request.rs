//! The request loop (issue 21, deliverable 4): attempts on distinct nodes in retry order, the
//! retry policy, budgets, backoff, retry-after and the deadline.

mod common;

use common::{balancer, ms, secs};
use liblb_core::{
    AdaptiveThrottle, Algorithm, Balancer, Budget, Clock, Decision, Error, Failure, FailureKind,
    Hedging, Outcome, RetryBudget, RetryOn, RetryPolicy, RetryThrottle, Status, Stop,
};
use std::sync::Arc;
use std::time::Duration;

const OK: Outcome = Outcome::Success(Duration::from_millis(2));
const ERR: Outcome = Outcome::Failure(Duration::from_millis(2));

fn in_flight(b: &Balancer) -> usize {
    b.stats().iter().map(|s| s.in_flight).sum()
}

/// Runs a request whose attempts end with `outcomes` in turn (the last repeated), returning
/// the nodes tried, the decisions, and the request.
fn run(
    b: &Balancer,
    key: Option<&[u8]>,
    policy: RetryPolicy,
    budget: Option<Budget>,
    outcomes: &[Outcome],
) -> (Vec<String>, Vec<Decision>, Option<Stop>) {
    let mut request = b.request(key).with_policy(policy).unwrap();
    if let Some(budget) = budget {
        request = request.with_budget(budget);
    }
    let (mut tried, mut decisions) = (Vec::new(), Vec::new());
    while let Some(lease) = request.attempt().unwrap() {
        tried.push(lease.id().to_string());
        let outcome = outcomes[(tried.len() - 1).min(outcomes.len() - 1)];
        let decision = request.finish(lease, outcome);
        decisions.push(decision);
        if !matches!(decision, Decision::Retry(_)) {
            break;
        }
    }
    assert!(request.is_over());
    assert_eq!(request.attempt().unwrap().map(|l| l.id().to_string()), None);
    (tried, decisions, request.stopped())
}

/// A request of one successful attempt is one lease: counted, released, done.
#[test]
fn one_attempt_is_one_lease() {
    let (b, _) = balancer(Algorithm::RoundRobin, 3, &[]);
    let (tried, decisions, stop) = run(&b, None, RetryPolicy::default(), None, &[OK]);
    assert_eq!(
        (tried, decisions, stop),
        (vec!["n0".to_string()], vec![Decision::Done], None)
    );
    let stats = b.stats();
    assert_eq!((stats[0].requests, in_flight(&b)), (1, 0));
}

/// Retries go to distinct nodes, in the key's retry order (`attempts`), and stop at
/// `max_attempts`; each failure is counted on its node.
#[test]
fn retries_follow_the_keys_retry_order_on_distinct_nodes() {
    for algorithm in [
        Algorithm::Ring,
        Algorithm::Maglev,
        Algorithm::Rendezvous,
        Algorithm::Ketama,
    ] {
        let (b, _) = balancer(algorithm, 6, &[("consecutive_failures", "0")]);
        let policy = RetryPolicy {
            max_attempts: 4,
            ..RetryPolicy::default()
        };
        let (tried, decisions, stop) = run(&b, Some(b"user-42"), policy, None, &[ERR]);
        let order: Vec<String> = b
            .attempts(Some(b"user-42"), 4)
            .unwrap()
            .ids()
            .map(String::from)
            .collect();
        assert_eq!(tried, order, "{algorithm}");
        assert_eq!(decisions.len(), 4);
        assert_eq!(decisions[3], Decision::Stop(Stop::MaxAttempts));
        assert_eq!(stop, Some(Stop::MaxAttempts));
        let failures: u64 = b.stats().iter().map(|s| s.failures).sum();
        assert_eq!((failures, in_flight(&b)), (4, 0));
    }
    // Unkeyed: distinct nodes too, and a success ends it.
    let (b, _) = balancer(Algorithm::Random, 5, &[]);
    for _ in 0..50 {
        let (tried, decisions, _) = run(&b, None, RetryPolicy::default(), None, &[ERR, ERR, OK]);
        assert_eq!(decisions.last(), Some(&Decision::Done));
        let mut distinct = tried.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3, "{tried:?}");
    }
}

#[test]
fn only_the_kinds_in_retry_on_are_retried() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let policy = RetryPolicy {
        retry_on: RetryOn::NONE.with(FailureKind::Timeout),
        ..RetryPolicy::default()
    };
    let (tried, _, stop) = run(&b, None, policy, None, &[ERR]);
    assert_eq!((tried.len(), stop), (1, Some(Stop::NotRetryable)));
    let timeout = Failure::timeout().into();
    let (tried, _, stop) = run(&b, None, policy, None, &[timeout]);
    assert_eq!((tried.len(), stop), (3, Some(Stop::MaxAttempts)));
}

/// Backoff waits are Envoy's: retry n waits less than min(25 ms · 2^(n−1), 250 ms).
#[test]
fn backoff_grows_and_is_jittered_below_its_interval() {
    let (b, _) = balancer(Algorithm::RoundRobin, 8, &[("consecutive_failures", "0")]);
    let policy = RetryPolicy {
        max_attempts: 7,
        ..RetryPolicy::default()
    };
    let mut seen = [Duration::ZERO; 6];
    for _ in 0..200 {
        let (_, decisions, _) = run(&b, None, policy, None, &[ERR]);
        for (n, decision) in decisions.iter().take(6).enumerate() {
            let Decision::Retry(delay) = *decision else {
                panic!("{decision:?}")
            };
            let interval = ms((25 << n).min(250));
            assert!(delay < interval, "retry {}: {delay:?}", n + 1);
            seen[n] = seen[n].max(delay);
        }
    }
    // Jittered over the whole interval: the largest of 200 waits is in its top fifth.
    for (n, top) in seen.iter().enumerate() {
        let interval = ms((25 << n).min(250));
        assert!(*top >= interval * 4 / 5, "retry {}: at most {top:?}", n + 1);
    }
}

/// An overloaded answer's retry-after is the delay (capped by `max_retry_after_ms`), and its
/// node is paused meanwhile, so the retry goes elsewhere.
#[test]
fn retry_after_is_the_delay_and_pauses_the_node() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[("max_retry_after_ms", "2000")]);
    let busy: Outcome = Failure::overloaded().retry_after(ms(700)).into();
    let mut request = b.request(None::<&[u8]>);
    let lease = request.attempt().unwrap().unwrap();
    let first = lease.id().to_string();
    assert_eq!(request.finish(lease, busy), Decision::Retry(ms(700)));
    assert_eq!(request.backoff(), ms(700));
    let status = b
        .stats()
        .into_iter()
        .find(|s| s.id == first)
        .unwrap()
        .status;
    assert!(matches!(status, Status::Overloaded { .. }), "{status:?}");
    let lease = request.attempt().unwrap().unwrap();
    assert_ne!(lease.id(), first);
    let long: Outcome = Failure::overloaded().retry_after(secs(60)).into();
    assert_eq!(request.finish(lease, long), Decision::Retry(secs(2)));
}

/// The deadline counts from the first attempt: a retry whose delay would reach it is not made.
#[test]
fn no_retry_reaches_the_deadline() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 5, &[]);
    let policy = RetryPolicy {
        deadline: Some(ms(100)),
        ..RetryPolicy::default()
    };
    let mut request = b.request(None::<&[u8]>).with_policy(policy).unwrap();
    let lease = request.attempt().unwrap().unwrap();
    clock.advance(ms(60));
    assert_eq!(request.remaining(), Some(ms(40)));
    let busy = |after| Failure::overloaded().retry_after(ms(after)).into();
    assert_eq!(request.finish(lease, busy(30)), Decision::Retry(ms(30)));
    clock.advance(ms(30));
    let lease = request.attempt().unwrap().unwrap();
    assert_eq!(
        request.finish(lease, busy(10)),
        Decision::Stop(Stop::Deadline)
    );
    assert_eq!(request.stopped(), Some(Stop::Deadline));
}

/// Issue 21's retry-storm bar, at one instant: 1,000 requests whose every attempt fails retry
/// 2,000 times without a budget; the default budget allows 20% of the requests plus its
/// reserve (10 per second × 10 s), tower's `TpsBudget` arithmetic.
#[test]
fn the_default_budget_caps_retries_at_a_fifth_plus_the_reserve() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 10, &[("consecutive_failures", "0")]);
    let retries = |budget: Option<Budget>| {
        let mut retries = 0;
        for _ in 0..1000 {
            let (tried, _, _) = run(&b, None, RetryPolicy::default(), budget.clone(), &[ERR]);
            retries += tried.len() - 1;
        }
        retries
    };
    assert_eq!(retries(None), 2000);
    let budget = Arc::new(
        RetryBudget::new(
            RetryBudget::DEFAULT_TTL,
            RetryBudget::DEFAULT_MIN_PER_SEC,
            RetryBudget::DEFAULT_RETRY_PERCENT,
            clock.now_ns(),
        )
        .unwrap(),
    );
    let allowed = retries(Some(Budget::Retry(budget.clone())));
    assert_eq!(allowed, 200 + 100);
    assert_eq!(budget.available(clock.now_ns()), 0);
}

/// gRPC A6 throttling through the request: Throttle(4, 0.8), threshold 2. The first failure
/// leaves 3 tokens (retry), the second 2 (no retry: at the threshold).
#[test]
fn the_grpc_throttle_stops_retries_at_half_its_tokens() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let throttle = Arc::new(RetryThrottle::new(4, 0.8).unwrap());
    let budget = Some(Budget::Throttle(throttle.clone()));
    let (tried, _, stop) = run(&b, None, RetryPolicy::default(), budget.clone(), &[ERR]);
    assert_eq!((tried.len(), stop), (2, Some(Stop::Budget)));
    assert_eq!(throttle.tokens(), 2.0);
    // Non-retryable failures do not count; successes add 0.8.
    let policy = RetryPolicy {
        retry_on: RetryOn::NONE,
        ..RetryPolicy::default()
    };
    run(&b, None, policy, budget.clone(), &[ERR]);
    assert_eq!(throttle.tokens(), 2.0);
    run(&b, None, RetryPolicy::default(), budget, &[OK]);
    assert!((throttle.tokens() - 2.8).abs() < 1e-9);
}

/// The adaptive throttle rejects a request before any attempt once the backends have
/// rejected enough: no lease, nothing counted.
#[test]
fn the_adaptive_throttle_rejects_before_the_first_attempt() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 5, &[("max_retry_after_ms", "0")]);
    let throttle = Arc::new(AdaptiveThrottle::new(2.0, secs(120), clock.now_ns()).unwrap());
    let budget = Some(Budget::Adaptive(throttle.clone()));
    let busy: Outcome = Failure::overloaded().into();
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let mut throttled = 0;
    for _ in 0..500 {
        let (tried, _, stop) = run(&b, None, policy, budget.clone(), &[busy]);
        if stop == Some(Stop::Throttled) {
            assert!(tried.is_empty());
            throttled += 1;
        }
    }
    // Nothing rejected before the window holds 100 requests (min_requests); after that, no
    // accepts: p(reject) = requests / (requests + 1), nearly 1.
    assert!(
        throttled > 380 && throttled <= 400,
        "{throttled} of 500 throttled"
    );
    assert_eq!(in_flight(&b), 0);
    let requests: u64 = b.stats().iter().map(|s| s.requests).sum();
    assert_eq!(requests, 500 - throttled);
}

#[test]
fn every_node_tried_is_the_end() {
    let (b, _) = balancer(Algorithm::RoundRobin, 2, &[("consecutive_failures", "0")]);
    let policy = RetryPolicy {
        max_attempts: 5,
        ..RetryPolicy::default()
    };
    let (tried, _, stop) = run(&b, None, policy, None, &[ERR]);
    assert_eq!((tried.len(), stop), (2, Some(Stop::NoMoreNodes)));
}

/// Bad input: a keyed algorithm without a key fails the attempt and leaves the request new;
/// a bad policy is refused.
#[test]
fn balancer_errors_leave_the_request_as_it_was() {
    let (b, _) = balancer(Algorithm::Ring, 3, &[]);
    let mut request = b.request(None::<&[u8]>);
    assert_eq!(request.attempt().unwrap_err(), Error::KeyRequired("ring"));
    assert_eq!((request.attempts(), request.is_over()), (0, false));
    let bad = RetryPolicy {
        max_attempts: 0,
        ..RetryPolicy::default()
    };
    assert!(b.request(Some(b"k")).with_policy(bad).is_err());
}

/// Hedging with a fixed delay (gRPC's `hedgingDelay`): the hedge goes to another node, the
/// first answer wins, and the loser, cancelled, counts nothing.
#[test]
fn a_hedge_goes_elsewhere_and_the_loser_counts_nothing() {
    let (b, clock) = balancer(Algorithm::Ring, 5, &[]);
    let hedging = Arc::new(Hedging::after(ms(10)));
    let mut request = b.request(Some(b"k")).with_hedging(hedging);
    assert_eq!(request.hedge_after(), None, "nothing out yet");
    let first = request.attempt().unwrap().unwrap();
    assert_eq!(request.hedge_after(), Some(ms(10)));
    clock.advance(ms(10));
    let hedge = request.hedge().unwrap().unwrap();
    let order: Vec<String> = b
        .attempts(Some(b"k"), 2)
        .unwrap()
        .ids()
        .map(String::from)
        .collect();
    assert_eq!(
        [first.id(), hedge.id()],
        [order[0].as_str(), order[1].as_str()]
    );
    assert_eq!(in_flight(&b), 2);
    clock.advance(ms(3));
    let (loser, winner) = (first.id().to_string(), hedge.id().to_string());
    assert_eq!(request.finish(hedge, OK), Decision::Done);
    assert_eq!(request.winner(), Some(2));
    request.cancel(first);
    assert_eq!(in_flight(&b), 0);
    let requests = |id: &str| b.stats().into_iter().find(|s| s.id == id).unwrap().requests;
    assert_eq!((requests(&winner), requests(&loser)), (1, 0));
    assert_eq!(
        request.hedge().unwrap().map(|l| l.id().to_string()),
        None,
        "over"
    );
}

/// A hedged attempt's failure while another is out: retried at once if attempts remain
/// (gRFC A6), else wait for the one out.
#[test]
fn a_failure_while_a_hedge_is_out_retries_at_once_or_waits() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let hedging = Arc::new(Hedging::after(Duration::ZERO));
    let policy = RetryPolicy {
        max_attempts: 3,
        ..RetryPolicy::default()
    };
    let mut request = b
        .request(None::<&[u8]>)
        .with_policy(policy)
        .unwrap()
        .with_hedging(hedging);
    let a = request.attempt().unwrap().unwrap();
    let h = request.hedge().unwrap().unwrap();
    assert_eq!(request.finish(a, ERR), Decision::Retry(Duration::ZERO));
    let c = request.attempt().unwrap().unwrap();
    assert_eq!(request.attempts(), 3);
    assert_eq!(
        request.hedge().unwrap().map(|l| l.id().to_string()),
        None,
        "attempts used up"
    );
    assert_eq!(request.finish(c, ERR), Decision::Wait);
    assert_eq!(request.finish(h, ERR), Decision::Stop(Stop::MaxAttempts));
    assert_eq!(in_flight(&b), 0);
}

/// Finagle's percentile rule: hedges after the window's p99, and at most 1% more requests.
#[test]
fn percentile_hedging_costs_at_most_its_extra_load() {
    let (b, clock) = balancer(Algorithm::RoundRobin, 10, &[]);
    let hedging = Arc::new(Hedging::percentile(0.01, clock.now_ns()).unwrap());
    // Warm up: 1,000 requests answered in 1..=100 ms.
    for i in 0..1000u64 {
        let mut request = b.request(None::<&[u8]>).with_hedging(hedging.clone());
        let lease = request.attempt().unwrap().unwrap();
        assert_eq!(
            request.hedge_after(),
            None,
            "no percentile before the first refresh"
        );
        request.finish(lease, Outcome::Success(ms(i % 100 + 1)));
    }
    clock.advance(secs(10));
    let mut hedges = 0;
    for _ in 0..5000 {
        let mut request = b.request(None::<&[u8]>).with_hedging(hedging.clone());
        let lease = request.attempt().unwrap().unwrap();
        assert_eq!(request.hedge_after(), Some(ms(99)));
        if let Some(hedge) = request.hedge().unwrap() {
            hedges += 1;
            request.cancel(hedge);
        }
        request.finish(lease, OK);
    }
    // 6,000 deposits at 1% each: 60 hedges.
    assert_eq!(hedges, 60);
}

/// A retry throttle at or below its threshold refuses hedges too (gRFC A6).
#[test]
fn a_throttled_client_sends_no_hedges() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let throttle = Arc::new(RetryThrottle::new(4, 0.8).unwrap());
    // Two failures: 3 tokens (above the threshold of 2), then 2 (at it).
    assert!(throttle.failure());
    assert!(!throttle.failure());
    let mut request = b
        .request(None::<&[u8]>)
        .with_budget(Budget::Throttle(throttle))
        .with_hedging(Arc::new(Hedging::after(Duration::ZERO)));
    let lease = request.attempt().unwrap().unwrap();
    assert_eq!(request.hedge().unwrap().map(|l| l.id().to_string()), None);
    request.finish(lease, OK);
}

/// `call` runs the loop on this thread: the first failure is retried on another node, the
/// success's value comes back.
#[test]
fn call_runs_the_whole_loop() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let mut seen = Vec::new();
    let value = b.request(None::<&[u8]>).call(|lease| {
        seen.push(lease.id().to_string());
        if seen.len() < 2 {
            Err(Failure::timeout())
        } else {
            Ok(lease.id().len())
        }
    });
    assert_eq!(value, Ok(2));
    assert_eq!(seen, ["n0", "n1"]);
    let gave_up = b
        .request(None::<&[u8]>)
        .call(|_| Err::<(), _>(Failure::error()));
    let Err(liblb_core::CallError::GaveUp { stop, last }) = gave_up else {
        panic!("{gave_up:?}")
    };
    assert_eq!(
        (stop, last.map(|f| f.kind)),
        (Stop::MaxAttempts, Some(FailureKind::Error))
    );
    assert_eq!(in_flight(&b), 0);
    let (ring, _) = balancer(Algorithm::Ring, 3, &[]);
    let no_key = ring.request(None::<&[u8]>).call(|_| Ok(()));
    assert_eq!(
        no_key,
        Err(liblb_core::CallError::Balancer(Error::KeyRequired("ring")))
    );
}

/// A future ready after it was polled `polls` times (waking itself meanwhile).
struct After<T> {
    polls: u32,
    value: Option<T>,
}

impl<T: Unpin> std::future::Future for After<T> {
    type Output = T;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        if self.polls == 0 {
            return std::task::Poll::Ready(self.value.take().unwrap());
        }
        self.polls -= 1;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
}

/// `call_async` hedges: the first attempt is slow (ready after 50 polls), the hedge timer
/// fires after 3, the hedge answers after 2 and wins; the slow attempt is dropped, counting
/// nothing.
#[test]
fn call_async_hedges_and_the_first_answer_wins() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let request = b
        .request(None::<&[u8]>)
        .with_hedging(Arc::new(Hedging::after(ms(10))));
    let mut sent = Vec::new();
    let value = block_on(request.call_async(
        |id: String| {
            sent.push(id.clone());
            let polls = if sent.len() == 1 { 50 } else { 2 };
            After {
                polls,
                value: Some(Ok::<String, Failure>(id)),
            }
        },
        |_delay| After {
            polls: 3,
            value: Some(()),
        },
    ));
    assert_eq!(value, Ok("n1".to_string()));
    assert_eq!(sent, ["n0", "n1"]);
    assert_eq!(in_flight(&b), 0);
    let requests = |id: &str| b.stats().into_iter().find(|s| s.id == id).unwrap().requests;
    assert_eq!((requests("n0"), requests("n1")), (0, 1));
}

/// `call_async` retries after the decided delay, through the caller's sleep.
#[test]
fn call_async_retries_through_the_callers_sleep() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let busy = Failure::overloaded().retry_after(ms(40));
    let mut slept = Vec::new();
    let mut tries = 0;
    let value = block_on(b.request(None::<&[u8]>).call_async(
        |id: String| {
            tries += 1;
            let answer = if tries == 1 { Err(busy) } else { Ok(id) };
            After {
                polls: 1,
                value: Some(answer),
            }
        },
        |delay| {
            slept.push(delay);
            After {
                polls: 0,
                value: Some(()),
            }
        },
    ));
    assert_eq!(value, Ok("n1".to_string()));
    assert_eq!(slept, [ms(40)]);
}

/// gRFC A6: a failure that throttles the client while a hedge is out waits for the hedge
/// (which may still win) instead of giving up or sending more.
#[test]
fn a_throttled_failure_with_a_hedge_out_waits_for_it() {
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[]);
    let throttle = Arc::new(RetryThrottle::new(4, 0.8).unwrap());
    assert!(throttle.failure()); // 3 tokens: above the threshold of 2
    let mut request = b
        .request(None::<&[u8]>)
        .with_budget(Budget::Throttle(throttle.clone()))
        .with_hedging(Arc::new(Hedging::after(Duration::ZERO)));
    let first = request.attempt().unwrap().unwrap();
    let hedge = request.hedge().unwrap().unwrap();
    assert_eq!(
        request.finish(first, ERR),
        Decision::Wait,
        "2 tokens: throttled"
    );
    assert_eq!(request.finish(hedge, OK), Decision::Done);
    assert_eq!(request.winner(), Some(2));
}

/// A balancer's budget applies to every request made through it, shared with another
/// balancer; a request's own budget replaces it.
#[test]
fn a_balancers_budget_is_every_requests_default() {
    let (a, clock) = balancer(Algorithm::RoundRobin, 5, &[("consecutive_failures", "0")]);
    let (b, _) = balancer(Algorithm::RoundRobin, 5, &[("consecutive_failures", "0")]);
    // No reserve, one retry per two requests.
    let shared = Arc::new(RetryBudget::new(secs(10), 0, 0.5, clock.now_ns()).unwrap());
    a.set_budget(Some(Budget::Retry(shared.clone())));
    b.set_budget(Some(Budget::Retry(shared.clone())));
    assert!(matches!(a.budget(), Some(Budget::Retry(_))));
    let mut retries = 0;
    for i in 0..20 {
        let lb = if i % 2 == 0 { &a } else { &b };
        let (tried, _, _) = run(lb, None, RetryPolicy::default(), None, &[ERR]);
        retries += tried.len() - 1;
    }
    assert_eq!(retries, 10, "20 deposits at one retry per two");
    a.set_budget(None);
    let (tried, _, _) = run(&a, None, RetryPolicy::default(), None, &[ERR]);
    assert_eq!(tried.len(), 3, "no budget: every attempt");
    let none = Arc::new(RetryBudget::new(secs(10), 0, 0.0, clock.now_ns()).unwrap());
    let (tried, _, stop) = run(
        &b,
        None,
        RetryPolicy::default(),
        Some(Budget::Retry(none)),
        &[ERR],
    );
    assert_eq!(
        (tried.len(), stop),
        (1, Some(Stop::Budget)),
        "the request's own budget"
    );
}

/// One budget shared by two balancers made a while apart: both tell it the same time. (With a
/// clock per balancer, 0 at its creation, the younger one's deposits would land in the budget's
/// past and expire early, or an explicit `now` from one would be read on the other's scale.)
#[test]
fn every_balancer_and_budget_reads_one_clock() {
    use liblb_core::MonotonicClock;
    let older = Balancer::new(Algorithm::RoundRobin, ["a", "b"], Default::default()).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let younger = Balancer::new(Algorithm::RoundRobin, ["c", "d"], Default::default()).unwrap();
    let first = older.clock().now_ns();
    let second = younger.clock().now_ns();
    let third = MonotonicClock::now();
    assert!(
        first <= second && second <= third,
        "{first} {second} {third}"
    );
    assert!(
        first >= 30_000_000,
        "the origin precedes the older balancer: {first}"
    );
}

/// An attempt the caller abandons (cancelled: nothing counted) is not retried on its node.
#[test]
fn a_cancelled_attempt_is_not_retried_on_its_node() {
    for algorithm in [Algorithm::RoundRobin, Algorithm::Random] {
        let b = Balancer::new(algorithm, ["a", "b", "c"], Default::default()).unwrap();
        for _ in 0..20 {
            let mut request = b.request(None::<&[u8]>);
            let first = request.attempt().unwrap().unwrap();
            let abandoned = first.id().to_string();
            request.cancel(first);
            let second = request.attempt().unwrap().unwrap();
            assert_ne!(second.id(), abandoned, "{algorithm:?}");
            assert_eq!(request.finish(second, OK), Decision::Done);
            assert_eq!(in_flight(&b), 0);
            assert_eq!(request.attempts(), 2);
        }
    }
}
