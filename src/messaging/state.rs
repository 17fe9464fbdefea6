//! The state of a message row — MESSAGING.md §2, the one definition used everywhere.
//!
//! - **Acked**: `time_acked` is not NULL and not 0. (Vitess treats 0 as acked-long-ago, purges such rows at
//!   once and can never ack them; here 0 means "not acked".)
//! - **Due** (for an unacked row): `time_next` is NULL, 0, or `<= now`. (Vitess never polls a NULL
//!   `time_next` and so loses such rows.)
//! - `epoch` and `priority` NULL count as 0.
//!
//! Each rule exists twice, as a Rust predicate for rows the proxy already holds (binlog events, cache) and as a
//! SQL fragment for the poller, the claim, ack and purge. The two forms are kept side by side here, and a test
//! checks them against one hand-written truth table so they cannot drift apart.

use std::time::{SystemTime, UNIX_EPOCH};

/// SQL for "the row is not acked": the negation of [`is_acked`].
pub const UNACKED_SQL: &str = "(`time_acked` IS NULL OR `time_acked` = 0)";

/// The `time_next` of a dead message (MESSAGING.md §9, `vt_max_attempts`): the bigint maximum,
/// never due by [`is_due`], and never purged (it stays unacked).
pub const DEAD_TIME_NEXT: i64 = i64::MAX;

/// SQL for "the row is dead" (for unacked rows).
pub const DEAD_SQL: &str = "`time_next` = 9223372036854775807";

/// SQL for "the row is not dead": `NACK` and `EXTEND` leave dead rows alone (only `REDRIVE`
/// brings them back).
pub const NOT_DEAD_SQL: &str = "(`time_next` IS NULL OR `time_next` <> 9223372036854775807)";

/// Whether a row with this `time_acked` is acked.
pub fn is_acked(time_acked: Option<i64>) -> bool {
    !matches!(time_acked, None | Some(0))
}

/// Whether a row with this `time_next` is due at `now_ns` (meaningful for unacked rows).
pub fn is_due(time_next: Option<i64>, now_ns: i64) -> bool {
    match time_next {
        None | Some(0) => true,
        Some(t) => t <= now_ns,
    }
}

/// SQL for [`is_due`] at `now_ns`.
///
/// `time_next = 0` needs no term of its own: `now_ns` is the current time, always positive (see [`now_ns`]),
/// so `0 <= now` holds. Keeping the expression to a NULL test and one range lets an index on `time_next` serve
/// it.
pub fn due_sql(now_ns: i64) -> String {
    format!("(`time_next` IS NULL OR `time_next` <= {now_ns})")
}

#[cfg(test)]
/// Whether a row may be sent now: unacked and due. This is what the poller selects and the claim re-checks.
pub fn is_ready(time_acked: Option<i64>, time_next: Option<i64>, now_ns: i64) -> bool {
    !is_acked(time_acked) && is_due(time_next, now_ns)
}

/// SQL for [`is_ready`] at `now_ns`.
pub fn ready_sql(now_ns: i64) -> String {
    format!("({UNACKED_SQL} AND {})", due_sql(now_ns))
}

#[cfg(test)]
/// Whether the purge deletes a row with this `time_acked`, given `cutoff_ns = now - purge_after`: acked, and
/// acked before the cutoff. A negative `time_acked` is acked (not NULL, not 0) at a time before 1970, older
/// than any cutoff.
pub fn is_purgeable(time_acked: Option<i64>, cutoff_ns: i64) -> bool {
    match time_acked {
        None | Some(0) => false,
        Some(t) => t < 0 || t < cutoff_ns,
    }
}

/// SQL for [`is_purgeable`]. Written as two ranges rather than `time_acked <> 0 AND time_acked < cutoff` so an
/// index on `time_acked` can serve it; it never matches NULL or 0.
pub fn purgeable_sql(cutoff_ns: i64) -> String {
    format!("((`time_acked` > 0 AND `time_acked` < {cutoff_ns}) OR `time_acked` < 0)")
}

