//! One backend connection per client session: connect, read the server's greeting, and log in
//! with the proxy's backend credentials but the client's own capabilities, character set,
//! database and connection attributes — so the session the client gets is the one it asked for.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use mysql_common::constants::CapabilityFlags;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::rustls::pki_types::ServerName;

use crate::config::BackendTarget;
use crate::protocol::auth::{self, Plugin};
use crate::protocol::handshake::{BackendGreeting, HandshakeResponse};
use crate::protocol::packet::{self, PacketReader, MAX_PAYLOAD};
use crate::protocol::wire::{self, ErrorPacket, Reader};

/// A connected backend whose greeting has been read.
pub struct Backend {
    pub conn: PacketReader<BackendStream>,
    pub greeting: BackendGreeting,
    /// The server it is connected to (with several servers, not necessarily the one in use
    /// now): logins, COM_CHANGE_USER and error messages name this one.
    pub target: BackendTarget,
    /// The `crate::cluster` switch count when it was connected: questions about this session
    /// on another connection go to its server only while that is still the one in use.
    pub generation: u64,
}

/// The transport to the backend: TCP, or the server's Unix socket when the proxy runs on the
/// server's host (`?socket=` in the backend URL).
pub enum BackendStream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// TCP upgraded at login (`ssl-mode`).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// Only while the TCP stream is being upgraded (or after the upgrade failed): every read
    /// and write fails.
    Upgrading,
}

fn upgrading<T>() -> Poll<io::Result<T>> {
    Poll::Ready(Err(io::ErrorKind::NotConnected.into()))
}

impl BackendStream {
    async fn connect(target: &BackendTarget) -> io::Result<BackendStream> {
        match &target.socket {
            Some(path) => Ok(BackendStream::Unix(connect_unix(path).await?)),
            None => {
                let tcp = TcpStream::connect(target.address()).await?;
                // Requests and answers are small and each waits for the other: never delay one.
                tcp.set_nodelay(true)?;
                Ok(BackendStream::Tcp(tcp))
            }
        }
    }
}

/// Connects to a Unix socket, waiting for room in its listen backlog. A full backlog fails a
/// non-blocking `connect` at once with EAGAIN — over TCP the kernel retries the SYN instead, and a
/// blocking client simply waits — so a burst of clients (more at once than the server's
/// `back_log`) would get "cannot reach the backend" through msgproxy and not directly. The
/// caller's connect timeout bounds the wait.
async fn connect_unix(path: &std::path::Path) -> io::Result<UnixStream> {
    const MOST_PAUSE: Duration = Duration::from_millis(20);
    let mut pause = Duration::from_micros(500);
    loop {
        match UnixStream::connect(path).await {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MOST_PAUSE);
            }
            result => return result,
        }
    }
}

impl AsyncRead for BackendStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            BackendStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            BackendStream::Upgrading => upgrading(),
        }
    }
}

impl AsyncWrite for BackendStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            BackendStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            BackendStream::Upgrading => upgrading(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            BackendStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            BackendStream::Upgrading => upgrading(),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            BackendStream::Unix(s) => Pin::new(s).poll_flush(cx),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            BackendStream::Upgrading => upgrading(),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            BackendStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            BackendStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            BackendStream::Upgrading => upgrading(),
        }
    }
}

/// What the backend answered to a login or COM_CHANGE_USER.
pub enum LoginReply {
    /// The OK packet's payload, to pass on to the client.
    Ok(BytesMut),
    /// The ERR packet's payload, to pass on to the client.
    Err(BytesMut),
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot connect to the backend at {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    #[error("timed out connecting to the backend at {address}")]
    Timeout { address: String },
    #[error("the backend closed the connection or failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the backend refused the connection: {0}")]
    Refused(ErrorPacket),
    #[error("unexpected packet from the backend (not what the MySQL protocol allows here)")]
    Protocol,
    #[error("TLS to the backend failed: {0}")]
    Tls(String),
    #[error(
        "the backend asks for {0} authentication, which msgproxy cannot do; give the backend user \
         a mysql_native_password password (ALTER USER ... IDENTIFIED VIA mysql_native_password USING PASSWORD('...'))"
    )]
    UnsupportedAuth(String),
}

