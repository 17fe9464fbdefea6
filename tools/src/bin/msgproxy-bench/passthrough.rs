//! Pass-through scenarios: what relaying costs compared with talking to the server itself.
//!
//! - point SELECT by primary key, text protocol and prepared, at 1 and N connections: QPS and
//!   per-request latency;
//! - one large result (`--large-rows` rows of about 100 bytes): rows per second;
//! - connection set-up (connect, log in, one query, quit): connections per second.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::report::{fmt_summary, CpuMeter, Latencies, Row, Samples, Unit};
use crate::wire::{Conn, Statement, Target};
use crate::Ctx;

const POINT_ROWS: i64 = 100_000;
/// Concurrent workers of the connection set-up run.
const CONNECT_WORKERS: usize = 4;

/// Direct first, then through the proxy, in each repetition.
pub const VARIANTS: [&str; 2] = ["direct", "proxy"];

/// With --proxy-socket, in the point scenario: clients over TCP to a proxy on the server's Unix
/// socket...
const SOCKET_VARIANT: &str = "proxy-socket";
/// ...clients on the server's socket...
const DIRECT_UNIX_VARIANT: &str = "direct-unix";
/// ...and clients on that proxy's own socket, compared with the clients on the server's.
const PROXY_UNIX_VARIANT: &str = "proxy-unix";

pub fn target_of<'a>(ctx: &'a Ctx, variant: &str) -> &'a Target {
    match (variant, &ctx.socket_proxy) {
        ("proxy", _) => &ctx.proxied,
        (SOCKET_VARIANT, Some(s)) => &s.over_tcp,
        (DIRECT_UNIX_VARIANT, Some(s)) => &s.server_socket,
        (PROXY_UNIX_VARIANT, Some(s)) => &s.over_socket,
        _ => &ctx.direct,
    }
}

/// What a variant is measured against, and how its row is named.
fn baseline_of(variant: &str) -> (&'static str, &'static str) {
    match variant {
        SOCKET_VARIANT => ("direct", ", msgproxy on the server's socket"),
        PROXY_UNIX_VARIANT => (
            DIRECT_UNIX_VARIANT,
            ", sockets end to end (client on msgproxy's socket, msgproxy on the server's; vs client on the server's socket)",
        ),
        _ => ("direct", ""),
    }
}

pub async fn admin(ctx: &Ctx) -> Result<Conn, String> {
    Conn::connect(&ctx.direct)
        .await
        .map_err(|e| format!("connect to the server: {e}"))
}

/// Runs `sql` on `conn`, naming the statement in the error.
pub async fn exec(conn: &mut Conn, sql: &str) -> Result<crate::wire::Outcome, String> {
    conn.query(sql).await.map_err(|e| {
        let short: String = sql.chars().take(120).collect();
        format!("{short}: {e}")
    })
}

