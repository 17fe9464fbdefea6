//! The cluster scenario (docs/CLUSTERS.md): msgproxy in front of a 3-node Galera cluster against
//! msgproxy in front of the bench's single server, in the same run, interleaved: sustained
//! messaging (single-row inserts, streams acking), commit → `STREAM` latency at `--rate`, and the
//! failover time when the node msgproxy uses is killed (-9): until a new session's INSERT through
//! msgproxy succeeds, and until that message reaches a consumer that reconnects on error.
//!
//! The cluster is started by scripts/mariadb-cluster.sh, the script users run (its nodes'
//! settings: `innodb_flush_log_at_trx_commit=2`, `sync_binlog=0`, as Galera is usually run; run the
//! bench with `--flush-log-at-trx-commit 2 --sync-binlog 0` to give the single server the same).
//! All three nodes share the machine with the single server, the proxies and the load generator.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::messaging::{self, create_message_table, drop_table, truncate};
use crate::report::{fmt_summary, Row, Samples, Unit};
use crate::servers::{Proxy, WorkDir};
use crate::throughput::{throughput_run, Consumption};
use crate::wire::{Conn, Target};
use crate::Ctx;

/// Nodes of the cluster.
const NODES: u16 = 3;
/// Longest wait for msgproxy to serve again after a node is killed.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(60);

pub async fn cluster(ctx: &mut Ctx) -> Result<(), String> {
    if !Path::new(GALERA_LIB).exists() {
        let mut row = Row::new("cluster", "3-node Galera against one server");
        row.note = "not run: galera-4 is not installed (apt-get install galera-4)".into();
        ctx.rows.push(row);
        eprintln!("   (skipped: galera-4 is not installed)");
        return Ok(());
    }
    let galera = Galera::start(ctx.opts.keep_workdir)?;
    eprintln!("   galera: {}", galera.backend);
    let proxy = Proxy::start(&ctx.proxy_bin, &galera.backend, &ctx.work, "galera")?;
    let node1 = Target::parse(galera.backend.split(',').next().unwrap_or_default())?;
    let mut other = Side {
        direct: node1.clone(),
        proxied: node1.with_port(proxy.port),
        proxy,
        // Three servers: their CPU is in "others" of the scenario's line, not in the rows.
        server_pid: None,
    };
    let result = measure(ctx, &galera, &mut other).await;
    other.proxy.process.stop(Duration::from_secs(5));
    drop(galera);
    result
}

/// What the scenarios measure through: the server (for set-up and counters) and the proxy.
struct Side {
    direct: Target,
    proxied: Target,
    proxy: Proxy,
    server_pid: Option<u32>,
}

/// Puts `side` in the context, and the context's own in `side` (calling it again undoes it).
fn swap(ctx: &mut Ctx, side: &mut Side) {
    std::mem::swap(&mut ctx.direct, &mut side.direct);
    std::mem::swap(&mut ctx.proxied, &mut side.proxied);
    std::mem::swap(&mut ctx.proxy, &mut side.proxy);
    std::mem::swap(&mut ctx.server_pid, &mut side.server_pid);
}

