//! How deep a message table is, read from the table itself: due, in flight and acked rows
//! awaiting their purge, counted by the engine at each purge tick when the operator's page asks
//! for it (`Engine::set_count_depths`). The manager's own gauges only know its cache (at most
//! `vt_cache_size` rows) and its streams; these counts are the table's, whoever wrote or sent the
//! rows.
//!
//! Each count stops at [`DEPTH_CAP`] (a `LIMIT` inside the count), so a table of millions of
//! rows costs the server a bounded index range per tick, never a full count.

use super::state;
use super::table::MessageTable;

/// Most rows counted per figure; more show as "at least this many".
pub const DEPTH_CAP: u64 = 100_000;

/// A table's depth as counted at one tick. Each figure is at most [`DEPTH_CAP`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Unacked rows due now (MESSAGING.md §2), dead ones excluded.
    pub due: u64,
    /// Unacked rows sent at least once whose ack wait is not over (`epoch` > 0, `time_next` in
    /// the future, not dead): held by a consumer somewhere, through any proxy.
    pub in_flight: u64,
    /// Unacked rows never sent that are due later (`time_next` in the future, `epoch` 0).
    pub scheduled: u64,
    /// Acked rows not yet purged (they go `vt_purge_after` after their ack).
    pub acked: u64,
    /// When it was counted (Unix ns).
    pub at_ns: i64,
}

impl Depth {
    /// Whether `n` reached the cap (the real figure may be larger).
    pub fn capped(n: u64) -> bool {
        n >= DEPTH_CAP
    }
}

/// The one statement that counts `def`'s depth at `now_ns`: four capped counts, each over a
/// range the poller's and purger's indexes serve.
pub fn depth_sql(def: &MessageTable, now_ns: i64) -> String {
    let table = def.qualified();
    let count = |condition: String| {
        format!("(SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {condition} LIMIT {DEPTH_CAP}) AS c)")
    };
    let unacked = state::UNACKED_SQL;
    let later = format!(
        "`time_next` > {now_ns} AND `time_next` <> {}",
        state::DEAD_TIME_NEXT
    );
    format!(
        "SELECT {}, {}, {}, {}",
        count(state::ready_sql(now_ns)),
        count(format!("{unacked} AND {later} AND `epoch` > 0")),
        count(format!(
            "{unacked} AND {later} AND (`epoch` IS NULL OR `epoch` = 0)"
        )),
        count("(`time_acked` > 0 OR `time_acked` < 0)".to_string()),
    )
}
