//! `lb simulate --scenario slow-node --svg FILE`: the runs as a picture, drawn with plotters'
//! SVG backend (no system fonts needed: text is left to the SVG viewer).
//!
//! Left: each algorithm's latency CDF on a logarithmic latency axis (the fraction of requests
//! done within a latency); a line that flattens below 1 is the share of requests stuck behind
//! the slow backend. Right: each backend's share of requests per algorithm, grouped by
//! backend, against its share of capacity (the black line).

use crate::slow_node::{Params, Run, backend_id};
use crate::{failing_node, hot_key};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Points per CDF line: enough for a smooth curve, few enough for a small file.
const CDF_POINTS: usize = 160;

/// Writes the chart of `runs` to `path`.
pub(crate) fn draw(path: &Path, params: &Params, runs: &[Run]) -> Result<(), String> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let title = format!(
        "slow-node: {} backends, backend-0 {}x slower, Poisson arrivals at {:.0}% of capacity, {} requests, seed {}",
        params.backends,
        params.slowdown,
        params.utilisation * 100.0,
        params.requests,
        params.seed
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(700);
    let series: Vec<(&str, &[u64])> = (runs.iter())
        .map(|r| (r.algorithm.name(), &r.latencies[..]))
        .collect();
    cdf(&left, "latency CDF (arrival to completion)", &series).map_err(|e| fail(&e))?;
    shares(&right, params, runs).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// A distinct colour per algorithm (in the order runs are given).
fn colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 8] = [
        RGBColor(228, 26, 28),
        RGBColor(255, 127, 0),
        RGBColor(166, 86, 40),
        RGBColor(247, 129, 191),
        RGBColor(55, 126, 184),
        RGBColor(77, 175, 74),
        RGBColor(152, 78, 163),
        RGBColor(90, 90, 90),
    ];
    COLOURS[i % COLOURS.len()]
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>>;

