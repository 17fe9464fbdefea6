//! Ordinary statements: counters and info strings, server errors, transactions, session state,
//! temporary tables, multi-statements and stored procedures, prepared statements.

use mysql_async::prelude::*;
use mysql_async::Value;

use crate::support::{same_both_ways, shared_setup, Failure, Rec};

fn server_error(outcome: &crate::support::Outcome) -> (u16, String) {
    match &outcome.error {
        Some(Failure::Server { code, state, .. }) => (*code, state.clone()),
        other => panic!("expected a server error, got {other:?} in {outcome:?}"),
    }
}

#[tokio::test]
async fn affected_rows_insert_ids_warnings_and_info_strings() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_counters", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(
            &mut c,
            "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(3), n INT DEFAULT 0, UNIQUE (v))",
        )
        .await
        .ok();
        let ins = r.query(&mut c, "INSERT INTO t (v) VALUES ('a'), ('b'), ('c')").await.ok();
        assert_eq!(ins.sets[0].info, "Records: 3  Duplicates: 0  Warnings: 0");
        assert_eq!(ins.sets[0].affected_rows, 3);
        assert_eq!(ins.sets[0].last_insert_id, Some(1));
        let one = r.query(&mut c, "INSERT INTO t (v) VALUES ('d')").await.ok();
        assert_eq!(one.sets[0].last_insert_id, Some(4));
        r.query(&mut c, "SELECT LAST_INSERT_ID(), ROW_COUNT()").await.ok();
        let ign = r.query(&mut c, "INSERT IGNORE INTO t (v) VALUES ('a'), ('e')").await.ok();
        assert_eq!(ign.sets[0].warnings, 1);
        r.query(&mut c, "SHOW WARNINGS").await.ok();
        r.query(&mut c, "INSERT INTO t (v) VALUES ('b') ON DUPLICATE KEY UPDATE n = n + 1").await;
        r.query(&mut c, "REPLACE INTO t (id, v) VALUES (1, 'z')").await;
        let upd = r.query(&mut c, "UPDATE t SET n = n + 1 WHERE id <= 3").await.ok();
        assert!(upd.sets[0].info.starts_with("Rows matched: 3"), "{upd:?}");
        r.query(&mut c, "UPDATE t SET n = n WHERE id <= 3").await;
        r.query(&mut c, "DELETE FROM t WHERE id > 4").await;
        r.query(&mut c, "SET SESSION sql_mode = ''").await;
        let trunc = r.query(&mut c, "INSERT INTO t (v, n) VALUES ('toolong', 'x')").await.ok();
        assert_eq!(trunc.sets[0].warnings, 2, "{trunc:?}");
        r.query(&mut c, "SHOW WARNINGS").await;
        r.query(&mut c, "SHOW COUNT(*) WARNINGS").await;
        r.query(&mut c, "SELECT SQL_CALC_FOUND_ROWS * FROM t ORDER BY id LIMIT 1").await;
        r.query(&mut c, "SELECT FOUND_ROWS()").await;
        r.query(&mut c, "ALTER TABLE t ADD COLUMN extra INT").await;
        r.query(&mut c, "CREATE TABLE t2 AS SELECT * FROM t").await;
        r.query(&mut c, "INSERT INTO t2 SELECT * FROM t").await;
        r.query(&mut c, "SELECT * FROM t ORDER BY id").await;
        r.query(&mut c, "TRUNCATE TABLE t2").await;
        r.query(&mut c, "DO 1").await;
        r.query(&mut c, "SELECT 1 FROM DUAL WHERE 1 = 0").await;
        // The OK packet's session-state part (CLIENT_SESSION_TRACK) when the client asks for it.
        r.query(&mut c, "SET SESSION session_track_schema = ON, session_track_state_change = ON").await;
        r.query(&mut c, "SET SESSION session_track_system_variables = 'autocommit,time_zone'").await;
        r.query(&mut c, "SET time_zone = '+01:00'").await;

        // CLIENT_FOUND_ROWS is the client's choice and changes what the server counts: the proxy
        // must open the backend connection with the client's capability flags.
        let found = crate::support::opts(r.target.port, "root", None, Some(&r.target.db))
            .client_found_rows(true);
        let mut f = r.target.conn_with(found).await;
        let same = r.query(&mut f, "UPDATE t SET n = n WHERE id <= 3").await.ok();
        assert_eq!(same.sets[0].affected_rows, 3, "CLIENT_FOUND_ROWS: matched, not changed");
        r.query(&mut c, "UPDATE t SET n = n WHERE id <= 3").await.ok();
    })
    .await;
}

