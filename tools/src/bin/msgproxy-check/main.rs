//! msgproxy-check: runs a mixed messaging workload through two msgproxy processes (three on a
//! Galera `--cluster`) while killing and restarting them, the server (or cluster nodes), and
//! client connections; then checks, from the database and the clients' logs, that every
//! committed message was delivered, never twice within one ack window, and that every ack held.
//!
//! ```text
//! cargo run --release --bin msgproxy-check -- --duration 30m [--seed N]
//! cargo run --release --bin msgproxy-check -- --cluster galera|replica --duration 10m
//! ```
//!
//! Exit status: 0 when every check passed, 1 on any violation, 2 when the run itself could not
//! be done (no MariaDB, a process that would not start).
//!
//! Layout:
//! - `cluster` — the throwaway MariaDB and the proxies; restarts on the same ports.
//! - `nodes` — under `--cluster`, the Galera nodes or the primary and replica
//!   (scripts/mariadb-cluster.sh); `replication_loss` — what the database lost at a failover,
//!   reported apart from msgproxy's violations.
//! - `faults` — the seeded fault schedule.
//! - `workload` — the message-table workload's producers and consumers, which log what they know
//!   for certain; `verify` — its checks.
//! - `streams` — the event-stream workload (stream tables, consumer groups); `verify_streams` —
//!   its history and checks.
//! - `fifo` — the FIFO-group workload (`vt_group_col`, `vt_max_attempts`, dead letters);
//!   `verify_fifo` — its checks.
//! - `events` — the clients' log files.
//!
//! docs/CHECKING.md says what each workload verifies.
//!
//! `wire` (the minimal MySQL client) and `servers` (process handling) are msgproxy-bench's.

#[allow(dead_code)]
#[path = "../msgproxy-bench/servers.rs"]
mod servers;
#[allow(dead_code)]
#[path = "../msgproxy-bench/wire.rs"]
mod wire;

mod cluster;
mod events;
mod faults;
mod fifo;
mod nodes;
mod replication_loss;
mod streams;
mod verify;
mod verify_fifo;
mod verify_streams;
mod workload;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;

use cluster::{proxy_name, Cluster};
use faults::{Fault, Schedule, ServerFaults};
use nodes::Topology;
use replication_loss::DatabaseLoss;
use wire::{Conn, Target};
use workload::Workload;

/// The checker's message table.
const TABLE: &str = "chk_messages";
/// Proxies in front of one server, and of a primary with its replica (a Galera run has one per
/// node).
const PROXIES: usize = 2;
/// Time before the first fault, so that messages flow first.
const WARM_UP: Duration = Duration::from_secs(2);

#[derive(Parser, Debug)]
#[command(
    name = "msgproxy-check",
    about = "Runs a messaging workload through msgproxy processes under injected faults (on one server or a --cluster), then checks delivery, ack windows and acks"
)]
struct Opts {
    /// How long the workload runs under faults: `90`, `60s`, `30m`, `2h`. Start-up and the drain
    /// at the end come on top (some 10 s).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Seed of the fault schedule and the clients' choices (printed at the start of every run).
    #[arg(long)]
    seed: Option<u64>,
    /// Use this server instead of a throwaway MariaDB (mysql://user:pass@host:port/db): no server
    /// faults then. The table `chk_messages` in that database is dropped and re-created.
    #[arg(long, conflicts_with = "cluster")]
    backend: Option<String>,
    /// Run on a throwaway cluster instead of one server: `galera` (3 nodes, a proxy on each,
    /// nodes killed and rejoined one at a time) or `replica` (a primary and a replica, two
    /// proxies; the primary is killed and the replica promoted once). Needs
    /// scripts/mariadb-cluster.sh (and galera-4 for `galera`).
    #[arg(long, value_parser = Topology::parse)]
    cluster: Option<Topology>,
    /// The msgproxy binary (default: the one next to this binary, built first under `cargo run`).
    #[arg(long)]
    proxy_bin: Option<PathBuf>,
    /// Producers through the proxies (alternating; at least one per proxy); one more always
    /// inserts straight into the server.
    #[arg(long, default_value_t = 2)]
    producers: usize,
    /// STREAM consumers (each moves to the other proxy whenever it reconnects).
    #[arg(long, default_value_t = 3)]
    consumers: usize,
    /// Pause between a producer's statements, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pause_ms: u64,
    /// vt_ack_wait of the table, seconds.
    #[arg(long, default_value_t = 2.0)]
    ack_wait: f64,
    /// vt_min_backoff of the table, seconds (it also gives the ack-window check its margin).
    #[arg(long, default_value_t = 2.0)]
    min_backoff: f64,
    /// vt_max_backoff of the table, seconds.
    #[arg(long, default_value_t = 4.0)]
    max_backoff: f64,
    /// vt_max_unacked of the table [default: none, no limit]: the limit under faults must never
    /// keep a message from its consumers for good.
    #[arg(long)]
    max_unacked: Option<usize>,
    /// Share of deliveries consumers leave unacked on purpose (they must come back).
    #[arg(long, default_value_t = 0.1)]
    skip_ack: f64,
    /// Allowance, seconds, for the time between the proxy acting and a client seeing it.
    #[arg(long, default_value_t = 1.0)]
    slack: f64,
    /// Longest wait, seconds, for the queue to empty after the faults stop (default: 5 × (ack
    /// wait + max backoff)).
    #[arg(long)]
    drain_limit: Option<f64>,
    /// Keep the work dir (server data, proxy logs, client logs); it is kept anyway on failure.
    #[arg(long)]
    keep_workdir: bool,
    /// The workloads to run side by side, comma-separated: `messages` (a message table),
    /// `streams` (event streams: two stream tables, two consumer groups each), `fifo` (FIFO
    /// groups with dead letters) [default: all three].
    #[arg(long, value_parser = parse_workloads)]
    workloads: Option<Workloads>,
    /// Competing consumers in each consumer group of the streams workload.
    #[arg(long, default_value_t = 2)]
    group_consumers: usize,
    /// Where the FIFO workload's dead letters go: `table` (vt_dead_letter), `in-place`, or
    /// `by-seed` (even seeds a table, odd seeds in place).
    #[arg(long, default_value = "by-seed", value_parser = ["table", "in-place", "by-seed"])]
    fifo_dead_letters: String,
}

