//! The few statements the proxy changes before relaying them.
//!
//! `@@socket` is the only one today. mysql_async (and the Rust `mysql` crate) ask for it right
//! after connecting to a loopback address and, by default, reconnect over that Unix socket —
//! straight to the server, silently bypassing the proxy and its message statements. So
//! `@@socket` reads as the proxy's own socket when it has one (`--listen-socket`: mysql_async
//! then moves to it and stays on the proxy), and otherwise as an empty string: mysql_async then
//! fails to open "" and stays on TCP to the proxy. Clients that read it as a string (the Go
//! driver's own tests do) get a string either way.

use std::path::Path;

use super::lexer::{Lexer, Quoting, Token, TokenKind};

/// The statement to send instead of `sql`, if it must change: each reference to the system
/// variable, `@@socket` or `@@global.socket` (any case, the name bare or in backticks), becomes
/// `socket`, a string literal from [`socket_literal`]. Only code is read, by the session's
/// lexer ([`Quoting`] says where its strings end): string literals, quoted identifiers and
/// comments are left as written (`SELECT '@@socket'` is that string), while an executable
/// comment (`/*! ... */`) is code. `@@session.socket` and `@@local.socket` are left to the
/// server, whose answer is an error (the variable is global only) that names no socket.
///
/// A reference that is a whole item of the select list, without an alias of its own, also gets
/// the name the server would give its column — the reference as written (`` '' AS `@@socket` ``)
/// — so clients that read the column by name still find it.
pub fn rewrite(sql: &[u8], quoting: Quoting, socket: &[u8]) -> Option<Vec<u8>> {
    // Fast path: almost no statement mentions a system variable at all.
    if !sql.windows(2).any(|w| w == b"@@") {
        return None;
    }
    let mut lexer = Lexer::with_quoting(sql, quoting);
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut select_list = SelectList::default();
    loop {
        let token = lexer.next_token();
        match token.kind {
            TokenKind::AtAt => {
                let mut ahead = lexer.clone();
                if let Some(end) = socket_variable(&mut ahead, sql) {
                    let buf = out.get_or_insert_with(|| Vec::with_capacity(sql.len()));
                    buf.extend_from_slice(sql.get(copied..token.start).unwrap_or_default());
                    buf.extend_from_slice(socket);
                    let next = ahead.clone().next_token();
                    if select_list.item_starts_here() && select_list.item_ends_at(&next, sql) {
                        let written = sql.get(token.start..end).unwrap_or_default();
                        buf.extend_from_slice(b" AS `");
                        for &b in written {
                            if b == b'`' {
                                buf.push(b'`');
                            }
                            buf.push(b);
                        }
                        buf.push(b'`');
                    }
                    copied = end;
                    lexer = ahead;
                    select_list.saw_item();
                    continue;
                }
            }
            // An unterminated string or comment: the server refuses the statement anyway.
            TokenKind::Eof | TokenKind::Invalid => break,
            _ => {}
        }
        select_list.saw(&token, sql);
    }
    let mut buf = out?;
    buf.extend_from_slice(sql.get(copied..).unwrap_or_default());
    Some(buf)
}

/// What `@@socket` reads as through the proxy: its own socket's path as a string literal, or
/// `''` without one. A path that a literal could not carry the same under every `sql_mode` (a
/// quote or a backslash in it, or bytes that are not printable UTF-8) reads as `''` too.
pub fn socket_literal(path: Option<&Path>) -> Vec<u8> {
    let text = path.and_then(|p| p.to_str()).unwrap_or_default();
    if text
        .chars()
        .any(|c| c == '\'' || c == '\\' || c.is_control())
    {
        return b"''".to_vec();
    }
    format!("'{text}'").into_bytes()
}

/// Where the lexer is with respect to the outermost select list: enough to tell a whole,
/// unnamed item of it (`SELECT @@socket, 1 FROM t`) from a part of an expression
/// (`SELECT CONCAT(@@socket, 'x')`, `SELECT @@socket AS s`, `ORDER BY 1, @@socket`).
#[derive(Default)]
struct SelectList {
    /// Parentheses open.
    depth: usize,
    /// Between a `SELECT` and the end of its list, outside any parentheses.
    inside: bool,
    /// The last token was `SELECT`, one of its options, or a comma of the list.
    at_item_start: bool,
}

