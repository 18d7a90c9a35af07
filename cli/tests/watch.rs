//! `lb watch` against a real etcd server (see `liblb_etcd::testing`; skipped loudly without
//! one unless `LB_REQUIRE_ETCD=1`): live key movement in the human output, and two `lb watch
//! --json` processes agreeing on membership and placement at every revision.

use liblb_core::{Algorithm, Balancer, Node, Options};
use liblb_etcd::testing::EtcdServer;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// How long `lb watch` may take to print a change.
const BOUND: Duration = Duration::from_secs(15);

/// A running `lb watch`, its stdout and stderr lines arriving on channels; killed on drop.
struct Lb {
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
}

impl Lb {
    fn spawn(args: &[&str]) -> Lb {
        Lb::spawn_env(args, &[])
    }

    fn spawn_env(args: &[&str], env: &[(&str, &str)]) -> Lb {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lb"))
            .arg("watch")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("lb runs");
        let lines = |pipe: Box<dyn std::io::Read + Send>| {
            let (send, receive) = channel();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if send.send(line).is_err() {
                        break;
                    }
                }
            });
            receive
        };
        let stdout = lines(Box::new(child.stdout.take().unwrap()));
        let stderr = lines(Box::new(child.stderr.take().unwrap()));
        Lb {
            child,
            stdout,
            stderr,
        }
    }

    /// Lines from `from` until one satisfies `done` (returned last); panics after `BOUND`.
    fn until(from: &Receiver<String>, what: &str, done: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + BOUND;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match from.recv_timeout(left) {
                Ok(line) => {
                    let stop = done(&line);
                    seen.push(line);
                    if stop {
                        return seen;
                    }
                }
                Err(_) => panic!("no line {what} within {BOUND:?}; got {seen:#?}"),
            }
        }
    }
}

impl Drop for Lb {
    fn drop(&mut self) {
        drop(self.child.kill());
        drop(self.child.wait());
    }
}

fn put(etcd: &EtcdServer, key: &str, value: &str) -> i64 {
    etcd.client().put(key, value.as_bytes()).unwrap()
}

/// Where each key lands on `nodes`, by a balancer built here.
fn placement(algorithm: Algorithm, nodes: &[Node], keys: &[String]) -> Vec<Option<String>> {
    let b = Balancer::new(algorithm, nodes.to_vec(), Options::default()).unwrap();
    keys.iter()
        .map(|k| b.pick(Some(k.as_bytes())).ok().map(|p| p.id().to_string()))
        .collect()
}

