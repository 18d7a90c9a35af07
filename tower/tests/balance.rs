//! `Balance` against in-memory services (the request loop's rules) and against real HTTP
//! servers on loopback through hyper's client (routing, Host, retries, ejection, overload,
//! budgets, hedges).

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use liblb_core::{
    Algorithm, Balancer, Budget, Failure, Hedging, OptionValue, Options, RetryBudget, RetryOn,
    RetryPolicy, Status,
};
use liblb_tower::{Balance, BalanceError, BalanceLayer, HttpPolicy, Policy, Stop};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};

fn balancer(algorithm: Algorithm, ids: &[String], options: &[(&str, u64)]) -> Arc<Balancer> {
    let mut opts = Options::default();
    for (name, value) in options {
        opts.set(name, OptionValue::Int(*value)).unwrap();
    }
    Arc::new(Balancer::new(algorithm, ids.iter().map(String::as_str), opts).unwrap())
}

fn in_flight(b: &Balancer) -> usize {
    b.stats().iter().map(|s| s.in_flight).sum()
}

/// What one test server does with every request.
#[derive(Clone, Copy)]
enum Behaviour {
    Answer,
    Status(u16, Option<u64>),
    Slow(Duration),
    /// Answers with this header (an ORCA load report) and this status.
    Report(&'static str, &'static str, u16),
}

/// A server on 127.0.0.1 (an OS-picked port) answering "<index> <Host>" as `behaviour` says;
/// its address and a count of the requests it got.
async fn server(index: usize, behaviour: Behaviour) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let hits = counted.clone();
            let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                hits.fetch_add(1, Ordering::Relaxed);
                async move {
                    let host = request
                        .headers()
                        .get(http::header::HOST)
                        .map_or("", |h| h.to_str().unwrap())
                        .to_string();
                    let mut response = Response::builder();
                    match behaviour {
                        Behaviour::Answer => {}
                        Behaviour::Status(status, after) => {
                            response = response.status(status);
                            if let Some(after) = after {
                                response = response.header(http::header::RETRY_AFTER, after);
                            }
                        }
                        Behaviour::Slow(delay) => tokio::time::sleep(delay).await,
                        Behaviour::Report(name, value, status) => {
                            response = response.status(status).header(name, value);
                        }
                    }
                    let body = Full::new(Bytes::from(format!("{index} {host}")));
                    Ok::<_, Infallible>(response.body(body).unwrap())
                }
            });
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new();
                let _ = connection
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
            });
        }
    });
    (address, hits)
}

/// A port that refuses connections: bound, then closed.
async fn refused() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().to_string()
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends `request` once `service` is ready; its answer (the test fails on an error).
async fn ask<S, R>(service: &mut S, request: R) -> S::Response
where
    S: Service<R>,
    S::Error: std::fmt::Debug,
{
    service.ready().await.unwrap().call(request).await.unwrap()
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://api.internal{path}"))
        .body(Full::default())
        .unwrap()
}

async fn text(response: Response<Incoming>) -> (StatusCode, String) {
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn requests_follow_the_balancers_own_picks_and_keep_their_host() {
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(server(i, Behaviour::Answer).await.0);
    }
    let b = balancer(Algorithm::RoundRobin, &ids, &[("seed", 1)]);
    let twin = balancer(Algorithm::RoundRobin, &ids, &[("seed", 1)]);
    let mut service = BalanceLayer::new(b.clone(), HttpPolicy::new()).layer(client());
    for _ in 0..9 {
        let expected = twin.pick(None).unwrap().id().to_string();
        let response = ask(&mut service, get("/x")).await;
        let (status, body) = text(response).await;
        let index = ids.iter().position(|id| *id == expected).unwrap();
        assert_eq!(
            (status, body),
            (StatusCode::OK, format!("{index} api.internal"))
        );
    }
    assert_eq!(in_flight(&b), 0);
    assert!(b.stats().iter().all(|s| s.requests == 3 && s.failures == 0));
}

