//! Where a response ends, for every status-flag and packet combination the server sends on the
//! text and binary protocols, compared byte for byte with a raw client (classic EOF and
//! CLIENT_DEPRECATE_EOF): a stored procedure's cursor leaving SERVER_STATUS_CURSOR_EXISTS in a
//! text `CALL`'s results (this hung: MariaDB's main.sp-anchor-row-type-cursor), several results
//! after a cursor, OUT parameters of a prepared `CALL` (SERVER_PS_OUT_PARAMS), a cursor asked for
//! a `CALL` and a statement the server opens none for, COM_STMT_FETCH of a read-only cursor to its
//! end and past it, and errors in the middle of several results. Each answer is followed by a
//! query that must get its own answer: nothing of one response may be left for the next.
//!
//! And a client that vanishes while its command runs: its backend session ends with it, and the
//! locks and transaction it held are released (MariaDB's main.dirty_close).

use mysql_async::prelude::Queryable;

use crate::support::raw::{self, RawConn, RawError};
use crate::support::{direct_scalar, eventually, same_both_ways, shared_setup, within, Rec};

type Reply = Result<Vec<Vec<u8>>, RawError>;

/// Zeroes the statement id of a prepare-OK (ids differ between runs).
fn masked_prepare(mut reply: Reply) -> (Reply, u32) {
    let mut id = 0;
    if let Ok(packets) = &mut reply {
        if let Some(first) = packets.first_mut() {
            if first.first() == Some(&0x00) && first.len() >= 5 {
                id = u32::from_le_bytes([first[1], first[2], first[3], first[4]]);
                first[1..5].copy_from_slice(&[0; 4]);
            }
        }
    }
    (reply, id)
}

/// COM_STMT_EXECUTE of `stmt`, with a read-only cursor or none, and `params` (BIGINT each).
fn execute(stmt: u32, cursor: bool, params: &[i64]) -> Vec<u8> {
    let mut p = stmt.to_le_bytes().to_vec();
    p.push(u8::from(cursor));
    p.extend_from_slice(&1u32.to_le_bytes());
    if !params.is_empty() {
        p.extend(std::iter::repeat_n(0u8, params.len().div_ceil(8))); // NULL bitmap
        p.push(1); // types follow
        for _ in params {
            p.extend_from_slice(&[0x08, 0x00]); // MYSQL_TYPE_LONGLONG
        }
        for v in params {
            p.extend_from_slice(&v.to_le_bytes());
        }
    }
    p
}

const SETUP: &[&str] = &[
    "CREATE TABLE sp_t1 (a INT, b VARCHAR(10))",
    "INSERT INTO sp_t1 VALUES (10, 'b10'), (20, 'b20'), (30, 'b30')",
    // The reproduction: a cursor opened and closed, then a result.
    "CREATE PROCEDURE sp_cursor_then_select() BEGIN DECLARE c CURSOR FOR SELECT a FROM sp_t1; \
     OPEN c; CLOSE c; SELECT 'c'; END",
    // A cursor still open while results are sent, two of them.
    "CREATE PROCEDURE sp_cursor_two_results() BEGIN DECLARE v INT; \
     DECLARE c CURSOR FOR SELECT a FROM sp_t1 ORDER BY a; OPEN c; FETCH c INTO v; \
     SELECT v AS first_a; SELECT a, b FROM sp_t1 ORDER BY a; CLOSE c; END",
    // A cursor, a result, then an error.
    "CREATE PROCEDURE sp_cursor_then_error() BEGIN DECLARE c CURSOR FOR SELECT a FROM sp_t1; \
     OPEN c; SELECT 'before'; SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failed on purpose'; \
     CLOSE c; END",
    // OUT parameters: a prepared CALL answers them as a result set of their own.
    "CREATE PROCEDURE sp_out(IN x BIGINT, OUT doubled BIGINT, INOUT plus_one BIGINT) BEGIN \
     DECLARE c CURSOR FOR SELECT a FROM sp_t1; OPEN c; CLOSE c; \
     SET doubled = x * 2; SET plus_one = plus_one + 1; SELECT 'inside'; END",
];

