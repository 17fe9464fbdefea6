//! A tiny raw MySQL-protocol client, for what `mysql_async` cannot send (COM_STATISTICS,
//! COM_FIELD_LIST), for byte-exact comparisons, and for walking away in the middle of a result.
//!
//! Deliberately minimal: protocol 41, no TLS, no compression, no CLIENT_DEPRECATE_EOF, auth with
//! mysql_native_password or the caching_sha2_password fast path.

use std::time::Duration;

use sha1::Sha1;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const CLIENT_LONG_PASSWORD: u32 = 1;
pub const CLIENT_LONG_FLAG: u32 = 4;
pub const CLIENT_COMPRESS: u32 = 0x20;
pub const CLIENT_CONNECT_WITH_DB: u32 = 8;
pub const CLIENT_LOCAL_FILES: u32 = 0x80;
pub const CLIENT_PROTOCOL_41: u32 = 0x200;
pub const CLIENT_TRANSACTIONS: u32 = 0x2000;
pub const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
pub const CLIENT_MULTI_STATEMENTS: u32 = 0x1_0000;
pub const CLIENT_MULTI_RESULTS: u32 = 0x2_0000;
pub const CLIENT_PS_MULTI_RESULTS: u32 = 0x4_0000;
pub const CLIENT_PLUGIN_AUTH: u32 = 0x8_0000;
pub const CLIENT_PLUGIN_AUTH_LENENC: u32 = 0x20_0000;
pub const CLIENT_SESSION_TRACK: u32 = 0x80_0000;
pub const CLIENT_DEPRECATE_EOF: u32 = 0x100_0000;
pub const CLIENT_ZSTD_COMPRESSION_ALGORITHM: u32 = 0x400_0000;

pub const COM_QUIT: u8 = 0x01;
pub const COM_QUERY: u8 = 0x03;
pub const COM_FIELD_LIST: u8 = 0x04;
pub const COM_STATISTICS: u8 = 0x09;
pub const COM_INIT_DB: u8 = 0x02;
pub const COM_DEBUG: u8 = 0x0d;
pub const COM_PING: u8 = 0x0e;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
pub const COM_STMT_CLOSE: u8 = 0x19;
pub const COM_STMT_RESET: u8 = 0x1a;
pub const COM_SET_OPTION: u8 = 0x1b;
pub const COM_STMT_FETCH: u8 = 0x1c;

/// What went wrong, in a form tests can compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawError {
    Server {
        code: u16,
        state: String,
        message: String,
    },
    Io(String),
    Protocol(String),
}

impl From<std::io::Error> for RawError {
    fn from(e: std::io::Error) -> Self {
        RawError::Io(e.to_string())
    }
}

/// The server greeting (protocol 10).
#[derive(Debug, Clone)]
pub struct Greeting {
    pub server_version: String,
    pub connection_id: u32,
    pub capabilities: u32,
    pub charset: u8,
    pub status: u16,
    pub auth_plugin: String,
    pub scramble: Vec<u8>,
    /// MariaDB's extended capabilities (the last 4 reserved bytes, when the CLIENT_MYSQL bit is
    /// clear): progress reports, bulk operations, extended type metadata, metadata caching.
    pub mariadb_ext_caps: u32,
}

pub struct RawConn {
    stream: TcpStream,
    seq: u8,
    pub greeting: Greeting,
    pub capabilities: u32,
    /// Write everything a few bytes at a time (see [`DRIBBLE`]).
    pub dribble: bool,
}

/// Not a capability: passed in `extra_caps` to [`RawConn::connect_with`], makes the client write
/// every packet (the handshake response too) in 3-byte pieces, 1 ms apart.
pub const DRIBBLE: u32 = 0x8000_0000;

/// Parses an ERR packet payload (0xff, code, '#', state, message).
pub fn parse_err(p: &[u8]) -> RawError {
    if p.len() < 3 || p[0] != 0xff {
        return RawError::Protocol(format!("not an ERR packet: {:02x?}", &p[..p.len().min(32)]));
    }
    let code = u16::from_le_bytes([p[1], p[2]]);
    let (state, message) = if p.len() >= 9 && p[3] == b'#' {
        (
            String::from_utf8_lossy(&p[4..9]).into_owned(),
            String::from_utf8_lossy(&p[9..]).into_owned(),
        )
    } else {
        (String::new(), String::from_utf8_lossy(&p[3..]).into_owned())
    };
    RawError::Server {
        code,
        state,
        message,
    }
}

