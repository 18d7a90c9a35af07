//! A small etcd v3 client over the JSON gateway: range, put, delete, compact, watch, and auth.
//!
//! The gateway maps each gRPC call to `POST /v3/<service>/<call>` with the protobuf message as
//! JSON: `bytes` fields (keys, values) in base64, `int64` fields as decimal strings (it accepts
//! numbers too), fields at their default value left out (a PUT event has no `"type"`, an empty
//! value no `"value"`). A watch is one long response: one `{"result": WatchResponse}` per
//! message, chunked. See <https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/> and the
//! messages in <https://etcd.io/docs/v3.4/dev-guide/api_reference_v3/>.
//!
//! Answers are checked, not trusted: a range whose `header` is not an object with a revision,
//! whose `kvs` is not an array of key-values, or whose `more` is not a boolean is refused as a
//! whole (the watcher then keeps its last good membership). A range is read in pages
//! ([`PAGE_SIZE`] keys, `limit`), each page after the first starting at the last key + `\0` and
//! pinned to the first page's revision (`revision`), so the pages form one snapshot.
//! A watch message is framed by its JSON object's own brackets, at most [`MAX_MESSAGE`] bytes.

use crate::Error;
use crate::http::{Conn, Deadline, Endpoint, Request};
use crate::tls::TlsConfig;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use std::io::{self, BufRead};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a cancelled watch's error starts.
pub(crate) const WATCH_CANCELLED: &str = "the watch was cancelled: ";
/// Keys per range page.
pub(crate) const PAGE_SIZE: usize = 5000;
/// Largest watch message accepted (one JSON object of the stream). etcd's default request cap
/// is 1.5 MiB per write, and a membership's values are tiny: 16 MiB leaves room for big
/// catch-up bursts. A larger message fails the watch, and the watcher reads the prefix again
/// with paged ranges instead.
pub(crate) const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// At most this many keys in one range, over all pages (the balancer's own node limit).
const MAX_KEYS: usize = 1 << 24;

/// A key and its value as stored in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key's bytes.
    pub key: Vec<u8>,
    /// The value's bytes (empty for a delete event).
    pub value: Vec<u8>,
    /// The revision of the key's last change (for a delete event: the delete's revision).
    pub mod_revision: i64,
}

/// The answer to a range: the store's revision when it was read, and the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Range {
    /// The store's revision at the time of the read (`header.revision`).
    pub revision: i64,
    /// The cluster that answered (`header.cluster_id`; 0 when the answer has none).
    pub cluster_id: u64,
    /// The keys in the range, in key order.
    pub kvs: Vec<KeyValue>,
}

/// One change a watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// `true` for a delete, `false` for a put.
    pub deleted: bool,
    /// The key (and for a put, its new value).
    pub kv: KeyValue,
}

/// One message of a watch stream, as far as a watcher cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchMessage {
    /// The watch exists; events from its start revision follow. The header's revision (the
    /// store's current one) and cluster id.
    Created { revision: i64, cluster_id: u64 },
    /// Changes, in revision order.
    Events(Vec<WatchEvent>),
    /// The start revision was compacted away: only a fresh range can catch up.
    Compacted(i64),
    /// The server cancelled the watch for another reason.
    Canceled(String),
    /// A progress notification or another message without events.
    Other,
}

