//! What each stream holds: the messages sent to it and not yet acked, for `vt_max_unacked`.
//!
//! Without a limit a stream takes whatever its connection's socket buffers hold, and a slow
//! consumer can sit on thousands of claimed messages until their ack wait passes, when they go
//! to the other streams and the slow one later handles them again. With the limit a stream gets
//! no new batch while it holds that many.
//!
//! A message stops counting when its ack or its deletion is seen (in the binlog, whoever made
//! it), or when its ack wait passes — it is then due again, for any stream. The stream it was
//! sent to may still be working on it, but the table no longer waits for that stream's ack.

use std::collections::{BTreeSet, HashMap};

/// The stream ids are the manager's subscriber ids.
#[derive(Default)]
pub(super) struct Unacked {
    /// Each held message: the stream it was sent to, and when its ack wait passes (Unix ns).
    by_key: HashMap<Box<[u8]>, (u64, i64)>,
    /// The same, by when the ack wait passes, to let go of them in time.
    by_deadline: BTreeSet<(i64, Box<[u8]>)>,
    /// How many messages each stream holds (streams holding none are absent).
    counts: HashMap<u64, usize>,
}

impl Unacked {
    /// `key` was sent to `stream`, and waits for its ack until `deadline`. A message sent again
    /// (its previous ack wait passed) now counts for its new stream only.
    pub(super) fn record(&mut self, stream: u64, key: Box<[u8]>, deadline: i64) {
        self.release(&key);
        self.by_deadline.insert((deadline, key.clone()));
        self.by_key.insert(key, (stream, deadline));
        *self.counts.entry(stream).or_default() += 1;
    }

    /// `key` was acked or deleted.
    pub(super) fn release(&mut self, key: &[u8]) {
        if let Some((stream, deadline)) = self.by_key.remove(key) {
            self.by_deadline.remove(&(deadline, Box::from(key)));
            self.uncount(stream);
        }
    }

    /// `key`, if held, now waits for its ack until `deadline` (`EXTEND`, or its own claim's
    /// update seen in the binlog).
    pub(super) fn extend(&mut self, key: &[u8], deadline: i64) {
        if let Some((_, old)) = self.by_key.get_mut(key) {
            if *old != deadline {
                let was = std::mem::replace(old, deadline);
                let key: Box<[u8]> = Box::from(key);
                self.by_deadline.remove(&(was, key.clone()));
                self.by_deadline.insert((deadline, key));
            }
        }
    }

    /// Lets go of the messages whose ack wait has passed by `now`.
    pub(super) fn expire(&mut self, now: i64) {
        while let Some((deadline, _)) = self.by_deadline.first() {
            if *deadline > now {
                break;
            }
            if let Some((_, key)) = self.by_deadline.pop_first() {
                if let Some((stream, _)) = self.by_key.remove(&key) {
                    self.uncount(stream);
                }
            }
        }
    }

    /// The earliest moment a held message's ack wait passes.
    pub(super) fn next_deadline(&self) -> Option<i64> {
        self.by_deadline.first().map(|(deadline, _)| *deadline)
    }

    /// The messages all streams hold.
    pub(super) fn keys(&self) -> Vec<Box<[u8]>> {
        self.by_key.keys().cloned().collect()
    }

    /// How many messages all streams hold.
    pub(super) fn total(&self) -> usize {
        self.by_key.len()
    }

    /// How many messages `stream` holds.
    pub(super) fn held_by(&self, stream: u64) -> usize {
        self.counts.get(&stream).copied().unwrap_or(0)
    }

    /// `stream` has ended: what it held waits for its ack wait like any sent message, counted
    /// for no one.
    pub(super) fn forget(&mut self, stream: u64) {
        if self.counts.remove(&stream).is_none() {
            return;
        }
        let by_deadline = &mut self.by_deadline;
        self.by_key.retain(|key, (s, deadline)| {
            let keep = *s != stream;
            if !keep {
                by_deadline.remove(&(*deadline, key.clone()));
            }
            keep
        });
    }

    fn uncount(&mut self, stream: u64) {
        if let Some(n) = self.counts.get_mut(&stream) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&stream);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Unacked;

    fn key(n: u32) -> Box<[u8]> {
        n.to_string().into_bytes().into()
    }

    #[test]
    fn acks_deletions_and_passing_ack_waits_release_messages() {
        let mut u = Unacked::default();
        for n in 1..=3 {
            u.record(7, key(n), 100 + i64::from(n));
        }
        u.record(8, key(4), 500);
        assert_eq!((u.held_by(7), u.held_by(8), u.held_by(9)), (3, 1, 0));

        u.release(&key(2));
        u.release(&key(2));
        u.release(&key(99));
        assert_eq!(u.held_by(7), 2);

        u.expire(101);
        assert_eq!(u.held_by(7), 1, "message 1's ack wait passed at 101");
        u.expire(1000);
        assert_eq!((u.held_by(7), u.held_by(8)), (0, 0));
        assert!(u.by_key.is_empty() && u.by_deadline.is_empty() && u.counts.is_empty());
    }

    #[test]
    fn a_message_sent_again_counts_for_its_new_stream_only() {
        let mut u = Unacked::default();
        u.record(1, key(10), 100);
        u.record(2, key(10), 300);
        assert_eq!((u.held_by(1), u.held_by(2)), (0, 1));
        u.expire(200);
        assert_eq!(
            u.held_by(2),
            1,
            "the old deadline is gone with the old sending"
        );
        u.expire(300);
        assert_eq!(u.held_by(2), 0);
    }

    #[test]
    fn an_ended_stream_holds_nothing() {
        let mut u = Unacked::default();
        u.record(1, key(1), 100);
        u.record(1, key(2), 100);
        u.record(2, key(3), 100);
        u.forget(1);
        assert_eq!((u.held_by(1), u.held_by(2)), (0, 1));
        assert_eq!(u.by_key.len(), 1);
        assert_eq!(u.by_deadline.len(), 1);
        u.forget(1);
        u.release(&key(3));
        assert!(u.counts.is_empty());
    }
}
