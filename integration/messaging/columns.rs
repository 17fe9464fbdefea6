//! Which columns a stream carries, with which metadata, and how their values are encoded: always
//! exactly what the server itself says for `SELECT id, <columns> FROM t`.

use mysql_async::Value;

use super::harness::{ack, comment, ids, now_ns, secs, value_str, Env};
use crate::support::compare::column_infos;

/// MESSAGING.md §1: the RFC's table and insert, character for character (options included),
/// with the stream waiting before the insert.
#[tokio::test]
async fn rfc_table_and_insert_as_written() {
    let env = Env::new("msg_rfc").await;
    env.ddl(
        "create table vitess_message(
  id bigint, time_next bigint default 0, epoch bigint, time_acked bigint, message varchar(128),
  primary key(id), index next_idx(time_next, epoch), index ack_idx(time_acked))
comment 'vitess_message,vt_ack_wait=30,vt_purge_after=120,vt_batch_size=1,vt_cache_size=1000,vt_poller_interval=30'",
    )
    .await;
    let mut stream = env.stream("vitess_message").await;
    let server_columns = env.server_columns("id, message", "vitess_message").await;
    assert_eq!(
        column_infos(&stream.columns),
        column_infos(&server_columns),
        "STREAM column definitions (left) vs the server's for SELECT id, message (right)"
    );

    let before = now_ns();
    env.via_proxy("insert into vitess_message(id, message) values(1, 'hello world')")
        .await;
    // vt_poller_interval is 30 s: only the prompt path can deliver this in time.
    let got = stream.recv(secs(2.0)).await.unwrap_or_else(|| {
        panic!(
            "(1, 'hello world') did not arrive within 2 s of the insert\n{}",
            env.log()
        )
    });
    assert_eq!(
        got.values,
        vec![
            Value::Bytes(b"1".to_vec()),
            Value::Bytes(b"hello world".to_vec())
        ]
    );
    let state = env.state("vitess_message", 1).await;
    assert_eq!(state.epoch, Some(1), "epoch after one send: {state:?}");
    assert_eq!(state.time_acked, None, "{state:?}");
    // ack_wait 30, min_backoff = ack_wait 30: time_next = claim + 30 s + [30, 40] s.
    let next = state.time_next.expect("time_next set by the claim");
    assert!(
        next >= before + 60 * super::harness::SEC && next <= got.at_ns + 70 * super::harness::SEC,
        "time_next {} s after the insert, expected 60..70 s: {state:?}",
        (next - before) as f64 / 1e9
    );
    stream
        .expect_quiet(secs(1.0), "one message, sent once")
        .await;
}

/// The current Vitess layout, JSON payloads built with JSON_OBJECT, several rows a batch.
#[tokio::test]
async fn current_vitess_layout_with_json_payloads() {
    let env = Env::new("msg_vitess_layout").await;
    env.ddl(&format!(
        "create table my_message(
  id bigint NOT NULL COMMENT 'often an event id',
  priority tinyint NOT NULL DEFAULT '50' COMMENT 'lower number priorities process first',
  epoch bigint NOT NULL DEFAULT '0',
  time_next bigint DEFAULT 0,
  time_acked bigint DEFAULT NULL,
  tenant_id bigint COMMENT 'a nice way to segment your messages',
  message json,
  primary key(id),
  index poller_idx(time_acked, priority, time_next desc)
) comment '{}'",
        comment("1", 3, "1", ",vt_min_backoff=1,vt_max_backoff=3600")
    ))
    .await;
    let mut stream = env.stream("my_message").await;
    assert_eq!(
        column_infos(&stream.columns),
        column_infos(
            &env.server_columns("id, tenant_id, message", "my_message")
                .await
        ),
        "STREAM column definitions (left) vs the server's for SELECT id, tenant_id, message \
         (right): priority and the state columns are not user columns"
    );
    env.via_proxy(
        "insert into my_message(id, tenant_id, message) values
           (1, 7, JSON_OBJECT('event', 'created', 'n', 1)),
           (2, 7, JSON_OBJECT('event', 'updated', 'tags', JSON_ARRAY('a', 'é', 3), 'nested', JSON_OBJECT('x', NULL))),
           (3, NULL, JSON_OBJECT())",
    )
    .await;
    let got = stream.recv_n(3, secs(3.0)).await;
    let mut got_ids = ids(&got);
    got_ids.sort();
    assert_eq!(got_ids, vec![1, 2, 3]);
    for m in &got {
        let direct = env
            .select_row("id, tenant_id, message", "my_message", m.id)
            .await;
        assert_eq!(m.values, direct, "message {} vs a direct SELECT", m.id);
    }
    let first = got.iter().find(|m| m.id == 1).expect("message 1");
    assert_eq!(
        value_str(&first.values[2]),
        r#"{"event": "created", "n": 1}"#
    );
    let mut acker = env.proxy_conn().await;
    assert_eq!(ack(&mut acker, "my_message", &[1, 2, 3]).await, 3);
    stream
        .expect_quiet(
            secs(3.0),
            "all three were acked before their ack wait ran out",
        )
        .await;
}

