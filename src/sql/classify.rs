//! Finding a statement's first keyword, with the one lexer (`lexer.rs`).
//!
//! The statement arrives as the raw payload of a `COM_QUERY`, in the client's character set, so it may not be
//! UTF-8 (a latin1 blob literal, say). Everything here therefore works on `&[u8]` and only ever looks at ASCII
//! bytes; a byte `>= 0x80` is never whitespace, never a comment marker and always part of an identifier, which
//! is what MySQL's lexer does for every character set a client may use for queries.

use super::lexer::{Lexer, Token, TokenKind};
use super::{action_for, Classification, Keyword};

/// Classifies one statement by its first keyword, after leading whitespace and comments.
///
/// Never allocates and never panics, whatever the bytes. A statement of only whitespace and comments, or one
/// that does not start with a word at all, is [`Keyword::Other`] and is relayed: the backend gives the right
/// error for it. Whether it is relayed or answered by the proxy is `super::action_for`'s decision.
pub fn classify(sql: &[u8]) -> Classification {
    let (token, _) = first_token(sql);
    let word = match token.kind {
        TokenKind::Word => sql.get(token.start..token.end).unwrap_or_default(),
        _ => &[],
    };
    let keyword = Keyword::lookup(word);
    let action = action_for(keyword, sql);
    Classification {
        keyword,
        action,
        keyword_offset: keyword_offset(sql, token),
    }
}

/// The statement's first token after what MySQL skips before it, and the marker of the executable comment
/// that token is in when that marker has a version (`/*!99999`, `/*M!100500`: see [`version_gate`]).
///
/// Skipped, by the lexer: whitespace; `/* ... */` (not nested: MySQL ends it at the first `*/`); `# ...` and
/// `-- ...` to the end of the line, where `--` counts only before whitespace, a control character or the end
/// (otherwise `--1` is arithmetic). Skipped here: opening parentheses, because `(SELECT ...) UNION (SELECT
/// ...)` is still a `SELECT`.
///
/// Executable comments are *not* skipped wholesale: `/*!`, `/*!40101`, `/*M!` and `/*M!100101` are markers
/// whose content the server runs as code, so only the marker (and its version digits) is skipped and the
/// keyword is read from inside — mysqldump's `/*!40101 SET NAMES utf8 */` is a `SET`. The `*/` closing such a
/// comment is skipped too (`/*!*/ SELECT 1`). The version is not compared with the backend's here: a relayed
/// statement reaches the backend, which decides; a statement the proxy would act on itself in a versioned
/// comment is first checked with the server ([`version_gate`]).
fn first_token(sql: &[u8]) -> (Token, Option<&[u8]>) {
    let mut lexer = Lexer::new(sql);
    loop {
        let token = lexer.next_token();
        if token.kind != TokenKind::Punct(b'(') {
            return (token, lexer.version_gate());
        }
    }
}

/// Where the first keyword is: the first token's offset, or the statement's length when there is no token
/// at all (only whitespace and comments, or a comment that is never closed: all of the rest is comment).
fn keyword_offset(sql: &[u8], token: Token) -> usize {
    let open_comment = token.kind == TokenKind::Invalid
        && sql
            .get(token.start..)
            .is_some_and(|rest| rest.starts_with(b"/*"));
    if open_comment {
        sql.len()
    } else {
        token.start
    }
}

