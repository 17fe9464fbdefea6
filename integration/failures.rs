//! Things going wrong: no backend, a backend that dies mid-session, clients that walk away.
//! These tests start their own MariaDB when they stop or break it.

use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::Conn;

use crate::support::process::free_port;
use crate::support::raw::{self, RawConn, RawError};
use crate::support::{
    direct_scalar, eventually, opts, shared_setup, within, Failure, MariaDb, Proxy, Target,
};

async fn connect(port: u16) -> Result<Conn, Failure> {
    within(
        15,
        "connect through the proxy",
        Conn::new(opts(port, "root", None, Some("test"))),
    )
    .await
    .map_err(|e| Failure::of(&e))
}

async fn connect_retrying_1040(port: u16) -> Conn {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match connect(port).await {
            Ok(conn) => return conn,
            Err(Failure::Server { code: 1040, .. }) if Instant::now() < deadline => {
                // Retry pace until the deadline, not a wait for something.
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("connect: {e:?}"),
        }
    }
}

async fn select_one(conn: &mut Conn) -> Result<i64, Failure> {
    within(15, "SELECT 1", conn.query_first::<i64, _>("SELECT 1"))
        .await
        .map(|v| v.unwrap_or(0))
        .map_err(|e| Failure::of(&e))
}

#[tokio::test]
async fn backend_down_at_connect_gives_an_error_then_recovers() {
    let port = free_port();
    let proxy = Proxy::start(&format!("mysql://root@127.0.0.1:{port}/test"), &[], None);
    let started = Instant::now();
    let refused = connect(proxy.port()).await;
    let elapsed = started.elapsed();
    match &refused {
        Err(Failure::Server { code, message, .. }) => {
            assert!(
                message.contains(&port.to_string()) || message.contains("127.0.0.1"),
                "the error should name the backend (127.0.0.1:{port}); got {code}: {message}"
            );
            eprintln!("backend down: client got {code}: {message} after {elapsed:?}");
        }
        other => panic!(
            "expected a MySQL ERR packet naming the backend, got {other:?}\n{}",
            proxy.log()
        ),
    }
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    proxy.assert_alive();
    assert!(
        proxy.log().contains(&port.to_string()),
        "the proxy's log should say which backend failed:\n{}",
        proxy.log()
    );

    // Now bring a server up on that port: the same proxy serves new sessions.
    let server = MariaDb::start_on_port(port);
    let mut conn = connect(proxy.port())
        .await
        .unwrap_or_else(|e| panic!("after the backend came up: {e:?}\n{}", proxy.log()));
    assert_eq!(select_one(&mut conn).await, Ok(1));
    drop(server);
}

#[tokio::test]
async fn backend_killed_mid_session_then_restarted() {
    let server = MariaDb::start();
    let proxy = Proxy::start(&server.backend_url(), &[], None);
    let mut idle = connect(proxy.port()).await.expect("connect");
    let mut busy = connect(proxy.port()).await.expect("connect");
    assert_eq!(select_one(&mut idle).await, Ok(1));

    // One session is in the middle of a statement when the server dies, one is idle.
    let busy_query = async {
        let started = Instant::now();
        let res = within(
            15,
            "SELECT SLEEP(20) while the server dies",
            busy.query_drop("SELECT SLEEP(20)"),
        )
        .await;
        (res.map_err(|e| Failure::of(&e)), started.elapsed())
    };
    let killer = async {
        crate::support::wait_until_running(&server, "SELECT SLEEP(20)").await;
        server.kill();
    };
    let ((busy_res, busy_elapsed), ()) = tokio::join!(busy_query, killer);
    assert!(busy_res.is_err(), "the running statement must fail");
    assert!(
        busy_elapsed < Duration::from_secs(5),
        "error took {busy_elapsed:?}"
    );
    let idle_res = select_one(&mut idle).await;
    assert!(
        idle_res.is_err(),
        "the idle session must get an error, got {idle_res:?}"
    );
    proxy.assert_alive();

    // New sessions while the backend is down: an error, not a hang.
    let while_down = connect(proxy.port()).await;
    assert!(
        matches!(while_down, Err(Failure::Server { .. })),
        "expected an ERR packet while the backend is down, got {while_down:?}"
    );

    server.restart();
    let mut fresh = connect(proxy.port())
        .await
        .unwrap_or_else(|e| panic!("after restart: {e:?}\n{}", proxy.log()));
    assert_eq!(select_one(&mut fresh).await, Ok(1));
    proxy.assert_alive();
}

