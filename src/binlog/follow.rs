//! The watcher's reading of the event stream, without I/O: which table ids are message tables,
//! which row changes belong to which transaction, when a transaction commits, when the schema
//! changed, and the position to resume from.
//!
//! - **Table maps** come before the rows of each statement. Each one is looked up in the engine
//!   (a hash lookup, once per table per statement), so a reload is seen at the next statement.
//!   Rows events of table ids that are not message tables are skipped by their first six bytes,
//!   the table id, without decoding a row: unrelated write traffic costs little.
//! - **Transactions**: row changes are buffered and handed to the managers when the transaction
//!   commits (XID event, `COMMIT`), in the order the server applied them, and dropped on
//!   `ROLLBACK`. A transaction that changes more than [`MAX_TX_CHANGES`] message rows keeps only
//!   "poll this table at commit" per table, so memory stays bounded.
//! - **Whatever cannot be read exactly** (no column names in the table map, a row image without a
//!   needed column, MariaDB's compressed events, a partial rollback) becomes a poll of the
//!   affected table at the commit. A poll re-reads the table, so it is always correct; it is
//!   only slower than a row change.
//! - **XA transactions** are prepared in one group and committed (or rolled back) in a later
//!   one, with other transactions, XA ones too, in between. The tables each prepared
//!   transaction touched are kept by its XID (see [`super::xa`]) and polled at its
//!   `XA COMMIT`/`XA ROLLBACK`. A commit whose XID is not known here (prepared before this
//!   follower started, forgotten past [`super::xa::MAX_PREPARED_XIDS`], or unreadable) polls
//!   every message table, since which tables it wrote cannot be known.
//! - **DDL** (`CREATE`/`ALTER`/`DROP`/`RENAME`/`TRUNCATE TABLE`, database DDL) asks the engine to
//!   reload its tables, and the tables the statement names to poll.
//! - **Position**: the end of the last event of the last committed transaction, so a resumed
//!   stream starts at a transaction boundary and replays nothing half-applied.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use mysql_common::binlog::events::{Event, EventData, QueryEvent, RotateEvent, TableMapEvent};
use tracing::{debug, warn};

use super::rows::{Layout, RowChange};
use super::statement::{classify, Statement};
use super::xa::{is_one_phase, Prepared, XaPrepare, Xid};
use super::BinlogPosition;
use crate::messaging::table::MessageTable;

/// Most message-row changes buffered for one transaction; beyond it the transaction's tables
/// are polled at commit instead.
pub const MAX_TX_CHANGES: usize = 10_000;

/// Table ids remembered at most; the map is emptied at a commit when it grows past this (table
/// maps are repeated for every statement, so nothing is lost).
const MAX_TABLE_IDS: usize = 1024;

// Event type codes. mysql_common names the MySQL ones; MariaDB's own (160 and up) it does not
// know.
const QUERY_EVENT: u8 = 2;
const ROTATE_EVENT: u8 = 4;
const FORMAT_DESCRIPTION_EVENT: u8 = 15;
const XID_EVENT: u8 = 16;
const TABLE_MAP_EVENT: u8 = 19;
const HEARTBEAT_EVENT: u8 = 27;
const MYSQL_GTID_EVENT: u8 = 33;
const MYSQL_ANONYMOUS_GTID_EVENT: u8 = 34;
const XA_PREPARE_LOG_EVENT: u8 = 38;
const MARIADB_GTID_EVENT: u8 = 162;
const MARIADB_QUERY_COMPRESSED_EVENT: u8 = 165;
/// Rows events: pre-GA (20–22), v1 (23–25, what MariaDB writes), v2 (30–32, MySQL),
/// MySQL's partial JSON update (39).
const ROWS_EVENTS: [u8; 10] = [20, 21, 22, 23, 24, 25, 30, 31, 32, 39];
/// MariaDB's compressed rows events (`log_bin_compress`): the table id is readable, the rows
/// are not (mysql_common has no decompressor for them).
const MARIADB_COMPRESSED_ROWS_EVENTS: [u8; 6] = [166, 167, 168, 169, 170, 171];
/// The header flag of events the server made up for the stream (the first rotate, and others).
const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;
/// MariaDB GTID event flag: the group is one statement without BEGIN/COMMIT (DDL, ...).
const MARIADB_FL_STANDALONE: u8 = 1;

