//! A small MariaDB-compatible lexer over raw statement bytes, for the statements the proxy parses itself.
//!
//! It is hand-written rather than sqlparser's tokenizer because the virtual statements must fail exactly
//! where, and with the line number, MariaDB's own lexer would, and because the classifier uses it on every
//! `SET` statement where nothing may be allocated. sqlparser's tokenizer wants a `&str` (the statement is
//! bytes, possibly not UTF-8), reports positions as line/column in characters, counts the newlines inside
//! string literals (MariaDB does not), treats executable comments (`/*! ... */`) as comments (MariaDB runs
//! them as code), reads `0b101` as a word, and allocates a `String` per token.
//!
//! What it copies from MariaDB (`sql_lex.cc`, default `sql_mode`):
//! - whitespace is space, tab, LF, VT, FF, CR; comments are `/* */` (not nested), `# ...` and `-- ...`, where
//!   `--` starts a comment only before whitespace, a control character or the end;
//! - `/*!`, `/*!NNNNN`, `/*M!` and `/*M!NNNNNN` open an executable comment whose content is code (the version
//!   is not compared with the backend's, as in the classifier); its `*/` is skipped;
//! - strings are `'...'` or `"..."` with doubled quotes and, unless the session has `NO_BACKSLASH_ESCAPES`
//!   ([`Quoting`]), backslash escapes (`ANSI_QUOTES` is not modelled: `"..."` is always a string);
//!   identifiers are runs of letters, digits, `_`, `$` and any byte `>= 0x80`, or backtick-quoted with
//!   doubled backticks;
//! - a word directly followed by `.` and an identifier byte is a qualifier, and the word after that dot is
//!   an identifier even when it is a keyword or all digits (`mydb.select`, `mydb.123`);
//! - the line of a token is 1 plus the newlines in the whitespace and comments before it: newlines inside
//!   quoted strings and identifiers are not counted, and neither are the ones in leading whitespace, which
//!   the server strips before it lexes (see [`trim_statement`]).

/// How string literals are quoted in the session: the one part of `sql_mode` that changes where a string
/// ends and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoting {
    /// `\` escapes the next byte inside `'...'` and `"..."` (the default); off under `NO_BACKSLASH_ESCAPES`,
    /// where a backslash is an ordinary character.
    pub backslash_escapes: bool,
}

impl Quoting {
    /// The default `sql_mode`'s quoting.
    pub const DEFAULT: Quoting = Quoting {
        backslash_escapes: true,
    };
    /// `sql_mode` with `NO_BACKSLASH_ESCAPES`.
    pub const NO_BACKSLASH_ESCAPES: Quoting = Quoting {
        backslash_escapes: false,
    };
}

/// The kinds of token the parsers tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokenKind {
    /// An unquoted identifier or keyword: `stream`, `t1`, `1abc`, `café` (may hold invalid UTF-8).
    Word,
    /// A backtick-quoted identifier, backticks included.
    QuotedIdent,
    /// A string literal, quotes included: `'a''b'`, `"x"`, `N'x'`.
    String,
    /// An unsigned number: `1`, `1.5`, `1.`, `.5`, `1e3`, `1.5E-3`.
    Number,
    /// A hexadecimal literal: `0x1F`, `X'1f'`.
    Hex,
    /// A bit literal: `0b101`, `b'101'`.
    Bit,
    /// `@@`, which starts a system variable.
    AtAt,
    /// `:=`.
    ColonEq,
    /// Any other single byte: `*`, `.`, `,`, `;`, `=`, `-`, a control byte, ...
    Punct(u8),
    /// What the lexer cannot read: an unterminated string, quoted identifier or comment (the token starts
    /// where it opens), a malformed `X'..'` / `B'..'`, or an executable comment that is never closed (the
    /// token is then at the end). No grammar accepts it, so it always becomes the syntax error.
    Invalid,
    /// The end of the statement.
    Eof,
}

/// One token: its kind and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Token {
    pub kind: TokenKind,
    /// Byte offsets of the token in the statement the lexer was given.
    pub start: usize,
    pub end: usize,
    /// The line the server would report for an error at this token (1-based).
    pub line: u32,
    /// A [`TokenKind::Word`] lexed right after `qualifier.`: an identifier whatever it spells.
    pub after_dot: bool,
}

