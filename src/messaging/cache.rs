//! The due-message cache of one table: the rows the engine believes are due, in sending order, at most
//! `vt_cache_size` of them.
//!
//! The cache is a hint, not the truth. Every row taken from it is claimed in the backend before it is sent
//! (MESSAGING.md §5), so a stale entry costs one skipped claim, and an entry dropped because the cache was full is
//! found again by the poller. That is why a full cache may simply drop what sorts last.
//!
//! Order: `priority` ascending (lower is sent first), then `time_next` ascending (oldest first; callers map a NULL
//! `time_next` to 0), then the key, so that the order is total and repeatable. Keys go shorter first, then byte by
//! byte: a number's key is its decimal text, so rows that are due together (every new row has the same
//! `time_next`, 0) go out in the order of their ids — 2 before 10, as a queue's users expect of auto-increment ids
//! — where plain text order would send 10 to 19 and 100 to 199 before 2. (Negative numbers are not in numeric
//! order; other keys, the hex of a string's bytes, go shorter first.)

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

/// One due row: its id key (see `table::MessageTable::key_sql`) and what orders it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub key: Box<[u8]>,
    /// The row's priority; NULL counts as 0.
    pub priority: i64,
    /// The row's `time_next` in Unix nanoseconds; NULL counts as 0.
    pub time_next: i64,
}

/// The sort key: `(priority, time_next, key)`.
type Slot = (i64, i64, SortKey);

