//! What one message table has done since its manager started: counters kept as atomics, so the
//! paths that bump them (a stream's claim, an ack, the purger) take no lock and allocate nothing.
//! Read by the Prometheus endpoint (`crate::metrics`) and by `SHOW MESSAGE TABLES`.
//!
//! The counters belong to the table's [`TableManager`](super::manager::TableManager): they survive
//! an `ALTER` (the manager keeps running) and start again from zero when the table is dropped and
//! created again, or when the proxy restarts — Prometheus reads that as a counter reset.
//!
//! Everything counted here is what *this proxy* did. Acks and deletes made straight on the server,
//! or through another proxy, are not counted (the gauges of the manager's state, which the binlog
//! keeps current, do reflect them).

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the delivery-latency histogram's buckets; `+Inf` is implied.
/// From a few milliseconds (a stream waiting for the row) to an hour (a backlog).
pub const LATENCY_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

/// The counters of one message table.
#[derive(Debug, Default)]
pub struct TableStats {
    /// Rows claimed and written to a streaming client (first deliveries and redeliveries).
    sent: AtomicU64,
    /// Of `sent`, the rows whose `epoch` was above 0 before the claim: sent before, not acked
    /// within their ack wait.
    redelivered: AtomicU64,
    /// Rows acked through this proxy: the affected rows of `ACK` and of the Vitess SQL ack
    /// (`UPDATE ... SET time_acked = ...`).
    acked: AtomicU64,
    /// Acked rows this proxy's purger deleted.
    purged: AtomicU64,
    /// Batches handed to a stream, each claimed in one transaction.
    claims: AtomicU64,
    /// The work-queue statements through this proxy (MESSAGING.md §9-§10): messages given back
    /// (`NACK`), kept longer (`EXTEND`), made due again from the dead (`REDRIVE`): their
    /// affected rows. And messages the claims of this proxy's streams found dead
    /// (`vt_max_attempts`), in place or moved to `vt_dead_letter`.
    nacked: AtomicU64,
    extended: AtomicU64,
    redriven: AtomicU64,
    dead_lettered: AtomicU64,
    /// Delivery latency of first deliveries: non-cumulative counts per bucket of
    /// [`LATENCY_BUCKETS`], the last slot for `+Inf`.
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// Sum of the observed latencies, in microseconds (a u64 of µs lasts 580,000 years).
    latency_sum_us: AtomicU64,
}

