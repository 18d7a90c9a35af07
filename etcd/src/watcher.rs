//! The watcher thread: one range, then one watch from the next revision, for as long as the
//! watcher lives; reconnects with backoff and resumes where it stopped; resyncs when the watch
//! cannot go on (a compaction, an etcd whose revision went back, another cluster, a message
//! over the size limit).
//!
//! Every wait between attempts is the current backoff with jitter (a pause drawn between half
//! and all of it), so processes that lost etcd together do not come back in step; the backoff
//! doubles after each failure up to `backoff_max`. A compaction counts as a failure here: a
//! server that answers every watch with `compact_revision` gets ever slower range+watch pairs,
//! not a tight loop.

use crate::client::{Client, WatchMessage};
use crate::membership::Membership;
use crate::tls::TlsConfig;
use crate::{Error, Event};
use liblb_core::Balancer;
use std::net::{Shutdown, TcpStream};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to watch and how patiently. Its `Debug` shows the user name, never the password.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Gateway endpoints, each `http://HOST:PORT` or `https://HOST:PORT`; a connection
    /// failure or an HTTP 5xx answer moves to the next.
    pub endpoints: Vec<String>,
    /// The prefix `P`: members are the keys `P/<node-id>`. Not empty, no trailing `/`.
    pub prefix: String,
    /// First wait after a failure; doubled after each failure in a row (default 100 ms).
    pub backoff_min: Duration,
    /// Longest wait between attempts (default 5 s).
    pub backoff_max: Duration,
    /// How long a connection attempt may take (default 2 s).
    pub connect_timeout: Duration,
    /// How long a whole unary request (a range page, authenticating) may take, from sending it
    /// to the last byte of the answer, however slowly the answer trickles in (default 10 s).
    /// Also bounds a whole paged range (all its pages together), and the wait for a watch's
    /// response head and its "created" message.
    pub request_timeout: Duration,
    /// The watch's silence window: a watch that delivers no complete message for this long
    /// (silent, or trickling bytes that never finish a message) is reported as stalled
    /// ([`Event::Disconnected`]) and reopened (default 15 min: etcd sends a progress
    /// notification every 10 minutes to watches that ask, as this one does). `None` waits
    /// forever.
    pub idle_timeout: Option<Duration>,
    /// TLS for `https://` endpoints: the CA bundle and an optional client certificate. `None`:
    /// the system's CA bundle, no client certificate.
    pub tls: Option<TlsConfig>,
    /// etcd user name and password: the watcher authenticates and sends the token with each
    /// request, renewing it when etcd refuses it.
    pub auth: Option<(String, String)>,
    /// Keys per range page (default 5000).
    pub page_size: usize,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Spelled out rather than derived: `auth` holds a password.
        let Config {
            endpoints,
            prefix,
            backoff_min,
            backoff_max,
            connect_timeout,
            request_timeout,
            idle_timeout,
            tls,
            auth,
            page_size,
        } = self;
        f.debug_struct("Config")
            .field("endpoints", endpoints)
            .field("prefix", prefix)
            .field("backoff_min", backoff_min)
            .field("backoff_max", backoff_max)
            .field("connect_timeout", connect_timeout)
            .field("request_timeout", request_timeout)
            .field("idle_timeout", idle_timeout)
            .field("tls", tls)
            .field("auth", &auth.as_ref().map(|(user, _)| (user, "<redacted>")))
            .field("page_size", page_size)
            .finish()
    }
}

impl Config {
    /// A configuration with the defaults above.
    pub fn new(endpoint: impl Into<String>, prefix: impl Into<String>) -> Config {
        Config {
            endpoints: vec![endpoint.into()],
            prefix: prefix.into(),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(15 * 60)),
            tls: None,
            auth: None,
            page_size: crate::client::PAGE_SIZE,
        }
    }

    /// Sets the backoff bounds (tests use a few milliseconds).
    pub fn backoff(mut self, min: Duration, max: Duration) -> Config {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |why: String| Err(Error::Config(why));
        if self.prefix.is_empty() {
            return bad("the prefix is empty; members are the keys PREFIX/<node-id>".into());
        }
        if self.prefix.ends_with('/') {
            return bad(format!(
                "prefix {:?} ends with '/'; give it without (members are PREFIX/<node-id>)",
                self.prefix
            ));
        }
        if self.backoff_min.is_zero() || self.backoff_max < self.backoff_min {
            return bad("backoff_min must be > 0 and backoff_max >= backoff_min".into());
        }
        Ok(())
    }
}

