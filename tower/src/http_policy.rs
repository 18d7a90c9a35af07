//! [`HttpPolicy`]: `http::Request`s and `http::Response`s for [`Balance`](crate::Balance).
//!
//! Routing keeps the logical authority in `Host` and sends to the node's `host:port` (a node id
//! `https://host:port` also picks the scheme). Answers map to outcomes as docs/retries.md says,
//! the same in every language's integrations: 429, and 503 with `Retry-After` (RFC 9110
//! 10.2.3: seconds or an HTTP date), are *overloaded*; other 5xx (a 503 without `Retry-After`
//! too: the node is failing) are errors, and so are the inner service's errors; everything else (2xx, 3xx and
//! the caller's own 4xx mistakes) is a success. Only idempotent methods (RFC 9110 9.2.2: GET,
//! HEAD, OPTIONS, TRACE, PUT, DELETE) are replayed unless [`HttpPolicy::retry_any_method`], with
//! their headers and extensions.
//!
//! `Host` is an HTTP/1 header: over HTTP/2 the client sends `:authority`, which comes from the
//! rewritten URI (the node's address), and RFC 9113 (8.3.1) says a `Host` beside it must match.
//! For HTTP/2 backends that route by name, give the logical name in the URI and route with your
//! own [`Policy`].

use crate::Policy;
use core::time::Duration;
use http::header::{HOST, HeaderValue, RETRY_AFTER};
use http::uri::{Authority, Scheme};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use liblb_core::{
    ENDPOINT_LOAD_METRICS, ENDPOINT_LOAD_METRICS_BIN, Failure, LoadReport, parse_orca,
};
use std::sync::Arc;

/// A request's head, as [`HttpPolicy::key`]'s function sees it.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI as the caller wrote it (its authority the logical service's).
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
}

type KeyFn = dyn Fn(Head<'_>) -> Option<Vec<u8>> + Send + Sync;

/// The [`Policy`] for HTTP (see the module docs).
#[derive(Clone, Default)]
pub struct HttpPolicy {
    key: Option<Arc<KeyFn>>,
    any_method: bool,
}

impl core::fmt::Debug for HttpPolicy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HttpPolicy")
            .field("key", &self.key.is_some())
            .field("any_method", &self.any_method)
            .finish()
    }
}

impl HttpPolicy {
    /// No key (for the unkeyed algorithms), idempotent methods retried.
    pub fn new() -> HttpPolicy {
        HttpPolicy::default()
    }

    /// Keys each request by `key(head)` (a header, a cookie, a path segment...), for the
    /// keyed algorithms; `None` from it: no key.
    pub fn key(
        mut self,
        key: impl Fn(Head<'_>) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> HttpPolicy {
        self.key = Some(Arc::new(key));
        self
    }

    /// Replays (retries, hedges) every method, not only the idempotent ones: for services
    /// whose non-idempotent requests are safe to repeat (idempotency keys).
    pub fn retry_any_method(mut self) -> HttpPolicy {
        self.any_method = true;
        self
    }
}

/// Whether RFC 9110 (9.2.2) calls `method` idempotent.
fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// A `Retry-After` value (RFC 9110 10.2.3): delay-seconds, or an HTTP date (the time left
/// until it, zero if past).
pub(crate) fn retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The node's scheme (if its id has one) and authority: `host:port`, `[v6]:port`, or
/// `scheme://` followed by one of those.
fn node_address(node: &str) -> Result<(Option<Scheme>, Authority), String> {
    let (scheme, authority) = match node.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, node),
    };
    let bad =
        || format!("node id {node:?} is not host:port, http://host:port or https://host:port");
    let scheme = match scheme {
        None => None,
        Some("http") => Some(Scheme::HTTP),
        Some("https") => Some(Scheme::HTTPS),
        Some(_) => return Err(bad()),
    };
    let authority = authority.parse::<Authority>().map_err(|_| bad())?;
    if authority.port_u16().is_none() || authority.as_str().contains('@') {
        return Err(bad());
    }
    Ok((scheme, authority))
}

