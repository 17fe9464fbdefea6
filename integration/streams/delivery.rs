//! Delivery: fan-out, competing streams, commit order, rollbacks, BLACKHOLE, filters,
//! redelivery, and a large transaction.

use super::*;
use crate::messaging::harness::{ids, value_str};

#[tokio::test]
async fn two_groups_each_get_every_event_and_two_streams_share_one() {
    let env = Env::new("evs_fanout").await;
    env.ddl(&orders_events(",ack_wait=30")).await;
    let mut a = stream(&env, "* FROM orders_events GROUP 'a'").await;
    let mut b1 = stream(&env, "* FROM orders_events GROUP 'b'").await;
    let mut b2 = stream(&env, "* FROM orders_events GROUP 'b'").await;
    assert_eq!(
        a.column_names(),
        vec!["event_id", "id", "topic", "payload", "created_at"]
    );
    let written = insert_direct(&env, 40, 10, "order.created").await;
    let got_a = a.recv_n(40, secs(20)).await;
    assert_eq!(
        row_ids(&got_a),
        written,
        "group a: every event, in commit order"
    );
    let event_ids = ids(&got_a);
    assert!(
        event_ids.windows(2).all(|w| w[0] < w[1]),
        "event ids increase in commit order: {event_ids:?}"
    );
    // Group b: its two streams share the events, each event once.
    let mut got_b = b1.drain(secs(3)).await;
    got_b.extend(b2.drain(secs(1)).await);
    let mut b_rows = row_ids(&got_b);
    b_rows.sort();
    assert_eq!(
        b_rows, written,
        "group b: every event once across its streams"
    );
    // The same event has the same id in both groups.
    let mut b_ids = ids(&got_b);
    b_ids.sort();
    assert_eq!(b_ids, event_ids);
    assert_eq!(value_str(&got_a[0].values[2]), "order.created");
    assert_eq!(value_str(&got_a[0].values[3]), "{\"i\": 0}");
    a.close();
    b1.close();
    b2.close();
}

#[tokio::test]
async fn a_rolled_back_transaction_produces_no_event() {
    let env = Env::new("evs_rollback").await;
    env.ddl(&orders_events("")).await;
    let mut s = stream(&env, "id, topic FROM orders_events GROUP 'g'").await;
    let mut c = env.direct_conn().await;
    exec(&mut c, "BEGIN").await.unwrap();
    exec(
        &mut c,
        "INSERT INTO orders_events (topic, payload) VALUES ('gone', '{}')",
    )
    .await
    .unwrap();
    exec(&mut c, "ROLLBACK").await.unwrap();
    exec(
        &mut c,
        "INSERT INTO orders_events (topic, payload) VALUES ('kept', '{}')",
    )
    .await
    .unwrap();
    let got = s.recv_n(1, secs(10)).await;
    assert_eq!(value_str(&got[0].values[2]), "kept");
    s.expect_quiet(secs(2), "the rolled-back row is no event")
        .await;
    s.close();
}

#[tokio::test]
async fn redelivery_after_ack_wait_and_acked_stays_acked() {
    let mport = crate::support::process::free_port();
    let listen = format!("127.0.0.1:{mport}");
    let server = crate::support::MariaDb::shared();
    let env = Env::on_url(
        server,
        "evs_redeliver",
        &server.backend_url(),
        &["--metrics-listen", &listen],
    )
    .await;
    env.ddl(&orders_events(",ack_wait=1")).await;
    let mut s = stream(&env, "* FROM orders_events GROUP 'g'").await;
    insert_direct(&env, 2, 2, "x").await;
    let first = s.recv_n(2, secs(10)).await;
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "orders_events", "g", &[first[0].id]).await, 1);
    assert_eq!(
        ack(&mut c, "orders_events", "g", &[first[0].id, 12345]).await,
        0,
        "acked again or unknown: not newly acked"
    );
    // The unacked one comes back after ack_wait, the acked one never.
    let again = s.recv_n(1, secs(10)).await;
    assert_eq!(again[0].id, first[1].id);
    assert_eq!(ack(&mut c, "orders_events", "g", &[first[1].id]).await, 1);
    s.expect_quiet(secs(3), "everything acked").await;
    // The metrics say the same: 3 handed out, 1 of them again, 2 acked, nothing left.
    let page = crate::support::metrics::scrape(mport).await;
    let labels = [
        ("schema", env.db.as_str()),
        ("table", "orders_events"),
        ("group", "g"),
    ];
    let get = |name: &str| crate::support::metrics::sample(&page, name, &labels);
    assert_eq!(
        get("msgproxy_stream_events_sent_total"),
        Some(3.0),
        "{page}"
    );
    assert_eq!(get("msgproxy_stream_events_redelivered_total"), Some(1.0));
    assert_eq!(get("msgproxy_stream_events_acked_total"), Some(2.0));
    assert_eq!(get("msgproxy_stream_group_in_flight"), Some(0.0));
    assert_eq!(get("msgproxy_stream_group_serving"), Some(1.0));
    assert_eq!(
        get("msgproxy_stream_group_position"),
        Some((first[1].id + 1) as f64)
    );
    s.close();
}

