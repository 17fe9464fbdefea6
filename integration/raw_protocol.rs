//! Commands and framings that `mysql_async` never produces, compared byte for byte with a raw
//! client: COM_INIT_DB, COM_SET_OPTION, COM_DEBUG, server-side cursors (COM_STMT_EXECUTE with a
//! cursor flag + COM_STMT_FETCH), COM_STMT_RESET, COM_STMT_SEND_LONG_DATA, unknown commands —
//! each with and without CLIENT_DEPRECATE_EOF and CLIENT_SESSION_TRACK.

use std::time::Duration;

use crate::support::raw::{self, RawConn, RawError};
use crate::support::{same_both_ways, shared_setup, within, Rec};

type Reply = Result<Vec<Vec<u8>>, RawError>;

/// Zeroes the statement id in a prepare-OK packet (ids are per server, not per session).
fn mask_stmt_id(mut reply: Reply) -> (Reply, u32) {
    let mut id = 0;
    if let Ok(packets) = &mut reply {
        if let Some(first) = packets.first_mut() {
            if first.first() == Some(&0x00) && first.len() >= 5 {
                id = u32::from_le_bytes(first[1..5].try_into().expect("4 bytes"));
                first[1..5].copy_from_slice(&[0; 4]);
            }
        }
    }
    (reply, id)
}

/// Replaces every run of digits with one `#`.
fn mask_digits(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(ch);
        }
    }
    out
}

fn execute_payload(stmt: u32, cursor: bool, param: Option<i64>) -> Vec<u8> {
    let mut p = stmt.to_le_bytes().to_vec();
    p.push(if cursor { 1 } else { 0 });
    p.extend_from_slice(&1u32.to_le_bytes());
    if let Some(v) = param {
        p.push(0); // NULL bitmap
        p.push(1); // new params bound
        p.extend_from_slice(&[0x08, 0x00]); // MYSQL_TYPE_LONGLONG, signed
        p.extend_from_slice(&v.to_le_bytes());
    }
    p
}

