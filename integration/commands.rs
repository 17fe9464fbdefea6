//! Protocol commands other than COM_QUERY / COM_STMT_*: ping, reset, change user, statistics,
//! field list; KILL and connection ids; the greeting.

use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{ChangeUserOpts, Value};

use crate::support::raw::{self, RawConn};
use crate::support::{
    direct_scalar, opts, same_both_ways, shared_setup, within, Cli, Failure, MariaDb, Proxy, Rec,
    Target,
};

#[tokio::test]
async fn com_ping() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_ping", async |r: &mut Rec| {
        let mut c = r.conn().await;
        for i in 0..3 {
            let res = c.ping().await.map_err(|e| Failure::of(&e));
            r.note(&format!("ping {i}"), res);
        }
        r.query(&mut c, "SELECT * FROM no_such_table").await;
        let res = c.ping().await.map_err(|e| Failure::of(&e));
        r.note("ping after an error", res);
        r.query(&mut c, "SELECT 1").await.ok();
    })
    .await;
}

#[tokio::test]
async fn com_reset_connection_clears_session_state() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_reset", async |r: &mut Rec| {
        let mut c = r.conn().await;
        let mut observer = r.conn().await;
        r.query(&mut c, "CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
            .await
            .ok();
        r.query(&mut c, "SET @v = 'before reset', time_zone = '+03:00'")
            .await
            .ok();
        r.query(&mut c, "CREATE TEMPORARY TABLE tmp (x INT)")
            .await
            .ok();
        r.query(&mut c, "PREPARE s FROM 'SELECT 1'").await.ok();
        r.query(&mut c, "BEGIN").await.ok();
        r.query(&mut c, "INSERT INTO t VALUES (1)").await.ok();
        let reset = c.reset().await.map_err(|e| Failure::of(&e));
        assert_eq!(
            reset,
            Ok(true),
            "COM_RESET_CONNECTION failed or was not attempted"
        );
        r.note("reset", reset);
        r.query(
            &mut c,
            "SELECT @v, @@time_zone, @@in_transaction, DATABASE()",
        )
        .await
        .ok();
        r.query(&mut c, "SELECT * FROM tmp").await;
        r.query(&mut c, "EXECUTE s").await;
        let count = r.query(&mut observer, "SELECT COUNT(*) FROM t").await.ok();
        assert_eq!(
            count.rows()[0][0],
            Value::Bytes(b"0".to_vec()),
            "reset must roll back"
        );
        r.exec(&mut c, "SELECT ?", (5,)).await.ok();
        let again = c.reset().await.map_err(|e| Failure::of(&e));
        r.note("second reset", again);
        r.query(&mut c, "SELECT 'after two resets'").await.ok();
    })
    .await;
}

const USERS_TOML: &str = r#"
[[users]]
name = "it_app"
password = "secret"

[[users]]
name = "it_other"
password = "secret2"
"#;

/// Creates the users of `USERS_TOML` in MariaDB too, so the direct half can log in as them.
fn create_users(server: &MariaDb) {
    server.sql(
        "CREATE USER IF NOT EXISTS 'it_app'@'%' IDENTIFIED BY 'secret';
         CREATE USER IF NOT EXISTS 'it_other'@'%' IDENTIFIED BY 'secret2';
         GRANT ALL ON *.* TO 'it_app'@'%';
         GRANT ALL ON *.* TO 'it_other'@'%';",
    );
}

fn access_denied(res: &Result<(), Failure>, user: &str) -> (u16, String) {
    match res {
        Err(Failure::Server {
            code,
            state,
            message,
        }) => {
            assert!(
                message.contains(&format!("Access denied for user '{user}'")),
                "unexpected message: {message}"
            );
            (*code, state.clone())
        }
        other => panic!("expected access denied, got {other:?}"),
    }
}

