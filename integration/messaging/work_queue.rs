//! Work queues beyond Vitess (MESSAGING.md §10, §13) and what a new user met first: `NACK` and
//! `EXTEND` (as statements and as the plain `UPDATE`s they stand for, under `vt_max_unacked`),
//! acks that delete (`vt_purge_after=0`), the age of new messages nobody streams, every problem of
//! a broken table at once, and syntax errors that say how msgproxy's statements are written.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use super::harness::{ack, comment, exec, now_ns, secs, Env, SEC};
use crate::support::metrics::{sample, scrape};
use crate::support::process::free_port;
use crate::support::{wait_for_log, Failure, MariaDb};

/// A proxy with metrics on `metrics_port`, following the binlog, and table `q` with `table_comment`.
async fn queue(db: &str, table_comment: &str, metrics_port: u16) -> Env {
    let server = MariaDb::shared();
    let listen = format!("127.0.0.1:{metrics_port}");
    let env = Env::on_url(
        server,
        db,
        &server.backend_url(),
        &["--metrics-listen", &listen],
    )
    .await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(50)) comment '{table_comment}'"
    ))
    .await;
    env
}

/// `SHOW MESSAGE TABLES`' row of `db`.`table`, by column name (NULL as "NULL").
pub async fn show_row(env: &Env, table: &str) -> std::collections::BTreeMap<String, String> {
    let mut c = env.proxy_conn().await;
    let mut result = c
        .query_iter("SHOW MESSAGE TABLES")
        .await
        .expect("SHOW MESSAGE TABLES");
    let names: Vec<String> = result
        .columns()
        .map(|cols| cols.iter().map(|c| c.name_str().into_owned()).collect())
        .unwrap_or_default();
    let rows: Vec<mysql_async::Row> = result.collect().await.expect("rows");
    let _ = c.disconnect().await;
    for row in rows {
        let values: Vec<String> = row
            .unwrap()
            .into_iter()
            .map(|v| match v {
                mysql_async::Value::NULL => "NULL".to_string(),
                mysql_async::Value::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect();
        if values.first() == Some(&env.db) && values.get(1).map(String::as_str) == Some(table) {
            return names.iter().cloned().zip(values).collect();
        }
    }
    panic!("SHOW MESSAGE TABLES has no row for {}.{table}", env.db);
}

/// Waits (at most `within`) until `check` holds, or panics with `what`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let deadline = Instant::now() + within;
    let mut last = None;
    while Instant::now() < deadline {
        match check().await {
            None => return,
            Some(state) => last = Some(state),
        }
        // How often to look until the deadline, not a wait for something.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {within:?}; last seen: {last:?}");
}

/// The README's table and insert (time_next 0 by default), nobody streaming: SHOW MESSAGE
/// TABLES and the gauge show the message's age growing, not NULL.
#[tokio::test]
async fn a_new_message_nobody_streams_shows_its_age() {
    let mport = free_port();
    let server = MariaDb::shared();
    let listen = format!("127.0.0.1:{mport}");
    let env = Env::on_url(
        server,
        "msg_wq_age",
        &server.backend_url(),
        &["--metrics-listen", &listen],
    )
    .await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    env.ddl(
        "create table vitess_message(id bigint, time_next bigint default 0, epoch bigint, \
         time_acked bigint, message varchar(128), primary key(id), index next_idx(time_next, epoch), \
         index ack_idx(time_acked)) comment 'vitess_message,vt_ack_wait=30,vt_purge_after=120,\
         vt_batch_size=1,vt_cache_size=1000,vt_poller_interval=30'",
    )
    .await;
    env.via_proxy("insert into vitess_message(id, message) values(1, 'hello world')")
        .await;
    eventually(secs(10.0), "Oldest_due_age of at least 1 s", || async {
        let row = show_row(&env, "vitess_message").await;
        let age = row["Oldest_due_age"].clone();
        match age.parse::<f64>() {
            Ok(a) if a >= 1.0 => None,
            _ => Some(age),
        }
    })
    .await;
    eventually(secs(5.0), "the oldest_due_age gauge at 1 s", || async {
        let page = scrape(mport).await;
        let age = sample(
            &page,
            "msgproxy_message_oldest_due_age_seconds",
            &[("schema", "msg_wq_age"), ("table", "vitess_message")],
        );
        match age {
            Some(a) if a >= 1.0 => None,
            other => Some(format!("{other:?}")),
        }
    })
    .await;
}

/// A table with wrong options and missing columns says all of it at once, in the log, in
/// `SHOW MESSAGE TABLES` and to `STREAM`.
#[tokio::test]
async fn a_broken_table_reports_every_problem_at_once() {
    let env = Env::new("msg_wq_broken").await;
    env.ddl(
        "create table b(id bigint primary key, epoch int, message text) \
         comment 'vitess_message,vt_ack_wait=0,vt_bogus=1,vt_batch_size=1,vt_cache_size=1,vt_poller_interval=1'",
    )
    .await;
    let problems = [
        "unknown option vt_bogus",
        "missing required option vt_purge_after",
        "vt_ack_wait must be more than 0 seconds",
        "missing required column time_next",
        "missing required column time_acked",
    ];
    let mut c = env.proxy_conn().await;
    let f = exec(&mut c, "STREAM * FROM b")
        .await
        .expect_err("b is broken");
    let Failure::Server { code, message, .. } = &f else {
        panic!("{f:?}")
    };
    assert_eq!(*code, 1347, "{f:?}");
    for p in problems {
        assert!(message.contains(p), "{p}: {message}");
    }
    let status = show_row(&env, "b").await["Status"].clone();
    for p in problems {
        assert!(status.contains(p), "{p}: {status}");
    }
    let log = std::fs::read_to_string(env.proxy.log_path()).unwrap_or_default();
    assert!(
        log.lines().any(|l| problems.iter().all(|p| l.contains(p))),
        "one line with every problem:\n{}",
        env.log()
    );
    // Every proxy of every test logs every broken table on the server: not for longer than needed.
    env.ddl("drop table b").await;
}

/// Syntax errors in msgproxy's own statements: 1064 / 42000, saying how the statement is
/// written, then MariaDB's `near '...' at line N`.
#[tokio::test]
async fn syntax_errors_say_what_the_statement_expects() {
    let env = Env::new("msg_wq_syntax").await;
    let mut c = env.proxy_conn().await;
    for (sql, usage, near) in [
        ("ACK q abc", "ACK table id[, id ...]", "abc"),
        ("ACK q", "ACK table id[, id ...]", ""),
        (
            "STREAM * FORM q",
            "STREAM {* | column[, column ...]} FROM table [WHERE condition]",
            "FORM q",
        ),
        (
            "NACK q 1 DELAY x",
            "NACK table id[, id ...] [DELAY seconds]",
            "x",
        ),
        ("EXTEND q 1", "EXTEND table id[, id ...] BY seconds", ""),
        ("REDRIVE q 1 2", "REDRIVE table [id[, id ...]]", "2"),
    ] {
        let f = exec(&mut c, sql).await.expect_err(sql);
        let want = format!(
            "You have an error in your SQL syntax; msgproxy expects {usage}; check the statement \
             near '{near}' at line 1"
        );
        match &f {
            Failure::Server {
                code: 1064,
                state,
                message,
            } if state == "42000" && *message == want => {}
            other => panic!("{sql}: {other:?}, expected 1064 42000 {want:?}"),
        }
    }
    let one: Option<i64> = c
        .query_first("SELECT 1")
        .await
        .expect("the session goes on");
    assert_eq!(one, Some(1));
}

/// `NACK`: the message is due again at once (for any stream), its epoch kept; with `DELAY` not
/// before then. Acked and unknown ids are not errors. Counted in the metrics.
#[tokio::test]
async fn nack_gives_messages_back_now_or_after_a_delay() {
    let mport = free_port();
    let env = queue("msg_wq_nack", &comment("30", 10, "1", ""), mport).await;
    env.via_proxy("insert into q(id, message) values (1, 'a'), (2, 'b'), (3, 'c')")
        .await;
    let mut s = env.stream("q").await;
    let first = s.recv_n(3, secs(5.0)).await;
    assert_eq!(first.len(), 3);
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "q", &[3]).await, 1);
    assert_eq!(exec(&mut c, "NACK q 1, 3, 99").await.expect("NACK"), 1);
    let again = s.recv(secs(5.0)).await.expect("1 is due again at once");
    assert_eq!(again.id, 1);
    assert_eq!(
        env.state("q", 1).await.epoch,
        Some(2),
        "attempts still count"
    );
    let before = Instant::now();
    assert_eq!(exec(&mut c, "NACK q 2 DELAY 2").await.expect("NACK"), 1);
    let two = s.recv(secs(6.0)).await.expect("2 after its delay");
    assert_eq!(two.id, 2);
    assert!(
        before.elapsed() >= secs(1.9),
        "not before the delay: {:?}",
        before.elapsed()
    );
    let page = scrape(mport).await;
    assert_eq!(
        sample(
            &page,
            "msgproxy_message_nacked_total",
            &[("schema", "msg_wq_nack"), ("table", "q")]
        ),
        Some(2.0)
    );
    let _ = c.disconnect().await;
}