/// Compressed protocol (CLIENT_COMPRESS), if the proxy offers it; either way the answers match.
#[tokio::test]
async fn compressed_protocol() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_compress", async |r: &mut Rec| {
        let o = crate::support::opts(r.target.port, "root", None, Some(&r.target.db))
            .compression(mysql_async::Compression::fast());
        let mut c = r.target.conn_with(o).await;
        r.query(&mut c, "CREATE TABLE t (id INT PRIMARY KEY, b LONGBLOB)")
            .await
            .ok();
        r.exec(
            &mut c,
            "INSERT INTO t VALUES (?, ?)",
            (1, vec![b'z'; 3 * 1024 * 1024]),
        )
        .await
        .ok();
        r.query(&mut c, "SELECT id, LENGTH(b), MD5(b), b FROM t")
            .await
            .ok();
        r.query(
            &mut c,
            "SELECT seq, REPEAT('q', seq % 100) FROM seq_1_to_3000",
        )
        .await
        .ok();
        r.query(&mut c, "SELECT 1; SELECT * FROM missing_table")
            .await;
        r.exec(&mut c, "SELECT ? + 1", (1,)).await.ok();
    })
    .await;
}

/// The database in the handshake goes to the server: unknown databases fail the same way.
#[tokio::test]
async fn connect_to_unknown_or_no_database() {
    let (server, proxy) = shared_setup();
    let mut seen = Vec::new();
    for port in [server.port(), proxy.port()] {
        let unknown = mysql_async::Conn::new(crate::support::opts(
            port,
            "root",
            None,
            Some("it_no_such_database"),
        ))
        .await
        .map(|_| ())
        .map_err(|e| Failure::of(&e));
        let mut none = mysql_async::Conn::new(crate::support::opts(port, "root", None, None))
            .await
            .expect("connect without a database");
        let db: Option<Option<String>> = none.query_first("SELECT DATABASE()").await.expect("q");
        seen.push((unknown, db));
    }
    assert_eq!(seen[1], seen[0], "proxy (left) vs server (right)");
    assert!(
        matches!(seen[0].0, Err(Failure::Server { code: 1049, .. })),
        "{seen:?}"
    );
}

#[tokio::test]
async fn server_errors_pass_through_unchanged() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_errors", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(
            &mut c,
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(3) NOT NULL)",
        )
        .await
        .ok();
        r.query(&mut c, "INSERT INTO t VALUES (1, 'a')").await.ok();
        let syntax = r.query(&mut c, "SELEKT 1").await;
        assert_eq!(server_error(&syntax), (1064, "42000".into()));
        let missing = r.query(&mut c, "SELECT * FROM no_such_table").await;
        assert_eq!(server_error(&missing), (1146, "42S02".into()));
        let dup = r.query(&mut c, "INSERT INTO t VALUES (1, 'b')").await;
        assert_eq!(server_error(&dup), (1062, "23000".into()));
        r.query(&mut c, "SELECT nope FROM t").await;
        r.query(&mut c, "INSERT INTO t VALUES (2, 'toolong')").await;
        r.query(&mut c, "INSERT INTO t VALUES (3, NULL)").await;
        r.query(&mut c, "SELECT * FROM `tàble_ünïcode_✓`").await;
        r.query(&mut c, "USE no_such_database").await;
        r.query(
            &mut c,
            "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'custom failure ✓', MYSQL_ERRNO = 1644",
        )
        .await;
        r.query(&mut c, "SELECT 1 +").await;
        r.query(&mut c, "").await;
        r.query(&mut c, "SELECT 1; SELECT * FROM no_such_table; SELECT 3")
            .await;
        // Prepare-time and execute-time errors of prepared statements.
        r.exec(&mut c, "SELECT * FROM no_such_table WHERE id = ?", (1,))
            .await;
        r.exec(&mut c, "INSERT INTO t VALUES (?, ?)", (1, "dup"))
            .await;
        r.exec(&mut c, "SELEKT ?", (1,)).await;
        // The session goes on after each error.
        let after = r.query(&mut c, "SELECT COUNT(*) FROM t").await.ok();
        assert_eq!(after.rows()[0][0], Value::Bytes(b"1".to_vec()));
        // An ERR packet after some rows have already been sent.
        r.query(
            &mut c,
            "SELECT seq, IF(seq = 3, (SELECT 1 UNION SELECT 2), seq) FROM seq_1_to_5",
        )
        .await;
        r.exec(
            &mut c,
            "SELECT seq, IF(seq = ?, (SELECT 1 UNION SELECT 2), seq) FROM seq_1_to_5",
            (3,),
        )
        .await;
        r.query(&mut c, "SELECT 'fine after a mid-result error'")
            .await
            .ok();
        // A warning that the server escalates to an error only in strict mode.
        r.query(&mut c, "SELECT CAST('x' AS INT)").await;
        r.query(&mut c, "SHOW WARNINGS").await;
    })
    .await;
}

