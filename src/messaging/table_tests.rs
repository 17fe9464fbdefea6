//! Tests of `table`: validation, id kinds, keys and literals, the poller index choice.

#[test]
fn the_poller_prefers_an_index_on_time_next_then_epoch() {
    use super::NextIndex;
    let chosen = NextIndex::choose([
        ("PRIMARY", 1, "id"),
        ("ack_idx", 1, "time_acked"),
        ("by_next", 1, "time_next"),
        ("next_idx", 1, "TIME_NEXT"),
        ("next_idx", 2, "epoch"),
    ]);
    assert_eq!(
        chosen,
        Some(NextIndex {
            name: "next_idx".into(),
            then_epoch: true
        })
    );
    let only_time_next = NextIndex::choose([("n", 1, "time_next"), ("n", 2, "id")]);
    assert_eq!(only_time_next.map(|i| i.then_epoch), Some(false));
    // time_next second is no use for a range on time_next.
    assert_eq!(
        NextIndex::choose([("x", 1, "epoch"), ("x", 2, "time_next")]),
        None
    );
}

use std::time::Duration;

use super::*;

fn col(name: &str, data_type: &str) -> ColumnInfo {
    ColumnInfo {
        name: name.to_string(),
        data_type: data_type.to_string(),
        charset: matches!(data_type, "varchar" | "char" | "text" | "longtext" | "enum")
            .then(|| "utf8mb4".to_string()),
        in_primary_key: false,
        set_on_update: false,
    }
}

fn pk(mut c: ColumnInfo) -> ColumnInfo {
    c.in_primary_key = true;
    c
}

fn with_charset(mut c: ColumnInfo, cs: &str) -> ColumnInfo {
    c.charset = Some(cs.to_string());
    c
}

fn opts() -> MessageOptions {
    MessageOptions {
        ack_wait: Duration::from_secs(30),
        purge_after: Duration::from_secs(120),
        batch_size: 1,
        cache_size: 1000,
        poller_interval: Duration::from_secs(30),
        min_backoff: Duration::from_secs(30),
        max_backoff: None,
        message_cols: None,
        max_unacked: None,
        max_attempts: None,
        dead_letter: None,
        group_col: None,
    }
}

fn cols_opts(cols: &str) -> MessageOptions {
    MessageOptions {
        message_cols: Some(cols.split('|').map(str::to_string).collect()),
        ..opts()
    }
}

/// The table from the Vitess simplification RFC.
fn rfc() -> Vec<ColumnInfo> {
    vec![
        pk(col("id", "bigint")),
        col("time_next", "bigint"),
        col("epoch", "bigint"),
        col("time_acked", "bigint"),
        col("message", "varchar"),
    ]
}

/// The current Vitess layout.
fn vitess() -> Vec<ColumnInfo> {
    vec![
        pk(col("id", "bigint")),
        col("priority", "tinyint"),
        col("epoch", "bigint"),
        col("time_next", "bigint"),
        col("time_created", "bigint"),
        col("time_scheduled", "bigint"),
        col("time_acked", "bigint"),
        col("message", "json"),
        col("extra", "int"),
    ]
}

fn err(columns: &[ColumnInfo], options: MessageOptions) -> String {
    match validate("test", "m", options, columns) {
        Err(e) => e.to_string(),
        Ok(t) => panic!("should fail: {t:?}"),
    }
}

#[test]
fn the_rfc_table() {
    let t = validate("test", "vitess_message", opts(), &rfc()).expect("valid");
    assert_eq!(t.stream_columns, ["id", "message"]);
    assert!(!t.has_priority);
    assert_eq!(t.id_kind, IdKind::Numeric);
    assert_eq!(t.qualified(), "`test`.`vitess_message`");
    assert_eq!(t.select_list(), "`id`, `message`");
    assert_eq!(t.key_sql(), "`id`");
    assert_eq!(t.options, opts());
}

#[test]
fn the_vitess_table() {
    let t = validate("test", "m", opts(), &vitess()).expect("valid");
    // time_created / time_scheduled / priority are not user columns.
    assert_eq!(t.stream_columns, ["id", "message", "extra"]);
    assert!(t.has_priority);
}