#[tokio::test]
async fn blackhole_table_with_topic_filters_the_mmq_example() {
    let env = Env::new("evs_blackhole").await;
    // Debian's MariaDB ships BLACKHOLE as a plugin; installed once per server (an error when it
    // already is).
    {
        let mut c = env.direct_conn().await;
        let _ = exec(&mut c, "INSTALL SONAME 'ha_blackhole'").await;
        let _ = c.disconnect().await;
    }
    env.ddl("CREATE SEQUENCE msg_sequence START WITH 1 INCREMENT BY 1 CACHE 1000")
        .await;
    env.ddl(
        "CREATE TABLE message_queue (msg_id BIGINT NOT NULL, topic VARCHAR(255) NOT NULL, \
         payload JSON NOT NULL, created_at DATETIME(6) DEFAULT NOW(6)) ENGINE=BLACKHOLE \
         COMMENT 'msgproxy_stream'",
    )
    .await;
    let mut shipping = stream(
        &env,
        "msg_id, topic FROM message_queue GROUP 'shipping' WHERE topic = 'order.created'",
    )
    .await;
    let mut audit = stream(&env, "* FROM message_queue GROUP 'audit'").await;
    for topic in ["order.created", "user.profile.updated", "order.created"] {
        env.direct(&format!(
            "INSERT INTO message_queue (msg_id, topic, payload) VALUES (NEXT VALUE FOR msg_sequence, '{topic}', \
             JSON_OBJECT('user_id', 42, 'timestamp', NOW(6)))"
        ))
        .await;
    }
    let all = audit.recv_n(3, secs(10)).await;
    let topics: Vec<String> = all.iter().map(|m| value_str(&m.values[2])).collect();
    assert_eq!(
        topics,
        ["order.created", "user.profile.updated", "order.created"]
    );
    let filtered = shipping.recv_n(2, secs(10)).await;
    let msg_ids: Vec<String> = filtered.iter().map(|m| value_str(&m.values[1])).collect();
    assert_eq!(msg_ids, ["1", "3"]);
    shipping
        .expect_quiet(secs(1), "the filter skips other topics")
        .await;
    // BLACKHOLE stores nothing; msgproxy wrote nothing to it either.
    let mut c = env.direct_conn().await;
    let n: Option<u64> =
        mysql_async::prelude::Queryable::query_first(&mut c, "SELECT COUNT(*) FROM message_queue")
            .await
            .unwrap();
    assert_eq!(n, Some(0));
    audit.close();
    shipping.close();
}

