//! Odd but legal names and ids: message tables whose names hold backticks, spaces, unicode or
//! reserved words, in a database whose name is odd too; string ids with quotes, backslashes and
//! unicode; binary ids. Each is inserted through the proxy, streamed, received exactly once,
//! acked with a proper SQL literal, seen acked in the database, and not sent again.

use std::collections::BTreeMap;

use mysql_async::prelude::*;
use mysql_async::Value;

use super::harness::{comment, exec, now_ns, secs, Env, Msg, Stream, SEC};
use crate::support::{eventually, MariaDb};

/// `name` as a backtick-quoted identifier (embedded backticks doubled).
fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// `s` as a single-quoted SQL string literal (default sql_mode: backslash escapes).
fn string_literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// `b` as a hexadecimal literal.
fn hex_literal(b: &[u8]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
    format!("X'{hex}'")
}

fn table_ddl(name: &str, id_type: &str) -> String {
    format!(
        "create table {}(id {id_type} primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) default charset utf8mb4 comment '{}'",
        ident(name),
        comment("1", 10, "1", "")
    )
}

/// The raw bytes of the first column (the id) of a streamed row.
fn first_bytes(values: &[Value]) -> Vec<u8> {
    match values.first() {
        Some(Value::Bytes(b)) => b.clone(),
        other => panic!("id column is not bytes: {other:?}"),
    }
}

/// Rows of `table` with `time_acked` set, straight from the server, by id (as bytes).
async fn acked_ids(env: &Env, table: &str) -> BTreeMap<Vec<u8>, bool> {
    let mut c = env.direct_conn().await;
    let rows: Vec<(Vec<u8>, Option<i64>)> = c
        .query(format!("SELECT id, time_acked FROM {}", ident(table)))
        .await
        .unwrap_or_else(|e| panic!("read {table}: {e}"));
    let _ = c.disconnect().await;
    rows.into_iter()
        .map(|(id, acked)| (id, acked.is_some_and(|t| t != 0)))
        .collect()
}

/// One table's round trip. `ids` are (the id's bytes, the literal used to insert and ack it);
/// `qualified` names the table as `` `db`.`table` `` in STREAM and ACK.
async fn round_trip(env: &Env, table: &str, qualified: bool, ids: &[(Vec<u8>, String)]) {
    let name = if qualified {
        format!("{}.{}", ident(&env.db), ident(table))
    } else {
        ident(table)
    };
    let mut stream: Stream =
        match Stream::open(env.proxy.port(), &env.db, &format!("STREAM * FROM {name}")).await {
            Ok(s) => s,
            Err(e) => panic!(
                "STREAM * FROM {name}: {e:?}\n--- proxy log ---\n{}",
                env.log()
            ),
        };
    let values: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(i, (_, lit))| format!("({lit}, 'm{i}')"))
        .collect();
    env.via_proxy(&format!(
        "insert into {}(id, message) values {}",
        ident(table),
        values.join(", ")
    ))
    .await;
    let got = stream.recv_n(ids.len(), secs(3.0)).await;
    let mut seen: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for m in &got {
        *seen.entry(first_bytes(&m.values)).or_insert(0) += 1;
    }
    let want: BTreeMap<Vec<u8>, usize> = ids.iter().map(|(b, _)| (b.clone(), 1)).collect();
    assert_eq!(
        seen, want,
        "table {table}: every id exactly once (as bytes)"
    );
    let mut c = env.proxy_conn().await;
    for (bytes, lit) in ids {
        let sql = format!("ACK {name} {lit}");
        let n = exec(&mut c, &sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}\n{}", env.log()));
        assert_eq!(n, 1, "{sql}: rows acked (id bytes {bytes:02x?})");
    }
    let _ = c.disconnect().await;
    let acked = acked_ids(env, table).await;
    for (bytes, lit) in ids {
        assert_eq!(
            acked.get(bytes),
            Some(&true),
            "table {table}: id {lit} is not acked in the database: {acked:?}"
        );
    }
    // Two ack windows (ack_wait 1 s, poll 1 s) and a little more: nothing comes back.
    stream
        .expect_quiet(secs(2.5), &format!("{table}: every message was acked"))
        .await;
    stream.close();
}

