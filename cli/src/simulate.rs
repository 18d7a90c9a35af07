//! `lb simulate`: algorithms side by side on a scenario (`--scenario`, `--scenario help` lists
//! them).
//!
//! - `seeds` (the default): picks only, no requests. See below.
//! - `slow-node`: a discrete-event simulation of requests on backends, one of them 10x slower,
//!   each request routed through a lease and its latency fed back (see `slow_node`): the
//!   load-aware algorithms against the blind ones. `--svg FILE` draws it (see `chart`).
//! - `failing-node`: one backend fails every request for a while, then recovers (see
//!   `failing_node`): passive ejection on and off, for every algorithm.
//! - `hot-key`: one key carries a large share of the requests (see `hot_key`): the keyed
//!   algorithms with bounded loads off and on.
//! - `retry-storm`, `overloaded-node`, `flaky-node`: whole requests through the request loop
//!   (`Balancer::request`, `attempt`, `finish`), retries as events in virtual time (the engine
//!   is `request_events`): a fleet past capacity without a budget, with a `RetryBudget` and
//!   with an `AdaptiveThrottle` (see `retry_storm`); a backend answering 429 with
//!   `Retry-After` (see `overloaded_node`); a backend failing 30% of its requests at random,
//!   against consecutive-failure and success-rate ejection (see `flaky_node`).
//! - `zones`: callers and backends in zones, one balancer per caller zone over the same
//!   backends, without and with zone-aware routing, then half of one zone down and priority 0
//!   down to half, spilling to a priority-1 fallback fleet (see `zones`): where each caller
//!   zone's requests go against Envoy's rules.
//! - `uneven`: backends of speeds 1x to 4x behind equal weights, the fastest slowed by
//!   background work for a while (see `uneven`): whether `client_side_wrr` (ORCA reports) and
//!   `prequal` (probes) match load to capacity better than the blind and local algorithms.
//! - `fleet`: thousands of clients each talking to a subset of the backends (see `fleet`):
//!   connection spread, load peak and churn of each subsetting algorithm, computed exactly.
//!
//! The `seeds` scenario is the seeds' own node lists: seed 000's three weighted servers
//! (2, 7, 1) and seed 002's seven endpoints. For each algorithm the table shows every node's
//! share of the picks against the share it should get (weight / Σweight for the weighted
//! algorithms, 1/n for `random` and `round_robin`, which ignore weights), a bar chart, the
//! max/mean load (the busiest node's share over its expected share), the share of keys that
//! change node when the first node is removed (keyed algorithms; the ideal is that node's share),
//! and the time per pick.

