//! A small etcd v3 client over the JSON gateway: range, put, delete, compact, watch.
//!
//! The gateway maps each gRPC call to `POST /v3/<service>/<call>` with the protobuf message as
//! JSON: `bytes` fields (keys, values) in base64, `int64` fields as decimal strings (it accepts
//! numbers too), fields at their default value left out (a PUT event has no `"type"`, an empty
//! value no `"value"`). A watch is one long response: one `{"result": WatchResponse}` per
//! message, chunked. See <https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/> and the
//! messages in <https://etcd.io/docs/v3.4/dev-guide/api_reference_v3/>.

use crate::Error;
use crate::http::{Conn, Endpoint};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
pub struct Range {
    /// The store's revision at the time of the read (`header.revision`).
    pub revision: i64,
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
    /// The watch exists; events from its start revision follow.
    Created,
    /// Changes, in revision order.
    Events(Vec<WatchEvent>),
    /// The start revision was compacted away: only a fresh range can catch up.
    Compacted(i64),
    /// The server cancelled the watch for another reason.
    Canceled(String),
    /// A progress notification or another message without events.
    Other,
}

/// An etcd v3 client over the JSON gateway, plain HTTP. Requests go to the endpoint that last
/// answered; a connection failure moves on to the next one.
#[derive(Debug)]
pub struct Client {
    endpoints: Vec<Endpoint>,
    /// Index of the endpoint to try first (Relaxed: only a hint, any value is valid).
    current: AtomicUsize,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl Client {
    /// A client for `endpoints` (each `http://HOST:PORT`); fails on an empty list or a URL it
    /// cannot use, naming it.
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Result<Client, Error> {
        if endpoints.is_empty() {
            return Err(Error::Config("no etcd endpoint given".into()));
        }
        Ok(Client {
            endpoints: endpoints
                .iter()
                .map(|e| Endpoint::parse(e.as_ref()))
                .collect::<Result<_, _>>()?,
            current: AtomicUsize::new(0),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
        })
    }

    /// Sets how long a connection attempt (default 2 s) and a unary request (default 10 s)
    /// may take.
    pub fn with_timeouts(mut self, connect: Duration, request: Duration) -> Client {
        self.connect_timeout = connect;
        self.request_timeout = request;
        self
    }

    /// Every key starting with `prefix`, and the revision they were read at.
    pub fn range_prefix(&self, prefix: &[u8]) -> Result<Range, Error> {
        self.range_prefix_with(prefix, &|_| {})
    }

    /// [`Client::range_prefix`], showing `on_connect` each socket as it connects.
    pub(crate) fn range_prefix_with(
        &self,
        prefix: &[u8],
        on_connect: &dyn Fn(&TcpStream),
    ) -> Result<Range, Error> {
        let answer = self.call(
            "/v3/kv/range",
            &json!({"key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix))}),
            on_connect,
        )?;
        let kvs = match answer.get("kvs") {
            Some(Value::Array(kvs)) => kvs.iter().map(key_value).collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        Ok(Range {
            revision: revision(&answer)?,
            kvs,
        })
    }

    /// Sets `key` to `value`; returns the revision of the change.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<i64, Error> {
        let answer = self.call(
            "/v3/kv/put",
            &json!({"key": B64.encode(key), "value": B64.encode(value)}),
            &|_| {},
        )?;
        revision(&answer)
    }

    /// Deletes `key`; returns the store's revision after the call (unchanged when the key did
    /// not exist).
    pub fn delete(&self, key: &str) -> Result<i64, Error> {
        let answer = self.call(
            "/v3/kv/deleterange",
            &json!({"key": B64.encode(key)}),
            &|_| {},
        )?;
        revision(&answer)
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

    /// Opens a watch on every key starting with `prefix`, from `start_revision` on. `idle`
    /// bounds how long the stream may stay silent (progress notifications are requested, so a
    /// live server is never silent for long). `on_connect` sees each socket as it connects.
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
        let conn = self.each_endpoint(|e| {
            let timeouts = (self.connect_timeout, idle);
            Conn::post(e, "/v3/watch", body.as_bytes(), timeouts, on_connect)
        })?;
        let messages = serde_json::Deserializer::from_reader(BufReader::new(conn)).into_iter();
        Ok(WatchStream { messages })
    }

    /// POSTs `body` to `path` and returns the parsed answer.
    fn call(
        &self,
        path: &str,
        body: &Value,
        on_connect: &dyn Fn(&TcpStream),
    ) -> Result<Value, Error> {
        let body = body.to_string();
        let (endpoint, bytes) = self.each_endpoint(|e| {
            let timeouts = (self.connect_timeout, Some(self.request_timeout));
            let conn = Conn::post(e, path, body.as_bytes(), timeouts, on_connect)?;
            let bytes = conn.read_all().map_err(|source| Error::Io {
                endpoint: e.url.clone(),
                source,
            })?;
            Ok((e.url.clone(), bytes))
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Protocol(format!("{endpoint}{path}: answer is not JSON: {e}")))
    }

    /// Runs `attempt` on the current endpoint, then on the others in turn while the failure is
    /// a connection failure; remembers the endpoint that answered.
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
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one endpoint"))
    }
}

/// An open watch: messages as they arrive.
pub(crate) struct WatchStream {
    messages:
        serde_json::StreamDeserializer<'static, serde_json::de::IoRead<BufReader<Conn>>, Value>,
}

impl WatchStream {
    /// Blocks until the next message; the end of the stream is an error (watches never end).
    pub(crate) fn next(&mut self) -> Result<WatchMessage, Error> {
        let message = match self.messages.next() {
            None => {
                return Err(Error::Protocol("the watch stream ended".into()));
            }
            Some(Err(e)) if e.is_io() || e.is_eof() => {
                return Err(Error::Io {
                    endpoint: "watch".into(),
                    source: e.into(),
                });
            }
            Some(Err(e)) => return Err(Error::Protocol(format!("watch message: {e}"))),
            Some(Ok(message)) => message,
        };
        if let Some(error) = message.get("error") {
            return Err(Error::Etcd(error.to_string()));
        }
        let Some(result) = message.get("result") else {
            return Err(Error::Protocol(format!(
                "watch message without result: {message}"
            )));
        };
        let compact = int(result, "compact_revision")?;
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
            return Ok(WatchMessage::Created);
        }
        match result.get("events") {
            Some(Value::Array(events)) if !events.is_empty() => events
                .iter()
                .map(|event| {
                    let deleted = event.get("type").and_then(Value::as_str) == Some("DELETE");
                    let kv = event
                        .get("kv")
                        .ok_or_else(|| Error::Protocol(format!("event without kv: {event}")))?;
                    Ok(WatchEvent {
                        deleted,
                        kv: key_value(kv)?,
                    })
                })
                .collect::<Result<_, _>>()
                .map(WatchMessage::Events),
            _ => Ok(WatchMessage::Other),
        }
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

fn revision(answer: &Value) -> Result<i64, Error> {
    let header = answer
        .get("header")
        .ok_or_else(|| Error::Protocol(format!("answer without header: {answer}")))?;
    int(header, "revision")
}

/// An `int64` field: a decimal string or a number; absent means 0 (proto3's default).
fn int(object: &Value, field: &str) -> Result<i64, Error> {
    match object.get(field) {
        None | Some(Value::Null) => Some(0),
        Some(Value::String(s)) => s.parse().ok(),
        Some(Value::Number(n)) => n.as_i64(),
        Some(_) => None,
    }
    .ok_or_else(|| Error::Protocol(format!("field {field} is not an int64: {object}")))
}

fn bytes(object: &Value, field: &str) -> Result<Vec<u8>, Error> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => B64
            .decode(s)
            .map_err(|e| Error::Protocol(format!("field {field} is not base64: {e}"))),
        Some(other) => Err(Error::Protocol(format!(
            "field {field} is not a string: {other}"
        ))),
    }
}

fn key_value(kv: &Value) -> Result<KeyValue, Error> {
    Ok(KeyValue {
        key: bytes(kv, "key")?,
        value: bytes(kv, "value")?,
        mod_revision: int(kv, "mod_revision")?,
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
}
