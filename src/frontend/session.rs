//! One client session after login: read a command, classify it, relay it to the session's own
//! backend connection (or, later, hand it to the message engine), and relay the answer back.

use std::sync::Arc;

use mysql_common::constants::CapabilityFlags;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

use super::messages::virtual_not_prepared;
use super::Context;
use crate::backend::Backend;
use crate::protocol::commands::*;
use crate::protocol::packet::{parse_header, write_packet, PacketReader, HEADER_LEN, MAX_PAYLOAD};
use crate::protocol::wire::{self, ErrorPacket};
use crate::relay::{BackendWatch, Relay, RelayError, ResponseKind};
use crate::sql::{self, Action};

/// The most of one statement (COM_QUERY) the proxy joins in memory to read it whole: what
/// msgproxy answers itself (STREAM, ACK) must fit; anything longer is streamed to the server
/// without being held (so memory per session stays bounded whatever a client sends).
const JOIN_LIMIT: usize = 2 * MAX_PAYLOAD;

/// How long the proxy reads for the server's answer after writing a command to it failed. The
/// server that refuses a packet (over its `max_allowed_packet`) sends its error and closes before
/// the proxy's write fails, so the error is already in the socket's buffer; a lost connection
/// ends the read at once. This bounds only a connection that takes no more and says nothing.
const REFUSAL_READ: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest server error packet the proxy passes on after a failed write (a real one is a few
/// hundred bytes: code, SQLSTATE and a message of at most 512 characters).
const REFUSAL_MAX_LEN: usize = 4096;

/// Whether a physical packet (header included) is continued by the next one: its payload is
/// exactly [`MAX_PAYLOAD`]. (A command joined by `join_continuation` is re-framed, longer than
/// that, and complete.)
fn is_continued(raw: &[u8]) -> bool {
    raw.len() == 4 + MAX_PAYLOAD
}

/// A statement of 16 MiB or more, as [`Session::join_continuation`] read it.
enum Joined {
    /// All of it: re-framed, and its payload.
    Whole {
        raw: bytes::BytesMut,
        payload: bytes::BytesMut,
    },
    /// Its first physical packets, unchanged; the rest is still unread.
    TooLong { packets: Vec<bytes::BytesMut> },
}

/// A logged-in client and its backend connection.
pub struct Session<S> {
    pub(super) ctx: Arc<Context>,
    pub(super) client: PacketReader<S>,
    pub(super) backend: Backend,
    pub(super) relay: Relay,
    pub(super) capabilities: CapabilityFlags,
    /// The session's current database, used to resolve unqualified message table names: known
    /// only while certain (see `sql::current_db`), else asked of the server when needed.
    pub(super) current_db: CurrentDb,
    /// Whether the server runs several statements in one COM_QUERY for this session
    /// (CLIENT_MULTI_STATEMENTS, switched by COM_SET_OPTION): only then can a later statement of a
    /// query change the current database.
    pub(super) multi_statements: bool,
    /// Whether the session has prepared a statement that may change the current database (a
    /// prepared `USE`, `DROP DATABASE`, ...): from then on every COM_STMT_EXECUTE forgets it.
    /// Cleared when the server frees the session's statements (COM_CHANGE_USER,
    /// COM_RESET_CONNECTION).
    risky_prepared: bool,
    /// Message tables this session may have written in its open transaction; their managers are
    /// told when it commits.
    pub(super) pending_notify: Vec<Arc<crate::messaging::manager::TableManager>>,
    /// While the engine polls instead of following the binlog: the message tables this
    /// session's prepared statements may write, by statement id (binary protocol) and for all
    /// its SQL `PREPARE`s together, so that executing one asks for a poll as a text `INSERT` does.
    pub(super) prepared_writes: super::messages::PreparedWrites,
    /// This session's prepared `KILL QUERY` statements: executing one ends a stream as the text
    /// form does.
    prepared_kills: super::interrupts::PreparedKills,
    /// The challenge of the initial handshake; clients answer COM_CHANGE_USER with it.
    pub(super) nonce: [u8; 20],
    pub(super) user: String,
    pub(super) peer: super::Peer,
}

/// What the proxy knows of the session's current database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CurrentDb {
    /// Certainly this one (`None`: no database selected).
    Known(Option<String>),
    /// Something the session did may have changed it: ask the server before relying on it.
    Unknown,
}

