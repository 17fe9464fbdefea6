//! Which tables a DDL statement can have changed, read from its text: after a DDL statement the
//! proxy reloads only those (and only when one of them is, or may become, a message table), so
//! DDL on plain and temporary tables costs the client nothing (issue 23).
//!
//! Only the statement's head is read, as the server's grammar has it: the table a `CREATE`,
//! `ALTER`, `DROP` or `RENAME` acts on, and the names an `ALTER TABLE ... RENAME TO` gives it.
//! Anything the reader does not follow is [`DdlEffect::Unknown`], and the caller reloads
//! everything: a wrong guess here must never leave a message table unloaded.

use super::current_db::may_hold_several;
use super::lexer::{
    is_word, string_value, unquote_identifier, Quoting, Spelled, SpelledTokens, TokenKind, Words,
};
use super::mentions::contains_ignore_ascii_case;
use super::{Keyword, TableName};

/// The one definition of "DDL that can affect a message table", for a statement a session relays
/// (whose first keyword the classifier found) and a query event the binlog shows alike: a
/// statement that starts with `CREATE`, `ALTER`, `DROP`, `RENAME` or `TRUNCATE`, unless it is
/// one statement about a temporary table (`CREATE [OR REPLACE] TEMPORARY ...`, `DROP TEMPORARY
/// ...`), which is never a message table and, unlike every other DDL, does not commit the open
/// transaction. What such a statement may have changed is then [`ddl_effect`]'s to say.
///
/// A cheap test of the first words only: generous on purpose (`CREATE USER` counts, and costs a
/// scan of its text), since a DDL missed here is a message table left stale.
pub fn is_ddl(keyword: Keyword, sql: &[u8]) -> bool {
    keyword.is_ddl() && (!is_temporary(sql) || may_hold_several(sql))
}

/// Whether the statement starts `CREATE [OR REPLACE] TEMPORARY` or `DROP TEMPORARY`.
fn is_temporary(sql: &[u8]) -> bool {
    let mut words = Words::new(sql);
    words.next_word();
    let mut word = words.next_word();
    if word.is_some_and(|w| w.eq_ignore_ascii_case(b"or")) && words.next_is("replace") {
        word = words.next_word();
    }
    word.is_some_and(|w| w.eq_ignore_ascii_case(b"temporary"))
}

/// What a successful DDL statement may have done to tables that are, or may become, message
/// tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DdlEffect {
    /// Nothing: a temporary table (never a message table), a view, a routine, a database made
    /// or altered, a user, ...
    Nothing,
    /// These tables may have appeared, changed or gone. `message_comment`: a string literal of
    /// the statement holds `vitess_message`, so a table may have become a message table.
    Tables {
        tables: Vec<TableName>,
        message_comment: bool,
    },
    /// Every table of this database is gone (`DROP DATABASE`).
    Database(String),
    /// The statement could not be followed: anything may have changed.
    Unknown,
}

/// What the DDL statement `sql` (one statement, as the server ran it with `quoting`) may have
/// changed.
pub fn ddl_effect(sql: &[u8], quoting: Quoting) -> DdlEffect {
    let mut r = Reader {
        tokens: SpelledTokens::new(sql, quoting),
        quoting,
        message_comment: false,
    };
    r.statement().unwrap_or(DdlEffect::Unknown)
}

