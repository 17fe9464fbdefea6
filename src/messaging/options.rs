//! The `vitess_message` table comment: which tables are message tables, and with what options
//! (MESSAGING.md §1).
//!
//! The grammar is Vitess's — `vitess_message` followed by comma-separated `key=value` options — with two
//! deliberate differences: spaces around commas and `=` are trimmed (Vitess keeps them and then fails to find
//! the option), and anything Vitess would silently skip (an unknown option, a part without `=`, an option given
//! twice) is an error here, so a typo never turns into a default nobody asked for.

use std::time::Duration;

/// The comment prefix that marks a message table (case-sensitive, as in Vitess).
pub const COMMENT_PREFIX: &str = "vitess_message";

/// The largest number of seconds any time option may have. Times are Unix nanoseconds in a signed bigint, which
/// ends in 2262; a delay longer than a century is "never" for every practical purpose, and bounding it here
/// keeps `now + ack_wait + backoff` and `now - purge_after` far from overflow.
pub const MAX_SECONDS: u64 = 100 * 365 * 24 * 60 * 60;

/// The options of one message table, parsed and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageOptions {
    /// How long a sent message waits for its ack before it may be sent again (`vt_ack_wait`, > 0).
    pub ack_wait: Duration,
    /// Acked rows whose `time_acked` is older than this are deleted (`vt_purge_after`).
    pub purge_after: Duration,
    /// Most rows sent to one subscriber in one batch (`vt_batch_size`, >= 1).
    pub batch_size: usize,
    /// Most due rows held in memory for the table, and the poller's `LIMIT` (`vt_cache_size`, >= 1).
    pub cache_size: usize,
    /// How often the table is polled for due rows and purged (`vt_poller_interval`, > 0).
    pub poller_interval: Duration,
    /// Smallest extra delay before a resend (`vt_min_backoff`; defaults to `ack_wait`).
    pub min_backoff: Duration,
    /// Largest extra delay before a resend; `None` = no cap (`vt_max_backoff` absent or 0). When set it is
    /// never below `min_backoff`.
    pub max_backoff: Option<Duration>,
    /// The columns to stream, exactly (`vt_message_cols`); `None` = `id` and every user column. When set the
    /// first name is `id` (in any letter case) and no name repeats.
    pub message_cols: Option<Vec<String>>,
    /// Most messages one stream may hold sent and not yet acked (`vt_max_unacked`, msgproxy's
    /// own, >= 1); `None` = no limit, as in Vitess.
    pub max_unacked: Option<usize>,
    /// Most times a message is sent (`vt_max_attempts`, >= 1): a message sent that often whose
    /// ack wait passes is dead, not sent again (MESSAGING.md §9). `None` = no limit, as in Vitess.
    pub max_attempts: Option<usize>,
    /// Where dead messages are moved (`vt_dead_letter`, a table of the same database); `None`:
    /// they stay in place, never due. Only with `max_attempts`.
    pub dead_letter: Option<String>,
    /// The column whose non-NULL values make FIFO groups (`vt_group_col`, MESSAGING.md §11): one
    /// message of a group in flight at a time, in id order.
    pub group_col: Option<String>,
}

