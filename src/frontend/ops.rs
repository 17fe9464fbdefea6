//! The session's operator feature: `SHOW MESSAGE TABLES`.
//!
//! `SHOW MESSAGE TABLES` is answered with a result set the session's own backend connection
//! makes: the proxy writes the rows as a `SELECT` of literals and relays the server's answer.
//! Column definitions, character set conversion and the EOF/OK conventions of the session are
//! then exactly the server's, as for `STREAM` (whose columns also come from the server), and the
//! proxy needs no result-set encoder of its own.

use std::fmt::Write;

use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Session, SessionEnd};
use crate::messaging::engine::Lookup;
use crate::messaging::state;
use crate::relay::ResponseKind;

/// The columns of `SHOW MESSAGE TABLES`, with the typed placeholder that fixes each column's
/// type and name (the first, empty `SELECT` of the union). A column's type follows its longest
/// value: the counters' placeholder is the largest unsigned value, which makes them `BIGINT
/// UNSIGNED` whatever the counts are.
const COLUMNS: [(&str, &str); 14] = [
    ("Schema", "CAST('' AS CHAR(64) CHARACTER SET utf8mb4)"),
    ("Name", "CAST('' AS CHAR(64) CHARACTER SET utf8mb4)"),
    ("Status", "CAST('' AS CHAR(255) CHARACTER SET utf8mb4)"),
    ("Options", "CAST('' AS CHAR(255) CHARACTER SET utf8mb4)"),
    ("Subscribers", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Cached", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("In_flight", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Sent", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Acked", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Redelivered", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Purged", "CAST(18446744073709551615 AS UNSIGNED)"),
    ("Oldest_due_age", "CAST(0 AS DECIMAL(20,3))"),
    // Dead messages (MESSAGING.md §9), in the table or its `vt_dead_letter` table, as the
    // engine counted them at its last purge tick; NULL without `vt_max_attempts`.
    ("Dead", "CAST(18446744073709551615 AS UNSIGNED)"),
    // FIFO groups (§11) with a message in flight, counted likewise; NULL without
    // `vt_group_col`.
    ("Keys_in_flight", "CAST(18446744073709551615 AS UNSIGNED)"),
];

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// `SHOW MESSAGE TABLES`: one row per `vitess_message` table the proxy knows, loaded or not.
    pub(super) async fn show_message_tables(&mut self) -> Result<(), SessionEnd> {
        let tables = self
            .ctx
            .engine
            .as_ref()
            .map(|e| e.tables())
            .unwrap_or_default();
        let sql = show_message_tables_sql(&tables, state::now_ns());
        self.relay_statement(sql.as_bytes(), ResponseKind::Results)
            .await
    }
}

/// A counter as an unsigned literal: a plain `5` is a signed integer, and a UNION of it (or of a
/// bare NULL) with the placeholder's unsigned column is typed `DECIMAL`, which typed clients
/// (sqlx) refuse to read as an integer.
fn count(n: u64) -> String {
    format!("CAST({n} AS UNSIGNED)")
}

/// A count that may be unknown: [`count`], or a NULL typed as one.
fn maybe_count(n: Option<u64>) -> String {
    n.map_or("CAST(NULL AS UNSIGNED)".to_string(), count)
}

/// The `SELECT` that answers `SHOW MESSAGE TABLES` for `tables`: a typed placeholder row that
/// selects nothing, then one row of literals per table. Strings are hex literals converted to
/// utf8mb4, so neither quotes in a reason nor the session's `sql_mode` can change the statement.
fn show_message_tables_sql(tables: &[((String, String), Lookup)], now_ns: i64) -> String {
    let mut sql = String::from("SELECT ");
    for (i, (name, placeholder)) in COLUMNS.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        let _ = write!(sql, "{placeholder} AS `{name}`");
    }
    sql.push_str(" FROM DUAL WHERE FALSE");
    for ((schema, name), lookup) in tables {
        let _ = write!(sql, " UNION ALL SELECT {}, {}, ", text(schema), text(name));
        match lookup {
            Lookup::Loaded(m) => {
                let s = m.snapshot();
                let c = m.stats().snapshot();
                let options = m.definition().options.to_comment_summary();
                let age = s.oldest_due_ns.map_or("NULL".to_string(), |_| {
                    format!("{:.3}", s.oldest_due_age_seconds(now_ns))
                });
                let _ = write!(
                    sql,
                    "{}, {}, {}, {}, {}, {}, {}, {}, {}, {age}, {}, {}",
                    text("loaded"),
                    text(&options),
                    count(s.subscribers as u64),
                    count(s.cached as u64),
                    count(s.in_flight as u64),
                    count(c.sent),
                    count(c.acked),
                    count(c.redelivered),
                    count(c.purged),
                    maybe_count(s.dead),
                    maybe_count(s.keys_in_flight),
                );
            }
            Lookup::Broken(why) => {
                let _ = write!(sql, "{}", text(why));
                // The counters' NULLs typed as the counters: a bare NULL in the UNION makes the
                // column DECIMAL as surely as a plain literal does.
                sql.push_str(", NULL");
                for _ in 0..7 {
                    sql.push_str(", CAST(NULL AS UNSIGNED)");
                }
                sql.push_str(", NULL, CAST(NULL AS UNSIGNED), CAST(NULL AS UNSIGNED)");
            }
            Lookup::NotMessageTable => {
                sql.push_str(
                    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
                );
            }
        }
    }
    sql
}

/// A string literal that survives every `sql_mode` and character set: `CONVERT(X'..' USING
/// utf8mb4)`.
pub(super) fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2 + 30);
    out.push_str("CONVERT(X'");
    for b in s.bytes() {
        let _ = write!(out, "{b:02X}");
    }
    out.push_str("' USING utf8mb4)");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_registry_still_has_typed_columns() {
        let sql = show_message_tables_sql(&[], 0);
        assert!(sql.starts_with("SELECT CAST('' AS CHAR(64) CHARACTER SET utf8mb4) AS `Schema`, "));
        assert!(sql.ends_with("AS `Keys_in_flight` FROM DUAL WHERE FALSE"));
    }

    #[test]
    fn broken_tables_carry_their_reason_as_hex() {
        let tables = vec![(
            ("db".to_string(), "t'x".to_string()),
            Lookup::Broken("it's bad".to_string()),
        )];
        let sql = show_message_tables_sql(&tables, 0);
        assert!(sql.contains(" UNION ALL SELECT CONVERT(X'6462' USING utf8mb4), CONVERT(X'742778' USING utf8mb4), CONVERT(X'6974277320626164' USING utf8mb4), NULL,"), "{sql}");
        assert_eq!(sql.matches('\'').count() % 2, 0);
        assert!(!sql.contains("it's"));
    }
}
