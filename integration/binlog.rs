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

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::*;
use mysql_async::{Conn, Pool, WhiteListFsHandler};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::process::tail;
use crate::support::{eventually, opts, wait_for_log, MariaDb, Proxy};

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
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Every way of writing a row straight to the server reaches a waiting stream promptly.
#[tokio::test]
async fn direct_writes_reach_streams_promptly() {
    let server = MariaDb::shared();
    let db = "binlog_writes";
    fresh_db(server, db).await;
    let table = create_table("m", &comment("30", 10, "30"));
    direct(
        server.port(),
        db,
        &[
            &table,
            "CREATE TABLE src (id bigint PRIMARY KEY, message varchar(128))",
            "CREATE TABLE feed (id bigint PRIMARY KEY)",
            "CREATE TRIGGER feed_to_m AFTER INSERT ON feed FOR EACH ROW \
             INSERT INTO m (id, message) VALUES (NEW.id, 'from a trigger')",
        ],
    )
    .await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    // The stream's first poll (on subscribe) finds nothing; everything below comes later.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut w = connect(server.port(), "root", None, db).await;
    let t = Instant::now();
    w.query_drop("INSERT INTO m (id, message) VALUES (1, 'one')")
        .await
        .expect("insert");
    let one = c.expect(&[1], t, PROMPT, "a single insert").await;

    let t = Instant::now();
    w.query_drop("INSERT INTO m (id, message) VALUES (2, 'a'), (3, 'b'), (4, 'c')")
        .await
        .expect("multi-row insert");
    c.expect(&[2, 3, 4], t, PROMPT, "a multi-row insert").await;

    w.query_drop("INSERT INTO src VALUES (5, 'x'), (6, 'y'), (7, 'z')")
        .await
        .expect("fill src");
    let t = Instant::now();
    w.query_drop("INSERT INTO m (id, message) SELECT id, message FROM src")
        .await
        .expect("insert select");
    c.expect(&[5, 6, 7], t, PROMPT, "INSERT ... SELECT").await;

    let t = Instant::now();
    w.query_drop("INSERT INTO feed VALUES (8)")
        .await
        .expect("trigger insert");
    c.expect(&[8], t, PROMPT, "a trigger").await;

    let file = std::env::temp_dir().join(format!("binlog-load-{}.csv", std::process::id()));
    {
        let mut f = std::fs::File::create(&file).expect("create the LOAD DATA file");
        for id in 9..=12 {
            writeln!(f, "{id},loaded").expect("write");
        }
    }
    let mut loader = Conn::new(
        opts(server.port(), "root", None, Some(db))
            .local_infile_handler(Some(WhiteListFsHandler::new([file.clone()]))),
    )
    .await
    .expect("connect the loader");
    let t = Instant::now();
    loader
        .query_drop(format!(
            "LOAD DATA LOCAL INFILE '{}' INTO TABLE m FIELDS TERMINATED BY ',' (id, message)",
            file.display()
        ))
        .await
        .expect("load data");
    let _ = std::fs::remove_file(&file);
    c.expect(&[9, 10, 11, 12], t, PROMPT, "LOAD DATA").await;

    // REPLACE and INSERT ... ON DUPLICATE KEY UPDATE of an acked row make it a new message.
    w.query_drop("UPDATE m SET time_acked = 1, time_next = NULL WHERE id IN (1, 2)")
        .await
        .expect("ack");
    let t = Instant::now();
    w.query_drop("REPLACE INTO m (id, message) VALUES (1, 'again')")
        .await
        .expect("replace");
    w.query_drop(
        "INSERT INTO m (id, message) VALUES (2, 'again') ON DUPLICATE KEY UPDATE \
         time_acked = NULL, time_next = 0, message = VALUES(message)",
    )
    .await
    .expect("odku");
    c.expect(&[1, 2], t, PROMPT, "REPLACE and ON DUPLICATE KEY UPDATE")
        .await;

    // A transaction: nothing before COMMIT, everything after; a rollback: nothing ever.
    w.query_drop("BEGIN").await.expect("begin");
    w.query_drop("INSERT INTO m (id, message) VALUES (13, 'tx'), (14, 'tx')")
        .await
        .expect("insert in tx");
    c.expect_quiet(Duration::from_millis(700), "an uncommitted insert")
        .await;
    let t = Instant::now();
    w.query_drop("COMMIT").await.expect("commit");
    c.expect(&[13, 14], t, PROMPT, "a committed transaction")
        .await;
    w.query_drop("BEGIN").await.expect("begin");
    w.query_drop("INSERT INTO m (id, message) VALUES (15, 'rolled back')")
        .await
        .expect("insert in tx");
    w.query_drop("ROLLBACK").await.expect("rollback");
    c.expect_quiet(Duration::from_secs(1), "a rolled-back insert")
        .await;
    let _ = w.disconnect().await;
    eprintln!("first message after {one:?}");
    proxy.assert_alive();
}

