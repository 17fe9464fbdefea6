//! The `WHERE` filter of an event-stream group (docs/STREAMS.md §2): its syntax tree, its canonical
//! text, and its grammar's parsing half (called from `stream_statements.rs`).
//!
//! ```text
//! filter    = and_expr { OR and_expr }
//! and_expr  = not_expr { AND not_expr }
//! not_expr  = NOT not_expr | '(' filter ')' | predicate
//! predicate = column ('=' | '<>' | '!=') literal | literal ('=' | '<>' | '!=') column
//!           | column [NOT] IN '(' literal {, literal} ')' | column IS [NOT] NULL
//! literal   = [+|-] number | 'string' | "string" | N'string' | NULL | TRUE | FALSE
//! ```
//!
//! Anything else (`LIKE`, `<`, functions, two columns compared, ...) is refused as unsupported,
//! naming the construct. The filter is evaluated by msgproxy over the binlog's row values
//! (`streams::filter`), never sent to the server.

use super::lexer::{string_value, Token, TokenKind};

/// A group's filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    And(Box<Filter>, Box<Filter>),
    Or(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
    /// `column = literal` (`negated`: `<>` / `!=`).
    Compare {
        column: String,
        negated: bool,
        value: Literal,
    },
    /// `column [NOT] IN (literal, ...)`.
    In {
        column: String,
        negated: bool,
        values: Vec<Literal>,
    },
    /// `column IS [NOT] NULL`.
    IsNull {
        column: String,
        negated: bool,
    },
}

/// A literal of a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    Null,
    /// A number as written (sign joined): `5`, `-1.5`, `1e3`. `TRUE`/`FALSE` are `1`/`0`.
    Number(String),
    /// A string's value (quotes and escapes undone), in the client's character set.
    String(Vec<u8>),
}

impl Filter {
    /// The canonical text of the filter: what `SHOW STREAM GROUPS` shows and what two `STREAM`s
    /// naming one group must agree on. Column names lower-cased (MySQL compares them so),
    /// every binary operation in parentheses, strings quoted (or `X'..'` when not printable
    /// UTF-8) so that two filters are the same exactly when their texts are.
    pub fn canonical(&self) -> String {
        match self {
            Filter::And(a, b) => format!("({} AND {})", a.canonical(), b.canonical()),
            Filter::Or(a, b) => format!("({} OR {})", a.canonical(), b.canonical()),
            Filter::Not(a) => format!("NOT {}", a.canonical()),
            Filter::Compare {
                column,
                negated,
                value,
            } => format!(
                "{} {} {}",
                column_text(column),
                if *negated { "<>" } else { "=" },
                value.canonical()
            ),
            Filter::In {
                column,
                negated,
                values,
            } => {
                let list: Vec<String> = values.iter().map(Literal::canonical).collect();
                format!(
                    "{} {}IN ({})",
                    column_text(column),
                    if *negated { "NOT " } else { "" },
                    list.join(", ")
                )
            }
            Filter::IsNull { column, negated } => format!(
                "{} IS {}NULL",
                column_text(column),
                if *negated { "NOT " } else { "" }
            ),
        }
    }

    /// Every column the filter reads (lower case), each once.
    pub fn columns(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_columns(&mut out);
        out
    }

