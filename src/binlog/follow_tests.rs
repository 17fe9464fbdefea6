//! Tests of the event-stream reading, fed with binlog events built byte by byte (the v4 format
//! MariaDB writes: v1 rows events, 6-byte table ids, no checksums unless a test adds one).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::Event;
use mysql_common::binlog::EventStreamReader;

use super::*;
use crate::messaging::table::{from_comment, ColumnInfo};

const COMMENT: &str = "vitess_message,vt_ack_wait=30,vt_purge_after=120,vt_batch_size=1,\
                       vt_cache_size=1000,vt_poller_interval=30";

const LONGLONG: u8 = 8;
const VARCHAR: u8 = 15;
const STRING: u8 = 254;

/// One column of a built table.
#[derive(Clone)]
struct Col {
    name: &'static str,
    ty: u8,
    meta: Vec<u8>,
}

fn bigint(name: &'static str) -> Col {
    Col {
        name,
        ty: LONGLONG,
        meta: vec![],
    }
}

fn varchar(name: &'static str, max: u16) -> Col {
    Col {
        name,
        ty: VARCHAR,
        meta: max.to_le_bytes().to_vec(),
    }
}

fn binary(name: &'static str, len: u8) -> Col {
    Col {
        name,
        ty: STRING,
        meta: vec![STRING, len],
    }
}

/// The RFC table: id, time_next, epoch, time_acked, message.
fn rfc_cols() -> Vec<Col> {
    vec![
        bigint("id"),
        bigint("time_next"),
        bigint("epoch"),
        bigint("time_acked"),
        varchar("message", 128),
    ]
}

