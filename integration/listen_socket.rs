//! `--listen-socket PATH`: clients on the proxy's host reach it over a Unix socket, as they reach
//! mysqld over its own — the whole proxy (messaging included), `@@socket` naming the proxy's
//! socket so that mysql_async moves onto it rather than around the proxy, `'user'@'localhost'`
//! in access-denied errors, a stale socket file replaced after a crash and the file removed at
//! shutdown.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};

use crate::messaging::harness::{ack, comment, secs, Env, Stream};
use crate::support::{opts, Cli, MariaDb, Proxy};

/// A directory for the socket, short enough for a socket path (108 bytes on Linux).
fn socket_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sock-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create a socket dir")
}

fn over_socket(path: &Path, user: &str, pass: Option<&str>, db: &str) -> OptsBuilder {
    OptsBuilder::default()
        .socket(Some(path.display().to_string()))
        .user(Some(user))
        .pass(pass)
        .db_name(Some(db))
        .stmt_cache_size(0)
}

fn arg(path: &Path) -> String {
    path.display().to_string()
}

/// Asks the proxy to stop cleanly, as an operator would.
fn sigterm(proxy: &Proxy) {
    let pid = proxy.pid().expect("a process") as i32;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

/// Waits up to 15 s for `done`, checking every 20 ms.
async fn wait_until(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() && Instant::now() < deadline {
        // How often to look, not a wait for something to happen.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_client_on_the_socket_gets_queries_streams_and_acks() {
    let dir = socket_dir();
    let path: PathBuf = dir.path().join("msgproxy.sock");
    let server = MariaDb::shared();
    let db = "listen_socket";
    let env = Env::on_url(
        server,
        db,
        &server.url(db),
        &["--listen-socket", &arg(&path)],
    )
    .await;

    let mut c = Conn::new(over_socket(&path, "root", None, db))
        .await
        .unwrap_or_else(|e| panic!("connect over {}: {e}\n{}", path.display(), env.log()));
    let answer: Option<(String, String)> = c
        .query_first("SELECT @@socket, DATABASE()")
        .await
        .expect("a query over the socket");
    assert_eq!(
        answer,
        Some((arg(&path), db.to_string())),
        "@@socket names the proxy's own socket"
    );
    let mut tcp = env.proxy_conn().await;
    let on_tcp: Option<String> = tcp.query_first("SELECT @@socket").await.expect("@@socket");
    assert_eq!(on_tcp, Some(arg(&path)), "the same answer over TCP");
    let _ = tcp.disconnect().await;

    env.ddl(&format!(
        "create table q(id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(100)) comment '{}'",
        comment("30", 10, "30", "")
    ))
    .await;
    let mut stream =
        Stream::open_opts(over_socket(&path, "root", None, db), &[], "stream * from q")
            .await
            .unwrap_or_else(|e| panic!("STREAM over the socket: {e:?}\n{}", env.log()));
    c.query_drop("insert into q(id, message) values (1, 'over the socket')")
        .await
        .expect("insert over the socket");
    let m = stream
        .recv(secs(3.0))
        .await
        .unwrap_or_else(|| panic!("the message never reached the stream\n{}", env.log()));
    assert_eq!(m.id, 1);
    assert_eq!(ack(&mut c, "q", &[1]).await, 1);
    assert_eq!(ack(&mut c, "q", &[1]).await, 0, "acked once");
    drop(stream);
    let _ = c.disconnect().await;
}

#[tokio::test]
async fn mysql_async_moves_onto_the_proxys_socket_and_users_are_at_localhost() {
    let dir = socket_dir();
    let path = dir.path().join("msgproxy.sock");
    let server = MariaDb::shared();
    let users = "[[users]]\nname = \"app\"\npassword = \"app-secret\"\n";
    let proxy = Proxy::start_with_env(
        &server.url("test"),
        &["--listen-socket", &arg(&path)],
        Some(users),
        &[("MSGPROXY_LOG", "msgproxy=debug")],
    );
    let socket_logins = |proxy: &Proxy| {
        proxy
            .log()
            .lines()
            .filter(|l| l.contains("client logged in") && l.contains("peer=unix socket"))
            .count()
    };

    // mysql_async on a loopback address asks for @@socket and reconnects there: onto the proxy's
    // socket, not around the proxy.
    assert_eq!(socket_logins(&proxy), 0);
    let mut c =
        Conn::new(opts(proxy.port(), "app", Some("app-secret"), Some("test")).prefer_socket(true))
            .await
            .expect("log in over TCP, preferring the socket");
    let one: Option<i64> = c.query_first("SELECT 1").await.expect("a query");
    assert_eq!(one, Some(1));
    assert_eq!(
        socket_logins(&proxy),
        1,
        "mysql_async should have moved onto the socket\n{}",
        proxy.log()
    );
    let _ = c.disconnect().await;

    // The `mariadb` client over the socket, with a right and a wrong password.
    let cli = Cli::over_socket(&path).user("app", Some("app-secret"));
    let out = cli.run(&["-N", "-e", "select 40 + 2"]);
    assert!(out.success(), "{out:?}\n{}", proxy.log());
    assert_eq!(out.stdout.trim(), "42");
    let out = Cli::over_socket(&path)
        .user("app", Some("wrong"))
        .run(&["-e", "select 1"]);
    assert!(!out.success());
    assert!(
        out.stderr
            .contains("Access denied for user 'app'@'localhost' (using password: YES)"),
        "{out:?}"
    );

    // Killed, the proxy leaves its socket file behind; started again, it replaces it.
    proxy.kill();
    assert!(path.exists(), "SIGKILL leaves the socket file");
    proxy.restart();
    let out = cli.run(&["-N", "-e", "select 7"]);
    assert!(out.success(), "{out:?}\n{}", proxy.log());

    // Stopped cleanly, it removes the file.
    sigterm(&proxy);
    wait_until(|| !proxy.is_alive()).await;
    assert!(!proxy.is_alive(), "SIGTERM stops the proxy");
    assert!(!path.exists(), "a clean stop removes the socket file");
}

/// SIGTERM: the proxy stops listening at once — new clients are refused over TCP and the socket
/// file is gone — while a command already running finishes and gets its answer.
#[tokio::test]
async fn shutdown_refuses_new_clients_and_lets_running_commands_finish() {
    let dir = socket_dir();
    let path = dir.path().join("msgproxy.sock");
    let server = MariaDb::shared();
    let proxy = Proxy::start(&server.url("test"), &["--listen-socket", &arg(&path)], None);
    let mut busy = Conn::new(over_socket(&path, "root", None, "test"))
        .await
        .expect("connect over the socket");
    let running = tokio::spawn(async move {
        let slept: Result<Option<i64>, _> = busy.query_first("SELECT SLEEP(3)").await;
        slept
    });
    crate::support::wait_until_running(server, "SELECT SLEEP(3)").await;

    sigterm(&proxy);
    wait_until(|| !path.exists()).await;
    assert!(
        !path.exists(),
        "the socket file is removed when shutdown begins"
    );
    let refused = std::net::TcpStream::connect(("127.0.0.1", proxy.port()));
    assert!(
        refused.is_err(),
        "a TCP client during the drain should be refused, not queued"
    );
    assert!(proxy.is_alive(), "still draining the running command");

    let slept = running.await.expect("the query task");
    assert_eq!(
        slept.expect("the running query gets its answer"),
        Some(0),
        "\n{}",
        proxy.log()
    );
    wait_until(|| !proxy.is_alive()).await;
    assert!(
        !proxy.is_alive(),
        "the proxy exits once the command is done"
    );
}

/// A proxy that cannot listen says so and exits before it touches the backend (no binlog
/// connection, no table loading).
#[tokio::test]
async fn a_proxy_that_cannot_listen_exits_before_touching_the_backend() {
    let dir = socket_dir();
    let path = dir.path().join("not-a-socket");
    std::fs::write(&path, b"keep me").expect("write a regular file");
    // A backend that refuses connections: touching it would log the failure.
    let closed = crate::support::process::free_port();
    let out = std::process::Command::new(crate::support::proxy::binary())
        .args(["--listen", "127.0.0.1:0", "--listen-socket", &arg(&path)])
        .args([
            "--backend",
            &format!("mysql://root@127.0.0.1:{closed}/test"),
        ])
        .env("MSGPROXY_LOG", "debug")
        .output()
        .expect("run msgproxy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot listen") && stderr.contains("is not a socket"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("message tables") && !stderr.contains("binlog"),
        "it touched the backend before failing to listen:\n{stderr}"
    );
    assert_eq!(
        std::fs::read(&path).expect("the file is still there"),
        b"keep me"
    );
}
