//! The subscriber side of `STREAM * FROM t`: runs on the client session's own backend
//! connection, so column definitions and row values are exactly what the server sends that
//! session for a `SELECT` of those columns (its character set, its time zone, its metadata).
//!
//! For each batch the manager offers, the stream claims the rows in one short transaction —
//! `SELECT ... FOR UPDATE SKIP LOCKED` re-checks that each row is still unacked and due and locks
//! it, the `UPDATE` moves `time_next` past the ack window with backoff and counts `epoch`, and
//! `COMMIT` makes the claim visible to every other proxy — and only then writes the rows to the
//! client. A row claimed by someone else, acked, or rescheduled meanwhile is skipped.
//!
//! The stream frames what the client gets in a [`StreamedResult`] and hands it to the session's
//! [`ResultClient`]: the session owns and writes the client connection.

use std::collections::HashMap;

use bytes::BytesMut;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::backoff;
use super::cache::Entry;
use super::claim_budget::ClaimBudget;
use super::claim_failure::{rollback_after, BatchError, ROLLBACK};
use super::late_claim;
use super::manager::{DueWatch, Subscription};
use super::state;
use super::table::MessageTable;
use crate::backend::{Backend, BackendError, QueryOutcome};
use crate::protocol::commands::{
    ER_NO_SUCH_TABLE, ER_QUERY_INTERRUPTED, ER_SERVER_SHUTDOWN, ER_TABLE_DEF_CHANGED,
};
use crate::protocol::streamed_result::{ResultClient, StreamedResult};
use crate::protocol::wire::{self, ErrorPacket};
use mysql_common::constants::StatusFlags;

/// How a claim ends its transaction. Spelled out so that the session's `completion_type` (which
/// the client may have set to chain a new transaction, or to disconnect) does not apply (as
/// [`ROLLBACK`]).
const COMMIT: &str = "COMMIT AND NO CHAIN NO RELEASE";

/// How long a stream's backend connection may sit idle before the proxy pings it.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(60);

/// Most bytes of rows one claim keeps (and writes to its client in one go). Rows past it are not
/// claimed: they stay due and are offered again at once. One row is always claimed, however
/// large, so a stream's memory stays within this plus one message.
const CLAIM_BYTES: usize = 16 << 20;

/// Where a stream's messages come from.
pub enum Feed {
    /// Batches the manager hands out (`STREAM` without a condition).
    Batches(Subscription),
    /// Rows the stream finds itself, matching `condition` (MESSAGING.md §12), when `watch` says
    /// rows may have become due.
    Filtered { watch: DueWatch, condition: String },
}

impl Feed {
    fn manager(&self) -> &std::sync::Arc<super::manager::TableManager> {
        match self {
            Feed::Batches(s) => s.manager(),
            Feed::Filtered { watch, .. } => watch.manager(),
        }
    }
}

#[path = "stream_filter.rs"]
mod filter;

/// How a stream ended.
pub enum StreamEnd {
    /// The stream never started (the server refused the column query); the error was sent and
    /// the session goes on.
    Refused,
    /// The client went away, or msgproxy is shutting down (its error sent): close the session.
    Closed,
    /// `KILL QUERY` ended the stream with error 1317, already sent: the session goes on.
    Interrupted,
    /// The stream cannot go on (its table or a column is gone, the session cannot write) and
    /// ended with that error, already sent; the backend connection is back between statements,
    /// so the session goes on, as after any failed statement.
    Failed,
    /// The backend connection failed. The `u8` is the sequence id the client expects next (the
    /// session's error packet must continue the stream's result set).
    BackendLost(BackendError, u8),
}

/// Ends the stream's result set with `err`: [`StreamEnd::Failed`], or `Closed` if the client is
/// gone.
async fn end_with<C: ResultClient>(
    client: &mut C,
    result: &mut StreamedResult,
    err: &[u8],
) -> StreamEnd {
    result.error(err);
    match client.send(&result.take()).await {
        Ok(()) => StreamEnd::Failed,
        Err(_) => StreamEnd::Closed,
    }
}

