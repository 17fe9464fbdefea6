//! Tests of `statements.rs`: the parser of the statements msgproxy answers itself.

use super::*;

fn table(schema: Option<&str>, name: &str) -> TableName {
    TableName {
        schema: schema.map(str::to_owned),
        name: name.to_owned(),
    }
}

fn stream(schema: Option<&str>, name: &str) -> VirtualStatement {
    VirtualStatement::Stream {
        table: table(schema, name),
        columns: None,
        condition: None,
    }
}

/// An id as written, read as the default `sql_mode` reads it.
fn id(written: &str) -> AckId {
    if written.starts_with(['\'', '"', 'N', 'n']) {
        AckId::String {
            written: written.to_owned(),
            value: string_value(written.as_bytes(), Quoting::DEFAULT),
        }
    } else {
        AckId::Literal(written.to_owned())
    }
}

fn ack(schema: Option<&str>, name: &str, ids: &[&str]) -> VirtualStatement {
    VirtualStatement::Ack {
        table: table(schema, name),
        ids: ids.iter().map(|&written| id(written)).collect(),
    }
}

/// The ids of an `ACK` as a session with `quoting` reads them: (as written, value).
/// Each id as written, with its value when it is quoted.
type Ids = Vec<(String, Option<Vec<u8>>)>;

fn ack_ids(sql: &str, quoting: Quoting) -> Result<Ids, SyntaxError> {
    match parse_virtual_in(sql.as_bytes(), quoting)? {
        VirtualStatement::Ack { ids, .. } => Ok(ids
            .into_iter()
            .map(|id| match id {
                AckId::Literal(written) => (written, None),
                AckId::String { written, value } => (written, Some(value)),
                AckId::Introduced {
                    written,
                    charset,
                    value,
                } => (format!("{charset}:{written}"), Some(value)),
            })
            .collect()),
        other => panic!("not an ACK: {other:?}"),
    }
}

#[track_caller]
fn ok(sql: &str, expected: VirtualStatement) {
    assert_eq!(parse_virtual(sql.as_bytes()), Ok(expected), "{sql:?}");
}

#[track_caller]
fn err(sql: impl AsRef<[u8]>, near: &str, line: u32) {
    let sql = sql.as_ref();
    assert_eq!(
        parse_virtual(sql).map_err(|e| (e.near, e.line)),
        Err((near.to_owned(), line)),
        "{:?}",
        String::from_utf8_lossy(sql)
    );
}

#[test]
fn stream_forms() {
    ok(
        "stream * from vitess_message",
        stream(None, "vitess_message"),
    );
    ok(
        "STREAM /* comment */ * FROM mydb.vitess_message",
        stream(Some("mydb"), "vitess_message"),
    );
    ok("StReAm*FrOm t", stream(None, "t"));
    ok("stream * from t;", stream(None, "t"));
    ok("stream * from t ; ; \n", stream(None, "t"));
    ok("stream * from t; -- done", stream(None, "t"));
    ok("\n\t stream\n*\nfrom\n t \n", stream(None, "t"));
    ok(
        "# c\n-- c\n/* c */stream/**/*/**/from/**/t/**/",
        stream(None, "t"),
    );
    ok("stream * from `select`", stream(None, "select"));
    ok("stream * from `a``b`", stream(None, "a`b"));
    ok(
        "stream * from `my db`.`my table`",
        stream(Some("my db"), "my table"),
    );
    ok("stream * from mydb.select", stream(Some("mydb"), "select"));
    ok("stream * from select.t", stream(Some("select"), "t"));
    ok("stream * from mydb.123", stream(Some("mydb"), "123"));
    ok("stream * from 1abc", stream(None, "1abc"));
    ok("stream * from café.naïve", stream(Some("café"), "naïve"));
    ok("stream * from $t_1", stream(None, "$t_1"));
    ok("stream * from `t`.`u`", stream(Some("t"), "u"));
    ok("stream * from t . u", stream(Some("t"), "u"));
    ok("/*!40101 stream * from t */", stream(None, "t"));
    ok("/*!stream*/ * /*M!100101 from */ t", stream(None, "t"));
}

