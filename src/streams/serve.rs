//! One `STREAM ... GROUP` on a client session: the result set's column definitions come from
//! the server (a `SELECT` of `event_id` and the columns on the session's own connection, so they
//! are exactly what a `SELECT` would send that session), then the group's batches as text rows,
//! until the client leaves, the proxy stops, `KILL QUERY`, or the group cannot go on.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::encode::{cell, Cell};
use super::engine::{Group, Mode};
use super::group::StreamId;
use super::reader::Event;
use crate::backend::{Backend, BackendError, QueryOutcome};
use crate::messaging::stream::StreamEnd;
use crate::messaging::table::quote_ident;
use crate::protocol::commands::{
    ER_NO_SUCH_TABLE, ER_QUERY_INTERRUPTED, ER_SERVER_SHUTDOWN, ER_UNKNOWN_ERROR,
};
use crate::protocol::packet::{encode_packet, write_packet, PacketReader};
use crate::protocol::wire::{self, put_lenenc_bytes, put_lenenc_int, ErrorPacket};
use mysql_common::constants::StatusFlags;

/// How long a stream's backend connection may sit idle before the proxy pings it.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(30);

/// What a stream sends: the group, its number in it, and the columns (as the table names them).
pub struct StreamSpec {
    pub group: Arc<Group>,
    pub stream: StreamId,
    pub columns: Vec<String>,
}

/// Serves the stream. The stream leaves its group however it ends.
#[allow(clippy::too_many_arguments)]
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketReader<S>,
    backend: &mut Backend,
    first_seq: u8,
    deprecate_eof: bool,
    spec: StreamSpec,
    shutdown: &CancellationToken,
    interrupted: &CancellationToken,
) -> StreamEnd {
    let end = run(
        client,
        backend,
        first_seq,
        deprecate_eof,
        &spec,
        shutdown,
        interrupted,
    )
    .await;
    spec.group.leave(spec.stream);
    end
}

