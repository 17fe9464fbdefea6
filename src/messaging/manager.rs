//! One manager per message table: the due-message cache, the subscribers (open `STREAM`s), the
//! round-robin hand-out of batches, and the poller/purger loop.
//!
//! The manager only decides *who should try to send what*. The claim itself — the atomic
//! `SELECT ... FOR UPDATE SKIP LOCKED` + `UPDATE` that makes a message this proxy's to send for
//! one ack window — runs on the subscriber's own connection (see `stream`), and re-checks every
//! row against the database. So a stale cache can cost a wasted claim, never a duplicate or an
//! acked message sent again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use mysql_async::Value;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::cache::{DueCache, Entry};
pub use super::known_rows::{Batch, ChangedRow};
use super::known_rows::{KnownRows, LateChange, Subscriber, MAX_SKIPPED, SKIPPED_RETRY};
use super::repeated_failure::RepeatedFailure;
use super::schedule::Schedule;
use super::state;
use super::table::MessageTable;

pub struct TableManager {
    definition: RwLock<Arc<MessageTable>>,
    state: Mutex<KnownRows>,
    /// Wakes the manager loop: a subscriber came or became ready, or a poll was requested.
    kick: Notify,
    /// Set when the next wake-up should poll the table (new rows were committed, backlog).
    poll_requested: AtomicBool,
    /// When to poll again after a poll asked for at a commit seen in the binlog (see
    /// [`TableManager::request_poll_after_commit`]).
    repoll_at: Mutex<Option<Instant>>,
    /// A poll (or a purge) is running in its own task. They run beside the hand-out, so
    /// subscribers keep getting batches from the cache while the table is read.
    polling: AtomicBool,
    purging: AtomicBool,
    pool: crate::cluster::SharedPool,
    stop: CancellationToken,
    next_subscriber_id: AtomicU64,
    /// The engine's: whether the binlog watcher follows the binlog, so that every ack reaches
    /// the manager (`vt_max_unacked` holds only then).
    binlog_following: Arc<AtomicBool>,
    /// Polls so far, to make every `poll::THOROUGH_EVERY`th one thorough.
    polls: AtomicU64,
    /// What the table has done (sent, acked, ...), for metrics and `SHOW MESSAGE TABLES`.
    stats: super::stats::TableStats,
    /// Runs of failed polls and purges (the backend away), logged once a minute, not per tick.
    poll_failures: RepeatedFailure,
    purge_failures: RepeatedFailure,
    /// Bumped whenever rows may have become due, for the streams with a `WHERE` condition
    /// (MESSAGING.md §12), which find their own rows ([`DueWatch`]).
    due_signal: watch::Sender<u64>,
    /// Open [`DueWatch`]es: while there are any, the table is polled as for subscribers.
    watchers: AtomicUsize,
    /// With `vt_group_col`: the group where the last poll's walk of the groups stopped (see
    /// `groups::heads`), so that every group comes in turn.
    group_cursor: Mutex<Option<Value>>,
    /// Dead messages and FIFO groups in flight, counted at each purge tick (for `SHOW MESSAGE
    /// TABLES` and the gauges).
    counts: Mutex<(Option<u64>, Option<u64>)>,
    /// The engine's: whether the purge tick also counts the table's depth (the operator's page
    /// shows it), and the last count.
    count_depths: Arc<AtomicBool>,
    depth: Mutex<Option<super::depth::Depth>>,
}

/// A stream with a `WHERE` condition: it is handed no batches (the manager does not know which
/// rows match); it is told when rows may have become due, and finds and claims matching ones
/// itself, on its own connection (so the condition runs with its session's privileges).
pub struct DueWatch {
    /// Its id among the table's streams (the subscribers' ids), for `vt_max_unacked`.
    id: u64,
    manager: Arc<TableManager>,
    /// Changes when rows may have become due, or when messages streams held stop counting
    /// against `vt_max_unacked` (acked, deleted, their ack wait passed).
    pub due: watch::Receiver<u64>,
}

impl Drop for DueWatch {
    fn drop(&mut self) {
        self.manager.watchers.fetch_sub(1, Ordering::AcqRel);
        // What it held waits for its ack wait like any sent message, counted for no one.
        self.manager.lock().unacked.forget(self.id);
    }
}

