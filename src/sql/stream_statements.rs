//! The event-stream statements (docs/STREAMS.md) and their parser. Kept apart from the message
//! table statements (`statements.rs`): the two grammars share the lexer and nothing else.
//!
//! ```text
//! STREAM {* | column [, column ...]} FROM table_ref GROUP 'group'
//!        [START {LATEST | EARLIEST | AT TIMESTAMP 'yyyy-mm-dd hh:mm:ss[.ffffff]' | AT EVENT n}]
//!        [WHERE filter]
//! ACK table_ref GROUP 'group' n [, n ...]
//! SEEK table_ref GROUP 'group' TO {EARLIEST | LATEST | TIMESTAMP '...' | EVENT n}
//! DROP GROUP 'group' ON table_ref
//! SHOW STREAM GROUPS
//! ```
//!
//! Which statements are msgproxy's ([`is_stream_statement`], used by the classifier): `SEEK ...`
//! always; `STREAM ...` and `ACK ...` when an unquoted word `GROUP` appears among their tokens
//! (without it they are message-table statements); `DROP GROUP 'g' ON t` and `SHOW STREAM GROUPS`
//! only in exactly these forms: every other `DROP` and `SHOW`, malformed look-alikes included,
//! is relayed and the server answers it. A `STREAM`/`ACK`/`SEEK` that is ours but malformed gets
//! error 1064 saying the syntax msgproxy expects, then MariaDB's `near '...' at line N`; a filter using a construct the filter grammar lacks gets
//! error 1235 (ER_NOT_SUPPORTED_YET) naming it.

use super::lexer::{
    string_value, trim_statement, unquote_identifier, Lexer, Quoting, Token, TokenKind,
};
use super::reserved::is_reserved;
use super::statements::near_text;
use super::stream_filter::{self, Filter, FilterError, Tokens};
use super::TableName;

/// An event-stream statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamStatement {
    /// `STREAM cols FROM t GROUP 'g' [START ...] [WHERE ...]`.
    Stream {
        /// `None` for `*`.
        columns: Option<Vec<String>>,
        table: TableName,
        group: String,
        start: Option<StartAt>,
        filter: Option<Filter>,
    },
    /// `ACK t GROUP 'g' n, ...`.
    Ack {
        table: TableName,
        group: String,
        ids: Vec<u64>,
    },
    /// `SEEK t GROUP 'g' TO ...`.
    Seek {
        table: TableName,
        group: String,
        to: StartAt,
    },
    /// `DROP GROUP 'g' ON t`.
    DropGroup { table: TableName, group: String },
    /// `SHOW STREAM GROUPS`.
    ShowGroups,
}

/// Where a group starts, or where `SEEK` moves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAt {
    /// Events committed from now on.
    Latest,
    /// The oldest event the binlog still holds.
    Earliest,
    /// The first event committed at or after this time, in the session's time zone (as written).
    Timestamp(String),
    /// The event with this id, or the first after it.
    Event(u64),
}

/// Group names: 1 to this many bytes of UTF-8.
pub const MAX_GROUP_NAME: usize = 255;

/// A refused event-stream statement, ready for an ERR packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStatementError {
    pub code: u16,
    pub sqlstate: &'static str,
    pub message: String,
    /// MariaDB's `near '...'` text and line (as in `SyntaxError`).
    pub near: String,
    pub line: u32,
}

/// The syntax of each statement, for the error messages.
const STREAM_SYNTAX: &str = "STREAM * | col[, col ...] FROM table GROUP 'group' [START LATEST | EARLIEST | AT TIMESTAMP 'yyyy-mm-dd hh:mm:ss' | AT EVENT n] [WHERE filter]";
const ACK_SYNTAX: &str = "ACK table GROUP 'group' event_id[, event_id ...]";
const SEEK_SYNTAX: &str =
    "SEEK table GROUP 'group' TO EARLIEST | LATEST | TIMESTAMP 'yyyy-mm-dd hh:mm:ss' | EVENT n";