/// A table as the watcher's caller knows it; `same` says whether two handles are one table.
pub trait TableHandle: Clone {
    fn same(&self, other: &Self) -> bool;
}

/// Where the watcher's findings go (the engine, or a recorder in tests).
pub trait Sink {
    type Table: TableHandle;
    /// The loaded message table `schema`.`name`, with its current definition.
    fn lookup(&self, schema: &str, name: &str) -> Option<(Self::Table, Arc<MessageTable>)>;
    /// A committed row change.
    fn apply(&self, table: &Self::Table, change: RowChange);
    /// Something changed in `table` that is best read back from the table itself.
    fn poll(&self, table: &Self::Table);
    /// Something may have changed in any message table: poll every loaded one (an XA
    /// transaction committed whose prepare this follower did not see).
    fn poll_all(&self);
    /// The loaded tables whose name appears in `sql` (generous: false positives cost a poll).
    fn mentioned(&self, sql: &[u8]) -> Vec<Self::Table>;
    /// DDL was committed: reload the message tables it may have changed. `ddl`: the statement
    /// and the database it ran in; `None` when it could not be read (reload them all).
    fn schema_changed(&self, ddl: Option<Ddl<'_>>);
}

/// A DDL statement as the binlog shows it.
#[derive(Debug, Clone, Copy)]
pub struct Ddl<'a> {
    /// The statement's current database (empty: none).
    pub schema: &'a [u8],
    pub sql: &'a [u8],
}

/// A message table's table map.
struct Mapped<T> {
    table: T,
    /// The definition the layout was made for.
    def: Arc<MessageTable>,
    /// The table map event's body: the server repeats the same map before each statement, and
    /// an identical one (for the same definition) keeps this layout.
    raw: Box<[u8]>,
    /// Owned: rows events are decoded against it.
    tme: TableMapEvent<'static>,
    /// Where the needed columns are, or why the rows of this map are polled for instead.
    layout: Result<Layout, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxState {
    /// Between transactions.
    Idle,
    /// Inside a transaction.
    Open,
    /// After a MySQL GTID event: `BEGIN` follows for a transaction, anything else is a
    /// single statement that commits by itself.
    AfterGtid,
    /// After a MariaDB GTID event flagged standalone: one statement that commits by itself.
    Standalone,
}

/// One transaction's message-table work, held until it commits.
struct Tx<T> {
    state: TxState,
    changes: Vec<(T, RowChange)>,
    polls: Vec<T>,
    /// Past [`MAX_TX_CHANGES`]: further changes only mark their table for a poll.
    overflowed: bool,
}

impl<T: TableHandle> Tx<T> {
    fn new() -> Tx<T> {
        Tx {
            state: TxState::Idle,
            changes: Vec::new(),
            polls: Vec::new(),
            overflowed: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.polls.is_empty()
    }

    fn open(&mut self) {
        if self.state != TxState::Standalone {
            self.state = TxState::Open;
        }
    }

    fn poll(&mut self, table: T) {
        if !self.polls.iter().any(|t| t.same(&table)) {
            self.polls.push(table);
        }
    }

    fn push(&mut self, table: &T, changes: Vec<RowChange>) {
        if self.overflowed || self.changes.len() + changes.len() > MAX_TX_CHANGES {
            self.degrade();
            self.poll(table.clone());
            return;
        }
        self.changes
            .extend(changes.into_iter().map(|c| (table.clone(), c)));
    }

    /// Keeps only "poll at commit" for every table touched so far.
    fn degrade(&mut self) {
        self.overflowed = true;
        let touched: Vec<T> = self.changes.drain(..).map(|(t, _)| t).collect();
        for t in touched {
            self.poll(t);
        }
    }

    fn take(&mut self) -> (Vec<(T, RowChange)>, Vec<T>) {
        self.state = TxState::Idle;
        self.overflowed = false;
        (
            std::mem::take(&mut self.changes),
            std::mem::take(&mut self.polls),
        )
    }
}

/// The event-stream state of one binlog session.
pub struct Follower<T> {
    tables: HashMap<u64, Option<Mapped<T>>>,
    tx: Tx<T>,
    /// XA transactions prepared and not yet seen committed, with their tables.
    xa_prepared: Prepared<T>,
    file: String,
    /// Where the last committed transaction ends: where to resume.
    committed: u64,
    /// Where the last event read ends.
    last_end: u64,
    moved: bool,
    /// The GTID of the last committed transaction of each domain (MariaDB): where to resume on
    /// another server.
    gtids: super::gtid::GtidState,
    /// The GTID of the transaction being read, committed with it.
    pending_gtid: Option<super::gtid::Gtid>,
    /// Reasons already logged for reading a table by polls (logged once each).
    told: HashSet<String>,
}

impl<T: TableHandle> Follower<T> {
    /// A follower whose stream was requested at `start`.
    pub fn new(start: &BinlogPosition) -> Follower<T> {
        Follower {
            tables: HashMap::new(),
            tx: Tx::new(),
            xa_prepared: Prepared::default(),
            file: start.file.clone(),
            committed: start.pos,
            last_end: start.pos,
            moved: false,
            gtids: super::gtid::GtidState::default(),
            pending_gtid: None,
            told: HashSet::new(),
        }
    }

