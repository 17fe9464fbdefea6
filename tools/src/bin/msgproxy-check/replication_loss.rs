//! What the database lost at a failover, told apart from what msgproxy did.
//!
//! Asynchronous replication acknowledges a commit before the replica has it: when the primary
//! is killed, the transactions it committed last may never reach the replica that is promoted.
//! Such a transaction got its OK (an INSERT, an ACK, or a proxy's claim before it sent the row)
//! and is not on the new primary. That is the database's loss, not a broken promise of msgproxy,
//! which can only serve what the server holds; the checker reports it apart ("lost by the
//! database") and does not count it as a violation. Everything the new primary does hold is
//! still checked in full.
//!
//! The messages and FIFO workloads' histories are accounted: the new primary's rows against what
//! the clients saw before the failover. The cut is the moment the replica is promoted: until
//! then it is read-only, so every OK a client saw before it came from the old primary, and
//! anything committed after it is on the new primary. An event is attributed to the database
//! only if it happened before the cut, and only in the one way its loss shows:
//! - an insert: committed (OK seen) or delivered before the kill, not in the database;
//! - an ack: its OK seen before the kill, the row not acked in the database (so a later
//!   delivery of it is no "delivered after ack" either);
//! - a claim: a delivery before the kill followed, after the kill, by another within the ack
//!   window, or more sends of an id before the kill than the database's epoch says. The
//!   checker cannot read the dead primary, so a claim is taken as lost from this evidence; the
//!   count is reported so that a run with many of them can be looked into.

use std::collections::{BTreeSet, HashMap};

use crate::events::{Event, Kind};
use crate::verify::Row;

/// The transactions the database lost at a failover, by message id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DatabaseLoss {
    /// When the replica was promoted (µs since the run started); `None`: no failover.
    pub failover_us: Option<u64>,
    /// Inserts committed or delivered before the failover that the new primary lacks.
    pub inserts: BTreeSet<i64>,
    /// ACKs that got their OK before the failover and are not in the new primary.
    pub acks: BTreeSet<i64>,
    /// Claims made before the failover that the new primary lacks (the row was sent again).
    pub claims: BTreeSet<i64>,
}

impl DatabaseLoss {
    /// Whether `id` missing from the database is the database's loss.
    pub fn lost_insert(&self, id: i64) -> bool {
        self.inserts.contains(&id)
    }

    /// Whether `id`'s ACK missing from the database is the database's loss.
    pub fn lost_ack(&self, id: i64) -> bool {
        self.acks.contains(&id)
    }

    /// Whether a delivery of `id` at `t1` followed by another at `t2` within the ack window is
    /// explained by a claim the database lost: the first before the failover, the second after.
    pub fn lost_claim_between(&self, id: i64, t1: u64, t2: u64) -> bool {
        self.claims.contains(&id) && self.failover_us.is_some_and(|f| t1 < f && f <= t2)
    }

    /// Whether `id`'s claim or ack (made before the cut) may be lost and a delivery of something
    /// else at `t2`, after the cut, while `id` (sent at `t1`) seemed in flight, is explained by it
    /// (FIFO: the next message of a key).
    pub fn lost_state_between(&self, id: i64, t1: u64, t2: u64) -> bool {
        (self.claims.contains(&id) || self.acks.contains(&id))
            && self.failover_us.is_some_and(|f| t1 < f && f <= t2)
    }

    /// Whether more sends of `id` than its epoch says is explained by a lost claim.
    pub fn lost_claim(&self, id: i64) -> bool {
        self.claims.contains(&id)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.inserts.is_empty() && self.acks.is_empty() && self.claims.is_empty()
    }

    /// The summary line.
    pub fn describe(&self) -> String {
        let Some(f) = self.failover_us else {
            return "no failover".into();
        };
        let show = |s: &BTreeSet<i64>| {
            let ids: Vec<String> = s.iter().take(10).map(i64::to_string).collect();
            if s.is_empty() {
                String::new()
            } else {
                format!(
                    " (ids {}{})",
                    ids.join(", "),
                    if s.len() > 10 { ", ..." } else { "" }
                )
            }
        };
        format!(
            "lost by the database at the failover ({:.1} s): {} transactions: {} inserts{}, {} acks{}, {} claims{}; not counted as violations",
            f as f64 / 1e6,
            self.inserts.len() + self.acks.len() + self.claims.len(),
            self.inserts.len(),
            show(&self.inserts),
            self.acks.len(),
            show(&self.acks),
            self.claims.len(),
            show(&self.claims),
        )
    }
}

/// What the database lost at a failover promoted at `failover_us`, from the messages workload's
/// `events` (in time order) and the new primary's rows `db`. `ack_wait_us` and `slack_us` are
/// the ack-window check's.
pub fn account(
    events: &[Event],
    db: &HashMap<i64, Row>,
    failover_us: u64,
    ack_wait_us: u64,
    slack_us: u64,
) -> DatabaseLoss {
    account_by(
        events,
        |id| db.get(&id).map(|r| (r.acked(), r.epoch)),
        failover_us,
        ack_wait_us,
        slack_us,
    )
}