const DROP_SYNTAX: &str = "DROP GROUP 'group' ON table";
const SHOW_SYNTAX: &str = "SHOW STREAM GROUPS";
const FILTER_SYNTAX: &str = "filters take =, <>, !=, IN (...), NOT IN (...), IS [NOT] NULL, AND, OR, NOT and parentheses over columns and literals";

/// Whether `sql` is an event-stream statement (see the module doc). Allocates nothing.
pub fn is_stream_statement(sql: &[u8]) -> bool {
    let sql = trim_statement(sql);
    let mut lexer = Lexer::new(sql);
    let word = |t: Token, w: &str| {
        t.kind == TokenKind::Word
            && !t.after_dot
            && sql
                .get(t.start..t.end)
                .is_some_and(|b| b.eq_ignore_ascii_case(w.as_bytes()))
    };
    let first = lexer.next_token();
    if word(first, "SEEK") {
        return true;
    }
    // `DROP` and `SHOW` are the server's words: only the exact forms are ours (a malformed one is
    // relayed, and the server's syntax error answers it).
    if word(first, "DROP") || word(first, "SHOW") {
        let second = lexer.next_token();
        return (word(second, "GROUP") || word(second, "STREAM"))
            && parser(sql, Quoting::DEFAULT).statement().is_ok();
    }
    if word(first, "STREAM") || word(first, "ACK") {
        // Most are message-table statements, some very long (an ACK of a million ids): a
        // statement without the letters `group` anywhere is not lexed to its end.
        if !contains_group(sql) {
            return false;
        }
        loop {
            let t = lexer.next_token();
            match t.kind {
                TokenKind::Eof | TokenKind::Invalid => return false,
                // `group.t` is a schema named group, not the keyword.
                _ if word(t, "GROUP") && sql.get(t.end) != Some(&b'.') => return true,
                _ => {}
            }
        }
    }
    false
}

/// Whether `group` appears in `sql`, in any letter case.
fn contains_group(sql: &[u8]) -> bool {
    sql.windows(5)
        .any(|w| w[0] | 0x20 == b'g' && w.eq_ignore_ascii_case(b"group"))
}

/// Parses `sql` if it is an event-stream statement ([`is_stream_statement`]); `None` otherwise.
/// Never panics, whatever the bytes.
pub fn parse_stream_statement(
    sql: &[u8],
    quoting: Quoting,
) -> Option<Result<StreamStatement, StreamStatementError>> {
    if !is_stream_statement(sql) {
        return None;
    }
    let mut parser = parser(trim_statement(sql), quoting);
    Some(parser.statement().map_err(|e| parser.error(e)))
}

fn parser(sql: &[u8], quoting: Quoting) -> Parser<'_> {
    Parser {
        sql,
        lexer: Lexer::with_quoting(sql, quoting),
        quoting,
        peeked: None,
        syntax: STREAM_SYNTAX,
    }
}

/// Why a parse stopped.
enum Failure {
    Syntax(Token),
    Unsupported { what: String, at: Token },
    BadGroup(Token),
    BadNumber(Token),
}

impl From<Token> for Failure {
    fn from(t: Token) -> Failure {
        Failure::Syntax(t)
    }
}

impl From<FilterError> for Failure {
    fn from(e: FilterError) -> Failure {
        match e {
            FilterError::Syntax(t) => Failure::Syntax(t),
            FilterError::Unsupported { what, at } => Failure::Unsupported { what, at },
        }
    }
}

struct Parser<'a> {
    sql: &'a [u8],
    lexer: Lexer<'a>,
    quoting: Quoting,
    peeked: Option<Token>,
    /// The syntax of the statement being parsed, for the error.
    syntax: &'static str,
}

impl stream_filter::Tokens for Parser<'_> {
    fn next(&mut self) -> Token {
        self.peeked
            .take()
            .unwrap_or_else(|| self.lexer.next_token())
    }

    fn peek(&mut self) -> Token {
        *self.peeked.get_or_insert_with(|| self.lexer.next_token())
    }

    fn bytes(&self, token: Token) -> &[u8] {
        self.sql.get(token.start..token.end).unwrap_or_default()
    }

    fn is_keyword(&self, token: Token, keyword: &str) -> bool {
        token.kind == TokenKind::Word
            && !token.after_dot
            && self.bytes(token).eq_ignore_ascii_case(keyword.as_bytes())
    }

    fn column(&self, token: Token) -> Option<String> {
        self.identifier(token, false).ok()
    }

    fn quoting(&self) -> Quoting {
        self.quoting
    }
}

