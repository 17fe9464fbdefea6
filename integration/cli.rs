//! The real `mariadb` command-line client (libmariadb) through the proxy.

use mysql_async::prelude::*;

use crate::messaging::harness::Env;
use crate::support::compare::{assert_same_text, fresh_database};
use crate::support::process::free_port;
use crate::support::{eventually, shared_setup, Cli, Proxy, Target};

/// Output lines of `SHOW DATABASES` that belong to other, concurrently running tests.
fn without_test_databases(out: &str) -> String {
    out.lines()
        .filter(|l| !l.starts_with("it_"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn cli_select_and_show_databases() {
    let (server, proxy) = shared_setup();
    let args = ["-e", "select 1; show databases"];
    let direct = Cli::new(server.port()).run(&args);
    let through = Cli::new(proxy.port()).run(&args);
    assert!(direct.success(), "direct: {direct:?}");
    assert!(
        through.success(),
        "through the proxy: {through:?}\n{}",
        proxy.log()
    );
    assert!(through.stdout.contains("information_schema"), "{through:?}");
    assert_same_text(
        "select 1; show databases",
        &without_test_databases(&direct.stdout),
        &without_test_databases(&through.stdout),
    );
    assert_same_text("stderr", &direct.stderr, &through.stderr);
}

/// `--column-type-info` prints every field of every column definition: a compact metadata check
/// through a different client library.
#[tokio::test]
async fn cli_column_type_info_errors_and_warnings() {
    let (server, proxy) = shared_setup();
    let db = "it_cli_meta";
    let script = "CREATE TABLE t (id INT UNSIGNED PRIMARY KEY, d DECIMAL(10,3), b BLOB, s VARCHAR(5) CHARACTER SET latin1, j JSON);
         INSERT INTO t VALUES (1, 1.5, 'x', 'y', '[1]');
         SELECT * FROM t;
         SELECT 1.5 AS x, NULL, 'é';
         SHOW WARNINGS;";
    let mut outputs = Vec::new();
    for port in [server.port(), proxy.port()] {
        fresh_database(server, db).await;
        let out = Cli::new(port).run(&[
            db,
            "--column-type-info",
            "--show-warnings",
            "-vvv",
            "-e",
            script,
        ]);
        assert!(out.success(), "port {port}: {out:?}");
        let err = Cli::new(port).run(&[db, "-e", "SELECT 1; SELECT * FROM nope; SELECT 2"]);
        assert!(!err.success());
        let warn = Cli::new(port).run(&[db, "--show-warnings", "-e", "SELECT CAST('1x' AS INT)"]);
        // Timing lines ("1 row in set (0.001 sec)") differ run to run.
        let strip = |s: &str| {
            s.lines()
                .map(|l| match l.find(" sec)") {
                    Some(_) => l.split(" (").next().unwrap_or(l).to_string(),
                    None => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        outputs.push((
            strip(&out.stdout),
            err.stdout,
            err.stderr,
            warn.stdout,
            warn.stderr,
        ));
    }
    let (d, p) = (&outputs[0], &outputs[1]);
    assert_same_text("--column-type-info output", &d.0, &p.0);
    assert_same_text("error stdout", &d.1, &p.1);
    assert_same_text("error stderr", &d.2, &p.2);
    assert_same_text("warning stdout", &d.3, &p.3);
    assert_same_text("warning stderr", &d.4, &p.4);
    assert!(
        outputs[0].2.contains("ERROR 1146 (42S02) at line 1"),
        "{:?}",
        outputs[0].2
    );
}

#[tokio::test]
async fn cli_load_data_local_infile() {
    let (server, proxy) = shared_setup();
    let db = "it_cli_infile";
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rows.tsv");
    let mut data = String::new();
    for i in 0..2000 {
        data.push_str(&format!("{i}\tvalue {i}\n"));
    }
    std::fs::write(&file, data).expect("write");
    let script = format!(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20));
         LOAD DATA LOCAL INFILE '{}' INTO TABLE t;
         SELECT COUNT(*), MIN(v), MAX(id) FROM t;",
        file.display()
    );
    let mut outputs = Vec::new();
    for port in [server.port(), proxy.port()] {
        fresh_database(server, db).await;
        let out = Cli::new(port).run(&[db, "--local-infile=1", "-vv", "-e", &script]);
        assert!(out.success(), "port {port}: {out:?}");
        outputs.push(
            out.stdout
                .lines()
                .filter(|l| !l.contains(" sec)"))
                .map(String::from)
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(outputs[1], outputs[0]);
    assert!(
        outputs[0].iter().any(|l| l.contains("Records: 2000")),
        "{outputs:?}"
    );
}

#[tokio::test]
async fn cli_admin_ping_and_status() {
    let (_server, proxy) = shared_setup();
    let ping = Cli::new(proxy.port()).admin(&["ping"]);
    assert!(
        ping.success() && ping.stdout.contains("mysqld is alive"),
        "{ping:?}"
    );
    let status = Cli::new(proxy.port()).admin(&["status"]);
    assert!(
        status.success() && status.stdout.starts_with("Uptime:"),
        "{status:?}"
    );
    let version = Cli::new(proxy.port()).admin(&["version"]);
    assert!(version.success(), "{version:?}");
}

/// The character set the client asks for in its handshake is the session's character set.
#[tokio::test]
async fn cli_handshake_character_set_reaches_the_server() {
    let (server, proxy) = shared_setup();
    for charset in ["latin1", "utf8mb4", "utf8mb3", "cp1251"] {
        let args = [
            &format!("--default-character-set={charset}")[..],
            "-N",
            "-e",
            "SELECT @@character_set_client, @@character_set_connection, @@character_set_results, \
             @@collation_connection, HEX('é')",
        ];
        let direct = Cli::new(server.port()).run(&args);
        let through = Cli::new(proxy.port()).run(&args);
        assert!(direct.success(), "{direct:?}");
        assert!(through.success(), "{through:?}");
        assert_same_text(
            &format!("charset {charset}"),
            &direct.stdout,
            &through.stdout,
        );
    }
}

/// libmariadb (the CLI, mysqlclient, PHP mysqli, ...) rejects an ERR packet whose code is one of
/// the client library's own (2001-2061, 5001-5026: CR_SERVER_LOST 2013, CR_CONN_HOST_ERROR 2003,
/// ...) and shows "Received malformed packet" instead of the proxy's message.
fn assert_proxy_error_shown(out: &crate::support::cli::CliOutput, message: &str) {
    assert!(!out.success(), "{out:?}");
    assert!(
        !out.stderr.to_lowercase().contains("malformed packet"),
        "the client rejected the proxy's error packet: {out:?}"
    );
    assert!(
        out.stderr.contains(message),
        "the client should show the proxy's message {message:?}: {out:?}"
    );
}

/// With its backend unreachable, the proxy refuses a client with an error the `mariadb` client
/// shows as it is, code, SQLSTATE and text, whether it would have used TLS (its default, when
/// offered) or not: the error comes in reply to the login (once it wrapped an error sent in
/// place of the greeting as "error packet before completion of TLS handshake").
#[tokio::test]
async fn cli_shows_the_backend_unreachable_error() {
    let dead = free_port();
    let proxy = Proxy::start(&format!("mysql://root@127.0.0.1:{dead}/test"), &[], None);
    let expected = "ERROR 1429 (08004): msgproxy cannot reach its backend MySQL server";
    let out = Cli::new(proxy.port()).run(&["-e", "select 1"]);
    assert_proxy_error_shown(&out, expected);
    let plain = Cli::new(proxy.port()).run(&["--skip-ssl", "-e", "select 1"]);
    assert_proxy_error_shown(&plain, expected);
    proxy.assert_alive();
}

/// A STREAM whose backend connection is killed ends with the proxy's own error, inside the
/// result set the client is reading, and the `mariadb` client shows it as it is.
#[tokio::test]
async fn cli_shows_the_lost_backend_error_of_a_stream() {
    let env = Env::new("it_cli_stream_lost").await;
    env.ddl(
        "CREATE TABLE m (id BIGINT, time_next BIGINT DEFAULT 0, epoch BIGINT, time_acked BIGINT, \
         message VARCHAR(128), PRIMARY KEY (id), INDEX next_idx (time_next, epoch)) \
         COMMENT 'vitess_message,vt_ack_wait=30,vt_purge_after=120,vt_batch_size=1,\
         vt_cache_size=1000,vt_poller_interval=1'",
    )
    .await;
    env.via_proxy("INSERT INTO m (id, message) VALUES (1, 'hello')")
        .await;
    let (port, db) = (env.proxy.port(), env.db.clone());
    let cli = tokio::task::spawn_blocking(move || {
        Cli::new(port).run(&[&db, "--quick", "-e", "STREAM * FROM m"])
    });
    // The row is claimed (epoch 1) once the stream is running and has sent it.
    let mut admin = Target::direct(env.server, "test").conn().await;
    let sql = format!("SELECT epoch FROM `{}`.m WHERE id = 1", env.db);
    let sent = eventually(20, async || {
        admin.query_first::<Option<i64>, _>(&sql).await.ok() == Some(Some(Some(1)))
    })
    .await;
    assert!(sent, "the stream never sent the message:\n{}", env.log());
    // Only the stream's own backend connection has the test's database selected.
    let ids: Vec<u64> = admin
        .exec(
            "SELECT id FROM information_schema.PROCESSLIST WHERE db = ? AND id <> CONNECTION_ID()",
            (env.db.as_str(),),
        )
        .await
        .expect("processlist");
    assert!(!ids.is_empty(), "no backend connection of {}", env.db);
    for id in ids {
        admin.query_drop(format!("KILL {id}")).await.expect("KILL");
    }
    let out = cli.await.expect("the CLI thread");
    assert!(out.stdout.contains("hello"), "{out:?}");
    assert_proxy_error_shown(
        &out,
        "ERROR 1158 (08S01) at line 1: Lost connection to the backend MySQL server",
    );
    let _ = admin.disconnect().await;
    env.proxy.assert_alive();
}