/// The statements each variant runs as text, each answer read whole.
const TEXT: &[&str] = &[
    "CALL sp_cursor_then_select()",
    "CALL sp_cursor_two_results()",
    "CALL sp_cursor_then_error()",
    "SELECT 1; SELECT * FROM no_such_table; SELECT 3",
    "SELECT 1; CALL sp_cursor_then_select(); SELECT 2",
    "SET @o = 0, @p = 5; CALL sp_out(4, @o, @p); SELECT @o, @p",
];

#[tokio::test]
async fn every_result_shape_ends_where_the_server_ends_it() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_relay_shapes", async |r: &mut Rec| {
        let db = r.target.db.clone();
        let mut setup = r.conn().await;
        for sql in SETUP {
            r.query(&mut setup, sql).await.ok();
        }
        for (variant, caps) in [
            ("classic EOF", raw::CLIENT_MULTI_RESULTS),
            (
                "DEPRECATE_EOF",
                raw::CLIENT_MULTI_RESULTS | raw::CLIENT_DEPRECATE_EOF,
            ),
        ] {
            let mut c = RawConn::connect_with(r.target.port, "root", "", Some(&db), caps)
                .await
                .unwrap_or_else(|e| panic!("{variant}: raw connect: {e:?}"));
            let tag = |s: &str| format!("{variant}: {s}");
            let side = format!("{:?} {variant}", r.side());
            let deprecate_eof = caps & raw::CLIENT_DEPRECATE_EOF != 0;
            for sql in TEXT {
                c.send_command(raw::COM_QUERY, sql.as_bytes())
                    .await
                    .expect("send");
                r.note(&tag(sql), within(10, sql, c.read_response()).await);
                aligned(r, &mut c, &tag(sql)).await;
            }

            // A prepared CALL with OUT parameters, without and with a cursor asked for.
            c.send_command(raw::COM_STMT_PREPARE, b"CALL sp_out(?, ?, ?)")
                .await
                .expect("send");
            let (prep, call) =
                masked_prepare(within(10, "prepare", c.read_prepare_response()).await);
            r.note(&tag("prepare CALL"), prep);
            for cursor in [false, true] {
                c.send_command(raw::COM_STMT_EXECUTE, &execute(call, cursor, &[4, 0, 5]))
                    .await
                    .expect("send");
                r.note(
                    &tag(&format!("execute CALL, cursor {cursor}")),
                    within(
                        10,
                        &format!("{side}: execute CALL, cursor {cursor}"),
                        c.read_response(),
                    )
                    .await,
                );
                aligned(r, &mut c, &tag("after execute CALL")).await;
            }

            // A cursor the server does not open (a statement it answers at once).
            c.send_command(raw::COM_STMT_PREPARE, b"SHOW VARIABLES LIKE 'autocommit'")
                .await
                .expect("send");
            let (prep, show) =
                masked_prepare(within(10, "prepare", c.read_prepare_response()).await);
            r.note(&tag("prepare SHOW"), prep);
            c.send_command(raw::COM_STMT_EXECUTE, &execute(show, true, &[]))
                .await
                .expect("send");
            r.note(
                &tag("execute SHOW with cursor"),
                within(
                    10,
                    "execute SHOW",
                    read_cursor_execute(&mut c, deprecate_eof),
                )
                .await,
            );
            aligned(r, &mut c, &tag("after SHOW with cursor")).await;

            // A read-only cursor fetched to its end, and once more past it.
            c.send_command(raw::COM_STMT_PREPARE, b"SELECT a, b FROM sp_t1 ORDER BY a")
                .await
                .expect("send");
            let (prep, select) =
                masked_prepare(within(10, "prepare", c.read_prepare_response()).await);
            r.note(&tag("prepare SELECT"), prep);
            c.send_command(raw::COM_STMT_EXECUTE, &execute(select, true, &[]))
                .await
                .expect("send");
            r.note(
                &tag("execute with cursor"),
                within(
                    10,
                    "cursor execute",
                    read_cursor_execute(&mut c, deprecate_eof),
                )
                .await,
            );
            for n in [2u32, 2, 2] {
                let mut fetch = select.to_le_bytes().to_vec();
                fetch.extend_from_slice(&n.to_le_bytes());
                c.send_command(raw::COM_STMT_FETCH, &fetch)
                    .await
                    .expect("send");
                r.note(
                    &tag("fetch"),
                    without_statement_ids(within(10, "fetch", c.read_rows()).await),
                );
            }
            aligned(r, &mut c, &tag("after fetches")).await;
            for stmt in [call, show, select] {
                c.send_command(raw::COM_STMT_CLOSE, &stmt.to_le_bytes())
                    .await
                    .expect("send");
            }
            aligned(r, &mut c, &tag("after close")).await;
        }
    })
    .await;
}