/// Why a `vitess_message` comment was rejected. Every message names the option it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// Something other than a comma follows `vitess_message`.
    #[error("the comment must be vitess_message followed by comma-separated key=value options, not '{0}'")]
    BadPrefix(String),
    /// A required option is absent.
    #[error("missing required option {0}")]
    Missing(&'static str),
    /// An option this proxy does not know (including keys that do not start with `vt_`).
    #[error("unknown option {0}")]
    Unknown(String),
    /// The same option appears twice.
    #[error("option {0} is given more than once")]
    Duplicate(String),
    /// A comma-separated part without `=`.
    #[error("option '{0}' has no value (expected key=value)")]
    NoValue(String),
    /// A time option that is not a finite, non-negative number of seconds.
    #[error("{option} must be a number of seconds >= 0, not '{value}'")]
    BadSeconds { option: &'static str, value: String },
    /// `vt_ack_wait` or `vt_poller_interval` of zero.
    #[error("{option} must be more than 0 seconds, not '{value}'")]
    NotPositive { option: &'static str, value: String },
    /// A time option beyond [`MAX_SECONDS`].
    #[error("{option} must be at most {MAX_SECONDS} seconds (100 years), not '{value}'")]
    TooLong { option: &'static str, value: String },
    /// A count option that is not a whole number >= 1.
    #[error("{option} must be a whole number >= 1, not '{value}'")]
    BadCount { option: &'static str, value: String },
    /// A count option too large to hold (more than `usize::MAX`).
    #[error("{option} is too large: '{value}' (at most {max})", max = usize::MAX)]
    CountTooLarge { option: &'static str, value: String },
    /// `vt_max_backoff` set below `vt_min_backoff`.
    #[error(
        "vt_max_backoff ({max}s) must be >= vt_min_backoff ({min}s{defaulted}), or 0 for no cap",
        defaulted = if *.min_defaulted { ", the default: vt_ack_wait" } else { "" }
    )]
    MaxBelowMin {
        max: String,
        min: String,
        /// Whether `vt_min_backoff` was not given and took `vt_ack_wait`'s value.
        min_defaulted: bool,
    },
    /// `vt_message_cols` with an empty name, a repeated name, or not starting with `id`.
    #[error("vt_message_cols {0}")]
    BadMessageCols(String),
    /// A table name that is empty or not a plain name (letters, digits, `_`, `$`).
    #[error("{option} must be a plain name (letters, digits, _ and $), not '{value}'")]
    BadTableName { option: &'static str, value: String },
    /// An option that means nothing without another.
    #[error("{option} needs {needs}")]
    Needs {
        option: &'static str,
        needs: &'static str,
    },
}

/// The options this proxy understands, in the order the summary prints them.
const KNOWN: [&str; 12] = [
    "vt_ack_wait",
    "vt_purge_after",
    "vt_batch_size",
    "vt_cache_size",
    "vt_poller_interval",
    "vt_min_backoff",
    "vt_max_backoff",
    "vt_message_cols",
    "vt_max_unacked",
    "vt_max_attempts",
    "vt_dead_letter",
    "vt_group_col",
];

/// Every problem of one comment, in the order of the text (then the required options missing, in
/// the documented order): a table with several is fixed in one round, not one error at a time.
/// Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionsErrors(pub Vec<OptionsError>);

impl std::fmt::Display for OptionsErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for OptionsErrors {}

/// Parses a table comment. `Ok(None)` means the table is not a message table (the comment does not start with
/// `vitess_message`); `Err` means it is one, but its options are wrong and it must not be loaded: every problem
/// found is reported.
///
/// Empty parts (a trailing or doubled comma) are allowed: they carry no option, so nothing is lost by skipping
/// them.
pub fn parse_comment(comment: &str) -> Result<Option<MessageOptions>, OptionsErrors> {
    if !comment.starts_with(COMMENT_PREFIX) {
        return Ok(None);
    }
    let mut parts = comment.split(',');
    let head = parts.next().unwrap_or_default();
    if head.trim_end() != COMMENT_PREFIX {
        return Err(OptionsErrors(vec![OptionsError::BadPrefix(
            comment.to_string(),
        )]));
    }

    let mut problems = Vec::new();
    // Values by position in KNOWN.
    let mut values: [Option<&str>; KNOWN.len()] = [None; KNOWN.len()];
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((key, value)) = part.split_once('=') else {
            problems.push(OptionsError::NoValue(part.to_string()));
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let Some(slot) = KNOWN.iter().position(|k| *k == key) else {
            problems.push(OptionsError::Unknown(key.to_string()));
            continue;
        };
        if values[slot].replace(value).is_some() {
            problems.push(OptionsError::Duplicate(key.to_string()));
        }
    }
    let get = |name: &'static str| -> Option<&str> {
        KNOWN
            .iter()
            .position(|k| *k == name)
            .and_then(|i| values[i])
    };
    // Each option is checked whatever happened to the others; `take` keeps the value or notes
    // the problem.
    fn take<T>(problems: &mut Vec<OptionsError>, r: Result<T, OptionsError>) -> Option<T> {
        r.map_err(|e| problems.push(e)).ok()
    }
    let required = |problems: &mut Vec<OptionsError>, name: &'static str| {
        let value = get(name);
        if value.is_none() {
            problems.push(OptionsError::Missing(name));
        }
        value
    };
    let ack_wait_text = required(&mut problems, "vt_ack_wait");
    let purge_after_text = required(&mut problems, "vt_purge_after");
    let batch_size_text = required(&mut problems, "vt_batch_size");
    let cache_size_text = required(&mut problems, "vt_cache_size");
    let poller_interval_text = required(&mut problems, "vt_poller_interval");

    let ack_wait =
        ack_wait_text.and_then(|t| take(&mut problems, parse_positive_seconds("vt_ack_wait", t)));
    let purge_after =
        purge_after_text.and_then(|t| take(&mut problems, parse_seconds("vt_purge_after", t)));
    let batch_size =
        batch_size_text.and_then(|t| take(&mut problems, parse_count("vt_batch_size", t)));
    let cache_size =
        cache_size_text.and_then(|t| take(&mut problems, parse_count("vt_cache_size", t)));
    let poller_interval = poller_interval_text.and_then(|t| {
        take(
            &mut problems,
            parse_positive_seconds("vt_poller_interval", t),
        )
    });
    let min_backoff = match get("vt_min_backoff") {
        Some(text) => take(&mut problems, parse_seconds("vt_min_backoff", text)),
        None => ack_wait,
    };
    let max_backoff = match get("vt_max_backoff") {
        Some(text) => take(&mut problems, parse_seconds("vt_max_backoff", text))
            .map(|d| Some(d).filter(|d| !d.is_zero())),
        None => Some(None),
    };
    if let (Some(Some(max)), Some(min)) = (max_backoff, min_backoff) {
        if max < min {
            problems.push(OptionsError::MaxBelowMin {
                max: format_seconds(max),
                min: format_seconds(min),
                min_defaulted: get("vt_min_backoff").is_none(),
            });
        }
    }
    let message_cols = match get("vt_message_cols") {
        Some(text) => take(&mut problems, parse_message_cols(text)).map(Some),
        None => Some(None),
    };
    let max_unacked = match get("vt_max_unacked") {
        Some(text) => take(&mut problems, parse_count("vt_max_unacked", text)).map(Some),
        None => Some(None),
    };
    let max_attempts = match get("vt_max_attempts") {
        Some(text) => take(&mut problems, parse_count("vt_max_attempts", text)).map(Some),
        None => Some(None),
    };
    let dead_letter = match get("vt_dead_letter") {
        Some(text) => take(&mut problems, parse_table_name("vt_dead_letter", text)).map(Some),
        None => Some(None),
    };
    let group_col = match get("vt_group_col") {
        Some(text) => take(&mut problems, parse_table_name("vt_group_col", text)).map(Some),
        None => Some(None),
    };
    if get("vt_dead_letter").is_some() && get("vt_max_attempts").is_none() {
        problems.push(OptionsError::Needs {
            option: "vt_dead_letter",
            needs: "vt_max_attempts",
        });
    }

    match (
        ack_wait,
        purge_after,
        batch_size,
        cache_size,
        poller_interval,
        min_backoff,
        max_backoff,
        message_cols,
        max_unacked,
        max_attempts,
        dead_letter,
        group_col,
    ) {
        (
            Some(ack_wait),
            Some(purge_after),
            Some(batch_size),
            Some(cache_size),
            Some(poller_interval),
            Some(min_backoff),
            Some(max_backoff),
            Some(message_cols),
            Some(max_unacked),
            Some(max_attempts),
            Some(dead_letter),
            Some(group_col),
        ) if problems.is_empty() => Ok(Some(MessageOptions {
            ack_wait,
            purge_after,
            batch_size,
            cache_size,
            poller_interval,
            min_backoff,
            max_backoff,
            message_cols,
            max_unacked,
            max_attempts,
            dead_letter,
            group_col,
        })),
        _ => Err(OptionsErrors(problems)),
    }
}

/// A table (or column) name: not empty, and no backtick, dot or space (it is quoted where it is
/// used, but a name that needs quoting in a comment is more likely a typo).
fn parse_table_name(option: &'static str, text: &str) -> Result<String, OptionsError> {
    let plain = !text.is_empty()
        && text.chars().count() <= 64
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$');
    if plain {
        Ok(text.to_string())
    } else {
        Err(OptionsError::BadTableName {
            option,
            value: text.to_string(),
        })
    }
}

/// A finite number of seconds in `0..=MAX_SECONDS`, with fractions (Vitess takes floats).
fn parse_seconds(option: &'static str, text: &str) -> Result<Duration, OptionsError> {
    let bad = || OptionsError::BadSeconds {
        option,
        value: text.to_string(),
    };
    let secs: f64 = text.parse().map_err(|_| bad())?;
    // `parse` accepts "inf" and "NaN"; neither is a delay.
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad());
    }
    if secs > MAX_SECONDS as f64 {
        return Err(OptionsError::TooLong {
            option,
            value: text.to_string(),
        });
    }
    // In range and finite, so the conversion cannot fail; "-0" lands here as zero.
    Duration::try_from_secs_f64(secs.max(0.0)).map_err(|_| bad())
}