impl DueWatch {
    pub fn manager(&self) -> &Arc<TableManager> {
        &self.manager
    }

    /// How many more messages this stream may be sent now: `vt_max_unacked` less what it holds
    /// (`usize::MAX` while there is no limit).
    pub fn room(&self) -> usize {
        let Some(max) = self.manager.unacked_limit() else {
            return usize::MAX;
        };
        let mut state = self.manager.lock();
        state.unacked.expire(state::now_ns());
        max.saturating_sub(state.unacked.held_by(self.id))
    }

    /// This stream claimed `sent` (the claim is committed; entries with their new `time_next`):
    /// under `vt_max_unacked` they count as held by it until their ack or ack wait, as for a
    /// stream the manager feeds.
    pub fn claimed(&self, sent: &[Entry]) {
        if self.manager.unacked_limit().is_none() {
            return;
        }
        let mut state = self.manager.lock();
        for e in sent {
            state.unacked.record(self.id, e.key.clone(), e.time_next);
        }
    }
}

/// How long after a poll asked for at a commit seen in the binlog the table is polled again.
/// Far longer than a commit takes to become visible after its binlog write, like
/// [`RECENT_WINDOW_NS`].
const REPOLL_AFTER_COMMIT: std::time::Duration = std::time::Duration::from_millis(100);

/// The manager's background jobs, each run at most once at a time.
#[derive(Clone, Copy)]
enum Job {
    Poll,
    Purge,
}

/// An open stream's membership; dropping it leaves the table's subscribers at once.
pub struct Subscription {
    id: u64,
    manager: Arc<TableManager>,
    pub batches: mpsc::Receiver<Batch>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // A batch handed over but never taken (the stream ended first) is given back, or its
        // rows would stay in flight for good.
        self.batches.close();
        let mut stranded = Vec::new();
        while let Ok(batch) = self.batches.try_recv() {
            stranded.extend(batch);
        }
        self.manager.unsubscribe(self.id, stranded);
    }
}

impl Subscription {
    /// Reports that the last batch is finished (sent or not); the subscriber may get another.
    pub fn batch_done(&self, batch: &[Entry], sent: Vec<Entry>) {
        self.manager.batch_claimed(self.id, batch, sent, &[], &[]);
        self.manager.subscriber_ready(self.id);
    }

    /// Reports which rows of the last batch this stream claimed (the claim is committed), before
    /// they are written to the client: from now on they wait for their ack or their new
    /// `time_next` like any sent row, however long the write takes. The subscriber stays busy
    /// (gets no other batch) until [`Subscription::ready`]. `left_out`: rows the claim left out
    /// for its byte budget, still due (not passed over for a lock). `dead`: rows the claim found
    /// dead (`vt_max_attempts`), never to be offered again.
    pub fn batch_claimed(
        &self,
        batch: &[Entry],
        sent: Vec<Entry>,
        left_out: &[Box<[u8]>],
        dead: &[Box<[u8]>],
    ) {
        self.manager
            .batch_claimed(self.id, batch, sent, left_out, dead);
    }

    /// The last batch is written to the client: the subscriber may get another.
    pub fn ready(&self) {
        self.manager.subscriber_ready(self.id);
    }

    pub fn manager(&self) -> &Arc<TableManager> {
        &self.manager
    }
}

impl TableManager {
    pub fn start(
        definition: MessageTable,
        pool: crate::cluster::SharedPool,
        stop: CancellationToken,
        binlog_following: Arc<AtomicBool>,
        count_depths: Arc<AtomicBool>,
    ) -> Arc<TableManager> {
        let capacity = definition.options.cache_size;
        let manager = Arc::new(TableManager {
            definition: RwLock::new(Arc::new(definition)),
            state: Mutex::new(KnownRows::new(capacity)),
            kick: Notify::new(),
            poll_requested: AtomicBool::new(false),
            repoll_at: Mutex::new(None),
            polling: AtomicBool::new(false),
            purging: AtomicBool::new(false),
            pool,
            stop,
            next_subscriber_id: AtomicU64::new(1),
            binlog_following,
            polls: AtomicU64::new(0),
            stats: super::stats::TableStats::default(),
            poll_failures: RepeatedFailure::default(),
            purge_failures: RepeatedFailure::default(),
            due_signal: watch::Sender::new(0),
            watchers: AtomicUsize::new(0),
            group_cursor: Mutex::new(None),
            counts: Mutex::new((None, None)),
            count_depths,
            depth: Mutex::new(None),
        });
        let runner = manager.clone();
        tokio::spawn(async move { runner.run().await });
        manager
    }

