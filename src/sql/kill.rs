//! `KILL [HARD | SOFT] QUERY thread_id`: the connection whose statement a KILL interrupts. The
//! server accepts it for a connection that is between statements and forgets it, which is where a
//! `STREAM` spends its time; the proxy reads the target so that it can end the stream itself.

use super::lexer::{is_word, Quoting, SpelledTokens, TokenKind};

/// The connection id a `KILL [HARD | SOFT] QUERY id` statement names. `None` for every other
/// statement: a connection kill (`KILL id`, `KILL CONNECTION id`: the server closes that
/// connection itself), `KILL QUERY ID n` (which names a query id), `KILL USER u`, and anything
/// that is not exactly one such statement.
pub fn kill_query_target(sql: &[u8]) -> Option<u64> {
    let mut tokens = SpelledTokens::new(sql, Quoting::DEFAULT);
    if !is_word(tokens.next(), "kill") {
        return None;
    }
    let mut token = tokens.next();
    if is_word(token, "hard") || is_word(token, "soft") {
        token = tokens.next();
    }
    if !is_word(token, "query") {
        return None;
    }
    let (kind, text) = tokens.next();
    if kind != TokenKind::Number || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let id = std::str::from_utf8(text).ok()?.parse().ok()?;
    (tokens.next().0 == TokenKind::Eof).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::kill_query_target;

    #[test]
    fn query_kills_name_their_connection() {
        for sql in [
            "KILL QUERY 42",
            "kill query 42;",
            "  KILL /* Ctrl-C */ HARD QUERY 42 ",
            "Kill Soft Query\n42 -- why",
        ] {
            assert_eq!(kill_query_target(sql.as_bytes()), Some(42), "{sql}");
        }
    }

    #[test]
    fn other_kills_and_other_statements_name_none() {
        for sql in [
            "KILL 42",
            "KILL CONNECTION 42",
            "KILL QUERY ID 42",
            "KILL USER bob",
            "KILL QUERY 4.2",
            "KILL QUERY 0x2a",
            "KILL QUERY 42; SELECT 1",
            "KILL QUERY",
            "SELECT 'KILL QUERY 42'",
            "KILL QUERY 99999999999999999999999",
        ] {
            assert_eq!(kill_query_target(sql.as_bytes()), None, "{sql}");
        }
    }
}
