//! The FIFO-group workload (docs/MESSAGING.md §9, §11): a message table with `vt_group_col=k`
//! and `vt_max_attempts`, its dead letters moved to a table of their own or kept in place.
//!
//! Producers (through either proxy and straight to the server) each own a few keys, so that a
//! key's messages commit in id order (the rule §11 asks of producers): a statement inserts one to
//! three messages of one key, ids from one increasing counter. Now and then a message is poison
//! (`poison = 1`): consumers never ack it, so it must die after `vt_max_attempts` sends and
//! release its key; its producer adds at most two more statements to that key, then takes a new
//! key (and a key whose insert's outcome is unknown is given up at once: a late commit of it
//! could otherwise land after a later insert). Consumers `STREAM id, poison`, log each delivery,
//! and ack most of them, logging the moment each ACK is sent (from then on the proxy may release
//! the key) and its OK. The logs go to `logs/fifo/` in the `events` format.

use std::path::PathBuf;
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
use crate::verify_fifo::{Msg, State};
use crate::wire::{Conn, Target};
use crate::workload::{connect_retrying, run, STATEMENT_LIMIT};

pub const TABLE: &str = "chk_fifo";
pub const DEAD_TABLE: &str = "chk_fifo_dead";
/// vt_max_attempts of the table.
pub const MAX_ATTEMPTS: i64 = 3;
/// vt_min_backoff / vt_max_backoff of the table, seconds: shorter than the message table's, so a
/// poison message dies (and frees its key) within ack wait + about 3 s after its third send, and
/// the drain stays short.
const MIN_BACKOFF: f64 = 0.5;
const MAX_BACKOFF: f64 = 1.0;
/// Keys each producer has open at a time.
const KEYS_PER_PRODUCER: usize = 16;
/// Chance that a statement ends with a poison message.
const POISON_CHANCE: f64 = 0.04;
const MAX_ACK_BATCH: usize = 200;
/// `time_next` of a message dead in place.
const DEAD_IN_PLACE: i64 = i64::MAX;

pub struct Config {
    pub seed: u64,
    /// `logs/fifo/`.
    pub logs: PathBuf,
    pub base: Instant,
    pub producers: Vec<(String, Target)>,
    pub proxies: Vec<Target>,
    pub consumers: usize,
    pub skip_ack: f64,
    pub ack_fresh: Duration,
    pub pause: Duration,
}

#[derive(Default)]
pub struct Stats {
    pub statements_failed: AtomicU64,
    pub sessions: AtomicU64,
    pub skipped_acks: AtomicU64,
    pub stale_acks: AtomicU64,
    pub acks_failed: AtomicU64,
    pub poison: AtomicU64,
}