/// The marker (`/*!99999`, `/*M!100500`) of the version-gated executable comment a statement's first
/// word is in, if it is in one. Whether the server runs that code depends on its version and its own
/// rules (MariaDB skips some MySQL versions too), so before msgproxy answers such a statement itself,
/// or believes the database a `USE` in it names, it asks the server (`SELECT 0 <marker> + 1 */`).
/// `None` for plain code and unversioned `/*!` / `/*M!` comments, which always run.
pub fn version_gate(sql: &[u8]) -> Option<&[u8]> {
    first_token(sql).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{is_virtual, Action};

    /// Classifies and checks the keyword and where it was found (and that only `STREAM` and `ACK` are
    /// virtual: none of these statements is a `SET workload`).
    #[track_caller]
    fn check(sql: &[u8], keyword: Keyword, offset: usize) {
        let c = classify(sql);
        assert_eq!(
            (c.keyword, c.keyword_offset),
            (keyword, offset),
            "{:?}",
            String::from_utf8_lossy(sql)
        );
        let expected = if is_virtual(keyword) {
            Action::Virtual
        } else {
            Action::Relay
        };
        assert_eq!(c.action, expected);
    }

    #[test]
    fn plain_keywords_any_case() {
        check(b"SELECT 1", Keyword::Select, 0);
        check(b"select 1", Keyword::Select, 0);
        check(b"SeLeCt 1", Keyword::Select, 0);
        check(b"xa start 'x'", Keyword::Xa, 0);
        check(b"SAVEPOINT sp1", Keyword::Savepoint, 0);
        check(b"stream * from t", Keyword::Stream, 0);
        check(b"ACK t 1, 2", Keyword::Ack, 0);
        check(b"handler t open", Keyword::Other, 0);
        check(b"COMMIT", Keyword::Commit, 0);
    }

    #[test]
    fn set_workload_is_virtual() {
        for sql in [
            &b"SET workload='olap'"[..],
            b"set workload = olap",
            b"SET SESSION workload='oltp';",
            b"SET @@workload=\"olap\"",
            b"/* vitess */ SET @@session.workload = 'OLAP'",
            b"/*!40101 SET workload='olap' */",
        ] {
            let c = classify(sql);
            assert_eq!(
                (c.keyword, c.action),
                (Keyword::Set, Action::Virtual),
                "{:?}",
                String::from_utf8_lossy(sql)
            );
        }
        for sql in [
            &b"SET workload=1, autocommit=0"[..],
            b"SET workload='olap', autocommit=0",
            b"SET @workload='olap'",
            b"SET GLOBAL workload='olap'",
            b"SET workload='banana'",
            b"SET autocommit=0",
            b"(SET workload='olap')",
            b"SET workload='olap' \xff",
        ] {
            let c = classify(sql);
            assert_eq!(
                (c.keyword, c.action),
                (Keyword::Set, Action::Relay),
                "{:?}",
                String::from_utf8_lossy(sql)
            );
        }
    }

    #[test]
    fn word_boundaries() {
        check(b"SELECT(1)", Keyword::Select, 0);
        check(b"select*from t", Keyword::Select, 0);
        check(b"select`a`from t", Keyword::Select, 0);
        check(b"select'a'", Keyword::Select, 0);
        check(b"commit;", Keyword::Commit, 0);
        check(b"selectx", Keyword::Other, 0);
        check(b"select1", Keyword::Other, 0);
        check(b"select_", Keyword::Other, 0);
        check(b"select$", Keyword::Other, 0);
        check(b"select\xe9 1", Keyword::Other, 0);
        check("selecté".as_bytes(), Keyword::Other, 0);
        check(b"savepoints", Keyword::Other, 0);
        check(b"1 select", Keyword::Other, 0);
        check(b"`select`", Keyword::Other, 0);
    }

    #[test]
    fn whitespace_before_the_keyword() {
        check(b" \t\r\n\x0b\x0cSELECT", Keyword::Select, 6);
        check(b"\n\n\tshow tables", Keyword::Show, 3);
        // Not whitespace to MySQL: NUL and non-ASCII bytes (e.g. a UTF-8 no-break space).
        check(b"\0SELECT", Keyword::Other, 0);
        check("\u{a0}SELECT".as_bytes(), Keyword::Other, 0);
    }

    #[test]
    fn block_comments() {
        check(b"/* x */SELECT", Keyword::Select, 7);
        check(b"/**/select", Keyword::Select, 4);
        check(b"/* a */ /* b */\n/* c */ set x=1", Keyword::Set, 24);
        // Not nested: the first `*/` ends the comment, the second is garbage.
        check(b"/* /* */ SELECT", Keyword::Select, 9);
        check(b"/* /* */ */ SELECT", Keyword::Other, 9);
        check(b"/* select */ update t set a=1", Keyword::Update, 13);
        check(b"/*+ hint */ delete from t", Keyword::Delete, 12);
        check(b"/*M not executable */ use db", Keyword::Use, 22);
        check(b"/*", Keyword::Other, 2);
        check(b"/* never closed SELECT", Keyword::Other, 22);
        check(b"/*/ SELECT */ COMMIT", Keyword::Commit, 14);
        check(b"*/ SELECT", Keyword::Other, 0);
    }

    #[test]
    fn line_comments() {
        check(b"-- x\nSELECT", Keyword::Select, 5);
        check(b"--\tx\nSELECT", Keyword::Select, 5);
        check(b"--\nSELECT", Keyword::Select, 3);
        check(b"--\r\nSELECT", Keyword::Select, 4);
        check(b"-- SELECT", Keyword::Other, 9);
        check(b"--", Keyword::Other, 2);
        // `--` not followed by whitespace is two minus signs.
        check(b"--x\nSELECT", Keyword::Other, 0);
        check(b"--1", Keyword::Other, 0);
        check(b"# x\nSELECT", Keyword::Select, 4);
        check(b"#\nSELECT", Keyword::Select, 2);
        check(b"#SELECT", Keyword::Other, 7);
        check(b"# a\n-- b\n/* c */ # d\n  begin", Keyword::Begin, 23);
        check(b"-- \xff\xfe latin1 \xe9\nrollback", Keyword::Rollback, 15);
    }

    #[test]
    fn version_gates_are_found() {
        let gate = |sql: &str| {
            version_gate(sql.as_bytes()).map(|m| String::from_utf8_lossy(m).into_owned())
        };
        assert_eq!(gate("/*M!999999 ACK t 1 */").as_deref(), Some("/*M!999999"));
        assert_eq!(
            gate(" /* c */ /*!99999 STREAM * FROM t */").as_deref(),
            Some("/*!99999")
        );
        assert_eq!(
            gate("/*!40101SET workload='olap' */").as_deref(),
            Some("/*!40101")
        );
        for sql in [
            "ACK t 1",
            "/*! ACK t 1 */",
            "/*M! ACK t 1 */",
            "/*!99999 */ ACK t 1",
            "/* /*!99999 */ ACK t 1",
        ] {
            assert_eq!(gate(sql), None, "{sql}");
        }
    }

    #[test]
    fn executable_comments_are_code() {
        check(b"/*!40101 SET NAMES utf8 */", Keyword::Set, 9);
        check(b"/*!40101SET NAMES utf8 */", Keyword::Set, 8);
        check(b"/*!SET NAMES utf8 */", Keyword::Set, 3);
        check(b"/*M!100101 SET x=1 */", Keyword::Set, 11);
        check(b"/*M! set x=1 */", Keyword::Set, 5);
        check(
            b"/*!40000 ALTER TABLE `t` DISABLE KEYS */",
            Keyword::Alter,
            9,
        );
        check(
            b"/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER tr */",
            Keyword::Create,
            9,
        );
        check(b"/*!*/ SELECT 1", Keyword::Select, 6);
        check(
            b"/*!40101 */ /*!40101 */ lock tables t write",
            Keyword::Lock,
            24,
        );
        check(b"/*!40101 /* inner */ SET x=1 */", Keyword::Set, 21);
        check(b"/* c */ /*!40101 -- x\n SET x=1 */", Keyword::Set, 23);
        check(b"/*!", Keyword::Other, 3);
        check(b"/*!40101", Keyword::Other, 8);
        check(b"/*M!", Keyword::Other, 4);
        // A second `*/` after an executable comment has closed is garbage again.
        check(b"/*!*/ */ SELECT", Keyword::Other, 6);
    }

    #[test]
    fn parenthesised_queries() {
        check(b"(SELECT 1) UNION (SELECT 2)", Keyword::Select, 1);
        check(b"( ( /* x */ select 1))", Keyword::Select, 12);
        check(b"(", Keyword::Other, 1);
    }

    #[test]
    fn nothing_but_comments_or_garbage() {
        check(b"", Keyword::Other, 0);
        check(b"   \n\t", Keyword::Other, 5);
        check(b"/* only */ -- comments\n# here", Keyword::Other, 29);
        check(b";", Keyword::Other, 0);
        check(b"\xff\xfe\xfd", Keyword::Other, 0);
        check(b"@@version", Keyword::Other, 0);
    }

    #[test]
    fn non_utf8_after_the_keyword() {
        check(
            b"INSERT INTO t VALUES (_latin1'\xe9\xe8\xff')",
            Keyword::Insert,
            0,
        );
        check(b"select \xff\xff\xff", Keyword::Select, 0);
        check(
            "/* café */ UPDATE t SET näme='ü'".as_bytes(),
            Keyword::Update,
            12,
        );
    }

    /// A tiny deterministic generator, so the property test needs no dependency and always sees the same
    /// inputs (a failure is then reproducible from the test alone).
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Bytes that steer the lexer into its interesting states, so random input exercises more than the
    /// "garbage" path.
    const INTERESTING: &[u8] = b"/*!M-#\n\r\t ()0123456789selctSELCTakstrm_$\xe9\xff\0";

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut buf = Vec::with_capacity(64);
        for _ in 0..200_000 {
            buf.clear();
            let len = (rng.next() % 48) as usize;
            for _ in 0..len {
                let r = rng.next();
                let byte = if r.is_multiple_of(4) {
                    (r >> 8) as u8
                } else {
                    INTERESTING[((r >> 8) % INTERESTING.len() as u64) as usize]
                };
                buf.push(byte);
            }
            let c = classify(&buf);
            assert!(c.keyword_offset <= buf.len(), "{buf:?}");
            if c.keyword != Keyword::Set {
                assert_eq!(
                    c.action == Action::Virtual,
                    is_virtual(c.keyword),
                    "{buf:?}"
                );
            }
            if c.keyword != Keyword::Other {
                let name = c.keyword.name().as_bytes();
                let found = &buf[c.keyword_offset..c.keyword_offset + name.len()];
                assert!(found.eq_ignore_ascii_case(name), "{buf:?}");
            }
        }
    }

    #[test]
    fn every_prefix_of_a_commented_statement() {
        let sql = b"/* a */ -- b\n# c\n\t/*!40101 /* d */ SET NAMES utf8 */";
        for end in 0..=sql.len() {
            let c = classify(&sql[..end]);
            assert!(c.keyword_offset <= end);
        }
        check(sql, Keyword::Set, 35);
    }
}