/// An etcd v3 client over the JSON gateway. Requests go to the endpoint that last answered; a
/// connection failure or an HTTP 5xx answer moves on to the next one.
pub struct Client {
    endpoints: Vec<Endpoint>,
    /// Index of the endpoint to try first (Relaxed: only a hint, any value is valid).
    current: AtomicUsize,
    connect_timeout: Duration,
    request_timeout: Duration,
    /// TLS for `https` endpoints: set by [`Client::with_tls`], else the system's CA bundle,
    /// loaded at the first https request (an error if there is none).
    tls: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
    /// etcd user and password, and the token they gave.
    auth: Option<(String, String)>,
    token: Mutex<Option<String>>,
    page_size: usize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls.get().is_some())
            .field("user", &self.auth.as_ref().map(|(user, _)| user))
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `endpoints` (each `http://HOST:PORT` or `https://HOST:PORT`); fails on an
    /// empty list or a URL it cannot use, naming it. `https` endpoints are verified against
    /// the system's CA bundle until [`Client::with_tls`] says otherwise.
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Result<Client, Error> {
        if endpoints.is_empty() {
            return Err(Error::Config("no etcd endpoint given".into()));
        }
        let endpoints: Vec<Endpoint> = endpoints
            .iter()
            .map(|e| Endpoint::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Client {
            endpoints,
            current: AtomicUsize::new(0),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            tls: std::sync::OnceLock::new(),
            auth: None,
            token: Mutex::new(None),
            page_size: PAGE_SIZE,
        })
    }

    /// Sets how long a connection attempt (default 2 s) and a whole unary request, from the
    /// first byte sent to the last byte of the answer (default 10 s), may take.
    pub fn with_timeouts(mut self, connect: Duration, request: Duration) -> Client {
        self.connect_timeout = connect;
        self.request_timeout = request;
        self
    }

    /// Uses `tls` (CA bundle, client certificate) for the `https` endpoints; fails on a file
    /// that cannot be read or used, naming it.
    pub fn with_tls(mut self, tls: &TlsConfig) -> Result<Client, Error> {
        self.tls = std::sync::OnceLock::from(Ok(tls.load()?));
        Ok(self)
    }

    /// Checks now that `https` endpoints have a TLS configuration (the system's CA bundle when
    /// none was given), so a missing bundle is a configuration error, not a retried failure.
    pub(crate) fn check_tls(&self) -> Result<(), Error> {
        match self.endpoints.iter().any(|e| e.https) {
            true => self.tls().map(drop),
            false => Ok(()),
        }
    }

    fn tls(&self) -> Result<&Arc<rustls::ClientConfig>, Error> {
        let loaded = self
            .tls
            .get_or_init(|| TlsConfig::default().load().map_err(|e| e.to_string()));
        loaded.as_ref().map_err(|e| Error::Config(e.clone()))
    }

    /// Authenticates as etcd user `user` (`/v3/auth/authenticate`) before the first request,
    /// and sends the token with every request; an expired or invalid token is renewed once.
    pub fn with_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Client {
        self.auth = Some((user.into(), password.into()));
        self
    }

    /// Sets how many keys one range page asks for (default 5000; at least 1).
    pub fn with_page_size(mut self, keys: usize) -> Client {
        self.page_size = keys.max(1);
        self
    }

    /// Every key starting with `prefix`, read as one snapshot (in pages), and the revision they
    /// were read at.
    pub fn range_prefix(&self, prefix: &[u8]) -> Result<Range, Error> {
        self.range_prefix_with(prefix, &|_| {})
    }

    /// [`Client::range_prefix`], showing `on_connect` each socket as it connects.
    pub(crate) fn range_prefix_with(
        &self,
        prefix: &[u8],
        on_connect: &dyn Fn(&TcpStream),
    ) -> Result<Range, Error> {
        let end = prefix_end(prefix);
        let mut range = Range {
            revision: 0,
            cluster_id: 0,
            kvs: Vec::new(),
        };
        let mut from = prefix.to_vec();
        // The whole paged read is one request as far as time and memory go: every page must
        // arrive within the request timeout counted from the first, and the keys and values
        // of all pages together within MAX_BODY (a server answering "more" one key a page
        // must not keep the watcher reading forever).
        let by = Deadline {
            at: Instant::now() + self.request_timeout,
            why: format!(
                "the paged range did not finish within the request timeout ({:?})",
                self.request_timeout
            ),
        };
        let mut bytes = 0u64;
        loop {
            let mut request = json!({
                "key": B64.encode(&from),
                "range_end": B64.encode(&end),
                "limit": self.page_size.to_string(),
            });
            if range.revision > 0 {
                // Later pages read the first page's revision: one snapshot.
                request["revision"] = json!(range.revision.to_string());
            }
            // The first page's own deadline is the range's.
            let by = (range.revision > 0).then_some(&by);
            let answer = self.call_within("/v3/kv/range", &request, on_connect, by)?;
            let page = range_page(&answer)?;
            if range.revision == 0 {
                (range.revision, range.cluster_id) = (page.revision, page.cluster_id);
            } else if page.cluster_id != range.cluster_id {
                return Err(Error::Protocol(format!(
                    "range pages from two clusters ({:x}, then {:x})",
                    range.cluster_id, page.cluster_id
                )));
            }
            let last = page.kvs.last().map(|kv| kv.key.clone());
            if page.kvs.iter().any(|kv| kv.key < from || kv.key >= end) {
                return Err(Error::Protocol(
                    "range answer holds a key outside the requested range".into(),
                ));
            }
            let page_bytes = page.kvs.iter().map(|kv| kv.key.len() + kv.value.len());
            bytes += page_bytes.sum::<usize>() as u64;
            if bytes > crate::http::MAX_BODY {
                return Err(Error::Protocol(format!(
                    "the range's pages hold more than {} MiB of keys and values, the limit for \
                     one range",
                    crate::http::MAX_BODY >> 20
                )));
            }
            range.kvs.extend(page.kvs);
            if range.kvs.len() > MAX_KEYS {
                return Err(Error::Protocol(format!(
                    "more than {MAX_KEYS} keys under the prefix (the balancer's limit)"
                )));
            }
            if !page.more {
                return Ok(range);
            }
            // The next page starts right after the last key of this one.
            let Some(mut next) = last else {
                return Err(Error::Protocol(
                    "range answer says \"more\" but holds no key".into(),
                ));
            };
            next.push(0);
            from = next;
        }
    }

    /// Sets `key` to `value`; returns the revision of the change.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<i64, Error> {
        let answer = self.call(
            "/v3/kv/put",
            &json!({"key": B64.encode(key), "value": B64.encode(value)}),
            &|_| {},
        )?;
        Ok(header(&answer)?.0)
    }

    /// Deletes `key`; returns the store's revision after the call (unchanged when the key did
    /// not exist).
    pub fn delete(&self, key: &str) -> Result<i64, Error> {
        let answer = self.call(
            "/v3/kv/deleterange",
            &json!({"key": B64.encode(key)}),
            &|_| {},
        )?;
        Ok(header(&answer)?.0)
    }

    /// Compacts the history up to `revision` (physically, so the call returns once it is done).
    pub fn compact(&self, revision: i64) -> Result<(), Error> {
        self.call(
            "/v3/kv/compaction",
            &json!({"revision": revision.to_string(), "physical": true}),
            &|_| {},
        )
        .map(drop)
    }

    /// Any other gateway call: POSTs `body` to `path` (e.g. `/v3/auth/user/add`) and returns
    /// the answer, with this client's TLS, token and timeouts.
    pub fn request(&self, path: &str, body: &Value) -> Result<Value, Error> {
        self.call(path, body, &|_| {})
    }

    /// Opens a watch on every key starting with `prefix`, from `start_revision` on. `idle`
    /// bounds how long the stream may go without a complete message (progress notifications
    /// are requested, so a live server is never silent for long). `on_connect` sees each
    /// socket as it connects.
    pub(crate) fn watch(
        &self,
        prefix: &[u8],
        start_revision: i64,
        idle: Option<Duration>,
        on_connect: &dyn Fn(&TcpStream),
    ) -> Result<WatchStream, Error> {
        let body = json!({"create_request": {
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_end(prefix)),
            "start_revision": start_revision.to_string(),
            "progress_notify": true,
        }})
        .to_string();
        let token = self.token(on_connect)?;
        let mut conn = self.each_endpoint(|e| {
            let mut request =
                self.request_for(e, "/v3/watch", body.as_bytes(), token.as_deref(), None)?;
            // A member cut off from its leader would keep a watch open that never sees a
            // change: etcd cancels it instead, and the watcher moves on.
            request.require_leader = true;
            Conn::post(e, &request, on_connect)
        })?;
        // The answer to the request, "created", is due within the request timeout (from the
        // request's start, as the response head was); the silence window starts after it.
        let why = format!(
            "the watch was not created within the request timeout ({:?})",
            self.request_timeout
        );
        let created_by = (conn.stream().deadline())
            .map_or_else(|| Instant::now() + self.request_timeout, |d| d.at);
        conn.stream().set_deadline(Some(Deadline {
            at: created_by,
            why,
        }));
        Ok(WatchStream {
            messages: Messages::new(conn),
            window: idle.map(|idle| (idle, stall_message(idle))),
            created: false,
        })
    }

    fn request_for<'a>(
        &'a self,
        endpoint: &Endpoint,
        path: &'a str,
        body: &'a [u8],
        token: Option<&'a str>,
        by: Option<&Deadline>,
    ) -> Result<Request<'a>, Error> {
        let tls = match endpoint.https {
            true => Some(self.tls()?),
            false => None,
        };
        Ok(Request {
            path,
            body,
            connect_timeout: self.connect_timeout,
            deadline: Some(match by {
                Some(by) if by.at < Instant::now() + self.request_timeout => by.clone(),
                _ => Deadline {
                    at: Instant::now() + self.request_timeout,
                    why: format!(
                        "no complete answer within the request timeout ({:?})",
                        self.request_timeout
                    ),
                },
            }),
            tls,
            token,
            require_leader: false,
        })
    }

    /// The auth token to send (authenticating first when there is none yet).
    fn token(&self, on_connect: &dyn Fn(&TcpStream)) -> Result<Option<String>, Error> {
        let Some((user, password)) = &self.auth else {
            return Ok(None);
        };
        if let Some(token) = lock(&self.token).clone() {
            return Ok(Some(token));
        }
        let body = json!({"name": user, "password": password}).to_string();
        let answer = self
            .post("/v3/auth/authenticate", &body, None, on_connect, None)
            .map_err(|e| match e {
                Error::Http { endpoint, body, .. } => Error::Auth(format!(
                    "{endpoint}: etcd refused user {user:?}: {}",
                    etcd_message(&body)
                )),
                other => other,
            })?;
        let token = match answer.get("token") {
            Some(Value::String(token)) if !token.is_empty() => token.clone(),
            _ => {
                return Err(Error::Protocol(
                    "the authenticate answer holds no token".into(),
                ));
            }
        };
        *lock(&self.token) = Some(token.clone());
        Ok(Some(token))
    }

    /// Forgets the token when `error` says etcd no longer takes it, so the next request
    /// authenticates again; `true` if it did.
    pub(crate) fn renew_on(&self, error: &str) -> bool {
        // The texts for a token etcd will not take (etcd api/v3rpc/rpctypes/error.go:
        // ErrGRPCInvalidAuthToken, unknown or expired; ErrGRPCAuthOldRevision). Not "permission
        // denied" on a unary call: that is a user without the right, and logging in again
        // cannot help. A watch, though, is cancelled with "permission denied" for an expired
        // token too (v3rpc/watch.go, isWatchPermitted), so a cancelled watch renews it.
        const STALE: [&str; 2] = ["invalid auth token", "revision of auth store is old"];
        let stale = STALE.iter().any(|s| error.contains(s))
            || (error.contains(WATCH_CANCELLED) && error.contains("permission denied"));
        let stale = self.auth.is_some() && stale;
        if stale {
            *lock(&self.token) = None;
        }
        stale
    }

    /// POSTs `body` to `path` with the token (renewed once if etcd refuses it) and returns the
    /// parsed answer.
    fn call(
        &self,
        path: &str,
        body: &Value,
        on_connect: &dyn Fn(&TcpStream),
    ) -> Result<Value, Error> {
        self.call_within(path, body, on_connect, None)
    }

    /// [`Client::call`], finishing by `by` if that comes before the request timeout.
    fn call_within(
        &self,
        path: &str,
        body: &Value,
        on_connect: &dyn Fn(&TcpStream),
        by: Option<&Deadline>,
    ) -> Result<Value, Error> {
        let body = body.to_string();
        let token = self.token(on_connect)?;
        match self.post(path, &body, token.as_deref(), on_connect, by) {
            Err(Error::Http { body: text, .. }) if self.renew_on(&text) => {
                let token = self.token(on_connect)?;
                self.post(path, &body, token.as_deref(), on_connect, by)
            }
            other => other,
        }
    }

    fn post(
        &self,
        path: &str,
        body: &str,
        token: Option<&str>,
        on_connect: &dyn Fn(&TcpStream),
        by: Option<&Deadline>,
    ) -> Result<Value, Error> {
        let (endpoint, bytes) = self.each_endpoint(|e| {
            let request = self.request_for(e, path, body.as_bytes(), token, by)?;
            let conn = Conn::post(e, &request, on_connect)?;
            let bytes = conn
                .read_all()
                .map_err(|source| crate::tls::explain(source, e))?;
            Ok((e.url.clone(), bytes))
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Protocol(format!("{endpoint}{path}: answer is not JSON: {e}")))
    }

    /// Makes the next endpoint the first to try: the current one answered, but cannot serve
    /// (a watch cancelled because its member has no leader).
    pub(crate) fn skip_endpoint(&self) {
        let next = (self.current.load(Ordering::Relaxed) + 1) % self.endpoints.len();
        self.current.store(next, Ordering::Relaxed);
    }

    /// Runs `attempt` on the current endpoint, then on the others in turn while the failure is
    /// a connection failure or an HTTP 5xx answer (a member without a leader answers 503);
    /// remembers the endpoint that answered.
    fn each_endpoint<T>(
        &self,
        mut attempt: impl FnMut(&Endpoint) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let first = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..self.endpoints.len() {
            let at = (first + i) % self.endpoints.len();
            match attempt(&self.endpoints[at]) {
                Ok(answer) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(e @ Error::Io { .. }) => last = Some(e),
                Err(
                    e @ Error::Http {
                        status: 500..=599, ..
                    },
                ) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Config("no etcd endpoint given".into())))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A token slot: nothing a panicking holder could leave half-done.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// etcd's error text from a gateway error body (`{"error": "...", "message": "..."}`), or the
/// body itself.
fn etcd_message(body: &str) -> String {
    let json: Option<Value> = serde_json::from_str(body).ok();
    json.as_ref()
        .and_then(|j| j.get("message").or_else(|| j.get("error")))
        .and_then(Value::as_str)
        .unwrap_or(body)
        .to_string()
}

fn stall_message(idle: Duration) -> String {
    format!("the watch stalled: no complete message within {idle:?} (idle_timeout); reconnecting")
}

/// One page of a range: its header and keys, checked.
struct Page {
    revision: i64,
    cluster_id: u64,
    kvs: Vec<KeyValue>,
    more: bool,
}

fn range_page(answer: &Value) -> Result<Page, Error> {
    let (revision, cluster_id) = header(answer)?;
    let kvs = match answer.get("kvs") {
        None => Vec::new(),
        Some(Value::Array(kvs)) => kvs.iter().map(key_value).collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(Error::Protocol(format!(
                "range answer: \"kvs\" is not an array: {}",
                cut(other)
            )));
        }
    };
    let more = match answer.get("more") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(more)) => *more,
        Some(other) => {
            return Err(Error::Protocol(format!(
                "range answer: \"more\" is not a boolean: {}",
                cut(other)
            )));
        }
    };
    Ok(Page {
        revision,
        cluster_id,
        kvs,
        more,
    })
}

