//! Operating msgproxy: the Prometheus endpoint (`--metrics-listen`), `SHOW MESSAGE TABLES`, and
//! logs that never show a password, even at the most verbose level.

use std::collections::BTreeMap;
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::{ChangeUserOpts, Conn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::messaging::harness::{ack, comment, exec, now_ns, secs, Env};
use crate::support::metrics::{sample, scrape};
use crate::support::process::free_port;
use crate::support::{eventually, opts, Cli, Failure, MariaDb, Proxy};

/// A per-table sample, which must be present.
fn table_value(page: &str, name: &str, db: &str, table: &str) -> f64 {
    sample(page, name, &[("schema", db), ("table", table)])
        .unwrap_or_else(|| panic!("no {name} for {db}.{table} in:\n{page}"))
}

/// The per-table counters and gauges of one table, for assertions that print them all.
fn table_metrics(page: &str, db: &str, table: &str) -> BTreeMap<&'static str, f64> {
    [
        ("loaded", "msgproxy_message_table_loaded"),
        ("due", "msgproxy_message_due"),
        ("in_flight", "msgproxy_message_in_flight"),
        ("subscribers", "msgproxy_message_subscribers"),
        ("oldest_due_age", "msgproxy_message_oldest_due_age_seconds"),
        ("sent", "msgproxy_message_sent_total"),
        ("redelivered", "msgproxy_message_redelivered_total"),
        ("acked", "msgproxy_message_acked_total"),
        ("purged", "msgproxy_message_purged_total"),
        ("claims", "msgproxy_message_claims_total"),
        (
            "latency_count",
            "msgproxy_message_delivery_latency_seconds_count",
        ),
    ]
    .into_iter()
    .map(|(short, name)| (short, table_value(page, name, db, table)))
    .collect()
}