use crate::slow_node::{self, Params};
use crate::{Failure, OptionArgs, chart, failing_node, hot_key, parse_node};
use crate::{
    flaky_node, fleet, long_tail, overloaded_node, request_events, retry_storm, uneven, zones,
};
use clap::{Args, ValueEnum};
use liblb_core::{Algorithm, Balancer, Error, Node};
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub(crate) struct SimulateArgs {
    /// What to simulate (`--scenario help` lists the scenarios).
    #[arg(long, value_enum, default_value_t = ScenarioName::Seeds)]
    scenario: ScenarioName,
    /// seeds: nodes as a count N (nodes 10.0.0.i:80, weight 1; at most 1000000) or a comma
    /// list ID[=WEIGHT],... Default: the seeds' node lists.
    #[arg(long)]
    nodes: Option<String>,
    /// seeds: number of keys (= picks) per algorithm (default 100000); the other scenarios
    /// but slow-node: the key population (default 10000). 1 to 10000000 (hot-key: from 2).
    #[arg(long)]
    keys: Option<usize>,
    /// Only this algorithm (repeatable); default: all (slow-node: all unkeyed; hot-key: all
    /// keyed; retry-storm: least_request; overloaded-node: round_robin, least_request,
    /// peak_ewma; flaky-node: round_robin, least_request; long-tail and zones: one,
    /// round_robin, zones an unkeyed one; uneven: unkeyed ones, default round_robin,
    /// least_request, peak_ewma, client_side_wrr, prequal).
    #[arg(long, short, value_parser = crate::algorithm_parser())]
    algorithm: Vec<Algorithm>,
    /// Every scenario but seeds and zones (which takes --zone-backends): number of backends, 2
    /// to 1000000 (backend-0 is the slow, the failing, the overloaded or the flaky one;
    /// default 10, fleet 1000).
    #[arg(long)]
    backends: Option<usize>,
    /// Every scenario but seeds: servers per backend (each backend is a FIFO queue before k
    /// servers); default 1, long-tail 4.
    #[arg(long)]
    servers: Option<usize>,
    /// Every scenario but seeds: mean service time of a normal backend, ms (exponentially
    /// distributed); uneven: of the fastest backend.
    #[arg(long, default_value_t = 10.0)]
    service_ms: f64,
    /// slow-node: how many times slower backend-0's mean service time is (default 10);
    /// long-tail: how many times slower a slow attempt is (default 20); uneven: how many times
    /// slower the slowest backend is than the fastest (default 4).
    #[arg(long)]
    slowdown: Option<f64>,
    /// long-tail: the share of attempts that are slow (0 to 1).
    #[arg(long, default_value_t = 0.01)]
    slow_share: f64,
    /// long-tail, uneven: requests arriving before this time (seconds) are not measured
    /// (default: long-tail 15, the percentile rule needs a complete 10 s bucket first; uneven
    /// 60, the fleet warm and every backlog of its start drained).
    #[arg(long)]
    warmup_s: Option<f64>,
    /// Arrival rate as a share of the backends' total capacity: above 0 and below 1 (default
    /// 0.7); retry-storm: up to 3 (default 1.2, past capacity); zones: of priority 0's
    /// capacity (default 0.6).
    #[arg(long)]
    utilisation: Option<f64>,
    /// slow-node, hot-key: requests per run (default: slow-node 200000, hot-key 50000).
    #[arg(long)]
    requests: Option<usize>,
    /// failing-node: backend-0 fails every request from this time (seconds of virtual time)...;
    /// flaky-node: it fails --fail-rate of them from this time to the end.
    #[arg(long, default_value_t = 10.0)]
    fail_from_s: f64,
    /// failing-node: ...until this time, then recovers.
    #[arg(long, default_value_t = 60.0)]
    fail_until_s: f64,
    /// failing-node: how long a failing request takes, ms; overloaded-node: how long a 429
    /// takes.
    #[arg(long, default_value_t = 1.0)]
    fail_ms: f64,
    /// failing-node, retry-storm, overloaded-node, flaky-node, zones, uneven: length of the
    /// run, seconds of virtual time (default: failing-node 110, retry-storm 30,
    /// overloaded-node 100, flaky-node 60, zones 60 per run, uneven 180, the warm-up
    /// included).
    #[arg(long)]
    duration_s: Option<f64>,
    /// retry-storm: how long a client waits for an attempt, ms; then it counts as a timeout
    /// (the backend still serves it).
    #[arg(long, default_value_t = 1000.0)]
    timeout_ms: f64,
    /// retry-storm, overloaded-node, flaky-node: attempts per request, the first included
    /// (the request loop's max_attempts; 1 to 100).
    #[arg(long, default_value_t = 3)]
    attempts: u32,
    /// overloaded-node: backend-0 answers 429 from this time (seconds of virtual time)...
    #[arg(long, default_value_t = 20.0)]
    overload_from_s: f64,
    /// overloaded-node: ...until this time.
    #[arg(long, default_value_t = 80.0)]
    overload_until_s: f64,
    /// overloaded-node: the Retry-After of its 429s, seconds.
    #[arg(long, default_value_t = 5.0)]
    retry_after_s: f64,
    /// flaky-node: the share of backend-0's requests that fail, each at random (0 to 1).
    #[arg(long, default_value_t = 0.3)]
    fail_rate: f64,
    /// retry-storm: the adaptive throttle's window, seconds (1 to 3600).
    #[arg(long, default_value_t = 10.0)]
    window_s: f64,
    /// hot-key: the hot key's share of the requests (0 to 1).
    #[arg(long, default_value_t = 0.3)]
    hot_share: f64,
    /// zones: caller instances per zone (zones a, b, c, ...), comma-separated; each sends the
    /// same rate.
    #[arg(long, default_value = "50,30,20")]
    callers: String,
    /// zones: priority-0 backends per zone, comma-separated (as many zones as --callers).
    #[arg(long, default_value = "4,4,2")]
    zone_backends: String,
    /// zones: backends of the priority-1 fallback fleet (in another region).
    #[arg(long, default_value_t = 3)]
    fallback_backends: usize,
    /// zones: how much longer a request served outside its caller's zone takes, ms.
    #[arg(long, default_value_t = 1.0)]
    cross_zone_ms: f64,
    /// uneven: the clients do not restart (by default each restarts once, at times spread
    /// evenly over the measured time).
    #[arg(long)]
    no_restarts: bool,
    /// uneven: the fastest backend runs background work from this time (seconds of virtual
    /// time; default 30% into the measured time)...
    #[arg(long)]
    background_from_s: Option<f64>,
    /// uneven: ...until this time (default 60% into the measured time).
    #[arg(long)]
    background_until_s: Option<f64>,
    /// uneven: how many times longer its service times are meanwhile (1 to 100).
    #[arg(long, default_value_t = 3.0)]
    background_slowdown: f64,
    /// uneven: how long a probe answer takes to reach the balancer, ms (0 to 60000).
    #[arg(long, default_value_t = 1.0)]
    probe_delay_ms: f64,
    /// uneven: how long a backend's latency samples count toward the estimate its probe
    /// answers carry, ms (1 to 3600000; `ServerLoad`'s default 1000).
    #[arg(long, default_value_t = 1000)]
    latency_max_age_ms: u64,
    /// fleet: number of clients, 1 to 1000000 (default 10000); uneven: clients, each with
    /// its own balancer, 1 to 1000 (default 20).
    #[arg(long)]
    clients: Option<usize>,
    /// fleet: the subset sizes, comma-separated.
    #[arg(long, default_value = "10,30,100")]
    subset_sizes: String,
    /// fleet: only this subsetting algorithm (repeatable; deterministic, random, ringsteady,
    /// aperture); default: all.
    #[arg(long = "subset")]
    subsets: Vec<String>,
    /// fleet: backends added in the scale-up event (default 5% of --backends).
    #[arg(long)]
    grow_backends: Option<usize>,
    /// fleet: clients added in the client scale-up event (default 5% of --clients).
    #[arg(long)]
    grow_clients: Option<usize>,
    /// Every scenario but seeds: write an SVG of the run to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Balancer options (every scenario but seeds: --seed also seeds the workload; default
    /// 1).
    #[command(flatten)]
    options: OptionArgs,
}