/// Direct acks drop messages for good; direct reschedules are re-evaluated at once.
#[tokio::test]
async fn direct_acks_and_reschedules() {
    let server = MariaDb::shared();
    let db = "binlog_acks";
    fresh_db(server, db).await;
    direct(
        server.port(),
        db,
        &[&create_table("m", &comment("2", 10, "30"))],
    )
    .await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    let mut w = connect(server.port(), "root", None, db).await;

    let t = Instant::now();
    w.query_drop("INSERT INTO m (id, message) VALUES (1, 'acked'), (2, 'not acked')")
        .await
        .expect("insert");
    c.expect(&[1, 2], t, PROMPT, "two inserts").await;
    // The Vitess ack, straight on the server.
    w.query_drop(format!(
        "UPDATE m SET time_acked = {}, time_next = NULL WHERE id IN (1) AND time_acked IS NULL",
        now_ns()
    ))
    .await
    .expect("ack");
    // id 2 comes back after its ack wait (2 s + backoff of 2 s × [0.666, 1.333]); id 1 never.
    let (counts, _) = c
        .until_all(&BTreeSet::from([2]), Duration::from_secs(8))
        .await;
    assert_eq!(
        counts,
        BTreeMap::from([(2, 1)]),
        "only the unacked message comes back"
    );
    w.query_drop("UPDATE m SET time_acked = 1, time_next = NULL WHERE id = 2")
        .await
        .expect("ack");
    c.expect_quiet(Duration::from_secs(2), "after both are acked")
        .await;

    // A row scheduled an hour ahead, then moved to now: sent at once.
    let later = now_ns() + 3600 * SEC;
    w.query_drop(format!(
        "INSERT INTO m (id, time_next, message) VALUES (3, {later}, 'later'), (4, {later}, 'later')"
    ))
    .await
    .expect("insert scheduled");
    c.expect_quiet(Duration::from_secs(1), "rows scheduled an hour ahead")
        .await;
    let t = Instant::now();
    w.query_drop("UPDATE m SET time_next = NULL WHERE id = 3")
        .await
        .expect("reschedule to now");
    c.expect(&[3], t, PROMPT, "a row rescheduled to now").await;
    // Moved to two seconds ahead: sent then, not before, not at the next poll.
    let t = Instant::now();
    w.query_drop(format!(
        "UPDATE m SET time_next = {} WHERE id = 4",
        now_ns() + 2 * SEC
    ))
    .await
    .expect("reschedule to soon");
    let latency = c
        .expect(&[4], t, Duration::from_secs(6), "a row rescheduled to +2 s")
        .await;
    assert!(
        latency >= Duration::from_millis(1500),
        "sent {latency:?} after being scheduled 2 s ahead"
    );
    let _ = w.disconnect().await;
    proxy.assert_alive();
}