#[tokio::test]
async fn transactions_commit_and_rollback_are_seen_by_other_connections() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_tx", async |r: &mut Rec| {
        let mut a = r.conn().await;
        let mut b = r.conn().await;
        r.query(&mut a, "CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
            .await
            .ok();
        r.query(&mut a, "BEGIN").await.ok();
        r.query(&mut a, "INSERT INTO t VALUES (1)").await.ok();
        r.query(&mut a, "SELECT @@in_transaction").await.ok();
        let before = r.query(&mut b, "SELECT COUNT(*) FROM t").await.ok();
        assert_eq!(
            before.rows()[0][0],
            Value::Bytes(b"0".to_vec()),
            "uncommitted row visible"
        );
        r.query(&mut a, "COMMIT").await.ok();
        let after = r.query(&mut b, "SELECT COUNT(*) FROM t").await.ok();
        assert_eq!(
            after.rows()[0][0],
            Value::Bytes(b"1".to_vec()),
            "committed row invisible"
        );

        r.query(&mut a, "START TRANSACTION").await.ok();
        r.query(&mut a, "INSERT INTO t VALUES (2)").await.ok();
        r.query(&mut a, "SAVEPOINT s1").await.ok();
        r.query(&mut a, "INSERT INTO t VALUES (3)").await.ok();
        r.query(&mut a, "ROLLBACK TO SAVEPOINT s1").await.ok();
        r.query(&mut a, "SELECT * FROM t ORDER BY id").await.ok();
        r.query(&mut a, "ROLLBACK").await.ok();
        let rolled = r.query(&mut b, "SELECT COUNT(*) FROM t").await.ok();
        assert_eq!(
            rolled.rows()[0][0],
            Value::Bytes(b"1".to_vec()),
            "rolled-back row visible"
        );

        // autocommit off: the status flags in every OK packet say "in transaction".
        r.query(&mut a, "SET autocommit = 0").await.ok();
        r.query(&mut a, "INSERT INTO t VALUES (4)").await.ok();
        r.query(&mut b, "SELECT COUNT(*) FROM t").await.ok();
        r.query(&mut a, "COMMIT").await.ok();
        r.query(&mut b, "SELECT COUNT(*) FROM t").await.ok();
        r.query(&mut a, "SET autocommit = 1").await.ok();
        r.query(&mut a, "START TRANSACTION READ ONLY").await.ok();
        r.query(&mut a, "INSERT INTO t VALUES (5)").await;
        r.query(&mut a, "COMMIT").await.ok();

        // mysql_async's own transaction API (START TRANSACTION with options, COMMIT/ROLLBACK).
        let mut tx = a
            .start_transaction(Default::default())
            .await
            .expect("start transaction");
        tx.query_drop("INSERT INTO t VALUES (6)")
            .await
            .expect("insert in tx");
        tx.rollback().await.expect("rollback");
        r.query(&mut b, "SELECT * FROM t ORDER BY id").await.ok();
        r.query(&mut a, "SELECT * FROM t ORDER BY id").await.ok();
    })
    .await;
}

