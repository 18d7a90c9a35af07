//! `ServerLoad`, the server side of server-reported load: requests in flight, the rate window
//! with a manual clock, latency by in-flight level and its fallbacks, the ORCA report and its
//! header round trip through `parse_orca`, utilisation validation, and a concurrency smoke test.

use liblb_core::{Error, HeaderForm, LATENCY_METRIC, Probe, RIF_METRIC, ServerLoad, parse_orca};
use std::sync::Arc;
use std::time::Duration;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn in_flight_counts_starts_finishes_and_cancels() {
    let load = ServerLoad::new(0);
    assert_eq!(load.in_flight(), 0);
    let a = load.start(10);
    let b = load.start(20);
    let c = load.start(30);
    // Each token remembers the requests already in flight, itself not counted.
    assert_eq!((a.rif(), b.rif(), c.rif()), (0, 1, 2));
    assert_eq!((a.started_ns(), c.started_ns()), (10, 30));
    assert_eq!(load.in_flight(), 3);
    assert_eq!(load.finish(b, 20 + 7 * MS, true), ms(7));
    load.cancel(c);
    assert_eq!(load.in_flight(), 1);
    // A clock that went back gives a zero latency, not a panic.
    assert_eq!(load.finish(a, 5, false), Duration::ZERO);
    assert_eq!(load.in_flight(), 0);
    // Cancelled requests count nowhere: two completions, one failure.
    assert_eq!(load.rps(S), 2.0);
    assert_eq!(load.eps(S), 1.0);
}

#[test]
fn rates_slide_with_the_clock() {
    let load = ServerLoad::new(0);
    let finish_at = |t: u64, n: u32, ok: bool| {
        for _ in 0..n {
            let r = load.start(t);
            load.finish(r, t, ok);
        }
    };
    finish_at(S / 2, 10, true);
    finish_at(S / 2, 5, false);
    // Half a second into the server's life: divided by one slot at least, not by 0.5 s.
    assert_eq!((load.rps(S / 2), load.eps(S / 2)), (15.0, 5.0));
    // At 5 s the window covers the 5 s since creation.
    assert_eq!((load.rps(5 * S), load.eps(5 * S)), (3.0, 1.0));
    // At 9.99 s the first slot is still in (the window starts at 0).
    let t = 9 * S + 990 * MS;
    assert_eq!(load.rps(t), 15.0 / 9.99);
    // At 10.5 s the window is [1 s, 10.5 s]: the first slot has slid out.
    assert_eq!(
        (load.rps(10 * S + S / 2), load.eps(10 * S + S / 2)),
        (0.0, 0.0)
    );

    // Counts in several slots, seen over a full window: 10 at 10.5 s, 20 at 13.2 s, 30 at
    // 19.9 s; at 20.2 s the window is [11 s, 20.2 s] (9.2 s) and holds 50.
    finish_at(10 * S + S / 2, 10, true);
    finish_at(13 * S + 200 * MS, 20, true);
    finish_at(19 * S + 900 * MS, 30, false);
    let t = 20 * S + 200 * MS;
    assert_eq!(load.rps(t), 50.0 / 9.2);
    assert_eq!(load.eps(t), 30.0 / 9.2);
    // A silence longer than the window empties it.
    assert_eq!((load.rps(100 * S), load.eps(100 * S)), (0.0, 0.0));
    finish_at(100 * S, 1, true);
    assert_eq!(load.rps(100 * S), 1.0 / 9.0);
}

#[test]
fn a_custom_window_divides_by_its_own_length() {
    let load = ServerLoad::with_window(Duration::from_secs(60), 0).unwrap();
    for _ in 0..120 {
        let r = load.start(0);
        load.finish(r, S, true);
    }
    // 6 s slots: at 59 s the window still starts at 0 (9 older slots and 5 s of the tenth);
    // at 60 s it starts at 6 s, past the slot that holds them.
    assert_eq!(load.rps(59 * S), 120.0 / 59.0);
    assert_eq!(load.rps(60 * S), 0.0);
    for bad in [Duration::from_millis(999), Duration::from_secs(3601)] {
        let err = ServerLoad::with_window(bad, 0).unwrap_err();
        assert_eq!(err.code(), "LB_INVALID_OPTION_VALUE", "{bad:?}");
    }
}