#[test]
fn from_comment_combines_both_steps() {
    let comment =
        "vitess_message,vt_ack_wait=30,vt_purge_after=120,vt_batch_size=1,vt_cache_size=1000,\
                   vt_poller_interval=30";
    let t = from_comment("test", "m", comment, &rfc())
        .expect("valid")
        .expect("message table");
    assert_eq!(t.options, opts());
    assert_eq!(from_comment("test", "m", "just a table", &[]), Ok(None));
    let e = from_comment("test", "m", "vitess_message,vt_ack_wait=30", &rfc()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message table `test`.`m`: missing required option vt_purge_after; missing required option \
         vt_batch_size; missing required option vt_cache_size; missing required option vt_poller_interval"
    );
    // Wrong options and wrong columns, all at once.
    let e = from_comment("test", "m", "vitess_message,vt_ack_wait=x", &[]).unwrap_err();
    let text = e.to_string();
    for problem in [
        "vt_ack_wait must be a number of seconds",
        "missing required option vt_poller_interval",
        "missing required column id",
        "missing required column time_acked",
        "the table has none",
    ] {
        assert!(text.contains(problem), "{problem}: {text}");
    }
    assert!(matches!(
        e.problems[..],
        [TableProblem::Options(OptionsError::Missing(_)), ..]
    ));
}

#[test]
fn missing_required_columns() {
    for missing in ["id", "time_next", "epoch", "time_acked"] {
        let mut cols: Vec<ColumnInfo> = rfc().into_iter().filter(|c| c.name != missing).collect();
        if missing == "id" {
            cols.push(pk(col("other", "bigint")));
        }
        let also = if missing == "id" {
            "; the primary key must be exactly (id), not (other)"
        } else {
            ""
        };
        assert_eq!(
            err(&cols, opts()),
            format!("message table `test`.`m`: missing required column {missing}{also}")
        );
    }
}

#[test]
fn required_columns_must_be_bigint() {
    for (name, ty) in [
        ("epoch", "varchar"),
        ("time_next", "int"),
        ("time_acked", "datetime"),
    ] {
        let cols: Vec<ColumnInfo> = rfc()
            .into_iter()
            .map(|c| if c.name == name { col(name, ty) } else { c })
            .collect();
        assert_eq!(
            err(&cols, opts()),
            format!("message table `test`.`m`: column {name} must be an integer type (bigint), not {ty}")
        );
    }
}

#[test]
fn priority_may_be_any_integer() {
    for ty in INTEGER_TYPES {
        let mut cols = rfc();
        cols.push(col("priority", ty));
        assert!(
            validate("s", "t", opts(), &cols)
                .expect("valid")
                .has_priority
        );
    }
    let mut cols = rfc();
    cols.push(col("Priority", "varchar"));
    assert_eq!(
        err(&cols, opts()),
        "message table `test`.`m`: column Priority must be an integer type, not varchar"
    );
}

#[test]
fn primary_key_must_be_exactly_id() {
    let mut cols = rfc();
    cols[0].in_primary_key = false;
    assert_eq!(
        err(&cols, opts()),
        "message table `test`.`m`: the primary key must be exactly (id), but the table has none"
    );
    let mut cols = rfc();
    cols[4].in_primary_key = true;
    assert_eq!(
        err(&cols, opts()),
        "message table `test`.`m`: the primary key must be exactly (id), not (id, message)"
    );
    let mut cols = rfc();
    cols[0].in_primary_key = false;
    cols[1].in_primary_key = true;
    assert_eq!(
        err(&cols, opts()),
        "message table `test`.`m`: the primary key must be exactly (id), not (time_next)"
    );
}

#[test]
fn names_are_case_insensitive_but_spelling_is_kept() {
    let cols = vec![
        pk(col("ID", "bigint")),
        col("Time_Next", "bigint"),
        col("EPOCH", "bigint"),
        col("time_ACKED", "bigint"),
        col("Time_Created", "bigint"),
        col("Payload", "text"),
        col("Ünïcode", "text"),
    ];
    let t = validate("test", "m", opts(), &cols).expect("valid");
    assert_eq!(t.stream_columns, ["ID", "Payload", "Ünïcode"]);
    assert_eq!(t.key_sql(), "`ID`");
    assert_eq!(t.id_column(), "ID");
    let t = validate("test", "m", cols_opts("id|payload|üNÏCODE"), &cols).expect("valid");
    assert_eq!(t.stream_columns, ["ID", "Payload", "Ünïcode"]);
}