/// The runs, interleaved: single server, cluster, single server, cluster, ...; then the failovers.
async fn measure(ctx: &mut Ctx, galera: &Galera, cluster: &mut Side) -> Result<(), String> {
    let table = "bench_cluster";
    let dur = ctx.opts.duration();
    let rate = ctx.opts.rate;
    let mut samples = Samples::default();
    let mut notes: [String; 2] = Default::default();
    for side in ["direct", "proxy"] {
        on_side(ctx, cluster, side == "proxy", |ctx| {
            Box::pin(create_message_table(ctx, table))
        })
        .await?;
    }
    for _ in 0..ctx.opts.reps() {
        for (i, side) in ["direct", "proxy"].into_iter().enumerate() {
            let is_cluster = side == "proxy";
            let (acked, inserted, lat) = on_side(ctx, cluster, is_cluster, |ctx| {
                Box::pin(async move {
                    truncate(ctx, table).await?;
                    let producers = ctx.proxied.clone();
                    let (inserted, acked, _) = throughput_run(
                        ctx,
                        table,
                        &producers,
                        1,
                        Consumption::Streams(ctx.opts.consumers),
                        dur,
                    )
                    .await?;
                    truncate(ctx, table).await?;
                    let lat = messaging::latency_run(ctx, table, true, rate, dur).await?;
                    Ok((acked, inserted, lat))
                })
            })
            .await?;
            samples.add(side, "acked", acked);
            samples.add(side, "inserted", inserted);
            samples.add(side, "p50", lat.p50);
            samples.add(side, "p99", lat.p99);
            notes[i] = format!(
                "{}/{} delivered in the latency run, {} duplicates",
                lat.delivered, lat.expected, lat.duplicates
            );
        }
    }
    for side in ["direct", "proxy"] {
        on_side(ctx, cluster, side == "proxy", |ctx| {
            Box::pin(drop_table(ctx, table))
        })
        .await?;
    }
    let mut failovers = Samples::default();
    let mut failover_notes = Vec::new();
    for rep in 0..ctx.opts.reps() {
        let f = failover(ctx, galera, &cluster.proxied, rep).await?;
        failovers.add("proxy", "serving", f.serving.as_secs_f64() * 1000.0);
        failovers.add("proxy", "delivered", f.delivered.as_secs_f64() * 1000.0);
        failover_notes.push(format!("node {} killed", f.node));
    }
    push_rows(ctx, &samples, &notes, &failovers, &failover_notes);
    Ok(())
}

/// Runs `f` with the context on the cluster (`on_cluster`) or on its own server, and puts the
/// context back whatever `f` returns.
async fn on_side<T>(
    ctx: &mut Ctx,
    cluster: &mut Side,
    on_cluster: bool,
    f: impl for<'a> FnOnce(
        &'a Ctx,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<T, String>> + 'a>,
    >,
) -> Result<T, String> {
    if on_cluster {
        swap(ctx, cluster);
    }
    let result = f(ctx).await;
    if on_cluster {
        swap(ctx, cluster);
    }
    result
}

fn push_rows(
    ctx: &mut Ctx,
    samples: &Samples,
    notes: &[String; 2],
    failovers: &Samples,
    failover_notes: &[String],
) {
    let scenario = format!(
        "cluster: msgproxy on 3-node Galera against msgproxy on one server, single-row inserts, {} producers, {} consumers",
        ctx.opts.producers, ctx.opts.consumers
    );
    let mut row = crate::passthrough::ratio_row(
        &scenario,
        "delivered+acked msg/s (baseline: msgproxy on the single server)",
        samples,
        "acked",
        Unit::PerSec,
        None,
        "",
    );
    row.baseline = row.baseline.replacen("server", "one server", 1);
    if let Some(ins) = samples.get("proxy", "inserted") {
        row.note = format!("inserted meanwhile {}", fmt_summary(&ins, Unit::PerSec));
    }
    ctx.rows.push(row);
    let mut row = Row::new(
        &scenario,
        &format!(
            "COMMIT → STREAM row at {:.0} msg/s, p50 / p99 (baseline: one server)",
            ctx.opts.rate
        ),
    );
    if let (Some(d50), Some(d99)) = (samples.get("direct", "p50"), samples.get("direct", "p99")) {
        row.baseline = format!(
            "one server {} / {}",
            fmt_summary(&d50, Unit::Millis),
            fmt_summary(&d99, Unit::Millis)
        );
    }
    if let (Some(p50), Some(p99)) = (samples.get("proxy", "p50"), samples.get("proxy", "p99")) {
        row.measured = format!(
            "{} / {}",
            fmt_summary(&p50, Unit::Millis),
            fmt_summary(&p99, Unit::Millis)
        );
    }
    row.note = format!("one server: {}; cluster: {}", notes[0], notes[1]);
    ctx.rows.push(row);
    let mut row = Row::new(
        &scenario,
        "failover: node in use killed → a new session's INSERT through msgproxy succeeds / that message reaches a reconnecting STREAM",
    );
    if let (Some(s), Some(d)) = (
        failovers.get("proxy", "serving"),
        failovers.get("proxy", "delivered"),
    ) {
        row.measured = format!(
            "{} / {}",
            fmt_summary(&s, Unit::Millis),
            fmt_summary(&d, Unit::Millis)
        );
    }
    row.note = format!(
        "Galera's evs.suspect_timeout is 2 s in scripts/mariadb-cluster.sh; {}",
        failover_notes.join(", ")
    );
    ctx.rows.push(row);
}

