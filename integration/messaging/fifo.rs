//! Ordered delivery per key (MESSAGING.md §11, `vt_group_col`): with several streams on two
//! proxies, never two messages of one key in flight, each key's messages in id order through
//! timeouts and redeliveries, a dead head releases its key, a busy key does not hold back a quiet
//! one, and the table needs its index.

use std::collections::BTreeMap;

use mysql_async::Value;

use super::harness::{ack, exec, secs, Env, Msg, Stream};
use crate::support::{wait_for_log, Failure};

fn table_sql(name: &str, ack_wait: u32, extra: &str, index: bool) -> String {
    format!(
        "create table {name}(id bigint auto_increment primary key, time_next bigint, epoch bigint, \
         time_acked bigint, k varchar(10), payload varchar(20){}) comment 'vitess_message,\
         vt_ack_wait={ack_wait},vt_min_backoff=0,vt_purge_after=60,vt_batch_size=4,vt_cache_size=1000,\
         vt_poller_interval=0.5,vt_group_col=k{extra}'",
        if index { ", index k_fifo(k, id)" } else { "" }
    )
}

fn key_of(m: &Msg) -> String {
    match m.values.get(1) {
        Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::NULL) => "NULL".into(),
        other => panic!("no key in {other:?}"),
    }
}

#[tokio::test]
async fn one_message_per_key_in_flight_in_id_order_across_two_proxies() {
    let env = Env::new("msg_fifo").await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    // An ack wait of 3 s: the test acks each message at once, and a loaded machine must not
    // turn that into redeliveries.
    env.ddl(&table_sql("q", 3, "", true)).await;
    let proxy2 = env.second_proxy();
    wait_for_log(&proxy2, "binlog: following from", 15).await;
    let mut streams: Vec<Stream> = Vec::new();
    for p in [&env.proxy, &proxy2, &env.proxy, &proxy2] {
        streams.push(env.stream_on(p, "q").await);
    }
    // Three busy keys of 8 messages each, interleaved; then a quiet key of one.
    let mut rows = Vec::new();
    for i in 0..8 {
        for k in ["a", "b", "c"] {
            rows.push(format!("('{k}', '{k}{i}')"));
        }
    }
    env.via_proxy(&format!(
        "insert into q(k, payload) values {}",
        rows.join(", ")
    ))
    .await;
    env.via_proxy("insert into q(k, payload) values ('quiet', 'q0'), (NULL, 'free')")
        .await;
    let mut acker = env.proxy_conn().await;
    let mut in_flight: BTreeMap<String, i64> = BTreeMap::new();
    let mut delivered: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut abandoned = false;
    let mut quiet_at = None;
    let started = std::time::Instant::now();
    let mut acked = 0;
    while acked < 26 && started.elapsed() < secs(60.0) {
        let mut arrived = Vec::new();
        for s in streams.iter_mut() {
            arrived.extend(s.drain(secs(0.05)).await);
        }
        // In the order the test received them, whichever stream.
        arrived.sort_by_key(|m| m.at);
        for m in arrived {
            let k = key_of(&m);
            if k == "NULL" {
                acked += ack(&mut acker, "q", &[m.id]).await;
                continue;
            }
            if let Some(other) = in_flight.get(&k) {
                if *other != m.id {
                    problems.push(format!(
                        "key {k}: {} sent while {other} was in flight",
                        m.id
                    ));
                }
            }
            let sent = delivered.entry(k.clone()).or_default();
            if sent.last().is_some_and(|last| *last > m.id) {
                problems.push(format!("key {k}: {} sent after {sent:?}", m.id));
            }
            sent.push(m.id);
            if k == "quiet" {
                quiet_at = Some(started.elapsed());
            }
            // The first message of key a is "lost" by its consumer: it must come back (after
            // its ack wait), still first, with nothing of key a sent meanwhile.
            if k == "a" && !abandoned {
                abandoned = true;
                in_flight.insert(k, m.id);
                continue;
            }
            in_flight.insert(k.clone(), m.id);
            // 0 when a redelivery overtook a late ack (at least once): still in order.
            acked += ack(&mut acker, "q", &[m.id]).await;
            in_flight.remove(&k);
        }
    }
    assert!(
        problems.is_empty() && acked == 26,
        "{problems:#?}\nacked {acked} of 26: {delivered:?}\n{}",
        env.log()
    );
    let a = &delivered["a"];
    assert_eq!(a.first(), a.get(1), "the lost head came back first: {a:?}");
    let quiet_at = quiet_at.expect("the quiet key's message came");
    assert!(
        quiet_at < secs(5.0),
        "a busy key must not hold back a quiet one: {quiet_at:?}"
    );
    let _ = acker.disconnect().await;
}