/// DDL made straight on the server reloads the proxy's tables at once (the periodic reload is
/// every 10 s).
#[tokio::test]
async fn direct_ddl_reloads_message_tables() {
    let server = MariaDb::shared();
    let db = "binlog_ddl";
    fresh_db(server, db).await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "binlog: following from", 15).await;

    let t = Instant::now();
    direct(
        server.port(),
        db,
        &[&create_table("m", &comment("30", 10, "30"))],
    )
    .await;
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 3).await;
    eprintln!("a table created directly streams after {:?}", t.elapsed());
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &["INSERT INTO m (id, message) VALUES (1, 'x')"],
    )
    .await;
    c.expect(&[1], t, PROMPT, "an insert into a table created directly")
        .await;

    // Renamed: the open stream ends; the new name streams.
    let t = Instant::now();
    direct(server.port(), db, &["RENAME TABLE m TO m2"]).await;
    let why = c.expect_end(PROMPT, "a renamed table's stream").await;
    eprintln!(
        "the stream of a renamed table ended after {:?}: {why}",
        t.elapsed()
    );
    drop(c);
    let mut c2 = Consumer::start(proxy.port(), db, "m2");
    c2.wait_open(1, 3).await;
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &["INSERT INTO m2 (id, message) VALUES (2, 'y')"],
    )
    .await;
    c2.expect(&[2], t, PROMPT, "an insert into the renamed table")
        .await;

    // Altered so it is no longer a message table: the stream ends.
    direct(
        server.port(),
        db,
        &["ALTER TABLE m2 COMMENT 'just a table'"],
    )
    .await;
    c2.expect_end(PROMPT, "a table that stopped being a message table")
        .await;
    // And back.
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &[&format!(
            "ALTER TABLE m2 COMMENT '{}'",
            comment("30", 10, "30")
        )],
    )
    .await;
    c2.wait_open(2, 3).await;
    eprintln!(
        "a table made a message table again streams after {:?}",
        t.elapsed()
    );
    drop(c2);
    proxy.assert_alive();
}

