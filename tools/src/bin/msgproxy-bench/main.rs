//! msgproxy-bench: how close msgproxy comes to the server itself, and to the brokers users would
//! pick instead.
//!
//! ```text
//! cargo run --release --bin msgproxy-bench -- [--smoke] [--only point,large,...]
//! ```
//!
//! It starts a throwaway MariaDB (or uses `--backend`) and msgproxy in front of it, runs each
//! scenario against the server directly and through msgproxy in the same run, interleaved
//! (direct, proxy, direct, proxy, ...) for `--reps` repetitions, and prints one Markdown table
//! of medians with their min–max. `--smoke` runs every scenario for a moment with tiny sizes and
//! fails only when a scenario cannot run, so CI keeps the tool working.
//!
//! Layout:
//! - `wire` — the load generator's own minimal MySQL client (cheap per request).
//! - `servers` — the throwaway MariaDB and the msgproxy process; CPU and memory readings.
//! - `report` — percentiles, medians over repetitions, the table.
//! - `passthrough` — point SELECTs (text and prepared), one large result, connection set-up.
//! - `messaging` — message tables, producers and `STREAM` consumers; end-to-end latency.
//! - `throughput` — sustained messaging against the server's own insert rate.
//! - `backlog` — a large backlog of due rows.
//! - `fifo` — FIFO groups (`vt_group_col`): a backlog over many keys.
//! - `ddl` — DDL of plain and temporary tables, and of message tables, one connection.
//! - `handqueue` — msgproxy's queue against one written by hand in SQL on the same server.
//! - `streams` — event streams (docs/STREAMS.md §5): one group's delivered-and-acked events/s
//!   (InnoDB and BLACKHOLE stream tables, single-row and multi-row inserts) against the
//!   server's insert rate; four groups; latency; replay from `START EARLIEST`.
//! - `stream_jetstream` — the same event-stream loads on NATS JetStream: a stream with several
//!   durable consumers (feature `brokers`), in the streams scenario's table.
//! - `cluster` — msgproxy on a 3-node Galera cluster against one server: sustained messaging,
//!   latency, failover time (scripts/mariadb-cluster.sh starts the nodes).
//! - `haproxy` — HAProxy in TCP mode in front of the same server, the point SELECTs' third side.
//! - `brokers` — the same messaging workloads on RabbitMQ and NATS JetStream (feature `brokers`).

mod backlog;
mod cluster;
mod ddl;
mod fifo;
mod handqueue;
mod haproxy;
mod messaging;
mod passthrough;
mod report;
mod servers;
mod streams;
mod throughput;
mod wire;

#[cfg(feature = "brokers")]
mod brokers;
#[cfg(feature = "brokers")]
mod stream_jetstream;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use report::Row;
use servers::{MariaDb, Proxy, ServerSettings, WorkDir};
use wire::{Conn, Target};

