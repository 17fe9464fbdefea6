//! msgproxy SIGKILLed: restarted on the same port, it sends again exactly the unacked messages;
//! of two proxies on one database, the survivor delivers everything once per window.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::{
    ack_all, delivered, insert_sql, inside_windows, is_acked, open_windows, table_sql, take,
    Delivery,
};
use crate::messaging::harness::{assert_each_once, counts, now_ns, secs, Env, Msg, Stream};
use crate::support::opts;

/// After a stream's proxy was killed: what its client had received but the test had not yet
/// taken, until the stream reports its end (which must come within 3 s).
async fn leftovers(stream: &mut Stream, what: &str) -> Vec<Msg> {
    let mut got = Vec::new();
    loop {
        match stream.recv_or_end(secs(3.0)).await {
            Ok(Some(m)) => got.push(m),
            Ok(None) => panic!("{what}: the stream did not end within 3 s of its proxy's death"),
            Err(_) => return got,
        }
    }
}

/// 1. msgproxy SIGKILLed while its streams hold delivered-but-unacked messages and while it is
///    streaming a second wave, then restarted on the same port: every message that was not
///    acked is delivered again, exactly once and only after the window of its claim, and no
///    acked message is ever delivered again.
#[tokio::test]
async fn sigkilled_proxy_restarted_resends_exactly_the_unacked() {
    const N: i64 = 400;
    let env = Env::new("fault_proxy_kill").await;
    // ack_wait 2, min_backoff 2: a claim keeps a row for 3.33..4.67 s.
    env.ddl(&table_sql("k", "2", 5, "1", "varchar(50)")).await;
    let (mut s1, mut s2) = (env.stream("k").await, env.stream("k").await);
    let mut acker = env.proxy_conn().await;
    let mut before: Vec<Delivery> = Vec::new();
    let started = Instant::now();

    // Wave 1 through the proxy, all delivered; two of three acked, the rest held unacked.
    env.via_proxy(&insert_sql("k", 1, 150, 20)).await;
    let deadline = started + secs(3.0);
    let mut wave2_sent = false;
    loop {
        let got = take(&mut [&mut s1, &mut s2], secs(0.05)).await;
        let msgs: Vec<Msg> = got.into_iter().flatten().collect();
        let to_ack: Vec<i64> = msgs.iter().map(|m| m.id).filter(|id| id % 3 != 0).collect();
        ack_all(&mut acker, "k", &to_ack, "before the kill").await;
        before.extend(delivered("old proxy", &msgs));
        let wave1 = before.iter().filter(|d| d.id <= 150).count();
        let wave2 = before.len() - wave1;
        if !wave2_sent && wave1 >= 150 {
            // Wave 2 straight into the server (the binlog brings it): the proxy is killed
            // while it streams it, with batches claimed and on their way.
            env.direct(&insert_sql("k", 151, N, 20)).await;
            wave2_sent = true;
        }
        if wave2 >= 40 || Instant::now() > deadline {
            break;
        }
    }
    assert!(
        wave2_sent,
        "wave 1 not delivered within 3 s: got {} messages\n{}",
        before.len(),
        env.log()
    );
    env.proxy.kill();
    let killed = Instant::now();
    before.extend(delivered(
        "old proxy",
        &leftovers(&mut s1, "stream 1").await,
    ));
    before.extend(delivered(
        "old proxy",
        &leftovers(&mut s2, "stream 2").await,
    ));
    drop((s1, s2, acker));
    let snapshot = env.states("k").await;
    assert_eq!(snapshot.len() as i64, N, "rows in the table");

    // The proxy streamed for less than one window (3.33 s), so nothing may have come twice.
    let per_id = counts(before.iter().map(|d| d.id));
    let twice: Vec<i64> = per_id
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(i, _)| *i)
        .collect();
    assert!(
        twice.is_empty(),
        "delivered twice within {:?} (one ack window is at least 3.33 s): {twice:?}",
        killed - started
    );
    let acked_at_kill: BTreeSet<i64> = snapshot
        .iter()
        .filter(|(_, s)| is_acked(s))
        .map(|(id, _)| *id)
        .collect();
    let held: BTreeSet<i64> = per_id
        .keys()
        .filter(|id| !acked_at_kill.contains(id))
        .copied()
        .collect();
    let windows = open_windows(&snapshot);
    let lost_on_the_way: Vec<i64> = windows
        .keys()
        .filter(|id| !per_id.contains_key(id))
        .copied()
        .collect();
    eprintln!(
        "killed after {:?}: {} delivered ({} acked, {} held unacked), {} claimed but not \
         received, {} never claimed",
        killed - started,
        before.len(),
        acked_at_kill.len(),
        held.len(),
        lost_on_the_way.len(),
        N as usize - windows.len() - acked_at_kill.len()
    );
    assert!(
        held.len() >= 50,
        "the streams should hold the 50 unacked messages of wave 1 and more: {held:?}"
    );
    for id in &held {
        assert_eq!(
            snapshot[id].epoch,
            Some(1),
            "id {id}: delivered once, unacked: claimed exactly once ({:?})",
            snapshot[id]
        );
    }

    env.proxy.restart();
    let restarted = Instant::now();
    let (mut s1, mut s2) = (env.stream("k").await, env.stream("k").await);
    let mut acker = env.proxy_conn().await;
    let want: BTreeSet<i64> = (1..=N).filter(|id| !acked_at_kill.contains(id)).collect();
    let mut after: Vec<Delivery> = Vec::new();
    let mut quiet_since: Option<Instant> = None;
    let deadline = restarted + secs(12.0);
    while Instant::now() < deadline {
        let got = take(&mut [&mut s1, &mut s2], secs(0.1)).await;
        let msgs: Vec<Msg> = got.into_iter().flatten().collect();
        let ids: Vec<i64> = msgs.iter().map(|m| m.id).collect();
        // Every message is acked at once now; a repeat of one would show in the affected rows,
        // so ack only what was not seen before (and count the repeats below).
        let fresh: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !after.iter().any(|d| d.id == *id) && !acked_at_kill.contains(id))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ack_all(&mut acker, "k", &fresh, "after the restart").await;
        after.extend(delivered("restarted proxy", &msgs));
        let seen: BTreeSet<i64> = after.iter().map(|d| d.id).collect();
        if want.is_subset(&seen) {
            // Listen one more second for late repeats.
            let since = *quiet_since.get_or_insert_with(Instant::now);
            if since.elapsed() > secs(1.0) {
                break;
            }
        }
    }
    let again_acked: Vec<i64> = after
        .iter()
        .map(|d| d.id)
        .filter(|id| acked_at_kill.contains(id))
        .collect();
    assert!(
        again_acked.is_empty(),
        "acked before the kill, delivered again after the restart: {again_acked:?}"
    );
    let early = inside_windows(&after, &windows);
    assert!(
        early.is_empty(),
        "sent again within the window of the killed proxy's claim: {early:#?}"
    );
    let after_ids: Vec<i64> = after.iter().map(|d| d.id).collect();
    assert_each_once(
        &after_ids,
        want.iter().copied(),
        "after the restart, every message not acked before the kill",
    );
    let states = env.states("k").await;
    let unacked: Vec<i64> = states
        .iter()
        .filter(|(_, s)| !is_acked(s))
        .map(|(id, _)| *id)
        .collect();
    assert!(unacked.is_empty(), "unacked at the end: {unacked:?}");
    let held_back: Vec<i64> = after
        .iter()
        .filter(|d| held.contains(&d.id))
        .map(|d| d.at_ns)
        .collect();
    eprintln!(
        "after the restart: {} delivered, the {} held ones {:.2}..{:.2} s after the kill",
        after.len(),
        held_back.len(),
        held_back.iter().min().map_or(0, |t| *t - ns_at(killed)) as f64 / 1e9,
        held_back.iter().max().map_or(0, |t| *t - ns_at(killed)) as f64 / 1e9,
    );
    env.proxy.assert_alive();
}