impl CurrentDb {
    /// From a database name as the client sent it (login, COM_INIT_DB, COM_CHANGE_USER, `USE`):
    /// empty is none. A name that is not ASCII is left for the server to tell: the client wrote it
    /// in its own character set, which the proxy does not follow, and the server converts it.
    pub(super) fn named(name: &[u8]) -> CurrentDb {
        if name.is_empty() {
            CurrentDb::Known(None)
        } else if name.is_ascii() {
            CurrentDb::Known(Some(String::from_utf8_lossy(name).into_owned()))
        } else {
            CurrentDb::Unknown
        }
    }
}

/// Why a session ended. Most endings are ordinary (the client quit or hung up).
#[derive(Debug, thiserror::Error)]
pub(super) enum SessionEnd {
    #[error("client quit")]
    Quit,
    #[error("client connection closed: {0}")]
    Client(std::io::Error),
    #[error("backend connection lost: {0}")]
    Backend(std::io::Error),
    /// The backend closed the connection between commands (KILL, wait_timeout, shutdown).
    #[error("backend closed the connection: {0}")]
    BackendClosed(std::io::Error),
    /// The server refused a command with an error and closed the connection while the proxy was
    /// still writing the command (a packet over its `max_allowed_packet`). The client has had the
    /// server's error, as a direct client would.
    #[error("backend refused the command and closed the connection: {0}")]
    BackendRefused(std::io::Error),
    #[error("backend sent a malformed response")]
    Protocol,
    /// The client went away while its command ran: the backend session is ended too.
    #[error("client closed its connection while its command was running")]
    ClientVanished,
    /// The relay misread where a response ends (see `RelayError::Confused`).
    #[error("{0}")]
    Confused(String),
    #[error("proxy shutting down")]
    Shutdown,
}