#[test]
fn latency_is_attributed_to_the_rif_a_request_found() {
    let load = ServerLoad::new(0);
    assert_eq!(
        load.probe(0),
        Probe {
            rif: 0,
            latency: Duration::ZERO
        },
        "before any sample: zero"
    );
    // Alone: 5 ms, filed at RIF 0.
    let alone = load.start(0);
    load.finish(alone, 5 * MS, true);
    // With two others in flight: 30 ms, filed at RIF 2.
    let t = 100 * MS;
    let h1 = load.start(t);
    let h2 = load.start(t);
    let third = load.start(t);
    assert_eq!(third.rif(), 2);
    load.finish(third, t + 30 * MS, true);
    assert_eq!(
        load.probe(200 * MS),
        Probe {
            rif: 2,
            latency: ms(30)
        }
    );
    // Failures are not filed: h1 (RIF 0) and h2 (RIF 1) leave the estimates as they were.
    load.finish(h1, t + 800 * MS, false);
    load.finish(h2, t + 1, false);
    let now = 950 * MS;
    assert_eq!(
        load.probe(now),
        Probe {
            rif: 0,
            latency: ms(5)
        }
    );
    // Levels without samples fall back to the nearest level with some; RIF 1 is as near to
    // RIF 0 as to RIF 2, and the tie goes to the higher (slower) one.
    assert_eq!(load.latency_at(1, now), ms(30));
    assert_eq!(load.latency_at(7, now), ms(30));
    assert_eq!(load.latency_at(u32::MAX, now), ms(30));
}

#[test]
fn a_level_reports_the_median_of_its_recent_successes() {
    let load = ServerLoad::new(0);
    for latency_ms in [9, 1, 8, 2, 7] {
        let r = load.start(0);
        load.finish(r, latency_ms * MS, true);
    }
    assert_eq!(load.latency_at(0, 10 * MS), ms(7));
    // Eight faster ones replace every older sample.
    for _ in 0..8 {
        let r = load.start(0);
        load.finish(r, 3 * MS, true);
    }
    assert_eq!(load.latency_at(0, 10 * MS), ms(3));
    // RIF 16 to 19 share one level; 20 is the next.
    let t = 500 * MS;
    let held: Vec<_> = (0..17).map(|_| load.start(t)).collect();
    let r = load.start(t);
    assert_eq!(r.rif(), 17);
    load.finish(r, t + 40 * MS, true);
    let now = t + 50 * MS;
    assert_eq!(
        (load.latency_at(16, now), load.latency_at(19, now)),
        (ms(40), ms(40))
    );
    for h in held {
        load.cancel(h);
    }
    // Level 15 (RIF 15) is nearer to level 16 than to level 0.
    assert_eq!(load.latency_at(15, now), ms(40));
    assert_eq!(load.latency_at(7, now), ms(3)); // 7 from level 0, 9 from level 16
    assert_eq!(load.latency_at(8, now), ms(40)); // 8 from each: the higher
}

/// Samples count for `DEFAULT_LATENCY_MAX_AGE` (1 s): a level whose samples are older is passed over
/// for the nearest level with recent ones, and a server with none at all answers zero, as
/// before its first request, so a server that drew an unlucky estimate and lost its traffic
/// is tried again instead of starving.
#[test]
fn latencies_older_than_a_second_no_longer_count() {
    assert_eq!(ServerLoad::DEFAULT_LATENCY_MAX_AGE, Duration::from_secs(1));
    let load = ServerLoad::new(0);
    assert_eq!(load.latency_max_age(), Duration::from_secs(1));
    let r = load.start(0);
    load.finish(r, 50 * MS, true); // level 0: 50 ms, filed at 50 ms
    assert_eq!(
        load.latency_at(0, 50 * MS + S),
        ms(50),
        "a second old: still counts"
    );
    assert_eq!(
        load.latency_at(0, 51 * MS + S),
        Duration::ZERO,
        "older: gone"
    );
    assert_eq!(load.probe(10 * S).latency, Duration::ZERO);
    // Some samples of a level may be recent and others not: the median is of the recent.
    for (at, latency_ms) in [(2 * S, 90), (2 * S, 80), (2 * S + 600 * MS, 10)] {
        let r = load.start(at - latency_ms * MS);
        load.finish(r, at, true);
    }
    assert_eq!(load.latency_at(0, 2 * S + 700 * MS), ms(80)); // 10, 80, 90
    assert_eq!(load.latency_at(0, 3 * S + 500 * MS), ms(10)); // 10
    // A stale home level gives way to a recent neighbour, however far.
    let held: Vec<_> = (0..5).map(|_| load.start(4 * S)).collect();
    let r = load.start(4 * S);
    load.finish(r, 4 * S + 20 * MS, true); // level 5: 20 ms
    for h in held {
        load.cancel(h);
    }
    assert_eq!(load.latency_at(0, 4 * S + 30 * MS), ms(20));
    // A sample stamped a little after `now` (another thread read the clock later) counts.
    assert_eq!(load.latency_at(5, 4 * S), ms(20));
}

