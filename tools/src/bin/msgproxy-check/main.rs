//! msgproxy-check: runs a mixed messaging workload through two msgproxy processes while killing
//! and restarting them, the server, and client connections; then checks, from the database and
//! the clients' logs, that every committed message was delivered, never twice within one ack
//! window, and that every ack held.
//!
//! ```text
//! cargo run --release --bin msgproxy-check -- --duration 30m [--seed N]
//! ```
//!
//! Exit status: 0 when every check passed, 1 on any violation, 2 when the run itself could not
//! be done (no MariaDB, a process that would not start).
//!
//! Layout:
//! - `cluster` — the throwaway MariaDB and the two proxies; restarts on the same ports.
//! - `faults` — the seeded fault schedule.
//! - `workload` — producers and consumers, which log what they know for certain.
//! - `events` — the clients' log files.
//! - `verify` — the checks.
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
mod verify;
mod workload;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;

use cluster::{proxy_name, Cluster};
use faults::{Fault, Schedule};
use wire::{Conn, Target};
use workload::Workload;

/// The checker's message table.
const TABLE: &str = "chk_messages";
/// Proxies in front of the server.
const PROXIES: usize = 2;
/// Time before the first fault, so that messages flow first.
const WARM_UP: Duration = Duration::from_secs(2);

#[derive(Parser, Debug)]
#[command(
    name = "msgproxy-check",
    about = "Runs a messaging workload through two msgproxy processes under injected faults, then checks delivery, ack windows and acks"
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
    #[arg(long)]
    backend: Option<String>,
    /// The msgproxy binary (default: the one next to this binary, built first under `cargo run`).
    #[arg(long)]
    proxy_bin: Option<PathBuf>,
    /// Producers through the proxies (alternating); one more always inserts straight into the server.
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

