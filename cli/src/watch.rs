//! `lb watch --etcd URL --prefix P [--algorithm A] [--key K]... [--json] [--once]
//! [--cacert FILE] [--cert FILE [--key-file FILE]] [--user NAME[:PASSWORD]]`: follows the membership
//! under an etcd prefix (see liblb-etcd and docs/membership.md) and prints every change as it
//! is applied, with where each `--key` lands. `https://` endpoints are verified against
//! `--cacert` (or the system's CA bundle); `--cert` (and `--key-file`, unless the key is in the
//! `--cert` file; `--key` places keys) gives a client certificate (etcd with
//! `--client-cert-auth`); `--user` logs in to etcd (password after the colon, or from
//! `LB_ETCD_PASSWORD`). A TLS or login failure is printed to stderr and retried like any
//! disconnect; an unreadable certificate file stops the command at once.
//!
//! Human output, one block per applied membership:
//!
//! ```text
//! revision 7: +c (weight 1), -a, b weight 2 -> 5
//!   members: b=5 c=1
//!   user-1 -> c (moved from a)
//!   user-2 -> b
//! ```
//!
//! `--json` prints one compact JSON object per applied membership instead, flushed at once —
//! `{"revision":7,"nodes":[["b",5],["c",1]],"keys":{"user-1":"c","user-2":"b"}}` — the line
//! format the Python watcher (`python -m liblb.etcd --json`) prints too, so two processes can
//! be compared line by line. A key whose pick fails (no nodes) is `null`. Rejected values,
//! disconnects and resumes go to stderr in both modes.
//!
//! The keys are placed on the watcher's thread right after `update()`, so each line shows the
//! placement of exactly that revision's membership.

use crate::{Failure, OptionArgs};
use clap::Args;
use liblb_core::{Algorithm, Balancer, Node};
use liblb_etcd::{Config, Event, TlsConfig, Watcher};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;

#[derive(Args)]
pub(crate) struct WatchArgs {
    /// etcd client URL, http://HOST:PORT or https://HOST:PORT (the v3 JSON gateway on etcd's
    /// client port); repeat for more endpoints of the same cluster.
    #[arg(long = "etcd", value_name = "URL", required = true)]
    endpoints: Vec<String>,
    /// CA bundle (PEM) that https endpoints' certificates must chain to (default: the
    /// system's).
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Client certificate (PEM) for etcd servers that require one (--client-cert-auth).
    #[arg(long, value_name = "FILE")]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM; default: in the --cert file). Not --key,
    /// which places keys.
    #[arg(long = "key-file", value_name = "FILE", requires = "cert")]
    key_file: Option<PathBuf>,
    /// etcd user, as NAME or NAME:PASSWORD; without ":PASSWORD" the password is read from
    /// the environment variable LB_ETCD_PASSWORD.
    #[arg(long, value_name = "NAME[:PASSWORD]")]
    user: Option<String>,
    /// The prefix P: members are the keys P/<node-id>, each with an empty value (weight 1) or
    /// JSON such as {"weight": 3}.
    #[arg(long)]
    prefix: String,
    /// Algorithm (the list comes from liblb-core's registration list).
    #[arg(long, short, value_parser = crate::algorithm_parser(), default_value = "maglev")]
    algorithm: Algorithm,
    #[command(flatten)]
    options: OptionArgs,
    /// A key to place after every change (repeatable; keyed algorithms only).
    #[arg(long = "key", short = 'k', value_name = "KEY")]
    keys: Vec<String>,
    /// One JSON object per applied membership: {"revision", "nodes", "keys"}.
    #[arg(long)]
    json: bool,
    /// Exit after the first membership is applied.
    #[arg(long)]
    once: bool,
}

/// What the watcher's thread hands the main thread to print.
enum Out {
    Stdout(String),
    Stderr(String),
}

