//! One consumer group's delivery state, without I/O (docs/STREAMS.md §2-3): its position, the
//! acked events above it, the events read and not yet acked (waiting, or in flight to a stream
//! with a deadline), and where the binlog must be read again from to see every event not done.
//!
//! - **Done** means acked, or skipped by the group's filter. `floor` is the lowest id not done
//!   that the group has read, or, when nothing read is outstanding, one past the last event read:
//!   every event below it is done. `acked` holds the acked ids at or above `floor`.
//! - **Resume**: the start of the transaction of the lowest outstanding event (its GTID event),
//!   or, with nothing outstanding, the end of the last transaction read. Reading from there
//!   yields every event not done; those already done are skipped by `floor` and `acked`.
//! - **Delivery**: waiting events go out in id order (commit order), at most `batch_size` per
//!   batch and `max_unacked` held per stream; an event in flight past its deadline, or whose
//!   stream went away, waits again and goes to any stream of the group (at least once).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::reader::Event;
use crate::binlog::BinlogPosition;

/// A stream of the group, by a number the group hands out.
pub type StreamId = u64;

#[derive(Debug)]
struct Outstanding {
    event: Arc<Event>,
    /// Where to read again from to get this event, on the server the group reads now: its
    /// transaction's start, or after a backend switch ([`GroupState::rebase`]) the position the
    /// group resumed from on the new server (the event's own start is a position of the old one).
    reread_from: BinlogPosition,
    /// `Some((stream, deadline))` while in flight.
    in_flight: Option<(StreamId, Instant)>,
    /// Times handed to a stream.
    deliveries: u32,
}

/// What the durable store keeps of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub floor: u64,
    pub resume: BinlogPosition,
    /// Acked ids at or above `floor`, ascending.
    pub acked: Vec<u64>,
}

/// The delivery state of one group.
#[derive(Debug)]
pub struct GroupState {
    floor: u64,
    acked: BTreeSet<u64>,
    outstanding: BTreeMap<u64, Outstanding>,
    /// Outstanding ids waiting to be sent (not in flight), in sending order.
    waiting: BTreeSet<u64>,
    /// In-flight deadlines, earliest first.
    deadlines: BTreeSet<(Instant, u64)>,
    /// Events each stream holds sent and not acked.
    held: HashMap<StreamId, usize>,
    /// The end of the last transaction read (or where reading started).
    read_upto: BinlogPosition,
    /// The last event id read (of any event of the table, done or not).
    last_read: Option<u64>,
    /// The GTID domain of the table's events read (the reader allows one).
    domain: Option<u32>,
    /// The newest commit time read (Unix seconds), for "behind".
    pub newest_timestamp: u32,
    /// Counters for metrics and SHOW STREAM GROUPS: events handed to streams (first times and
    /// again), of those handed again, and acked.
    pub sent: u64,
    pub redelivered: u64,
    pub acked_count: u64,
    /// Whether something durable changed since the last [`GroupState::take_progress`].
    dirty: bool,
}

impl GroupState {
    /// A group at `progress` (new, or loaded from the store).
    pub fn new(progress: Progress) -> GroupState {
        GroupState {
            floor: progress.floor,
            acked: progress
                .acked
                .into_iter()
                .filter(|id| *id >= progress.floor)
                .collect(),
            outstanding: BTreeMap::new(),
            waiting: BTreeSet::new(),
            deadlines: BTreeSet::new(),
            held: HashMap::new(),
            read_upto: progress.resume,
            last_read: None,
            domain: None,
            newest_timestamp: 0,
            sent: 0,
            redelivered: 0,
            acked_count: 0,
            dirty: false,
        }
    }

