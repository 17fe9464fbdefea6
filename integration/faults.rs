//! Faults on purpose (issue 6): the proxy SIGKILLed and restarted, the backend restarted under
//! load, a consumer that stops reading its socket, clients that vanish in the middle of a stream
//! batch, a large result or a `LOAD DATA LOCAL INFILE`, and one of two proxies SIGKILLed
//! mid-stream. Every test counts every message, so each one fails when msgproxy loses a message
//! or sends one again within its ack window.
//!
//! How "within its ack window" is checked exactly: a claim writes the row's next `time_next`
//! (ack wait plus backoff) before the row is sent, and nobody may claim the row again before
//! that moment. When a proxy is killed, its claims stay in the table as they were; a snapshot of
//! the table taken right after the kill therefore says, for every row the dead proxy had
//! claimed and nobody acked, the earliest moment (Unix ns) a second delivery is allowed. The
//! clients stamp every message with the wall clock when it arrives (after its claim), so a
//! delivery stamped before that moment is a repeat within the window — no timing tolerance.
//!
//! The tables here purge only after 600 s, so "acked" can be read back from the database.
//!
//! Run alone: `cargo test --test integration faults:: -- --test-threads=5` (about 10 s; about 30 s
//! one at a time).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::binlog::{Consumer, Seen};
use crate::messaging::harness::{
    assert_each_once, counts, exec, now_ns, secs, Env, Msg, RowState, Stream,
};
use crate::support::raw::{self, RawConn, RawError};
use crate::support::{eventually, opts, Failure};

/// A message table of the RFC's shape whose acked rows stay for 600 s (so the tests can read
/// `time_acked` back), with a message column of type `message_type`.
fn table_sql(name: &str, ack_wait: &str, batch: u32, poll: &str, message_type: &str) -> String {
    format!(
        "CREATE TABLE `{name}` (id bigint PRIMARY KEY, time_next bigint, epoch bigint, \
         time_acked bigint, message {message_type}) COMMENT 'vitess_message,\
         vt_ack_wait={ack_wait},vt_purge_after=600,vt_batch_size={batch},vt_cache_size=1000,\
         vt_poller_interval={poll}'"
    )
}

/// One multi-row insert of ids `from..=to` (MariaDB's sequence engine), each message `bytes`
/// long.
fn insert_sql(table: &str, from: i64, to: i64, bytes: usize) -> String {
    format!(
        "INSERT INTO `{table}` (id, message) SELECT seq, RPAD(CONCAT('m', seq, '-'), {bytes}, \
         CHAR(65 + seq % 26)) FROM seq_{from}_to_{to}"
    )
}

fn is_acked(s: &RowState) -> bool {
    s.time_acked.is_some_and(|t| t != 0)
}

/// One message as a consumer got it.
#[derive(Debug, Clone)]
struct Delivery {
    id: i64,
    by: &'static str,
    at_ns: i64,
}

fn delivered(by: &'static str, msgs: &[Msg]) -> Vec<Delivery> {
    msgs.iter()
        .map(|m| Delivery {
            id: m.id,
            by,
            at_ns: m.at_ns,
        })
        .collect()
}

