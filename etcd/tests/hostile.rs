//! The watcher against a scripted fake etcd ([`FakeEtcd`]) serving the hostile answers of
//! issue 20: lines that never end, trickles, a compaction on every watch, malformed ranges, a
//! wiped cluster and another cluster behind the same endpoint. Each test bounds what the
//! watcher may accept (bytes, memory, requests per second, time) and checks that the
//! balancer keeps its last good membership.

use liblb_core::{Algorithm, Balancer, Node, Options};
use liblb_etcd::testing::gateway::{compacted, created, header, range};
use liblb_etcd::testing::{FakeEtcd, Recorder, Reply, wait_until};
use liblb_etcd::{Config, Event, Watcher};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the watcher may take to react.
const BOUND: Duration = Duration::from_secs(10);
const MIB: u64 = 1024 * 1024;
const CHUNKED: &str = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

fn balancer() -> Arc<Balancer> {
    let options = Options {
        seed: Some(1),
        ..Options::default()
    };
    Arc::new(Balancer::new(Algorithm::Ring, Vec::<Node>::new(), options).unwrap())
}

fn config(url: &str) -> Config {
    Config::new(url, "svc").backoff(Duration::from_millis(5), Duration::from_millis(100))
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

/// One chunk of a chunked body holding `text`.
fn chunk(text: &str) -> String {
    format!("{:x}\r\n{text}\r\n", text.len())
}

/// A `Disconnected` naming `what` arrives within the bound.
fn wait_for_error(rec: &Recorder, what: &str) {
    wait_until(&format!("a Disconnected naming {what:?}"), BOUND, || {
        rec.errors().iter().any(|e| e.contains(what))
    });
}

/// The process's resident memory, from /proc/self/status.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The first range: a and b (weight 2) at revision 5.
fn first_range() -> Reply {
    Reply::Json(range(
        5,
        1,
        &[("svc/a", ""), ("svc/b", r#"{"weight": 2}"#)],
        false,
    ))
}

#[test]
fn a_watch_message_that_never_ends_is_cut_at_the_cap() {
    let fake = FakeEtcd::start(|r, n| match (r.path.as_str(), n) {
        ("/v3/kv/range", _) => first_range(),
        // A message that opens a string and never closes it.
        ("/v3/watch", 0) => Reply::Endless {
            start: format!(
                "{CHUNKED}{}7fffffff\r\n{{\"result\":{{\"x\":\"",
                chunk(&format!("{}\n", created(5, 1)))
            )
            .into_bytes(),
            repeat: vec![b'a'; 64 * 1024],
        },
        _ => Reply::Watch(vec![created(5, 1)]),
    });
    let before = rss();
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), b.clone(), rec.callback()).unwrap();
    wait_for_error(
        &rec,
        "watch message larger than 16 MiB, the limit for one message",
    );
    let grown = rss().saturating_sub(before);
    // 16 MiB of message, plus what sat in the loopback socket buffers when it gave up.
    assert!(
        fake.written() < 28 * MIB,
        "the watcher accepted {} MiB",
        fake.written() / MIB
    );
    assert!(grown < 64 * MIB, "memory grew by {} MiB", grown / MIB);
    // It reads the prefix again (the message may have been a big burst) and goes on.
    wait_until("a resync", BOUND, || {
        rec.count(|e| matches!(e, Event::Resynced { reason, .. } if reason.contains("16 MiB"))) > 0
    });
    assert_eq!(members(&b), owned(&[("a", 1), ("b", 2)]));
    drop(w);
}

#[test]
fn a_header_line_that_never_ends_is_refused() {
    let fake = FakeEtcd::start(|_, _| Reply::Endless {
        start: b"HTTP/1.1 200 OK\r\nX-Padding: ".to_vec(),
        repeat: vec![b'a'; 64 * 1024],
    });
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), balancer(), rec.callback()).unwrap();
    wait_for_error(&rec, "response head longer than 65536 bytes");
    drop(w);
    // 64 KiB of head, plus the loopback socket buffers.
    assert!(
        fake.written() < 16 * MIB,
        "the watcher accepted {} MiB",
        fake.written() / MIB
    );
}

