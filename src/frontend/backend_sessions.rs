//! Questions about a session's backend connection that only another connection to the server
//! can answer (is it still running its command?) and the one action only another connection can
//! take (end it whatever it waits for): through the message engine's pool, logged in as the
//! proxy's own backend user, which every backend session is. With several servers, only while
//! the session's server is still the one the pool goes to: a thread id names another session,
//! or none, on another server.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use tracing::debug;

use crate::relay::{BackendSessions, BoxFuture};

/// The longest either question may take: the pool is shared with the message engine and the
/// server may be slow to answer; a relay waiting on the answer reads nothing meanwhile, and a
/// session's end must not wait long for its KILL.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// [`BackendSessions`] over a `mysql_async` pool.
pub struct PoolSessions {
    pool: crate::cluster::SharedPool,
    /// The switch count of the sessions' server (`crate::cluster::Backends::generation`).
    generation: u64,
}

impl PoolSessions {
    pub fn new(pool: crate::cluster::SharedPool, generation: u64) -> PoolSessions {
        PoolSessions { pool, generation }
    }
}

impl BackendSessions for PoolSessions {
    fn is_idle(&self, connection_id: u32) -> BoxFuture<'_, Option<bool>> {
        Box::pin(async move {
            let ask = async {
                let mut conn = self.pool.get_conn_at(self.generation).await?.ok()?;
                let command: Option<String> = conn
                    .exec_first(
                        "SELECT COMMAND FROM information_schema.PROCESSLIST WHERE ID = ?",
                        (connection_id,),
                    )
                    .await
                    .ok()?;
                // `Sleep`: between commands. Anything else (Query, Execute, Fetch, Killed, ...)
                // is work the server may still answer.
                command.map(|c| c.eq_ignore_ascii_case("Sleep"))
            };
            tokio::time::timeout(ANSWER_WITHIN, ask)
                .await
                .ok()
                .flatten()
        })
    }

    fn kill(&self, connection_id: u32) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let kill = async {
                let Some(conn) = self.pool.get_conn_at(self.generation).await else {
                    // Its server is not the one in use any more: the session goes with it.
                    return Ok(());
                };
                conn?
                    .query_drop(format!("KILL CONNECTION {connection_id}"))
                    .await
            };
            let Ok(result) = tokio::time::timeout(ANSWER_WITHIN, kill).await else {
                debug!(
                    connection_id,
                    "no answer to the KILL of a vanished client's backend session"
                );
                return;
            };
            match result {
                Ok(()) => debug!(
                    connection_id,
                    "ended the backend session of a vanished client"
                ),
                // 1094: the server had ended it already (it noticed the closed socket).
                Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
                Err(e) => debug!(
                    connection_id,
                    "could not end the backend session of a vanished client: {e}"
                ),
            }
        })
    }
}