/// Waits up to `wait` for messages on any of `streams`; returns what has arrived (per stream,
/// in order), at least one message unless `wait` passed.
async fn take(streams: &mut [&mut Stream], wait: Duration) -> Vec<Vec<Msg>> {
    let deadline = Instant::now() + wait;
    loop {
        let mut got = Vec::with_capacity(streams.len());
        for s in streams.iter_mut() {
            got.push(s.ready().await);
        }
        if got.iter().any(|g| !g.is_empty()) || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `ACK table ids` through `conn`; panics unless every id was newly acked.
async fn ack_all(conn: &mut Conn, table: &str, ids: &[i64], what: &str) {
    if ids.is_empty() {
        return;
    }
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    let sql = format!("ACK {table} {}", list.join(", "));
    let n = exec(conn, &sql)
        .await
        .unwrap_or_else(|e| panic!("{what}: {sql}: {e:?}"));
    assert_eq!(
        n,
        ids.len() as u64,
        "{what}: {sql} acked {n} rows; each id was delivered once and never acked"
    );
}

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

/// The rows a killed proxy had claimed and nobody had acked: id → the `time_next` its claim
/// wrote, before which no one may send the row again.
fn open_windows(snapshot: &BTreeMap<i64, RowState>) -> BTreeMap<i64, i64> {
    snapshot
        .iter()
        .filter(|(_, s)| !is_acked(s) && s.epoch.unwrap_or(0) > 0)
        .map(|(id, s)| (*id, s.time_next.unwrap_or(0)))
        .collect()
}

/// Deliveries that came before the window of the claim in `windows` had passed.
fn inside_windows(after: &[Delivery], windows: &BTreeMap<i64, i64>) -> Vec<String> {
    after
        .iter()
        .filter_map(|d| {
            let until = *windows.get(&d.id)?;
            (d.at_ns < until).then(|| {
                format!(
                    "id {} to {} {:.3} s before its window ended",
                    d.id,
                    d.by,
                    (until - d.at_ns) as f64 / 1e9
                )
            })
        })
        .collect()
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

/// What went wrong for a client, in a form that can be listed: a server's error code (the
/// proxy's own or the backend's), or the client-side kind (`io`: the connection was closed).
fn failure_kind(f: &Failure) -> String {
    match f {
        Failure::Server { code, .. } => code.to_string(),
        Failure::Client(kind) => kind.clone(),
    }
}

/// The same for an error text of mysql_async (`Server error: `ERROR 08S01 (1158): ...'`).
fn error_text_kind(text: &str) -> String {
    if let Some(rest) = text.split("Server error: `ERROR ").nth(1) {
        if let Some(code) = rest
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map(|(c, _)| c)
        {
            return code.to_string();
        }
    }
    if text.starts_with("Input/output error") {
        return "io".into();
    }
    text.split(':').next().unwrap_or(text).to_string()
}

/// Error codes a client may get when the backend goes away: the proxy's own 1158 (lost the
/// backend mid-command) and 1429 (cannot reach it at connect), the server's 1053 (shutdown in
/// progress) and 1927 (connection killed), and 2006 (gone away); `io` is a closed connection,
/// which is what a client connected directly sees when the server dies between commands.
const BACKEND_LOSS: &[&str] = &["1158", "1429", "2006", "1053", "1927", "io"];

/// 2. The backend restarted (cleanly, then by SIGKILL) while clients stream, insert and ack
///    through the proxy: the proxy survives; clients get proper errors; new connections work as
///    soon as the server is back; streams are told at once and can be opened again; every
///    committed insert is delivered; every ack that got an OK stays acked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_restarts_under_load_lose_nothing_committed() {
    const N: i64 = 300;
    let env = Env::private("fault_backend_restart").await;
    let server = env.server;
    // ack_wait 2, min_backoff 2: a claim keeps a row for 3.33..4.67 s.
    env.ddl(&table_sql("r", "2", 10, "1", "varchar(50)")).await;
    let port = env.proxy.port();
    let db = env.db.clone();
    let consumers = vec![
        Consumer::start(port, &db, "r"),
        Consumer::start(port, &db, "r"),
    ];
    for c in &consumers {
        c.wait_open(1, 10).await;
    }

    // The writer inserts ids 1..=N through the proxy, one a statement, retrying an id until it
    // is in; an id is committed when its INSERT got an OK, or a duplicate-key error on a retry.
    let writer = {
        let db = db.clone();
        tokio::spawn(async move {
            let mut committed: Vec<i64> = Vec::new();
            let mut errors: Vec<String> = Vec::new();
            let mut conn: Option<Conn> = None;
            let mut id = 1;
            while id <= N {
                let Some(c) = conn.as_mut() else {
                    match Conn::new(opts(port, "root", None, Some(&db))).await {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            errors.push(format!("connect: {}", failure_kind(&Failure::of(&e))));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    continue;
                };
                match c
                    .query_drop(format!(
                        "INSERT INTO r (id, message) VALUES ({id}, 'm{id}')"
                    ))
                    .await
                {
                    Ok(()) => {
                        committed.push(id);
                        id += 1;
                    }
                    Err(mysql_async::Error::Server(e)) if e.code == 1062 => {
                        committed.push(id);
                        id += 1;
                    }
                    Err(e) => {
                        errors.push(format!("insert: {}", failure_kind(&Failure::of(&e))));
                        conn = None;
                    }
                }
                tokio::time::sleep(Duration::from_millis(8)).await;
            }
            (committed, errors)
        })
    };

    // The consumers, and their deliveries, acks (through the proxy, retried after errors) and
    // stream endings.
    struct Books {
        consumers: Vec<Consumer>,
        port: u16,
        db: String,
        deliveries: Vec<(i64, Instant)>,
        pending: BTreeSet<i64>,
        acked_ok: BTreeMap<i64, Instant>,
        ack_errors: Vec<String>,
        ends: Vec<(Instant, String)>,
        acker: Option<Conn>,
        /// No new ack connection before this (after one failed).
        reconnect_at: Instant,
    }
    let mut books = Books {
        consumers,
        port,
        db: db.clone(),
        deliveries: Vec::new(),
        pending: BTreeSet::new(),
        acked_ok: BTreeMap::new(),
        ack_errors: Vec::new(),
        ends: Vec::new(),
        acker: None,
        reconnect_at: Instant::now(),
    };
    impl Books {
        /// Takes in what the streams delivered and acks it, for `time`.
        async fn pump(&mut self, time: Duration) {
            let until = Instant::now() + time;
            loop {
                for c in self.consumers.iter_mut() {
                    while let Some(seen) = c.next(Duration::ZERO).await {
                        match seen {
                            Seen::Message { id, at } => {
                                self.deliveries.push((id, at));
                                if !self.acked_ok.contains_key(&id) {
                                    self.pending.insert(id);
                                }
                            }
                            Seen::Ended(e) => self.ends.push((Instant::now(), e)),
                        }
                    }
                }
                if !self.pending.is_empty() {
                    if self.acker.is_none() && Instant::now() >= self.reconnect_at {
                        match Conn::new(opts(self.port, "root", None, Some(&self.db))).await {
                            Ok(c) => self.acker = Some(c),
                            Err(e) => {
                                self.ack_errors
                                    .push(format!("connect: {}", failure_kind(&Failure::of(&e))));
                                self.reconnect_at = Instant::now() + secs(0.1);
                            }
                        }
                    }
                    if let Some(c) = self.acker.as_mut() {
                        let ids: Vec<i64> = self.pending.iter().copied().collect();
                        let list: Vec<String> = ids.iter().map(i64::to_string).collect();
                        match c.query_drop(format!("ACK r {}", list.join(", "))).await {
                            Ok(()) => {
                                let now = Instant::now();
                                for id in ids {
                                    self.acked_ok.insert(id, now);
                                    self.pending.remove(&id);
                                }
                            }
                            Err(e) => {
                                self.ack_errors
                                    .push(format!("ack: {}", failure_kind(&Failure::of(&e))));
                                self.acker = None;
                            }
                        }
                    }
                }
                if Instant::now() >= until {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }

        /// Pumps while `task` (stopping or restarting the server) runs; returns its result.
        async fn pump_during<T>(&mut self, task: tokio::task::JoinHandle<T>) -> T {
            while !task.is_finished() {
                self.pump(secs(0.05)).await;
            }
            task.await.expect("the server task")
        }
    }

    let mut outages = Vec::new();
    for (n, crash) in [(1usize, false), (2, true)] {
        books.pump(secs(1.5)).await;
        let ends_before = books.ends.len();
        // The clients keep going while the server goes down and comes back.
        let stopping =
            tokio::task::spawn_blocking(move || if crash { server.kill() } else { server.stop() });
        books.pump_during(stopping).await;
        let gone = Instant::now();
        // While it is down: a new session gets an error at once (not a hang).
        let refused =
            tokio::time::timeout(secs(5.0), Conn::new(opts(port, "root", None, Some(&db))))
                .await
                .expect("connect while the backend is down: no answer within 5 s")
                .map(|_| ())
                .map_err(|e| Failure::of(&e));
        books.pump(secs(0.5)).await;
        let restart_began = Instant::now();
        books
            .pump_during(tokio::task::spawn_blocking(move || server.restart()))
            .await;
        let back = Instant::now();
        // The server accepts connections: so does the proxy, at the first try.
        let mut fresh = Conn::new(opts(port, "root", None, Some(&db)))
            .await
            .unwrap_or_else(|e| panic!("first connection after restart {n}: {e}\n{}", env.log()));
        let one: Option<i64> = fresh.query_first("SELECT 1").await.expect("SELECT 1");
        assert_eq!(one, Some(1));
        drop(fresh);
        let ends = &books.ends[ends_before..];
        let ended: Vec<f64> = ends
            .iter()
            .map(|(at, _)| at.saturating_duration_since(gone).as_secs_f64())
            .collect();
        outages.push(format!(
            "restart {n} ({}): down for {:.2} s; connecting while down: {}; streams ended \
             {ended:.2?} s after the server was gone",
            if crash { "SIGKILL" } else { "clean" },
            (back - gone).as_secs_f64(),
            refused.as_ref().map_or_else(failure_kind, |_| "OK".into()),
        ));
        assert!(
            matches!(&refused, Err(Failure::Server { code: 1429, .. })),
            "restart {n}: connecting while the backend is down: {refused:?}"
        );
        // Each stream is told when its backend connection dies, while the server is down — not
        // at its next message (after the restart) or its next keepalive (60 s).
        assert!(
            ends.iter().filter(|(at, _)| *at <= restart_began).count() >= books.consumers.len(),
            "restart {n}: every stream should end while its server is down (before the restart \
             began {:.2} s after the server was gone); ended {ended:.2?} s after it ({ends:?})",
            (restart_began - gone).as_secs_f64()
        );
        for c in &books.consumers {
            c.wait_open(n + 1, 10).await;
        }
        env.proxy.assert_alive();
    }
    let (committed, insert_errors) = loop {
        books.pump(secs(0.2)).await;
        if writer.is_finished() {
            break writer.await.expect("writer");
        }
    };
    let deadline = Instant::now() + secs(12.0);
    while Instant::now() < deadline
        && !(committed.iter().all(|id| books.acked_ok.contains_key(id)) && books.pending.is_empty())
    {
        books.pump(secs(0.2)).await;
    }
    books.pump(secs(1.0)).await;
    books.consumers.clear();

    for line in &outages {
        eprintln!("{line}");
    }
    let stream_errors: Vec<String> = books.ends.iter().map(|(_, e)| error_text_kind(e)).collect();
    eprintln!(
        "errors: inserts {:?}; acks {:?}; streams {:?}",
        counts_of(&insert_errors),
        counts_of(&books.ack_errors),
        counts_of(&stream_errors)
    );
    let odd: Vec<&String> = insert_errors
        .iter()
        .chain(&books.ack_errors)
        .chain(&stream_errors)
        .filter(|e| !BACKEND_LOSS.contains(&e.rsplit(": ").next().unwrap_or(e)))
        .collect();
    assert!(
        odd.is_empty(),
        "unexpected errors: {odd:?}\nstream ends: {:?}",
        books.ends
    );

    let per_id: BTreeMap<i64, Vec<Instant>> =
        books
            .deliveries
            .iter()
            .fold(BTreeMap::new(), |mut m, (id, at)| {
                m.entry(*id).or_insert_with(Vec::new).push(*at);
                m
            });
    let lost: Vec<i64> = committed
        .iter()
        .filter(|id| !per_id.contains_key(id))
        .copied()
        .collect();
    let states = env.states("r").await;
    let not_acked: Vec<(i64, Option<RowState>)> = books
        .acked_ok
        .keys()
        .filter(|id| !states.get(id).is_some_and(is_acked))
        .map(|id| (*id, states.get(id).copied()))
        .collect();
    // An acked message is never sent again (a delivery claimed just before the ack may arrive a
    // moment after it; one claimed later would have come at least 3.33 s later).
    let after_ack: Vec<(i64, f64)> = per_id
        .iter()
        .flat_map(|(id, ats)| {
            let acked = books.acked_ok.get(id).copied();
            ats.iter().filter_map(move |at| {
                let acked = acked?;
                (*at > acked + secs(1.0)).then(|| (*id, (*at - acked).as_secs_f64()))
            })
        })
        .collect();
    // Two deliveries of one id at least one window apart (3.33 s from the claim; the claim
    // comes before the first delivery, so allow 1 s of delivery latency).
    let too_close: Vec<(i64, f64)> = per_id
        .iter()
        .flat_map(|(id, ats)| {
            ats.windows(2).filter_map(move |w| {
                let gap = (w[1] - w[0]).as_secs_f64();
                (gap < 2.33).then_some((*id, gap))
            })
        })
        .collect();
    let repeated = per_id.values().filter(|v| v.len() > 1).count();
    eprintln!(
        "{} committed ({} in the table), {} delivered ({repeated} more than once), {} acks OK",
        committed.len(),
        states.len(),
        per_id.len(),
        books.acked_ok.len()
    );
    assert!(
        lost.is_empty() && not_acked.is_empty() && after_ack.is_empty() && too_close.is_empty(),
        "committed, never delivered: {lost:?}\nack got OK, row not acked: {not_acked:?}\n\
         delivered after its ack (s after): {after_ack:?}\ndelivered twice within a window \
         (gap s): {too_close:?}\n--- proxy log ---\n{}",
        env.log()
    );
    assert_eq!(
        committed,
        (1..=N).collect::<Vec<_>>(),
        "every id was retried until committed"
    );
    env.proxy.assert_alive();
    server.stop();
}

fn counts_of(items: &[String]) -> BTreeMap<&str, usize> {
    let mut out = BTreeMap::new();
    for i in items {
        *out.entry(i.as_str()).or_insert(0) += 1;
    }
    out
}

/// A raw `STREAM * FROM table` that reads its column definitions and then whatever the test
/// asks for (or nothing: a client that stops reading its socket).
async fn raw_stream(port: u16, db: &str, table: &str) -> RawConn {
    let mut c = RawConn::connect(port, "root", "", Some(db))
        .await
        .expect("raw connect");
    c.send_command(
        raw::COM_QUERY,
        format!("STREAM * FROM `{table}`").as_bytes(),
    )
    .await
    .expect("send STREAM");
    let first = c
        .read_packet_timeout(secs(5.0))
        .await
        .expect("column count");
    assert_ne!(
        first.first(),
        Some(&0xff),
        "STREAM refused: {:?}",
        raw::parse_err(&first)
    );
    let columns = raw::lenenc(&first).0 as usize;
    for _ in 0..columns + 1 {
        c.read_packet_timeout(secs(5.0))
            .await
            .expect("column definitions and EOF");
    }
    c
}

/// The id of a text-protocol row packet (its first value).
fn row_id(row: &[u8]) -> i64 {
    let (len, used) = raw::lenenc(row);
    std::str::from_utf8(&row[used..used + len as usize])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(i64::MIN)
}

/// 3. A STREAM client that stops reading its socket while large messages keep coming: the
///    proxy's memory stays bounded, the other stream on the table keeps receiving, and the
///    stuck client's messages — those it was sent and the batch the proxy is blocked writing —
///    come back to the other stream after their ack wait, while the stuck client is still
///    connected.
#[tokio::test]
async fn a_consumer_that_stops_reading_holds_up_nothing() {
    const N: i64 = 3000;
    const BYTES: usize = 16 * 1024;
    let env = Env::private("fault_slow_consumer").await;
    // ack_wait 1, min_backoff 1: a claim keeps a row for 1.67..2.33 s.
    env.ddl(&table_sql("big", "1", 10, "1", "mediumtext")).await;
    let mut stuck = raw_stream(env.proxy.port(), &env.db, "big").await;
    let mut good = env.stream("big").await;
    let mut acker = env.proxy_conn().await;
    tokio::time::sleep(secs(0.3)).await;
    let (base_rss, _) = env.proxy.memory_kib().expect("the proxy's /proc status");
    let started = Instant::now();

    // 3000 messages of 16 KiB (48 MiB), 300 per statement, through the proxy.
    let (port, db) = (env.proxy.port(), env.db.clone());
    let writer = tokio::spawn(async move {
        let mut c = crate::messaging::harness::connect(port, &db).await;
        for chunk in 0..N / 300 {
            let sql = insert_sql("big", chunk * 300 + 1, chunk * 300 + 300, BYTES);
            exec(&mut c, &sql).await.expect("insert");
        }
    });
    let mut got: Vec<Msg> = Vec::new();
    let mut peak_rss = base_rss;
    let mut last_progress = Instant::now();
    // Until all have come, or nothing came for 6 s after the last insert (the ack wait is 1 s).
    while (got.len() as i64) < N
        && (!writer.is_finished() || last_progress.elapsed() < secs(6.0))
        && started.elapsed() < secs(30.0)
    {
        let Some(first) = good.recv(secs(0.2)).await else {
            continue;
        };
        last_progress = Instant::now();
        let mut msgs = vec![first];
        msgs.extend(good.ready().await);
        let ids: Vec<i64> = msgs.iter().map(|m| m.id).collect();
        ack_all(&mut acker, "big", &ids, "the good stream").await;
        for m in &mut msgs {
            m.values.clear(); // keep the test's own memory small
        }
        got.extend(msgs);
        if let Some((rss, _)) = env.proxy.memory_kib() {
            peak_rss = peak_rss.max(rss);
        }
    }
    writer.await.expect("writer");
    let all_in = started.elapsed();
    let (_, hwm) = env.proxy.memory_kib().expect("the proxy's /proc status");
    let states = env.states("big").await;
    let stuck_ids: BTreeSet<i64> = states
        .iter()
        .filter(|(_, s)| s.epoch.unwrap_or(0) >= 2)
        .map(|(id, _)| *id)
        .collect();
    eprintln!(
        "{} messages in {all_in:?}; {} of them claimed for the stuck client first; proxy RSS \
         {base_rss} KiB at the start, peak {peak_rss} KiB sampled, VmHWM {hwm} KiB",
        got.len(),
        stuck_ids.len()
    );
    let got_ids: Vec<i64> = got.iter().map(|m| m.id).collect();
    let got_set: BTreeSet<i64> = got_ids.iter().copied().collect();
    let missing: Vec<i64> = (1..=N).filter(|id| !got_set.contains(id)).collect();
    if !missing.is_empty() {
        let show: Vec<(i64, Option<RowState>)> = missing
            .iter()
            .take(20)
            .map(|id| (*id, states.get(id).copied()))
            .collect();
        panic!(
            "the good stream never got {} messages (the stuck client still connected): first \
             {show:?} at {}\n--- proxy log ---\n{}",
            missing.len(),
            now_ns(),
            env.log()
        );
    }
    assert_each_once(
        &got_ids,
        1..=N,
        "the good stream, acking everything at once",
    );
    assert!(
        stuck_ids.len() >= 20,
        "the stuck client should have been sent (and kept) messages: {}",
        stuck_ids.len()
    );
    // What the stuck client holds is in its socket, not in the proxy: 48 MiB went through.
    assert!(
        hwm < base_rss + 16 * 1024,
        "the proxy's memory grew from {base_rss} KiB to a peak of {hwm} KiB"
    );

    // The stuck client reads at last: exactly the rows claimed for it, each once.
    let mut read_ids = Vec::new();
    loop {
        match stuck.read_packet_timeout(secs(1.0)).await {
            Ok(row) => {
                assert_ne!(
                    row.first(),
                    Some(&0xff),
                    "stream error: {:?}",
                    raw::parse_err(&row)
                );
                read_ids.push(row_id(&row));
            }
            Err(RawError::Io(_)) => break,
            Err(e) => panic!("the stuck client reading its backlog: {e:?}"),
        }
    }
    assert_each_once(
        &read_ids,
        stuck_ids.iter().copied(),
        "the stuck client's backlog = the rows claimed for it",
    );
    stuck.abandon();
    env.proxy.assert_alive();
    env.server.stop();
}

/// The backend sessions of clients of database `db` (stream, bystander, raw clients), and the
/// server's Threads_connected.
async fn sessions(env: &Env) -> (i64, i64) {
    let mut c = Conn::new(opts(env.server.port(), "root", None, None))
        .await
        .expect("connect");
    let in_db: Option<i64> = c
        .query_first(format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '{}'",
            env.db
        ))
        .await
        .expect("processlist");
    let threads: Option<(String, i64)> = c
        .query_first("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
        .await
        .expect("Threads_connected");
    let _ = c.disconnect().await;
    (in_db.unwrap_or(-1), threads.map_or(-1, |t| t.1))
}

async fn backend_gone(env: &Env, id: u32) -> bool {
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
    eventually(10, async || {
        crate::support::direct_scalar::<i64>(env.server, &sql).await == Some(0)
    })
    .await
}

/// 4. Clients that vanish in the middle of a STREAM batch, of a large result, and of a
///    `LOAD DATA LOCAL INFILE` (after sending part of the file, the last packet cut short): the
///    proxy keeps serving the others, every abandoned backend session ends (the processlist is
///    back where it was), the abandoned batch's messages come back to another stream after
///    their ack wait, and nothing of an abandoned LOAD DATA is committed.
#[tokio::test]
async fn clients_vanishing_mid_batch_result_or_load_data_leave_nothing_behind() {
    let env = Env::private("fault_walkaway").await;
    // ack_wait 1, min_backoff 1: a claim keeps a row for 1.67..2.33 s.
    env.ddl(&table_sql("w", "1", 20, "1", "varchar(8000)"))
        .await;
    env.via_proxy("CREATE TABLE ld (id int PRIMARY KEY, v varchar(100))")
        .await;
    let mut bystander = env.proxy_conn().await;
    // Only the bystander's backend session is in the test's database (sessions of the setup
    // statements may take a moment to go).
    let settled = eventually(5, async || sessions(&env).await.0 == 1).await;
    let (base_in_db, base_threads) = sessions(&env).await;
    assert!(
        settled,
        "backend sessions in {} at the start: {base_in_db}",
        env.db
    );

    // (a) Mid-batch: the only stream reads 3 rows of its first batch of 20 (8 KB each) and goes.
    let mut quitter = raw_stream(env.proxy.port(), &env.db, "w").await;
    let quitter_id = quitter.greeting.connection_id;
    env.via_proxy(&insert_sql("w", 1, 40, 8000)).await;
    let mut read = Vec::new();
    for _ in 0..3 {
        let row = quitter
            .read_packet_timeout(secs(3.0))
            .await
            .expect("a row of the first batch");
        read.push(row_id(&row));
    }
    quitter.abandon();
    // What it had claimed (the rows it read and those still on their way) may be sent again
    // only after each claim's window.
    let windows = open_windows(&env.states("w").await);
    let mut good = env.stream("w").await;
    let mut acker = env.proxy_conn().await;
    let mut got: Vec<Msg> = Vec::new();
    let deadline = Instant::now() + secs(6.0);
    while got.len() < 40 && Instant::now() < deadline {
        if let Some(m) = good.recv(secs(0.2)).await {
            ack_all(&mut acker, "w", &[m.id], "the good stream").await;
            got.push(m);
        }
    }
    let got_ids: Vec<i64> = got.iter().map(|m| m.id).collect();
    assert_each_once(
        &got_ids,
        1..=40,
        "all 40 messages, to the stream that stayed",
    );
    assert!(
        read.iter().all(|id| windows.contains_key(id)),
        "the rows the client read ({read:?}) were claimed: {windows:?}"
    );
    let early = inside_windows(&delivered("the stream that stayed", &got), &windows);
    assert!(
        early.is_empty(),
        "sent again within the window of the claim of the client that left: {early:#?}"
    );
    assert!(
        backend_gone(&env, quitter_id).await,
        "mid-batch: backend session {quitter_id} left open"
    );

    // (b) Mid-result: ~200 MB of rows, 50 packets read.
    let mut quitter = RawConn::connect(env.proxy.port(), "root", "", Some(&env.db))
        .await
        .expect("raw connect");
    let quitter_id = quitter.greeting.connection_id;
    quitter
        .send_command(
            raw::COM_QUERY,
            b"SELECT seq, REPEAT('x', 1000) FROM seq_1_to_200000",
        )
        .await
        .expect("send");
    for _ in 0..50 {
        quitter
            .read_packet_timeout(secs(10.0))
            .await
            .expect("first packets of the result");
    }
    quitter.abandon();
    assert!(
        backend_gone(&env, quitter_id).await,
        "mid-result: backend session {quitter_id} left open"
    );

    // (c) Mid-LOAD DATA: under autocommit, and inside a transaction that inserted a row first.
    for in_transaction in [false, true] {
        let mut quitter = RawConn::connect(env.proxy.port(), "root", "", Some(&env.db))
            .await
            .expect("raw connect");
        let quitter_id = quitter.greeting.connection_id;
        if in_transaction {
            quitter
                .query("START TRANSACTION")
                .await
                .expect("START TRANSACTION");
            quitter
                .query("INSERT INTO ld VALUES (0, 'before the LOAD DATA')")
                .await
                .expect("insert");
        }
        quitter
            .send_command(
                raw::COM_QUERY,
                b"LOAD DATA LOCAL INFILE 'rows.csv' INTO TABLE ld FIELDS TERMINATED BY ','",
            )
            .await
            .expect("send LOAD DATA");
        let request = quitter
            .read_packet_timeout(secs(5.0))
            .await
            .expect("the LOCAL INFILE request");
        assert_eq!(
            request.first(),
            Some(&0xfb),
            "LOCAL INFILE request: {request:02x?}"
        );
        // Four packets of ~64 KB of rows, then a packet header announcing 64 KB followed by
        // only 1 KB of it, then the socket closes.
        let mut id = 1;
        for _ in 0..4 {
            let mut chunk = Vec::new();
            while chunk.len() < 64 * 1024 {
                chunk.extend_from_slice(format!("{id},row {id}\n").as_bytes());
                id += 1;
            }
            quitter.write_packet(&chunk).await.expect("file data");
        }
        // Sequence ids: the request was 1, the four packets 2..=5.
        let mut cut = vec![0x00, 0x00, 0x01, 6];
        cut.extend(std::iter::repeat_n(b'9', 1024));
        quitter.write_raw(&cut).await.expect("a cut packet");
        tokio::time::sleep(secs(0.1)).await;
        quitter.abandon();
        assert!(
            backend_gone(&env, quitter_id).await,
            "mid-LOAD DATA (in a transaction: {in_transaction}): backend session {quitter_id} left open"
        );
        let rows: Option<i64> = crate::support::direct_scalar(
            env.server,
            &format!("SELECT COUNT(*) FROM `{}`.ld", env.db),
        )
        .await;
        assert_eq!(
            rows,
            Some(0),
            "an abandoned LOAD DATA (in a transaction: {in_transaction}, {} rows sent) left rows \
             behind",
            id - 1
        );
    }

    // The others were served all along, and are still.
    let one: Option<i64> = bystander.query_first("SELECT 1").await.expect("bystander");
    assert_eq!(one, Some(1));
    let mut fresh = env.proxy_conn().await;
    let one: Option<i64> = fresh.query_first("SELECT 1").await.expect("new session");
    assert_eq!(one, Some(1));
    drop(fresh);
    env.via_proxy(&insert_sql("w", 41, 41, 10)).await;
    assert_eq!(good.recv(secs(2.0)).await.map(|m| m.id), Some(41));
    ack_all(&mut acker, "w", &[41], "the good stream").await;
    // Back to where it was: the bystander and the two sessions opened since (stream, acker).
    let settled = eventually(10, async || sessions(&env).await.0 == base_in_db + 2).await;
    let (in_db, threads) = sessions(&env).await;
    eprintln!(
        "backend sessions of the test database: {base_in_db} before, {in_db} after (+ the good \
         stream and its acker); Threads_connected {base_threads} before, {threads} after"
    );
    assert!(
        settled,
        "backend sessions of {}: {base_in_db} before, {in_db} after; expected {} (the stream and \
         the acker were opened since)",
        env.db,
        base_in_db + 2
    );
    env.proxy.assert_alive();
    drop(good);
    env.server.stop();
}
