//! XA transactions written straight to the server arrive at their own `XA COMMIT`.

use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::Conn;

use super::{comment, connect, create_table, direct, fresh_db, Consumer, PROMPT};
use crate::support::{polls, wait_for_log, wait_for_polls, MariaDb, Proxy, LOG_POLLS};

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

    let proxy = Proxy::start_with_env(&server.url(db), &[], None, &[LOG_POLLS]);
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let (m, n) = (format!("`{db}`.`m`"), format!("`{db}`.`n`"));
    let (polled_m, polled_n) = (polls(&proxy, &m), polls(&proxy, &n));
    let mut cm = Consumer::start(proxy.port(), db, "m");
    let mut cn = Consumer::start(proxy.port(), db, "n");
    cm.wait_open(1, 10).await;
    cn.wait_open(1, 10).await;
    // The streams' first polls (on subscribe) are over and found nothing committed.
    wait_for_polls(&proxy, &m, polled_m).await;
    wait_for_polls(&proxy, &n, polled_n).await;

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