/// A clean server shutdown and a KILL of the backend connection: the client sees what it would
/// see without the proxy.
#[tokio::test]
async fn backend_shutdown_and_killed_backend_connection_look_the_same_as_direct() {
    let server = MariaDb::start();
    let proxy = Proxy::start(&server.backend_url(), &[], None);

    // KILL of each session's server thread from a separate direct connection.
    let mut direct = Target::direct(&server, "test").conn().await;
    let mut through = Target::proxy(&proxy, "test").conn().await;
    let mut admin = Target::direct(&server, "test").conn().await;
    for id in [direct.id(), through.id()] {
        admin.query_drop(format!("KILL {id}")).await.expect("KILL");
    }
    let d = select_one(&mut direct).await;
    let p = select_one(&mut through).await;
    assert!(d.is_err() && p.is_err(), "direct {d:?}, proxy {p:?}");
    // Directly the client finds a closed socket. The proxy either closes the client connection
    // too, or (if the client's next command wins the race) answers it with its own
    // ER_NET_READ_ERROR (1158, 08S01):
    // both end the session with an error, which is the contract.
    assert!(
        p == d || matches!(p, Err(Failure::Server { code: 1158, .. })),
        "killed backend connection: proxy {p:?}, direct {d:?}"
    );
    let mut again = connect(proxy.port()).await.expect("new session after KILL");
    assert_eq!(select_one(&mut again).await, Ok(1));

    // Clean shutdown with idle sessions on both paths.
    let mut direct = Target::direct(&server, "test").conn().await;
    let mut through = Target::proxy(&proxy, "test").conn().await;
    server.stop();
    let d = select_one(&mut direct).await;
    let p = select_one(&mut through).await;
    assert!(d.is_err() && p.is_err(), "direct {d:?}, proxy {p:?}");
    eprintln!("after shutdown: direct {d:?}, proxy {p:?}");
    proxy.assert_alive();
    server.restart();
    let mut again = connect(proxy.port())
        .await
        .expect("new session after restart");
    assert_eq!(select_one(&mut again).await, Ok(1));
}

/// A client reads a little of a huge result and disconnects: the proxy keeps serving others.
#[tokio::test]
async fn client_disconnecting_mid_result_does_not_disturb_others() {
    let (server, proxy) = shared_setup();
    let mut bystander = connect(proxy.port()).await.expect("bystander");
    let mut quitter = RawConn::connect(proxy.port(), "root", "", Some("test"))
        .await
        .expect("raw connect");
    let backend_id = quitter.greeting.connection_id;
    // ~200 MB of rows: far more than any socket buffer holds.
    quitter
        .send_command(
            raw::COM_QUERY,
            b"SELECT seq, REPEAT('x', 1000) FROM seq_1_to_200000",
        )
        .await
        .expect("send");
    for _ in 0..50 {
        quitter
            .read_packet_timeout(Duration::from_secs(10))
            .await
            .expect("first packets of the result");
    }
    quitter.abandon();

    for _ in 0..3 {
        assert_eq!(select_one(&mut bystander).await, Ok(1));
        let mut fresh = connect(proxy.port()).await.expect("new session");
        assert_eq!(select_one(&mut fresh).await, Ok(1));
    }
    proxy.assert_alive();
    let _ = (server, backend_id);
}