fn native_password(password: &str, scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = Sha1::digest(password.as_bytes());
    let stage2 = Sha1::digest(stage1);
    let mut h = Sha1::new();
    h.update(&scramble[..scramble.len().min(20)]);
    h.update(stage2);
    let mix = h.finalize();
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

fn caching_sha2_password(password: &str, scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = Sha256::digest(password.as_bytes());
    let stage2 = Sha256::digest(stage1);
    let mut h = Sha256::new();
    h.update(stage2);
    h.update(&scramble[..scramble.len().min(20)]);
    let mix = h.finalize();
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

fn auth_response(plugin: &str, password: &str, scramble: &[u8]) -> Result<Vec<u8>, RawError> {
    match plugin {
        "mysql_native_password" | "" => Ok(native_password(password, scramble)),
        "caching_sha2_password" => Ok(caching_sha2_password(password, scramble)),
        other => Err(RawError::Protocol(format!(
            "raw client cannot do auth plugin {other}"
        ))),
    }
}

fn take_nul(p: &[u8], pos: &mut usize) -> Vec<u8> {
    let start = *pos;
    while *pos < p.len() && p[*pos] != 0 {
        *pos += 1;
    }
    let out = p[start..*pos].to_vec();
    *pos = (*pos + 1).min(p.len());
    out
}

fn parse_greeting(p: &[u8]) -> Result<Greeting, RawError> {
    if p.first() == Some(&0xff) {
        return Err(parse_err(p));
    }
    if p.first() != Some(&10) || p.len() < 40 {
        return Err(RawError::Protocol(format!("bad greeting {:02x?}", p)));
    }
    let mut pos = 1;
    let server_version = String::from_utf8_lossy(&take_nul(p, &mut pos)).into_owned();
    let connection_id = u32::from_le_bytes(p[pos..pos + 4].try_into().expect("4 bytes"));
    pos += 4;
    let mut scramble = p[pos..pos + 8].to_vec();
    pos += 9; // 8 bytes + filler
    let cap_low = u16::from_le_bytes([p[pos], p[pos + 1]]) as u32;
    pos += 2;
    let charset = p[pos];
    pos += 1;
    let status = u16::from_le_bytes([p[pos], p[pos + 1]]);
    pos += 2;
    let cap_high = u16::from_le_bytes([p[pos], p[pos + 1]]) as u32;
    pos += 2;
    let capabilities = cap_low | (cap_high << 16);
    let auth_data_len = p[pos] as usize;
    pos += 1;
    let mariadb_ext_caps = if capabilities & CLIENT_LONG_PASSWORD == 0 {
        u32::from_le_bytes(p[pos + 6..pos + 10].try_into().expect("4 bytes"))
    } else {
        0
    };
    pos += 10; // reserved (MariaDB keeps its extended capabilities in the last 4)
    if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        let n = auth_data_len.saturating_sub(8).max(13) - 1;
        scramble.extend_from_slice(&p[pos..(pos + n).min(p.len())]);
        pos += n + 1;
    }
    let auth_plugin = if capabilities & CLIENT_PLUGIN_AUTH != 0 && pos < p.len() {
        String::from_utf8_lossy(&take_nul(p, &mut pos)).into_owned()
    } else {
        "mysql_native_password".into()
    };
    Ok(Greeting {
        server_version,
        connection_id,
        capabilities,
        charset,
        status,
        auth_plugin,
        scramble,
        mariadb_ext_caps,
    })
}

impl RawConn {
    /// Connects and authenticates; capabilities are those the raw client supports, intersected
    /// with the server's, plus `extra_caps` (e.g. CLIENT_DEPRECATE_EOF).
    pub async fn connect(
        port: u16,
        user: &str,
        password: &str,
        db: Option<&str>,
    ) -> Result<RawConn, RawError> {
        RawConn::connect_with(port, user, password, db, 0).await
    }

    /// [`RawConn::connect`] asking for `extra_caps` as well (e.g. CLIENT_DEPRECATE_EOF,
    /// CLIENT_SESSION_TRACK), if the server offers them.
    pub async fn connect_with(
        port: u16,
        user: &str,
        password: &str,
        db: Option<&str>,
        extra_caps: u32,
    ) -> Result<RawConn, RawError> {
        RawConn::connect_insisting(port, user, password, db, extra_caps, 0).await
    }

    /// [`RawConn::connect_with`], and sets `insisted` capabilities in the handshake response
    /// whether the server offers them or not (as PHP's mysqlnd does with CLIENT_COMPRESS). The
    /// raw client itself does nothing different for them.
    pub async fn connect_insisting(
        port: u16,
        user: &str,
        password: &str,
        db: Option<&str>,
        extra_caps: u32,
        insisted: u32,
    ) -> Result<RawConn, RawError> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let mut conn_seq = 0u8;
        let first = read_packet_from(&mut stream, &mut conn_seq).await?;
        let greeting = parse_greeting(&first)?;
        let mut caps = CLIENT_LONG_PASSWORD
            | CLIENT_LONG_FLAG
            | CLIENT_LOCAL_FILES
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_MULTI_STATEMENTS
            | CLIENT_MULTI_RESULTS
            | CLIENT_PS_MULTI_RESULTS
            | CLIENT_PLUGIN_AUTH;
        if db.is_some() {
            caps |= CLIENT_CONNECT_WITH_DB;
        }
        caps |= extra_caps & !DRIBBLE;
        // CLIENT_LONG_PASSWORD doubles as MariaDB's "CLIENT_MYSQL" bit; always sent.
        caps &= greeting.capabilities | CLIENT_LONG_PASSWORD;
        caps |= insisted;
        let mut conn = RawConn {
            stream,
            seq: conn_seq,
            greeting,
            capabilities: caps,
            dribble: extra_caps & DRIBBLE != 0,
        };
        let auth = auth_response(
            &conn.greeting.auth_plugin,
            password,
            &conn.greeting.scramble,
        )?;
        let mut resp = Vec::new();
        resp.extend_from_slice(&caps.to_le_bytes());
        resp.extend_from_slice(&(16u32 << 20).to_le_bytes());
        resp.push(45); // utf8mb4_general_ci
        resp.extend_from_slice(&[0u8; 23]);
        resp.extend_from_slice(user.as_bytes());
        resp.push(0);
        resp.push(auth.len() as u8);
        resp.extend_from_slice(&auth);
        if let Some(db) = db {
            resp.extend_from_slice(db.as_bytes());
            resp.push(0);
        }
        if caps & CLIENT_PLUGIN_AUTH != 0 {
            resp.extend_from_slice(conn.greeting.auth_plugin.as_bytes());
            resp.push(0);
        }
        conn.write_packet(&resp).await?;
        let mut plugin = conn.greeting.auth_plugin.clone();
        loop {
            let p = conn.read_packet().await?;
            match p.first() {
                Some(0x00) => return Ok(conn),
                Some(0xff) => return Err(parse_err(&p)),
                Some(0xfe) => {
                    // Auth switch: plugin name NUL, then the new scramble.
                    let mut pos = 1;
                    plugin = String::from_utf8_lossy(&take_nul(&p, &mut pos)).into_owned();
                    let mut scramble = p[pos..].to_vec();
                    if scramble.last() == Some(&0) {
                        scramble.pop();
                    }
                    let auth = auth_response(&plugin, password, &scramble)?;
                    conn.write_packet(&auth).await?;
                }
                Some(0x01) if plugin == "caching_sha2_password" => match p.get(1) {
                    Some(0x03) => continue, // fast auth OK; the OK packet follows
                    _ => {
                        return Err(RawError::Protocol(
                            "caching_sha2_password full authentication needs TLS/RSA; \
                             the raw client does not do it"
                                .into(),
                        ))
                    }
                },
                _ => {
                    return Err(RawError::Protocol(format!(
                        "unexpected auth packet {:02x?}",
                        &p[..p.len().min(32)]
                    )))
                }
            }
        }
    }

    /// Reads one logical packet (joining 16 MiB continuation packets).
    pub async fn read_packet(&mut self) -> Result<Vec<u8>, RawError> {
        read_packet_from(&mut self.stream, &mut self.seq).await
    }

    /// Writes one logical packet, splitting at 16 MiB - 1.
    pub async fn write_packet(&mut self, payload: &[u8]) -> Result<(), RawError> {
        const MAX: usize = 0xff_ffff;
        let mut rest = payload;
        loop {
            let n = rest.len().min(MAX);
            let mut frame = Vec::with_capacity(n + 4);
            frame.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
            frame.push(self.seq);
            self.seq = self.seq.wrapping_add(1);
            frame.extend_from_slice(&rest[..n]);
            if self.dribble {
                // A few bytes per TCP segment: packet headers and payloads split everywhere.
                for piece in frame.chunks(3) {
                    self.stream.write_all(piece).await?;
                    self.stream.flush().await?;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            } else {
                self.stream.write_all(&frame).await?;
            }
            rest = &rest[n..];
            if n < MAX {
                break;
            }
        }
        self.stream.flush().await?;
        Ok(())
    }

    /// Writes raw bytes as they are (several packets at once: pipelining).
    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<(), RawError> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await?;
        Ok(())
    }

    /// Sets the sequence id expected on the next packet read.
    pub fn expect_seq(&mut self, seq: u8) {
        self.seq = seq;
    }

    /// Starts a command: sequence id 0, command byte, argument.
    pub async fn send_command(&mut self, command: u8, arg: &[u8]) -> Result<(), RawError> {
        self.seq = 0;
        let mut payload = Vec::with_capacity(arg.len() + 1);
        payload.push(command);
        payload.extend_from_slice(arg);
        self.write_packet(&payload).await
    }

    /// Reads packets up to and including an EOF (0xfe, < 9 bytes) or ERR packet.
    pub async fn read_until_eof(&mut self) -> Result<Vec<Vec<u8>>, RawError> {
        let mut out = Vec::new();
        loop {
            let p = self.read_packet().await?;
            let end = (p.first() == Some(&0xfe) && p.len() < 9) || p.first() == Some(&0xff);
            out.push(p);
            if end {
                return Ok(out);
            }
        }
    }

    /// Reads a whole text-protocol COM_QUERY response (one result), returning every packet.
    pub async fn query(&mut self, sql: &str) -> Result<Vec<Vec<u8>>, RawError> {
        self.send_command(COM_QUERY, sql.as_bytes()).await?;
        let first = self.read_packet().await?;
        match first.first() {
            Some(0x00) => Ok(vec![first]),
            Some(0xff) => Err(parse_err(&first)),
            _ => {
                let mut out = vec![first];
                out.extend(self.read_until_eof().await?); // column definitions
                out.extend(self.read_until_eof().await?); // rows
                Ok(out)
            }
        }
    }

    fn deprecate_eof(&self) -> bool {
        self.capabilities & CLIENT_DEPRECATE_EOF != 0
    }

    /// Reads `n` packets.
    pub async fn read_n(&mut self, n: usize) -> Result<Vec<Vec<u8>>, RawError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.read_packet().await?);
        }
        Ok(out)
    }

    /// Reads rows up to and including the terminator (0xfe EOF/OK packet) or an ERR packet.
    pub async fn read_rows(&mut self) -> Result<Vec<Vec<u8>>, RawError> {
        let mut out = Vec::new();
        loop {
            let p = self.read_packet().await?;
            let end = (p.first() == Some(&0xfe) && p.len() < 0xff_ffff) || p.first() == Some(&0xff);
            out.push(p);
            if end {
                return Ok(out);
            }
        }
    }

    /// Reads one whole response to COM_QUERY / COM_STMT_EXECUTE (no cursor), following
    /// SERVER_MORE_RESULTS_EXISTS through every result.
    pub async fn read_response(&mut self) -> Result<Vec<Vec<u8>>, RawError> {
        let mut out = Vec::new();
        loop {
            let first = self.read_packet().await?;
            let (more, done_here) = match first.first() {
                Some(0x00) => (ok_status(&first) & 0x08 != 0, true),
                Some(0xff) => (false, true),
                _ => (false, false),
            };
            out.push(first.clone());
            if done_here {
                if more {
                    continue;
                }
                return Ok(out);
            }
            let columns = lenenc(&first).0 as usize;
            out.extend(self.read_n(columns).await?);
            if !self.deprecate_eof() {
                out.push(self.read_packet().await?);
            }
            let rows = self.read_rows().await?;
            let last = rows.last().cloned().unwrap_or_default();
            out.extend(rows);
            let more = last.first() == Some(&0xfe)
                && terminator_status(&last, self.deprecate_eof()) & 0x08 != 0;
            if !more {
                return Ok(out);
            }
        }
    }

    /// Reads a COM_STMT_PREPARE response: the prepare-OK, parameter and column definitions.
    pub async fn read_prepare_response(&mut self) -> Result<Vec<Vec<u8>>, RawError> {
        let first = self.read_packet().await?;
        if first.first() != Some(&0x00) || first.len() < 9 {
            return Ok(vec![first]);
        }
        let columns = u16::from_le_bytes([first[5], first[6]]) as usize;
        let params = u16::from_le_bytes([first[7], first[8]]) as usize;
        let mut out = vec![first];
        for n in [params, columns] {
            if n > 0 {
                out.extend(self.read_n(n).await?);
                if !self.deprecate_eof() {
                    out.push(self.read_packet().await?);
                }
            }
        }
        Ok(out)
    }

    /// Everything that arrives until the connection stays quiet for `quiet`.
    pub async fn read_until_quiet(&mut self, quiet: Duration) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Ok(Ok(p)) = tokio::time::timeout(quiet, self.read_packet()).await {
            out.push(p);
        }
        out
    }

    /// Sets read/write deadline-free mode off: gives up reading after `timeout`.
    pub async fn read_packet_timeout(&mut self, timeout: Duration) -> Result<Vec<u8>, RawError> {
        tokio::time::timeout(timeout, self.read_packet())
            .await
            .map_err(|_| RawError::Io(format!("no packet within {timeout:?}")))?
    }

    /// Drops the TCP connection without COM_QUIT (a client that just goes away).
    pub fn abandon(self) {
        drop(self.stream);
    }
}

