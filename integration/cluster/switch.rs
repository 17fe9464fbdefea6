//! Which server msgproxy uses among several plain servers (no replication needed to see it):
//! the first usable one, and another when that one stops being usable (issue 22).

use std::time::Duration;

use super::harness::{run, scalar};
use crate::messaging::harness::{ack, connect, ids, Stream};
use crate::support::metrics::{sample, scrape};
use crate::support::process::free_port;
use crate::support::{eventually, MariaDb, Proxy};

/// A first server that cannot be reached at start is passed over.
#[tokio::test]
async fn an_unreachable_first_server_is_passed_over() {
    let server = MariaDb::shared();
    let dead = format!("mysql://root@127.0.0.1:{}/test", free_port());
    let proxy = Proxy::start(&format!("{dead},{}", server.backend_url()), &[], None);
    let mut conn = connect(proxy.port(), "test").await;
    let port: u16 = scalar(&mut conn, "SELECT @@port").await;
    assert_eq!(port, server.port());
}

/// `read_only` decides: the proxy starts on the writable server; when that one turns read-only
/// and the other writable (a switchover), new sessions, streams and the engine move while a
/// session already open stays where it was opened.
#[tokio::test]
async fn read_only_decides_and_a_switch_moves_new_sessions() {
    let one = MariaDb::start();
    let two = MariaDb::start();
    one.sql("SET GLOBAL read_only = ON");
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let proxy = Proxy::start(
        &format!("{},{}", one.backend_url(), two.backend_url()),
        &["--metrics-listen", &listen],
        None,
    );
    let mut old = connect(proxy.port(), "test").await;
    let port: u16 = scalar(&mut old, "SELECT @@port").await;
    assert_eq!(
        port,
        two.port(),
        "the writable server is used, not the first"
    );

    // The same message table on both (no replication here: the test writes each).
    let table = "create table q(id bigint primary key, time_next bigint default 0, epoch bigint, \
        time_acked bigint, message varchar(64), index next_idx(time_next, epoch)) \
        comment 'vitess_message,vt_ack_wait=30,vt_purge_after=600,vt_batch_size=10,\
        vt_cache_size=1000,vt_poller_interval=1'";
    one.sql(&format!("USE test; {table}"));
    run(&mut old, table).await;

    two.sql("SET GLOBAL read_only = ON");
    one.sql("SET GLOBAL read_only = OFF");
    let moved = eventually(10, async || {
        let mut conn = connect(proxy.port(), "test").await;
        scalar::<u16>(&mut conn, "SELECT @@port").await == one.port()
    })
    .await;
    assert!(
        moved,
        "new sessions did not move to the writable server\n{}",
        proxy.log()
    );
    let still: u16 = scalar(&mut old, "SELECT @@port").await;
    assert_eq!(still, two.port(), "an open session stays on its server");

    // The engine moved too: a row written straight to the new server is streamed from it.
    one.sql("INSERT INTO test.q(id, message) VALUES (7, 'on one')");
    let mut stream = Stream::open(proxy.port(), "test", "STREAM * FROM q")
        .await
        .expect("a stream through msgproxy");
    let got = stream.recv_n(1, Duration::from_secs(10)).await;
    assert_eq!(ids(&got), [7]);
    let mut conn = connect(proxy.port(), "test").await;
    assert_eq!(ack(&mut conn, "q", &[7]).await, 1);
    stream.close();
    assert!(
        proxy
            .log()
            .contains(&format!("switching backend from 127.0.0.1:{}", two.port())),
        "{}",
        proxy.log()
    );
    let page = scrape(metrics_port).await;
    let one_label = format!("127.0.0.1:{}", one.port());
    let two_label = format!("127.0.0.1:{}", two.port());
    // Two moves: off the read-only first server at start, then back to it.
    assert_eq!(
        sample(&page, "msgproxy_backend_switches_total", &[]),
        Some(2.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, "msgproxy_backend_in_use", &[("backend", &one_label)]),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, "msgproxy_backend_usable", &[("backend", &two_label)]),
        Some(0.0),
        "{page}"
    );
    one.stop();
    two.stop();
}
