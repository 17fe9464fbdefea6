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
//!   `UPDATE ... SET epoch = epoch + 1, time_next = now + ack wait` of the rows it got with
//!   `COMMIT` in the same query — two round trips, as msgproxy's claim, and durable before the
//!   rows are handed on, as msgproxy's is (MESSAGING.md §5);
//! - ack, on a connection of its own: `UPDATE ... SET time_acked = now, time_next = NULL WHERE id
//!   IN (...) AND time_acked IS NULL` of whatever was claimed meanwhile, as msgproxy's `ACK` does;
//! - a claim that found nothing waits `--hand-poll-ms` before the next: a hand-written queue has
//!   no binlog to tell it when rows arrive, so it trades empty polls for latency;
//! - with `--purge-after 0` msgproxy's table has `vt_purge_after=0` (its `ACK` deletes, MESSAGING.md
//!   §13) and the hand queue acks with `DELETE ... WHERE id IN (...) AND time_acked IS NULL`, as an
//!   application that keeps no acked rows would.
//!
//! The claim sessions run at READ COMMITTED with `autocommit=0`, so the claim's index range takes
//! no gap locks that would hold up the producers' inserts: what a careful author would choose (the
//! ackers' `UPDATE`s by primary key take none at any level). The producers insert straight into the
//! server on both sides, so the ratio says what msgproxy's engine costs beyond the row work any
//! queue with this table layout and these guarantees has to do, not what its hop costs the
//! producers (the throughput scenario shows that). Which side runs first alternates between
//! repetitions, so neither always inherits the other's undo purge.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::messaging::{self, AckForm};
use crate::passthrough::{admin, exec};
use crate::report::{fmt_summary, Row, Samples, Unit};
use crate::throughput::{self, Consumption};
use crate::wire::{Conn, Error};
use crate::Ctx;

/// The hand queue's ack wait, as the bench's message tables' `vt_ack_wait` (30 s).
const ACK_WAIT_NS: i64 = 30_000_000_000;

/// Claims of the hand queue that were deadlock victims (or timed out waiting for a lock),
/// retried (its acks count among the ACK retries of `messaging`).
static HAND_RETRIES: AtomicU64 = AtomicU64::new(0);

