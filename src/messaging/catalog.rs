//! Reading message table definitions from `information_schema`: every `vitess_message` table of
//! the server, or only some tables by name.
//!
//! Cost is what matters here (issue 23). MariaDB answers a query on `information_schema.TABLES`,
//! `COLUMNS` or `STATISTICS` by opening the definition of every table its `WHERE` cannot rule out
//! by name, and it rules them out only for `TABLE_SCHEMA = '...' AND TABLE_NAME = '...'` with
//! constants: not for an `IN` list of names or rows, nor through a join. So the columns and
//! indexes of a join on `TABLE_COMMENT` cost a pass over the whole catalog each (0.35 s and 0.25 s
//! on a server of 10,000 tables), while one branch of `UNION ALL` per table by name costs about
//! what `SELECT 1` does. Finding the message tables at all (a scan of every table's comment) is
//! the one query whose cost grows with the catalog; reading only named tables costs nothing of it.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::dead_letter;
use super::options;
use super::table::{self, hex_upper, ColumnInfo, MessageTable, TableKey};

/// A table's definition, or the reason its `vitess_message` comment does not make it usable.
pub type Found = (TableKey, Result<MessageTable, String>);

/// Every `vitess_message` base table of the server.
pub async fn read_all(conn: &mut Conn) -> Result<Vec<Found>, mysql_async::Error> {
    let candidates: Vec<(String, String, String)> = conn
        .query(format!(
            "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES WHERE {IS_MESSAGE_TABLE}"
        ))
        .await?;
    read_details(conn, candidates).await
}

/// Those of `keys` that are `vitess_message` base tables (a key that is not, or names no table,
/// is simply not in the answer).
pub async fn read_tables(
    conn: &mut Conn,
    keys: &[TableKey],
) -> Result<Vec<Found>, mysql_async::Error> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let candidates: Vec<(String, String, String)> = query_by_name(
        conn,
        "TABLE_SCHEMA, TABLE_NAME, TABLE_COMMENT",
        "TABLES",
        IS_MESSAGE_TABLE,
        keys,
    )
    .await?;
    read_details(conn, candidates).await
}

/// The comment that makes a base table a message table (`TABLE_TYPE` leaves out views and
/// sequences).
const IS_MESSAGE_TABLE: &str =
    "TABLE_COMMENT LIKE 'vitess\\_message%' AND TABLE_TYPE = 'BASE TABLE'";

/// The columns and poller indexes of `candidates` (schema, name, comment), validated.
async fn read_details(
    conn: &mut Conn,
    candidates: Vec<(String, String, String)>,
) -> Result<Vec<Found>, mysql_async::Error> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<TableKey> = candidates
        .iter()
        .map(|(schema, name, _)| (schema.clone(), name.clone()))
        .collect();
    let rows: Vec<Row> = query_by_name(
        conn,
        "TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, CHARACTER_SET_NAME, COLUMN_KEY, EXTRA, ORDINAL_POSITION",
        "COLUMNS",
        "TRUE",
        &keys,
    )
    .await?;
    // Indexes that start with time_next, for the poller (see `poll`). COLUMN_NAME is NULL for an
    // index part that is an expression (MySQL's functional indexes): such a part is no column,
    // and no poller index.
    let index_rows: Vec<(String, String, String, u32, Option<String>)> = query_by_name(
        conn,
        "TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME",
        "STATISTICS",
        "SEQ_IN_INDEX <= 2",
        &keys,
    )
    .await?;
    let mut indexes: HashMap<TableKey, Vec<(String, u32, String)>> = HashMap::new();
    for (schema, name, index, position, column) in index_rows {
        let Some(column) = column else {
            continue;
        };
        indexes
            .entry((schema, name))
            .or_default()
            .push((index, position, column));
    }
    let mut columns: HashMap<TableKey, Vec<(u64, ColumnInfo)>> = HashMap::new();
    for mut row in rows {
        let schema: String = row.take(0).unwrap_or_default();
        let name: String = row.take(1).unwrap_or_default();
        let column: String = row.take(2).unwrap_or_default();
        let data_type: String = row.take(3).unwrap_or_default();
        let charset: Option<String> = row.take(4).unwrap_or_default();
        let key: String = row.take(5).unwrap_or_default();
        let extra: String = row.take(6).unwrap_or_default();
        let position: u64 = row.take(7).unwrap_or_default();
        columns.entry((schema, name)).or_default().push((
            position,
            ColumnInfo {
                name: column,
                data_type: data_type.to_ascii_lowercase(),
                charset,
                in_primary_key: key == "PRI",
                set_on_update: extra.to_ascii_lowercase().contains("on update"),
            },
        ));
    }
    let dead_letters = dead_letter_columns(conn, &candidates).await?;
    Ok(candidates
        .into_iter()
        .filter_map(|(schema, name, comment)| {
            let key = (schema, name);
            // Every table has a column, so none means it was dropped between the queries: it
            // is gone (as the next reload would say), not broken.
            let mut cols = columns.remove(&key)?;
            cols.sort_by_key(|(position, _)| *position);
            let cols: Vec<ColumnInfo> = cols.into_iter().map(|(_, c)| c).collect();
            let result = match options::parse_comment(&comment) {
                Ok(Some(opts)) => table::validate(&key.0, &key.1, opts, &cols)
                    .map(|mut def| {
                        def.next_index = indexes.get(&key).and_then(|list| {
                            table::NextIndex::choose(
                                list.iter().map(|(i, p, c)| (i.as_str(), *p, c.as_str())),
                            )
                        });
                        def
                    })
                    .and_then(|def| {
                        def.check_group_index(
                            indexes
                                .get(&key)
                                .into_iter()
                                .flatten()
                                .map(|(i, p, c)| (i.as_str(), *p, c.as_str())),
                        )
                    })
                    .and_then(|def| {
                        let dl = def
                            .options
                            .dead_letter
                            .as_ref()
                            .and_then(|dl| dead_letters.get(&(key.0.clone(), dl.clone())));
                        dead_letter::attach(def, dl.map(Vec::as_slice))
                    })
                    .map_err(|e| e.to_string()),
                Ok(None) => return None,
                // Every problem at once: the options' and the columns'.
                Err(e) => Err(table::broken_options(&key.0, &key.1, e, &cols).to_string()),
            };
            Some((key, result))
        })
        .collect())
}