/// A long-tail run's picture: for each of `series` (name, sorted latencies in ns), the share
/// of requests slower than each latency, both axes logarithmic, so the tail (p99, p99.9) is as
/// wide as the body. Written to `path`.
pub(crate) fn draw_tail(path: &Path, title: &str, series: &[(&str, &[u64])]) -> Result<(), String> {
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    // Four colours, the long-tail picture's (the hedging runs), as it was first drawn.
    let palette = |i: usize| colour([0, 4, 5, 6][i % 4]);
    tail(&root, series, &palette).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// `lb simulate --scenario uneven --svg FILE`. Left: each algorithm's latency tail (share of
/// requests slower than each latency, log-log); right: each backend's utilisation over the
/// run per algorithm (`utilisation`: name, percent per backend), bars grouped by backend.
pub(crate) fn draw_uneven(
    path: &Path,
    title: &str,
    latencies: &[(&str, &[u64])],
    utilisation: &[(&str, Vec<f64>)],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(640);
    tail(&left, latencies, &colour).map_err(|e| fail(&e))?;
    bars(&right, utilisation).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// Where grouped bars go: the chart's caption, a label per group, the axes' names and the
/// top of the scale (values above it are clipped; the scale runs 40% higher, with no labels
/// there, to leave the legend room).
struct BarAxes<'a> {
    caption: &'a str,
    label: &'a dyn Fn(usize) -> String,
    x_desc: &'a str,
    y_desc: &'a str,
    top: f64,
}

/// The uneven scenario's bars: per backend, its utilisation under each algorithm.
fn bars(area: &Area<'_>, series: &[(&str, Vec<f64>)]) -> DrawResult {
    let axes = BarAxes {
        caption: "utilisation per backend over the run",
        label: &|i| format!("b{i}"),
        x_desc: "backend (b0 slowest, the last fastest)",
        y_desc: "% busy",
        top: 100.0,
    };
    grouped_bars(area, &axes, series)
}

/// Grouped bars: per group, one bar per series (in `colour(i)`), from 0 to `axes.top`.
fn grouped_bars(area: &Area<'_>, axes: &BarAxes<'_>, series: &[(&str, Vec<f64>)]) -> DrawResult {
    let n = series.iter().map(|s| s.1.len()).max().unwrap_or(1);
    let top = axes.top;
    let mut chart = ChartBuilder::on(area)
        .caption(axes.caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..top * 1.4)?; // room for the legend
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                (axes.label)(i as usize)
            } else {
                String::new()
            }
        })
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .y_label_formatter(&|v| {
            if *v <= top {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (i, (name, values)) in series.iter().enumerate() {
        let fill = colour(i).filled();
        chart
            .draw_series(values.iter().enumerate().map(|(b, v)| {
                let x0 = b as f64 - 0.4 + width * i as f64;
                Rectangle::new([(x0, 0.0), (x0 + width, v.min(top))], fill)
            }))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], fill));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

/// `lb simulate --scenario fleet --svg FILE`. Left: each algorithm's connections per backend,
/// sorted, as a percentage of the mean (flat at 100 is the SRE book's ideal). Right: the churn
/// of each event, per algorithm (`events` name the groups).
pub(crate) fn draw_fleet(
    path: &Path,
    title: &str,
    connections: &[(&str, Vec<u64>)],
    events: &[String],
    churn: &[(&str, Vec<f64>)],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(640);
    sorted_lines(&left, connections).map_err(|e| fail(&e))?;
    let label = |i: usize| events.get(i).cloned().unwrap_or_default();
    let axes = BarAxes {
        caption: "churn: connections opened + closed, % of all",
        label: &label,
        x_desc: "event",
        y_desc: "% of connections",
        top: 200.0,
    };
    grouped_bars(&right, &axes, churn).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// One line per series: its values sorted, as a percentage of their mean, over the rank.
fn sorted_lines(area: &Area<'_>, series: &[(&str, Vec<u64>)]) -> DrawResult {
    let n = series.iter().map(|s| s.1.len()).max().unwrap_or(1).max(2);
    let lines: Vec<(&str, Vec<(f64, f64)>)> = (series.iter())
        .map(|(name, values)| {
            let mean = values.iter().sum::<u64>() as f64 / values.len().max(1) as f64;
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let points = (sorted.iter().enumerate())
                .map(|(i, v)| (i as f64, *v as f64 / mean.max(1e-9) * 100.0))
                .collect();
            (*name, points)
        })
        .collect();
    let top = (lines.iter())
        .flat_map(|(_, p)| p.iter().map(|p| p.1))
        .fold(100.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption("connections per backend, sorted", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..(n - 1) as f64, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("backends, fewest connections first")
        .y_desc("% of the mean")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    for (i, (name, points)) in lines.into_iter().enumerate() {
        let style = colour(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points, style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

fn tail(
    area: &Area<'_>,
    runs: &[(&str, &[u64])],
    palette: &dyn Fn(usize) -> RGBColor,
) -> DrawResult {
    let n_min = runs.iter().map(|r| r.1.len()).min().unwrap_or(1).max(1) as f64;
    let floor = 0.5 / n_min; // below one request in the smallest run
    let lo = runs
        .iter()
        .map(|r| quantile_ms(r.1, 0.5).max(1e-3))
        .fold(f64::INFINITY, f64::min);
    let hi = runs
        .iter()
        .map(|r| (*r.1.last().expect("a run has requests") as f64 / 1e6).max(1e-3))
        .fold(0.0, f64::max);
    let (lo, hi) = (lo * 0.9, hi * 1.1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "share of requests slower than (arrival to first answer)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), (floor..0.6).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("latency, ms (log scale)")
        .y_desc("share slower (log scale)")
        .y_label_formatter(&|v| format!("{v:e}"))
        .draw()?;
    for (i, &(name, latencies)) in runs.iter().enumerate() {
        let n = latencies.len() as f64;
        let points: Vec<(f64, f64)> = (0..=CDF_POINTS)
            .map(|k| {
                let x = lo * (hi / lo).powf(k as f64 / CDF_POINTS as f64);
                let within = latencies.partition_point(|ns| (*ns as f64 / 1e6) <= x);
                (x, ((n - within as f64) / n).max(floor))
            })
            .collect();
        let style = palette(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points, style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

/// The `q` quantile (nearest rank) of sorted `latencies`, in milliseconds.
fn quantile_ms(latencies: &[u64], q: f64) -> f64 {
    let n = latencies.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    latencies[rank - 1] as f64 / 1e6
}

fn cdf(area: &Area<'_>, caption: &str, runs: &[(&str, &[u64])]) -> DrawResult {
    let ms = |ns: u64| (ns as f64 / 1e6).max(1e-3);
    // From the fastest run's 0.1% quantile (below it the lines only crawl along 0) to the
    // slowest request.
    let lo = runs
        .iter()
        .map(|r| quantile_ms(r.1, 0.001).max(1e-3))
        .fold(f64::INFINITY, f64::min);
    let hi = runs
        .iter()
        .map(|r| ms(*r.1.last().expect("a run has requests")))
        .fold(0.0, f64::max);
    let (lo, hi) = (lo * 0.9, hi * 1.1);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("latency, ms (log scale)")
        .y_desc("fraction of requests done within")
        .x_label_formatter(&|v| {
            if *v >= 1000.0 {
                format!("{v:e}")
            } else {
                format!("{v}")
            }
        })
        .draw()?;
    for (i, &(name, latencies)) in runs.iter().enumerate() {
        let n = latencies.len() as f64;
        // Geometric steps from lo to hi; the fraction done within each.
        let points: Vec<(f64, f64)> = (0..=CDF_POINTS)
            .map(|k| {
                let x = lo * (hi / lo).powf(k as f64 / CDF_POINTS as f64);
                let within = latencies.partition_point(|ns| (*ns as f64 / 1e6) <= x);
                (x, within as f64 / n)
            })
            .collect();
        let style = colour(i).stroke_width(2);
        // A run identical to an earlier one (weighted_* with equal weights routes exactly as
        // its unweighted twin) is dashed, so both stay visible.
        let twin = runs[..i].iter().any(|r| r.1 == latencies);
        let series = if twin {
            chart.draw_series(DashedLineSeries::new(points, 6, 6, style))?
        } else {
            chart.draw_series(LineSeries::new(points, style))?
        };
        series
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

fn shares(area: &Area<'_>, params: &Params, runs: &[Run]) -> DrawResult {
    let n = params.backends;
    let top = runs
        .iter()
        .flat_map(|r| (0..n).map(|b| r.share(b)))
        .fold(0.0, f64::max)
        * 100.0
        * 1.8; // room for the legend above the bars
    let mut chart = ChartBuilder::on(area)
        .caption("share of requests per backend", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                backend_id(i as usize).replace("backend-", "b")
            } else {
                String::new()
            }
        })
        .x_desc("backend (b0 is the slow one); black lines: share of capacity")
        .y_desc("% of requests")
        .draw()?;
    // Grouped bars: algorithm i's bar sits at backend + offset i within 80% of the slot.
    let width = 0.8 / runs.len() as f64;
    for (i, run) in runs.iter().enumerate() {
        let fill = colour(i).filled();
        chart
            .draw_series((0..n).map(|b| {
                let x0 = b as f64 - 0.4 + width * i as f64;
                Rectangle::new([(x0, 0.0), (x0 + width, run.share(b) * 100.0)], fill)
            }))?
            .label(run.algorithm.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], fill));
    }
    // Each backend's share of capacity: what a router that matched load to speed would send.
    for b in 0..n {
        let y = params.capacity_share(b) * 100.0;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(b as f64 - 0.45, y), (b as f64 + 0.45, y)],
            BLACK.stroke_width(2),
        )))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

/// A distinct colour for each of up to 16 lines (then they repeat).
fn line_colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 16] = [
        RGBColor(228, 26, 28),
        RGBColor(55, 126, 184),
        RGBColor(77, 175, 74),
        RGBColor(152, 78, 163),
        RGBColor(255, 127, 0),
        RGBColor(166, 86, 40),
        RGBColor(247, 129, 191),
        RGBColor(90, 90, 90),
        RGBColor(27, 158, 119),
        RGBColor(217, 95, 2),
        RGBColor(117, 112, 179),
        RGBColor(231, 41, 138),
        RGBColor(102, 166, 30),
        RGBColor(230, 171, 2),
        RGBColor(0, 0, 128),
        RGBColor(128, 0, 0),
    ];
    COLOURS[i % COLOURS.len()]
}

/// One line of a time-series panel: its colour index and points.
pub(crate) struct Line {
    pub colour: usize,
    pub points: Vec<(f64, f64)>,
}

/// A time-series panel: `lines` over `0..x_max` seconds, `shade` (a time span) in grey.
fn panel(
    area: &Area<'_>,
    caption: &str,
    y_desc: &str,
    x_max: f64,
    lines: &[Line],
    shade: Option<(f64, f64)>,
) -> DrawResult {
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.08;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 17))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..x_max, 0.0..top)?;
    if let Some((from, until)) = shade {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(from, 0.0), (until, top)],
            RGBColor(235, 235, 235).filled(),
        )))?;
    }
    chart
        .configure_mesh()
        .x_desc("time, s (virtual)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| {
            if top > 20.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        })
        .draw()?;
    for line in lines {
        let style = line_colour(line.colour).stroke_width(2);
        chart.draw_series(LineSeries::new(line.points.iter().copied(), style))?;
    }
    Ok(())
}

