//! From a rows event's row images to what a table manager wants: the after image of a changed
//! row ([`ChangedRow`]) or the key of a deleted one.
//!
//! Columns come by position; their names come from the table map's optional metadata
//! (`binlog_row_metadata=FULL`), so an event is read with the column layout it was written with,
//! even when the table was altered since. A table map without names, a row image without one of
//! the needed columns (`binlog_row_image` set to MINIMAL by some session), or an id of a type
//! whose key cannot be rebuilt from the binlog makes [`Layout::new`] or [`Layout::changes`] fail;
//! the caller then asks the manager to poll instead, which is always correct, only slower.
//!
//! # Keys
//!
//! A key must be byte for byte what the poller reads with `MessageTable::key_sql` (see
//! `messaging::table`):
//!
//! - numeric ids: the decimal text the server prints — integers plain, `DECIMAL` with its scale
//!   (`5.00`), `YEAR` as four digits (`0000` for the zero year);
//! - text and binary ids: upper-case hex of the stored bytes. The binlog strips the padding of
//!   fixed-length `BINARY(n)` (and MariaDB's `UUID`/`INET4`/`INET6`, stored the same way) while
//!   `HEX()` shows it, so those are padded back with zero bytes to the column's length. `CHAR`
//!   loses its trailing spaces both in the binlog and in `HEX()`, so it needs nothing.
//! - `timestamp` ids: the instant, as `UNIX_TIMESTAMP()` prints it — seconds, and the column's
//!   fractional digits (`1796122806.733` for `timestamp(3)`).
//!
//! Ids keyed by the text form of a value the binlog carries in another form (`date`,
//! `datetime`, `time`, `ENUM`, `SET`) are not rebuilt: rows of such tables are picked up by a
//! poll.

use mysql_common::binlog::events::{OptionalMetaExtractor, RowsEventData, TableMapEvent};
#[cfg(debug_assertions)]
use mysql_common::binlog::row::BinlogRow;
use mysql_common::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;
use mysql_common::Value;

use crate::messaging::manager::ChangedRow;
use crate::messaging::table::{IdKind, MessageTable};

/// One row change of a message table, in the order the server applied it.
#[derive(Debug, Clone)]
pub enum RowChange {
    /// Inserted or updated: the after image.
    Changed(ChangedRow),
    /// Deleted (or an update moved the row to another id): the old key.
    Deleted(Box<[u8]>),
}

/// How the id column's binlog value becomes a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyCodec {
    /// Integers and `DECIMAL`: the value's decimal text.
    Decimal,
    /// `YEAR`: four digits.
    Year,
    /// Text and binary ids: upper-case hex, zero-padded to `pad_to` bytes when set.
    Hex { pad_to: Option<usize> },
    /// `timestamp(fsp)` ids: seconds since the epoch, with `fsp` fractional digits, as
    /// `UNIX_TIMESTAMP()` prints them.
    Timestamp { fsp: usize },
}

/// Where the columns the engine cares about sit in one table map's rows, and how to step over
/// every column of a row image.
#[derive(Debug, Clone)]
pub struct Layout {
    id: usize,
    priority: Option<usize>,
    time_next: usize,
    time_acked: usize,
    codec: KeyCodec,
    /// Every column of the table map, in order: what a value of it looks like in a row image.
    columns: Vec<ColumnSpec>,
}

/// How one column's values are laid out in a row image (from the table map, read once per map
/// rather than once per row).
#[derive(Debug, Clone)]
struct ColumnSpec {
    ty: ColumnType,
    meta: Box<[u8]>,
    unsigned: bool,
}

/// The values of the columns the engine reads, from one row image; `None` where the image does
/// not hold the column (`binlog_row_image=MINIMAL`), `Some(Value::NULL)` for SQL NULL.
#[derive(Debug, Default)]
struct Wanted {
    id: Option<Value>,
    priority: Option<Value>,
    time_next: Option<Value>,
    time_acked: Option<Value>,
}