/// A JSON value for an error message, cut after 100 characters.
fn cut(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(100) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

/// An open watch: messages as they arrive.
pub(crate) struct WatchStream {
    messages: Messages<Conn>,
    /// The silence window: each message must be complete within it, counted from the one before.
    window: Option<(Duration, String)>,
    /// Whether the first message, "created", has arrived.
    created: bool,
}

impl WatchStream {
    /// Blocks until the next message; the end of the stream is an error (watches never end).
    pub(crate) fn next(&mut self) -> Result<WatchMessage, Error> {
        let frame = match self.messages.next() {
            Ok(Some(frame)) => frame,
            Ok(None) => return Err(Error::Protocol("the watch stream ended".into())),
            Err(source) => {
                return Err(Error::Io {
                    endpoint: "watch".into(),
                    source,
                });
            }
        };
        let message = parse_message(frame)?;
        if !std::mem::replace(&mut self.created, true)
            && !matches!(message, WatchMessage::Created { .. })
        {
            // etcd answers a watch request with "created" first (or cancels it).
            if !matches!(
                message,
                WatchMessage::Compacted(_) | WatchMessage::Canceled(_)
            ) {
                return Err(Error::Protocol(
                    "the watch's first message is not \"created\"".into(),
                ));
            }
        }
        // The next message has a fresh silence window (none without idle_timeout).
        let deadline = self.window.as_ref().map(|(idle, why)| Deadline {
            at: Instant::now() + *idle,
            why: why.clone(),
        });
        self.messages
            .reader
            .get_mut()
            .stream()
            .set_deadline(deadline);
        Ok(message)
    }
}

/// Parses one watch message (a JSON object of the stream).
pub(crate) fn parse_message(frame: &[u8]) -> Result<WatchMessage, Error> {
    let message: Value = serde_json::from_slice(frame)
        .map_err(|e| Error::Protocol(format!("watch message is not JSON: {e}")))?;
    if let Some(error) = message.get("error") {
        return Err(Error::Etcd(cut(error)));
    }
    let Some(result) = message.get("result") else {
        return Err(Error::Protocol(format!(
            "watch message without result: {}",
            cut(&message)
        )));
    };
    if !result.is_object() {
        return Err(Error::Protocol(format!(
            "watch result is not an object: {}",
            cut(result)
        )));
    }
    let compact = revision(result, "compact_revision")?;
    if compact > 0 {
        return Ok(WatchMessage::Compacted(compact));
    }
    if result.get("canceled") == Some(&Value::Bool(true)) {
        let reason = result.get("cancel_reason").and_then(Value::as_str);
        return Ok(WatchMessage::Canceled(
            reason.unwrap_or("no reason given").into(),
        ));
    }
    if result.get("created") == Some(&Value::Bool(true)) {
        let (revision, cluster_id) = header(result)?;
        return Ok(WatchMessage::Created {
            revision,
            cluster_id,
        });
    }
    match result.get("events") {
        None | Some(Value::Null) => Ok(WatchMessage::Other),
        Some(Value::Array(events)) if events.is_empty() => Ok(WatchMessage::Other),
        Some(Value::Array(events)) => events
            .iter()
            .map(|event| {
                let deleted = match event.get("type") {
                    None | Some(Value::Null) => false,
                    Some(Value::String(t)) if t == "PUT" => false,
                    Some(Value::String(t)) if t == "DELETE" => true,
                    Some(other) => {
                        return Err(Error::Protocol(format!(
                            "watch event of unknown type {}",
                            cut(other)
                        )));
                    }
                };
                let kv = event.get("kv").filter(|kv| kv.is_object()).ok_or_else(|| {
                    Error::Protocol(format!("watch event without kv: {}", cut(event)))
                })?;
                Ok(WatchEvent {
                    deleted,
                    kv: key_value(kv)?,
                })
            })
            .collect::<Result<_, _>>()
            .map(WatchMessage::Events),
        Some(other) => Err(Error::Protocol(format!(
            "watch events are not an array: {}",
            cut(other)
        ))),
    }
}

/// Splits a stream of JSON objects (the watch body) into one object each, without parsing
/// them: it follows strings and brackets only, so a message costs at most [`MAX_MESSAGE`]
/// bytes of buffer whatever it holds, and whether or not the server ends it with a newline.
pub(crate) struct Messages<R> {
    pub(crate) reader: io::BufReader<R>,
    frame: Vec<u8>,
}

impl<R: io::Read> Messages<R> {
    pub(crate) fn new(reader: R) -> Messages<R> {
        Messages {
            reader: io::BufReader::new(reader),
            frame: Vec::new(),
        }
    }

    /// The next message's bytes; `None` at the end of the stream between messages.
    pub(crate) fn next(&mut self) -> io::Result<Option<&[u8]>> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        self.frame.clear();
        let (mut depth, mut in_string, mut escape) = (0usize, false, false);
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                if self.frame.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the watch stream ended inside a message",
                ));
            }
            let (mut start, mut end, mut done) = (None, buf.len(), false);
            for (i, &b) in buf.iter().enumerate() {
                if self.frame.is_empty() && start.is_none() {
                    // Between messages: whitespace, then a message's opening brace.
                    if b.is_ascii_whitespace() {
                        continue;
                    }
                    if b != b'{' {
                        return Err(bad(format!(
                            "watch stream: expected a JSON object, found byte 0x{b:02x}"
                        )));
                    }
                    start = Some(i);
                }
                if in_string {
                    match (escape, b) {
                        (true, _) => escape = false,
                        (false, b'\\') => escape = true,
                        (false, b'"') => in_string = false,
                        _ => {}
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            (end, done) = (i + 1, true);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let start = start.unwrap_or(if self.frame.is_empty() { end } else { 0 });
            if self.frame.len() + (end - start) > MAX_MESSAGE {
                return Err(bad(format!(
                    "watch message larger than {} MiB, the limit for one message",
                    MAX_MESSAGE >> 20
                )));
            }
            self.frame.extend_from_slice(&buf[start..end]);
            self.reader.consume(end);
            if done {
                return Ok(Some(&self.frame));
            }
        }
    }
}