#[tokio::test]
async fn failures_are_retried_on_distinct_nodes_and_counted_by_kind() {
    let (ok, ok_hits) = server(0, Behaviour::Answer).await;
    let (broken, broken_hits) = server(1, Behaviour::Status(500, None)).await;
    let closed = refused().await;
    let ids = vec![broken.clone(), closed.clone(), ok.clone()];
    let b = balancer(Algorithm::Ring, &ids, &[("seed", 3)]);
    let policy = HttpPolicy::new().key(|head| Some(head.uri.path().as_bytes().to_vec()));
    let mut service = Balance::new(b.clone(), client(), policy);
    // A path whose retry order starts at the two failing nodes.
    let path = (0..1000)
        .map(|i| format!("/{i}"))
        .find(|path| {
            let order = b.attempts(Some(path.as_bytes()), 3).unwrap();
            order.ids().last() == Some(ok.as_str())
        })
        .unwrap();
    let response = ask(&mut service, get(&path)).await;
    assert_eq!(
        text(response).await,
        (StatusCode::OK, "0 api.internal".into())
    );
    assert_eq!(
        (
            ok_hits.load(Ordering::Relaxed),
            broken_hits.load(Ordering::Relaxed)
        ),
        (1, 1)
    );
    let stats = b.stats();
    let of = |id: &str| stats.iter().find(|s| *s.id == *id).unwrap();
    // Every attempt finished once: the 500 and the refused connection as errors.
    assert_eq!((of(&broken).requests, of(&broken).failures), (1, 1));
    assert_eq!((of(&closed).requests, of(&closed).failures), (1, 1));
    assert_eq!((of(&ok).requests, of(&ok).failures), (1, 0));
    assert_eq!(in_flight(&b), 0);
}

#[tokio::test]
async fn an_overloaded_node_gets_nothing_until_its_retry_after_passes() {
    let (ok, _) = server(0, Behaviour::Answer).await;
    let (busy, busy_hits) = server(1, Behaviour::Status(429, Some(30))).await;
    let b = balancer(
        Algorithm::RoundRobin,
        &[busy.clone(), ok.clone()],
        &[("seed", 3)],
    );
    // Overloaded answers not retried here (a retry would wait out the Retry-After first):
    // the 429 itself comes back.
    let retry_on = RetryOn::NONE.with(liblb_core::FailureKind::Error);
    let mut service = Balance::new(b.clone(), client(), HttpPolicy::new()).retry_on(retry_on);
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let response = ask(&mut service, get("/")).await;
        statuses.push(text(response).await.0);
    }
    assert_eq!(busy_hits.load(Ordering::Relaxed), 1);
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count(),
        1
    );
    let stats = b.stats();
    let busy_stats = stats.iter().find(|s| *s.id == *busy).unwrap();
    assert!(
        matches!(busy_stats.status, Status::Overloaded { .. }),
        "{:?}",
        busy_stats.status
    );
    assert_eq!((busy_stats.requests, busy_stats.failures), (1, 1));
}

#[tokio::test]
async fn a_failing_node_is_ejected_and_the_last_answer_is_returned_when_retries_run_out() {
    let (broken, _) = server(0, Behaviour::Status(503, None)).await;
    let (ok, _) = server(1, Behaviour::Answer).await;
    let b = balancer(
        Algorithm::RoundRobin,
        &[broken.clone(), ok.clone()],
        &[("seed", 5)],
    );
    // One attempt: the 503 itself comes back (as Envoy returns the last upstream answer).
    let mut once = Balance::new(b.clone(), client(), HttpPolicy::new())
        .max_attempts(1)
        .unwrap();
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let response = ask(&mut once, get("/")).await;
        statuses.push(text(response).await.0);
    }
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::SERVICE_UNAVAILABLE]);
    // A 503 without Retry-After is the node failing: it extends the failure streak (as a
    // refused connection does), and the node is ejected.
    let closed = refused().await;
    let b = balancer(
        Algorithm::RoundRobin,
        &[broken.clone(), closed.clone(), ok.clone()],
        &[
            ("seed", 5),
            ("consecutive_failures", 2),
            ("max_ejection_percent", 100),
        ],
    );
    let mut service = Balance::new(b.clone(), client(), HttpPolicy::new());
    for _ in 0..6 {
        let response = ask(&mut service, get("/")).await;
        assert_eq!(text(response).await.0, StatusCode::OK);
    }
    let stats = b.stats();
    let broken_stats = stats.iter().find(|s| *s.id == *broken).unwrap();
    assert!(matches!(broken_stats.status, Status::Ejected { .. }));
    // (With both failing nodes ejected the balancer may enter panic mode and try them again,
    // so their failure counts are not pinned here.)
    assert!(broken_stats.failures >= 2);
    let closed_stats = stats.iter().find(|s| *s.id == *closed).unwrap();
    assert!(
        matches!(closed_stats.status, Status::Ejected { .. }),
        "{:?}",
        closed_stats.status
    );
    assert!(closed_stats.failures >= 2);
}

