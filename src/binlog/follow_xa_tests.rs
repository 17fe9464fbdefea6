//! XA transactions: each one's tables are polled at its own commit or rollback; commits of
//! unknown XIDs poll every table; one-phase commits deliver their rows.

use super::*;

// XA transactions as MariaDB 10.11 writes them (bodies from `mariadb-binlog --hexdump`, their
// CRC32 left off). `XA START` is no event of its own: the group's GTID event says it (flags2
// 0x4c: FL_PREPARED_XA | FL_ALLOW_PARALLEL | FL_TRANSACTIONAL), with the XID. The rows follow,
// then `XA END` as a query event, then the XA_PREPARE_LOG_EVENT: one_phase, formatID,
// gtrid_length, bqual_length (little-endian), gtrid, bqual. `XA COMMIT`/`XA ROLLBACK` is a
// group of its own: a GTID event (flags2 0x8d: FL_COMPLETED_XA | FL_STANDALONE | ...) and the
// statement, always written as `XA COMMIT X'<gtrid>',X'<bqual>',<formatID>`.

/// One XA transaction's events, as the server writes them.
struct Xa<'a> {
    /// The GTID event that starts it.
    start: &'a [u8],
    /// The XID as the server writes it in statements.
    xid: &'a str,
    /// The XA_PREPARE_LOG_EVENT's body.
    prepare: &'a [u8],
    /// The GTID event of the group that commits or rolls it back.
    end: &'a [u8],
}

/// `XA START 'abc'` ... `XA COMMIT 'abc'`, i.e. X'616263',X'',1 (GTIDs 0-1-1 and 0-1-4).
const XA_ABC: Xa<'static> = Xa {
    // seq_no, domain, flags2, formatID, gtrid and bqual lengths, "abc", flags_extra...
    start: &[
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 1, 0, 0, 0, 3, 0, b'a', b'b', b'c', 0x01, 0xff,
    ],
    xid: "X'616263',X'',1",
    prepare: &[0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, b'a', b'b', b'c'],
    end: &[
        4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x8d, 1, 0, 0, 0, 3, 0, b'a', b'b', b'c',
    ],
};

/// `XA START X'01FF', X'bb', 5` ... (GTIDs 0-1-2 and 0-1-5).
const XA_01FF_BB_5: Xa<'static> = Xa {
    start: &[
        2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 5, 0, 0, 0, 2, 1, 0x01, 0xff, 0xbb, 0x01, 0xff,
    ],
    xid: "X'01ff',X'bb',5",
    prepare: &[0, 5, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0x01, 0xff, 0xbb],
    end: &[
        5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x8d, 5, 0, 0, 0, 2, 1, 0x01, 0xff, 0xbb,
    ],
};

impl Harness {
    /// `xa` up to its prepare, having written a row to `table` (table id `id`).
    fn xa_prepared(&mut self, xa: &Xa<'_>, table: &str, id: u64) {
        let cols = rfc_cols();
        self.event(MARIADB_GTID_EVENT, xa.start);
        self.table_map(id, table, &cols);
        self.rows(id, &cols, Rows::Write(vec![row(1, None, None)]));
        self.query(&format!("XA END {}", xa.xid));
        self.event(XA_PREPARE_LOG_EVENT, xa.prepare);
    }

    /// `XA COMMIT` or `XA ROLLBACK` (`verb`) of `xa`, in its group.
    fn xa_end(&mut self, xa: &Xa<'_>, verb: &str) {
        self.event(MARIADB_GTID_EVENT, xa.end);
        self.query(&format!("XA {verb} {}", xa.xid));
    }
}

#[test]
fn interleaved_xa_transactions_poll_their_own_tables_at_their_commits() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.message_table("n", &cols);
    h.xa_prepared(&XA_ABC, "m", 70);
    h.xa_prepared(&XA_01FF_BB_5, "n", 71);
    assert!(h.calls().is_empty(), "prepared is not committed");
    assert!(!h.follower.in_transaction());
    let end = h.pos as u64;
    assert_eq!(h.follower.position().pos, end, "a prepare ends its group");

    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();
    h.xa_end(&XA_01FF_BB_5, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("n".into())]);
    assert!(!h.follower.in_transaction());
    assert_eq!(h.follower.position().pos, h.pos as u64);

    // Each is forgotten at its commit: seen again, a commit is not known.
    h.clear();
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::PollAll]);
}