#[test]
fn ack_forms() {
    ok(
        "ACK vitess_message 1, 2, 3",
        ack(None, "vitess_message", &["1", "2", "3"]),
    );
    ok("ack t 'a', 'b'", ack(None, "t", &["'a'", "'b'"]));
    ok(
        r#"ack mydb.t -5, +7, - 5, 1.5, .5, 1e3, 'a''b', 'c\'d', "x", N'y', 0x1F, X'1f', x'', 0b101, b'01'"#,
        ack(
            Some("mydb"),
            "t",
            &[
                "-5", "+7", "-5", "1.5", ".5", "1e3", "'a''b'", r"'c\'d'", "\"x\"", "N'y'", "0x1F",
                "X'1f'", "x''", "0b101", "b'01'",
            ],
        ),
    );
    ok("ack t 1;", ack(None, "t", &["1"]));
    ok(
        "ack t /* a */ 1 /* b */ , /* c */ 2 -- d",
        ack(None, "t", &["1", "2"]),
    );
    ok("ack t\n1\n,\n2", ack(None, "t", &["1", "2"]));
    ok("ack t 'multi\nline'", ack(None, "t", &["'multi\nline'"]));
    ok("ack t 'é😀'", ack(None, "t", &["'é😀'"]));
    ok("ack `ack` 1", ack(None, "ack", &["1"]));
    ok("ack stream 1", ack(None, "stream", &["1"]));
}

#[test]
fn quoted_ids_are_values() {
    let d = Quoting::DEFAULT;
    let s = |written: &str, value: &[u8]| (written.to_owned(), Some(value.to_vec()));
    let l = |written: &str| (written.to_owned(), None);
    assert_eq!(
        ack_ids(
            r#"ACK t 'a''b', 'c\'d', "x", "y""z", N'é', 'e\\', 1, -2, 0x1F, X'1f', b'1'"#,
            d
        ),
        Ok(vec![
            s("'a''b'", b"a'b"),
            s(r"'c\'d'", b"c'd"),
            s("\"x\"", b"x"),
            s("\"y\"\"z\"", b"y\"z"),
            s("N'é'", "é".as_bytes()),
            s(r"'e\\'", b"e\\"),
            l("1"),
            l("-2"),
            l("0x1F"),
            l("X'1f'"),
            l("b'1'"),
        ])
    );
}

#[test]
fn introduced_ids_keep_their_character_set() {
    // As the Go driver (`_binary'..'`, escaped with backslashes) and Connector/J (`_binary '..'`)
    // send byte arrays.
    let i = |written: &str, value: &[u8]| (written.to_owned(), Some(value.to_vec()));
    let l = |written: &str| (written.to_owned(), None);
    assert_eq!(
        ack_ids(
            r"ACK t _binary'k1', _binary 'k\0\'2', _utf8mb4'é', _latin1 X'E9', _binary 0x6b31, _binary b'1'",
            Quoting::DEFAULT
        ),
        Ok(vec![
            i("binary:_binary'k1'", b"k1"),
            i(r"binary:_binary'k\0\'2'", b"k\0'2"),
            i("utf8mb4:_utf8mb4'é'", "é".as_bytes()),
            l("_latin1 X'E9'"),
            l("_binary 0x6b31"),
            l("_binary b'1'"),
        ])
    );
    // Under NO_BACKSLASH_ESCAPES the Go driver doubles quotes instead.
    assert_eq!(
        ack_ids(r"ACK t _binary'a''b\'", Quoting::NO_BACKSLASH_ESCAPES),
        Ok(vec![i(r"binary:_binary'a''b\'", b"a'b\\")])
    );
}

