//! The stream tables: every base table whose comment starts with `msgproxy_stream`, with its
//! options and columns, loaded from `information_schema` (as the message tables are). A table
//! whose options are wrong is known as broken, with the reason, and statements on it say it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Row};

use super::encode::enum_labels;
use super::filter::Labels;
use super::options::{self, StreamOptions};

/// A stream table's definition.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamTable {
    pub schema: String,
    pub name: String,
    pub options: StreamOptions,
    /// Column names in table order.
    pub columns: Vec<String>,
    /// The members of each ENUM/SET column, by lower-case name.
    pub labels: HashMap<String, Vec<Vec<u8>>>,
}

impl Labels for StreamTable {
    fn labels(&self, column: &str) -> Option<&[Vec<u8>]> {
        self.labels.get(column).map(Vec::as_slice)
    }
}

impl StreamTable {
    /// `schema`.`name`, quoted.
    pub fn qualified(&self) -> String {
        format!(
            "{}.{}",
            crate::messaging::table::quote_ident(&self.schema),
            crate::messaging::table::quote_ident(&self.name)
        )
    }

    /// The table's column named `name` (case-insensitively), as the table spells it.
    pub fn column(&self, name: &str) -> Option<&str> {
        let lower = name.to_lowercase();
        self.columns
            .iter()
            .find(|c| c.to_lowercase() == lower)
            .map(String::as_str)
    }
}

/// What the registry knows of a table name.
#[derive(Debug, Clone)]
pub enum StreamLookup {
    Loaded(Arc<StreamTable>),
    /// A `msgproxy_stream` table whose comment is wrong, with the reason.
    Broken(String),
    NotStreamTable,
}

type Key = (String, String);

/// A table's column names in order, and its ENUM/SET members by lower-case column name.
type Columns = (Vec<String>, HashMap<String, Vec<Vec<u8>>>);

/// The registry of stream tables.
#[derive(Default)]
pub struct Registry {
    tables: RwLock<HashMap<Key, Result<Arc<StreamTable>, String>>>,
}

impl Registry {
    pub fn lookup(&self, schema: &str, name: &str) -> StreamLookup {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        match tables.get(&(schema.to_owned(), name.to_owned())) {
            Some(Ok(t)) => StreamLookup::Loaded(t.clone()),
            Some(Err(why)) => StreamLookup::Broken(why.clone()),
            None => StreamLookup::NotStreamTable,
        }
    }

    /// Whether no stream table is known (none was ever looked up, or none exists).
    pub fn is_empty(&self) -> bool {
        self.tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Reads the stream tables again. A table whose definition is unchanged keeps its `Arc`.
    pub async fn reload(&self, pool: &Pool) -> Result<(), mysql_async::Error> {
        let mut conn = pool.get_conn().await?;
        let found: Vec<(String, String, String)> = conn
            .query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES \
                 WHERE TABLE_COMMENT LIKE 'msgproxy\\_stream%' AND TABLE_TYPE = 'BASE TABLE'",
            )
            .await?;
        let rows: Vec<Row> = if found.is_empty() {
            Vec::new()
        } else {
            conn.query(
                "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE \
                 FROM information_schema.COLUMNS c JOIN information_schema.TABLES t \
                   ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
                 WHERE t.TABLE_COMMENT LIKE 'msgproxy\\_stream%' AND t.TABLE_TYPE = 'BASE TABLE' \
                 ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION",
            )
            .await?
        };
        let mut columns: HashMap<Key, Columns> = HashMap::new();
        for mut row in rows {
            let schema: String = row.take(0).unwrap_or_default();
            let name: String = row.take(1).unwrap_or_default();
            let column: String = row.take(2).unwrap_or_default();
            let data_type: String = row.take(3).unwrap_or_default();
            let column_type: Vec<u8> = row.take(4).unwrap_or_default();
            let entry = columns.entry((schema, name)).or_default();
            if matches!(data_type.to_ascii_lowercase().as_str(), "enum" | "set") {
                if let Some(labels) = enum_labels(&column_type) {
                    entry.1.insert(column.to_lowercase(), labels);
                }
            }
            entry.0.push(column);
        }
        let mut next = HashMap::new();
        for (schema, name, comment) in found {
            let Some((cols, labels)) = columns.remove(&(schema.clone(), name.clone())) else {
                continue;
            };
            let entry = match options::parse_comment(&comment) {
                Ok(Some(options)) => Ok(StreamTable {
                    schema: schema.clone(),
                    name: name.clone(),
                    options,
                    columns: cols,
                    labels,
                }),
                Ok(None) => continue,
                Err(e) => Err(format!(
                    "`{schema}`.`{name}` is not a usable stream table: {e}"
                )),
            };
            next.insert((schema, name), entry);
        }
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        let merged = next
            .into_iter()
            .map(|(key, entry)| {
                let entry = match (entry, tables.get(&key)) {
                    (Ok(def), Some(Ok(old))) if **old == def => Ok(old.clone()),
                    (Ok(def), _) => Ok(Arc::new(def)),
                    (Err(why), _) => Err(why),
                };
                (key, entry)
            })
            .collect();
        *tables = merged;
        Ok(())
    }
}