fn int_ids() -> Vec<(Vec<u8>, String)> {
    (1..=3)
        .map(|i: i64| (i.to_string().into_bytes(), i.to_string()))
        .collect()
}

/// Table names with backticks, spaces, unicode and reserved words, in a database named with a
/// space, a quote, a hyphen and unicode.
#[tokio::test]
async fn odd_table_names_in_an_odd_database() {
    let env = Env::new("msg_hostile names'ä-名").await;
    let tables = [
        "msg`tick",
        "with space",
        "nachrichten_äöü",
        "消息",
        "select",
        "order",
    ];
    for table in tables {
        env.ddl(&table_ddl(table, "bigint")).await;
    }
    for (i, table) in tables.into_iter().enumerate() {
        // Every other table schema-qualified, naming the odd database in STREAM and ACK.
        round_trip(&env, table, i % 2 == 1, &int_ids()).await;
    }
}

/// varchar ids with single quotes, double quotes, backslashes and unicode.
#[tokio::test]
async fn string_ids_with_quotes_backslashes_and_unicode() {
    let env = Env::new("msg_hostile_string_ids").await;
    env.ddl(&table_ddl("str ids", "varchar(64)")).await;
    let ids = [
        "it's",
        "say \"hi\"",
        "back\\slash",
        "trailing\\",
        "nachrichten_äöü",
        "消息",
        "mix'\"\\`;-- x",
        "''",
    ];
    let ids: Vec<(Vec<u8>, String)> = ids
        .iter()
        .map(|s| (s.as_bytes().to_vec(), string_literal(s)))
        .collect();
    round_trip(&env, "str ids", false, &ids).await;
}

/// varbinary ids: NUL, 0xff, quote and backslash bytes (hex literals), and an ASCII one acked
/// with a string literal.
#[tokio::test]
async fn binary_ids() {
    let env = Env::new("msg_hostile_binary_ids").await;
    env.ddl(&table_ddl("bin`ids", "varbinary(16)")).await;
    let raw: [&[u8]; 4] = [b"\x00\xff'\\", b"\x80\x81\x82", b"\x00", b"\xfe\"`"];
    let mut ids: Vec<(Vec<u8>, String)> =
        raw.iter().map(|b| (b.to_vec(), hex_literal(b))).collect();
    ids.push((b"a'b\\c".to_vec(), string_literal("a'b\\c")));
    round_trip(&env, "bin`ids", true, &ids).await;
}

/// `timestamp(6)` ids, streamed and acked by sessions in another time zone than the server's
/// (and the proxy's own connections): the same instants are claimed and acked, each once.
#[tokio::test]
async fn timestamp_ids_in_a_session_time_zone_of_its_own() {
    let env = Env::new("msg_hostile_timestamp_ids").await;
    env.ddl(&table_ddl("ts ids", "timestamp(6)")).await;
    // Inserted in UTC; the stream and the acks run at +05:00, where the same instants read
    // five hours later.
    let utc = [
        "2026-01-02 03:04:05.000001",
        "2026-06-30 23:59:59.999999",
        "2030-12-31 00:00:00",
    ];
    let local = [
        "2026-01-02 08:04:05.000001",
        "2026-07-01 04:59:59.999999",
        "2030-12-31 05:00:00.000000",
    ];
    let values: Vec<String> = utc
        .iter()
        .enumerate()
        .map(|(i, t)| format!("('{t}', 'm{i}')"))
        .collect();
    let mut c = env.direct_conn().await;
    c.query_drop(format!(
        "SET time_zone = '+00:00'; insert into {}(id, message) values {}",
        ident("ts ids"),
        values.join(", ")
    ))
    .await
    .expect("insert in UTC");
    let _ = c.disconnect().await;

    let zone = "SET time_zone = '+05:00'";
    let mut stream = Stream::open_with(
        env.proxy.port(),
        &env.db,
        &[zone],
        &format!("STREAM * FROM {}", ident("ts ids")),
    )
    .await
    .unwrap_or_else(|e| panic!("STREAM: {e:?}\n{}", env.log()));
    let got = stream.recv_n(utc.len(), secs(4.0)).await;
    let mut seen: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8(first_bytes(&m.values)).expect("a timestamp is text"))
        .collect();
    seen.sort();
    assert_eq!(
        seen, local,
        "every instant once, shown in the stream's time zone"
    );

    let mut c = env.proxy_conn().await;
    exec(&mut c, zone).await.expect("set the time zone");
    for t in local {
        let sql = format!("ACK {} '{t}'", ident("ts ids"));
        let n = exec(&mut c, &sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}\n{}", env.log()));
        assert_eq!(n, 1, "{sql}");
    }
    let _ = c.disconnect().await;
    stream
        .expect_quiet(secs(2.5), "every message was acked")
        .await;
    stream.close();
    // The binlog's rows of this table were read (keyed like the poller keys them), not left
    // to polling.
    let log = env.log();
    assert!(
        !log.contains("its changes are picked up by polling"),
        "the watcher gave up on the timestamp ids:\n{log}"
    );
}

