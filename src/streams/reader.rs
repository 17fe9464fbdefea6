//! A binlog reader: one binlog connection from a position, yielding the committed inserts of one
//! table as events, a transaction at a time, never mid-transaction.
//!
//! A group served by this proxy reads the binlog with one of its own (docs/STREAMS.md, "Reading
//! the binlog") from where it must resume, at its own pace, until it has caught up with the
//! table's shared reader (`shared.rs`, the same reader started at the binlog's end). The channel
//! to the group
//! is bounded, so a group far behind reads as it delivers and memory stays bounded (apart from
//! one transaction's rows of the table, held until its commit).
//!
//! - **Event ids**: the MariaDB GTID event gives the transaction's `seq_no`; an inserted row of
//!   the table is `seq_no << 24 | ordinal` ([`event_id`]), its ordinal counting the table's
//!   inserted rows in the transaction from 0.
//! - **Commit**: rows wait in the transaction's buffer until its XID event or `COMMIT` query; a
//!   `ROLLBACK` drops them. A standalone group (DDL) commits by itself.
//! - **Position**: each event carries where its transaction starts (its GTID event), so a group
//!   can resume at the transaction of its oldest unacked event.
//! - **XA transactions**: their rows are written at `XA PREPARE`, in a group of their own; they
//!   are held by XID and become events at `XA COMMIT` (ids from the commit's GTID: commit order),
//!   or are dropped at `XA ROLLBACK`. While one is prepared, the position the reader reports (and
//!   reconnects from) stays at its prepare, so a group that resumes sees its rows again.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts};
use mysql_common::binlog::events::{
    Event as BinlogEvent, EventData, QueryEvent, RotateEvent, RowsEventData, TableMapEvent,
};
use mysql_common::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType;
use mysql_common::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::binlog::statement::{classify, Statement};
use crate::binlog::xa::{is_one_phase, XaPrepare, Xid};
use crate::binlog::BinlogPosition;

/// Bits of an event id given to the row's ordinal within its transaction.
pub const ORDINAL_BITS: u32 = 24;
/// Most rows of one table one transaction may insert (2^24 = 16,777,216).
pub const MAX_ROWS_PER_TRANSACTION: u64 = 1 << ORDINAL_BITS;
/// The largest GTID `seq_no` an event id can carry (2^40 - 1, about 1.1e12 transactions).
pub const MAX_SEQ_NO: u64 = (1 << (64 - ORDINAL_BITS)) - 1;

/// The id of the `ordinal`th inserted row of the table in the transaction with GTID `seq_no`.
pub fn event_id(seq_no: u64, ordinal: u64) -> u64 {
    (seq_no << ORDINAL_BITS) | ordinal
}

/// The GTID `seq_no` an event id was made from.
pub fn seq_no_of(id: u64) -> u64 {
    id >> ORDINAL_BITS
}

/// Transactions a reader hands over ahead of its group (the channel's size). Memory: a group
/// holds at most its read-ahead of events, plus this many transactions' rows of the table in
/// the channel (it was 64: a replay of 1000-row transactions could hold 64,000 events there).
pub const QUEUE: usize = 8;

/// How often the server sends a heartbeat when it has nothing for the reader.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// A stream silent for this long is taken as broken.
const STALL: Duration = Duration::from_secs(10);
/// How often a reader that reads only other tables' transactions reports its position.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// One column of an event, as the table map describes it.
#[derive(Debug, Clone)]
pub struct ColumnSpec {
    pub name: String,
    pub ty: ColumnType,
    /// The table map's metadata for the column (`fsp` of temporal types is its first byte).
    pub meta: Box<[u8]>,
    pub unsigned: bool,
}

/// One event: an inserted row of the table, committed.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: u64,
    /// The GTID domain of its transaction (with `id`'s seq_no: the transaction's GTID, less the
    /// server id), which a group moved to another server needs that server to have.
    pub domain: u32,
    /// Where its transaction starts (its GTID event): reading from here yields it again.
    pub tx_start: BinlogPosition,
    /// The commit's time (the GTID event's header timestamp, Unix seconds).
    pub timestamp: u32,
    /// The table map's columns, shared by the rows of one map.
    pub columns: Arc<[ColumnSpec]>,
    /// The row's values, in table-map column order (`Value::NULL` for NULL).
    pub values: Vec<Value>,
}