pub async fn handqueue(ctx: &mut Ctx) -> Result<(), String> {
    // msgproxy's table, loaded through it; the hand queue's, the same layout but no message
    // table, so msgproxy (which follows the binlog) leaves it alone.
    let table = "bench_handqueue_msgproxy";
    let hand = "bench_handqueue";
    let purge_after = ctx.opts.purge_after.unwrap_or(messaging::PURGE_AFTER);
    messaging::create_message_table_purging(ctx, table, purge_after).await?;
    // With acks that delete on msgproxy's side, the hand queue deletes too.
    let hand_ack = if purge_after == 0.0 {
        AckForm::Delete
    } else {
        AckForm::Update
    };
    let mut a = admin(ctx).await?;
    exec(&mut a, &format!("DROP TABLE IF EXISTS `{hand}`")).await?;
    exec(&mut a, &format!("CREATE TABLE `{hand}` LIKE `{table}`")).await?;
    exec(&mut a, &format!("ALTER TABLE `{hand}` COMMENT ''")).await?;
    let dur = ctx.opts.duration();
    let consumers = ctx.opts.consumers.max(1);
    for rows_per_insert in [1, ctx.opts.multi_rows] {
        let mut samples = Samples::default();
        let (mut hand_note, mut proxy_note) = (String::new(), String::new());
        for rep in 0..ctx.opts.reps() {
            for by_hand in [rep % 2 == 0, rep % 2 == 1] {
                let (name, consumption, key) = if by_hand {
                    exec(&mut a, &format!("TRUNCATE TABLE `{hand}`")).await?;
                    (hand, Consumption::ByHand(consumers, hand_ack), "hand")
                } else {
                    messaging::truncate(ctx, table).await?;
                    (table, Consumption::Streams(consumers), "proxy")
                };
                let retries0 = messaging::retries();
                let hand0 = HAND_RETRIES.load(Ordering::Relaxed);
                let (inserted, acked, cpu) = throughput::throughput_run(
                    ctx,
                    name,
                    &ctx.direct.clone(),
                    rows_per_insert,
                    consumption,
                    dur,
                )
                .await?;
                samples.add(key, "rate", acked);
                samples.add(key, "inserted", inserted);
                let (inserts, acks) = messaging::retries();
                let note = format!(
                    "{} INSERT, {} ACK and {} claim deadlocks retried; {cpu}",
                    inserts - retries0.0,
                    acks - retries0.1,
                    HAND_RETRIES.load(Ordering::Relaxed) - hand0
                );
                if by_hand {
                    hand_note = note;
                } else {
                    proxy_note = note;
                }
            }
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
        let inserted = |key: &str| {
            samples
                .get(key, "inserted")
                .map_or("?".into(), |s| fmt_summary(&s, Unit::PerSec))
        };
        row.note = format!(
            "producers straight to the server on both sides; msgproxy's vt_purge_after={purge_after}, the hand queue acks by {}; by hand (empty claims wait {} ms): inserted meanwhile {}, {hand_note}; msgproxy: inserted meanwhile {}, {proxy_note}",
            if purge_after == 0.0 { "DELETE" } else { "UPDATE" },
            ctx.opts.hand_poll_ms,
            inserted("hand"),
            inserted("proxy")
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
    pub(crate) async fn start(ctx: &Ctx, table: &str, n: usize, ack: AckForm) -> HandConsumers {
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
            group.ackers.spawn(messaging::ack_loop(
                target.clone(),
                table.to_string(),
                ack,
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
    /// Everything is joined before an error is reported, an acker's first: a claim loop whose
    /// acker failed only ends early, and the acker's error says why.
    pub(crate) async fn finish(mut self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut claimed = Ok(0);
        while let Some(r) = self.claimers.join_next().await {
            match (
                r.map_err(|e| format!("hand claim task: {e}"))
                    .and_then(|r| r),
                &mut claimed,
            ) {
                (Ok(n), Ok(total)) => *total += n,
                (Err(e), Ok(_)) => claimed = Err(e),
                (_, Err(_)) => {}
            }
        }
        while let Some(r) = self.ackers.join_next().await {
            r.map_err(|e| format!("hand acker task: {e}"))??;
        }
        claimed
    }
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

/// Claims batches of due rows and hands their ids to the acker, until `stop` (or until the acker
/// has gone, whose own error [`HandConsumers::finish`] reports). Returns the rows claimed.
async fn claim_loop(
    target: crate::wire::Target,
    table: String,
    batch: usize,
    poll: Duration,
    acks: mpsc::UnboundedSender<i64>,
    stop: Arc<AtomicBool>,
) -> Result<u64, String> {
    // Several statements a query: the claim's UPDATE and COMMIT go out together.
    let mut c = Conn::connect_multi_statements(&target)
        .await
        .map_err(|e| format!("connect a hand consumer: {e}"))?;
    exec(
        &mut c,
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    )
    .await?;
    // The locking SELECT then opens the claim's transaction itself: no START TRANSACTION trip.
    exec(&mut c, "SET autocommit = 0").await?;
    let mut claimed = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = messaging::unix_ns();
        // FORCE INDEX as msgproxy's poller does (src/messaging/poll.rs): with acked rows at the
        // NULL end of next_idx the optimizer may prefer ack_idx and a sort.
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
        if rows.is_empty() {
            // Nothing locked (READ COMMITTED, nothing found): the open transaction holds nothing
            // and the next SELECT goes on in it.
            tokio::time::sleep(poll).await;
            continue;
        }
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            let id = r.first().cloned().flatten().unwrap_or_default();
            ids.push(
                id.parse::<i64>()
                    .map_err(|_| format!("hand claim: id {id:?} is not a bigint"))?,
            );
        }
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let update = format!(
            "UPDATE `{table}` SET epoch = COALESCE(epoch, 0) + 1, time_next = {} WHERE id IN ({list}); COMMIT",
            now + ACK_WAIT_NS
        );
        match c.query(&update).await {
            Ok(_) => {}
            Err(e) if is_lock_conflict(&e) => {
                // The COMMIT did not run; InnoDB rolled the victim back, the ROLLBACK ends it.
                HAND_RETRIES.fetch_add(1, Ordering::Relaxed);
                exec(&mut c, "ROLLBACK").await?;
                continue;
            }
            Err(e) => return Err(format!("hand claim UPDATE: {e}")),
        }
        claimed += ids.len() as u64;
        for id in ids {
            if acks.send(id).is_err() {
                return Ok(claimed);
            }
        }
    }
    c.quit().await;
    Ok(claimed)
}
