//! The FIFO-group workload's verdict (docs/MESSAGING.md §9 and §11), from the clients' logs
//! (`logs/fifo/`, the `events` format) and the final state of the table and its dead letters.
//!
//! The checks:
//! - `lost`: a message whose INSERT got OK, or that was delivered, is in neither the table nor
//!   the dead-letter table (dead letters lose nothing).
//! - `phantom`: a message in both tables, or delivered and never inserted.
//! - `overlap`: two deliveries of one key in flight at once: a delivery earlier than `slack`
//!   before the previous one of its key was released, that is before its ack wait ran out, or
//!   before an ACK of it was sent after the delivery, or before an ACK sent earlier and still
//!   unanswered at the delivery got its answer (an ACK racing the redelivery: it may commit
//!   after the redelivery's claim and release the key then) (§11: at most one message of a key
//!   in flight).
//! - `order`: a key's deliveries going back to a smaller id, or moving on to the next message
//!   while the previous one is neither acked nor dead (§11: one at a time, in id order; a
//!   message whose head times out is sent again, still first).
//! - `skipped`: a committed message of a key never delivered although a larger one of its key
//!   was (§11).
//! - `dead too soon` / `sent when dead`: a dead message with fewer than `max_attempts` sends
//!   recorded in its `epoch`/`attempts`, or delivered more often than that (§9).
//! - `ack lost`: an ACK that got OK, yet the message is neither acked nor dead; `delivered after
//!   ack`: delivered again later than `slack` after that OK.
//! - `poison acked`: a message the consumers never ack ended acked.
//!
//! After a failover to an asynchronous replica, what the database lost (`replication_loss`) is
//! left out: a lost insert is not `lost`, a lost ack is neither `ack lost` nor `delivered after
//! ack`, and a key's delivery after the failover is no `overlap` or `order` against a message
//! sent before it whose claim or ack the new primary lacks.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::events::{Event, Kind};
use crate::replication_loss::DatabaseLoss;

/// A message's final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    pub key: i64,
    pub poison: bool,
    /// Sends counted by the server (`epoch`, or the dead-letter table's `attempts`).
    pub sends: i64,
    pub state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Acked,
    Dead,
    /// Unacked and not dead: still due (or in flight).
    Due,
}

pub struct Limits {
    pub ack_wait_us: u64,
    pub slack_us: u64,
    pub max_attempts: i64,
}