/// The column names of the `vt_dead_letter` tables the comments of `candidates` (schema, name,
/// comment) name, by (schema, table). A comment that does not parse names none.
async fn dead_letter_columns(
    conn: &mut Conn,
    candidates: &[(String, String, String)],
) -> Result<HashMap<TableKey, Vec<String>>, mysql_async::Error> {
    let wanted: Vec<TableKey> = candidates
        .iter()
        .filter_map(|(schema, _, comment)| {
            let dl = options::parse_comment(comment).ok()??.dead_letter?;
            Some((schema.clone(), dl))
        })
        .collect();
    let mut found: HashMap<TableKey, Vec<(u64, String)>> = HashMap::new();
    let rows: Vec<(String, String, String, u64)> = query_by_name(
        conn,
        "TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION",
        "COLUMNS",
        "TRUE",
        &wanted,
    )
    .await?;
    for (schema, name, column, position) in rows {
        found
            .entry((schema, name))
            .or_default()
            .push((position, column));
    }
    Ok(found
        .into_iter()
        .map(|(key, mut cols)| {
            cols.sort_by_key(|(position, _)| *position);
            (key, cols.into_iter().map(|(_, c)| c).collect())
        })
        .collect())
}

/// Tables named in one query at most: a periodic read of thousands of loaded tables goes in
/// several queries of a size the server parses quickly.
const TABLES_PER_QUERY: usize = 200;

/// The rows of [`union_by_name`] for every key, [`TABLES_PER_QUERY`] keys a query.
async fn query_by_name<T: mysql_async::prelude::FromRow + Send + 'static>(
    conn: &mut Conn,
    columns: &str,
    view: &str,
    filter: &str,
    keys: &[TableKey],
) -> Result<Vec<T>, mysql_async::Error> {
    let mut rows = Vec::new();
    for chunk in keys.chunks(TABLES_PER_QUERY) {
        rows.extend(
            conn.query::<T, _>(union_by_name(columns, view, filter, chunk))
                .await?,
        );
    }
    Ok(rows)
}

/// `SELECT columns FROM information_schema.view WHERE TABLE_SCHEMA = .. AND TABLE_NAME = ..
/// AND filter`, one `UNION ALL` branch per key: the form MariaDB answers by opening only the
/// tables named (see the module's header). Names go in as hex literals, so no name can become SQL.
fn union_by_name(columns: &str, view: &str, filter: &str, keys: &[TableKey]) -> String {
    let mut sql = String::new();
    for (i, (schema, name)) in keys.iter().enumerate() {
        if i > 0 {
            sql.push_str(" UNION ALL ");
        }
        sql.push_str(&format!(
            "SELECT {columns} FROM information_schema.{view} WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {} AND {filter}",
            name_literal(schema),
            name_literal(name),
        ));
    }
    sql
}

/// A name as a string literal of its UTF-8 bytes (`_utf8mb4 X'..'`): exact whatever it holds.
fn name_literal(name: &str) -> String {
    format!("_utf8mb4 X'{}'", hex_upper(name.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_branch_per_table_by_hex_name() {
        let keys = vec![
            ("d".to_string(), "m".to_string()),
            ("d".to_string(), "x'`".to_string()),
        ];
        assert_eq!(
            union_by_name("TABLE_NAME", "TABLES", "TRUE", &keys),
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = _utf8mb4 X'64' AND TABLE_NAME = _utf8mb4 X'6D' AND TRUE \
             UNION ALL SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = _utf8mb4 X'64' AND TABLE_NAME = _utf8mb4 X'782760' AND TRUE"
        );
    }
}
