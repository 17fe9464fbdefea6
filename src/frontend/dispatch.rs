//! The command loop's decisions: from a client command (its packet and, for a statement, its
//! classification) to a [`Plan`] — what goes to the backend, how its answer is relayed, and what
//! the session records afterwards ([`Record`], for `tracker`). Planning reads no socket and no
//! session state beyond [`Planning`]; `execute` carries the plan out.

use bytes::BytesMut;

use crate::protocol::commands::*;
use crate::protocol::packet::{parse_header, MAX_PAYLOAD};
use crate::protocol::wire::ErrorPacket;
use crate::relay::ResponseKind;
use crate::sql::{self, Action, Classification, Keyword, Quoting};

/// The most of one statement (COM_QUERY) the proxy joins in memory to read it whole: what
/// msgproxy answers itself (STREAM, ACK) must fit; anything longer is streamed to the server
/// without being held (so memory per session stays bounded whatever a client sends).
pub const JOIN_LIMIT: usize = 2 * MAX_PAYLOAD;

/// Whether a physical packet (header included) is continued by the next one: its payload is
/// exactly [`MAX_PAYLOAD`]. (A command joined by `execute`'s `join_continuation` is re-framed,
/// longer than that, and complete.)
pub fn is_continued(raw: &[u8]) -> bool {
    raw.len() == 4 + MAX_PAYLOAD
}

/// What of the session a plan depends on.
pub struct Planning<'a> {
    /// How the session's server reads string literals now.
    pub quoting: Quoting,
    /// Whether the backend connection may go back to the warm pool (then statements whose
    /// effects a reset does not undo are noted).
    pub pooled: bool,
    /// What `@@socket` reads as through the proxy.
    pub socket_literal: &'a [u8],
}

/// A command planned, with what is noted before it runs.
#[derive(Debug)]
pub struct Planned<'a> {
    pub plan: Plan<'a>,
    /// The statement's first keyword, for the statement counters (COM_QUERY only).
    pub counted: Option<Keyword>,
    /// The command may leave the session in a state no reset undoes.
    pub unresettable: bool,
}

/// How one command is answered.
#[derive(Debug)]
pub enum Plan<'a> {
    /// COM_QUIT: the session ends.
    Quit,
    /// An error of the proxy's own, after the client's last packet of the command.
    Refuse(ErrorPacket),
    /// An error of the proxy's own for a command that may continue in more 16 MiB packets: they
    /// are read and dropped first.
    RefuseLong(ErrorPacket),
    /// A statement msgproxy answers itself (`messages`, `event_streams`, `work_queue`) — unless
    /// it is inside a version-gated comment the server would skip: then `relayed`.
    Virtual {
        statement: &'a [u8],
        relayed: Box<Plan<'a>>,
    },
    /// To the backend, its answer relayed.
    Relay {
        send: Send,
        kind: ResponseKind,
        /// The end of the answer is held back until the proxy has recorded the command: the
        /// engine reloads after DDL, and counts an acking UPDATE, before the client's OK.
        hold_end: bool,
        record: Record<'a>,
    },
    /// To the backend; the server does not answer (COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA).
    SendOnly { record: Record<'a> },
    /// COM_CHANGE_USER (`change_user`).
    ChangeUser,
}

/// What goes to the backend for a relayed command.
#[derive(Debug)]
pub enum Send {
    /// The client's packets, as they came.
    AsSent,
    /// A statement of the proxy's making, as a COM_QUERY of its own (the `@@socket` rewrite).
    Statement(Vec<u8>),
    /// The client's one packet, rewritten (a COM_STMT_PREPARE with the `@@socket` rewrite).
    Packet(BytesMut),
}

