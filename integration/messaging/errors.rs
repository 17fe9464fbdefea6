//! What `STREAM` and `ACK` answer when they cannot work, that the session goes on after each
//! error, and when tables become (or stop being) message tables.

use mysql_async::prelude::*;
use mysql_async::Conn;

use super::harness::{comment, exec, secs, Env, Stream};
use crate::support::Failure;

/// The start of a syntax error in msgproxy's own statement: how it is written, then MariaDB's
/// `near '...' at line N`.
fn syntax(usage: &str) -> String {
    format!(
        "You have an error in your SQL syntax; msgproxy expects {usage}; check the statement near "
    )
}

/// Runs `sql` on `conn`, which must fail; then the same connection must still answer SELECT 1.
async fn fails(conn: &mut Conn, sql: &str) -> Failure {
    let failure = match exec(conn, sql).await {
        Ok(n) => panic!("{sql}: expected an error, got OK ({n} rows affected)"),
        Err(f) => f,
    };
    let one: Result<Option<i64>, _> = conn.query_first("SELECT 1").await;
    assert_eq!(
        one.map_err(|e| e.to_string()),
        Ok(Some(1)),
        "after the error of {sql} ({failure:?}) the session must go on"
    );
    failure
}

fn server_error(f: &Failure) -> (u16, String, String) {
    match f {
        Failure::Server {
            code,
            state,
            message,
        } => (*code, state.clone(), message.clone()),
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[tokio::test]
async fn errors_name_the_table_and_the_reason_and_the_session_goes_on() {
    let env = Env::new("msg_errors").await;
    let required = "vt_ack_wait=1,vt_purge_after=1,vt_batch_size=1,vt_poller_interval=1";
    let cols = "id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
                message varchar(10)";
    env.ddl("create table plain(id bigint primary key, x int)")
        .await;
    env.ddl(&format!(
        "create table no_cache({cols}) comment 'vitess_message,{required}'"
    ))
    .await;
    env.ddl(&format!(
        "create table no_epoch(id bigint primary key, time_next bigint, time_acked bigint, \
         message varchar(10)) comment '{}'",
        comment("1", 1, "1", "")
    ))
    .await;
    env.ddl(&format!(
        "create table no_acked(id bigint primary key, time_next bigint, epoch bigint, \
         message varchar(10)) comment '{}'",
        comment("1", 1, "1", "")
    ))
    .await;
    env.ddl(&format!(
        "create table unknown_opt({cols}) comment '{}'",
        comment("1", 1, "1", ",vt_bogus_option=3")
    ))
    .await;
    env.ddl(&format!(
        "create table cols_without_id({cols}) comment '{}'",
        comment("1", 1, "1", ",vt_message_cols=message|id")
    ))
    .await;
    env.ddl(&format!(
        "create table id_on_update(id timestamp(6) not null default current_timestamp(6) \
         on update current_timestamp(6) primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(10)) comment '{}'",
        comment("1", 1, "1", "")
    ))
    .await;

    let mut c = env.proxy_conn().await;
    let mut d = env.direct_conn().await;
    let mut problems = Vec::new();

    // A missing table: the server's own error, word for word.
    let direct_missing = server_error(&fails(&mut d, "SELECT 1 FROM missing").await);
    assert_eq!(direct_missing.0, 1146);
    for sql in ["STREAM * FROM missing", "ACK missing 1"] {
        let got = server_error(&fails(&mut c, sql).await);
        if got != direct_missing {
            problems.push(format!("{sql}: got {got:?}, expected {direct_missing:?}"));
        }
    }

    // Not a message table / not a usable one: 1347 naming the table and what is wrong.
    let cases: &[(&str, &[&str])] = &[
        ("plain", &["plain", "message table"]),
        ("no_cache", &["no_cache", "vt_cache_size"]),
        ("no_epoch", &["no_epoch", "epoch"]),
        ("no_acked", &["no_acked", "time_acked"]),
        ("unknown_opt", &["unknown_opt", "vt_bogus_option"]),
        ("cols_without_id", &["cols_without_id", "vt_message_cols"]),
        (
            "id_on_update",
            &["id_on_update", "ON UPDATE CURRENT_TIMESTAMP"],
        ),
    ];
    for (table, words) in cases {
        for sql in [format!("STREAM * FROM {table}"), format!("ACK {table} 1")] {
            let (code, _, message) = server_error(&fails(&mut c, &sql).await);
            let missing: Vec<&&str> = words.iter().filter(|w| !message.contains(**w)).collect();
            if code != 1347 || !missing.is_empty() {
                problems.push(format!(
                    "{sql}: got {code} {message:?}; expected 1347 mentioning {words:?}"
                ));
            }
        }
    }

    // Malformed statements: 1064 saying how the statement is written, with the position in the
    // server's words.
    const STREAM: &str = "STREAM {* | column[, column ...]} FROM table [WHERE condition]";
    const ACK: &str = "ACK table id[, id ...]";
    let malformed: &[(&str, &str, &str)] = &[
        ("STREAM * FORM t", STREAM, "'FORM t' at line 1"),
        ("ACK t", ACK, "'' at line 1"),
        ("ACK t 1,", ACK, "'' at line 1"),
        ("STREAM *\nFROM t\nLIMIT 1", STREAM, "'LIMIT 1' at line 3"),
    ];
    for (sql, usage, near) in malformed {
        let (code, state, message) = server_error(&fails(&mut c, sql).await);
        let want = format!("{}{near}", syntax(usage));
        if (code, state.as_str(), message.as_str()) != (1064, "42000", want.as_str()) {
            problems.push(format!(
                "{sql:?}: got {code} {state} {message:?}; expected 1064 42000 {want:?}"
            ));
        }
    }

    // Vitess clients send this first.
    match exec(&mut c, "SET workload='olap'").await {
        Ok(_) => {}
        Err(f) => problems.push(format!("SET workload='olap': {f:?}")),
    }
    let one: Option<i64> = c.query_first("SELECT 1").await.expect("SELECT 1");
    assert_eq!(one, Some(1));
    assert!(
        problems.is_empty(),
        "{} problems:\n  {}\n--- proxy log ---\n{}",
        problems.len(),
        problems.join("\n  "),
        env.log()
    );
    // The whole log: every proxy logs every broken table on the server, and the other tests'
    // can push this one out of the tail.
    let log = std::fs::read_to_string(env.proxy.log_path()).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("no_cache") && l.contains("vt_cache_size")),
        "the proxy should log one clear line naming the broken table and the missing option:\n{}",
        env.log()
    );
}

