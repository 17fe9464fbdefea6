//! `ACK`s handed from a proxy that does not serve a group to the one that does, through a table
//! of msgproxy's own beside the groups table: its name is the groups table's with `_acks`
//! appended (`msgproxy_stream_groups_acks` by default, in the same database), created if missing.
//!
//! One row a request: the group, the event ids, and once the serving proxy has applied it the
//! answer (events newly acked) and when. The requesting proxy inserts the row (the ack is durable
//! from then on) and waits a moment for the answer; the serving proxy reads the pending rows of
//! all its groups in one query every [`POLL_EVERY`] (`engine.rs`), and a proxy taking a group
//! over applies the group's pending rows before it sends anything (`group_task.rs`). Answered
//! rows are deleted after [`KEEP_ANSWERED`]; a group's rows go with the group (`DROP GROUP`).
//!
//! Every value goes in as a statement parameter, as in `store.rs`.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Row;

use super::store::{acked_text, parse_acked, GroupKey};
use crate::cluster::SharedPool;

/// How often a proxy serving groups reads the requests for them.
pub const POLL_EVERY: Duration = Duration::from_millis(50);
/// How long an answered request stays (for a requester still waiting on a slow node, and for
/// operators looking at the table).
pub const KEEP_ANSWERED: Duration = Duration::from_secs(60);
/// How often the serving proxy deletes answered requests older than [`KEEP_ANSWERED`].
pub const PURGE_EVERY: Duration = Duration::from_secs(10);

/// A request not yet answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRequest {
    pub id: u64,
    pub key: GroupKey,
    /// The ids to ack, ascending, without repeats.
    pub ids: Vec<u64>,
}

/// The requests table.
pub struct AckRequests {
    /// The server in use's pool (the groups table's).
    pool: SharedPool,
    /// The table, quoted and qualified as needed.
    table: String,
}

/// The requests table's name for the groups table `groups_table` (the `--stream-groups-table`
/// flag: `table` or `db.table`), quoted: the same database, `_acks` appended.
pub fn table_for(groups_table: &str) -> String {
    let q = crate::messaging::table::quote_ident;
    match groups_table.split_once('.') {
        Some((db, t)) => format!("{}.{}", q(db), q(&format!("{t}_acks"))),
        None => q(&format!("{groups_table}_acks")),
    }
}

/// The ids of an `ACK` as the table keeps them: ascending runs (`store::acked_text`). Repeats
/// are dropped: acking an id twice in one statement counts it once either way.
pub fn ids_text(ids: &[u64]) -> String {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    acked_text(&sorted)
}

/// The `WHERE` condition matching any of `n` groups (`n` ≥ 1), one `(?, ?, ?)` each.
fn any_group(n: usize) -> String {
    let one = "(?, ?, ?)";
    format!(
        "(table_schema, table_name, group_name) IN ({})",
        vec![one; n].join(", ")
    )
}

fn request(mut row: Row) -> Option<AckRequest> {
    let id: u64 = row.take(0)?;
    let schema: String = row.take(1)?;
    let table: String = row.take(2)?;
    let group: Vec<u8> = row.take(3)?;
    let ids: String = row.take(4)?;
    Some(AckRequest {
        id,
        key: GroupKey {
            schema,
            table,
            group: String::from_utf8(group).ok()?,
        },
        ids: parse_acked(&ids),
    })
}

const COLUMNS: &str = "id, table_schema, table_name, group_name, event_ids";

impl AckRequests {
    /// `groups_table` is the `--stream-groups-table` flag's value.
    pub fn new(pool: SharedPool, groups_table: &str) -> AckRequests {
        AckRequests {
            pool,
            table: table_for(groups_table),
        }
    }