#[tokio::test]
async fn a_dead_head_releases_its_key() {
    let env = Env::new("msg_fifo_dead").await;
    env.ddl(&table_sql("q", 1, ",vt_max_attempts=1", true))
        .await;
    env.via_proxy("insert into q(k, payload) values ('a', 'poison'), ('a', 'next')")
        .await;
    let mut s = env.stream("q").await;
    let first = s.recv(secs(5.0)).await.expect("the head");
    assert_eq!(first.values.get(2), Some(&Value::Bytes(b"poison".to_vec())));
    // Not acked: dead after its ack wait, and then the next of its key is the head.
    let next = s
        .recv(secs(6.0))
        .await
        .expect("the next message of the key");
    assert_eq!(next.values.get(2), Some(&Value::Bytes(b"next".to_vec())));
    assert_eq!(
        env.state("q", first.id).await.time_next,
        Some(i64::MAX),
        "the head is dead"
    );
}

#[tokio::test]
async fn a_group_column_without_its_index_is_an_error() {
    let env = Env::new("msg_fifo_index").await;
    env.ddl(&table_sql("q", 1, "", false)).await;
    let mut c = env.proxy_conn().await;
    match exec(&mut c, "STREAM * FROM q").await {
        Err(Failure::Server {
            code: 1347,
            message,
            ..
        }) if message.contains("ADD INDEX k_fifo (k, id)") => {}
        other => panic!("{other:?}"),
    }
    env.ddl("alter table q add index k_fifo(k)").await;
    assert!(
        super::harness::Stream::open(env.proxy.port(), &env.db, "STREAM * FROM q")
            .await
            .is_ok(),
        "an index on (k) serves too: InnoDB ends it with the primary key"
    );
    let _ = c.disconnect().await;
}

/// The poller walks the groups a page (1,000) at a time from where it stopped: groups past the
/// first page, and past groups with nothing pending (all acked), come in turn too.
#[tokio::test]
async fn groups_past_the_first_page_are_delivered_too() {
    let env = Env::new("msg_fifo_pages").await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    env.ddl(&table_sql("q", 30, "", true)).await;
    // 1,200 groups whose messages are acked (never purged: acked "in the future"), then 1,300
    // groups of one pending message each.
    env.direct(&format!(
        "insert into q(k, payload, time_acked) select concat('a', lpad(seq, 5, '0')), 'done', {} \
         from seq_1_to_1200",
        super::harness::now_ns() + 3600 * super::harness::SEC
    ))
    .await;
    env.direct(
        "insert into q(k, payload) select concat('b', lpad(seq, 5, '0')), 'todo' from seq_1_to_1300",
    )
    .await;
    // (INSERT ... SELECT leaves gaps in AUTO_INCREMENT ids: ask which they are.)
    let pending: Vec<i64> = env
        .states("q")
        .await
        .into_iter()
        .filter(|(_, s)| s.time_acked.is_none())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(pending.len(), 1300);
    let mut s = env.stream("q").await;
    // Generous: 325 claims of 4 on a machine the other tests load too.
    let got = s.recv_n(1300, secs(60.0)).await;
    let ids: Vec<i64> = got.iter().map(|m| m.id).collect();
    super::harness::assert_each_once(&ids, pending, "every pending group's head, once");
    // None acked (ack wait 30 s): every group has its message out.
    super::work_queue::eventually(secs(5.0), "Keys_in_flight = 1300", || async {
        let keys = super::work_queue::show_row(&env, "q").await["Keys_in_flight"].clone();
        (keys != "1300").then_some(keys)
    })
    .await;
}