/// ... and the abandoned session's backend connection is closed, not left streaming or idle.
#[tokio::test]
async fn abandoned_session_releases_its_backend_connection() {
    let (server, proxy) = shared_setup();
    for mid_result in [true, false] {
        let mut quitter = RawConn::connect(proxy.port(), "root", "", Some("test"))
            .await
            .expect("raw connect");
        let backend_id = quitter.greeting.connection_id;
        if mid_result {
            quitter
                .send_command(
                    raw::COM_QUERY,
                    b"SELECT seq, REPEAT('y', 1000) FROM seq_1_to_200000",
                )
                .await
                .expect("send");
            for _ in 0..20 {
                quitter
                    .read_packet_timeout(Duration::from_secs(10))
                    .await
                    .expect("packets");
            }
        }
        quitter.abandon();
        let sql =
            format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {backend_id}");
        let gone = eventually(10, async || {
            direct_scalar::<i64>(server, &sql).await == Some(0)
        })
        .await;
        assert!(
            gone,
            "backend connection {backend_id} still open 10 s after its client vanished \
             (mid_result = {mid_result})"
        );
    }
    // A client that says goodbye properly (COM_QUIT).
    let conn = connect(proxy.port()).await.expect("connect");
    let id = conn.id();
    conn.disconnect().await.expect("COM_QUIT");
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
    let gone = eventually(10, async || {
        direct_scalar::<i64>(server, &sql).await == Some(0)
    })
    .await;
    assert!(gone, "backend connection {id} still open after COM_QUIT");
}

/// A client that connects and never sends its handshake response, or sends garbage, does not
/// block the proxy.
#[tokio::test]
async fn stalled_and_garbage_clients_do_not_block_others() {
    use tokio::io::AsyncWriteExt;
    let (_server, proxy) = shared_setup();
    let _stalled = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .expect("tcp connect");
    let mut garbage = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .expect("tcp connect");
    let _ = garbage.write_all(&[0xff; 64]).await;
    let _ = garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await;
    let mut conn = connect(proxy.port())
        .await
        .expect("connect beside stalled clients");
    assert_eq!(select_one(&mut conn).await, Ok(1));
    proxy.assert_alive();
}

/// `--max-connections`: the connection over the limit gets error 1040, and a slot frees up when
/// a client leaves.
#[tokio::test]
async fn connection_limit_answers_1040() {
    let server = MariaDb::shared();
    let proxy = Proxy::start(&server.backend_url(), &["--max-connections", "2"], None);
    // Proxy::start's readiness probe (a bare TCP connect) may hold a slot for a moment.
    let first = connect_retrying_1040(proxy.port()).await;
    let _second = connect_retrying_1040(proxy.port()).await;
    let third = connect(proxy.port()).await;
    assert!(
        matches!(
            &third,
            Err(Failure::Server { code: 1040, state, .. }) if state == "08004"
        ),
        "third connection over a limit of 2: {third:?}"
    );
    // The `mariadb` client, which asks for TLS when offered, shows the error itself (QA: it
    // showed "error packet before completion of TLS handshake" when the 1040 came in place of
    // the greeting).
    let cli = crate::support::Cli::new(proxy.port()).run(&["-e", "SELECT 1"]);
    assert!(
        cli.stderr.contains("ERROR 1040 (08004)") && cli.stderr.contains("Too many connections"),
        "{cli:?}"
    );
    first.disconnect().await.expect("COM_QUIT");
    let freed = eventually(5, async || connect(proxy.port()).await.is_ok()).await;
    assert!(freed, "no slot after a client left\n{}", proxy.log());
}

