//! Unqualified tables in `ACK` and `STREAM` resolve in the database the server session is really
//! in, whatever changed it: `USE` with comments, multi-statement queries, prepared `USE`, `DROP
//! DATABASE`, COM_CHANGE_USER (QA's t_use.py and t_use2.py).

use mysql_async::prelude::*;
use mysql_async::{ChangeUserOpts, Conn};

use super::harness::{comment, connect, exec, Env};
use crate::support::{opts, Failure};

/// The message table `m1` with rows 1..=20 in `db`, created afresh (with `db` itself unless it
/// is the test's own database); `column` is its user column, so a stream's columns tell which
/// `m1` it reads.
async fn message_table_in(env: &Env, db: &str, column: &str) {
    let mut c = env.direct_conn().await;
    let setup = if db == env.db {
        vec![format!("DROP TABLE IF EXISTS `{db}`.m1")]
    } else {
        vec![
            format!("DROP DATABASE IF EXISTS `{db}`"),
            format!("CREATE DATABASE `{db}`"),
        ]
    };
    for sql in setup {
        exec(&mut c, &sql).await.expect(&sql);
    }
    let _ = c.disconnect().await;
    env.ddl(&format!(
        "create table `{db}`.m1(id bigint primary key, time_next bigint, epoch bigint,
           time_acked bigint, {column} varchar(20)) comment '{}'",
        comment("30", 10, "30", "")
    ))
    .await;
    let values: Vec<String> = (1..=20).map(|i| format!("({i})")).collect();
    env.direct(&format!(
        "insert into `{db}`.m1(id) values {}",
        values.join(", ")
    ))
    .await;
}

/// The same message table `m1` in the test's database and in `other`.
async fn two_databases(env: &Env, other: &str) {
    message_table_in(env, &env.db, "message").await;
    message_table_in(env, other, "other_message").await;
}

/// Which databases' `m1` have row `id` acked.
async fn acked_in(env: &Env, other: &str, id: i64) -> Vec<String> {
    let mut c = env.direct_conn().await;
    let mut acked = Vec::new();
    for db in [env.db.as_str(), other] {
        let t: Option<Option<i64>> = c
            .query_first(format!("select time_acked from `{db}`.m1 where id = {id}"))
            .await
            .expect("read time_acked");
        if t.flatten().is_some() {
            acked.push(db.to_string());
        }
    }
    let _ = c.disconnect().await;
    acked
}

