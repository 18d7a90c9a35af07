//! The default clock (`MonotonicClock`): the source the kernel trusts, and time that agrees
//! with the OS monotonic clock and never runs backwards, on one thread or across threads.

use liblb_core::MonotonicClock;
use std::time::{Duration, Instant};

#[test]
fn the_source_follows_the_kernels_clocksource() {
    let kernel =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    let expected = match kernel {
        Ok(source) if cfg!(target_os = "linux") && source.trim() == "tsc" => "tsc",
        _ => "os",
    };
    assert_eq!(MonotonicClock::source(), expected);
}

#[test]
fn it_agrees_with_the_os_clock() {
    // Whatever the source, an interval read on both clocks agrees to well within a millisecond
    // per second (a calibrated counter is off by parts per million; the readings themselves
    // are a few hundred nanoseconds apart). The first reading calibrates the counter (about a
    // millisecond): take it before timing.
    MonotonicClock::now();
    for sleep in [Duration::from_millis(20), Duration::from_millis(150)] {
        let (os, ours) = (Instant::now(), MonotonicClock::now());
        std::thread::sleep(sleep);
        let ours = Duration::from_nanos(MonotonicClock::now() - ours);
        let os = os.elapsed();
        let error = ours.abs_diff(os);
        assert!(ours >= sleep, "{ours:?} < the {sleep:?} slept");
        assert!(
            error < Duration::from_micros(200) + os / 1000,
            "liblb's clock read {ours:?}, the OS clock {os:?}"
        );
    }
}

#[test]
fn it_never_runs_backwards_within_or_across_threads() {
    let mut last = MonotonicClock::now();
    for _ in 0..100_000 {
        let now = MonotonicClock::now();
        assert!(now >= last, "{now} after {last}");
        last = now;
    }
    // A reading handed to another thread is never later than that thread's next reading.
    for _ in 0..200 {
        let sent = MonotonicClock::now();
        let read = std::thread::spawn(MonotonicClock::now).join().unwrap();
        assert!(read >= sent, "{read} read after {sent} was sent");
    }
}