#[test]
fn human_output_shows_changes_and_key_movement() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    put(&etcd, "svc/a", "");
    let rev = put(&etcd, "svc/b", r#"{"weight": 2}"#);
    let keys: Vec<String> = (0..20).map(|i| format!("user-{i}")).collect();
    let url = etcd.url();
    let mut args = vec!["--etcd", &url, "--prefix", "svc", "-a", "ring"];
    for k in &keys {
        args.extend(["--key", k]);
    }
    let lb = Lb::spawn(&args);
    let first = format!("revision {rev}: 2 nodes");
    Lb::until(&lb.stdout, &first, |l| l == first);
    Lb::until(&lb.stdout, "with the members", |l| {
        l == "  members: a=1 b=2"
    });

    let before = placement(
        Algorithm::Ring,
        &[Node::new("a", 1), Node::new("b", 2)],
        &keys,
    );
    let rev = put(&etcd, "svc/c", "");
    let header = format!("revision {rev}: +c (weight 1)");
    Lb::until(&lb.stdout, &header, |l| l == header);
    let after_nodes = [Node::new("a", 1), Node::new("b", 2), Node::new("c", 1)];
    let after = placement(Algorithm::Ring, &after_nodes, &keys);
    let block = Lb::until(&lb.stdout, "for the last key", |l| {
        l.starts_with("  user-19 ")
    });
    assert_eq!(block[0], "  members: a=1 b=2 c=1");
    let mut moved = 0;
    for (i, key) in keys.iter().enumerate() {
        let (was, now) = (before[i].as_deref().unwrap(), after[i].as_deref().unwrap());
        let expected = if was == now {
            format!("  {key} -> {now}")
        } else {
            moved += 1;
            format!("  {key} -> {now} (moved from {was})")
        };
        assert_eq!(block[i + 1], expected);
    }
    assert!(
        moved > 0,
        "adding a node moved no key: the test shows nothing"
    );

    // A reweight and a removal are named; a malformed value goes to stderr and changes nothing.
    put(&etcd, "svc/b", "{not json");
    let rev = put(&etcd, "svc/a", r#"{"weight": 4}"#);
    let header = format!("revision {rev}: a weight 1 -> 4");
    Lb::until(&lb.stdout, &header, |l| l == header);
    Lb::until(&lb.stderr, "naming the rejected key", |l| {
        l.contains("rejected svc/b") && l.contains("not JSON")
    });
    let rev = etcd.client().delete("svc/c").unwrap();
    let header = format!("revision {rev}: -c");
    Lb::until(&lb.stdout, &header, |l| l == header);
    Lb::until(&lb.stdout, "with the members", |l| {
        l == "  members: a=4 b=2"
    });
}

/// One `--json` line: revision -> (nodes, keys).
type Lines = BTreeMap<i64, (Vec<(String, u32)>, BTreeMap<String, Option<String>>)>;

fn parse(lines: &[String]) -> Lines {
    lines
        .iter()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let nodes = v["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| {
                    (
                        n[0].as_str().unwrap().to_string(),
                        n[1].as_u64().unwrap() as u32,
                    )
                })
                .collect();
            let keys = v["keys"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, id)| (k.clone(), id.as_str().map(str::to_string)))
                .collect();
            (v["revision"].as_i64().unwrap(), (nodes, keys))
        })
        .collect()
}

