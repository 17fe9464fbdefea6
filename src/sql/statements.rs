//! The statements the proxy answers itself, and their parser.
//!
//! Grammar (keywords in any case; whitespace and comments anywhere between tokens; one optional `;` at the
//! end, after which only comments may follow):
//!
//! ```text
//! STREAM {* | ident [, ident ...]} FROM table_ref [WHERE condition]
//! ACK table_ref id [, id ...]
//! SET [SESSION | LOCAL] workload {= | :=} value
//! SET @@[session. | local.]workload {= | :=} value
//! SHOW MESSAGE TABLES
//!
//! table_ref = ident | ident . ident
//! ident     = unquoted identifier (not all digits, not a reserved word) | `backtick quoted`
//! id        = [+|-] number | 'string' | "string" | N'string' | 0x.. | X'..' | 0b.. | b'..'
//! value     = olap | oltp | dba | unspecified, bare or in quotes (the values Vitess accepts)
//! ```
//!
//! Errors are reported as MariaDB reports its own syntax errors (1064, "... near '...' at line N"), with the
//! offending token and line found the way its lexer finds them (see `lexer.rs`). The statement must be UTF-8
//! where it matters: a name or id holding invalid UTF-8 is an error at its first invalid byte (comments may
//! hold any bytes).
//!
//! Quoted ids are read as the session reads strings: with backslash escapes, or without them when the
//! session's `sql_mode` has `NO_BACKSLASH_ESCAPES` (the server says so in the status flags of every OK, and
//! the session passes it in as [`Quoting`]). A double-quoted id is a string whatever `ANSI_QUOTES` says
//! (nobody acks by column name). The parse yields each string's *value* ([`AckId::String`]), which the
//! session re-renders in a form no `sql_mode` reads differently (`MessageTable::quoted_id_literal`), so
//! what an id says can never become SQL.
//!
//! A string after a character set introducer (`_binary'k1'`, as drivers send byte arrays) keeps its
//! character set ([`AckId::Introduced`]); the session re-renders it as `_charset X'..'`.
//!
//! Deliberate limits, all of them errors rather than guesses: several statements in one query (`ACK t 1;
//! ACK t 2`; the first `;` ends the statement); ids that are expressions, `NULL`, `TRUE` or `FALSE`; an
//! empty quoted name.

use super::lexer::{
    string_value, trim_statement, unquote_identifier, Lexer, Quoting, Token, TokenKind,
};
use super::reserved::is_reserved;
pub use work_queue::Seconds;

/// A statement the proxy answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VirtualStatement {
    /// `STREAM {* | col[, col ...]} FROM [schema.]table [WHERE condition]`
    Stream {
        table: TableName,
        /// The columns to stream, in order (`None`: `*`, the table's stream columns).
        columns: Option<Vec<String>>,
        /// The condition after `WHERE`, as written (the server evaluates it; see
        /// `work_queue::stream_condition` for what it may not hold).
        condition: Option<String>,
    },
    /// `ACK [schema.]table id[, id ...]`.
    Ack { table: TableName, ids: Vec<AckId> },
    /// `SET workload = ...` — accepted, changes nothing.
    SetWorkload,
    /// `SHOW MESSAGE TABLES` — the message tables and what they are doing, from the proxy.
    ShowMessageTables,
    /// `NACK [schema.]table id[, id ...] [DELAY seconds]` — due again now (or after the delay).
    Nack {
        table: TableName,
        ids: Vec<AckId>,
        delay: Option<Seconds>,
    },
    /// `EXTEND [schema.]table id[, id ...] BY seconds` — not due for that long from now.
    Extend {
        table: TableName,
        ids: Vec<AckId>,
        by: Seconds,
    },
    /// `REDRIVE [schema.]table [id[, id ...]]` — dead messages (all of them, or these) due again.
    Redrive { table: TableName, ids: Vec<AckId> },
}

