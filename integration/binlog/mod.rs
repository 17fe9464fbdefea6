//! The binlog watcher end to end (issue 4): rows written straight to the server — by any
//! statement — reach a waiting stream within moments although every table here polls only every
//! 30 s or more; direct acks, reschedules and DDL are seen; XA transactions arrive at their own
//! commits; restarts of the server lose nothing; missing prerequisites are reported in one line
//! and the proxy runs on in poll mode.
//!
//! The proxy's pollers would find every row eventually, so each promptness check measures: a
//! row must arrive within [`PROMPT`], far below the tables' `vt_poller_interval`.
//!
//! The streams here reconnect by themselves ([`Consumer`]): a server restart ends every stream
//! (its backend connection dies), and a consumer that comes back is what an application does.
//!
//! Layout:
//! - this module — the shared helpers: tables, direct statements, and the reconnecting
//!   [`Consumer`] (also used by `faults`).
//! - `promptness` — direct writes of every kind, direct acks and reschedules, direct DDL, and
//!   delivery under heavy unrelated traffic.
//! - `restarts` — server restarts (clean and crash) and a binlog position that is gone.
//! - `poll_mode` — no binlog or missing privileges: one clear line, then poll mode, prompt for
//!   writes through the proxy however they are sent.
//! - `xa` — XA transactions arrive at their own commits.

mod poll_mode;
mod promptness;
mod restarts;
mod xa;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::*;
use mysql_async::Conn;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::{eventually, opts, MariaDb};

/// How fast a row written around the proxy must reach a waiting stream. The tables poll every
/// 30 s or more, so anything under this came through the binlog.
const PROMPT: Duration = Duration::from_secs(3);

const SEC: i64 = 1_000_000_000;

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A message-table comment.
fn comment(ack_wait: &str, batch: u32, poll: &str) -> String {
    format!(
        "vitess_message,vt_ack_wait={ack_wait},vt_purge_after=600,vt_batch_size={batch},\
         vt_cache_size=1000,vt_poller_interval={poll}"
    )
}

/// The RFC's message table.
fn create_table(name: &str, comment: &str) -> String {
    format!(
        "CREATE TABLE `{name}` (id bigint NOT NULL, time_next bigint DEFAULT 0, epoch bigint, \
         time_acked bigint, message varchar(128), PRIMARY KEY (id)) COMMENT '{comment}'"
    )
}

async fn connect(port: u16, user: &str, pass: Option<&str>, db: &str) -> Conn {
    match tokio::time::timeout(
        Duration::from_secs(15),
        Conn::new(opts(port, user, pass, Some(db))),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("connect to port {port} as {user}: {e}"),
        Err(_) => panic!("connect to port {port} as {user}: no answer within 15 s"),
    }
}

/// Runs statements straight on the server as root; panics on failure.
async fn direct(port: u16, db: &str, statements: &[&str]) {
    let mut c = connect(port, "root", None, db).await;
    for sql in statements {
        if let Err(e) = c.query_drop(*sql).await {
            panic!("directly: {sql}: {e}");
        }
    }
    let _ = c.disconnect().await;
}

