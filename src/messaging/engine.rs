//! The engine: the registry of message tables, loaded from `information_schema`, and one
//! [`TableManager`] per loaded table. Sessions ask it which table a statement names; it never
//! sees a packet.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::catalog;
use super::manager::TableManager;
use super::reload::{Lane, ReadTickets, ReloadError, Scope};
use super::repeated_failure::RepeatedFailure;
use super::table::{MessageTable, TableKey};
use crate::cluster::{Backends, SharedPool};
use crate::sql::{contains_ignore_ascii_case, is_bare_identifier, names_identifier};

/// How often the registry is reloaded to pick up DDL made around the proxy.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// While the binlog watcher follows, it sees DDL made around the proxy and reloads the tables
/// it names, so the periodic reload re-reads only the loaded tables (by name: cheap however
/// large the catalog), and looks for new message tables in the whole catalog only every this
/// many [`RELOAD_INTERVAL`]s (for DDL the binlog does not show: `sql_log_bin = 0`).
const CATALOG_SCAN_EVERY: u32 = 30;

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

enum Entry {
    Loaded(Arc<TableManager>),
    Broken(String),
}

pub struct Engine {
    /// Follows the backend in use (`crate::cluster`).
    pool: SharedPool,
    tables: RwLock<HashMap<TableKey, Entry>>,
    shutdown: CancellationToken,
    /// Reads of named tables (after DDL), merged (see `reload`).
    named_lane: Lane,
    /// Reads of the whole catalog, merged.
    catalog_lane: Lane,
    /// The order of reads that overlap, so an older answer never overwrites a newer one. Taken
    /// before `tables` when both are.
    tickets: Mutex<ReadTickets>,
    /// Whether the binlog watcher is following the backend's binlog right now. While it is,
    /// every committed row change reaches the managers from the binlog, so a write relayed
    /// through the proxy needs no poll of its own.
    binlog_following: Arc<AtomicBool>,
    /// Whether the managers count their tables' depth at each purge tick (the operator's page
    /// is served; `messaging::depth`).
    count_depths: Arc<AtomicBool>,
    /// A run of failed reloads (the backend away), logged once a minute, not every
    /// [`RELOAD_INTERVAL`].
    reload_failures: RepeatedFailure,
}