struct Shared {
    cfg: Config,
    next_id: AtomicI64,
    next_key: AtomicI64,
    draining: AtomicBool,
    stats: Stats,
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
        std::fs::create_dir_all(&cfg.logs)
            .map_err(|e| format!("create {}: {e}", cfg.logs.display()))?;
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
            next_key: AtomicI64::new(1),
            draining: AtomicBool::new(false),
            stats: Stats::default(),
        });
        let stop_producers = CancellationToken::new();
        let stop_consumers = CancellationToken::new();
        let producers = producer_logs
            .into_iter()
            .enumerate()
            .map(|(i, log)| {
                let rng = StdRng::seed_from_u64(shared.cfg.seed.wrapping_add(4001 + i as u64));
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
                let rng = StdRng::seed_from_u64(shared.cfg.seed.wrapping_add(5001 + i as u64));
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

    pub fn kill_consumer(&self, i: usize) {
        let n = self.shared.sessions.len();
        self.shared.sessions[i % n]
            .lock()
            .expect("session lock")
            .cancel();
    }

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

/// The table's comment.
fn comment(ack_wait: f64, moved: bool) -> String {
    format!(
        "vitess_message,vt_ack_wait={ack_wait},vt_min_backoff={MIN_BACKOFF},vt_max_backoff={MAX_BACKOFF},\
         vt_purge_after=86400,vt_batch_size=10,vt_cache_size=1000,vt_poller_interval=1,\
         vt_group_col=k,vt_max_attempts={MAX_ATTEMPTS}{}",
        if moved {
            format!(",vt_dead_letter={DEAD_TABLE}")
        } else {
            String::new()
        }
    )
}

/// Creates the FIFO table (and its dead-letter table when `moved`) straight on the server, before
/// the proxies start.
pub async fn create_tables(
    c: &mut Conn,
    db: &str,
    ack_wait: f64,
    moved: bool,
) -> Result<(), String> {
    let mut sqls = vec![
        format!("DROP TABLE IF EXISTS `{db}`.`{TABLE}`"),
        format!("DROP TABLE IF EXISTS `{db}`.`{DEAD_TABLE}`"),
    ];
    if moved {
        sqls.push(format!(
            "CREATE TABLE `{db}`.`{DEAD_TABLE}` (id BIGINT NOT NULL PRIMARY KEY, k BIGINT, \
             poison TINYINT NOT NULL DEFAULT 0, dead_at BIGINT, attempts BIGINT, reason VARCHAR(255)) ENGINE=InnoDB"
        ));
    }
    sqls.push(format!(
        "CREATE TABLE `{db}`.`{TABLE}` (id BIGINT NOT NULL, time_next BIGINT DEFAULT 0, epoch BIGINT, \
         time_acked BIGINT, k BIGINT, poison TINYINT NOT NULL DEFAULT 0, PRIMARY KEY(id), \
         INDEX group_idx(k, id), INDEX next_idx(time_next, epoch), INDEX ack_idx(time_acked)) \
         ENGINE=InnoDB COMMENT '{}'",
        comment(ack_wait, moved)
    ));
    for sql in sqls {
        c.query(&sql).await.map_err(|e| format!("{sql}: {e}"))?;
    }
    Ok(())
}

/// A key a producer is writing to.
struct Slot {
    key: i64,
    /// Statements still to add after a poison message, before the key is given up.
    after_poison: Option<u32>,
}

async fn producer(
    sh: Arc<Shared>,
    i: usize,
    mut log: EventLog,
    mut rng: StdRng,
    stop: CancellationToken,
) {
    let target = sh.cfg.producers[i].1.clone();
    let new_key = || sh.next_key.fetch_add(1, Ordering::Relaxed);
    let mut slots: Vec<Slot> = (0..KEYS_PER_PRODUCER)
        .map(|_| Slot {
            key: new_key(),
            after_poison: None,
        })
        .collect();
    'connect: while let Some(mut conn) = connect_retrying(&target, &stop).await {
        loop {
            if stop.is_cancelled() {
                break 'connect;
            }
            let s = rng.random_range(0..slots.len());
            let slot = &mut slots[s];
            let rows = rng.random_range(1..=3);
            let ids: Vec<i64> = (0..rows)
                .map(|_| sh.next_id.fetch_add(1, Ordering::Relaxed))
                .collect();
            let poison = slot.after_poison.is_none() && rng.random_bool(POISON_CHANCE);
            let values: Vec<String> = ids
                .iter()
                .enumerate()
                .map(|(n, id)| {
                    let p = poison && n + 1 == ids.len();
                    format!("({id}, {}, {})", slot.key, p as u8)
                })
                .collect();
            let sql = format!(
                "INSERT INTO `{TABLE}` (id, k, poison) VALUES {}",
                values.join(", ")
            );
            for &id in &ids {
                log.log(Kind::Try, id);
            }
            if run(&mut conn, &sql).await.is_err() {
                sh.stats.statements_failed.fetch_add(1, Ordering::Relaxed);
                // Its rows may still commit later: never write to this key again.
                *slot = Slot {
                    key: new_key(),
                    after_poison: None,
                };
                continue 'connect;
            }
            for &id in &ids {
                log.log(Kind::Committed, id);
            }
            if poison {
                sh.stats.poison.fetch_add(1, Ordering::Relaxed);
                slot.after_poison = Some(rng.random_range(0..=2));
            } else if let Some(n) = slot.after_poison.as_mut() {
                *n = n.saturating_sub(1);
            }
            if slot.after_poison == Some(0) {
                *slot = Slot {
                    key: new_key(),
                    after_poison: None,
                };
            }
            tokio::select! {
                _ = stop.cancelled() => break 'connect,
                _ = tokio::time::sleep(sh.cfg.pause) => {}
            }
        }
    }
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
    let mut next = (i + 1) % proxies.len();
    let mut backoff = Duration::from_millis(50);
    while !stop.is_cancelled() {
        let target = proxies[next].clone();
        next = (next + 1) % proxies.len();
        let session = stop.child_token();
        *sh.sessions[i].lock().expect("session lock") = session.clone();
        let started = Instant::now();
        acks = session_run(&sh, &target, &mut log, acks, &mut rng, session).await;
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

async fn session_run(
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
    let sql = format!("STREAM id, poison FROM `{TABLE}`");
    let started = tokio::select! {
        _ = session.cancelled() => return acks,
        r = tokio::time::timeout(STATEMENT_LIMIT, stream.start_stream(&sql)) => r,
    };
    if !matches!(started, Ok(Ok(()))) {
        return acks;
    }
    sh.stats.sessions.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::unbounded_channel();
    let acker = tokio::spawn(acker(sh.clone(), target.clone(), rx, acks, session.clone()));
    loop {
        let (id, poison) = tokio::select! {
            _ = session.cancelled() => break,
            r = stream.next_stream_pair() => match r {
                Ok(v) => v,
                Err(_) => break,
            },
        };
        let id = id as i64;
        let t = log.now_us();
        log.log_at(t, Kind::Delivered, id);
        if poison != 0 {
            continue;
        }
        if !sh.draining.load(Ordering::SeqCst) && rng.random_bool(sh.cfg.skip_ack) {
            sh.stats.skipped_acks.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let _ = tx.send((id, t));
    }
    session.cancel();
    drop(stream);
    acker.await.expect("the acker does not panic")
}

/// As the message workload's acker, and it also logs each id just before its ACK is sent.
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
        let sql = format!("ACK `{TABLE}` {}", ids.join(", "));
        for &(id, _) in &batch {
            log.log(Kind::AckSent, id);
        }
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
                for &(id, _) in &batch {
                    log.log(Kind::AckFailed, id);
                }
                sh.stats.acks_failed.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
        }
    }
}

/// Messages neither acked nor dead (the drain waits for none).
pub async fn due_count(c: &mut Conn) -> Result<u64, String> {
    let rows = c
        .query_rows(&format!(
            "SELECT COUNT(*) FROM `{TABLE}` WHERE (time_acked IS NULL OR time_acked = 0) \
             AND (time_next IS NULL OR time_next <> {DEAD_IN_PLACE})"
        ))
        .await
        .map_err(|e| e.to_string())?;
    rows.first()
        .and_then(|r| r[0].as_deref())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "COUNT(*) answered no number".to_string())
}