async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketReader<S>,
    backend: &mut Backend,
    first_seq: u8,
    deprecate_eof: bool,
    spec: &StreamSpec,
    shutdown: &CancellationToken,
    interrupted: &CancellationToken,
) -> StreamEnd {
    let group = &spec.group;
    // A group that cannot go on (its position left the binlog) is refused at once, before the
    // result set begins: wait a moment for this proxy's first word on it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let changed = group.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        match group.mode() {
            Mode::Failed(why) | Mode::Gone(why) => {
                let err = ErrorPacket::new(ER_UNKNOWN_ERROR, "HY000", why);
                return match write_packet(client.get_mut(), first_seq, &err.encode(true)).await {
                    Ok(_) => StreamEnd::Refused,
                    Err(_) => StreamEnd::Closed,
                };
            }
            Mode::Serving | Mode::Waiting(Some(_)) => break,
            Mode::Starting | Mode::Behind(_) | Mode::Waiting(None) => {}
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = tokio::time::sleep_until(deadline) => break,
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
    let table = group.table();
    let list: Vec<String> = spec.columns.iter().map(|c| quote_ident(c)).collect();
    let sql = format!(
        "SELECT CAST(18446744073709551615 AS UNSIGNED) AS `event_id`, {} FROM {} LIMIT 0",
        list.join(", "),
        table.qualified()
    );
    let (columns, mut status) = match backend.query(&sql, deprecate_eof).await {
        Ok(QueryOutcome::ResultSet {
            columns, status, ..
        }) => (columns, status),
        Ok(QueryOutcome::Err(err)) => {
            let _ = write_packet(client.get_mut(), first_seq, &err).await;
            return StreamEnd::Refused;
        }
        Ok(QueryOutcome::Ok { .. }) => {
            return StreamEnd::BackendLost(BackendError::Protocol, first_seq)
        }
        Err(e) => return StreamEnd::BackendLost(e, first_seq),
    };
    // With autocommit off that SELECT began a transaction; end it so no metadata lock is held.
    if status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0 {
        match backend
            .query("ROLLBACK AND NO CHAIN NO RELEASE", deprecate_eof)
            .await
        {
            Ok(QueryOutcome::Ok { status: s, .. }) => status = s,
            Ok(_) => return StreamEnd::BackendLost(BackendError::Protocol, first_seq),
            Err(e) => return StreamEnd::BackendLost(e, first_seq),
        }
    }
    let mut out = BytesMut::new();
    let mut count = BytesMut::new();
    put_lenenc_int(&mut count, columns.len() as u64);
    let mut seq = encode_packet(&mut out, first_seq, &count);
    for c in &columns {
        seq = encode_packet(&mut out, seq, c);
    }
    if !deprecate_eof {
        let mut eof = vec![wire::EOF_HEADER, 0, 0];
        eof.extend_from_slice(&status.to_le_bytes());
        seq = encode_packet(&mut out, seq, &eof);
    }
    if write_all(client, &out).await.is_err() {
        return StreamEnd::Closed;
    }
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    keepalive.tick().await;
    loop {
        let changed = group.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        match group.mode() {
            Mode::Failed(why) | Mode::Gone(why) => {
                let (code, sqlstate) = if why.contains("was dropped") {
                    (ER_NO_SUCH_TABLE, "42S02")
                } else {
                    (ER_UNKNOWN_ERROR, "HY000")
                };
                let err = ErrorPacket::new(code, sqlstate, why);
                return end_with(client, seq, &err.encode(true)).await;
            }
            Mode::Serving | Mode::Starting | Mode::Behind(_) | Mode::Waiting(_) => {}
        }
        if let Some(batch) = group.try_batch(spec.stream) {
            keepalive.reset();
            let rows = match encode_batch(backend, deprecate_eof, spec, &batch, &mut seq).await {
                Ok(rows) => rows,
                Err(Encoded::Backend(e)) => return StreamEnd::BackendLost(e, seq),
                Err(Encoded::Refused(err)) => return end_with(client, seq, &err).await,
            };
            if let Err(e) = write_all(client, &rows).await {
                debug!("stream client left: {e}");
                return StreamEnd::Closed;
            }
            continue;
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let err = ErrorPacket::new(ER_SERVER_SHUTDOWN, "08S01", "msgproxy is shutting down; reconnect and STREAM again (unacked events are sent again)");
                let _ = write_packet(client.get_mut(), seq, &err.encode(true)).await;
                return StreamEnd::Closed;
            }
            _ = interrupted.cancelled() => {
                let err = ErrorPacket::new(ER_QUERY_INTERRUPTED, "70100", "Query execution was interrupted");
                if write_packet(client.get_mut(), seq, &err.encode(true)).await.is_err() {
                    return StreamEnd::Closed;
                }
                return StreamEnd::Interrupted;
            }
            _ = client.fill() => return StreamEnd::Closed,
            r = backend.conn.fill(), if backend.conn.buffered().is_empty() => {
                let e = match r {
                    Ok(0) => std::io::ErrorKind::UnexpectedEof.into(),
                    Ok(_) => std::io::Error::other("the backend sent a packet unprompted"),
                    Err(e) => e,
                };
                return StreamEnd::BackendLost(BackendError::Io(e), seq);
            }
            _ = keepalive.tick() => {
                if let Err(e) = backend.ping().await {
                    return StreamEnd::BackendLost(e, seq);
                }
            }
            _ = &mut changed => {}
            // A safety net: a change is always notified, but a missed one costs at most this.
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
    }
}

enum Encoded {
    Backend(BackendError),
    Refused(BytesMut),
}