#[test]
fn a_chunk_size_line_that_never_ends_is_refused() {
    let fake = FakeEtcd::start(|r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Endless {
            start: CHUNKED.as_bytes().to_vec(),
            repeat: vec![b'1'; 64 * 1024],
        },
    });
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), b.clone(), rec.callback()).unwrap();
    wait_for_error(&rec, "chunk-size line longer than 1024 bytes");
    drop(w);
    assert!(
        fake.written() < 16 * MIB,
        "the watcher accepted {} MiB",
        fake.written() / MIB
    );
    assert_eq!(members(&b), owned(&[("a", 1), ("b", 2)]));
}

#[test]
fn a_trickled_range_times_out_as_a_whole() {
    let answer = range(5, 1, &[("svc/a", "")], false).to_string();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
        answer.len()
    );
    // One byte every 100 ms: ~20 s for the whole answer, each read well within any timeout.
    let fake = FakeEtcd::start(move |_, _| Reply::Trickle {
        start: Vec::new(),
        bytes: response.clone().into_bytes(),
        every: Duration::from_millis(100),
    });
    let mut config = config(&fake.url());
    config.request_timeout = Duration::from_secs(1);
    let rec = Recorder::default();
    let started = Instant::now();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    wait_until("the range to time out", Duration::from_secs(5), || {
        rec.errors()
            .iter()
            .any(|e| e.contains("no complete answer within the request timeout (1s)"))
    });
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(w.revision(), 0);
}

#[test]
fn a_trickled_watch_is_reported_as_a_stall_each_time() {
    let message = format!("{}\n", liblb_etcd::testing::gateway::put(6, 1, "svc/c", ""));
    let trickled = chunk(&message).into_bytes();
    let fake = FakeEtcd::start(move |r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Trickle {
            start: format!("{CHUNKED}{}", chunk(&format!("{}\n", created(5, 1)))).into_bytes(),
            bytes: trickled.clone(),
            every: Duration::from_millis(100),
        },
    });
    let mut config = config(&fake.url());
    config.idle_timeout = Some(Duration::from_secs(1));
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
    wait_until("two stalls reported", Duration::from_secs(8), || {
        rec.errors()
            .iter()
            .filter(|e| e.contains("the watch stalled"))
            .count()
            >= 2
    });
    assert!(
        rec.errors()
            .iter()
            .any(|e| e.contains("no complete message within 1s (idle_timeout)")),
        "{:?}",
        rec.errors()
    );
    assert_eq!(members(&b), owned(&[("a", 1), ("b", 2)]));
    drop(w);
}

#[test]
fn a_compaction_on_every_watch_backs_off() {
    let fake = FakeEtcd::start(|r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Watch(vec![created(5, 1), compacted(5, 1, 4)]),
    });
    let config =
        Config::new(fake.url(), "svc").backoff(Duration::from_millis(20), Duration::from_secs(1));
    let rec = Recorder::default();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    std::thread::sleep(Duration::from_secs(3)); // the window over which requests are counted
    drop(w);
    let ranges = fake.count("/v3/kv/range");
    // Pauses of at least 10, 20, 40, ... ms capped at 500 ms (half of 1 s): at most ~12 in 3 s.
    assert!(ranges <= 15, "{ranges} ranges in 3 s: a tight loop");
    assert!(ranges >= 3, "only {ranges} ranges: the resync stopped");
    assert!(
        rec.count(|e| matches!(e, Event::Resynced { reason, .. } if reason.contains("compacted")))
            >= 2
    );
}