pub(crate) fn run(args: WatchArgs, out: &mut impl Write) -> Result<(), Failure> {
    if !args.keys.is_empty() && !args.algorithm.is_keyed() {
        let keyed: Vec<&str> = Algorithm::ALL
            .iter()
            .filter(|a| a.is_keyed())
            .map(|a| a.name())
            .collect();
        return Err(Failure::Usage(format!(
            "--key needs a keyed algorithm; {} ignores keys (keyed: {})",
            args.algorithm,
            keyed.join(", ")
        )));
    }
    let balancer = Arc::new(Balancer::new(
        args.algorithm,
        Vec::<Node>::new(),
        args.options.options()?,
    )?);
    let mut config = Config::new(String::new(), args.prefix);
    config.endpoints = args.endpoints;
    config.auth = args.user.as_deref().map(credentials).transpose()?;
    if args.cacert.is_some() || args.cert.is_some() {
        let mut tls = TlsConfig::default();
        tls.ca_file = args.cacert;
        (tls.cert_file, tls.key_file) = (args.cert, args.key_file);
        config.tls = Some(tls);
    }
    let (send, receive) = mpsc::channel();
    let printer = RefCell::new(Printer {
        balancer: balancer.clone(),
        keys: args.keys,
        json: args.json,
        previous: None,
    });
    let mut watcher = Watcher::start(config, balancer, move |event| {
        let (text, applied) = printer.borrow_mut().print(event);
        // The main thread may have gone (output closed): nothing left to tell.
        drop(send.send((text, applied)));
    })
    .map_err(|e| Failure::Usage(e.to_string()))?;
    for (text, applied) in receive {
        match text {
            Out::Stdout(text) => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            Out::Stderr(text) => eprint!("{text}"),
        }
        if applied && args.once {
            break;
        }
    }
    watcher.stop();
    Ok(())
}

/// `NAME[:PASSWORD]` as (name, password); the password from `LB_ETCD_PASSWORD` when absent.
fn credentials(user: &str) -> Result<(String, String), Failure> {
    let (name, password) = match user.split_once(':') {
        Some((name, password)) => (name, password.to_string()),
        None => match std::env::var("LB_ETCD_PASSWORD") {
            Ok(password) => (user, password),
            Err(_) => {
                return Err(Failure::Usage(format!(
                    "--user {user:?} has no password: give NAME:PASSWORD or set LB_ETCD_PASSWORD"
                )));
            }
        },
    };
    if name.is_empty() {
        return Err(Failure::Usage("--user needs a user name".into()));
    }
    Ok((name.to_string(), password))
}

/// Turns events into text; remembers the last membership and placements to show changes.
struct Printer {
    balancer: Arc<Balancer>,
    keys: Vec<String>,
    json: bool,
    /// The last applied (nodes, placement of each key).
    previous: Option<(Vec<Node>, Vec<Option<String>>)>,
}

impl Printer {
    /// The text for `event`, and whether it was an applied membership.
    fn print(&mut self, event: &Event) -> (Out, bool) {
        let text = match event {
            Event::Applied { revision, nodes } => {
                return (Out::Stdout(self.applied(*revision, nodes)), true);
            }
            Event::Rejected {
                revision,
                key,
                reason,
            } => format!("lb: revision {revision}: rejected {key}: {reason}\n"),
            Event::UpdateFailed { revision, error } => {
                format!("lb: revision {revision}: not applied, membership kept: {error}\n")
            }
            Event::Disconnected { error } => format!("lb: etcd: {error} (retrying)\n"),
            Event::Resumed { from } => format!("lb: watch resumed from revision {from}\n"),
            Event::Resynced { revision, reason } => {
                format!("lb: {reason}; read the prefix again at revision {revision}\n")
            }
            other => format!("lb: {other:?}\n"),
        };
        (Out::Stderr(text), false)
    }