/// The wall clock (Unix ns) at `instant` (which lies in the past).
fn ns_at(instant: Instant) -> i64 {
    now_ns() - instant.elapsed().as_nanos() as i64
}

/// 5. Two proxies on one database, one stream each; rows keep coming; proxy A is SIGKILLed
///    while its stream holds unacked messages. Proxy B delivers everything, and the only
///    messages that come twice are those A delivered and nobody acked — each exactly twice, the
///    second time by B after the window of A's claim.
#[tokio::test]
async fn one_of_two_proxies_sigkilled_the_survivor_delivers_everything_once_per_window() {
    const N: i64 = 300;
    let env = Env::new("fault_two_proxies").await;
    env.ddl(&table_sql("two", "2", 5, "1", "varchar(50)")).await;
    let proxy_b = env.second_proxy();
    let mut a = env.stream_on(&env.proxy, "two").await;
    let mut b = env.stream_on(&proxy_b, "two").await;
    let mut ack_a = crate::messaging::harness::connect(env.proxy.port(), &env.db).await;
    let mut ack_b = crate::messaging::harness::connect(proxy_b.port(), &env.db).await;

    // Rows straight into the server, 50 at a time, while both proxies stream.
    let (port, db) = (env.server.port(), env.db.clone());
    let writer = tokio::spawn(async move {
        let mut c = Conn::new(opts(port, "root", None, Some(&db)))
            .await
            .expect("connect");
        for chunk in 0..N / 50 {
            let sql = insert_sql("two", chunk * 50 + 1, chunk * 50 + 50, 20);
            c.query_drop(&sql).await.expect("insert");
            // The producer's pace (a batch every 150 ms) is part of the load under test.
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    });
    let started = Instant::now();
    let mut log: Vec<Delivery> = Vec::new();
    let mut acked_by_a: BTreeSet<i64> = BTreeSet::new();
    let deadline = started + secs(3.0);
    // A acks even ids only; B acks everything.
    loop {
        let got = take(&mut [&mut a, &mut b], secs(0.05)).await;
        let (got_a, got_b) = (&got[0], &got[1]);
        let even: Vec<i64> = got_a
            .iter()
            .map(|m| m.id)
            .filter(|id| id % 2 == 0)
            .collect();
        ack_all(&mut ack_a, "two", &even, "proxy A").await;
        acked_by_a.extend(even);
        let all_b: Vec<i64> = got_b.iter().map(|m| m.id).collect();
        ack_all(&mut ack_b, "two", &all_b, "proxy B").await;
        log.extend(delivered("A", got_a));
        log.extend(delivered("B", got_b));
        let from_a = log.iter().filter(|d| d.by == "A").count();
        if from_a >= 30 || Instant::now() > deadline {
            break;
        }
    }
    env.proxy.kill();
    let killed = Instant::now();
    log.extend(delivered("A", &leftovers(&mut a, "proxy A's stream").await));
    drop((a, ack_a));
    let snapshot = env.states("two").await;
    let windows = open_windows(&snapshot);
    let held: BTreeSet<i64> = log
        .iter()
        .filter(|d| d.by == "A" && !acked_by_a.contains(&d.id))
        .map(|d| d.id)
        .collect();
    assert!(
        held.len() >= 5,
        "proxy A should hold unacked messages when it is killed: {held:?} of {} deliveries",
        log.len()
    );
    for id in &held {
        let s = snapshot[id];
        assert!(
            !is_acked(&s) && s.epoch == Some(1),
            "id {id}: delivered by A, not acked: claimed exactly once by the kill ({s:?})"
        );
    }
    let before_kill = log.len();

    // B alone: until every row is acked, then one more second for late repeats.
    let deadline = killed + secs(12.0);
    let mut quiet_since: Option<Instant> = None;
    let mut acked_by_b: BTreeSet<i64> = log.iter().filter(|d| d.by == "B").map(|d| d.id).collect();
    while Instant::now() < deadline {
        let got = take(&mut [&mut b], secs(0.1)).await;
        let msgs = &got[0];
        let fresh: Vec<i64> = msgs
            .iter()
            .map(|m| m.id)
            .filter(|id| !acked_by_b.contains(id) && !acked_by_a.contains(id))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ack_all(&mut ack_b, "two", &fresh, "proxy B after the kill").await;
        acked_by_b.extend(fresh);
        log.extend(delivered("B", msgs));
        let done = writer.is_finished()
            && (1..=N).all(|id| acked_by_a.contains(&id) || acked_by_b.contains(&id));
        if done {
            let since = *quiet_since.get_or_insert_with(Instant::now);
            if since.elapsed() > secs(1.0) {
                break;
            }
        }
    }
    writer.await.expect("writer");

    // Every id: delivered; more than once only if A had it unacked, then once more by B after
    // the window of A's claim.
    let mut by_id: BTreeMap<i64, Vec<&Delivery>> = BTreeMap::new();
    for d in &log {
        by_id.entry(d.id).or_default().push(d);
    }
    let missing: Vec<i64> = (1..=N).filter(|id| !by_id.contains_key(id)).collect();
    let mut wrong = Vec::new();
    for (id, ds) in &by_id {
        if ds.len() == 1 {
            continue;
        }
        let allowed = ds.len() == 2
            && ds[0].by == "A"
            && held.contains(id)
            && ds[1].by == "B"
            && windows.get(id).is_some_and(|until| ds[1].at_ns >= *until);
        if !allowed {
            let list: Vec<String> = ds
                .iter()
                .map(|d| {
                    format!(
                        "{} at {:.3} s",
                        d.by,
                        (d.at_ns - ns_at(started)) as f64 / 1e9
                    )
                })
                .collect();
            wrong.push(format!(
                "{id}: {} (window of the snapshot claim ends {:?} s)",
                list.join(", "),
                windows.get(id).map(|t| (t - ns_at(started)) as f64 / 1e9)
            ));
        }
    }
    // Rows A had claimed but its client never got (in flight at the kill) were claimed twice
    // (final epoch 2): B's one delivery must wait for A's window too. (Epoch 1: the open claim
    // in the snapshot was B's own, delivered just after the snapshot.)
    let final_states = env.states("two").await;
    for (id, until) in &windows {
        let ds = &by_id[id];
        if ds.len() == 1 && final_states[id].epoch == Some(2) && ds[0].at_ns < *until {
            wrong.push(format!(
                "{id}: claimed by A but never received, sent by B {:.3} s before A's window ended",
                (*until - ds[0].at_ns) as f64 / 1e9
            ));
        }
    }
    let not_back: Vec<i64> = held
        .iter()
        .filter(|id| by_id[id].len() < 2)
        .copied()
        .collect();
    let unacked: Vec<i64> = final_states
        .iter()
        .filter(|(_, s)| !is_acked(s))
        .map(|(id, _)| *id)
        .collect();
    eprintln!(
        "A killed after {:?}: {before_kill} deliveries by then ({} held by A); {} in all",
        killed - started,
        held.len(),
        log.len()
    );
    assert!(
        missing.is_empty() && wrong.is_empty() && not_back.is_empty() && unacked.is_empty(),
        "never delivered: {missing:?}\ndelivered more than once, not as allowed: {wrong:#?}\n\
         held by the killed proxy and never delivered again: {not_back:?}\nunacked at the end: \
         {unacked:?}\n--- proxy B log ---\n{}",
        crate::messaging::harness::log_tail(&proxy_b)
    );
    proxy_b.assert_alive();
}