/// MariaDB extended capabilities the relay understands: extended metadata only adds fields to
/// column definitions, and bulk execution answers like COM_STMT_EXECUTE. Progress reports (ERR
/// packets in the middle of a result) and metadata caching (results without definitions) would
/// change how a response is framed, so they are not offered.
pub const SUPPORTED_MARIADB_CAPABILITIES: u32 = 0x0000_0004 | 0x0000_0008;

/// Capabilities the proxy never lets through to the backend: it does not speak compression, it
/// asks for TLS itself when `ssl-mode` says so (`Backend::start_tls`), and it does not offer the
/// MySQL 8 extensions that change packet layouts.
pub fn unsupported_capabilities() -> CapabilityFlags {
    CapabilityFlags::CLIENT_COMPRESS
        | CapabilityFlags::CLIENT_SSL
        | CapabilityFlags::CLIENT_OPTIONAL_RESULTSET_METADATA
        | CapabilityFlags::CLIENT_ZSTD_COMPRESSION_ALGORITHM
        | CapabilityFlags::CLIENT_QUERY_ATTRIBUTES
        | CapabilityFlags::CLIENT_PROGRESS_OBSOLETE
        | CapabilityFlags::CLIENT_SSL_VERIFY_SERVER_CERT
        | CapabilityFlags::CLIENT_REMEMBER_OPTIONS
}