/// The table's messages and the dead letters, for the verdict.
pub async fn snapshot(
    direct: &Target,
    moved: bool,
) -> Result<
    (
        std::collections::HashMap<i64, Msg>,
        std::collections::HashMap<i64, Msg>,
    ),
    String,
> {
    let mut c = Conn::connect(direct)
        .await
        .map_err(|e| format!("cannot connect to the server for the final check: {e}"))?;
    let int = |v: &Option<String>| v.as_deref().and_then(|s| s.parse::<i64>().ok());
    let rows = c
        .query_rows(&format!(
            "SELECT id, k, poison, IFNULL(epoch, 0), IFNULL(time_acked, 0), IFNULL(time_next, 0) FROM `{TABLE}`"
        ))
        .await
        .map_err(|e| format!("read {TABLE}: {e}"))?;
    let mut table = std::collections::HashMap::new();
    for r in &rows {
        let id = int(&r[0]).ok_or("a row whose id is not an integer")?;
        let state = if int(&r[4]).unwrap_or(0) != 0 {
            State::Acked
        } else if int(&r[5]) == Some(DEAD_IN_PLACE) {
            State::Dead
        } else {
            State::Due
        };
        table.insert(
            id,
            Msg {
                key: int(&r[1]).unwrap_or(-1),
                poison: int(&r[2]) == Some(1),
                sends: int(&r[3]).unwrap_or(0),
                state,
            },
        );
    }
    let mut dead = std::collections::HashMap::new();
    if moved {
        let rows = c
            .query_rows(&format!(
                "SELECT id, k, poison, IFNULL(attempts, -1) FROM `{DEAD_TABLE}`"
            ))
            .await
            .map_err(|e| format!("read {DEAD_TABLE}: {e}"))?;
        for r in &rows {
            let id = int(&r[0]).ok_or("a dead letter whose id is not an integer")?;
            dead.insert(
                id,
                Msg {
                    key: int(&r[1]).unwrap_or(-1),
                    poison: int(&r[2]) == Some(1),
                    sends: int(&r[3]).unwrap_or(-1),
                    state: State::Dead,
                },
            );
        }
    }
    c.quit().await;
    Ok((table, dead))
}