/// What a reader sends its group.
#[derive(Debug)]
pub enum ReaderMsg {
    /// A committed transaction's events of the table, and where the transaction ends (shared:
    /// the groups reading one shared reader hold the same events).
    Committed {
        events: Vec<Arc<Event>>,
        end: BinlogPosition,
    },
    /// The binlog stream is open (the server accepted the position).
    Opened,
    /// Transactions of other tables were read up to here.
    Progress(BinlogPosition),
    /// The reader stopped for good (the group reports this to its streams).
    Failed(ReaderError),
}

/// Why a reader stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReaderError {
    /// The server no longer has the position (purged, or reset): error 1236.
    #[error("the binlog no longer holds position {at}: {why}")]
    PositionGone { at: BinlogPosition, why: String },
    /// A transaction without a GTID (MySQL without gtid_mode, or an event msgproxy cannot read).
    #[error("a transaction at {0} has no MariaDB GTID event: event streams need MariaDB's GTIDs")]
    NoGtid(BinlogPosition),
    #[error("a transaction inserted more than {MAX_ROWS_PER_TRANSACTION} rows into the table; event ids cannot number them")]
    TooManyRows,
    #[error("a rows event of the table cannot be read: {0}")]
    Unreadable(String),
    /// The table was dropped or renamed away (`DROP TABLE`, `RENAME TABLE`, `DROP DATABASE`):
    /// its stream ends, and its groups with it.
    #[error(
        "the table was dropped or renamed at binlog position {0}; its groups are gone with it"
    )]
    TableGone(BinlogPosition),
    #[error("msgproxy's backend user may not read the binlog ({0}): GRANT REPLICATION SLAVE ON *.* TO that user")]
    Denied(String),
    #[error("the table is written in GTID domains {0} and {1}: event ids are GTID sequence numbers, which only one domain keeps in commit order; write the table from one gtid_domain_id")]
    Domains(u32, u32),
}

/// A replica server id for one binlog connection: MariaDB drops an older replica connection
/// that registers the same id, so every reader and scan of every proxy takes a fresh random one,
/// from the upper half of the range (the message watcher's are `0x4D5xxxxx`).
pub fn replica_id() -> u32 {
    0x8000_0000 | (rand::random::<u32>() & 0x7FFF_FFFF)
}

/// Where a reader reads, and for which table.
#[derive(Clone)]
pub struct ReaderTarget {
    pub opts: Opts,
    pub schema: String,
    pub table: String,
}

/// Reads from `start` until `shutdown`, a failure, or the group goes away (the channel closes).
/// Connection losses are retried from the last committed position with backoff.
pub async fn run(
    target: ReaderTarget,
    start: BinlogPosition,
    tx: mpsc::Sender<ReaderMsg>,
    shutdown: CancellationToken,
) {
    let mut at = start;
    let mut backoff = crate::binlog::watcher::Backoff::new();
    loop {
        let opened = tokio::select! {
            _ = shutdown.cancelled() => return,
            o = tokio::time::timeout(Duration::from_secs(10), open(&target, &at)) => o,
        };
        let stream = match opened {
            Ok(Ok(s)) => {
                if tx.send(ReaderMsg::Opened).await.is_err() {
                    return;
                }
                s
            }
            Ok(Err(OpenError::Gone(why))) => {
                let _ = tx
                    .send(ReaderMsg::Failed(ReaderError::PositionGone { at, why }))
                    .await;
                return;
            }
            Ok(Err(OpenError::Denied(why))) => {
                let _ = tx.send(ReaderMsg::Failed(ReaderError::Denied(why))).await;
                return;
            }
            Ok(Err(OpenError::Other(why))) => {
                tracing::debug!(
                    "stream reader for {}.{}: {why}",
                    target.schema,
                    target.table
                );
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_wait()) => continue,
                }
            }
            Err(_) => {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_wait()) => continue,
                }
            }
        };
        let mut reading = Reading::new(&target, at.clone());
        match reading.follow(stream, &tx, &shutdown).await {
            Ok(()) => return,
            Err(Some(e)) => {
                let _ = tx.send(ReaderMsg::Failed(e)).await;
                return;
            }
            Err(None) => {
                at = reading.safe_position();
                backoff.reset();
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_wait()) => {}
                }
            }
        }
    }
}

