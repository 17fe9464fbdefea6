//! What relayed statements did to message tables, for the message engine: the tables a
//! statement (or a prepared one, executed) may have written are polled once its transaction
//! commits (while the engine polls instead of following the binlog), DDL reloads what it may
//! have changed before the client sees its OK, and acks made with the Vitess SQL form (`UPDATE t
//! SET time_acked = ...`) are counted for the table's metrics. The session's side of what to
//! remember is `tracker`; this file asks the engine.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::warn;

use super::session::Session;
use crate::messaging::engine::Engine;
use crate::messaging::manager::TableManager;
use crate::sql::{Classification, Keyword};

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
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
        // While the binlog watcher follows, the committed rows reach the managers from the binlog
        // within milliseconds; a poll here would only repeat that work (and under load it was
        // most of the server's reads).
        let polling = !engine.binlog_following();
        match classification.keyword {
            keyword if polling && may_write(keyword) => {
                let written = engine.tables_mentioned(sql);
                self.note_written(written);
            }
            // Several statements in one query (`SET @a = 1; INSERT ...`): any of them may write.
            _ if polling && self.tracker.may_be_several(sql) => {
                let written = engine.tables_mentioned(sql);
                self.note_written(written);
            }
            Keyword::Other if polling && !self.relay.failed => {
                let verb = first_word(sql, classification.keyword_offset);
                if verb.eq_ignore_ascii_case(b"prepare") {
                    self.tracker
                        .prepared_sql_writes(engine.tables_mentioned(sql));
                } else if verb.eq_ignore_ascii_case(b"execute") {
                    // `EXECUTE IMMEDIATE 'INSERT ...'` names its tables; `EXECUTE s` may run any
                    // statement this session prepared.
                    let mut written = engine.tables_mentioned(sql);
                    written.extend(self.tracker.sql_prepared_writes().iter().cloned());
                    self.note_written(written);
                }
            }
            // A query of several statements that failed may have run its DDL before the error.
            keyword
                if crate::sql::is_ddl(keyword, sql)
                    && (!self.relay.failed || self.tracker.may_be_several(sql)) =>
            {
                self.reload_after_ddl(&engine, sql).await;
            }
            // The server has accepted the KILL (the user may kill that connection's statement):
            // a stream on that connection through this proxy ends as the statement would.
            Keyword::Kill if !self.relay.failed => {
                if let Some(connection) = crate::sql::kill_query_target(sql) {
                    self.ctx.streams.interrupt(connection);
                }
            }
            _ => {}
        }
        self.notify_if_committed(classification.keyword == Keyword::Rollback);
    }

    /// After a DDL statement succeeded, before the client sees its OK: reloads what it may have
    /// changed, so a message table it made (or altered, or dropped) is usable (or gone) the
    /// moment the client is answered. DDL on temporary tables, and on tables that neither are
    /// nor may become message tables, costs a scan of its text and nothing else; otherwise the
    /// tables it names are read by name. Only a statement the proxy cannot follow (or one whose
    /// unqualified names it cannot place: the session's database unknown) reads the catalog.
    /// The session's own connection is not used: a query there would clear the DDL's warnings.
    async fn reload_after_ddl(&self, engine: &Arc<Engine>, sql: &[u8]) {
        use crate::messaging::after_ddl;
        use crate::sql::{ddl_effect, DdlEffect};
        let effect = if self.tracker.may_be_several(sql) {
            DdlEffect::Unknown
        } else {
            ddl_effect(sql, self.quoting())
        };
        let current = self.tracker.current_db().known().flatten();
        let plan = after_ddl::plan(engine, sql, effect, current);
        if let Err(e) = after_ddl::reload(engine, plan).await {
            warn!("reloading message tables after DDL failed: {e}");
        }
    }

    /// After a `COM_STMT_PREPARE`: while polling, remember which message tables the statement
    /// may write, by the id the server gave it.
    pub(super) fn after_prepared(&mut self, sql: &[u8], keyword: Keyword) {
        let (Some(engine), Some(id)) = (self.ctx.engine.clone(), self.relay.prepared_statement)
        else {
            return;
        };
        if engine.binlog_following() || !may_write(keyword) {
            return;
        }
        self.tracker
            .prepared_writes(id, engine.tables_mentioned(sql));
    }

    /// After a `COM_STMT_EXECUTE`: the tables its statement may have written are polled once
    /// they are committed, as after a text `INSERT`.
    pub(super) fn after_executed_prepared(&mut self, id: Option<u32>) {
        let written = self.tracker.written_by(id);
        self.note_written(written);
        self.notify_if_committed(false);
    }

    /// Adds tables to those this session's open transaction may have written.
    pub(super) fn note_written(&mut self, written: Vec<Arc<TableManager>>) {
        self.tracker.note_written(written);
    }

    /// Once no transaction is open, asks the managers of the tables written to poll (unless the
    /// transaction rolled back).
    pub(super) fn notify_if_committed(&mut self, rolled_back: bool) {
        let in_transaction = self.relay.in_transaction();
        for m in self.tracker.committed(in_transaction, rolled_back) {
            m.request_poll();
        }
    }

    /// After a relayed `UPDATE`: when it names exactly one message table and its `time_acked`
    /// column (the Vitess SQL ack), its affected rows count as acks of that table. A statement
    /// that names two message tables is not counted (which table's rows?), nor one inside a
    /// transaction that is later rolled back (it is counted when it succeeds).
    fn count_sql_ack(&self, engine: &Engine, sql: &[u8]) {
        if self.relay.failed || self.relay.affected_rows == 0 {
            return;
        }
        if !crate::sql::names_identifier(sql, b"time_acked") {
            return;
        }
        let mut tables = engine.tables_mentioned(sql);
        tables.retain(|m| crate::sql::names_identifier(sql, m.definition().name.as_bytes()));
        if let [table] = tables.as_slice() {
            table.stats().record_acked(self.relay.affected_rows);
        }
    }
}

/// Statements that may insert rows (or, `UPDATE`, reschedule them).
fn may_write(keyword: Keyword) -> bool {
    matches!(
        keyword,
        Keyword::Insert
            | Keyword::Replace
            | Keyword::Load
            | Keyword::Update
            | Keyword::Call
            | Keyword::With
    )
}

/// The word at `offset` (the classifier's first keyword), for keywords it does not name.
fn first_word(sql: &[u8], offset: usize) -> &[u8] {
    let rest = sql.get(offset..).unwrap_or_default();
    let len = rest
        .iter()
        .position(|b| !b.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    &rest[..len]
}