#[tokio::test]
async fn a_100000_row_transaction_arrives_whole_and_in_order() {
    // 200,000 row images in the binlog: on a server of its own, not to slow the others.
    let env = Env::private("evs_bigtx").await;
    env.ddl(&orders_events(",batch_size=1000,max_unacked=200000"))
        .await;
    let mut s = stream(&env, "id FROM orders_events GROUP 'big'").await;
    env.direct(
        "INSERT INTO orders_events (topic, payload) \
         SELECT 'bulk', '{}' FROM seq_1_to_100000",
    )
    .await;
    let started = std::time::Instant::now();
    let got = s.recv_n(100_000, secs(120)).await;
    eprintln!(
        "a 100,000-row transaction: committed to the last event received in {:?}",
        started.elapsed()
    );
    let event_ids = ids(&got);
    assert!(event_ids.windows(2).all(|w| w[0] < w[1]), "in commit order");
    let rows = row_ids(&got);
    assert!(
        rows.windows(2).all(|w| w[0] + 1 == w[1]),
        "every row, in insert order"
    );
    // One transaction: one GTID seq_no, ordinals 0..100000.
    let seq = event_ids[0] >> 24;
    assert!(event_ids.iter().all(|id| id >> 24 == seq));
    assert_eq!(event_ids[99_999] - event_ids[0], 99_999);
    s.close();
    env.server.stop();
}

#[tokio::test]
async fn live_groups_share_one_binlog_reader_and_a_group_behind_catches_up_to_it() {
    // The server's binlog dump threads are counted: a server of its own.
    let env = Env::private("evs_shared").await;
    // A small read-ahead (max_unacked 4, batch_size 2: at most 8 events held) makes the slow
    // group below leave the shared reader and come back, again and again.
    env.ddl(&orders_events(",max_unacked=4,batch_size=2")).await;
    let early = insert_direct(&env, 20, 5, "old").await;
    let mut live = Vec::new();
    for g in 0..4 {
        live.push(stream(&env, &format!("* FROM orders_events GROUP 'live{g}'")).await);
    }
    let mut replay = stream(&env, "* FROM orders_events GROUP 'replay' START EARLIEST").await;
    let written = insert_direct(&env, 40, 1, "new").await;
    let mut acks = env.proxy_conn().await;
    // Every group gets every event in commit order, acking as it goes (4 held at most).
    for (g, s) in live.iter_mut().enumerate() {
        let got = recv_acking(s, &mut acks, &format!("live{g}"), written.len()).await;
        assert_eq!(
            row_ids(&got),
            written,
            "group live{g}: every event in order"
        );
    }
    let all = [early.clone(), written.clone()].concat();
    let got = recv_acking(&mut replay, &mut acks, "replay", all.len()).await;
    assert_eq!(
        row_ids(&got),
        all,
        "the replaying group: every event in order"
    );
    // Caught up, every group is on the table's shared reader: the server serves msgproxy two
    // binlog dump threads (its message-table watcher's and the shared reader's), not six.
    let mut c = env.direct_conn().await;
    let deadline = tokio::time::Instant::now() + secs(30);
    loop {
        let dumps: Option<u64> = mysql_async::prelude::Queryable::query_first(
            &mut c,
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'",
        )
        .await
        .unwrap();
        if dumps.unwrap_or(0) <= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{dumps:?} binlog dump threads: the groups did not hand over to one shared reader\n{}",
            env.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // On the shared reader, every group still gets everything, in order.
    let more = insert_direct(&env, 30, 3, "more").await;
    for (g, s) in live.iter_mut().enumerate() {
        let got = recv_acking(s, &mut acks, &format!("live{g}"), more.len()).await;
        assert_eq!(row_ids(&got), more, "group live{g} on the shared reader");
    }
    let got = recv_acking(&mut replay, &mut acks, "replay", more.len()).await;
    assert_eq!(
        row_ids(&got),
        more,
        "the replaying group on the shared reader"
    );
    for s in live {
        s.close();
    }
    replay.close();
    let _ = c.disconnect().await;
    env.server.stop();
}

/// `n` events of `group`'s stream `s`, each batch acked as it comes (the group holds at most
/// `max_unacked` per stream).
async fn recv_acking(
    s: &mut Stream,
    acks: &mut mysql_async::Conn,
    group: &str,
    n: usize,
) -> Vec<Msg> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + secs(30);
    while got.len() < n && tokio::time::Instant::now() < deadline {
        let batch = s.drain(Duration::from_millis(200)).await;
        if batch.is_empty() {
            continue;
        }
        ack(acks, "orders_events", group, &ids(&batch)).await;
        got.extend(batch);
    }
    got
}
