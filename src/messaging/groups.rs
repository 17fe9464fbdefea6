//! FIFO groups (MESSAGING.md §11, `vt_group_col`): the SQL that keeps one message of a group in
//! flight at a time, in id order. No I/O.
//!
//! A message of a group is its **head** when no other message of the group with a smaller id is
//! still unacked and not dead. Only heads are polled and claimed; while a head is in flight it
//! stays unacked, so the next message of its group is not the head until it is acked, dead or
//! deleted. The claim checks this after locking its rows, with a plain read that sees what was
//! committed by then (a locking read would skip, not see, another claim's locked head), so two
//! proxies can never both send messages of one group. With an index on (group column, id) the
//! check is one index range per candidate.
//!
//! Rows inserted in a group out of id order (two producers of one key whose commits cross) can
//! break the order: use one producer per key, or insert a key's messages in one transaction.

use mysql_async::prelude::Queryable;
use mysql_async::{from_row_opt, Conn, Params, Row, Value};

use super::polled::{value_bytes, PolledRow};
use super::state;
use super::table::{quote_ident, MessageTable};

/// Groups read by one query of the poller's walk.
const PAGE: usize = 1000;

/// Most pages one poll walks (the walk also stops once it has a page's worth of due heads).
const MAX_PAGES: usize = 100;

/// SQL: some message of the group of the row named `outer` (a table reference) with a smaller id
/// is unacked and not dead. `None` without `vt_group_col`.
fn earlier_pending(def: &MessageTable, outer: &str) -> Option<String> {
    let group = quote_ident(def.group_column.as_deref()?);
    let id = quote_ident(def.id_column());
    Some(format!(
        "EXISTS (SELECT 1 FROM {table} AS fifo_h WHERE fifo_h.{group} = {outer}.{group} \
         AND fifo_h.{id} < {outer}.{id} AND (fifo_h.`time_acked` IS NULL OR fifo_h.`time_acked` = 0) \
         AND (fifo_h.`time_next` IS NULL OR fifo_h.`time_next` <> {dead}))",
        table = def.qualified(),
        dead = state::DEAD_TIME_NEXT,
    ))
}

/// ` AND <the row is the head of its group, or has none>` for a query over `def` whose rows
/// are referred to as `outer`; empty without `vt_group_col`.
pub fn and_head(def: &MessageTable, outer: &str) -> String {
    match (&def.group_column, earlier_pending(def, outer)) {
        (Some(group), Some(earlier)) => format!(
            " AND ({outer}.{} IS NULL OR NOT {earlier})",
            quote_ident(group)
        ),
        _ => String::new(),
    }
}

/// ` AND <the row has no group>` (empty without `vt_group_col`): the poller's ordinary queries
/// read those; the heads of groups come from [`heads`].
pub fn and_ungrouped(def: &MessageTable, outer: &str) -> String {
    match &def.group_column {
        Some(group) => format!(" AND {outer}.{} IS NULL", quote_ident(group)),
        None => String::new(),
    }
}

/// One page of the walk: the next [`PAGE`] groups after `?` (or from the first, `after` false),
/// in group order, each with its head — the group's first message by id that is unacked and not
/// dead — as `(group, key, priority, time_next)`; a group without a head (every message acked or
/// dead) comes with NULLs, so that a page always has one row per group and the walk knows where
/// it is.
///
/// Measured with `ANALYZE FORMAT=JSON` on MariaDB 10.11, 1,000,000 messages over 10,000 groups
/// (see docs/BENCHMARKS.md), this shape costs about as much as at one message per group:
/// - the groups and their first ids come from a loose scan of the `(group, id)` index
///   (`MIN(id) ... GROUP BY`, "using index for group-by": one index dive a group, no row read);
/// - a group's first row, read by primary key, is its head unless it is acked or dead (the usual
///   case: acked rows are deleted by the purge): one primary-key read a group;
/// - only when it is not is the group's index range read from the first id on, in a subquery
///   the `IF` evaluates for those groups alone. That `ref` read prefetches 8 more rows of the
///   group with a primary-key read each (InnoDB's fetch cache, used at once by an exact key
///   match), 30 page reads instead of 6: which is why it is not the common path;
/// - the head's id is worked out in a derived table kept apart (its `LIMIT` stops the optimizer
///   from merging it): in a join's `ON` the subquery ran three times a group.
///
/// There is one `?` (the group the last page ended at), in the innermost derived table.
fn page_sql(def: &MessageTable, after: bool) -> Option<String> {
    let group = quote_ident(def.group_column.as_deref()?);
    let id = quote_ident(def.id_column());
    let key = def.key_sql().replace(&id, &format!("h.{id}"));
    let priority = if def.has_priority {
        "COALESCE(h.`priority`, 0)"
    } else {
        "0"
    };
    Some(walk_page_sql(
        &def.qualified(),
        &group,
        &id,
        &key,
        priority,
        after,
    ))
}

