//! Claim pacing: how often a table's streams may start a claim transaction.
//!
//! Every claim is a durable commit, and on a busy server commits are what everyone waits for:
//! a claim carrying 2 rows costs the server as much as a producer's INSERT. So when the server's
//! commits queue up, the manager lets a short wait pass between one hand-out and the next, and
//! each claim carries more rows.
//!
//! The signal is the claims' own time, as a delay-based congestion control reads round trips:
//! the fastest recent claim is what a claim costs on an idle server; time beyond that is time
//! spent queueing behind other commits. The wait is a multiple of that queueing time. On an
//! idle server it is zero, so light traffic keeps its latency; a full batch (`vt_batch_size`
//! rows due) is handed out at once, whatever the pace.

use std::time::Duration;

use tokio::time::Instant;

/// The pacer of one table.
#[derive(Debug)]
pub struct ClaimPacer {
    /// The wait between hand-outs, in multiples of the recent claim time; 0 turns pacing off.
    factor: f64,
    /// The last hand-out.
    last_handout: Option<Instant>,
    /// Recent claims' time from hand-out to committed claim, smoothed.
    claim_time: Duration,
    /// The fastest claim of the current and of the previous window (see `MIN_WINDOW`).
    fastest: [Duration; 2],
    window_start: Option<Instant>,
}

/// How long a fastest claim is remembered (one to two windows): long enough to span a burst,
/// short enough to follow a server whose commits became slower for good.
const MIN_WINDOW: Duration = Duration::from_secs(10);

/// Weight of the newest claim in the smoothed claim time.
const SMOOTHING: f64 = 0.2;

/// The longest wait between hand-outs, however slow claims become: a bound on the latency
/// pacing can add.
const MAX_WAIT: Duration = Duration::from_millis(20);

impl ClaimPacer {
    pub fn new(factor: f64) -> ClaimPacer {
        ClaimPacer {
            factor: if factor.is_finite() {
                factor.max(0.0)
            } else {
                0.0
            },
            last_handout: None,
            claim_time: Duration::ZERO,
            fastest: [Duration::MAX; 2],
            window_start: None,
        }
    }

    /// Whether a batch of `due` rows may be handed out at `now` (`batch_size` or more always
    /// may); otherwise when it may.
    pub fn ready_at(&self, now: Instant, due: usize, batch_size: usize) -> Option<Instant> {
        if self.factor == 0.0 || due >= batch_size {
            return None;
        }
        let queueing = self.claim_time.saturating_sub(self.fastest());
        let wait = queueing.mul_f64(self.factor).min(MAX_WAIT);
        let at = self.last_handout? + wait;
        (at > now).then_some(at)
    }

    pub fn handed_out(&mut self, now: Instant) {
        self.last_handout = Some(now);
    }

    fn fastest(&self) -> Duration {
        self.fastest[0].min(self.fastest[1])
    }

    /// A claim finished `took` after its batch was handed out, at `now`.
    pub fn claimed(&mut self, now: Instant, took: Duration) {
        let start = *self.window_start.get_or_insert(now);
        if now.duration_since(start) >= MIN_WINDOW {
            self.fastest = [self.fastest[1], Duration::MAX];
            self.window_start = Some(now);
        }
        self.fastest[1] = self.fastest[1].min(took);
        self.claim_time = if self.claim_time.is_zero() {
            took
        } else {
            self.claim_time.mul_f64(1.0 - SMOOTHING) + took.mul_f64(SMOOTHING)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn off_never_waits() {
        let mut p = ClaimPacer::new(0.0);
        let t = Instant::now();
        p.handed_out(t);
        p.claimed(t, ms(1));
        p.claimed(t, ms(5));
        assert_eq!(p.ready_at(t, 1, 100), None);
    }

    #[test]
    fn claims_at_their_fastest_never_wait() {
        let mut p = ClaimPacer::new(3.0);
        let t = Instant::now();
        assert_eq!(p.ready_at(t, 1, 100), None, "nothing handed out yet");
        for _ in 0..10 {
            p.handed_out(t);
            p.claimed(t, ms(1));
        }
        assert_eq!(p.ready_at(t, 1, 100), None);
    }

    #[test]
    fn slower_claims_wait_a_multiple_of_their_queueing() {
        let mut p = ClaimPacer::new(2.0);
        let t = Instant::now();
        p.claimed(t, ms(1));
        // Smoothed: 1 ms * 0.8 + 6 ms * 0.2 = 2 ms, 1 ms of it queueing.
        p.claimed(t, ms(6));
        p.handed_out(t);
        assert_eq!(p.ready_at(t, 1, 100), Some(t + ms(2)));
        assert_eq!(p.ready_at(t + ms(2), 1, 100), None);
        assert_eq!(p.ready_at(t, 100, 100), None, "a full batch goes at once");
    }

    #[test]
    fn the_wait_is_bounded() {
        let mut p = ClaimPacer::new(10.0);
        let t = Instant::now();
        p.claimed(t, ms(1));
        for _ in 0..50 {
            p.claimed(t, ms(30));
        }
        p.handed_out(t);
        assert_eq!(p.ready_at(t, 1, 100), Some(t + MAX_WAIT));
    }

    #[test]
    fn the_fastest_claim_is_forgotten_after_two_windows() {
        let mut p = ClaimPacer::new(1.0);
        let t = Instant::now();
        p.claimed(t, ms(1));
        p.claimed(t + MIN_WINDOW, ms(4));
        assert_eq!(p.fastest(), ms(1), "still within the previous window");
        p.claimed(t + MIN_WINDOW * 2, ms(4));
        assert_eq!(p.fastest(), ms(4));
    }
}