impl Layout {
    /// Finds the columns of `def` in the table map `tme`, or says why rows of this table map
    /// cannot be read (the caller falls back to polling).
    pub fn new(def: &MessageTable, tme: &TableMapEvent<'_>) -> Result<Layout, String> {
        let count = tme.columns_count() as usize;
        let names = column_names(tme)?;
        if names.len() != count {
            return Err(format!(
                "the table map names {} of {count} columns (is binlog_row_metadata FULL?)",
                names.len()
            ));
        }
        let find =
            |wanted: &str| -> Option<usize> { names.iter().position(|n| same_name(n, wanted)) };
        let need = |wanted: &str| -> Result<usize, String> {
            find(wanted).ok_or_else(|| format!("the table map has no column {wanted}"))
        };
        let id = need(def.id_column())?;
        let time_next = need("time_next")?;
        let time_acked = need("time_acked")?;
        let priority = if def.has_priority {
            Some(need("priority")?)
        } else {
            None
        };
        let ty = match tme.get_column_type(id) {
            Ok(Some(ty)) => ty,
            _ => return Err("the table map has no type for the id column".to_string()),
        };
        let codec = codec_for(&def.id_kind, ty, tme.get_column_metadata(id).unwrap_or(&[]))?;
        Ok(Layout {
            id,
            priority,
            time_next,
            time_acked,
            codec,
            columns: column_specs(tme, count)?,
        })
    }

    /// The changes one rows event makes, in order. Fails as a whole (the caller polls) when any
    /// row cannot be read.
    ///
    /// The row images are read here rather than with mysql_common's `BinlogRow`, which builds a
    /// full column definition (names, flags, charset: a dozen allocations) for every column of
    /// every row and re-reads the table map's metadata per row; under insert load that was most
    /// of the watcher's time. Each value is still decoded by mysql_common's `BinlogValue`, only
    /// the wanted ones are kept. Debug builds check every event against `BinlogRow`.
    pub fn changes(
        &self,
        rows: &RowsEventData<'_>,
        #[cfg_attr(not(debug_assertions), allow(unused_variables))] tme: &TableMapEvent<'_>,
    ) -> Result<Vec<RowChange>, String> {
        let changes = self.read_rows(rows);
        #[cfg(debug_assertions)]
        {
            // Both read the event, or both refuse it (each in its own words).
            let expected = self.changes_via_binlog_row(rows, tme);
            assert_eq!(
                changes.as_ref().map(|c| format!("{c:?}")).ok(),
                expected.as_ref().map(|c| format!("{c:?}")).ok(),
                "the row reader and mysql_common's BinlogRow disagree (errors: {:?} / {:?})",
                changes.as_ref().err(),
                expected.as_ref().err()
            );
        }
        changes
    }

    /// Whether this layout can read `rows` at all.
    fn check_event(&self, rows: &RowsEventData<'_>) -> Result<(), String> {
        if matches!(rows, RowsEventData::PartialUpdateRowsEvent(_)) {
            return Err(
                "partial JSON updates (MySQL's PARTIAL_UPDATE_ROWS_EVENT) are not read".into(),
            );
        }
        if rows.num_columns() != self.columns.len() as u64 {
            return Err(format!(
                "the rows event has {} columns, its table map {}",
                rows.num_columns(),
                self.columns.len()
            ));
        }
        Ok(())
    }

    fn read_rows(&self, rows: &RowsEventData<'_>) -> Result<Vec<RowChange>, String> {
        self.check_event(rows)?;
        // Which columns each image holds (all of them with binlog_row_image=FULL), once per event.
        let before: Option<Vec<bool>> = rows
            .columns_before_image()
            .map(|b| b.iter().by_vals().collect());
        let after: Option<Vec<bool>> = rows
            .columns_after_image()
            .map(|b| b.iter().by_vals().collect());
        let mut data = rows.rows_data();
        let mut out = Vec::new();
        while !data.is_empty() {
            let old = match &before {
                Some(present) => Some(self.read_image(&mut data, present)?),
                None => None,
            };
            let new = match &after {
                Some(present) => Some(self.read_image(&mut data, present)?),
                None => None,
            };
            let old_key = old.as_ref().map(|image| self.key_in(image)).transpose()?;
            let new = new
                .as_ref()
                .map(|image| self.changed_row_in(image))
                .transpose()?;
            push_row_change(&mut out, old_key, new)?;
        }
        Ok(out)
    }

