//! When messages arrive: rows that were there before any stream, transactions, every insert
//! construct, scheduled rows, priority order, and rows seeded with NULL/0 state columns.

use std::time::Instant;

use super::harness::{ack, assert_each_once, comment, exec, ids, now_ns, secs, Env, Stream, SEC};
use crate::support::{eventually, polls, wait_for_log, wait_for_polls, Proxy, LOG_POLLS};

fn plain_table(name: &str, comment: &str) -> String {
    format!(
        "create table {name}(id bigint primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(100)) comment '{comment}'"
    )
}

/// Rows inserted straight to the server and through the proxy while no stream is connected all
/// arrive once one connects, each once.
#[tokio::test]
async fn messages_inserted_before_any_stream_all_arrive() {
    let env = Env::new("msg_early").await;
    env.ddl(&plain_table("early", &comment("5", 4, "1", "")))
        .await;
    env.direct("insert into early(id, message) values (1, 'd1'), (2, 'd2'), (3, 'd3')")
        .await;
    env.direct("insert into early(id, message) values (4, 'd4')")
        .await;
    env.direct("insert into early(id, message) select 5, 'd5'")
        .await;
    let mut c = env.proxy_conn().await;
    for id in 6..=10 {
        exec(
            &mut c,
            &format!("insert into early(id, message) values ({id}, 'p{id}')"),
        )
        .await
        .expect("insert through the proxy");
    }
    // The proxy has seen all ten (they wait in its cache) with nobody listening.
    env.wait_counts("early", "ten rows cached", |c| c.cached == 10)
        .await;
    let states = env.states("early").await;
    assert!(
        states.values().all(|s| s.epoch.unwrap_or(0) == 0),
        "nothing may be claimed while no stream is connected: {states:?}"
    );
    let mut stream = env.stream("early").await;
    let got = stream.recv_n(10, secs(4.0)).await;
    assert_each_once(&ids(&got), 1..=10, "rows inserted before the stream");
    let more = stream.drain(secs(1.5)).await;
    assert!(
        more.is_empty(),
        "sent again within the ack wait: {:?}",
        ids(&more)
    );
    let states = env.states("early").await;
    assert!(
        states.values().all(|s| s.epoch == Some(1)),
        "each row sent (claimed) exactly once: {states:?}"
    );
}

/// A row inserted in a transaction is sent after COMMIT — promptly, not by the poller (30 s
/// here) — and never when the transaction rolls back.
#[tokio::test]
async fn transactions_deliver_on_commit_and_never_on_rollback() {
    let env = Env::new("msg_transactions").await;
    env.ddl(&plain_table("tx", &comment("5", 10, "30", "")))
        .await;
    let mut stream = env.stream("tx").await;
    let mut c = env.proxy_conn().await;

    exec(&mut c, "BEGIN").await.expect("begin");
    exec(
        &mut c,
        "insert into tx(id, message) values (1, 'in a transaction')",
    )
    .await
    .expect("insert");
    stream
        .expect_quiet(secs(1.5), "the transaction has not committed")
        .await;
    exec(&mut c, "COMMIT").await.expect("commit");
    let committed = Instant::now();
    let m = stream
        .recv(secs(2.0))
        .await
        .unwrap_or_else(|| panic!("row 1 not delivered within 2 s of COMMIT\n{}", env.log()));
    assert_eq!(m.id, 1);
    eprintln!("delivered {:?} after COMMIT", m.at - committed);

    exec(&mut c, "START TRANSACTION").await.expect("begin");
    exec(
        &mut c,
        "insert into tx(id, message) values (2, 'rolled back')",
    )
    .await
    .expect("insert");
    exec(&mut c, "ROLLBACK").await.expect("rollback");
    stream
        .expect_quiet(secs(2.0), "row 2 was rolled back")
        .await;
    assert!(!env.states("tx").await.contains_key(&2));

    // autocommit off: the insert waits for COMMIT as well.
    exec(&mut c, "SET autocommit = 0")
        .await
        .expect("autocommit off");
    exec(
        &mut c,
        "insert into tx(id, message) values (3, 'autocommit off')",
    )
    .await
    .expect("insert");
    exec(
        &mut c,
        "insert into tx(id, message) values (4, 'autocommit off')",
    )
    .await
    .expect("insert");
    stream
        .expect_quiet(secs(1.0), "rows 3 and 4 are not committed")
        .await;
    exec(&mut c, "COMMIT").await.expect("commit");
    let got = stream.recv_n(2, secs(2.0)).await;
    assert_each_once(&ids(&got), [3, 4], "committed with autocommit off");
    exec(
        &mut c,
        "insert into tx(id, message) values (5, 'rolled back')",
    )
    .await
    .expect("insert");
    exec(&mut c, "ROLLBACK").await.expect("rollback");
    exec(&mut c, "SET autocommit = 1")
        .await
        .expect("autocommit on");
    stream
        .expect_quiet(secs(1.5), "row 5 was rolled back")
        .await;
}