impl Backend {
    /// Opens a connection (TCP or the server's socket) and reads the greeting. An ERR instead of
    /// a greeting (too many connections, host blocked) becomes [`BackendError::Refused`].
    pub async fn connect(
        target: &BackendTarget,
        timeout: std::time::Duration,
    ) -> Result<Backend, BackendError> {
        let address = target.address();
        let attempt = async {
            let stream =
                BackendStream::connect(target)
                    .await
                    .map_err(|source| BackendError::Connect {
                        address: address.clone(),
                        source,
                    })?;
            let mut conn = PacketReader::new(stream);
            let packet = conn.next_logical_packet(1 << 20).await?;
            if packet.payload.first() == Some(&wire::ERR_HEADER) {
                return Err(BackendError::Refused(parse_pre_handshake_error(
                    &packet.payload,
                )));
            }
            let greeting = BackendGreeting::parse(&packet.payload)?;
            Ok(Backend {
                conn,
                greeting,
                target: target.clone(),
                generation: 0,
            })
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Timeout { address }),
        }
    }

    /// Logs in as the proxy's backend user with the client's session settings.
    pub async fn login(
        &mut self,
        target: &BackendTarget,
        client: &HandshakeResponse<'_>,
    ) -> Result<LoginReply, BackendError> {
        use CapabilityFlags as C;
        let plugin = Plugin::from_name(&self.greeting.auth_plugin).unwrap_or(Plugin::Native);
        let scramble = auth::scramble(plugin, &self.greeting.nonce, target.password.as_bytes());
        let mut caps =
            (client.capabilities & self.greeting.capabilities) - unsupported_capabilities();
        caps |= C::CLIENT_PROTOCOL_41 | C::CLIENT_SECURE_CONNECTION | C::CLIENT_PLUGIN_AUTH;
        caps.set(C::CLIENT_CONNECT_WITH_DB, client.database.is_some());
        caps.set(
            C::CLIENT_CONNECT_ATTRS,
            client.connect_attrs.is_some()
                && self.greeting.capabilities.contains(C::CLIENT_CONNECT_ATTRS),
        );
        let response = HandshakeResponse {
            capabilities: caps,
            max_packet_size: client.max_packet_size,
            collation: client.collation,
            user: target.user.as_bytes(),
            auth_response: &scramble,
            database: client.database,
            auth_plugin: Some(plugin.name().as_bytes()),
            connect_attrs: client
                .connect_attrs
                .filter(|_| caps.contains(C::CLIENT_CONNECT_ATTRS)),
            mariadb_capabilities: client.mariadb_capabilities
                & self.greeting.mariadb_capabilities
                & SUPPORTED_MARIADB_CAPABILITIES,
        };
        let mut response = response;
        let mut seq = 1;
        if self.start_tls(target, &mut response).await? {
            seq = 2;
        }
        packet::write_packet(self.conn.get_mut(), seq, &response.encode()).await?;
        self.finish_auth(target).await
    }

    /// Upgrades the connection to TLS before the login when `ssl-mode` asks for it: an
    /// SSLRequest (the response's first 32 bytes, with `CLIENT_SSL`), then the TLS handshake,
    /// after which the response follows with sequence id 2. Whether it did.
    async fn start_tls(
        &mut self,
        target: &BackendTarget,
        response: &mut HandshakeResponse<'_>,
    ) -> Result<bool, BackendError> {
        let Some(config) = target.tls.config() else {
            return Ok(false);
        };
        // A socket never leaves the host (the URL refuses a required mode with one).
        if !matches!(self.conn.get_mut(), BackendStream::Tcp(_)) {
            return Ok(false);
        }
        if !self
            .greeting
            .capabilities
            .contains(CapabilityFlags::CLIENT_SSL)
        {
            if target.tls.mode.required() {
                return Err(BackendError::Tls(format!(
                    "ssl-mode={} but the server does not offer TLS (start it with ssl_cert and ssl_key)",
                    target.tls.mode.name()
                )));
            }
            return Ok(false);
        }
        response.capabilities |= CapabilityFlags::CLIENT_SSL;
        let encoded = response.encode();
        let request = encoded
            .get(..crate::protocol::handshake::SSL_REQUEST_LEN)
            .ok_or(BackendError::Protocol)?;
        packet::write_packet(self.conn.get_mut(), 1, request).await?;
        if !self.conn.buffered().is_empty() {
            return Err(BackendError::Protocol);
        }
        let name = ServerName::try_from(target.host.clone())
            .map_err(|e| BackendError::Tls(format!("{}: {e}", target.host)))?;
        let tcp = match std::mem::replace(self.conn.get_mut(), BackendStream::Upgrading) {
            BackendStream::Tcp(tcp) => tcp,
            _ => return Err(BackendError::Protocol),
        };
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| BackendError::Tls(e.to_string()))?;
        *self.conn.get_mut() = BackendStream::Tls(Box::new(tls));
        Ok(true)
    }

    /// Sends COM_CHANGE_USER for the proxy's backend user with the client's new database,
    /// character set and attributes; the backend resets the session exactly as for the client.
    pub async fn change_user(
        &mut self,
        target: &BackendTarget,
        database: &[u8],
        charset: Option<u16>,
        connect_attrs: Option<&[u8]>,
    ) -> Result<LoginReply, BackendError> {
        let plugin = Plugin::from_name(&self.greeting.auth_plugin).unwrap_or(Plugin::Native);
        let scramble = auth::scramble(plugin, &self.greeting.nonce, target.password.as_bytes());
        let mut out = BytesMut::with_capacity(128);
        out.put_u8(crate::protocol::commands::COM_CHANGE_USER);
        out.put_slice(target.user.as_bytes());
        out.put_u8(0);
        out.put_u8(scramble.len() as u8);
        out.put_slice(&scramble);
        out.put_slice(database);
        out.put_u8(0);
        out.put_u16_le(charset.unwrap_or(self.greeting.collation as u16));
        out.put_slice(plugin.name().as_bytes());
        out.put_u8(0);
        if let Some(attrs) = connect_attrs {
            out.put_slice(attrs);
        }
        packet::write_packet(self.conn.get_mut(), 0, &out).await?;
        self.finish_auth(target).await
    }

    /// Follows the authentication exchange to its OK or ERR: auth switches and the
    /// caching_sha2_password fast path.
    async fn finish_auth(&mut self, target: &BackendTarget) -> Result<LoginReply, BackendError> {
        loop {
            let packet = self.conn.next_logical_packet(1 << 20).await?;
            let seq = packet.seq.wrapping_add(1);
            match packet.payload.first() {
                Some(&wire::OK_HEADER) => return Ok(LoginReply::Ok(packet.payload)),
                Some(&wire::ERR_HEADER) => return Ok(LoginReply::Err(packet.payload)),
                Some(&wire::EOF_HEADER) => {
                    // AuthSwitchRequest: plugin name, NUL, new nonce (NUL-terminated).
                    let mut r = Reader::new(&packet.payload[1..]);
                    let name = r.null_terminated_or_rest();
                    let nonce = r.remaining().strip_suffix(&[0]).unwrap_or(r.remaining());
                    let plugin = Plugin::from_name(name).ok_or_else(|| {
                        BackendError::UnsupportedAuth(String::from_utf8_lossy(name).into_owned())
                    })?;
                    // The scramble of an empty password is empty; MariaDB still expects a packet.
                    let reply = auth::scramble(plugin, nonce, target.password.as_bytes());
                    packet::write_packet(self.conn.get_mut(), seq, &reply).await?;
                    self.greeting.nonce = nonce.to_vec();
                    self.greeting.auth_plugin = name.to_vec();
                }
                Some(0x01) => match packet.payload.get(1) {
                    // caching_sha2_password: 3 = fast auth succeeded, an OK follows.
                    Some(3) => continue,
                    // 4 = full authentication: over TLS the password itself, NUL-terminated
                    // (without TLS it would take the server's RSA key, which is not done).
                    Some(4) if matches!(self.conn.get_mut(), BackendStream::Tls(_)) => {
                        let mut reply = target.password.as_bytes().to_vec();
                        reply.push(0);
                        packet::write_packet(self.conn.get_mut(), seq, &reply).await?;
                    }
                    _ => {
                        return Err(BackendError::UnsupportedAuth(
                            "caching_sha2_password full (over plain TCP, which needs the server's RSA key; with ssl-mode=REQUIRED or stricter it is done over TLS)".into(),
                        ))
                    }
                },
                _ => return Err(BackendError::Protocol),
            }
        }
    }

    /// COM_PING; keeps an idle connection from the server's `wait_timeout`.
    pub async fn ping(&mut self) -> Result<(), BackendError> {
        self.simple_command(crate::protocol::commands::COM_PING)
            .await
    }

    /// `COM_RESET_CONNECTION`: the session as after a fresh login (user variables, temporary
    /// tables, prepared statements and an open transaction gone), its database kept.
    pub async fn reset_connection(&mut self) -> Result<(), BackendError> {
        self.simple_command(crate::protocol::commands::COM_RESET_CONNECTION)
            .await
    }

    /// Sends a command without arguments and reads its OK.
    async fn simple_command(&mut self, command: u8) -> Result<(), BackendError> {
        packet::write_packet(self.conn.get_mut(), 0, &[command]).await?;
        let reply = self.conn.next_logical_packet(1 << 20).await?;
        match reply.payload.first() {
            Some(&wire::OK_HEADER) => Ok(()),
            Some(&wire::ERR_HEADER) => Err(BackendError::Refused(
                ErrorPacket::parse(&reply.payload)
                    .unwrap_or_else(|| ErrorPacket::new(0, "HY000", "command failed")),
            )),
            _ => Err(BackendError::Protocol),
        }
    }

    /// Closes the connection politely (COM_QUIT), ignoring errors: the peer may be gone already.
    pub async fn quit(mut self) {
        let _ = packet::write_packet(
            self.conn.get_mut(),
            0,
            &[crate::protocol::commands::COM_QUIT],
        )
        .await;
        let _ = self.conn.get_mut().shutdown().await;
    }
}

