//! DDL: what a statement that changes no message table costs through msgproxy (issue 23,
//! target ≤ 1.1× the direct time), and what one that makes and drops a message table costs (the
//! proxy reads that table's definition before the OK).
//!
//! Each run is one connection doing a fixed number of statements one after the other, timed as a
//! whole: 20 `CREATE TEMPORARY TABLE` / `DROP TEMPORARY TABLE` pairs, 20 `ALTER TABLE` of a plain
//! table (a column added and dropped in turn), and 20 message tables created and dropped; and,
//! for scale, 40 `DO 0`: a temporary table is made and dropped in tens of microseconds, so the
//! pairs' ratio is mostly the hop any proxy adds to a round trip, which `DO 0` shows alone.

use std::time::Instant;

use crate::passthrough::{exec, ratio_row, target_of, VARIANTS};
use crate::report::{Samples, Unit};
use crate::wire::Conn;
use crate::Ctx;

/// A run's statements, for a count of statements (or pairs).
type Statements = fn(usize) -> Vec<String>;

/// Statements (or pairs) per run.
const COUNT: usize = 20;

/// The most the DDL of plain and temporary tables may take through msgproxy, as a multiple of
/// the direct time (a ratio of times: lower is better).
const MAX_RATIO: f64 = 1.1;

pub async fn ddl(ctx: &mut Ctx) -> Result<(), String> {
    let mut samples = Samples::default();
    // Even, so the ALTERs leave the table as they found it.
    let count = if ctx.opts.smoke { 4 } else { COUNT };
    {
        let mut c = Conn::connect(&ctx.direct)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        exec(&mut c, "DROP TABLE IF EXISTS ddl_plain").await?;
        exec(
            &mut c,
            "CREATE TABLE ddl_plain (id int primary key, v varchar(20))",
        )
        .await?;
        c.quit().await;
    }
    let runs: [(&str, Statements); 4] = [
        ("do", round_trips),
        ("temporary", temporary_pairs),
        ("alter", plain_alters),
        ("message", message_tables),
    ];
    // A first round unmeasured: the server's caches, the proxy's first reads.
    for measured in std::iter::once(false).chain(std::iter::repeat_n(true, ctx.opts.reps())) {
        for v in VARIANTS {
            for (key, statements) in runs {
                let ms = timed(target_of(ctx, v), &statements(count)).await?;
                if measured {
                    samples.add(v, key, ms);
                }
            }
        }
    }
    for (key, metric, target) in [
        (
            "do",
            format!("{} DO 0 (the round trips of the pairs, no DDL)", 2 * count),
            false,
        ),
        (
            "temporary",
            format!("{count} CREATE TEMPORARY TABLE + DROP pairs"),
            true,
        ),
        (
            "alter",
            format!("{count} ALTER TABLE of a plain table"),
            true,
        ),
        (
            "message",
            format!("{count} message tables created and dropped"),
            false,
        ),
    ] {
        let mut row = ratio_row(
            "DDL (one connection)",
            &metric,
            &samples,
            key,
            Unit::Millis,
            None,
            "",
        );
        if let (true, Some(d), Some(p)) = (
            target,
            samples.get("direct", key),
            samples.get("proxy", key),
        ) {
            row.target = format!("≤ {MAX_RATIO:.1}×");
            row.met = Some(d.median > 0.0 && p.median / d.median <= MAX_RATIO);
        }
        ctx.rows.push(row);
    }
    Ok(())
}

/// Runs `statements` on a fresh connection to `target`, one after the other; the time they took
/// in milliseconds (connecting not included).
async fn timed(target: &crate::wire::Target, statements: &[String]) -> Result<f64, String> {
    let mut c = Conn::connect(target)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let start = Instant::now();
    for sql in statements {
        exec(&mut c, sql).await?;
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    c.quit().await;
    Ok(ms)
}

/// As many round trips as the pairs take, of a statement that does nothing: what the hop through
/// msgproxy costs statements this short, DDL or not.
fn round_trips(count: usize) -> Vec<String> {
    vec!["DO 0".to_string(); 2 * count]
}

fn temporary_pairs(count: usize) -> Vec<String> {
    (0..count)
        .flat_map(|_| {
            [
                "CREATE TEMPORARY TABLE ddl_tmp (id int primary key, v varchar(20))".to_string(),
                "DROP TEMPORARY TABLE ddl_tmp".to_string(),
            ]
        })
        .collect()
}

fn plain_alters(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            if i % 2 == 0 {
                "ALTER TABLE ddl_plain ADD COLUMN extra int".to_string()
            } else {
                "ALTER TABLE ddl_plain DROP COLUMN extra".to_string()
            }
        })
        .collect()
}

fn message_tables(count: usize) -> Vec<String> {
    (0..count)
        .flat_map(|_| {
            [
                "CREATE TABLE ddl_msg (id bigint primary key, time_next bigint, epoch bigint, \
                 time_acked bigint, message varchar(20)) COMMENT 'vitess_message,vt_ack_wait=30'"
                    .to_string(),
                "DROP TABLE ddl_msg".to_string(),
            ]
        })
        .collect()
}