/// The part of a statement MariaDB lexes: `alloc_query()` drops leading whitespace, and trailing whitespace
/// and `;` (so `STREAM * FROM t ; ;` is one statement, and leading newlines do not count as lines).
pub(super) fn trim_statement(sql: &[u8]) -> &[u8] {
    let start = sql.iter().position(|&b| !is_space(b)).unwrap_or(sql.len());
    let rest = sql.get(start..).unwrap_or_default();
    let end = rest
        .iter()
        .rposition(|&b| !is_space(b) && b != b';')
        .map_or(0, |i| i + 1);
    rest.get(..end).unwrap_or_default()
}

/// Whitespace as MariaDB's lexer sees it: space, tab, LF, VT, FF, CR.
pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Bytes of an unquoted identifier: ASCII letters, digits, `_`, `$`, and any non-ASCII byte.
pub(super) fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// The name a [`TokenKind::QuotedIdent`] token (backticks included) stands for: without its
/// backticks, a doubled backtick as one. `None` for an empty name (`` `` ``), which the server
/// refuses.
pub fn unquote_identifier(token: &str) -> Option<String> {
    let inner = token.get(1..token.len().checked_sub(1)?)?;
    (!inner.is_empty()).then(|| inner.replace("``", "`"))
}

/// A token with its text, for the small parsers that walk a statement word by word (`KILL QUERY`,
/// `PREPARE ... FROM`).
pub(super) type Spelled<'a> = (TokenKind, &'a [u8]);

/// Whether a token is the unquoted word `word`, in any case.
pub(super) fn is_word((kind, text): Spelled<'_>, word: &str) -> bool {
    kind == TokenKind::Word && text.eq_ignore_ascii_case(word.as_bytes())
}

/// A [`trim_statement`]ed statement's tokens with their text, one [`SpelledTokens::next`] at a time.
#[derive(Clone)]
pub(super) struct SpelledTokens<'a> {
    sql: &'a [u8],
    lexer: Lexer<'a>,
}

impl<'a> SpelledTokens<'a> {
    pub fn new(sql: &'a [u8], quoting: Quoting) -> Self {
        let sql = trim_statement(sql);
        SpelledTokens {
            sql,
            lexer: Lexer::with_quoting(sql, quoting),
        }
    }

    /// The next token and its text (empty at the end).
    pub fn next(&mut self) -> Spelled<'a> {
        let token = self.lexer.next_token();
        let sql: &'a [u8] = self.sql;
        (
            token.kind,
            sql.get(token.start..token.end).unwrap_or_default(),
        )
    }
}

/// The leading words of a statement, one at a time, for readers outside `sql/` that only need its first few
/// words (what a binlog query event is: `XA COMMIT ...`, `ROLLBACK TO ...`). The statement is read by the
/// one lexer, so comments, executable-comment markers and quoting are what they are to the server. Never
/// allocates, never panics.
#[derive(Clone)]
pub struct Words<'a> {
    sql: &'a [u8],
    lexer: Lexer<'a>,
}

impl<'a> Words<'a> {
    /// The words of `sql` (one statement, default `sql_mode`).
    pub fn new(sql: &'a [u8]) -> Self {
        Words {
            sql,
            lexer: Lexer::new(sql),
        }
    }