#[test]
fn message_cols_choose_the_stream() {
    let t = validate("test", "m", cols_opts("id"), &vitess()).expect("valid");
    assert_eq!(t.stream_columns, ["id"]);
    // Any existing column may be streamed, special ones included, in the order given.
    let t = validate(
        "test",
        "m",
        cols_opts("id|extra|time_created|priority|message"),
        &vitess(),
    )
    .expect("valid");
    assert_eq!(
        t.stream_columns,
        ["id", "extra", "time_created", "priority", "message"]
    );
    assert_eq!(
        t.select_list(),
        "`id`, `extra`, `time_created`, `priority`, `message`"
    );
    assert_eq!(
        err(&vitess(), cols_opts("id|foo")),
        "message table `test`.`m`: vt_message_cols names a column that does not exist: foo"
    );
    // The options parser already refuses this; the table check does not rely on it.
    assert_eq!(
        err(&vitess(), cols_opts("message|id")),
        "message table `test`.`m`: vt_message_cols must start with id"
    );
}

#[test]
fn id_kinds() {
    let kind = |c: ColumnInfo| id_kind(&c);
    for ty in ["tinyint", "int", "bigint", "decimal", "year"] {
        assert_eq!(kind(col("id", ty)), Ok(IdKind::Numeric), "{ty}");
    }
    for ty in [
        "binary",
        "varbinary",
        "blob",
        "longblob",
        "uuid",
        "inet6",
        "inet4",
    ] {
        assert_eq!(kind(col("id", ty)), Ok(IdKind::Binary), "{ty}");
    }
    assert_eq!(
        kind(with_charset(col("id", "varchar"), "latin1")),
        Ok(IdKind::Text {
            charset: "latin1".to_string()
        })
    );
    assert_eq!(
        kind(with_charset(col("id", "varchar"), "binary")),
        Ok(IdKind::Binary)
    );
    assert_eq!(kind(col("id", "timestamp")), Ok(IdKind::Timestamp));
    for ty in ["date", "datetime", "time", "something_new"] {
        assert_eq!(
            kind(col("id", ty)),
            Ok(IdKind::Text {
                charset: "utf8mb4".to_string()
            }),
            "{ty}"
        );
    }
    for ty in ["float", "double", "bit"] {
        assert!(kind(col("id", ty)).is_err(), "{ty}");
    }
    let mut cols = rfc();
    cols[0] = pk(col("id", "double"));
    assert_eq!(
        err(&cols, opts()),
        "message table `test`.`m`: an id of type double is not supported: an approximate number \
         cannot be matched exactly; use an integer type"
    );
}

fn table_with_id(id: ColumnInfo) -> MessageTable {
    let mut cols = rfc();
    cols[0] = pk(id);
    validate("test", "m", opts(), &cols).expect("valid")
}

#[test]
fn an_id_the_server_rewrites_on_update_is_refused() {
    let mut id = pk(col("id", "timestamp"));
    id.set_on_update = true;
    let mut cols = rfc();
    cols[0] = id;
    let err = validate("test", "m", opts(), &cols).expect_err("refused");
    assert!(
        err.to_string().contains("ON UPDATE CURRENT_TIMESTAMP"),
        "{err}"
    );
}

#[test]
fn rows_are_named_exactly() {
    let t = table_with_id(col("id", "bigint"));
    let ids = |keys: &[&str]| t.ids_sql(keys.iter().map(|k| k.as_bytes()));
    assert_eq!(ids(&["1", "2"]).as_deref(), Some("(`id` IN (1, 2))"));
    assert_eq!(ids(&["x"]), None);
    let t = table_with_id(col("id", "timestamp"));
    let ids = |keys: &[&str]| t.ids_sql(keys.iter().map(|k| k.as_bytes()));
    assert_eq!(
        ids(&["1796122806.5"]).as_deref(),
        Some("(`id` IN (FROM_UNIXTIME(1796122806.5)) AND UNIX_TIMESTAMP(`id`) IN (1796122806.5))")
    );
    assert_eq!(
        ids(&["0.000"]).as_deref(),
        Some("`id` = '0000-00-00 00:00:00'")
    );
    assert_eq!(
        ids(&["0", "7"]).as_deref(),
        Some("((`id` IN (FROM_UNIXTIME(7)) AND UNIX_TIMESTAMP(`id`) IN (7)) OR `id` = '0000-00-00 00:00:00')")
    );
}