/// Restarts (clean and crash) of the server while streams are connected and rows are written
/// straight to it: every row is delivered, promptly after the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restarts_lose_nothing() {
    let server = MariaDb::start();
    let db = "binlog_restart";
    fresh_db(&server, db).await;
    direct(
        server.port(),
        db,
        &[&create_table("m", &comment("1", 20, "120"))],
    )
    .await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let mut consumers = vec![
        Consumer::start(proxy.port(), db, "m"),
        Consumer::start(proxy.port(), db, "m"),
    ];
    for c in &consumers {
        c.wait_open(1, 10).await;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    for mut c in consumers.drain(..) {
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(seen) = c.rx.recv().await {
                if tx.send(seen).is_err() {
                    break;
                }
            }
            drop(c);
        });
    }
    drop(tx);

    // Acks straight on the server, as they come (a pool reconnects by itself).
    let acks = Pool::new(opts(server.port(), "root", None, Some(db)));

    // The writer inserts ids 1..=N straight into the server, retrying each until it is in.
    const N: i64 = 500;
    let port = server.port();
    let writer = tokio::spawn(async move {
        let mut conn: Option<Conn> = None;
        let mut id = 1;
        while id <= N {
            if conn.is_none() {
                conn = Conn::new(opts(port, "root", None, Some("binlog_restart")))
                    .await
                    .ok();
                if conn.is_none() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
            let Some(c) = conn.as_mut() else { continue };
            match c
                .query_drop(format!(
                    "INSERT INTO m (id, message) VALUES ({id}, 'm{id}')"
                ))
                .await
            {
                Ok(()) => id += 1,
                // The insert committed before the connection broke: it is in.
                Err(mysql_async::Error::Server(e)) if e.code == 1062 => id += 1,
                Err(_) => conn = None,
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        Instant::now()
    });

    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    /// Takes in (and acks) what arrives until `until`.
    async fn take(
        rx: &mut mpsc::UnboundedReceiver<Seen>,
        counts: &mut BTreeMap<i64, usize>,
        acks: &Pool,
        until: Instant,
    ) {
        while let Ok(Some(seen)) =
            tokio::time::timeout(until.saturating_duration_since(Instant::now()), rx.recv()).await
        {
            if let Seen::Message { id, .. } = seen {
                *counts.entry(id).or_insert(0) += 1;
                if let Ok(mut conn) = acks.get_conn().await {
                    let _ = conn
                        .query_drop(format!(
                            "UPDATE m SET time_acked = {}, time_next = NULL \
                             WHERE id = {id} AND time_acked IS NULL",
                            now_ns()
                        ))
                        .await;
                }
            }
        }
    }

    take(
        &mut rx,
        &mut counts,
        &acks,
        Instant::now() + Duration::from_secs(2),
    )
    .await;
    eprintln!("restart 1 (clean) after {} messages", counts.len());
    server.stop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    take(
        &mut rx,
        &mut counts,
        &acks,
        Instant::now() + Duration::from_secs(3),
    )
    .await;
    eprintln!("restart 2 (crash) after {} messages", counts.len());
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    while !writer.is_finished() {
        take(
            &mut rx,
            &mut counts,
            &acks,
            Instant::now() + Duration::from_millis(200),
        )
        .await;
    }
    let written = writer.await.expect("the writer");
    eprintln!("all {N} rows written; {} delivered so far", counts.len());
    // Everything, within moments of the last write (the table polls every 120 s).
    let deadline = written + Duration::from_secs(15);
    while (1..=N).any(|id| !counts.contains_key(&id)) && Instant::now() < deadline {
        take(
            &mut rx,
            &mut counts,
            &acks,
            Instant::now() + Duration::from_millis(200),
        )
        .await;
    }
    eprintln!(
        "the last of them {:?} after the last write",
        written.elapsed()
    );
    let missing: Vec<i64> = (1..=N).filter(|id| !counts.contains_key(id)).collect();
    let repeated = counts.values().filter(|n| **n > 1).count();
    eprintln!(
        "{} of {N} delivered, {repeated} more than once (around the restarts)",
        counts.len()
    );
    if !missing.is_empty() {
        let list = missing
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let mut c = connect(server.port(), "root", None, db).await;
        type State = (i64, Option<i64>, Option<i64>, Option<i64>);
        let states: Vec<State> = c
            .query(format!(
                "SELECT id, epoch, time_next, time_acked FROM m WHERE id IN ({list})"
            ))
            .await
            .unwrap_or_default();
        panic!(
            "{} messages never arrived: {missing:?}; (id, epoch, time_next, time_acked) now \
             {states:?} at {}\n--- proxy log ---\n{}",
            missing.len(),
            now_ns(),
            tail(&proxy.log_path(), 6000)
        );
    }
    let log = proxy.log();
    assert!(log.contains("binlog: following again from"), "{log}");
    assert!(
        !log.contains("no longer has"),
        "the resume position should have survived the restarts: {log}"
    );
    proxy.assert_alive();
    acks.disconnect().await.ok();
}

/// The binlog the watcher was reading is deleted while the server is down: the watcher says so,
/// starts again from the current position, and polls every table to cover the gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_position_restarts_from_the_current_one() {
    let server = MariaDb::start();
    let db = "binlog_gone";
    fresh_db(&server, db).await;
    // Push the files past mysql-bin.000001, which a fresh binlog will reuse.
    direct(
        server.port(),
        db,
        &[
            &create_table("m", &comment("30", 10, "120")),
            "FLUSH BINARY LOGS",
            "FLUSH BINARY LOGS",
        ],
    )
    .await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &["INSERT INTO m (id, message) VALUES (1, 'before')"],
    )
    .await;
    c.expect(&[1], t, PROMPT, "before the restart").await;

    server.stop();
    for entry in std::fs::read_dir(server.data_dir())
        .expect("read the data dir")
        .flatten()
    {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("mysql-bin.")
        {
            std::fs::remove_file(entry.path()).expect("remove a binlog file");
        }
    }
    server.restart();
    // Written at once after the restart: before or after the watcher's new start position,
    // these arrive either through the binlog or through the gap poll — promptly either way.
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &["INSERT INTO m (id, message) VALUES (2, 'after')"],
    )
    .await;
    c.wait_open(2, 15).await;
    c.expect(&[2], t, Duration::from_secs(10), "right after the restart")
        .await;
    wait_for_log(&proxy, "no longer has", 10).await;
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &["INSERT INTO m (id, message) VALUES (3, 'later')"],
    )
    .await;
    c.expect(&[3], t, PROMPT, "after the watcher started again")
        .await;
    proxy.assert_alive();
}