/// Serves a `STREAM` until the client leaves or the proxy stops. `first_seq` is the sequence id
/// after the client's last packet of the statement (1, unless it took more than one packet).
#[allow(clippy::too_many_arguments)]
pub async fn serve<C: ResultClient>(
    client: &mut C,
    backend: &mut Backend,
    first_seq: u8,
    deprecate_eof: bool,
    feed: Feed,
    columns: Option<Vec<String>>,
    shutdown: &CancellationToken,
    interrupted: &CancellationToken,
) -> StreamEnd {
    let manager = feed.manager().clone();
    let mut def = (*manager.definition()).clone();
    if let Some(columns) = columns {
        def.stream_columns = columns;
    }
    let def = def;
    let condition = match &feed {
        Feed::Batches(_) => None,
        Feed::Filtered { condition, .. } => Some(condition.clone()),
    };
    let (mut subscription, mut watch) = match feed {
        Feed::Batches(s) => (Some(s), None),
        Feed::Filtered { watch, .. } => (None, Some(watch)),
    };
    let keepalive_every = keepalive_interval(backend, deprecate_eof).await;
    // Column definitions first, at once, even when nothing is due. A condition the server
    // rejects ends the STREAM here, with the server's own error.
    let sql = format!(
        "SELECT {} FROM {}{} LIMIT 0",
        def.select_list(),
        def.qualified(),
        condition
            .as_deref()
            .map_or(String::new(), filter::where_clause),
    );
    let (columns, mut status) = match backend.query(&sql, deprecate_eof).await {
        Ok(QueryOutcome::ResultSet {
            columns, status, ..
        }) => (columns, status),
        Ok(QueryOutcome::Err(err)) => {
            let mut refused = StreamedResult::new(first_seq, deprecate_eof);
            refused.error(&err);
            let _ = client.send(&refused.take()).await;
            return StreamEnd::Refused;
        }
        Ok(QueryOutcome::Ok { .. }) => {
            return StreamEnd::BackendLost(BackendError::Protocol, first_seq)
        }
        Err(e) => return StreamEnd::BackendLost(e, first_seq),
    };
    // With autocommit off, that SELECT began a transaction (the session refuses STREAM inside
    // one of the client's, so it is the stream's own): end it at once, or it would hold the
    // table's metadata lock until the first claim — blocking every ALTER of the table, and
    // behind the ALTER every write to it, for as long as the stream waits for a message.
    if status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0 {
        match backend.query(ROLLBACK, deprecate_eof).await {
            Ok(QueryOutcome::Ok { status: s, .. }) => status = s,
            Ok(_) => return StreamEnd::BackendLost(BackendError::Protocol, first_seq),
            Err(e) => return StreamEnd::BackendLost(e, first_seq),
        }
    }
    let mut result = StreamedResult::new(first_seq, deprecate_eof);
    result.columns(&columns, status);
    if let Err(e) = client.send(&result.take()).await {
        debug!("stream client left before the column definitions: {e}");
        return StreamEnd::Closed;
    }
    let mut next_find = tokio::time::Instant::now();
    // Finds so far, to make every `poll::THOROUGH_EVERY`th one thorough (as the poller's polls).
    let mut finds: u64 = 0;
    let mut last_find = next_find;
    let mut keepalive = tokio::time::interval(keepalive_every);
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    keepalive.tick().await;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let err = ErrorPacket::new(ER_SERVER_SHUTDOWN, "08S01", "msgproxy is shutting down; reconnect and STREAM again (unacked messages come back after their ack wait)");
                result.error(&err.encode(true));
                let _ = client.send(&result.take()).await;
                return StreamEnd::Closed;
            }
            _ = interrupted.cancelled() => {
                // As the server ends a killed statement. The rows sent so far stay claimed until
                // they are acked or their ack wait passes.
                let err = ErrorPacket::new(ER_QUERY_INTERRUPTED, "70100", "Query execution was interrupted");
                result.error(&err.encode(true));
                if client.send(&result.take()).await.is_err() {
                    return StreamEnd::Closed;
                }
                return StreamEnd::Interrupted;
            }
            _ = client.left() => {
                // A streaming client sends nothing; data or EOF both mean it is done with us.
                return StreamEnd::Closed;
            }
            r = backend.conn.fill(), if backend.conn.buffered().is_empty() => {
                // The backend spoke unprompted (a "killed" or "shutting down" error) or closed
                // the connection: nothing can be claimed here any more. Tell the client now,
                // while it waits, not at its next batch or keepalive.
                let e = match r {
                    Ok(0) => std::io::ErrorKind::UnexpectedEof.into(),
                    Ok(_) => std::io::Error::other(
                        backend.conn.buffered().get(4..).and_then(ErrorPacket::parse).map_or_else(
                            || "the backend sent a packet unprompted".to_string(),
                            |e| format!("the backend said: {e}"),
                        ),
                    ),
                    Err(e) => e,
                };
                return StreamEnd::BackendLost(BackendError::Io(e), result.next_seq());
            }
            _ = keepalive.tick() => {
                // A stream may wait hours for a message; keep its backend connection from
                // reaching the server's wait_timeout.
                if let Err(e) = backend.ping().await {
                    return StreamEnd::BackendLost(e, result.next_seq());
                }
            }
            woke = filter::due_or_time(watch.as_mut(), next_find) => {
                keepalive.reset();
                let (Some(watch), Some(condition)) = (&watch, &condition) else { continue };
                if !woke {
                    let err = ErrorPacket::new(ER_NO_SUCH_TABLE, "42S02", format!("message table {} was dropped or is no longer a valid message table; the stream has ended", def.qualified()));
                    return end_with(client, &mut result, &err.encode(true)).await;
                }
                // `vt_max_unacked`: a stream holding that many finds nothing until an ack (or a
                // passing ack wait) makes room, which the watch signals.
                let room = watch.room();
                if room == 0 {
                    next_find = tokio::time::Instant::now() + watch.manager().definition().options.poller_interval;
                    continue;
                }
                // Not more often than every FIND_GAP: under a storm of changes one query
                // serves many.
                tokio::time::sleep_until(last_find + filter::FIND_GAP).await;
                last_find = tokio::time::Instant::now();
                let mut current = (*watch.manager().definition()).clone();
                current.stream_columns = def.stream_columns.clone();
                let interval = current.options.poller_interval;
                next_find = last_find + interval;
                let limit = current.options.batch_size.min(room);
                finds += 1;
                let thorough = finds.is_multiple_of(super::poll::THOROUGH_EVERY);
                let batch = match filter::find(backend, deprecate_eof, &current, condition, limit, thorough).await {
                    Ok(batch) => batch,
                    Err(BatchError::Transient) => continue,
                    Err(BatchError::Backend(e)) => return StreamEnd::BackendLost(e, result.next_seq()),
                    Err(BatchError::Fatal(err)) => return end_with(client, &mut result, &err).await,
                };
                if batch.is_empty() {
                    continue;
                }
                let claimed = claim_batch(backend, deprecate_eof, &current, &columns, &batch, &mut result, Some(condition)).await;
                let ClaimedBatch { sent, delivered, dead, .. } = match claimed {
                    Ok(claimed) => claimed,
                    Err(BatchError::Transient) => continue,
                    Err(BatchError::Backend(e)) => return StreamEnd::BackendLost(e, result.next_seq()),
                    Err(BatchError::Fatal(err)) => return end_with(client, &mut result, &err).await,
                };
                // Held from the commit on, however long the write takes (as `batch_claimed`).
                watch.claimed(&sent);
                let stats = watch.manager().stats();
                stats.record_claim();
                stats.record_dead(dead.len() as u64);
                if batch.len() >= limit {
                    // A full batch: more may match now.
                    next_find = tokio::time::Instant::now();
                }
                if !result.is_empty() {
                    if let Err(e) = client.send(&result.take()).await {
                        debug!("stream client left: {e}");
                        return StreamEnd::Closed;
                    }
                }
                let now = state::now_ns();
                for (epoch, due) in delivered {
                    stats.record_sent(epoch, due, now);
                }
            }
            batch = filter::next_batch(subscription.as_mut()) => {
                keepalive.reset();
                let Some(subscription) = subscription.as_ref() else { continue };
                let Some(batch) = batch else {
                    let err = ErrorPacket::new(ER_NO_SUCH_TABLE, "42S02", format!("message table {} was dropped or is no longer a valid message table; the stream has ended", def.qualified()));
                    return end_with(client, &mut result, &err.encode(true)).await;
                };
                // The current options (the table may have been altered), but this stream's own
                // columns: the client was promised them. If one is gone, the claim fails with the
                // server's error and the stream ends with it.
                let mut current = (*subscription.manager().definition()).clone();
                current.stream_columns = def.stream_columns.clone();
                let def = current;
                let ClaimedBatch { sent, delivered, left_out, dead, blocked } = match claim_batch(backend, deprecate_eof, &def, &columns, &batch, &mut result, None).await {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        subscription.batch_done(&batch, Vec::new());
                        match e {
                            BatchError::Transient => continue,
                            BatchError::Backend(e) => return StreamEnd::BackendLost(e, result.next_seq()),
                            BatchError::Fatal(err) => return end_with(client, &mut result, &err).await,
                        }
                    }
                };
                // The claim is committed: the rows are this stream's for one ack window, whatever
                // happens to the write. The manager learns so now, not after the write: a client
                // that stops reading blocks the write for as long as it stays connected, and its
                // rows must come back to the other streams when their time_next passes (the
                // stream itself stays busy, so it is offered nothing more meanwhile).
                if !dead.is_empty() {
                    subscription.manager().stats().record_dead(dead.len() as u64);
                }
                // Neither dead nor blocked rows are offered again until the binlog or a poll
                // says they are due (a blocked one: when its group's head is done).
                let gone: Vec<Box<[u8]>> = dead.into_iter().chain(blocked).collect();
                subscription.batch_claimed(&batch, sent, &left_out, &gone);
                let written = if result.is_empty() { Ok(()) } else { client.send(&result.take()).await };
                subscription.ready();
                if let Err(e) = written {
                    debug!("stream client left: {e}");
                    return StreamEnd::Closed;
                }
                // Counted once the client has the rows ("sent" means written to a client).
                let stats = subscription.manager().stats();
                let now = state::now_ns();
                for (epoch, due) in delivered {
                    stats.record_sent(epoch, due, now);
                }
            }
        }
    }
}

