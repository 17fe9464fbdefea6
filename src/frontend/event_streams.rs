//! The session's side of event streams (docs/STREAMS.md): `STREAM ... GROUP`, `ACK ... GROUP`,
//! `SEEK`, `DROP GROUP` and `SHOW STREAM GROUPS`, answered with the stream engine
//! (`crate::streams`). Names resolve as for message tables: an unqualified table in the
//! session's current database.

use std::fmt::Write;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::messages::Asked;
use super::ops::text;
use super::session::{Session, SessionEnd};
use crate::messaging::stream::StreamEnd;
use crate::messaging::table::quote_ident;
use crate::protocol::commands::{
    ER_BAD_FIELD_ERROR, ER_CANT_DO_THIS_DURING_AN_TRANSACTION, ER_WRONG_OBJECT,
};
use crate::protocol::packet::write_packet;
use crate::protocol::wire::{ok_packet, ErrorPacket};
use crate::relay::ResponseKind;
use crate::sql::{StartAt, StreamStatement, StreamStatementError, TableName};
use crate::streams::engine::{
    GroupInfo, Outcome, StreamEngine, StreamError, ACK_ANSWER_WAIT, SEEK_ANSWER_WAIT,
};
use crate::streams::locate::Target;
use crate::streams::registry::{StreamLookup, StreamTable};
use crate::streams::serve::{self, StreamSpec};
use crate::streams::store::GroupKey;

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    pub(super) async fn serve_stream_statement(
        &mut self,
        parsed: Result<StreamStatement, StreamStatementError>,
    ) -> Result<(), SessionEnd> {
        let statement = match parsed {
            Ok(s) => s,
            Err(e) => {
                return self
                    .reply_error(ErrorPacket::new(e.code, e.sqlstate, e.message))
                    .await
            }
        };
        let Some(engine) = self.ctx.stream_engine.clone() else {
            return self
                .reply_error(ErrorPacket::new(
                    ER_WRONG_OBJECT,
                    "HY000",
                    "event streams are not enabled in this msgproxy",
                ))
                .await;
        };
        match statement {
            StreamStatement::Stream {
                columns,
                table,
                group,
                start,
                filter,
            } => {
                // The stream's first statement (its column definitions) would take the table's
                // metadata lock inside the client's transaction and hold it for as long as the
                // stream runs, and ending that transaction is not the stream's to do.
                if self.relay.in_transaction() {
                    return self
                        .reply_error(ErrorPacket::new(
                            ER_CANT_DO_THIS_DURING_AN_TRANSACTION,
                            "25000",
                            "STREAM ... GROUP cannot run inside a transaction: COMMIT or ROLLBACK first",
                        ))
                        .await;
                }
                let Some(def) = self.stream_table(&engine, &table).await? else {
                    return Ok(());
                };
                let columns = match columns {
                    None => def.columns.clone(),
                    Some(list) => {
                        let mut named = Vec::with_capacity(list.len());
                        for c in list {
                            match def.column(&c) {
                                Some(found) => named.push(found.to_owned()),
                                None => return self.unknown_column(&c, "field list").await,
                            }
                        }
                        named
                    }
                };
                if let Some(f) = &filter {
                    for c in f.columns() {
                        if def.column(&c).is_none() {
                            return self.unknown_column(&c, "where clause").await;
                        }
                    }
                }
                let Some(target) = self.target(start.unwrap_or(StartAt::Latest)).await? else {
                    return Ok(());
                };
                let key = key_of(&def, group);
                let (group, stream) = match engine.join(key, def, filter, target).await {
                    Ok(joined) => joined,
                    Err(e) => return self.stream_error(e).await,
                };
                self.serve_group_stream(StreamSpec {
                    group,
                    stream,
                    columns,
                })
                .await
            }
            StreamStatement::Ack { table, group, ids } => {
                let Some(def) = self.stream_table(&engine, &table).await? else {
                    return Ok(());
                };
                match engine.ack(&key_of(&def, group), &ids).await {
                    Ok(Outcome::Done(n)) => self.reply_ok(n).await,
                    Ok(Outcome::Queued { owner }) => {
                        self.reply_queued(&owner, queued_warning("ACK", ACK_ANSWER_WAIT))
                            .await
                    }
                    Err(e) => self.stream_error(e).await,
                }
            }
            StreamStatement::Seek { table, group, to } => {
                let Some(def) = self.stream_table(&engine, &table).await? else {
                    return Ok(());
                };
                let Some(target) = self.target(to).await? else {
                    return Ok(());
                };
                match engine.seek(&key_of(&def, group), target).await {
                    Ok(Outcome::Done(_)) => self.reply_ok(0).await,
                    Ok(Outcome::Queued { owner }) => {
                        self.reply_queued(&owner, queued_warning("SEEK", SEEK_ANSWER_WAIT))
                            .await
                    }
                    Err(e) => self.stream_error(e).await,
                }
            }
            StreamStatement::DropGroup { table, group } => {
                let Some(def) = self.stream_table(&engine, &table).await? else {
                    return Ok(());
                };
                match engine.drop_group(&key_of(&def, group)).await {
                    Ok(existed) => self.reply_ok(u64::from(existed)).await,
                    Err(e) => self.stream_error(e).await,
                }
            }
            StreamStatement::ShowGroups => match engine.show().await {
                Ok(groups) => {
                    let sql = show_stream_groups_sql(&groups);
                    self.relay_statement(sql.as_bytes(), ResponseKind::Results)
                        .await
                }
                Err(e) => self.stream_error(e).await,
            },
        }
    }

    async fn serve_group_stream(&mut self, spec: StreamSpec) -> Result<(), SessionEnd> {
        let deprecate_eof = self.deprecate_eof();
        let shutdown = self.ctx.shutdown.clone();
        let running = self
            .ctx
            .streams
            .start(u64::from(self.backend.greeting.connection_id));
        match serve::serve(
            &mut self.client,
            &mut self.backend,
            self.relay.next_seq,
            deprecate_eof,
            spec,
            &shutdown,
            &running.interrupted,
        )
        .await
        {
            StreamEnd::Refused | StreamEnd::Interrupted | StreamEnd::Failed => Ok(()),
            StreamEnd::Closed => {
                // Mid-stream: whatever the stream's connection was doing is not known to be over.
                self.tracker.mark_unresettable();
                Err(SessionEnd::Quit)
            }
            StreamEnd::BackendLost(e, seq) => {
                self.relay.next_seq = seq;
                Err(SessionEnd::Backend(std::io::Error::other(e.to_string())))
            }
        }
    }

    /// The statement's table as a loaded stream table, or the client told why not (the
    /// server's own 1146 when it does not exist at all).
    async fn stream_table(
        &mut self,
        engine: &Arc<StreamEngine>,
        table: &TableName,
    ) -> Result<Option<Arc<StreamTable>>, SessionEnd> {
        let Some(schema) = self.table_schema(table).await? else {
            return Ok(None);
        };
        let why = match engine.lookup(&schema, &table.name).await {
            StreamLookup::Loaded(def) => return Ok(Some(def)),
            StreamLookup::Broken(why) => why,
            StreamLookup::NotStreamTable => {
                let probe = format!(
                    "SELECT 1 FROM {}.{} LIMIT 0",
                    quote_ident(&schema),
                    quote_ident(&table.name)
                );
                match self.backend.query(&probe, self.deprecate_eof()).await {
                    Ok(crate::backend::QueryOutcome::Err(err)) => {
                        write_packet(self.client.get_mut(), self.relay.next_seq, &err)
                            .await
                            .map_err(SessionEnd::Client)?;
                        return Ok(None);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        return Err(SessionEnd::Backend(std::io::Error::other(e.to_string())))
                    }
                }
                format!(
                    "'{schema}.{}' is not an event-stream table: its table comment must start with 'msgproxy_stream' (docs/STREAMS.md)",
                    table.name
                )
            }
        };
        self.reply_error(ErrorPacket::new(ER_WRONG_OBJECT, "HY000", why))
            .await?;
        Ok(None)
    }

    /// A `START`/`SEEK` position with its timestamp read in the session's time zone, or the
    /// client told that the timestamp is not one.
    async fn target(&mut self, at: StartAt) -> Result<Option<Target>, SessionEnd> {
        Ok(Some(match at {
            StartAt::Latest => Target::Latest,
            StartAt::Earliest => Target::Earliest,
            StartAt::Event(n) => Target::Event(n),
            StartAt::Timestamp(ts) => {
                let hex: String = ts.bytes().map(|b| format!("{b:02X}")).collect();
                let expr = format!("UNIX_TIMESTAMP(CONVERT(X'{hex}' USING utf8mb4))");
                match self.ask_server(&expr).await? {
                    Asked::Value(Some(v)) => match v.parse::<f64>() {
                        Ok(secs) if secs >= 0.0 => Target::Timestamp(secs.floor() as u64),
                        _ => return self.bad_timestamp(&ts).await.map(|()| None),
                    },
                    Asked::Value(None) => return self.bad_timestamp(&ts).await.map(|()| None),
                    Asked::Refused(err) => {
                        write_packet(self.client.get_mut(), self.relay.next_seq, &err)
                            .await
                            .map_err(SessionEnd::Client)?;
                        return Ok(None);
                    }
                }
            }
        }))
    }

    async fn bad_timestamp(&mut self, ts: &str) -> Result<(), SessionEnd> {
        self.reply_error(ErrorPacket::new(
            crate::protocol::commands::ER_WRONG_ARGUMENTS,
            "HY000",
            format!("'{ts}' is not a timestamp the server reads (write 'YYYY-MM-DD hh:mm:ss', in the session's time zone)"),
        ))
        .await
    }

    async fn unknown_column(&mut self, column: &str, place: &str) -> Result<(), SessionEnd> {
        self.reply_error(ErrorPacket::new(
            ER_BAD_FIELD_ERROR,
            "42S22",
            format!("Unknown column '{column}' in '{place}'"),
        ))
        .await
    }

    async fn stream_error(&mut self, e: StreamError) -> Result<(), SessionEnd> {
        self.reply_error(ErrorPacket::new(e.code, e.sqlstate, e.message))
            .await
    }

    async fn reply_ok(&mut self, affected: u64) -> Result<(), SessionEnd> {
        self.reply_ok_warned(affected, 0).await
    }

    async fn reply_ok_warned(&mut self, affected: u64, warnings: u16) -> Result<(), SessionEnd> {
        let ok = ok_packet(affected, 0, self.relay.status, warnings);
        write_packet(self.client.get_mut(), self.relay.next_seq, &ok)
            .await
            .map_err(SessionEnd::Client)?;
        Ok(())
    }

    /// An `ACK` or `SEEK` queued for the proxy `owner` serving the group, which did not answer
    /// in time: OK with 0 affected rows and the `warning` (a `SIGNAL`, [`queued_warning`]).
    /// `SHOW WARNINGS` goes to the session's server, so the warning is raised there (a `SIGNAL`
    /// of class 01 is a warning, not an error; it replaces the warnings of the session's
    /// previous statement, as any statement's would).
    async fn reply_queued(&mut self, owner: &str, warning: String) -> Result<(), SessionEnd> {
        tracing::info!(
            "a statement through this proxy was queued for {owner}, which did not answer"
        );
        match self.backend.query(&warning, self.deprecate_eof()).await {
            Ok(crate::backend::QueryOutcome::Ok { .. }) => self.reply_ok_warned(0, 1).await,
            // The server would not raise it: the answer still says nothing was acked yet.
            Ok(_) => self.reply_ok(0).await,
            Err(e) => Err(SessionEnd::Backend(std::io::Error::other(e.to_string()))),
        }
    }
}