/// An error sent instead of the greeting has no SQLSTATE marker.
fn parse_pre_handshake_error(payload: &[u8]) -> ErrorPacket {
    let mut r = Reader::new(payload);
    r.u8();
    let code = r.u16().unwrap_or(0);
    let rest = r.remaining();
    if let Some(stripped) = rest.strip_prefix(b"#") {
        if stripped.len() >= 5 {
            return ErrorPacket::new(
                code,
                &String::from_utf8_lossy(&stripped[..5]),
                String::from_utf8_lossy(&stripped[5..]),
            );
        }
    }
    ErrorPacket::new(code, "HY000", String::from_utf8_lossy(rest))
}

/// The answer to a query the proxy itself sends over a session's backend connection.
#[derive(Debug)]
pub enum QueryOutcome {
    /// An OK packet.
    Ok { affected_rows: u64, status: u16 },
    /// An ERR packet's payload (the server's own error, to pass on as it is).
    Err(BytesMut),
    /// A text result set: column definition payloads, the row payloads (none when they were
    /// handed out one by one, [`Backend::read_outcome_with`]), the final status flags.
    ResultSet {
        columns: Vec<BytesMut>,
        rows: Vec<BytesMut>,
        status: u16,
    },
}

/// Largest row the proxy reads whole for its own queries (message rows).
const MAX_OWN_ROW: usize = 1 << 30;

/// Most columns a result set may have: the server's own limit on a table's columns. An answer
/// announcing more is not from a working server.
const MAX_COLUMNS: u64 = 4096;

/// Most rows, and most bytes of rows, of an answer [`Backend::read_outcome`] keeps: the
/// proxy's own statements on a session's connection return no rows or a few small ones
/// (`LIMIT 0` probes, transaction control). More is a protocol error, so that a misbehaving
/// server cannot make the proxy hold unbounded memory.
const FEW_ROWS: usize = 64;
const FEW_BYTES: usize = 1 << 20;

