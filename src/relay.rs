//! Forwards the backend's response to one command back to the client, packet for packet.
//!
//! The relay looks into the response only as far as it must to know where it ends: the first
//! packet of each result (OK, ERR, LOCAL INFILE request or column count), the count of column
//! definitions, and the first byte and length of each row (to spot the EOF/OK or ERR that ends a
//! result set). Rows and column definitions are never decoded; bytes leave in the same chunks they
//! arrived in, and the client socket is written whenever the relay would otherwise wait for the
//! backend, so a never-ending or huge result streams through with bounded memory.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use mysql_common::constants::{CapabilityFlags, StatusFlags};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::protocol::packet::{parse_header, PacketReader, HEADER_LEN, MAX_PAYLOAD};
use crate::protocol::wire::{self, Reader};

/// The shape of response a command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// COM_QUERY, COM_STMT_EXECUTE, COM_PROCESS_INFO: one or more results (OK, ERR, result set,
    /// LOCAL INFILE exchange).
    Results,
    /// COM_STMT_EXECUTE that asked for a read-only cursor: as [`ResponseKind::Results`], except
    /// that a result set whose column definitions end in an EOF saying a cursor was opened ends
    /// there (its rows come later, by COM_STMT_FETCH; see `opened_cursor`). Only here can the
    /// flag mean that: a stored procedure that used a cursor leaves it set in the EOFs of a
    /// text `CALL`'s results, whose rows follow as usual.
    CursorResults,
    /// COM_STMT_PREPARE: a prepare-OK followed by parameter and column definitions.
    Prepare,
    /// COM_STMT_FETCH: rows, then EOF/OK.
    Rows,
    /// COM_FIELD_LIST: column definitions, then EOF.
    FieldList,
    /// Everything else that answers: one packet (OK, ERR, EOF or a string).
    Single,
}

/// Where the relay is inside a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    FirstOfResult,
    ColumnDefs { left: u64 },
    EofAfterColumns,
    Rows,
    PrepareOk,
    ParamDefs { left: u64, columns: u64 },
    EofAfterParams { columns: u64 },
    PrepareColumns { left: u64 },
    EofAfterPrepareColumns,
    FieldList,
    Single,
    Done,
}

/// Which side of the relay failed.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("client connection: {0}")]
    Client(std::io::Error),
    #[error("backend connection: {0}")]
    Backend(std::io::Error),
    #[error("backend sent a malformed response")]
    Protocol,
    /// The client closed its connection while the backend was still working on its command
    /// (and had nothing else of it to read): the backend session must end too, as the server
    /// ends the session of a client that vanishes.
    #[error("client closed its connection while its command was running")]
    ClientVanished,
    /// The relay expected more of the response, but the backend session had finished its
    /// command and sent nothing more: the relay misread where the response ends.
    #[error("msgproxy lost track of the server's response (it expected more packets after: {0}); please report this with the statement that caused it")]
    Confused(String),
}

/// How long the backend may stay silent in the middle of a response before the relay asks the
/// server whether the backend session is still working on the command. Silence is normal (a
/// slow query, `SLEEP`, a lock wait); the question costs one small query per interval, and only
/// while a response is open and silent.
pub const STALL_CHECK: Duration = Duration::from_secs(10);

/// After the server says the backend session is idle, how long the relay still waits for the
/// packets that may be on their way before it gives up on the response.
const STALL_GRACE: Duration = Duration::from_secs(2);

/// The most a client may have sent ahead (pipelined commands) while its command runs before the
/// relay stops reading it: reading is only there to notice that the client went away.
const CLIENT_READ_AHEAD: usize = 64 * 1024;

/// How many of a response's examined packets the relay remembers, to describe a response it
/// could not follow.
const TRACE_LEN: usize = 12;

/// A boxed future, for the object-safe [`BackendSessions`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Questions about backend sessions that only another connection to the server can answer.
pub trait BackendSessions: Send + Sync {
    /// Whether backend session `connection_id` is idle (between commands): `None` when that
    /// cannot be told (the server unreachable, the session gone).
    fn is_idle(&self, connection_id: u32) -> BoxFuture<'_, Option<bool>>;
    /// Ends backend session `connection_id` (`KILL CONNECTION`), whatever it waits for.
    fn kill(&self, connection_id: u32) -> BoxFuture<'_, ()>;
}