/// One failover's times, from the kill.
struct Failover {
    node: u16,
    serving: Duration,
    delivered: Duration,
}

/// Kills the node msgproxy uses, measures until it serves and delivers again, and brings the node
/// back into the cluster (waiting until it is synced) for the next repetition.
async fn failover(
    ctx: &Ctx,
    galera: &Galera,
    proxied: &Target,
    rep: usize,
) -> Result<Failover, String> {
    let table = format!("bench_failover_{rep}");
    {
        let mut c = Conn::connect(proxied)
            .await
            .map_err(|e| format!("connect to msgproxy on the cluster: {e}"))?;
        let create = messaging::create_table_sql(ctx, &table, messaging::PURGE_AFTER);
        crate::passthrough::exec(&mut c, &format!("DROP TABLE IF EXISTS `{table}`")).await?;
        crate::passthrough::exec(&mut c, &create).await?;
        messaging::wait_loaded(&mut c, &table).await?;
        c.quit().await;
    }
    // The consumer: streams, and on any error reconnects and streams again.
    let (seen_tx, mut seen_rx) = watch::channel(0i64);
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = tokio::spawn(keep_streaming(
        proxied.clone(),
        table.clone(),
        seen_tx,
        stop.clone(),
    ));
    // A message before the kill proves the consumer streams.
    insert_until_ok(proxied, &table, 1, Duration::from_secs(20)).await?;
    wait_for_id(&mut seen_rx, 1, Duration::from_secs(20)).await?;
    let node = galera.node_in_use(proxied).await?;
    let killed = Instant::now();
    galera.run(&["kill", &node.to_string()])?;
    insert_until_ok(proxied, &table, 2, FAILOVER_DEADLINE).await?;
    let serving = killed.elapsed();
    wait_for_id(&mut seen_rx, 2, FAILOVER_DEADLINE).await?;
    let delivered = killed.elapsed();
    stop.notify_one();
    let _ = consumer.await;
    eprintln!(
        "   failover {rep}: node {node} killed; serving after {:.0} ms, delivered after {:.0} ms; bringing the node back",
        serving.as_secs_f64() * 1000.0,
        delivered.as_secs_f64() * 1000.0
    );
    galera.run(&["start-node", &node.to_string()])?;
    let mut c = Conn::connect(proxied)
        .await
        .map_err(|e| format!("connect to msgproxy on the cluster: {e}"))?;
    crate::passthrough::exec(&mut c, &format!("DROP TABLE IF EXISTS `{table}`")).await?;
    c.quit().await;
    Ok(Failover {
        node,
        serving,
        delivered,
    })
}

