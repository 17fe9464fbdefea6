//! What the messaging tests share: a test environment (the shared MariaDB, a fresh proxy, a
//! database of the test's own), a stream client, and small helpers to read rows straight from
//! the server.
//!
//! A stream is one never-ending result set. mysql_async cannot close a connection that is in the
//! middle of a result set: dropping the `Conn` spawns a task that first drains the result — for a
//! stream, forever — so the socket would stay open until the test ends. [`Stream`] therefore runs
//! its connection on a thread with its own single-threaded runtime; [`Stream::close`] stops that
//! runtime, which drops the connection and its socket there and then (a client that walks away).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::*;
use mysql_async::{Column, Conn, Row, Value};
use tokio::sync::{mpsc, oneshot};

use crate::support::process::tail;
use crate::support::{opts, Failure, MariaDb, Proxy};

/// Unix time in nanoseconds, the unit of `time_next` / `time_acked`.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

pub const SEC: i64 = 1_000_000_000;

/// One test's world: the shared server, a proxy of its own, and a database of its own.
pub struct Env {
    pub server: &'static MariaDb,
    pub proxy: Proxy,
    pub db: String,
}

impl Env {
    /// Creates (afresh) database `db` on the shared server and starts a proxy in front of it.
    pub async fn new(db: &str) -> Env {
        Env::on(MariaDb::shared(), db, &[]).await
    }

    /// Like [`Env::new`], on a MariaDB of the test's own, for tests that load the server hard
    /// enough to disturb the others. Call [`MariaDb::stop`] on `env.server` at the end (a test
    /// that panics leaves it to the end of the test process).
    pub async fn private(db: &str) -> Env {
        Env::private_with(db, &[]).await
    }

    /// [`Env::private`] with `args` for the proxy.
    pub async fn private_with(db: &str, args: &[&str]) -> Env {
        let server: &'static MariaDb = Box::leak(Box::new(MariaDb::start()));
        Env::on(server, db, args).await
    }

    async fn on(server: &'static MariaDb, db: &str, args: &[&str]) -> Env {
        Env::on_url(server, db, &server.backend_url(), args).await
    }

    /// Like [`Env::new`], with the proxy's `--backend` set to `backend_url` (which must lead to
    /// `server`), e.g. the server's Unix socket.
    pub async fn on_url(
        server: &'static MariaDb,
        db: &str,
        backend_url: &str,
        args: &[&str],
    ) -> Env {
        Env::on_url_with_config(server, db, backend_url, args, None).await
    }

    /// [`Env::new`] with `args` and a config file of `config_toml` (users, `[admin]`, ...).
    pub async fn with_config(db: &str, args: &[&str], config_toml: &str) -> Env {
        let server = MariaDb::shared();
        Env::on_url_with_config(server, db, &server.backend_url(), args, Some(config_toml)).await
    }

    async fn on_url_with_config(
        server: &'static MariaDb,
        db: &str,
        backend_url: &str,
        args: &[&str],
        config_toml: Option<&str>,
    ) -> Env {
        {
            let mut c = Conn::new(opts(server.port(), "root", None, None))
                .await
                .expect("connect to the test MariaDB");
            // Every proxy of every messaging test keeps a few backend connections (engine,
            // binlog, streams); the default limit of 151 is too tight when they run at once.
            c.query_drop("SET GLOBAL max_connections = 2000")
                .await
                .expect("raise max_connections");
            c.query_drop(format!("DROP DATABASE IF EXISTS `{db}`"))
                .await
                .expect("drop the test database");
            c.query_drop(format!("CREATE DATABASE `{db}`"))
                .await
                .expect("create the test database");
            let _ = c.disconnect().await;
        }
        let proxy = start_proxy(backend_url, args, config_toml);
        Env {
            server,
            proxy,
            db: db.into(),
        }
    }

