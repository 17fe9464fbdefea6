//! The session's side of the work-queue statements (MESSAGING.md §9-§10): `NACK`, `EXTEND` and
//! `REDRIVE` become plain statements on the client's own connection, like `ACK` (so they take
//! part in the client's transaction, and the server answers them: affected rows = rows
//! changed). What they change reaches the table's manager like any other write: from the
//! binlog, or by a poll once committed when the binlog is not followed.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Session, SessionEnd};
use crate::messaging::manager::TableManager;
use crate::messaging::state;
use crate::sql::{AckId, TableName};

/// Which statement moves `time_next`, for its counter.
#[derive(Clone, Copy)]
enum Move {
    Nack,
    Extend,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// `NACK t ids [DELAY n]`: the unacked, live messages among `ids` are due `delay_ns` from
    /// now (at once without a delay), for any stream; `epoch` is kept, so attempts still count.
    pub(super) async fn nack(
        &mut self,
        table: &TableName,
        ids: &[AckId],
        delay_ns: i64,
    ) -> Result<(), SessionEnd> {
        self.move_time_next(table, ids, delay_ns, Move::Nack).await
    }

    /// `EXTEND t ids BY n`: the unacked, live messages among `ids` are not due for `by_ns` from
    /// now. Under `vt_max_unacked` they still count as held by their stream, until then.
    pub(super) async fn extend(
        &mut self,
        table: &TableName,
        ids: &[AckId],
        by_ns: i64,
    ) -> Result<(), SessionEnd> {
        self.move_time_next(table, ids, by_ns, Move::Extend).await
    }

    /// `UPDATE t SET time_next = now + after WHERE id IN (...) AND unacked AND not dead`.
    async fn move_time_next(
        &mut self,
        table: &TableName,
        ids: &[AckId],
        after_ns: i64,
        which: Move,
    ) -> Result<(), SessionEnd> {
        let Some(manager) = self.message_table(table).await? else {
            return Ok(());
        };
        let def = manager.definition();
        let at = state::now_ns().saturating_add(after_ns);
        let mut sql = format!(
            "UPDATE {} SET `time_next` = {at} WHERE `id` IN (",
            def.by_primary_key()
        );
        if !self.push_id_list(&mut sql, &def, ids).await? {
            return Ok(());
        }
        sql.push_str(") AND ");
        sql.push_str(state::UNACKED_SQL);
        sql.push_str(" AND ");
        sql.push_str(state::NOT_DEAD_SQL);
        self.run_counted(&sql, &manager, |m, rows| match which {
            Move::Nack => m.stats().record_nacked(rows),
            Move::Extend => m.stats().record_extended(rows),
        })
        .await
    }

    /// `REDRIVE t [ids]`: dead messages (all, or those among `ids`) are due again at once with
    /// `epoch` 0.
    pub(super) async fn redrive(
        &mut self,
        table: &TableName,
        ids: &[AckId],
    ) -> Result<(), SessionEnd> {
        let Some(manager) = self.message_table(table).await? else {
            return Ok(());
        };
        let def = manager.definition();
        // Without ids the dead rows are found by `time_next` (the poller's index serves it);
        // with ids by primary key.
        let mut sql = format!(
            "UPDATE {} SET `time_next` = {}, `epoch` = 0 WHERE {} AND {}",
            if ids.is_empty() {
                def.qualified()
            } else {
                def.by_primary_key()
            },
            state::now_ns(),
            state::DEAD_SQL,
            state::UNACKED_SQL,
        );
        if !ids.is_empty() {
            sql.push_str(" AND `id` IN (");
            if !self.push_id_list(&mut sql, &def, ids).await? {
                return Ok(());
            }
            sql.push(')');
        }
        self.run_counted(&sql, &manager, |m, rows| m.stats().record_redriven(rows))
            .await
    }

    /// Runs `sql` on the client's connection, relaying the server's answer; its affected rows
    /// go to `count` before the client sees them. The manager learns of the change from the
    /// binlog, or, when that is not followed, by a poll once the change is committed.
    async fn run_counted(
        &mut self,
        sql: &str,
        manager: &Arc<TableManager>,
        count: impl FnOnce(&TableManager, u64),
    ) -> Result<(), SessionEnd> {
        self.send_statement(sql.as_bytes()).await?;
        let end = self.forward_results_holding_end().await?;
        if !self.relay.failed {
            count(manager, self.relay.affected_rows);
            let following = self
                .ctx
                .engine
                .as_ref()
                .is_some_and(|e| e.binlog_following());
            if !following {
                self.note_written(vec![manager.clone()]);
                self.notify_if_committed(false);
            }
        }
        self.write_held_end(&end).await
    }
}