/// A server without a binlog: one clear line, then poll mode, which still delivers.
#[tokio::test]
async fn binlog_off_runs_in_poll_mode() {
    let server = MariaDb::start_with(&["--skip-log-bin"]);
    let db = "binlog_off";
    fresh_db(&server, db).await;
    direct(
        server.port(),
        db,
        &[&create_table("m", &comment("30", 10, "1"))],
    )
    .await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "poll mode", 15).await;
    let log = proxy.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("poll mode")).collect();
    assert_eq!(lines.len(), 1, "one line: {log}");
    assert!(lines[0].contains("log_bin is OFF"), "{}", lines[0]);
    assert!(
        !lines[0].contains("GRANT"),
        "root may replicate: {}",
        lines[0]
    );
    assert!(lines[0].contains("log_bin = mysql-bin"), "{}", lines[0]);

    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    // Through the proxy: prompt (the proxy saw the insert).
    let mut p = connect(proxy.port(), "root", None, db).await;
    let t = Instant::now();
    p.query_drop("INSERT INTO m (id, message) VALUES (1, 'through the proxy')")
        .await
        .expect("insert through the proxy");
    c.expect(&[1], t, PROMPT, "an insert through the proxy")
        .await;
    // Straight to the server: at the next poll (every second here).
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &["INSERT INTO m (id, message) VALUES (2, 'direct')"],
    )
    .await;
    c.expect(
        &[2],
        t,
        Duration::from_secs(5),
        "a direct insert, by the poller",
    )
    .await;
    let _ = p.disconnect().await;
    proxy.assert_alive();
}

/// In poll mode, writes through the proxy are prompt however they are sent: a prepared INSERT
/// (binary protocol: Go's driver and JDBC by default), several statements in one query, an SQL
/// `PREPARE`/`EXECUTE`. They used to wait for the next poll (30 s here); only a text
/// `INSERT` asked for one.
#[tokio::test]
async fn poll_mode_is_prompt_for_prepared_and_multi_statement_writes() {
    let server = MariaDb::start_with(&["--skip-log-bin"]);
    let db = "binlog_off_prepared";
    fresh_db(&server, db).await;
    direct(
        server.port(),
        db,
        &[&create_table("m", &comment("30", 10, "30"))],
    )
    .await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "poll mode", 15).await;
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    let mut p = connect(proxy.port(), "root", None, db).await;
    let t = Instant::now();
    p.exec_drop("INSERT INTO m (id, message) VALUES (?, ?)", (1, "prepared"))
        .await
        .expect("a prepared insert");
    c.expect(&[1], t, PROMPT, "a prepared insert (binary protocol)")
        .await;
    let t = Instant::now();
    p.query_drop("SET @id = 2; INSERT INTO m (id, message) VALUES (@id, 'second of two')")
        .await
        .expect("two statements");
    c.expect(
        &[2],
        t,
        PROMPT,
        "an insert after another statement in one query",
    )
    .await;
    p.query_drop("PREPARE s FROM 'INSERT INTO m (id, message) VALUES (?, ''sql prepared'')'")
        .await
        .expect("PREPARE");
    let t = Instant::now();
    p.query_drop("SET @id = 3").await.expect("SET");
    p.query_drop("EXECUTE s USING @id").await.expect("EXECUTE");
    c.expect(&[3], t, PROMPT, "an SQL EXECUTE of a prepared insert")
        .await;
    let _ = p.disconnect().await;
    proxy.assert_alive();
}

