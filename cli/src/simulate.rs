//! `lb simulate`: every algorithm on a scenario, one table each.
//!
//! The built-in scenarios are the seeds' own node lists: seed 000's three weighted servers
//! (2, 7, 1) and seed 002's seven endpoints. For each algorithm the table shows every node's
//! share of the picks against the share it should get (weight / Σweight for the weighted
//! algorithms, 1/n for `random` and `round_robin`, which ignore weights), a bar chart, the
//! max/mean load (the busiest node's share over its expected share), the share of keys that
//! change node when the first node is removed (keyed algorithms; the ideal is that node's share),
//! and the time per pick.

use crate::{Failure, OptionArgs, parse_node};
use clap::Args;
use liblb_core::{Algorithm, Balancer, Error, Node};
use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

#[derive(Args)]
pub(crate) struct SimulateArgs {
    /// Nodes: a count N (nodes 10.0.0.i:80, weight 1) or a comma list ID[=WEIGHT],...
    /// Default: the seeds' scenarios.
    #[arg(long)]
    nodes: Option<String>,
    /// Number of keys (= picks) per algorithm.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Only this algorithm (repeatable); default: all.
    #[arg(long, value_parser = crate::algorithm_parser())]
    algorithm: Vec<Algorithm>,
    #[command(flatten)]
    options: OptionArgs,
}

struct Scenario {
    name: String,
    nodes: Vec<Node>,
}

fn scenarios(spec: Option<&str>) -> Result<Vec<Scenario>, Error> {
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
    let nodes = match spec.parse::<usize>() {
        Ok(n) => (0..n)
            .map(|i| Node::new(format!("10.0.{}.{}:80", i / 256, i % 256), 1))
            .collect(),
        Err(_) => spec
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
        name: format!("{} nodes", spec.split(',').count().max(1)),
        nodes,
    }])
}

pub(crate) fn run(args: SimulateArgs, out: &mut impl Write) -> Result<(), Failure> {
    let algorithms = if args.algorithm.is_empty() {
        Algorithm::ALL.to_vec()
    } else {
        args.algorithm.clone()
    };
    let keys: Vec<String> = (0..args.keys.max(1))
        .map(|i| format!("client-{i}"))
        .collect();
    for scenario in scenarios(args.nodes.as_deref())? {
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
    let mut peak: f64 = 0.0;
    for node in &scenario.nodes {
        let count = placed.iter().filter(|id| **id == *node.id).count();
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
