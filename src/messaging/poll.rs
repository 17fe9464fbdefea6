//! The poller's queries: which rows are due now (in sending order) and which become due before
//! the next poll. Written so their cost does not grow with the backlog.
//!
//! Without `priority`, sending order is `time_next`, and the due rows are read in two parts:
//! - rows never scheduled (`time_next` NULL, due at once), and
//! - rows with `time_next <= now`, read in order by a range on an index starting with
//!   `time_next` (the RFC's `next_idx(time_next, epoch)`), stopping at the LIMIT.
//!
//! One query over `time_next IS NULL OR time_next <= now` does not work: acking sets `time_next`
//! to NULL (MESSAGING.md §6), so the NULL end of that index holds every acked row not yet purged,
//! and the server either walks all of them (a primary-key lookup each, to see `time_acked`) or
//! leaves the index for `time_acked`'s and sorts the whole backlog. Measured on MariaDB 10.11 with
//! 100,000 rows, half acked: 40–100 ms and a filesort, against 10 ms for the range alone; the
//! optimizer picks the `time_acked` index even for the range alone, so the poller names the
//! `time_next` index (`FORCE INDEX`) when the table has one.
//!
//! The never-scheduled rows are found through `(time_next, epoch)` as "`time_next` NULL and
//! `epoch` NULL or 0" (never sent: acked rows were almost always sent), a tight range; every
//! [`THOROUGH_EVERY`]th poll also looks for NULL `time_next` rows that were sent before (a client
//! may set `time_next = NULL` to resend at once), letting the server pick its index.
//!
//! With `priority`, sending order is `priority, time_next`. A single query over "unacked"
//! (`time_acked IS NULL OR time_acked = 0`) cannot be read in that order from Vitess's
//! `poller_idx(time_acked, priority, time_next desc)`, so the server sorts every unacked row
//! (measured: 0.3 s at 1,000,000 pending rows, growing with the backlog). Instead the poller walks
//! the index: for each unacked value of `time_acked` (NULL, then 0) it finds the lowest priority
//! with `MIN(priority)` (answered from the index alone), reads that priority's due rows in
//! `time_next` order (a range on the index, read backwards, stopping at the LIMIT), and moves on
//! to the next priority until it has enough. Rows with a NULL priority count as priority 0.

use mysql_async::prelude::Queryable;
use mysql_async::{from_value_opt, Conn, Row, Value};

use super::polled::{polled_rows, value_bytes, PolledRow};
use super::state;
use super::table::MessageTable;

/// How often (in polls) the poller also looks for sent rows whose `time_next` was set to NULL.
pub const THOROUGH_EVERY: u64 = 10;

/// Most distinct priorities one poll walks through per `time_acked` value, one index range
/// each; the priorities above them are read with one sorting query.
const MAX_PRIORITY_GROUPS: usize = 64;

/// Due rows now (in sending order, at most `cache_size`) and rows due by `horizon`. A
/// `thorough` poll also finds sent rows whose `time_next` was set to NULL (see the module doc).
///
/// With `vt_group_col`, these queries read the rows without a group, and the heads of the groups
/// are read by walking the groups from `group_cursor` on (see `groups`).
pub async fn due_and_soon(
    conn: &mut Conn,
    def: &MessageTable,
    now: i64,
    horizon: i64,
    thorough: bool,
    group_cursor: &mut Option<Value>,
) -> Result<(Vec<PolledRow>, Vec<PolledRow>), mysql_async::Error> {
    let (mut due, mut soon) = ungrouped(conn, def, now, horizon, thorough).await?;
    if def.group_column.is_none() {
        return Ok((due, soon));
    }
    let (heads_due, heads_soon) =
        super::groups::heads(conn, def, now, horizon, group_cursor).await?;
    due.extend(heads_due);
    soon.extend(heads_soon);
    due.sort_by_key(|(_, priority, time_next)| (*priority, *time_next));
    due.truncate(def.options.cache_size);
    soon.sort_by_key(|(_, _, time_next)| *time_next);
    soon.truncate(def.options.cache_size);
    Ok((due, soon))
}