/// Time spent warming up before each timed run (connections, buffer pool, the proxy's tasks).
pub fn warmup(d: Duration) -> Duration {
    (d / 5).min(Duration::from_millis(500))
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

pub async fn point_selects(ctx: &mut Ctx) -> Result<(), String> {
    let mut a = admin(ctx).await?;
    exec(&mut a, "DROP TABLE IF EXISTS bench_point").await?;
    exec(
        &mut a,
        "CREATE TABLE bench_point (id INT PRIMARY KEY, v VARCHAR(100) NOT NULL) ENGINE=InnoDB",
    )
    .await?;
    exec(
        &mut a,
        &format!("INSERT INTO bench_point SELECT seq, CONCAT('value-', seq, '-', REPEAT('p', 60)) FROM seq_1_to_{POINT_ROWS}"),
    )
    .await?;
    a.quit().await;

    let dur = ctx.opts.duration();
    let many = ctx.opts.connections;
    // Direct, through the proxy, and (with --proxy-socket) through the proxy on the socket and
    // over sockets end to end, interleaved in every repetition.
    let mut variants = VARIANTS.to_vec();
    if ctx.socket_proxy.is_some() {
        variants.extend([SOCKET_VARIANT, DIRECT_UNIX_VARIANT, PROXY_UNIX_VARIANT]);
    }
    for conns in [1, many] {
        for prepared in [false, true] {
            let mut samples = Samples::default();
            let mut cpu_notes = std::collections::HashMap::new();
            for _ in 0..ctx.opts.reps() {
                for &v in &variants {
                    let meter = CpuMeter::start(&ctx.cpu_pids());
                    let (qps, mut lat) = point_run(target_of(ctx, v), conns, prepared, dur).await?;
                    cpu_notes.insert(v, meter.finish());
                    samples.add(v, "qps", qps);
                    samples.add(v, "p50", lat.percentile_us(50.0).unwrap_or(0.0));
                    samples.add(v, "p99", lat.percentile_us(99.0).unwrap_or(0.0));
                }
            }
            for &v in variants[1..].iter().filter(|&&v| v != DIRECT_UNIX_VARIANT) {
                let (baseline, suffix) = baseline_of(v);
                let name = format!(
                    "point SELECT by PK, {}, {conns} conn{}{suffix}",
                    if prepared { "prepared" } else { "text" },
                    if conns == 1 { "" } else { "s" },
                );
                let cpu_note = cpu_notes.remove(v).unwrap_or_default();
                ctx.rows.push(ratio_row_of(
                    &name,
                    "queries/s",
                    &samples,
                    (baseline, v),
                    "qps",
                    Unit::PerSec,
                    (conns > 1).then_some(0.90),
                    &cpu_note,
                ));
                if let Some(row) = latency_row(&name, &samples, (baseline, v), conns == 1) {
                    ctx.rows.push(row);
                }
                eprintln!("   {name}: done");
            }
        }
    }
    Ok(())
}

/// Latency p50 (p99) of a variant against its baseline's (`pair`: baseline, variant), with the
/// added-latency target when `with_target` (the 1-connection runs).
fn latency_row(
    name: &str,
    samples: &Samples,
    (baseline, variant): (&str, &str),
    with_target: bool,
) -> Option<Row> {
    let (d, p) = (samples.get(baseline, "p50")?, samples.get(variant, "p50")?);
    let (d99, p99) = (samples.get(baseline, "p99")?, samples.get(variant, "p99")?);
    let mut row = Row::new(name, "latency p50 (p99)");
    row.baseline = format!(
        "server {} ({})",
        fmt_summary(&d, Unit::Micros),
        fmt_summary(&d99, Unit::Micros)
    );
    row.measured = format!(
        "{} ({})",
        fmt_summary(&p, Unit::Micros),
        fmt_summary(&p99, Unit::Micros)
    );
    let added = p.median - d.median;
    row.relation = format!(
        "{added:+.0} µs p50 ({:+.0} µs p99)",
        p99.median - d99.median
    );
    if with_target {
        row.target = "≤ +30 µs p50".into();
        row.met = Some(added <= 30.0);
    }
    Some(row)
}

/// A row comparing one figure direct vs through the proxy, with a ratio target.
pub fn ratio_row(
    scenario: &str,
    metric: &str,
    samples: &Samples,
    key: &str,
    unit: Unit,
    min_ratio: Option<f64>,
    note: &str,
) -> Row {
    ratio_row_of(
        scenario,
        metric,
        samples,
        ("direct", "proxy"),
        key,
        unit,
        min_ratio,
        note,
    )
}

/// [`ratio_row`] for a variant against a baseline (`pair`: baseline, variant).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ratio_row_of(
    scenario: &str,
    metric: &str,
    samples: &Samples,
    (baseline, variant): (&str, &str),
    key: &str,
    unit: Unit,
    min_ratio: Option<f64>,
    note: &str,
) -> Row {
    let mut row = Row::new(scenario, metric);
    row.note = note.to_string();
    let (d, p) = (samples.get(baseline, key), samples.get(variant, key));
    if let Some(d) = &d {
        row.baseline = format!("server {}", fmt_summary(d, unit));
    }
    if let Some(p) = &p {
        row.measured = fmt_summary(p, unit);
    }
    if let (Some(d), Some(p)) = (d, p) {
        let ratio = if d.median > 0.0 {
            p.median / d.median
        } else {
            0.0
        };
        row.relation = format!("{ratio:.3}×");
        if let Some(min) = min_ratio {
            row.target = format!("≥ {min:.2}×");
            row.met = Some(ratio >= min);
        }
    }
    row
}