/// One id of `ACK`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckId {
    /// A number, hex or bit literal exactly as written (`1`, `-5`, `1.5`, `1e3`, `0x1F`, `X'1f'`, `b'01'`);
    /// a sign written apart from its number (`- 5`) is joined to it (`-5`). The server reads these the same
    /// way in every `sql_mode`, so they go into the `IN (...)` list as they are.
    Literal(String),
    /// A quoted string (`'a''b'`, `"x"`, `N'y'`).
    String {
        /// As written, quotes included (for tests and messages; never put into SQL).
        written: String,
        /// What the session's server reads it as: quotes and escapes undone, in the client's character set.
        value: Vec<u8>,
    },
    /// A quoted string after a character set introducer (`_binary'k1'`, `_utf8mb4 'x'`): how the Go
    /// driver (`interpolateParams`) and Connector/J send a byte-array parameter. Its bytes are in the
    /// named character set, not the client's.
    Introduced {
        /// As written, introducer and quotes included (never put into SQL).
        written: String,
        /// The character set the introducer names, without its `_` (ASCII letters and digits only).
        charset: String,
        /// The string's value, quotes and escapes undone.
        value: Vec<u8>,
    },
}

impl AckId {
    /// The id as the client wrote it.
    pub fn written(&self) -> &str {
        match self {
            AckId::Literal(written)
            | AckId::String { written, .. }
            | AckId::Introduced { written, .. } => written,
        }
    }
}

/// A table as named in a statement: unquoted (backticks removed, doubled backticks undone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// The schema, when the name was qualified; otherwise the session's current database applies.
    pub schema: Option<String>,
    pub name: String,
}

/// Backtick-quoted, ready for SQL: `` `mydb`.`vitess_message` ``.
impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn quoted(f: &mut std::fmt::Formatter<'_>, name: &str) -> std::fmt::Result {
            write!(f, "`{}`", name.replace('`', "``"))
        }
        if let Some(schema) = &self.schema {
            quoted(f, schema)?;
            f.write_str(".")?;
        }
        quoted(f, &self.name)
    }
}

/// A syntax error reported like the server does (error 1064, SQLSTATE 42000).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The text MariaDB puts between the quotes: the rest of the statement from the offending token (empty
    /// at the end), without trailing whitespace and `;`, cut at a NUL byte, each invalid UTF-8 byte and each
    /// character outside the BMP shown as `?`, and when longer than 80 bytes cut to at most 77 bytes (on a
    /// character boundary) followed by `...`.
    pub near: String,
    /// 1-based; newlines in leading whitespace and inside quoted tokens do not count, as in MariaDB.
    pub line: u32,
    /// How the statement is written, when it is one of msgproxy's own (`ACK table id[, id ...]`),
    /// told by its first word: the server's manual knows nothing of these statements, so the
    /// message says what to write instead of sending the user there.
    pub expects: Option<&'static str>,
}

impl SyntaxError {
    /// MariaDB's `ER_PARSE_ERROR`.
    pub const CODE: u16 = 1064;
    pub const SQLSTATE: &'static str = "42000";