/// Loads the Europe/Berlin time zone into the server's `mysql` tables.
async fn load_berlin(env: &Env) {
    let zones = std::process::Command::new("mariadb-tzinfo-to-sql")
        .args(["/usr/share/zoneinfo/Europe/Berlin", "Europe/Berlin"])
        .output()
        .expect("run mariadb-tzinfo-to-sql");
    assert!(zones.status.success(), "mariadb-tzinfo-to-sql failed");
    let mut c = env.direct_conn().await;
    c.query_drop(format!(
        "USE mysql; {}",
        String::from_utf8_lossy(&zones.stdout)
            .trim_end()
            .trim_end_matches(';')
    ))
    .await
    .expect("load the Europe/Berlin time zone");
    let _ = c.disconnect().await;
}

/// The `epoch` of each row of `dst ids`, most claimed first.
async fn epochs(env: &Env) -> Vec<Option<i64>> {
    let mut c = env.direct_conn().await;
    let epochs: Vec<Option<i64>> = c
        .query(format!(
            "SELECT epoch FROM {} ORDER BY COALESCE(epoch, 0) DESC",
            ident("dst ids")
        ))
        .await
        .expect("read the epochs");
    let _ = c.disconnect().await;
    epochs
}

/// `timestamp` ids in the hour a daylight-saving zone repeats: 00:30 and 01:30 UTC on
/// 2025-10-26 both read `02:30:00` in Europe/Berlin. A stream in that zone gets one of them —
/// the one the server picks for that text — and never the other in its place; a stream at
/// +00:00 gets the other. Each is sent once.
#[tokio::test]
async fn timestamp_ids_in_a_repeated_hour() {
    let env = Env::new("msg_hostile_dst_ids").await;
    load_berlin(&env).await;
    let mut c = env.direct_conn().await;
    // An ack wait longer than the test, so that nothing is sent twice.
    env.ddl(&format!(
        "create table {}(id timestamp primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) comment '{}'",
        ident("dst ids"),
        comment("30", 10, "1", "")
    ))
    .await;
    c.query_drop(format!(
        "SET time_zone = '+00:00'; insert into {}(id, message) values \
         ('2025-10-26 00:30:00', 'summer'), ('2025-10-26 01:30:00', 'winter')",
        ident("dst ids")
    ))
    .await
    .expect("insert in UTC");
    let _ = c.disconnect().await;
    let stream_sql = format!("STREAM * FROM {}", ident("dst ids"));

    let berlin = ["SET time_zone = 'Europe/Berlin'"];
    let mut local = Stream::open_with(env.proxy.port(), &env.db, &berlin, &stream_sql)
        .await
        .unwrap_or_else(|e| panic!("STREAM in Berlin: {e:?}\n{}", env.log()));
    let first = local.recv_n(1, secs(3.0)).await;
    let text = |m: &Msg| String::from_utf8(first_bytes(&m.values)).expect("text");
    assert_eq!(text(&first[0]), "2025-10-26 02:30:00");
    local
        .expect_quiet(secs(2.5), "the other instant cannot be named in this zone")
        .await;
    assert_eq!(
        epochs(&env).await,
        vec![Some(1), None],
        "exactly one row claimed"
    );

    let utc = ["SET time_zone = '+00:00'"];
    let mut other = Stream::open_with(env.proxy.port(), &env.db, &utc, &stream_sql)
        .await
        .unwrap_or_else(|e| panic!("STREAM in UTC: {e:?}\n{}", env.log()));
    let second = other.recv_n(1, secs(3.0)).await;
    let message = |m: &Msg| m.values.last().cloned();
    assert_ne!(
        message(&first[0]),
        message(&second[0]),
        "the stream at +00:00 gets the other message"
    );
    assert_eq!(
        epochs(&env).await,
        vec![Some(1), Some(1)],
        "each row claimed once"
    );
    local.close();
    other.close();
}

