//! The warm connection pool (`--pool-size`, docs/POOL.md): a client served by a connection another
//! client left sees nothing of that client's session, and a session left in a state the reset is
//! not known to undo is never served again.

use mysql_async::prelude::*;
use mysql_async::{Conn, Row};

use crate::support::compare::fresh_database;
use crate::support::metrics::{sample, scrape};
use crate::support::process::free_port;
use crate::support::{direct_scalar, eventually, MariaDb, Proxy, Target};

/// A proxy with a pool of 4 and its metrics port.
fn pooled_proxy(server: &MariaDb) -> (Proxy, u16) {
    let mport = free_port();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = Proxy::start(
        &server.backend_url(),
        &["--pool-size", "4", "--metrics-listen", &listen],
        None,
    );
    (proxy, mport)
}

async fn pool_counter(mport: u16, name: &str) -> f64 {
    sample(&scrape(mport).await, name, &[]).unwrap_or(0.0)
}

/// Waits until the pool has reset and kept `n` connections in all.
async fn wait_for_resets(mport: u16, n: f64) {
    let kept = eventually(20, async || {
        pool_counter(mport, "msgproxy_pool_resets_total").await >= n
    })
    .await;
    assert!(
        kept,
        "the pool did not reset and keep {n} connection(s) within 20 s"
    );
}

/// Everything a session can observe of its own state that a client could leave behind, read the
/// same way on a fresh direct connection and on a pooled one.
const SESSION_STATE: &str = "SELECT @leak, @@sql_mode, @@wait_timeout, @@autocommit, DATABASE(), \
     IS_USED_LOCK('pool_leak'), @@character_set_client, @@collation_connection, @@time_zone, \
     LAST_INSERT_ID(), @@tx_isolation, @@max_statement_time, @@in_transaction, CURRENT_ROLE(), \
     (SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS \
      WHERE VARIABLE_NAME = 'Com_create_table')";

async fn session_state(conn: &mut Conn) -> Vec<String> {
    let row: Row = conn
        .query_first(SESSION_STATE)
        .await
        .expect("session state")
        .expect("a row");
    row.unwrap().iter().map(|v| format!("{v:?}")).collect()
}

async fn connection_id(conn: &mut Conn) -> u32 {
    conn.query_first("SELECT CONNECTION_ID()")
        .await
        .expect("CONNECTION_ID()")
        .expect("a row")
}

#[tokio::test]
async fn nothing_of_a_previous_client_leaks_to_the_next() {
    let server = MariaDb::shared();
    fresh_database(server, "pool_leak").await;
    fresh_database(server, "pool_other").await;
    let (proxy, mport) = pooled_proxy(server);
    let through = Target::proxy(&proxy, "pool_leak");
    let mut direct = Target::direct(server, "pool_leak").conn().await;
    let fresh_state = session_state(&mut direct).await;
    let _ = direct.disconnect().await;

    let mut first = through.conn().await;
    let first_id = connection_id(&mut first).await;
    assert_eq!(first.id(), first_id, "handshake id vs CONNECTION_ID()");
    first
        .query_drop(
            "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT); \
             INSERT INTO t (v) VALUES (1); \
             SET @leak = 42; SET SESSION sql_mode = 'ANSI'; SET SESSION wait_timeout = 77; \
             SET NAMES latin1; SET time_zone = '+03:00'; SET max_statement_time = 5; \
             SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE; \
             CREATE TEMPORARY TABLE leak_tmp (a INT); SELECT GET_LOCK('pool_leak', 0); \
             USE pool_other",
        )
        .await
        .expect("leave state behind");
    assert_ne!(
        session_state(&mut first).await,
        fresh_state,
        "state was set"
    );
    // Last: with autocommit off, any read would open a transaction (which is never pooled).
    first
        .query_drop("SET autocommit = 0")
        .await
        .expect("autocommit");
    first.disconnect().await.expect("quit");
    wait_for_resets(mport, 1.0).await;

    let mut second = through.conn().await;
    let second_id = connection_id(&mut second).await;
    // The same backend connection (the proof this ran through the pool), and the handshake says so.
    assert_eq!(
        second_id, first_id,
        "the second client was not served from the pool"
    );
    assert_eq!(second.id(), second_id, "handshake id vs CONNECTION_ID()");
    assert_eq!(session_state(&mut second).await, fresh_state);
    // The first client's table is there (it was committed); its temporary table is not.
    let n: Option<i64> = second
        .query_first("SELECT COUNT(*) FROM t")
        .await
        .expect("t");
    assert_eq!(n, Some(1));
    let missing = second.query_drop("SELECT * FROM leak_tmp").await;
    assert!(
        missing.is_err(),
        "the temporary table survived: {missing:?}"
    );
    second.disconnect().await.expect("quit");
    assert!(pool_counter(mport, "msgproxy_pool_hits_total").await >= 1.0);
}

