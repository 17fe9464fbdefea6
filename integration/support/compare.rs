//! "Clients cannot tell the difference": run the same script directly against MariaDB and through
//! the proxy, record everything a client can observe, and require the two transcripts to be equal.
//!
//! Both halves use the same database name (dropped and recreated in between), so even the schema
//! name in column metadata matches. Scripts must avoid values that differ between runs by nature
//! (connection ids, timestamps, auto-increment values of a shared table...).

use std::fmt;
use std::hash::{Hash, Hasher};

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::*;
use mysql_async::{
    BinaryProtocol, Column, Conn, Opts, OptsBuilder, Params, QueryResult, Row, TextProtocol, Value,
};

use super::{MariaDb, Proxy};

/// Which way a script talks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Direct,
    Proxy,
}

/// Where to connect: host port plus database.
#[derive(Debug, Clone)]
pub struct Target {
    pub side: Side,
    pub port: u16,
    pub db: String,
}

impl Target {
    pub fn direct(server: &MariaDb, db: &str) -> Target {
        Target {
            side: Side::Direct,
            port: server.port(),
            db: db.into(),
        }
    }

    pub fn proxy(proxy: &Proxy, db: &str) -> Target {
        Target {
            side: Side::Proxy,
            port: proxy.port(),
            db: db.into(),
        }
    }

    /// Options for root without a password, with this target's database.
    pub fn opts(&self) -> OptsBuilder {
        opts(self.port, "root", None, Some(&self.db))
    }

    pub async fn conn(&self) -> Conn {
        self.conn_with(self.opts()).await
    }

    pub async fn conn_with(&self, opts: OptsBuilder) -> Conn {
        match Conn::new(opts).await {
            Ok(conn) => conn,
            Err(e) => panic!("connect {:?} on port {}: {e:?}", self.side, self.port),
        }
    }
}

/// Client options used throughout the suite.
///
/// `prefer_socket(false)` matters: by default mysql_async reads `@@socket` after connecting to a
/// loopback address and silently reconnects over that Unix socket, which would bypass the proxy
/// (see `session::default_client_options_stay_on_the_proxy`).
pub fn opts(port: u16, user: &str, pass: Option<&str>, db: Option<&str>) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some(user))
        .pass(pass)
        .db_name(db)
        .prefer_socket(false)
        .stmt_cache_size(0)
}

pub fn opts_to(opts: OptsBuilder) -> Opts {
    Opts::from(opts)
}

/// One server error, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Server {
        code: u16,
        state: String,
        message: String,
    },
    /// Not a server error: only the kind is compared (IO error texts vary with timing).
    Client(String),
}

impl Failure {
    pub fn of(e: &mysql_async::Error) -> Failure {
        match e {
            mysql_async::Error::Server(s) => Failure::Server {
                code: s.code,
                state: s.state.clone(),
                message: s.message.clone(),
            },
            mysql_async::Error::Io(_) => Failure::Client("io".into()),
            mysql_async::Error::Driver(d) => {
                let d = format!("{d:?}");
                Failure::Client(format!(
                    "driver: {}",
                    d.split(['(', ' ', '{']).next().unwrap_or("")
                ))
            }
            mysql_async::Error::Other(_) => Failure::Client("other".into()),
            mysql_async::Error::Url(_) => Failure::Client("url".into()),
        }
    }

    pub fn code(&self) -> Option<u16> {
        match self {
            Failure::Server { code, .. } => Some(*code),
            Failure::Client(_) => None,
        }
    }
}

/// Everything a column-definition packet says, on one line when printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    pub schema: String,
    pub table: String,
    pub org_table: String,
    pub name: String,
    pub org_name: String,
    pub column_type: ColumnType,
    pub flags: ColumnFlags,
    pub character_set: u16,
    pub column_length: u32,
    pub decimals: u8,
}

impl From<&Column> for ColumnInfo {
    fn from(c: &Column) -> Self {
        ColumnInfo {
            schema: c.schema_str().into_owned(),
            table: c.table_str().into_owned(),
            org_table: c.org_table_str().into_owned(),
            name: c.name_str().into_owned(),
            org_name: c.org_name_str().into_owned(),
            column_type: c.column_type(),
            flags: c.flags(),
            character_set: c.character_set(),
            column_length: c.column_length(),
            decimals: c.decimals(),
        }
    }
}