/// A consumer that survives its server: streams `table`, publishes the highest id seen, and
/// reconnects (every 20 ms) when the stream ends with an error, until `stop`.
async fn keep_streaming(
    target: Target,
    table: String,
    seen: watch::Sender<i64>,
    stop: Arc<tokio::sync::Notify>,
) {
    let stream = async {
        loop {
            if let Ok(mut c) = Conn::connect(&target).await {
                if c.start_stream(&format!("STREAM * FROM `{table}`"))
                    .await
                    .is_ok()
                {
                    while let Ok(id) = c.next_stream_id().await {
                        seen.send_if_modified(|v| {
                            let newer = id > *v;
                            *v = (*v).max(id);
                            newer
                        });
                        let _ = c.query(&format!("ACK `{table}` {id}")).await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = stop.notified() => {}
        _ = stream => {}
    }
}

/// Inserts message `id` through a new session each try (as a client reconnecting would) until
/// one succeeds.
async fn insert_until_ok(
    target: &Target,
    table: &str,
    id: i64,
    deadline: Duration,
) -> Result<(), String> {
    let give_up = Instant::now() + deadline;
    let sql = format!(
        "INSERT INTO `{table}` (id, message) VALUES ({id}, '{}')",
        messaging::PAYLOAD
    );
    let mut last = String::new();
    while Instant::now() < give_up {
        match Conn::connect(target).await {
            Ok(mut c) => match c.query(&sql).await {
                Ok(_) => {
                    c.quit().await;
                    return Ok(());
                }
                // A duplicate key: an earlier try committed although its OK was lost.
                Err(crate::wire::Error::Server { code: 1062, .. }) => return Ok(()),
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "msgproxy on the cluster did not take message {id} within {deadline:?}: {last}"
    ))
}

async fn wait_for_id(
    seen: &mut watch::Receiver<i64>,
    id: i64,
    deadline: Duration,
) -> Result<(), String> {
    tokio::time::timeout(deadline, seen.wait_for(|v| *v >= id))
        .await
        .map_err(|_| format!("message {id} was not delivered within {deadline:?}"))?
        .map_err(|_| "the consumer ended".to_string())?;
    Ok(())
}

const GALERA_LIB: &str = "/usr/lib/galera/libgalera_smm.so";

/// A 3-node Galera cluster started by scripts/mariadb-cluster.sh, stopped when dropped.
struct Galera {
    dir: WorkDir,
    /// The `--backend` value the script printed (every node's URL, node 1 first).
    backend: String,
    base: u16,
}

impl Galera {
    fn start(keep: bool) -> Result<Galera, String> {
        let dir = WorkDir::create_named("msgproxy-bench-galera", keep)?;
        // As root the nodes run as `mysql`, which must reach their directories.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o755));
        }
        let base = free_base()?;
        let mut galera = Galera {
            dir,
            backend: String::new(),
            base,
        };
        galera.backend = galera.run(&["start", "--port", &base.to_string()])?;
        Ok(galera)
    }

    /// Runs the script on this cluster; its last line of output.
    fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("bash")
            .arg(script())
            .arg("galera")
            .args(args)
            .arg("--dir")
            .arg(&self.dir.path)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "mariadb-cluster.sh galera {}: {}\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(stdout.lines().last().unwrap_or_default().to_string())
    }

    /// The node a new session through msgproxy reaches (1, 2 or 3), by its port.
    async fn node_in_use(&self, proxied: &Target) -> Result<u16, String> {
        let mut c = Conn::connect(proxied)
            .await
            .map_err(|e| format!("connect to msgproxy on the cluster: {e}"))?;
        let rows = c
            .query_rows("SELECT @@port")
            .await
            .map_err(|e| format!("SELECT @@port: {e}"))?;
        c.quit().await;
        let port: u16 = rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .and_then(|p| p.parse().ok())
            .ok_or("SELECT @@port gave no port")?;
        (1..=NODES)
            .find(|i| self.base + i - 1 == port)
            .ok_or_else(|| format!("port {port} is none of the cluster's nodes"))
    }
}

impl Drop for Galera {
    fn drop(&mut self) {
        if let Err(e) = self.run(&["stop"]) {
            eprintln!("   stopping the cluster: {e}");
        }
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mariadb-cluster.sh")
}

/// A base port whose client, Galera, IST and SST ports (base+0..2, +10, +20, +30) are all free,
/// below Linux's ephemeral ports (32768 and up by default), so that a node restarting on its port
/// does not find it taken by some outgoing connection meanwhile.
fn free_base() -> Result<u16, String> {
    for attempt in 0..200u32 {
        let base = 20000 + ((std::process::id() + attempt * 7919) % 400) as u16 * 25;
        let free = (0..NODES)
            .flat_map(|i| [base + i, base + 10 + i, base + 20 + i, base + 30 + i])
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            return Ok(base);
        }
    }
    Err("no free block of ports for the cluster in 20000..30000".into())
}
