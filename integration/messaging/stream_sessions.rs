//! What a `STREAM` does to the session it runs on: it refuses to run inside the client's
//! transaction (its claims would commit it), holds no table lock while it waits, whatever the
//! session's `autocommit` and `completion_type`, and ends with an error — leaving the messages due
//! — when its session cannot claim (`READ ONLY`) or its columns change under it.

use super::harness::{comment, exec, ids, secs, Env, Stream};
use crate::support::Failure;

const COLUMNS: &str =
    "id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, message varchar(20)";

async fn message_table(env: &Env, name: &str) {
    env.ddl(&format!(
        "create table {name}({COLUMNS}) comment '{}'",
        comment("30", 10, "1", "")
    ))
    .await;
}

fn code_of(f: &Failure) -> Option<u16> {
    match f {
        Failure::Server { code, .. } => Some(*code),
        Failure::Client(_) => None,
    }
}

/// `BEGIN; INSERT ...; STREAM` used to commit the INSERT (the first claim's `START TRANSACTION`
/// does) and send it; now STREAM is refused with 1179 and the client's transaction is untouched.
#[tokio::test]
async fn a_stream_inside_a_transaction_is_refused_and_the_transaction_kept() {
    let env = Env::new("msg_stream_in_txn").await;
    message_table(&env, "q").await;
    let mut c = env.proxy_conn().await;
    exec(&mut c, "BEGIN").await.expect("BEGIN");
    exec(
        &mut c,
        "insert into q(id, message) values (1, 'uncommitted')",
    )
    .await
    .expect("insert");
    let refused = exec(&mut c, "STREAM * FROM q").await;
    match &refused {
        Err(Failure::Server {
            code,
            state,
            message,
        }) => {
            assert_eq!((*code, state.as_str()), (1179, "25000"), "{message}");
            assert!(message.contains("COMMIT or ROLLBACK first"), "{message}");
        }
        other => panic!("STREAM in a transaction: expected 1179, got {other:?}"),
    }
    exec(&mut c, "ROLLBACK").await.expect("ROLLBACK");
    assert!(
        env.states("q").await.is_empty(),
        "the client's rolled-back INSERT must not have been committed"
    );
    // Out of the transaction, the same session streams.
    let mut stream = Stream::open_with(
        env.proxy.port(),
        &env.db,
        &["BEGIN", "ROLLBACK"],
        "STREAM * FROM q",
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}\n{}", env.log()));
    env.via_proxy("insert into q(id, message) values (2, 'committed')")
        .await;
    assert_eq!(stream.recv(secs(2.0)).await.map(|m| m.id), Some(2));
}

/// With autocommit off (PyMySQL's and mysqlclient's default), the stream's column query used to
/// leave a transaction open that held the table's metadata lock until the first message: an
/// ALTER waited for it, and every write to the table waited behind the ALTER.
#[tokio::test]
async fn an_idle_stream_with_autocommit_off_holds_no_table_lock() {
    let env = Env::new("msg_stream_mdl").await;
    message_table(&env, "q").await;
    let mut stream = Stream::open_with(
        env.proxy.port(),
        &env.db,
        &["SET autocommit = 0"],
        "STREAM * FROM q",
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}\n{}", env.log()));
    let mut direct = env.direct_conn().await;
    exec(&mut direct, "SET SESSION lock_wait_timeout = 3")
        .await
        .expect("set lock_wait_timeout");
    let altered = exec(&mut direct, "alter table q add column extra int").await;
    assert!(
        altered.is_ok(),
        "ALTER beside an idle stream: {altered:?} (code {:?})",
        altered.as_ref().err().and_then(code_of)
    );
    env.via_proxy("insert into q(id, message) values (1, 'after the alter')")
        .await;
    assert_eq!(stream.recv(secs(2.0)).await.map(|m| m.id), Some(1));
    // The stream's own claims leave no transaction open either.
    let altered = exec(&mut direct, "alter table q drop column extra").await;
    assert!(altered.is_ok(), "ALTER after a claim: {altered:?}");
}

/// `completion_type = 2` makes a bare COMMIT disconnect; the claims' COMMITs say `NO RELEASE`.
#[tokio::test]
async fn completion_type_release_does_not_end_a_stream() {
    let env = Env::new("msg_stream_release").await;
    message_table(&env, "q").await;
    let mut stream = Stream::open_with(
        env.proxy.port(),
        &env.db,
        &["SET completion_type = 2"],
        "STREAM * FROM q",
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}\n{}", env.log()));
    for id in 1..=3 {
        env.via_proxy(&format!("insert into q(id, message) values ({id}, 'm')"))
            .await;
        match stream.recv_or_end(secs(2.0)).await {
            Ok(Some(m)) => assert_eq!(m.id, id),
            other => panic!("message {id}: {other:?}\n{}", env.log()),
        }
    }
}