/// What the session records once the server has answered a relayed command.
#[derive(Debug)]
pub enum Record<'a> {
    Nothing,
    /// A COM_QUERY: `statement` decides (the one inside a `SET STATEMENT ... FOR`).
    Query {
        statement: &'a [u8],
        classification: Classification,
    },
    /// A statement too long to hold, of which only `head` was seen.
    LongQuery {
        head: &'a [u8],
        classification: Classification,
    },
    InitDb {
        name: &'a [u8],
    },
    ResetConnection,
    SetOption {
        option: Option<&'a [u8]>,
    },
    Prepare {
        sql: &'a [u8],
        classification: Classification,
    },
    Execute {
        statement: Option<u32>,
        payload: &'a [u8],
        /// COM_STMT_EXECUTE, not the bulk form: a prepared `KILL QUERY` is followed.
        kills: bool,
    },
    Close {
        statement: Option<u32>,
    },
}

impl Plan<'_> {
    fn relay(kind: ResponseKind) -> Self {
        Plan::Relay {
            send: Send::AsSent,
            kind,
            hold_end: false,
            record: Record::Nothing,
        }
    }
}

impl<'a> Planned<'a> {
    fn plain(plan: Plan<'a>) -> Self {
        Planned {
            plan,
            counted: None,
            unresettable: false,
        }
    }
}

/// Plans a whole command: `raw` its packet (header included; re-framed when joined from several),
/// `payload` its payload, command byte first.
pub fn plan<'a>(raw: &'a [u8], payload: &'a [u8], planning: &Planning) -> Planned<'a> {
    let Some(&command) = payload.first() else {
        return Planned::plain(Plan::Refuse(ErrorPacket::new(
            ER_UNKNOWN_COM_ERROR,
            "08S01",
            "Unknown command",
        )));
    };
    let body = &payload[1..];
    let plan = match command {
        COM_QUIT => Plan::Quit,
        COM_QUERY => return plan_query(body, planning),
        COM_INIT_DB => Plan::Relay {
            send: Send::AsSent,
            kind: ResponseKind::Single,
            hold_end: false,
            record: Record::InitDb { name: body },
        },
        COM_RESET_CONNECTION => Plan::Relay {
            send: Send::AsSent,
            kind: ResponseKind::Single,
            hold_end: false,
            record: Record::ResetConnection,
        },
        // It changes the login's capabilities, which no reset restores.
        COM_SET_OPTION => {
            return Planned {
                plan: Plan::Relay {
                    send: Send::AsSent,
                    kind: ResponseKind::Single,
                    hold_end: false,
                    record: Record::SetOption {
                        option: payload.get(1..3),
                    },
                },
                counted: None,
                unresettable: true,
            }
        }
        COM_CHANGE_USER if is_continued(raw) => Plan::RefuseLong(ErrorPacket::new(
            ER_UNKNOWN_COM_ERROR,
            "08S01",
            "Malformed COM_CHANGE_USER packet (16 MiB or more)",
        )),
        // The login's character set and attributes may have changed.
        COM_CHANGE_USER => {
            return Planned {
                plan: Plan::ChangeUser,
                counted: None,
                unresettable: true,
            }
        }
        COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID | COM_REGISTER_SLAVE | COM_TABLE_DUMP
        | COM_CONNECT_OUT => Plan::RefuseLong(ErrorPacket::new(
            ER_UNKNOWN_COM_ERROR,
            "08S01",
            "Replication commands are not supported through msgproxy; connect replicas to the server directly",
        )),
        COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => {
            // The flags byte after the statement id: CURSOR_TYPE_READ_ONLY (1) is the one the
            // server opens a cursor for.
            let kind = match payload.get(5) {
                Some(flags) if command == COM_STMT_EXECUTE && flags & 1 != 0 => {
                    ResponseKind::CursorResults
                }
                _ => ResponseKind::Results,
            };
            Plan::Relay {
                send: Send::AsSent,
                kind,
                hold_end: false,
                record: Record::Execute {
                    statement: statement_id(payload),
                    payload,
                    kills: command == COM_STMT_EXECUTE,
                },
            }
        }
        COM_PROCESS_INFO => Plan::relay(ResponseKind::Results),
        COM_STMT_PREPARE => return plan_prepare(raw, body, planning),
        COM_STMT_FETCH => Plan::relay(ResponseKind::Rows),
        COM_FIELD_LIST => Plan::relay(ResponseKind::FieldList),
        COM_STMT_CLOSE => Plan::SendOnly {
            record: Record::Close {
                statement: statement_id(payload),
            },
        },
        COM_STMT_SEND_LONG_DATA => Plan::SendOnly {
            record: Record::Nothing,
        },
        _ => Plan::relay(ResponseKind::Single),
    };
    Planned::plain(plan)
}