    /// Takes in a committed transaction's events (`passes`: the group's filter) and where it ends.
    pub fn committed(
        &mut self,
        events: Vec<Arc<Event>>,
        end: BinlogPosition,
        passes: impl Fn(&Event) -> bool,
    ) {
        for event in events {
            self.last_read = Some(self.last_read.map_or(event.id, |l| l.max(event.id)));
            self.domain = Some(event.domain);
            self.newest_timestamp = self.newest_timestamp.max(event.timestamp);
            if event.id < self.floor || self.acked.contains(&event.id) {
                continue;
            }
            if let Some(known) = self.outstanding.get_mut(&event.id) {
                // Read again (after a switch, on the new server): its start there.
                known.reread_from = event.tx_start.clone();
                continue;
            }
            if !passes(&event) {
                continue;
            }
            self.waiting.insert(event.id);
            self.outstanding.insert(
                event.id,
                Outstanding {
                    reread_from: event.tx_start.clone(),
                    event,
                    in_flight: None,
                    deliveries: 0,
                },
            );
        }
        self.read_to(end);
        self.advance();
    }

    /// Transactions of other tables were read up to `end`.
    pub fn progress(&mut self, end: BinlogPosition) {
        if self.read_to(end) && self.outstanding.is_empty() {
            self.dirty = true;
        }
    }

    /// Everything before `end` has been read; whether that moved `read_upto`. Never back: a
    /// reader that starts again behind it (after falling out of a shared reader) reads what the
    /// group has seen again, and those events are skipped by id.
    fn read_to(&mut self, end: BinlogPosition) -> bool {
        if position_before(&self.read_upto, &end) {
            self.read_upto = end;
            true
        } else {
            false
        }
    }

    /// The group goes on reading another server's binlog, from `resume` there (a backend switch
    /// that this proxy follows with the group). What it has acked, read and sent stays: event ids
    /// are the same on every server of the GTID domain, so the events read again from `resume`
    /// are skipped by id, and those in flight keep their deadlines (sent again only when their
    /// ack wait passes, as without the switch). `read_upto` becomes a position of that server.
    pub fn rebase(&mut self, resume: BinlogPosition) {
        // What is outstanding was read on the old server: until it is read again here, the
        // group resumes at `resume` (a saved old-server position under the new server's name
        // would point into the middle of some other event).
        for o in self.outstanding.values_mut() {
            o.reread_from = resume.clone();
        }
        self.read_upto = resume;
        self.dirty = true;
    }

    /// Where the group has read up to: the end of the last transaction read (or where reading
    /// started).
    pub fn read_upto(&self) -> &BinlogPosition {
        &self.read_upto
    }

    /// Moves `floor` up to the lowest outstanding event, dropping acked ids below it.
    fn advance(&mut self) {
        let floor = match self.outstanding.keys().next() {
            Some(&lowest) => lowest,
            None => self
                .last_read
                .map_or(self.floor, |l| l.saturating_add(1).max(self.floor)),
        };
        if floor != self.floor {
            self.floor = floor;
            self.acked = self.acked.split_off(&floor);
        }
        self.dirty = true;
    }