/// A length-encoded integer at the start of `p`: (value, bytes used).
pub fn lenenc(p: &[u8]) -> (u64, usize) {
    match p.first() {
        Some(&b) if b < 0xfb => (b as u64, 1),
        Some(0xfc) if p.len() >= 3 => (u16::from_le_bytes([p[1], p[2]]) as u64, 3),
        Some(0xfd) if p.len() >= 4 => (u32::from_le_bytes([p[1], p[2], p[3], 0]) as u64, 4),
        Some(0xfe) if p.len() >= 9 => (u64::from_le_bytes(p[1..9].try_into().expect("8 bytes")), 9),
        _ => (0, 1),
    }
}

/// Status flags of an OK packet (0x00 or 0xfe header).
pub fn ok_status(p: &[u8]) -> u16 {
    let mut pos = 1;
    for _ in 0..2 {
        pos += lenenc(&p[pos.min(p.len())..]).1;
    }
    if pos + 2 <= p.len() {
        u16::from_le_bytes([p[pos], p[pos + 1]])
    } else {
        0
    }
}

/// Status flags of a result-set terminator: an EOF packet, or an OK packet with 0xfe header.
pub fn terminator_status(p: &[u8], deprecate_eof: bool) -> u16 {
    if deprecate_eof {
        ok_status(p)
    } else if p.len() >= 5 {
        u16::from_le_bytes([p[3], p[4]])
    } else {
        0
    }
}

async fn read_packet_from(stream: &mut TcpStream, seq: &mut u8) -> Result<Vec<u8>, RawError> {
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; 4];
        stream.read_exact(&mut head).await?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
        if head[3] != *seq {
            return Err(RawError::Protocol(format!(
                "packet sequence id {} where {} was expected",
                head[3], *seq
            )));
        }
        *seq = seq.wrapping_add(1);
        let start = out.len();
        out.resize(start + len, 0);
        stream.read_exact(&mut out[start..]).await?;
        if len < 0xff_ffff {
            return Ok(out);
        }
    }
}

/// One command packet (sequence id 0) as bytes, for pipelining with [`RawConn::write_raw`].
pub fn command_frame(command: u8, arg: &[u8]) -> Vec<u8> {
    let len = arg.len() + 1;
    let mut frame = (len as u32).to_le_bytes()[..3].to_vec();
    frame.push(0);
    frame.push(command);
    frame.extend_from_slice(arg);
    frame
}
