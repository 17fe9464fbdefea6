//! The event-stream workload (docs/STREAMS.md): two stream tables (InnoDB and BLACKHOLE), producers
//! inserting through either proxy and straight to the server (some in transactions that roll
//! back, their rows marked `note = 'rollback'`; InnoDB only, BLACKHOLE cannot roll back), and two consumer groups per table, each with
//! competing consumers that `STREAM k FROM t GROUP 'g'` and `ACK t GROUP 'g' ...` what they get.
//!
//! Every inserted row has a `k` (key) unique in the run, so a delivery names its insert. Clients
//! record only what they know for certain (`verify_streams::Rec`), one file each in
//! `logs/streams/`; the verdict is drawn from those files and the database afterwards.
//! Consumers also keep a summary in memory, for the drain: it ends when every group's saved
//! position has passed every insert known to be committed and every event it delivered.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::verify_streams::Rec;
use crate::wire::{Conn, Target};
use crate::workload::{connect_retrying, run, run_counting, STATEMENT_LIMIT};

/// The stream tables and their engines.
pub const TABLES: [(&str, &str); 2] = [
    ("chk_stream_innodb", "InnoDB"),
    ("chk_stream_blackhole", "BLACKHOLE"),
];
/// The consumer groups of each table.
pub const GROUPS: [&str; 2] = ["g1", "g2"];
/// msgproxy's table of group progress (its default name, in the backend URL's database).
pub const GROUPS_TABLE: &str = "msgproxy_stream_groups";
/// Most event ids one ACK carries.
const MAX_ACK_BATCH: usize = 200;

/// `table/group`, as the records and the report name a group.
pub fn group_name(table: &str, group: &str) -> String {
    format!("{table}/{group}")
}

/// Every group, with its table's index.
pub fn all_groups() -> Vec<(usize, &'static str)> {
    (0..TABLES.len())
        .flat_map(|t| GROUPS.iter().map(move |g| (t, *g)))
        .collect()
}

/// One client's record file.
pub struct RecLog {
    out: BufWriter<File>,
    base: Instant,
}

impl RecLog {
    pub fn create(dir: &Path, who: &str, base: Instant) -> Result<RecLog, String> {
        let path = dir.join(format!("{who}.log"));
        let file = File::create(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        Ok(RecLog {
            out: BufWriter::new(file),
            base,
        })
    }

    pub fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }

    pub fn log(&mut self, rec: Rec) {
        let t = self.now_us();
        self.log_at(t, rec);
    }

    pub fn log_at(&mut self, t_us: u64, rec: Rec) {
        writeln!(self.out, "{t_us} {}", rec.to_line()).expect("cannot write a client log");
    }
}

