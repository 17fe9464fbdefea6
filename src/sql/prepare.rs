//! The statement text that SQL-level `PREPARE name FROM '...'` and `EXECUTE IMMEDIATE '...'` hand
//! the server, when it is written out as a string literal. The proxy answers `STREAM`, `ACK` and
//! the other virtual statements itself, over the text protocol only; prepared this way they would
//! reach the server, which can only call them a syntax error (1064). Reading the literal lets the
//! proxy give the real reason, as it does for `COM_STMT_PREPARE`.

use super::lexer::{is_word, string_value, Quoting, SpelledTokens, TokenKind};

/// The statement a `PREPARE name FROM <literal>` or `EXECUTE IMMEDIATE <literal> [USING ...]`
/// would prepare, decoded as the server reads the literal with `quoting` (adjacent literals are
/// one, as in `'ACK t ' '1'`). `None` for any other statement, and where the text is not a
/// literal (`FROM @sql`, `CONCAT(...)`): what that holds is only known to the server.
pub fn prepared_text(sql: &[u8], quoting: Quoting) -> Option<Vec<u8>> {
    let mut tokens = SpelledTokens::new(sql, quoting);
    let first = tokens.next();
    let mut token = if is_word(first, "prepare") {
        let (name_kind, _) = tokens.next();
        if !matches!(name_kind, TokenKind::Word | TokenKind::QuotedIdent)
            || !is_word(tokens.next(), "from")
        {
            return None;
        }
        tokens.next()
    } else if is_word(first, "execute") && is_word(tokens.next(), "immediate") {
        tokens.next()
    } else {
        return None;
    };
    let mut text = Vec::new();
    let mut literals = 0;
    while token.0 == TokenKind::String {
        text.extend(string_value(token.1, quoting));
        literals += 1;
        token = tokens.next();
    }
    // After the literal: the end, or (EXECUTE IMMEDIATE only, but the server sorts that out)
    // `USING` and its parameters.
    let ends = token.0 == TokenKind::Eof || is_word(token, "using");
    (literals > 0 && ends).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(sql: &str) -> Option<String> {
        prepared_text(sql.as_bytes(), Quoting::DEFAULT).map(|t| String::from_utf8(t).unwrap())
    }

    #[test]
    fn literals_are_read_as_the_server_reads_them() {
        assert_eq!(text("PREPARE s FROM 'ACK t 1'").as_deref(), Some("ACK t 1"));
        assert_eq!(
            text("prepare `my s` from \"STREAM * FROM t\";").as_deref(),
            Some("STREAM * FROM t")
        );
        assert_eq!(
            text("PREPARE s FROM 'ACK t ' '\\'a\\''").as_deref(),
            Some("ACK t 'a'")
        );
        assert_eq!(
            text("EXECUTE IMMEDIATE 'ACK t ?' USING 1").as_deref(),
            Some("ACK t ?")
        );
        assert_eq!(
            text("/* c */ PREPARE s FROM N'SELECT 1' -- x").as_deref(),
            Some("SELECT 1")
        );
        assert_eq!(
            prepared_text(b"PREPARE s FROM 'ACK t \\'", Quoting::NO_BACKSLASH_ESCAPES)
                .map(|t| String::from_utf8(t).unwrap())
                .as_deref(),
            Some("ACK t \\")
        );
    }

    #[test]
    fn anything_else_is_not_read() {
        for sql in [
            "PREPARE s FROM @sql",
            "PREPARE s FROM CONCAT('ACK', ' t 1')",
            "PREPARE FROM 'ACK t 1'",
            "PREPARE s 'ACK t 1'",
            "EXECUTE s",
            "EXECUTE IMMEDIATE @sql",
            "SELECT 'PREPARE s FROM ''ACK t 1'''",
            "PREPARE s FROM 'ACK t 1'; SELECT 1",
            "PREPARE s FROM 'unterminated",
            "DEALLOCATE PREPARE s",
        ] {
            assert_eq!(text(sql), None, "{sql}");
        }
    }
}
