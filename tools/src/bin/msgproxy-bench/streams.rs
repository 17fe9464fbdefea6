//! The event-stream scenario (docs/STREAMS.md §5), side by side in one run:
//!
//! - the server's own single-row insert rate into a plain InnoDB table, producers straight to it;
//! - delivered-and-acked events/s of one group (`STREAM * FROM t GROUP 'g'` consumers, `ACK t
//!   GROUP 'g' ...` in batches) with the same producers writing an InnoDB stream table, then a
//!   BLACKHOLE one, against that rate;
//! - four groups on the InnoDB table: each group's rate against one group's alone;
//! - COMMIT → stream row latency of one group at a steady `--rate` of single-row inserts.
//!
//! Every run checks its delivery before its figures count: each group must have received every
//! inserted row (by the producers' own ids) and acked every event, or the scenario fails.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::messaging::{insert, MAX_ACK_BATCH, PAYLOAD};
use crate::passthrough::{admin, exec, ratio_row_of, warmup};
use crate::report::{fmt_summary, fmt_value, CpuMeter, Latencies, Row, Samples, Unit};
use crate::servers::{cpu_seconds, memory_kib};
use crate::wire::{Conn, Target};
use crate::Ctx;

const PLAIN: &str = "bench_stream_plain";
const INNODB: &str = "bench_stream";
const BLACKHOLE: &str = "bench_stream_bh";
/// Groups of the fan-out run.
const FANOUT: usize = 4;