/// Feeds `data` to the response parser as if a server had sent it: the head, a chunked or
/// sized body, the watch messages in it, each parsed; and the body as a range answer. Every
/// outcome is an `Ok` or a specific error, never a panic or an unbounded allocation (the fuzz
/// target `fuzz/fuzz_targets/etcd_response.rs` calls it).
#[cfg(feature = "fuzzing")]
pub fn fuzz_response(data: &[u8]) {
    let Ok(response) = crate::http::Response::new(io::Cursor::new(data)) else {
        return;
    };
    let mut messages = Messages::new(response);
    let mut all = Vec::new();
    while let Ok(Some(frame)) = messages.next() {
        all.extend_from_slice(frame);
        drop(parse_message(frame));
    }
    if let Ok(answer) = serde_json::from_slice::<Value>(&all) {
        drop(range_page(&answer));
    }
}

/// The first key after every key starting with `prefix` (etcd's `range_end` for a prefix):
/// the prefix with its last byte below 0xff incremented and the rest dropped; `\0` (to the end
/// of the keyspace) when every byte is 0xff.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// An answer's header: (revision, cluster id). The header must be an object with a revision
/// above 0 (etcd's revisions start at 1).
fn header(answer: &Value) -> Result<(i64, u64), Error> {
    let header = match answer.get("header") {
        Some(header @ Value::Object(_)) => header,
        Some(other) => {
            return Err(Error::Protocol(format!(
                "the answer's header is not an object: {}",
                cut(other)
            )));
        }
        None => {
            return Err(Error::Protocol(format!(
                "answer without header: {}",
                cut(answer)
            )));
        }
    };
    let revision = revision(header, "revision")?;
    if revision == 0 {
        return Err(Error::Protocol(format!(
            "the answer's header has no revision: {}",
            cut(header)
        )));
    }
    let cluster_id = match header.get("cluster_id") {
        None | Some(Value::Null) => Some(0),
        Some(Value::String(s)) => s.parse().ok(),
        Some(Value::Number(n)) => n.as_u64(),
        Some(_) => None,
    }
    .ok_or_else(|| Error::Protocol(format!("cluster_id is not a uint64: {}", cut(header))))?;
    Ok((revision, cluster_id))
}