#[tokio::test]
async fn com_change_user_with_configured_users() {
    let server = MariaDb::shared();
    create_users(server);
    let proxy = Proxy::start(&server.backend_url(), &[], Some(USERS_TOML));
    same_both_ways(server, &proxy, "it_change_user", async |r: &mut Rec| {
        let db = r.target.db.clone();
        let mut c = r
            .target
            .conn_with(opts(r.target.port, "it_app", Some("secret"), Some(&db)))
            .await;
        r.query(&mut c, "SELECT 1, DATABASE()").await.ok();
        r.query(&mut c, "SET @v = 'kept?'").await.ok();
        r.query(&mut c, "CREATE TEMPORARY TABLE tmp (x INT)")
            .await
            .ok();

        let to_other = c
            .change_user(
                ChangeUserOpts::default()
                    .with_user(Some("it_other".into()))
                    .with_pass(Some("secret2".into())),
            )
            .await
            .map_err(|e| Failure::of(&e));
        assert_eq!(to_other, Ok(()), "change_user with the right password");
        r.note("change to it_other", &to_other);
        // COM_CHANGE_USER starts a new session: variables and temporary tables are gone.
        r.query(&mut c, "SELECT @v, DATABASE()").await.ok();
        r.query(&mut c, "SELECT * FROM tmp").await;

        let back = c
            .change_user(
                ChangeUserOpts::default()
                    .with_user(Some("it_app".into()))
                    .with_pass(Some("secret".into()))
                    .with_db_name(None),
            )
            .await
            .map_err(|e| Failure::of(&e));
        r.note("change back without a database", &back);
        r.query(&mut c, "SELECT DATABASE()").await.ok();

        let wrong = c
            .change_user(
                ChangeUserOpts::default()
                    .with_user(Some("it_other".into()))
                    .with_pass(Some("wrong".into())),
            )
            .await
            .map_err(|e| Failure::of(&e));
        let (code, state) = access_denied(&wrong, "it_other");
        assert_eq!((code, state.as_str()), (1045, "28000"));
        r.note("wrong password code", (code, state));
        // MariaDB drops the connection after a failed COM_CHANGE_USER; either way it must not hang.
        let next = within(
            10,
            "query after failed change_user",
            c.query_drop("SELECT 1"),
        )
        .await;
        r.note("query after failed change_user fails", next.is_err());
    })
    .await;
}

/// COM_STATISTICS answers with a bare string; its numbers change, its shape must not.
#[tokio::test]
async fn com_statistics() {
    let (server, proxy) = shared_setup();
    let mut shapes = Vec::new();
    for port in [server.port(), proxy.port()] {
        let mut conn = RawConn::connect(port, "root", "", Some("test"))
            .await
            .unwrap_or_else(|e| panic!("raw connect to {port}: {e:?}"));
        conn.send_command(raw::COM_STATISTICS, &[])
            .await
            .expect("send");
        let reply = within(10, "COM_STATISTICS", conn.read_packet())
            .await
            .expect("reply");
        let text = String::from_utf8_lossy(&reply).into_owned();
        assert!(text.starts_with("Uptime: "), "port {port}: {text:?}");
        let keys: Vec<String> = text
            .split("  ")
            .map(|kv| kv.split(':').next().unwrap_or("").to_string())
            .collect();
        // The connection is still usable afterwards.
        let rows = conn
            .query("SELECT 1")
            .await
            .expect("query after statistics");
        assert_eq!(rows.len(), 5, "{rows:?}");
        shapes.push(keys);
    }
    assert_eq!(shapes[0], shapes[1]);
    let admin = Cli::new(proxy.port()).admin(&["status"]);
    assert!(admin.success(), "mariadb-admin status via proxy: {admin:?}");
    assert!(admin.stdout.starts_with("Uptime: "), "{admin:?}");
}

/// COM_FIELD_LIST (deprecated, but old clients and `mariadb` auto-rehash send it): byte-exact.
#[tokio::test]
async fn com_field_list() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_field_list", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(
            &mut c,
            "CREATE TABLE t (id INT NOT NULL DEFAULT 7 PRIMARY KEY, name VARCHAR(20) DEFAULT 'x', b BLOB, d DECIMAL(6,2))",
        )
        .await
        .ok();
        let mut raw = RawConn::connect(r.target.port, "root", "", Some(&r.target.db))
            .await
            .expect("raw connect");
        for (table, wildcard) in [("t", ""), ("t", "n%"), ("missing", "")] {
            let mut arg = table.as_bytes().to_vec();
            arg.push(0);
            arg.extend_from_slice(wildcard.as_bytes());
            raw.send_command(raw::COM_FIELD_LIST, &arg).await.expect("send");
            let packets = within(10, "COM_FIELD_LIST", raw.read_until_eof()).await;
            r.note(&format!("field list {table} {wildcard:?}"), &packets);
        }
        let after = raw.query("SELECT 'after field list'").await;
        r.note("query after field list", after.map(|p| p.len()));
    })
    .await;
}