enum OpenError {
    Gone(String),
    /// The backend user may not read the binlog: retrying will not help.
    Denied(String),
    Other(String),
}

async fn open(target: &ReaderTarget, at: &BinlogPosition) -> Result<BinlogStream, OpenError> {
    let other = |e: mysql_async::Error| OpenError::Other(e.to_string());
    let mut conn = Conn::new(target.opts.clone()).await.map_err(other)?;
    conn.query_drop(format!(
        "SET @master_heartbeat_period = {}",
        HEARTBEAT.as_nanos()
    ))
    .await
    .map_err(other)?;
    // A GTID-aware replica: MariaDB sends its GTID events as they are.
    conn.query_drop("SET @mariadb_slave_capability = 4")
        .await
        .map_err(other)?;
    let request = BinlogStreamRequest::new(replica_id())
        .with_filename(at.file.as_bytes())
        .with_pos(at.pos);
    match conn.get_binlog_stream(request).await {
        Ok(s) => Ok(s),
        Err(mysql_async::Error::Server(e)) if e.code == 1236 => Err(OpenError::Gone(e.message)),
        Err(mysql_async::Error::Server(e)) if matches!(e.code, 1044 | 1045 | 1142 | 1227) => {
            Err(OpenError::Denied(e.message))
        }
        Err(e) => Err(other(e)),
    }
}

// Event type codes (MariaDB's own from 160 on).
const QUERY_EVENT: u8 = 2;
const ROTATE_EVENT: u8 = 4;
const XID_EVENT: u8 = 16;
const TABLE_MAP_EVENT: u8 = 19;
const MARIADB_GTID_EVENT: u8 = 162;
const XA_PREPARE_LOG_EVENT: u8 = 38;
/// Write-rows events: pre-GA, v1 (MariaDB), v2 (MySQL).
const WRITE_ROWS_EVENTS: [u8; 3] = [20, 23, 30];
/// MariaDB's compressed write-rows events (`log_bin_compress`), which mysql_common cannot read.
const MARIADB_COMPRESSED_WRITE_ROWS: [u8; 2] = [166, 169];
const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;
const MARIADB_FL_STANDALONE: u8 = 1;

/// The state of one open binlog stream.
struct Reading<'t> {
    target: &'t ReaderTarget,
    file: String,
    /// Where the last committed transaction ends.
    committed: BinlogPosition,
    /// The open transaction: its GTID seq_no and start, its rows of the table.
    tx: Option<Tx>,
    /// The table map of the table, by table id.
    map: Option<(u64, TableMapEvent<'static>, Arc<[ColumnSpec]>)>,
    last_progress: tokio::time::Instant,
    progress_pending: bool,
    /// The GTID domain of the table's events read so far.
    domain: Option<u32>,
    /// XA transactions prepared and not yet committed or rolled back, with their rows of the
    /// table and where their prepare group starts.
    prepared: Vec<(Xid, BinlogPosition, Vec<Row>)>,
}

/// A row of a prepared XA transaction, waiting for its commit to get its id.
struct Row {
    columns: Arc<[ColumnSpec]>,
    values: Vec<Value>,
}

/// Prepared XA transactions of the table held at most; beyond it the reader fails rather than
/// lose one.
const MAX_PREPARED: usize = 10_000;

struct Tx {
    seq_no: Option<u64>,
    /// The GTID's domain: event ids need the table's writes in one domain.
    domain: Option<u32>,
    start: BinlogPosition,
    timestamp: u32,
    standalone: bool,
    events: Vec<Event>,
}