impl From<RelayError> for SessionEnd {
    fn from(e: RelayError) -> Self {
        match e {
            RelayError::Client(e) => SessionEnd::Client(e),
            RelayError::Backend(e) => SessionEnd::Backend(e),
            RelayError::Protocol => SessionEnd::Protocol,
            RelayError::ClientVanished => SessionEnd::ClientVanished,
            e @ RelayError::Confused(_) => SessionEnd::Confused(e.to_string()),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: Arc<Context>,
        client: PacketReader<S>,
        backend: Backend,
        capabilities: CapabilityFlags,
        status: u16,
        nonce: [u8; 20],
        user: String,
        peer: super::Peer,
        database: Option<&[u8]>,
    ) -> Self {
        let watch = BackendWatch::new(
            backend.greeting.connection_id,
            ctx.backend_sessions_for(backend.generation),
        );
        Session {
            ctx,
            client,
            backend,
            relay: Relay::new(capabilities, status, watch),
            capabilities,
            current_db: CurrentDb::named(database.unwrap_or_default()),
            multi_statements: capabilities.contains(CapabilityFlags::CLIENT_MULTI_STATEMENTS),
            risky_prepared: false,
            pending_notify: Vec::new(),
            prepared_writes: Default::default(),
            prepared_kills: Default::default(),
            nonce,
            user,
            peer,
        }
    }

    pub async fn run(mut self) {
        // A command begun and then left unfinished would otherwise hold this session, its
        // backend connection and the buffer for its announced length for good.
        self.client
            .set_idle_timeout(Some(self.ctx.config.net_read_timeout));
        let end = self.command_loop().await;
        let peer = self.peer;
        match &end {
            SessionEnd::Quit
            | SessionEnd::Client(_)
            | SessionEnd::BackendClosed(_)
            | SessionEnd::BackendRefused(_) => {
                debug!(%peer, "session ended: {end}")
            }
            SessionEnd::Shutdown => {
                self.backend.quit().await;
                return;
            }
            SessionEnd::ClientVanished => {
                debug!(%peer, "session ended: {end}");
                // As the server does for a client of its own that vanishes: the session ends,
                // and with it its locks and open transaction.
                self.end_backend_session().await;
            }
            SessionEnd::Confused(_) => {
                self.ctx
                    .metrics
                    .backend_error(crate::metrics::BackendErrorKind::Lost);
                warn!(%peer, user = %self.user, "session ended: {end}");
                let err = ErrorPacket::new(
                    ER_NET_READ_ERROR,
                    "08S01",
                    format!("{end}; msgproxy has closed this session, reconnect to continue"),
                );
                let _ = write_packet(
                    self.client.get_mut(),
                    self.relay.next_seq,
                    &err.encode(true),
                )
                .await;
                // The command may still be running there: it must not outlive the session.
                self.end_backend_session().await;
            }
            SessionEnd::Backend(_) | SessionEnd::Protocol => {
                self.ctx
                    .metrics
                    .backend_error(crate::metrics::BackendErrorKind::Lost);
                warn!(%peer, user = %self.user, "session ended: {end}");
                // 08S01 tells drivers and pools this connection is broken. Never a
                // client-range code such as CR_SERVER_LOST (2013): libmariadb clients would show
                // "malformed packet" instead of this message (commands.rs). When a STREAM's
                // backend is lost, `relay.next_seq` continues its result set.
                let err = ErrorPacket::new(
                    ER_NET_READ_ERROR,
                    "08S01",
                    format!(
                        "Lost connection to the backend MySQL server ({}) during the query: {end}; msgproxy has closed this session, reconnect to continue",
                        self.backend.target.address()
                    ),
                );
                let _ = write_packet(
                    self.client.get_mut(),
                    self.relay.next_seq,
                    &err.encode(true),
                )
                .await;
            }
        }
        let _ = self.client.get_mut().shutdown().await;
    }

    /// Ends the backend session while a command may still run there: closing the connection ends
    /// most waits (the server checks its socket in `SLEEP`, `GET_LOCK`, ...), `KILL CONNECTION`
    /// the rest (a row lock wait, a long statement).
    async fn end_backend_session(&mut self) {
        let connection = self.relay.watch.connection_id;
        let _ = self.backend.conn.get_mut().shutdown().await;
        if let Some(sessions) = self.relay.watch.sessions.clone() {
            sessions.kill(connection).await;
        }
    }

    async fn command_loop(&mut self) -> SessionEnd {
        loop {
            if let Err(end) = self.wait_for_command().await {
                return end;
            }
            if let Err(end) = self.serve_command().await {
                return end;
            }
        }
    }

    /// Waits until the client sends a command. Meanwhile watches the backend: if it closes the
    /// connection (KILL, wait_timeout, shutdown) the client is told at once, as a direct
    /// connection would be, instead of at its next command.
    async fn wait_for_command(&mut self) -> Result<(), SessionEnd> {
        let backend_idle = self.backend.conn.buffered().is_empty();
        tokio::select! {
            biased;
            r = self.client.peek_header() => r.map(|_| ()).map_err(SessionEnd::Client),
            r = self.backend.conn.fill(), if backend_idle => {
                // Whatever the backend says unprompted (a "killed" or "timeout" error) goes to
                // the client unchanged; then the session ends with the backend connection.
                let said = self.backend.conn.take_buffered(usize::MAX);
                if !said.is_empty() {
                    let _ = self.client.get_mut().write_all(&said).await;
                }
                // Nothing of the proxy's own is added: a direct client would see the same bytes
                // and then the connection close.
                Err(SessionEnd::BackendClosed(match r {
                    Ok(_) => std::io::ErrorKind::ConnectionAborted.into(),
                    Err(e) => e,
                }))
            }
            _ = self.ctx.shutdown.cancelled() => Err(SessionEnd::Shutdown),
        }
    }

    async fn serve_command(&mut self) -> Result<(), SessionEnd> {
        let first = self
            .client
            .next_raw_packet()
            .await
            .map_err(SessionEnd::Client)?;
        // Whatever answers the command follows the client's last packet of it (updated as the
        // packets that continue this one are read).
        self.relay.next_seq = parse_header(&first).1.wrapping_add(1);
        let (raw, joined) = if is_continued(&first) && first.get(4) == Some(&COM_QUERY) {
            // A statement of 16 MiB or more: the proxy may need all of it (a long ACK list),
            // so join it here, up to JOIN_LIMIT; it is re-split when sent on.
            match self.join_continuation(first).await? {
                Joined::Whole { raw, payload } => (raw, Some(payload)),
                Joined::TooLong { packets } => return self.relay_long_statement(packets).await,
            }
        } else {
            (first, None)
        };
        let payload: &[u8] = match &joined {
            Some(p) => p,
            None => &raw[4..],
        };
        let Some(&command) = payload.first() else {
            return self
                .reply_error(ErrorPacket::new(
                    ER_UNKNOWN_COM_ERROR,
                    "08S01",
                    "Unknown command",
                ))
                .await;
        };
        let kind = match command {
            COM_QUIT => {
                let _ = self.backend.conn.get_mut().write_all(&raw).await;
                return Err(SessionEnd::Quit);
            }
            COM_QUERY => {
                let whole = &payload[1..];
                let (statement, classification) = self.statement_inside(whole);
                self.ctx.metrics.statement(classification.keyword);
                if classification.action == Action::Virtual
                    && self.virtual_runs_here(statement).await?
                {
                    return self.serve_virtual(statement).await;
                }
                if classification.keyword == sql::Keyword::Other
                    && sql::prepared_text(statement, self.quoting())
                        .is_some_and(|text| sql::classify(&text).action == Action::Virtual)
                {
                    // `PREPARE s FROM 'ACK t 1'`: the server would call it a syntax error.
                    return self.reply_error(virtual_not_prepared()).await;
                }
                // The `@@socket` rewrite reads a plain SELECT only (not one in SET STATEMENT).
                let wrapped = statement.len() != whole.len();
                let rewritten = match classification.keyword {
                    sql::Keyword::Select if !wrapped => {
                        sql::rewrite(whole, self.quoting(), &self.ctx.socket_literal)
                    }
                    _ => None,
                };
                match rewritten {
                    Some(statement) => {
                        self.relay_statement(&statement, ResponseKind::Results)
                            .await?
                    }
                    None if sql::is_ddl(classification.keyword, statement)
                        || classification.keyword == sql::Keyword::Update =>
                    {
                        // The engine reloads before the client sees the OK, so the table the
                        // DDL made (or unmade) is usable (or gone) the moment it is answered;
                        // and an UPDATE that acks is counted before its OK, so a scrape the
                        // client makes after the OK includes it.
                        self.send_to_backend(&raw).await?;
                        let end = self.forward_results_holding_end().await?;
                        self.track_current_db(statement, classification);
                        self.after_relayed_statement(statement, classification)
                            .await;
                        return self.write_held_end(&end).await;
                    }
                    None => {
                        self.relay_command(&raw, ResponseKind::Results).await?;
                    }
                }
                self.track_current_db(statement, classification);
                self.after_relayed_statement(statement, classification)
                    .await;
                return Ok(());
            }
            COM_INIT_DB => {
                self.relay_command(&raw, ResponseKind::Single).await?;
                if !self.relay.failed {
                    self.current_db = CurrentDb::named(&payload[1..]);
                }
                return Ok(());
            }
            COM_RESET_CONNECTION => {
                // The server keeps the database here, but the proxy need not rely on that: the
                // next unqualified ACK/STREAM asks. Prepared statements are gone.
                self.relay_command(&raw, ResponseKind::Single).await?;
                self.current_db = CurrentDb::Unknown;
                self.forget_session_state();
                return Ok(());
            }
            COM_SET_OPTION => {
                self.relay_command(&raw, ResponseKind::Single).await?;
                // MYSQL_OPTION_MULTI_STATEMENTS_ON is 0, _OFF is 1.
                match payload.get(1..3) {
                    Some([0, 0]) if !self.relay.failed => self.multi_statements = true,
                    Some([1, 0]) if !self.relay.failed => self.multi_statements = false,
                    _ => {}
                }
                return Ok(());
            }
            COM_CHANGE_USER if is_continued(&raw) => {
                return self
                    .refuse_long_command(
                        &raw,
                        ErrorPacket::new(
                            ER_UNKNOWN_COM_ERROR,
                            "08S01",
                            "Malformed COM_CHANGE_USER packet (16 MiB or more)",
                        ),
                    )
                    .await;
            }
            COM_CHANGE_USER => return self.change_user(&raw[4..]).await,
            COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID | COM_REGISTER_SLAVE | COM_TABLE_DUMP
            | COM_CONNECT_OUT => {
                return self
                    .refuse_long_command(&raw, ErrorPacket::new(
                        ER_UNKNOWN_COM_ERROR,
                        "08S01",
                        "Replication commands are not supported through msgproxy; connect replicas to the server directly",
                    ))
                    .await;
            }
            COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => {
                if self.risky_prepared {
                    self.current_db = CurrentDb::Unknown;
                }
                let kill = match statement_id(payload) {
                    Some(id) if command == COM_STMT_EXECUTE => {
                        self.prepared_kills.target(id, payload)
                    }
                    _ => None,
                };
                // The flags byte after the statement id: CURSOR_TYPE_READ_ONLY (1) is the one
                // the server opens a cursor for.
                let kind = match payload.get(5) {
                    Some(flags) if command == COM_STMT_EXECUTE && flags & 1 != 0 => {
                        ResponseKind::CursorResults
                    }
                    _ => ResponseKind::Results,
                };
                self.relay_command(&raw, kind).await?;
                // The server accepted the KILL: a stream on that connection through this proxy
                // ends, as after a text `KILL QUERY`.
                if let Some(connection) = kill.filter(|_| !self.relay.failed) {
                    self.ctx.streams.interrupt(connection);
                }
                self.after_executed_prepared(statement_id(payload));
                return Ok(());
            }
            COM_PROCESS_INFO => ResponseKind::Results,
            COM_STMT_PREPARE
                if self.statement_inside(&payload[1..]).1.action == Action::Virtual =>
            {
                // The proxy answers these itself, over the text protocol only; the server would
                // say "syntax error", which is not the reason.
                return self.refuse_long_command(&raw, virtual_not_prepared()).await;
            }
            COM_STMT_PREPARE => {
                let classification = sql::classify(&payload[1..]);
                if sql::current_db::may_change_database(classification.keyword, &payload[1..]) {
                    self.risky_prepared = true;
                }
                // The `@@socket` rewrite, as for a plain SELECT sent as text. (A statement of
                // 16 MiB or more is streamed on, never held.)
                let rewritten = match classification.keyword {
                    sql::Keyword::Select if !is_continued(&raw) => {
                        rewritten_prepare(&raw, self.quoting(), &self.ctx.socket_literal)
                    }
                    _ => None,
                };
                self.relay_command(rewritten.as_deref().unwrap_or(&raw), ResponseKind::Prepare)
                    .await?;
                if let Some(id) = self.relay.prepared_statement {
                    if classification.keyword == sql::Keyword::Kill {
                        self.prepared_kills.prepared(id, &payload[1..]);
                    }
                }
                self.after_prepared(&payload[1..], classification.keyword);
                return Ok(());
            }
            COM_STMT_FETCH => ResponseKind::Rows,
            COM_FIELD_LIST => ResponseKind::FieldList,
            COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA => {
                if payload.first() == Some(&COM_STMT_CLOSE) {
                    if let Some(id) = statement_id(payload) {
                        self.prepared_writes.by_id.remove(&id);
                        self.prepared_kills.closed(id);
                    }
                }
                // No response: just pass the command on.
                self.send_to_backend(&raw).await?;
                return Ok(());
            }
            _ => ResponseKind::Single,
        };
        self.relay_command(&raw, kind).await
    }

    /// Sends a command to the backend (streaming any packets that continue it) and relays its
    /// answer, of shape `kind`, to the client.
    async fn relay_command(&mut self, raw: &[u8], kind: ResponseKind) -> Result<(), SessionEnd> {
        self.send_to_backend(raw).await?;
        self.relay
            .forward_response(kind, &mut self.client, &mut self.backend.conn)
            .await?;
        Ok(())
    }

    /// Sends a command to the backend: this physical packet and, for a command of 16 MiB or
    /// more, the physical packets that continue it, streamed as they arrive.
    async fn send_to_backend(&mut self, raw: &[u8]) -> Result<(), SessionEnd> {
        self.send_to_backend_after(&[], raw).await
    }

    /// [`Session::send_to_backend`] for a command whose first physical packets, `before`, were
    /// read already (the head of a long statement).
    async fn send_to_backend_after(
        &mut self,
        before: &[bytes::BytesMut],
        raw: &[u8],
    ) -> Result<(), SessionEnd> {
        // An answer (the server's, or msgproxy's own error if the backend is lost meanwhile)
        // follows the client's last packet. If a write fails, the rest of the command is still
        // read (and dropped), so that the error reaches a client that is reading again.
        self.relay.next_seq = parse_header(raw).1.wrapping_add(1);
        // The server numbers its answer after the client's own packets.
        self.relay.seq_shift = 0;
        let mut failed = None;
        for packet in before.iter().map(|p| &p[..]).chain([raw]) {
            if failed.is_none() {
                failed = self.backend.conn.get_mut().write_all(packet).await.err();
            }
        }
        let mut more = is_continued(raw);
        while let Some(next) = self.next_continuation(&mut more).await? {
            self.relay.next_seq = parse_header(&next).1.wrapping_add(1);
            if failed.is_none() {
                failed = self.backend.conn.get_mut().write_all(&next).await.err();
            }
        }
        if failed.is_none() {
            failed = self.backend.conn.get_mut().flush().await.err();
        }
        match failed {
            Some(e) => Err(self.write_failed(e).await),
            None => Ok(()),
        }
    }

    /// Writing the current command to the backend failed with `e`. The server may have refused
    /// it and closed the connection: MariaDB answers a packet over its `max_allowed_packet` with
    /// ERR 1153 and closes while the proxy is still writing, so the write fails (broken pipe)
    /// with that error unread. A short read looks for it; if it is there, it goes to the client
    /// (after the client's last packet, `relay.next_seq`) in place of the proxy's own 1158, as a
    /// direct client would see it. The backend connection is gone either way: the session ends.
    async fn write_failed(&mut self, e: std::io::Error) -> SessionEnd {
        let conn = &mut self.backend.conn;
        let read_err = async {
            conn.fill_to(HEADER_LEN + 1).await?;
            let (len, _) = parse_header(conn.buffered());
            if conn.buffered().get(HEADER_LEN) != Some(&wire::ERR_HEADER) || len > REFUSAL_MAX_LEN {
                return Err(std::io::Error::from(std::io::ErrorKind::InvalidData));
            }
            conn.fill_to(HEADER_LEN + len).await?;
            Ok::<_, std::io::Error>(conn.take_buffered(HEADER_LEN + len))
        };
        let err = match tokio::time::timeout(REFUSAL_READ, read_err).await {
            Ok(Ok(err)) => err,
            _ => return SessionEnd::Backend(e),
        };
        match write_packet(
            self.client.get_mut(),
            self.relay.next_seq,
            &err[HEADER_LEN..],
        )
        .await
        {
            Ok(_) => SessionEnd::BackendRefused(e),
            Err(client) => SessionEnd::Client(client),
        }
    }

    /// Reads the physical packets that continue `first` and returns the whole logical packet,
    /// re-framed (header of the first packet, payload of all) — or, past [`JOIN_LIMIT`], the
    /// physical packets read so far, unchanged, with the rest of the statement still unread.
    async fn join_continuation(&mut self, first: bytes::BytesMut) -> Result<Joined, SessionEnd> {
        let mut more = is_continued(&first);
        let mut packets = vec![first];
        loop {
            if more && packets.len() * MAX_PAYLOAD >= JOIN_LIMIT {
                return Ok(Joined::TooLong { packets });
            }
            match self.next_continuation(&mut more).await? {
                Some(next) => {
                    self.relay.next_seq = parse_header(&next).1.wrapping_add(1);
                    packets.push(next)
                }
                None => break,
            }
        }
        let mut payload = bytes::BytesMut::with_capacity(packets.len() * MAX_PAYLOAD);
        for p in &packets {
            payload.extend_from_slice(&p[4..]);
        }
        let mut raw = bytes::BytesMut::with_capacity(payload.len() + 8 * packets.len());
        crate::protocol::packet::encode_packet(&mut raw, packets[0][3], &payload);
        Ok(Joined::Whole { raw, payload })
    }

    /// A statement longer than [`JOIN_LIMIT`]: the proxy never holds it whole. It is classified
    /// by its first 16 MiB; anything for the server (a bulk INSERT, say) is streamed on as it
    /// arrives and its answer relayed, exactly as a direct connection would see it. A statement
    /// msgproxy answers itself (a giant ACK list) is read to its end, dropped, and refused.
    async fn relay_long_statement(
        &mut self,
        packets: Vec<bytes::BytesMut>,
    ) -> Result<(), SessionEnd> {
        let Some((last, before)) = packets.split_last() else {
            return Ok(());
        };
        let head = &packets[0][5..];
        let classification = sql::classify(head);
        self.ctx.metrics.statement(classification.keyword);
        if classification.action == Action::Virtual {
            let err = ErrorPacket::new(
                ER_NET_PACKET_TOO_LARGE,
                "08S01",
                format!(
                    "msgproxy reads STREAM and ACK statements of at most {} MiB; acknowledge in several ACK statements",
                    JOIN_LIMIT.div_ceil(1 << 20)
                ),
            );
            return self.refuse_long_command(last, err).await;
        }
        // The last packet read is a full one: this streams the rest of the statement.
        self.send_to_backend_after(before, last).await?;
        self.relay
            .forward_response(
                ResponseKind::Results,
                &mut self.client,
                &mut self.backend.conn,
            )
            .await?;
        let head = &packets[0][5..];
        // Only its head was seen: a USE may follow in a part the proxy never held.
        if self.multi_statements
            || sql::current_db::may_change_database(classification.keyword, head)
        {
            self.current_db = CurrentDb::Unknown;
        }
        self.after_relayed_statement(head, classification).await;
        Ok(())
    }

    /// The statement that decides what the proxy does with `whole`, and its classification:
    /// `whole` itself, or the statement inside a `SET STATEMENT var = value FOR` wrapper
    /// (Connector/J's query timeout); the whole is what the server gets. The variables do not
    /// apply to what msgproxy answers itself (a timeout does not end a STREAM).
    fn statement_inside<'a>(&self, whole: &'a [u8]) -> (&'a [u8], sql::Classification) {
        let classification = sql::classify(whole);
        if classification.keyword == sql::Keyword::Set {
            if let Some(inner) = sql::set_statement_body(whole, self.quoting()) {
                return (inner, sql::classify(inner));
            }
        }
        (whole, classification)
    }

