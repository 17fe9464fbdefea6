//! Finding where a group starts (`START ...`) or moves to (`SEEK ... TO ...`) in the binlog, and
//! the oldest event the binlog still holds. `EARLIEST` and `LATEST` are a file name and an
//! offset; a time or an event id is found by reading the binlog from its oldest file up to the
//! first transaction at or after it (GTID events only are looked at; nothing is buffered).

use std::pin::Pin;

use futures_core::Stream;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn, Opts, Row};
use mysql_common::binlog::events::{Event, QueryEvent, RotateEvent};

use super::ddl::{self, TableDdl};
use super::group::Progress;
use super::reader::{event_id, seq_no_of};
use crate::binlog::BinlogPosition;

/// Where to start, with a timestamp already turned into Unix seconds (in the session's zone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Latest,
    Earliest,
    Timestamp(u64),
    Event(u64),
}

const QUERY_EVENT: u8 = 2;
const ROTATE_EVENT: u8 = 4;
const MARIADB_GTID_EVENT: u8 = 162;
const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;

/// The progress of a group of `schema`.`table` that starts at `target`. Nothing before the
/// table's last creation in the binlog is reached: a table dropped and created again starts a
/// new stream.
pub async fn resolve(
    opts: &Opts,
    schema: &str,
    table: &str,
    target: Target,
) -> Result<Progress, String> {
    let mut progress = resolve_anywhere(opts, target).await?;
    if target != Target::Latest {
        if let Some(created) = last_creation(opts, schema, table).await? {
            let key = |p: &BinlogPosition| (p.file.clone(), p.pos);
            if key(&progress.resume) < key(&created) {
                progress.resume = created;
            }
        }
    }
    Ok(progress)
}

async fn resolve_anywhere(opts: &Opts, target: Target) -> Result<Progress, String> {
    let latest = || async {
        let mut conn = Conn::new(opts.clone()).await.map_err(|e| e.to_string())?;
        let pos = crate::binlog::watcher::current_position(&mut conn)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the server's binary log is off (log_bin = OFF)")?;
        let _ = conn.disconnect().await;
        Ok::<_, String>(pos)
    };
    match target {
        Target::Latest => Ok(Progress {
            floor: 0,
            resume: latest().await?,
            acked: Vec::new(),
        }),
        Target::Earliest => Ok(Progress {
            floor: 0,
            resume: earliest_file(opts).await?,
            acked: Vec::new(),
        }),
        Target::Timestamp(ts) => {
            let found = scan(opts, |seq, at| (at >= ts).then_some(seq)).await?;
            Ok(match found {
                Some((seq, resume)) => Progress {
                    floor: event_id(seq, 0),
                    resume,
                    acked: Vec::new(),
                },
                None => Progress {
                    floor: 0,
                    resume: latest().await?,
                    acked: Vec::new(),
                },
            })
        }
        Target::Event(id) => {
            let want = seq_no_of(id);
            let found = scan(opts, |seq, _| (seq >= want).then_some(seq)).await?;
            Ok(match found {
                Some((_, resume)) => Progress {
                    floor: id,
                    resume,
                    acked: Vec::new(),
                },
                None => Progress {
                    floor: id,
                    resume: latest().await?,
                    acked: Vec::new(),
                },
            })
        }
    }
}

/// The id of the oldest transaction's first possible event the binlog holds, if any.
pub async fn oldest_event(opts: &Opts) -> Result<Option<u64>, String> {
    Ok(scan(opts, |seq, _| Some(seq))
        .await?
        .map(|(seq, _)| event_id(seq, 0)))
}

async fn earliest_file(opts: &Opts) -> Result<BinlogPosition, String> {
    let mut conn = Conn::new(opts.clone()).await.map_err(|e| e.to_string())?;
    let first: Option<Row> = conn
        .query_first("SHOW BINARY LOGS")
        .await
        .map_err(|e| e.to_string())?;
    let _ = conn.disconnect().await;
    let file: String = first
        .and_then(|mut r| r.take(0))
        .ok_or("the server lists no binary logs (is log_bin on?)")?;
    Ok(BinlogPosition { file, pos: 4 })
}

/// Reads the binlog from its oldest file to its end (non-blocking) until `want` picks a GTID
/// event (by seq_no and commit time); returns its seq_no and where its transaction starts.
async fn scan(
    opts: &Opts,
    want: impl Fn(u64, u64) -> Option<u64>,
) -> Result<Option<(u64, BinlogPosition)>, String> {
    let mut found = None;
    scan_events(opts, |file, event| {
        let header = event.header();
        if header.event_type_raw() != MARIADB_GTID_EVENT {
            return false;
        }
        let seq = event
            .data()
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        let Some(seq) = seq.and_then(|seq| want(seq, u64::from(header.timestamp()))) else {
            return false;
        };
        let end = u64::from(header.log_pos());
        found = Some((
            seq,
            BinlogPosition {
                file: file.to_owned(),
                pos: end.saturating_sub(u64::from(header.event_size())),
            },
        ));
        true
    })
    .await?;
    Ok(found)
}

/// Where the table's current incarnation begins in the binlog: just after the last statement
/// that created it or made it go (a table dropped and created again starts a new stream), or
/// `None` when the binlog holds no such statement.
pub async fn last_creation(
    opts: &Opts,
    schema: &str,
    table: &str,
) -> Result<Option<BinlogPosition>, String> {
    let mut last = None;
    scan_events(opts, |file, event| {
        if event.header().event_type_raw() != QUERY_EVENT {
            return false;
        }
        let Ok(query) = event.read_event::<QueryEvent<'_>>() else {
            return false;
        };
        if ddl::effect(query.query_raw(), &query.schema(), schema, table) != TableDdl::None {
            last = Some(BinlogPosition {
                file: file.to_owned(),
                pos: u64::from(event.header().log_pos()),
            });
        }
        false
    })
    .await?;
    Ok(last)
}

/// Reads the binlog from its oldest file to its end (non-blocking), handing each event and the
/// file it is in to `visit` until it says stop.
async fn scan_events(
    opts: &Opts,
    mut visit: impl FnMut(&str, &Event) -> bool,
) -> Result<(), String> {
    let start = earliest_file(opts).await?;
    let mut conn = Conn::new(opts.clone()).await.map_err(|e| e.to_string())?;
    conn.query_drop("SET @mariadb_slave_capability = 4")
        .await
        .map_err(|e| e.to_string())?;
    let request = BinlogStreamRequest::new(super::reader::replica_id())
        .with_filename(start.file.as_bytes())
        .with_pos(start.pos)
        .with_non_blocking();
    let mut stream = conn
        .get_binlog_stream(request)
        .await
        .map_err(|e| e.to_string())?;
    let mut file = start.file.clone();
    while let Some(event) = next(&mut stream).await {
        let event: Event = event.map_err(|e| e.to_string())?;
        let header = event.header();
        if header.event_type_raw() == ROTATE_EVENT {
            if let Ok(rotate) = event.read_event::<RotateEvent<'_>>() {
                let mut name = rotate.name_raw();
                if header.flags_raw() & LOG_EVENT_ARTIFICIAL_F != 0 || header.log_pos() == 0 {
                    name = crate::binlog::follow::strip_crc(&event, name);
                }
                file = String::from_utf8_lossy(name).into_owned();
            }
            continue;
        }
        if visit(&file, &event) {
            break;
        }
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.close()).await;
    Ok(())
}

async fn next(stream: &mut mysql_async::BinlogStream) -> Option<mysql_async::Result<Event>> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}