#[tokio::test]
async fn a_budget_caps_retries_and_non_idempotent_requests_are_sent_once() {
    let (broken, hits) = server(0, Behaviour::Status(500, None)).await;
    let (broken2, hits2) = server(1, Behaviour::Status(500, None)).await;
    let b = balancer(
        Algorithm::RoundRobin,
        &[broken, broken2],
        &[("consecutive_failures", 0)],
    );
    // No reserve and no share: no retry at all.
    let none = RetryBudget::new(Duration::from_secs(1), 0, 0.0, b.clock().now_ns()).unwrap();
    b.set_budget(Some(Budget::Retry(Arc::new(none))));
    let mut service = Balance::new(b.clone(), client(), HttpPolicy::new());
    let response = ask(&mut service, get("/")).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        hits.load(Ordering::Relaxed) + hits2.load(Ordering::Relaxed),
        1
    );
    // Without the budget a GET is retried on the other node; a POST is not.
    b.set_budget(None);
    let response = ask(&mut service, get("/")).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        hits.load(Ordering::Relaxed) + hits2.load(Ordering::Relaxed),
        3
    );
    let post = Request::post("http://api.internal/")
        .body(Full::from("x"))
        .unwrap();
    let response = ask(&mut service, post).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        hits.load(Ordering::Relaxed) + hits2.load(Ordering::Relaxed),
        4
    );
    assert_eq!(in_flight(&b), 0);
}

#[tokio::test]
async fn keyed_requests_go_where_the_key_says() {
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(server(i, Behaviour::Answer).await.0);
    }
    let b = balancer(Algorithm::Maglev, &ids, &[]);
    let policy =
        HttpPolicy::new().key(|head| head.headers.get("x-user").map(|v| v.as_bytes().to_vec()));
    let mut service = BalanceLayer::new(b.clone(), policy).layer(client());
    for user in ["alice", "bob", "carol", "dave", "erin"] {
        let expected = b.pick(Some(user.as_bytes())).unwrap().id().to_string();
        let index = ids.iter().position(|id| *id == expected).unwrap();
        for _ in 0..2 {
            let request = Request::get("http://api.internal/")
                .header("x-user", user)
                .body(Full::default())
                .unwrap();
            let response = ask(&mut service, request).await;
            assert_eq!(text(response).await.1, format!("{index} api.internal"));
        }
    }
    // A keyed algorithm without a key is the balancer's error.
    let error = service
        .ready()
        .await
        .unwrap()
        .call(get("/"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            BalanceError::Balancer(liblb_core::Error::KeyRequired(_))
        ),
        "{error}"
    );
}

