//! What a simulated backend says about its own load, as a liblb backend would: each keeps a
//! [`ServerLoad`] (requests in flight, latency by in-flight level) and a busy-time meter, and
//!
//! - every answer carries the backend's ORCA report (the `endpoint-load-metrics` trailer):
//!   its utilisation, queries and errors per second over the last whole second (what gRFC A58's
//!   `client_side_wrr` reads), and `ServerLoad`'s `rif` and `latency_ms` (a piggybacked probe
//!   answer for `prequal`);
//! - it answers probes with [`ServerLoad::probe`]: the answer is computed when the probe
//!   arrives and reaches the balancer ([`Balancer::offer_probe`]) a probe delay later (the
//!   round trip's second half). The delay is 0 unless a scenario sets one (`uneven`'s
//!   `--probe-delay-ms`): then answers are handed over at once, as before the delay existed,
//!   and the other scenarios' runs are unchanged.
//!
//! A request's `rif` is counted from its arrival at the backend (queued or served), as a
//! server that admits requests into its own queue counts them. The other algorithms ignore
//! reports and ask for no probes, so their runs are unchanged by any of this.

use liblb_core::{Balancer, LoadReport, ServerLoad, Started};
use std::collections::VecDeque;
use std::time::Duration;

/// The window a report's rates and utilisation cover.
const WINDOW_NS: u64 = 1_000_000_000;

/// One backend's busy server-time and completions over the current window, and the numbers
/// of the last whole one.
struct Meter {
    server: ServerLoad,
    start: u64,
    changed: u64,
    busy: usize,
    busy_ns: f64,
    completions: u64,
    errors: u64,
    /// The last whole window's (utilisation, qps, eps), if one has passed.
    last: Option<(f64, f64, f64)>,
}

/// A probe answer on its way back: (due at, client, node id, rif, latency). The delay is the
/// same for every answer, so they fall due in the order they were sent and a FIFO holds them.
type Answer = (u64, usize, String, u32, Duration);

/// The meters of `backends` backends of `servers` servers each, and the probes they answered.
pub(crate) struct Meters {
    servers: usize,
    meters: Vec<Meter>,
    /// Probes answered (the probe traffic `prequal` caused).
    pub(crate) probes: u64,
    /// How long an answer takes to reach the balancer, nanoseconds.
    probe_delay_ns: u64,
    /// Answers sent and not yet delivered, oldest first.
    pending: VecDeque<Answer>,
}

impl Meters {
    /// The meters of `backends` backends of `servers` servers each, whose latency samples
    /// count for `latency_max_age` (see `ServerLoad`; out of its range is its error).
    pub(crate) fn new(
        backends: usize,
        servers: usize,
        latency_max_age: Duration,
    ) -> Result<Meters, liblb_core::Error> {
        let meter = || -> Result<Meter, liblb_core::Error> {
            Ok(Meter {
                server: ServerLoad::new(0).with_latency_max_age(latency_max_age)?,
                start: 0,
                changed: 0,
                busy: 0,
                busy_ns: 0.0,
                completions: 0,
                errors: 0,
                last: None,
            })
        };
        Ok(Meters {
            servers,
            meters: (0..backends).map(|_| meter()).collect::<Result<_, _>>()?,
            probes: 0,
            probe_delay_ns: 0,
            pending: VecDeque::new(),
        })
    }

    /// The same meters with probe answers delivered `delay_ns` after they are computed.
    pub(crate) fn with_probe_delay(self, delay_ns: u64) -> Meters {
        Meters {
            probe_delay_ns: delay_ns,
            ..self
        }
    }

    /// A request reached backend `b` at `now` (queued or served): its `ServerLoad` token.
    pub(crate) fn arrived(&self, b: usize, now: u64) -> Started {
        self.meters[b].server.start(now)
    }

    /// Backend `b` has `busy` servers at work from `now` on.
    pub(crate) fn busy(&mut self, b: usize, now: u64, busy: usize) {
        let m = &mut self.meters[b];
        m.busy_ns += m.busy as f64 * (now - m.changed) as f64;
        m.changed = now;
        m.busy = busy;
    }

    /// A request on backend `b` completed at `now` (a success if `ok`): the report its answer
    /// carries.
    pub(crate) fn completed(
        &mut self,
        b: usize,
        started: Started,
        now: u64,
        ok: bool,
    ) -> LoadReport {
        let busy = self.meters[b].busy;
        self.busy(b, now, busy);
        let servers = self.servers as f64;
        let m = &mut self.meters[b];
        m.server.finish(started, now, ok);
        m.completions += 1;
        m.errors += u64::from(!ok);
        let elapsed = now - m.start;
        if elapsed >= WINDOW_NS {
            let seconds = elapsed as f64 / 1e9;
            let utilization = m.busy_ns / (servers * elapsed as f64);
            let (qps, eps) = (m.completions as f64 / seconds, m.errors as f64 / seconds);
            m.last = Some((utilization, qps, eps));
            (m.start, m.busy_ns, m.completions, m.errors) = (now, 0.0, 0, 0);
        }
        // ServerLoad's report carries `rif` and `latency_ms`; the window's numbers are ours.
        let mut report = m.server.report(now);
        if let Some((utilization, qps, eps)) = m.last {
            report.application_utilization = utilization;
            report.rps_fractional = qps;
            report.eps = eps;
        }
        report
    }

    /// Sends the probes `client`'s balancer's picks made due at `now`; their answers, computed
    /// now, are delivered to it once the probe delay has passed (at once when it is 0).
    pub(crate) fn probe(
        &mut self,
        client: usize,
        balancer: &Balancer,
        now: u64,
    ) -> Result<(), liblb_core::Error> {
        let due = balancer.probes_due();
        if due == 0 {
            return Ok(());
        }
        let targets = balancer.probe_targets(due)?;
        for (id, b) in targets.ids().zip(targets.tags()) {
            let answer = self.meters[b as usize].server.probe(now);
            self.probes += 1;
            if self.probe_delay_ns == 0 {
                balancer.offer_probe(id, answer.rif, answer.latency)?;
                continue;
            }
            let at = now + self.probe_delay_ns;
            (self.pending).push_back((at, client, id.to_string(), answer.rif, answer.latency));
        }
        Ok(())
    }

    /// Drops the answers on their way to `client` (it restarted: its probes' connections are
    /// gone).
    pub(crate) fn forget(&mut self, client: usize) {
        self.pending.retain(|(_, c, ..)| *c != client);
    }

    /// Hands each client (`clients[i]` is client i's balancer) the probe answers due to it by
    /// `now` (call before each pick; the balancers' clock must read `now`).
    pub(crate) fn deliver(
        &mut self,
        clients: &[Balancer],
        now: u64,
    ) -> Result<(), liblb_core::Error> {
        while let Some((at, ..)) = self.pending.front() {
            if *at > now {
                break;
            }
            let (_, client, id, rif, latency) = self.pending.pop_front().expect("a front answer");
            clients[client].offer_probe(&id, rif, latency)?;
        }
        Ok(())
    }
}