/// The zero timestamp as an id, claimed alone (`vt_batch_size=1`) and acked.
#[tokio::test]
async fn a_zero_timestamp_id() {
    let env = Env::new("msg_hostile_zero_ts").await;
    env.ddl(&format!(
        "create table zero(id timestamp(3) primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) comment '{}'",
        comment("30", 1, "1", "")
    ))
    .await;
    let mut c = env.direct_conn().await;
    c.query_drop(
        "SET sql_mode = ''; insert into zero(id, message) values ('0000-00-00 00:00:00', 'zero')",
    )
    .await
    .expect("insert the zero timestamp");
    let _ = c.disconnect().await;
    let mut stream = env.stream("zero").await;
    let got = stream.recv_n(1, secs(3.0)).await;
    assert_eq!(
        String::from_utf8(first_bytes(&got[0].values)).expect("text"),
        "0000-00-00 00:00:00.000"
    );
    let mut c = env.proxy_conn().await;
    let n = exec(&mut c, "ACK zero '0000-00-00 00:00:00'")
        .await
        .unwrap_or_else(|e| panic!("ACK: {e:?}"));
    assert_eq!(n, 1);
    stream.close();
}

/// A server whose own time zone repeats an hour (Europe/Berlin): acked messages with
/// `timestamp` ids from both passes of that hour are purged. (The purge runs on the proxy's own
/// connections, which work at UTC, where every instant has a local time of its own.)
#[tokio::test]
async fn acked_timestamp_ids_of_a_repeated_hour_are_purged() {
    let server: &'static MariaDb = Box::leak(Box::new(MariaDb::start()));
    {
        let env = Env::on_url(server, "msg_dst_purge_setup", &server.backend_url(), &[]).await;
        load_berlin(&env).await;
        env.direct("SET GLOBAL time_zone = 'Europe/Berlin'").await;
    }
    let env = Env::on_url(server, "msg_dst_purge", &server.backend_url(), &[]).await;
    env.ddl(&format!(
        "create table {}(id timestamp primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) comment '{}'",
        ident("dst acked"),
        comment("30", 10, "1", "")
    ))
    .await;
    let acked = now_ns() - 10 * SEC;
    let mut c = env.direct_conn().await;
    c.query_drop(format!(
        "SET time_zone = '+00:00'; insert into {}(id, time_acked, message) values \
         ('2025-10-26 00:30:00', {acked}, 'summer'), ('2025-10-26 01:30:00', {acked}, 'winter')",
        ident("dst acked")
    ))
    .await
    .expect("insert acked rows in UTC");
    let gone = eventually(10, async || {
        let left: Option<i64> = c
            .query_first(format!("SELECT COUNT(*) FROM {}", ident("dst acked")))
            .await
            .expect("count");
        left == Some(0)
    })
    .await;
    let _ = c.disconnect().await;
    assert!(gone, "both acked rows are purged\n{}", env.log());
    server.stop();
}
