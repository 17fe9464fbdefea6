//! Messaging scenarios: message tables through msgproxy, measured against the same server's own
//! insert rate.
//!
//! - latency: a steady `--rate` of single-row inserts (through the proxy, or straight to the
//!   server), `STREAM` consumers through the proxy; time from the producer's COMMIT returning to
//!   the row reaching a consumer;
//! - throughput: producers inserting as fast as they can (single rows, then multi-row inserts),
//!   consumers acking in batches; delivered-and-acked messages/s against the server's own insert
//!   rate with the same producers and no consumers;
//!
//! The backlog scenario (`backlog.rs`) uses the tables and consumers defined here.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::passthrough::{admin, exec, warmup};
use crate::report::{fmt_summary, fmt_value, CpuMeter, Latencies, Row, Samples, Unit};
use crate::wire::{Conn, Target};
use crate::Ctx;

/// ~100 bytes of payload per message.
const PAYLOAD: &str = "msgproxy-bench-payload-0123456789abcdefghijklmnopqrstuvwxyz-0123456789abcdefghijklmnopqrstuvwxyz--";
/// Most ids one ACK statement carries.
pub(crate) const MAX_ACK_BATCH: usize = 1000;
/// Producer connections of the latency runs (a commit may take longer than 1/rate).
const LATENCY_PRODUCERS: usize = 4;

/// Producer statements InnoDB chose as deadlock victims (or whose lock wait timed out), retried.
static PRODUCER_RETRIES: AtomicU64 = AtomicU64::new(0);

/// ACK statements that were deadlock victims (or timed out waiting for a lock), retried.
static ACK_RETRIES: AtomicU64 = AtomicU64::new(0);

/// Producer and ACK statements retried so far (deadlock victims, lock wait timeouts).
pub(crate) fn retries() -> (u64, u64) {
    (
        PRODUCER_RETRIES.load(Ordering::Relaxed),
        ACK_RETRIES.load(Ordering::Relaxed),
    )
}

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
         COMMENT 'vitess_message,vt_ack_wait=30,vt_purge_after=3600,vt_batch_size={},vt_cache_size={},vt_poller_interval={}{}'",
        o.batch_size,
        o.cache_size,
        o.poller_interval,
        o.max_unacked
            .map(|n| format!(",vt_max_unacked={n}"))
            .unwrap_or_default()
    )
}

/// (Re)creates a message table through the proxy (so it is loaded at once) and waits until the
/// proxy answers `ACK` on it.
pub(crate) async fn create_message_table(ctx: &Ctx, name: &str) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("DROP TABLE IF EXISTS `{name}`")).await?;
    exec(&mut c, &create_table_sql(ctx, name)).await?;
    wait_loaded(&mut c, name).await?;
    c.quit().await;
    Ok(())
}

