//! The operator's page (`--admin-listen`, docs/OPERATOR.md) end to end: a proxy with real
//! message tables, a stream group and traffic; the page loaded in headless Chromium, its figures
//! checked against the database, a screenshot kept (`target/tmp/admin/overview.png`); the
//! actions done, and refused without a login, with a wrong one, without the form's token and
//! from another site.
//!
//!     cargo test --test integration admin:: -- --test-threads=2

use mysql_async::prelude::Queryable;

use crate::messaging::harness::{ack, exec, now_ns, secs, Env, SEC};
use crate::messaging::work_queue::eventually;
use crate::streams::{insert_direct, orders_events, stream};
use crate::support::browser::{self, attribute, basic, http, Answer};
use crate::support::process::free_port;
use crate::support::wait_for_log;

/// `root` with no password for the tests' MySQL clients, and an operator.
const USERS: &str = "[[users]]\nname = \"root\"\npassword = \"\"\n\n\
                     [[users]]\nname = \"ops\"\npassword = \"ops-secret-pw\"\n";

/// Ack wait 0.5 s, one attempt: a message sent once and not acked is dead 0.5 s later. Acked
/// rows stay (purge after 600 s), so every state can be counted.
fn comment() -> &'static str {
    "vitess_message,vt_ack_wait=0.5,vt_min_backoff=0,vt_purge_after=600,vt_batch_size=20,\
     vt_cache_size=100,vt_poller_interval=0.5,vt_max_attempts=1"
}

const TABLE: &str = "(id bigint primary key, time_next bigint, epoch bigint, time_acked bigint, \
                     message varchar(50), index next_idx(time_next, epoch), index ack_idx(time_acked))";

async fn env(db: &str, admin_port: u16) -> Env {
    let listen = format!("127.0.0.1:{admin_port}");
    let env = Env::with_config(db, &["--admin-listen", &listen], USERS).await;
    wait_for_log(&env.proxy, "binlog: following from", 15).await;
    wait_for_log(&env.proxy, "operator's page at http://", 15).await;
    env
}

/// The table's states counted straight from the server: due, in flight, scheduled, dead,
/// acked (MESSAGING.md §2, written out here independently of the proxy's SQL).
async fn db_figures(env: &Env, table: &str) -> [u64; 5] {
    let mut c = env.direct_conn().await;
    let now = now_ns();
    let sql = format!(
        "SELECT \
           SUM((time_acked IS NULL OR time_acked = 0) AND (time_next IS NULL OR time_next <= {now})), \
           SUM((time_acked IS NULL OR time_acked = 0) AND time_next > {now} AND time_next < 9223372036854775807 AND epoch > 0), \
           SUM((time_acked IS NULL OR time_acked = 0) AND time_next > {now} AND time_next < 9223372036854775807 AND IFNULL(epoch, 0) = 0), \
           SUM((time_acked IS NULL OR time_acked = 0) AND time_next = 9223372036854775807), \
           SUM(time_acked IS NOT NULL AND time_acked <> 0) \
         FROM `{table}`"
    );
    let row: (u64, u64, u64, u64, u64) = c
        .query_first(sql)
        .await
        .expect("count the states")
        .expect("a row");
    let _ = c.disconnect().await;
    [row.0, row.1, row.2, row.3, row.4]
}

/// The same figures as the page shows them (its row's `data-` attributes).
fn page_figures(page: &str, table: &str) -> Option<[u64; 5]> {
    let marker = format!("data-table=\"{table}\"");
    let get = |name: &str| attribute(page, &marker, name)?.parse::<u64>().ok();
    Some([
        get("data-due")?,
        get("data-in-flight")?,
        get("data-scheduled")?,
        get("data-dead")?,
        get("data-acked-unpurged")?,
    ])
}

async fn get(port: u16, auth: Option<&str>) -> Answer {
    get_path(port, "/", auth).await
}

async fn get_path(port: u16, path: &str, auth: Option<&str>) -> Answer {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n"),
    )
    .await
}

