//! The watcher against a real etcd server (see `liblb_etcd::testing`): membership follows adds,
//! removes and reweights; a restart of etcd loses and replays nothing; a compaction while
//! disconnected resyncs; a malformed value keeps the last good membership.
//!
//! Waits are polls with a deadline (a bound on how long the watcher may lag), never sleeps
//! taken as assertions.

use liblb_core::{Algorithm, Balancer, Node, Options};
use liblb_etcd::testing::{EtcdServer, Proxy, Recorder, wait_until};
use liblb_etcd::{Client, Config, Event, TlsConfig, Watcher};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long the watcher may take to apply a change it has been sent.
const BOUND: Duration = Duration::from_secs(10);

fn balancer(algorithm: Algorithm) -> Arc<Balancer> {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    Arc::new(Balancer::new(algorithm, Vec::<Node>::new(), options).unwrap())
}

/// A watcher with test-sized backoffs.
fn watch(url: &str, prefix: &str, b: &Arc<Balancer>, rec: &Recorder) -> Watcher {
    let config =
        Config::new(url, prefix).backoff(Duration::from_millis(10), Duration::from_millis(200));
    Watcher::start(config, b.clone(), rec.callback()).unwrap()
}

fn members(b: &Balancer) -> Vec<(String, u32)> {
    b.nodes()
        .iter()
        .map(|n| (n.id.to_string(), n.weight))
        .collect()
}

fn owned(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
    pairs.iter().map(|(id, w)| (id.to_string(), *w)).collect()
}

fn put(c: &Client, key: &str, value: &str) -> i64 {
    c.put(key, value.as_bytes()).unwrap()
}

fn assert_strictly_increasing(revisions: &[i64]) {
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "applied revisions not strictly increasing (a replay): {revisions:?}"
    );
}

#[test]
fn picks_follow_adds_removes_and_reweights() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    put(&c, "svc/a", "");
    let rev = put(&c, "svc/b", r#"{"weight": 2, "tag": 7}"#);
    put(&c, "svcx/outside", ""); // shares the text prefix, not the `svc/` prefix
    let b = balancer(Algorithm::Maglev);
    let rec = Recorder::default();
    let w = watch(&etcd.url(), "svc", &b, &rec);
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("a", 1), ("b", 2)]));
    assert_eq!(b.nodes()[1].tag, 7);

    let keys: Vec<String> = (0..400).map(|i| format!("key-{i}")).collect();
    let placement = |b: &Balancer| -> Vec<String> {
        keys.iter()
            .map(|k| b.pick(Some(k.as_bytes())).unwrap().id().to_string())
            .collect()
    };
    // Add c: some keys move to it, and only to it.
    let before = placement(&b);
    let rev = put(&c, "svc/c", "");
    assert!(w.wait_for_revision(rev, BOUND));
    let after = placement(&b);
    let moved: Vec<_> = (0..keys.len()).filter(|&i| before[i] != after[i]).collect();
    assert!(!moved.is_empty());
    assert!(moved.iter().all(|&i| after[i] == "c"));
    // Remove a: none of its keys stay on it.
    let rev = c.delete("svc/a").unwrap();
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("b", 2), ("c", 1)]));
    assert!(placement(&b).iter().all(|n| n != "a"));
    // Drain b (weight 0): every key goes to c.
    let rev = put(&c, "svc/b", r#"{"weight": 0}"#);
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("b", 0), ("c", 1)]));
    assert!(placement(&b).iter().all(|n| n == "c"));
    // Remove everything: picks fail with "no nodes", and come back with a node.
    c.delete("svc/b").unwrap();
    let rev = c.delete("svc/c").unwrap();
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(b.pick(Some(b"k")).err(), Some(liblb_core::Error::NoNodes));
    let rev = put(&c, "svc/d", "");
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(b.pick(Some(b"k")).unwrap().id(), "d");
    assert_strictly_increasing(&rec.applied());
    assert_eq!(rec.count(|e| matches!(e, Event::Rejected { .. })), 0);
}

/// What the prefix holds after each write the test made: (revision, members).
#[derive(Default)]
struct History(Vec<(i64, BTreeMap<String, u32>)>);