pub async fn streams(ctx: &mut Ctx) -> Result<(), String> {
    create_tables(ctx).await?;
    let dur = ctx.opts.duration();
    let producers = if ctx.opts.producers_direct {
        ctx.direct.clone()
    } else {
        ctx.proxied.clone()
    };
    let multi = ctx.opts.multi_rows.max(1);
    // Producer ids go on across runs: the stream tables are never emptied (msgproxy reads them
    // from the binlog; a TRUNCATE would be one more thing for its readers to meet).
    let mut next_id = 1u64;
    let mut samples = Samples::default();
    let mut notes: std::collections::BTreeMap<&'static str, String> = Default::default();
    let mut a = admin(ctx).await?;
    for rep in 0..ctx.opts.reps() {
        for (rows, base, variants) in [
            (1, "direct", [("innodb", INNODB), ("blackhole", BLACKHOLE)]),
            (
                multi,
                "direct-multi",
                [("innodb-multi", INNODB), ("blackhole-multi", BLACKHOLE)],
            ),
        ] {
            exec(&mut a, &format!("TRUNCATE TABLE `{PLAIN}`")).await?;
            let direct = ctx.direct.clone();
            let r = stream_run(ctx, PLAIN, &direct, 0, &mut next_id, dur, rows, None).await?;
            samples.add(base, "rate", r.inserted);
            notes.insert(base, r.note);
            for (variant, table) in variants {
                let r =
                    stream_run(ctx, table, &producers, 1, &mut next_id, dur, rows, None).await?;
                samples.add(variant, "rate", r.acked[0]);
                samples.add(variant, "inserted", r.inserted);
                notes.insert(variant, r.note);
            }
        }

        let r = stream_run(ctx, INNODB, &producers, FANOUT, &mut next_id, dur, 1, None).await?;
        let slowest = r.acked.iter().copied().fold(f64::INFINITY, f64::min);
        samples.add("fanout", "rate", slowest);
        samples.add("fanout", "inserted", r.inserted);
        notes.insert(
            "fanout",
            format!(
                "groups: {}; {}",
                r.acked
                    .iter()
                    .map(|g| format!("{g:.0}/s"))
                    .collect::<Vec<_>>()
                    .join(", "),
                r.note
            ),
        );

        let rate = ctx.opts.rate;
        let r = stream_run(ctx, INNODB, &producers, 1, &mut next_id, dur, 1, Some(rate)).await?;
        samples.add("latency", "rate", r.inserted);
        samples.add("latency", "p50", r.p50);
        samples.add("latency", "p99", r.p99);
        samples.add("latency", "send_p50", r.send_p50);
        samples.add("latency", "send_p99", r.send_p99);
        notes.insert("latency", r.note);

        #[cfg(feature = "brokers")]
        crate::stream_jetstream::repetition(ctx, &mut samples, &mut notes).await;
        eprintln!("   repetition {} done", rep + 1);
    }
    a.quit().await;
    let consumers = ctx.opts.consumers.max(1);
    let who = format!(
        "{} producers{}, {consumers} consumers a group",
        ctx.opts.producers,
        if ctx.opts.producers_direct {
            " straight to the server"
        } else {
            ""
        }
    );
    let metric = "delivered+acked events/s (server: inserted rows/s into a plain table)";
    let note = |k: &str| notes.get(k).cloned().unwrap_or_default();
    for (base, variant, what, target) in [
        (
            "direct",
            "innodb",
            "single-row inserts, InnoDB stream table, one group".to_string(),
            0.9,
        ),
        (
            "direct",
            "blackhole",
            "single-row inserts, BLACKHOLE stream table, one group".to_string(),
            1.0,
        ),
        (
            "direct-multi",
            "innodb-multi",
            format!("{multi}-row inserts, InnoDB stream table, one group"),
            0.9,
        ),
        (
            "direct-multi",
            "blackhole-multi",
            format!("{multi}-row inserts, BLACKHOLE stream table, one group"),
            1.0,
        ),
    ] {
        let mut row = ratio_row_of(
            &format!("event stream, {what}, {who}"),
            metric,
            &samples,
            (base, variant),
            "rate",
            Unit::PerSec,
            Some(target),
            "",
        );
        row.note = format!(
            "{}; server alone: {}",
            inserted_note(&samples, variant, &note(variant)),
            note(base)
        );
        ctx.rows.push(row);
    }
    let mut row = ratio_row_of(
        &format!("event stream, single-row inserts, InnoDB stream table, {FANOUT} groups, {who}"),
        "slowest group's delivered+acked events/s (baseline: one group alone)",
        &samples,
        ("innodb", "fanout"),
        "rate",
        Unit::PerSec,
        Some(0.9),
        "",
    );
    if let Some(one) = samples.get("innodb", "rate") {
        row.baseline = format!("one group {}", fmt_summary(&one, Unit::PerSec));
    }
    row.note = inserted_note(&samples, "fanout", &note("fanout"));
    ctx.rows.push(row);
    if let (Some(p50), Some(p99), Some(rate)) = (
        samples.get("latency", "p50"),
        samples.get("latency", "p99"),
        samples.get("latency", "rate"),
    ) {
        let mut row = Row::new(
            &format!(
                "event stream latency at {:.0} events/s, InnoDB stream table, one group, {who}",
                ctx.opts.rate
            ),
            "COMMIT → stream row, p50 / p99",
        );
        row.measured = format!(
            "{} / {}",
            fmt_summary(&p50, Unit::Millis),
            fmt_summary(&p99, Unit::Millis)
        );
        row.baseline = format!("achieved rate {}", fmt_summary(&rate, Unit::PerSec));
        row.target = "p50 ≤ 1 ms, p99 ≤ 5 ms".into();
        row.met = Some(p50.median <= 1.0 && p99.median <= 5.0);
        row.note = note("latency");
        ctx.rows.push(row);
    }
    drop_tables(ctx).await?;
    replay_rows(ctx).await?;
    #[cfg(feature = "brokers")]
    crate::stream_jetstream::rows(ctx, &samples, &notes, &who);
    #[cfg(not(feature = "brokers"))]
    {
        let mut row = Row::new(
            "event streams vs NATS JetStream (several durable consumers)",
            "not run",
        );
        row.note = "build with --features brokers".into();
        ctx.rows.push(row);
    }
    Ok(())
}

fn inserted_note(samples: &Samples, variant: &str, note: &str) -> String {
    match samples.get(variant, "inserted") {
        Some(s) => format!(
            "inserted meanwhile {}; {note}",
            fmt_summary(&s, Unit::PerSec)
        ),
        None => note.to_string(),
    }
}