/// A stream delivers N messages, the client acks them (by `ACK` and by the SQL form, some only
/// after a redelivery), the purger deletes them: the per-table counters on `/metrics` say
/// exactly that. On a MariaDB of its own, so no other test's proxy purges these rows.
#[tokio::test]
async fn metrics_count_exactly_what_a_stream_delivers_and_acks() {
    const N: i64 = 30;
    const UNACKED: i64 = 5;
    let mport = free_port();
    let listen = format!("127.0.0.1:{mport}");
    let env = Env::private_with("ops_metrics", &["--metrics-listen", &listen]).await;
    let db = env.db.clone();
    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) comment '{}'",
        comment("3", 10, "1", ",vt_min_backoff=0.5")
    ))
    .await;
    let page = scrape(mport).await;
    let before = table_metrics(&page, &db, "q");
    for (k, v) in &before {
        let want = if *k == "loaded" { 1.0 } else { 0.0 };
        assert_eq!(*v, want, "{k} before anything happened: {before:?}");
    }

    let mut stream = env.stream("q").await;
    let mut c = env.proxy_conn().await;
    let due = now_ns();
    let values: Vec<String> = (1..=N).map(|i| format!("({i}, {due}, 'm{i}')")).collect();
    exec(
        &mut c,
        &format!(
            "insert into q(id, time_next, message) values {}",
            values.join(", ")
        ),
    )
    .await
    .expect("insert");
    let first = stream.recv_n(N as usize, secs(10.0)).await;
    let mut ids: Vec<i64> = first.iter().map(|m| m.id).collect();
    ids.sort();
    assert_eq!(ids, (1..=N).collect::<Vec<_>>());
    // Acked at once (well within the 3 s ack wait), in two ACK statements.
    let acked_now: Vec<i64> = (1..=N - UNACKED).collect();
    let (a, b) = acked_now.split_at(acked_now.len() / 2);
    assert_eq!(ack(&mut c, "q", a).await, a.len() as u64);
    assert_eq!(ack(&mut c, "q", b).await, b.len() as u64);

    let page = scrape(mport).await;
    let m = table_metrics(&page, &db, "q");
    assert_eq!(m["sent"], N as f64, "{m:?}");
    assert!(
        (3.0..=N as f64).contains(&m["claims"]),
        "{N} messages in batches of at most 10 take 3 to {N} claims: {m:?}"
    );
    assert_eq!(m["redelivered"], 0.0, "{m:?}");
    assert_eq!(m["acked"], (N - UNACKED) as f64, "{m:?}");
    assert_eq!(m["latency_count"], N as f64, "{m:?}");
    assert_eq!(m["subscribers"], 1.0, "{m:?}");
    assert_eq!(m["in_flight"], 0.0, "{m:?}");
    assert_eq!(
        m["due"], 0.0,
        "nothing is due: the rest wait for their ack wait: {m:?}"
    );
    // The latency of rows due when inserted: below 10 s, all of them.
    let within_10s = sample(
        &page,
        "msgproxy_message_delivery_latency_seconds_bucket",
        &[("schema", &db), ("table", "q"), ("le", "10")],
    );
    assert_eq!(within_10s, Some(N as f64), "{page}");

    // The unacked ones come back after their ack wait; acked with the Vitess SQL form.
    let again = stream.recv_n(UNACKED as usize, secs(10.0)).await;
    let mut again_ids: Vec<i64> = again.iter().map(|m| m.id).collect();
    again_ids.sort();
    assert_eq!(again_ids, (N - UNACKED + 1..=N).collect::<Vec<_>>());
    let list: Vec<String> = again_ids.iter().map(|i| i.to_string()).collect();
    let n = exec(
        &mut c,
        &format!(
            "UPDATE q SET time_acked = {}, time_next = NULL WHERE id IN ({}) AND time_acked IS NULL",
            now_ns(),
            list.join(", ")
        ),
    )
    .await
    .expect("the SQL ack");
    assert_eq!(n, UNACKED as u64);

    let page = scrape(mport).await;
    let m = table_metrics(&page, &db, "q");
    assert_eq!(m["sent"], (N + UNACKED) as f64, "{m:?}");
    assert_eq!(m["redelivered"], UNACKED as f64, "{m:?}");
    assert_eq!(m["acked"], N as f64, "{m:?}");
    assert_eq!(
        m["latency_count"], N as f64,
        "redeliveries are not timed: {m:?}"
    );
    let statements = |kw: &str| sample(&page, "msgproxy_statements_total", &[("keyword", kw)]);
    assert_eq!(statements("ack"), Some(2.0), "{page}");
    assert_eq!(statements("stream"), Some(1.0), "{page}");
    assert!(statements("insert") >= Some(1.0), "{page}");
    let open = sample(&page, "msgproxy_client_connections", &[]).unwrap_or(0.0);
    assert!(
        open >= 2.0,
        "the stream and this connection are open: {open}\n{page}"
    );
    assert_eq!(
        sample(&page, "msgproxy_binlog_mode", &[("mode", "following")]),
        Some(1.0),
        "{page}"
    );
    assert!(sample(&page, "msgproxy_binlog_position", &[]).is_none());
    // The inserts were read from the binlog just now, and heartbeats come every 2 s (bounds
    // generous for a loaded machine).
    let lag = sample(&page, "msgproxy_binlog_lag_seconds", &[]).expect("binlog lag");
    assert!((0.0..10.0).contains(&lag), "binlog lag {lag}\n{page}");
    let idle = sample(&page, "msgproxy_binlog_last_read_age_seconds", &[]).expect("binlog idle");
    assert!((0.0..10.0).contains(&idle), "binlog idle {idle}\n{page}");
    assert!(
        page.contains("msgproxy_binlog_position{file=\"mysql-bin."),
        "{page}"
    );

    // vt_purge_after is 1 s: this proxy's purger deletes every row, and counts each once.
    let purged_all = eventually(15, async || {
        let m = table_metrics(&scrape(mport).await, &db, "q");
        m["purged"] >= N as f64
    })
    .await;
    let m = table_metrics(&scrape(mport).await, &db, "q");
    assert!(
        purged_all,
        "not all rows purged within 15 s: {m:?}\n{}",
        env.log()
    );
    assert_eq!(m["purged"], N as f64, "{m:?}");
    let left: Vec<i64> = env.states("q").await.into_keys().collect();
    assert!(left.is_empty(), "rows left after the purge: {left:?}");

    // The stream leaves: no subscriber.
    stream.close();
    let gone = eventually(5, async || {
        table_value(
            &scrape(mport).await,
            "msgproxy_message_subscribers",
            &db,
            "q",
        ) == 0.0
    })
    .await;
    assert!(gone, "the closed stream is still a subscriber");
    let _ = c.disconnect().await;
    drop(env.proxy);
    env.server.stop();
}