/// The answer to a COM_STMT_EXECUTE that asked for a cursor, read as libmariadb reads it: the
/// column count and definitions, then either the EOF that says a cursor exists (the rows come by
/// COM_STMT_FETCH) or the rows, when the server opened none. Under CLIENT_DEPRECATE_EOF the
/// terminator comes at once when there is a cursor, after the rows when not.
async fn read_cursor_execute(c: &mut RawConn, deprecate_eof: bool) -> Reply {
    let first = c.read_packet().await?;
    if first.first() == Some(&0xff) || first.first() == Some(&0x00) {
        return Ok(vec![first]);
    }
    let columns = raw::lenenc(&first).0 as usize;
    let mut out = vec![first];
    out.extend(c.read_n(columns).await?);
    if !deprecate_eof {
        let eof = c.read_packet().await?;
        let cursor = raw::terminator_status(&eof, false) & 0x40 != 0;
        out.push(eof);
        if cursor {
            return Ok(out);
        }
    }
    out.extend(c.read_rows().await?);
    Ok(out)
}

/// An error that names a statement id (which differs between runs) with the id left out.
fn without_statement_ids(reply: Reply) -> Reply {
    reply.map(|packets| {
        packets
            .into_iter()
            .map(|p| match p.first() {
                Some(0xff) => p.into_iter().filter(|b| !b.is_ascii_digit()).collect(),
                _ => p,
            })
            .collect()
    })
}

/// The next query gets its own answer: nothing of the previous response was left over.
async fn aligned(r: &mut Rec, c: &mut RawConn, what: &str) {
    c.send_command(raw::COM_QUERY, b"SELECT 'aligned'")
        .await
        .expect("send");
    let reply = within(10, "aligned", c.read_response()).await;
    let ok = matches!(&reply, Ok(p) if p.iter().any(|p| p.windows(7).any(|w| w == b"aligned")));
    assert!(ok, "{what}: the next query got {reply:?}");
    r.note(&format!("{what}: aligned"), ok);
}

/// The `mariadb` client's reproduction from the issue, through mysql_async's text protocol.
#[tokio::test]
async fn call_of_a_procedure_that_used_a_cursor_answers() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_relay_call", async |r: &mut Rec| {
        let mut c = r.conn().await;
        for sql in SETUP {
            r.query(&mut c, sql).await.ok();
        }
        for sql in TEXT {
            let outcome = within(10, sql, r.query(&mut c, sql)).await;
            r.note(sql, outcome);
        }
    })
    .await;
}