impl Backend {
    /// Runs one statement (no multi-statements) over this connection and reads its whole answer.
    /// Used for the proxy's own statements on a session's connection (claims, column metadata).
    pub async fn query(
        &mut self,
        sql: &str,
        deprecate_eof: bool,
    ) -> Result<QueryOutcome, BackendError> {
        self.send_queries(&[sql]).await?;
        self.read_outcome(deprecate_eof).await
    }

    /// Sends several statements in one write without waiting for their answers (pipelining:
    /// the server runs them one after the other, in order). Read each answer with
    /// [`Backend::read_outcome`]. Saves a round trip per statement on the claim path.
    pub async fn send_queries(&mut self, statements: &[&str]) -> Result<(), BackendError> {
        let mut out = BytesMut::with_capacity(statements.iter().map(|s| s.len() + 5).sum());
        for sql in statements {
            let mut payload = BytesMut::with_capacity(sql.len() + 1);
            payload.put_u8(crate::protocol::commands::COM_QUERY);
            payload.put_slice(sql.as_bytes());
            packet::encode_packet(&mut out, 0, &payload);
        }
        let w = self.conn.get_mut();
        w.write_all(&out).await?;
        w.flush().await?;
        Ok(())
    }

    /// Reads the whole answer to the next statement sent with [`Backend::send_queries`]: a few
    /// small rows at most ([`FEW_ROWS`], [`FEW_BYTES`]).
    pub async fn read_outcome(
        &mut self,
        deprecate_eof: bool,
    ) -> Result<QueryOutcome, BackendError> {
        let mut rows = Vec::new();
        let mut bytes = 0usize;
        let outcome = self
            .read_outcome_with(deprecate_eof, FEW_ROWS, &mut |row| {
                bytes = bytes.saturating_add(row.len());
                if bytes <= FEW_BYTES {
                    rows.push(row);
                }
            })
            .await?;
        if bytes > FEW_BYTES {
            return Err(BackendError::Protocol);
        }
        Ok(match outcome {
            QueryOutcome::ResultSet {
                columns, status, ..
            } => QueryOutcome::ResultSet {
                columns,
                rows,
                status,
            },
            other => other,
        })
    }