async fn post(port: u16, auth: Option<&str>, extra_headers: &str, form: &str) -> Answer {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    http(
        port,
        &format!(
            "POST /action HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}{extra_headers}\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
    )
    .await
}

/// `n` messages sent once and never acked, so dead: waits until the server shows them dead.
async fn make_dead(env: &Env, table: &str, ids: std::ops::RangeInclusive<i64>) {
    let values: Vec<String> = ids.clone().map(|i| format!("({i}, 'poison')")).collect();
    env.via_proxy(&format!(
        "insert into `{table}`(id, message) values {}",
        values.join(", ")
    ))
    .await;
    let mut s = env.stream(&format!("`{table}`")).await;
    let n = ids.clone().count();
    assert_eq!(s.recv_n(n, secs(10.0)).await.len(), n, "{}", env.log());
    eventually(secs(10.0), "the poison messages dead", || async {
        let dead = db_figures(env, table).await[3];
        (dead < n as u64).then(|| format!("{dead} dead"))
    })
    .await;
    s.close();
}

#[tokio::test]
async fn the_page_in_chromium_shows_what_the_database_holds() {
    let port = free_port();
    let env = env("admin_page", port).await;
    env.ddl(&format!("create table q {TABLE} comment '{}'", comment()))
        .await;
    // A table whose name would be markup, and one that does not load.
    env.ddl(&format!(
        "create table `x<i>\"'&` {TABLE} comment '{}'",
        comment()
    ))
    .await;
    env.ddl(&format!(
        "create table broken {TABLE} comment 'vitess_message,vt_ack_wait=1'"
    ))
    .await;
    env.ddl(&orders_events("")).await;

    // Nine messages sent; six acked, three left to die.
    env.via_proxy(
        "insert into q(id, message) values (1,'a'),(2,'a'),(3,'a'),(4,'a'),(5,'a'),(6,'a'),(7,'p'),(8,'p'),(9,'p')",
    )
    .await;
    let mut s = env.stream("q").await;
    assert_eq!(s.recv_n(9, secs(10.0)).await.len(), 9);
    let mut c = env.proxy_conn().await;
    assert_eq!(ack(&mut c, "q", &[1, 2, 3, 4, 5, 6]).await, 6);
    eventually(secs(10.0), "three dead", || async {
        let dead = db_figures(&env, "q").await[3];
        (dead != 3).then(|| format!("{dead} dead"))
    })
    .await;
    s.close();
    // Then, with nobody streaming: two due, two due in an hour, one held by a consumer.
    let later = now_ns() + 3600 * SEC;
    env.direct(&format!(
        "insert into q(id, message, time_next, epoch) values (20, 'later', {later}, 0), \
         (21, 'later', {later}, 0), (30, 'held', {later}, 1), (40, 'due', 0, 0), (41, 'due', NULL, NULL)"
    ))
    .await;
    let want = db_figures(&env, "q").await;
    assert_eq!(want, [2, 1, 2, 3, 6], "the states set up");

    // A group with five events, two acked: three behind.
    let mut g = stream(&env, "* FROM orders_events GROUP 'billing' START LATEST").await;
    insert_direct(&env, 5, 5, "order.created").await;
    let events = g.recv_n(5, secs(10.0)).await;
    assert_eq!(events.len(), 5, "{}", env.log());
    exec(
        &mut c,
        &format!(
            "ACK orders_events GROUP 'billing' {}, {}",
            events[0].id, events[1].id
        ),
    )
    .await
    .expect("ack two events");

    let ops = basic("ops", "ops-secret-pw");
    // The depth is counted at each purge tick (0.5 s); the charts need two samples (5 s apart).
    eventually(secs(20.0), "the page's figures and charts", || async {
        let page = get(port, Some(&ops)).await;
        let figures = page_figures(&page.body, "admin_page.q");
        let behind = attribute(
            &page.body,
            "data-group=\"admin_page.orders_events/billing\"",
            "data-behind",
        );
        let charts = page.body.matches("<polyline").count();
        (figures != Some(want) || behind.as_deref() != Some("3") || charts < 6).then(|| {
            format!(
                "{figures:?}, behind {behind:?}, {charts} charts, status {}",
                page.status
            )
        })
    })
    .await;

    // The browser's view: the same figures, names escaped, the problem listed.
    let url = format!("http://ops:ops-secret-pw@127.0.0.1:{port}/");
    let dom = browser::dump_dom(&url);
    assert_eq!(page_figures(&dom, "admin_page.q"), Some(want), "{dom}");
    assert_eq!(
        attribute(&dom, "data-table=\"admin_page.q\"", "data-sent").as_deref(),
        Some("9")
    );
    assert_eq!(
        attribute(&dom, "data-table=\"admin_page.q\"", "data-dead-lettered").as_deref(),
        Some("3")
    );
    assert_eq!(
        attribute(&dom, "data-table=\"admin_page.q\"", "data-acked").as_deref(),
        Some("6")
    );
    assert_eq!(
        attribute(
            &dom,
            "data-group=\"admin_page.orders_events/billing\"",
            "data-in-flight"
        )
        .as_deref(),
        Some("3")
    );
    assert!(dom.contains("data-broken=\"admin_page.broken\""), "{dom}");
    assert!(
        dom.contains("x&lt;i&gt;\"'&amp;") || dom.contains("x&lt;i&gt;&quot;"),
        "{dom}"
    );
    assert!(!dom.contains("<i>\""), "a table name became markup: {dom}");
    assert!(dom.contains("Redrive 3 dead"), "{dom}");
    assert!(dom.contains("Signed in as <b>ops</b>"), "{dom}");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin/overview.png");
    browser::screenshot(&url, &shot);
    eprintln!("screenshot of the operator's page: {}", shot.display());

    // Without a login the browser gets the login challenge, not the page.
    let denied = browser::dump_dom(&format!("http://127.0.0.1:{port}/"));
    assert!(!denied.contains("data-table"), "{denied}");
    g.close();
    env.proxy.assert_alive();
}

#[tokio::test]
async fn actions_need_a_login_the_forms_token_and_the_same_site() {
    let port = free_port();
    let env = env("admin_actions", port).await;
    env.ddl(&format!("create table q {TABLE} comment '{}'", comment()))
        .await;
    make_dead(&env, "q", 1..=4).await;
    let ops = basic("ops", "ops-secret-pw");
    eventually(secs(10.0), "the page counts the dead messages", || async {
        let page = get(port, Some(&ops)).await;
        let dead = attribute(&page.body, "data-table=\"admin_actions.q\"", "data-dead");
        (dead.as_deref() != Some("4")).then(|| format!("{} {dead:?}", page.status))
    })
    .await;
    let page = get(port, Some(&ops)).await;
    let token = attribute(&page.body, "name=\"csrf\"", "value").expect("a form token on the page");
    let redrive = format!("action=redrive&schema=admin_actions&table=q&csrf={token}");
    let confirmed = format!("{redrive}&confirm=yes");
    let same_site = "Origin: http://127.0.0.1:PORT\r\nSec-Fetch-Site: same-origin\r\n"
        .replace("PORT", &port.to_string());

    // Refused: no login, a wrong one, no token, a forged token, another site's page.
    let no_login = get(port, None).await;
    assert_eq!(no_login.status, 401);
    assert!(
        no_login
            .head
            .contains("WWW-Authenticate: Basic realm=\"msgproxy\""),
        "{}",
        no_login.head
    );
    assert_eq!(get(port, Some(&basic("ops", "wrong"))).await.status, 401);
    assert_eq!(post(port, None, &same_site, &confirmed).await.status, 401);
    assert_eq!(
        post(port, Some(&basic("ops", "wrong")), &same_site, &confirmed)
            .await
            .status,
        401
    );
    assert_eq!(
        post(
            port,
            Some(&basic("nobody", "ops-secret-pw")),
            &same_site,
            &confirmed
        )
        .await
        .status,
        401
    );
    let no_token = post(
        port,
        Some(&ops),
        &same_site,
        "action=redrive&schema=admin_actions&table=q&confirm=yes",
    )
    .await;
    assert_eq!(no_token.status, 403, "{}", no_token.body);
    let forged = post(
        port,
        Some(&ops),
        &same_site,
        &confirmed.replace(&token, &"0".repeat(64)),
    )
    .await;
    assert_eq!(forged.status, 403);
    let cross = post(
        port,
        Some(&ops),
        "Origin: http://evil.example\r\nSec-Fetch-Site: cross-site\r\n",
        &confirmed,
    )
    .await;
    assert_eq!(cross.status, 403);
    assert!(cross.body.contains("another site"), "{}", cross.body);
    let cross_fetch = post(
        port,
        Some(&ops),
        "Sec-Fetch-Site: same-site\r\n",
        &confirmed,
    )
    .await;
    assert_eq!(cross_fetch.status, 403);
    // Root's token is not ops's.
    let root_page = get(port, Some(&basic("root", ""))).await;
    let root_token = attribute(&root_page.body, "name=\"csrf\"", "value").expect("root's token");
    assert_ne!(root_token, token);
    assert_eq!(
        post(
            port,
            Some(&ops),
            &same_site,
            &confirmed.replace(&token, &root_token)
        )
        .await
        .status,
        403
    );

    // Asked first: nothing happens until confirmed.
    let ask = post(port, Some(&ops), &same_site, &redrive).await;
    assert_eq!(ask.status, 200, "{}", ask.body);
    assert!(
        ask.body.contains("Yes, do it") && ask.body.contains("4 dead messages"),
        "{}",
        ask.body
    );
    assert_eq!(
        db_figures(&env, "q").await[3],
        4,
        "refused or unconfirmed, nothing was redriven"
    );

    let done = post(port, Some(&ops), &same_site, &confirmed).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body.contains("4 dead messages redriven"),
        "{}",
        done.body
    );
    let after = db_figures(&env, "q").await;
    assert_eq!(
        (after[0], after[3]),
        (4, 0),
        "due again, none dead: {after:?}"
    );
    let mut c = env.direct_conn().await;
    let epochs: Vec<Option<i64>> = c
        .query("select epoch from q order by id")
        .await
        .expect("epochs");
    assert_eq!(epochs, vec![Some(0); 4]);
    wait_for_log(
        &env.proxy,
        "operator's page: REDRIVE `admin_actions`.`q`",
        5,
    )
    .await;
    assert!(
        env.log().contains("user=\"ops\"") || env.log().contains("user=ops"),
        "{}",
        env.log()
    );
    let page = get(port, Some(&ops)).await;
    assert!(
        page.body.contains("4 dead messages redriven"),
        "the action is listed"
    );
    // A table that cannot have dead messages is refused with the reason.
    env.ddl("create table plain (id bigint primary key, time_next bigint, epoch bigint, time_acked bigint) \
             comment 'vitess_message,vt_ack_wait=1,vt_purge_after=1,vt_batch_size=1,vt_cache_size=10,vt_poller_interval=1'").await;
    let no_dead = post(
        port,
        Some(&ops),
        &same_site,
        &format!("action=redrive&schema=admin_actions&table=plain&csrf={token}"),
    )
    .await;
    assert_eq!(no_dead.status, 409);
    assert!(
        no_dead.body.contains("no vt_max_attempts"),
        "{}",
        no_dead.body
    );

    // SEEK a group back to its first event: the acked events come again.
    env.ddl(&orders_events("")).await;
    let mut g = stream(&env, "* FROM orders_events GROUP 'g' START LATEST").await;
    insert_direct(&env, 3, 3, "t").await;
    let first = g.recv_n(3, secs(10.0)).await;
    assert_eq!(first.len(), 3, "{}", env.log());
    let ids: Vec<String> = first.iter().map(|m| m.id.to_string()).collect();
    let mut c = env.proxy_conn().await;
    exec(
        &mut c,
        &format!("ACK orders_events GROUP 'g' {}", ids.join(", ")),
    )
    .await
    .expect("ack");
    let seek = format!(
        "action=seek&schema=admin_actions&table=orders_events&group=g&to=event&event={}&csrf={token}",
        first[0].id
    );
    let ask = post(port, Some(&ops), &same_site, &seek).await;
    assert_eq!(ask.status, 200, "{}", ask.body);
    g.expect_quiet(secs(0.5), "not moved before it is confirmed")
        .await;
    let done = post(port, Some(&ops), &same_site, &format!("{seek}&confirm=yes")).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let again = g.recv_n(3, secs(10.0)).await;
    assert_eq!(
        again.iter().map(|m| m.id).collect::<Vec<_>>(),
        first.iter().map(|m| m.id).collect::<Vec<_>>(),
        "{}",
        env.log()
    );
    let bad = post(
        port,
        Some(&ops),
        &same_site,
        &seek.replace("to=event", "to=somewhere"),
    )
    .await;
    assert_eq!(bad.status, 400);
    g.close();
    env.proxy.assert_alive();
}