/// `SET workload='olap'` first, a comment after STREAM, a schema-qualified name from a session
/// whose current database is another one: all as in MESSAGING.md §3.
#[tokio::test]
async fn vitess_client_forms_work() {
    let env = Env::new("msg_client_forms").await;
    env.ddl(&format!(
        "create table vitess_message(id bigint primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(20)) comment '{}'",
        comment("5", 10, "1", "")
    ))
    .await;
    let mut stream = Stream::open_with(
        env.proxy.port(),
        "test",
        &["SET workload='olap'"],
        "STREAM /* comment */ * FROM msg_client_forms.vitess_message",
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}\n{}", env.log()));
    assert_eq!(stream.column_names(), vec!["id", "message"]);
    env.via_proxy("insert into vitess_message(id, message) values (1, 'hi')")
        .await;
    assert_eq!(stream.recv(secs(2.0)).await.map(|m| m.id), Some(1));
    let mut c = super::harness::connect(env.proxy.port(), "test").await;
    assert_eq!(
        exec(&mut c, "ack msg_client_forms.vitess_message 1").await,
        Ok(1),
        "a qualified ACK from another database"
    );
}

/// MariaDB Connector/J with a query timeout sends every statement as `SET STATEMENT
/// max_statement_time=N FOR ...`: STREAM, ACK and SHOW MESSAGE TABLES work inside it (the server
/// got them and said 1064), and an UPDATE or ALTER inside it still counts as one.
#[tokio::test]
async fn statements_wrapped_in_set_statement_work() {
    let env = Env::new("msg_set_statement").await;
    env.ddl(&format!(
        "create table wrapped(id bigint primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(20)) comment '{}'",
        comment("30", 10, "1", "")
    ))
    .await;
    let mut stream = Stream::open_with(
        env.proxy.port(),
        "msg_set_statement",
        &[],
        "SET STATEMENT max_statement_time=5 FOR STREAM * FROM wrapped",
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}\n{}", env.log()));
    env.via_proxy("insert into wrapped(id, message) values (1, 'a'), (2, 'b')")
        .await;
    let mut got = vec![];
    while got.len() < 2 {
        let m = stream
            .recv(secs(5.0))
            .await
            .unwrap_or_else(|| panic!("got {got:?}\n{}", env.log()));
        got.push(m.id);
    }
    let mut c = env.proxy_conn().await;
    assert_eq!(
        exec(
            &mut c,
            "SET STATEMENT max_statement_time=5 FOR ACK wrapped 1"
        )
        .await,
        Ok(1)
    );
    assert_eq!(
        exec(
            &mut c,
            "set statement max_statement_time=5, sql_mode='' for \
             update wrapped set time_acked = 1, time_next = null where id = 2"
        )
        .await,
        Ok(1)
    );
    let tables: Vec<mysql_async::Row> = c
        .query("SET STATEMENT max_statement_time=5 FOR SHOW MESSAGE TABLES")
        .await
        .expect("SHOW MESSAGE TABLES in SET STATEMENT");
    assert!(!tables.is_empty());
    // DDL inside the wrapper reloads the table before its OK, as DDL does.
    exec(
        &mut c,
        "SET STATEMENT max_statement_time=5 FOR ALTER TABLE wrapped COMMENT 'not a queue'",
    )
    .await
    .expect("ALTER in SET STATEMENT");
    let failure = fails(&mut c, "ACK wrapped 3").await;
    assert!(
        format!("{failure:?}").contains("not a message table"),
        "{failure:?}"
    );
}