/// Which workloads run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Workloads(BTreeSet<&'static str>);

impl Workloads {
    fn has(&self, w: &str) -> bool {
        self.0.contains(w)
    }
}

fn parse_workloads(s: &str) -> Result<Workloads, String> {
    let mut set = BTreeSet::new();
    for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let known = ["messages", "streams", "fifo"]
            .into_iter()
            .find(|k| *k == w)
            .ok_or_else(|| format!("{w:?}: the workloads are messages, streams and fifo"))?;
        set.insert(known);
    }
    if set.is_empty() {
        return Err("name at least one workload: messages, streams, fifo".into());
    }
    Ok(Workloads(set))
}

/// `90`, `90s`, `30m`, `2h`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected e.g. 60s, 30m, 2h"))?;
    let factor = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{s:?}: the unit must be s, m or h")),
    };
    if !(n * factor).is_finite() || n < 0.0 {
        return Err(format!("{s:?}: not a duration"));
    }
    Ok(Duration::from_secs_f64(n * factor))
}

impl Opts {
    /// The workloads asked for, or the default: all.
    fn workloads(&self) -> Workloads {
        if let Some(w) = &self.workloads {
            return w.clone();
        }
        parse_workloads("messages,streams,fifo").unwrap_or(Workloads(BTreeSet::new()))
    }

    /// How many proxies run: one per Galera node, else two.
    fn proxies(&self) -> usize {
        match self.cluster {
            Some(t @ Topology::Galera) => t.nodes(),
            _ => PROXIES,
        }
    }

    /// The server faults this run can do.
    fn server_faults(&self) -> ServerFaults {
        match self.cluster {
            Some(Topology::Galera) => ServerFaults::Galera {
                nodes: Topology::Galera.nodes(),
            },
            Some(Topology::Replica) => ServerFaults::Replica,
            None if self.backend.is_some() => ServerFaults::None,
            None => ServerFaults::Single,
        }
    }
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    match run(&opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("msgproxy-check: cannot run: {e}");
            ExitCode::from(2)
        }
    }
}

/// Seconds since `base`, for the progress lines.
fn at(base: Instant) -> String {
    format!("[{:6.1} s]", base.elapsed().as_secs_f64())
}

/// The workloads that run, each optional.
struct Clients {
    messages: Option<Workload>,
    streams: Option<streams::Workload>,
    fifo: Option<fifo::Workload>,
}

impl Clients {
    fn kill_consumer(&self, i: usize) {
        if let Some(w) = &self.messages {
            w.kill_consumer(i % w.consumers());
        }
        if let Some(w) = &self.streams {
            w.kill_consumer(i);
        }
        if let Some(w) = &self.fifo {
            w.kill_consumer(i);
        }
    }
}

/// A violation list under a workload's name: `workload: check`.
type Violations = BTreeMap<String, Vec<String>>;

fn add_violations<K: std::fmt::Display>(
    all: &mut Violations,
    workload: &str,
    list: BTreeMap<K, Vec<String>>,
) {
    for (check, v) in list {
        all.entry(format!("{workload}: {check}"))
            .or_default()
            .extend(v);
    }
}

