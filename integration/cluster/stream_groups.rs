//! Event-stream groups across servers (docs/STREAMS.md, "Moving with the backend"): a group
//! saved by a proxy on one Galera node taken over by a proxy on another, a group that follows
//! a primary→replica promotion by itself, and a promoted replica that lacks what the group has
//! done (the clear error; `SEEK` recovers). Event ids are GTID seq_nos, so they are the same on
//! every server: the tests compare them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::harness::{galera_available, run, Kind, Servers};
use crate::messaging::harness::{connect, exec, Msg, Stream};
use crate::support::{eventually, Proxy};

const TABLE: &str = "CREATE TABLE ev (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(32)) \
    COMMENT 'msgproxy_stream,ack_wait=60'";
const GROUP: &str = "STREAM * FROM ev GROUP 'g'";

/// The row id (second column) of each event, by event id.
fn by_event(msgs: &[Msg]) -> BTreeMap<i64, i64> {
    msgs.iter()
        .map(|m| (m.id, crate::messaging::harness::value_i64(&m.values[1])))
        .collect()
}

fn rows(msgs: &[Msg]) -> BTreeSet<i64> {
    by_event(msgs).into_values().collect()
}

/// Rows `ids`, one transaction each, written straight to `conn`'s server (explicit ids: Galera
/// spaces auto-increment values by its node count).
async fn insert(conn: &mut Conn, ids: std::ops::RangeInclusive<i64>, tag: &str) {
    for id in ids {
        run(
            conn,
            &format!("INSERT INTO ev (id, v) VALUES ({id}, '{tag}')"),
        )
        .await;
    }
}

async fn ack(port: u16, msgs: &[Msg]) {
    let mut c = connect(port, "test").await;
    let list: Vec<String> = msgs.iter().map(|m| m.id.to_string()).collect();
    let sql = format!("ACK ev GROUP 'g' {}", list.join(", "));
    let n = exec(&mut c, &sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    assert_eq!(n as usize, msgs.len(), "{sql}");
}

/// Waits until the group's row on `conn`'s server has its floor past `newest` and carries the
/// GTID state to move by: what another server's proxy resumes from.
async fn saved_with_gtid(conn: &mut Conn, newest: i64, proxy: &Proxy) {
    let saved = eventually(30, async || {
        let row: Option<(u64, Option<String>, Option<String>)> = conn
            .query_first(
                "SELECT floor, resume_gtid, done_gtid FROM test.msgproxy_stream_groups \
                 WHERE table_schema = 'test' AND table_name = 'ev' AND group_name = 'g'",
            )
            .await
            .ok()
            .flatten();
        matches!(row, Some((floor, Some(_), Some(_))) if floor > newest as u64)
    })
    .await;
    assert!(
        saved,
        "the group was not saved past event {newest} with its GTID state within 30 s\n{}",
        proxy.log()
    );
}

/// Opens the group's stream through `proxy`, retrying as a client would while the proxy moves.
async fn open(proxy: &Proxy) -> Stream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Stream::open(proxy.port(), "test", GROUP).await {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{GROUP} through {}: {e:?}\n{}", proxy.port(), proxy.log()),
        }
    }
}

/// Events through `proxy` until `want` row ids have all come (reopening the stream when it
/// ends), within `wait`.
async fn collect_until(
    proxy: &Proxy,
    mut stream: Option<Stream>,
    want: &BTreeSet<i64>,
    wait: Duration,
) -> (Vec<Msg>, Stream) {
    let deadline = Instant::now() + wait;
    let mut got: Vec<Msg> = Vec::new();
    loop {
        let mut s = match stream.take() {
            Some(s) => s,
            None => open(proxy).await,
        };
        loop {
            if want.is_subset(&rows(&got)) {
                return (got, s);
            }
            assert!(
                Instant::now() < deadline,
                "within {wait:?} got rows {:?}, want {want:?}\n{}",
                rows(&got),
                proxy.log()
            );
            match s.recv_or_end(Duration::from_millis(500)).await {
                Ok(Some(m)) => got.push(m),
                Ok(None) => {}
                Err(_) => break,
            }
        }
    }
}

/// Where the Galera takeover tests start from ([`group_left_by_a_dead_proxy`]).
struct LeftGroup {
    servers: Servers,
    /// The proxy that takes the group over; started before the group existed.
    b: Proxy,
    /// How `b` reaches the cluster (a later proxy is started the same way).
    b_backend: String,
    n2: Conn,
    /// The events read through the dead proxy.
    first: Vec<Msg>,
}

