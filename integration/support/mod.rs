//! The integration-test harness: a throwaway MariaDB ([`MariaDb`]), the proxy binary ([`Proxy`]),
//! the comparison runner ([`compare`]), the `mariadb` CLI ([`cli`]), a raw protocol client
//! ([`raw`]) and a reader of the proxy's Prometheus endpoint ([`metrics`]).

#![allow(dead_code, unused_imports)] // not every test module uses every helper

pub mod browser;
pub mod cli;
pub mod compare;
pub mod mariadb;
pub mod metrics;
pub mod process;
pub mod proxy;
pub mod raw;

pub use cli::Cli;
pub use compare::{opts, same_both_ways, Failure, Outcome, Rec, Side, Target};
pub use mariadb::MariaDb;
pub use proxy::Proxy;

use std::future::Future;
use std::time::Duration;

/// The shared server plus a fresh proxy in front of it (no users configured: root, no password).
pub fn shared_setup() -> (&'static MariaDb, Proxy) {
    let server = MariaDb::shared();
    let proxy = Proxy::start(&server.backend_url(), &[], None);
    (server, proxy)
}

/// Fails the test (instead of hanging the suite) if `fut` takes longer than `secs`.
pub async fn within<T>(secs: u64, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {secs} s (hang)"),
    }
}

/// Waits until the proxy's log contains `needle`; panics with the log if it does not.
pub async fn wait_for_log(proxy: &Proxy, needle: &str, secs: u64) {
    let found = eventually(secs, async || proxy.log().contains(needle)).await;
    assert!(
        found,
        "the proxy did not log {needle:?} within {secs} s; its log:\n{}",
        process::tail(&proxy.log_path(), 6000)
    );
}

/// Polls `check` every 100 ms until it returns true or `secs` pass.
pub async fn eventually(secs: u64, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The log filter of a proxy whose polls a test waits for ([`polls`]).
pub const LOG_POLLS: (&str, &str) = ("MSGPROXY_LOG", "info,msgproxy::messaging::manager=debug");

/// How many polls of message table `table` (as `` `db`.`table` ``) the log of a proxy started
/// with [`LOG_POLLS`] shows: a test that must not race a stream's first poll (made as it
/// subscribes) waits until this grows.
pub fn polls(proxy: &Proxy, table: &str) -> usize {
    proxy
        .log()
        .lines()
        .filter(|l| l.contains("polled") && l.contains(table))
        .count()
}

/// Waits up to 20 s until `proxy` (started with [`LOG_POLLS`]) has polled `table` more than
/// `before` times.
pub async fn wait_for_polls(proxy: &Proxy, table: &str, before: usize) {
    let polled = eventually(20, async || polls(proxy, table) > before).await;
    assert!(
        polled,
        "no poll of {table} within 20 s:\n{}",
        process::tail(&proxy.log_path(), 6000)
    );
}

/// Waits up to 20 s until `server` runs a statement whose text is exactly `sql` (it is in
/// `information_schema.PROCESSLIST`), for tests that interrupt a running statement: it must
/// have started, not be about to. Panics if it never runs.
pub async fn wait_until_running(server: &MariaDb, sql: &str) {
    let text = sql.replace('\\', "\\\\").replace('\'', "''");
    let query =
        format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = '{text}'");
    let running = eventually(20, async || {
        direct_scalar::<i64>(server, &query).await.unwrap_or(0) > 0
    })
    .await;
    assert!(running, "`{sql}` did not start on the server within 20 s");
}

/// Waits up to 20 s until the server has no session `id` (the proxy has closed the backend
/// session of a client that left); whether it went.
pub async fn backend_session_gone(server: &MariaDb, id: u32) -> bool {
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
    eventually(20, async || {
        direct_scalar::<i64>(server, &sql).await == Some(0)
    })
    .await
}

/// A one-column query through a fresh direct connection (setup and inspection, not comparison).
pub async fn direct_scalar<T: mysql_async::prelude::FromValue + Send + 'static>(
    server: &MariaDb,
    sql: &str,
) -> Option<T> {
    use mysql_async::prelude::*;
    let mut conn = Target::direct(server, "test").conn().await;
    let value: Option<T> = conn
        .query_first(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.disconnect().await;
    value
}
