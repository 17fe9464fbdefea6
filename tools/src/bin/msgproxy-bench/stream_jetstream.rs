//! The streams scenario's loads on NATS JetStream, side by side in the same run (STREAMS.md §5):
//! a stream (limits retention: every consumer gets every message, like the binlog) on file
//! storage, with one or several **durable** pull consumers (a consumer group each), each read by
//! `--consumers` subscribers that share its messages (like a group's streams), explicit acks.
//! Publishers wait for the stream's publish ack, one message at a time (single-row inserts) or
//! `--multi-rows` at a time (multi-row inserts).
//!
//! Durability is not the same on both sides: msgproxy's figures come from a server that fsyncs
//! its binlog and redo log at every commit; JetStream acks a publish once the message is written
//! to its file store, which it fsyncs every `sync_interval` (2 minutes unless the server sets
//! `sync: always`). The table says so.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::task::JoinSet;

use crate::passthrough::warmup;
use crate::report::{fmt_summary, Latencies, Row, Samples, Unit};
use crate::Ctx;

const PAYLOAD_LEN: usize = 100;
/// Durable consumers of the fan-out run (as many as the msgproxy run's groups).
const FANOUT: usize = 4;

/// One repetition of the JetStream runs; figures go into `samples` as `js-*` variants. After a
/// failure (no NATS here) the later repetitions are skipped and the rows say why.
pub async fn repetition(
    ctx: &Ctx,
    samples: &mut Samples,
    notes: &mut BTreeMap<&'static str, String>,
) {
    if notes.contains_key("js-error") {
        return;
    }
    let dur = ctx.opts.duration();
    let multi = ctx.opts.multi_rows.max(1);
    let runs: [(&'static str, usize, usize, Option<f64>); 4] = [
        ("js-one", 1, 1, None),
        ("js-multi", 1, multi, None),
        ("js-fanout", FANOUT, 1, None),
        ("js-latency", 1, 1, Some(ctx.opts.rate)),
    ];
    for (variant, durables, per_ack, rate) in runs {
        match run(ctx, durables, per_ack, rate, dur).await {
            Ok(mut r) => {
                let slowest = r.acked.iter().copied().fold(f64::INFINITY, f64::min);
                samples.add(variant, "rate", slowest);
                samples.add(variant, "published", r.published);
                if rate.is_some() {
                    let ms = |l: &mut Latencies, p| l.percentile_us(p).unwrap_or(f64::NAN) / 1000.0;
                    samples.add(variant, "send_p50", ms(&mut r.from_send, 50.0));
                    samples.add(variant, "send_p99", ms(&mut r.from_send, 99.0));
                    samples.add(variant, "p50", ms(&mut r.from_ack, 50.0));
                    samples.add(variant, "p99", ms(&mut r.from_ack, 99.0));
                }
                notes.insert(variant, r.note);
            }
            Err(e) => {
                eprintln!("   NATS JetStream: {e}");
                notes.insert("js-error", e);
                return;
            }
        }
    }
}

/// The comparison rows: msgproxy's figures (from the streams scenario's `samples`) against
/// JetStream's.
pub fn rows(ctx: &mut Ctx, samples: &Samples, notes: &BTreeMap<&'static str, String>, who: &str) {
    let durability = "durability: msgproxy's server fsyncs binlog and redo log at every commit; JetStream file storage, fsync every sync_interval (2 min by default)";
    if let Some(e) = notes.get("js-error") {
        let mut row = Row::new(
            "event streams vs NATS JetStream (several durable consumers)",
            "could not run",
        );
        row.note = format!("NATS at {}: {e}", ctx.opts.nats);
        ctx.rows.push(row);
        return;
    }
    let multi = ctx.opts.multi_rows.max(1);
    let consumers = ctx.opts.consumers.max(1);
    for (ours, theirs, what) in [
        (
            "innodb",
            "js-one",
            format!("single-row inserts, one group / one message per publish ack, one durable consumer; {who}"),
        ),
        (
            "innodb-multi",
            "js-multi",
            format!("{multi}-row inserts / {multi} messages per wait for publish acks, one group / one durable consumer; {who}"),
        ),
        (
            "fanout",
            "js-fanout",
            format!("single-row inserts, {FANOUT} groups / {FANOUT} durable consumers (slowest); {who}"),
        ),
    ] {
        let mut row = Row::new(
            &format!("event streams vs NATS JetStream: {what}"),
            "delivered+acked events/s (slowest group / consumer)",
        );
        if let Some(b) = samples.get(theirs, "rate") {
            row.baseline = format!("JetStream {}", fmt_summary(&b, Unit::PerSec));
            if let Some(o) = samples.get(ours, "rate") {
                row.measured = fmt_summary(&o, Unit::PerSec);
                row.relation = format!("{:.3}×", o.median / b.median.max(1e-9));
            }
        }
        let published = samples
            .get(theirs, "published")
            .map(|p| format!("JetStream published meanwhile {}; ", fmt_summary(&p, Unit::PerSec)))
            .unwrap_or_default();
        row.note = format!(
            "{published}{consumers} subscribers a durable consumer; {}; {durability}",
            notes.get(theirs).cloned().unwrap_or_default()
        );
        ctx.rows.push(row);
    }
    let mut row = Row::new(
        &format!(
            "event streams vs NATS JetStream: latency at {:.0} events/s, one group / one durable consumer",
            ctx.opts.rate
        ),
        "INSERT sent / publish → stream row / delivery, p50 / p99",
    );
    if let (Some(b50), Some(b99)) = (
        samples.get("js-latency", "send_p50"),
        samples.get("js-latency", "send_p99"),
    ) {
        row.baseline = format!(
            "JetStream {} / {}",
            fmt_summary(&b50, Unit::Millis),
            fmt_summary(&b99, Unit::Millis)
        );
        if let (Some(o50), Some(o99)) = (
            samples.get("latency", "send_p50"),
            samples.get("latency", "send_p99"),
        ) {
            row.measured = format!(
                "{} / {}",
                fmt_summary(&o50, Unit::Millis),
                fmt_summary(&o99, Unit::Millis)
            );
            row.relation = format!(
                "{:.2}× / {:.2}× JetStream's",
                o50.median / b50.median.max(1e-9),
                o99.median / b99.median.max(1e-9)
            );
        }
    }
    let from_ack = match (
        samples.get("js-latency", "p50"),
        samples.get("js-latency", "p99"),
    ) {
        (Some(a), Some(b)) => format!(
            "JetStream from its publish ack: {} / {}; ",
            fmt_summary(&a, Unit::Millis),
            fmt_summary(&b, Unit::Millis)
        ),
        _ => String::new(),
    };
    row.note = format!("{from_ack}{durability}");
    ctx.rows.push(row);
}

/// What one JetStream run measured.
struct JsRun {
    /// Messages each durable consumer acked per second in the window.
    acked: Vec<f64>,
    published: f64,
    /// Publish → delivery, and publish ack → delivery (0 when delivered first), ns.
    from_send: Latencies,
    from_ack: Latencies,
    note: String,
}

/// When each message of a paced run was published and acked by the stream (ns since `base`,
/// +1; 0 = not yet), by id.
struct Times {
    base: Instant,
    measure_from: u64,
    sent: Vec<AtomicU64>,
    acked: Vec<AtomicU64>,
}

impl Times {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64 + 1
    }

    fn mark(slots: &[AtomicU64], id: u64, at: u64) {
        if let Some(s) = usize::try_from(id).ok().and_then(|i| slots.get(i)) {
            s.store(at, Ordering::Release);
        }
    }

    fn get(slots: &[AtomicU64], id: u64) -> u64 {
        usize::try_from(id)
            .ok()
            .and_then(|i| slots.get(i))
            .map_or(0, |s| s.load(Ordering::Acquire))
    }
}