/// The batch's rows as packets. `TIMESTAMP` values are shown in the session's time zone by the
/// server itself: one `SELECT FROM_UNIXTIME(...)` on the session's connection for the batch.
async fn encode_batch(
    backend: &mut Backend,
    deprecate_eof: bool,
    spec: &StreamSpec,
    batch: &[Arc<Event>],
    seq: &mut u8,
) -> Result<BytesMut, Encoded> {
    let table = spec.group.table();
    let mut rows: Vec<Vec<Cell>> = Vec::with_capacity(batch.len());
    let mut instants: Vec<String> = Vec::new();
    for event in batch {
        let mut row = Vec::with_capacity(spec.columns.len() + 1);
        row.push(Cell::Text(event.id.to_string().into_bytes()));
        for name in &spec.columns {
            let lower = name.to_lowercase();
            let index = event
                .columns
                .iter()
                .position(|c| c.name.to_lowercase() == lower);
            let value = match index {
                // A column added after the event was written: the event has no value for it.
                None => Cell::Null,
                Some(i) => {
                    let (Some(spec), Some(value)) = (event.columns.get(i), event.values.get(i))
                    else {
                        return Err(refused(format!("event {} lacks column {name}", event.id)));
                    };
                    cell(value, spec, table.labels.get(&lower).map(Vec::as_slice)).map_err(|e| {
                        refused(format!(
                            "column {name} of event {} cannot be sent: {e}",
                            event.id
                        ))
                    })?
                }
            };
            if let Cell::Timestamp(Some(t)) = &value {
                instants.push(t.clone());
            }
            row.push(value);
        }
        rows.push(row);
    }
    let shown = if instants.is_empty() {
        Vec::new()
    } else {
        session_times(backend, deprecate_eof, &instants).await?
    };
    let mut shown = shown.into_iter();
    let mut out = BytesMut::new();
    let mut payload = BytesMut::new();
    for row in rows {
        payload.clear();
        for value in row {
            match value {
                Cell::Null => payload.extend_from_slice(&[0xFB]),
                Cell::Text(t) => put_lenenc_bytes(&mut payload, &t),
                Cell::Timestamp(None) => put_lenenc_bytes(&mut payload, b"0000-00-00 00:00:00"),
                Cell::Timestamp(Some(_)) => match shown.next().flatten() {
                    Some(t) => put_lenenc_bytes(&mut payload, &t),
                    None => payload.extend_from_slice(&[0xFB]),
                },
            }
        }
        *seq = encode_packet(&mut out, *seq, &payload);
    }
    Ok(out)
}

fn refused(message: String) -> Encoded {
    Encoded::Refused(ErrorPacket::new(ER_UNKNOWN_ERROR, "HY000", message).encode(true))
}

/// The server's text for each instant (`seconds[.fraction]`) in the session's time zone.
async fn session_times(
    backend: &mut Backend,
    deprecate_eof: bool,
    instants: &[String],
) -> Result<Vec<Option<Vec<u8>>>, Encoded> {
    let exprs: Vec<String> = instants
        .iter()
        .map(|t| format!("FROM_UNIXTIME({t})"))
        .collect();
    let sql = format!("SELECT {}", exprs.join(", "));
    match backend.query(&sql, deprecate_eof).await {
        Ok(QueryOutcome::ResultSet { rows, .. }) => {
            let values = rows
                .first()
                .and_then(|row| wire::text_row_values(row))
                .map(|v| v.into_iter().map(|x| x.map(<[u8]>::to_vec)).collect())
                .unwrap_or_default();
            Ok(values)
        }
        Ok(QueryOutcome::Err(err)) => Err(Encoded::Refused(err)),
        Ok(QueryOutcome::Ok { .. }) => Err(Encoded::Backend(BackendError::Protocol)),
        Err(e) => Err(Encoded::Backend(e)),
    }
}

async fn end_with<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketReader<S>,
    seq: u8,
    err: &[u8],
) -> StreamEnd {
    match write_packet(client.get_mut(), seq, err).await {
        Ok(_) => StreamEnd::Failed,
        Err(_) => StreamEnd::Closed,
    }
}

async fn write_all<S: AsyncWrite + Unpin>(
    client: &mut PacketReader<S>,
    bytes: &[u8],
) -> std::io::Result<()> {
    let w = client.get_mut();
    w.write_all(bytes).await?;
    w.flush().await
}
