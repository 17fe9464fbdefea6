//! The `STREAM`s running through this proxy, by connection id, so that `KILL QUERY id` (the
//! `mariadb` client's Ctrl-C) ends a stream the way it ends a statement on the server: a stream
//! waits between claims with no statement running there, and the server only notes the KILL.
//! Drivers that prepare every statement (sqlx, mysql_async's `exec`, the `mysql` crate) send the
//! KILL as `COM_STMT_PREPARE` + `COM_STMT_EXECUTE`: [`PreparedKills`] follows those.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::sql::KillQueryTarget;

/// The streams running through this proxy, shared by its sessions.
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

/// A session's prepared `KILL QUERY` statements, by the id the server gave each, so that
/// executing one interrupts a stream as the text form does.
#[derive(Default)]
pub struct PreparedKills {
    by_id: HashMap<u32, PreparedKill>,
}

struct PreparedKill {
    target: KillQueryTarget,
    /// The parameter type the client bound last (`KILL QUERY ?`): a client may leave it out of
    /// later executions.
    bound_type: Option<[u8; 2]>,
}

impl PreparedKills {
    /// After a `COM_STMT_PREPARE` of `sql` answered with statement `id`: remembers it if it is
    /// a `KILL QUERY`.
    pub fn prepared(&mut self, id: u32, sql: &[u8]) {
        if let Some(target) = crate::sql::kill_query(sql) {
            self.by_id.insert(
                id,
                PreparedKill {
                    target,
                    bound_type: None,
                },
            );
        }
    }

    /// The connection whose query a `COM_STMT_EXECUTE` (`payload`, command byte included)
    /// kills, if its statement is a prepared `KILL QUERY`.
    pub fn target(&mut self, statement: u32, payload: &[u8]) -> Option<u64> {
        let kill = self.by_id.get_mut(&statement)?;
        match kill.target {
            KillQueryTarget::Connection(id) => Some(id),
            KillQueryTarget::Parameter => {
                crate::sql::executed_kill_target(payload, &mut kill.bound_type)
            }
        }
    }

    /// After a `COM_STMT_CLOSE`.
    pub fn closed(&mut self, statement: u32) {
        self.by_id.remove(&statement);
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

    #[test]
    fn prepared_kills_are_known_by_statement_id_until_closed() {
        let mut kills = PreparedKills::default();
        kills.prepared(1, b"KILL QUERY 42");
        kills.prepared(2, b"KILL QUERY ?");
        kills.prepared(3, b"SELECT 1");
        let mut execute = vec![0x17, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 8, 0];
        execute.extend_from_slice(&7i64.to_le_bytes());
        assert_eq!(
            kills.target(1, &[0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0]),
            Some(42)
        );
        assert_eq!(kills.target(2, &execute), Some(7));
        assert_eq!(kills.target(3, &execute), None);
        kills.closed(2);
        assert_eq!(kills.target(2, &execute), None);
    }
}