#[tokio::test]
async fn database_at_login_is_the_clients_not_the_pooled_connections() {
    let server = MariaDb::shared();
    fresh_database(server, "pool_db_a").await;
    let (proxy, mport) = pooled_proxy(server);
    let mut first = Target::proxy(&proxy, "pool_db_a").conn().await;
    let id = connection_id(&mut first).await;
    first.disconnect().await.expect("quit");
    wait_for_resets(mport, 1.0).await;

    // No database: served by the same connection, in no database (COM_CHANGE_USER).
    let opts = crate::support::opts(proxy.port(), "root", None, None);
    let mut none = Target::proxy(&proxy, "").conn_with(opts).await;
    assert_eq!(connection_id(&mut none).await, id);
    let db: Option<Option<String>> = none.query_first("SELECT DATABASE()").await.expect("db");
    assert_eq!(db, Some(None));
    none.disconnect().await.expect("quit");
    wait_for_resets(mport, 2.0).await;

    // A database that does not exist: refused as a direct login is, and the connection stays warm.
    let direct_err = mysql_async::Conn::new(Target::direct(server, "pool_no_such_db").opts())
        .await
        .err()
        .map(|e| crate::support::Failure::of(&e));
    let through_err = mysql_async::Conn::new(Target::proxy(&proxy, "pool_no_such_db").opts())
        .await
        .err()
        .map(|e| crate::support::Failure::of(&e));
    assert!(direct_err.is_some(), "the direct login should fail");
    assert_eq!(through_err, direct_err);

    let mut named = Target::proxy(&proxy, "pool_db_a").conn().await;
    assert_eq!(connection_id(&mut named).await, id);
    let db: Option<String> = named.query_first("SELECT DATABASE()").await.expect("db");
    assert_eq!(db.as_deref(), Some("pool_db_a"));
    named.disconnect().await.expect("quit");
}

#[tokio::test]
async fn a_session_left_in_a_transaction_is_closed_not_reused() {
    let server = MariaDb::shared();
    fresh_database(server, "pool_txn").await;
    let (proxy, mport) = pooled_proxy(server);
    let through = Target::proxy(&proxy, "pool_txn");
    let mut setup = through.conn().await;
    setup
        .query_drop("CREATE TABLE t (v INT) ENGINE=InnoDB")
        .await
        .expect("create");
    setup.disconnect().await.expect("quit");
    wait_for_resets(mport, 1.0).await;

    let mut open = through.conn().await;
    let open_id = connection_id(&mut open).await;
    open.query_drop("BEGIN").await.expect("begin");
    open.query_drop("INSERT INTO t VALUES (1)")
        .await
        .expect("insert");
    let discards = pool_counter(mport, "msgproxy_pool_discards_total").await;
    open.disconnect().await.expect("quit");
    let closed = eventually(20, async || {
        pool_counter(mport, "msgproxy_pool_discards_total").await > discards
    })
    .await;
    assert!(closed, "the session in a transaction was not discarded");
    // Its connection is gone from the server, and its insert with it.
    let gone = eventually(20, async || {
        direct_scalar::<i64>(
            server,
            &format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {open_id}"),
        )
        .await
            == Some(0)
    })
    .await;
    assert!(gone, "backend connection {open_id} still open");
    let rows: Option<i64> = direct_scalar(server, "SELECT COUNT(*) FROM pool_txn.t").await;
    assert_eq!(rows, Some(0));
    let mut next = through.conn().await;
    assert_ne!(connection_id(&mut next).await, open_id);
    next.disconnect().await.expect("quit");
}

/// Runs `statements` on a pooled session, quits, and checks its connection was closed, not kept.
async fn assert_not_reused(what: &str, setup: &[&str], statements: &[&str]) {
    let server = MariaDb::shared();
    let mut direct = Target::direct(server, "test").conn().await;
    for sql in setup {
        direct.query_drop(*sql).await.expect(sql);
    }
    let _ = direct.disconnect().await;
    let (proxy, mport) = pooled_proxy(server);
    let through = Target::proxy(&proxy, "test");
    let mut used = through.conn().await;
    let used_id = connection_id(&mut used).await;
    for sql in statements {
        used.query_drop(*sql).await.expect(sql);
    }
    used.disconnect().await.expect("quit");
    let closed = eventually(20, async || {
        pool_counter(mport, "msgproxy_pool_discards_total").await >= 1.0
    })
    .await;
    assert!(closed, "the session that {what} was not discarded");
    assert_eq!(pool_counter(mport, "msgproxy_pool_resets_total").await, 0.0);
    let mut next = through.conn().await;
    assert_ne!(connection_id(&mut next).await, used_id);
    next.disconnect().await.expect("quit");
}

#[tokio::test]
async fn a_session_that_used_xa_is_closed_not_reused() {
    assert_not_reused(
        "used XA",
        &[],
        &[
            "XA START 'pool_xa'",
            "XA END 'pool_xa'",
            "XA ROLLBACK 'pool_xa'",
        ],
    )
    .await;
}

/// MariaDB 10.11 keeps a session's role across COM_RESET_CONNECTION and COM_CHANGE_USER.
#[tokio::test]
async fn a_session_that_set_a_role_is_closed_not_reused() {
    assert_not_reused(
        "set a role",
        &[
            "CREATE ROLE IF NOT EXISTS pool_role",
            "GRANT pool_role TO CURRENT_USER",
        ],
        &["SET ROLE pool_role"],
    )
    .await;
}