impl History {
    fn put(&mut self, c: &Client, id: &str, weight: u32) -> i64 {
        let value = format!(r#"{{"weight": {weight}}}"#);
        let rev = put(c, &format!("svc/{id}"), &value);
        let mut now = self.at(rev);
        now.insert(id.to_string(), weight);
        self.0.push((rev, now));
        rev
    }

    fn delete(&mut self, c: &Client, id: &str) -> i64 {
        let rev = c.delete(&format!("svc/{id}")).unwrap();
        let mut now = self.at(rev);
        now.remove(id);
        self.0.push((rev, now));
        rev
    }

    /// The members as of `revision`.
    fn at(&self, revision: i64) -> BTreeMap<String, u32> {
        let last = self.0.iter().rev().find(|(r, _)| *r <= revision);
        last.map(|(_, m)| m.clone()).unwrap_or_default()
    }

    /// Every applied membership is the prefix's content at its revision: a lost change would
    /// show as a wrong membership, a replayed one as a revision applied twice.
    fn check(&self, rec: &Recorder) {
        let applied = rec.applied();
        assert_strictly_increasing(&applied);
        for e in rec.events() {
            if let Event::Applied { revision, nodes } = e {
                let got: BTreeMap<String, u32> =
                    nodes.iter().map(|n| (n.id.to_string(), n.weight)).collect();
                assert_eq!(got, self.at(revision), "membership at revision {revision}");
            }
        }
        let last = self.0.last().map(|(r, _)| *r).unwrap();
        assert_eq!(applied.last(), Some(&last), "the last write was applied");
    }
}

#[test]
fn an_etcd_restart_loses_and_replays_nothing() {
    let Some(mut etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    let b = balancer(Algorithm::Rendezvous);
    let rec = Recorder::default();
    let w = watch(&etcd.url(), "svc", &b, &rec);
    let mut history = History::default();
    for id in ["a", "b", "c"] {
        history.put(&c, id, 1);
    }
    let rev = history.put(&c, "a", 3);
    assert!(w.wait_for_revision(rev, BOUND));
    let last_before = w.revision();

    etcd.kill();
    wait_until("the watcher to notice the server is gone", BOUND, || {
        rec.count(|e| matches!(e, Event::Disconnected { .. })) > 0
    });
    etcd.restart();
    // Written after the watch is back, each change arrives in its own message, so each gets
    // its own Applied revision (changes made earlier may arrive as one catch-up burst).
    wait_until("the watch to resume", BOUND, || {
        rec.count(|e| matches!(e, Event::Resumed { .. })) > 0
    });
    let c = etcd.client();
    let after = [
        history.delete(&c, "a"),
        history.put(&c, "b", 5),
        history.put(&c, "d", 1),
    ];
    assert!(w.wait_for_revision(after[2], BOUND));

    assert_eq!(members(&b), owned(&[("b", 5), ("c", 1), ("d", 1)]));
    history.check(&rec);
    let applied = rec.applied();
    for rev in after {
        assert!(
            applied.contains(&rev),
            "revision {rev} missed: {:?}",
            rec.events()
        );
    }
    let resumed: Vec<i64> = rec
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Resumed { from } => Some(*from),
            _ => None,
        })
        .collect();
    assert_eq!(resumed, [last_before + 1], "{:?}", rec.events());
    assert_eq!(rec.count(|e| matches!(e, Event::Resynced { .. })), 0);
}