#[tokio::test]
async fn use_set_user_variables_and_temporary_tables_stay_in_the_session() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_session", async |r: &mut Rec| {
        let db = r.target.db.clone();
        let other = format!("{db}_other");
        let mut c = r.conn().await;
        r.query(&mut c, &format!("DROP DATABASE IF EXISTS {other}"))
            .await;
        r.query(&mut c, &format!("CREATE DATABASE {other}"))
            .await
            .ok();
        r.query(&mut c, &format!("CREATE TABLE {other}.o (x INT)"))
            .await
            .ok();
        r.query(&mut c, &format!("INSERT INTO {other}.o VALUES (42)"))
            .await
            .ok();
        r.query(&mut c, "SELECT DATABASE()").await.ok();
        r.query(&mut c, &format!("USE {other}")).await.ok();
        let now = r.query(&mut c, "SELECT DATABASE(), x FROM o").await.ok();
        assert_eq!(now.rows()[0][0], Value::Bytes(other.clone().into_bytes()));
        r.query(&mut c, &format!("USE {db}")).await.ok();

        r.query(&mut c, "SET @a = 5, @b = 'text ✓', @c = NULL, @d = 1.25")
            .await
            .ok();
        r.query(&mut c, "SELECT @a, @b, @c, @d, @undefined")
            .await
            .ok();
        r.query(&mut c, "SELECT @n := 10, @n + 1").await.ok();
        r.query(
            &mut c,
            "SET SESSION sql_mode = 'ANSI_QUOTES,PIPES_AS_CONCAT'",
        )
        .await
        .ok();
        r.query(&mut c, "SELECT 'a' || 'b', @@sql_mode").await.ok();
        r.query(&mut c, "SET SESSION sql_mode = DEFAULT").await.ok();
        r.query(&mut c, "SET time_zone = '+05:30'").await.ok();
        r.query(&mut c, "SELECT @@time_zone, FROM_UNIXTIME(0)")
            .await
            .ok();
        r.query(&mut c, "SET NAMES latin1").await.ok();
        r.query(
            &mut c,
            "SELECT @@character_set_client, @@character_set_results, 'é'",
        )
        .await
        .ok();
        r.query(&mut c, "SET NAMES utf8mb4").await.ok();
        r.query(
            &mut c,
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        )
        .await
        .ok();
        r.query(&mut c, "SELECT @@tx_isolation").await.ok();

        r.query(&mut c, "CREATE TEMPORARY TABLE tmp (id INT, s TEXT)")
            .await
            .ok();
        r.query(&mut c, "INSERT INTO tmp VALUES (1, 'x'), (2, 'y')")
            .await
            .ok();
        r.query(&mut c, "SELECT * FROM tmp ORDER BY id").await.ok();
        // Another session sees neither the variables nor the temporary table.
        let mut other_conn = r.conn().await;
        r.query(&mut other_conn, "SELECT @a, @b").await.ok();
        let hidden = r.query(&mut other_conn, "SELECT * FROM tmp").await;
        assert_eq!(server_error(&hidden).0, 1146);
        r.query(&mut other_conn, "SELECT @@time_zone, DATABASE()")
            .await
            .ok();
        r.query(&mut c, "DROP TEMPORARY TABLE tmp").await.ok();
        r.query(&mut c, "SELECT * FROM tmp").await;
        r.query(&mut c, &format!("DROP DATABASE {other}"))
            .await
            .ok();
    })
    .await;
}

