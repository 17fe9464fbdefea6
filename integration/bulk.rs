//! Bulk paths: LOAD DATA LOCAL INFILE (the server asks the client for a file mid-command) and
//! packets of 16 MiB and more (split into several wire packets, both directions).

use std::io::Write;

use mysql_async::prelude::*;
use mysql_async::{Value, WhiteListFsHandler};

use crate::support::{opts, same_both_ways, shared_setup, Failure, Rec};

#[tokio::test]
async fn load_data_local_infile() {
    let (server, proxy) = shared_setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let small = dir.path().join("small.csv");
    let big = dir.path().join("big.csv");
    let forbidden = dir.path().join("not_whitelisted.csv");
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "").expect("write");
    std::fs::write(&small, "1,one\n2,two\n3,\"quoted, comma\"\n4,\\N\n").expect("write");
    std::fs::write(&forbidden, "9,nine\n").expect("write");
    {
        // ~6 MiB: many LOCAL INFILE data packets.
        let mut f = std::io::BufWriter::new(std::fs::File::create(&big).expect("create"));
        for i in 0..60_000 {
            writeln!(f, "{i},{}", "x".repeat(90 + i % 17)).expect("write");
        }
    }
    let whitelist = [small.clone(), big.clone(), empty.clone()];
    same_both_ways(server, &proxy, "it_infile", async |r: &mut Rec| {
        let o = opts(r.target.port, "root", None, Some(&r.target.db))
            .local_infile_handler(Some(WhiteListFsHandler::new(whitelist.iter().cloned())));
        let mut c = r.target.conn_with(o).await;
        r.query(&mut c, "CREATE TABLE t (id INT PRIMARY KEY, s TEXT)").await.ok();
        let load = r
            .query(
                &mut c,
                &format!(
                    "LOAD DATA LOCAL INFILE '{}' INTO TABLE t FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"'",
                    small.display()
                ),
            )
            .await
            .ok();
        assert_eq!(load.sets[0].affected_rows, 4);
        assert_eq!(load.sets[0].info, "Records: 4  Deleted: 0  Skipped: 0  Warnings: 0");
        r.query(&mut c, "SELECT * FROM t ORDER BY id").await.ok();
        // Duplicate keys with IGNORE: warnings and "Skipped" in the info string.
        r.query(
            &mut c,
            &format!("LOAD DATA LOCAL INFILE '{}' IGNORE INTO TABLE t FIELDS TERMINATED BY ','", small.display()),
        )
        .await
        .ok();
        r.query(&mut c, "TRUNCATE TABLE t").await.ok();
        let big_load = r
            .query(
                &mut c,
                &format!("LOAD DATA LOCAL INFILE '{}' INTO TABLE t FIELDS TERMINATED BY ','", big.display()),
            )
            .await
            .ok();
        assert_eq!(big_load.sets[0].affected_rows, 60_000);
        r.query(&mut c, "SELECT COUNT(*), SUM(LENGTH(s)), MD5(GROUP_CONCAT(s ORDER BY id SEPARATOR '')) FROM t")
            .await
            .ok();
        // An empty file: the client answers the server's request with just the empty packet.
        r.query(&mut c, &format!("LOAD DATA LOCAL INFILE '{}' INTO TABLE t", empty.display()))
            .await
            .ok();
        // The client refuses a file (not whitelisted): mysql_async then reports an error without
        // finishing the exchange, which leaves that connection unusable; the client drops it in
        // the middle of a LOCAL INFILE exchange and carries on with a new one.
        let refused = c
            .query_drop(format!("LOAD DATA LOCAL INFILE '{}' INTO TABLE t", forbidden.display()))
            .await
            .map_err(|e| Failure::of(&e));
        r.note("refused file", refused.is_err());
        drop(c);
        let o = opts(r.target.port, "root", None, Some(&r.target.db))
            .local_infile_handler(Some(WhiteListFsHandler::new(whitelist.iter().cloned())));
        let mut c = r.target.conn_with(o).await;
        r.query(&mut c, "SELECT COUNT(*) FROM t").await.ok();
        // LOCAL INFILE inside a multi-statement.
        r.query(
            &mut c,
            &format!(
                "DELETE FROM t WHERE id < 4; LOAD DATA LOCAL INFILE '{}' INTO TABLE t FIELDS TERMINATED BY ','; SELECT COUNT(*) FROM t",
                small.display()
            ),
        )
        .await;
    })
    .await;
}