/// DDL through the proxy takes effect at once; a table created straight on the server is found
/// by the periodic reload (every 10 s).
#[tokio::test]
async fn schema_changes_are_picked_up() {
    let env = Env::new("msg_schema").await;
    let cols = "id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
                message varchar(20)";
    env.ddl(&format!("create table later({cols})")).await;
    let mut c = env.proxy_conn().await;
    assert_eq!(
        fails(&mut c, "STREAM * FROM later").await.code(),
        Some(1347),
        "not a message table yet"
    );
    env.ddl(&format!(
        "alter table later comment '{}'",
        comment("5", 10, "1", "")
    ))
    .await;
    let mut s = env.stream("later").await;
    env.via_proxy("insert into later(id, message) values (1, 'altered')")
        .await;
    assert_eq!(s.recv(secs(2.0)).await.map(|m| m.id), Some(1));
    s.close();
    env.ddl(
        "alter table later comment \
         'vitess_message,vt_ack_wait=1,vt_purge_after=1,vt_batch_size=1,vt_poller_interval=1'",
    )
    .await;
    let f = fails(&mut c, "STREAM * FROM later").await;
    assert!(
        matches!(&f, Failure::Server { code: 1347, message, .. } if message.contains("vt_cache_size")),
        "after ALTER drops vt_cache_size: {f:?}"
    );
    env.ddl("drop table later").await;
    assert_eq!(
        fails(&mut c, "STREAM * FROM later").await.code(),
        Some(1146)
    );

    // Created behind the proxy's back: loaded by the next periodic reload.
    let created = std::time::Instant::now();
    env.direct(&format!(
        "create table behind({cols}) comment '{}'",
        comment("5", 10, "1", "")
    ))
    .await;
    let mut stream = None;
    while created.elapsed() < secs(12.0) {
        match Stream::open(env.proxy.port(), &env.db, "STREAM * FROM behind").await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(Failure::Server { code: 1347, .. }) => {
                // Retry pace until the deadline above, not a wait for something.
                tokio::time::sleep(secs(0.5)).await;
            }
            Err(other) => panic!("STREAM * FROM behind: {other:?}"),
        }
    }
    let mut stream = stream.unwrap_or_else(|| {
        panic!(
            "a message table created straight on the server was not loaded within 12 s\n{}",
            env.log()
        )
    });
    eprintln!(
        "table created on the server loaded after {:?}",
        created.elapsed()
    );
    env.direct("insert into behind(id, message) values (7, 'behind')")
        .await;
    assert_eq!(stream.recv(secs(2.5)).await.map(|m| m.id), Some(7));
}

