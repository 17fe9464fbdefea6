//! Streams that choose (MESSAGING.md §12): a `STREAM ... WHERE condition` finds its own due
//! rows that match, on its own connection, whenever the manager says rows may have become due
//! (and at least every `vt_poller_interval`), then claims them like any batch with the condition
//! checked again. The manager's cache and hand-out know nothing of conditions: rows a condition
//! does not match stay for the other streams, and no condition starves another, since each
//! looks for its own rows. The condition runs only on the streaming session's connection, with
//! its privileges, never on the engine's.
//!
//! The parser has checked that the condition is one expression (no comment, no `;`, no `)`
//! without its `(`); it is put in parentheses, with a newline before the closing one.

use bytes::BytesMut;
use mysql_common::constants::StatusFlags;

use super::super::cache::Entry;
use super::super::claim_failure::{rollback_after, BatchError, ROLLBACK};
use super::super::manager::{Batch, DueWatch, Subscription};
use super::super::state;
use super::super::table::MessageTable;
use crate::backend::{Backend, BackendError, QueryOutcome};
use crate::protocol::wire;

/// The shortest time between two finds of one stream: under a storm of changes, one query
/// serves many of them.
pub(super) const FIND_GAP: std::time::Duration = std::time::Duration::from_millis(10);

/// ` WHERE (condition\n)`.
pub(super) fn where_clause(condition: &str) -> String {
    format!(" WHERE ({condition}\n)")
}

/// ` AND (condition\n)`.
pub(super) fn and_condition(condition: &str) -> String {
    format!(" AND ({condition}\n)")
}

/// The next batch of a stream fed by the manager; never, for one that finds its own rows.
pub(super) async fn next_batch(subscription: Option<&mut Subscription>) -> Option<Batch> {
    match subscription {
        Some(s) => s.batches.recv().await,
        None => std::future::pending().await,
    }
}

/// For a stream that finds its own rows: returns when rows may have become due or at `at`,
/// `false` if the table's manager is gone. Never, for a stream fed by the manager.
pub(super) async fn due_or_time(watch: Option<&mut DueWatch>, at: tokio::time::Instant) -> bool {
    let Some(watch) = watch else {
        return std::future::pending().await;
    };
    tokio::select! {
        changed = watch.due.changed() => changed.is_ok(),
        _ = tokio::time::sleep_until(at) => true,
    }
}

/// The due, unacked rows matching `condition`, in sending order, at most `limit` (`vt_batch_size`,
/// or less under `vt_max_unacked`): a plain read (no locks: the claim locks what it takes,
/// skipping what others hold). `thorough` as the poller's (see `poll`): this find also looks for
/// sent rows whose `time_next` was set to NULL.
pub(super) async fn find(
    backend: &mut Backend,
    deprecate_eof: bool,
    def: &MessageTable,
    condition: &str,
    limit: usize,
    thorough: bool,
) -> Result<Batch, BatchError> {
    let queries = find_sql(def, condition, limit, state::now_ns(), thorough);
    let statements: Vec<&str> = queries.iter().map(String::as_str).collect();
    let mut batch: Batch = Vec::new();
    let mut keep = |row: BytesMut| {
        let Some(values) = wire::text_row_values(&row) else {
            return;
        };
        let number = |v: Option<&[u8]>| {
            v.and_then(|b| std::str::from_utf8(b).ok())
                .and_then(|t| t.parse::<i64>().ok())
                .unwrap_or(0)
        };
        if let [Some(key), priority, time_next] = values[..] {
            batch.push(Entry {
                key: key.into(),
                priority: number(priority),
                time_next: number(time_next),
            });
        }
    };
    backend
        .send_queries(&statements)
        .await
        .map_err(BatchError::Backend)?;
    // Every answer is read before any is looked at, so the connection stays in step whatever
    // failed.
    let mut outcomes = Vec::with_capacity(statements.len());
    for _ in &statements {
        outcomes.push(
            backend
                .read_outcome_with(deprecate_eof, limit, &mut keep)
                .await
                .map_err(BatchError::Backend)?,
        );
    }
    let mut in_trans = false;
    for outcome in outcomes {
        match outcome {
            QueryOutcome::ResultSet { status, .. } => {
                in_trans = status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0;
            }
            QueryOutcome::Err(err) => return Err(rollback_after(backend, deprecate_eof, err).await),
            QueryOutcome::Ok { .. } => return Err(BatchError::Backend(BackendError::Protocol)),
        }
    }
    // With autocommit off that read began a transaction: end it, or it would hold the table's
    // metadata lock while the stream waits (see `serve`).
    if in_trans {
        backend
            .query(ROLLBACK, deprecate_eof)
            .await
            .map_err(BatchError::Backend)?;
    }
    // The parts, merged in sending order (the NULL part's rows count as `time_next` 0).
    batch.sort_by_key(|e| (e.priority, e.time_next));
    batch.truncate(limit);
    Ok(batch)
}

/// The statements of one find. Without `priority` and FIFO groups they are the poller's two parts
/// (see `poll`) with the condition added: rows never scheduled (`time_next` NULL; with an index
/// `(time_next, epoch)`, as "never sent" unless `thorough`), and rows with `time_next <= now` in
/// `time_next` order — a range and an order the server can read from an index starting with
/// `time_next` and stop at `limit`, or, for a selective condition, from the condition's own index.
/// No index is forced: the server chooses. Measured with `ANALYZE FORMAT=JSON` on MariaDB 10.11,
/// 100,000 due rows and 100,000 acked: a condition every row matches read 100 rows in 2 ms through
/// `time_next`'s index (the single query with `COALESCE` in its order took 540 ms, through
/// `time_acked`'s index and a sort of every due row); one matching no row took 0.03 ms through
/// its own index (forcing `time_next`'s took 306 ms). With `priority` or FIFO groups, one query
/// over the due rows in sending order, which the server may have to sort.
fn find_sql(
    def: &MessageTable,
    condition: &str,
    limit: usize,
    now: i64,
    thorough: bool,
) -> Vec<String> {
    let key = def.key_sql();
    let table = def.qualified();
    let cond = and_condition(condition);
    let unacked = state::UNACKED_SQL;
    if !def.has_priority && def.group_column.is_none() {
        let never_sent = match &def.next_index {
            Some(index) if index.then_epoch && !thorough => " AND (`epoch` IS NULL OR `epoch` = 0)",
            _ => "",
        };
        return vec![
            format!(
                "SELECT {key}, 0, 0 FROM {table} WHERE `time_next` IS NULL{never_sent} AND \
                 {unacked}{cond} LIMIT {limit}"
            ),
            format!(
                "SELECT {key}, 0, `time_next` FROM {table} WHERE `time_next` <= {now} AND \
                 {unacked}{cond} ORDER BY `time_next` LIMIT {limit}"
            ),
        ];
    }
    let priority = if def.has_priority {
        "COALESCE(`priority`, 0)"
    } else {
        "0"
    };
    vec![format!(
        "SELECT {key}, {priority}, COALESCE(`time_next`, 0) FROM {table} WHERE {ready}{cond}{head} \
         ORDER BY 2, 3, {id} LIMIT {limit}",
        id = super::super::table::quote_ident(def.id_column()),
        ready = state::ready_sql(now),
        // FIFO groups (§11): only heads.
        head = super::super::groups::and_head(def, &table),
    )]
}
