//! `ACK`s and `SEEK`s handed from a proxy that does not serve a group to the one that does,
//! through a table of msgproxy's own beside the groups table: its name is the groups table's with
//! `_requests` appended (`msgproxy_stream_groups_requests` by default, in the same database),
//! created if missing.
//!
//! One row a request: the group, what is asked (the event ids to ack, or the `SEEK` target,
//! which the serving proxy resolves on its own server: on Galera each node has binlog positions
//! of its own), and once the serving proxy has applied it the answer (events newly acked, or why
//! the `SEEK` failed) and when. The requesting proxy inserts the row (durable from then on) and
//! waits a moment for the answer; the serving proxy reads the pending rows of all its groups in
//! one query every [`POLL_EVERY`] (`request_poller.rs`), and a proxy taking a group over applies
//! the group's pending rows before it sends anything. Answered rows are deleted after
//! [`KEEP_ANSWERED`]; a group's rows go with the group (`DROP GROUP`).
//!
//! Every value goes in as a statement parameter, as in `store.rs`.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Row;

use super::locate::Target;
use super::store::{acked_text, parse_acked, GroupKey};
use crate::cluster::SharedPool;

/// How often a proxy serving groups reads the requests for them.
pub const POLL_EVERY: Duration = Duration::from_millis(50);
/// A read of the pending requests slower than this is logged: requests wait for it.
pub const SLOW_READ: Duration = Duration::from_millis(500);
/// How long an answered request stays (for a requester still waiting on a slow node, and for
/// operators looking at the table).
pub const KEEP_ANSWERED: Duration = Duration::from_secs(60);
/// How often the serving proxy deletes answered requests older than [`KEEP_ANSWERED`].
pub const PURGE_EVERY: Duration = Duration::from_secs(10);

/// A request not yet answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub id: u64,
    pub key: GroupKey,
    pub asked: Asked,
}

/// What a request asks of the serving proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// `ACK` of these ids (ascending, without repeats).
    Ack(Vec<u64>),
    /// `SEEK` to this target.
    Seek(Target),
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Done: events newly acked (0 for a `SEEK`).
    Done(u64),
    /// The request failed: why (a `SEEK` whose position is not in the binlog).
    Failed(String),
}

/// A `SEEK` target as the table keeps it: `latest`, `earliest`, `timestamp:<unix seconds>`,
/// `event:<id>`.
pub fn target_text(target: &Target) -> String {
    match target {
        Target::Latest => "latest".into(),
        Target::Earliest => "earliest".into(),
        Target::Timestamp(secs) => format!("timestamp:{secs}"),
        Target::Event(id) => format!("event:{id}"),
    }
}

/// The target [`target_text`] wrote; `None` for anything else.
pub fn parse_target(text: &str) -> Option<Target> {
    match text.split_once(':') {
        None if text == "latest" => Some(Target::Latest),
        None if text == "earliest" => Some(Target::Earliest),
        Some(("timestamp", secs)) => secs.parse().ok().map(Target::Timestamp),
        Some(("event", id)) => id.parse().ok().map(Target::Event),
        _ => None,
    }
}

/// What a row asks: a `SEEK` when it has a target, else an `ACK` of its ids. An unreadable
/// target is a `SEEK` to nowhere, answered with the reason rather than taken for an `ACK`.
fn asked(event_ids: &str, seek_to: Option<&str>) -> Result<Asked, String> {
    match seek_to {
        Some(text) => parse_target(text)
            .map(Asked::Seek)
            .ok_or_else(|| format!("unreadable SEEK target '{text}' in the requests table")),
        None => Ok(Asked::Ack(parse_acked(event_ids))),
    }
}

/// The requests table.
pub struct Requests {
    /// The server in use's pool (the groups table's).
    pool: SharedPool,
    /// The table, quoted and qualified as needed.
    table: String,
}

