//! Poll mode: a server without a binlog, or backend users without replication privileges, get
//! one clear line and a proxy that still delivers; writes through it are prompt however sent.

use std::time::{Duration, Instant};

use mysql_async::prelude::*;

use super::{comment, connect, create_table, direct, fresh_db, Consumer, PROMPT};
use crate::support::{wait_for_log, MariaDb, Proxy};

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
async fn poll_mode_is_prompt_for_prepared_wrapped_and_multi_statement_writes() {
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
    // Connector/J with a query timeout wraps every statement so.
    let t = Instant::now();
    p.query_drop(
        "SET STATEMENT max_statement_time=10 FOR INSERT INTO m (id, message) VALUES (4, 'wrapped')",
    )
    .await
    .expect("a wrapped insert");
    c.expect(&[4], t, PROMPT, "an insert in SET STATEMENT ... FOR")
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

/// `vt_max_unacked` does not hold in poll mode (acks made elsewhere are not seen there), and the
/// proxy counts nothing as held: a stream gets every message, and the gauge stays at 0 — what
/// streams hold would otherwise pile up until each ack wait passed.
#[tokio::test]
async fn poll_mode_has_no_unacked_limit_and_counts_nothing_held() {
    let server = MariaDb::start_with(&["--skip-log-bin"]);
    let db = "binlog_off_max_unacked";
    fresh_db(&server, db).await;
    let table_comment = format!("{},vt_max_unacked=3", comment("30", 10, "30"));
    direct(server.port(), db, &[&create_table("m", &table_comment)]).await;
    let mport = crate::support::process::free_port();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = Proxy::start(&server.url(db), &["--metrics-listen", &listen], None);
    wait_for_log(&proxy, "poll mode", 15).await;
    let mut c = Consumer::start(proxy.port(), db, "m");
    c.wait_open(1, 10).await;
    let mut p = connect(proxy.port(), "root", None, db).await;
    let t = Instant::now();
    p.query_drop(
        "INSERT INTO m (id, message) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f')",
    )
    .await
    .expect("six messages");
    c.expect(
        &[1, 2, 3, 4, 5, 6],
        t,
        PROMPT,
        "six messages to one stream, over a limit of 3",
    )
    .await;
    let page = crate::support::metrics::scrape(mport).await;
    let held = crate::support::metrics::sample(
        &page,
        "msgproxy_message_unacked_held",
        &[("schema", db), ("table", "m")],
    );
    assert_eq!(held, Some(0.0), "{page}");
    let _ = p.disconnect().await;
    proxy.assert_alive();
}
