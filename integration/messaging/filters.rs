//! Streams that choose (MESSAGING.md §12): `STREAM cols FROM t WHERE condition`. Each stream gets
//! only matching messages, the others stay for other streams, overlapping filters share without
//! duplicates, a filter matching nothing gets nothing (and costs the others nothing), and a
//! condition the server rejects ends the `STREAM` with the server's own error.

use std::collections::BTreeSet;

use super::harness::{ack, exec, secs, Env, Msg, Stream};
use crate::support::{wait_for_log, Failure};

async fn queue(db: &str) -> Env {
    let env = Env::new(db).await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    env.ddl(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
         topic varchar(20), tenant int, payload varchar(50), index by_tenant(tenant)) \
         comment 'vitess_message,vt_ack_wait=1,vt_purge_after=60,vt_batch_size=3,\
         vt_cache_size=1000,vt_poller_interval=1'",
    )
    .await;
    env
}

async fn open(env: &Env, sql: &str) -> Stream {
    Stream::open(env.proxy.port(), &env.db, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}\n{}", env.log()))
}

/// The tenant of message `id` as the test inserts them.
fn tenant(id: i64) -> i64 {
    id % 4 + 1
}

#[tokio::test]
async fn overlapping_filters_share_and_a_filter_matching_nothing_gets_nothing() {
    let env = queue("msg_filters").await;
    let mut one_two = open(&env, "STREAM id, tenant FROM q WHERE tenant IN (1, 2)").await;
    assert_eq!(one_two.column_names(), ["id", "tenant"]);
    let mut two_three = open(&env, "STREAM * FROM q WHERE tenant IN (2, 3)").await;
    let mut nothing = open(&env, "STREAM payload, id FROM q WHERE topic = 'none'").await;
    assert_eq!(nothing.column_names(), ["payload", "id"]);
    let mut all = env.stream("q").await;
    let values: Vec<String> = (1..=40)
        .map(|i| format!("({i}, 'some', {}, 'p{i}')", tenant(i)))
        .collect();
    env.via_proxy(&format!(
        "insert into q(id, topic, tenant, payload) values {}",
        values.join(", ")
    ))
    .await;
    let mut got: Vec<(usize, Msg)> = Vec::new();
    let deadline = std::time::Instant::now() + secs(10.0);
    while got.len() < 40 && std::time::Instant::now() < deadline {
        for (i, s) in [&mut one_two, &mut two_three, &mut all]
            .into_iter()
            .enumerate()
        {
            for m in s.drain(secs(0.1)).await {
                got.push((i, m));
            }
        }
    }
    let mut c = env.proxy_conn().await;
    let every: Vec<i64> = got.iter().map(|(_, m)| m.id).collect();
    assert_eq!(
        ack(&mut c, "q", &every).await,
        40,
        "{every:?}\n{}",
        env.log()
    );
    super::harness::assert_each_once(&every, 1..=40, "each message to one stream, once");
    for (stream, m) in &got {
        let allowed: &[i64] = match stream {
            0 => &[1, 2],
            1 => &[2, 3],
            _ => &[1, 2, 3, 4],
        };
        assert!(
            allowed.contains(&tenant(m.id)),
            "stream {stream} got {} of tenant {}",
            m.id,
            tenant(m.id)
        );
    }
    let filtered: BTreeSet<usize> = got.iter().map(|(s, _)| *s).collect();
    assert!(
        filtered.contains(&0) && filtered.contains(&1),
        "the filtered streams got their share: {filtered:?}"
    );
    nothing
        .expect_quiet(secs(1.0), "no message matches its condition")
        .await;

    // Not acked within the ack wait: it comes back to a stream it matches.
    env.via_proxy("insert into q(id, topic, tenant, payload) values (100, 'only', 9, 'x')")
        .await;
    let mut nine = open(&env, "STREAM id FROM q WHERE tenant = 9").await;
    drop(all);
    let first = nine.recv(secs(5.0)).await.expect("its message");
    assert_eq!(first.id, 100);
    let again = nine
        .recv(secs(6.0))
        .await
        .expect("sent again after the ack wait");
    assert_eq!(again.id, 100);
    assert_eq!(ack(&mut c, "q", &[100]).await, 1);
    nine.expect_quiet(secs(2.5), "acked").await;
    let _ = c.disconnect().await;
}

#[tokio::test]
async fn a_condition_the_server_rejects_ends_the_stream_with_its_error() {
    let env = queue("msg_filters_bad").await;
    for (sql, code) in [
        ("STREAM * FROM q WHERE nosuch = 1", 1054),
        ("STREAM id, nosuch FROM q", 1054),
        ("STREAM * FROM q WHERE tenant = 1 ORDER BY id", 1064),
        ("STREAM tenant, payload FROM q", 1347),
    ] {
        match Stream::open(env.proxy.port(), &env.db, sql).await {
            Err(Failure::Server { code: got, .. }) if got == code => {}
            Err(other) => panic!("{sql}: {other:?}, expected {code}"),
            Ok(_) => panic!("{sql}: the stream started, expected {code}"),
        }
    }
    // The session goes on after the error.
    let mut c = env.proxy_conn().await;
    assert!(exec(&mut c, "STREAM * FROM q WHERE (").await.is_err());
    assert_eq!(exec(&mut c, "DO 1").await.expect("DO 1"), 0);
    let _ = c.disconnect().await;
}