/// A column value in a row image.
#[derive(Clone, Debug)]
enum V {
    Null,
    I(i64),
    S(&'static [u8]),
}

fn header(ty: u8, log_pos: u32, flags: u16, body_len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(19 + body_len);
    h.extend_from_slice(&0u32.to_le_bytes());
    h.push(ty);
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&((19 + body_len) as u32).to_le_bytes());
    h.extend_from_slice(&log_pos.to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h
}

fn raw(ty: u8, log_pos: u32, body: &[u8]) -> Vec<u8> {
    let mut e = header(ty, log_pos, 0, body.len());
    e.extend_from_slice(body);
    e
}

fn table_id(id: u64) -> Vec<u8> {
    id.to_le_bytes()[..6].to_vec()
}

fn tme_body(id: u64, db: &str, table: &str, cols: &[Col], with_names: bool) -> Vec<u8> {
    let mut b = table_id(id);
    b.extend_from_slice(&[1, 0]);
    b.push(db.len() as u8);
    b.extend_from_slice(db.as_bytes());
    b.push(0);
    b.push(table.len() as u8);
    b.extend_from_slice(table.as_bytes());
    b.push(0);
    b.push(cols.len() as u8);
    b.extend(cols.iter().map(|c| c.ty));
    let meta: Vec<u8> = cols.iter().flat_map(|c| c.meta.clone()).collect();
    b.push(meta.len() as u8);
    b.extend_from_slice(&meta);
    b.extend(std::iter::repeat_n(0xFF, cols.len().div_ceil(8)));
    if with_names {
        let mut names = Vec::new();
        for c in cols {
            names.push(c.name.len() as u8);
            names.extend_from_slice(c.name.as_bytes());
        }
        b.push(4); // COLUMN_NAME
        b.push(names.len() as u8);
        b.extend_from_slice(&names);
    }
    b
}

fn encode_row(cols: &[Col], present: &[bool], values: &[V]) -> Vec<u8> {
    let n = present.iter().filter(|p| **p).count();
    let mut nulls = vec![0u8; n.div_ceil(8)];
    let mut body = Vec::new();
    let mut vals = values.iter();
    for (image_idx, (col, _)) in cols.iter().zip(present).filter(|(_, p)| **p).enumerate() {
        let v = vals.next().cloned().unwrap_or(V::Null);
        match v {
            V::Null => nulls[image_idx / 8] |= 1 << (image_idx % 8),
            V::I(i) => body.extend_from_slice(&i.to_le_bytes()[..8]),
            V::S(s) => {
                assert!(col.ty == VARCHAR || col.ty == STRING);
                body.push(s.len() as u8);
                body.extend_from_slice(s);
            }
        }
    }
    nulls.extend(body);
    nulls
}

fn bitmap(present: &[bool]) -> Vec<u8> {
    let mut b = vec![0u8; present.len().div_ceil(8)];
    for (i, p) in present.iter().enumerate() {
        if *p {
            b[i / 8] |= 1 << (i % 8);
        }
    }
    b
}

enum Rows<'a> {
    Write(Vec<Vec<V>>),
    Update(Vec<(Vec<V>, Vec<V>)>),
    Delete(Vec<Vec<V>>),
    /// A write with only some columns in the image.
    WritePartial(&'a [bool], Vec<Vec<V>>),
}

fn rows_body(id: u64, cols: &[Col], rows: &Rows<'_>) -> (u8, Vec<u8>) {
    let all = vec![true; cols.len()];
    let mut b = table_id(id);
    b.extend_from_slice(&[1, 0]); // STMT_END
    b.push(cols.len() as u8);
    let ty = match rows {
        Rows::Write(list) => {
            b.extend(bitmap(&all));
            for r in list {
                b.extend(encode_row(cols, &all, r));
            }
            23
        }
        Rows::WritePartial(present, list) => {
            b.extend(bitmap(present));
            for r in list {
                b.extend(encode_row(cols, present, r));
            }
            23
        }
        Rows::Update(list) => {
            b.extend(bitmap(&all));
            b.extend(bitmap(&all));
            for (before, after) in list {
                b.extend(encode_row(cols, &all, before));
                b.extend(encode_row(cols, &all, after));
            }
            24
        }
        Rows::Delete(list) => {
            b.extend(bitmap(&all));
            for r in list {
                b.extend(encode_row(cols, &all, r));
            }
            25
        }
    };
    (ty, b)
}

/// An event stream under test: builds events, feeds them to a follower, records what it did.
struct Harness {
    reader: EventStreamReader,
    follower: Follower<Handle>,
    sink: Recorder,
    pos: u32,
}

#[derive(Clone, Debug, PartialEq)]
struct Handle(String);

impl TableHandle for Handle {
    fn same(&self, other: &Self) -> bool {
        self == other
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Call {
    Changed {
        table: String,
        key: String,
        priority: Option<i64>,
        time_next: Option<i64>,
        time_acked: Option<i64>,
    },
    Deleted(String, String),
    Poll(String),
    PollAll,
    SchemaChanged,
}

#[derive(Default)]
struct Recorder {
    tables: HashMap<(String, String), Arc<MessageTable>>,
    calls: RefCell<Vec<Call>>,
    lookups: Cell<usize>,
}

impl Sink for Recorder {
    type Table = Handle;

    fn lookup(&self, schema: &str, name: &str) -> Option<(Handle, Arc<MessageTable>)> {
        self.lookups.set(self.lookups.get() + 1);
        self.tables
            .get(&(schema.to_string(), name.to_string()))
            .map(|d| (Handle(name.to_string()), d.clone()))
    }

    fn apply(&self, table: &Handle, change: RowChange) {
        let text = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        self.calls.borrow_mut().push(match change {
            RowChange::Changed(r) => Call::Changed {
                table: table.0.clone(),
                key: text(&r.key),
                priority: r.priority,
                time_next: r.time_next,
                time_acked: r.time_acked,
            },
            RowChange::Deleted(k) => Call::Deleted(table.0.clone(), text(&k)),
        });
    }

    fn poll(&self, table: &Handle) {
        self.calls.borrow_mut().push(Call::Poll(table.0.clone()));
    }

    fn poll_all(&self) {
        self.calls.borrow_mut().push(Call::PollAll);
    }

    fn mentioned(&self, sql: &[u8]) -> Vec<Handle> {
        // Whole words, so the tests can name other tables freely.
        let sql = String::from_utf8_lossy(sql).to_lowercase();
        let words: Vec<&str> = sql
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .collect();
        self.tables
            .keys()
            .filter(|(_, n)| words.contains(&n.as_str()))
            .map(|(_, n)| Handle(n.clone()))
            .collect()
    }

    fn schema_changed(&self) {
        self.calls.borrow_mut().push(Call::SchemaChanged);
    }
}

fn column_info(cols: &[Col], pk: &str) -> Vec<ColumnInfo> {
    cols.iter()
        .map(|c| ColumnInfo {
            name: c.name.to_string(),
            data_type: match c.ty {
                LONGLONG => "bigint",
                VARCHAR => "varchar",
                _ => "binary",
            }
            .to_string(),
            charset: (c.ty == VARCHAR).then(|| "utf8mb4".to_string()),
            in_primary_key: c.name == pk,
            set_on_update: false,
        })
        .collect()
}

impl Harness {
    fn new() -> Harness {
        Harness {
            reader: EventStreamReader::new(BinlogVersion::Version4),
            follower: Follower::new(&BinlogPosition {
                file: "mysql-bin.000001".into(),
                pos: 4,
            }),
            sink: Recorder::default(),
            pos: 4,
        }
    }

    /// Registers `test`.`name` as a loaded message table with these columns.
    fn message_table(&mut self, name: &str, cols: &[Col]) {
        let def = from_comment("test", name, COMMENT, &column_info(cols, "id"))
            .expect("valid table")
            .expect("a message table");
        self.sink
            .tables
            .insert(("test".into(), name.into()), Arc::new(def));
    }

    fn feed(&mut self, bytes: Vec<u8>) {
        let event: Event = self
            .reader
            .read(&bytes[..])
            .expect("a readable event")
            .expect("an event");
        self.follower.handle(&event, &self.sink);
    }

    /// An ordinary event of `ty` ending `len` bytes further on.
    fn event(&mut self, ty: u8, body: &[u8]) {
        self.pos += 19 + body.len() as u32;
        let pos = self.pos;
        self.feed(raw(ty, pos, body));
    }

    fn query(&mut self, sql: &str) {
        // thread id, exec time, schema length, error code, status-vars length, (no status
        // vars), schema "test", NUL, query.
        let mut b = Vec::new();
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.push(4);
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(b"test\0");
        b.extend_from_slice(sql.as_bytes());
        self.event(QUERY_EVENT, &b);
    }

    fn gtid(&mut self, standalone: bool) {
        let mut b = Vec::new();
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.push(if standalone { MARIADB_FL_STANDALONE } else { 0 });
        self.event(MARIADB_GTID_EVENT, &b);
    }

    fn xid(&mut self) {
        self.event(XID_EVENT, &42u64.to_le_bytes());
    }

    fn table_map(&mut self, id: u64, name: &str, cols: &[Col]) {
        self.event(TABLE_MAP_EVENT, &tme_body(id, "test", name, cols, true));
    }

    fn table_map_without_names(&mut self, id: u64, name: &str, cols: &[Col]) {
        self.event(TABLE_MAP_EVENT, &tme_body(id, "test", name, cols, false));
    }

    fn rows(&mut self, id: u64, cols: &[Col], rows: Rows<'_>) {
        let (ty, body) = rows_body(id, cols, &rows);
        self.event(ty, &body);
    }

    fn calls(&self) -> Vec<Call> {
        self.sink.calls.borrow().clone()
    }

    fn clear(&self) {
        self.sink.calls.borrow_mut().clear();
    }
}

fn changed(key: &str, time_next: Option<i64>, time_acked: Option<i64>) -> Call {
    Call::Changed {
        table: "m".into(),
        key: key.into(),
        priority: None,
        time_next,
        time_acked,
    }
}

fn row(id: i64, time_next: Option<i64>, time_acked: Option<i64>) -> Vec<V> {
    let opt = |v: Option<i64>| v.map_or(V::Null, V::I);
    vec![
        V::I(id),
        opt(time_next),
        V::I(0),
        opt(time_acked),
        V::S(b"hello"),
    ]
}

#[test]
fn inserts_reach_the_engine_at_commit_only() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::Write(vec![row(1, None, None), row(2, Some(0), None)]),
    );
    assert!(h.calls().is_empty(), "nothing before the commit");
    assert!(h.follower.in_transaction());
    h.xid();
    assert_eq!(
        h.calls(),
        vec![changed("1", None, None), changed("2", Some(0), None)]
    );
    assert!(!h.follower.in_transaction());
}

/// A table map repeated unchanged keeps its layout; one that differs (the same table id, its
/// columns in another order, as after an ALTER the engine has not reloaded yet) is read anew.
#[test]
fn a_changed_table_map_is_read_anew() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    for id in [1, 2] {
        h.gtid(false);
        h.table_map(70, "m", &cols);
        h.rows(70, &cols, Rows::Write(vec![row(id, Some(5), None)]));
        h.xid();
    }
    // time_next and time_acked swapped in the table.
    let swapped = vec![
        bigint("id"),
        bigint("time_acked"),
        bigint("epoch"),
        bigint("time_next"),
        varchar("message", 128),
    ];
    h.gtid(false);
    h.table_map(70, "m", &swapped);
    h.rows(70, &swapped, Rows::Write(vec![row(3, Some(7), None)]));
    h.xid();
    assert_eq!(
        h.calls(),
        vec![
            changed("1", Some(5), None),
            changed("2", Some(5), None),
            // In the swapped table the image's second column is time_acked.
            changed("3", None, Some(7)),
        ]
    );
}

