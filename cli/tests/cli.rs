//! The `lb` command, run as a user would.

use std::process::{Command, Output};

fn lb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(args)
        .output()
        .expect("lb runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn pick_prints_each_keys_node() {
    let o = lb(&[
        "pick", "-a", "ring", "--vnodes", "3", "-n", "NodeA", "-n", "NodeB", "-n", "NodeC", "Key1",
        "Key2", "Key3",
    ]);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "Key1\tNodeB\nKey2\tNodeA\nKey3\tNodeC\n"); // seed 001
}

#[test]
fn pick_unkeyed_counts_and_attempts() {
    let o = lb(&[
        "pick",
        "-a",
        "weighted_round_robin",
        "-n",
        "a=5",
        "-n",
        "b",
        "-n",
        "c",
        "--count",
        "7",
    ]);
    assert_eq!(stdout(&o).replace('\n', ""), "aabacaa");
    let o = lb(&[
        "pick",
        "-a",
        "round_robin",
        "-n",
        "a",
        "-n",
        "b",
        "-n",
        "c",
        "--attempts",
        "5",
    ]);
    assert_eq!(stdout(&o), "a,b,c\n");
}

#[test]
fn bad_input_fails_with_a_clear_message() {
    let o = lb(&["pick", "-a", "ring", "-n", "a"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs a key"));
    let o = lb(&["pick", "-a", "rings", "-n", "a", "k"]);
    assert!(!o.status.success());
    // clap lists the registered names (the same list as the core's error message).
    assert!(String::from_utf8_lossy(&o.stderr).contains("possible values: random"));
    let o = lb(&["pick", "-a", "ring", "-n", "a", "-n", "a", "k"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("duplicate node id \"a\""));
    let o = lb(&["pick", "-a", "ring", "-n", "a=heavy", "k"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"heavy\""));
}

#[test]
fn simulate_prints_a_table_per_algorithm_and_scenario() {
    let o = lb(&["simulate", "--keys", "2000"]);
    assert!(o.status.success());
    let text = stdout(&o);
    // Every registered algorithm on each of the two seed scenarios.
    let tables = 2 * liblb_core::Algorithm::NAMES.len();
    assert_eq!(text.matches("\n== ").count(), tables, "{text}");
    assert_eq!(text.matches("ns/pick").count(), tables);
    assert!(text.contains("moved when 192.168.1.1 is removed"));
    let o = lb(&[
        "simulate",
        "--nodes",
        "20",
        "--keys",
        "500",
        "--algorithm",
        "ring",
    ]);
    assert_eq!(stdout(&o).matches("\n== ").count(), 1);
}

/// The help lists every registered algorithm (it reads the core's list, so a new algorithm
/// cannot be missing from it).
#[test]
fn pick_help_lists_every_algorithm() {
    let o = lb(&["pick", "--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    for name in liblb_core::Algorithm::NAMES {
        assert!(help.contains(name), "{name} missing from:\n{help}");
    }
    let o = lb(&["pick", "-a", "nope", "-n", "a"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("weighted_round_robin"));
}

/// The latency table of `lb simulate --scenario slow-node`: (algorithm, p50, p99, p99.9) per
/// row, read back from the printed text.
fn latency_rows(text: &str) -> Vec<(String, f64, f64, f64)> {
    let start = text
        .lines()
        .position(|l| l.starts_with("algorithm") && l.contains("p99 ms"))
        .expect("a latency table");
    text.lines()
        .skip(start + 1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with('('))
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| cells[i].parse::<f64>().expect("a number");
            (cells[0].to_string(), num(1), num(2), num(3))
        })
        .collect()
}

/// The bar, on the default scenario (70% utilisation, 10 backends, one 10x slower):
/// least_request and peak_ewma keep p99 at least 5x below round_robin's. The run also checks
/// the table's rows and the SVG, so the default scenario is simulated only once here.
#[test]
fn slow_node_feedback_beats_round_robin_and_draws_an_svg() {
    let dir = std::env::temp_dir().join(format!("lb-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("slow-node.svg");
    let o = lb(&[
        "simulate",
        "--scenario",
        "slow-node",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    let rows = latency_rows(&text);
    // One row per unkeyed algorithm, in registration order; the keyed ones are named as skipped.
    let unkeyed: Vec<&str> = liblb_core::Algorithm::ALL
        .iter()
        .filter(|a| !a.is_keyed())
        .map(|a| a.name())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names, unkeyed, "{text}");
    for keyed in liblb_core::Algorithm::ALL.iter().filter(|a| a.is_keyed()) {
        assert!(
            text.lines()
                .any(|l| l.starts_with("skipped") && l.contains(keyed.name())),
            "{text}"
        );
    }
    for (name, p50, p99, p999) in &rows {
        assert!(0.0 < *p50 && p50 <= p99 && p99 <= p999, "{name}: {text}");
    }
    let p99 = |name: &str| rows.iter().find(|r| r.0 == name).unwrap().2;
    for feedback in ["least_request", "peak_ewma"] {
        assert!(
            p99(feedback) * 5.0 <= p99("round_robin"),
            "{feedback} p99 {} vs round_robin {}:\n{text}",
            p99(feedback),
            p99("round_robin")
        );
    }
    // The SVG: an SVG document naming every algorithm drawn.
    let drawn = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let head = drawn.trim_start();
    assert!(
        head.starts_with("<svg") || head.starts_with("<?xml"),
        "{head:.80}"
    );
    assert!(drawn.trim_end().ends_with("</svg>"));
    for name in &unkeyed {
        assert!(drawn.contains(name), "{name} missing from the SVG");
    }
    // The README's picture is this run's: a change that moves it fails here (LB_BLESS=1
    // rewrites it; then update the README's table from this run's output too).
    let committed = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/slow-node.svg");
    if std::env::var_os("LB_BLESS").is_some() {
        std::fs::write(committed, &drawn).unwrap();
    }
    assert!(
        std::fs::read_to_string(committed).unwrap() == drawn,
        "docs/slow-node.svg is stale: rerun with LB_BLESS=1 and update README.md's table from:\n{text}"
    );
}

/// Same seed, same output (virtual time only: nothing reads the wall clock); another seed
/// gives another workload.
#[test]
fn slow_node_is_deterministic() {
    let run = |seed: &str| {
        let o = lb(&[
            "simulate",
            "--scenario",
            "slow-node",
            "--requests",
            "20000",
            "--seed",
            seed,
            "-a",
            "round_robin",
            "-a",
            "peak_ewma",
            "-a",
            "least_request",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        stdout(&o)
    };
    let first = run("42");
    assert_eq!(latency_rows(&first).len(), 3);
    assert_eq!(first, run("42"));
    assert_ne!(first, run("43"));
}

#[test]
fn scenarios_are_listed_and_bad_parameters_named() {
    let o = lb(&["simulate", "--scenario", "help"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(
        text.contains("seeds") && text.contains("slow-node"),
        "{text}"
    );
    let o = lb(&["simulate", "--scenario", "fast-node"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("seeds") && err.contains("slow-node"), "{err}");
    let o = lb(&[
        "simulate",
        "--scenario",
        "slow-node",
        "--utilisation",
        "1.5",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--utilisation"));
    let o = lb(&["simulate", "--svg", "x.svg"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("slow-node"));
    let o = lb(&["simulate", "--scenario", "slow-node", "-a", "ring"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unkeyed"));
    let o = lb(&["simulate", "--scenario", "slow-node", "--nodes", "3"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--backends"));
}
