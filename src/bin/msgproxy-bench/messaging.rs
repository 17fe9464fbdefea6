//! Messaging scenarios: message tables through msgproxy, measured against the same server's own
//! insert rate.
//!
//! - latency: a steady `--rate` of single-row inserts (through the proxy, or straight to the
//!   server), `STREAM` consumers through the proxy; time from the producer's COMMIT returning to
//!   the row reaching a consumer;
//! - throughput: producers inserting as fast as they can (single rows, then multi-row inserts),
//!   consumers acking in batches; delivered-and-acked messages/s against the server's own insert
//!   rate with the same producers and no consumers;
//! - backlog: a table with `--backlog-rows` due rows: time from STREAM to the first row, drain
//!   rate, the poller's query time as the backlog grows, and the proxy's peak memory against a
//!   backlog of only `vt_cache_size` rows.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::passthrough::{admin, exec, warmup};
use crate::report::{fmt_summary, fmt_value, CpuMeter, Latencies, Row, Samples, Summary, Unit};
use crate::servers::memory_kib;
use crate::wire::{Conn, Target};
use crate::Ctx;

/// ~100 bytes of payload per message.
const PAYLOAD: &str = "msgproxy-bench-payload-0123456789abcdefghijklmnopqrstuvwxyz-0123456789abcdefghijklmnopqrstuvwxyz--";
/// Most ids one ACK statement carries.
const MAX_ACK_BATCH: usize = 1000;
/// Producer connections of the latency runs (a commit may take longer than 1/rate).
const LATENCY_PRODUCERS: usize = 4;

/// Producer statements InnoDB chose as deadlock victims (or whose lock wait timed out), retried.
static PRODUCER_RETRIES: AtomicU64 = AtomicU64::new(0);

/// ACK statements that were deadlock victims (or timed out waiting for a lock), retried.
static ACK_RETRIES: AtomicU64 = AtomicU64::new(0);

/// Runs a producer's INSERT, retrying it when InnoDB picks it as a deadlock victim (1213) or its
/// lock wait times out (1205), as an application would.
async fn insert(c: &mut Conn, sql: &str) -> Result<crate::wire::Outcome, String> {
    loop {
        match c.query(sql).await {
            Ok(o) => return Ok(o),
            Err(crate::wire::Error::Server {
                code: 1213 | 1205, ..
            }) => {
                PRODUCER_RETRIES.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let short: String = sql.chars().take(80).collect();
                return Err(format!("{short}...: {e}"));
            }
        }
    }
}

/// The message table's DDL (the RFC's idiomatic layout, the bench's options).
fn create_table_sql(ctx: &Ctx, name: &str) -> String {
    let o = &ctx.opts;
    format!(
        "CREATE TABLE `{name}` (id BIGINT NOT NULL, time_next BIGINT DEFAULT 0, epoch BIGINT, time_acked BIGINT, \
         message VARCHAR(128), PRIMARY KEY(id), INDEX next_idx(time_next, epoch), INDEX ack_idx(time_acked)) ENGINE=InnoDB \
         COMMENT 'vitess_message,vt_ack_wait=30,vt_purge_after=3600,vt_batch_size={},vt_cache_size={},vt_poller_interval={}'",
        o.batch_size, o.cache_size, o.poller_interval
    )
}

/// (Re)creates a message table through the proxy (so it is loaded at once) and waits until the
/// proxy answers `ACK` on it.
async fn create_message_table(ctx: &Ctx, name: &str) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("DROP TABLE IF EXISTS `{name}`")).await?;
    exec(&mut c, &create_table_sql(ctx, name)).await?;
    wait_loaded(&mut c, name).await?;
    c.quit().await;
    Ok(())
}

async fn wait_loaded(c: &mut Conn, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.query(&format!("ACK `{name}` 0")).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("msgproxy did not load message table {name}: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Empties a message table through the proxy (between runs).
async fn truncate(ctx: &Ctx, name: &str) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("TRUNCATE TABLE `{name}`")).await?;
    wait_loaded(&mut c, name).await?;
    c.quit().await;
    Ok(())
}

