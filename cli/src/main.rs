//! `lb`: liblb on the command line.
//!
//! - `lb pick --algorithm ring --node 10.0.0.1:80 --node 10.0.0.2:80=3 KEY...` prints each
//!   key's node (`KEY<TAB>NODE`); unkeyed algorithms without keys print `--count` picks.
//! - `lb simulate` runs every algorithm on the seeds' own node lists and prints, per algorithm,
//!   each node's share against its expected share, max/mean load, the share of keys moved when
//!   one node is removed, and the time per pick.
//! - `lb simulate --scenario slow-node [--svg FILE]` simulates requests on backends of which
//!   one is 10x slower, routed through leases, and prints each algorithm's p50/p99/p99.9
//!   latency, shares and longest queue (`--scenario help` lists the scenarios).
//! - `lb simulate --scenario failing-node` (one backend fails every request for a while):
//!   requests failed, time to eject and to return, per algorithm with ejection on and off;
//!   `--scenario hot-key` (one key carries 30% of the requests): latency, longest queue and
//!   keys moved per keyed algorithm with bounded loads off and on.
//! - `lb simulate --scenario retry-storm` (120% of capacity, attempts timing out and
//!   retried): amplification, goodput, p99 and failures without a budget, with a retry budget
//!   and with an adaptive throttle; `overloaded-node` (429 with Retry-After for a minute): the
//!   node paused and back; `flaky-node` (30% random failures): time to ejection with and
//!   without success-rate ejection; `long-tail` (1% of attempts 20x slower): p99.9 without
//!   hedging and with p95 and p99 hedges.
//! - `lb simulate --scenario zones` (callers and backends in three zones, a priority-1
//!   fallback fleet): where each caller zone's requests are served, cross-zone share and p99,
//!   without and with zone-aware routing, against Envoy's rules, as zone a fails and priority
//!   0 spills.
//! - `lb simulate --scenario uneven` (ten backends of speeds 1x to 4x, weight 1 each, the
//!   fastest slowed by background work for a while): latency, per-backend utilisation and its
//!   spread, and probe traffic for round_robin, least_request, peak_ewma, client_side_wrr and
//!   prequal, which learn capacity from ORCA reports and probes.
//! - `lb simulate --scenario fleet` (10,000 clients, 1,000 backends, subsets of 10, 30 and
//!   100): connections per backend, load peak and churn as backends and clients scale, for
//!   each subsetting algorithm (deterministic, random, ringsteady, aperture).
//! - `lb watch --etcd http://127.0.0.1:2379 --prefix /services/web --key user-1` follows the
//!   membership under an etcd prefix and prints each change and where each key lands
//!   (`--json`: one JSON object per change; see `watch` and docs/membership.md).

mod chart;
mod events;
mod failing_node;
mod flaky_node;
mod fleet;
mod hot_key;
mod long_tail;
mod meter;
mod overloaded_node;
mod request_events;
mod retry_storm;
mod simulate;
mod slow_node;
mod uneven;
mod watch;
mod zones;

use clap::{Args, Parser, Subcommand};
use liblb_core::{Algorithm, Balancer, HashKind, Node, Options};
use std::io::{self, Write};
use std::process::ExitCode;

/// Most backends a simulated scenario has (`--backends`; the seeds scenario's `--nodes` count):
/// every per-backend table, queue and counter is allocated up front, so the size is checked
/// first. A million is far beyond any chart anyone reads, and still runs in seconds.
pub(crate) const MAX_BACKENDS: usize = 1_000_000;

/// Most keys a simulation makes (`--keys`: the seeds scenario's picks, the other scenarios' key
/// population): each is a string held for the whole run.
pub(crate) const MAX_KEYS: usize = 10_000_000;

