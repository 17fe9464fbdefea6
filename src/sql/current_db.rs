//! What a relayed statement may do to the session's current database, read without a round trip.
//!
//! The proxy resolves the unqualified table of `ACK t ...` and `STREAM * FROM t` in the session's current
//! database, so it must never believe in a database the server session is not in. The session keeps the
//! name only while it is certain (login, `COM_INIT_DB`, a plain `USE db` that succeeded) and forgets it on
//! anything that may have changed it; then it asks the server (`SELECT DATABASE()`) at the next unqualified
//! `ACK`/`STREAM`. This module is the "may have changed it" half: cheap checks, allowed to be wrong only
//! in the safe direction (a false "may" costs one `SELECT` later, never a wrong table).
//!
//! What changes the current database in MariaDB 10.11 (each checked on the server):
//! - `USE db`, also as `SET STATEMENT ... FOR USE db`, `EXECUTE IMMEDIATE 'USE db'` and a prepared `USE`
//!   (text `PREPARE`/`EXECUTE` or `COM_STMT_PREPARE`/`COM_STMT_EXECUTE`);
//! - `DROP DATABASE` / `DROP SCHEMA` of the current database, and `CREATE OR REPLACE DATABASE` of it: the
//!   session is then in no database (`DATABASE()` is NULL); also inside a procedure (`CALL`);
//! - any of these as a later statement of a multi-statement query (`SELECT 1; USE db2`);
//! - `COM_INIT_DB`, `COM_CHANGE_USER` and `COM_RESET_CONNECTION` (the session handles those commands).
//!
//! Compound statements (`BEGIN NOT ATOMIC ... END`) and stored procedures may not contain `USE` (error
//! 1314), but may drop a database.

use super::lexer::{trim_statement, unquote_identifier, Lexer, TokenKind};
use super::reserved::is_reserved;
use super::Keyword;

/// The database that `statement` switches to when it is exactly `USE db` (comments anywhere, one optional
/// `;`; the name bare or in backticks). `None` for anything else, which the caller must treat as "the
/// current database is no longer known" if the statement ran.
pub fn use_target(statement: &[u8]) -> Option<String> {
    // `/*M!999999 USE db */` runs only on a server that new: which database the session is in
    // then is the server's to say.
    if super::version_gate(statement).is_some() {
        return None;
    }
    let sql = trim_statement(statement);
    let mut lexer = Lexer::new(sql);
    let bytes = |start: usize, end: usize| sql.get(start..end).unwrap_or_default();
    let keyword = lexer.next_token();
    if keyword.kind != TokenKind::Word
        || !bytes(keyword.start, keyword.end).eq_ignore_ascii_case(b"USE")
    {
        return None;
    }
    let name = lexer.next_token();
    let text = std::str::from_utf8(bytes(name.start, name.end)).ok()?;
    let db = match name.kind {
        TokenKind::Word if !is_reserved(text.as_bytes()) => text.to_owned(),
        TokenKind::QuotedIdent => unquote_identifier(text)?,
        _ => return None,
    };
    let mut end = lexer.next_token();
    if end.kind == TokenKind::Punct(b';') {
        end = lexer.next_token();
    }
    (end.kind == TokenKind::Eof).then_some(db)
}

/// Whether `statement` may be several statements (`SELECT 1; USE db2`), which a session with
/// multi-statements on runs one after the other. Allocates nothing; only a statement holding a `;` is
/// lexed. A statement that also holds a backslash is taken to be several without lexing: where its
/// strings end depends on `NO_BACKSLASH_ESCAPES` and `ANSI_QUOTES`, which the proxy cannot see all of.
/// So is one the lexer cannot read to its end (an open string or comment).
pub fn may_hold_several(statement: &[u8]) -> bool {
    if !statement.contains(&b';') {
        return false;
    }
    if statement.contains(&b'\\') {
        return true;
    }
    let mut lexer = Lexer::new(trim_statement(statement));
    loop {
        match lexer.next_token().kind {
            TokenKind::Eof => return false,
            TokenKind::Invalid => return true,
            TokenKind::Punct(b';') => return lexer.next_token().kind != TokenKind::Eof,
            _ => {}
        }
    }
}

/// Whether a single statement whose first keyword is `keyword` may change the session's current database
/// when it runs — anything but a plain `USE db`, which [`use_target`] reads. Looks at most at the few
/// words after the keyword, so the statements of the hot path (`SELECT`, `INSERT`, `UPDATE`, ...) cost
/// nothing.
pub fn may_change_database(keyword: Keyword, statement: &[u8]) -> bool {
    match keyword {
        Keyword::Use | Keyword::Call | Keyword::Other => true,
        Keyword::Drop => next_words_are(statement, &[&[b"DATABASE", b"SCHEMA"]]),
        Keyword::Create => {
            next_words_are(statement, &[&[b"DATABASE", b"SCHEMA"]])
                || next_words_are(
                    statement,
                    &[&[b"OR"], &[b"REPLACE"], &[b"DATABASE", b"SCHEMA"]],
                )
        }
        // `SET STATEMENT var = value FOR <any statement>`.
        Keyword::Set => next_words_are(statement, &[&[b"STATEMENT"]]),
        // `BEGIN NOT ATOMIC ... END`, a compound statement.
        Keyword::Begin => next_words_are(statement, &[&[b"NOT"]]),
        _ => false,
    }
}

