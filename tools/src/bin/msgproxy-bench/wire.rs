//! A deliberately small MySQL client: just what the load generator needs, and cheap per request.
//!
//! Why not `mysql_async` for the load? On a 2-core machine the client shares the CPU with the
//! server and the proxy, so every microsecond it spends decoding rows into `Value`s is taken from
//! what is measured. This client writes a command and reads packets until the response ends; rows
//! are counted (or their first column read, for STREAM), never decoded. It speaks the classic
//! protocol only: no TLS, no compression, no `CLIENT_DEPRECATE_EOF`, `mysql_native_password`.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use bytes::{Buf, BytesMut};
// TCP or a Unix socket: the proxy's own two-way stream serves the load generator as well.
/// TCP or the server's Unix socket (`--proxy-socket`, a `?socket=` backend).
type Transport = tokio_util::either::Either<TcpStream, UnixStream>;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

const CLIENT_LONG_PASSWORD: u32 = 0x1;
const CLIENT_FOUND_ROWS: u32 = 0x2;
const CLIENT_CONNECT_WITH_DB: u32 = 0x8;
const CLIENT_PROTOCOL_41: u32 = 0x200;
const CLIENT_TRANSACTIONS: u32 = 0x2000;
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
const CLIENT_MULTI_STATEMENTS: u32 = 0x1_0000;
const CLIENT_MULTI_RESULTS: u32 = 0x2_0000;
const CLIENT_PLUGIN_AUTH: u32 = 0x8_0000;

const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;

const MYSQL_TYPE_LONGLONG: u8 = 0x08;
const SERVER_MORE_RESULTS_EXISTS: u16 = 0x08;

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub db: String,
    /// Connect over this Unix socket instead of TCP to `host:port`.
    pub socket: Option<PathBuf>,
}

impl Target {
    /// Parses `mysql://user[:password]@host[:port][/db]`.
    pub fn parse(url: &str) -> std::result::Result<Target, String> {
        let url = url::Url::parse(url).map_err(|e| format!("bad URL {url:?}: {e}"))?;
        if url.scheme() != "mysql" {
            return Err(format!("{url}: the scheme must be mysql://"));
        }
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        Ok(Target {
            host: url.host_str().unwrap_or("127.0.0.1").to_string(),
            port: url.port().unwrap_or(3306),
            user: if url.username().is_empty() {
                "root".into()
            } else {
                decode(url.username())
            },
            password: url.password().map(decode).unwrap_or_default(),
            db: decode(url.path().trim_start_matches('/')),
            socket: None,
        })
    }

    /// The same server and account, over this Unix socket.
    pub fn over_socket(&self, path: PathBuf) -> Target {
        Target {
            socket: Some(path),
            ..self.clone()
        }
    }

    /// Where it connects, for messages.
    pub fn address(&self) -> String {
        match &self.socket {
            Some(path) => path.display().to_string(),
            None => format!("{}:{}", self.host, self.port),
        }
    }

    /// The same server, another port (the proxy in front of it).
    pub fn with_port(&self, port: u16) -> Target {
        Target {
            port,
            ..self.clone()
        }
    }

    /// The URL form, for the proxy's `--backend`.
    pub fn url(&self) -> String {
        let enc = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        let auth = if self.password.is_empty() {
            enc(&self.user)
        } else {
            format!("{}:{}", enc(&self.user), enc(&self.password))
        };
        format!("mysql://{auth}@{}:{}/{}", self.host, self.port, self.db)
    }
}

/// An error the server sent (code and message), or a broken connection.
#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    Server { code: u16, message: String },
    Protocol(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Server { code, message } => write!(f, "server error {code}: {message}"),
            Error::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// What a command answered.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome {
    /// Rows of a result set (all result sets of the response, added up).
    pub rows: u64,
    pub affected_rows: u64,
    /// Warnings the OK packets reported (all of them added up).
    pub warnings: u64,
    /// Bytes of row packets (payloads), for throughput figures.
    pub row_bytes: u64,
}

/// A prepared statement's handle.
#[derive(Debug, Clone, Copy)]
pub struct Statement {
    id: u32,
    params: u16,
}

/// One connection.
pub struct Conn {
    stream: Transport,
    inbuf: BytesMut,
    out: Vec<u8>,
    /// The server's thread id (the proxy hands out its backend's).
    pub connection_id: u32,
}

