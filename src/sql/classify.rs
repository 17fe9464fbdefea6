//! Finding a statement's first keyword: a small hand-written lexer over raw bytes.
//!
//! The statement arrives as the raw payload of a `COM_QUERY`, in the client's character set, so it may not be
//! UTF-8 (a latin1 blob literal, say). Everything here therefore works on `&[u8]` and only ever looks at ASCII
//! bytes; a byte `>= 0x80` is never whitespace, never a comment marker and always part of an identifier, which
//! is what MySQL's lexer does for every character set a client may use for queries.

use super::{action_for, Classification, Keyword};

/// Classifies one statement by its first keyword, after leading whitespace and comments.
///
/// Never allocates and never panics, whatever the bytes. A statement of only whitespace and comments, or one
/// that does not start with a word at all, is [`Keyword::Other`] and is relayed: the backend gives the right
/// error for it. Whether it is relayed or answered by the proxy is `super::action_for`'s decision.
pub fn classify(sql: &[u8]) -> Classification {
    let keyword_offset = skip_to_first_word(sql).0;
    let keyword = Keyword::lookup(word_at(sql, keyword_offset));
    let action = action_for(keyword, sql);
    Classification {
        keyword,
        action,
        keyword_offset,
    }
}

/// Skips what MySQL skips before the first token and returns the offset of that token (or `sql.len()`).
///
/// Skipped: ASCII whitespace; `/* ... */` (not nested — MySQL ends it at the first `*/`, so `/* /* */` is one
/// comment); `# ...` and `-- ...` to the end of the line, where `--` counts only when followed by whitespace, a
/// control character or the end of the statement (otherwise `--1` is arithmetic); and opening parentheses,
/// because `(SELECT ...) UNION (SELECT ...)` is still a `SELECT`.
///
/// Executable comments are *not* skipped wholesale: `/*!`, `/*!40101`, `/*M!` and `/*M!100101` are markers
/// whose content the server runs as code, so only the marker (and its version digits) is skipped and the
/// keyword is read from inside — mysqldump's `/*!40101 SET NAMES utf8 */` is a `SET`. The `*/` closing such a
/// comment is skipped too (`/*!*/ SELECT 1`). The version is not compared with the backend's here: a relayed
/// statement reaches the backend, which decides; a statement the proxy would act on itself in a versioned
/// comment is first checked with the server ([`version_gate`]).
///
/// Also returns the marker of the executable comment the word is in when that marker has a version
/// (`/*!99999`, `/*M!100500`): see [`version_gate`].
fn skip_to_first_word(sql: &[u8]) -> (usize, Option<&[u8]>) {
    let mut pos = 0;
    // Inside `/*! ... */`: its closing `*/` is then not garbage but the end of the executable comment.
    let mut in_executable = false;
    // The open executable comment's marker, if it has version digits.
    let mut gate: Option<&[u8]> = None;
    let open = |start: usize, digits_from: usize| {
        let end = skip_digits(sql, digits_from);
        let marker = sql.get(start..end).filter(|_| end > digits_from);
        (end, marker)
    };
    loop {
        let rest = sql.get(pos..).unwrap_or(&[]);
        pos = match rest {
            [b, ..] if is_space(*b) || *b == b'(' => pos + 1,
            [b'/', b'*', b'!', ..] if !in_executable => {
                in_executable = true;
                let (end, marker) = open(pos, pos + 3);
                gate = marker;
                end
            }
            [b'/', b'*', b'M', b'!', ..] if !in_executable => {
                in_executable = true;
                let (end, marker) = open(pos, pos + 4);
                gate = marker;
                end
            }
            [b'/', b'*', ..] => end_of_block_comment(sql, pos + 2),
            [b'*', b'/', ..] if in_executable => {
                in_executable = false;
                gate = None;
                pos + 2
            }
            [b'-', b'-', after @ ..]
                if after
                    .first()
                    .is_none_or(|&b| is_space(b) || b.is_ascii_control()) =>
            {
                end_of_line(sql, pos + 2)
            }
            [b'#', ..] => end_of_line(sql, pos + 1),
            _ => return (pos, gate),
        };
    }
}

/// The marker (`/*!99999`, `/*M!100500`) of the version-gated executable comment a statement's first
/// word is in, if it is in one. Whether the server runs that code depends on its version and its own
/// rules (MariaDB skips some MySQL versions too), so before msgproxy answers such a statement itself,
/// or believes the database a `USE` in it names, it asks the server (`SELECT 0 <marker> + 1 */`).
/// `None` for plain code and unversioned `/*!` / `/*M!` comments, which always run.
pub fn version_gate(sql: &[u8]) -> Option<&[u8]> {
    skip_to_first_word(sql).1
}

/// The identifier-like word starting at `pos` (empty if there is none).
///
/// The word runs over every byte MySQL allows in an unquoted identifier, so `selectx`, `select1` and
/// `select\xe9` are one word each — identifiers, not `SELECT` — and are looked up (and missed) as a whole.
fn word_at(sql: &[u8], pos: usize) -> &[u8] {
    let rest = sql.get(pos..).unwrap_or(&[]);
    let len = rest
        .iter()
        .position(|&b| !is_identifier_byte(b))
        .unwrap_or(rest.len());
    rest.get(..len).unwrap_or(&[])
}

/// Whitespace as MySQL's lexer sees it: space, tab, LF, VT, FF, CR.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Bytes of an unquoted identifier: ASCII letters, digits, `_`, `$`, and any non-ASCII byte.
fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// The offset after the version digits of an executable comment marker (`/*!40101`), if any.
fn skip_digits(sql: &[u8], from: usize) -> usize {
    let rest = sql.get(from..).unwrap_or(&[]);
    from + rest.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// The offset just after the `*/` that ends a block comment whose body starts at `from`, or the end of the
/// statement when it is never closed (then everything left is comment).
fn end_of_block_comment(sql: &[u8], from: usize) -> usize {
    let rest = sql.get(from..).unwrap_or(&[]);
    rest.windows(2)
        .position(|w| w == b"*/")
        .map_or(sql.len(), |i| from + i + 2)
}

/// The offset just after the newline that ends a line comment whose body starts at `from`, or the end of the
/// statement.
fn end_of_line(sql: &[u8], from: usize) -> usize {
    let rest = sql.get(from..).unwrap_or(&[]);
    rest.iter()
        .position(|&b| b == b'\n')
        .map_or(sql.len(), |i| from + i + 1)
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
