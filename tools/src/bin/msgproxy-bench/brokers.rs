//! The messaging workloads on the brokers users would pick instead, measured in the same run:
//!
//! - RabbitMQ: a durable classic queue, persistent messages (delivery mode 2), publisher
//!   confirms, manual acks (`multiple` acks in batches, like the message tables' ACK lists);
//! - NATS JetStream: a work-queue stream on file storage, publish waiting for the stream's ack,
//!   a durable pull consumer with explicit acks (JetStream has no batch ack for work shared by
//!   several consumers; each ack is a fire-and-forget publish).
//!
//! The same shapes as `messaging`: a steady `--rate` with end-to-end latency measured from the
//! publisher's confirm (its "COMMIT") to delivery, and sustained throughput with publishers
//! waiting for each confirm (like single-row autocommit inserts) or for a batch of
//! `--multi-rows` confirms (like multi-row inserts).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::task::JoinSet;

use crate::passthrough::warmup;
use crate::report::{fmt_summary, Latencies, Row, Samples, Unit};
use crate::Ctx;

const PAYLOAD_LEN: usize = 100;
const LATENCY_PUBLISHERS: usize = 4;
/// Unacked deliveries a RabbitMQ consumer may hold (its batch of acks is at most this).
const PREFETCH: u16 = 1000;
/// A RabbitMQ consumer acks (multiple) after this many deliveries, or when none is waiting.
const ACK_EVERY: u64 = 100;

/// When each message was published and when it was confirmed, by id (ns since `base`, +1;
/// 0 = not yet).
struct Confirms {
    base: Instant,
    sent: Vec<AtomicU64>,
    at: Vec<AtomicU64>,
}