#[test]
fn string_ids_need_not_be_utf8() {
    // A BINARY(16) id as PHP's PDO (emulated prepares) and mysqli's real_escape_string send it,
    // and a latin1 client's 'café'.
    let sql = b"ACK t '\x0f\x8e\\0\xff', _binary'\xe9\x00', 'caf\xe9'";
    let ids = match parse_virtual(sql) {
        Ok(VirtualStatement::Ack { ids, .. }) => ids,
        other => panic!("{other:?}"),
    };
    let values: Vec<Vec<u8>> = ids
        .into_iter()
        .map(|id| match id {
            AckId::String { value, .. } | AckId::Introduced { value, .. } => value,
            AckId::Literal(l) => panic!("literal {l}"),
        })
        .collect();
    assert_eq!(
        values,
        vec![
            b"\x0f\x8e\x00\xff".to_vec(),
            b"\xe9\x00".to_vec(),
            b"caf\xe9".to_vec()
        ]
    );
}

#[test]
fn no_backslash_escapes() {
    let nbe = Quoting::NO_BACKSLASH_ESCAPES;
    let s = |written: &str, value: &[u8]| (written.to_owned(), Some(value.to_vec()));
    // QA's injection: the string ends at the second quote; what follows is not an id.
    assert_eq!(
        ack_ids(r"ACK ms 'zz\') OR 1=1 -- '", nbe),
        Err(SyntaxError {
            near: ") OR 1=1 -- '".to_owned(),
            line: 1,
            expects: Some("ACK table id[, id ...]"),
        })
    );
    // An id ending in a backslash.
    assert_eq!(ack_ids(r"ACK ms 'c\'", nbe), Ok(vec![s(r"'c\'", b"c\\")]));
    assert_eq!(
        ack_ids(r"ACK ms 'a\n', 'b''c', 'x\', 'y'", nbe),
        Ok(vec![
            s(r"'a\n'", b"a\\n"),
            s("'b''c'", b"b'c"),
            s(r"'x\'", b"x\\"),
            s("'y'", b"y"),
        ])
    );
    // Under the default mode the same text is one open string.
    assert_eq!(
        ack_ids(r"ACK ms 'c\'", Quoting::DEFAULT),
        Err(SyntaxError {
            near: r"'c\'".to_owned(),
            line: 1,
            expects: Some("ACK table id[, id ...]"),
        })
    );
}

#[test]
fn set_workload_forms() {
    for sql in [
        "SET workload = 'olap'",
        "SET workload='oltp'",
        "set workload = olap",
        "SET WORKLOAD = OLAP;",
        "SET SESSION workload='olap'",
        "SET LOCAL workload='dba'",
        "SET @@workload='olap'",
        "SET @@session.workload='olap'",
        "SET @@SESSION.WORKLOAD = \"OLAP\"",
        "SET @@local.workload='unspecified'",
        "SET `workload` = 'olap'",
        "set workload := 'olap'",
        "/* vitess */ SET /* a */ workload /* b */ = /* c */ 'olap' -- d",
        "/*!40101 SET workload='olap' */",
    ] {
        assert_eq!(
            parse_virtual(sql.as_bytes()),
            Ok(VirtualStatement::SetWorkload),
            "{sql}"
        );
        assert!(is_set_workload(sql.as_bytes()), "{sql}");
    }
}

#[test]
fn not_set_workload() {
    for (sql, near) in [
        ("SET workload=1, autocommit=0", "1, autocommit=0"),
        ("SET workload='olap', autocommit=0", ", autocommit=0"),
        (
            "SET autocommit=0, workload='olap'",
            "autocommit=0, workload='olap'",
        ),
        ("SET @workload='olap'", "@workload='olap'"),
        ("SET GLOBAL workload='olap'", "GLOBAL workload='olap'"),
        ("SET @@global.workload='olap'", "global.workload='olap'"),
        ("SET workload='banana'", "'banana'"),
        ("SET workload=''", "''"),
        ("SET workload='olap' 'x'", "'x'"),
        ("SET workload=N'olap'", "N'olap'"),
        ("SET workload", ""),
        ("SET workload=", ""),
        ("SET workloads='olap'", "workloads='olap'"),
        ("SET NAMES utf8mb4", "NAMES utf8mb4"),
        ("SET SESSION", ""),
        ("SET @@session", "session"),
        ("SET @@session = 'olap'", "session = 'olap'"),
        ("SET workload : = 'olap'", ": = 'olap'"),
        ("SET", ""),
        ("(SET workload='olap')", "(SET workload='olap')"),
    ] {
        assert!(!is_set_workload(sql.as_bytes()), "{sql}");
        err(sql, near, 1);
    }
    assert!(!is_set_workload(b"SELECT workload='olap'"));
    assert!(!is_set_workload(b""));
}

