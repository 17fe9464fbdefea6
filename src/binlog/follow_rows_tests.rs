//! Row events and the groups around them: what reaches the engine at commit and what becomes a
//! poll, rollbacks, DDL, and how the position moves (commits, heartbeats, rotates).

use super::*;

#[test]
fn inserts_reach_the_engine_at_commit_only() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::Write(vec![row(1, None, None), row(2, Some(0), None)]),
    );
    assert!(h.calls().is_empty(), "nothing before the commit");
    assert!(h.follower.in_transaction());
    h.xid();
    assert_eq!(
        h.calls(),
        vec![changed("1", None, None), changed("2", Some(0), None)]
    );
    assert!(!h.follower.in_transaction());
}

/// A table map repeated unchanged keeps its layout; one that differs (the same table id, its
/// columns in another order, as after an ALTER the engine has not reloaded yet) is read anew.
#[test]
fn a_changed_table_map_is_read_anew() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    for id in [1, 2] {
        h.gtid(false);
        h.table_map(70, "m", &cols);
        h.rows(70, &cols, Rows::Write(vec![row(id, Some(5), None)]));
        h.xid();
    }
    // time_next and time_acked swapped in the table.
    let swapped = vec![
        bigint("id"),
        bigint("time_acked"),
        bigint("epoch"),
        bigint("time_next"),
        varchar("message", 128),
    ];
    h.gtid(false);
    h.table_map(70, "m", &swapped);
    h.rows(70, &swapped, Rows::Write(vec![row(3, Some(7), None)]));
    h.xid();
    assert_eq!(
        h.calls(),
        vec![
            changed("1", Some(5), None),
            changed("2", Some(5), None),
            // In the swapped table the image's second column is time_acked.
            changed("3", None, Some(7)),
        ]
    );
}

#[test]
fn rolled_back_transactions_change_nothing() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.query("BEGIN");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.query("ROLLBACK");
    assert!(h.calls().is_empty());
    // The next transaction starts clean.
    h.query("BEGIN");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(3, None, None)]));
    h.query("COMMIT");
    assert_eq!(h.calls(), vec![changed("3", None, None)]);
}

#[test]
fn other_tables_are_skipped_without_decoding_rows() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    let other = vec![bigint("a"), varchar("b", 10)];
    h.gtid(false);
    h.table_map(71, "busy", &other);
    // Rows that would not even decode: never looked at.
    let mut garbage = table_id(71);
    garbage.extend_from_slice(&[1, 0, 2, 0xFF, 0xFF, 0xFF, 0xFF]);
    h.event(23, &garbage);
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(5, None, None)]));
    // A rows event for a table id never mapped is skipped too.
    h.rows(99, &cols, Rows::Write(vec![row(6, None, None)]));
    h.xid();
    assert_eq!(h.calls(), vec![changed("5", None, None)]);
    // One lookup per table map, none per rows event.
    assert_eq!(h.sink.lookups.get(), 2);
}

#[test]
fn acks_reschedules_id_changes_and_deletes() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::Update(vec![
            (row(1, Some(5), None), row(1, None, Some(1_700_000_000))),
            (row(2, Some(5), None), row(2, Some(9_000), None)),
            (row(3, None, None), row(30, None, None)),
        ]),
    );
    h.rows(70, &cols, Rows::Delete(vec![row(4, None, Some(1))]));
    h.xid();
    assert_eq!(
        h.calls(),
        vec![
            changed("1", None, Some(1_700_000_000)),
            changed("2", Some(9_000), None),
            Call::Deleted("m".into(), "3".into()),
            changed("30", None, None),
            Call::Deleted("m".into(), "4".into()),
        ]
    );
}

#[test]
fn binary_ids_are_padded_like_hex() {
    let mut h = Harness::new();
    let cols = vec![
        binary("id", 4),
        bigint("time_next"),
        bigint("epoch"),
        bigint("time_acked"),
    ];
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::Write(vec![vec![V::S(b"ab"), V::Null, V::Null, V::Null]]),
    );
    h.xid();
    assert_eq!(h.calls(), vec![changed("61620000", None, None)]);
}

#[test]
fn unreadable_rows_become_a_poll_at_commit() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    // No column names (binlog_row_metadata not FULL).
    h.gtid(false);
    h.table_map_without_names(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.rows(70, &cols, Rows::Write(vec![row(2, None, None)]));
    assert!(h.calls().is_empty());
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();
    // A row image without time_next (binlog_row_image=MINIMAL in some session).
    let present = [true, false, true, true, true];
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(
        70,
        &cols,
        Rows::WritePartial(&present, vec![vec![V::I(1), V::I(0), V::Null, V::S(b"x")]]),
    );
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn huge_transactions_keep_a_poll_instead_of_every_row() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    let rows: Vec<Vec<V>> = (0..MAX_TX_CHANGES as i64 + 1)
        .map(|i| row(i, None, None))
        .collect();
    h.rows(70, &cols, Rows::Write(rows));
    h.rows(70, &cols, Rows::Write(vec![row(-1, None, None)]));
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn ddl_reloads_and_polls_the_tables_it_names() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(true);
    h.query("TRUNCATE TABLE m");
    assert_eq!(h.calls(), vec![Call::SchemaChanged, Call::Poll("m".into())]);
    h.clear();
    h.gtid(true);
    h.query("CREATE TEMPORARY TABLE tmp (i int)");
    assert!(h.calls().is_empty());
    h.gtid(true);
    h.query("/* x */ ALTER TABLE other ADD c int");
    assert_eq!(h.calls(), vec![Call::SchemaChanged]);
    assert!(!h.follower.in_transaction());
}