    /// The server started the session afresh (COM_RESET_CONNECTION, COM_CHANGE_USER, or one
    /// refused): its prepared statements are gone, and an open transaction with them.
    pub(super) fn forget_session_state(&mut self) {
        self.risky_prepared = false;
        self.prepared_writes = Default::default();
        self.prepared_kills = Default::default();
        self.pending_notify.clear();
    }

    /// After a relayed COM_QUERY: what it did to the current database. A plain `USE db` that
    /// succeeded names it; anything that may have changed it otherwise (including a failed
    /// multi-statement query, whose first statements ran) makes it unknown. Costs the hot path
    /// nothing but a scan for `;` when the session has multi-statements on.
    fn track_current_db(&mut self, sql: &[u8], classification: sql::Classification) {
        use sql::current_db::{may_change_database, may_hold_several, use_target};
        let several = self.multi_statements && may_hold_several(sql);
        if classification.keyword == sql::Keyword::Use && !several {
            match use_target(sql) {
                Some(db) if !self.relay.failed => self.current_db = CurrentDb::named(db.as_bytes()),
                // A single USE that failed changed nothing.
                Some(_) => {}
                None => self.current_db = CurrentDb::Unknown,
            }
        } else if several || may_change_database(classification.keyword, sql) {
            self.current_db = CurrentDb::Unknown;
        }
    }