/// `EXTEND ... BY n`, and its plain `UPDATE`: the message is not sent again for n seconds from
/// now, although its ack wait passes before.
#[tokio::test]
async fn extend_keeps_messages_longer() {
    // ack_wait 1 s: without EXTEND a message comes back 1.67-2.33 s after it was sent.
    let env = queue("msg_wq_extend", &comment("1", 10, "1", ""), free_port()).await;
    env.via_proxy("insert into q(id, message) values (1, 'a'), (2, 'b')")
        .await;
    let mut s = env.stream("q").await;
    s.recv_n(2, secs(5.0)).await;
    let mut c = env.proxy_conn().await;
    let sent_at = Instant::now();
    assert_eq!(exec(&mut c, "EXTEND q 1 BY 5").await.expect("EXTEND"), 1);
    env.direct(&format!(
        "update q set time_next = {} where id = 2 and time_acked is null",
        now_ns() + 5 * SEC
    ))
    .await;
    let t = env.state("q", 1).await.time_next.expect("time_next");
    assert!(t > now_ns() + 4 * SEC, "{t}");
    s.expect_quiet(secs(3.5), "both kept for 5 s").await;
    let back = s.recv_n(2, secs(5.0)).await;
    assert!(sent_at.elapsed() >= secs(4.5), "{:?}", sent_at.elapsed());
    let mut got: Vec<i64> = back.iter().map(|m| m.id).collect();
    got.sort();
    assert_eq!(got, [1, 2]);
    let _ = c.disconnect().await;
}

