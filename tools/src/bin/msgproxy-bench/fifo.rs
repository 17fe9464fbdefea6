//! The FIFO scenario (MESSAGING.md §11): a table with `vt_group_col`, `--backlog-rows` messages
//! over one key per 100 of them (1,000,000 over 10,000 by default), each key's messages together
//! in id order (the layout that makes a scan past non-heads slowest). Measures a fresh proxy's
//! time from STREAM to the first row, the drain rate (one message per key in flight), and the
//! poller's walk of the groups (one page, its SQL) at one message per key against the full
//! backlog over the same keys.

use std::time::{Duration, Instant};

use crate::backlog::drain_run;
use crate::messaging::{drop_table, wait_loaded};
use crate::passthrough::{admin, exec};
use crate::report::{fmt_value, Row, Summary, Unit};
use crate::wire::Conn;
use crate::Ctx;

const TABLE: &str = "bench_fifo";

pub async fn fifo(ctx: &mut Ctx) -> Result<(), String> {
    let n = ctx.opts.backlog_rows();
    let keys = (n / 100).max(1);
    create(ctx).await?;
    let mut a = admin(ctx).await?;
    // One message per key, then the full backlog over the same keys.
    load(&mut a, keys, 1).await?;
    let small_page = time_page(ctx, &mut a).await?;
    exec(&mut a, &format!("TRUNCATE TABLE `{TABLE}`")).await?;
    load(&mut a, n, n / keys).await?;
    let big_page = time_page(ctx, &mut a).await?;
    a.quit().await;
    let run = drain_run(ctx, TABLE, "fifo", n).await?;
    ctx.restart_proxy("main")?;

    let name = format!("FIFO: {n} messages over {keys} keys");
    let mut row = Row::new(&name, "STREAM → first row (fresh proxy)");
    row.measured = fmt_value(run.first_row.as_secs_f64() * 1000.0, Unit::Millis);
    row.target = "≤ 100 ms".into();
    row.met = Some(run.first_row <= Duration::from_millis(100));
    ctx.rows.push(row);

    let mut row = Row::new(&name, "drain rate, delivered+acked msg/s");
    row.measured = fmt_value(run.drain_rate, Unit::PerSec);
    row.note = format!(
        "{} consumers, one message per key in flight; {}",
        ctx.opts.consumers, run.cpu
    );
    ctx.rows.push(row);

    let mut row = Row::new(&name, "poller's walk, one page of 1,000 groups (its SQL)");
    row.baseline = format!("{keys} messages: {}", fmt_value(small_page, Unit::Millis));
    row.measured = fmt_value(big_page, Unit::Millis);
    let ratio = big_page / small_page.max(1e-3);
    row.relation = format!("{ratio:.2}×");
    row.target = "as fast as at one message per key (≤ 1.5× + 1 ms)".into();
    row.met = Some(big_page <= small_page * 1.5 + 1.0);
    if !run.polls.is_empty() {
        let max = run.polls.iter().copied().fold(0.0, f64::max);
        row.note = format!(
            "as msgproxy logged it during the drain: {} polls, max {}",
            run.polls.len(),
            fmt_value(max, Unit::Millis)
        );
    }
    ctx.rows.push(row);
    drop_table(ctx, TABLE).await
}

async fn create(ctx: &Ctx) -> Result<(), String> {
    let o = &ctx.opts;
    let mut c = Conn::connect(&ctx.proxied)
        .await
        .map_err(|e| format!("connect to msgproxy: {e}"))?;
    exec(&mut c, &format!("DROP TABLE IF EXISTS `{TABLE}`")).await?;
    exec(
        &mut c,
        &format!(
            "CREATE TABLE `{TABLE}` (id BIGINT NOT NULL, time_next BIGINT DEFAULT 0, epoch BIGINT, \
             time_acked BIGINT, k INT, message VARCHAR(128), PRIMARY KEY(id), \
             INDEX next_idx(time_next, epoch), INDEX ack_idx(time_acked), INDEX k_fifo(k, id)) \
             ENGINE=InnoDB COMMENT 'vitess_message,vt_ack_wait=30,vt_purge_after=3600,\
             vt_batch_size={},vt_cache_size={},vt_poller_interval={},vt_group_col=k'",
            o.batch_size, o.cache_size, o.poller_interval
        ),
    )
    .await?;
    wait_loaded(&mut c, TABLE).await?;
    c.quit().await;
    Ok(())
}

/// `rows` messages straight into the server, `per_key` of each key together in id order.
async fn load(c: &mut Conn, rows: u64, per_key: u64) -> Result<(), String> {
    const CHUNK: u64 = 100_000;
    let mut loaded = 0;
    while loaded < rows {
        let (from, to) = (loaded + 1, (loaded + CHUNK).min(rows));
        exec(
            c,
            &format!(
                "INSERT INTO `{TABLE}` (id, k, message) SELECT seq, (seq - 1) DIV {per_key}, \
                 CONCAT('fifo-', seq) FROM seq_{from}_to_{to}"
            ),
        )
        .await?;
        loaded = to;
    }
    exec(c, &format!("ANALYZE TABLE `{TABLE}`"))
        .await
        .map(|_| ())
}

/// The first page of the poller's walk of the groups (the SQL of `src/messaging/groups.rs`),
/// median of 5 runs, in ms.
async fn time_page(ctx: &Ctx, c: &mut Conn) -> Result<f64, String> {
    let t = format!("`{}`.`{TABLE}`", ctx.direct.db);
    let page = msgproxy::fifo_poller_page_sql(&t, "`k`", "`id`", "h.`id`", "0", false);
    let mut times = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        exec(c, &page).await?;
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(Summary::of(&times).map_or(0.0, |s| s.median))
}