    /// Reads one row image from the front of `data` (advancing it): a bitmap of NULLs over the
    /// columns `present` in the image, then the non-NULL values in column order.
    fn read_image(&self, data: &mut &[u8], present: &[bool]) -> Result<Wanted, String> {
        let in_image = present.iter().filter(|set| **set).count();
        let (nulls, mut rest) = data
            .split_at_checked(in_image.div_ceil(8))
            .ok_or("a row image is cut short")?;
        let mut wanted = Wanted::default();
        let mut k = 0;
        for (i, spec) in self.columns.iter().enumerate() {
            if !present.get(i).is_some_and(|set| *set) {
                continue;
            }
            let null = nulls.get(k / 8).is_none_or(|b| b >> (k % 8) & 1 == 1);
            k += 1;
            let value = if null {
                Value::NULL
            } else {
                let mut buf = ParseBuf(rest);
                let value = buf
                    .parse::<BinlogValue<'_>>((spec.ty, &spec.meta[..], spec.unsigned, false))
                    .map_err(|e| format!("cannot decode column {i} of a row: {e}"))?;
                let used = rest.len() - buf.0.len();
                rest = &rest[used..];
                match value {
                    BinlogValue::Value(v) => v,
                    // JSON and the like: never one of the wanted columns (all integers or the id).
                    _ => continue,
                }
            };
            let slot = if i == self.id {
                &mut wanted.id
            } else if i == self.time_next {
                &mut wanted.time_next
            } else if i == self.time_acked {
                &mut wanted.time_acked
            } else if Some(i) == self.priority {
                &mut wanted.priority
            } else {
                continue;
            };
            *slot = Some(value);
        }
        *data = rest;
        Ok(wanted)
    }

    fn key_in(&self, image: &Wanted) -> Result<Box<[u8]>, String> {
        let value = wanted_value(&image.id, "id")?;
        key_of(value, self.codec).ok_or_else(|| format!("cannot make a key of id {value:?}"))
    }

    fn changed_row_in(&self, image: &Wanted) -> Result<ChangedRow, String> {
        let int = |v: &Option<Value>, what: &str| -> Result<Option<i64>, String> {
            let v = wanted_value(v, what)?;
            int_of(v).ok_or_else(|| format!("{what} is not an integer: {v:?}"))
        };
        Ok(ChangedRow {
            key: self.key_in(image)?,
            priority: match self.priority {
                Some(_) => int(&image.priority, "priority")?,
                None => None,
            },
            time_next: int(&image.time_next, "time_next")?,
            time_acked: int(&image.time_acked, "time_acked")?,
        })
    }

    /// What [`Layout::changes`] must say, the slow way: through mysql_common's `BinlogRow`.
    #[cfg(debug_assertions)]
    fn changes_via_binlog_row(
        &self,
        rows: &RowsEventData<'_>,
        tme: &TableMapEvent<'_>,
    ) -> Result<Vec<RowChange>, String> {
        self.check_event(rows)?;
        let before_cols = rows.columns_before_image();
        let after_cols = rows.columns_after_image();
        let before = |i: usize| image_index(before_cols.map(|b| b.iter().by_vals()), i);
        let after = |i: usize| image_index(after_cols.map(|b| b.iter().by_vals()), i);
        let mut out = Vec::new();
        for row in rows.rows(tme) {
            let (old, new) = row.map_err(|e| format!("cannot decode a row: {e}"))?;
            let old_key = old
                .as_ref()
                .map(|image| self.key(image, &before))
                .transpose()?;
            let new = new
                .as_ref()
                .map(|image| self.changed_row(image, &after))
                .transpose()?;
            push_row_change(&mut out, old_key, new)?;
        }
        Ok(out)
    }