#[test]
fn rolled_back_transactions_change_nothing() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.query("BEGIN");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.query("ROLLBACK");
    assert!(h.calls().is_empty());
    // The next transaction starts clean.
    h.query("BEGIN");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(3, None, None)]));
    h.query("COMMIT");
    assert_eq!(h.calls(), vec![changed("3", None, None)]);
}

#[test]
fn other_tables_are_skipped_without_decoding_rows() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    let other = vec![bigint("a"), varchar("b", 10)];
    h.gtid(false);
    h.table_map(71, "busy", &other);
    // Rows that would not even decode: never looked at.
    let mut garbage = table_id(71);
    garbage.extend_from_slice(&[1, 0, 2, 0xFF, 0xFF, 0xFF, 0xFF]);
    h.event(23, &garbage);
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(5, None, None)]));
    // A rows event for a table id never mapped is skipped too.
    h.rows(99, &cols, Rows::Write(vec![row(6, None, None)]));
    h.xid();
    assert_eq!(h.calls(), vec![changed("5", None, None)]);
    // One lookup per table map, none per rows event.
    assert_eq!(h.sink.lookups.get(), 2);
}

#[test]
fn acks_reschedules_id_changes_and_deletes() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::Update(vec![
            (row(1, Some(5), None), row(1, None, Some(1_700_000_000))),
            (row(2, Some(5), None), row(2, Some(9_000), None)),
            (row(3, None, None), row(30, None, None)),
        ]),
    );
    h.rows(70, &cols, Rows::Delete(vec![row(4, None, Some(1))]));
    h.xid();
    assert_eq!(
        h.calls(),
        vec![
            changed("1", None, Some(1_700_000_000)),
            changed("2", Some(9_000), None),
            Call::Deleted("m".into(), "3".into()),
            changed("30", None, None),
            Call::Deleted("m".into(), "4".into()),
        ]
    );
}

