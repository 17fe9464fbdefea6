//! The `STREAM`s running through this proxy, by connection id, so that `KILL QUERY id` (the
//! `mariadb` client's Ctrl-C) ends a stream the way it ends a statement on the server: a stream
//! waits between claims with no statement running there, and the server only notes the KILL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct RunningStreams {
    by_connection: Mutex<HashMap<u64, CancellationToken>>,
}

/// A running stream's entry: its token is cancelled by [`RunningStreams::interrupt`]; dropping
/// it removes the entry.
pub struct RunningStream {
    streams: Arc<RunningStreams>,
    connection: u64,
    pub interrupted: CancellationToken,
}

impl RunningStreams {
    /// Registers the stream of connection `connection` until the returned entry is dropped.
    pub fn start(self: &Arc<Self>, connection: u64) -> RunningStream {
        let interrupted = CancellationToken::new();
        self.lock().insert(connection, interrupted.clone());
        RunningStream {
            streams: self.clone(),
            connection,
            interrupted,
        }
    }

    /// Interrupts the stream of `connection`, if one runs through this proxy. Returns whether
    /// one did.
    pub fn interrupt(&self, connection: u64) -> bool {
        match self.lock().get(&connection) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, CancellationToken>> {
        // A panic while holding the lock cannot leave the map half-changed: keep using it.
        self.by_connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for RunningStream {
    fn drop(&mut self) {
        self.streams.lock().remove(&self.connection);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_interrupted_by_its_connection_id_while_it_runs() {
        let streams = Arc::new(RunningStreams::default());
        let running = streams.start(7);
        assert!(!streams.interrupt(8));
        assert!(!running.interrupted.is_cancelled());
        assert!(streams.interrupt(7));
        assert!(running.interrupted.is_cancelled());
        drop(running);
        assert!(!streams.interrupt(7), "gone once the stream ended");
    }
}
