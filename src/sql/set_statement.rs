//! `SET STATEMENT var = value [, var = value ...] FOR statement`: MariaDB runs `statement` with
//! the variables set for it alone. MariaDB Connector/J wraps every statement so when a query
//! timeout is set (`SET STATEMENT max_statement_time=N FOR ...`), so what the proxy does with a
//! statement (answer `ACK` or `STREAM` itself, notice a write to a message table, reload after DDL)
//! must look inside the wrapper.

use super::lexer::{self, trim_statement, Lexer, Quoting, Token, TokenKind};

/// The statement a `SET STATEMENT ... FOR statement` runs (from just after `FOR` to the end),
/// lexed with the session's `quoting` (the values may be strings). `None` for anything else,
/// and for a wrapper the lexer cannot read to its `FOR` (an open string or comment).
pub fn set_statement_body(sql: &[u8], quoting: Quoting) -> Option<&[u8]> {
    let sql = trim_statement(sql);
    let mut lexer = Lexer::with_quoting(sql, quoting);
    let is_word = |token: Token, word: &str| {
        !token.after_dot
            && lexer::is_word(
                (
                    token.kind,
                    sql.get(token.start..token.end).unwrap_or_default(),
                ),
                word,
            )
    };
    if !is_word(lexer.next_token(), "set") || !is_word(lexer.next_token(), "statement") {
        return None;
    }
    // The values are expressions: a `FOR` inside parentheses is not the wrapper's.
    let mut depth = 0usize;
    loop {
        let token = lexer.next_token();
        match token.kind {
            TokenKind::Eof | TokenKind::Invalid => return None,
            TokenKind::Punct(b'(') => depth += 1,
            TokenKind::Punct(b')') => depth = depth.saturating_sub(1),
            TokenKind::Word if depth == 0 && is_word(token, "for") => {
                return sql.get(token.end..);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(sql: &str) -> Option<&str> {
        set_statement_body(sql.as_bytes(), Quoting::DEFAULT)
            .map(|b| std::str::from_utf8(b).unwrap().trim_start())
    }

    #[test]
    fn the_wrapped_statement_is_found() {
        assert_eq!(
            body("SET STATEMENT max_statement_time=5 FOR ACK t 1"),
            Some("ACK t 1")
        );
        assert_eq!(
            body("set statement max_statement_time = 5, sql_mode = 'a,for' for\nSTREAM * FROM t;"),
            Some("STREAM * FROM t")
        );
        assert_eq!(
            body("/* c */ SET STATEMENT x = (1 for 2), `for` = 1 FOR INSERT INTO t VALUES (1)"),
            Some("INSERT INTO t VALUES (1)")
        );
        assert_eq!(
            body("SET STATEMENT sql_mode='it\\'s for' FOR SELECT 1"),
            Some("SELECT 1")
        );
    }

    #[test]
    fn anything_else_has_none() {
        for sql in [
            "SET max_statement_time = 5",
            "SET STATEMENT max_statement_time = 5",
            "SET STATEMENT x = 'open FOR ACK t 1",
            "SELECT 'SET STATEMENT x=1 FOR ACK t 1'",
            "SET @statement = 1",
        ] {
            assert_eq!(body(sql), None, "{sql}");
        }
    }
}