    /// The message: for msgproxy's own statements what the statement expects, then MariaDB's
    /// `near '...' at line N` (tools read that part); otherwise word for word as MariaDB writes it.
    pub fn message(&self) -> String {
        match self.expects {
            Some(usage) => format!(
                "You have an error in your SQL syntax; msgproxy expects {usage}; check the statement \
                 near '{}' at line {}",
                self.near, self.line
            ),
            None => format!(
                "You have an error in your SQL syntax; check the manual that corresponds to your MariaDB \
                 server version for the right syntax to use near '{}' at line {}",
                self.near, self.line
            ),
        }
    }
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for SyntaxError {}

/// Parses a statement that [`super::classify()`] found to be virtual (the `COM_QUERY` payload without its
/// command byte). Never panics, whatever the bytes.
///
/// Any other statement is a [`SyntaxError`] at its first word, since the proxy cannot answer it.
pub fn parse_virtual(sql: &[u8]) -> Result<VirtualStatement, SyntaxError> {
    parse_virtual_in(sql, Quoting::DEFAULT)
}

/// [`parse_virtual`] for a session whose strings are quoted as `quoting` says (its `sql_mode`).
pub fn parse_virtual_in(sql: &[u8], quoting: Quoting) -> Result<VirtualStatement, SyntaxError> {
    let sql = trim_statement(sql);
    Parser::with_quoting(sql, quoting)
        .statement()
        .map_err(|at| SyntaxError {
            near: near_text(sql.get(at.offset..).unwrap_or_default()),
            line: at.line,
            expects: work_queue::usage(super::classify(sql).keyword),
        })
}

/// Whether `sql` is a `SET` of `workload` and nothing else: the classifier's test for the one `SET` that is
/// virtual. Allocates nothing. `SET workload='olap', autocommit=0` is not (it is relayed, and the server
/// rejects the unknown variable), nor is a value Vitess would refuse.
pub(super) fn is_set_workload(sql: &[u8]) -> bool {
    let mut parser = Parser::new(trim_statement(sql));
    let set = parser.next();
    parser.is_keyword(set, "SET") && parser.set_workload().and_then(|()| parser.end()).is_ok()
}

/// Whether `sql` is `SHOW MESSAGE TABLES` (any case, comments and one `;` allowed): the
/// classifier's test for the one `SHOW` that is virtual. Allocates nothing. MariaDB has no `SHOW
/// MESSAGE ...`, so nothing the server would answer is taken; anything longer (`SHOW MESSAGE
/// TABLES LIKE 'x'`) is relayed, and the server's syntax error is the answer.
pub(super) fn is_show_message_tables(sql: &[u8]) -> bool {
    let mut parser = Parser::new(trim_statement(sql));
    let show = parser.next();
    parser.is_keyword(show, "SHOW")
        && parser.expect_keyword("MESSAGE").is_ok()
        && parser.expect_keyword("TABLES").is_ok()
        && parser.end().is_ok()
}

/// Where a syntax error is: what [`SyntaxError`] is made of, without the allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ErrorAt {
    offset: usize,
    line: u32,
}

impl From<Token> for ErrorAt {
    fn from(token: Token) -> Self {
        ErrorAt {
            offset: token.start,
            line: token.line,
        }
    }
}

/// A recursive-descent parser with one token of lookahead.
struct Parser<'a> {
    sql: &'a [u8],
    lexer: Lexer<'a>,
    quoting: Quoting,
    peeked: Option<Token>,
}

impl<'a> Parser<'a> {
    fn new(sql: &'a [u8]) -> Self {
        Parser {
            sql,
            lexer: Lexer::new(sql),
            quoting: Quoting::DEFAULT,
            peeked: None,
        }
    }

    fn with_quoting(sql: &'a [u8], quoting: Quoting) -> Self {
        Parser {
            sql,
            lexer: Lexer::with_quoting(sql, quoting),
            quoting,
            peeked: None,
        }
    }

    fn next(&mut self) -> Token {
        self.peeked
            .take()
            .unwrap_or_else(|| self.lexer.next_token())
    }

    fn peek(&mut self) -> Token {
        *self.peeked.get_or_insert_with(|| self.lexer.next_token())
    }