impl fmt::Debug for ColumnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} (org {:?}) table {:?} (org {:?}) schema {:?}: {:?} flags [{:?}] charset {} length {} decimals {}",
            self.name,
            self.org_name,
            self.table,
            self.org_table,
            self.schema,
            self.column_type,
            self.flags,
            self.character_set,
            self.column_length,
            self.decimals
        )
    }
}

pub fn column_infos(columns: &[Column]) -> Vec<ColumnInfo> {
    columns.iter().map(ColumnInfo::from).collect()
}

/// One result set with everything mysql_async exposes about it.
#[derive(Clone, PartialEq)]
pub struct ResultSet {
    pub columns: Vec<ColumnInfo>,
    pub rows: Vec<Vec<Value>>,
    pub affected_rows: u64,
    pub last_insert_id: Option<u64>,
    pub warnings: u16,
    pub info: String,
    /// The last OK packet (status flags, session-state changes...), as Debug text.
    pub ok_packet: Option<String>,
}

impl fmt::Debug for ResultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  result set: affected_rows {} last_insert_id {:?} warnings {} info {:?}",
            self.affected_rows, self.last_insert_id, self.warnings, self.info
        )?;
        for c in &self.columns {
            writeln!(f, "    column {c:?}")?;
        }
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(show_value).collect();
            writeln!(f, "    row [{}]", cells.join(", "))?;
        }
        if let Some(ok) = &self.ok_packet {
            writeln!(f, "    last ok packet {ok}")?;
        }
        Ok(())
    }
}

/// The outcome of one statement (possibly several result sets, possibly an error after some).
#[derive(Clone)]
pub struct Outcome {
    /// The statement, shortened (not part of the comparison).
    pub statement: String,
    pub sets: Vec<ResultSet>,
    pub error: Option<Failure>,
}

impl PartialEq for Outcome {
    fn eq(&self, other: &Self) -> bool {
        self.sets == other.sets && self.error == other.error
    }
}

impl fmt::Debug for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        for s in &self.sets {
            write!(f, "{s:?}")?;
        }
        if let Some(e) = &self.error {
            writeln!(f, "  error {e:?}")?;
        }
        Ok(())
    }
}

impl Outcome {
    pub fn rows(&self) -> &[Vec<Value>] {
        self.sets.first().map(|s| &s.rows[..]).unwrap_or(&[])
    }

    pub fn columns(&self) -> &[ColumnInfo] {
        self.sets.first().map(|s| &s.columns[..]).unwrap_or(&[])
    }

    /// Panics unless the statement succeeded.
    pub fn ok(self) -> Outcome {
        assert_eq!(
            self.error, None,
            "statement failed: {}\n{self:?}",
            self.statement
        );
        self
    }
}

/// Lossless, readable rendering of a value (`Value`'s own Debug cuts strings at 8 bytes, which
/// would hide differences: transcripts are compared as text).
pub fn show_value(v: &Value) -> String {
    match v {
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => format!("{s:?}"),
            Err(_) => format!(
                "x'{}'",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            ),
        },
        other => format!("{other:?}"),
    }
}

/// Large values are recorded as length + hash so transcripts stay printable.
fn shrink(v: Value) -> Value {
    match v {
        Value::Bytes(b) if b.len() > 2048 => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            b.hash(&mut h);
            Value::Bytes(format!("<{} bytes, hash {:016x}>", b.len(), h.finish()).into_bytes())
        }
        v => v,
    }
}

fn row_values(row: Row) -> Vec<Value> {
    row.unwrap().into_iter().map(shrink).collect()
}