/// Backend users without replication privileges: the line names the missing grants (and the
/// GRANT to run), and poll mode delivers.
#[tokio::test]
async fn missing_privileges_run_in_poll_mode() {
    let server = MariaDb::shared();
    let db = "binlog_privs";
    fresh_db(server, db).await;
    direct(
        server.port(),
        db,
        &[
            &create_table("m", &comment("30", 10, "1")),
            "DROP USER IF EXISTS 'binlog_plain'@'%', 'binlog_client'@'%'",
            "CREATE USER 'binlog_plain'@'%' IDENTIFIED BY 'pw1'",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON binlog_privs.* TO 'binlog_plain'@'%'",
            "CREATE USER 'binlog_client'@'%' IDENTIFIED BY 'pw2'",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON binlog_privs.* TO 'binlog_client'@'%'",
            "GRANT REPLICATION CLIENT ON *.* TO 'binlog_client'@'%'",
        ],
    )
    .await;
    let url =
        |user: &str, pw: &str| format!("mysql://{user}:{pw}@127.0.0.1:{}/{db}", server.port());

    // Neither privilege.
    let proxy = Proxy::start(&url("binlog_plain", "pw1"), &[], None);
    wait_for_log(&proxy, "poll mode", 15).await;
    let log = proxy.log();
    let line = log
        .lines()
        .find(|l| l.contains("poll mode"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains("GRANT REPLICATION CLIENT ON *.* TO 'binlog_plain'@'%'"),
        "{line}"
    );
    assert!(
        line.contains("GRANT REPLICATION SLAVE ON *.* TO 'binlog_plain'@'%'"),
        "{line}"
    );
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    let t = Instant::now();
    direct(
        server.port(),
        db,
        &["INSERT INTO m (id, message) VALUES (1, 'direct')"],
    )
    .await;
    c.expect(
        &[1],
        t,
        Duration::from_secs(5),
        "poll mode without privileges",
    )
    .await;
    let mut p = connect(proxy.port(), "root", None, db).await;
    let t = Instant::now();
    p.query_drop("INSERT INTO m (id, message) VALUES (2, 'through the proxy')")
        .await
        .expect("insert through the proxy");
    c.expect(&[2], t, PROMPT, "an insert through the proxy")
        .await;
    let _ = p.disconnect().await;
    drop(c);
    proxy.assert_alive();

    // REPLICATION CLIENT only: the binlog position is readable, the binlog is not.
    let proxy = Proxy::start(&url("binlog_client", "pw2"), &[], None);
    wait_for_log(&proxy, "poll mode", 15).await;
    let log = proxy.log();
    let line = log
        .lines()
        .find(|l| l.contains("poll mode"))
        .unwrap_or_default();
    assert!(
        line.contains("GRANT REPLICATION SLAVE ON *.* TO 'binlog_client'@'%'"),
        "{line}"
    );
    assert!(!line.contains("REPLICATION CLIENT ON"), "{line}");
    proxy.assert_alive();
}

/// Heavy unrelated write traffic (many-row inserts into another table, as fast as the server
/// takes them) does not slow message delivery down much: rows of other tables are skipped by
/// their table map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_unrelated_traffic_does_not_delay_messages() {
    let server = MariaDb::shared();
    let db = "binlog_busy";
    fresh_db(server, db).await;
    direct(
        server.port(),
        db,
        &[
            &create_table("m", &comment("30", 10, "30")),
            "CREATE TABLE noise (id bigint AUTO_INCREMENT PRIMARY KEY, payload varchar(200))",
        ],
    )
    .await;
    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;

    async fn latencies(c: &mut Consumer, w: &mut Conn, ids: std::ops::Range<i64>) -> Vec<Duration> {
        let mut out = Vec::new();
        for id in ids {
            let t = Instant::now();
            w.query_drop(format!("INSERT INTO m (id, message) VALUES ({id}, 'x')"))
                .await
                .expect("insert");
            out.push(c.expect(&[id], t, PROMPT, "a message").await);
        }
        out.sort();
        out
    }
    let mut w = connect(server.port(), "root", None, db).await;
    let quiet = latencies(&mut c, &mut w, 1..21).await;

    let stop = CancellationToken::new();
    let rows_written = Arc::new(AtomicUsize::new(0));
    let noise_started = Instant::now();
    let mut noise = Vec::new();
    for _ in 0..2 {
        let (stop, rows_written) = (stop.clone(), rows_written.clone());
        let port = server.port();
        noise.push(tokio::spawn(async move {
            let mut n = connect(port, "root", None, "binlog_busy").await;
            let values = vec!["(NULL, REPEAT('n', 200))"; 500].join(", ");
            let sql = format!("INSERT INTO noise VALUES {values}");
            while !stop.is_cancelled() {
                if n.query_drop(&sql).await.is_err() {
                    break;
                }
                rows_written.fetch_add(500, Ordering::Relaxed);
            }
        }));
    }
    // The noise under way before the messages are timed, and its rate over its whole run: on a
    // loaded machine one 500-row insert can outlast the 20 messages, so their window alone
    // could count none.
    let running = eventually(10, async || rows_written.load(Ordering::Relaxed) >= 2_000).await;
    assert!(running, "the noise never got going");
    let busy = latencies(&mut c, &mut w, 21..41).await;
    let noise_rate =
        rows_written.load(Ordering::Relaxed) as f64 / noise_started.elapsed().as_secs_f64();
    stop.cancel();
    for n in noise {
        let _ = n.await;
    }
    let median = |v: &[Duration]| v[v.len() / 2];
    eprintln!(
        "message latency: quiet median {:?} max {:?}; with {noise_rate:.0} unrelated rows/s: median {:?} max {:?}",
        median(&quiet),
        quiet[quiet.len() - 1],
        median(&busy),
        busy[busy.len() - 1]
    );
    assert!(
        noise_rate > 1000.0,
        "the noise was too quiet to prove anything: {noise_rate:.0} rows/s"
    );
    assert!(
        median(&busy) < Duration::from_millis(500),
        "median latency under unrelated load: {:?}",
        median(&busy)
    );
    let _ = w.disconnect().await;
    proxy.assert_alive();
}

