//! Durability: a proxy killed and restarted, a group taken over by another proxy, replay from
//! `START EARLIEST` / `AT TIMESTAMP` / `AT EVENT` and `SEEK`, `DROP GROUP`.

use std::collections::BTreeSet;

use super::*;
use crate::messaging::harness::ids;

/// Acks `msgs` (the group's oldest events) through `port` and waits until the acks are durable:
/// the group's saved floor (the lowest event id not done, in msgproxy's table on the backend's
/// `test` database) has passed them.
async fn ack_all(env: &Env, port: u16, group: &str, msgs: &[Msg]) {
    let mut c = crate::messaging::harness::connect(port, &env.db).await;
    let n = ack(&mut c, "orders_events", group, &ids(msgs)).await;
    assert_eq!(n as usize, msgs.len());
    let _ = c.disconnect().await;
    let newest = ids(msgs).into_iter().max().unwrap_or(0);
    let mut direct = env.direct_conn().await;
    let durable = crate::support::eventually(20, async || {
        let floor: Option<u64> = mysql_async::prelude::Queryable::exec_first(
            &mut direct,
            "SELECT floor FROM test.msgproxy_stream_groups \
             WHERE table_schema = ? AND table_name = 'orders_events' AND group_name = ?",
            (env.db.as_str(), group.as_bytes()),
        )
        .await
        .ok()
        .flatten();
        floor.is_some_and(|f| f > newest as u64)
    })
    .await;
    assert!(
        durable,
        "the acks were not saved within 20 s\n{}",
        env.log()
    );
}

/// Waits until group `group` of `orders_events` has been saved (its row in msgproxy's table on
/// the backend's `test` database updated) after this moment on the server's clock.
async fn saved_since_now(env: &Env, group: &str) {
    let mut direct = env.direct_conn().await;
    let now: String =
        mysql_async::prelude::Queryable::query_first(&mut direct, "SELECT CAST(NOW(6) AS CHAR)")
            .await
            .unwrap()
            .unwrap();
    let saved = crate::support::eventually(20, async || {
        let updated: Option<String> = mysql_async::prelude::Queryable::exec_first(
            &mut direct,
            "SELECT CAST(updated_at AS CHAR) FROM test.msgproxy_stream_groups \
             WHERE table_schema = ? AND table_name = 'orders_events' AND group_name = ?",
            (env.db.as_str(), group.as_bytes()),
        )
        .await
        .ok()
        .flatten();
        updated.is_some_and(|u| u > now)
    })
    .await;
    assert!(saved, "group {group} not saved within 20 s\n{}", env.log());
}

#[tokio::test]
async fn a_killed_proxy_resumes_the_group_with_nothing_skipped() {
    let env = Env::new("evs_restart").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let mut s = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 30, 7, "a").await;
    let got = s.recv_n(30, secs(20)).await;
    assert_eq!(row_ids(&got), first);
    ack_all(&env, env.proxy.port(), "g", &got[..10]).await;
    env.proxy.kill();
    s.close();
    // Written while no proxy runs.
    let second = insert_direct(&env, 20, 3, "b").await;
    env.proxy.restart();
    // The dead proxy's lease runs out (10 s), then the group goes on from its durable position:
    // the 20 unacked events and the 20 new ones, none of the acked.
    let mut s = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let again = s.recv_n(40, secs(40)).await;
    let rows: BTreeSet<i64> = row_ids(&again).into_iter().collect();
    let expected: BTreeSet<i64> = first[10..].iter().chain(&second).copied().collect();
    assert_eq!(rows, expected, "every unacked event, nothing acked");
    // Event ids are the same after the restart.
    let before: Vec<i64> = ids(&got[10..]);
    let after: Vec<i64> = ids(&again[..20]);
    assert_eq!(before, after);
    s.expect_quiet(secs(1), "nothing more").await;
    s.close();
}

