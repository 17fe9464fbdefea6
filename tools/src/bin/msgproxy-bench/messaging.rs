//! Messaging scenarios: message tables through msgproxy, measured against the same server's own
//! insert rate.
//!
//! - latency: a steady `--rate` of single-row inserts (through the proxy, or straight to the
//!   server), `STREAM` consumers through the proxy; time from the producer's COMMIT returning to
//!   the row reaching a consumer;
//!
//! The throughput (`throughput.rs`), handqueue (`handqueue.rs`) and backlog (`backlog.rs`)
//! scenarios use the tables, producers and consumers defined here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::passthrough::{exec, warmup};
use crate::report::{fmt_summary, fmt_value, CpuMeter, Latencies, Row, Samples, Unit};
use crate::wire::{Conn, Target};
use crate::Ctx;

/// ~100 bytes of payload per message.
pub(crate) const PAYLOAD: &str = "msgproxy-bench-payload-0123456789abcdefghijklmnopqrstuvwxyz-0123456789abcdefghijklmnopqrstuvwxyz--";
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
pub(crate) async fn insert(c: &mut Conn, sql: &str) -> Result<crate::wire::Outcome, String> {
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

/// The bench's message tables' `vt_purge_after`, unless a run asks for another.
pub(crate) const PURGE_AFTER: f64 = 3600.0;

/// The message table's DDL (the RFC's idiomatic layout, the bench's options).
pub(crate) fn create_table_sql(ctx: &Ctx, name: &str, purge_after: f64) -> String {
    let o = &ctx.opts;
    format!(
        "CREATE TABLE `{name}` (id BIGINT NOT NULL, time_next BIGINT DEFAULT 0, epoch BIGINT, time_acked BIGINT, \
         message VARCHAR(128), PRIMARY KEY(id), INDEX next_idx(time_next, epoch), INDEX ack_idx(time_acked)) ENGINE=InnoDB \
         COMMENT 'vitess_message,vt_ack_wait=30,vt_purge_after={purge_after},vt_batch_size={},vt_cache_size={},vt_poller_interval={}{}'",
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
    create_message_table_purging(ctx, name, PURGE_AFTER).await
}

/// [`create_message_table`] with this `vt_purge_after` (seconds).
pub(crate) async fn create_message_table_purging(
    ctx: &Ctx,
    name: &str,
    purge_after: f64,
) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("DROP TABLE IF EXISTS `{name}`")).await?;
    exec(&mut c, &create_table_sql(ctx, name, purge_after)).await?;
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
    pub(crate) rows: u64,
    duplicates: u64,
    /// Rows that arrived before their producer had read its COMMIT's OK (counted as 0 latency).
    early: u64,
}

/// A STREAM consumer through the proxy: reads rows until `stop`, hands ids to its acker, and
/// measures latency against `times` when given. With `condition`, a filtered stream
/// (`STREAM * FROM t WHERE condition`).
#[allow(clippy::too_many_arguments)]
async fn consume(
    target: Target,
    table: String,
    condition: Option<String>,
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
    let statement = match &condition {
        Some(cond) => format!("STREAM * FROM `{table}` WHERE {cond}"),
        None => format!("STREAM * FROM `{table}`"),
    };
    c.start_stream(&statement)
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

/// How an acker acknowledges.
#[derive(Clone, Copy)]
pub(crate) enum AckForm {
    /// msgproxy's `ACK t id, ...`.
    Statement,
    /// The ordinary SQL an application acks with by hand (MESSAGING.md §6):
    /// `UPDATE t SET time_acked = now, time_next = NULL WHERE id IN (...) AND time_acked IS NULL`.
    Update,
    /// What an application that keeps no acked rows writes (as msgproxy's `ACK` does with
    /// `vt_purge_after=0`): `DELETE FROM t WHERE id IN (...) AND time_acked IS NULL`.
    Delete,
}

/// Acks what its consumer received, in batches of whatever has arrived meanwhile (at most one
/// statement per `interval`), retrying deadlocks and lock wait timeouts as an application would.
pub(crate) async fn ack_loop(
    target: Target,
    table: String,
    form: AckForm,
    mut ids: mpsc::UnboundedReceiver<i64>,
    acked: Arc<AtomicU64>,
    interval: Duration,
) -> Result<(), String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect an acker: {e}"))?;
    let mut list = String::with_capacity(16 * 1024);
    let mut previous = Instant::now();
    while let Some(first) = ids.recv().await {
        tokio::time::sleep_until((previous + interval).into()).await;
        previous = Instant::now();
        list.clear();
        list.push_str(&first.to_string());
        let mut n = 1;
        while n < MAX_ACK_BATCH {
            match ids.try_recv() {
                Ok(id) => {
                    list.push_str(", ");
                    list.push_str(&id.to_string());
                    n += 1;
                }
                Err(_) => break,
            }
        }
        let sql = match form {
            AckForm::Statement => format!("ACK `{table}` {list}"),
            AckForm::Update => format!(
                "UPDATE `{table}` SET time_acked = {}, time_next = NULL WHERE id IN ({list}) AND time_acked IS NULL",
                unix_ns()
            ),
            AckForm::Delete => format!(
                "DELETE FROM `{table}` WHERE id IN ({list}) AND time_acked IS NULL"
            ),
        };
        let out = loop {
            match c.query(&sql).await {
                Ok(out) => break out,
                // A deadlock with a claim: retry, as an application would.
                Err(crate::wire::Error::Server {
                    code: 1213 | 1205, ..
                }) => {
                    ACK_RETRIES.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(format!("{sql:.40}...: {e}")),
            }
        };
        acked.fetch_add(out.affected_rows, Ordering::Relaxed);
    }
    c.quit().await;
    Ok(())
}

/// Now, in Unix nanoseconds (the unit of the message tables' times).
pub(crate) fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Consumers and their ackers, running until `stop()`.
pub(crate) struct Consumers {
    stop: Arc<tokio::sync::Notify>,
    streams: JoinSet<Result<Received, String>>,
    ackers: JoinSet<Result<(), String>>,
    pub(crate) acked: Arc<AtomicU64>,
    /// Least time between one acker's ACKs (`--ack-interval-ms`).
    ack_interval: Duration,
    /// The streams' `WHERE` condition (`--stream-where`), if they are filtered.
    condition: Option<String>,
}

impl Consumers {
    pub(crate) async fn start(
        ack_interval: Duration,
        target: &Target,
        table: &str,
        n: usize,
        times: Option<Arc<CommitTimes>>,
        measure_from_id: i64,
        condition: Option<&str>,
    ) -> Consumers {
        let mut group = Consumers::none(ack_interval);
        group.condition = condition.map(str::to_string);
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
            condition: None,
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
            AckForm::Statement,
            rx,
            self.acked.clone(),
            self.ack_interval,
        ));
        self.streams.spawn(consume(
            target.clone(),
            table.into(),
            self.condition.clone(),
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

pub(crate) struct LatencyResult {
    pub(crate) send_p50: f64,
    pub(crate) send_p99: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) rate: f64,
    pub(crate) delivered: u64,
    pub(crate) expected: u64,
    pub(crate) duplicates: u64,
    pub(crate) early: u64,
    pub(crate) cpu: String,
}

pub(crate) async fn latency_run(
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
        None,
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

pub(crate) async fn drop_table(ctx: &Ctx, table: &str) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("DROP TABLE IF EXISTS `{table}`")).await?;
    c.quit().await;
    Ok(())
}