/// Keeps a balancer's membership equal to an etcd prefix, from a background thread.
///
/// Dropping it stops the thread (see [`Watcher::stop`]).
pub struct Watcher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// State the caller and the thread share.
struct Shared {
    /// Set once to stop (SeqCst: read by the thread after it registers its socket, so either
    /// the thread sees the flag or `stop` sees the socket).
    stop: AtomicBool,
    progress: Mutex<Progress>,
    /// Signalled when the applied revision changes or a stop is requested.
    changed: Condvar,
    /// The open watch's socket, for `stop` to shut.
    socket: Mutex<Option<TcpStream>>,
}

#[derive(Default)]
struct Progress {
    /// Revision of the membership the balancer holds (0 before the first).
    revision: i64,
    stopping: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing a panicking holder could leave half-done: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Waits until `done` holds for the progress, or `timeout` has passed; returns the progress
    /// as it was last seen (locked).
    fn wait(
        &self,
        timeout: Duration,
        done: impl Fn(&Progress) -> bool,
    ) -> MutexGuard<'_, Progress> {
        let deadline = Instant::now() + timeout;
        let mut progress = lock(&self.progress);
        while !done(&progress) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            progress = (self.changed.wait_timeout(progress, left))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        progress
    }
}

impl Watcher {
    /// Checks `config`, then starts the thread: it reads the prefix, hands the membership to
    /// `balancer.update`, and watches for changes. `on_event` is called on that thread for
    /// every [`Event`]. Fails only on a bad configuration (including a certificate file that
    /// cannot be read); an unreachable etcd, a TLS handshake or a login that fails is retried
    /// (with [`Event::Disconnected`] naming the problem for each failure).
    pub fn start(
        config: Config,
        balancer: Arc<Balancer>,
        on_event: impl Fn(&Event) + Send + 'static,
    ) -> Result<Watcher, Error> {
        config.validate()?;
        let mut client = Client::new(&config.endpoints)?
            .with_timeouts(config.connect_timeout, config.request_timeout)
            .with_page_size(config.page_size);
        if let Some(tls) = &config.tls {
            client = client.with_tls(tls)?;
        }
        if let Some((user, password)) = &config.auth {
            client = client.with_auth(user, password);
        }
        client.check_tls()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            progress: Mutex::new(Progress::default()),
            changed: Condvar::new(),
            socket: Mutex::new(None),
        });
        let mut run = Run {
            client,
            members: Membership::new(&config.prefix),
            balancer,
            shared: shared.clone(),
            on_event: Box::new(on_event),
            config,
            last: None,
            cluster_id: 0,
            disconnected: false,
        };
        let thread = std::thread::Builder::new()
            .name("liblb-etcd-watch".into())
            .spawn(move || run.run())
            .map_err(|e| Error::Config(format!("cannot start the watcher thread: {e}")))?;
        Ok(Watcher {
            shared,
            thread: Some(thread),
        })
    }

    /// Revision of the membership the balancer holds (0 until the first is applied). It goes
    /// back when etcd's does (a wiped or restored etcd, read again: [`Event::Resynced`]).
    pub fn revision(&self) -> i64 {
        lock(&self.shared.progress).revision
    }

    /// Waits until a membership at `revision` or later is applied; `false` after `timeout`.
    pub fn wait_for_revision(&self, revision: i64, timeout: Duration) -> bool {
        let progress = self
            .shared
            .wait(timeout, |p| p.revision >= revision || p.stopping);
        progress.revision >= revision
    }

    /// Stops the thread and waits for it: at once when it is watching or waiting to retry;
    /// a connection attempt under way finishes first (at most `connect_timeout`). The balancer
    /// keeps the last membership applied. Calling it again does nothing.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        lock(&self.shared.progress).stopping = true;
        self.shared.changed.notify_all();
        if let Some(socket) = lock(&self.shared.socket).as_ref() {
            drop(socket.shutdown(Shutdown::Both));
        }
        if let Some(thread) = self.thread.take() {
            drop(thread.join());
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

/// The thread's state.
struct Run {
    client: Client,
    members: Membership,
    balancer: Arc<Balancer>,
    shared: Arc<Shared>,
    on_event: Box<dyn Fn(&Event) + Send>,
    config: Config,
    /// Last revision whose changes were applied to `members` (`None` before the first range).
    last: Option<i64>,
    /// The cluster the last range came from (0: unknown).
    cluster_id: u64,
    /// A failure happened since the last watch was created.
    disconnected: bool,
}

/// A pause drawn uniformly between half and all of `d`, so processes that failed together do
/// not retry in step. The randomness is std's per-process hasher keys mixed with the clock:
/// enough for spreading retries, no dependency.
fn jitter(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.subsec_nanos().into()),
    );
    let fraction = (h.finish() >> 11) as f64 / (1u64 << 53) as f64; // in [0, 1)
    d.mul_f64(0.5 + fraction / 2.0)
}