/// Words that may stand between `SELECT` and its first item.
const SELECT_OPTIONS: [&[u8]; 10] = [
    b"ALL",
    b"DISTINCT",
    b"DISTINCTROW",
    b"HIGH_PRIORITY",
    b"STRAIGHT_JOIN",
    b"SQL_SMALL_RESULT",
    b"SQL_BIG_RESULT",
    b"SQL_BUFFER_RESULT",
    b"SQL_CACHE",
    b"SQL_NO_CACHE",
];

/// Words that end a select list.
const LIST_ENDS: [&[u8]; 13] = [
    b"FROM",
    b"INTO",
    b"WHERE",
    b"GROUP",
    b"HAVING",
    b"ORDER",
    b"LIMIT",
    b"UNION",
    b"EXCEPT",
    b"INTERSECT",
    b"WINDOW",
    b"FOR",
    b"LOCK",
];

impl SelectList {
    fn saw(&mut self, token: &Token, sql: &[u8]) {
        let word = |list: &[&[u8]]| {
            token.kind == TokenKind::Word
                && list.iter().any(|w| {
                    sql.get(token.start..token.end)
                        .is_some_and(|t| t.eq_ignore_ascii_case(w))
                })
        };
        let at_item_start = self.at_item_start;
        self.at_item_start = false;
        match token.kind {
            TokenKind::Punct(b'(') => self.depth += 1,
            TokenKind::Punct(b')') => self.depth = self.depth.saturating_sub(1),
            _ if self.depth > 0 => {}
            _ if word(&[b"SELECT"]) => {
                self.inside = true;
                self.at_item_start = true;
            }
            _ if !self.inside => {}
            TokenKind::Punct(b',') => self.at_item_start = true,
            _ if at_item_start && word(&SELECT_OPTIONS) => self.at_item_start = true,
            _ if word(&LIST_ENDS) => self.inside = false,
            _ => {}
        }
    }

    /// An item just went by (the variable, replaced).
    fn saw_item(&mut self) {
        self.at_item_start = false;
    }

    fn item_starts_here(&self) -> bool {
        self.inside && self.depth == 0 && self.at_item_start
    }

    /// Whether `next`, the token after an item, ends it unnamed.
    fn item_ends_at(&self, next: &Token, sql: &[u8]) -> bool {
        match next.kind {
            TokenKind::Eof | TokenKind::Punct(b',') | TokenKind::Punct(b';') => true,
            TokenKind::Word => LIST_ENDS.iter().any(|w| {
                sql.get(next.start..next.end)
                    .is_some_and(|t| t.eq_ignore_ascii_case(w))
            }),
            _ => false,
        }
    }
}