/// [`account`] for any workload: `state(id)` is the id's final state on the new primary, `None`
/// when it is not there, else whether it is done (acked, or dead) and its sends (epoch).
pub fn account_by(
    events: &[Event],
    state: impl Fn(i64) -> Option<(bool, i64)>,
    failover_us: u64,
    ack_wait_us: u64,
    slack_us: u64,
) -> DatabaseLoss {
    let mut loss = DatabaseLoss {
        failover_us: Some(failover_us),
        ..DatabaseLoss::default()
    };
    let mut deliveries: HashMap<i64, Vec<u64>> = HashMap::new();
    for e in events {
        let before = e.t_us < failover_us;
        match e.kind {
            Kind::Committed | Kind::Delivered if before && state(e.id).is_none() => {
                loss.inserts.insert(e.id);
            }
            Kind::Acked if before && !state(e.id).is_some_and(|(done, _)| done) => {
                loss.acks.insert(e.id);
            }
            _ => {}
        }
        if e.kind == Kind::Delivered {
            deliveries.entry(e.id).or_default().push(e.t_us);
        }
    }
    for (id, ts) in &deliveries {
        let Some((_, epoch)) = state(*id) else {
            continue;
        };
        let across = ts.windows(2).any(|w| {
            w[0] < failover_us && failover_us <= w[1] && w[1] - w[0] + slack_us < ack_wait_us
        });
        let sent_before = ts.iter().filter(|&&t| t < failover_us).count() as i64;
        let unclaimed = ts.len() as i64 > epoch && sent_before > 0;
        if across || unclaimed {
            loss.claims.insert(*id);
        }
    }
    loss
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t_ms: u64, kind: Kind, id: i64) -> Event {
        Event {
            t_us: t_ms * 1000,
            kind,
            id,
            who: "c".into(),
        }
    }

    fn row(epoch: i64, acked: bool) -> Row {
        Row {
            epoch,
            time_acked: acked.then_some(1),
        }
    }

    const FAILOVER_MS: u64 = 10_000;

    fn account_ms(events: &[Event], db: &[(i64, Row)]) -> DatabaseLoss {
        let db: HashMap<i64, Row> = db.iter().copied().collect();
        account(events, &db, FAILOVER_MS * 1000, 2_000_000, 500_000)
    }

    #[test]
    fn an_insert_acked_before_the_failover_and_missing_is_the_databases() {
        let events = [
            ev(9_990, Kind::Committed, 1),
            ev(9_995, Kind::Delivered, 2),
            // After the failover: missing is msgproxy's (or the new primary's) problem.
            ev(10_500, Kind::Committed, 3),
        ];
        let loss = account_ms(&events, &[]);
        assert_eq!(loss.inserts, BTreeSet::from([1, 2]));
        assert!(!loss.lost_insert(3));
    }

    #[test]
    fn an_ack_before_the_failover_that_did_not_replicate_is_the_databases() {
        let events = [
            ev(100, Kind::Committed, 1),
            ev(200, Kind::Delivered, 1),
            ev(9_900, Kind::Acked, 1),
            ev(300, Kind::Committed, 2),
            ev(400, Kind::Delivered, 2),
            ev(10_100, Kind::Acked, 2),
        ];
        let loss = account_ms(&events, &[(1, row(1, false)), (2, row(1, false))]);
        assert_eq!(loss.acks, BTreeSet::from([1]));
        // Acked in the database: nothing lost.
        let loss = account_ms(&events[..3], &[(1, row(1, true))]);
        assert!(loss.is_empty(), "{loss:?}");
    }

    #[test]
    fn only_a_redelivery_across_the_failover_is_a_lost_claim() {
        let events = [
            ev(9_500, Kind::Delivered, 1),
            ev(10_200, Kind::Delivered, 1),
            // Both after the failover, too close: msgproxy's violation, not excused.
            ev(11_000, Kind::Delivered, 2),
            ev(11_500, Kind::Delivered, 2),
        ];
        let loss = account_ms(&events, &[(1, row(2, false)), (2, row(2, false))]);
        assert_eq!(loss.claims, BTreeSet::from([1]));
        assert!(loss.lost_claim_between(1, 9_500_000, 10_200_000));
        assert!(!loss.lost_claim_between(2, 11_000_000, 11_500_000));
        // A new primary whose epoch lacks the claim sent before the failover.
        let far = [
            ev(5_000, Kind::Delivered, 3),
            ev(12_000, Kind::Delivered, 3),
        ];
        assert_eq!(
            account_ms(&far, &[(3, row(1, false))]).claims,
            BTreeSet::from([3])
        );
        assert!(account_ms(&far, &[(3, row(2, false))]).is_empty());
    }

    #[test]
    fn the_summary_names_the_counts() {
        let loss = account_ms(&[ev(9_990, Kind::Committed, 7)], &[]);
        let line = loss.describe();
        assert!(line.contains("1 transactions: 1 inserts (ids 7)"), "{line}");
        assert_eq!(DatabaseLoss::default().describe(), "no failover");
    }
}
