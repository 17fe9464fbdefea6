//! What a [`TableManager`](super::manager::TableManager) knows of its table's rows between polls: the
//! due cache, the schedule, the rows in flight, the binlog's recent changes a poll applies
//! again on top of its snapshot, and the subscribers to hand batches to.

use std::collections::{HashMap, HashSet, VecDeque};

use tokio::sync::mpsc;

use super::cache::{DueCache, Entry};
use super::polled::{value_bytes, PolledRow};
use super::schedule::Schedule;
use super::state;
use super::unacked::Unacked;

/// The after image of a changed row, as far as the manager cares. `key` is in the form of
/// `MessageTable::key_sql` (a number's decimal text, or the upper-case hex of a string's bytes).
#[derive(Debug, Clone)]
pub struct ChangedRow {
    pub key: Box<[u8]>,
    pub priority: Option<i64>,
    pub time_next: Option<i64>,
    pub time_acked: Option<i64>,
}

/// A batch of messages offered to one subscriber.
pub type Batch = Vec<Entry>;

/// Behind the manager's one mutex: every change to it is short and never awaits.
pub(super) struct KnownRows {
    pub(super) cache: DueCache,
    /// Entries due at a known moment soon (sent rows' next redelivery, scheduled rows).
    pub(super) schedule: Schedule,
    /// Keys handed to a subscriber whose claim has not finished; never offered twice at once.
    pub(super) in_flight: HashSet<Box<[u8]>>,
    /// Since when claims have been in flight without a break (`in_flight` not empty): while
    /// that is shorter than [`CLAIM_HOLD`], rows short of a batch wait for the claim to end
    /// (see `TableManager::distribute`).
    pub(super) claiming_since: Option<std::time::Instant>,
    pub(super) subscribers: Vec<Subscriber>,
    /// Round-robin position in `subscribers`.
    pub(super) next: usize,
    /// The last poll filled the cache to its limit: more due rows may be waiting.
    pub(super) backlog: bool,
    /// Row changes seen (in the binlog) while a poll runs, `None` when none runs. The poll's
    /// rows are a snapshot from before them and replace the cache, so these are applied again
    /// on top; without this a row committed during a poll would wait for the next one.
    pub(super) changed_during_poll: Option<Vec<LateChange>>,
    /// More changes came during a poll than are kept: poll again right after it.
    pub(super) poll_again: bool,
    /// The binlog's row changes of the last [`RECENT_WINDOW_NS`] (time seen, change), oldest
    /// first. The binlog can show a row a moment before its transaction is visible to other
    /// sessions (the server publishes the binlog before the engine commit): a poll that starts
    /// in that moment reads a snapshot without the row, and replacing the cache with it would
    /// leave the row to the next poll. So a poll starts with these as changes to apply again.
    pub(super) recent: VecDeque<(i64, LateChange)>,
    /// The `recent` changes a running poll applies again on top of its snapshot.
    pub(super) replay: Vec<LateChange>,
    /// The latest change (`None`: deleted) seen for a row while it was in flight; it is newer
    /// than anything the batch knows, so it decides what happens to the row when the batch is
    /// done (e.g. the claim's own update, an ack, another proxy's claim).
    pub(super) changed_in_flight: HashMap<Box<[u8]>, Option<ChangedRow>>,
    /// Rows a batch offered but did not send, with how often in a row. A row seen in the binlog
    /// can reach the proxy a moment before its transaction is visible (the server publishes the
    /// binlog before the engine commit), and the claim's `SKIP LOCKED` then passes it over; it
    /// is offered again after [`SKIPPED_RETRY`] delays, then left to the poller.
    pub(super) skipped: HashMap<Box<[u8]>, usize>,
    /// The messages each stream holds, sent and not yet acked, while the table's
    /// `vt_max_unacked` holds (otherwise nothing is recorded).
    pub(super) unacked: Unacked,
}