#[test]
fn a_compaction_while_disconnected_resyncs() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    let proxy = Proxy::start(etcd.port());
    let b = balancer(Algorithm::Jump);
    let rec = Recorder::default();
    let w = watch(&proxy.url(), "svc", &b, &rec);
    put(&c, "svc/a", "");
    let rev = put(&c, "svc/b", r#"{"weight": 4}"#);
    assert!(w.wait_for_revision(rev, BOUND));

    proxy.cut();
    wait_until("the watcher to notice the cut", BOUND, || {
        rec.count(|e| matches!(e, Event::Disconnected { .. })) > 0
    });
    c.delete("svc/a").unwrap();
    put(&c, "svc/b", "not json"); // rejected at resync: b keeps weight 4
    let rev = put(&c, "svc/c", r#"{"weight": 2}"#);
    c.compact(rev).unwrap();
    proxy.resume();
    assert!(w.wait_for_revision(rev, BOUND));

    assert_eq!(members(&b), owned(&[("b", 4), ("c", 2)]));
    assert!(rec.count(|e| matches!(e, Event::Resynced { revision, .. } if *revision == rev)) == 1);
    assert!(rec.count(|e| matches!(e, Event::Rejected { key, .. } if key == "svc/b")) == 1);
    assert_strictly_increasing(&rec.applied());
    // Still watching after the resync.
    let rev = put(&c, "svc/d", "");
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(b.len(), 3);
}

#[test]
fn a_burst_is_one_update() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    let proxy = Proxy::start(etcd.port());
    let b = balancer(Algorithm::Ring);
    let rec = Recorder::default();
    let w = watch(&proxy.url(), "svc", &b, &rec);
    let rev = put(&c, "svc/first", "");
    assert!(w.wait_for_revision(rev, BOUND));
    // Changes made while the watcher is away arrive as one catch-up message.
    proxy.cut();
    wait_until("the watcher to notice the cut", BOUND, || {
        rec.count(|e| matches!(e, Event::Disconnected { .. })) > 0
    });
    let applied_before = rec.applied().len();
    let mut rev = 0;
    for i in 0..5 {
        rev = put(&c, &format!("svc/n{i}"), "");
    }
    proxy.resume();
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(b.len(), 6);
    assert_eq!(rec.applied()[applied_before..], [rev], "{:?}", rec.events());
}

#[test]
fn a_malformed_value_keeps_the_last_good_membership() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    let b = balancer(Algorithm::WeightedRandom);
    let rec = Recorder::default();
    let w = watch(&etcd.url(), "svc", &b, &rec);
    let rev = put(&c, "svc/a", r#"{"weight": 2}"#);
    assert!(w.wait_for_revision(rev, BOUND));
    let bad = [
        ("svc/a", "{oops", "not JSON"),
        (
            "svc/a",
            r#"{"weight": -1}"#,
            "\"weight\" must be an integer",
        ),
        (
            "svc/a",
            r#"{"weight": 2, "zone": "x"}"#,
            "unknown field \"zone\"",
        ),
        ("svc/b", "[1]", "must be a JSON object"),
        ("svc/", "", "invalid node id"),
    ];
    for (key, value, _) in bad {
        put(&c, key, value);
    }
    let rev = put(&c, "svc/c", "");
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("a", 2), ("c", 1)]));
    let rejected: Vec<(String, String)> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Rejected { key, reason, .. } => Some((key, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), bad.len(), "{rejected:?}");
    for ((key, _, why), (got_key, reason)) in bad.iter().zip(&rejected) {
        assert_eq!(key, got_key);
        assert!(reason.contains(why), "{key}: {reason}");
    }
    // A good value after a bad one is taken.
    let rev = put(&c, "svc/b", r#"{"weight": 3}"#);
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("a", 2), ("b", 3), ("c", 1)]));
}

#[test]
fn stop_ends_a_quiet_watch_and_a_retry_loop() {
    // No server on this port: the watcher retries until stopped.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let b = balancer(Algorithm::Random);
    let rec = Recorder::default();
    let config = Config::new(format!("http://127.0.0.1:{port}"), "svc")
        .backoff(Duration::from_secs(3600), Duration::from_secs(3600));
    let mut w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
    wait_until("a failed attempt", BOUND, || {
        rec.count(|e| matches!(e, Event::Disconnected { .. })) > 0
    });
    assert_eq!(w.revision(), 0);
    // Stopped on another thread, so a stop that hangs fails the test instead of hanging it.
    stops_within_bound(move || w.stop(), "stop during an hour's backoff"); // returns at once

    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let w = watch(&etcd.url(), "svc", &b, &rec);
    let rev = put(&etcd.client(), "svc/a", "");
    assert!(w.wait_for_revision(rev, BOUND));
    // The watch is quiet: the read is woken by shutting the socket.
    stops_within_bound(move || drop(w), "drop during a quiet watch");
    assert_eq!(b.pick(None).unwrap().id(), "a");
}