impl<'t> Reading<'t> {
    fn new(target: &'t ReaderTarget, at: BinlogPosition) -> Reading<'t> {
        Reading {
            target,
            file: at.file.clone(),
            committed: at,
            tx: None,
            map: None,
            last_progress: tokio::time::Instant::now(),
            progress_pending: false,
            prepared: Vec::new(),
            domain: None,
        }
    }

    /// Where reading again yields a transaction that starts at `start` and every XA
    /// transaction still prepared (whose rows are not handed over yet): the earliest of them.
    fn resume_for(&self, start: &BinlogPosition) -> BinlogPosition {
        self.prepared
            .iter()
            .map(|(_, p, _)| p)
            .chain(std::iter::once(start))
            .min_by(|a, b| (a.file.as_str(), a.pos).cmp(&(b.file.as_str(), b.pos)))
            .cloned()
            .unwrap_or_else(|| start.clone())
    }

    /// Where reading again yields everything not yet handed over: the end of the last
    /// committed transaction, or the start of the oldest prepared XA transaction with rows of
    /// the table, whichever is earlier.
    fn safe_position(&self) -> BinlogPosition {
        self.prepared
            .iter()
            .map(|(_, start, _)| start)
            .chain(std::iter::once(&self.committed))
            .min_by(|a, b| (a.file.as_str(), a.pos).cmp(&(b.file.as_str(), b.pos)))
            .cloned()
            .unwrap_or_else(|| self.committed.clone())
    }

    /// `Ok` when the group went away or on shutdown; `Err(None)` when the connection broke
    /// (reconnect from `self.committed`); `Err(Some)` on a failure that reconnecting will not
    /// mend.
    async fn follow(
        &mut self,
        mut stream: BinlogStream,
        tx: &mpsc::Sender<ReaderMsg>,
        shutdown: &CancellationToken,
    ) -> Result<(), Option<ReaderError>> {
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tx.closed() => return Ok(()),
                n = tokio::time::timeout(STALL, next_event(&mut stream)) => n,
            };
            let event = match next {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(mysql_async::Error::Server(e)))) if e.code == 1236 => {
                    return Err(Some(ReaderError::PositionGone {
                        at: self.committed.clone(),
                        why: e.message,
                    }))
                }
                _ => return Err(None),
            };
            if let Some(msg) = self.handle(&event)? {
                if tx.send(msg).await.is_err() {
                    return Ok(());
                }
            }
            if self.progress_pending
                && self.last_progress.elapsed() >= PROGRESS_EVERY
                && self.tx.is_none()
            {
                self.progress_pending = false;
                self.last_progress = tokio::time::Instant::now();
                // The safe position, not the last commit's end: a group that resumes from
                // here must meet the prepares of XA transactions still open.
                if tx
                    .send(ReaderMsg::Progress(self.safe_position()))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
        }
    }

    fn handle(&mut self, event: &BinlogEvent) -> Result<Option<ReaderMsg>, Option<ReaderError>> {
        let header = event.header();
        let ty = header.event_type_raw();
        let artificial = header.flags_raw() & LOG_EVENT_ARTIFICIAL_F != 0 || header.log_pos() == 0;
        let end = u64::from(header.log_pos());
        match ty {
            ROTATE_EVENT => {
                if let Ok(rotate) = event.read_event::<RotateEvent<'_>>() {
                    let mut name = rotate.name_raw();
                    if artificial {
                        name = crate::binlog::follow::strip_crc(event, name);
                    }
                    self.file = String::from_utf8_lossy(name).into_owned();
                    if self.tx.is_none() {
                        self.committed = BinlogPosition {
                            file: self.file.clone(),
                            pos: rotate.position(),
                        };
                    }
                    self.map = None;
                }
                Ok(None)
            }
            MARIADB_GTID_EVENT => {
                let data = event.data();
                let seq_no = data
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes);
                let domain = data
                    .get(8..12)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_le_bytes);
                let flags2 = data.get(12).copied().unwrap_or(0);
                let start = end.saturating_sub(u64::from(header.event_size()));
                self.tx = Some(Tx {
                    seq_no,
                    domain,
                    start: BinlogPosition {
                        file: self.file.clone(),
                        pos: start,
                    },
                    timestamp: header.timestamp(),
                    standalone: flags2 & MARIADB_FL_STANDALONE != 0,
                    events: Vec::new(),
                });
                Ok(None)
            }
            XID_EVENT => Ok(self.commit(end)),
            XA_PREPARE_LOG_EVENT => match XaPrepare::read(event.data()) {
                // MySQL's `XA COMMIT ... ONE PHASE`: the group commits here.
                Some(p) if p.one_phase => Ok(self.commit(end)),
                Some(p) => self.xa_prepared(p.xid, end),
                None => self.xa_unreadable(end),
            },
            QUERY_EVENT => {
                let Ok(query) = event.read_event::<QueryEvent<'_>>() else {
                    return Ok(self.statement_done(end));
                };
                let sql = query.query_raw();
                let statement = classify(sql);
                match statement {
                    Statement::Begin | Statement::XaStart | Statement::XaEnd => return Ok(None),
                    Statement::Commit => return Ok(self.commit(end)),
                    Statement::XaPrepare => {
                        return match Xid::from_statement(sql) {
                            Some(xid) => self.xa_prepared(xid, end),
                            None => self.xa_unreadable(end),
                        };
                    }
                    // ONE PHASE: MariaDB writes the rows in this group.
                    Statement::XaCommit if is_one_phase(sql) => return Ok(self.commit(end)),
                    Statement::XaCommit => {
                        return Ok(self.xa_finished(Xid::from_statement(sql), true, end));
                    }
                    Statement::XaRollback => {
                        return Ok(self.xa_finished(Xid::from_statement(sql), false, end));
                    }
                    _ => {}
                }
                if super::ddl::effect(
                    sql,
                    &query.schema(),
                    &self.target.schema,
                    &self.target.table,
                ) == super::ddl::TableDdl::Gone
                {
                    return Err(Some(ReaderError::TableGone(BinlogPosition {
                        file: self.file.clone(),
                        pos: end,
                    })));
                }
                if statement == Statement::Rollback {
                    self.tx = None;
                    self.committed.pos = end;
                    self.committed.file = self.file.clone();
                    return Ok(None);
                }
                Ok(self.statement_done(end))
            }
            TABLE_MAP_EVENT => {
                let Ok(tme) = event.read_event::<TableMapEvent<'_>>() else {
                    return Ok(None);
                };
                if tme.database_name() == self.target.schema.as_str()
                    && tme.table_name() == self.target.table.as_str()
                {
                    let id = tme.table_id();
                    if self.map.as_ref().is_some_and(|(known, ..)| *known == id) {
                        return Ok(None);
                    }
                    let columns =
                        column_specs(&tme).map_err(|e| Some(ReaderError::Unreadable(e)))?;
                    self.map = Some((id, tme.into_owned(), columns.into()));
                }
                Ok(None)
            }
            t if WRITE_ROWS_EVENTS.contains(&t) || MARIADB_COMPRESSED_WRITE_ROWS.contains(&t) => {
                let Some(id) = event.data().get(..6).map(|b| {
                    b.iter()
                        .rev()
                        .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte))
                }) else {
                    return Ok(None);
                };
                let Some((map_id, tme, columns)) = &self.map else {
                    return Ok(None);
                };
                if *map_id != id {
                    return Ok(None);
                }
                if MARIADB_COMPRESSED_WRITE_ROWS.contains(&t) {
                    return Err(Some(ReaderError::Unreadable(
                        "compressed rows events (log_bin_compress=ON) cannot be read; turn log_bin_compress off".into(),
                    )));
                }
                let Some(open) = self.tx.as_mut() else {
                    return Err(Some(ReaderError::NoGtid(BinlogPosition {
                        file: self.file.clone(),
                        pos: end,
                    })));
                };
                let Some(seq_no) = open.seq_no.filter(|s| *s <= MAX_SEQ_NO) else {
                    return Err(Some(ReaderError::NoGtid(open.start.clone())));
                };
                match (self.domain, open.domain) {
                    (Some(known), Some(d)) if known != d => {
                        return Err(Some(ReaderError::Domains(known, d)))
                    }
                    (None, d) => self.domain = d,
                    _ => {}
                }
                let rows = match event.read_data() {
                    Ok(Some(EventData::RowsEvent(rows))) => rows,
                    Ok(_) => return Err(Some(ReaderError::Unreadable("not a rows event".into()))),
                    Err(e) => return Err(Some(ReaderError::Unreadable(e.to_string()))),
                };
                if !matches!(
                    rows,
                    RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_)
                ) {
                    return Ok(None);
                }
                for row in rows.rows(tme) {
                    let (_, after) =
                        row.map_err(|e| Some(ReaderError::Unreadable(e.to_string())))?;
                    let Some(after) = after else { continue };
                    let ordinal = open.events.len() as u64;
                    if ordinal >= MAX_ROWS_PER_TRANSACTION {
                        return Err(Some(ReaderError::TooManyRows));
                    }
                    let mut values = Vec::with_capacity(after.len());
                    for v in after.unwrap() {
                        values.push(match v {
                            BinlogValue::Value(v) => v,
                            other => Value::try_from(other)
                                .map_err(|e| Some(ReaderError::Unreadable(e.to_string())))?,
                        });
                    }
                    if values.len() != columns.len() {
                        return Err(Some(ReaderError::Unreadable(
                            "a row image without every column (is binlog_row_image FULL in every session?)".into(),
                        )));
                    }
                    open.events.push(Event {
                        id: event_id(seq_no, ordinal),
                        domain: open.domain.unwrap_or(0),
                        tx_start: open.start.clone(),
                        timestamp: open.timestamp,
                        columns: columns.clone(),
                        values,
                    });
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// `XA PREPARE`: the group's rows of the table wait for the transaction's commit.
    fn xa_prepared(
        &mut self,
        xid: Xid,
        end: u64,
    ) -> Result<Option<ReaderMsg>, Option<ReaderError>> {
        let tx = self.tx.take();
        if let Some(tx) = tx.filter(|t| !t.events.is_empty()) {
            if self.prepared.len() >= MAX_PREPARED {
                return Err(Some(ReaderError::Unreadable(format!(
                    "more than {MAX_PREPARED} XA transactions with rows of the table are prepared and not committed"
                ))));
            }
            let rows = tx
                .events
                .into_iter()
                .map(|e| Row {
                    columns: e.columns,
                    values: e.values,
                })
                .collect();
            self.prepared.push((xid, tx.start, rows));
        }
        self.committed = BinlogPosition {
            file: self.file.clone(),
            pos: end,
        };
        self.progress_pending = true;
        Ok(None)
    }

    /// A prepared XA transaction whose XID cannot be read: if it has rows of the table, its
    /// commit could not be matched, and its events would be lost.
    fn xa_unreadable(&mut self, end: u64) -> Result<Option<ReaderMsg>, Option<ReaderError>> {
        if self.tx.as_ref().is_some_and(|t| !t.events.is_empty()) {
            return Err(Some(ReaderError::Unreadable(
                "an XA PREPARE whose XID cannot be read prepared rows of the table".into(),
            )));
        }
        self.tx = None;
        self.committed = BinlogPosition {
            file: self.file.clone(),
            pos: end,
        };
        Ok(None)
    }

    /// `XA COMMIT` (`commit`) or `XA ROLLBACK` of a prepared transaction: its rows become
    /// events, with ids from this group's GTID, or are dropped.
    fn xa_finished(&mut self, xid: Option<Xid>, commit: bool, end: u64) -> Option<ReaderMsg> {
        let found = xid.and_then(|xid| {
            let at = self.prepared.iter().position(|(x, ..)| *x == xid)?;
            Some(self.prepared.remove(at))
        });
        let group = self.tx.take();
        self.committed = BinlogPosition {
            file: self.file.clone(),
            pos: end,
        };
        let (Some((_, start, rows)), Some(group), true) = (found, group, commit) else {
            self.progress_pending = true;
            return None;
        };
        let seq_no = group.seq_no.filter(|s| *s <= MAX_SEQ_NO)?;
        let start = self.resume_for(&start);
        let events: Vec<Arc<Event>> = rows
            .into_iter()
            .enumerate()
            .map(|(ordinal, row)| {
                Arc::new(Event {
                    id: event_id(seq_no, ordinal as u64),
                    domain: group.domain.unwrap_or(0),
                    tx_start: start.clone(),
                    timestamp: group.timestamp,
                    columns: row.columns,
                    values: row.values,
                })
            })
            .collect();
        self.last_progress = tokio::time::Instant::now();
        Some(ReaderMsg::Committed {
            events,
            end: self.safe_position(),
        })
    }

    /// After a query that is not BEGIN/COMMIT/ROLLBACK: a standalone group commits with it.
    fn statement_done(&mut self, end: u64) -> Option<ReaderMsg> {
        match &self.tx {
            Some(tx) if !tx.standalone => None,
            _ => self.commit(end),
        }
    }

    fn commit(&mut self, end: u64) -> Option<ReaderMsg> {
        self.committed = BinlogPosition {
            file: self.file.clone(),
            pos: end,
        };
        let mut events = self.tx.take().map(|t| t.events).unwrap_or_default();
        if !self.prepared.is_empty() {
            // A group resuming at one of these events must also meet the prepares of the XA
            // transactions still open, or their rows would be lost at their commit.
            for e in &mut events {
                e.tx_start = self.resume_for(&e.tx_start);
            }
        }
        if events.is_empty() {
            self.progress_pending = true;
            return None;
        }
        self.progress_pending = false;
        self.last_progress = tokio::time::Instant::now();
        Some(ReaderMsg::Committed {
            events: events.into_iter().map(Arc::new).collect(),
            end: self.safe_position(),
        })
    }
}

