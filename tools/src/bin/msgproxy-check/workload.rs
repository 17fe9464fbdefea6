//! The clients: producers that INSERT (through either proxy, and one straight to the server) and
//! STREAM consumers that ACK most of what they get. Each logs only what it knows for certain (see
//! `events`): an id is "committed" only after the INSERT's or COMMIT's OK, "acked" only after
//! the ACK's OK. Every failure (a killed proxy, a restarting server, a fault's disconnect) just
//! drops the connection and reconnects with backoff: the clients never decide anything is wrong,
//! the verdict comes from the logs and the database afterwards.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::events::{EventLog, Kind};
use crate::wire::{Conn, Outcome, Target};

/// Longest any one statement may take before its connection is given up as stuck.
pub const STATEMENT_LIMIT: Duration = Duration::from_secs(10);
/// Most ids one ACK statement carries.
const MAX_ACK_BATCH: usize = 200;

pub struct Config {
    pub table: String,
    pub seed: u64,
    pub logs: std::path::PathBuf,
    pub base: Instant,
    /// Where each producer inserts: the proxies, and the server straight.
    pub producers: Vec<(String, Target)>,
    /// The proxies; consumer `i` starts on proxy `i % n` and moves to the next at each reconnect.
    pub proxies: Vec<Target>,
    pub consumers: usize,
    /// Share of deliveries deliberately left unacked (they must come back).
    pub skip_ack: f64,
    /// Deliveries older than this are not acked any more (see `acker`).
    pub ack_fresh: Duration,
    /// Pause between a producer's statements.
    pub pause: Duration,
}

/// Counters for the summary (the verdict never uses them).
#[derive(Default)]
pub struct Stats {
    pub statements_failed: AtomicU64,
    pub skipped_acks: AtomicU64,
    pub stale_acks: AtomicU64,
    pub consumer_sessions: AtomicU64,
    pub acks_failed: AtomicU64,
}

struct Shared {
    cfg: Config,
    next_id: AtomicI64,
    draining: AtomicBool,
    stats: Stats,
    /// The current session of each consumer: cancelling it is the "disconnect consumer" fault.
    sessions: Vec<Mutex<CancellationToken>>,
}

pub struct Workload {
    shared: Arc<Shared>,
    stop_producers: CancellationToken,
    stop_consumers: CancellationToken,
    producers: Vec<JoinHandle<()>>,
    consumers: Vec<JoinHandle<()>>,
}

