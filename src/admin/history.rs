//! The last minutes of the proxy's work, for the page's charts: every [`SAMPLE_EVERY`] the
//! counters of all message tables and stream groups are added up and kept in a ring of
//! [`SAMPLES`] samples (ten minutes), a few hundred bytes in all whatever the number of tables.
//! Rates are differences between neighbouring samples; a counter that went back (a table
//! dropped, a group taken over by another proxy) counts as no work, never as negative work.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::messaging::engine::Engine;
use crate::streams::engine::StreamEngine;

/// How often the counters are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept: ten minutes at [`SAMPLE_EVERY`].
pub const SAMPLES: usize = 120;

/// The series the page charts, in this order.
pub const SERIES: [&str; 6] = [
    "messages sent",
    "messages acked",
    "redeliveries",
    "dead letters",
    "events sent",
    "events acked",
];

/// The proxy's counters added up at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// When (Unix ms).
    pub at_ms: u64,
    /// Totals, one per [`SERIES`].
    pub totals: [u64; SERIES.len()],
}

/// The ring of samples.
#[derive(Debug, Default)]
pub struct History {
    ring: Mutex<VecDeque<Sample>>,
}

impl History {
    pub fn record(&self, sample: Sample) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == SAMPLES {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    /// Per series, the rate (per second) between each pair of neighbouring samples, as
    /// (seconds before `now_ms`, rate) at the later sample's time.
    pub fn rates(&self, now_ms: u64) -> Vec<Vec<(f64, f64)>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = vec![Vec::with_capacity(ring.len()); SERIES.len()];
        for (a, b) in ring.iter().zip(ring.iter().skip(1)) {
            let seconds = b.at_ms.saturating_sub(a.at_ms) as f64 / 1000.0;
            if seconds <= 0.0 {
                continue;
            }
            let x = -(now_ms.saturating_sub(b.at_ms) as f64 / 1000.0);
            for (series, (ta, tb)) in out.iter_mut().zip(a.totals.iter().zip(b.totals.iter())) {
                series.push((x, tb.saturating_sub(*ta) as f64 / seconds));
            }
        }
        out
    }
}

/// The counters now.
pub fn sample(engine: Option<&Engine>, streams: Option<&StreamEngine>, at_ms: u64) -> Sample {
    let mut totals = [0u64; SERIES.len()];
    if let Some(engine) = engine {
        for m in engine.managers() {
            let s = m.stats().snapshot();
            totals[0] += s.sent;
            totals[1] += s.acked;
            totals[2] += s.redelivered;
            totals[3] += s.dead_lettered;
        }
    }
    if let Some(streams) = streams {
        for g in streams.local_groups() {
            totals[4] += g.sent;
            totals[5] += g.acked;
        }
    }
    Sample { at_ms, totals }
}

/// Samples every [`SAMPLE_EVERY`] until `stop`.
pub async fn run(
    history: Arc<History>,
    engine: Option<Arc<Engine>>,
    streams: Option<Arc<StreamEngine>>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let s = sample(
            engine.as_deref(),
            streams.as_deref(),
            crate::binlog::unix_ms(),
        );
        history.record(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, sent: u64) -> Sample {
        let mut totals = [0; SERIES.len()];
        totals[0] = sent;
        Sample { at_ms: ms, totals }
    }

    #[test]
    fn rates_between_samples_never_negative_and_bounded() {
        let h = History::default();
        h.record(at(0, 0));
        h.record(at(5_000, 50));
        h.record(at(10_000, 20)); // a table dropped: its counts are gone
        let r = h.rates(10_000);
        assert_eq!(r[0], vec![(-5.0, 10.0), (0.0, 0.0)]);
        assert_eq!(r[1], vec![(-5.0, 0.0), (0.0, 0.0)]);
        for i in 0..(SAMPLES as u64 * 2) {
            h.record(at(20_000 + i * 5_000, i));
        }
        assert_eq!(h.rates(0)[0].len(), SAMPLES - 1);
    }
}
