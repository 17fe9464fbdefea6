//! Every column type MariaDB has, with exact column metadata, over the text and binary protocols.

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::Value;

use crate::support::compare::ColumnInfo;
use crate::support::{same_both_ways, shared_setup, Rec};

const ALL_TYPES: &str = "CREATE TABLE all_types (
    id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT, i INT NOT NULL DEFAULT 0,
    bi BIGINT, biu BIGINT UNSIGNED, zf INT(5) UNSIGNED ZEROFILL,
    f FLOAT, d DOUBLE, dcm DECIMAL(10,3), dcu DECIMAL(20,0) UNSIGNED,
    bit8 BIT(8), bit1 BIT(1), bool1 BOOLEAN,
    dt DATE, tm TIME(3), dtm DATETIME(6), ts TIMESTAMP(2) NULL DEFAULT NULL, yr YEAR,
    ch CHAR(5), vc VARCHAR(50), vb VARBINARY(20), bn BINARY(4),
    tx TEXT, bl BLOB, mtx MEDIUMTEXT, lbl LONGBLOB, tb TINYBLOB,
    latin VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_swedish_ci,
    bin_coll VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    js JSON, en ENUM('a','b','c'), st SET('x','y','z'),
    geo GEOMETRY, pt POINT, uu UUID, ip INET6,
    UNIQUE KEY (vc), KEY (si)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci";

const INSERT_ROWS: &str = "INSERT INTO all_types VALUES
    (NULL, -128, 255, -32768, -8388608, -2147483648, -9223372036854775808, 18446744073709551615, 42,
     1.5, -2.25e-300, -1234567.891, 99999999999999999999,
     b'10100101', b'1', TRUE,
     '2024-02-29', '-838:59:58.999', '2024-12-31 23:59:59.999999', '2038-01-19 03:14:07.99', 2155,
     'abc', 'héllo wörld ✓', x'00ff10', x'01020304',
     'text ✓', x'000102ff', 'medium', x'deadbeef', x'',
     'åäö', 'CaSe',
     '{\"a\": [1, 2.5, null, \"x\"]}', 'b', 'x,z',
     ST_GeomFromText('LINESTRING(0 0,1 1,2 1)'), ST_GeomFromText('POINT(1 2)'),
     '123e4567-e89b-12d3-a456-426614174000', '2001:db8::ff00:42:8329'),
    (NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL,
     NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL,
     NULL, NULL,
     NULL, NULL, NULL,
     NULL, NULL, NULL, NULL),
    (NULL, 127, 0, 32767, 8388607, 2147483647, 9223372036854775807, 0, 0,
     -3.4e38, 1.7976931348623157e308, 0.001, 0,
     b'0', b'0', FALSE,
     '1000-01-01', '00:00:00', '1000-01-01 00:00:00', '1970-01-01 00:00:01', 1901,
     '', '', x'', x'00',
     '', '', '', '', NULL,
     '', '',
     '[]', 'a', '',
     ST_GeomFromText('POLYGON((0 0,10 0,10 10,0 10,0 0))'), ST_GeomFromText('POINT(-1.5 1e10)'),
     '00000000-0000-0000-0000-000000000000', '::')";

/// `SELECT 1 AS c1, 'v2' AS c2, ...`: `n` columns of alternating types.
fn wide_select(n: usize) -> String {
    let cols: Vec<String> = (1..=n)
        .map(|i| {
            if i % 2 == 0 {
                format!("'v{i}' AS c{i}")
            } else {
                format!("{i} AS c{i}")
            }
        })
        .collect();
    format!("SELECT {} FROM seq_1_to_3", cols.join(", "))
}

fn col<'a>(cols: &'a [ColumnInfo], name: &str) -> &'a ColumnInfo {
    cols.iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

