//! One binlog reader per stream table for the groups that are at its head (docs/STREAMS.md, "How
//! msgproxy reads events").
//!
//! Every group starts on a reader of its own, from where it must resume. When the table's shared
//! reader reaches the same place, the group hands over to it and its own reader stops; a group
//! that falls behind (its streams do not keep up) leaves the shared reader and reads alone
//! again from its own position. So four groups at the head cost the server one binlog dump
//! thread, not four, and msgproxy decodes each event once; a group far behind still reads the
//! binlog as it delivers (memory bounded), without holding the others back.
//!
//! The shared reader hands out **pieces**: a piece covers the binlog from `from` to `end` (the
//! previous piece's `end` is this one's `from`) and holds that stretch's events of the table. A
//! group can take over from a piece whose `from` is not after where it has read to: nothing
//! between is missed, and events it already has are known by their ids. The pieces go through a
//! broadcast channel; a group that lets it overflow is told so (`Lagged`) and reads alone.
//!
//! A shared reader reads the server in use when it started; at a backend switch it ends (its
//! groups move to the new server themselves, `resume.rs`), and the next subscriber starts one on
//! the new server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::{Conn, Opts};

use crate::cluster::Backends;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::reader::{self, Event, ReaderMsg, ReaderTarget};
use crate::binlog::BinlogPosition;

/// Pieces one shared reader keeps for groups that have not taken them yet. A group at the head
/// takes each as it comes (one a transaction of the table, or one per ~100 ms of other tables'
/// transactions); one that lets this many pile up reads alone instead.
const CAPACITY: usize = 4096;
/// How often an idle shared reader checks whether any group still follows it.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A stretch of the binlog as the shared reader read it.
#[derive(Debug)]
pub struct Piece {
    pub from: BinlogPosition,
    pub end: BinlogPosition,
    /// The table's events committed in this stretch (none: only other tables' transactions).
    pub events: Vec<Arc<Event>>,
}

type Key = (String, String);
/// A running shared reader: its number (so a reader that ends removes only its own entry), its
/// channel, and the switch count of the server it reads.
type Entry = (u64, broadcast::Sender<Arc<Piece>>, u64);

/// The shared readers of one proxy, one per table that has groups following it.
pub struct SharedReaders {
    backends: Arc<Backends>,
    shutdown: CancellationToken,
    /// Per table, the reader that runs.
    readers: Mutex<HashMap<Key, Entry>>,
    next: std::sync::atomic::AtomicU64,
}

impl SharedReaders {
    pub fn new(backends: Arc<Backends>, shutdown: CancellationToken) -> Arc<SharedReaders> {
        Arc::new(SharedReaders {
            backends,
            shutdown,
            readers: Mutex::new(HashMap::new()),
            next: std::sync::atomic::AtomicU64::new(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.readers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows the table's shared reader, starting one at the binlog's end if none runs on the
    /// server in use. The receiver sees the pieces read from now on. `None` when the server in
    /// use is not that of switch `generation` (the caller's positions are another server's).
    pub fn subscribe(
        self: &Arc<Self>,
        schema: &str,
        table: &str,
        generation: u64,
    ) -> Option<broadcast::Receiver<Arc<Piece>>> {
        let key = (schema.to_owned(), table.to_owned());
        let mut switches = self.backends.subscribe();
        let server = switches.borrow_and_update().clone();
        if server.generation != generation {
            return None;
        }
        let mut readers = self.lock();
        if let Some((_, tx, generation)) = readers.get(&key) {
            if *generation == server.generation {
                return Some(tx.subscribe());
            }
        }
        // (A reader of the previous server still in the map ends at its next turn.)
        let (tx, rx) = broadcast::channel(CAPACITY);
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        readers.insert(key.clone(), (id, tx.clone(), server.generation));
        drop(readers);
        let opts: Opts = server.target.mysql_async_opts().into();
        tokio::spawn(self.clone().run(key, id, tx, opts, switches));
        Some(rx)
    }

    /// Removes the reader `id`'s entry if nobody follows it any more (`force`: in any case).
    /// Under the map's lock, which `subscribe` holds while it adds a follower.
    fn retire(&self, key: &Key, id: u64, force: bool) -> bool {
        let mut readers = self.lock();
        let ours = readers.get(key).is_some_and(|(known, ..)| *known == id);
        if !ours {
            return true;
        }
        if force
            || readers
                .get(key)
                .is_some_and(|(_, tx, _)| tx.receiver_count() == 0)
        {
            readers.remove(key);
            return true;
        }
        false
    }

    /// The reader's task: from the binlog's end, every stretch read goes out as a piece, until
    /// nobody follows, the reader fails (its followers then read alone, and meet the failure
    /// themselves, in order), or the proxy stops.
    async fn run(
        self: Arc<Self>,
        key: Key,
        id: u64,
        tx: broadcast::Sender<Arc<Piece>>,
        opts: Opts,
        mut switches: tokio::sync::watch::Receiver<crate::cluster::Current>,
    ) {
        let start = match head(&opts).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("shared stream reader for {}.{}: {e}", key.0, key.1);
                self.retire(&key, id, true);
                return;
            }
        };
        let stop = self.shutdown.child_token();
        let (reader_tx, mut pieces) = mpsc::channel::<ReaderMsg>(reader::QUEUE);
        let target = ReaderTarget {
            opts,
            schema: key.0.clone(),
            table: key.1.clone(),
        };
        tokio::spawn(reader::run(target, start.clone(), reader_tx, stop.clone()));
        let mut from = start;
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let (end, events) = tokio::select! {
                _ = stop.cancelled() => break,
                // Its followers read alone (the channel closes) and move themselves.
                _ = switches.changed() => break,
                _ = check.tick() => {
                    if self.retire(&key, id, false) {
                        break;
                    }
                    continue;
                }
                msg = pieces.recv() => match msg {
                    Some(ReaderMsg::Committed { events, end }) => (end, events),
                    Some(ReaderMsg::Progress(end)) => (end, Vec::new()),
                    Some(ReaderMsg::Opened) => continue,
                    Some(ReaderMsg::Failed(_)) | None => break,
                },
            };
            let piece = Piece {
                from: std::mem::replace(&mut from, end.clone()),
                end,
                events,
            };
            if tx.send(Arc::new(piece)).is_err() && self.retire(&key, id, false) {
                break;
            }
        }
        stop.cancel();
        self.retire(&key, id, true);
    }
}

/// The binlog's end: where a shared reader starts.
async fn head(opts: &Opts) -> Result<BinlogPosition, String> {
    let mut conn = Conn::new(opts.clone()).await.map_err(|e| e.to_string())?;
    let pos = crate::binlog::watcher::current_position(&mut conn)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the server's binary log is off (log_bin = OFF)")?;
    let _ = conn.disconnect().await;
    Ok(pos)
}