impl Conn {
    /// Connects and logs in (with a 10 s limit on the whole exchange).
    pub async fn connect(target: &Target) -> Result<Conn> {
        Conn::connect_with(target, 0).await
    }

    /// Like [`Conn::connect`], and lets one query carry several statements (`UPDATE ...;
    /// COMMIT`): their answers are read as one response.
    pub async fn connect_multi_statements(target: &Target) -> Result<Conn> {
        Conn::connect_with(target, CLIENT_MULTI_STATEMENTS).await
    }

    async fn connect_with(target: &Target, extra_caps: u32) -> Result<Conn> {
        match tokio::time::timeout(
            Duration::from_secs(10),
            Conn::connect_inner(target, extra_caps),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(Error::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("logging in to {} took more than 10 s", target.address()),
            ))),
        }
    }

    async fn connect_inner(target: &Target, extra_caps: u32) -> Result<Conn> {
        let stream = match &target.socket {
            Some(path) => Transport::Right(UnixStream::connect(path).await?),
            None => {
                let tcp = TcpStream::connect((target.host.as_str(), target.port)).await?;
                tcp.set_nodelay(true)?;
                Transport::Left(tcp)
            }
        };
        let mut conn = Conn {
            stream,
            inbuf: BytesMut::with_capacity(64 * 1024),
            out: Vec::with_capacity(1024),
            connection_id: 0,
        };
        let greeting = conn.read_packet().await?;
        if greeting.first() == Some(&0xFF) {
            return Err(server_error(&greeting));
        }
        let (connection_id, nonce) = parse_greeting(&greeting)
            .ok_or_else(|| Error::Protocol("malformed server greeting".into()))?;
        conn.connection_id = connection_id;
        let mut caps = CLIENT_LONG_PASSWORD
            | CLIENT_FOUND_ROWS
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_MULTI_RESULTS
            | CLIENT_PLUGIN_AUTH
            | extra_caps;
        if !target.db.is_empty() {
            caps |= CLIENT_CONNECT_WITH_DB;
        }
        let auth = native_scramble(&nonce, &target.password);
        let mut p = Vec::with_capacity(128);
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&(16u32 << 20).to_le_bytes());
        p.push(45); // utf8mb4_general_ci
        p.extend_from_slice(&[0u8; 23]);
        p.extend_from_slice(target.user.as_bytes());
        p.push(0);
        p.push(auth.len() as u8);
        p.extend_from_slice(&auth);
        if !target.db.is_empty() {
            p.extend_from_slice(target.db.as_bytes());
            p.push(0);
        }
        p.extend_from_slice(b"mysql_native_password\0");
        conn.write_packet(1, &p).await?;
        let mut reply = conn.read_packet().await?;
        let mut seq = 3u8;
        loop {
            match reply.first() {
                Some(0x00) => return Ok(conn),
                Some(0xFF) => return Err(server_error(&reply)),
                Some(0xFE) => {
                    // Auth switch: plugin name NUL, then the new nonce.
                    let rest = &reply[1..];
                    let nul = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    let plugin = &rest[..nul];
                    let data = rest.get(nul + 1..).unwrap_or(&[]);
                    let data = data.strip_suffix(&[0]).unwrap_or(data);
                    if plugin != b"mysql_native_password" && !target.password.is_empty() {
                        return Err(Error::Protocol(format!(
                            "the server asked for auth plugin {}; the bench client speaks mysql_native_password only",
                            String::from_utf8_lossy(plugin)
                        )));
                    }
                    let auth = native_scramble(data, &target.password);
                    conn.write_packet(seq, &auth).await?;
                    seq = seq.wrapping_add(2);
                    reply = conn.read_packet().await?;
                }
                Some(0x01) => {
                    // caching_sha2_password fast-auth result; the OK follows.
                    reply = conn.read_packet().await?;
                }
                _ => return Err(Error::Protocol("unexpected login reply".into())),
            }
        }
    }

    /// Runs one text-protocol statement and reads its whole response.
    pub async fn query(&mut self, sql: &str) -> Result<Outcome> {
        self.send_command(COM_QUERY, sql.as_bytes()).await?;
        self.read_response(false).await
    }

    /// Runs a statement and returns its rows as text values (for small set-up queries).
    pub async fn query_rows(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        self.send_command(COM_QUERY, sql.as_bytes()).await?;
        let first = self.read_packet().await?;
        let columns = match first.first() {
            Some(0x00) => return Ok(Vec::new()),
            Some(0xFF) => return Err(server_error(&first)),
            _ => lenenc_int(&mut &first[..])
                .ok_or_else(|| Error::Protocol("bad column count".into()))?,
        };
        for _ in 0..columns {
            self.read_packet().await?;
        }
        self.read_packet().await?; // EOF after the column definitions
        let mut rows = Vec::new();
        loop {
            let p = self.read_packet().await?;
            if is_eof(&p) {
                return Ok(rows);
            }
            if p.first() == Some(&0xFF) {
                return Err(server_error(&p));
            }
            let mut rest = &p[..];
            let mut row = Vec::with_capacity(columns as usize);
            for _ in 0..columns {
                row.push(
                    lenenc_str(&mut rest)
                        .ok_or_else(|| Error::Protocol("bad text row".into()))?
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                );
            }
            rows.push(row);
        }
    }

    pub async fn prepare(&mut self, sql: &str) -> Result<Statement> {
        self.send_command(COM_STMT_PREPARE, sql.as_bytes()).await?;
        let first = self.read_packet().await?;
        if first.first() == Some(&0xFF) {
            return Err(server_error(&first));
        }
        if first.len() < 12 || first[0] != 0 {
            return Err(Error::Protocol("bad COM_STMT_PREPARE reply".into()));
        }
        let id = u32::from_le_bytes([first[1], first[2], first[3], first[4]]);
        let columns = u16::from_le_bytes([first[5], first[6]]);
        let params = u16::from_le_bytes([first[7], first[8]]);
        for _ in 0..params {
            self.read_packet().await?;
        }
        if params > 0 {
            self.read_packet().await?;
        }
        for _ in 0..columns {
            self.read_packet().await?;
        }
        if columns > 0 {
            self.read_packet().await?;
        }
        Ok(Statement { id, params })
    }

    /// Executes a prepared statement whose parameters are all BIGINTs.
    pub async fn execute(&mut self, stmt: Statement, params: &[i64]) -> Result<Outcome> {
        if params.len() != stmt.params as usize {
            return Err(Error::Protocol(format!(
                "statement takes {} parameters, {} given",
                stmt.params,
                params.len()
            )));
        }
        let mut body = Vec::with_capacity(16 + params.len() * 10);
        body.extend_from_slice(&stmt.id.to_le_bytes());
        body.push(0); // no cursor
        body.extend_from_slice(&1u32.to_le_bytes());
        if !params.is_empty() {
            body.extend(std::iter::repeat_n(0u8, params.len().div_ceil(8)));
            body.push(1); // types follow
            for _ in params {
                body.extend_from_slice(&[MYSQL_TYPE_LONGLONG, 0]);
            }
            for p in params {
                body.extend_from_slice(&p.to_le_bytes());
            }
        }
        self.send_command(COM_STMT_EXECUTE, &body).await?;
        self.read_response(true).await
    }

    /// Sends a statement whose result set does not end (STREAM) and reads up to its rows.
    pub async fn start_stream(&mut self, sql: &str) -> Result<()> {
        self.send_command(COM_QUERY, sql.as_bytes()).await?;
        let first = self.read_packet().await?;
        let columns = match first.first() {
            Some(0xFF) => return Err(server_error(&first)),
            Some(0x00) => return Err(Error::Protocol(format!("{sql:?} answered OK, not rows"))),
            _ => lenenc_int(&mut &first[..])
                .ok_or_else(|| Error::Protocol("bad column count".into()))?,
        };
        for _ in 0..columns {
            self.read_packet().await?;
        }
        let eof = self.read_packet().await?;
        if !is_eof(&eof) {
            return Err(Error::Protocol(
                "no EOF after the column definitions".into(),
            ));
        }
        Ok(())
    }

    /// The next row of a stream: its first column parsed as an integer id.
    pub async fn next_stream_id(&mut self) -> Result<i64> {
        let p = self.read_packet().await?;
        if p.first() == Some(&0xFF) {
            return Err(server_error(&p));
        }
        if is_eof(&p) {
            return Err(Error::Protocol("the stream ended".into()));
        }
        let mut rest = &p[..];
        lenenc_str(&mut rest)
            .flatten()
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::Protocol("a stream row whose id is not an integer".into()))
    }

    /// The next row of a stream with its first two columns parsed as unsigned integers: an event
    /// stream's `event_id` and the table's own first column (the producer's id).
    pub async fn next_stream_pair(&mut self) -> Result<(u64, u64)> {
        let p = self.read_packet().await?;
        if p.first() == Some(&0xFF) {
            return Err(server_error(&p));
        }
        if is_eof(&p) {
            return Err(Error::Protocol("the stream ended".into()));
        }
        let mut rest = &p[..];
        let mut int = || {
            lenenc_str(&mut rest)
                .flatten()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| Error::Protocol("a stream row whose ids are not integers".into()))
        };
        let first = int()?;
        Ok((first, int()?))
    }

    /// Says goodbye (COM_QUIT) and closes.
    pub async fn quit(mut self) {
        let _ = self.send_command(COM_QUIT, &[]).await;
        let _ = self.stream.shutdown().await;
    }

    async fn send_command(&mut self, command: u8, body: &[u8]) -> Result<()> {
        let len = body.len() + 1;
        if len >= 0xFF_FFFF {
            return Err(Error::Protocol(
                "commands of 16 MiB or more are not supported".into(),
            ));
        }
        self.out.clear();
        self.out.extend_from_slice(&(len as u32).to_le_bytes()[..3]);
        self.out.push(0);
        self.out.push(command);
        self.out.extend_from_slice(body);
        self.stream.write_all(&self.out).await?;
        Ok(())
    }

    async fn write_packet(&mut self, seq: u8, body: &[u8]) -> Result<()> {
        self.out.clear();
        self.out
            .extend_from_slice(&(body.len() as u32).to_le_bytes()[..3]);
        self.out.push(seq);
        self.out.extend_from_slice(body);
        self.stream.write_all(&self.out).await?;
        Ok(())
    }

    /// Reads one packet's payload (packets of 16 MiB or more are not expected here).
    async fn read_packet(&mut self) -> Result<BytesMut> {
        loop {
            if self.inbuf.len() >= 4 {
                let len =
                    u32::from_le_bytes([self.inbuf[0], self.inbuf[1], self.inbuf[2], 0]) as usize;
                if len == 0xFF_FFFF {
                    return Err(Error::Protocol(
                        "packets of 16 MiB or more are not supported".into(),
                    ));
                }
                if self.inbuf.len() >= 4 + len {
                    self.inbuf.advance(4);
                    return Ok(self.inbuf.split_to(len));
                }
                self.inbuf.reserve(4 + len);
            }
            if self.inbuf.capacity() - self.inbuf.len() < 16 * 1024 {
                self.inbuf.reserve(64 * 1024);
            }
            let n = self.stream.read_buf(&mut self.inbuf).await?;
            if n == 0 {
                return Err(Error::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
        }
    }

    /// Reads a whole response: OK, ERR, or result sets (text or binary rows), counting rows.
    async fn read_response(&mut self, binary: bool) -> Result<Outcome> {
        let _ = binary; // rows are counted, not decoded: both protocols end the same way
        let mut outcome = Outcome::default();
        loop {
            let first = self.read_packet().await?;
            let more = match first.first() {
                Some(0x00) => {
                    let mut rest = &first[1..];
                    let affected = lenenc_int(&mut rest).unwrap_or(0);
                    let _insert_id = lenenc_int(&mut rest);
                    outcome.affected_rows += affected;
                    if rest.len() >= 4 {
                        outcome.warnings += u64::from(u16::from_le_bytes([rest[2], rest[3]]));
                    }
                    rest.len() >= 2
                        && u16::from_le_bytes([rest[0], rest[1]]) & SERVER_MORE_RESULTS_EXISTS != 0
                }
                Some(0xFF) => return Err(server_error(&first)),
                Some(0xFB) => {
                    return Err(Error::Protocol("LOCAL INFILE is not supported".into()));
                }
                _ => {
                    let columns = lenenc_int(&mut &first[..])
                        .ok_or_else(|| Error::Protocol("bad column count".into()))?;
                    for _ in 0..columns {
                        self.read_packet().await?;
                    }
                    self.read_packet().await?; // EOF
                    loop {
                        let p = self.read_packet().await?;
                        if is_eof(&p) {
                            break p.len() >= 5
                                && u16::from_le_bytes([p[3], p[4]]) & SERVER_MORE_RESULTS_EXISTS
                                    != 0;
                        }
                        if p.first() == Some(&0xFF) {
                            return Err(server_error(&p));
                        }
                        outcome.rows += 1;
                        outcome.row_bytes += p.len() as u64;
                    }
                }
            };
            if !more {
                return Ok(outcome);
            }
        }
    }
}

fn is_eof(p: &[u8]) -> bool {
    p.first() == Some(&0xFE) && p.len() < 9
}

/// Thread id and the 20-byte nonce from a protocol-10 greeting.
fn parse_greeting(g: &[u8]) -> Option<(u32, Vec<u8>)> {
    if *g.first()? != 10 {
        return None;
    }
    let rest = &g[1..];
    let nul = rest.iter().position(|&b| b == 0)?;
    let rest = &rest[nul + 1..];
    let thread_id = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
    let mut nonce = rest.get(4..12)?.to_vec();
    // filler(1) caps-low(2) charset(1) status(2) caps-high(2) auth-len(1) reserved(10)
    let rest = rest.get(12 + 1 + 2 + 1 + 2 + 2 + 1 + 10..)?;
    let part2 = rest.get(..12)?;
    nonce.extend_from_slice(part2);
    Some((thread_id, nonce))
}

fn native_scramble(nonce: &[u8], password: &str) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    // mysql_native_password: SHA1(password) XOR SHA1(nonce, SHA1(SHA1(password))).
    use sha1::{Digest, Sha1};
    let nonce = &nonce[..nonce.len().min(20)];
    let stage1 = Sha1::digest(password.as_bytes());
    let stage2 = Sha1::digest(stage1);
    let mut hasher = Sha1::new();
    hasher.update(nonce);
    hasher.update(stage2);
    let mask = hasher.finalize();
    stage1.iter().zip(mask.iter()).map(|(a, b)| a ^ b).collect()
}