impl Parser<'_> {
    fn error(&self, failure: Failure) -> StreamStatementError {
        let (token, code, sqlstate, message) = match failure {
            Failure::Syntax(t) => (t, 1064, "42000", None),
            Failure::Unsupported { what, at } => (
                at,
                1235,
                "42000",
                Some(format!(
                    "msgproxy's stream filters do not support {what}; {FILTER_SYNTAX}"
                )),
            ),
            Failure::BadGroup(t) => (
                t,
                1064,
                "42000",
                Some(format!(
                    "a group name is a quoted string of 1 to {MAX_GROUP_NAME} bytes of UTF-8; expected: {}",
                    self.syntax
                )),
            ),
            Failure::BadNumber(t) => (
                t,
                1064,
                "42000",
                Some(format!(
                    "event ids are whole numbers from 0 to 18446744073709551615; expected: {}",
                    self.syntax
                )),
            ),
        };
        let near = near_text(self.sql.get(token.start..).unwrap_or_default());
        let line = token.line;
        let message = match message {
            Some(m) => format!("{m} (near '{near}' at line {line})"),
            // Worded as the message-table statements' syntax errors (`SyntaxError::message`).
            None => format!(
                "You have an error in your SQL syntax; msgproxy expects {}; check the statement near \
                 '{near}' at line {line}",
                self.syntax
            ),
        };
        StreamStatementError {
            code,
            sqlstate,
            message,
            near,
            line,
        }
    }

    fn expect_keyword(&mut self, keyword: &str) -> Result<Token, Failure> {
        let token = self.next();
        if self.is_keyword(token, keyword) {
            Ok(token)
        } else {
            Err(token.into())
        }
    }

    fn statement(&mut self) -> Result<StreamStatement, Failure> {
        let first = self.next();
        let statement = if self.is_keyword(first, "STREAM") {
            self.syntax = STREAM_SYNTAX;
            self.stream()?
        } else if self.is_keyword(first, "ACK") {
            self.syntax = ACK_SYNTAX;
            let table = self.table_ref()?;
            self.expect_keyword("GROUP")?;
            let group = self.group()?;
            let mut ids = vec![self.number()?];
            while self.peek().kind == TokenKind::Punct(b',') {
                self.next();
                ids.push(self.number()?);
            }
            StreamStatement::Ack { table, group, ids }
        } else if self.is_keyword(first, "SEEK") {
            self.syntax = SEEK_SYNTAX;
            let table = self.table_ref()?;
            self.expect_keyword("GROUP")?;
            let group = self.group()?;
            self.expect_keyword("TO")?;
            let to = self.position(false)?;
            StreamStatement::Seek { table, group, to }
        } else if self.is_keyword(first, "DROP") {
            self.syntax = DROP_SYNTAX;
            self.expect_keyword("GROUP")?;
            let group = self.group()?;
            self.expect_keyword("ON")?;
            let table = self.table_ref()?;
            StreamStatement::DropGroup { table, group }
        } else if self.is_keyword(first, "SHOW") {
            self.syntax = SHOW_SYNTAX;
            self.expect_keyword("STREAM")?;
            self.expect_keyword("GROUPS")?;
            StreamStatement::ShowGroups
        } else {
            return Err(first.into());
        };
        self.end()?;
        Ok(statement)
    }

    fn stream(&mut self) -> Result<StreamStatement, Failure> {
        let columns = if self.peek().kind == TokenKind::Punct(b'*') {
            self.next();
            None
        } else {
            let mut columns = Vec::new();
            loop {
                let token = self.next();
                columns.push(self.identifier(token, false)?);
                if self.peek().kind == TokenKind::Punct(b',') {
                    self.next();
                } else {
                    break;
                }
            }
            Some(columns)
        };
        self.expect_keyword("FROM")?;
        let table = self.table_ref()?;
        self.expect_keyword("GROUP")?;
        let group = self.group()?;
        let mut start = None;
        let p = self.peek();
        if self.is_keyword(p, "START") {
            self.next();
            start = Some(self.position(true)?);
        }
        let mut filter = None;
        let p = self.peek();
        if self.is_keyword(p, "WHERE") {
            self.next();
            filter = Some(stream_filter::parse(self)?);
        }
        Ok(StreamStatement::Stream {
            columns,
            table,
            group,
            start,
            filter,
        })
    }

    /// After `START` (`at`: `TIMESTAMP` and `EVENT` follow `AT`) or `SEEK ... TO`.
    fn position(&mut self, at: bool) -> Result<StartAt, Failure> {
        let word = self.next();
        if self.is_keyword(word, "LATEST") {
            return Ok(StartAt::Latest);
        }
        if self.is_keyword(word, "EARLIEST") {
            return Ok(StartAt::Earliest);
        }
        let word = if at {
            if !self.is_keyword(word, "AT") {
                return Err(word.into());
            }
            self.next()
        } else {
            word
        };
        if self.is_keyword(word, "TIMESTAMP") {
            let value = self.next();
            if value.kind != TokenKind::String {
                return Err(value.into());
            }
            let bytes = string_value(self.bytes(value), self.quoting);
            return match String::from_utf8(bytes) {
                Ok(s) => Ok(StartAt::Timestamp(s)),
                Err(_) => Err(value.into()),
            };
        }
        if self.is_keyword(word, "EVENT") {
            return Ok(StartAt::Event(self.number()?));
        }
        Err(word.into())
    }

    /// An event id: an unsigned whole number.
    fn number(&mut self) -> Result<u64, Failure> {
        let token = self.next();
        if token.kind != TokenKind::Number {
            return Err(token.into());
        }
        std::str::from_utf8(self.bytes(token))
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(Failure::BadNumber(token))
    }

    /// A group name: a quoted string of 1..=MAX_GROUP_NAME bytes of UTF-8.
    fn group(&mut self) -> Result<String, Failure> {
        let token = self.next();
        if token.kind != TokenKind::String {
            return Err(Failure::BadGroup(token));
        }
        let value = string_value(self.bytes(token), self.quoting);
        if value.is_empty() || value.len() > MAX_GROUP_NAME {
            return Err(Failure::BadGroup(token));
        }
        String::from_utf8(value).map_err(|_| Failure::BadGroup(token))
    }

    /// One optional `;`, then the end.
    fn end(&mut self) -> Result<(), Failure> {
        let mut token = self.next();
        if token.kind == TokenKind::Punct(b';') {
            token = self.next();
        }
        match token.kind {
            TokenKind::Eof => Ok(()),
            _ => Err(token.into()),
        }
    }

    /// `ident` or `ident.ident` (as `statements.rs` reads them).
    fn table_ref(&mut self) -> Result<TableName, Failure> {
        let first = self.next();
        let dot = self.peek();
        if dot.kind != TokenKind::Punct(b'.') {
            return Ok(TableName {
                schema: None,
                name: self.identifier(first, false)?,
            });
        }
        self.next();
        let second = self.next();
        let joined = dot.start == first.end && second.after_dot;
        let schema = self.identifier(first, joined)?;
        let name = self.identifier(second, second.after_dot)?;
        Ok(TableName {
            schema: Some(schema),
            name,
        })
    }

    /// The name an identifier token stands for. `qualified`: a reserved word is one here.
    fn identifier(&self, token: Token, qualified: bool) -> Result<String, Token> {
        let text = || std::str::from_utf8(self.bytes(token)).map_err(|_| token);
        match token.kind {
            TokenKind::Word if qualified || !is_reserved(self.bytes(token)) => {
                Ok(text()?.to_owned())
            }
            TokenKind::QuotedIdent => unquote_identifier(text()?).ok_or(token),
            _ => Err(token),
        }
    }
}

#[cfg(test)]
#[path = "stream_statements_tests.rs"]
mod tests;