/// Whether the words after the statement's first word are, in order, one of each of `words` (upper case).
fn next_words_are(statement: &[u8], words: &[&[&[u8]]]) -> bool {
    let sql = trim_statement(statement);
    let mut lexer = Lexer::new(sql);
    lexer.next_token();
    words.iter().all(|choices| {
        let token = lexer.next_token();
        let word = sql.get(token.start..token.end).unwrap_or_default();
        token.kind == TokenKind::Word && choices.iter().any(|w| w.eq_ignore_ascii_case(word))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::classify;

    #[test]
    fn plain_use_is_read() {
        for (sql, db) in [
            ("USE test", "test"),
            ("use test;", "test"),
            ("USE test -- comment", "test"),
            ("USE /*x*/ test", "test"),
            ("use test /* c */", "test"),
            ("use test\n", "test"),
            ("USE `test`", "test"),
            ("use `my``db` ;", "my`db"),
            ("/* lead */ USE\n\tdb2 # done", "db2"),
            ("USE café", "café"),
            ("USE `select`", "select"),
            // The server runs an executable comment's content.
            ("/*!USE test */", "test"),
        ] {
            assert_eq!(use_target(sql.as_bytes()).as_deref(), Some(db), "{sql:?}");
        }
    }

    #[test]
    fn anything_else_is_not_a_plain_use() {
        for sql in [
            "USE",
            "USE test; SELECT 1",
            "USE test extra",
            "USE a.b",
            "USE ``",
            "USE 'test'",
            "USE \"test\"",
            "USE select",
            "USE test /* open",
            "SELECT 1",
            "USEtest",
        ] {
            assert_eq!(use_target(sql.as_bytes()), None, "{sql:?}");
        }
        assert_eq!(use_target(b"USE caf\xe9"), None);
    }

    #[test]
    fn several_statements() {
        for sql in [
            "SELECT 1; USE db2",
            "USE test; SELECT 1",
            "SELECT ';'; USE db2",
            "SELECT 1;/* c */USE db2",
            "SELECT 1;; SELECT 2",
            "SELECT 'a;b' ; DROP DATABASE x",
            // A backslash: where the strings end depends on the sql_mode.
            r"SELECT 'a\'; USE db2; -- '",
            r#"SELECT "a\"; USE db2; -- ""#,
            "SELECT 'open; USE db2",
            "SELECT 1 /*! ; USE db2 */",
        ] {
            assert!(may_hold_several(sql.as_bytes()), "{sql:?}");
        }
        for sql in [
            "SELECT 1",
            "SELECT 1;",
            "SELECT 1 ; ; \n",
            "SELECT 1;;",
            "SELECT 1; -- done",
            "SELECT 1; # done",
            "SELECT 1; /* done */",
            "INSERT INTO t VALUES ('a;b', \"c;d\", `e;f`)",
            "SELECT 1 /* ; USE db2 */",
            "SELECT 1 -- ; USE db2",
            "",
        ] {
            assert!(!may_hold_several(sql.as_bytes()), "{sql:?}");
        }
    }

    fn may_change(sql: &str) -> bool {
        let c = classify(sql.as_bytes());
        may_change_database(c.keyword, sql.as_bytes())
    }

    #[test]
    fn statements_that_may_change_the_database() {
        for sql in [
            "DROP DATABASE test",
            "drop schema if exists test",
            "/* c */ DROP /* d */ DATABASE test",
            "CREATE OR REPLACE DATABASE test",
            "create or replace schema test",
            "CREATE DATABASE x",
            "SET STATEMENT max_statement_time=10 FOR USE db2",
            "EXECUTE IMMEDIATE 'USE db2'",
            "EXECUTE s",
            "CALL p()",
            "BEGIN NOT ATOMIC DROP DATABASE x; END",
            "USE test",
            "IF 1 THEN DROP DATABASE x; END IF",
        ] {
            assert!(may_change(sql), "{sql:?}");
        }
        for sql in [
            "SELECT DATABASE()",
            "INSERT INTO t VALUES (1)",
            "UPDATE t SET a = 1",
            "DELETE FROM t",
            "DROP TABLE t",
            "DROP TEMPORARY TABLE t",
            "CREATE TABLE database_t (a int)",
            "CREATE OR REPLACE TABLE t (a int)",
            "SET autocommit = 1",
            "SET NAMES utf8mb4",
            "BEGIN",
            "BEGIN WORK",
            "COMMIT",
            "ALTER DATABASE test CHARACTER SET utf8mb4",
            "SHOW DATABASES",
        ] {
            assert!(!may_change(sql), "{sql:?}");
        }
    }
}