    /// Another proxy on the same server (the same database).
    pub fn second_proxy(&self) -> Proxy {
        start_proxy(&self.server.backend_url(), &[], None)
    }

    /// The last lines of the proxy's log, for failure messages.
    pub fn log(&self) -> String {
        log_tail(&self.proxy)
    }

    /// A connection through the proxy, with the test's database selected.
    pub async fn proxy_conn(&self) -> Conn {
        connect(self.proxy.port(), &self.db).await
    }

    /// A connection straight to the server, with the test's database selected.
    pub async fn direct_conn(&self) -> Conn {
        connect(self.server.port(), &self.db).await
    }

    /// Runs one statement through a fresh proxy connection; panics on failure.
    pub async fn via_proxy(&self, sql: &str) -> u64 {
        let mut c = self.proxy_conn().await;
        let n = exec(&mut c, sql)
            .await
            .unwrap_or_else(|e| panic!("through the proxy: {sql}: {e:?}\n{}", self.log()));
        let _ = c.disconnect().await;
        n
    }

    /// DDL through the proxy, then `DO 0` on the same connection before closing it.
    ///
    /// The proxy answers a DDL statement first and reloads its message tables after; a session
    /// reads its next command only once that is done, so the `DO 0` returns when the new
    /// definition is loaded. Whether *another* connection may use the table as soon as the DDL
    /// is answered is a test of its own (`errors::ddl_through_the_proxy_is_visible_to_other_sessions`).
    pub async fn ddl(&self, sql: &str) {
        let mut c = self.proxy_conn().await;
        exec(&mut c, sql)
            .await
            .unwrap_or_else(|e| panic!("through the proxy: {sql}: {e:?}\n{}", self.log()));
        exec(&mut c, "DO 0").await.expect("DO 0 after DDL");
        let _ = c.disconnect().await;
    }

    /// Runs one statement straight on the server; panics on failure.
    pub async fn direct(&self, sql: &str) -> u64 {
        let mut c = self.direct_conn().await;
        let n = exec(&mut c, sql)
            .await
            .unwrap_or_else(|e| panic!("directly: {sql}: {e:?}"));
        let _ = c.disconnect().await;
        n
    }

    /// `STREAM * FROM table` through this env's proxy; panics unless the column definitions come.
    pub async fn stream(&self, table: &str) -> Stream {
        self.stream_on(&self.proxy, table).await
    }

    /// `STREAM * FROM table` through `proxy`.
    pub async fn stream_on(&self, proxy: &Proxy, table: &str) -> Stream {
        let sql = format!("STREAM * FROM {table}");
        match Stream::open(proxy.port(), &self.db, &sql).await {
            Ok(s) => s,
            Err(e) => panic!("{sql}: {e:?}\n--- proxy log ---\n{}", log_tail(proxy)),
        }
    }

    /// What the proxy says about `table` in `SHOW MESSAGE TABLES` (through `proxy`): the
    /// counters a test waits on instead of sleeping (a stream the proxy has noticed is gone,
    /// rows it has seen and cached). `None` while the table is not listed.
    pub async fn table_counts_on(&self, proxy: &Proxy, table: &str) -> Option<TableCounts> {
        let mut c = connect(proxy.port(), &self.db).await;
        let rows: Vec<Row> = c
            .query("SHOW MESSAGE TABLES")
            .await
            .unwrap_or_else(|e| panic!("SHOW MESSAGE TABLES: {e}"));
        let _ = c.disconnect().await;
        let count = |row: &Row, column: &str| row.get::<Option<u64>, _>(column).flatten();
        rows.iter()
            .find(|r| {
                r.get::<String, _>("Schema").as_deref() == Some(self.db.as_str())
                    && r.get::<String, _>("Name").as_deref() == Some(table)
            })
            .map(|r| TableCounts {
                subscribers: count(r, "Subscribers").unwrap_or(0),
                cached: count(r, "Cached").unwrap_or(0),
                in_flight: count(r, "In_flight").unwrap_or(0),
            })
    }