/// When a row a batch did not send is offered again (see `KnownRows::skipped`).
pub(super) const SKIPPED_RETRY: [std::time::Duration; 5] = [
    std::time::Duration::from_millis(2),
    std::time::Duration::from_millis(10),
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(250),
    std::time::Duration::from_millis(1000),
];

/// Most rows remembered in `KnownRows::skipped` (a bound, never reached in practice).
pub(super) const MAX_SKIPPED: usize = 10_000;

/// A row change that arrived while a poll was running (see `KnownRows::changed_during_poll`).
#[derive(Clone)]
pub(super) enum LateChange {
    Changed(ChangedRow),
    Deleted(Box<[u8]>),
}

/// Most row changes remembered during one poll; beyond it the table is polled again instead.
const MAX_CHANGES_DURING_POLL: usize = 10_000;

/// How long a binlog change is kept in `KnownRows::recent`: far longer than a commit takes to
/// become visible after its binlog write, even under load.
pub(super) const RECENT_WINDOW_NS: i64 = 100_000_000;
/// Most changes kept in `KnownRows::recent` (at very high rates the window is shorter).
pub(super) const MAX_RECENT: usize = 10_000;

/// The longest a claim in flight holds back rows short of a batch from the other subscribers.
/// A claim takes about a commit (a millisecond or a few); one that takes longer (a slow or
/// lost backend connection) must not keep the rows from streams that could claim them.
pub(super) const CLAIM_HOLD: std::time::Duration = std::time::Duration::from_millis(10);

impl KnownRows {
    /// Whether rows short of a full batch (`batch_size`) wait for the claim in flight now to end
    /// rather than go to another subscriber in a claim of their own.
    pub(super) fn holds_for_claim(&self, batch_size: usize) -> bool {
        self.cache.len() < batch_size
            && self
                .claiming_since
                .is_some_and(|since| since.elapsed() < CLAIM_HOLD)
    }

    /// When holding for the claim in flight ends, while rows wait for it; `None` once it has
    /// (the manager would otherwise wake again and again for a moment already past).
    pub(super) fn hold_ends(&self) -> Option<std::time::Instant> {
        if self.cache.is_empty() {
            return None;
        }
        self.claiming_since
            .map(|since| since + CLAIM_HOLD)
            .filter(|end| *end > std::time::Instant::now())
    }

    /// Keys left `in_flight`: claims are no longer in flight once it is empty.
    pub(super) fn in_flight_removed(&mut self) {
        if self.in_flight.is_empty() {
            self.claiming_since = None;
        }
    }

    pub(super) fn new(capacity: usize) -> KnownRows {
        KnownRows {
            cache: DueCache::new(capacity),
            schedule: Schedule::new(capacity),
            in_flight: HashSet::new(),
            claiming_since: None,
            subscribers: Vec::new(),
            next: 0,
            backlog: false,
            changed_during_poll: None,
            poll_again: false,
            recent: VecDeque::new(),
            replay: Vec::new(),
            changed_in_flight: HashMap::new(),
            skipped: HashMap::new(),
            unacked: Unacked::default(),
        }
    }

    /// A change seen at `now` (in the binlog, or a claim of this proxy's): kept for polls that
    /// start soon (`recent`), and for the poll running now, if any.
    pub(super) fn note_change(&mut self, now: i64, change: LateChange) {
        self.note_during_poll(|| change.clone());
        while self.recent.len() >= MAX_RECENT
            || self
                .recent
                .front()
                .is_some_and(|(seen, _)| *seen < now.saturating_sub(RECENT_WINDOW_NS))
        {
            self.recent.pop_front();
        }
        self.recent.push_back((now, change));
    }

