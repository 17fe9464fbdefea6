//! A claim whose COMMIT returns late (on Galera while a node dies, or behind a slow server) sends
//! nothing: sent, its rows could be claimed and sent again by another stream less than one ack
//! wait after this client got them. Nor does it count as an attempt. A trigger that sleeps in the
//! claim's UPDATE makes the claim slow here, on one server.

use std::time::Duration;

use super::harness::{ack, comment, Env};
use crate::support::wait_for_log;

#[tokio::test]
async fn a_claim_that_commits_after_its_window_sends_nothing() {
    let env = Env::new("msg_late_claims").await;
    // Ack wait 1 s, backoff 0.2 s: a claim leaves its rows 1.2 s before they are due again. One
    // attempt: a late claim that counted as one would make the message dead, never delivered.
    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(50)) comment '{}'",
        comment(
            "1",
            10,
            "0.5",
            ",vt_min_backoff=0.2,vt_max_backoff=0.2,vt_max_attempts=1"
        )
    ))
    .await;
    // The stream session's first claim takes 1.5 s: it commits after the row's time_next has
    // passed. Later claims (and acks, which leave epoch alone) are quick.
    env.direct(
        "create trigger slow_first_claim before update on q for each row \
         if new.epoch = coalesce(old.epoch, 0) + 1 and @slept is null then \
         set @slept = sleep(1.5); end if",
    )
    .await;
    let mut stream = env.stream("q").await;
    env.via_proxy("insert into q(id, message) values (1, 'late')")
        .await;

    // The row arrives once, from its second claim, alive ...
    let first = stream
        .recv(Duration::from_secs(20))
        .await
        .expect("message 1 arrives (from its second claim)");
    assert_eq!(first.id, 1);
    // ... and not again within its ack wait (sent after the slow claim's COMMIT, it would have
    // come again at once: that claim's time_next had passed).
    stream
        .expect_quiet(Duration::from_millis(900), "one delivery per ack window")
        .await;
    wait_for_log(
        &env.proxy,
        "are not sent, so that no stream gets them twice",
        5,
    )
    .await;
    assert_eq!(
        env.state("q", 1).await.epoch,
        Some(1),
        "one attempt: the slow claim sent nothing and gave its epoch back"
    );
    let mut conn = env.proxy_conn().await;
    assert_eq!(ack(&mut conn, "q", &[1]).await, 1);
}