#[test]
fn binary_ids_are_padded_like_hex() {
    let mut h = Harness::new();
    let cols = vec![
        binary("id", 4),
        bigint("time_next"),
        bigint("epoch"),
        bigint("time_acked"),
    ];
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::Write(vec![vec![V::S(b"ab"), V::Null, V::Null, V::Null]]),
    );
    h.xid();
    assert_eq!(h.calls(), vec![changed("61620000", None, None)]);
}

#[test]
fn unreadable_rows_become_a_poll_at_commit() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    // No column names (binlog_row_metadata not FULL).
    h.gtid(false);
    h.table_map_without_names(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.rows(70, &cols, Rows::Write(vec![row(2, None, None)]));
    assert!(h.calls().is_empty());
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();
    // A row image without time_next (binlog_row_image=MINIMAL in some session).
    let present = [true, false, true, true, true];
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::WritePartial(&present, vec![vec![V::I(1), V::I(0), V::Null, V::S(b"x")]]),
    );
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn huge_transactions_keep_a_poll_instead_of_every_row() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    let rows: Vec<Vec<V>> = (0..MAX_TX_CHANGES as i64 + 1)
        .map(|i| row(i, None, None))
        .collect();
    h.rows(70, &cols, Rows::Write(rows));
    h.rows(70, &cols, Rows::Write(vec![row(-1, None, None)]));
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn ddl_reloads_and_polls_the_tables_it_names() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(true);
    h.query("TRUNCATE TABLE m");
    assert_eq!(h.calls(), vec![Call::SchemaChanged, Call::Poll("m".into())]);
    h.clear();
    h.gtid(true);
    h.query("CREATE TEMPORARY TABLE tmp (i int)");
    assert!(h.calls().is_empty());
    h.gtid(true);
    h.query("/* x */ ALTER TABLE other ADD c int");
    assert_eq!(h.calls(), vec![Call::SchemaChanged]);
    assert!(!h.follower.in_transaction());
}

