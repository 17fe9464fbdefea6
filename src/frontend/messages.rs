//! The session's side of message tables: answering the virtual statements (`STREAM`, `ACK`,
//! `SET workload`, ...). What relayed statements do to message tables is `table_writes`.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Session, SessionEnd};
use crate::backend::QueryOutcome;
use crate::messaging::engine::Lookup;
use crate::messaging::manager::TableManager;
use crate::messaging::state;
use crate::messaging::stream::{self, StreamEnd};
use crate::messaging::table::{hex_upper, quote_ident};
use crate::protocol::commands::{
    ER_CANT_DO_THIS_DURING_AN_TRANSACTION, ER_NO_DB_ERROR, ER_UNKNOWN_CHARACTER_SET,
    ER_UNKNOWN_ERROR, ER_WRONG_OBJECT,
};
use crate::protocol::packet::write_packet;
use crate::protocol::wire::{self, ok_packet, ErrorPacket};
use crate::sql::{AckId, Quoting, TableName, VirtualStatement};

/// The answer to a question the proxy asked the server on the session's connection.
pub(super) enum Asked {
    /// The one value (`None`: NULL).
    Value(Option<String>),
    /// An ERR payload for the client: the server's refusal (e.g. in an XA transaction's PREPARED
    /// state), or the proxy's own when the answer could not be read.
    Refused(bytes::BytesMut),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// How the session's server reads string literals now (MESSAGING.md §6: ids are literals, so
    /// the proxy must read them alike).
    pub(super) fn quoting(&self) -> Quoting {
        if self.relay.no_backslash_escapes() {
            Quoting::NO_BACKSLASH_ESCAPES
        } else {
            Quoting::DEFAULT
        }
    }

    /// Whether the server would run `sql`, a statement the classifier marked virtual: always,
    /// unless it is inside a version-gated executable comment (`/*M!999999 ACK t 1 */`), which
    /// the server skips when it is older (and MariaDB skips some MySQL versions too). Then the
    /// server is asked, by its own rule: `SELECT 0 /*M!999999 + 1 */`. If it would skip it, the
    /// statement is relayed and the server answers it as the empty statement it is.
    pub(super) async fn virtual_runs_here(&mut self, sql: &[u8]) -> Result<bool, SessionEnd> {
        let Some(marker) = crate::sql::version_gate(sql) else {
            return Ok(true);
        };
        // The marker is `/*!` or `/*M!` and ASCII digits.
        let marker = String::from_utf8_lossy(marker);
        Ok(matches!(
            self.ask_server(&format!("0 {marker} + 1 */")).await?,
            Asked::Value(Some(v)) if v == "1"
        ))
    }

    /// Answers a statement the classifier marked virtual.
    pub(super) async fn serve_virtual(&mut self, sql: &[u8]) -> Result<(), SessionEnd> {
        let statement = match crate::sql::parse_virtual_in(sql, self.quoting()) {
            Ok(s) => s,
            Err(e) => {
                // Event-stream statements (docs/STREAMS.md) have a grammar of their own, tried
                // only when the message-table grammar fails: a long message statement is read once.
                if let Some(parsed) = crate::sql::parse_stream_statement(sql, self.quoting()) {
                    return self.serve_stream_statement(parsed).await;
                }
                return self
                    .reply_error(ErrorPacket::new(
                        crate::sql::SyntaxError::CODE,
                        crate::sql::SyntaxError::SQLSTATE,
                        e.message(),
                    ))
                    .await;
            }
        };
        match statement {
            VirtualStatement::SetWorkload => {
                let ok = ok_packet(0, 0, self.relay.status, 0);
                write_packet(self.client.get_mut(), self.relay.next_seq, &ok)
                    .await
                    .map_err(SessionEnd::Client)?;
                Ok(())
            }
            VirtualStatement::Stream {
                table,
                columns,
                condition,
            } => self.stream(&table, columns, condition).await,
            VirtualStatement::Ack { table, ids } => self.ack(&table, &ids).await,
            VirtualStatement::ShowMessageTables => self.show_message_tables().await,
            VirtualStatement::Nack { table, ids, delay } => {
                self.nack(&table, &ids, delay.map_or(0, |d| d.nanos)).await
            }
            VirtualStatement::Extend { table, ids, by } => {
                self.extend(&table, &ids, by.nanos).await
            }
            VirtualStatement::Redrive { table, ids } => self.redrive(&table, &ids).await,
        }
    }