#[tokio::test]
async fn the_public_view_is_read_only_and_off_by_default() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let env = Env::with_config(
        "admin_public",
        &["--admin-listen", &listen, "--admin-public-read"],
        USERS,
    )
    .await;
    wait_for_log(&env.proxy, "operator's page at http://", 15).await;
    env.ddl(&format!("create table q {TABLE} comment '{}'", comment()))
        .await;
    make_dead(&env, "q", 1..=1).await;
    eventually(secs(10.0), "the public page with the table", || async {
        let page = get(port, None).await;
        (page.status != 200 || !page.body.contains("data-table=\"admin_public.q\""))
            .then(|| format!("{}", page.status))
    })
    .await;
    let page = get(port, None).await;
    assert!(page.body.contains("Read-only view"), "{}", page.body);
    assert!(
        !page.body.contains("<form"),
        "no action forms without a login"
    );
    assert!(
        page.head
            .contains("Content-Security-Policy: default-src 'none'"),
        "{}",
        page.head
    );
    // A wrong password is still refused (not silently shown the public view).
    assert_eq!(get(port, Some(&basic("ops", "wrong"))).await.status, 401);
    let post_anon = post(
        port,
        None,
        "",
        "action=redrive&schema=admin_public&table=q&confirm=yes",
    )
    .await;
    assert_eq!(post_anon.status, 401);
    assert_eq!(db_figures(&env, "q").await[3], 1);
}