#[test]
fn statement_format_writes_are_polled_for() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.query("INSERT INTO m (id) VALUES (1)");
    assert!(h.calls().is_empty());
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn partial_rollbacks_and_xa_poll() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.query("BEGIN");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.query("SAVEPOINT a");
    h.rows(70, &cols, Rows::Write(vec![row(2, None, None)]));
    h.query("ROLLBACK TO a");
    h.query("COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();

    h.gtid(false);
    h.query("XA START X'31',X'',1");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(7, None, None)]));
    h.query("XA END X'31',X'',1");
    // `XA PREPARE '1'` as MariaDB writes it.
    h.event(
        XA_PREPARE_LOG_EVENT,
        &[0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, b'1'],
    );
    assert!(h.calls().is_empty(), "prepared is not committed");
    assert!(!h.follower.in_transaction());
    h.gtid(true);
    h.query("XA COMMIT X'31',X'',1");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn the_position_moves_only_at_commits() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    assert_eq!(h.follower.take_moved(), None);
    h.xid();
    let end = h.pos as u64;
    assert_eq!(
        h.follower.take_moved(),
        Some(BinlogPosition {
            file: "mysql-bin.000001".into(),
            pos: end
        })
    );
    assert_eq!(h.follower.take_moved(), None);
    // A heartbeat carries the server's position but is no event of the file.
    let hb = raw(HEARTBEAT_EVENT, 999_999, b"mysql-bin.000001");
    h.feed(hb);
    assert_eq!(h.follower.take_moved(), None);
    // Standalone statements commit by themselves.
    h.gtid(true);
    h.query("GRANT SELECT ON *.* TO x");
    assert_eq!(h.follower.position().pos, h.pos as u64);
}

/// A rotate event: position, then the name.
fn rotate_body(pos: u64, name: &[u8]) -> Vec<u8> {
    let mut b = pos.to_le_bytes().to_vec();
    b.extend_from_slice(name);
    b
}

#[test]
fn rotates_move_to_the_next_file() {
    let mut h = Harness::new();
    h.event(ROTATE_EVENT, &rotate_body(4, b"mysql-bin.000002"));
    assert_eq!(
        h.follower.take_moved(),
        Some(BinlogPosition {
            file: "mysql-bin.000002".into(),
            pos: 4
        })
    );
}

#[test]
fn the_first_rotate_loses_mariadbs_crc() {
    // What MariaDB sends first: an artificial rotate (log_pos 0, flag 0x20) with a CRC32 after
    // the name, before any format description says there are checksums.
    let body = rotate_body(471, b"mysql-bin.000007");
    let mut event = header(ROTATE_EVENT, 0, LOG_EVENT_ARTIFICIAL_F, body.len() + 4);
    event.extend_from_slice(&body);
    let crc = crc32(&event);
    event.extend_from_slice(&crc.to_le_bytes());
    let mut h = Harness::new();
    h.feed(event);
    assert_eq!(
        h.follower.position(),
        BinlogPosition {
            file: "mysql-bin.000007".into(),
            pos: 471
        }
    );
    // Without a CRC the name is left alone.
    let mut h = Harness::new();
    let body = rotate_body(4, b"mysql-bin.000008");
    let mut event = header(ROTATE_EVENT, 0, LOG_EVENT_ARTIFICIAL_F, body.len());
    event.extend_from_slice(&body);
    h.feed(event);
    assert_eq!(h.follower.position().file, "mysql-bin.000008");
}

#[test]
fn crc32_is_the_ieee_one() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn an_unfinished_transaction_is_polled_for_when_the_next_begins() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.gtid(false);
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

// XA transactions as MariaDB 10.11 writes them (bodies from `mariadb-binlog --hexdump`, their
// CRC32 left off). `XA START` is no event of its own: the group's GTID event says it (flags2
// 0x4c: FL_PREPARED_XA | FL_ALLOW_PARALLEL | FL_TRANSACTIONAL), with the XID. The rows follow,
// then `XA END` as a query event, then the XA_PREPARE_LOG_EVENT: one_phase, formatID,
// gtrid_length, bqual_length (little-endian), gtrid, bqual. `XA COMMIT`/`XA ROLLBACK` is a
// group of its own: a GTID event (flags2 0x8d: FL_COMPLETED_XA | FL_STANDALONE | ...) and the
// statement, always written as `XA COMMIT X'<gtrid>',X'<bqual>',<formatID>`.