/// MESSAGING.md §4: every insert construct through the proxy reaches a waiting stream promptly
/// (vt_poller_interval is 30 s, so the poller cannot be what delivers them).
#[tokio::test]
async fn every_insert_construct_through_the_proxy_is_delivered_promptly() {
    let env = Env::new("msg_constructs").await;
    env.ddl(&plain_table("q", &comment("5", 10, "30", "")))
        .await;
    env.ddl("create sequence q_seq start with 100").await;
    env.ddl("create table src(id bigint primary key)").await;
    env.ddl(
        "create trigger src_to_q after insert on src for each row \
         insert into q(id, message) values (new.id + 1000, 'from a trigger')",
    )
    .await;
    let mut stream = env.stream("q").await;
    let mut c = env.proxy_conn().await;
    let constructs: Vec<(&str, String, Vec<i64>)> = vec![
        (
            "multi-row VALUES",
            "insert into q(id, message) values (1, 'a'), (2, 'b')".into(),
            vec![1, 2],
        ),
        (
            "INSERT ... SELECT",
            "insert into q(id, message) select seq + 10, concat('s', seq) from seq_1_to_3".into(),
            vec![11, 12, 13],
        ),
        (
            "REPLACE",
            "replace into q(id, message) values (20, 'replace')".into(),
            vec![20],
        ),
        (
            "INSERT ... ON DUPLICATE KEY UPDATE (new row)",
            "insert into q(id, message) values (21, 'odku') on duplicate key update message = 'x'"
                .into(),
            vec![21],
        ),
        (
            "INSERT IGNORE",
            "insert ignore into q(id, message) values (22, 'ignore')".into(),
            vec![22],
        ),
        (
            "schema-qualified, quoted name",
            "INSERT INTO `msg_constructs`.`q` (id, message) VALUES (23, 'qualified')".into(),
            vec![23],
        ),
        (
            "INSERT ... SET",
            "insert into q set id = 24, message = 'set'".into(),
            vec![24],
        ),
        (
            "NEXT VALUE FOR seq",
            "insert into q(id, message) values (next value for q_seq, 'seq')".into(),
            vec![100],
        ),
        (
            "a trigger on another table",
            "insert into src(id) values (1)".into(),
            vec![1001],
        ),
    ];
    let mut seen: Vec<i64> = Vec::new();
    let mut late = Vec::new();
    for (what, sql, want) in &constructs {
        exec(&mut c, sql)
            .await
            .unwrap_or_else(|e| panic!("{what}: {sql}: {e:?}"));
        let deadline = Instant::now() + secs(2.0);
        while !want.iter().all(|id| seen.contains(id)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match stream.recv(left).await {
                Some(m) => seen.push(m.id),
                None => break,
            }
        }
        if !want.iter().all(|id| seen.contains(id)) {
            late.push(format!("{what} ({sql}): ids {want:?} not within 2 s"));
        }
    }
    seen.extend(ids(&stream.drain(secs(0.5)).await));
    assert!(
        late.is_empty(),
        "not delivered promptly:\n  {}\n(received {seen:?})",
        late.join("\n  ")
    );
    let all: Vec<i64> = constructs.iter().flat_map(|c| c.2.clone()).collect();
    assert_each_once(&seen, all, "one delivery per inserted row");
}