#[tokio::test]
async fn every_column_type_text_protocol() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_types_text", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(&mut c, "SET time_zone = '+00:00'").await;
        r.query(&mut c, ALL_TYPES).await;
        let ins = r.query(&mut c, INSERT_ROWS).await;
        assert_eq!(ins.error, None, "{ins:#?}");
        let sel = r.query(&mut c, "SELECT * FROM all_types ORDER BY id").await;
        assert_eq!(sel.error, None, "{sel:#?}");
        // Make sure the test looks at what it claims to (these hold on both sides).
        let cols = &sel.sets[0].columns;
        assert_eq!(col(cols, "bl").column_type, ColumnType::MYSQL_TYPE_BLOB);
        assert_eq!(col(cols, "bl").character_set, 63, "BLOB is binary");
        assert_ne!(col(cols, "tx").character_set, 63, "TEXT is not binary");
        assert_eq!(col(cols, "dcm").decimals, 3);
        assert_eq!(col(cols, "dtm").decimals, 6);
        assert!(col(cols, "biu").flags.contains(ColumnFlags::UNSIGNED_FLAG));
        assert!(col(cols, "en").flags.contains(ColumnFlags::ENUM_FLAG));
        assert!(col(cols, "st").flags.contains(ColumnFlags::SET_FLAG));
        assert_eq!(col(cols, "geo").column_type, ColumnType::MYSQL_TYPE_GEOMETRY);
        assert_eq!(col(cols, "bit8").column_type, ColumnType::MYSQL_TYPE_BIT);
        assert_eq!(sel.sets[0].rows.len(), 3);
        assert_eq!(sel.sets[0].rows[1][1], Value::NULL);

        // Expressions, aliases and derived tables carry different metadata than base columns.
        r.query(
            &mut c,
            "SELECT 1 AS one, -1, 18446744073709551615, 1.50, 1e10, 'str', _latin1 'x', x'41',
                    NULL, CAST(1 AS UNSIGNED), CAST('2024-01-02' AS DATE), CAST(1.5 AS DECIMAL(5,2)),
                    NOW() IS NOT NULL, JSON_OBJECT('k', 1), b'101', 0.1 + 0.2, PI(), 5 DIV 2, 7 / 2",
        )
        .await;
        r.query(
            &mut c,
            "SELECT t.id AS ident, t.vc, UPPER(t.vc) u, COUNT(*) OVER () AS n, GROUP_CONCAT(t.ch)
             FROM all_types AS t GROUP BY t.id, t.vc ORDER BY t.id",
        )
        .await;
        r.query(
            &mut c,
            "SELECT ST_AsText(geo), ST_X(pt), JSON_EXTRACT(js, '$.a[1]'), bit8 + 0, en + 0, st + 0,
                    HEX(vb), LENGTH(bn), ts + 0, tm + 0
             FROM all_types ORDER BY id",
        )
        .await;
        r.query(&mut c, "SELECT * FROM all_types WHERE 1 = 0").await;
        r.query(&mut c, "SELECT * FROM (SELECT id, vc FROM all_types) AS sub ORDER BY id").await;
        // Rows that start with a NULL (0xfb) and result sets whose column count needs a 3-byte
        // length-encoded integer (more than 250 columns).
        r.query(&mut c, "SELECT NULL, NULL UNION ALL SELECT NULL, 1 UNION ALL SELECT 2, NULL").await.ok();
        let wide = r.query(&mut c, &wide_select(300)).await.ok();
        assert_eq!(wide.columns().len(), 300);
        r.query(&mut c, "SHOW COLUMNS FROM all_types").await;
        r.query(&mut c, "SHOW CREATE TABLE all_types").await;
        r.query(&mut c, "SHOW INDEX FROM all_types").await;
        r.query(
            &mut c,
            "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE FROM information_schema.COLUMNS
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'all_types' ORDER BY ORDINAL_POSITION",
        )
        .await;
        r.query(&mut c, "SET NAMES latin1").await;
        r.query(&mut c, "SELECT vc, latin, tx FROM all_types ORDER BY id").await;
        r.query(&mut c, "SET NAMES binary").await;
        r.query(&mut c, "SELECT vc, latin, tx FROM all_types ORDER BY id").await;
        r.query(&mut c, "SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci").await;
        r.query(&mut c, "SELECT vc, 'ünïcödé' FROM all_types ORDER BY id").await;
    })
    .await;
}