/// The endpoint is not a way to hurt the proxy: garbage, huge requests and clients that say
/// nothing get an answer or a timeout, and scrapes keep working.
#[tokio::test]
async fn metrics_endpoint_survives_hostile_clients() {
    let server = MariaDb::shared();
    let mport = free_port();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = Proxy::start(&server.backend_url(), &["--metrics-listen", &listen], None);
    // Twice as many silent clients as scrapes served at once: they hold every permit until
    // the request timeout, one round after the other.
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(
            tokio::net::TcpStream::connect(("127.0.0.1", mport))
                .await
                .unwrap(),
        );
    }
    // Meanwhile the MySQL side does not notice.
    let mut c = Conn::new(opts(proxy.port(), "root", None, None))
        .await
        .expect("a client while the metrics endpoint is busy");
    let one: Option<i64> = c.query_first("SELECT 1").await.expect("SELECT 1");
    assert_eq!(one, Some(1));
    let _ = c.disconnect().await;
    for junk in [
        &b"\x00\x01\x02\r\n\r\n"[..],
        &vec![b'G'; 100_000],
        b"GET /metrics HTTP/1.1\r\n",
    ] {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", mport))
            .await
            .unwrap();
        let _ = tcp.write_all(junk).await;
        let _ = tcp.shutdown().await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out)).await;
    }
    drop(silent);
    let page = scrape(mport).await;
    assert!(page.contains("msgproxy_client_connections "), "{page}");
    proxy.assert_alive();
}

/// The rows of `SHOW MESSAGE TABLES` for schema `db`, as `name -> [status, options, subscribers,
/// ...]` strings (NULL as "NULL").
fn rows_of(rows: &[Vec<String>], db: &str) -> BTreeMap<String, Vec<String>> {
    rows.iter()
        .filter(|r| r.first().map(String::as_str) == Some(db))
        .map(|r| (r[1].clone(), r[2..].to_vec()))
        .collect()
}

const COLUMNS: [&str; 14] = [
    "Schema",
    "Name",
    "Status",
    "Options",
    "Subscribers",
    "Cached",
    "In_flight",
    "Sent",
    "Acked",
    "Redelivered",
    "Purged",
    "Oldest_due_age",
    "Dead",
    "Keys_in_flight",
];