/// The three tables: a plain one for the baseline, an InnoDB and a BLACKHOLE stream table, all
/// with the same columns (the producer's id first, so every delivered row can be checked off).
async fn create_tables(ctx: &Ctx) -> Result<(), String> {
    let o = &ctx.opts;
    let options = format!(
        "msgproxy_stream,batch_size={}{}",
        o.batch_size,
        o.max_unacked
            .map(|n| format!(",max_unacked={n}"))
            .unwrap_or_default()
    );
    // Debian's MariaDB ships BLACKHOLE as a plugin, not loaded by default: load it (an error when
    // it is already there, or when the bench's user may not; CREATE TABLE then says what is wrong).
    let mut a = admin(ctx).await?;
    let _ = a.query("INSTALL SONAME 'ha_blackhole'").await;
    a.quit().await;
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    // The BLACKHOLE table as the MMQ seed has it: no key (it stores nothing to look up).
    for (table, tail) in [
        (PLAIN, ", PRIMARY KEY(id)) ENGINE=InnoDB".to_string()),
        (
            INNODB,
            format!(", PRIMARY KEY(id)) ENGINE=InnoDB COMMENT '{options}'"),
        ),
        (BLACKHOLE, format!(") ENGINE=BLACKHOLE COMMENT '{options}'")),
    ] {
        exec(&mut c, &format!("DROP TABLE IF EXISTS `{table}`")).await?;
        exec(
            &mut c,
            &format!("CREATE TABLE `{table}` (id BIGINT NOT NULL, message VARCHAR(128){tail}"),
        )
        .await?;
    }
    c.quit().await;
    Ok(())
}

async fn drop_tables(ctx: &Ctx) -> Result<(), String> {
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    for table in [PLAIN, INNODB, BLACKHOLE] {
        exec(&mut c, &format!("DROP TABLE IF EXISTS `{table}`")).await?;
    }
    c.quit().await;
    Ok(())
}

/// `INSERT INTO table (id, message) VALUES (id, PAYLOAD), ...` for `ids`, into `sql`.
fn insert_sql(sql: &mut String, table: &str, ids: std::ops::Range<u64>) {
    sql.clear();
    let _ = write!(sql, "INSERT INTO `{table}` (id, message) VALUES ");
    for (k, id) in ids.enumerate() {
        if k > 0 {
            sql.push(',');
        }
        let _ = write!(sql, "({id},'{PAYLOAD}')");
    }
}

/// What one timed run measured, after the warm-up.
struct RunResult {
    /// Rows the producers inserted per second.
    inserted: f64,
    /// Events each group acked per second.
    acked: Vec<f64>,
    /// COMMIT → stream row of the paced run, in ms (NaN otherwise).
    p50: f64,
    p99: f64,
    /// Sending the INSERT → stream row, in ms (NaN when not paced).
    send_p50: f64,
    send_p99: f64,
    note: String,
}

/// A paced run's commit times: when each id's INSERT returned, in ns since `base` (+1; 0 = not
/// yet), for ids `first..first + len`.
struct CommitTimes {
    base: Instant,
    first: u64,
    /// Ids from this one on were due after the warm-up: their latencies count.
    measure_from: u64,
    at: Vec<AtomicU64>,
    /// When each id's INSERT was sent (same form as `at`).
    sent: Vec<AtomicU64>,
}

impl CommitTimes {
    fn slot(&self, id: u64) -> Option<&AtomicU64> {
        id.checked_sub(self.first)
            .and_then(|i| self.at.get(usize::try_from(i).ok()?))
    }

    fn sent_slot(&self, id: u64) -> Option<&AtomicU64> {
        id.checked_sub(self.first)
            .and_then(|i| self.sent.get(usize::try_from(i).ok()?))
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64 + 1
    }
}