#[tokio::test]
async fn ack_follows_every_way_of_changing_the_database() {
    let env = Env::new("msg_curdb").await;
    let other = "msg_curdb_other";
    two_databases(&env, other).await;

    // Each case starts in env.db, runs its statements, then acks its own id unqualified.
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "USE with a line comment",
            vec![format!("USE {other} -- comment")],
        ),
        (
            "USE with a comment before",
            vec![format!("USE /*x*/ {other}")],
        ),
        (
            "USE with a comment after",
            vec![format!("use {other} /* c */")],
        ),
        (
            "USE, then another statement",
            vec![format!("USE {other}; SELECT 1")],
        ),
        (
            "USE as a later statement",
            vec![format!("SELECT 1; USE {other}")],
        ),
        (
            "USE as a later statement of a failing query",
            vec![format!("USE {other}; SELECT no_such_column")],
        ),
        (
            "SET STATEMENT ... FOR USE",
            vec![format!(
                "SET STATEMENT max_statement_time=10 FOR USE {other}"
            )],
        ),
        (
            "EXECUTE IMMEDIATE",
            vec![format!("EXECUTE IMMEDIATE 'USE {other}'")],
        ),
        (
            "PREPARE and EXECUTE",
            vec![format!("PREPARE s FROM 'USE {other}'"), "EXECUTE s".into()],
        ),
        (
            "back and forth",
            vec![
                format!("USE {other}"),
                format!("SELECT 1; USE {}", env.db),
                format!("USE {other}"),
            ],
        ),
    ];
    let mut wrong = Vec::new();
    for (i, (what, statements)) in cases.iter().enumerate() {
        let id = i as i64 + 1;
        let mut c = env.proxy_conn().await;
        for sql in statements {
            // The failing multi-statement query fails on purpose; its USE ran.
            let _ = exec(&mut c, sql).await;
        }
        let db: Option<String> = c
            .query_first("SELECT DATABASE()")
            .await
            .expect("database()");
        assert_eq!(db.as_deref(), Some(other), "{what}: the server's database");
        let n = exec(&mut c, &format!("ACK m1 {id}")).await;
        let acked = acked_in(&env, other, id).await;
        if n != Ok(1) || acked != [other] {
            wrong.push(format!("{what}: ACK m1 {id} -> {n:?}, acked in {acked:?}"));
        }
        let _ = c.disconnect().await;
    }

    // Binary protocol: a prepared USE (COM_STMT_PREPARE / COM_STMT_EXECUTE).
    let mut c = env.proxy_conn().await;
    c.exec_drop(format!("USE {other}"), ())
        .await
        .expect("prepared USE");
    let n = exec(&mut c, "ACK m1 19").await;
    let acked = acked_in(&env, other, 19).await;
    if n != Ok(1) || acked != [other] {
        wrong.push(format!(
            "prepared USE: ACK m1 19 -> {n:?}, acked in {acked:?}"
        ));
    }
    let _ = c.disconnect().await;

    // COM_CHANGE_USER takes the database from its packet.
    let mut c = env.proxy_conn().await;
    c.change_user(ChangeUserOpts::default().with_db_name(Some(other.to_string())))
        .await
        .expect("change user");
    let n = exec(&mut c, "ACK m1 20").await;
    let acked = acked_in(&env, other, 20).await;
    if n != Ok(1) || acked != [other] {
        wrong.push(format!(
            "COM_CHANGE_USER: ACK m1 20 -> {n:?}, acked in {acked:?}"
        ));
    }
    let _ = c.disconnect().await;

    assert!(
        wrong.is_empty(),
        "acks in the wrong database:\n{}",
        wrong.join("\n")
    );
}

#[tokio::test]
async fn dropping_the_current_database_leaves_none() {
    let env = Env::new("msg_curdb_drop").await;
    let doomed = "msg_curdb_doomed";
    message_table_in(&env, &env.db, "message").await;
    for (what, statements) in [
        (
            "USE, then DROP DATABASE",
            vec![format!("USE {doomed}"), format!("DROP DATABASE {doomed}")],
        ),
        (
            "DROP SCHEMA in the same query",
            vec![format!("USE {doomed}; DROP SCHEMA {doomed}")],
        ),
    ] {
        message_table_in(&env, doomed, "other_message").await;
        let mut c = env.proxy_conn().await;
        for sql in &statements {
            exec(&mut c, sql)
                .await
                .unwrap_or_else(|e| panic!("{what}: {sql}: {e:?}"));
        }
        let db: Option<Option<String>> = c
            .query_first("SELECT DATABASE()")
            .await
            .expect("database()");
        assert_eq!(db, Some(None), "{what}: the server's database");
        match exec(&mut c, "ACK m1 1").await {
            Err(Failure::Server { code, state, .. }) => assert_eq!(
                (code, state.as_str()),
                (1046, "3D000"),
                "{what}: ACK m1 1 with no database selected"
            ),
            other => panic!("{what}: ACK m1 1 with no database selected: {other:?}"),
        }
        // STREAM says the same.
        match exec(&mut c, "STREAM * FROM m1").await {
            Err(f) => assert_eq!(f.code(), Some(1046), "{what}: STREAM: {f:?}"),
            Ok(_) => panic!("{what}: STREAM * FROM m1 with no database selected succeeded"),
        }
        let _ = c.disconnect().await;
    }
}

