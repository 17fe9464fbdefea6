//! The statement classifier, and the parser of the statements the proxy answers itself.
//!
//! Every `COM_QUERY` passes through [`classify()`] before anything else happens to it, so the common path is a
//! cheap look at the statement's first keyword: no allocation, no regex, no full parse. Only the rare
//! statements the proxy acts on get a full parse: the virtual statements (`STREAM`, `ACK`, `SET workload`,
//! `SHOW MESSAGE TABLES`) with [`parse_virtual`], and later DML/DDL that may touch message tables; everything
//! else is relayed byte for byte.
//!
//! The interception rules live in one place: [`KEYWORDS`] names the keywords the proxy tells apart,
//! [`is_virtual`] says which of them the proxy always answers itself, and `action_for` adds the two
//! statements decided by more than their keyword (`SET workload = ...`, `SHOW MESSAGE TABLES`). All of it is
//! exercised from the data files in `grammar-tests/`.
//!
//! There is one scanner, `lexer.rs`: the classifier, the readers below, the binlog's reading of query events
//! (through [`Words`]) and the one definition of DDL that can affect a message table ([`is_ddl`]) all use it.
//!
//! - `classify.rs` — the first keyword, the lexer's first token after leading comments and parentheses;
//! - `current_db.rs` — what a relayed statement may do to the session's current database (`USE`, multi-
//!   statements, `DROP DATABASE`, ...), so unqualified `ACK`/`STREAM` tables never resolve in a stale one;
//! - `prepare.rs` — the statement a SQL `PREPARE ... FROM '...'` / `EXECUTE IMMEDIATE '...'` spells out, so a
//!   virtual statement prepared that way is refused for the right reason;
//! - `ddl.rs` — what is DDL ([`is_ddl`]) and which tables it may have changed ([`ddl_effect`]), so only those
//!   are reloaded;
//! - `lexer.rs` — the MariaDB-compatible lexer every reader here uses (positions, lines, quoting), and
//!   [`Words`], its leading words for readers elsewhere;
//! - `mentions.rs` — whether a statement names a table (byte searches, generous on purpose);
//! - `reserved.rs` — the words MariaDB refuses as an unquoted table name;
//! - `set_statement.rs` — the statement inside `SET STATEMENT var = value FOR statement` (Connector/J's query
//!   timeouts), which decides what the proxy does with the whole;
//! - `statements.rs` — [`VirtualStatement`], [`parse_virtual`] and its MariaDB-worded [`SyntaxError`]
//!   (which says how msgproxy's own statements are written);
//! - `work_queue.rs` — the work-queue statements `NACK`, `EXTEND`, `REDRIVE` (MESSAGING.md §9-§10);
//! - `stream_statements.rs`, `stream_filter.rs` — the event-stream statements (`STREAM ... GROUP`, `ACK ...
//!   GROUP`, `SEEK`, `DROP GROUP`, `SHOW STREAM GROUPS`, docs/STREAMS.md) and a group's `WHERE` filter.
//! - `property_tests.rs` (tests only) — fixed-seed properties across the classifier, the parser and `rewrite`:
//!   what is relayed untouched, and odd names and ids surviving `STREAM`/`ACK`.

mod classify;
pub mod current_db;
mod ddl;
mod kill;
mod lexer;
mod mentions;
mod prepare;
mod reserved;
mod rewrite;
mod set_statement;
mod statements;
mod stream_filter;
mod stream_statements;

#[cfg(test)]
mod property_tests;

pub use classify::{classify, version_gate};
pub use ddl::{ddl_effect, is_ddl, DdlEffect};
pub use kill::{executed_kill_target, kill_query, kill_query_target, KillQueryTarget};
pub use lexer::{unquote_identifier, Piece, Quoting, Words};
pub use mentions::{contains_ignore_ascii_case, is_bare_identifier, names_identifier};
pub use prepare::prepared_text;
pub use rewrite::{rewrite, socket_literal};
pub use set_statement::set_statement_body;
pub use statements::{
    parse_virtual, parse_virtual_in, AckId, Seconds, SyntaxError, TableName, VirtualStatement,
};
pub use stream_filter::{Filter, Literal};
pub use stream_statements::{
    is_stream_statement, parse_stream_statement, StartAt, StreamStatement, StreamStatementError,
    MAX_GROUP_NAME,
};

/// What the proxy does with one statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send the statement to the backend unchanged and relay the backend's answer.
    Relay,
    /// Answer the statement in the proxy (the message engine); the backend never sees it.
    Virtual,
}