    #[cfg(debug_assertions)]
    fn key(
        &self,
        image: &BinlogRow,
        index: &dyn Fn(usize) -> Option<usize>,
    ) -> Result<Box<[u8]>, String> {
        let value = value_at(image, index, self.id, "id")?;
        key_of(value, self.codec).ok_or_else(|| format!("cannot make a key of id {value:?}"))
    }

    #[cfg(debug_assertions)]
    fn changed_row(
        &self,
        image: &BinlogRow,
        index: &dyn Fn(usize) -> Option<usize>,
    ) -> Result<ChangedRow, String> {
        let int = |col: usize, what: &str| -> Result<Option<i64>, String> {
            let v = value_at(image, index, col, what)?;
            int_of(v).ok_or_else(|| format!("{what} is not an integer: {v:?}"))
        };
        Ok(ChangedRow {
            key: self.key(image, index)?,
            priority: match self.priority {
                Some(col) => int(col, "priority")?,
                None => None,
            },
            time_next: int(self.time_next, "time_next")?,
            time_acked: int(self.time_acked, "time_acked")?,
        })
    }
}

/// The column names a table map carries (empty without `binlog_row_metadata=FULL`).
fn column_names(tme: &TableMapEvent<'_>) -> Result<Vec<String>, String> {
    let meta = OptionalMetaExtractor::new(tme.iter_optional_meta())
        .map_err(|e| format!("cannot read the table map's metadata: {e}"))?;
    meta.iter_column_name()
        .map(|n| {
            n.map(|n| n.name().into_owned())
                .map_err(|e| format!("cannot read the table map's column names: {e}"))
        })
        .collect()
}

/// MySQL compares column names case-insensitively (see `messaging::table`).
fn same_name(a: &str, b: &str) -> bool {
    a == b || a.to_lowercase() == b.to_lowercase()
}

/// The position of table column `col` within a row image that holds only the columns set in
/// `present` (all of them with `binlog_row_image=FULL`), or `None` if it is not in the image.
#[cfg(any(debug_assertions, test))]
fn image_index(present: Option<impl Iterator<Item = bool>>, col: usize) -> Option<usize> {
    let mut index = 0;
    for (i, set) in present?.enumerate() {
        if i == col {
            return set.then_some(index);
        }
        if set {
            index += 1;
        }
    }
    None
}

/// What one row of a rows event changes, from its before image's key and its after image: an
/// insert or update is the after image (preceded by a delete when the update changed the id), a
/// delete the old key.
fn push_row_change(
    out: &mut Vec<RowChange>,
    old_key: Option<Box<[u8]>>,
    new: Option<ChangedRow>,
) -> Result<(), String> {
    match new {
        Some(changed) => {
            if let Some(k) = old_key.filter(|k| *k != changed.key) {
                out.push(RowChange::Deleted(k));
            }
            out.push(RowChange::Changed(changed));
        }
        None => match old_key {
            Some(k) => out.push(RowChange::Deleted(k)),
            None => return Err("a row with neither image".to_string()),
        },
    }
    Ok(())
}

/// A wanted column's value, or why the image cannot be used.
fn wanted_value<'v>(value: &'v Option<Value>, what: &str) -> Result<&'v Value, String> {
    value.as_ref().ok_or_else(|| {
        format!("the row image lacks {what} (is binlog_row_image FULL in every session?)")
    })
}

/// How each of the table map's `count` columns is laid out in row images. Signedness comes from
/// the optional metadata, one flag per numeric column in order (as mysql_common reads it).
fn column_specs(tme: &TableMapEvent<'_>, count: usize) -> Result<Vec<ColumnSpec>, String> {
    let meta = OptionalMetaExtractor::new(tme.iter_optional_meta())
        .map_err(|e| format!("cannot read the table map's metadata: {e}"))?;
    let mut signedness = meta.iter_signedness();
    (0..count)
        .map(|i| {
            let ty = match tme.get_column_type(i) {
                Ok(Some(ty)) => ty,
                _ => return Err(format!("the table map has no type for column {i}")),
            };
            let unsigned = ty
                .is_numeric_type()
                .then(|| signedness.next())
                .flatten()
                .unwrap_or_default();
            Ok(ColumnSpec {
                ty,
                meta: tme.get_column_metadata(i).unwrap_or(&[]).into(),
                unsigned,
            })
        })
        .collect()
}