    /// Waits up to 20 s until `SHOW MESSAGE TABLES` on this env's proxy shows `table` with
    /// counts for which `done` holds; panics with `what`, the last counts and the log if not.
    pub async fn wait_counts(&self, table: &str, what: &str, done: impl Fn(&TableCounts) -> bool) {
        self.wait_counts_on(&self.proxy, table, what, done).await
    }

    /// [`Env::wait_counts`] through `proxy`.
    pub async fn wait_counts_on(
        &self,
        proxy: &Proxy,
        table: &str,
        what: &str,
        done: impl Fn(&TableCounts) -> bool,
    ) {
        let mut last = None;
        let reached = crate::support::eventually(20, async || {
            last = self.table_counts_on(proxy, table).await;
            last.as_ref().is_some_and(&done)
        })
        .await;
        assert!(
            reached,
            "{what}: not within 20 s (last SHOW MESSAGE TABLES counts of {table}: {last:?})\n{}",
            log_tail(proxy)
        );
    }

    /// The state columns of every row of `table`, straight from the server, by id.
    pub async fn states(&self, table: &str) -> BTreeMap<i64, RowState> {
        let mut c = self.direct_conn().await;
        type StateRow = (i64, Option<i64>, Option<i64>, Option<i64>);
        let rows: Vec<StateRow> = c
            .query(format!(
                "SELECT id, epoch, time_next, time_acked FROM `{table}` ORDER BY id"
            ))
            .await
            .unwrap_or_else(|e| panic!("read {table}: {e}"));
        let _ = c.disconnect().await;
        rows.into_iter()
            .map(|(id, epoch, time_next, time_acked)| {
                (
                    id,
                    RowState {
                        epoch,
                        time_next,
                        time_acked,
                    },
                )
            })
            .collect()
    }

    /// The state columns of one row (panics if it does not exist).
    pub async fn state(&self, table: &str, id: i64) -> RowState {
        self.states(table)
            .await
            .remove(&id)
            .unwrap_or_else(|| panic!("row {id} of {table} does not exist"))
    }

    /// Every value of `SELECT <cols> FROM table WHERE id = <id>` straight from the server (text
    /// protocol, as a stream sends them).
    pub async fn select_row(&self, cols: &str, table: &str, id: i64) -> Vec<Value> {
        let mut c = self.direct_conn().await;
        let row: Option<Row> = c
            .query_first(format!("SELECT {cols} FROM `{table}` WHERE id = {id}"))
            .await
            .unwrap_or_else(|e| panic!("select row {id}: {e}"));
        let _ = c.disconnect().await;
        row.unwrap_or_else(|| panic!("row {id} of {table} does not exist"))
            .unwrap()
    }

    /// The column definitions the server itself gives for `SELECT <cols> FROM table LIMIT 0`.
    pub async fn server_columns(&self, cols: &str, table: &str) -> Vec<Column> {
        let mut c = self.direct_conn().await;
        let columns = {
            let result = c
                .query_iter(format!("SELECT {cols} FROM `{table}` LIMIT 0"))
                .await
                .unwrap_or_else(|e| panic!("select columns: {e}"));
            let columns = result.columns().map(|c| c.to_vec()).unwrap_or_default();
            result.drop_result().await.expect("drop result");
            columns
        };
        let _ = c.disconnect().await;
        columns
    }
}

/// `Proxy::start`, checked: under heavy parallelism another process can take the free port
/// between the harness picking it and the proxy binding it; the harness then sees *that*
/// process accept connections and returns a proxy that has already exited ("cannot listen ...
/// Address already in use"). Retry in that case: the proxy says it listens, or exits.
fn start_proxy(backend_url: &str, args: &[&str], config_toml: Option<&str>) -> Proxy {
    for _ in 0..3 {
        let proxy = Proxy::start(backend_url, args, config_toml);
        let deadline = Instant::now() + Duration::from_secs(20);
        while proxy.is_alive()
            && !proxy.log().contains("msgproxy listening on")
            && Instant::now() < deadline
        {
            // How often to look, not a wait for something to happen.
            std::thread::sleep(Duration::from_millis(20));
        }
        if proxy.is_alive() {
            return proxy;
        }
        eprintln!(
            "msgproxy exited right after starting, retrying: {}",
            log_tail(&proxy)
        );
    }
    panic!("msgproxy did not stay up in 3 attempts");
}