/// Runs `stop` on another thread and fails (rather than hangs) if it does not return within
/// the bound.
fn stops_within_bound(stop: impl FnOnce() + Send + 'static, what: &str) {
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        stop();
        let _ = done.send(());
    });
    assert!(stopped.recv_timeout(BOUND).is_ok(), "{what} did not return");
}

#[test]
fn a_dead_endpoint_is_skipped_for_the_next() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let b = balancer(Algorithm::Ring);
    let rec = Recorder::default();
    let mut config = Config::new(format!("http://{dead}"), "svc");
    config.endpoints.push(etcd.url());
    let w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
    let rev = put(&etcd.client(), "svc/a", "");
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("a", 1)]));
    // The failed connection moved the client on without a reported disconnect.
    assert_eq!(rec.count(|e| matches!(e, Event::Disconnected { .. })), 0);
}

#[test]
fn stop_ends_a_request_to_a_server_that_never_answers() {
    // Accepts connections and never answers: the range blocks in its read.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (accepted, connections) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            if accepted.send(s).is_err() {
                break;
            }
        }
    });
    let mut config = Config::new(url, "svc");
    config.request_timeout = Duration::from_secs(3600);
    config.idle_timeout = None;
    let mut w = Watcher::start(config, balancer(Algorithm::Random), |_| {}).unwrap();
    let held = connections
        .recv_timeout(BOUND)
        .expect("the watcher connects");
    // Stop on another thread, so a stop that hangs fails the test instead of hanging it.
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        w.stop();
        let _ = done.send(());
    });
    assert!(
        stopped.recv_timeout(BOUND).is_ok(),
        "stop did not end a blocked request"
    );
    drop(held);
}

#[test]
fn bad_configuration_is_refused_with_a_reason() {
    let b = balancer(Algorithm::Random);
    for (url, prefix, why) in [
        ("http://127.0.0.1:2379", "", "the prefix is empty"),
        ("http://127.0.0.1:2379", "svc/", "ends with '/'"),
        ("127.0.0.1:2379", "svc", "expected http://HOST:PORT"),
        ("ftp://127.0.0.1:2379", "svc", "expected http://HOST:PORT"),
    ] {
        let e = Watcher::start(Config::new(url, prefix), b.clone(), |_| {}).unwrap_err();
        assert!(e.to_string().contains(why), "{url} {prefix}: {e}");
    }
    let mut config = Config::new("http://127.0.0.1:2379", "svc");
    config.endpoints.clear();
    let e = Watcher::start(config, b, |_| {}).unwrap_err();
    assert!(e.to_string().contains("no etcd endpoint"), "{e}");
}

/// Issue 20, finding 1: etcd wiped and restarted on the same port, at a revision far below the
/// watcher's. The watch's header shows etcd behind: the watcher reads the prefix again
/// instead of waiting for revisions that will mean something else.
#[test]
fn a_wiped_etcd_is_followed_not_kept() {
    let Some(mut etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    for i in 0..60 {
        put(&c, &format!("other/{i}"), "");
    }
    put(&c, "svc/a", "");
    let rev = put(&c, "svc/b", "");
    assert!(rev >= 62, "{rev}");
    let b = balancer(Algorithm::Maglev);
    let rec = Recorder::default();
    let w = watch(&etcd.url(), "svc", &b, &rec);
    assert!(w.wait_for_revision(rev, BOUND));
    etcd.wipe();
    let c = etcd.client();
    put(&c, "svc/c", "");
    put(&c, "svc/d", r#"{"weight": 5}"#);
    c.delete("svc/a").unwrap();
    wait_until("the wiped etcd's membership", BOUND, || {
        members(&b) == owned(&[("c", 1), ("d", 5)])
    });
    assert!(
        rec.count(
            |e| matches!(e, Event::Resynced { reason, .. } if reason.contains("is behind ours"))
        ) >= 1,
        "{:?}",
        rec.events()
    );
    // Still watching the new history.
    let rev = put(&c, "svc/e", "");
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("c", 1), ("d", 5), ("e", 1)]));
}