/// When each message's INSERT was sent and when its COMMIT returned, by id (ns since `base`,
/// +1; 0 = not yet known).
struct CommitTimes {
    base: Instant,
    sent: Vec<AtomicU64>,
    at: Vec<AtomicU64>,
    seen: Vec<AtomicBool>,
}

impl CommitTimes {
    fn new(max_id: usize) -> CommitTimes {
        CommitTimes {
            base: Instant::now(),
            sent: (0..=max_id).map(|_| AtomicU64::new(0)).collect(),
            at: (0..=max_id).map(|_| AtomicU64::new(0)).collect(),
            seen: (0..=max_id).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    fn sent(&self, id: i64) {
        if let Some(slot) = self.sent.get(id as usize) {
            slot.store(self.base.elapsed().as_nanos() as u64 + 1, Ordering::Release);
        }
    }

    fn committed(&self, id: i64) {
        if let Some(slot) = self.at.get(id as usize) {
            slot.store(self.base.elapsed().as_nanos() as u64 + 1, Ordering::Release);
        }
    }
}

/// What the consumers saw.
#[derive(Default)]
struct Received {
    /// From the producer's COMMIT returning to the row's arrival.
    latencies: Latencies,
    /// From the producer sending its INSERT (autocommit) to the row's arrival.
    from_send: Latencies,
    rows: u64,
    duplicates: u64,
    /// Rows that arrived before their producer had read its COMMIT's OK (counted as 0 latency).
    early: u64,
}

/// A STREAM consumer through the proxy: reads rows until `stop`, hands ids to its acker, and
/// measures latency against `times` when given.
async fn consume(
    target: Target,
    table: String,
    acks: mpsc::UnboundedSender<i64>,
    times: Option<Arc<CommitTimes>>,
    measure_from_id: i64,
    stop: Arc<tokio::sync::Notify>,
    first_row: Option<tokio::sync::oneshot::Sender<Duration>>,
) -> Result<Received, String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect a consumer: {e}"))?;
    let t0 = Instant::now();
    c.start_stream(&format!("STREAM * FROM `{table}`"))
        .await
        .map_err(|e| format!("STREAM: {e}"))?;
    let mut first_row = first_row;
    let mut got = Received::default();
    loop {
        let id = tokio::select! {
            _ = stop.notified() => break,
            r = c.next_stream_id() => r.map_err(|e| format!("reading the stream: {e}"))?,
        };
        if let Some(tx) = first_row.take() {
            let _ = tx.send(t0.elapsed());
        }
        let now = Instant::now();
        got.rows += 1;
        if let Some(times) = &times {
            if let Some(seen) = times.seen.get(id as usize) {
                if seen.swap(true, Ordering::AcqRel) {
                    got.duplicates += 1;
                }
            }
            if id >= measure_from_id {
                let arrived = now.duration_since(times.base).as_nanos() as u64;
                let sent = times
                    .sent
                    .get(id as usize)
                    .map_or(0, |a| a.load(Ordering::Acquire));
                got.from_send
                    .0
                    .push(arrived.saturating_sub(sent.saturating_sub(1)));
                let at = times
                    .at
                    .get(id as usize)
                    .map_or(0, |a| a.load(Ordering::Acquire));
                if at == 0 {
                    got.early += 1;
                    got.latencies.0.push(0);
                } else {
                    got.latencies.0.push(arrived.saturating_sub(at - 1));
                }
            }
        }
        if acks.send(id).is_err() {
            break;
        }
    }
    // Dropping the connection ends the stream; the proxy unsubscribes at once.
    drop(c);
    Ok(got)
}

/// Acks what its consumer received, in batches of whatever has arrived meanwhile.
async fn ack_loop(
    target: Target,
    table: String,
    mut ids: mpsc::UnboundedReceiver<i64>,
    acked: Arc<AtomicU64>,
) -> Result<(), String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect an acker: {e}"))?;
    let mut sql = String::with_capacity(16 * 1024);
    while let Some(first) = ids.recv().await {
        sql.clear();
        sql.push_str("ACK `");
        sql.push_str(&table);
        sql.push_str("` ");
        sql.push_str(&first.to_string());
        let mut n = 1;
        while n < MAX_ACK_BATCH {
            match ids.try_recv() {
                Ok(id) => {
                    sql.push_str(", ");
                    sql.push_str(&id.to_string());
                    n += 1;
                }
                Err(_) => break,
            }
        }
        let out = loop {
            match c.query(&sql).await {
                Ok(out) => break out,
                // A deadlock with a claim: retry, as an application would.
                Err(crate::wire::Error::Server {
                    code: 1213 | 1205, ..
                }) => {
                    ACK_RETRIES.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(format!("ACK: {e}")),
            }
        };
        acked.fetch_add(out.affected_rows, Ordering::Relaxed);
    }
    c.quit().await;
    Ok(())
}

/// Consumers and their ackers, running until `stop()`.
struct Consumers {
    stop: Arc<tokio::sync::Notify>,
    streams: JoinSet<Result<Received, String>>,
    ackers: JoinSet<Result<(), String>>,
    acked: Arc<AtomicU64>,
}

impl Consumers {
    async fn start(
        target: &Target,
        table: &str,
        n: usize,
        times: Option<Arc<CommitTimes>>,
        measure_from_id: i64,
    ) -> Consumers {
        let stop = Arc::new(tokio::sync::Notify::new());
        let acked = Arc::new(AtomicU64::new(0));
        let mut streams = JoinSet::new();
        let mut ackers = JoinSet::new();
        for _ in 0..n {
            let (tx, rx) = mpsc::unbounded_channel();
            ackers.spawn(ack_loop(target.clone(), table.into(), rx, acked.clone()));
            streams.spawn(consume(
                target.clone(),
                table.into(),
                tx,
                times.clone(),
                measure_from_id,
                stop.clone(),
                None,
            ));
        }
        // Let the streams subscribe before anything is produced.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Consumers {
            stop,
            streams,
            ackers,
            acked,
        }
    }

