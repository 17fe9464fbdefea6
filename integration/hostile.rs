//! Hostile input: random, truncated, oversized and out-of-order packets thrown at the listening
//! proxy over raw TCP. After every attack the proxy process must still be running and an ordinary
//! client (mysql_async) must log in and run `SELECT 1`.
//!
//! The random part uses a fixed-seed xorshift generator, so a failure names an iteration that
//! reproduces with the test alone.

use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::Conn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::raw::{
    command_frame, RawConn, CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH, CLIENT_PLUGIN_AUTH_LENENC,
    CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION, COM_QUERY, COM_STMT_EXECUTE,
};
use crate::support::{opts, within, MariaDb, Proxy};

const CLIENT_CONNECT_ATTRS: u32 = 0x10_0000;
const COM_BINLOG_DUMP: u8 = 0x12;

/// Deterministic generator (no dependency, same inputs every run).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One packet: 3-byte length, sequence id, payload.
fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    out.push(seq);
    out.extend_from_slice(payload);
    out
}

/// A well-formed handshake response for root without a password (what the tests truncate and
/// corrupt).
fn good_handshake_response() -> Vec<u8> {
    let caps = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH | 1;
    let mut p = caps.to_le_bytes().to_vec();
    p.extend_from_slice(&(16u32 << 20).to_le_bytes());
    p.push(45);
    p.extend_from_slice(&[0u8; 23]);
    p.extend_from_slice(b"root\0");
    p.push(0); // empty auth response
    p.extend_from_slice(b"mysql_native_password\0");
    p
}

/// The fixed header of a handshake response with capabilities `caps`.
fn response_head(caps: u32) -> Vec<u8> {
    let mut p = caps.to_le_bytes().to_vec();
    p.extend_from_slice(&(16u32 << 20).to_le_bytes());
    p.push(45);
    p.extend_from_slice(&[0u8; 23]);
    p
}

/// Handshake responses whose lengths point past the end of the packet.
fn lying_handshake_responses() -> Vec<Vec<u8>> {
    let base = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH | 1;
    let mut out = Vec::new();
    // lenenc auth response of 65535 bytes, 3 present.
    let mut p = response_head(base | CLIENT_PLUGIN_AUTH_LENENC);
    p.extend_from_slice(b"root\0\xfc\xff\xff abc");
    out.push(p);
    // lenenc auth response of 2^64-1 bytes.
    let mut p = response_head(base | CLIENT_PLUGIN_AUTH_LENENC);
    p.extend_from_slice(b"root\0\xfe\xff\xff\xff\xff\xff\xff\xff\xff");
    out.push(p);
    // 1-byte auth length 250, nothing after it.
    let mut p = response_head(base);
    p.extend_from_slice(b"root\0\xfa");
    out.push(p);
    // user name without its NUL.
    let mut p = response_head(base);
    p.extend_from_slice(b"rootrootroot");
    out.push(p);
    // database announced, missing.
    let mut p = response_head(base | CLIENT_CONNECT_WITH_DB);
    p.extend_from_slice(b"root\0\0");
    out.push(p);
    // connect attributes of huge length.
    let mut p = response_head(base | CLIENT_CONNECT_ATTRS);
    p.extend_from_slice(b"root\0\0mysql_native_password\0\xfd\xff\xff\xff\x03_os");
    out.push(p);
    // connect attributes whose inner key length lies.
    let mut p = response_head(base | CLIENT_CONNECT_ATTRS);
    p.extend_from_slice(b"root\0\0mysql_native_password\0\x05\xfc\xff\xff_o");
    out.push(p);
    // shorter than the fixed header.
    out.push(vec![0x85, 0xa2]);
    out.push(Vec::new());
    out
}

/// Connects, optionally reads the greeting, writes `bytes`, half-closes, and reads whatever comes
/// for at most `wait` (the proxy may answer with an error, close, or wait for more).
async fn attack(port: u16, greeting_first: bool, bytes: &[u8], wait: Duration) {
    let Ok(Ok(mut s)) = tokio::time::timeout(
        Duration::from_secs(5),
        TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    else {
        panic!("cannot connect to the proxy on port {port}");
    };
    let mut buf = vec![0u8; 64 * 1024];
    if greeting_first {
        // The greeting is one packet; reading what arrives first is enough.
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    }
    let _ = s.write_all(bytes).await;
    let _ = s.flush().await;
    let _ = s.shutdown().await;
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => continue,
            _ => return,
        }
    }
}