/// How often an idle stream pings its backend connection: every [`KEEPALIVE`], or at half the
/// session's `wait_timeout` when that is shorter — the server closes a connection idle for
/// `wait_timeout`, and a stream waiting for messages is idle on the server's side.
async fn keepalive_interval(backend: &mut Backend, deprecate_eof: bool) -> std::time::Duration {
    let wait_timeout = match backend
        .query("SELECT @@session.wait_timeout", deprecate_eof)
        .await
    {
        Ok(QueryOutcome::ResultSet { rows, .. }) => rows
            .first()
            .and_then(|row| wire::text_row_values(row))
            .and_then(|values| values.first().copied().flatten())
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<u64>().ok()),
        _ => None,
    };
    match wait_timeout {
        Some(secs) => KEEPALIVE.min(std::time::Duration::from_millis(secs.max(1) * 500)),
        None => KEEPALIVE,
    }
}

/// Claims what it can of `batch`. Adds the claimed rows to `result` for the client and returns
/// them as entries with their new `time_next`.
async fn claim_batch(
    backend: &mut Backend,
    deprecate_eof: bool,
    def: &MessageTable,
    columns: &[BytesMut],
    batch: &[Entry],
    result: &mut StreamedResult,
    condition: Option<&str>,
) -> Result<ClaimedBatch, BatchError> {
    let keys: Vec<&[u8]> = batch.iter().map(|e| &e.key[..]).collect();
    let claim_started = state::now_ns();
    let Claim {
        claimed,
        left_out,
        dead,
        blocked,
    } = claim(backend, deprecate_eof, def, columns, &keys, condition).await?;
    let blocked: Vec<Box<[u8]>> = blocked.into_iter().collect();
    if claimed.is_empty() {
        return Ok(ClaimedBatch {
            left_out,
            dead,
            blocked,
            ..ClaimedBatch::default()
        });
    }
    let committed_at = state::now_ns();
    let mut sent = Vec::with_capacity(claimed.len());
    // (epoch before the claim, due time as the manager knew it) per row, for the stats.
    let mut delivered = Vec::with_capacity(claimed.len());
    let mut late = Vec::new();
    for c in claimed {
        let (priority, due) = batch
            .get(c.place)
            .map_or((0, 0), |e| (e.priority, e.time_next));
        // Not sent, but claimed all the same: the manager schedules it for its time_next like
        // the rows that were sent.
        if late_claim::too_late(c.time_next, committed_at, def.options.ack_wait) {
            late.push(late_claim::LateRow {
                key: c.key.clone(),
                epoch: c.epoch,
                time_next: c.time_next,
            });
        } else {
            result.row(&c.row);
            delivered.push((c.epoch, due));
        }
        sent.push(Entry {
            key: c.key,
            priority,
            time_next: c.time_next,
        });
    }
    if !late.is_empty() {
        warn!(
            "{}: a claim took {} ms to commit; its {} row(s) are not sent, so that no stream gets them twice within one ack wait: they come back when their time_next passes",
            def.qualified(),
            (committed_at - claim_started) / 1_000_000,
            late.len()
        );
        give_back(backend, deprecate_eof, def, &late).await?;
    }
    Ok(ClaimedBatch {
        sent,
        delivered,
        left_out,
        dead,
        blocked,
    })
}