pub fn log_tail(proxy: &Proxy) -> String {
    tail(&proxy.log_path(), 6000)
}

pub async fn connect(port: u16, db: &str) -> Conn {
    match tokio::time::timeout(
        Duration::from_secs(15),
        Conn::new(opts(port, "root", None, Some(db))),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("connect to port {port}: {e}"),
        Err(_) => panic!("connect to port {port}: no answer within 15 s"),
    }
}

/// Runs one statement; returns its affected rows.
pub async fn exec(conn: &mut Conn, sql: &str) -> Result<u64, Failure> {
    match tokio::time::timeout(Duration::from_secs(15), conn.query_drop(sql)).await {
        Ok(Ok(())) => Ok(conn.affected_rows()),
        Ok(Err(e)) => Err(Failure::of(&e)),
        Err(_) => panic!("{sql}: no answer within 15 s (hang)"),
    }
}

/// `ACK table ids` on `conn`; returns the affected rows, panics on error.
pub async fn ack(conn: &mut Conn, table: &str, ids: &[i64]) -> u64 {
    let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let sql = format!("ACK {table} {}", list.join(", "));
    exec(conn, &sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

/// Counters of one message table in `SHOW MESSAGE TABLES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableCounts {
    /// Open `STREAM`s on the table through this proxy (a closed one counts until the proxy has
    /// noticed).
    pub subscribers: u64,
    /// Due messages in the proxy's cache, not yet handed to a stream.
    pub cached: u64,
    /// Messages handed to a stream whose claim has not finished.
    pub in_flight: u64,
}

/// `time_next`, `epoch` and `time_acked` of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowState {
    pub epoch: Option<i64>,
    pub time_next: Option<i64>,
    pub time_acked: Option<i64>,
}

/// One message as a stream delivered it.
#[derive(Debug, Clone)]
pub struct Msg {
    pub id: i64,
    /// Every column of the row, as the text protocol carried it.
    pub values: Vec<Value>,
    /// When the test received it (the row was claimed before this).
    pub at: Instant,
    pub at_ns: i64,
}

enum Event {
    Row(Msg),
    Failed(Failure),
    Ended,
}

/// A `STREAM * FROM t` connection (see the module doc for why it has a thread of its own).
pub struct Stream {
    pub columns: Vec<Column>,
    rx: mpsc::UnboundedReceiver<Event>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    sql: String,
}

impl Stream {
    /// Connects to `port` with database `db`, sends `sql`, and waits (at most 5 s) for the
    /// column definitions, which must come at once even when nothing is due.
    pub async fn open(port: u16, db: &str, sql: &str) -> Result<Stream, Failure> {
        Stream::open_with(port, db, &[], sql).await
    }

    /// Like [`Stream::open`], sending `before` (e.g. `SET workload='olap'`) on the same
    /// connection first.
    pub async fn open_with(
        port: u16,
        db: &str,
        before: &[&str],
        sql: &str,
    ) -> Result<Stream, Failure> {
        Stream::open_opts(opts(port, "root", None, Some(db)), before, sql).await
    }