/// A raw client logged in as root to database `test`.
async fn raw_login(port: u16) -> RawConn {
    within(
        10,
        "raw login",
        RawConn::connect(port, "root", "", Some("test")),
    )
    .await
    .unwrap_or_else(|e| panic!("raw login: {e:?}"))
}

/// Logs in with the raw client, writes `bytes`, reads answers until quiet, walks away.
async fn after_login(port: u16, bytes: &[u8], quiet: Duration) -> Vec<Vec<u8>> {
    let mut c = raw_login(port).await;
    let _ = c.write_raw(bytes).await;
    // A command's answer starts at sequence id 1.
    c.expect_seq(1);
    let got = c.read_until_quiet(quiet).await;
    c.abandon();
    got
}

/// Logs in with the raw client, writes `bytes` (one command), and requires an ERR packet for it
/// and then a working `SELECT 1` on the same session: the command was refused, the session
/// goes on (as MariaDB itself does for these).
async fn refused_and_session_goes_on(port: u16, bytes: &[u8], what: &str) {
    let mut c = raw_login(port).await;
    c.write_raw(bytes).await.expect("send the command");
    c.expect_seq(1);
    let got = c.read_packet_timeout(Duration::from_secs(5)).await;
    assert!(
        matches!(&got, Ok(p) if p.starts_with(&[0xff])),
        "{what}: expected an ERR packet, got {got:02x?}"
    );
    let rows = within(10, "SELECT 1 after the ERR", c.query("SELECT 1")).await;
    assert!(
        rows.is_ok(),
        "{what}: after the ERR the session should go on: {rows:02x?}"
    );
    c.abandon();
}

/// The proxy is alive and serves an ordinary client.
async fn assert_healthy(proxy: &Proxy, after: &str) {
    assert!(
        proxy.is_alive(),
        "msgproxy died after {after}; its stderr:\n{}",
        proxy.log()
    );
    let mut c = match within(
        10,
        "login",
        Conn::new(opts(proxy.port(), "root", None, Some("test"))),
    )
    .await
    {
        Ok(c) => c,
        Err(e) => panic!("after {after}: login fails: {e}\n{}", proxy.log()),
    };
    let one: Option<i64> = within(10, "SELECT 1", c.query_first("SELECT 1"))
        .await
        .unwrap_or_else(|e| panic!("after {after}: SELECT 1 fails: {e}"));
    assert_eq!(one, Some(1), "after {after}");
    let _ = c.disconnect().await;
    // A task that panics does not take the process down, but it is a bug all the same.
    let log = proxy.log();
    assert!(
        !log.contains("panicked"),
        "after {after}: a task of msgproxy panicked:\n{log}"
    );
}

fn start(server: &MariaDb) -> Proxy {
    Proxy::start(&server.backend_url(), &[], Some("handshake_timeout = 1\n"))
}