/// A client that vanishes while its command waits: directly and through msgproxy, its session
/// ends at once, and the user lock and the row lock of its open transaction are free for others.
#[tokio::test]
async fn a_vanished_client_leaves_no_session_and_no_locks_behind() {
    let (server, proxy) = shared_setup();
    let mut setup = crate::support::Target::direct(server, "test").conn().await;
    setup
        .query_drop("CREATE TABLE IF NOT EXISTS test.relay_dirty (id INT PRIMARY KEY, v INT)")
        .await
        .expect("create");
    setup
        .query_drop("REPLACE INTO test.relay_dirty VALUES (1, 0), (2, 0)")
        .await
        .expect("rows");
    for (side, port) in [
        ("direct", server.port()),
        ("through msgproxy", proxy.port()),
    ] {
        // 1. Waiting for a user lock someone else holds.
        let lock = format!("dangling_{}", port);
        let mut holder = crate::support::Target::direct(server, "test").conn().await;
        let got: Option<i64> = holder
            .query_first(format!("SELECT GET_LOCK('{lock}', 60)"))
            .await
            .expect("holder's lock");
        assert_eq!(got, Some(1));
        let mut waiter = RawConn::connect(port, "root", "", Some("test"))
            .await
            .expect("raw connect");
        let waiter_id = waiter.greeting.connection_id;
        waiter
            .send_command(
                raw::COM_QUERY,
                format!("SELECT GET_LOCK('{lock}', 3600)").as_bytes(),
            )
            .await
            .expect("send");
        wait_until_state(server, waiter_id, "User lock").await;
        waiter.abandon();
        wait_until_gone(server, waiter_id, side).await;
        holder
            .query_drop(format!("DO RELEASE_LOCK('{lock}')"))
            .await
            .ok();
        drop(holder);

        // 2. A transaction holding a row lock, then waiting in SLEEP.
        let mut sleeper = RawConn::connect(port, "root", "", Some("test"))
            .await
            .expect("raw connect");
        let sleeper_id = sleeper.greeting.connection_id;
        for sql in ["BEGIN", "UPDATE relay_dirty SET v = v + 1 WHERE id = 1"] {
            sleeper
                .send_command(raw::COM_QUERY, sql.as_bytes())
                .await
                .expect("send");
            within(10, sql, sleeper.read_response()).await.expect(sql);
        }
        sleeper
            .send_command(raw::COM_QUERY, b"SELECT SLEEP(3600)")
            .await
            .expect("send");
        wait_until_state(server, sleeper_id, "User sleep").await;
        sleeper.abandon();
        wait_until_gone(server, sleeper_id, side).await;
        let mut other = crate::support::Target::direct(server, "test").conn().await;
        other
            .query_drop("SET SESSION innodb_lock_wait_timeout = 5")
            .await
            .expect("set");
        other
            .query_drop("UPDATE relay_dirty SET v = 0 WHERE id = 1")
            .await
            .unwrap_or_else(|e| {
                panic!("{side}: the vanished client's row lock is still held: {e}")
            });

        // 3. Waiting for a row lock (the server does not watch the socket here: msgproxy ends
        //    the session itself). Only through msgproxy: directly the wait lasts until
        //    innodb_lock_wait_timeout.
        if side == "through msgproxy" {
            other.query_drop("BEGIN").await.expect("begin");
            other
                .query_drop("UPDATE relay_dirty SET v = 1 WHERE id = 2")
                .await
                .expect("lock row 2");
            let mut blocked = RawConn::connect(port, "root", "", Some("test"))
                .await
                .expect("raw connect");
            let blocked_id = blocked.greeting.connection_id;
            blocked
                .send_command(
                    raw::COM_QUERY,
                    b"SET SESSION innodb_lock_wait_timeout = 3600",
                )
                .await
                .expect("send");
            within(10, "set", blocked.read_response())
                .await
                .expect("set");
            blocked
                .send_command(raw::COM_QUERY, b"UPDATE relay_dirty SET v = 2 WHERE id = 2")
                .await
                .expect("send");
            wait_until_state(server, blocked_id, "Updating").await;
            blocked.abandon();
            wait_until_gone(server, blocked_id, side).await;
            other.query_drop("ROLLBACK").await.expect("rollback");
        }
    }
    proxy.assert_alive();
}

/// Waits until backend session `id` is in `state` (so the command has reached its wait).
async fn wait_until_state(server: &crate::support::MariaDb, id: u32, state: &str) {
    let sql = format!("SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = {id}");
    let reached = eventually(20, async || {
        direct_scalar::<String>(server, &sql)
            .await
            .is_some_and(|s| s.contains(state))
    })
    .await;
    assert!(reached, "session {id} never reached state {state:?}");
}

/// Waits until backend session `id` is gone from the server.
async fn wait_until_gone(server: &crate::support::MariaDb, id: u32, side: &str) {
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
    let gone = eventually(20, async || {
        direct_scalar::<i64>(server, &sql).await == Some(0)
    })
    .await;
    assert!(
        gone,
        "{side}: session {id} still on the server 20 s after its client vanished"
    );
}
