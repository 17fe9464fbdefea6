//! The session's side of message tables: answering the virtual statements (`STREAM`, `ACK`,
//! `SET workload`) and telling the engine when a relayed statement may have changed a message
//! table (new rows committed, DDL).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::warn;

use super::session::{Session, SessionEnd};
use crate::backend::QueryOutcome;
use crate::messaging::engine::Lookup;
use crate::messaging::manager::TableManager;
use crate::messaging::state;
use crate::messaging::stream::{self, StreamEnd};
use crate::messaging::table::quote_ident;
use crate::protocol::commands::{ER_NO_DB_ERROR, ER_WRONG_OBJECT};
use crate::protocol::packet::write_packet;
use crate::protocol::wire::{ok_packet, ErrorPacket};
use crate::sql::{Classification, Keyword, TableName, VirtualStatement};

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// Answers a statement the classifier marked virtual.
    pub(super) async fn serve_virtual(&mut self, sql: &[u8]) -> Result<(), SessionEnd> {
        let statement = match crate::sql::parse_virtual(sql) {
            Ok(s) => s,
            Err(e) => {
                return self
                    .reply_error(ErrorPacket::new(
                        crate::sql::SyntaxError::CODE,
                        crate::sql::SyntaxError::SQLSTATE,
                        e.message(),
                    ))
                    .await
            }
        };
        match statement {
            VirtualStatement::SetWorkload => {
                let ok = ok_packet(0, 0, self.relay.status, 0);
                write_packet(self.client.get_mut(), 1, &ok)
                    .await
                    .map_err(SessionEnd::Client)?;
                Ok(())
            }
            VirtualStatement::Stream { table } => self.stream(&table).await,
            VirtualStatement::Ack { table, ids } => self.ack(&table, &ids).await,
            VirtualStatement::ShowMessageTables => self.show_message_tables().await,
        }
    }

    /// Resolves a statement's table to a loaded message table, or answers the client with the
    /// reason it is not one (the server's own 1146 when it does not exist at all).
    async fn message_table(
        &mut self,
        table: &TableName,
    ) -> Result<Option<Arc<TableManager>>, SessionEnd> {
        let Some(schema) = table.schema.clone().or_else(|| self.current_db.clone()) else {
            self.reply_error(ErrorPacket::new(
                ER_NO_DB_ERROR,
                "3D000",
                "No database selected",
            ))
            .await?;
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
                        write_packet(self.client.get_mut(), 1, &err)
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

    async fn stream(&mut self, table: &TableName) -> Result<(), SessionEnd> {
        let Some(manager) = self.message_table(table).await? else {
            return Ok(());
        };
        let subscription = manager.subscribe();
        let deprecate_eof = self.deprecate_eof();
        let shutdown = self.ctx.shutdown.clone();
        match stream::serve(
            &mut self.client,
            &mut self.backend,
            deprecate_eof,
            subscription,
            &shutdown,
        )
        .await
        {
            StreamEnd::Refused => Ok(()),
            StreamEnd::Closed => Err(SessionEnd::Quit),
            StreamEnd::BackendLost(e, seq) => {
                // The session's error packet continues the stream's result set.
                self.relay.next_seq = seq;
                Err(SessionEnd::Backend(std::io::Error::other(e.to_string())))
            }
        }
    }

    /// `ACK t id, ...` becomes the same UPDATE as the Vitess SQL form, run on the client's own
    /// connection (so it takes part in the client's transaction) and answered by the server.
    async fn ack(&mut self, table: &TableName, ids: &[String]) -> Result<(), SessionEnd> {
        let Some(manager) = self.message_table(table).await? else {
            return Ok(());
        };
        let def = manager.definition();
        let sql = format!(
            "UPDATE {} SET `time_acked` = {}, `time_next` = NULL WHERE `id` IN ({}) AND {}",
            def.qualified(),
            state::now_ns(),
            ids.join(", "),
            state::UNACKED_SQL
        );
        self.send_statement(sql.as_bytes()).await?;
        let end = self.forward_results_holding_end().await?;
        // Counted before the client sees the OK: a scrape it makes afterwards includes it.
        if !self.relay.failed {
            manager.stats().record_acked(self.relay.affected_rows);
        }
        self.write_held_end(&end).await
    }

    /// After a relayed statement: collect the message tables it may have written, tell their
    /// managers once the writes are committed (never after a rollback), reload after DDL.
    pub(super) async fn after_relayed_statement(
        &mut self,
        sql: &[u8],
        classification: Classification,
    ) {
        let Some(engine) = self.ctx.engine.clone() else {
            return;
        };
        if classification.keyword == Keyword::Update {
            self.count_sql_ack(&engine, sql);
        }
        match classification.keyword {
            Keyword::Insert
            | Keyword::Replace
            | Keyword::Load
            | Keyword::Update
            | Keyword::Call
            | Keyword::With
                // While the binlog watcher follows, the committed rows reach the managers from
                // the binlog within milliseconds; a poll here would only repeat that work (and
                // under load it was most of the server's reads).
                if !engine.binlog_following() =>
            {
                for m in engine.tables_mentioned(sql) {
                    if !self.pending_notify.iter().any(|p| Arc::ptr_eq(p, &m)) {
                        self.pending_notify.push(m);
                    }
                }
            }
            keyword if keyword.is_ddl() && !self.relay.failed => {
                if let Err(e) = engine.reload().await {
                    warn!("reloading message tables after DDL failed: {e}");
                }
            }
            Keyword::Use if !self.relay.failed => {
                self.current_db = parse_use(&sql[classification.keyword_offset..]);
            }
            _ => {}
        }
        if !self.relay.in_transaction() && !self.pending_notify.is_empty() {
            let rolled_back = classification.keyword == Keyword::Rollback;
            for m in self.pending_notify.drain(..) {
                if !rolled_back {
                    m.request_poll();
                }
            }
        }
    }
}

/// The database named by `USE db` (backticks removed), if the statement is that simple.
fn parse_use(statement: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(statement).ok()?;
    let rest = text.get(3..)?.trim().trim_end_matches(';').trim();
    if let Some(quoted) = rest.strip_prefix('`') {
        let inner = quoted.strip_suffix('`')?;
        return Some(inner.replace("``", "`"));
    }
    (!rest.is_empty() && !rest.contains(char::is_whitespace)).then(|| rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::parse_use;

    #[test]
    fn use_statements() {
        assert_eq!(parse_use(b"USE test").as_deref(), Some("test"));
        assert_eq!(parse_use(b"use `my``db` ;").as_deref(), Some("my`db"));
        assert_eq!(parse_use(b"USE").as_deref(), None);
    }
}