#[test]
fn malformed_ranges_keep_the_last_good_membership() {
    let fake = FakeEtcd::start(|r, n| match (r.path.as_str(), n) {
        ("/v3/kv/range", 0) => first_range(),
        ("/v3/kv/range", 1) => Reply::Json(json!({"header": header(9, 1), "kvs": {"oops": 1}})),
        ("/v3/kv/range", 2) => Reply::Json(json!({"header": ["x"], "kvs": []})),
        ("/v3/kv/range", 3) => Reply::Json(json!({"header": header(9, 1), "kvs": [{"oops": 1}]})),
        ("/v3/kv/range", 4) => Reply::Json(json!({"header": header(9, 1), "more": "yes"})),
        ("/v3/kv/range", 5) => Reply::Json(json!({"header": header(9, 1), "more": true})),
        ("/v3/kv/range", _) => Reply::Json(range(9, 1, &[("svc/c", "")], false)),
        // Every watch is compacted: each one asks for another range.
        _ => Reply::Watch(vec![created(5, 1), compacted(9, 1, 8)]),
    });
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), b.clone(), rec.callback()).unwrap();
    assert!(w.wait_for_revision(9, BOUND), "{:?}", rec.events());
    assert_eq!(members(&b), owned(&[("c", 1)]));
    let applied: Vec<Vec<(String, u32)>> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Applied { nodes, .. } => {
                Some(nodes.iter().map(|n| (n.id.to_string(), n.weight)).collect())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        applied,
        [owned(&[("a", 1), ("b", 2)]), owned(&[("c", 1)])],
        "a malformed range was applied"
    );
    let errors = rec.errors().join("\n");
    for why in [
        "\"kvs\" is not an array",
        "the answer's header is not an object",
        "a key-value is not an object with a key",
        "\"more\" is not a boolean",
        "says \"more\" but holds no key",
    ] {
        assert!(
            errors.contains(why),
            "no error naming {why:?} in:\n{errors}"
        );
    }
}

#[test]
fn paged_ranges_are_one_snapshot() {
    let fake = FakeEtcd::start(|r, n| match (r.path.as_str(), n) {
        ("/v3/kv/range", 0) => Reply::Json(range(7, 1, &[("svc/a", ""), ("svc/b", "")], true)),
        // Later pages: the store has moved on (header 9), the keys are read at 7.
        ("/v3/kv/range", 1) => Reply::Json(range(9, 1, &[("svc/c", ""), ("svc/d", "")], true)),
        ("/v3/kv/range", _) => Reply::Json(range(9, 1, &[("svc/e", "")], false)),
        _ => Reply::Watch(vec![created(9, 1)]),
    });
    let mut config = config(&fake.url());
    config.page_size = 2;
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
    assert!(w.wait_for_revision(7, BOUND), "{:?}", rec.events());
    let ids: Vec<String> = members(&b).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"]);
    assert_eq!(
        rec.applied()[0],
        7,
        "the snapshot's revision is the first page's"
    );
    let ranges: Vec<_> = fake
        .received()
        .into_iter()
        .filter(|r| r.path == "/v3/kv/range")
        .map(|r| r.body)
        .collect();
    let b64 = |s: &[u8]| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    assert_eq!(ranges[0]["limit"], "2");
    assert_eq!(ranges[0].get("revision"), None);
    assert_eq!(ranges[1]["key"], b64(b"svc/b\0"));
    assert_eq!(ranges[1]["revision"], "7");
    assert_eq!(ranges[2]["key"], b64(b"svc/d\0"));
    assert_eq!(ranges[2]["revision"], "7");
    assert_eq!(ranges[2]["range_end"], b64(b"svc0"));
}

#[test]
fn a_wiped_etcd_behind_our_revision_resyncs() {
    let fake = FakeEtcd::start(|r, n| match (r.path.as_str(), n) {
        ("/v3/kv/range", 0) => Reply::Json(range(63, 1, &[("svc/a", ""), ("svc/b", "")], false)),
        // The wiped etcd: revision 3, c and d.
        ("/v3/kv/range", _) => Reply::Json(range(
            3,
            1,
            &[("svc/c", ""), ("svc/d", r#"{"weight": 5}"#)],
            false,
        )),
        // The first watch ends (etcd killed); the next one finds an empty etcd at revision 1.
        ("/v3/watch", 0) => {
            Reply::Raw(format!("{CHUNKED}{}", chunk(&format!("{}\n", created(63, 1)))).into_bytes())
        }
        ("/v3/watch", 1) => Reply::Watch(vec![created(1, 1)]),
        _ => Reply::Watch(vec![created(3, 1)]),
    });
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), b.clone(), rec.callback()).unwrap();
    wait_until("the membership of the wiped etcd", BOUND, || {
        members(&b) == owned(&[("c", 1), ("d", 5)])
    });
    assert_eq!(w.revision(), 3);
    assert!(
        rec.count(|e| matches!(e, Event::Resynced { revision: 3, reason }
            if reason.contains("etcd's revision 1 is behind ours (63)")))
            == 1,
        "{:?}",
        rec.events()
    );
}