/// A number for a message, as short as it was written (`0.7`, `1e300`): `Display` writes 1e300
/// as 301 digits.
pub(crate) fn num(v: f64) -> String {
    if v.is_finite() && v != 0.0 && (v.abs() >= 1e15 || v.abs() < 1e-4) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Checks a size argument against its bounds before anything is allocated for it.
pub(crate) fn bounded(flag: &str, value: usize, least: usize, most: usize) -> Result<(), String> {
    if value < least || value > most {
        return Err(format!(
            "{flag} must be from {least} to {most}, got {value}"
        ));
    }
    Ok(())
}

/// A failure of the command: the library's error, a bad combination of arguments (or a file
/// that cannot be written), or the output going away.
pub(crate) enum Failure {
    Lb(liblb_core::Error),
    Usage(String),
    Io(io::Error),
}

impl From<liblb_core::Error> for Failure {
    fn from(e: liblb_core::Error) -> Failure {
        Failure::Lb(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Io(e)
    }
}

#[derive(Parser)]
#[command(
    name = "lb",
    version,
    about = "liblb: pick a backend node for each request"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the node chosen for each key (or --count picks for unkeyed algorithms).
    Pick(PickArgs),
    /// Simulate algorithms: distribution, key movement and speed; latency under load
    /// (--scenario slow-node), ejection (failing-node, flaky-node), bounded loads (hot-key),
    /// retries and budgets (retry-storm), Retry-After (overloaded-node), capacity learned
    /// from ORCA reports and probes (uneven).
    // Boxed: its flags make it twice the other variants' size (clippy's large_enum_variant).
    Simulate(Box<simulate::SimulateArgs>),
    /// Follow the membership under an etcd prefix and print each change as it is applied,
    /// with where each --key lands (--json: one JSON object per change).
    Watch(watch::WatchArgs),
}

/// Balancer options; each maps one-to-one to an option of the library.
#[derive(Args, Clone, Default)]
pub(crate) struct OptionArgs {
    /// Seed for the random algorithms (default: OS entropy). `simulate --scenario slow-node`
    /// (and every scenario but seeds) seeds its workload with it too (default 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Ring points per unit of weight.
    #[arg(long, default_value_t = liblb_core::DEFAULT_VNODES)]
    vnodes: u32,
    /// Key/point hash: sha256 or xxh3 (default: per algorithm).
    #[arg(long, value_parser = parse_hash)]
    hash: Option<HashKind>,
    /// Any other balancer option as NAME=VALUE, e.g. choice_count=3, decay_ms=5000,
    /// initial_latency_ms=50 (repeatable; names and checks are the library's).
    #[arg(long = "option", short = 'o', value_name = "NAME=VALUE")]
    extra: Vec<String>,
}

impl OptionArgs {
    pub(crate) fn options(&self) -> Result<Options, liblb_core::Error> {
        let mut options = Options {
            seed: self.seed,
            vnodes: self.vnodes,
            hash: self.hash,
            ..Options::default()
        };
        for setting in &self.extra {
            let (name, value) = setting.split_once('=').unwrap_or((setting, ""));
            options.set(name, liblb_core::OptionValue::Str(value))?;
        }
        Ok(options)
    }
}

#[derive(Args)]
struct PickArgs {
    /// Algorithm (the list comes from liblb-core's registration list).
    #[arg(long, short, value_parser = algorithm_parser())]
    algorithm: Algorithm,
    /// A node as ID or ID=WEIGHT; repeat for each node.
    #[arg(long = "node", short, value_parser = parse_node, required = true)]
    nodes: Vec<Node>,
    #[command(flatten)]
    options: OptionArgs,
    /// Print the retry order (up to N distinct nodes) instead of one node.
    #[arg(long, value_name = "N")]
    attempts: Option<usize>,
    /// Number of picks when no key is given (unkeyed algorithms).
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Keys to place (hashed as UTF-8).
    keys: Vec<String>,
}

/// Accepts exactly `Algorithm::NAMES`, which `--help` and error messages list.
fn algorithm_parser() -> impl clap::builder::TypedValueParser<Value = Algorithm> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Algorithm::NAMES)
        .map(|name| name.parse().expect("a registered algorithm name parses"))
}

fn parse_hash(s: &str) -> Result<HashKind, String> {
    s.parse().map_err(|e: liblb_core::Error| e.to_string())
}

/// `ID` or `ID=WEIGHT` (the last `=` splits, so ids may contain `=`).
pub(crate) fn parse_node(s: &str) -> Result<Node, String> {
    match s.rsplit_once('=') {
        Some((id, weight)) => weight.parse().map(|w| Node::new(id, w)).map_err(|_| {
            format!("weight {weight:?} of node {id:?} is not a 32-bit unsigned integer")
        }),
        None => Ok(Node::new(s, 1)),
    }
}

fn pick(args: PickArgs, out: &mut impl Write) -> Result<(), Failure> {
    let b = Balancer::new(args.algorithm, args.nodes, args.options.options()?)?;
    let show = |key: Option<&str>| -> Result<String, liblb_core::Error> {
        let key_bytes = key.map(str::as_bytes);
        Ok(match args.attempts {
            Some(limit) => b
                .attempts(key_bytes, limit)?
                .ids()
                .collect::<Vec<_>>()
                .join(","),
            None => b.pick(key_bytes)?.id().to_string(),
        })
    };
    if args.keys.is_empty() {
        for _ in 0..args.count {
            writeln!(out, "{}", show(None)?)?;
        }
    } else {
        for key in &args.keys {
            writeln!(out, "{key}\t{}", show(Some(key))?)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = io::BufWriter::new(io::stdout().lock());
    let result = match cli.command {
        Command::Pick(args) => pick(args, &mut out),
        Command::Simulate(args) => simulate::run(*args, &mut out),
        Command::Watch(args) => watch::run(args, &mut out),
    };
    match result.and_then(|()| Ok(out.flush()?)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`lb simulate | head`): stop quietly, like other Unix tools.
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Io(e)) => {
            eprintln!("lb: cannot write output: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Lb(e)) => {
            drop(out.flush());
            eprintln!("lb: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Usage(message)) => {
            drop(out.flush());
            eprintln!("lb: {message}");
            ExitCode::FAILURE
        }
    }
}