/// (Re)creates database `db`.
async fn fresh_db(server: &MariaDb, db: &str) {
    let mut c = connect(server.port(), "root", None, "mysql").await;
    for sql in [
        "SET GLOBAL max_connections = 2000".to_string(),
        format!("DROP DATABASE IF EXISTS `{db}`"),
        format!("CREATE DATABASE `{db}`"),
    ] {
        c.query_drop(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let _ = c.disconnect().await;
}

/// What a consumer saw.
#[derive(Debug)]
pub(crate) enum Seen {
    Message {
        id: i64,
        at: Instant,
    },
    /// The stream ended or failed (the error), and the consumer is reconnecting.
    Ended(String),
}

/// A `STREAM * FROM t` that reconnects after its stream ends, like an application would. It runs
/// on a thread with its own runtime: mysql_async cannot drop a connection mid-result without
/// draining it (forever, for a stream), so stopping means dropping that runtime.
pub(crate) struct Consumer {
    rx: mpsc::UnboundedReceiver<Seen>,
    stop: CancellationToken,
    opened: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
    what: String,
}

impl Consumer {
    pub(crate) fn start(port: u16, db: &str, table: &str) -> Consumer {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let opened = Arc::new(AtomicUsize::new(0));
        let sql = format!("STREAM * FROM `{table}`");
        let (db2, sql2, stop2, opened2) =
            (db.to_string(), sql.clone(), stop.clone(), opened.clone());
        let thread = std::thread::Builder::new()
            .name(format!("consumer-{table}"))
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(consume(port, db2, sql2, tx, stop2, opened2));
            })
            .expect("start a consumer thread");
        Consumer {
            rx,
            stop,
            opened,
            thread: Some(thread),
            what: format!("{sql} on port {port}"),
        }
    }

    /// Waits until the stream has been opened `n` times in all (its columns arrived).
    pub(crate) async fn wait_open(&self, n: usize, secs: u64) {
        let opened = eventually(secs, async || self.opened.load(Ordering::SeqCst) >= n).await;
        assert!(opened, "{}: not open (#{n}) within {secs} s", self.what);
    }

    /// The next thing seen, within `wait`.
    pub(crate) async fn next(&mut self, wait: Duration) -> Option<Seen> {
        tokio::time::timeout(wait, self.rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// Messages until every id of `want` has come at least once or `wait` passes; returns how
    /// often each id came (all ids, also unexpected ones) and when each first came.
    async fn until_all(
        &mut self,
        want: &BTreeSet<i64>,
        wait: Duration,
    ) -> (BTreeMap<i64, usize>, BTreeMap<i64, Instant>) {
        let deadline = Instant::now() + wait;
        let mut counts = BTreeMap::new();
        let mut first = BTreeMap::new();
        while !want.iter().all(|id| counts.contains_key(id)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(Seen::Message { id, at }) => {
                    *counts.entry(id).or_insert(0) += 1;
                    first.entry(id).or_insert(at);
                }
                Some(Seen::Ended(_)) => {}
                None => break,
            }
        }
        (counts, first)
    }

    /// Expects exactly the ids `want` (each once, nothing else) within `wait`, and returns how long
    /// after `since` the last of them came.
    async fn expect(
        &mut self,
        want: &[i64],
        since: Instant,
        wait: Duration,
        what: &str,
    ) -> Duration {
        let want_set: BTreeSet<i64> = want.iter().copied().collect();
        let (counts, first) = self.until_all(&want_set, wait).await;
        let missing: Vec<i64> = want_set
            .iter()
            .filter(|i| !counts.contains_key(i))
            .copied()
            .collect();
        assert!(
            missing.is_empty(),
            "{what}: ids {missing:?} did not arrive within {wait:?} (got {counts:?})"
        );
        let extra: Vec<(&i64, &usize)> = counts
            .iter()
            .filter(|(id, n)| !want_set.contains(id) || **n > 1)
            .collect();
        assert!(extra.is_empty(), "{what}: unexpected deliveries {extra:?}");
        let last = first.values().max().copied().unwrap_or(since);
        let latency = last.saturating_duration_since(since);
        eprintln!("{what}: {} message(s) in {latency:?}", want.len());
        latency
    }

    /// Panics if a message arrives within `wait`.
    async fn expect_quiet(&mut self, wait: Duration, what: &str) {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(Seen::Message { id, .. }) => {
                    panic!("{what}: expected no message within {wait:?}, got id {id}")
                }
                Some(Seen::Ended(_)) => {}
                None => return,
            }
        }
    }

    /// Waits for the stream to end (an error), returning the error.
    async fn expect_end(&mut self, wait: Duration, what: &str) -> String {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(Seen::Ended(e)) => return e,
                Some(Seen::Message { .. }) => {}
                None => panic!("{what}: the stream did not end within {wait:?}"),
            }
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn consume(
    port: u16,
    db: String,
    sql: String,
    tx: mpsc::UnboundedSender<Seen>,
    stop: CancellationToken,
    opened: Arc<AtomicUsize>,
) {
    while !stop.is_cancelled() {
        let connected = tokio::select! {
            c = tokio::time::timeout(Duration::from_secs(5), Conn::new(opts(port, "root", None, Some(&db)))) => c,
            _ = stop.cancelled() => return,
        };
        let mut conn = match connected {
            Ok(Ok(c)) => c,
            _ => {
                // Reconnect pace, not a wait for something.
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let ended = match conn.query_iter(&sql).await {
            Err(e) => e.to_string(),
            Ok(mut result) => {
                opened.fetch_add(1, Ordering::SeqCst);
                loop {
                    let row = tokio::select! {
                        r = result.next() => r,
                        // Leaving drops the runtime, and the connection with it.
                        _ = stop.cancelled() => return,
                    };
                    match row {
                        Ok(Some(row)) => {
                            let id = row.get::<i64, _>(0).unwrap_or(i64::MIN);
                            let _ = tx.send(Seen::Message {
                                id,
                                at: Instant::now(),
                            });
                        }
                        Ok(None) => break "the result set ended".to_string(),
                        Err(e) => break e.to_string(),
                    }
                }
            }
        };
        let _ = tx.send(Seen::Ended(ended));
        // The stream is over (ended or broken), so there is nothing left to drain.
        drop(conn);
        tokio::select! {
            // Reconnect pace, not a wait for something.
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = stop.cancelled() => return,
        }
    }
}
