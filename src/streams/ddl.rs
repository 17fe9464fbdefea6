//! What a DDL statement in the binlog does to one stream table: whether it creates it (afresh, or
//! by a rename) or makes it go (drop, rename away, its database dropped). A table dropped and
//! created again starts a new stream (docs/STREAMS.md §2): a group's reader stops at the drop,
//! and `START EARLIEST` begins after the table's last creation.
//!
//! Only the statement's names are read: `CREATE [OR REPLACE] TABLE [IF NOT EXISTS] name`, `DROP
//! TABLE [IF EXISTS] name, ...`, `RENAME TABLE a TO b, ...`, `ALTER TABLE a ... RENAME [TO|AS] b`,
//! `DROP DATABASE|SCHEMA [IF EXISTS] name`. An unqualified name is in the event's default
//! database. `CREATE TEMPORARY TABLE` is never the stream table.

use crate::sql::{unquote_identifier, Piece, Words};

/// The effect of a statement on the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableDdl {
    /// Nothing the stream cares about.
    None,
    /// The table now exists as a new table (created, or renamed to this name).
    Created,
    /// The table is gone (dropped, renamed away, its database dropped).
    Gone,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// An unquoted word, as written.
    Word(String),
    /// A backtick-quoted identifier, unquoted.
    Quoted(String),
    Dot,
    Comma,
    Other,
}

impl Tok {
    fn is(&self, keyword: &str) -> bool {
        matches!(self, Tok::Word(w) if w.eq_ignore_ascii_case(keyword))
    }

    fn ident(&self) -> Option<&str> {
        match self {
            Tok::Word(w) | Tok::Quoted(w) => Some(w),
            _ => None,
        }
    }
}

/// The statement's tokens, read by the one SQL lexer (`crate::sql`): comments, executable
/// comments and string literals are what they are to the server (a `RENAME TO` inside a
/// comment or a string is no rename).
fn tokens(sql: &[u8]) -> Vec<Tok> {
    let mut words = Words::new(sql);
    let mut out = Vec::new();
    while let Some(piece) = words.next_piece() {
        out.push(match piece {
            Piece::Word(w) => Tok::Word(String::from_utf8_lossy(w).into_owned()),
            Piece::QuotedIdent(q) => match unquote_identifier(&String::from_utf8_lossy(q)) {
                Some(name) => Tok::Quoted(name),
                None => Tok::Other,
            },
            Piece::Punct(b'.') => Tok::Dot,
            Piece::Punct(b',') => Tok::Comma,
            Piece::Punct(_) | Piece::Other => Tok::Other,
        });
    }
    out
}

/// A `[schema.]name` at `toks[at..]`: the name with its schema (the default when unqualified),
/// and the index after it.
fn name_at(toks: &[Tok], at: usize, db: &str) -> Option<((String, String), usize)> {
    let first = toks.get(at)?.ident()?;
    if toks.get(at + 1) == Some(&Tok::Dot) {
        let second = toks.get(at + 2)?.ident()?;
        return Some(((first.to_owned(), second.to_owned()), at + 3));
    }
    Some(((db.to_owned(), first.to_owned()), at + 1))
}

