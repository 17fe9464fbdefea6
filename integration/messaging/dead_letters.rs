//! Poison messages (MESSAGING.md §9): `vt_max_attempts` makes a message sent that often without an
//! ack dead once its last ack wait passes — in place (`time_next` at the bigint maximum) or moved
//! to the `vt_dead_letter` table in the claim's transaction — never sent again, counted, and
//! brought back by `REDRIVE`.

use mysql_async::prelude::Queryable;

use super::harness::{ack, exec, secs, Env};
use super::work_queue::{eventually, show_row};
use crate::support::metrics::{sample, scrape};
use crate::support::process::free_port;
use crate::support::{wait_for_log, Failure, MariaDb};

/// ack wait 0.5 s and no backoff: a sent message is due again 0.5 s later.
fn comment(extra: &str) -> String {
    format!(
        "vitess_message,vt_ack_wait=0.5,vt_min_backoff=0,vt_purge_after=60,vt_batch_size=10,\
         vt_cache_size=100,vt_poller_interval=0.5{extra}"
    )
}

async fn env_with_metrics(db: &str, metrics_port: u16) -> Env {
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
    env
}

const DEAD: i64 = i64::MAX;

/// Waits until `SHOW MESSAGE TABLES` shows `want` dead messages in `table` (counted at each purge
/// tick, every 0.5 s here).
async fn dead_shown(env: &Env, table: &str, want: &str) {
    eventually(secs(5.0), &format!("Dead = {want}"), || async {
        let dead = show_row(env, table).await["Dead"].clone();
        (dead != want).then_some(dead)
    })
    .await;
}

#[tokio::test]
async fn a_message_sent_max_attempts_times_dies_in_place_and_comes_back_with_redrive() {
    let mport = free_port();
    let env = env_with_metrics("msg_dead_in_place", mport).await;
    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
         message varchar(50), index next_idx(time_next, epoch)) comment '{}'",
        comment(",vt_max_attempts=2")
    ))
    .await;
    env.via_proxy("insert into q(id, message) values (1, 'poison'), (2, 'fine')")
        .await;
    let mut s = env.stream("q").await;
    let first = s.recv_n(2, secs(5.0)).await;
    assert_eq!(first.len(), 2);
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "q", &[2]).await, 1);
    let again = s.recv(secs(5.0)).await.expect("the second attempt");
    assert_eq!(again.id, 1);
    s.expect_quiet(secs(2.5), "two attempts and no more").await;
    let row = env.state("q", 1).await;
    assert_eq!(
        (row.time_next, row.epoch, row.time_acked),
        (Some(DEAD), Some(2), None),
        "dead in place, visible to plain SQL"
    );
    let dead: Option<i64> = c
        .query_first("select count(*) from q where time_next = 9223372036854775807")
        .await
        .expect("plain SQL");
    assert_eq!(dead, Some(1));
    dead_shown(&env, "q", "1").await;
    let labels = [("schema", "msg_dead_in_place"), ("table", "q")];
    assert_eq!(
        sample(
            &scrape(mport).await,
            "msgproxy_message_dead_lettered_total",
            &labels
        ),
        Some(1.0)
    );
    // NACK and EXTEND leave dead messages alone; REDRIVE brings them back with epoch 0.
    assert_eq!(exec(&mut c, "NACK q 1").await.expect("NACK"), 0);
    assert_eq!(exec(&mut c, "EXTEND q 1 BY 10").await.expect("EXTEND"), 0);
    assert_eq!(exec(&mut c, "REDRIVE q").await.expect("REDRIVE"), 1);
    let back = s.recv(secs(5.0)).await.expect("redriven");
    assert_eq!(back.id, 1);
    assert_eq!(
        env.state("q", 1).await.epoch,
        Some(1),
        "attempts start again"
    );
    assert_eq!(exec(&mut c, "REDRIVE q 1, 2").await.expect("REDRIVE"), 0);
    dead_shown(&env, "q", "0").await;
    assert_eq!(
        sample(
            &scrape(mport).await,
            "msgproxy_message_redriven_total",
            &labels
        ),
        Some(1.0)
    );
    let _ = c.disconnect().await;
}

