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
use super::super::manager::{Batch, DueWatch, Subscription};
use super::super::state;
use super::super::table::MessageTable;
use super::{rollback_after, BatchError, ROLLBACK};
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
/// skipping what others hold).
pub(super) async fn find(
    backend: &mut Backend,
    deprecate_eof: bool,
    def: &MessageTable,
    condition: &str,
    limit: usize,
) -> Result<Batch, BatchError> {
    let now = state::now_ns();
    let priority = if def.has_priority {
        "COALESCE(`priority`, 0)"
    } else {
        "0"
    };
    let sql = format!(
        "SELECT {key}, {priority}, COALESCE(`time_next`, 0) FROM {table} WHERE {ready}{cond} \
         ORDER BY 2, 3, {id} LIMIT {limit}",
        id = super::super::table::quote_ident(def.id_column()),
        key = def.key_sql(),
        table = def.qualified(),
        ready = state::ready_sql(now),
        cond = and_condition(condition),
    );
    // FIFO groups (§11): only heads.
    let sql = sql.replace(
        " ORDER BY 2, 3",
        &format!(
            "{} ORDER BY 2, 3",
            super::super::groups::and_head(def, &def.qualified())
        ),
    );
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
        .send_queries(&[&sql])
        .await
        .map_err(BatchError::Backend)?;
    let outcome = backend
        .read_outcome_with(deprecate_eof, limit, &mut keep)
        .await
        .map_err(BatchError::Backend)?;
    match outcome {
        QueryOutcome::ResultSet { status, .. } => {
            // With autocommit off that read began a transaction: end it, or it would hold the
            // table's metadata lock while the stream waits (see `serve`).
            if status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0 {
                backend
                    .query(ROLLBACK, deprecate_eof)
                    .await
                    .map_err(BatchError::Backend)?;
            }
            Ok(batch)
        }
        QueryOutcome::Err(err) => Err(rollback_after(backend, deprecate_eof, err).await),
        QueryOutcome::Ok { .. } => Err(BatchError::Backend(BackendError::Protocol)),
    }
}