    /// Reads the answer to the next statement sent with [`Backend::send_queries`], handing each
    /// row to `each_row` as it comes (which decides what to keep of it) rather than keeping it:
    /// the `ResultSet` returned has no rows. More rows than `max_rows` is a protocol error (a
    /// claim's `SELECT` names its ids, so it cannot return more).
    pub async fn read_outcome_with(
        &mut self,
        deprecate_eof: bool,
        max_rows: usize,
        each_row: &mut (dyn FnMut(BytesMut) + Send),
    ) -> Result<QueryOutcome, BackendError> {
        let first = self.conn.next_logical_packet(MAX_OWN_ROW).await?;
        match first.payload.first() {
            Some(&wire::OK_HEADER) => {
                let mut r = Reader::new(&first.payload[1..]);
                let affected_rows = r.lenenc_int().unwrap_or(0);
                let status = wire::status_flags(&first.payload).unwrap_or(0);
                return Ok(QueryOutcome::Ok {
                    affected_rows,
                    status,
                });
            }
            Some(&wire::ERR_HEADER) => return Ok(QueryOutcome::Err(first.payload)),
            Some(&wire::LOCAL_INFILE_HEADER) | None => return Err(BackendError::Protocol),
            _ => {}
        }
        let count = Reader::new(&first.payload)
            .lenenc_int()
            .filter(|n| *n <= MAX_COLUMNS)
            .ok_or(BackendError::Protocol)?;
        let mut columns = Vec::with_capacity(count as usize);
        for _ in 0..count {
            columns.push(self.conn.next_logical_packet(MAX_OWN_ROW).await?.payload);
        }
        if !deprecate_eof {
            let eof = self.conn.next_logical_packet(MAX_OWN_ROW).await?;
            if eof.payload.first() != Some(&wire::EOF_HEADER) {
                return Err(BackendError::Protocol);
            }
        }
        let mut rows = 0usize;
        loop {
            let p = self.conn.next_logical_packet(MAX_OWN_ROW).await?.payload;
            match p.first() {
                Some(&wire::EOF_HEADER) if p.len() < MAX_PAYLOAD => {
                    let status = wire::status_flags(&p).unwrap_or(0);
                    if status
                        & mysql_common::constants::StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits()
                        != 0
                    {
                        return Err(BackendError::Protocol);
                    }
                    return Ok(QueryOutcome::ResultSet {
                        columns,
                        rows: Vec::new(),
                        status,
                    });
                }
                Some(&wire::ERR_HEADER) => return Ok(QueryOutcome::Err(p)),
                _ if rows >= max_rows => return Err(BackendError::Protocol),
                _ => {
                    rows += 1;
                    each_row(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend whose server side is `answer`, already written (packets from sequence id 1).
    async fn answering(answer: &[&[u8]]) -> Backend {
        let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
        let mut out = BytesMut::new();
        let mut seq = 1;
        for payload in answer {
            seq = packet::encode_packet(&mut out, seq, payload);
        }
        // Written from a task of its own: a large answer does not fit the socket's buffer.
        tokio::spawn(async move {
            theirs.write_all(&out).await.expect("write the answer");
            // Kept open: the reader must stop at the answer's end, not at the socket's.
            std::mem::forget(theirs);
        });
        Backend {
            conn: PacketReader::new(BackendStream::Unix(ours)),
            greeting: BackendGreeting {
                server_version: b"10.11.0-MariaDB".to_vec(),
                connection_id: 1,
                capabilities: CapabilityFlags::empty(),
                collation: 45,
                status: 0,
                nonce: Vec::new(),
                auth_plugin: Vec::new(),
                mariadb_capabilities: 0,
            },
            target: BackendTarget::parse("mysql://root@localhost/test").expect("a valid URL"),
            generation: 0,
        }
    }

    /// One column, `rows` rows of ten bytes each, and the end (CLIENT_DEPRECATE_EOF).
    async fn result_of(rows: usize) -> Backend {
        let row = [9u8, b'0', b'1', b'2', b'3', b'4', b'5', b'6', b'7', b'8'];
        let end = [wire::EOF_HEADER, 0, 0, 2, 0, 0, 0];
        let mut answer: Vec<&[u8]> = vec![&[1], b"column definition"];
        answer.extend(std::iter::repeat_n(&row[..], rows));
        answer.push(&end);
        answering(&answer).await
    }

    /// The rows `read_outcome_with` hands out, or its error.
    async fn rows_handed_out(
        backend: &mut Backend,
        max_rows: usize,
    ) -> Result<usize, BackendError> {
        let mut handed = 0;
        match backend
            .read_outcome_with(true, max_rows, &mut |_| handed += 1)
            .await?
        {
            QueryOutcome::ResultSet { rows, .. } => {
                assert!(rows.is_empty(), "rows handed out are not kept as well");
                Ok(handed)
            }
            other => panic!("expected a result set, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn every_row_is_handed_out_in_turn() {
        let handed = rows_handed_out(&mut result_of(3).await, 3).await;
        assert!(matches!(handed, Ok(3)), "{handed:?}");
    }

    #[tokio::test]
    async fn more_rows_than_the_statement_can_return_is_a_protocol_error() {
        let handed = rows_handed_out(&mut result_of(3).await, 2).await;
        assert!(matches!(handed, Err(BackendError::Protocol)), "{handed:?}");
        let outcome = result_of(FEW_ROWS + 1).await.read_outcome(true).await;
        assert!(
            matches!(outcome, Err(BackendError::Protocol)),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn rows_past_the_byte_limit_are_a_protocol_error() {
        let big = vec![b'x'; FEW_BYTES + 1];
        let end = [wire::EOF_HEADER, 0, 0, 2, 0, 0, 0];
        let outcome = answering(&[&[1], b"column definition", &big, &end])
            .await
            .read_outcome(true)
            .await;
        assert!(
            matches!(outcome, Err(BackendError::Protocol)),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_few_small_rows_are_kept() {
        match result_of(FEW_ROWS).await.read_outcome(true).await {
            Ok(QueryOutcome::ResultSet { rows, .. }) => assert_eq!(rows.len(), FEW_ROWS),
            other => panic!("expected a result set, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn more_columns_than_a_table_can_have_is_a_protocol_error() {
        let count = [0xfc, 0x01, 0x10]; // 4097
        let outcome = answering(&[&count]).await.read_outcome(true).await;
        assert!(
            matches!(outcome, Err(BackendError::Protocol)),
            "{outcome:?}"
        );
    }
}
