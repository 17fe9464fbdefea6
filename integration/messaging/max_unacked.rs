//! `vt_max_unacked`: a stream holds at most that many messages sent and not yet acked, so a slow
//! consumer cannot sit on the table's messages while the other streams wait; acks made anywhere
//! (through the proxy, or straight to the server) make room at once.

use mysql_async::prelude::Queryable;

use super::harness::{ack, assert_each_once, comment, exec, ids, secs, Env};
use crate::support::metrics::{sample, scrape};
use crate::support::process::free_port;
use crate::support::{wait_for_log, MariaDb};

/// A proxy following the binlog (acks reach the engine there; the limit holds only then), with
/// its metrics on `metrics_port`, and table `q` with the given comment.
async fn env_with_queue(db: &str, table_comment: &str, metrics_port: u16) -> Env {
    let server = MariaDb::shared();
    let listen = format!("127.0.0.1:{metrics_port}");
    let env = Env::on_url(
        server,
        db,
        &server.backend_url(),
        &["--metrics-listen", &listen],
    )
    .await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(50)) comment '{table_comment}'"
    ))
    .await;
    env
}

#[tokio::test]
async fn a_stream_holds_at_most_vt_max_unacked_and_acks_make_room() {
    let mport = free_port();
    let env = env_with_queue(
        "msg_max_unacked",
        &comment("30", 4, "1", ",vt_max_unacked=10"),
        mport,
    )
    .await;
    let held = || async {
        let page = scrape(mport).await;
        sample(
            &page,
            "msgproxy_message_unacked_held",
            &[("schema", "msg_max_unacked"), ("table", "q")],
        )
    };
    env.via_proxy(&format!(
        "insert into q(id, message) values {}",
        (1..=40)
            .map(|i| format!("({i}, 'm{i}')"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .await;

    // A stream alone would take all 40 (its socket holds them); it gets 10.
    let mut slow = env.stream("q").await;
    let first = slow.recv_n(10, secs(5.0)).await;
    assert_eq!(first.len(), 10, "{}", env.log());
    slow.expect_quiet(secs(1.5), "a stream holding vt_max_unacked messages")
        .await;

    // The other 30 are not stuck behind it: a second stream gets its own 10.
    let mut other = env.stream("q").await;
    let second = other.recv_n(10, secs(5.0)).await;
    assert_eq!(second.len(), 10, "{}", env.log());
    other
        .expect_quiet(secs(1.0), "the second stream at its limit too")
        .await;
    assert_eq!(held().await, Some(20.0), "two streams hold 10 each");

    // ACK through the proxy makes room for the slow stream...
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "q", &ids(&first)).await, 10);
    let third = slow.recv_n(10, secs(5.0)).await;
    assert_eq!(third.len(), 10, "{}", env.log());
    // ...and so does the Vitess SQL ack straight to the server, seen in the binlog.
    env.direct(&format!(
        "update q set time_acked = {}, time_next = null where id in ({}) and time_acked is null",
        super::harness::now_ns(),
        ids(&second)
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .await;
    let fourth = other.recv_n(10, secs(5.0)).await;
    assert_eq!(fourth.len(), 10, "{}", env.log());

    let all: Vec<i64> = [&first, &second, &third, &fourth]
        .into_iter()
        .flat_map(|m| ids(m))
        .collect();
    assert_each_once(&all, 1..=40, "all 40, none twice");
    slow.expect_quiet(secs(1.0), "nothing left").await;
    assert_eq!(held().await, Some(20.0), "the last 20 are not acked yet");
    let _ = c.disconnect().await;
}

/// Messages whose ack wait passes stop counting: a stream that never acks is not stuck for good
/// (its messages are due again, for any stream, and it may take new ones).
#[tokio::test]
async fn messages_stop_counting_when_their_ack_wait_passes() {
    // ack_wait 1 s, min_backoff 1 s: a sent message is due again 1.67..2.33 s later. The
    // poller interval (30 s) is far off: what comes next comes at the ack deadline, not a poll.
    let env = env_with_queue(
        "msg_max_unacked_expiry",
        &comment("1", 10, "30", ",vt_max_unacked=3"),
        free_port(),
    )
    .await;
    env.via_proxy("insert into q(id, message) values (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f')")
        .await;
    let mut s = env.stream("q").await;
    let first = s.recv_n(3, secs(5.0)).await;
    assert_eq!(first.len(), 3, "{}", env.log());
    s.expect_quiet(secs(1.0), "at the limit, within the ack wait")
        .await;
    let next = s.recv_n(3, secs(4.0)).await;
    assert_eq!(
        next.len(),
        3,
        "after the ack wait the stream may take 3 more\n{}",
        env.log()
    );
}

/// An ack the binlog does not show row by row — logged with a minimal row image, or as a
/// statement — asks for a poll, and the poll lets go of what it acked.
#[tokio::test]
async fn acks_logged_as_statements_or_minimal_images_make_room_too() {
    let env = env_with_queue(
        "msg_max_unacked_minimal",
        &comment("30", 2, "30", ",vt_max_unacked=2"),
        free_port(),
    )
    .await;
    env.via_proxy("insert into q(id, message) values (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f')")
        .await;
    let mut s = env.stream("q").await;
    let mut direct = env.direct_conn().await;
    let mut got = Vec::new();
    for how in [
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "SET SESSION binlog_format = 'STATEMENT'",
    ] {
        let held = s.recv_n(2, secs(5.0)).await;
        assert_eq!(held.len(), 2, "{}", env.log());
        s.expect_quiet(secs(0.5), "at the limit").await;
        direct.query_drop(how).await.expect(how);
        let acked = exec(
            &mut direct,
            &format!(
                "update q set time_acked = {}, time_next = null where id in ({}) and time_acked is null",
                super::harness::now_ns(),
                ids(&held).iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
            ),
        )
        .await
        .expect("the direct ack");
        assert_eq!(acked, 2);
        got.extend(ids(&held));
    }
    let last = s.recv_n(2, secs(5.0)).await;
    assert_eq!(
        last.len(),
        2,
        "after the {} ack\n{}",
        "statement-format",
        env.log()
    );
    got.extend(ids(&last));
    assert_each_once(&got, 1..=6, "all six, none twice");
    let _ = direct.disconnect().await;
}

/// A stream with a `WHERE` condition (MESSAGING.md §12) finds its own rows, but holds no more
/// than a plain stream: `vt_max_unacked` of them, until acks (through the proxy, or straight to
/// the server) make room.
#[tokio::test]
async fn a_filtered_stream_holds_at_most_vt_max_unacked_too() {
    let mport = free_port();
    let env = env_with_queue(
        "msg_max_unacked_filtered",
        &comment("30", 4, "1", ",vt_max_unacked=10"),
        mport,
    )
    .await;
    let held = || async {
        let page = scrape(mport).await;
        sample(
            &page,
            "msgproxy_message_unacked_held",
            &[("schema", "msg_max_unacked_filtered"), ("table", "q")],
        )
    };
    let open = |sql: &'static str| {
        let env = &env;
        async move {
            super::harness::Stream::open(env.proxy.port(), &env.db, sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}\n{}", env.log()))
        }
    };
    // 40 match the condition, 20 do not.
    env.via_proxy(&format!(
        "insert into q(id, message) values {}",
        (1..=60)
            .map(|i| format!("({i}, 'm{i}')"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .await;

    let mut slow = open("STREAM id, message FROM q WHERE id <= 40").await;
    let first = slow.recv_n(10, secs(5.0)).await;
    assert_eq!(first.len(), 10, "{}", env.log());
    slow.expect_quiet(
        secs(1.5),
        "a filtered stream holding vt_max_unacked messages",
    )
    .await;

    let mut other = open("STREAM * FROM q WHERE id <= 40").await;
    let second = other.recv_n(10, secs(5.0)).await;
    assert_eq!(second.len(), 10, "{}", env.log());
    other
        .expect_quiet(secs(1.0), "the second filtered stream at its limit too")
        .await;
    assert_eq!(held().await, Some(20.0), "two streams hold 10 each");

    // ACK through the proxy makes room for the slow stream...
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "q", &ids(&first)).await, 10);
    let third = slow.recv_n(10, secs(5.0)).await;
    assert_eq!(third.len(), 10, "{}", env.log());
    // ...and so does the Vitess SQL ack straight to the server, seen in the binlog.
    env.direct(&format!(
        "update q set time_acked = {}, time_next = null where id in ({}) and time_acked is null",
        super::harness::now_ns(),
        ids(&second)
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .await;
    let fourth = other.recv_n(10, secs(5.0)).await;
    assert_eq!(fourth.len(), 10, "{}", env.log());

    let all: Vec<i64> = [&first, &second, &third, &fourth]
        .into_iter()
        .flat_map(|m| ids(m))
        .collect();
    assert_each_once(&all, 1..=40, "the 40 that match, none twice");
    slow.expect_quiet(secs(1.0), "nothing left that matches")
        .await;
    assert_eq!(held().await, Some(20.0), "the last 20 are not acked yet");

    // A filtered stream that ends holds nothing any more; acks release the other's.
    drop(slow);
    assert_eq!(ack(&mut c, "q", &ids(&fourth)).await, 10);
    let deadline = std::time::Instant::now() + secs(10.0);
    while held().await != Some(0.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "still held: {:?}\n{}",
            held().await,
            env.log()
        );
        tokio::time::sleep(secs(0.1)).await;
    }
    let _ = c.disconnect().await;
}