/// After `@@`: the end of `socket` or `global.socket`, if that is what follows.
fn socket_variable(lexer: &mut Lexer<'_>, sql: &[u8]) -> Option<usize> {
    let text = |t: &Token| sql.get(t.start..t.end).unwrap_or_default();
    let is_name = |t: &Token, name: &[u8]| match t.kind {
        TokenKind::Word => text(t).eq_ignore_ascii_case(name),
        TokenKind::QuotedIdent => text(t)
            .strip_prefix(b"`")
            .and_then(|inner| inner.strip_suffix(b"`"))
            .is_some_and(|inner| inner.eq_ignore_ascii_case(name)),
        _ => false,
    };
    let mut name = lexer.next_token();
    if is_name(&name, b"global") {
        if lexer.next_token().kind != TokenKind::Punct(b'.') {
            return None;
        }
        name = lexer.next_token();
    }
    is_name(&name, b"socket").then_some(name.end)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{rewrite as rewrite_in, socket_literal, Quoting};

    fn rewrite(sql: &[u8]) -> Option<Vec<u8>> {
        rewrite_in(sql, Quoting::DEFAULT, b"''")
    }

    fn str_rewrite(sql: &str) -> String {
        String::from_utf8(rewrite(sql.as_bytes()).expect("rewritten")).unwrap()
    }

    #[test]
    fn a_whole_unnamed_item_keeps_its_column_name() {
        for (sql, want) in [
            ("SELECT @@socket", "SELECT '' AS `@@socket`"),
            (
                "select distinct @@Socket;",
                "select distinct '' AS `@@Socket`;",
            ),
            (
                "SELECT 1, @@socket FROM dual WHERE 1",
                "SELECT 1, '' AS `@@socket` FROM dual WHERE 1",
            ),
            (
                "SELECT 1 UNION SELECT @@socket",
                "SELECT 1 UNION SELECT '' AS `@@socket`",
            ),
            ("SELECT @@socket INTO @s", "SELECT '' AS `@@socket` INTO @s"),
            // Named already, or part of an expression: no alias.
            ("SELECT @@socket AS s", "SELECT '' AS s"),
            ("SELECT @@socket s", "SELECT '' s"),
            ("SELECT CONCAT('x', @@socket)", "SELECT CONCAT('x', '')"),
            ("SELECT @@socket = ''", "SELECT '' = ''"),
            ("SELECT (SELECT @@socket)", "SELECT (SELECT '')"),
            (
                "SELECT 1 FROM t ORDER BY 1, @@socket",
                "SELECT 1 FROM t ORDER BY 1, ''",
            ),
            (
                "SELECT 1 FROM t WHERE @@socket = ''",
                "SELECT 1 FROM t WHERE '' = ''",
            ),
        ] {
            assert_eq!(str_rewrite(sql), want, "{sql}");
        }
    }

    #[test]
    fn socket_reads_as_the_proxys_own_socket_when_it_has_one() {
        let literal = socket_literal(Some(Path::new("/run/msgproxy/msgproxy.sock")));
        assert_eq!(literal, b"'/run/msgproxy/msgproxy.sock'");
        assert_eq!(
            rewrite_in(b"SELECT @@socket", Quoting::DEFAULT, &literal).as_deref(),
            Some(&b"SELECT '/run/msgproxy/msgproxy.sock' AS `@@socket`"[..])
        );
        assert_eq!(socket_literal(None), b"''");
        for unsafe_path in ["/tmp/it's.sock", "/tmp/a\\b.sock", "/tmp/new\nline"] {
            assert_eq!(
                socket_literal(Some(Path::new(unsafe_path))),
                b"''",
                "{unsafe_path}"
            );
        }
    }

    #[test]
    fn socket_reads_as_an_empty_string() {
        assert_eq!(
            rewrite(b"SELECT @@max_allowed_packet,@@wait_timeout,@@socket").as_deref(),
            Some(&b"SELECT @@max_allowed_packet,@@wait_timeout,'' AS `@@socket`"[..])
        );
        assert_eq!(
            rewrite(b"select @@SOCKET as s").as_deref(),
            Some(&b"select '' as s"[..])
        );
    }

    #[test]
    fn other_statements_are_untouched() {
        assert_eq!(rewrite(b"SELECT 1"), None);
        assert_eq!(rewrite(b"SELECT @@socket_timeout"), None);
        assert_eq!(rewrite(b"SELECT @a"), None);
        assert_eq!(rewrite(b"@@socke"), None);
        assert_eq!(rewrite(b"SELECT @@session.socket, @@local.socket"), None);
    }

    #[test]
    fn global_and_backticked_names_are_the_variable_too() {
        assert_eq!(
            rewrite(b"SELECT @@global.socket, @@GLOBAL.`Socket`, @@`socket`").as_deref(),
            Some(&b"SELECT '' AS `@@global.socket`, '' AS `@@GLOBAL.``Socket```, '' AS `@@``socket```"[..])
        );
    }

    #[test]
    fn strings_quoted_identifiers_and_comments_are_not_code() {
        for sql in [
            &b"SELECT '@@socket'"[..],
            b"SELECT \"@@socket\"",
            b"SELECT 1 AS `@@socket`",
            b"SELECT 1 /* @@socket */",
            b"SELECT 1 -- @@socket",
            b"SELECT 1 # @@socket",
            b"SELECT * FROM t WHERE name = 'it''s @@socket'",
            b"SELECT 'a\\' @@socket'",
            b"SELECT 'unterminated @@socket",
        ] {
            assert_eq!(rewrite(sql), None, "{}", String::from_utf8_lossy(sql));
        }
        assert_eq!(
            rewrite(b"SELECT '@@socket', \"@@socket\", @@socket `@@socket` /* @@socket */")
                .as_deref(),
            Some(&b"SELECT '@@socket', \"@@socket\", '' `@@socket` /* @@socket */"[..])
        );
        // Executable comments are code.
        assert_eq!(
            rewrite(b"SELECT /*! @@socket */").as_deref(),
            Some(&b"SELECT /*! '' AS `@@socket` */"[..])
        );
    }

    #[test]
    fn the_sessions_quoting_decides_where_a_string_ends() {
        // With backslash escapes the string runs to the last quote; without, `@@socket` is code.
        let sql = b"SELECT 'a\\', @@socket, 'b'";
        assert_eq!(rewrite_in(sql, Quoting::DEFAULT, b"''"), None);
        assert_eq!(
            rewrite_in(sql, Quoting::NO_BACKSLASH_ESCAPES, b"''").as_deref(),
            Some(&b"SELECT 'a\\', '' AS `@@socket`, 'b'"[..])
        );
    }
}