/// MESSAGING.md §4: a row inserted straight to the server reaches a waiting stream promptly —
/// "it must not wait for the poller" (vt_poller_interval is 30 s here).
#[tokio::test]
async fn direct_insert_reaches_a_waiting_stream_without_the_poller() {
    let env = Env::new("msg_direct_prompt").await;
    env.ddl(&plain_table("d", &comment("5", 10, "30", "")))
        .await;
    // A proxy of its own, logging its polls; it loads the table as it starts.
    let proxy = Proxy::start_with_env(&env.server.backend_url(), &[], None, &[LOG_POLLS]);
    wait_for_log(&proxy, "`d` loaded", 10).await;
    wait_for_log(&proxy, "binlog: following from", 15).await;
    let d = format!("`{}`.`d`", env.db);
    let polled = polls(&proxy, &d);
    let mut stream = Stream::open(proxy.port(), &env.db, "STREAM * FROM d")
        .await
        .unwrap_or_else(|e| panic!("STREAM: {e:?}\n{}", proxy.log()));
    // The first poll a new stream causes is over (it found nothing), not racing the insert.
    wait_for_polls(&proxy, &d, polled).await;
    let inserted = Instant::now();
    env.direct("insert into d(id, message) values (1, 'straight to the server')")
        .await;
    match stream.recv(secs(3.0)).await {
        Some(m) => {
            assert_eq!(m.id, 1);
            eprintln!("direct insert delivered after {:?}", m.at - inserted);
        }
        None => panic!(
            "a row inserted straight to the server did not reach the waiting stream within 3 s \
             (vt_poller_interval=30)\n{}",
            proxy.log()
        ),
    }
}

/// `time_next` in the future: not sent before that time, sent soon after (within a poll).
#[tokio::test]
async fn scheduled_messages_wait_for_their_time() {
    let env = Env::new("msg_scheduled").await;
    env.ddl(&plain_table("sched", &comment("5", 10, "1", "")))
        .await;
    let mut stream = env.stream("sched").await;
    let t1 = now_ns() + 3 * SEC;
    let t2 = t1 + SEC;
    env.via_proxy(&format!(
        "insert into sched(id, time_next, message) values (1, {t1}, 'later')"
    ))
    .await;
    env.direct(&format!(
        "insert into sched(id, time_next, message) values (2, {t2}, 'later still')"
    ))
    .await;
    env.via_proxy("insert into sched(id, time_next, message) values (3, 0, 'now')")
        .await;
    let now = stream.recv(secs(2.0)).await.expect("message 3 (due now)");
    assert_eq!(now.id, 3);
    for (id, due) in [(1, t1), (2, t2)] {
        let m = stream
            .recv(secs(6.0))
            .await
            .unwrap_or_else(|| panic!("scheduled message {id} never arrived\n{}", env.log()));
        assert_eq!(m.id, id, "scheduled messages in time order");
        let early = due - m.at_ns;
        assert!(
            early <= 0,
            "message {id} arrived {} ms before its time_next",
            early / 1_000_000
        );
        assert!(
            -early <= 1_700_000_000,
            "message {id} arrived {} ms after its time_next (poll interval 1 s)",
            -early / 1_000_000
        );
    }
}