impl Confirms {
    fn new(n: usize) -> Confirms {
        Confirms {
            base: Instant::now(),
            sent: (0..=n).map(|_| AtomicU64::new(0)).collect(),
            at: (0..=n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn sent(&self, id: i64) {
        if let Some(a) = self.sent.get(id as usize) {
            a.store(self.base.elapsed().as_nanos() as u64 + 1, Ordering::Release);
        }
    }

    /// Latency of a delivery of `id` now from its publication, in ns.
    fn since_sent(&self, id: i64) -> u64 {
        let at = self
            .sent
            .get(id as usize)
            .map_or(0, |a| a.load(Ordering::Acquire));
        (self.base.elapsed().as_nanos() as u64).saturating_sub(at.saturating_sub(1))
    }

    fn confirmed(&self, id: i64) {
        if let Some(a) = self.at.get(id as usize) {
            a.store(self.base.elapsed().as_nanos() as u64 + 1, Ordering::Release);
        }
    }

    /// Latency of a delivery of `id` now, in ns (0 when it arrived before its confirm).
    fn latency(&self, id: i64) -> u64 {
        let at = self
            .at
            .get(id as usize)
            .map_or(0, |a| a.load(Ordering::Acquire));
        if at == 0 {
            return 0;
        }
        (self.base.elapsed().as_nanos() as u64).saturating_sub(at - 1)
    }
}

fn payload(id: i64) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.resize(PAYLOAD_LEN, b'x');
    p
}

fn id_of(data: &[u8]) -> i64 {
    data.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i64::from_le_bytes)
}

/// What one run measured.
#[derive(Default)]
struct RunResult {
    /// From the publisher's confirm to delivery.
    latencies: Latencies,
    /// From publishing to delivery.
    from_send: Latencies,
    /// Messages acked per second in the measured window.
    acked_rate: f64,
    published_rate: f64,
}

/// The workload of one run.
#[derive(Clone, Copy)]
enum Load {
    /// `rate` msg/s for `total` messages; latency measured from id `measure_from`.
    Steady {
        rate: f64,
        total: i64,
        measure_from: i64,
    },
    /// As fast as confirms come back, `per_confirm` messages per wait, for the window.
    Flat { per_confirm: usize },
}

pub async fn compare(ctx: &mut Ctx) -> Result<(), String> {
    let reps = ctx.opts.reps();
    let dur = ctx.opts.duration();
    let rate = ctx.opts.rate;
    let warm = warmup(dur);
    let total = ((warm + dur).as_secs_f64() * rate).ceil() as i64;
    let measure_from = (warm.as_secs_f64() * rate) as i64 + 1;
    let loads = [
        (
            "latency",
            Load::Steady {
                rate,
                total,
                measure_from,
            },
        ),
        ("single", Load::Flat { per_confirm: 1 }),
        (
            "multi",
            Load::Flat {
                per_confirm: ctx.opts.multi_rows,
            },
        ),
    ];
    let mut samples = Samples::default();
    let mut errors = Vec::new();
    for (name, load) in loads {
        for _ in 0..reps {
            for broker in ["rabbitmq", "nats"] {
                if errors.iter().any(|(b, _): &(&str, String)| *b == broker) {
                    continue;
                }
                let r = match broker {
                    "rabbitmq" => rabbit_run(ctx, load, dur).await,
                    _ => nats_run(ctx, load, dur).await,
                };
                match r {
                    Ok(mut r) => {
                        if name == "latency" {
                            samples.add(
                                broker,
                                "p50",
                                r.latencies.percentile_us(50.0).unwrap_or(f64::NAN) / 1000.0,
                            );
                            samples.add(
                                broker,
                                "p99",
                                r.latencies.percentile_us(99.0).unwrap_or(f64::NAN) / 1000.0,
                            );
                            samples.add(
                                broker,
                                "send_p50",
                                r.from_send.percentile_us(50.0).unwrap_or(f64::NAN) / 1000.0,
                            );
                            samples.add(
                                broker,
                                "send_p99",
                                r.from_send.percentile_us(99.0).unwrap_or(f64::NAN) / 1000.0,
                            );
                        } else {
                            samples.add(broker, name, r.acked_rate);
                            samples.add(broker, &format!("{name}-published"), r.published_rate);
                        }
                    }
                    Err(e) => {
                        eprintln!("   {broker}: {e}");
                        errors.push((broker, e));
                    }
                }
            }
        }
        eprintln!("   brokers, {name}: done");
    }

    let label = |b: &str| {
        if b == "rabbitmq" {
            "RabbitMQ"
        } else {
            "NATS JetStream"
        }
    };
    let ours = |k: &str| ctx.figures.get(k).copied();
    for broker in ["rabbitmq", "nats"] {
        if let Some((_, e)) = errors.iter().find(|(b, _)| *b == broker) {
            let mut row = Row::new(&format!("vs {}", label(broker)), "could not run");
            row.note = e.clone();
            ctx.rows.push(row);
            continue;
        }
        // Latency, from publishing / sending the INSERT: the same start on both sides (a
        // broker may deliver before its publisher has read the confirm).
        let mut row = Row::new(
            &format!(
                "vs {}: end-to-end latency at {rate:.0} msg/s",
                label(broker)
            ),
            "publish/INSERT sent → delivery, p50 / p99",
        );
        if let (Some(b50), Some(b99)) = (
            samples.get(broker, "send_p50"),
            samples.get(broker, "send_p99"),
        ) {
            row.baseline = format!(
                "{} {} / {}",
                label(broker),
                fmt_summary(&b50, Unit::Millis),
                fmt_summary(&b99, Unit::Millis)
            );
            if let (Some(o50), Some(o99)) = (
                ours("latency_proxy_send_p50"),
                ours("latency_proxy_send_p99"),
            ) {
                row.measured = format!(
                    "{} / {}",
                    fmt_summary(&o50, Unit::Millis),
                    fmt_summary(&o99, Unit::Millis)
                );
                row.relation = format!(
                    "{:.2}× / {:.2}× the broker's",
                    o50.median / b50.median,
                    o99.median / b99.median
                );
            } else {
                row.note = "run the latency scenario too for the ratio".into();
            }
        }
        if let (Some(c50), Some(c99)) = (samples.get(broker, "p50"), samples.get(broker, "p99")) {
            let sep = if row.note.is_empty() { "" } else { "; " };
            row.note = format!(
                "{}{sep}{} from its confirm: {} / {}",
                row.note,
                label(broker),
                fmt_summary(&c50, Unit::Millis),
                fmt_summary(&c99, Unit::Millis)
            );
        }
        ctx.rows.push(row);
        for (kind, key) in [
            ("single", "throughput_single"),
            ("multi", "throughput_multi"),
        ] {
            let what = if kind == "single" {
                "one message per confirm / single-row inserts".to_string()
            } else {
                format!(
                    "{} messages per confirm / {}-row inserts",
                    ctx.opts.multi_rows, ctx.opts.multi_rows
                )
            };
            let mut row = Row::new(
                &format!("vs {}: sustained throughput, {what}", label(broker)),
                "delivered+acked msg/s",
            );
            if let Some(b) = samples.get(broker, kind) {
                row.baseline = format!("{} {}", label(broker), fmt_summary(&b, Unit::PerSec));
                if let Some(o) = ours(key) {
                    row.measured = fmt_summary(&o, Unit::PerSec);
                    row.relation = format!("{:.3}×", o.median / b.median.max(1e-9));
                } else {
                    row.note = "run the throughput scenario too for the ratio".into();
                }
                if let Some(p) = samples.get(broker, &format!("{kind}-published")) {
                    let sep = if row.note.is_empty() { "" } else { "; " };
                    row.note = format!(
                        "{}{sep}{} published meanwhile {}",
                        row.note,
                        label(broker),
                        fmt_summary(&p, Unit::PerSec)
                    );
                }
            }
            ctx.rows.push(row);
        }
    }
    if errors.len() == 2 {
        return Err(format!(
            "neither broker could be used: {}",
            errors
                .iter()
                .map(|(b, e)| format!("{b}: {e}"))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Ok(())
}

/// Counters shared by the publishers and consumers of one run.
struct Counters {
    published: AtomicU64,
    acked: AtomicU64,
    next_id: AtomicI64,
}

impl Counters {
    fn new() -> Arc<Counters> {
        Arc::new(Counters {
            published: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            next_id: AtomicI64::new(1),
        })
    }
}

/// Waits out a steady load (publishers done, then up to 3 s for the rest to be acked) or a flat
/// one's window; returns (acked/s, published/s) over the measured window.
async fn measure(
    counters: &Counters,
    load: Load,
    dur: Duration,
    publishers: &mut JoinSet<Result<(), String>>,
) -> Result<(f64, f64), String> {
    match load {
        Load::Steady { total, .. } => {
            while let Some(r) = publishers.join_next().await {
                r.map_err(|e| format!("publisher task: {e}"))??;
            }
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && counters.acked.load(Ordering::Relaxed) < total as u64
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok((0.0, 0.0))
        }
        Load::Flat { .. } => {
            tokio::time::sleep(warmup(dur)).await;
            let (a0, p0) = (
                counters.acked.load(Ordering::Relaxed),
                counters.published.load(Ordering::Relaxed),
            );
            let t0 = Instant::now();
            tokio::time::sleep(dur).await;
            let secs = t0.elapsed().as_secs_f64();
            let r = (
                (counters.acked.load(Ordering::Relaxed) - a0) as f64 / secs,
                (counters.published.load(Ordering::Relaxed) - p0) as f64 / secs,
            );
            while let Some(j) = publishers.join_next().await {
                j.map_err(|e| format!("publisher task: {e}"))??;
            }
            Ok(r)
        }
    }
}

async fn rabbit_run(ctx: &Ctx, load: Load, dur: Duration) -> Result<RunResult, String> {
    use lapin::options::{
        BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
        ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
    };
    use lapin::types::FieldTable;
    use lapin::{BasicProperties, Connection, ConnectionProperties};

    let url = ctx.opts.rabbitmq.clone();
    let connect = || async {
        Connection::connect(&url, ConnectionProperties::default())
            .await
            .map_err(|e| format!("RabbitMQ at {url}: {e}"))
    };
    let admin = connect().await?;
    let queue = format!("msgproxy-bench-{}", std::process::id());
    let ch = admin
        .create_channel()
        .await
        .map_err(|e| format!("channel: {e}"))?;
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .map_err(|e| format!("queue_declare: {e}"))?;

    let counters = Counters::new();
    let confirms = match load {
        Load::Steady { total, .. } => Some(Arc::new(Confirms::new(total as usize + 1))),
        Load::Flat { .. } => None,
    };
    let measure_from = match load {
        Load::Steady { measure_from, .. } => measure_from,
        Load::Flat { .. } => i64::MAX,
    };
    // Consumers: one connection, a channel each (as separate processes would have).
    let consumer_conn = connect().await?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut consumers: JoinSet<Result<(Latencies, Latencies), String>> = JoinSet::new();
    for i in 0..ctx.opts.consumers {
        let ch = consumer_conn
            .create_channel()
            .await
            .map_err(|e| format!("channel: {e}"))?;
        ch.basic_qos(PREFETCH, BasicQosOptions::default())
            .await
            .map_err(|e| format!("basic_qos: {e}"))?;
        let mut consumer = ch
            .basic_consume(
                queue.as_str().into(),
                format!("bench-{i}").as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("basic_consume: {e}"))?;
        let counters = counters.clone();
        let confirms = confirms.clone();
        let stop = stop.clone();
        consumers.spawn(async move {
            let mut lat = Latencies::default();
            let mut sent = Latencies::default();
            let mut unacked = 0u64;
            let mut last_tag = 0;
            loop {
                // Ack what we hold when no delivery is waiting, or every ACK_EVERY deliveries.
                let next = if unacked > 0 {
                    match futures_util::FutureExt::now_or_never(consumer.next()) {
                        Some(d) => Some(d),
                        None => {
                            ch.basic_ack(last_tag, BasicAckOptions { multiple: true })
                                .await
                                .map_err(|e| format!("basic_ack: {e}"))?;
                            counters.acked.fetch_add(unacked, Ordering::Relaxed);
                            unacked = 0;
                            None
                        }
                    }
                } else {
                    None
                };
                let delivery = match next {
                    Some(d) => d,
                    None => tokio::select! {
                        _ = stop.notified() => break,
                        d = consumer.next() => d,
                    },
                };
                let Some(delivery) = delivery else { break };
                let delivery = delivery.map_err(|e| format!("delivery: {e}"))?;
                let id = id_of(&delivery.data);
                if let Some(c) = &confirms {
                    if id >= measure_from {
                        lat.0.push(c.latency(id));
                        sent.0.push(c.since_sent(id));
                    }
                }
                last_tag = delivery.delivery_tag;
                unacked += 1;
                if unacked >= ACK_EVERY {
                    ch.basic_ack(last_tag, BasicAckOptions { multiple: true })
                        .await
                        .map_err(|e| format!("basic_ack: {e}"))?;
                    counters.acked.fetch_add(unacked, Ordering::Relaxed);
                    unacked = 0;
                }
            }
            Ok((lat, sent))
        });
    }

    let publisher_conn = connect().await?;
    let npub = match load {
        Load::Steady { .. } => LATENCY_PUBLISHERS,
        Load::Flat { .. } => ctx.opts.producers,
    };
    let go = Instant::now();
    let end = go + warmup(dur) + dur;
    let mut publishers: JoinSet<Result<(), String>> = JoinSet::new();
    for k in 0..npub {
        let ch = publisher_conn
            .create_channel()
            .await
            .map_err(|e| format!("channel: {e}"))?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| format!("confirm_select: {e}"))?;
        let queue = queue.clone();
        let counters = counters.clone();
        let confirms = confirms.clone();
        publishers.spawn(async move {
            let props = BasicProperties::default().with_delivery_mode(2);
            let publish = |id: i64| {
                let ch = &ch;
                let queue = &queue;
                let props = props.clone();
                async move {
                    ch.basic_publish(
                        "".into(),
                        queue.as_str().into(),
                        BasicPublishOptions::default(),
                        &payload(id),
                        props,
                    )
                    .await
                    .map_err(|e| format!("basic_publish: {e}"))
                }
            };
            match load {
                Load::Steady { rate, total, .. } => {
                    let mut id = k as i64 + 1;
                    while id <= total {
                        let due = go + Duration::from_secs_f64((id - 1) as f64 / rate);
                        tokio::time::sleep_until(due.into()).await;
                        if let Some(c) = &confirms {
                            c.sent(id);
                        }
                        let confirm = publish(id).await?;
                        confirm.await.map_err(|e| format!("confirm: {e}"))?;
                        if let Some(c) = &confirms {
                            c.confirmed(id);
                        }
                        counters.published.fetch_add(1, Ordering::Relaxed);
                        id += LATENCY_PUBLISHERS as i64;
                    }
                }
                Load::Flat { per_confirm } => {
                    while Instant::now() < end {
                        let first = counters
                            .next_id
                            .fetch_add(per_confirm as i64, Ordering::Relaxed);
                        if per_confirm == 1 {
                            publish(first)
                                .await?
                                .await
                                .map_err(|e| format!("confirm: {e}"))?;
                        } else {
                            for id in first..first + per_confirm as i64 {
                                publish(id).await?;
                            }
                            ch.wait_for_confirms()
                                .await
                                .map_err(|e| format!("wait_for_confirms: {e}"))?;
                        }
                        counters
                            .published
                            .fetch_add(per_confirm as u64, Ordering::Relaxed);
                    }
                }
            }
            Ok(())
        });
    }
    let (acked_rate, published_rate) = measure(&counters, load, dur, &mut publishers).await?;
    let mut result = RunResult {
        acked_rate,
        published_rate,
        ..Default::default()
    };
    loop {
        stop.notify_waiters();
        tokio::select! {
            r = consumers.join_next() => match r {
                None => break,
                Some(r) => {
                    let (lat, sent) = r.map_err(|e| format!("consumer task: {e}"))??;
                    result.latencies.extend(lat);
                    result.from_send.extend(sent);
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    let _ = consumer_conn.close(200, "bench done".into()).await;
    let _ = publisher_conn.close(200, "bench done".into()).await;
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = admin.close(200, "bench done".into()).await;
    Ok(result)
}

async fn nats_run(ctx: &Ctx, load: Load, dur: Duration) -> Result<RunResult, String> {
    use async_nats::jetstream;
    use async_nats::jetstream::consumer::{pull, AckPolicy};
    use async_nats::jetstream::stream::{Config, RetentionPolicy, StorageType};

    let client = async_nats::connect(ctx.opts.nats.as_str())
        .await
        .map_err(|e| format!("NATS at {}: {e}", ctx.opts.nats))?;
    let js = jetstream::new(client);
    let name = format!("MSGPROXY_BENCH_{}", std::process::id());
    let subject = format!("msgproxy-bench.{}", std::process::id());
    let _ = js.delete_stream(&name).await;
    let stream = js
        .create_stream(Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            storage: StorageType::File,
            retention: RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("create stream: {e}"))?;
    let consumer: jetstream::consumer::Consumer<pull::Config> = stream
        .create_consumer(pull::Config {
            durable_name: Some("bench".into()),
            ack_policy: AckPolicy::Explicit,
            max_ack_pending: 100_000,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("create consumer: {e}"))?;

    let counters = Counters::new();
    let confirms = match load {
        Load::Steady { total, .. } => Some(Arc::new(Confirms::new(total as usize + 1))),
        Load::Flat { .. } => None,
    };
    let measure_from = match load {
        Load::Steady { measure_from, .. } => measure_from,
        Load::Flat { .. } => i64::MAX,
    };
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut consumers: JoinSet<Result<(Latencies, Latencies), String>> = JoinSet::new();
    for _ in 0..ctx.opts.consumers {
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| format!("consumer messages: {e}"))?;
        let counters = counters.clone();
        let confirms = confirms.clone();
        let stop = stop.clone();
        consumers.spawn(async move {
            let mut lat = Latencies::default();
            let mut sent = Latencies::default();
            loop {
                let m = tokio::select! {
                    _ = stop.notified() => break,
                    m = messages.next() => m,
                };
                let Some(m) = m else { break };
                let m = m.map_err(|e| format!("message: {e}"))?;
                let id = id_of(&m.payload);
                if let Some(c) = &confirms {
                    if id >= measure_from {
                        lat.0.push(c.latency(id));
                        sent.0.push(c.since_sent(id));
                    }
                }
                m.ack().await.map_err(|e| format!("ack: {e}"))?;
                counters.acked.fetch_add(1, Ordering::Relaxed);
            }
            Ok((lat, sent))
        });
    }

    let npub = match load {
        Load::Steady { .. } => LATENCY_PUBLISHERS,
        Load::Flat { .. } => ctx.opts.producers,
    };
    let go = Instant::now();
    let end = go + warmup(dur) + dur;
    let mut publishers: JoinSet<Result<(), String>> = JoinSet::new();
    for k in 0..npub {
        let js = js.clone();
        let subject = subject.clone();
        let counters = counters.clone();
        let confirms = confirms.clone();
        publishers.spawn(async move {
            let publish = |id: i64| {
                let js = &js;
                let subject = subject.clone();
                async move {
                    js.publish(subject, payload(id).into())
                        .await
                        .map_err(|e| format!("publish: {e}"))
                }
            };
            match load {
                Load::Steady { rate, total, .. } => {
                    let mut id = k as i64 + 1;
                    while id <= total {
                        let due = go + Duration::from_secs_f64((id - 1) as f64 / rate);
                        tokio::time::sleep_until(due.into()).await;
                        if let Some(c) = &confirms {
                            c.sent(id);
                        }
                        publish(id)
                            .await?
                            .await
                            .map_err(|e| format!("publish ack: {e}"))?;
                        if let Some(c) = &confirms {
                            c.confirmed(id);
                        }
                        counters.published.fetch_add(1, Ordering::Relaxed);
                        id += LATENCY_PUBLISHERS as i64;
                    }
                }
                Load::Flat { per_confirm } => {
                    while Instant::now() < end {
                        let first = counters
                            .next_id
                            .fetch_add(per_confirm as i64, Ordering::Relaxed);
                        let mut acks = Vec::with_capacity(per_confirm);
                        for id in first..first + per_confirm as i64 {
                            acks.push(publish(id).await?);
                        }
                        for a in acks {
                            a.await.map_err(|e| format!("publish ack: {e}"))?;
                        }
                        counters
                            .published
                            .fetch_add(per_confirm as u64, Ordering::Relaxed);
                    }
                }
            }
            Ok(())
        });
    }
    let (acked_rate, published_rate) = measure(&counters, load, dur, &mut publishers).await?;
    let mut result = RunResult {
        acked_rate,
        published_rate,
        ..Default::default()
    };
    loop {
        stop.notify_waiters();
        tokio::select! {
            r = consumers.join_next() => match r {
                None => break,
                Some(r) => {
                    let (lat, sent) = r.map_err(|e| format!("consumer task: {e}"))??;
                    result.latencies.extend(lat);
                    result.from_send.extend(sent);
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    let _ = js.delete_stream(&name).await;
    Ok(result)
}
