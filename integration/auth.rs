//! Authentication by the proxy: wrong passwords, unknown users, configured users, both auth
//! plugins, many sessions at once.

use mysql_async::prelude::*;
use mysql_async::Conn;

use crate::support::{opts, shared_setup, within, Cli, Failure, MariaDb, Proxy};

const USERS_TOML: &str = r#"
[[users]]
name = "it_app"
password = "secret"

[[users]]
name = "it_nopass"
password = ""
"#;

async fn try_login(port: u16, user: &str, pass: Option<&str>) -> Result<Conn, Failure> {
    within(10, "login", Conn::new(opts(port, user, pass, Some("test"))))
        .await
        .map_err(|e| Failure::of(&e))
}

fn denied(res: Result<Conn, Failure>, user: &str) -> (u16, String, String) {
    match res {
        Err(Failure::Server {
            code,
            state,
            message,
        }) => {
            assert!(
                message.starts_with(&format!("Access denied for user '{user}'")),
                "message: {message}"
            );
            (code, state, message)
        }
        Err(other) => panic!("{user}: expected an ERR packet, got {other:?}"),
        Ok(_) => panic!("{user}: login should have been refused"),
    }
}

#[tokio::test]
async fn wrong_password_and_unknown_user_are_1045_like_the_server() {
    let (server, proxy) = shared_setup();
    for (user, pass) in [
        ("root", Some("nope")),
        ("no_such_user", None),
        ("no_such_user", Some("x")),
    ] {
        let direct = denied(try_login(server.port(), user, pass).await, user);
        let through = denied(try_login(proxy.port(), user, pass).await, user);
        assert_eq!(
            (through.0, &through.1),
            (direct.0, &direct.1),
            "{user}/{pass:?}: server said {direct:?}, proxy said {through:?}"
        );
        assert_eq!((direct.0, direct.1.as_str()), (1045, "28000"));
        // "(using password: YES/NO)" tells the user what they sent.
        assert_eq!(
            through.2.ends_with("(using password: YES)"),
            direct.2.ends_with("(using password: YES)"),
            "server: {}, proxy: {}",
            direct.2,
            through.2
        );
    }
    // The proxy keeps working after refusing logins.
    let mut ok = try_login(proxy.port(), "root", None)
        .await
        .expect("root login");
    ok.query_drop("SELECT 1").await.expect("query");
    proxy.assert_alive();
}

#[tokio::test]
async fn configured_users_log_in_with_their_passwords_only() {
    let server = MariaDb::shared();
    let proxy = Proxy::start(&server.backend_url(), &[], Some(USERS_TOML));
    let mut app = try_login(proxy.port(), "it_app", Some("secret"))
        .await
        .unwrap_or_else(|e| panic!("it_app/secret: {e:?}\n{}", proxy.log()));
    let one: Option<i64> = app.query_first("SELECT 1").await.expect("select");
    assert_eq!(one, Some(1));
    // A second login of the same user (caching_sha2_password's fast path, if that is in use).
    let again = try_login(proxy.port(), "it_app", Some("secret")).await;
    assert!(again.is_ok(), "second login: {again:?}");

    let nopass = try_login(proxy.port(), "it_nopass", None).await;
    assert!(nopass.is_ok(), "user with an empty password: {nopass:?}");

    for (user, pass) in [
        ("it_app", Some("wrong")),
        ("it_app", None),
        ("it_nopass", Some("something")),
        ("stranger", Some("secret")),
        // Users are configured, so root is not implicitly allowed any more.
        ("root", None),
    ] {
        let (code, state, _) = denied(try_login(proxy.port(), user, pass).await, user);
        assert_eq!((code, state.as_str()), (1045, "28000"), "{user}/{pass:?}");
    }
    proxy.assert_alive();
}

/// The `mariadb` client starting with either plugin (the proxy may switch it).
#[tokio::test]
async fn cli_logs_in_with_either_auth_plugin() {
    let server = MariaDb::shared();
    let proxy = Proxy::start(&server.backend_url(), &[], Some(USERS_TOML));
    for plugin in ["mysql_native_password", "caching_sha2_password"] {
        let out = Cli::new(proxy.port()).user("it_app", Some("secret")).run(&[
            &format!("--default-auth={plugin}"),
            "-N",
            "-e",
            "SELECT 40 + 2",
        ]);
        assert!(
            out.success() && out.stdout.trim() == "42",
            "--default-auth={plugin}: {out:?}\n{}",
            proxy.log()
        );
        let wrong = Cli::new(proxy.port()).user("it_app", Some("bad")).run(&[
            &format!("--default-auth={plugin}"),
            "-e",
            "SELECT 1",
        ]);
        assert!(
            !wrong.success() && wrong.stderr.contains("ERROR 1045 (28000)"),
            "--default-auth={plugin} with a wrong password: {wrong:?}"
        );
    }
}