#[tokio::test]
async fn a_hedge_answers_for_a_slow_node_whose_attempt_is_cancelled_uncounted() {
    let (slow, slow_hits) = server(0, Behaviour::Slow(Duration::from_secs(5))).await;
    let (fast, _) = server(1, Behaviour::Answer).await;
    let b = balancer(
        Algorithm::RoundRobin,
        &[slow.clone(), fast.clone()],
        &[("seed", 1)],
    );
    let mut service = Balance::new(b.clone(), client(), HttpPolicy::new())
        .hedging(Hedging::after(Duration::from_millis(20)));
    for _ in 0..2 {
        let response = ask(&mut service, get("/")).await;
        assert_eq!(
            text(response).await,
            (StatusCode::OK, "1 api.internal".into())
        );
    }
    // The slow node was tried (round robin starts there once), its attempt lost and was
    // cancelled: nothing counted against it, nothing left in flight.
    assert!(slow_hits.load(Ordering::Relaxed) >= 1);
    let stats = b.stats();
    let slow_stats = stats.iter().find(|s| *s.id == *slow).unwrap();
    assert_eq!(
        (
            slow_stats.requests,
            slow_stats.failures,
            slow_stats.in_flight
        ),
        (0, 0, 0)
    );
    assert_eq!(in_flight(&b), 0);
}

/// A policy for plain strings over in-memory services: "fail" answers are errors.
#[derive(Clone)]
struct Echo;

impl Policy<String, String, Infallible> for Echo {
    fn route(&self, request: String, node: &str) -> Result<String, String> {
        if node == "bad id" {
            return Err(format!("cannot route to {node:?}"));
        }
        Ok(format!("{request}@{node}"))
    }
    fn replay(&self, request: &String) -> Option<String> {
        (!request.starts_with("once")).then(|| request.clone())
    }
    fn classify(&self, result: &Result<String, Infallible>) -> Option<Failure> {
        match result {
            Ok(answer) => answer.starts_with("fail").then(Failure::error),
            Err(never) => match *never {},
        }
    }
}

#[tokio::test]
async fn per_node_services_are_made_once_and_dropped_with_their_node() {
    let made = Arc::new(Mutex::new(Vec::new()));
    let log = made.clone();
    let ids: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let b = balancer(Algorithm::RoundRobin, &ids, &[]);
    let mut service = Balance::per_node(
        b.clone(),
        move |node: &str| {
            log.lock().unwrap().push(node.to_string());
            let node = node.to_string();
            tower::service_fn(move |request: String| {
                let answer = if node == "b" {
                    format!("fail {request}")
                } else {
                    request
                };
                async move { Ok::<_, Infallible>(answer) }
            })
        },
        Echo,
    );
    let mut answers = Vec::new();
    for _ in 0..6 {
        answers.push(ask(&mut service, "hi".to_string()).await);
    }
    assert!(
        answers.iter().all(|a| a == "hi@a" || a == "hi@c"),
        "{answers:?}"
    );
    assert_eq!(made.lock().unwrap().len(), 3, "one service per node");
    // A request that cannot be replayed gets one attempt: b's failure is the answer.
    let mut once = Vec::new();
    for _ in 0..3 {
        once.push(ask(&mut service, "once".to_string()).await);
    }
    assert_eq!(
        once.iter().filter(|a| a.starts_with("fail")).count(),
        1,
        "{once:?}"
    );
    b.remove("c").unwrap();
    b.add("d").unwrap();
    for _ in 0..4 {
        ask(&mut service, "hi".to_string()).await;
    }
    assert_eq!(*made.lock().unwrap(), ["a", "b", "c", "d"]);
    // Errors of the route: an error on that node, retried elsewhere.
    b.add("bad id").unwrap();
    let b2 = b.clone();
    let retry_on = RetryOn::NONE.with(liblb_core::FailureKind::Error);
    let mut strict = Balance::per_node(
        b2,
        |_: &str| tower::service_fn(|r: String| async move { Ok::<_, Infallible>(r) }),
        Echo,
    )
    .retry_on(retry_on)
    .max_attempts(5)
    .unwrap();
    for _ in 0..5 {
        let answer = ask(&mut strict, "x".to_string()).await;
        assert!(!answer.contains("bad id"));
    }
    assert_eq!(in_flight(&b), 0);
    let error: BalanceError<Infallible> = BalanceError::GaveUp(Stop::Budget);
    assert_eq!(error.to_string(), "request gave up (budget)");
}

