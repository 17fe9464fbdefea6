//! Several streams on one table, several proxies on one database, and streams that go away.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::harness::{ack, assert_each_once, comment, counts, exec, ids, secs, Env, Stream};
use crate::support::eventually;
use crate::support::metrics::{sample, scrape};
use crate::support::process::free_port;

fn table_sql(name: &str, comment: &str) -> String {
    format!(
        "create table {name}(id bigint primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(50)) comment '{comment}'"
    )
}

/// Two streams share the work (each message to one of them); when one goes away, the other gets
/// everything new at once, and the gone one's unacked messages after the ack wait.
#[tokio::test]
async fn two_streams_share_and_the_survivor_takes_over() {
    let env = Env::new("msg_two_streams").await;
    // ack_wait 2, min_backoff 2: a sent message is due again 4..4.67 s later.
    env.ddl(&table_sql("shared", &comment("2", 2, "1", "")))
        .await;
    let mut a = env.stream("shared").await;
    let mut b = env.stream("shared").await;
    let started = Instant::now();
    env.via_proxy(&format!(
        "insert into shared(id, message) values {}",
        (1..=20)
            .map(|i| format!("({i}, 'm{i}')"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .await;
    let (got_a, got_b) = tokio::join!(a.drain(secs(1.5)), b.drain(secs(1.5)));
    let (ids_a, ids_b) = (ids(&got_a), ids(&got_b));
    let all: Vec<i64> = ids_a.iter().chain(&ids_b).copied().collect();
    let missing: Vec<i64> = (1..=20).filter(|i| !all.contains(i)).collect();
    if !missing.is_empty() {
        // Diagnose before failing: where are they, and do they come later (still inside the
        // ack window of 4 s)?
        let states = env.states("shared").await;
        let (late_a, late_b) = tokio::join!(a.drain(secs(2.0)), b.drain(secs(2.0)));
        let late: Vec<(i64, &str, Duration)> = late_a
            .iter()
            .map(|m| (m.id, "A", m.at - started))
            .chain(late_b.iter().map(|m| (m.id, "B", m.at - started)))
            .collect();
        panic!(
            "ids {missing:?} not delivered within 1.5 s of the insert (A got {ids_a:?}, B got \
             {ids_b:?}); their rows then: {:?}; arriving in the next 2 s: {late:?}\n{}",
            missing
                .iter()
                .map(|i| (i, states.get(i)))
                .collect::<Vec<_>>(),
            env.log()
        );
    }
    assert_each_once(
        &all,
        1..=20,
        "20 messages over two streams within one ack window",
    );
    // Both take part. Not "about evenly": a stream still writing its batch is passed over, so
    // the split follows the clients' speed, and on a loaded machine one slow reader got only
    // its first batch (A [1, 2], B the other 18).
    assert!(
        !ids_a.is_empty() && !ids_b.is_empty(),
        "round-robin in batches of at most 2 should give both streams work; \
         A got {ids_a:?}, B got {ids_b:?}"
    );

    let mut acker = env.proxy_conn().await;
    assert_eq!(ack(&mut acker, "shared", &ids_b).await, ids_b.len() as u64);
    a.close();
    env.wait_counts("shared", "the proxy notices A is gone", |c| {
        c.subscribers == 1
    })
    .await;

    let mut c = env.proxy_conn().await;
    for id in 21..=30 {
        exec(
            &mut c,
            &format!("insert into shared(id, message) values ({id}, 'new')"),
        )
        .await
        .expect("insert");
    }
    let new = b.recv_n(10, secs(2.0)).await;
    assert_each_once(
        &ids(&new),
        21..=30,
        "new messages after A went away, all to B",
    );
    assert_eq!(ack(&mut acker, "shared", &ids(&new)).await, 10);

    // A's unacked messages come back to B after the ack wait.
    let mut back: Vec<i64> = Vec::new();
    let deadline = started + secs(8.0);
    let want: BTreeSet<i64> = ids_a.iter().copied().collect();
    while back.iter().copied().collect::<BTreeSet<_>>() != want {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(m) = b.recv(left).await else { break };
        assert_eq!(ack(&mut acker, "shared", &[m.id]).await, 1, "ack {}", m.id);
        back.push(m.id);
    }
    assert_each_once(
        &back,
        ids_a.clone(),
        "A's unacked messages, resent to B (B's own were acked)",
    );
    let more = b.drain(secs(1.0)).await;
    assert!(
        more.is_empty(),
        "everything was acked; got {:?}",
        ids(&more)
    );
}

/// Two proxies on the same database, one stream each, 300 messages inserted fast through both
/// proxies and straight to the server; consumers ack at once. Every message is delivered, and
/// none twice (vt_ack_wait 5 s is far longer than any ack takes).
#[tokio::test]
async fn two_proxies_never_deliver_a_message_twice() {
    let env = Env::new("msg_two_proxies").await;
    env.ddl(&table_sql("multi", &comment("5", 10, "1", "")))
        .await;
    let proxy2 = env.second_proxy();
    let s1 = env.stream_on(&env.proxy, "multi").await;
    let s2 = env.stream_on(&proxy2, "multi").await;
    let ack1 = super::harness::connect(env.proxy.port(), &env.db).await;
    let ack2 = super::harness::connect(proxy2.port(), &env.db).await;

    const N: i64 = 300;
    let acked = RefCell::new(BTreeSet::new());
    let log: RefCell<Vec<(i64, &'static str, Instant, u64)>> = RefCell::new(Vec::new());
    let started = Instant::now();
    let deadline = started + secs(20.0);

    let consume = |mut stream: Stream, mut conn: Conn, name: &'static str| {
        let acked = &acked;
        let log = &log;
        async move {
            let mut quiet_since: Option<Instant> = None;
            loop {
                if Instant::now() > deadline {
                    break;
                }
                // Keep listening one more second after everything is acked: late duplicates.
                if acked.borrow().len() as i64 == N {
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > secs(1.0) {
                        break;
                    }
                }
                if let Some(m) = stream.recv(Duration::from_millis(100)).await {
                    let n = ack(&mut conn, "multi", &[m.id]).await;
                    acked.borrow_mut().insert(m.id);
                    log.borrow_mut().push((m.id, name, m.at, n));
                }
            }
            stream.close();
        }
    };
    let insert = |port: u16, which: i64| {
        let db = env.db.clone();
        async move {
            let mut c = super::harness::connect(port, &db).await;
            for id in (1..=N).filter(|i| i % 3 == which) {
                exec(
                    &mut c,
                    &format!("insert into multi(id, message) values ({id}, 'm')"),
                )
                .await
                .expect("insert");
            }
        }
    };
    tokio::join!(
        consume(s1, ack1, "proxy 1"),
        consume(s2, ack2, "proxy 2"),
        insert(env.proxy.port(), 1),
        insert(proxy2.port(), 2),
        insert(env.server.port(), 0),
    );
    let log = log.into_inner();
    let per_id = counts(log.iter().map(|l| l.0));
    let per_proxy = counts(log.iter().map(|l| if l.1 == "proxy 1" { 1 } else { 2 }));
    eprintln!(
        "{} deliveries in {:?}, per proxy {per_proxy:?}",
        log.len(),
        started.elapsed()
    );
    let twice: Vec<String> = per_id
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| {
            let ds: Vec<String> = log
                .iter()
                .filter(|l| l.0 == *id)
                .map(|l| format!("{} at {:?} (ack affected {})", l.1, l.2 - started, l.3))
                .collect();
            format!("{id}: {}", ds.join(", "))
        })
        .collect();
    let missing: Vec<i64> = (1..=N).filter(|i| !per_id.contains_key(i)).collect();
    assert!(
        twice.is_empty() && missing.is_empty(),
        "{} ids delivered more than once: {twice:#?}\nnever delivered: {missing:?}\n\
         --- proxy 1 log ---\n{}\n--- proxy 2 log ---\n{}",
        twice.len(),
        env.log(),
        super::harness::log_tail(&proxy2)
    );
    let states = env.states("multi").await;
    let unacked: Vec<i64> = states
        .iter()
        .filter(|(_, s)| s.time_acked.is_none())
        .map(|(id, _)| *id)
        .collect();
    assert!(unacked.is_empty(), "unacked after the run: {unacked:?}");
}

/// A stream whose client disconnects is dropped at once: messages inserted afterwards are not
/// claimed for it, so a new stream gets them at once (not after an ack wait of 10+ s).
#[tokio::test]
async fn a_disconnected_stream_is_dropped_at_once() {
    let env = Env::new("msg_gone").await;
    // ack_wait 5, min_backoff 5: a message claimed for the gone client would be stuck 10+ s.
    env.ddl(&table_sql("gone", &comment("5", 10, "1", "")))
        .await;
    let mut a = env.stream("gone").await;
    env.via_proxy("insert into gone(id, message) values (1, 'to A')")
        .await;
    assert_eq!(a.recv(secs(2.0)).await.map(|m| m.id), Some(1));
    a.close();
    env.wait_counts("gone", "the proxy notices A is gone", |c| {
        c.subscribers == 0
    })
    .await;

    env.via_proxy("insert into gone(id, message) values (2, 'nobody listening')")
        .await;
    env.via_proxy("insert into gone(id, message) values (3, 'nobody listening')")
        .await;
    // The proxy has seen both rows (they wait in its cache): had it still counted A, it would
    // have claimed them for A by now.
    env.wait_counts("gone", "rows 2 and 3 cached", |c| c.cached == 2)
        .await;
    let states = env.states("gone").await;
    assert_eq!(
        (states[&2].epoch, states[&3].epoch),
        (None, None),
        "rows 2 and 3 were claimed although the only stream had gone: {states:?}"
    );
    let mut b = env.stream("gone").await;
    let got = b.recv_n(2, secs(2.0)).await;
    assert_each_once(
        &ids(&got),
        [2, 3],
        "rows inserted while no stream was connected",
    );
    env.via_proxy("insert into gone(id, message) values (4, 'to B')")
        .await;
    assert_eq!(b.recv(secs(1.0)).await.map(|m| m.id), Some(4));

    // B walks away while C is connected: new rows all go to C at once.
    let mut c = env.stream("gone").await;
    b.close();
    env.wait_counts("gone", "the proxy notices B is gone", |c| {
        c.subscribers == 1
    })
    .await;
    let mut conn = env.proxy_conn().await;
    for id in 5..=8 {
        exec(
            &mut conn,
            &format!("insert into gone(id, message) values ({id}, 'to C')"),
        )
        .await
        .expect("insert");
    }
    let got = c.recv_n(4, secs(2.0)).await;
    assert_each_once(
        &ids(&got),
        5..=8,
        "rows inserted after B went away, all to C",
    );
}

/// Purges running elsewhere must not hold up delivery. Every proxy purges every message table
/// it knows each vt_poller_interval. On a table without an index on `time_acked` (the contract
/// requires none) a single `DELETE ... WHERE time_acked ... LIMIT` would scan, and lock, every row
/// for a moment, so the purge reads the ids first and deletes by primary key (as below).
/// A claim that meets those locks (`SKIP LOCKED`) must not leave a due message waiting for the
/// next poll — 30 s here. Three connections stand in for other proxies' purges, in a loop so the
/// collision is certain rather than rare.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purges_elsewhere_do_not_hold_up_delivery() {
    // A server of its own: the purge loops below would slow every other test's server.
    let env = Env::private("msg_purge_contention").await;
    env.ddl(&table_sql("busy", &comment("5", 10, "30", "")))
        .await;
    // Acked "in the future": never purgeable, never sent, but every purge has to scan them.
    env.direct(&format!(
        "insert into busy(id, time_acked, message) select seq + 1000000, {}, 'acked' \
         from seq_1_to_5000",
        super::harness::now_ns() + 3600 * super::harness::SEC
    ))
    .await;
    let mut stream = env.stream("busy").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut purgers = Vec::new();
    for _ in 0..3 {
        let stop = stop.clone();
        let (port, db) = (env.server.port(), env.db.clone());
        purgers.push(tokio::spawn(async move {
            let mut c = super::harness::connect(port, &db).await;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let cutoff = super::harness::now_ns() - super::harness::SEC;
                // What a msgproxy purge does: find the purgeable ids with a plain read, then
                // delete them by primary key (locking only those rows).
                let ids: Vec<i64> = c
                    .query(format!(
                        "SELECT id FROM busy WHERE ((time_acked > 0 AND time_acked < {cutoff}) \
                         OR time_acked < 0) LIMIT 500"
                    ))
                    .await
                    .unwrap_or_default();
                if !ids.is_empty() {
                    let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                    let _ = exec(
                        &mut c,
                        &format!(
                            "DELETE FROM busy WHERE id IN ({}) AND ((time_acked > 0 AND \
                             time_acked < {cutoff}) OR time_acked < 0)",
                            list.join(", ")
                        ),
                    )
                    .await;
                }
                // The concurrent purger's pace, part of the load under test.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    let mut c = env.proxy_conn().await;
    let mut slow = Vec::new();
    let mut lost = Vec::new();
    for id in 1..=40 {
        let t = Instant::now();
        exec(
            &mut c,
            &format!("insert into busy(id, message) values ({id}, 'x')"),
        )
        .await
        .expect("insert");
        match stream.recv(secs(3.0)).await {
            Some(m) if m.id == id => {
                if m.at - t > Duration::from_millis(500) {
                    slow.push((id, m.at - t));
                }
            }
            Some(m) => lost.push(format!("{id} (got {} instead)", m.id)),
            None => lost.push(format!("{id} (nothing within 3 s)")),
        }
        if !lost.is_empty() {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for p in purgers {
        let _ = p.await;
    }
    let states = env.states("busy").await;
    // Held up by the purges, deliveries waited on their locks for seconds, one after another;
    // a machine busy with other work slows a few by some hundreds of milliseconds.
    assert!(
        slow.len() <= 4 && lost.is_empty(),
        "with purges running elsewhere: not delivered within 3 s: {lost:?}; slower than 500 ms \
         (at most 4 of 40 may be): {slow:?}; rows 1..=40 now: {:?}",
        states
            .range(1..=40)
            .filter(|(_, s)| s.epoch.is_none())
            .collect::<Vec<_>>()
    );
    env.server.stop();
}

/// Large messages are claimed within the claim's byte budget (16 MiB): eight rows of 3 MiB, all
/// due at once and offered in one batch, take two claims of at most 5 rows — the rest are left
/// unclaimed, stay due and go out in the next claim at once — and each is sent once. The rows a
/// claim keeps are those first in priority, though the server returns them by id: the ids here
/// run against the priorities.
#[tokio::test]
async fn large_messages_are_claimed_within_the_byte_budget() {
    const ROWS: i64 = 8;
    const SIZE: usize = 3 << 20;
    let mport = free_port();
    let listen = format!("127.0.0.1:{mport}");
    let env = Env::private_with("msg_large", &["--metrics-listen", &listen]).await;
    env.ddl(&format!(
        "create table big(id bigint primary key, priority bigint, time_next bigint, epoch bigint,
           time_acked bigint, message mediumblob) comment '{}'",
        comment("30", 100, "30", "")
    ))
    .await;
    let values: Vec<String> = (1..=ROWS)
        .map(|id| format!("({id}, {}, repeat(char(64 + {id}), {SIZE}))", ROWS + 1 - id))
        .collect();
    env.direct(&format!(
        "insert into big(id, priority, message) values {}",
        values.join(", ")
    ))
    .await;
    // All eight in the proxy's cache before the stream opens, so they are offered in one batch
    // (the binlog hands over 24 MiB of rows one by one; a stream open meanwhile would get them
    // in several).
    let labels = [("schema", env.db.as_str()), ("table", "big")];
    assert!(
        eventually(10, async || {
            sample(&scrape(mport).await, "msgproxy_message_due", &labels) == Some(ROWS as f64)
        })
        .await,
        "the proxy never saw the {ROWS} rows due"
    );

    let started = Instant::now();
    let mut stream = env.stream("big").await;
    let got = stream.recv_n(ROWS as usize, secs(10.0)).await;
    assert_each_once(&ids(&got), 1..=ROWS, "large messages");
    assert_eq!(
        ids(&got),
        (1..=ROWS).rev().collect::<Vec<_>>(),
        "in priority order across the two claims: the first keeps the five first in priority"
    );
    assert!(
        started.elapsed() < secs(5.0),
        "the rows a claim left out must go out at once, not after a retry delay or a poll: {:?}",
        started.elapsed()
    );
    for m in &got {
        let message = match m.values.last().expect("a message column") {
            mysql_async::Value::Bytes(b) => b,
            other => panic!("message of {} is {other:?}", m.id),
        };
        assert_eq!(message.len(), SIZE, "message {}", m.id);
        assert!(
            message.iter().all(|b| *b == 64 + m.id as u8),
            "message {}",
            m.id
        );
    }
    let states = env.states("big").await;
    assert!(
        states.values().all(|s| s.epoch == Some(1)),
        "each row claimed exactly once: {states:?}"
    );
    let page = scrape(mport).await;
    let claims = sample(&page, "msgproxy_message_claims_total", &labels);
    assert_eq!(
        claims,
        Some(2.0),
        "8 × 3 MiB in one batch: two claims (5 rows, then 3) within 16 MiB each"
    );
    env.server.stop();
}

/// Table `m` with MESSAGING.md's indexes (`next_idx`, `ack_idx`), which the optimizer may prefer
/// to the primary key on a small table.
async fn indexed_table(env: &Env, poller_interval: &str) {
    env.ddl(&format!(
        "CREATE TABLE m (id bigint PRIMARY KEY, time_next bigint DEFAULT 0, epoch bigint, \
         time_acked bigint, message varchar(64), INDEX next_idx(time_next, epoch), \
         INDEX ack_idx(time_acked)) COMMENT '{}'",
        comment("30", 5, poller_interval, "")
    ))
    .await;
}

/// A producer's open transaction holds no lock a claim or an ACK needs: messages already
/// committed go out while it stays open, an ACK of them does not wait for it, and its next
/// INSERT neither waits nor deadlocks. (On a small table the optimizer read the claim's
/// statements through `ack_idx`, and at REPEATABLE READ they locked every unacked row they
/// scanned, the open transaction's new row among them.)
#[tokio::test]
async fn an_open_producer_transaction_does_not_hold_up_claims_or_acks() {
    let env = Env::new("msg_open_tx_locks").await;
    indexed_table(&env, "30").await;
    for id in 1..=5 {
        env.via_proxy(&format!(
            "INSERT INTO m (id, message) VALUES ({id}, 'committed')"
        ))
        .await;
    }
    let mut producer = env.proxy_conn().await;
    exec(&mut producer, "START TRANSACTION")
        .await
        .expect("begin");
    exec(
        &mut producer,
        "INSERT INTO m (id, message) VALUES (100, 'open')",
    )
    .await
    .expect("insert in the open transaction");

    let mut stream = env.stream("m").await;
    let got = stream.recv_n(5, secs(5.0)).await;
    assert_eq!(
        ids(&got),
        vec![1, 2, 3, 4, 5],
        "committed messages while a producer's transaction is open\n{}",
        env.log()
    );
    let mut acker = env.proxy_conn().await;
    let acked = tokio::time::timeout(secs(5.0), ack(&mut acker, "m", &[1, 2, 3, 4, 5]))
        .await
        .expect("the ACK waited for the open transaction");
    assert_eq!(acked, 5);
    // The purge (vt_purge_after=1) has deleted the acked rows with the transaction still open.
    // It runs at each poller tick, every 30 s here: the deadline covers one.
    let purged = crate::support::eventually(45, async || {
        let left = env.states("m").await;
        (1..=5).all(|id| !left.contains_key(&id))
    })
    .await;
    assert!(
        purged,
        "rows 1-5 acked, not purged within 45 s\n{}",
        env.log()
    );
    let second = tokio::time::timeout(
        secs(5.0),
        exec(
            &mut producer,
            "INSERT INTO m (id, message) VALUES (101, 'open')",
        ),
    )
    .await
    .expect("the producer's second INSERT waited");
    assert!(second.is_ok(), "the producer's second INSERT: {second:?}");
    exec(&mut producer, "COMMIT").await.expect("commit");
    let late = stream.recv_n(2, secs(5.0)).await;
    assert_eq!(ids(&late), vec![100, 101]);
    stream.close();
}

/// The same for the purge: acked rows past `vt_purge_after` are deleted while a producer's
/// transaction holds a new row.
#[tokio::test]
async fn an_open_producer_transaction_does_not_hold_up_the_purge() {
    let env = Env::new("msg_open_tx_purge").await;
    indexed_table(&env, "0.2").await;
    let mut producer = env.proxy_conn().await;
    exec(&mut producer, "START TRANSACTION")
        .await
        .expect("begin");
    exec(
        &mut producer,
        "INSERT INTO m (id, message) VALUES (100, 'open')",
    )
    .await
    .expect("insert in the open transaction");
    env.direct(
        "INSERT INTO m (id, time_next, epoch, time_acked) SELECT seq + 1000000, NULL, 1, 1 FROM seq_1_to_2000",
    )
    .await;
    let purged = eventually(10, async || env.states("m").await.is_empty()).await;
    let left = env.states("m").await.len();
    exec(&mut producer, "COMMIT").await.expect("commit");
    assert!(
        purged,
        "{left} acked rows left while a producer's transaction is open\n{}",
        env.log()
    );
}

/// A stream's session may set `sql_select_limit`: the claim's SELECT is its own, and says how
/// many rows it wants (it was cut to the session's limit, and the rest of the batch waited for
/// the next poll).
#[tokio::test]
async fn a_sessions_sql_select_limit_does_not_cut_claims_short() {
    let env = Env::new("msg_select_limit").await;
    env.ddl(&format!(
        "CREATE TABLE m (id bigint PRIMARY KEY, time_next bigint DEFAULT 0, epoch bigint, \
         time_acked bigint, message varchar(64)) COMMENT '{}'",
        comment("30", 5, "30", "")
    ))
    .await;
    let mut stream = Stream::open_with(
        env.proxy.port(),
        &env.db,
        &["SET sql_select_limit = 1"],
        "STREAM * FROM m",
    )
    .await
    .expect("stream");
    env.via_proxy("INSERT INTO m (id, message) SELECT seq, 'x' FROM seq_1_to_10")
        .await;
    let got = stream.recv_n(10, secs(5.0)).await;
    assert_each_once(&ids(&got), 1..=10, "with sql_select_limit = 1");
    stream.close();
}