/// Clients hanging up (COM_QUIT, a dropped socket mid-result, a port probe) are ordinary events:
/// the proxy must not log them as errors (STYLE.md: `is_disconnect()`).
#[tokio::test]
async fn ordinary_disconnects_are_not_logged_as_errors() {
    let (_server, proxy) = shared_setup();
    let conn = connect(proxy.port()).await.expect("connect");
    conn.disconnect().await.expect("COM_QUIT");
    drop(connect(proxy.port()).await.expect("connect")); // no COM_QUIT? mysql_async sends one on drop
    let probe = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).expect("probe");
    drop(probe);
    let mut quitter = RawConn::connect(proxy.port(), "root", "", Some("test"))
        .await
        .expect("raw connect");
    quitter
        .send_command(
            raw::COM_QUERY,
            b"SELECT seq, REPEAT('z', 1000) FROM seq_1_to_100000",
        )
        .await
        .expect("send");
    quitter
        .read_packet_timeout(Duration::from_secs(10))
        .await
        .expect("first packet");
    let quitter_id = quitter.greeting.connection_id;
    quitter.abandon();
    let idle = RawConn::connect(proxy.port(), "root", "", None)
        .await
        .expect("raw connect");
    let idle_id = idle.greeting.connection_id;
    idle.abandon();
    // The proxy has noticed both hang-ups (it closed their backend sessions), and so has
    // logged whatever it logs for them.
    for id in [quitter_id, idle_id] {
        assert!(
            crate::support::backend_session_gone(_server, id).await,
            "backend session {id} still open\n{}",
            proxy.log()
        );
    }
    let log = proxy.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.is_empty(),
        "client disconnects logged as errors:\n{}",
        errors.join("\n")
    );
}