    /// The position to resume from.
    pub fn position(&self) -> BinlogPosition {
        BinlogPosition {
            file: self.file.clone(),
            pos: self.committed,
        }
    }

    /// Starts the GTID state at the server's (`@@gtid_binlog_pos` read with the start position),
    /// or carries it over from an earlier stream.
    pub fn with_gtids(mut self, gtids: super::gtid::GtidState) -> Self {
        self.gtids = gtids;
        self
    }

    /// The GTIDs of the last committed transactions, per domain.
    pub fn gtids(&self) -> &super::gtid::GtidState {
        &self.gtids
    }

    /// The position, if it moved since the last call.
    pub fn take_moved(&mut self) -> Option<BinlogPosition> {
        std::mem::take(&mut self.moved).then(|| self.position())
    }

    #[cfg(test)]
    /// Whether a transaction is being read (its changes are not applied yet).
    pub fn in_transaction(&self) -> bool {
        self.tx.state != TxState::Idle
    }

    /// Takes in one event.
    pub fn handle<S: Sink<Table = T>>(&mut self, event: &Event, sink: &S) {
        let header = event.header();
        let ty = header.event_type_raw();
        let artificial = header.flags_raw() & LOG_EVENT_ARTIFICIAL_F != 0 || header.log_pos() == 0;
        if !artificial && ty != HEARTBEAT_EVENT {
            self.last_end = u64::from(header.log_pos());
        }
        match ty {
            ROTATE_EVENT => return self.rotate(event, artificial),
            QUERY_EVENT => self.query(event, sink),
            XID_EVENT => self.commit(sink),
            TABLE_MAP_EVENT => self.table_map(event, sink),
            t if ROWS_EVENTS.contains(&t) => self.rows(event, true),
            t if MARIADB_COMPRESSED_ROWS_EVENTS.contains(&t) => self.rows(event, false),
            MARIADB_GTID_EVENT => {
                self.begin(sink);
                self.pending_gtid = super::gtid::from_event(header.server_id(), event.data());
                // seq_no (8 bytes), domain_id (4), flags2 (1).
                let flags2 = event.data().get(12).copied().unwrap_or(0);
                self.tx.state = if flags2 & MARIADB_FL_STANDALONE != 0 {
                    TxState::Standalone
                } else {
                    TxState::Open
                };
            }
            MYSQL_GTID_EVENT | MYSQL_ANONYMOUS_GTID_EVENT => {
                self.begin(sink);
                self.tx.state = TxState::AfterGtid;
            }
            XA_PREPARE_LOG_EVENT => match XaPrepare::read(event.data()) {
                // MySQL's `XA COMMIT ... ONE PHASE`: the group commits here.
                Some(p) if p.one_phase => self.commit(sink),
                prepare => self.xa_prepare(prepare.map(|p| p.xid)),
            },
            MARIADB_QUERY_COMPRESSED_EVENT => {
                // Unreadable here; it may be DDL, so reload (coalesced).
                sink.schema_changed(None);
                self.statement_done(sink);
            }
            FORMAT_DESCRIPTION_EVENT | HEARTBEAT_EVENT => {}
            _ => {}
        }
        if self.tx.state == TxState::Idle && self.committed != self.last_end {
            self.committed = self.last_end;
            self.moved = true;
            if let Some(gtid) = self.pending_gtid.take() {
                self.gtids.committed(gtid);
            }
        }
    }