/// Scenarios, in the order they run.
const SCENARIOS: &[&str] = &[
    "point",
    "large",
    "connect",
    "ddl",
    "latency",
    "throughput",
    "handqueue",
    "backlog",
    "fifo",
    "streams",
    "cluster",
    "brokers",
];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "msgproxy-bench",
    about = "Benchmarks msgproxy against the server it fronts, and its messaging against RabbitMQ and NATS JetStream"
)]
pub struct Opts {
    /// Run every scenario for about a second with tiny sizes; fail only if a scenario cannot run.
    #[arg(long)]
    pub smoke: bool,
    /// Use this server instead of starting a throwaway MariaDB (mysql://user:pass@host:port/db).
    /// Its durability settings are read, not changed.
    #[arg(long)]
    pub backend: Option<String>,
    /// The msgproxy binary (default: the one next to this binary, built first under `cargo run`).
    #[arg(long)]
    pub proxy_bin: Option<PathBuf>,
    /// Comma-separated scenarios to run (point, large, connect, ddl, latency, throughput,
    /// handqueue, backlog, fifo, streams, cluster, brokers); default all.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Repetitions of each measurement (direct and proxy interleaved).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Seconds each timed run lasts.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Rows of the large result.
    #[arg(long)]
    pub large_rows: Option<u64>,
    /// Due rows in the backlog scenario.
    #[arg(long)]
    pub backlog_rows: Option<u64>,
    /// Seconds the backlog is drained for (the drain rate is measured over this time).
    #[arg(long)]
    pub drain_seconds: Option<f64>,
    /// innodb_flush_log_at_trx_commit of the throwaway server (1 = durable: fsync at every commit).
    #[arg(long, default_value_t = 1)]
    pub flush_log_at_trx_commit: u8,
    /// sync_binlog of the throwaway server (1 = fsync the binlog at every commit).
    #[arg(long, default_value_t = 1)]
    pub sync_binlog: u32,
    /// innodb_buffer_pool_size of the throwaway server.
    #[arg(long, default_value = "1G")]
    pub buffer_pool: String,
    /// A mariadbd option for the throwaway server (`--server-arg=--transaction-isolation=READ-COMMITTED`),
    /// added after the bench's own; repeat for more. The header lists them.
    #[arg(long = "server-arg", value_name = "OPTION", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// Keep the throwaway server on these CPUs (`1`, `0,2-3`, as `taskset -c` takes them), in
    /// the direct runs and through msgproxy alike: with `--proxy-cpus` on the others, the server
    /// has the same CPUs either way, as on a host of its own.
    #[arg(long, value_name = "CPUS", value_parser = servers::CpuSet::parse)]
    pub server_cpus: Option<servers::CpuSet>,
    /// Keep msgproxy and the bench's own load generator on these CPUs.
    #[arg(long, value_name = "CPUS", value_parser = servers::CpuSet::parse)]
    pub proxy_cpus: Option<servers::CpuSet>,
    /// Connections of the concurrent pass-through runs.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Producer connections in the messaging runs.
    #[arg(long, default_value_t = 4)]
    pub producers: usize,
    /// STREAM consumers in the messaging runs (each with its own ack connection).
    #[arg(long, default_value_t = 2)]
    pub consumers: usize,
    /// Rows per INSERT in the multi-row runs (messages per confirmed batch for the brokers).
    #[arg(long, default_value_t = 100)]
    pub multi_rows: usize,
    /// Events of the streams scenario's replay from `START EARLIEST` (a tenth of them are
    /// replayed first, for the memory comparison) [default: 1000000; 2000 with --smoke].
    #[arg(long)]
    pub replay_events: Option<u64>,
    /// Messages per second of the latency runs.
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Least time between one acker's ACK statements, in milliseconds: 0 acks whatever arrived
    /// while the previous ACK ran; more makes fewer, larger ACKs, as a consumer that acks
    /// periodically does (messages are delivered as fast either way; only their acks wait).
    #[arg(long, default_value_t = 0.0)]
    pub ack_interval_ms: f64,
    /// In the sustained messaging runs, let the producers insert straight into the server
    /// instead of through msgproxy (the streams and acks still go through it): separates what
    /// the proxy's hop costs the producers from what the queue costs the server.
    #[arg(long)]
    pub producers_direct: bool,
    /// In the handqueue scenario, how long a consumer of the queue written by hand waits after a
    /// claim that found nothing, in milliseconds (it has no binlog to wake it).
    #[arg(long, default_value_t = 1.0)]
    pub hand_poll_ms: f64,
    /// vt_batch_size of the bench's message tables.
    #[arg(long, default_value_t = 100)]
    pub batch_size: usize,
    /// vt_cache_size of the bench's message tables.
    #[arg(long, default_value_t = 10000)]
    pub cache_size: usize,
    /// vt_max_unacked of the bench's message tables [default: none, no limit]
    #[arg(long)]
    pub max_unacked: Option<usize>,
    /// In the sustained scenario, also run msgproxy on a message table with this
    /// vt_purge_after (seconds; 0 = an ACK deletes the rows, MESSAGING.md §13), in the same
    /// repetitions as the default (3600), and report the two against each other. In the
    /// handqueue scenario, msgproxy's table has this vt_purge_after, and with 0 the queue written
    /// by hand acks with a DELETE too (an application that keeps no acked rows).
    #[arg(long, value_name = "SECS")]
    pub purge_after: Option<f64>,
    /// In the sustained scenario, also run the consumers as filtered streams,
    /// `STREAM * FROM t WHERE <COND>` (MESSAGING.md §12), in the same repetitions as plain
    /// streams, and report the two against each other (only matching messages are delivered).
    #[arg(long, value_name = "COND")]
    pub stream_where: Option<String>,
    /// vt_poller_interval (seconds) of the bench's message tables.
    #[arg(long, default_value_t = 1.0)]
    pub poller_interval: f64,
    /// RabbitMQ to compare with.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub rabbitmq: String,
    /// NATS (with JetStream) to compare with.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    pub nats: String,
    /// Before each scenario, wait (up to --quiet-wait seconds) until processes other than the
    /// bench's own use less than this many cores: on a shared machine, figures taken under
    /// others' load mean little. What the others used during each scenario is printed either way.
    #[arg(long)]
    pub quiet_cpu: Option<f64>,
    /// Longest wait for --quiet-cpu, in seconds.
    #[arg(long, default_value_t = 900)]
    pub quiet_wait: u64,
    /// Also measure the point SELECTs through a second msgproxy that reaches the throwaway
    /// server over its Unix socket (`?socket=` in its --backend URL), as when msgproxy runs on
    /// the database's own host, with clients over TCP; and, sockets end to end, clients on that
    /// proxy's own socket (`--listen-socket`) against clients on the server's socket.
    #[arg(long)]
    pub proxy_socket: bool,
    /// Keep the work dir (server data, logs) after the run.
    #[arg(long)]
    pub keep_workdir: bool,
}

