//! TLS between the proxy and the server (`?ssl-mode=...&ssl-ca=...` in `--backend`), against a
//! MariaDB started with a certificate signed by a CA of the test's own, and a backend user that
//! the server lets in over TLS only (`REQUIRE SSL`): client sessions, the message engine's pool
//! and the binlog watcher all reach it, and a certificate that does not check out is refused.

use std::path::Path;
use std::process::Command;

use mysql_async::prelude::*;
use mysql_async::Conn;

use crate::support::{opts, wait_for_log, Failure, MariaDb, Proxy};

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("the TLS tests need the `openssl` command (apt-get install openssl): {e}")
        });
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA (`name`.pem) and, when `server`, a certificate it signed for `localhost` only
/// (server.pem, server.key).
fn make_ca(dir: &Path, name: &str, server: bool) {
    let (pem, key) = (format!("{name}.pem"), format!("{name}.key"));
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=msgproxy test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &key,
            "-out",
            &pem,
        ],
        dir,
    );
    if server {
        openssl(
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
            dir,
        );
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .expect("ext.cnf");
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                &pem,
                "-CAkey",
                &key,
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
                "-out",
                "server.pem",
            ],
            dir,
        );
    }
}

/// What a fresh client of `proxy` gets: the server's `Ssl_cipher` for its session, or the error.
async fn session_cipher(proxy: &Proxy) -> Result<String, Failure> {
    let mut c = Conn::new(opts(proxy.port(), "root", None, Some("test")))
        .await
        .map_err(|e| Failure::of(&e))?;
    let row: Option<(String, String)> = c
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .map_err(|e| Failure::of(&e))?;
    let _ = c.disconnect().await;
    Ok(row.map(|(_, v)| v).unwrap_or_default())
}

#[tokio::test]
async fn backend_tls_modes_against_a_server_with_a_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_ca(dir.path(), "ca", true);
    make_ca(dir.path(), "other", false);
    let path = |f: &str| dir.path().join(f).display().to_string();
    let server = MariaDb::start_with(&[
        &format!("--ssl-ca={}", path("ca.pem")),
        &format!("--ssl-cert={}", path("server.pem")),
        &format!("--ssl-key={}", path("server.key")),
    ]);
    {
        let mut admin = Conn::new(opts(server.port(), "root", None, None))
            .await
            .expect("connect");
        admin
            .query_drop(
                "CREATE USER tls_only IDENTIFIED BY 'pw' REQUIRE SSL; \
                 GRANT ALL ON *.* TO tls_only",
            )
            .await
            .expect("a user that needs TLS");
        let _ = admin.disconnect().await;
    }
    let url = |host: &str, params: &str| {
        format!("mysql://tls_only:pw@{host}:{}/test?{params}", server.port())
    };

    // The certificate names `localhost`: checked in full, it works, for sessions, the message
    // engine and the binlog watcher alike.
    let proxy = Proxy::start(
        &url(
            "localhost",
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", path("ca.pem")),
        ),
        &[],
        None,
    );
    let cipher = session_cipher(&proxy).await;
    assert!(
        cipher.as_ref().is_ok_and(|c| !c.is_empty()),
        "VERIFY_IDENTITY: {cipher:?}\n{}",
        proxy.log()
    );
    wait_for_log(&proxy, "binlog: following", 20).await;
    let mut c = Conn::new(opts(proxy.port(), "root", None, Some("test")))
        .await
        .expect("connect");
    c.query_drop(
        "CREATE TABLE m (id bigint primary key, time_next bigint, epoch bigint, \
         time_acked bigint, message varchar(20)) COMMENT 'vitess_message,vt_ack_wait=5,vt_purge_after=1,vt_batch_size=10,\
         vt_cache_size=1000,vt_poller_interval=1'",
    )
    .await
    .expect("create a message table");
    // The engine read its definition over TLS: ACK knows it.
    c.query_drop("ACK m 1")
        .await
        .unwrap_or_else(|e| panic!("ACK over the engine's TLS pool: {e}\n{}", proxy.log()));
    let _ = c.disconnect().await;
    drop(proxy);

    // By address, the name does not match: VERIFY_IDENTITY refuses, VERIFY_CA does not check it.
    let by_ip = Proxy::start(
        &url(
            "127.0.0.1",
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", path("ca.pem")),
        ),
        &[],
        None,
    );
    match session_cipher(&by_ip).await {
        Err(Failure::Server { code: 1429, .. }) => {}
        other => panic!("VERIFY_IDENTITY by address: expected 1429, got {other:?}"),
    }
    drop(by_ip);
    for params in [
        format!("ssl-mode=VERIFY_CA&ssl-ca={}", path("ca.pem")),
        "ssl-mode=REQUIRED".to_string(),
        "ssl-mode=PREFERRED".to_string(),
    ] {
        let proxy = Proxy::start(&url("127.0.0.1", &params), &[], None);
        let cipher = session_cipher(&proxy).await;
        assert!(
            cipher.as_ref().is_ok_and(|c| !c.is_empty()),
            "{params}: {cipher:?}\n{}",
            proxy.log()
        );
    }
    // Another CA: refused. No TLS: the server refuses the user.
    for (params, code) in [
        (
            format!("ssl-mode=VERIFY_CA&ssl-ca={}", path("other.pem")),
            1429,
        ),
        ("ssl-mode=DISABLED".to_string(), 1045),
    ] {
        let proxy = Proxy::start(&url("127.0.0.1", &params), &[], None);
        match session_cipher(&proxy).await {
            Err(Failure::Server { code: got, .. }) if got == code => {}
            other => panic!("{params}: expected {code}, got {other:?}\n{}", proxy.log()),
        }
    }
    server.stop();
}
