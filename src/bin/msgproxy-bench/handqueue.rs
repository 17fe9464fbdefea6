//! The `handqueue` scenario: msgproxy's queue against a queue written by hand in SQL on the same
//! server.
//!
//! The throughput scenario compares msgproxy with the server's own *insert* rate, a baseline that
//! does none of the work a queue must do. This one gives the server that work without msgproxy:
//! the same producers insert straight into a table of the same layout, and each consumer runs
//! the loop an application would write for itself with `SKIP LOCKED`:
//!
//! - claim, in one transaction: `SELECT id, message, epoch ... WHERE time_next <= now AND
//!   time_acked IS NULL ORDER BY time_next, epoch LIMIT batch FOR UPDATE SKIP LOCKED`, then
//!   `UPDATE ... SET epoch = epoch + 1, time_next = now + ack wait` of the rows it got, and
//!   `COMMIT` — durable before the rows are handed on, as msgproxy's claim is (MESSAGING.md §5);
//! - ack, on a connection of its own: `UPDATE ... SET time_acked = now, time_next = NULL WHERE id
//!   IN (...) AND time_acked IS NULL` of whatever was claimed meanwhile, as msgproxy's `ACK` does;
//! - a claim that found nothing waits `--hand-poll-ms` before the next: a hand-written queue has
//!   no binlog to tell it when rows arrive, so it trades empty polls for latency.
//!
//! The consumers' sessions run at READ COMMITTED (with `autocommit=0`, so a claim is three round
//! trips), so the claim's index range takes no gap locks that would hold up the producers' inserts:
//! what a careful author would choose. The ratio then says what msgproxy's engine costs beyond the
//! row work any queue with this table layout and these guarantees has to do.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::messaging::{self, Consumption};
use crate::passthrough::{admin, exec};
use crate::report::{fmt_summary, Row, Samples, Unit};
use crate::wire::{Conn, Error};
use crate::Ctx;

/// The hand queue's ack wait, as the bench's message tables' `vt_ack_wait` (30 s).
const ACK_WAIT_NS: i64 = 30_000_000_000;

/// Statements of the hand queue's consumers that were deadlock victims (or timed out waiting
/// for a lock), retried.
static HAND_RETRIES: AtomicU64 = AtomicU64::new(0);

pub async fn handqueue(ctx: &mut Ctx) -> Result<(), String> {
    // msgproxy's table, loaded through it; the hand queue's, the same layout but no message
    // table, so msgproxy (which follows the binlog) leaves it alone.
    let table = "bench_handqueue_msgproxy";
    let hand = "bench_handqueue";
    messaging::create_message_table(ctx, table).await?;
    let mut a = admin(ctx).await?;
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{hand}`")).await?;
    exec(&mut a, &format!("CREATE TABLE `{hand}` LIKE `{table}`")).await?;
    exec(&mut a, &format!("ALTER TABLE `{hand}` COMMENT ''")).await?;
    let dur = ctx.opts.duration();
    let consumers = ctx.opts.consumers.max(1);
    for rows_per_insert in [1, ctx.opts.multi_rows] {
        let mut samples = Samples::default();
        let (mut hand_note, mut proxy_note) = (String::new(), String::new());
        for _ in 0..ctx.opts.reps() {
            exec(&mut a, &format!("TRUNCATE TABLE `{hand}`")).await?;
            let retries0 = HAND_RETRIES.load(Ordering::Relaxed);
            let (_, acked, note) = messaging::throughput_run(
                ctx,
                hand,
                &ctx.direct.clone(),
                rows_per_insert,
                Consumption::ByHand(consumers),
                dur,
            )
            .await?;
            samples.add("hand", "rate", acked);
            hand_note = format!(
                "{} claim/ack deadlocks retried; {note}",
                HAND_RETRIES.load(Ordering::Relaxed) - retries0
            );
            messaging::truncate(ctx, table).await?;
            let producers = if ctx.opts.producers_direct {
                ctx.direct.clone()
            } else {
                ctx.proxied.clone()
            };
            let (_, acked, note) = messaging::throughput_run(
                ctx,
                table,
                &producers,
                rows_per_insert,
                Consumption::Streams(consumers),
                dur,
            )
            .await?;
            samples.add("proxy", "rate", acked);
            proxy_note = note;
        }
        let kind = if rows_per_insert == 1 {
            "single-row inserts".to_string()
        } else {
            format!("{rows_per_insert}-row inserts")
        };
        let mut row = Row::new(
            &format!(
                "vs a queue written by hand in SQL (SKIP LOCKED) on the same server, {kind}, {} producers, {consumers} consumers",
                ctx.opts.producers
            ),
            "delivered+acked msg/s",
        );
        let (h, p) = (samples.get("hand", "rate"), samples.get("proxy", "rate"));
        if let Some(h) = &h {
            row.baseline = format!("by hand {}", fmt_summary(h, Unit::PerSec));
        }
        if let Some(p) = &p {
            row.measured = fmt_summary(p, Unit::PerSec);
        }
        if let (Some(h), Some(p)) = (h, p) {
            if h.median > 0.0 {
                row.relation = format!("{:.3}×", p.median / h.median);
            }
        }
        row.note = format!(
            "by hand (producers straight to the server, empty claims wait {} ms): {hand_note}; msgproxy: {proxy_note}",
            ctx.opts.hand_poll_ms
        );
        ctx.rows.push(row);
    }
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{hand}`")).await?;
    a.quit().await;
    messaging::drop_table(ctx, table).await
}

