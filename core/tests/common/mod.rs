//! Helpers shared by the health tests (`health.rs`, `health_races.rs`).

use liblb_core::{OptionValue, Options};
use std::time::Duration;

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Options seeded with 7, with `pairs` set by name, in order.
pub fn options(pairs: &[(&str, &str)]) -> Options {
    let mut options = Options {
        seed: Some(7),
        ..Options::default()
    };
    for (name, value) in pairs {
        options.set(name, OptionValue::Str(value)).unwrap();
    }
    options
}