/// `--max-connections` bounds the backend too: however many clients knock at once, the proxy
/// never holds more client sessions on the server than it was allowed (each client session is
/// one backend connection; the proxy's own pool and binlog reader use the URL's database, not
/// the clients' one, so they are told apart by `db`).
#[tokio::test]
async fn connection_limit_bounds_backend_sessions() {
    const LIMIT: usize = 3;
    const DB: &str = "it_maxconn_backend";
    let server = MariaDb::shared();
    server.sql(&format!("CREATE DATABASE IF NOT EXISTS {DB}"));
    let proxy = Proxy::start(
        &server.backend_url(),
        &["--max-connections", &LIMIT.to_string()],
        None,
    );
    let port = proxy.port();
    // 24 clients at once, each holding its session for a moment with a query that sleeps, and
    // trying again after a 1040 until it is served: the proxy runs at its limit throughout.
    let clients: Vec<_> = (0..24)
        .map(|_| {
            tokio::spawn(async move {
                let mut refused = 0;
                let give_up = Instant::now() + Duration::from_secs(15);
                loop {
                    match Conn::new(opts(port, "root", None, Some(DB))).await {
                        Ok(mut c) => {
                            let _ = c.query_drop("DO SLEEP(0.2)").await;
                            let _ = c.disconnect().await;
                            return Ok(refused);
                        }
                        Err(e) => match Failure::of(&e) {
                            Failure::Server { code: 1040, .. } if Instant::now() < give_up => {
                                refused += 1;
                                // Retry pace until `give_up`, not a wait for something.
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            other => return Err(other),
                        },
                    }
                }
            })
        })
        .collect();
    let mut watcher = Conn::new(opts(server.port(), "root", None, None))
        .await
        .expect("connect to the server directly");
    let mut most = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    while clients.iter().any(|c| !c.is_finished()) && Instant::now() < deadline {
        let n: Option<usize> = watcher
            .query_first(format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '{DB}'"
            ))
            .await
            .expect("count backend sessions");
        most = most.max(n.unwrap_or(0));
        // Sampling pace of the backend session count, not a wait.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut refused = 0;
    for c in clients {
        match c.await.expect("client task") {
            Ok(n) => refused += n,
            Err(other) => panic!("a client got something other than success or 1040: {other:?}"),
        }
    }
    eprintln!("all 24 served after {refused} refusals (1040); at most {most} backend sessions");
    assert!(
        most >= 2,
        "the watcher never saw the proxy near its limit ({most})"
    );
    assert!(
        most <= LIMIT,
        "{most} client sessions on the server with --max-connections {LIMIT}"
    );
    assert!(
        refused > 0,
        "24 clients at once over a limit of {LIMIT}: none refused"
    );
    proxy.assert_alive();
}

/// The backend drops the connection in the middle of a long command (here: a 32 MiB query, three
/// packets, against a server whose max_allowed_packet is 20 MiB). msgproxy reads the rest of the
/// command and answers after the client's last packet (sequence id 3): QA's PyMySQL client got
/// msgproxy's 1158 with sequence id 2 and reported "Packet sequence number wrong" instead. The
/// answer is the server's own 1153, which it sent before closing (see
/// `a_statement_over_max_allowed_packet_gets_the_servers_error`).
#[tokio::test]
async fn backend_lost_mid_command_errors_after_the_last_packet() {
    let server = MariaDb::start_with(&["--max-allowed-packet=20M"]);
    let proxy = Proxy::start(&server.url("test"), &[], None);
    let mut conn = RawConn::connect(proxy.port(), "root", "", Some("test"))
        .await
        .expect("log in through the proxy");
    let mut sql = b"SELECT LENGTH('".to_vec();
    sql.resize(sql.len() + 2 * 0xff_ffff, b'x');
    sql.extend_from_slice(b"')");
    conn.send_command(0x03, &sql).await.ok();
    // send_command left the expected sequence id after the last packet it wrote (2): 3.
    match conn.read_packet().await.map(|p| raw::parse_err(&p)) {
        Ok(RawError::Server { code, state, .. }) => {
            assert_eq!((code, state.as_str()), (1153, "08S01"))
        }
        other => panic!("expected 1153 with sequence id 3, got {other:?}"),
    }
    proxy.assert_alive();
}

/// A statement longer than the server's `max_allowed_packet`: the server sends ERR 1153 and closes
/// the connection while msgproxy is still writing the statement, so the write fails (broken pipe).
/// The client gets the server's 1153, as it would directly, not msgproxy's "Lost connection to
/// the backend" (1158) that QA saw for a 65 MB query; the session ends with the backend
/// connection, and the proxy goes on serving other clients.
#[tokio::test]
async fn a_statement_over_max_allowed_packet_gets_the_servers_error() {
    let server = MariaDb::start_with(&["--max-allowed-packet=1M"]);
    let proxy = Proxy::start(&server.url("test"), &[], None);
    // The client would refuse to send it itself, knowing the server's limit.
    let big_client =
        |port| opts(port, "root", None, Some("test")).max_allowed_packet(Some(64 << 20));
    let mut sql = "SELECT LENGTH('".to_string();
    sql.push_str(&"x".repeat(4 << 20));
    sql.push_str("')");
    // (Directly, mysql_async fails with the broken pipe itself: unlike libmariadb it does not read
    // the server's answer after a failed write. msgproxy has read the whole statement first.)
    let mut c = within(15, "connect", Conn::new(big_client(proxy.port())))
        .await
        .expect("connect through msgproxy");
    let answer = within(30, "the 4 MiB query", c.query_drop(&sql)).await;
    match answer.map_err(|e| Failure::of(&e)) {
        Err(Failure::Server { code, state, .. }) => assert_eq!(
            (code, state.as_str()),
            (1153, "08S01"),
            "{}",
            crate::support::process::tail(&proxy.log_path(), 3000)
        ),
        other => panic!(
            "expected 1153, got {other:?}\n{}",
            crate::support::process::tail(&proxy.log_path(), 3000)
        ),
    }
    let mut other = connect(proxy.port()).await.expect("another client");
    let one: Option<i64> = other.query_first("SELECT 1").await.expect("SELECT 1");
    assert_eq!(one, Some(1));
    proxy.assert_alive();
}