fn run(opts: &Opts) -> Result<bool, String> {
    let seed = opts.seed.unwrap_or_else(|| rand::random::<u32>() as u64);
    println!("msgproxy-check: seed {seed} (replay the fault schedule with --seed {seed})");
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
    let mut cluster =
        Cluster::start_server(&work.path, opts.backend.as_deref(), "msgcheck", proxy_bin)?;
    rt.block_on(create_table(&cluster.direct, opts))?;
    cluster.start_proxies(PROXIES)?;
    for i in 0..PROXIES {
        rt.block_on(wait_loaded(&cluster.proxy_target(i)))?;
    }
    println!(
        "started in {:.1} s: {} on port {}, msgproxy a/b on ports {}/{}; work dir {}",
        started.elapsed().as_secs_f64(),
        if cluster.owns_server() {
            "throwaway MariaDB"
        } else {
            "--backend server"
        },
        cluster.direct.port,
        cluster.proxies[0].port,
        cluster.proxies[1].port,
        work.path.display()
    );

    let base = Instant::now();
    let mut producers: Vec<(String, Target)> = (0..opts.producers)
        .map(|i| {
            let p = i % PROXIES;
            (
                format!("producer-{i}-via-{}", proxy_name(p)),
                cluster.proxy_target(p),
            )
        })
        .collect();
    producers.push(("producer-direct".into(), cluster.direct.clone()));
    let mut workload = Workload::start(
        &rt,
        workload::Config {
            table: TABLE.into(),
            seed,
            logs: logs.clone(),
            base,
            producers,
            proxies: (0..PROXIES).map(|i| cluster.proxy_target(i)).collect(),
            consumers: opts.consumers.max(1),
            skip_ack: opts.skip_ack.clamp(0.0, 1.0),
            ack_fresh: Duration::from_secs_f64(opts.ack_wait / 2.0),
            pause: Duration::from_millis(opts.pause_ms),
        },
    )?;

    let mut crashes = Vec::new();
    let faults = inject_faults(&mut cluster, &workload, &rt, seed, opts, base, &mut crashes)?;

    println!("{} faults stop; producers stop; draining", at(base));
    rt.block_on(workload.stop_producers());
    workload.set_draining();
    let drain_limit = Duration::from_secs_f64(
        opts.drain_limit
            .unwrap_or(5.0 * (opts.ack_wait + opts.max_backoff)),
    );
    let drain_started = Instant::now();
    let left = rt.block_on(drain(&cluster.direct, drain_limit))?;
    let drain_took = drain_started.elapsed();
    rt.block_on(workload.stop_consumers());
    let db = rt.block_on(snapshot(&cluster.direct))?;
    if let Err(e) = cluster.check_alive() {
        crashes.push(e);
    }
    cluster.stop();

    let events = events::read_dir(&logs)?;
    let mut report = verify::verify(
        &events,
        &db,
        &verify::Limits {
            ack_wait_us: (opts.ack_wait * 1e6) as u64,
            slack_us: (opts.slack * 1e6) as u64,
        },
    );
    if left > 0 {
        let mut stuck: Vec<i64> = db
            .iter()
            .filter(|(_, r)| !r.acked())
            .map(|(&id, _)| id)
            .collect();
        stuck.sort_unstable();
        stuck.truncate(20);
        report.violations.entry("not drained").or_default().push(format!(
            "{left} rows still unacked {:.0} s after the producers stopped (consumers ack everything then); first ids {stuck:?}",
            drain_limit.as_secs_f64()
        ));
    }
    for c in crashes {
        report.violations.entry("crashed").or_default().push(c);
    }
    if report.committed == 0 || report.deliveries == 0 {
        report
            .violations
            .entry("no workload")
            .or_default()
            .push(format!(
                "{} messages committed, {} delivered: nothing to check",
                report.committed, report.deliveries
            ));
    }

    let stats = workload.stats();
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &faults {
        *by_kind.entry(f.kind()).or_default() += 1;
    }
    println!();
    println!(
        "msgproxy-check: {:.0} s under faults, seed {seed}, {} producers ({} through the proxies, 1 direct), {} consumers",
        opts.duration.as_secs_f64(),
        opts.producers + 1,
        opts.producers,
        opts.consumers.max(1)
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
    println!(
        "  inserted: {} ids tried, {} committed (OK seen), {} rolled back, {} outcome unknown; {} rows in the database ({} acked); {} statements failed",
        report.tried,
        report.committed,
        report.rolled_back,
        report.tried - report.committed - report.rolled_back,
        report.rows,
        report.rows_acked,
        stats.statements_failed.load(Ordering::Relaxed)
    );
    println!(
        "  delivered: {} deliveries of {} ids, {} ids redelivered; {} STREAM sessions",
        report.deliveries,
        report.delivered_ids,
        report.redelivered_ids,
        stats.consumer_sessions.load(Ordering::Relaxed)
    );
    println!(
        "  acked: {} ids (OK seen); {} deliveries left unacked on purpose, {} too old to ack, {} ACKs failed",
        report.acked_ids,
        stats.skipped_acks.load(Ordering::Relaxed),
        stats.stale_acks.load(Ordering::Relaxed),
        stats.acks_failed.load(Ordering::Relaxed)
    );
    println!(
        "  drain: {} after {:.1} s; total run {:.1} s",
        if left == 0 {
            "every row acked".to_string()
        } else {
            format!("{left} rows still unacked")
        },
        drain_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let n = report.violation_count();
    println!("  violations: {n}");
    for (check, list) in &report.violations {
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
fn inject_faults(
    cluster: &mut Cluster,
    workload: &Workload,
    rt: &tokio::runtime::Runtime,
    seed: u64,
    opts: &Opts,
    base: Instant,
    crashes: &mut Vec<String>,
) -> Result<Vec<Fault>, String> {
    let end = base + opts.duration;
    let mut schedule = Schedule::new(seed, cluster.owns_server(), PROXIES, opts.consumers.max(1));
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
                workload.kill_consumer(consumer);
                fault.to_string()
            }
            Fault::KillBackendConnection { pick } => {
                rt.block_on(kill_backend_connection(&cluster.direct, pick))
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

/// Creates the database and the message table straight on the server, before the proxies start
/// (so they load it at start-up). Purging is off in effect (a day): acked rows must stay for
/// the final check.
async fn create_table(direct: &Target, opts: &Opts) -> Result<(), String> {
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
    c.quit().await;
    Ok(())
}

/// Waits until a proxy answers `ACK` on the table (it has loaded it).
async fn wait_loaded(proxy: &Target) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        match Conn::connect(proxy).await {
            Ok(mut c) => match c.query(&format!("ACK `{TABLE}` 0")).await {
                Ok(_) => {
                    c.quit().await;
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "msgproxy on port {} did not load {TABLE} within 30 s: {last}",
        proxy.port
    ))
}

/// Waits until every row is acked or `limit` passes; returns how many rows are left unacked.
async fn drain(direct: &Target, limit: Duration) -> Result<u64, String> {
    let deadline = Instant::now() + limit;
    let sql = format!("SELECT COUNT(*) FROM `{TABLE}` WHERE time_acked IS NULL OR time_acked = 0");
    let mut conn: Option<Conn> = None;
    let mut left = u64::MAX;
    loop {
        if conn.is_none() {
            conn = Conn::connect(direct).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            match c.query_rows(&sql).await {
                Ok(rows) => {
                    left = rows
                        .first()
                        .and_then(|r| r[0].as_deref())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(u64::MAX);
                    if left == 0 {
                        return Ok(0);
                    }
                }
                Err(_) => conn = None,
            }
        }
        if Instant::now() >= deadline {
            if left == u64::MAX {
                return Err("the server did not answer during the drain".into());
            }
            return Ok(left);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
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
}
