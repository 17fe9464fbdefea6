//! `--claim-pace`: the manager holds due rows back between claims while the server's commits
//! queue up. Held rows must still go out (the manager wakes for them), each once.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mysql_async::Conn;

use super::harness::{ack, comment, counts, exec, secs, Env, Stream};
use crate::ops::{scrape, table_value};
use crate::support::process::free_port;

/// Three producers (two through the proxy, one straight to the server) insert 400 single-row
/// messages as fast as they can while two streams consume and ack at once, with pacing turned
/// up to its maximum so that nearly every hand-out waits. Every message arrives, none twice; the
/// metrics show the pacer holding rows back and claims carrying several messages each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paced_claims_deliver_every_message_once() {
    let mport = free_port();
    let listen = format!("127.0.0.1:{mport}");
    let env = Env::private_with(
        "msg_paced",
        &["--claim-pace", "100", "--metrics-listen", &listen],
    )
    .await;
    env.ddl(&format!(
        "create table paced(id bigint primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(50)) comment '{}'",
        comment("10", 50, "1", "")
    ))
    .await;
    let s1 = env.stream("paced").await;
    let s2 = env.stream("paced").await;
    let ack1 = env.proxy_conn().await;
    let ack2 = env.proxy_conn().await;

    const N: i64 = 400;
    let acked = RefCell::new(BTreeSet::new());
    let delivered: RefCell<Vec<i64>> = RefCell::new(Vec::new());
    let started = Instant::now();
    let deadline = started + secs(20.0);
    let consume = |mut stream: Stream, mut conn: Conn| {
        let (acked, delivered) = (&acked, &delivered);
        async move {
            let mut quiet_since: Option<Instant> = None;
            while Instant::now() < deadline {
                // Keep listening a second after the last ack: late duplicates.
                if acked.borrow().len() as i64 == N
                    && quiet_since.get_or_insert_with(Instant::now).elapsed() > secs(1.0)
                {
                    break;
                }
                if let Some(m) = stream.recv(Duration::from_millis(100)).await {
                    ack(&mut conn, "paced", &[m.id]).await;
                    acked.borrow_mut().insert(m.id);
                    delivered.borrow_mut().push(m.id);
                }
            }
            stream.close();
        }
    };
    let insert = |port: u16, which: i64| {
        let db = env.db.clone();
        async move {
            let mut c = super::harness::connect(port, &db).await;
            for id in (1..=N).filter(|i| i % 3 == which) {
                exec(
                    &mut c,
                    &format!("insert into paced(id, message) values ({id}, 'm')"),
                )
                .await
                .expect("insert");
            }
        }
    };
    tokio::join!(
        consume(s1, ack1),
        consume(s2, ack2),
        insert(env.proxy.port(), 0),
        insert(env.proxy.port(), 1),
        insert(env.server.port(), 2),
    );
    let per_id = counts(delivered.into_inner());
    let twice: Vec<i64> = per_id
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    let missing: Vec<i64> = (1..=N).filter(|i| !per_id.contains_key(i)).collect();
    assert!(
        twice.is_empty() && missing.is_empty(),
        "delivered twice: {twice:?}\nnever delivered within 20 s: {missing:?}\n{}",
        env.log()
    );
    let page = scrape(mport).await;
    let [sent, claims, waits] = [
        "msgproxy_message_sent_total",
        "msgproxy_message_claims_total",
        "msgproxy_message_claim_waits_total",
    ]
    .map(|name| table_value(&page, name, &env.db, "paced"));
    eprintln!(
        "{N} messages delivered once in {:?}: {claims} claims, {waits} pacing waits",
        started.elapsed()
    );
    assert_eq!(sent, N as f64, "every message sent once");
    assert!(
        waits > 0.0 && claims < N as f64 / 8.0,
        "with --claim-pace 100 under load the pacer should hold rows back and claims carry \
         several messages: {claims} claims for {N} messages, {waits} waits"
    );
    env.server.stop();
}
