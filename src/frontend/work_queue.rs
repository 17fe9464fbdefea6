//! The session's side of the work-queue statements (MESSAGING.md §9-§10): `NACK`, `EXTEND` and
//! `REDRIVE` become plain statements on the client's own connection, like `ACK` (so they take
//! part in the client's transaction, and the server answers them: affected rows = rows
//! changed). What they change reaches the table's manager like any other write: from the
//! binlog, or by a poll once committed when the binlog is not followed.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Session, SessionEnd};
use crate::backend::QueryOutcome;
use crate::messaging::dead_letter;
use crate::messaging::manager::TableManager;
use crate::messaging::state;
use crate::protocol::packet::write_packet;
use crate::protocol::wire::ok_packet;
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
    /// `epoch` 0 — in place, or moved back from the `vt_dead_letter` table.
    pub(super) async fn redrive(
        &mut self,
        table: &TableName,
        ids: &[AckId],
    ) -> Result<(), SessionEnd> {
        let Some(manager) = self.message_table(table).await? else {
            return Ok(());
        };
        let def = manager.definition();
        let mut list = String::new();
        if !ids.is_empty() && !self.push_id_list(&mut list, &def, ids).await? {
            return Ok(());
        }
        let list = (!ids.is_empty()).then_some(list.as_str());
        let now = state::now_ns();
        let Some(dl) = &def.dead_letter else {
            let sql = dead_letter::redrive_in_place(&def, list, now);
            return self
                .run_counted(&sql, &manager, |m, rows| m.stats().record_redriven(rows))
                .await;
        };
        let [insert, delete] = dead_letter::redrive_moved(&def, dl, list, now);
        // Both or neither: in the client's transaction when one is open, else in one of its own.
        let own = !self.relay.in_transaction();
        let mut steps: Vec<&str> = Vec::with_capacity(4);
        if own {
            steps.push("START TRANSACTION");
        }
        steps.extend([insert.as_str(), delete.as_str()]);
        if own {
            steps.push("COMMIT");
        }
        let deprecate_eof = self.deprecate_eof();
        let mut redriven = 0;
        let mut status = self.relay.status;
        let mut retries = 0;
        let mut i = 0;
        while let Some(step) = steps.get(i) {
            i += 1;
            match self.backend.query(step, deprecate_eof).await {
                Ok(QueryOutcome::Ok {
                    affected_rows,
                    status: s,
                }) => {
                    if *step == insert {
                        redriven = affected_rows;
                    }
                    status = s;
                }
                Ok(QueryOutcome::Err(err)) => {
                    if own && i > 1 {
                        if let Err(e) = self.backend.query("ROLLBACK", deprecate_eof).await {
                            return Err(SessionEnd::Backend(std::io::Error::other(e.to_string())));
                        }
                    }
                    // A write conflict (Galera certification, deadlock) undid the whole
                    // transaction of its own: run it again from its start, a few times.
                    if own
                        && retries < super::conflicts::CONFLICT_RETRIES
                        && crate::protocol::wire::ErrorPacket::parse(&err).map(|e| e.code)
                            == Some(super::conflicts::ER_LOCK_DEADLOCK)
                    {
                        retries += 1;
                        tokio::time::sleep(super::conflicts::conflict_pause(retries)).await;
                        i = 0;
                        continue;
                    }
                    return write_packet(self.client.get_mut(), self.relay.next_seq, &err)
                        .await
                        .map(|_| ())
                        .map_err(SessionEnd::Client);
                }
                Ok(QueryOutcome::ResultSet { .. }) => {
                    return Err(SessionEnd::Backend(std::io::Error::other(
                        "the server answered a REDRIVE step with rows",
                    )))
                }
                Err(e) => return Err(SessionEnd::Backend(std::io::Error::other(e.to_string()))),
            }
        }
        manager.stats().record_redriven(redriven);
        if !self
            .ctx
            .engine
            .as_ref()
            .is_some_and(|e| e.binlog_following())
        {
            manager.request_poll();
        }
        let ok = ok_packet(redriven, 0, status, 0);
        write_packet(self.client.get_mut(), self.relay.next_seq, &ok)
            .await
            .map(|_| ())
            .map_err(SessionEnd::Client)
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
        let end = self.run_retrying_conflicts(sql.as_bytes()).await?;
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