    /// The schema of a statement's table: its own, else the session's current database; `None`
    /// once the client has been answered why there is none (no database selected, or the
    /// server's refusal to say).
    pub(super) async fn table_schema(
        &mut self,
        table: &TableName,
    ) -> Result<Option<String>, SessionEnd> {
        let schema = match &table.schema {
            Some(schema) => Some(schema.clone()),
            None => match self.current_database().await? {
                Asked::Value(db) => db,
                Asked::Refused(err) => {
                    write_packet(self.client.get_mut(), self.relay.next_seq, &err)
                        .await
                        .map_err(SessionEnd::Client)?;
                    return Ok(None);
                }
            },
        };
        if schema.is_none() {
            self.reply_error(ErrorPacket::new(
                ER_NO_DB_ERROR,
                "3D000",
                "No database selected",
            ))
            .await?;
        }
        Ok(schema)
    }

    /// Resolves a statement's table to a loaded message table, or answers the client with the
    /// reason it is not one (the server's own 1146 when it does not exist at all).
    pub(super) async fn message_table(
        &mut self,
        table: &TableName,
    ) -> Result<Option<Arc<TableManager>>, SessionEnd> {
        let Some(schema) = self.table_schema(table).await? else {
            return Ok(None);
        };
        let Some(engine) = self.ctx.engine.clone() else {
            self.reply_error(ErrorPacket::new(
                ER_WRONG_OBJECT,
                "HY000",
                "message tables are not enabled in this msgproxy",
            ))
            .await?;
            return Ok(None);
        };
        let not_message_table = match engine.lookup(&schema, &table.name) {
            Lookup::Loaded(m) => return Ok(Some(m)),
            Lookup::Broken(why) => format!(
                "'{schema}.{}' is not a usable message table: {why}",
                table.name
            ),
            Lookup::NotMessageTable => {
                // Let the server say whether the table exists at all, in its own words.
                let probe = format!(
                    "SELECT 1 FROM {}.{} LIMIT 0",
                    quote_ident(&schema),
                    quote_ident(&table.name)
                );
                match self.backend.query(&probe, self.deprecate_eof()).await {
                    Ok(QueryOutcome::Err(err)) => {
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
                    "'{schema}.{}' is not a message table: its table comment must start with 'vitess_message' followed by its options",
                    table.name
                )
            }
        };
        self.reply_error(ErrorPacket::new(
            ER_WRONG_OBJECT,
            "HY000",
            not_message_table,
        ))
        .await?;
        Ok(None)
    }

    async fn stream(
        &mut self,
        table: &TableName,
        columns: Option<Vec<String>>,
        condition: Option<String>,
    ) -> Result<(), SessionEnd> {
        // Each claim is a transaction of its own on this connection: its START TRANSACTION
        // would silently commit the client's open one (MESSAGING.md §4: a message is sent only
        // once its INSERT commits, never if it rolls back).
        if self.relay.in_transaction() {
            return self
                .reply_error(ErrorPacket::new(
                    ER_CANT_DO_THIS_DURING_AN_TRANSACTION,
                    "25000",
                    "STREAM cannot run inside a transaction: it commits a transaction of its own for each batch it claims; COMMIT or ROLLBACK first",
                ))
                .await;
        }
        // A chosen column list streams `id` too: acks name messages by it (MESSAGING.md §12).
        if let Some(columns) = &columns {
            if !columns.iter().any(|c| c.eq_ignore_ascii_case("id")) {
                return self
                    .reply_error(ErrorPacket::new(
                        ER_WRONG_OBJECT,
                        "HY000",
                        "STREAM's column list must include id (acks name messages by it), e.g. STREAM id, payload FROM t",
                    ))
                    .await;
            }
        }
        let Some(manager) = self.message_table(table).await? else {
            return Ok(());
        };
        let feed = match condition {
            None => stream::Feed::Batches(manager.subscribe()),
            Some(condition) => stream::Feed::Filtered {
                watch: manager.watch(),
                condition,
            },
        };
        let deprecate_eof = self.deprecate_eof();
        let shutdown = self.ctx.shutdown.clone();
        let running = self
            .ctx
            .streams
            .start(u64::from(self.backend.greeting.connection_id));
        match stream::serve(
            &mut self.client,
            &mut self.backend,
            self.relay.next_seq,
            deprecate_eof,
            feed,
            columns,
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
                // The session's error packet continues the stream's result set.
                self.relay.next_seq = seq;
                Err(SessionEnd::Backend(std::io::Error::other(e.to_string())))
            }
        }
    }