/// The scenarios.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ScenarioName {
    /// Every algorithm on the seeds' node lists: shares, key movement, ns per pick.
    Seeds,
    /// Requests on N backends, one 10x slower, routed through leases: latency per algorithm.
    SlowNode,
    /// One backend fails every request for a while, then recovers: passive ejection on and
    /// off, per algorithm.
    FailingNode,
    /// One key carries a large share of the requests: keyed algorithms with bounded loads
    /// (hash_balance_factor) off and on.
    HotKey,
    /// A fleet past capacity, attempts timing out and retried: no budget, a retry budget, an
    /// adaptive throttle.
    RetryStorm,
    /// One backend answers 429 with Retry-After for a minute: paused, skipped, back.
    OverloadedNode,
    /// One backend fails 30% of its requests at random: consecutive-failure ejection alone
    /// and with success-rate ejection.
    FlakyNode,
    /// 1% of attempts 20x slower: latency percentiles without hedging and with p95 and p99
    /// hedges.
    LongTail,
    /// Callers and backends in three zones: cross-zone traffic without and with zone-aware
    /// routing, then failures spilling to other zones and to a priority-1 fleet.
    Zones,
    /// Backends of speeds 1x to 4x, weight 1 each, the fastest slowed for a while: latency
    /// and utilisation spread with ORCA reports and probes.
    Uneven,
    /// Thousands of clients each talking to a subset of the backends: connection spread and
    /// churn for each subsetting algorithm.
    Fleet,
    /// List the scenarios.
    Help,
}

struct Scenario {
    name: String,
    nodes: Vec<Node>,
}

fn scenarios(spec: Option<&str>) -> Result<Vec<Scenario>, Failure> {
    let Some(spec) = spec else {
        let seed_000 = [("192.168.1.1", 2), ("192.168.1.2", 7), ("192.168.1.3", 1)];
        let seed_002 = [
            "100.69.62.1:3232",
            "100.69.62.32:3232",
            "100.69.62.42:3232",
            "100.69.62.81:3232",
            "100.69.62.11:3232",
            "100.69.62.113:3232",
            "100.69.62.101:3232",
        ];
        return Ok(vec![
            Scenario {
                name: "seed 000 servers, weights 2/7/1".into(),
                nodes: seed_000.iter().map(|(id, w)| Node::new(*id, *w)).collect(),
            },
            Scenario {
                name: "seed 002 endpoints".into(),
                nodes: seed_002.iter().map(|id| Node::new(*id, 1)).collect(),
            },
        ]);
    };
    let count = (!spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()))
        // Any number of digits is a count, however large (it saturates).
        .then(|| spec.parse::<usize>().unwrap_or(usize::MAX));
    let nodes = match count {
        Some(n) => {
            // Checked before the list is made: 10^11 nodes would be an abort, not an error.
            crate::bounded("--nodes", n, 1, crate::MAX_BACKENDS).map_err(Failure::Usage)?;
            (0..n)
                .map(|i| Node::new(format!("10.0.{}.{}:80", i / 256, i % 256), 1))
                .collect()
        }
        None => spec
            .split(',')
            .map(parse_node)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| Error::InvalidOptionValue {
                option: "nodes",
                value: message,
                expected: "a count or ID[=WEIGHT],...",
            })?,
    };
    Ok(vec![Scenario {
        name: format!("{} nodes", nodes.len()),
        nodes,
    }])
}

pub(crate) fn run(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    match args.scenario {
        ScenarioName::Seeds => {
            if args.svg.is_some() {
                return Err(Failure::Usage(
                    "--svg draws every scenario but seeds (slow-node, failing-node, hot-key, retry-storm, ...)".into(),
                ));
            }
            seeds(args, out)
        }
        ScenarioName::SlowNode => slow(args, out),
        ScenarioName::FailingNode => failing(args, out),
        ScenarioName::HotKey => hot(args, out),
        ScenarioName::RetryStorm => storm(args, out),
        ScenarioName::OverloadedNode => overloaded(args, out),
        ScenarioName::FlakyNode => flaky(args, out),
        ScenarioName::LongTail => tail(args, out),
        ScenarioName::Zones => zoned(args, out),
        ScenarioName::Uneven => unequal(args, out),
        ScenarioName::Fleet => subsets(args, out),
        ScenarioName::Help => {
            writeln!(out, "scenarios (--scenario NAME):")?;
            for value in ScenarioName::value_variants() {
                if *value != ScenarioName::Help {
                    let v = value.to_possible_value().expect("no variant is skipped");
                    let help = v.get_help().map(ToString::to_string).unwrap_or_default();
                    writeln!(out, "  {:<15} {help}", v.get_name())?;
                }
            }
            Ok(())
        }
    }
}