    /// Whether the session agreed on CLIENT_DEPRECATE_EOF (shapes every result set).
    pub(super) fn deprecate_eof(&self) -> bool {
        self.capabilities
            .contains(CapabilityFlags::CLIENT_DEPRECATE_EOF)
    }

    /// Runs a statement of the proxy's making on the backend and relays the server's answer to
    /// the client as the answer to its current command.
    pub(super) async fn relay_statement(
        &mut self,
        sql: &[u8],
        kind: ResponseKind,
    ) -> Result<(), SessionEnd> {
        self.send_statement(sql).await?;
        self.relay
            .forward_response(kind, &mut self.client, &mut self.backend.conn)
            .await?;
        Ok(())
    }

    /// Sends `sql` to the backend as a COM_QUERY of the proxy's own, in place of the client's
    /// current command (its answer is the caller's to relay). The server numbers its answer after
    /// the packets of `sql`, the client expects it after those of its command (`relay.next_seq`):
    /// they differ when one of them took several 16 MiB packets and the other did not (an `ACK`
    /// rewritten into a longer UPDATE), so the relay renumbers the answer.
    pub(super) async fn send_statement(&mut self, sql: &[u8]) -> Result<(), SessionEnd> {
        let mut payload = Vec::with_capacity(sql.len() + 1);
        payload.push(COM_QUERY);
        payload.extend_from_slice(sql);
        let mut raw = bytes::BytesMut::new();
        let server_next = crate::protocol::packet::encode_packet(&mut raw, 0, &payload);
        self.relay.seq_shift = self.relay.next_seq.wrapping_sub(server_next);
        let backend = self.backend.conn.get_mut();
        let written = match backend.write_all(&raw).await {
            Ok(()) => backend.flush().await,
            Err(e) => Err(e),
        };
        // The server may refuse it as it refuses a client's (an UPDATE over its
        // max_allowed_packet).
        match written {
            Ok(()) => Ok(()),
            Err(e) => Err(self.write_failed(e).await),
        }
    }