/// Producers inserting single rows as fast as they can for `dur` into `table` (ids from
/// `next_id` on), with `groups` fresh consumer groups reading and acking; then waits for every
/// group to have received and acked every row, and checks it did.
#[allow(clippy::too_many_arguments)]
async fn stream_run(
    ctx: &Ctx,
    table: &str,
    producer_target: &Target,
    groups: usize,
    next_id: &mut u64,
    dur: Duration,
    rows: usize,
    rate: Option<f64>,
) -> Result<RunResult, String> {
    let first_id = *next_id;
    // A paced run inserts single rows (its latencies are per row).
    let rows = if rate.is_some() { 1 } else { rows.max(1) } as u64;
    let warm = warmup(dur);
    // With a rate: a steady load whose commit times are kept, for the latency.
    let times = rate.map(|rate| {
        let n = ((warm + dur).as_secs_f64() * rate).ceil() as usize + ctx.opts.producers + 1;
        Arc::new(CommitTimes {
            base: Instant::now(),
            first: first_id,
            measure_from: first_id + (warm.as_secs_f64() * rate) as u64,
            at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
        })
    });
    // A group name never used before: START LATEST, so it sees this run's rows and nothing else.
    let tag = format!("{:x}", crate::messaging::unix_ns());
    let mut consumer_groups = Vec::new();
    for g in 0..groups {
        consumer_groups.push(
            GroupConsumers::start(ctx, table, &format!("bench-{tag}-{g}"), "", times.clone())
                .await?,
        );
    }
    let ids = Arc::new(AtomicU64::new(first_id));
    let inserted = Arc::new(AtomicU64::new(0));
    let go = Instant::now();
    let measure_from = go + warm;
    let end = measure_from + dur;
    let mut producers = JoinSet::new();
    for _ in 0..ctx.opts.producers {
        let target = producer_target.clone();
        let ids = ids.clone();
        let inserted = inserted.clone();
        let table = table.to_string();
        let times = times.clone();
        producers.spawn(async move {
            let mut c = Conn::connect(&target)
                .await
                .map_err(|e| format!("connect a producer: {e}"))?;
            let mut sql = String::new();
            while Instant::now() < end {
                let id = ids.fetch_add(rows, Ordering::Relaxed);
                if let Some(rate) = rate {
                    let due = go + Duration::from_secs_f64((id - first_id) as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                insert_sql(&mut sql, &table, id..id + rows);
                if let Some(slot) = times.as_ref().and_then(|t| t.sent_slot(id)) {
                    slot.store(times.as_ref().map_or(0, |t| t.now()), Ordering::Release);
                }
                let out = insert(&mut c, &sql).await?;
                if let Some(t) = &times {
                    if let Some(slot) = t.slot(id) {
                        slot.store(t.now(), Ordering::Release);
                    }
                }
                inserted.fetch_add(out.affected_rows, Ordering::Relaxed);
            }
            c.quit().await;
            Ok::<_, String>(())
        });
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let meter = CpuMeter::start(&ctx.cpu_pids());
    let proxy_cpu0 = cpu_seconds(ctx.proxy.process.pid());
    let ins0 = inserted.load(Ordering::Relaxed);
    let ack0: Vec<u64> = consumer_groups.iter().map(GroupConsumers::acked).collect();
    tokio::time::sleep_until(end.into()).await;
    let ins1 = inserted.load(Ordering::Relaxed);
    let ack1: Vec<u64> = consumer_groups.iter().map(GroupConsumers::acked).collect();
    let cpu = meter.finish();
    let proxy_cpu = cpu_seconds(ctx.proxy.process.pid()) - proxy_cpu0;
    while let Some(r) = producers.join_next().await {
        r.map_err(|e| format!("producer task: {e}"))??;
    }
    let last = ids.load(Ordering::Relaxed);
    *next_id = last;
    let total = last - first_id;
    if inserted.load(Ordering::Relaxed) != total {
        return Err(format!(
            "{table}: the producers' INSERTs affected {} rows for {total} ids",
            inserted.load(Ordering::Relaxed)
        ));
    }
    // The figures are taken; now every group must catch up: all rows delivered and acked.
    let patience = Instant::now() + Duration::from_secs(60);
    while consumer_groups.iter().any(|g| g.acked() < total) && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut checks = Vec::new();
    let mut latencies = Latencies::default();
    let mut from_send = Latencies::default();
    for g in consumer_groups {
        let (check, l, s) = g.finish(ctx, table, first_id, last).await?;
        if !checks.contains(&check) {
            checks.push(check);
        }
        latencies.extend(l);
        from_send.extend(s);
    }
    let ms = |l: &mut Latencies, p| l.percentile_us(p).unwrap_or(f64::NAN) / 1000.0;
    let (p50, p99) = (ms(&mut latencies, 50.0), ms(&mut latencies, 99.0));
    let (send_p50, send_p99) = (ms(&mut from_send, 50.0), ms(&mut from_send, 99.0));
    let sent = if from_send.0.is_empty() {
        String::new()
    } else {
        format!("from sending the INSERT: {send_p50:.2} / {send_p99:.2} ms; ")
    };
    let secs = dur.as_secs_f64();
    // msgproxy's CPU for each event it delivered (to each group) in the window.
    let delivered: u64 = ack0.iter().zip(&ack1).map(|(a, b)| b - a).sum();
    let per_event = if groups > 0 && delivered > 0 {
        format!(
            "msgproxy {:.0} µs CPU an event delivered; ",
            proxy_cpu * 1e6 / delivered as f64
        )
    } else {
        String::new()
    };
    Ok(RunResult {
        inserted: (ins1 - ins0) as f64 / secs,
        acked: ack0
            .iter()
            .zip(&ack1)
            .map(|(a, b)| (b - a) as f64 / secs)
            .collect(),
        p50,
        p99,
        send_p50,
        send_p99,
        note: if groups == 0 {
            cpu
        } else {
            format!(
                "{sent}{per_event}{cpu}; checked: each group received and acked all {total} rows ({})",
                checks.join(", ")
            )
        },
    })
}

/// One consumer group: `--consumers` streams, each with its acker.
struct GroupConsumers {
    group: String,
    stop: watch::Sender<bool>,
    streams: JoinSet<Result<Seen, String>>,
    ackers: JoinSet<Result<(), String>>,
    acked: Arc<AtomicU64>,
}

/// What one stream received: the producers' ids, and events that came out of order.
#[derive(Default)]
struct Seen {
    ids: Vec<u64>,
    out_of_order: u64,
    /// COMMIT → arrival, ns, of a paced run's rows due after the warm-up.
    latencies: Latencies,
    /// Rows that arrived before their producer had read its COMMIT's OK (counted as 0).
    early: u64,
    /// Sending the INSERT → arrival, ns, of the same rows.
    from_send: Latencies,
}

impl GroupConsumers {
    /// Starts the group's streams; returns once every one has its result set open (so the group
    /// exists, positioned at the server's binlog end, before anything is produced).
    /// `start`: the STREAM's `START ...` clause, or "".
    async fn start(
        ctx: &Ctx,
        table: &str,
        group: &str,
        start: &str,
        times: Option<Arc<CommitTimes>>,
    ) -> Result<GroupConsumers, String> {
        let (stop, stop_rx) = watch::channel(false);
        let mut g = GroupConsumers {
            group: group.to_string(),
            stop,
            streams: JoinSet::new(),
            ackers: JoinSet::new(),
            acked: Arc::new(AtomicU64::new(0)),
        };
        let mut ready = Vec::new();
        for _ in 0..ctx.opts.consumers.max(1) {
            let (ids_tx, ids_rx) = mpsc::unbounded_channel();
            let (ready_tx, ready_rx) = oneshot::channel();
            ready.push(ready_rx);
            g.ackers.spawn(ack_loop(
                ctx.proxied.clone(),
                format!("ACK `{table}` GROUP '{group}' "),
                ids_rx,
                g.acked.clone(),
                ctx.ack_interval(),
            ));
            g.streams.spawn(consume(
                ctx.proxied.clone(),
                format!("STREAM * FROM `{table}` GROUP '{group}' {start}"),
                ids_tx,
                stop_rx.clone(),
                ready_tx,
                times.clone(),
            ));
        }
        for r in ready {
            match tokio::time::timeout(Duration::from_secs(30), r).await {
                Ok(Ok(())) => {}
                // The stream's task ended before it opened: its error says why.
                Ok(Err(_)) => {
                    return match g.streams.join_next().await {
                        Some(Ok(Err(e))) => Err(e),
                        _ => Err(format!("group '{group}': a stream ended before it opened")),
                    }
                }
                Err(_) => return Err(format!("group '{group}': a STREAM took over 30 s to open")),
            }
        }
        Ok(g)
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Stops the streams, lets the ackers finish, drops the group, and checks that it received
    /// every id in `first..last` and acked as many events. Returns a short account.
    async fn finish(
        mut self,
        ctx: &Ctx,
        table: &str,
        first: u64,
        last: u64,
    ) -> Result<(String, Latencies, Latencies), String> {
        let _ = self.stop.send(true);
        let mut ids = Vec::new();
        let mut out_of_order = 0;
        let mut early = 0;
        let mut latencies = Latencies::default();
        let mut from_send = Latencies::default();
        while let Some(r) = self.streams.join_next().await {
            let seen = r.map_err(|e| format!("stream task: {e}"))??;
            ids.extend(seen.ids);
            out_of_order += seen.out_of_order;
            early += seen.early;
            latencies.extend(seen.latencies);
            from_send.extend(seen.from_send);
        }
        while let Some(r) = self.ackers.join_next().await {
            r.map_err(|e| format!("acker task: {e}"))??;
        }
        let mut c = Conn::connect(&ctx.proxied)
            .await
            .map_err(|e| format!("connect to msgproxy: {e}"))?;
        exec(&mut c, &format!("DROP GROUP '{}' ON `{table}`", self.group)).await?;
        c.quit().await;
        let received = ids.len();
        ids.sort_unstable();
        ids.dedup();
        let duplicates = received - ids.len();
        let expected = (last - first) as usize;
        let in_range = ids.iter().filter(|&&id| id >= first && id < last).count();
        let acked = self.acked();
        if in_range != expected || ids.len() != in_range || acked != expected as u64 {
            return Err(format!(
                "group '{}' on {table}: of {expected} rows inserted, {in_range} delivered ({} ids not inserted, {duplicates} duplicates), {acked} acked",
                self.group,
                ids.len() - in_range
            ));
        }
        let early = if early > 0 {
            format!(", {early} before their producer saw its OK")
        } else {
            String::new()
        };
        Ok((
            format!("{duplicates} duplicates, {out_of_order} out of order{early}"),
            latencies,
            from_send,
        ))
    }
}

/// A stream of a group: reads rows until `stop`, keeps the producer's id of each and hands its
/// `event_id` to the acker.
async fn consume(
    target: Target,
    sql: String,
    acks: mpsc::UnboundedSender<u64>,
    mut stop: watch::Receiver<bool>,
    ready: oneshot::Sender<()>,
    times: Option<Arc<CommitTimes>>,
) -> Result<Seen, String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect a consumer: {e}"))?;
    c.start_stream(&sql)
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    let _ = ready.send(());
    let mut seen = Seen::default();
    let mut previous = 0;
    loop {
        let (event_id, id) = tokio::select! {
            _ = stop.changed() => break,
            r = c.next_stream_pair() => r.map_err(|e| format!("reading {sql}: {e}"))?,
        };
        if let Some(t) = &times {
            if id >= t.measure_from {
                let arrived = t.now();
                let sent = t.sent_slot(id).map_or(0, |s| s.load(Ordering::Acquire));
                seen.from_send.0.push(arrived.saturating_sub(sent));
                match t.slot(id).map_or(0, |s| s.load(Ordering::Acquire)) {
                    0 => {
                        seen.early += 1;
                        seen.latencies.0.push(0);
                    }
                    at => seen.latencies.0.push(arrived.saturating_sub(at)),
                }
            }
        }
        if event_id <= previous {
            seen.out_of_order += 1;
        }
        previous = event_id;
        seen.ids.push(id);
        if acks.send(event_id).is_err() {
            break;
        }
    }
    // Dropping the connection ends the stream.
    drop(c);
    Ok(seen)
}

/// Acks what its stream received, in batches of whatever arrived meanwhile (at most one ACK per
/// `interval`). `prefix` is `ACK t GROUP 'g' `.
async fn ack_loop(
    target: Target,
    prefix: String,
    mut ids: mpsc::UnboundedReceiver<u64>,
    acked: Arc<AtomicU64>,
    interval: Duration,
) -> Result<(), String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect an acker: {e}"))?;
    let mut sql = String::with_capacity(24 * MAX_ACK_BATCH);
    let mut previous = Instant::now();
    while let Some(first) = ids.recv().await {
        tokio::time::sleep_until((previous + interval).into()).await;
        previous = Instant::now();
        sql.clear();
        sql.push_str(&prefix);
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
        let out = exec(&mut c, &sql).await?;
        acked.fetch_add(out.affected_rows, Ordering::Relaxed);
    }
    c.quit().await;
    Ok(())
}

/// The replay table: created fresh for each replay, so `START EARLIEST` (which never reaches
/// back before the table's creation) yields exactly its rows.
const REPLAY: &str = "bench_stream_replay";

/// What one replay measured.
struct Replay {
    events: u64,
    /// Delivered+acked events/s, from the STREAM's result set opening to the last ACK.
    rate: f64,
    /// msgproxy's resident memory before the replay, and its peak (VmHWM) at the end, KiB.
    idle_kib: u64,
    peak_kib: u64,
    note: String,
}

/// STREAMS.md §5: replay from `START EARLIEST` of `--replay-events` events (and of a tenth of
/// them, each on a fresh msgproxy): the rate, and msgproxy's peak memory, which must not grow
/// with the number of events (a group far behind reads the binlog as it delivers).
async fn replay_rows(ctx: &mut Ctx) -> Result<(), String> {
    let big = ctx.opts.replay_events();
    let small = (big / 10).max(1);
    let s = replay(ctx, small).await?;
    let b = replay(ctx, big).await?;
    let mut row = Row::new(
        &format!(
            "event stream replay of {} events from START EARLIEST, InnoDB stream table, one group, {} consumers",
            b.events,
            ctx.opts.consumers.max(1)
        ),
        "delivered+acked events/s, from the STREAM statement to the last ACK",
    );
    row.measured = fmt_value(b.rate, Unit::PerSec);
    row.baseline = format!("{} events: {}", s.events, fmt_value(s.rate, Unit::PerSec));
    row.target = "reported".into();
    row.note = b.note.clone();
    ctx.rows.push(row);
    let mib = |k: u64| k as f64 / 1024.0;
    let mut row = Row::new(
        &format!(
            "event stream replay of {} events: msgproxy's memory",
            b.events
        ),
        "msgproxy peak memory (VmHWM), fresh process",
    );
    row.measured = fmt_value(mib(b.peak_kib), Unit::MiB);
    row.baseline = format!(
        "replaying {} events: {}",
        s.events,
        fmt_value(mib(s.peak_kib), Unit::MiB)
    );
    row.relation = format!("{:+.1} MiB", mib(b.peak_kib) - mib(s.peak_kib));
    row.target = "bounded: ≤ the smaller replay's peak × 1.2 + 4 MiB".into();
    row.met = Some(b.peak_kib as f64 <= s.peak_kib as f64 * 1.2 + 4096.0);
    row.note = format!(
        "resident before the replays: {} / {}",
        fmt_value(mib(s.idle_kib), Unit::MiB),
        fmt_value(mib(b.idle_kib), Unit::MiB)
    );
    ctx.rows.push(row);
    Ok(())
}

/// Fills a fresh stream table with `events` rows (1000-row INSERTs straight to the server),
/// restarts msgproxy (so its peak memory is the replay's), and has one new group read them all
/// from `START EARLIEST`.
async fn replay(ctx: &mut Ctx, events: u64) -> Result<Replay, String> {
    let o = &ctx.opts;
    let options = format!(
        "msgproxy_stream,batch_size={}{}",
        o.batch_size,
        o.max_unacked
            .map(|n| format!(",max_unacked={n}"))
            .unwrap_or_default()
    );
    let mut a = admin(ctx).await?;
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{REPLAY}`")).await?;
    exec(
        &mut a,
        &format!(
            "CREATE TABLE `{REPLAY}` (id BIGINT NOT NULL, message VARCHAR(128), PRIMARY KEY(id)) ENGINE=InnoDB COMMENT '{options}'"
        ),
    )
    .await?;
    let loaded = Instant::now();
    let next = Arc::new(AtomicU64::new(1));
    let mut loaders = JoinSet::new();
    for _ in 0..2 {
        let target = ctx.direct.clone();
        let next = next.clone();
        loaders.spawn(async move {
            let mut c = Conn::connect(&target)
                .await
                .map_err(|e| format!("connect a loader: {e}"))?;
            let mut sql = String::new();
            loop {
                let first = next.fetch_add(1000, Ordering::Relaxed);
                if first > events {
                    break;
                }
                insert_sql(&mut sql, REPLAY, first..(first + 1000).min(events + 1));
                insert(&mut c, &sql).await?;
            }
            c.quit().await;
            Ok::<_, String>(())
        });
    }
    while let Some(r) = loaders.join_next().await {
        r.map_err(|e| format!("loader task: {e}"))??;
    }
    let load_secs = loaded.elapsed().as_secs_f64();
    a.quit().await;
    ctx.restart_proxy("replay")?;
    let pid = ctx.proxy.process.pid();
    let idle_kib = memory_kib(pid).map_or(0, |m| m.1);
    let cpu0 = cpu_seconds(pid);
    let tag = format!("{:x}", crate::messaging::unix_ns());
    let group = format!("replay-{tag}");
    // From the STREAM on: finding where EARLIEST is (a read of the binlog up to the table's
    // creation) is part of a replay; events flow as soon as the result set opens.
    let t0 = Instant::now();
    let consumers = GroupConsumers::start(ctx, REPLAY, &group, "START EARLIEST", None).await?;
    let open_secs = t0.elapsed().as_secs_f64();
    // Generous: the replay's own rate is what is measured; a stuck group fails the scenario.
    let patience = t0 + Duration::from_secs(120 + events / 500);
    // Resident memory as the replay goes (at a quarter, half, ...): bounded memory levels off.
    let mut rss = Vec::new();
    while consumers.acked() < events && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if consumers.acked() * 4 >= events * (rss.len() as u64 + 1) {
            rss.push(memory_kib(pid).map_or(0, |m| m.1));
        }
    }
    let rss = rss
        .iter()
        .map(|k| format!("{:.1}", *k as f64 / 1024.0))
        .collect::<Vec<_>>()
        .join(" / ");
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let peak_kib = memory_kib(pid).map_or(0, |m| m.0);
    let (check, ..) = consumers.finish(ctx, REPLAY, 1, events + 1).await?;
    let mut a = admin(ctx).await?;
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{REPLAY}`")).await?;
    a.quit().await;
    eprintln!(
        "   replay of {events} events: {:.0}/s",
        events as f64 / secs
    );
    Ok(Replay {
        events,
        rate: events as f64 / secs,
        idle_kib,
        peak_kib,
        note: format!(
            "loaded in {load_secs:.1} s (1000-row INSERTs straight to the server); the STREAM opened in {open_secs:.2} s; msgproxy resident at 1/4, 1/2, 3/4, all acked: {rss} MiB; msgproxy {:.2} cores, {:.1} µs CPU an event; checked: the group received and acked all {events} rows ({check})",
            cpu / secs,
            cpu * 1e6 / events as f64
        ),
    })
}
