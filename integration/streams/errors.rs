//! What the event-stream statements answer when they cannot work: malformed statements, hostile
//! names and filters, tables that are not stream tables, a group's filter changed.

use super::*;
use crate::support::Failure;

async fn refused(env: &Env, sql: &str) -> (u16, String) {
    let mut c = env.proxy_conn().await;
    let failure = exec(&mut c, sql)
        .await
        .expect_err(&format!("{sql} should fail"));
    let _ = c.disconnect().await;
    match failure {
        Failure::Server { code, message, .. } => (code, message),
        other => panic!("{sql}: {other:?}"),
    }
}

#[tokio::test]
async fn malformed_and_unsupported_statements_name_the_syntax() {
    let env = Env::new("evs_errors").await;
    env.ddl(&orders_events("")).await;
    let (code, message) = refused(&env, "STREAM * FROM orders_events GROUP billing").await;
    assert_eq!(code, 1064);
    assert!(
        message.contains("STREAM * | col[, col ...] FROM table GROUP 'group'"),
        "{message}"
    );
    let (code, message) = refused(
        &env,
        "STREAM * FROM orders_events GROUP 'g' WHERE topic LIKE 'a%'",
    )
    .await;
    assert_eq!(code, 1235);
    assert!(message.contains("LIKE"), "{message}");
    let (code, message) = refused(&env, "SEEK orders_events GROUP 'g' TO NOWHERE").await;
    assert_eq!(code, 1064);
    assert!(message.contains("SEEK table GROUP 'group' TO"), "{message}");
    let (code, _) = refused(&env, "STREAM * FROM no_such_table GROUP 'g'").await;
    assert_eq!(code, 1146);
    env.ddl("CREATE TABLE plain (id INT)").await;
    let (code, message) = refused(&env, "STREAM * FROM plain GROUP 'g'").await;
    assert_eq!(code, 1347);
    assert!(message.contains("msgproxy_stream"), "{message}");
    let (code, message) = refused(&env, "STREAM nope FROM orders_events GROUP 'g'").await;
    assert_eq!(
        (code, message.as_str()),
        (1054, "Unknown column 'nope' in 'field list'")
    );
    let (code, _) = refused(&env, "STREAM * FROM orders_events GROUP 'g' WHERE nope = 1").await;
    assert_eq!(code, 1054);
    let mut c = env.proxy_conn().await;
    exec(&mut c, "BEGIN").await.unwrap();
    let e = exec(&mut c, "STREAM * FROM orders_events GROUP 'g'")
        .await
        .expect_err("inside a transaction");
    assert_eq!(e.code(), Some(1179), "{e:?}");
    exec(&mut c, "ROLLBACK").await.unwrap();
    // DROP and SHOW look-alikes go to the server, which refuses them in its own words.
    let (code, _) = refused(&env, "DROP GROUP billing ON orders_events").await;
    assert_eq!(code, 1064);
    let (code, _) = refused(&env, "SHOW STREAM GROUPS LIKE 'x'").await;
    assert_eq!(code, 1064);
}