/// Issue 20, finding 2: every row of tests/membership/values.json written to a real etcd and
/// read by the watcher: the accepted rows become nodes with their weights, the rejected ones
/// are reported and absent.
#[test]
fn the_shared_value_table_through_a_real_etcd() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/membership/values.json"
    );
    let table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let value = |row: &serde_json::Value| -> Vec<u8> {
        match row.get("value").and_then(|v| v.as_str()) {
            Some(text) => text.as_bytes().to_vec(),
            None => {
                let hex = row["value_hex"].as_str().unwrap();
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect()
            }
        }
    };
    // Random builds no table: with weight 2^32-1 in the table, a ring rebuilds its full point
    // budget (MAX_RING_POINTS SHA-256 points) on every change, seconds each in a debug build.
    let b = balancer(Algorithm::Random);
    let rec = Recorder::default();
    let w = watch(&etcd.url(), "svc", &b, &rec);
    let c = etcd.client();
    let mut want = Vec::new();
    for (i, row) in table["accepted"].as_array().unwrap().iter().enumerate() {
        let id = format!("acc-{i:02}");
        c.put(&format!("svc/{id}"), &value(row)).unwrap();
        want.push((id, row["weight"].as_u64().unwrap() as u32));
    }
    let rejected = table["rejected"].as_array().unwrap();
    let mut rev = 0;
    for (i, row) in rejected.iter().enumerate() {
        rev = c.put(&format!("svc/rej-{i:02}"), &value(row)).unwrap();
    }
    assert!(
        w.wait_for_revision(rev, BOUND),
        "at {} of {rev}: {:?}",
        w.revision(),
        &rec.events()[rec.events().len().saturating_sub(3)..]
    );
    assert_eq!(members(&b), want);
    let refused: Vec<String> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Rejected { key, .. } => Some(key),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), rejected.len(), "{refused:?}");
    assert!(refused.iter().all(|k| k.starts_with("svc/rej-")));
}

/// TLS with a client certificate (etcd with --client-cert-auth, as Kubernetes runs it); then
/// the ways it goes wrong, each named, none failing `start`, the balancer keeping what it had.
#[test]
fn tls_with_client_certificates_and_its_failures() {
    let Some(etcd) = EtcdServer::start_tls(true) else {
        return;
    };
    let certs = etcd.certs().unwrap().clone();
    let rev = put(&etcd.client(), "svc/a", r#"{"weight": 3}"#);
    let start = |tls: TlsConfig| {
        let mut config = Config::new(etcd.url(), "svc")
            .backoff(Duration::from_millis(10), Duration::from_millis(200));
        config.tls = Some(tls);
        let b = Arc::new(
            Balancer::new(Algorithm::Ring, [Node::new("kept", 1)], Options::default()).unwrap(),
        );
        let rec = Recorder::default();
        let w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
        (w, b, rec)
    };
    let (w, b, _) = start(certs.client_tls());
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("a", 3)]));
    drop(w);
    for (tls, why) in [
        (
            TlsConfig::with_ca(&certs.other_ca).client_cert(&certs.client_cert, &certs.client_key),
            "not signed by a trusted CA",
        ),
        (
            TlsConfig::with_ca(&certs.ca),
            "wants a client certificate it trusts",
        ),
    ] {
        let (w, b, rec) = start(tls);
        let deadline = std::time::Instant::now() + BOUND;
        while !rec.errors().iter().any(|e| e.contains(why)) {
            assert!(
                std::time::Instant::now() < deadline,
                "{why}: {:?}",
                rec.errors()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(members(&b), owned(&[("kept", 1)]), "{:?}", rec.errors());
        drop(w);
    }
    // Plain http to the TLS port is named too.
    let mut config = Config::new(etcd.url().replace("https", "http"), "svc");
    config.backoff_min = Duration::from_millis(10);
    let rec = Recorder::default();
    let w = Watcher::start(config, balancer(Algorithm::Ring), rec.callback()).unwrap();
    wait_until("an error", BOUND, || !rec.errors().is_empty());
    drop(w);
    // An unreadable file is bad configuration: `start` says which.
    let mut config = Config::new(etcd.url(), "svc");
    config.tls = Some(TlsConfig::with_ca("/nonexistent/ca.pem"));
    let e = Watcher::start(config, balancer(Algorithm::Ring), |_| {}).unwrap_err();
    assert!(
        e.to_string().contains("CA bundle /nonexistent/ca.pem"),
        "{e}"
    );
    let mut config = Config::new(etcd.url(), "svc");
    config.tls = Some(TlsConfig::with_ca(&certs.ca).client_cert(&certs.client_cert, &certs.ca));
    let e = Watcher::start(config, balancer(Algorithm::Ring), |_| {}).unwrap_err();
    assert!(e.to_string().contains("client key"), "{e}");
    // The key may sit in the certificate's file.
    let both = etcd.data_dir().join("client-both.pem");
    let mut pem = std::fs::read(&certs.client_cert).unwrap();
    pem.extend(std::fs::read(&certs.client_key).unwrap());
    std::fs::write(&both, pem).unwrap();
    let mut tls = TlsConfig::with_ca(&certs.ca);
    tls.cert_file = Some(both);
    let (w, b, _) = start(tls);
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("a", 3)]));
}

