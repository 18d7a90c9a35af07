//! liblb-etcd: keeps a [`liblb_core::Balancer`]'s membership equal to an etcd prefix.
//!
//! Many processes on many machines each keep their own `Balancer`; they agree on where every
//! key goes because placement is a pure function of the membership, and because they all read
//! that membership from one registry. This crate is that reading, for etcd v3.
//!
//! # Layout
//!
//! Under a prefix `P`, each key `P/<node-id>` is a member. Its value is empty (weight 1) or a
//! JSON object with only the optional fields `"weight"` (0..=4294967295, 0 drains the node),
//! `"tag"` (0..=2^64-1, handed back by picks), `"locality"` (`"region/zone/sub_zone"`) and
//! `"priority"` (0..=4294967295; see liblb's docs/localities.md), each at most once; numbers must be integer
//! literals (`1.0` and `1e2` are refused, `-0` is 0). Anything else (a duplicate field, unknown
//! fields, another JSON type, bad JSON, numbers out of range, an id liblb refuses) rejects that
//! key's change with an [`Event::Rejected`] naming the key and the problem; the key keeps its
//! last good value, or stays absent. [`parse_member`] states the rules; the table every language
//! is tested against is `tests/membership/values.json`. The balancer gets the nodes sorted by id, bytewise, so every process and
//! every language (the Python package reads the same layout) builds the same table.
//!
//! # Protocol
//!
//! The watcher reads the prefix once (`Range` with `range_end` = the prefix's successor, in
//! pages of 5000 keys all read at the first page's revision: one snapshot) and watches from
//! the revision after the range's `header.revision`. If the created watch's header shows
//! etcd's revision behind the last applied one (a wiped or restored etcd) or another
//! `cluster_id`, the watcher reads the prefix again ([`Event::Resynced`] says why). Each watch message's events
//! are applied together, then `update()` is called once, so a burst is one table build. Per
//! etcd's API guarantees, a watch delivers every event after its start revision exactly once,
//! in order (<https://etcd.io/docs/v3.4/learning/api_guarantees/>, "Watch APIs"; the watch
//! messages: <https://etcd.io/docs/v3.4/learning/api/#watch-api>). After any failure
//! (server restart, reset connection) the watcher waits with exponential backoff, then watches
//! again from the last applied revision + 1: nothing is lost and nothing replayed. If etcd has
//! compacted that revision away (the watch comes back cancelled with `compact_revision`; see
//! <https://etcd.io/docs/v3.4/op-guide/maintenance/#history-compaction-v3-api-key-value-database>), history is gone, so the watcher reads the
//! whole prefix again and replaces the membership ([`Event::Resynced`]). If `update()` fails
//! the balancer keeps its last good membership ([`Event::UpdateFailed`]).
//!
//! The revision of an applied membership is the `mod_revision` of the last change it includes
//! (or, after a range, the range's `header.revision`): the membership as of that revision.
//!
//! # Why the JSON gateway over a hand-written HTTP/1.1 client
//!
//! etcd serves every v3 call as JSON over HTTP at its client port (the "gRPC gateway",
//! <https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/>). The gRPC client crate
//! (`etcd-client` 0.21) brings tonic, hyper, h2, prost, tokio and a `protoc` step at build
//! time: measured here, 7 min 28 s and 120 crates for a cold `cargo build -j1 --release`, and
//! a system tool, for the four calls used here. This crate speaks HTTP/1.1 itself on
//! `std::net::TcpStream` (see `http.rs` for why not an HTTP crate: a blocked watch read must be
//! stoppable at once), with rustls (ring provider) on the same socket for `https://`, and
//! needs only `serde_json`, `base64`, `log` and rustls. Every read is bounded: a response head
//! of 64 KiB, a chunk-size line of 1 KiB, a unary answer of 256 MiB, a watch message of 16 MiB,
//! each checked as the bytes arrive, and 256 MiB of keys and values over all the pages of a
//! range; a unary request, a whole paged range and a watch's "created" message must finish
//! within [`Config::request_timeout`] (over TLS too), and each later watch message within
//! [`Config::idle_timeout`].
//!
//! # TLS and etcd users
//!
//! [`Config::tls`] takes a [`TlsConfig`] (CA bundle, client certificate and key for servers
//! with `--client-cert-auth`), [`Config::auth`] an etcd user and password: the watcher logs in,
//! sends the token with every request and renews it once when etcd refuses it. Failures are
//! [`Event::Disconnected`] naming the problem (a wrong CA, a missing client certificate, a
//! wrong password), retried with backoff; the balancer keeps its last good membership.
//!
//! # Example
//!
//! ```no_run
//! use liblb_core::{Algorithm, Balancer, Node, Options};
//! use liblb_etcd::{Config, Event, Watcher};
//! use std::sync::Arc;
//!
//! let balancer = Arc::new(Balancer::new(Algorithm::Maglev, Vec::<Node>::new(), Options::default())?);
//! let config = Config::new("http://127.0.0.1:2379", "/services/web");
//! let watcher = Watcher::start(config, balancer.clone(), |event| {
//!     if let Event::Rejected { key, reason, .. } = event {
//!         eprintln!("ignored {key}: {reason}");
//!     }
//! })?;
//! // ... balancer.pick(Some(b"user-42")) follows the membership from now on.
//! drop(watcher); // stops the thread; the balancer keeps the last membership
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod http;
mod membership;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod watcher;

