//! One client session after login: its state, its lifetime (the command loop, how it ends and
//! what becomes of its backend connection), and the relay primitives the command loop
//! (`execute`) and the virtual statements (`messages`, ...) answer commands with.

use std::sync::Arc;

use mysql_common::constants::CapabilityFlags;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

use super::context::Context;
use super::peer::Peer;
use super::tracker::SessionTracker;
use crate::backend::Backend;
use crate::protocol::commands::*;
use crate::protocol::packet::{parse_header, write_packet, PacketReader, HEADER_LEN};
use crate::protocol::wire::{self, ErrorPacket};
use crate::relay::{BackendWatch, Relay, RelayError, ResponseKind};

/// How long the proxy reads for the server's answer after writing a command to it failed. The
/// server that refuses a packet (over its `max_allowed_packet`) sends its error and closes before
/// the proxy's write fails, so the error is already in the socket's buffer; a lost connection
/// ends the read at once. This bounds only a connection that takes no more and says nothing.
const REFUSAL_READ: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest server error packet the proxy passes on after a failed write (a real one is a few
/// hundred bytes: code, SQLSTATE and a message of at most 512 characters).
const REFUSAL_MAX_LEN: usize = 4096;

/// A logged-in client and its backend connection.
pub struct Session<S> {
    pub(super) ctx: Arc<Context>,
    pub(super) client: PacketReader<S>,
    pub(super) backend: Backend,
    pub(super) relay: Relay,
    pub(super) capabilities: CapabilityFlags,
    /// What the session's commands changed that later ones depend on (`tracker`).
    pub(super) tracker: SessionTracker,
    /// The challenge of the initial handshake; clients answer COM_CHANGE_USER with it.
    pub(super) nonce: [u8; 20],
    pub(super) user: String,
    pub(super) peer: Peer,
    /// With the pool on: what gives the backend connection back to it when the client leaves.
    pub(super) ticket: Option<super::pool::Ticket>,
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
        peer: Peer,
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
            tracker: SessionTracker::new(
                database.unwrap_or_default(),
                capabilities.contains(CapabilityFlags::CLIENT_MULTI_STATEMENTS),
            ),
            nonce,
            user,
            peer,
            ticket: None,
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
        self.release_backend(&end).await;
    }

    /// After the client has gone: the backend connection back to the pool when the session is
    /// known to have left it in a state a reset undoes, else closed (`frontend::pool`).
    async fn release_backend(self, end: &SessionEnd) {
        let Some(ticket) = self.ticket else {
            return;
        };
        // Only a client that said goodbye (COM_QUIT) left cleanly: one that closed its
        // connection is an aborted client to the server, whose session ends with it.
        let clean = matches!(end, SessionEnd::Quit)
            && !self.tracker.unresettable()
            && !self.relay.in_transaction()
            && self.backend.conn.buffered().is_empty();
        if clean {
            let database = self
                .tracker
                .current_db()
                .known()
                .map(|db| db.map(|db| db.as_bytes().to_vec()));
            self.ctx.pool.give_back(self.backend, ticket, database);
        } else {
            self.ctx.metrics.pool_discarded();
            if matches!(end, SessionEnd::Quit) {
                // The COM_QUIT the client sent, which was held back for the pool.
                self.backend.quit().await;
            }
        }
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

    /// Writing the current command to the backend failed with `e`. The server may have refused
    /// it and closed the connection: MariaDB answers a packet over its `max_allowed_packet` with
    /// ERR 1153 and closes while the proxy is still writing, so the write fails (broken pipe)
    /// with that error unread. A short read looks for it; if it is there, it goes to the client
    /// (after the client's last packet, `relay.next_seq`) in place of the proxy's own 1158, as a
    /// direct client would see it. The backend connection is gone either way: the session ends.
    pub(super) async fn write_failed(&mut self, e: std::io::Error) -> SessionEnd {
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