/// Lower priority first (NULL counts as 0), then the oldest `time_next` first; one stream,
/// vt_batch_size=1, rows already there when it connects.
#[tokio::test]
async fn priority_then_oldest_first() {
    let env = Env::new("msg_priority").await;
    env.ddl(&format!(
        "create table prio(id bigint primary key, priority int, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(10)) comment '{}'",
        comment("30", 1, "1", "")
    ))
    .await;
    let now = now_ns();
    // One statement, so a poll sees all rows or none.
    env.direct(&format!(
        "insert into prio(id, priority, time_next, message) values
           (1, 5, {a}, 'p5'), (2, 1, {b}, 'p1 new'), (3, 1, {c}, 'p1 old'), (4, 0, {d}, 'p0'),
           (5, NULL, {e}, 'pNULL'), (6, 3, {f}, 'p3'), (7, 1, {d}, 'p1 mid')",
        a = now - 50 * SEC,
        b = now - 10 * SEC,
        c = now - 30 * SEC,
        d = now - 20 * SEC,
        e = now - 5 * SEC,
        f = now - 40 * SEC,
    ))
    .await;
    // All seven in the proxy's cache before the stream comes, so its first batch picks from all.
    env.wait_counts("prio", "seven rows cached", |c| c.cached == 7)
        .await;
    let mut stream = env.stream("prio").await;
    let got = stream.recv_n(7, secs(4.0)).await;
    assert_eq!(
        ids(&got),
        vec![4, 5, 3, 7, 2, 6, 1],
        "order: priority 0 (4 older, then NULL=0 5), priority 1 oldest first (3, 7, 2), 3, 5"
    );
}

/// More distinct priorities with unacked rows than one poll walks index range by index range
/// (64): a row above them that becomes due by time (the poller's job: no binlog event marks
/// that moment) is still found and sent.
#[tokio::test]
async fn a_due_row_above_many_priorities_is_polled() {
    let env = Env::new("msg_manyprio").await;
    env.ddl(&format!(
        "create table manyprio(id bigint primary key, priority int, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(10)) comment '{}'",
        comment("30", 1, "0.5", "")
    ))
    .await;
    let now = now_ns();
    // 70 priorities, each with a row sent once and waiting for its ack (due in an hour).
    let waiting: Vec<String> = (0..70)
        .map(|p| format!("({}, {p}, {}, 1, 'wait')", p + 1, now + 3600 * SEC))
        .collect();
    env.direct(&format!(
        "insert into manyprio(id, priority, time_next, epoch, message) values {}",
        waiting.join(", ")
    ))
    .await;
    // Above them, a row that becomes due in 3 s: beyond any schedule made when it was written.
    env.direct(&format!(
        "insert into manyprio(id, priority, time_next, epoch, message) values (1000, 100, {}, 1, 'due')",
        now + 3 * SEC
    ))
    .await;
    let mut stream = env.stream("manyprio").await;
    let got = stream.recv_n(1, secs(10.0)).await;
    assert_eq!(ids(&got), vec![1000], "the row at priority 100 once due");
}