/// A legend column: one coloured line and name per entry.
fn legend(area: &Area<'_>, names: &[String]) -> DrawResult {
    for (i, name) in names.iter().enumerate() {
        let y = 60 + 22 * i as i32;
        let style = line_colour(i).stroke_width(3);
        area.draw(&PathElement::new(vec![(5, y), (30, y)], style))?;
        area.draw(&Text::new(
            name.clone(),
            (36, y - 7),
            ("sans-serif", 14).into_font(),
        ))?;
    }
    Ok(())
}

/// `lb simulate --scenario failing-node --svg FILE`. Left: the share of requests failed per
/// second with ejection off, per algorithm; right: backend-0's share of the requests per
/// second with ejection on (while it fails, every one of them fails). Grey: the failure.
pub(crate) fn draw_failing(
    path: &Path,
    params: &failing_node::Params,
    runs: &[failing_node::Run],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let title = format!(
        "failing-node: {} backends, backend-0 fails every request from {} s to {} s, Poisson arrivals at {:.0}% of capacity, seed {}",
        params.backends,
        params.fail_from_s,
        params.fail_until_s,
        params.utilisation * 100.0,
        params.seed
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    let (charts, key) = root.split_horizontally(1090);
    let (left, right) = charts.split_horizontally(545);
    let mut names: Vec<String> = Vec::new();
    let (mut failed, mut share) = (Vec::new(), Vec::new());
    for run in runs {
        let colour = match names.iter().position(|n| n == run.algorithm.name()) {
            Some(i) => i,
            None => {
                names.push(run.algorithm.name().to_string());
                names.len() - 1
            }
        };
        let per_second = |f: &dyn Fn(&failing_node::Bin) -> f64| Line {
            colour,
            // Seconds after the last arrival hold only completions: left out.
            points: run
                .bins
                .iter()
                .enumerate()
                .map(|(i, b)| (i as f64 + 0.5, f(b)))
                .take_while(|(t, _)| *t < params.duration_s)
                .collect(),
        };
        if run.ejection {
            share.push(per_second(&|b| {
                b.to_failing as f64 * 100.0 / b.arrivals.max(1) as f64
            }));
        } else {
            failed.push(per_second(&|b| {
                b.failed as f64 * 100.0 / b.done.max(1) as f64
            }));
        }
    }
    let shade = Some((params.fail_from_s, params.fail_until_s));
    let x_max = params.duration_s;
    panel(
        &left,
        "requests failed per second, ejection off",
        "% of requests ended",
        x_max,
        &failed,
        shade,
    )
    .map_err(|e| fail(&e))?;
    panel(
        &right,
        "backend-0's share per second, ejection on",
        "% of requests arrived",
        x_max,
        &share,
        shade,
    )
    .map_err(|e| fail(&e))?;
    legend(&key, &names).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// `lb simulate --scenario hot-key --svg FILE`: the most requests at any backend per second,
/// per keyed algorithm, with bounded loads off (left) and on (right).
pub(crate) fn draw_hot(
    path: &Path,
    params: &hot_key::Params,
    runs: &[hot_key::Run],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let title = format!(
        "hot-key: {} backends, key-0 carries {:.0}% of the requests, Poisson arrivals at {:.0}% of capacity, {} requests, seed {}",
        params.backends,
        params.hot_share * 100.0,
        params.utilisation * 100.0,
        params.requests,
        params.seed
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    let (charts, key) = root.split_horizontally(1090);
    let (left, right) = charts.split_horizontally(545);
    let mut names: Vec<String> = Vec::new();
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for run in runs {
        let colour = match names.iter().position(|n| n == run.algorithm.name()) {
            Some(i) => i,
            None => {
                names.push(run.algorithm.name().to_string());
                names.len() - 1
            }
        };
        let line = Line {
            colour,
            points: run
                .peak
                .iter()
                .enumerate()
                .map(|(i, p)| (i as f64 + 0.5, *p as f64))
                .collect(),
        };
        if run.factor == 0 { &mut off } else { &mut on }.push(line);
    }
    let x_max = runs.iter().map(|r| r.peak.len()).max().unwrap_or(1).max(1) as f64;
    panel(
        &left,
        "most requests at one backend, bounded loads off",
        "requests (waiting or in service)",
        x_max,
        &off,
        None,
    )
    .map_err(|e| fail(&e))?;
    panel(
        &right,
        &format!("the same, hash_balance_factor {}", params.factor),
        "requests (waiting or in service)",
        x_max,
        &on,
        None,
    )
    .map_err(|e| fail(&e))?;
    legend(&key, &names).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// A time-series panel: caption, y axis, lines and a shaded time span.
pub(crate) struct Panel<'a> {
    pub caption: &'a str,
    pub y_desc: &'a str,
    pub lines: Vec<Line>,
    pub shade: Option<(f64, f64)>,
}

/// Two time-series panels over `0..x_max` seconds side by side, a legend of `names` (line
/// colour i is `names[i]`), written to `path` (the request-loop scenarios' pictures).
pub(crate) fn draw_panels(
    path: &Path,
    title: &str,
    x_max: f64,
    left: Panel<'_>,
    right: Panel<'_>,
    names: &[String],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    let (charts, key) = root.split_horizontally(1090);
    let (l, r) = charts.split_horizontally(545);
    for (area, p) in [(&l, &left), (&r, &right)] {
        panel(area, p.caption, p.y_desc, x_max, &p.lines, p.shade).map_err(|e| fail(&e))?;
    }
    legend(&key, names).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// A group of stacked bars: its label and a note drawn above it, and per bar its name and
/// its segments from the bottom up (segment i in colour i, named in the legend).
pub(crate) struct BarGroup {
    pub label: String,
    pub note: String,
    pub bars: Vec<(String, Vec<f64>)>,
}

/// Stacked bars (0 to 100) in groups side by side, a legend of `names` (segment colour i is
/// `names[i]`), written to `path` (`lb simulate --scenario zones --svg FILE`).
pub(crate) fn draw_stacked(
    path: &Path,
    title: &str,
    caption: &str,
    groups: &[BarGroup],
    names: &[String],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| fail(&e))?;
    let (area, key) = root.split_horizontally(1090);
    stacked(&area, caption, groups).map_err(|e| fail(&e))?;
    legend(&key, names).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

fn stacked(area: &Area<'_>, caption: &str, groups: &[BarGroup]) -> DrawResult {
    // Each group takes its bars' slots and one slot of gap.
    let slots: usize = groups.iter().map(|g| g.bars.len() + 1).sum();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(10)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..slots.max(1) as f64, 0.0..118.0)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("% of the caller zone's requests")
        .y_labels(6)
        .y_label_formatter(&|v| {
            if *v <= 100.0 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .draw()?;
    let mut x = 0.5;
    for group in groups {
        chart.draw_series(std::iter::once(Text::new(
            group.label.clone(),
            (x, 114.0),
            ("sans-serif", 14).into_font(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            group.note.clone(),
            (x, 109.0),
            ("sans-serif", 12).into_font(),
        )))?;
        for (name, segments) in &group.bars {
            let mut bottom = 0.0;
            for (i, height) in segments.iter().enumerate() {
                let top = bottom + height;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x, bottom), (x + 0.8, top)],
                    line_colour(i).filled(),
                )))?;
                bottom = top;
            }
            chart.draw_series(std::iter::once(Text::new(
                format!("from {name}"),
                (x + 0.1, 103.5),
                ("sans-serif", 12).into_font(),
            )))?;
            x += 1.0;
        }
        x += 1.0;
    }
    Ok(())
}
