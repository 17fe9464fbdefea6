//! The groups' durable progress and leases, in one table of msgproxy's own on the backend
//! (`--stream-groups-table`, created if missing). One row a group: its filter, its position
//! (`floor`, the lowest event id not done), where to read the binlog again from, the acked ids
//! above the floor, and the lease: which proxy serves the group and until when (the server's
//! clock, so proxies' clocks need not agree). Where the file and offset belong, and the GTIDs to
//! resume by on another server, are `resume_server`, `resume_gtid` and `done_gtid`
//! (`resume.rs`); a table of the previous version gets them added at start.
//!
//! Every value goes in as a statement parameter: group names and filters are whatever clients
//! wrote, and never become SQL.

use mysql_async::prelude::Queryable;
use mysql_async::Row;

use super::group::Progress;
use super::resume::{Anchor, Done};
use crate::binlog::gtid::GtidState;
use crate::binlog::BinlogPosition;
use crate::cluster::SharedPool;

/// A lease lasts this long unless renewed (the serving proxy renews it at every save, and at
/// least every [`RENEW_EVERY`]).
pub const LEASE_SECONDS: u32 = 10;
/// How often the serving proxy renews its lease when nothing else is saved.
pub const RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// A group's name: its table and its own name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    pub schema: String,
    pub table: String,
    pub group: String,
}

/// A group's row.
#[derive(Debug, Clone)]
pub struct GroupRow {
    pub key: GroupKey,
    /// The canonical text of its filter (empty: none).
    pub filter: String,
    pub progress: Progress,
    /// Which server the resume file and offset belong to, and the GTIDs to move by.
    pub anchor: Anchor,
    /// The proxy holding the lease, if it is still valid.
    pub owner: Option<String>,
}

/// The store.
pub struct Store {
    /// The server in use's pool: the table is read and written where the groups are served.
    pool: SharedPool,
    /// The table, quoted and qualified as needed.
    table: String,
}

impl Store {
    /// `name` is the flag's value: `table` (in the backend's default database) or `db.table`.
    pub fn new(pool: SharedPool, name: &str) -> Store {
        let q = crate::messaging::table::quote_ident;
        let table = match name.split_once('.') {
            Some((db, t)) => format!("{}.{}", q(db), q(t)),
            None => q(name),
        };
        Store { pool, table }
    }