#[derive(Debug, Default)]
pub struct Report {
    pub committed: usize,
    pub messages: usize,
    pub keys: usize,
    pub acked: usize,
    pub dead: usize,
    pub dead_poison: usize,
    pub due: usize,
    pub deliveries: usize,
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

/// `table` holds the main table's rows, `dead` the dead-letter table's (empty when dead letters
/// stay in place).
pub fn verify(
    events: &[Event],
    table: &HashMap<i64, Msg>,
    dead: &HashMap<i64, Msg>,
    limits: &Limits,
    loss: &DatabaseLoss,
) -> Report {
    let mut r = Report::default();
    let mut tried = HashSet::new();
    let mut committed = HashSet::new();
    // Per id: deliveries (time, consumer), ACK sends, first ACK OK.
    let mut deliveries: Vec<(u64, i64, &str)> = Vec::new();
    let mut ack_sent: HashMap<i64, Vec<u64>> = HashMap::new();
    // When each ACK covering an id ended (OK or error), in time order.
    let mut ack_ended: HashMap<i64, Vec<u64>> = HashMap::new();
    let mut first_ack: HashMap<i64, u64> = HashMap::new();
    for e in events {
        match e.kind {
            Kind::Try => {
                tried.insert(e.id);
            }
            Kind::Committed => {
                committed.insert(e.id);
            }
            Kind::RolledBack => {}
            Kind::Delivered => deliveries.push((e.t_us, e.id, &e.who)),
            Kind::AckSent => ack_sent.entry(e.id).or_default().push(e.t_us),
            Kind::Acked => {
                first_ack.entry(e.id).or_insert(e.t_us);
                ack_ended.entry(e.id).or_default().push(e.t_us);
            }
            Kind::AckFailed => ack_ended.entry(e.id).or_default().push(e.t_us),
        }
    }
    r.committed = committed.len();
    r.deliveries = deliveries.len();
    let mut all: HashMap<i64, Msg> = table.clone();
    for (&id, m) in dead {
        if all.insert(id, *m).is_some() {
            r.violate(
                "phantom",
                format!("id {id}: both in the table and among the dead letters"),
            );
        }
    }
    r.messages = all.len();
    for m in all.values() {
        match m.state {
            State::Acked => r.acked += 1,
            State::Dead => {
                r.dead += 1;
                r.dead_poison += m.poison as usize;
            }
            State::Due => r.due += 1,
        }
    }
    let mut ids: Vec<i64> = committed.iter().copied().collect();
    ids.sort_unstable();
    for id in ids {
        if !all.contains_key(&id) && !loss.lost_insert(id) {
            r.violate(
                "lost",
                format!(
                    "id {id}: its INSERT got OK, but it is neither in the table nor a dead letter"
                ),
            );
        }
    }

    // Per key: its messages (id order) and its deliveries (time order).
    let mut keys: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (&id, m) in &all {
        keys.entry(m.key).or_default().push(id);
    }
    r.keys = keys.len();
    let mut per_key: HashMap<i64, Vec<(u64, i64, &str)>> = HashMap::new();
    let mut count: HashMap<i64, i64> = HashMap::new();
    deliveries.sort_by_key(|d| d.0);
    for &(t, id, who) in &deliveries {
        *count.entry(id).or_default() += 1;
        match all.get(&id) {
            Some(m) => per_key.entry(m.key).or_default().push((t, id, who)),
            None if loss.lost_insert(id) => {}
            None if tried.contains(&id) => r.violate(
                "lost",
                format!("id {id}: delivered at {}, but in neither table", secs(t)),
            ),
            None => r.violate("phantom", format!("id {id}: delivered, never inserted")),
        }
        if let Some(&ta) = first_ack.get(&id).filter(|_| !loss.lost_ack(id)) {
            if t > ta + limits.slack_us {
                r.violate(
                    "delivered after ack",
                    format!(
                        "id {id}: ACK got OK at {}, delivered again to {who} at {}",
                        secs(ta),
                        secs(t)
                    ),
                );
            }
        }
    }
    // When the delivery of `id` at `t` stopped holding its key: its ack wait ran out, or an ACK
    // of it was sent after `t`, or an ACK sent before `t` ended (OK or error) after it. An ACK
    // sent before `t` that never ended (its session was cancelled) may have released it at once.
    let released = |id: i64, t: u64| -> u64 {
        let mut at = t + limits.ack_wait_us;
        let ended = ack_ended.get(&id).map(Vec::as_slice).unwrap_or(&[]);
        for &sent in ack_sent.get(&id).map(Vec::as_slice).unwrap_or(&[]) {
            let release = if sent >= t {
                sent
            } else {
                match ended.iter().copied().find(|&e| e >= sent) {
                    Some(end) if end >= t => end,
                    Some(_) => continue,
                    None => t,
                }
            };
            at = at.min(release);
        }
        at
    };
    for (key, messages) in &mut keys {
        messages.sort_unstable();
        let ds = per_key.get(key).map(Vec::as_slice).unwrap_or(&[]);
        for w in ds.windows(2) {
            let ((t1, id1, c1), (t2, id2, c2)) = (w[0], w[1]);
            if loss.lost_state_between(id1, t1, t2) || loss.lost_state_between(id2, t1, t2) {
                continue;
            }
            let rel = released(id1, t1);
            if t2 + limits.slack_us < rel {
                r.violate(
                    "overlap",
                    format!(
                        "key {key}: id {id2} delivered to {c2} at {} while id {id1} (to {c1} at {}) was in flight until {}",
                        secs(t2),
                        secs(t1),
                        secs(rel)
                    ),
                );
            }
            if id2 < id1 {
                r.violate(
                    "order",
                    format!(
                        "key {key}: id {id2} delivered at {} after id {id1} at {}",
                        secs(t2),
                        secs(t1)
                    ),
                );
            } else if id2 > id1 {
                let done = ack_sent
                    .get(&id1)
                    .is_some_and(|v| v.iter().any(|&a| a <= t2 + limits.slack_us))
                    || all.get(&id1).is_some_and(|m| m.state == State::Dead);
                if !done {
                    r.violate(
                        "order",
                        format!(
                            "key {key}: id {id2} delivered at {} while id {id1} (last sent at {}) was neither acked nor dead",
                            secs(t2),
                            secs(t1)
                        ),
                    );
                }
            }
        }
        // Nothing of the key skipped: every message below the largest delivered one was delivered.
        if let Some(&top) = ds.iter().map(|(_, id, _)| id).max() {
            for &id in messages.iter().filter(|&&id| id < top) {
                if !count.contains_key(&id) {
                    r.violate(
                        "skipped",
                        format!("key {key}: id {id} never delivered, but id {top} of its key was"),
                    );
                }
            }
        }
    }

    let mut sorted: Vec<(&i64, &Msg)> = all.iter().collect();
    sorted.sort_unstable_by_key(|(id, _)| **id);
    for (&id, m) in sorted {
        let sent = count.get(&id).copied().unwrap_or(0);
        if m.state == State::Dead {
            if m.sends < limits.max_attempts {
                r.violate(
                    "dead too soon",
                    format!(
                        "id {id}: dead after {} sends (vt_max_attempts {})",
                        m.sends, limits.max_attempts
                    ),
                );
            }
            if sent > m.sends.max(limits.max_attempts) {
                r.violate(
                    "sent when dead",
                    format!(
                        "id {id}: delivered {sent} times, dead after {} sends",
                        m.sends
                    ),
                );
            }
        }
        if m.poison && m.state == State::Acked {
            r.violate(
                "poison acked",
                format!("id {id}: never acked by a consumer, yet acked"),
            );
        }
        if let Some(&ta) = first_ack.get(&id).filter(|_| !loss.lost_ack(id)) {
            if m.state == State::Due {
                r.violate(
                    "ack lost",
                    format!(
                        "id {id}: ACK got OK at {}, but the message is neither acked nor dead",
                        secs(ta)
                    ),
                );
            }
        }
    }
    r
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

    const LIMITS: Limits = Limits {
        ack_wait_us: 2_000_000,
        slack_us: 300_000,
        max_attempts: 3,
    };

    fn msg(key: i64, sends: i64, state: State) -> Msg {
        Msg {
            key,
            poison: false,
            sends,
            state,
        }
    }

    /// Key 7: id 1 acked, id 2 poison (three sends, dead, moved), id 3 acked after it.
    fn clean() -> (Vec<Event>, HashMap<i64, Msg>, HashMap<i64, Msg>) {
        let mut h = Vec::new();
        for id in 1..=3 {
            h.push(ev(0, Kind::Try, id));
            h.push(ev(1, Kind::Committed, id));
        }
        h.extend([
            ev(10, Kind::Delivered, 1),
            ev(20, Kind::AckSent, 1),
            ev(30, Kind::Acked, 1),
            ev(40, Kind::Delivered, 2),
            ev(4040, Kind::Delivered, 2),
            ev(8040, Kind::Delivered, 2),
            ev(10100, Kind::Delivered, 3),
            ev(10110, Kind::AckSent, 3),
            ev(10120, Kind::Acked, 3),
        ]);
        let table = [(1, msg(7, 1, State::Acked)), (3, msg(7, 1, State::Acked))];
        let dead = [(
            2,
            Msg {
                poison: true,
                ..msg(7, 3, State::Dead)
            },
        )];
        (h, table.into_iter().collect(), dead.into_iter().collect())
    }

    fn checks(h: &[Event], t: &HashMap<i64, Msg>, d: &HashMap<i64, Msg>) -> Vec<&'static str> {
        let mut h = h.to_vec();
        h.sort_by_key(|e| e.t_us);
        verify(&h, t, d, &LIMITS, &DatabaseLoss::default())
            .violations
            .into_keys()
            .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let (h, t, d) = clean();
        let r = verify(&h, &t, &d, &LIMITS, &DatabaseLoss::default());
        assert_eq!(r.violation_count(), 0, "{:?}", r.violations);
        assert_eq!((r.acked, r.dead, r.dead_poison, r.keys), (2, 1, 1, 1));
    }