/// The statement's first keyword, as far as the proxy cares about it.
///
/// Keywords the proxy never needs to tell apart (`DO`, `HANDLER`, `EXPLAIN`, ...) are [`Keyword::Other`], as
/// is anything that does not start with a keyword at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyword {
    Select,
    Insert,
    Replace,
    Update,
    Delete,
    Create,
    Alter,
    Drop,
    Rename,
    Truncate,
    Load,
    Set,
    Use,
    Begin,
    Start,
    Commit,
    Rollback,
    Savepoint,
    Release,
    Xa,
    Lock,
    Unlock,
    Kill,
    Show,
    Call,
    With,
    Stream,
    Ack,
    Seek,
    Nack,
    Extend,
    Redrive,
    Other,
}

/// The one table of keywords the classifier recognises, spelled as in SQL (matched case-insensitively).
///
/// It is also the table the grammar tests use to read expectations, so a keyword added here is at once
/// nameable in a `.test` file.
pub static KEYWORDS: &[(&str, Keyword)] = &[
    ("select", Keyword::Select),
    ("insert", Keyword::Insert),
    ("replace", Keyword::Replace),
    ("update", Keyword::Update),
    ("delete", Keyword::Delete),
    ("create", Keyword::Create),
    ("alter", Keyword::Alter),
    ("drop", Keyword::Drop),
    ("rename", Keyword::Rename),
    ("truncate", Keyword::Truncate),
    ("load", Keyword::Load),
    ("set", Keyword::Set),
    ("use", Keyword::Use),
    ("begin", Keyword::Begin),
    ("start", Keyword::Start),
    ("commit", Keyword::Commit),
    ("rollback", Keyword::Rollback),
    ("savepoint", Keyword::Savepoint),
    ("release", Keyword::Release),
    ("xa", Keyword::Xa),
    ("lock", Keyword::Lock),
    ("unlock", Keyword::Unlock),
    ("kill", Keyword::Kill),
    ("show", Keyword::Show),
    ("call", Keyword::Call),
    ("with", Keyword::With),
    ("stream", Keyword::Stream),
    ("ack", Keyword::Ack),
    ("seek", Keyword::Seek),
    ("nack", Keyword::Nack),
    ("extend", Keyword::Extend),
    ("redrive", Keyword::Redrive),
];

/// The longest name in [`KEYWORDS`]; longer words are not looked up at all.
const MAX_KEYWORD_LEN: usize = 9;

impl Keyword {
    /// Looks a word up in [`KEYWORDS`], ignoring ASCII case. Anything not in the table is [`Keyword::Other`].
    pub fn lookup(word: &[u8]) -> Keyword {
        if word.len() > MAX_KEYWORD_LEN {
            return Keyword::Other;
        }
        KEYWORDS
            .iter()
            .find(|(name, _)| name.as_bytes().eq_ignore_ascii_case(word))
            .map_or(Keyword::Other, |&(_, keyword)| keyword)
    }

    /// Whether statements that start with this keyword may be DDL: the first-keyword half of
    /// [`is_ddl`], which is the one definition (it leaves out temporary tables).
    pub fn is_ddl(self) -> bool {
        matches!(
            self,
            Keyword::Create | Keyword::Alter | Keyword::Drop | Keyword::Rename | Keyword::Truncate
        )
    }

    /// The keyword's name as it appears in [`KEYWORDS`] (lower case), or `"other"`.
    pub fn name(self) -> &'static str {
        KEYWORDS
            .iter()
            .find(|&&(_, keyword)| keyword == self)
            .map_or("other", |&(name, _)| name)
    }
}

impl std::fmt::Display for Keyword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a keyword name that is neither in [`KEYWORDS`] nor `other`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown keyword name `{0}`")]
pub struct UnknownKeyword(pub String);

/// Parses the name of a keyword as written in the grammar test files (e.g. "select", "stream") - used by the
/// tests. `other` names [`Keyword::Other`]; case is ignored.
impl std::str::FromStr for Keyword {
    type Err = UnknownKeyword;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("other") {
            return Ok(Keyword::Other);
        }
        match Keyword::lookup(s.as_bytes()) {
            Keyword::Other => Err(UnknownKeyword(s.to_owned())),
            keyword => Ok(keyword),
        }
    }
}

/// Whether statements starting with `keyword` are always answered by the proxy instead of the backend.
///
/// `STREAM` and `ACK` are not MariaDB statements, so the proxy takes every statement that starts with them,
/// malformed ones included: those get a MariaDB-worded syntax error from [`parse_virtual`]. (MariaDB has no
/// top-level labels, so `stream: BEGIN NOT ATOMIC ... END` is not valid SQL that this would steal.)
///
/// `NACK`, `EXTEND` and `REDRIVE` (MESSAGING.md §9-§10) are not MariaDB statements either.
pub const fn is_virtual(keyword: Keyword) -> bool {
    matches!(
        keyword,
        Keyword::Stream | Keyword::Ack | Keyword::Nack | Keyword::Extend | Keyword::Redrive
    )
}

