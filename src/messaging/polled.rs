//! The rows a poll reads: [`PolledRow`] and how a poll query's result and its key values are read, shared by
//! the poller (`poll`), the group walk (`groups`), the manager's cache and the purge.

use mysql_async::prelude::Queryable;
use mysql_async::{from_row_opt, Conn, Row, Value};
use tracing::warn;

use super::table::MessageTable;

/// A polled row: id key, priority, time_next (0 for NULL).
pub type PolledRow = (Value, i64, i64);

/// Runs a poll query and reads its rows as [`PolledRow`]s. A row whose priority or
/// `time_next` does not fit an `i64` (a `bigint unsigned` column past 2^63) is left out with a
/// warning rather than converted by a panicking `FromRow`: the claim and the next polls still
/// see it, and the server's data cannot stop the poller.
pub async fn polled_rows(
    conn: &mut Conn,
    sql: &str,
    def: &MessageTable,
) -> Result<Vec<PolledRow>, mysql_async::Error> {
    let rows: Vec<Row> = conn.query(sql).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| match from_row_opt::<PolledRow>(row) {
            Ok(polled) => Some(polled),
            Err(e) => {
                warn!(
                    "{}: a polled row's priority or time_next is not a 64-bit integer; skipping it: {:?}",
                    def.qualified(),
                    e.0
                );
                None
            }
        })
        .collect())
}

/// A key value from a text-protocol result (`HEX(id)` or a number's text).
pub fn value_bytes(v: Value) -> Option<Box<[u8]>> {
    match v {
        Value::Bytes(b) => Some(b.into_boxed_slice()),
        Value::Int(i) => Some(i.to_string().into_bytes().into_boxed_slice()),
        Value::UInt(u) => Some(u.to_string().into_bytes().into_boxed_slice()),
        _ => None,
    }
}