/// A 3-node Galera cluster with proxy A on node 1 and proxy B on nodes `b_nodes` (the first
/// preferred); rows 1..=`written` are written on node 1 and read through A, the first `acked`
/// events are acked, and A dies once node 2's copy of the group's row is saved past them with
/// its GTID state. `None` (the test is skipped) when galera-4 is not installed.
async fn group_left_by_a_dead_proxy(
    b_nodes: &[u16],
    written: usize,
    acked: usize,
) -> Option<LeftGroup> {
    if let Err(why) = galera_available() {
        eprintln!("skipped: {why}");
        return None;
    }
    let servers = Servers::start(Kind::Galera);
    let a = Proxy::start(&servers.url(1), &[], None);
    let b_backend = b_nodes
        .iter()
        .map(|&i| servers.url(i))
        .collect::<Vec<_>>()
        .join(",");
    let b = Proxy::start(&b_backend, &[], None);
    let mut n1 = servers.direct(1).await;
    run(&mut n1, TABLE).await;
    let mut s = open(&a).await;
    insert(&mut n1, 1..=written as i64, "first").await;
    let first = s.recv_n(written, Duration::from_secs(30)).await;
    ack(a.port(), &first[..acked]).await;
    let mut n2 = servers.direct(2).await;
    saved_with_gtid(&mut n2, first[acked - 1].id, &a).await;
    a.kill();
    s.close();
    Some(LeftGroup {
        servers,
        b,
        b_backend,
        n2,
        first,
    })
}

/// A group served through a proxy on node 1 and acked in part; that proxy dies, and a proxy on
/// node 2 takes the group over: every unacked event (with the same event ids), every event
/// written meanwhile on node 3, nothing acked.
#[tokio::test]
async fn a_group_saved_on_one_galera_node_is_taken_over_on_another() {
    let Some(LeftGroup {
        servers, b, first, ..
    }) = group_left_by_a_dead_proxy(&[2], 20, 10).await
    else {
        return;
    };
    assert_eq!(rows(&first), (1..=20).collect());
    let mut n3 = servers.direct(3).await;
    insert(&mut n3, 21..=30, "meanwhile").await;

    // The dead proxy's lease runs out (10 s), then node 2's proxy resumes by GTID.
    let want: BTreeSet<i64> = (11..=30).collect();
    let (got, s) = collect_until(&b, None, &want, Duration::from_secs(60)).await;
    let got_rows = rows(&got);
    assert!(
        got_rows.is_disjoint(&(1..=10).collect()),
        "acked events sent again: {got_rows:?}"
    );
    assert_eq!(got_rows, want);
    let before: BTreeMap<i64, i64> = by_event(&first[10..]);
    let after: BTreeMap<i64, i64> = by_event(&got)
        .into_iter()
        .filter(|(_, row)| *row <= 20)
        .collect();
    assert_eq!(before, after, "the same event ids on node 2");
    assert!(
        b.log().contains("group 'g' of `test`.`ev`: resuming on"),
        "node 2's proxy did not say it moved the group\n{}",
        b.log()
    );
    s.close();
}