#[test]
fn malformed_stream() {
    err("STREAM", "", 1);
    err("STREAM *", "", 1);
    err("STREAM * FROM", "", 1);
    err("STREAM * FROM ;", "", 1);
    err("STREAM * FROM t LIMIT 1", "LIMIT 1", 1);
    err("STREAM id, FROM t", "FROM t", 1);
    err("STREAM * t", "t", 1);
    err("STREAM * FROM t, u", ", u", 1);
    err("STREAM * FROM t u", "u", 1);
    err("STREAM * FROM mydb.", "", 1);
    err("STREAM * FROM .t", ".t", 1);
    err("STREAM * FROM a.b.c", ".c", 1);
    err("STREAM * FROM select", "select", 1);
    err("STREAM * FROM select . t", "select . t", 1);
    err("STREAM * FROM t . select", "select", 1);
    err("STREAM * FROM 123", "123", 1);
    err("STREAM * FROM ``", "``", 1);
    err("STREAM * FROM 't'", "'t'", 1);
    err("STREAM * FROM \"t\"", "\"t\"", 1);
    err("STREAM * FROM `t", "`t", 1);
    err("STREAM * FROM t; STREAM * FROM u", "STREAM * FROM u", 1);
    err("STREAM * FROM t;;x", ";x", 1);
    err("STREAM * FROM t /* open", "/* open", 1);
    err("STREAM * FROM t */", "*/", 1);
    err("STREAM * `FROM` t", "`FROM` t", 1);
    err("STREAMS * FROM t", "STREAMS * FROM t", 1);
    err("(STREAM * FROM t)", "(STREAM * FROM t)", 1);
    err("/*! STREAM * FROM t", "", 1);
    err("SELECT 1", "SELECT 1", 1);
    err("", "", 1);
}

#[test]
fn malformed_ack() {
    err("ACK", "", 1);
    err("ACK t", "", 1);
    err("ACK t;", "", 1);
    err("ACK t 1,", "", 1);
    err("ACK t 1, ", "", 1);
    err("ACK t 1 2", "2", 1);
    err("ACK t 1,,2", ",2", 1);
    err("ACK t ,1", ",1", 1);
    err("ACK t NULL", "NULL", 1);
    err("ACK t 1, null", "null", 1);
    err("ACK t TRUE", "TRUE", 1);
    err("ACK t id", "id", 1);
    err("ACK t (1, 2)", "(1, 2)", 1);
    err("ACK t 1+1", "+1", 1);
    err("ACK t --1", "-1", 1);
    err("ACK t -'1'", "'1'", 1);
    err("ACK t -0x1F", "0x1F", 1);
    err("ACK t -", "", 1);
    err("ACK t @x", "@x", 1);
    err("ACK t ?", "?", 1);
    err("ACK 1", "1", 1);
    err("ACK 1 2", "1 2", 1);
    err("ACK 'a' 1", "'a' 1", 1);
    err("ACK where 1", "where 1", 1);
    err("ACK t 'open", "'open", 1);
    err("ACK t \"open", "\"open", 1);
    err(r"ACK t 'a\'", r"'a\'", 1);
    err("ACK t X'1'", "X'1'", 1);
    err("ACK t X'GG'", "X'GG'", 1);
    err("ACK t b'2'", "b'2'", 1);
    err("ACK t 1 /* open", "/* open", 1);
    err("ACK t 1 WHERE id = 1", "WHERE id = 1", 1);
    err("ACK t _'a'", "_'a'", 1);
    err("ACK t utf8mb4'a'", "utf8mb4'a'", 1);
    err("ACK t _utf8-mb4'a'", "-mb4'a'", 1);
    err("ACK t _binary N'a'", "N'a'", 1);
    err("ACK t _binary", "", 1);
    err("ACK t _binary 1", "1", 1);
    err("ACK t 'a' 'b'", "'b'", 1);
    err("ACK t 1; ACK t 2", "ACK t 2", 1);
}

