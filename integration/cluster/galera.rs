//! A 3-node Galera cluster with msgproxy on two of its nodes (issue 22): streams and acks
//! through both, claims of the same rows on two nodes settled by certification, and a node
//! killed and rejoined under a proxy that then moves to the next node.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql_async::Conn;

use super::harness::{galera_available, run, scalar, Kind, Servers};
use crate::messaging::harness::{ack, connect, exec, Msg, Stream};
use crate::support::Proxy;

const TABLE: &str = "create table q(id bigint primary key, time_next bigint default 0, \
    epoch bigint, time_acked bigint, message varchar(64), index next_idx(time_next, epoch)) \
    comment 'vitess_message,vt_ack_wait=60,vt_purge_after=600,vt_batch_size=5,\
    vt_cache_size=1000,vt_poller_interval=1'";

/// Two consumers, one through each proxy, each acking what it got on its own proxy.
struct Consumer {
    proxy_port: u16,
    stream: Stream,
    conn: Conn,
}

impl Consumer {
    async fn open(proxy: &Proxy) -> Consumer {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Right after a node loss the proxy may still be moving: retry as a client would.
            match Stream::open(proxy.port(), "test", "STREAM * FROM q").await {
                Ok(stream) => {
                    return Consumer {
                        proxy_port: proxy.port(),
                        stream,
                        conn: connect(proxy.port(), "test").await,
                    }
                }
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    // Retry pace until the deadline above, not a wait for something.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no stream through {}: {e:?}\n{}", proxy.port(), proxy.log()),
            }
        }
    }

    /// Whatever arrived, acked at once on this consumer's proxy.
    async fn take(&mut self, wait: Duration) -> Vec<Msg> {
        let got = match self.stream.recv_or_end(wait).await {
            Ok(Some(first)) => {
                let mut got = vec![first];
                got.extend(self.stream.ready().await);
                got
            }
            Ok(None) => return Vec::new(),
            Err(e) => panic!("stream through {} ended: {e}", self.proxy_port),
        };
        let ids: Vec<i64> = got.iter().map(|m| m.id).collect();
        ack(&mut self.conn, "q", &ids).await;
        got
    }
}

