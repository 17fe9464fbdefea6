//! The engine: the registry of message tables, loaded from `information_schema`, and one
//! [`TableManager`] per loaded table. Sessions ask it which table a statement names; it never
//! sees a packet.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Row};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::manager::TableManager;
use super::options;
use super::repeated_failure::RepeatedFailure;
use super::table::{self, ColumnInfo};
use crate::config::BackendTarget;

/// How often the registry is reloaded to pick up DDL made around the proxy.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The reload, as its failures are logged.
const RELOAD_JOB: &str = "loading the message tables";

/// What the registry knows about a table name.
pub enum Lookup {
    Loaded(Arc<TableManager>),
    /// A `vitess_message` table whose definition is wrong, with the reason.
    Broken(String),
    /// Not a message table (or no such table).
    NotMessageTable,
}

/// A message table's full name. Names are compared exactly, as the server does on Linux with
/// the default `lower_case_table_names=0`.
pub type TableKey = (String, String);

enum Entry {
    Loaded(Arc<TableManager>),
    Broken(String),
}

pub struct Engine {
    pool: Pool,
    tables: RwLock<HashMap<TableKey, Entry>>,
    shutdown: CancellationToken,
    /// Serialises reloads so two DDL statements cannot interleave their updates.
    reload_lock: tokio::sync::Mutex<()>,
    /// Whether the binlog watcher is following the backend's binlog right now. While it is,
    /// every committed row change reaches the managers from the binlog, so a write relayed
    /// through the proxy needs no poll of its own.
    binlog_following: Arc<AtomicBool>,
    /// A run of failed reloads (the backend away), logged once a minute, not every
    /// [`RELOAD_INTERVAL`].
    reload_failures: RepeatedFailure,
}

impl Engine {
    /// Creates the engine and loads the message tables; a backend that cannot be reached now is
    /// retried by the periodic reload.
    pub async fn start(backend: &BackendTarget, shutdown: CancellationToken) -> Arc<Engine> {
        // Keep a couple of connections open: with a minimum of 0 mysql_async closes every
        // returned connection, and each poll or purge would pay a new login.
        let constraints = mysql_async::PoolConstraints::new(2, 16).unwrap_or_default();
        // Polls and purges name `timestamp` ids by instant; at UTC every instant has a local
        // time of its own (in a zone with daylight saving, one hour a year repeats, and its
        // second instants could not be named: acked rows there would never be purged).
        let opts = backend
            .mysql_async_opts()
            .setup(vec!["SET time_zone = '+00:00'"])
            .pool_opts(mysql_async::PoolOpts::default().with_constraints(constraints));
        let engine = Arc::new(Engine {
            pool: Pool::new(opts),
            tables: RwLock::new(HashMap::new()),
            shutdown,
            reload_lock: tokio::sync::Mutex::new(()),
            binlog_following: Arc::new(AtomicBool::new(false)),
            reload_failures: RepeatedFailure::default(),
        });
        if let Err(e) = engine.reload().await {
            engine.reload_failures.failed(RELOAD_JOB, e);
        }
        let periodic = engine.clone();
        tokio::spawn(async move { periodic.reload_periodically().await });
        engine
    }