/// What the relay watches while it waits for the backend mid-response.
#[derive(Clone, Default)]
pub struct BackendWatch {
    /// The backend session's thread id.
    pub connection_id: u32,
    /// Where to ask about it; `None` in set-ups without a second connection to the server.
    pub sessions: Option<Arc<dyn BackendSessions>>,
    /// Silence before asking ([`STALL_CHECK`]; shorter in tests).
    pub stall_check: Duration,
}

impl BackendWatch {
    pub fn new(connection_id: u32, sessions: Option<Arc<dyn BackendSessions>>) -> BackendWatch {
        BackendWatch {
            connection_id,
            sessions,
            stall_check: STALL_CHECK,
        }
    }
}

/// One examined packet, for the log of a response the relay could not follow.
#[derive(Debug, Clone, Copy)]
struct Seen {
    state: State,
    seq: u8,
    len: usize,
    first: Option<u8>,
    status: Option<u16>,
    /// Rows or definitions passed through unexamined before this packet.
    opaque_before: u64,
}

/// Per-session relay state.
pub struct Relay {
    deprecate_eof: bool,
    /// Server status flags from the last OK/EOF packet (transaction state, autocommit, ...).
    pub status: u16,
    /// Sequence id the next packet to the client would carry; used to place an error of the
    /// proxy's own when the backend fails mid-response.
    pub next_seq: u8,
    /// Added (wrapping) to the sequence id of every packet of the response on its way to the
    /// client, and taken off those the client sends back mid-response (LOCAL INFILE). Zero when
    /// the server got the client's own command; else the client's command and the proxy's
    /// statement took different numbers of packets (an `ACK` in one packet rewritten into an
    /// UPDATE of 16 MiB or more, or the reverse), and the server numbers its answer after its
    /// packets while the client expects it after its own.
    pub seq_shift: u8,
    /// Whether the last response ended in an error.
    pub failed: bool,
    /// Affected rows of the last response, summed over its OK results (the ack counters).
    pub affected_rows: u64,
    /// The statement id of the last response, when it was a `COM_STMT_PREPARE` answered OK.
    pub prepared_statement: Option<u32>,
    /// The backend session and how to ask about it while a response is silent.
    pub watch: BackendWatch,
    /// The last examined packets of the current response (see [`TRACE_LEN`]).
    trace: VecDeque<Seen>,
    /// Rows and definitions passed through since the last examined packet.
    opaque_count: u64,
}

