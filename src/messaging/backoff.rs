//! When a sent message may be sent again (MESSAGING.md §5):
//!
//! ```text
//! time_next = now + ack_wait + clamp(min_backoff * 2^epoch * jitter, min_backoff, max_backoff)
//! ```
//!
//! All in i64 nanoseconds, the unit of the table's bigint columns. Nothing here can overflow or panic, whatever
//! the epoch, durations or jitter: the exponent is bounded, the arithmetic is done in f64 and clamped before it
//! becomes an integer again, and the final sums saturate.

use std::time::Duration;

use rand::Rng;

use super::options::MessageOptions;

/// The smallest jitter factor.
pub const JITTER_MIN: f64 = 0.666;
/// The largest jitter factor.
pub const JITTER_MAX: f64 = 1.333;

/// The cap on the backoff when the table sets none: 100 years. A row whose epoch has grown large must still get
/// a `time_next` that is a sane bigint (and that `now + ack_wait + backoff` cannot overflow), not `i64::MAX`.
pub const NO_CAP_NS: i64 = 100 * 365 * 24 * 3600 * 1_000_000_000;

/// `epoch` above this changes nothing: 2^1023 is the largest finite power of two in f64, and with any positive
/// `min_backoff` the product is far beyond every cap long before that.
const MAX_EXPONENT: i64 = 1023;

/// A duration in i64 nanoseconds, saturating (292 years fit; options are bounded to 100).
pub fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The extra delay, in nanoseconds, before a message sent `epoch` times before may be resent:
/// `clamp(min_backoff * 2^epoch * jitter, min_backoff, max_backoff)`.
///
/// - a negative `epoch` counts as 0 (the column may hold anything);
/// - `max_backoff` of `None` (or zero, which the comment uses to say the same) means no cap — apart from
///   [`NO_CAP_NS`], or `min_backoff` if that is larger;
/// - if `max_backoff` is below `min_backoff` (options refuse that, but this function does not rely on it), the
///   cap wins, as in Vitess;
/// - `jitter` is clamped to `[JITTER_MIN, JITTER_MAX]`; a NaN or infinite jitter counts as 1.
pub fn backoff_ns(
    epoch: i64,
    min_backoff: Duration,
    max_backoff: Option<Duration>,
    jitter: f64,
) -> i64 {
    let min_ns = duration_ns(min_backoff);
    let cap_ns = match max_backoff {
        Some(max) if !max.is_zero() => duration_ns(max),
        _ => NO_CAP_NS.max(min_ns),
    };
    let jitter = if jitter.is_finite() {
        jitter.clamp(JITTER_MIN, JITTER_MAX)
    } else {
        1.0
    };
    // The exponent is in 0..=1023, so the power is finite; the product may be +inf but never NaN (0 * finite
    // is 0), and max/min then bring it into [min, cap], which fits i64.
    let exponent = epoch.clamp(0, MAX_EXPONENT) as i32;
    let raw = min_ns as f64 * 2f64.powi(exponent) * jitter;
    // `as` from f64 saturates; the value is already within i64 here.
    raw.max(min_ns as f64).min(cap_ns as f64) as i64
}

/// The `time_next` a claim writes: `now + ack_wait + backoff`, saturating at `i64::MAX`.
pub fn next_time_next(now_ns: i64, epoch: i64, opts: &MessageOptions, jitter: f64) -> i64 {
    now_ns
        .saturating_add(duration_ns(opts.ack_wait))
        .saturating_add(backoff_ns(
            epoch,
            opts.min_backoff,
            opts.max_backoff,
            jitter,
        ))
}