#[tokio::test]
async fn off_loopback_actions_need_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = crate::tls::self_signed(dir.path());
    let config = format!("{USERS}\n[tls]\ncert = \"{cert}\"\nkey = \"{key}\"\n");
    // Plain HTTP on every address: the page, but no actions.
    let port = free_port();
    let everywhere = format!("0.0.0.0:{port}");
    let env = Env::with_config("admin_remote", &["--admin-listen", &everywhere], &config).await;
    wait_for_log(&env.proxy, "(actions off: not loopback, not TLS)", 15).await;
    env.ddl(&format!("create table q {TABLE} comment '{}'", comment()))
        .await;
    make_dead(&env, "q", 1..=2).await;
    let ops = basic("ops", "ops-secret-pw");
    let page = get(port, Some(&ops)).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("Actions are off: this listener is neither loopback nor TLS"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<form"), "{}", page.body);
    let refused = post(
        port,
        Some(&ops),
        "",
        "action=redrive&schema=admin_remote&table=q&csrf=x&confirm=yes",
    )
    .await;
    assert_eq!(refused.status, 403);
    assert!(
        refused.body.contains("not loopback and not TLS"),
        "{}",
        refused.body
    );
    assert_eq!(db_figures(&env, "q").await[3], 2, "nothing redriven");

    // The same over HTTPS (--admin-tls): the browser sees the page with its actions.
    let tls_port = free_port();
    let tls_listen = format!("0.0.0.0:{tls_port}");
    let proxy = crate::support::Proxy::start(
        &env.server.url("admin_remote"),
        &["--admin-listen", &tls_listen, "--admin-tls"],
        Some(&config),
    );
    wait_for_log(
        &proxy,
        &format!("operator's page at https://0.0.0.0:{tls_port}/ (actions on)"),
        15,
    )
    .await;
    let url = format!("https://ops:ops-secret-pw@127.0.0.1:{tls_port}/");
    eventually(secs(20.0), "the redrive button over HTTPS", || async {
        let dom = browser::dump_dom_with(&url, &["--ignore-certificate-errors"]);
        (!dom.contains("Redrive 2 dead")).then(|| dom.chars().take(400).collect())
    })
    .await;
    // Plain HTTP to the HTTPS port gets no page.
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", tls_port))
        .await
        .expect("connect");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(secs(10.0), tcp.read_to_end(&mut got)).await;
    assert!(!String::from_utf8_lossy(&got).contains("data-table"));
    proxy.assert_alive();
}