/// The hand queue's consumers, each a claim loop and an acker, running until `finish()`.
pub(crate) struct HandConsumers {
    stop: Arc<AtomicBool>,
    claimers: JoinSet<Result<u64, String>>,
    ackers: JoinSet<Result<(), String>>,
    pub(crate) acked: Arc<AtomicU64>,
}

impl HandConsumers {
    pub(crate) async fn start(ctx: &Ctx, table: &str, n: usize) -> HandConsumers {
        let mut group = HandConsumers {
            stop: Arc::new(AtomicBool::new(false)),
            claimers: JoinSet::new(),
            ackers: JoinSet::new(),
            acked: Arc::new(AtomicU64::new(0)),
        };
        let poll = Duration::from_secs_f64(ctx.opts.hand_poll_ms.max(0.0) / 1000.0);
        for _ in 0..n {
            let (tx, rx) = mpsc::unbounded_channel();
            let target = ctx.direct.clone();
            group.ackers.spawn(ack_loop(
                target.clone(),
                table.to_string(),
                rx,
                group.acked.clone(),
                ctx.ack_interval(),
            ));
            group.claimers.spawn(claim_loop(
                target,
                table.to_string(),
                ctx.opts.batch_size.max(1),
                poll,
                tx,
                group.stop.clone(),
            ));
        }
        group
    }

    /// Stops the claim loops, lets the ackers ack what was claimed, and returns the rows claimed.
    pub(crate) async fn finish(mut self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut rows = 0;
        while let Some(r) = self.claimers.join_next().await {
            rows += r.map_err(|e| format!("hand claim task: {e}"))??;
        }
        while let Some(r) = self.ackers.join_next().await {
            r.map_err(|e| format!("hand acker task: {e}"))??;
        }
        Ok(rows)
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Is this a lock conflict an application retries (deadlock victim, lock wait timeout)?
fn is_lock_conflict(e: &Error) -> bool {
    matches!(
        e,
        Error::Server {
            code: 1213 | 1205,
            ..
        }
    )
}

/// Claims batches of due rows and hands their ids to the acker, until `stop`. Returns the rows
/// claimed.
async fn claim_loop(
    target: crate::wire::Target,
    table: String,
    batch: usize,
    poll: Duration,
    acks: mpsc::UnboundedSender<i64>,
    stop: Arc<AtomicBool>,
) -> Result<u64, String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect a hand consumer: {e}"))?;
    exec(
        &mut c,
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    )
    .await?;
    exec(&mut c, "SET autocommit = 0").await?;
    let mut claimed = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        let select = format!(
            "SELECT id, message, epoch FROM `{table}` FORCE INDEX (next_idx) WHERE time_next <= {now} AND time_acked IS NULL ORDER BY time_next, epoch LIMIT {batch} FOR UPDATE SKIP LOCKED"
        );
        let rows = match c.query_rows(&select).await {
            Ok(rows) => rows,
            Err(e) if is_lock_conflict(&e) => {
                HAND_RETRIES.fetch_add(1, Ordering::Relaxed);
                exec(&mut c, "ROLLBACK").await?;
                continue;
            }
            Err(e) => return Err(format!("hand claim SELECT: {e}")),
        };
        let ids: Vec<i64> = rows
            .iter()
            .filter_map(|r| r.first().cloned().flatten()?.parse().ok())
            .collect();
        if ids.is_empty() {
            exec(&mut c, "COMMIT").await?;
            tokio::time::sleep(poll).await;
            continue;
        }
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let update = format!(
            "UPDATE `{table}` SET epoch = COALESCE(epoch, 0) + 1, time_next = {} WHERE id IN ({list})",
            now + ACK_WAIT_NS
        );
        match c.query(&update).await {
            Ok(_) => {}
            Err(e) if is_lock_conflict(&e) => {
                HAND_RETRIES.fetch_add(1, Ordering::Relaxed);
                exec(&mut c, "ROLLBACK").await?;
                continue;
            }
            Err(e) => return Err(format!("hand claim UPDATE: {e}")),
        }
        exec(&mut c, "COMMIT").await?;
        claimed += ids.len() as u64;
        for id in ids {
            if acks.send(id).is_err() {
                return Err("the hand acker ended early".into());
            }
        }
    }
    c.quit().await;
    Ok(claimed)
}

/// Acks what its claim loop claimed, in batches of whatever has arrived meanwhile (at most one
/// statement per `interval`), as the STREAM consumers' ackers do.
async fn ack_loop(
    target: crate::wire::Target,
    table: String,
    mut ids: mpsc::UnboundedReceiver<i64>,
    acked: Arc<AtomicU64>,
    interval: Duration,
) -> Result<(), String> {
    let mut c = Conn::connect(&target)
        .await
        .map_err(|e| format!("connect a hand acker: {e}"))?;
    let mut previous = std::time::Instant::now();
    let mut batch = Vec::new();
    while let Some(first) = ids.recv().await {
        tokio::time::sleep_until((previous + interval).into()).await;
        previous = std::time::Instant::now();
        batch.clear();
        batch.push(first.to_string());
        while batch.len() < messaging::MAX_ACK_BATCH {
            match ids.try_recv() {
                Ok(id) => batch.push(id.to_string()),
                Err(_) => break,
            }
        }
        let sql = format!(
            "UPDATE `{table}` SET time_acked = {}, time_next = NULL WHERE id IN ({}) AND time_acked IS NULL",
            now_ns(),
            batch.join(",")
        );
        let out = loop {
            match c.query(&sql).await {
                Ok(out) => break out,
                Err(e) if is_lock_conflict(&e) => {
                    HAND_RETRIES.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(format!("hand ack: {e}")),
            }
        };
        acked.fetch_add(out.affected_rows, Ordering::Relaxed);
    }
    c.quit().await;
    Ok(())
}