#[tokio::test]
async fn hostile_fixed_attacks_leave_the_proxy_serving() {
    let server = MariaDb::shared();
    let proxy = start(server);
    let port = proxy.port();
    let short = Duration::from_millis(500);

    attack(port, false, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", short).await;
    assert_healthy(&proxy, "garbage before the greeting").await;

    attack(
        port,
        true,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        short,
    )
    .await;
    assert_healthy(&proxy, "garbage instead of a handshake response").await;

    for (i, p) in lying_handshake_responses().into_iter().enumerate() {
        attack(port, true, &frame(1, &p), short).await;
        assert_healthy(&proxy, &format!("lying handshake response #{i}")).await;
    }

    let mut bytes = frame(1, &good_handshake_response());
    bytes.extend_from_slice(b"\x00\x00\x00garbage after the handshake response");
    attack(port, true, &bytes, short).await;
    assert_healthy(&proxy, "garbage after the handshake response").await;

    attack(port, true, b"\xff\xff\xff\x01abc", short).await;
    assert_healthy(&proxy, "16 MiB handshake header then EOF").await;

    after_login(port, b"\xff\xff\xff\x00\x03SELECT", short).await;
    assert_healthy(&proxy, "16 MiB command header then EOF").await;

    // A command with sequence id 5 instead of 0.
    let mut wrong_seq = command_frame(COM_QUERY, b"SELECT 1");
    wrong_seq[3] = 5;
    after_login(port, &wrong_seq, short).await;
    assert_healthy(&proxy, "command with a wrong sequence id").await;

    refused_and_session_goes_on(port, &frame(0, &[]), "an empty command packet").await;
    assert_healthy(&proxy, "empty command packet").await;

    // COM_STMT_EXECUTE of a statement never prepared: an error, and the session goes on.
    let mut arg = 0x7fff_1234u32.to_le_bytes().to_vec();
    arg.push(0);
    arg.extend_from_slice(&1u32.to_le_bytes());
    refused_and_session_goes_on(
        port,
        &command_frame(COM_STMT_EXECUTE, &arg),
        "COM_STMT_EXECUTE of an unknown statement",
    )
    .await;
    assert_healthy(&proxy, "COM_STMT_EXECUTE of an unknown statement").await;

    // COM_BINLOG_DUMP: position 4, no flags, server id 77, no file name. The proxy refuses
    // replication commands (an ERR naming the reason) and keeps the session.
    let mut arg = 4u32.to_le_bytes().to_vec();
    arg.extend_from_slice(&0u16.to_le_bytes());
    arg.extend_from_slice(&77u32.to_le_bytes());
    refused_and_session_goes_on(
        port,
        &command_frame(COM_BINLOG_DUMP, &arg),
        "COM_BINLOG_DUMP",
    )
    .await;
    assert_healthy(&proxy, "COM_BINLOG_DUMP").await;

    after_login(port, b"\x01\x00\x00\x00", short).await;
    assert_healthy(&proxy, "command packet without a sequence/command body").await;
}

/// A client that connects and never finishes the handshake is closed after handshake_timeout.
#[tokio::test]
async fn hostile_handshake_that_never_finishes_is_closed() {
    let server = MariaDb::shared();
    let proxy = start(server);
    for partial in [&b""[..], b"\x20\x00", b"\x40\x00\x00\x01\x85\xa2"] {
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        let started = Instant::now();
        let mut buf = vec![0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        let _ = s.write_all(partial).await;
        // Read until EOF (or reset): the proxy must close within a few seconds.
        let closed = loop {
            match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                Ok(Ok(_)) => continue,
                Err(_) => break false,
            }
        };
        let took = started.elapsed();
        assert!(
            closed && took < Duration::from_secs(4),
            "handshake_timeout = 1, partial handshake {partial:02x?}: closed {closed} after {took:?}"
        );
        assert_healthy(&proxy, "an unfinished handshake").await;
    }
}

/// A few hundred random attacks (garbage, corrupted and truncated handshakes, random commands).
#[tokio::test]
async fn hostile_random_packets_leave_the_proxy_serving() {
    let server = MariaDb::shared();
    let proxy = start(server);
    let port = proxy.port();
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let began = Instant::now();
    let wait = Duration::from_millis(40);
    let good = good_handshake_response();
    for i in 0..300 {
        // Stay well inside the test's time budget on a slow machine.
        if began.elapsed() > Duration::from_secs(15) {
            eprintln!("hostile random: stopped after {i} iterations (time budget)");
            break;
        }
        let kind = rng.below(6);
        let what = match kind {
            0 => {
                let n = rng.below(200);
                let bytes = rng.bytes(n);
                attack(port, rng.below(2) == 0, &bytes, wait).await;
                "random bytes at connect"
            }
            1 => {
                let cut = rng.below(good.len() + 1);
                let mut p = frame(1, &good);
                p.truncate(4 + cut);
                attack(port, true, &p, wait).await;
                "truncated handshake response"
            }
            2 => {
                let mut p = good.clone();
                for _ in 0..=rng.below(4) {
                    let at = rng.below(p.len());
                    p[at] = rng.next() as u8;
                }
                attack(port, true, &frame(rng.below(3) as u8, &p), wait).await;
                "corrupted handshake response"
            }
            3 => {
                let n = rng.below(300);
                let bytes = rng.bytes(n);
                after_login(port, &bytes, wait).await;
                "random bytes after login"
            }
            4 => {
                // A real command byte with a random (often truncated) argument.
                let command = rng.below(0x20) as u8;
                // Skip what could harm the shared server or other tests' sessions:
                // COM_CREATE_DB, COM_DROP_DB, COM_REFRESH, COM_SHUTDOWN, COM_PROCESS_KILL.
                let command = if matches!(command, 0x05..=0x08 | 0x0c) {
                    0x0e
                } else {
                    command
                };
                let n = rng.below(40);
                let arg = rng.bytes(n);
                let mut f = command_frame(command, &arg);
                if rng.below(4) == 0 {
                    let cut = rng.below(f.len());
                    f.truncate(cut);
                }
                after_login(port, &f, wait).await;
                "random command"
            }
            _ => {
                // A header announcing more than follows.
                let len = rng.next() as u32 & 0xff_ffff;
                let mut f = len.to_le_bytes()[..3].to_vec();
                f.push(rng.next() as u8);
                let n = rng.below(20);
                f.extend_from_slice(&rng.bytes(n));
                if rng.below(2) == 0 {
                    attack(port, true, &f, wait).await;
                } else {
                    after_login(port, &f, wait).await;
                }
                "oversized header"
            }
        };
        assert!(
            proxy.is_alive(),
            "msgproxy died at random iteration {i} ({what}); its stderr:\n{}",
            proxy.log()
        );
        assert_healthy(&proxy, &format!("random iteration {i} ({what})")).await;
    }
    assert_healthy(&proxy, "the random attacks").await;
    let log = proxy.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    eprintln!(
        "hostile random: proxy log has {} lines, {} at ERROR level{}",
        log.lines().count(),
        errors.len(),
        errors
            .first()
            .map(|l| format!(", first: {l}"))
            .unwrap_or_default()
    );
}

/// Oversized and stalled packets: a header announcing 16 MiB before login is refused at once
/// (not buffered); a command begun after login and then left unfinished closes the session
/// after `net_read_timeout`; an ACK longer than msgproxy reads whole is refused with error 1153
/// after its packets, and the session goes on.
#[tokio::test]
async fn hostile_oversized_and_stalled_packets_are_cut_off() {
    let server = MariaDb::shared();
    let proxy = Proxy::start(&server.backend_url(), &[], Some("net_read_timeout = 1\n"));
    let port = proxy.port();

    // Before login (handshake_timeout is the default 10 s): closed well before that.
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut buf = vec![0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    let started = Instant::now();
    s.write_all(b"\xff\xff\xff\x01abc").await.expect("send");
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(8), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(_)) => continue,
            Err(_) => break false,
        }
    };
    assert!(
        closed && started.elapsed() < Duration::from_secs(5),
        "a 16 MiB handshake header: closed {closed} after {:?}",
        started.elapsed()
    );
    assert_healthy(&proxy, "a 16 MiB handshake header, connection left open").await;

    // After login: a 16 MiB COM_QUERY header and 7 bytes, then silence with the socket open.
    let mut c = raw_login(port).await;
    c.write_raw(b"\xff\xff\xff\x00\x03SELECT")
        .await
        .expect("send");
    c.expect_seq(1);
    let started = Instant::now();
    let got = c.read_packet_timeout(Duration::from_secs(15)).await;
    let took = started.elapsed();
    assert!(
        got.is_err() && took < Duration::from_secs(10),
        "net_read_timeout = 1: the stalled session should be closed, got {got:02x?} after {took:?}"
    );
    c.abandon();
    assert_healthy(&proxy, "a command begun and left unfinished").await;

    // An ACK of 40 MiB: three physical packets, refused after the last of them.
    let mut c = raw_login(port).await;
    let mut ack = b"ACK m 1".to_vec();
    while ack.len() < 40 << 20 {
        ack.extend_from_slice(b", 1");
    }
    within(30, "send a 40 MiB ACK", c.send_command(COM_QUERY, &ack))
        .await
        .expect("send the ACK");
    // The answer follows the client's three packets: sequence id 3 (checked by read_packet).
    let got = within(30, "the ACK's answer", c.read_packet())
        .await
        .expect("an answer to the long ACK");
    match crate::support::raw::parse_err(&got) {
        crate::support::raw::RawError::Server { code, state, .. } => {
            assert_eq!((code, state.as_str()), (1153, "08S01"), "a 40 MiB ACK")
        }
        other => panic!("a 40 MiB ACK: expected error 1153, got {other:?}"),
    }
    let rows = within(10, "SELECT 1 after the long ACK", c.query("SELECT 1")).await;
    assert!(
        rows.is_ok(),
        "after the refused ACK the session goes on: {rows:02x?}"
    );
    c.abandon();
    assert_healthy(&proxy, "a 40 MiB ACK").await;
}