async fn drain<P: mysql_async::prelude::Protocol>(mut qr: QueryResult<'_, '_, P>) -> Outcome {
    let mut sets = Vec::new();
    let mut error = None;
    while let Some(columns) = qr.columns() {
        // The counters describe an OK packet. Before the rows of a result set are read they are
        // stale (mysql_async even shows the COM_STMT_PREPARE reply there), so they are recorded
        // for row-less results only.
        let ok = columns.is_empty();
        let mut set = ResultSet {
            columns: column_infos(&columns),
            rows: Vec::new(),
            affected_rows: if ok { qr.affected_rows() } else { 0 },
            last_insert_id: if ok { qr.last_insert_id() } else { None },
            warnings: if ok { qr.warnings() } else { 0 },
            info: if ok {
                qr.info().into_owned()
            } else {
                String::new()
            },
            ok_packet: None,
        };
        match qr.collect::<Row>().await {
            Ok(rows) => {
                set.rows = rows.into_iter().map(row_values).collect();
                sets.push(set);
            }
            Err(e) => {
                sets.push(set);
                error = Some(Failure::of(&e));
                break;
            }
        }
    }
    if error.is_none() {
        if let Err(e) = qr.drop_result().await {
            error = Some(Failure::of(&e));
        }
    }
    Outcome {
        statement: String::new(),
        sets,
        error,
    }
}

/// Runs `sql` with the text protocol and records every result set.
pub async fn query(conn: &mut Conn, sql: &str) -> Outcome {
    let outcome = match conn.query_iter(sql).await {
        Ok(qr) => drain::<TextProtocol>(qr).await,
        Err(e) => Outcome {
            statement: String::new(),
            sets: Vec::new(),
            error: Some(Failure::of(&e)),
        },
    };
    let mut outcome = with_status(conn, outcome);
    outcome.statement = short(sql);
    outcome
}

/// Prepares `sql` (binary protocol), executes it with `params` and records the statement's
/// parameter/column metadata and every result set.
pub async fn exec(conn: &mut Conn, sql: &str, params: Params) -> (Option<StmtMeta>, Outcome) {
    let stmt = match conn.prep(sql).await {
        Ok(stmt) => stmt,
        Err(e) => {
            return (
                None,
                Outcome {
                    statement: short(sql),
                    sets: Vec::new(),
                    error: Some(Failure::of(&e)),
                },
            )
        }
    };
    let meta = StmtMeta {
        params: column_infos(stmt.params()),
        columns: column_infos(stmt.columns()),
    };
    let outcome = match conn.exec_iter(&stmt, params).await {
        Ok(qr) => drain::<BinaryProtocol>(qr).await,
        Err(e) => Outcome {
            statement: String::new(),
            sets: Vec::new(),
            error: Some(Failure::of(&e)),
        },
    };
    let mut outcome = with_status(conn, outcome);
    outcome.statement = short(sql);
    let _ = conn.close(stmt).await;
    (Some(meta), outcome)
}

fn with_status(conn: &Conn, mut outcome: Outcome) -> Outcome {
    let ok = conn.last_ok_packet().map(|ok| format!("{ok:?}"));
    if let Some(last) = outcome.sets.last_mut() {
        last.ok_packet = ok;
    }
    outcome
}

/// What COM_STMT_PREPARE told the client.
#[derive(Debug, Clone, PartialEq)]
pub struct StmtMeta {
    pub params: Vec<ColumnInfo>,
    pub columns: Vec<ColumnInfo>,
}

/// One recorded observation.
#[derive(Clone, PartialEq)]
pub struct Entry {
    pub label: String,
    pub value: String,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.label, self.value)
    }
}

/// Records what a script observes; handed to the script once per side.
pub struct Rec {
    pub target: Target,
    entries: Vec<Entry>,
}

impl Rec {
    pub fn side(&self) -> Side {
        self.target.side
    }

    /// A new connection to this side (root, the test's database).
    pub async fn conn(&self) -> Conn {
        self.target.conn().await
    }

    /// Records any observation (anything Debug).
    pub fn note(&mut self, label: &str, value: impl fmt::Debug) {
        self.entries.push(Entry {
            label: label.to_string(),
            value: format!("{value:?}"),
        });
    }

    /// Text-protocol query; records and returns the outcome.
    pub async fn query(&mut self, conn: &mut Conn, sql: &str) -> Outcome {
        let outcome = query(conn, sql).await;
        self.note(&format!("query {}", short(sql)), &outcome);
        outcome
    }