#[tokio::test]
async fn a_dead_message_moves_to_the_dead_letter_table_and_back() {
    let env = env_with_metrics("msg_dead_moved", free_port()).await;
    env.ddl(
        "create table q_dead(id bigint primary key, message varchar(50), dead_at bigint, \
         attempts int, reason varchar(100))",
    )
    .await;
    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
         message varchar(50)) comment '{}'",
        comment(",vt_max_attempts=1,vt_dead_letter=q_dead")
    ))
    .await;
    env.via_proxy(
        "insert into q(id, message) values (1, 'poison'), (2, 'fine'), (3, 'also poison')",
    )
    .await;
    let mut s = env.stream("q").await;
    s.recv_n(3, secs(5.0)).await;
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "q", &[2]).await, 1);
    s.expect_quiet(secs(2.5), "one attempt and no more").await;
    let left: Vec<i64> = env.states("q").await.into_keys().collect();
    assert_eq!(left, [2], "the dead rows left the message table");
    type DeadRow = (i64, String, i64, i64, String);
    let moved: Vec<DeadRow> = c
        .query("select id, message, dead_at, attempts, reason from q_dead order by id")
        .await
        .expect("read q_dead");
    assert_eq!(moved.len(), 2, "{moved:?}");
    assert_eq!((moved[0].0, moved[0].1.as_str()), (1, "poison"));
    assert!(moved[0].2 > 0, "dead_at is set: {moved:?}");
    assert_eq!(
        (moved[0].3, moved[0].4.as_str()),
        (1, "max attempts reached")
    );
    dead_shown(&env, "q", "2").await;

    assert_eq!(exec(&mut c, "REDRIVE q 1").await.expect("REDRIVE"), 1);
    let back = s.recv(secs(5.0)).await.expect("redriven");
    assert_eq!(back.id, 1);
    let still: Vec<i64> = c.query("select id from q_dead").await.expect("read q_dead");
    assert_eq!(still, [3]);
    // Inside the client's transaction, a rollback undoes it.
    exec(&mut c, "BEGIN").await.expect("BEGIN");
    assert_eq!(exec(&mut c, "REDRIVE q").await.expect("REDRIVE"), 1);
    exec(&mut c, "ROLLBACK").await.expect("ROLLBACK");
    let still: Vec<i64> = c.query("select id from q_dead").await.expect("read q_dead");
    assert_eq!(still, [3], "rolled back with the client's transaction");
    assert_eq!(exec(&mut c, "REDRIVE q").await.expect("REDRIVE"), 1);
    assert_eq!(s.recv(secs(5.0)).await.expect("redriven").id, 3);
    let _ = c.disconnect().await;
}

#[tokio::test]
async fn a_dead_letter_table_that_does_not_fit_is_an_error() {
    let env = Env::new("msg_dead_broken").await;
    env.ddl("create table wrong(id bigint primary key)").await;
    for (name, table, says) in [
        ("a", "nope", "does not exist"),
        ("b", "wrong", "lacks column(s) message"),
    ] {
        env.ddl(&format!(
            "create table {name}(id bigint primary key, time_next bigint, epoch bigint, \
             time_acked bigint, message varchar(50)) comment '{}'",
            comment(&format!(",vt_max_attempts=1,vt_dead_letter={table}"))
        ))
        .await;
        let mut c = env.proxy_conn().await;
        match exec(&mut c, &format!("STREAM * FROM {name}")).await {
            Err(Failure::Server {
                code: 1347,
                message,
                ..
            }) if message.contains(says) => {}
            other => panic!("{name}: {other:?}, expected 1347 saying {says:?}"),
        }
        let _ = c.disconnect().await;
        env.ddl(&format!("drop table {name}")).await;
    }
}
