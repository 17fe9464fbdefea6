//! `ACK` through a proxy that does not serve the group (consumers behind a load balancer ack on
//! a second connection, which often lands on the other proxy): handed to the serving proxy
//! through the requests table, answered with the events newly acked; queued with a warning when
//! the serving proxy does not answer (killed), and honoured by the proxy that takes over. `SEEK`
//! goes the same way.

use std::collections::BTreeSet;
use std::time::Instant;

use mysql_async::prelude::Queryable;

use super::*;
use crate::messaging::harness::{connect, ids};

/// `ACK` of `ids` on `conn` (through the proxy that does not serve the group): the affected
/// rows, the warnings count, and how long it took.
async fn ack_timed(conn: &mut mysql_async::Conn, group: &str, ids: &[i64]) -> (u64, u16, Duration) {
    let started = Instant::now();
    let n = ack(conn, "orders_events", group, ids).await;
    (n, conn.get_warnings(), started.elapsed())
}

#[tokio::test]
async fn an_ack_through_the_other_proxy_is_applied_by_the_serving_one() {
    let env = Env::new("evs_ack_elsewhere").await;
    env.ddl(&orders_events(",ack_wait=3")).await;
    let other = env.second_proxy();
    let mut s = stream(&env, "* FROM orders_events GROUP 'g'").await;
    insert_direct(&env, 6, 6, "a").await;
    let got = s.recv_n(6, secs(20)).await;
    let e = ids(&got);
    let mut c = connect(other.port(), &env.db).await;
    let mut samples = Vec::new();
    let mut through_other = async |ids: &[i64], expected: u64, why: &str| {
        let (n, warnings, took) = ack_timed(&mut c, "g", ids).await;
        assert_eq!(n, expected, "ACK {ids:?}: {why}\n{}", env.log());
        assert_eq!(warnings, 0, "ACK {ids:?} answered, not queued");
        samples.push(took);
    };
    through_other(&e[0..2], 2, "both newly acked").await;
    through_other(&e[2..3], 1, "newly acked").await;
    through_other(&e[3..4], 1, "newly acked").await;
    through_other(&e[4..5], 1, "newly acked").await;
    through_other(&e[0..1], 0, "acked before").await;
    through_other(&[12_345], 0, "no such event").await;
    through_other(&[e[1], e[4], 12_345], 0, "acked before, or unknown").await;
    eprintln!("ACK through the proxy not serving the group took {samples:?}");
    // A group that does not exist is an error through any proxy.
    let missing = exec(&mut c, "ACK orders_events GROUP 'nope' 1")
        .await
        .expect_err("no such group");
    assert!(
        format!("{missing:?}").contains("no group 'nope'"),
        "{missing:?}"
    );
    // The unacked control event comes back after ack_wait; the acked ones never (they would
    // come first: waiting events go out in id order).
    let again = s.recv_n(1, secs(10)).await;
    assert_eq!(
        ids(&again),
        vec![e[5]],
        "only the unacked event is sent again"
    );
    s.expect_quiet(secs(1), "everything else acked").await;
    let _ = c.disconnect().await;
    s.close();
}

#[tokio::test]
async fn an_ack_queued_for_a_killed_proxy_is_honoured_by_the_next_one() {
    let env = Env::new("evs_ack_queued").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let other = env.second_proxy();
    let mut a = stream(&env, "* FROM orders_events GROUP 'g'").await;
    // The second proxy's stream joins the group and waits: the first proxy serves it.
    let mut b = stream_on(&env, other.port(), "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 4, 4, "a").await;
    let got = a.recv_n(4, secs(20)).await;
    assert_eq!(row_ids(&got), first);
    let e = ids(&got);
    // Killed with its lease live (10 s from its last save): nobody answers the request.
    env.proxy.kill();
    a.close();
    let mut c = connect(other.port(), &env.db).await;
    let (n, warnings, took) = ack_timed(&mut c, "g", &e[0..2]).await;
    assert_eq!(
        (n, warnings),
        (0, 1),
        "queued, with a warning\n{}",
        other.log()
    );
    eprintln!("ACK queued for the killed proxy answered after {took:?}");
    let shown: Vec<(String, u32, String)> = c.query("SHOW WARNINGS").await.expect("warnings");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].0, "Warning", "{shown:?}");
    assert!(shown[0].2.starts_with("ACK queued"), "{shown:?}");
    let _ = c.disconnect().await;
    // The lease runs out, the second proxy takes the group over and applies the queued ack
    // before it sends anything: the two unacked events come, the two acked never.
    let taken = b.recv_n(2, secs(40)).await;
    let rows: BTreeSet<i64> = row_ids(&taken).into_iter().collect();
    let expected: BTreeSet<i64> = first[2..].iter().copied().collect();
    assert_eq!(
        rows,
        expected,
        "the unacked events, not the acked\n{}",
        other.log()
    );
    b.expect_quiet(secs(1), "nothing more").await;
    // The request is answered, by the proxy that took over, with the events it acked.
    let mut direct = env.direct_conn().await;
    let answer: Option<(Option<u64>, Option<String>)> = direct
        .exec_first(
            "SELECT acked, answered_by FROM test.msgproxy_stream_groups_requests \
             WHERE table_schema = ? AND table_name = 'orders_events' AND group_name = 'g'",
            (env.db.as_str(),),
        )
        .await
        .expect("the request's row");
    let (acked, by) = answer.expect("the request is kept a while after its answer");
    assert_eq!(acked, Some(2));
    assert!(by.is_some());
    let _ = direct.disconnect().await;
    b.close();
}