/// The requests table's name for the groups table `groups_table` (the `--stream-groups-table`
/// flag: `table` or `db.table`), quoted: the same database, `_requests` appended.
pub fn table_for(groups_table: &str) -> String {
    let q = crate::messaging::table::quote_ident;
    match groups_table.split_once('.') {
        Some((db, t)) => format!("{}.{}", q(db), q(&format!("{t}_requests"))),
        None => q(&format!("{groups_table}_requests")),
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

/// A pending row: the request, or its id and why it cannot be read (answered so).
fn request(mut row: Row) -> Option<Result<Request, (u64, String)>> {
    let id: u64 = row.take(0)?;
    let schema: String = row.take(1)?;
    let table: String = row.take(2)?;
    let group: Vec<u8> = row.take(3)?;
    let ids: String = row.take(4)?;
    let seek_to: Option<String> = row.take(5)?;
    let asked = match asked(&ids, seek_to.as_deref()) {
        Ok(a) => a,
        Err(why) => return Some(Err((id, why))),
    };
    Some(Ok(Request {
        id,
        key: GroupKey {
            schema,
            table,
            group: String::from_utf8(group).ok()?,
        },
        asked,
    }))
}

const COLUMNS: &str = "id, table_schema, table_name, group_name, event_ids, seek_to";

impl Requests {
    /// `groups_table` is the `--stream-groups-table` flag's value.
    pub fn new(pool: SharedPool, groups_table: &str) -> Requests {
        Requests {
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
               seek_to VARCHAR(64) NULL, \
               requested_by VARCHAR(255) NOT NULL, \
               requested_at DATETIME(3) NOT NULL DEFAULT NOW(3), \
               answered_by VARCHAR(255) NULL, \
               answered_at DATETIME(3) NULL, \
               acked BIGINT UNSIGNED NULL, \
               failed TEXT NULL, \
               KEY pending (table_schema, table_name, group_name, answered_at), \
               KEY answered (answered_at)\
             ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='msgproxy ACK and SEEK requests for the proxy serving a stream group (docs/STREAMS.md)'",
            self.table
        ))
        .await
    }

    /// Queues `asked` for the group's serving proxy; the request's id.
    pub async fn submit(
        &self,
        key: &GroupKey,
        asked: &Asked,
        me: &str,
    ) -> Result<u64, mysql_async::Error> {
        let (ids, seek_to) = match asked {
            Asked::Ack(ids) => (ids_text(ids), None),
            Asked::Seek(target) => (String::new(), Some(target_text(target))),
        };
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "INSERT INTO {} (table_schema, table_name, group_name, event_ids, seek_to, requested_by) \
                 VALUES (?, ?, ?, ?, ?, ?)",
                self.table
            ),
            (
                key.schema.as_str(),
                key.table.as_str(),
                key.group.as_bytes(),
                ids,
                seek_to,
                me,
            ),
        )
        .await?;
        conn.last_insert_id()
            .ok_or_else(|| mysql_async::Error::Other("the request got no id".into()))
    }

    /// The answer to request `id`, once there is one.
    pub async fn answer_of(&self, id: u64) -> Result<Option<Answer>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let answer: Option<(Option<u64>, Option<String>)> = conn
            .exec_first(
                format!(
                    "SELECT acked, failed FROM {} WHERE id = ? AND answered_at IS NOT NULL",
                    self.table
                ),
                (id,),
            )
            .await?;
        Ok(answer.map(|(acked, failed)| match failed {
            Some(why) => Answer::Failed(why),
            None => Answer::Done(acked.unwrap_or(0)),
        }))
    }

    /// The pending requests for any of `groups` (one query, whatever their number), oldest
    /// first. A row that cannot be read is answered with the reason.
    pub async fn pending(&self, groups: &[GroupKey]) -> Result<Vec<Request>, mysql_async::Error> {
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
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for read in rows.into_iter().filter_map(request) {
            match read {
                Ok(r) => good.push(r),
                Err((id, why)) => bad.push((id, Answer::Failed(why))),
            }
        }
        if !bad.is_empty() {
            self.answer(&bad, "").await?;
        }
        Ok(good)
    }

    /// Writes the answers (request id, answer) in one statement.
    pub async fn answer(
        &self,
        answers: &[(u64, Answer)],
        me: &str,
    ) -> Result<(), mysql_async::Error> {
        if answers.is_empty() {
            return Ok(());
        }
        let mut params: Vec<mysql_async::Value> = Vec::with_capacity(answers.len() * 5 + 1);
        for (id, answer) in answers {
            params.push((*id).into());
            params.push(match answer {
                Answer::Done(n) => (*n).into(),
                Answer::Failed(_) => mysql_async::Value::NULL,
            });
        }
        for (id, answer) in answers {
            params.push((*id).into());
            params.push(match answer {
                Answer::Done(_) => mysql_async::Value::NULL,
                Answer::Failed(why) => why.as_str().into(),
            });
        }
        params.push(me.into());
        params.extend(answers.iter().map(|(id, _)| mysql_async::Value::from(*id)));
        let cases = vec!["WHEN ? THEN ?"; answers.len()].join(" ");
        let ids = vec!["?"; answers.len()].join(", ");
        let mut conn = self.pool.get_conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE {} SET acked = CASE id {cases} END, failed = CASE id {cases} END, \
                 answered_by = ?, answered_at = NOW(3) \
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
            "`msgproxy_stream_groups_requests`"
        );
        assert_eq!(table_for("ops.groups"), "`ops`.`groups_requests`");
        assert_eq!(table_for("we`ird"), "`we``ird_requests`");
    }

    #[test]
    fn ids_are_kept_sorted_without_repeats_and_read_back() {
        let text = ids_text(&[9, 3, 4, 3, 5, u64::MAX, 1]);
        assert_eq!(text, format!("1,3-5,9,{}", u64::MAX));
        assert_eq!(parse_acked(&text), vec![1, 3, 4, 5, 9, u64::MAX]);
        assert_eq!(ids_text(&[]), "");
    }

    #[test]
    fn seek_targets_round_trip_and_nothing_else_reads_as_one() {
        for target in [
            Target::Latest,
            Target::Earliest,
            Target::Timestamp(1_764_000_000),
            Target::Event(u64::MAX),
        ] {
            assert_eq!(parse_target(&target_text(&target)), Some(target));
        }
        for bad in [
            "",
            "LATEST",
            "event:",
            "event:-1",
            "timestamp:x",
            "seek:1",
            "latest:1",
        ] {
            assert_eq!(parse_target(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_row_with_a_target_is_a_seek_and_without_one_an_ack() {
        assert_eq!(asked("1,3-4", None), Ok(Asked::Ack(vec![1, 3, 4])));
        assert_eq!(
            asked("", Some("event:7")),
            Ok(Asked::Seek(Target::Event(7)))
        );
        assert!(asked("5", Some("nowhere"))
            .unwrap_err()
            .contains("unreadable SEEK target 'nowhere'"));
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