#[tokio::test]
async fn when_retries_run_out_the_last_attempts_answer_comes_back() {
    let (first, _) = server(0, Behaviour::Status(500, None)).await;
    let (second, _) = server(1, Behaviour::Status(502, None)).await;
    let b = balancer(
        Algorithm::Ring,
        &[first.clone(), second.clone()],
        &[("seed", 2)],
    );
    let policy = HttpPolicy::new().key(|head| Some(head.uri.path().as_bytes().to_vec()));
    let mut service = Balance::new(b.clone(), client(), policy)
        .max_attempts(2)
        .unwrap();
    for path in ["/a", "/b", "/c", "/d"] {
        let order = b.attempts(Some(path.as_bytes()), 2).unwrap();
        let last: Vec<&str> = order.ids().collect();
        let response = ask(&mut service, get(path)).await;
        let (status, body) = text(response).await;
        let expected = if last[1] == first {
            (500, "0")
        } else {
            (502, "1")
        };
        assert_eq!((status.as_u16(), &body[..1]), expected, "{path}: {last:?}");
    }
    assert_eq!(in_flight(&b), 0);
}

/// The servers' ORCA reports reach the balancer through `HttpPolicy::load`: `client_side_wrr`
/// (no blackout, weights rebuilt every 100 ms) sends the node reporting 10% utilisation far
/// more than the one reporting 90% at the same rate (A58: weight = qps / utilisation, 9:1),
/// whether the report comes in `endpoint-load-metrics` (TEXT) or in `-bin`, on a success or on
/// a 500; a report that does not parse changes nothing and the answer still comes back.
#[tokio::test]
async fn load_reports_in_the_answers_weigh_the_nodes() {
    let light = "TEXT application_utilization=0.1, rps_fractional=100";
    // The same report the BIN way: utilisation 0.9, 100 rps.
    let heavy = liblb_core::LoadReport {
        application_utilization: 0.9,
        rps_fractional: 100.0,
        ..Default::default()
    };
    let heavy = heavy.to_header(liblb_core::HeaderForm::Bin).unwrap();
    let heavy: &'static str = Box::leak(heavy.strip_prefix("BIN ").unwrap().into());
    let (a, a_hits) = server(0, Behaviour::Report("endpoint-load-metrics", light, 200)).await;
    let (b, b_hits) = server(
        1,
        Behaviour::Report("endpoint-load-metrics-bin", heavy, 200),
    )
    .await;
    let (c, c_hits) = server(2, Behaviour::Report("endpoint-load-metrics", light, 500)).await;
    let (d, _) = server(
        3,
        Behaviour::Report("endpoint-load-metrics", "TEXT rps=", 200),
    )
    .await;
    let ids = [a, b, c, d];
    let balancer = balancer(
        Algorithm::ClientSideWrr,
        &ids,
        &[
            ("blackout_period_ms", 0),
            ("weight_update_period_ms", 100),
            // Node c answers 500 every time: kept in (no ejection) to weigh its reports.
            ("consecutive_failures", 0),
        ],
    );
    let mut service = BalanceLayer::new(balancer.clone(), HttpPolicy::new())
        .retry_policy(RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        })
        .unwrap()
        .layer(client());
    for _ in 0..20 {
        let _ = service.ready().await.unwrap().call(get("/")).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let hits = || [&a_hits, &b_hits, &c_hits].map(|h| h.load(Ordering::Relaxed));
    let before = hits();
    let mut answered = 0;
    for _ in 0..80 {
        match service.ready().await.unwrap().call(get("/")).await {
            Ok(response) => {
                let (status, body) = text(response).await;
                assert!(status == 200 || status == 500, "{status} {body}");
                answered += 1;
            }
            Err(error) => panic!("{error}"),
        }
    }
    assert_eq!(answered, 80, "a bad report never fails the answer");
    let after = hits();
    let [a_now, b_now, c_now] = [0, 1, 2].map(|i| after[i] - before[i]);
    assert!(a_now >= 3 * b_now.max(1), "light {a_now} heavy {b_now}");
    // The 500s' reports count too: node c (reporting 10%) weighs like a, not like b.
    assert!(
        c_now >= 3 * b_now.max(1),
        "light on 500s {c_now} heavy {b_now}"
    );
    assert_eq!(in_flight(&balancer), 0);
}