impl Relay {
    pub fn new(
        session_capabilities: CapabilityFlags,
        initial_status: u16,
        watch: BackendWatch,
    ) -> Relay {
        Relay {
            deprecate_eof: session_capabilities.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF),
            status: initial_status,
            next_seq: 1,
            seq_shift: 0,
            failed: false,
            affected_rows: 0,
            prepared_statement: None,
            watch,
            trace: VecDeque::with_capacity(TRACE_LEN),
            opaque_count: 0,
        }
    }

    /// Whether the session is inside a transaction, as the server last reported.
    pub fn in_transaction(&self) -> bool {
        self.status & StatusFlags::SERVER_STATUS_IN_TRANS.bits() != 0
    }

    /// Whether the session has `NO_BACKSLASH_ESCAPES` in its `sql_mode`, as the server last reported
    /// (it sets this flag in every OK/EOF while the mode is on).
    pub fn no_backslash_escapes(&self) -> bool {
        self.status & StatusFlags::SERVER_STATUS_NO_BACKSLASH_ESCAPES.bits() != 0
    }

    /// Forwards one complete response from `backend` to `client`.
    pub async fn forward_response<C, B>(
        &mut self,
        kind: ResponseKind,
        client: &mut PacketReader<C>,
        backend: &mut PacketReader<B>,
    ) -> Result<(), RelayError>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        self.forward(kind, client, backend, false).await.map(|_| ())
    }

    /// Like [`Relay::forward_response`], but the packets that end the response are returned
    /// instead of written, so the caller can act before the client sees the answer (the engine
    /// reloads after DDL before the client may use the table it made).
    pub async fn forward_response_holding_end<C, B>(
        &mut self,
        kind: ResponseKind,
        client: &mut PacketReader<C>,
        backend: &mut PacketReader<B>,
    ) -> Result<BytesMut, RelayError>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        self.forward(kind, client, backend, true).await
    }

    async fn forward<C, B>(
        &mut self,
        kind: ResponseKind,
        client: &mut PacketReader<C>,
        backend: &mut PacketReader<B>,
        hold_end: bool,
    ) -> Result<BytesMut, RelayError>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        let cursor = kind == ResponseKind::CursorResults;
        let mut state = match kind {
            ResponseKind::Results | ResponseKind::CursorResults => State::FirstOfResult,
            ResponseKind::Prepare => State::PrepareOk,
            ResponseKind::Rows => State::Rows,
            ResponseKind::FieldList => State::FieldList,
            ResponseKind::Single => State::Single,
        };
        self.failed = false;
        self.affected_rows = 0;
        self.prepared_statement = None;
        self.trace.clear();
        self.opaque_count = 0;
        // Bytes ready for the client, written before any wait on the backend.
        let mut pending = BytesMut::new();
        // Bytes of the current packet still to pass through unexamined.
        let mut skip = 0usize;
        // Whether the previous physical packet was a full 16 MiB one, continued by this one.
        let mut continuation = false;

        loop {
            if skip > 0 {
                if backend.buffered().is_empty() {
                    flush(client, &mut pending).await?;
                    self.wait_for_backend(client, backend, 1, state).await?;
                }
                let chunk = backend.take_buffered(skip);
                skip -= chunk.len();
                pending.unsplit(chunk);
                continue;
            }
            if state == State::Done {
                if hold_end {
                    return Ok(pending);
                }
                flush(client, &mut pending).await?;
                return Ok(pending);
            }
            if backend.buffered().len() < HEADER_LEN + 1 {
                flush(client, &mut pending).await?;
                self.wait_for_backend(client, backend, HEADER_LEN, state)
                    .await?;
                let (len, _) = parse_header(backend.buffered());
                if len > 0 {
                    self.wait_for_backend(client, backend, HEADER_LEN + 1, state)
                        .await?;
                }
            }
            let (len, mut seq) = parse_header(backend.buffered());
            if self.seq_shift != 0 {
                seq = seq.wrapping_add(self.seq_shift);
                backend.set_buffered_seq(seq);
            }
            self.next_seq = seq.wrapping_add(1);
            let was_continuation = continuation;
            continuation = len == MAX_PAYLOAD;
            if was_continuation {
                skip = HEADER_LEN + len;
                continue;
            }
            let first = backend.buffered().get(HEADER_LEN).copied();
            if !needs_whole_packet(state, first, len) {
                // A row or definition: count it and let it through.
                self.opaque_count += 1;
                state = self.after_opaque_packet(state);
                skip = HEADER_LEN + len;
                continue;
            }
            if backend.buffered().len() < HEADER_LEN + len {
                flush(client, &mut pending).await?;
                self.wait_for_backend(client, backend, HEADER_LEN + len, state)
                    .await?;
            }
            let raw = backend.take_buffered(HEADER_LEN + len);
            self.remember(state, seq, &raw[HEADER_LEN..]);
            let next = self.after_examined_packet(state, &raw[HEADER_LEN..], cursor)?;
            pending.unsplit(raw);
            if state == State::FirstOfResult && first == Some(wire::LOCAL_INFILE_HEADER) {
                // The server asked for a local file: pass the request on, then the file's packets
                // from the client up to the empty one that ends it; the server then answers.
                flush(client, &mut pending).await?;
                upload_local_file(client, backend, self.seq_shift).await?;
            }
            state = next;
        }
    }

    /// Waits until at least `n` bytes of the backend's response are buffered. Meanwhile watches
    /// the client: a client that closes its connection mid-command (with nothing sent ahead)
    /// ends the wait with [`RelayError::ClientVanished`]. And after [`BackendWatch::stall_check`]
    /// of silence, asks the server whether the backend session is still working on the command:
    /// if it has finished and nothing more arrives, the relay has misread the response, and says
    /// so ([`RelayError::Confused`]) instead of waiting for ever.
    async fn wait_for_backend<C, B>(
        &mut self,
        client: &mut PacketReader<C>,
        backend: &mut PacketReader<B>,
        n: usize,
        state: State,
    ) -> Result<(), RelayError>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + Unpin,
    {
        // Whether the client may still be read: it stops once it has sent something ahead
        // (pipelined commands, or a command and then its close, which the server would see as
        // data, not as a vanished client) or past the read-ahead bound.
        let mut watch_client = client.buffered().is_empty();
        let mut silent_since = tokio::time::Instant::now();
        let mut idle_seen = false;
        while backend.buffered().len() < n {
            let check_at = silent_since
                + if idle_seen {
                    STALL_GRACE
                } else {
                    self.watch.stall_check
                };
            let probing = self.watch.sessions.is_some();
            tokio::select! {
                // The backend first: when its bytes are there, nothing else is even polled.
                biased;
                read = backend.fill() => match read {
                    Ok(0) => {
                        return Err(RelayError::Backend(std::io::ErrorKind::UnexpectedEof.into()))
                    }
                    Ok(_) => {
                        silent_since = tokio::time::Instant::now();
                        idle_seen = false;
                    }
                    Err(e) => return Err(RelayError::Backend(e)),
                },
                read = client.fill(), if watch_client => match read {
                    Ok(0) | Err(_) if client.buffered().is_empty() => {
                        return Err(RelayError::ClientVanished)
                    }
                    Ok(0) | Err(_) => watch_client = false,
                    Ok(_) => watch_client = client.buffered().len() < CLIENT_READ_AHEAD,
                },
                _ = tokio::time::sleep_until(check_at), if probing => {
                    let Some(sessions) = self.watch.sessions.clone() else { continue };
                    match sessions.is_idle(self.watch.connection_id).await {
                        Some(true) if idle_seen => {
                            let trace = self.describe_trace(state, backend.buffered());
                            tracing::error!(
                                connection = self.watch.connection_id,
                                "the relay expected more of a response the server has finished; packets: {trace}"
                            );
                            return Err(RelayError::Confused(trace));
                        }
                        Some(true) => idle_seen = true,
                        _ => idle_seen = false,
                    }
                    silent_since = tokio::time::Instant::now();
                }
            }
        }
        Ok(())
    }

    /// Notes an examined packet for [`Relay::describe_trace`].
    fn remember(&mut self, state: State, seq: u8, payload: &[u8]) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        self.trace.push_back(Seen {
            state,
            seq,
            len: payload.len(),
            first: payload.first().copied(),
            status: wire::status_flags(payload),
            opaque_before: std::mem::take(&mut self.opaque_count),
        });
    }

    /// The packets of the current response the relay examined last, and where it is now: what a
    /// log needs to show why the relay expected more. Never the packets' contents (they may hold
    /// data), only their shape.
    fn describe_trace(&self, state: State, unread: &[u8]) -> String {
        let mut out = String::new();
        for seen in &self.trace {
            if seen.opaque_before > 0 {
                out.push_str(&format!(
                    "{} row/definition packet(s); ",
                    seen.opaque_before
                ));
            }
            out.push_str(&format!(
                "[seq {} len {} first {} status {}] in {:?}; ",
                seen.seq,
                seen.len,
                seen.first.map_or("-".to_string(), |b| format!("{b:#04x}")),
                seen.status.map_or("-".to_string(), |s| format!("{s:#06x}")),
                seen.state,
            ));
        }
        if self.opaque_count > 0 {
            out.push_str(&format!("{} row/definition packet(s); ", self.opaque_count));
        }
        out.push_str(&format!(
            "now in {state:?} with {} byte(s) unread",
            unread.len()
        ));
        out
    }

    /// The state after a packet that was passed through without being examined.
    fn after_opaque_packet(&self, state: State) -> State {
        match state {
            State::ColumnDefs { left } if left > 1 => State::ColumnDefs { left: left - 1 },
            State::ColumnDefs { .. } if self.deprecate_eof => State::Rows,
            State::ColumnDefs { .. } => State::EofAfterColumns,
            State::ParamDefs { left, columns } if left > 1 => State::ParamDefs {
                left: left - 1,
                columns,
            },
            State::ParamDefs { columns, .. } if !self.deprecate_eof => {
                State::EofAfterParams { columns }
            }
            State::ParamDefs { columns, .. } => prepare_columns(columns),
            State::PrepareColumns { left } if left > 1 => State::PrepareColumns { left: left - 1 },
            State::PrepareColumns { .. } if self.deprecate_eof => State::Done,
            State::PrepareColumns { .. } => State::EofAfterPrepareColumns,
            other => other, // Rows and FieldList entries.
        }
    }

    /// The state after a packet the relay had to read whole.
    fn after_examined_packet(
        &mut self,
        state: State,
        payload: &[u8],
        cursor: bool,
    ) -> Result<State, RelayError> {
        let first = payload.first().copied();
        if first == Some(wire::ERR_HEADER) {
            // An error ends the whole response, including any further results.
            self.failed = true;
            return Ok(State::Done);
        }
        Ok(match state {
            State::FirstOfResult => match first {
                Some(wire::OK_HEADER) => {
                    let mut r = Reader::new(payload.get(1..).unwrap_or_default());
                    let affected = r.lenenc_int().unwrap_or(0);
                    self.affected_rows = self.affected_rows.saturating_add(affected);
                    self.end_of_result(payload)
                }
                Some(wire::LOCAL_INFILE_HEADER) => State::FirstOfResult,
                _ => {
                    let columns = Reader::new(payload)
                        .lenenc_int()
                        .ok_or(RelayError::Protocol)?;
                    if columns == 0 {
                        return Err(RelayError::Protocol);
                    }
                    State::ColumnDefs { left: columns }
                }
            },
            State::EofAfterColumns => {
                let status = wire::status_flags(payload).ok_or(RelayError::Protocol)?;
                self.status = status;
                if cursor && opened_cursor(status) {
                    // COM_STMT_EXECUTE that opened a cursor: rows come later, through
                    // COM_STMT_FETCH.
                    State::Done
                } else {
                    State::Rows
                }
            }
            State::Rows => self.end_of_result(payload),
            State::PrepareOk => {
                let mut r = Reader::new(payload);
                r.u8();
                self.prepared_statement = Some(r.u32().ok_or(RelayError::Protocol)?);
                let columns = r.u16().ok_or(RelayError::Protocol)? as u64;
                let params = r.u16().ok_or(RelayError::Protocol)? as u64;
                if params > 0 {
                    State::ParamDefs {
                        left: params,
                        columns,
                    }
                } else {
                    prepare_columns(columns)
                }
            }
            State::EofAfterParams { columns } => prepare_columns(columns),
            State::EofAfterPrepareColumns | State::FieldList | State::Single => {
                if let Some(status) = wire::status_flags(payload) {
                    self.status = status;
                }
                State::Done
            }
            State::ColumnDefs { .. }
            | State::ParamDefs { .. }
            | State::PrepareColumns { .. }
            | State::Done => return Err(RelayError::Protocol),
        })
    }

    /// An OK or EOF that ends one result: more results may follow.
    fn end_of_result(&mut self, payload: &[u8]) -> State {
        match wire::status_flags(payload) {
            Some(status) => {
                self.status = status;
                if status & StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits() != 0 {
                    State::FirstOfResult
                } else {
                    State::Done
                }
            }
            None => State::Done,
        }
    }
}