/// Plans a statement longer than [`JOIN_LIMIT`], by its first 16 MiB (`head`): anything for the
/// server is streamed on as it arrives; one msgproxy would answer (a giant ACK list) is refused.
pub fn plan_long(head: &[u8]) -> Planned<'_> {
    let classification = sql::classify(head);
    let plan = if classification.action == Action::Virtual {
        Plan::RefuseLong(ErrorPacket::new(
            ER_NET_PACKET_TOO_LARGE,
            "08S01",
            format!(
                "msgproxy reads STREAM and ACK statements of at most {} MiB; acknowledge in several ACK statements",
                JOIN_LIMIT.div_ceil(1 << 20)
            ),
        ))
    } else {
        Plan::Relay {
            send: Send::AsSent,
            kind: ResponseKind::Results,
            hold_end: false,
            record: Record::LongQuery {
                head,
                classification,
            },
        }
    };
    Planned {
        plan,
        counted: Some(classification.keyword),
        unresettable: false,
    }
}

/// A COM_QUERY of `whole`.
fn plan_query<'a>(whole: &'a [u8], planning: &Planning) -> Planned<'a> {
    let (statement, classification) = statement_inside(whole, planning.quoting);
    // An XA transaction may outlive its statements' status flags (prepared); a role outlives
    // any reset.
    let unresettable = planning.pooled
        && (classification.keyword == Keyword::Xa || sql::may_set_role(whole, planning.quoting));
    let relayed = relayed_query(whole, statement, classification, planning);
    let plan = if classification.action == Action::Virtual {
        Plan::Virtual {
            statement,
            relayed: Box::new(relayed),
        }
    } else {
        relayed
    };
    Planned {
        plan,
        counted: Some(classification.keyword),
        unresettable,
    }
}

/// A COM_QUERY the server runs: `statement` is `whole` or the statement inside its `SET
/// STATEMENT ... FOR` wrapper.
fn relayed_query<'a>(
    whole: &'a [u8],
    statement: &'a [u8],
    classification: Classification,
    planning: &Planning,
) -> Plan<'a> {
    if classification.keyword == Keyword::Other
        && sql::prepared_text(statement, planning.quoting)
            .is_some_and(|text| sql::classify(&text).action == Action::Virtual)
    {
        // `PREPARE s FROM 'ACK t 1'`: the server would call it a syntax error.
        return Plan::Refuse(virtual_not_prepared());
    }
    let record = Record::Query {
        statement,
        classification,
    };
    // The `@@socket` rewrite reads a plain SELECT only (not one in SET STATEMENT).
    let wrapped = statement.len() != whole.len();
    let rewritten = match classification.keyword {
        Keyword::Select if !wrapped => {
            sql::rewrite(whole, planning.quoting, planning.socket_literal)
        }
        _ => None,
    };
    let (send, hold_end) = match rewritten {
        Some(statement) => (Send::Statement(statement), false),
        // The engine reloads before the client sees the OK, so the table the DDL made (or
        // unmade) is usable (or gone) the moment it is answered; and an UPDATE that acks is
        // counted before its OK, so a scrape the client makes after the OK includes it.
        None => (
            Send::AsSent,
            sql::is_ddl(classification.keyword, statement)
                || classification.keyword == Keyword::Update,
        ),
    };
    Plan::Relay {
        send,
        kind: ResponseKind::Results,
        hold_end,
        record,
    }
}