/// Inserts `ids` through `conn` (one row each, as producers do), retrying a statement that
/// meets the cluster's reconfiguration.
async fn produce(conn: &mut Conn, ids: std::ops::RangeInclusive<i64>) {
    for id in ids {
        let sql = format!("insert into q(id, message) values ({id}, 'm{id}')");
        let mut tries = 0;
        while let Err(e) = exec(conn, &sql).await {
            tries += 1;
            assert!(tries < 50, "{sql}: {e:?}");
            // Retry pace while the cluster reconfigures (50 tries), not a wait for something.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Until every id of `want` was delivered (by either consumer): each exactly once.
async fn deliver_all(
    consumers: &mut [&mut Consumer],
    want: std::ops::RangeInclusive<i64>,
    seen: &mut BTreeMap<i64, usize>,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !want.clone().all(|id| seen.contains_key(&id)) {
        assert!(
            Instant::now() < deadline,
            "not delivered within 30 s: {:?}",
            want.clone()
                .filter(|id| !seen.contains_key(id))
                .collect::<Vec<_>>()
        );
        for c in consumers.iter_mut() {
            for m in c.take(Duration::from_millis(100)).await {
                *seen.entry(m.id).or_insert(0) += 1;
            }
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "delivered more than once within the ack window: {twice:?}"
    );
}

#[tokio::test]
async fn two_proxies_on_two_nodes_and_a_node_killed_and_rejoined() {
    if let Err(why) = galera_available() {
        eprintln!("SKIPPED two_proxies_on_two_nodes_and_a_node_killed_and_rejoined: {why}");
        return;
    }
    let servers = Servers::start(Kind::Galera);
    // Proxy A prefers node 1, proxy B node 2; both know every node.
    let a = Proxy::start(&servers.backend, &[], None);
    let b_backend = format!("{},{},{}", servers.url(2), servers.url(3), servers.url(1));
    let b = Proxy::start(&b_backend, &[], None);
    let mut setup = connect(a.port(), "test").await;
    run(&mut setup, TABLE).await;
    let mut ca = Consumer::open(&a).await;
    let mut cb = Consumer::open(&b).await;
    let port_a: u16 = scalar(&mut ca.conn, "SELECT @@port").await;
    let port_b: u16 = scalar(&mut cb.conn, "SELECT @@port").await;
    assert_eq!((port_a, port_b), (servers.port(1), servers.port(2)));

    // Producers on both proxies; both consumers claim the same rows on two nodes: Galera's
    // certification lets one claim of each row commit, and the other sends nothing.
    let mut seen = BTreeMap::new();
    let mut pa = connect(a.port(), "test").await;
    let mut pb = connect(b.port(), "test").await;
    produce(&mut pa, 1..=30).await;
    produce(&mut pb, 31..=60).await;
    deliver_all(&mut [&mut ca, &mut cb], 1..=60, &mut seen).await;

    // Node 1 dies: proxy A moves to node 2 (the next in its list).
    servers.kill(1);
    let killed = Instant::now();
    ca.stream
        .recv_or_end(Duration::from_secs(10))
        .await
        .err()
        .unwrap_or_else(|| {
            panic!(
                "proxy A's stream on the killed node did not end\n{}",
                a.log()
            )
        });
    let mut ca = Consumer::open(&a).await;
    let port_a: u16 = scalar(&mut ca.conn, "SELECT @@port").await;
    assert_ne!(port_a, servers.port(1), "proxy A still on the killed node");
    let mut pa = connect(a.port(), "test").await;
    produce(&mut pa, 61..=61).await;
    // A figure for docs/CLUSTERS.md: the surviving nodes hold writes for evs.suspect_timeout.
    eprintln!(
        "galera: proxy A on port {port_a}, its first write committed {:?} after the kill",
        killed.elapsed()
    );
    produce(&mut pa, 62..=80).await;
    // The whole engine moved: its binlog watcher resumed on the new node by GTID.
    let resumed = crate::support::eventually(10, async || {
        a.log().contains("binlog: resuming on") && !a.log().contains("no GTID to resume from")
    })
    .await;
    assert!(
        resumed,
        "proxy A's binlog watcher did not resume by GTID\n{}",
        a.log()
    );
    deliver_all(&mut [&mut ca, &mut cb], 61..=80, &mut seen).await;

    // Node 1 rejoins (state transfer); it has every row, and nothing is delivered twice.
    servers.run(&["start-node", "1"]);
    produce(&mut pb, 81..=90).await;
    deliver_all(&mut [&mut ca, &mut cb], 81..=90, &mut seen).await;
    let mut n1 = servers.direct(1).await;
    let total: i64 = scalar(&mut n1, "SELECT COUNT(*) FROM q").await;
    assert_eq!(total, 90, "the rejoined node's rows\n{}", servers.log(1));
    // Every ack was applied on the whole cluster (read on the rejoined node, after a sync wait).
    run(&mut n1, "SET SESSION wsrep_sync_wait = 1").await;
    let unacked: i64 = scalar(&mut n1, "SELECT COUNT(*) FROM q WHERE time_acked IS NULL").await;
    assert_eq!(unacked, 0, "rows not acked on the cluster");
    let claims: i64 = scalar(&mut n1, "SELECT SUM(epoch) FROM q").await;
    assert_eq!(claims, 90, "each row claimed exactly once");
    // Figures for docs/CLUSTERS.md: claims (and acks) that lost certification on some node
    // (node 1's counter restarted with it).
    let mut conflicts = 0;
    for i in 1..=3 {
        let mut node = servers.direct(i).await;
        let failures: String = scalar(
            &mut node,
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME = 'wsrep_local_cert_failures'",
        )
        .await;
        conflicts += failures.parse::<u64>().unwrap_or(0);
    }
    eprintln!("galera: {conflicts} certification failures counted by the nodes (90 messages)");
}