impl<B, ResB, E> Policy<Request<B>, Response<ResB>, E> for HttpPolicy
where
    B: Clone + Send + 'static,
{
    fn key(&self, request: &Request<B>) -> Option<Vec<u8>> {
        let key = self.key.as_ref()?;
        key(Head {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
        })
    }

    fn route(&self, mut request: Request<B>, node: &str) -> Result<Request<B>, String> {
        let (scheme, authority) = node_address(node)?;
        let uri = request.uri().clone();
        if !request.headers().contains_key(HOST) {
            if let Some(logical) = uri.authority() {
                // host[:port] only: a URI's userinfo never goes into Host.
                let host = match logical.port() {
                    Some(port) => format!("{}:{port}", logical.host()),
                    None => logical.host().to_owned(),
                };
                let host = HeaderValue::from_str(&host).map_err(|e| e.to_string())?;
                request.headers_mut().insert(HOST, host);
            }
        }
        let mut parts = uri.into_parts();
        parts.scheme = Some(scheme.or(parts.scheme).unwrap_or(Scheme::HTTP));
        parts.authority = Some(authority);
        if parts.path_and_query.is_none() {
            parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        }
        *request.uri_mut() = Uri::from_parts(parts).map_err(|e| format!("node {node:?}: {e}"))?;
        Ok(request)
    }

    fn replay(&self, request: &Request<B>) -> Option<Request<B>> {
        if !self.any_method && !idempotent(request.method()) {
            return None;
        }
        let mut copy = Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }

    fn load(&self, result: &Result<Response<ResB>, E>) -> Option<LoadReport> {
        load_report(result.as_ref().ok()?.headers())
    }

    fn classify(&self, result: &Result<Response<ResB>, E>) -> Option<Failure> {
        let response = match result {
            Ok(response) => response,
            Err(_) => return Some(Failure::error()),
        };
        let status = response.status();
        let after = response.headers().get(RETRY_AFTER).and_then(retry_after);
        match (status, after) {
            (StatusCode::TOO_MANY_REQUESTS, None) => Some(Failure::overloaded()),
            (StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE, Some(after)) => {
                Some(Failure::overloaded().retry_after(after))
            }
            // A 503 without Retry-After is a node failing (ejectable), as in every binding.
            _ => status.is_server_error().then(Failure::error),
        }
    }
}