impl Run {
    fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    fn run(&mut self) {
        let mut backoff = self.config.backoff_min;
        // Some(why): a range is due before the next watch (the first one: no Resynced event).
        let mut range_due = Some(String::new());
        while !self.stopped() {
            let outcome = match range_due.clone() {
                Some(reason) => self.resync(&reason).map(|()| {
                    range_due = None;
                    None
                }),
                None => self.watch(&mut backoff),
            };
            let pause = match outcome {
                Ok(None) => continue,
                // The watch cannot go on from here: read the prefix again, after a pause (a
                // server that answers every watch this way must not get a tight loop).
                Ok(Some(reason)) => {
                    log::warn!("etcd watch cannot go on: {reason}; reading the prefix again");
                    range_due = Some(reason);
                    backoff
                }
                Err(e) => {
                    if self.stopped() {
                        break;
                    }
                    let error = e.to_string();
                    // A refused token is renewed on the next attempt.
                    self.client.renew_on(&error);
                    // A watch refused or cancelled because its member has no leader
                    // (etcdserver: no leader; see require_leader): try another member.
                    if error.contains("no leader") {
                        self.client.skip_endpoint();
                    }
                    if error.contains("the limit for one message") && range_due.is_none() {
                        range_due = Some(format!("{error}; a range reads it in pages"));
                    }
                    self.disconnected = true;
                    self.emit(Event::Disconnected { error });
                    backoff
                }
            };
            self.sleep(jitter(pause));
            backoff = (backoff * 2).min(self.config.backoff_max);
        }
    }

    /// Reads the whole prefix and replaces the membership with it; `reason` is why (empty for
    /// the first read).
    fn resync(&mut self, reason: &str) -> Result<(), Error> {
        let register = |s: &TcpStream| self.register(s);
        let range = self
            .client
            .range_prefix_with(self.members.key_prefix(), &register);
        *lock(&self.shared.socket) = None;
        let range = range?;
        if self.last.is_some() {
            self.emit(Event::Resynced {
                revision: range.revision,
                reason: reason.to_string(),
            });
        }
        self.cluster_id = range.cluster_id;
        let rejected = self.members.replace(
            range
                .kvs
                .iter()
                .map(|kv| (kv.key.as_slice(), kv.value.as_slice())),
        );
        for r in rejected {
            self.emit(Event::Rejected {
                revision: range.revision,
                key: r.key,
                reason: r.reason,
            });
        }
        self.apply(range.revision);
        Ok(())
    }

    /// Watches from the revision after the last applied one until the stream fails (an error)
    /// or cannot go on (`Ok(Some(why))`: resync).
    fn watch(&mut self, backoff: &mut Duration) -> Result<Option<String>, Error> {
        // Revisions are parsed below i64::MAX, so this cannot overflow; if it did, only a
        // range could tell where to go on from.
        let Some(from) = self.last.unwrap_or(0).checked_add(1) else {
            return Ok(Some(
                "the last revision applied is the largest there is".into(),
            ));
        };
        let register = |s: &TcpStream| self.register(s);
        let (prefix, idle) = (self.members.key_prefix(), self.config.idle_timeout);
        let mut created = None;
        let outcome = match self.client.watch(prefix, from, idle, &register) {
            Ok(mut stream) => self.follow(&mut stream, from, backoff, &mut created),
            Err(e) => Err(e),
        };
        *lock(&self.shared.socket) = None;
        // A watch that stayed open for backoff_max worked, even if it said nothing after
        // "created": start the backoff over. (A message after "created" did so already.)
        if created.is_some_and(|at: Instant| at.elapsed() >= self.config.backoff_max) {
            *backoff = self.config.backoff_min;
        }
        outcome
    }

    /// Lets `stop` shut `socket`; shuts it here if `stop` came first (SeqCst on the flag and
    /// the mutex on the slot: either this sees the flag or `stop` sees the socket).
    fn register(&self, socket: &TcpStream) {
        if let Ok(clone) = socket.try_clone() {
            *lock(&self.shared.socket) = Some(clone);
        }
        if self.stopped() {
            drop(socket.shutdown(Shutdown::Both));
        }
    }