#[cfg(feature = "fuzzing")]
pub use client::fuzz_response;
pub use client::{Client, KeyValue, Range, WatchEvent};
pub use membership::{Member, parse_member, parse_value};
pub use tls::TlsConfig;
pub use watcher::{Config, Watcher};

use liblb_core::Node;
use std::fmt;

/// What the watcher did; handed to the callback given to [`Watcher::start`], on the
/// watcher's thread, and logged with the `log` crate.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The balancer now holds `nodes` (sorted by id), the membership as of `revision`.
    Applied {
        /// The revision of the last change included.
        revision: i64,
        /// The nodes handed to `update()`.
        nodes: Vec<Node>,
    },
    /// A key's change was refused; the key keeps its last good value.
    Rejected {
        /// The revision of the refused change.
        revision: i64,
        /// The key (lossy UTF-8).
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `Balancer::update` refused the membership; the balancer keeps its last good one.
    UpdateFailed {
        /// The revision that was not applied.
        revision: i64,
        /// The balancer's error.
        error: liblb_core::Error,
    },
    /// Reading or watching failed (etcd unreachable, a TLS or authentication failure, an
    /// answer refused as malformed or over a size limit, a stalled stream); the watcher keeps
    /// the last good membership and retries after a backoff.
    Disconnected {
        /// What failed.
        error: String,
    },
    /// A watch is open again after a failure, from revision `from` (the last applied + 1).
    Resumed {
        /// The first revision the new watch reports.
        from: i64,
    },
    /// The whole prefix was read again at `revision` and replaces the membership, because
    /// the watch could not go on from the last applied revision: `reason` says why (the
    /// revisions after it were compacted away; etcd's revision is behind ours, as after a
    /// wiped or restored data directory; another cluster answers at the same endpoint; a watch
    /// message over the size limit).
    Resynced {
        /// The revision of the fresh read.
        revision: i64,
        /// Why the watch could not go on.
        reason: String,
    },
}

/// What can go wrong talking to etcd or setting up a watcher.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A bad argument: an empty prefix, an endpoint URL that is not `http(s)://HOST:PORT`, an
    /// unreadable certificate file, ...
    Config(String),
    /// Connecting, sending or receiving failed.
    Io {
        /// The endpoint (or "watch").
        endpoint: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The gateway answered with an HTTP error.
    Http {
        /// The endpoint.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body (etcd's error JSON).
        body: String,
    },
    /// An answer that does not parse as the gateway's JSON, or breaks its rules.
    Protocol(String),
    /// The TLS handshake or session failed (wrong CA, no client certificate, ...).
    Tls {
        /// The endpoint.
        endpoint: String,
        /// What failed and what to check.
        reason: String,
    },
    /// etcd refused the user name or password.
    Auth(String),
    /// etcd reported an error (in a watch stream, or a cancelled watch).
    Etcd(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(why) => write!(f, "{why}"),
            Error::Io { endpoint, source } => write!(f, "{endpoint}: {source}"),
            Error::Http {
                endpoint,
                status,
                body,
            } => write!(f, "{endpoint}: HTTP {status}: {body}"),
            Error::Protocol(why) => write!(f, "unexpected answer from etcd: {why}"),
            Error::Etcd(why) => write!(f, "etcd: {why}"),
            Error::Tls { endpoint, reason } => write!(f, "{endpoint}: TLS: {reason}"),
            Error::Auth(why) => write!(f, "authentication failed: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

// The watcher is handed between threads; keep it and its parts sendable.
const _: () = {
    const fn sendable<T: Send + Sync>() {}
    sendable::<Watcher>();
    sendable::<Client>();
    sendable::<Event>();
};
