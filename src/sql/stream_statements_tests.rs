use super::*;
use crate::sql::{Filter, Literal};

fn parse(sql: &str) -> StreamStatement {
    match parse_stream_statement(sql.as_bytes(), Quoting::DEFAULT) {
        Some(Ok(s)) => s,
        other => panic!("{sql:?}: {other:?}"),
    }
}

fn refused(sql: &str) -> StreamStatementError {
    match parse_stream_statement(sql.as_bytes(), Quoting::DEFAULT) {
        Some(Err(e)) => e,
        other => panic!("{sql:?} should be refused: {other:?}"),
    }
}

fn table(name: &str) -> TableName {
    TableName {
        schema: None,
        name: name.to_owned(),
    }
}

#[test]
fn which_statements_are_ours() {
    for sql in [
        "STREAM * FROM t GROUP 'g'",
        "stream a, b from db.t group 'g' start earliest",
        "ACK t GROUP 'g' 1",
        "SEEK t GROUP 'g' TO LATEST",
        "seek",
        "DROP GROUP 'g' ON t",
        "SHOW STREAM GROUPS",
        "show stream groups;",
    ] {
        assert!(is_stream_statement(sql.as_bytes()), "{sql}");
    }
    for sql in [
        "STREAM * FROM t",
        "ACK t 1, 2",
        "ACK group.t 1",
        "STREAM * FROM t WHERE a = 'GROUP'",
        "STREAM * FROM `group`",
        "DROP TABLE t",
        "DROP `GROUP`",
        "drop group",
        "DROP GROUP 'g'",
        "DROP GROUP g ON t",
        "show stream",
        "SHOW STREAM GROUPS LIKE 'x'",
        "SHOW TABLES",
        "SHOW MESSAGE TABLES",
        "SELECT * FROM t GROUP BY a",
        "",
    ] {
        assert!(!is_stream_statement(sql.as_bytes()), "{sql}");
    }
}