    /// Creates the table if it is missing.
    pub async fn ensure_table(&self) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.query_drop(format!(
            "CREATE TABLE IF NOT EXISTS {} (\
               id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, \
               table_schema VARCHAR(64) NOT NULL, \
               table_name VARCHAR(64) NOT NULL, \
               group_name VARBINARY(255) NOT NULL, \
               event_ids MEDIUMTEXT NOT NULL, \
               requested_by VARCHAR(255) NOT NULL, \
               requested_at DATETIME(3) NOT NULL DEFAULT NOW(3), \
               answered_by VARCHAR(255) NULL, \
               answered_at DATETIME(3) NULL, \
               acked BIGINT UNSIGNED NULL, \
               KEY pending (table_schema, table_name, group_name, answered_at), \
               KEY answered (answered_at)\
             ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='msgproxy ACKs for the proxy serving a stream group (docs/STREAMS.md)'",
            self.table
        ))
        .await
    }

    /// Queues an `ACK` of `ids` for the group's serving proxy; the request's id.
    pub async fn submit(
        &self,
        key: &GroupKey,
        ids: &[u64],
        me: &str,
    ) -> Result<u64, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "INSERT INTO {} (table_schema, table_name, group_name, event_ids, requested_by) \
                 VALUES (?, ?, ?, ?, ?)",
                self.table
            ),
            (
                key.schema.as_str(),
                key.table.as_str(),
                key.group.as_bytes(),
                ids_text(ids),
                me,
            ),
        )
        .await?;
        conn.last_insert_id()
            .ok_or_else(|| mysql_async::Error::Other("the request got no id".into()))
    }

    /// The answer to request `id` (events newly acked), once there is one.
    pub async fn answer_of(&self, id: u64) -> Result<Option<u64>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let answer: Option<Option<u64>> = conn
            .exec_first(
                format!(
                    "SELECT acked FROM {} WHERE id = ? AND answered_at IS NOT NULL",
                    self.table
                ),
                (id,),
            )
            .await?;
        Ok(answer.flatten())
    }

    /// The pending requests for any of `groups` (one query, whatever their number), oldest first.
    pub async fn pending(
        &self,
        groups: &[GroupKey],
    ) -> Result<Vec<AckRequest>, mysql_async::Error> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let mut params: Vec<mysql_async::Value> = Vec::with_capacity(groups.len() * 3);
        for key in groups {
            params.push(key.schema.as_str().into());
            params.push(key.table.as_str().into());
            params.push(key.group.as_bytes().into());
        }
        let mut conn = self.pool.get_conn().await?;
        let rows: Vec<Row> = conn
            .exec(
                format!(
                    "SELECT {COLUMNS} FROM {} WHERE answered_at IS NULL AND {} ORDER BY id",
                    self.table,
                    any_group(groups.len())
                ),
                params,
            )
            .await?;
        Ok(rows.into_iter().filter_map(request).collect())
    }

    /// Writes the answers (request id, events newly acked) in one statement.
    pub async fn answer(&self, answers: &[(u64, u64)], me: &str) -> Result<(), mysql_async::Error> {
        if answers.is_empty() {
            return Ok(());
        }
        let mut params: Vec<mysql_async::Value> = Vec::with_capacity(answers.len() * 3 + 1);
        for (id, n) in answers {
            params.push((*id).into());
            params.push((*n).into());
        }
        params.push(me.into());
        params.extend(answers.iter().map(|(id, _)| mysql_async::Value::from(*id)));
        let cases = vec!["WHEN ? THEN ?"; answers.len()].join(" ");
        let ids = vec!["?"; answers.len()].join(", ");
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET acked = CASE id {cases} END, answered_by = ?, answered_at = NOW(3) \
                 WHERE id IN ({ids}) AND answered_at IS NULL",
                self.table
            ),
            params,
        )
        .await
    }

    /// Deletes answered requests older than [`KEEP_ANSWERED`].
    pub async fn purge(&self) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "DELETE FROM {} WHERE answered_at < NOW(3) - INTERVAL ? SECOND",
                self.table
            ),
            (KEEP_ANSWERED.as_secs(),),
        )
        .await
    }

    /// Forgets the group's requests (the group was dropped).
    pub async fn forget(&self, key: &GroupKey) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "DELETE FROM {} WHERE table_schema = ? AND table_name = ? AND group_name = ?",
                self.table
            ),
            (
                key.schema.as_str(),
                key.table.as_str(),
                key.group.as_bytes(),
            ),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_sits_beside_the_groups_table() {
        assert_eq!(
            table_for("msgproxy_stream_groups"),
            "`msgproxy_stream_groups_acks`"
        );
        assert_eq!(table_for("ops.groups"), "`ops`.`groups_acks`");
        assert_eq!(table_for("we`ird"), "`we``ird_acks`");
    }

    #[test]
    fn ids_are_kept_sorted_without_repeats_and_read_back() {
        let text = ids_text(&[9, 3, 4, 3, 5, u64::MAX, 1]);
        assert_eq!(text, format!("1,3-5,9,{}", u64::MAX));
        assert_eq!(parse_acked(&text), vec![1, 3, 4, 5, 9, u64::MAX]);
        assert_eq!(ids_text(&[]), "");
    }

    #[test]
    fn one_condition_covers_every_group() {
        assert_eq!(
            any_group(1),
            "(table_schema, table_name, group_name) IN ((?, ?, ?))"
        );
        assert_eq!(
            any_group(3),
            "(table_schema, table_name, group_name) IN ((?, ?, ?), (?, ?, ?), (?, ?, ?))"
        );
    }
}
