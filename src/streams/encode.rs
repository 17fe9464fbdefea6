//! A binlog row value as the server's text protocol would send it for a `SELECT` of the column:
//! what `STREAM ... GROUP` writes in its rows.
//!
//! The binlog carries values in storage form; most have one text form whatever the session
//! (integers, decimals with their scale, dates and times with the column's fractional digits,
//! strings and blobs as their bytes). Two depend on the session and are finished by the stream
//! on the session's own connection: `TIMESTAMP` columns (an instant, shown in the session's time
//! zone: [`Cell::Timestamp`]). Limits (docs/STREAMS.md): strings are sent in the column's own
//! character set (a `SELECT` converts them to `character_set_results`), and `FLOAT`/`DOUBLE`
//! use Rust's shortest round-trip form, which for very large or small values differs from the
//! server's (`1e20` there, `100000000000000000000` here).

use mysql_common::constants::ColumnType;
use mysql_common::Value;

use super::reader::ColumnSpec;
use crate::binlog::rows::{normalize_decimal, year_text};

/// One value of a stream row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Null,
    Text(Vec<u8>),
    /// A `TIMESTAMP` column: the instant as `seconds[.fraction]` (what `FROM_UNIXTIME` takes,
    /// with exactly the column's fractional digits); `None` for the zero timestamp.
    Timestamp(Option<String>),
}

/// The cell for `value` of a column described by `spec`; `labels` are the names of an ENUM's
/// or SET's members, in order. `Err` names what cannot be rendered.
pub fn cell(value: &Value, spec: &ColumnSpec, labels: Option<&[Vec<u8>]>) -> Result<Cell, String> {
    use ColumnType::*;
    if *value == Value::NULL {
        return Ok(Cell::Null);
    }
    let fsp = usize::from(spec.meta.first().copied().unwrap_or(0)).min(6);
    let text = |s: String| Ok(Cell::Text(s.into_bytes()));
    match (spec.ty, value) {
        (MYSQL_TYPE_ENUM, Value::Int(i)) => {
            let labels = labels.ok_or("an ENUM column without its members")?;
            match usize::try_from(*i) {
                Ok(0) => Ok(Cell::Text(Vec::new())),
                Ok(n) => labels
                    .get(n - 1)
                    .map(|l| Cell::Text(l.clone()))
                    .ok_or_else(|| format!("ENUM index {n} beyond its {} members", labels.len())),
                Err(_) => Err(format!("ENUM index {i}")),
            }
        }
        (MYSQL_TYPE_SET, Value::Bytes(bits)) => {
            let labels = labels.ok_or("a SET column without its members")?;
            let mut out: Vec<u8> = Vec::new();
            for (n, label) in labels.iter().enumerate() {
                let set = bits.get(n / 8).is_some_and(|b| b >> (n % 8) & 1 == 1);
                if set {
                    if !out.is_empty() {
                        out.push(b',');
                    }
                    out.extend_from_slice(label);
                }
            }
            Ok(Cell::Text(out))
        }
        (_, Value::Int(i)) if spec.unsigned && *i < 0 => {
            // mysql_common reads some unsigned columns as signed: put the bits back.
            let bits = match spec.ty {
                MYSQL_TYPE_TINY => u64::from(*i as u8),
                MYSQL_TYPE_SHORT => u64::from(*i as u16),
                MYSQL_TYPE_INT24 => (*i as u64) & 0xFF_FFFF,
                MYSQL_TYPE_LONG => u64::from(*i as u32),
                _ => *i as u64,
            };
            text(bits.to_string())
        }
        (_, Value::Int(i)) => text(i.to_string()),
        (_, Value::UInt(u)) => text(u.to_string()),
        (_, Value::Float(f)) => text(f.to_string()),
        (_, Value::Double(d)) => text(d.to_string()),
        (MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL, Value::Bytes(b)) => {
            let s = std::str::from_utf8(b).map_err(|e| e.to_string())?;
            normalize_decimal(s)
                .map(|s| Cell::Text(s.into_bytes()))
                .ok_or_else(|| format!("a DECIMAL reads as {s:?}"))
        }
        (MYSQL_TYPE_YEAR, Value::Bytes(b)) => {
            let s = std::str::from_utf8(b).map_err(|e| e.to_string())?;
            year_text(s)
                .map(|s| Cell::Text(s.into_bytes()))
                .ok_or_else(|| format!("a YEAR reads as {s:?}"))
        }
        (MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIMESTAMP2, Value::Bytes(b)) => {
            let s = std::str::from_utf8(b).map_err(|e| e.to_string())?;
            let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
            if sec == "0" && frac.bytes().all(|b| b == b'0') {
                return Ok(Cell::Timestamp(None));
            }
            let mut frac = frac.to_owned();
            while frac.len() < fsp {
                frac.push('0');
            }
            frac.truncate(fsp);
            Ok(Cell::Timestamp(Some(if fsp == 0 {
                sec.to_owned()
            } else {
                format!("{sec}.{frac}")
            })))
        }
        (MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE, Value::Date(y, m, d, ..)) => {
            text(format!("{y:04}-{m:02}-{d:02}"))
        }
        (_, Value::Date(y, mo, d, h, mi, s, us)) => {
            let mut out = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}");
            push_fraction(&mut out, *us, fsp);
            text(out)
        }
        (_, Value::Time(neg, days, h, m, s, us)) => {
            let hours = u64::from(*days) * 24 + u64::from(*h);
            let mut out = format!("{}{hours:02}:{m:02}:{s:02}", if *neg { "-" } else { "" });
            push_fraction(&mut out, *us, fsp);
            text(out)
        }
        (_, Value::Bytes(b)) => Ok(Cell::Text(b.clone())),
        (ty, v) => Err(format!("a {ty:?} value {v:?}")),
    }
}

