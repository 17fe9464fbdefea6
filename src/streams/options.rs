//! The `msgproxy_stream` table comment: which tables are event-stream tables, and their options
//! (docs/STREAMS.md §1). As for message tables, an unknown option, a part without `=` or an
//! option given twice is an error, so a typo never becomes a default nobody asked for.

use std::time::Duration;

/// The comment prefix that marks an event-stream table (case-sensitive).
pub const COMMENT_PREFIX: &str = "msgproxy_stream";

/// The longest `ack_wait` (a century: "never" for every practical purpose).
pub const MAX_ACK_WAIT_SECONDS: f64 = 100.0 * 365.0 * 24.0 * 60.0 * 60.0;

/// The options of one stream table.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOptions {
    /// How long an event sent to a stream waits for its ack before the group sends it again.
    pub ack_wait: Duration,
    /// Most events sent to one stream at a time.
    pub batch_size: usize,
    /// Most events one stream may hold sent and not acked.
    pub max_unacked: usize,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            ack_wait: Duration::from_secs(30),
            batch_size: 100,
            max_unacked: 1000,
        }
    }
}

/// Why a `msgproxy_stream` comment was rejected; each message names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamOptionsError {
    #[error("the comment must be msgproxy_stream followed by comma-separated key=value options, not '{0}'")]
    BadPrefix(String),
    #[error("unknown option {0} (the options are ack_wait, batch_size and max_unacked)")]
    Unknown(String),
    #[error("option {0} is given more than once")]
    Duplicate(String),
    #[error("option '{0}' has no value (expected key=value)")]
    NoValue(String),
    #[error("ack_wait must be a number of seconds > 0 and at most 100 years, not '{0}'")]
    BadAckWait(String),
    #[error("{option} must be a whole number >= 1, not '{value}'")]
    BadCount { option: &'static str, value: String },
}

/// Parses a table comment: `Ok(None)` when the table is not a stream table, `Err` when it is one
/// whose options are wrong (it is then not loaded, and statements on it say why).
pub fn parse_comment(comment: &str) -> Result<Option<StreamOptions>, StreamOptionsError> {
    if !comment.starts_with(COMMENT_PREFIX) {
        return Ok(None);
    }
    let mut parts = comment.split(',');
    if parts.next().unwrap_or_default().trim_end() != COMMENT_PREFIX {
        return Err(StreamOptionsError::BadPrefix(comment.to_owned()));
    }
    let mut options = StreamOptions::default();
    let mut seen: Vec<String> = Vec::new();
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((key, value)) = part.split_once('=') else {
            return Err(StreamOptionsError::NoValue(part.to_owned()));
        };
        let (key, value) = (key.trim(), value.trim());
        if seen.iter().any(|k| k == key) {
            return Err(StreamOptionsError::Duplicate(key.to_owned()));
        }
        seen.push(key.to_owned());
        match key {
            "ack_wait" => {
                let secs = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= MAX_ACK_WAIT_SECONDS)
                    .ok_or_else(|| StreamOptionsError::BadAckWait(value.to_owned()))?;
                options.ack_wait = Duration::from_secs_f64(secs);
            }
            "batch_size" => options.batch_size = count("batch_size", value)?,
            "max_unacked" => options.max_unacked = count("max_unacked", value)?,
            _ => return Err(StreamOptionsError::Unknown(key.to_owned())),
        }
    }
    Ok(Some(options))
}

fn count(option: &'static str, value: &str) -> Result<usize, StreamOptionsError> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| StreamOptionsError::BadCount {
            option,
            value: value.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_options() {
        assert_eq!(parse_comment("a comment"), Ok(None));
        assert_eq!(parse_comment("vitess_message"), Ok(None));
        assert_eq!(
            parse_comment("msgproxy_stream"),
            Ok(Some(StreamOptions::default()))
        );
        assert_eq!(
            parse_comment("msgproxy_stream, ack_wait = 1.5 ,batch_size=7,max_unacked=9,"),
            Ok(Some(StreamOptions {
                ack_wait: Duration::from_millis(1500),
                batch_size: 7,
                max_unacked: 9
            }))
        );
    }

    #[test]
    fn mistakes_are_errors() {
        use StreamOptionsError::*;
        assert_eq!(
            parse_comment("msgproxy_streams"),
            Err(BadPrefix("msgproxy_streams".into()))
        );
        assert_eq!(
            parse_comment("msgproxy_stream,ackwait=3"),
            Err(Unknown("ackwait".into()))
        );
        assert_eq!(
            parse_comment("msgproxy_stream,batch_size=1,batch_size=2"),
            Err(Duplicate("batch_size".into()))
        );
        assert_eq!(
            parse_comment("msgproxy_stream,batch_size"),
            Err(NoValue("batch_size".into()))
        );
        for bad in ["0", "-1", "x", "inf", "NaN", "1e99"] {
            assert_eq!(
                parse_comment(&format!("msgproxy_stream,ack_wait={bad}")),
                Err(BadAckWait(bad.into()))
            );
        }
        assert!(matches!(
            parse_comment("msgproxy_stream,max_unacked=0"),
            Err(BadCount { .. })
        ));
    }
}
