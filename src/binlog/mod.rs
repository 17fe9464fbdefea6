//! The binlog watcher: one per proxy process, it follows the backend's row-based binlog as a
//! replica would (mysql_async's binlog stream, under a random replica server id) and tells the
//! message engine about every row of a loaded message table that anyone inserted, updated or
//! deleted — applications writing straight to the server, other proxies, triggers,
//! `INSERT ... SELECT`, `LOAD DATA` — and about DDL. It is what makes delivery prompt for rows
//! written around this proxy; without it the poller still finds them, at its interval.
//!
//! - [`watcher`] — the connection: prerequisites, where to start, reconnecting with backoff,
//!   resuming from the last committed position, the status.
//! - [`prereq`] — what the server must have (`log_bin`, `binlog_format=ROW`,
//!   `binlog_row_image=FULL`, `binlog_row_metadata=FULL`, `REPLICATION SLAVE` and
//!   `REPLICATION CLIENT`/`BINLOG MONITOR`), and the one log line that says what is missing.
//! - [`follow`] — the events, without I/O: table maps, transactions, commits, DDL, positions.
//! - [`rows`] — a row image as the engine wants it (the key built like the poller builds it).
//! - [`statement`] — what a query event is: `BEGIN`, `COMMIT`, DDL, ....
//! - [`xa`] — XA transactions: the XIDs of prepares and commits, and the message tables of each
//!   transaction prepared and not yet committed.
//!
//! Nothing here is needed for correctness: a row change reaches a manager only as a hint (the
//! claim re-checks every row), and whatever cannot be read exactly becomes a poll.

pub mod follow;
pub mod gtid;
pub mod prereq;
pub mod rows;
pub mod statement;
pub mod watcher;
pub mod xa;

pub use watcher::BinlogWatcher;

use std::fmt;

/// A place in the backend's binlog: a file and the offset of an event boundary in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogPosition {
    pub file: String,
    pub pos: u64,
}

impl fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

/// What the watcher is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinlogMode {
    /// Connecting for the first time.
    Starting,
    /// Reading the binlog: writes by anyone reach streams promptly.
    Following,
    /// A prerequisite is missing (the reason says which and how to fix it); the proxy relies on
    /// its pollers and on what it relays itself. Re-checked periodically.
    PollOnly(String),
    /// The stream broke or the server cannot be reached (the reason); retrying with backoff.
    Reconnecting(String),
    /// The proxy is shutting down.
    Stopped,
}

/// The watcher's state, for metrics and operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogStatus {
    pub mode: BinlogMode,
    /// Where the last committed transaction read ends (where a reconnect resumes).
    pub position: Option<BinlogPosition>,
    /// The replica server id this process registers with.
    pub server_id: u32,
    /// How many times a stream was opened.
    pub sessions: u64,
}

/// When the watcher last read something, for the lag metrics. Atomics, so the reader pays two
/// relaxed stores per event and the scrape never waits for it.
#[derive(Debug, Default)]
pub struct BinlogActivity {
    /// Unix milliseconds when the last event or heartbeat was read (0: never).
    read_at_ms: std::sync::atomic::AtomicU64,
    /// The header timestamp (Unix seconds) of the last event read that carries one.
    event_ts: std::sync::atomic::AtomicU64,
    /// Unix milliseconds when that event was read.
    event_read_at_ms: std::sync::atomic::AtomicU64,
}

impl BinlogActivity {
    /// Something was read: an event with header timestamp `event_ts` (Unix seconds; 0 for
    /// heartbeats and artificial events, which say only that the stream is alive).
    pub fn read(&self, event_ts: u32, now_ms: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.read_at_ms.store(now_ms, Relaxed);
        if event_ts > 0 {
            self.event_ts.store(u64::from(event_ts), Relaxed);
            self.event_read_at_ms.store(now_ms, Relaxed);
        }
    }

    /// How far behind the server the last event was when it was read, in seconds: read time
    /// minus the event's timestamp (the server stamps an event with its statement's start, in
    /// whole seconds, so this has a resolution of one second and includes the time a long
    /// transaction took). 0 before any event.
    pub fn lag_seconds(&self) -> f64 {
        use std::sync::atomic::Ordering::Relaxed;
        let ts_ms = self.event_ts.load(Relaxed).saturating_mul(1000);
        let read = self.event_read_at_ms.load(Relaxed);
        if ts_ms == 0 || read == 0 {
            return 0.0;
        }
        read.saturating_sub(ts_ms) as f64 / 1000.0
    }

    /// Seconds since anything (event or heartbeat) was read, `None` before anything was.
    pub fn idle_seconds(&self, now_ms: u64) -> Option<f64> {
        let read = self.read_at_ms.load(std::sync::atomic::Ordering::Relaxed);
        (read > 0).then(|| now_ms.saturating_sub(read) as f64 / 1000.0)
    }
}

/// Unix time in milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod activity_tests {
    use super::*;

    #[test]
    fn lag_is_read_time_minus_event_time() {
        let a = BinlogActivity::default();
        assert_eq!(a.lag_seconds(), 0.0);
        assert_eq!(a.idle_seconds(5_000), None);
        a.read(100, 102_500);
        assert_eq!(a.lag_seconds(), 2.5);
        // A heartbeat: the stream is alive, the last event's lag stands.
        a.read(0, 110_000);
        assert_eq!(a.lag_seconds(), 2.5);
        assert_eq!(a.idle_seconds(111_000), Some(1.0));
    }
}