fn payload(id: u64) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.resize(PAYLOAD_LEN, b'x');
    p
}

fn id_of(data: &[u8]) -> u64 {
    data.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// `durables` durable consumers on a fresh stream, `--producers` publishers for the warm-up and
/// the window (`per_ack` messages per wait for publish acks, or paced at `rate`); then waits
/// for every consumer to have acked every message, and checks it did.
async fn run(
    ctx: &Ctx,
    durables: usize,
    per_ack: usize,
    rate: Option<f64>,
    dur: Duration,
) -> Result<JsRun, String> {
    use async_nats::jetstream;
    use async_nats::jetstream::consumer::{pull, AckPolicy};
    use async_nats::jetstream::stream::{Config, StorageType};

    let client = async_nats::connect(ctx.opts.nats.as_str())
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let js = jetstream::new(client);
    let name = format!("MSGPROXY_BENCH_STREAMS_{}", std::process::id());
    let subject = format!("msgproxy-bench-streams.{}", std::process::id());
    let _ = js.delete_stream(&name).await;
    let stream = js
        .create_stream(Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            storage: StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("create stream: {e}"))?;
    let warm = warmup(dur);
    let per_ack = if rate.is_some() { 1 } else { per_ack.max(1) } as u64;
    let times = rate.map(|rate| {
        let n = ((warm + dur).as_secs_f64() * rate).ceil() as usize + ctx.opts.producers + 2;
        Arc::new(Times {
            base: Instant::now(),
            measure_from: 1 + (warm.as_secs_f64() * rate) as u64,
            sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
            acked: (0..n).map(|_| AtomicU64::new(0)).collect(),
        })
    });
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut acked: Vec<Arc<AtomicU64>> = Vec::new();
    let mut consumers: JoinSet<Result<(Latencies, Latencies), String>> = JoinSet::new();
    let max_unacked = ctx.opts.max_unacked.unwrap_or(1000);
    for d in 0..durables {
        let consumer: jetstream::consumer::Consumer<pull::Config> = stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("group{d}")),
                ack_policy: AckPolicy::Explicit,
                max_ack_pending: (max_unacked * ctx.opts.consumers.max(1)) as i64,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("create consumer: {e}"))?;
        let count = Arc::new(AtomicU64::new(0));
        acked.push(count.clone());
        for _ in 0..ctx.opts.consumers.max(1) {
            let mut messages = consumer
                .messages()
                .await
                .map_err(|e| format!("consumer messages: {e}"))?;
            let count = count.clone();
            let times = times.clone();
            let stop = stop.clone();
            consumers.spawn(async move {
                let mut from_send = Latencies::default();
                let mut from_ack = Latencies::default();
                loop {
                    let m = tokio::select! {
                        _ = stop.notified() => break,
                        m = messages.next() => m,
                    };
                    let Some(m) = m else { break };
                    let m = m.map_err(|e| format!("message: {e}"))?;
                    if let Some(t) = &times {
                        let id = id_of(&m.payload);
                        if id >= t.measure_from {
                            let now = t.now();
                            from_send
                                .0
                                .push(now.saturating_sub(Times::get(&t.sent, id)));
                            match Times::get(&t.acked, id) {
                                0 => from_ack.0.push(0),
                                at => from_ack.0.push(now.saturating_sub(at)),
                            }
                        }
                    }
                    m.ack().await.map_err(|e| format!("ack: {e}"))?;
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok((from_send, from_ack))
            });
        }
    }

    let next = Arc::new(AtomicU64::new(1));
    let published = Arc::new(AtomicU64::new(0));
    let go = Instant::now();
    let end = go + warm + dur;
    let mut publishers: JoinSet<Result<(), String>> = JoinSet::new();
    for _ in 0..ctx.opts.producers {
        let js = js.clone();
        let subject = subject.clone();
        let next = next.clone();
        let published = published.clone();
        let times = times.clone();
        publishers.spawn(async move {
            while Instant::now() < end {
                let first = next.fetch_add(per_ack, Ordering::Relaxed);
                if let Some(rate) = rate {
                    let due = go + Duration::from_secs_f64((first - 1) as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let mut acks = Vec::with_capacity(per_ack as usize);
                for id in first..first + per_ack {
                    if let Some(t) = &times {
                        Times::mark(&t.sent, id, t.now());
                    }
                    acks.push(
                        js.publish(subject.clone(), payload(id).into())
                            .await
                            .map_err(|e| format!("publish: {e}"))?,
                    );
                }
                for a in acks {
                    a.await.map_err(|e| format!("publish ack: {e}"))?;
                }
                if let Some(t) = &times {
                    Times::mark(&t.acked, first, t.now());
                }
                published.fetch_add(per_ack, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    tokio::time::sleep_until((go + warm).into()).await;
    let a0: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let p0 = published.load(Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep_until(end.into()).await;
    let secs = t0.elapsed().as_secs_f64();
    let a1: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let p1 = published.load(Ordering::Relaxed);
    while let Some(r) = publishers.join_next().await {
        r.map_err(|e| format!("publisher task: {e}"))??;
    }
    let total = published.load(Ordering::Relaxed);
    let patience = Instant::now() + Duration::from_secs(60);
    while acked.iter().any(|a| a.load(Ordering::Relaxed) < total) && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut from_send = Latencies::default();
    let mut from_ack = Latencies::default();
    loop {
        stop.notify_waiters();
        tokio::select! {
            r = consumers.join_next() => match r {
                None => break,
                Some(r) => {
                    let (s, a) = r.map_err(|e| format!("consumer task: {e}"))??;
                    from_send.extend(s);
                    from_ack.extend(a);
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    let _ = js.delete_stream(&name).await;
    let counts: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    if counts.iter().any(|&c| c < total) {
        return Err(format!(
            "of {total} messages published, the durable consumers acked {counts:?}"
        ));
    }
    Ok(JsRun {
        acked: a0
            .iter()
            .zip(&a1)
            .map(|(a, b)| (b - a) as f64 / secs)
            .collect(),
        published: (p1 - p0) as f64 / secs,
        from_send,
        from_ack,
        note: format!("checked: every durable consumer acked all {total} messages (at least)"),
    })
}