    /// The next token when it is an unquoted word (a keyword or a bare identifier); `None` for any other
    /// token and at the end.
    pub fn next_word(&mut self) -> Option<&'a [u8]> {
        let token = self.lexer.next_token();
        let sql: &'a [u8] = self.sql;
        (token.kind == TokenKind::Word).then(|| sql.get(token.start..token.end).unwrap_or_default())
    }

    /// Whether the next token is the unquoted word `word`, in any case (it is read either way).
    pub fn next_is(&mut self, word: &str) -> bool {
        self.next_word()
            .is_some_and(|w| w.eq_ignore_ascii_case(word.as_bytes()))
    }

    /// The next token, as far as a reader of names cares (`None` at the end).
    pub fn next_piece(&mut self) -> Option<Piece<'a>> {
        let token = self.lexer.next_token();
        let sql: &'a [u8] = self.sql;
        let text = sql.get(token.start..token.end).unwrap_or_default();
        Some(match token.kind {
            TokenKind::Eof => return None,
            TokenKind::Word => Piece::Word(text),
            TokenKind::QuotedIdent => Piece::QuotedIdent(text),
            TokenKind::Punct(b) => Piece::Punct(b),
            _ => Piece::Other,
        })
    }

    /// What follows the tokens read so far, from the next one on (empty at the end).
    pub fn rest(&self) -> &'a [u8] {
        let next = self.lexer.clone().next_token();
        let sql: &'a [u8] = self.sql;
        sql.get(next.start..).unwrap_or_default()
    }
}

/// A token as [`Words::next_piece`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// An unquoted word: a keyword or a bare identifier.
    Word(&'a [u8]),
    /// A backtick-quoted identifier, backticks included ([`unquote_identifier`]).
    QuotedIdent(&'a [u8]),
    /// One byte of punctuation: `.`, `,`, `(`, ...
    Punct(u8),
    /// A literal, or what cannot be read (an unterminated string or comment).
    Other,
}

/// Turns a statement into tokens, one [`Lexer::next_token`] at a time. Never allocates, never panics; after
/// the end it keeps returning [`TokenKind::Eof`] (or [`TokenKind::Invalid`] for an open executable comment).
#[derive(Debug, Clone)]
pub(super) struct Lexer<'a> {
    sql: &'a [u8],
    pos: usize,
    line: u32,
    /// Inside `/*! ... */`: its `*/` closes it instead of being two tokens.
    in_executable: bool,
    /// The marker (`/*!99999`, `/*M!100500`) of the open executable comment, when it has version
    /// digits: see [`Lexer::version_gate`].
    gate: Option<(usize, usize)>,
    /// The last token was an identifier directly followed by `.` and an identifier byte.
    qualifier: bool,
    /// The last token was that `.`: the next word is an identifier whatever it spells.
    after_dot: bool,
    quoting: Quoting,
}

impl<'a> Lexer<'a> {
    /// A lexer over `sql`, which should already be [`trim_statement`]ed for MariaDB's line numbers, in the
    /// default `sql_mode`.
    pub fn new(sql: &'a [u8]) -> Self {
        Lexer::with_quoting(sql, Quoting::DEFAULT)
    }

    /// A lexer that reads string literals as a session with `quoting` does.
    pub fn with_quoting(sql: &'a [u8], quoting: Quoting) -> Self {
        Lexer {
            sql,
            pos: 0,
            line: 1,
            in_executable: false,
            gate: None,
            qualifier: false,
            after_dot: false,
            quoting,
        }
    }