    fn bytes(&self, token: Token) -> &'a [u8] {
        self.sql.get(token.start..token.end).unwrap_or_default()
    }

    /// The token's text; an error at its first invalid byte when it is not UTF-8.
    fn text(&self, token: Token) -> Result<&'a str, ErrorAt> {
        std::str::from_utf8(self.bytes(token)).map_err(|e| ErrorAt {
            offset: token.start + e.valid_up_to(),
            line: token.line,
        })
    }

    /// An unquoted word spelling `keyword` (given in upper case).
    fn is_keyword(&self, token: Token, keyword: &str) -> bool {
        token.kind == TokenKind::Word
            && !token.after_dot
            && self.bytes(token).eq_ignore_ascii_case(keyword.as_bytes())
    }

    fn expect_keyword(&mut self, keyword: &str) -> Result<(), ErrorAt> {
        let token = self.next();
        if self.is_keyword(token, keyword) {
            Ok(())
        } else {
            Err(token.into())
        }
    }

    fn statement(&mut self) -> Result<VirtualStatement, ErrorAt> {
        let first = self.next();
        let statement = if self.is_keyword(first, "STREAM") {
            let columns = self.stream_columns()?;
            self.expect_keyword("FROM")?;
            let table = self.table_ref()?;
            let condition = self.stream_condition()?;
            VirtualStatement::Stream {
                table,
                columns,
                condition,
            }
        } else if self.is_keyword(first, "ACK") {
            let table = self.table_ref()?;
            let ids = self.ids()?;
            VirtualStatement::Ack { table, ids }
        } else if let Some(statement) = self.work_queue_statement(first)? {
            statement
        } else if self.is_keyword(first, "SET") {
            self.set_workload()?;
            VirtualStatement::SetWorkload
        } else if self.is_keyword(first, "SHOW") {
            self.expect_keyword("MESSAGE")?;
            self.expect_keyword("TABLES")?;
            VirtualStatement::ShowMessageTables
        } else {
            return Err(first.into());
        };
        self.end()?;
        Ok(statement)
    }

    /// One optional `;`, then the end.
    fn end(&mut self) -> Result<(), ErrorAt> {
        let mut token = self.next();
        if token.kind == TokenKind::Punct(b';') {
            token = self.next();
        }
        match token.kind {
            TokenKind::Eof => Ok(()),
            _ => Err(token.into()),
        }
    }

    /// `ident` or `ident.ident`.
    fn table_ref(&mut self) -> Result<TableName, ErrorAt> {
        let first = self.next();
        // `a.b` written together makes both parts identifiers whatever they spell; `a . b` does not.
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

    /// The name an identifier token stands for. `qualified`: a reserved word is an identifier here.
    fn identifier(&self, token: Token, qualified: bool) -> Result<String, ErrorAt> {
        match token.kind {
            TokenKind::Word if qualified || !is_reserved(self.bytes(token)) => {
                Ok(self.text(token)?.to_owned())
            }
            TokenKind::QuotedIdent => {
                unquote_identifier(self.text(token)?).ok_or_else(|| token.into())
            }
            _ => Err(token.into()),
        }
    }

    /// `id[, id ...]`.
    fn ids(&mut self) -> Result<Vec<AckId>, ErrorAt> {
        let mut ids = vec![self.id()?];
        while self.peek().kind == TokenKind::Punct(b',') {
            self.next();
            ids.push(self.id()?);
        }
        Ok(ids)
    }

    /// One id of `ACK`.
    fn id(&mut self) -> Result<AckId, ErrorAt> {
        let token = self.next();
        match token.kind {
            TokenKind::Number | TokenKind::Hex | TokenKind::Bit => {
                Ok(AckId::Literal(self.text(token)?.to_owned()))
            }
            // A string's bytes need not be UTF-8 (a binary id, a latin1 client): its value is
            // taken from the bytes; `written` is only ever shown.
            TokenKind::String => {
                let written = self.bytes(token);
                Ok(AckId::String {
                    written: String::from_utf8_lossy(written).into_owned(),
                    value: string_value(written, self.quoting),
                })
            }
            TokenKind::Punct(sign @ (b'-' | b'+')) => {
                let number = self.next();
                if number.kind != TokenKind::Number {
                    return Err(number.into());
                }
                let mut id = String::from(char::from(sign));
                id.push_str(self.text(number)?);
                Ok(AckId::Literal(id))
            }
            TokenKind::Word => self.introduced(token),
            _ => Err(token.into()),
        }
    }

    /// An id after a character set introducer `word` (`_binary`): a string (`_binary'k1'`,
    /// `_binary 'k1'`), or a hex or bit literal (`_binary X'6b31'`, `_binary 0x6b31`, `_binary b'1'`),
    /// which goes into the `IN (...)` list as written. The name is not checked against the server's
    /// character sets: an unknown one fails there, as it would have directly.
    fn introduced(&mut self, word: Token) -> Result<AckId, ErrorAt> {
        let written_word = self.text(word)?;
        let charset = match written_word.strip_prefix('_') {
            Some(name) if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                name
            }
            _ => return Err(word.into()),
        };
        let literal = self.next();
        match literal.kind {
            // `N'..'` names its own character set: `_binary N'x'` is a syntax error on the server too.
            // The string's bytes need not be UTF-8 (`_binary` ids rarely are).
            TokenKind::String if !matches!(self.bytes(literal).first(), Some(b'N' | b'n')) => {
                let bytes = self.bytes(literal);
                Ok(AckId::Introduced {
                    written: format!("{written_word}{}", String::from_utf8_lossy(bytes)),
                    charset: charset.to_owned(),
                    value: string_value(bytes, self.quoting),
                })
            }
            TokenKind::Hex | TokenKind::Bit => Ok(AckId::Literal(format!(
                "{written_word} {}",
                self.text(literal)?
            ))),
            _ => Err(literal.into()),
        }
    }

    /// What follows `SET` in `SET workload = 'olap'`. Allocates nothing: the classifier runs it.
    fn set_workload(&mut self) -> Result<(), ErrorAt> {
        let mut variable = self.next();
        if variable.kind == TokenKind::AtAt {
            variable = self.next();
            let scope = self.is_keyword(variable, "SESSION") || self.is_keyword(variable, "LOCAL");
            if scope && self.peek().kind == TokenKind::Punct(b'.') {
                self.next();
                variable = self.next();
            }
        } else if self.is_keyword(variable, "SESSION") || self.is_keyword(variable, "LOCAL") {
            variable = self.next();
        }
        let name = self.bytes(variable);
        let is_workload = match variable.kind {
            TokenKind::Word => name.eq_ignore_ascii_case(b"workload"),
            TokenKind::QuotedIdent => name.eq_ignore_ascii_case(b"`workload`"),
            _ => false,
        };
        if !is_workload {
            return Err(variable.into());
        }
        let assign = self.next();
        if !matches!(assign.kind, TokenKind::Punct(b'=') | TokenKind::ColonEq) {
            return Err(assign.into());
        }
        let value = self.next();
        let word = match (value.kind, self.bytes(value)) {
            (TokenKind::Word, word) => word,
            (TokenKind::String, [quote @ (b'\'' | b'"'), inner @ .., last]) if last == quote => {
                inner
            }
            _ => return Err(value.into()),
        };
        const WORKLOADS: [&[u8]; 4] = [b"olap", b"oltp", b"dba", b"unspecified"];
        if WORKLOADS.iter().any(|w| w.eq_ignore_ascii_case(word)) {
            Ok(())
        } else {
            Err(value.into())
        }
    }
}

