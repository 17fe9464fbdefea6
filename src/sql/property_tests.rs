//! Property tests across the classifier, the virtual-statement parser and the rewriter, with a
//! fixed-seed generator (a failure reproduces from the test alone).
//!
//! The per-module tests check that random bytes never panic; these check what the proxy promises
//! about whole statements: everything that is not `STREAM`/`ACK`/`SET workload` is relayed
//! untouched, and odd-but-legal table names and ids survive `STREAM`/`ACK` parsing exactly.

use super::{
    classify, parse_virtual, parse_virtual_in, rewrite, AckId, Action, Quoting, TableName,
    VirtualStatement,
};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a, T: ?Sized>(&mut self, from: &[&'a T]) -> &'a T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Starts of statements the proxy must relay: every first keyword it tells apart except
/// `STREAM`/`ACK`, words that merely begin like them, virtual keywords hidden in comments or
/// quotes, and `SET`s that are not a lone `workload` assignment.
const RELAYED_PREFIXES: &[&str] = &[
    "SELECT ",
    "select ",
    "(SELECT ",
    "INSERT INTO t VALUES ",
    "REPLACE INTO t ",
    "UPDATE t SET a = ",
    "DELETE FROM t WHERE ",
    "CREATE TABLE t ",
    "ALTER TABLE t ",
    "DROP TABLE ",
    "RENAME TABLE ",
    "TRUNCATE ",
    "LOAD DATA LOCAL INFILE ",
    "SET @a = ",
    "SET NAMES ",
    "set autocommit = ",
    "SET workload = 'olap', @a = 1 ",
    "SET @@session.sql_mode = ",
    "USE ",
    "BEGIN ",
    "START TRANSACTION ",
    "COMMIT ",
    "ROLLBACK ",
    "SHOW ",
    "DO ",
    "EXPLAIN ",
    "HANDLER ",
    "CALL ",
    "streamer ",
    "acknowledge ",
    "STREAMS ",
    "ACKS ",
    "`STREAM` ",
    "'ACK' ",
    "\"STREAM\" ",
    "/* STREAM */ SELECT ",
    "-- ACK\nSELECT ",
    "# STREAM * FROM t\nselect ",
    "/*!40101 SET NAMES utf8 */ ",
    "/*M!100101 SELECT */ ",
    "WITH x AS (SELECT 1) SELECT ",
];

/// What may follow: anything, as long as it does not mention `@@socket` (the one rewrite).
const TAILS: &[&str] = &[
    "STREAM * FROM t",
    "ACK t 1, 2",
    "workload = 'olap'",
    "@@workload",
    "@@sock",
    "@socket",
    "1",
    "'a''b'",
    "\"x\\\"y\"",
    "`q``r`",
    "/* c */",
    "/*!",
    "*/",
    "-- ",
    "#",
    "\n",
    " ",
    ";",
    ",",
    "(",
    ")",
    "=",
    "ä",
    "消息",
    "\u{0}",
    "SELECT",
    "FROM t",
];

#[test]
fn everything_but_stream_ack_and_set_workload_is_relayed_untouched() {
    let mut rng = XorShift(0x0DDB_1A5E_5BAD_5EED);
    let mut sql = String::new();
    for _ in 0..50_000 {
        sql.clear();
        sql.push_str(rng.pick(RELAYED_PREFIXES));
        for _ in 0..rng.next() % 10 {
            sql.push_str(rng.pick(TAILS));
        }
        let c = classify(sql.as_bytes());
        assert_eq!(c.action, Action::Relay, "{sql:?} ({:?})", c.keyword);
        assert_eq!(
            rewrite(sql.as_bytes(), Quoting::DEFAULT, b"''"),
            None,
            "{sql:?} must be relayed untouched"
        );
    }
}

/// Characters of odd but legal names and string ids.
const NAME_CHARS: &[&str] = &[
    "a", "Z", "0", "_", "$", "-", ".", " ", "`", "``", "'", "\"", "\\", "ä", "ö", "消", "息", "😀",
    "select", "order", "--", "/*", "#", ";",
];

fn random_text(rng: &mut XorShift, max: u64) -> String {
    let mut s = String::new();
    for _ in 0..1 + rng.next() % max {
        s.push_str(rng.pick(NAME_CHARS));
    }
    s
}

fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn string_literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// A string literal as a session with `NO_BACKSLASH_ESCAPES` reads it.
fn string_literal_nbe(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[test]
fn odd_names_and_string_ids_survive_stream_and_ack() {
    let mut rng = XorShift(0x5EED_0F0D_D4A3_E5E5);
    for _ in 0..20_000 {
        // MariaDB refuses identifiers ending in a space; the parser need not accept them.
        let name = random_text(&mut rng, 8).trim_end().to_string();
        if name.is_empty() {
            continue;
        }
        let schema = rng
            .next()
            .is_multiple_of(2)
            .then(|| random_text(&mut rng, 4).trim_end().to_string())
            .filter(|s| !s.is_empty());
        let table = TableName {
            schema: schema.clone(),
            name: name.clone(),
        };
        let quoted = match &schema {
            Some(s) => format!("{}.{}", ident(s), ident(&name)),
            None => ident(&name),
        };
        assert_eq!(table.to_string(), quoted);

        let stream = format!("STREAM * FROM {quoted}");
        assert_eq!(
            classify(stream.as_bytes()).action,
            Action::Virtual,
            "{stream:?}"
        );
        assert_eq!(
            parse_virtual(stream.as_bytes()),
            Ok(VirtualStatement::Stream {
                table: table.clone(),
                columns: None,
                condition: None,
            }),
            "{stream:?}"
        );

        let values: Vec<String> = (0..1 + rng.next() % 4)
            .map(|_| random_text(&mut rng, 6))
            .collect();
        // Each id's value comes back exactly, in the default sql_mode and under
        // NO_BACKSLASH_ESCAPES (where a backslash is written as itself).
        for (quoting, quote) in [
            (Quoting::DEFAULT, string_literal as fn(&str) -> String),
            (Quoting::NO_BACKSLASH_ESCAPES, string_literal_nbe),
        ] {
            let ids: Vec<AckId> = values
                .iter()
                .map(|v| AckId::String {
                    written: quote(v),
                    value: v.as_bytes().to_vec(),
                })
                .collect();
            let written: Vec<&str> = ids.iter().map(AckId::written).collect();
            let ack = format!("ACK {quoted} {}", written.join(", "));
            assert_eq!(classify(ack.as_bytes()).action, Action::Virtual, "{ack:?}");
            assert_eq!(
                parse_virtual_in(ack.as_bytes(), quoting),
                Ok(VirtualStatement::Ack {
                    table: table.clone(),
                    ids
                }),
                "{ack:?} {quoting:?}"
            );
        }
    }
}