/// An index made or dropped on a message table by anyone is DDL (`sql::is_ddl`, as for the
/// sessions): its table is read again, so the poller never names an index that is gone and a
/// group column's new index is used at once. (The binlog once counted only DDL of tables and
/// databases, and the change waited for the periodic reload, the poller failing meanwhile.)
/// A temporary table's DDL is not, and does not end the transaction it is in.
#[test]
fn index_ddl_reloads_and_temporary_tables_stay_in_their_transaction() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    for sql in [
        "CREATE INDEX k_fifo ON m (time_next, id)",
        "DROP INDEX k_fifo ON m",
        "create unique index u on m (epoch)",
    ] {
        h.clear();
        h.gtid(true);
        h.query(sql);
        assert_eq!(
            h.calls(),
            vec![Call::SchemaChanged, Call::Poll("m".into())],
            "{sql}"
        );
    }
    h.clear();
    h.gtid(false);
    h.query("BEGIN");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.query("DROP TEMPORARY TABLE IF EXISTS `t` /* generated by server */");
    assert!(h.follower.in_transaction(), "still in the transaction");
    assert!(h.calls().is_empty(), "nothing committed yet");
    h.xid();
    assert_eq!(h.calls(), vec![changed("1", None, None)]);
}

#[test]
fn statement_format_writes_are_polled_for() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.query("INSERT INTO m (id) VALUES (1)");
    assert!(h.calls().is_empty());
    h.xid();
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn partial_rollbacks_and_xa_poll() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.query("BEGIN");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.query("SAVEPOINT a");
    h.rows(70, &cols, Rows::Write(vec![row(2, None, None)]));
    h.query("ROLLBACK TO a");
    h.query("COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();

    h.gtid(false);
    h.query("XA START X'31',X'',1");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(7, None, None)]));
    h.query("XA END X'31',X'',1");
    // `XA PREPARE '1'` as MariaDB writes it.
    h.event(
        XA_PREPARE_LOG_EVENT,
        &[0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, b'1'],
    );
    assert!(h.calls().is_empty(), "prepared is not committed");
    assert!(!h.follower.in_transaction());
    h.gtid(true);
    h.query("XA COMMIT X'31',X'',1");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn the_position_moves_only_at_commits() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    assert_eq!(h.follower.take_moved(), None);
    h.xid();
    let end = h.pos as u64;
    assert_eq!(
        h.follower.take_moved(),
        Some(BinlogPosition {
            file: "mysql-bin.000001".into(),
            pos: end
        })
    );
    assert_eq!(h.follower.take_moved(), None);
    // A heartbeat carries the server's position but is no event of the file.
    let hb = raw(HEARTBEAT_EVENT, 999_999, b"mysql-bin.000001");
    h.feed(hb);
    assert_eq!(h.follower.take_moved(), None);
    // Standalone statements commit by themselves.
    h.gtid(true);
    h.query("GRANT SELECT ON *.* TO x");
    assert_eq!(h.follower.position().pos, h.pos as u64);
}

#[test]
fn rotates_move_to_the_next_file() {
    let mut h = Harness::new();
    h.event(ROTATE_EVENT, &rotate_body(4, b"mysql-bin.000002"));
    assert_eq!(
        h.follower.take_moved(),
        Some(BinlogPosition {
            file: "mysql-bin.000002".into(),
            pos: 4
        })
    );
}

#[test]
fn the_first_rotate_loses_mariadbs_crc() {
    // What MariaDB sends first: an artificial rotate (log_pos 0, flag 0x20) with a CRC32 after
    // the name, before any format description says there are checksums.
    let body = rotate_body(471, b"mysql-bin.000007");
    let mut event = header(ROTATE_EVENT, 0, LOG_EVENT_ARTIFICIAL_F, body.len() + 4);
    event.extend_from_slice(&body);
    let crc = crc32(&event);
    event.extend_from_slice(&crc.to_le_bytes());
    let mut h = Harness::new();
    h.feed(event);
    assert_eq!(
        h.follower.position(),
        BinlogPosition {
            file: "mysql-bin.000007".into(),
            pos: 471
        }
    );
    // Without a CRC the name is left alone.
    let mut h = Harness::new();
    let body = rotate_body(4, b"mysql-bin.000008");
    let mut event = header(ROTATE_EVENT, 0, LOG_EVENT_ARTIFICIAL_F, body.len());
    event.extend_from_slice(&body);
    h.feed(event);
    assert_eq!(h.follower.position().file, "mysql-bin.000008");
}

#[test]
fn crc32_is_the_ieee_one() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn an_unfinished_transaction_is_polled_for_when_the_next_begins() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.gtid(false);
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(1, None, None)]));
    h.gtid(false);
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}
