//! One turn of the command loop: read the client's command, plan it (`dispatch`), carry the
//! plan out, and record what the command changed (`tracker`, and the message engine's side in
//! `table_writes`). Also the reading of a command's packets that continue its first (16 MiB and
//! more) and their sending on.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::dispatch::{self, is_continued, Plan, Planned, Planning, Record, Send, JOIN_LIMIT};
use super::session::{Session, SessionEnd};
use crate::protocol::commands::COM_QUERY;
use crate::protocol::packet::{parse_header, write_packet, MAX_PAYLOAD};
use crate::protocol::wire::ErrorPacket;

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

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// Reads, plans, executes and records one command; an `Err` ends the session.
    pub(super) async fn serve_command(&mut self) -> Result<(), SessionEnd> {
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
                Joined::TooLong { packets } => return self.serve_long_statement(packets).await,
            }
        } else {
            (first, None)
        };
        let payload: &[u8] = match &joined {
            Some(p) => p,
            None => &raw[4..],
        };
        let planned = dispatch::plan(&raw, payload, &self.planning());
        self.execute(&[], &raw, planned).await
    }

    /// A statement longer than [`JOIN_LIMIT`]: the proxy never holds it whole. It is planned by
    /// its first 16 MiB; anything for the server (a bulk INSERT, say) is streamed on as it
    /// arrives and its answer relayed, exactly as a direct connection would see it.
    async fn serve_long_statement(
        &mut self,
        packets: Vec<bytes::BytesMut>,
    ) -> Result<(), SessionEnd> {
        let Some((last, before)) = packets.split_last() else {
            return Ok(());
        };
        let planned = dispatch::plan_long(&packets[0][5..]);
        // The last packet read is a full one: sending it streams the rest of the statement.
        self.execute(before, last, planned).await
    }

    /// What of the session the dispatcher reads.
    fn planning(&self) -> Planning<'_> {
        Planning {
            quoting: self.quoting(),
            pooled: self.ticket.is_some(),
            socket_literal: &self.ctx.socket_literal,
        }
    }

    /// Carries out a plan for the command whose physical packets are `before` (already read,
    /// of a long statement) and `raw`.
    async fn execute(
        &mut self,
        before: &[bytes::BytesMut],
        raw: &[u8],
        planned: Planned<'_>,
    ) -> Result<(), SessionEnd> {
        if let Some(keyword) = planned.counted {
            self.ctx.metrics.statement(keyword);
        }
        if planned.unresettable {
            self.tracker.mark_unresettable();
        }
        let plan = match planned.plan {
            Plan::Virtual { statement, relayed } => {
                if self.virtual_runs_here(statement).await? {
                    return self.serve_virtual(statement).await;
                }
                // In a version-gated comment the server skips: the server answers it as the
                // empty statement it is.
                *relayed
            }
            plan => plan,
        };
        match plan {
            Plan::Quit => {
                // With the pool on, the connection may outlive the client (`release_backend`).
                if self.ticket.is_none() {
                    let _ = self.backend.conn.get_mut().write_all(raw).await;
                }
                Err(SessionEnd::Quit)
            }
            Plan::Refuse(err) => self.reply_error(err).await,
            Plan::RefuseLong(err) => self.refuse_long_command(raw, err).await,
            Plan::ChangeUser => self.change_user(&raw[4..]).await,
            Plan::SendOnly { record } => {
                self.send_to_backend_after(before, raw).await?;
                self.record(record).await;
                Ok(())
            }
            Plan::Relay {
                send,
                kind,
                hold_end,
                record,
            } => {
                match send {
                    Send::AsSent => self.send_to_backend_after(before, raw).await?,
                    Send::Statement(sql) => self.send_statement(&sql).await?,
                    Send::Packet(packet) => self.send_to_backend_after(before, &packet).await?,
                }
                if hold_end {
                    let end = self.forward_results_holding_end().await?;
                    self.record(record).await;
                    return self.write_held_end(&end).await;
                }
                self.relay
                    .forward_response(kind, &mut self.client, &mut self.backend.conn)
                    .await?;
                self.record(record).await;
                Ok(())
            }
            // Replaced above by its relayed plan, which the dispatcher never makes virtual; were
            // it, answering the statement is still an answer.
            Plan::Virtual { statement, .. } => self.serve_virtual(statement).await,
        }
    }

    /// After the server answered a relayed command: what it changed, in the tracker and for
    /// the message engine.
    async fn record(&mut self, record: Record<'_>) {
        let failed = self.relay.failed;
        match record {
            Record::Nothing => {}
            Record::Query {
                statement,
                classification,
            } => {
                self.tracker.after_query(statement, classification, failed);
                self.after_relayed_statement(statement, classification)
                    .await;
            }
            Record::LongQuery {
                head,
                classification,
            } => {
                self.tracker.after_long_query(classification.keyword, head);
                self.after_relayed_statement(head, classification).await;
            }
            Record::InitDb { name } => self.tracker.after_init_db(name, failed),
            Record::ResetConnection => self.tracker.after_reset_connection(),
            Record::SetOption { option } => self.tracker.after_set_option(option, failed),
            Record::Prepare {
                sql,
                classification,
            } => {
                let id = self.relay.prepared_statement;
                self.tracker.after_prepare(sql, classification.keyword, id);
                self.after_prepared(sql, classification.keyword);
            }
            Record::Execute {
                statement,
                payload,
                kills,
            } => {
                // The server accepted the KILL: a stream on that connection through this proxy
                // ends, as after a text `KILL QUERY`.
                if let Some(connection) = self
                    .tracker
                    .after_execute(statement, payload, kills, failed)
                {
                    self.ctx.streams.interrupt(connection);
                }
                self.after_executed_prepared(statement);
            }
            Record::Close { statement } => self.tracker.after_close(statement),
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

    /// Sends a command to the backend: the physical packets `before` (read already: the head of a
    /// long statement), `raw`, and, for a command of 16 MiB or more, the physical packets that
    /// continue it, streamed as they arrive.
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
}