/// The statement's tokens, with a note of any string literal that names `vitess_message`.
struct Reader<'a> {
    tokens: SpelledTokens<'a>,
    quoting: Quoting,
    message_comment: bool,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Spelled<'a> {
        let token = self.tokens.next();
        if token.0 == TokenKind::String {
            let value = string_value(token.1, self.quoting);
            if contains_ignore_ascii_case(&value, b"vitess_message") {
                self.message_comment = true;
            }
        }
        token
    }

    /// `None`: a statement this reader does not follow.
    fn statement(&mut self) -> Option<DdlEffect> {
        let first = self.next();
        let tables = if is_word(first, "create") {
            self.create()?
        } else if is_word(first, "alter") {
            self.alter()?
        } else if is_word(first, "drop") {
            self.drop()?
        } else if is_word(first, "rename") {
            self.rename()?
        } else if is_word(first, "truncate") {
            // The definition stays; the rows go, which the claims re-check anyway.
            return Some(DdlEffect::Nothing);
        } else {
            return None;
        };
        Some(match tables {
            Head::Nothing => DdlEffect::Nothing,
            Head::Database(db) => DdlEffect::Database(db),
            Head::Tables(tables) => {
                // The rest of the statement, for a `vitess_message` comment.
                while !matches!(self.next().0, TokenKind::Eof | TokenKind::Invalid) {}
                DdlEffect::Tables {
                    tables,
                    message_comment: self.message_comment,
                }
            }
        })
    }

    /// After `CREATE`.
    fn create(&mut self) -> Option<Head> {
        let mut token = self.next();
        if is_word(token, "or") {
            if !is_word(self.next(), "replace") {
                return None;
            }
            token = self.next();
        }
        if is_word(token, "temporary") {
            return Some(Head::Nothing);
        }
        if is_word(token, "table") {
            self.if_exists(&["if", "not", "exists"]);
            return Some(Head::Tables(vec![self.table_name()?]));
        }
        while ["online", "offline", "unique", "fulltext", "spatial"]
            .iter()
            .any(|w| is_word(token, w))
        {
            token = self.next();
        }
        if is_word(token, "index") || is_word(token, "key") {
            return self.index_on();
        }
        // Databases, views, sequences, routines, triggers, events, users, roles, servers:
        // none is (or makes) a base table with a comment.
        Some(Head::Nothing)
    }

    /// After `ALTER`.
    fn alter(&mut self) -> Option<Head> {
        let mut token = self.next();
        while is_word(token, "online") || is_word(token, "ignore") {
            token = self.next();
        }
        if !is_word(token, "table") {
            return Some(Head::Nothing);
        }
        self.if_exists(&["if", "exists"]);
        let mut tables = vec![self.table_name()?];
        // `RENAME [TO | AS] name` anywhere in the list of changes (but not `RENAME COLUMN`,
        // `RENAME INDEX` or `RENAME KEY`).
        loop {
            let token = self.next();
            match token.0 {
                TokenKind::Eof => break,
                TokenKind::Invalid => return None,
                _ if is_word(token, "rename") => {
                    let mut peek = self.tokens_clone();
                    let after = peek.next();
                    if ["column", "index", "key"].iter().any(|w| is_word(after, w)) {
                        continue;
                    }
                    if is_word(after, "to") || is_word(after, "as") {
                        self.next();
                    }
                    tables.push(self.table_name()?);
                }
                _ => {}
            }
        }
        Some(Head::Tables(tables))
    }

    /// After `DROP`.
    fn drop(&mut self) -> Option<Head> {
        let mut token = self.next();
        if is_word(token, "temporary") {
            return Some(Head::Nothing);
        }
        while is_word(token, "online") || is_word(token, "offline") {
            token = self.next();
        }
        if is_word(token, "table") || is_word(token, "tables") {
            self.if_exists(&["if", "exists"]);
            let mut tables = vec![self.table_name()?];
            while self.peek().0 == TokenKind::Punct(b',') {
                self.next();
                tables.push(self.table_name()?);
            }
            return Some(Head::Tables(tables));
        }
        if is_word(token, "index") || is_word(token, "key") {
            return self.index_on();
        }
        if is_word(token, "database") || is_word(token, "schema") {
            self.if_exists(&["if", "exists"]);
            return Some(Head::Database(identifier(self.next())?));
        }
        Some(Head::Nothing)
    }

    /// After `RENAME`: `TABLE[S] [IF EXISTS] a [WAIT n | NOWAIT] TO b, c TO d`.
    fn rename(&mut self) -> Option<Head> {
        let token = self.next();
        if !is_word(token, "table") && !is_word(token, "tables") {
            // RENAME USER.
            return Some(Head::Nothing);
        }
        self.if_exists(&["if", "exists"]);
        let mut tables = Vec::new();
        loop {
            tables.push(self.table_name()?);
            let mut token = self.next();
            if is_word(token, "wait") {
                self.next();
                token = self.next();
            } else if is_word(token, "nowait") {
                token = self.next();
            }
            if !is_word(token, "to") {
                return None;
            }
            tables.push(self.table_name()?);
            match self.next() {
                (TokenKind::Punct(b','), _) => {}
                (TokenKind::Eof, _) => return Some(Head::Tables(tables)),
                _ => return None,
            }
        }
    }

    /// `[IF NOT EXISTS] name [USING type] ON table ...` after `CREATE INDEX`, `[IF EXISTS] name
    /// ON table` after `DROP INDEX`: the table.
    fn index_on(&mut self) -> Option<Head> {
        loop {
            let token = self.next();
            match token.0 {
                TokenKind::Eof | TokenKind::Invalid => return None,
                _ if is_word(token, "on") => return Some(Head::Tables(vec![self.table_name()?])),
                _ => {}
            }
        }
    }

    /// Skips the words of `IF [NOT] EXISTS` when they come next.
    fn if_exists(&mut self, words: &[&str]) {
        let mut peek = self.tokens_clone();
        if words.iter().all(|w| is_word(peek.next(), w)) {
            for _ in words {
                self.next();
            }
        }
    }

    /// `name` or `schema.name`.
    fn table_name(&mut self) -> Option<TableName> {
        let first = identifier(self.next())?;
        if self.peek().0 != TokenKind::Punct(b'.') {
            return Some(TableName {
                schema: None,
                name: first,
            });
        }
        self.next();
        let name = identifier(self.next())?;
        Some(TableName {
            schema: Some(first),
            name,
        })
    }

    fn peek(&self) -> Spelled<'a> {
        self.tokens_clone().next()
    }

    fn tokens_clone(&self) -> SpelledTokens<'a> {
        self.tokens.clone()
    }
}