/// One timed run of point SELECTs: QPS and per-request latencies.
async fn point_run(
    target: &Target,
    conns: usize,
    prepared: bool,
    dur: Duration,
) -> Result<(f64, Latencies), String> {
    let mut connections = Vec::with_capacity(conns);
    for _ in 0..conns {
        let mut c = Conn::connect(target)
            .await
            .map_err(|e| format!("connect to {}: {e}", target.port))?;
        let stmt = if prepared {
            Some(
                c.prepare("SELECT id, v FROM bench_point WHERE id = ?")
                    .await
                    .map_err(|e| format!("prepare: {e}"))?,
            )
        } else {
            None
        };
        connections.push((c, stmt));
    }
    let go = Instant::now();
    let measure_from = go + warmup(dur);
    let end = measure_from + dur;
    let mut set = JoinSet::new();
    for (i, (c, stmt)) in connections.into_iter().enumerate() {
        let seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1);
        set.spawn(point_task(c, stmt, seed, measure_from, end));
    }
    let mut count = 0u64;
    let mut lat = Latencies::default();
    while let Some(r) = set.join_next().await {
        let (n, l) = r.map_err(|e| format!("task: {e}"))??;
        count += n;
        lat.extend(l);
    }
    Ok((count as f64 / dur.as_secs_f64(), lat))
}

async fn point_task(
    mut c: Conn,
    stmt: Option<Statement>,
    seed: u64,
    measure_from: Instant,
    end: Instant,
) -> Result<(u64, Latencies), String> {
    let mut x = seed | 1;
    let mut sql = String::with_capacity(64);
    let mut lat = Vec::with_capacity(1 << 16);
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        x = xorshift(x);
        let id = (x % POINT_ROWS as u64) as i64 + 1;
        let out = match stmt {
            Some(s) => c.execute(s, &[id]).await,
            None => {
                sql.clear();
                let _ = write!(sql, "SELECT id, v FROM bench_point WHERE id = {id}");
                c.query(&sql).await
            }
        }
        .map_err(|e| format!("point select: {e}"))?;
        if out.rows != 1 {
            return Err(format!(
                "point select of id {id} returned {} rows",
                out.rows
            ));
        }
        if t0 >= measure_from {
            lat.push(t0.elapsed().as_nanos() as u64);
        }
    }
    c.quit().await;
    Ok((lat.len() as u64, Latencies(lat)))
}

pub async fn large_result(ctx: &mut Ctx) -> Result<(), String> {
    let n = ctx.opts.large_rows();
    let mut a = admin(ctx).await?;
    exec(&mut a, "DROP TABLE IF EXISTS bench_big").await?;
    exec(
        &mut a,
        "CREATE TABLE bench_big (id INT PRIMARY KEY, v CHAR(96) NOT NULL) ENGINE=InnoDB",
    )
    .await?;
    // ~100 bytes a row on the wire: the id's text and 96 characters.
    let chunk = 200_000u64;
    let mut from = 1;
    while from <= n {
        let to = (from + chunk - 1).min(n);
        exec(
            &mut a,
            &format!("INSERT INTO bench_big SELECT seq, CONCAT(LPAD(seq, 12, '0'), REPEAT('r', 84)) FROM seq_{from}_to_{to}"),
        )
        .await?;
        from = to + 1;
    }
    a.quit().await;

    let mut samples = Samples::default();
    let mut cpu_note = String::new();
    let mut bytes_per_row = 0.0;
    // One unmeasured pass to bring the table into the buffer pool.
    large_run(&ctx.direct, n).await?;
    for _ in 0..ctx.opts.reps() {
        for v in VARIANTS {
            let meter = CpuMeter::start(&ctx.cpu_pids());
            let (rows_per_s, bpr) = large_run(target_of(ctx, v), n).await?;
            if v == "proxy" {
                cpu_note = meter.finish();
            }
            bytes_per_row = bpr;
            samples.add(v, "rows", rows_per_s);
            samples.add(v, "mb", rows_per_s * bpr / 1_048_576.0);
        }
    }
    let name = format!("one large result ({n} rows × {bytes_per_row:.0} B)");
    ctx.rows.push(ratio_row(
        &name,
        "rows/s",
        &samples,
        "rows",
        Unit::PerSec,
        Some(0.95),
        &cpu_note,
    ));
    Ok(())
}