#[cfg(test)]
/// `epoch` NULL counts as 0: the number of times the row has been sent.
pub fn epoch_or_zero(epoch: Option<i64>) -> i64 {
    epoch.unwrap_or(0)
}

#[cfg(test)]
/// `priority` NULL counts as 0 (lower is sent first).
pub fn priority_or_zero(priority: Option<i64>) -> i64 {
    priority.unwrap_or(0)
}

/// The current time in Unix nanoseconds.
///
/// Never below 1: a clock set before 1970 is broken anyway, and keeping "now" positive keeps [`due_sql`]
/// equal to [`is_due`] (a `time_next` of 0 is always due). Saturates in 2262.
pub fn now_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX).max(1),
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluates the SQL fragments this module writes, with SQL's three-valued logic, so the test needs no
    /// database. It understands exactly the shapes above: `(a OR b)`, `(a AND b)`, `` `col` IS NULL ``,
    /// `` `col` <op> <int> `` — and panics on anything else, so a change to the SQL is noticed here.
    fn eval(sql: &str, row: &[(&str, Option<i64>)]) -> Option<bool> {
        let sql = sql.trim();
        if let Some(inner) = strip_parens(sql) {
            if let Some((a, b)) = split_top(inner, " OR ") {
                let (a, b) = (eval(a, row), eval(b, row));
                return match (a, b) {
                    (Some(true), _) | (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                };
            }
            if let Some((a, b)) = split_top(inner, " AND ") {
                let (a, b) = (eval(a, row), eval(b, row));
                return match (a, b) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                };
            }
            return eval(inner, row);
        }
        let (col, rest) = sql
            .strip_prefix('`')
            .and_then(|s| s.split_once('`'))
            .unwrap_or_else(|| panic!("unexpected SQL: {sql}"));
        let value = row
            .iter()
            .find(|(name, _)| *name == col)
            .unwrap_or_else(|| panic!("no column {col}"))
            .1;
        let rest = rest.trim();
        if rest == "IS NULL" {
            return Some(value.is_none());
        }
        let (op, num) = rest
            .split_once(' ')
            .unwrap_or_else(|| panic!("unexpected SQL: {sql}"));
        let num: i64 = num
            .parse()
            .unwrap_or_else(|_| panic!("unexpected SQL: {sql}"));
        let v = value?;
        Some(match op {
            "=" => v == num,
            "<" => v < num,
            "<=" => v <= num,
            ">" => v > num,
            _ => panic!("unexpected operator in {sql}"),
        })
    }

    /// `(x)` → `x` when the outer parentheses enclose the whole text.
    fn strip_parens(s: &str) -> Option<&str> {
        let inner = s.strip_prefix('(')?.strip_suffix(')')?;
        let mut depth = 0i32;
        for c in inner.chars() {
            depth += match c {
                '(' => 1,
                ')' => -1,
                _ => 0,
            };
            if depth < 0 {
                return None;
            }
        }
        Some(inner)
    }

    /// Splits at the first `sep` outside parentheses.
    fn split_top<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
        let mut depth = 0i32;
        for (i, c) in s.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ if depth == 0 && s[i..].starts_with(sep) => {
                    return Some((&s[..i], &s[i + sep.len()..]));
                }
                _ => {}
            }
        }
        None
    }

    /// A WHERE clause selects a row only when it is TRUE (not NULL).
    fn selects(sql: &str, row: &[(&str, Option<i64>)]) -> bool {
        eval(sql, row) == Some(true)
    }

    const NOW: i64 = 1_732_950_000_000_000_000;

    #[test]
    fn acked_truth_table() {
        // (time_acked, acked?)
        let table = [
            (None, false),
            (Some(0), false),
            (Some(1), true),
            (Some(NOW), true),
            (Some(-1), true),
            (Some(i64::MAX), true),
            (Some(i64::MIN), true),
        ];
        for (time_acked, acked) in table {
            assert_eq!(is_acked(time_acked), acked, "{time_acked:?}");
            let row = [("time_acked", time_acked)];
            assert_eq!(selects(UNACKED_SQL, &row), !acked, "SQL, {time_acked:?}");
        }
    }

    #[test]
    fn due_truth_table() {
        // (time_next, now, due?)
        let table = [
            (None, NOW, true),
            (Some(0), NOW, true),
            (Some(0), 1, true),
            (Some(NOW - 1), NOW, true),
            (Some(NOW), NOW, true),
            (Some(NOW + 1), NOW, false),
            (Some(i64::MAX), NOW, false),
            (Some(-5), NOW, true),
            (Some(1), 1, true),
            (Some(2), 1, false),
        ];
        for (time_next, now, due) in table {
            assert_eq!(is_due(time_next, now), due, "{time_next:?} at {now}");
            let row = [("time_next", time_next)];
            assert_eq!(
                selects(&due_sql(now), &row),
                due,
                "SQL, {time_next:?} at {now}"
            );
        }
    }

    #[test]
    fn ready_truth_table() {
        // (time_acked, time_next, ready at NOW?)
        let table = [
            (None, None, true),
            (None, Some(0), true),
            (Some(0), None, true),
            (Some(0), Some(0), true),
            (None, Some(NOW), true),
            (None, Some(NOW + 1), false),
            (Some(0), Some(NOW + 1), false),
            (Some(NOW), None, false),
            (Some(NOW), Some(0), false),
            (Some(1), Some(NOW - 1), false),
            (Some(-1), None, false),
        ];
        for (time_acked, time_next, ready) in table {
            assert_eq!(
                is_ready(time_acked, time_next, NOW),
                ready,
                "{time_acked:?} {time_next:?}"
            );
            let row = [("time_acked", time_acked), ("time_next", time_next)];
            assert_eq!(
                selects(&ready_sql(NOW), &row),
                ready,
                "SQL, {time_acked:?} {time_next:?}"
            );
        }
    }

    #[test]
    fn purgeable_truth_table() {
        let cutoff = NOW - 120_000_000_000;
        // (time_acked, purgeable?)
        let table = [
            (None, false),
            (Some(0), false),
            (Some(1), true),
            (Some(cutoff - 1), true),
            (Some(cutoff), false),
            (Some(cutoff + 1), false),
            (Some(NOW), false),
            (Some(-1), true),
            (Some(i64::MIN), true),
            (Some(i64::MAX), false),
        ];
        for (time_acked, purgeable) in table {
            assert_eq!(
                is_purgeable(time_acked, cutoff),
                purgeable,
                "{time_acked:?}"
            );
            let row = [("time_acked", time_acked)];
            assert_eq!(
                selects(&purgeable_sql(cutoff), &row),
                purgeable,
                "SQL, {time_acked:?}"
            );
            // Only acked rows are ever purged.
            if purgeable {
                assert!(is_acked(time_acked));
            }
        }
    }

    #[test]
    fn sql_text_is_exact() {
        assert_eq!(UNACKED_SQL, "(`time_acked` IS NULL OR `time_acked` = 0)");
        assert_eq!(due_sql(42), "(`time_next` IS NULL OR `time_next` <= 42)");
        assert_eq!(
            purgeable_sql(42),
            "((`time_acked` > 0 AND `time_acked` < 42) OR `time_acked` < 0)"
        );
        assert_eq!(
            ready_sql(42),
            "((`time_acked` IS NULL OR `time_acked` = 0) AND (`time_next` IS NULL OR `time_next` <= 42))"
        );
    }

    #[test]
    fn nulls_count_as_zero() {
        assert_eq!(epoch_or_zero(None), 0);
        assert_eq!(epoch_or_zero(Some(3)), 3);
        assert_eq!(priority_or_zero(None), 0);
        assert_eq!(priority_or_zero(Some(-2)), -2);
    }

    #[test]
    fn now_is_plausible() {
        let a = now_ns();
        // After 2024-01-01 and before 2200.
        assert!(a > 1_704_067_200_000_000_000, "{a}");
        assert!(a < 7_258_118_400_000_000_000, "{a}");
        assert!(now_ns() >= a);
    }
}