/// A COM_STMT_PREPARE of `sql` (`raw` its packet).
fn plan_prepare<'a>(raw: &'a [u8], sql: &'a [u8], planning: &Planning) -> Planned<'a> {
    if statement_inside(sql, planning.quoting).1.action == Action::Virtual {
        // The proxy answers these itself, over the text protocol only; the server would say
        // "syntax error", which is not the reason.
        return Planned::plain(Plan::RefuseLong(virtual_not_prepared()));
    }
    let unresettable = planning.pooled && sql::may_set_role(sql, planning.quoting);
    let classification = sql::classify(sql);
    // The `@@socket` rewrite, as for a plain SELECT sent as text. (A statement of 16 MiB or
    // more is streamed on, never held.)
    let rewritten = match classification.keyword {
        Keyword::Select if !is_continued(raw) => {
            rewritten_prepare(raw, planning.quoting, planning.socket_literal)
        }
        _ => None,
    };
    Planned {
        plan: Plan::Relay {
            send: rewritten.map_or(Send::AsSent, Send::Packet),
            kind: ResponseKind::Prepare,
            hold_end: false,
            record: Record::Prepare {
                sql,
                classification,
            },
        },
        counted: None,
        unresettable,
    }
}

/// The statement that decides what the proxy does with `whole`, and its classification: `whole`
/// itself, or the statement inside a `SET STATEMENT var = value FOR` wrapper (Connector/J's query
/// timeout); the whole is what the server gets. The variables do not apply to what msgproxy
/// answers itself (a timeout does not end a STREAM).
fn statement_inside(whole: &[u8], quoting: Quoting) -> (&[u8], Classification) {
    let classification = sql::classify(whole);
    if classification.keyword == Keyword::Set {
        if let Some(inner) = sql::set_statement_body(whole, quoting) {
            return (inner, sql::classify(inner));
        }
    }
    (whole, classification)
}

/// A one-packet `COM_STMT_PREPARE` (`raw`, header included) with the `@@socket` rewrite applied
/// to its statement, framed with the client's sequence id; `None` when nothing changes.
fn rewritten_prepare(raw: &[u8], quoting: Quoting, socket: &[u8]) -> Option<BytesMut> {
    let statement = sql::rewrite(raw.get(5..)?, quoting, socket)?;
    let mut command = Vec::with_capacity(statement.len() + 1);
    command.push(COM_STMT_PREPARE);
    command.extend_from_slice(&statement);
    let mut framed = BytesMut::new();
    crate::protocol::packet::encode_packet(&mut framed, parse_header(raw).1, &command);
    Some(framed)
}