/// One XA transaction's events, as the server writes them.
struct Xa<'a> {
    /// The GTID event that starts it.
    start: &'a [u8],
    /// The XID as the server writes it in statements.
    xid: &'a str,
    /// The XA_PREPARE_LOG_EVENT's body.
    prepare: &'a [u8],
    /// The GTID event of the group that commits or rolls it back.
    end: &'a [u8],
}

/// `XA START 'abc'` ... `XA COMMIT 'abc'`, i.e. X'616263',X'',1 (GTIDs 0-1-1 and 0-1-4).
const XA_ABC: Xa<'static> = Xa {
    // seq_no, domain, flags2, formatID, gtrid and bqual lengths, "abc", flags_extra...
    start: &[
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 1, 0, 0, 0, 3, 0, b'a', b'b', b'c', 0x01, 0xff,
    ],
    xid: "X'616263',X'',1",
    prepare: &[0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, b'a', b'b', b'c'],
    end: &[
        4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x8d, 1, 0, 0, 0, 3, 0, b'a', b'b', b'c',
    ],
};

/// `XA START X'01FF', X'bb', 5` ... (GTIDs 0-1-2 and 0-1-5).
const XA_01FF_BB_5: Xa<'static> = Xa {
    start: &[
        2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 5, 0, 0, 0, 2, 1, 0x01, 0xff, 0xbb, 0x01, 0xff,
    ],
    xid: "X'01ff',X'bb',5",
    prepare: &[0, 5, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0x01, 0xff, 0xbb],
    end: &[
        5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x8d, 5, 0, 0, 0, 2, 1, 0x01, 0xff, 0xbb,
    ],
};

impl Harness {
    /// `xa` up to its prepare, having written a row to `table` (table id `id`).
    fn xa_prepared(&mut self, xa: &Xa<'_>, table: &str, id: u64) {
        let cols = rfc_cols();
        self.event(MARIADB_GTID_EVENT, xa.start);
        self.table_map(id, table, &cols);
        self.rows(id, &cols, Rows::Write(vec![row(1, None, None)]));
        self.query(&format!("XA END {}", xa.xid));
        self.event(XA_PREPARE_LOG_EVENT, xa.prepare);
    }

    /// `XA COMMIT` or `XA ROLLBACK` (`verb`) of `xa`, in its group.
    fn xa_end(&mut self, xa: &Xa<'_>, verb: &str) {
        self.event(MARIADB_GTID_EVENT, xa.end);
        self.query(&format!("XA {verb} {}", xa.xid));
    }
}

#[test]
fn interleaved_xa_transactions_poll_their_own_tables_at_their_commits() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.message_table("n", &cols);
    h.xa_prepared(&XA_ABC, "m", 70);
    h.xa_prepared(&XA_01FF_BB_5, "n", 71);
    assert!(h.calls().is_empty(), "prepared is not committed");
    assert!(!h.follower.in_transaction());
    let end = h.pos as u64;
    assert_eq!(h.follower.position().pos, end, "a prepare ends its group");

    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();
    h.xa_end(&XA_01FF_BB_5, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("n".into())]);
    assert!(!h.follower.in_transaction());
    assert_eq!(h.follower.position().pos, h.pos as u64);

    // Each is forgotten at its commit: seen again, a commit is not known.
    h.clear();
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::PollAll]);
}

#[test]
fn an_xa_commit_not_seen_prepared_polls_every_table() {
    let cols = rfc_cols();
    for sql in [
        // Prepared before this follower started.
        "XA COMMIT X'616263',X'',1",
        "XA ROLLBACK X'616263',X'',1",
        // Unreadable (not a form the server writes).
        "XA COMMIT B'0110'",
        "XA COMMIT 'a\\'b'",
    ] {
        let mut h = Harness::new();
        h.message_table("m", &cols);
        h.gtid(true);
        h.query(sql);
        assert_eq!(h.calls(), vec![Call::PollAll], "{sql}");
        assert!(!h.follower.in_transaction());
    }

    // A prepare event that cannot be read keeps nothing, so its commit polls every table.
    let mut h = Harness::new();
    h.message_table("m", &cols);
    let cut = Xa {
        prepare: &XA_ABC.prepare[..10],
        ..XA_ABC
    };
    h.xa_prepared(&cut, "m", 70);
    assert!(h.calls().is_empty());
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::PollAll]);
}