/// `with_latency_max_age` sets how long samples count (1 ms to 1 h, to the millisecond), and
/// refuses other ages naming `latency_max_age_ms`, as `with_window` names `window_ms`.
#[test]
fn the_latency_max_age_can_be_set() {
    let load = ServerLoad::with_window(Duration::from_secs(60), 0)
        .unwrap()
        .with_latency_max_age(Duration::from_millis(250))
        .unwrap();
    assert_eq!(load.latency_max_age(), ms(250));
    assert_eq!(load.window(), Duration::from_secs(60));
    assert_eq!(ServerLoad::new(0).window(), ServerLoad::DEFAULT_WINDOW);
    let r = load.start(0);
    load.finish(r, 10 * MS, true);
    assert_eq!(load.latency_at(0, 260 * MS), ms(10));
    assert_eq!(load.latency_at(0, 261 * MS), Duration::ZERO);
    let hour = Duration::from_secs(3600);
    let long = ServerLoad::new(0).with_latency_max_age(hour).unwrap();
    let r = long.start(0);
    long.finish(r, 10 * MS, true);
    assert_eq!(long.latency_at(0, 10 * MS + 3600 * S), ms(10));
    for bad in [Duration::ZERO, Duration::from_micros(999), hour + ms(1)] {
        let err = ServerLoad::new(0).with_latency_max_age(bad).unwrap_err();
        assert_eq!(err.code(), "LB_INVALID_OPTION_VALUE", "{bad:?}");
        assert!(err.to_string().contains("latency_max_age_ms"), "{err}");
    }
    let err = ServerLoad::new(0).with_latency_max_age(Duration::from_micros(500));
    assert!(err.unwrap_err().to_string().contains("0.5"));
    // Kept to the nearest millisecond (a float number of seconds rarely makes whole ones).
    let age = |us| {
        let load = ServerLoad::new(0);
        load.with_latency_max_age(Duration::from_micros(us))
            .unwrap()
            .latency_max_age()
    };
    assert_eq!(
        (age(1499), age(1500), age(299_999)),
        (ms(1), ms(2), ms(300))
    );
}

#[test]
fn a_server_that_only_fails_reports_no_latency() {
    let load = ServerLoad::new(0);
    for _ in 0..10 {
        let r = load.start(0);
        load.finish(r, MS, false);
    }
    assert_eq!(load.probe(S).latency, Duration::ZERO);
    assert_eq!(load.eps(S), 10.0);
}

#[test]
fn the_report_carries_utilisations_rates_and_rif() {
    let load = ServerLoad::new(0);
    load.set_cpu_utilization(0.5).unwrap();
    load.set_mem_utilization(0.25).unwrap();
    load.set_application_utilization(1.5).unwrap();
    for ok in [true, true, true, false] {
        let r = load.start(S);
        load.finish(r, S + S / 2, ok);
    }
    let _held = load.start(S);
    let report = load.report(2 * S);
    assert_eq!(report.cpu_utilization, 0.5);
    assert_eq!(report.mem_utilization, 0.25);
    assert_eq!(report.application_utilization, 1.5);
    assert_eq!(report.rps_fractional, 2.0);
    assert_eq!(report.eps, 0.5);
    assert_eq!(report.named_metric(RIF_METRIC), Some(1.0));
    // The latency estimate at RIF 1 (none was filed there: the nearest level's, RIF 0's).
    assert_eq!(report.named_metric(LATENCY_METRIC), Some(500.0));
    assert_eq!(report.named_metrics.len(), 2);
    assert_eq!(report.rps, 0);
    assert!(report.request_cost.is_empty() && report.utilization.is_empty());
}

#[test]
fn headers_round_trip_through_parse_orca() {
    let load = ServerLoad::new(0);
    // The idle server's report (only `rif` = 0) has a BIN form and a TEXT form too.
    assert_eq!(
        load.header(0, HeaderForm::Text).unwrap(),
        "TEXT named_metrics.rif:0"
    );
    for form in [HeaderForm::Bin, HeaderForm::Text] {
        let header = load.header(0, form).unwrap();
        assert_eq!(parse_orca(header.as_bytes()).unwrap(), load.report(0));
    }
    // A busy one, with rates that are not round numbers.
    load.set_cpu_utilization(0.731).unwrap();
    load.set_mem_utilization(1.0).unwrap();
    load.set_application_utilization(2.25).unwrap();
    for i in 0..7 {
        let r = load.start(i * 100 * MS);
        load.finish(r, i * 100 * MS + 3 * MS, i % 3 != 0);
    }
    let _held = (load.start(S), load.start(S));
    let now = 3 * S + 7 * MS;
    assert_eq!(load.report(now).rps_fractional, 7.0 / 3.007);
    let text = load.header(now, HeaderForm::Text).unwrap();
    assert!(text.starts_with("TEXT cpu_utilization:0.731,"), "{text}");
    assert!(text.ends_with(",named_metrics.rif:2"), "{text}");
    for form in [HeaderForm::Bin, HeaderForm::Text] {
        let header = load.header(now, form).unwrap();
        assert_eq!(
            parse_orca(header.as_bytes()).unwrap(),
            load.report(now),
            "{header}"
        );
    }
}