/// A stream whose session cannot write (`SET SESSION TRANSACTION READ ONLY`) used to show its
/// columns and then nothing, retrying its claim four times a second for ever; now it ends with
/// the server's error at its first claim, the message stays due for other streams, and the
/// session goes on as after any failed statement (it used to be closed: QA's JDBC
/// `setReadOnly(true)` client then failed its next call with "socket was closed by server").
#[tokio::test]
async fn a_read_only_session_stream_ends_with_the_servers_error() {
    use mysql_async::prelude::*;
    let env = Env::new("msg_stream_read_only").await;
    message_table(&env, "q").await;
    let mut c = env.proxy_conn().await;
    c.query_drop("SET SESSION TRANSACTION READ ONLY")
        .await
        .expect("READ ONLY");
    let mut result = c.query_iter("STREAM * FROM q").await.expect("STREAM");
    env.via_proxy("insert into q(id, message) values (1, 'm')")
        .await;
    match tokio::time::timeout(secs(3.0), result.next()).await {
        Ok(Err(e)) => assert_eq!(code_of(&Failure::of(&e)), Some(1792), "{e}"),
        other => panic!("expected the stream to end with 1792, got {other:?}"),
    }
    drop(result);
    let one: Option<i64> = c.query_first("SELECT 1").await.expect("SELECT 1 after");
    assert_eq!(one, Some(1), "the session goes on after the failed stream");
    let mut other = env.stream("q").await;
    assert_eq!(
        other.recv(secs(3.0)).await.map(|m| m.id),
        Some(1),
        "the message stays due for a stream that can claim it"
    );
}

/// A column whose type changes while a stream is open (here its length) used to reach the
/// client as values under the old column definition; now the stream ends with 1412 at its next
/// claim, before claiming anything, and a new stream gets the message with the new definition.
#[tokio::test]
async fn a_stream_ends_when_its_columns_change() {
    let env = Env::new("msg_stream_altered").await;
    message_table(&env, "q").await;
    let mut stream = env.stream("q").await;
    env.via_proxy("insert into q(id, message) values (1, 'before')")
        .await;
    assert_eq!(stream.recv(secs(2.0)).await.map(|m| m.id), Some(1));
    env.ddl("alter table q modify message varchar(200)").await;
    env.via_proxy("insert into q(id, message) values (2, 'after')")
        .await;
    match stream.recv_or_end(secs(3.0)).await {
        Err(why) => assert!(why.contains("1412") && why.contains("message"), "{why}"),
        Ok(m) => panic!("expected the stream to end with 1412, got {m:?}"),
    }
    assert_eq!(
        env.state("q", 2).await.epoch.unwrap_or(0),
        0,
        "the message was not claimed"
    );
    let mut again = env.stream("q").await;
    assert_eq!(again.recv(secs(3.0)).await.map(|m| m.id), Some(2));
}

/// `KILL QUERY id` through msgproxy (what the `mariadb` client sends on Ctrl-C) ends a stream
/// on that connection with 1317, as the server ends a killed statement, and the session goes
/// on. It used to change nothing: the stream waits between claims with no statement running on
/// the server, which only notes the KILL.
#[tokio::test]
async fn kill_query_ends_a_stream_and_the_session_goes_on() {
    use mysql_async::prelude::*;
    let env = Env::new("msg_stream_kill_query").await;
    message_table(&env, "q").await;
    let mut c = env.proxy_conn().await;
    let connection = c.id();
    let mut result = c.query_iter("STREAM * FROM q").await.expect("STREAM");
    env.via_proxy("insert into q(id, message) values (1, 'm')")
        .await;
    let row = tokio::time::timeout(secs(3.0), result.next())
        .await
        .expect("a message within 3 s")
        .expect("a row");
    assert!(row.is_some(), "the stream ended early");
    env.via_proxy(&format!("KILL QUERY {connection}")).await;
    match tokio::time::timeout(secs(3.0), result.next()).await {
        Ok(Err(e)) => assert_eq!(code_of(&Failure::of(&e)), Some(1317), "KILL QUERY: {e}"),
        other => panic!("expected the stream to end with 1317 at once, got {other:?}"),
    }
    drop(result);
    let one: Option<i64> = c.query_first("SELECT 1").await.expect("SELECT 1 after");
    assert_eq!(
        one,
        Some(1),
        "the session goes on after the interrupted stream"
    );
}