#[test]
fn another_cluster_at_the_same_endpoint_resyncs() {
    let fake = FakeEtcd::start(|r, n| match (r.path.as_str(), n) {
        ("/v3/kv/range", 0) => Reply::Json(range(10, 0xaa, &[("svc/a", "")], false)),
        ("/v3/kv/range", _) => Reply::Json(range(80, 0xbb, &[("svc/x", "")], false)),
        ("/v3/watch", 0) => Reply::Raw(
            format!("{CHUNKED}{}", chunk(&format!("{}\n", created(10, 0xaa)))).into_bytes(),
        ),
        // Another cluster, its revision ahead of ours: only the cluster id tells.
        ("/v3/watch", 1) => Reply::Watch(vec![created(80, 0xbb)]),
        _ => Reply::Watch(vec![created(80, 0xbb)]),
    });
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), b.clone(), rec.callback()).unwrap();
    assert!(w.wait_for_revision(80, BOUND), "{:?}", rec.events());
    assert_eq!(members(&b), owned(&[("x", 1)]));
    assert!(
        rec.count(|e| matches!(e, Event::Resynced { reason, .. }
            if reason.contains("another cluster answers (cluster id bb, was aa)")))
            == 1,
        "{:?}",
        rec.events()
    );
}

#[test]
fn a_refused_token_is_renewed_once() {
    let fake = FakeEtcd::start(|r, n| match (r.path.as_str(), n) {
        ("/v3/auth/authenticate", _) => {
            assert_eq!(r.body, json!({"name": "web", "password": "pw"}));
            Reply::Json(json!({"header": header(1, 1), "token": format!("token-{n}")}))
        }
        // token-0 has expired by the time it is used.
        ("/v3/kv/range", _) if r.token.as_deref() != Some("token-1") => {
            let body = r#"{"error":"etcdserver: invalid auth token","message":"etcdserver: invalid auth token","code":16}"#;
            Reply::Raw(
                format!(
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes(),
            )
        }
        ("/v3/kv/range", _) => first_range(),
        _ => Reply::Watch(vec![created(5, 1)]),
    });
    let mut config = config(&fake.url());
    config.auth = Some(("web".into(), "pw".into()));
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
    assert!(w.wait_for_revision(5, BOUND), "{:?}", rec.events());
    assert_eq!(fake.count("/v3/auth/authenticate"), 2);
    assert_eq!(rec.errors(), Vec::<String>::new(), "the renewal is silent");
    wait_until("the watch request", BOUND, || fake.count("/v3/watch") > 0);
    let watch = fake.received().into_iter().find(|r| r.path == "/v3/watch");
    assert_eq!(watch.and_then(|r| r.token).as_deref(), Some("token-1"));
}

/// A server that accepts the connection and never answers the TLS handshake: the handshake is
/// part of the request, so the request timeout ends it (before, the handshake's reads had no
/// deadline at all).
#[test]
fn a_silent_tls_server_times_out() {
    let dir = std::env::temp_dir().join(format!("liblb-silent-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certs = liblb_etcd::testing::Certs::generate(&dir);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let mut config = config(&url);
    config.tls = Some(liblb_etcd::TlsConfig::with_ca(&certs.ca));
    config.request_timeout = Duration::from_secs(1);
    let rec = Recorder::default();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    wait_for_error(&rec, "no complete answer within the request timeout (1s)");
    drop(w);
    drop(held.join());
    drop(std::fs::remove_dir_all(&dir));
}

/// A TLS server that trickles its answer one byte every 50 ms inside one TLS record: one
/// rustls read is many socket reads, and each must get only what is left of the request
/// deadline, not the whole timeout again (before, the answer took ~13 s and was accepted).
#[test]
fn a_trickled_tls_answer_times_out_as_a_whole() {
    let dir = std::env::temp_dir().join(format!("liblb-trickle-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certs = liblb_etcd::testing::Certs::generate(&dir);
    let answer = range(5, 1, &[("svc/a", "")], false).to_string();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
        answer.len()
    );
    let url =
        liblb_etcd::testing::tls_trickle(&certs, response.into_bytes(), Duration::from_millis(50));
    let mut config = config(&url);
    config.tls = Some(liblb_etcd::TlsConfig::with_ca(&certs.ca));
    config.request_timeout = Duration::from_secs(1);
    let rec = Recorder::default();
    let started = Instant::now();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    wait_until(
        "the trickled TLS range to time out",
        Duration::from_secs(3),
        || {
            rec.errors()
                .iter()
                .any(|e| e.contains("no complete answer within the request timeout (1s)"))
        },
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(w.revision(), 0, "{:?}", rec.events());
    drop(w);
    drop(std::fs::remove_dir_all(&dir));
}

/// A 401/403-style gateway error with etcd's message.
fn refused(status: &str, message: &str) -> Reply {
    let body = json!({"error": message, "message": message, "code": 7}).to_string();
    Reply::Raw(
        format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// A watch that answers `messages` and then closes the connection.
fn watch_then_close(messages: &[serde_json::Value]) -> Reply {
    let mut bytes = CHUNKED.to_string();
    for m in messages {
        bytes += &chunk(&format!("{m}\n"));
    }
    Reply::Raw(bytes.into_bytes())
}

/// i64::MAX as a revision would overflow the next watch's start (a panic in debug, which
/// killed the watcher thread): refused as not a revision, and the watcher goes on.
#[test]
fn a_revision_of_i64_max_is_refused() {
    let max = i64::MAX.to_string();
    let fake = FakeEtcd::start(move |r, n| match (r.path.as_str(), n) {
        ("/v3/kv/range", _) => first_range(),
        ("/v3/watch", 0) => {
            let mut put = liblb_etcd::testing::gateway::put(6, 1, "svc/c", "");
            put["result"]["events"][0]["kv"]["mod_revision"] = json!(max.clone());
            watch_then_close(&[created(5, 1), put])
        }
        _ => Reply::Watch(vec![created(5, 1)]),
    });
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), b.clone(), rec.callback()).unwrap();
    wait_for_error(&rec, "field mod_revision is not a revision");
    wait_until("the watch after it", BOUND, || fake.count("/v3/watch") >= 2);
    assert_eq!(w.revision(), 5);
    assert_eq!(members(&b), owned(&[("a", 1), ("b", 2)]));
    drop(w);
    // A range header at i64::MAX, or below 0, is refused too.
    for bad in [i64::MAX, -3] {
        let fake = FakeEtcd::start(move |_, _| {
            let mut answer = range(5, 1, &[("svc/a", "")], false);
            answer["header"]["revision"] = json!(bad.to_string());
            Reply::Json(answer)
        });
        let client = liblb_etcd::Client::new(&[fake.url()]).unwrap();
        let e = client.range_prefix(b"svc/").unwrap_err().to_string();
        assert!(e.contains("field revision is not a revision"), "{e}");
    }
}

/// A proxy that answers "created" and closes at once: that is no working watch, so the backoff
/// keeps growing (before, every "created" reset it, and the watcher reconnected every few ms).
#[test]
fn a_watch_created_then_closed_backs_off() {
    let fake = FakeEtcd::start(|r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => watch_then_close(&[created(5, 1)]),
    });
    let config = config(&fake.url()).backoff(Duration::from_millis(5), Duration::from_millis(500));
    let rec = Recorder::default();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    drop(w);
    // 5, 10, ... 320 ms (half to all of each), then 250-500 ms: about 15 in 3 s.
    let watches = fake.count("/v3/watch");
    assert!(watches <= 30, "{watches} watches in 3 s");
}

/// Events whose revisions go back (to or below the last applied one) are refused whole and the
/// prefix is read again: a replayed old put must not bring back a deleted node.
#[test]
fn decreasing_and_negative_event_revisions_are_refused() {
    use liblb_etcd::testing::gateway::put;
    let fake = FakeEtcd::start(|r, n| match (r.path.as_str(), n) {
        ("/v3/kv/range", 0) => Reply::Json(range(5, 1, &[("svc/a", "")], false)),
        ("/v3/kv/range", _) => Reply::Json(range(10, 1, &[("svc/a", ""), ("svc/b", "")], false)),
        ("/v3/watch", 0) => Reply::Watch(vec![
            created(5, 1),
            put(10, 1, "svc/b", ""),
            put(3, 1, "svc/c", ""),
            put(-7, 1, "svc/d", ""),
        ]),
        _ => Reply::Watch(vec![created(10, 1)]),
    });
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config(&fake.url()), b.clone(), rec.callback()).unwrap();
    assert!(w.wait_for_revision(10, BOUND), "{:?}", rec.events());
    wait_until("the watch after the resync", BOUND, || {
        fake.count("/v3/watch") >= 2
    });
    assert_eq!(members(&b), owned(&[("a", 1), ("b", 1)]));
    assert_eq!(w.revision(), 10);
    let applied = rec.applied();
    assert!(applied.windows(2).all(|p| p[0] <= p[1]), "{applied:?}");
    let starts: Vec<String> = fake
        .received()
        .into_iter()
        .filter(|r| r.path == "/v3/watch")
        .map(|r| r.body["create_request"]["start_revision"].to_string())
        .collect();
    assert_eq!(starts[..2], ["\"6\"", "\"11\""], "{starts:?}");
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::Resynced { reason, .. }
            if reason.contains("watch event at revision 3 after revision 10"))),
        "{:?}",
        rec.events()
    );
    drop(w);
}