#[test]
fn an_xa_commit_not_seen_prepared_polls_every_table() {
    let cols = rfc_cols();
    for sql in [
        // Prepared before this follower started.
        "XA COMMIT X'616263',X'',1",
        "XA ROLLBACK X'616263',X'',1",
        // Unreadable (not a form the server writes).
        "XA COMMIT B'0110'",
        "XA COMMIT 'a\\'b'",
    ] {
        let mut h = Harness::new();
        h.message_table("m", &cols);
        h.gtid(true);
        h.query(sql);
        assert_eq!(h.calls(), vec![Call::PollAll], "{sql}");
        assert!(!h.follower.in_transaction());
    }

    // A prepare event that cannot be read keeps nothing, so its commit polls every table.
    let mut h = Harness::new();
    h.message_table("m", &cols);
    let cut = Xa {
        prepare: &XA_ABC.prepare[..10],
        ..XA_ABC
    };
    h.xa_prepared(&cut, "m", 70);
    assert!(h.calls().is_empty());
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::PollAll]);
}

#[test]
fn an_xa_transaction_of_other_tables_polls_nothing() {
    let mut h = Harness::new();
    h.message_table("m", &rfc_cols());
    // `other` is no message table.
    h.xa_prepared(&XA_ABC, "other", 90);
    h.xa_end(&XA_ABC, "COMMIT");
    assert!(h.calls().is_empty());
}

#[test]
fn an_xa_rollback_polls_its_tables_and_forgets_them() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    h.message_table("n", &cols);
    h.xa_prepared(&XA_ABC, "m", 70);
    h.xa_prepared(&XA_01FF_BB_5, "n", 71);
    h.xa_end(&XA_01FF_BB_5, "ROLLBACK");
    assert_eq!(h.calls(), vec![Call::Poll("n".into())]);
    h.clear();
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
    h.clear();
    h.xa_end(&XA_01FF_BB_5, "ROLLBACK");
    assert_eq!(h.calls(), vec![Call::PollAll], "forgotten at its rollback");
}

#[test]
fn prepared_xa_transactions_outlive_a_rotate() {
    let mut h = Harness::new();
    h.message_table("m", &rfc_cols());
    h.xa_prepared(&XA_ABC, "m", 70);
    h.event(ROTATE_EVENT, &rotate_body(4, b"mysql-bin.000002"));
    h.xa_end(&XA_ABC, "COMMIT");
    assert_eq!(h.calls(), vec![Call::Poll("m".into())]);
}

#[test]
fn prepared_xa_transactions_are_capped() {
    let mut h = Harness::new();
    h.message_table("m", &rfc_cols());
    // XIDs of 4 bytes: `i`, little-endian.
    let xid = |i: u32| {
        let gtrid = i.to_le_bytes();
        let mut prepare = vec![0, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0];
        prepare.extend_from_slice(&gtrid);
        let hex: String = gtrid.iter().map(|b| format!("{b:02x}")).collect();
        (prepare, format!("X'{hex}',X'',1"))
    };
    let n = u32::try_from(crate::binlog::xa::MAX_PREPARED_XIDS).expect("small");
    for i in 0..=n {
        let (prepare, sql) = xid(i);
        let xa = Xa {
            xid: &sql,
            prepare: &prepare,
            ..XA_ABC
        };
        h.xa_prepared(&xa, "m", 70);
    }
    // The first was forgotten to make room for the last: its commit is not known.
    for (i, want) in [
        (0, Call::PollAll),
        (1, Call::Poll("m".into())),
        (n, Call::Poll("m".into())),
    ] {
        h.clear();
        h.gtid(true);
        h.query(&format!("XA COMMIT {}", xid(i).1));
        assert_eq!(h.calls(), vec![want], "{i}");
    }
}

#[test]
fn one_phase_xa_commits_deliver_their_rows() {
    let mut h = Harness::new();
    let cols = rfc_cols();
    h.message_table("m", &cols);
    // MariaDB: `XA COMMIT 'op' ONE PHASE` is written as BEGIN (GTID 0-1-7, flags2 0x0c),
    // the rows, and an XID event; no XA statement at all.
    h.event(
        MARIADB_GTID_EVENT,
        &[7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0, 0, 0, 0, 0, 0],
    );
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(3, None, None)]));
    h.xid();
    assert_eq!(h.calls(), vec![changed("3", None, None)]);
    h.clear();

    // MySQL: the rows, then a prepare event with one_phase set, which commits.
    h.gtid(false);
    h.query("XA START X'6f70',X'',1");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(4, None, None)]));
    h.query("XA END X'6f70',X'',1");
    h.event(
        XA_PREPARE_LOG_EVENT,
        &[1, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, b'o', b'p'],
    );
    assert_eq!(h.calls(), vec![changed("4", None, None)]);
    assert!(!h.follower.in_transaction());
    h.clear();

    // The statement form, should a server write one: its rows are its own, nothing else polled.
    h.gtid(false);
    h.query("XA START 'op'");
    h.table_map(70, "m", &cols);
    h.rows(70, &cols, Rows::Write(vec![row(5, None, None)]));
    h.query("XA END 'op'");
    h.query("XA COMMIT 'op' ONE PHASE");
    assert_eq!(h.calls(), vec![changed("5", None, None)]);
    assert!(!h.follower.in_transaction());
}
