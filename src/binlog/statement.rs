//! What a binlog query event means to the watcher: a transaction boundary, a schema change
//! that can affect message tables, or anything else. Only the first few keywords are read.

/// The kinds of statement the watcher tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statement {
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK` (the whole transaction).
    Rollback,
    /// `ROLLBACK TO [SAVEPOINT] x`: part of the transaction is undone.
    RollbackToSavepoint,
    /// `SAVEPOINT x`, `RELEASE SAVEPOINT x`: nothing to do.
    Savepoint,
    XaStart,
    XaEnd,
    XaPrepare,
    XaCommit,
    XaRollback,
    /// `CREATE`/`ALTER`/`DROP`/`RENAME`/`TRUNCATE` of a table, or `CREATE`/`ALTER`/`DROP` of a
    /// database: message tables may have appeared, changed or gone. Temporary tables are not
    /// counted (they are never message tables).
    Ddl,
    /// Anything else (a statement-format DML from a session with another `binlog_format`,
    /// `GRANT`, `ANALYZE TABLE`, ...).
    Other,
}

/// Classifies a query event's text.
pub fn classify(sql: &[u8]) -> Statement {
    let mut words = Words { sql, at: 0 };
    let mut next = || words.next_upper();
    let first = next();
    match first.as_deref() {
        Some("BEGIN") => Statement::Begin,
        Some("START") => match next().as_deref() {
            Some("TRANSACTION") => Statement::Begin,
            _ => Statement::Other,
        },
        Some("COMMIT") => Statement::Commit,
        Some("ROLLBACK") => {
            let mut w = next();
            if w.as_deref() == Some("WORK") {
                w = next();
            }
            if w.as_deref() == Some("TO") {
                Statement::RollbackToSavepoint
            } else {
                Statement::Rollback
            }
        }
        Some("SAVEPOINT") | Some("RELEASE") => Statement::Savepoint,
        Some("XA") => match next().as_deref() {
            Some("START") | Some("BEGIN") => Statement::XaStart,
            Some("END") => Statement::XaEnd,
            Some("PREPARE") => Statement::XaPrepare,
            Some("COMMIT") => Statement::XaCommit,
            Some("ROLLBACK") => Statement::XaRollback,
            _ => Statement::Other,
        },
        Some("CREATE") | Some("DROP") | Some("ALTER") => {
            let mut w = next();
            // CREATE OR REPLACE, ALTER ONLINE / IGNORE (MariaDB).
            if w.as_deref() == Some("OR") {
                next();
                w = next();
            }
            while matches!(w.as_deref(), Some("ONLINE") | Some("IGNORE")) {
                w = next();
            }
            match w.as_deref() {
                Some("TABLE") | Some("TABLES") | Some("DATABASE") | Some("SCHEMA") => {
                    Statement::Ddl
                }
                _ => Statement::Other,
            }
        }
        Some("RENAME") => match next().as_deref() {
            Some("TABLE") | Some("TABLES") => Statement::Ddl,
            _ => Statement::Other,
        },
        Some("TRUNCATE") => Statement::Ddl,
        _ => Statement::Other,
    }
}

/// What follows the first `n` words of `sql` (comments and white space skipped), e.g. the XID
/// of `XA COMMIT X'31',X'',1`.
pub fn after_words(sql: &[u8], n: usize) -> &[u8] {
    let mut words = Words { sql, at: 0 };
    for _ in 0..n {
        if words.next_upper().is_none() {
            return &[];
        }
    }
    words.skip_noise();
    &sql[words.at.min(sql.len())..]
}

/// Whether `sql` contains `name` (ASCII case-insensitively) as a whole identifier, not as part
/// of a longer one: `m` is named in ``INSERT INTO `m` `` and `db.m`, not in `CREATE` or `m2`.
/// Still generous (a string literal counts); a false positive costs one poll.
pub fn names_identifier(sql: &[u8], name: &[u8]) -> bool {
    if name.is_empty() || name.len() > sql.len() {
        return false;
    }
    let ident = |b: Option<&u8>| {
        b.is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$') || *b >= 0x80)
    };
    (0..=sql.len() - name.len()).any(|i| {
        sql[i..i + name.len()].eq_ignore_ascii_case(name)
            && !ident(i.checked_sub(1).and_then(|j| sql.get(j)))
            && !ident(sql.get(i + name.len()))
    })
}

/// The words of a statement, skipping white space, comments and the markers of executable
/// comments (`/*!50100 ...*/`, `/*M!100500 ...*/`), whose content is SQL.
struct Words<'a> {
    sql: &'a [u8],
    at: usize,
}

impl Words<'_> {
    fn next_upper(&mut self) -> Option<String> {
        self.skip_noise();
        let start = self.at;
        while self
            .sql
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            self.at += 1;
        }
        if self.at == start {
            return None;
        }
        // Only ASCII bytes were taken, so this is valid UTF-8.
        Some(String::from_utf8_lossy(&self.sql[start..self.at]).to_ascii_uppercase())
    }

    fn skip_noise(&mut self) {
        loop {
            let rest = &self.sql[self.at.min(self.sql.len())..];
            if let Some(b) = rest.first() {
                if b.is_ascii_whitespace() {
                    self.at += 1;
                    continue;
                }
            }
            if rest.starts_with(b"/*!") || rest.starts_with(b"/*M!") {
                self.at += if rest[2] == b'M' { 4 } else { 3 };
                while self.sql.get(self.at).is_some_and(u8::is_ascii_digit) {
                    self.at += 1;
                }
                continue;
            }
            if rest.starts_with(b"/*") {
                self.at += match rest[2..].windows(2).position(|w| w == b"*/") {
                    Some(end) => 2 + end + 2,
                    None => rest.len(),
                };
                continue;
            }
            if rest.starts_with(b"*/") {
                self.at += 2;
                continue;
            }
            if rest.starts_with(b"#") || rest.starts_with(b"-- ") || rest == b"--" {
                self.at += rest
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(rest.len(), |p| p + 1);
                continue;
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Statement::*;
    use super::*;

    #[test]
    fn transaction_control() {
        for (sql, want) in [
            ("BEGIN", Begin),
            ("begin work", Begin),
            ("START TRANSACTION", Begin),
            ("COMMIT", Commit),
            ("commit /* x */", Commit),
            ("ROLLBACK", Rollback),
            ("ROLLBACK WORK", Rollback),
            ("ROLLBACK TO SAVEPOINT a", RollbackToSavepoint),
            ("rollback to a", RollbackToSavepoint),
            ("SAVEPOINT a", Savepoint),
            ("RELEASE SAVEPOINT a", Savepoint),
            ("XA START X'31',X'',1", XaStart),
            ("XA BEGIN 'x'", XaStart),
            ("XA END X'31',X'',1", XaEnd),
            ("XA PREPARE 'x'", XaPrepare),
            ("XA COMMIT X'31',X'',1", XaCommit),
            ("XA COMMIT 'x' ONE PHASE", XaCommit),
            ("XA ROLLBACK 'x'", XaRollback),
        ] {
            assert_eq!(classify(sql.as_bytes()), want, "{sql}");
        }
    }

    #[test]
    fn schema_changes() {
        for sql in [
            "create table t(id bigint)",
            "CREATE TABLE IF NOT EXISTS `m` (id int)",
            "CREATE OR REPLACE TABLE m (id int)",
            "ALTER TABLE m COMMENT 'vitess_message,...'",
            "ALTER ONLINE TABLE m ADD c int",
            "alter ignore table m add c int",
            "DROP TABLE `m` /* generated by server */",
            "DROP TABLE IF EXISTS a, b",
            "RENAME TABLE a TO b",
            "TRUNCATE m",
            "TRUNCATE TABLE m",
            "DROP DATABASE x",
            "create schema x",
            "ALTER DATABASE x CHARACTER SET utf8mb4",
            "/* leading */ CREATE TABLE t (i int)",
            "-- note\nCREATE TABLE t (i int)",
            "# note\nALTER TABLE t ADD i int",
            "/*!40000 ALTER TABLE `t` DISABLE KEYS */",
            "/*M!100100 CREATE TABLE t (i int) */",
        ] {
            assert_eq!(classify(sql.as_bytes()), Ddl, "{sql}");
        }
    }

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
            "DROP DATABASE `binlog_acks`",
            "",
        ] {
            assert!(!names_identifier(sql.as_bytes(), b"m"), "{sql}");
        }
        assert!(!names_identifier(b"x", b""));
    }

    #[test]
    fn what_follows_words() {
        assert_eq!(after_words(b"XA COMMIT X'31',X'',1", 2), b"X'31',X'',1");
        assert_eq!(
            after_words(b"/* c */ xa  commit\n 'a' ONE PHASE", 2),
            b"'a' ONE PHASE"
        );
        assert_eq!(after_words(b"XA COMMIT", 2), b"");
        assert_eq!(after_words(b"XA", 2), b"");
        assert_eq!(after_words(b"'a'", 0), b"'a'");
    }

    #[test]
    fn everything_else() {
        for sql in [
            "CREATE TEMPORARY TABLE t (i int)",
            "CREATE OR REPLACE TEMPORARY TABLE t (i int)",
            "DROP TEMPORARY TABLE IF EXISTS `t` /* generated by server */",
            "CREATE USER x",
            "CREATE DEFINER=`root`@`localhost` TRIGGER tr AFTER INSERT ON t FOR EACH ROW SET @a=1",
            "CREATE INDEX i ON t (c)",
            "INSERT INTO m VALUES (1)",
            "GRANT SELECT ON *.* TO x",
            "",
            "   ",
            "/* only a comment */",
            "/* unterminated",
            "# Dummy event replacing event type 160",
            "STARTLING",
            "BEGINNER",
            "ROLLBACKS",
        ] {
            assert_eq!(classify(sql.as_bytes()), Other, "{sql:?}");
        }
        assert_eq!(classify(b"\xff\xfe"), Other);
    }
}