/// The table map's columns: names (binlog_row_metadata=FULL), types, metadata, signedness.
fn column_specs(tme: &TableMapEvent<'_>) -> Result<Vec<ColumnSpec>, String> {
    use mysql_common::binlog::events::OptionalMetaExtractor;
    let meta = OptionalMetaExtractor::new(tme.iter_optional_meta())
        .map_err(|e| format!("cannot read the table map's metadata: {e}"))?;
    let names: Vec<String> = meta
        .iter_column_name()
        .map(|n| n.map(|n| n.name().into_owned()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let count = tme.columns_count() as usize;
    if names.len() != count {
        return Err(format!(
            "the table map names {} of {count} columns: set binlog_row_metadata = FULL",
            names.len()
        ));
    }
    let mut signedness = meta.iter_signedness();
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let ty = match tme.get_column_type(i) {
                Ok(Some(ty)) => ty,
                _ => return Err(format!("the table map has no type for column {i}")),
            };
            let unsigned = ty
                .is_numeric_type()
                .then(|| signedness.next())
                .flatten()
                .unwrap_or_default();
            Ok(ColumnSpec {
                name,
                ty,
                meta: tme.get_column_metadata(i).unwrap_or(&[]).into(),
                unsigned,
            })
        })
        .collect()
}

async fn next_event(stream: &mut BinlogStream) -> Option<mysql_async::Result<BinlogEvent>> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_order_by_transaction_then_row() {
        assert!(event_id(5, MAX_ROWS_PER_TRANSACTION - 1) < event_id(6, 0));
        assert_eq!(seq_no_of(event_id(123, 99_999)), 123);
        assert_eq!(event_id(MAX_SEQ_NO, MAX_ROWS_PER_TRANSACTION - 1), u64::MAX);
        // A 100,000-row transaction fits with room to spare.
        const { assert!(100_000 < MAX_ROWS_PER_TRANSACTION) };
    }
}