#[tokio::test]
async fn every_column_type_binary_protocol() {
    let (server, proxy) = shared_setup();
    same_both_ways(server, &proxy, "it_types_binary", async |r: &mut Rec| {
        let mut c = r.conn().await;
        r.query(&mut c, "SET time_zone = '+00:00'").await;
        r.query(&mut c, ALL_TYPES).await;
        r.query(&mut c, INSERT_ROWS).await;
        let sel = r
            .exec(&mut c, "SELECT * FROM all_types WHERE id >= ? ORDER BY id", (0,))
            .await;
        assert_eq!(sel.error, None, "{sel:#?}");
        assert_eq!(sel.sets[0].rows.len(), 3);
        // Binary rows decode into typed values (not strings), so this is a different code path.
        assert!(matches!(sel.sets[0].rows[0][16], Value::Date(..)), "{:?}", sel.sets[0].rows[0][16]);
        assert!(matches!(sel.sets[0].rows[0][17], Value::Time(..)), "{:?}", sel.sets[0].rows[0][17]);

        // Parameters of every wire type, NULLs among them.
        let ins = r
            .exec(
                &mut c,
                "INSERT INTO all_types (ti, tiu, si, i, bi, biu, f, d, dcm, dt, tm, dtm, ts, ch, vc, vb, tx, bl, js, en, st, uu)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                vec![
                    Value::Int(-5),
                    Value::UInt(200),
                    Value::Int(1234),
                    Value::Int(-7),
                    Value::Int(i64::MIN),
                    Value::UInt(u64::MAX),
                    Value::Float(0.5),
                    Value::Double(-1e-10),
                    Value::Bytes(b"3.14159".to_vec()),
                    Value::Date(2020, 2, 29, 0, 0, 0, 0),
                    Value::Time(true, 1, 2, 3, 4, 5000),
                    Value::Date(2021, 3, 4, 5, 6, 7, 123456),
                    Value::Date(2022, 1, 1, 0, 0, 0, 0),
                    Value::Bytes(b"xy".to_vec()),
                    Value::Bytes("prepared ✓".as_bytes().to_vec()),
                    Value::Bytes(vec![0, 1, 2, 255]),
                    Value::NULL,
                    Value::Bytes(vec![7; 300]),
                    Value::Bytes(br#"{"p": true}"#.to_vec()),
                    Value::Bytes(b"c".to_vec()),
                    Value::Bytes(b"y".to_vec()),
                    Value::Bytes(b"aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee".to_vec()),
                ],
            )
            .await;
        assert_eq!(ins.error, None, "{ins:#?}");
        r.exec(&mut c, "SELECT * FROM all_types WHERE id = ?", (4,)).await;
        r.exec(
            &mut c,
            "SELECT ?, ?, ?, ?, ?, ?",
            vec![
                Value::NULL,
                Value::Int(1),
                Value::Bytes(b"s".to_vec()),
                Value::Double(2.5),
                Value::Date(2000, 1, 1, 12, 0, 0, 1),
                Value::Time(false, 0, 0, 0, 0, 0),
            ],
        )
        .await;
        r.exec(
            &mut c,
            "SELECT 1 AS one, 1.50, 1e10, 'str', NULL, CAST(1 AS UNSIGNED), CAST(1.5 AS DECIMAL(5,2)),
                    JSON_OBJECT('k', 1), b'101', ST_GeomFromText('POINT(3 4)')",
            (),
        )
        .await;
        r.exec(&mut c, "SELECT * FROM all_types WHERE 1 = 0", ()).await;
        r.exec(&mut c, &wide_select(300), ()).await.ok();
        r.exec(&mut c, "SELECT ?, ? UNION ALL SELECT 2, NULL", (Value::NULL, Value::NULL)).await.ok();
        r.exec(&mut c, "SHOW COLUMNS FROM all_types", ()).await;
    })
    .await;
}