/// A group row whose file and offset do not point at an event of the server's binlog (as a
/// position of one server saved under another's name would) but whose GTID state is known: the
/// restarted proxy resumes the group by GTID on the same server, nothing acked sent again.
#[tokio::test]
async fn a_saved_offset_the_binlog_does_not_hold_is_found_again_by_gtid() {
    let env = Env::new("evs_bad_offset").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let mut s = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 20, 7, "a").await;
    let got = s.recv_n(20, secs(20)).await;
    assert_eq!(row_ids(&got), first);
    ack_all(&env, env.proxy.port(), "g", &got[..10]).await;
    // The GTID state at the resume point is asked every 3 s: wait until it is saved.
    let mut direct = env.direct_conn().await;
    let with_gtid = crate::support::eventually(30, async || {
        let gtid: Option<Option<String>> = mysql_async::prelude::Queryable::exec_first(
            &mut direct,
            "SELECT resume_gtid FROM test.msgproxy_stream_groups \
             WHERE table_schema = ? AND group_name = 'g'",
            (env.db.as_str(),),
        )
        .await
        .ok()
        .flatten();
        matches!(gtid, Some(Some(_)))
    })
    .await;
    assert!(with_gtid, "no GTID state saved within 30 s\n{}", env.log());
    env.proxy.kill();
    s.close();
    // An offset inside some event: the binlog dump there fails (error 1236).
    mysql_async::prelude::Queryable::exec_drop(
        &mut direct,
        "UPDATE test.msgproxy_stream_groups SET resume_pos = resume_pos + 3 \
         WHERE table_schema = ? AND group_name = 'g'",
        (env.db.as_str(),),
    )
    .await
    .unwrap();
    env.proxy.restart();
    let mut s = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let again = s.recv_n(10, secs(40)).await;
    assert_eq!(
        row_ids(&again),
        first[10..].to_vec(),
        "the unacked events, nothing acked"
    );
    assert!(
        env.log().contains("resuming there by GTID"),
        "the proxy did not say it resumed by GTID\n{}",
        env.log()
    );
    s.close();
}