/// etcd user authentication: the token is fetched and sent; a wrong password and a missing
/// user are named, and the balancer keeps what it had.
#[test]
fn auth_logs_in_and_names_a_wrong_password() {
    let Some(mut etcd) = EtcdServer::start() else {
        return;
    };
    etcd.enable_auth("s3cret");
    let rev = put(&etcd.client(), "svc/a", "");
    let start = |auth: Option<(&str, &str)>| {
        let mut config = Config::new(etcd.url(), "svc")
            .backoff(Duration::from_millis(10), Duration::from_millis(200));
        config.auth = auth.map(|(u, p)| (u.to_string(), p.to_string()));
        let b = Arc::new(
            Balancer::new(Algorithm::Ring, [Node::new("kept", 1)], Options::default()).unwrap(),
        );
        let rec = Recorder::default();
        let w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
        (w, b, rec)
    };
    let (w, b, _) = start(Some(("root", "s3cret")));
    assert!(w.wait_for_revision(rev, BOUND));
    assert_eq!(members(&b), owned(&[("a", 1)]));
    // The watch carries the token too: a change arrives.
    let rev = put(&etcd.client(), "svc/b", "");
    assert!(w.wait_for_revision(rev, BOUND));
    drop(w);
    for (auth, why) in [
        (
            Some(("root", "wrong")),
            "etcd refused user \"root\": etcdserver: authentication failed, invalid user ID or password",
        ),
        (None, "user name is empty"),
    ] {
        let (w, b, rec) = start(auth);
        wait_until(why, BOUND, || rec.errors().iter().any(|e| e.contains(why)));
        assert_eq!(members(&b), owned(&[("kept", 1)]), "{:?}", rec.errors());
        drop(w);
    }
}

/// Paged ranges against the real gateway (`limit`, the last key + NUL, `revision` as strings):
/// the pages make up the whole prefix, at the first page's revision.
#[test]
fn a_paged_range_reads_the_whole_prefix() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    let mut rev = 0;
    for i in 0..7 {
        rev = put(&c, &format!("svc/n{i}"), &format!(r#"{{"weight": {i}}}"#));
    }
    put(&c, "svd/outside", "");
    let range = Client::new(&[etcd.url()])
        .unwrap()
        .with_page_size(2)
        .range_prefix(b"svc/")
        .unwrap();
    assert_eq!(range.kvs.len(), 7);
    assert_eq!(range.revision, rev + 1);
    let mut config = Config::new(etcd.url(), "svc");
    config.page_size = 3;
    let b = balancer(Algorithm::Ring);
    let w = Watcher::start(config, b.clone(), |_| {}).unwrap();
    assert!(w.wait_for_revision(rev, BOUND));
    let want: Vec<(String, u32)> = (0..7).map(|i| (format!("n{i}"), i)).collect();
    assert_eq!(members(&b), want);
}