/// [`due_and_soon`] of the rows without a group (all rows without `vt_group_col`).
async fn ungrouped(
    conn: &mut Conn,
    def: &MessageTable,
    now: i64,
    horizon: i64,
    thorough: bool,
) -> Result<(Vec<PolledRow>, Vec<PolledRow>), mysql_async::Error> {
    if def.has_priority {
        return by_priority(conn, def, now, horizon).await;
    }
    let queries = unprioritized_queries(def, now, horizon, thorough);
    let limit = def.options.cache_size;
    // Together the two parts are exactly `state::due_sql`: NULL, or `<= now`.
    let mut due = polled_rows(conn, &queries.never_scheduled, def).await?;
    if due.len() < limit {
        let scheduled = polled_rows(conn, &queries.scheduled, def).await?;
        due.extend(scheduled);
        due.truncate(limit);
    }
    let soon = polled_rows(conn, &queries.soon, def).await?;
    Ok((due, soon))
}

/// Of `keys` (messages streams hold under `vt_max_unacked`), those whose rows are still unacked.
/// The others were acked or deleted in a way the binlog did not show row by row — an UPDATE
/// logged as a statement or with a minimal row image, or while the binlog connection was down —
/// and must stop counting. A plain read (no locks), by primary key, 1,000 keys a statement.
pub async fn still_unacked(
    conn: &mut Conn,
    def: &MessageTable,
    keys: &[Box<[u8]>],
) -> Result<Vec<Box<[u8]>>, mysql_async::Error> {
    let mut unacked = Vec::new();
    for chunk in keys.chunks(1000) {
        let Some(ids) = def.ids_sql(chunk.iter().map(|k| &k[..])) else {
            continue;
        };
        let sql = format!(
            "SELECT {} FROM {} WHERE {ids} AND {}",
            def.key_sql(),
            def.by_primary_key(),
            state::UNACKED_SQL
        );
        let rows: Vec<Row> = conn.query(sql).await?;
        unacked.extend(
            rows.into_iter()
                .filter_map(|row| row.unwrap().into_iter().next())
                .filter_map(value_bytes),
        );
    }
    Ok(unacked)
}

/// With `vt_group_col`: ` FORCE INDEX (<the group's index>)`, for the queries that read the rows
/// without a group (`col IS NULL`, a range at the start of that index; any other index would
/// walk every grouped row).
fn group_hint(def: &MessageTable) -> Option<String> {
    def.group_index
        .as_ref()
        .map(|i| format!(" FORCE INDEX ({})", super::table::quote_ident(i)))
}

/// The poller's statements for a table without `priority`.
struct UnprioritizedQueries {
    /// Due rows with a NULL `time_next` (they sort first, as 0).
    never_scheduled: String,
    /// Due rows with `time_next <= now`, in order.
    scheduled: String,
    /// Rows due after now and by the horizon.
    soon: String,
}

fn unprioritized_queries(
    def: &MessageTable,
    now: i64,
    horizon: i64,
    thorough: bool,
) -> UnprioritizedQueries {
    let key = def.key_sql();
    let table = def.qualified();
    let unacked = state::UNACKED_SQL;
    let limit = def.options.cache_size;
    // With FIFO groups these queries read only the rows without a group, which the group's
    // index finds at once (`col IS NULL`): the `time_next` index would walk every grouped row.
    let next_index = def
        .next_index
        .as_ref()
        .filter(|_| def.group_column.is_none());
    let hint = match (group_hint(def), next_index) {
        (Some(hint), _) => hint,
        (None, Some(i)) => format!(" FORCE INDEX ({})", super::table::quote_ident(&i.name)),
        (None, None) => String::new(),
    };
    let never_scheduled = match next_index {
        Some(index) if index.then_epoch && !thorough => format!(
            "SELECT {key}, 0, 0 FROM {table}{hint} WHERE `time_next` IS NULL AND (`epoch` IS NULL OR `epoch` = 0) AND {unacked} LIMIT {limit}"
        ),
        _ => format!(
            "SELECT {key}, 0, 0 FROM {table}{gh} WHERE `time_next` IS NULL AND {unacked} LIMIT {limit}",
            gh = group_hint(def).unwrap_or_default(),
        ),
    };
    // FIFO groups (§11): the rows without a group here; the heads are walked apart.
    let head = super::groups::and_ungrouped(def, &table);
    UnprioritizedQueries {
        never_scheduled: never_scheduled.replace(
            &format!(" LIMIT {limit}"),
            &format!("{head} LIMIT {limit}"),
        ),
        scheduled: format!(
            "SELECT {key}, 0, `time_next` FROM {table}{hint} WHERE `time_next` <= {now} AND {unacked}{head} ORDER BY `time_next` LIMIT {limit}"
        ),
        soon: format!(
            "SELECT {key}, 0, `time_next` FROM {table}{hint} WHERE `time_next` > {now} AND `time_next` <= {horizon} AND {unacked}{head} ORDER BY `time_next` LIMIT {limit}"
        ),
    }
}

