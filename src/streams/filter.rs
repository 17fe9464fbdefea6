//! A group's `WHERE` filter evaluated over an event's row values (docs/STREAMS.md §2), with SQL's
//! three-valued logic: an event is sent when the filter is TRUE; FALSE and UNKNOWN (a NULL in a
//! comparison) skip it, and a skipped event counts as done.
//!
//! Comparisons follow the server where it matters for topics and ids: numeric columns compare as
//! numbers (a string literal is read as a number); other columns compare as text, ignoring
//! letter case and trailing spaces as the default collations (`*_general_ci`, PAD SPACE) do.
//! Temporal columns compare by their text (`created_at = '2026-12-01 10:00:00'`); `TIMESTAMP`
//! columns, whose text depends on the session's time zone, compare as UNKNOWN.

use mysql_common::constants::ColumnType;

use super::encode::{cell, Cell};
use super::reader::Event;
use crate::sql::{Filter, Literal};

/// What a filter needs of a table: each column's ENUM/SET members, by lower-case name.
pub trait Labels {
    fn labels(&self, column: &str) -> Option<&[Vec<u8>]>;
}

/// Whether `event` passes `filter` (TRUE). A column the event does not have is UNKNOWN.
pub fn matches(filter: &Filter, event: &Event, labels: &dyn Labels) -> bool {
    eval(filter, event, labels) == Some(true)
}