#[tokio::test]
async fn kill_query_interrupts_a_running_statement() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_kill_query", async |r: &mut Rec| {
        let mut victim = r.conn().await;
        let mut killer = r.conn().await;
        let id = victim.id();
        let started = Instant::now();
        let (sleep, kill) = tokio::join!(
            async {
                within(
                    20,
                    "SELECT SLEEP(10)",
                    crate::support::compare::query(&mut victim, "SELECT SLEEP(10)"),
                )
                .await
            },
            async {
                crate::support::wait_until_running(server, "SELECT SLEEP(10)").await;
                crate::support::compare::query(&mut killer, &format!("KILL QUERY {id}")).await
            }
        );
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_secs(5),
            "KILL QUERY took {elapsed:?}: {sleep:?}"
        );
        r.note("sleep outcome", &sleep);
        r.note("kill outcome", &kill);
        // The victim's session survives KILL QUERY.
        r.query(&mut victim, "SELECT 'victim still here'")
            .await
            .ok();
        r.query_as(
            "KILL QUERY <idle victim>",
            &mut killer,
            &format!("KILL QUERY {id}"),
        )
        .await
        .ok();
        r.query(&mut victim, "SELECT 'idle kill query is harmless'")
            .await
            .ok();
    })
    .await;
}

#[tokio::test]
async fn kill_connection_ends_that_session_only() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_kill_conn", async |r: &mut Rec| {
        let mut victim = r.conn().await;
        let mut killer = r.conn().await;
        let id = victim.id();
        r.query_as("KILL <victim>", &mut killer, &format!("KILL {id}"))
            .await
            .ok();
        let next = within(
            10,
            "query on a killed connection",
            victim.query_drop("SELECT 1"),
        )
        .await;
        let failure = next.as_ref().map_err(Failure::of);
        assert!(failure.is_err(), "a killed session must get an error");
        r.note("victim's next query", failure);
        r.query(&mut killer, "SELECT 'killer fine'").await.ok();
        let mut fresh = r.conn().await;
        r.query(&mut fresh, "SELECT 'new session fine'").await.ok();
        // KILL of a session that does not exist.
        r.query(&mut killer, "KILL 999999999").await;
    })
    .await;
}

#[tokio::test]
async fn connection_id_is_the_backend_thread_id() {
    let (server, proxy) = shared_setup();
    let target = Target::proxy(&proxy, "test");
    let mut conn = target.conn().await;
    let via_sql: u32 = conn
        .query_first("SELECT CONNECTION_ID()")
        .await
        .expect("CONNECTION_ID()")
        .expect("a row");
    assert_eq!(conn.id(), via_sql, "handshake id vs CONNECTION_ID()");
    // That id is a real session on the server, connected to the test database.
    let db: Option<String> = direct_scalar(
        server,
        &format!("SELECT DB FROM information_schema.PROCESSLIST WHERE ID = {via_sql}"),
    )
    .await;
    assert_eq!(
        db.as_deref(),
        Some("test"),
        "no backend session with id {via_sql}"
    );

    // The raw greeting carries the same id.
    let mut raw_conn = RawConn::connect(proxy.port(), "root", "", None)
        .await
        .expect("raw");
    let packets = raw_conn
        .query("SELECT CONNECTION_ID()")
        .await
        .expect("query");
    let row = &packets[packets.len() - 2];
    let id_text = String::from_utf8_lossy(&row[1..]).into_owned();
    assert_eq!(id_text, raw_conn.greeting.connection_id.to_string());
    // Two sessions never share an id.
    let other = target.conn().await;
    assert_ne!(other.id(), conn.id());
}

