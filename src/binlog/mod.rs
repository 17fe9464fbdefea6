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
//!
//! Nothing here is needed for correctness: a row change reaches a manager only as a hint (the
//! claim re-checks every row), and whatever cannot be read exactly becomes a poll.

pub mod follow;
pub mod prereq;
pub mod rows;
pub mod statement;
pub mod watcher;

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