/// The `SIGNAL` that leaves the warning of a queued `statement` (`ACK`, `SEEK`) on the
/// session's server. Its text names no client input (the statement named the group) and stays
/// within the 128 characters MySQL allows a condition's `MESSAGE_TEXT`.
fn queued_warning(statement: &str, waited: std::time::Duration) -> String {
    format!(
        "SIGNAL SQLSTATE '01000' SET MESSAGE_TEXT = '{statement} queued: the msgproxy serving the group did not answer within {} ms; it or its successor applies it', MYSQL_ERRNO = {}",
        waited.as_millis(),
        crate::protocol::commands::ER_UNKNOWN_ERROR
    )
}

fn key_of(def: &StreamTable, group: String) -> GroupKey {
    GroupKey {
        schema: def.schema.clone(),
        table: def.name.clone(),
        group,
    }
}

/// The columns of `SHOW STREAM GROUPS`, with typed placeholders (as `SHOW MESSAGE TABLES`).
const COLUMNS: [(&str, &str); 15] = [
    ("Schema", "CAST('' AS CHAR(64) CHARACTER SET utf8mb4)"),
    ("Table", "CAST('' AS CHAR(64) CHARACTER SET utf8mb4)"),
    ("Group", "CAST('' AS CHAR(255) CHARACTER SET utf8mb4)"),
    ("Filter", "CAST('' AS CHAR(1024) CHARACTER SET utf8mb4)"),
    ("Position", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Behind", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Oldest_unread_age", "CAST(0 AS DECIMAL(20,3))"),
    ("In_flight", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Streams", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Served_by", "CAST('' AS CHAR(255) CHARACTER SET utf8mb4)"),
    ("Status", "CAST('' AS CHAR(1024) CHARACTER SET utf8mb4)"),
    ("Sent", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Acked", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Redelivered", "CAST(18446744073709551615 AS UNSIGNED)"),
    (
        "Resume_from",
        "CAST('' AS CHAR(1024) CHARACTER SET utf8mb4)",
    ),
];