impl Opts {
    pub fn reps(&self) -> usize {
        self.reps.unwrap_or(if self.smoke { 1 } else { 3 }).max(1)
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration.unwrap_or(if self.smoke { 0.5 } else { 5.0 }))
    }

    pub fn large_rows(&self) -> u64 {
        self.large_rows
            .unwrap_or(if self.smoke { 10_000 } else { 1_000_000 })
    }

    pub fn replay_events(&self) -> u64 {
        self.replay_events
            .unwrap_or(if self.smoke { 2_000 } else { 1_000_000 })
            .max(10)
    }

    pub fn backlog_rows(&self) -> u64 {
        self.backlog_rows
            .unwrap_or(if self.smoke { 5_000 } else { 1_000_000 })
    }

    pub fn drain(&self) -> Duration {
        Duration::from_secs_f64(
            self.drain_seconds
                .unwrap_or(if self.smoke { 1.0 } else { 10.0 }),
        )
    }

    fn wants(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == scenario)
    }
}

/// With --proxy-socket: a msgproxy that reaches the server over its Unix socket and listens on
/// one of its own, and how the bench's clients reach it and the server.
pub struct SocketProxy {
    pub proxy: Proxy,
    /// Clients over TCP to this proxy.
    pub over_tcp: Target,
    /// Clients on this proxy's own socket.
    pub over_socket: Target,
    /// Clients on the server's socket: the baseline for `over_socket`.
    pub server_socket: Target,
}

/// What every scenario gets: where the server and the proxy are, and where results go.
pub struct Ctx {
    pub opts: Opts,
    pub direct: Target,
    pub proxied: Target,
    pub proxy: Proxy,
    /// With --proxy-socket: the proxy that reaches the server over its socket.
    pub socket_proxy: Option<SocketProxy>,
    /// HAProxy in TCP mode in front of the server, when installed (the point SELECTs).
    pub haproxy: Option<haproxy::HaProxy>,
    /// Clients through HAProxy.
    pub haproxied: Option<Target>,
    pub proxy_bin: PathBuf,
    pub work: PathBuf,
    /// The throwaway server's pid (None for a `--backend` server, whose CPU is not read).
    pub server_pid: Option<u32>,
    pub rows: Vec<Row>,
    /// Messaging figures kept for the comparison with the brokers.
    pub figures: std::collections::BTreeMap<String, report::Summary>,
    /// Proxies stopped so far: (pid, CPU seconds used), so CPU accounting survives restarts.
    pub retired: Vec<(u32, f64)>,
    /// The CPUs the bench could use at its start, before `--proxy-cpus` narrowed its own.
    pub cores: usize,
}

impl Ctx {
    /// Least time between one acker's ACKs.
    pub fn ack_interval(&self) -> Duration {
        Duration::from_secs_f64(self.opts.ack_interval_ms.max(0.0) / 1000.0)
    }

    /// Pids whose CPU use is reported: server, proxy, and the bench itself.
    pub fn cpu_pids(&self) -> Vec<(&'static str, u32)> {
        let mut v = Vec::new();
        if let Some(p) = self.server_pid {
            v.push(("srv", p));
        }
        v.push(("px", self.proxy.process.pid()));
        if let Some(s) = &self.socket_proxy {
            v.push(("pxs", s.proxy.process.pid()));
        }
        if let Some(h) = &self.haproxy {
            v.push(("hap", h.process.pid()));
        }
        v.push(("cli", std::process::id()));
        v
    }

