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

use super::state;
use super::table::{quote_ident, MessageTable};

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

/// A `SHOW MESSAGE TABLES` expression: the groups with a message in flight (sent, its ack wait
/// not over, unacked, not dead); NULL without `vt_group_col`.
pub fn keys_in_flight_sql(def: &MessageTable, now_ns: i64) -> String {
    let Some(group) = &def.group_column else {
        return "CAST(NULL AS UNSIGNED)".to_string();
    };
    format!(
        "(SELECT CAST(COUNT(DISTINCT {group}) AS UNSIGNED) FROM {table} WHERE {group} IS NOT NULL \
         AND {unacked} AND `time_next` > {now_ns} AND `time_next` <> {dead} AND `epoch` > 0)",
        group = quote_ident(group),
        table = def.qualified(),
        unacked = state::UNACKED_SQL,
        dead = state::DEAD_TIME_NEXT,
    )
}