#[tokio::test]
async fn a_seek_through_the_other_proxy_is_applied_by_the_serving_one() {
    let env = Env::new("evs_seek_elsewhere").await;
    env.ddl(&orders_events(",ack_wait=2")).await;
    let other = env.second_proxy();
    let mut s = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 3, 3, "a").await;
    let got = s.recv_n(3, secs(20)).await;
    assert_eq!(row_ids(&got), first);
    // In flight, not acked: a SEEK drops them.
    let mut c = connect(other.port(), &env.db).await;
    let started = Instant::now();
    let n = exec(&mut c, "SEEK orders_events GROUP 'g' TO LATEST")
        .await
        .unwrap_or_else(|e| panic!("SEEK through the other proxy: {e:?}\n{}", env.log()));
    let took = started.elapsed();
    assert_eq!((n, c.get_warnings()), (0, 0), "answered, not queued");
    eprintln!("SEEK through the proxy not serving the group took {took:?}");
    let second = insert_direct(&env, 2, 2, "b").await;
    let after = s.recv_n(2, secs(20)).await;
    assert_eq!(row_ids(&after), second, "from the SEEK's position");
    assert_eq!(ack(&mut c, "orders_events", "g", &ids(&after)).await, 2);
    let _ = c.disconnect().await;
    // What was in flight before the SEEK is not sent again when its ack_wait (2 s) passes.
    s.expect_quiet(secs(3), "dropped by the SEEK").await;
    s.close();
}

#[tokio::test]
async fn a_seek_queued_for_a_killed_proxy_is_applied_by_the_next_one() {
    let env = Env::new("evs_seek_queued").await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let other = env.second_proxy();
    let mut a = stream(&env, "* FROM orders_events GROUP 'g'").await;
    let mut b = stream_on(&env, other.port(), "* FROM orders_events GROUP 'g'").await;
    let first = insert_direct(&env, 3, 3, "a").await;
    assert_eq!(row_ids(&a.recv_n(3, secs(20)).await), first);
    env.proxy.kill();
    a.close();
    let mut c = connect(other.port(), &env.db).await;
    let n = exec(&mut c, "SEEK orders_events GROUP 'g' TO LATEST")
        .await
        .unwrap_or_else(|e| panic!("SEEK through the other proxy: {e:?}\n{}", other.log()));
    assert_eq!((n, c.get_warnings()), (0, 1), "queued, with a warning");
    let shown: Vec<(String, u32, String)> = c.query("SHOW WARNINGS").await.expect("warnings");
    assert!(shown[0].2.starts_with("SEEK queued"), "{shown:?}");
    let _ = c.disconnect().await;
    let mut direct = env.direct_conn().await;
    // The next proxy applies the SEEK at its takeover: the three events the killed proxy had
    // in flight are not sent again; what is written after the takeover comes.
    let taken = crate::support::eventually(40, async || {
        let row: Option<Option<String>> = direct
            .exec_first(
                "SELECT answered_by FROM test.msgproxy_stream_groups_requests \
                 WHERE table_schema = ? AND table_name = 'orders_events' AND group_name = 'g'",
                (env.db.as_str(),),
            )
            .await
            .ok()
            .flatten();
        matches!(row, Some(Some(_)))
    })
    .await;
    assert!(taken, "the queued SEEK was not applied\n{}", other.log());
    let _ = direct.disconnect().await;
    let second = insert_direct(&env, 2, 2, "b").await;
    let got = b.recv_n(2, secs(20)).await;
    assert_eq!(row_ids(&got), second, "only what came after the SEEK");
    b.expect_quiet(secs(1), "nothing more").await;
    b.close();
}