    /// Like [`Rec::query`], with a label for statements whose text differs between the two runs
    /// (e.g. `KILL <connection id>`).
    pub async fn query_as(&mut self, label: &str, conn: &mut Conn, sql: &str) -> Outcome {
        let outcome = query(conn, sql).await;
        self.note(label, &outcome);
        outcome
    }

    /// Prepared statement; records and returns the outcome.
    pub async fn exec(&mut self, conn: &mut Conn, sql: &str, params: impl Into<Params>) -> Outcome {
        let (meta, outcome) = exec(conn, sql, params.into()).await;
        self.note(&format!("prepare {}", short(sql)), &meta);
        self.note(&format!("execute {}", short(sql)), &outcome);
        outcome
    }
}

fn short(sql: &str) -> String {
    let one_line: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 100 {
        format!("{}…", one_line.chars().take(100).collect::<String>())
    } else {
        one_line
    }
}

/// (Re)creates `db` on `server`, empty.
pub async fn fresh_database(server: &MariaDb, db: &str) {
    let mut conn = Target::direct(server, "test").conn().await;
    conn.query_drop(format!("DROP DATABASE IF EXISTS `{db}`"))
        .await
        .expect("drop test database");
    conn.query_drop(format!("CREATE DATABASE `{db}`"))
        .await
        .expect("create test database");
    let _ = conn.disconnect().await;
}

/// Runs `script` directly and then through `proxy` (same database name, recreated in between) and
/// panics with the first difference. Returns the direct transcript.
pub async fn same_both_ways<F>(server: &MariaDb, proxy: &Proxy, db: &str, script: F) -> Vec<Entry>
where
    F: AsyncFn(&mut Rec),
{
    let direct = run_side(Target::direct(server, db), server, &script).await;
    if std::env::var_os("INTEG_DUMP").is_some() {
        eprintln!("=== transcript of {db} (direct) ===\n{direct:#?}");
    }
    let through = run_side(Target::proxy(proxy, db), server, &script).await;
    assert_same(&direct, &through, proxy);
    direct
}

/// Runs `script` against one side only, recording (used by tests that check the direct half).
pub async fn run_side<F>(target: Target, server: &MariaDb, script: &F) -> Vec<Entry>
where
    F: AsyncFn(&mut Rec),
{
    fresh_database(server, &target.db).await;
    let mut rec = Rec {
        target,
        entries: Vec::new(),
    };
    script(&mut rec).await;
    rec.entries
}

pub fn assert_same(direct: &[Entry], through: &[Entry], proxy: &Proxy) {
    for (i, (d, p)) in direct.iter().zip(through).enumerate() {
        if d != p {
            panic!(
                "step {i} differs between MariaDB and the proxy\n\
                 === direct: {}\n{}\n=== through the proxy: {}\n{}\n\
                 --- proxy stderr (tail) ---\n{}",
                d.label,
                d.value,
                p.label,
                p.value,
                tail_str(&proxy.log(), 4000)
            );
        }
    }
    if direct.len() != through.len() {
        panic!(
            "direct run recorded {} steps, the proxy run {}\nextra: {:#?}",
            direct.len(),
            through.len(),
            if direct.len() > through.len() {
                &direct[through.len()..]
            } else {
                &through[direct.len()..]
            }
        );
    }
}

pub fn tail_str(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Compares two multi-line texts and panics at the first differing line, with context.
pub fn assert_same_text(what: &str, direct: &str, through: &str) {
    if direct == through {
        return;
    }
    let d: Vec<&str> = direct.lines().collect();
    let p: Vec<&str> = through.lines().collect();
    let first = (0..d.len().max(p.len()))
        .find(|&i| d.get(i) != p.get(i))
        .unwrap_or(0);
    let from = first.saturating_sub(12);
    panic!(
        "{what}: first difference at line {}\n--- direct ---\n{}\n--- through the proxy ---\n{}",
        first + 1,
        d[from.min(d.len())..(first + 3).min(d.len())].join("\n"),
        p[from.min(p.len())..(first + 3).min(p.len())].join("\n"),
    );
}
