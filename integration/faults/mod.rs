//! Faults on purpose (issue 6): the proxy SIGKILLed and restarted, the backend restarted under
//! load, a consumer that stops reading its socket, clients that vanish in the middle of a stream
//! batch, a large result or a `LOAD DATA LOCAL INFILE`, and one of two proxies SIGKILLed
//! mid-stream. Every test counts every message, so each one fails when msgproxy loses a message
//! or sends one again within its ack window.
//!
//! How "within its ack window" is checked exactly: a claim writes the row's next `time_next`
//! (ack wait plus backoff) before the row is sent, and nobody may claim the row again before
//! that moment. When a proxy is killed, its claims stay in the table as they were; a snapshot of
//! the table taken right after the kill therefore says, for every row the dead proxy had
//! claimed and nobody acked, the earliest moment (Unix ns) a second delivery is allowed. The
//! clients stamp every message with the wall clock when it arrives (after its claim), so a
//! delivery stamped before that moment is a repeat within the window — no timing tolerance.
//!
//! The tables here purge only after 600 s, so "acked" can be read back from the database.
//!
//! Run alone: `cargo test --test integration faults:: -- --test-threads=5` (about 10 s; about 30 s
//! one at a time).
//!
//! Layout:
//! - this module — the shared helpers: tables, inserts, deliveries, acks, and the windows of
//!   claims.
//! - `proxy_kills` — msgproxy SIGKILLed and restarted, and one of two proxies SIGKILLed.
//! - `backend_restarts` — the backend restarted (clean, then SIGKILL) under load.
//! - `misbehaving_clients` — a consumer that stops reading, clients that vanish mid-batch,
//!   mid-result and mid-LOAD DATA.

mod backend_restarts;
mod misbehaving_clients;
mod proxy_kills;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql_async::Conn;

use crate::messaging::harness::{exec, Msg, RowState, Stream};

/// A message table of the RFC's shape whose acked rows stay for 600 s (so the tests can read
/// `time_acked` back), with a message column of type `message_type`.
fn table_sql(name: &str, ack_wait: &str, batch: u32, poll: &str, message_type: &str) -> String {
    format!(
        "CREATE TABLE `{name}` (id bigint PRIMARY KEY, time_next bigint, epoch bigint, \
         time_acked bigint, message {message_type}) COMMENT 'vitess_message,\
         vt_ack_wait={ack_wait},vt_purge_after=600,vt_batch_size={batch},vt_cache_size=1000,\
         vt_poller_interval={poll}'"
    )
}

/// One multi-row insert of ids `from..=to` (MariaDB's sequence engine), each message `bytes`
/// long.
fn insert_sql(table: &str, from: i64, to: i64, bytes: usize) -> String {
    format!(
        "INSERT INTO `{table}` (id, message) SELECT seq, RPAD(CONCAT('m', seq, '-'), {bytes}, \
         CHAR(65 + seq % 26)) FROM seq_{from}_to_{to}"
    )
}

fn is_acked(s: &RowState) -> bool {
    s.time_acked.is_some_and(|t| t != 0)
}

/// One message as a consumer got it.
#[derive(Debug, Clone)]
struct Delivery {
    id: i64,
    by: &'static str,
    at_ns: i64,
}

fn delivered(by: &'static str, msgs: &[Msg]) -> Vec<Delivery> {
    msgs.iter()
        .map(|m| Delivery {
            id: m.id,
            by,
            at_ns: m.at_ns,
        })
        .collect()
}

/// Waits up to `wait` for messages on any of `streams`; returns what has arrived (per stream,
/// in order), at least one message unless `wait` passed.
async fn take(streams: &mut [&mut Stream], wait: Duration) -> Vec<Vec<Msg>> {
    let deadline = Instant::now() + wait;
    loop {
        let mut got = Vec::with_capacity(streams.len());
        for s in streams.iter_mut() {
            got.push(s.ready().await);
        }
        if got.iter().any(|g| !g.is_empty()) || Instant::now() >= deadline {
            return got;
        }
        // How often to look until the deadline, not a wait for something to happen.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `ACK table ids` through `conn`; panics unless every id was newly acked.
async fn ack_all(conn: &mut Conn, table: &str, ids: &[i64], what: &str) {
    if ids.is_empty() {
        return;
    }
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    let sql = format!("ACK {table} {}", list.join(", "));
    let n = exec(conn, &sql)
        .await
        .unwrap_or_else(|e| panic!("{what}: {sql}: {e:?}"));
    assert_eq!(
        n,
        ids.len() as u64,
        "{what}: {sql} acked {n} rows; each id was delivered once and never acked"
    );
}

/// The rows a killed proxy had claimed and nobody had acked: id → the `time_next` its claim
/// wrote, before which no one may send the row again.
fn open_windows(snapshot: &BTreeMap<i64, RowState>) -> BTreeMap<i64, i64> {
    snapshot
        .iter()
        .filter(|(_, s)| !is_acked(s) && s.epoch.unwrap_or(0) > 0)
        .map(|(id, s)| (*id, s.time_next.unwrap_or(0)))
        .collect()
}

/// Deliveries that came before the window of the claim in `windows` had passed.
fn inside_windows(after: &[Delivery], windows: &BTreeMap<i64, i64>) -> Vec<String> {
    after
        .iter()
        .filter_map(|d| {
            let until = *windows.get(&d.id)?;
            (d.at_ns < until).then(|| {
                format!(
                    "id {} to {} {:.3} s before its window ended",
                    d.id,
                    d.by,
                    (until - d.at_ns) as f64 / 1e9
                )
            })
        })
        .collect()
}