#[test]
fn an_xa_transaction_of_other_tables_polls_nothing() {
    let mut h = Harness::new();
    h.message_table("m", &rfc_cols());
    // `other` is no message table.
    h.xa_prepared(&XA_ABC, "other", 90);
    h.xa_end(&XA_ABC, "COMMIT");
    assert!(h.calls().is_empty());
}

#[test]
fn an_xa_rollback_polls_its_tables_and_forgets_them() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.message_table("n", &cols);
    h.xa_prepared(&XA_ABC, "m", 70);
    h.xa_prepared(&XA_01FF_BB_5, "n", 71);
    h.xa_end(&XA_01FF_BB_5, "ROLLBACK");
    assert_eq!(h.calls(), vec![Call::Poll("n".into())]);
    h.clear();
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();
    h.xa_end(&XA_01FF_BB_5, "ROLLBACK");
    assert_eq!(h.calls(), vec![Call::PollAll], "forgotten at its rollback");
}

#[test]
fn prepared_xa_transactions_outlive_a_rotate() {
    let mut h = Harness::new();
    h.message_table("m", &rfc_cols());
    h.xa_prepared(&XA_ABC, "m", 70);
    h.event(ROTATE_EVENT, &rotate_body(4, b"mysql-bin.000002"));
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn prepared_xa_transactions_are_capped() {
    let mut h = Harness::new();
    h.message_table("m", &rfc_cols());
    // XIDs of 4 bytes: `i`, little-endian.
    let xid = |i: u32| {
        let gtrid = i.to_le_bytes();
        let mut prepare = vec![0, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0];
        prepare.extend_from_slice(&gtrid);
        let hex: String = gtrid.iter().map(|b| format!("{b:02x}")).collect();
        (prepare, format!("X'{hex}',X'',1"))
    };
    let n = u32::try_from(crate::binlog::xa::MAX_PREPARED_XIDS).expect("small");
    for i in 0..=n {
        let (prepare, sql) = xid(i);
        let xa = Xa {
            xid: &sql,
            prepare: &prepare,
            ..XA_ABC
        };
        h.xa_prepared(&xa, "m", 70);
    }
    // The first was forgotten to make room for the last: its commit is not known.
    for (i, want) in [
        (0, Call::PollAll),
        (1, Call::Poll("m".into())),
        (n, Call::Poll("m".into())),
    ] {
        h.clear();
        h.gtid(true);
        h.query(&format!("XA COMMIT {}", xid(i).1));
        assert_eq!(h.calls(), vec![want], "{i}");
    }
}

#[test]
fn one_phase_xa_commits_deliver_their_rows() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    // MariaDB: `XA COMMIT 'op' ONE PHASE` is written as BEGIN (GTID 0-1-7, flags2 0x0c),
    // the rows, and an XID event; no XA statement at all.
    h.event(
        MARIADB_GTID_EVENT,
        &[7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0, 0, 0, 0, 0, 0],
    );
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(3, None, None)]));
    h.xid();
    assert_eq!(h.calls(), vec![changed("3", None, None)]);
    h.clear();

    // MySQL: the rows, then a prepare event with one_phase set, which commits.
    h.gtid(false);
    h.query("XA START X'6f70',X'',1");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(4, None, None)]));
    h.query("XA END X'6f70',X'',1");
    h.event(
        XA_PREPARE_LOG_EVENT,
        &[1, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, b'o', b'p'],
    );
    assert_eq!(h.calls(), vec![changed("4", None, None)]);
    assert!(!h.follower.in_transaction());
    h.clear();

    // The statement form, should a server write one: its rows are its own, nothing else polled.
    h.gtid(false);
    h.query("XA START 'op'");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(5, None, None)]));
    h.query("XA END 'op'");
    h.query("XA COMMIT 'op' ONE PHASE");
    assert_eq!(h.calls(), vec![changed("5", None, None)]);
    assert!(!h.follower.in_transaction());
}