    pub fn definition(&self) -> Arc<MessageTable> {
        self.definition
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_definition(&self, definition: MessageTable) {
        let capacity = definition.options.cache_size;
        *self.definition.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(definition);
        let mut state = self.lock();
        if state.cache.capacity() != capacity {
            state.cache = DueCache::new(capacity);
            state.schedule = Schedule::new(capacity);
        }
        drop(state);
        self.request_poll();
    }

    /// Stops the manager loop; open streams see their batch channel close and end.
    pub fn stop(&self) {
        self.stop.cancel();
        self.lock().subscribers.clear();
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The table's counters.
    pub fn stats(&self) -> &super::stats::TableStats {
        &self.stats
    }

    /// The manager's state now, for gauges. Cheap: one lock, a pass over the cache.
    pub fn snapshot(&self) -> super::stats::ManagerSnapshot {
        // Copied out first: a guard taken inside the struct expression below lives to its end.
        let counts = *self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let state = self.lock();
        super::stats::ManagerSnapshot {
            subscribers: state.subscribers.len(),
            cached: state.cache.len(),
            in_flight: state.in_flight.len(),
            scheduled: state.schedule.len(),
            oldest_due_ns: state.cache.oldest_time_next(),
            held_unacked: state.unacked.total(),
            dead: counts.0,
            keys_in_flight: counts.1,
        }
    }

    /// A transaction the binlog shows committed changed this table in a way only a poll reads
    /// (rows it cannot decode, DDL, XA): poll now, and once more [`REPOLL_AFTER_COMMIT`] later.
    /// The binlog can show a commit a moment before other sessions see it (see
    /// `KnownRows::recent`); a poll that ran in that moment would leave the rows to the next
    /// `vt_poller_interval`.
    pub fn request_poll_after_commit(&self) {
        let at = Instant::now() + REPOLL_AFTER_COMMIT;
        {
            let mut repoll = self.repoll_at.lock().unwrap_or_else(|e| e.into_inner());
            // One pending repoll, 100 ms after the latest commit: a commit arriving meanwhile
            // moves it (at most one more poll per REPOLL_AFTER_COMMIT; under a steady stream
            // of commits their own polls follow each other anyway).
            *repoll = Some(at);
        }
        self.request_poll();
    }

    /// The pending repoll, if it is due at `now` (taking it).
    fn take_due_repoll(&self, now: Instant) -> bool {
        let mut repoll = self.repoll_at.lock().unwrap_or_else(|e| e.into_inner());
        if repoll.is_some_and(|at| at <= now) {
            *repoll = None;
            return true;
        }
        false
    }

    fn pending_repoll(&self) -> Option<Instant> {
        *self.repoll_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rows may have become due (an insert was committed through the proxy): poll soon.
    pub fn request_poll(&self) {
        self.poll_requested.store(true, Ordering::Release);
        self.kick.notify_one();
    }

    /// A row of this table was inserted or updated by anyone (seen in the binlog): its after
    /// image. Due rows join the cache at once, rows due soon the schedule; acked rows leave both.
    /// Only a hint, like everything the manager holds: the claim re-checks the row.
    pub fn row_changed(&self, row: ChangedRow) {
        let now = state::now_ns();
        let horizon = now.saturating_add(super::backoff::duration_ns(
            self.definition().options.poller_interval,
        ));
        let mut st = self.lock();
        let held = st.unacked.total();
        st.note_change(now, LateChange::Changed(row.clone()));
        // A held message (`vt_max_unacked`) given back (`NACK`, or an UPDATE of `time_next` to
        // a moment passed) no longer counts; one kept longer (`EXTEND`) counts until its new
        // `time_next`. Only for a positive `time_next`: an insert's NULL or 0 seen late (after
        // a poll found and claimed the row) must not let go of what the claim holds.
        if !state::is_acked(row.time_acked) {
            match row.time_next {
                Some(t) if t > 0 && state::is_due(Some(t), now) => st.unacked.release(&row.key),
                Some(t) if t > 0 => st.unacked.extend(&row.key, t),
                _ => {}
            }
        }
        let due = !state::is_acked(row.time_acked) && state::is_due(row.time_next, now);
        // FIFO groups (§11): a row is due only as the head of its group, which only a poll
        // tells; and a row acked, dead or given up may make the next of its group the head.
        let fifo = self.definition().group_column.is_some();
        let key = fifo.then(|| row.key.clone());
        let done = state::is_acked(row.time_acked) || row.time_next == Some(state::DEAD_TIME_NEXT);
        st.apply_changed(row, now, horizon);
        if let Some(key) = key {
            if due && !st.in_flight.contains(&key) {
                st.cache.remove(&key);
            }
        }
        let released = st.unacked.total() < held;
        drop(st);
        if fifo && (due || done) {
            self.request_poll();
        }
        if due || released {
            self.signal_due();
        }
        self.kick.notify_one();
    }

    /// A row of this table was deleted (seen in the binlog).
    pub fn row_deleted(&self, key: &[u8]) {
        let mut st = self.lock();
        st.note_change(state::now_ns(), LateChange::Deleted(key.into()));
        st.skipped.remove(key);
        let held = st.unacked.total();
        st.unacked.release(key);
        let released = st.unacked.total() < held;
        if st.in_flight.contains(key) {
            st.changed_in_flight.insert(key.into(), None);
        }
        st.cache.remove(key);
        st.schedule.remove(key);
        drop(st);
        if released {
            self.signal_due();
        }
        // FIFO groups (§11): the next message of its group may be the head now.
        if self.definition().group_column.is_some() {
            self.request_poll();
        }
    }

    /// Watches for due rows, for a stream with a `WHERE` condition (see [`DueWatch`]).
    pub fn watch(self: &Arc<Self>) -> DueWatch {
        self.watchers.fetch_add(1, Ordering::AcqRel);
        self.request_poll();
        DueWatch {
            id: self.next_subscriber_id.fetch_add(1, Ordering::Relaxed),
            manager: self.clone(),
            due: self.due_signal.subscribe(),
        }
    }

    /// Tells the [`DueWatch`]es that rows may have become due, or that a stream at its
    /// `vt_max_unacked` may have room again.
    fn signal_due(&self) {
        if self.watchers.load(Ordering::Acquire) > 0 {
            self.due_signal.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        let id = self.next_subscriber_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(1);
        self.lock().subscribers.push(Subscriber {
            id,
            tx,
            busy: false,
        });
        // A new subscriber wants what is due now, not at the next tick.
        self.request_poll();
        Subscription {
            id,
            manager: self.clone(),
            batches: rx,
        }
    }

    fn unsubscribe(&self, id: u64, stranded: Vec<Entry>) {
        let mut state = self.lock();
        state.subscribers.retain(|s| s.id != id);
        state.unacked.forget(id);
        if stranded.is_empty() {
            return;
        }
        // Never claimed: still due, unless something changed them meanwhile.
        let (now, horizon) = self.now_and_horizon();
        for e in stranded {
            state.in_flight.remove(&e.key);
            match state.changed_in_flight.remove(&e.key) {
                Some(Some(row)) => state.apply_changed(row, now, horizon),
                Some(None) => {}
                None => {
                    state.cache.insert(e);
                }
            }
        }
        state.in_flight_removed();
        drop(state);
        self.kick.notify_one();
    }

    /// The batch's rows leave `in_flight`: sent ones wait in the schedule for their new
    /// `time_next` (and, with `vt_max_unacked`, count as held by `subscriber` until then or
    /// their ack), the others are offered again: at once those `left_out` for the claim's byte
    /// budget, after a delay the others (see `KnownRows::skipped`).
    fn batch_claimed(
        &self,
        subscriber: u64,
        batch: &[Entry],
        sent: Vec<Entry>,
        left_out: &[Box<[u8]>],
        dead: &[Box<[u8]>],
    ) {
        let left_out: HashSet<&[u8]> = left_out.iter().map(|k| &k[..]).collect();
        let dead: HashSet<&[u8]> = dead.iter().map(|k| &k[..]).collect();
        let (now, horizon) = self.now_and_horizon();
        // Only while the limit holds: in poll mode acks are not seen, and what streams hold
        // would pile up until each ack wait passed (a minute's deliveries, at a high rate).
        let limited = self.unacked_limit().is_some();
        let mut state = self.lock();
        for e in batch {
            state.in_flight.remove(&e.key);
        }
        state.in_flight_removed();
        if limited {
            // Before the changes seen in flight are applied below: an ack among them releases.
            for e in &sent {
                state.unacked.record(subscriber, e.key.clone(), e.time_next);
            }
        }
        let mut sent: HashMap<Box<[u8]>, Entry> =
            sent.into_iter().map(|e| (e.key.clone(), e)).collect();
        for e in batch {
            match (state.changed_in_flight.remove(&e.key), sent.remove(&e.key)) {
                // What happened to the row meanwhile is the newest news.
                (Some(Some(row)), _) => state.apply_changed(row, now, horizon),
                (Some(None), _) => {
                    state.cache.remove(&e.key);
                    state.schedule.remove(&e.key);
                }
                // Sent rows are due again when their ack wait passes, unless acked meanwhile.
                (None, Some(sent)) => {
                    state.skipped.remove(&e.key);
                    // A poll running now may have read the row before the claim: its snapshot
                    // must not put the row back among the due ones; nor may a poll starting
                    // soon, replaying the row's insert from `recent` before the claim's own
                    // binlog event has arrived.
                    state.note_change(
                        now,
                        LateChange::Changed(ChangedRow {
                            key: sent.key.clone(),
                            priority: Some(sent.priority),
                            time_next: Some(sent.time_next),
                            time_acked: None,
                        }),
                    );
                    state.schedule.insert(sent);
                }
                (None, None) if left_out.contains(&e.key[..]) => {
                    state.cache.insert(e.clone());
                }
                // Dead (in place, or moved away): not due again until a REDRIVE, which the
                // binlog or a poll shows.
                (None, None) if dead.contains(&e.key[..]) => {
                    state.skipped.remove(&e.key);
                }
                (None, None) => {
                    let tries = state.skipped.get(&e.key).copied().unwrap_or(0);
                    match SKIPPED_RETRY.get(tries) {
                        Some(delay) => {
                            if state.skipped.len() >= MAX_SKIPPED {
                                state.skipped.clear();
                            }
                            state.skipped.insert(e.key.clone(), tries + 1);
                            state.schedule.insert(Entry {
                                time_next: now.saturating_add(delay.as_nanos() as i64),
                                ..e.clone()
                            });
                        }
                        None => {
                            state.skipped.remove(&e.key);
                        }
                    }
                }
            }
        }
        drop(state);
        self.kick.notify_one();
    }

    fn subscriber_ready(&self, id: u64) {
        if let Some(s) = self.lock().subscribers.iter_mut().find(|s| s.id == id) {
            s.busy = false;
        }
        self.kick.notify_one();
    }

    /// Now, and the end of the schedule's window (the next poll), in Unix nanoseconds.
    fn now_and_horizon(&self) -> (i64, i64) {
        let now = state::now_ns();
        let horizon = now.saturating_add(super::backoff::duration_ns(
            self.definition().options.poller_interval,
        ));
        (now, horizon)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KnownRows> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run(self: Arc<Self>) {
        let mut next_tick = Instant::now();
        loop {
            let interval = self.definition().options.poller_interval;
            let wake = [
                self.next_scheduled(),
                self.pending_repoll(),
                self.next_release(),
                self.hold_ends(),
            ]
            .into_iter()
            .flatten()
            .fold(next_tick, Instant::min);
            tokio::select! {
                _ = tokio::time::sleep_until(wake), if wake < next_tick => {}
                _ = tokio::time::sleep_until(next_tick) => {
                    // With nobody streaming there is nobody to fill the cache for; a new
                    // subscriber triggers a poll of its own. Purging runs regardless.
                    if self.has_subscribers() {
                        self.start_poll();
                    }
                    self.start_purge();
                    next_tick = Instant::now() + interval;
                }
                _ = self.kick.notified() => {
                    // A request made while a poll runs waits for it: the poll's end kicks again.
                    if !self.polling.load(Ordering::Acquire)
                        && self.poll_requested.swap(false, Ordering::AcqRel)
                        && self.has_subscribers()
                    {
                        self.start_poll();
                    }
                }
                _ = self.stop.cancelled() => return,
            }
            if self.take_due_repoll(Instant::now()) {
                self.request_poll();
            }
            // Not while a poll runs: its end kicks the loop, which asks again if the cache is
            // still low. (Asking now would wake this loop at once, over and over, until then.)
            if self.distribute() && !self.polling.load(Ordering::Acquire) {
                self.request_poll();
            }
        }
    }

    fn start_poll(self: &Arc<Self>) {
        self.start_job(Job::Poll);
    }

    fn start_purge(self: &Arc<Self>) {
        self.start_job(Job::Purge);
    }

    /// Starts `job` in its own task unless it is already running; its end wakes the loop (to
    /// hand out what a poll found).
    fn start_job(self: &Arc<Self>, job: Job) {
        if self.running(job).swap(true, Ordering::AcqRel) {
            return;
        }
        let manager = self.clone();
        tokio::spawn(async move {
            // Cleared however the job ends, a panic included: a job that died must not leave
            // its flag set and so stop every later poll (or purge) of the table.
            let _running = JobRunning {
                manager: manager.clone(),
                job,
            };
            match job {
                Job::Poll => manager.poll().await,
                Job::Purge => manager.purge().await,
            }
        });
    }

    fn running(&self, job: Job) -> &AtomicBool {
        match job {
            Job::Poll => &self.polling,
            Job::Purge => &self.purging,
        }
    }

    /// When rows held back for the claim in flight (see [`TableManager::distribute`]) are
    /// offered anyway, should it not have ended by then.
    fn hold_ends(&self) -> Option<Instant> {
        self.lock().hold_ends().map(Instant::from_std)
    }

    /// When the earliest scheduled entry becomes due, as an `Instant`.
    fn next_scheduled(&self) -> Option<Instant> {
        let at = self.lock().schedule.next_time()?;
        Some(instant_at(at))
    }

    /// When the first message a stream holds stops counting against `vt_max_unacked` (its ack
    /// wait passes), as an `Instant`: a stream at its limit may then get more.
    fn next_release(&self) -> Option<Instant> {
        let at = self.lock().unacked.next_deadline()?;
        Some(instant_at(at))
    }

    /// `vt_max_unacked`, while it can hold: only while the binlog is followed are the acks seen
    /// (whoever makes them); in poll mode a stream would wait out the ack wait of messages it has
    /// long acked, so there is no limit then.
    fn unacked_limit(&self) -> Option<usize> {
        let max = self.definition().options.max_unacked?;
        self.binlog_following.load(Ordering::Acquire).then_some(max)
    }

    fn has_subscribers(&self) -> bool {
        self.watchers.load(Ordering::Acquire) > 0 || !self.lock().subscribers.is_empty()
    }

    /// Hands batches to ready subscribers in turn. Returns true when the cache is running low
    /// (below half of `vt_cache_size`) while a backlog may be waiting in the table, so the caller
    /// polls again at once — early enough that the poll finishes before the cache runs dry.
    ///
    /// While a claim is in flight, rows short of a full batch wait for it to end (at most
    /// [`CLAIM_HOLD`](super::known_rows::CLAIM_HOLD)) and then go out together, instead of each
    /// going at once to another idle stream in a claim of its own: under a steady flow of
    /// single-row inserts that is a transaction per few rows instead of per row or two, each
    /// one a commit the server shares with the producers. A full batch goes at once.
    fn distribute(&self) -> bool {
        let batch_size = self.definition().options.batch_size;
        let limit = self.unacked_limit();
        let mut guard = self.lock();
        let state = &mut *guard;
        let now = state::now_ns();
        for e in state.schedule.take_due(now) {
            if !state.in_flight.contains(&e.key) {
                state.cache.insert(e);
            }
        }
        let held = state.unacked.total();
        state.unacked.expire(now);
        if !state.cache.is_empty() || state.unacked.total() < held {
            self.signal_due();
        }
        let unacked = &state.unacked;
        // How many more messages a stream may be sent now.
        let room = |id: u64| match limit {
            Some(max) => max.saturating_sub(unacked.held_by(id)),
            None => usize::MAX,
        };
        let n = state.subscribers.len();
        let mut idle_seen = false;
        for _ in 0..n {
            if state.cache.is_empty() {
                break;
            }
            let i = state.next % n;
            state.next = (state.next + 1) % n;
            if state.holds_for_claim(batch_size) {
                break;
            }
            let sub = &mut state.subscribers[i];
            let room = room(sub.id);
            if sub.busy || room == 0 {
                continue;
            }
            idle_seen = true;
            let batch = state.cache.pop_batch(batch_size.min(room));
            let keys: Vec<Box<[u8]>> = batch.iter().map(|e| e.key.clone()).collect();
            match sub.tx.try_send(batch) {
                Ok(()) => {
                    sub.busy = true;
                    self.stats.record_claim();
                    // In flight until the subscriber reports back: never offered twice at once.
                    state.in_flight.extend(keys);
                    state
                        .claiming_since
                        .get_or_insert_with(std::time::Instant::now);
                }
                Err(
                    mpsc::error::TrySendError::Full(batch)
                    | mpsc::error::TrySendError::Closed(batch),
                ) => {
                    for e in batch {
                        state.cache.insert(e);
                    }
                }
            }
        }
        let any_idle = idle_seen || state.subscribers.iter().any(|s| !s.busy && room(s.id) > 0);
        let running_low = state.cache.len() <= state.cache.capacity() / 2;
        running_low && state.backlog && any_idle
    }

    /// Refills the cache with the table's due rows, in sending order.
    async fn poll(&self) {
        let def = self.definition();
        let now = state::now_ns();
        // Rows scheduled before the next poll, so they go out on time (see `schedule`).
        let horizon = now.saturating_add(super::backoff::duration_ns(def.options.poller_interval));
        let started = std::time::Instant::now();
        self.lock().begin_poll(now);
        let polled = match self.pool.get_conn().await {
            Ok(mut conn) => {
                let thorough = self
                    .polls
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(super::poll::THOROUGH_EVERY);
                let mut cursor = self
                    .group_cursor
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                let polled =
                    super::poll::due_and_soon(&mut conn, &def, now, horizon, thorough, &mut cursor)
                        .await;
                *self.group_cursor.lock().unwrap_or_else(|e| e.into_inner()) = cursor;
                if polled.is_ok() {
                    self.release_unseen_acks(&mut conn, &def).await;
                }
                polled
            }
            Err(e) => Err(e),
        };
        let (rows, soon) = match polled {
            Ok(r) => r,
            Err(e) => {
                if table_gone(&e) {
                    debug!("polling {}: the table is gone: {e}", def.qualified());
                } else {
                    self.poll_failures
                        .failed(format_args!("polling {}", def.qualified()), e);
                }
                let mut state = self.lock();
                state.changed_during_poll = None;
                state.replay.clear();
                state.poll_again = false;
                return;
            }
        };
        self.poll_failures
            .succeeded(format_args!("polling {}", def.qualified()));
        debug!(table = %def.qualified(), rows = rows.len(), elapsed = ?started.elapsed(), "polled");
        let interval = super::backoff::duration_ns(def.options.poller_interval);
        let again = self
            .lock()
            .finish_poll(rows, soon, def.options.cache_size, |now| {
                now.saturating_add(interval)
            });
        if again {
            self.request_poll();
        }
    }

    /// With `vt_max_unacked`: lets go of the messages streams hold whose rows are acked or gone
    /// although the binlog did not show it row by row (an ack logged as a statement or with a
    /// minimal row image asks for this poll instead). One primary-key read of what is held.
    async fn release_unseen_acks(&self, conn: &mut mysql_async::Conn, def: &MessageTable) {
        if self.unacked_limit().is_none() {
            return;
        }
        let held = self.lock().unacked.keys();
        if held.is_empty() {
            return;
        }
        match super::poll::still_unacked(conn, def, &held).await {
            Ok(unacked) => {
                let unacked: HashSet<&[u8]> = unacked.iter().map(|k| &k[..]).collect();
                let mut state = self.lock();
                let before = state.unacked.total();
                for key in held.iter().filter(|k| !unacked.contains(&k[..])) {
                    state.unacked.release(key);
                }
                let released = state.unacked.total() < before;
                drop(state);
                if released {
                    self.signal_due();
                }
            }
            Err(e) => debug!("{}: checking held messages for acks: {e}", def.qualified()),
        }
    }

    /// Counts the dead messages and the FIFO groups in flight, for tables with those options
    /// (two index-friendly reads, once a `vt_poller_interval`). A failure leaves the count
    /// unknown until the next tick.
    async fn count(&self, conn: &mut mysql_async::Conn, def: &MessageTable) {
        let dead = count_one(conn, def, super::dead_letter::count_sql(def)).await;
        let keys = count_one(
            conn,
            def,
            super::groups::keys_in_flight_sql(def, state::now_ns()),
        )
        .await;
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()) = (dead, keys);
        if self.count_depths.load(Ordering::Relaxed) {
            let now = state::now_ns();
            let sql = super::depth::depth_sql(def, now);
            use mysql_async::prelude::Queryable;
            let depth = match conn.query_first::<(u64, u64, u64, u64), _>(sql).await {
                Ok(Some((due, in_flight, scheduled, acked))) => Some(super::depth::Depth {
                    due,
                    in_flight,
                    scheduled,
                    acked,
                    at_ns: now,
                }),
                Ok(None) => None,
                Err(e) => {
                    debug!("{}: counting the depth: {e}", def.qualified());
                    None
                }
            };
            *self.depth.lock().unwrap_or_else(|e| e.into_inner()) = depth;
        }
    }

    /// The table's depth as counted at the last purge tick, while the engine counts depths.
    pub fn depth(&self) -> Option<super::depth::Depth> {
        *self.depth.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the depth now (one statement on the engine's pool), for the operator's page right
    /// after an action.
    pub async fn count_now(&self) {
        let def = self.definition();
        if let Ok(mut conn) = self.pool.get_conn().await {
            self.count(&mut conn, &def).await;
        }
    }

    /// Deletes acked rows older than `vt_purge_after` (see `purge`).
    async fn purge(&self) {
        let def = self.definition();
        let purged = match self.pool.get_conn().await {
            Ok(mut conn) => {
                let purged =
                    super::purge::acked_rows(&mut conn, &def, &self.stats, &self.stop).await;
                if purged.is_ok() {
                    self.count(&mut conn, &def).await;
                }
                purged
            }
            Err(e) => Err(e),
        };
        let job = format!("purging {}", def.qualified());
        match purged {
            Ok(()) => self.purge_failures.succeeded(job),
            Err(e) if table_gone(&e) => debug!("{job}: the table is gone: {e}"),
            Err(e) => self.purge_failures.failed(job, e),
        }
    }
}

/// The one number `sql` (a `COUNT`) answers; `None` without a query, or when it fails.
async fn count_one(
    conn: &mut mysql_async::Conn,
    def: &MessageTable,
    sql: Option<String>,
) -> Option<u64> {
    use mysql_async::prelude::Queryable;
    match conn.query_first::<u64, _>(sql?).await {
        Ok(n) => n,
        Err(e) => {
            debug!("{}: counting: {e}", def.qualified());
            None
        }
    }
}

/// The `Instant` of a moment in Unix nanoseconds (now, if it has passed).
fn instant_at(unix_ns: i64) -> Instant {
    let wait_ns = unix_ns.saturating_sub(state::now_ns()).max(0) as u64;
    Instant::now() + std::time::Duration::from_nanos(wait_ns)
}

/// The table was dropped (error 1146): nothing to warn about, the engine's reload (at once
/// after DDL through a proxy, within `RELOAD_INTERVAL` otherwise) stops its manager.
fn table_gone(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == 1146)
}

/// Marks a poll or purge of one table as running while it lives; dropping it (at the job's
/// end, or while a panic unwinds) clears the mark and wakes the manager's loop.
struct JobRunning {
    manager: Arc<TableManager>,
    job: Job,
}

impl Drop for JobRunning {
    fn drop(&mut self) {
        self.manager
            .running(self.job)
            .store(false, Ordering::Release);
        self.manager.kick.notify_one();
    }
}