fn show_stream_groups_sql(groups: &[GroupInfo]) -> String {
    let count = |n: u64| format!("CAST({n} AS UNSIGNED)");
    let mut sql = String::from("SELECT ");
    for (i, (name, placeholder)) in COLUMNS.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        let _ = write!(sql, "{placeholder} AS `{name}`");
    }
    sql.push_str(" FROM DUAL WHERE FALSE");
    for g in groups {
        let age = g
            .oldest_age
            .map_or("NULL".to_owned(), |a| format!("{a:.3}"));
        let _ = write!(
            sql,
            " UNION ALL SELECT {}, {}, {}, {}, {}, {}, {age}, {}, {}, {}, {}, {}, {}, {}, {}",
            text(&g.key.schema),
            text(&g.key.table),
            text(&g.key.group),
            text(&g.filter),
            count(g.position),
            count(g.behind),
            count(g.in_flight),
            count(g.streams),
            g.serving.as_deref().map_or("NULL".to_owned(), text),
            text(&g.status),
            count(g.sent),
            count(g.acked),
            count(g.redelivered),
            text(&g.resume_from),
        );
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queued_warnings_fit_a_condition_message() {
        for (statement, waited) in [("ACK", ACK_ANSWER_WAIT), ("SEEK", SEEK_ANSWER_WAIT)] {
            let sql = queued_warning(statement, waited);
            let text = sql
                .split_once("MESSAGE_TEXT = '")
                .and_then(|(_, rest)| rest.split_once('\''))
                .map(|(text, _)| text)
                .unwrap_or_default();
            assert!(text.starts_with(&format!("{statement} queued")), "{sql}");
            assert!(text.chars().count() <= 128, "{text}");
            assert!(sql.starts_with("SIGNAL SQLSTATE '01000'"), "{sql}");
        }
    }
}