    #[test]
    fn each_broken_promise_is_caught() {
        let (h, t, d) = clean();
        // The dead letter is gone.
        assert_eq!(checks(&h, &t, &HashMap::new()), vec!["lost"]);
        // ... or in both tables.
        let mut both = t.clone();
        both.insert(2, d[&2]);
        assert_eq!(checks(&h, &both, &d), vec!["phantom"]);
        // The next of the key sent while the one before was in flight (and not acked/dead).
        let mut overlap = h.clone();
        overlap.retain(|e| !(e.kind == Kind::AckSent && e.id == 1));
        overlap.push(ev(500, Kind::Delivered, 2));
        overlap.retain(|e| !(e.kind == Kind::Delivered && e.id == 2 && e.t_us == 40_000));
        let v = checks(&overlap, &t, &d);
        assert_eq!(v, vec!["order", "overlap"]);
        // Back to a smaller id.
        let mut back = h.clone();
        back.push(ev(11000, Kind::Delivered, 1));
        assert_eq!(checks(&back, &t, &d), vec!["delivered after ack", "order"]);
        // Id 2 never sent but id 3 was: skipped.
        let mut skipped = h.clone();
        skipped.retain(|e| !(e.kind == Kind::Delivered && e.id == 2));
        let mut d2 = d.clone();
        d2.insert(
            2,
            Msg {
                state: State::Due,
                sends: 0,
                ..d[&2]
            },
        );
        let (t2, d2): (HashMap<_, _>, HashMap<_, _>) =
            (t.clone().into_iter().chain(d2).collect(), HashMap::new());
        assert_eq!(checks(&skipped, &t2, &d2), vec!["skipped"]);
        // Dead after two sends; delivered a fourth time.
        let mut d3 = d.clone();
        d3.get_mut(&2).unwrap().sends = 2;
        assert_eq!(checks(&h, &t, &d3), vec!["dead too soon"]);
        let mut fourth = h.clone();
        fourth.push(ev(12100, Kind::Delivered, 2));
        assert!(checks(&fourth, &t, &d).contains(&"sent when dead"));
        // The poison message acked.
        let mut d4 = d.clone();
        d4.get_mut(&2).unwrap().state = State::Acked;
        assert!(checks(&h, &t, &d4).contains(&"poison acked"));
    }