    /// Relays the results of the statement just sent, all but their end, which is returned for
    /// [`Session::write_held_end`] once the proxy has done what must precede the client's OK.
    pub(super) async fn forward_results_holding_end(
        &mut self,
    ) -> Result<bytes::BytesMut, SessionEnd> {
        Ok(self
            .relay
            .forward_response_holding_end(
                ResponseKind::Results,
                &mut self.client,
                &mut self.backend.conn,
            )
            .await?)
    }

    /// Writes what [`Relay::forward_response_holding_end`] held back: the end of an answer.
    pub(super) async fn write_held_end(&mut self, end: &[u8]) -> Result<(), SessionEnd> {
        let client = self.client.get_mut();
        client.write_all(end).await.map_err(SessionEnd::Client)?;
        client.flush().await.map_err(SessionEnd::Client)
    }

    /// The client's next physical packet of a command whose previous one was continued
    /// (`more`, updated for the packet returned); `None` once the command has ended.
    async fn next_continuation(
        &mut self,
        more: &mut bool,
    ) -> Result<Option<bytes::BytesMut>, SessionEnd> {
        if !*more {
            return Ok(None);
        }
        let next = self
            .client
            .next_raw_packet()
            .await
            .map_err(SessionEnd::Client)?;
        *more = is_continued(&next);
        Ok(Some(next))
    }