#[test]
fn timestamp_keys_are_instants() {
    let t = table_with_id(col("id", "timestamp"));
    assert_eq!(t.key_sql(), "UNIX_TIMESTAMP(`id`)");
    let lit = |k: &str| t.id_literal(k.as_bytes());
    assert_eq!(
        lit("1796122806").as_deref(),
        Some("FROM_UNIXTIME(1796122806)")
    );
    assert_eq!(
        lit("1796122806.733922").as_deref(),
        Some("FROM_UNIXTIME(1796122806.733922)")
    );
    assert_eq!(lit("0").as_deref(), Some("'0000-00-00 00:00:00'"));
    assert_eq!(lit("0.000").as_deref(), Some("'0000-00-00 00:00:00'"));
    for bad in ["", "-1", "1e5", "1,2", "1) OR (1", "x"] {
        assert_eq!(lit(bad), None, "{bad:?}");
    }
}

#[test]
fn numeric_keys() {
    let t = table_with_id(col("id", "bigint"));
    assert_eq!(t.key_sql(), "`id`");
    for good in [
        "0",
        "42",
        "-7",
        "18446744073709551615",
        "12.50",
        "-0.5",
        "1.",
        ".5",
    ] {
        assert_eq!(
            t.id_literal(good.as_bytes()).as_deref(),
            Some(good),
            "{good}"
        );
    }
    for bad in [
        "",
        "-",
        ".",
        "-.",
        "1.2.3",
        "--1",
        "+1",
        "1e5",
        " 1",
        "1 ",
        "1;drop table m",
        "0x1F",
        "1-2",
        "١",
    ] {
        assert_eq!(t.id_literal(bad.as_bytes()), None, "{bad:?}");
    }
    assert_eq!(t.id_literal(b"\xff"), None);
}

#[test]
fn binary_keys() {
    let t = table_with_id(col("id", "varbinary"));
    assert_eq!(t.key_sql(), "HEX(`id`)");
    assert_eq!(t.id_literal(b"00FF").as_deref(), Some("X'00FF'"));
    assert_eq!(t.id_literal(b"abCD").as_deref(), Some("X'abCD'"));
    assert_eq!(t.id_literal(b"").as_deref(), Some("X''"));
    for bad in ["0", "0G", "00 ", "'", "00'; drop table m; --"] {
        assert_eq!(t.id_literal(bad.as_bytes()), None, "{bad:?}");
    }
}

#[test]
fn text_keys() {
    let t = table_with_id(with_charset(col("id", "varchar"), "latin1"));
    assert_eq!(t.key_sql(), "HEX(`id`)");
    assert_eq!(
        t.id_literal(b"68E96C6C6F").as_deref(),
        Some("_latin1 X'68E96C6C6F'")
    );
    assert_eq!(t.id_literal(b"").as_deref(), Some("_latin1 X''"));
    assert_eq!(t.id_literal(b"6"), None);
    assert_eq!(t.id_literal(b"zz"), None);

    let t = table_with_id(col("id", "date"));
    assert_eq!(
        t.id_literal(b"323032342D30312D3032").as_deref(),
        Some("_utf8mb4 X'323032342D30312D3032'")
    );

    // A charset name that could inject SQL is refused even though the key is fine.
    let mut t = table_with_id(col("id", "varchar"));
    for bad in ["", "utf8mb4 X'00' OR 1=1 -- ", "a-b", "ü"] {
        t.id_kind = IdKind::Text {
            charset: bad.to_string(),
        };
        assert_eq!(t.id_literal(b"61"), None, "{bad:?}");
    }
}

