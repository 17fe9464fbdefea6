//! Logging for background jobs that fail on every tick while the backend is away (a table's
//! poll and purge, the reload of the message tables). Each failure used to log a line: an hour's
//! outage left thousands per table, and the one line that said what went wrong first scrolled
//! away. Now a run of failures logs its first one, then at most one line per
//! [`REMIND_EVERY`] with how many failed meanwhile, and one line when the job works again.

use std::fmt::Display;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::{info, warn};

/// How often a failure that keeps happening is logged again.
pub const REMIND_EVERY: Duration = Duration::from_secs(60);

/// One job's run of failures, if it is in one.
#[derive(Default)]
pub struct RepeatedFailure {
    run: Mutex<Option<Run>>,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    began: Instant,
    logged_at: Instant,
    /// Failures since the last line logged.
    unlogged: u64,
    /// Failures in the whole run.
    total: u64,
}

/// What a failure or a success should log.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The first failure of a run.
    Began,
    /// The run goes on: `failures` since the last line, over `over`.
    StillFailing { failures: u64, over: Duration },
    /// The job worked again after `failures` in a row over `over`.
    Recovered { failures: u64, over: Duration },
}

impl RepeatedFailure {
    /// Notes that `job` (e.g. "polling `db`.`t`") failed with `error`, and logs it if it is the
    /// first failure of a run or the run has not been logged for [`REMIND_EVERY`].
    pub fn failed(&self, job: impl Display, error: impl Display) {
        match self.note_failure(Instant::now()) {
            Some(Line::Began) => warn!("{job} failed: {error}; retrying"),
            Some(Line::StillFailing { failures, over }) => warn!(
                "{job} still failing: {failures} more failure(s) in the last {}s, the latest: {error}",
                over.as_secs()
            ),
            _ => {}
        }
    }

    /// Notes that `job` worked, and logs so if it had been failing.
    pub fn succeeded(&self, job: impl Display) {
        if let Some(Line::Recovered { failures, over }) = self.note_success(Instant::now()) {
            info!(
                "{job} works again, after {failures} failure(s) over {}s",
                over.as_secs()
            );
        }
    }

    fn note_failure(&self, now: Instant) -> Option<Line> {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = run.as_mut() else {
            *run = Some(Run {
                began: now,
                logged_at: now,
                unlogged: 0,
                total: 1,
            });
            return Some(Line::Began);
        };
        r.total += 1;
        r.unlogged += 1;
        let over = now.saturating_duration_since(r.logged_at);
        if over < REMIND_EVERY {
            return None;
        }
        let failures = r.unlogged;
        r.unlogged = 0;
        r.logged_at = now;
        Some(Line::StillFailing { failures, over })
    }

    fn note_success(&self, now: Instant) -> Option<Line> {
        let run = self.run.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        Some(Line::Recovered {
            failures: run.total,
            over: now.saturating_duration_since(run.began),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_run_logs_its_first_failure_then_once_a_minute_then_its_end() {
        let f = RepeatedFailure::default();
        let t0 = Instant::now();
        assert_eq!(f.note_success(t0), None, "no run: nothing to say");
        assert_eq!(f.note_failure(t0), Some(Line::Began));
        for s in 1..60 {
            assert_eq!(f.note_failure(t0 + secs(s)), None, "second {s}");
        }
        assert_eq!(
            f.note_failure(t0 + secs(60)),
            Some(Line::StillFailing {
                failures: 60,
                over: secs(60)
            })
        );
        assert_eq!(f.note_failure(t0 + secs(61)), None);
        assert_eq!(
            f.note_success(t0 + secs(90)),
            Some(Line::Recovered {
                failures: 62,
                over: secs(90)
            })
        );
        assert_eq!(f.note_success(t0 + secs(91)), None, "logged once");
    }

    #[test]
    fn a_failure_after_a_success_begins_a_new_run() {
        let f = RepeatedFailure::default();
        let t0 = Instant::now();
        assert_eq!(f.note_failure(t0), Some(Line::Began));
        assert!(f.note_success(t0 + secs(1)).is_some());
        assert_eq!(f.note_failure(t0 + secs(2)), Some(Line::Began));
    }
}