/// An `int64` field: a decimal string or a number; absent means 0 (proto3's default).
fn int(object: &Value, field: &str) -> Result<i64, Error> {
    match object.get(field) {
        None | Some(Value::Null) => Some(0),
        Some(Value::String(s)) => s.parse().ok(),
        Some(Value::Number(n)) => n.as_i64(),
        Some(_) => None,
    }
    .ok_or_else(|| Error::Protocol(format!("field {field} is not an int64: {}", cut(object))))
}

/// A revision field: an `int64` in `0..i64::MAX` (absent: 0). etcd's revisions start at 1 and
/// count up by one per change; a negative one, or `i64::MAX` (after which the next revision to
/// watch from would overflow), is not etcd's and is refused.
fn revision(object: &Value, field: &str) -> Result<i64, Error> {
    let revision = int(object, field)?;
    if !(0..i64::MAX).contains(&revision) {
        return Err(Error::Protocol(format!(
            "field {field} is not a revision (0 to 2^63-2): {revision}"
        )));
    }
    Ok(revision)
}

fn bytes(object: &Value, field: &str) -> Result<Vec<u8>, Error> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => B64
            .decode(s)
            .map_err(|e| Error::Protocol(format!("field {field} is not base64: {e}"))),
        Some(other) => Err(Error::Protocol(format!(
            "field {field} is not a string: {}",
            cut(other)
        ))),
    }
}