    /// A rotate moves to another file. The first one of a stream is artificial, and MariaDB
    /// sends it with a CRC32 that mysql_common leaves in the name (it has not seen the format
    /// description yet): the name is checked against its CRC and cut if it matches.
    fn rotate(&mut self, event: &Event, artificial: bool) {
        let Ok(rotate) = event.read_event::<RotateEvent<'_>>() else {
            return;
        };
        let mut name = rotate.name_raw();
        if artificial {
            name = strip_crc(event, name);
        }
        self.file = String::from_utf8_lossy(name).into_owned();
        self.committed = rotate.position();
        self.last_end = rotate.position();
        self.moved = true;
        self.tables.clear();
    }

    fn table_map<S: Sink<Table = T>>(&mut self, event: &Event, sink: &S) {
        let Ok(tme) = event.read_event::<TableMapEvent<'_>>() else {
            return;
        };
        self.tx.open();
        let id = tme.table_id();
        let Some((table, def)) = sink.lookup(&tme.database_name(), &tme.table_name()) else {
            self.tables.insert(id, None);
            return;
        };
        // The same map as last time, for the same definition: reading the column names and
        // types again (once per transaction under single-row inserts) would give the same.
        if let Some(Some(known)) = self.tables.get_mut(&id) {
            if Arc::ptr_eq(&known.def, &def) && *known.raw == *event.data() {
                known.table = table;
                return;
            }
        }
        let layout = Layout::new(&def, &tme);
        if let Err(why) = &layout {
            self.tell(&def, why);
        }
        let mapped = Mapped {
            table,
            raw: event.data().into(),
            tme: tme.into_owned(),
            layout,
            def,
        };
        self.tables.insert(id, Some(mapped));
    }