    /// An ACK sent just before its ack wait ran out may commit after the redelivery's claim (a
    /// Galera commit stalled while a node left): the key is released at the ACK's answer, and
    /// the next message may go then. Seed 501's `overlap` on key 605.
    #[test]
    fn an_ack_racing_the_redelivery_releases_the_key_at_its_answer() {
        let mut h = Vec::new();
        for id in 1..=2 {
            h.push(ev(0, Kind::Try, id));
            h.push(ev(1, Kind::Committed, id));
        }
        h.extend([
            ev(10, Kind::Delivered, 1),
            ev(1900, Kind::AckSent, 1),
            // Sent again at the end of the ack wait while the ACK waits for its commit.
            ev(2010, Kind::Delivered, 1),
            ev(2500, Kind::Acked, 1),
            ev(2800, Kind::Delivered, 2),
            ev(2810, Kind::AckSent, 2),
            ev(2820, Kind::Acked, 2),
        ]);
        let table: HashMap<i64, Msg> = [(1, msg(7, 2, State::Acked)), (2, msg(7, 1, State::Acked))]
            .into_iter()
            .collect();
        let none = HashMap::new();
        assert_eq!(checks(&h, &table, &none), Vec::<&str>::new());
        // Had the ACK been answered before the redelivery, the next one then overlaps (and the
        // redelivery came after the ack).
        let mut answered = h.clone();
        for e in &mut answered {
            if e.kind == Kind::Acked && e.id == 1 {
                e.t_us = 1_950_000;
            }
        }
        assert!(checks(&answered, &table, &none).contains(&"overlap"));
        // A failed ACK ends when its error comes: before the redelivery, it released nothing.
        let mut failed = h.clone();
        for e in &mut failed {
            if e.kind == Kind::Acked && e.id == 1 {
                e.kind = Kind::AckFailed;
                e.t_us = 1_950_000;
            }
        }
        assert_eq!(checks(&failed, &table, &none), vec!["overlap"]);
    }
}
