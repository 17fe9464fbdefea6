//! The backlog scenario: a table with `--backlog-rows` due rows inserted straight into the
//! server; a fresh msgproxy's time from STREAM to the first row, its drain rate, the poller's
//! query time as the backlog grows, and the proxy's peak memory against a backlog of only
//! `vt_cache_size` rows.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::messaging::{create_message_table, drop_table, wait_loaded, Consumers};
use crate::passthrough::{admin, exec};
use crate::report::{fmt_value, CpuMeter, Latencies, Row, Summary, Unit};
use crate::servers::memory_kib;
use crate::wire::Conn;
use crate::Ctx;

pub async fn backlog(ctx: &mut Ctx) -> Result<(), String> {
    let table = "bench_backlog";
    let n = ctx.opts.backlog_rows();
    let small = (ctx.opts.cache_size as u64).min(n);
    create_message_table(ctx, table).await?;
    let mut a = admin(ctx).await?;
    let mut loaded = 0u64;

    // 1. A backlog of vt_cache_size rows: the proxy's memory when the backlog fits its cache.
    load_rows(&mut a, table, &mut loaded, small).await?;
    let small_run = drain_run(ctx, table, "backlog-small", small).await?;

    // 2. The full backlog, timing the poller's query as the table grows.
    exec(&mut a, &format!("TRUNCATE TABLE `{table}`")).await?;
    loaded = 0;
    let mut poller_times = Vec::new();
    // From a backlog the size of the poller's LIMIT upwards: below it the query returns every
    // row, so of course it grows; above it, it must not.
    let cache = ctx.opts.cache_size as u64;
    let mut checkpoints: Vec<u64> = [cache, cache * 10, 100_000, 1_000_000, n]
        .into_iter()
        .filter(|&c| c >= cache.min(n) && c <= n)
        .collect();
    checkpoints.sort_unstable();
    checkpoints.dedup();
    for checkpoint in checkpoints {
        load_rows(&mut a, table, &mut loaded, checkpoint).await?;
        poller_times.push((loaded, time_poller_query(ctx, &mut a, table).await?));
    }
    a.quit().await;
    let big_run = drain_run(ctx, table, "backlog", loaded).await?;
    ctx.restart_proxy("main")?;

    let name = format!("backlog of {n} due rows");
    let mut row = Row::new(&name, "STREAM → first row (fresh proxy)");
    row.measured = fmt_value(big_run.first_row.as_secs_f64() * 1000.0, Unit::Millis);
    row.baseline = format!(
        "{} rows: {}",
        small,
        fmt_value(small_run.first_row.as_secs_f64() * 1000.0, Unit::Millis)
    );
    row.target = "≤ 100 ms".into();
    row.met = Some(big_run.first_row <= Duration::from_millis(100));
    ctx.rows.push(row);

    let mut row = Row::new(&name, "drain rate, delivered+acked msg/s");
    row.measured = fmt_value(big_run.drain_rate, Unit::PerSec);
    row.baseline = format!(
        "{} rows: {}",
        small,
        fmt_value(small_run.drain_rate, Unit::PerSec)
    );
    row.note = format!(
        "{} consumers, {:.0} s; {}",
        ctx.opts.consumers,
        ctx.opts.drain().as_secs_f64(),
        big_run.cpu
    );
    ctx.rows.push(row);

    let mut row = Row::new(&name, "poller's due query (its SQL, LIMIT vt_cache_size)");
    row.measured = poller_times
        .iter()
        .map(|(size, ms)| format!("{size} rows: {}", fmt_value(*ms, Unit::Millis)))
        .collect::<Vec<_>>()
        .join(", ");
    if let (Some(first), Some(last)) = (
        poller_times.first().filter(|_| poller_times.len() > 1),
        poller_times.last(),
    ) {
        let ratio = last.1 / first.1.max(1e-3);
        row.relation = format!("{ratio:.2}× from smallest to largest");
        row.target = "does not grow with the backlog (≤ 1.5× + 1 ms)".into();
        row.met = Some(last.1 <= first.1 * 1.5 + 1.0);
    }
    if !big_run.polls.is_empty() {
        let mut polls = Latencies(big_run.polls.iter().map(|ms| (ms * 1e6) as u64).collect());
        row.note = format!(
            "as msgproxy logged it during the drain: {} polls, median {}, max {}",
            polls.0.len(),
            fmt_value(
                polls.percentile_us(50.0).unwrap_or(0.0) / 1000.0,
                Unit::Millis
            ),
            fmt_value(
                polls.percentile_us(100.0).unwrap_or(0.0) / 1000.0,
                Unit::Millis
            ),
        );
    }
    ctx.rows.push(row);

    let mut row = Row::new(&name, "msgproxy peak memory (VmHWM)");
    row.measured = fmt_value(big_run.peak_kib as f64 / 1024.0, Unit::MiB);
    row.baseline = format!(
        "{} rows: {}",
        small,
        fmt_value(small_run.peak_kib as f64 / 1024.0, Unit::MiB)
    );
    row.relation = format!(
        "{:+.1} MiB",
        (big_run.peak_kib as f64 - small_run.peak_kib as f64) / 1024.0
    );
    row.target = "bounded by vt_cache_size: ≤ small-backlog peak × 1.2 + 4 MiB".into();
    row.met = Some(big_run.peak_kib as f64 <= small_run.peak_kib as f64 * 1.2 + 4096.0);
    row.note = format!(
        "idle before STREAM {}",
        fmt_value(big_run.idle_kib as f64 / 1024.0, Unit::MiB)
    );
    ctx.rows.push(row);
    drop_table(ctx, table).await
}

