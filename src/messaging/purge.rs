//! Purging: acked rows older than `vt_purge_after` are deleted, a batch at a time
//! (MESSAGING.md §7).

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};
use tokio_util::sync::CancellationToken;

use super::polled::value_bytes;
use super::state;
use super::stats::TableStats;
use super::table::MessageTable;

/// Rows deleted per purge statement, so a large purge never holds locks for long.
pub const PURGE_BATCH: u64 = 500;

/// Deletes `def`'s acked rows older than its `vt_purge_after`, until none is left or `stop`.
pub async fn acked_rows(
    conn: &mut Conn,
    def: &MessageTable,
    stats: &TableStats,
    stop: &CancellationToken,
) -> Result<(), mysql_async::Error> {
    let cutoff = state::now_ns()
        .saturating_sub(def.options.purge_after.as_nanos().min(i64::MAX as u128) as i64);
    // Two steps, so the purge locks only the rows it deletes: a plain (non-locking) read
    // finds them, then a delete by primary key removes them, re-checking the condition. A
    // single `DELETE ... WHERE time_acked ... LIMIT` would lock every row it scans — all
    // of them on a table without an index on time_acked — and claims, which skip locked
    // rows, would pass over due messages meanwhile.
    let find = format!(
        "SELECT {} FROM {} WHERE {} LIMIT {PURGE_BATCH}",
        def.key_sql(),
        def.qualified(),
        state::purgeable_sql(cutoff)
    );
    loop {
        if stop.is_cancelled() {
            return Ok(());
        }
        let keys: Vec<Value> = conn.query(&find).await?;
        let found = keys.len() as u64;
        let keys: Vec<Box<[u8]>> = keys.into_iter().filter_map(value_bytes).collect();
        let Some(ids) = def.ids_sql(keys.iter().map(|k| &k[..])) else {
            return Ok(());
        };
        // The multi-table form, the one that takes an index hint (see `by_primary_key`).
        let delete = format!(
            "DELETE {} FROM {} WHERE {ids} AND {}",
            def.qualified(),
            def.by_primary_key(),
            state::purgeable_sql(cutoff)
        );
        conn.query_drop(&delete).await?;
        let deleted = conn.affected_rows();
        stats.record_purged(deleted);
        // A batch that deleted nothing (its rows were named by keys this session cannot
        // reach, or purged meanwhile by another proxy) would be found again at once: stop
        // until the next tick rather than spin.
        if found < PURGE_BATCH || deleted == 0 {
            return Ok(());
        }
    }
}