/// A stream waiting for messages is idle on the server's side: with a `wait_timeout` shorter
/// than msgproxy's usual keepalive, the server closed its connection and the client got 1158.
/// It pings at half the session's `wait_timeout`.
#[tokio::test]
async fn an_idle_stream_outlives_a_short_wait_timeout() {
    let env = Env::new("msg_wait_timeout").await;
    message_table(&env, "m").await;
    let mut stream = Stream::open_with(
        env.proxy.port(),
        &env.db,
        &["SET SESSION wait_timeout = 2"],
        "STREAM * FROM m",
    )
    .await
    .expect("stream");
    stream.expect_quiet(secs(5.0), "nothing was sent").await;
    env.via_proxy("INSERT INTO m (id, message) VALUES (1, 'late')")
        .await;
    let got = stream.recv_or_end(secs(5.0)).await;
    assert!(
        matches!(&got, Ok(Some(m)) if ids(std::slice::from_ref(m)) == [1]),
        "{got:?}\n{}",
        env.log()
    );
    stream.close();
}

/// A prepared `KILL QUERY` (sqlx, mysql_async's `exec`, the `mysql` crate: every statement is
/// COM_STMT_PREPARE + COM_STMT_EXECUTE) ends a stream as the text form does, with the id bound
/// as a parameter or written out. QA: the server answered OK and the stream kept running.
#[tokio::test]
async fn prepared_kill_query_ends_a_stream_and_the_session_goes_on() {
    use mysql_async::prelude::*;
    let env = Env::new("msg_stream_kill_prepared").await;
    message_table(&env, "q").await;
    let mut c = env.proxy_conn().await;
    let connection = c.id();
    let mut killer = env.proxy_conn().await;
    for (round, how) in ["KILL QUERY ?", "KILL QUERY <id>"].into_iter().enumerate() {
        let mut result = c.query_iter("STREAM * FROM q").await.expect("STREAM");
        env.via_proxy(&format!("insert into q(id, message) values ({round}, 'm')"))
            .await;
        let row = tokio::time::timeout(secs(3.0), result.next())
            .await
            .expect("a message within 3 s")
            .expect("a row");
        assert!(row.is_some(), "{how}: the stream ended early");
        match how {
            "KILL QUERY ?" => killer.exec_drop(how, (connection,)).await,
            _ => {
                killer
                    .exec_drop(format!("KILL QUERY {connection}"), ())
                    .await
            }
        }
        .unwrap_or_else(|e| panic!("{how}: {e}"));
        match tokio::time::timeout(secs(3.0), result.next()).await {
            Ok(Err(e)) => assert_eq!(code_of(&Failure::of(&e)), Some(1317), "{how}: {e}"),
            other => panic!("{how}: expected the stream to end with 1317 at once, got {other:?}"),
        }
        drop(result);
        let one: Option<i64> = c.query_first("SELECT 1").await.expect("SELECT 1 after");
        assert_eq!(
            one,
            Some(1),
            "{how}: the session goes on after the interrupted stream"
        );
    }
    // A prepared connection KILL does what the text form does: the server closes the stream's
    // backend connection, and the stream ends with the proxy's 1158, its session with it.
    let mut result = c.query_iter("STREAM * FROM q").await.expect("STREAM");
    env.via_proxy("insert into q(id, message) values (9, 'm')")
        .await;
    let row = tokio::time::timeout(secs(3.0), result.next())
        .await
        .expect("a message within 3 s")
        .expect("a row");
    assert!(row.is_some(), "KILL <id>: the stream ended early");
    killer
        .exec_drop("KILL ?", (connection,))
        .await
        .expect("prepared KILL <id>");
    match tokio::time::timeout(secs(3.0), result.next()).await {
        Ok(Err(e)) => assert_eq!(code_of(&Failure::of(&e)), Some(1158), "KILL <id>: {e}"),
        other => panic!("KILL <id>: expected the stream to end with 1158, got {other:?}"),
    }
    drop(result);
    assert!(
        c.query_drop("SELECT 1").await.is_err(),
        "the killed session ended"
    );
    killer
        .query_drop("SELECT 1")
        .await
        .expect("the killer goes on");
}

/// A `STREAM` statement sent in two packets (padded past 16 MiB with a comment) is answered
/// after its last packet: the result set's sequence ids follow the client's.
#[tokio::test]
async fn a_stream_statement_of_two_packets_is_answered_in_sequence() {
    let env = Env::new("msg_stream_two_packets").await;
    message_table(&env, "m").await;
    env.via_proxy("INSERT INTO m (id, message) VALUES (1, 'a')")
        .await;
    let sql = format!("STREAM * FROM m /* {} */", "x".repeat(17 << 20));
    let mut stream = Stream::open(env.proxy.port(), &env.db, &sql)
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", env.log()));
    let got = stream.recv_or_end(secs(5.0)).await;
    assert!(
        matches!(&got, Ok(Some(m)) if ids(std::slice::from_ref(m)) == [1]),
        "{got:?}\n{}",
        env.log()
    );
    stream.close();
}
