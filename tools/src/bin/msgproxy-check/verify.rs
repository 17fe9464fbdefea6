//! The verdict, from the clients' logs and the database's final state alone.
//!
//! The checks, each a promise of docs/MESSAGING.md (section numbers there):
//! - `lost`: an id whose INSERT (or COMMIT) got its OK, or that was delivered, is missing from the
//!   database (4).
//! - `never delivered`: a row of the database (committed, whether or not its producer saw the OK)
//!   never reached a consumer (3, 5).
//! - `phantom`: a delivered or stored id no producer ever inserted, or one inserted in a
//!   transaction that never committed (4).
//! - `ack window`: an id delivered again earlier than `ack_wait - slack` after its previous
//!   delivery. No exceptions: a claim commits in the database before its row is sent, so even a
//!   killed proxy's claims hold (5).
//! - `unclaimed send`: an id delivered more often than its `epoch` (sends so far) says it was
//!   claimed (5).
//! - `ack lost`: an id whose ACK got its OK is not acked in the database (6).
//! - `delivered after ack`: an id delivered later than `slack` after an ACK of it returned OK (6).
//!
//! `slack` only covers the time between the proxy acting and a client noticing: every time is
//! read from the same clock.
//!
//! After a failover to an asynchronous replica, what the database lost (`replication_loss`) is
//! not checked against msgproxy: those ids are skipped by the check their loss would fail.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::events::{Event, Kind};
use crate::replication_loss::DatabaseLoss;

/// A row's final state in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub epoch: i64,
    pub time_acked: Option<i64>,
}

impl Row {
    /// Acked means `time_acked` is neither NULL nor 0 (MESSAGING.md section 2).
    pub fn acked(&self) -> bool {
        self.time_acked.is_some_and(|t| t != 0)
    }
}

pub struct Limits {
    pub ack_wait_us: u64,
    pub slack_us: u64,
}

#[derive(Debug, Default)]
pub struct Report {
    pub tried: usize,
    pub committed: usize,
    pub rolled_back: usize,
    pub rows: usize,
    pub rows_acked: usize,
    pub deliveries: usize,
    pub delivered_ids: usize,
    pub redelivered_ids: usize,
    pub acked_ids: usize,
    /// Violations by check, each with its descriptions (ids, times, consumers).
    pub violations: BTreeMap<&'static str, Vec<String>>,
}

impl Report {
    #[cfg(test)]
    pub fn violation_count(&self) -> usize {
        self.violations.values().map(Vec::len).sum()
    }

    fn violate(&mut self, check: &'static str, what: String) {
        self.violations.entry(check).or_default().push(what);
    }
}

fn secs(us: u64) -> String {
    format!("{:.3} s", us as f64 / 1e6)
}