/// MariaDB shows at most this many bytes of the statement in a syntax error...
const NEAR_MAX: usize = 80;
/// ...and when there are more, this many (on a character boundary) followed by `...`.
const NEAR_CUT: usize = 77;

/// The `near '...'` text for an error at the start of `rest` (see [`SyntaxError::near`]). Looks at no more
/// of `rest` than it shows, so a huge statement costs nothing extra.
pub(super) fn near_text(rest: &[u8]) -> String {
    // The server formats the text as a C string.
    let rest = rest
        .iter()
        .position(|&b| b == 0)
        .map_or(rest, |nul| rest.get(..nul).unwrap_or_default());
    let mut near = String::new();
    // Byte length of the longest whole-character prefix that fits in NEAR_CUT.
    let mut cut = 0;
    for chunk in rest.utf8_chunks() {
        let valid = chunk
            .valid()
            .chars()
            .map(|c| if c > '\u{FFFF}' { '?' } else { c });
        let invalid = chunk.invalid().iter().map(|_| '?');
        for c in valid.chain(invalid) {
            near.push(c);
            if near.len() <= NEAR_CUT {
                cut = near.len();
            }
            if near.len() > NEAR_MAX {
                near.truncate(cut);
                near.push_str("...");
                return near;
            }
        }
    }
    near
}

/// `NACK`, `EXTEND`, `REDRIVE` (MESSAGING.md §9-§10): the work-queue statements, apart from
/// the Vitess ones to keep each grammar readable on its own.
#[path = "work_queue.rs"]
mod work_queue;

#[cfg(test)]
#[path = "statements_tests.rs"]
mod tests;