#[cfg(debug_assertions)]
fn value_at<'r>(
    image: &'r BinlogRow,
    index: &dyn Fn(usize) -> Option<usize>,
    col: usize,
    what: &str,
) -> Result<&'r Value, String> {
    let at = index(col).ok_or_else(|| {
        format!("the row image lacks {what} (is binlog_row_image FULL in every session?)")
    })?;
    match image.as_ref(at) {
        Some(BinlogValue::Value(v)) => Ok(v),
        Some(other) => Err(format!("{what} has an unexpected value {other:?}")),
        None => Err(format!("the row image lacks {what}")),
    }
}

/// How to key an id of kind `kind` that the binlog carries as `ty` (with `meta`, its table-map
/// metadata).
fn codec_for(kind: &IdKind, ty: ColumnType, meta: &[u8]) -> Result<KeyCodec, String> {
    use ColumnType::*;
    let unsupported = || {
        Err(format!(
            "an id carried in the binlog as {ty:?} cannot be keyed like the poller does"
        ))
    };
    match kind {
        IdKind::Numeric => match ty {
            MYSQL_TYPE_TINY
            | MYSQL_TYPE_SHORT
            | MYSQL_TYPE_INT24
            | MYSQL_TYPE_LONG
            | MYSQL_TYPE_LONGLONG
            | MYSQL_TYPE_NEWDECIMAL => Ok(KeyCodec::Decimal),
            MYSQL_TYPE_YEAR => Ok(KeyCodec::Year),
            _ => unsupported(),
        },
        IdKind::Text { .. } => match ty {
            MYSQL_TYPE_VARCHAR
            | MYSQL_TYPE_VAR_STRING
            | MYSQL_TYPE_STRING
            | MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB
            | MYSQL_TYPE_MEDIUM_BLOB
            | MYSQL_TYPE_LONG_BLOB => Ok(KeyCodec::Hex { pad_to: None }),
            _ => unsupported(),
        },
        IdKind::Timestamp => match (ty, meta.first()) {
            (MYSQL_TYPE_TIMESTAMP2, Some(&fsp)) if fsp <= 6 => {
                Ok(KeyCodec::Timestamp { fsp: fsp as usize })
            }
            _ => unsupported(),
        },
        IdKind::Binary => match ty {
            MYSQL_TYPE_VARCHAR
            | MYSQL_TYPE_VAR_STRING
            | MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB
            | MYSQL_TYPE_MEDIUM_BLOB
            | MYSQL_TYPE_LONG_BLOB => Ok(KeyCodec::Hex { pad_to: None }),
            MYSQL_TYPE_STRING => match fixed_string_length(meta) {
                Some(len) => Ok(KeyCodec::Hex { pad_to: Some(len) }),
                None => Err("the table map has no length for the binary id".to_string()),
            },
            _ => unsupported(),
        },
    }
}

/// The byte length of a `MYSQL_TYPE_STRING` column from its two metadata bytes (the same rule
/// the server uses; lengths above 255 borrow two bits of the real-type byte).
fn fixed_string_length(meta: &[u8]) -> Option<usize> {
    let (&b0, &b1) = (meta.first()?, meta.get(1)?);
    let (b0, b1) = (b0 as usize, b1 as usize);
    Some(if b0 & 0x30 != 0x30 {
        b1 | (((b0 & 0x30) ^ 0x30) << 4)
    } else {
        b1
    })
}

