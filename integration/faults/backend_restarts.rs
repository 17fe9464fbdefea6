//! The backend restarted (cleanly, then by SIGKILL) under load: the proxy survives, clients get
//! proper errors, and nothing committed is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::{is_acked, table_sql};
use crate::binlog::{Consumer, Seen};
use crate::messaging::harness::{secs, Env, RowState};
use crate::support::{opts, Failure};

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
                            // Reconnect pace while the server is away (the outage is the scenario).
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
                // The producer's pace, part of the load under test.
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
                // How often the consumers are pumped, not a wait for something.
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

/// While the backend is down, the background jobs that fail on every tick (the purge every
/// `vt_poller_interval`, here each second) log the start of the outage and its end, not one
/// line per tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_logged_at_its_start_and_end_not_per_tick() {
    let env = Env::private("fault_outage_log").await;
    let server = env.server;
    env.ddl(&table_sql("quiet", "30", 10, "1", "varchar(50)"))
        .await;
    let job = format!("purging `{}`.`quiet`", env.db);
    // The table is loaded, and purged each second, before the outage.
    crate::support::wait_for_log(&env.proxy, "`.`quiet` loaded", 10).await;
    // The scenario: ticks that succeed (nothing to log, nothing to wait on) before the outage.
    tokio::time::sleep(Duration::from_secs(2)).await;

    server.stop();
    crate::support::wait_for_log(&env.proxy, &format!("{job} failed"), 10).await;
    // Five more ticks with the server away.
    // The scenario itself: an outage long enough for five ticks, which must log nothing.
    tokio::time::sleep(Duration::from_secs(5)).await;
    server.restart();
    crate::support::wait_for_log(&env.proxy, &format!("{job} works again"), 10).await;

    let log = env.proxy.log();
    let failures = log.matches(&format!("{job} failed")).count();
    let recovered: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("{job} works again")))
        .collect();
    assert_eq!(
        (failures, recovered.len()),
        (1, 1),
        "one line at the outage's start, one at its end; the log:\n{log}"
    );
    // How many ticks failed is in the line that ends the run.
    let count: u64 = recovered[0]
        .split("after ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no failure count in {:?}", recovered[0]));
    assert!(
        count >= 4,
        "{count} failures counted over ~6 s of ticks: {}",
        recovered[0]
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