#[tokio::test]
async fn rare_commands_cursors_and_framings_byte_for_byte() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_raw", async |r: &mut Rec| {
        let db = r.target.db.clone();
        let other = format!("{db}_2");
        let mut setup = r.conn().await;
        r.query(&mut setup, &format!("DROP DATABASE IF EXISTS {other}"))
            .await;
        r.query(&mut setup, &format!("CREATE DATABASE {other}"))
            .await
            .ok();
        for (variant, caps) in [
            ("classic EOF", 0),
            ("DEPRECATE_EOF", raw::CLIENT_DEPRECATE_EOF),
            (
                "DEPRECATE_EOF + SESSION_TRACK",
                raw::CLIENT_DEPRECATE_EOF | raw::CLIENT_SESSION_TRACK,
            ),
        ] {
            let mut c = RawConn::connect_with(r.target.port, "root", "", Some(&db), caps)
                .await
                .unwrap_or_else(|e| panic!("{variant}: raw connect: {e:?}"));
            let tag = |s: &str| format!("{variant}: {s}");
            r.note(&tag("negotiated"), c.capabilities & caps);

            c.send_command(raw::COM_QUERY, b"SELECT 1, 'a', NULL")
                .await
                .expect("send");
            r.note(&tag("query"), within(10, "query", c.read_response()).await);
            c.send_command(raw::COM_QUERY, b"SELECT 1; SELECT 2, 3; DO 1")
                .await
                .expect("send");
            r.note(&tag("multi"), within(10, "multi", c.read_response()).await);
            c.send_command(raw::COM_QUERY, b"SET autocommit = 0, @x = 1")
                .await
                .expect("send");
            r.note(
                &tag("set (session tracking)"),
                within(10, "set", c.read_response()).await,
            );
            c.send_command(raw::COM_QUERY, b"COMMIT; SET autocommit = 1")
                .await
                .expect("send");
            r.note(
                &tag("commit"),
                within(10, "commit", c.read_response()).await,
            );

            c.send_command(raw::COM_INIT_DB, other.as_bytes())
                .await
                .expect("send");
            r.note(
                &tag("init_db"),
                within(10, "init_db", c.read_packet()).await,
            );
            c.send_command(raw::COM_INIT_DB, b"no_such_db_x")
                .await
                .expect("send");
            r.note(
                &tag("init_db missing"),
                within(10, "init_db", c.read_packet()).await,
            );
            c.send_command(raw::COM_QUERY, b"SELECT DATABASE()")
                .await
                .expect("send");
            r.note(
                &tag("database()"),
                within(10, "database()", c.read_response()).await,
            );

            c.send_command(raw::COM_SET_OPTION, &1u16.to_le_bytes())
                .await
                .expect("send");
            r.note(
                &tag("multi-statements off"),
                within(10, "set_option", c.read_packet()).await,
            );
            c.send_command(raw::COM_QUERY, b"SELECT 1; SELECT 2")
                .await
                .expect("send");
            r.note(
                &tag("multi refused"),
                within(10, "multi", c.read_response()).await,
            );
            c.send_command(raw::COM_SET_OPTION, &0u16.to_le_bytes())
                .await
                .expect("send");
            r.note(
                &tag("multi-statements on"),
                within(10, "set_option", c.read_packet()).await,
            );
            c.send_command(raw::COM_QUERY, b"SELECT 1; SELECT 2")
                .await
                .expect("send");
            r.note(
                &tag("multi again"),
                within(10, "multi", c.read_response()).await,
            );

            c.send_command(raw::COM_DEBUG, &[]).await.expect("send");
            r.note(&tag("debug"), within(10, "debug", c.read_packet()).await);

            // Prepared statement, then executed plainly, through a cursor, fetched in two steps.
            let sql = b"SELECT seq, CONCAT('r', seq) FROM seq_1_to_10 WHERE seq > ?";
            c.send_command(raw::COM_STMT_PREPARE, sql)
                .await
                .expect("send");
            let (prep, stmt) = mask_stmt_id(within(10, "prepare", c.read_prepare_response()).await);
            r.note(&tag("prepare"), prep);
            c.send_command(
                raw::COM_STMT_EXECUTE,
                &execute_payload(stmt, false, Some(7)),
            )
            .await
            .expect("send");
            r.note(
                &tag("execute"),
                within(10, "execute", c.read_response()).await,
            );
            c.send_command(raw::COM_STMT_EXECUTE, &execute_payload(stmt, true, Some(0)))
                .await
                .expect("send");
            // A cursor-opening execute sends metadata only; the rows come with COM_STMT_FETCH.
            r.note(
                &tag("execute with cursor"),
                c.read_until_quiet(Duration::from_millis(700)).await,
            );
            for n in [3u32, 100] {
                let mut fetch = stmt.to_le_bytes().to_vec();
                fetch.extend_from_slice(&n.to_le_bytes());
                c.send_command(raw::COM_STMT_FETCH, &fetch)
                    .await
                    .expect("send");
                r.note(
                    &tag(&format!("fetch {n}")),
                    within(10, "fetch", c.read_rows()).await,
                );
            }
            c.send_command(raw::COM_STMT_RESET, &stmt.to_le_bytes())
                .await
                .expect("send");
            r.note(
                &tag("stmt reset"),
                within(10, "reset", c.read_packet()).await,
            );
            c.send_command(raw::COM_STMT_CLOSE, &stmt.to_le_bytes())
                .await
                .expect("send");
            // No reply to COM_STMT_CLOSE; the next command gets the next reply.

            // Long data: no reply to COM_STMT_SEND_LONG_DATA, then an execute that uses it.
            c.send_command(raw::COM_STMT_PREPARE, b"SELECT CONCAT(?, '!')")
                .await
                .expect("send");
            let (prep, stmt) = mask_stmt_id(within(10, "prepare", c.read_prepare_response()).await);
            r.note(&tag("prepare long data"), prep);
            for chunk in [&b"long "[..], &b"data"[..]] {
                let mut payload = stmt.to_le_bytes().to_vec();
                payload.extend_from_slice(&0u16.to_le_bytes());
                payload.extend_from_slice(chunk);
                c.send_command(raw::COM_STMT_SEND_LONG_DATA, &payload)
                    .await
                    .expect("send");
            }
            let mut exec = stmt.to_le_bytes().to_vec();
            exec.push(0);
            exec.extend_from_slice(&1u32.to_le_bytes());
            exec.extend_from_slice(&[0, 1, 0xfc, 0x00]); // bitmap, bound, MYSQL_TYPE_BLOB
            c.send_command(raw::COM_STMT_EXECUTE, &exec)
                .await
                .expect("send");
            r.note(
                &tag("execute long data"),
                within(10, "execute", c.read_response()).await,
            );
            c.send_command(raw::COM_STMT_CLOSE, &stmt.to_le_bytes())
                .await
                .expect("send");
            // Executing a closed statement.
            c.send_command(raw::COM_STMT_EXECUTE, &execute_payload(stmt, false, None))
                .await
                .expect("send");
            // (The message names the statement id, which differs run to run: digits masked.)
            let closed = within(10, "execute closed", c.read_packet()).await;
            r.note(
                &tag("execute closed"),
                closed.map(|p| {
                    let err = raw::parse_err(&p);
                    mask_digits(&format!("{err:?}"))
                }),
            );

            c.send_command(0x60, b"").await.expect("send");
            r.note(
                &tag("unknown command"),
                within(10, "unknown", c.read_packet()).await,
            );
            c.send_command(raw::COM_QUERY, b"SELECT 'still here'")
                .await
                .expect("send");
            r.note(
                &tag("after all that"),
                within(10, "last", c.read_response()).await,
            );
            c.send_command(raw::COM_QUIT, &[]).await.expect("send");
            r.note(
                &tag("after quit"),
                c.read_until_quiet(Duration::from_millis(300)).await,
            );
        }
        r.query(&mut setup, &format!("DROP DATABASE {other}"))
            .await
            .ok();
    })
    .await;
}