/// Whether the EOF after a cursor-requesting execute's column definitions says the server opened
/// the cursor. SERVER_STATUS_CURSOR_EXISTS alone does not: a prepared `CALL` (for which the
/// server opens no cursor, whatever the client asked) of a procedure that used a cursor leaves
/// the flag set in its results, whose rows then follow. Those results carry
/// SERVER_MORE_RESULTS_EXISTS (the CALL's own OK comes last); a cursor's result is the only one.
fn opened_cursor(status: u16) -> bool {
    status & StatusFlags::SERVER_STATUS_CURSOR_EXISTS.bits() != 0
        && status & StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits() == 0
}

fn prepare_columns(columns: u64) -> State {
    if columns > 0 {
        State::PrepareColumns { left: columns }
    } else {
        State::Done
    }
}

/// Whether the relay must see the whole packet: everything that may end a result or the
/// response, or that says what follows. Rows and column definitions are passed through.
fn needs_whole_packet(state: State, first: Option<u8>, len: usize) -> bool {
    match state {
        State::ColumnDefs { .. } | State::ParamDefs { .. } | State::PrepareColumns { .. } => false,
        // In a result set, only an ERR or a short packet starting with 0xFE (EOF, or the OK that
        // replaces it) ends it. A row can start with 0xFE only as the 8-byte length prefix of a
        // string of 16 MiB or more, which makes its first physical packet exactly MAX_PAYLOAD long.
        State::Rows | State::FieldList => {
            first == Some(wire::ERR_HEADER)
                || (first == Some(wire::EOF_HEADER) && len < MAX_PAYLOAD)
        }
        _ => true,
    }
}