fn key_value(kv: &Value) -> Result<KeyValue, Error> {
    if !kv.is_object() || kv.get("key").is_none() {
        return Err(Error::Protocol(format!(
            "a key-value is not an object with a key: {}",
            cut(kv)
        )));
    }
    Ok(KeyValue {
        key: bytes(kv, "key")?,
        value: bytes(kv, "value")?,
        mod_revision: revision(kv, "mod_revision")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix() {
        assert_eq!(prefix_end(b"svc/"), b"svc0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
    }

    #[test]
    fn gateway_fields_parse_as_strings_numbers_or_defaults() {
        let kv = json!({"key": "UC9h", "mod_revision": "7"});
        assert_eq!(
            key_value(&kv).unwrap(),
            KeyValue {
                key: b"P/a".to_vec(),
                value: vec![],
                mod_revision: 7
            }
        );
        assert_eq!(int(&json!({"revision": 9}), "revision").unwrap(), 9);
        assert!(int(&json!({"revision": "x"}), "revision").is_err());
        assert!(bytes(&json!({"key": "!!"}), "key").is_err());
        assert!(Client::new::<&str>(&[]).is_err());
    }

    #[test]
    fn watch_messages_are_framed_by_their_brackets() {
        let stream = br#" {"a":"}{[\"]"} {"b":[1,{"c":2}]}
{"d":{}}"#;
        let mut m = Messages::new(&stream[..]);
        let mut frames = Vec::new();
        while let Some(frame) = m.next().unwrap() {
            frames.push(String::from_utf8(frame.to_vec()).unwrap());
        }
        assert_eq!(
            frames,
            [r#"{"a":"}{[\"]"}"#, r#"{"b":[1,{"c":2}]}"#, r#"{"d":{}}"#]
        );
        let e = Messages::new(&b"[1]"[..]).next().unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");
        let e = Messages::new(&b"{\"a\":1"[..]).next().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        // A message that never ends stops at the limit.
        let endless = io::Read::chain(io::Cursor::new(&b"{\"x\":\""[..]), io::repeat(b'a'));
        let e = Messages::new(endless).next().unwrap_err();
        assert!(e.to_string().contains("larger than 16 MiB"), "{e}");
    }

    #[test]
    fn watch_messages_are_checked() {
        let created = br#"{"result":{"header":{"revision":"4","cluster_id":"7"},"created":true}}"#;
        assert_eq!(
            parse_message(created).unwrap(),
            WatchMessage::Created {
                revision: 4,
                cluster_id: 7
            }
        );
        for (message, why) in [
            (
                &br#"{"result":{"created":true}}"#[..],
                "answer without header",
            ),
            (
                br#"{"result":{"header":[1],"created":true}}"#,
                "header is not an object",
            ),
            (br#"{"result":{"events":{}}}"#, "events are not an array"),
            (
                br#"{"result":{"events":[{"type":"X","kv":{"key":"YQ=="}}]}}"#,
                "unknown type",
            ),
            (br#"{"result":{"events":[{"kv":3}]}}"#, "without kv"),
            (br#"{"result":3}"#, "not an object"),
            (br#"{"error":{"message":"x"}}"#, "etcd: "),
        ] {
            let e = parse_message(message).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let e = parse_message(deep.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("recursion limit exceeded"), "{e}");
    }
}