/// A consistent-enough copy of the counters (each read on its own; a scrape does not need them
/// from one instant).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsSnapshot {
    pub sent: u64,
    pub redelivered: u64,
    pub acked: u64,
    pub purged: u64,
    pub claims: u64,
    pub nacked: u64,
    pub extended: u64,
    pub redriven: u64,
    pub dead_lettered: u64,
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`], then `+Inf` (= the count).
    pub latency_cumulative: Vec<u64>,
    pub latency_sum_seconds: f64,
}

impl TableStats {
    /// One row written to a stream. `epoch_before` is the row's `epoch` read by the claim;
    /// `due_ns` its `time_next` as the manager knew it, `now_ns` the time of the send (both Unix
    /// nanoseconds). The latency of a first delivery is the time from due to sent; rows without
    /// a due time (NULL `time_next`) are counted but not timed.
    pub fn record_sent(&self, epoch_before: i64, due_ns: i64, now_ns: i64) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if epoch_before > 0 {
            self.redelivered.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if due_ns <= 0 {
            return;
        }
        let seconds = now_ns.saturating_sub(due_ns).max(0) as f64 / 1e9;
        let slot = LATENCY_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.latency_buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    /// Rows acked through this proxy (the affected rows of the ack statement).
    pub fn record_acked(&self, rows: u64) {
        self.acked.fetch_add(rows, Ordering::Relaxed);
    }

    /// A batch handed to a stream for its claim transaction.
    pub fn record_claim(&self) {
        self.claims.fetch_add(1, Ordering::Relaxed);
    }

    /// Rows deleted by the purger.
    pub fn record_purged(&self, rows: u64) {
        self.purged.fetch_add(rows, Ordering::Relaxed);
    }

    /// Rows given back by `NACK`.
    pub fn record_nacked(&self, rows: u64) {
        self.nacked.fetch_add(rows, Ordering::Relaxed);
    }

    /// Rows kept longer by `EXTEND`.
    pub fn record_extended(&self, rows: u64) {
        self.extended.fetch_add(rows, Ordering::Relaxed);
    }

    /// Dead rows made due again by `REDRIVE`.
    pub fn record_redriven(&self, rows: u64) {
        self.redriven.fetch_add(rows, Ordering::Relaxed);
    }

    /// Rows a claim found dead (`vt_max_attempts`).
    pub fn record_dead(&self, rows: u64) {
        self.dead_lettered.fetch_add(rows, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let mut running = 0;
        let latency_cumulative = self
            .latency_buckets
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running
            })
            .collect();
        StatsSnapshot {
            sent: self.sent.load(Ordering::Relaxed),
            redelivered: self.redelivered.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            purged: self.purged.load(Ordering::Relaxed),
            claims: self.claims.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
            extended: self.extended.load(Ordering::Relaxed),
            redriven: self.redriven.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            latency_cumulative,
            latency_sum_seconds: self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// The manager's state at one moment, for gauges: read under the manager's lock, in O(cache).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagerSnapshot {
    /// Open streams on this table through this proxy.
    pub subscribers: usize,
    /// Due rows in the cache, not yet handed to a stream. At most `vt_cache_size`: a lower bound
    /// of the table's due rows when the backlog is larger.
    pub cached: usize,
    /// Rows handed to a stream whose claim has not finished.
    pub in_flight: usize,
    /// Rows due within the next poll interval (sent rows waiting for their ack wait, scheduled
    /// rows).
    pub scheduled: usize,
    /// When the oldest cached row became due (Unix ns): its `time_next`, or when this proxy
    /// first saw it for a row due since it was written (`time_next` NULL or 0).
    pub oldest_due_ns: Option<i64>,
    /// Messages this proxy's streams hold sent and not yet acked, as counted for
    /// `vt_max_unacked` (0 without it).
    pub held_unacked: usize,
    /// Dead messages (`vt_max_attempts`), as counted at the last purge tick; `None` without the
    /// option or before the first count.
    pub dead: Option<u64>,
    /// FIFO groups with a message in flight (`vt_group_col`), as counted at the last purge tick.
    pub keys_in_flight: Option<u64>,
}

impl ManagerSnapshot {
    /// Seconds since the oldest cached row became due (0 when none is waiting).
    pub fn oldest_due_age_seconds(&self, now_ns: i64) -> f64 {
        self.oldest_due_ns
            .map_or(0.0, |t| now_ns.saturating_sub(t).max(0) as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000_000;

    #[test]
    fn first_deliveries_are_timed_redeliveries_counted() {
        let s = TableStats::default();
        let now = 100_000 * SEC;
        s.record_sent(0, now - SEC / 100, now); // 10 ms: the 0.01 bucket
        s.record_sent(0, now - 2 * SEC, now); // 2 s: the 2.5 bucket
        s.record_sent(0, now - 7200 * SEC, now); // 2 h: +Inf
        s.record_sent(0, 0, now); // NULL time_next: counted, not timed
        s.record_sent(3, now - SEC, now); // a redelivery: not timed
        s.record_acked(4);
        s.record_purged(2);
        let snap = s.snapshot();
        assert_eq!(
            (snap.sent, snap.redelivered, snap.acked, snap.purged),
            (5, 1, 4, 2)
        );
        let at = |le: f64| {
            let i = LATENCY_BUCKETS.iter().position(|&b| b == le).unwrap();
            snap.latency_cumulative[i]
        };
        assert_eq!(at(0.005), 0);
        assert_eq!(at(0.01), 1);
        assert_eq!(at(1.0), 1);
        assert_eq!(at(2.5), 2);
        assert_eq!(at(3600.0), 2);
        assert_eq!(snap.latency_cumulative.last(), Some(&3));
        assert!((snap.latency_sum_seconds - (0.01 + 2.0 + 7200.0)).abs() < 1e-3);
    }

    #[test]
    fn a_due_time_in_the_future_counts_as_no_wait() {
        let s = TableStats::default();
        s.record_sent(0, 10 * SEC, 5 * SEC);
        assert_eq!(s.snapshot().latency_cumulative[0], 1);
    }

    #[test]
    fn oldest_due_age() {
        let mut m = ManagerSnapshot::default();
        assert_eq!(m.oldest_due_age_seconds(5 * SEC), 0.0);
        m.oldest_due_ns = Some(2 * SEC);
        assert_eq!(m.oldest_due_age_seconds(5 * SEC), 3.0);
    }
}
