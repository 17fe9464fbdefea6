//! Rows written straight to the server — by every kind of statement — reach a waiting stream
//! promptly; direct acks, reschedules and DDL are seen at once; unrelated traffic does not delay
//! messages.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{Conn, WhiteListFsHandler};
use tokio_util::sync::CancellationToken;

use super::{comment, connect, create_table, direct, fresh_db, now_ns, Consumer, PROMPT, SEC};
use crate::support::{
    eventually, opts, polls, wait_for_log, wait_for_polls, MariaDb, Proxy, LOG_POLLS,
};

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
    let proxy = Proxy::start_with_env(&server.url(db), &[], None, &[LOG_POLLS]);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let m = format!("`{db}`.`m`");
    let polled = polls(&proxy, &m);
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    // The stream's first poll (on subscribe) is over and found nothing; everything below
    // comes later.
    wait_for_polls(&proxy, &m, polled).await;

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