#[test]
fn invalid_utilisations_are_refused_and_change_nothing() {
    let load = ServerLoad::new(0);
    load.set_cpu_utilization(0.5).unwrap();
    load.set_mem_utilization(0.5).unwrap();
    load.set_application_utilization(0.5).unwrap();
    /// A utilisation setter, as a function of the load and the value.
    type Setter = fn(&ServerLoad, f64) -> liblb_core::Result<()>;
    let setters: [(&str, Setter); 3] = [
        ("cpu_utilization", ServerLoad::set_cpu_utilization),
        ("mem_utilization", ServerLoad::set_mem_utilization),
        (
            "application_utilization",
            ServerLoad::set_application_utilization,
        ),
    ];
    for (name, set) in setters {
        for bad in [
            f64::NAN,
            -1.0,
            -f64::MIN_POSITIVE,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let err = set(&load, bad).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidLoadReport(text) if text.contains(name)),
                "{name} = {bad}: {err}"
            );
            assert_eq!(err.code(), "LB_INVALID_LOAD_REPORT");
        }
    }
    // Memory is a fraction (0 to 1); CPU and application utilisation may exceed 1.
    assert!(load.set_mem_utilization(1.0 + f64::EPSILON).is_err());
    assert_eq!(
        (
            load.cpu_utilization(),
            load.mem_utilization(),
            load.application_utilization()
        ),
        (0.5, 0.5, 0.5)
    );
    load.set_cpu_utilization(3.0).unwrap();
    load.set_application_utilization(1e6).unwrap();
    // -0.0 is stored as 0.0 (so TEXT leaves it out and BIN writes nothing for it).
    load.set_mem_utilization(-0.0).unwrap();
    assert_eq!(load.mem_utilization().to_bits(), 0);
    assert_eq!(load.report(0).cpu_utilization, 3.0);
}

#[test]
#[cfg_attr(miri, ignore)] // threads and 16,000 requests: slow under Miri
fn concurrent_requests_leave_no_request_in_flight() {
    const THREADS: u64 = 4;
    const EACH: u64 = 4_000;
    let load = Arc::new(ServerLoad::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let load = Arc::clone(&load);
            std::thread::spawn(move || {
                for i in 0..EACH {
                    // Clocks spread over the first second, out of order between threads.
                    let now = (i * THREADS + t) * (S / (THREADS * EACH));
                    let a = load.start(now);
                    let b = load.start(now);
                    assert!(b.rif() <= 2 * THREADS as u32);
                    load.finish(a, now + MS, true);
                    load.finish(b, now + 2 * MS, i % 4 != 0);
                }
            })
        })
        .collect();
    let prober = {
        let load = Arc::clone(&load);
        std::thread::spawn(move || {
            for i in 0..2_000 {
                let probe = load.probe(i * MS / 2);
                assert!(probe.rif <= 2 * THREADS as u32);
                assert!(probe.latency <= ms(2));
                let report = load.report(i * MS / 2);
                assert!(report.rps_fractional >= 0.0 && report.eps <= report.rps_fractional);
            }
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    prober.join().unwrap();
    assert_eq!(load.in_flight(), 0);
    // Every completion landed in the window (the first 2 s), read at 2 s.
    let total = (2 * THREADS * EACH) as f64;
    assert_eq!(load.rps(2 * S), total / 2.0);
    assert_eq!(load.eps(2 * S), (THREADS * EACH / 4) as f64 / 2.0);
    assert_eq!(load.probe(2 * S).rif, 0);
}

#[test]
fn header_forms_by_name_and_tokens_from_parts() {
    // The names the bindings take (`header(form="bin")`); another is the core's option error.
    for (name, form) in HeaderForm::NAMES.iter().zip(HeaderForm::ALL) {
        assert_eq!(name.parse::<HeaderForm>().unwrap(), form);
    }
    let err = "BIN".parse::<HeaderForm>().unwrap_err();
    assert_eq!(err.code(), "LB_INVALID_OPTION_VALUE");
    assert!(err.to_string().contains("BIN"), "{err}");
    // A token rebuilt from its parts (C keeps them as plain data) finishes like the original.
    let load = ServerLoad::new(0);
    let original = load.start(5 * MS);
    let (started_ns, rif) = (original.started_ns(), original.rif());
    let _ = original; // C copies the parts out and lets the Rust token go
    let rebuilt = liblb_core::Started::from_parts(started_ns, rif);
    assert_eq!(load.finish(rebuilt, 9 * MS, true), ms(4));
    assert_eq!(load.in_flight(), 0);
}