/// MESSAGING.md §2: `time_acked = 0` is unacked (sent, never purged until acked); `time_next`
/// NULL or 0 is due now; `epoch` NULL is 0 — also for rows inserted while no stream listens.
#[tokio::test]
async fn null_and_zero_seeds_are_due_and_unacked() {
    let env = Env::new("msg_seeds").await;
    env.ddl(&plain_table("seeds", &comment("5", 10, "1", "")))
        .await;
    env.direct(
        "insert into seeds(id, time_next, epoch, time_acked, message) values
           (1, NULL, 0, 0, 'acked 0, next NULL'),
           (2, NULL, 0, NULL, 'next NULL'),
           (3, 0, 0, NULL, 'next 0'),
           (4, 0, NULL, NULL, 'epoch NULL')",
    )
    .await;
    env.via_proxy("insert into seeds(id, message) values (5, 'all NULL')")
        .await;
    env.via_proxy(
        "insert into seeds(id, time_next, epoch, time_acked, message) values (6, 0, 0, 0, 'acked 0')",
    )
    .await;
    // A row acked long ago, written last: once it is purged, a purge (vt_purge_after=1) has
    // run over all of them, and the proxy has seen the six (cached) with nobody listening.
    env.direct(&format!(
        "insert into seeds(id, time_acked, message) values (99, {}, 'acked long ago')",
        now_ns() - 60 * SEC
    ))
    .await;
    let purged =
        crate::support::eventually(20, async || !env.states("seeds").await.contains_key(&99)).await;
    assert!(purged, "the purger never ran:\n{}", env.log());
    env.wait_counts("seeds", "six rows cached", |c| c.cached == 6)
        .await;
    let states = env.states("seeds").await;
    assert_eq!(
        states.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6],
        "rows with time_acked 0 are not acked and must not be purged: {states:?}"
    );
    let mut stream = env.stream("seeds").await;
    let got = stream.recv_n(6, secs(3.0)).await;
    assert_each_once(&ids(&got), 1..=6, "NULL/0 seeds");
    let after = now_ns();
    for (id, s) in env.states("seeds").await {
        assert_eq!(s.epoch, Some(1), "row {id} sent once: {s:?}");
        assert!(
            s.time_next.is_some_and(|t| t > after),
            "row {id} claimed into the future: {s:?}"
        );
    }
    // Rows seeded while the stream listens: through the proxy (prompt) and straight (poller).
    env.via_proxy("insert into seeds(id, time_next, message) values (7, NULL, 'next NULL')")
        .await;
    env.direct("insert into seeds(id, time_next, time_acked, message) values (8, 0, 0, 'acked 0')")
        .await;
    let got = stream.recv_n(2, secs(2.5)).await;
    assert_each_once(&ids(&got), [7, 8], "seeds inserted while streaming");

    let mut c = env.proxy_conn().await;
    assert_eq!(
        ack(&mut c, "seeds", &[1, 6, 8]).await,
        3,
        "time_acked = 0 rows are unacked, so ACK acks them"
    );
    assert_eq!(ack(&mut c, "seeds", &[2, 3, 4, 5, 7]).await, 5);
    for (id, s) in env.states("seeds").await {
        assert!(
            s.time_acked.is_some_and(|t| t > 0) && s.time_next.is_none(),
            "row {id} after ACK: {s:?}"
        );
    }
    // Now acked: purged after vt_purge_after (1 s) on a poll tick (1 s).
    let gone = crate::support::eventually(5, async || env.states("seeds").await.is_empty()).await;
    assert!(
        gone,
        "acked rows not purged within 5 s: {:?}",
        env.states("seeds").await
    );
}

/// A commit the binlog watcher can only poll for (a `date` id is not rebuilt from the binlog)
/// is polled at once and again 100 ms later: the binlog can show a commit a moment before
/// other sessions see it, and a poll in that moment alone would leave the row to the next
/// `vt_poller_interval` (30 s here).
#[tokio::test]
async fn a_poll_at_a_commit_is_repeated_shortly_after() {
    let env = Env::new("msg_repoll").await;
    env.ddl(&format!(
        "create table dated(id date primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(20)) comment '{}'",
        comment("30", 10, "30", "")
    ))
    .await;
    // A proxy of its own, logging its polls; it loads the table as it starts.
    let proxy = Proxy::start_with_env(
        &env.server.backend_url(),
        &[],
        None,
        &[("MSGPROXY_LOG", "info,msgproxy::messaging::manager=debug")],
    );
    wait_for_log(&proxy, "`dated` loaded", 10).await;
    let table = format!("`{}`.`dated`", env.db);
    let loaded = polls(&proxy, &table);
    let mut stream = Stream::open(proxy.port(), &env.db, "STREAM * FROM dated")
        .await
        .unwrap_or_else(|e| panic!("STREAM: {e:?}\n{}", proxy.log()));
    // The stream's own poll (made as it subscribes) is over: it is not counted below. (The
    // table is empty, so nothing asks for another until the commit.)
    wait_for_polls(&proxy, &table, loaded).await;
    let before = polls(&proxy, &table);
    // Due in a minute: no claim follows (its own binlog event would be polled for too).
    let later = now_ns() + 60 * SEC;
    env.direct(&format!(
        "insert into dated(id, time_next, message) values ('2026-12-01', {later}, 'm')"
    ))
    .await;
    // The poll at the commit and the one 100 ms later; without the second, the next poll is
    // the timer's, 30 s away, after this wait has failed.
    let repolled = eventually(10, async || polls(&proxy, &table) >= before + 2).await;
    assert!(
        repolled,
        "polled {} times in 10 s after the commit, expected the poll at the commit and the one \
         100 ms later:\n{}",
        polls(&proxy, &table) - before,
        proxy.log()
    );
    stream.expect_quiet(secs(0.1), "nothing is due").await;
    stream.close();
}