async fn by_priority(
    conn: &mut Conn,
    def: &MessageTable,
    now: i64,
    horizon: i64,
) -> Result<(Vec<PolledRow>, Vec<PolledRow>), mysql_async::Error> {
    let limit = def.options.cache_size;
    let table = def.qualified();
    let key = def.key_sql();
    // FIFO groups (§11): the rows without a group here (through the group's index); the heads
    // are walked apart.
    let head = super::groups::and_ungrouped(def, &table);
    let ghint = group_hint(def).unwrap_or_default();
    let mut due: Vec<PolledRow> = Vec::new();
    let mut soon: Vec<PolledRow> = Vec::new();
    // The two values of time_acked that mean "unacked" (see `state`), each an equality the
    // index can use.
    for acked in ["`time_acked` IS NULL", "`time_acked` = 0"] {
        let mut due_here = 0usize;
        let mut soon_here = 0usize;
        // NULL priorities first: they count as 0, and merge below by that value.
        let mut groups: Vec<String> = vec!["`priority` IS NULL".into()];
        let mut last: Option<i64> = None;
        let mut scanned = 0usize;
        loop {
            for group in groups.drain(..) {
                if due_here < limit {
                    let sql = format!(
                        "SELECT {key}, COALESCE(`priority`, 0), COALESCE(`time_next`, 0) FROM {table}{ghint} WHERE {acked} AND {group} AND {due_cond}{head} ORDER BY `time_next` LIMIT {n}",
                        due_cond = state::due_sql(now),
                        n = limit - due_here,
                    );
                    let rows = polled_rows(conn, &sql, def).await?;
                    due_here += rows.len();
                    due.extend(rows);
                }
                if soon_here < limit {
                    let sql = format!(
                        "SELECT {key}, COALESCE(`priority`, 0), `time_next` FROM {table}{ghint} WHERE {acked} AND {group} AND `time_next` > {now} AND `time_next` <= {horizon}{head} ORDER BY `time_next` LIMIT {n}",
                        n = limit - soon_here,
                    );
                    let rows = polled_rows(conn, &sql, def).await?;
                    soon_here += rows.len();
                    soon.extend(rows);
                }
            }
            if due_here >= limit {
                // Enough for this poll; the schedule of sent rows and the next poll cover the rest.
                break;
            }
            if scanned >= MAX_PRIORITY_GROUPS {
                // More distinct priorities than one poll walks, each with unacked rows: the
                // rest in one query each for due and soon rows. It may sort, but only tables
                // with this many priorities pay for it, and without it a due row above them
                // would never be polled (nor redelivered) while the lower ones stay unacked.
                if let Some(p) = last {
                    let above = format!("`priority` > {p}");
                    let sql = format!(
                        "SELECT {key}, `priority`, COALESCE(`time_next`, 0) FROM {table}{ghint} WHERE {acked} AND {above} AND {due_cond}{head} ORDER BY `priority`, `time_next` LIMIT {n}",
                        due_cond = state::due_sql(now),
                        n = limit - due_here,
                    );
                    due.extend(polled_rows(conn, &sql, def).await?);
                    if soon_here < limit {
                        let sql = format!(
                            "SELECT {key}, `priority`, `time_next` FROM {table}{ghint} WHERE {acked} AND {above} AND `time_next` > {now} AND `time_next` <= {horizon}{head} ORDER BY `time_next` LIMIT {n}",
                            n = limit - soon_here,
                        );
                        soon.extend(polled_rows(conn, &sql, def).await?);
                    }
                }
                break;
            }
            scanned += 1;
            let above = last
                .map(|p| format!(" AND `priority` > {p}"))
                .unwrap_or_default();
            let next: Option<Value> = conn
                .query_first(format!(
                    "SELECT MIN(`priority`) FROM {table} WHERE {acked}{above}"
                ))
                .await?;
            // NULL (no more priorities) or past i64 (`bigint unsigned`): the walk ends here.
            match next.and_then(|v| from_value_opt::<Option<i64>>(v).ok().flatten()) {
                Some(p) => {
                    groups.push(format!("`priority` = {p}"));
                    last = Some(p);
                }
                None => break,
            }
        }
    }
    // Merge the NULL/0 halves into sending order and keep the first `limit`.
    due.sort_by_key(|(_, priority, time_next)| (*priority, *time_next));
    due.truncate(limit);
    soon.sort_by_key(|(_, _, time_next)| *time_next);
    soon.truncate(limit);
    Ok((due, soon))
}