/// Like [`parse_seconds`], but zero (or anything that rounds to 0 ns) is refused.
fn parse_positive_seconds(option: &'static str, text: &str) -> Result<Duration, OptionsError> {
    let d = parse_seconds(option, text)?;
    if d.is_zero() {
        return Err(OptionsError::NotPositive {
            option,
            value: text.to_string(),
        });
    }
    Ok(d)
}

/// A whole number >= 1.
fn parse_count(option: &'static str, text: &str) -> Result<usize, OptionsError> {
    let value = text.to_string();
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        // All digits, yet no usize: a whole number, just too large to mean anything here.
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err(OptionsError::CountTooLarge { option, value })
        }
        _ => Err(OptionsError::BadCount { option, value }),
    }
}

/// `id|a|b`: trimmed names, the first `id`, none empty or repeated. Names compare case-insensitively, as
/// MySQL column names do; whether they exist is checked against the table (see `table::validate`).
fn parse_message_cols(text: &str) -> Result<Vec<String>, OptionsError> {
    let names: Vec<String> = text.split('|').map(|n| n.trim().to_string()).collect();
    if names.iter().any(String::is_empty) {
        return Err(OptionsError::BadMessageCols(format!(
            "has an empty column name: '{text}'"
        )));
    }
    if !names[0].eq_ignore_ascii_case("id") {
        return Err(OptionsError::BadMessageCols(format!(
            "must start with id, not '{}'",
            names[0]
        )));
    }
    for (i, name) in names.iter().enumerate() {
        if names[..i]
            .iter()
            .any(|n| n.to_lowercase() == name.to_lowercase())
        {
            return Err(OptionsError::BadMessageCols(format!(
                "names column {name} more than once"
            )));
        }
    }
    Ok(names)
}

