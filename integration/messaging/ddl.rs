//! DDL through the proxy (issue 23): each form that can make, change or unmake a message table
//! takes effect before its OK, read by the names the statement gives; DDL on plain and temporary
//! tables reads nothing at all.

use super::harness::{comment, exec, Env};
use crate::support::{wait_for_log, Failure, Proxy};

const COLS: &str = "id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
                    message varchar(20)";

/// What `ACK table 1` answers on `conn`: `Ok` for a loaded message table, else the server's (or
/// the proxy's) error code.
async fn ack_code(conn: &mut mysql_async::Conn, table: &str) -> Result<u64, u16> {
    match exec(conn, &format!("ACK {table} 1")).await {
        Ok(n) => Ok(n),
        Err(Failure::Server { code, .. }) => Err(code),
        Err(other) => panic!("ACK {table} 1: {other:?}"),
    }
}

/// Every DDL form a message table can come, change or go by, through one session, checked from
/// another the moment it is answered.
#[tokio::test]
async fn every_form_of_ddl_takes_effect_before_its_ok() {
    let env = Env::new("msg_ddl_forms").await;
    let other_db = "msg_ddl_forms_other";
    env.direct(&format!("DROP DATABASE IF EXISTS {other_db}"))
        .await;
    env.direct(&format!("CREATE DATABASE {other_db}")).await;
    let mut ddl = env.proxy_conn().await;
    let mut other = env.proxy_conn().await;
    let msg = comment("5", 10, "1", "");
    let mut problems = Vec::new();
    let mut expect = async |ddl: &mut mysql_async::Conn, sql: String, checks: &[(&str, bool)]| {
        exec(ddl, &sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        for &(table, loaded) in checks {
            let got = ack_code(&mut other, table).await;
            if got.is_ok() != loaded {
                problems.push(format!(
                    "after {sql}: ACK {table} answered {got:?}, expected it {}",
                    if loaded { "to work" } else { "to fail" }
                ));
            }
        }
    };
    expect(
        &mut ddl,
        format!("create table m1({COLS}) comment '{msg}'"),
        &[("m1", true)],
    )
    .await;
    expect(
        &mut ddl,
        "rename table m1 to m2".into(),
        &[("m1", false), ("m2", true)],
    )
    .await;
    expect(
        &mut ddl,
        "alter table m2 add column extra int, rename to m3".into(),
        &[("m2", false), ("m3", true)],
    )
    .await;
    expect(&mut ddl, "create table m4 like m3".into(), &[("m4", true)]).await;
    expect(
        &mut ddl,
        "alter table m4 comment 'plain again'".into(),
        &[("m4", false), ("m3", true)],
    )
    .await;
    expect(
        &mut ddl,
        format!("create table {other_db}.q({COLS}) comment '{msg}'"),
        &[(&format!("{other_db}.q"), true)],
    )
    .await;
    expect(
        &mut ddl,
        format!("drop database {other_db}"),
        &[(&format!("{other_db}.q"), false)],
    )
    .await;
    // In a query of several statements the proxy cannot follow which tables were named: it
    // reads the catalog, and the table is loaded all the same.
    expect(
        &mut ddl,
        format!("create table m5({COLS}) comment '{msg}'; set @a = 1"),
        &[("m5", true)],
    )
    .await;
    expect(
        &mut ddl,
        "drop table m3, m5".into(),
        &[("m3", false), ("m5", false)],
    )
    .await;
    // The query fails after its CREATE ran: the table is loaded all the same.
    let sql = format!("create table m6({COLS}) comment '{msg}'; select * from no_such_table");
    assert!(exec(&mut ddl, &sql).await.is_err(), "{sql}");
    if ack_code(&mut other, "m6").await.is_err() {
        problems.push(format!("after {sql}: m6 not loaded"));
    }
    assert!(
        problems.is_empty(),
        "a DDL's OK came before the proxy had loaded the change:\n  {}\n{}",
        problems.join("\n  "),
        env.log()
    );
}

/// DDL on temporary and plain tables costs no read of `information_schema`: the proxy's debug
/// log names the tables of every read, and none of them is ever named there. (On a server of
/// its own: every proxy reads for the message tables other tests make, and one read of many
/// tables names only a few.)
#[tokio::test]
async fn ddl_on_plain_and_temporary_tables_reads_nothing() {
    let mut env = Env::private("msg_ddl_plain").await;
    env.proxy = Proxy::start_with_env(
        &env.server.backend_url(),
        &[],
        None,
        &[("MSGPROXY_LOG", "msgproxy=debug")],
    );
    let msg = comment("5", 10, "1", "");
    env.ddl(&format!("create table loaded_m({COLS}) comment '{msg}'"))
        .await;
    // The catalog is read at start and once more when the binlog watcher starts following;
    // after that, while it follows, only every 5 minutes.
    let catalog_reads = |log: &str| log.matches("registry read of the whole catalog").count();
    let settled =
        crate::support::eventually(10, async || catalog_reads(&env.proxy.log()) >= 2).await;
    assert!(settled, "no second catalog read:\n{}", env.log());
    let before = catalog_reads(&env.proxy.log());
    let mut c = env.proxy_conn().await;
    for sql in [
        "create temporary table plain_tmp_zq(i int) comment 'vitess_message'",
        "drop temporary table plain_tmp_zq",
        "create table plain_zq(i int primary key)",
        "alter table plain_zq add column j int, comment 'still plain'",
        "create index plain_zq_j on plain_zq(j)",
        "rename table plain_zq to plain_zq2",
        "truncate table plain_zq2",
        "drop table plain_zq2",
    ] {
        exec(&mut c, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    // A message table made after them is read, by name: the log is being written, and the
    // plain tables' DDL came before it.
    exec(
        &mut c,
        &format!("create table marker_zq({COLS}) comment '{msg}'"),
    )
    .await
    .expect("create marker_zq");
    wait_for_log(
        &env.proxy,
        &format!("registry read of `{}`.`marker_zq` found 1", env.db),
        10,
    )
    .await;
    let log = env.proxy.log();
    env.server.stop();
    assert!(
        !log.contains("plain_zq") && !log.contains("plain_tmp_zq"),
        "a plain or temporary table's DDL was read for:\n{log}"
    );
    assert_eq!(
        catalog_reads(&log),
        before,
        "DDL read the whole catalog:\n{log}"
    );
}