/// User columns of several types, between and after the state columns, with and without NULLs:
/// the stream's metadata and values are the server's own for the same SELECT.
#[tokio::test]
async fn user_columns_of_many_types_match_a_direct_select() {
    let env = Env::new("msg_user_types").await;
    env.ddl(&format!(
        "create table typed(
  id bigint primary key,
  name varchar(64) character set utf8mb4,
  time_next bigint,
  qty int,
  epoch bigint,
  at datetime(6),
  time_acked bigint,
  amount decimal(10,3),
  data blob,
  flag tinyint unsigned,
  note varchar(10) null,
  ratio double
) comment '{}'",
        comment("5", 10, "1", "")
    ))
    .await;
    let mut stream = env.stream("typed").await;
    let user_cols = "id, name, qty, at, amount, data, flag, note, ratio";
    assert_eq!(
        stream.column_names(),
        vec!["id", "name", "qty", "at", "amount", "data", "flag", "note", "ratio"],
        "id, then the user columns in table order"
    );
    assert_eq!(
        column_infos(&stream.columns),
        column_infos(&env.server_columns(user_cols, "typed").await),
        "STREAM column definitions (left) vs a direct SELECT's (right)"
    );
    env.via_proxy(
        "insert into typed(id, name, qty, at, amount, data, flag, note, ratio) values
          (1, 'Grüße, 世界 🚀', -42, '2024-02-29 23:59:59.123456', -1234567.891, x'00ff0a0d5c27', 255, 'ten chars!', 1.5e-7),
          (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
          (3, '', 0, '1970-01-01 00:00:01.000000', 0.001, '', 0, '', -0.0)",
    )
    .await;
    let got = stream.recv_n(3, secs(3.0)).await;
    for m in &got {
        let direct = env.select_row(user_cols, "typed", m.id).await;
        assert_eq!(
            m.values, direct,
            "message {} (left) vs a direct SELECT (right)",
            m.id
        );
    }
    let mut got_ids = ids(&got);
    got_ids.sort();
    assert_eq!(got_ids, vec![1, 2, 3]);
    let null_row = got.iter().find(|m| m.id == 2).expect("message 2");
    assert_eq!(null_row.values[1..], vec![Value::NULL; 8][..]);
}

/// `vt_message_cols`: exactly the listed columns, in the listed order.
#[tokio::test]
async fn vt_message_cols_picks_the_columns() {
    let env = Env::new("msg_message_cols").await;
    env.ddl(&format!(
        "create table picked(id bigint primary key, tenant varchar(10), message varchar(100),
           other int, time_next bigint, epoch bigint, time_acked bigint) comment '{}'",
        comment("5", 10, "1", ",vt_message_cols=id|message")
    ))
    .await;
    env.ddl(&format!(
        "create table reordered(id bigint primary key, tenant varchar(10), message varchar(100),
           other int, time_next bigint, epoch bigint, time_acked bigint) comment '{}'",
        comment("5", 10, "1", ",vt_message_cols=id|message|tenant")
    ))
    .await;
    let mut picked = env.stream("picked").await;
    let mut reordered = env.stream("reordered").await;
    assert_eq!(picked.column_names(), vec!["id", "message"]);
    assert_eq!(
        column_infos(&picked.columns),
        column_infos(&env.server_columns("id, message", "picked").await)
    );
    assert_eq!(
        reordered.column_names(),
        vec!["id", "message", "tenant"],
        "exactly vt_message_cols, in its order"
    );
    assert_eq!(
        column_infos(&reordered.columns),
        column_infos(&env.server_columns("id, message, tenant", "reordered").await)
    );
    for table in ["picked", "reordered"] {
        env.via_proxy(&format!(
            "insert into {table}(id, tenant, message, other) values (5, 'acme', 'payload', 99)"
        ))
        .await;
    }
    let p = picked.recv(secs(2.0)).await.expect("message in picked");
    assert_eq!(
        p.values,
        vec![
            Value::Bytes(b"5".to_vec()),
            Value::Bytes(b"payload".to_vec())
        ]
    );
    let r = reordered
        .recv(secs(2.0))
        .await
        .expect("message in reordered");
    assert_eq!(
        r.values,
        vec![
            Value::Bytes(b"5".to_vec()),
            Value::Bytes(b"payload".to_vec()),
            Value::Bytes(b"acme".to_vec())
        ]
    );
}