    /// Replaces the proxy with a fresh process (so its peak memory belongs to one scenario).
    pub fn restart_proxy(&mut self, tag: &str) -> Result<(), String> {
        let log = std::env::var("MSGPROXY_LOG").unwrap_or_else(|_| "warn".into());
        self.replace_proxy(tag, &log)
    }

    /// Replaces the proxy with a fresh process logging with `log_filter`.
    pub fn replace_proxy(&mut self, tag: &str, log_filter: &str) -> Result<(), String> {
        let pid = self.proxy.process.pid();
        self.retired.push((pid, servers::cpu_seconds(pid)));
        self.proxy.process.stop(Duration::from_secs(5));
        self.proxy = Proxy::start_with_log(
            &self.proxy_bin,
            &self.direct.url(),
            &self.work,
            tag,
            log_filter,
        )?;
        self.proxied = self.direct.with_port(self.proxy.port);
        Ok(())
    }
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    for s in &opts.only {
        if !SCENARIOS.contains(&s.as_str()) {
            eprintln!("unknown scenario {s:?}; known: {}", SCENARIOS.join(", "));
            return ExitCode::from(2);
        }
    }
    // One thread for the load generator: no cross-thread wake-ups per request, and it leaves the
    // other core to the server and the proxy. The table's CPU column shows what it used.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("msgproxy-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the scenarios; `Ok(false)` when one of them failed to run.
async fn run(mut opts: Opts) -> Result<bool, String> {
    // Before the bench pins itself below: the machine's (or the container's) CPUs.
    let allowed = servers::CpuSet::allowed()?;
    if opts.server_cpus.is_some() && opts.backend.is_some() {
        return Err("--server-cpus needs the throwaway server (the bench starts it)".into());
    }
    (opts.server_cpus, opts.proxy_cpus) =
        servers::CpuSet::plan(opts.server_cpus.take(), opts.proxy_cpus.take(), &allowed)?;
    let work = WorkDir::create(opts.keep_workdir)?;
    let proxy_bin = servers::proxy_binary(opts.proxy_bin.as_deref())?;
    let settings = ServerSettings {
        buffer_pool: if opts.smoke && opts.buffer_pool == "1G" {
            "128M".into()
        } else {
            opts.buffer_pool.clone()
        },
        flush_log_at_trx_commit: opts.flush_log_at_trx_commit,
        sync_binlog: opts.sync_binlog,
        log_file_size: "512M".into(),
        extra_args: opts.server_args.clone(),
        cpus: opts.server_cpus.clone(),
    };
    if opts.proxy_socket && opts.backend.is_some() {
        return Err("--proxy-socket needs the throwaway server (its socket is known)".into());
    }
    let (server, direct) = match &opts.backend {
        Some(url) => (None, Target::parse(url)?),
        None => {
            let db = MariaDb::start(&work.path, &settings)?;
            let t = db.target.clone();
            (Some(db), t)
        }
    };
    // From here on the bench's thread and every msgproxy it starts (they inherit it) stay on
    // these CPUs; the proxy binary is built and the server started before, unpinned.
    if let Some(cpus) = &opts.proxy_cpus {
        cpus.pin_current_thread()?;
    }
    // The bench's database.
    {
        let mut admin = Conn::connect(&Target {
            db: String::new(),
            ..direct.clone()
        })
        .await
        .map_err(|e| format!("cannot connect to the server: {e}"))?;
        admin
            .query(&format!("CREATE DATABASE IF NOT EXISTS `{}`", direct.db))
            .await
            .map_err(|e| format!("create database: {e}"))?;
    }
    let proxy = Proxy::start(&proxy_bin, &direct.url(), &work.path, "main")?;
    let proxied = direct.with_port(proxy.port);
    let socket_proxy = if opts.proxy_socket {
        let url = format!(
            "{}?socket={}",
            direct.url(),
            work.path.join("mariadbd.sock").display()
        );
        let proxy = Proxy::start_with_socket(&proxy_bin, &url, &work.path, "socket")?;
        let own_socket = proxy
            .socket
            .clone()
            .ok_or("the socket proxy has no socket")?;
        Some(SocketProxy {
            over_tcp: direct.with_port(proxy.port),
            over_socket: direct.over_socket(own_socket),
            server_socket: direct.over_socket(work.path.join("mariadbd.sock")),
            proxy,
        })
    } else {
        None
    };
    let haproxy = if opts.wants("point") {
        let h = haproxy::HaProxy::start(&direct, &work.path)?;
        if h.is_none() {
            eprintln!("haproxy is not installed (apt-get install haproxy): the point SELECTs run without HAProxy's side");
        }
        h
    } else {
        None
    };
    let haproxied = haproxy.as_ref().map(|h| direct.with_port(h.port));
    let mut ctx = Ctx {
        opts: opts.clone(),
        direct,
        proxied,
        proxy,
        socket_proxy,
        haproxy,
        haproxied,
        proxy_bin,
        work: work.path.clone(),
        server_pid: server.as_ref().map(|s| s.process.pid()),
        rows: Vec::new(),
        figures: Default::default(),
        retired: Vec::new(),
        cores: allowed.count(),
    };
    let header = describe(&ctx, server.as_ref()).await;
    eprintln!("{header}");

    let mut failed = Vec::new();
    let mut loads = Vec::new();
    for &scenario in SCENARIOS {
        if !opts.wants(scenario) {
            continue;
        }
        if let Some(limit) = opts.quiet_cpu {
            wait_for_quiet(&ctx, limit, Duration::from_secs(opts.quiet_wait)).await;
        }
        eprintln!("== {scenario} (load average {:.2})", load_average());
        let foreign = report::ForeignCpu::start(&ctx.cpu_pids(), &ctx.retired);
        let started = std::time::Instant::now();
        let result = match scenario {
            "point" => passthrough::point_selects(&mut ctx).await,
            "large" => passthrough::large_result(&mut ctx).await,
            "connect" => passthrough::connection_setup(&mut ctx).await,
            "ddl" => ddl::ddl(&mut ctx).await,
            "latency" => messaging::latency(&mut ctx).await,
            "throughput" => throughput::throughput(&mut ctx).await,
            "handqueue" => handqueue::handqueue(&mut ctx).await,
            "backlog" => backlog::backlog(&mut ctx).await,
            "fifo" => fifo::fifo(&mut ctx).await,
            "streams" => streams::streams(&mut ctx).await,
            "cluster" => cluster::cluster(&mut ctx).await,
            "brokers" => run_brokers(&mut ctx).await,
            _ => Ok(()),
        };
        let others = foreign.cores(&ctx.cpu_pids(), &ctx.retired);
        let steal = foreign.steal_cores();
        loads.push(format!("{scenario} {others:.2} (steal {steal:.2})"));
        match result {
            Ok(()) => eprintln!(
                "== {scenario}: done in {:.1} s (other processes used {others:.2} cores, the hypervisor took {steal:.2} (steal) meanwhile)",
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!("== {scenario}: FAILED: {e}");
                failed.push(scenario);
                if !ctx.proxy.process.alive() {
                    eprintln!("msgproxy died; its log:\n{}", ctx.proxy.process.log_tail());
                    ctx.restart_proxy("after-failure")?;
                }
            }
        }
    }
    println!();
    println!("{header}");
    println!(
        "cores used by processes other than the bench, its server and its proxy (and taken by the hypervisor for other guests: steal), during each scenario: {}",
        loads.join(", ")
    );
    println!();
    report::print_table(&ctx.rows, ctx.opts.smoke);
    if !failed.is_empty() {
        println!();
        println!("FAILED to run: {}", failed.join(", "));
    }
    drop(ctx);
    drop(server);
    Ok(failed.is_empty())
}

#[cfg(feature = "brokers")]
async fn run_brokers(ctx: &mut Ctx) -> Result<(), String> {
    brokers::compare(ctx).await
}

#[cfg(not(feature = "brokers"))]
async fn run_brokers(ctx: &mut Ctx) -> Result<(), String> {
    let mut row = Row::new("brokers", "RabbitMQ / NATS JetStream");
    row.note = "not built: `--features brokers`".into();
    ctx.rows.push(row);
    eprintln!("   (skipped: build with --features brokers to compare with RabbitMQ and NATS)");
    Ok(())
}

/// The 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Waits until other processes use less than `limit` cores (over 3 s), or `longest` has passed.
async fn wait_for_quiet(ctx: &Ctx, limit: f64, longest: Duration) {
    let deadline = std::time::Instant::now() + longest;
    let mut said = false;
    loop {
        let meter = report::ForeignCpu::start(&ctx.cpu_pids(), &ctx.retired);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let others = meter.cores(&ctx.cpu_pids(), &ctx.retired);
        if others < limit || std::time::Instant::now() >= deadline {
            if said {
                eprintln!("   other processes now use {others:.2} cores: going on");
            }
            return;
        }
        if !said {
            eprintln!("   other processes use {others:.2} cores: waiting for less than {limit}");
            said = true;
        }
    }
}

/// The run's context lines: machine, load, server, durability, options.
async fn describe(ctx: &Ctx, server: Option<&MariaDb>) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = ctx.cores;
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let mut durability = String::from("unknown");
    if let Ok(mut c) = Conn::connect(&ctx.direct).await {
        if let Ok(rows) = c
            .query_rows("SELECT @@version, @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@innodb_buffer_pool_size DIV 1048576, @@binlog_format")
            .await
        {
            if let Some(r) = rows.first() {
                let v = |i: usize| r.get(i).cloned().flatten().unwrap_or_default();
                durability = format!(
                    "MariaDB {}, innodb_flush_log_at_trx_commit={}, sync_binlog={}, buffer pool {} MiB, binlog_format={}",
                    v(0),
                    v(1),
                    v(2),
                    v(3),
                    v(4)
                );
            }
        }
        c.quit().await;
    }
    let o = &ctx.opts;
    let haproxy = match &ctx.haproxy {
        Some(h) => format!(
            "\nhaproxy: {} (TCP mode; the point SELECTs' third side)",
            h.version
        ),
        None => String::new(),
    };
    format!(
        "machine: {cpu}, {cores} cores, load average at start {load}\nserver: {} ({durability})\nmsgproxy: {}{}{}\nrun: {} repetitions × {:.1} s, interleaved direct/proxy; {} connections; messaging: {} producers, {} consumers{}, {} rows per multi-row insert, vt_batch_size={}, vt_cache_size={}, vt_poller_interval={}{}{}",
        match server {
            Some(_) if !o.server_args.is_empty() => format!("throwaway, with {}", o.server_args.join(" ")),
            Some(_) => "throwaway".into(),
            None => "--backend".into(),
        },
        ctx.proxy_bin.display(),
        pinning(o) + &proxy_settings_from_env(),
        if o.proxy_socket {
            " (point SELECTs also through a second msgproxy on the server's Unix socket, clients over TCP and on its own socket)"
        } else {
            ""
        },
        o.reps(),
        o.duration().as_secs_f64(),
        o.connections,
        o.producers,
        o.consumers,
        match (o.ack_interval_ms > 0.0, o.producers_direct) {
            (false, false) => String::new(),
            (true, false) => format!(" acking at most every {} ms", o.ack_interval_ms),
            (false, true) => " (sustained runs: producers straight to the server)".to_string(),
            (true, true) => format!(
                " acking at most every {} ms (sustained runs: producers straight to the server)",
                o.ack_interval_ms
            ),
        },
        o.multi_rows,
        o.batch_size,
        o.cache_size,
        o.poller_interval,
        o.max_unacked
            .map(|n| format!(", vt_max_unacked={n}"))
            .unwrap_or_default(),
        if o.smoke { " (SMOKE: figures mean nothing)" } else { "" }
    ) + &haproxy
}

/// Where `--server-cpus` / `--proxy-cpus` keep the parties, for the header ("" when unpinned).
/// msgproxy's default worker threads follow the CPUs it may use, so pinning changes them too: the
/// header says how many it runs.
fn pinning(o: &Opts) -> String {
    let (Some(server), Some(proxy)) = (&o.server_cpus, &o.proxy_cpus) else {
        return String::new();
    };
    let threads = match std::env::var("MSGPROXY_THREADS") {
        Ok(n) => n,
        Err(_) => format!("{}, one per CPU it may use", proxy.count()),
    };
    format!(
        " (server on CPUs {server}, msgproxy and the bench on CPUs {proxy}; msgproxy's worker threads: {threads})"
    )
}

/// The proxies inherit the bench's environment: its `MSGPROXY_*` settings (other than the log
/// filter) change what is measured, so the header names them.
fn proxy_settings_from_env() -> String {
    let mut set: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("MSGPROXY_") && k != "MSGPROXY_LOG")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    set.sort();
    if set.is_empty() {
        String::new()
    } else {
        format!(" with {}", set.join(" "))
    }
}