#[test]
fn line_numbers() {
    err("ACK t\n1\n2", "2", 3);
    err("ACK t\r\n1\r\n2", "2", 3);
    err("ACK t 'a\nb\nc' x", "x", 1);
    err("ACK `a\nb` 'c\nd' x", "x", 1);
    err("ACK t /* a\nb */ 1 -- c\n# d\n x", "x", 4);
    err("\n\n\nACK t 1 x", "x", 1);
    err("\n/* lead */\nACK t\n", "", 2);
    err("ACK t /* a\n */ ;\n\n", "", 2);
    err("ACK\n t\n 1,\n", "", 3);
    err("STREAM\n*\nFROM\n\nt\nLIMIT", "LIMIT", 6);
    err("STREAM\n*\nFROM\n\nt\nWHERE", "", 6);
    err("STREAM * FROM t\n/* open\n comment", "/* open\n comment", 2);
    err("ACK t 1\rx", "x", 1);
}

#[test]
fn non_utf8_is_an_error_at_the_first_invalid_byte() {
    // In names and bare words; a quoted id's bytes are its value (`string_ids_need_not_be_utf8`).
    err(b"ACK caf\xe9 1", "? 1", 1);
    err(b"ACK `caf\xe9` 1", "?` 1", 1);
    err(b"STREAM * FROM mydb.\xff\xfe", "??", 1);
    err(b"ACK t \xff 1", "? 1", 1);
    // An invalid byte in a comment is harmless, and a syntax error before it wins.
    ok("ACK t 1 /* \u{e9} */", ack(None, "t", &["1"]));
    assert_eq!(
        parse_virtual(b"ACK t 1 /* \xe9 */ -- \xff"),
        Ok(ack(None, "t", &["1"]))
    );
    err(b"ACK t x '\xff'", "x '?'", 1);
    // Truncated sequences are one `?` per byte, as MariaDB prints them.
    err(b"ACK t \xe2\x82( 1", "??( 1", 1);
}

#[test]
fn near_text_like_mariadb() {
    assert_eq!(near_text(b""), "");
    assert_eq!(near_text(b"frm t"), "frm t");
    let exactly_80 = "y".repeat(80);
    assert_eq!(near_text(exactly_80.as_bytes()), exactly_80);
    let long = "y".repeat(81);
    assert_eq!(near_text(long.as_bytes()), format!("{}...", "y".repeat(77)));
    // Byte lengths, cut on a character boundary (both measured on MariaDB 10.11).
    let e = "é".repeat(60);
    assert_eq!(
        near_text(format!("'a{e}").as_bytes()),
        format!("'a{}...", "é".repeat(37))
    );
    assert_eq!(
        near_text(format!("'ab{e}").as_bytes()),
        format!("'ab{}...", "é".repeat(37))
    );
    assert_eq!(near_text("é".repeat(40).as_bytes()), "é".repeat(40));
    assert_eq!(near_text("€".repeat(26).as_bytes()).len(), 78);
    assert_eq!(
        near_text(format!("{}abc", "€".repeat(26)).as_bytes()),
        format!("{}...", "€".repeat(25))
    );
    // Outside the BMP and invalid bytes: `?`; a NUL ends the text.
    assert_eq!(near_text("😀 y".as_bytes()), "? y");
    assert_eq!(near_text(b"\xff\xfe z"), "?? z");
    assert_eq!(near_text(b"a\0b"), "a");
    assert_eq!(near_text(&[b'\xff'; 100]), format!("{}...", "?".repeat(77)));
    // Only what is shown is looked at.
    let huge = "z".repeat(10_000_000);
    assert_eq!(near_text(huge.as_bytes()).len(), 80);
}