fn run(opts: &Opts) -> Result<bool, String> {
    let seed = opts.seed.unwrap_or_else(|| rand::random::<u32>() as u64);
    println!("msgproxy-check: seed {seed} (replay the fault schedule with --seed {seed})");
    let workloads = opts.workloads();
    let w = &workloads;
    let proxy_count = opts.proxies();
    let producer_count = opts.producers.max(proxy_count);
    let fifo_moved = match opts.fifo_dead_letters.as_str() {
        "table" => true,
        "in-place" => false,
        _ => seed.is_multiple_of(2),
    };
    let mut work = servers::WorkDir::create_named("msgproxy-check", opts.keep_workdir)?;
    let logs = work.path.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("create {}: {e}", logs.display()))?;
    let proxy_bin = servers::proxy_binary(opts.proxy_bin.as_deref())?;
    // Two workers: the clients must keep reading while other clients wait on a stalled server.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;

    let started = Instant::now();
    let mut cluster = match opts.cluster {
        Some(topology) => {
            println!("starting a {topology} cluster (scripts/mariadb-cluster.sh) ...");
            Cluster::start_nodes(&work.path, topology, "msgcheck", proxy_bin)?
        }
        None => Cluster::start_server(&work.path, opts.backend.as_deref(), "msgcheck", proxy_bin)?,
    };
    rt.block_on(create_tables(&cluster.direct, opts, w, fifo_moved))?;
    if let Some(nodes) = &cluster.nodes {
        // The tables must be on every node before a proxy that prefers it loads them.
        for t in nodes.targets() {
            rt.block_on(wait_tables(t, w))?;
        }
    }
    cluster.start_proxies(proxy_count)?;
    let mut loaded = Vec::new();
    if w.has("messages") {
        loaded.push(TABLE);
    }
    if w.has("fifo") {
        loaded.push(fifo::TABLE);
    }
    for i in 0..proxy_count {
        rt.block_on(wait_loaded(&cluster.proxy_target(i), &loaded))?;
    }
    let servers = match &cluster.nodes {
        Some(n) => format!(
            "{} cluster on ports {}",
            n.topology,
            n.targets()
                .iter()
                .map(|t| t.port.to_string())
                .collect::<Vec<_>>()
                .join("/")
        ),
        None if cluster.owns_server() => {
            format!("throwaway MariaDB on port {}", cluster.direct.port)
        }
        None => format!("--backend server on port {}", cluster.direct.port),
    };
    println!(
        "started in {:.1} s: {servers}, msgproxy {} on ports {}; workloads {}; work dir {}",
        started.elapsed().as_secs_f64(),
        (0..proxy_count)
            .map(|i| proxy_name(i).to_string())
            .collect::<Vec<_>>()
            .join("/"),
        cluster
            .proxies
            .iter()
            .map(|p| p.port.to_string())
            .collect::<Vec<_>>()
            .join("/"),
        w.0.iter().copied().collect::<Vec<_>>().join(","),
        work.path.display()
    );

    let base = Instant::now();
    // Producers of every workload: through each proxy in turn, and one straight to the server.
    let producers = |what: &str| -> Vec<(String, Target)> {
        let mut v: Vec<(String, Target)> = (0..producer_count)
            .map(|i| {
                let p = i % proxy_count;
                (
                    format!("{what}producer-{i}-via-{}", proxy_name(p)),
                    cluster.proxy_target(p),
                )
            })
            .collect();
        v.push((format!("{what}producer-direct"), cluster.direct.clone()));
        v
    };
    let proxies: Vec<Target> = (0..proxy_count).map(|i| cluster.proxy_target(i)).collect();
    let ack_fresh = Duration::from_secs_f64(opts.ack_wait / 2.0);
    let skip_ack = opts.skip_ack.clamp(0.0, 1.0);
    let mut clients = Clients {
        messages: None,
        streams: None,
        fifo: None,
    };
    if w.has("messages") {
        clients.messages = Some(Workload::start(
            &rt,
            workload::Config {
                table: TABLE.into(),
                seed,
                logs: logs.clone(),
                base,
                producers: producers(""),
                proxies: proxies.clone(),
                consumers: opts.consumers.max(1),
                skip_ack,
                ack_fresh,
                pause: Duration::from_millis(opts.pause_ms),
            },
        )?);
    }
    if w.has("streams") {
        clients.streams = Some(streams::Workload::start(
            &rt,
            streams::Config {
                seed,
                logs: logs.join("streams"),
                base,
                producers: producers(""),
                proxies: proxies.clone(),
                consumers_per_group: opts.group_consumers.max(1),
                skip_ack,
                ack_fresh,
                pause: Duration::from_millis(opts.pause_ms * 2),
            },
        )?);
    }
    if w.has("fifo") {
        clients.fifo = Some(fifo::Workload::start(
            &rt,
            fifo::Config {
                seed,
                logs: logs.join("fifo"),
                base,
                producers: producers(""),
                proxies: proxies.clone(),
                consumers: opts.consumers.max(1),
                skip_ack,
                ack_fresh,
                pause: Duration::from_millis(opts.pause_ms * 2),
            },
        )?);
    }

    let mut crashes = Vec::new();
    let mut fault_times = Vec::new();
    let mut failover_us = None;
    let faults = inject_faults(
        &mut cluster,
        &clients,
        &rt,
        seed,
        opts,
        base,
        &mut crashes,
        &mut fault_times,
        &mut failover_us,
    )?;

    println!("{} faults stop; producers stop; draining", at(base));
    rt.block_on(async {
        if let Some(m) = clients.messages.as_mut() {
            m.stop_producers().await;
        }
        if let Some(s) = clients.streams.as_mut() {
            s.stop_producers().await;
        }
        if let Some(f) = clients.fifo.as_mut() {
            f.stop_producers().await;
        }
    });
    if let Some(m) = &clients.messages {
        m.set_draining();
    }
    if let Some(s) = &clients.streams {
        s.set_draining();
    }
    if let Some(f) = &clients.fifo {
        f.set_draining();
    }
    let drain_limit = Duration::from_secs_f64(
        opts.drain_limit
            .unwrap_or(5.0 * (opts.ack_wait + opts.max_backoff)),
    );
    let drain_started = Instant::now();
    let left = rt.block_on(drain(&cluster.direct, &clients, drain_limit, base))?;
    let drain_took = drain_started.elapsed();
    rt.block_on(async {
        if let Some(m) = clients.messages.as_mut() {
            m.stop_consumers().await;
        }
        if let Some(s) = clients.streams.as_mut() {
            s.stop_consumers().await;
        }
        if let Some(f) = clients.fifo.as_mut() {
            f.stop_consumers().await;
        }
    });
    let db = if w.has("messages") {
        Some(rt.block_on(snapshot(&cluster.direct))?)
    } else {
        None
    };
    let streams_final = if w.has("streams") {
        let floors = rt.block_on(streams::saved_positions(&cluster.direct))?;
        Some(verify_streams::Final {
            floors: floors.into_iter().map(|(g, (f, _))| (g, f)).collect(),
            stored: rt.block_on(streams::stored_keys(&cluster.direct))?,
        })
    } else {
        None
    };
    let fifo_final = if w.has("fifo") {
        Some(rt.block_on(fifo::snapshot(&cluster.direct, fifo_moved))?)
    } else {
        None
    };
    if let Err(e) = cluster.check_alive() {
        crashes.push(e);
    }
    cluster.stop();

    let mut violations = Violations::new();
    let mut summary = Vec::new();
    let slack_us = (opts.slack * 1e6) as u64;
    let ack_wait_us = (opts.ack_wait * 1e6) as u64;
    if let (Some(m), Some(db)) = (&clients.messages, &db) {
        let events = events::read_dir(&logs)?;
        let loss = match failover_us {
            Some(f) => replication_loss::account(&events, db, f, ack_wait_us, slack_us),
            None => DatabaseLoss::default(),
        };
        let report = verify::verify(
            &events,
            db,
            &verify::Limits {
                ack_wait_us,
                slack_us,
            },
            &loss,
        );
        let stats = m.stats();
        summary.push(format!(
            "  messages: {} ids tried, {} committed (OK seen), {} rolled back, {} outcome unknown; {} rows in the database ({} acked); {} statements failed",
            report.tried,
            report.committed,
            report.rolled_back,
            report.tried - report.committed - report.rolled_back,
            report.rows,
            report.rows_acked,
            stats.statements_failed.load(Ordering::Relaxed)
        ));
        summary.push(format!(
            "    delivered: {} deliveries of {} ids, {} ids redelivered; {} STREAM sessions; acked {} ids (OK seen); {} left unacked on purpose, {} too old to ack, {} ACKs failed",
            report.deliveries,
            report.delivered_ids,
            report.redelivered_ids,
            stats.consumer_sessions.load(Ordering::Relaxed),
            report.acked_ids,
            stats.skipped_acks.load(Ordering::Relaxed),
            stats.stale_acks.load(Ordering::Relaxed),
            stats.acks_failed.load(Ordering::Relaxed)
        ));
        if failover_us.is_some() {
            summary.push(format!("    {}", loss.describe()));
        }
        if report.committed == 0 || report.deliveries == 0 {
            violations
                .entry("messages: no workload".into())
                .or_default()
                .push(format!(
                    "{} messages committed, {} delivered: nothing to check",
                    report.committed, report.deliveries
                ));
        }
        if left.messages > 0 {
            let mut stuck: Vec<i64> = db
                .iter()
                .filter(|(_, r)| !r.acked())
                .map(|(&id, _)| id)
                .collect();
            stuck.sort_unstable();
            stuck.truncate(20);
            violations.entry("messages: not drained".into()).or_default().push(format!(
                "{} rows still unacked {:.0} s after the producers stopped (consumers ack everything then); first ids {stuck:?}",
                left.messages,
                drain_limit.as_secs_f64()
            ));
        }
        add_violations(&mut violations, "messages", report.violations);
    }
    if let (Some(s), Some(fin)) = (&clients.streams, &streams_final) {
        let history = verify_streams::read_dir(&logs.join("streams"))?;
        let limits = verify_streams::Limits {
            ack_wait_us,
            slack_us,
            groups: streams::TABLES
                .iter()
                .map(|(t, _)| {
                    (
                        t.to_string(),
                        streams::GROUPS
                            .iter()
                            .map(|g| streams::group_name(t, g))
                            .collect(),
                    )
                })
                .collect(),
            state_faults_us: fault_times.clone(),
        };
        let report = verify_streams::verify(&history, fin, &limits);
        let stats = s.stats();
        summary.push(format!(
            "  streams: {} keys tried, {} committed (OK seen), {} rolled back; {} statements failed",
            report.tried,
            report.committed,
            report.rolled_back,
            stats.statements_failed.load(Ordering::Relaxed)
        ));
        summary.push(format!(
            "    delivered: {} deliveries, {} redeliveries; events per group {}; {} STREAM sessions ({} ended); {} events acked (OK seen), {} ACKs queued (OK with a warning), {} ACKs with fewer affected rows than ids, {} left unacked on purpose, {} too old to ack, {} ACKs failed",
            report.deliveries,
            report.redeliveries,
            report
                .per_group
                .iter()
                .map(|(g, n)| format!("{g} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            stats.sessions.load(Ordering::Relaxed),
            report.sessions_ended,
            report.acks,
            stats.queued_acks.load(Ordering::Relaxed),
            stats.short_acks.load(Ordering::Relaxed),
            stats.skipped_acks.load(Ordering::Relaxed),
            stats.stale_acks.load(Ordering::Relaxed),
            stats.acks_failed.load(Ordering::Relaxed)
        ));
        if report.committed == 0 || report.deliveries == 0 {
            violations
                .entry("streams: no workload".into())
                .or_default()
                .push(format!(
                    "{} inserts committed, {} delivered: nothing to check",
                    report.committed, report.deliveries
                ));
        }
        for g in &left.stream_groups {
            violations
                .entry("streams: not drained".into())
                .or_default()
                .push(g.clone());
        }
        add_violations(&mut violations, "streams", report.violations);
    }
    if let (Some(f), Some((table, dead))) = (&clients.fifo, &fifo_final) {
        let events = events::read_dir(&logs.join("fifo"))?;
        let loss = match failover_us {
            Some(f) => replication_loss::account_by(
                &events,
                |id| {
                    table
                        .get(&id)
                        .or_else(|| dead.get(&id))
                        .map(|m| (m.state != verify_fifo::State::Due, m.sends))
                },
                f,
                ack_wait_us,
                slack_us,
            ),
            None => DatabaseLoss::default(),
        };
        let report = verify_fifo::verify(
            &events,
            table,
            dead,
            &verify_fifo::Limits {
                ack_wait_us,
                slack_us,
                max_attempts: fifo::MAX_ATTEMPTS,
            },
            &loss,
        );
        let stats = f.stats();
        summary.push(format!(
            "  fifo (dead letters {}): {} messages committed (OK seen) over {} keys, {} poison; {} statements failed",
            if fifo_moved { "moved to a table" } else { "in place" },
            report.committed,
            report.keys,
            stats.poison.load(Ordering::Relaxed),
            stats.statements_failed.load(Ordering::Relaxed)
        ));
        summary.push(format!(
            "    {} deliveries; {} STREAM sessions; at the end {} acked, {} dead ({} poison), {} still due; {} left unacked on purpose, {} too old to ack, {} ACKs failed",
            report.deliveries,
            stats.sessions.load(Ordering::Relaxed),
            report.acked,
            report.dead,
            report.dead_poison,
            report.due,
            stats.skipped_acks.load(Ordering::Relaxed),
            stats.stale_acks.load(Ordering::Relaxed),
            stats.acks_failed.load(Ordering::Relaxed)
        ));
        if failover_us.is_some() {
            summary.push(format!("    {}", loss.describe()));
        }
        if report.committed == 0 || report.deliveries == 0 {
            violations
                .entry("fifo: no workload".into())
                .or_default()
                .push(format!(
                    "{} messages committed, {} delivered: nothing to check",
                    report.committed, report.deliveries
                ));
        }
        if left.fifo > 0 {
            violations
                .entry("fifo: not drained".into())
                .or_default()
                .push(format!(
                    "{} messages neither acked nor dead {:.0} s after the producers stopped",
                    left.fifo,
                    drain_limit.as_secs_f64()
                ));
        }
        add_violations(&mut violations, "fifo", report.violations);
    }
    for c in crashes {
        violations.entry("crashed".into()).or_default().push(c);
    }

    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &faults {
        *by_kind.entry(f.kind()).or_default() += 1;
    }
    println!();
    println!(
        "msgproxy-check: {:.0} s under faults, seed {seed}, workloads {}; each with {} producers ({} through the proxies, 1 direct)",
        opts.duration.as_secs_f64(),
        w.0.iter().copied().collect::<Vec<_>>().join(","),
        producer_count + 1,
        producer_count,
    );
    println!(
        "  faults injected: {}{}",
        faults.len(),
        if faults.is_empty() {
            " (the run is too short for any)".to_string()
        } else {
            format!(
                " ({})",
                by_kind
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    for line in summary {
        println!("{line}");
    }
    println!(
        "  drain: {} after {:.1} s; total run {:.1} s",
        if left.is_empty() {
            "everything acked (or dead)".to_string()
        } else {
            "NOT drained".to_string()
        },
        drain_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let n: usize = violations.values().map(Vec::len).sum();
    println!("  violations: {n}");
    for (check, list) in &violations {
        println!("    {check}: {}", list.len());
        for v in list.iter().take(10) {
            println!("      {v}");
        }
        if list.len() > 10 {
            println!("      ... and {} more", list.len() - 10);
        }
    }
    if n == 0 {
        println!("PASSED");
        Ok(true)
    } else {
        work.keep_on_drop();
        println!(
            "FAILED: logs kept in {} (logs/: client events; msgproxy-*.log, mariadbd-*.log); replay the faults with --seed {seed}",
            work.path.display()
        );
        Ok(false)
    }
}

/// Applies faults from the schedule until `--duration` has passed since `base`. Processes that
/// died on their own are noted in `crashes` and started again, so the run goes on.
/// `fault_times` gets the time (µs since `base`) of each fault that may cost a proxy state it
/// had not saved: everything but a consumer's disconnect. `failover_us` gets the time the
/// primary was killed, in a replica run.
#[allow(clippy::too_many_arguments)]
fn inject_faults(
    cluster: &mut Cluster,
    clients: &Clients,
    rt: &tokio::runtime::Runtime,
    seed: u64,
    opts: &Opts,
    base: Instant,
    crashes: &mut Vec<String>,
    fault_times: &mut Vec<u64>,
    failover_us: &mut Option<u64>,
) -> Result<Vec<Fault>, String> {
    let end = base + opts.duration;
    let mut schedule = Schedule::new(
        seed,
        opts.server_faults(),
        cluster.proxies.len(),
        opts.consumers.max(1),
    );
    let mut done = Vec::new();
    let mut next_at = base + WARM_UP;
    loop {
        let (pause, fault) = schedule.next_fault();
        next_at += pause;
        // No fault in the last two seconds: its recovery belongs to the run, not the drain.
        if next_at + Duration::from_secs(2) > end {
            break;
        }
        watch_until(cluster, next_at, crashes)?;
        if !matches!(fault, Fault::KillConsumer { .. }) {
            fault_times.push(base.elapsed().as_micros() as u64);
        }
        let detail = match fault {
            Fault::KillProxy { proxy, down } => {
                cluster.kill_proxy(proxy);
                std::thread::sleep(down);
                cluster.start_proxy(proxy)?;
                format!(
                    "SIGKILL msgproxy {}, restarted after {down:?}",
                    proxy_name(proxy)
                )
            }
            Fault::RestartServer | Fault::KillServer => {
                let t = Instant::now();
                cluster.restart_server(fault == Fault::KillServer)?;
                format!("{fault}: back after {:.1} s", t.elapsed().as_secs_f64())
            }
            Fault::KillConsumer { consumer } => {
                clients.kill_consumer(consumer);
                fault.to_string()
            }
            Fault::KillBackendConnection { pick } => {
                rt.block_on(kill_backend_connection(&cluster.any_server(pick), pick))
            }
            Fault::BounceNode { node, crash, down } => {
                let rejoin = cluster.bounce_node(node, crash, down)?;
                format!(
                    "{} node {}, started again after {down:?}; rejoined (Synced) in {:.1} s",
                    if crash { "SIGKILL" } else { "stopped" },
                    node + 1,
                    rejoin.as_secs_f64()
                )
            }
            Fault::FailOver { detect } => {
                let promoted = cluster.fail_over(detect)?;
                *failover_us = Some(promoted.duration_since(base).as_micros() as u64);
                format!(
                    "SIGKILL the primary; replica promoted after {detect:?}; the run goes on against it (port {})",
                    cluster.direct.port
                )
            }
        };
        println!("{} {detail}", at(base));
        done.push(fault);
        // The next pause counts from the end of this fault (a restart takes a while).
        next_at = next_at.max(Instant::now());
    }
    watch_until(cluster, end, crashes)?;
    Ok(done)
}

/// Sleeps until `t`, restarting any process that died on its own meanwhile.
fn watch_until(cluster: &mut Cluster, t: Instant, crashes: &mut Vec<String>) -> Result<(), String> {
    while Instant::now() < t {
        if let Err(e) = cluster.check_alive() {
            eprintln!("{e}");
            crashes.push(e);
            cluster.revive()?;
        }
        std::thread::sleep(
            t.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(200)),
        );
    }
    Ok(())
}

/// `KILL`s one of the server's other client connections: a proxy's backend or binlog connection
/// or the direct producer's. Returns what it did.
async fn kill_backend_connection(direct: &Target, pick: u64) -> String {
    let result = async {
        let mut c = Conn::connect(direct).await.map_err(|e| e.to_string())?;
        let rows = c
            .query_rows(
                "SELECT id, command FROM information_schema.PROCESSLIST \
                 WHERE id <> CONNECTION_ID() AND command <> 'Daemon' AND user = \
                 (SELECT user FROM information_schema.PROCESSLIST WHERE id = CONNECTION_ID()) ORDER BY id",
            )
            .await
            .map_err(|e| e.to_string())?;
        if rows.is_empty() {
            return Ok("KILL a backend connection: none to kill".to_string());
        }
        let row = &rows[(pick % rows.len() as u64) as usize];
        let id = row[0].clone().unwrap_or_default();
        let command = row[1].clone().unwrap_or_default();
        let _ = c.query(&format!("KILL CONNECTION {id}")).await;
        c.quit().await;
        Ok::<_, String>(format!(
            "KILL backend connection {id} ({command}; one of {})",
            rows.len()
        ))
    };
    result
        .await
        .unwrap_or_else(|e: String| format!("KILL a backend connection: failed: {e}"))
}

fn table_comment(opts: &Opts) -> String {
    format!(
        "vitess_message,vt_ack_wait={},vt_min_backoff={},vt_max_backoff={},vt_purge_after=86400,\
         vt_batch_size=10,vt_cache_size=1000,vt_poller_interval=1{}",
        opts.ack_wait,
        opts.min_backoff,
        opts.max_backoff,
        opts.max_unacked
            .map(|n| format!(",vt_max_unacked={n}"))
            .unwrap_or_default()
    )
}

/// Creates the database and the workloads' tables straight on the server, before the proxies
/// start (so they load them at start-up). Purging is off in effect (a day): acked rows must stay
/// for the final check.
async fn create_tables(
    direct: &Target,
    opts: &Opts,
    workloads: &Workloads,
    fifo_moved: bool,
) -> Result<(), String> {
    let mut c = Conn::connect(&Target {
        db: String::new(),
        ..direct.clone()
    })
    .await
    .map_err(|e| format!("cannot connect to the server: {e}"))?;
    for sql in [
        format!("CREATE DATABASE IF NOT EXISTS `{}`", direct.db),
        format!("DROP TABLE IF EXISTS `{}`.`{TABLE}`", direct.db),
        format!(
            "CREATE TABLE `{}`.`{TABLE}` (id BIGINT NOT NULL, time_next BIGINT DEFAULT 0, epoch BIGINT, \
             time_acked BIGINT, message VARCHAR(128), PRIMARY KEY(id), INDEX next_idx(time_next, epoch), \
             INDEX ack_idx(time_acked)) ENGINE=InnoDB COMMENT '{}'",
            direct.db,
            table_comment(opts)
        ),
    ] {
        c.query(&sql).await.map_err(|e| format!("{sql}: {e}"))?;
    }
    if workloads.has("streams") {
        let galera = opts.cluster == Some(Topology::Galera);
        streams::create_tables(&mut c, &direct.db, opts.ack_wait, galera).await?;
    }
    if workloads.has("fifo") {
        fifo::create_tables(&mut c, &direct.db, opts.ack_wait, fifo_moved).await?;
    }
    c.quit().await;
    Ok(())
}

/// Waits until the message tables of `workloads` exist on server `t` (a node of a cluster that
/// gets them by replication).
async fn wait_tables(t: &Target, workloads: &Workloads) -> Result<(), String> {
    let mut tables = Vec::new();
    if workloads.has("messages") {
        tables.push(TABLE);
    }
    if workloads.has("fifo") {
        tables.push(fifo::TABLE);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        match Conn::connect(t).await {
            Ok(mut c) => {
                let mut all = true;
                for table in &tables {
                    if let Err(e) = c.query(&format!("SELECT 1 FROM `{table}` LIMIT 0")).await {
                        last = e.to_string();
                        all = false;
                        break;
                    }
                }
                c.quit().await;
                if all {
                    return Ok(());
                }
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "the tables did not reach the server on port {} within 60 s: {last}",
        t.port
    ))
}

/// Waits until a proxy answers `ACK` on each message table (it has loaded them).
async fn wait_loaded(proxy: &Target, tables: &[&str]) -> Result<(), String> {
    for table in tables {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        let mut done = false;
        while !done && Instant::now() < deadline {
            match Conn::connect(proxy).await {
                Ok(mut c) => match c.query(&format!("ACK `{table}` 0")).await {
                    Ok(_) => {
                        c.quit().await;
                        done = true;
                        continue;
                    }
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !done {
            return Err(format!(
                "msgproxy on port {} did not load {table} within 30 s: {last}",
                proxy.port
            ));
        }
    }
    Ok(())
}

/// What the drain left.
#[derive(Debug, Default)]
struct Left {
    /// Message rows unacked.
    messages: u64,
    /// Stream groups not done, each described.
    stream_groups: Vec<String>,
    /// FIFO messages neither acked nor dead.
    fifo: u64,
}

impl Left {
    fn is_empty(&self) -> bool {
        self.messages == 0 && self.stream_groups.is_empty() && self.fifo == 0
    }
}

/// Progress lines during the drain.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Waits until every workload is done or `limit` passes, with a progress line every 5 s:
/// messages — every row acked; streams — every group's saved position passed every insert known
/// to be committed and every event it delivered; FIFO — every message acked or
/// dead. Returns what is left.
async fn drain(
    direct: &Target,
    clients: &Clients,
    limit: Duration,
    base: Instant,
) -> Result<Left, String> {
    let deadline = Instant::now() + limit;
    let mut next_progress = Instant::now() + PROGRESS_EVERY;
    let mut conn: Option<Conn> = None;
    let mut answered = false;
    loop {
        if conn.is_none() {
            conn = Conn::connect(direct).await.ok();
        }
        let mut left = Left::default();
        let mut notes = Vec::new();
        if let Some(c) = conn.as_mut() {
            match drain_state(c, direct, clients, base).await {
                Ok((l, n)) => {
                    answered = true;
                    left = l;
                    notes = n;
                }
                Err(_) => conn = None,
            }
        }
        if conn.is_some() && left.is_empty() {
            return Ok(left);
        }
        if Instant::now() >= deadline {
            if !answered {
                return Err("the server did not answer during the drain".into());
            }
            return Ok(left);
        }
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            println!(
                "{} drain: {}",
                at(base),
                if notes.is_empty() {
                    "the server does not answer".to_string()
                } else {
                    notes.join("; ")
                }
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One look at what is left, and a note per workload for the progress line.
async fn drain_state(
    c: &mut Conn,
    direct: &Target,
    clients: &Clients,
    base: Instant,
) -> Result<(Left, Vec<String>), String> {
    let mut left = Left::default();
    let mut notes = Vec::new();
    if clients.messages.is_some() {
        let sql =
            format!("SELECT COUNT(*) FROM `{TABLE}` WHERE time_acked IS NULL OR time_acked = 0");
        let rows = c.query_rows(&sql).await.map_err(|e| e.to_string())?;
        left.messages = rows
            .first()
            .and_then(|r| r[0].as_deref())
            .and_then(|v| v.parse().ok())
            .ok_or("COUNT(*) answered no number")?;
        notes.push(format!("messages {} unacked", left.messages));
    }
    if let Some(s) = &clients.streams {
        let saved = streams::saved_positions(direct).await?;
        let floors = saved.iter().map(|(g, (f, _))| (g.clone(), *f)).collect();
        let now_us = base.elapsed().as_micros() as u64;
        for g in s.groups(&floors) {
            let (floor, owner) = saved.get(&g.name).cloned().unwrap_or((0, None));
            let passed = g.max_eid.is_none_or(|m| floor > m);
            if g.never_delivered + g.not_passed > 0 || !passed {
                let idle = g
                    .last_delivery_us
                    .map_or("never delivered".to_string(), |t| {
                        format!(
                            "last delivery {:.1} s ago",
                            now_us.saturating_sub(t) as f64 / 1e6
                        )
                    });
                let desc = format!(
                    "{}: {} committed inserts never delivered, {} delivered and not passed by its saved position {floor}{}, {idle}, served by {}",
                    g.name,
                    g.never_delivered,
                    g.not_passed,
                    if passed { "" } else { " (behind its last delivery)" },
                    owner.as_deref().unwrap_or("nobody")
                );
                notes.push(format!("streams {desc}"));
                left.stream_groups.push(desc);
            }
        }
        if left.stream_groups.is_empty() {
            notes.push("streams done".into());
        }
    }
    if clients.fifo.is_some() {
        left.fifo = fifo::due_count(c).await?;
        notes.push(format!("fifo {} neither acked nor dead", left.fifo));
    }
    Ok((left, notes))
}

/// Every row's epoch and time_acked.
async fn snapshot(direct: &Target) -> Result<HashMap<i64, verify::Row>, String> {
    let mut c = Conn::connect(direct)
        .await
        .map_err(|e| format!("cannot connect to the server for the final check: {e}"))?;
    let rows = c
        .query_rows(&format!(
            "SELECT id, IFNULL(epoch, 0), time_acked FROM `{TABLE}`"
        ))
        .await
        .map_err(|e| format!("read {TABLE}: {e}"))?;
    c.quit().await;
    let int = |v: &Option<String>| v.as_deref().and_then(|s| s.parse::<i64>().ok());
    let mut db = HashMap::with_capacity(rows.len());
    for r in &rows {
        let id = int(&r[0]).ok_or("a row whose id is not an integer")?;
        db.insert(
            id,
            verify::Row {
                epoch: int(&r[1]).unwrap_or(0),
                time_acked: int(&r[2]),
            },
        );
    }
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn workloads() {
        let w = parse_workloads("streams, fifo").unwrap();
        assert!(w.has("streams") && w.has("fifo") && !w.has("messages"));
        assert_eq!(parse_workloads("messages,messages").unwrap().0.len(), 1);
        assert!(parse_workloads("queues")
            .unwrap_err()
            .contains("messages, streams and fifo"));
        assert!(parse_workloads(",").is_err());
    }

    #[test]
    fn cluster_options() {
        let parse = |args: &[&str]| {
            Opts::try_parse_from(std::iter::once("msgproxy-check").chain(args.iter().copied()))
        };
        let plain = parse(&[]).unwrap();
        assert_eq!(plain.workloads().0.len(), 3);
        assert_eq!(plain.proxies(), 2);
        assert_eq!(plain.server_faults(), ServerFaults::Single);

        let galera = parse(&["--cluster", "galera"]).unwrap();
        assert_eq!(galera.cluster, Some(Topology::Galera));
        assert_eq!(galera.proxies(), 3);
        assert_eq!(galera.server_faults(), ServerFaults::Galera { nodes: 3 });
        // All three workloads by default on a cluster too; only the ones asked for otherwise.
        let w = galera.workloads();
        assert!(w.has("messages") && w.has("fifo") && w.has("streams"));
        let asked = parse(&["--cluster", "galera", "--workloads", "streams"]).unwrap();
        assert!(asked.workloads().has("streams") && !asked.workloads().has("fifo"));

        let replica = parse(&["--cluster=replica"]).unwrap();
        assert_eq!(replica.proxies(), 2);
        assert_eq!(replica.server_faults(), ServerFaults::Replica);

        assert!(parse(&["--cluster", "sharded"]).is_err());
        assert!(parse(&["--cluster", "galera", "--backend", "mysql://root@h/db"]).is_err());
        let backend = parse(&["--backend", "mysql://root@h/db"]).unwrap();
        assert_eq!(backend.server_faults(), ServerFaults::None);
    }
}