/// Seconds without float noise: `30`, `0.5`, `0.000000001`.
fn format_seconds(d: Duration) -> String {
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        return d.as_secs().to_string();
    }
    let frac = format!("{nanos:09}");
    format!("{}.{}", d.as_secs(), frac.trim_end_matches('0'))
}

impl MessageOptions {
    /// All options in their comment form, defaults included, e.g.
    /// `vt_ack_wait=30,vt_purge_after=120,vt_batch_size=1,vt_cache_size=1000,vt_poller_interval=30,vt_min_backoff=30,vt_max_backoff=0`
    /// (then `,vt_message_cols=id|...` when set). For operators: logs and status output. Prefixed with
    /// `vitess_message,` it parses back to the same options.
    pub fn to_comment_summary(&self) -> String {
        let mut s = format!(
            "vt_ack_wait={},vt_purge_after={},vt_batch_size={},vt_cache_size={},vt_poller_interval={},\
             vt_min_backoff={},vt_max_backoff={}",
            format_seconds(self.ack_wait),
            format_seconds(self.purge_after),
            self.batch_size,
            self.cache_size,
            format_seconds(self.poller_interval),
            format_seconds(self.min_backoff),
            format_seconds(self.max_backoff.unwrap_or(Duration::ZERO)),
        );
        if let Some(cols) = &self.message_cols {
            s.push_str(",vt_message_cols=");
            s.push_str(&cols.join("|"));
        }
        if let Some(max) = self.max_unacked {
            s.push_str(&format!(",vt_max_unacked={max}"));
        }
        if let Some(max) = self.max_attempts {
            s.push_str(&format!(",vt_max_attempts={max}"));
        }
        if let Some(table) = &self.dead_letter {
            s.push_str(&format!(",vt_dead_letter={table}"));
        }
        if let Some(col) = &self.group_col {
            s.push_str(&format!(",vt_group_col={col}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str =
        "vitess_message,vt_ack_wait=30,vt_purge_after=120,vt_batch_size=1,vt_cache_size=1000,\
                        vt_poller_interval=30";

    fn parse(comment: &str) -> Result<Option<MessageOptions>, OptionsErrors> {
        parse_comment(comment)
    }

    fn ok(comment: &str) -> MessageOptions {
        match parse(comment) {
            Ok(Some(o)) => o,
            other => panic!("{comment:?} should parse, got {other:?}"),
        }
    }

    fn err(comment: &str) -> String {
        match parse(comment) {
            Err(e) => e.to_string(),
            other => panic!("{comment:?} should fail, got {other:?}"),
        }
    }

    #[test]
    fn the_rfc_comment_parses_with_defaults() {
        let o = ok(BASE);
        assert_eq!(
            o,
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
        );
    }

    #[test]
    fn max_unacked_is_a_count() {
        assert_eq!(
            ok(&format!("{BASE},vt_max_unacked=500")).max_unacked,
            Some(500)
        );
        for bad in ["0", "-1", "1.5", "many", ""] {
            assert_eq!(
                parse_comment(&format!("{BASE},vt_max_unacked={bad}")),
                Err(OptionsErrors(vec![OptionsError::BadCount {
                    option: "vt_max_unacked",
                    value: bad.to_string()
                }])),
                "{bad}"
            );
        }
        let huge = "99999999999999999999999";
        let err = parse_comment(&format!("{BASE},vt_max_unacked={huge}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "vt_max_unacked is too large: '{huge}' (at most {})",
                usize::MAX
            )
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        assert_eq!(
            err(
                "vitess_message,vt_ack_wait=0,vt_batch_size=x,vt_bogus=1,vt_cache_size=10,\
                 vt_poller_interval=1,vt_purge_after=1,vt_batch_size=2,novalue"
            ),
            "unknown option vt_bogus; option vt_batch_size is given more than once; \
             option 'novalue' has no value (expected key=value); \
             vt_ack_wait must be more than 0 seconds, not '0'"
        );
        assert_eq!(
            err("vitess_message,vt_ack_wait=1,vt_purge_after=1,vt_batch_size=1,vt_poller_interval=-1,\
                 vt_dead_letter=a.b"),
            "missing required option vt_cache_size; \
             vt_poller_interval must be a number of seconds >= 0, not '-1'; \
             vt_dead_letter must be a plain name (letters, digits, _ and $), not 'a.b'; \
             vt_dead_letter needs vt_max_attempts"
        );
    }

    #[test]
    fn max_attempts_and_dead_letter() {
        let o = ok(&format!("{BASE},vt_max_attempts=3,vt_dead_letter=q_dead"));
        assert_eq!(o.max_attempts, Some(3));
        assert_eq!(o.dead_letter.as_deref(), Some("q_dead"));
        assert!(o
            .to_comment_summary()
            .ends_with(",vt_max_attempts=3,vt_dead_letter=q_dead"));
        assert_eq!(
            err(&format!("{BASE},vt_max_attempts=0")),
            "vt_max_attempts must be a whole number >= 1, not '0'"
        );
    }

    #[test]
    fn not_a_message_table() {
        for c in [
            "",
            "a normal table",
            "Vitess_message,vt_ack_wait=1",
            " vitess_message,vt_ack_wait=1",
            "vitess",
        ] {
            assert_eq!(parse(c), Ok(None), "{c:?}");
        }
    }

    #[test]
    fn prefix_must_be_followed_by_a_comma() {
        assert!(err("vitess_messages,vt_ack_wait=1").contains("vitess_messages"));
        assert!(matches!(
            parse("vitess_message vt_ack_wait=30"),
            Err(OptionsErrors(e)) if matches!(e[..], [OptionsError::BadPrefix(_)])
        ));
        // A bare prefix is a message table with nothing set.
        let all_missing =
            "missing required option vt_ack_wait; missing required option vt_purge_after; \
             missing required option vt_batch_size; missing required option vt_cache_size; \
             missing required option vt_poller_interval";
        assert_eq!(err("vitess_message"), all_missing);
        assert_eq!(err("vitess_message  "), all_missing);
    }

    #[test]
    fn spaces_are_trimmed_and_empty_parts_skipped() {
        let spaced = "vitess_message , vt_ack_wait = 30 ,vt_purge_after= 120, vt_batch_size =1 ,\
                      vt_cache_size=1000 , vt_poller_interval = 30 ,";
        assert_eq!(ok(spaced), ok(BASE));
        assert_eq!(ok(&format!("{BASE},,")), ok(BASE));
    }

    #[test]
    fn each_required_option_is_reported_by_name() {
        for name in [
            "vt_ack_wait",
            "vt_purge_after",
            "vt_batch_size",
            "vt_cache_size",
            "vt_poller_interval",
        ] {
            let comment: Vec<&str> = BASE
                .split(',')
                .filter(|p| !p.starts_with(&format!("{name}=")))
                .collect();
            assert_eq!(
                err(&comment.join(",")),
                format!("missing required option {name}")
            );
        }
    }

    #[test]
    fn unknown_duplicate_and_valueless_options_are_errors() {
        assert_eq!(err(&format!("{BASE},vt_foo=1")), "unknown option vt_foo");
        assert_eq!(
            err(&format!("{BASE},vt_topic=x")),
            "unknown option vt_topic"
        );
        assert_eq!(err(&format!("{BASE},foo=1")), "unknown option foo");
        assert_eq!(
            err(&format!("{BASE},VT_ACK_WAIT=1")),
            "unknown option VT_ACK_WAIT"
        );
        assert_eq!(
            err(&format!("{BASE},vt_ack_wait=31")),
            "option vt_ack_wait is given more than once"
        );
        assert_eq!(
            err(&format!("{BASE}, vt_min_backoff ")),
            "option 'vt_min_backoff' has no value (expected key=value)"
        );
        // An unknown option is reported, and so are the required ones missing.
        assert!(err("vitess_message,vt_bogus=1")
            .starts_with("unknown option vt_bogus; missing required option vt_ack_wait; "));
    }

    #[test]
    fn seconds_accept_floats_and_reject_nonsense() {
        let o = ok(&BASE.replace("vt_ack_wait=30", "vt_ack_wait=0.5"));
        assert_eq!(o.ack_wait, Duration::from_millis(500));
        assert_eq!(o.min_backoff, Duration::from_millis(500));
        let o = ok(&BASE.replace("vt_purge_after=120", "vt_purge_after=0"));
        assert_eq!(o.purge_after, Duration::ZERO);
        let o = ok(&BASE.replace("vt_purge_after=120", "vt_purge_after=1e3"));
        assert_eq!(o.purge_after, Duration::from_secs(1000));

        for bad in ["-1", "x", "", "NaN", "inf", "-inf", "1s", "0x10"] {
            assert_eq!(
                err(&BASE.replace("vt_purge_after=120", &format!("vt_purge_after={bad}"))),
                format!("vt_purge_after must be a number of seconds >= 0, not '{bad}'")
            );
        }
        for zero in ["0", "0.0", "-0", "1e-12"] {
            assert_eq!(
                err(&BASE.replace("vt_ack_wait=30", &format!("vt_ack_wait={zero}"))),
                format!("vt_ack_wait must be more than 0 seconds, not '{zero}'")
            );
            assert_eq!(
                err(&BASE.replace(
                    "vt_poller_interval=30",
                    &format!("vt_poller_interval={zero}")
                )),
                format!("vt_poller_interval must be more than 0 seconds, not '{zero}'")
            );
        }
        assert!(
            err(&BASE.replace("vt_purge_after=120", "vt_purge_after=1e300"))
                .starts_with("vt_purge_after must be at most 3153600000 seconds")
        );
        let o = ok(&BASE.replace("vt_purge_after=120", "vt_purge_after=3153600000"));
        assert_eq!(o.purge_after, Duration::from_secs(MAX_SECONDS));
    }

    #[test]
    fn counts_must_be_whole_and_positive() {
        for bad in ["0", "-1", "1.5", "x", "", "1e3"] {
            assert_eq!(
                err(&BASE.replace("vt_batch_size=1", &format!("vt_batch_size={bad}"))),
                format!("vt_batch_size must be a whole number >= 1, not '{bad}'")
            );
            assert_eq!(
                err(&BASE.replace("vt_cache_size=1000", &format!("vt_cache_size={bad}"))),
                format!("vt_cache_size must be a whole number >= 1, not '{bad}'")
            );
        }
        assert_eq!(
            ok(&BASE.replace("vt_batch_size=1", "vt_batch_size=64")).batch_size,
            64
        );
    }

    #[test]
    fn backoff_options() {
        let o = ok(&format!("{BASE},vt_min_backoff=1,vt_max_backoff=60"));
        assert_eq!(o.min_backoff, Duration::from_secs(1));
        assert_eq!(o.max_backoff, Some(Duration::from_secs(60)));
        assert_eq!(ok(&format!("{BASE},vt_max_backoff=0")).max_backoff, None);
        // Equal is fine; so is a zero min_backoff.
        assert_eq!(
            ok(&format!("{BASE},vt_max_backoff=30")).max_backoff,
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            ok(&format!("{BASE},vt_min_backoff=0")).min_backoff,
            Duration::ZERO
        );

        assert_eq!(
            err(&format!("{BASE},vt_min_backoff=10,vt_max_backoff=5")),
            "vt_max_backoff (5s) must be >= vt_min_backoff (10s), or 0 for no cap"
        );
        assert_eq!(
            err(&format!("{BASE},vt_max_backoff=2.5")),
            "vt_max_backoff (2.5s) must be >= vt_min_backoff (30s, the default: vt_ack_wait), or 0 for no cap"
        );
        assert!(err(&format!("{BASE},vt_max_backoff=-3")).starts_with("vt_max_backoff must be"));
    }

    #[test]
    fn message_cols() {
        let o = ok(&format!("{BASE},vt_message_cols= id | message|Extra "));
        assert_eq!(
            o.message_cols,
            Some(vec![
                "id".to_string(),
                "message".to_string(),
                "Extra".to_string()
            ])
        );
        assert_eq!(
            ok(&format!("{BASE},vt_message_cols=ID")).message_cols,
            Some(vec!["ID".to_string()])
        );
        assert_eq!(
            err(&format!("{BASE},vt_message_cols=message|id")),
            "vt_message_cols must start with id, not 'message'"
        );
        assert_eq!(
            err(&format!("{BASE},vt_message_cols=id||message")),
            "vt_message_cols has an empty column name: 'id||message'"
        );
        assert_eq!(
            err(&format!("{BASE},vt_message_cols=")),
            "vt_message_cols has an empty column name: ''"
        );
        assert_eq!(
            err(&format!("{BASE},vt_message_cols=id|msg|MSG")),
            "vt_message_cols names column MSG more than once"
        );
        assert_eq!(
            err(&format!("{BASE},vt_message_cols=id|Id")),
            "vt_message_cols names column Id more than once"
        );
    }

    #[test]
    fn summary_is_compact_and_round_trips() {
        let o = ok(BASE);
        assert_eq!(
            o.to_comment_summary(),
            "vt_ack_wait=30,vt_purge_after=120,vt_batch_size=1,vt_cache_size=1000,vt_poller_interval=30,\
             vt_min_backoff=30,vt_max_backoff=0"
        );
        let full = ok(
            "vitess_message,vt_ack_wait=0.25,vt_purge_after=0.000000001,vt_batch_size=7,vt_cache_size=9,\
             vt_poller_interval=1.5,vt_min_backoff=0,vt_max_backoff=3600,vt_message_cols=id|a|b"
        );
        let summary = full.to_comment_summary();
        assert_eq!(
            summary,
            "vt_ack_wait=0.25,vt_purge_after=0.000000001,vt_batch_size=7,vt_cache_size=9,vt_poller_interval=1.5,\
             vt_min_backoff=0,vt_max_backoff=3600,vt_message_cols=id|a|b"
        );
        for o in [o, full] {
            let again = ok(&format!("vitess_message,{}", o.to_comment_summary()));
            assert_eq!(again, o);
        }
    }
}