    /// A poll starts at `now`: the changes of the last moments will be applied again on top of
    /// its snapshot, before those that arrive while it runs.
    pub(super) fn begin_poll(&mut self, now: i64) {
        let since = now.saturating_sub(RECENT_WINDOW_NS);
        self.replay = self
            .recent
            .iter()
            .filter(|(seen, _)| *seen >= since)
            .map(|(_, change)| change.clone())
            .collect();
        self.changed_during_poll = Some(Vec::new());
    }

    /// A poll's rows replace the cache and the schedule; then the changes noted since it began
    /// (and just before) go on top. Returns whether to poll again at once.
    pub(super) fn finish_poll(
        &mut self,
        rows: Vec<PolledRow>,
        soon: Vec<PolledRow>,
        cache_size: usize,
        horizon_after: impl Fn(i64) -> i64,
    ) -> bool {
        self.backlog = rows.len() >= cache_size;
        self.cache.clear();
        for (key, priority, time_next) in rows {
            let Some(key) = value_bytes(key) else {
                continue;
            };
            if self.in_flight.contains(&key[..]) {
                continue;
            }
            self.cache.insert(Entry {
                key,
                priority,
                time_next,
            });
        }
        self.cache.forget_uncached();
        self.schedule.clear();
        for (key, priority, time_next) in soon {
            if let Some(key) = value_bytes(key) {
                self.schedule.insert(Entry {
                    key,
                    priority,
                    time_next,
                });
            }
        }
        let now = state::now_ns();
        let horizon = horizon_after(now);
        // The moments before the poll first. A row in flight is skipped: its batch's own
        // outcome, and what arrived while it ran, are newer than anything replayed here.
        for change in std::mem::take(&mut self.replay) {
            match change {
                LateChange::Changed(row) if !self.in_flight.contains(&row.key) => {
                    self.apply_changed(row, now, horizon)
                }
                LateChange::Deleted(key) if !self.in_flight.contains(&key) => {
                    self.cache.remove(&key);
                    self.schedule.remove(&key);
                }
                _ => {}
            }
        }
        let late = self.changed_during_poll.take().unwrap_or_default();
        for change in late {
            match change {
                LateChange::Changed(row) => self.apply_changed(row, now, horizon),
                LateChange::Deleted(key) => {
                    self.cache.remove(&key);
                    self.schedule.remove(&key);
                }
            }
        }
        std::mem::take(&mut self.poll_again)
    }

    pub(super) fn note_during_poll(&mut self, change: impl FnOnce() -> LateChange) {
        if let Some(log) = &mut self.changed_during_poll {
            if log.len() < MAX_CHANGES_DURING_POLL {
                log.push(change());
            } else {
                self.poll_again = true;
            }
        }
    }

    /// The body of [`TableManager::row_changed`].
    pub(super) fn apply_changed(&mut self, row: ChangedRow, now: i64, horizon: i64) {
        self.skipped.remove(&row.key);
        if self.in_flight.contains(&row.key) {
            self.changed_in_flight.insert(row.key.clone(), Some(row));
            return;
        }
        if state::is_acked(row.time_acked) {
            self.unacked.release(&row.key);
            self.cache.remove(&row.key);
            self.schedule.remove(&row.key);
            return;
        }
        let entry = Entry {
            key: row.key,
            priority: row.priority.unwrap_or(0),
            time_next: row.time_next.unwrap_or(0),
        };
        if state::is_due(row.time_next, now) {
            self.schedule.remove(&entry.key);
            self.cache.insert(entry);
        } else {
            self.cache.remove(&entry.key);
            if entry.time_next <= horizon {
                self.schedule.insert(entry);
            } else {
                self.schedule.remove(&entry.key);
            }
        }
    }
}

/// An open stream, as the hand-out sees it.
pub(super) struct Subscriber {
    pub(super) id: u64,
    /// Where its batches go.
    pub(super) tx: mpsc::Sender<Batch>,
    /// It has a batch it has not finished claiming and sending: it is offered nothing more.
    pub(super) busy: bool,
}

#[cfg(test)]
#[path = "known_rows_tests.rs"]
mod tests;