impl Drop for RecLog {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

pub struct Config {
    pub seed: u64,
    /// `logs/streams/`.
    pub logs: PathBuf,
    pub base: Instant,
    pub producers: Vec<(String, Target)>,
    pub proxies: Vec<Target>,
    pub consumers_per_group: usize,
    pub skip_ack: f64,
    pub ack_fresh: Duration,
    pub pause: Duration,
}

/// What the drain needs to know, kept by the clients as they go.
#[derive(Default)]
pub struct Progress {
    /// Keys whose insert got OK, per table.
    committed: Vec<HashSet<u64>>,
    /// Per group (`table/group`): the event id of each key delivered, and the keys acked.
    groups: HashMap<String, GroupProgress>,
}

#[derive(Default)]
struct GroupProgress {
    eid_of_key: HashMap<u64, u64>,
    key_of_eid: HashMap<u64, u64>,
    /// When the group last delivered anything (µs since the run started).
    last_delivery_us: Option<u64>,
}

/// A group's state for the progress lines and the drain.
pub struct GroupState {
    pub name: String,
    /// Committed inserts of the table the group has not delivered.
    pub never_delivered: usize,
    /// Committed inserts the group delivered that its saved position has not passed yet.
    pub not_passed: usize,
    /// The largest event id the group delivered.
    pub max_eid: Option<u64>,
    /// When the group last delivered anything (µs since the run started).
    pub last_delivery_us: Option<u64>,
}

#[derive(Default)]
pub struct Stats {
    pub statements_failed: AtomicU64,
    pub sessions: AtomicU64,
    pub skipped_acks: AtomicU64,
    pub stale_acks: AtomicU64,
    pub acks_failed: AtomicU64,
    /// ACKs answered OK with a warning: queued for the serving proxy, applied later.
    pub queued_acks: AtomicU64,
    /// ACKs answered OK with fewer affected rows than ids.
    pub short_acks: AtomicU64,
}

struct Shared {
    cfg: Config,
    next_key: AtomicU64,
    draining: AtomicBool,
    progress: Mutex<Progress>,
    stats: Stats,
    /// Each consumer's current session, by consumer number across groups.
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
        let groups = all_groups();
        let per = cfg.consumers_per_group.max(1);
        let mut producer_logs = Vec::new();
        for (name, _) in &cfg.producers {
            producer_logs.push(RecLog::create(&cfg.logs, name, cfg.base)?);
        }
        let mut consumer_logs = Vec::new();
        for &(t, g) in &groups {
            for c in 0..per {
                let who = format!("{}-{g}-consumer-{c}", TABLES[t].0);
                consumer_logs.push((
                    t,
                    g,
                    c,
                    RecLog::create(&cfg.logs, &who, cfg.base)?,
                    RecLog::create(&cfg.logs, &format!("{who}-acks"), cfg.base)?,
                ));
            }
        }
        let progress = Progress {
            committed: vec![HashSet::new(); TABLES.len()],
            groups: groups
                .iter()
                .map(|&(t, g)| (group_name(TABLES[t].0, g), GroupProgress::default()))
                .collect(),
        };
        let shared = Arc::new(Shared {
            sessions: (0..consumer_logs.len())
                .map(|_| Mutex::new(CancellationToken::new()))
                .collect(),
            cfg,
            next_key: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            progress: Mutex::new(progress),
            stats: Stats::default(),
        });
        let stop_producers = CancellationToken::new();
        let stop_consumers = CancellationToken::new();
        let producers = producer_logs
            .into_iter()
            .enumerate()
            .map(|(i, log)| {
                let rng = StdRng::seed_from_u64(shared.cfg.seed.wrapping_add(2001 + i as u64));
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
            .map(|(n, (t, g, c, log, acks))| {
                let rng = StdRng::seed_from_u64(shared.cfg.seed.wrapping_add(3001 + n as u64));
                rt.spawn(consumer(
                    shared.clone(),
                    Consumer {
                        n,
                        table: t,
                        group: g,
                        index: c,
                    },
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

    /// Drops consumer `i`'s connections in every group (the "disconnect consumer" fault).
    pub fn kill_consumer(&self, i: usize) {
        let per = self.shared.cfg.consumers_per_group.max(1);
        for (n, s) in self.shared.sessions.iter().enumerate() {
            if n % per == i % per {
                s.lock().expect("session lock").cancel();
            }
        }
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

    /// Each group's state, from what the clients saw and the groups' saved positions (`floors`,
    /// by `table/group`).
    pub fn groups(&self, floors: &HashMap<String, u64>) -> Vec<GroupState> {
        let p = self.shared.progress.lock().expect("progress lock");
        all_groups()
            .into_iter()
            .map(|(t, g)| {
                let name = group_name(TABLES[t].0, g);
                let gp = &p.groups[&name];
                let floor = floors.get(&name).copied().unwrap_or(0);
                GroupState {
                    // Done means below the saved position, not "ACK got OK": an ACK whose
                    // connection died before its OK may well have been applied.
                    never_delivered: p.committed[t]
                        .iter()
                        .filter(|k| !gp.eid_of_key.contains_key(k))
                        .count(),
                    not_passed: p.committed[t]
                        .iter()
                        .filter(|k| gp.eid_of_key.get(k).is_some_and(|&e| e >= floor))
                        .count(),
                    max_eid: gp.key_of_eid.keys().max().copied(),
                    last_delivery_us: gp.last_delivery_us,
                    name,
                }
            })
            .collect()
    }
}

/// Creates the stream tables (dropping earlier ones, and their groups' rows), straight on the
/// server. BLACKHOLE is a plugin in Debian's MariaDB: loaded first (an error when it is already
/// loaded is fine; a CREATE that then fails says what is wrong). On Galera (`galera`) the
/// BLACKHOLE table is made InnoDB: Galera replicates only InnoDB, so a BLACKHOLE insert reaches
/// only the binlog of the node it was made on, and a group reading another node never sees it
/// (docs/CLUSTERS.md).
pub async fn create_tables(
    c: &mut Conn,
    db: &str,
    ack_wait: f64,
    galera: bool,
) -> Result<(), String> {
    let _ = c.query("INSTALL SONAME 'ha_blackhole'").await;
    let _ = c
        .query(&format!(
            "DELETE FROM `{db}`.`{GROUPS_TABLE}` WHERE table_schema = '{db}' AND table_name LIKE 'chk_stream%'"
        ))
        .await;
    for (table, engine) in TABLES {
        let engine = if galera { "InnoDB" } else { engine };
        for sql in [
            format!("DROP TABLE IF EXISTS `{db}`.`{table}`"),
            format!(
                "CREATE TABLE `{db}`.`{table}` (k BIGINT NOT NULL, note VARCHAR(16) NOT NULL, \
                 at_us BIGINT NOT NULL{}) ENGINE={engine} \
                 COMMENT 'msgproxy_stream,ack_wait={ack_wait},batch_size=10'",
                if engine == "InnoDB" {
                    ", PRIMARY KEY(k)"
                } else {
                    ""
                }
            ),
        ] {
            c.query(&sql).await.map_err(|e| format!("{sql}: {e}"))?;
        }
    }
    Ok(())
}

fn insert_sql(table: &str, keys: &[u64], note: &str, at_us: u64) -> String {
    let values: Vec<String> = keys
        .iter()
        .map(|k| format!("({k}, '{note}', {at_us})"))
        .collect();
    format!(
        "INSERT INTO `{table}` (k, note, at_us) VALUES {}",
        values.join(", ")
    )
}

async fn producer(
    sh: Arc<Shared>,
    i: usize,
    mut log: RecLog,
    mut rng: StdRng,
    stop: CancellationToken,
) {
    let target = sh.cfg.producers[i].1.clone();
    'connect: while let Some(mut conn) = connect_retrying(&target, &stop).await {
        loop {
            if stop.is_cancelled() {
                break 'connect;
            }
            if one_step(&sh, &mut conn, &mut log, &mut rng).await.is_err() {
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

/// One producer step, one of: a single-row INSERT, a multi-row INSERT, a transaction of one or
/// two INSERTs (into either table) that commits, one that rolls back. An error leaves the outcome
/// unknown (nothing more is recorded) and the caller reconnects.
async fn one_step(
    sh: &Shared,
    conn: &mut Conn,
    log: &mut RecLog,
    rng: &mut StdRng,
) -> Result<(), String> {
    let draw = rng.random_range(0..100);
    let rollback = draw >= 85;
    let in_tx = draw >= 60;
    let statements = if in_tx { rng.random_range(1..=2) } else { 1 };
    let mut planned = Vec::new();
    for _ in 0..statements {
        // BLACKHOLE is not transactional: a ROLLBACK cannot undo its insert (MariaDB writes it to
        // the binlog as done, with a warning), so only InnoDB rows are rolled back.
        let t = if rollback {
            0
        } else {
            rng.random_range(0..TABLES.len())
        };
        let rows = if draw < 40 {
            1
        } else {
            rng.random_range(1..=4)
        };
        let keys: Vec<u64> = (0..rows)
            .map(|_| sh.next_key.fetch_add(1, Ordering::Relaxed))
            .collect();
        planned.push((t, keys));
    }
    let all = |planned: &[(usize, Vec<u64>)]| -> Vec<(usize, u64)> {
        planned
            .iter()
            .flat_map(|(t, ks)| ks.iter().map(move |&k| (*t, k)))
            .collect()
    };
    if in_tx {
        run(conn, "BEGIN").await?;
    }
    for &(t, k) in &all(&planned) {
        log.log(Rec::Try {
            table: TABLES[t].0.to_string(),
            key: k,
        });
    }
    let note = if rollback { "rollback" } else { "commit" };
    let mut result = Ok(());
    for (t, keys) in &planned {
        let sql = insert_sql(TABLES[*t].0, keys, note, log.now_us());
        result = run(conn, &sql).await;
        if result.is_err() {
            break;
        }
    }
    if rollback {
        // COMMIT is never sent: whatever happens from here on, these rows are no events.
        if result.is_ok() {
            result = run(conn, "ROLLBACK").await;
        }
        for &(_, k) in &all(&planned) {
            log.log(Rec::RolledBack { key: k });
        }
        return result;
    }
    result?;
    if in_tx {
        run(conn, "COMMIT").await?;
    }
    let mut p = sh.progress.lock().expect("progress lock");
    for &(t, k) in &all(&planned) {
        log.log(Rec::Committed { key: k });
        p.committed[t].insert(k);
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Consumer {
    /// Number across every group (for the sessions and the seeds).
    n: usize,
    table: usize,
    group: &'static str,
    /// Number within its group.
    index: usize,
}

async fn consumer(
    sh: Arc<Shared>,
    me: Consumer,
    mut log: RecLog,
    mut acks: RecLog,
    mut rng: StdRng,
    stop: CancellationToken,
) {
    let proxies = &sh.cfg.proxies;
    // Spread each group's consumers over the proxies, and the groups' first ones too.
    let mut next = (me.index + me.n) % proxies.len();
    let mut backoff = Duration::from_millis(50);
    let mut session_no = 0;
    while !stop.is_cancelled() {
        let target = proxies[next].clone();
        next = (next + 1) % proxies.len();
        // Odd consumers ack through the next proxy (an ACK that reaches a proxy not serving the
        // group is handed to the serving one through the backend), even ones through their own.
        let ack_target = if me.index % 2 == 1 {
            proxies[next].clone()
        } else {
            target.clone()
        };
        let session = stop.child_token();
        *sh.sessions[me.n].lock().expect("session lock") = session.clone();
        session_no += 1;
        let name = format!("c{}.{session_no}", me.index);
        let started = Instant::now();
        let targets = (&target, &ack_target);
        acks = session_run(&sh, me, &name, targets, &mut log, acks, &mut rng, session).await;
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

/// One STREAM connection (to `targets.0`) and its ACK connection (to `targets.1`), until either
/// breaks or `session` is cancelled.
#[allow(clippy::too_many_arguments)]
async fn session_run(
    sh: &Arc<Shared>,
    me: Consumer,
    name: &str,
    (target, ack_target): (&Target, &Target),
    log: &mut RecLog,
    acks: RecLog,
    rng: &mut StdRng,
    session: CancellationToken,
) -> RecLog {
    let table = TABLES[me.table].0;
    let group = group_name(table, me.group);
    let Some(mut stream) = connect_retrying(target, &session).await else {
        return acks;
    };
    // START EARLIEST: whichever consumer creates the group, it starts at the table's creation.
    let sql = format!(
        "STREAM k FROM `{table}` GROUP '{}' START EARLIEST",
        me.group
    );
    let started = tokio::select! {
        _ = session.cancelled() => return acks,
        r = tokio::time::timeout(STATEMENT_LIMIT, stream.start_stream(&sql)) => r,
    };
    if !matches!(started, Ok(Ok(()))) {
        return acks;
    }
    sh.stats.sessions.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::unbounded_channel();
    let acker = tokio::spawn(acker(
        sh.clone(),
        format!("ACK `{table}` GROUP '{}' ", me.group),
        group.clone(),
        ack_target.clone(),
        rx,
        acks,
        session.clone(),
    ));
    loop {
        let (eid, key) = tokio::select! {
            _ = session.cancelled() => break,
            r = stream.next_stream_pair() => match r {
                Ok(v) => v,
                Err(_) => break,
            },
        };
        let t = log.now_us();
        log.log_at(
            t,
            Rec::Delivered {
                group: group.clone(),
                session: name.to_string(),
                eid,
                key,
            },
        );
        {
            let mut p = sh.progress.lock().expect("progress lock");
            let gp = p.groups.get_mut(&group).expect("known group");
            gp.eid_of_key.insert(key, eid);
            gp.key_of_eid.insert(eid, key);
            gp.last_delivery_us = Some(t);
        }
        if !sh.draining.load(Ordering::SeqCst) && rng.random_bool(sh.cfg.skip_ack) {
            sh.stats.skipped_acks.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let _ = tx.send((eid, t));
    }
    log.log(Rec::SessionEnd {
        group,
        session: name.to_string(),
    });
    session.cancel();
    drop(stream);
    acker.await.expect("the acker does not panic")
}

/// Acks in batches on its own connection (to the stream's proxy or another one: an ACK that
/// reaches a proxy not serving the group is handed to the one that does); records each event
/// only after the ACK's OK (as queued when the OK carries a warning: the serving proxy did not
/// answer in time, docs/STREAMS.md). Deliveries older than
/// `ack_fresh` are left to come back (an ACK racing the redelivery would make a legitimate
/// redelivery look like one after the ack).
async fn acker(
    sh: Arc<Shared>,
    prefix: String,
    group: String,
    target: Target,
    mut rx: mpsc::UnboundedReceiver<(u64, u64)>,
    mut log: RecLog,
    session: CancellationToken,
) -> RecLog {
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
        let sql = format!("{prefix}{}", ids.join(", "));
        let result = tokio::select! {
            _ = session.cancelled() => return log,
            r = run_counting(c, &sql) => r,
        };
        match result {
            Ok(outcome) => {
                let queued = outcome.warnings > 0;
                // Fewer affected rows than ids: some were not acked, the client cannot tell which.
                let short = !queued && outcome.affected_rows < batch.len() as u64;
                if queued {
                    sh.stats.queued_acks.fetch_add(1, Ordering::Relaxed);
                }
                if short {
                    sh.stats.short_acks.fetch_add(1, Ordering::Relaxed);
                }
                for &(eid, _) in &batch {
                    let group = group.clone();
                    log.log(if queued {
                        Rec::AckQueued { group, eid }
                    } else if short {
                        Rec::AckUnconfirmed { group, eid }
                    } else {
                        Rec::Acked { group, eid }
                    });
                }
            }
            Err(_) => {
                sh.stats.acks_failed.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
        }
    }
}

/// Each group's saved position and lease holder, from msgproxy's table on the server.
pub async fn saved_positions(
    direct: &Target,
) -> Result<HashMap<String, (u64, Option<String>)>, String> {
    let mut c = Conn::connect(direct).await.map_err(|e| e.to_string())?;
    let rows = c
        .query_rows(&format!(
            "SELECT table_name, CAST(group_name AS CHAR), floor, IF(lease_until > NOW(3), owner, NULL) \
             FROM `{GROUPS_TABLE}` WHERE table_schema = DATABASE()"
        ))
        .await
        .map_err(|e| e.to_string());
    c.quit().await;
    let mut out = HashMap::new();
    for r in rows? {
        let (Some(t), Some(g), Some(f)) = (&r[0], &r[1], &r[2]) else {
            continue;
        };
        out.insert(group_name(t, g), (f.parse().unwrap_or(0), r[3].clone()));
    }
    Ok(out)
}

/// The keys stored in the InnoDB stream table.
pub async fn stored_keys(direct: &Target) -> Result<HashMap<String, HashSet<u64>>, String> {
    let mut c = Conn::connect(direct).await.map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    for (table, engine) in TABLES {
        if engine != "InnoDB" {
            continue;
        }
        let rows = c
            .query_rows(&format!("SELECT k FROM `{table}`"))
            .await
            .map_err(|e| format!("read {table}: {e}"))?;
        out.insert(
            table.to_string(),
            rows.iter()
                .filter_map(|r| r[0].as_deref().and_then(|v| v.parse().ok()))
                .collect(),
        );
    }
    c.quit().await;
    Ok(out)
}