/// Reads the whole large result once: rows per second and bytes per row.
async fn large_run(target: &Target, n: u64) -> Result<(f64, f64), String> {
    let mut c = Conn::connect(target)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let t0 = Instant::now();
    let out = exec(&mut c, "SELECT id, v FROM bench_big").await?;
    let secs = t0.elapsed().as_secs_f64();
    c.quit().await;
    if out.rows != n {
        return Err(format!("the large result had {} rows, not {n}", out.rows));
    }
    Ok((
        out.rows as f64 / secs,
        out.row_bytes as f64 / out.rows.max(1) as f64,
    ))
}

pub async fn connection_setup(ctx: &mut Ctx) -> Result<(), String> {
    let dur = ctx.opts.duration();
    let mut samples = Samples::default();
    let mut cpu_note = String::new();
    for _ in 0..ctx.opts.reps() {
        for v in VARIANTS {
            let meter = CpuMeter::start(&ctx.cpu_pids());
            let (rate, mut lat) = connect_run(target_of(ctx, v), dur).await?;
            if v == "proxy" {
                cpu_note = meter.finish();
            }
            samples.add(v, "rate", rate);
            samples.add(v, "p50", lat.percentile_us(50.0).unwrap_or(0.0));
        }
    }
    let name =
        format!("connection set-up (connect, log in, SELECT 1, quit), {CONNECT_WORKERS} at a time");
    ctx.rows.push(ratio_row(
        &name,
        "connections/s",
        &samples,
        "rate",
        Unit::PerSec,
        None,
        &cpu_note,
    ));
    let mut row = ratio_row(
        &name,
        "time per connection p50",
        &samples,
        "p50",
        Unit::Micros,
        None,
        "",
    );
    if let (Some(d), Some(p)) = (samples.get("direct", "p50"), samples.get("proxy", "p50")) {
        row.relation = format!("{:+.0} µs", p.median - d.median);
    }
    ctx.rows.push(row);
    Ok(())
}

async fn connect_run(target: &Target, dur: Duration) -> Result<(f64, Latencies), String> {
    let go = Instant::now();
    let measure_from = go + warmup(dur);
    let end = measure_from + dur;
    let mut set = JoinSet::new();
    for _ in 0..CONNECT_WORKERS {
        let target = target.clone();
        set.spawn(async move {
            let mut lat = Vec::new();
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let mut c = Conn::connect(&target)
                    .await
                    .map_err(|e| format!("connect: {e}"))?;
                let out = exec(&mut c, "SELECT 1").await?;
                if out.rows != 1 {
                    return Err("SELECT 1 returned no row".to_string());
                }
                c.quit().await;
                if t0 >= measure_from {
                    lat.push(t0.elapsed().as_nanos() as u64);
                }
            }
            Ok::<_, String>(Latencies(lat))
        });
    }
    let mut all = Latencies::default();
    while let Some(r) = set.join_next().await {
        all.extend(r.map_err(|e| format!("task: {e}"))??);
    }
    Ok((all.0.len() as f64 / dur.as_secs_f64(), all))
}