    /// How many events read are not done (waiting or in flight).
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Events in flight.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len() - self.waiting.len()
    }

    /// Whether the reader should hand the group more events: it keeps at most `window` read and
    /// not done, so a group far behind reads as it delivers.
    pub fn wants_more(&self, window: usize) -> bool {
        self.outstanding.len() < window
    }

    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The next batch for `stream`: at most `batch_size` waiting events, and no more than keeps
    /// the stream within `max_unacked`. They are in flight until `now + ack_wait`.
    pub fn take_batch(
        &mut self,
        stream: StreamId,
        batch_size: usize,
        max_unacked: usize,
        now: Instant,
        ack_wait: Duration,
    ) -> Vec<Arc<Event>> {
        let held = self.held.get(&stream).copied().unwrap_or(0);
        let room = max_unacked.saturating_sub(held).min(batch_size);
        let ids: Vec<u64> = self.waiting.iter().take(room).copied().collect();
        let deadline = now + ack_wait;
        let mut batch = Vec::with_capacity(ids.len());
        for id in ids {
            self.waiting.remove(&id);
            if let Some(o) = self.outstanding.get_mut(&id) {
                o.in_flight = Some((stream, deadline));
                if o.deliveries > 0 {
                    self.redelivered += 1;
                }
                o.deliveries = o.deliveries.saturating_add(1);
                self.sent += 1;
                self.deadlines.insert((deadline, id));
                batch.push(o.event.clone());
            }
        }
        if !batch.is_empty() {
            *self.held.entry(stream).or_default() += batch.len();
        }
        batch
    }

    /// Whether `stream` may be sent more now.
    pub fn has_room(&self, stream: StreamId, max_unacked: usize) -> bool {
        self.held.get(&stream).copied().unwrap_or(0) < max_unacked
    }

    /// Acks `ids`; returns how many were newly acked (unknown, done or repeated ids count 0).
    pub fn ack(&mut self, ids: &[u64]) -> u64 {
        let mut newly = 0;
        for &id in ids {
            let Some(o) = self.outstanding.remove(&id) else {
                continue;
            };
            self.waiting.remove(&id);
            if let Some((stream, deadline)) = o.in_flight {
                self.release(stream);
                self.deadlines.remove(&(deadline, id));
            }
            self.acked.insert(id);
            newly += 1;
        }
        if newly > 0 {
            self.acked_count += newly;
            self.advance();
        }
        newly
    }

    fn release(&mut self, stream: StreamId) {
        if let Some(h) = self.held.get_mut(&stream) {
            *h = h.saturating_sub(1);
            if *h == 0 {
                self.held.remove(&stream);
            }
        }
    }

    /// Events in flight past their deadline wait again. Returns the next deadline, if any.
    pub fn expire(&mut self, now: Instant) -> Option<Instant> {
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                return Some(deadline);
            }
            self.deadlines.pop_first();
            if let Some(o) = self.outstanding.get_mut(&id) {
                if let Some((stream, _)) = o.in_flight.take() {
                    self.waiting.insert(id);
                    self.release(stream);
                }
            }
        }
        None
    }

    /// A stream went away: what it held waits again at once (at least once: it may have been
    /// processed, and is sent again).
    pub fn stream_gone(&mut self, stream: StreamId) {
        let mine: Vec<(u64, Instant)> = self
            .outstanding
            .iter()
            .filter_map(|(id, o)| match o.in_flight {
                Some((s, deadline)) if s == stream => Some((*id, deadline)),
                _ => None,
            })
            .collect();
        for (id, deadline) in mine {
            if let Some(o) = self.outstanding.get_mut(&id) {
                o.in_flight = None;
            }
            self.deadlines.remove(&(deadline, id));
            self.waiting.insert(id);
        }
        self.held.remove(&stream);
    }

    /// Whether everything durable is saved (nothing changed since the last save that worked).
    pub fn is_saved(&self) -> bool {
        !self.dirty
    }

    /// Saves again at the next chance (the last save failed).
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// The durable part, if it changed since the last call.
    pub fn take_progress(&mut self) -> Option<Progress> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        Some(self.snapshot())
    }

    pub fn snapshot(&self) -> Progress {
        let resume = self
            .outstanding
            .values()
            .next()
            .map_or_else(|| self.read_upto.clone(), |o| o.reread_from.clone());
        Progress {
            floor: self.floor,
            resume,
            acked: self.acked.iter().copied().collect(),
        }
    }

    /// The newest transaction with an event done (acked, or below the floor), once an event
    /// of the table was read (its domain is known then): a server the group moves to must
    /// have it, or its next transactions would take ids the group has done.
    pub fn done(&self) -> Option<super::resume::Done> {
        let newest = self
            .acked
            .last()
            .copied()
            .into_iter()
            .chain(self.floor.checked_sub(1))
            .max()?;
        Some(super::resume::Done {
            domain: self.domain?,
            seq: super::reader::seq_no_of(newest),
        })
    }

    /// The position shown to operators: the lowest event id not done.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The commit time of the oldest outstanding event (Unix seconds).
    pub fn oldest_outstanding_timestamp(&self) -> Option<u32> {
        self.outstanding.values().next().map(|o| o.event.timestamp)
    }
}

/// Whether `a` comes before `b` in the binlog. Files are numbered (`mariadb-bin.000123`): a
/// longer name is a later file once the number outgrows its zero padding.
pub fn position_before(a: &BinlogPosition, b: &BinlogPosition) -> bool {
    (a.file.len(), a.file.as_str(), a.pos) < (b.file.len(), b.file.as_str(), b.pos)
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