/// The slow-node scenario: one run per algorithm, a latency table, a share table, an SVG.
fn slow(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    if args.nodes.is_some() {
        return Err(Failure::Usage(
            "--nodes belongs to the seeds scenario; slow-node takes --backends".into(),
        ));
    }
    let params = Params {
        backends: args.backends.unwrap_or(10),
        servers: args.servers.unwrap_or(1),
        service_ms: args.service_ms,
        slowdown: args.slowdown.unwrap_or(10.0),
        utilisation: args.utilisation.unwrap_or(0.7),
        requests: args.requests.unwrap_or(200_000),
        seed: args.options.seed.unwrap_or(1),
    };
    params.validate().map_err(Failure::Usage)?;
    let chosen = if args.algorithm.is_empty() {
        Algorithm::ALL.to_vec()
    } else {
        args.algorithm.clone()
    };
    let (algorithms, keyed): (Vec<Algorithm>, Vec<Algorithm>) =
        chosen.into_iter().partition(|a| !a.is_keyed());
    if algorithms.is_empty() {
        return Err(Failure::Usage(
            "slow-node runs unkeyed algorithms only (keyed ones route by key, not by load)".into(),
        ));
    }
    let options = args.options.options()?;

    writeln!(
        out,
        "== slow-node: {} backends x {} server(s), FIFO, exponential service times with mean {} ms; backend-0 {}x slower ({} ms) ==",
        params.backends,
        params.servers,
        params.service_ms,
        params.slowdown,
        params.service_ms * params.slowdown
    )?;
    writeln!(
        out,
        "Poisson arrivals at {:.0}% of capacity ({:.1} of {:.1} req/s); {} requests per algorithm; seed {}",
        params.utilisation * 100.0,
        params.rate(),
        params.capacity(),
        params.requests,
        params.seed
    )?;
    if !keyed.is_empty() {
        let names: Vec<&str> = keyed.iter().map(|a| a.name()).collect();
        writeln!(
            out,
            "skipped (keyed: they route by key, not by load): {}",
            names.join(", ")
        )?;
    }
    let runs = algorithms
        .iter()
        .map(|a| slow_node::run(*a, &params, options))
        .collect::<Result<Vec<_>, _>>()?;

    writeln!(
        out,
        "\n{:<22} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "algorithm", "p50 ms", "p99 ms", "p99.9 ms", "max queue", "slow load"
    )?;
    for run in &runs {
        // The slow backend's arrival rate over its capacity.
        let slow_load = run.share(0) * params.rate() / params.slow_capacity();
        writeln!(
            out,
            "{:<22} {:>10.1} {:>10.1} {:>10.1} {:>10} {:>9.0}%",
            run.algorithm.name(),
            run.quantile_ms(0.5),
            run.quantile_ms(0.99),
            run.quantile_ms(0.999),
            run.max_queue.iter().max().copied().unwrap_or(0),
            slow_load * 100.0
        )?;
    }
    writeln!(
        out,
        "(latency: arrival to completion; max queue: most requests at one backend, waiting or in \
         service; slow load: backend-0's arrival rate over its capacity, over 100% = its queue \
         grows for the whole run)"
    )?;

    writeln!(out, "\nshare of requests per backend, %")?;
    write!(out, "{:<22}", "algorithm")?;
    for b in 0..params.backends {
        write!(out, " {:>6}", format!("b{b}"))?;
    }
    write!(out, "\n{:<22}", "(share of capacity)")?;
    for b in 0..params.backends {
        write!(out, " {:>6.1}", params.capacity_share(b) * 100.0)?;
    }
    writeln!(out)?;
    for run in &runs {
        write!(out, "{:<22}", run.algorithm.name())?;
        for b in 0..params.backends {
            write!(out, " {:>6.1}", run.share(b) * 100.0)?;
        }
        writeln!(out)?;
    }
    if let Some(path) = &args.svg {
        chart::draw(path, &params, &runs).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// The algorithms chosen with `-a` (default: all).
fn chosen(args: &SimulateArgs) -> Vec<Algorithm> {
    if args.algorithm.is_empty() {
        Algorithm::ALL.to_vec()
    } else {
        args.algorithm.clone()
    }
}

/// Rejects `--nodes` (the seeds scenario's) in a backend scenario.
fn no_nodes(args: &SimulateArgs, scenario: &str) -> Result<(), Failure> {
    match args.nodes {
        Some(_) => Err(Failure::Usage(format!(
            "--nodes belongs to the seeds scenario; {scenario} takes --backends"
        ))),
        None => Ok(()),
    }
}

/// Seconds, printed short: `30`, `40.1`.
fn secs(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if (s - s.round()).abs() < 5e-4 {
        format!("{s:.0}")
    } else {
        format!("{s:.3}")
    }
}

/// The failing-node scenario: two runs per algorithm (ejection on and off), one table, an SVG.
fn failing(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    no_nodes(&args, "failing-node")?;
    if args.requests.is_some() {
        return Err(Failure::Usage(
            "failing-node runs for --duration-s of virtual time; --requests belongs to slow-node and hot-key".into(),
        ));
    }
    let params = failing_node::Params {
        backends: args.backends.unwrap_or(10),
        servers: args.servers.unwrap_or(1),
        service_ms: args.service_ms,
        utilisation: args.utilisation.unwrap_or(0.7),
        keys: args.keys.unwrap_or(10_000),
        fail_ms: args.fail_ms,
        fail_from_s: args.fail_from_s,
        fail_until_s: args.fail_until_s,
        duration_s: args.duration_s.unwrap_or(110.0),
        seed: args.options.seed.unwrap_or(1),
    };
    params.validate().map_err(Failure::Usage)?;
    let algorithms = chosen(&args);
    // Consecutive-failure ejection alone: the interval detectors (success rate, failure
    // percentage) are the flaky-node scenario's subject, and would also eject backend-0 at
    // the first interval's end that sees a few of its failures.
    let on = liblb_core::Options {
        enforcing_success_rate: 0,
        enforcing_failure_percentage: 0,
        ..args.options.options()?
    };
    let off = liblb_core::Options {
        consecutive_failures: 0,
        ..on
    };
    writeln!(
        out,
        "== failing-node: {} backends x {} server(s), FIFO, exponential service times with mean {} ms; backend-0 fails every request ({} ms each) from {} s to {} s ==",
        params.backends,
        params.servers,
        params.service_ms,
        params.fail_ms,
        params.fail_from_s,
        params.fail_until_s
    )?;
    writeln!(
        out,
        "Poisson arrivals at {:.0}% of capacity ({:.1} of {:.1} req/s) for {} s; each request carries one of {} keys, drawn uniformly (keyed algorithms route by it); no retries; seed {}",
        params.utilisation * 100.0,
        params.rate(),
        params.capacity(),
        params.duration_s,
        params.keys,
        params.seed
    )?;
    writeln!(
        out,
        "ejection on: consecutive_failures {}, base_ejection_time {} ms x times ejected (max {} ms), max_ejection_percent {}, panic_threshold {} (success-rate and failure-percentage ejection off: see --scenario flaky-node); off: consecutive_failures=0",
        on.consecutive_failures,
        on.base_ejection_time.as_millis(),
        on.max_ejection_time.as_millis(),
        on.max_ejection_percent,
        on.panic_threshold
    )?;
    let keys = failing_node::keys(params.keys);
    let mut runs = Vec::new();
    for algorithm in &algorithms {
        runs.push(failing_node::run(*algorithm, &params, on, &keys)?);
        runs.push(failing_node::run(*algorithm, &params, off, &keys)?);
    }
    writeln!(
        out,
        "\n{:<22} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>9}  ejections of backend-0 (at s+for s)",
        "algorithm", "ejection", "failed", "b0 share", "eject ms", "leaked", "back s", "max queue"
    )?;
    for run in &runs {
        let eject_ms = run.ejections.first().map_or("-".to_string(), |(at, _)| {
            format!("{:.1}", (at - params.fail_start_ns()) as f64 / 1e6)
        });
        let back = run
            .back_ns
            .map_or("-".to_string(), |ns| format!("{:.3}", ns as f64 / 1e9));
        let ejections = if run.ejections.is_empty() {
            "-".to_string()
        } else {
            run.ejections
                .iter()
                .map(|(at, until)| format!("{}+{}", secs(*at), secs(until - at)))
                .collect::<Vec<_>>()
                .join(",")
        };
        writeln!(
            out,
            "{:<22} {:>8} {:>8} {:>8.2}% {:>9} {:>8} {:>8} {:>9}  {ejections}",
            run.algorithm.name(),
            if run.ejection { "on" } else { "off" },
            run.failed,
            run.failing_share() * 100.0,
            eject_ms,
            run.leaked,
            back,
            run.max_queue.iter().max().copied().unwrap_or(0),
        )?;
    }
    writeln!(
        out,
        "(failed: requests that failed, all on backend-0; b0 share: its share of the requests \
         that arrived while it was failing; eject ms: from the failure's start to its first \
         ejection; leaked: requests sent to it while ejected; back s: from its recovery to its \
         first successful request; max queue: most requests at one backend, waiting or in \
         service)"
    )?;
    if let Some(path) = &args.svg {
        chart::draw_failing(path, &params, &runs).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// The hot-key scenario: two runs per keyed algorithm (bounded loads off and on), one table,
/// an SVG.
fn hot(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    no_nodes(&args, "hot-key")?;
    let options = args.options.options()?;
    let params = hot_key::Params {
        backends: args.backends.unwrap_or(10),
        servers: args.servers.unwrap_or(1),
        service_ms: args.service_ms,
        utilisation: args.utilisation.unwrap_or(0.7),
        requests: args.requests.unwrap_or(50_000),
        keys: args.keys.unwrap_or(10_000),
        hot_share: args.hot_share,
        factor: match options.hash_balance_factor {
            0 => 125,
            f => f,
        },
        seed: args.options.seed.unwrap_or(1),
    };
    params.validate().map_err(Failure::Usage)?;
    let (algorithms, unkeyed): (Vec<Algorithm>, Vec<Algorithm>) =
        chosen(&args).into_iter().partition(|a| a.is_keyed());
    if algorithms.is_empty() {
        return Err(Failure::Usage(
            "hot-key runs keyed algorithms only (bounded loads bound where keys go)".into(),
        ));
    }
    writeln!(
        out,
        "== hot-key: {} backends x {} server(s), FIFO, exponential service times with mean {} ms; key-0 carries {:.0}% of the requests, the others spread uniformly over {} keys ==",
        params.backends,
        params.servers,
        params.service_ms,
        params.hot_share * 100.0,
        params.keys - 1
    )?;
    writeln!(
        out,
        "Poisson arrivals at {:.0}% of capacity ({:.1} of {:.1} req/s); {} requests per run; seed {}",
        params.utilisation * 100.0,
        params.rate(),
        params.capacity(),
        params.requests,
        params.seed
    )?;
    writeln!(
        out,
        "bounded: hash_balance_factor {} (a key goes to the first node of its retry order with in-flight below ceil({} x (total in-flight + 1) / {}))",
        params.factor,
        params.factor as f64 / 100.0,
        params.backends
    )?;
    if !unkeyed.is_empty() {
        let names: Vec<&str> = unkeyed.iter().map(|a| a.name()).collect();
        writeln!(
            out,
            "skipped (unkeyed: no key to bound): {}",
            names.join(", ")
        )?;
    }
    let keys = failing_node::keys(params.keys);
    let mut runs = Vec::new();
    for algorithm in &algorithms {
        let usual = hot_key::usual_nodes(*algorithm, &params, options, &keys)?;
        for factor in [0, params.factor] {
            runs.push(hot_key::run(
                *algorithm, &params, options, factor, &keys, &usual,
            )?);
        }
    }
    writeln!(
        out,
        "\n{:<22} {:>6} {:>10} {:>10} {:>9} {:>10} {:>8} {:>9} {:>9} {:>10}",
        "algorithm",
        "factor",
        "p50 ms",
        "p99 ms",
        "max queue",
        "over bound",
        "hot node",
        "hot share",
        "hot moved",
        "cold moved"
    )?;
    for run in &runs {
        writeln!(
            out,
            "{:<22} {:>6} {:>10.1} {:>10.1} {:>9} {:>10} {:>8} {:>8.1}% {:>8.1}% {:>9.2}%",
            run.algorithm.name(),
            match run.factor {
                0 => "off".to_string(),
                f => f.to_string(),
            },
            run.quantile_ms(0.5),
            run.quantile_ms(0.99),
            run.max_queue.iter().max().copied().unwrap_or(0),
            run.over_bound,
            format!("b{}", run.hot_node),
            run.hot_node_share() * 100.0,
            run.hot_moved_share() * 100.0,
            run.cold_moved_share() * 100.0,
        )?;
    }
    writeln!(
        out,
        "(latency: arrival to completion; max queue: most requests at one backend, waiting or in \
         service; over bound: requests that took their backend over ceil({} x total in-flight \
         / {}); hot node: key-0's usual node, and its share of the requests; moved: requests \
         served away from their key's usual node, for key-0 and for the other keys)",
        params.factor as f64 / 100.0,
        params.backends
    )?;
    if let Some(path) = &args.svg {
        chart::draw_hot(path, &params, &runs).map_err(Failure::Usage)?;
        writeln!(out, "\nwrote {}", path.display())?;
    }
    Ok(())
}

/// The fleet of a request-loop scenario, from the shared flags.
fn fleet(args: &SimulateArgs, utilisation: f64, duration_s: f64) -> request_events::Fleet {
    request_events::Fleet {
        backends: args.backends.unwrap_or(10),
        servers: args.servers.unwrap_or(1),
        service_ms: args.service_ms,
        utilisation: args.utilisation.unwrap_or(utilisation),
        duration_s: args.duration_s.unwrap_or(duration_s),
        keys: args.keys.unwrap_or(10_000),
        seed: args.options.seed.unwrap_or(1),
    }
}

/// Rejects `--nodes` and `--requests` in a request-loop scenario (they run for a time).
fn timed(args: &SimulateArgs, scenario: &str) -> Result<(), Failure> {
    no_nodes(args, scenario)?;
    match args.requests {
        Some(_) => Err(Failure::Usage(format!(
            "{scenario} runs for --duration-s of virtual time; --requests belongs to slow-node and hot-key"
        ))),
        None => Ok(()),
    }
}

/// The algorithms chosen with `-a`, else `default`.
fn chosen_or(args: &SimulateArgs, default: Algorithm) -> Vec<Algorithm> {
    if args.algorithm.is_empty() {
        vec![default]
    } else {
        args.algorithm.clone()
    }
}

/// The retry-storm scenario: three runs per algorithm (no budget, retry budget, adaptive
/// throttle), one table, an SVG.
fn storm(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    timed(&args, "retry-storm")?;
    let params = retry_storm::Params {
        fleet: fleet(&args, 1.2, 30.0),
        timeout_ms: args.timeout_ms,
        attempts: args.attempts,
        window_s: args.window_s,
    };
    params.validate().map_err(Failure::Usage)?;
    let options = args.options.options()?;
    retry_storm::print(
        &params,
        &chosen_or(&args, Algorithm::LeastRequest),
        options,
        args.svg.as_deref(),
        out,
    )
}

/// The overloaded-node scenario: two runs per algorithm (without and with retries), one
/// table, an SVG.
fn overloaded(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    timed(&args, "overloaded-node")?;
    let params = overloaded_node::Params {
        fleet: fleet(&args, 0.7, 100.0),
        from_s: args.overload_from_s,
        until_s: args.overload_until_s,
        retry_after_s: args.retry_after_s,
        fail_ms: args.fail_ms,
        attempts: args.attempts,
    };
    params.validate().map_err(Failure::Usage)?;
    let options = args.options.options()?;
    let algorithms = if args.algorithm.is_empty() {
        vec![
            Algorithm::RoundRobin,
            Algorithm::LeastRequest,
            Algorithm::PeakEwma,
        ]
    } else {
        args.algorithm.clone()
    };
    overloaded_node::print(&params, &algorithms, options, args.svg.as_deref(), out)
}

/// The flaky-node scenario: two runs per algorithm (consecutive-failure ejection alone, and
/// with success-rate ejection), one table, an SVG.
fn flaky(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    timed(&args, "flaky-node")?;
    let params = flaky_node::Params {
        fleet: fleet(&args, 0.7, 60.0),
        from_s: args.fail_from_s,
        fail_rate: args.fail_rate,
        attempts: args.attempts,
    };
    params.validate().map_err(Failure::Usage)?;
    let options = args.options.options()?;
    let algorithms = if args.algorithm.is_empty() {
        vec![Algorithm::RoundRobin, Algorithm::LeastRequest]
    } else {
        args.algorithm.clone()
    };
    flaky_node::print(&params, &algorithms, options, args.svg.as_deref(), out)
}

/// The long-tail scenario: one run per hedging rule, one table, an SVG.
fn tail(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    timed(&args, "long-tail")?;
    let params = long_tail::Params {
        backends: args.backends.unwrap_or(10),
        servers: args.servers.unwrap_or(4),
        service_ms: args.service_ms,
        slow_share: args.slow_share,
        slowdown: args.slowdown.unwrap_or(20.0),
        utilisation: args.utilisation.unwrap_or(0.5),
        duration_s: args.duration_s.unwrap_or(60.0),
        warmup_s: args.warmup_s.unwrap_or(15.0),
        seed: args.options.seed.unwrap_or(1),
    };
    params.validate().map_err(Failure::Usage)?;
    let algorithm = match args.algorithm.as_slice() {
        [] => Algorithm::RoundRobin,
        [one] => *one,
        _ => return Err(Failure::Usage("long-tail takes one --algorithm".into())),
    };
    let options = args.options.options()?;
    long_tail::print(&params, algorithm, options, args.svg.as_deref(), out)
}

/// The zones scenario: three phases, each without and with zone-aware routing, one table, an
/// SVG.
fn zoned(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    timed(&args, "zones")?;
    let params = zones::Params {
        callers: zones::counts("--callers", &args.callers).map_err(Failure::Usage)?,
        backends: (zones::counts("--zone-backends", &args.zone_backends)
            .map_err(Failure::Usage)?
            .into_iter())
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .collect(),
        fallback: args.fallback_backends,
        servers: args.servers.unwrap_or(1),
        service_ms: args.service_ms,
        cross_zone_ms: args.cross_zone_ms,
        utilisation: args.utilisation.unwrap_or(0.6),
        duration_s: args.duration_s.unwrap_or(60.0),
        seed: args.options.seed.unwrap_or(1),
    };
    params.validate().map_err(Failure::Usage)?;
    let algorithm = match args.algorithm.as_slice() {
        [] => Algorithm::RoundRobin,
        [one] if !one.is_keyed() => *one,
        [_] => {
            return Err(Failure::Usage(
                "zones runs an unkeyed algorithm (zone-aware routing applies to those only)".into(),
            ));
        }
        _ => return Err(Failure::Usage("zones takes one --algorithm".into())),
    };
    let options = args.options.options()?;
    zones::print(&params, algorithm, options, args.svg.as_deref(), out)
}

/// The uneven scenario: one run per algorithm, a latency and spread table, a utilisation
/// table, an SVG.
fn unequal(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    timed(&args, "uneven")?;
    if args.keys.is_some() {
        return Err(Failure::Usage(
            "uneven runs unkeyed algorithms on requests without keys; --keys does not apply".into(),
        ));
    }
    let duration_s = args.duration_s.unwrap_or(180.0);
    let warmup_s = args.warmup_s.unwrap_or(60.0);
    let into = |share: f64| warmup_s + share * (duration_s - warmup_s);
    let params = uneven::Params {
        backends: args.backends.unwrap_or(10),
        servers: args.servers.unwrap_or(1),
        clients: args.clients.unwrap_or(20),
        warmup_s,
        restarts: !args.no_restarts,
        service_ms: args.service_ms,
        slowdown: args.slowdown.unwrap_or(4.0),
        utilisation: args.utilisation.unwrap_or(0.7),
        duration_s,
        background_from_s: args.background_from_s.unwrap_or(into(0.3)),
        background_until_s: args.background_until_s.unwrap_or(into(0.6)),
        background_slowdown: args.background_slowdown,
        probe_delay_ms: args.probe_delay_ms,
        latency_max_age_ms: args.latency_max_age_ms,
        seed: args.options.seed.unwrap_or(1),
    };
    params.validate().map_err(Failure::Usage)?;
    let algorithms = if args.algorithm.is_empty() {
        uneven::ALGORITHMS.to_vec()
    } else {
        args.algorithm.clone()
    };
    if algorithms.iter().any(|a| a.is_keyed()) {
        return Err(Failure::Usage(
            "uneven runs unkeyed algorithms only (keyed ones route by key, not by load)".into(),
        ));
    }
    let options = args.options.options()?;
    uneven::print(&params, &algorithms, options, args.svg.as_deref(), out)
}

/// The fleet scenario: a table per subset size, and the SRE book's cases.
fn subsets(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    no_nodes(&args, "fleet")?;
    if !args.algorithm.is_empty() {
        return Err(Failure::Usage(
            "fleet compares subsetting algorithms (--subset NAME), not balancing ones".into(),
        ));
    }
    let backends = args.backends.unwrap_or(1000);
    let clients = args.clients.unwrap_or(10_000);
    let params = fleet::Params {
        clients,
        backends,
        sizes: fleet::sizes(&args.subset_sizes).map_err(Failure::Usage)?,
        algorithms: fleet::algorithms(&args.subsets)?,
        grow_backends: args.grow_backends.unwrap_or(backends / 20),
        grow_clients: args.grow_clients.unwrap_or(clients / 20),
        seed: args.options.seed.unwrap_or(1),
    };
    params.validate().map_err(Failure::Usage)?;
    fleet::print(&params, args.svg.as_deref(), out)
}

/// The seeds scenario: one table per algorithm and node list.
fn seeds(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    let algorithms = if args.algorithm.is_empty() {
        Algorithm::ALL.to_vec()
    } else {
        args.algorithm.clone()
    };
    // Checked before the keys are made (10^10 of them aborted on allocation); 0 used to mean 1.
    let count = args.keys.unwrap_or(100_000);
    crate::bounded("--keys", count, 1, crate::MAX_KEYS).map_err(Failure::Usage)?;
    let scenarios = scenarios(args.nodes.as_deref())?;
    let keys: Vec<String> = (0..count).map(|i| format!("client-{i}")).collect();
    for scenario in scenarios {
        for algorithm in &algorithms {
            table(&scenario, *algorithm, &keys, &args.options, out)?;
        }
    }
    Ok(())
}

/// Whether the algorithm spreads load by weight (else uniformly over nodes with weight > 0).
fn weighted(algorithm: Algorithm) -> bool {
    // peak_ewma ignores weights other than 0 (tower, Finagle).
    !matches!(
        algorithm,
        Algorithm::Random | Algorithm::RoundRobin | Algorithm::PeakEwma
    )
}

fn place(b: &Balancer, keys: &[String]) -> Result<Vec<String>, Error> {
    Ok(b.pick_many(keys.iter().map(|k| k.as_bytes()))?
        .ids()
        .map(str::to_string)
        .collect())
}

fn table(
    scenario: &Scenario,
    algorithm: Algorithm,
    keys: &[String],
    options: &OptionArgs,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let options = options.options()?;
    let b = Balancer::new(algorithm, scenario.nodes.clone(), options)?;
    let placed = place(&b, keys)?;

    let active: Vec<&Node> = scenario.nodes.iter().filter(|n| n.weight > 0).collect();
    let weight_sum: u64 = active.iter().map(|n| u64::from(n.weight)).sum();
    let expected = |n: &Node| -> f64 {
        match (n.weight, weighted(algorithm)) {
            (0, _) => 0.0,
            (w, true) => f64::from(w) / weight_sum as f64,
            (_, false) => 1.0 / active.len() as f64,
        }
    };
    writeln!(
        out,
        "\n== {algorithm} on {} ({} nodes, {} picks) ==",
        scenario.name,
        scenario.nodes.len(),
        keys.len()
    )?;
    writeln!(
        out,
        "{:<22} {:>6} {:>9} {:>9}  chart",
        "node", "weight", "expected", "actual"
    )?;
    // Counted in one pass (a scan of every pick per node was quadratic).
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for id in &placed {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let mut peak: f64 = 0.0;
    for node in &scenario.nodes {
        let count = counts.get(&*node.id).copied().unwrap_or(0);
        let share = count as f64 / keys.len() as f64;
        let want = expected(node);
        if want > 0.0 {
            peak = peak.max(share / want);
        }
        let bar = "#".repeat((share * 50.0).round() as usize);
        writeln!(
            out,
            "{:<22} {:>6} {:>8.2}% {:>8.2}%  {bar}",
            node.id,
            node.weight,
            want * 100.0,
            share * 100.0
        )?;
    }

    let movement = if algorithm.is_keyed() && scenario.nodes.len() > 1 {
        let gone = &scenario.nodes[0];
        b.remove(&gone.id)?;
        let after = place(&b, keys)?;
        b.add(gone.clone())?;
        let moved = placed.iter().zip(&after).filter(|(a, b)| a != b).count();
        format!(
            "{:.2}% moved when {} is removed (ideal {:.2}%)",
            moved as f64 * 100.0 / keys.len() as f64,
            gone.id,
            expected(gone) * 100.0
        )
    } else {
        "key movement n/a (unkeyed)".to_string()
    };

    // Time single picks over pre-built keys; the best of 3 rounds damps noise.
    let key_bytes: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let best_ns = (0..3)
        .map(|_| {
            let start = Instant::now();
            for key in &key_bytes {
                black_box(b.pick(Some(black_box(key))).map(|p| p.tag()).ok());
            }
            start.elapsed().as_nanos() as f64 / key_bytes.len() as f64
        })
        .fold(f64::INFINITY, f64::min);
    writeln!(
        out,
        "max/mean {peak:.3} | {movement} | {best_ns:.1} ns/pick"
    )?;
    Ok(())
}