    /// The next token.
    pub fn next_token(&mut self) -> Token {
        let after_dot = std::mem::take(&mut self.after_dot);
        let qualifier = std::mem::take(&mut self.qualifier);
        if let Some(invalid) = self.skip_trivia() {
            return invalid;
        }
        let start = self.pos;
        let line = self.line;
        let token = |kind, end| Token {
            kind,
            start,
            end,
            line,
            after_dot: false,
        };
        let rest = self.rest();
        let Some(&first) = rest.first() else {
            let kind = if self.in_executable {
                TokenKind::Invalid
            } else {
                TokenKind::Eof
            };
            return token(kind, start);
        };
        let second = rest.get(1).copied();
        let escapes = self.quoting.backslash_escapes;
        let (kind, end) = match (first, second) {
            (b, _) if after_dot && is_identifier_byte(b) => {
                let end = self.identifier_end(start);
                self.pos = end;
                self.qualifier = self.sql.get(end) == Some(&b'.')
                    && self
                        .sql
                        .get(end + 1)
                        .is_some_and(|&b| is_identifier_byte(b));
                return Token {
                    after_dot: true,
                    ..token(TokenKind::Word, end)
                };
            }
            (b'`', _) => self.quoted(TokenKind::QuotedIdent, start, b'`', false),
            (b'\'' | b'"', _) => self.quoted(TokenKind::String, start, first, escapes),
            (b'n' | b'N', Some(b'\'')) => self.quoted(TokenKind::String, start + 1, b'\'', escapes),
            (b'x' | b'X', Some(b'\'')) => self.quoted_digits(start, TokenKind::Hex),
            (b'b' | b'B', Some(b'\'')) => self.quoted_digits(start, TokenKind::Bit),
            (b'0'..=b'9', _) => self.number(start),
            (b'.', Some(b'0'..=b'9')) if !qualifier => {
                (TokenKind::Number, self.fraction_end(start))
            }
            (b, _) if is_identifier_byte(b) => (TokenKind::Word, self.identifier_end(start)),
            (b'@', Some(b'@')) => (TokenKind::AtAt, start + 2),
            (b':', Some(b'=')) => (TokenKind::ColonEq, start + 2),
            (b'.', _) if qualifier => {
                self.after_dot = true;
                (TokenKind::Punct(b'.'), start + 1)
            }
            (b, _) => (TokenKind::Punct(b), start + 1),
        };
        self.pos = end;
        if matches!(kind, TokenKind::Word | TokenKind::QuotedIdent) {
            self.qualifier = self.sql.get(end) == Some(&b'.')
                && self
                    .sql
                    .get(end + 1)
                    .is_some_and(|&b| is_identifier_byte(b));
        }
        token(kind, end)
    }