/// A server answering `more: true` one key a page forever: the whole paged read has one
/// deadline (the request timeout), and its keys and values one size limit (256 MiB).
#[test]
fn an_endless_paged_range_is_bounded_in_time_and_bytes() {
    // Time: pages of one small key, each quick, but never the last.
    let fake = FakeEtcd::start(|r, n| match r.path.as_str() {
        "/v3/kv/range" => Reply::Json(range(5, 1, &[(&format!("svc/{n:09}"), "")], true)),
        _ => Reply::Watch(vec![created(5, 1)]),
    });
    let client = liblb_etcd::Client::new(&[fake.url()])
        .unwrap()
        .with_timeouts(Duration::from_secs(1), Duration::from_secs(1));
    let started = Instant::now();
    let e = client.range_prefix(b"svc/").unwrap_err().to_string();
    assert!(
        e.contains("the paged range did not finish within the request timeout (1s)"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(fake);
    // Bytes: pages of one 8 MiB value each.
    let value = "v".repeat(8 << 20);
    let fake = FakeEtcd::start(move |r, n| match r.path.as_str() {
        "/v3/kv/range" => Reply::Json(range(5, 1, &[(&format!("svc/{n:09}"), &value)], true)),
        _ => Reply::Watch(vec![created(5, 1)]),
    });
    let client = liblb_etcd::Client::new(&[fake.url()])
        .unwrap()
        .with_timeouts(Duration::from_secs(1), Duration::from_secs(120));
    let e = client.range_prefix(b"svc/").unwrap_err().to_string();
    assert!(
        e.contains("the range's pages hold more than 256 MiB of keys and values"),
        "{e}"
    );
    assert!(
        fake.count("/v3/kv/range") <= 33,
        "{}",
        fake.count("/v3/kv/range")
    );
}

/// A user without the right to read the prefix: etcd says "permission denied", and logging in
/// again cannot help, so the watcher does not (before, it logged in twice per retry).
#[test]
fn permission_denied_causes_no_new_login() {
    let fake = FakeEtcd::start(|r, n| match r.path.as_str() {
        "/v3/auth/authenticate" => {
            Reply::Json(json!({"header": header(1, 1), "token": format!("token-{n}")}))
        }
        _ => refused("403 Forbidden", "etcdserver: permission denied"),
    });
    let mut config = config(&fake.url());
    config.auth = Some(("web".into(), "pw".into()));
    let rec = Recorder::default();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    wait_until("three refused ranges", BOUND, || {
        rec.errors()
            .iter()
            .filter(|e| e.contains("permission denied"))
            .count()
            >= 3
    });
    drop(w);
    assert_eq!(fake.count("/v3/auth/authenticate"), 1);
}

/// Config's Debug shows the user, never the password.
#[test]
fn config_debug_hides_the_password() {
    let mut config = config("http://127.0.0.1:2379");
    config.auth = Some(("web".into(), "s3cret-pw".into()));
    let text = format!("{config:?}");
    assert!(!text.contains("s3cret-pw"), "{text}");
    assert!(
        text.contains("\"web\"") && text.contains("redacted"),
        "{text}"
    );
    assert!(text.contains("prefix: \"svc\""), "{text}");
}

/// A gateway that accepts the watch and never says "created": the request timeout bounds the
/// wait (before, only idle_timeout did: 15 minutes by default).
#[test]
fn a_watch_never_created_times_out() {
    let fake = FakeEtcd::start(|r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Watch(vec![]),
    });
    let mut config = config(&fake.url());
    config.request_timeout = Duration::from_secs(1);
    config.idle_timeout = Some(Duration::from_secs(3600));
    let rec = Recorder::default();
    let started = Instant::now();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    wait_until(
        "the watch's creation to time out",
        Duration::from_secs(4),
        || {
            rec.errors()
                .iter()
                .any(|e| e.contains("the watch was not created within the request timeout (1s)"))
        },
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    drop(w);
}

/// A panicking on_event callback is logged and the watcher goes on (before, its thread died
/// and the balancer froze).
#[test]
fn a_panicking_callback_does_not_stop_the_watcher() {
    use liblb_etcd::testing::gateway::put;
    let fake = FakeEtcd::start(|r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Watch(vec![created(5, 1), put(6, 1, "svc/c", "")]),
    });
    let b = balancer();
    let w = Watcher::start(config(&fake.url()), b.clone(), |e| {
        if matches!(e, Event::Applied { revision: 5, .. }) {
            panic!("a callback bug");
        }
    })
    .unwrap();
    wait_until("revision 6 applied", BOUND, || members(&b).len() == 3);
    assert!(w.wait_for_revision(6, BOUND));
    drop(w);
}

/// An endpoint that answers 5xx (etcd's gateway answers 503 on a member without a leader) is
/// skipped for the next one, like one that refuses connections; the watch asks etcd to
/// require a leader (`Grpc-Metadata-hasleader: true`).
#[test]
fn a_5xx_answer_moves_on_to_the_next_endpoint() {
    let broken =
        FakeEtcd::start(|_, _| refused("503 Service Unavailable", "etcdserver: no leader"));
    let good = FakeEtcd::start(|r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Watch(vec![created(5, 1)]),
    });
    let mut config = config(&broken.url());
    config.endpoints.push(good.url());
    let b = balancer();
    let rec = Recorder::default();
    let w = Watcher::start(config, b.clone(), rec.callback()).unwrap();
    assert!(w.wait_for_revision(5, BOUND), "{:?}", rec.events());
    wait_until("the watch", BOUND, || good.count("/v3/watch") > 0);
    assert_eq!(rec.errors(), Vec::<String>::new());
    assert_eq!(broken.count("/v3/kv/range"), 1);
    assert_eq!(
        broken.count("/v3/watch"),
        0,
        "the endpoint that answered is kept"
    );
    let watch = good.received().into_iter().find(|r| r.path == "/v3/watch");
    assert_eq!(watch.and_then(|r| r.has_leader).as_deref(), Some("true"));
    drop(w);
}

/// A watch that etcd ends with "no leader" (the member lost its leader; the watch required
/// one) is reopened on the next endpoint.
#[test]
fn a_watch_ended_for_no_leader_moves_on_to_the_next_endpoint() {
    let no_leader = json!({"error": {"grpc_code": 14, "http_code": 503,
        "message": "etcdserver: no leader", "http_status": "Service Unavailable"}});
    let leaderless = FakeEtcd::start(move |r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Watch(vec![created(5, 1), no_leader.clone()]),
    });
    let good = FakeEtcd::start(|r, _| match r.path.as_str() {
        "/v3/kv/range" => first_range(),
        _ => Reply::Watch(vec![created(5, 1)]),
    });
    let mut config = config(&leaderless.url());
    config.endpoints.push(good.url());
    let rec = Recorder::default();
    let w = Watcher::start(config, balancer(), rec.callback()).unwrap();
    wait_until("a watch on the next endpoint", BOUND, || {
        good.count("/v3/watch") > 0
    });
    assert_eq!(leaderless.count("/v3/watch"), 1, "{:?}", rec.errors());
    drop(w);
}