    fn collect_columns(&self, out: &mut Vec<String>) {
        match self {
            Filter::And(a, b) | Filter::Or(a, b) => {
                a.collect_columns(out);
                b.collect_columns(out);
            }
            Filter::Not(a) => a.collect_columns(out),
            Filter::Compare { column, .. }
            | Filter::In { column, .. }
            | Filter::IsNull { column, .. } => {
                let c = column.to_lowercase();
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
}

impl Literal {
    fn canonical(&self) -> String {
        match self {
            Literal::Null => "NULL".to_owned(),
            Literal::Number(n) => n.clone(),
            Literal::String(bytes) => match std::str::from_utf8(bytes) {
                Ok(s) if !s.chars().any(char::is_control) => {
                    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
                }
                _ => {
                    let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
                    format!("X'{hex}'")
                }
            },
        }
    }
}

fn column_text(column: &str) -> String {
    format!("`{}`", column.to_lowercase().replace('`', "``"))
}

/// What went wrong in a filter: a plain syntax error at a token, or a construct the filter
/// grammar does not take (named).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FilterError {
    Syntax(Token),
    Unsupported { what: String, at: Token },
}

/// The token source the filter parser reads from (the statement parser's lexer and lookahead).
pub(super) trait Tokens {
    fn next(&mut self) -> Token;
    fn peek(&mut self) -> Token;
    fn bytes(&self, token: Token) -> &[u8];
    fn is_keyword(&self, token: Token, keyword: &str) -> bool;
    /// A column name, if the token is an identifier.
    fn column(&self, token: Token) -> Option<String>;
    fn quoting(&self) -> super::Quoting;
}

/// Parses a filter up to (not including) the first token it cannot take at its top level.
pub(super) fn parse(t: &mut impl Tokens) -> Result<Filter, FilterError> {
    let mut left = and_expr(t)?;
    loop {
        let p = t.peek();
        if t.is_keyword(p, "OR") || is_double(t, p, b'|') {
            eat(t, p);
            let right = and_expr(t)?;
            left = Filter::Or(Box::new(left), Box::new(right));
        } else {
            return Ok(left);
        }
    }
}

/// `||` / `&&`: MariaDB's spellings of OR / AND (outside `PIPES_AS_CONCAT`).
fn is_double(t: &impl Tokens, token: Token, b: u8) -> bool {
    token.kind == TokenKind::Punct(b) && t.bytes(token) == [b]
}

/// Consumes `token` (already peeked), and its second half for `||` / `&&`.
fn eat(t: &mut impl Tokens, token: Token) {
    t.next();
    if let TokenKind::Punct(b) = token.kind {
        let second = t.peek();
        if second.kind == TokenKind::Punct(b) && second.start == token.end {
            t.next();
        }
    }
}

fn and_expr(t: &mut impl Tokens) -> Result<Filter, FilterError> {
    let mut left = not_expr(t)?;
    loop {
        let p = t.peek();
        if t.is_keyword(p, "AND") || is_double(t, p, b'&') {
            eat(t, p);
            let right = not_expr(t)?;
            left = Filter::And(Box::new(left), Box::new(right));
        } else {
            return Ok(left);
        }
    }
}

fn not_expr(t: &mut impl Tokens) -> Result<Filter, FilterError> {
    let p = t.peek();
    if t.is_keyword(p, "NOT") || p.kind == TokenKind::Punct(b'!') {
        t.next();
        return Ok(Filter::Not(Box::new(not_expr(t)?)));
    }
    if p.kind == TokenKind::Punct(b'(') {
        t.next();
        let inner = parse(t)?;
        let close = t.next();
        if close.kind != TokenKind::Punct(b')') {
            return Err(unexpected(t, close));
        }
        return Ok(inner);
    }
    predicate(t)
}

/// One side of a comparison.
enum Operand {
    Column(String),
    Literal(Literal),
}

fn predicate(t: &mut impl Tokens) -> Result<Filter, FilterError> {
    let first = t.next();
    let left = operand(t, first)?;
    let op = t.next();
    match left {
        Operand::Column(column) => {
            if t.is_keyword(op, "IS") {
                let mut negated = false;
                let mut word = t.next();
                if t.is_keyword(word, "NOT") {
                    negated = true;
                    word = t.next();
                }
                if !t.is_keyword(word, "NULL") {
                    return Err(unexpected(t, word));
                }
                return Ok(Filter::IsNull { column, negated });
            }
            let mut negated_in = false;
            let mut in_word = op;
            if t.is_keyword(op, "NOT") {
                negated_in = true;
                in_word = t.next();
            }
            if t.is_keyword(in_word, "IN") {
                return in_list(t, column, negated_in);
            }
            if negated_in {
                return Err(unexpected(t, in_word));
            }
            let negated = comparison(t, op)?;
            let right_token = t.next();
            match operand(t, right_token)? {
                Operand::Literal(value) => Ok(Filter::Compare {
                    column,
                    negated,
                    value,
                }),
                Operand::Column(_) => Err(FilterError::Unsupported {
                    what: "comparing two columns".to_owned(),
                    at: right_token,
                }),
            }
        }
        Operand::Literal(value) => {
            let negated = comparison(t, op)?;
            let right_token = t.next();
            match operand(t, right_token)? {
                Operand::Column(column) => Ok(Filter::Compare {
                    column,
                    negated,
                    value,
                }),
                Operand::Literal(_) => Err(FilterError::Unsupported {
                    what: "comparing two literals".to_owned(),
                    at: right_token,
                }),
            }
        }
    }
}

/// `=` (false), `<>` or `!=` (true); anything else is an error at `op`.
fn comparison(t: &mut impl Tokens, op: Token) -> Result<bool, FilterError> {
    match op.kind {
        TokenKind::Punct(b'=') => Ok(false),
        TokenKind::Punct(b'<') | TokenKind::Punct(b'!') => {
            let want = if op.kind == TokenKind::Punct(b'<') {
                b'>'
            } else {
                b'='
            };
            let second = t.peek();
            if second.kind == TokenKind::Punct(want) && second.start == op.end {
                t.next();
                Ok(true)
            } else {
                Err(unexpected(t, op))
            }
        }
        _ => Err(unexpected(t, op)),
    }
}

fn in_list(t: &mut impl Tokens, column: String, negated: bool) -> Result<Filter, FilterError> {
    let open = t.next();
    if open.kind != TokenKind::Punct(b'(') {
        return Err(unexpected(t, open));
    }
    let mut values = Vec::new();
    loop {
        let token = t.next();
        match operand(t, token)? {
            Operand::Literal(l) => values.push(l),
            Operand::Column(_) => {
                return Err(FilterError::Unsupported {
                    what: "a column inside IN (...)".to_owned(),
                    at: token,
                })
            }
        }
        let sep = t.next();
        match sep.kind {
            TokenKind::Punct(b',') => continue,
            TokenKind::Punct(b')') => break,
            _ => return Err(unexpected(t, sep)),
        }
    }
    Ok(Filter::In {
        column,
        negated,
        values,
    })
}

fn operand(t: &mut impl Tokens, token: Token) -> Result<Operand, FilterError> {
    match token.kind {
        TokenKind::Number => Ok(Operand::Literal(Literal::Number(text(t, token)))),
        TokenKind::Punct(sign @ (b'-' | b'+')) => {
            let number = t.next();
            if number.kind != TokenKind::Number {
                return Err(unexpected(t, number));
            }
            let digits = text(t, number);
            Ok(Operand::Literal(Literal::Number(if sign == b'-' {
                format!("-{digits}")
            } else {
                digits
            })))
        }
        TokenKind::String => Ok(Operand::Literal(Literal::String(string_value(
            t.bytes(token),
            t.quoting(),
        )))),
        TokenKind::Word if t.is_keyword(token, "NULL") => Ok(Operand::Literal(Literal::Null)),
        TokenKind::Word if t.is_keyword(token, "TRUE") => {
            Ok(Operand::Literal(Literal::Number("1".to_owned())))
        }
        TokenKind::Word if t.is_keyword(token, "FALSE") => {
            Ok(Operand::Literal(Literal::Number("0".to_owned())))
        }
        TokenKind::Word | TokenKind::QuotedIdent => {
            // A word followed by `(` is a function call; `a.b` a qualified column.
            let next = t.peek();
            if next.kind == TokenKind::Punct(b'(') && token.kind == TokenKind::Word {
                return Err(FilterError::Unsupported {
                    what: format!("the function {}()", text(t, token).to_uppercase()),
                    at: token,
                });
            }
            if next.kind == TokenKind::Punct(b'.') {
                return Err(FilterError::Unsupported {
                    what: "qualified column names (write the column alone)".to_owned(),
                    at: token,
                });
            }
            match t.column(token) {
                Some(c) => Ok(Operand::Column(c)),
                None => Err(unexpected(t, token)),
            }
        }
        TokenKind::Hex | TokenKind::Bit => Err(FilterError::Unsupported {
            what: "hex and bit literals".to_owned(),
            at: token,
        }),
        _ => Err(unexpected(t, token)),
    }
}

fn text(t: &impl Tokens, token: Token) -> String {
    String::from_utf8_lossy(t.bytes(token)).into_owned()
}

/// The error for a token the filter grammar cannot take there: unsupported when it is an
/// operator or keyword of SQL's richer expressions, a syntax error otherwise.
fn unexpected(t: &impl Tokens, token: Token) -> FilterError {
    const UNSUPPORTED_WORDS: [&str; 14] = [
        "LIKE", "BETWEEN", "REGEXP", "RLIKE", "SELECT", "EXISTS", "CASE", "DIV", "MOD", "XOR",
        "SOUNDS", "COLLATE", "BINARY", "INTERVAL",
    ];
    let bytes = t.bytes(token);
    match token.kind {
        TokenKind::Word
            if UNSUPPORTED_WORDS
                .iter()
                .any(|w| w.as_bytes().eq_ignore_ascii_case(bytes)) =>
        {
            FilterError::Unsupported {
                what: String::from_utf8_lossy(bytes).to_uppercase(),
                at: token,
            }
        }
        TokenKind::Punct(
            b'<' | b'>' | b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'~' | b'|' | b'&',
        )
        | TokenKind::AtAt
        | TokenKind::ColonEq => FilterError::Unsupported {
            what: format!("the operator {}", String::from_utf8_lossy(bytes)),
            at: token,
        },
        TokenKind::Punct(b'@') => FilterError::Unsupported {
            what: "variables".to_owned(),
            at: token,
        },
        _ => FilterError::Syntax(token),
    }
}