#[tokio::test]
async fn multi_statements_and_procedures_return_every_result_set() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_multi", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(&mut c, "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)").await.ok();
        let multi = r
            .query(&mut c, "SELECT 1; SELECT 2, 3; INSERT INTO t (v) VALUES (7), (8)")
            .await
            .ok();
        assert_eq!(multi.sets.len(), 3, "{multi:?}");
        assert_eq!(multi.sets[1].rows[0].len(), 2);
        assert_eq!(multi.sets[2].affected_rows, 2);
        r.query(
            &mut c,
            "INSERT INTO t (v) VALUES (1); UPDATE t SET v = v + 1; DELETE FROM t WHERE v = 9; SELECT * FROM t ORDER BY id",
        )
        .await
        .ok();
        r.query(&mut c, "SELECT 1; SELECT * FROM missing_table; SELECT 3").await;
        r.query(&mut c, "SELECT 'still fine'").await.ok();
        r.query(&mut c, "SET @x = 1; SELECT @x; BEGIN; INSERT INTO t (v) VALUES (100); COMMIT").await.ok();
        r.query(&mut c, "SELECT 1;").await.ok();
        r.query(&mut c, "SELECT 1; ; SELECT 2").await;

        r.query(
            &mut c,
            "CREATE PROCEDURE p(IN k INT)
             BEGIN
               SELECT k AS first_set;
               SELECT id, v FROM t ORDER BY id;
               UPDATE t SET v = v + k;
             END",
        )
        .await
        .ok();
        let call = r.query(&mut c, "CALL p(5)").await.ok();
        assert!(call.sets.len() >= 3, "{call:?}");
        // CALL through the binary protocol (needs CLIENT_PS_MULTI_RESULTS end to end).
        r.exec(&mut c, "CALL p(?)", (1,)).await.ok();
        r.query(&mut c, "CREATE PROCEDURE fail() BEGIN SELECT 1; SELECT * FROM missing_table; END")
            .await
            .ok();
        r.query(&mut c, "CALL fail()").await;
        r.query(&mut c, "CREATE FUNCTION f(x INT) RETURNS INT DETERMINISTIC RETURN x * 2").await.ok();
        r.query(&mut c, "SELECT f(21)").await.ok();
        r.query(&mut c, "SELECT * FROM t ORDER BY id").await.ok();
    })
    .await;
}

#[tokio::test]
async fn prepared_statements_execute_repeatedly_and_close() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_prepared", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(
            &mut c,
            "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20), n DOUBLE)",
        )
        .await
        .ok();
        let stmt = c
            .prep("INSERT INTO t (v, n) VALUES (?, ?)")
            .await
            .expect("prepare insert");
        for i in 0..5 {
            c.exec_drop(&stmt, (format!("row {i}"), i as f64 / 2.0))
                .await
                .expect("execute insert");
            r.note(
                "insert counters",
                (c.affected_rows(), c.last_insert_id(), c.info()),
            );
        }
        c.exec_batch(&stmt, vec![("a", 1.0), ("b", 2.0), ("c", 3.0)])
            .await
            .expect("exec_batch");
        c.close(stmt).await.expect("COM_STMT_CLOSE");
        // COM_STMT_CLOSE has no reply: the next command must get its own answer, not a stray one.
        r.query(&mut c, "SELECT COUNT(*) FROM t").await.ok();

        let sel = c
            .prep("SELECT id, v, n FROM t WHERE id > ? ORDER BY id")
            .await
            .expect("prep");
        for from in [0, 3, 100] {
            let rows: Vec<(u32, String, f64)> =
                c.exec(&sel, (from,)).await.expect("execute select");
            r.note(&format!("rows after {from}"), rows);
        }
        r.note("statement params", stmt_meta(&sel));
        c.close(sel).await.expect("close");

        r.exec(&mut c, "SELECT 1", ()).await.ok();
        r.exec(&mut c, "UPDATE t SET n = n * ? WHERE v LIKE ?", (2, "row%"))
            .await
            .ok();
        r.exec(&mut c, "DELETE FROM t WHERE id = ?", (1,))
            .await
            .ok();
        r.exec(&mut c, "CREATE TABLE t3 (x INT)", ()).await.ok();
        r.exec(&mut c, "SET @p = ?", ("param",)).await.ok();
        r.exec(&mut c, "SELECT @p, ? + 1", (41,)).await.ok();
        r.exec(
            &mut c,
            "SELECT * FROM t WHERE id IN (?, ?, ?) ORDER BY id",
            (2, 3, 4),
        )
        .await
        .ok();
        // SQL-level PREPARE/EXECUTE goes through COM_QUERY.
        r.query(&mut c, "PREPARE s FROM 'SELECT v FROM t WHERE id = ?'")
            .await
            .ok();
        r.query(&mut c, "SET @id = 2").await.ok();
        r.query(&mut c, "EXECUTE s USING @id").await.ok();
        r.query(&mut c, "DEALLOCATE PREPARE s").await.ok();
    })
    .await;
}

fn stmt_meta(stmt: &mysql_async::Statement) -> String {
    format!(
        "{} params, columns {:?}",
        stmt.num_params(),
        crate::support::compare::column_infos(stmt.columns())
    )
}
