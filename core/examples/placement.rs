//! Prints liblb's placements for the upstream comparison scripts (scripts/test-upstream.sh).
//!
//! Reads commands from stdin, one a line, and answers each query with one line:
//!
//! ```text
//! algorithm ketama          # first line
//! option table_size 65537   # integer options, before the first query
//! node 10.0.0.1:11211 3     # id and weight, before the first query
//! key some key text         # -> the id for the key (the rest of the line, bytes as given)
//! hash 1234                 # -> the id for a 64-bit hash (pick_hash), decimal
//! attempts 3 some key       # -> up to 3 ids in retry order, space-separated
//! ```
//!
//! Run: `cargo run -q -p liblb-core --features testing --example placement < commands`.

use liblb_core::Node;
use liblb_core::placement::Placement;
use std::io::{BufRead, BufWriter, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stdin = std::io::stdin();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut algorithm = String::new();
    let mut options: Vec<(String, u64)> = Vec::new();
    let mut nodes = Vec::new();
    let mut placement: Option<Placement> = None;
    for line in stdin.lock().lines() {
        let line = line?;
        let (command, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match command {
            "algorithm" => algorithm = rest.to_string(),
            "option" => {
                let (name, value) = rest.split_once(' ').ok_or("option NAME VALUE")?;
                options.push((name.to_string(), value.parse()?));
            }
            "node" => {
                let (id, weight) = rest.rsplit_once(' ').ok_or("node ID WEIGHT")?;
                nodes.push(Node::new(id, weight.parse()?));
            }
            "key" | "hash" | "attempts" => {
                if placement.is_none() {
                    let opts: Vec<(&str, u64)> =
                        options.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                    placement = Some(Placement::new(
                        &algorithm,
                        &opts,
                        std::mem::take(&mut nodes),
                    )?);
                }
                let p = placement.as_ref().expect("built above");
                let answer = match command {
                    "key" => p.pick(rest.as_bytes()).unwrap_or("-").to_string(),
                    "hash" => p
                        .pick_hash(rest.parse()?)
                        .ok_or("no pick_hash")?
                        .to_string(),
                    _ => {
                        let (limit, key) = rest.split_once(' ').unwrap_or((rest, ""));
                        p.attempts(key.as_bytes(), limit.parse()?).join(" ")
                    }
                };
                writeln!(out, "{answer}")?;
            }
            "" => {}
            _ => return Err(format!("unknown command {command:?}").into()),
        }
    }
    out.flush()?;
    Ok(())
}