    /// Refuses a command the proxy answers itself. If its packet is a full 16 MiB one, the
    /// packets that continue it are read and dropped first (else they would be taken for the
    /// next commands), and the error follows the last of them in sequence.
    async fn refuse_long_command(
        &mut self,
        raw: &[u8],
        err: ErrorPacket,
    ) -> Result<(), SessionEnd> {
        let mut seq = parse_header(raw).1;
        let mut more = is_continued(raw);
        while let Some(next) = self.next_continuation(&mut more).await? {
            seq = parse_header(&next).1;
        }
        write_packet(
            self.client.get_mut(),
            seq.wrapping_add(1),
            &err.encode(true),
        )
        .await
        .map(|_| ())
        .map_err(SessionEnd::Client)
    }

    /// Answers the current command with an error of the proxy's own (after the client's last
    /// packet of it); the session goes on.
    pub(super) async fn reply_error(&mut self, err: ErrorPacket) -> Result<(), SessionEnd> {
        write_packet(
            self.client.get_mut(),
            self.relay.next_seq,
            &err.encode(true),
        )
        .await
        .map(|_| ())
        .map_err(SessionEnd::Client)
    }
}

/// A one-packet `COM_STMT_PREPARE` (`raw`, header included) with the `@@socket` rewrite applied
/// to its statement, framed with the client's sequence id; `None` when nothing changes.
fn rewritten_prepare(raw: &[u8], quoting: sql::Quoting, socket: &[u8]) -> Option<bytes::BytesMut> {
    let statement = sql::rewrite(raw.get(5..)?, quoting, socket)?;
    let mut command = Vec::with_capacity(statement.len() + 1);
    command.push(COM_STMT_PREPARE);
    command.extend_from_slice(&statement);
    let mut framed = bytes::BytesMut::new();
    crate::protocol::packet::encode_packet(&mut framed, parse_header(raw).1, &command);
    Some(framed)
}