/// A fresh jitter factor, uniform in `[JITTER_MIN, JITTER_MAX]`. Jitter spreads the resends of a batch that
/// failed together, so they do not all come back at the same instant.
pub fn random_jitter() -> f64 {
    rand::rng().random_range(JITTER_MIN..=JITTER_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn opts(ack_wait: u64, min: u64, max: Option<u64>) -> MessageOptions {
        MessageOptions {
            ack_wait: secs(ack_wait),
            purge_after: secs(120),
            batch_size: 1,
            cache_size: 10,
            poller_interval: secs(30),
            min_backoff: secs(min),
            max_backoff: max.map(secs),
            message_cols: None,
            max_unacked: None,
            max_attempts: None,
            dead_letter: None,
            group_col: None,
        }
    }

    #[test]
    fn epoch_zero_is_min_backoff_times_jitter_but_never_below_min() {
        assert_eq!(backoff_ns(0, secs(10), None, 1.0), 10 * S);
        assert_eq!(backoff_ns(0, secs(10), None, JITTER_MIN), 10 * S);
        assert_eq!(backoff_ns(0, secs(10), None, JITTER_MAX), 13_330_000_000);
    }

    #[test]
    fn grows_by_two_per_epoch() {
        assert_eq!(backoff_ns(1, secs(10), None, 1.0), 20 * S);
        assert_eq!(backoff_ns(3, secs(10), None, 1.0), 80 * S);
        assert_eq!(backoff_ns(3, secs(10), None, JITTER_MIN), 53_280_000_000);
        assert_eq!(backoff_ns(3, secs(10), None, JITTER_MAX), 106_640_000_000);
    }

    #[test]
    fn bounds_hold_for_every_epoch_and_jitter() {
        let epochs = (0..=100).chain([1022, 1023, 1024, 5000, i64::MAX - 1, i64::MAX]);
        for epoch in epochs {
            for jitter in [JITTER_MIN, 0.9, 1.0, 1.2, JITTER_MAX] {
                for (min, max) in [
                    (30, Some(600)),
                    (1, Some(1)),
                    (0, Some(5)),
                    (30, None),
                    (0, None),
                ] {
                    let b = backoff_ns(epoch, secs(min), max.map(secs), jitter);
                    let min_ns = min as i64 * S;
                    let cap_ns = max.map_or(NO_CAP_NS, |m| m as i64 * S);
                    assert!(
                        (min_ns..=cap_ns).contains(&b),
                        "epoch {epoch} jitter {jitter} min {min} max {max:?}: {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn huge_and_negative_epochs() {
        assert_eq!(
            backoff_ns(i64::MAX, secs(30), Some(secs(600)), JITTER_MAX),
            600 * S
        );
        assert_eq!(backoff_ns(i64::MAX, secs(30), None, JITTER_MIN), NO_CAP_NS);
        assert_eq!(backoff_ns(-1, secs(30), None, 1.0), 30 * S);
        assert_eq!(backoff_ns(i64::MIN, secs(30), Some(secs(600)), 1.0), 30 * S);
    }

    #[test]
    fn zero_min_backoff_never_backs_off() {
        for epoch in [0, 1, 64, 1023, i64::MAX] {
            assert_eq!(backoff_ns(epoch, Duration::ZERO, None, JITTER_MAX), 0);
            assert_eq!(
                backoff_ns(epoch, Duration::ZERO, Some(secs(5)), JITTER_MAX),
                0
            );
        }
    }

    #[test]
    fn jitter_out_of_range_is_clamped() {
        assert_eq!(
            backoff_ns(2, secs(10), None, 100.0),
            backoff_ns(2, secs(10), None, JITTER_MAX)
        );
        assert_eq!(
            backoff_ns(2, secs(10), None, -5.0),
            backoff_ns(2, secs(10), None, JITTER_MIN)
        );
        for odd in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(backoff_ns(2, secs(10), None, odd), 40 * S);
        }
    }

    #[test]
    fn no_cap_means_no_cap_until_the_century() {
        // 30s * 2^20 ≈ 364 days: far above any ordinary cap, still below the century.
        assert_eq!(backoff_ns(20, secs(30), None, 1.0), 30 * S * (1 << 20));
        assert_eq!(
            backoff_ns(20, secs(30), Some(Duration::ZERO), 1.0),
            30 * S * (1 << 20)
        );
        assert_eq!(backoff_ns(40, secs(30), None, 1.0), NO_CAP_NS);
        // A min_backoff above the century is honoured rather than cut down.
        let long = Duration::from_secs(200 * 365 * 24 * 3600);
        assert_eq!(backoff_ns(0, long, None, 1.0), duration_ns(long));
        assert_eq!(backoff_ns(9, long, None, 1.0), duration_ns(long));
    }

    #[test]
    fn cap_below_min_wins() {
        assert_eq!(backoff_ns(0, secs(30), Some(secs(10)), 1.0), 10 * S);
    }

    #[test]
    fn monotonic_until_the_cap() {
        for jitter in [JITTER_MIN, 1.0, JITTER_MAX] {
            for max in [Some(3600), None] {
                let cap = max.map_or(NO_CAP_NS, |m| m * S);
                let mut prev = backoff_ns(0, secs(1), max.map(|m| secs(m as u64)), jitter);
                for epoch in 1..200 {
                    let b = backoff_ns(epoch, secs(1), max.map(|m| secs(m as u64)), jitter);
                    if prev < cap {
                        assert!(b > prev, "epoch {epoch}: {b} <= {prev}");
                    } else {
                        assert_eq!(b, cap);
                    }
                    prev = b;
                }
                assert_eq!(prev, cap);
            }
        }
    }

    #[test]
    fn next_time_next_adds_ack_wait_and_backoff() {
        let now = 1_732_950_000 * S;
        let o = opts(30, 30, None);
        assert_eq!(next_time_next(now, 0, &o, 1.0), now + 60 * S);
        assert_eq!(next_time_next(now, 2, &o, 1.0), now + 30 * S + 120 * S);
        let o = opts(30, 10, Some(60));
        assert_eq!(next_time_next(now, 10, &o, JITTER_MAX), now + 90 * S);
        // min_backoff defaults to ack_wait, so a fresh message comes back after twice the ack wait.
        let o = opts(5, 5, None);
        assert_eq!(next_time_next(now, 0, &o, JITTER_MIN), now + 10 * S);
    }

    #[test]
    fn next_time_next_saturates_and_stays_sane() {
        let o = opts(30, 30, None);
        assert_eq!(next_time_next(i64::MAX, 0, &o, 1.0), i64::MAX);
        assert_eq!(
            next_time_next(i64::MAX - 1, i64::MAX, &o, JITTER_MAX),
            i64::MAX
        );
        let now = 1_732_950_000 * S;
        let t = next_time_next(now, i64::MAX, &o, JITTER_MAX);
        assert_eq!(t, now + 30 * S + NO_CAP_NS);
        assert!(t < i64::MAX);
        // A clock before 1970 does not underflow either.
        assert_eq!(next_time_next(i64::MIN, 0, &o, 1.0), i64::MIN + 60 * S);
    }

    #[test]
    fn random_jitter_stays_in_range() {
        for _ in 0..10_000 {
            let j = random_jitter();
            assert!((JITTER_MIN..=JITTER_MAX).contains(&j), "{j}");
        }
    }
}