/// The ORCA load report in an answer's headers, as Envoy's `orca_parser.cc` reads it:
/// `endpoint-load-metrics-bin` (the base64 of the serialized report, gRPC's name) wins, else
/// `endpoint-load-metrics` (`BIN `, `JSON ` or `TEXT `); `None` when neither is there or the
/// chosen one does not parse (a bad report never fails the answer). HTTP/1 has no trailers
/// for hyper's client to hand over before the body is read, so headers are what is read.
pub(crate) fn load_report(headers: &HeaderMap) -> Option<LoadReport> {
    if let Some(bin) = headers.get(ENDPOINT_LOAD_METRICS_BIN) {
        let mut value = b"BIN ".to_vec();
        value.extend_from_slice(bin.as_bytes());
        return parse_orca(&value).ok();
    }
    parse_orca(headers.get(ENDPOINT_LOAD_METRICS)?.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        let value = |text: &'static str| HeaderValue::from_static(text);
        assert_eq!(retry_after(&value("5")), Some(Duration::from_secs(5)));
        assert_eq!(retry_after(&value(" 120 ")), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after(&value("Sun, 06 Nov 1994 08:49:37 GMT")),
            Some(Duration::ZERO)
        );
        let later = std::time::SystemTime::now() + Duration::from_secs(3600);
        let date = HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap();
        let left = retry_after(&date).unwrap();
        assert!(left > Duration::from_secs(3590) && left <= Duration::from_secs(3600));
        assert_eq!(retry_after(&value("soon")), None);
        assert_eq!(retry_after(&value("-1")), None);
    }

    #[test]
    fn node_ids_are_host_port_with_an_optional_scheme() {
        let (scheme, authority) = node_address("10.0.0.1:8080").unwrap();
        assert_eq!((scheme, authority.as_str()), (None, "10.0.0.1:8080"));
        let (scheme, authority) = node_address("https://[::1]:8443").unwrap();
        assert_eq!(
            (scheme, authority.as_str()),
            (Some(Scheme::HTTPS), "[::1]:8443")
        );
        for bad in [
            "10.0.0.1",
            "a b:80",
            "user@host:80",
            "://x:1",
            "ftp://x:1",
            "http://",
            "",
        ] {
            let error = node_address(bad).unwrap_err();
            assert!(error.contains("is not host:port"), "{bad}: {error}");
        }
    }

    #[test]
    fn routing_keeps_the_logical_host_and_path() {
        let policy = HttpPolicy::new();
        let request = Request::get("http://api.internal/users/42?x=1")
            .body(())
            .unwrap();
        let routed =
            <HttpPolicy as Policy<_, Response<()>, ()>>::route(&policy, request, "10.0.0.2:9000")
                .unwrap();
        assert_eq!(routed.uri(), "http://10.0.0.2:9000/users/42?x=1");
        assert_eq!(routed.headers()[HOST], "api.internal");
        let request = Request::get("http://user:pw@api.internal:8080/")
            .body(())
            .unwrap();
        let routed =
            <HttpPolicy as Policy<_, Response<()>, ()>>::route(&policy, request, "[::1]:9000")
                .unwrap();
        assert_eq!(routed.uri(), "http://[::1]:9000/");
        assert_eq!(routed.headers()[HOST], "api.internal:8080");
        let request = Request::get("/plain").header(HOST, "svc").body(()).unwrap();
        let routed =
            <HttpPolicy as Policy<_, Response<()>, ()>>::route(&policy, request, "https://n:1")
                .unwrap();
        assert_eq!(
            (routed.uri().to_string(), &routed.headers()[HOST]),
            ("https://n:1/plain".into(), &HeaderValue::from_static("svc"))
        );
    }

    #[test]
    fn only_idempotent_methods_are_replayed_unless_told() {
        let post = Request::post("http://s/")
            .header("x-id", "7")
            .body(String::from("b"))
            .unwrap();
        let mut get = Request::get("http://s/").body(String::from("b")).unwrap();
        get.extensions_mut().insert(7u8);
        let replay = |p: &HttpPolicy, r| <HttpPolicy as Policy<_, Response<()>, ()>>::replay(p, r);
        assert!(replay(&HttpPolicy::new(), &post).is_none());
        assert_eq!(
            replay(&HttpPolicy::new(), &get)
                .unwrap()
                .extensions()
                .get::<u8>(),
            Some(&7)
        );
        let copy = replay(&HttpPolicy::new().retry_any_method(), &post).unwrap();
        assert_eq!(
            (copy.method(), copy.uri(), copy.body()),
            (&Method::POST, post.uri(), &String::from("b"))
        );
        assert_eq!(copy.headers()["x-id"], "7");
    }

    /// Envoy's `orca_parser.cc` order: the `-bin` header wins (its bytes are the base64 of the
    /// proto, no prefix), else `endpoint-load-metrics` in any of its forms; a report that
    /// does not parse is no report, and the `-bin` header's failure does not fall back.
    #[test]
    fn load_reports_are_read_from_the_headers_envoy_reads() {
        let report = LoadReport {
            application_utilization: 0.25,
            rps_fractional: 40.0,
            ..LoadReport::default()
        };
        let bin = report.to_header(liblb_core::HeaderForm::Bin).unwrap();
        let bin_value = bin.strip_prefix("BIN ").unwrap().to_owned();
        let text = "TEXT application_utilization=0.5, rps_fractional=10";
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(*name, HeaderValue::from_str(value).unwrap());
            }
            map
        };
        let read = |pairs: &[(&'static str, &str)]| load_report(&headers(pairs));
        assert_eq!(read(&[]), None);
        assert_eq!(
            read(&[(ENDPOINT_LOAD_METRICS_BIN, &bin_value)]),
            Some(report.clone())
        );
        assert_eq!(read(&[(ENDPOINT_LOAD_METRICS, &bin)]), Some(report.clone()));
        let texted = read(&[(ENDPOINT_LOAD_METRICS, text)]).unwrap();
        assert_eq!(
            (texted.application_utilization, texted.rps_fractional),
            (0.5, 10.0)
        );
        let both = [
            (ENDPOINT_LOAD_METRICS, text),
            (ENDPOINT_LOAD_METRICS_BIN, &bin_value),
        ];
        assert_eq!(read(&both), Some(report.clone()));
        assert_eq!(
            read(&[(ENDPOINT_LOAD_METRICS, "TEXT cpu_utilization=")]),
            None
        );
        assert_eq!(read(&[(ENDPOINT_LOAD_METRICS, "XML <load/>")]), None);
        let broken = [
            (ENDPOINT_LOAD_METRICS, text),
            (ENDPOINT_LOAD_METRICS_BIN, "%%%"),
        ];
        assert_eq!(read(&broken), None);
        let policy = HttpPolicy::new();
        let answer = |h: HeaderMap| {
            let mut response = Response::new(());
            *response.headers_mut() = h;
            Ok::<_, ()>(response)
        };
        let load = <HttpPolicy as Policy<Request<()>, Response<()>, ()>>::load;
        assert_eq!(
            load(&policy, &answer(headers(&[(ENDPOINT_LOAD_METRICS, &bin)]))),
            Some(report)
        );
        assert_eq!(load(&policy, &Err(())), None);
    }

    #[test]
    fn answers_map_to_outcomes() {
        let classify = |status: u16, after: Option<&'static str>| {
            let mut response = Response::builder().status(status);
            if let Some(after) = after {
                response = response.header(RETRY_AFTER, after);
            }
            let result: Result<Response<()>, ()> = Ok(response.body(()).unwrap());
            <HttpPolicy as Policy<Request<()>, _, _>>::classify(&HttpPolicy::new(), &result)
        };
        assert_eq!(classify(200, None), None);
        assert_eq!(classify(404, None), None);
        assert_eq!(classify(500, None), Some(Failure::error()));
        assert_eq!(classify(502, Some("3")), Some(Failure::error()));
        assert_eq!(classify(503, None), Some(Failure::error()));
        assert_eq!(classify(429, None), Some(Failure::overloaded()));
        let busy = Failure::overloaded().retry_after(Duration::from_secs(3));
        assert_eq!(classify(429, Some("3")), Some(busy));
        assert_eq!(classify(503, Some("3")), Some(busy));
        let err: Result<Response<()>, ()> = Err(());
        let classify_err = <HttpPolicy as Policy<Request<()>, _, _>>::classify;
        assert_eq!(
            classify_err(&HttpPolicy::new(), &err),
            Some(Failure::error())
        );
    }
}
