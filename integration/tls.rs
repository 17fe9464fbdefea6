//! TLS between client and proxy (`[tls]` in the config), with the `mariadb` client (the suite's
//! mysql_async is built without TLS).

use std::path::Path;
use std::process::Command;

use crate::support::{Cli, MariaDb, Proxy};

/// A throwaway self-signed certificate for 127.0.0.1, made with the `openssl` command.
pub(crate) fn self_signed(dir: &Path) -> (String, String) {
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
    let socket = dir.path().join("msgproxy.sock");
    let proxy = Proxy::start(
        &server.backend_url(),
        &["--listen-socket", &socket.display().to_string()],
        Some(&config(&cert, &key, true)),
    );
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
    // A Unix socket is secure transport, as for the server's require_secure_transport.
    let local = Cli::over_socket(&socket)
        .user("it_app", Some("secret"))
        .run(&["--skip-ssl", "-N", "-e", "SELECT 'on the socket'"]);
    assert!(
        local.success() && local.stdout.trim() == "on the socket",
        "{local:?}\n{}",
        proxy.log()
    );
    proxy.assert_alive();
}

/// The proxy's refusals at connect — its backend out of reach (1429), its client limit reached
/// (1040) — come after a greeting that offers TLS, so a client that asks for TLS gets them over
/// TLS, with their SQLSTATE, rather than "error packet before completion of TLS handshake".
#[tokio::test]
async fn refusals_at_connect_reach_a_client_that_asks_for_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = self_signed(dir.path());
    let dead = crate::support::process::free_port();
    let unreachable = Proxy::start(
        &format!("mysql://root@127.0.0.1:{dead}/test"),
        &[],
        Some(&config(&cert, &key, false)),
    );
    let refused = Cli::new(unreachable.port())
        .user("it_app", Some("secret"))
        .run(&["--ssl", "-e", "SELECT 1"]);
    assert!(
        refused
            .stderr
            .contains("ERROR 1429 (08004): msgproxy cannot reach its backend MySQL server"),
        "{refused:?}"
    );
    unreachable.assert_alive();

    let server = MariaDb::shared();
    let full = Proxy::start(
        &server.backend_url(),
        &["--max-connections", "1"],
        Some(&config(&cert, &key, false)),
    );
    let _holder = hold_the_only_slot(full.port());
    let over = Cli::new(full.port())
        .user("it_app", Some("secret"))
        .run(&["--ssl", "-e", "SELECT 1"]);
    assert!(
        over.stderr
            .contains("ERROR 1040 (08004): Too many connections"),
        "{over:?}"
    );
    full.assert_alive();
}

/// A connection that never logs in, and so holds a slot until its handshake times out. Tried
/// until its greeting is a real one (a backend's connection id, not the refusal's 0): the
/// readiness probe of `Proxy::start` may hold the slot for a moment.
fn hold_the_only_slot(port: u16) -> std::net::TcpStream {
    use std::io::Read;
    for _ in 0..50 {
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut greeting = [0u8; 128];
        let n = tcp.read(&mut greeting).expect("read the greeting");
        // Header (4 bytes), protocol version (1), the version string up to its NUL, then the
        // connection id (4 bytes, little-endian).
        let id_at = greeting[5..n]
            .iter()
            .position(|&b| b == 0)
            .map(|nul| 5 + nul + 1);
        let id = id_at.and_then(|at| greeting.get(at..at + 4));
        if id.is_some_and(|id| id != [0, 0, 0, 0]) {
            return tcp;
        }
        // Retry pace until a slot is free, not a wait for something.
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("no slot came free on the proxy at port {port}");
}

/// A client may send its TLS ClientHello in the same segment as the SSL request packet (mysqlnd
/// sometimes does): the bytes after the request belong to the TLS handshake.
#[tokio::test]
async fn a_client_hello_in_the_ssl_requests_segment_is_read() {
    use std::io::{Read, Write};
    use tokio_rustls::rustls;

    let server = MariaDb::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = self_signed(dir.path());
    let proxy = Proxy::start(
        &server.backend_url(),
        &[],
        Some(&config(&cert, &key, false)),
    );
    let port = proxy.port();
    let done = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        let mut tcp =
            std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut header = [0u8; 4];
        tcp.read_exact(&mut header).map_err(|e| e.to_string())?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        let mut greeting = vec![0u8; len];
        tcp.read_exact(&mut greeting).map_err(|e| e.to_string())?;
        // CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH
        let caps: u32 = 0x200 | 0x800 | 0x8000 | 0x80000;
        let mut ssl_request = vec![32, 0, 0, 1];
        ssl_request.extend_from_slice(&caps.to_le_bytes());
        ssl_request.extend_from_slice(&(16u32 << 20).to_le_bytes());
        ssl_request.push(45);
        ssl_request.extend_from_slice(&[0; 23]);

        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate))
        .with_no_client_auth();
        let name =
            rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
        let mut tls = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
            .map_err(|e| e.to_string())?;
        let mut hello = Vec::new();
        tls.write_tls(&mut hello).map_err(|e| e.to_string())?;
        // One write: the SSL request and the ClientHello together.
        ssl_request.extend_from_slice(&hello);
        tcp.write_all(&ssl_request).map_err(|e| e.to_string())?;
        let mut stream = rustls::Stream::new(&mut tls, &mut tcp);
        // The handshake completes, then the proxy waits for the login: nothing to read yet, so
        // finishing the handshake is the check.
        stream.flush().map_err(|e| format!("TLS handshake: {e}"))?;
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(stream.sock)
                .map_err(|e| format!("TLS handshake: {e}"))?;
        }
        Ok(hello)
    });
    let result = crate::support::within(20, "TLS handshake", done)
        .await
        .expect("the client thread");
    assert!(result.is_ok(), "{result:?}\n{}", proxy.log());
    proxy.assert_alive();
}

/// Accepts any server certificate: the test checks the handshake, not the certificate.
#[derive(Debug)]
struct AnyCertificate;

impl tokio_rustls::rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _: &[tokio_rustls::rustls::pki_types::CertificateDer<'_>],
        _: &tokio_rustls::rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: tokio_rustls::rustls::pki_types::UnixTime,
    ) -> Result<tokio_rustls::rustls::client::danger::ServerCertVerified, tokio_rustls::rustls::Error>
    {
        Ok(tokio_rustls::rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        Ok(tokio_rustls::rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        Ok(tokio_rustls::rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
        tokio_rustls::rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