/// What a client learns from the greeting before it sends anything.
#[tokio::test]
async fn greeting_matches_the_server() {
    let (server, proxy) = shared_setup();
    let direct = RawConn::connect(server.port(), "root", "", None)
        .await
        .expect("direct");
    let through = RawConn::connect(proxy.port(), "root", "", None)
        .await
        .expect("proxy");
    let (d, p) = (&direct.greeting, &through.greeting);
    // The proxy may mark the version string (e.g. a "-msgproxy" suffix) as long as clients parse
    // it exactly as they parse the server's: same prefix, same version numbers, still "MariaDB".
    assert!(
        p.server_version.starts_with(&d.server_version),
        "server version: proxy {:?}, server {:?}",
        p.server_version,
        d.server_version
    );
    assert_eq!(p.charset, d.charset, "server default collation");
    for (flag, name) in [
        (raw::CLIENT_PROTOCOL_41, "PROTOCOL_41"),
        (raw::CLIENT_CONNECT_WITH_DB, "CONNECT_WITH_DB"),
        (raw::CLIENT_LOCAL_FILES, "LOCAL_FILES"),
        (raw::CLIENT_TRANSACTIONS, "TRANSACTIONS"),
        (raw::CLIENT_SECURE_CONNECTION, "SECURE_CONNECTION"),
        (raw::CLIENT_MULTI_STATEMENTS, "MULTI_STATEMENTS"),
        (raw::CLIENT_MULTI_RESULTS, "MULTI_RESULTS"),
        (raw::CLIENT_PS_MULTI_RESULTS, "PS_MULTI_RESULTS"),
        (raw::CLIENT_PLUGIN_AUTH, "PLUGIN_AUTH"),
        (raw::CLIENT_DEPRECATE_EOF, "DEPRECATE_EOF"),
    ] {
        assert_eq!(
            p.capabilities & flag,
            d.capabilities & flag,
            "capability {name}: server {:#x}, proxy {:#x}",
            d.capabilities,
            p.capabilities
        );
    }
    // MariaDB's extended capabilities. MARIADB_CLIENT_EXTENDED_METADATA (1 << 3) only adds
    // fields to column definitions (the JSON/UUID/INET6/GEOMETRY subtype that libmariadb shows as
    // "BLOB (format=json)"), so a relay can pass it through; the others (progress reports, bulk
    // execution, metadata caching) change the response framing and are the proxy's call.
    const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;
    eprintln!(
        "MariaDB extended capabilities: server {:#x}, proxy {:#x}",
        d.mariadb_ext_caps, p.mariadb_ext_caps
    );
    assert_eq!(
        p.mariadb_ext_caps & MARIADB_CLIENT_EXTENDED_METADATA,
        d.mariadb_ext_caps & MARIADB_CLIENT_EXTENDED_METADATA,
        "MARIADB_CLIENT_EXTENDED_METADATA: server {:#x}, proxy {:#x}",
        d.mariadb_ext_caps,
        p.mariadb_ext_caps
    );
    // mysql_async derives "is this MariaDB" (and so COM_RESET_CONNECTION support) from the version.
    let conn = Target::proxy(&proxy, "test").conn().await;
    let direct_conn = Target::direct(server, "test").conn().await;
    assert_eq!(conn.server_version(), direct_conn.server_version());
}

/// mysql_async with default options reads `@@socket` after connecting to a loopback address and
/// silently reconnects through that Unix socket. Relayed unchanged, the backend's `@@socket` makes
/// such clients bypass the proxy whenever proxy and server share a host.
#[tokio::test]
async fn default_client_options_stay_on_the_proxy() {
    let (server, proxy) = shared_setup();
    let url = format!("mysql://root@127.0.0.1:{}/test", proxy.port());
    let conn = mysql_async::Conn::from_url(url)
        .await
        .expect("connect with default options");
    let host: Option<String> = direct_scalar(
        server,
        &format!(
            "SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = {}",
            conn.id()
        ),
    )
    .await;
    // TCP sessions show "host:port"; a Unix-socket session shows plain "localhost".
    assert!(
        host.as_deref().is_some_and(|h| h.contains(':')),
        "session {} reached the server as {host:?}: the client went around the proxy \
         (mysql_async prefer_socket + relayed @@socket)",
        conn.id()
    );
}

