//! `--backend mysql://user@localhost/db?socket=/path`: the proxy reaches a server on its own host
//! over the server's Unix socket — client sessions, the engine's pool and the binlog watcher
//! alike — and says which path it could not reach when the socket is not there.

use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::Conn;

use crate::messaging::harness::{ack, comment, secs, Env};
use crate::support::{opts, wait_for_log, Failure, MariaDb, Proxy};

/// The process list's `HOST` of every connection from the test's database, by `COMMAND`.
async fn hosts(server: &MariaDb, db: &str) -> Vec<(String, String)> {
    let mut c = Conn::new(opts(server.port(), "root", None, None))
        .await
        .expect("connect to the test MariaDB");
    let rows: Vec<(String, String)> = c
        .exec(
            "SELECT COMMAND, HOST FROM information_schema.PROCESSLIST \
             WHERE DB = ? AND ID <> CONNECTION_ID() ORDER BY ID",
            (db,),
        )
        .await
        .expect("read the process list");
    let _ = c.disconnect().await;
    rows
}

/// A session's own `HOST` in the process list, as the server sees the proxy's connection.
async fn own_host(conn: &mut Conn) -> String {
    conn.query_first("SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")
        .await
        .expect("read the process list")
        .expect("the session is in the process list")
}

#[tokio::test]
async fn sessions_engine_and_binlog_use_the_socket() {
    let server = MariaDb::shared();
    let db = "backend_socket";
    let env = Env::on_url(server, db, &server.socket_url(db), &[]).await;

    // A client session's backend connection comes over the socket: the server names its host
    // `localhost`, where a TCP connection shows `host:port`.
    let mut c = env.proxy_conn().await;
    assert_eq!(own_host(&mut c).await, "localhost");
    let mut direct = env.direct_conn().await;
    assert!(
        own_host(&mut direct).await.contains(':'),
        "the comparison is meaningful only if TCP shows another host"
    );
    let _ = direct.disconnect().await;
    let answer: Option<(i64, String)> = c
        .query_first("SELECT 1 + 1, DATABASE()")
        .await
        .expect("a query through the proxy");
    assert_eq!(answer, Some((2, db.to_string())));

    // Messaging end to end: a row inserted straight to the server reaches the stream through the
    // binlog watcher (its poller interval is 30 s; or the stream's first poll finds it: either
    // way over the socket), and the ACK through the proxy sticks.
    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(100)) comment '{}'",
        comment("30", 10, "30", "")
    ))
    .await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    let mut stream = env.stream("q").await;
    env.direct("insert into q(id, message) values (1, 'over the socket')")
        .await;
    let m = stream
        .recv(secs(3.0))
        .await
        .unwrap_or_else(|| panic!("the direct insert never reached the stream\n{}", env.log()));
    assert_eq!(m.id, 1);
    assert_eq!(ack(&mut c, "q", &[1]).await, 1);
    let acked: Option<Option<i64>> = c
        .query_first("select time_acked from q where id = 1")
        .await
        .expect("read the row back");
    assert!(matches!(acked, Some(Some(_))), "{acked:?}");

    // Every connection the proxy holds on the server for this database — the sessions, the
    // stream's, the engine's pool and the binlog dump — came over the socket.
    // The test's own direct connections (over TCP) may still be closing: wait until only the
    // proxy's remain, or a TCP one stays (then the asserts below say which).
    let mut all = Vec::new();
    crate::support::eventually(20, async || {
        all = hosts(server, db).await;
        all.iter().all(|(_, host)| host == "localhost")
    })
    .await;
    assert!(
        all.iter().any(|(command, _)| command == "Binlog Dump"),
        "no binlog dump connection for {db}: {all:?}"
    );
    for (command, host) in &all {
        assert_eq!(host, "localhost", "{command} connection over TCP: {all:?}");
    }
    drop(stream);
    let _ = c.disconnect().await;
}

#[tokio::test]
async fn a_missing_socket_is_named_in_the_error() {
    let server = MariaDb::shared();
    let missing = server.socket_path().with_file_name("no-such-server.sock");
    let url = format!("mysql://root@localhost/test?socket={}", missing.display());
    let proxy = Proxy::start(&url, &[], None);
    let err = match tokio::time::timeout(
        Duration::from_secs(15),
        Conn::new(opts(proxy.port(), "root", None, Some("test"))),
    )
    .await
    .expect("the proxy answers within 15 s")
    {
        Ok(_) => panic!("logged in through a proxy whose backend socket does not exist"),
        Err(e) => Failure::of(&e),
    };
    match err {
        Failure::Server { code, message, .. } => {
            assert_eq!(code, 1429, "{message}");
            assert!(
                message.contains(&missing.display().to_string()),
                "the error should name the socket: {message}"
            );
        }
        other => panic!("expected a 1429 error, got {other:?}"),
    }
    // The proxy itself stays up and answers the next client the same way.
    proxy.assert_alive();
    let again = Conn::new(opts(proxy.port(), "root", None, Some("test"))).await;
    assert!(
        matches!(&again, Err(e) if Failure::of(e).code() == Some(1429)),
        "second attempt: {:?}",
        again.as_ref().err()
    );
}

/// More clients at once than the server's listen backlog holds: over the socket a full backlog
/// fails a non-blocking `connect` at once with EAGAIN (TCP retries the SYN instead, so direct
/// clients just wait), and the proxy used to answer those clients 1429 "Resource temporarily
/// unavailable" (the Go driver's own TestConcurrent met it). It now waits for room, as a
/// blocking client would: every client logs in.
#[tokio::test]
async fn a_burst_beyond_the_servers_backlog_all_log_in() {
    const CLIENTS: usize = 120;
    let server = MariaDb::start_with(&["--back-log=1"]);
    let mut c = Conn::new(opts(server.port(), "root", None, None))
        .await
        .expect("connect to the test MariaDB");
    c.query_drop("CREATE DATABASE IF NOT EXISTS burst")
        .await
        .expect("create the database");
    let _ = c.disconnect().await;
    let proxy = Proxy::start(&server.socket_url("burst"), &[], None);
    let logins: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(Conn::new(opts(proxy.port(), "root", None, Some("burst")))))
        .collect();
    let mut conns = Vec::new();
    let mut failures = Vec::new();
    for login in logins {
        match login.await.expect("join") {
            Ok(conn) => conns.push(conn),
            Err(e) => failures.push(Failure::of(&e)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {CLIENTS} logins failed; the first: {:?}",
        failures.len(),
        failures.first()
    );
    for mut conn in conns {
        let one: Option<i64> = conn.query_first("SELECT 1").await.expect("SELECT 1");
        assert_eq!(one, Some(1));
        let _ = conn.disconnect().await;
    }
    proxy.assert_alive();
}