fn eval(filter: &Filter, event: &Event, labels: &dyn Labels) -> Option<bool> {
    match filter {
        Filter::And(a, b) => match (eval(a, event, labels), eval(b, event, labels)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Filter::Or(a, b) => match (eval(a, event, labels), eval(b, event, labels)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
        Filter::Not(a) => eval(a, event, labels).map(|v| !v),
        Filter::IsNull { column, negated } => {
            let (value, _) = column_value(event, column, labels)?;
            Some((value == Value::Null) != *negated)
        }
        Filter::Compare {
            column,
            negated,
            value,
        } => {
            let (v, numeric) = column_value(event, column, labels)?;
            equal(&v, numeric, value).map(|eq| eq != *negated)
        }
        Filter::In {
            column,
            negated,
            values,
        } => {
            let (v, numeric) = column_value(event, column, labels)?;
            // x IN (a, b) is x = a OR x = b; NOT IN its negation.
            let mut result = Some(false);
            for literal in values {
                match equal(&v, numeric, literal) {
                    Some(true) => {
                        result = Some(true);
                        break;
                    }
                    None => result = None,
                    Some(false) => {}
                }
            }
            result.map(|r| r != *negated)
        }
    }
}

#[derive(Debug, PartialEq)]
enum Value {
    Null,
    Text(Vec<u8>),
}

/// The column's value as text, and whether the column is numeric. `None`: the event has no
/// such column, or its value has no session-independent text (TIMESTAMP).
fn column_value(event: &Event, column: &str, labels: &dyn Labels) -> Option<(Value, bool)> {
    let lower = column.to_lowercase();
    let index = event
        .columns
        .iter()
        .position(|c| c.name.to_lowercase() == lower)?;
    let spec = event.columns.get(index)?;
    let value = event.values.get(index)?;
    let numeric = is_numeric(spec.ty);
    match cell(value, spec, labels.labels(&lower)).ok()? {
        Cell::Null => Some((Value::Null, numeric)),
        Cell::Text(t) => Some((Value::Text(t), numeric)),
        Cell::Timestamp(_) => None,
    }
}

fn is_numeric(ty: ColumnType) -> bool {
    use ColumnType::*;
    matches!(
        ty,
        MYSQL_TYPE_TINY
            | MYSQL_TYPE_SHORT
            | MYSQL_TYPE_INT24
            | MYSQL_TYPE_LONG
            | MYSQL_TYPE_LONGLONG
            | MYSQL_TYPE_FLOAT
            | MYSQL_TYPE_DOUBLE
            | MYSQL_TYPE_DECIMAL
            | MYSQL_TYPE_NEWDECIMAL
            | MYSQL_TYPE_YEAR
    )
}

/// `value = literal`, UNKNOWN when either is NULL.
fn equal(value: &Value, numeric: bool, literal: &Literal) -> Option<bool> {
    let Value::Text(text) = value else {
        return None;
    };
    match literal {
        Literal::Null => None,
        Literal::Number(n) => Some(same_number(text, n.as_bytes())),
        Literal::String(s) if numeric => Some(same_number(text, s)),
        Literal::String(s) => Some(fold(text) == fold(s)),
    }
}

/// Two numbers' texts denote the same number: exactly when both are integers, else as doubles
/// (MySQL compares a number with a string as doubles too). Text that is not a number reads as
/// 0, as MySQL reads it.
fn same_number(a: &[u8], b: &[u8]) -> bool {
    let as_str = |x: &[u8]| String::from_utf8_lossy(x).trim().to_owned();
    let (a, b) = (as_str(a), as_str(b));
    if let (Ok(x), Ok(y)) = (a.parse::<i128>(), b.parse::<i128>()) {
        return x == y;
    }
    let num = |s: &str| s.parse::<f64>().unwrap_or(0.0);
    num(&a) == num(&b)
}

/// Text as the default collations compare it: case folded, trailing spaces ignored.
fn fold(text: &[u8]) -> String {
    String::from_utf8_lossy(text)
        .trim_end_matches(' ')
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::BinlogPosition;
    use crate::streams::reader::ColumnSpec;
    use mysql_common::Value as V;

    struct NoLabels;
    impl Labels for NoLabels {
        fn labels(&self, _: &str) -> Option<&[Vec<u8>]> {
            None
        }
    }

    fn event(topic: Option<&str>, n: i64) -> Event {
        let col = |name: &str, ty| ColumnSpec {
            name: name.into(),
            ty,
            meta: Box::new([]),
            unsigned: false,
        };
        Event {
            id: 1,
            domain: 0,
            tx_start: BinlogPosition {
                file: "f".into(),
                pos: 4,
            },
            timestamp: 0,
            columns: vec![
                col("Topic", ColumnType::MYSQL_TYPE_VARCHAR),
                col("n", ColumnType::MYSQL_TYPE_LONG),
            ]
            .into(),
            values: vec![
                topic.map_or(V::NULL, |t| V::Bytes(t.as_bytes().to_vec())),
                V::Int(n),
            ],
        }
    }

    fn filter(sql: &str) -> Filter {
        match crate::sql::parse_stream_statement(
            format!("STREAM * FROM t GROUP 'g' WHERE {sql}").as_bytes(),
            crate::sql::Quoting::DEFAULT,
        ) {
            Some(Ok(crate::sql::StreamStatement::Stream {
                filter: Some(f), ..
            })) => f,
            other => panic!("{other:?}"),
        }
    }

    fn check(sql: &str, e: &Event) -> bool {
        matches(&filter(sql), e, &NoLabels)
    }

    #[test]
    fn topics_and_numbers() {
        let e = event(Some("order.created"), 5);
        assert!(check("topic = 'order.created'", &e));
        assert!(check("TOPIC = 'Order.Created '", &e));
        assert!(!check("topic = 'order.paid'", &e));
        assert!(check("topic <> 'order.paid'", &e));
        assert!(check("topic IN ('a', 'order.created')", &e));
        assert!(!check("topic NOT IN ('a', 'order.created')", &e));
        assert!(check("n = 5 AND n = '5.0'", &e));
        assert!(check("n = 1 OR NOT n = 1", &e));
        assert!(check("topic IS NOT NULL", &e));
        assert!(!check("missing = 1", &e));
    }

    #[test]
    fn nulls_are_unknown() {
        let e = event(None, 5);
        assert!(check("topic IS NULL", &e));
        assert!(!check("topic = 'x'", &e));
        assert!(!check("topic <> 'x'", &e));
        assert!(!check("NOT topic = 'x'", &e));
        assert!(check("topic = 'x' OR n = 5", &e));
        assert!(!check("n NOT IN (1, NULL)", &e));
        assert!(check("n IN (5, NULL)", &e));
        assert!(!check("n = NULL", &e));
    }
}
