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
//! Run: `cargo run -q -p liblb-core --example placement < commands`. It drives the public
//! `Balancer`, exactly as users reach the algorithms.

use liblb_core::{Algorithm, Balancer, Error, Node, OptionValue, Options};
use std::io::{BufRead, BufWriter, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stdin = std::io::stdin();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut algorithm = String::new();
    let mut options = Options::default();
    let mut nodes = Vec::new();
    let mut balancer: Option<Balancer> = None;
    for line in stdin.lock().lines() {
        let line = line?;
        let (command, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match command {
            "algorithm" => algorithm = rest.to_string(),
            "option" => {
                let (name, value) = rest.split_once(' ').ok_or("option NAME VALUE")?;
                options.set(name, OptionValue::Int(value.parse()?))?;
            }
            "node" => {
                let (id, weight) = rest.rsplit_once(' ').ok_or("node ID WEIGHT")?;
                nodes.push(Node::new(id, weight.parse()?));
            }
            "key" | "hash" | "attempts" => {
                if balancer.is_none() {
                    let algorithm: Algorithm = algorithm.parse()?;
                    balancer = Some(Balancer::new(
                        algorithm,
                        std::mem::take(&mut nodes),
                        options,
                    )?);
                }
                let b = balancer.as_ref().expect("built above");
                let answer = match command {
                    "key" => match b.pick(Some(rest.as_bytes())) {
                        Ok(picked) => picked.id().to_string(),
                        Err(Error::NoNodes) => "-".to_string(),
                        Err(e) => return Err(e.into()),
                    },
                    "hash" => b.pick_hash(rest.parse()?)?.id().to_string(),
                    _ => {
                        let (limit, key) = rest.split_once(' ').unwrap_or((rest, ""));
                        match b.attempts(Some(key.as_bytes()), limit.parse()?) {
                            Ok(order) => order.ids().collect::<Vec<_>>().join(" "),
                            Err(Error::NoNodes) => String::new(),
                            Err(e) => return Err(e.into()),
                        }
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