    fn rows(&mut self, event: &Event, readable: bool) {
        // The table id is the first six bytes (little-endian) of every rows event of the
        // servers we support; reading it decodes nothing else.
        let Some(id) = event.data().get(..6).map(|b| {
            b.iter()
                .rev()
                .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte))
        }) else {
            return;
        };
        let Some(Some(mapped)) = self.tables.get(&id) else {
            // Not a message table (or no table map seen): skipped, rows undecoded.
            return;
        };
        self.tx.open();
        let changes = match (&mapped.layout, readable) {
            (Ok(layout), true) => match event.read_data() {
                Ok(Some(EventData::RowsEvent(rows))) => layout.changes(&rows, &mapped.tme),
                Ok(_) => Err("not a rows event".to_string()),
                Err(e) => Err(format!("cannot read a rows event: {e}")),
            },
            (Ok(_), false) => Err("compressed rows events (log_bin_compress) are not read".into()),
            (Err(why), _) => Err(why.clone()),
        };
        let table = mapped.table.clone();
        match changes {
            Ok(changes) => self.tx.push(&table, changes),
            Err(why) => {
                debug!("binlog: polling instead of reading rows: {why}");
                self.tx.poll(table);
            }
        }
    }

    fn query<S: Sink<Table = T>>(&mut self, event: &Event, sink: &S) {
        let Ok(query) = event.read_event::<QueryEvent<'_>>() else {
            // Unreadable: it may have been DDL.
            sink.schema_changed(None);
            return self.statement_done(sink);
        };
        let sql = query.query_raw();
        match classify(sql) {
            Statement::Begin | Statement::XaStart => {
                self.begin(sink);
                self.tx.state = TxState::Open;
                return;
            }
            Statement::Commit => return self.commit(sink),
            Statement::Rollback => {
                self.tx.take();
                return;
            }
            Statement::RollbackToSavepoint => self.tx.degrade(),
            Statement::Savepoint | Statement::XaEnd => {}
            Statement::XaPrepare => return self.xa_prepare(Xid::from_statement(sql)),
            Statement::XaCommit => {
                // Rows in this group (`ONE PHASE`; MariaDB writes that as BEGIN ... COMMIT
                // instead) are this transaction's, and committed now.
                self.commit(sink);
                if !is_one_phase(sql) {
                    self.xa_finished(Xid::from_statement(sql), sink);
                }
                return;
            }
            Statement::XaRollback => {
                self.tx.take();
                // Nothing becomes visible, but the transaction's row locks go (rows a claim's
                // SKIP LOCKED passed over): a poll is cheap and may find them.
                self.xa_finished(Xid::from_statement(sql), sink);
                return;
            }
            Statement::Ddl => {
                // DDL commits implicitly.
                self.commit(sink);
                sink.schema_changed(Some(Ddl {
                    schema: query.schema_raw(),
                    sql,
                }));
                for t in sink.mentioned(sql) {
                    sink.poll(&t);
                }
                self.tables.clear();
                return;
            }
            Statement::Other => {
                // E.g. a statement-format INSERT from a session with another binlog_format.
                for t in sink.mentioned(sql) {
                    self.tx.poll(t);
                }
            }
        }
        self.statement_done(sink);
    }

    /// After a statement outside BEGIN ... COMMIT: it committed by itself.
    fn statement_done<S: Sink<Table = T>>(&mut self, sink: &S) {
        match self.tx.state {
            TxState::Open => {}
            TxState::Idle | TxState::AfterGtid | TxState::Standalone => self.commit(sink),
        }
    }

    /// A transaction starts. Left-over work of one that never ended (not expected) is polled
    /// for at once: whether it committed is unknown, and a poll is right either way.
    fn begin<S: Sink<Table = T>>(&mut self, sink: &S) {
        if !self.tx.is_empty() {
            self.tx.degrade();
            let (_, polls) = self.tx.take();
            for t in polls {
                sink.poll(&t);
            }
        }
        self.tx.state = TxState::Open;
    }

    fn commit<S: Sink<Table = T>>(&mut self, sink: &S) {
        let (changes, polls) = self.tx.take();
        for (table, change) in changes {
            sink.apply(&table, change);
        }
        for table in polls {
            sink.poll(&table);
        }
        if self.tables.len() > MAX_TABLE_IDS {
            self.tables.clear();
        }
    }

    /// An XA transaction is prepared: it commits (or not) in a later event group that carries
    /// no rows. Its tables are polled then, found by its XID. Without one (unreadable) nothing
    /// is kept: its commit will not be recognised, and polls every table.
    fn xa_prepare(&mut self, xid: Option<Xid>) {
        self.tx.degrade();
        let (_, polls) = self.tx.take();
        match xid {
            Some(xid) => self.xa_prepared.prepared(xid, polls),
            None => debug!("binlog: an XA prepare without a readable XID"),
        }
    }

    /// An XA transaction committed or rolled back: its tables are polled, or every table if
    /// which ones is not known.
    fn xa_finished<S: Sink<Table = T>>(&mut self, xid: Option<Xid>, sink: &S) {
        match xid.and_then(|xid| self.xa_prepared.finished(&xid)) {
            Some(tables) => {
                for t in tables {
                    sink.poll(&t);
                }
            }
            None => {
                debug!("binlog: an XA commit or rollback whose prepare was not seen; polling all");
                sink.poll_all();
            }
        }
    }

    fn tell(&mut self, def: &MessageTable, why: &str) {
        let line = format!("{}: {why}", def.qualified());
        if self.told.len() < 1000 && self.told.insert(line.clone()) {
            warn!("binlog: rows of message table {line}; its changes are picked up by polling");
        }
    }
}

/// The name of an artificial rotate event without the CRC32 that may trail it (see
/// [`Follower::rotate`]).
pub(crate) fn strip_crc<'n>(event: &Event, name: &'n [u8]) -> &'n [u8] {
    let data = event.data();
    if name.len() < 4 || data.len() < 4 {
        return name;
    }
    let h = event.header();
    let mut bytes = Vec::with_capacity(19 + data.len());
    bytes.extend_from_slice(&h.timestamp().to_le_bytes());
    bytes.push(h.event_type_raw());
    bytes.extend_from_slice(&h.server_id().to_le_bytes());
    bytes.extend_from_slice(&h.event_size().to_le_bytes());
    bytes.extend_from_slice(&h.log_pos().to_le_bytes());
    bytes.extend_from_slice(&h.flags_raw().to_le_bytes());
    let (body, crc) = data.split_at(data.len() - 4);
    bytes.extend_from_slice(body);
    let stated = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32(&bytes) == stated {
        &name[..name.len() - 4]
    } else {
        name
    }
}

/// CRC-32 (IEEE), the binlog checksum. Bitwise: it runs once per stream.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
#[path = "follow_tests.rs"]
mod tests;
