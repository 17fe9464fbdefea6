//! Event streams end to end (docs/STREAMS.md): `STREAM ... GROUP`, `ACK ... GROUP`, `SEEK`,
//! `DROP GROUP`, `SHOW STREAM GROUPS` on the shared MariaDB (row binlog, GTIDs), each test with
//! a database and a proxy of its own. Rows are written straight to the server unless a test
//! says otherwise: events come from the binlog, whoever wrote them.
//!
//!     cargo test --test integration streams:: -- --test-threads=8
//!
//! - `delivery` — fan-out across groups, competing streams within one, rollbacks, BLACKHOLE
//!   tables and filters, redelivery after `ack_wait`, a 100,000-row transaction;
//! - `durability` — a proxy killed and restarted resumes with nothing skipped, two proxies with
//!   one killed, `START EARLIEST` / `AT TIMESTAMP` / `SEEK` replay, `DROP GROUP`;
//! - `acks_elsewhere` — `ACK` and `SEEK` through a proxy that does not serve the group:
//!   answered by the serving one, or queued (with a warning) for the proxy that takes it over;
//! - `errors` — malformed statements, hostile group names and filters, tables that are not
//!   stream tables, a group's filter changed.
//! - `readme` — the README's example, pasted into the `mariadb` client;
//! - `upgrade` — a groups table of the previous version gets the new columns, its groups go on.

mod acks_elsewhere;
mod delivery;
mod durability;
mod errors;
mod readme;
mod upgrade;

use std::time::Duration;

use crate::messaging::harness::{exec, Env, Msg, Stream};

/// The contract's example table (STREAMS.md §1), with `options` after `msgproxy_stream`.
pub fn orders_events(options: &str) -> String {
    format!(
        "CREATE TABLE orders_events (\
           id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255) NOT NULL, payload JSON NOT NULL, \
           created_at DATETIME(6) DEFAULT NOW(6)\
         ) DEFAULT CHARSET=utf8mb4 COMMENT 'msgproxy_stream{options}'"
    )
}

/// `STREAM <what>` through the env's proxy (`what` follows `STREAM `).
pub async fn stream(env: &Env, what: &str) -> Stream {
    stream_on(env, env.proxy.port(), what).await
}

pub async fn stream_on(env: &Env, port: u16, what: &str) -> Stream {
    let sql = format!("STREAM {what}");
    match Stream::open(port, &env.db, &sql).await {
        Ok(s) => s,
        Err(e) => panic!("{sql}: {e:?}\n--- proxy log ---\n{}", env.log()),
    }
}

/// `n` rows inserted straight into `orders_events`, `per_tx` per transaction, topics `t0`..;
/// returns their `id`s in commit order.
pub async fn insert_direct(env: &Env, n: usize, per_tx: usize, topic: &str) -> Vec<i64> {
    let mut c = env.direct_conn().await;
    let mut ids = Vec::new();
    let mut left = n;
    while left > 0 {
        let k = left.min(per_tx);
        let values: Vec<String> = (0..k)
            .map(|i| format!("('{topic}', JSON_OBJECT('i', {i}))"))
            .collect();
        exec(&mut c, "BEGIN").await.expect("begin");
        exec(
            &mut c,
            &format!(
                "INSERT INTO orders_events (topic, payload) VALUES {}",
                values.join(", ")
            ),
        )
        .await
        .expect("insert");
        let first: u64 =
            mysql_async::prelude::Queryable::query_first(&mut c, "SELECT LAST_INSERT_ID()")
                .await
                .expect("last id")
                .expect("a row");
        exec(&mut c, "COMMIT").await.expect("commit");
        ids.extend((0..k as i64).map(|i| first as i64 + i));
        left -= k;
    }
    let _ = c.disconnect().await;
    ids
}

/// The table's `id` column of each delivered event (the second column, after `event_id`).
pub fn row_ids(msgs: &[Msg]) -> Vec<i64> {
    msgs.iter()
        .map(|m| crate::messaging::harness::value_i64(&m.values[1]))
        .collect()
}

/// `ACK t GROUP 'g' ids` on `conn`; the affected rows.
pub async fn ack(conn: &mut mysql_async::Conn, table: &str, group: &str, ids: &[i64]) -> u64 {
    let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let sql = format!("ACK {table} GROUP '{group}' {}", list.join(", "));
    exec(conn, &sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