    /// Creates the table if it is missing.
    pub async fn ensure_table(&self) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        conn.query_drop(format!(
            "CREATE TABLE IF NOT EXISTS {} (\
               table_schema VARCHAR(64) NOT NULL, \
               table_name VARCHAR(64) NOT NULL, \
               group_name VARBINARY(255) NOT NULL, \
               filter TEXT NOT NULL, \
               floor BIGINT UNSIGNED NOT NULL, \
               resume_file VARCHAR(512) NOT NULL, \
               resume_pos BIGINT UNSIGNED NOT NULL, \
               acked MEDIUMTEXT NOT NULL, \
               resume_server VARCHAR(255) NULL, \
               resume_gtid TEXT NULL, \
               done_gtid VARCHAR(64) NULL, \
               owner VARCHAR(255) NULL, \
               lease_until DATETIME(3) NULL, \
               created_at DATETIME(6) NOT NULL DEFAULT NOW(6), \
               updated_at DATETIME(6) NOT NULL DEFAULT NOW(6), \
               PRIMARY KEY (table_schema, table_name, group_name)\
             ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='msgproxy event-stream groups (docs/STREAMS.md)'",
            self.table
        ))
        .await?;
        // A table of the previous version lacks the columns that let a group move to another
        // server. Added only when missing: an ALTER, even one with nothing to do, takes a
        // metadata lock that waits for every open transaction on the table.
        let has: Vec<Row> = conn
            .query(format!("SHOW COLUMNS FROM {} LIKE 'done_gtid'", self.table))
            .await?;
        if has.is_empty() {
            conn.query_drop(format!(
                "ALTER TABLE {} \
                   ADD COLUMN IF NOT EXISTS resume_server VARCHAR(255) NULL AFTER acked, \
                   ADD COLUMN IF NOT EXISTS resume_gtid TEXT NULL AFTER resume_server, \
                   ADD COLUMN IF NOT EXISTS done_gtid VARCHAR(64) NULL AFTER resume_gtid",
                self.table
            ))
            .await?;
        }
        Ok(())
    }

    fn key_params(key: &GroupKey) -> (String, String, Vec<u8>) {
        (
            key.schema.clone(),
            key.table.clone(),
            key.group.as_bytes().to_vec(),
        )
    }

    const PK: &'static str = "table_schema = ? AND table_name = ? AND group_name = ?";

    /// The group's row, if it exists.
    pub async fn load(&self, key: &GroupKey) -> Result<Option<GroupRow>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let (s, t, g) = Self::key_params(key);
        let row: Option<Row> = conn
            .exec_first(
                format!("SELECT {COLUMNS} FROM {} WHERE {}", self.table, Self::PK),
                (s, t, g),
            )
            .await?;
        Ok(row.and_then(group_row))
    }

    /// Every group, for `SHOW STREAM GROUPS`.
    pub async fn all(&self) -> Result<Vec<GroupRow>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let rows: Vec<Row> = conn
            .query(format!(
                "SELECT {COLUMNS} FROM {} ORDER BY table_schema, table_name, group_name",
                self.table
            ))
            .await?;
        Ok(rows.into_iter().filter_map(group_row).collect())
    }

    /// Creates the group at `progress` unless it exists; either way returns its row.
    pub async fn create(
        &self,
        key: &GroupKey,
        filter: &str,
        progress: &Progress,
        server: &str,
    ) -> Result<Option<GroupRow>, mysql_async::Error> {
        {
            let mut conn = self.pool.get_conn().await?;
            let (s, t, g) = Self::key_params(key);
            conn.exec_drop(
                format!(
                    "INSERT IGNORE INTO {} (table_schema, table_name, group_name, filter, floor, resume_file, resume_pos, acked, resume_server) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    self.table
                ),
                (
                    s,
                    t,
                    g,
                    filter,
                    progress.floor,
                    progress.resume.file.clone(),
                    progress.resume.pos,
                    acked_text(&progress.acked),
                    server,
                ),
            )
            .await?;
        }
        self.load(key).await
    }

    /// Takes (or keeps) the lease for `me` if nobody else holds a valid one. Returns whether
    /// `me` holds it now.
    pub async fn claim(&self, key: &GroupKey, me: &str) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let (s, t, g) = Self::key_params(key);
        let affected = "UPDATE {} SET owner = ?, lease_until = NOW(3) + INTERVAL {} SECOND \
             WHERE {} AND (owner IS NULL OR owner = ? OR lease_until IS NULL OR lease_until <= NOW(3))";
        let sql = affected
            .replacen("{}", &self.table, 1)
            .replacen("{}", &LEASE_SECONDS.to_string(), 1)
            .replacen("{}", Self::PK, 1);
        conn.exec_drop(sql, (me, s, t, g, me)).await?;
        Ok(conn.affected_rows() == 1)
    }

    /// Saves the group's progress and renews `me`'s lease. `false`: `me` no longer holds it
    /// (taken over, or the group was dropped).
    pub async fn save(
        &self,
        key: &GroupKey,
        me: &str,
        progress: &Progress,
        anchor: &Anchor,
    ) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let (s, t, g) = Self::key_params(key);
        conn.exec_drop(
            format!(
                "UPDATE {} SET floor = ?, resume_file = ?, resume_pos = ?, acked = ?, \
                 resume_server = ?, resume_gtid = ?, done_gtid = ?, \
                 lease_until = NOW(3) + INTERVAL {LEASE_SECONDS} SECOND, updated_at = NOW(6) \
                 WHERE {} AND owner = ?",
                self.table,
                Self::PK
            ),
            (
                progress.floor,
                progress.resume.file.clone(),
                progress.resume.pos,
                acked_text(&progress.acked),
                anchor.server.clone(),
                anchor.gtid.as_ref().map(GtidState::to_string),
                anchor.done.map(|d| d.to_string()),
                s,
                t,
                g,
                me,
            ),
        )
        .await?;
        Ok(conn.affected_rows() == 1)
    }

    /// Moves the group to `progress` (SEEK), whoever serves it.
    pub async fn seek(
        &self,
        key: &GroupKey,
        progress: &Progress,
        server: &str,
    ) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let (s, t, g) = Self::key_params(key);
        conn.exec_drop(
            format!(
                "UPDATE {} SET floor = ?, resume_file = ?, resume_pos = ?, acked = ?, \
                 resume_server = ?, resume_gtid = NULL, done_gtid = NULL, updated_at = NOW(6) WHERE {}",
                self.table,
                Self::PK
            ),
            (
                progress.floor,
                progress.resume.file.clone(),
                progress.resume.pos,
                acked_text(&progress.acked),
                server,
                s,
                t,
                g,
            ),
        )
        .await?;
        Ok(conn.affected_rows() == 1)
    }

    /// Gives the lease up (at shutdown, or when the group goes idle here).
    pub async fn release(&self, key: &GroupKey, me: &str) -> Result<(), mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let (s, t, g) = Self::key_params(key);
        conn.exec_drop(
            format!(
                "UPDATE {} SET owner = NULL, lease_until = NULL WHERE {} AND owner = ?",
                self.table,
                Self::PK
            ),
            (s, t, g, me),
        )
        .await
    }

    /// Forgets the group. Returns whether it existed.
    pub async fn delete(&self, key: &GroupKey) -> Result<bool, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let (s, t, g) = Self::key_params(key);
        conn.exec_drop(
            format!("DELETE FROM {} WHERE {}", self.table, Self::PK),
            (s, t, g),
        )
        .await?;
        Ok(conn.affected_rows() == 1)
    }
}

