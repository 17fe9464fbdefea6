//! Tests of the event-stream reading, fed with binlog events built byte by byte (the v4 format
//! MariaDB writes: v1 rows events, 6-byte table ids, no checksums unless a test adds one).
//!
//! This file holds what they share — the event builders and a [`Harness`] that feeds a
//! [`Follower`] and records what it asks of its [`Sink`]; the tests are by subject in
//! `follow_rows_tests.rs` (row events, transactions, DDL, the position and rotates) and
//! `follow_xa_tests.rs` (XA transactions).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::Event;
use mysql_common::binlog::EventStreamReader;

use super::*;
use crate::messaging::table::{from_comment, ColumnInfo};

#[path = "follow_rows_tests.rs"]
mod rows;
#[path = "follow_xa_tests.rs"]
mod xa;

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

    fn schema_changed(&self, _: Option<crate::binlog::follow::Ddl<'_>>) {
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

/// A rotate event: position, then the name.
fn rotate_body(pos: u64, name: &[u8]) -> Vec<u8> {
    let mut b = pos.to_le_bytes().to_vec();
    b.extend_from_slice(name);
    b
}

/// The GTID of a transaction counts once it commits (where the watcher resumes on another
/// server), not while it is being read.
#[test]
fn gtids_move_at_commit() {
    let mut h = Harness::new();
    h.follower = Follower::new(&BinlogPosition {
        file: "mysql-bin.000001".into(),
        pos: 4,
    })
    .with_gtids(crate::binlog::gtid::GtidState::parse("0-1-0,100-3-9").unwrap());
    h.gtid(false);
    assert_eq!(h.follower.gtids().to_string(), "0-1-0,100-3-9");
    h.query("BEGIN");
    assert_eq!(h.follower.gtids().to_string(), "0-1-0,100-3-9");
    h.xid();
    assert_eq!(h.follower.gtids().to_string(), "0-1-1,100-3-9");
}