#[tokio::test]
async fn another_proxy_takes_the_group_over_when_the_serving_one_dies() {
    let env = Env::new("evs_takeover").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let other = env.second_proxy();
    let mut a = stream(&env, "* FROM orders_events GROUP 'g'").await;
    // The second proxy's stream joins the group and waits: the first proxy serves it.
    let mut b = stream_on(&env, other.port(), "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 10, 5, "a").await;
    let got = a.recv_n(10, secs(20)).await;
    assert_eq!(row_ids(&got), first);
    b.expect_quiet(secs(1), "the group is served by the first proxy")
        .await;
    ack_all(&env, env.proxy.port(), "g", &got[..4]).await;
    // An ACK through the proxy that does not serve the group is handed to the serving one
    // (acks_elsewhere.rs); it is durable there within 100 ms, as any ACK: waited for before the
    // kill, as `ack_all` does.
    let mut c = crate::messaging::harness::connect(other.port(), &env.db).await;
    assert_eq!(ack(&mut c, "orders_events", "g", &[got[5].id]).await, 1);
    let _ = c.disconnect().await;
    let mut direct = env.direct_conn().await;
    let durable = crate::support::eventually(20, async || {
        let acked: Option<String> = mysql_async::prelude::Queryable::exec_first(
            &mut direct,
            "SELECT acked FROM test.msgproxy_stream_groups \
             WHERE table_schema = ? AND table_name = 'orders_events' AND group_name = 'g'",
            (env.db.as_str(),),
        )
        .await
        .ok()
        .flatten();
        acked.is_some_and(|a| a == got[5].id.to_string())
    })
    .await;
    assert!(durable, "the ack was not saved within 20 s\n{}", env.log());
    env.proxy.kill();
    a.close();
    let second = insert_direct(&env, 5, 5, "b").await;
    let taken = b.recv_n(10, secs(40)).await;
    let rows: BTreeSet<i64> = row_ids(&taken).into_iter().collect();
    let expected: BTreeSet<i64> = first[4..]
        .iter()
        .chain(&second)
        .copied()
        .filter(|id| *id != first[5])
        .collect();
    assert_eq!(rows, expected);
    b.expect_quiet(secs(1), "nothing more").await;
    b.close();
}

#[tokio::test]
async fn replay_from_earliest_a_timestamp_an_event_and_seek() {
    // START EARLIEST reads the binlog once from its oldest file (to find the table's last
    // creation): on the shared server that is every other test's binlog too. A server of its own.
    let env = Env::private("evs_replay").await;
    env.ddl(&orders_events("")).await;
    let first = insert_direct(&env, 5, 5, "a").await;
    // The next second on the server's clock (batch one committed before it ended): batch two
    // commits at or after `cut`.
    let mut c = env.direct_conn().await;
    let mut now = async || -> String {
        mysql_async::prelude::Queryable::query_first(&mut c, "SELECT CAST(NOW() AS CHAR)")
            .await
            .unwrap()
            .unwrap()
    };
    let after_first = now().await;
    let mut cut = after_first.clone();
    let ticked = crate::support::eventually(20, async || {
        cut = now().await;
        cut > after_first
    })
    .await;
    assert!(ticked, "the server's clock stood at {after_first}");
    let _ = c.disconnect().await;
    let second = insert_direct(&env, 5, 5, "b").await;

    let mut early = stream(&env, "* FROM orders_events GROUP 'early' START EARLIEST").await;
    let all = early.recv_n(10, secs(20)).await;
    assert_eq!(row_ids(&all), [first.clone(), second.clone()].concat());

    let mut late = stream(
        &env,
        &format!("* FROM orders_events GROUP 'late' START AT TIMESTAMP '{cut}'"),
    )
    .await;
    assert_eq!(row_ids(&late.recv_n(5, secs(20)).await), second);
    late.expect_quiet(secs(1), "nothing before the timestamp")
        .await;

    let third_id = all[2].id;
    let mut from_event = stream(
        &env,
        &format!("* FROM orders_events GROUP 'from3' START AT EVENT {third_id}"),
    )
    .await;
    let got = from_event.recv_n(8, secs(20)).await;
    assert_eq!(ids(&got), ids(&all[2..]));

    // SEEK an acked group back to the start: everything again.
    ack_all(&env, env.proxy.port(), "early", &all).await;
    early.expect_quiet(secs(1), "all acked").await;
    let mut p = env.proxy_conn().await;
    exec(&mut p, "SEEK orders_events GROUP 'early' TO EARLIEST")
        .await
        .unwrap();
    assert_eq!(ids(&early.recv_n(10, secs(20)).await), ids(&all));
    exec(
        &mut p,
        &format!("SEEK orders_events GROUP 'early' TO EVENT {}", all[7].id),
    )
    .await
    .unwrap();
    assert_eq!(ids(&early.recv_n(3, secs(20)).await), ids(&all[7..]));

    // DROP GROUP ends its streams and forgets it.
    assert_eq!(
        exec(&mut p, "DROP GROUP 'late' ON orders_events")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        exec(&mut p, "DROP GROUP 'late' ON orders_events")
            .await
            .unwrap(),
        0
    );
    match late.recv_or_end(secs(10)).await {
        Err(why) => assert!(why.contains("dropped"), "{why}"),
        Ok(m) => panic!("the dropped group's stream went on: {m:?}"),
    }
    let rows: Vec<mysql_async::Row> =
        mysql_async::prelude::Queryable::query(&mut p, "SHOW STREAM GROUPS")
            .await
            .unwrap();
    let groups: Vec<String> = rows
        .into_iter()
        .filter(|r| r.get::<String, _>(0).as_deref() == Some(env.db.as_str()))
        .filter_map(|r| r.get::<String, _>(2))
        .collect();
    assert_eq!(groups, ["early", "from3"]);
    early.close();
    from_event.close();
    env.server.stop();
}

/// The first error of `STREAM <what>`: refused at once, or ended soon after it began.
async fn stream_error(env: &Env, what: &str) -> String {
    let sql = format!("STREAM {what}");
    match Stream::open(env.proxy.port(), &env.db, &sql).await {
        Err(f) => format!("{f:?}"),
        Ok(mut s) => {
            let end = s.recv_or_end(secs(30)).await;
            s.close();
            match end {
                Err(why) => why,
                Ok(m) => panic!("{sql}: expected an error, got {m:?}"),
            }
        }
    }
}

#[tokio::test]
async fn rotation_and_purge_under_a_lagging_group() {
    // PURGE BINARY LOGS would pull files from under the other tests' groups: a server of its own.
    let env = Env::private("evs_purge").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let mut lag = stream(&env, "* FROM orders_events GROUP 'lag'").await;
    let first = insert_direct(&env, 3, 3, "a").await;
    assert_eq!(row_ids(&lag.recv_n(3, secs(20)).await), first);
    lag.close();
    // A rotation while the group lags (nothing acked): a new group from EARLIEST reads across
    // both files.
    env.direct("FLUSH BINARY LOGS").await;
    let second = insert_direct(&env, 2, 2, "b").await;
    let mut all = stream(&env, "* FROM orders_events GROUP 'rot' START EARLIEST").await;
    assert_eq!(
        row_ids(&all.recv_n(5, secs(20)).await),
        [first.clone(), second.clone()].concat()
    );
    all.close();
    // The proxy goes; the binlog files that hold the lagging group's position are purged.
    env.proxy.kill();
    env.direct("FLUSH BINARY LOGS").await;
    let mut c = env.direct_conn().await;
    let current: mysql_async::Row =
        mysql_async::prelude::Queryable::query_first(&mut c, "SHOW MASTER STATUS")
            .await
            .unwrap()
            .unwrap();
    let file: String = current.get(0).unwrap();
    // The server keeps a file a replica connection is reading (the dead proxy's, until the
    // server notices it is gone): purge until the oldest file is the current one.
    let purged = crate::support::eventually(30, async || {
        exec(&mut c, &format!("PURGE BINARY LOGS TO '{file}'"))
            .await
            .unwrap();
        let oldest: Option<mysql_async::Row> =
            mysql_async::prelude::Queryable::query_first(&mut c, "SHOW BINARY LOGS")
                .await
                .unwrap();
        oldest.and_then(|r| r.get::<String, _>(0)).as_deref() == Some(file.as_str())
    })
    .await;
    assert!(purged, "the old binlog files were not purged");
    let _ = c.disconnect().await;
    env.proxy.restart();
    let why = stream_error(&env, "* FROM orders_events GROUP 'lag'").await;
    assert!(why.contains("group 'lag'"), "{why}");
    assert!(why.contains("no longer holds"), "{why}");
    assert!(why.contains("SEEK"), "{why}");
    // SEEK puts it right: from the oldest event left.
    let mut p = env.proxy_conn().await;
    exec(&mut p, "SEEK orders_events GROUP 'lag' TO EARLIEST")
        .await
        .unwrap();
    let mut lag = stream(&env, "* FROM orders_events GROUP 'lag'").await;
    let third = insert_direct(&env, 1, 1, "c").await;
    assert_eq!(row_ids(&lag.recv_n(1, secs(30)).await), third);
    lag.close();
    env.server.stop();
}

#[tokio::test]
async fn a_server_without_full_row_metadata_is_named() {
    let server: &'static crate::support::MariaDb =
        Box::leak(Box::new(crate::support::MariaDb::start_with(&[
            "--binlog-row-metadata=MINIMAL",
        ])));
    let env = Env::on_url(server, "evs_prereq", &server.backend_url(), &[]).await;
    env.ddl(&orders_events("")).await;
    let mut c = env.proxy_conn().await;
    let refused = exec(&mut c, "STREAM * FROM orders_events GROUP 'g'")
        .await
        .expect_err("the binlog lacks column names");
    let text = format!("{refused:?}");
    assert!(text.contains("binlog_row_metadata is MINIMAL"), "{text}");
    server.stop();
}

#[tokio::test]
async fn xa_transactions_become_events_at_commit_also_across_a_restart() {
    let env = Env::new("evs_xa").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let mut s = stream(&env, "id, topic FROM orders_events GROUP 'g'").await;
    let mut xa = env.direct_conn().await;
    for sql in [
        "XA START 'evs_x1'",
        "INSERT INTO orders_events (topic, payload) VALUES ('xa1', '{}'), ('xa2', '{}')",
        "XA END 'evs_x1'",
        "XA PREPARE 'evs_x1'",
    ] {
        exec(&mut xa, sql).await.unwrap();
    }
    let plain = insert_direct(&env, 1, 1, "plain").await;
    let got = s.recv_n(1, secs(20)).await;
    assert_eq!(
        row_ids(&got),
        plain,
        "the prepared rows wait for their commit"
    );
    // Not acked: the group's saved position is at this later event, and must still reach back
    // to x1's prepare. Saved within 50 ms: wait for a save after the delivery.
    saved_since_now(&env, "g").await;
    s.close();
    // The proxy dies while x1 is prepared; its group must still find x1's rows.
    env.proxy.kill();
    env.proxy.restart();
    let mut s = stream(&env, "id, topic FROM orders_events GROUP 'g'").await;
    exec(&mut xa, "XA COMMIT 'evs_x1'").await.unwrap();
    for sql in [
        "XA START 'evs_x2'",
        "INSERT INTO orders_events (topic, payload) VALUES ('rolled back', '{}')",
        "XA END 'evs_x2'",
        "XA PREPARE 'evs_x2'",
        "XA ROLLBACK 'evs_x2'",
    ] {
        exec(&mut xa, sql).await.unwrap();
    }
    let after = insert_direct(&env, 1, 1, "after").await;
    let got = s.recv_n(4, secs(40)).await;
    let topics: Vec<String> = got
        .iter()
        .map(|m| crate::messaging::harness::value_str(&m.values[2]))
        .collect();
    assert_eq!(topics, ["plain", "xa1", "xa2", "after"]);
    assert_eq!(row_ids(&got)[3], after[0]);
    assert!(ids(&got).windows(2).all(|w| w[0] < w[1]), "commit order");
    s.expect_quiet(secs(1), "nothing of the rolled-back XA transaction")
        .await;
    s.close();
}

#[tokio::test]
async fn a_table_dropped_and_created_again_starts_a_new_stream() {
    // START EARLIEST reads the binlog once from its oldest file (to find the table's last
    // creation): on the shared server that is every other test's binlog too. A server of its own.
    let env = Env::private("evs_recreate").await;
    env.ddl(&orders_events("")).await;
    let mut s = stream(&env, "id, topic FROM orders_events GROUP 'g'").await;
    insert_direct(&env, 2, 2, "old").await;
    s.recv_n(2, secs(20)).await;
    env.direct("DROP TABLE orders_events").await;
    match s.recv_or_end(secs(20)).await {
        Err(why) => assert!(why.contains("dropped"), "{why}"),
        Ok(m) => panic!("the stream of a dropped table went on: {m:?}"),
    }
    // The group is gone with the table.
    let mut p = env.proxy_conn().await;
    let rows: Vec<mysql_async::Row> =
        mysql_async::prelude::Queryable::query(&mut p, "SHOW STREAM GROUPS")
            .await
            .unwrap();
    assert!(
        !rows
            .iter()
            .any(|r| r.get::<String, _>(0).as_deref() == Some(env.db.as_str())),
        "the dropped table's group is still listed"
    );
    // The new table's stream does not reach back to the old table's events.
    env.ddl(&orders_events("")).await;
    let new = insert_direct(&env, 1, 1, "new").await;
    let mut s = stream(
        &env,
        "id, topic FROM orders_events GROUP 'g' START EARLIEST",
    )
    .await;
    let got = s.recv_n(1, secs(20)).await;
    assert_eq!(row_ids(&got), new);
    assert_eq!(
        crate::messaging::harness::value_str(&got[0].values[2]),
        "new"
    );
    s.expect_quiet(secs(1), "nothing of the old table").await;
    s.close();
    env.server.stop();
}

#[tokio::test]
async fn a_proxy_stopped_with_sigterm_hands_its_group_over_at_once() {
    let env = Env::new("evs_sigterm").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let other = env.second_proxy();
    let mut a = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let mut b = stream_on(&env, other.port(), "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 6, 6, "a").await;
    let got = a.recv_n(6, secs(20)).await;
    assert_eq!(row_ids(&got), first);
    let mut c = crate::messaging::harness::connect(env.proxy.port(), &env.db).await;
    assert_eq!(ack(&mut c, "orders_events", "g", &ids(&got[..2])).await, 2);
    drop(c);
    // SIGTERM: the serving proxy saves its group and gives the lease up as it stops, so the
    // other takes over well before the 10 s lease would have run out.
    let pid = env.proxy.pid().expect("a process") as libc::pid_t;
    // SAFETY: a plain kill(2) of the proxy process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let started = std::time::Instant::now();
    let taken = b.recv_n(4, secs(8)).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    let rows: BTreeSet<i64> = row_ids(&taken).into_iter().collect();
    let expected: BTreeSet<i64> = first[2..].iter().copied().collect();
    assert_eq!(rows, expected, "the unacked events, not the acked");
    a.close();
    b.close();
}

/// A group whose streams all went to another proxy (consumers that reconnect through a load
/// balancer do this) is handed over within a few seconds: the serving proxy, left without
/// streams and with nothing in flight, gives the group up soon (it used to keep it, and its
/// lease, for 30 s while the other proxy's streams got nothing).
#[tokio::test]
async fn a_group_whose_streams_all_moved_to_another_proxy_is_handed_over_soon() {
    let env = Env::new("evs_moved").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let other = env.second_proxy();
    let mut a = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let mut b = stream_on(&env, other.port(), "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 6, 6, "a").await;
    let got = a.recv_n(6, secs(20)).await;
    assert_eq!(row_ids(&got), first);
    b.expect_quiet(secs(1), "the group is served by the first proxy")
        .await;
    ack_all(&env, env.proxy.port(), "g", &got[..2]).await;
    // The first proxy's only stream goes; the proxy itself stays up.
    a.close();
    let started = std::time::Instant::now();
    let taken = b.recv_n(4, secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let rows: BTreeSet<i64> = row_ids(&taken).into_iter().collect();
    let expected: BTreeSet<i64> = first[2..].iter().copied().collect();
    assert_eq!(rows, expected, "the unacked events, not the acked");
    b.close();
}