fn push_fraction(out: &mut String, micros: u32, fsp: usize) {
    if fsp > 0 {
        let digits = format!("{micros:06}");
        out.push('.');
        out.push_str(digits.get(..fsp).unwrap_or(&digits));
    }
}

/// The members of an `enum('a','b')` / `set(...)` column type as `information_schema.COLUMNS`
/// writes it (quotes doubled inside, backslashes as written).
pub fn enum_labels(column_type: &[u8]) -> Option<Vec<Vec<u8>>> {
    let open = column_type.iter().position(|&b| b == b'(')?;
    let body = column_type.get(open + 1..column_type.len().checked_sub(1)?)?;
    let mut labels = Vec::new();
    let mut i = 0;
    while i < body.len() {
        if body.get(i) != Some(&b'\'') {
            return None;
        }
        i += 1;
        let mut label = Vec::new();
        loop {
            match (body.get(i), body.get(i + 1)) {
                (Some(b'\''), Some(b'\'')) => {
                    label.push(b'\'');
                    i += 2;
                }
                (Some(b'\''), _) => {
                    i += 1;
                    break;
                }
                (Some(&b), _) => {
                    label.push(b);
                    i += 1;
                }
                (None, _) => return None,
            }
        }
        labels.push(label);
        match body.get(i) {
            Some(b',') => i += 1,
            None => break,
            Some(_) => return None,
        }
    }
    Some(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ty: ColumnType, meta: &[u8], unsigned: bool) -> ColumnSpec {
        ColumnSpec {
            name: "c".into(),
            ty,
            meta: meta.into(),
            unsigned,
        }
    }

    fn text(value: Value, ty: ColumnType, meta: &[u8]) -> String {
        match cell(&value, &spec(ty, meta, false), None) {
            Ok(Cell::Text(t)) => String::from_utf8(t).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_as_the_server_prints_them() {
        use ColumnType::*;
        assert_eq!(text(Value::Int(-5), MYSQL_TYPE_LONG, &[]), "-5");
        assert_eq!(
            cell(&Value::Int(-1), &spec(MYSQL_TYPE_TINY, &[], true), None),
            Ok(Cell::Text(b"255".to_vec()))
        );
        assert_eq!(
            text(
                Value::Bytes(b"000000005.50".to_vec()),
                MYSQL_TYPE_NEWDECIMAL,
                &[10, 2]
            ),
            "5.50"
        );
        assert_eq!(
            text(
                Value::Date(2026, 12, 1, 10, 0, 5, 120_000),
                MYSQL_TYPE_DATETIME2,
                &[6]
            ),
            "2026-12-01 10:00:05.120000"
        );
        assert_eq!(
            text(
                Value::Date(2026, 12, 1, 10, 0, 5, 120_000),
                MYSQL_TYPE_DATETIME2,
                &[2]
            ),
            "2026-12-01 10:00:05.12"
        );
        assert_eq!(
            text(Value::Date(2026, 1, 2, 0, 0, 0, 0), MYSQL_TYPE_DATE, &[]),
            "2026-01-02"
        );
        assert_eq!(
            text(Value::Time(true, 1, 2, 3, 4, 0), MYSQL_TYPE_TIME2, &[0]),
            "-26:03:04"
        );
        assert_eq!(
            text(Value::Bytes(b"{\"a\": 1}".to_vec()), MYSQL_TYPE_BLOB, &[4]),
            "{\"a\": 1}"
        );
        assert_eq!(
            cell(&Value::NULL, &spec(MYSQL_TYPE_LONG, &[], false), None),
            Ok(Cell::Null)
        );
        assert_eq!(
            cell(
                &Value::Bytes(b"1700000000.5".to_vec()),
                &spec(MYSQL_TYPE_TIMESTAMP2, &[3], false),
                None
            ),
            Ok(Cell::Timestamp(Some("1700000000.500".into())))
        );
        assert_eq!(
            cell(
                &Value::Bytes(b"0".to_vec()),
                &spec(MYSQL_TYPE_TIMESTAMP2, &[0], false),
                None
            ),
            Ok(Cell::Timestamp(None))
        );
    }

    #[test]
    fn enums_and_sets_by_their_members() {
        let labels = enum_labels(b"enum('a','it''s','c')").unwrap();
        assert_eq!(labels, vec![b"a".to_vec(), b"it's".to_vec(), b"c".to_vec()]);
        let e = spec(ColumnType::MYSQL_TYPE_ENUM, &[], false);
        assert_eq!(
            cell(&Value::Int(2), &e, Some(&labels)),
            Ok(Cell::Text(b"it's".to_vec()))
        );
        assert_eq!(
            cell(&Value::Int(0), &e, Some(&labels)),
            Ok(Cell::Text(Vec::new()))
        );
        assert!(cell(&Value::Int(4), &e, Some(&labels)).is_err());
        let s = spec(ColumnType::MYSQL_TYPE_SET, &[], false);
        assert_eq!(
            cell(&Value::Bytes(vec![0b101]), &s, Some(&labels)),
            Ok(Cell::Text(b"a,c".to_vec()))
        );
        assert_eq!(enum_labels(b"enum('a'"), None);
    }
}