    /// Stops the streams, lets the ackers finish, and returns what the streams saw.
    async fn finish(mut self) -> Result<Received, String> {
        self.stop.notify_waiters();
        // notify_waiters only reaches tasks already waiting; keep poking until all have ended.
        let mut all = Received::default();
        loop {
            tokio::select! {
                r = self.streams.join_next() => match r {
                    None => break,
                    Some(r) => {
                        let r = r.map_err(|e| format!("consumer task: {e}"))??;
                        all.rows += r.rows;
                        all.duplicates += r.duplicates;
                        all.early += r.early;
                        all.latencies.extend(r.latencies);
                        all.from_send.extend(r.from_send);
                    }
                },
                _ = tokio::time::sleep(Duration::from_millis(20)) => self.stop.notify_waiters(),
            }
        }
        while let Some(r) = self.ackers.join_next().await {
            r.map_err(|e| format!("acker task: {e}"))??;
        }
        Ok(all)
    }
}

pub async fn latency(ctx: &mut Ctx) -> Result<(), String> {
    let table = "bench_latency";
    create_message_table(ctx, table).await?;
    let dur = ctx.opts.duration().max(Duration::from_millis(500));
    let rate = ctx.opts.rate;
    let mut samples = Samples::default();
    let mut notes: [String; 2] = Default::default();
    for _ in 0..ctx.opts.reps() {
        for (i, via) in ["proxy", "direct"].into_iter().enumerate() {
            truncate(ctx, table).await?;
            let retries0 =
                PRODUCER_RETRIES.load(Ordering::Relaxed) + ACK_RETRIES.load(Ordering::Relaxed);
            let r = latency_run(ctx, table, via == "proxy", rate, dur).await?;
            let retries = PRODUCER_RETRIES.load(Ordering::Relaxed)
                + ACK_RETRIES.load(Ordering::Relaxed)
                - retries0;
            samples.add(via, "p50", r.p50);
            samples.add(via, "send_p50", r.send_p50);
            samples.add(via, "send_p99", r.send_p99);
            samples.add(via, "p99", r.p99);
            samples.add(via, "max", r.max);
            samples.add(via, "rate", r.rate);
            notes[i] = format!(
                "{}/{} delivered in time, {} duplicates, {} rows before the producer saw its OK, {retries} INSERT/ACK deadlocks retried; {}",
                r.delivered, r.expected, r.duplicates, r.early, r.cpu
            );
        }
    }
    for (i, via) in ["proxy", "direct"].into_iter().enumerate() {
        let (Some(p50), Some(p99), Some(rate_s)) = (
            samples.get(via, "p50"),
            samples.get(via, "p99"),
            samples.get(via, "rate"),
        ) else {
            continue;
        };
        let mut row = Row::new(
            &format!(
                "end-to-end latency at {} msg/s, producer {}",
                fmt_value(rate, Unit::PerSec).trim_end_matches("/s"),
                if via == "proxy" {
                    "through msgproxy"
                } else {
                    "straight to the server"
                }
            ),
            "COMMIT → STREAM row, p50 / p99",
        );
        row.measured = format!(
            "{} / {}",
            fmt_summary(&p50, Unit::Millis),
            fmt_summary(&p99, Unit::Millis)
        );
        row.baseline = format!("achieved rate {}", fmt_summary(&rate_s, Unit::PerSec));
        row.target = "p50 ≤ 2 ms, p99 ≤ 10 ms".into();
        row.met = Some(p50.median <= 2.0 && p99.median <= 10.0);
        row.note = notes[i].clone();
        if let (Some(s50), Some(s99)) = (samples.get(via, "send_p50"), samples.get(via, "send_p99"))
        {
            row.note = format!(
                "from sending the INSERT: {} / {}; {}",
                fmt_summary(&s50, Unit::Millis),
                fmt_summary(&s99, Unit::Millis),
                row.note
            );
            ctx.figures.insert(format!("latency_{via}_send_p50"), s50);
            ctx.figures.insert(format!("latency_{via}_send_p99"), s99);
        }
        ctx.figures.insert(format!("latency_{via}_p50"), p50);
        ctx.figures.insert(format!("latency_{via}_p99"), p99);
        ctx.rows.push(row);
    }
    drop_table(ctx, table).await
}

