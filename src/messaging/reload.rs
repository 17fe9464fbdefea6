//! How reloads of the message table registry are merged and ordered, without I/O.
//!
//! - A [`Lane`] merges requests as a group commit does: while one read runs, every request that
//!   arrives waits for the next read, which serves all of them at once (the union of their
//!   tables). A burst of DDL from many sessions therefore costs a few reads, not one each, and a
//!   request is only ever answered by a read that began after it was made. The engine has two
//!   lanes, one for reads of named tables (after DDL: a few rows, about what `SELECT 1` costs) and
//!   one for reads of the whole catalog (periodic, and when a DDL statement cannot be followed),
//!   so a DDL statement never waits behind a scan of a large catalog.
//! - Reads of the two lanes overlap, and one that began earlier may end later. [`ReadTickets`]
//!   numbers reads as they begin, and a read's answer about a table is applied only when no read
//!   that began later has been applied to that table already: a table dropped and re-created by
//!   DDL is never brought back to its old state by a slow read that began before.
//!
//! No lock is held across a query: the lanes' and the tickets' locks are taken for a few
//! assignments at a time.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::table::TableKey;

/// What one read covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every table of the server.
    All,
    /// These tables only.
    Tables(BTreeSet<TableKey>),
}

impl Scope {
    /// One read that covers both.
    fn merge(self, other: Scope) -> Scope {
        match (self, other) {
            (Scope::Tables(mut a), Scope::Tables(b)) => {
                a.extend(b);
                Scope::Tables(a)
            }
            _ => Scope::All,
        }
    }
}

/// Why a reload did not happen; shared by every request a read served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}")]
    Backend(Arc<mysql_async::Error>),
    /// The read's task ended without an answer (the runtime is shutting down).
    #[error("the reload was abandoned")]
    Abandoned,
}

/// Who waits for a read's answer.
pub type Waiter = oneshot::Sender<Result<(), ReloadError>>;

/// Requests waiting for the next read of one lane (see the module's header).
#[derive(Default)]
pub struct Lane {
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// A runner is reading, or about to: new requests wait for its next read.
    running: bool,
    /// What the next read covers (the merge of the waiting requests).
    scope: Option<Scope>,
    waiters: Vec<Waiter>,
}

impl Lane {
    /// Queues a request for `scope`. Returns true when no runner is active: the caller must
    /// start one (which calls [`Lane::next`] until it returns `None`).
    pub fn join(&self, scope: Scope, waiter: Waiter) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.scope = Some(match state.scope.take() {
            Some(queued) => queued.merge(scope),
            None => scope,
        });
        state.waiters.push(waiter);
        !std::mem::replace(&mut state.running, true)
    }

    /// The runner's next read and whom to answer; `None` when nobody waits, and the runner
    /// ends (the next request starts another).
    pub fn next(&self) -> Option<(Scope, Vec<Waiter>)> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.scope.take() {
            Some(scope) => Some((scope, std::mem::take(&mut state.waiters))),
            None => {
                state.running = false;
                None
            }
        }
    }
}

/// The order of reads (see the module's header).
#[derive(Default, Debug)]
pub struct ReadTickets {
    /// The last ticket given.
    last: u64,
    /// Reads begun and not yet applied (or failed).
    in_flight: BTreeSet<u64>,
    /// The newest read of every table applied.
    all_read_at: u64,
    /// The newest read applied to each table, where newer than `all_read_at` and still needed:
    /// while a read that began before it is in flight. (So this holds a few entries at most, and
    /// only while reads overlap; a table gone keeps its entry as long, so that the older read
    /// cannot bring it back.)
    read_at: HashMap<TableKey, u64>,
}

impl ReadTickets {
    /// A read begins now.
    pub fn begin(&mut self) -> u64 {
        self.last += 1;
        self.in_flight.insert(self.last);
        self.last
    }

    /// Whether the answer about `key` of read `ticket` is newer than what the registry holds;
    /// if so it is recorded as applied.
    pub fn claim(&mut self, ticket: u64, key: &TableKey) -> bool {
        let seen = self
            .read_at
            .get(key)
            .copied()
            .unwrap_or(0)
            .max(self.all_read_at);
        if ticket <= seen {
            return false;
        }
        self.read_at.insert(key.clone(), ticket);
        true
    }

    /// Read `ticket` is over: applied (its keys claimed), or failed. `all`: it read every
    /// table, so what it did not claim it found absent or saw newer already.
    pub fn end(&mut self, ticket: u64, all: bool) {
        self.in_flight.remove(&ticket);
        if all {
            self.all_read_at = self.all_read_at.max(ticket);
        }
        let oldest_in_flight = self.in_flight.first().copied();
        let all_read_at = self.all_read_at;
        self.read_at.retain(|_, at| {
            *at > all_read_at && oldest_in_flight.is_some_and(|oldest| oldest < *at)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> TableKey {
        ("d".into(), name.into())
    }

    fn tables(names: &[&str]) -> Scope {
        Scope::Tables(names.iter().map(|n| key(n)).collect())
    }

    #[test]
    fn a_lane_merges_what_arrives_during_a_read() {
        let lane = Lane::default();
        let (a, _ra) = oneshot::channel();
        assert!(
            lane.join(tables(&["a"]), a),
            "the first request starts a runner"
        );
        let (scope, waiters) = lane.next().expect("a read");
        assert_eq!((scope, waiters.len()), (tables(&["a"]), 1));
        // While that read runs, two more arrive: one read serves both.
        let (b, _rb) = oneshot::channel();
        let (c, _rc) = oneshot::channel();
        assert!(!lane.join(tables(&["b"]), b));
        assert!(!lane.join(tables(&["c", "b"]), c));
        let (scope, waiters) = lane.next().expect("a second read");
        assert_eq!((scope, waiters.len()), (tables(&["b", "c"]), 2));
        assert!(lane.next().is_none(), "nobody waits: the runner ends");
        let (d, _rd) = oneshot::channel();
        assert!(
            lane.join(Scope::All, d),
            "the next request starts a runner again"
        );
        let (e, _re) = oneshot::channel();
        assert!(!lane.join(tables(&["e"]), e));
        assert_eq!(lane.next().map(|(s, _)| s), Some(Scope::All));
    }

    #[test]
    fn a_read_that_began_earlier_never_overwrites_a_later_one() {
        let mut t = ReadTickets::default();
        let full = t.begin(); // a slow scan of the catalog sees `m` before its DROP
        let after_drop = t.begin(); // the DROP's own read finds `m` gone
        assert!(t.claim(after_drop, &key("m")));
        t.end(after_drop, false);
        assert!(
            !t.claim(full, &key("m")),
            "the older answer about m is dropped"
        );
        assert!(t.claim(full, &key("other")));
        t.end(full, true);
        assert!(t.read_at.is_empty(), "nothing in flight: nothing kept");
        // A later read of anything applies.
        let next = t.begin();
        assert!(t.claim(next, &key("m")));
        t.end(next, false);
    }

    #[test]
    fn a_full_read_covers_every_table() {
        let mut t = ReadTickets::default();
        let named = t.begin();
        let full = t.begin();
        t.end(full, true); // found nothing to claim: every table was read at `full`
        assert!(!t.claim(named, &key("m")), "older than the full read");
        t.end(named, false);
        assert!(t.in_flight.is_empty() && t.read_at.is_empty());
    }
}