fn server_error(p: &[u8]) -> Error {
    if p.len() < 3 {
        return Error::Protocol("short ERR packet".into());
    }
    let code = u16::from_le_bytes([p[1], p[2]]);
    let msg = if p.get(3) == Some(&b'#') {
        p.get(9..).unwrap_or(&[])
    } else {
        &p[3..]
    };
    Error::Server {
        code,
        message: String::from_utf8_lossy(msg).into_owned(),
    }
}

fn lenenc_int(buf: &mut &[u8]) -> Option<u64> {
    let (&first, rest) = buf.split_first()?;
    let (v, used) = match first {
        0..=0xFA => (first as u64, 0),
        0xFC => (
            u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as u64,
            2,
        ),
        0xFD => {
            let b = rest.get(..3)?;
            (u32::from_le_bytes([b[0], b[1], b[2], 0]) as u64, 3)
        }
        0xFE => (u64::from_le_bytes(rest.get(..8)?.try_into().ok()?), 8),
        _ => return None,
    };
    *buf = &rest[used..];
    Some(v)
}

/// A length-encoded string; `Some(None)` for SQL NULL (0xFB).
fn lenenc_str<'a>(buf: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    if buf.first() == Some(&0xFB) {
        *buf = &buf[1..];
        return Some(None);
    }
    let len = lenenc_int(buf)? as usize;
    let v = buf.get(..len)?;
    *buf = &buf[len..];
    Some(Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrambles_as_mysql_native_password() {
        // Computed independently: SHA1(p) XOR SHA1(nonce + SHA1(SHA1(p))) with Python's hashlib.
        let nonce: Vec<u8> = (1..=20).collect();
        let hex: String = native_scramble(&nonce, "secret")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, "b32bb3a583e1340c0a1108d58b1be49781ad8c2f");
        assert!(native_scramble(&nonce, "").is_empty());
    }

    #[test]
    fn parses_urls() {
        let t = Target::parse("mysql://app:p%40ss@127.0.0.1:3307/test").unwrap();
        assert_eq!(
            (t.user.as_str(), t.password.as_str(), t.port, t.db.as_str()),
            ("app", "p@ss", 3307, "test")
        );
        let t = Target::parse("mysql://127.0.0.1:13306/bench").unwrap();
        assert_eq!(t.user, "root");
        assert_eq!(t.url(), "mysql://root@127.0.0.1:13306/bench");
    }

    #[test]
    fn lenenc() {
        let mut b: &[u8] = &[0xFC, 0x10, 0x01, 7];
        assert_eq!(lenenc_int(&mut b), Some(0x110));
        assert_eq!(b, &[7]);
        let mut b: &[u8] = &[0xFB, 2, b'4', b'2'];
        assert_eq!(lenenc_str(&mut b), Some(None));
        assert_eq!(lenenc_str(&mut b), Some(Some(&b"42"[..])));
    }
}