    fn applied(&mut self, revision: i64, nodes: &[Node]) -> String {
        // Runs on the watcher's thread right after `update()`: the balancer holds `nodes`.
        let placed: Vec<Option<String>> = self
            .keys
            .iter()
            .map(|k| {
                self.balancer
                    .pick(Some(k.as_bytes()))
                    .ok()
                    .map(|p| p.id().to_string())
            })
            .collect();
        let text = if self.json {
            json_line(revision, nodes, &self.keys, &placed)
        } else {
            self.human(revision, nodes, &placed)
        };
        self.previous = Some((nodes.to_vec(), placed));
        text
    }

    fn human(&self, revision: i64, nodes: &[Node], placed: &[Option<String>]) -> String {
        let mut text = format!("revision {revision}: ");
        match &self.previous {
            None => text += &format!("{} nodes", nodes.len()),
            Some((before, _)) => text += &changes(before, nodes),
        }
        text += "\n  members:";
        if nodes.is_empty() {
            text += " (none)";
        }
        for n in nodes {
            text += &format!(" {}={}", n.id, n.weight);
        }
        text += "\n";
        for (i, key) in self.keys.iter().enumerate() {
            let now = placed[i].as_deref().unwrap_or("(no nodes)");
            text += &format!("  {key} -> {now}");
            let before = self.previous.as_ref().map(|(_, p)| p[i].as_deref());
            if let Some(before) = before.filter(|b| *b != placed[i].as_deref()) {
                text += &format!(" (moved from {})", before.unwrap_or("(no nodes)"));
            }
            text += "\n";
        }
        text
    }
}

/// `+id (weight w)`, `-id`, `id weight a -> b`, or "no change".
fn changes(before: &[Node], after: &[Node]) -> String {
    let old: BTreeMap<&str, u32> = before.iter().map(|n| (&*n.id, n.weight)).collect();
    let new: BTreeMap<&str, u32> = after.iter().map(|n| (&*n.id, n.weight)).collect();
    let mut parts = Vec::new();
    for (id, w) in &new {
        match old.get(id) {
            None => parts.push(format!("+{id} (weight {w})")),
            Some(was) if was != w => parts.push(format!("{id} weight {was} -> {w}")),
            Some(_) => {}
        }
    }
    for id in old.keys().filter(|id| !new.contains_key(*id)) {
        parts.push(format!("-{id}"));
    }
    if parts.is_empty() {
        "no change".into()
    } else {
        parts.join(", ")
    }
}

/// The shared line format: `{"revision":R,"nodes":[["id",w],...],"keys":{"k":"id"|null}}`.
fn json_line(revision: i64, nodes: &[Node], keys: &[String], placed: &[Option<String>]) -> String {
    let nodes: Vec<Value> = nodes.iter().map(|n| json!([&*n.id, n.weight])).collect();
    let keys: serde_json::Map<String, Value> = keys
        .iter()
        .zip(placed)
        .map(|(k, id)| (k.clone(), json!(id)))
        .collect();
    // Fields in the documented order, whatever serde_json's map ordering.
    format!(
        "{{\"revision\":{revision},\"nodes\":{},\"keys\":{}}}\n",
        Value::Array(nodes),
        Value::Object(keys)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_adds_removes_and_reweights() {
        let before = [Node::new("a", 1), Node::new("b", 2)];
        let after = [Node::new("b", 5), Node::new("c", 1)];
        assert_eq!(
            changes(&before, &after),
            "b weight 2 -> 5, +c (weight 1), -a"
        );
        assert_eq!(changes(&after, &after), "no change");
    }

    #[test]
    fn json_lines_are_compact_and_null_for_failed_picks() {
        let line = json_line(
            7,
            &[Node::new("b", 5)],
            &["k".into(), "z".into()],
            &[Some("b".into()), None],
        );
        assert_eq!(
            line,
            "{\"revision\":7,\"nodes\":[[\"b\",5]],\"keys\":{\"k\":\"b\",\"z\":null}}\n"
        );
    }
}
