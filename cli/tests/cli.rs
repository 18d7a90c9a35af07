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