/// The name an identifier token stands for (`None` for anything else, and for a name that
/// is not UTF-8: the client's character set is the server's to convert).
fn identifier((kind, text): Spelled<'_>) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    match kind {
        TokenKind::Word => Some(text.to_owned()),
        TokenKind::QuotedIdent => unquote_identifier(text),
        _ => None,
    }
}

/// The tables (or database) a statement's head names.
enum Head {
    Nothing,
    Tables(Vec<TableName>),
    Database(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(schema: Option<&str>, name: &str) -> TableName {
        TableName {
            schema: schema.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    fn effect(sql: &str) -> DdlEffect {
        ddl_effect(sql.as_bytes(), Quoting::DEFAULT)
    }

    fn tables(sql: &str) -> (Vec<TableName>, bool) {
        match effect(sql) {
            DdlEffect::Tables {
                tables,
                message_comment,
            } => (tables, message_comment),
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn is_ddl_statement(sql: &str) -> bool {
        is_ddl(crate::sql::classify(sql.as_bytes()).keyword, sql.as_bytes())
    }

    #[test]
    fn ddl_is_every_create_alter_drop_rename_truncate_but_of_temporary_tables() {
        for sql in [
            "CREATE TABLE m (id int)",
            "create or replace table m (id int)",
            "/* c */ ALTER ONLINE TABLE m ADD c int",
            "DROP TABLE IF EXISTS m",
            "RENAME TABLE a TO b",
            "TRUNCATE m",
            "DROP DATABASE d",
            "CREATE UNIQUE INDEX i ON m (time_next)",
            "DROP INDEX i ON m",
            "CREATE USER u",
            "CREATE TABLE temporary (i int)",
            "/*!40000 ALTER TABLE `m` DISABLE KEYS */",
            // Several statements: a later one may be a message table's.
            "CREATE TEMPORARY TABLE t (i int); CREATE TABLE m (id int)",
        ] {
            assert!(is_ddl_statement(sql), "{sql}");
        }
        for sql in [
            "CREATE TEMPORARY TABLE t (i int)",
            "create or replace temporary table t (i int)",
            "DROP TEMPORARY TABLE IF EXISTS `t` /* generated by server */",
            "/*!40101 DROP TEMPORARY TABLE t */",
            "INSERT INTO m VALUES (1)",
            "SELECT 'CREATE TABLE m'",
            "GRANT ALL ON *.* TO u",
            "",
        ] {
            assert!(!is_ddl_statement(sql), "{sql}");
        }
    }

    #[test]
    fn temporary_tables_and_other_objects_change_nothing() {
        for sql in [
            "CREATE TEMPORARY TABLE t (i int) COMMENT 'vitess_message'",
            "create or replace temporary table t (i int)",
            "DROP TEMPORARY TABLE IF EXISTS t",
            "CREATE DATABASE d",
            "CREATE VIEW v AS SELECT 1",
            "CREATE DEFINER=root@localhost PROCEDURE p() SELECT 1",
            "ALTER DATABASE d CHARACTER SET utf8mb4",
            "ALTER USER u IDENTIFIED BY 'x'",
            "DROP VIEW v",
            "DROP PROCEDURE p",
            "RENAME USER a TO b",
            "TRUNCATE TABLE m",
            "CREATE SEQUENCE s",
        ] {
            assert_eq!(effect(sql), DdlEffect::Nothing, "{sql}");
        }
    }

    #[test]
    fn tables_created_altered_and_dropped() {
        assert_eq!(
            tables("CREATE TABLE m (id int) COMMENT 'vitess_message,vt_ack_wait=5'"),
            (vec![t(None, "m")], true)
        );
        assert_eq!(
            tables("create or replace table if not exists `d`.`m``x` like src"),
            (vec![t(Some("d"), "m`x")], false)
        );
        assert_eq!(
            tables("/* c */ ALTER ONLINE IGNORE TABLE IF EXISTS d.m ADD c int, COMMENT = 'VITESS_MESSAGE'"),
            (vec![t(Some("d"), "m")], true)
        );
        assert_eq!(
            tables("ALTER TABLE m RENAME COLUMN a TO b, RENAME INDEX i TO j, RENAME TO d2.n"),
            (vec![t(None, "m"), t(Some("d2"), "n")], false)
        );
        assert_eq!(
            tables("alter table m rename n"),
            (vec![t(None, "m"), t(None, "n")], false)
        );
        assert_eq!(
            tables("DROP TABLE IF EXISTS a, d.b, `c` RESTRICT"),
            (vec![t(None, "a"), t(Some("d"), "b"), t(None, "c")], false)
        );
        assert_eq!(
            tables("RENAME TABLE a TO b, d.c WAIT 1 TO d.e"),
            (
                vec![
                    t(None, "a"),
                    t(None, "b"),
                    t(Some("d"), "c"),
                    t(Some("d"), "e")
                ],
                false
            )
        );
        assert_eq!(
            tables("CREATE UNIQUE INDEX i ON d.m (time_next)"),
            (vec![t(Some("d"), "m")], false)
        );
        assert_eq!(
            tables("DROP INDEX IF EXISTS i ON m"),
            (vec![t(None, "m")], false)
        );
        assert_eq!(
            tables("/*!40101 CREATE TABLE m (i int) */"),
            (vec![t(None, "m")], false)
        );
    }

    #[test]
    fn the_comment_is_read_as_the_server_reads_it() {
        // An escaped letter is still the letter; `\_` keeps its backslash.
        assert!(tables(r"CREATE TABLE m (i int) COMMENT 'v\itess_message'").1);
        assert!(!tables(r"CREATE TABLE m (i int) COMMENT 'vitess\_message'").1);
        assert!(tables("CREATE TABLE m (i int COMMENT 'vitess_message')").1);
        assert!(!tables("CREATE TABLE vitess_message (i int)").1);
    }

    #[test]
    fn databases_dropped() {
        assert_eq!(
            effect("DROP DATABASE IF EXISTS `d`"),
            DdlEffect::Database("d".into())
        );
        assert_eq!(effect("drop schema d"), DdlEffect::Database("d".into()));
    }

    #[test]
    fn what_is_not_followed_is_unknown() {
        for sql in [
            "CREATE TABLE",
            "DROP TABLE 'x'",
            "RENAME TABLE a b",
            "ALTER TABLE m COMMENT 'unterminated",
            "CREATE INDEX i",
            "DROP TABLE d.",
            "SELECT 1",
        ] {
            assert_eq!(effect(sql), DdlEffect::Unknown, "{sql}");
        }
        assert_eq!(
            ddl_effect(b"CREATE TABLE \xff (i int)", Quoting::DEFAULT),
            DdlEffect::Unknown
        );
    }
}