/// The columns [`group_row`] reads, in its order.
const COLUMNS: &str =
    "table_schema, table_name, group_name, filter, floor, resume_file, resume_pos, acked, \
     IF(lease_until > NOW(3), owner, NULL), resume_server, resume_gtid, done_gtid";

fn group_row(mut row: Row) -> Option<GroupRow> {
    let schema: String = row.take(0)?;
    let table: String = row.take(1)?;
    let group: Vec<u8> = row.take(2)?;
    let filter: String = row.take(3)?;
    let floor: u64 = row.take(4)?;
    let file: String = row.take(5)?;
    let pos: u64 = row.take(6)?;
    let acked: String = row.take(7)?;
    let owner: Option<String> = row.take(8)?;
    let server: Option<String> = row.take(9)?;
    let gtid: Option<String> = row.take(10)?;
    let done: Option<String> = row.take(11)?;
    Some(GroupRow {
        key: GroupKey {
            schema,
            table,
            group: String::from_utf8(group).ok()?,
        },
        filter,
        progress: Progress {
            floor,
            resume: BinlogPosition { file, pos },
            acked: parse_acked(&acked),
        },
        // Unreadable GTIDs count as none: the group then resumes only on its own server.
        anchor: Anchor {
            server: server.filter(|s| !s.is_empty()),
            gtid: gtid
                .and_then(|g| GtidState::parse(&g))
                .filter(|g| !g.is_empty()),
            done: done.and_then(|d| Done::parse(&d)),
        },
        owner,
    })
}

/// Acked ids as text: ascending, runs of consecutive ids as `a-b` (`5,7-9`).
pub fn acked_text(ids: &[u64]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        let mut end = start;
        while i + 1 < ids.len() && ids[i + 1] == end.wrapping_add(1) {
            i += 1;
            end = ids[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// The ids [`acked_text`] wrote (anything unreadable is left out: at worst an event is sent
/// again, never skipped).
pub fn parse_acked(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>()) {
                    if b >= a && b - a < 100_000_000 {
                        out.extend(a..=b);
                    }
                }
            }
            None => {
                if let Ok(a) = part.parse::<u64>() {
                    out.push(a);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acked_ids_round_trip_as_runs() {
        let ids = vec![1, 2, 3, 5, 7, 8, u64::MAX];
        let text = acked_text(&ids);
        assert_eq!(text, format!("1-3,5,7-8,{}", u64::MAX));
        assert_eq!(parse_acked(&text), ids);
        assert_eq!(acked_text(&[]), "");
        assert_eq!(parse_acked(""), Vec::<u64>::new());
        assert_eq!(parse_acked("x,4,9-2"), vec![4]);
    }
}