/// The `@@socket` rewrite changes the system variable only: the same characters in a string
/// literal, a quoted identifier or a comment reach the server as written, over the text and the
/// binary protocol (QA: `SELECT '@@socket'` returned `'`, and `WHERE name = '@@socket'` matched
/// other rows).
#[tokio::test]
async fn the_socket_rewrite_leaves_strings_identifiers_and_comments_alone() {
    let (_server, proxy) = shared_setup();
    let mut conn = Target::proxy(&proxy, "test").conn().await;
    let sql = "SELECT '@@socket', \"@@socket\", @@socket /* @@socket */, \
               'it''s @@socket' AS `@@socket`";
    let expected = (
        "@@socket".to_owned(),
        "@@socket".to_owned(),
        String::new(),
        "it's @@socket".to_owned(),
    );
    type Row = (String, String, String, String);
    let text: Option<Row> = conn.query_first(sql).await.expect("text SELECT");
    assert_eq!(text.as_ref(), Some(&expected), "text protocol: {sql}");
    let prepared: Option<Row> = conn.exec_first(sql, ()).await.expect("prepared SELECT");
    assert_eq!(prepared.as_ref(), Some(&expected), "prepared: {sql}");
    // The backticked alias names the column as written.
    let mut result = conn.query_iter(sql).await.expect("text SELECT");
    let names: Vec<String> = result
        .columns_ref()
        .iter()
        .map(|c| c.name_str().into_owned())
        .collect();
    drop(result.collect::<mysql_async::Row>().await);
    assert_eq!(
        names.last().map(String::as_str),
        Some("@@socket"),
        "{names:?}"
    );
    // The variable, replaced, keeps the column name the server gives it (QA: clients reading
    // `row['@@socket']` found nothing).
    assert_eq!(
        names.get(2).map(String::as_str),
        Some("@@socket"),
        "{names:?}"
    );
    // A comparison with the literal matches the row holding it, and only that one.
    let matched: Option<String> = conn
        .query_first(
            "SELECT name FROM (SELECT '@@socket' AS name UNION ALL SELECT \"'\") t \
             WHERE name = '@@socket'",
        )
        .await
        .expect("WHERE name = '@@socket'");
    assert_eq!(matched.as_deref(), Some("@@socket"));
    // `@@session.socket` is left to the server, which refuses it (the variable is global only),
    // as it does on a direct connection; `@@global.socket` reads as `@@socket` does.
    match conn.query_drop("SELECT @@session.socket").await {
        Err(e) => assert!(
            matches!(Failure::of(&e), Failure::Server { code: 1238, .. }),
            "@@session.socket: {e}"
        ),
        Ok(()) => panic!("@@session.socket was answered"),
    }
    let global: Option<String> = conn
        .query_first("SELECT @@GLOBAL.socket")
        .await
        .expect("@@global.socket");
    assert_eq!(global.as_deref(), Some(""));
}

/// A COM_CHANGE_USER with a wrong password resets the session as the server does on one (QA,
/// with mysql2: the server cleared `@v` and kept the database; msgproxy, which refuses the change
/// itself, left the old session as it was).
#[tokio::test]
async fn a_failed_change_user_resets_the_session() {
    let (_server, proxy) = shared_setup();
    let mut conn = RawConn::connect(proxy.port(), "root", "", Some("test"))
        .await
        .expect("raw connect");
    conn.query("SET @v = 5").await.expect("SET @v");
    // COM_CHANGE_USER: user, a 20-byte scramble that cannot be right, database, charset, plugin.
    let mut arg = b"root\0".to_vec();
    arg.push(20);
    arg.extend_from_slice(&[0x5a; 20]);
    arg.extend_from_slice(b"test\0");
    arg.extend_from_slice(&[0x21, 0x00]);
    arg.extend_from_slice(b"mysql_native_password\0");
    conn.send_command(0x11, &arg).await.expect("send");
    let reply = within(10, "COM_CHANGE_USER", conn.read_packet())
        .await
        .expect("reply");
    match raw::parse_err(&reply) {
        raw::RawError::Server { code, .. } => assert_eq!(code, 1045),
        other => panic!("expected access denied, got {other:?}"),
    }
    let rows = conn
        .query("SELECT CONCAT(IFNULL(@v, 'none'), '/', DATABASE())")
        .await
        .expect("the session goes on");
    assert!(
        rows.iter().any(|p| p.windows(9).any(|w| w == b"none/test")),
        "@v cleared, database kept: {:?}",
        rows.iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect::<Vec<_>>()
    );
}