#[test]
fn stream_forms() {
    assert_eq!(
        parse("STREAM * FROM orders_events GROUP 'billing'"),
        StreamStatement::Stream {
            columns: None,
            table: table("orders_events"),
            group: "billing".into(),
            start: None,
            filter: None
        }
    );
    assert_eq!(
        parse("STREAM id, `pay load` FROM db.t GROUP 'a''b' START AT EVENT 42;"),
        StreamStatement::Stream {
            columns: Some(vec!["id".into(), "pay load".into()]),
            table: TableName {
                schema: Some("db".into()),
                name: "t".into()
            },
            group: "a'b".into(),
            start: Some(StartAt::Event(42)),
            filter: None
        }
    );
    match parse("STREAM * FROM t GROUP 'g' START AT TIMESTAMP '2026-12-01 10:00:00' WHERE topic = 'order.created'") {
        StreamStatement::Stream { start, filter, .. } => {
            assert_eq!(start, Some(StartAt::Timestamp("2026-12-01 10:00:00".into())));
            assert_eq!(
                filter,
                Some(Filter::Compare {
                    column: "topic".into(),
                    negated: false,
                    value: Literal::String(b"order.created".to_vec())
                })
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn filters_and_their_canonical_text() {
    let canonical = |sql: &str| match parse(&format!("STREAM * FROM t GROUP 'g' WHERE {sql}")) {
        StreamStatement::Stream {
            filter: Some(f), ..
        } => f.canonical(),
        other => panic!("{other:?}"),
    };
    assert_eq!(canonical("Topic = 'x'"), "`topic` = 'x'");
    assert_eq!(canonical("'x' != topic"), "`topic` <> 'x'");
    assert_eq!(
        canonical("a = 1 OR b <> -2 AND NOT (c IS NULL)"),
        "(`a` = 1 OR (`b` <> -2 AND NOT `c` IS NULL))"
    );
    assert_eq!(
        canonical("(a IN (1, 'two', NULL)) AND b NOT IN (3) AND c IS NOT NULL"),
        "((`a` IN (1, 'two', NULL) AND `b` NOT IN (3)) AND `c` IS NOT NULL)"
    );
    assert_eq!(canonical("a = 'it''s'"), "`a` = 'it''s'");
    assert_eq!(canonical("a = '\\n'"), "`a` = X'0A'");
    assert_eq!(
        canonical("a = TRUE && b = FALSE || !c = 1"),
        "((`a` = 1 AND `b` = 0) OR NOT `c` = 1)"
    );
}

#[test]
fn unsupported_filters_are_named() {
    for (filter, what) in [
        ("topic LIKE 'a%'", "LIKE"),
        ("n < 5", "the operator <"),
        ("n >= 5", "the operator >"),
        ("n BETWEEN 1 AND 2", "BETWEEN"),
        ("a = b", "comparing two columns"),
        ("1 = 1", "comparing two literals"),
        ("JSON_VALUE(payload, '$.x') = 1", "JSON_VALUE()"),
        ("t.a = 1", "qualified column names"),
        ("a IN (SELECT 1)", "SELECT"),
        ("a = 0x41", "hex and bit literals"),
        ("a = @x", "variables"),
        ("a + 1 = 2", "the operator +"),
    ] {
        let e = refused(&format!("STREAM * FROM t GROUP 'g' WHERE {filter}"));
        assert_eq!((e.code, e.sqlstate), (1235, "42000"), "{filter}: {e:?}");
        assert!(e.message.contains(what), "{filter}: {}", e.message);
        assert!(e.message.contains("IS [NOT] NULL"), "{}", e.message);
    }
}

#[test]
fn malformed_statements_name_the_syntax() {
    for (sql, near, expects) in [
        ("STREAM * FROM t GROUP g", "g", "STREAM * | col"),
        (
            "STREAM * FROM t GROUP 'g' START SOON",
            "SOON",
            "START LATEST",
        ),
        ("STREAM * FROM t GROUP 'g' WHERE", "", "STREAM * | col"),
        (
            "STREAM * FROM t GROUP 'g' WHERE (a = 1",
            "",
            "STREAM * | col",
        ),
        ("ACK t GROUP 'g'", "", "ACK table GROUP 'group' event_id"),
        ("ACK t GROUP 'g' 1, x", "x", "ACK table GROUP"),
        ("SEEK t GROUP 'g'", "", "SEEK table GROUP 'group' TO"),
        ("SEEK t GROUP 'g' TO EVENT -1", "-1", "SEEK table"),
        (
            "SEEK t GROUP '' TO LATEST",
            "'' TO LATEST",
            "1 to 255 bytes",
        ),
    ] {
        let e = refused(sql);
        assert_eq!((e.code, e.sqlstate), (1064, "42000"), "{sql}: {e:?}");
        assert_eq!(e.near, near, "{sql}");
        assert!(e.message.contains(expects), "{sql}: {}", e.message);
    }
    let e = refused("ACK t GROUP 'g' 18446744073709551616");
    assert!(e.message.contains("whole numbers"), "{}", e.message);
    let long = format!("SEEK t GROUP '{}' TO LATEST", "x".repeat(256));
    assert!(refused(&long).message.contains("1 to 255 bytes"));
}

#[test]
fn other_statements() {
    assert_eq!(
        parse("ack t group 'g' 1, 2 ,3"),
        StreamStatement::Ack {
            table: table("t"),
            group: "g".into(),
            ids: vec![1, 2, 3]
        }
    );
    assert_eq!(
        parse("SEEK t GROUP 'g' TO EVENT 18446744073709551615"),
        StreamStatement::Seek {
            table: table("t"),
            group: "g".into(),
            to: StartAt::Event(u64::MAX)
        }
    );
    assert_eq!(
        parse("SEEK t GROUP 'g' TO TIMESTAMP '2026-01-01'"),
        StreamStatement::Seek {
            table: table("t"),
            group: "g".into(),
            to: StartAt::Timestamp("2026-01-01".into())
        }
    );
    assert_eq!(
        parse("/* x */ DROP GROUP 'g' ON `t`;"),
        StreamStatement::DropGroup {
            table: table("t"),
            group: "g".into()
        }
    );
    assert_eq!(parse("show stream groups"), StreamStatement::ShowGroups);
}

#[test]
fn hostile_group_names_are_values() {
    for name in ["'; DROP TABLE t; --", "`x`", "\u{1F600}", "a\\b", "g\"h"] {
        let quoted = format!("'{}'", name.replace('\\', "\\\\").replace('\'', "''"));
        match parse(&format!("DROP GROUP {quoted} ON t")) {
            StreamStatement::DropGroup { group, .. } => assert_eq!(group, name),
            other => panic!("{other:?}"),
        }
    }
    // Not UTF-8: refused where the statement is ours, relayed where it is not an exact form.
    assert!(matches!(
        parse_stream_statement(b"SEEK t GROUP '\xff' TO LATEST", Quoting::DEFAULT),
        Some(Err(_))
    ));
    assert_eq!(
        parse_stream_statement(b"DROP GROUP '\xff' ON t", Quoting::DEFAULT),
        None
    );
}

#[test]
fn never_panics_on_prefixes() {
    let sql = "STREAM a, `b` FROM d.t GROUP 'g' START AT TIMESTAMP '2026-01-01' WHERE (a = 1 OR b IN ('x', NULL)) AND NOT c IS NOT NULL;";
    for end in 0..=sql.len() {
        if let Some(prefix) = sql.get(..end) {
            let _ = parse_stream_statement(prefix.as_bytes(), Quoting::DEFAULT);
        }
    }
}

#[test]
fn long_message_statements_are_not_stream_statements() {
    let sql = format!("STREAM * FROM m /* {} */", "x".repeat(1 << 20));
    assert!(!is_stream_statement(sql.as_bytes()));
    let sql = format!("STREAM * FROM m GROUP 'g' /* {} */", "x".repeat(1 << 20));
    assert!(is_stream_statement(sql.as_bytes()));
}