const MIB: usize = 1024 * 1024;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// 20 MiB values: a 40 MiB COM_QUERY (client → server), 20 MiB rows in text and binary protocol
/// (server → client), a 20 MiB prepared-statement parameter (COM_STMT_SEND_LONG_DATA, which has
/// no reply), and packets of exactly 0xffffff bytes (followed by an empty packet).
#[tokio::test]
async fn packets_over_16_mib_both_ways() {
    let (server, proxy) = shared_setup();
    let blob = pattern(20 * MIB, 7);
    let blob2 = pattern(20 * MIB + 3, 99);
    let insert_sql = format!("INSERT INTO big VALUES (1, x'{}')", hex(&blob));
    same_both_ways(server, &proxy, "it_big", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(&mut c, "CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)")
            .await
            .ok();
        r.query(&mut c, &insert_sql).await.ok();
        let text = r
            .query(&mut c, "SELECT id, b, LENGTH(b), MD5(b) FROM big")
            .await
            .ok();
        assert_eq!(
            text.rows()[0][2],
            Value::Bytes(format!("{}", 20 * MIB).into_bytes())
        );
        let binary = r
            .exec(&mut c, "SELECT id, b FROM big WHERE id = ?", (1,))
            .await
            .ok();
        match &binary.rows()[0][1] {
            Value::Bytes(b) => assert!(b.starts_with(b"<20971520 bytes"), "{}", b.len()),
            other => panic!("{other:?}"),
        }
        // Fetch the raw value once too: the relayed bytes are the inserted bytes.
        let back: Option<Vec<u8>> = c
            .query_first("SELECT b FROM big WHERE id = 1")
            .await
            .expect("select");
        r.note(
            "text row equals inserted blob",
            back.as_deref() == Some(&blob[..]),
        );

        // Prepared insert with a 20 MiB parameter: mysql_async sends it as COM_STMT_SEND_LONG_DATA.
        r.exec(&mut c, "INSERT INTO big VALUES (?, ?)", (2, blob2.clone()))
            .await
            .ok();
        let back2: Option<Vec<u8>> = c
            .exec_first("SELECT b FROM big WHERE id = ?", (2,))
            .await
            .expect("select 2");
        r.note(
            "binary row equals long-data blob",
            back2.as_deref() == Some(&blob2[..]),
        );
        r.query(&mut c, "SELECT id, LENGTH(b), MD5(b) FROM big ORDER BY id")
            .await
            .ok();

        // Exactly 0xffffff-byte packets must be followed by an empty packet (and nothing else).
        // Text row: 4-byte length prefix + value = 0xffffff.
        r.query(&mut c, "SELECT REPEAT('a', 16777211)").await.ok();
        // Binary row: header byte + NULL bitmap byte + 4-byte length prefix + value = 0xffffff.
        r.exec(&mut c, "SELECT REPEAT(?, 16777209)", ("b",))
            .await
            .ok();
        // Client side: COM_QUERY payload (command byte + SQL) of exactly 0xffffff bytes.
        let prefix = "SELECT LENGTH('";
        let suffix = "')";
        let fill = 0xff_ffff - 1 - prefix.len() - suffix.len();
        let exact = format!("{prefix}{}{suffix}", "c".repeat(fill));
        assert_eq!(exact.len() + 1, 0xff_ffff);
        r.query(&mut c, &exact).await.ok();
        r.query(&mut c, "SELECT 'after big packets'").await.ok();
    })
    .await;
}
