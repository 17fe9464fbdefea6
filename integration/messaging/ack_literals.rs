//! Quoted `ACK` ids mean what the session's server reads them as, in every `sql_mode`, and never
//! become SQL (QA's t_nbe.py): the proxy decodes each to its value and names it in hex.

use std::collections::BTreeMap;

use mysql_async::prelude::*;

use super::harness::{comment, exec, now_ns, Env};
use crate::support::Failure;

/// `time_acked` of every row, by id.
async fn acked(env: &Env, table: &str) -> BTreeMap<String, Option<i64>> {
    let mut c = env.direct_conn().await;
    let rows: Vec<(String, Option<i64>)> = c
        .query(format!("select id, time_acked from {table}"))
        .await
        .expect("read rows");
    let _ = c.disconnect().await;
    rows.into_iter().collect()
}

fn syntax_error(got: Result<u64, Failure>, what: &str) -> String {
    match got {
        Err(Failure::Server {
            code,
            state,
            message,
        }) => {
            assert_eq!((code, state.as_str()), (1064, "42000"), "{what}: {message}");
            message
        }
        other => panic!("{what}: a syntax error expected, got {other:?}"),
    }
}

#[tokio::test]
async fn quoted_ids_under_every_sql_mode() {
    let env = Env::new("msg_ack_literals").await;
    env.ddl(&format!(
        "create table ms(id varchar(40) primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(20)) comment '{}'",
        comment("30", 10, "30", "")
    ))
    .await;
    // `done` is acked already (recently: the purge must not take it); `c\` ends in a backslash;
    // `x'y` holds a quote.
    let done_at = now_ns();
    env.direct(&format!(
        r"insert into ms(id, time_acked) values ('a', NULL), ('b', NULL), ('zz', NULL),
          ('c\\', NULL), ('x''y', NULL), ('q\\n', NULL), ('nl\n', NULL), ('é', NULL),
          ('done', {done_at})"
    ))
    .await;
    let before = acked(&env, "ms").await;
    let mut c = env.proxy_conn().await;

    // QA's injection: under NO_BACKSLASH_ESCAPES the string ends at its second quote, so the
    // server would read `) OR 1=1 -- '` as SQL. It is a syntax error, and nothing is touched.
    exec(&mut c, "SET sql_mode='NO_BACKSLASH_ESCAPES'")
        .await
        .expect("set sql_mode");
    let message = syntax_error(
        exec(&mut c, r"ACK ms 'zz\') OR 1=1 -- '").await,
        "the injection",
    );
    assert!(message.contains("near ') OR 1=1 -- ''"), "{message}");
    assert_eq!(
        acked(&env, "ms").await,
        before,
        "the injection changed rows"
    );

    // Under NO_BACKSLASH_ESCAPES a backslash is itself: `'c\'` is the id `c\`, `'q\n'` is `q\n`.
    assert_eq!(exec(&mut c, r"ACK ms 'c\'").await, Ok(1), "ACK ms 'c\\'");
    assert_eq!(exec(&mut c, r"ACK ms 'q\n', 'x''y'").await, Ok(2));
    // Acking again, or an already acked row, changes nothing.
    assert_eq!(exec(&mut c, r"ACK ms 'c\', 'done'").await, Ok(0));

    // ANSI_QUOTES: a double-quoted id is still a string, not a column.
    exec(&mut c, "SET sql_mode='ANSI_QUOTES'")
        .await
        .expect("set sql_mode");
    assert_eq!(exec(&mut c, r#"ACK ms "a""#).await, Ok(1), r#"ACK ms "a""#);

    // The default mode: backslash escapes work as before.
    exec(&mut c, "SET sql_mode=DEFAULT")
        .await
        .expect("set sql_mode");
    assert_eq!(exec(&mut c, r"ACK ms 'nl\n', 'b'").await, Ok(2));
    syntax_error(exec(&mut c, r"ACK ms 'c\'").await, "an open string");
    // Non-ASCII, in the client's character set.
    assert_eq!(exec(&mut c, "ACK ms 'é'").await, Ok(1));
    let _ = c.disconnect().await;

    let after = acked(&env, "ms").await;
    assert_eq!(after["done"], Some(done_at), "an acked row was acked again");
    assert_eq!(after["zz"], None, "the injection's id was acked");
    for id in ["a", "b", r"c\", "x'y", r"q\n", "nl\n", "é"] {
        assert!(
            after[id].is_some_and(|t| t >= done_at),
            "{id:?} not acked: {after:?}"
        );
    }
}

/// Other id types: numbers are still passed on as written, strings are compared as the
/// server compares the client's own literal (a latin1 column, a number in quotes).
#[tokio::test]
async fn quoted_ids_of_other_types() {
    let env = Env::new("msg_ack_literal_types").await;
    for (table, id_type) in [
        ("mn", "bigint"),
        (
            "ml",
            "varchar(10) character set latin1 collate latin1_general_cs",
        ),
        ("mb", "varbinary(10)"),
    ] {
        env.ddl(&format!(
            "create table {table}(id {id_type} primary key, time_next bigint, epoch bigint,
               time_acked bigint) comment '{}'",
            comment("30", 10, "30", "")
        ))
        .await;
    }
    env.direct("insert into mn(id) values (1), (2), (3), (4), (5), (6), (9007199254740993)")
        .await;
    env.direct("insert into ml(id) values ('é'), ('A'), ('b\\\\')")
        .await;
    env.direct("insert into mb(id) values ('k'), (x'00ff')")
        .await;
    let mut c = env.proxy_conn().await;
    exec(&mut c, "SET sql_mode='NO_BACKSLASH_ESCAPES'")
        .await
        .expect("set sql_mode");
    assert_eq!(exec(&mut c, "ACK mn 1, -0, 0x2, b'11'").await, Ok(3));
    assert_eq!(exec(&mut c, "ACK mn '4', ' 5'").await, Ok(2));
    assert_eq!(exec(&mut c, "ACK mn '9007199254740993'").await, Ok(1));
    assert_eq!(exec(&mut c, "ACK ml 'é', 'a', 'b\\'").await, Ok(2));
    assert_eq!(exec(&mut c, "ACK mb 'k', X'00FF'").await, Ok(2));
    let _ = c.disconnect().await;
    let mut d = env.direct_conn().await;
    let unacked: Vec<String> = d
        .query(
            "select concat('mn:', id) from mn where time_acked is null
             union all select concat('ml:', id) from ml where time_acked is null
             union all select concat('mb:', hex(id)) from mb where time_acked is null",
        )
        .await
        .expect("read rows");
    assert_eq!(unacked, ["mn:6", "ml:A"]);
    let _ = d.disconnect().await;
}

/// Ids after a character set introducer, as drivers send byte arrays: the Go driver with
/// `interpolateParams` writes `_binary'..'` (backslash escapes, or doubled quotes under
/// NO_BACKSLASH_ESCAPES), Connector/J `_binary '..'`. QA found every such ACK refused with 1064.
#[tokio::test]
async fn ids_with_a_character_set_introducer() {
    let env = Env::new("msg_ack_introducers").await;
    env.ddl(&format!(
        "create table mb(id varbinary(40) primary key, time_next bigint, epoch bigint,
           time_acked bigint, message varchar(20)) comment '{}'",
        comment("30", 10, "30", "")
    ))
    .await;
    env.direct(
        r"insert into mb(id) values ('k1'), ('k2'), (X'6B00270A'), ('a''b'), ('é'), ('hex')",
    )
    .await;
    let mut c = env.proxy_conn().await;
    assert_eq!(exec(&mut c, "ACK mb _binary'k1'").await, Ok(1));
    assert_eq!(
        exec(&mut c, "ACK mb _binary 'k2', _binary'k1'").await,
        Ok(1)
    );
    // NUL, quote and newline escaped as the Go driver escapes them.
    assert_eq!(exec(&mut c, r"ACK mb _binary'k\0\'\n'").await, Ok(1));
    assert_eq!(
        exec(&mut c, "ACK mb _utf8mb4'é', _binary X'686578'").await,
        Ok(2)
    );
    exec(&mut c, "SET sql_mode='NO_BACKSLASH_ESCAPES'")
        .await
        .expect("set sql_mode");
    assert_eq!(exec(&mut c, "ACK mb _binary'a''b'").await, Ok(1));
    let _ = c.disconnect().await;
    let after = acked_bytes(&env, "mb").await;
    assert!(
        after.values().all(Option::is_some),
        "every row acked: {after:?}"
    );
}

/// `time_acked` of every row, by id as bytes.
async fn acked_bytes(env: &Env, table: &str) -> BTreeMap<Vec<u8>, Option<i64>> {
    let mut c = env.direct_conn().await;
    let rows: Vec<(Vec<u8>, Option<i64>)> = c
        .query(format!("select id, time_acked from {table}"))
        .await
        .expect("read rows");
    let _ = c.disconnect().await;
    rows.into_iter().collect()
}