    async fn reload_periodically(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
                _ = self.shutdown.cancelled() => break,
            }
            match self.reload().await {
                Ok(()) => self.reload_failures.succeeded(RELOAD_JOB),
                Err(e) => self.reload_failures.failed(RELOAD_JOB, e),
            }
        }
        for entry in self
            .tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            if let Entry::Loaded(m) = entry {
                m.stop();
            }
        }
    }

    /// The engine's connection pool (the proxy's own backend user), for the few questions the
    /// sessions must ask of the server on another connection (`frontend::backend_sessions`).
    pub fn pool(&self) -> Pool {
        self.pool.clone()
    }

    /// Set by the binlog watcher whenever its mode changes.
    pub fn set_binlog_following(&self, following: bool) {
        self.binlog_following.store(following, Ordering::Release);
    }

    /// Whether row changes reach the managers from the binlog (see `binlog_following`).
    pub fn binlog_following(&self) -> bool {
        self.binlog_following.load(Ordering::Acquire)
    }

    pub fn lookup(&self, schema: &str, name: &str) -> Lookup {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        match tables.get(&(schema.to_string(), name.to_string())) {
            Some(Entry::Loaded(m)) => Lookup::Loaded(m.clone()),
            Some(Entry::Broken(why)) => Lookup::Broken(why.clone()),
            None => Lookup::NotMessageTable,
        }
    }

    /// Every `vitess_message` table the registry knows, loaded or broken, sorted by name (for
    /// metrics and `SHOW MESSAGE TABLES`).
    pub fn tables(&self) -> Vec<(TableKey, Lookup)> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<(TableKey, Lookup)> = tables
            .iter()
            .map(|(key, entry)| {
                let lookup = match entry {
                    Entry::Loaded(m) => Lookup::Loaded(m.clone()),
                    Entry::Broken(why) => Lookup::Broken(why.clone()),
                };
                (key.clone(), lookup)
            })
            .collect();
        drop(tables);
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Whether any message table is loaded (lets sessions skip all message work when none is).
    pub fn has_tables(&self) -> bool {
        !self
            .tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Every loaded table's manager (the binlog watcher asks them all to poll after a gap).
    pub fn managers(&self) -> Vec<Arc<TableManager>> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables
            .values()
            .filter_map(|entry| match entry {
                Entry::Loaded(m) => Some(m.clone()),
                Entry::Broken(_) => None,
            })
            .collect()
    }

    /// The loaded tables whose name appears in `sql` (case-insensitively): a cheap, deliberately
    /// generous test for "this statement may have written to a message table". A false positive
    /// costs one extra poll.
    pub fn tables_mentioned(&self, sql: &[u8]) -> Vec<Arc<TableManager>> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables
            .iter()
            .filter_map(|((_, name), entry)| match entry {
                Entry::Loaded(m) if contains_ignore_ascii_case(sql, name.as_bytes()) => {
                    Some(m.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// Reads the message tables from `information_schema` and brings the managers in line:
    /// new tables get a manager, changed ones get the new definition, dropped ones are stopped.
    pub async fn reload(&self) -> Result<(), mysql_async::Error> {
        let _guard = self.reload_lock.lock().await;
        let found = self.read_definitions().await?;
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::with_capacity(found.len());
        for (key, result) in found {
            let entry = match (result, tables.remove(&key)) {
                (Ok(def), Some(Entry::Loaded(m))) => {
                    if *m.definition() != def {
                        info!(
                            "message table {} changed: {}",
                            def.qualified(),
                            def.options.to_comment_summary()
                        );
                        m.set_definition(def);
                    }
                    Entry::Loaded(m)
                }
                (Ok(def), _) => {
                    info!(
                        "message table {} loaded: {}",
                        def.qualified(),
                        def.options.to_comment_summary()
                    );
                    Entry::Loaded(TableManager::start(
                        def,
                        self.pool.clone(),
                        self.shutdown.child_token(),
                        self.binlog_following.clone(),
                    ))
                }
                (Err(why), old) => {
                    let unchanged = matches!(&old, Some(Entry::Broken(w)) if *w == why);
                    if !unchanged {
                        warn!("{why}");
                    }
                    if let Some(Entry::Loaded(m)) = old {
                        m.stop();
                    }
                    Entry::Broken(why)
                }
            };
            next.insert(key, entry);
        }
        for (key, old) in tables.drain() {
            if let Entry::Loaded(m) = old {
                info!(
                    "message table `{}`.`{}` is gone; its streams end",
                    key.0, key.1
                );
                m.stop();
            }
        }
        *tables = next;
        Ok(())
    }

    /// Every `vitess_message` table with its validated definition or the reason it is invalid.
    async fn read_definitions(
        &self,
    ) -> Result<Vec<(TableKey, Result<table::MessageTable, String>)>, mysql_async::Error> {
        let mut conn = self.pool.get_conn().await?;
        let candidates: Vec<(String, String, String)> = conn
            .query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES \
                 WHERE TABLE_COMMENT LIKE 'vitess\\_message%' AND TABLE_TYPE = 'BASE TABLE'",
            )
            .await?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<Row> = conn
            .query(
                "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.CHARACTER_SET_NAME, c.COLUMN_KEY, c.EXTRA \
                 FROM information_schema.COLUMNS c JOIN information_schema.TABLES t \
                   ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
                 WHERE t.TABLE_COMMENT LIKE 'vitess\\_message%' AND t.TABLE_TYPE = 'BASE TABLE' \
                 ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION",
            )
            .await?;
        // Indexes that start with time_next, for the poller (see `poll`).
        // COLUMN_NAME is NULL for an index part that is an expression (MySQL's functional
        // indexes): such a part is no column, and no poller index.
        let index_rows: Vec<(String, String, String, u32, Option<String>)> = conn
            .query(
                "SELECT s.TABLE_SCHEMA, s.TABLE_NAME, s.INDEX_NAME, s.SEQ_IN_INDEX, s.COLUMN_NAME \
                 FROM information_schema.STATISTICS s JOIN information_schema.TABLES t \
                   ON t.TABLE_SCHEMA = s.TABLE_SCHEMA AND t.TABLE_NAME = s.TABLE_NAME \
                 WHERE t.TABLE_COMMENT LIKE 'vitess\\_message%' AND t.TABLE_TYPE = 'BASE TABLE' \
                   AND s.SEQ_IN_INDEX <= 2",
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
        let dead_letters = dead_letter_columns(&mut conn, &candidates).await?;
        let mut columns: HashMap<TableKey, Vec<ColumnInfo>> = HashMap::new();
        for mut row in rows {
            let schema: String = row.take(0).unwrap_or_default();
            let name: String = row.take(1).unwrap_or_default();
            let column: String = row.take(2).unwrap_or_default();
            let data_type: String = row.take(3).unwrap_or_default();
            let charset: Option<String> = row.take(4).unwrap_or_default();
            let key: String = row.take(5).unwrap_or_default();
            let extra: String = row.take(6).unwrap_or_default();
            columns.entry((schema, name)).or_default().push(ColumnInfo {
                name: column,
                data_type: data_type.to_ascii_lowercase(),
                charset,
                in_primary_key: key == "PRI",
                set_on_update: extra.to_ascii_lowercase().contains("on update"),
            });
        }
        Ok(candidates
            .into_iter()
            .filter_map(|(schema, name, comment)| {
                let result = match options::parse_comment(&comment) {
                    Ok(Some(opts)) => {
                        // Every table has a column, so none means it was dropped between the
                        // two queries: it is gone (as the next reload would say), not broken
                        // ("missing required column id" was logged for such a DROP).
                        let cols = columns.get(&(schema.clone(), name.clone()))?;
                        table::validate(&schema, &name, opts, cols)
                            .map(|mut def| {
                                def.next_index = indexes
                                    .get(&(schema.clone(), name.clone()))
                                    .and_then(|list| {
                                        table::NextIndex::choose(
                                            list.iter()
                                                .map(|(i, p, c)| (i.as_str(), *p, c.as_str())),
                                        )
                                    });
                                def
                            })
                            .and_then(|def| {
                                let list = indexes.get(&(schema.clone(), name.clone()));
                                def.check_group_index(
                                    list.into_iter()
                                        .flatten()
                                        .map(|(i, p, c)| (i.as_str(), *p, c.as_str())),
                                )
                            })
                            .and_then(|def| {
                                let dl =
                                    def.options.dead_letter.as_ref().and_then(|dl| {
                                        dead_letters.get(&(schema.clone(), dl.clone()))
                                    });
                                def.attach_dead_letter(dl.map(Vec::as_slice))
                            })
                            .map_err(|e| e.to_string())
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        let cols = columns
                            .get(&(schema.clone(), name.clone()))
                            .map_or(&[][..], Vec::as_slice);
                        Err(table::broken_options(&schema, &name, e, cols).to_string())
                    }
                };
                Some(((schema, name), result))
            })
            .collect())
    }
}

/// The column names of the `vt_dead_letter` tables the comments of `candidates` (schema, name,
/// comment) name, by (schema, table). A comment that does not parse names none.
async fn dead_letter_columns(
    conn: &mut mysql_async::Conn,
    candidates: &[(String, String, String)],
) -> Result<HashMap<TableKey, Vec<String>>, mysql_async::Error> {
    let wanted: Vec<(String, String)> = candidates
        .iter()
        .filter_map(|(schema, _, comment)| {
            let dl = options::parse_comment(comment).ok()??.dead_letter?;
            Some((schema.clone(), dl))
        })
        .collect();
    let mut found: HashMap<TableKey, Vec<String>> = HashMap::new();
    if wanted.is_empty() {
        return Ok(found);
    }
    // Names as hex, so nothing in a comment becomes SQL.
    let hex = |s: &str| {
        format!(
            "CONVERT(X'{}' USING utf8mb4)",
            table::hex_upper(s.as_bytes())
        )
    };
    let condition = wanted
        .iter()
        .map(|(schema, name)| {
            format!(
                "(TABLE_SCHEMA = {} AND TABLE_NAME = {})",
                hex(schema),
                hex(name)
            )
        })
        .collect::<Vec<_>>()
        .join(" OR ");
    let rows: Vec<(String, String, String)> = conn
        .query(format!(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS \
             WHERE {condition} ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION"
        ))
        .await?;
    for (schema, name, column) in rows {
        found.entry((schema, name)).or_default().push(column);
    }
    Ok(found)
}

fn contains_ignore_ascii_case(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}