#[test]
fn quoting() {
    assert_eq!(quote_ident("id"), "`id`");
    assert_eq!(quote_ident("my table"), "`my table`");
    assert_eq!(quote_ident("sélect"), "`sélect`");
    assert_eq!(quote_ident("order"), "`order`");
    assert_eq!(quote_ident("a`b"), "`a``b`");
    assert_eq!(quote_ident("``"), "``````");
    let mut cols = rfc();
    cols.push(col("we`ird col", "int"));
    let t = validate("my db", "m`q", opts(), &cols).expect("valid");
    assert_eq!(t.qualified(), "`my db`.`m``q`");
    assert_eq!(t.select_list(), "`id`, `message`, `we``ird col`");
    let e = err(&[], opts());
    assert_eq!(
        e,
        "message table `test`.`m`: missing required column id; missing required column time_next; \
         missing required column epoch; missing required column time_acked; the primary key must be \
         exactly (id), but the table has none"
    );
}

#[test]
fn quoted_ack_ids_become_literals_no_sql_mode_reads_differently() {
    let t = table_with_id(col("id", "bigint"));
    let lit = |t: &MessageTable, v: &[u8], cs: Option<&str>| t.quoted_id_literal(v, cs);
    // A plain number is a number (exact even past 2^53, which a string compared as a double is not).
    assert_eq!(lit(&t, b"42", None).as_deref(), Some("42"));
    assert_eq!(
        lit(&t, b"9007199254740993", None).as_deref(),
        Some("9007199254740993")
    );
    // Anything else is the string itself, converted by the server as the client's would have been.
    assert_eq!(lit(&t, b" 42", None).as_deref(), Some("_utf8mb4 X'203432'"));
    assert_eq!(
        lit(&t, b"1) OR 1=1 -- ", None).as_deref(),
        Some("_utf8mb4 X'3129204F5220313D31202D2D20'")
    );

    // QA's injection, once NO_BACKSLASH_ESCAPES has ended the string at its second quote, and an id
    // ending in a backslash: hex, whatever they hold.
    let t = table_with_id(col("id", "varchar"));
    assert_eq!(
        lit(&t, br"zz\", None).as_deref(),
        Some("_utf8mb4 X'7A7A5C'")
    );
    assert_eq!(
        lit(&t, b"a'b\"c", None).as_deref(),
        Some("_utf8mb4 X'6127622263'")
    );
    assert_eq!(lit(&t, b"", None).as_deref(), Some("_utf8mb4 X''"));

    // Text: the column's introducer when the bytes are already in its character set...
    let latin1 = table_with_id(with_charset(col("id", "varchar"), "latin1"));
    assert_eq!(
        lit(&latin1, b"abc", None).as_deref(),
        Some("_latin1 X'616263'")
    );
    assert_eq!(
        lit(&latin1, b"\xe9", Some("latin1")).as_deref(),
        Some("_latin1 X'E9'")
    );
    // ...and otherwise the client's, which the server converts to the column's.
    assert_eq!(
        lit(&latin1, "é".as_bytes(), Some("utf8mb4")).as_deref(),
        Some("_utf8mb4 X'C3A9'")
    );
    let utf16 = table_with_id(with_charset(col("id", "varchar"), "utf16"));
    assert_eq!(lit(&utf16, b"a", None).as_deref(), Some("_utf8mb4 X'61'"));
    assert_eq!(
        lit(&utf16, b"a", Some("latin1")).as_deref(),
        Some("_latin1 X'61'")
    );

    // Binary ids compare bytes; timestamps are read as the client's string would have been.
    let bin = table_with_id(col("id", "varbinary"));
    assert_eq!(lit(&bin, b"\x00\xff", None).as_deref(), Some("X'00FF'"));
    let ts = table_with_id(col("id", "timestamp"));
    assert_eq!(
        lit(&ts, b"2024-01-02 03:04:05", None).as_deref(),
        Some("_utf8mb4 X'323032342D30312D30322030333A30343A3035'")
    );

    // A character set name that could inject SQL is refused.
    assert_eq!(lit(&t, b"\xe9", Some("utf8mb4 X'00' OR 1=1 -- ")), None);
    assert_eq!(lit(&ts, b"x", Some("")), None);
}
