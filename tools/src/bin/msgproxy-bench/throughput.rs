//! The sustained messaging scenario: producers inserting as fast as they can (single rows, then
//! multi-row inserts), consumers acking in batches; delivered-and-acked messages/s against the
//! server's own insert rate with the same producers and no consumers. `throughput_run`, one timed
//! run with a choice of consumers, is also what `handqueue.rs` measures with.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::messaging::{
    self, create_message_table, create_message_table_purging, drop_table, insert, truncate,
    Consumers, PAYLOAD,
};
use crate::passthrough::{admin, exec, warmup};
use crate::report::{fmt_summary, CpuMeter, Row, Samples, Unit};
use crate::wire::{Conn, Target};
use crate::Ctx;

pub async fn throughput(ctx: &mut Ctx) -> Result<(), String> {
    let table = "bench_throughput";
    create_message_table(ctx, table).await?;
    // --purge-after: the same producers and consumers on a table with that vt_purge_after.
    let purging = "bench_throughput_purging";
    if let Some(secs) = ctx.opts.purge_after {
        create_message_table_purging(ctx, purging, secs).await?;
    }
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
        let mut variant_notes = std::collections::BTreeMap::new();
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
            let (retries0, acks0) = messaging::retries();
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
                messaging::retries().0 - retries0,
                messaging::retries().1 - acks0
            );
            // The variants, in the same repetition: the default just ran, so the server's
            // state (undo purge, buffer pool) is alike for both.
            if ctx.opts.purge_after.is_some() && !no_consumers {
                truncate(ctx, purging).await?;
                let (inserted, acked, cpu) = throughput_run(
                    ctx,
                    purging,
                    &producers,
                    rows_per_insert,
                    Consumption::Streams(ctx.opts.consumers),
                    dur,
                )
                .await?;
                samples.add("purging", "rate", acked);
                samples.add("purging", "inserted", inserted);
                variant_notes.insert("purging", cpu);
            }
            if ctx.opts.stream_where.is_some() && !no_consumers {
                truncate(ctx, table).await?;
                let (inserted, acked, cpu) = throughput_run(
                    ctx,
                    table,
                    &producers,
                    rows_per_insert,
                    Consumption::Filtered(ctx.opts.consumers),
                    dur,
                )
                .await?;
                samples.add("filtered", "rate", acked);
                samples.add("filtered", "inserted", inserted);
                variant_notes.insert("filtered", cpu);
            }
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
        let scenario = format!(
            "sustained messaging, {kind}, {} producers, {} consumers",
            ctx.opts.producers, ctx.opts.consumers
        );
        if let Some(secs) = ctx.opts.purge_after {
            ctx.rows.push(variant_row(
                &scenario,
                &format!(
                    "delivered+acked msg/s, vt_purge_after={secs} (against vt_purge_after={})",
                    messaging::PURGE_AFTER
                ),
                &samples,
                "purging",
                variant_notes.get("purging"),
            ));
        }
        if let Some(cond) = &ctx.opts.stream_where {
            ctx.rows.push(variant_row(
                &scenario,
                &format!("delivered+acked msg/s, streams WHERE {cond} (against plain streams)"),
                &samples,
                "filtered",
                variant_notes.get("filtered"),
            ));
        }
    }
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{plain}`")).await?;
    a.quit().await;
    if ctx.opts.purge_after.is_some() {
        drop_table(ctx, purging).await?;
    }
    drop_table(ctx, table).await
}

/// A variant's row: its rate against msgproxy's default run of the same repetitions.
fn variant_row(
    scenario: &str,
    metric: &str,
    samples: &Samples,
    variant: &str,
    cpu: Option<&String>,
) -> Row {
    let mut row = Row::new(scenario, metric);
    let (base, v) = (samples.get("proxy", "rate"), samples.get(variant, "rate"));
    if let Some(b) = &base {
        row.baseline = format!("default {}", fmt_summary(b, Unit::PerSec));
    }
    if let Some(v) = &v {
        row.measured = fmt_summary(v, Unit::PerSec);
    }
    if let (Some(b), Some(v)) = (base, v) {
        if b.median > 0.0 {
            row.relation = format!("{:.3}×", v.median / b.median);
        }
    }
    let inserted = samples
        .get(variant, "inserted")
        .map_or("?".into(), |s| fmt_summary(&s, Unit::PerSec));
    row.note = format!(
        "inserted meanwhile {inserted}; {}",
        cpu.map_or("", String::as_str)
    );
    row
}

/// Who takes the messages off the table in a sustained run.
#[derive(Clone, Copy)]
pub(crate) enum Consumption {
    /// Nobody: the producers' own rate.
    Nobody,
    /// This many `STREAM`s through msgproxy, each with its acker.
    Streams(usize),
    /// The same, filtered: `STREAM * FROM t WHERE <--stream-where>`.
    Filtered(usize),
    /// This many consumers of a queue written by hand in SQL, straight to the server
    /// (`handqueue.rs`), acking in this form.
    ByHand(usize, messaging::AckForm),
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
        Consumption::Nobody
        | Consumption::Streams(0)
        | Consumption::Filtered(0)
        | Consumption::ByHand(0, _) => None,
        Consumption::Streams(n) => Some(Group::Streams(
            Consumers::start(ctx.ack_interval(), &ctx.proxied, table, n, None, 0, None).await,
        )),
        Consumption::Filtered(n) => Some(Group::Streams(
            Consumers::start(
                ctx.ack_interval(),
                &ctx.proxied,
                table,
                n,
                None,
                0,
                ctx.opts.stream_where.as_deref(),
            )
            .await,
        )),
        Consumption::ByHand(n, ack) => Some(Group::ByHand(
            crate::handqueue::HandConsumers::start(ctx, table, n, ack).await,
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
    // is short of fsyncs rather than CPU, these say why (docs/benchmarks-history.md, fourth round).
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