/// [`page_sql`] from its parts (quoted identifiers; `key` and `priority` over the head `h`), for
/// the benchmark to time the very query the poller runs.
pub fn walk_page_sql(
    table: &str,
    group: &str,
    id: &str,
    key: &str,
    priority: &str,
    after: bool,
) -> String {
    let from = if after {
        format!(" AND {group} > ?")
    } else {
        String::new()
    };
    // Unacked and not dead, for the row referred to as `t`.
    let pending = |t: &str| {
        format!(
            "({t}.`time_acked` IS NULL OR {t}.`time_acked` = 0) AND ({t}.`time_next` IS NULL OR \
             {t}.`time_next` <> {dead})",
            dead = state::DEAD_TIME_NEXT
        )
    };
    format!(
        "SELECT d.{group}, {key}, {priority}, COALESCE(h.`time_next`, 0) FROM \
         (SELECT g.{group}, IF(f.{id} IS NOT NULL AND {first_pending}, f.{id}, \
         (SELECT y.{id} FROM {table} AS y WHERE y.{group} = g.{group} AND y.{id} > g.msgproxy_first \
         AND {later_pending} ORDER BY y.{id} LIMIT 1)) AS msgproxy_head \
         FROM (SELECT {group}, MIN({id}) AS msgproxy_first FROM {table} WHERE {group} IS NOT NULL{from} \
         GROUP BY {group} ORDER BY {group} LIMIT {PAGE}) AS g \
         LEFT JOIN {table} AS f ON f.{id} = g.msgproxy_first ORDER BY g.{group} LIMIT {PAGE}) AS d \
         LEFT JOIN {table} AS h ON h.{id} = d.msgproxy_head ORDER BY d.{group}",
        first_pending = pending("f"),
        later_pending = pending("y"),
    )
}

/// The heads of the groups that are due now and due by `horizon`, walking the groups from
/// `cursor` (where the last poll stopped; `None`: the first) on, wrapping around once, until a
/// page's worth of due heads (at most `vt_cache_size`) is found or every group was seen: so each
/// poll costs about one page, whatever the backlog of each group, and every group comes in turn.
pub async fn heads(
    conn: &mut Conn,
    def: &MessageTable,
    now: i64,
    horizon: i64,
    cursor: &mut Option<Value>,
) -> Result<(Vec<PolledRow>, Vec<PolledRow>), mysql_async::Error> {
    let (Some(first), Some(next)) = (page_sql(def, false), page_sql(def, true)) else {
        return Ok((Vec::new(), Vec::new()));
    };
    // One page's worth of due heads a poll: a poll (and so a new stream's first row) costs about
    // one page, not a walk of every group; acks in a group table ask for the next poll at once.
    let want = def.options.cache_size.min(PAGE);
    let mut due = Vec::new();
    let mut soon = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut wrapped = cursor.is_none();
    for _ in 0..MAX_PAGES {
        let rows: Vec<Row> = match cursor.clone() {
            Some(after) => conn.exec(&next, Params::Positional(vec![after])).await?,
            None => conn.query(&first).await?,
        };
        let n = rows.len();
        for row in rows {
            let Ok((group, key, priority, time_next)) =
                from_row_opt::<(Value, Value, Option<i64>, Option<i64>)>(row)
            else {
                continue;
            };
            *cursor = Some(group);
            let (Some(key_bytes), Some(priority), Some(time_next)) =
                (value_bytes(key.clone()), priority, time_next)
            else {
                continue;
            };
            if !seen.insert(key_bytes) {
                continue;
            }
            if time_next <= now {
                due.push((key, priority, time_next));
            } else if time_next <= horizon {
                soon.push((key, priority, time_next));
            }
        }
        if n < PAGE {
            // The last group: start again from the first, once.
            *cursor = None;
            if wrapped {
                break;
            }
            wrapped = true;
        }
        if due.len() >= want {
            break;
        }
    }
    Ok((due, soon))
}

/// The claim's check, after its locking read: the keys among `ids` (an `ids_sql` condition)
/// that are not heads of their groups. `None` without `vt_group_col`.
pub fn blocked_sql(def: &MessageTable, ids: &str) -> Option<String> {
    let group = quote_ident(def.group_column.as_deref()?);
    let earlier = earlier_pending(def, "fifo_c")?;
    Some(format!(
        "SELECT {key} FROM {table} AS fifo_c WHERE {ids} AND fifo_c.{group} IS NOT NULL AND {earlier}",
        key = def.key_sql(),
        table = def.qualified(),
    ))
}

/// The query counting the groups with a message in flight (sent, its ack wait not over, unacked,
/// not dead); `None` without `vt_group_col`. Run by the engine at each purge tick, like
/// `dead_letter::count_sql`.
pub fn keys_in_flight_sql(def: &MessageTable, now_ns: i64) -> Option<String> {
    let group = quote_ident(def.group_column.as_deref()?);
    Some(format!(
        "SELECT COUNT(DISTINCT {group}) FROM {table} WHERE {group} IS NOT NULL \
         AND {unacked} AND `time_next` > {now_ns} AND `time_next` <> {dead} AND `epoch` > 0",
        table = def.qualified(),
        unacked = state::UNACKED_SQL,
        dead = state::DEAD_TIME_NEXT,
    ))
}
