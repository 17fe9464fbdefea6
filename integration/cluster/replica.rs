//! A primary and a GTID replica behind one `--backend`: the primary dies, the test promotes the
//! replica as a failover tool would, and msgproxy follows (issue 22).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::harness::{run, scalar, Kind, Servers};
use crate::messaging::harness::{ack, connect, ids, Stream};
use crate::support::{eventually, Proxy};

const TABLE: &str = "create table q(id bigint primary key, time_next bigint default 0, \
    epoch bigint, time_acked bigint, message varchar(64), index next_idx(time_next, epoch)) \
    comment 'vitess_message,vt_ack_wait=30,vt_purge_after=600,vt_batch_size=10,\
    vt_cache_size=1000,vt_poller_interval=1'";

/// Kill the primary, promote the replica: msgproxy serves again within 5 s of the new primary
/// being writable, every message the new primary holds unacked is delivered, and no message
/// acked before the failover (and replicated) is sent again.
#[tokio::test]
async fn failover_to_a_promoted_replica() {
    let servers = Servers::start(Kind::Replica);
    let proxy = Proxy::start(&servers.backend, &[], None);
    let mut conn = connect(proxy.port(), "test").await;
    run(&mut conn, TABLE).await;
    run(
        &mut conn,
        "insert into q(id, message) select seq, concat('m', seq) from seq_1_to_20",
    )
    .await;
    let mut stream = Stream::open(proxy.port(), "test", "STREAM * FROM q")
        .await
        .expect("a stream through msgproxy");
    let first = stream.recv_n(20, Duration::from_secs(10)).await;
    let acked: BTreeSet<i64> = ids(&first).into_iter().collect();
    assert_eq!(acked, (1..=20).collect(), "the first 20 messages");
    assert_eq!(ack(&mut conn, "q", &ids(&first)).await, 20);
    stream.close();
    // Twenty more, never sent: due on whichever server holds them.
    run(
        &mut conn,
        "insert into q(id, message) select seq, concat('m', seq) from seq_21_to_40",
    )
    .await;
    drop(conn);

    // The replica has everything (a failover tool would promote the most advanced replica;
    // what it lacks is the database's loss, docs/CLUSTERS.md).
    servers.replica_caught_up().await;

    servers.kill(1);
    servers.run(&["promote"]);
    let writable = Instant::now();

    // msgproxy moves by itself: a client retries as it would after any lost connection.
    let mut stream = None;
    let mut last_error = String::new();
    while writable.elapsed() < Duration::from_secs(15) {
        match Stream::open(proxy.port(), "test", "STREAM * FROM q").await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_error = format!("{e:?}"),
        }
        // Retry pace until the 15 s above, not a wait for something.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut stream = stream.unwrap_or_else(|| {
        panic!(
            "no stream through msgproxy 15 s after the promotion: {last_error}\n{}",
            proxy.log()
        )
    });
    let second = stream.recv_n(20, Duration::from_secs(15)).await;
    let served_after = second[0].at.saturating_duration_since(writable);
    assert!(
        served_after <= Duration::from_secs(5),
        "the first message came {served_after:?} after the new primary was writable\n{}",
        proxy.log()
    );
    // A figure for docs/CLUSTERS.md.
    eprintln!("replica: first message {served_after:?} after the promotion");
    let got: BTreeSet<i64> = ids(&second).into_iter().collect();
    assert_eq!(
        got,
        (21..=40).collect(),
        "the unacked messages the new primary holds, each once (the acked ones never)"
    );

    // Writes go to the new primary too, and the binlog watcher follows it (by GTID).
    let mut conn = connect(proxy.port(), "test").await;
    let port: u16 = scalar(&mut conn, "SELECT @@port").await;
    assert_eq!(port, servers.port(2), "sessions go to the promoted replica");
    assert_eq!(ack(&mut conn, "q", &ids(&second)).await, 20);
    run(&mut conn, "insert into q(id, message) values (41, 'after')").await;
    let after = stream.recv_n(1, Duration::from_secs(10)).await;
    assert_eq!(ids(&after), [41]);
    assert_eq!(ack(&mut conn, "q", &[41]).await, 1);
    let followed = eventually(10, async || {
        proxy.log().contains("binlog: resuming on") && proxy.log().contains("following again")
    })
    .await;
    assert!(
        followed,
        "the binlog watcher did not resume on the new primary\n{}",
        proxy.log()
    );
    // Every message is acked on the new primary; nothing came twice meanwhile.
    let mut direct = servers.direct(2).await;
    let unacked: i64 = scalar(
        &mut direct,
        "SELECT COUNT(*) FROM q WHERE time_acked IS NULL",
    )
    .await;
    assert_eq!(unacked, 0);
    stream
        .expect_quiet(Duration::from_secs(2), "every message was acked")
        .await;
    stream.close();
}