/// A group taken over on a node whose binlog no longer holds the group's place (as after a
/// rejoin by SST, which starts a new binlog; here node 2 purges its binlog): the proxy on
/// node 2 reads the group from node 1, whose binlog holds it, with nothing acked sent again and
/// nothing skipped, and moves back to node 2 once node 2's binlog holds the group's place. Then
/// node 2 purges the file the group was saved at, and a new proxy on node 2 reads it elsewhere
/// again.
#[tokio::test]
async fn a_group_whose_place_the_node_in_use_purged_reads_from_another_node() {
    // Proxy B prefers node 2 and knows the others.
    let Some(LeftGroup {
        servers,
        b,
        b_backend,
        mut n2,
        first,
    }) = group_left_by_a_dead_proxy(&[2, 3, 1], 20, 10).await
    else {
        return;
    };
    assert_eq!(rows(&first), (1..=20).collect());
    // Node 2 keeps only a new binlog file: the group's place (event 11) is not in it.
    purge_binlog(&mut n2).await;
    let mut n3 = servers.direct(3).await;
    insert(&mut n3, 21..=30, "meanwhile").await;

    // The dead proxy's lease runs out (10 s); node 2's proxy reads the group from node 1.
    let want: BTreeSet<i64> = (11..=30).collect();
    let (got, s) = collect_until(&b, None, &want, Duration::from_secs(60)).await;
    let got_rows = rows(&got);
    assert!(
        got_rows.is_disjoint(&(1..=10).collect()),
        "acked events sent again: {got_rows:?}"
    );
    assert_eq!(got_rows, want);
    let before: BTreeMap<i64, i64> = by_event(&first[10..]);
    let after: BTreeMap<i64, i64> = by_event(&got)
        .into_iter()
        .filter(|(_, row)| *row <= 20)
        .collect();
    assert_eq!(before, after, "the same event ids read from node 1");
    assert!(
        b.log().contains("whose binlog does, until that of"),
        "node 2's proxy did not say it reads the group elsewhere\n{}",
        b.log()
    );

    // Everything acked: the group's place is after the purge, in node 2's binlog; the group
    // moves back there, and goes on with what is written after.
    ack(b.port(), &got).await;
    let moved_back = eventually(60, async || {
        b.log()
            .contains("the binlog of the server in use holds its place now")
    })
    .await;
    assert!(
        moved_back,
        "the group did not move back to node 2\n{}",
        b.log()
    );
    insert(&mut n2, 31..=35, "after").await;
    let (later, s) =
        collect_until(&b, Some(s), &(31..=35).collect(), Duration::from_secs(60)).await;
    assert!(
        rows(&later).is_disjoint(&(1..=30).collect()),
        "acked events sent again after moving back: {:?}",
        rows(&later)
    );

    // Saved at node 2's own file and offset; node 2 purges that file and a new proxy on node 2
    // takes the group over: it reads the group from another node again.
    ack(b.port(), &later).await;
    let newest = later.iter().map(|m| m.id).max().expect("events came");
    saved_with_gtid(&mut n2, newest, &b).await;
    b.kill();
    s.close();
    purge_binlog(&mut n2).await;
    insert(&mut n3, 36..=40, "last").await;
    let c = Proxy::start(&b_backend, &[], None);
    let (last, s) = collect_until(&c, None, &(36..=40).collect(), Duration::from_secs(60)).await;
    assert_eq!(
        rows(&last),
        (36..=40).collect(),
        "only the unacked events after the purge"
    );
    assert!(
        c.log().contains("no longer holds its place"),
        "the new proxy did not say it reads the group elsewhere\n{}",
        c.log()
    );
    s.close();
}

/// Node `conn`'s binlog starts a new file and drops the older ones.
async fn purge_binlog(conn: &mut Conn) {
    run(conn, "FLUSH BINARY LOGS").await;
    let row: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .expect("the node writes a binlog");
    let file: String = row.get(0).expect("SHOW MASTER STATUS names its file");
    run(conn, &format!("PURGE BINARY LOGS TO '{file}'")).await;
}

/// A group saved before its first GTID answer (its row names the server but has no GTID state)
/// taken over by a proxy on another node: it is read from the node it was saved on, nothing acked
/// sent again, nothing skipped.
#[tokio::test]
async fn a_group_saved_without_its_gtid_state_is_read_from_the_node_it_was_saved_on() {
    let Some(LeftGroup {
        servers, b, mut n2, ..
    }) = group_left_by_a_dead_proxy(&[2, 3, 1], 10, 5).await
    else {
        return;
    };
    run(
        &mut n2,
        "UPDATE test.msgproxy_stream_groups SET resume_gtid = NULL WHERE group_name = 'g'",
    )
    .await;
    let mut n3 = servers.direct(3).await;
    insert(&mut n3, 11..=15, "meanwhile").await;

    let want: BTreeSet<i64> = (6..=15).collect();
    let (got, s) = collect_until(&b, None, &want, Duration::from_secs(60)).await;
    let got_rows = rows(&got);
    assert!(
        got_rows.is_disjoint(&(1..=5).collect()),
        "acked events sent again: {got_rows:?}"
    );
    assert_eq!(got_rows, want);
    assert!(
        b.log().contains("without its GTID state; reading from"),
        "node 2's proxy did not say where it reads the group\n{}",
        b.log()
    );
    s.close();
}