/// DDL through the proxy takes effect before its OK: another session can stream from (and ack
/// in) a table the moment the CREATE/ALTER that made it a message table has been answered.
#[tokio::test]
async fn ddl_through_the_proxy_is_visible_to_other_sessions() {
    let env = Env::new("msg_ddl_at_once").await;
    let cols = "id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
                message varchar(20)";
    let mut ddl = env.proxy_conn().await;
    let mut other = env.proxy_conn().await;
    let mut problems = Vec::new();
    exec(
        &mut ddl,
        &format!(
            "create table t({cols}) comment '{}'",
            comment("5", 10, "1", "")
        ),
    )
    .await
    .expect("create");
    if let Err(f) = exec(&mut other, "ACK t 1").await {
        problems.push(format!("ACK right after CREATE: {f:?}"));
    }
    exec(&mut ddl, &format!("create table u({cols})"))
        .await
        .expect("create");
    exec(
        &mut ddl,
        &format!("alter table u comment '{}'", comment("5", 10, "1", "")),
    )
    .await
    .expect("alter");
    match Stream::open(env.proxy.port(), &env.db, "STREAM * FROM u").await {
        Ok(s) => s.close(),
        Err(f) => problems.push(format!("STREAM right after ALTER ... COMMENT: {f:?}")),
    }
    exec(&mut ddl, "drop table t").await.expect("drop");
    match exec(&mut other, "ACK t 1").await {
        Err(Failure::Server { code: 1146, .. }) => {}
        other => problems.push(format!(
            "ACK right after DROP TABLE: expected 1146, got {other:?}"
        )),
    }
    assert!(
        problems.is_empty(),
        "the DDL's OK came before the proxy had loaded the change:\n  {}",
        problems.join("\n  ")
    );
}

/// MESSAGING.md §8: a stream keeps working while its table is altered straight on the server, as
/// long as its own columns exist. Dropping `priority` (which a stream does not return) while
/// claims are running must not end the stream.
#[tokio::test]
async fn dropping_priority_behind_the_proxy_keeps_streams_open() {
    let env = Env::new("msg_drop_prio").await;
    env.ddl(&format!(
        "create table dp(id bigint primary key, priority int, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) comment '{}'",
        comment("30", 1, "1", "")
    ))
    .await;
    let rows: Vec<String> = (1..=400)
        .map(|i| format!("({i}, {}, 'm{i}')", i % 7))
        .collect();
    env.direct(&format!(
        "insert into dp(id, priority, message) values {}",
        rows.join(", ")
    ))
    .await;
    let mut stream = env.stream("dp").await;
    let mut got = std::collections::BTreeSet::new();
    // One message per claim (vt_batch_size=1): claims are running when the column goes.
    while got.len() < 20 {
        match stream.recv_or_end(secs(5.0)).await {
            Ok(Some(m)) => {
                got.insert(m.id);
            }
            Ok(None) => panic!("no message within 5 s\n{}", env.log()),
            Err(e) => panic!("the stream ended before the ALTER: {e}"),
        }
    }
    env.direct("alter table dp drop column priority").await;
    while got.len() < 400 {
        match stream.recv_or_end(secs(8.0)).await {
            Ok(Some(m)) => {
                got.insert(m.id);
            }
            Ok(None) => panic!(
                "{} of 400 messages, then nothing for 8 s\n{}",
                got.len(),
                env.log()
            ),
            Err(e) => panic!(
                "the stream ended after `priority` was dropped ({} of 400 received): {e}",
                got.len()
            ),
        }
    }
}