#[test]
fn message_is_mariadbs() {
    let e = SyntaxError {
        near: "frm t".to_owned(),
        line: 1,
        expects: None,
    };
    assert_eq!(
        e.message(),
        "You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server \
         version for the right syntax to use near 'frm t' at line 1"
    );
    assert_eq!(e.to_string(), e.message());
    assert_eq!((SyntaxError::CODE, SyntaxError::SQLSTATE), (1064, "42000"));
    let long = parse_virtual(format!("ACK t x {}", "y".repeat(100)).as_bytes());
    assert_eq!(long.map_err(|e| e.near.len()), Err(80));
}

#[test]
fn table_name_display_quotes() {
    assert_eq!(table(None, "t").to_string(), "`t`");
    assert_eq!(table(Some("my db"), "a`b").to_string(), "`my db`.`a``b`");
}

/// A tiny deterministic generator, so the property tests need no dependency and always see the same
/// inputs.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Fragments that steer the parser into its interesting states.
const PIECES: &[&[u8]] = &[
    b"STREAM",
    b"ACK",
    b"SET",
    b"workload",
    b"olap",
    b"@@",
    b"session",
    b".",
    b"*",
    b"FROM",
    b"t",
    b"`",
    b"'",
    b"\"",
    b"\\",
    b",",
    b";",
    b"-",
    b"+",
    b"1",
    b"0x1F",
    b"X'",
    b"b'",
    b"N'",
    b"/*",
    b"*/",
    b"/*!",
    b"--",
    b"-- ",
    b"#",
    b"\n",
    b" ",
    b"\t",
    b"=",
    b":=",
    b"select",
    b"\xe9",
    b"\xff",
    b"\0",
    "😀".as_bytes(),
    b"1e",
    b"0b",
    b".5",
    b"(",
];

#[test]
fn random_input_never_panics() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut buf = Vec::with_capacity(256);
    for _ in 0..100_000 {
        buf.clear();
        // Mostly a valid start, so the parser gets past the first word.
        let start: &[u8] = match rng.next() % 4 {
            0 => b"STREAM * FROM ",
            1 => b"ACK t ",
            2 => b"SET ",
            _ => b"",
        };
        buf.extend_from_slice(start);
        for _ in 0..rng.next() % 12 {
            let r = rng.next();
            if r.is_multiple_of(5) {
                buf.push((r >> 8) as u8);
            } else {
                buf.extend_from_slice(PIECES[((r >> 8) % PIECES.len() as u64) as usize]);
            }
        }
        let parsed = parse_virtual(&buf);
        if let Err(e) = &parsed {
            assert!(e.line >= 1, "{buf:?}");
            assert!(e.near.len() <= NEAR_MAX, "{buf:?}");
            assert!(e.message().contains(&e.near));
        }
        // The classifier's check and the parser agree.
        if is_set_workload(&buf) {
            assert_eq!(parsed, Ok(VirtualStatement::SetWorkload), "{buf:?}");
        }
    }
}

#[test]
fn every_prefix_of_valid_statements() {
    for sql in [
        &b"/* c */ STREAM /* d */ * FROM `my``db`.vitess_message -- e\n;"[..],
        b"ACK mydb.t -5, 'a''b', \"x\\\"y\", 0x1F, X'1f', b'01', 1.5e-3 ; # done",
        b"SET @@session.workload := 'olap'",
        "ACK `é` 'ü'".as_bytes(),
    ] {
        assert!(
            parse_virtual(sql).is_ok(),
            "{:?}",
            String::from_utf8_lossy(sql)
        );
        for end in 0..sql.len() {
            let _ = parse_virtual(&sql[..end]);
            let _ = is_set_workload(&sql[..end]);
            // And every suffix: a statement cut at the front.
            let _ = parse_virtual(&sql[end..]);
        }
    }
}