/// The refusal of a virtual statement prepared (over the binary protocol, or with SQL `PREPARE`
/// / `EXECUTE IMMEDIATE` of a literal): the proxy answers them over the text protocol only, and
/// the server would call them a syntax error, which is not the reason.
fn virtual_not_prepared() -> ErrorPacket {
    ErrorPacket::new(
        ER_UNSUPPORTED_PS,
        "HY000",
        "STREAM, ACK, NACK, EXTEND, REDRIVE, SEEK, DROP GROUP, SET workload, SHOW MESSAGE TABLES and SHOW STREAM GROUPS are answered by msgproxy over the text protocol only; send them as plain queries, not prepared statements",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOCKET: &[u8] = b"'/run/msgproxy.sock'";

    fn planning(pooled: bool) -> Planning<'static> {
        Planning {
            quoting: Quoting::DEFAULT,
            pooled,
            socket_literal: SOCKET,
        }
    }

    /// A one-packet command: its framed packet.
    fn packet(command: u8, body: &[u8]) -> Vec<u8> {
        let mut payload = vec![command];
        payload.extend_from_slice(body);
        let mut raw = BytesMut::new();
        crate::protocol::packet::encode_packet(&mut raw, 0, &payload);
        raw.to_vec()
    }

    fn planned(raw: &[u8], pooled: bool) -> Planned<'_> {
        plan(raw, &raw[4..], &planning(pooled))
    }

    fn error_code(plan: &Plan) -> Option<u16> {
        match plan {
            Plan::Refuse(e) | Plan::RefuseLong(e) => Some(e.code),
            _ => None,
        }
    }

    #[test]
    fn an_empty_command_is_refused_and_quit_ends_the_session() {
        let empty = [0u8, 0, 0, 0];
        assert_eq!(
            error_code(&planned(&empty, false).plan),
            Some(ER_UNKNOWN_COM_ERROR)
        );
        assert!(matches!(
            planned(&packet(COM_QUIT, b""), false).plan,
            Plan::Quit
        ));
    }

    #[test]
    fn a_plain_select_is_relayed_as_sent_and_counted() {
        let raw = packet(COM_QUERY, b"SELECT id FROM t WHERE id = 1");
        let p = planned(&raw, true);
        assert_eq!(p.counted, Some(Keyword::Select));
        assert!(!p.unresettable);
        match p.plan {
            Plan::Relay {
                send: Send::AsSent,
                kind: ResponseKind::Results,
                hold_end: false,
                record: Record::Query { statement, .. },
            } => assert_eq!(statement, b"SELECT id FROM t WHERE id = 1"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_select_of_at_at_socket_is_sent_rewritten() {
        let raw = packet(COM_QUERY, b"SELECT @@socket");
        match planned(&raw, false).plan {
            Plan::Relay {
                send: Send::Statement(sql),
                ..
            } => assert!(sql.windows(SOCKET.len()).any(|w| w == SOCKET), "{sql:?}"),
            other => panic!("{other:?}"),
        }
        let raw = packet(COM_STMT_PREPARE, b"SELECT @@socket");
        match planned(&raw, false).plan {
            Plan::Relay {
                send: Send::Packet(p),
                kind: ResponseKind::Prepare,
                ..
            } => assert_eq!(p[4], COM_STMT_PREPARE),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ddl_and_update_hold_the_end_of_their_answer() {
        for sql in [&b"CREATE TABLE t (id INT)"[..], b"UPDATE t SET a = 1"] {
            let raw = packet(COM_QUERY, sql);
            assert!(
                matches!(
                    planned(&raw, false).plan,
                    Plan::Relay { hold_end: true, .. }
                ),
                "{sql:?}"
            );
        }
        let raw = packet(COM_QUERY, b"CREATE TEMPORARY TABLE t (id INT)");
        assert!(matches!(
            planned(&raw, false).plan,
            Plan::Relay {
                hold_end: false,
                ..
            }
        ));
    }

    #[test]
    fn virtual_statements_are_answered_here_with_a_relay_for_a_skipping_server() {
        let raw = packet(COM_QUERY, b"ACK t 1");
        match planned(&raw, false).plan {
            Plan::Virtual { statement, relayed } => {
                assert_eq!(statement, b"ACK t 1");
                assert!(matches!(*relayed, Plan::Relay { .. }));
            }
            other => panic!("{other:?}"),
        }
        // Inside SET STATEMENT ... FOR, the inner statement decides.
        let raw = packet(COM_QUERY, b"SET STATEMENT max_statement_time=5 FOR ACK t 1");
        assert!(
            matches!(planned(&raw, false).plan, Plan::Virtual { statement, .. } if statement.trim_ascii_start().starts_with(b"ACK"))
        );
    }

    #[test]
    fn virtual_statements_prepared_are_refused_with_the_reason() {
        let raw = packet(COM_QUERY, b"PREPARE s FROM 'ACK t 1'");
        assert!(
            matches!(planned(&raw, false).plan, Plan::Refuse(e) if e.code == ER_UNSUPPORTED_PS)
        );
        let raw = packet(COM_STMT_PREPARE, b"ACK t 1");
        assert!(
            matches!(planned(&raw, false).plan, Plan::RefuseLong(e) if e.code == ER_UNSUPPORTED_PS)
        );
    }

    #[test]
    fn what_no_reset_undoes_is_noted_only_for_pooled_sessions_or_always() {
        for (sql, pooled, expected) in [
            (&b"XA START 'x'"[..], true, true),
            (b"XA START 'x'", false, false),
            (b"SET ROLE r", true, true),
            (b"SELECT 1", true, false),
        ] {
            let raw = packet(COM_QUERY, sql);
            assert_eq!(planned(&raw, pooled).unresettable, expected, "{sql:?}");
        }
        let raw = packet(COM_STMT_PREPARE, b"SET ROLE r");
        assert!(planned(&raw, true).unresettable);
        let raw = packet(COM_SET_OPTION, &[0, 0]);
        let p = planned(&raw, false);
        assert!(p.unresettable);
        assert!(matches!(
            p.plan,
            Plan::Relay {
                kind: ResponseKind::Single,
                record: Record::SetOption {
                    option: Some([0, 0])
                },
                ..
            }
        ));
        let raw = packet(COM_CHANGE_USER, b"u\0\0");
        let p = planned(&raw, false);
        assert!(p.unresettable && matches!(p.plan, Plan::ChangeUser));
    }

    #[test]
    fn replication_commands_are_refused() {
        for command in [COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID] {
            let raw = packet(command, &[0; 10]);
            assert_eq!(
                error_code(&planned(&raw, false).plan),
                Some(ER_UNKNOWN_COM_ERROR)
            );
        }
    }

    #[test]
    fn prepared_statements_get_the_answer_shapes_of_the_binary_protocol() {
        // COM_STMT_EXECUTE of statement 7 with a read-only cursor.
        let raw = packet(COM_STMT_EXECUTE, &[7, 0, 0, 0, 1, 1, 0, 0, 0]);
        match planned(&raw, false).plan {
            Plan::Relay {
                kind: ResponseKind::CursorResults,
                record:
                    Record::Execute {
                        statement: Some(7),
                        kills: true,
                        ..
                    },
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        let raw = packet(COM_STMT_EXECUTE, &[7, 0, 0, 0, 0, 1, 0, 0, 0]);
        assert!(matches!(
            planned(&raw, false).plan,
            Plan::Relay {
                kind: ResponseKind::Results,
                ..
            }
        ));
        let raw = packet(COM_STMT_FETCH, &[7, 0, 0, 0, 10, 0, 0, 0]);
        assert!(matches!(
            planned(&raw, false).plan,
            Plan::Relay {
                kind: ResponseKind::Rows,
                ..
            }
        ));
        let raw = packet(COM_STMT_CLOSE, &[7, 0, 0, 0]);
        assert!(matches!(
            planned(&raw, false).plan,
            Plan::SendOnly {
                record: Record::Close { statement: Some(7) }
            }
        ));
        let raw = packet(COM_STMT_PREPARE, b"KILL QUERY ?");
        assert!(matches!(
            planned(&raw, false).plan,
            Plan::Relay {
                send: Send::AsSent,
                kind: ResponseKind::Prepare,
                record: Record::Prepare { .. },
                ..
            }
        ));
    }

    #[test]
    fn other_commands_get_one_packet_back() {
        for command in [COM_PING, COM_STATISTICS] {
            let raw = packet(command, b"");
            assert!(matches!(
                planned(&raw, false).plan,
                Plan::Relay {
                    kind: ResponseKind::Single,
                    record: Record::Nothing,
                    ..
                }
            ));
        }
        let raw = packet(COM_INIT_DB, b"app");
        assert!(matches!(
            planned(&raw, false).plan,
            Plan::Relay {
                record: Record::InitDb { name: b"app" },
                ..
            }
        ));
    }

    #[test]
    fn a_long_statement_is_streamed_unless_msgproxy_would_answer_it() {
        let p = plan_long(b"INSERT INTO t VALUES (1), (2)");
        assert_eq!(p.counted, Some(Keyword::Insert));
        assert!(matches!(
            p.plan,
            Plan::Relay {
                record: Record::LongQuery { .. },
                ..
            }
        ));
        assert_eq!(
            error_code(&plan_long(b"ACK t 1, 2, 3").plan),
            Some(ER_NET_PACKET_TOO_LARGE)
        );
    }
}