#[tokio::test]
async fn stream_follows_a_use_in_a_multi_statement_query() {
    let env = Env::new("msg_curdb_stream").await;
    let other = "msg_curdb_stream_other";
    two_databases(&env, other).await;
    let before = format!("SELECT 1; USE {other}");
    let stream = super::harness::Stream::open_with(
        env.proxy.port(),
        &env.db,
        &[before.as_str()],
        "STREAM * FROM m1",
    )
    .await
    .unwrap_or_else(|e| panic!("STREAM after `{before}`: {e:?}\n{}", env.log()));
    assert_eq!(
        stream.column_names(),
        ["id", "other_message"],
        "the stream reads {other}.m1"
    );
    stream.close();
}

/// The proxy asks the server only when it is unsure: a session that never changes its database
/// keeps acking (and the answer stays right after a plain `USE`, which the proxy reads itself).
#[tokio::test]
async fn a_known_database_needs_no_question() {
    let env = Env::new("msg_curdb_known").await;
    let other = "msg_curdb_known_other";
    two_databases(&env, other).await;
    let mut c = connect(env.proxy.port(), &env.db).await;
    assert_eq!(exec(&mut c, "ACK m1 1").await, Ok(1));
    exec(&mut c, &format!("USE `{other}`")).await.expect("use");
    assert_eq!(exec(&mut c, "ACK m1 2").await, Ok(1));
    assert_eq!(acked_in(&env, other, 1).await, [env.db.as_str()]);
    assert_eq!(acked_in(&env, other, 2).await, [other]);
    // A USE that fails changes nothing.
    assert!(exec(&mut c, "USE no_such_database_here").await.is_err());
    assert_eq!(exec(&mut c, "ACK m1 3").await, Ok(1));
    assert_eq!(acked_in(&env, other, 3).await, [other]);
    let _ = c.disconnect().await;
    // A client without a database at all.
    let mut c = Conn::new(opts(env.proxy.port(), "root", None, None))
        .await
        .expect("connect");
    match exec(&mut c, "ACK m1 4").await {
        Err(f) => assert_eq!(f.code(), Some(1046), "{f:?}"),
        Ok(n) => panic!("ACK without a database: {n}"),
    }
    let _ = c.disconnect().await;
}

/// Statements in a version-gated executable comment run only on a server that new (and MariaDB
/// skips some MySQL versions too): `/*M!999999 USE other */` changes nothing on this server, and
/// neither does `/*M!999999 ACK m1 1 */`; the same with a version the server has runs (QA: the
/// proxy ran both, and a following unqualified ACK acked the other database's row).
#[tokio::test]
async fn version_gated_comments_run_as_the_server_runs_them() {
    let env = Env::new("msg_curdb_gate").await;
    let other = "msg_curdb_gate_other";
    two_databases(&env, other).await;
    let mut c = env.proxy_conn().await;
    assert_eq!(
        exec(&mut c, &format!("/*M!999999 USE {other} */")).await,
        Ok(0)
    );
    let db: Option<String> = c.query_first("SELECT DATABASE()").await.expect("db");
    assert_eq!(
        db.as_deref(),
        Some(env.db.as_str()),
        "the server skipped the USE"
    );
    assert_eq!(exec(&mut c, "ACK m1 1").await, Ok(1));
    assert_eq!(acked_in(&env, other, 1).await, [env.db.as_str()]);
    // Skipped: nothing acked.
    assert_eq!(exec(&mut c, "/*M!999999 ACK m1 2 */").await, Ok(0));
    assert_eq!(exec(&mut c, "/*!99999 ACK m1 2 */").await, Ok(0));
    assert!(acked_in(&env, other, 2).await.is_empty());
    // Run: every MariaDB is past 5.0.0 and 10.0.0.
    assert_eq!(exec(&mut c, "/*!50000 ACK m1 3 */").await, Ok(1));
    assert_eq!(exec(&mut c, "/*M!100000 ACK m1 4 */").await, Ok(1));
    assert_eq!(acked_in(&env, other, 4).await, [env.db.as_str()]);
    assert_eq!(
        exec(&mut c, &format!("/*M!100000 USE {other} */")).await,
        Ok(0)
    );
    assert_eq!(exec(&mut c, "ACK m1 5").await, Ok(1));
    assert_eq!(acked_in(&env, other, 5).await, [other.to_string()]);
    let _ = c.disconnect().await;
}