    /// Like [`Stream::open_with`], connecting with `options` (e.g. over a Unix socket).
    pub async fn open_opts(
        options: mysql_async::OptsBuilder,
        before: &[&str],
        sql: &str,
    ) -> Result<Stream, Failure> {
        let (cols_tx, cols_rx) = oneshot::channel();
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let statement = sql.to_string();
        let before: Vec<String> = before.iter().map(|s| s.to_string()).collect();
        let thread = std::thread::Builder::new()
            .name("stream-client".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = run_stream(options, before, statement, cols_tx, tx) => {}
                    }
                });
                // Dropping the runtime drops the connection (and mysql_async's clean-up task):
                // the socket closes now.
                drop(rt);
            })
            .expect("start a stream thread");
        let mut stream = Stream {
            columns: Vec::new(),
            rx,
            stop: Some(stop_tx),
            thread: Some(thread),
            sql: sql.into(),
        };
        // Generous: a STREAM of 17 MiB (stream_sessions.rs) on a loaded machine took over 5 s.
        match tokio::time::timeout(Duration::from_secs(20), cols_rx).await {
            Ok(Ok(Ok(columns))) => {
                stream.columns = columns;
                Ok(stream)
            }
            Ok(Ok(Err(f))) => Err(f),
            Ok(Err(_)) => Err(Failure::Client("stream thread died".into())),
            Err(_) => Err(Failure::Client("no column definitions within 20 s".into())),
        }
    }

    /// The names of the stream's columns.
    pub fn column_names(&self) -> Vec<String> {
        self.columns
            .iter()
            .map(|c| c.name_str().into_owned())
            .collect()
    }

    /// The next message, or `None` if none arrives within `wait`. Panics if the stream ends or
    /// fails.
    pub async fn recv(&mut self, wait: Duration) -> Option<Msg> {
        match tokio::time::timeout(wait, self.rx.recv()).await {
            Err(_) => None,
            Ok(Some(Event::Row(m))) => Some(m),
            Ok(Some(Event::Failed(f))) => panic!("{}: the stream failed: {f:?}", self.sql),
            Ok(Some(Event::Ended)) | Ok(None) => {
                panic!("{}: the result set ended; a stream never ends", self.sql)
            }
        }
    }

    /// Like [`Stream::recv`] for a stream that is expected to break (its proxy or server is
    /// killed): the next message within `wait` (`Ok(None)`: none came), or how the stream ended.
    pub async fn recv_or_end(&mut self, wait: Duration) -> Result<Option<Msg>, String> {
        match tokio::time::timeout(wait, self.rx.recv()).await {
            Err(_) => Ok(None),
            Ok(Some(Event::Row(m))) => Ok(Some(m)),
            Ok(Some(Event::Failed(f))) => Err(format!("failed: {f:?}")),
            Ok(Some(Event::Ended)) => Err("the result set ended".into()),
            Ok(None) => Err("the stream thread is gone".into()),
        }
    }

    /// The messages that have already arrived, without waiting.
    pub async fn ready(&mut self) -> Vec<Msg> {
        let mut got = Vec::new();
        while let Ok(Some(m)) = self.recv_or_end(Duration::ZERO).await {
            got.push(m);
        }
        got
    }

    /// Exactly `n` messages within `wait` (panics, listing what came, if fewer arrive).
    pub async fn recv_n(&mut self, n: usize, wait: Duration) -> Vec<Msg> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut got = Vec::new();
        while got.len() < n {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.recv(left).await {
                Some(m) => got.push(m),
                None => panic!(
                    "{}: expected {n} messages within {wait:?}, got {}: ids {:?}",
                    self.sql,
                    got.len(),
                    ids(&got)
                ),
            }
        }
        got
    }

    /// Everything that arrives within `wait`.
    pub async fn drain(&mut self, wait: Duration) -> Vec<Msg> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return got;
            }
            match self.recv(left).await {
                Some(m) => got.push(m),
                None => return got,
            }
        }
    }

    /// Panics if any message arrives within `wait`.
    pub async fn expect_quiet(&mut self, wait: Duration, why: &str) {
        if let Some(m) = self.recv(wait).await {
            panic!(
                "{}: expected nothing within {wait:?} ({why}), got message {} {:?}",
                self.sql, m.id, m.values
            );
        }
    }

    /// Closes the connection at once, without COM_QUIT: the client walks away.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn run_stream(
    options: mysql_async::OptsBuilder,
    before: Vec<String>,
    sql: String,
    cols_tx: oneshot::Sender<Result<Vec<Column>, Failure>>,
    tx: mpsc::UnboundedSender<Event>,
) {
    let mut conn = match Conn::new(options).await {
        Ok(c) => c,
        Err(e) => {
            let _ = cols_tx.send(Err(Failure::of(&e)));
            return;
        }
    };
    for statement in &before {
        if let Err(e) = conn.query_drop(statement).await {
            let _ = cols_tx.send(Err(Failure::of(&e)));
            return;
        }
    }
    let mut result = match conn.query_iter(sql).await {
        Ok(r) => r,
        Err(e) => {
            let _ = cols_tx.send(Err(Failure::of(&e)));
            return;
        }
    };
    let columns = result.columns().map(|c| c.to_vec()).unwrap_or_default();
    let _ = cols_tx.send(Ok(columns));
    loop {
        match result.next().await {
            Ok(Some(row)) => {
                let values = row.unwrap();
                let id = values.first().map(value_i64).unwrap_or(i64::MIN);
                let msg = Msg {
                    id,
                    values,
                    at: Instant::now(),
                    at_ns: now_ns(),
                };
                if tx.send(Event::Row(msg)).is_err() {
                    return;
                }
            }
            Ok(None) => {
                let _ = tx.send(Event::Ended);
                return;
            }
            Err(e) => {
                let _ = tx.send(Event::Failed(Failure::of(&e)));
                return;
            }
        }
    }
}