/// The action for a statement whose first keyword is `keyword`: the single place where interception is
/// switched on.
///
/// Besides [`is_virtual`] keywords, a `SET` is virtual when it assigns the Vitess `workload` variable and
/// nothing else (`SET workload = 'olap'`, `SET @@session.workload = olap`, ...; Vitess clients send it
/// before `STREAM`). Only `SET` statements pay for that check, and it allocates nothing. A `SET` that mixes
/// `workload` with other variables, or gives it a value Vitess refuses, is relayed: the server then rejects
/// the unknown variable, which is the honest answer.
///
/// `SHOW MESSAGE TABLES`, exactly, is virtual too (only `SHOW` statements pay for that check, and it
/// allocates nothing either); any other `SHOW` is relayed. So are the event-stream statements that
/// start with `SEEK`, `DROP GROUP` and `SHOW STREAM` (`stream_statements::is_stream_statement`; the
/// `STREAM ... GROUP` and `ACK ... GROUP` forms are virtual by their keyword already).
fn action_for(keyword: Keyword, sql: &[u8]) -> Action {
    if is_virtual(keyword)
        || (keyword == Keyword::Set && statements::is_set_workload(sql))
        || (keyword == Keyword::Show && statements::is_show_message_tables(sql))
        || (matches!(keyword, Keyword::Seek | Keyword::Drop | Keyword::Show)
            && stream_statements::is_stream_statement(sql))
    {
        Action::Virtual
    } else {
        Action::Relay
    }
}

/// How the proxy handles one statement, read from its first keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    /// The statement's first keyword (after leading whitespace and comments).
    pub keyword: Keyword,
    /// Relay to the backend, or answer in the proxy.
    pub action: Action,
    /// Byte offset of the first keyword in the statement, so later stages (the full parse of a virtual
    /// statement, error positions) need not skip the leading comments again. When the statement has no
    /// first word at all (only comments and whitespace) it is the statement's length.
    pub keyword_offset: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_from_str() {
        for &(name, keyword) in KEYWORDS {
            assert_eq!(name.parse::<Keyword>(), Ok(keyword));
            assert_eq!(name.to_ascii_uppercase().parse::<Keyword>(), Ok(keyword));
            assert_eq!(keyword.name(), name);
            assert!(
                name.len() <= MAX_KEYWORD_LEN,
                "{name} is longer than MAX_KEYWORD_LEN"
            );
        }
        assert_eq!("other".parse::<Keyword>(), Ok(Keyword::Other));
        assert_eq!(Keyword::Other.to_string(), "other");
        assert!("selec".parse::<Keyword>().is_err());
        assert!("".parse::<Keyword>().is_err());
    }

    #[test]
    fn only_msgproxys_own_statements_are_always_virtual() {
        for &(_, keyword) in KEYWORDS {
            assert_eq!(
                is_virtual(keyword),
                matches!(
                    keyword,
                    Keyword::Stream
                        | Keyword::Ack
                        | Keyword::Nack
                        | Keyword::Extend
                        | Keyword::Redrive
                ),
                "{keyword}"
            );
        }
        assert!(!is_virtual(Keyword::Other));
    }

    #[test]
    fn set_is_virtual_only_for_workload() {
        assert_eq!(
            action_for(Keyword::Set, b"SET workload='olap'"),
            Action::Virtual
        );
        assert_eq!(action_for(Keyword::Set, b"SET autocommit=1"), Action::Relay);
        assert_eq!(
            action_for(Keyword::Select, b"SET workload='olap'"),
            Action::Relay
        );
        assert_eq!(action_for(Keyword::Ack, b"ACK"), Action::Virtual);
    }

    #[test]
    fn show_is_virtual_only_for_message_tables() {
        for sql in [
            &b"SHOW MESSAGE TABLES"[..],
            b"show message tables;",
            b"SHOW /* x */ Message\n TABLES ; -- end",
        ] {
            assert_eq!(action_for(Keyword::Show, sql), Action::Virtual, "{sql:?}");
        }
        for sql in [
            &b"SHOW TABLES"[..],
            b"SHOW MESSAGE TABLES LIKE 'x'",
            b"SHOW MESSAGE",
            b"SHOW `MESSAGE` TABLES",
        ] {
            assert_eq!(action_for(Keyword::Show, sql), Action::Relay, "{sql:?}");
        }
        assert_eq!(
            parse_virtual(b"SHOW MESSAGE TABLES"),
            Ok(VirtualStatement::ShowMessageTables)
        );
    }
}