    /// The session's current database: the one the proxy is sure of, or else the server's
    /// answer to `SELECT DATABASE()` on the session's own connection (kept until something may
    /// change it again).
    async fn current_database(&mut self) -> Result<Asked, SessionEnd> {
        if let Some(db) = self.tracker.current_db().known() {
            return Ok(Asked::Value(db.map(str::to_string)));
        }
        let asked = self.ask_server("DATABASE()").await?;
        if let Asked::Value(db) = &asked {
            self.tracker.learned_db(db.clone());
        }
        Ok(asked)
    }

    /// Asks the server for the text value of `expr` on the session's connection, in a form no
    /// `character_set_results` can garble (hex of its utf8mb4 bytes).
    pub(super) async fn ask_server(&mut self, expr: &str) -> Result<Asked, SessionEnd> {
        let sql = format!("SELECT HEX(CONVERT({expr} USING utf8mb4))");
        let outcome = match self.backend.query(&sql, self.deprecate_eof()).await {
            Ok(outcome) => outcome,
            Err(e) => return Err(SessionEnd::Backend(std::io::Error::other(e.to_string()))),
        };
        let value = match outcome {
            QueryOutcome::Err(err) => return Ok(Asked::Refused(err)),
            QueryOutcome::ResultSet { rows, .. } => match rows.as_slice() {
                [row] => match wire::text_row_values(row).as_deref() {
                    Some([None]) => Some(None),
                    Some([Some(hex)]) => unhex(hex)
                        .and_then(|bytes| String::from_utf8(bytes).ok())
                        .map(Some),
                    _ => None,
                },
                _ => None,
            },
            QueryOutcome::Ok { .. } => None,
        };
        Ok(match value {
            Some(value) => Asked::Value(value),
            None => Asked::Refused(
                ErrorPacket::new(
                    ER_UNKNOWN_ERROR,
                    "HY000",
                    format!(
                        "msgproxy could not read {expr} from the server's answer; name the table with its database (ACK db.t ...) or write ids as numbers or X'..' literals"
                    ),
                )
                .encode(true),
            ),
        })
    }