impl Engine {
    /// Creates the engine and loads the message tables; a backend that cannot be reached now is
    /// retried by the periodic reload.
    pub async fn start(backends: &Arc<Backends>, shutdown: CancellationToken) -> Arc<Engine> {
        let make = |backend: &crate::config::BackendTarget| {
            // Keep a couple of connections open: with a minimum of 0 mysql_async closes every
            // returned connection, and each poll or purge would pay a new login.
            let constraints = mysql_async::PoolConstraints::new(2, 16).unwrap_or_default();
            // Polls and purges name `timestamp` ids by instant; at UTC every instant has a
            // local time of its own (in a zone with daylight saving, one hour a year repeats,
            // and its second instants could not be named: acked rows there would never be
            // purged).
            let opts = backend
                .mysql_async_opts()
                .setup(vec!["SET time_zone = '+00:00'"])
                .pool_opts(mysql_async::PoolOpts::default().with_constraints(constraints));
            mysql_async::Pool::new(opts)
        };
        let engine = Arc::new(Engine {
            pool: SharedPool::new(backends, Box::new(make), shutdown.clone()),
            tables: RwLock::new(HashMap::new()),
            shutdown,
            named_lane: Lane::default(),
            catalog_lane: Lane::default(),
            tickets: Mutex::new(ReadTickets::default()),
            binlog_following: Arc::new(AtomicBool::new(false)),
            count_depths: Arc::new(AtomicBool::new(false)),
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
        let mut ticks: u32 = 0;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
                _ = self.shutdown.cancelled() => break,
            }
            ticks = ticks.wrapping_add(1);
            let reloaded = if self.binlog_following() && !ticks.is_multiple_of(CATALOG_SCAN_EVERY) {
                let loaded = self
                    .tables
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .keys()
                    .cloned()
                    .collect();
                self.reload_tables(loaded).await
            } else {
                self.reload().await
            };
            match reloaded {
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
    pub fn pool(&self) -> SharedPool {
        self.pool.clone()
    }

    /// Set by the binlog watcher whenever its mode changes. When it starts following, the
    /// catalog is read once more: DDL made before its start position is not in what it reads.
    pub fn set_binlog_following(self: &Arc<Self>, following: bool) {
        let was = self.binlog_following.swap(following, Ordering::AcqRel);
        if following && !was {
            let engine = self.clone();
            tokio::spawn(async move {
                if let Err(e) = engine.reload().await {
                    engine.reload_failures.failed(RELOAD_JOB, e);
                }
            });
        }
    }

    /// Has every table's depth counted at its purge tick (`messaging::depth`): the operator's
    /// page turns this on. One capped statement per table per `vt_poller_interval`.
    pub fn set_count_depths(&self, on: bool) {
        self.count_depths.store(on, Ordering::Relaxed);
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

    /// Whether `sql` names a table the registry holds (loaded or broken), as a whole identifier
    /// (or, for a name no bare identifier can spell, anywhere): the cheap test that tells DDL on
    /// plain tables from DDL that may change a message table.
    pub fn names_a_table(&self, sql: &[u8]) -> bool {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables.keys().any(|(_, name)| {
            if is_bare_identifier(name.as_bytes()) {
                names_identifier(sql, name.as_bytes())
            } else {
                contains_ignore_ascii_case(sql, name.as_bytes())
                    || contains_ignore_ascii_case(sql, name.replace('`', "``").as_bytes())
            }
        })
    }

    /// Whether the registry holds a table of this name in any database.
    pub fn holds_name(&self, name: &str) -> bool {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables.keys().any(|(_, n)| n == name)
    }

    /// The tables the registry holds in database `schema`.
    pub fn tables_in(&self, schema: &str) -> Vec<TableKey> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables
            .keys()
            .filter(|(s, _)| s == schema)
            .cloned()
            .collect()
    }

    /// Reads every message table from `information_schema` and brings the managers in line:
    /// new tables get a manager, changed ones get the new definition, dropped ones are stopped.
    /// Merged with the other requests made meanwhile (see `reload::Lane`).
    pub async fn reload(self: &Arc<Self>) -> Result<(), ReloadError> {
        self.request(Scope::All).await
    }

    /// [`Engine::reload`] for these tables only: each is loaded, changed, or (not, or no longer,
    /// a message table) forgotten. Costs about a `SELECT 1` however large the catalog, and
    /// never waits for a read of the whole catalog.
    pub async fn reload_tables(
        self: &Arc<Self>,
        keys: BTreeSet<TableKey>,
    ) -> Result<(), ReloadError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.request(Scope::Tables(keys)).await
    }

    /// Joins the lane of `scope` and waits for a read that began after this call.
    async fn request(self: &Arc<Self>, scope: Scope) -> Result<(), ReloadError> {
        let all = scope == Scope::All;
        let (tx, rx) = oneshot::channel();
        let lane = if all {
            &self.catalog_lane
        } else {
            &self.named_lane
        };
        if lane.join(scope, tx) {
            // The runner is a task of its own: a session that stops waiting (its client gone)
            // cannot leave the lane without one.
            let engine = self.clone();
            tokio::spawn(async move { engine.run_lane(all).await });
        }
        rx.await.unwrap_or(Err(ReloadError::Abandoned))
    }

    /// Reads for a lane until nobody waits.
    async fn run_lane(self: Arc<Self>, all: bool) {
        let lane = if all {
            &self.catalog_lane
        } else {
            &self.named_lane
        };
        while let Some((scope, waiters)) = lane.next() {
            let result = self.read_and_apply(scope).await;
            for waiter in waiters {
                let _ = waiter.send(result.clone());
            }
        }
    }

    /// One read of `scope`, applied to the registry where nothing newer was.
    async fn read_and_apply(&self, scope: Scope) -> Result<(), ReloadError> {
        let all = scope == Scope::All;
        let ticket = self
            .tickets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .begin();
        let started = Instant::now();
        let read = async {
            let mut conn = self.pool.get_conn().await?;
            match &scope {
                Scope::All => catalog::read_all(&mut conn).await,
                Scope::Tables(keys) => {
                    let keys: Vec<TableKey> = keys.iter().cloned().collect();
                    catalog::read_tables(&mut conn, &keys).await
                }
            }
        }
        .await;
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let found = match read {
            Ok(found) => found,
            Err(e) => {
                tickets.end(ticket, false);
                return Err(ReloadError::Backend(Arc::new(e)));
            }
        };
        debug!(
            "registry read of {} found {} message table(s) in {:?}",
            describe(&scope),
            found.len(),
            started.elapsed()
        );
        let mut found: HashMap<TableKey, Result<MessageTable, String>> =
            found.into_iter().collect();
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        let keys: BTreeSet<TableKey> = match scope {
            Scope::All => tables.keys().cloned().collect(),
            Scope::Tables(keys) => keys,
        };
        let keys: BTreeSet<TableKey> = keys.into_iter().chain(found.keys().cloned()).collect();
        for key in keys {
            if tickets.claim(ticket, &key) {
                let result = found.remove(&key);
                self.apply(&mut tables, key, result);
            }
        }
        tickets.end(ticket, all);
        Ok(())
    }

    /// Brings one table's entry in line with what a read found (`None`: not a message table).
    fn apply(
        &self,
        tables: &mut HashMap<TableKey, Entry>,
        key: TableKey,
        found: Option<Result<MessageTable, String>>,
    ) {
        let entry = match (found, tables.remove(&key)) {
            (Some(Ok(def)), Some(Entry::Loaded(m))) => {
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
            (Some(Ok(def)), _) => {
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
                    self.count_depths.clone(),
                ))
            }
            (Some(Err(why)), old) => {
                let unchanged = matches!(&old, Some(Entry::Broken(w)) if *w == why);
                if !unchanged {
                    warn!("{why}");
                }
                if let Some(Entry::Loaded(m)) = old {
                    m.stop();
                }
                Entry::Broken(why)
            }
            (None, Some(Entry::Loaded(m))) => {
                info!(
                    "message table `{}`.`{}` is gone; its streams end",
                    key.0, key.1
                );
                m.stop();
                return;
            }
            (None, _) => return,
        };
        tables.insert(key, entry);
    }
}

/// A read's scope for the log: the tables it names (a few at most).
fn describe(scope: &Scope) -> String {
    const NAMED: usize = 5;
    match scope {
        Scope::All => "the whole catalog".to_string(),
        Scope::Tables(keys) => {
            let mut names: Vec<String> = keys
                .iter()
                .take(NAMED)
                .map(|(schema, name)| super::table::qualify(schema, name))
                .collect();
            if keys.len() > NAMED {
                names.push(format!("and {} more", keys.len() - NAMED));
            }
            names.join(", ")
        }
    }
}