/// XA transactions written straight to the server: each one's rows reach a stream promptly at
/// its own `XA COMMIT`, also when two were prepared at once and are committed in turn, and when
/// one was prepared before the proxy started (its commit polls every message table).
#[tokio::test]
async fn xa_transactions_arrive_at_their_own_commits() {
    let server = MariaDb::shared();
    let db = "binlog_xa";
    fresh_db(server, db).await;
    direct(
        server.port(),
        db,
        &[
            &create_table("m", &comment("30", 10, "30")),
            &create_table("n", &comment("30", 10, "30")),
        ],
    )
    .await;
    async fn run(w: &mut Conn, statements: &[&str]) {
        for sql in statements {
            w.query_drop(*sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
    // Prepared XA transactions outlive their connection: each has one of its own, kept open.
    let mut early = connect(server.port(), "root", None, db).await;
    run(
        &mut early,
        &[
            "XA START 'early'",
            "INSERT INTO m (id, message) VALUES (1, 'early')",
            "XA END 'early'",
            "XA PREPARE 'early'",
        ],
    )
    .await;

    let proxy = Proxy::start(&server.url(db), &[], None);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let mut cm = Consumer::start(proxy.port(), db, "m");
    let mut cn = Consumer::start(proxy.port(), db, "n");
    cm.wait_open(1, 10).await;
    cn.wait_open(1, 10).await;
    // The streams' first polls (on subscribe) find nothing committed.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut a = connect(server.port(), "root", None, db).await;
    let mut b = connect(server.port(), "root", None, db).await;
    run(
        &mut a,
        &[
            "XA START 'a'",
            "INSERT INTO m (id, message) VALUES (2, 'a')",
            "XA END 'a'",
            "XA PREPARE 'a'",
        ],
    )
    .await;
    run(
        &mut b,
        &[
            "XA START X'01FF', X'bb', 5",
            "INSERT INTO n (id, message) VALUES (3, 'b')",
            "XA END X'01FF', X'bb', 5",
            "XA PREPARE X'01FF', X'bb', 5",
        ],
    )
    .await;
    cm.expect_quiet(Duration::from_millis(500), "prepared, not committed")
        .await;

    let t = Instant::now();
    run(&mut a, &["XA COMMIT 'a'"]).await;
    cm.expect(&[2], t, PROMPT, "the first of two prepared XA transactions")
        .await;
    // Before XIDs were told apart, the first commit's poll took this one's table too (too early
    // to see its row) and its own commit polled nothing: the row waited for the 30 s poll.
    let t = Instant::now();
    run(&mut b, &["XA COMMIT X'01FF', X'bb', 5"]).await;
    cn.expect(
        &[3],
        t,
        PROMPT,
        "the second of two prepared XA transactions",
    )
    .await;

    let t = Instant::now();
    run(&mut early, &["XA COMMIT 'early'"]).await;
    cm.expect(
        &[1],
        t,
        PROMPT,
        "an XA transaction prepared before the proxy started",
    )
    .await;

    // XA COMMIT ... ONE PHASE is binlogged as an ordinary transaction.
    let t = Instant::now();
    run(
        &mut a,
        &[
            "XA START 'one'",
            "INSERT INTO n (id, message) VALUES (4, 'one phase')",
            "XA END 'one'",
            "XA COMMIT 'one' ONE PHASE",
        ],
    )
    .await;
    cn.expect(&[4], t, PROMPT, "XA COMMIT ONE PHASE").await;

    // A rolled-back one: nothing ever.
    run(
        &mut b,
        &[
            "XA START 'rb'",
            "INSERT INTO m (id, message) VALUES (5, 'rolled back')",
            "XA END 'rb'",
            "XA PREPARE 'rb'",
            "XA ROLLBACK 'rb'",
        ],
    )
    .await;
    cm.expect_quiet(Duration::from_secs(1), "a rolled-back XA transaction")
        .await;
    for c in [early, a, b] {
        let _ = c.disconnect().await;
    }
    proxy.assert_alive();
}