/// Pipelining (several commands written before any reply is read), MariaDB's "execute the
/// statement just prepared" (statement id 0xffffffff) sent in the same write as the prepare, and a
/// client whose bytes arrive a few at a time.
#[tokio::test]
async fn pipelined_commands_and_fragmented_packets() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_pipeline", async |r: &mut Rec| {
        let db = r.target.db.clone();
        for (variant, caps) in [
            ("classic EOF", 0),
            ("DEPRECATE_EOF", raw::CLIENT_DEPRECATE_EOF),
        ] {
            let mut c = RawConn::connect_with(r.target.port, "root", "", Some(&db), caps)
                .await
                .unwrap_or_else(|e| panic!("{variant}: raw connect: {e:?}"));
            let tag = |s: &str| format!("{variant}: {s}");
            let mut burst = Vec::new();
            for sql in [
                "SELECT 1",
                "SELECT 'two', 2",
                "DO SLEEP(0.1)",
                "SELECT * FROM missing_t",
                "SELECT 4",
            ] {
                burst.extend(raw::command_frame(raw::COM_QUERY, sql.as_bytes()));
            }
            c.write_raw(&burst).await.expect("write burst");
            for i in 0..5 {
                c.expect_seq(1);
                r.note(
                    &tag(&format!("pipelined reply {i}")),
                    within(10, "pipelined", c.read_response()).await,
                );
            }

            let mut burst =
                raw::command_frame(raw::COM_STMT_PREPARE, b"SELECT seq * 2 FROM seq_1_to_3");
            let mut exec = 0xffff_ffffu32.to_le_bytes().to_vec();
            exec.push(0);
            exec.extend_from_slice(&1u32.to_le_bytes());
            burst.extend(raw::command_frame(raw::COM_STMT_EXECUTE, &exec));
            burst.extend(raw::command_frame(
                raw::COM_STMT_CLOSE,
                &0xffff_ffffu32.to_le_bytes(),
            ));
            burst.extend(raw::command_frame(raw::COM_PING, b""));
            c.write_raw(&burst).await.expect("write prepare+execute");
            c.expect_seq(1);
            let prep = within(10, "prepare", c.read_prepare_response()).await;
            let prep = prep.map(|mut p| {
                if let Some(first) = p.first_mut() {
                    if first.len() >= 5 {
                        first[1..5].copy_from_slice(&[0; 4]);
                    }
                }
                p
            });
            r.note(&tag("prepare (pipelined)"), prep);
            c.expect_seq(1);
            r.note(
                &tag("execute -1 (pipelined)"),
                within(10, "execute", c.read_response()).await,
            );
            c.expect_seq(1);
            r.note(
                &tag("ping after close"),
                within(10, "ping", c.read_packet()).await,
            );
        }

        // Every packet, the handshake response included, arriving 3 bytes at a time.
        let mut slow = RawConn::connect_with(r.target.port, "root", "", Some(&db), raw::DRIBBLE)
            .await
            .expect("dribbling connect");
        slow.send_command(raw::COM_QUERY, b"SELECT 'slowly', DATABASE()")
            .await
            .expect("send");
        r.note(
            "dribbled query",
            within(10, "dribbled", slow.read_response()).await,
        );
    })
    .await;
}

/// A client that asks for compression, which msgproxy does not offer (PHP's mysqlnd with
/// MYSQLI_CLIENT_COMPRESS or PDO::MYSQL_ATTR_COMPRESS sets the flag anyway, then compresses):
/// refused at login with 1043 and what to do, instead of a session whose every command got
/// 1047 "Unknown command" and then "server has gone away". Other clients are served on.
#[tokio::test]
async fn a_login_asking_for_compression_is_refused_with_the_reason() {
    let (_server, proxy) = shared_setup();
    for (what, flag) in [
        ("CLIENT_COMPRESS", raw::CLIENT_COMPRESS),
        (
            "CLIENT_ZSTD_COMPRESSION_ALGORITHM",
            raw::CLIENT_ZSTD_COMPRESSION_ALGORITHM,
        ),
    ] {
        let refused = within(
            10,
            "compressed login",
            RawConn::connect_insisting(proxy.port(), "root", "", Some("test"), 0, flag),
        )
        .await;
        match refused {
            Err(RawError::Server {
                code,
                state,
                message,
            }) => {
                assert_eq!((code, state.as_str()), (1043, "08S01"), "{what}: {message}");
                assert!(
                    message.contains("does not support the compressed protocol")
                        && message.contains("connect without compression"),
                    "{what}: {message}"
                );
            }
            Err(e) => panic!("{what}: expected ERR 1043, got {e:?}"),
            Ok(_) => panic!("{what}: the login was accepted"),
        }
    }
    let mut fine = RawConn::connect(proxy.port(), "root", "", Some("test"))
        .await
        .expect("an uncompressed login after the refused ones");
    let reply = within(10, "query", fine.query("SELECT 'served'"))
        .await
        .expect("query after the refused logins");
    assert!(
        reply.iter().any(|p| p.windows(6).any(|w| w == b"served")),
        "{reply:?}"
    );
}