/// Sets back the `epoch` of rows a late claim did not send (`late_claim`), in a transaction of
/// its own (the session may have autocommit off). If the server refuses, the rows keep their
/// counted attempt: they are still delivered later, one attempt short.
async fn give_back(
    backend: &mut Backend,
    deprecate_eof: bool,
    def: &MessageTable,
    late: &[late_claim::LateRow],
) -> Result<(), BatchError> {
    let Some(sql) = late_claim::give_back_sql(def, late) else {
        return Ok(());
    };
    let given_back = async {
        exec(backend, deprecate_eof, "START TRANSACTION").await?;
        exec(backend, deprecate_eof, &sql).await?;
        exec(backend, deprecate_eof, COMMIT).await
    };
    match given_back.await {
        Err(BatchError::Backend(e)) => Err(BatchError::Backend(e)),
        Err(_) => {
            warn!(
                "{}: could not set back the epoch of rows a late claim did not send; each keeps one attempt it did not get",
                def.qualified()
            );
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// A claimed batch.
#[derive(Default)]
struct ClaimedBatch {
    /// The rows as entries with their new `time_next`.
    sent: Vec<Entry>,
    /// Per row, (epoch before the claim, due time as the manager knew it), for the stats.
    delivered: Vec<(i64, i64)>,
    /// The keys of rows left unclaimed for [`CLAIM_BYTES`]: still due.
    left_out: Vec<Box<[u8]>>,
    /// The keys of rows the claim found dead and buried.
    dead: Vec<Box<[u8]>>,
    /// The keys of rows not the heads of their FIFO groups.
    blocked: Vec<Box<[u8]>>,
}

/// A claimed row.
struct Claimed {
    /// Its place in the batch.
    place: usize,
    /// Its payload, trimmed to the stream columns.
    row: BytesMut,
    key: Box<[u8]>,
    /// Its new `time_next`.
    time_next: i64,
    /// Its `epoch` before the claim.
    epoch: i64,
}

/// The claim transaction of the rows with `keys`, for a stream that sent its client `columns`.
async fn claim(
    backend: &mut Backend,
    deprecate_eof: bool,
    def: &MessageTable,
    columns: &[BytesMut],
    keys: &[&[u8]],
    condition: Option<&str>,
) -> Result<Claim, BatchError> {
    let now = state::now_ns();
    let stream_columns = def.stream_columns.len();
    let Some(ids) = def.ids_sql(keys.iter().copied()) else {
        return Ok(Claim {
            claimed: Vec::new(),
            left_out: Vec::new(),
            dead: Vec::new(),
            blocked: Default::default(),
        });
    };
    let select = format!(
        "SELECT {cols}, {key}, COALESCE(`epoch`, 0) FROM {table} WHERE {ids} AND {unacked} AND {due}{filter} LIMIT {limit} FOR UPDATE SKIP LOCKED",
        cols = def.select_list(),
        key = def.key_sql(),
        table = def.by_primary_key(),
        // Explicit, so a session's sql_select_limit cannot cut the claim short (each id
        // matches one row at most: the LIMIT changes nothing else).
        limit = keys.len(),
        unacked = state::UNACKED_SQL,
        due = state::due_sql(now),
        // A stream's condition (§12) is checked again: the row may have changed since it was
        // found.
        filter = condition.map_or(String::new(), filter::and_condition),
    );
    // START TRANSACTION and the locking SELECT go out together (one round trip); both answers
    // are read before either is looked at, so the connection stays in step whatever failed.
    // Each id matches one row at most. The rows come in the server's order; the budget keeps
    // the best-placed of them in the batch's sending order (priority, then time_next: the
    // manager's cache order) within CLAIM_BYTES. Rows it leaves out are locked by the SELECT
    // but left out of the UPDATE: the COMMIT releases them unchanged, still due. Sorting here
    // rather than with an ORDER BY spares the server a sort per claim, and keeps claims working
    // while a `priority` column the definition still names is being dropped.
    let places: HashMap<&[u8], usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let mut budget = ClaimBudget::new(CLAIM_BYTES);
    let mut malformed = false;
    let mut keep = |mut row: BytesMut| {
        let Some((key, epoch, keep)) = split_selected_row(&row, stream_columns) else {
            malformed = true;
            return;
        };
        let at = places.get(&key[..]).copied().unwrap_or(usize::MAX);
        // The budget counts what the row holds in memory; the client gets the stream columns.
        let size = row.len();
        row.truncate(keep);
        budget.offer(at, key, (row, epoch), size);
    };
    let (started, selected) = pipeline(
        backend,
        deprecate_eof,
        ("START TRANSACTION", &select),
        keys.len(),
        &mut keep,
    )
    .await?;
    expect_ok(backend, deprecate_eof, started).await?;
    match selected {
        QueryOutcome::ResultSet { .. } if malformed => {
            return Err(BatchError::Backend(BackendError::Protocol))
        }
        QueryOutcome::ResultSet {
            columns: selected, ..
        } => {
            // The rows must be what the client was told at the start: a column whose type,
            // length or character set has changed since (an ALTER) would reach it as values of
            // the old type. Nothing is claimed: the rows stay due for the streams to come.
            if let Some(changed) = changed_column(columns, &selected) {
                if let Err(e) = backend.query(ROLLBACK, deprecate_eof).await {
                    return Err(BatchError::Backend(e));
                }
                let err = ErrorPacket::new(
                    ER_TABLE_DEF_CHANGED,
                    "HY000",
                    format!(
                        "message table {} changed while streaming: column '{}' is no longer what this stream began with; STREAM again",
                        def.qualified(),
                        def.stream_columns.get(changed).map_or("?", String::as_str),
                    ),
                );
                return Err(BatchError::Fatal(err.encode(true)));
            }
        }
        QueryOutcome::Err(err) => return Err(rollback_after(backend, deprecate_eof, err).await),
        QueryOutcome::Ok { .. } => return Err(BatchError::Backend(BackendError::Protocol)),
    };
    let (mut rows, left_out) = budget.finish();
    // FIFO groups (§11): what the SELECT locked that is not the head of its group (the one
    // before it is still out, or was claimed by another proxy meanwhile) is released unclaimed.
    let blocked = blocked_rows(backend, deprecate_eof, def, &rows).await?;
    if !blocked.is_empty() {
        rows.retain(|(_, key, _)| !blocked.contains(key));
    }
    let mut claimed = Vec::with_capacity(rows.len());
    let mut dead = Vec::new();
    let mut cases = String::new();
    for (place, key, (row, epoch)) in rows {
        // Sent `vt_max_attempts` times and due again: its last ack wait passed without an ack.
        if def
            .options
            .max_attempts
            .is_some_and(|max| epoch >= i64::try_from(max).unwrap_or(i64::MAX))
        {
            dead.push(key);
            continue;
        }
        let Some(literal) = def.id_literal(&key) else {
            warn!(
                "{}: cannot form a literal for id key {:?}; skipping the row",
                def.qualified(),
                String::from_utf8_lossy(&key)
            );
            continue;
        };
        let time_next = backoff::next_time_next(now, epoch, &def.options, backoff::random_jitter());
        cases.push_str(&format!(" WHEN {literal} THEN {time_next}"));
        claimed.push(Claimed {
            place,
            row,
            key,
            time_next,
            epoch,
        });
    }
    let claimed_ids = def.ids_sql(claimed.iter().map(|c| &c.key[..]));
    let update = claimed_ids.map(|claimed_ids| {
        format!(
            "UPDATE {table} SET `epoch` = {EPOCH_PLUS_ONE}, `time_next` = CASE `id`{cases} END WHERE {claimed_ids}",
            table = def.by_primary_key(),
        )
    });
    let dead_ids = def.ids_sql(dead.iter().map(|k| &k[..]));
    if let Some(dead_ids) = dead_ids {
        // Rare (once per message at most), so one statement a round trip: a statement that
        // fails rolls the transaction back before the next is sent, and nothing after it runs
        // outside the claim's transaction.
        if let Some(update) = &update {
            exec(backend, deprecate_eof, update).await?;
        }
        for statement in super::dead_letter::bury(def, &dead_ids, now) {
            exec(backend, deprecate_eof, &statement).await?;
        }
        exec(backend, deprecate_eof, COMMIT).await?;
        return Ok(Claim {
            claimed,
            left_out,
            dead,
            blocked,
        });
    }
    let Some(update) = update else {
        exec(backend, deprecate_eof, COMMIT).await?;
        return Ok(Claim {
            claimed,
            left_out,
            dead,
            blocked,
        });
    };
    // The UPDATE and COMMIT go out together too. If the UPDATE fails, the COMMIT that follows
    // it commits nothing: the failed statement was undone (or, on a deadlock, the whole
    // transaction), and the SELECT before it changed nothing. Either way nothing is claimed.
    let (updated, committed) =
        pipeline(backend, deprecate_eof, (&update, COMMIT), 0, &mut |_| {}).await?;
    expect_ok(backend, deprecate_eof, updated).await?;
    expect_ok(backend, deprecate_eof, committed).await?;
    Ok(Claim {
        claimed,
        left_out,
        dead,
        blocked,
    })
}

/// With `vt_group_col`: the keys of `rows` (locked by the claim) that are not the heads of
/// their groups, by a plain read after the locks were taken (see `groups`).
async fn blocked_rows<R>(
    backend: &mut Backend,
    deprecate_eof: bool,
    def: &MessageTable,
    rows: &[(usize, Box<[u8]>, R)],
) -> Result<std::collections::HashSet<Box<[u8]>>, BatchError> {
    let mut blocked = std::collections::HashSet::new();
    let Some(ids) = def.ids_sql(rows.iter().map(|(_, key, _)| &key[..])) else {
        return Ok(blocked);
    };
    let Some(sql) = super::groups::blocked_sql(def, &ids) else {
        return Ok(blocked);
    };
    let mut keep = |row: BytesMut| {
        if let Some(values) = wire::text_row_values(&row) {
            if let [Some(key)] = values[..] {
                blocked.insert(Box::from(key));
            }
        }
    };
    backend
        .send_queries(&[&sql])
        .await
        .map_err(BatchError::Backend)?;
    let outcome = backend
        .read_outcome_with(deprecate_eof, rows.len(), &mut keep)
        .await
        .map_err(BatchError::Backend)?;
    match outcome {
        QueryOutcome::ResultSet { .. } => Ok(blocked),
        QueryOutcome::Err(err) => Err(rollback_after(backend, deprecate_eof, err).await),
        QueryOutcome::Ok { .. } => Err(BatchError::Backend(BackendError::Protocol)),
    }
}

/// What one claim transaction did.
struct Claim {
    /// The rows claimed, to send.
    claimed: Vec<Claimed>,
    /// The keys of rows left unclaimed for [`CLAIM_BYTES`]: still due.
    left_out: Vec<Box<[u8]>>,
    /// The keys of rows found dead (`vt_max_attempts`) and buried: never to be sent again.
    dead: Vec<Box<[u8]>>,
    /// The keys of rows not the heads of their FIFO groups: due again when the head is done.
    blocked: std::collections::HashSet<Box<[u8]>>,
}

/// A row of the claim's SELECT (the stream columns, the id key, the epoch), read once: its key,
/// its epoch, and the length of its stream columns, which are what the client gets. `None` when
/// the row does not have that shape.
fn split_selected_row(row: &[u8], stream_columns: usize) -> Option<(Box<[u8]>, i64, usize)> {
    let (keep, rest) = wire::text_row_split(row, stream_columns)?;
    let [Some(key), epoch] = rest[..] else {
        return None;
    };
    let epoch = epoch
        .and_then(|e| std::str::from_utf8(e).ok())
        .map_or(0, parse_epoch);
    Some((Box::from(key), epoch, keep))
}

/// A row's `epoch` as the claim's SELECT returned it. An unsigned column may hold more than an
/// i64: that is a message sent very often indeed, so it counts as the most (not as never sent).
fn parse_epoch(text: &str) -> i64 {
    text.parse::<i64>()
        .ok()
        .or_else(|| text.parse::<u64>().ok().map(|_| i64::MAX))
        .unwrap_or(0)
}

/// The claim's new `epoch`: one more send, saturating at the signed bigint maximum. A plain
/// `epoch + 1` there fails the whole UPDATE with 1690 (out of range), so a row whose epoch was set
/// that high by hand would make every claim of its batch fail and never be sent again; the backoff
/// is already at its cap long before (see `backoff`), so stopping the count changes nothing else.
const EPOCH_PLUS_ONE: &str = "CASE WHEN `epoch` IS NULL THEN 1 \
     WHEN `epoch` < 9223372036854775807 THEN `epoch` + 1 ELSE `epoch` END";

/// The first of the stream's column definitions (`sent`, from the start of the stream) that the
/// claim's `SELECT` (whose first columns are the same expressions) no longer returns alike.
fn changed_column(sent: &[BytesMut], selected: &[BytesMut]) -> Option<usize> {
    (0..sent.len()).find(|&i| selected.get(i) != sent.get(i))
}

/// Sends two statements in one write and reads both answers, handing the second's rows (at
/// most `second_rows`) to `each_row`.
async fn pipeline(
    backend: &mut Backend,
    deprecate_eof: bool,
    (first, second): (&str, &str),
    second_rows: usize,
    each_row: &mut (dyn FnMut(BytesMut) + Send),
) -> Result<(QueryOutcome, QueryOutcome), BatchError> {
    backend
        .send_queries(&[first, second])
        .await
        .map_err(BatchError::Backend)?;
    let a = backend
        .read_outcome(deprecate_eof)
        .await
        .map_err(BatchError::Backend)?;
    let b = backend
        .read_outcome_with(deprecate_eof, second_rows, each_row)
        .await
        .map_err(BatchError::Backend)?;
    Ok((a, b))
}

/// An answer that must be OK; an ERR rolls the claim back.
async fn expect_ok(
    backend: &mut Backend,
    deprecate_eof: bool,
    outcome: QueryOutcome,
) -> Result<(), BatchError> {
    match outcome {
        QueryOutcome::Ok { .. } => Ok(()),
        QueryOutcome::Err(err) => Err(rollback_after(backend, deprecate_eof, err).await),
        QueryOutcome::ResultSet { .. } => Err(BatchError::Backend(BackendError::Protocol)),
    }
}

async fn run(
    backend: &mut Backend,
    deprecate_eof: bool,
    sql: &str,
) -> Result<QueryOutcome, BatchError> {
    backend
        .query(sql, deprecate_eof)
        .await
        .map_err(BatchError::Backend)
}

/// Runs a statement that answers OK; an ERR rolls the claim back.
async fn exec(backend: &mut Backend, deprecate_eof: bool, sql: &str) -> Result<(), BatchError> {
    match run(backend, deprecate_eof, sql).await? {
        QueryOutcome::Ok { .. } => Ok(()),
        QueryOutcome::Err(err) => Err(rollback_after(backend, deprecate_eof, err).await),
        QueryOutcome::ResultSet { .. } => Err(BatchError::Backend(BackendError::Protocol)),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_epoch;

    #[test]
    fn epochs_parse_whatever_the_column_holds() {
        assert_eq!(parse_epoch("0"), 0);
        assert_eq!(parse_epoch("-3"), -3);
        assert_eq!(parse_epoch("9223372036854775807"), i64::MAX);
        // An unsigned bigint past i64: the most sends, not none.
        assert_eq!(parse_epoch("18446744073709551615"), i64::MAX);
        assert_eq!(parse_epoch("junk"), 0);
    }
}