/// An integer from a text-protocol value (`i64::MIN` if it is not one).
pub fn value_i64(v: &Value) -> i64 {
    match v {
        Value::Bytes(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(i64::MIN),
        Value::Int(i) => *i,
        Value::UInt(u) => *u as i64,
        _ => i64::MIN,
    }
}

/// A text value as a string (`"NULL"` for NULL).
pub fn value_str(v: &Value) -> String {
    match v {
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::NULL => "NULL".into(),
        other => format!("{other:?}"),
    }
}

pub fn ids(msgs: &[Msg]) -> Vec<i64> {
    msgs.iter().map(|m| m.id).collect()
}

/// How many times each id occurs.
pub fn counts(ids: impl IntoIterator<Item = i64>) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    for id in ids {
        *out.entry(id).or_insert(0) += 1;
    }
    out
}

/// Asserts that `got` holds every id of `expected` exactly once and nothing else.
pub fn assert_each_once(got: &[i64], expected: impl IntoIterator<Item = i64>, what: &str) {
    let want: BTreeMap<i64, usize> = expected.into_iter().map(|i| (i, 1)).collect();
    let have = counts(got.iter().copied());
    if have != want {
        let missing: Vec<i64> = want
            .keys()
            .filter(|k| !have.contains_key(k))
            .copied()
            .collect();
        let twice: Vec<(i64, usize)> = have
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, n)| (*k, *n))
            .collect();
        let unexpected: Vec<i64> = have
            .keys()
            .filter(|k| !want.contains_key(k))
            .copied()
            .collect();
        panic!(
            "{what}: expected each of {} ids exactly once; missing {missing:?}, \
             more than once {twice:?}, unexpected {unexpected:?} (got {} deliveries)",
            want.len(),
            got.len()
        );
    }
}

/// A table comment with the required options; `extra` is appended (e.g. `",vt_max_backoff=2"`).
pub fn comment(ack_wait: &str, batch: u32, poll: &str, extra: &str) -> String {
    format!(
        "vitess_message,vt_ack_wait={ack_wait},vt_purge_after=1,vt_batch_size={batch},\
         vt_cache_size=1000,vt_poller_interval={poll}{extra}"
    )
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}