/// Under `vt_max_unacked`, a NACKed message (statement or plain UPDATE) no longer counts, and an
/// EXTENDed one counts until its new time.
#[tokio::test]
async fn nack_and_extend_under_max_unacked() {
    let env = queue(
        "msg_wq_unacked",
        &comment("30", 1, "30", ",vt_max_unacked=1"),
        free_port(),
    )
    .await;
    env.via_proxy("insert into q(id, message) values (1, 'a'), (2, 'b'), (3, 'c')")
        .await;
    let mut s = env.stream("q").await;
    let m = s.recv(secs(5.0)).await.expect("a first message");
    s.expect_quiet(secs(1.0), "holding its one").await;
    let mut c = env.proxy_conn().await;
    // Given back by the statement: room for the next one.
    assert_eq!(
        exec(&mut c, &format!("NACK q {}", m.id))
            .await
            .expect("NACK"),
        1
    );
    let m = s.recv(secs(5.0)).await.expect("one more after NACK");
    s.expect_quiet(secs(1.0), "holding its one").await;
    // Given back by the plain UPDATE, straight to the server: seen in the binlog.
    env.direct(&format!(
        "update q set time_next = {} where id = {} and time_acked is null",
        now_ns(),
        m.id
    ))
    .await;
    let m = s.recv(secs(5.0)).await.expect("one more after the UPDATE");
    // Kept 2 s longer: still held meanwhile, due again (and so let go) after.
    assert_eq!(
        exec(&mut c, &format!("EXTEND q {} BY 2", m.id))
            .await
            .expect("EXTEND"),
        1
    );
    s.expect_quiet(secs(1.5), "the extended message still counts")
        .await;
    assert!(
        s.recv(secs(5.0)).await.is_some(),
        "after the extension the stream gets a message\n{}",
        env.log()
    );
    let _ = c.disconnect().await;
}

/// `vt_purge_after=0`: ACK deletes the rows in the same statement (affected rows = newly
/// acked); a plain UPDATE ack is deleted by the next purge.
#[tokio::test]
async fn acks_delete_with_purge_after_zero() {
    let env = queue(
        "msg_wq_delete",
        "vitess_message,vt_ack_wait=30,vt_purge_after=0,vt_batch_size=10,vt_cache_size=100,vt_poller_interval=1",
        free_port(),
    )
    .await;
    env.via_proxy("insert into q(id, message) values (1, 'a'), (2, 'b'), (3, 'c')")
        .await;
    let mut s = env.stream("q").await;
    s.recv_n(3, secs(5.0)).await;
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "q", &[1, 2, 99]).await, 2);
    assert_eq!(ack(&mut c, "q", &[1]).await, 0);
    let left: Vec<i64> = env.states("q").await.into_keys().collect();
    assert_eq!(left, [3], "acked rows are gone at once");
    env.via_proxy(&format!(
        "update q set time_acked = {}, time_next = null where id = 3",
        now_ns()
    ))
    .await;
    eventually(secs(6.0), "the SQL-acked row purged", || async {
        let left = env.states("q").await;
        (!left.is_empty()).then(|| format!("{left:?}"))
    })
    .await;
    let _ = c.disconnect().await;
}