    fn rest(&self) -> &'a [u8] {
        self.sql.get(self.pos..).unwrap_or_default()
    }

    /// Skips whitespace and comments, counting lines. An unterminated `/* ...` is returned as the token.
    fn skip_trivia(&mut self) -> Option<Token> {
        loop {
            let rest = self.rest();
            match rest {
                [b'\n', ..] => {
                    self.line = self.line.saturating_add(1);
                    self.pos += 1;
                }
                [b, ..] if is_space(*b) => self.pos += 1,
                [b'/', b'*', b'!', ..] if !self.in_executable => self.open_executable(3),
                [b'/', b'*', b'M', b'!', ..] if !self.in_executable => self.open_executable(4),
                [b'/', b'*', body @ ..] => {
                    let Some(len) = body.windows(2).position(|w| w == b"*/") else {
                        return Some(Token {
                            kind: TokenKind::Invalid,
                            start: self.pos,
                            end: self.sql.len(),
                            line: self.line,
                            after_dot: false,
                        });
                    };
                    self.count_lines(body.get(..len).unwrap_or_default());
                    self.pos += 2 + len + 2;
                }
                [b'*', b'/', ..] if self.in_executable => {
                    self.in_executable = false;
                    self.gate = None;
                    self.pos += 2;
                }
                [b'-', b'-', after @ ..]
                    if after
                        .first()
                        .is_none_or(|&b| is_space(b) || b.is_ascii_control()) =>
                {
                    self.pos = self.line_end(self.pos + 2);
                }
                [b'#', ..] => self.pos = self.line_end(self.pos + 1),
                _ => return None,
            }
        }
    }

    /// Opens the executable comment whose marker (`/*!` or `/*M!`, `marker_len` bytes) is at the
    /// current position, and skips its version digits.
    fn open_executable(&mut self, marker_len: usize) {
        let start = self.pos;
        let digits_from = start + marker_len;
        let end = self.digits_end(digits_from);
        self.in_executable = true;
        self.gate = (end > digits_from).then_some((start, end));
        self.pos = end;
    }

    /// The marker (`/*!99999`, `/*M!100500`) of the version-gated executable comment the last token
    /// is in, if it is in one; `None` for plain code and unversioned `/*!` / `/*M!` comments, which
    /// always run.
    pub fn version_gate(&self) -> Option<&'a [u8]> {
        let sql: &'a [u8] = self.sql;
        self.gate.and_then(|(start, end)| sql.get(start..end))
    }

    fn count_lines(&mut self, text: &[u8]) {
        let newlines = text.iter().filter(|&&b| b == b'\n').count();
        self.line = self
            .line
            .saturating_add(u32::try_from(newlines).unwrap_or(u32::MAX));
    }

    /// The offset of the newline that ends a line comment (the newline is whitespace and counted there).
    fn line_end(&self, from: usize) -> usize {
        let rest = self.sql.get(from..).unwrap_or_default();
        rest.iter()
            .position(|&b| b == b'\n')
            .map_or(self.sql.len(), |i| from + i)
    }

    fn digits_end(&self, from: usize) -> usize {
        let rest = self.sql.get(from..).unwrap_or_default();
        from + rest.iter().take_while(|b| b.is_ascii_digit()).count()
    }

    fn identifier_end(&self, from: usize) -> usize {
        let rest = self.sql.get(from..).unwrap_or_default();
        from + rest.iter().take_while(|&&b| is_identifier_byte(b)).count()
    }

    /// A quoted token of `kind` whose opening `quote` is at `open`; [`TokenKind::Invalid`] up to the end
    /// of the statement when it is never closed (nothing after it is read).
    fn quoted(
        &self,
        kind: TokenKind,
        open: usize,
        quote: u8,
        backslash: bool,
    ) -> (TokenKind, usize) {
        match self.quoted_end(open, quote, backslash) {
            Some(end) => (kind, end),
            None => (TokenKind::Invalid, self.sql.len()),
        }
    }

    /// The end of a quoted token whose opening `quote` is at `open`, if it is closed. A doubled quote
    /// stands for one; with `backslash`, `\` escapes the next byte.
    fn quoted_end(&self, open: usize, quote: u8, backslash: bool) -> Option<usize> {
        let body = self.sql.get(open + 1..).unwrap_or_default();
        let mut i = 0;
        while let Some(&b) = body.get(i) {
            if backslash && b == b'\\' {
                i += 2;
            } else if b == quote {
                if body.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return Some(open + 1 + i + 1);
                }
            } else {
                i += 1;
            }
        }
        None
    }

    /// `X'..'` (an even number of hex digits) or `B'..'` (binary digits); anything else in the quotes is
    /// [`TokenKind::Invalid`], as it is to the server.
    fn quoted_digits(&self, start: usize, kind: TokenKind) -> (TokenKind, usize) {
        let body = self.sql.get(start + 2..).unwrap_or_default();
        let Some(len) = body.iter().position(|&b| b == b'\'') else {
            return (TokenKind::Invalid, self.sql.len());
        };
        let digits = body.get(..len).unwrap_or_default();
        let valid = match kind {
            TokenKind::Hex => digits.len() % 2 == 0 && digits.iter().all(u8::is_ascii_hexdigit),
            _ => digits.iter().all(|&b| b == b'0' || b == b'1'),
        };
        let end = start + 2 + len + 1;
        (if valid { kind } else { TokenKind::Invalid }, end)
    }

    /// A token starting with a digit: a number, `0x..`, `0b..`, or an identifier such as `1abc` or `0x1g`.
    fn number(&self, start: usize) -> (TokenKind, usize) {
        let word_end = self.identifier_end(start);
        let word = self.sql.get(start..word_end).unwrap_or_default();
        // Only a lower-case prefix makes a literal: `0X1F` is an identifier to MariaDB.
        for (prefix, kind, digit) in [
            (
                b"0x",
                TokenKind::Hex,
                u8::is_ascii_hexdigit as fn(&u8) -> bool,
            ),
            (b"0b", TokenKind::Bit, |b: &u8| *b == b'0' || *b == b'1'),
        ] {
            if let Some(digits) = word.strip_prefix(prefix) {
                if !digits.is_empty() && digits.iter().all(digit) {
                    return (kind, word_end);
                }
            }
        }
        let digits_end = self.digits_end(start);
        if let Some(end) = self.exponent_end(digits_end) {
            return (TokenKind::Number, end);
        }
        if digits_end < word_end {
            return (TokenKind::Word, word_end);
        }
        if self.sql.get(digits_end) == Some(&b'.') {
            return (TokenKind::Number, self.fraction_end(digits_end));
        }
        (TokenKind::Number, digits_end)
    }

    /// The end of `.digits` with an optional exponent; `dot` is the offset of the `.`.
    fn fraction_end(&self, dot: usize) -> usize {
        let digits_end = self.digits_end(dot + 1);
        self.exponent_end(digits_end).unwrap_or(digits_end)
    }

    /// The end of an exponent `e[+-]digits` starting at `at`, if there is one.
    fn exponent_end(&self, at: usize) -> Option<usize> {
        let rest = self.sql.get(at..).unwrap_or_default();
        let sign = match rest {
            [b'e' | b'E', b'+' | b'-', d, ..] if d.is_ascii_digit() => 2,
            [b'e' | b'E', d, ..] if d.is_ascii_digit() => 1,
            _ => return None,
        };
        Some(self.digits_end(at + sign))
    }
}