struct LatencyResult {
    send_p50: f64,
    send_p99: f64,
    p50: f64,
    p99: f64,
    max: f64,
    rate: f64,
    delivered: u64,
    expected: u64,
    duplicates: u64,
    early: u64,
    cpu: String,
}

async fn latency_run(
    ctx: &Ctx,
    table: &str,
    through_proxy: bool,
    rate: f64,
    dur: Duration,
) -> Result<LatencyResult, String> {
    let warm = warmup(dur);
    let total = ((warm + dur).as_secs_f64() * rate).ceil() as i64;
    let measure_from_id = (warm.as_secs_f64() * rate) as i64 + 1;
    let times = Arc::new(CommitTimes::new(total as usize + 1));
    let consumers = Consumers::start(
        &ctx.proxied,
        table,
        ctx.opts.consumers,
        Some(times.clone()),
        measure_from_id,
    )
    .await;
    let producer_target = if through_proxy {
        ctx.proxied.clone()
    } else {
        ctx.direct.clone()
    };
    let meter = CpuMeter::start(&ctx.cpu_pids());
    let go = Instant::now();
    let mut producers = JoinSet::new();
    for k in 0..LATENCY_PRODUCERS {
        let target = producer_target.clone();
        let times = times.clone();
        let table = table.to_string();
        producers.spawn(async move {
            let mut c = Conn::connect(&target)
                .await
                .map_err(|e| format!("connect a producer: {e}"))?;
            let mut id = k as i64 + 1;
            while id <= total {
                let due = go + Duration::from_secs_f64((id - 1) as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                times.sent(id);
                insert(
                    &mut c,
                    &format!("INSERT INTO `{table}` (id, message) VALUES ({id}, '{PAYLOAD}')"),
                )
                .await?;
                times.committed(id);
                id += LATENCY_PRODUCERS as i64;
            }
            c.quit().await;
            Ok::<_, String>(())
        });
    }
    while let Some(r) = producers.join_next().await {
        r.map_err(|e| format!("producer task: {e}"))??;
    }
    let produced_in = go.elapsed();
    // Rows written around the proxy wait for the poller (or the binlog watcher): give them one
    // poll interval more than the proxy's own.
    let expected = (total - measure_from_id + 1).max(0) as u64;
    let grace = Duration::from_secs(2)
        + if through_proxy {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(ctx.opts.poller_interval)
        };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && consumers.acked.load(Ordering::Relaxed) < total as u64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = meter.finish();
    let mut got = consumers.finish().await?;
    Ok(LatencyResult {
        send_p50: got.from_send.percentile_us(50.0).unwrap_or(f64::NAN) / 1000.0,
        send_p99: got.from_send.percentile_us(99.0).unwrap_or(f64::NAN) / 1000.0,
        p50: got.latencies.percentile_us(50.0).unwrap_or(f64::NAN) / 1000.0,
        p99: got.latencies.percentile_us(99.0).unwrap_or(f64::NAN) / 1000.0,
        max: got.latencies.percentile_us(100.0).unwrap_or(f64::NAN) / 1000.0,
        rate: total as f64 / produced_in.as_secs_f64(),
        delivered: got.latencies.0.len() as u64,
        expected,
        duplicates: got.duplicates,
        early: got.early,
        cpu,
    })
}

pub async fn throughput(ctx: &mut Ctx) -> Result<(), String> {
    let table = "bench_throughput";
    create_message_table(ctx, table).await?;
    // The baseline's table: the same columns and indexes, but not a message table, so the
    // proxy (which follows the binlog) has nothing to do while the server's own rate is measured.
    let plain = "bench_throughput_plain";
    let mut a = admin(ctx).await?;
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{plain}`")).await?;
    exec(&mut a, &format!("CREATE TABLE `{plain}` LIKE `{table}`")).await?;
    exec(&mut a, &format!("ALTER TABLE `{plain}` COMMENT ''")).await?;
    let dur = ctx.opts.duration();
    for rows_per_insert in [1, ctx.opts.multi_rows] {
        let mut samples = Samples::default();
        let mut note = String::new();
        for _ in 0..ctx.opts.reps() {
            // The server's own insert rate with the same producers, no consumers.
            exec(&mut a, &format!("TRUNCATE TABLE `{plain}`")).await?;
            let (inserted, _, direct_note) =
                throughput_run(ctx, plain, &ctx.direct.clone(), rows_per_insert, 0, dur).await?;
            samples.add("direct", "rate", inserted);
            // Producers through msgproxy, consumers streaming and acking.
            truncate(ctx, table).await?;
            let retries0 = PRODUCER_RETRIES.load(Ordering::Relaxed);
            let acks0 = ACK_RETRIES.load(Ordering::Relaxed);
            let (inserted, acked, cpu) = throughput_run(
                ctx,
                table,
                &ctx.proxied.clone(),
                rows_per_insert,
                ctx.opts.consumers,
                dur,
            )
            .await?;
            samples.add("proxy", "rate", acked);
            samples.add("proxy", "inserted", inserted);
            note = format!(
                "{} INSERT and {} ACK deadlocks retried; {cpu}; the server's own run: {direct_note}",
                PRODUCER_RETRIES.load(Ordering::Relaxed) - retries0,
                ACK_RETRIES.load(Ordering::Relaxed) - acks0
            );
        }
        let kind = if rows_per_insert == 1 {
            "single-row inserts".to_string()
        } else {
            format!("{rows_per_insert}-row inserts")
        };
        let mut row = crate::passthrough::ratio_row(
            &format!(
                "sustained messaging, {kind}, {} producers, {} consumers",
                ctx.opts.producers, ctx.opts.consumers
            ),
            "delivered+acked msg/s (server: inserted rows/s into a plain table, no consumers)",
            &samples,
            "rate",
            Unit::PerSec,
            Some(0.8),
            "",
        );
        if let Some(ins) = samples.get("proxy", "inserted") {
            row.note = format!(
                "inserted meanwhile {}; {note}",
                fmt_summary(&ins, Unit::PerSec)
            );
        }
        if let Some(s) = samples.get("proxy", "rate") {
            ctx.figures.insert(
                format!(
                    "throughput_{}",
                    if rows_per_insert == 1 {
                        "single"
                    } else {
                        "multi"
                    }
                ),
                s,
            );
        }
        ctx.rows.push(row);
    }
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{plain}`")).await?;
    a.quit().await;
    drop_table(ctx, table).await
}

/// Producers inserting as fast as they can for `dur`, with `consumers` streams acking. Returns
/// (inserted rows/s, acked messages/s, CPU note), counted after the warm-up.
async fn throughput_run(
    ctx: &Ctx,
    table: &str,
    producer_target: &Target,
    rows_per_insert: usize,
    consumers: usize,
    dur: Duration,
) -> Result<(f64, f64, String), String> {
    let group = if consumers > 0 {
        Some(Consumers::start(&ctx.proxied, table, consumers, None, 0).await)
    } else {
        None
    };
    let next_id = Arc::new(AtomicI64::new(1));
    let inserted = Arc::new(AtomicU64::new(0));
    let go = Instant::now();
    let measure_from = go + warmup(dur);
    let end = measure_from + dur;
    let mut producers = JoinSet::new();
    for _ in 0..ctx.opts.producers {
        let target = producer_target.clone();
        let next_id = next_id.clone();
        let inserted = inserted.clone();
        let table = table.to_string();
        producers.spawn(async move {
            let mut c = Conn::connect(&target)
                .await
                .map_err(|e| format!("connect a producer: {e}"))?;
            let mut sql = String::with_capacity(rows_per_insert * 140 + 64);
            while Instant::now() < end {
                let first = next_id.fetch_add(rows_per_insert as i64, Ordering::Relaxed);
                sql.clear();
                sql.push_str("INSERT INTO `");
                sql.push_str(&table);
                sql.push_str("` (id, message) VALUES ");
                for id in first..first + rows_per_insert as i64 {
                    if id > first {
                        sql.push(',');
                    }
                    sql.push_str(&format!("({id},'{PAYLOAD}')"));
                }
                let out = insert(&mut c, &sql).await?;
                inserted.fetch_add(out.affected_rows, Ordering::Relaxed);
            }
            c.quit().await;
            Ok::<_, String>(())
        });
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let meter = CpuMeter::start(&ctx.cpu_pids());
    let mut status_conn = admin(ctx).await?;
    let status0 = server_counters(&mut status_conn).await?;
    let ins0 = inserted.load(Ordering::Relaxed);
    let ack0 = group
        .as_ref()
        .map_or(0, |g| g.acked.load(Ordering::Relaxed));
    tokio::time::sleep_until(end.into()).await;
    let ins1 = inserted.load(Ordering::Relaxed);
    let ack1 = group
        .as_ref()
        .map_or(0, |g| g.acked.load(Ordering::Relaxed));
    let cpu = meter.finish();
    let status1 = server_counters(&mut status_conn).await?;
    status_conn.quit().await;
    let secs = dur.as_secs_f64();
    let per_sec = |name: &str| {
        let get = |m: &[(String, f64)]| m.iter().find(|(n, _)| n == name).map_or(0.0, |v| v.1);
        (get(&status1) - get(&status0)) / secs
    };
    let cpu = format!(
        "{cpu}; server per second: {:.0} SELECT, {:.0} UPDATE, {:.0} INSERT, {:.0} COMMIT, {:.0} rows read, {:.1} new connections, {:.0} transactions in {:.0} group commits",
        per_sec("Com_select"),
        per_sec("Com_update"),
        per_sec("Com_insert"),
        per_sec("Com_commit"),
        per_sec("Rows_read"),
        per_sec("Connections"),
        per_sec("Binlog_commits"),
        per_sec("Binlog_group_commits"),
    );
    while let Some(r) = producers.join_next().await {
        r.map_err(|e| format!("producer task: {e}"))??;
    }
    if let Some(g) = group {
        // The figures are taken; before stopping, give a slow proxy (the debug build of the
        // smoke run, whose binlog watcher may trail a burst of multi-row inserts by more than the
        // half-second run) time to deliver something, so "nothing arrived" means nothing would.
        let patience = Instant::now() + Duration::from_secs(30);
        while g.acked.load(Ordering::Relaxed) == 0 && Instant::now() < patience {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let got = g.finish().await?;
        if got.rows == 0 {
            return Err("the consumers received no message within 30 s of the run".into());
        }
    }
    Ok((
        (ins1 - ins0) as f64 / secs,
        (ack1 - ack0) as f64 / secs,
        cpu,
    ))
}

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

/// The server's statement and row counters (global status), for "what did the server do".
async fn server_counters(c: &mut Conn) -> Result<Vec<(String, f64)>, String> {
    let rows = c
        .query_rows("SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select', 'Com_update', 'Com_insert', 'Com_commit', 'Rows_read', 'Connections', 'Binlog_commits', 'Binlog_group_commits')")
        .await
        .map_err(|e| format!("SHOW GLOBAL STATUS: {e}"))?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let mut it = r.into_iter();
            let name = it.next().flatten()?;
            let value = it.next().flatten()?.parse().ok()?;
            Some((name, value))
        })
        .collect())
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

struct DrainResult {
    first_row: Duration,
    drain_rate: f64,
    idle_kib: u64,
    peak_kib: u64,
    /// Poll times msgproxy logged, in ms.
    polls: Vec<f64>,
    cpu: String,
}

/// A fresh proxy; one STREAM timed to its first row; then all consumers drain for
/// `--drain-seconds`.
async fn drain_run(
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

    let stop = Arc::new(tokio::sync::Notify::new());
    let acked = Arc::new(AtomicU64::new(0));
    let mut streams = JoinSet::new();
    let mut ackers = JoinSet::new();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let mut first_tx = Some(first_tx);
    let mut first_rx = Some(first_rx);
    let mut first_row = Duration::ZERO;
    for _ in 0..ctx.opts.consumers.max(1) {
        let (tx, rx) = mpsc::unbounded_channel();
        ackers.spawn(ack_loop(
            ctx.proxied.clone(),
            table.into(),
            rx,
            acked.clone(),
        ));
        streams.spawn(consume(
            ctx.proxied.clone(),
            table.into(),
            tx,
            None,
            0,
            stop.clone(),
            first_tx.take(),
        ));
        if let Some(rx) = first_rx.take() {
            // The first stream alone, so its first row is not delayed by the others' claims.
            first_row = tokio::time::timeout(Duration::from_secs(30), rx)
                .await
                .map_err(|_| "no row reached the first STREAM within 30 s".to_string())?
                .map_err(|_| "the first STREAM ended before its first row".to_string())?;
        }
    }
    let meter = CpuMeter::start(&ctx.cpu_pids());
    let a0 = acked.load(Ordering::Relaxed);
    let t0 = Instant::now();
    // Until the drain time is over or the whole backlog is acked, whichever comes first.
    let end = t0 + ctx.opts.drain();
    while Instant::now() < end && acked.load(Ordering::Relaxed) < rows {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain_rate = (acked.load(Ordering::Relaxed) - a0) as f64 / t0.elapsed().as_secs_f64();
    let cpu = meter.finish();
    let group = Consumers {
        stop,
        streams,
        ackers,
        acked,
    };
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
        .map(strip_ansi)
        .filter(|l| l.contains("polled"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("elapsed="))
                .and_then(parse_debug_duration_ms)
        })
        .collect()
}

/// The line without terminal colour codes (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
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

async fn drop_table(ctx: &Ctx, table: &str) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("DROP TABLE IF EXISTS `{table}`")).await?;
    c.quit().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_debug_duration_ms, strip_ansi};

    #[test]
    fn debug_durations() {
        assert_eq!(parse_debug_duration_ms("12.5ms"), Some(12.5));
        assert_eq!(parse_debug_duration_ms("1.5s"), Some(1500.0));
        assert_eq!(parse_debug_duration_ms("500µs"), Some(0.5));
        assert_eq!(parse_debug_duration_ms("nonsense"), None);
        assert_eq!(
            strip_ansi("\u{1b}[3melapsed\u{1b}[0m\u{1b}[2m=\u{1b}[0m1.2ms"),
            "elapsed=1.2ms"
        );
    }
}
