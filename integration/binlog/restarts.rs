//! Server restarts (clean and crash) lose nothing, and a binlog position deleted while the
//! server was down makes the watcher start again from the current one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{Conn, Pool};
use tokio::sync::mpsc;

use super::{comment, connect, create_table, direct, fresh_db, now_ns, Consumer, Seen, PROMPT};
use crate::support::process::tail;
use crate::support::{opts, wait_for_log, MariaDb, Proxy};

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
                    // Reconnect pace while the server is away (the outage is the scenario).
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
            // The producer's pace, part of the load under test.
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
    // The scenario: the server down (stopped, then below killed) for a moment.
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
    // The scenario: the server away (killed) for a moment, as after a crash.
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