/// The key of an id value, as `MessageTable::key_sql` would read it; `None` if the value does
/// not fit the codec.
fn key_of(value: &Value, codec: KeyCodec) -> Option<Box<[u8]>> {
    let text = match (codec, value) {
        (KeyCodec::Decimal, Value::Int(i)) => i.to_string(),
        (KeyCodec::Decimal, Value::UInt(u)) => u.to_string(),
        (KeyCodec::Decimal, Value::Bytes(b)) => normalize_decimal(std::str::from_utf8(b).ok()?)?,
        (KeyCodec::Year, Value::Bytes(b)) => year_text(std::str::from_utf8(b).ok()?)?,
        (KeyCodec::Year, Value::Int(y)) => year_text(&y.to_string())?,
        (KeyCodec::Timestamp { fsp }, Value::Bytes(b)) => {
            timestamp_text(std::str::from_utf8(b).ok()?, fsp)?
        }
        (KeyCodec::Hex { pad_to }, Value::Bytes(b)) => {
            let len = pad_to.map_or(b.len(), |p| p.max(b.len()));
            return Some(upper_hex(b, len).into_bytes().into_boxed_slice());
        }
        _ => return None,
    };
    Some(text.into_bytes().into_boxed_slice())
}

/// A `timestamp(fsp)` as `UNIX_TIMESTAMP()` prints it (`1767323045.120`), from mysql_common's
/// text of the binlog value: seconds, then `.` and six digits of microseconds unless they are
/// zero. The seconds are an unsigned 32-bit number that mysql_common prints as signed.
fn timestamp_text(text: &str, fsp: usize) -> Option<String> {
    let (sec, usec) = text.split_once('.').unwrap_or((text, "000000"));
    let sec: i64 = sec.parse().ok()?;
    let sec = if sec < 0 { sec + (1 << 32) } else { sec };
    if !(0..1 << 32).contains(&sec) || usec.len() != 6 || !usec.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some(match fsp {
        0 => sec.to_string(),
        _ => format!("{sec}.{}", &usec[..fsp]),
    })
}

/// Upper-case hex of `bytes`, followed by `00` pairs up to `len` bytes.
fn upper_hex(bytes: &[u8], len: usize) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(len * 2);
    for i in 0..len {
        let b = bytes.get(i).copied().unwrap_or(0);
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xF) as usize] as char);
    }
    out
}

/// A DECIMAL's text as the server prints it: no leading zeros in the integer part (but one
/// zero before the point), the scale's digits kept, no minus on zero. mysql_common prints
/// whole groups of nine digits, zeros included, for wide columns.
pub(crate) fn normalize_decimal(text: &str) -> Option<String> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let zero = int == "0" && frac.bytes().all(|b| b == b'0');
    let mut out = String::with_capacity(text.len());
    if negative && !zero {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    Some(out)
}

/// mysql_common reads a YEAR as `1900 + stored byte`; the stored 0 is the zero year, which the
/// server prints as `0000` (1900 itself is outside YEAR's range).
pub(crate) fn year_text(text: &str) -> Option<String> {
    let year: u32 = text.parse().ok()?;
    Some(if year == 1900 || year == 0 {
        "0000".to_string()
    } else {
        format!("{year:04}")
    })
}