#[tokio::test]
async fn many_sessions_at_once_each_get_their_own_backend_connection() {
    let (_server, proxy) = shared_setup();
    let mut logins = Vec::new();
    for _ in 0..20 {
        logins.push(try_login(proxy.port(), "root", None));
    }
    let conns: Vec<Conn> = futures_join_all(logins).await;
    let mut ids: Vec<u32> = conns.iter().map(|c| c.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 20, "connection ids must be distinct");
    for mut c in conns {
        let id: Option<u32> = c
            .query_first("SELECT CONNECTION_ID()")
            .await
            .expect("select");
        assert_eq!(id, Some(c.id()));
        c.disconnect().await.expect("COM_QUIT");
    }
}

/// join_all without a futures dependency: spawn on the runtime, collect in order.
async fn futures_join_all(
    logins: Vec<impl std::future::Future<Output = Result<Conn, Failure>> + Send + 'static>,
) -> Vec<Conn> {
    let handles: Vec<_> = logins.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("join").expect("login"));
    }
    out
}

/// A client that never logs in costs the server nothing (issue 23): a port scanner's connect
/// and close, a load balancer's TCP check, a wrong password. The backend connection such a
/// client was greeted with is kept for the next client (`frontend::spares`), so the server sees
/// no new connection, and none that ends without logging in (which it would count against the
/// proxy's host, up to `max_connect_errors`). Before, each cost one of each.
#[tokio::test]
async fn clients_that_never_log_in_cost_the_server_nothing() {
    use tokio::io::AsyncReadExt;
    // A server of its own: `Connections` counts every client of the server.
    let server = MariaDb::start();
    let proxy = Proxy::start(&server.backend_url(), &[], None);
    let mut watch = Conn::new(opts(server.port(), "root", None, None))
        .await
        .expect("connect to the server");
    async fn counters(c: &mut Conn) -> (u64, u64) {
        let rows: Vec<(String, u64)> = c
            .query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Connections', 'Aborted_connects')")
            .await
            .expect("status");
        let get = |name: &str| rows.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
        (get("Connections"), get("Aborted_connects"))
    }
    // The proxy's own connections (message engine, binlog) are made in its first moments.
    let mut last = counters(&mut watch).await;
    let settled = crate::support::eventually(20, async || {
        // "Settled" means no new server connection for 0.5 s: the window is the definition.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = counters(&mut watch).await;
        std::mem::replace(&mut last, now) == now
    })
    .await;
    assert!(settled, "the server's connection count never settled");
    let port = proxy.port();
    let scan = async |read_greeting: bool| {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the proxy");
        if read_greeting {
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf).await;
        }
        drop(s);
        // Paced as a scanner of one port is: the proxy has seen the close before the next.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    // The first may need a connection of its own (no client has left one yet).
    scan(true).await;
    let before = counters(&mut watch).await;
    let mut failed = 0;
    for i in 0..10 {
        scan(i % 2 == 0).await;
        failed += 1;
    }
    for (user, pass) in [("root", Some("nope")), ("no_such_user", None)] {
        denied(try_login(port, user, pass).await, user);
        failed += 1;
    }
    let after = counters(&mut watch).await;
    // A spare kept past its age is replaced by a new one: at most one more connection.
    assert!(
        after.0 - before.0 <= 1 && after.1 == before.1,
        "{failed} clients that never logged in cost the server {} connection(s), {} of them aborted",
        after.0 - before.0,
        after.1 - before.1
    );
    // The next client is greeted with a connection another left, and its handshake id is still
    // its backend session's.
    let mut c = try_login(port, "root", None).await.expect("log in");
    let id: Option<u32> = c.query_first("SELECT CONNECTION_ID()").await.expect("id");
    assert_eq!(id, Some(c.id()), "handshake id vs CONNECTION_ID()");
    let _ = c.disconnect().await;
    drop(proxy);
    server.stop();
}