async fn flush<C: AsyncWrite + Unpin>(
    client: &mut PacketReader<C>,
    pending: &mut BytesMut,
) -> Result<(), RelayError> {
    if pending.is_empty() {
        return Ok(());
    }
    let w = client.get_mut();
    w.write_all(pending).await.map_err(RelayError::Client)?;
    w.flush().await.map_err(RelayError::Client)?;
    // Dropping our handle lets the backend buffer reuse this memory.
    *pending = BytesMut::new();
    Ok(())
}

/// Streams a LOCAL INFILE upload from the client to the backend: physical packets up to and
/// including the empty packet that ends the file, renumbered back by `seq_shift` (see
/// [`Relay::seq_shift`]).
async fn upload_local_file<C, B>(
    client: &mut PacketReader<C>,
    backend: &mut PacketReader<B>,
    seq_shift: u8,
) -> Result<(), RelayError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut continuation = false;
    loop {
        let mut raw = client.next_raw_packet().await.map_err(RelayError::Client)?;
        let (len, seq) = parse_header(&raw);
        if let Some(byte) = raw.get_mut(HEADER_LEN - 1) {
            *byte = seq.wrapping_sub(seq_shift);
        }
        backend
            .get_mut()
            .write_all(&raw)
            .await
            .map_err(RelayError::Backend)?;
        let ends = len == 0 && !continuation;
        continuation = len == MAX_PAYLOAD;
        if ends {
            return backend.get_mut().flush().await.map_err(RelayError::Backend);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::packet::encode_packet;
    use crate::protocol::wire::{ok_packet, put_lenenc_bytes};
    use tokio::io::AsyncReadExt;

    const MORE: u16 = 0x0008;

    /// Builds a backend response from payloads, numbering packets from 1.
    fn response(payloads: &[Vec<u8>]) -> BytesMut {
        let mut out = BytesMut::new();
        let mut seq = 1u8;
        for p in payloads {
            seq = encode_packet(&mut out, seq, p);
        }
        out
    }

    fn column_def(name: &str) -> Vec<u8> {
        let mut out = BytesMut::new();
        for s in ["def", "test", "t", "t", name, name] {
            put_lenenc_bytes(&mut out, s.as_bytes());
        }
        out.extend_from_slice(&[0x0C, 0x21, 0, 11, 0, 0, 0, 3, 0, 0, 0, 0, 0]);
        out.to_vec()
    }

    fn text_row(values: &[&[u8]]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for v in values {
            put_lenenc_bytes(&mut out, v);
        }
        out.to_vec()
    }

    fn eof(status: u16) -> Vec<u8> {
        let mut v = vec![0xFE, 0, 0];
        v.extend_from_slice(&status.to_le_bytes());
        v
    }

    fn ok_eof(status: u16) -> Vec<u8> {
        let mut v = ok_packet(0, 0, status, 0).to_vec();
        v[0] = 0xFE;
        v
    }

    /// Runs the relay over `backend_bytes` (with `trailing` bytes after the response that must
    /// not be consumed) and returns what the client received.
    async fn relay(
        caps: CapabilityFlags,
        kind: ResponseKind,
        backend_bytes: &[u8],
        trailing: &[u8],
    ) -> (Vec<u8>, Relay, Vec<u8>) {
        let mut all = backend_bytes.to_vec();
        all.extend_from_slice(trailing);
        let (mut backend_peer, backend_side) = tokio::io::duplex(1 << 16);
        let (client_side, mut client_peer) = tokio::io::duplex(64 << 20);
        let writer = tokio::spawn(async move {
            backend_peer.write_all(&all).await.unwrap();
            backend_peer
        });
        let mut backend = PacketReader::new(backend_side);
        let mut client = PacketReader::new(client_side);
        let mut relay = Relay::new(caps, 0, BackendWatch::default());
        relay
            .forward_response(kind, &mut client, &mut backend)
            .await
            .unwrap();
        drop(client);
        let mut got = Vec::new();
        client_peer.read_to_end(&mut got).await.unwrap();
        let _peer = writer.await.unwrap();
        // Whatever the relay did not consume stays for the next command.
        let mut rest = backend.take_buffered(usize::MAX).to_vec();
        if rest.len() < trailing.len() {
            let mut more = vec![0; trailing.len() - rest.len()];
            backend.get_mut().read_exact(&mut more).await.unwrap();
            rest.extend(more);
        }
        (got, relay, rest)
    }

    #[tokio::test]
    async fn classic_result_set_ends_at_second_eof() {
        let bytes = response(&[
            vec![2],
            column_def("a"),
            column_def("b"),
            eof(0),
            text_row(&[b"1", b"x"]),
            eof(0x0002),
        ]);
        let (got, relay, rest) = relay_default(&bytes).await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(relay.status, 0x0002);
        assert_eq!(rest, b"next");
    }

    async fn relay_default(bytes: &[u8]) -> (Vec<u8>, Relay, Vec<u8>) {
        relay(
            CapabilityFlags::empty(),
            ResponseKind::Results,
            bytes,
            b"next",
        )
        .await
    }

    #[tokio::test]
    async fn deprecate_eof_result_set_and_multi_results() {
        let bytes = response(&[
            vec![1],
            column_def("a"),
            text_row(&[b"1"]),
            ok_eof(MORE),
            ok_packet(1, 5, MORE | 0x0001, 0).to_vec(),
            vec![1],
            column_def("b"),
            ok_eof(0x0001),
        ]);
        let (got, relay, rest) = relay(
            CapabilityFlags::CLIENT_DEPRECATE_EOF,
            ResponseKind::Results,
            &bytes,
            b"zz",
        )
        .await;
        assert_eq!(got, bytes.to_vec());
        assert!(relay.in_transaction());
        assert_eq!(rest, b"zz");
    }

    #[tokio::test]
    async fn error_in_the_middle_of_rows_ends_the_response() {
        let err = crate::protocol::wire::ErrorPacket::new(
            1317,
            "70100",
            "Query execution was interrupted",
        )
        .encode(true)
        .to_vec();
        let bytes = response(&[vec![1], column_def("a"), eof(0), text_row(&[b"1"]), err]);
        let (got, _, rest) = relay_default(&bytes).await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(rest, b"next");
    }

    #[tokio::test]
    async fn prepare_response_with_params_and_columns() {
        let mut prep_ok = vec![0, 1, 0, 0, 0];
        prep_ok.extend_from_slice(&1u16.to_le_bytes()); // columns
        prep_ok.extend_from_slice(&2u16.to_le_bytes()); // params
        prep_ok.extend_from_slice(&[0, 0, 0]);
        let bytes = response(&[
            prep_ok.clone(),
            column_def("?"),
            column_def("?"),
            eof(2),
            column_def("a"),
            eof(2),
        ]);
        let (got, _, rest) = relay(
            CapabilityFlags::empty(),
            ResponseKind::Prepare,
            &bytes,
            b"x",
        )
        .await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(rest, b"x");
        let bytes = response(&[prep_ok, column_def("?"), column_def("?"), column_def("a")]);
        let (got, _, rest) = relay(
            CapabilityFlags::CLIENT_DEPRECATE_EOF,
            ResponseKind::Prepare,
            &bytes,
            b"x",
        )
        .await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(rest, b"x");
    }

    #[tokio::test]
    async fn row_of_more_than_16_mib_streams_through() {
        let big = vec![b'x'; MAX_PAYLOAD + 100];
        let row = text_row(&[&big]);
        assert_eq!(
            row[0], 0xFE,
            "a 16 MiB string's length prefix starts with 0xFE"
        );
        let bytes = response(&[vec![1], column_def("a"), eof(0), row, eof(0)]);
        let (got, _, rest) = relay_default(&bytes).await;
        assert_eq!(got.len(), bytes.len());
        assert!(got == bytes.to_vec());
        assert_eq!(rest, b"next");
    }

    #[tokio::test]
    async fn cursor_execute_ends_after_column_definitions() {
        let bytes = response(&[vec![1], column_def("a"), eof(0x0040)]);
        let (got, _, rest) = relay(
            CapabilityFlags::empty(),
            ResponseKind::CursorResults,
            &bytes,
            b"next",
        )
        .await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(rest, b"next");
    }

    #[tokio::test]
    async fn cursor_asked_for_but_not_opened_sends_its_rows() {
        // The server opens no cursor for some statements (a CALL, SHOW ...): rows follow.
        let bytes = response(&[
            vec![1],
            column_def("a"),
            eof(0x0002),
            text_row(&[b"1"]),
            eof(0x0002),
        ]);
        let (got, _, rest) = relay(
            CapabilityFlags::empty(),
            ResponseKind::CursorResults,
            &bytes,
            b"next",
        )
        .await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(rest, b"next");
    }

    /// A text `CALL` of a procedure that used a cursor: the server leaves
    /// SERVER_STATUS_CURSOR_EXISTS set in the EOFs of its results (MariaDB sends 0x00e9); the
    /// rows and the final OK still follow (this hung: main.sp-anchor-row-type-cursor).
    #[tokio::test]
    async fn cursor_flag_in_a_text_result_does_not_end_it() {
        let bytes = response(&[
            vec![1],
            column_def("c"),
            eof(0x00e9),
            text_row(&[b"c"]),
            eof(0x00e9),
            ok_packet(0, 0, 0x0002, 0).to_vec(),
        ]);
        let (got, relay, rest) = relay_default(&bytes).await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(relay.status, 0x0002);
        assert_eq!(rest, b"next");
    }

    /// The same through a prepared CALL that asked for a cursor: the server opens none for a
    /// CALL, and the leaked flag comes with SERVER_MORE_RESULTS_EXISTS.
    #[tokio::test]
    async fn cursor_flag_in_a_prepared_calls_result_does_not_end_it() {
        let bytes = response(&[
            vec![1],
            column_def("c"),
            eof(0x00e9),
            text_row(&[b"c"]),
            eof(0x00e9),
            ok_packet(0, 0, 0x0002, 0).to_vec(),
        ]);
        let (got, relay, rest) = relay(
            CapabilityFlags::empty(),
            ResponseKind::CursorResults,
            &bytes,
            b"next",
        )
        .await;
        assert_eq!(got, bytes.to_vec());
        assert_eq!(relay.status, 0x0002);
        assert_eq!(rest, b"next");
    }

    /// A fake of the server's answers about one session, for the stall check's timing.
    struct AlwaysIdle;

    impl BackendSessions for AlwaysIdle {
        fn is_idle(&self, _: u32) -> BoxFuture<'_, Option<bool>> {
            Box::pin(async { Some(true) })
        }
        fn kill(&self, _: u32) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_the_relay_cannot_end_is_reported_not_waited_for() {
        // Column definitions promised, one sent, and then nothing: the server (says the
        // fake) is idle, so the relay has misread the response.
        let bytes = response(&[vec![2], column_def("a")]);
        let (mut peer, side) = tokio::io::duplex(1 << 16);
        peer.write_all(&bytes).await.unwrap();
        let (client_side, _client_peer) = tokio::io::duplex(1 << 16);
        let mut backend = PacketReader::new(side);
        let mut client = PacketReader::new(client_side);
        let watch = BackendWatch {
            connection_id: 7,
            sessions: Some(Arc::new(AlwaysIdle)),
            stall_check: Duration::from_secs(1),
        };
        let err = Relay::new(CapabilityFlags::empty(), 0, watch)
            .forward_response(ResponseKind::Results, &mut client, &mut backend)
            .await
            .unwrap_err();
        match err {
            RelayError::Confused(trace) => {
                assert!(trace.contains("ColumnDefs"), "{trace}");
                assert!(trace.contains("first 0x02"), "{trace}");
            }
            other => panic!("expected Confused, got {other:?}"),
        }
        drop(peer);
    }

    #[tokio::test]
    async fn a_client_that_vanishes_mid_command_ends_the_wait() {
        let (_peer, side) = tokio::io::duplex(1 << 16);
        let (client_side, client_peer) = tokio::io::duplex(1 << 16);
        drop(client_peer);
        let mut backend = PacketReader::new(side);
        let mut client = PacketReader::new(client_side);
        let err = Relay::new(CapabilityFlags::empty(), 0, BackendWatch::default())
            .forward_response(ResponseKind::Results, &mut client, &mut backend)
            .await
            .unwrap_err();
        assert!(matches!(err, RelayError::ClientVanished), "{err:?}");
    }

    #[tokio::test]
    async fn a_client_that_sent_ahead_and_closed_still_gets_its_command_run() {
        // The server would see data waiting, not a vanished client: the command finishes.
        let (mut peer, side) = tokio::io::duplex(1 << 16);
        let (client_side, mut client_peer) = tokio::io::duplex(1 << 16);
        client_peer
            .write_all(b"\x01\x00\x00\x00\x01")
            .await
            .unwrap();
        client_peer.shutdown().await.unwrap();
        let mut backend = PacketReader::new(side);
        let mut client = PacketReader::new(client_side);
        let answer = response(&[ok_packet(0, 0, 2, 0).to_vec()]);
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            peer.write_all(&answer).await.unwrap();
            peer
        });
        Relay::new(CapabilityFlags::empty(), 0, BackendWatch::default())
            .forward_response(ResponseKind::Results, &mut client, &mut backend)
            .await
            .unwrap();
        assert_eq!(client.buffered(), b"\x01\x00\x00\x00\x01");
        let _peer = writer.await.unwrap();
    }

    #[tokio::test]
    async fn truncated_backend_response_is_a_backend_error() {
        let bytes = response(&[vec![1], column_def("a")]);
        let (mut peer, side) = tokio::io::duplex(1 << 16);
        peer.write_all(&bytes).await.unwrap();
        drop(peer);
        let (client_side, _client_peer) = tokio::io::duplex(1 << 16);
        let mut backend = PacketReader::new(side);
        let mut client = PacketReader::new(client_side);
        let err = Relay::new(CapabilityFlags::empty(), 0, BackendWatch::default())
            .forward_response(ResponseKind::Results, &mut client, &mut backend)
            .await
            .unwrap_err();
        assert!(matches!(err, RelayError::Backend(_)), "{err:?}");
    }
}