/// One proxy in front of a primary and its replica: the primary dies, the test promotes the
/// replica, and the group goes on there by itself, nothing acked sent again.
#[tokio::test]
async fn a_group_follows_a_promotion_to_the_replica() {
    let servers = Servers::start(Kind::Replica);
    let proxy = Proxy::start(&servers.backend, &[], None);
    let mut primary = servers.direct(1).await;
    run(&mut primary, TABLE).await;
    let mut s = open(&proxy).await;
    insert(&mut primary, 1..=20, "first").await;
    let first = s.recv_n(20, Duration::from_secs(30)).await;
    assert_eq!(rows(&first), (1..=20).collect());
    ack(proxy.port(), &first[..10]).await;
    saved_with_gtid(&mut primary, first[9].id, &proxy).await;
    insert(&mut primary, 21..=30, "more").await;
    let more = s.recv_n(10, Duration::from_secs(30)).await;
    assert_eq!(rows(&more), (21..=30).collect());
    drop(primary);
    servers.replica_caught_up().await;
    servers.kill(1);
    servers.run(&["promote"]);

    // What was in flight comes again from the new primary (at least once), with the same
    // event ids; nothing acked does.
    let want: BTreeSet<i64> = (11..=30).collect();
    let (got, s) = collect_until(&proxy, Some(s), &want, Duration::from_secs(60)).await;
    let got_rows = rows(&got);
    assert!(
        got_rows.is_disjoint(&(1..=10).collect()),
        "acked events sent again: {got_rows:?}"
    );
    let mut before = by_event(&first[10..]);
    before.extend(by_event(&more));
    assert_eq!(
        before,
        by_event(&got),
        "the same event ids on the new primary"
    );
    // And the new primary's own writes.
    let mut new_primary = servers.direct(2).await;
    insert(&mut new_primary, 31..=31, "after").await;
    let after = collect_until(&proxy, Some(s), &[31].into(), Duration::from_secs(30)).await;
    let (after, s) = after;
    assert!(
        rows(&after).is_disjoint(&(1..=10).collect()),
        "acked events sent again"
    );
    assert!(
        proxy
            .log()
            .contains("group 'g' of `test`.`ev`: resuming on"),
        "the group did not move by GTID\n{}",
        proxy.log()
    );
    s.close();
}

/// The replica stopped replicating before the group's latest events: after the promotion it
/// lacks what the group has done, so the group's stream ends with error 1105 saying so and to
/// SEEK; a SEEK on the new primary recovers.
#[tokio::test]
async fn a_promoted_replica_without_what_the_group_did_is_refused_until_seek() {
    let servers = Servers::start(Kind::Replica);
    let proxy = Proxy::start(&servers.backend, &[], None);
    let mut primary = servers.direct(1).await;
    run(&mut primary, TABLE).await;
    let mut s = open(&proxy).await;
    insert(&mut primary, 1..=5, "first").await;
    let first = s.recv_n(5, Duration::from_secs(30)).await;
    ack(proxy.port(), &first).await;
    saved_with_gtid(&mut primary, first[4].id, &proxy).await;
    servers.replica_caught_up().await;
    let mut replica = servers.direct(2).await;
    run(&mut replica, "STOP SLAVE").await;
    // Read and acked on the primary only.
    insert(&mut primary, 6..=15, "lost").await;
    let lost = s.recv_n(10, Duration::from_secs(30)).await;
    ack(proxy.port(), &lost).await;
    saved_with_gtid(&mut primary, lost[9].id, &proxy).await;
    drop(primary);
    servers.kill(1);
    servers.run(&["promote"]);

    // The stream ends with the error (after the grace for a lagging server); one broken with
    // its backend connection is opened again, as a client would.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut stream = Some(s);
    let error = loop {
        assert!(
            Instant::now() < deadline,
            "no error within 60 s\n{}",
            proxy.log()
        );
        let mut open = match stream.take() {
            Some(s) => s,
            None => match Stream::open(proxy.port(), "test", GROUP).await {
                Ok(s) => s,
                Err(e) if format!("{e:?}").contains("SEEK") => break format!("{e:?}"),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        match open.recv_or_end(Duration::from_millis(500)).await {
            Ok(Some(m)) => panic!("an event on a server without the group's progress: {m:?}"),
            Ok(None) => stream = Some(open),
            Err(e) if e.contains("SEEK") => break e,
            Err(_) => {}
        }
    };
    assert!(
        error.contains("1105") && error.contains("HY000") && error.contains("cannot resume"),
        "{error}"
    );
    // A new stream gets the same error at once.
    match Stream::open(proxy.port(), "test", GROUP).await {
        Ok(_) => panic!("a stream of the group opened on a server without its progress"),
        Err(e) => assert!(format!("{e:?}").contains("SEEK"), "{e:?}"),
    }
    // SEEK on the new primary, and the group goes on there.
    let mut c = connect(proxy.port(), "test").await;
    exec(&mut c, "SEEK ev GROUP 'g' TO LATEST")
        .await
        .unwrap_or_else(|e| panic!("SEEK: {e:?}\n{}", proxy.log()));
    let mut s = open(&proxy).await;
    insert(&mut replica, 100..=100, "after seek").await;
    let after = s.recv_n(1, Duration::from_secs(30)).await;
    assert_eq!(
        after[0].values[2],
        mysql_async::Value::Bytes(b"after seek".to_vec())
    );
    s.close();
}