    fn follow(
        &mut self,
        stream: &mut crate::client::WatchStream,
        from: i64,
        backoff: &mut Duration,
        created: &mut Option<Instant>,
    ) -> Result<Option<String>, Error> {
        loop {
            // A stop shuts the socket (see `register`); this catches one between messages.
            if self.stopped() {
                return Ok(None);
            }
            match stream.next()? {
                WatchMessage::Created {
                    revision,
                    cluster_id,
                } => {
                    // etcd's header: a watch on another cluster, or on an etcd whose history
                    // is behind what we applied (wiped, restored from a backup), would wait
                    // for revisions that mean something else: read the prefix again.
                    let known = self.cluster_id;
                    if known != 0 && cluster_id != 0 && cluster_id != known {
                        return Ok(Some(format!(
                            "another cluster answers (cluster id {cluster_id:x}, was {known:x})"
                        )));
                    }
                    let last = self.last.unwrap_or(0);
                    if revision < last {
                        return Ok(Some(format!(
                            "etcd's revision {revision} is behind ours ({last}): its data was \
                             wiped or restored"
                        )));
                    }
                    // Not a sign the watch works yet: a proxy that answers "created" and then
                    // closes must not get a new watch every backoff_min. The backoff starts
                    // over on the next message, or once the watch stayed open for backoff_max.
                    *created = Some(Instant::now());
                    if std::mem::take(&mut self.disconnected) {
                        self.emit(Event::Resumed { from });
                    }
                }
                WatchMessage::Events(events) => {
                    *backoff = self.config.backoff_min;
                    // Every event must come after the revision applied last, in order (events
                    // of one transaction share a revision): a watch that answers otherwise
                    // (etcd's history went back, or not etcd) is refused whole, and a range
                    // reads the truth. Applying it could bring back a deleted node.
                    let last = self.last.unwrap_or(0);
                    let mut revision = last;
                    for event in &events {
                        let r = event.kv.mod_revision;
                        if r < revision || r == last {
                            return Ok(Some(format!(
                                "watch event at revision {r} after revision {revision}: etcd's \
                                 history went back?"
                            )));
                        }
                        revision = r;
                    }
                    for event in events {
                        let kv = event.kv;
                        if event.deleted {
                            self.members.delete(&kv.key);
                        } else if let Err(r) = self.members.put(&kv.key, &kv.value) {
                            self.emit(Event::Rejected {
                                revision: kv.mod_revision,
                                key: r.key,
                                reason: r.reason,
                            });
                        }
                    }
                    // One update for the whole message: a burst is one table build.
                    self.apply(revision);
                }
                WatchMessage::Compacted(compacted) => {
                    return Ok(Some(format!(
                        "etcd compacted revision {compacted} before the watch from {from}"
                    )));
                }
                WatchMessage::Canceled(reason) => {
                    let cancelled = crate::client::WATCH_CANCELLED;
                    return Err(Error::Etcd(format!("{cancelled}{reason}")));
                }
                WatchMessage::Other => *backoff = self.config.backoff_min,
            }
        }
    }

    /// Hands the membership to the balancer as of `revision`.
    fn apply(&mut self, revision: i64) {
        // The changes up to `revision` are consumed either way: the watch goes on from the next
        // one, and a failed update leaves the balancer on its last good membership.
        self.last = Some(revision);
        let nodes = self.members.nodes();
        let update = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.balancer.update(nodes.iter().cloned())
        }));
        match update {
            Ok(Ok(())) => {
                // The callback first: a waiter woken by the revision sees its event recorded.
                self.emit(Event::Applied { revision, nodes });
                lock(&self.shared.progress).revision = revision;
                self.shared.changed.notify_all();
            }
            Ok(Err(error)) => self.emit(Event::UpdateFailed { revision, error }),
            // A bug, but not a reason to stop following etcd: the balancer keeps what it held,
            // and the next change tries again.
            Err(panic) => log::error!(
                "revision {revision}: the balancer's update panicked ({}); membership kept",
                panic_message(&*panic)
            ),
        }
    }

    /// Waits `how_long`, or less if a stop is requested.
    fn sleep(&self, how_long: Duration) {
        drop(self.shared.wait(how_long, |p| p.stopping));
    }

    fn emit(&self, event: Event) {
        match &event {
            Event::Applied { revision, nodes } => {
                log::debug!("revision {revision}: {} nodes applied", nodes.len())
            }
            Event::Rejected {
                revision,
                key,
                reason,
            } => log::warn!("revision {revision}: key {key:?} rejected: {reason}"),
            Event::UpdateFailed { revision, error } => {
                log::error!("revision {revision}: update failed, membership kept: {error}")
            }
            Event::Disconnected { error } => log::warn!("etcd watch interrupted: {error}"),
            Event::Resumed { from } => log::info!("etcd watch resumed from revision {from}"),
            Event::Resynced { revision, reason } => {
                log::info!("resynced at revision {revision} ({reason})")
            }
        }
        // A panicking callback is the caller's bug: logged, and the watcher goes on (as the
        // Python watcher does), instead of its thread dying and the balancer freezing.
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| (self.on_event)(&event))) {
            log::error!(
                "the on_event callback panicked on {event:?}: {}",
                panic_message(&*panic)
            );
        }
    }
}

/// A panic's message (`panic!` gives a `&str` or a `String`).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => text,
        (_, Some(text)) => text,
        _ => "no message",
    }
}