#[tokio::test]
async fn hostile_group_names_and_filters_are_values() {
    let env = Env::new("evs_hostile").await;
    env.ddl(&orders_events("")).await;
    let hostile = "x'; DROP TABLE orders_events; -- \u{1F600} `\\\"";
    let quoted = hostile.replace('\\', "\\\\").replace('\'', "''");
    let mut s = stream(
        &env,
        &format!("* FROM orders_events GROUP '{quoted}' WHERE topic = '{quoted}' OR topic IN ('a''b', NULL)"),
    )
    .await;
    let mut c = env.direct_conn().await;
    exec(
        &mut c,
        &format!("INSERT INTO orders_events (topic, payload) VALUES ('{quoted}', '{{}}'), ('other', '{{}}'), ('a''b', '{{}}')"),
    )
    .await
    .unwrap();
    let got = s.recv_n(2, secs(10)).await;
    assert_eq!(
        crate::messaging::harness::value_str(&got[0].values[2]),
        hostile
    );
    let mut p = env.proxy_conn().await;
    let list: Vec<String> = got.iter().map(|m| m.id.to_string()).collect();
    let n = exec(
        &mut p,
        &format!("ACK orders_events GROUP '{quoted}' {}", list.join(",")),
    )
    .await
    .unwrap();
    assert_eq!(n, 2);
    // The table is still there, and SHOW STREAM GROUPS shows the name as it is.
    let rows: Vec<mysql_async::Row> =
        mysql_async::prelude::Queryable::query(&mut p, "SHOW STREAM GROUPS")
            .await
            .unwrap();
    let names: Vec<String> = rows
        .into_iter()
        .filter(|r| r.get::<String, _>(0).as_deref() == Some(env.db.as_str()))
        .filter_map(|r| r.get::<String, _>(2))
        .collect();
    assert_eq!(names, vec![hostile.to_string()]);
    // A different filter for the same group is refused.
    let (code, message) = refused(
        &env,
        &format!("STREAM * FROM orders_events GROUP '{quoted}' WHERE topic = 'x'"),
    )
    .await;
    assert_eq!(code, 1210, "{message}");
    s.close();
}

#[tokio::test]
async fn prepared_stream_statements_are_refused_with_the_reason() {
    let env = Env::new("evs_prepared").await;
    env.ddl(&orders_events("")).await;
    let mut c = env.proxy_conn().await;
    for sql in [
        "SEEK orders_events GROUP 'g' TO LATEST",
        "DROP GROUP 'g' ON orders_events",
        "SHOW STREAM GROUPS",
        "ACK orders_events GROUP 'g' 1",
    ] {
        let e = mysql_async::prelude::Queryable::prep(&mut c, sql)
            .await
            .expect_err(sql);
        let f = Failure::of(&e);
        assert_eq!(f.code(), Some(1295), "{sql}: {f:?}");
    }
}

#[tokio::test]
async fn a_table_written_in_two_gtid_domains_stops_its_group_with_the_reason() {
    let env = Env::new("evs_domains").await;
    env.ddl(&orders_events("")).await;
    let mut s = stream(&env, "id FROM orders_events GROUP 'g'").await;
    insert_direct(&env, 1, 1, "domain 0").await;
    s.recv_n(1, secs(20)).await;
    let mut c = env.direct_conn().await;
    exec(&mut c, "SET SESSION gtid_domain_id = 7")
        .await
        .unwrap();
    exec(
        &mut c,
        "INSERT INTO orders_events (topic, payload) VALUES ('domain 7', '{}')",
    )
    .await
    .unwrap();
    match s.recv_or_end(secs(20)).await {
        Err(why) => assert!(why.contains("GTID domains 0 and 7"), "{why}"),
        Ok(m) => panic!("an event of another domain was delivered: {m:?}"),
    }
}

#[tokio::test]
async fn a_backend_user_that_may_not_read_the_binlog_is_told_the_grant() {
    let server = crate::support::MariaDb::shared();
    {
        let mut c = crate::messaging::harness::connect(server.port(), "test").await;
        for sql in [
            "CREATE USER IF NOT EXISTS 'evs_norepl'@'%'",
            "GRANT ALL ON `evs_denied`.* TO 'evs_norepl'@'%'",
            "GRANT ALL ON `test`.* TO 'evs_norepl'@'%'",
            "GRANT BINLOG MONITOR ON *.* TO 'evs_norepl'@'%'",
        ] {
            exec(&mut c, sql).await.unwrap();
        }
    }
    let url = format!("mysql://evs_norepl@127.0.0.1:{}/test", server.port());
    let env = Env::on_url(server, "evs_denied", &url, &[]).await;
    env.ddl(&orders_events("")).await;
    let sql = "STREAM * FROM orders_events GROUP 'g'";
    let why = match Stream::open(env.proxy.port(), &env.db, sql).await {
        Err(f) => format!("{f:?}"),
        Ok(mut s) => match s.recv_or_end(secs(20)).await {
            Err(why) => why,
            Ok(m) => panic!("{sql}: expected an error, got {m:?}"),
        },
    };
    assert!(why.contains("GRANT REPLICATION SLAVE"), "{why}");
}