/// Inserts due rows straight into the server until the table has `upto` of them.
async fn load_rows(c: &mut Conn, table: &str, loaded: &mut u64, upto: u64) -> Result<(), String> {
    const CHUNK: u64 = 100_000;
    while *loaded < upto {
        let from = *loaded + 1;
        let to = (*loaded + CHUNK).min(upto);
        exec(
            c,
            &format!("INSERT INTO `{table}` (id, message) SELECT seq, CONCAT('backlog-', seq) FROM seq_{from}_to_{to}"),
        )
        .await?;
        *loaded = to;
    }
    Ok(())
}

/// The poller's query for a table without `priority` (the same SQL as
/// `src/messaging/poll.rs`), median of 5 runs, in ms.
async fn time_poller_query(ctx: &Ctx, c: &mut Conn, table: &str) -> Result<f64, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    // msgproxy's two due queries for a table without priority (src/messaging/poll.rs): rows never
    // scheduled, then the `time_next <= now` range on next_idx.
    let never_scheduled = format!(
        "SELECT `id`, 0, 0 FROM `{db}`.`{table}` FORCE INDEX (`next_idx`) WHERE `time_next` IS NULL AND (`epoch` IS NULL OR `epoch` = 0) AND (`time_acked` IS NULL OR `time_acked` = 0) LIMIT {limit}",
        db = ctx.direct.db,
        limit = ctx.opts.cache_size,
    );
    let scheduled = format!(
        "SELECT `id`, 0, `time_next` FROM `{db}`.`{table}` FORCE INDEX (`next_idx`) WHERE `time_next` <= {now} AND (`time_acked` IS NULL OR `time_acked` = 0) ORDER BY `time_next` LIMIT {limit}",
        db = ctx.direct.db,
        limit = ctx.opts.cache_size,
    );
    let mut times = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        exec(c, &never_scheduled).await?;
        exec(c, &scheduled).await?;
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(Summary::of(&times).map_or(0.0, |s| s.median))
}

pub(crate) struct DrainResult {
    pub(crate) first_row: Duration,
    pub(crate) drain_rate: f64,
    idle_kib: u64,
    peak_kib: u64,
    /// Poll times msgproxy logged, in ms.
    pub(crate) polls: Vec<f64>,
    pub(crate) cpu: String,
}

/// A fresh proxy; one STREAM timed to its first row; then all consumers drain for
/// `--drain-seconds`.
pub(crate) async fn drain_run(
    ctx: &mut Ctx,
    table: &str,
    tag: &str,
    rows: u64,
) -> Result<DrainResult, String> {
    ctx.replace_proxy(tag, "warn,msgproxy::messaging::manager=debug")?;
    // The engine loads the table list at start; wait until this table is served.
    {
        let mut c = Conn::connect(&ctx.proxied)
            .await
            .map_err(|e| format!("connect to msgproxy: {e}"))?;
        wait_loaded(&mut c, table).await?;
        c.quit().await;
    }
    let pid = ctx.proxy.process.pid();
    let idle_kib = memory_kib(pid).map_or(0, |m| m.1);

    // The first stream alone, so its first row is not delayed by the others' claims.
    let mut group = Consumers::none(ctx.ack_interval());
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    group.add(&ctx.proxied, table, None, 0, Some(first_tx));
    let first_row = tokio::time::timeout(Duration::from_secs(30), first_rx)
        .await
        .map_err(|_| "no row reached the first STREAM within 30 s".to_string())?
        .map_err(|_| "the first STREAM ended before its first row".to_string())?;
    for _ in 1..ctx.opts.consumers.max(1) {
        group.add(&ctx.proxied, table, None, 0, None);
    }
    let meter = CpuMeter::start(&ctx.cpu_pids());
    let acked = group.acked.clone();
    let a0 = acked.load(Ordering::Relaxed);
    let t0 = Instant::now();
    // Until the drain time is over or the whole backlog is acked, whichever comes first.
    let end = t0 + ctx.opts.drain();
    while Instant::now() < end && acked.load(Ordering::Relaxed) < rows {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain_rate = (acked.load(Ordering::Relaxed) - a0) as f64 / t0.elapsed().as_secs_f64();
    let cpu = meter.finish();
    group.finish().await?;
    let peak_kib = memory_kib(pid).map_or(0, |m| m.0);
    let polls = logged_polls(&ctx.proxy.process.log);
    Ok(DrainResult {
        first_row,
        drain_rate,
        idle_kib,
        peak_kib,
        polls,
        cpu,
    })
}

/// The poll times msgproxy logged (`polled ... elapsed=12.3ms` at debug level), in ms.
fn logged_polls(log: &std::path::Path) -> Vec<f64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("polled"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("elapsed="))
                .and_then(parse_debug_duration_ms)
        })
        .collect()
}

/// `Duration`'s Debug form ("12.3ms", "850.1µs", "1.2s", "300ns") in ms.
fn parse_debug_duration_ms(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(v) = s.strip_suffix("µs").or_else(|| s.strip_suffix("us")) {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix("ns") {
        (v, 1e-6)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1e3)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

#[cfg(test)]
mod tests {
    use super::parse_debug_duration_ms;

    #[test]
    fn debug_durations() {
        assert_eq!(parse_debug_duration_ms("12.5ms"), Some(12.5));
        assert_eq!(parse_debug_duration_ms("1.5s"), Some(1500.0));
        assert_eq!(parse_debug_duration_ms("500µs"), Some(0.5));
        assert_eq!(parse_debug_duration_ms("nonsense"), None);
    }
}
