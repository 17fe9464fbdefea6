//! Whether a statement mentions a name: the cheap, deliberately generous byte searches that tell
//! "may touch this message table" from "cannot", for every statement a session relays and every
//! query event the binlog shows. A false positive costs one poll or one reload by name, never a
//! wrong answer, so no statement is lexed here.

use super::lexer::is_identifier_byte;

/// Whether `sql` contains `name` (ASCII case-insensitively) as a whole identifier, not as part
/// of a longer one: `m` is named in ``INSERT INTO `m` `` and `db.m`, not in `CREATE` or `m2`.
/// Still generous (a string literal counts); a false positive costs one poll.
pub fn names_identifier(sql: &[u8], name: &[u8]) -> bool {
    if name.is_empty() || name.len() > sql.len() {
        return false;
    }
    let ident = |b: Option<&u8>| b.is_some_and(|&b| is_identifier_byte(b));
    (0..=sql.len() - name.len()).any(|i| {
        sql[i..i + name.len()].eq_ignore_ascii_case(name)
            && !ident(i.checked_sub(1).and_then(|j| sql.get(j)))
            && !ident(sql.get(i + name.len()))
    })
}

/// Whether `sql` contains `needle` anywhere, ASCII case-insensitively (an empty needle is in
/// nothing).
pub fn contains_ignore_ascii_case(sql: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && sql
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Whether `name` can be written as a bare identifier (letters, digits, `_`, `$`, non-ASCII), so
/// that [`names_identifier`] finds it; any other name is only ever written quoted.
pub fn is_bare_identifier(name: &[u8]) -> bool {
    name.iter().all(|&b| is_identifier_byte(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_whole_words() {
        for sql in [
            "INSERT INTO m VALUES (1)",
            "insert into `M` values (1)",
            "TRUNCATE db.m",
            "update m set x=1",
            "m",
        ] {
            assert!(names_identifier(sql.as_bytes(), b"m"), "{sql}");
        }
        for sql in [
            "CREATE TABLE other (i int)",
            "INSERT INTO m2 VALUES (1)",
            "INSERT INTO mé VALUES (1)",
            "INSERT INTO $m VALUES (1)",
            "DROP DATABASE `binlog_acks`",
            "",
        ] {
            assert!(!names_identifier(sql.as_bytes(), b"m"), "{sql}");
        }
        assert!(!names_identifier(b"x", b""));
    }

    #[test]
    fn anywhere_ignoring_case() {
        assert!(contains_ignore_ascii_case(
            b"COMMENT 'VITESS_message'",
            b"vitess_message"
        ));
        assert!(!contains_ignore_ascii_case(b"vitess", b"vitess_message"));
        assert!(!contains_ignore_ascii_case(b"abc", b""));
        assert!(is_bare_identifier("café_$1".as_bytes()));
        assert!(!is_bare_identifier(b"a-b"));
        assert!(!is_bare_identifier(b"a`b"));
    }
}