/// `loss`: what the database lost at a failover (empty without one), left out of the checks.
pub fn verify(
    events: &[Event],
    db: &HashMap<i64, Row>,
    limits: &Limits,
    loss: &DatabaseLoss,
) -> Report {
    let mut r = Report {
        rows: db.len(),
        rows_acked: db.values().filter(|row| row.acked()).count(),
        ..Report::default()
    };
    let mut tried = HashSet::new();
    let mut committed = HashSet::new();
    let mut rolled_back = HashSet::new();
    // Per id, in time order (events are sorted): deliveries (time, consumer) and the first ACK OK.
    let mut deliveries: HashMap<i64, Vec<(u64, &str)>> = HashMap::new();
    let mut first_ack: HashMap<i64, (u64, &str)> = HashMap::new();
    for e in events {
        match e.kind {
            Kind::Try => {
                tried.insert(e.id);
            }
            Kind::Committed => {
                committed.insert(e.id);
            }
            Kind::RolledBack => {
                rolled_back.insert(e.id);
            }
            Kind::Delivered => {
                r.deliveries += 1;
                deliveries.entry(e.id).or_default().push((e.t_us, &e.who));
            }
            Kind::Acked => {
                first_ack.entry(e.id).or_insert((e.t_us, &e.who));
            }
            Kind::AckSent | Kind::AckFailed => {}
        }
    }
    r.tried = tried.len();
    r.committed = committed.len();
    r.rolled_back = rolled_back.len();
    r.delivered_ids = deliveries.len();
    r.redelivered_ids = deliveries.values().filter(|d| d.len() > 1).count();
    r.acked_ids = first_ack.len();

    let sorted = |set: &HashSet<i64>| {
        let mut v: Vec<i64> = set.iter().copied().collect();
        v.sort_unstable();
        v
    };
    for id in sorted(&committed) {
        if !db.contains_key(&id) && !loss.lost_insert(id) {
            r.violate(
                "lost",
                format!("id {id}: its INSERT got OK, but it is not in the database"),
            );
        }
    }
    let stored: HashSet<i64> = db.keys().copied().collect();
    for id in sorted(&stored) {
        if !deliveries.contains_key(&id) {
            let how = if committed.contains(&id) {
                "committed (OK seen)"
            } else {
                "committed (its producer saw no OK)"
            };
            r.violate(
                "never delivered",
                format!("id {id}: {how}, in the database, never delivered"),
            );
        }
        if !tried.contains(&id) {
            r.violate(
                "phantom",
                format!("id {id}: in the database, never inserted"),
            );
        }
        if rolled_back.contains(&id) {
            r.violate(
                "phantom",
                format!(
                    "id {id}: in the database, but inserted in a transaction that never committed"
                ),
            );
        }
    }
    let mut delivered: Vec<i64> = deliveries.keys().copied().collect();
    delivered.sort_unstable();
    for id in delivered {
        let ds = &deliveries[&id];
        if !tried.contains(&id) {
            r.violate("phantom", format!("id {id}: delivered, never inserted"));
        } else if !db.contains_key(&id)
            && !committed.contains(&id)
            && !rolled_back.contains(&id)
            && !loss.lost_insert(id)
        {
            // Its producer saw no OK, but a delivered row was committed (rows become visible to
            // streams only when their transaction commits), so it must still be there.
            r.violate(
                "lost",
                format!(
                    "id {id}: delivered at {}, but not in the database",
                    secs(ds[0].0)
                ),
            );
        }
        if rolled_back.contains(&id) {
            r.violate(
                "phantom",
                format!("id {id}: delivered, but inserted in a transaction that never committed"),
            );
        }
        for w in ds.windows(2) {
            let ((t1, c1), (t2, c2)) = (w[0], w[1]);
            if t2 - t1 + limits.slack_us < limits.ack_wait_us
                && !loss.lost_claim_between(id, t1, t2)
            {
                r.violate(
                    "ack window",
                    format!(
                        "id {id}: delivered to {c1} at {} and again to {c2} at {} ({} later; ack wait {})",
                        secs(t1),
                        secs(t2),
                        secs(t2 - t1),
                        secs(limits.ack_wait_us)
                    ),
                );
            }
        }
        if let Some(row) = db.get(&id) {
            if ds.len() as i64 > row.epoch && !loss.lost_claim(id) {
                r.violate(
                    "unclaimed send",
                    format!(
                        "id {id}: delivered {} times, but its epoch is {}",
                        ds.len(),
                        row.epoch
                    ),
                );
            }
        }
        if let Some(&(ta, ca)) = first_ack.get(&id).filter(|_| !loss.lost_ack(id)) {
            for &(t, c) in ds {
                if t > ta + limits.slack_us {
                    r.violate(
                        "delivered after ack",
                        format!(
                            "id {id}: acked by {ca} (OK at {}), delivered again to {c} at {}",
                            secs(ta),
                            secs(t)
                        ),
                    );
                }
            }
        }
    }
    let mut acked: Vec<i64> = first_ack.keys().copied().collect();
    acked.sort_unstable();
    for id in acked {
        let (ta, ca) = first_ack[&id];
        if loss.lost_ack(id) {
            continue;
        }
        match db.get(&id) {
            Some(row) if row.acked() => {}
            Some(row) => r.violate(
                "ack lost",
                format!(
                    "id {id}: ACK by {ca} got OK at {}, but time_acked is {:?}",
                    secs(ta),
                    row.time_acked
                ),
            ),
            None => r.violate(
                "ack lost",
                format!(
                    "id {id}: ACK by {ca} got OK at {}, but the row is gone",
                    secs(ta)
                ),
            ),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t_ms: u64, kind: Kind, id: i64, who: &str) -> Event {
        Event {
            t_us: t_ms * 1000,
            kind,
            id,
            who: who.into(),
        }
    }

    fn row(epoch: i64, acked: bool) -> Row {
        Row {
            epoch,
            time_acked: acked.then_some(1),
        }
    }

    const LIMITS: Limits = Limits {
        ack_wait_us: 2_000_000,
        slack_us: 500_000,
    };

    fn checks(events: &[Event], db: &[(i64, Row)]) -> Vec<&'static str> {
        let db: HashMap<i64, Row> = db.iter().copied().collect();
        verify(events, &db, &LIMITS, &DatabaseLoss::default())
            .violations
            .into_keys()
            .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let events = [
            ev(0, Kind::Try, 1, "p"),
            ev(5, Kind::Committed, 1, "p"),
            ev(6, Kind::Delivered, 1, "c0"),
            // not acked: back after ack wait + backoff, to another consumer
            ev(4100, Kind::Delivered, 1, "c1"),
            ev(4110, Kind::Acked, 1, "c1"),
            // uncertain insert that did commit
            ev(10, Kind::Try, 2, "p"),
            ev(20, Kind::Delivered, 2, "c0"),
            // rolled back
            ev(30, Kind::Try, 3, "p"),
            ev(31, Kind::RolledBack, 3, "p"),
        ];
        let r = verify(
            &events,
            &[(1, row(2, true)), (2, row(1, false))]
                .into_iter()
                .collect(),
            &LIMITS,
            &DatabaseLoss::default(),
        );
        assert_eq!(r.violation_count(), 0, "{:?}", r.violations);
        assert_eq!((r.committed, r.redelivered_ids, r.acked_ids), (1, 1, 1));
    }

    #[test]
    fn each_broken_promise_is_caught() {
        let base = [ev(0, Kind::Try, 1, "p"), ev(5, Kind::Committed, 1, "p")];
        // lost, and so never delivered either
        assert_eq!(checks(&base, &[]), vec!["lost"]);
        // an insert whose outcome its producer did not learn, delivered, then gone
        let unknown = [ev(0, Kind::Try, 2, "p"), ev(9, Kind::Delivered, 2, "c")];
        assert_eq!(checks(&unknown, &[]), vec!["lost"]);
        // in the database, never delivered
        assert_eq!(
            checks(&base, &[(1, row(0, false))]),
            vec!["never delivered"]
        );
        // delivered twice within one ack window
        let twice = [
            &base[..],
            &[
                ev(10, Kind::Delivered, 1, "c0"),
                ev(900, Kind::Delivered, 1, "c1"),
            ],
        ]
        .concat();
        assert_eq!(checks(&twice, &[(1, row(2, false))]), vec!["ack window"]);
        // two sends, one claim
        assert_eq!(
            checks(&twice, &[(1, row(1, false))]),
            vec!["ack window", "unclaimed send"]
        );
        // ack OK, yet not acked in the database, and sent again
        let acked = [
            &base[..],
            &[
                ev(10, Kind::Delivered, 1, "c0"),
                ev(20, Kind::Acked, 1, "c0"),
                ev(4100, Kind::Delivered, 1, "c1"),
            ],
        ]
        .concat();
        assert_eq!(
            checks(&acked, &[(1, row(2, false))]),
            vec!["ack lost", "delivered after ack"]
        );
        // a rolled-back insert that exists
        let rb = [
            ev(0, Kind::Try, 1, "p"),
            ev(1, Kind::RolledBack, 1, "p"),
            ev(2, Kind::Delivered, 1, "c"),
        ];
        assert_eq!(checks(&rb, &[(1, row(1, false))]), vec!["phantom"]);
    }

    #[test]
    fn what_the_database_lost_at_a_failover_is_no_violation() {
        // Committed, delivered, acked before the failover at 10 s; the new primary lacks the ack
        // and the claim, so the row comes again after the failover, too early.
        let events = [
            ev(9_000, Kind::Try, 1, "p"),
            ev(9_005, Kind::Committed, 1, "p"),
            ev(9_500, Kind::Delivered, 1, "c0"),
            ev(9_600, Kind::Acked, 1, "c0"),
            ev(10_300, Kind::Delivered, 1, "c1"),
            // An insert the new primary never got.
            ev(9_700, Kind::Try, 2, "p"),
            ev(9_705, Kind::Committed, 2, "p"),
        ];
        let db: HashMap<i64, Row> = [(1, row(1, false))].into_iter().collect();
        let loss = crate::replication_loss::account(&events, &db, 10_000_000, 2_000_000, 500_000);
        assert_eq!(loss.inserts.len() + loss.acks.len() + loss.claims.len(), 3);
        let r = verify(&events, &db, &LIMITS, &loss);
        assert_eq!(r.violation_count(), 0, "{:?}", r.violations);
        // Without the failover the same history is four broken promises.
        let r = verify(&events, &db, &LIMITS, &DatabaseLoss::default());
        let checks: Vec<&str> = r.violations.into_keys().collect();
        assert_eq!(
            checks,
            [
                "ack lost",
                "ack window",
                "delivered after ack",
                "lost",
                "unclaimed send"
            ]
        );
    }
}
