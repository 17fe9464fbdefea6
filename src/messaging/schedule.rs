//! Messages that become due at a known moment soon: rows this proxy just sent (due again when
//! their ack wait passes, unless acked meanwhile) and rows the poller saw scheduled within the
//! next poll interval. The manager wakes at the earliest of them, so a redelivery or a scheduled
//! message goes out on time instead of at the next poll. Entries are only hints: the claim
//! re-checks each row, so an entry for a row acked meanwhile costs nothing but a skipped claim.

use std::collections::{BTreeSet, HashMap};

use super::cache::Entry;

pub struct Schedule {
    by_time: BTreeSet<(i64, Box<[u8]>)>,
    /// key → (time_next, priority)
    entries: HashMap<Box<[u8]>, (i64, i64)>,
    capacity: usize,
}

impl Schedule {
    pub fn new(capacity: usize) -> Schedule {
        Schedule {
            by_time: BTreeSet::new(),
            entries: HashMap::new(),
            capacity,
        }
    }

    /// Adds or moves an entry. When full, the latest entries give way to earlier ones (the
    /// poller finds the rest in time).
    pub fn insert(&mut self, e: Entry) {
        if let Some((time, _)) = self.entries.remove(&e.key) {
            self.by_time.remove(&(time, e.key.clone()));
        }
        if self.entries.len() >= self.capacity {
            match self.by_time.last() {
                Some((last, _)) if *last > e.time_next => {
                    if let Some((_, key)) = self.by_time.pop_last() {
                        self.entries.remove(&key);
                    }
                }
                _ => return,
            }
        }
        self.by_time.insert((e.time_next, e.key.clone()));
        self.entries.insert(e.key, (e.time_next, e.priority));
    }

    /// The earliest moment an entry becomes due.
    pub fn next_time(&self) -> Option<i64> {
        self.by_time.first().map(|(t, _)| *t)
    }

    /// Removes and returns every entry due at `now`.
    pub fn take_due(&mut self, now: i64) -> Vec<Entry> {
        let mut due = Vec::new();
        while let Some((time, _)) = self.by_time.first() {
            if *time > now {
                break;
            }
            let Some((time_next, key)) = self.by_time.pop_first() else {
                break;
            };
            let priority = self.entries.remove(&key).map(|(_, p)| p).unwrap_or(0);
            due.push(Entry {
                key,
                priority,
                time_next,
            });
        }
        due
    }

    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.entries.remove(key) {
            Some((time, _)) => {
                self.by_time.remove(&(time, Box::from(key)));
                true
            }
            None => false,
        }
    }

    pub fn clear(&mut self) {
        self.by_time.clear();
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(key: &str, time_next: i64) -> Entry {
        Entry {
            key: key.as_bytes().into(),
            priority: 0,
            time_next,
        }
    }

    #[test]
    fn takes_due_entries_in_time_order() {
        let mut s = Schedule::new(10);
        s.insert(e("b", 20));
        s.insert(e("a", 10));
        s.insert(e("c", 30));
        assert_eq!(s.next_time(), Some(10));
        let due: Vec<_> = s.take_due(20).into_iter().map(|e| e.key).collect();
        assert_eq!(due, vec![Box::from(&b"a"[..]), Box::from(&b"b"[..])]);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn reinserting_moves_an_entry() {
        let mut s = Schedule::new(10);
        s.insert(e("a", 10));
        s.insert(e("a", 50));
        assert_eq!(s.len(), 1);
        assert_eq!(s.next_time(), Some(50));
    }

    #[test]
    fn bounded_keeping_the_earliest() {
        let mut s = Schedule::new(2);
        s.insert(e("a", 30));
        s.insert(e("b", 20));
        s.insert(e("c", 10));
        s.insert(e("d", 40));
        assert_eq!(s.len(), 2);
        let due: Vec<_> = s.take_due(100).into_iter().map(|e| e.time_next).collect();
        assert_eq!(due, vec![10, 20]);
    }
}