    /// `ACK t id, ...` becomes the same UPDATE as the Vitess SQL form, run on the client's own
    /// connection (so it takes part in the client's transaction) and answered by the server.
    /// Numbers go into the `IN (...)` list as written; a quoted id as its value re-rendered by
    /// [`MessageTable::quoted_id_literal`](crate::messaging::table::MessageTable::quoted_id_literal),
    /// which no `sql_mode` reads differently — so an id can never become SQL.
    async fn ack(&mut self, table: &TableName, ids: &[AckId]) -> Result<(), SessionEnd> {
        let Some(manager) = self.message_table(table).await? else {
            return Ok(());
        };
        let def = manager.definition();
        // Written straight into the statement: an ACK of millions of ids (up to 32 MiB) would
        // otherwise hold each id twice more, as a string of its own and in a joined list.
        // With `vt_purge_after=0` the ack deletes (MESSAGING.md §13): one row write less, and
        // the deleted rows are the ones newly acked, so affected rows mean the same.
        let mut sql = if def.options.purge_after.is_zero() {
            // The multi-table form, since only it takes the index hint (see `by_primary_key`).
            format!(
                "DELETE {} FROM {} WHERE `id` IN (",
                def.qualified(),
                def.by_primary_key()
            )
        } else {
            format!(
                "UPDATE {} SET `time_acked` = {}, `time_next` = NULL WHERE `id` IN (",
                def.by_primary_key(),
                state::now_ns(),
            )
        };
        if !self.push_id_list(&mut sql, &def, ids).await? {
            return Ok(());
        }
        sql.push_str(") AND ");
        sql.push_str(state::UNACKED_SQL);
        let end = self.run_retrying_conflicts(sql.as_bytes()).await?;
        // Counted before the client sees the OK: a scrape it makes afterwards includes it.
        if !self.relay.failed {
            manager.stats().record_acked(self.relay.affected_rows);
            // FIFO groups (§11): the next message of a group may be the head now; without the
            // binlog only a poll tells.
            if def.group_column.is_some()
                && !self
                    .ctx
                    .engine
                    .as_ref()
                    .is_some_and(|e| e.binlog_following())
            {
                self.note_written(vec![manager.clone()]);
                self.notify_if_committed(false);
            }
        }
        self.write_held_end(&end).await
    }

    /// Appends `ids` to `sql` as a comma-separated list of literals of `def`'s id column (see
    /// [`Session::ack`]). Numbers go in as written; a quoted id as its value re-rendered by
    /// [`MessageTable::quoted_id_literal`](crate::messaging::table::MessageTable::quoted_id_literal),
    /// which no `sql_mode` reads differently — so an id can never become SQL. `false`: the
    /// client was answered with an error instead.
    pub(super) async fn push_id_list(
        &mut self,
        sql: &mut String,
        def: &crate::messaging::table::MessageTable,
        ids: &[AckId],
    ) -> Result<bool, SessionEnd> {
        // The bytes of a non-ASCII string are in the client's character set, which only the
        // server knows for sure (SET NAMES): ask it, for such ids only.
        let non_ascii = ids
            .iter()
            .any(|id| matches!(id, AckId::String { value, .. } if !value.is_ascii()));
        let client_charset = if non_ascii {
            match self.ask_server("@@character_set_client").await? {
                Asked::Value(cs) => cs,
                Asked::Refused(err) => {
                    write_packet(self.client.get_mut(), self.relay.next_seq, &err)
                        .await
                        .map_err(SessionEnd::Client)?;
                    return Ok(false);
                }
            }
        } else {
            None
        };
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            let literal = match id {
                AckId::Literal(written) => {
                    sql.push_str(written);
                    continue;
                }
                AckId::String { value, .. } => {
                    def.quoted_id_literal(value, client_charset.as_deref())
                }
                // The server reads `_charset X'..'` as it read the client's `_charset'..'`.
                AckId::Introduced { charset, value, .. } => {
                    Some(format!("_{charset} X'{}'", hex_upper(value)))
                }
            };
            let Some(literal) = literal else {
                let cs = client_charset.as_deref().unwrap_or_default();
                self.reply_error(ErrorPacket::new(
                    ER_UNKNOWN_CHARACTER_SET,
                    "42000",
                    format!("Unknown character set: '{cs}': msgproxy cannot name quoted ids in it; write them as X'..' literals"),
                ))
                .await?;
                return Ok(false);
            };
            sql.push_str(&literal);
        }
        Ok(true)
    }
}

/// The bytes that upper- or lower-case hex digits in pairs stand for.
fn unhex(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    hex.chunks_exact(2)
        .map(|pair| {
            let digits = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(digits, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::unhex;

    #[test]
    fn unhex_reads_what_hex_writes() {
        assert_eq!(unhex(b"74657374").as_deref(), Some(&b"test"[..]));
        assert_eq!(
            unhex(b"C3A9c3a9").as_deref(),
            Some(&[0xC3, 0xA9, 0xC3, 0xA9][..])
        );
        assert_eq!(unhex(b"").as_deref(), Some(&b""[..]));
        for bad in [&b"7"[..], b"7G", b"+1", b"\xff\xfe", b"0 "] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
    }
}
