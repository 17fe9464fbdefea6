//! TLS between client and proxy (`[tls]` in the config), with the `mariadb` client (the suite's
//! mysql_async is built without TLS).

use std::path::Path;
use std::process::Command;

use crate::support::{Cli, MariaDb, Proxy};

/// A throwaway self-signed certificate for 127.0.0.1, made with the `openssl` command.
fn self_signed(dir: &Path) -> (String, String) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|e| {
            panic!("the TLS tests need the `openssl` command (apt-get install openssl): {e}")
        });
    assert!(status.status.success(), "openssl failed: {status:?}");
    (cert.display().to_string(), key.display().to_string())
}

fn config(cert: &str, key: &str, require: bool) -> String {
    format!(
        "[[users]]\nname = \"it_app\"\npassword = \"secret\"\n\n\
         [tls]\ncert = \"{cert}\"\nkey = \"{key}\"\nrequire = {require}\n"
    )
}

#[tokio::test]
async fn tls_sessions_work_and_carry_big_results() {
    let server = MariaDb::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = self_signed(dir.path());
    let proxy = Proxy::start(
        &server.backend_url(),
        &[],
        Some(&config(&cert, &key, false)),
    );
    let cli = || Cli::new(proxy.port()).user("it_app", Some("secret"));

    let status = cli().run(&["--ssl", "-e", "\\s"]);
    assert!(status.success(), "{status:?}\n{}", proxy.log());
    assert!(
        status.stdout.contains("Cipher in use"),
        "no TLS in the client's status: {}",
        status.stdout
    );
    // 20 MiB through TLS records (and across 16 MiB packet boundaries).
    let big = cli().run(&[
        "--ssl",
        "--max-allowed-packet=64M",
        "-N",
        "-e",
        "SELECT REPEAT('x', 20971520)",
    ]);
    assert!(big.success(), "{:?}", big.stderr);
    assert_eq!(big.stdout.trim_end().len(), 20971520);
    // require = false: plaintext sessions are still welcome.
    let plain = cli().run(&["--skip-ssl", "-N", "-e", "SELECT 'plain'"]);
    assert!(
        plain.success() && plain.stdout.trim() == "plain",
        "{plain:?}"
    );
    let wrong = Cli::new(proxy.port())
        .user("it_app", Some("bad"))
        .run(&["--ssl", "-e", "SELECT 1"]);
    assert!(wrong.stderr.contains("ERROR 1045 (28000)"), "{wrong:?}");
}

#[tokio::test]
async fn tls_required_refuses_plaintext_clients() {
    let server = MariaDb::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = self_signed(dir.path());
    let proxy = Proxy::start(&server.backend_url(), &[], Some(&config(&cert, &key, true)));
    let cli = || Cli::new(proxy.port()).user("it_app", Some("secret"));
    let plain = cli().run(&["--skip-ssl", "-e", "SELECT 1"]);
    assert!(
        !plain.success() && plain.stderr.contains("ERROR 3159 (HY000)"),
        "plaintext client with require = true: {plain:?}"
    );
    let tls = cli().run(&["--ssl", "-N", "-e", "SELECT 'over tls'"]);
    assert!(
        tls.success() && tls.stdout.trim() == "over tls",
        "{tls:?}\n{}",
        proxy.log()
    );
    proxy.assert_alive();
}