/// The effect of `sql`, run in default database `db`, on `schema`.`table`.
pub fn effect(sql: &[u8], db: &str, schema: &str, table: &str) -> TableDdl {
    let toks = tokens(sql);
    let ours = |(s, t): &(String, String)| s == schema && t == table;
    let mut at = 1;
    let skip = |at: &mut usize, words: &[&str]| {
        while toks.get(*at).is_some_and(|t| words.iter().any(|w| t.is(w))) {
            *at += 1;
        }
    };
    let Some(first) = toks.first() else {
        return TableDdl::None;
    };
    if first.is("CREATE") {
        skip(&mut at, &["OR", "REPLACE"]);
        if toks.get(at).is_some_and(|t| t.is("TEMPORARY"))
            || !toks.get(at).is_some_and(|t| t.is("TABLE"))
        {
            return TableDdl::None;
        }
        at += 1;
        skip(&mut at, &["IF", "NOT", "EXISTS"]);
        return match name_at(&toks, at, db) {
            Some((name, _)) if ours(&name) => TableDdl::Created,
            _ => TableDdl::None,
        };
    }
    if first.is("DROP") {
        skip(&mut at, &["TEMPORARY"]);
        let what = toks.get(at);
        if what.is_some_and(|t| t.is("DATABASE") || t.is("SCHEMA")) {
            at += 1;
            skip(&mut at, &["IF", "EXISTS"]);
            return match toks.get(at).and_then(Tok::ident) {
                Some(name) if name == schema => TableDdl::Gone,
                _ => TableDdl::None,
            };
        }
        if !what.is_some_and(|t| t.is("TABLE") || t.is("TABLES")) {
            return TableDdl::None;
        }
        at += 1;
        skip(&mut at, &["IF", "EXISTS"]);
        while let Some((name, next)) = name_at(&toks, at, db) {
            if ours(&name) {
                return TableDdl::Gone;
            }
            if toks.get(next) != Some(&Tok::Comma) {
                break;
            }
            at = next + 1;
        }
        return TableDdl::None;
    }
    if first.is("RENAME") {
        if !toks
            .get(at)
            .is_some_and(|t| t.is("TABLE") || t.is("TABLES"))
        {
            return TableDdl::None;
        }
        at += 1;
        let mut effect = TableDdl::None;
        // Pairs `a TO b`, in order: a later pair may undo an earlier one.
        while let Some((from, next)) = name_at(&toks, at, db) {
            if !toks.get(next).is_some_and(|t| t.is("TO")) {
                break;
            }
            let Some((to, after)) = name_at(&toks, next + 1, db) else {
                break;
            };
            if ours(&from) {
                effect = TableDdl::Gone;
            }
            if ours(&to) {
                effect = TableDdl::Created;
            }
            if toks.get(after) != Some(&Tok::Comma) {
                break;
            }
            at = after + 1;
        }
        return effect;
    }
    if first.is("ALTER") {
        skip(&mut at, &["ONLINE", "IGNORE"]);
        if !toks.get(at).is_some_and(|t| t.is("TABLE")) {
            return TableDdl::None;
        }
        at += 1;
        skip(&mut at, &["IF", "EXISTS"]);
        let Some((altered, mut next)) = name_at(&toks, at, db) else {
            return TableDdl::None;
        };
        // `RENAME [TO | AS] new` anywhere in the ALTER (not `RENAME COLUMN`/`INDEX`/`KEY`).
        while next < toks.len() {
            if toks[next].is("RENAME") {
                let mut k = next + 1;
                if toks
                    .get(k)
                    .is_some_and(|t| t.is("COLUMN") || t.is("INDEX") || t.is("KEY"))
                {
                    next = k;
                    continue;
                }
                if toks.get(k).is_some_and(|t| t.is("TO") || t.is("AS")) {
                    k += 1;
                }
                if let Some((to, _)) = name_at(&toks, k, &altered.0) {
                    if ours(&altered) && !ours(&to) {
                        return TableDdl::Gone;
                    }
                    if ours(&to) && !ours(&altered) {
                        return TableDdl::Created;
                    }
                }
            }
            next += 1;
        }
    }
    TableDdl::None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(sql: &str) -> TableDdl {
        effect(sql.as_bytes(), "app", "app", "events")
    }

    #[test]
    fn creations_drops_and_renames() {
        use TableDdl::*;
        assert_eq!(e("CREATE TABLE events (id int)"), Created);
        assert_eq!(
            e("create or replace table `app`.`events` (id int)"),
            Created
        );
        assert_eq!(e("CREATE TABLE IF NOT EXISTS app.events (id int)"), Created);
        assert_eq!(e("CREATE TABLE other LIKE events"), None);
        assert_eq!(e("CREATE TEMPORARY TABLE events (id int)"), None);
        assert_eq!(e("CREATE TABLE x.events (id int)"), None);
        assert_eq!(e("DROP TABLE `events` /* generated by server */"), Gone);
        assert_eq!(e("DROP TABLE IF EXISTS a, b, app.events"), Gone);
        assert_eq!(e("DROP TABLE other.events"), None);
        assert_eq!(e("DROP TABLE events2"), None);
        assert_eq!(e("DROP DATABASE app"), Gone);
        assert_eq!(e("DROP DATABASE other"), None);
        assert_eq!(e("RENAME TABLE events TO old_events"), Gone);
        assert_eq!(e("RENAME TABLE new_events TO events"), Created);
        assert_eq!(
            e("RENAME TABLE events TO tmp, new_events TO events"),
            Created
        );
        assert_eq!(e("ALTER TABLE events RENAME TO old"), Gone);
        assert_eq!(
            e("ALTER TABLE events ADD COLUMN x INT, RENAME COLUMN x TO y"),
            None
        );
        assert_eq!(e("ALTER TABLE x RENAME AS events"), Created);
        assert_eq!(e("ALTER TABLE events ADD COLUMN x INT"), None);
        assert_eq!(e("TRUNCATE TABLE events"), None);
        assert_eq!(e("INSERT INTO events VALUES (1)"), None);
        // Comments and strings are not names (the lexer is the server's).
        assert_eq!(e("ALTER TABLE x COMMENT 'RENAME TO events'"), None);
        assert_eq!(e("ALTER TABLE events ADD c int -- , RENAME TO old"), None);
        assert_eq!(e("/*!40101 DROP TABLE `events` */"), Gone);
        assert_eq!(e("DROP TABLE `ev``ents`, events"), Gone);
        assert_eq!(e(""), None);
    }
}