/// Bounded and fast with many tables: 1,000 message tables (100 of them with a `STREAM` open and
/// messages waiting) and 100 stream groups, on a MariaDB of its own. Prints the page's size, the
/// time of a whole `GET /` (the stream groups' table read included) and the proxy's memory
/// before and after 100 loads. Not part of the suite (a minute or two of setup):
///
///     cargo test --test integration admin::scale -- --ignored --nocapture
#[tokio::test]
#[ignore]
async fn scale_1000_tables_and_100_groups() {
    use crate::messaging::harness::{connect, Stream};
    use crate::support::{MariaDb, Proxy};
    use std::time::Instant;

    let server: &'static MariaDb = Box::leak(Box::new(MariaDb::start()));
    let db = "admin_scale";
    let mut c = mysql_async::Conn::new(crate::support::opts(server.port(), "root", None, None))
        .await
        .expect("connect");
    exec(&mut c, "SET GLOBAL max_connections = 2000")
        .await
        .unwrap();
    exec(&mut c, &format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    exec(&mut c, &format!("USE {db}")).await.unwrap();
    let started = Instant::now();
    for i in 0..1000 {
        exec(
            &mut c,
            &format!(
                "create table q{i:04} {TABLE} comment 'vitess_message,vt_ack_wait=30,vt_purge_after=600,\
                 vt_batch_size=10,vt_cache_size=100,vt_poller_interval=5,vt_max_attempts=5'"
            ),
        )
        .await
        .unwrap();
    }
    for t in 0..10 {
        exec(
            &mut c,
            &format!(
                "create table ev{t} (id bigint auto_increment primary key, v int) comment 'msgproxy_stream'"
            ),
        )
        .await
        .unwrap();
    }
    eprintln!(
        "1,000 message tables and 10 stream tables created in {:?}",
        started.elapsed()
    );
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let proxy = Proxy::start(&server.url(db), &["--admin-listen", &listen], Some(USERS));
    wait_for_log(&proxy, "binlog: following from", 30).await;
    let mut pc = connect(proxy.port(), db).await;
    for t in 0..10 {
        for g in 0..10 {
            exec(&mut pc, &format!("SEEK ev{t} GROUP 'g{g}' TO LATEST"))
                .await
                .unwrap_or_else(|e| panic!("seek: {e:?}\n{}", proxy.log()));
        }
    }
    // 100 streams, each on a table of its own, each with five messages sent and held.
    let mut streams = Vec::new();
    for i in 0..100 {
        exec(
            &mut c,
            &format!(
                "insert into q{i:04}(id, message) values (1,'m'),(2,'m'),(3,'m'),(4,'m'),(5,'m')"
            ),
        )
        .await
        .unwrap();
        let mut s = Stream::open(proxy.port(), db, &format!("STREAM * FROM q{i:04}"))
            .await
            .expect("stream");
        assert_eq!(s.recv_n(5, secs(30.0)).await.len(), 5);
        streams.push(s);
    }
    let ops = basic("ops", "ops-secret-pw");
    // Every table counted (each at its first purge tick, within vt_poller_interval).
    eventually(
        secs(60.0),
        "1,000 tables and 100 groups on the page",
        || async {
            let page = get_path(port, "/?all=1", Some(&ops)).await;
            let counted = page.body.matches("data-counted-age").count();
            let groups = page.body.matches("data-group=").count();
            (counted < 1000 || groups < 100)
                .then(|| format!("{counted} tables counted, {groups} groups"))
        },
    )
    .await;
    let before = proxy.memory_kib().expect("memory");
    for path in ["/", "/?all=1"] {
        let mut times = Vec::new();
        let mut gather = Vec::new();
        let mut render = Vec::new();
        let mut size = 0;
        for _ in 0..100 {
            let t = Instant::now();
            let page = get_path(port, path, Some(&ops)).await;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(page.status, 200);
            let ms = |name: &str| -> f64 {
                attribute(&page.body, "id=\"timings\"", name)
                    .and_then(|v| v.parse().ok())
                    .expect("the page's timings")
            };
            gather.push(ms("data-gather-ms"));
            render.push(ms("data-render-ms"));
            size = page.body.len();
        }
        for v in [&mut times, &mut gather, &mut render] {
            v.sort_by(f64::total_cmp);
        }
        eprintln!(
            "GET {path}: {size} bytes; over 100 loads (ms, p50 / p90 / max): whole request {:.1} / {:.1} / {:.1}, \
             figures gathered {:.1} / {:.1} / {:.1}, HTML written {:.1} / {:.1} / {:.1}",
            times[50], times[90], times[99], gather[50], gather[90], gather[99], render[50], render[90], render[99]
        );
    }
    let after = proxy.memory_kib().expect("memory");
    let page = get(port, Some(&ops)).await;
    assert!(
        page.body.contains("data-hidden-tables=\"800\""),
        "the 200 busiest listed"
    );
    assert_eq!(
        attribute(
            &page.body,
            "data-table=\"admin_scale.q0042\"",
            "data-in-flight"
        )
        .as_deref(),
        Some("5")
    );
    assert_eq!(
        attribute(
            &page.body,
            "data-table=\"admin_scale.q0042\"",
            "data-streams"
        )
        .as_deref(),
        Some("1")
    );
    eprintln!(
        "proxy RSS {} KiB before the 200 loads, {} KiB after (peak {} KiB)",
        before.0, after.0, after.1
    );
    for s in streams {
        s.close();
    }
    drop(proxy);
    server.stop();
}