impl Workload {
    pub fn start(rt: &Runtime, cfg: Config) -> Result<Workload, String> {
        let stop_producers = CancellationToken::new();
        let stop_consumers = CancellationToken::new();
        let mut producer_logs = Vec::new();
        for (name, _) in &cfg.producers {
            producer_logs.push(EventLog::create(&cfg.logs, name, cfg.base)?);
        }
        let mut consumer_logs = Vec::new();
        for i in 0..cfg.consumers {
            consumer_logs.push((
                EventLog::create(&cfg.logs, &format!("consumer-{i}"), cfg.base)?,
                EventLog::create(&cfg.logs, &format!("consumer-{i}-acks"), cfg.base)?,
            ));
        }
        let shared = Arc::new(Shared {
            sessions: (0..cfg.consumers)
                .map(|_| Mutex::new(CancellationToken::new()))
                .collect(),
            cfg,
            next_id: AtomicI64::new(1),
            draining: AtomicBool::new(false),
            stats: Stats::default(),
        });
        let producers = producer_logs
            .into_iter()
            .enumerate()
            .map(|(i, log)| {
                let rng = StdRng::seed_from_u64(shared.cfg.seed.wrapping_add(1 + i as u64));
                rt.spawn(producer(
                    shared.clone(),
                    i,
                    log,
                    rng,
                    stop_producers.clone(),
                ))
            })
            .collect();
        let consumers = consumer_logs
            .into_iter()
            .enumerate()
            .map(|(i, (log, acks))| {
                let rng = StdRng::seed_from_u64(shared.cfg.seed.wrapping_add(1001 + i as u64));
                rt.spawn(consumer(
                    shared.clone(),
                    i,
                    log,
                    acks,
                    rng,
                    stop_consumers.clone(),
                ))
            })
            .collect();
        Ok(Workload {
            shared,
            stop_producers,
            stop_consumers,
            producers,
            consumers,
        })
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    pub fn consumers(&self) -> usize {
        self.shared.cfg.consumers
    }

    /// Drops consumer `i`'s connections (the "disconnect consumer" fault).
    pub fn kill_consumer(&self, i: usize) {
        self.shared.sessions[i]
            .lock()
            .expect("session lock")
            .cancel();
    }

    /// From now on consumers ack everything they get, so the queue can empty.
    pub fn set_draining(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
    }

    pub async fn stop_producers(&mut self) {
        self.stop_producers.cancel();
        for h in self.producers.drain(..) {
            let _ = h.await;
        }
    }

    pub async fn stop_consumers(&mut self) {
        self.stop_consumers.cancel();
        for h in self.consumers.drain(..) {
            let _ = h.await;
        }
    }
}

/// Connects, retrying with backoff until it works or `stop` is cancelled.
pub async fn connect_retrying(target: &Target, stop: &CancellationToken) -> Option<Conn> {
    let mut backoff = Duration::from_millis(50);
    loop {
        if stop.is_cancelled() {
            return None;
        }
        if let Ok(c) = Conn::connect(target).await {
            return Some(c);
        }
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// One statement, with a time limit.
pub async fn run(c: &mut Conn, sql: &str) -> Result<(), String> {
    run_counting(c, sql).await.map(|_| ())
}

/// One statement, with a time limit: what it answered.
pub async fn run_counting(c: &mut Conn, sql: &str) -> Result<Outcome, String> {
    match tokio::time::timeout(STATEMENT_LIMIT, c.query(sql)).await {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {STATEMENT_LIMIT:?}")),
    }
}

fn insert_sql(table: &str, ids: &[i64]) -> String {
    let values: Vec<String> = ids.iter().map(|id| format!("({id}, 'm{id}')")).collect();
    format!(
        "INSERT INTO `{table}` (id, message) VALUES {}",
        values.join(", ")
    )
}

async fn producer(
    sh: Arc<Shared>,
    i: usize,
    mut log: EventLog,
    mut rng: StdRng,
    stop: CancellationToken,
) {
    let target = sh.cfg.producers[i].1.clone();
    'connect: while let Some(mut conn) = connect_retrying(&target, &stop).await {
        loop {
            if stop.is_cancelled() {
                break 'connect;
            }
            if one_insert(&sh, &mut conn, &mut log, &mut rng)
                .await
                .is_err()
            {
                sh.stats.statements_failed.fetch_add(1, Ordering::Relaxed);
                continue 'connect;
            }
            tokio::select! {
                _ = stop.cancelled() => break 'connect,
                _ = tokio::time::sleep(sh.cfg.pause) => {}
            }
        }
    }
}

/// One producer step, one of: a single-row INSERT, a multi-row INSERT, a transaction that
/// commits, a transaction that rolls back. An error leaves the outcome unknown (nothing more is
/// logged) and the caller reconnects.
async fn one_insert(
    sh: &Shared,
    conn: &mut Conn,
    log: &mut EventLog,
    rng: &mut StdRng,
) -> Result<(), String> {
    let table = &sh.cfg.table;
    let draw = rng.random_range(0..100);
    let rows = match draw {
        0..50 => 1,
        _ => rng.random_range(2..=4),
    };
    let ids: Vec<i64> = (0..rows)
        .map(|_| sh.next_id.fetch_add(1, Ordering::Relaxed))
        .collect();
    let sql = insert_sql(table, &ids);
    match draw {
        0..70 => {
            for &id in &ids {
                log.log(Kind::Try, id);
            }
            run(conn, &sql).await?;
            for &id in &ids {
                log.log(Kind::Committed, id);
            }
        }
        70..88 => {
            run(conn, "BEGIN").await?;
            for &id in &ids {
                log.log(Kind::Try, id);
            }
            run(conn, &sql).await?;
            run(conn, "COMMIT").await?;
            for &id in &ids {
                log.log(Kind::Committed, id);
            }
        }
        _ => {
            run(conn, "BEGIN").await?;
            for &id in &ids {
                log.log(Kind::Try, id);
            }
            // COMMIT is never sent: whatever happens from here on, these rows must never exist.
            let inserted = run(conn, &sql).await;
            let rolled_back = match inserted {
                Ok(()) => run(conn, "ROLLBACK").await,
                Err(e) => Err(e),
            };
            for &id in &ids {
                log.log(Kind::RolledBack, id);
            }
            rolled_back?;
        }
    }
    Ok(())
}

async fn consumer(
    sh: Arc<Shared>,
    i: usize,
    mut log: EventLog,
    mut acks: EventLog,
    mut rng: StdRng,
    stop: CancellationToken,
) {
    let proxies = &sh.cfg.proxies;
    let mut next = i % proxies.len();
    let mut backoff = Duration::from_millis(50);
    while !stop.is_cancelled() {
        let target = proxies[next].clone();
        next = (next + 1) % proxies.len();
        let session = stop.child_token();
        *sh.sessions[i].lock().expect("session lock") = session.clone();
        let started = Instant::now();
        acks = consumer_session(&sh, &target, &mut log, acks, &mut rng, session).await;
        // A session that lasted is not a failing one: start the backoff afresh.
        if started.elapsed() > Duration::from_secs(2) {
            backoff = Duration::from_millis(50);
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// One STREAM connection and its ACK connection, until either breaks or `session` is cancelled.
/// Hands the acks log back for the next session.
async fn consumer_session(
    sh: &Arc<Shared>,
    target: &Target,
    log: &mut EventLog,
    acks: EventLog,
    rng: &mut StdRng,
    session: CancellationToken,
) -> EventLog {
    let Some(mut stream) = connect_retrying(target, &session).await else {
        return acks;
    };
    let stream_sql = format!("STREAM * FROM `{}`", sh.cfg.table);
    let started = tokio::select! {
        _ = session.cancelled() => return acks,
        r = tokio::time::timeout(STATEMENT_LIMIT, stream.start_stream(&stream_sql)) => r,
    };
    if !matches!(started, Ok(Ok(()))) {
        return acks;
    }
    sh.stats.consumer_sessions.fetch_add(1, Ordering::Relaxed);
    // The reader only reads and logs: acking happens on another task, so that a slow ACK (the
    // server restarting, say) never delays reading, and delivery times stay the proxy's.
    let (tx, rx) = mpsc::unbounded_channel();
    let acker = tokio::spawn(acker(sh.clone(), target.clone(), rx, acks, session.clone()));
    loop {
        let id = tokio::select! {
            _ = session.cancelled() => break,
            r = stream.next_stream_id() => match r {
                Ok(id) => id,
                Err(_) => break,
            },
        };
        let t = log.now_us();
        log.log_at(t, Kind::Delivered, id);
        if !sh.draining.load(Ordering::SeqCst) && rng.random_bool(sh.cfg.skip_ack) {
            sh.stats.skipped_acks.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let _ = tx.send((id, t));
    }
    // Whatever was not acked yet comes back after the ack wait.
    session.cancel();
    drop(stream);
    acker.await.expect("the acker does not panic")
}

/// Acks what the reader hands over, in batches, on its own connection; logs each id only after
/// the ACK's OK. A delivery older than `ack_fresh` is not acked but left to come back: an ACK
/// sent when the row may be due again races with the row's next claim, and a delivery that
/// follows the ACK's OK would then be legitimate yet look like a violation.
async fn acker(
    sh: Arc<Shared>,
    target: Target,
    mut rx: mpsc::UnboundedReceiver<(i64, u64)>,
    mut log: EventLog,
    session: CancellationToken,
) -> EventLog {
    let fresh_us = sh.cfg.ack_fresh.as_micros() as u64;
    let mut conn: Option<Conn> = None;
    loop {
        let first = tokio::select! {
            _ = session.cancelled() => return log,
            v = rx.recv() => match v {
                Some(v) => v,
                None => return log,
            },
        };
        let mut batch = vec![first];
        while batch.len() < MAX_ACK_BATCH {
            match rx.try_recv() {
                Ok(v) => batch.push(v),
                Err(_) => break,
            }
        }
        if conn.is_none() {
            conn = connect_retrying(&target, &session).await;
        }
        let Some(c) = conn.as_mut() else {
            return log;
        };
        let now = log.now_us();
        let before = batch.len();
        batch.retain(|&(_, t)| now.saturating_sub(t) < fresh_us);
        sh.stats
            .stale_acks
            .fetch_add((before - batch.len()) as u64, Ordering::Relaxed);
        if batch.is_empty() {
            continue;
        }
        let ids: Vec<String> = batch.iter().map(|(id, _)| id.to_string()).collect();
        let sql = format!("ACK `{}` {}", sh.cfg.table, ids.join(", "));
        let result = tokio::select! {
            _ = session.cancelled() => return log,
            r = run(c, &sql) => r,
        };
        match result {
            Ok(()) => {
                for &(id, _) in &batch {
                    log.log(Kind::Acked, id);
                }
            }
            Err(_) => {
                sh.stats.acks_failed.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
        }
    }
}