pub(crate) async fn wait_loaded(c: &mut Conn, name: &str) -> Result<(), String> {
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
pub(crate) async fn truncate(ctx: &Ctx, name: &str) -> Result<(), String> {
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
pub(crate) struct CommitTimes {
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
pub(crate) struct Received {
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
    interval: Duration,
) -> Result<(), String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect an acker: {e}"))?;
    let mut sql = String::with_capacity(16 * 1024);
    let mut previous = Instant::now();
    while let Some(first) = ids.recv().await {
        tokio::time::sleep_until((previous + interval).into()).await;
        previous = Instant::now();
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
pub(crate) struct Consumers {
    stop: Arc<tokio::sync::Notify>,
    streams: JoinSet<Result<Received, String>>,
    ackers: JoinSet<Result<(), String>>,
    pub(crate) acked: Arc<AtomicU64>,
    /// Least time between one acker's ACKs (`--ack-interval-ms`).
    ack_interval: Duration,
}

impl Consumers {
    async fn start(
        ack_interval: Duration,
        target: &Target,
        table: &str,
        n: usize,
        times: Option<Arc<CommitTimes>>,
        measure_from_id: i64,
    ) -> Consumers {
        let mut group = Consumers::none(ack_interval);
        for _ in 0..n {
            group.add(target, table, times.clone(), measure_from_id, None);
        }
        // Let the streams subscribe before anything is produced.
        tokio::time::sleep(Duration::from_millis(200)).await;
        group
    }

    pub(crate) fn none(ack_interval: Duration) -> Consumers {
        Consumers {
            stop: Arc::new(tokio::sync::Notify::new()),
            streams: JoinSet::new(),
            ackers: JoinSet::new(),
            acked: Arc::new(AtomicU64::new(0)),
            ack_interval,
        }
    }

    /// Starts one more stream with its acker (see [`consume`] for the arguments).
    pub(crate) fn add(
        &mut self,
        target: &Target,
        table: &str,
        times: Option<Arc<CommitTimes>>,
        measure_from_id: i64,
        first_row: Option<tokio::sync::oneshot::Sender<Duration>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        self.ackers.spawn(ack_loop(
            target.clone(),
            table.into(),
            rx,
            self.acked.clone(),
            self.ack_interval,
        ));
        self.streams.spawn(consume(
            target.clone(),
            table.into(),
            tx,
            times,
            measure_from_id,
            self.stop.clone(),
            first_row,
        ));
    }

    /// Stops the streams, lets the ackers finish, and returns what the streams saw.
    pub(crate) async fn finish(mut self) -> Result<Received, String> {
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
        ctx.ack_interval(),
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
            let (inserted, _, direct_note) = throughput_run(
                ctx,
                plain,
                &ctx.direct.clone(),
                rows_per_insert,
                Consumption::Nobody,
                dur,
            )
            .await?;
            samples.add("direct", "rate", inserted);
            // Producers through msgproxy (or, with --producers-direct, straight to the server),
            // consumers streaming and acking.
            truncate(ctx, table).await?;
            let producers = if ctx.opts.producers_direct {
                ctx.direct.clone()
            } else {
                ctx.proxied.clone()
            };
            let retries0 = PRODUCER_RETRIES.load(Ordering::Relaxed);
            let acks0 = ACK_RETRIES.load(Ordering::Relaxed);
            let (inserted, acked, cpu) = throughput_run(
                ctx,
                table,
                &producers,
                rows_per_insert,
                Consumption::Streams(ctx.opts.consumers),
                dur,
            )
            .await?;
            // With --consumers 0 nothing is delivered: what is measured is the producers' rate
            // into the message table.
            let no_consumers = ctx.opts.consumers == 0;
            samples.add("proxy", "rate", if no_consumers { inserted } else { acked });
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
            if ctx.opts.consumers == 0 {
                "inserted rows/s, no consumers (server: into a plain table)"
            } else {
                "delivered+acked msg/s (server: inserted rows/s into a plain table, no consumers)"
            },
            &samples,
            "rate",
            Unit::PerSec,
            // The target is about delivered messages; without consumers there are none.
            (ctx.opts.consumers > 0).then_some(0.8),
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

/// Who takes the messages off the table in a sustained run.
#[derive(Clone, Copy)]
pub(crate) enum Consumption {
    /// Nobody: the producers' own rate.
    Nobody,
    /// This many `STREAM`s through msgproxy, each with its acker.
    Streams(usize),
    /// This many consumers of a queue written by hand in SQL, straight to the server
    /// (`handqueue.rs`).
    ByHand(usize),
}

/// The consumers of one sustained run, whichever kind.
enum Group {
    Streams(Consumers),
    ByHand(crate::handqueue::HandConsumers),
}

impl Group {
    fn acked(&self) -> u64 {
        match self {
            Group::Streams(g) => g.acked.load(Ordering::Relaxed),
            Group::ByHand(g) => g.acked.load(Ordering::Relaxed),
        }
    }

    /// Stops the consumers; returns the rows they received.
    async fn finish(self) -> Result<u64, String> {
        match self {
            Group::Streams(g) => Ok(g.finish().await?.rows),
            Group::ByHand(g) => g.finish().await,
        }
    }
}

/// Producers inserting as fast as they can for `dur`, with `consumption` taking the messages.
/// Returns (inserted rows/s, acked messages/s, CPU note), counted after the warm-up.
pub(crate) async fn throughput_run(
    ctx: &Ctx,
    table: &str,
    producer_target: &Target,
    rows_per_insert: usize,
    consumption: Consumption,
    dur: Duration,
) -> Result<(f64, f64, String), String> {
    let group = match consumption {
        Consumption::Nobody | Consumption::Streams(0) | Consumption::ByHand(0) => None,
        Consumption::Streams(n) => Some(Group::Streams(
            Consumers::start(ctx.ack_interval(), &ctx.proxied, table, n, None, 0).await,
        )),
        Consumption::ByHand(n) => Some(Group::ByHand(
            crate::handqueue::HandConsumers::start(ctx, table, n).await,
        )),
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
    let ack0 = group.as_ref().map_or(0, Group::acked);
    tokio::time::sleep_until(end.into()).await;
    let ins1 = inserted.load(Ordering::Relaxed);
    let ack1 = group.as_ref().map_or(0, Group::acked);
    let cpu = meter.finish();
    let status1 = server_counters(&mut status_conn).await?;
    status_conn.quit().await;
    let secs = dur.as_secs_f64();
    let per_sec = |name: &str| {
        let get = |m: &[(String, f64)]| m.iter().find(|(n, _)| n == name).map_or(0.0, |v| v.1);
        (get(&status1) - get(&status0)) / secs
    };
    // What the durable commits cost the disk, per row the producers inserted: where the server
    // is short of fsyncs rather than CPU, these say why (BENCHMARKS.md, fourth round).
    let inserted_per_sec = ((ins1 - ins0) as f64 / secs).max(1.0);
    let cpu = format!(
        "{cpu}; server per second: {:.0} SELECT, {:.0} UPDATE, {:.0} INSERT, {:.0} COMMIT, {:.0} rows read, {:.1} new connections, {:.0} transactions in {:.0} group commits, {:.0} InnoDB fsyncs; per row inserted: {:.0} B of binlog, {:.0} B of redo log",
        per_sec("Com_select"),
        per_sec("Com_update"),
        per_sec("Com_insert"),
        per_sec("Com_commit"),
        per_sec("Rows_read"),
        per_sec("Connections"),
        per_sec("Binlog_commits"),
        per_sec("Binlog_group_commits"),
        per_sec("Innodb_data_fsyncs"),
        per_sec("Binlog_bytes_written") / inserted_per_sec,
        per_sec("Innodb_os_log_written") / inserted_per_sec,
    );
    while let Some(r) = producers.join_next().await {
        r.map_err(|e| format!("producer task: {e}"))??;
    }
    if let Some(g) = group {
        // The figures are taken; before stopping, give a slow proxy (the debug build of the
        // smoke run, whose binlog watcher may trail a burst of multi-row inserts by more than the
        // half-second run) time to deliver something, so "nothing arrived" means nothing would.
        let patience = Instant::now() + Duration::from_secs(30);
        while g.acked() == 0 && Instant::now() < patience {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if g.finish().await? == 0 {
            return Err("the consumers received no message within 30 s of the run".into());
        }
    }
    Ok((
        (ins1 - ins0) as f64 / secs,
        (ack1 - ack0) as f64 / secs,
        cpu,
    ))
}

/// The server's statement and row counters (global status), for "what did the server do".
async fn server_counters(c: &mut Conn) -> Result<Vec<(String, f64)>, String> {
    let rows = c
        .query_rows("SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select', 'Com_update', 'Com_insert', 'Com_commit', 'Rows_read', 'Connections', 'Binlog_commits', 'Binlog_group_commits', 'Binlog_bytes_written', 'Innodb_data_fsyncs', 'Innodb_os_log_written')")
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

pub(crate) async fn drop_table(ctx: &Ctx, table: &str) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("DROP TABLE IF EXISTS `{table}`")).await?;
    c.quit().await;
    Ok(())
}