#[test]
fn two_processes_agree_on_every_revision() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let start = put(&etcd, "svc/n0", "");
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    let url = etcd.url();
    let mut args = vec!["--etcd", &url, "--prefix", "svc", "-a", "maglev", "--json"];
    for k in &keys {
        args.extend(["--key", k]);
    }
    let one = Lb::spawn(&args);
    let two = Lb::spawn(&args);
    let mut seen = [Vec::new(), Vec::new()];
    for (lb, seen) in [&one, &two].into_iter().zip(&mut seen) {
        seen.extend(Lb::until(&lb.stdout, "the first membership", |l| {
            l.starts_with(&format!("{{\"revision\":{start},"))
        }));
    }

    // A first change seen by both means both watches are open and caught up: from here on
    // each change reaches each process in a message of its own, so both print every revision.
    let sentinel = put(&etcd, "svc/n0", "");
    let line = format!("{{\"revision\":{sentinel},");
    for (lb, seen) in [&one, &two].into_iter().zip(&mut seen) {
        seen.extend(Lb::until(&lb.stdout, &line, |l| l.starts_with(&line)));
    }

    // Adds, reweights, drains, removals, a rejected value, and a moment with no nodes.
    let mut written = Vec::new();
    for i in 1..6 {
        written.push(put(
            &etcd,
            &format!("svc/n{i}"),
            &format!(r#"{{"weight": {i}}}"#),
        ));
    }
    for (key, value) in [
        ("svc/n2", r#"{"weight": 9}"#),
        ("svc/n3", r#"{"weight": 0}"#),
        ("svc/n4", "[]"),
        ("svc/n0", r#"{"weight": 2, "tag": 5}"#),
    ] {
        written.push(put(&etcd, key, value));
    }
    let c = etcd.client();
    for i in 0..6 {
        written.push(c.delete(&format!("svc/n{i}")).unwrap());
    }
    let last = put(&etcd, "svc/z", "");
    written.push(last);

    let done = format!("{{\"revision\":{last},");
    for (lb, seen) in [&one, &two].into_iter().zip(&mut seen) {
        seen.extend(Lb::until(&lb.stdout, &done, |l| l.starts_with(&done)));
    }
    let (a, b) = (parse(&seen[0]), parse(&seen[1]));
    for rev in &written {
        assert!(
            a.contains_key(rev) && b.contains_key(rev),
            "revision {rev} not in both"
        );
    }
    let common: Vec<&i64> = a.keys().filter(|r| b.contains_key(r)).collect();
    for rev in common {
        assert_eq!(a[rev], b[rev], "the two processes differ at revision {rev}");
    }
    // Each line's placement is the one the membership gives, computed here independently.
    for (rev, (nodes, placed)) in a.iter().chain(b.iter()) {
        let nodes: Vec<Node> = nodes
            .iter()
            .map(|(id, w)| Node::new(id.as_str(), *w))
            .collect();
        let want = placement(Algorithm::Maglev, &nodes, &keys);
        let got: Vec<Option<String>> = keys.iter().map(|k| placed[k].clone()).collect();
        assert_eq!(got, want, "placement at revision {rev}");
    }
    // The end state and the empty moment both showed.
    assert_eq!(a[&last].0, [("z".to_string(), 1)]);
    assert!(
        a.values()
            .any(|(nodes, placed)| nodes.is_empty() && placed.values().all(Option::is_none))
    );
}

#[test]
fn once_prints_one_line_and_exits() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let rev = put(&etcd, "svc/a", r#"{"weight": 3}"#);
    let o = Command::new(env!("CARGO_BIN_EXE_lb"))
        .args([
            "watch",
            "--etcd",
            &etcd.url(),
            "--prefix",
            "svc",
            "--json",
            "--once",
        ])
        .args(["-a", "jump", "--key", "x"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        format!("{{\"revision\":{rev},\"nodes\":[[\"a\",3]],\"keys\":{{\"x\":\"a\"}}}}\n")
    );
}

#[test]
fn bad_arguments_fail_with_a_clear_message() {
    let lb = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_lb"))
            .arg("watch")
            .args(args)
            .output()
            .unwrap();
        assert!(!o.status.success());
        String::from_utf8(o.stderr).unwrap()
    };
    let url = "http://127.0.0.1:1";
    let e = lb(&[
        "--etcd",
        url,
        "--prefix",
        "svc",
        "-a",
        "round_robin",
        "--key",
        "k",
    ]);
    assert!(
        e.contains("--key needs a keyed algorithm; round_robin ignores keys"),
        "{e}"
    );
    let e = lb(&["--etcd", "localhost:2379", "--prefix", "svc"]);
    assert!(
        e.contains("expected http://HOST:PORT or https://HOST:PORT"),
        "{e}"
    );
    let e = lb(&["--etcd", url, "--prefix", ""]);
    assert!(e.contains("the prefix is empty"), "{e}");
    let e = lb(&["--prefix", "svc"]);
    assert!(e.contains("--etcd"), "{e}");
}

/// The JSON line of an applied membership: (revision, nodes).
fn membership(line: &str) -> (i64, Vec<(String, u32)>) {
    let v: Value = serde_json::from_str(line).unwrap();
    let nodes = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n[0].as_str().unwrap().to_string(),
                n[1].as_u64().unwrap() as u32,
            )
        })
        .collect();
    (v["revision"].as_i64().unwrap(), nodes)
}

fn owned(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
    pairs.iter().map(|(id, w)| (id.to_string(), *w)).collect()
}