/// A time or priority column's value: `Some(None)` for NULL, `None` if it is not an integer.
fn int_of(value: &Value) -> Option<Option<i64>> {
    match value {
        Value::NULL => Some(None),
        Value::Int(i) => Some(Some(*i)),
        // An unsigned bigint above i64::MAX is a time beyond 2262: as good as "never".
        Value::UInt(u) => Some(Some(i64::try_from(*u).unwrap_or(i64::MAX))),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn integer_keys_are_decimal_text() {
        let k = |v: Value| key_of(&v, KeyCodec::Decimal).map(|k| k.to_vec());
        assert_eq!(k(Value::Int(42)).as_deref(), Some(&b"42"[..]));
        assert_eq!(k(Value::Int(-7)).as_deref(), Some(&b"-7"[..]));
        assert_eq!(k(Value::Int(0)).as_deref(), Some(&b"0"[..]));
        assert_eq!(
            k(Value::UInt(u64::MAX)).as_deref(),
            Some(&b"18446744073709551615"[..])
        );
        assert_eq!(
            k(Value::Int(i64::MIN)).as_deref(),
            Some(&b"-9223372036854775808"[..])
        );
        assert_eq!(k(Value::NULL), None);
        assert_eq!(k(Value::Float(1.0)), None);
    }

    #[test]
    fn decimal_keys_keep_their_scale() {
        let k = |s: &str| {
            key_of(&Value::Bytes(s.as_bytes().to_vec()), KeyCodec::Decimal)
                .map(|k| String::from_utf8(k.to_vec()).unwrap_or_default())
        };
        assert_eq!(k("5.00").as_deref(), Some("5.00"));
        assert_eq!(k("-0.50").as_deref(), Some("-0.50"));
        assert_eq!(k("0000000000000000005").as_deref(), Some("5"));
        assert_eq!(k("000000000123.450").as_deref(), Some("123.450"));
        assert_eq!(k("0.00").as_deref(), Some("0.00"));
        assert_eq!(k("-0.00").as_deref(), Some("0.00"));
        assert_eq!(k("-0").as_deref(), Some("0"));
        assert_eq!(k("00.10").as_deref(), Some("0.10"));
        assert_eq!(k(".5").as_deref(), Some("0.5"));
        assert_eq!(
            k("123456789012345678901234567890").as_deref(),
            Some("123456789012345678901234567890")
        );
        for bad in ["", "-", ".", "1e5", "1.2.3", "abc", " 1"] {
            assert_eq!(k(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn year_keys() {
        let k = |s: &str| {
            key_of(&Value::Bytes(s.as_bytes().to_vec()), KeyCodec::Year)
                .map(|k| String::from_utf8(k.to_vec()).unwrap_or_default())
        };
        assert_eq!(k("2024").as_deref(), Some("2024"));
        assert_eq!(k("1901").as_deref(), Some("1901"));
        assert_eq!(k("1900").as_deref(), Some("0000"));
        assert_eq!(k("x"), None);
    }

    #[test]
    fn timestamp_keys_are_what_unix_timestamp_prints() {
        let k = |s: &str, fsp| {
            key_of(
                &Value::Bytes(s.as_bytes().to_vec()),
                KeyCodec::Timestamp { fsp },
            )
            .map(|k| String::from_utf8(k.to_vec()).unwrap_or_default())
        };
        // As mysql_common prints TIMESTAMP2 values, against UNIX_TIMESTAMP() on MariaDB 10.11.
        assert_eq!(k("1796122806", 0).as_deref(), Some("1796122806"));
        assert_eq!(k("1796122806.733000", 3).as_deref(), Some("1796122806.733"));
        assert_eq!(k("1796122806", 3).as_deref(), Some("1796122806.000"));
        assert_eq!(
            k("1796122806.733922", 6).as_deref(),
            Some("1796122806.733922")
        );
        assert_eq!(k("0", 0).as_deref(), Some("0"));
        assert_eq!(k("0", 6).as_deref(), Some("0.000000"));
        // Past 2038 the unsigned seconds come out negative.
        assert_eq!(k("-2147483648", 0).as_deref(), Some("2147483648"));
        for bad in ["", "x", "1.5", "1.1234567", "1.12345x"] {
            assert_eq!(k(bad, 6), None, "{bad:?}");
        }
    }

    #[test]
    fn hex_keys_are_upper_case_and_padded() {
        let k = |b: &[u8], pad_to| {
            key_of(&Value::Bytes(b.to_vec()), KeyCodec::Hex { pad_to })
                .map(|k| String::from_utf8(k.to_vec()).unwrap_or_default())
        };
        assert_eq!(k(b"hello", None).as_deref(), Some("68656C6C6F"));
        assert_eq!(k(b"", None).as_deref(), Some(""));
        assert_eq!(k(&[0x00, 0xff, 0xab], None).as_deref(), Some("00FFAB"));
        // BINARY(6) holding 'ab': the binlog drops the zero padding, HEX() shows it.
        assert_eq!(k(b"ab", Some(6)).as_deref(), Some("616200000000"));
        // Never truncated.
        assert_eq!(k(b"abc", Some(2)).as_deref(), Some("616263"));
        // 'hé' in latin1 and utf8mb4: the stored bytes, whatever the charset.
        assert_eq!(k(&[0x68, 0xe9], None).as_deref(), Some("68E9"));
        assert_eq!(k("hé".as_bytes(), None).as_deref(), Some("68C3A9"));
        assert_eq!(key_of(&Value::Int(1), KeyCodec::Hex { pad_to: None }), None);
    }

    #[test]
    fn fixed_string_lengths() {
        assert_eq!(fixed_string_length(&[254, 16]), Some(16));
        assert_eq!(fixed_string_length(&[254, 6]), Some(6));
        // CHAR(255) in utf8mb4 is 1020 bytes: 0x3FC = high bits folded into the type byte.
        assert_eq!(fixed_string_length(&[0xCE, 0xFC]), Some(1020));
        assert_eq!(fixed_string_length(&[254]), None);
    }

    #[test]
    fn codecs_by_kind_and_binlog_type() {
        use ColumnType::*;
        let text = IdKind::Text {
            charset: "utf8mb4".into(),
        };
        assert_eq!(
            codec_for(&IdKind::Numeric, MYSQL_TYPE_LONGLONG, &[]),
            Ok(KeyCodec::Decimal)
        );
        assert_eq!(
            codec_for(&IdKind::Numeric, MYSQL_TYPE_NEWDECIMAL, &[20, 2]),
            Ok(KeyCodec::Decimal)
        );
        assert_eq!(
            codec_for(&IdKind::Numeric, MYSQL_TYPE_YEAR, &[]),
            Ok(KeyCodec::Year)
        );
        assert!(codec_for(&IdKind::Numeric, MYSQL_TYPE_DOUBLE, &[8]).is_err());
        assert_eq!(
            codec_for(&text, MYSQL_TYPE_VARCHAR, &[40, 0]),
            Ok(KeyCodec::Hex { pad_to: None })
        );
        assert_eq!(
            codec_for(&text, MYSQL_TYPE_STRING, &[254, 20]),
            Ok(KeyCodec::Hex { pad_to: None })
        );
        assert!(codec_for(&text, MYSQL_TYPE_DATETIME2, &[0]).is_err());
        assert!(codec_for(&text, MYSQL_TYPE_ENUM, &[247, 1]).is_err());
        assert_eq!(
            codec_for(&IdKind::Binary, MYSQL_TYPE_STRING, &[254, 16]),
            Ok(KeyCodec::Hex { pad_to: Some(16) })
        );
        assert_eq!(
            codec_for(&IdKind::Binary, MYSQL_TYPE_BLOB, &[2]),
            Ok(KeyCodec::Hex { pad_to: None })
        );
    }

    #[test]
    fn image_positions() {
        let all = [true, true, true, true];
        assert_eq!(image_index(Some(all.iter().copied()), 2), Some(2));
        let some = [true, false, true, true];
        assert_eq!(image_index(Some(some.iter().copied()), 1), None);
        assert_eq!(image_index(Some(some.iter().copied()), 2), Some(1));
        assert_eq!(image_index(Some(some.iter().copied()), 3), Some(2));
        assert_eq!(image_index(Some(some.iter().copied()), 9), None);
        assert_eq!(image_index(None::<std::iter::Empty<bool>>, 0), None);
    }

    #[test]
    fn time_values() {
        assert_eq!(int_of(&Value::NULL), Some(None));
        assert_eq!(int_of(&Value::Int(-3)), Some(Some(-3)));
        assert_eq!(int_of(&Value::UInt(5)), Some(Some(5)));
        assert_eq!(int_of(&Value::UInt(u64::MAX)), Some(Some(i64::MAX)));
        assert_eq!(int_of(&Value::Bytes(b"1".to_vec())), None);
    }
}
