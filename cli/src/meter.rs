//! What a simulated backend says about its own load: the ORCA report a real server would send
//! in its `endpoint-load-metrics` trailer (gRFC A58 reads `application_utilization`,
//! `rps_fractional` and `eps`). Each completion's lease is finished with the backend's report
//! of the last whole second, so `client_side_wrr` weighs backends as it would in production;
//! the other algorithms ignore the reports, and their runs are unchanged by them.

use liblb_core::LoadReport;

/// The window a report covers (a server's metrics recorder typically reports per second).
const WINDOW_NS: u64 = 1_000_000_000;

/// One backend's meter: busy server-time and completions over the current window, and the
/// report of the last whole one.
struct Meter {
    start: u64,
    changed: u64,
    busy: usize,
    busy_ns: f64,
    completions: u64,
    errors: u64,
    report: Option<LoadReport>,
}

/// The meters of `backends` backends of `servers` servers each.
pub(crate) struct Meters {
    servers: usize,
    meters: Vec<Meter>,
}

impl Meters {
    pub(crate) fn new(backends: usize, servers: usize) -> Meters {
        let meter = || Meter {
            start: 0,
            changed: 0,
            busy: 0,
            busy_ns: 0.0,
            completions: 0,
            errors: 0,
            report: None,
        };
        Meters {
            servers,
            meters: (0..backends).map(|_| meter()).collect(),
        }
    }

    /// Backend `b` has `busy` servers at work from `now` on.
    pub(crate) fn busy(&mut self, b: usize, now: u64, busy: usize) {
        let m = &mut self.meters[b];
        m.busy_ns += m.busy as f64 * (now - m.changed) as f64;
        m.changed = now;
        m.busy = busy;
    }

    /// A request on backend `b` completed at `now` (a success if `ok`): the report its answer
    /// carries, that of the last whole window (`None` during the first).
    pub(crate) fn completed(&mut self, b: usize, now: u64, ok: bool) -> Option<&LoadReport> {
        let busy = self.meters[b].busy;
        self.busy(b, now, busy);
        let servers = self.servers as f64;
        let m = &mut self.meters[b];
        m.completions += 1;
        m.errors += u64::from(!ok);
        let elapsed = now - m.start;
        if elapsed >= WINDOW_NS {
            let seconds = elapsed as f64 / 1e9;
            m.report = Some(LoadReport {
                application_utilization: m.busy_ns / (servers * elapsed as f64),
                rps_fractional: m.completions as f64 / seconds,
                eps: m.errors as f64 / seconds,
                ..LoadReport::default()
            });
            (m.start, m.busy_ns, m.completions, m.errors) = (now, 0.0, 0, 0);
        }
        m.report.as_ref()
    }
}