/// The value of a [`TokenKind::String`] token (`'...'`, `"..."` or `N'...'`, quotes included) as the server
/// reads it with `quoting`: a doubled quote is one, and with backslash escapes `\0 \b \n \r \t \Z` are
/// NUL, backspace, LF, CR, tab and 0x1A, `\%` and `\_` stay as written (for `LIKE`), and a backslash
/// before any other byte stands for that byte (`sql_lex.cc`, `get_text`).
pub(super) fn string_value(token: &[u8], quoting: Quoting) -> Vec<u8> {
    let token = match token {
        [b'n' | b'N', rest @ ..] => rest,
        _ => token,
    };
    let (quote, body) = match token {
        [quote, body @ .., last] if last == quote => (*quote, body),
        _ => return Vec::new(),
    };
    let mut value = Vec::with_capacity(body.len());
    let mut bytes = body.iter().copied();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' if quoting.backslash_escapes => match bytes.next() {
                Some(b'0') => value.push(0),
                Some(b'b') => value.push(8),
                Some(b'n') => value.push(b'\n'),
                Some(b'r') => value.push(b'\r'),
                Some(b't') => value.push(b'\t'),
                Some(b'Z') => value.push(0x1a),
                Some(kept @ (b'%' | b'_')) => value.extend_from_slice(&[b'\\', kept]),
                Some(other) => value.push(other),
                None => value.push(b'\\'),
            },
            // The lexer only ends a string at a quote that is not doubled, so one inside is doubled.
            b if b == quote => {
                bytes.next();
                value.push(quote);
            }
            b => value.push(b),
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tokens of `sql` (up to the end) as (kind, text, line).
    fn lex(sql: &str) -> Vec<(TokenKind, &str, u32)> {
        let mut lexer = Lexer::new(sql.as_bytes());
        let mut out = Vec::new();
        loop {
            let t = lexer.next_token();
            if t.kind == TokenKind::Eof {
                return out;
            }
            out.push((t.kind, &sql[t.start..t.end], t.line));
            if t.kind == TokenKind::Invalid {
                return out;
            }
        }
    }

    fn kinds(sql: &str) -> Vec<(TokenKind, &str)> {
        lex(sql).into_iter().map(|(k, s, _)| (k, s)).collect()
    }

    use TokenKind::*;

    #[test]
    fn trims_like_alloc_query() {
        assert_eq!(trim_statement(b"  \n\tACK t 1 ;; \n;"), b"ACK t 1");
        assert_eq!(trim_statement(b"ACK t 1; -- c"), b"ACK t 1; -- c");
        assert_eq!(trim_statement(b" ; ;"), b"");
        assert_eq!(trim_statement(b""), b"");
        assert_eq!(trim_statement(b"/* c */ x"), b"/* c */ x");
    }

    #[test]
    fn words_numbers_and_literals() {
        assert_eq!(
            kinds("STREAM * FROM mydb.t"),
            [
                (Word, "STREAM"),
                (Punct(b'*'), "*"),
                (Word, "FROM"),
                (Word, "mydb"),
                (Punct(b'.'), "."),
                (Word, "t")
            ]
        );
        assert_eq!(
            kinds("1 1.5 1. .5 1e3 1.5E-3 2e+1 0x1F 0b101 X'1f' x'' b'01' B'' 'a' \"b\" N'c'"),
            [
                (Number, "1"),
                (Number, "1.5"),
                (Number, "1."),
                (Number, ".5"),
                (Number, "1e3"),
                (Number, "1.5E-3"),
                (Number, "2e+1"),
                (Hex, "0x1F"),
                (Bit, "0b101"),
                (Hex, "X'1f'"),
                (Hex, "x''"),
                (Bit, "b'01'"),
                (Bit, "B''"),
                (String, "'a'"),
                (String, "\"b\""),
                (String, "N'c'"),
            ]
        );
        // Identifiers that start with digits, and what MariaDB splits.
        assert_eq!(
            kinds("1abc 0x1g 0X1F 0b2 0x 1e 1e5x 1.5abc"),
            [
                (Word, "1abc"),
                (Word, "0x1g"),
                (Word, "0X1F"),
                (Word, "0b2"),
                (Word, "0x"),
                (Word, "1e"),
                (Number, "1e5"),
                (Word, "x"),
                (Number, "1.5"),
                (Word, "abc"),
            ]
        );
        assert_eq!(
            kinds("@@session.workload := @x"),
            [
                (AtAt, "@@"),
                (Word, "session"),
                (Punct(b'.'), "."),
                (Word, "workload"),
                (ColonEq, ":="),
                (Punct(b'@'), "@"),
                (Word, "x"),
            ]
        );
        assert_eq!(kinds("café $x_1"), [(Word, "café"), (Word, "$x_1")]);
    }

    #[test]
    fn quoting() {
        assert_eq!(
            kinds(r#"'a''b' 'c\'d' "e""f" "g\"h" `i``j` 'k\\'"#),
            [
                (String, "'a''b'"),
                (String, r"'c\'d'"),
                (String, r#""e""f""#),
                (String, r#""g\"h""#),
                (QuotedIdent, "`i``j`"),
                (String, r"'k\\'"),
            ]
        );
        // A backslash does not escape inside backticks.
        assert_eq!(kinds(r"`a\` x"), [(QuotedIdent, r"`a\`"), (Word, "x")]);
        assert_eq!(kinds("x 'open"), [(Word, "x"), (Invalid, "'open")]);
        assert_eq!(kinds(r"'a\'"), [(Invalid, r"'a\'")]);
        assert_eq!(kinds("`open"), [(Invalid, "`open")]);
        assert_eq!(kinds("X'1'"), [(Invalid, "X'1'")]);
        assert_eq!(kinds("X'zz'"), [(Invalid, "X'zz'")]);
        assert_eq!(kinds("b'12'"), [(Invalid, "b'12'")]);
        assert_eq!(kinds("X'1f"), [(Invalid, "X'1f")]);
    }

    #[test]
    fn qualified_names() {
        // After `ident.`, a keyword or a number is an identifier.
        let mut lexer = Lexer::new(b"mydb.123 db.select `q`.1e5 t . 5 t.`u`");
        let words: Vec<_> = std::iter::from_fn(|| {
            let t = lexer.next_token();
            (t.kind != Eof).then_some(t)
        })
        .map(|t| (t.kind, t.after_dot))
        .collect();
        assert_eq!(
            words,
            [
                (Word, false),
                (Punct(b'.'), false),
                (Word, true),
                (Word, false),
                (Punct(b'.'), false),
                (Word, true),
                (QuotedIdent, false),
                (Punct(b'.'), false),
                (Word, true),
                (Word, false),
                (Punct(b'.'), false),
                (Number, false),
                (Word, false),
                (Punct(b'.'), false),
                (QuotedIdent, false),
            ]
        );
        // Without a qualifier, `.5` is a number.
        assert_eq!(
            kinds("1, .5"),
            [(Number, "1"), (Punct(b','), ","), (Number, ".5")]
        );
    }

    #[test]
    fn comments_and_lines() {
        assert_eq!(
            lex("a /* x\n y */ b -- c\n#d\n\tc --x"),
            [
                (Word, "a", 1),
                (Word, "b", 2),
                (Word, "c", 4),
                (Punct(b'-'), "-", 4),
                (Punct(b'-'), "-", 4),
                (Word, "x", 4),
            ]
        );
        // Newlines inside quoted tokens do not count; `\r` alone is no newline.
        assert_eq!(
            lex("'a\nb' `c\nd` \"e\nf\"\r\ng\rh"),
            [
                (String, "'a\nb'", 1),
                (QuotedIdent, "`c\nd`", 1),
                (String, "\"e\nf\"", 1),
                (Word, "g", 2),
                (Word, "h", 2),
            ]
        );
        assert_eq!(
            lex("a\n/* open\n"),
            [(Word, "a", 1), (Invalid, "/* open\n", 2)]
        );
        assert_eq!(lex("--"), []);
        assert_eq!(lex("a --\tb\nc"), [(Word, "a", 1), (Word, "c", 2)]);
    }

    #[test]
    fn executable_comments_are_code() {
        assert_eq!(
            kinds("/*!40101 SET x */ /*M!100101 y */ /*! /* c */ z */"),
            [(Word, "SET"), (Word, "x"), (Word, "y"), (Word, "z")]
        );
        assert_eq!(kinds("/*!x"), [(Word, "x"), (Invalid, "")]);
        // Outside an executable comment `*/` is two tokens.
        assert_eq!(
            kinds("a */"),
            [(Word, "a"), (Punct(b'*'), "*"), (Punct(b'/'), "/")]
        );
    }

    #[test]
    fn no_backslash_escapes() {
        let lex_nbe = |sql: &'static str| {
            let mut lexer = Lexer::with_quoting(sql.as_bytes(), Quoting::NO_BACKSLASH_ESCAPES);
            std::iter::from_fn(|| {
                let t = lexer.next_token();
                (t.kind != Eof).then(|| (t.kind, &sql[t.start..t.end]))
            })
            .take(10)
            .collect::<Vec<_>>()
        };
        // A backslash is an ordinary character: the quote after it ends the string.
        assert_eq!(
            lex_nbe(r"'zz\') OR 1=1 -- '"),
            [
                (String, r"'zz\'"),
                (Punct(b')'), ")"),
                (Word, "OR"),
                (Number, "1"),
                (Punct(b'='), "="),
                (Number, "1"),
            ]
        );
        assert_eq!(lex_nbe(r"'c\' x"), [(String, r"'c\'"), (Word, "x")]);
        assert_eq!(
            lex_nbe(r#""a\" "b""c""#),
            [(String, r#""a\""#), (String, r#""b""c""#)]
        );
        // The default reads the first of them as one unterminated string.
        assert_eq!(
            kinds(r"'zz\') OR 1=1 -- '"),
            [(String, r"'zz\') OR 1=1 -- '")]
        );
    }

    #[test]
    fn string_values() {
        let value = |s: &str, quoting| {
            std::string::String::from_utf8(string_value(s.as_bytes(), quoting)).unwrap()
        };
        let d = Quoting::DEFAULT;
        let n = Quoting::NO_BACKSLASH_ESCAPES;
        assert_eq!(value("'a''b'", d), "a'b");
        assert_eq!(value("'a''b'", n), "a'b");
        assert_eq!(value(r"'c\'d'", d), "c'd");
        assert_eq!(value(r"'c\'", n), r"c\");
        assert_eq!(value(r"'zz\'", n), r"zz\");
        assert_eq!(
            value(r"'\0\b\n\r\t\Z\\\x\%\_'", d),
            "\0\x08\n\r\t\x1a\\x\\%\\_"
        );
        assert_eq!(value(r"'\0\n'", n), r"\0\n");
        assert_eq!(value(r#""x""y""#, d), "x\"y");
        assert_eq!(value(r#""x\"y""#, d), "x\"y");
        assert_eq!(value(r#""it's""#, d), "it's");
        assert_eq!(value("N'é'", d), "é");
        assert_eq!(value("n''", d), "");
        assert_eq!(value("''", n), "");
    }

    #[test]
    fn eof_is_sticky() {
        let mut lexer = Lexer::new(b"'open");
        assert_eq!(lexer.next_token().kind, Invalid);
        assert_eq!(lexer.next_token().kind, Eof);
        assert_eq!(lexer.next_token().kind, Eof);
    }
}