/// `SHOW MESSAGE TABLES` through mysql_async and the `mariadb` CLI: the loaded table with its
/// options and counters, and a broken one with the reason it is not loaded. A prepared `SHOW
/// MESSAGE TABLES` gets a clear error.
#[tokio::test]
async fn show_message_tables_lists_loaded_and_broken_tables() {
    let env = Env::new("ops_show").await;
    env.ddl(&format!(
        "create table good(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) comment '{}'",
        comment("30", 5, "1", "")
    ))
    .await;
    env.ddl(
        "create table bad(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) comment 'vitess_message,vt_ack_wait=1'",
    )
    .await;
    let mut stream = env.stream("good").await;
    env.via_proxy("insert into good(id, message) values (1, 'a'), (2, 'b')")
        .await;
    stream.recv_n(2, secs(10.0)).await;
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "good", &[1]).await, 1);

    // mysql_async, text protocol.
    let mut result = c
        .query_iter("SHOW MESSAGE TABLES")
        .await
        .expect("SHOW MESSAGE TABLES");
    let names: Vec<String> = result
        .columns()
        .map(|cols| cols.iter().map(|c| c.name_str().into_owned()).collect())
        .unwrap_or_default();
    // The counters are BIGINT UNSIGNED (a UNION with plain literals made them DECIMAL, which
    // typed clients such as sqlx refuse to read as integers).
    let types: Vec<mysql_async::consts::ColumnType> = result
        .columns()
        .map(|cols| cols.iter().map(|c| c.column_type()).collect())
        .unwrap_or_default();
    let rows: Vec<mysql_async::Row> = result.collect().await.expect("rows");
    assert_eq!(names, COLUMNS);
    assert!(
        types[4..11]
            .iter()
            .all(|t| *t == mysql_async::consts::ColumnType::MYSQL_TYPE_LONGLONG),
        "{types:?}"
    );
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| {
            r.unwrap()
                .iter()
                .map(|v| match v {
                    mysql_async::Value::NULL => "NULL".to_string(),
                    mysql_async::Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .collect();
    let mine = rows_of(&rows, &env.db);
    assert_eq!(mine.len(), 2, "{rows:?}");
    let good = &mine["good"];
    assert_eq!(good[0], "loaded");
    assert!(
        good[1].contains("vt_ack_wait=30") && good[1].contains("vt_batch_size=5"),
        "{good:?}"
    );
    // Subscribers, Cached, In_flight, Sent, Acked, Redelivered, Purged.
    assert_eq!(&good[2..9], ["1", "0", "0", "2", "1", "0", "0"], "{good:?}");
    assert_eq!(good[9], "NULL", "nothing due, no age: {good:?}");
    let bad = &mine["bad"];
    assert!(
        bad[0].contains("bad") && bad[0].contains("vt_purge_after"),
        "the reason names what is missing: {bad:?}"
    );
    assert!(bad[1..].iter().all(|v| v == "NULL"), "{bad:?}");

    // The session goes on, and the statement cannot be prepared.
    let one: Option<i64> = c.query_first("SELECT 1").await.expect("SELECT 1");
    assert_eq!(one, Some(1));
    for sql in [
        "SHOW MESSAGE TABLES",
        "SET STATEMENT max_statement_time=5 FOR SHOW MESSAGE TABLES",
    ] {
        match c.prep(sql).await {
            Ok(_) => panic!("a prepared {sql} should be refused"),
            Err(e) => {
                let f = Failure::of(&e);
                assert_eq!(f.code(), Some(1295), "{f:?}");
                assert!(format!("{f:?}").contains("text protocol"), "{f:?}");
            }
        }
    }
    // Nor with SQL PREPARE / EXECUTE IMMEDIATE of a literal (the server would say 1064).
    for sql in [
        "PREPARE s FROM 'SHOW MESSAGE TABLES'",
        "EXECUTE IMMEDIATE 'ACK good 1'",
        "prepare s from 'STREAM * ' \"FROM good\"",
    ] {
        match c.query_drop(sql).await {
            Ok(()) => panic!("{sql} should be refused"),
            Err(e) => {
                let f = Failure::of(&e);
                assert_eq!(f.code(), Some(1295), "{sql}: {f:?}");
            }
        }
    }
    c.query_drop("PREPARE s FROM 'SELECT 1'")
        .await
        .expect("other statements still prepare");
    let one: Option<i64> = c
        .query_first("EXECUTE s")
        .await
        .expect("SELECT 1 after the refusal");
    assert_eq!(one, Some(1));

    // The mariadb CLI, batch mode (tab-separated, a header line).
    let out = Cli::new(env.proxy.port()).run(&["--batch", "-e", "SHOW MESSAGE TABLES"]);
    assert!(out.success(), "{out:?}");
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next().map(|h| h.split('\t').collect::<Vec<_>>()),
        Some(COLUMNS.to_vec())
    );
    let cli_rows: Vec<Vec<String>> = lines
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    let cli_mine = rows_of(&cli_rows, &env.db);
    assert_eq!(cli_mine["good"][0], "loaded", "{cli_rows:?}");
    assert_eq!(&cli_mine["good"][2..9], &good[2..9], "{cli_rows:?}");
    assert_eq!(cli_mine["bad"][0], bad[0]);
    // The table form operators see in an interactive client.
    let out = Cli::new(env.proxy.port()).run(&["--table", "-e", "show message tables"]);
    assert!(out.success() && out.stdout.contains("| loaded"), "{out:?}");
    stream.close();
    let _ = c.disconnect().await;
}

/// At the most verbose log level, with a backend password and client passwords (right and
/// wrong, at login and in COM_CHANGE_USER), no password reaches the proxy's log.
#[tokio::test]
async fn passwords_never_reach_the_log() {
    const BACKEND_PW: &str = "Bk3nd-s3cret-7Qz";
    const CLIENT_PW: &str = "Cl1ent-s3cret-9Wx";
    const OTHER_PW: &str = "0ther-s3cret-2Jk";
    const WRONG_PW: &str = "Wr0ng-guess-5Hv";
    const WRONG_BACKEND_PW: &str = "Wr0ng-bk3nd-8Lp";
    let server = MariaDb::shared();
    {
        let mut root = Conn::new(opts(server.port(), "root", None, None))
            .await
            .expect("connect as root");
        for sql in [
            "DROP USER IF EXISTS 'ops_backend'@'%'".to_string(),
            format!("CREATE USER 'ops_backend'@'%' IDENTIFIED BY '{BACKEND_PW}'"),
            "GRANT ALL ON *.* TO 'ops_backend'@'%'".to_string(),
            "CREATE DATABASE IF NOT EXISTS ops_secrets".to_string(),
        ] {
            root.query_drop(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let _ = root.disconnect().await;
    }
    let backend = format!(
        "mysql://ops_backend:{BACKEND_PW}@127.0.0.1:{}/ops_secrets",
        server.port()
    );
    let config = format!(
        "[[users]]\nname = \"app\"\npassword = \"{CLIENT_PW}\"\n\n\
         [[users]]\nname = \"other\"\npassword = \"{OTHER_PW}\"\n"
    );
    let mport = free_port();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = Proxy::start_with_env(
        &backend,
        &["--metrics-listen", &listen],
        Some(&config),
        &[("MSGPROXY_LOG", "trace")],
    );
    let port = proxy.port();

    // Right password, then COM_CHANGE_USER to the other user (right), then a wrong one.
    let mut c = Conn::new(opts(port, "app", Some(CLIENT_PW), Some("ops_secrets")))
        .await
        .expect("log in as app");
    let one: Option<i64> = c.query_first("SELECT 1").await.expect("SELECT 1");
    assert_eq!(one, Some(1));
    c.change_user(
        ChangeUserOpts::default()
            .with_user(Some("other".into()))
            .with_pass(Some(OTHER_PW.into())),
    )
    .await
    .expect("COM_CHANGE_USER to other");
    let wrong_change = c
        .change_user(
            ChangeUserOpts::default()
                .with_user(Some("app".into()))
                .with_pass(Some(WRONG_PW.into())),
        )
        .await;
    assert!(
        wrong_change.is_err(),
        "a wrong password in COM_CHANGE_USER is refused"
    );
    drop(c);
    // Wrong passwords at login: mysql_async and the CLI.
    let wrong = Conn::new(opts(port, "app", Some(WRONG_PW), None)).await;
    assert!(wrong.is_err(), "a wrong password is refused");
    let out = Cli::new(port)
        .user("app", Some(WRONG_PW))
        .run(&["-e", "select 1"]);
    assert!(!out.success(), "{out:?}");
    let out = Cli::new(port)
        .user("app", Some(CLIENT_PW))
        .run(&["-e", "select 1"]);
    assert!(out.success(), "{out:?}");

    // Three denied: COM_CHANGE_USER, mysql_async's login, the CLI's.
    let page = scrape(mport).await;
    assert_eq!(
        sample(&page, "msgproxy_client_logins_failed_total", &[]),
        Some(3.0),
        "{page}"
    );

    // A proxy whose backend password is wrong: the server refuses it (engine, binlog, clients),
    // and the log says so without the password.
    let wrong_backend = format!(
        "mysql://ops_backend:{WRONG_BACKEND_PW}@127.0.0.1:{}/ops_secrets",
        server.port()
    );
    let refused = Proxy::start_with_env(
        &wrong_backend,
        &[],
        Some(&config),
        &[("MSGPROXY_LOG", "trace")],
    );
    let denied = Conn::new(opts(refused.port(), "app", Some(CLIENT_PW), None)).await;
    assert!(denied.is_err(), "the backend refuses the proxy's login");
    crate::support::wait_for_log(&refused, "Access denied", 20).await;
    let refused_log = refused.log();
    assert!(
        refused_log.contains("Access denied"),
        "the refused backend login is logged:\n{refused_log}"
    );

    let log = proxy.log() + &refused_log;
    // The log is really the verbose one, and saw the logins.
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "not a verbose log:\n{log}"
    );
    assert!(
        log.contains("app"),
        "the log does not mention the logins at all:\n{log}"
    );
    for pw in [BACKEND_PW, CLIENT_PW, OTHER_PW, WRONG_PW, WRONG_BACKEND_PW] {
        let hex: String = pw.bytes().map(|b| format!("{b:02x}")).collect();
        for (form, needle) in [("plain", pw.to_string()), ("hex", hex)] {
            if let Some(at) = log.find(&needle) {
                let start = at.saturating_sub(300);
                panic!(
                    "the proxy's log shows a password ({form}) at byte {at}:\n...{}",
                    &log[start..(at + needle.len() + 100).min(log.len())]
                );
            }
        }
    }
}

/// With the backend down, every client gets 1429 and the metrics count each failed backend
/// connection exactly, as errors and as reconnects.
#[tokio::test]
async fn metrics_count_backend_connect_failures() {
    // Nothing listens there (the port was free a moment ago).
    let dead = free_port();
    let mport = free_port();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = Proxy::start(
        &format!("mysql://root@127.0.0.1:{dead}/test"),
        &["--metrics-listen", &listen],
        None,
    );
    // The harness's own probe of the port (one connection, which waits in the backlog until
    // the proxy's accept loop runs) counts too: start from after it.
    let settled = eventually(5, async || {
        let page = scrape(mport).await;
        sample(&page, "msgproxy_client_connections_total", &[]) >= Some(1.0)
            && sample(&page, "msgproxy_client_connections", &[]) == Some(0.0)
    })
    .await;
    assert!(settled, "the harness's probe connection never closed");
    let counters = |page: &str| {
        [
            (
                "connect",
                sample(
                    page,
                    "msgproxy_backend_errors_total",
                    &[("kind", "connect")],
                ),
            ),
            (
                "lost",
                sample(page, "msgproxy_backend_errors_total", &[("kind", "lost")]),
            ),
            (
                "accepted",
                sample(page, "msgproxy_client_connections_total", &[]),
            ),
            ("reconnects", sample(page, "msgproxy_reconnects_total", &[])),
            (
                "binlog_sessions",
                sample(page, "msgproxy_binlog_sessions_total", &[]),
            ),
        ]
        .map(|(k, v)| (k, v.unwrap_or_else(|| panic!("no {k} in:\n{page}"))))
    };
    let before = counters(&scrape(mport).await);
    for _ in 0..3 {
        match Conn::new(opts(proxy.port(), "root", None, None)).await {
            Ok(_) => panic!("a client got in with the backend down"),
            Err(e) => assert_eq!(Failure::of(&e).code(), Some(1429), "{e}"),
        }
    }
    let page = scrape(mport).await;
    let after = counters(&page);
    let delta: Vec<(&str, f64)> = before
        .iter()
        .zip(&after)
        .map(|((k, b), (_, a))| (*k, a - b))
        .collect();
    assert_eq!(
        delta,
        [
            ("connect", 3.0),
            ("lost", 0.0),
            ("accepted", 3.0),
            ("reconnects", 3.0),
            ("binlog_sessions", 0.0)
        ],
        "{page}"
    );
    assert_eq!(
        sample(&page, "msgproxy_binlog_mode", &[("mode", "following")]),
        Some(0.0),
        "{page}"
    );
    let closed = eventually(5, async || {
        sample(&scrape(mport).await, "msgproxy_client_connections", &[]) == Some(0.0)
    })
    .await;
    assert!(closed, "refused clients still count as open");
}