/// A key in sending order: shorter first, then byte by byte (see the module doc).
#[derive(Debug, PartialEq, Eq)]
struct SortKey(Box<[u8]>);

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> Ordering {
        key_order(&self.0, &other.0)
    }
}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn key_order(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// The bounded, deduplicated, ordered set of due rows of one table. Every operation is O(log n).
///
/// Each key is stored twice (in the order and in the index); keys are short ids, and this keeps the code free
/// of shared-ownership bookkeeping.
#[derive(Debug)]
pub struct DueCache {
    /// Entries in sending order.
    order: BTreeSet<Slot>,
    /// Key → its `(priority, time_next)`, to find an entry in `order` by key.
    index: HashMap<Box<[u8]>, (i64, i64)>,
    /// When the proxy first saw each cached row whose `time_next` is NULL or 0 (Unix ns): such a
    /// row has no due time of its own to age from, and without this the oldest due age of a table
    /// of new messages (which is what the RFC's table and insert make) was never shown. Kept
    /// across [`clear`](Self::clear), since a poll clears and refills the cache, and pruned to the
    /// cached keys by [`forget_uncached`](Self::forget_uncached).
    seen: HashMap<Box<[u8]>, i64>,
    capacity: usize,
}

impl DueCache {
    /// An empty cache that never holds more than `capacity` entries (0 makes a cache that holds nothing).
    pub fn new(capacity: usize) -> DueCache {
        DueCache {
            order: BTreeSet::new(),
            index: HashMap::new(),
            seen: HashMap::new(),
            capacity,
        }
    }

    /// Adds a row, or moves it if its key is already present (a key is never in the cache twice). When the cache
    /// is full, a new entry that sorts before the current last one evicts it; otherwise the new entry is
    /// dropped. Returns whether the entry is in the cache afterwards.
    pub fn insert(&mut self, e: Entry) -> bool {
        let Entry {
            key,
            priority,
            time_next,
        } = e;
        if let Some(old) = self.index.get_mut(&key) {
            // Updating in place keeps the size, so it never needs an eviction.
            let (old_priority, old_time_next) = std::mem::replace(old, (priority, time_next));
            let old_slot = (old_priority, old_time_next, SortKey(key));
            self.order.remove(&old_slot);
            self.order.insert((priority, time_next, old_slot.2));
            return true;
        }
        if self.order.len() >= self.capacity {
            let sorts_before_last = match self.order.last() {
                Some((p, t, k)) => (priority, time_next)
                    .cmp(&(*p, *t))
                    .then_with(|| key_order(&key, &k.0))
                    .is_lt(),
                None => false, // capacity 0
            };
            if !sorts_before_last {
                return false;
            }
            if let Some((_, _, evicted)) = self.order.pop_last() {
                self.index.remove(&evicted.0);
                self.seen.remove(&evicted.0);
            }
        }
        if time_next <= 0 && !self.seen.contains_key(&key) {
            self.seen.insert(key.clone(), super::state::now_ns());
        }
        self.index.insert(key.clone(), (priority, time_next));
        self.order.insert((priority, time_next, SortKey(key)));
        true
    }

    /// Takes up to `n` entries from the front, in order.
    pub fn pop_batch(&mut self, n: usize) -> Vec<Entry> {
        let mut batch = Vec::with_capacity(n.min(self.order.len()));
        while batch.len() < n {
            let Some((priority, time_next, SortKey(key))) = self.order.pop_first() else {
                break;
            };
            self.index.remove(&key);
            self.seen.remove(&key);
            batch.push(Entry {
                key,
                priority,
                time_next,
            });
        }
        batch
    }

    /// Removes the entry with this key (acked, or claimed elsewhere). Returns whether it was there.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.index.remove_entry(key) {
            Some((key, (priority, time_next))) => {
                self.seen.remove(&key);
                self.order.remove(&(priority, time_next, SortKey(key)));
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.index.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// When the oldest cached row became due: the earliest positive `time_next`, or for a row
    /// whose `time_next` is NULL or 0 (due since it was written) the moment the proxy first saw
    /// it. O(n): for metrics at scrape time, never on the delivery path.
    pub fn oldest_time_next(&self) -> Option<i64> {
        let scheduled = self
            .index
            .values()
            .map(|&(_, t)| t)
            .filter(|&t| t > 0)
            .min();
        let seeds = self.seen.values().copied().min();
        scheduled.into_iter().chain(seeds).min()
    }

    /// Empties the cache. When first seen rows of NULL/0 `time_next` were is kept, for the rows
    /// put back at once (a poll's refill); [`forget_uncached`](Self::forget_uncached) drops the rest.
    pub fn clear(&mut self) {
        self.order.clear();
        self.index.clear();
    }

    /// Forgets when rows no longer cached were first seen (after a [`clear`](Self::clear) and
    /// refill).
    pub fn forget_uncached(&mut self) {
        let index = &self.index;
        self.seen.retain(|key, _| index.contains_key(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(key: &str, priority: i64, time_next: i64) -> Entry {
        Entry {
            key: key.as_bytes().into(),
            priority,
            time_next,
        }
    }

    fn keys(batch: &[Entry]) -> Vec<String> {
        batch
            .iter()
            .map(|e| String::from_utf8_lossy(&e.key).into_owned())
            .collect()
    }

    /// The two halves agree and the bound holds.
    fn check(c: &DueCache) {
        assert_eq!(c.order.len(), c.index.len());
        assert!(c.len() <= c.capacity());
        for (p, t, k) in &c.order {
            assert_eq!(c.index.get(&k.0), Some(&(*p, *t)));
        }
    }

    #[test]
    fn pops_in_priority_then_time_then_key_order() {
        let mut c = DueCache::new(100);
        for entry in [
            e("c", 0, 5),
            e("a", 1, 0),
            e("b", 0, 5),
            e("d", 0, 0),
            e("e", -1, 99),
            e("f", 0, 3),
        ] {
            assert!(c.insert(entry));
        }
        check(&c);
        assert_eq!(keys(&c.pop_batch(2)), ["e", "d"]);
        assert_eq!(keys(&c.pop_batch(3)), ["f", "b", "c"]);
        let last = c.pop_batch(10);
        assert_eq!(last, [e("a", 1, 0)]);
        assert!(c.is_empty());
        check(&c);
    }

    #[test]
    fn numeric_ids_due_together_go_in_numeric_order() {
        let mut c = DueCache::new(100);
        for id in [10, 2, 100, 1, 11, 19, 3, 20] {
            c.insert(e(&id.to_string(), 0, 0));
        }
        check(&c);
        assert_eq!(
            keys(&c.pop_batch(100)),
            ["1", "2", "3", "10", "11", "19", "20", "100"]
        );
        // A full cache keeps the lowest ids, as the poller's LIMIT (in index order) does.
        let mut c = DueCache::new(3);
        for id in (1..=30).rev() {
            c.insert(e(&id.to_string(), 0, 0));
        }
        assert_eq!(keys(&c.pop_batch(10)), ["1", "2", "3"]);
    }

    #[test]
    fn pop_more_than_len_and_pop_zero() {
        let mut c = DueCache::new(10);
        assert!(c.pop_batch(5).is_empty());
        c.insert(e("a", 0, 1));
        c.insert(e("b", 0, 2));
        assert!(c.pop_batch(0).is_empty());
        assert_eq!(c.len(), 2);
        assert_eq!(keys(&c.pop_batch(usize::MAX)), ["a", "b"]);
        assert!(c.is_empty());
        assert!(!c.contains(b"a"));
        check(&c);
    }

    #[test]
    fn same_key_is_updated_not_duplicated() {
        let mut c = DueCache::new(10);
        assert!(c.insert(e("a", 0, 10)));
        assert!(c.insert(e("b", 0, 20)));
        // Moves "a" behind "b".
        assert!(c.insert(e("a", 0, 30)));
        assert_eq!(c.len(), 2);
        check(&c);
        assert_eq!(keys(&c.pop_batch(10)), ["b", "a"]);

        assert!(c.insert(e("a", 5, 0)));
        assert!(c.insert(e("b", 5, 1)));
        // A priority change moves it to the front.
        assert!(c.insert(e("b", 1, 1)));
        assert_eq!(c.pop_batch(10), [e("b", 1, 1), e("a", 5, 0)]);
    }

    #[test]
    fn updating_a_key_in_a_full_cache_keeps_it() {
        let mut c = DueCache::new(2);
        c.insert(e("a", 0, 1));
        c.insert(e("b", 0, 2));
        // Even when it now sorts last, an existing key stays (the size does not change).
        assert!(c.insert(e("a", 9, 9)));
        assert_eq!(c.len(), 2);
        check(&c);
        assert_eq!(c.pop_batch(2), [e("b", 0, 2), e("a", 9, 9)]);
    }

    #[test]
    fn full_cache_evicts_the_last_or_drops_the_newcomer() {
        let mut c = DueCache::new(3);
        assert!(c.insert(e("a", 0, 10)));
        assert!(c.insert(e("b", 0, 20)));
        assert!(c.insert(e("c", 0, 30)));
        // Sorts after the last: dropped.
        assert!(!c.insert(e("d", 0, 40)));
        assert!(!c.contains(b"d"));
        // Equal to the last in priority and time, larger key: still after it, dropped.
        assert!(!c.insert(e("z", 0, 30)));
        // Before the last: evicts "c".
        assert!(c.insert(e("x", 0, 15)));
        assert!(!c.contains(b"c"));
        assert!(c.contains(b"x"));
        assert_eq!(c.len(), 3);
        // Higher priority (lower number) beats any time.
        assert!(c.insert(e("p", -1, i64::MAX)));
        assert!(!c.contains(b"b"));
        check(&c);
        assert_eq!(keys(&c.pop_batch(10)), ["p", "a", "x"]);
    }

    #[test]
    fn never_holds_more_than_capacity() {
        for capacity in [1, 2, 7, 64] {
            let mut c = DueCache::new(capacity);
            // A deterministic jumble of inserts, updates and removes.
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for _ in 0..5000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = format!("k{}", x % 200);
                match x % 10 {
                    0 => {
                        c.remove(key.as_bytes());
                    }
                    1 => {
                        c.pop_batch((x % 4) as usize);
                    }
                    _ => {
                        c.insert(e(&key, (x % 3) as i64, (x % 1000) as i64));
                    }
                }
                assert!(c.len() <= capacity);
            }
            check(&c);
        }
    }

    #[test]
    fn eviction_keeps_the_best_entries() {
        let mut c = DueCache::new(5);
        for t in (0..100).rev() {
            c.insert(e(&format!("{t:03}"), 0, t));
        }
        assert_eq!(c.len(), 5);
        assert_eq!(keys(&c.pop_batch(10)), ["000", "001", "002", "003", "004"]);
    }

    #[test]
    fn zero_capacity_holds_nothing() {
        let mut c = DueCache::new(0);
        assert!(!c.insert(e("a", 0, 0)));
        assert!(c.is_empty());
        assert_eq!(c.capacity(), 0);
        check(&c);
    }

    #[test]
    fn remove_contains_clear() {
        let mut c = DueCache::new(10);
        c.insert(e("a", 0, 1));
        c.insert(e("b", 0, 2));
        assert!(c.contains(b"a"));
        assert!(c.remove(b"a"));
        assert!(!c.remove(b"a"));
        assert!(!c.contains(b"a"));
        assert!(!c.remove(b"nope"));
        assert_eq!(c.len(), 1);
        check(&c);
        c.clear();
        assert!(c.is_empty());
        assert!(!c.contains(b"b"));
        assert_eq!(c.capacity(), 10);
        // Usable again after clear.
        assert!(c.insert(e("b", 0, 2)));
        check(&c);
    }

    #[test]
    fn binary_keys_and_extreme_values() {
        let mut c = DueCache::new(4);
        let k = |b: &[u8]| -> Box<[u8]> { b.into() };
        for entry in [
            Entry {
                key: k(&[0xff, 0x00]),
                priority: i64::MIN,
                time_next: i64::MAX,
            },
            Entry {
                key: k(&[]),
                priority: i64::MAX,
                time_next: i64::MIN,
            },
            Entry {
                key: k(&[0x00]),
                priority: 0,
                time_next: 0,
            },
        ] {
            assert!(c.insert(entry));
        }
        let order: Vec<Box<[u8]>> = c.pop_batch(10).into_iter().map(|e| e.key).collect();
        assert_eq!(order, [k(&[0xff, 0x00]), k(&[0x00]), k(&[])]);
    }

    #[test]
    fn rows_due_since_written_age_from_when_they_were_first_seen() {
        let mut c = DueCache::new(10);
        assert_eq!(c.oldest_time_next(), None);
        let before = crate::messaging::state::now_ns();
        c.insert(e("1", 0, 0));
        let seen = c.oldest_time_next().expect("a seed has an age");
        assert!(seen >= before, "{seen} {before}");
        // A poll's refill keeps the moment; a row not put back is forgotten.
        c.insert(e("2", 0, 0));
        c.clear();
        c.insert(e("1", 0, 0));
        c.forget_uncached();
        assert_eq!(c.oldest_time_next(), Some(seen));
        // A scheduled row due earlier is older.
        c.insert(e("3", 0, 5));
        assert_eq!(c.oldest_time_next(), Some(5));
        c.remove(b"3");
        c.pop_batch(1);
        assert_eq!(c.oldest_time_next(), None);
    }
}
