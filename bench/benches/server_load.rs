//! Issue 25: the cost of server-reported load, each beside its peer in the same run.
//!
//! | group | liblb | peer |
//! |---|---|---|
//! | `orca_parse` | `parse_orca` of a typical report: serialized proto, `BIN` and `TEXT` header | prost's derived `OrcaLoadReport::decode` (plus base64 for `BIN`) |
//! | `client_side_wrr` (1000 nodes, every node reporting) | `Balancer::pick`; `report_load` | `round_robin`'s `pick` |
//! | `prequal` (100 nodes) | a pick with its 3 probe answers (`offer_probe`), and `offer_probe` alone | `peak_ewma` and `least_request` picks |
//! | `server_load` | `ServerLoad` start + finish; `probe`; `header` (TEXT) | — |
//!
//! Run: `cargo bench -p liblb-bench --bench server_load`; `python3 scripts/bench-report.py`.

use base64::Engine;
use criterion::{Criterion, criterion_group, criterion_main};
use liblb_bench::nodes;
use liblb_core::{Algorithm, Balancer, HeaderForm, LoadReport, Options, ServerLoad, parse_orca};
use prost::Message;
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

/// cncf/xds `xds/data/orca/v3/orca_load_report.proto`, derived by prost (the peer decoder).
#[derive(Clone, PartialEq, prost::Message)]
struct OrcaLoadReport {
    #[prost(double, tag = "1")]
    cpu_utilization: f64,
    #[prost(double, tag = "2")]
    mem_utilization: f64,
    #[prost(uint64, tag = "3")]
    rps: u64,
    #[prost(map = "string, double", tag = "4")]
    request_cost: HashMap<String, f64>,
    #[prost(map = "string, double", tag = "5")]
    utilization: HashMap<String, f64>,
    #[prost(double, tag = "6")]
    rps_fractional: f64,
    #[prost(double, tag = "7")]
    eps: f64,
    #[prost(map = "string, double", tag = "8")]
    named_metrics: HashMap<String, f64>,
    #[prost(double, tag = "9")]
    application_utilization: f64,
}

/// A typical report: what a `ServerLoad` backend sends (three utilisations, the rates, `rif`
/// and `latency_ms`).
fn report() -> LoadReport {
    LoadReport {
        cpu_utilization: 0.52,
        mem_utilization: 0.31,
        application_utilization: 0.67,
        rps_fractional: 1234.5,
        eps: 2.25,
        named_metrics: vec![("latency_ms".into(), 12.5), ("rif".into(), 7.0)],
        ..LoadReport::default()
    }
}

fn parse(c: &mut Criterion) {
    let report = report();
    let proto = report.to_proto();
    let bin = report.to_header(HeaderForm::Bin).unwrap();
    let text = report.to_header(HeaderForm::Text).unwrap();
    let body = bin.strip_prefix("BIN ").unwrap().to_string();
    assert_eq!(
        OrcaLoadReport::decode(&proto[..]).unwrap().rps_fractional,
        1234.5
    );
    let mut g = c.benchmark_group("orca_parse");
    g.bench_function("liblb_proto", |b| {
        b.iter(|| black_box(parse_orca(black_box(&proto)).unwrap()))
    });
    g.bench_function("prost_proto", |b| {
        b.iter(|| black_box(OrcaLoadReport::decode(black_box(&proto[..])).unwrap()))
    });
    g.bench_function("liblb_bin", |b| {
        b.iter(|| black_box(parse_orca(black_box(bin.as_bytes())).unwrap()))
    });
    g.bench_function("base64_prost_bin", |b| {
        b.iter(|| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(black_box(&body))
                .unwrap();
            black_box(OrcaLoadReport::decode(&bytes[..]).unwrap())
        })
    });
    g.bench_function("liblb_text", |b| {
        b.iter(|| black_box(parse_orca(black_box(text.as_bytes())).unwrap()))
    });
    g.finish();
}

fn client_side_wrr(c: &mut Criterion) {
    const N: usize = 1000;
    let options = Options {
        blackout_period: Duration::ZERO,
        ..Options::default()
    };
    let wrr = Balancer::new(Algorithm::ClientSideWrr, nodes(N, false), options).unwrap();
    let ids: Vec<String> = wrr.nodes().into_iter().map(|n| n.id).collect();
    // Capacities 1x to 4x: utilisation per qps falls as capacity grows.
    for (i, id) in ids.iter().enumerate() {
        let load = LoadReport {
            application_utilization: 0.7 / (1.0 + (i % 4) as f64),
            rps_fractional: 100.0,
            ..LoadReport::default()
        };
        wrr.report_load(id, &load).unwrap();
    }
    let rr = Balancer::new(Algorithm::RoundRobin, nodes(N, false), Options::default()).unwrap();
    let mut g = c.benchmark_group("client_side_wrr");
    g.bench_function("client_side_wrr", |b| {
        b.iter(|| black_box(wrr.pick(None).unwrap().index()))
    });
    g.bench_function("round_robin", |b| {
        b.iter(|| black_box(rr.pick(None).unwrap().index()))
    });
    let load = report();
    let mut i = 0;
    g.bench_function("report_load", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            wrr.report_load(black_box(&ids[i]), &load).unwrap()
        })
    });
    g.finish();
}

fn prequal(c: &mut Criterion) {
    const N: usize = 100;
    let options = Options {
        seed: Some(1),
        max_probe_age: Duration::from_secs(3600),
        ..Options::default()
    };
    let pq = Balancer::new(Algorithm::Prequal, nodes(N, false), options).unwrap();
    let ids: Vec<String> = pq.nodes().into_iter().map(|n| n.id).collect();
    let mut next = 0;
    let mut answer = |b: &Balancer| {
        next = (next + 7) % N;
        let rif = (next % 13) as u32;
        let latency = Duration::from_micros(500 + 97 * next as u64);
        b.offer_probe(&ids[next], rif, latency).unwrap();
    };
    for _ in 0..64 {
        answer(&pq);
    }
    let ewma = Balancer::new(Algorithm::PeakEwma, nodes(N, false), options).unwrap();
    let lr = Balancer::new(Algorithm::LeastRequest, nodes(N, false), options).unwrap();
    let mut g = c.benchmark_group("prequal");
    // The steady state: each pick makes 3 probes due, and their answers come back.
    g.bench_function("pick_with_3_answers", |b| {
        b.iter(|| {
            let picked = pq.pick(None).unwrap().index();
            for _ in 0..3 {
                answer(&pq);
            }
            black_box(picked)
        })
    });
    g.bench_function("offer_probe", |b| b.iter(|| answer(&pq)));
    g.bench_function("peak_ewma", |b| {
        b.iter(|| black_box(ewma.pick(None).unwrap().index()))
    });
    g.bench_function("least_request", |b| {
        b.iter(|| black_box(lr.pick(None).unwrap().index()))
    });
    g.finish();
}

fn server_load(c: &mut Criterion) {
    let load = ServerLoad::new(0);
    load.set_cpu_utilization(0.5).unwrap();
    let mut now = 0u64;
    let mut g = c.benchmark_group("server_load");
    g.bench_function("start_finish", |b| {
        b.iter(|| {
            now += 1000;
            let request = load.start(now);
            black_box(load.finish(request, now + 500, true))
        })
    });
    g.bench_function("probe", |b| b.iter(|| black_box(load.probe(now))));
    g.bench_function("header_text", |b| {
        b.iter(|| black_box(load.header(now, HeaderForm::Text).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, parse, client_side_wrr, prequal, server_load);
criterion_main!(benches);