/// Issue 20, finding 1, through `lb watch`: etcd wiped and restarted on the same port; the
/// command prints the new membership (before, it kept the old one forever).
#[test]
fn lb_watch_follows_a_wiped_etcd() {
    let Some(mut etcd) = EtcdServer::start() else {
        return;
    };
    let c = etcd.client();
    for i in 0..60 {
        c.put(&format!("other/{i}"), b"").unwrap();
    }
    put(&etcd, "svc/a", "");
    let rev = put(&etcd, "svc/b", "");
    let url = etcd.url();
    let lb = Lb::spawn(&["--etcd", &url, "--prefix", "svc", "--json"]);
    let first = format!("{{\"revision\":{rev},");
    Lb::until(&lb.stdout, &first, |l| l.starts_with(&first));
    etcd.wipe();
    put(&etcd, "svc/c", "");
    put(&etcd, "svc/d", r#"{"weight": 5}"#);
    etcd.client().delete("svc/a").unwrap();
    let want = owned(&[("c", 1), ("d", 5)]);
    Lb::until(&lb.stdout, "with c and d", |l| membership(l).1 == want);
    Lb::until(&lb.stderr, "naming the wipe", |l| {
        l.contains("is behind ours")
    });
}

/// Issue 20, finding 2, through `lb watch`: rows of tests/membership/values.json where the
/// languages used to differ.
#[test]
fn lb_watch_reads_values_by_the_shared_table() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    put(&etcd, "svc/a", r#"{"weight": 2}"#);
    let url = etcd.url();
    let lb = Lb::spawn(&["--etcd", &url, "--prefix", "svc", "--json"]);
    Lb::until(&lb.stdout, "the first membership", |l| l.starts_with('{'));
    put(&etcd, "svc/a", r#"{"weight": 1, "weight": 9}"#); // duplicate: a keeps 2
    put(&etcd, "svc/b", r#"{"weight": -0}"#); // -0 is 0
    put(&etcd, "svc/c", r#"{"tag": -0}"#);
    put(&etcd, "svc/d", r#"{"weight": 1.0}"#); // not an integer literal
    put(&etcd, "svc/e", r#"{"w\u0065ight": 4}"#);
    let last = put(&etcd, "svc/f", r#"{"weight": 1, "w\u0065ight": 2}"#);
    let done = format!("{{\"revision\":{last},");
    let lines = Lb::until(&lb.stdout, &done, |l| l.starts_with(&done));
    assert_eq!(
        membership(lines.last().unwrap()).1,
        owned(&[("a", 2), ("b", 0), ("c", 1), ("e", 4)])
    );
    Lb::until(&lb.stderr, "the duplicate", |l| {
        l.contains("svc/a") && l.contains("duplicate field \"weight\"")
    });
    Lb::until(&lb.stderr, "the fraction", |l| {
        l.contains("svc/d") && l.contains("must be an integer")
    });
}

/// TLS with a client certificate and etcd authentication, as a Kubernetes-style etcd asks;
/// a wrong password is printed and retried, an unreadable file stops the command.
#[test]
fn lb_watch_over_mutual_tls_with_a_user() {
    let Some(mut etcd) = EtcdServer::start_tls(true) else {
        return;
    };
    etcd.enable_auth("s3cret");
    let rev = put(&etcd, "svc/a", r#"{"weight": 3}"#);
    let certs = etcd.certs().unwrap().clone();
    let (url, ca, cert, key) = (
        etcd.url(),
        certs.ca.display().to_string(),
        certs.client_cert.display().to_string(),
        certs.client_key.display().to_string(),
    );
    let tls = [
        "--etcd",
        &url,
        "--prefix",
        "svc",
        "--json",
        "--cacert",
        &ca,
        "--cert",
        &cert,
        "--key-file",
        &key,
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_lb"))
        .arg("watch")
        .args(tls)
        .args(["--user", "root", "--once"])
        .env("LB_ETCD_PASSWORD", "s3cret")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        format!("{{\"revision\":{rev},\"nodes\":[[\"a\",3]],\"keys\":{{}}}}\n")
    );
    let mut args = tls.to_vec();
    args.extend(["--user", "root:wrong"]);
    let lb = Lb::spawn(&args);
    Lb::until(&lb.stderr, "the refused login", |l| {
        l.contains("authentication failed") && l.contains("invalid user ID or password")
    });
    let o = Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(["watch", "--etcd", &url, "--prefix", "svc"])
        .args(["--cacert", "/nonexistent.pem"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("CA bundle /nonexistent.pem"), "{e}");
    let o = Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(["watch", "--etcd", &url, "--prefix", "svc", "--user", "root"])
        .env_remove("LB_ETCD_PASSWORD")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("LB_ETCD_PASSWORD"), "{e}");
}
